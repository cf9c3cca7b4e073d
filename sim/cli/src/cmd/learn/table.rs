//! The table every lesson ends with: one row per measured quantity, an RDMA column, a TCP
//! column and a verdict column that says which side is better on that row and by how much
//! (`better: RDMA 3.1×`), printed with fixed widths so that rows line up. Each row knows which
//! way is better (a lower latency, a higher bandwidth, or neither for a plain fact), so the
//! verdict never means opposite things on two rows; a value that rounds to zero is never
//! divided by; a row of repeated samples shows its median and range, and ranges that overlap
//! get no winner. A row may carry a published hardware figure in a column of its own, which
//! is never compared with the measured ones.

use std::io::Write;

use crate::cmd::CliError;

/// Which way a row is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Less is better: time, CPU, system calls, copies.
    Lower,
    /// More is better: bandwidth, a rate of work.
    Higher,
    /// A fact to compare by eye (a size, a count that must match): no verdict.
    Neither,
}

/// One cell's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A measured number, printed with this many decimals.
    Num(f64, usize),
    /// Repeated samples: median, smallest, largest, printed with this many decimals as
    /// `median (min–max)`.
    Spread { median: f64, min: f64, max: f64, decimals: usize },
    /// A sampled estimate, not an exact count (the kernel's user/kernel split of CPU time,
    /// taken by scheduler ticks), printed with a leading `~`; no verdict is drawn from it.
    Approx(f64, usize),
    /// Text (a list of sizes, say); no verdict is drawn from it.
    Text(String),
}

impl Cell {
    /// The cell of repeated samples `v` (at least one), with `decimals` decimals.
    pub fn spread(v: &[f64], decimals: usize) -> Cell {
        let mut s: Vec<f64> = v.to_vec();
        s.sort_by(f64::total_cmp);
        let median = match s.len() {
            0 => 0.0,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        };
        Cell::Spread {
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
            decimals,
        }
    }

    fn show(&self) -> String {
        match self {
            Cell::Num(v, d) => format!("{v:.d$}", d = *d),
            Cell::Spread { median, min, max, decimals: d } => {
                format!("{median:.d$} ({min:.d$}-{max:.d$})", d = *d)
            }
            Cell::Approx(v, d) => format!("~{v:.d$}", d = *d),
            Cell::Text(t) => t.clone(),
        }
    }

    /// The value a verdict compares, its decimals and its range (min, max).
    fn value(&self) -> Option<(f64, usize, f64, f64)> {
        match self {
            Cell::Num(v, d) => Some((*v, *d, *v, *v)),
            Cell::Spread { median, min, max, decimals } => Some((*median, *decimals, *min, *max)),
            Cell::Approx(..) | Cell::Text(_) => None,
        }
    }
}

/// Which side a row favours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// RDMA is better by this factor (`None`: the other side's value rounds to zero, so no
    /// factor is honest).
    Rdma(Option<f64>),
    /// TCP is better, likewise.
    Tcp(Option<f64>),
    /// Within [`EVEN`] of each other, or both round to zero.
    Even,
    /// The samples' ranges overlap: this run cannot tell which is better.
    Unclear,
    /// Nothing to compare (a fact, text or an estimate).
    None,
}

/// Two values closer than this factor are called even.
pub const EVEN: f64 = 1.1;
/// Factors above this print as `>100×`: the smaller value is then near zero beside the
/// other, and its digits (one system call in a thousand messages, say) are too few for a
/// factor of more precision than that.
pub const MOST: f64 = 100.0;

/// Whether `v` prints as zero with `decimals` decimals: too small to divide by.
fn near_zero(v: f64, decimals: usize) -> bool {
    v.abs() < 0.5 / 10f64.powi(decimals as i32)
}

