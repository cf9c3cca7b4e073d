//! The IPv4 (20 B, no options) and UDP (8 B, destination port 4791, checksum 0) headers in front of
//! every RoCEv2 transport packet: their fields, how they are written, and the IPv4 checksum.

/// The UDP destination port that identifies RoCEv2.
pub const ROCE_UDP_PORT: u16 = 4791;
/// Bytes of the IPv4 and UDP headers in front of the BTH.
pub const IPV4_UDP_LEN: usize = IPV4_LEN + UDP_LEN;
/// Bytes of an IPv4 header without options.
pub(super) const IPV4_LEN: usize = 20;
/// Bytes of a UDP header.
pub(super) const UDP_LEN: usize = 8;
/// IPv4 version 4, IHL 5 words: the first header byte of every datagram softverbs speaks.
pub(super) const IPV4_VERSION_IHL: u8 = 0x45;
/// IPv4 protocol number of UDP.
pub(super) const IP_PROTO_UDP: u8 = 17;
/// IPv4 flags/fragment-offset bits: Don't Fragment.
pub(super) const IP_DF: u16 = 0x4000;
/// IPv4 flags/fragment-offset bits: More Fragments and the fragment offset.
pub(super) const IP_MF_AND_OFFSET: u16 = 0x3FFF;

/// The IPv4 and UDP fields of a RoCEv2 datagram that are not implied by its content (lengths,
/// checksums, protocol and destination port are).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpUdp {
    /// IPv4 source address.
    pub src: [u8; 4],
    /// IPv4 destination address.
    pub dst: [u8; 4],
    /// UDP source port: per-QP flow entropy in RoCEv2.
    pub src_port: u16,
    /// IPv4 TOS byte: DSCP (traffic class) in bits 7–2, ECN in bits 1–0. Not covered by the ICRC.
    pub tos: u8,
    /// IPv4 time to live (hop limit). Not covered by the ICRC.
    pub ttl: u8,
    /// IPv4 identification.
    pub ident: u16,
    /// IPv4 Don't Fragment flag.
    pub dont_fragment: bool,
}

impl Default for IpUdp {
    /// TOS 0, TTL 64, identification 0, DF set, UDP source port 49152, addresses 0.0.0.0.
    fn default() -> IpUdp {
        IpUdp {
            src: [0; 4],
            dst: [0; 4],
            src_port: 49152,
            tos: 0,
            ttl: 64,
            ident: 0,
            dont_fragment: true,
        }
    }
}

/// The IPv4 and UDP headers of a datagram of `total_len` bytes, built as big-endian words with
/// the IPv4 checksum summed from them directly.
#[inline(always)]
pub(super) fn write_ip_udp(ip: &IpUdp, total_len: u16, out: &mut [u8; IPV4_UDP_LEN]) {
    let flags: u16 = if ip.dont_fragment { IP_DF } else { 0 };
    let version_tos_len =
        u32::from(IPV4_VERSION_IHL) << 24 | u32::from(ip.tos) << 16 | u32::from(total_len);
    let ident_flags = u32::from(ip.ident) << 16 | u32::from(flags);
    let ttl_protocol = u32::from(ip.ttl) << 24 | u32::from(IP_PROTO_UDP) << 16;
    let (src, dst) = (u32::from_be_bytes(ip.src), u32::from_be_bytes(ip.dst));
    let checksum = !fold_ones_complement(
        [version_tos_len, ident_flags, ttl_protocol, src, dst].map(u64::from).iter().sum(),
    );
    // UDP length = total - IPv4 header, which fits because total_len did. The UDP checksum
    // stays 0: RoCEv2 does not use it (the ICRC covers it all).
    let ports = u32::from(ip.src_port) << 16 | u32::from(ROCE_UDP_PORT);
    let udp_len = u32::from(total_len - IPV4_LEN as u16) << 16;
    let words = [
        version_tos_len,
        ident_flags,
        ttl_protocol | u32::from(checksum),
        src,
        dst,
        ports,
        udp_len,
    ];
    for (bytes, word) in out.chunks_exact_mut(4).zip(words) {
        bytes.copy_from_slice(&word.to_be_bytes());
    }
}

/// The IPv4 and UDP headers (destination port 4791) of a datagram whose UDP payload (BTH to
/// ICRC) is `payload_len` bytes: what a host's kernel put in front of a payload a UDP socket
/// received, rebuilt so that the ICRC can be checked over them. None if too long for IPv4.
pub fn ipv4_udp_header(ip: &IpUdp, payload_len: usize) -> Option<[u8; IPV4_UDP_LEN]> {
    let total = u16::try_from(payload_len.checked_add(IPV4_UDP_LEN)?).ok()?;
    let mut out = [0u8; IPV4_UDP_LEN];
    write_ip_udp(ip, total, &mut out);
    Some(out)
}

/// The folded 16-bit one's-complement sum of an IPv4 header (RFC 1071): 0xFFFF over a header
/// with a correct checksum; its complement is the checksum of a header whose checksum field is 0.
///
/// Summed a 32-bit word at a time and in the machine's byte order, which RFC 1071 allows: the
/// end-around carries fold the same, and the sum of byte-swapped words is the swapped sum.
#[inline]
pub(super) fn ones_complement_sum(header: &[u8; IPV4_LEN]) -> u16 {
    let word = |at: usize| {
        u64::from(u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]))
    };
    fold_ones_complement(word(0) + word(4) + word(8) + word(12) + word(16)).swap_bytes()
}

/// A sum of up to 16 32-bit words folded into 16 bits with end-around carries: their
/// one's-complement sum as 16-bit words.
#[inline]
pub(super) fn fold_ones_complement(sum: u64) -> u16 {
    let sum = (sum & 0xFFFF_FFFF) + (sum >> 32); // under 2^33
    let sum = (sum & 0xFFFF) + (sum >> 16); // under 2^18
    let sum = (sum & 0xFFFF) + (sum >> 16); // at most 0xFFFF + 3
    let sum = (sum & 0xFFFF) + (sum >> 16); // at most 0xFFFF
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_is_the_halfword_sum() {
        // The 16-bit one's-complement sum, folded after every addition: RFC 1071's definition.
        let by_halfwords = |h: &[u8; IPV4_LEN]| {
            h.chunks_exact(2).fold(0u32, |sum, w| {
                let sum = sum + u32::from(u16::from_be_bytes([w[0], w[1]]));
                (sum & 0xFFFF) + (sum >> 16)
            }) as u16
        };
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..20_000 {
            let mut header = [0u8; IPV4_LEN];
            for byte in &mut header {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
            if round % 3 == 0 {
                header[..10].fill(0xFF);
            }
            assert_eq!(ones_complement_sum(&header), by_halfwords(&header), "{header:02x?}");
        }
        assert_eq!(ones_complement_sum(&[0; IPV4_LEN]), 0);
        assert_eq!(ones_complement_sum(&[0xFF; IPV4_LEN]), 0xFFFF);
    }
}
