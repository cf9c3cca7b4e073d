//! rdma-core's own test suite, run as rdma-core runs it, on softverbs' libibverbs.so.1 and
//! librdmacm.so.1: the pyverbs tests Debian's `python3-pyverbs` ships (partly gzipped) in
//! `/usr/share/doc/rdma-core/tests`, copied to a temporary directory, unpacked and run with
//! `run_tests.py`. The run must end with unittest's `OK`: no error, no failure, no crash; and
//! at least [`PASSING_AT_LEAST`] tests must pass (the rest skip, each for a reason the suite
//! prints: mlx5, EFA and other hardware, features rxe lacks too, and what issue 30 still lists).
//! Run through `softverbs run` when the binary is built, so the RDMA-CM tests find a network
//! interface for the devices and run.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

mod cm;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cm::env;
use common::text;

/// Tests of Debian 12's suite that pass on softverbs through `softverbs run` (108 of 273: the
/// 10 RDMA-CM tests, the 8 memory-window tests, the atomic write and 11 ODP tests among them;
/// docs/c.md says what the 165 skips are); fewer is a regression.
const PASSING_AT_LEAST: usize = 108;

/// The number after `key` in `s` (e.g. `Ran 273 tests`, `skipped=195`).
fn number_after(s: &str, key: &str) -> Option<usize> {
    let at = s.find(key)? + key.len();
    let digits: String = s[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[test]
fn rdma_cores_pyverbs_suite_passes_with_no_error_and_no_crash() {
    let test = "rdma_cores_pyverbs_suite_passes_with_no_error_and_no_crash";
    let Some(shipped) = common::file(test, "/usr/share/doc/rdma-core/tests", "python3-pyverbs")
    else {
        return;
    };
    let Some(_) = common::file(test, "/usr/lib/python3/dist-packages/pyverbs", "python3-pyverbs")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let tests = dir.path().join("tests");
    let copied = Command::new("cp").arg("-r").arg(&shipped).arg(&tests).status().expect("cp");
    assert!(copied.success(), "copying {} failed", shipped.display());
    let packed: Vec<_> = std::fs::read_dir(&tests)
        .expect("the copy")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gz"))
        .collect();
    if !packed.is_empty() {
        let unpacked = Command::new("gunzip").arg("-q").args(&packed).status().expect("gunzip");
        assert!(unpacked.success(), "gunzip of the suite's .gz files failed");
    }
    let script = tests.join("run_tests.py");
    let env = env();
    // Through `softverbs run` (device nodes and sysfs in a namespace of its own), as a user runs
    // it: the RDMA-CM tests find the devices' network interface and run rather than skip.
    let bin = common::target_dir().join("softverbs");
    let out = if bin.exists() {
        let mut c = env.command(&bin);
        c.env_remove("LD_LIBRARY_PATH").env_remove("SOFTVERBS_FABRIC");
        c.arg("run").arg("--fabric").arg(env.fabric.path()).arg("--");
        c.arg("/usr/bin/python3").arg(&script);
        let child = c.spawn().expect("spawn softverbs run");
        common::finish(common::Guard(Some(child)), Duration::from_secs(300), "pyverbs suite")
    } else {
        assert!(
            std::env::var("SOFTVERBS_REQUIRE_C").as_deref() != Ok("1"),
            "{test}: {} is not built (cargo test --workspace builds it)",
            bin.display()
        );
        eprintln!(
            "{test}: the softverbs binary is not built: the suite runs without the namespace"
        );
        env.run(
            Path::new("/usr/bin/python3"),
            &[script.to_str().expect("a UTF-8 path")],
            Duration::from_secs(300),
        )
    };
    let (o, e) = text(&out);
    let all = format!("{o}{e}");
    let summary: Vec<&str> = all.lines().rev().take(4).collect();
    assert!(out.status.success(), "the suite failed or crashed ({:?}):\n{all}", out.status);
    // The RDMA-CM tests' processes count a death by a signal as a pass: glibc's or the
    // kernel's words for one are a crash all the same.
    for crash in ["Fatal glibc error", "corrupted", "Segmentation fault", "Fatal Python error"] {
        assert!(!all.contains(crash), "{crash:?} in the suite's output:\n{all}");
    }
    let ran = number_after(&all, "\nRan ").expect("unittest's 'Ran N tests' line");
    let skipped = number_after(&all, "skipped=").unwrap_or(0);
    println!("pyverbs: {} of {ran} passed ({skipped} skipped)", ran - skipped);
    assert!(
        all.lines().any(|l| l.starts_with("OK")),
        "no 'OK': errors or failures:\n{summary:?}\n{all}"
    );
    assert!(
        ran - skipped >= PASSING_AT_LEAST,
        "{} of {ran} passed ({skipped} skipped), fewer than {PASSING_AT_LEAST}:\n{all}",
        ran - skipped
    );
}
