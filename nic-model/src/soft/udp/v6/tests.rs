//! RoCE v2 over IPv6 on the UDP wire: a datagram made the kernel's on the way out and
//! rebuilt on the way in (from the socket, or from another port's inbox) checks, ICRC
//! included, and the engine's own form would not; on `lo` with real sockets, an RC SEND from
//! `::1` reaches a QP whose path is IPv6, every byte, and two ports of the address reach each
//! other over IPv6.

use std::net::Ipv6Addr;

use super::super::share::{self, Share};
use super::{from_inbox6, kernel_form6, rebuild6};
use crate::packet::{self, Bth, Ip6Udp, Opcode, Packet, IPV4_UDP_LEN, IPV6_UDP_LEN, ROCE_UDP_PORT};

fn a6() -> [u8; 16] {
    "fd00:1::1".parse::<Ipv6Addr>().unwrap().octets()
}

fn b6() -> [u8; 16] {
    "fe80::2".parse::<Ipv6Addr>().unwrap().octets()
}

/// An RC SEND ONLY from A to B over IPv6 as the engine makes it: its own source port, a
/// traffic class, flow label and hop limit.
fn engine_datagram6() -> Vec<u8> {
    let ip = Ip6Udp {
        src: a6(),
        dst: b6(),
        src_port: 0xc123,
        traffic_class: 0x28,
        flow_label: 0x1_2345,
        hop_limit: 7,
    };
    let bth = Bth {
        opcode: Opcode::RC_SEND_ONLY,
        dest_qp: 0x02_0012,
        psn: crate::packet::Psn::new(5),
        ..Bth::default()
    };
    let mut out = Vec::new();
    packet::emit_datagram6(&ip, &Packet::new(bth, b"over udp and ipv6"), &mut out).expect("emits");
    out
}

/// Whether bytes `x` and `y` at `i` of two IPv6 datagrams agree but for what the ICRC masks
/// and the kernel writes its own way: the traffic class and flow label (bytes 0–3 but the
/// version, the high nibble of byte 0), the hop limit (7), the UDP checksum (46, 47).
fn same_but_masked(i: usize, x: u8, y: u8) -> bool {
    match i {
        0 => x >> 4 == y >> 4,
        1..=3 | 7 | 46 | 47 => true,
        _ => x == y,
    }
}

#[test]
fn what_goes_out_over_ipv6_is_what_comes_in_with_the_kernel_s_headers() {
    let mut d = engine_datagram6();
    kernel_form6(&mut d, ROCE_UDP_PORT);
    let (ip, pkt) = packet::parse_datagram6(&d).expect("the kernel's form checks");
    assert_eq!((ip.src, ip.dst, ip.src_port), (a6(), b6(), ROCE_UDP_PORT));
    assert_eq!(pkt.payload, b"over udp and ipv6");
    // The peer's socket hands over the UDP payload, from [A]:4791, to the address it is bound
    // to, B.
    let payload = d[IPV6_UDP_LEN..].to_vec();
    let mut buf = vec![0u8; IPV6_UDP_LEN + payload.len()];
    buf[IPV6_UDP_LEN..].copy_from_slice(&payload);
    let total = rebuild6(&mut buf, payload.len(), a6(), ROCE_UDP_PORT, b6()).expect("fits");
    let (ip, pkt) = packet::parse_datagram6(&buf[..total]).expect("ICRC and lengths check");
    assert_eq!((ip.src, ip.dst, ip.src_port), (a6(), b6(), ROCE_UDP_PORT));
    assert_eq!((pkt.bth.dest_qp, pkt.payload), (0x02_0012, &b"over udp and ipv6"[..]));
    assert_eq!(total, d.len());
    for (i, (x, y)) in buf[..total].iter().zip(&d).enumerate() {
        assert!(same_but_masked(i, *x, *y), "byte {i}: {x:#x} and {y:#x}");
    }
    // The engine's own form (source port 0xc123) would not check: the ICRC must cover the
    // port the kernel sent from.
    let mut stale = engine_datagram6();
    packet::set_icrc_ipv6(&mut stale);
    let mut buf2 = vec![0u8; IPV6_UDP_LEN + payload.len()];
    buf2[IPV6_UDP_LEN..].copy_from_slice(&stale[IPV6_UDP_LEN..]);
    let total = rebuild6(&mut buf2, payload.len(), a6(), ROCE_UDP_PORT, b6()).expect("fits");
    assert!(
        matches!(packet::parse_datagram6(&buf2[..total]), Err(packet::PacketError::BadIcrc { .. })),
        "an ICRC over another source port fails"
    );
    // Too small a buffer, or too long a payload: no datagram, no panic.
    assert_eq!(rebuild6(&mut [0u8; 10], 4, a6(), 1, b6()), None);
    assert_eq!(rebuild6(&mut buf2, 70_000, a6(), 1, b6()), None);
}

