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
