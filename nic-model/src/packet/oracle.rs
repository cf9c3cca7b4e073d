//! The test oracle of the datagram codec: the rules of a RoCEv2-over-IPv4 datagram written a
//! second time, from the documents rather than from the codec, so that an error in one of the
//! codec's checks makes the two disagree (the tests in `datagram/tests.rs` compare them on every
//! opcode, every IPv4/UDP byte value and random and mutated datagrams; `oracle/tests.rs` shows a
//! wrong rule being caught).
//!
//! What is independent: the field positions, read and written by offset from the header
//! diagrams of RFC 791 (IPv4), RFC 768 (UDP) and IBA 9.2–9.3 (BTH and extension headers); the
//! IPv4 checksum (RFC 1071's 16-bit one's-complement sum, folded after every addition); the
//! headers each opcode carries (its own table, from IBA Table 38, not `opcode.rs`); the RoCEv2
//! port and the ICRC with its masked fields (IBA Annex A17), the CRC by `crc32fast`, not
//! `icrc.rs`. Nothing here calls a codec function: it uses only the plain field structs
//! ([`Packet`], [`Bth`], …, and [`Psn`]'s 24-bit wrapper) to state its answers, and the codec's [`PacketError`] values (the
//! codec's documented error for each broken rule, checked in the codec's documented order) so
//! that both answers can be compared with `==`.
//!
//! The golden frames it is tried on are the wire-format reference's (`testing.rs`).

use super::headers::{Aeth, AtomicEth, Bth, Deth, Feth, Reth};
use super::ipv4_udp::IpUdp;
use super::opcode::Opcode;
use super::psn::Psn;
use super::transport::Packet;
use super::PacketError;

// RFC 791, 3.1 "Internet Header Format": byte offsets of the fields softverbs reads.
/// Version (bits 7–4) and IHL, the header length in 32-bit words (bits 3–0).
const IP_VERSION_IHL: usize = 0;
/// Type of Service (DSCP and ECN since RFC 2474/3168).
const IP_TOS: usize = 1;
/// Total Length: header and data, in bytes.
const IP_TOTAL_LENGTH: usize = 2;
/// Identification.
const IP_IDENTIFICATION: usize = 4;
/// Flags (bit 15 reserved, bit 14 DF, bit 13 MF) and Fragment Offset (bits 12–0).
const IP_FLAGS_FRAGMENT: usize = 6;
/// Time to Live.
const IP_TTL: usize = 8;
/// Protocol.
const IP_PROTOCOL: usize = 9;
/// Header Checksum.
const IP_CHECKSUM: usize = 10;
/// Source Address.
const IP_SOURCE: usize = 12;
/// Destination Address.
const IP_DESTINATION: usize = 16;
/// An IPv4 header without options: IHL 5 words.
const IP_HEADER: usize = 5 * 4;
/// Assigned protocol number of UDP (RFC 790 / IANA).
const PROTOCOL_UDP: u8 = 17;
/// Don't Fragment, in the 16-bit flags/fragment word.
const FLAG_DF: u16 = 1 << 14;
/// More Fragments, in the same word.
const FLAG_MF: u16 = 1 << 13;
/// The 13-bit Fragment Offset, in the same word.
const FRAGMENT_OFFSET: u16 = (1 << 13) - 1;

// RFC 768 "Format": byte offsets in the UDP header, which directly follows the IPv4 header.
/// Source Port.
const UDP_SOURCE_PORT: usize = 0;
/// Destination Port.
const UDP_DESTINATION_PORT: usize = 2;
/// Length: header and data, in bytes.
const UDP_LENGTH: usize = 4;
/// Checksum (0: none computed; RoCEv2 senders leave it 0 and receivers ignore it).
const UDP_CHECKSUM: usize = 6;
/// Bytes of a UDP header.
const UDP_HEADER: usize = 8;
/// The UDP destination port assigned to RoCEv2 (IBA Annex A17; IANA "roce").
const ROCEV2_PORT: u16 = 4791;

