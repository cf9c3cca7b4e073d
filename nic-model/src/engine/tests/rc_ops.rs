//! RC operations end to end: SEND, RDMA WRITE and READ, atomics, inline data, signaling,
//! segmentation at the path MTU and the send window.

use super::*;

#[test]
fn send_gathers_segments_and_scatters() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(1000, 1);
    a.mem.write(0, &data[..300]).unwrap();
    a.mem.write(4096, &data[300..]).unwrap();
    // Receive into two SGEs: 100 bytes, then the rest.
    let rsg = [sge(&b, 8192, 100), sge(&b, 16384, 2000)];
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 77, sg_list: &rsg }]).unwrap();
    let ssg = [sge(&a, 0, 300), sge(&a, 4096, 700)];
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 5,
            sg_list: &ssg,
            opcode: WrOpcode::Send,
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // 1000 bytes at MTU 256: FIRST, MIDDLE, MIDDLE, LAST, with PSNs across the 24-bit wrap.
    let sent: Vec<_> =
        p.log.iter().filter(|s| s.dir == Dir::AtoB).map(|s| (s.opcode, s.psn)).collect();
    assert_eq!(
        sent,
        vec![
            (Opcode::RC_SEND_FIRST, 0xFFFFF0),
            (Opcode::RC_SEND_MIDDLE, 0xFFFFF1),
            (Opcode::RC_SEND_MIDDLE, 0xFFFFF2),
            (Opcode::RC_SEND_LAST, 0xFFFFF3)
        ]
    );
    assert_eq!(p.opcodes(Dir::BtoA), vec![Opcode::RC_ACKNOWLEDGE]);
    let mut got = read_mem(&b, 8192, 100);
    got.extend(read_mem(&b, 16384, 900));
    assert_eq!(got, data);
    assert_eq!(read_mem(&b, 16384 + 900, 8), vec![0; 8], "nothing beyond the message");
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        rwc,
        vec![WorkCompletion {
            wr_id: 77,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 1000,
            qp_num: b.qpn,
            src_qp: a.qpn,
            slid: 0,
            ..Default::default()
        }]
    );
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        swc,
        vec![WorkCompletion {
            wr_id: 5,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 1000,
            qp_num: a.qpn,
            ..Default::default()
        }]
    );
}

#[test]
fn send_with_imm_and_solicited_event() {
    let (mut p, a, b) = setup(ConnOpts::default());
    a.mem.write(0, b"ping").unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, true).unwrap();
    let wr = SendWr {
        wr_id: 9,
        sg_list: &[sge(&a, 0, 4)],
        opcode: WrOpcode::SendWithImm,
        send_flags: signaled() | SendFlags::SOLICITED,
        imm_data: 0xdeadbeef,
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_SEND_ONLY_WITH_IMMEDIATE]);
    assert_eq!(p.b.poll_event(), Some(NicEvent::CqNotify(b.cq)), "solicited event fired");
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].imm_data, 0xdeadbeef);
    assert_eq!(wc[0].wc_flags, WcFlags::WITH_IMM);
    assert_eq!(wc[0].byte_len, 4);
    assert_eq!(read_mem(&b, 0, 4), b"ping");
}

#[test]
fn unsolicited_send_does_not_fire_a_solicited_only_arm() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, true).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 4)], ..Default::default() });
    p.drive();
    assert_eq!(p.b.poll_event(), None);
    assert_eq!(poll_all(&mut p.b, b.cq).len(), 1);
    // Arming for the next completion fires on any completion.
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, false).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 2, sg_list: &[sge(&a, 0, 4)], ..Default::default() });
    p.drive();
    assert_eq!(p.b.poll_event(), Some(NicEvent::CqNotify(b.cq)));
}

#[test]
fn rdma_write_lands_without_a_receive() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(600, 3);
    a.mem.write(100, &data).unwrap();
    let wr = SendWr {
        wr_id: 3,
        sg_list: &[sge(&a, 100, 600)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 1000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST]
    );
    assert_eq!(read_mem(&b, 1000, 600), data);
    assert_eq!(read_mem(&b, 999, 1), vec![0]);
    assert_eq!(read_mem(&b, 1600, 1), vec![0]);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "a plain WRITE completes nothing at the target");
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaWrite, 600)
    );
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let (mut p, a, b) = setup(ConnOpts::default());
    a.mem.write(0, &pattern(300, 9)).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 44, sg_list: &[] }]).unwrap();
    let wr = SendWr {
        wr_id: 4,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        send_flags: signaled(),
        imm_data: 0x1234,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 512, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE]
    );
    assert_eq!(read_mem(&b, 512, 300), pattern(300, 9));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc,
        vec![WorkCompletion {
            wr_id: 44,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 300,
            imm_data: 0x1234,
            wc_flags: WcFlags::WITH_IMM,
            qp_num: b.qpn,
            src_qp: a.qpn,
            slid: 0,
            ..Default::default()
        }]
    );
}

