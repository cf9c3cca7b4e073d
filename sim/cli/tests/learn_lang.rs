//! The Traditional Chinese of the lessons, the demo and the failure drills is a table keyed on
//! the English lines they print (`cmd/learn/lang.rs`). This runs each of them in English, in a
//! small configuration, and holds the table to what they print in both directions: a key no
//! run prints any more (its English was reworded or rewrapped, so its Chinese is lost) fails,
//! and so does an explanatory line printed without a translation. What "explanatory" means is
//! [`explanatory`]'s, the same definition as `lang.rs`'s module documentation.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use softverbs::cmd::learn::lang::{self, Lang};
use softverbs_sim::peer::{FabricDir, Peer, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The longest any one run may take here (debug build, shared cores).
const DEADLINE: Duration = Duration::from_secs(120);

/// Every run whose output the table translates: each lesson (small sizes and counts), the demo
/// with two processes and in one, and each failure drill.
const RUNS: &[&[&str]] = &[
    &["learn", "zero-copy", "--size", "4096", "-n", "4"],
    &["learn", "bypass", "-n", "100"],
    &["learn", "one-sided", "--size", "1M"],
    &["learn", "messages"],
    &["learn", "sge"],
    &["learn", "vs-tcp", "--size", "4096", "-n", "20"],
    &["learn", "qp-states"],
    &["learn", "mr"],
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
];

/// Whether `text` (a printed line without its indentation) is explanatory, so must be
/// translated: everything but an empty or `RESULT` line, a line that carries a number (an
/// ASCII digit), a verbs constant (`IBV_`), a command, a wire or verbs result line, or a table's
/// column heading. (Lines with numbers are translated by templates, which `zh_tw.rs` checks:
/// no line is left in English by choice any more.)
fn explanatory(text: &str) -> bool {
    let command =
        ["softverbs learn", "softverbs demo", "softverbs perf", "softverbs devinfo", "man "];
    let result = ["wire ", "-> ", "=> ", "RESULT "];
    !(text.is_empty()
        || text.bytes().any(|b| b.is_ascii_digit())
        || text.contains("IBV_")
        || command.iter().chain(&result).any(|p| text.starts_with(p))
        || text.ends_with("which is better")
        || text.starts_with("operation "))
}

/// Runs `softverbs ARGS` in English on a fabric of its own, to its end (bounded); its lines.
fn english(args: &[&str], n: usize) -> Vec<String> {
    let fabric = FabricDir::create(&format!("softverbs-lang-test-{}-{n}", std::process::id()))
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

#[test]
fn every_key_is_printed_and_every_explanatory_line_is_translated() {
    let mut printed = BTreeSet::new();
    let mut untranslated = BTreeSet::new();
    for (n, args) in RUNS.iter().enumerate() {
        for line in english(args, n) {
            let text = line.trim_start().to_string();
            if explanatory(&text) && lang::line(Lang::ZhTw, &text) == text {
                untranslated.insert(format!("{args:?}: {text}"));
            }
            printed.insert(text);
        }
    }
    let stale: Vec<&str> = lang::english_lines().filter(|en| !printed.contains(*en)).collect();
    assert!(
        stale.is_empty(),
        "translated English lines no run prints any more (reworded or rewrapped? translate \
         the new lines and drop these): {stale:#?}"
    );
    assert!(
        untranslated.is_empty(),
        "explanatory lines without a translation (add them to lang.rs, lang_demo.rs or \
         lang_lessons.rs): {untranslated:#?}"
    );
}

#[test]
fn the_definition_of_explanatory_sorts_known_lines() {
    for run_line in [
        "RESULT learn=messages rdma_lens=[10,200,3000]",
        "wire  softverbs0 -> RC SEND ONLY",
        "target CQ: receive completion 1: byte_len 10",
        "IBV_WC_LOC_LEN_ERR and the initiator got IBV_WC_REM_INV_REQ_ERR. Post receives at least as",
        "softverbs learn sge          (one message from three buffers into two)",
        "-> EINVAL (ibv_modify_qp: INIT -> RTR on an IBV_QPT_RC QP requires IBV_QP_DEST_QPN)",
        "",
    ] {
        assert!(!explanatory(run_line), "{run_line:?} is not explanatory");
    }
    for prose in
        ["What to watch:", "the target program itself must call read() and write() for every byte."]
    {
        assert!(explanatory(prose), "{prose:?} is explanatory");
        assert_ne!(lang::line(Lang::ZhTw, prose), prose, "{prose:?} has its translation");
    }
}
