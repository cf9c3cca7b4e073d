//! `softverbs learn CONCEPT`: the primer's RDMA concepts, each shown live between two processes
//! on the soft backend and measured against TCP between the same two processes in the same run,
//! with the emulation's own cost shown for what it is. One file per lesson in `lessons/`
//! (`zero_copy`, `bypass`, `one_sided`, `messages`, `sge`, `vs_tcp`, and the control path's
//! `qp_states` and `mr`, which run in this process alone); what they share: the two processes and
//! the target's commands (`session`), the measured runs (`runs`), the TCP side (`tcp`), the
//! per-thread measurements (`measure`), the table (`table`) and the language of the explanatory
//! lines (`lang`, with `lang_demo`: the demo's lines, which `softverbs demo --lang` uses).

pub mod lang;
mod lang_demo;
mod lang_lessons;
pub mod lang_live;
mod lang_new;
mod lessons;
pub(crate) mod measure;
mod runs;
mod session;
mod table;
mod tcp;

/// `learn vs-tcp`'s lesson on any [`vs_tcp_lesson::Measure`], so that tests can print it from
/// stand-in measurements (a slow RDMA side, a slow TCP side) without the machine's timing.
pub mod vs_tcp_lesson {
    pub use super::lessons::vs_tcp::{lesson, Machine, Measure, Sample};
}

use std::io::Write;
use std::path::PathBuf;

use crate::cmd::{json_str, CliError};
use lessons::{bypass, messages, mr, one_sided, qp_states, sge, vs_tcp, zero_copy};

/// The lessons: name and one line each, in the order of the primer.
pub const LESSONS: [(&str, &str); 8] = [
    (
        "zero-copy",
        "who copies a message's bytes: the program, the NIC, the kernel (RDMA WRITE vs TCP)",
    ),
    ("bypass", "system calls and context switches per message: RDMA's data path vs TCP's"),
    ("one-sided", "the target's CPU while data arrives by RDMA WRITE and READ, then by TCP"),
    ("messages", "three SENDs give three completions; three TCP writes arrive as reads return"),
    ("sge", "one message gathered from three buffers, scattered into two; max_sge + 1"),
    ("vs-tcp", "latency, bandwidth, CPU, system calls and copies over a range of sizes"),
    (
        "qp-states",
        "a QP walked RESET -> INIT -> RTR -> RTS, a missing attribute, ERR's flush, RESET",
    ),
    ("mr", "keys and access flags: a WRITE the NIC refuses on the wire, a deregistered rkey"),
];

/// Arguments of `softverbs learn`.
#[derive(clap::Args, Debug, Clone)]
pub struct LearnArgs {
    /// The concept to learn (without one, the list of lessons).
    #[arg(value_name = "CONCEPT")]
    pub concept: Option<String>,
    /// Message size (zero-copy, bypass), bytes each way (one-sided), the largest size
    /// (vs-tcp); with a K, M or G suffix for KiB, MiB, GiB.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub size: Option<u64>,
    /// How many messages (zero-copy), round trips (bypass, vs-tcp).
    #[arg(short = 'n', long, value_name = "N")]
    pub iters: Option<usize>,
    /// The device both processes open.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", default_value = "softverbs0")]
    pub ib_dev: String,
    /// Fabric directory [default: $SOFTVERBS_FABRIC, else a fresh one under /dev/shm, removed
    /// at the end]
    #[arg(long, value_name = "DIR")]
    pub fabric: Option<PathBuf>,
    /// Print one JSON object instead of the text: the lesson, its measurements (the RESULT
    /// line's pairs) and the text it would have printed.
    #[arg(long)]
    pub json: bool,
    /// The language of the explanatory lines: en or zh-TW (繁體中文). Wire lines, verbs names,
    /// measured lines and the RESULT line stay as they are.
    #[arg(long, value_name = "LANG", default_value = "en", value_parser = lang::parse)]
    pub lang: lang::Lang,
    /// Internal: run as a lesson's target process.
    #[arg(long, hide = true)]
    pub target: bool,
    /// Internal: the target's MR size.
    #[arg(long, hide = true, default_value_t = MR_LEN)]
    pub mr: usize,
}

/// Registered memory on each side: room for [`runs::rdma_stream`]'s window of 1 MiB messages.
const MR_LEN: usize = 8 << 20;

/// `4096`, `64K`, `1M`, `1G`: a size in bytes, at least 1.
fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    match num.parse::<u64>().ok().and_then(|n| n.checked_mul(mul)) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(format!("{s:?} is not a size in bytes (such as 4096, 64K, 1M, 1G)")),
    }
}

fn list(out: &mut dyn Write) -> Result<(), CliError> {
    let mut lines = vec!["softverbs learn CONCEPT: the primer's RDMA concepts, each measured against TCP in the same run.".to_string(), String::new()];
    for (name, what) in LESSONS {
        lines.push(format!("  {name:<10} {what}"));
    }
    lines.push(String::new());
    lines.push("Each lesson runs two processes on the soft backend; qp-states and mr, two devices of one process (docs/learn/README.md).".into());
    lines.push("The book of the lessons, drills and labs: docs/learn/ and docs/zh-TW/; `softverbs book --out DIR` builds it as a site.".into());
    table::lines(out, "", &lines)
}

fn u32_size(v: u64, what: &str) -> Result<u32, CliError> {
    u32::try_from(v).ok().filter(|&s| s as usize <= MR_LEN / 2).ok_or_else(|| {
        CliError::usage(format!("--size {v}: {what} must be at most {} bytes", MR_LEN / 2))
    })
}

