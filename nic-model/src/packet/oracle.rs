//! The datagram codec as it was before the small-packet fast path, kept as a test oracle: the
//! fast [`super::emit_datagram`] and [`super::parse_datagram`] must give the same bytes and the
//! same `Result` for every input. The ICRC here is hashed by its definition (crc32fast over the
//! pseudo-LRH and a masked copy), independently of `icrc.rs`.

use super::datagram::ICRC_LEN;
use super::headers::Bth;
use super::ipv4_udp::{IpUdp, IPV4_UDP_LEN, ROCE_UDP_PORT};
use super::opcode::MAX_HEADER_LEN;
use super::transport::Packet;
use super::PacketError;

const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;
const IPV4_VERSION_IHL: u8 = 0x45;
const IP_PROTO_UDP: u8 = 17;
const IP_DF: u16 = 0x4000;
const IP_MF_AND_OFFSET: u16 = 0x3FFF;

/// The ICRC by the specification: CRC-32 over 8 × 0xFF, then the datagram with IPv4 TOS, TTL
/// and checksum, the UDP checksum and BTH byte 4 set to all ones.
pub(super) fn icrc_by_definition(datagram_without_icrc: &[u8]) -> u32 {
    let mut masked = vec![0xFF; 8];
    masked.extend_from_slice(datagram_without_icrc);
    for at in [1, 8, 10, 11, 26, 27, 32] {
        if let Some(byte) = masked.get_mut(8 + at) {
            *byte = 0xFF;
        }
    }
    crc32fast::hash(&masked)
}

/// Emit IPv4/UDP/BTH…/payload/pad/ICRC into `out` (cleared first; left empty on error).
/// Computes `PadCnt` (written into the BTH regardless of `pkt.bth.pad_count`), the IPv4 total
/// length and header checksum, the UDP length (checksum 0) and the ICRC.
///
/// Errors: `UnknownOpcode`; `MissingHeader` / `UnexpectedHeader` if the extension headers are not
/// exactly those the opcode table lists; `UnexpectedPayload`; `FieldTooWide`; `BadLength` if the
/// datagram would exceed 65535 bytes.
pub(super) fn emit_datagram(
    ip: &IpUdp,
    pkt: &Packet<'_>,
    out: &mut Vec<u8>,
) -> Result<(), PacketError> {
    out.clear();
    let info = pkt.check_in_order()?;
    let pad = pkt.pad_len();
    let len = IPV4_UDP_LEN + info.header_len + pkt.payload.len() + pad + ICRC_LEN;
    let total_len = u16::try_from(len)
        .map_err(|_| PacketError::BadLength("datagram longer than an IPv4 total length allows"))?;

    // Every header, assembled on the stack and appended at once: this runs for every packet.
    let mut head = [0u8; IPV4_UDP_LEN + MAX_HEADER_LEN];
    let (ipv4, rest) = head.split_at_mut(IPV4_LEN);
    let ipv4: &mut [u8; IPV4_LEN] = ipv4.try_into().expect("split at its length");
    let flags: u16 = if ip.dont_fragment { IP_DF } else { 0 };
    ipv4[0] = IPV4_VERSION_IHL;
    ipv4[1] = ip.tos;
    ipv4[2..4].copy_from_slice(&total_len.to_be_bytes());
    ipv4[4..6].copy_from_slice(&ip.ident.to_be_bytes());
    ipv4[6..8].copy_from_slice(&flags.to_be_bytes());
    ipv4[8] = ip.ttl;
    ipv4[9] = IP_PROTO_UDP;
    ipv4[12..16].copy_from_slice(&ip.src);
    ipv4[16..20].copy_from_slice(&ip.dst);
    let checksum = !ones_complement_sum(ipv4);
    ipv4[10..12].copy_from_slice(&checksum.to_be_bytes());

    // UDP length = total - IPv4 header, which fits because total_len did. The UDP checksum
    // stays 0: RoCEv2 does not use it (the ICRC covers it all).
    let (udp, transport) = rest.split_at_mut(UDP_LEN);
    udp[0..2].copy_from_slice(&ip.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&(total_len - IPV4_LEN as u16).to_be_bytes());
    pkt.write_headers(transport.try_into().expect("sized for the longest headers"));

    out.reserve(len);
    out.extend_from_slice(&head[..IPV4_UDP_LEN + info.header_len]);
    out.extend_from_slice(pkt.payload);
    out.extend_from_slice(&[0; 3][..pad]);
    let icrc = icrc_by_definition(out);
    out.extend_from_slice(&icrc.to_le_bytes());
    Ok(())
}

