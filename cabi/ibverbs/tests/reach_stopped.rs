//! tests/c/reach_stopped.c on the library: a C program's registered memory (a malloc'd
//! buffer sharing its pages with other heap objects) is reached as a Rust program's owned
//! MRs are (issue 29, Deliver 3): WRITTEN and READ by the peer while the target process is
//! stopped, which only a reach can complete (a packet needs the target's NIC thread).
//! With reach off the same WRs complete once the target runs again, with the same
//! completions and bytes.

mod common;

use common::Env;

fn expected(stopped: u32) -> String {
    format!(
        "\
target stopped: yes
completed while the target was stopped: {stopped} of 2
wc: wr_id=1 status=success opcode=1 byte_len=8192 qp=ours
wc: wr_id=2 status=success opcode=2 byte_len=8192 qp=ours
read back: the bytes written
target: bytes and neighbours ok, exited 0
"
    )
}

#[test]
fn a_c_programs_malloced_mr_is_reached_while_its_process_is_stopped() {
    let test = "a_c_programs_malloced_mr_is_reached_while_its_process_is_stopped";
    let Some((_dir, exe)) = common::build_c(test, "reach_stopped", &[]) else { return };
    for (reach, stopped) in [("on", 2), ("off", 0)] {
        let env = Env::new();
        let (o, e) = common::run_reach(&env, &exe, reach, test);
        assert_eq!(o, expected(stopped), "reach {reach}\n{e}");
    }
}
