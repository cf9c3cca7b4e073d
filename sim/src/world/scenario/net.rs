//! A scenario's congestion control: its `[congestion]` table, ECN marking on its links, what
//! the run's switches and NICs did about congestion, and the `[expect]` bounds on it.

use std::io::Write;

use serde::Deserialize;

use super::report::Report;
use super::spec::{RunBounds, Scenario};
use crate::world::cc::{CcConfig, DcqcnParams};
use crate::world::pfc::PfcConfig;
use crate::world::World;

/// The `[congestion]` table: the NICs' congestion control.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CongestionSpec {
    /// `dcqcn` (the only built-in one; a program adds its own through
    /// [`crate::world::cc::CcAlgorithm`]).
    pub algorithm: String,
    /// A NIC sends at most one CNP per QP every this many µs (DCQCN's N). 50.
    #[serde(default = "default_cnp_interval_us")]
    pub cnp_interval_us: f64,
    /// The most a flow's limiter saves up, bytes. 16384.
    #[serde(default = "default_burst")]
    pub burst_bytes: u64,
    /// DCQCN's parameters (`[congestion.dcqcn]`), each defaulting to the paper's.
    #[serde(default)]
    pub dcqcn: DcqcnParams,
}

/// The `[pfc]` table: priority flow control at every switch ingress port.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcSpec {
    /// The lossless priority, 0..=7. 3.
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// XOFF above this many bytes buffered per ingress port.
    pub xoff_bytes: u64,
    /// XON at or below this many.
    pub xon_bytes: u64,
    /// Bytes above XOFF a port may still take; beyond, a packet is dropped.
    pub headroom_bytes: u64,
}

fn default_priority() -> u8 {
    3
}

fn default_cnp_interval_us() -> f64 {
    50.0
}
fn default_burst() -> u64 {
    16 * 1024
}

/// What the switches and NICs did about congestion in a run.
#[derive(Clone, Debug, Default)]
pub struct NetReport {
    /// The NICs' congestion-control algorithm, if on.
    pub congestion: Option<String>,
    /// Packets marked CE at link queues.
    pub ecn_marked: u64,
    /// CE-marked packets the NICs received.
    pub ce_received: u64,
    /// CNPs the NICs sent.
    pub cnps_sent: u64,
    /// CNPs the NICs received.
    pub cnps_received: u64,
    /// The largest backlog a switch's egress queue held, bytes.
    pub peak_switch_queue_bytes: u64,
    /// The largest mean backlog a switch's egress queue showed the packets entering it, bytes.
    pub mean_switch_queue_bytes: f64,
    /// The lowest rate any flow's limiter was set to, Gbit/s (when congestion control ran).
    pub min_flow_rate_gbps: Option<f64>,
    /// Links with ECN marking configured.
    pub ecn_links: usize,
    /// Whether PFC was on.
    pub pfc: bool,
    /// Times PFC paused a link, all links.
    pub pfc_pauses: u64,
    /// XOFF and XON frames the switches sent.
    pub xoff_frames: u64,
    /// XON frames.
    pub xon_frames: u64,
    /// Time links spent paused, summed, ns.
    pub paused_ns: u64,
    /// Packets dropped for want of PFC headroom.
    pub headroom_drops: u64,
    /// The PFC deadlock detected, as its cycle of nodes.
    pub deadlock: Option<String>,
}

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

/// Jain's fairness index of `xs`: 1 when all are equal, 1/n when one has everything.
pub fn jain(xs: &[f64]) -> f64 {
    let (sum, sq) = xs.iter().fold((0.0, 0.0), |(s, q), &x| (s + x, q + x * x));
    if xs.is_empty() || sq == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}