#[test]
fn rdma_read_multi_packet() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(700, 5);
    b.mem.write(2000, &data).unwrap();
    let wr = SendWr {
        wr_id: 6,
        sg_list: &[sge(&a, 0, 200), sge(&a, 1000, 500)],
        opcode: WrOpcode::RdmaRead,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 2000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_RDMA_READ_REQUEST]);
    assert_eq!(
        p.opcodes(Dir::BtoA),
        vec![
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST
        ]
    );
    let mut got = read_mem(&a, 0, 200);
    got.extend(read_mem(&a, 1000, 500));
    assert_eq!(got, data);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (6, WcStatus::Success, WcOpcode::RdmaRead, 700)
    );
    // The next request uses the PSN after the three the READ reserved.
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        },
    );
    p.drive();
    let last = p.log.iter().rev().find(|s| s.dir == Dir::AtoB).unwrap();
    assert_eq!(last.psn, 0xFFFFF3);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(64, &10u64.to_ne_bytes()).unwrap();
    let cas = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicCmpAndSwp,
        send_flags: signaled(),
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 64,
            rkey: b.key,
            compare_add: 10,
            swap: 99,
        },
        ..Default::default()
    };
    let fadd = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 8, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: signaled(),
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 64,
            rkey: b.key,
            compare_add: 5,
            swap: 0,
        },
        ..Default::default()
    };
    let failed_cas = SendWr { wr_id: 3, sg_list: &[sge(&a, 16, 8)], ..cas.clone() };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[cas, fadd, failed_cas]).unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_COMPARE_SWAP, Opcode::RC_FETCH_ADD, Opcode::RC_COMPARE_SWAP]
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 0, 8).try_into().unwrap()),
        10,
        "CAS returns the original"
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 8, 8).try_into().unwrap()),
        99,
        "fetch-add returns the value before the add"
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 16, 8).try_into().unwrap()),
        104,
        "a failed CAS returns the current value"
    );
    assert_eq!(u64::from_ne_bytes(read_mem(&b, 64, 8).try_into().unwrap()), 104);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::CompSwap, 8),
            (2, WcStatus::Success, WcOpcode::FetchAdd, 8),
            (3, WcStatus::Success, WcOpcode::CompSwap, 8)
        ]
    );
}

#[test]
fn inline_send_copies_at_post_time() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let data = *b"inline!";
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            inline_data: Some(&data),
            send_flags: SendFlags::INLINE | signaled(),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(read_mem(&b, 0, 7), b"inline!");
    // Inline from SGEs: the bytes are taken at post time, so a later change is not sent.
    a.mem.write(0, b"before").unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 100, 64)] }]).unwrap();
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr {
            wr_id: 2,
            sg_list: &[sge(&a, 0, 6)],
            send_flags: SendFlags::INLINE,
            ..Default::default()
        }],
    )
    .unwrap();
    a.mem.write(0, b"after!").unwrap();
    p.drive();
    assert_eq!(read_mem(&b, 100, 6), b"before");
    // Too much inline data is refused at post time.
    let big = [0u8; 65];
    let err =
        p.a.post_send(
            now,
            a.qpn,
            &[SendWr {
                inline_data: Some(&big),
                send_flags: SendFlags::INLINE,
                ..Default::default()
            }],
        )
        .unwrap_err();
    assert_eq!(err.errno, Errno::Inval);
    assert!(err.message.contains("max_inline_data 64"), "{}", err.message);
}

#[test]
fn unsignaled_wrs_complete_silently_in_order() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let w = |id, flags| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaWrite,
        send_flags: flags,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[w(1, SendFlags::empty()), w(2, signaled()), w(3, SendFlags::empty()), w(4, signaled())],
    )
    .unwrap();
    p.drive();
    let ids: Vec<u64> = poll_all(&mut p.a, a.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![2, 4]);
    let _ = b;
}

#[test]
fn sq_sig_all_signals_everything() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (qa, _) = p.a.create_qp(a.pd, QpType::Rc, a.cq, a.cq, cap, true).unwrap();
    connect(&mut p.a, qa, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, qa, ConnOpts::default());
    let now = p.now;
    let wr = SendWr {
        wr_id: 8,
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[wr]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq).iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![8]);
}

#[test]
fn mtu_4096_segments_a_large_write() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu4096, ..Default::default() });
    let data = pattern(10000, 2);
    a.mem.write(0, &data).unwrap();
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 10000)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 20000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB).len(), 3);
    assert_eq!(read_mem(&b, 20000, 10000), data);
}

/// Regression (found by the simulator's bounded RC suite with a 1-packet window): a window
/// narrower than `ack_every` stalled with no ACK asked for, so every window's worth of packets
/// waited for the local ACK timeout and was sent again. The packet that fills the window asks.
#[test]
fn a_window_narrower_than_ack_every_asks_for_an_ack_when_it_fills() {
    let mut p = Pair::new();
    p.a = Nic::new(NicConfig { window: 4, ..NicConfig::new("a", 1) });
    let (mut p, a, b) = setup_on(p, ConnOpts::default());
    let data = pattern(2000, 6);
    a.mem.write(0, &data).unwrap();
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 2000)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 100, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    let asks: Vec<bool> = p.log.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.ack_req).collect();
    assert_eq!(asks, [false, false, false, true, false, false, false, true], "8 packets, window 4");
    assert_eq!((p.a.stats().timeouts, p.a.stats().retransmits), (0, 0));
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(read_mem(&b, 100, 2000), data);
}

