//! The table every lesson ends with: one row per measured quantity, an RDMA column, a TCP
//! column and their ratio (TCP ÷ RDMA), printed with fixed widths so that rows line up.

use std::io::Write;

use crate::cmd::CliError;

/// One cell's value: a number with its unit and decimals, or words.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A measured number, printed with this many decimals.
    Num(f64, usize),
    /// Text (a list of sizes, say); no ratio is computed with it.
    Text(String),
}

impl Cell {
    fn show(&self) -> String {
        match self {
            Cell::Num(v, d) => format!("{v:.d$}", d = *d),
            Cell::Text(t) => t.clone(),
        }
    }
}

/// A lesson's table.
#[derive(Default)]
pub struct Table {
    rows: Vec<(String, Cell, Cell)>,
}

impl Table {
    /// A row of two numbers with `decimals` decimals.
    pub fn num(&mut self, label: &str, rdma: f64, tcp: f64, decimals: usize) {
        self.rows.push((label.into(), Cell::Num(rdma, decimals), Cell::Num(tcp, decimals)));
    }

    /// A row of words.
    pub fn text(&mut self, label: &str, rdma: &str, tcp: &str) {
        self.rows.push((label.into(), Cell::Text(rdma.into()), Cell::Text(tcp.into())));
    }

    /// TCP ÷ RDMA: `-` where there is nothing to divide, `RDMA 0` where only TCP did any.
    fn ratio(rdma: &Cell, tcp: &Cell) -> String {
        match (rdma, tcp) {
            (Cell::Num(r, _), Cell::Num(t, _)) if *r > 0.0 => format!("{:.1}x", t / r),
            (Cell::Num(r, _), Cell::Num(t, _)) if *r == 0.0 && *t > 0.0 => "RDMA 0".into(),
            _ => "-".into(),
        }
    }

    /// Prints the table under a header line.
    pub fn print(&self, out: &mut dyn Write) -> Result<(), CliError> {
        let lw = self.rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0).max(8);
        let cw = self
            .rows
            .iter()
            .flat_map(|r| [r.1.show().chars().count(), r.2.show().chars().count()])
            .max()
            .unwrap_or(0)
            .max(8);
        let line = |out: &mut dyn Write, a: &str, b: &str, c: &str, d: &str| {
            writeln!(out, "  {a:<lw$}  {b:>cw$}  {c:>cw$}  {d:>8}")
                .map_err(crate::cmd::output_error)
        };
        line(out, "", "RDMA", "TCP", "TCP/RDMA")?;
        for (label, r, t) in &self.rows {
            line(out, label, &r.show(), &t.show(), &Table::ratio(r, t))?;
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
    lines(out, "", &["", "The live run (two processes on the soft backend, and a TCP connection between the same two):"])
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
