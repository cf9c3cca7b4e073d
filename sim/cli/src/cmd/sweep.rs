//! `softverbs sim sweep SCENARIO --param loss=0,0.001,0.01,0.05`: the scenario run once per
//! value of one link parameter and seed (`--seeds N` seeds from `--seed`, the same ones for
//! every value), a table of what the median run of each value did with the spread of goodput
//! over the seeds, a plot of goodput against the parameter (`--plot FILE.svg`: the x axis
//! spaced by value, logarithmic where the values span decades; a bar from the lowest to the
//! highest seed's goodput) and, with `--explain`, sentences that say from the numbers what
//! happened — go-back-N's cliff under loss.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use softverbs_sim::ladder::svg::escape;
use softverbs_sim::world::scenario::{self, Report, RunOptions, Scenario};

use super::CliError;

/// Arguments of `softverbs sim sweep`.
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// The scenario file (TOML; sim/scenarios/go-back-n.toml is made for this).
    pub scenario: PathBuf,
    /// The link parameter and its values, NAME=V1,V2,...: loss, dup, corrupt or truncate (a
    /// probability per packet, 0 to 1), latency_ns, reorder_jitter_ns, queue_limit or
    /// bandwidth_gbps. Each value replaces that parameter on every link of the scenario.
    #[arg(long, value_name = "NAME=V1,V2,...")]
    pub param: String,
    /// The first seed (default: the scenario's `seed`); the runs of each value use this seed
    /// and the next ones.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How many seeds each value is run with (1 to 100): the table and the sentences show the
    /// median run, the table and the plot the spread of goodput over the seeds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub seeds: u64,
    /// Write a plot of goodput against the parameter to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Say in sentences what the numbers show.
    #[arg(long)]
    pub explain: bool,
}

/// The parameters a sweep can vary, with what their values mean.
const PARAMS: [(&str, &str); 8] = [
    ("loss", "probability"),
    ("dup", "probability"),
    ("corrupt", "probability"),
    ("truncate", "probability"),
    ("latency_ns", "ns"),
    ("reorder_jitter_ns", "ns"),
    ("queue_limit", "packets"),
    ("bandwidth_gbps", "Gbit/s"),
];

/// Parse `NAME=V1,V2,...`; the error says what was wrong.
pub fn parse_param(s: &str) -> Result<(String, Vec<f64>), String> {
    let (name, values) =
        s.split_once('=').ok_or_else(|| format!("--param {s:?}: expected NAME=V1,V2,..."))?;
    let unit = PARAMS.iter().find(|p| p.0 == name).map(|p| p.1).ok_or_else(|| {
        let names: Vec<&str> = PARAMS.iter().map(|p| p.0).collect();
        format!("--param: no link parameter {name:?}; one of {}", names.join(", "))
    })?;
    let mut out = Vec::new();
    for v in values.split(',') {
        let x: f64 =
            v.trim().parse().map_err(|_| format!("--param {name}: {v:?} is not a number"))?;
        let ok = match unit {
            "probability" => (0.0..=1.0).contains(&x),
            "Gbit/s" => x > 0.0 && x.is_finite(),
            _ => x >= 0.0 && x.fract() == 0.0 && x < 1e15,
        };
        if !ok {
            let want = match unit {
                "probability" => "a probability from 0 to 1",
                "Gbit/s" => "a positive rate",
                _ => "a whole number of 0 or more",
            };
            return Err(format!("--param {name}: {v} is not {want}"));
        }
        out.push(x);
    }
    Ok((name.to_string(), out))
}

/// `sc` with `name` set to `value` on every link.
pub fn with_param(sc: &Scenario, name: &str, value: f64) -> Scenario {
    let mut sc = sc.clone();
    for l in &mut sc.links {
        let p = &mut l.params;
        match name {
            "loss" => p.loss = Some(value),
            "dup" => p.dup = Some(value),
            "corrupt" => p.corrupt = Some(value),
            "truncate" => p.truncate = Some(value),
            "latency_ns" => p.latency_ns = Some(value as u64),
            "reorder_jitter_ns" => p.reorder_jitter_ns = Some(value as u64),
            "queue_limit" => p.queue_limit = Some(value as usize),
            _ => p.bandwidth_gbps = Some(value),
        }
    }
    sc
}