/// The verdict of a row whose RDMA cell is `rdma` and TCP cell `tcp`.
pub fn verdict(better: Better, rdma: &Cell, tcp: &Cell) -> Verdict {
    let (Some((r, dr, rlo, rhi)), Some((t, dt, tlo, thi))) = (rdma.value(), tcp.value()) else {
        return Verdict::None;
    };
    if better == Better::Neither {
        return Verdict::None;
    }
    let (rz, tz) = (near_zero(r, dr), near_zero(t, dt));
    if rz && tz {
        return Verdict::Even;
    }
    if rlo <= thi && tlo <= rhi && (rlo < rhi || tlo < thi) {
        return Verdict::Unclear;
    }
    // Orient so that `a` is RDMA's score and bigger is better.
    let rdma_wins = match better {
        Better::Lower => r < t,
        _ => r > t,
    };
    let (win, lose, lose_zero) = if rdma_wins { (r, t, tz) } else { (t, r, rz) };
    let factor = match better {
        // The winner of "lower" is the smaller value: the factor divides by it.
        Better::Lower if rdma_wins && rz || !rdma_wins && tz => None,
        Better::Lower => Some(lose / win),
        _ if lose_zero => None,
        _ => Some(win / lose),
    };
    if factor.is_some_and(|f| f < EVEN) {
        return Verdict::Even;
    }
    if rdma_wins {
        Verdict::Rdma(factor)
    } else {
        Verdict::Tcp(factor)
    }
}

impl Verdict {
    /// The verdict column's text: `better: RDMA 3.1×`, `better: TCP (RDMA ~0)`, `even`,
    /// `unclear (ranges overlap)`, `-`.
    pub fn show(&self) -> String {
        match self {
            Verdict::Rdma(Some(f)) if *f > MOST => format!("better: RDMA >{MOST:.0}×"),
            Verdict::Tcp(Some(f)) if *f > MOST => format!("better: TCP >{MOST:.0}×"),
            Verdict::Rdma(Some(f)) => format!("better: RDMA {f:.1}×"),
            Verdict::Tcp(Some(f)) => format!("better: TCP {f:.1}×"),
            Verdict::Rdma(None) => "better: RDMA (other ~0)".into(),
            Verdict::Tcp(None) => "better: TCP (other ~0)".into(),
            Verdict::Even => format!("even (within {:.0}%)", (EVEN - 1.0) * 100.0),
            Verdict::Unclear => "unclear: ranges overlap".into(),
            Verdict::None => "-".into(),
        }
    }
}

/// The note under a table with a tick-sampled row: what `~` means and how fine it is.
pub const TICK_NOTE: &str = "~ a tick sample, not an exact time: the kernel splits a thread's exact CPU time between user and kernel mode by which mode its scheduler ticks (one each 1 to 10 ms, CONFIG_HZ) found it in, so a share of a few ticks is noise; the exact books of the kernel's work are the system-call and byte rows.";

/// One row: label, the two measured cells, which way is better, a published figure.
struct Row {
    label: String,
    rdma: Cell,
    tcp: Cell,
    better: Better,
    published: String,
}

/// A lesson's table.
#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    published_head: Option<String>,
}

impl Table {
    /// A row where less is better (time, CPU, calls, copies), `decimals` decimals.
    pub fn lower(&mut self, label: &str, rdma: f64, tcp: f64, decimals: usize) {
        self.row(label, Cell::Num(rdma, decimals), Cell::Num(tcp, decimals), Better::Lower);
    }

    /// A row where more is better (bandwidth, a rate of work).
    pub fn higher(&mut self, label: &str, rdma: f64, tcp: f64, decimals: usize) {
        self.row(label, Cell::Num(rdma, decimals), Cell::Num(tcp, decimals), Better::Higher);
    }

    /// A row of two facts with no better side (sizes, counts that must match).
    pub fn fact(&mut self, label: &str, rdma: f64, tcp: f64, decimals: usize) {
        self.row(label, Cell::Num(rdma, decimals), Cell::Num(tcp, decimals), Better::Neither);
    }

    /// A row of two sampled estimates (no verdict).
    pub fn approx(&mut self, label: &str, rdma: f64, tcp: f64, decimals: usize) {
        self.row(label, Cell::Approx(rdma, decimals), Cell::Approx(tcp, decimals), Better::Neither);
    }

    /// A row of words.
    pub fn text(&mut self, label: &str, rdma: &str, tcp: &str) {
        self.row(label, Cell::Text(rdma.into()), Cell::Text(tcp.into()), Better::Neither);
    }