/// A datagram another port of the address handed over (its head names the sender and the
/// destination) is rebuilt where the receiver's buffer has it, and checks.
#[test]
fn a_handed_ipv6_datagram_is_rebuilt_and_checks() {
    let iface = format!("v6test{}", std::process::id());
    let a = Share::claim(&iface, [10, 9, 8, 6]).expect("a block");
    let b = Share::claim(&iface, [10, 9, 8, 6]).expect("another block");
    let mut d = engine_datagram6();
    d[IPV6_UDP_LEN + 5] = b.block;
    kernel_form6(&mut d, 50_000);
    let mut head = Vec::new();
    let from = (a6(), 50_000, b6());
    a.hand6(&a.inbox, b.block, from, &d[IPV6_UDP_LEN..], &mut head).expect("handed");
    let mut buf = vec![0u8; IPV4_UDP_LEN + 4096 + share::FORWARD_HEAD6];
    let at = IPV4_UDP_LEN - share::FORWARD_HEAD;
    let n = b.inbox.recv(&mut buf[at..]).expect("arrived");
    assert!(share::is_v6(&buf[at..at + n]));
    assert_eq!(share::sender(&buf[at..at + n]), None, "not an IPv4 head");
    let total = from_inbox6(&mut buf, n).expect("rebuilt");
    let (ip, pkt) = packet::parse_datagram6(&buf[..total]).expect("checks, ICRC included");
    assert_eq!((ip.src, ip.dst, ip.src_port), (a6(), b6(), 50_000));
    assert_eq!(pkt.payload, b"over udp and ipv6");
    for (i, (x, y)) in buf[..total].iter().zip(&d).enumerate() {
        assert!(same_but_masked(i, *x, *y), "byte {i}: {x:#x} and {y:#x}");
    }
    assert_eq!(from_inbox6(&mut buf, 12), None, "a runt");
}

