//! The scripts in `scripts/` as a user runs them, with stand-ins for `cargo` and the
//! `softverbs` binary (these tests build nothing in release mode and measure nothing): where
//! they look for the binary, and what their usage says.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root: `scripts/` lives there.
fn root() -> PathBuf {
    // This crate is sim/cli/, two levels below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
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

/// A `softverbs` stand-in that prints, for each `perf` measurement, the line the script
/// parses: perftest's tests' `--json` line, or a `RESULT` line.
const FAKE_SOFTVERBS: &str = r#"echo "stand-in softverbs $*"
case "$2 $4" in
    "write_bw 1048576") echo '{"test":"write_bw","bytes":1048576,"bw_average_mib_per_sec":5000.00,"msg_rate_mpps":0.005000}' ;;
    "write_bw 8") echo '{"test":"write_bw","bytes":8,"bw_average_mib_per_sec":38.15,"msg_rate_mpps":5.000000}' ;;
    "write_lat 8") echo '{"test":"write_lat","bytes":8,"t_typical_usec":0.400,"t_avg_usec":0.450}' ;;
    "send_lat 8") echo '{"test":"send_lat","bytes":8,"t_typical_usec":0.250,"t_avg_usec":0.300}' ;;
    "read_lat 8") echo '{"test":"read_lat","bytes":8,"t_typical_usec":0.300,"t_avg_usec":0.320}' ;;
esac
case "$2" in
    atomic_lat) echo '{"test":"atomic_lat","bytes":8,"t_typical_usec":0.350,"t_avg_usec":0.360}' ;;
esac
case "$2" in
    floor) echo "RESULT floor iters=1 runs=1 median_us=0.100 p99_us=0.200" ;;
    idle) echo "RESULT lat idle_cpu_pct=0.1000 peer_idle_cpu_pct=0.2000" ;;
    syscalls) echo "RESULT syscalls per_iter=0.50" ;;
    spin) echo "| 0 | 1.000 | 2.000 | 0.1 / 0.2 |" ;;
esac
"#;

/// A `cargo` stand-in: `build --message-format=json` reports the `softverbs` executable in
/// `$CARGO_TARGET_DIR/release`, as cargo does.
const FAKE_CARGO: &str = r#"case "$1" in
    build) echo "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"softverbs\"},\"executable\":\"$CARGO_TARGET_DIR/release/softverbs\"}" ;;
esac
"#;

/// `scripts/perf.sh --quick` with stand-ins for cargo and softverbs (no release build, no
/// measurement of ours) and `env` added to its environment.
fn perf_sh_quick(env: &[(&str, &str)]) -> (String, String) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let bin = tmp.path().join("bin");
    script(&bin.join("cargo"), FAKE_CARGO);
    let target = tmp.path().join("elsewhere");
    script(&target.join("release/softverbs"), FAKE_SOFTVERBS);
    // The stand-in is its own baseline build too, where a test asks for one.
    let env: Vec<(&str, String)> = env
        .iter()
        .map(|&(k, v)| match (k, v) {
            ("BASELINE", "stand-in") => (k, target.join("release/softverbs").display().to_string()),
            _ => (k, v.to_string()),
        })
        .collect();
    let mut command = Command::new("bash");
    command
        .arg(root().join("scripts/perf.sh"))
        .arg("--quick")
        .env("CARGO_TARGET_DIR", &target)
        // The stand-in cargo first, then the system's programs (the peers, when installed).
        .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()))
        .env("TMPDIR", tmp.path());
    for (k, v) in env {
        command.env(k, v);
    }
    let out = run_bounded(command, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "perf.sh failed: {stdout}\n{stderr}");
    // Its temporary directory is gone.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("listing the temporary directory")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("softverbs-perf"))
        .collect();
    assert!(left.is_empty(), "perf.sh left {left:?}");
    (stdout, stderr)
}

/// `CARGO_TARGET_DIR=DIR scripts/perf.sh` runs the binary cargo reports building in DIR, not
/// one of `target/` (which may not exist, or be stale); without the peers it says which
/// package to install and still prints softverbs' figures.
#[test]
fn perf_sh_runs_the_binary_in_cargo_target_dir_and_names_missing_peers() {
    let (stdout, _) = perf_sh_quick(&[
        ("UCX_PERFTEST", "no-such-ucx_perftest"),
        ("FI_PINGPONG", "no-such-fi_pingpong"),
        ("BASELINE", "stand-in"),
    ]);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("binary: /") && l.ends_with("/elsewhere/release/softverbs")),
        "{stdout}"
    );
    for line in [
        "perf.sh: no-such-ucx_perftest not found: the UCX rows are left out (install: apt-get install ucx-utils)",
        "perf.sh: no-such-fi_pingpong not found: the libfabric row is left out (install: apt-get install libfabric-bin)",
        "| 1 MiB RDMA WRITE bandwidth | `softverbs perf write_bw -s 1048576 -n 100` | 5000.00 MiB/s |  | - | - |",
        "| 8 B RDMA WRITE message rate | `softverbs perf write_bw -s 8 -n 20000` | 5000000 msg/s |  | - | - |",
        "| 8 B RDMA WRITE latency, half round trip, median | `softverbs perf write_lat -s 8 -n 2000` | 0.400 us |  | - | - |",
        "| 8 B SEND half round trip, median | `softverbs perf send_lat -s 8 -n 2000` | 0.250 us |  | - | - |",
        "| 8 B SEND half round trip, mean | `softverbs perf send_lat -s 8 -n 2000` | 0.300 us |  | - | - |",
        "| 8 B RDMA READ latency, median, against softverbs' own 8 B SEND half round trip | `softverbs perf read_lat -s 8 -n 2000` | 0.300 us | `softverbs perf send_lat -s 8 -n 2000` | 0.250 us | 1.200 |",
        "| 8 B atomic latency, median, against softverbs' own 8 B SEND half round trip | `softverbs perf atomic_lat -n 2000` | 0.350 us | `softverbs perf send_lat -s 8 -n 2000` | 0.250 us | 1.400 |",
        "| shm floor, half round trip | `softverbs perf floor` | 0.100 us |",
        "| idle CPU, % of a core (initiator / peer) | `softverbs perf idle --seconds 1` | 0.1000 / 0.2000 |",
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line {line:?} in:\n{stdout}");
    }
    // BASELINE's SEND half round trip, measured in the same rounds, against this build's.
    let base = "| 8 B SEND half round trip, median, against BASELINE | `softverbs perf send_lat -s 8 -n 2000` | 0.250 us | `";
    assert!(
        stdout.lines().any(|l| l.starts_with(base)
            && l.ends_with(
                "/elsewhere/release/softverbs perf send_lat -s 8 -n 2000` | 0.250 us | 1.000 |"
            )),
        "no BASELINE row in:\n{stdout}"
    );
}