    /// Any row.
    pub fn row(&mut self, label: &str, rdma: Cell, tcp: Cell, better: Better) {
        self.rows.push(Row { label: label.into(), rdma, tcp, better, published: String::new() });
    }

    /// The last row's published hardware figure, in a column headed `head` (the source, named
    /// where the table's notes cite it).
    pub fn published(&mut self, head: &str, figure: &str) {
        self.published_head = Some(head.into());
        if let Some(r) = self.rows.last_mut() {
            r.published = figure.into();
        }
    }

    /// Each row's label and verdict, in order.
    pub fn verdicts(&self) -> Vec<(String, Verdict)> {
        self.rows
            .iter()
            .map(|r| (r.label.trim().to_string(), verdict(r.better, &r.rdma, &r.tcp)))
            .collect()
    }

    /// Prints the table under a header line.
    pub fn print(&self, out: &mut dyn Write) -> Result<(), CliError> {
        let lw = self.rows.iter().map(|r| r.label.chars().count()).max().unwrap_or(0).max(8);
        let cw = self
            .rows
            .iter()
            .flat_map(|r| [r.rdma.show().chars().count(), r.tcp.show().chars().count()])
            .max()
            .unwrap_or(0)
            .max(8);
        let shown: Vec<String> =
            self.rows.iter().map(|r| verdict(r.better, &r.rdma, &r.tcp).show()).collect();
        let vw = shown.iter().map(|v| v.chars().count()).max().unwrap_or(0).max(15);
        let published = self.published_head.as_deref();
        let line = |out: &mut dyn Write, a: &str, b: &str, c: &str, d: &str, p: &str| {
            let p = if published.is_some() { format!("  {p}") } else { String::new() };
            let l = format!("  {a:<lw$}  {b:>cw$}  {c:>cw$}  {d:<vw$}{p}");
            writeln!(out, "{}", l.trim_end()).map_err(crate::cmd::output_error)
        };
        line(out, "", "RDMA", "TCP", "which is better", published.unwrap_or(""))?;
        for (r, v) in self.rows.iter().zip(&shown) {
            line(out, &r.label, &r.rdma.show(), &r.tcp.show(), v, &r.published)?;
        }
        if self.rows.iter().any(|r| matches!(r.rdma, Cell::Approx(..))) {
            lines(out, "  ", &[TICK_NOTE])?;
        }
        Ok(())
    }
}

/// Writes `lines`, each after `indent`.
pub fn lines<S: AsRef<str>>(
    out: &mut dyn Write,
    indent: &str,
    lines: &[S],
) -> Result<(), CliError> {
    for l in lines {
        writeln!(out, "{indent}{}", l.as_ref()).map_err(crate::cmd::output_error)?;
    }
    Ok(())
}

/// A lesson's heading: its title and what to watch.
pub fn heading(out: &mut dyn Write, title: &str, watch: &[&str]) -> Result<(), CliError> {
    lines(out, "", &[format!("softverbs learn {title}"), String::new(), "What to watch:".into()])?;
    lines(out, "  ", watch)?;
    lines(out, "", &["", "The live run (two processes on the soft backend, and a TCP connection between the same two):"])?;
    lines(out, "  ", &[data_path()])
}

/// What carries the lessons' RDMA operations, said before their figures: packets through the
/// emulated NICs (the lessons turn direct reach off so that packets and copies can be
/// counted), unless `SOFTVERBS_REACH` was set otherwise.
pub fn data_path() -> &'static str {
    if std::env::var("SOFTVERBS_REACH").is_ok_and(|v| v == "0" || v == "off") {
        "RDMA here travels as packets through the emulated NICs (direct reach off, so that the packets and copies can be counted)."
    } else {
        "RDMA WRITEs and READs here go by direct reach (SOFTVERBS_REACH on): copies into the peer's memory, no packets to count."
    }
}

/// The lesson's end: the table, what is emulated, the takeaway and what to try.
pub fn ending(
    out: &mut dyn Write,
    table: &Table,
    emulated: &[String],
    takeaway: &str,
    tries: &[&str],
) -> Result<(), CliError> {
    lines(out, "", &["", "Measured in this run:"])?;
    table.print(out)?;
    lines(out, "", &["", "What is emulated:"])?;
    lines(out, "  ", emulated)?;
    lines(out, "", &["", &format!("Takeaway: {takeaway}"), "", "Try:"])?;
    lines(out, "  ", tries)
}