// IBA 9.2, the Base Transport Header: byte offsets.
/// OpCode: transport service (bits 7–5) and operation (bits 4–0).
const BTH_OPCODE: usize = 0;
/// SE (bit 7), M (bit 6), PadCnt (bits 5–4), TVer (bits 3–0).
const BTH_SE_M_PAD_TVER: usize = 1;
/// P_Key.
const BTH_PKEY: usize = 2;
/// The reserved byte "resv8a"; RoCEv2 puts FECN in bit 7 and BECN in bit 6.
const BTH_RESV8A: usize = 4;
/// DestQP, 24 bits.
const BTH_DEST_QP: usize = 5;
/// A, the AckReq bit (bit 7; bits 6–0 reserved).
const BTH_ACKREQ: usize = 8;
/// PSN, 24 bits.
const BTH_PSN: usize = 9;
/// Bytes of a BTH.
const BTH: usize = 12;
/// Bytes of the invariant CRC that ends the packet (IBA 7.8; Annex A17 for RoCEv2).
const ICRC: usize = 4;

/// An extension header (IBA 9.3), in the order they follow the BTH (IBA 9.2's packet header
/// format: DETH, then RETH or AtomicETH, AETH, AtomicAckETH, then ImmDt or IETH).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ext {
    /// Datagram ETH: Q_Key 32, reserved 8, SrcQP 24.
    Deth,
    /// RDMA ETH: virtual address 64, R_Key 32, DMA length 32.
    Reth,
    /// Atomic ETH: virtual address 64, R_Key 32, swap (or add) data 64, compare data 64.
    AtomicEth,
    /// ACK ETH: syndrome 8, MSN 24.
    Aeth,
    /// Atomic Acknowledge ETH: original remote data 64.
    AtomicAckEth,
    /// Immediate data 32.
    ImmDt,
    /// Invalidate ETH: R_Key 32.
    Ieth,
    /// FLUSH ETH (IBA 1.5): 26 reserved bits, selectivity 2, placement type 4.
    Feth,
}

/// Every extension header, in IBA order.
const EXT_ORDER: [Ext; 8] = [
    Ext::Deth,
    Ext::Feth,
    Ext::Reth,
    Ext::AtomicEth,
    Ext::Aeth,
    Ext::AtomicAckEth,
    Ext::ImmDt,
    Ext::Ieth,
];

impl Ext {
    /// Its length in bytes (IBA 9.3, each header's figure).
    const fn len(self) -> usize {
        match self {
            Ext::Deth => 8,
            Ext::Reth => 16,
            Ext::AtomicEth => 28,
            Ext::Aeth => 4,
            Ext::AtomicAckEth => 8,
            Ext::ImmDt => 4,
            Ext::Ieth => 4,
            Ext::Feth => 4,
        }
    }

    /// The name the codec's errors give it.
    const fn name(self) -> &'static str {
        match self {
            Ext::Deth => "DETH",
            Ext::Reth => "RETH",
            Ext::AtomicEth => "AtomicETH",
            Ext::Aeth => "AETH",
            Ext::AtomicAckEth => "AtomicAckETH",
            Ext::ImmDt => "ImmDt",
            Ext::Ieth => "IETH",
            Ext::Feth => "FETH",
        }
    }
}

/// What an opcode's packets carry after the BTH.
struct Layout {
    /// The extension headers, in IBA order.
    headers: &'static [Ext],
    /// Whether a payload may follow them.
    payload: bool,
    /// Reserved bytes after the headers (a CNP's 16), sent as zero and ignored.
    reserved: usize,
}

impl Layout {
    /// Bytes from the start of the BTH to the payload.
    fn header_len(&self) -> usize {
        BTH + self.headers.iter().map(|h| h.len()).sum::<usize>() + self.reserved
    }

    /// Whether `ext` is among the headers.
    fn has(&self, ext: Ext) -> bool {
        self.headers.contains(&ext)
    }
}

