//! `softverbs learn`: each lesson run as a user runs it (two real processes on a private
//! fabric, and TCP over loopback), in a small configuration, with its `RESULT` line's numbers
//! checked to come from measurement: lengths and bytes that must be exact, system calls whose
//! counts must agree with the kernel's own books, relations that hold on a loaded machine.
//! Every run has a deadline; the processes are killed on failure and leave no segment behind.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use softverbs_sim::peer::{FabricDir, Peer, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The longest any one lesson may take here (debug build, shared cores).
const DEADLINE: Duration = Duration::from_secs(120);

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The `key=value` pairs of the `RESULT learn=...` line.
    fn result(&self) -> BTreeMap<String, String> {
        let line =
            self.stdout.lines().find(|l| l.starts_with("RESULT learn=")).unwrap_or_else(|| {
                panic!("no RESULT line in:\n{}\nstderr:\n{}", self.stdout, self.stderr)
            });
        // Values are single words, but an error text is quoted and has spaces: keep it whole.
        let mut map = BTreeMap::new();
        let mut rest = line.strip_prefix("RESULT ").expect("prefix");
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=').expect("key=value");
            let (value, next) = if let Some(q) = after.strip_prefix('"') {
                let end = q.find('"').expect("closing quote");
                (&q[..end], q[end + 1..].trim_start())
            } else {
                after.split_once(' ').unwrap_or((after, ""))
            };
            map.insert(key.trim().to_string(), value.to_string());
            rest = next;
        }
        map
    }

    fn num(&self, key: &str) -> u64 {
        let r = self.result();
        r.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number {key} in {r:?}"))
    }
}

/// Runs `softverbs learn ARGS` on a fabric of its own, to its end (bounded), and checks that
/// no segment is left in the fabric.
/// One run at a time: each lesson runs two busy-polling processes, and measures them.
fn turn() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn learn(args: &[&str]) -> Ran {
    let _turn = turn();
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let fabric = FabricDir::create(&format!("softverbs-learn-test-{}-{n}", std::process::id()))
        .expect("a fabric directory");
    let mut cmd = Command::new(BIN);
    cmd.arg("learn").args(args).arg("--fabric").arg(fabric.path());
    cmd.env_remove("SOFTVERBS_FABRIC");
    let mut p = Peer::spawn("softverbs learn", cmd, Stderr::Capture).expect("spawn softverbs");
    p.close_stdin();
    let stdout = p.remaining_lines(DEADLINE).join("\n");
    let status = p.wait_exit(DEADLINE).unwrap_or_else(|e| panic!("{e}\nstdout:\n{stdout}"));
    let ran = Ran { code: status.code(), stdout, stderr: p.stderr() };
    if ran.code == Some(0) {
        fabric.wait_empty(Duration::from_secs(10)).expect("both processes removed their segments");
    }
    ran
}