#[test]
fn inline_sends_of_every_size_arrive_whole() {
    let mut p = Pair::new();
    let a = side_with_inline(&mut p.a, ALL, 200);
    let b = side_with_inline(&mut p.b, ALL, 200);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let sizes = [8, qp::INLINE_IN_WQE, qp::INLINE_IN_WQE + 1, 200];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u8);
        let at = 1000 * i;
        // From `inline_data`, and gathered from two SGEs; both copied at post time.
        a.mem.write(at, &data).unwrap();
        let half = (len / 2) as u32;
        let sges =
            [sge(&a, at as u64, half), sge(&a, (at as u64) + u64::from(half), len as u32 - half)];
        let rsge = |off: u64| [sge(&b, off, 256)];
        p.b.post_recv(
            b.qpn,
            &[RecvWr { wr_id: 2 * i as u64, sg_list: &rsge(20_000 + 512 * 2 * i as u64) }],
        )
        .unwrap();
        p.b.post_recv(
            b.qpn,
            &[RecvWr {
                wr_id: 2 * i as u64 + 1,
                sg_list: &rsge(20_000 + 512 * (2 * i as u64 + 1)),
            }],
        )
        .unwrap();
        let wrs = [
            SendWr {
                wr_id: 2 * i as u64,
                inline_data: Some(&data),
                send_flags: SendFlags::INLINE | signaled(),
                ..Default::default()
            },
            SendWr {
                wr_id: 2 * i as u64 + 1,
                sg_list: &sges,
                send_flags: SendFlags::INLINE | signaled(),
                ..Default::default()
            },
        ];
        p.a.post_send(p.now, a.qpn, &wrs).unwrap();
        a.mem.write(at, &vec![0xEE; len]).unwrap();
        p.drive();
        let sent = poll_all(&mut p.a, a.cq);
        let received = poll_all(&mut p.b, b.cq);
        for k in 0..2u64 {
            let wr_id = 2 * i as u64 + k;
            let s = sent.iter().find(|w| w.wr_id == wr_id).expect("send completion");
            assert_eq!(
                (s.status, s.opcode, s.byte_len),
                (WcStatus::Success, WcOpcode::Send, len as u32)
            );
            let r = received.iter().find(|w| w.wr_id == wr_id).expect("receive completion");
            assert_eq!(
                (r.status, r.opcode, r.byte_len),
                (WcStatus::Success, WcOpcode::Recv, len as u32)
            );
            assert_eq!(r.qp_num, b.qpn);
            assert_eq!(
                read_mem(&b, 20_000 + 512 * wr_id as usize, len),
                data,
                "{len} bytes, wr {wr_id}"
            );
        }
    }
    // More than max_inline_data is refused at post time, whichever way it is given.
    let big = vec![1u8; 201];
    a.mem.write(0, &big).unwrap();
    let too_long = [
        SendWr { inline_data: Some(&big), send_flags: SendFlags::INLINE, ..Default::default() },
        SendWr { sg_list: &[sge(&a, 0, 201)], send_flags: SendFlags::INLINE, ..Default::default() },
    ];
    for wr in too_long {
        let err = p.a.post_send(p.now, a.qpn, &[wr]).unwrap_err();
        assert_eq!(err.errno, Errno::Inval);
        assert!(
            err.message.contains("201 bytes of inline data exceed max_inline_data 200"),
            "{}",
            err.message
        );
    }
}

#[test]
fn a_connected_qp_ignores_wr_ud() {
    // libibverbs reads wr.ud only on UD QPs; on RC it is ignored and the SEND takes the
    // connection (it used to be routed by the address handle and emitted with a DETH).
    let (mut p, a, b) = setup(ConnOpts::default());
    let elsewhere = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(roce_av(7))));
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 5, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    a.mem.write(0, b"connected").unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 9,
            sg_list: &[sge(&a, 0, 9)],
            send_flags: signaled(),
            ud: Some(UdTarget { ah: elsewhere, remote_qpn: 0x99, remote_qkey: 1 }),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_SEND_ONLY]);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!((sent.len(), sent[0].wr_id, sent[0].status), (1, 9, WcStatus::Success));
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!((received.len(), received[0].wr_id, received[0].byte_len), (1, 5, 9));
    assert_eq!(read_mem(&b, 0, 9), b"connected");
}

#[test]
fn max_inline_data_is_rounded_up_to_the_gather_lists_room_as_rxe_does() {
    // rxe sizes a send WQE for max(max_send_sge * 16, max_inline_data) bytes and grants that
    // as max_inline_data, within the device's limit (256).
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    for (sge, inline, granted) in [(1, 0, 16), (4, 0, 64), (2, 100, 100), (32, 0, 256), (0, 0, 16)]
    {
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: sge,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let (_, got) = p.a.create_qp(a.pd, QpType::Rc, a.cq, a.cq, cap, false).unwrap();
        assert_eq!(got.max_inline_data, granted, "max_send_sge {sge}, max_inline_data {inline}");
    }
}
