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
    kernel_form(&mut d, ROCE_UDP_PORT);
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

    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
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

/// The tests on `lo` one at a time: they share 127.0.0.1, and which port holds its UDP 4791
/// is part of what they check.
pub(super) static LO: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two processes' ports on one address (`lo`, 127.0.0.1) share it as rxe's one device is
/// shared: their QP numbers are in different blocks; each reaches the other (RC SENDs both
/// ways, every byte); a datagram from another host (127.0.0.3:4791) for the second port's
/// QP reaches it through the first, which holds UDP 4791, and its ACK leaves from the
/// second's own UDP port with an ICRC that checks over it; when the first goes, the second
/// binds 4791 within its retry period and the other host's next SEND lands.
#[test]
fn ports_on_one_address_share_it_and_one_takes_over_4791_when_its_holder_goes() {
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    use verbs_api::conn::{connect, ConnOpts, Endpoint, QpInfo};
    use verbs_api::{Errno, Gid, QpCap, QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};

    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let (first, second) = (crate::soft::Soft::netdev("lo"), crate::soft::Soft::netdev("lo"));
    let open = |s: &crate::soft::Soft| s.open("softverbs0");
    let a = match open(&first) {
        Ok(c) => c,
        Err(e) if e.errno == Errno::Busy || e.errno == Errno::NoDev => {
            eprintln!("skipped: no free 127.0.0.1:4791 on lo here: {e}");
            return;
        }
        Err(e) => panic!("opening softverbs0 on lo: {e}"),
    };
    let b = open(&second).expect("a second port on the same address");
    let gid = Gid::from_ipv4([127, 0, 0, 1]);
    assert_eq!(b.query_gid(1, 1).expect("GID 1"), gid, "one address, one GID");
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ea = Endpoint::new(&a, QpType::Rc, cap, 32, 4096).expect("a's endpoint");
    let eb = Endpoint::new(&b, QpType::Rc, cap, 32, 4096).expect("b's endpoint");
    let (qa, qb) = (ea.qp.qp_num(), eb.qp.qp_num());
    assert_ne!(qa >> 16, qb >> 16, "QPNs {qa:#x} and {qb:#x}: one block each");
    let opts = ConnOpts { sgid_index: 1, ..ConnOpts::default() };
    let info = |qpn, psn| QpInfo { lid: 0, qpn, psn, gid };
    connect(&ea.qp, 10, &info(qb, 20), &opts).expect("a connects");
    connect(&eb.qp, 20, &info(qa, 10), &opts).expect("b connects");
    let send = |e: &Endpoint, wr_id: u64, bytes: &[u8]| {
        e.mr.write(0, bytes).expect("write");
        let sge = [e.mr.sge(0, bytes.len() as u32)];
        let wr = SendWr {
            wr_id,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            ..SendWr::default()
        };
        e.qp.post_send(&[wr]).expect("post_send");
    };
    let recv = |e: &Endpoint, wr_id: u64| {
        e.qp.post_recv(&[RecvWr { wr_id, sg_list: &[e.mr.sge(2048, 2048)] }]).expect("post_recv");
    };
    let done = |e: &Endpoint, n: usize| e.cq.poll_n(n, Duration::from_secs(20)).expect("completes");
    for (from, to, text) in [(&ea, &eb, &b"a to b"[..]), (&eb, &ea, &b"b to a, longer"[..])] {
        recv(to, 1);
        send(from, 2, text);
        let got = done(to, 1);
        assert_eq!(
            (got[0].status, got[0].wr_id, got[0].byte_len),
            (WcStatus::Success, 1, text.len() as u32)
        );
        assert_eq!(to.mr.read_vec(2048, text.len()).expect("read"), text);
        assert_eq!(done(from, 1)[0].status, WcStatus::Success);
    }

    // Another host's QP 0x123 at 127.0.0.3 sends to b's second QP.
    let eb2 = Endpoint::new(&b, QpType::Rc, cap, 32, 4096).expect("b's second endpoint");
    let peer = QpInfo { lid: 0, qpn: 0x123, psn: 100, gid: Gid::from_ipv4([127, 0, 0, 3]) };
    connect(&eb2.qp, 500, &peer, &opts).expect("connect");
    let host = UdpSocket::bind("127.0.0.3:4791").expect("the other host's socket");
    host.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let to_b = |psn: u32, what: &[u8]| {
        let ip =
            IpUdp { src: [127, 0, 0, 3], dst: [127, 0, 0, 1], src_port: 4791, ..IpUdp::default() };
        let bth = Bth {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qp: eb2.qp.qp_num(),
            psn: crate::packet::Psn::new(psn),
            ack_req: true,
            ..Bth::default()
        };
        let mut d = Vec::new();
        packet::emit_datagram(&ip, &Packet::new(bth, what), &mut d).expect("emits");
        host.send_to(&d[IPV4_UDP_LEN..], "127.0.0.1:4791").expect("sent");
    };
    let ack = || {
        let mut buf = vec![0u8; 2048];
        let (len, from) = host.recv_from(&mut buf[IPV4_UDP_LEN..]).expect("an ACK");
        let total = rebuild(&mut buf, len, from, [127, 0, 0, 3]).expect("IPv4");
        let (_, ack) =
            packet::parse_datagram(&buf[..total]).expect("the ACK checks, ICRC included");
        assert_eq!((ack.bth.opcode, ack.bth.dest_qp), (Opcode::RC_ACKNOWLEDGE, 0x123));
        from
    };
    recv(&eb2, 3);
    to_b(100, b"through the holder");
    let got = done(&eb2, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 18));
    assert_eq!(eb2.mr.read_vec(2048, 18).expect("read"), b"through the holder");
    let from = ack();
    assert_ne!(from.port(), 4791, "b sends from its own port, which its ICRC covers");

    // The holder goes; b binds 4791 within a few retry periods, and the next SEND lands
    // (sent again until then, as the other host's transport would).
    drop((ea, a, first));
    recv(&eb2, 4);
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        to_b(101, b"after the takeover");
        let got = eb2.cq.poll_n(1, Duration::from_millis(300)).unwrap_or_default();
        if !got.is_empty() {
            break got;
        }
        assert!(Instant::now() < deadline, "nobody took UDP 4791 over");
    };
    assert_eq!((got[0].status, got[0].wr_id, got[0].byte_len), (WcStatus::Success, 4, 18));
    assert_eq!(eb2.mr.read_vec(2048, 18).expect("read"), b"after the takeover");
}
