//! Fault schedules onto links: a case's fault values become link changes, applied now or
//! scheduled in virtual time.

use super::{Dir, FaultEvent, FaultKind};
use crate::world::{LinkChange, LinkId, LinkParams, NodeId, SimWorld, World};

/// The links a switch sends on towards a case's nodes: a quarter of the hosts' 100 Gbit/s, with
/// the case's queue limit. The NICs are paced by their own links and never drop there (as on a
/// real port); a burst meets a finite queue where a real network has one, at the switch
/// between a fast port and a slower one, which tail-drops what does not fit.
pub fn switch_egress(queue_limit: usize) -> LinkParams {
    LinkParams { bandwidth_gbps: 25.0, queue_limit, ..LinkParams::default() }
}

/// Join `node` to switch `sw`: its own link in (the default 100 Gbit/s) and the switch's
/// egress link out to it (`egress`), which carries the faults. Returns the egress link.
pub fn attach(w: &mut World, node: NodeId, sw: NodeId, egress: &LinkParams) -> LinkId {
    w.add_link(node, sw, LinkParams::default());
    w.add_link(sw, node, egress.clone())
}

/// Turn fault values into link changes on the link pair `forward` (requests, the switch's link
/// to the responder) and `backward` (responses, its link to the requester), relative to `start`: at each boundary, each direction's parameters are `base`
/// plus every fault active then (so overlapping faults combine); `DropNth` counts from the
/// packets the link has carried so far; a partition cuts and heals both. Changes due by now
/// apply at once (faults at 0 ns act on the WRs posted next), later ones are scheduled.
pub fn schedule_faults(
    world: &SimWorld,
    start: u64,
    faults: &[FaultEvent],
    base: &LinkParams,
    forward: LinkId,
    backward: LinkId,
) {
    let mut w = world.lock();
    let now = w.now_ns();
    // A change due now applies at once, so it acts on what is posted right after.
    let change = |w: &mut World, at_ns: u64, link: LinkId, c: LinkChange| {
        if at_ns <= now {
            w.change_link(link, c);
        } else {
            w.schedule(at_ns, link, c);
        }
    };
    let link = |d: Dir| if d == Dir::Forward { forward } else { backward };
    let mut bounds: Vec<u64> = Vec::new();
    for f in faults {
        match f.kind {
            FaultKind::Loss { dur_ns, .. }
            | FaultKind::Duplicate { dur_ns, .. }
            | FaultKind::Corrupt { dur_ns, .. }
            | FaultKind::Truncate { dur_ns, .. }
            | FaultKind::Reorder { dur_ns, .. } => {
                bounds.push(f.at_ns);
                bounds.push(f.at_ns.saturating_add(dur_ns));
            }
            FaultKind::DropNth { dir, n } => {
                let l = link(dir);
                let from = w.links()[l].stats.offered;
                w.change_link(l, LinkChange::DropNth(from + n));
            }
            FaultKind::Partition { dur_ns } => {
                for l in [forward, backward] {
                    change(&mut w, start + f.at_ns, l, LinkChange::Partition);
                    change(&mut w, start + f.at_ns.saturating_add(dur_ns), l, LinkChange::Heal);
                }
            }
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    let rate = |ppm: u32| f64::from(ppm.min(1_000_000)) / 1e6;
    for &t in &bounds {
        for d in [Dir::Forward, Dir::Backward] {
            let mut p = base.clone();
            let active = |at: u64, dur: u64| at <= t && t < at.saturating_add(dur);
            for f in faults {
                match f.kind {
                    FaultKind::Loss { dir, ppm, dur_ns } if dir == d && active(f.at_ns, dur_ns) => {
                        p.loss = p.loss.max(rate(ppm))
                    }
                    FaultKind::Duplicate { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.dup = p.dup.max(rate(ppm))
                    }
                    FaultKind::Corrupt { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.corrupt = p.corrupt.max(rate(ppm))
                    }
                    FaultKind::Truncate { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.truncate = p.truncate.max(rate(ppm))
                    }
                    FaultKind::Reorder { dir, jitter_ns, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.reorder_jitter_ns = p.reorder_jitter_ns.max(jitter_ns)
                    }
                    _ => {}
                }
            }
            change(&mut w, start + t, link(d), LinkChange::Params(p));
        }
    }
}
