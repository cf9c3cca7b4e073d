//! Shared receive queues: a QP that takes its receives from an SRQ, and the PD they must share.

use super::*;

#[test]
fn uc_qp_takes_its_receives_from_an_srq() {
    let (mut p, a, b, qa, qb, srq) = uc_pair_with(true);
    let srq = srq.expect("B's QP has an SRQ");
    let e = p.b.post_recv(qb, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap_err();
    assert!(e.message.contains("use ibv_post_srq_recv"), "{}", e.message);
    p.b.post_srq_recv(
        srq,
        &[
            RecvWr { wr_id: 11, sg_list: &[sge(&b, 0, 1024)] },
            RecvWr { wr_id: 12, sg_list: &[sge(&b, 1024, 1024)] },
            RecvWr { wr_id: 13, sg_list: &[sge(&b, 2048, 1024)] },
        ],
    )
    .unwrap();
    p.b.modify_srq(srq, None, Some(2)).unwrap();
    a.mem.write(0, &pattern(600, 7)).unwrap();
    a.mem.write(1000, b"after the gap").unwrap();
    // The first SEND (3 packets at MTU 256) loses its middle packet: the message is lost and
    // the SRQ WQE it had started to fill goes back to the head of the SRQ.
    p.filter = Box::new(|_, pkt, _| match pkt.bth.opcode {
        Opcode::UC_SEND_MIDDLE => Fate::Drop,
        _ => Fate::Deliver,
    });
    let now = p.now;
    let lost = SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() };
    let send = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 1000, 13)],
        opcode: WrOpcode::SendWithImm,
        imm_data: 0x51,
        ..Default::default()
    };
    let write = SendWr {
        wr_id: 3,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: 0x52,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 8192, rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[lost, send, write]).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    let recv = |wr_id, opcode, byte_len, imm_data| WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        imm_data,
        qp_num: qb,
        src_qp: qa,
        wc_flags: WcFlags::WITH_IMM,
        slid: 0,
        ..Default::default()
    };
    assert_eq!(
        wc,
        vec![recv(11, WcOpcode::Recv, 13, 0x51), recv(12, WcOpcode::RecvRdmaWithImm, 300, 0x52)]
    );
    assert_eq!(read_mem(&b, 0, 13), b"after the gap");
    assert_eq!(read_mem(&b, 8192, 300), pattern(300, 7));
    assert_eq!(p.b.stats().dropped_messages, 1);
    // Two of three WQEs consumed: one is left, below the limit of 2.
    assert_eq!(
        p.b.poll_event(),
        Some(NicEvent::Async(AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(srq as u64)
        }))
    );
    assert_eq!(p.b.query_srq(srq).unwrap(), (8, 2, 0), "the limit disarmed after firing");
    assert_eq!(p.b.destroy_srq(srq).unwrap_err().errno, Errno::Busy);
    p.b.destroy_qp(qb).unwrap();
    p.b.destroy_qp(b.qpn).unwrap();
    p.b.dereg_mr(b.key).unwrap();
    let e = p.b.dealloc_pd(b.pd).unwrap_err();
    assert_eq!(e.errno, Errno::Busy, "the SRQ is still in the PD");
    assert!(e.message.contains("1 SRQs"), "{}", e.message);
    p.b.destroy_srq(srq).unwrap();
    p.b.dealloc_pd(b.pd).unwrap();
}

#[test]
fn srq_and_qp_must_share_a_pd() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let other_pd = p.a.alloc_pd().unwrap();
    let srq = p.a.create_srq(other_pd, 4, 1, 0).unwrap();
    let e = p.a.attach_srq(a.qpn, srq).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("must be the same"), "{}", e.message);
}
