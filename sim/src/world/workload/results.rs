//! What a run's flows achieved: each message's completion time against the ideal on an empty
//! network (its slowdown), summarised by size bucket; the switch queues' and hosts' rates as
//! time series; the time each port spent paused. Written as text tables and JSON.

use std::io::Write;

/// One message (a generated flow is one WRITE): its size, when it was posted, how long it took
/// to complete, and the ideal.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRecord {
    /// The connection's name (`h0 -> h3`).
    pub conn: String,
    /// Payload bytes.
    pub size: u64,
    /// Posted, ns after the start.
    pub start_ns: u64,
    /// Post to completion, ns (the flow completion time).
    pub fct_ns: u64,
    /// The same message's completion time on an empty network ([`ideal_fct_ns`]).
    pub ideal_ns: u64,
}

impl FlowRecord {
    /// FCT over the ideal FCT: at least 1, since the ideal is a lower bound.
    pub fn slowdown(&self) -> f64 {
        self.fct_ns as f64 / self.ideal_ns.max(1) as f64
    }
}

/// The ideal completion time of `size` payload bytes on an empty network: the payload at the
/// line rate of the link it leaves on (`gbps`), plus the propagation delays of the shortest
/// path there and back (`rtt_ns`: the request or data out, the ACK or response back). It
/// leaves out headers, store-and-forward at each hop and the engine's own steps, so it is a
/// lower bound: an unloaded long flow shows the headers' few per cent above 1.
pub fn ideal_fct_ns(size: u64, gbps: f64, rtt_ns: u64) -> u64 {
    let wire = if gbps > 0.0 && gbps.is_finite() { size as f64 * 8.0 / gbps } else { 0.0 };
    rtt_ns + wire.floor() as u64
}

/// The size buckets' upper edges, bytes (the last bucket is everything above the last edge).
pub const BUCKET_EDGES: [u64; 4] = [10_000, 100_000, 1_000_000, 10_000_000];

/// The slowdowns of the flows in one size bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowdownBucket {
    /// `< 10 KB`, `10 KB - 100 KB`, ...
    pub label: String,
    /// Flows in it.
    pub flows: usize,
    /// Mean slowdown.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1_000_000 => format!("{} MB", b / 1_000_000),
        b if b >= 1_000 => format!("{} KB", b / 1_000),
        b => format!("{b} B"),
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// The flows' slowdowns by size bucket (empty buckets left out), then all flows together.
pub fn bucket_table(flows: &[FlowRecord]) -> Vec<SlowdownBucket> {
    let mut out = Vec::new();
    let n = BUCKET_EDGES.len();
    for b in 0..=n {
        let lo = if b == 0 { 0 } else { BUCKET_EDGES[b - 1] };
        let hi = if b == n { u64::MAX } else { BUCKET_EDGES[b] };
        let label = match b {
            0 => format!("< {}", human(hi)),
            b if b == n => format!(">= {}", human(lo)),
            _ => format!("{} - {}", human(lo), human(hi)),
        };
        let xs: Vec<f64> =
            flows.iter().filter(|f| f.size >= lo && f.size < hi).map(|f| f.slowdown()).collect();
        if let Some(b) = summarise(label, xs) {
            out.push(b);
        }
    }
    if let Some(b) = summarise("all".into(), flows.iter().map(|f| f.slowdown()).collect()) {
        out.push(b);
    }
    out
}

fn summarise(label: String, mut xs: Vec<f64>) -> Option<SlowdownBucket> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    Some(SlowdownBucket {
        label,
        flows: xs.len(),
        mean: xs.iter().sum::<f64>() / xs.len() as f64,
        p50: pct(&xs, 0.5),
        p95: pct(&xs, 0.95),
        p99: pct(&xs, 0.99),
        max: xs[xs.len() - 1],
    })
}

/// A time series: a value per sample time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// What it measures (`sw0 -> h1 queue bytes`, `h0 tx Gbit/s`).
    pub name: String,
    /// `(ns after the start, value)`.
    pub points: Vec<(u64, f64)>,
}

/// The time one port (a link's sending end) spent paused by PFC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPause {
    /// `sw0 -> sw1`.
    pub link: String,
    /// Times paused.
    pub pauses: u64,
    /// Time paused in all, ns.
    pub paused_ns: u64,
}

/// A run's results: per-message completion times, time series and pauses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Results {
    /// Every successful message, in completion order.
    pub flows: Vec<FlowRecord>,
    /// Switch egress queue lengths (bytes) over time, the busiest queues only.
    pub queues: Vec<Series>,
    /// Each host's transmit rate (Gbit/s over each sample interval) over time.
    pub rates: Vec<Series>,
    /// Every port PFC paused.
    pub pauses: Vec<PortPause>,
    /// With congestion control on, the first eight flows' rate limits (Gbit/s) over time: DCQCN's
    /// sawtooth.
    pub cc_rates: Vec<Series>,
    /// The sample interval of the series, ns (0: none taken).
    pub sample_ns: u64,
}

