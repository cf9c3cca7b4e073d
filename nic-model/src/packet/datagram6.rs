//! RoCEv2 datagrams over IPv6, built and checked whole: IPv6 (40 B) ‖ UDP (8 B, destination
//! port 4791, checksum 0) ‖ transport packet ‖ ICRC (4 B): what a QP sends from an IPv6 GID
//! (a RoCE port's link-local GID at index 0). The IPv6 sibling of `datagram.rs`.
//!
//! The engine sends it for an RC or UC QP whose address vector's `sgid_index` names the
//! port's link-local GID, and receives it in its general path.

use std::net::IpAddr;

use super::datagram::{parse_datagram, ICRC_LEN};
use super::icrc::icrc_ipv6;
use super::ipv6_udp::{check_ip6_udp, write_ip6_udp, Ip6Udp, IPV6_LEN, IPV6_UDP_LEN};
use super::transport::Packet;
use super::PacketError;

/// Total datagram length [`emit_datagram6`] would produce: IPv6 + UDP + transport + ICRC.
pub fn datagram6_len(pkt: &Packet<'_>) -> usize {
    IPV6_UDP_LEN + pkt.transport_len() + ICRC_LEN
}

/// Emit IPv6/UDP/BTH…/payload/pad/ICRC into `out` (cleared first; left empty on error),
/// computing `PadCnt`, the IPv6 payload length, the UDP length (checksum 0) and the ICRC.
///
/// Errors: those of [`Packet::emit`]; `BadLength` if the IPv6 payload would exceed 65535
/// bytes.
pub fn emit_datagram6(ip: &Ip6Udp, pkt: &Packet<'_>, out: &mut Vec<u8>) -> Result<(), PacketError> {
    out.clear();
    pkt.check()?;
    let payload_len = u16::try_from(datagram6_len(pkt) - IPV6_LEN).map_err(|_| {
        PacketError::BadLength("datagram longer than an IPv6 payload length allows")
    })?;
    let mut head = [0u8; IPV6_UDP_LEN];
    write_ip6_udp(ip, payload_len, &mut head);
    out.extend_from_slice(&head);
    if let Err(e) = pkt.emit(out) {
        out.clear();
        return Err(e);
    }
    let icrc = icrc_ipv6(out);
    out.extend_from_slice(&icrc.to_le_bytes());
    Ok(())
}

/// Parse and check an IPv6 datagram: version 6, next header UDP, payload length (=
/// `bytes.len()` − 40); UDP destination port 4791 and length; the ICRC; then the transport
/// packet as [`Packet::parse`] checks it. Never panics on any input. The UDP checksum is
/// ignored (RoCEv2 senders leave it 0).
pub fn parse_datagram6(bytes: &[u8]) -> Result<(Ip6Udp, Packet<'_>), PacketError> {
    let ip = check_ip6_udp(bytes)?;
    let got = bytes.len();
    let min_len = IPV6_UDP_LEN + super::Bth::LEN + ICRC_LEN;
    let (covered, icrc) = bytes
        .split_last_chunk::<ICRC_LEN>()
        .filter(|_| got >= min_len)
        .ok_or(PacketError::Truncated { needed: min_len, got })?;
    let expected = icrc_ipv6(covered);
    let carried = u32::from_le_bytes(*icrc);
    if expected != carried {
        return Err(PacketError::BadIcrc { expected, got: carried });
    }
    let pkt = Packet::parse(covered.get(IPV6_UDP_LEN..).unwrap_or(&[]))?;
    Ok((ip, pkt))
}

/// Sets the ICRC of an IPv6 datagram (its last four bytes) over the rest, as
/// [`set_icrc_ipv4`](super::set_icrc_ipv4) does over IPv4: for a datagram whose headers
/// were made a host kernel's after the engine built it (the UDP wire). Shorter than an ICRC:
/// left as it is.
pub fn set_icrc_ipv6(datagram: &mut [u8]) {
    let Some((covered, icrc)) = datagram.split_last_chunk_mut::<ICRC_LEN>() else { return };
    *icrc = icrc_ipv6(covered).to_le_bytes();
}

