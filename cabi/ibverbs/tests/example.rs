//! examples/c/rdma_basics.c, built by the system C compiler against the system
//! `<infiniband/verbs.h>` with `-libverbs`, runs on softverbs' library: SEND, RDMA WRITE, READ
//! and FETCH_AND_ADD between two processes, every result printed and checked; and
//! `softverbs run` sets up the same run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{text, tool, Env};

/// The lines the example prints, in order per process.
const REQUESTER: [&str; 4] = [
    "requester: SEND completed",
    "requester: RDMA WRITE completed",
    "requester: RDMA READ got: read me",
    "requester: FETCH_AND_ADD returned 41",
];
const RESPONDER: [&str; 3] = [
    "responder: received SEND: hello (6 bytes)",
    "responder: WRITE landed: written by WRITE",
    "responder: counter is now 42",
];

/// Compile the example into `dir`; None when the compiler or header is missing (skipped).
fn build(test: &str, dir: &Path) -> Option<PathBuf> {
    let cc = tool(test, "cc", "gcc")?;
    common::file(test, "/usr/include/infiniband/verbs.h", "libibverbs-dev")?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/rdma_basics.c");
    let exe = dir.join("rdma_basics");
    let out = Command::new(cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

fn check(out: &std::process::Output) {
    let (o, e) = text(out);
    assert!(out.status.success(), "{:?}\n{o}{e}", out.status);
    let req: Vec<&str> = o.lines().filter(|l| l.starts_with("requester:")).collect();
    let resp: Vec<&str> = o.lines().filter(|l| l.starts_with("responder:")).collect();
    assert_eq!(req, REQUESTER, "{o}");
    assert_eq!(resp, RESPONDER, "{o}");
    assert_eq!(e, "");
}

#[test]
fn the_c_example_does_send_write_read_and_an_atomic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(exe) = build("the_c_example_does_send_write_read_and_an_atomic", dir.path()) else {
        return;
    };
    let env = Env::new();
    check(&env.run(&exe, &[], Duration::from_secs(60)));
}

#[test]
fn softverbs_run_runs_the_c_example() {
    let test = "softverbs_run_runs_the_c_example";
    let softverbs = common::target_dir().join("softverbs");
    if !softverbs.exists() {
        if std::env::var("SOFTVERBS_REQUIRE_C").as_deref() == Ok("1") {
            panic!(
                "{test}: {} is not built (cargo test --workspace builds it)",
                softverbs.display()
            );
        }
        eprintln!(
            "{test}: skipped: the softverbs binary is not built (run cargo test --workspace)"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(exe) = build(test, dir.path()) else { return };
    let env = Env::new();
    // No LD_LIBRARY_PATH of our own: `softverbs run` sets it; --fabric names the fabric.
    let mut cmd = env.command(&softverbs);
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("SOFTVERBS_FABRIC");
    cmd.arg("run").arg("--fabric").arg(env.fabric.path()).arg("--").arg(&exe);
    let out = common::finish(
        common::Guard(Some(cmd.spawn().expect("spawn"))),
        Duration::from_secs(60),
        test,
    );
    check(&out);
    // The fabric it used is the one named: the devices' segments were made there.
    assert!(std::fs::read_dir(env.fabric.path()).expect("fabric").count() > 0);
}

#[test]
fn softverbs_run_passes_the_exit_status_and_names_a_missing_program() {
    let test = "softverbs_run_passes_the_exit_status_and_names_a_missing_program";
    let softverbs = common::target_dir().join("softverbs");
    if !softverbs.exists() {
        eprintln!(
            "{test}: skipped: the softverbs binary is not built (run cargo test --workspace)"
        );
        return;
    }
    let env = Env::new();
    let out = env.run(
        &softverbs,
        &["run", "--", "sh", "-c", "echo $LD_LIBRARY_PATH; exit 3"],
        Duration::from_secs(30),
    );
    let (o, _) = text(&out);
    assert_eq!(out.status.code(), Some(3));
    let first = o.lines().next().unwrap_or("").split(':').next().unwrap_or("").to_string();
    assert!(Path::new(&first).join("libibverbs.so.1").exists(), "{o}");
    let out = env.run(&softverbs, &["run", "--", "/nonexistent/program"], Duration::from_secs(30));
    let (_, e) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        e.trim(),
        "softverbs run: cannot run /nonexistent/program: No such file or directory (os error 2)"
    );
}