/// The runs of one value of a sweep.
#[derive(Clone, Debug)]
pub struct Row {
    /// The parameter's value.
    pub value: f64,
    /// What the median run did (the seed whose goodput is the median, the lower of the two
    /// middle ones for an even count): one real run, so its numbers agree with each other.
    pub report: Report,
    /// The goodput of the run of each seed (Gbit/s), lowest first.
    pub goodputs: Vec<f64>,
}

impl Row {
    /// Whether every message of every connection was delivered.
    pub fn all_delivered(&self) -> bool {
        self.report.connections.iter().all(|c| c.delivered == c.total)
    }
}

/// Run `sc` once per value of `name`, each with `seed`.
pub fn sweep(sc: &Scenario, name: &str, values: &[f64], seed: u64) -> Result<Vec<Row>, String> {
    sweep_seeds(sc, name, values, seed, 1)
}

/// Run `sc` once per value of `name` and seed, the seeds `seed`, `seed + 1`, ... (`seeds` of
/// them) for every value.
pub fn sweep_seeds(
    sc: &Scenario,
    name: &str,
    values: &[f64],
    seed: u64,
    seeds: u64,
) -> Result<Vec<Row>, String> {
    values
        .iter()
        .map(|&value| {
            let with = with_param(sc, name, value);
            let mut runs = (0..seeds.max(1))
                .map(|k| {
                    let opts = RunOptions { seed: Some(seed + k), ..RunOptions::default() };
                    scenario::run(&with, &opts)
                })
                .collect::<Result<Vec<Report>, String>>()?;
            runs.sort_by(|a, b| a.goodput_gbps().total_cmp(&b.goodput_gbps()));
            let goodputs = runs.iter().map(Report::goodput_gbps).collect();
            let report = runs.swap_remove((runs.len() - 1) / 2);
            Ok(Row { value, report, goodputs })
        })
        .collect()
}

/// A value as the table and the sentences show it: a probability as a percentage.
fn show(name: &str, v: f64) -> String {
    if PARAMS.iter().any(|p| p.0 == name && p.1 == "probability") {
        format!("{} %", trim(v * 100.0))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.to_string()
    }
}

/// The table's lines; with several seeds, the median run's numbers and the lowest and highest
/// goodput of the seeds.
pub fn table(name: &str, rows: &[Row]) -> Vec<String> {
    let seeds = rows.first().map_or(1, |r| r.goodputs.len());
    let spread = |r: &Row| match (seeds > 1, r.goodputs.first(), r.goodputs.last()) {
        (true, Some(lo), Some(hi)) => format!("  {:>15}", format!("{lo:.3}–{hi:.3}")),
        _ => String::new(),
    };
    let head = if seeds > 1 { format!("  {:>15}", "min–max (Gb/s)") } else { String::new() };
    let mut out = vec![format!(
        "{:>9}  {:>13}{head}  {:>12}  {:>5}  {:>13}  {:>8}  {:>15}  {}",
        name,
        "goodput",
        "packets sent",
        "lost",
        "retransmitted",
        "timeouts",
        "completion time",
        "delivered"
    )];
    for r in rows {
        let p = &r.report;
        out.push(format!(
            "{:>9}  {:>8.3} Gb/s{}  {:>12}  {:>5}  {:>11.1} %  {:>8}  {:>12.3} ms  {}",
            show(name, r.value),
            p.goodput_gbps(),
            spread(r),
            p.packets_sent,
            p.fault("loss"),
            p.retransmit_share() * 100.0,
            p.timeouts,
            p.elapsed_ns as f64 / 1e6,
            if r.all_delivered() { "all" } else { "NOT all" }
        ));
    }
    out
}

