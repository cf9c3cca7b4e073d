//! tests/c/fork.c on the library: a child of `fork()` that destroys every verbs object it
//! inherited and exits leaves the parent's device working (`ibv_fork_init`'s promise): its
//! WRITEs and READs still complete with their bytes. With direct reach on and off.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{text, tool, Env};

const EXPECTED: &str = "\
before fork: ok
child: exited 0
after: write ok, read ok
bytes: ok
";

#[test]
fn a_fork_child_that_destroys_what_it_inherited_leaves_the_parents_device_working() {
    let test = "a_fork_child_that_destroys_what_it_inherited_leaves_the_parents_device_working";
    let Some(cc) = tool(test, "cc", "gcc") else { return };
    if common::file(test, "/usr/include/infiniband/verbs.h", "libibverbs-dev").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("fork");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fork.c");
    let out = Command::new(cc).arg("-Wall").arg("-o").arg(&exe).arg(&src).arg("-libverbs").output();
    let out = out.expect("cc");
    assert!(out.status.success(), "cc:\n{}", String::from_utf8_lossy(&out.stderr));
    for reach in ["1", "0"] {
        let env = Env::new();
        let mut cmd = env.command(&exe);
        cmd.env("SOFTVERBS_REACH", reach);
        let child = cmd.spawn().expect("spawn");
        let out = common::finish(common::Guard(Some(child)), Duration::from_secs(60), "fork");
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {:?}\n{o}{e}", out.status);
        assert_eq!(o, EXPECTED, "reach {reach}");
    }
}
