//! SVG plots of a run's [`Results`]: slowdown by size bucket, switch queue lengths over time,
//! hosts' transmit rates over time, pause time per port. Plain SVG 1.1, no script, the same
//! bytes for the same results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::results::{bucket_table, Results, Series};

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 46.0;
const COLOURS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn frame(title: &str, xlabel: &str, ylabel: &str, ymax: f64, xmax: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(s, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(s, "<text x=\"{}\" y=\"20\" font-size=\"14\">{}</text>", LEFT, esc(title));
    let (x0, y0, x1, y1) = (LEFT, H - BOTTOM, W - RIGHT, TOP);
    let _ = writeln!(
        s,
        "<path d=\"M{x0} {y1} L{x0} {y0} L{x1} {y0}\" stroke=\"black\" fill=\"none\"/>"
    );
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        let y = y0 - (y0 - y1) * f;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 4.0,
            y + 4.0,
            tick(ymax * f)
        );
        if xmax > 0.0 {
            let x = x0 + (x1 - x0) * f;
            let _ = writeln!(
                s,
                "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                y0 + 14.0,
                tick(xmax * f)
            );
        }
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        (x0 + x1) / 2.0,
        H - 8.0,
        esc(xlabel)
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        (y0 + y1) / 2.0,
        esc(ylabel)
    );
    s
}

fn tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn legend(s: &mut String, i: usize, name: &str) {
    let y = TOP + 14.0 * i as f64;
    let x = W - RIGHT + 10.0;
    let _ = writeln!(
        s,
        "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{:.1}\">{}</text>",
        y,
        COLOURS[i % COLOURS.len()],
        x + 14.0,
        y + 9.0,
        esc(name)
    );
}

/// A line plot of `series` (time in µs across, value up).
fn lines(title: &str, ylabel: &str, series: &[Series]) -> String {
    let xmax = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).max().unwrap_or(0);
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let (xm, ym) = ((xmax as f64 / 1e3).max(1e-9), if ymax > 0.0 { ymax } else { 1.0 });
    let mut s = frame(title, "virtual time, µs after the start", ylabel, ym, xm);
    let (x0, y0, x1, y1) = (LEFT, H - BOTTOM, W - RIGHT, TOP);
    for (i, se) in series.iter().enumerate().take(COLOURS.len()) {
        let mut d = String::new();
        for (j, &(t, v)) in se.points.iter().enumerate() {
            let x = x0 + (x1 - x0) * (t as f64 / 1e3) / xm;
            let y = y0 - (y0 - y1) * v / ym;
            let _ = write!(d, "{}{x:.1} {y:.1} ", if j == 0 { "M" } else { "L" });
        }
        let _ = writeln!(
            s,
            "<path d=\"{}\" stroke=\"{}\" fill=\"none\"/>",
            d.trim_end(),
            COLOURS[i % COLOURS.len()]
        );
        legend(&mut s, i, &se.name);
    }
    s.push_str("</svg>\n");
    s
}

/// Bars: a group per label, a bar per value.
fn bars(title: &str, ylabel: &str, keys: &[&str], groups: &[(String, Vec<f64>)]) -> String {
    let ymax = groups.iter().flat_map(|g| g.1.iter().copied()).fold(0.0, f64::max);
    let ym = if ymax > 0.0 { ymax } else { 1.0 };
    let mut s = frame(title, "", ylabel, ym, 0.0);
    let (x0, y0, x1, y1) = (LEFT, H - BOTTOM, W - RIGHT, TOP);
    let gw = (x1 - x0) / groups.len().max(1) as f64;
    let bw = gw * 0.8 / keys.len().max(1) as f64;
    for (g, (label, vals)) in groups.iter().enumerate() {
        let gx = x0 + gw * g as f64 + gw * 0.1;
        for (k, v) in vals.iter().enumerate() {
            let h = (y0 - y1) * v / ym;
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bw:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{} {}: {v:.3}</title></rect>",
                gx + bw * k as f64,
                y0 - h,
                COLOURS[k % COLOURS.len()],
                esc(label),
                esc(keys[k])
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            gx + gw * 0.4,
            y0 + 14.0,
            esc(label)
        );
    }
    for (k, key) in keys.iter().enumerate() {
        legend(&mut s, k, key);
    }
    s.push_str("</svg>\n");
    s
}

/// Write the plots `results` has data for into `dir` (created if missing): `slowdown.svg`,
/// `queues.svg`, `rates.svg`, `cc-rates.svg` (with congestion control), `pauses.svg`; returns
/// the files written.
pub fn write_plots(results: &Results, title: &str, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    let mut put = |name: &str, svg: String| -> Result<(), String> {
        let p = dir.join(name);
        std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        files.push(p);
        Ok(())
    };
    let table = bucket_table(&results.flows);
    if !table.is_empty() {
        let groups: Vec<(String, Vec<f64>)> = table
            .iter()
            .map(|b| (format!("{} ({})", b.label, b.flows), vec![b.p50, b.p95, b.p99]))
            .collect();
        put(
            "slowdown.svg",
            bars(
                &format!("{title}: FCT slowdown by flow size"),
                "slowdown",
                &["p50", "p95", "p99"],
                &groups,
            ),
        )?;
    }
    if !results.queues.is_empty() {
        put("queues.svg", lines(&format!("{title}: switch queues"), "bytes", &results.queues))?;
    }
    if !results.rates.is_empty() {
        put(
            "rates.svg",
            lines(&format!("{title}: host transmit rates"), "Gbit/s", &results.rates),
        )?;
    }
    if !results.cc_rates.is_empty() {
        put(
            "cc-rates.svg",
            lines(&format!("{title}: flows' rate limits"), "Gbit/s", &results.cc_rates),
        )?;
    }
    if !results.pauses.is_empty() {
        let groups: Vec<(String, Vec<f64>)> = results
            .pauses
            .iter()
            .take(16)
            .map(|p| (p.link.clone(), vec![p.paused_ns as f64 / 1e3]))
            .collect();
        put(
            "pauses.svg",
            bars(&format!("{title}: PFC pause time per port"), "µs paused", &["paused"], &groups),
        )?;
    }
    Ok(files)
}