/// IBA Table 38 (OpCode field), for the opcodes softverbs speaks: RC (transport 000), UC (001:
/// SEND and RDMA WRITE only), UD (011: SEND ONLY with and without immediate) and the RoCEv2 CNP
/// (0x81, Annex A17: BTH and 16 reserved bytes), and IBA 1.5's RC FLUSH (FETH then RETH, no
/// payload) and RC ATOMIC WRITE (RETH, 8 bytes of payload). RD, XRC and reserved codes are
/// `None`.
fn layout(opcode: u8) -> Option<Layout> {
    use Ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Ieth, ImmDt, Reth};
    let l = |headers: &'static [Ext], payload: bool| Some(Layout { headers, payload, reserved: 0 });
    let (transport, operation) = (opcode >> 5, opcode & 0x1F);
    match (transport, operation) {
        // RC and UC: SEND FIRST, MIDDLE, LAST, LAST WITH IMMEDIATE, ONLY, ONLY WITH IMMEDIATE.
        (0 | 1, 0x00..=0x02 | 0x04) => l(&[], true),
        (0 | 1, 0x03 | 0x05) => l(&[ImmDt], true),
        // RDMA WRITE FIRST, MIDDLE, LAST, LAST WITH IMMEDIATE, ONLY, ONLY WITH IMMEDIATE.
        (0 | 1, 0x06 | 0x0A) => l(&[Reth], true),
        (0 | 1, 0x07 | 0x08) => l(&[], true),
        (0 | 1, 0x09) => l(&[ImmDt], true),
        (0 | 1, 0x0B) => l(&[Reth, ImmDt], true),
        // RC only: RDMA READ REQUEST and its RESPONSE FIRST, MIDDLE, LAST, ONLY.
        (0, 0x0C) => l(&[Reth], false),
        (0, 0x0D | 0x0F | 0x10) => l(&[Aeth], true),
        (0, 0x0E) => l(&[], true),
        // ACKNOWLEDGE, ATOMIC ACKNOWLEDGE, CmpSwap, FetchAdd.
        (0, 0x11) => l(&[Aeth], false),
        (0, 0x12) => l(&[Aeth, AtomicAckEth], false),
        (0, 0x13 | 0x14) => l(&[AtomicEth], false),
        // 0x15 reserved; SEND LAST and SEND ONLY WITH INVALIDATE.
        (0, 0x16 | 0x17) => l(&[Ieth], true),
        // IBA 1.5: FLUSH and ATOMIC WRITE.
        (0, 0x1C) => l(&[Feth, Reth], false),
        (0, 0x1D) => l(&[Reth], true),
        // UD: SEND ONLY, SEND ONLY WITH IMMEDIATE.
        (3, 0x04) => l(&[Deth], true),
        (3, 0x05) => l(&[Deth, ImmDt], true),
        // RoCEv2 CNP.
        (4, 0x01) => Some(Layout { headers: &[], payload: false, reserved: 16 }),
        _ => None,
    }
}

/// The big-endian 16-bit field at `at`.
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from(b[at]) << 8 | u16::from(b[at + 1])
}

/// The big-endian 24-bit field at `at`.
fn be24(b: &[u8], at: usize) -> u32 {
    u32::from(b[at]) << 16 | u32::from(b[at + 1]) << 8 | u32::from(b[at + 2])
}

/// The big-endian 32-bit field at `at`.
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from(be16(b, at)) << 16 | u32::from(be16(b, at + 2))
}

/// The big-endian 64-bit field at `at`.
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from(be32(b, at)) << 32 | u64::from(be32(b, at + 4))
}

/// The one's-complement sum of the 16-bit words of `header` (RFC 1071 §1: add each word,
/// adding any carry out of bit 15 back in at once).
fn ones_complement_sum(header: &[u8]) -> u16 {
    let mut sum: u16 = 0;
    for at in (0..header.len()).step_by(2) {
        let (s, carry) = sum.overflowing_add(be16(header, at));
        sum = s + u16::from(carry);
    }
    sum
}

