//! What a scenario run did: per-connection outcomes, the world's counters, completion times,
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
    /// Whether every connection finished as expected within the bounds.
    pub passed: bool,
    /// Why not, if not.
    pub failure: Option<String>,
}
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Report {
    /// The summary `softverbs sim` prints.
    pub fn write_summary(&self, out: &mut impl Write) -> std::io::Result<()> {
        let secs = self.elapsed_ns as f64 / 1e9;
        let gbps = if secs > 0.0 { self.goodput_bytes as f64 * 8.0 / secs / 1e9 } else { 0.0 };
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
        let faults: Vec<String> =
            self.faults.iter().filter(|f| f.1 > 0).map(|(k, n)| format!("{k} {n}")).collect();
        let faults = if faults.is_empty() { "none".to_string() } else { faults.join(", ") };
        writeln!(out, "  faults injected: {faults}")?;
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
