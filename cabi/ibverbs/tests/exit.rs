//! tests/c/exit_open.c on the library: a program that exits with its device, PD, MR and QP
//! still open leaves nothing in the fabric directory (its port's inbox and reach file are
//! removed as it exits, as the kernel releases an rxe device's resources), while a fork child
//! that exits removes nothing of its parent's. With direct reach on and off.

mod common;

use std::time::Duration;

use common::{text, Env};

#[test]
fn a_program_that_exits_with_its_device_open_leaves_no_files() {
    let test = "a_program_that_exits_with_its_device_open_leaves_no_files";
    let Some((_dir, exe)) = common::build_c(test, "exit_open", &[]) else { return };
    for reach in ["1", "0"] {
        let env = Env::new();
        let mut cmd = env.command(&exe);
        cmd.env("SOFTVERBS_REACH", reach);
        let child = cmd.spawn().expect("spawn");
        let out = common::finish(common::Guard(Some(child)), Duration::from_secs(60), "exit_open");
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {:?}\n{o}{e}", out.status);
        assert_eq!(
            o, "port files while open: some\nafter a fork child exited: the same\n",
            "reach {reach}\n{e}"
        );
        let mut left: Vec<String> = std::fs::read_dir(env.fabric.path())
            .expect("the fabric directory")
            .map(|d| d.expect("an entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock")
            .collect();
        left.sort();
        assert!(left.is_empty(), "reach {reach}: files left in the fabric: {left:?}");
    }
}
