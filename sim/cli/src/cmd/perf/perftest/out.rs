//! What the perftest-style tests print: perftest's banner and address lines, its result
//! tables (`ib_write_bw`'s `#bytes #iterations BW peak[MiB/sec] …`, `ib_send_lat`'s
//! `#bytes #iterations t_min[usec] …`), the figures behind them computed as perftest computes
//! them, one JSON object per row for `--json`, the SVG of an `-a` sweep for `--plot`, and the
//! progress line a terminal gets on long runs.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use verbs_api::Gid;

/// perftest's `RESULT_LINE`.
pub(super) const RULE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's `RESULT_FMT` (MiB/sec: 2^20 bytes a second).
pub(super) const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
/// perftest's `RESULT_FMT_G` (`--report_gbits`: 10^9 bits a second).
pub(super) const BW_HEADER_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// perftest's `RESULT_FMT_LAT`.
pub(super) const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// perftest's `RESULT_FMT_LAT_DUR` (a latency test with `-D`).
pub(super) const LAT_DUR_HEADER: &str =
    " #bytes        #iterations       t_avg[usec]    tps average";
/// perftest drops this many of the slowest samples before its latency statistics
/// (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

/// C's `%#0Nx`: `0x`-prefixed lowercase hex zero-padded to `width` characters in all, and
/// plain zeros for 0 (C adds no prefix to 0), as perftest prints LIDs, QPNs, PSNs and keys.
pub(super) fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        return format!("{:0width$}", 0);
    }
    format!("{v:#0width$x}")
}

/// perftest's `PERF_GID_FMT`: the 16 bytes in decimal, two digits at least, colon-separated.
pub(super) fn gid_line(gid: &Gid) -> String {
    let bytes: Vec<String> = gid.0.iter().map(|b| format!("{b:02}")).collect();
    format!(" GID: {}", bytes.join(":"))
}

/// One side's address as perftest prints it (`BASIC_ADDR_FMT`, then `OUT` for READ and the
/// RKey and VAddr for READ and WRITE).
pub(super) struct AddrLine<'a> {
    pub(super) side: &'a str,
    pub(super) lid: u16,
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) out_reads: Option<u8>,
    pub(super) rdma: Option<(u32, u64)>,
}

impl AddrLine<'_> {
    pub(super) fn render(&self) -> String {
        let mut s = format!(
            " {} address: LID {} QPN {} PSN {}",
            self.side,
            c_hex(self.lid.into(), 4),
            c_hex(self.qpn.into(), 6),
            c_hex(self.psn.into(), 6)
        );
        if let Some(o) = self.out_reads {
            s += &format!(" OUT {}", c_hex(o.into(), 4));
        }
        if let Some((rkey, vaddr)) = self.rdma {
            s += &format!(" RKey {} VAddr {}", c_hex(rkey.into(), 8), c_hex(vaddr, 16));
        }
        s
    }
}

/// One bandwidth row, in the unit asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct BwRow {
    pub(super) bytes: u32,
    pub(super) iters: u64,
    pub(super) peak: f64,
    pub(super) avg: f64,
    pub(super) msg_rate_mpps: f64,
}

/// The bytes a second of one unit: 2^20 for MiB/sec, 125 000 000 (10^9 bits) for Gb/sec,
/// as perftest's `format_factor`.
pub(super) fn bw_unit(gbits: bool) -> f64 {
    if gbits {
        125_000_000.0
    } else {
        1_048_576.0
    }
}

