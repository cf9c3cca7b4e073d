//! Unreliable datagrams: DETH and the GRH area of a receive, and the GRH fields carried on the
//! wire.

use super::*;

#[test]
fn ud_datagrams_carry_deth_and_land_after_a_grh() {
    let (mut p, a, b, qa, qb) = ud_pair();
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(roce_av(2))));
    p.b.post_recv(
        qb,
        &[
            RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] },
            RecvWr { wr_id: 2, sg_list: &[sge(&b, 4096, 2048)] },
        ],
    )
    .unwrap();
    a.mem.write(0, b"datagram").unwrap();
    let wr = |id, qkey| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::SendWithImm,
        imm_data: 3,
        ud: Some(UdTarget { ah: ah.clone(), remote_qpn: qb, remote_qkey: qkey }),
        ..Default::default()
    };
    let sg = [sge(&a, 0, 8)];
    let now = p.now;
    p.a.post_send(
        now,
        qa,
        &[SendWr { sg_list: &sg, ..wr(1, 0x2222) }, SendWr { sg_list: &sg, ..wr(2, 0x9999) }],
    )
    .unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE]
    );
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc,
        vec![WorkCompletion {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 48,
            imm_data: 3,
            qp_num: qb,
            src_qp: qa,
            wc_flags: WcFlags::GRH | WcFlags::WITH_IMM,
            slid: 0,
            ..Default::default()
        }],
        "the datagram with the wrong Q_Key was dropped"
    );
    assert_eq!(read_mem(&b, 40, 8), b"datagram");
    let grh = read_mem(&b, 0, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20] >> 4, 4, "an IPv4 header follows");
    assert_eq!(&grh[32..40], &[10, 0, 0, 1, 10, 0, 0, 2], "source and destination addresses");
    assert_eq!(p.b.stats().dropped_messages, 1);
    // Larger than the MTU is refused at post time.
    let big = [sge(&a, 0, 5000)];
    let err = p.a.post_send(now, qa, &[SendWr { sg_list: &big, ..wr(3, 0x2222) }]).unwrap_err();
    assert!(err.message.contains("exceeds the path MTU"), "{}", err.message);
    // Without an address handle is refused too.
    let err = p.a.post_send(now, qa, &[SendWr { sg_list: &sg, ..Default::default() }]).unwrap_err();
    assert!(err.message.contains("needs wr.ud"), "{}", err.message);
}

// ---------------- the GRH on the wire ----------------

/// The IPv4 TOS and TTL of a datagram.
fn tos_ttl(t: &Transmit) -> (u8, u8) {
    let (ip, _) = packet::parse_datagram(&t.data).expect("engines emit valid datagrams");
    (ip.tos, ip.ttl)
}

#[test]
fn the_grh_traffic_class_and_hop_limit_are_the_ipv4_tos_and_ttl() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    // Each side's address vector names the other with its own GRH values, as each program
    // would; the LID-addressed default has none.
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts { grh: Some((3, 0x28)), ..ConnOpts::default() });
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts { grh: Some((9, 0x10)), ..ConnOpts::default() });
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() });
    let send = p.a.poll_transmit().expect("the SEND");
    assert_eq!(tos_ttl(&send), (0x28, 3), "the requester's packets carry its vector's GRH");
    p.b.handle_packet(p.now, &send.data);
    let ack = p.b.poll_transmit().expect("the ACK");
    assert_eq!(parsed(&ack).0, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(tos_ttl(&ack), (0x10, 9), "the responder's ACK carries the responder's vector's");
    p.a.handle_packet(p.now, &ack.data);
    assert_eq!(poll_all(&mut p.b, b.cq)[0].status, WcStatus::Success);

    // Without a GRH: TOS 0 and TTL 64, for requests and ACKs alike.
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() });
    let send = p.a.poll_transmit().expect("the SEND");
    assert_eq!(tos_ttl(&send), qp::DEFAULT_TOS_TTL);
    p.b.handle_packet(p.now, &send.data);
    assert_eq!(tos_ttl(&p.b.poll_transmit().expect("the ACK")), qp::DEFAULT_TOS_TTL);
}

#[test]
fn a_ud_datagram_carries_its_address_handles_grh_to_the_receivers_grh_area() {
    let (mut p, a, b, qa, qb) = ud_pair();
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(AhAttr {
        is_global: true,
        dgid: Gid::from_ipv4(ip_of_slot(2)),
        sgid_index: GID_INDEX_IPV4 as u8,
        hop_limit: 7,
        traffic_class: 0xB8,
        port_num: 1,
        ..Default::default()
    })));
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    a.mem.write(0, b"tclass").unwrap();
    let now = p.now;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 6)],
        ud: Some(UdTarget { ah, remote_qpn: qb, remote_qkey: 0x2222 }),
        ..Default::default()
    };
    p.a.post_send(now, qa, &[wr]).unwrap();
    let t = p.a.poll_transmit().expect("the datagram");
    assert_eq!(tos_ttl(&t), (0xB8, 7));
    p.b.handle_packet(now, &t.data);
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 46));
    // The receive buffer's 40-byte GRH area ends with the IPv4 header: TOS at byte 1 of it,
    // TTL at byte 8.
    let grh = read_mem(&b, 0, 40);
    assert_eq!((grh[21], grh[28]), (0xB8, 7));
    assert_eq!(read_mem(&b, 40, 6), b"tclass");
}