/// Parse and check a datagram: IPv4 version, IHL 5, no fragmentation, protocol 17, header
/// checksum and total length (= `bytes.len()`); UDP destination port 4791 and length; the ICRC;
/// then BTH `TVer` 0, a known opcode, header lengths per the opcode table and the pad count.
/// Never panics on any input. The UDP checksum is ignored (RoCEv2 senders leave it 0).
pub(super) fn parse_datagram(bytes: &[u8]) -> Result<(IpUdp, Packet<'_>), PacketError> {
    let got = bytes.len();
    let ipv4: &[u8; IPV4_LEN] =
        bytes.first_chunk().ok_or(PacketError::Truncated { needed: IPV4_LEN, got })?;
    if ipv4[0] >> 4 != 4 {
        return Err(PacketError::NotIpv4);
    }
    if ipv4[0] != IPV4_VERSION_IHL {
        return Err(PacketError::BadIpHeader("IHL is not 5 (IPv4 options are not supported)"));
    }
    let total_len = usize::from(u16::from_be_bytes([ipv4[2], ipv4[3]]));
    if total_len < IPV4_UDP_LEN {
        return Err(PacketError::BadLength("IPv4 total length is shorter than IPv4 + UDP"));
    }
    if total_len > got {
        return Err(PacketError::Truncated { needed: total_len, got });
    }
    if total_len < got {
        return Err(PacketError::BadLength("bytes beyond the IPv4 total length"));
    }
    let flags = u16::from_be_bytes([ipv4[6], ipv4[7]]);
    if flags & IP_MF_AND_OFFSET != 0 {
        return Err(PacketError::BadIpHeader("fragmented datagram"));
    }
    if ipv4[9] != IP_PROTO_UDP {
        return Err(PacketError::BadIpHeader("protocol is not UDP"));
    }
    if ones_complement_sum(ipv4) != 0xFFFF {
        return Err(PacketError::BadIpHeader("header checksum mismatch"));
    }

    let udp_and_rest = bytes.get(IPV4_LEN..).unwrap_or(&[]);
    let udp: &[u8; UDP_LEN] =
        udp_and_rest.first_chunk().ok_or(PacketError::Truncated { needed: IPV4_UDP_LEN, got })?;
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    if dst_port != ROCE_UDP_PORT {
        return Err(PacketError::NotRoce { dst_port });
    }
    if usize::from(u16::from_be_bytes([udp[4], udp[5]])) != total_len - IPV4_LEN {
        return Err(PacketError::BadLength("UDP length disagrees with the IPv4 total length"));
    }

    let min_len = IPV4_UDP_LEN + Bth::LEN + ICRC_LEN;
    let (covered, icrc) = bytes
        .split_last_chunk::<ICRC_LEN>()
        .filter(|_| got >= min_len)
        .ok_or(PacketError::Truncated { needed: min_len, got })?;
    let expected = icrc_by_definition(covered);
    let carried = u32::from_le_bytes(*icrc);
    if expected != carried {
        return Err(PacketError::BadIcrc { expected, got: carried });
    }

    let transport = covered.get(IPV4_UDP_LEN..).unwrap_or(&[]);
    let bth = Bth::parse(transport)?;
    let info = bth.opcode.info().ok_or(PacketError::UnknownOpcode(bth.opcode.0))?;
    let needed = IPV4_UDP_LEN + info.header_len + ICRC_LEN;
    if got < needed {
        return Err(PacketError::Truncated { needed, got });
    }
    let pkt = Packet::parse_after_bth(bth, info, transport)?;

    let ip = IpUdp {
        src: [ipv4[12], ipv4[13], ipv4[14], ipv4[15]],
        dst: [ipv4[16], ipv4[17], ipv4[18], ipv4[19]],
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        tos: ipv4[1],
        ttl: ipv4[8],
        ident: u16::from_be_bytes([ipv4[4], ipv4[5]]),
        dont_fragment: flags & IP_DF != 0,
    };
    Ok((ip, pkt))
}

/// The folded 16-bit one's-complement sum of an IPv4 header (RFC 1071): 0xFFFF over a header
/// with a correct checksum; its complement is the checksum of a header whose checksum field is 0.
fn ones_complement_sum(header: &[u8; IPV4_LEN]) -> u16 {
    let mut sum: u32 =
        header.chunks_exact(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}