/// The bandwidth row of `ops` operations of `bytes` from `posted`/`completed` timestamps (ns),
/// as perftest's `print_report_bw`: the average over the first post to the last completion;
/// the peak from the fastest stretch from any post to a later signaled completion (0 when
/// there are no per-operation timestamps: a `-D` run, as perftest's `noPeak`).
pub(super) fn bw_row(
    bytes: u32,
    ops: u64,
    elapsed_ns: u64,
    posted: &[u64],
    completed: &[(u64, u64)],
    gbits: bool,
) -> BwRow {
    let unit = bw_unit(gbits);
    // As perftest, the average and the message rate come from the same stamps as the peak
    // when there are any (the first post to the last completion, which the peak's search also
    // looks at, so the peak is never below the average); else from the run's own clock.
    let stamped = match (posted.first(), completed.last()) {
        (Some(&tp), Some(&(done, tc))) if done == ops && tc > tp => Some(tc - tp),
        _ => None,
    };
    let secs = stamped.unwrap_or(elapsed_ns).max(1) as f64 / 1e9;
    let avg = bytes as f64 * ops as f64 / secs / unit;
    let mut best = f64::MAX;
    // perftest looks at every (post, later signaled completion) pair; past a few million pairs
    // this samples the posts at a stride, which can only miss a slightly faster stretch.
    let pairs = posted.len() as u64 * completed.len() as u64;
    let stride = (pairs / 20_000_000).max(1) as usize;
    for (i, &tp) in posted.iter().enumerate().step_by(stride) {
        for &(done, tc) in completed {
            if done as usize > i && tc > tp {
                best = best.min((tc - tp) as f64 / (done as usize - i) as f64);
            }
        }
    }
    let peak = if best == f64::MAX { 0.0 } else { bytes as f64 / (best / 1e9) / unit };
    BwRow { bytes, iters: ops, peak, avg, msg_rate_mpps: ops as f64 / secs / 1e6 }
}

impl BwRow {
    /// perftest's `REPORT_FMT` line.
    pub(super) fn line(&self) -> String {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}",
            self.bytes, self.iters, self.peak, self.avg, self.msg_rate_mpps
        )
    }

    /// One JSON object; field names carry their units.
    pub(super) fn json(&self, test: &str, conn: &str, gbits: bool) -> String {
        let u = if gbits { "gbit_per_sec" } else { "mib_per_sec" };
        format!(
            "{{\"test\":\"{test}\",\"connection\":\"{conn}\",\"bytes\":{},\"iterations\":{},\
             \"bw_peak_{u}\":{:.2},\"bw_average_{u}\":{:.2},\"msg_rate_mpps\":{:.6}}}",
            self.bytes, self.iters, self.peak, self.avg, self.msg_rate_mpps
        )
    }
}

/// One latency row (microseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LatRow {
    pub(super) bytes: u32,
    pub(super) iters: u64,
    pub(super) t_min: f64,
    pub(super) t_max: f64,
    pub(super) t_typical: f64,
    pub(super) t_avg: f64,
    pub(super) t_stdev: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
}

/// The latency row of `posted` (ns, one per iteration), as perftest's `print_report_lat`: the
/// gaps between consecutive posts, divided by `rtt_factor` (2 for a ping-pong, whose gap is
/// a round trip of which it reports half; 1 for READ and atomics), sorted, the slowest
/// [`LAT_MEASURE_TAIL`] dropped; typical is the median. `None` with fewer than 4 posts.
pub(super) fn lat_row(bytes: u32, posted: &[u64], rtt_factor: f64) -> Option<LatRow> {
    if posted.len() < LAT_MEASURE_TAIL + 2 {
        return None;
    }
    let mut d: Vec<f64> =
        posted.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e3 / rtt_factor).collect();
    d.sort_by(f64::total_cmp);
    let cnt = d.len() - LAT_MEASURE_TAIL;
    let kept = &d[..cnt];
    let avg = kept.iter().sum::<f64>() / cnt as f64;
    let var = kept.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / cnt as f64;
    let at = |q: f64| d[((cnt as f64 * q).ceil() as usize).min(cnt)];
    Some(LatRow {
        bytes,
        iters: posted.len() as u64,
        t_min: d[0],
        t_max: d[cnt],
        t_typical: kept[cnt / 2],
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: at(0.99),
        p999: at(0.999),
    })
}

impl LatRow {
    /// perftest's `REPORT_FMT_LAT` line.
    pub(super) fn line(&self) -> String {
        format!(
            " {:<7} {:<10}     {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.bytes,
            self.iters,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p999
        )
    }