impl Results {
    /// The text tables: slowdown by size bucket, pause time per port, and a line per series
    /// (its peak and mean).
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let t = bucket_table(&self.flows);
        if !t.is_empty() {
            writeln!(
                out,
                "  flow completion time slowdown (FCT / ideal FCT on an empty network):"
            )?;
            writeln!(
                out,
                "    {:<16} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
                "size", "flows", "mean", "p50", "p95", "p99", "max"
            )?;
            for b in &t {
                writeln!(
                    out,
                    "    {:<16} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                    b.label, b.flows, b.mean, b.p50, b.p95, b.p99, b.max
                )?;
            }
        }
        if !self.pauses.is_empty() {
            writeln!(out, "  pause time per port:")?;
            for p in &self.pauses {
                writeln!(
                    out,
                    "    {:<24} paused {:>5} times, {:>10.3} µs",
                    p.link,
                    p.pauses,
                    p.paused_ns as f64 / 1e3
                )?;
            }
        }
        for (what, series) in [
            ("queue bytes", &self.queues),
            ("tx Gbit/s", &self.rates),
            ("rate limit Gbit/s", &self.cc_rates),
        ] {
            if series.is_empty() {
                continue;
            }
            writeln!(
                out,
                "  {what} every {:.1} µs ({} series; --json or --plots for the points):",
                self.sample_ns as f64 / 1e3,
                series.len()
            )?;
            for s in series {
                let peak = s.points.iter().map(|p| p.1).fold(0.0, f64::max);
                let mean = s.points.iter().map(|p| p.1).sum::<f64>() / s.points.len().max(1) as f64;
                writeln!(out, "    {:<24} peak {peak:>12.1} mean {mean:>12.1}", s.name)?;
            }
        }
        Ok(())
    }

    /// The results as a JSON object (no trailing newline).
    pub fn write_json(&self, out: &mut impl Write) -> std::io::Result<()> {
        write!(out, "{{\"flows\":[")?;
        for (i, f) in self.flows.iter().enumerate() {
            write!(
                out,
                "{}{{\"conn\":{},\"size\":{},\"start_ns\":{},\"fct_ns\":{},\"ideal_ns\":{},\"slowdown\":{}}}",
                if i > 0 { "," } else { "" },
                json_str(&f.conn),
                f.size,
                f.start_ns,
                f.fct_ns,
                f.ideal_ns,
                json_num(f.slowdown())
            )?;
        }
        write!(out, "],\"slowdown_by_size\":[")?;
        for (i, b) in bucket_table(&self.flows).iter().enumerate() {
            write!(
                out,
                "{}{{\"bucket\":{},\"flows\":{},\"mean\":{},\"p50\":{},\"p95\":{},\"p99\":{},\"max\":{}}}",
                if i > 0 { "," } else { "" },
                json_str(&b.label),
                b.flows,
                json_num(b.mean),
                json_num(b.p50),
                json_num(b.p95),
                json_num(b.p99),
                json_num(b.max)
            )?;
        }
        write!(out, "],\"pauses\":[")?;
        for (i, p) in self.pauses.iter().enumerate() {
            write!(
                out,
                "{}{{\"port\":{},\"pauses\":{},\"paused_ns\":{}}}",
                if i > 0 { "," } else { "" },
                json_str(&p.link),
                p.pauses,
                p.paused_ns
            )?;
        }
        write!(out, "],\"sample_ns\":{}", self.sample_ns)?;
        for (key, series) in
            [("queues", &self.queues), ("rates", &self.rates), ("cc_rates", &self.cc_rates)]
        {
            write!(out, ",\"{key}\":[")?;
            for (i, s) in series.iter().enumerate() {
                write!(
                    out,
                    "{}{{\"name\":{},\"points\":[",
                    if i > 0 { "," } else { "" },
                    json_str(&s.name)
                )?;
                for (j, (t, v)) in s.points.iter().enumerate() {
                    write!(out, "{}[{t},{}]", if j > 0 { "," } else { "" }, json_num(*v))?;
                }
                write!(out, "]}}")?;
            }
            write!(out, "]")?;
        }
        write!(out, "}}")
    }
}

/// `s` as a JSON string.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `x` as a JSON number (JSON has no infinity or NaN: null).
pub fn json_num(x: f64) -> String {
    if x.is_finite() {
        // The shortest text that reads back as the same f64 (`1.5`, `2.0`, `1e-7`).
        format!("{x:?}")
    } else {
        "null".into()
    }
}