/// On `lo` (`::1`, which every network namespace with IPv6 has): the port's GID table lists
/// `::1` after the IPv4 GID; an RC SEND over IPv6 from `[::1]:port` to a QP whose path is
/// `::1` lands, every byte, through the port's IPv6 socket on UDP 4791; and two ports of the
/// address (one process's two devices) reach each other from that GID, both ways.
#[test]
fn over_ipv6_on_lo_a_send_lands_and_two_ports_reach_each_other() {
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Duration;

    use verbs_api::conn::{connect, ConnOpts, Endpoint, QpInfo};
    use verbs_api::{Errno, Gid, QpCap, QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};

    let _lo = super::super::tests::LO.lock().unwrap_or_else(|e| e.into_inner());
    let (first, second) = (crate::soft::Soft::netdev("lo"), crate::soft::Soft::netdev("lo"));
    let a = match first.open("softverbs0") {
        Ok(c) => c,
        Err(e) if e.errno == Errno::Busy || e.errno == Errno::NoDev => {
            eprintln!("skipped: no free 127.0.0.1:4791 on lo here: {e}");
            return;
        }
        Err(e) => panic!("opening softverbs0 on lo: {e}"),
    };
    let one = Gid(Ipv6Addr::LOCALHOST.octets());
    let Some(index) = (2..8).find(|&i| a.query_gid(1, i).ok() == Some(one)) else {
        eprintln!("skipped: lo has no ::1 here (IPv6 disabled)");
        return;
    };
    assert_eq!(a.query_gid(1, 1).expect("GID 1"), Gid::from_ipv4([127, 0, 0, 1]));
    let b = second.open("softverbs0").expect("a second port on the address");
    assert_eq!(b.query_gid(1, index).expect("the same GID"), one, "one address, one GID");
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = ConnOpts { sgid_index: index as u8, ..ConnOpts::default() };

    // From another socket of ::1, as a host would send: the QP's path is ::1.
    let ea = Endpoint::new(&a, QpType::Rc, cap, 32, 4096).expect("a's endpoint");
    let peer = QpInfo { lid: 0, qpn: 0x123, psn: 100, gid: one };
    connect(&ea.qp, 500, &peer, &opts).expect("connect over IPv6");
    ea.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[ea.mr.sge(0, 4096)] }]).expect("post_recv");
    let host = UdpSocket::bind("[::1]:0").expect("a socket on ::1");
    let SocketAddr::V6(me) = host.local_addr().expect("addr") else { unreachable!() };
    let ip = Ip6Udp { src: one.0, dst: one.0, src_port: me.port(), ..Ip6Udp::default() };
    let bth = Bth {
        opcode: Opcode::RC_SEND_ONLY,
        dest_qp: ea.qp.qp_num(),
        psn: crate::packet::Psn::new(100),
        ack_req: true,
        ..Bth::default()
    };
    let mut d = Vec::new();
    packet::emit_datagram6(&ip, &Packet::new(bth, b"from ::1"), &mut d).expect("emits");
    host.send_to(&d[IPV6_UDP_LEN..], "[::1]:4791").expect("sent");
    let wc = ea.cq.poll_n(1, Duration::from_secs(20)).expect("the SEND completes");
    assert_eq!((wc[0].status, wc[0].wr_id, wc[0].byte_len), (WcStatus::Success, 7, 8));
    assert_eq!(ea.mr.read_vec(0, 8).expect("read"), b"from ::1");

    // Two ports of the address, over IPv6 both ways.
    let (xa, xb) = (
        Endpoint::new(&a, QpType::Rc, cap, 32, 4096).expect("a's second endpoint"),
        Endpoint::new(&b, QpType::Rc, cap, 32, 4096).expect("b's endpoint"),
    );
    let info = |qpn, psn| QpInfo { lid: 0, qpn, psn, gid: one };
    connect(&xa.qp, 10, &info(xb.qp.qp_num(), 20), &opts).expect("a connects");
    connect(&xb.qp, 20, &info(xa.qp.qp_num(), 10), &opts).expect("b connects");
    for (from, to, text) in [(&xa, &xb, &b"a to b over v6"[..]), (&xb, &xa, &b"b to a"[..])] {
        to.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[to.mr.sge(2048, 2048)] }]).expect("recv");
        from.mr.write(0, text).expect("write");
        let sge = [from.mr.sge(0, text.len() as u32)];
        let wr = SendWr {
            wr_id: 2,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            ..SendWr::default()
        };
        from.qp.post_send(&[wr]).expect("post_send");
        let got = to.cq.poll_n(1, Duration::from_secs(20)).expect("received");
        assert_eq!(
            (got[0].status, got[0].wr_id, got[0].byte_len),
            (WcStatus::Success, 1, text.len() as u32)
        );
        assert_eq!(to.mr.read_vec(2048, text.len()).expect("read"), text);
        let sent = from.cq.poll_n(1, Duration::from_secs(20)).expect("sent");
        assert_eq!((sent[0].status, sent[0].wr_id), (WcStatus::Success, 2));
    }
}

proptest::proptest! {
    /// Whatever an IPv6 socket receives, rebuilt and handed to an engine, is dropped and
    /// counted (malformed, bad ICRC, no such QP) without a panic.
    #[test]
    fn arbitrary_ipv6_payloads_are_counted_never_a_panic(
        payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        port in proptest::prelude::any::<u16>(),
    ) {
        let mut nic = crate::engine::Nic::new(crate::engine::NicConfig::new("b", 2));
        let mut buf = vec![0u8; IPV6_UDP_LEN + payload.len()];
        buf[IPV6_UDP_LEN..].copy_from_slice(&payload);
        let total = rebuild6(&mut buf, payload.len(), a6(), port, b6()).expect("fits");
        nic.handle_packet(0, &buf[..total]);
        let s = nic.stats();
        proptest::prop_assert_eq!(s.rx_malformed + s.rx_no_qp + s.rx_bad_length, 1,
            "one datagram, one drop: {:?}", s);
        proptest::prop_assert!(nic.poll_transmit().is_none(), "nothing answers a stranger's bytes");
    }
}