    /// One JSON object; field names carry their units.
    pub(super) fn json(&self, test: &str, conn: &str) -> String {
        format!(
            "{{\"test\":\"{test}\",\"connection\":\"{conn}\",\"bytes\":{},\"iterations\":{},\
             \"t_min_usec\":{:.3},\"t_max_usec\":{:.3},\"t_typical_usec\":{:.3},\
             \"t_avg_usec\":{:.3},\"t_stdev_usec\":{:.3},\"p99_usec\":{:.3},\"p99_9_usec\":{:.3}}}",
            self.bytes,
            self.iters,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p999
        )
    }
}

/// A latency row of a `-D` run: average and transactions a second (`REPORT_FMT_LAT_DUR`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LatDurRow {
    pub(super) bytes: u32,
    pub(super) iters: u64,
    pub(super) t_avg: f64,
    pub(super) tps: f64,
}

impl LatDurRow {
    /// `iters` iterations over `elapsed_ns`, each a round trip counted as `rtt_factor`.
    pub(super) fn of(bytes: u32, iters: u64, elapsed_ns: u64, rtt_factor: f64) -> LatDurRow {
        let it = iters.max(1) as f64;
        LatDurRow {
            bytes,
            iters,
            t_avg: elapsed_ns as f64 / 1e3 / it / rtt_factor,
            tps: it / (elapsed_ns.max(1) as f64 / 1e9),
        }
    }

    /// perftest's `REPORT_FMT_LAT_DUR` line.
    pub(super) fn line(&self) -> String {
        format!(
            " {:<7}       {:<10}            {:<7.2}        {:<7.2}",
            self.bytes, self.iters, self.t_avg, self.tps
        )
    }

    /// One JSON object; field names carry their units.
    pub(super) fn json(&self, test: &str, conn: &str) -> String {
        format!(
            "{{\"test\":\"{test}\",\"connection\":\"{conn}\",\"bytes\":{},\"iterations\":{},\
             \"t_avg_usec\":{:.3},\"tps_average\":{:.2}}}",
            self.bytes, self.iters, self.t_avg, self.tps
        )
    }
}

/// Text for XML: `&`, `<`, `>` and `"` escaped.
fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The plot leaves out this fraction (1 / divisor) of each size's first latency iterations.
pub(super) const PLOT_WARMUP_DIVISOR: usize = 10;

/// How many of `n` latency iterations the plot leaves out as warm-up: a tenth, at least one
/// (none when that would leave too few for the statistics).
pub(super) fn plot_warmup(n: usize) -> usize {
    let w = (n / PLOT_WARMUP_DIVISOR).max(1);
    if n.saturating_sub(w) >= LAT_MEASURE_TAIL + 2 {
        w
    } else {
        0
    }
}

/// Whether a y axis for `values` is drawn on a log10 scale: when every value is above zero
/// and the largest is at least ten times the smallest (a linear axis would put all but the
/// largest on the zero line).
pub(super) fn log_y(values: &[f64]) -> bool {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0f64, f64::max);
    min > 0.0 && min.is_finite() && max >= 10.0 * min
}

