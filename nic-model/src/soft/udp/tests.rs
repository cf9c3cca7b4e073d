//! The UDP wire's two halves without a socket: a datagram made the kernel's on the way out
//! and rebuilt on the way in passes the engine's checks, ICRC included; arbitrary bytes from
//! the network are counted and dropped, never a panic.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use proptest::prelude::*;

use super::{kernel_form, rebuild};
use crate::engine::{Nic, NicConfig};
use crate::packet::{self, Bth, IpUdp, Opcode, Packet, IPV4_UDP_LEN, ROCE_UDP_PORT};

const A: [u8; 4] = [192, 168, 7, 1];
const B: [u8; 4] = [192, 168, 7, 2];

/// An RC SEND ONLY from A to B as the engine makes it: its own identification and source port.
fn engine_datagram() -> Vec<u8> {
    let ip = IpUdp { src: A, dst: B, src_port: 0xc123, ident: 77, ..IpUdp::default() };
    let bth = Bth {
        opcode: Opcode::RC_SEND_ONLY,
        dest_qp: 0x12,
        psn: crate::packet::Psn::new(5),
        ..Bth::default()
    };
    let mut out = Vec::new();
    packet::emit_datagram(&ip, &Packet::new(bth, b"over udp"), &mut out).expect("emits");
    out
}

#[test]
fn what_goes_out_is_what_comes_in_with_the_kernel_s_headers() {
    let mut d = engine_datagram();
    kernel_form(&mut d);
    let (ip, pkt) = packet::parse_datagram(&d).expect("the kernel's form checks");
    assert_eq!((ip.ident, ip.src_port, ip.dont_fragment), (0, ROCE_UDP_PORT, true));
    assert_eq!(pkt.payload, b"over udp");
    // The peer's socket hands over the UDP payload, from A:4791.
    let payload = &d[IPV4_UDP_LEN..];
    let mut buf = vec![0u8; IPV4_UDP_LEN + payload.len()];
    buf[IPV4_UDP_LEN..].copy_from_slice(payload);
    let from = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(A), ROCE_UDP_PORT));
    let total = rebuild(&mut buf, payload.len(), from, B).expect("IPv4");
    let (ip, pkt) = packet::parse_datagram(&buf[..total]).expect("ICRC and lengths check");
    assert_eq!((ip.src, ip.dst), (A, B));
    assert_eq!(pkt.bth.dest_qp, 0x12);
    assert_eq!(pkt.payload, b"over udp");
    // Only the masked fields (TOS, TTL, checksums) may differ from what was sent.
    assert_eq!(buf[..total].len(), d.len());
    for (i, (x, y)) in buf[..total].iter().zip(&d).enumerate() {
        if !matches!(i, 1 | 8 | 10 | 11 | 26 | 27) {
            assert_eq!(x, y, "byte {i}");
        }
    }
    // The engine's own form (identification 77, port 0xc123) would not check: the kernel's
    // headers are what the ICRC must cover.
    let mut stale = engine_datagram();
    packet::set_icrc_ipv4(&mut stale);
    let mut buf2 = vec![0u8; IPV4_UDP_LEN + payload.len()];
    buf2[IPV4_UDP_LEN..].copy_from_slice(&stale[IPV4_UDP_LEN..]);
    let total = rebuild(&mut buf2, payload.len(), from, B).expect("IPv4");
    assert!(packet::parse_datagram(&buf2[..total]).is_err(), "an ICRC over other headers fails");
}

proptest! {
    /// Whatever a UDP socket receives, rebuilt and handed to an engine, is dropped and
    /// counted (malformed, bad ICRC, no such QP) without a panic.
    #[test]
    fn arbitrary_payloads_are_counted_never_a_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        port in any::<u16>(),
    ) {
        let mut nic = Nic::new(NicConfig::new("b", 2));
        let mut buf = vec![0u8; IPV4_UDP_LEN + payload.len()];
        buf[IPV4_UDP_LEN..].copy_from_slice(&payload);
        let from = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(A), port));
        let total = rebuild(&mut buf, payload.len(), from, nic.config().ip()).expect("IPv4");
        nic.handle_packet(0, &buf[..total]);
        let s = nic.stats();
        // A bad ICRC counts as malformed too.
        prop_assert_eq!(s.rx_malformed + s.rx_no_qp + s.rx_bad_length, 1,
            "one datagram, one drop: {:?}", s);
        prop_assert!(nic.poll_transmit().is_none(), "nothing answers a stranger's bytes");
    }
}

