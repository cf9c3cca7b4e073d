//! What a scenario run did: per-connection outcomes, the world's counters, completion times,
//! what switches and NICs did about congestion (ECN, CNPs, queues, PFC) and the bounds on it,
//! and the summary `softverbs sim` prints.

use std::collections::BTreeMap;
use std::io::Write;

/// One connection's outcome.
#[derive(Clone, Debug)]
pub struct ConnReport {
    /// `from -> to`.
    pub name: String,
    /// WRs posted.
    pub posted: usize,
    /// WRs in the workload.
    pub total: usize,
    /// Messages that completed successfully and left exactly their bytes.
    pub delivered: usize,
    /// Bytes checked: payloads at their targets, READ results, atomic words and results.
    pub verified_bytes: u64,
    /// Completions by status name.
    pub statuses: BTreeMap<&'static str, u64>,
    /// The first completion or data check that failed: the message, and the first byte or
    /// completion field that was wrong.
    pub check_failure: Option<String>,
    /// Whether the outcome is what the scenario expects (statuses, completions and data).
    pub as_expected: bool,
    /// Its goodput over its own time (start to last successful completion), Gbit/s.
    pub goodput_gbps: f64,
    /// Its goodput while every connection was active (from the last start to the first
    /// connection's last completion), Gbit/s: its share of what they shared.
    pub shared_goodput_gbps: f64,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Report {
    /// Scenario name.
    pub name: String,
    /// The seed used.
    pub seed: u64,
    /// The trace hash.
    pub trace_hash: u64,
    /// Trace records.
    pub trace_records: u64,
    /// Virtual time from start to the last completion (or the give-up point), ns.
    pub elapsed_ns: u64,
    /// Events run.
    pub events: u64,
    /// Payload bytes of successful WRs.
    pub goodput_bytes: u64,
    /// Messages that completed successfully with their data checked (all connections).
    pub messages_delivered: u64,
    /// Bytes checked (see [`ConnReport::verified_bytes`]).
    pub verified_bytes: u64,
    /// Packets the NICs transmitted (retransmissions included; not counted per link hop).
    pub packets_sent: u64,
    /// Packets the NICs received and parsed.
    pub packets_received: u64,
    /// Engine retransmissions (all nodes).
    pub retransmits: u64,
    /// RNR NAKs sent (all nodes).
    pub rnr_naks: u64,
    /// PSN-sequence NAKs sent.
    pub seq_naks: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Packets rejected for a bad ICRC.
    pub rx_bad_icrc: u64,
    /// Packets rejected as malformed for another reason (truncated, bad headers).
    pub rx_malformed: u64,
    /// Faults injected, by kind.
    pub faults: Vec<(&'static str, u64)>,
    /// Per-message completion times (post to completion), ns, sorted.
    pub completion_ns: Vec<u64>,
    /// Per connection.
    pub connections: Vec<ConnReport>,
    /// Datagrams delivered over one link (a hop), all links: the simulator's unit of work.
    pub hops: u64,
    /// Wall-clock time the workload took to simulate (not building the world or connecting),
    /// ns. The only figure here that is not a function of the scenario and the seed.
    pub wall_ns: u64,
    /// Whether every connection finished as expected within the bounds.
    pub passed: bool,
    /// Why not, if not.
    pub failure: Option<String>,
    /// Every packet, timer and completion of the run, when [`super::RunOptions::packets`] asked
    /// for them (for a packet ladder).
    pub packets: Option<RunPackets>,
    /// What switches and NICs did about congestion (ECN, CNPs, queues).
    pub net: NetReport,
    /// Each message's completion time and slowdown, time series if sampled, pause time per
    /// port.
    pub results: crate::world::workload::Results,
}

/// What a run kept for drawing it packet by packet: the trace records, the datagram of each
/// delivery and drop, and the completions, each with the node it happened on.
#[derive(Clone, Debug, Default)]
pub struct RunPackets {
    /// The nodes by index: name, and whether it is a switch.
    pub nodes: Vec<(String, bool)>,
    /// The world's clock when the workload started, ns.
    pub start_ns: u64,
    /// Every trace record, in order.
    pub trace: Vec<crate::world::trace::TraceRecord>,
    /// The datagram of each `deliver` and `drop-*` record, in the same order (the trace and the
    /// capture are written at the same moments).
    pub datagrams: Vec<Vec<u8>>,
    /// Each work completion the workload polled: when, on which node, and what
    /// (`IBV_WC_RDMA_WRITE IBV_WC_SUCCESS`), in the order polled.
    pub completions: Vec<(u64, usize, String)>,
}
impl Report {
    /// Goodput over the run's virtual time, Gbit/s.
    pub fn goodput_gbps(&self) -> f64 {
        match self.elapsed_ns {
            0 => 0.0,
            ns => self.goodput_bytes as f64 * 8.0 / ns as f64,
        }
    }

    /// Share of the packets the NICs sent that were retransmissions.
    pub fn retransmit_share(&self) -> f64 {
        match self.packets_sent {
            0 => 0.0,
            n => self.retransmits as f64 / n as f64,
        }
    }

    /// A fault counter by its kind's name (`loss`, `queue-drop`, ...), 0 if it has none.
    pub fn fault(&self, kind: &str) -> u64 {
        self.faults.iter().find(|f| f.0 == kind).map_or(0, |f| f.1)
    }

    /// The first of `b` the run is outside of, said in words.
    pub fn outside(&self, b: &super::RunBounds) -> Option<String> {
        let (gbps, share, drops) =
            (self.goodput_gbps(), self.retransmit_share(), self.fault("queue-drop"));
        if let Some(min) = b.min_goodput_gbps.filter(|&m| gbps < m) {
            return Some(format!("goodput {gbps:.3} Gbit/s is below min_goodput_gbps {min}"));
        }
        if let Some(max) = b.max_retransmit_share.filter(|&m| share > m) {
            return Some(format!(
                "{:.1} % of the packets sent were retransmissions, above max_retransmit_share {max}",
                share * 100.0
            ));
        }
        if let Some(max) = b.max_queue_drops.filter(|&m| drops > m) {
            return Some(format!(
                "{drops} tail drops at switch queues, above max_queue_drops {max}"
            ));
        }
        if let Some(min) = b.min_queue_drops.filter(|&m| drops < m) {
            return Some(format!(
                "{drops} tail drops at switch queues, below min_queue_drops {min}"
            ));
        }
        net_outside(self, b)
    }
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

/// Jain's fairness index of `xs`: 1 when all are equal, 1/n when one has everything.
pub fn jain(xs: &[f64]) -> f64 {
    let (sum, sq) = xs.iter().fold((0.0, 0.0), |(s, q), &x| (s + x, q + x * x));
    if xs.is_empty() || sq == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}

/// The first congestion bound of `b` the run is outside of, in words.
fn net_outside(r: &Report, b: &super::RunBounds) -> Option<String> {
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

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Report {
    /// The `--stats` line: how fast this run simulated, in simulated packets (hops) and
    /// events per wall-clock second, and wall time per event (the figure that shows whether
    /// the cost stays linear as a topology grows). The wall time is the traffic's: the world
    /// and its routes are built before the clock starts.
    pub fn write_stats(&self, out: &mut impl Write) -> std::io::Result<()> {
        let secs = self.wall_ns as f64 / 1e9;
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs / 1e6 } else { 0.0 };
        let ns_per_event = self.wall_ns.checked_div(self.events).unwrap_or(0);
        writeln!(
            out,
            "  stats: {} simulated packets (datagrams over one link), {} events, in {:.3} ms of \
             wall time: {:.2} M packets/s, {:.2} M events/s, {} ns per event",
            self.hops,
            self.events,
            secs * 1e3,
            per_s(self.hops),
            per_s(self.events),
            ns_per_event
        )
    }

    /// The summary `softverbs sim` prints.
    pub fn write_summary(&self, out: &mut impl Write) -> std::io::Result<()> {
        let gbps = self.goodput_gbps();
        writeln!(out, "scenario {}: {}", self.name, if self.passed { "PASSED" } else { "FAILED" })?;
        if let Some(f) = &self.failure {
            writeln!(out, "  why: {f}")?;
        }
        writeln!(
            out,
            "  seed {}  trace hash {:016x} ({} records)",
            self.seed, self.trace_hash, self.trace_records
        )?;
        writeln!(
            out,
            "  virtual time {:.3} ms, {} events",
            self.elapsed_ns as f64 / 1e6,
            self.events
        )?;
        let total: usize = self.connections.iter().map(|c| c.total).sum();
        writeln!(
            out,
            "  messages delivered {} of {total}, {} bytes verified",
            self.messages_delivered, self.verified_bytes
        )?;
        writeln!(out, "  goodput {} bytes, {gbps:.3} Gbit/s", self.goodput_bytes)?;
        writeln!(
            out,
            "  packets sent by NICs {}, received {}; rejected: bad ICRC {}, malformed {}",
            self.packets_sent, self.packets_received, self.rx_bad_icrc, self.rx_malformed
        )?;
        writeln!(
            out,
            "  retransmissions {}  timeouts {}  RNR NAKs {}  sequence NAKs {}",
            self.retransmits, self.timeouts, self.rnr_naks, self.seq_naks
        )?;
        writeln!(
            out,
            "  retransmitted {:.1} % of the packets sent",
            self.retransmit_share() * 100.0
        )?;
        // Where packets were dropped: at switches (a full egress queue, no route) or on cables
        // (the faults a link injects). A NIC's own link paces it and never drops for a full queue.
        writeln!(
            out,
            "  dropped at switches: full egress queue {}, no route {}",
            self.fault("queue-drop"),
            self.fault("no-route")
        )?;
        let cable: Vec<String> = self
            .faults
            .iter()
            .filter(|f| f.1 > 0 && f.0 != "queue-drop" && f.0 != "no-route")
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let cable = if cable.is_empty() { "none".to_string() } else { cable.join(", ") };
        writeln!(out, "  faults on cables: {cable}")?;
        let c = &self.completion_ns;
        writeln!(
            out,
            "  completion time µs: min {:.2} median {:.2} p99 {:.2} max {:.2} ({} messages)",
            c.first().copied().unwrap_or(0) as f64 / 1e3,
            percentile(c, 0.5) as f64 / 1e3,
            percentile(c, 0.99) as f64 / 1e3,
            c.last().copied().unwrap_or(0) as f64 / 1e3,
            c.len()
        )?;
        write_net_summary(self, out)?;
        for conn in &self.connections {
            let st: Vec<String> = conn.statuses.iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(
                out,
                "  {}: posted {}/{}, delivered {} ({} bytes verified), {} [{}]",
                conn.name,
                conn.posted,
                conn.total,
                conn.delivered,
                conn.verified_bytes,
                st.join(", "),
                if conn.as_expected { "as expected" } else { "NOT as expected" }
            )?;
            if let Some(e) = &conn.check_failure {
                writeln!(out, "    check failed: {e}")?;
            }
        }
        Ok(())
    }
}

/// The summary's congestion lines, when the run had ECN marking configured or congestion
/// control on (a run without either prints what it always did).
fn write_net_summary(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
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

impl Report {
    /// The report as one JSON object (`softverbs sim --json`): the summary's figures, each
    /// connection's, and the [`crate::world::workload::Results`] (flows and their slowdowns,
    /// slowdown by size bucket, pause time per port, time series). A newline ends it.
    pub fn write_json(&self, out: &mut impl Write) -> std::io::Result<()> {
        use crate::world::workload::{json_num, json_str};
        let n = &self.net;
        write!(
            out,
            "{{\"name\":{},\"seed\":{},\"passed\":{},\"failure\":{},\"trace_hash\":\"{:016x}\",\
             \"trace_records\":{},\"elapsed_ns\":{},\"events\":{},\"goodput_bytes\":{},\
             \"goodput_gbps\":{},\"messages_delivered\":{},\"packets_sent\":{},\
             \"retransmits\":{},\"timeouts\":{},\"queue_drops\":{},\"ecn_marked\":{},\
             \"cnps_sent\":{},\"peak_switch_queue_bytes\":{},\"pfc_pauses\":{},\"paused_ns\":{},\
             \"pfc_deadlock\":{},\"connections\":[",
            json_str(&self.name),
            self.seed,
            self.passed,
            self.failure.as_deref().map_or("null".into(), json_str),
            self.trace_hash,
            self.trace_records,
            self.elapsed_ns,
            self.events,
            self.goodput_bytes,
            json_num(self.goodput_gbps()),
            self.messages_delivered,
            self.packets_sent,
            self.retransmits,
            self.timeouts,
            self.fault("queue-drop"),
            n.ecn_marked,
            n.cnps_sent,
            n.peak_switch_queue_bytes,
            n.pfc_pauses,
            n.paused_ns,
            n.deadlock.as_deref().map_or("null".into(), json_str),
        )?;
        for (i, c) in self.connections.iter().enumerate() {
            write!(
                out,
                "{}{{\"name\":{},\"posted\":{},\"total\":{},\"delivered\":{},\"as_expected\":{},\
                 \"goodput_gbps\":{}}}",
                if i > 0 { "," } else { "" },
                json_str(&c.name),
                c.posted,
                c.total,
                c.delivered,
                c.as_expected,
                json_num(c.goodput_gbps)
            )?;
        }
        write!(out, "],\"results\":")?;
        self.results.write_json(out)?;
        writeln!(out, "}}")
    }
}

/// A completion as the CQE log shows it: its opcode and status, or, in error, its wr_id and
/// status (the opcode of a completion in error is undefined; rxe leaves it 0).
pub fn cqe_label(wc: &verbs_api::WorkCompletion) -> String {
    if wc.status == verbs_api::WcStatus::Success {
        format!("{} {}", wc.opcode.name(), wc.status.name())
    } else {
        format!("wr_id {} {}", wc.wr_id, wc.status.name())
    }
}