/// An SVG line chart of `points` (message size in bytes, value) on a log2 x axis: `title`
/// above, `note` (how the values were taken, a line of text per line) under it, `y_label` (with its unit) on the y
/// axis, "message size [bytes]" on the x axis. The y axis is log10 where the values span a
/// decade or more ([`log_y`]), linear from zero otherwise.
pub(super) fn svg_plot(title: &str, note: &str, y_label: &str, points: &[(u32, f64)]) -> String {
    const W: f64 = 720.0;
    const H: f64 = 440.0;
    const L: f64 = 90.0;
    const R: f64 = 30.0;
    const T: f64 = 72.0;
    const B: f64 = 70.0;
    let x0 = points.iter().map(|p| p.0.max(1).ilog2()).min().unwrap_or(0);
    let x1 = points.iter().map(|p| p.0.max(1).ilog2()).max().unwrap_or(1).max(x0 + 1);
    let top = points.iter().map(|p| p.1).fold(0.0f64, f64::max);
    let values: Vec<f64> = points.iter().map(|p| p.1).collect();
    let log = log_y(&values);
    // Linear: y ticks at a round step (1, 2 or 5 times a power of ten), five or so of them.
    let ystep = nice_step(if top > 0.0 { top * 1.05 / 5.0 } else { 0.2 });
    let ticks = (top * 1.05 / ystep).ceil().max(1.0) as u32;
    let ymax = ystep * f64::from(ticks);
    // Log: whole decades around the values.
    let bottom = values.iter().copied().fold(f64::INFINITY, f64::min);
    let (d0, d1) = if log {
        (
            bottom.log10().floor() as i32,
            (top.log10().ceil() as i32).max(bottom.log10().floor() as i32 + 1),
        )
    } else {
        (0, 1)
    };
    let px = |b: u32| {
        L + (f64::from(b.max(1)).log2() - f64::from(x0)) / f64::from(x1 - x0) * (W - L - R)
    };
    let py = |v: f64| {
        let f = if log { (v.log10() - f64::from(d0)) / f64::from(d1 - d0) } else { v / ymax };
        H - B - f * (H - T - B)
    };
    let mut s = String::new();
    s += &format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    s += &format!("<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n");
    s += &format!(
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
        W / 2.0,
        xml_text(title)
    );
    for (i, line) in note.lines().enumerate() {
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>\n",
            W / 2.0,
            44 + 13 * i,
            xml_text(line)
        );
    }
    // Axes.
    s += &format!(
        "<line x1=\"{L}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        H - B,
        W - R,
        H - B
    );
    s += &format!("<line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{}\" stroke=\"black\"/>\n", H - B);
    // x ticks: every power of two in range, labelled every other one when crowded.
    let step = if x1 - x0 > 12 { 2 } else { 1 };
    for e in x0..=x1 {
        let x = px(1u32 << e.min(31));
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\"/>\n",
            H - B,
            H - B + 5.0
        );
        if (e - x0) % step == 0 {
            s += &format!(
                "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                H - B + 20.0,
                size_label(1u64 << e)
            );
        }
    }
    // y ticks: each decade labelled, 2x and 5x as grid lines (log); round steps (linear).
    let yticks: Vec<(f64, Option<String>)> = if log {
        (d0..=d1)
            .flat_map(|d| {
                let p = 10f64.powi(d);
                let label = tick(p, p);
                [(p, Some(label)), (2.0 * p, None), (5.0 * p, None)]
            })
            .filter(|(v, _)| *v <= 10f64.powi(d1) * 1.0001)
            .collect()
    } else {
        (0..=ticks).map(|k| ystep * f64::from(k)).map(|v| (v, Some(tick(v, ystep)))).collect()
    };
    for (v, label) in yticks {
        let y = py(v);
        s += &format!(
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{L}\" y2=\"{y:.1}\" stroke=\"black\"/>\n",
            L - 5.0
        );
        s += &format!(
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n",
            W - R
        );
        if let Some(label) = label {
            s += &format!(
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n",
                L - 8.0,
                y + 4.0,
            );
        }
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size [bytes] (log2 scale)</text>\n",
        (L + W - R) / 2.0,
        H - 25.0
    );
    s += &format!(
        "<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">{1}</text>\n",
        (T + H - B) / 2.0,
        xml_text(&if log { format!("{y_label} (log10 scale)") } else { y_label.to_string() })
    );
    let pts: Vec<String> =
        points.iter().map(|&(b, v)| format!("{:.1},{:.1}", px(b), py(v))).collect();
    s += &format!(
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n",
        pts.join(" ")
    );
    for &(b, v) in points {
        s += &format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#1f77b4\"><title>{} bytes: {v:.3}</title></circle>\n",
            px(b),
            py(v),
            b
        );
    }
    s += "</svg>\n";
    s
}