/// Sentences that say what the numbers show.
pub fn explain(sc: &Scenario, name: &str, rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = rows.first() else { return out };
    let base = &first.report;
    out.push(format!(
        "At {name} {}, the workload moved {} bytes in {:.3} ms of virtual time: {:.2} Gbit/s of \
         goodput, with {} packets sent, {:.1} % of them retransmissions.",
        show(name, first.value),
        base.goodput_bytes,
        base.elapsed_ns as f64 / 1e6,
        base.goodput_gbps(),
        base.packets_sent,
        base.retransmit_share() * 100.0
    ));
    let timeout_us = sc.connections.first().map(|c| 4.096 * f64::powi(2.0, c.timeout as i32));
    for r in &rows[1..] {
        let p = &r.report;
        let lost = p.fault("loss");
        let mut s = format!(
            "At {name} {}, goodput was {:.2} Gbit/s ({:.0} % of the first run's); {:.1} % of the {} \
             packets sent were retransmissions",
            show(name, r.value),
            p.goodput_gbps(),
            if base.goodput_gbps() > 0.0 { 100.0 * p.goodput_gbps() / base.goodput_gbps() } else { 0.0 },
            p.retransmit_share() * 100.0,
            p.packets_sent,
        );
        if lost > 0 {
            let _ = write!(
                s,
                ": {lost} packets were lost on the links and the NICs sent {} packets again, {:.1} \
                 for each one lost, because go-back-N resends every packet after a lost one, not \
                 the lost one alone",
                p.retransmits,
                p.retransmits as f64 / lost as f64
            );
        }
        s.push('.');
        if lost == 0 && name == "loss" && r.value > 0.0 {
            let _ = write!(
                s,
                " No packet happened to be lost in this run (about {:.1} were to be expected).",
                p.packets_sent as f64 * r.value
            );
        }
        if p.timeouts > 0 {
            let _ = write!(
                s,
                " {} time{} nothing came back to NAK a loss (a lost last packet or a lost ACK) and \
                 the requester sat out the local ACK timeout{}.",
                p.timeouts,
                if p.timeouts == 1 { "" } else { "s" },
                timeout_us.map_or(String::new(), |t| format!(" of {:.0} µs", t))
            );
        }
        if p.seq_naks > 0 {
            let _ = write!(
                s,
                " {} sequence NAK{} told the requester at once where to go back to.",
                p.seq_naks,
                if p.seq_naks == 1 { "" } else { "s" }
            );
        }
        if !r.all_delivered() {
            s.push_str(" Not every message was delivered in this run.");
        }
        out.push(s);
    }
    // Where goodput fell most, relative to what it was: the cliff.
    let fall = rows
        .windows(2)
        .map(|w| (w[0].report.goodput_gbps(), w[1].report.goodput_gbps(), w[0].value, w[1].value))
        .filter(|f| f.0 > 0.0)
        .max_by(|a, b| (1.0 - a.1 / a.0).total_cmp(&(1.0 - b.1 / b.0)));
    if let Some((g0, g1, v0, v1)) = fall.filter(|f| f.1 < f.0) {
        out.push(format!(
            "The steepest fall is from {name} {} to {}: goodput dropped by {:.0} %, from {:.2} to \
             {:.2} Gbit/s.",
            show(name, v0),
            show(name, v1),
            100.0 * (1.0 - g1 / g0),
            g0,
            g1
        ));
    }
    out
}

/// Where the plot puts a value on its x axis: linear from 0, or logarithmic when the positive
/// values span a decade or more (a 0 then sits on its own, left of a break in the axis).
struct XAxis {
    log: bool,
    /// The smallest and largest positive value (log), or 0 and the largest (linear).
    lo: f64,
    hi: f64,
    /// Whether a 0 is among the values (log only: drawn left of the break).
    zero: bool,
}

impl XAxis {
    fn of(values: &[f64]) -> XAxis {
        let pos: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
        let lo = pos.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(0.0, f64::max);
        if pos.len() >= 2 && hi / lo >= 10.0 {
            XAxis { log: true, lo, hi, zero: values.contains(&0.0) }
        } else {
            XAxis { log: false, lo: 0.0, hi: if hi > 0.0 { hi } else { 1.0 }, zero: false }
        }
    }

