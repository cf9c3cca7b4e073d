//! tests/c/mw.c on the library: memory windows of both types as a C program uses them
//! (`ibv_alloc_mw`, `ibv_bind_mw`, `ibv_wr_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
//! `ibv_wr_send_inv`, `ibv_dealloc_mw`), each case in a process of its own, run with direct
//! reach on and off, with the same lines expected both ways, as rxe gives them.

mod common;

/// Each case and what it prints.
const CASES: &[(&str, &str)] = &[
    ("caps", "caps: MEM_WINDOW yes, TYPE_2B yes, max_mw>0 yes\n"),
    (
        "type1",
        "\
type1: bind rc=0
type1: new rkey is ibv_inc_rkey(old): yes
type1: bind: wr_id=70 status=success opcode=5 byte_len=0 qp ok=yes flags=0
type1: write: wr_id=1 status=success opcode=1 byte_len=19 qp ok=yes flags=0
type1: landed: yes
type1: past the end: wr_id=2 status=remote access error qp ok=yes
type1: dereg_mr under a bound window: rc=EINVAL
type1: dealloc_mw rc=0, dereg_mr rc=0
",
    ),
    (
        "type2",
        "\
type2: wr_complete rc=0
type2: bind: wr_id=71 status=success opcode=5 byte_len=0 qp ok=yes flags=0
type2: write: wr_id=3 status=success opcode=1 byte_len=11 qp ok=yes flags=0
type2: landed: yes
type2: send_inv wr_complete rc=0
type2: send_inv: wr_id=4 status=success opcode=0 byte_len=8 qp ok=yes flags=0
type2: receive: wr_id=72 status=success opcode=128 byte_len=8 qp ok=yes flags=8
type2: WITH_INV yes, invalidated rkey right: yes
type2: write after invalidation: wr_id=5 status=remote access error qp ok=yes
type2: dealloc_mw rc=0
",
    ),
    (
        "localinv",
        "\
localinv: post_send rc=0
localinv: bind: wr_id=80 status=success opcode=5 byte_len=0 qp ok=yes flags=0
localinv: local_inv: wr_id=81 status=success opcode=6 byte_len=0 qp ok=yes flags=0
localinv: write after invalidation: wr_id=6 status=remote access error qp ok=yes
localinv: window untouched: yes
",
    ),
];

#[test]
fn memory_windows_from_c_with_reach_on_and_off() {
    let test = "memory_windows_from_c_with_reach_on_and_off";
    common::run_cases(test, "mw", CASES);
}
