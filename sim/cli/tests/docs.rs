//! The documentation keeps its promises: every scenario (```toml block) in the README, the
//! guide and the simulator page loads and its run passes, and every command line the README,
//! the guide and the lessons' pages (docs/learn/) show — in a shell block, in a `softverbs ...` code span, or in a table of
//! commands — is run here on the debug binary with a private fabric (exit status 0 and a line
//! of the output it promises), or is listed in [`PLANS`] as deliberately not run, with the
//! reason. A command added to those pages and not to [`PLANS`] fails
//! `every_command_in_the_readme_and_guide_is_planned`. (The Rust examples of the pages are
//! doctests of the `softverbs-tests` crate: `tests/src/docs.rs`.)

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use softverbs_sim::peer::{Peer, Stderr};
use softverbs_sim::world::scenario::{run, RunOptions, Scenario};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The longest any one command of these tests may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// The pages whose scenarios are run.
const SCENARIO_PAGES: [&str; 3] = ["README.md", "docs/guide.md", "docs/simulator.md"];
/// The pages whose command lines are run.
const COMMAND_PAGES: [&str; 17] = [
    "README.md",
    "docs/guide.md",
    "docs/learn/README.md",
    "docs/learn/zero-copy.md",
    "docs/learn/bypass.md",
    "docs/learn/one-sided.md",
    "docs/learn/messages.md",
    "docs/learn/sge.md",
    "docs/learn/vs-tcp.md",
    "docs/learn/qp-states.md",
    "docs/learn/mr.md",
    "docs/learn/drills.md",
    "docs/learn/perftest.md",
    "docs/learn/roce-ib-iwarp.md",
    "docs/learn/real-cluster.md",
    "docs/learn/ladders.md",
    "docs/learn/labs.md",
];

fn root() -> PathBuf {
    // This crate is sim/cli/, two levels below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

fn page(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// A fenced block: where it starts (`page:line` of its first content line), its info string
/// (`toml`, `sh`, ...) and its lines.
struct Block {
    at: String,
    info: String,
    lines: Vec<String>,
}

/// The fenced blocks of a page, and the lines outside them (numbered from 1).
fn split_page(rel: &str, text: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::new());
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match (open.take(), line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => {
                let at = format!("{rel}:{}", i + 2);
                open = Some(Block { at, info: info.trim().to_string(), lines: Vec::new() });
            }
            (Some(block), Some(_)) => blocks.push(block),
            (Some(mut block), None) => {
                block.lines.push(line.to_string());
                open = Some(block);
            }
            (None, None) => prose.push((i + 1, line.to_string())),
        }
    }
    assert!(open.is_none(), "{rel}: a fenced block is not closed");
    (blocks, prose)
}

/// The code spans (`...`) of a piece of prose.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The first cell of a table row, split at `|` that is not escaped (`\|`), unescaped.
fn first_cell(row: &str) -> Option<String> {
    let body = row.trim().strip_prefix('|')?;
    let mut cell = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => cell.push(chars.next().expect("peeked")),
            '|' => return Some(cell),
            c => cell.push(c),
        }
    }
    None
}

/// Every command line of a page, with where it is: each line of a shell block (comments
/// removed), each code span of the prose that starts with `softverbs `, and each code span in
/// the first column of a table headed `command` (a `softverbs` subcommand when it does not say
/// `softverbs` itself).
fn commands(rel: &str, text: &str) -> Vec<(String, String)> {
    let (blocks, prose) = split_page(rel, text);
    let mut out = Vec::new();
    for b in blocks.iter().filter(|b| matches!(b.info.as_str(), "sh" | "shell" | "console")) {
        for line in &b.lines {
            let cmd = line.split(" #").next().unwrap_or_default().trim();
            if !cmd.is_empty() && !cmd.starts_with('#') {
                out.push((b.at.clone(), cmd.to_string()));
            }
        }
    }
    // Units of prose: a table row, or a paragraph (a code span may go on to the next line).
    let mut units: Vec<(usize, String, bool)> = Vec::new();
    let mut last = 0;
    for (n, line) in &prose {
        let row = line.trim_start().starts_with('|');
        match units.last_mut() {
            Some((_, text, false)) if !row && !line.trim().is_empty() && *n == last + 1 => {
                text.push('\n');
                text.push_str(line);
            }
            _ if line.trim().is_empty() => {}
            _ => units.push((*n, line.clone(), row)),
        }
        last = *n;
    }
    let mut in_command_table = false;
    for (n, text, row) in &units {
        let at = format!("{rel}:{n}");
        if !row {
            in_command_table = false;
        } else if first_cell(text).is_some_and(|c| c.trim() == "command") {
            in_command_table = true;
            continue;
        }
        let cell = first_cell(text).filter(|_| in_command_table);
        for span in code_spans(cell.as_deref().unwrap_or(text)) {
            let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
            if span.starts_with("softverbs ") {
                out.push((at.clone(), span));
            } else if cell.is_some() && !span.starts_with("---") {
                out.push((at.clone(), format!("softverbs {span}")));
            }
        }
    }
    out
}

// ---------------- scenarios ----------------

