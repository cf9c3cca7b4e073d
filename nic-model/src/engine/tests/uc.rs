//! Unreliable connected QPs: messages without ACKs, gaps that lose a message, and the regressions
//! the simulator's UC properties found.

use super::*;

#[test]
fn uc_send_and_write_complete_without_acks() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 4)).unwrap();
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 1024)] }]).unwrap();
    let now = p.now;
    let send = SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() };
    let write = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: 9,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 4096, rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[send, write]).unwrap();
    // The sender completes as soon as the packets are out.
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, WcOpcode::Send), (2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    p.b.post_recv(qb, &[RecvWr { wr_id: 2, sg_list: &[] }]).unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![
            Opcode::UC_SEND_FIRST,
            Opcode::UC_SEND_MIDDLE,
            Opcode::UC_SEND_LAST,
            Opcode::UC_RDMA_WRITE_FIRST,
            Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE
        ]
    );
    assert!(p.opcodes(Dir::BtoA).is_empty(), "UC sends no ACKs");
    assert_eq!(read_mem(&b, 0, 600), pattern(600, 4));
    assert_eq!(read_mem(&b, 4096, 300), pattern(300, 4));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.opcode, w.byte_len, w.src_qp)).collect::<Vec<_>>(),
        vec![(1, WcOpcode::Recv, 600, qa), (2, WcOpcode::RecvRdmaWithImm, 300, qa)]
    );
}

#[test]
fn uc_gap_loses_the_message_silently_and_the_next_one_arrives() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 1)).unwrap();
    a.mem.write(1000, b"second").unwrap();
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 1024)] }]).unwrap();
    p.filter =
        Box::new(
            |_, pkt, _| {
                if pkt.bth.opcode == Opcode::UC_SEND_MIDDLE {
                    Fate::Drop
                } else {
                    Fate::Deliver
                }
            },
        );
    let now = p.now;
    p.a.post_send(
        now,
        qa,
        &[
            SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() },
            SendWr { wr_id: 2, sg_list: &[sge(&a, 1000, 6)], ..Default::default() },
        ],
    )
    .unwrap();
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB).len(), 4, "nothing is retransmitted");
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(wc.len(), 1, "the first message was lost");
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 6), "its receive WQE took the next message");
    assert_eq!(read_mem(&b, 0, 6), b"second");
    assert_eq!(p.b.stats().dropped_messages, 1);
}

// ---------------- regressions the simulator's UC properties found ----------------

/// Regression (found by the simulator's UC property suite): a UC packet the network duplicated
/// was taken for a new message, so the message was delivered twice. A PSN behind the expected
/// one is dropped.
#[test]
fn uc_duplicated_packets_are_delivered_once() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 7)).unwrap();
    for id in 1..=3 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 1024)] }]).unwrap();
    }
    p.filter = Box::new(|_, _, _| Fate::Duplicate);
    let now = p.now;
    let wrs = [
        SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 3)], ..Default::default() },
        SendWr { wr_id: 2, sg_list: &[sge(&a, 0, 600)], ..Default::default() },
    ];
    p.a.post_send(now, qa, &wrs).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 3), (2, WcStatus::Success, 600)],
        "each message once"
    );
    assert_eq!(read_mem(&b, 2048, 600), pattern(600, 7));
    assert_eq!(p.b.stats().rx_duplicates, 4, "the copy of every packet was dropped");
}

/// Regression (same origin): a UC message's packet that arrives after a later message has
/// started is a straggler; it is dropped rather than delivered out of order (or taken as a gap
/// that loses the later message).
#[test]
fn uc_late_packet_of_an_earlier_message_is_dropped() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, b"firstsecond").unwrap();
    for id in 1..=2 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 64)] }]).unwrap();
    }
    // The first message (its one packet) is overtaken by the second.
    p.filter = Box::new(|_, _, i| if i == 0 { Fate::Delay(10_000) } else { Fate::Deliver });
    let now = p.now;
    let wrs = [
        SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 5)], ..Default::default() },
        SendWr { wr_id: 2, sg_list: &[sge(&a, 5, 6)], ..Default::default() },
    ];
    p.a.post_send(now, qa, &wrs).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 6)],
        "the second message only, in the first receive"
    );
    assert_eq!(read_mem(&b, 1024, 6), b"second");
    assert_eq!(p.b.stats().rx_duplicates, 1);
}