/// A device on `lo` (127.0.0.1:4791) with an RC QP whose path is 127.0.0.3: a stranger's
/// datagram for the QP (from 127.0.0.2) and bytes that are no datagram are dropped and
/// counted; the path's SEND lands, every byte, and its ACK comes back from 127.0.0.1:4791 as
/// RoCE v2 whose ICRC checks over the kernel's headers. Real sockets, one process.
#[test]
fn strangers_and_garbage_from_the_network_are_counted_and_the_path_s_send_lands() {
    use std::net::UdpSocket;
    use std::time::Duration;

    use verbs_api::conn::{connect, ConnOpts, QpInfo};
    use verbs_api::{AccessFlags, Errno, Gid, QpCap, QpInitAttr, QpType, RecvWr, WcStatus};

    let soft = crate::soft::Soft::netdev("lo");
    let ctx = match soft.open("softverbs0") {
        Ok(c) => c,
        Err(e) if e.errno == Errno::Busy || e.errno == Errno::NoDev => {
            eprintln!("skipped: no free 127.0.0.1:4791 on lo here: {e}");
            return;
        }
        Err(e) => panic!("opening softverbs0 on lo: {e}"),
    };
    assert_eq!(ctx.query_gid(1, 1).expect("GID 1"), Gid::from_ipv4([127, 0, 0, 1]));
    let pd = ctx.alloc_pd().expect("pd");
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).expect("mr");
    let cq = ctx.create_cq(16, None, 0).expect("cq");
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .expect("qp");
    let peer = QpInfo { lid: 0, qpn: 0x123, psn: 100, gid: Gid::from_ipv4([127, 0, 0, 3]) };
    connect(&qp, 500, &peer, &ConnOpts { sgid_index: 1, ..ConnOpts::default() }).expect("connect");
    qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[mr.sge(0, 4096)] }]).expect("post_recv");

    let path = UdpSocket::bind("127.0.0.3:4791").expect("the path's socket");
    let stranger = UdpSocket::bind("127.0.0.2:0").expect("a stranger's socket");
    let send = |from: &UdpSocket, what: &[u8]| {
        let SocketAddr::V4(me) = from.local_addr().expect("addr") else { unreachable!() };
        let ip = IpUdp {
            src: me.ip().octets(),
            dst: [127, 0, 0, 1],
            src_port: me.port(),
            ..IpUdp::default()
        };
        let bth = Bth {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qp: qp.qp_num(),
            psn: crate::packet::Psn::new(100),
            ack_req: true,
            ..Bth::default()
        };
        let mut d = Vec::new();
        packet::emit_datagram(&ip, &Packet::new(bth, what), &mut d).expect("emits");
        from.send_to(&d[IPV4_UDP_LEN..], "127.0.0.1:4791").expect("sent");
    };
    send(&stranger, b"from a stranger");
    stranger.send_to(b"not RoCE at all", "127.0.0.1:4791").expect("sent");
    send(&path, b"from the path");

    let wc = cq.poll_n(1, Duration::from_secs(20)).expect("the path's SEND completes");
    assert_eq!((wc[0].status, wc[0].wr_id, wc[0].byte_len), (WcStatus::Success, 7, 13));
    assert_eq!(mr.read_vec(0, 13).expect("read"), b"from the path");
    let stats = soft.stats("softverbs0").expect("stats");
    assert_eq!(stats.nic.rx_wrong_source, 1, "the stranger's datagram: {:?}", stats.nic);
    assert_eq!(stats.nic.rx_malformed, 1, "the bytes that are no datagram: {:?}", stats.nic);

    // The ACK, from 127.0.0.1:4791, checks as the kernel put it on the wire.
    path.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut buf = vec![0u8; 2048];
    let (len, from) = path.recv_from(&mut buf[IPV4_UDP_LEN..]).expect("an ACK");
    assert_eq!(from, "127.0.0.1:4791".parse::<SocketAddr>().unwrap());
    let total = rebuild(&mut buf, len, from, [127, 0, 0, 3]).expect("IPv4");
    let (_, ack) = packet::parse_datagram(&buf[..total]).expect("the ACK checks, ICRC included");
    assert_eq!((ack.bth.opcode, ack.bth.dest_qp), (Opcode::RC_ACKNOWLEDGE, 0x123));
}
