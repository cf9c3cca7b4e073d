//! The scripts in `scripts/` as a user runs them, with stand-ins for `cargo` and the
//! `softverbs` binary (these tests build nothing in release mode and measure nothing): where
//! they look for the binary, and what their usage says.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root: `scripts/` lives there.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Write an executable shell script.
fn script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("creating its directory");
    std::fs::write(path, format!("#!/bin/sh\n{body}")).expect("writing a stand-in");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Run `command` to its end, killing it after `limit`.
fn run_bounded(mut command: Command, limit: Duration) -> Output {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("starting the script");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting the output")
}

/// A `softverbs` stand-in that prints, for each `perf` measurement, the RESULT line the
/// script parses.
const FAKE_SOFTVERBS: &str = r#"echo "stand-in softverbs $*"
case "$2" in
    floor) echo "RESULT floor iters=1 runs=1 median_us=0.100 p99_us=0.200" ;;
    lat) echo "RESULT lat size=8 iters=1 runs=1 median_us=1.000 mean_us=1.100 p99_us=2.000" ;;
    bw) echo "RESULT bw size=1048576 median_gbps=5.000" ;;
    idle) echo "RESULT lat idle_cpu_pct=0.1000 peer_idle_cpu_pct=0.2000" ;;
    syscalls) echo "RESULT syscalls per_iter=0.50" ;;
    spin) echo "| 0 | 1.000 | 2.000 | 0.1 / 0.2 |" ;;
esac
"#;

/// `CARGO_TARGET_DIR=DIR scripts/perf.sh` runs the binaries cargo built in DIR, not those of
/// `target/` (which may not exist, or be stale).
#[test]
fn perf_sh_runs_the_binary_in_cargo_target_dir() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let bin = tmp.path().join("bin");
    script(&bin.join("cargo"), "exit 0\n");
    let target = tmp.path().join("elsewhere");
    script(&target.join("release/softverbs"), FAKE_SOFTVERBS);
    let mut command = Command::new("bash");
    command
        .arg(root().join("scripts/perf.sh"))
        .arg("--quick")
        .env("CARGO_TARGET_DIR", &target)
        // The stand-in cargo first; no fi_pingpong, ucx_perftest or strace rows.
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("TMPDIR", tmp.path());
    let out = run_bounded(command, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf.sh failed: {stdout}\n{stderr}");
    assert!(stdout.contains("stand-in softverbs perf floor"), "{stdout}");
    assert!(
        stdout.contains("| shm floor, half RTT | `softverbs perf floor` | 0.100 us"),
        "{stdout}"
    );
}

/// `scripts/ab.sh` without arguments prints its usage, the comment at its top, and nothing of
/// its code, on stderr, with status 2.
#[test]
fn ab_sh_usage_is_its_comment_only() {
    let mut command = Command::new("bash");
    command.arg(root().join("scripts/ab.sh"));
    let out = run_bounded(command, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("Usage: scripts/ab.sh ROUNDS BINARY..."), "{stderr}");
    assert!(
        stderr.trim_end().ends_with("that the host's slow and fast spells do not move."),
        "{stderr}"
    );
    assert!(!stderr.contains("set -euo"), "a line of code in the usage: {stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
}
