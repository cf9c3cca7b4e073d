//! `softverbs counters [-d DEV] [--watch [SECS]] [--json]`: every live port's counters on the
//! shared-memory fabric, read from the counters block its owner publishes in its inbox
//! segment, as `perfquery` and `rdma statistic show` show a real port's.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use nic_model::soft::counters::{COUNT, COUNTERS};
use nic_model::wire::{Fabric, PublishedCounters};

use verbs_api::Gid;

use super::{gid_ntop, json_str, output_error, CliError};

/// `softverbs counters`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct CountersArgs {
    /// Only the ports of this device (softverbs0, ...), in every process that has it open.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Show the counters again every SECS seconds (default 1) with each one's change per
    /// second, until interrupted.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
    pub watch: Option<f64>,
    /// With --watch: stop after N samples.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
    /// Print JSON for scripts: one object per sample, on one line.
    #[arg(long)]
    pub json: bool,
}

/// One port as read in one sample.
struct PortSample {
    c: PublishedCounters,
}

impl PortSample {
    fn value(&self, i: usize) -> Option<u64> {
        self.c.values.get(i).copied()
    }
    fn key(&self) -> (u16, u32) {
        (self.c.lid, self.c.owner_pid)
    }
    fn device(&self) -> &str {
        if self.c.label.is_empty() {
            "?"
        } else {
            &self.c.label
        }
    }
}

/// A sample of the fabric: the ports read, and the segments that were not.
struct Sample {
    ports: Vec<PortSample>,
    skipped: Vec<(String, String)>,
    at: Instant,
}

fn sample(fabric: &Fabric, dev: Option<&str>) -> Result<Sample, CliError> {
    let shown = fabric.dir().display();
    let infos =
        fabric.list().map_err(|e| CliError::failed(format!("listing the fabric {shown}: {e}")))?;
    let mut ports = Vec::new();
    let mut skipped = Vec::new();
    for info in infos {
        let path = info.path.display().to_string();
        let Some(lid) = info.lid else {
            skipped.push((path, "not a port's inbox".to_string()));
            continue;
        };
        if let Some(p) = &info.problem {
            skipped.push((path, p.clone()));
            continue;
        }
        if !info.alive {
            let pid = info.owner_pid.map_or("?".to_string(), |p| p.to_string());
            skipped.push((
                path,
                format!("owner pid {pid} is dead (`softverbs fabric clean` removes it)"),
            ));
            continue;
        }
        match fabric.read_counters(lid) {
            Ok(c) => {
                if dev.is_none_or(|d| d == c.label) {
                    ports.push(PortSample { c });
                }
            }
            // Closed or gone between the listing and the read: it was not live.
            Err(e) => skipped.push((path, e.to_string())),
        }
    }
    Ok(Sample { ports, skipped, at: Instant::now() })
}

/// `softverbs counters`.
pub fn counters(
    dir: Option<&Path>,
    args: &CountersArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if let Some(secs) = args.watch {
        if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
            return Err(CliError::usage(format!(
                "--watch {secs}: the interval must be more than 0 and at most 86400 seconds"
            )));
        }
    }
    if args.count == Some(0) {
        return Err(CliError::usage("--count 0: nothing to show; give at least 1"));
    }
    let dev = args.ib_dev.as_deref();
    let Some(fabric) = super::existing_fabric(dir)? else {
        let shown = Fabric::locate(dir).dir().display().to_string();
        if let Some(d) = dev {
            return Err(unknown_device(d, &shown));
        }
        // No directory, no port: shown as an empty fabric (a command that looks never creates).
        let empty = Sample { ports: Vec::new(), skipped: Vec::new(), at: Instant::now() };
        return show(&shown, &empty, None, args.json, out).map_err(output_error);
    };
    let shown = fabric.dir().display().to_string();
    let first = sample(&fabric, dev)?;
    if let Some(d) = dev {
        if first.ports.is_empty() {
            return Err(unknown_device(d, &shown));
        }
    }
    let Some(secs) = args.watch else {
        return show(&shown, &first, None, args.json, out).map_err(output_error);
    };
    let interval = Duration::from_secs_f64(secs);
    let redraw = !args.json && std::io::stdout().is_terminal();
    show(&shown, &first, None, args.json, out).map_err(output_error)?;
    let mut prev = first;
    let mut shown_samples = 1u64;
    while args.count.is_none_or(|n| shown_samples < n) {
        std::thread::sleep(interval);
        let next = sample(&fabric, dev)?;
        if redraw {
            // Clear the terminal and draw from its top, as `watch` does.
            write!(out, "\x1b[H\x1b[2J").map_err(output_error)?;
        }
        show(&shown, &next, Some(&prev), args.json, out).map_err(output_error)?;
        out.flush().map_err(output_error)?;
        prev = next;
        shown_samples += 1;
    }
    Ok(())
}

