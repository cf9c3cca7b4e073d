//! Errors: remote and local failures that complete WRs with an error status, and what posts refuse,
//! with the message that says why.

use super::*;

// ---------------- remote and local errors ----------------

#[test]
fn bad_rkey_is_rem_access_err_and_both_qps_error() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    let bad = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key ^ 0x100 },
        ..Default::default()
    };
    let next = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 8)],
        send_flags: signaled(),
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[bad, next]).unwrap();
    p.drive();
    assert!(
        p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x62)),
        "NAK remote access error"
    );
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err));
    assert_eq!(
        poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(9, WcStatus::WrFlushErr)]
    );
    // The responder's program hears of it by the IBA's affiliated event for an access
    // violation; the requester's by its completion alone.
    assert_eq!(async_events(&mut p.b), vec![(AsyncEventType::QpAccessErr, b.qpn)]);
    assert_eq!(async_events(&mut p.a), vec![]);
}

/// The async events a NIC raised since the last call, as (type, QP number).
fn async_events(nic: &mut Nic) -> Vec<(AsyncEventType, u32)> {
    std::iter::from_fn(|| nic.poll_event())
        .filter_map(|e| match e {
            NicEvent::Async(AsyncEvent { event_type, element: AsyncElement::Qp(q) }) => {
                Some((event_type, q))
            }
            _ => None,
        })
        .collect()
}

/// Any state goes to ERR (IBA 10.3.1; `ib_modify_qp_is_ok`, rxe): also ERR itself, as the CM
/// does at a disconnect when the transport already moved the QP there. Nothing is flushed twice;
/// IBV_QP_CUR_STATE is no attribute of a move to ERR, as in the kernel's table.
#[test]
fn a_qp_in_err_moves_to_err_again_without_a_second_flush() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    let bad = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key ^ 0x100 },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[bad]).unwrap();
    p.drive();
    // The transport moved both QPs to ERR and flushed B's receive.
    assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err));
    assert_eq!(
        poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(9, WcStatus::WrFlushErr)]
    );
    let err = QpAttr { qp_state: QpState::Err, ..Default::default() };
    for _ in 0..2 {
        p.b.modify_qp(now, b.qpn, &err, QpAttrMask::STATE).unwrap();
        assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err));
    }
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "a second move to ERR flushed again");
    // A receive posted in ERR is flushed at once, and the next move to ERR leaves it so.
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 10, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.modify_qp(now, b.qpn, &err, QpAttrMask::STATE).unwrap();
    assert_eq!(
        poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(10, WcStatus::WrFlushErr)]
    );
    // RESET -> ERR too.
    let reset = QpAttr { qp_state: QpState::Reset, ..Default::default() };
    p.b.modify_qp(now, b.qpn, &reset, QpAttrMask::STATE).unwrap();
    p.b.modify_qp(now, b.qpn, &err, QpAttrMask::STATE).unwrap();
    assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err));
    let cur = QpAttr { cur_qp_state: QpState::Err, ..err };
    let e = p.b.modify_qp(now, b.qpn, &cur, QpAttrMask::STATE | QpAttrMask::CUR_STATE).unwrap_err();
    assert!(e.message.contains("IBV_QP_CUR_STATE is not allowed in ERR -> ERR"), "{}", e.message);
}

#[test]
fn write_outside_mr_or_without_access_is_rem_access_err() {
    for (access, off) in [
        (AccessFlags::all(), MR_LEN as u64 - 4),
        (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ, 0),
    ] {
        let mut p = Pair::new();
        let a = side(&mut p.a, ALL);
        let b = side(&mut p.b, access);
        connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
        connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
        let now = p.now;
        let wr = SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr() + off, rkey: b.key },
            ..Default::default()
        };
        p.a.post_send(now, a.qpn, &[wr]).unwrap();
        p.drive();
        assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemAccessErr);
        assert_eq!(read_mem(&b, 0, 8), vec![0; 8]);
    }
}

#[test]
fn qp_access_flags_gate_remote_operations() {
    let (mut p, a, b) = setup(ConnOpts { access: AccessFlags::REMOTE_WRITE, ..Default::default() });
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn send_larger_than_receive_is_loc_len_err_and_rem_inv_req_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 100)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 100, 100)] }]).unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 200)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        rwc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(7, WcStatus::RemInvReqErr)]
    );
    assert_eq!(async_events(&mut p.b), vec![(AsyncEventType::QpReqErr, b.qpn)]);
    assert_eq!(async_events(&mut p.a), vec![]);
}