/// Runs `softverbs learn` (or its target process), printing to `out`.
pub fn run(a: &LearnArgs, outer: &mut dyn Write) -> Result<(), CliError> {
    // The lessons count packets, ring copies and the emulated NIC threads' work: RDMA
    // WRITEs and READs travel as packets, as on a real wire, not by direct reach (which
    // `softverbs perf` measures), unless the user asked for it. Set before any device opens
    // and before the target process starts, which inherits it.
    if std::env::var_os("SOFTVERBS_REACH").is_none() {
        std::env::set_var("SOFTVERBS_REACH", "off");
    }
    if a.target {
        return session::target_main(a.fabric.as_deref(), &a.ib_dev, a.mr);
    }
    let Some(concept) = a.concept.as_deref() else {
        let mut translating = lang::Translating::new(outer, a.lang);
        list(&mut translating)?;
        return translating.finish().map_err(crate::cmd::output_error);
    };
    if !LESSONS.iter().any(|(n, _)| *n == concept) {
        let names: Vec<&str> = LESSONS.iter().map(|l| l.0).collect();
        return Err(CliError::usage(format!(
            "no lesson {concept:?}; the lessons are {}",
            names.join(", ")
        )));
    }
    // Check the options before any process starts.
    let size = match (concept, a.size) {
        ("zero-copy", s) => u64::from(u32_size(s.unwrap_or(64 << 10), "a message")?),
        ("bypass", s) => u64::from(u32_size(s.unwrap_or(64), "a message")?),
        ("vs-tcp", s) => u64::from(u32_size(s.unwrap_or(1 << 20), "the largest message")?),
        ("one-sided", s) => s.unwrap_or(1 << 30),
        (_, Some(_)) => {
            return Err(CliError::usage(format!("--size: the {concept} lesson has fixed sizes")))
        }
        (_, None) => 0,
    };
    if a.iters == Some(0) {
        return Err(CliError::usage("-n 0: at least one"));
    }
    if a.iters.is_some() && matches!(concept, "one-sided" | "messages" | "sge" | "qp-states" | "mr")
    {
        return Err(CliError::usage(format!("-n: the {concept} lesson has a fixed count")));
    }
    if matches!(concept, "qp-states" | "mr") {
        // The control path needs no second process and no TCP: one process, two devices.
        let mut text = Vec::new();
        let plain: &mut dyn Write = if a.json { &mut text } else { &mut *outer };
        let mut translating = lang::Translating::new(plain, a.lang);
        if concept == "mr" {
            mr::run(&mut translating)?;
        } else {
            qp_states::run(&mut translating)?;
        }
        translating.finish().map_err(crate::cmd::output_error)?;
        if a.json {
            let text = String::from_utf8_lossy(&text);
            table::lines(outer, "", &[json(concept, &text)])?;
        }
        return Ok(());
    }
    let w = session::Where { ib_dev: a.ib_dev.clone(), fabric: a.fabric.clone(), mr_len: MR_LEN };
    let mut s = session::Session::start(&w)?;
    let mut text = Vec::new();
    let plain: &mut dyn Write = if a.json { &mut text } else { &mut *outer };
    let mut translating = lang::Translating::new(plain, a.lang);
    let out: &mut dyn Write = &mut translating;
    let r = match concept {
        "zero-copy" => zero_copy::run(&mut s, out, size as u32, a.iters.unwrap_or(256) as u64),
        "bypass" => bypass::run(&mut s, out, a.iters.unwrap_or(10_000), size as u32),
        "one-sided" => one_sided::run(&mut s, out, size, 1 << 20),
        "messages" => messages::run(&mut s, out),
        "sge" => sge::run(&mut s, out),
        _ => vs_tcp::run(&mut s, out, size as u32, a.iters.unwrap_or(2000)),
    };
    r?;
    translating.finish().map_err(crate::cmd::output_error)?;
    s.finish().map_err(CliError::failed)?;
    if a.json {
        let text = String::from_utf8_lossy(&text);
        table::lines(outer, "", &[json(concept, &text)])?;
    }
    Ok(())
}

/// The `--json` object of a lesson whose text output is `text`: `lesson`, `result` (the
/// `RESULT` line's pairs: numbers as numbers, `[n,n]` as lists of them, anything else as a
/// string), `text`.
fn json(concept: &str, text: &str) -> String {
    let mut pairs = Vec::new();
    let line = text.lines().find_map(|l| l.strip_prefix("RESULT ")).unwrap_or("");
    let mut rest = line.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let (value, next, quoted) = match after.strip_prefix('"') {
            Some(q) => {
                let end = q.find('"').unwrap_or(q.len());
                (&q[..end], q.get(end + 1..).unwrap_or("").trim_start(), true)
            }
            None => {
                let (v, n) = after.split_once(' ').unwrap_or((after, ""));
                (v, n, false)
            }
        };
        let is_number = |v: &str| !v.is_empty() && v.parse::<f64>().is_ok_and(f64::is_finite);
        let list = value.strip_prefix('[').and_then(|v| v.strip_suffix(']'));
        let v = match list {
            // `[1,2,3]`: a list of numbers.
            Some(items) if !quoted && items.split(',').all(is_number) => format!("[{items}]"),
            _ if !quoted && is_number(value) => value.to_string(),
            _ => json_str(value),
        };
        pairs.push(format!("{}:{v}", json_str(key.trim())));
        rest = next;
    }
    format!(
        "{{\"lesson\":{},\"result\":{{{}}},\"text\":{}}}",
        json_str(concept),
        pairs.join(","),
        json_str(text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes_and_bad_ones_are_named() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x1M").unwrap_err().contains("x1M"));
        assert_eq!(vs_tcp::sizes(1 << 20), vec![256, 4096, 65536, 1 << 20]);
        assert_eq!(vs_tcp::sizes(64), vec![64]);
    }
}