fn unknown_device(dev: &str, shown: &str) -> CliError {
    CliError::usage(format!(
        "-d {dev}: no live port of a device named {dev} on the fabric {shown} (is the program \
         that opened it running, on this fabric?)"
    ))
}

/// Change per second of counter `i` of `port` since `prev`, if the port was there.
fn rate(port: &PortSample, i: usize, prev: &Sample, secs: f64) -> Option<f64> {
    let before = prev.ports.iter().find(|p| p.key() == port.key())?.value(i)?;
    Some(port.value(i)?.wrapping_sub(before) as f64 / secs)
}

fn show(
    shown: &str,
    s: &Sample,
    prev: Option<&Sample>,
    json: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let secs = prev.map(|p| s.at.duration_since(p.at).as_secs_f64().max(1e-9));
    if json {
        return writeln!(out, "{}", to_json(shown, s, prev, secs));
    }
    let n = s.ports.len();
    match n {
        0 => writeln!(out, "fabric {shown}: no live ports")?,
        1 => writeln!(out, "fabric {shown}: 1 live port")?,
        n => writeln!(out, "fabric {shown}: {n} live ports")?,
    }
    if n > 0 {
        // One column per port, one row per counter, as `perfquery` lists a port's counters.
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut head = |name: &str, f: &dyn Fn(&PortSample) -> String| {
            let mut r = vec![name.to_string()];
            r.extend(s.ports.iter().map(f));
            rows.push(r);
        };
        head("device", &|p| format!("{}/1", p.device()));
        // No LID row: every soft port is a RoCE port, whose LID is 0 (as rxe's); a peer is
        // addressed by the GID below.
        head("GID", &|p| gid_ntop(&Gid(p.c.gid)));
        head("pid", &|p| p.c.owner_pid.to_string());
        for (i, c) in COUNTERS.iter().enumerate() {
            let mut r = vec![c.name.to_string()];
            for p in &s.ports {
                let v = p.value(i).map_or("-".to_string(), |v| v.to_string());
                let cell = match (prev, secs) {
                    (Some(prev), Some(secs)) => match rate(p, i, prev, secs) {
                        Some(r) => format!("{v} ({r:+.0}/s)"),
                        None => v,
                    },
                    _ => v,
                };
                r.push(cell);
            }
            rows.push(r);
        }
        let cols = n + 1;
        let widths: Vec<usize> =
            (0..cols).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
        for r in &rows {
            let mut line = String::from("  ");
            for (c, cell) in r.iter().enumerate() {
                if c == 0 {
                    let _ = write!(line, "{cell:<w$}", w = widths[0]);
                } else {
                    let _ = write!(line, "  {cell:>w$}", w = widths[c]);
                }
            }
            writeln!(out, "{line}")?;
        }
        writeln!(
            out,
            "port_xmit_data and port_rcv_data count 4-byte words, as InfiniBand's do; \
             `softverbs counters --help` and docs/guide.md (\"Counters\") say what each counts."
        )?;
    }
    for (path, why) in &s.skipped {
        writeln!(out, "not shown: {path}: {why}")?;
    }
    Ok(())
}

fn to_json(shown: &str, s: &Sample, prev: Option<&Sample>, secs: Option<f64>) -> String {
    let mut o = format!("{{\"fabric\":{},\"ports\":[", json_str(shown));
    for (k, p) in s.ports.iter().enumerate() {
        if k > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"device\":{},\"port\":1,\"lid\":0,\"fabric_slot\":{},\"gid\":{},\"pid\":{},\"counters\":{{",
            json_str(&p.c.label),
            p.c.lid,
            json_str(&gid_ntop(&Gid(p.c.gid))),
            p.c.owner_pid
        );
        let fields: Vec<String> = (0..COUNT)
            .filter_map(|i| p.value(i).map(|v| format!("{}:{v}", json_str(COUNTERS[i].name))))
            .collect();
        o.push_str(&fields.join(","));
        o.push('}');
        if let (Some(prev), Some(secs)) = (prev, secs) {
            let rates: Vec<String> = (0..COUNT)
                .filter_map(|i| {
                    rate(p, i, prev, secs).map(|r| format!("{}:{r:.3}", json_str(COUNTERS[i].name)))
                })
                .collect();
            let _ = write!(o, ",\"per_second\":{{{}}}", rates.join(","));
        }
        o.push('}');
    }
    o.push_str("],\"not_shown\":[");
    let skipped: Vec<String> = s
        .skipped
        .iter()
        .map(|(p, w)| format!("{{\"path\":{},\"reason\":{}}}", json_str(p), json_str(w)))
        .collect();
    o.push_str(&skipped.join(","));
    o.push_str("]}");
    o
}