#[test]
fn every_scenario_in_the_docs_loads_and_its_run_passes() {
    let mut ran = 0;
    for rel in SCENARIO_PAGES {
        let (blocks, _) = split_page(rel, &page(rel));
        for b in blocks.iter().filter(|b| b.info == "toml") {
            let text = b.lines.join("\n");
            let sc = Scenario::from_toml(&text)
                .unwrap_or_else(|e| panic!("{}: the scenario does not load: {e}", b.at));
            eprintln!("{}: scenario {:?}, seed {}", b.at, sc.name, sc.seed);
            let report = run(&sc, &RunOptions::default())
                .unwrap_or_else(|e| panic!("{}: the scenario does not run: {e}", b.at));
            let mut summary = Vec::new();
            report.write_summary(&mut summary).expect("writing to a Vec");
            let summary = String::from_utf8_lossy(&summary);
            eprintln!("{summary}");
            assert!(report.passed, "{}: {:?}\n{summary}", b.at, report.failure);
            assert!(!report.connections.is_empty(), "{}: no connection ran\n{summary}", b.at);
            ran += 1;
        }
    }
    assert!(ran >= 1, "docs/simulator.md shows a scenario");
}

// ---------------- command lines ----------------

/// What the test does with a command line of the docs.
enum Plan {
    /// Run these concrete forms of it; each must exit 0 and print a line containing its text.
    Run(&'static [Form]),
    /// A `pingpong` server and a client that connects to it (each with these extra arguments).
    Pingpong(&'static [&'static str]),
    /// Not run, for this reason.
    NotRun(&'static str),
}

/// One run: the arguments after `softverbs`, a text one stdout line must contain, and the
/// programs one of which it needs on `PATH` (none: it needs none; not run, and said so, when
/// none of them is there).
struct Form(&'static [&'static str], &'static str, &'static [&'static str]);

/// Every command line of [`COMMAND_PAGES`], as written, and what is done with it. The debug
/// binary stands for `cargo run --release`, and concrete forms keep the test quick: fewer
/// iterations, shorter sleeps, a free TCP port for `pingpong`. Every command runs on the
/// test's own fabric (`SOFTVERBS_FABRIC`).
const PLANS: &[(&str, Plan)] = &[
    ("cargo run --release -p softverbs -- demo", Plan::Run(DEMO)),
    ("cargo test --workspace", Plan::NotRun("it is the command that runs this test")),
    ("cargo install --path sim/cli", Plan::NotRun("it builds a release binary into ~/.cargo/bin; the tests run the one cargo built")),
    ("softverbs --help", Plan::Run(&[Form(&["--help"], "Usage: softverbs [OPTIONS] <COMMAND>", &[])])),
    ("softverbs demo [-d DEV] [--in-process]", Plan::Run(DEMO_FORMS)),
    ("softverbs demo [-d DEV] [-g GID_INDEX] [--in-process]", Plan::Run(DEMO_FORMS)),
    ("softverbs demo", Plan::Run(DEMO)),
    // Packet ladders and sweeps (docs/learn/ladders.md); sim/cli/tests/ladder.rs and
    // ladder_sweep.rs check what they draw.
    ("softverbs demo --ladder", Plan::Run(&[Form(&["demo", "--ladder"], "packet ladder of the initiator", &[])])),
    (
        "softverbs demo --ladder [--svg FILE]",
        Plan::Run(&[Form(&["demo", "--in-process", "--ladder"], "packet ladder of the initiator", &[])]),
    ),
    (
        "softverbs demo --in-process --ladder --svg demo.svg",
        Plan::NotRun("sim/cli/tests/ladder.rs runs it with the SVG on a private path and checks it against the wire lines"),
    ),
    (
        "softverbs sim sim/scenarios/ladder.toml --ladder",
        Plan::Run(&[Form(&["sim", "sim/scenarios/ladder.toml", "--ladder"], "packet ladder", &[])]),
    ),
    (
        "softverbs sim SCENARIO.toml --ladder [--svg FILE] [--time-scale]",
        Plan::Run(&[Form(&["sim", "sim/scenarios/ladder.toml", "-q", "--ladder"], "packet ladder", &[]), Form(&["sim", "sim/scenarios/ladder.toml", "-q", "--ladder", "--time-scale"], "packet ladder", &[])]),
    ),
    (
        "softverbs sim sim/scenarios/rnr-ladder.toml --ladder",
        Plan::Run(&[Form(&["sim", "sim/scenarios/rnr-ladder.toml", "-q", "--ladder"], "RNR timer fired", &[])]),
    ),
    (
        "softverbs sim sim/scenarios/ladder.toml --svg docs/learn/ladder-lossy.svg",
        Plan::NotRun("it rewrites the committed SVG; sim/cli/tests/ladder_sweep.rs checks the file is what it writes"),
    ),
    (
        "softverbs sim sweep",
        Plan::NotRun("the command's name in prose; its forms on the same page are run"),
    ),
    (
        "softverbs sim sweep sim/scenarios/go-back-n.toml --param loss=0,0.001,0.01,0.05 --explain",
        Plan::Run(&[Form(
            &["sim", "sweep", "sim/scenarios/go-back-n.toml", "--param", "loss=0,0.001,0.01,0.05", "--explain"],
            "The steepest fall is from loss 1 % to 5 %",
            &[],
        )]),
    ),
    (
        "softverbs sim sweep sim/scenarios/go-back-n.toml --param loss=0,0.001,0.01,0.05 --plot docs/learn/go-back-n-sweep.svg",
        Plan::NotRun("it rewrites the committed SVG; sim/cli/tests/ladder_sweep.rs checks the file is what it writes"),
    ),
    (
        "softverbs sim sweep sim/scenarios/go-back-n.toml --param latency_ns=1000,10000,100000",
        Plan::Run(&[Form(
            &["sim", "sweep", "sim/scenarios/go-back-n.toml", "--param", "latency_ns=1000,10000,100000"],
            "100000",
            &[],
        )]),
    ),
    (
        "softverbs sim sweep SCENARIO.toml --param NAME=V1,V2,... [--plot FILE.svg] [--explain]",
        Plan::Run(&[Form(
            &["sim", "sweep", "sim/scenarios/go-back-n.toml", "--param", "loss=0,0.05", "--explain"],
            "The steepest fall is from loss 0 % to 5 %",
            &[],
        )]),
    ),
    ("softverbs devices", Plan::Run(DEVICES)),
    ("softverbs devinfo [-d DEV] [-v]", Plan::Run(DEVINFO)),
    ("softverbs devinfo [-d DEV] [-i PORT] [-l] [-v]", Plan::Run(DEVINFO)),
    (
        "softverbs devinfo | head",
        Plan::NotRun("a pipe of the shell; sim/cli/tests/cli.rs closes stdout early on every command"),
    ),
    ("softverbs pingpong [-d DEV] [-g N] [-p PORT] [HOST]", Plan::Pingpong(&["-d", "softverbs1", "-g", "1"])),
    ("softverbs pingpong [OPTIONS]", Plan::Pingpong(&["-s", "8192", "-m", "2048", "-e", "-g", "1"])),
    ("softverbs pingpong [OPTIONS] HOST", Plan::Pingpong(&["-g", "1", "-n", "200"])),
    ("softverbs pingpong", Plan::Pingpong(&["-g", "1"])),
    ("softverbs pingpong -g 1", Plan::Pingpong(&["-g", "1"])),
    ("softverbs pingpong -g 1 localhost", Plan::Pingpong(&["-g", "1"])),
    ("softverbs perf lat|bw|idle|syscalls|spin [-d DEV]", Plan::Run(PERF)),
    ("softverbs perf lat|bw|idle|syscalls|spin [-d DEV] [-g N]", Plan::Run(PERF)),
    ("softverbs perf floor", Plan::Run(PERF_FLOOR)),
    ("softverbs perf lat", Plan::Run(std::slice::from_ref(&PERF[0]))),
    ("softverbs perf bw", Plan::Run(std::slice::from_ref(&PERF[1]))),
    (
        "softverbs perf send_lat|send_bw|write_lat|write_bw|read_lat|read_bw|atomic_lat|atomic_bw [OPTIONS]",
        Plan::Run(PERFTEST_OPTIONS),
    ),
    ("softverbs perf send_lat", Plan::Run(std::slice::from_ref(&PERFTEST[0]))),
    ("softverbs perf send_bw", Plan::Run(std::slice::from_ref(&PERFTEST[1]))),
    ("softverbs perf write_lat", Plan::Run(std::slice::from_ref(&PERFTEST[2]))),
    ("softverbs perf write_bw", Plan::Run(std::slice::from_ref(&PERFTEST[3]))),
    ("softverbs perf read_lat", Plan::Run(std::slice::from_ref(&PERFTEST[4]))),
    ("softverbs perf read_bw", Plan::Run(std::slice::from_ref(&PERFTEST[5]))),
    ("softverbs perf atomic_lat", Plan::Run(std::slice::from_ref(&PERFTEST[6]))),
    ("softverbs perf atomic_bw", Plan::Run(std::slice::from_ref(&PERFTEST[7]))),
    ("softverbs perf", Plan::Run(PERF)),
    ("softverbs fabric", Plan::Run(FABRIC)),
    ("softverbs fabric [clean]", Plan::Run(FABRIC)),
    ("softverbs fabric [list]", Plan::Run(FABRIC)),
    ("softverbs fabric clean", Plan::Run(FABRIC)),
    ("softverbs sim SCENARIO.toml", Plan::Run(SIM)),
    (
        "SOFTVERBS_FAULTS='seed=7 loss=5%' softverbs pingpong -g 1",
        Plan::NotRun("a Form sets no environment; sim/cli/tests/faults_real.rs runs a pingpong pair under this plan"),
    ),
    (
        "SOFTVERBS_FAULTS='tx:dup=1% rx:corrupt=0.1% reorder=50us drop=ack#3' softverbs demo",
        Plan::NotRun("a Form sets no environment; sim/cli/tests/faults_real.rs runs the demo under this plan"),
    ),
    (
        "SOFTVERBS_FAULTS='softverbs0:fail@2s' softverbs pingpong -g 1 localhost",
        Plan::NotRun("sim/cli/tests/faults_real.rs fails a port with fail@ and checks PORT_ERR and RETRY_EXC_ERR"),
    ),
    (
        "SOFTVERBS_FAULTS=@plan.toml softverbs pingpong -g 1",
        Plan::NotRun("the plan file is the reader's; nic-model's soft::faults tests parse a TOML plan"),
    ),
    (
        "softverbs counters [-d DEV] [--watch]",
        Plan::Run(&[Form(&["counters", "--watch", "0.05", "--count", "2"], "live port", &[])]),
    ),
    (
        "softverbs perf memory [-q N]",
        Plan::Run(&[Form(&["perf", "memory", "-q", "10"], "device growth beyond it", &[])]),
    ),
    (
        "softverbs run -- ib_write_bw",
        Plan::NotRun("needs perftest and the library: cabi/ibverbs/tests/perftest.rs runs ib_write_bw so"),
    ),
    ("softverbs counters", Plan::Run(&[Form(&["counters"], "live port", &[])])),
    ("softverbs counters --json", Plan::Run(&[Form(&["counters", "--json"], "\"ports\":[", &[])])),
    (
        "softverbs counters -d softverbs0 --watch 1",
        Plan::NotRun("-d needs a live port; sim/cli/tests/counters_real.rs runs -d and --watch against a real peer"),
    ),
    (
        "softverbs counters [-d DEV] [--watch [SECS]] [--count N] [--json]",
        Plan::Run(&[Form(&["counters", "--watch", "0.05", "--count", "2"], "live port", &[])]),
    ),
    (
        "softverbs demo --in-process --pcap /tmp/demo.pcap",
        Plan::NotRun("sim/cli/tests/pcap_real.rs runs it on a private path and checks the file with tshark"),
    ),
    (
        "SOFTVERBS_PCAP=/tmp/pp-{pid}.pcap softverbs pingpong -g 1",
        Plan::NotRun("sim/cli/tests/pcap_real.rs runs a pingpong pair so and checks the files with tshark"),
    ),
    (
        "tshark -r /tmp/demo.pcap -d udp.port==4791,infiniband -T fields -e infiniband.bth.opcode -e infiniband.bth.psn -e infiniband.invariant.crc",
        Plan::NotRun("sim/cli/tests/pcap_real.rs runs tshark with these fields on the files it makes"),
    ),
    ("softverbs sim", Plan::Run(SIM)),
    (
        "softverbs run -- PROGRAM ARGS...",
        Plan::NotRun(
            "needs the softverbs-ibverbs library and a C program: \
             cabi/ibverbs/tests/example.rs runs `softverbs run` on examples/c/rdma_basics.c",
        ),
    ),
    (
        "softverbs run",
        Plan::NotRun(
            "needs the softverbs-ibverbs library and a C program: \
             cabi/ibverbs/tests/example.rs runs `softverbs run` on examples/c/rdma_basics.c",
        ),
    ),
    (
        "softverbs labs [list | show N | check N PROGRAM]",
        Plan::NotRun("its forms are run below (list, show) and by sim/cli/tests/labs.rs (check)"),
    ),
    ("softverbs labs", Plan::Run(&[Form(&["labs"], "labs/1-open-and-register", &[])])),
    (
        "softverbs labs check N ./a.out",
        Plan::NotRun("needs the softverbs-ibverbs library and cc: sim/cli/tests/labs.rs checks every lab"),
    ),
    (
        "softverbs labs check N PROGRAM",
        Plan::NotRun("needs the softverbs-ibverbs library and cc: sim/cli/tests/labs.rs checks every lab"),
    ),
    ("softverbs labs list", Plan::Run(&[Form(&["labs", "list"], "labs/8-fix-it", &[])])),
    ("softverbs labs show 4", Plan::Run(&[Form(&["labs", "show", "4"], "# Lab 4: RDMA WRITE with immediate", &[])])),
    (
        "softverbs labs check 4 ./lab4",
        Plan::NotRun("needs the softverbs-ibverbs library and cc: sim/cli/tests/labs.rs checks every lab's solution, skeleton and typical mistakes"),
    ),
    (
        "softverbs book --out target/book",
        Plan::NotRun("it writes into target/; sim/cli/tests/book.rs builds the book from docs/ into a private directory and checks it, and .ci/run builds it"),
    ),
    (
        "cc -o lab4 labs/4-write-imm/lab.c -libverbs",
        Plan::NotRun("not softverbs: sim/cli/tests/labs.rs compiles every lab with cc"),
    ),
    (
        "cargo build -p softverbs-ibverbs -p softverbs",
        Plan::NotRun("the tests run on what cargo test built"),
    ),
    ("softverbs -v devinfo", Plan::Run(&[Form(&["-v", "devinfo"], "PORT_ACTIVE", &[])])),
    ("softverbs demo --in-process -vv", Plan::Run(&[Form(&["demo", "--in-process", "-vv"], "RDMA WRITE", &[])])),
    (
        "softverbs sim sim/scenarios/lossy-link.toml -q -vv",
        Plan::Run(&[Form(&["sim", "sim/scenarios/lossy-link.toml", "-q", "-vv"], "PASSED", &[])]),
    ),
    (
        "RUST_LOG=nic_model::engine::comp=debug softverbs sim sim/scenarios/partition-heals.toml -q",
        Plan::NotRun(
            "a Form sets no environment; sim/cli/tests/cli.rs runs RUST_LOG overriding -v, and \
             sim/tests/sim_logs.rs checks the events of partition-heals.toml this shows",
        ),
    ),
    ("softverbs pingpong -g 1 -v", Plan::Pingpong(&["-g", "1", "-v"])),
    // The failure drills (docs/learn/drills.md): sim/cli/tests/drills.rs checks each one's lines.
    ("softverbs demo --break KIND [--lang zh-TW] [--ladder] [--svg FILE]", Plan::Run(&[Form(&["demo", "--break", "rkey"], "NAK: remote access error (syndrome 0x62)", &[]), Form(&["demo", "--break", "rkey", "--ladder"], "NAK remote access error ─", &[])])),
    ("softverbs demo --break rkey", Plan::Run(&[Form(&["demo", "--break", "rkey"], "NAK: remote access error (syndrome 0x62)", &[])])),
    ("softverbs demo --break bounds", Plan::Run(&[Form(&["demo", "--break", "bounds"], "status=IBV_WC_REM_ACCESS_ERR (10,", &[])])),
    ("softverbs demo --break small-recv", Plan::Run(&[Form(&["demo", "--break", "small-recv"], "NAK: invalid request (syndrome 0x61)", &[])])),
    ("softverbs demo --break no-recv", Plan::Run(&[Form(&["demo", "--break", "no-recv"], "status=IBV_WC_RNR_RETRY_EXC_ERR (13,", &[])])),
    ("softverbs demo --break rnr", Plan::Run(&[Form(&["demo", "--break", "rnr"], "RNR retry 1 (rnr_retry 7)", &[])])),
    ("softverbs demo --break peer-dies", Plan::Run(&[Form(&["demo", "--break", "peer-dies"], "status=IBV_WC_RETRY_EXC_ERR (12,", &[])])),
    ("softverbs demo --break no-gid", Plan::Run(&[Form(&["demo", "--break", "no-gid"], "failed: EINVAL (errno 22)", &[])])),
    ("softverbs demo --break cq-overrun", Plan::Run(&[Form(&["demo", "--break", "cq-overrun"], "target async event: IBV_EVENT_CQ_ERR", &[])])),
    ("softverbs demo --lang zh-TW --break no-recv", Plan::Run(&[Form(&["demo", "--lang", "zh-TW", "--break", "no-recv"], "為什麼，以及在真實程式中如何修正：", &[])])),
    // The lessons (docs/learn/), in smaller sizes: sim/cli/tests/learn.rs checks their numbers.
    ("softverbs learn [CONCEPT]", Plan::Run(LEARN)),
    ("softverbs learn", Plan::Run(LEARN)),
    ("softverbs learn zero-copy", Plan::Run(ZERO_COPY)),
    ("softverbs learn zero-copy --size 1M -n 64", Plan::Run(ZERO_COPY)),
    ("softverbs learn bypass", Plan::Run(BYPASS)),
    ("softverbs learn bypass -n 100000", Plan::Run(BYPASS)),
    ("softverbs learn one-sided", Plan::Run(ONE_SIDED)),
    ("softverbs learn one-sided --size 64M", Plan::Run(ONE_SIDED)),
    ("softverbs learn messages", Plan::Run(&[Form(&["learn", "messages"], "rdma_lens=[10,200,3000]", &[])])),
    ("softverbs learn messages --lang zh-TW", Plan::Run(&[Form(&["learn", "messages", "--lang", "zh-TW"], "重點：", &[])])),
    (
        "softverbs learn qp-states",
        Plan::Run(&[Form(&["learn", "qp-states"], "missing_errno=EINVAL flushed=3 of=3", &[])]),
    ),
    (
        "softverbs learn mr",
        Plan::Run(&[Form(&["learn", "mr"], "read_only=IBV_WC_REM_ACCESS_ERR untouched=true", &[])]),
    ),
    ("softverbs learn sge", Plan::Run(&[Form(&["learn", "sge"], "verified=31 of=31", &[])])),
    ("softverbs learn vs-tcp", Plan::Run(VS_TCP)),
    ("softverbs learn vs-tcp --size 64K -n 2000", Plan::Run(VS_TCP)),
    ("softverbs devinfo -v", Plan::Run(DEVINFO)),
    (
        "softverbs perf lat -vv",
        Plan::Run(&[Form(
            &["perf", "lat", "-n", "200", "-w", "10", "-r", "1", "-vv"],
            "RESULT lat size=8 iters=200",
            &[],
        )]),
    ),    ("softverbs devinfo -v --netdev wlan0", Plan::NotRun(ACROSS)),
    ("softverbs run --netdev wlan0 -- ibv_rc_pingpong -g 1", Plan::NotRun(ACROSS)),
    ("softverbs run --netdev wlan0 -- ibv_rc_pingpong -g 1 192.168.1.10", Plan::NotRun(ACROSS)),
    ("softverbs run --netdev wlan0 -- ib_write_bw -x 1", Plan::NotRun(ACROSS)),
    ("softverbs run --netdev wlan0 -- ib_write_bw -x 1 192.168.1.10", Plan::NotRun(ACROSS)),
    ("softverbs pingpong --netdev wlan0 -g 1", Plan::NotRun(ACROSS)),
    ("softverbs pingpong --netdev wlan0 -g 1 192.168.1.10", Plan::NotRun(ACROSS)),
    ("softverbs run --netdev eth0 -- ibv_rc_pingpong -g 0", Plan::NotRun(ACROSS_V6)),
    ("softverbs run --netdev eth0 -- ibv_rc_pingpong -g 0 192.168.1.10", Plan::NotRun(ACROSS_V6)),
    ("softverbs run --netdev eth0 -- ibv_ud_pingpong -g 2", Plan::NotRun(ACROSS_V6)),
    ("softverbs run --netdev eth0 -- ibv_ud_pingpong -g 2 192.168.1.10", Plan::NotRun(ACROSS_V6)),
    ("softverbs run --netdev wlan0 -- rping -s -a 192.168.1.10 -C 100 -v", Plan::NotRun(ACROSS_CM)),
    ("softverbs run --netdev wlan0 -- rping -c -a 192.168.1.10 -C 100 -v", Plan::NotRun(ACROSS_CM)),
    ("softverbs run --netdev wlan0 -- ib_write_bw -R", Plan::NotRun(ACROSS_CM)),
    ("softverbs run --netdev wlan0 -- ib_write_bw -R 192.168.1.10", Plan::NotRun(ACROSS_CM)),
    ("softverbs run --netdev eth0 -- rping -s -a :: -C 10 -v", Plan::NotRun(ACROSS_CM6)),
    ("softverbs run --netdev eth0 -- rping -c -a fd00::10 -C 10 -v", Plan::NotRun(ACROSS_CM6)),
    ("softverbs run --netdev eth0 -- ucmatose -b ::", Plan::NotRun(ACROSS_CM6)),
    (
        "softverbs run --netdev eth0 -- ucmatose -s fe80::5054:ff:fe12:3456%eth0",
        Plan::NotRun(ACROSS_CM6),
    ),
    ("softverbs demo --netdev wlan0 --server", Plan::NotRun(ACROSS_APPS)),
    ("softverbs demo --netdev wlan0 --connect 192.168.1.10", Plan::NotRun(ACROSS_APPS)),
    ("cargo run -p softverbs --example rc_exchange -- --netdev wlan0", Plan::NotRun(ACROSS_APPS)),
    (
        "cargo run -p softverbs --example rc_exchange -- --netdev wlan0 192.168.1.10",
        Plan::NotRun(ACROSS_APPS),
    ),
];

/// Why the "Across machines" walk-through's commands are not run here.
const ACROSS: &str =
    "they need two hosts with a wlan0: sim/cli/tests/netns.rs runs them between network namespaces";

const ACROSS_V6: &str =
    "they need two hosts with IPv6 addresses: sim/cli/tests/netns_v6.rs runs them between network namespaces";

const ACROSS_CM: &str =
    "they need two hosts with a wlan0: sim/cli/tests/netns_cm.rs runs them between network namespaces";

const ACROSS_CM6: &str =
    "they need two hosts with IPv6 addresses: sim/cli/tests/netns_cm6.rs runs them between network namespaces";

const ACROSS_APPS: &str =
    "they need two hosts with a wlan0: sim/cli/tests/netns_apps.rs runs them between network namespaces";

const LEARN: &[Form] = &[Form(&["learn"], "zero-copy", &[])];
const ZERO_COPY: &[Form] =
    &[Form(&["learn", "zero-copy", "--size", "4K", "-n", "16"], "RESULT learn=zero-copy", &[])];
const BYPASS: &[Form] = &[Form(&["learn", "bypass", "-n", "200"], "RESULT learn=bypass", &[])];
const ONE_SIDED: &[Form] =
    &[Form(&["learn", "one-sided", "--size", "4M"], "RESULT learn=one-sided", &[])];
const VS_TCP: &[Form] =
    &[Form(&["learn", "vs-tcp", "--size", "4K", "-n", "20"], "RESULT learn=vs-tcp", &[])];
const DEMO: &[Form] = &[Form(&["demo"], "RDMA WRITE", &[])];
const DEMO_FORMS: &[Form] = &[
    Form(&["demo", "-d", "softverbs1"], "RDMA WRITE", &[]),
    Form(&["demo", "--in-process"], "RDMA WRITE", &[]),
    Form(&["demo", "-g", "1"], "RDMA WRITE", &[]),
];
const DEVICES: &[Form] = &[Form(&["devices"], "softverbs1", &[])];
const DEVINFO: &[Form] = &[
    Form(&["devinfo"], "PORT_ACTIVE", &[]),
    Form(&["devinfo", "-d", "softverbs1", "-i", "1", "-v"], "RoCE v2", &[]),
    Form(&["devinfo", "-l"], "softverbs0", &[]),
];
const PERF: &[Form] = &[
    Form(&["perf", "lat", "-n", "200", "-w", "10", "-r", "1"], "RESULT lat size=8 iters=200", &[]),
    Form(&["perf", "bw", "-d", "softverbs1", "-n", "8", "-r", "1"], "RESULT bw", &[]),
    Form(&["perf", "idle", "--seconds", "0.2"], "idle for 0.2 s", &[]),
    Form(
        &["perf", "syscalls", "-n", "200", "--base", "100"],
        "RESULT syscalls",
        &["perf", "strace"],
    ),
    Form(
        &["perf", "spin", "--values", "0", "-n", "100", "-r", "1", "--seconds", "0.2"],
        "RESULT spin spin_us=0",
        &[],
    ),
];
/// perftest's eight tests, quick (`-n 20`), each printing its banner's title.
const PERFTEST: [Form; 8] = [
    Form(&["perf", "send_lat", "-n", "20"], "Send Latency Test", &[]),
    Form(&["perf", "send_bw", "-n", "20"], "Send BW Test", &[]),
    Form(&["perf", "write_lat", "-n", "20"], "RDMA_Write Latency Test", &[]),
    Form(&["perf", "write_bw", "-n", "20"], "RDMA_Write BW Test", &[]),
    Form(&["perf", "read_lat", "-n", "20"], "RDMA_Read Latency Test", &[]),
    Form(&["perf", "read_bw", "-n", "20"], "RDMA_Read BW Test", &[]),
    Form(&["perf", "atomic_lat", "-n", "20"], "Atomic FETCH_AND_ADD Latency Test", &[]),
    Form(&["perf", "atomic_bw", "-n", "20"], "Atomic FETCH_AND_ADD BW Test", &[]),
];
/// The same tests with options: a hyphenated name, QPs, UC, Gb/sec, JSON, UD, events, `-A`.
const PERFTEST_OPTIONS: &[Form] = &[
    Form(
        &["perf", "write-bw", "-q", "2", "-c", "UC", "--report_gbits", "-n", "20"],
        "BW peak[Gb/sec]",
        &[],
    ),
    Form(&["perf", "send_lat", "-c", "UD", "-n", "20", "--json"], "\"t_typical_usec\":", &[]),
    Form(&["perf", "atomic_lat", "-A", "CMP_AND_SWAP", "-e", "-n", "20"], "CMP_AND_SWAP", &[]),
];
const PERF_FLOOR: &[Form] =
    &[Form(&["perf", "floor", "-n", "1000", "-w", "100", "-r", "1"], "RESULT floor", &[])];
const FABRIC: &[Form] = &[
    Form(&["fabric"], "no segments", &[]),
    Form(&["fabric", "list"], "no segments", &[]),
    Form(&["fabric", "clean"], "nothing to clean", &[]),
];
const SIM: &[Form] = &[
    Form(&["sim", "sim/scenarios/lossy-link.toml", "-q"], "PASSED", &[]),
    Form(&["sim", "sim/scenarios/rnr-storm.toml", "-q"], "PASSED", &[]),
    Form(&["sim", "sim/scenarios/incast.toml", "-q"], "PASSED", &[]),
    Form(&["sim", "sim/scenarios/partition-heals.toml", "-q"], "PASSED", &[]),
    Form(&["sim", "sim/scenarios/fat-tree-16.toml", "-q"], "PASSED", &[]),
    Form(&["sim", "sim/scenarios/fat-tree-64.toml", "-q"], "PASSED", &[]),
];

fn plan(cmd: &str) -> Option<&'static Plan> {
    PLANS.iter().find(|(c, _)| *c == cmd).map(|(_, p)| p)
}

/// Every command line of the pages, each once, with the first place it appears.
fn documented_commands() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = Vec::new();
    for rel in COMMAND_PAGES {
        for (at, cmd) in commands(rel, &page(rel)) {
            if !all.iter().any(|(_, c)| *c == cmd) {
                all.push((at, cmd));
            }
        }
    }
    all
}