    /// The fraction of the axis's width at which `v` sits (0: left end; the log axis leaves
    /// the first 12 % to the 0 and the break).
    fn at(&self, v: f64) -> f64 {
        match self.log {
            false => v / self.hi,
            true if v <= 0.0 => 0.0,
            true => {
                let start = if self.zero { 0.12 } else { 0.0 };
                let span = (self.hi / self.lo).log10();
                start + (1.0 - start) * (v / self.lo).log10() / span
            }
        }
    }

    /// The ticks under the axis: each run's value, and on a log axis the powers of ten between.
    fn ticks(&self) -> Vec<f64> {
        if !self.log {
            return Vec::new();
        }
        let (a, b) = (self.lo.log10().ceil() as i32, self.hi.log10().floor() as i32);
        (a..=b).map(|e| 10f64.powi(e)).collect()
    }
}

/// The plot: goodput (Gbit/s) against the parameter, one point per value (the median run), a
/// bar from the lowest to the highest seed's goodput, the x axis spaced by value.
pub fn plot(title: &str, name: &str, rows: &[Row]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 460.0, 80.0, 690.0, 50.0, 370.0);
    let max = rows
        .iter()
        .flat_map(|r| r.goodputs.iter().copied().chain([r.report.goodput_gbps()]))
        .fold(0.0f64, f64::max)
        .max(0.001);
    // A round top for the axis: 1, 2 or 5 times a power of ten.
    let mag = 10f64.powf(max.log10().floor());
    let top_val = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|v| *v >= max)
        .unwrap_or(max);
    let values: Vec<f64> = rows.iter().map(|r| r.value).collect();
    let axis = XAxis::of(&values);
    let (x0, x1) = (left + 30.0, right - 30.0);
    let x = |v: f64| {
        if rows.len() < 2 {
            (left + right) / 2.0
        } else {
            x0 + (x1 - x0) * axis.at(v)
        }
    };
    let y = |g: f64| bottom - (bottom - top) * g / top_val;
    let seeds = rows.first().map_or(1, |r| r.goodputs.len());
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<path d="M{left},{top} L{left},{bottom} L{right},{bottom}" fill="none" stroke="#222"/>"##
    );
    if axis.log && axis.zero && rows.len() >= 2 {
        // The break between the 0 and the logarithmic part of the axis.
        let xb = x0 + (x1 - x0) * 0.06;
        let _ = writeln!(
            s,
            r##"<path class="break" d="M{},{} l6,-8 M{},{} l6,-8" stroke="#222"/>"##,
            xb - 5.0,
            bottom + 4.0,
            xb,
            bottom + 4.0
        );
    }
    for k in 0..=5 {
        let v = top_val * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{yy}" x2="{left}" y2="{yy}" stroke="#222"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            left - 5.0,
            left - 8.0,
            y(v) + 4.0,
            trim(v),
            yy = y(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate(22,{}) rotate(-90)" text-anchor="middle">goodput (Gbit/s)</text>"#,
        (top + bottom) / 2.0
    );
    // Powers of ten on a log axis that are not a run's value: a light tick.
    for t in axis.ticks().into_iter().filter(|t| !values.iter().any(|v| (v - t).abs() < t * 1e-9)) {
        let _ = writeln!(
            s,
            r##"<g class="tick"><line x1="{xx:.1}" y1="{bottom}" x2="{xx:.1}" y2="{}" stroke="#888"/><text x="{xx:.1}" y="{}" text-anchor="middle" fill="#888">{}</text></g>"##,
            bottom + 5.0,
            bottom + 32.0,
            escape(&show(name, t)),
            xx = x(t)
        );
    }
    let unit = PARAMS.iter().find(|p| p.0 == name).map_or("", |p| p.1);
    let scale = match (axis.log, axis.zero) {
        (true, true) => "logarithmic axis (0 left of the break)",
        (true, false) => "logarithmic axis",
        _ => "linear axis",
    };
    let label = if unit == "probability" {
        format!("{name}: per-packet probability on every link (%), {scale}")
    } else {
        format!("{name} ({unit}), {scale}")
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        bottom + 52.0,
        escape(&label)
    );
    let legend = match seeds {
        1 => "one seed per value: no spread (--seeds N runs N)".to_string(),
        n => {
            format!("point: the median of {n} seeds; bar: the lowest to the highest seed's goodput")
        }
    };
    let _ = writeln!(
        s,
        r##"<text class="legend" x="{}" y="{}" text-anchor="middle" fill="#444">{}</text>"##,
        (left + right) / 2.0,
        bottom + 72.0,
        escape(&legend)
    );
    let points: Vec<String> = rows
        .iter()
        .map(|r| format!("{:.1},{:.1}", x(r.value), y(r.report.goodput_gbps())))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline class="goodput" points="{}" fill="none" stroke="#2050a0" stroke-width="2"/>"##,
        points.join(" ")
    );
    for r in rows {
        let g = r.report.goodput_gbps();
        let xv = x(r.value);
        if let (true, Some(lo), Some(hi)) = (seeds > 1, r.goodputs.first(), r.goodputs.last()) {
            let _ = writeln!(
                s,
                r##"<path class="spread" d="M{xv:.1},{:.1} L{xv:.1},{:.1} M{:.1},{:.1} l10,0 M{:.1},{:.1} l10,0" stroke="#2050a0" stroke-width="1.5"/>"##,
                y(*lo),
                y(*hi),
                xv - 5.0,
                y(*lo),
                xv - 5.0,
                y(*hi)
            );
        }
        let spread = match (seeds > 1, r.goodputs.first(), r.goodputs.last()) {
            (true, Some(lo), Some(hi)) => format!(" (median of {seeds} seeds; {lo:.3} to {hi:.3})"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            r##"<g class="point"><title>{}</title><circle cx="{xv:.1}" cy="{:.1}" r="4" fill="#2050a0"/><text x="{:.1}" y="{:.1}" text-anchor="start">{:.2}</text><text x="{xv:.1}" y="{}" text-anchor="middle">{}</text></g>"##,
            escape(&format!(
                "{name} {}: {g:.3} Gbit/s{spread}, {:.1} % retransmitted",
                show(name, r.value),
                r.report.retransmit_share() * 100.0
            )),
            y(g),
            xv + 7.0,
            y(g) - 6.0,
            g,
            bottom + 18.0,
            escape(&show(name, r.value))
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Run `softverbs sim sweep`: exit 0 once every run has been made and reported, 2 if the
/// scenario or the parameter is wrong.
pub fn main(args: &SweepArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let (name, values) = parse_param(&args.param).map_err(CliError::usage)?;
    let sc = Scenario::load(&args.scenario).map_err(CliError::usage)?;
    let seed = args.seed.unwrap_or(sc.seed);
    let rows = sweep_seeds(&sc, &name, &values, seed, args.seeds).map_err(CliError::usage)?;
    let io = super::output_error;
    let runs = match args.seeds {
        1 => format!("seed {seed}: one run per value of {name} on every link"),
        n => format!(
            "seeds {seed} to {}: {n} runs per value of {name} on every link, each row the median \
             run",
            seed + n - 1
        ),
    };
    writeln!(out, "scenario {}, {runs}", sc.name).map_err(io)?;
    for l in table(&name, &rows) {
        writeln!(out, "{l}").map_err(io)?;
    }
    if args.explain {
        writeln!(out).map_err(io)?;
        for l in explain(&sc, &name, &rows) {
            writeln!(out, "{l}").map_err(io)?;
        }
    }
    if let Some(path) = &args.plot {
        let title = plot_title(&sc.name, &name, seed, args.seeds);
        std::fs::write(path, plot(&title, &name, &rows)).map_err(|e| {
            CliError::failed(format!("writing the plot to {}: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// The plot's title: the scenario, the parameter and the seeds.
pub fn plot_title(scenario: &str, name: &str, seed: u64, seeds: u64) -> String {
    match seeds {
        1 => format!("{scenario}: goodput against {name} (seed {seed})"),
        n => format!("{scenario}: goodput against {name} (seeds {seed} to {})", seed + n - 1),
    }
}
