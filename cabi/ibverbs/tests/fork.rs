//! tests/c/fork.c on the library: a child of `fork()` that destroys every verbs object it
//! inherited and exits leaves the parent's device working (`ibv_fork_init`'s promise): its
//! WRITEs and READs still complete with their bytes. With direct reach on and off.

mod common;

use std::time::Duration;

use common::{text, Env};

const EXPECTED: &str = "\
before fork: ok
child: exited 0
after: write ok, read ok
bytes: ok
";

#[test]
fn a_fork_child_that_destroys_what_it_inherited_leaves_the_parents_device_working() {
    let test = "a_fork_child_that_destroys_what_it_inherited_leaves_the_parents_device_working";
    let Some((_dir, exe)) = common::build_c(test, "fork", &[]) else { return };
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

/// tests/c/fork_open.c: a child of `fork()` that opens the device its parent has open gets a
/// context and a port (an address) of its own (its RC WRITE completes with its bytes), not the
/// parent's inherited one,
/// whose NIC thread it does not have (pyverbs' RDMA-CM tests fork such children: they hung or
/// corrupted their heap); the parent's device still works after. With direct reach on and off.
#[test]
fn a_fork_child_that_opens_the_device_gets_its_own() {
    let test = "a_fork_child_that_opens_the_device_gets_its_own";
    let Some((_dir, exe)) = common::build_c(test, "fork_open", &[]) else { return };
    for reach in ["1", "0"] {
        let env = Env::new();
        let mut cmd = env.command(&exe);
        cmd.env("SOFTVERBS_REACH", reach);
        let child = cmd.spawn().expect("spawn");
        let out = common::finish(common::Guard(Some(child)), Duration::from_secs(60), "fork_open");
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {:?}\n{o}{e}", out.status);
        assert_eq!(
            o,
            "parent before: ok\nchild's port: its own\nchild: ok\nchild: exited 0\nparent after: ok\n",
            "reach {reach}"
        );
    }
}