/// Milliseconds of a nanosecond count.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(better: Better, r: f64, t: f64, d: usize) -> String {
        verdict(better, &Cell::Num(r, d), &Cell::Num(t, d)).show()
    }

    #[test]
    fn every_verdict_names_the_better_side_whichever_way_the_row_goes() {
        // Latency: RDMA 2.2 us against TCP 33 us is RDMA's, 15x.
        assert_eq!(v(Better::Lower, 2.2, 33.0, 1), "better: RDMA 15.0×");
        // Latency the other way round: TCP's.
        assert_eq!(v(Better::Lower, 400.0, 274.0, 1), "better: TCP 1.5×");
        // Bandwidth: more is better, so the same numbers flip.
        assert_eq!(v(Better::Higher, 2362.0, 692.0, 0), "better: RDMA 3.4×");
        assert_eq!(v(Better::Higher, 692.0, 2362.0, 0), "better: TCP 3.4×");
        assert_eq!(v(Better::Higher, 1000.0, 1050.0, 0), "even (within 10%)");
        assert_eq!(v(Better::Neither, 31.0, 31.0, 0), "-");
        assert_eq!(
            verdict(Better::Lower, &Cell::Approx(0.04, 2), &Cell::Approx(206.4, 2)),
            Verdict::None,
            "a tick sample gets no verdict"
        );
    }

    #[test]
    fn a_value_that_prints_as_zero_is_never_divided_by() {
        // The old table printed 5901.5x, 4000.0x and 0.0x for these.
        assert_eq!(v(Better::Lower, 0.0004, 2.3606, 3), "better: RDMA (other ~0)");
        assert_eq!(v(Better::Lower, 0.001, 4.0, 3), "better: RDMA >100×", "no 4000.0×");
        assert_eq!(v(Better::Lower, 0.04, 4.0, 3), "better: RDMA 100.0×");
        assert_eq!(v(Better::Lower, 0.0001, 4.0, 3), "better: RDMA (other ~0)");
        assert_eq!(v(Better::Higher, 0.004, 47.0, 2), "better: TCP (other ~0)");
        assert_eq!(v(Better::Lower, 3.0, 0.0, 0), "better: TCP (other ~0)");
        assert_eq!(v(Better::Lower, 0.0, 0.0, 0), "even (within 10%)");
        assert_eq!(v(Better::Lower, 0.002, 0.001, 2), "even (within 10%)", "both print as 0.00");
    }

    #[test]
    fn samples_show_median_and_range_and_overlapping_ranges_have_no_winner() {
        let a = Cell::spread(&[136.7, 11.6, 106.4], 1);
        assert_eq!(a.show(), "106.4 (11.6-136.7)");
        let b = Cell::spread(&[7.4, 9.2, 15.4], 1);
        assert_eq!(verdict(Better::Lower, &a, &b), Verdict::Unclear);
        let c = Cell::spread(&[2.0, 2.4, 2.2, 2.8], 1);
        assert_eq!(c.show(), "2.3 (2.0-2.8)", "an even count's median is the middle two's mean");
        let d = Cell::spread(&[32.7, 34.2], 1);
        assert_eq!(verdict(Better::Lower, &c, &d).show(), "better: RDMA 14.5×");
    }

    #[test]
    fn the_published_column_is_printed_apart_and_labelled() {
        let mut t = Table::default();
        t.lower("latency (us)", 2.0, 30.0, 1);
        t.published("published, ConnectX-6", "< 0.6");
        t.fact("bytes", 3.0, 3.0, 0);
        let mut out = Vec::new();
        t.print(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert!(
            lines[0].contains("which is better ") && lines[0].ends_with("published, ConnectX-6")
        );
        assert!(lines[1].ends_with("better: RDMA 15.0×  < 0.6"), "{s}");
        assert!(lines[2].ends_with(" -"), "{s}");
        assert_eq!(t.verdicts()[0], ("latency (us)".into(), Verdict::Rdma(Some(15.0))));
    }
}
