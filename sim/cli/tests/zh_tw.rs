//! `--lang zh-TW` prints Chinese: each run here is made in Traditional Chinese and must keep no
//! English sentence outside the names it leaves as they are (verbs and wire names, constants,
//! numbers and units, quoted data, GIDs, paths, commands and wire lines), and the templates of
//! lines with the run's numbers (`cmd/learn/lang_live.rs`, `cmd/learn/lang_lessons.rs`) must
//! each match a line the runs print in English, so that a reworded line fails here instead of
//! losing its Chinese. Every lesson runs, every drill and the demo; `learn vs-tcp`, whose
//! numbers depend on the machine, runs on stand-in measurements (a slow RDMA side, a slow TCP
//! side, mixed results on a crowded machine), so every verdict word and both takeaways print.

use std::process::Command;
use std::time::Duration;

use softverbs::cmd::learn::lang::{Lang, Translating};
use softverbs::cmd::learn::lang_live;
use softverbs::cmd::learn::vs_tcp_lesson::{self as vs_tcp, Machine, Measure, Sample};
use softverbs::cmd::CliError;
use softverbs_sim::peer::{FabricDir, Peer, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const DEADLINE: Duration = Duration::from_secs(120);

/// The runs that must be all Chinese.
const RUNS: &[&[&str]] = &[
    &["learn"],
    &["demo"],
    &["demo", "--in-process"],
    &["demo", "--break", "rkey"],
    &["demo", "--break", "bounds"],
    &["demo", "--break", "small-recv"],
    &["demo", "--break", "no-recv"],
    &["demo", "--break", "rnr"],
    &["demo", "--break", "peer-dies"],
    &["demo", "--break", "no-gid"],
    &["demo", "--break", "cq-overrun"],
    &["learn", "zero-copy", "--size", "4096", "-n", "4"],
    &["learn", "bypass", "-n", "100"],
    &["learn", "one-sided", "--size", "1M"],
    &["learn", "messages"],
    &["learn", "sge"],
    &["learn", "qp-states"],
    &["learn", "mr"],
];

/// Templates of lines no drill is sure to print, each with why: exempt from the check that
/// every template matches a printed line.
const SOMETIMES: &[(&str, &str)] = &[
    (
        "RDMA WRITEs and READs here go by direct reach",
        "said when SOFTVERBS_REACH is on: the lessons' runs turn it off; the stand-ins print it \
         unless the tests run with SOFTVERBS_REACH=0",
    ),
    ("NAK: remote operational error", "no drill provokes it; a NAK code like the others"),
    (
        "NAK: PSN sequence error",
        "the SEND behind the refused one reaches the target before or after the requester's QP \
         has gone to ERR or resent, as the run's timing has it",
    ),
    (
        "the SEND behind reached the target while it still expected PSN {}",
        "the same: printed under a PSN sequence error NAK, when there is one",
    ),
];

/// Runs `softverbs ARGS` on a fabric of its own, to its end (bounded); its lines.
fn run(args: &[&str], tag: &str) -> Vec<String> {
    let fabric = FabricDir::create(&format!("softverbs-zh-test-{}-{tag}", std::process::id()))
        .expect("a fabric directory");
    let mut cmd = Command::new(BIN);
    cmd.args(args).arg("--fabric").arg(fabric.path());
    cmd.env_remove("SOFTVERBS_FABRIC");
    let mut p = Peer::spawn("softverbs", cmd, Stderr::Capture).expect("spawn softverbs");
    p.close_stdin();
    let lines = p.remaining_lines(DEADLINE);
    let status = p.wait_exit(DEADLINE).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(status.success(), "softverbs {args:?}: {status}\n{}\n{}", lines.join("\n"), p.stderr());
    lines
}

/// The command line's own words (subcommands, lessons, drills), names wherever they stand.
const COMMAND_WORDS: &[&str] = &[
    "demo",
    "learn",
    "perf",
    "lat",
    "bw",
    "labs",
    "sim",
    "sweep",
    "book",
    "run",
    "devinfo",
    "rkey",
    "bounds",
    "small-recv",
    "no-recv",
    "rnr",
    "peer-dies",
    "no-gid",
    "cq-overrun",
    "zero-copy",
    "bypass",
    "one-sided",
    "messages",
    "sge",
    "vs-tcp",
    "qp-states",
    "mr",
];

/// Whether a word is a name left as it is: a verbs or wire name, a constant, a number or a
/// value with one, a function, a path, a GID, a command word.
fn a_name(word: &str) -> bool {
    let letters = word.chars().filter(|c| c.is_ascii_alphabetic()).count();
    word.chars().any(|c| c.is_ascii_digit() || "_/:(=<>[+#".contains(c))
        || !word.is_ascii()
        || letters == 0
        || (word.len() >= 2 && word.chars().all(|c| !c.is_ascii_lowercase()))
        || ["RoCE", "IPv4", "IPv6", "softverbs", "zh-TW"].contains(&word)
        || word.starts_with('-')
        || COMMAND_WORDS.contains(&word)
        || word.starts_with("softverbs")
        || word.contains(".rs")
        || word.contains(".md")
}

/// The first English sentence in `line` (three English words in a row, outside quotes), if
/// any. Lines that are commands, wire lines or the result line are not prose.
fn english_sentence(line: &str) -> Option<String> {
    let text = line.trim_start();
    // (A line that starts with `softverbs` is prose all the same when it says something after
    // the command: the drills' first line.)
    let skip = ["wire ", "$ ", "-> ", "=> ", "RESULT ", "cc ", "man "];
    if skip.iter().any(|p| text.starts_with(p)) {
        return None;
    }
    // Quoted text is data (what landed in memory) or a library's own string
    // (ibv_wc_status_str): left as it is.
    // So is `code`.
    let mut unquoted = String::new();
    for (i, part) in text.split('"').enumerate() {
        if i % 2 == 0 {
            for (j, piece) in part.split('`').enumerate() {
                if j % 2 == 0 {
                    unquoted.push_str(piece);
                    unquoted.push(' ');
                }
            }
        }
    }
    let mut run: Vec<&str> = Vec::new();
    for raw in unquoted.split(|c: char| c.is_whitespace() || "，、：；（）。".contains(c)) {
        let word = raw.trim_matches(|c: char| ",.;:()!?'".contains(c));
        if word.is_empty() {
            continue;
        }
        if a_name(word) {
            run.clear();
            continue;
        }
        run.push(word);
        if run.len() >= 3 {
            return Some(run.join(" "));
        }
    }
    None
}

#[test]
fn the_detector_finds_english_and_passes_names() {
    assert!(english_sentence("  the target posted 1 receive(s) of 256 bytes").is_some());
    assert!(english_sentence("Takeaway: an rkey is a capability").is_some());
    assert!(english_sentence("網站：`softverbs book --out DIR` 建成").is_none());
    for ok in [
        "  發起端 CQ：wr_id=1 status=IBV_WC_REM_ACCESS_ERR (10, \"remote access error\") vendor_err=0x0",
        "  GID[  0]: fe80::aff:fe00:1, RoCE v2, IPv6",
        "  wire    0.160 ms  softverbs0 -> RC SEND ONLY   PSN 0x001000",
        "  NAK：遠端存取錯誤（syndrome 0x62），PSN 0x001000",
        "RESULT learn=qp-states masks=[57]",
        "  ibv_modify_qp(qp, { qp_state = IBV_QPS_INIT, ... }, 0x000039)",
    ] {
        assert_eq!(english_sentence(ok), None, "{ok}");
    }
}

#[test]
fn every_zh_tw_run_is_chinese_and_every_template_is_printed() {
    let mut english = Vec::new();
    let mut printed = Vec::new();
    for (n, args) in RUNS.iter().enumerate() {
        printed.extend(run(args, &format!("en{n}")));
        let mut zh: Vec<&str> = args.to_vec();
        zh.extend(["--lang", "zh-TW"]);
        for line in run(&zh, &format!("zh{n}")) {
            if let Some(s) = english_sentence(&line) {
                english.push(format!("{args:?}: {line}\n    ({s})"));
            }
        }
    }
    printed.extend(vs_tcp_english());
    let unmatched: Vec<&str> = lang_live::templates()
        .filter(|t| !SOMETIMES.iter().any(|(p, _)| t.starts_with(p)))
        .filter(|t| !printed.iter().any(|l| lang_live::matches(t, l.trim_start()).is_some()))
        .collect();
    assert!(
        unmatched.is_empty(),
        "templates no run prints any more (reworded? translate the new line): {unmatched:#?}"
    );
    assert!(english.is_empty(), "English left in --lang zh-TW output:\n{}", english.join("\n"));
}

/// A stand-in for `learn vs-tcp`'s measurements: RDMA's and TCP's half round trip at every
/// size, `jitter` making each sample's ranges wide enough to overlap where the two are close.
struct StandIn {
    rdma_us: f64,
    tcp_us: f64,
    jitter: f64,
    calls: usize,
}

impl Measure for StandIn {
    fn sample(&mut self, size: u32, _: usize, _: u64, _: bool) -> Result<Sample, CliError> {
        self.calls += 1;
        let j = 1.0 + (self.calls % 3) as f64 * self.jitter;
        let (r, t) = (self.rdma_us * j, self.tcp_us * j);
        Ok(Sample {
            lat_us: [r, t],
            bw_mbs: [f64::from(size) / r, f64::from(size) / t],
            cpu_per_msg_us: [2.0 * r, t],
            cpu_per_gb_ms: [100.0, 0.0],
            calls: [0.001, 2.0],
            copies: [3.0 * f64::from(size), 3.0 * f64::from(size)],
        })
    }
}

/// `learn vs-tcp`'s text on `m`, in `lang`.
fn vs_tcp_text(m: &mut StandIn, machine: Machine, lang: Lang) -> Vec<String> {
    let mut out = Vec::new();
    let mut t = Translating::new(&mut out, lang);
    vs_tcp::lesson(m, &mut t, 65536, 100, machine).expect("the lesson on stand-ins");
    t.finish().unwrap();
    String::from_utf8(out).unwrap().lines().map(String::from).collect()
}

/// The stand-ins: a slow RDMA side on a crowded machine, a slow TCP side on a quiet one, and
/// results close enough that the ranges overlap.
fn stand_ins() -> Vec<(StandIn, Machine)> {
    let quiet = Machine { cores: 8, load: 0.0 };
    let crowded = Machine { cores: 2, load: 1.5 };
    vec![
        (StandIn { rdma_us: 120.0, tcp_us: 10.0, jitter: 0.01, calls: 0 }, crowded),
        (StandIn { rdma_us: 2.0, tcp_us: 30.0, jitter: 0.01, calls: 0 }, quiet),
        (StandIn { rdma_us: 10.0, tcp_us: 10.5, jitter: 0.3, calls: 0 }, quiet),
    ]
}

#[test]
fn vs_tcp_is_chinese_on_every_stand_in() {
    let mut english = Vec::new();
    let mut seen = String::new();
    for (mut m, machine) in stand_ins() {
        for line in vs_tcp_text(&mut m, machine, Lang::ZhTw) {
            if let Some(s) = english_sentence(&line) {
                english.push(format!("{line}\n    ({s})"));
            }
            seen.push_str(&line);
            seen.push('\n');
        }
    }
    assert!(english.is_empty(), "English left in vs-tcp's zh-TW output:\n{}", english.join("\n"));
    // Every verdict and both closing sentences were printed, in Chinese.
    for zh in [
        "較佳：RDMA",
        "較佳：TCP",
        "相當（差距在 10% 內）",
        "不明：範圍重疊",
        "何者較佳",
        "警告：",
        "情形相反",
        "理由是",
    ] {
        assert!(seen.contains(zh), "{zh} in\n{seen}");
    }
}

/// The English lines of every run and of vs-tcp on its stand-ins.
fn vs_tcp_english() -> Vec<String> {
    stand_ins()
        .into_iter()
        .flat_map(|(mut m, machine)| vs_tcp_text(&mut m, machine, Lang::En))
        .collect()
}