/// 4096 → "4K", 1048576 → "1M".
fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The round step (1, 2 or 5 times a power of ten) at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw * 0.999).unwrap_or(10.0 * p)
}

/// A y tick's label, with as many decimals as its step needs.
fn tick(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// A one-line progress display on stderr: only when stderr is a terminal, and only once a
/// run has lasted [`Progress::AFTER`]; never in pipes or tests.
pub(super) struct Progress {
    on: bool,
    start: Instant,
    last: Option<Instant>,
}

impl Progress {
    /// Runs shorter than this show no progress.
    const AFTER: Duration = Duration::from_secs(2);

    /// A display for this process's stderr.
    pub(super) fn new() -> Progress {
        Progress { on: std::io::stderr().is_terminal(), start: Instant::now(), last: None }
    }

    /// Show `what` (at most 4 times a second).
    pub(super) fn show(&mut self, what: impl FnOnce() -> String) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.start) < Self::AFTER
            || self.last.is_some_and(|l| now.duration_since(l) < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(now);
        let secs = now.duration_since(self.start).as_secs_f64();
        let _ = write!(std::io::stderr(), "\r\x1b[K{} ({secs:.0} s)", what());
    }

    /// Clear the line, if anything was shown.
    pub(super) fn clear(&mut self) {
        if self.last.take().is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_fields_print_as_c_does() {
        assert_eq!(c_hex(0, 4), "0000");
        assert_eq!(c_hex(1, 4), "0x01");
        assert_eq!(c_hex(0x11, 6), "0x0011");
        assert_eq!(c_hex(0x9d1b2c, 6), "0x9d1b2c");
        assert_eq!(c_hex(0x7f00_1234_5000, 16), "0x007f0012345000", "16 characters in all");
        let gid = Gid::from_ipv4([192, 168, 1, 2]);
        assert_eq!(gid_line(&gid), " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02");
    }

    #[test]
    fn latency_statistics_follow_perftest() {
        // Posts 2 us apart except two slow gaps, which the tail drop removes; a ping-pong
        // reports half of each round trip.
        let mut t = vec![0u64];
        for i in 1..=100u64 {
            let gap = if i == 50 || i == 60 { 100_000 } else { 2_000 };
            t.push(t[t.len() - 1] + gap);
        }
        let r = lat_row(8, &t, 2.0).unwrap();
        assert_eq!(r.iters, 101);
        assert_eq!((r.t_min, r.t_typical, r.t_avg), (1.0, 1.0, 1.0));
        assert_eq!(r.t_stdev, 0.0);
        assert_eq!(r.t_max, 50.0, "t_max is the first dropped sample, as perftest indexes it");
        assert!(lat_row(8, &t[..3], 2.0).is_none());
        let read = lat_row(8, &t[..10], 1.0).unwrap();
        assert_eq!(read.t_typical, 2.0, "READ reports the whole round trip");
    }

    #[test]
    fn bandwidth_units_are_mebibytes_or_gigabits() {
        // 1000 messages of 1 MiB in one second.
        let r = bw_row(1 << 20, 1000, 1_000_000_000, &[], &[], false);
        assert!((r.avg - 1000.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.peak, 0.0, "no timestamps, no peak");
        assert!((r.msg_rate_mpps - 0.001).abs() < 1e-12);
        let g = bw_row(1 << 20, 1000, 1_000_000_000, &[], &[], true);
        assert!((g.avg - 1000.0 * 1_048_576.0 * 8.0 / 1e9).abs() < 1e-9, "{g:?}");
        // Peak: 4 posts at 0..3 ns x 1000; completions of 2 at 2000 ns and 4 at 2500 ns.
        let posted = [0, 1000, 2000, 3000];
        let completed = [(2, 2000), (4, 2500)];
        let p = bw_row(1000, 4, 2500, &posted, &completed, false);
        // Fastest stretch: post 2 (at 2000) to completion 4 (2500): 250 ns a message.
        assert!((p.peak - 1000.0 / 250e-9 / 1_048_576.0).abs() < 1e-6, "{p:?}");
        // The average from the same stamps (first post to last completion: 625 ns a message),
        // not from the run's clock, which may read a little apart from the stamps' rate.
        let q = bw_row(1000, 4, 2400, &posted, &completed, false);
        assert!((q.avg - 1000.0 / 625e-9 / 1_048_576.0).abs() < 1e-6, "{q:?}");
        assert!(q.peak >= q.avg, "{q:?}");
    }

    #[test]
    fn a_plot_whose_values_span_decades_has_a_log_axis_and_says_how_it_was_taken() {
        // send_lat -a as the issue saw it: everything up to 128 KiB under one 8 MiB point.
        let pts = [(2, 2.1), (1024, 2.6), (131072, 40.0), (8 << 20, 2900.0)];
        assert!(log_y(&pts.iter().map(|p| p.1).collect::<Vec<_>>()));
        let svg = svg_plot("t", "median after the warm-up", "t_typical [usec]", &pts);
        assert!(svg.contains("t_typical [usec] (log10 scale)"), "{svg}");
        assert!(svg.contains(">median after the warm-up</text>"), "{svg}");
        for decade in [">1</text>", ">10</text>", ">100</text>", ">1000</text>", ">10000</text>"] {
            assert!(svg.contains(decade), "{decade} labelled: {svg}");
        }
        // The smallest point is well above the axis, not on it.
        let y_of = |v: f64| {
            let at = svg.find(&format!("{v:.3}</title>")).expect("point");
            let c = &svg[..at];
            let cy = c.rfind("cy=\"").expect("cy") + 4;
            c[cy..].split('"').next().unwrap().parse::<f64>().unwrap()
        };
        assert!(y_of(2.1) - y_of(2900.0) > 200.0, "spread over the height");
        // The warm-up: 30 iterations whose first 3 took 2 ms each (cold) and the rest 4 us:
        // the plotted statistics leave the cold ones out, the table's keep them.
        assert_eq!((plot_warmup(1000), plot_warmup(5), plot_warmup(4)), (100, 1, 0));
        let mut posted: Vec<u64> = (0..=3).map(|i| i * 2_000_000).collect();
        posted.extend((1..=26).map(|i| 6_000_000 + i * 4_000));
        let all = lat_row(2, &posted, 2.0).unwrap();
        let warm = lat_row(2, &posted[plot_warmup(posted.len())..], 2.0).unwrap();
        assert!((all.t_max - 1000.0).abs() < 1e-9, "the table keeps the cold start: {all:?}");
        assert!((warm.t_max - 2.0).abs() < 1e-9, "the plot does not: {warm:?}");
        // Values within a decade keep the linear axis from zero.
        assert!(!log_y(&[5.0, 9.0]) && !log_y(&[0.0, 100.0]));
        let lin = svg_plot("t", "", "BW average [MiB/sec]", &[(2, 5.0), (4, 9.0)]);
        assert!(!lin.contains("log10"), "{lin}");
    }

    #[test]
    fn plot_ticks_are_round() {
        assert_eq!(nice_step(0.63), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.042), 0.05);
        assert_eq!(nice_step(700.0), 1000.0);
        assert_eq!(
            (tick(0.05, 0.05), tick(1.0, 0.5), tick(2000.0, 1000.0)),
            ("0.05".into(), "1.0".into(), "2000".into())
        );
    }

    #[test]
    fn rows_print_in_perftest_columns() {
        let r = BwRow {
            bytes: 65536,
            iters: 5000,
            peak: 11587.56,
            avg: 11586.89,
            msg_rate_mpps: 0.18539,
        };
        assert_eq!(
            r.line(),
            " 65536      5000             11587.56            11586.89\t\t     0.185390"
        );
        let j = r.json("write_bw", "RC", false);
        assert!(j.contains("\"bw_average_mib_per_sec\":11586.89"), "{j}");
    }
}