/// Parse a datagram of either IP version, by its first nibble ([`parse_datagram`] or
/// [`parse_datagram6`]): its source and destination addresses and its transport packet. For
/// tools that show any datagram (the demo's wire lines).
pub fn parse_any_datagram(bytes: &[u8]) -> Result<(IpAddr, IpAddr, Packet<'_>), PacketError> {
    match bytes.first() {
        Some(b) if b >> 4 == 6 => {
            parse_datagram6(bytes).map(|(ip, p)| (ip.src.into(), ip.dst.into(), p))
        }
        _ => parse_datagram(bytes).map(|(ip, p)| (ip.src.into(), ip.dst.into(), p)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::headers::{Bth, Reth};
    use super::super::opcode::Opcode;
    use super::super::psn::Psn;
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Golden frame 1 of the wire-format reference (RC RDMA WRITE ONLY, dest QP 0x11, PSN
    /// 0x123456, AckReq, VA 0x00007f0000001000, rkey 0x12345678, "hello, rdma!!", PadCnt 3)
    /// over IPv6 from fe80::1 to fe80::2 (traffic class 0x02, hop limit 64, flow label 0, UDP
    /// 49152 → 4791, checksum 0). The reference cross-checked its IPv6 frame with scapy but
    /// lists none in hex, so this one was built the same way, by scapy 2.8.0's
    /// `scapy.contrib.roce` (whose BTH computes the ICRC, 0x6a842273 here); tshark 4.0.17
    /// decodes it as `fe80::1 → fe80::2 RRoCE 110 RC RDMA Write Only QP=0x000011`, the line
    /// the reference quotes.
    const FRAME_1_IPV6: &str = concat!(
        "02000000000202000000000186dd6020000000381140fe80000000000000000000000000000",
        "1fe800000000000000000000000000002c00012b7003800000a30ffff000000118012345600",
        "007f0000001000123456780000000d68656c6c6f2c2072646d6121210000007322846a",
    );

    /// The IPv6 datagram inside a golden Ethernet frame.
    fn datagram(frame_hex: &str) -> Vec<u8> {
        let frame: Vec<u8> = (0..frame_hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&frame_hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(&frame[12..14], &[0x86, 0xdd], "Ethernet II carrying IPv6");
        frame[14..].to_vec()
    }

    fn link_local(last: u8) -> [u8; 16] {
        let mut a = [0; 16];
        a[..2].copy_from_slice(&[0xfe, 0x80]);
        a[15] = last;
        a
    }

    #[test]
    fn the_golden_ipv6_frame_parses_and_re_emits_byte_identical() {
        let bytes = datagram(FRAME_1_IPV6);
        let (ip, pkt) = parse_datagram6(&bytes).expect("the golden frame parses");
        assert_eq!(
            ip,
            Ip6Udp {
                src: link_local(1),
                dst: link_local(2),
                src_port: 49152,
                traffic_class: 0x02,
                flow_label: 0,
                hop_limit: 64,
            }
        );
        assert_eq!(pkt.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
        assert_eq!(
            (pkt.bth.dest_qp, pkt.bth.psn, pkt.bth.ack_req),
            (0x11, Psn::new(0x123456), true)
        );
        assert_eq!(
            pkt.reth,
            Some(Reth { va: 0x0000_7f00_0000_1000, rkey: 0x1234_5678, dma_len: 13 })
        );
        assert_eq!(pkt.payload, b"hello, rdma!!");
        let mut out = Vec::new();
        emit_datagram6(&ip, &pkt, &mut out).expect("emit");
        assert_eq!(out, bytes, "re-emitted byte for byte");
        assert_eq!(datagram6_len(&pkt), bytes.len());
        // Built from fields rather than parsed, it is the same datagram.
        let built = Packet {
            reth: Some(Reth { va: 0x0000_7f00_0000_1000, rkey: 0x1234_5678, dma_len: 13 }),
            ..Packet::new(
                Bth {
                    opcode: Opcode::RC_RDMA_WRITE_ONLY,
                    pkey: 0xFFFF,
                    dest_qp: 0x11,
                    ack_req: true,
                    psn: Psn::new(0x123456),
                    ..Bth::default()
                },
                b"hello, rdma!!",
            )
        };
        emit_datagram6(&ip, &built, &mut out).expect("emit");
        assert_eq!(out, bytes);
    }

    #[test]
    fn the_ipv6_icrc_masks_what_routers_change_and_covers_the_rest() {
        let good = datagram(FRAME_1_IPV6);
        let (ip, pkt) = parse_datagram6(&good).expect("parses");
        // Traffic class, flow label and hop limit change in flight without breaking the ICRC.
        let mut moved = Vec::new();
        let changed = Ip6Udp { traffic_class: 0xB8, flow_label: 0xABCDE, hop_limit: 3, ..ip };
        emit_datagram6(&changed, &pkt, &mut moved).expect("emit");
        assert_eq!(moved[moved.len() - 4..], good[good.len() - 4..], "same ICRC");
        assert_eq!(parse_datagram6(&moved).expect("parses").0, changed);
        // Any other bit flipped is caught: the addresses, the ports, the BTH, the payload.
        for at in [8, 24, 40, 42, 48, 55, 60, 80, good.len() - 5] {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            assert!(parse_datagram6(&bad).is_err(), "a flip at byte {at} went unnoticed");
        }
        let mut bad = good.clone();
        bad[60] ^= 0x01; // in the RETH
        assert!(matches!(parse_datagram6(&bad), Err(PacketError::BadIcrc { .. })));
    }

    #[test]
    fn malformed_ipv6_datagrams_are_refused_without_panicking() {
        let good = datagram(FRAME_1_IPV6);
        for len in 0..good.len() {
            assert!(parse_datagram6(&good[..len]).is_err(), "a {len}-byte prefix parsed");
        }
        let mut v4 = good.clone();
        v4[0] = 0x45;
        assert_eq!(
            parse_datagram6(&v4).unwrap_err(),
            PacketError::BadIpv6Header("IP version is not 6")
        );
        let mut hop_by_hop = good.clone();
        hop_by_hop[6] = 0;
        assert!(matches!(parse_datagram6(&hop_by_hop), Err(PacketError::BadIpv6Header(_))));
        let mut port = good.clone();
        port[43] ^= 1;
        assert_eq!(parse_datagram6(&port).unwrap_err(), PacketError::NotRoce { dst_port: 4790 });
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(parse_datagram6(&longer), Err(PacketError::BadLength(_))));
    }

    proptest! {
        /// Any bytes, and the golden datagram with any bytes changed: an error or a datagram,
        /// never a panic; and whatever parses re-emits as it was.
        #[test]
        fn parsing_never_panics(bytes in vec(any::<u8>(), 0..200), edits in vec((0usize..110, any::<u8>()), 0..4)) {
            let _ = parse_datagram6(&bytes);
            let mut good = datagram(FRAME_1_IPV6);
            for (at, b) in edits {
                let n = good.len();
                good[at % n] = b;
            }
            if let Ok((ip, pkt)) = parse_datagram6(&good) {
                let mut out = Vec::new();
                emit_datagram6(&ip, &pkt, &mut out).expect("what parsed emits");
                // Except what the ICRC does not cover and a receiver ignores: the UDP checksum
                // (sent as 0) and the BTH's six reserved bits beside FECN and BECN.
                good[46..48].fill(0);
                good[52] &= 0xC0;
                prop_assert_eq!(out, good);
            }
        }
    }
}
