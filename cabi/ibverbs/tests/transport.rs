//! tests/c/transport.c on the library: the transport's behaviour as a C program sees it —
//! ordering, the responder's refusals (a wrong or stale rkey, a missing access right), READ
//! and atomics, a PSN or path-MTU mistake, a peer killed mid-conversation, a responder in
//! ERR, a chain of large WRITEs — each case in a
//! process of its own, run with direct reach on and off, with the same lines expected both
//! ways, as rxe gives them (issue 29, Deliver 6: one test matrix, from C too).

mod common;

/// Each case and what it prints: every field of a successful completion, the defined ones
/// (wr_id, status, qp_num) of a failed one, and what the memory shows.
const CASES: &[(&str, &str)] = &[
    (
        "order",
        "\
order: receive: wr_id=77 status=success opcode=128 byte_len=8 qp ok=yes flags=0
order: write landed before the send: yes, send bytes: yes
order: write: wr_id=1 status=success opcode=1 byte_len=4096 qp ok=yes flags=0
order: send: wr_id=2 status=success opcode=0 byte_len=8 qp ok=yes flags=0
",
    ),
    (
        "own-rkey",
        "\
own-rkey: wr_id=3 status=remote access error qp ok=yes
own-rkey: peer memory untouched: yes
",
    ),
    (
        "stale",
        "\
stale: wr_id=4 status=remote access error qp ok=yes
stale: deregistered memory untouched: yes
",
    ),
    (
        "atomic",
        "\
atomic: wr_id=5 status=remote access error qp ok=yes
atomic: word unchanged: yes
",
    ),
    (
        "read",
        "\
read: wr_id=6 status=success opcode=2 byte_len=3000 qp ok=yes flags=0
read: bytes: right
cmp_swap: wr_id=7 status=success opcode=3 byte_len=8 qp ok=yes flags=0
cmp_swap: original 7, now 99
",
    ),
    ("psn", "psn: wr_id=8 status=transport retry counter exceeded qp ok=yes\n"),
    ("mtu", "mtu: wr_id=9 status=remote invalid request error qp ok=yes\n"),
    (
        "dead",
        "\
dead: before the kill: wr_id=10 status=success opcode=1 byte_len=64 qp ok=yes flags=0
dead: after the kill: wr_id=11 status=transport retry counter exceeded qp ok=yes
",
    ),
    (
        "err",
        "\
err: wr_id=12 status=transport retry counter exceeded qp ok=yes
err: responder memory untouched: yes
",
    ),
    (
        "list",
        "\
list: wr_id=20 status=success opcode=1 byte_len=524288 qp ok=yes flags=0
list: wr_id=21 status=success opcode=1 byte_len=524288 qp ok=yes flags=0
list: wr_id=22 status=success opcode=1 byte_len=524288 qp ok=yes flags=0
list: wr_id=23 status=success opcode=1 byte_len=524288 qp ok=yes flags=0
list: bytes: right
",
    ),
    (
        "atomic-write",
        "\
atomic-write: wr_id=30 status=success opcode=9 byte_len=8 qp ok=yes flags=0
atomic-write: bytes: right, around them untouched: yes
atomic-write: misaligned: wr_id=31 status=remote invalid request error qp ok=yes
atomic-write: misaligned word unchanged: yes
",
    ),
    (
        "flush",
        "\
flush: wr_id=41 status=success opcode=8 byte_len=4096 qp ok=yes flags=0
flush: the write's bytes: right
flush: device_cap_flags_ex: FLUSH_GLOBAL yes, FLUSH_PERSISTENT no, ATOMIC_WRITE yes
flush: a persistent MR: refused errno=22
flush: a global-visibility MR: registered
flush: a UD QP with FLUSH: refused errno=95
flush: persistent: wr_id=42 status=remote access error qp ok=yes
",
    ),
];

#[test]
fn the_transport_behaves_the_same_from_c_with_reach_on_and_off() {
    let test = "the_transport_behaves_the_same_from_c_with_reach_on_and_off";
    common::run_cases(test, "transport", CASES);
}
