//! Packets from somewhere other than a connected QP's path: a stale connection's retransmission
//! (a process that died, a QP that was destroyed) or a stray sender that reaches an RC or UC QP
//! is dropped and counted before it touches the QP, as rxe's `check_addr` drops it, and the
//! QP's real peer goes on as if it had never come.

use super::*;

/// A third NIC at [`STRANGER_LID`] with a QP of `qp_type` connected to `dqpn` on LID 2 with
/// the first PSNs B's QP uses (the pair's for RC, `uc_pair`'s for UC): what a stale connection
/// to B looks like from B's side.
fn stranger(qp_type: QpType, dqpn: u32) -> (Nic, Side, u32) {
    let mut nic = Nic::new(NicConfig::new("c", STRANGER_LID));
    let c = side(&mut nic, ALL);
    if qp_type == QpType::Rc {
        connect(&mut nic, c.qpn, 2, dqpn, ConnOpts::default());
        let qpn = c.qpn;
        return (nic, c, qpn);
    }
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpn = nic.create_qp(c.pd, qp_type, c.cq, c.cq, cap, true).unwrap().0;
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
    nic.modify_qp(0, qpn, &init, m).unwrap();
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: roce_av(2),
        path_mtu: Mtu::Mtu256,
        dest_qp_num: dqpn,
        rq_psn: 5,
        ..Default::default()
    };
    nic.modify_qp(0, qpn, &rtr, m).unwrap();
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 5, ..Default::default() };
    nic.modify_qp(0, qpn, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap();
    (nic, c, qpn)
}

/// Posts a signaled SEND of `data` on `qpn` of `nic` and returns the datagrams it makes.
fn send_from(nic: &mut Nic, s: &Side, qpn: u32, data: &[u8]) -> Vec<Vec<u8>> {
    s.mem.write(0, data).unwrap();
    let sg = [sge(s, 0, data.len() as u32)];
    let wr = SendWr { wr_id: 0x57a1e, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    nic.post_send(0, qpn, &[wr]).unwrap();
    std::iter::from_fn(|| nic.poll_transmit()).map(|t| t.data).collect()
}

/// B's receive completion for a message from A's `src_qp`, as it must be to the last field.
fn recv_wc(
    wr_id: u64,
    qp_num: u32,
    src_qp: u32,
    byte_len: u32,
    imm: Option<u32>,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len,
        imm_data: imm.unwrap_or(0),
        qp_num,
        src_qp,
        wc_flags: if imm.is_some() { WcFlags::WITH_IMM } else { WcFlags::empty() },
        slid: 0,
        ..WorkCompletion::default()
    }
}

/// The case of issue 17: an RC SEND from a third port, with the QP number and the very PSN
/// that B's QP expects next from A (a stale connection's retransmission), reaches B. Before the
/// check, B took it as A's: it filled the first receive, and A's real first SEND, with that
/// PSN, was then dropped as a duplicate. Now B drops it, counts it, sends nothing back, and
/// A's SEND lands in the first receive with every completion field right.
#[test]
fn an_rc_send_from_a_third_port_is_dropped_and_the_peers_send_lands() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for id in 0..2 {
        let wr = RecvWr { wr_id: 100 + id, sg_list: &[sge(&b, 1024 * id, 1024)] };
        p.b.post_recv(b.qpn, &[wr]).unwrap();
    }
    let rq_psn = p.b.query_qp(b.qpn).unwrap().0.rq_psn;
    let (mut c_nic, c, c_qpn) = stranger(QpType::Rc, b.qpn);
    // One packet, a SEND ONLY in sequence for a QP with a receive posted: the responder's
    // fast path would take it.
    let stale = send_from(&mut c_nic, &c, c_qpn, b"a stale retransmission");
    assert_eq!(stale.len(), 1);
    let now = p.now;
    p.b.handle_packet(now, &stale[0]);
    assert_eq!(p.b.stats().rx_wrong_source, 1, "{:?}", p.b.stats());
    assert_eq!(p.b.stats().rx_duplicates, 0);
    assert!(p.b.poll_transmit().is_none(), "B answered a stranger");
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "a stranger's SEND completed a receive");
    assert_eq!(p.b.query_qp(b.qpn).unwrap().0.rq_psn, rq_psn, "the stranger moved B's PSN");

    let msg = pattern(200, 9);
    a.mem.write(0, &msg).unwrap();
    let sg = [sge(&a, 0, 200)];
    let wr = SendWr {
        wr_id: 7,
        sg_list: &sg,
        opcode: WrOpcode::SendWithImm,
        imm_data: 0xfeed_0001,
        send_flags: signaled(),
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(poll_all(&mut p.b, b.cq), [recv_wc(100, b.qpn, a.qpn, 200, Some(0xfeed_0001))]);
    assert_eq!(read_mem(&b, 0, 200), msg);
    let wa = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wa,
        [WorkCompletion {
            wr_id: 7,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 200,
            qp_num: a.qpn,
            ..WorkCompletion::default()
        }]
    );
    assert_eq!(p.b.stats().rx_duplicates, 0, "A's SEND was taken for a duplicate");
}

