//! RoCEv2 datagrams, built and checked whole: IPv4 (20 B, no options) ‖ UDP (8 B, destination
//! port 4791, checksum 0) ‖ transport packet ‖ ICRC (4 B).
//!
//! This whole IP datagram is what the softverbs wire carries between ports; the pcap writer adds
//! an Ethernet header only for Wireshark's sake. The engine's own entries (no re-check of the
//! headers it built, a buffer it lends) sit beside the general [`emit_datagram`] and
//! [`parse_datagram`]; the ACK template and the receive peeks build on these.

use super::headers::Bth;
use super::icrc::icrc_ipv4;
use super::ipv4_udp::{
    ones_complement_sum, write_ip_udp, IpUdp, IPV4_LEN, IPV4_UDP_LEN, IPV4_VERSION_IHL, IP_DF,
    IP_MF_AND_OFFSET, IP_PROTO_UDP, ROCE_UDP_PORT, UDP_LEN,
};
use super::opcode::{OpcodeInfo, MAX_HEADER_LEN};
use super::transport::Packet;
use super::PacketError;
use crate::cost::{self, CopyAt};
use crate::small_copy;

/// Bytes of the ICRC that ends every datagram.
pub const ICRC_LEN: usize = 4;

/// Whether a datagram's last [`ICRC_LEN`] bytes hold its ICRC. On a softverbs wire that
/// nothing observes (no capture, tap or fault plan on the sender's side), the engine's fast
/// paths leave it unset and the wire marks the datagram so; a receiver that observes its side
/// sets it before anything sees the datagram, one that does not skips the check
/// (docs/architecture.md, "The ICRC where nobody looks"). Every other datagram carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icrc {
    /// The datagram ends with its ICRC: computed when built, checked when received.
    Carried,
    /// The datagram ends with four zero bytes where its ICRC goes: its sender did not compute
    /// it, and its receiver does not check it.
    Unset,
}

/// Computes the ICRC of a whole IPv4 datagram (at least [`ICRC_LEN`] bytes) and writes it into
/// its last four bytes: a datagram built with [`Icrc::Unset`] made whole, for whatever is
/// about to look at it (a capture, a tap, a fault plan) or to keep it in a queue.
pub fn set_icrc_ipv4(datagram: &mut [u8]) {
    let Some((covered, icrc)) = datagram.split_last_chunk_mut::<ICRC_LEN>() else { return };
    *icrc = icrc_ipv4(covered).to_le_bytes();
}

/// A copy of `datagram` with its ICRC set ([`set_icrc_ipv4`]): for a datagram built with
/// [`Icrc::Unset`] whose bytes are not the caller's to change (a ring slot, a borrowed buffer).
#[cold]
pub fn with_icrc_ipv4(datagram: &[u8]) -> Vec<u8> {
    let mut whole = datagram.to_vec();
    set_icrc_ipv4(&mut whole);
    whole
}

/// Total datagram length [`emit_datagram`] would produce: IPv4 + UDP + transport + ICRC.
pub fn datagram_len(pkt: &Packet<'_>) -> usize {
    IPV4_UDP_LEN + pkt.transport_len() + ICRC_LEN
}

/// Emit IPv4/UDP/BTH…/payload/pad/ICRC into `out` (cleared first; left empty on error).
/// Computes `PadCnt` (written into the BTH regardless of `pkt.bth.pad_count`), the IPv4 total
/// length and header checksum, the UDP length (checksum 0) and the ICRC.
///
/// Errors: `UnknownOpcode`; `MissingHeader` / `UnexpectedHeader` if the extension headers are not
/// exactly those the opcode table lists; `UnexpectedPayload`; `FieldTooWide`; `BadLength` if the
/// datagram would exceed 65535 bytes.
pub fn emit_datagram(ip: &IpUdp, pkt: &Packet<'_>, out: &mut Vec<u8>) -> Result<(), PacketError> {
    out.clear();
    let info = pkt.check()?;
    let total_len = u16::try_from(datagram_len_of(pkt, info))
        .map_err(|_| PacketError::BadLength("datagram longer than an IPv4 total length allows"))?;
    write_datagram(ip, pkt, info, total_len, out);
    Ok(())
}

/// [`emit_datagram`] of a packet the transport engine built: its headers are the ones its
/// opcode's row lists, so they are not checked again on every transmit (except in debug builds),
/// and it is at most one MTU long.
///
/// # Panics
/// If the opcode is not in the table or the datagram exceeds 65535 bytes: engine bugs.
// Not inlined: one call per packet is cheap, and profiles then show what emitting costs.
#[inline(never)]
pub(crate) fn emit_engine_datagram(ip: &IpUdp, pkt: &Packet<'_>, out: &mut Vec<u8>) {
    let (info, total_len) = engine_packet_shape(pkt);
    out.clear();
    write_datagram(ip, pkt, info, total_len, out);
}