/// The ICRC of a RoCEv2-over-IPv4 datagram without its last four bytes, by its definition
/// (IBA 7.8 and Annex A17): CRC-32 (IEEE 802.3) over 8 bytes of ones standing for the LRH,
/// then a copy of the datagram in which the fields that may change in flight are all ones: the
/// IPv4 TOS, TTL and header checksum, the UDP checksum and the BTH's resv8a byte (FECN, BECN).
pub(super) fn icrc_by_definition(datagram_without_icrc: &[u8]) -> u32 {
    let mut masked = datagram_without_icrc.to_vec();
    let bth = IP_HEADER + UDP_HEADER;
    for at in [
        IP_TOS,
        IP_TTL,
        IP_CHECKSUM,
        IP_CHECKSUM + 1,
        IP_HEADER + UDP_CHECKSUM,
        IP_HEADER + UDP_CHECKSUM + 1,
        bth + BTH_RESV8A,
    ] {
        if let Some(byte) = masked.get_mut(at) {
            *byte = 0xFF;
        }
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[0xFF; 8]);
    crc.update(&masked);
    crc.finalize()
}

/// Emit IPv4 ‖ UDP ‖ BTH ‖ extension headers ‖ payload ‖ pad ‖ ICRC into `out` (cleared first,
/// left empty on error), as [`super::emit_datagram`] promises to.
///
/// Refused, in this order: an opcode without a [`layout`] (`UnknownOpcode`); the first header in
/// IBA order that is missing or should not be there; payload where the opcode carries none; a
/// 24-bit field (DestQP, SrcQP, MSN) wider than 24 bits; a datagram over 65535 bytes.
pub(super) fn emit_datagram(
    ip: &IpUdp,
    pkt: &Packet<'_>,
    out: &mut Vec<u8>,
) -> Result<(), PacketError> {
    out.clear();
    let opcode = pkt.bth.opcode.0;
    let layout = layout(opcode).ok_or(PacketError::UnknownOpcode(opcode))?;
    for ext in EXT_ORDER {
        let present = match ext {
            Ext::Deth => pkt.deth.is_some(),
            Ext::Reth => pkt.reth.is_some(),
            Ext::AtomicEth => pkt.atomic_eth.is_some(),
            Ext::Aeth => pkt.aeth.is_some(),
            Ext::AtomicAckEth => pkt.atomic_ack_eth.is_some(),
            Ext::ImmDt => pkt.imm.is_some(),
            Ext::Ieth => pkt.ieth.is_some(),
            Ext::Feth => pkt.feth.is_some(),
        };
        match (layout.has(ext), present) {
            (true, false) => return Err(PacketError::MissingHeader(ext.name())),
            (false, true) => return Err(PacketError::UnexpectedHeader(ext.name())),
            _ => {}
        }
    }
    if !pkt.payload.is_empty() && !layout.payload {
        return Err(PacketError::UnexpectedPayload(pkt.payload.len()));
    }
    let fits_24 = |v: u32| v < 1 << 24;
    if !fits_24(pkt.bth.dest_qp) {
        return Err(PacketError::FieldTooWide("BTH DestQP"));
    }
    if pkt.deth.is_some_and(|d| !fits_24(d.src_qp)) {
        return Err(PacketError::FieldTooWide("DETH SrcQP"));
    }
    if pkt.aeth.is_some_and(|a| !fits_24(a.msn)) {
        return Err(PacketError::FieldTooWide("AETH MSN"));
    }
    // IBA 9.2: PadCnt bytes bring the payload to a multiple of four.
    let pad = (4 - pkt.payload.len() % 4) % 4;
    let total = IP_HEADER + UDP_HEADER + layout.header_len() + pkt.payload.len() + pad + ICRC;
    if total > usize::from(u16::MAX) {
        return Err(PacketError::BadLength("datagram longer than an IPv4 total length allows"));
    }

    let mut d = vec![0u8; total];
    // RFC 791.
    d[IP_VERSION_IHL] = 4 << 4 | (IP_HEADER / 4) as u8;
    d[IP_TOS] = ip.tos;
    d[IP_TOTAL_LENGTH..][..2].copy_from_slice(&(total as u16).to_be_bytes());
    d[IP_IDENTIFICATION..][..2].copy_from_slice(&ip.ident.to_be_bytes());
    let flags = if ip.dont_fragment { FLAG_DF } else { 0 };
    d[IP_FLAGS_FRAGMENT..][..2].copy_from_slice(&flags.to_be_bytes());
    d[IP_TTL] = ip.ttl;
    d[IP_PROTOCOL] = PROTOCOL_UDP;
    d[IP_SOURCE..][..4].copy_from_slice(&ip.src);
    d[IP_DESTINATION..][..4].copy_from_slice(&ip.dst);
    // RFC 791: the complement of the sum, computed with the checksum field zero.
    let checksum = !ones_complement_sum(&d[..IP_HEADER]);
    d[IP_CHECKSUM..][..2].copy_from_slice(&checksum.to_be_bytes());
    // RFC 768, the checksum left 0.
    let udp = &mut d[IP_HEADER..];
    udp[UDP_SOURCE_PORT..][..2].copy_from_slice(&ip.src_port.to_be_bytes());
    udp[UDP_DESTINATION_PORT..][..2].copy_from_slice(&ROCEV2_PORT.to_be_bytes());
    udp[UDP_LENGTH..][..2].copy_from_slice(&((total - IP_HEADER) as u16).to_be_bytes());
    // IBA 9.2: the BTH, TVer 0 and reserved bits 0.
    let b = &mut d[IP_HEADER + UDP_HEADER..];
    let bth = &pkt.bth;
    b[BTH_OPCODE] = opcode;
    b[BTH_SE_M_PAD_TVER] =
        u8::from(bth.solicited) << 7 | u8::from(bth.mig_req) << 6 | (pad as u8) << 4;
    b[BTH_PKEY..][..2].copy_from_slice(&bth.pkey.to_be_bytes());
    b[BTH_RESV8A] = u8::from(bth.fecn) << 7 | u8::from(bth.becn) << 6;
    b[BTH_DEST_QP..][..3].copy_from_slice(&bth.dest_qp.to_be_bytes()[1..]);
    b[BTH_ACKREQ] = u8::from(bth.ack_req) << 7;
    b[BTH_PSN..][..3].copy_from_slice(&bth.psn.value().to_be_bytes()[1..]);
    // IBA 9.3: each extension header, field by field.
    let mut at = BTH;
    let mut put = |bytes: &[u8]| {
        b[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    if let Some(Deth { qkey, src_qp }) = pkt.deth {
        put(&qkey.to_be_bytes());
        put(&src_qp.to_be_bytes()); // its top byte is DETH's reserved byte, 0
    }
    if let Some(Feth { placement, selectivity }) = pkt.feth {
        // 26 reserved bits, then selectivity (2 bits) and placement type (4 bits).
        put(&[0, 0, 0, (selectivity & 0x03) << 4 | (placement & 0x0F)]);
    }
    if let Some(Reth { va, rkey, dma_len }) = pkt.reth {
        put(&va.to_be_bytes());
        put(&rkey.to_be_bytes());
        put(&dma_len.to_be_bytes());
    }
    if let Some(AtomicEth { va, rkey, swap_add, compare }) = pkt.atomic_eth {
        put(&va.to_be_bytes());
        put(&rkey.to_be_bytes());
        put(&swap_add.to_be_bytes());
        put(&compare.to_be_bytes());
    }
    if let Some(Aeth { syndrome, msn }) = pkt.aeth {
        put(&[syndrome]);
        put(&msn.to_be_bytes()[1..]);
    }
    if let Some(original) = pkt.atomic_ack_eth {
        put(&original.to_be_bytes());
    }
    for word in [pkt.imm, pkt.ieth].into_iter().flatten() {
        put(&word.to_be_bytes());
    }
    let payload_at = IP_HEADER + UDP_HEADER + layout.header_len();
    d[payload_at..][..pkt.payload.len()].copy_from_slice(pkt.payload);
    // The pad and a CNP's reserved bytes are the zeros `d` started with.
    let covered = total - ICRC;
    let icrc = icrc_by_definition(&d[..covered]);
    // Annex A17: the ICRC goes out least significant byte first.
    d[covered..].copy_from_slice(&icrc.to_le_bytes());
    *out = d;
    Ok(())
}

/// Parse and check a datagram as [`super::parse_datagram`] promises to: the answer it must
/// give, field for field, or the error for the first broken rule in its documented order.
pub(super) fn parse_datagram(bytes: &[u8]) -> Result<(IpUdp, Packet<'_>), PacketError> {
    let got = bytes.len();
    let truncated = |needed: usize| PacketError::Truncated { needed, got };

    // RFC 791: version 4, no options (softverbs' choice: IHL 5), Total Length exactly the bytes
    // received, not a fragment (MF clear and offset 0; the reserved flag is not looked at),
    // protocol UDP, and a header whose one's-complement sum is all ones (RFC 1071 §1).
    if got < IP_HEADER {
        return Err(truncated(IP_HEADER));
    }
    let ip = &bytes[..IP_HEADER];
    if ip[IP_VERSION_IHL] >> 4 != 4 {
        return Err(PacketError::NotIpv4);
    }
    if usize::from(ip[IP_VERSION_IHL] & 0x0F) * 4 != IP_HEADER {
        return Err(PacketError::BadIpHeader("IHL is not 5 (IPv4 options are not supported)"));
    }
    let total = usize::from(be16(ip, IP_TOTAL_LENGTH));
    if total < IP_HEADER + UDP_HEADER {
        return Err(PacketError::BadLength("IPv4 total length is shorter than IPv4 + UDP"));
    }
    if total > got {
        return Err(truncated(total));
    }
    if total < got {
        return Err(PacketError::BadLength("bytes beyond the IPv4 total length"));
    }
    let flags = be16(ip, IP_FLAGS_FRAGMENT);
    if flags & FLAG_MF != 0 || flags & FRAGMENT_OFFSET != 0 {
        return Err(PacketError::BadIpHeader("fragmented datagram"));
    }
    if ip[IP_PROTOCOL] != PROTOCOL_UDP {
        return Err(PacketError::BadIpHeader("protocol is not UDP"));
    }
    if ones_complement_sum(ip) != 0xFFFF {
        return Err(PacketError::BadIpHeader("header checksum mismatch"));
    }

    // RFC 768 and Annex A17: to the RoCEv2 port, Length = Total Length − the IPv4 header; the
    // checksum is not checked.
    let udp = &bytes[IP_HEADER..IP_HEADER + UDP_HEADER];
    let dst_port = be16(udp, UDP_DESTINATION_PORT);
    if dst_port != ROCEV2_PORT {
        return Err(PacketError::NotRoce { dst_port });
    }
    if usize::from(be16(udp, UDP_LENGTH)) != total - IP_HEADER {
        return Err(PacketError::BadLength("UDP length disagrees with the IPv4 total length"));
    }

    // Annex A17: room for a BTH and the ICRC, and the ICRC as defined.
    let transport_at = IP_HEADER + UDP_HEADER;
    if got < transport_at + BTH + ICRC {
        return Err(truncated(transport_at + BTH + ICRC));
    }
    let covered = got - ICRC;
    let expected = icrc_by_definition(&bytes[..covered]);
    let carried = u32::from_le_bytes([
        bytes[covered],
        bytes[covered + 1],
        bytes[covered + 2],
        bytes[covered + 3],
    ]);
    if expected != carried {
        return Err(PacketError::BadIcrc { expected, got: carried });
    }

    // IBA 9.2: TVer 0, an opcode of Table 38 that softverbs speaks, its headers all there.
    let t = &bytes[transport_at..covered];
    let tver = t[BTH_SE_M_PAD_TVER] & 0x0F;
    if tver != 0 {
        return Err(PacketError::BadVersion(tver));
    }
    let opcode = t[BTH_OPCODE];
    let layout = layout(opcode).ok_or(PacketError::UnknownOpcode(opcode))?;
    let header_len = layout.header_len();
    if t.len() < header_len {
        return Err(truncated(transport_at + header_len + ICRC));
    }
    // IBA 9.2 PadCnt: payload and pad fill whole 32-bit words, and the pad is within them.
    let after = t.len() - header_len;
    if !after.is_multiple_of(4) {
        return Err(PacketError::BadLength("payload and pad are not a multiple of 4 bytes"));
    }
    let pad = usize::from(t[BTH_SE_M_PAD_TVER] >> 4 & 0x03);
    let Some(payload_len) = after.checked_sub(pad) else {
        return Err(PacketError::BadLength("pad count exceeds the bytes after the headers"));
    };
    if payload_len > 0 && !layout.payload {
        return Err(PacketError::UnexpectedPayload(payload_len));
    }

    let flag = |at: usize, bit: u8| t[at] >> bit & 1 == 1;
    let mut pkt = Packet {
        bth: Bth {
            opcode: Opcode(opcode),
            solicited: flag(BTH_SE_M_PAD_TVER, 7),
            mig_req: flag(BTH_SE_M_PAD_TVER, 6),
            pad_count: pad as u8,
            pkey: be16(t, BTH_PKEY),
            fecn: flag(BTH_RESV8A, 7),
            becn: flag(BTH_RESV8A, 6),
            dest_qp: be24(t, BTH_DEST_QP),
            ack_req: flag(BTH_ACKREQ, 7),
            psn: Psn::new(be24(t, BTH_PSN)),
        },
        deth: None,
        feth: None,
        reth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm: None,
        ieth: None,
        payload: &t[header_len..header_len + payload_len],
    };
    let mut at = BTH;
    for &ext in layout.headers {
        let h = &t[at..at + ext.len()];
        match ext {
            Ext::Deth => pkt.deth = Some(Deth { qkey: be32(h, 0), src_qp: be24(h, 5) }),
            Ext::Reth => {
                pkt.reth = Some(Reth { va: be64(h, 0), rkey: be32(h, 8), dma_len: be32(h, 12) })
            }
            Ext::AtomicEth => {
                pkt.atomic_eth = Some(AtomicEth {
                    va: be64(h, 0),
                    rkey: be32(h, 8),
                    swap_add: be64(h, 12),
                    compare: be64(h, 20),
                })
            }
            Ext::Aeth => pkt.aeth = Some(Aeth { syndrome: h[0], msn: be24(h, 1) }),
            Ext::AtomicAckEth => pkt.atomic_ack_eth = Some(be64(h, 0)),
            Ext::ImmDt => pkt.imm = Some(be32(h, 0)),
            Ext::Ieth => pkt.ieth = Some(be32(h, 0)),
            Ext::Feth => {
                pkt.feth = Some(Feth { placement: h[3] & 0x0F, selectivity: h[3] >> 4 & 0x03 })
            }
        }
        at += ext.len();
    }

    let ip = IpUdp {
        src: [ip[IP_SOURCE], ip[IP_SOURCE + 1], ip[IP_SOURCE + 2], ip[IP_SOURCE + 3]],
        dst: [
            ip[IP_DESTINATION],
            ip[IP_DESTINATION + 1],
            ip[IP_DESTINATION + 2],
            ip[IP_DESTINATION + 3],
        ],
        src_port: be16(udp, UDP_SOURCE_PORT),
        tos: ip[IP_TOS],
        ttl: ip[IP_TTL],
        ident: be16(ip, IP_IDENTIFICATION),
        dont_fragment: flags & FLAG_DF != 0,
    };
    Ok((ip, pkt))
}

mod tests;
