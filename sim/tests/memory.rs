//! `softverbs perf memory` as real processes: a device with 1,000 RC QPs connected to a peer
//! process, with traffic through every one, grows less than 64 MiB beyond its registered memory
//! (issue 21, item 3); the table names every step; `--json` carries the same figures;
//! `--max-mib` fails a run that exceeds it; bad flags exit 2 naming the flag.

use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softverbs_sim::peer::{FabricDir, Peer, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// Bound on one command (a debug build, two cores shared with the other tests).
const BOUND: Duration = Duration::from_secs(120);

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run `softverbs perf memory <args>` on a fabric of its own, killed past [`BOUND`]; the
/// fabric directory must be empty of segments when it ends.
fn memory(args: &[&str]) -> Run {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let fabric = FabricDir::create(&format!("softverbs-memory-test-{}-{n}", std::process::id()))
        .expect("a fabric directory");
    let dir = fabric.path().to_str().expect("UTF-8 path").to_string();
    let mut c = Command::new(BIN);
    c.args(["perf", "memory"]).args(args).args(["--fabric", &dir]);
    let mut p = Peer::spawn("softverbs perf memory", c, Stderr::Capture).expect("starting it");
    p.close_stdin();
    let status = p.wait_exit(BOUND).unwrap_or_else(|e| panic!("perf memory {args:?}: {e}"));
    let stdout = p.remaining_lines(BOUND).join("\n");
    let stderr = p.stderr();
    fabric.wait_empty(Duration::from_secs(10)).expect("no segments left behind");
    Run { status, stdout, stderr }
}

/// The number after `"key":` in a JSON object.
fn json_u64(json: &str, key: &str) -> u64 {
    let at = json.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("{key} in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().unwrap_or_else(|_| panic!("{key} is a number in {json}"))
}

#[test]
fn a_thousand_connected_rc_qps_stay_under_64_mib_beyond_registered_memory() {
    let r = memory(&["--max-mib", "64"]);
    let breakdown = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.status.success(), "the run failed ({}):\n{breakdown}", r.status);
    let steps: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("step "))
        .skip(1)
        .take_while(|l| !l.starts_with("fabric shared memory"))
        .map(|l| l.split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        steps,
        [
            "process baseline",
            "device opened",
            "+1 PD",
            "+16 CQs of 4096 entries",
            "+1000 MRs of 4096 B (written)",
            "+1000 RC QPs (sq 256, rq 128) created",
            "1000 QPs connected (RTS)",
            "after 4 WRITEs + 1 READ each way per QP",
        ],
        "{breakdown}"
    );
    let last = r.stdout.lines().last().unwrap_or("");
    let mib: f64 = last
        .strip_prefix("registered memory: 4096000 B; device growth beyond it: ")
        .and_then(|s| s.strip_suffix(" MiB for 1000 connected RC QPs"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the summary line, got {last:?}:\n{breakdown}"));
    assert!(mib > 0.0 && mib < 64.0, "{mib} MiB beyond registered memory:\n{breakdown}");
}

#[test]
fn json_carries_every_step_and_max_mib_fails_a_run_that_exceeds_it() {
    let r = memory(&["-q", "10", "--mrs", "4", "--cqs", "2", "--json", "--max-mib", "0"]);
    assert_eq!(r.status.code(), Some(1), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("beyond registered memory, more than --max-mib 0"),
        "stderr: {}",
        r.stderr
    );
    let json = r.stdout.trim();
    assert!(json.starts_with("{\"test\":\"memory\"") && json.ends_with("]}"), "{json}");
    assert_eq!(json_u64(json, "qps"), 10);
    assert_eq!(json_u64(json, "tx_depth"), 256);
    assert_eq!(json_u64(json, "rx_depth"), 128);
    assert_eq!(json_u64(json, "registered_bytes"), 4 * 4096);
    assert!(json_u64(json, "inbox_bytes") >= 1024 * 4352, "{json}");
    assert!(json_u64(json, "beyond_registered_bytes") > 0, "{json}");
    assert_eq!(json.matches("\"rss_kib\":").count(), 8, "{json}");
    assert!(json.contains("\"step\":\"10 QPs connected (RTS)\""), "{json}");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let r = memory(&["-s", "8192", "--mr-size", "4096"]);
    assert_eq!(r.status.code(), Some(2), "stderr: {}", r.stderr);
    assert!(r.stderr.contains("-s 8192 is larger than --mr-size 4096"), "{}", r.stderr);
    let r = memory(&["-q", "0"]);
    assert_eq!(r.status.code(), Some(2), "stderr: {}", r.stderr);
    assert!(r.stderr.contains("'--qps <QPS>'"), "{}", r.stderr);
}