fn ok(args: &[&str]) -> Ran {
    let r = learn(args);
    assert_eq!(r.code, Some(0), "softverbs learn {args:?}:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

#[test]
fn learn_alone_lists_every_lesson_with_a_line() {
    let r = ok(&[]);
    for name in ["zero-copy", "bypass", "one-sided", "messages", "sge", "vs-tcp", "qp-states", "mr"]
    {
        assert!(
            r.stdout.lines().any(|l| l.trim_start().starts_with(name) && l.len() > name.len() + 10),
            "{name} listed with a line:\n{}",
            r.stdout
        );
    }
}

#[test]
fn learn_help_names_every_lesson() {
    let out = Command::new(BIN).args(["learn", "--help"]).output().expect("softverbs learn --help");
    let help = String::from_utf8_lossy(&out.stdout);
    for (name, _) in softverbs::cmd::learn::LESSONS {
        assert!(help.contains(name), "learn --help names {name}:\n{help}");
    }
}

#[test]
fn qp_states_walks_the_masks_refuses_a_missing_attribute_flushes_and_revives() {
    let r = ok(&["qp-states"]);
    let res = r.result();
    // ibv_rc_pingpong's three masks: INIT 0x39, RTR 0x129181, RTS 0x12e01.
    assert_eq!(res["masks"], "[57,1216897,77313]", "{}", r.stdout);
    assert_eq!(res["missing_errno"], "EINVAL");
    assert!(
        r.stdout.contains("requires IBV_QP_DEST_QPN")
            && r.stdout.contains("the QP stays IBV_QPS_INIT"),
        "the refused RTR names the missing attribute and the QP does not move:\n{}",
        r.stdout
    );
    assert_eq!((res["flushed"].as_str(), res["of"].as_str()), ("3", "3"));
    let flushes: Vec<&str> =
        r.stdout.lines().filter(|l| l.contains("status 5 (IBV_WC_WR_FLUSH_ERR")).collect();
    assert_eq!(flushes.len(), 3, "{}", r.stdout);
    for (line, id) in flushes.iter().zip([100, 101, 102]) {
        assert!(line.contains(&format!("wr_id {id},")), "flushed in order: {line}");
    }
    assert_eq!(res["revived_send"], "IBV_WC_SUCCESS");
    assert_eq!(res["revived_recv_len"], "11");
    assert!(r.stdout.contains("\"back in RTS\""), "{}", r.stdout);
    let states: Vec<&str> =
        r.stdout.lines().filter_map(|l| l.split("ibv_query_qp says ").nth(1)).collect();
    let states: Vec<String> = states.iter().map(|s| s.replace("IBV_QPS_", "")).collect();
    assert_eq!(states, ["INIT", "RTR", "RTS", "ERR", "RESET", "INIT", "RTR", "RTS"]);
    // One GID form everywhere: ibv_devinfo's (inet_ntop for a RoCE v2 GID).
    assert!(r.stdout.contains("(GID ::ffff:10.0.0."), "{}", r.stdout);
}

#[test]
fn mr_the_nic_refuses_a_write_without_remote_write_and_a_deregistered_rkey() {
    let r = ok(&["mr"]);
    let res = r.result();
    assert_eq!(res["writable"], "IBV_WC_SUCCESS", "{}", r.stdout);
    assert_eq!(res["landed"], "written by RDMA");
    assert_eq!(res["read_only"], "IBV_WC_REM_ACCESS_ERR");
    assert_eq!(res["untouched"], "true", "the refused WRITE wrote nothing");
    assert_eq!((res["initiator_qp"].as_str(), res["target_qp"].as_str()), ("ERR", "ERR"));
    assert_eq!(res["target_event"], "IBV_EVENT_QP_ACCESS_ERR");
    assert_eq!(res["event_on_target_qp"], "true");
    assert_eq!(res["dereg"], "IBV_WC_REM_ACCESS_ERR");
    // Each refusal is a NAK on the wire with the remote access error syndrome.
    let naks = r.stdout.lines().filter(|l| l.contains("AETH NAK (remote access error)")).count();
    assert_eq!(naks, 2, "{}", r.stdout);
    let acks = r.stdout.lines().filter(|l| l.contains("AETH ACK")).count();
    assert_eq!(acks, 1, "only the first WRITE is acknowledged:\n{}", r.stdout);
}

/// Names of Rust's `Debug` output that once reached output meant for C programmers, where
/// libibverbs' names (`EINVAL`, `IBV_QPS_RESET`, `IBV_EVENT_QP_ACCESS_ERR`, `IBV_QPT_RC`) or
/// the IBA's words belong.
const DEBUG_NAMES: &[&str] = &[
    "(Inval)",
    "QpAccessErr",
    "PsnSequenceError",
    "RemoteAccessError",
    "InvalidRequest",
    "created in Reset",
    "says Init",
    "stays Init",
    "qp_state = Init",
    "a Rc QP",
];

#[test]
fn no_rust_debug_names_and_no_undefined_fields_of_an_error_completion() {
    for args in [&["qp-states"][..], &["mr"], &["sge"]] {
        let r = ok(args);
        for name in DEBUG_NAMES {
            assert!(!r.stdout.contains(name), "learn {args:?} prints {name:?}:\n{}", r.stdout);
        }
        // man ibv_poll_cq: opcode and byte_len are undefined unless the status is success.
        for l in r
            .stdout
            .lines()
            .filter(|l| l.contains("status=IBV_WC_") && !l.contains("IBV_WC_SUCCESS"))
        {
            assert!(!l.contains("opcode=") && !l.contains("byte_len="), "{l}");
            assert!(l.contains("undefined unless IBV_WC_SUCCESS"), "{l}");
        }
    }
}

#[test]
fn an_unknown_lesson_or_a_bad_size_is_a_usage_error() {
    let r = learn(&["copy-zero"]);
    assert_eq!(r.code, Some(2), "{r:?}", r = r.stderr);
    assert!(
        r.stderr.contains("no lesson \"copy-zero\"") && r.stderr.contains("zero-copy"),
        "{}",
        r.stderr
    );
    let r = learn(&["messages", "--size", "4K"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("fixed sizes"), "{}", r.stderr);
    let r = learn(&["sge", "-n", "5"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("-n: the sge lesson has a fixed count"), "{}", r.stderr);
    let r = learn(&["bypass", "--size", "1Q"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("\"1Q\" is not a size"), "{}", r.stderr);
}

#[test]
fn messages_keep_their_lengths_and_tcp_bytes_total_3210() {
    let r = ok(&["messages"]);
    let res = r.result();
    assert_eq!(res["rdma_lens"], "[10,200,3000]", "one completion per SEND, its exact length");
    assert_eq!(r.num("rdma_as_sent"), 3, "each receive buffer holds its message's bytes");
    assert_eq!(r.num("tcp_bytes"), 3210);
    let reads = res["tcp_reads"].trim_start_matches('[').trim_end_matches(']');
    let reads: u64 = reads.split(',').map(|v| v.parse::<u64>().expect("a size")).sum();
    assert_eq!(reads, 3210, "the printed read() sizes add up to what was sent");
    for (i, len) in [10, 200, 3000].iter().enumerate() {
        let line = format!("target CQ: receive completion {}: byte_len {len}", i + 1);
        assert!(r.stdout.contains(&line), "{line}:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("Takeaway:") && r.stdout.contains("What is emulated:"));
}

#[test]
fn bypass_tcp_makes_two_calls_per_message_and_rdma_almost_none() {
    let r = ok(&["bypass", "-n", "1000"]);
    let (tm, tc, tk) = (r.num("tcp_messages"), r.num("tcp_program_calls"), r.num("tcp_kernel_rw"));
    assert_eq!(tm, 2000);
    assert!(tc >= 2 * tm, "TCP: at least a write and a read per message: {tc} for {tm}");
    assert_eq!(tk, tc, "the kernel's syscr+syscw agree with the lesson's own count");
    let (rm, rc, rk) =
        (r.num("rdma_messages"), r.num("rdma_program_calls"), r.num("rdma_kernel_rw"));
    let wakes = r.num("rdma_nic_wakes");
    assert_eq!(rm, 2000);
    // The program threads' system calls, counted by softverbs: those that wake a sleeping
    // emulated NIC thread (which a real NIC never needs; how many depends on how often the
    // scheduler took a program's core away) and the rest, the data path's own.
    assert!(wakes <= rc, "{wakes} wakes of {rc} calls");
    assert!((rc - wakes) * 100 < rm, "RDMA data path: under 1 system call per 100 messages: {rc}");
    assert!(rk * 100 < rm, "and the kernel saw under 1 read/write per 100 messages: {rk}");
    assert!(r.num("first_rdma_kernel_rw") > 0, "setting up the path does read (the peer's inbox)");
}

#[test]
fn sge_lands_every_byte_where_the_map_says_and_max_sge_plus_one_is_einval() {
    let r = ok(&["sge"]);
    let res = r.result();
    assert_eq!((r.num("byte_len"), r.num("verified"), r.num("of")), (31, 31, 31));
    assert_eq!(res["error_errno"], "EINVAL");
    assert_eq!(res["error"], "ibv_post_send: wr[0] (wr_id 2): 33 SGEs exceed max_send_sge 32");
    let mapped: Vec<&str> = r.stdout.lines().filter(|l| l.contains("-> receive SGE")).collect();
    assert_eq!(mapped.len(), 4, "{mapped:#?}");
    assert!(mapped.iter().all(|l| l.ends_with(", verified")), "{mapped:#?}");
    assert!(mapped[1].contains("\"from\"") && mapped[1].contains("receive SGE 0 (target MR +112)"));
    // Who copied: not the programs, not the kernel for RDMA, but the emulated NIC, with the
    // CPU, and the table and the text say so (a real NIC's DMA is named as the difference).
    assert_eq!(r.num("program_copied"), 0);
    assert!(r.num("nic_copied") >= 2 * 31, "read and written at least once: {res:?}");
    assert!(!r.stdout.contains("bytes the CPU copied"), "{}", r.stdout);
    let row = r.stdout.lines().find(|l| l.contains("the emulated NIC copied with the CPU"));
    let row = row.unwrap_or_else(|| panic!("the NIC's copies have a row:\n{}", r.stdout));
    assert!(row.contains(&format!(" {} ", r.num("nic_copied"))), "{row}");
    assert!(r.stdout.contains("A real NIC does both by DMA"), "{}", r.stdout);
}

#[test]
fn zero_copy_the_program_copies_nothing_and_the_kernel_copies_tcp_twice() {
    let r = ok(&["zero-copy", "--size", "4K", "-n", "64"]);
    let bytes = 4096 * 64;
    assert_eq!(r.num("tcp_bytes"), bytes);
    assert_eq!(r.num("rdma_program"), 0, "the programs copied nothing");
    assert_eq!(r.num("tcp_kernel"), 2 * bytes, "TCP: the kernel copied each byte in and out");
    // Each byte once, unless a packet had to be sent again (a loaded machine can delay an ACK
    // past the QP's timeout): then the counts show that too.
    let (gathered, scattered) = (r.num("rdma_gathered"), r.num("rdma_scattered"));
    if r.num("rdma_retransmits") == 0 {
        assert_eq!(gathered, bytes, "the emulated NIC read each byte once");
        assert_eq!(scattered, bytes, "and wrote it once");
    } else {
        assert!(gathered > bytes && scattered >= bytes, "{gathered} {scattered} of {bytes}");
    }
    assert!(r.num("rdma_packet") >= bytes, "and copied it into the ring");
}

#[test]
fn one_sided_leaves_the_target_program_idle_compared_with_tcp() {
    let r = ok(&["one-sided", "--size", "8M"]);
    let (rdma, tcp) = (r.num("rdma_target_program_ns"), r.num("tcp_target_program_ns"));
    assert!(rdma < tcp, "target program CPU: RDMA {rdma} ns, TCP {tcp} ns");
    assert!(r.num("rdma_target_nic_ns") > 0, "the target's emulated NIC thread did the work");
    assert_eq!(r.num("bytes"), 8 << 20);
}

#[test]
fn vs_tcp_shows_every_size_with_both_columns() {
    let r = ok(&["vs-tcp", "--size", "4K", "-n", "50"]);
    let res = r.result();
    let sizes: Vec<&str> = res["sizes_calls"].split(',').collect();
    assert_eq!(sizes.len(), 2, "256 B and 4 KiB: {sizes:?}");
    for s in sizes {
        let v: Vec<f64> = s.split(':').map(|x| x.parse().expect("a number")).collect();
        assert!(v[2] >= 2.0, "TCP: at least two calls per message: {s}");
        assert!(v[1] < 1.0, "RDMA: well under one: {s}");
    }
    for row in
        ["latency, half round trip", "bandwidth (MB/s)", "CPU per GB", "bytes copied per message"]
    {
        assert!(r.stdout.lines().filter(|l| l.contains(row)).count() == 2, "{row} per size");
    }
    // The takeaway is computed from the table: a side named better on a latency row is the
    // side the takeaway names for that size.
    let take = r.stdout.lines().find(|l| l.starts_with("Takeaway:")).expect("a takeaway");
    for size in ["256 B", "4 KiB"] {
        let row = r.stdout.lines().find(|l| l.contains(&format!("{size} latency"))).expect("row");
        for side in ["RDMA", "TCP"] {
            if row.contains(&format!("better: {side}")) {
                let said = take.split(". ").next().unwrap_or("");
                let named = said.split("; ").find(|p| p.contains(size)).unwrap_or("");
                assert!(named.contains(&format!("{side} lower")), "{row}\n{take}");
            }
        }
    }
    assert!(r.stdout.contains("Laptop figures say nothing about RDMA hardware's."));
    // What produced the RDMA figures, said before them.
    assert!(r
        .stdout
        .contains("RDMA here travels as packets through the emulated NICs (direct reach off"));
}

/// The number after `after` on the first line that has it, up to the first `until` (hex with
/// a 0x, decimal else).
fn number_after(out: &str, after: &str, until: char) -> f64 {
    let at = out.find(after).unwrap_or_else(|| panic!("{after:?} in:\n{out}")) + after.len();
    let word: String = out[at..].chars().take_while(|c| *c != until).collect();
    match word.trim().strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).expect("hex") as f64,
        None => word.trim().parse().unwrap_or_else(|_| panic!("a number in {word:?}")),
    }
}

// Issue 22, item 7: what the demo says about the target is measured.
#[test]
fn the_demo_measures_the_target_threads_and_tells_cold_from_warm() {
    let _turn = turn();
    static SEQ: AtomicU32 = AtomicU32::new(100);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let fabric = FabricDir::create(&format!("softverbs-learn-test-{}-{n}", std::process::id()))
        .expect("a fabric directory");
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--fabric"]).arg(fabric.path());
    let mut p = Peer::spawn("softverbs demo", cmd, Stderr::Capture).expect("spawn softverbs");
    let out = p.remaining_lines(DEADLINE).join("\n");
    let status = p.wait_exit(DEADLINE).expect("the demo ends");
    assert!(status.success(), "{out}\n{}", p.stderr());
    // Two QPs, two numbers.
    let qpn = |who: &str| {
        let line = out.lines().find(|l| l.trim_start().starts_with(who)).expect("the QP line");
        number_after(line, "RC QP ", ',')
    };
    assert_ne!(qpn("initiator:"), qpn("target:"), "distinct QP numbers:\n{out}");
    // "Without the target program", from the target's own thread CPU times.
    let program = number_after(&out, "its program thread ", ' ');
    let nic = number_after(&out, "its emulated NIC thread (softverbs0-nic) ", ' ');
    assert!(
        program < nic,
        "the target program used less CPU than its NIC thread: {program} ms vs {nic} ms"
    );
    // Cold and warm, with the standby interval as the reason.
    assert!(
        out.contains("The first operation (") && out.contains("standby interval (1000 us"),
        "{out}"
    );
    assert!(number_after(&out, "the RDMA READ again took ", ' ') > 0.0, "{out}");
}

/// The pids of `pid`'s children (`/proc/<pid>/task/<pid>/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn a_killed_lesson_leaves_no_process_and_the_next_run_removes_its_directory() {
    let _turn = turn();
    let mut cmd = Command::new(BIN);
    // The default fabric directory of a run: /dev/shm/softverbs-learn-<pid>.
    cmd.args(["learn", "one-sided", "--size", "1G"]).env_remove("SOFTVERBS_FABRIC");
    let mut p = Peer::spawn("softverbs learn", cmd, Stderr::Capture).expect("spawn softverbs");
    let pid = p.pid().expect("a process");
    // Wait until the target is running and the RDMA phase has begun.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let line = p.recv_line(DEADLINE).unwrap_or_else(|e| panic!("{e}"));
        if line.starts_with("The live run") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no live run");
    }
    let targets = children(pid);
    assert_eq!(targets.len(), 1, "one target process: {targets:?}");
    let dir = softverbs_sim::peer::fabric_base().join(format!("softverbs-learn-{pid}"));
    assert!(dir.is_dir(), "{} exists while the run runs", dir.display());
    p.kill();
    // The target sees its input close and ends; nothing is left running.
    let gone = std::time::Instant::now() + Duration::from_secs(30);
    while nic_model::wire::process_alive(targets[0]) {
        assert!(std::time::Instant::now() < gone, "the target {} outlived its lesson", targets[0]);
        std::thread::sleep(Duration::from_millis(20));
    }
    // The next run that makes its own directory removes the dead run's.
    let mut cmd = Command::new(BIN);
    cmd.args(["learn", "messages"]).env_remove("SOFTVERBS_FABRIC");
    let mut next = Peer::spawn("softverbs learn", cmd, Stderr::Capture).expect("spawn softverbs");
    next.remaining_lines(DEADLINE);
    let status = next.wait_exit(DEADLINE).expect("the next run ends");
    assert!(status.success(), "{}", next.stderr());
    assert!(!dir.exists(), "{} removed", dir.display());
    assert!(
        next.stderr().contains(&format!("left by run {pid}, which is gone")),
        "{}",
        next.stderr()
    );
}

#[test]
fn json_is_one_object_with_the_measurements_and_the_text() {
    let r = ok(&["messages", "--json"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", r.stdout);
    let j = lines[0];
    assert!(j.starts_with("{\"lesson\":\"messages\",\"result\":{\"learn\":\"messages\","), "{j}");
    assert!(
        j.contains("\"rdma_lens\":[10,200,3000],\"rdma_as_sent\":3,\"tcp_reads\":[")
            && j.contains("\"tcp_bytes\":3210}"),
        "{j}"
    );
    assert!(j.contains("\"text\":\"softverbs learn messages\\n\\nWhat to watch:"), "{j}");
    assert!(j.ends_with("\"}"), "{j}");
}

#[test]
fn lang_zh_tw_translates_the_explanations_and_keeps_the_measurements() {
    let en = ok(&["messages"]);
    let zh = ok(&["messages", "--lang", "zh-TW"]);
    // The explanatory lines are in Chinese, and their English is gone.
    for line in [
        "要注意什麼：",
        "  RDMA 的 SEND 是一則訊息：接收端每個 SEND 得到一個完成，其 byte_len",
        "本次執行的量測：",
        "哪些是模擬的：",
        "重點：RDMA 的接收端看到的是傳送端的訊息；TCP 的接收端必須自己找出訊息的結尾。",
        "試試看：",
    ] {
        assert!(zh.stdout.lines().any(|l| l == line), "{line:?} in:\n{}", zh.stdout);
    }
    for english in ["What to watch:", "Takeaway:", "What is emulated:", "Try:"] {
        assert!(en.stdout.contains(english), "{english} in the English run");
        assert!(!zh.stdout.contains(english), "{english} left in:\n{}", zh.stdout);
    }
    // The run's lines are in Chinese with their numbers as printed (issue 32: every line
    // `--lang zh-TW` prints); the measurements stay: the same RESULT keys, numbers from this
    // run.
    for (i, len) in [10, 200, 3000].iter().enumerate() {
        let line = format!("目標端 CQ：接收完成 {}：byte_len {len}；", i + 1);
        assert!(zh.stdout.contains(&line), "{line}:\n{}", zh.stdout);
    }
    let (e, z) = (en.result(), zh.result());
    assert_eq!(e.keys().collect::<Vec<_>>(), z.keys().collect::<Vec<_>>());
    assert_eq!(z["rdma_lens"], "[10,200,3000]");
    assert_eq!(zh.num("tcp_bytes"), 3210);
    assert_eq!(
        en.stdout.lines().filter(|l| l.trim_start().starts_with("target ")).count(),
        zh.stdout
            .lines()
            .filter(|l| ["目標端 CQ", "目標端 read()"]
                .iter()
                .any(|p| l.trim_start().starts_with(p)))
            .count(),
        "the live run's lines"
    );
    assert_eq!(en.stdout.lines().count(), zh.stdout.lines().count(), "line for line");
}

#[test]
fn an_unknown_lang_is_a_usage_error_naming_the_choices() {
    let r = learn(&["messages", "--lang", "xx"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("no language \"xx\"") && r.stderr.contains("en, zh-TW"),
        "{}",
        r.stderr
    );
}