/// A stale message of several packets takes the general path: each of its packets is dropped
/// and counted alike, and A's message of several packets lands after it.
#[test]
fn a_multi_packet_rc_send_from_a_third_port_is_dropped_packet_by_packet() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    let (mut c_nic, c, c_qpn) = stranger(QpType::Rc, b.qpn);
    let stale = send_from(&mut c_nic, &c, c_qpn, &[0xee; 700]);
    assert_eq!(stale.len(), 3, "700 bytes at MTU 256");
    let now = p.now;
    for d in &stale {
        p.b.handle_packet(now, d);
    }
    assert_eq!(p.b.stats().rx_wrong_source, 3);
    assert!(p.b.poll_transmit().is_none(), "B answered a stranger");
    let msg = pattern(600, 3);
    a.mem.write(0, &msg).unwrap();
    let sg = [sge(&a, 0, 600)];
    post_send(
        &mut p,
        &a,
        SendWr { wr_id: 2, sg_list: &sg, send_flags: signaled(), ..Default::default() },
    );
    p.drive();
    assert_eq!(poll_all(&mut p.b, b.cq), [recv_wc(1, b.qpn, a.qpn, 600, None)]);
    assert_eq!(read_mem(&b, 0, 600), msg);
    assert_eq!(
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Success)]
    );
}

/// The completer's side: an ACK from a third port that covers A's outstanding SEND retires
/// nothing (the completer's fast path would take it); the real ACK then completes the SEND.
#[test]
fn an_ack_from_a_third_port_retires_nothing() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    a.mem.write(0, b"ping").unwrap();
    let sg = [sge(&a, 0, 4)];
    post_send(
        &mut p,
        &a,
        SendWr { wr_id: 5, sg_list: &sg, send_flags: signaled(), ..Default::default() },
    );
    let now = p.now;
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| p.a.poll_transmit()).map(|t| t.data).collect();
    for d in &sent {
        p.b.handle_packet(now, d);
    }
    let acks: Vec<Vec<u8>> = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| t.data).collect();
    assert_eq!(acks.len(), 1);
    assert_eq!(packet::opcode_of(&acks[0]), Some(Opcode::RC_ACKNOWLEDGE));
    p.a.handle_packet(now, &from_stranger(&acks[0]));
    assert_eq!(p.a.stats().rx_wrong_source, 1);
    assert!(poll_all(&mut p.a, a.cq).is_empty(), "a stranger's ACK completed a SEND");
    p.a.handle_packet(now, &acks[0]);
    let wa = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(5, WcStatus::Success)]
    );
    assert_eq!(poll_all(&mut p.b, b.cq), [recv_wc(1, b.qpn, a.qpn, 4, None)]);
}

/// UC has no ACKs to give a stranger away, and its responder takes any PSN as a new message:
/// a stranger's SEND would fill the receive that A's SEND is meant for. It is dropped and
/// counted, and A's SEND lands.
#[test]
fn a_uc_send_from_a_third_port_is_dropped_and_the_peers_send_lands() {
    let (mut p, a, b, qa, qb) = uc_pair();
    p.b.post_recv(qb, &[RecvWr { wr_id: 40, sg_list: &[sge(&b, 0, 256)] }]).unwrap();
    let (mut c_nic, c, c_qpn) = stranger(QpType::Uc, qb);
    let stale = send_from(&mut c_nic, &c, c_qpn, b"not for you");
    let now = p.now;
    for d in &stale {
        p.b.handle_packet(now, d);
    }
    assert_eq!(p.b.stats().rx_wrong_source, stale.len() as u64);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "a stranger's UC SEND completed a receive");
    let msg = pattern(100, 1);
    a.mem.write(0, &msg).unwrap();
    let sg = [sge(&a, 0, 100)];
    let now = p.now;
    p.a.post_send(
        now,
        qa,
        &[SendWr { wr_id: 8, sg_list: &sg, send_flags: signaled(), ..Default::default() }],
    )
    .unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.b, b.cq), [recv_wc(40, qb, qa, 100, None)]);
    assert_eq!(read_mem(&b, 0, 100), msg);
}

