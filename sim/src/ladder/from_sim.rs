//! A ladder from a simulator run: the trace's deliveries and drops become arrows (from the
//! host that sent the datagram to the host it was for, switches left out), its timer records
//! become timer marks, and the completions the workload polled become completion marks.

use crate::world::scenario::RunPackets;
use crate::world::trace::TraceKind;

use super::model::{Ladder, MarkKind, Packet};

/// Why a dropped packet never arrived, in the ladder's words.
fn drop_cause(kind: TraceKind) -> Option<&'static str> {
    Some(match kind {
        TraceKind::DropLoss => "lost",
        TraceKind::DropQueue => "queue full",
        TraceKind::DropPartition => "partitioned",
        TraceKind::DropNth => "dropped by a fault",
        TraceKind::DropNoRoute => "no route",
        _ => return None,
    })
}

/// The node a simulated port's IPv4 address names (10.0.0.<index + 1>).
fn node_of(datagram: &[u8], at: usize) -> Option<usize> {
    let b = datagram.get(at..at + 4)?;
    (b[0] == 10 && b[1] == 0 && b[2] == 0 && b[3] > 0).then(|| b[3] as usize - 1)
}

/// The ladder of a run that kept its packets ([`crate::world::scenario::RunOptions::packets`]).
/// Times are from the start of the workload.
pub fn ladder(title: &str, run: &RunPackets) -> Ladder {
    // The lifelines: every host a packet left or reached, or a completion happened on, in
    // node order.
    let mut used = vec![false; run.nodes.len()];
    for d in &run.datagrams {
        for at in [12, 16] {
            if let Some(n) = node_of(d, at).filter(|&n| n < used.len()) {
                used[n] = true;
            }
        }
    }
    for &(_, n, _) in &run.completions {
        if let Some(u) = used.get_mut(n) {
            *u = true;
        }
    }
    let mut lane_of = vec![None; run.nodes.len()];
    let mut lanes = Vec::new();
    for (n, (name, switch)) in run.nodes.iter().enumerate() {
        if used[n] && !switch {
            lane_of[n] = Some(lanes.len());
            lanes.push(name.clone());
        }
    }
    let mut l = Ladder::new(title, lanes);
    let since = |t: u64| Some(t.saturating_sub(run.start_ns));
    let mut datagrams = run.datagrams.iter();
    let mut cqes = run.completions.iter().peekable();
    for r in &run.trace {
        // Completions were polled between events: each goes before the first record after it.
        while let Some(&&(t, node, ref what)) = cqes.peek() {
            if t >= r.time_ns {
                break;
            }
            if let Some(lane) = lane_of.get(node).copied().flatten() {
                l.mark(lane, since(t), MarkKind::Completion, format!("CQE {what}"));
            }
            cqes.next();
        }
        let dropped = drop_cause(r.kind);
        if r.kind == TraceKind::Deliver || dropped.is_some() {
            let Some(d) = datagrams.next() else { continue };
            let lane = |at| node_of(d, at).and_then(|n| lane_of.get(n).copied().flatten());
            if let (Some(from), Some(to)) = (lane(12), lane(16)) {
                let mut p = Packet::from_datagram(from, to, since(r.time_ns), d);
                p.dropped = dropped;
                l.packet(p);
            }
        } else if r.kind == TraceKind::Timer {
            if let Some(lane) = lane_of.get(r.node as usize).copied().flatten() {
                l.timer(lane, since(r.time_ns));
            }
        }
    }
    for &(t, node, ref what) in cqes {
        if let Some(lane) = lane_of.get(node).copied().flatten() {
            l.mark(lane, since(t), MarkKind::Completion, format!("CQE {what}"));
        }
    }
    l
}