/// The whole quick table against the real peers (`ucx_perftest`, `fi_pingpong`; `.ci/run`
/// installs them): every peer row has a figure and a ratio. Where a peer is not installed,
/// its rows are left out, as the script says.
#[test]
fn perf_sh_quick_measures_the_installed_peers() {
    let (stdout, _) = perf_sh_quick(&[]);
    let installed = |p: &str| {
        std::env::split_paths("/usr/local/bin:/usr/bin:/bin").any(|d| d.join(p).is_file())
    };
    // A row's peer figure and ratio: the last two cells, both numbers.
    let peer = |measurement: &str| -> Option<(f64, f64)> {
        let line = stdout.lines().find(|l| l.starts_with(&format!("| {measurement} |")))?;
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let n = cells.len();
        let figure = cells[n - 3].split(' ').next()?.parse().ok()?;
        Some((figure, cells[n - 2].parse().ok()?))
    };
    let ucx_rows = [
        ("1 MiB RDMA WRITE bandwidth", 5000.0),
        ("8 B RDMA WRITE message rate", 5e6),
        ("8 B RDMA WRITE latency, half round trip, median", 0.4),
        ("8 B SEND half round trip, median", 0.25),
    ];
    for (m, ours) in ucx_rows {
        match (installed("ucx_perftest"), peer(m)) {
            (true, Some((figure, ratio))) => {
                assert!(figure > 0.0, "{m}: {stdout}");
                assert!(
                    (ratio - ours / figure).abs() <= 0.01 * ratio.max(0.01) + 0.005,
                    "{m}: {stdout}"
                );
            }
            (true, None) => {
                panic!("{m}: no UCX figure though ucx_perftest is installed:\n{stdout}")
            }
            (false, found) => {
                assert!(found.is_none(), "{m}: a UCX figure without ucx_perftest:\n{stdout}");
                assert!(stdout.contains("apt-get install ucx-utils"), "{stdout}");
            }
        }
    }
    match (installed("fi_pingpong"), peer("8 B SEND half round trip, mean")) {
        (true, Some((figure, ratio))) => {
            assert!(figure > 0.0, "{stdout}");
            assert!((ratio - 0.3 / figure).abs() <= 0.01 * ratio.max(0.01) + 0.005, "{stdout}");
        }
        (true, None) => panic!("no fi_pingpong figure though it is installed:\n{stdout}"),
        (false, found) => {
            assert!(found.is_none(), "a libfabric figure without fi_pingpong:\n{stdout}");
            assert!(stdout.contains("apt-get install libfabric-bin"), "{stdout}");
        }
    }
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

/// `scripts/sim-identity.sh OLD NEW SCENARIO`: one binary against itself is the same; against a
/// stand-in whose trace has one more byte it says which file differs and exits 1; without
/// binaries it prints its usage and exits 2.
#[test]
fn sim_identity_sh_finds_a_trace_that_differs() {
    let dir = std::env::temp_dir().join(format!("sim-identity-test-{}", std::process::id()));
    let real = env!("CARGO_BIN_EXE_softverbs");
    // The stand-in runs the real binary, then adds a byte to the file after `--trace`.
    let changed = dir.join("changed");
    script(
        &changed,
        &format!(
            "\"{real}\" \"$@\"; s=$?\nwhile [ $# -gt 0 ]; do [ \"$1\" = --trace ] && printf x >>\"$2\"; \
             shift; done\nexit $s\n"
        ),
    );
    let scenario = root().join("sim/scenarios/ladder.toml");
    let run = |new: &Path| {
        let mut command = Command::new("sh");
        command.arg(root().join("scripts/sim-identity.sh")).arg(real).arg(new).arg(&scenario);
        command.env("TMPDIR", &dir);
        run_bounded(command, Duration::from_secs(60))
    };
    let same = run(Path::new(real));
    let differ = run(&changed);
    let mut usage = Command::new("sh");
    usage.arg(root().join("scripts/sim-identity.sh"));
    let usage = run_bounded(usage, Duration::from_secs(20));
    let leftover: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert!(stdout(&same).starts_with("same "), "{}", stdout(&same));
    assert_eq!(differ.status.code(), Some(1), "{differ:?}");
    assert!(stdout(&differ).trim_end().ends_with("ladder.toml: trace"), "{}", stdout(&differ));
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage:"), "{usage:?}");
    assert_eq!(leftover, vec![std::ffi::OsString::from("changed")], "its temporary directory");
}
