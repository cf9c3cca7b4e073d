//! The IPv6 (40 B, no extension headers) and UDP (8 B, destination port 4791, checksum 0)
//! headers in front of a RoCEv2 transport packet sent from an IPv6 GID: their fields, and how
//! they are written and checked. The IPv6 sibling of `ipv4_udp.rs`.

use super::ipv4_udp::{ROCE_UDP_PORT, UDP_LEN};
use super::PacketError;

/// Bytes of an IPv6 header without extension headers.
pub(super) const IPV6_LEN: usize = 40;
/// Bytes of the IPv6 and UDP headers in front of the BTH.
pub const IPV6_UDP_LEN: usize = IPV6_LEN + UDP_LEN;
/// The IPv6 Next Header value of UDP.
const NEXT_HEADER_UDP: u8 = 17;
/// The widest flow label: 20 bits.
const FLOW_LABEL_MASK: u32 = 0x000F_FFFF;

/// The IPv6 and UDP fields of a RoCEv2 datagram that are not implied by its content (lengths,
/// next header, destination port and checksum are).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Ip6Udp {
    /// IPv6 source address: the sender's GID (`sgid_index` entry).
    pub src: [u8; 16],
    /// IPv6 destination address: the `dgid` of the address vector.
    pub dst: [u8; 16],
    /// UDP source port: per-QP flow entropy in RoCEv2.
    pub src_port: u16,
    /// Traffic class (the address vector's `grh.traffic_class`). Not covered by the ICRC.
    pub traffic_class: u8,
    /// Flow label, 20 bits (`grh.flow_label`). Not covered by the ICRC.
    pub flow_label: u32,
    /// Hop limit (`grh.hop_limit`). Not covered by the ICRC.
    pub hop_limit: u8,
}

impl Default for Ip6Udp {
    /// Traffic class 0, flow label 0, hop limit 64, UDP source port 49152, addresses `::`.
    fn default() -> Ip6Udp {
        Ip6Udp {
            src: [0; 16],
            dst: [0; 16],
            src_port: 49152,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    }
}

/// The IPv6 and UDP headers of a datagram whose IPv6 payload (UDP header onwards) is
/// `payload_len` bytes. A flow label wider than 20 bits is cut to 20.
pub(super) fn write_ip6_udp(ip: &Ip6Udp, payload_len: u16, out: &mut [u8; IPV6_UDP_LEN]) {
    let first = 6u32 << 28 | u32::from(ip.traffic_class) << 20 | (ip.flow_label & FLOW_LABEL_MASK);
    out[..4].copy_from_slice(&first.to_be_bytes());
    out[4..6].copy_from_slice(&payload_len.to_be_bytes());
    out[6] = NEXT_HEADER_UDP;
    out[7] = ip.hop_limit;
    out[8..24].copy_from_slice(&ip.src);
    out[24..40].copy_from_slice(&ip.dst);
    out[40..42].copy_from_slice(&ip.src_port.to_be_bytes());
    out[42..44].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
    // UDP length = the IPv6 payload; the checksum stays 0, as rxe sends it (the ICRC covers
    // everything it would).
    out[44..46].copy_from_slice(&payload_len.to_be_bytes());
    out[46..48].fill(0);
}

/// The IPv6 and UDP headers (destination port 4791) of a datagram whose UDP payload (BTH to
/// ICRC) is `payload_len` bytes: what a host's kernel put in front of a payload an IPv6 UDP
/// socket received, rebuilt so that the ICRC can be checked over them (the IPv6 sibling of
/// [`ipv4_udp_header`](super::ipv4_udp_header)). None if too long for an IPv6 payload length.
pub fn ipv6_udp_header(ip: &Ip6Udp, payload_len: usize) -> Option<[u8; IPV6_UDP_LEN]> {
    let len = u16::try_from(payload_len.checked_add(super::ipv4_udp::UDP_LEN)?).ok()?;
    let mut out = [0u8; IPV6_UDP_LEN];
    write_ip6_udp(ip, len, &mut out);
    Some(out)
}

/// Check the IPv6 and UDP headers at the front of `bytes`, a whole datagram: version 6, next
/// header UDP (extension headers are not supported), payload length = the bytes after the
/// header, UDP destination port 4791 and UDP length = the payload. Returns the fields.
pub(super) fn check_ip6_udp(bytes: &[u8]) -> Result<Ip6Udp, PacketError> {
    let got = bytes.len();
    let head: &[u8; IPV6_UDP_LEN] =
        bytes.first_chunk().ok_or(PacketError::Truncated { needed: IPV6_UDP_LEN, got })?;
    let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if first >> 28 != 6 {
        return Err(PacketError::BadIpv6Header("IP version is not 6"));
    }
    if head[6] != NEXT_HEADER_UDP {
        return Err(PacketError::BadIpv6Header(
            "next header is not UDP (extension headers are not supported)",
        ));
    }
    let payload_len = usize::from(u16::from_be_bytes([head[4], head[5]]));
    if IPV6_LEN + payload_len > got {
        return Err(PacketError::Truncated { needed: IPV6_LEN + payload_len, got });
    }
    if IPV6_LEN + payload_len < got {
        return Err(PacketError::BadLength("bytes beyond the IPv6 payload length"));
    }
    let dst_port = u16::from_be_bytes([head[42], head[43]]);
    if dst_port != ROCE_UDP_PORT {
        return Err(PacketError::NotRoce { dst_port });
    }
    if usize::from(u16::from_be_bytes([head[44], head[45]])) != payload_len {
        return Err(PacketError::BadLength("UDP length disagrees with the IPv6 payload length"));
    }
    let mut src = [0; 16];
    src.copy_from_slice(&head[8..24]);
    let mut dst = [0; 16];
    dst.copy_from_slice(&head[24..40]);
    Ok(Ip6Udp {
        src,
        dst,
        src_port: u16::from_be_bytes([head[40], head[41]]),
        traffic_class: (first >> 20) as u8,
        flow_label: first & FLOW_LABEL_MASK,
        hop_limit: head[7],
    })
}