#[test]
fn every_command_in_the_readme_and_guide_is_planned() {
    let all = documented_commands();
    let unplanned: Vec<String> =
        all.iter().filter(|(_, c)| plan(c).is_none()).map(|(at, c)| format!("{at}: {c}")).collect();
    assert!(
        unplanned.is_empty(),
        "commands the docs show that sim/cli/tests/docs.rs neither runs nor lists as not run \
         (add each to PLANS):\n{}",
        unplanned.join("\n")
    );
    let stale: Vec<&str> =
        PLANS.iter().map(|(c, _)| *c).filter(|c| !all.iter().any(|(_, d)| d == c)).collect();
    assert!(stale.is_empty(), "PLANS names commands the docs no longer show: {stale:?}");
    let ungrouped: Vec<&str> = all
        .iter()
        .map(|(_, c)| c.as_str())
        .filter(|c| !GROUPS.iter().flat_map(|g| g.iter()).any(|g| c.starts_with(g)))
        .collect();
    assert!(ungrouped.is_empty(), "no test of GROUPS runs these: {ungrouped:?}");
    for must in ["softverbs demo", "softverbs devices", "softverbs pingpong -g 1 localhost"] {
        assert!(all.iter().any(|(_, c)| c == must), "{must:?} is not found in the pages");
    }
}