/// The opcode row and the datagram length of a packet the engine built, which is checked only
/// in debug builds (the engine builds only what its opcode table allows).
///
/// # Panics
/// If the opcode is not in the table or the datagram exceeds 65535 bytes: engine bugs.
#[inline(always)]
fn engine_packet_shape(pkt: &Packet<'_>) -> (&'static OpcodeInfo, u16) {
    debug_assert_eq!(
        pkt.check().err(),
        None,
        "the engine builds only what its opcode table allows"
    );
    let info = pkt.bth.opcode.info().expect("the engine sends only opcodes from the table");
    let total_len = u16::try_from(datagram_len_of(pkt, info))
        .expect("the engine sends no datagram longer than an MTU and its headers");
    (info, total_len)
}

/// [`datagram_len`] once the opcode's row is known.
#[inline]
fn datagram_len_of(pkt: &Packet<'_>, info: &OpcodeInfo) -> usize {
    IPV4_UDP_LEN + info.header_len + pkt.payload.len() + pkt.pad_len() + ICRC_LEN
}

/// The IPv4 and UDP headers and the transport headers of a checked packet, built on the
/// stack (the first `IPV4_UDP_LEN + info.header_len` bytes are the datagram's).
#[inline(always)]
fn datagram_head(
    ip: &IpUdp,
    pkt: &Packet<'_>,
    total_len: u16,
) -> [u8; IPV4_UDP_LEN + MAX_HEADER_LEN] {
    let mut head = [0u8; IPV4_UDP_LEN + MAX_HEADER_LEN];
    let (ip_udp, transport) =
        head.split_first_chunk_mut::<IPV4_UDP_LEN>().expect("the head holds IPv4 and UDP");
    write_ip_udp(ip, total_len, ip_udp);
    pkt.write_headers(transport.try_into().expect("sized for the longest headers"));
    head
}

/// The datagram of a request the requester's fast path sends (`engine::req::post_now`: a SEND
/// or RDMA WRITE of one packet): what [`emit_engine_datagram_into`] writes for the same packet,
/// built without a [`Packet`]. IPv4 and UDP, the BTH (its `PadCnt` computed), a RETH if
/// `reth`, ImmDt if `imm`, the payload, the pad and the ICRC (zeros if `icrc` is
/// [`Icrc::Unset`]), written to the front of `out`; returns the datagram's length. The headers
/// must be the ones `bth.opcode`'s row lists.
///
/// # Panics
/// If `out` is shorter than the datagram: an engine bug.
#[inline]
pub(crate) fn emit_request_into(
    ip: &IpUdp,
    bth: &Bth,
    reth: Option<&super::Reth>,
    imm: Option<u32>,
    payload: &[u8],
    out: &mut [u8],
    icrc: Icrc,
) -> usize {
    let header_len =
        Bth::LEN + reth.map_or(0, |_| super::Reth::LEN) + imm.map_or(0, |_| super::IMMDT_LEN);
    debug_assert_eq!(bth.opcode.info().map(|i| i.header_len), Some(header_len));
    let pad = payload.len().wrapping_neg() & 3;
    let total = IPV4_UDP_LEN + header_len + payload.len() + pad + ICRC_LEN;
    let out = &mut out[..total];
    let (ip_udp, rest) = out.split_first_chunk_mut::<IPV4_UDP_LEN>().expect("room for IPv4/UDP");
    // Fits: the caller's buffer, at most a direct datagram, is far below 65535 bytes.
    write_ip_udp(ip, total as u16, ip_udp);
    // pad < 4, so the cast is exact.
    rest[..Bth::LEN].copy_from_slice(&Bth { pad_count: pad as u8, ..*bth }.to_bytes());
    let mut at = Bth::LEN;
    if let Some(reth) = reth {
        rest[at..at + super::Reth::LEN].copy_from_slice(&reth.to_bytes());
        at += super::Reth::LEN;
    }
    if let Some(imm) = imm {
        rest[at..at + super::IMMDT_LEN].copy_from_slice(&imm.to_be_bytes());
        at += super::IMMDT_LEN;
    }
    write_body_into(out, IPV4_UDP_LEN + at, payload, icrc);
    total
}

/// The rest of a datagram whose headers fill the first `head_len` bytes of `out`, which is
/// exactly the datagram's length: the payload, the pad (zeros) and the ICRC (zeros if
/// [`Icrc::Unset`]).
#[inline(always)]
fn write_body_into(out: &mut [u8], head_len: usize, payload: &[u8], icrc: Icrc) {
    let covered_len = out.len() - ICRC_LEN;
    let (body, pad) = out[head_len..covered_len].split_at_mut(payload.len());
    small_copy::copy_from_slice(body, payload);
    cost::copied(CopyAt::Packet, payload.len());
    pad.fill(0);
    let value = match icrc {
        Icrc::Carried => icrc_ipv4(&out[..covered_len]),
        Icrc::Unset => 0,
    };
    out[covered_len..].copy_from_slice(&value.to_le_bytes());
}

