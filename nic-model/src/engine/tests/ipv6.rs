//! RoCE v2 over IPv6: an RC connection between the link-local GIDs (index 0) sends IPv6
//! datagrams both ways, moves SENDs, WRITEs and READs as over IPv4, and takes no packet of
//! the other IP version.

use super::*;

fn ipv6() -> ConnOpts {
    ConnOpts { ipv6: true, grh: Some((7, 0x28)), ..ConnOpts::default() }
}

#[test]
fn an_rc_connection_between_link_local_gids_speaks_ipv6() {
    let (mut p, a, b) = setup(ipv6());
    let data = pattern(700, 3);
    a.mem.write(0, &data).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 1024)] }]).unwrap();
    let sg = [sge(&a, 0, 700)];
    post_send(
        &mut p,
        &a,
        SendWr { wr_id: 1, sg_list: &sg, send_flags: signaled(), ..Default::default() },
    );
    // Carry every datagram by hand, keeping a copy: which side sent it (by slot), its bytes.
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let mut any = false;
        while let Some(t) = p.a.poll_transmit() {
            p.b.handle_packet(p.now, &t.data);
            seen.push((1u16, t.data));
            any = true;
        }
        while let Some(t) = p.b.poll_transmit() {
            p.a.handle_packet(p.now, &t.data);
            seen.push((2u16, t.data));
            any = true;
        }
        if !any {
            break;
        }
    }
    assert!(seen.len() >= 4, "3 SEND packets at MTU 256 and an ACK: {}", seen.len());
    let ll = |slot| gid_entry(ip_of_slot(slot), GID_INDEX_LINK_LOCAL).unwrap().0 .0;
    for (from, d) in seen.iter() {
        let (ip, pkt) = packet::parse_datagram6(d).expect("an IPv6 RoCE v2 datagram");
        let to = 3 - from;
        assert_eq!((ip.src, ip.dst), (ll(*from), ll(to)), "{:?}", pkt.bth.opcode);
        assert_eq!((ip.hop_limit, ip.traffic_class), (7, 0x28), "the GRH's hop limit and class");
        assert!(packet::parse_datagram(d).is_err(), "not an IPv4 datagram");
    }
    assert_eq!(read_mem(&b, 0, 700), data);
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        (rwc.len(), rwc[0].wr_id, rwc[0].status, rwc[0].byte_len),
        (1, 9, WcStatus::Success, 700)
    );
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!((swc.len(), swc[0].wr_id, swc[0].status), (1, 1, WcStatus::Success));
}

#[test]
fn writes_and_reads_over_ipv6_land_and_complete() {
    let (mut p, a, b) = setup(ipv6());
    let data = pattern(3000, 5);
    a.mem.write(0, &data).unwrap();
    let write = [sge(&a, 0, 3000)];
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 2,
            sg_list: &write,
            opcode: WrOpcode::RdmaWrite,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: b.mem.addr() + 4096, rkey: b.key },
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(read_mem(&b, 4096, 3000), data);
    let read = [sge(&a, 8192, 3000)];
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 3,
            sg_list: &read,
            opcode: WrOpcode::RdmaRead,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: b.mem.addr() + 4096, rkey: b.key },
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(read_mem(&a, 8192, 3000), data);
    let wcs: Vec<_> =
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        wcs,
        [(2, WcStatus::Success, WcOpcode::RdmaWrite), (3, WcStatus::Success, WcOpcode::RdmaRead)]
    );
}

#[test]
fn an_ipv6_qp_takes_no_ipv4_packet_and_an_ipv4_qp_no_ipv6_one() {
    // A over IPv6 to B, whose QP is connected over IPv4: every datagram A sends is turned away
    // as not from B's path, and A's SEND ends in RETRY_EXC_ERR.
    let mut p = Pair::new();
    let a = side(&mut p.a, AccessFlags::all());
    let b = side(&mut p.b, AccessFlags::all());
    connect(&mut p.a, a.qpn, 2, b.qpn, ipv6());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let sg = [sge(&a, 0, 8)];
    post_send(
        &mut p,
        &a,
        SendWr { wr_id: 1, sg_list: &sg, send_flags: signaled(), ..Default::default() },
    );
    p.drive();
    assert!(p.b.stats().rx_wrong_source > 0, "B drops A's IPv6 packets");
    assert_eq!(poll_all(&mut p.b, b.cq), []);
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!((swc.len(), swc[0].status), (1, WcStatus::RetryExcErr));
}

#[test]
fn a_ud_datagram_from_the_link_local_gid_goes_over_ipv6_with_its_header_in_the_grh_area() {
    // As rxe: a UD address handle from GID index 0 to a port's link-local GID sends RoCE v2
    // over IPv6, and the receive's 40-byte GRH area holds the IPv6 header (version 6, the
    // traffic class and flow label of the vector, the two link-local addresses).
    let (mut p, a, b, qa, qb) = ud_pair();
    let src = gid_entry(ip_of_slot(1), GID_INDEX_LINK_LOCAL).expect("entry 0").0;
    let dst = gid_entry(ip_of_slot(2), GID_INDEX_LINK_LOCAL).expect("entry 0").0;
    let av = AhAttr {
        sgid_index: GID_INDEX_LINK_LOCAL as u8,
        dgid: dst,
        traffic_class: 0x28,
        flow_label: 0x12345,
        ..roce_av(2)
    };
    crate::engine::addr::check_ah(ip_of_slot(1), None, &av).expect("rxe takes this address handle");
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(av)));
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    a.mem.write(0, b"over v6!").unwrap();
    let sg = [sge(&a, 0, 8)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sg,
        opcode: WrOpcode::Send,
        ud: Some(UdTarget { ah, remote_qpn: qb, remote_qkey: 0x2222 }),
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, qa, &[wr]).unwrap();
    let t = p.a.poll_transmit().expect("the datagram");
    assert_eq!(t.data[0] >> 4, 6, "an IPv6 datagram");
    p.b.handle_packet(p.now, &t.data);
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].byte_len, wc[0].src_qp), (WcStatus::Success, 48, qa));
    assert!(wc[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(read_mem(&b, 40, 8), b"over v6!");
    let grh = read_mem(&b, 0, 40);
    assert_eq!(grh[0] >> 4, 6, "the GRH area holds the IPv6 header");
    let vtf = u32::from_be_bytes(grh[..4].try_into().unwrap());
    assert_eq!(((vtf >> 20) & 0xff, vtf & 0xf_ffff), (0x28, 0x12345), "traffic class, flow label");
    assert_eq!(&grh[8..24], &src.0, "the sender's link-local GID");
    assert_eq!(&grh[24..40], &dst.0, "the receiver's link-local GID");
}