// ---------------- QP numbers hard to alias ----------------

/// A NIC with one PD and CQ, and the numbers of `n` RC QPs created on it.
fn qpns(nic: &mut Nic, n: usize) -> Vec<u32> {
    let s = side(nic, ALL);
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let mut out = vec![s.qpn];
    for _ in 1..n {
        out.push(nic.create_qp(s.pd, QpType::Rc, s.cq, s.cq, cap, false).unwrap().0);
    }
    out
}

/// A NIC made in place of another at the same address (a process that restarted) numbers its
/// QPs from where its own randomness says, not from a fixed number as every process did (0x11):
/// so the first QP of each is another, and a stale packet for the old one finds no QP. The same
/// randomness gives the same numbers (the simulator's determinism).
#[test]
fn qp_numbers_start_where_the_nics_randomness_says() {
    let at = |entropy: u64| Nic::new(NicConfig { entropy, ..NicConfig::new("b", 2) });
    let old = qpns(&mut at(0x0123_4567_89ab_cdef), 3);
    let new = qpns(&mut at(0xfedc_ba98_7654_3210), 3);
    assert_ne!(old[0], new[0], "a restarted NIC gave its first QP its predecessor's number");
    assert_eq!(old, qpns(&mut at(0x0123_4567_89ab_cdef), 3));
    for q in old.iter().chain(&new) {
        assert!((2..0x00FF_FFFF).contains(q), "QPN {q:#x}: 24 bits, not 0, 1 or multicast");
    }
    assert_eq!((old[1], old[2]), (old[0] + 1, old[0] + 2));
    // Two NICs of one fabric made with `NicConfig::new` differ too.
    assert_ne!(qpns(&mut Nic::new(NicConfig::new("a", 1)), 1), qpns(&mut at(2 + 2), 1));
}

/// The sequence wraps from the highest number a QP gets (0xFFFFFE: 0xFFFFFF is the multicast
/// QPN) to 2 (0 and 1 are the special QPs), and skips numbers still in use.
#[test]
fn qp_numbers_wrap_within_24_bits_and_are_never_given_twice() {
    // 0xFFFFFC past the lowest number 2: the first QP gets the highest number.
    let mut nic = Nic::new(NicConfig { entropy: 0x00FF_FFFC, ..NicConfig::new("b", 2) });
    assert_eq!(qpns(&mut nic, 3), [0x00FF_FFFE, 2, 3]);
    // Were the sequence to come round again to numbers in use, it steps over them.
    nic.hca.next_qpn = 2;
    let s = side(&mut nic, ALL);
    assert_eq!(s.qpn, 4);
    nic.hca.next_qpn = 0x00FF_FFFE;
    let s = side(&mut nic, ALL);
    assert_eq!(s.qpn, 5);
}

/// A port that shares its network interface address with other processes holds a block of QP
/// numbers (`NicConfig::qpn_block`): every QP it makes is in the block, from where its
/// randomness says, wrapping within the block, so that two processes on one address never
/// give one number.
#[test]
fn qp_numbers_stay_in_the_port_s_block() {
    let mut nic =
        Nic::new(NicConfig { entropy: 0xFFFE, qpn_block: Some(7), ..NicConfig::new("b", 2) });
    assert_eq!(qpns(&mut nic, 3), [0x07_FFFE, 0x07_FFFF, 0x07_0000]);
    let mut other =
        Nic::new(NicConfig { entropy: 0xFFFE, qpn_block: Some(8), ..NicConfig::new("b", 2) });
    assert_eq!(qpns(&mut other, 2), [0x08_FFFE, 0x08_FFFF]);
}