#[test]
fn receive_mr_deregistered_is_loc_prot_err_and_rem_op_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 100)] }]).unwrap();
    p.b.dereg_mr(b.key).unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 10)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(poll_all(&mut p.b, b.cq)[0].status, WcStatus::LocProtErr);
    assert!(
        p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x63)),
        "NAK remote operational error"
    );
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemOpErr);
}

#[test]
fn read_into_mr_without_local_write_is_loc_prot_err() {
    let mut p = Pair::new();
    let a = side(&mut p.a, AccessFlags::empty());
    let b = side(&mut p.b, ALL);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let after = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd, after]).unwrap();
    p.drive();
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn send_mr_deregistered_after_post_is_loc_prot_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    // Hold the first WR back with a full window of nothing: post two, deregister, then drive.
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Sqd, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            send_flags: signaled(),
            ..Default::default()
        }],
    )
    .unwrap();
    p.a.dereg_mr(a.key).unwrap();
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Rts, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocProtErr);
    let _ = b;
}

#[test]
fn message_over_max_msg_sz_is_loc_len_err() {
    let mut p = Pair::new();
    p.a = Nic::new(NicConfig {
        limits: Limits { max_msg_sz: 512, ..Limits::default() },
        ..NicConfig::new("a", 1)
    });
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 513)], ..Default::default() }],
    )
    .unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocLenErr);
    assert!(p.log.is_empty(), "nothing went on the wire");
}

#[test]
fn read_with_max_rd_atomic_zero_is_loc_qp_op_err() {
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 0, ..Default::default() });
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocQpOpErr);
}

#[test]
fn misaligned_atomic_is_refused_at_post() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 4,
            rkey: b.key,
            compare_add: 1,
            swap: 0,
        },
        ..Default::default()
    };
    let err = p.a.post_send(now, a.qpn, &[wr]).unwrap_err();
    assert!(err.message.contains("not 8-byte aligned"), "{}", err.message);
}

// ---------------- post-time errors ----------------

#[test]
fn post_time_errors_name_what_was_wrong() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    let cases: Vec<(SendWr<'static>, &str)> = vec![
        (
            SendWr {
                sg_list: Box::leak(Box::new([Sge {
                    addr: a.mem.addr(),
                    length: 8,
                    lkey: 0xdead00,
                }])),
                ..Default::default()
            },
            "names no registered MR",
        ),
        (
            SendWr {
                sg_list: Box::leak(Box::new([Sge {
                    addr: a.mem.addr() + MR_LEN as u64 - 4,
                    length: 8,
                    lkey: a.key,
                }])),
                ..Default::default()
            },
            "outside its MR",
        ),
        (
            SendWr { sg_list: Box::leak(Box::new([sge(&a, 0, 1); 5])), ..Default::default() },
            "exceed max_send_sge 4",
        ),
        (
            SendWr {
                opcode: WrOpcode::RdmaRead,
                send_flags: SendFlags::INLINE,
                ..Default::default()
            },
            "IBV_SEND_INLINE is not valid",
        ),
    ];
    for (wr, want) in cases {
        let err = p.a.post_send(now, a.qpn, &[wr]).unwrap_err();
        assert_eq!(err.errno, Errno::Inval);
        assert!(err.message.contains(want), "{} does not say {want}", err.message);
        assert!(err.message.contains("wr[0]"), "{}", err.message);
    }
    // Wrong state: a QP in INIT cannot send.
    let cq = p.a.create_cq(4).unwrap();
    let (q, _) = p.a.create_qp(a.pd, QpType::Rc, cq, cq, QpCap::default(), false).unwrap();
    let err = p.a.post_send(now, q, &[SendWr::default()]).unwrap_err();
    assert!(err.message.contains("is in RESET; ibv_post_send needs RTS"), "{}", err.message);
    let err = p.a.post_recv(q, &[RecvWr::default()]).unwrap_err();
    assert!(err.message.contains("RESET"), "{}", err.message);
    // Queue full.
    let wrs: Vec<_> = (0..65)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        })
        .collect();
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Sqd, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    let err = p.a.post_send(now, a.qpn, &wrs).unwrap_err();
    assert_eq!(err.errno, Errno::NoMem);
    assert!(err.message.contains("wr[64]"), "{}", err.message);
}