/// Write the datagram of a checked packet into the empty `out`: the headers are built on the
/// stack and copied as one fixed-size block (cut to their length after), then the payload, the
/// pad, and the ICRC computed over `out` as it stands.
#[inline(always)]
fn write_datagram(
    ip: &IpUdp,
    pkt: &Packet<'_>,
    info: &OpcodeInfo,
    total_len: u16,
    out: &mut Vec<u8>,
) {
    let head = datagram_head(ip, pkt, total_len);
    // A copy of constant size (then cut) costs a few moves; one of the headers' length, a call.
    let covered_len = usize::from(total_len) - ICRC_LEN;
    out.reserve(usize::from(total_len).max(head.len()));
    out.extend_from_slice(&head);
    out.truncate(IPV4_UDP_LEN + info.header_len);
    out.extend_from_slice(pkt.payload);
    cost::copied(CopyAt::Packet, pkt.payload.len());
    out.extend_from_slice(&[0; 3]);
    out.truncate(covered_len);
    let icrc = icrc_ipv4(out);
    out.extend_from_slice(&icrc.to_le_bytes());
    debug_assert_eq!(out.len(), datagram_len(pkt), "datagram_len agrees with what emit writes");
}

/// The length of the datagram [`emit_engine_datagram_into`] writes for `pkt`.
///
/// # Panics
/// If the opcode is not in the table: an engine bug.
pub(crate) fn engine_datagram_len(pkt: &Packet<'_>) -> usize {
    let info = pkt.bth.opcode.info().expect("the engine sends only opcodes from the table");
    datagram_len_of(pkt, info)
}

/// [`emit_engine_datagram`] into `out`, which is exactly [`engine_datagram_len`] bytes, with its
/// ICRC or without (`icrc`).
///
/// # Panics
/// As [`emit_engine_datagram`], or if `out` has another length.
pub(crate) fn emit_engine_datagram_into(ip: &IpUdp, pkt: &Packet<'_>, out: &mut [u8], icrc: Icrc) {
    let (info, total_len) = engine_packet_shape(pkt);
    assert_eq!(out.len(), usize::from(total_len), "the buffer fits the datagram exactly");
    let head = datagram_head(ip, pkt, total_len);
    let head_len = IPV4_UDP_LEN + info.header_len;
    out[..head_len].copy_from_slice(&head[..head_len]);
    write_body_into(out, head_len, pkt.payload, icrc);
}

/// Parse and check a datagram: IPv4 version, IHL 5, no fragmentation, protocol 17, header
/// checksum and total length (= `bytes.len()`); UDP destination port 4791 and length; the ICRC;
/// then BTH `TVer` 0, a known opcode, header lengths per the opcode table and the pad count.
/// Never panics on any input. The UDP checksum is ignored (RoCEv2 senders leave it 0).
#[inline]
pub fn parse_datagram(bytes: &[u8]) -> Result<(IpUdp, Packet<'_>), PacketError> {
    parse_datagram_with(bytes, Icrc::Carried)
}

/// [`parse_datagram`] of a datagram that carries its ICRC or not (`icrc`): with
/// [`Icrc::Unset`], every check but the ICRC's.
#[inline]
pub(crate) fn parse_datagram_with(
    bytes: &[u8],
    icrc: Icrc,
) -> Result<(IpUdp, Packet<'_>), PacketError> {
    let Checked { ipv4, udp, transport } = checked_datagram(bytes, icrc)?;
    let got = bytes.len();
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
        dont_fragment: u16::from_be_bytes([ipv4[6], ipv4[7]]) & IP_DF != 0,
    };
    Ok((ip, pkt))
}

/// A datagram whose IPv4 and UDP headers and ICRC passed [`checked_datagram`].
pub(super) struct Checked<'a> {
    /// The IPv4 header.
    pub(super) ipv4: &'a [u8; IPV4_LEN],
    /// The UDP header.
    pub(super) udp: &'a [u8; UDP_LEN],
    /// The transport packet: BTH through pad, at least a BTH long.
    pub(super) transport: &'a [u8],
}

/// The checks [`parse_datagram`] makes of the IPv4 and UDP headers and the ICRC (which is not
/// checked if the datagram's sender left it [`Icrc::Unset`]).
#[inline(always)]
pub(super) fn checked_datagram(bytes: &[u8], icrc: Icrc) -> Result<Checked<'_>, PacketError> {
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
    let (covered, carried) = bytes
        .split_last_chunk::<ICRC_LEN>()
        .filter(|_| got >= min_len)
        .ok_or(PacketError::Truncated { needed: min_len, got })?;
    if icrc == Icrc::Carried {
        let expected = icrc_ipv4(covered);
        let carried = u32::from_le_bytes(*carried);
        if expected != carried {
            return Err(PacketError::BadIcrc { expected, got: carried });
        }
    }

    let transport = covered.get(IPV4_UDP_LEN..).unwrap_or(&[]);
    Ok(Checked { ipv4, udp, transport })
}

#[cfg(test)]
mod tests;