/// A fabric directory of the test's own, removed at the end; every command gets it as
/// `SOFTVERBS_FABRIC`.
fn fabric() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("softverbs-docs-test-")
        .tempdir()
        .expect("a temporary directory");
    // A fabric directory must be private to its user (softverbs refuses any other mode).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("making the fabric directory private");
    dir
}

fn spawn(args: &[&str], fabric: &Path) -> Peer {
    let mut command = Command::new(BIN);
    command.args(args).env("SOFTVERBS_FABRIC", fabric).current_dir(root());
    let mut peer = Peer::spawn("softverbs", command, Stderr::Capture).expect("starting softverbs");
    peer.close_stdin();
    peer
}

/// Wait for a line containing `needle`, keeping every line read in `seen`.
fn wait_for(peer: &mut Peer, needle: &str, seen: &mut Vec<String>) -> Result<String, String> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let line = peer.recv_line(deadline.saturating_duration_since(Instant::now()))?;
        seen.push(line.clone());
        if line.contains(needle) {
            return Ok(line);
        }
    }
}

/// Run to the end: the exit status, stdout and stderr.
fn finish(mut peer: Peer, mut seen: Vec<String>) -> (ExitStatus, String, String) {
    let status = peer.wait_exit(DEADLINE).unwrap_or_else(|e| {
        panic!("softverbs did not exit within {DEADLINE:?}: {e}; stdout {seen:?}")
    });
    seen.extend(peer.remaining_lines(DEADLINE));
    (status, seen.join("\n"), peer.stderr())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn run_form(cmd: &str, Form(args, expect, needs): &Form, fabric: &Path) {
    if !needs.is_empty() && !needs.iter().any(|p| on_path(p)) {
        eprintln!("{cmd}: softverbs {args:?} not run: none of {needs:?} is on PATH");
        return;
    }
    let started = Instant::now();
    let (status, stdout, stderr) = finish(spawn(args, fabric), Vec::new());
    eprintln!("{cmd}: softverbs {args:?}: {status} in {:?}", started.elapsed());
    assert!(status.success(), "{cmd}: softverbs {args:?}: {status}\n{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.contains(expect)),
        "{cmd}: softverbs {args:?} printed no line with {expect:?}:\n{stdout}\n{stderr}"
    );
}

fn run_pingpong(cmd: &str, extra: &[&str], fabric: &Path) {
    let mut seen = Vec::new();
    let mut server = spawn(&[&["pingpong", "-p", "0"], extra].concat(), fabric);
    let line = wait_for(&mut server, "listening on TCP port", &mut seen)
        .unwrap_or_else(|e| panic!("{cmd}: the server did not listen: {e}; {}", server.stderr()));
    let port = line.rsplit(' ').next().expect("a port").to_string();
    let client = spawn(&[&["pingpong", "-p", &port], extra, &["localhost"]].concat(), fabric);
    for (who, peer, seen) in [("client", client, Vec::new()), ("server", server, seen)] {
        let (status, stdout, stderr) = finish(peer, seen);
        assert!(status.success(), "{cmd}: the {who}: {status}\n{stdout}\n{stderr}");
        assert!(stdout.contains(" usec/iter"), "{cmd}: the {who} printed no rate:\n{stdout}");
    }
}

/// The commands of one kind (those whose text starts with `prefix`), each run as planned; a
/// form two lines of the docs share runs once.
fn run_commands(prefix: &str) {
    let fabric = fabric();
    let all = documented_commands();
    let (mut ran, mut done): (usize, Vec<Vec<&str>>) = (0, Vec::new());
    for (at, cmd) in all.iter().filter(|(_, c)| c.starts_with(prefix)) {
        match plan(cmd) {
            Some(Plan::Run(forms)) => {
                for form in forms.iter() {
                    if !done.contains(&form.0.to_vec()) {
                        run_form(cmd, form, fabric.path());
                        done.push(form.0.to_vec());
                    }
                }
            }
            Some(Plan::Pingpong(extra)) => {
                let key = [&["pingpong"], *extra].concat();
                if !done.contains(&key) {
                    run_pingpong(cmd, extra, fabric.path());
                    done.push(key);
                }
            }
            Some(Plan::NotRun(why)) => eprintln!("{at}: {cmd}: not run: {why}"),
            None => panic!("{at}: {cmd} is not planned"),
        }
        ran += 1;
    }
    assert!(ran > 0, "no documented command starts with {prefix:?}");
}

/// The commands each test below runs, by how their text starts (tests run in parallel).
const GROUPS: [&[&str]; 5] = [
    &[
        "cargo ",
        "softverbs d",
        "softverbs --help",
        "softverbs -v",
        "RUST_LOG=",
        "SOFTVERBS_PCAP=",
        "SOFTVERBS_FAULTS=",
        "tshark ",
    ],
    &["softverbs pingpong"],
    &["softverbs perf"],
    &[
        "softverbs fabric",
        "softverbs sim",
        "softverbs counters",
        "softverbs run",
        "softverbs labs",
        "cc ",
        "softverbs book",
    ],
    &["softverbs learn"],
];

#[test]
fn the_documented_demo_and_device_commands_run() {
    GROUPS[0].iter().for_each(|p| run_commands(p));
}

#[test]
fn the_documented_pingpong_commands_run() {
    GROUPS[1].iter().for_each(|p| run_commands(p));
}

#[test]
fn the_documented_perf_commands_run() {
    GROUPS[2].iter().for_each(|p| run_commands(p));
}

#[test]
fn the_documented_fabric_and_sim_commands_run() {
    GROUPS[3].iter().for_each(|p| run_commands(p));
}

#[test]
fn the_documented_learn_commands_run() {
    GROUPS[4].iter().for_each(|p| run_commands(p));
}