#[test]
fn uc_qp_refuses_read_at_post() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let (q, _) =
        p.a.create_qp(
            a.pd,
            QpType::Uc,
            a.cq,
            a.cq,
            QpCap { max_send_wr: 4, ..Default::default() },
            false,
        )
        .unwrap();
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    p.a.modify_qp(0, q, &QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() }, m)
        .unwrap();
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    p.a.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Rtr, ah_attr: roce_av(2), ..Default::default() },
        m,
    )
    .unwrap();
    p.a.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Rts, ..Default::default() },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
    .unwrap();
    let err =
        p.a.post_send(0, q, &[SendWr { opcode: WrOpcode::RdmaRead, ..Default::default() }])
            .unwrap_err();
    assert!(
        err.message.contains("IBV_WR_RDMA_READ is not valid on an IBV_QPT_UC QP"),
        "{}",
        err.message
    );
}

#[test]
fn cq_overrun_is_an_error_and_an_async_event() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let small = p.a.create_cq(2).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (q, _) = p.a.create_qp(a.pd, QpType::Rc, small, small, cap, true).unwrap();
    connect(&mut p.a, q, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, q, ConnOpts::default());
    let wrs: Vec<_> = (0..3)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        })
        .collect();
    let now = p.now;
    p.a.post_send(now, q, &wrs).unwrap();
    p.drive();
    let err = p.a.poll_cq(small, &mut [WorkCompletion::default(); 4]).unwrap_err();
    assert!(err.message.contains("overrun"), "{}", err.message);
    assert_eq!(
        p.a.poll_event(),
        Some(NicEvent::Async(AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(small as u64)
        }))
    );
}

#[test]
fn destroy_in_use_is_ebusy() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    assert_eq!(p.a.destroy_cq(a.cq).unwrap_err().errno, Errno::Busy);
    assert_eq!(p.a.dealloc_pd(a.pd).unwrap_err().errno, Errno::Busy);
    p.a.destroy_qp(a.qpn).unwrap();
    p.a.destroy_cq(a.cq).unwrap();
    assert_eq!(p.a.dealloc_pd(a.pd).unwrap_err().errno, Errno::Busy, "the MR is still registered");
    p.a.dereg_mr(a.key).unwrap();
    p.a.dealloc_pd(a.pd).unwrap();
}

#[test]
fn malformed_and_corrupted_packets_are_dropped() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() }],
    )
    .unwrap();
    let mut t = p.a.poll_transmit().unwrap();
    let n = t.data.len();
    t.data[n - 10] ^= 1; // a payload bit flip: the ICRC catches it
    p.b.handle_packet(now, &t.data);
    p.b.handle_packet(now, &t.data[..20]);
    p.b.handle_packet(now, &[]);
    assert_eq!(p.b.stats().rx_bad_icrc, 1);
    assert_eq!(p.b.stats().rx_malformed, 3);
    assert!(p.b.poll_transmit().is_none());
    assert!(poll_all(&mut p.b, b.cq).is_empty());
}

#[test]
fn a_receive_cq_overrun_moves_the_responder_to_err_without_an_ack_as_rxe() {
    // rxe's responder, finding the receive CQ full (RESPST_ERR_CQ_OVERFLOW, class G), moves
    // the QP to ERR and does not acknowledge; the requester retries into a QP that no longer
    // answers. The second SEND here finds b's one-entry CQ full.
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let small = p.b.create_cq(1).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (q, _) = p.b.create_qp(b.pd, QpType::Rc, small, small, cap, false).unwrap();
    connect(&mut p.a, a.qpn, 2, q, ConnOpts::default());
    connect(&mut p.b, q, 1, a.qpn, ConnOpts::default());
    for i in 0..3 {
        p.b.post_recv(q, &[RecvWr { wr_id: 10 + i, sg_list: &[sge(&b, 64 * i, 64)] }]).unwrap();
    }
    let send = |id| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::Send,
        send_flags: signaled(),
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[send(1)]).unwrap();
    p.drive();
    assert_eq!(p.opcodes(Dir::BtoA), vec![Opcode::RC_ACKNOWLEDGE], "the first SEND is acked");
    let now = p.now;
    p.a.post_send(now, a.qpn, &[send(2)]).unwrap();
    p.drive_until(now + 1_000_000);
    assert_eq!(p.b.qp_state(q), Some(QpState::Err), "the responder is in ERR");
    assert_eq!(p.opcodes(Dir::BtoA), vec![Opcode::RC_ACKNOWLEDGE], "no ACK for the second");
    let wcs = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    // The requester's retries find a QP that no longer answers.
    p.drive();
    let wcs = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::RetryExcErr)]
    );
}
