//! ATOMIC WRITE and FLUSH through loss: a lost answer brings the request again, which the
//! responder answers from its saved resource without executing it twice (IBA 1.5 oA19-14,
//! oA19-15; rxe's `replay`); a later ACK retires one whose answer was lost, as rxe's completer
//! retires a WRITE.

use super::*;
use verbs_api::{FlushLevel, FlushTarget, FlushType};

fn flush_opts() -> ConnOpts {
    ConnOpts {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC | AccessFlags::FLUSH_GLOBAL,
        ..Default::default()
    }
}

/// Drops the first RDMA READ RESPONSE ONLY from b, after running `then` once.
fn drop_first_answer(p: &mut Pair, then: impl FnOnce() + 'static) {
    let mut then = Some(then);
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY {
            if let Some(f) = then.take() {
                f();
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
}

#[test]
fn a_duplicate_atomic_write_is_answered_and_not_written_again() {
    let (mut p, a, b) = setup(flush_opts());
    // When the first answer is lost, b's program has already changed the word: the
    // retransmitted ATOMIC WRITE must leave its value.
    let mem = b.mem.clone();
    drop_first_answer(&mut p, move || mem.write(8, b"b's own!").unwrap());
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::AtomicWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 8, rkey: b.key },
        inline_data: Some(b"from a!!"),
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_ATOMIC_WRITE, Opcode::RC_ATOMIC_WRITE]);
    assert_eq!(
        p.opcodes(Dir::BtoA),
        vec![Opcode::RC_RDMA_READ_RESPONSE_ONLY, Opcode::RC_RDMA_READ_RESPONSE_ONLY]
    );
    assert_eq!(read_mem(&b, 8, 8), b"b's own!", "executed once");
    assert_eq!(p.b.stats().rx_duplicates, 1);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (1, WcStatus::Success, WcOpcode::AtomicWrite)
    );
    assert_eq!((wc[0].byte_len, wc[0].qp_num), (8, a.qpn));
}

#[test]
fn a_duplicate_flush_is_answered_again() {
    let (mut p, a, b) = setup(flush_opts());
    drop_first_answer(&mut p, || {});
    let wr = SendWr {
        wr_id: 2,
        opcode: WrOpcode::Flush,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        flush: FlushTarget { len: 4096, placement: FlushType::GLOBAL, level: FlushLevel::Range },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_FLUSH, Opcode::RC_FLUSH]);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (2, WcStatus::Success, WcOpcode::Flush));
    assert_eq!(wc[0].byte_len, 4096);
}

#[test]
fn an_ack_after_a_lost_answer_retires_the_atomic_write() {
    let (mut p, a, b) = setup(flush_opts());
    drop_first_answer(&mut p, || {});
    let aw = SendWr {
        wr_id: 3,
        opcode: WrOpcode::AtomicWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        inline_data: Some(b"12345678"),
        ..Default::default()
    };
    let write = SendWr {
        wr_id: 4,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 64, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, aw);
    post_send(&mut p, &a, write);
    p.drive();
    // The WRITE's ACK acknowledges the ATOMIC WRITE before it: nothing is sent again.
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_ATOMIC_WRITE, Opcode::RC_RDMA_WRITE_ONLY]);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (3, WcStatus::Success, WcOpcode::AtomicWrite),
            (4, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(read_mem(&b, 0, 8), b"12345678");
}
