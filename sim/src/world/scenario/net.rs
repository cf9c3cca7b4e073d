//! A scenario's congestion control and PFC: its `[congestion]` and `[pfc]` tables and ECN
//! marking put into the world, what the switches and NICs did gathered for the report, and a
//! PFC deadlock's verdict. (The tables' model is in `spec.rs`, the report's lines and bounds
//! in `report.rs`.)

use super::report::{NetReport, Report};
use super::spec::Scenario;
use crate::world::cc::CcConfig;
use crate::world::pfc::PfcConfig;
use crate::world::World;

/// Check the scenario's ECN and congestion settings, and turn congestion control on.
pub(super) fn configure(sc: &Scenario, w: &mut World) -> Result<(), String> {
    for (i, l) in w.links().iter().enumerate() {
        if let Some(e) = &l.params.ecn {
            e.check().map_err(|e| format!("link {i}: {e}"))?;
        }
    }
    if let Some(p) = &sc.pfc {
        let cfg = PfcConfig {
            priority: p.priority,
            xoff_bytes: p.xoff_bytes,
            xon_bytes: p.xon_bytes,
            headroom_bytes: p.headroom_bytes,
        };
        cfg.check().map_err(|e| format!("[pfc]: {e}"))?;
        w.set_pfc(Some(cfg));
    }
    let Some(c) = &sc.congestion else { return Ok(()) };
    if c.algorithm != "dcqcn" {
        return Err(format!(
            "[congestion] algorithm {:?} is not known (the built-in one is \"dcqcn\")",
            c.algorithm
        ));
    }
    c.dcqcn.check()?;
    if !(c.cnp_interval_us.is_finite() && c.cnp_interval_us >= 0.0) {
        return Err(format!("[congestion] cnp_interval_us {} is not a time", c.cnp_interval_us));
    }
    let mut cfg = CcConfig::dcqcn(c.dcqcn.clone());
    cfg.cnp_interval_ns = (c.cnp_interval_us * 1000.0) as u64;
    cfg.burst_bytes = c.burst_bytes.max(1);
    w.set_congestion_control(Some(cfg));
    Ok(())
}

/// What the run's switches and NICs did about congestion.
pub(super) fn report(sc: &Scenario, w: &World) -> NetReport {
    let cc = w.cc_total_stats();
    let mut min_rate: Option<f64> = None;
    for n in 0..w.nodes().len() {
        for (_, _, _, lo) in w.cc_flows(n) {
            min_rate = Some(min_rate.map_or(lo, |m| m.min(lo)));
        }
    }
    NetReport {
        congestion: sc.congestion.as_ref().map(|c| c.algorithm.clone()),
        ecn_marked: w.links().iter().map(|l| l.stats.ecn_marked).sum(),
        ce_received: cc.ce_received,
        cnps_sent: cc.cnps_sent,
        cnps_received: cc.cnps_received,
        peak_switch_queue_bytes: w
            .links()
            .iter()
            .filter(|l| w.nodes()[l.src].is_switch())
            .map(|l| l.stats.peak_queue_bytes)
            .max()
            .unwrap_or(0),
        min_flow_rate_gbps: min_rate,
        ecn_links: w.links().iter().filter(|l| l.params.ecn.is_some()).count(),
        pfc: sc.pfc.is_some(),
        pfc_pauses: w.links().iter().map(|l| l.stats.pfc_pauses).sum(),
        xoff_frames: w.pfc_stats().xoff_frames,
        xon_frames: w.pfc_stats().xon_frames,
        paused_ns: w.links().iter().map(|l| l.stats.paused_ns).sum(),
        headroom_drops: w.pfc_stats().headroom_drops,
        deadlock: w.pfc_deadlock().map(|c| w.describe_links(c)),
        mean_switch_queue_bytes: w
            .links()
            .iter()
            .filter(|l| w.nodes()[l.src].is_switch())
            .map(|l| l.mean_queue_bytes())
            .fold(0.0, f64::max),
    }
}

/// Each connection's goodput (Gbit/s) over the time every one of them was active: from the
/// last start to the earliest last completion, counting the WRs completed in it. All zeros if
/// they never overlapped.
pub(super) fn shared_goodputs<'a>(
    conns: impl Iterator<Item = (u64, &'a [(u64, u64)])> + Clone,
) -> Vec<f64> {
    let from = conns.clone().map(|c| c.0).max().unwrap_or(0);
    let to = conns.clone().map(|c| c.1.last().map_or(0, |l| l.0)).min().unwrap_or(0);
    conns
        .map(|(_, log)| {
            if to <= from {
                return 0.0;
            }
            let bytes: u64 = log.iter().filter(|d| d.0 > from && d.0 <= to).map(|d| d.1).sum();
            bytes as f64 * 8.0 / (to - from) as f64
        })
        .collect()
}

/// The failure of a run that stopped in a PFC deadlock, if it did.
pub(super) fn deadlock_failure(w: &World) -> Option<String> {
    w.pfc_deadlock().map(|c| {
        format!("PFC deadlock: a cycle of paused links {} (stopped there)", w.describe_links(c))
    })
}

/// A scenario that expects a PFC deadlock passes when the run detected one and every message
/// that did complete left its bytes (the rest never could).
pub(super) fn settle_expected_deadlock(sc: &Scenario, r: &mut Report) {
    if sc.expect.pfc_deadlock != Some(true) || r.net.deadlock.is_none() {
        return;
    }
    let damaged: Vec<String> = r
        .connections
        .iter()
        .filter_map(|c| c.check_failure.as_ref().map(|e| format!("{}: {e}", c.name)))
        .collect();
    (r.passed, r.failure) = match damaged.is_empty() {
        true => (true, None),
        false => (false, Some(format!("not as expected: {}", damaged.join("; ")))),
    };
    if r.passed {
        if let Some(why) = r.outside(&sc.expect) {
            (r.passed, r.failure) = (false, Some(why));
        }
    }
}
