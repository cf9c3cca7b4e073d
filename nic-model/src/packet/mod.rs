//! RoCEv2 packets: the IBA transport headers, the opcode table that says which of them each
//! opcode carries, the ICRC, the IPv4/UDP encapsulation the softverbs wire carries, and pcap
//! capture files that Wireshark decodes.
//!
//! Codecs follow smoltcp's shape: plain field structs ([`Bth`], [`Reth`], …, [`Packet`]) with
//! `parse` and `emit`; nothing panics on input, and every length and field is checked on parse.
//! Per-opcode facts live in one table ([`opcode_table`]), never in scattered `match` arms.
//!
//! A datagram on the wire is IPv4 (20 B) ‖ UDP (8 B, port 4791) ‖ BTH ‖ extension headers ‖
//! payload ‖ pad ‖ ICRC (4 B); see [`emit_datagram`] and [`parse_datagram`].
//!
//! The files stack in one direction, each naming only those before it: `psn` (24-bit serial
//! numbers) and `opcode` (the table: headers, lengths, offsets, flags); `headers` (the BTH and
//! extension-header codecs); `transport` ([`Packet`], the headers stacked per the table);
//! `ipv4_udp`, `ipv6_udp` and `icrc` (the encapsulations and their CRC); `datagram` (a whole
//! RoCEv2 datagram, built and checked) and `datagram6` (the same over IPv6, for QPs that send
//! from a link-local GID); then `ack` (the per-QP ACK template) and
//! `peek` (the receive fast paths).
//! `pcap` writes capture files.

use core::fmt;

mod ack;
mod cm_mad;
mod datagram;
mod datagram6;
mod headers;
mod icrc;
mod ipv4_udp;
mod ipv6_udp;
mod opcode;
#[cfg(test)]
mod oracle;
mod pcap;
mod peek;
mod psn;
#[cfg(test)]
mod testing;
mod transport;

pub(crate) use ack::{AckTemplate, ACK_DATAGRAM_LEN};
pub use datagram::{
    datagram_len, emit_datagram, parse_datagram, set_icrc_ipv4, with_icrc_ipv4, Icrc, ICRC_LEN,
};
pub(crate) use datagram::{
    emit_engine_datagram, emit_engine_datagram_into, emit_request_into, engine_datagram_len,
    parse_datagram_with,
};
pub use datagram6::{
    datagram6_len, emit_datagram6, parse_any_datagram, parse_datagram6, set_icrc_ipv6,
};
pub use headers::{rnr_timer_ns, Aeth, AethKind, AtomicEth, Bth, Deth, Feth, NakCode, Reth};
pub use icrc::{icrc_ipv4, icrc_ipv6};
pub use ipv4_udp::{ipv4_udp_header, IpUdp, IPV4_UDP_LEN, ROCE_UDP_PORT};
pub use ipv6_udp::{ipv6_udp_header, Ip6Udp, IPV6_UDP_LEN};
pub use opcode::{
    opcode_table, OpFlags, Opcode, OpcodeInfo, Transport, ATOMIC_ACK_ETH_LEN, CNP_RESERVED_LEN,
    FETH_LEN, IETH_LEN, IMMDT_LEN,
};
pub use pcap::PcapWriter;
pub(crate) use peek::{opcode_of, peek_rc_acknowledge, peek_rc_send_only, SendOnly};
pub use psn::Psn;
pub use transport::Packet;
// The CM's MADs on QP1 (issue 31 item 3).
pub use cm_mad::{
    emit_gsi_datagram, emit_gsi_datagram6, CmAttr, CmDreq, CmIds, CmMad, CmMra, CmMsg, CmPath,
    CmRej, CmRep, CmReq, IpCmHeader, MadError, SidrRep, SidrReq, CM_CLASS_VERSION, CM_DATA_LEN,
    CM_MGMT_CLASS, GSI_QPN, IP_CM_HEADER_LEN, MAD_BASE_VERSION, MAD_HEADER_LEN, MAD_LEN,
    MAD_METHOD_SEND, SERVICE_ID_PS_IB, SERVICE_ID_PS_IPOIB, SERVICE_ID_PS_TCP, SERVICE_ID_PS_UDP,
};

/// Why a datagram or transport packet could not be parsed, or a [`Packet`] could not be emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The bytes end before a header or length says they should (counts are of the buffer
    /// being parsed: the datagram, or the transport packet for [`Packet::parse`]).
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The BTH opcode is not in the opcode table.
    UnknownOpcode(u8),
    /// The BTH `TVer` (transport header version) is not 0.
    BadVersion(u8),
    /// The IP version is not 4.
    NotIpv4,
    /// The IPv4 header is unusable (options, fragmentation, not UDP, bad checksum).
    BadIpHeader(&'static str),
    /// The IPv6 header is unusable (not version 6, extension headers, not UDP).
    BadIpv6Header(&'static str),
    /// The UDP destination port is not the RoCEv2 port, 4791.
    NotRoce {
        /// The port found.
        dst_port: u16,
    },
    /// A length field disagrees with the bytes (IPv4 total length, UDP length, pad, alignment),
    /// or the datagram would not fit an IPv4 total length.
    BadLength(&'static str),
    /// The ICRC computed over the datagram differs from the one it carries.
    BadIcrc {
        /// The ICRC computed over the received bytes.
        expected: u32,
        /// The ICRC the datagram carries.
        got: u32,
    },
    /// Emit: a header the opcode requires is `None`.
    MissingHeader(&'static str),
    /// Emit: a header the opcode does not carry is `Some`.
    UnexpectedHeader(&'static str),
    /// Payload on an opcode that carries none (ACKNOWLEDGE, READ REQUEST, atomics, CNP); the
    /// payload's length.
    UnexpectedPayload(usize),
    /// Emit: a value does not fit its 24-bit wire field (QPN or MSN).
    FieldTooWide(&'static str),
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketError::Truncated { needed, got } => {
                write!(f, "truncated packet: needed {needed} bytes, got {got}")
            }
            PacketError::UnknownOpcode(op) => write!(f, "unknown BTH opcode {op:#04x}"),
            PacketError::BadVersion(v) => {
                write!(f, "BTH transport header version is {v}, expected 0")
            }
            PacketError::NotIpv4 => f.write_str("not an IPv4 packet"),
            PacketError::BadIpHeader(what) => write!(f, "bad IPv4 header: {what}"),
            PacketError::BadIpv6Header(what) => write!(f, "bad IPv6 header: {what}"),
            PacketError::NotRoce { dst_port } => {
                write!(f, "UDP destination port {dst_port} is not the RoCEv2 port {ROCE_UDP_PORT}")
            }
            PacketError::BadLength(what) => write!(f, "bad length: {what}"),
            PacketError::BadIcrc { expected, got } => {
                write!(f, "ICRC mismatch: computed {expected:#010x}, packet carries {got:#010x}")
            }
            PacketError::MissingHeader(h) => {
                write!(f, "the opcode requires a {h} header, but none was given")
            }
            PacketError::UnexpectedHeader(h) => {
                write!(f, "the opcode carries no {h} header, but one was given")
            }
            PacketError::UnexpectedPayload(len) => {
                write!(f, "the opcode carries no payload, but there are {len} payload bytes")
            }
            PacketError::FieldTooWide(field) => write!(f, "{field} does not fit in 24 bits"),
        }
    }
}

impl std::error::Error for PacketError {}
