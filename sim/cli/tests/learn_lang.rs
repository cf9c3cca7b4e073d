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

/// Lines left in English by choice though no rule of [`explanatory`] covers them: the lines of a
/// paragraph that quotes the run's own numbers on its other lines (so that it reads in one
/// language), and the live run's narration of what it just did. A line here that no run prints
/// any more fails too.
const ENGLISH_BY_CHOICE: &[&str] = &[
    // bypass, what is emulated: quotes this run's system calls.
    "The emulated NIC is a thread in each process. While a program polls, that thread stands",
    "does in silicon, where a program's post and poll are memory writes and reads too.",
    "When a program is descheduled for over a millisecond, its NIC thread takes over and",
    "then sleeps on its doorbell; the peer's next SEND wakes it with a system call, counted",
    "above on the program threads. A real NIC never sleeps: a doorbell is a memory write.",
    "softverbs counts its own system calls (futex and parker waits and wakes, scheduler calls)",
    "at the call sites; a TCP call is counted by the lesson at the call and by the kernel.",
    // zero-copy, what is emulated: quotes this run's bytes and CPU.
    "per message (read from the sender's MR, into a ring slot of the shared-memory wire, out",
    "by DMA and writes it once by DMA, in silicon, with no CPU and no ring copy. And while a",
    "program calls in, softverbs runs the NIC's work inline, in the program's own verbs calls",
    "(ibv_post_send builds the packets, ibv_poll_cq takes them in): part of the programs' CPU",
    "above is that work, and none of it is a copy the program asked for.",
    // one-sided, what is emulated: quotes this run's CPU times.
    "the lesson's requests for its measurements, before and after each phase); the emulated",
    "emulated NIC thread also competes with the compute loop, which a real NIC never does.",
    "The initiator's program CPU includes the NIC work softverbs runs inline in its verbs",
    "calls (building and taking in packets while it posts and polls).",
    // sge, qp-states and mr: the live run's narration.
    "The QP refused it at post time: nothing went on the wire and no completion is due.",
    "TCP: one writev() of the same three buffers; the target reads into one buffer.",
    // sge, what is emulated: quotes this run's count of the emulated NIC's copies.
    "copied (the three pieces read, the packets with their headers built in shared memory,",
    "the two buffers written: the initiator's NIC code and the target's NIC or program thread).",
    "A real NIC does both by DMA: its engine reads and writes the memory, and no CPU copies a",
    "byte. TCP's writev also gathers, but the kernel copies each byte in, and read() out again.",
    "The same step with every required attribute:",
    "The target registered two buffers (ibv_reg_mr):",
    "the target's buffer now holds \"written by RDMA\"",
    "the read-only buffer is untouched; initiator QP ERR, target QP ERR",
    // The demo: the port's GID table paragraph (port number, LID), the bytes a READ brought
    // back, and the note under the measurements (this run's times).
    "IP address of the port, named by its index in the port's GID table:",
    "Each QP's address vector carries a GRH: the peer's GID as dgid, this index as sgid_index.",
    "bytes that landed here: \"the target's memory, read without the target program\"",
    "the cold one: once the connection was set up, the target's NIC thread stood by, asleep",
    "target program called in again; the program blocked in read() instead, so the NIC thread",
    "took over only when that interval ended (the first datagram also mapped the target's",
    "machine the scheduler can add milliseconds. Latency and bandwidth measured properly:",
];

/// Whether `text` (a printed line without its indentation) is explanatory, so must be
/// translated: everything but an empty or `RESULT` line, a line that carries a number (an
/// ASCII digit), a verbs constant (`IBV_`), a command, a wire or verbs result line, a table's
/// column heading, and the lines [`ENGLISH_BY_CHOICE`] lists.
fn explanatory(text: &str) -> bool {
    let command =
        ["softverbs learn", "softverbs demo", "softverbs perf", "softverbs devinfo", "man "];
    let result = ["wire ", "-> ", "=> ", "RESULT "];
    !(text.is_empty()
        || text.bytes().any(|b| b.is_ascii_digit())
        || text.contains("IBV_")
        || command.iter().chain(&result).any(|p| text.starts_with(p))
        || text.ends_with("which is better")
        || text.starts_with("operation ")
        || ENGLISH_BY_CHOICE.contains(&text))
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
        "explanatory lines without a translation (add them to lang.rs or lang_demo.rs, or, if \
         they quote the run's numbers, to ENGLISH_BY_CHOICE): {untranslated:#?}"
    );
    let unused: Vec<&&str> = ENGLISH_BY_CHOICE.iter().filter(|l| !printed.contains(**l)).collect();
    assert!(unused.is_empty(), "ENGLISH_BY_CHOICE lines no run prints any more: {unused:#?}");
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