/// The first congestion bound of `b` the run is outside of, in words.
pub(super) fn outside(r: &Report, b: &RunBounds) -> Option<String> {
    let n = &r.net;
    if let Some(min) = b.min_ecn_marks.filter(|&m| n.ecn_marked < m) {
        return Some(format!("{} packets marked CE, below min_ecn_marks {min}", n.ecn_marked));
    }
    if let Some(min) = b.min_cnps.filter(|&m| n.cnps_sent < m) {
        return Some(format!("{} CNPs sent, below min_cnps {min}", n.cnps_sent));
    }
    if let Some(max) = b.max_switch_queue_bytes.filter(|&m| n.peak_switch_queue_bytes > m) {
        return Some(format!(
            "a switch queue held {} bytes, above max_switch_queue_bytes {max}",
            n.peak_switch_queue_bytes
        ));
    }
    if let Some(max) =
        b.max_mean_switch_queue_bytes.filter(|&m| n.mean_switch_queue_bytes > m as f64)
    {
        return Some(format!(
            "a switch queue showed arriving packets {:.0} bytes on average, above \
             max_mean_switch_queue_bytes {max}",
            n.mean_switch_queue_bytes
        ));
    }
    if let Some(min) = b.min_pfc_pauses.filter(|&m| n.pfc_pauses < m) {
        return Some(format!(
            "PFC paused links {} times, below min_pfc_pauses {min}",
            n.pfc_pauses
        ));
    }
    if let Some(max) = b.max_pfc_pauses.filter(|&m| n.pfc_pauses > m) {
        return Some(format!(
            "PFC paused links {} times, above max_pfc_pauses {max}",
            n.pfc_pauses
        ));
    }
    if b.pfc_deadlock == Some(true) && n.deadlock.is_none() {
        return Some("no PFC deadlock, and pfc_deadlock = true expects one".into());
    }
    for (name, &min) in &b.min_conn_goodput_gbps {
        match r.connections.iter().find(|c| &c.name == name) {
            None => return Some(format!("min_conn_goodput_gbps names no connection {name:?}")),
            Some(c) if c.goodput_gbps < min => {
                return Some(format!(
                    "{name}: goodput {:.3} Gbit/s, below its min_conn_goodput_gbps {min}",
                    c.goodput_gbps
                ))
            }
            Some(_) => {}
        }
    }
    for (name, &max) in &b.max_conn_goodput_gbps {
        match r.connections.iter().find(|c| &c.name == name) {
            None => return Some(format!("max_conn_goodput_gbps names no connection {name:?}")),
            Some(c) if c.goodput_gbps > max => {
                return Some(format!(
                    "{name}: goodput {:.3} Gbit/s, above its max_conn_goodput_gbps {max}",
                    c.goodput_gbps
                ))
            }
            Some(_) => {}
        }
    }
    let rates: Vec<f64> = r.connections.iter().map(|c| c.shared_goodput_gbps).collect();
    let j = jain(&rates);
    if let Some(min) = b.min_jain_fairness.filter(|&m| j < m) {
        return Some(format!(
            "Jain fairness {j:.3} of the connections' goodputs while all were active \
             {rates:.2?} Gbit/s is below min_jain_fairness {min}"
        ));
    }
    None
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

/// The summary's congestion lines, when the run had ECN marking configured or congestion
/// control on (a run without either prints what it always did).
pub(super) fn write_summary(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let n = &r.net;
    if n.pfc {
        writeln!(
            out,
            "  PFC: links paused {} times ({} XOFF frames, {} XON), {:.3} ms paused in all, {} headroom drops{}",
            n.pfc_pauses,
            n.xoff_frames,
            n.xon_frames,
            n.paused_ns as f64 / 1e6,
            n.headroom_drops,
            n.deadlock.as_ref().map_or(String::new(), |d| format!("; DEADLOCK in the cycle {d}"))
        )?;
    }
    if n.congestion.is_none() && n.ecn_links == 0 && !n.pfc {
        return Ok(());
    }
    writeln!(
        out,
        "  congestion: {}; ECN marked {}, CE received {}, CNPs sent {} received {}; switch queue: largest {} bytes, mean seen on arrival {:.0} bytes{}",
        n.congestion.as_deref().unwrap_or("none at the NICs"),
        n.ecn_marked,
        n.ce_received,
        n.cnps_sent,
        n.cnps_received,
        n.peak_switch_queue_bytes,
        n.mean_switch_queue_bytes,
        n.min_flow_rate_gbps.map_or(String::new(), |g| format!("; lowest flow rate {g:.3} Gbit/s"))
    )?;
    let own: Vec<String> = r.connections.iter().map(|c| format!("{:.3}", c.goodput_gbps)).collect();
    let shared: Vec<String> =
        r.connections.iter().map(|c| format!("{:.3}", c.shared_goodput_gbps)).collect();
    let xs: Vec<f64> = r.connections.iter().map(|c| c.shared_goodput_gbps).collect();
    writeln!(
        out,
        "  per-connection goodput Gbit/s: over its own time {}; while all were active {} (Jain fairness {:.3})",
        own.join(" "),
        shared.join(" "),
        jain(&xs)
    )
}
