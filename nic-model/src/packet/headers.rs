//! The IBA transport headers (BTH and the extension headers, IBA 9.2–9.3) as plain field
//! structs with `parse`/`emit` and fixed-size `from_bytes`/`to_bytes`; [`Packet`](super::Packet)
//! stacks them into a whole transport packet.
//!
//! Everything is big-endian on the wire. Which extension headers a packet carries, and in
//! which order, comes from the opcode table ([`OpcodeInfo::flags`](super::OpcodeInfo::flags)),
//! as do their lengths; nothing here matches on individual opcodes.

use super::opcode::{Opcode, AETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, RETH_LEN};
use super::psn::Psn;
use super::PacketError;

/// The largest value a 24-bit wire field (QPN, PSN, MSN) holds.
pub(super) const U24_MAX: u32 = 0x00FF_FFFF;

/// Base Transport Header (BTH, 12 bytes), present in every packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Bth {
    /// `OpCode`: transport and operation.
    pub opcode: Opcode,
    /// `SE`: the requester asks for a solicited event at the responder.
    pub solicited: bool,
    /// `M`: path migration request (APM); softverbs always sends 0.
    pub mig_req: bool,
    /// `PadCnt`: pad bytes after the payload (0–3). Computed on emit; as received on parse.
    pub pad_count: u8,
    /// `P_Key`: partition key (the default partition is 0xFFFF).
    pub pkey: u16,
    /// `FECN` (RoCEv2, byte 4 bit 7): forward congestion notification.
    pub fecn: bool,
    /// `BECN` (RoCEv2, byte 4 bit 6): backward congestion notification, set in a CNP.
    pub becn: bool,
    /// `DestQP`: destination queue pair number (24 bits).
    pub dest_qp: u32,
    /// `A`: the requester asks the responder to acknowledge this packet.
    pub ack_req: bool,
    /// `PSN`: packet sequence number.
    pub psn: Psn,
}

impl Bth {
    /// Bytes of a BTH.
    pub const LEN: usize = BTH_LEN;

    /// Parse the BTH at the start of `bytes`; checks `TVer` is 0 and ignores reserved bits.
    #[inline(always)]
    pub fn parse(bytes: &[u8]) -> Result<Bth, PacketError> {
        Bth::from_bytes(first::<{ Self::LEN }>(bytes)?)
    }

    /// The BTH in these 12 bytes; checks `TVer` is 0 and ignores reserved bits.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Result<Bth, PacketError> {
        let flags = b[1];
        let tver = flags & 0x0F;
        if tver != 0 {
            return Err(PacketError::BadVersion(tver));
        }
        Ok(Bth {
            opcode: Opcode(b[0]),
            solicited: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad_count: (flags >> 4) & 0x03,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: u24_at(b, 5),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(u24_at(b, 9)),
        })
    }

    /// The 12 wire bytes: `TVer` 0, reserved bits 0, `PadCnt` and `DestQP` masked to their
    /// widths (callers check widths first, see [`Packet::emit`](super::Packet::emit)).
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        // Three big-endian words: every packet sent builds one.
        let flags = u8::from(self.solicited) << 7
            | u8::from(self.mig_req) << 6
            | (self.pad_count & 0x03) << 4;
        let ecn = u8::from(self.fecn) << 7 | u8::from(self.becn) << 6;
        let words = [
            u32::from(self.opcode.0) << 24 | u32::from(flags) << 16 | u32::from(self.pkey),
            u32::from(ecn) << 24 | (self.dest_qp & U24_MAX),
            u32::from(self.ack_req) << 31 | self.psn.value(),
        ];
        let mut bytes = [0; Self::LEN];
        for (bytes, word) in bytes.chunks_exact_mut(4).zip(words) {
            bytes.copy_from_slice(&word.to_be_bytes());
        }
        bytes
    }

    /// Append the BTH to `out` (see [`Bth::to_bytes`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// FLUSH Extended Transport Header (FETH, 4 bytes, IBA 1.5 9.3.9; rxe's `struct rxe_feth`):
/// what a FLUSH makes durable and how much of the memory it names. The other 26 bits are
/// reserved: sent as zero, ignored on receipt.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Feth {
    /// Placement type (bits 3–0): bit 0 global visibility, bit 1 persistence
    /// (`IBV_FLUSH_GLOBAL`, `IBV_FLUSH_PERSISTENT`).
    pub placement: u8,
    /// Selectivity (bits 5–4): 0 the RETH's range, 1 the whole MR the R_Key names
    /// (`IBV_FLUSH_RANGE`, `IBV_FLUSH_MR`).
    pub selectivity: u8,
}

impl Feth {
    /// Bytes of a FETH.
    pub const LEN: usize = super::opcode::FETH_LEN;

    /// The FETH in these 4 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Feth {
        let word = u32::from_be_bytes(*b);
        Feth { placement: (word & 0xF) as u8, selectivity: (word >> 4 & 0x3) as u8 }
    }

    /// The 4 wire bytes (the fields masked to their widths, the reserved bits zero).
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let word = u32::from(self.placement & 0xF) | u32::from(self.selectivity & 0x3) << 4;
        word.to_be_bytes()
    }
}

/// RDMA Extended Transport Header (RETH, 16 bytes): the remote buffer of an RDMA WRITE or READ.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Reth {
    /// `Virtual Address` of the remote buffer.
    pub va: u64,
    /// `R_Key` authorising access to it.
    pub rkey: u32,
    /// `DMA Length`: bytes of the whole message (not of this packet).
    pub dma_len: u32,
}

impl Reth {
    /// Bytes of a RETH.
    pub const LEN: usize = RETH_LEN;

    /// Parse the RETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Reth, PacketError> {
        Ok(Reth::from_bytes(first::<{ Self::LEN }>(bytes)?))
    }

    /// The RETH in these 16 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Reth {
        Reth { va: u64_at(b, 0), rkey: u32_at(b, 8), dma_len: u32_at(b, 12) }
    }

    /// The 16 wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.dma_len.to_be_bytes());
        b
    }

    /// Append the RETH to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// Atomic Extended Transport Header (AtomicETH, 28 bytes, packed): the target and operands of
/// COMPARE SWAP and FETCH ADD.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AtomicEth {
    /// `Virtual Address` of the 8-byte remote target.
    pub va: u64,
    /// `R_Key` authorising access to it.
    pub rkey: u32,
    /// `Swap (or Add) Data`: the value swapped in (COMPARE SWAP) or added (FETCH ADD).
    pub swap_add: u64,
    /// `Compare Data` (COMPARE SWAP; ignored by FETCH ADD).
    pub compare: u64,
}

impl AtomicEth {
    /// Bytes of an AtomicETH.
    pub const LEN: usize = ATOMIC_ETH_LEN;

    /// Parse the AtomicETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<AtomicEth, PacketError> {
        Ok(AtomicEth::from_bytes(first::<{ Self::LEN }>(bytes)?))
    }

    /// The AtomicETH in these 28 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> AtomicEth {
        AtomicEth {
            va: u64_at(b, 0),
            rkey: u32_at(b, 8),
            swap_add: u64_at(b, 12),
            compare: u64_at(b, 20),
        }
    }

    /// The 28 wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..].copy_from_slice(&self.compare.to_be_bytes());
        b
    }

    /// Append the AtomicETH to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// Datagram Extended Transport Header (DETH, 8 bytes): the Q_Key and source QP of a UD packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Deth {
    /// `Q_Key` the receiving UD QP must match.
    pub qkey: u32,
    /// `SrcQP`: the sending queue pair number (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Bytes of a DETH.
    pub const LEN: usize = DETH_LEN;
    /// The well-known Q_Key of the General Services Interface (QP1).
    pub const GSI_QKEY: u32 = 0x8001_0000;

    /// Parse the DETH at the start of `bytes` (the reserved byte is ignored).
    pub fn parse(bytes: &[u8]) -> Result<Deth, PacketError> {
        Ok(Deth::from_bytes(first::<{ Self::LEN }>(bytes)?))
    }

    /// The DETH in these 8 bytes (the reserved byte is ignored).
    #[inline]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Deth {
        Deth { qkey: u32_at(b, 0), src_qp: u24_at(b, 5) }
    }

    /// The 8 wire bytes (`SrcQP` masked to 24 bits, the reserved byte 0).
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let [q0, q1, q2, q3] = self.qkey.to_be_bytes();
        let [_, s0, s1, s2] = self.src_qp.to_be_bytes();
        [q0, q1, q2, q3, 0, s0, s1, s2]
    }

    /// Append the DETH to `out` (see [`Deth::to_bytes`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// ACK Extended Transport Header (AETH, 4 bytes): the responder's syndrome (ACK, RNR NAK or NAK)
/// and message sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Aeth {
    /// `Syndrome`: bits 6–5 the kind, bits 4–0 credits, RNR timer or NAK code (see [`Aeth::kind`]).
    pub syndrome: u8,
    /// `MSN`: the responder's count of completed request messages (24 bits).
    pub msn: u32,
}

/// What an AETH syndrome says (IBA 9.7.5.1, Table 44).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AethKind {
    /// Positive acknowledgement with an end-to-end credit count (0x1F: invalid / unlimited).
    Ack {
        /// The 5-bit encoded credit count.
        credits: u8,
    },
    /// Receiver not ready: retry after at least [`rnr_timer_ns`]`(timer)`.
    RnrNak {
        /// The 5-bit RNR NAK timer code.
        timer: u8,
    },
    /// Negative acknowledgement with an error code.
    Nak(NakCode),
    /// A reserved syndrome (kind `10`, or a NAK code the specification does not define).
    Reserved(u8),
}

/// NAK codes carried in bits 4–0 of a NAK syndrome (IBA Table 44).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum NakCode {
    /// The packet's PSN is ahead of the expected PSN (a packet was lost); go back to the MSN.
    PsnSequenceError = 0,
    /// The request is malformed or not supported by the QP.
    InvalidRequest = 1,
    /// Bad R_Key, bounds or access rights at the responder.
    RemoteAccessError = 2,
    /// The responder failed to carry out a valid request.
    RemoteOperationalError = 3,
    /// Invalid RD request (reliable datagram; softverbs never sends it).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code for the value in a NAK syndrome's low 5 bits, if the specification defines it.
    pub const fn from_code(code: u8) -> Option<NakCode> {
        match code {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

impl Aeth {
    /// Bytes of an AETH.
    pub const LEN: usize = AETH_LEN;
    /// Syndrome kind bits (6–5) of an ACK.
    const KIND_ACK: u8 = 0b00;
    /// Syndrome kind bits of an RNR NAK.
    const KIND_RNR_NAK: u8 = 0b01;
    /// Syndrome kind bits of a NAK.
    const KIND_NAK: u8 = 0b11;
    /// The ACK credit value meaning "invalid / unlimited credits", which softverbs always sends.
    pub const CREDITS_INVALID: u8 = 0x1F;

    /// An ACK for messages up to `msn`, with credits invalid (syndrome 0x1F), as rxe sends.
    pub const fn ack(msn: u32) -> Aeth {
        Aeth { syndrome: Self::KIND_ACK << 5 | Self::CREDITS_INVALID, msn }
    }

    /// An RNR NAK asking the requester to wait the time of RNR timer code `timer` (0–31).
    pub const fn rnr_nak(timer: u8, msn: u32) -> Aeth {
        Aeth { syndrome: Self::KIND_RNR_NAK << 5 | (timer & 0x1F), msn }
    }

    /// A NAK with error `code`.
    pub const fn nak(code: NakCode, msn: u32) -> Aeth {
        Aeth { syndrome: Self::KIND_NAK << 5 | code as u8, msn }
    }

    /// Decode the syndrome. The reserved bit 7 is ignored.
    pub const fn kind(&self) -> AethKind {
        let value = self.syndrome & 0x1F;
        match (self.syndrome >> 5) & 0x03 {
            Self::KIND_ACK => AethKind::Ack { credits: value },
            Self::KIND_RNR_NAK => AethKind::RnrNak { timer: value },
            Self::KIND_NAK => match NakCode::from_code(value) {
                Some(code) => AethKind::Nak(code),
                None => AethKind::Reserved(self.syndrome),
            },
            _ => AethKind::Reserved(self.syndrome),
        }
    }

    /// Parse the AETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Aeth, PacketError> {
        Ok(Aeth::from_bytes(first::<{ Self::LEN }>(bytes)?))
    }

    /// The AETH in these 4 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Aeth {
        Aeth { syndrome: b[0], msn: u24_at(b, 1) }
    }

    /// The 4 wire bytes (`MSN` masked to 24 bits).
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let [_, m0, m1, m2] = self.msn.to_be_bytes();
        [self.syndrome, m0, m1, m2]
    }

    /// Append the AETH to `out` (see [`Aeth::to_bytes`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// The minimum wait, in nanoseconds, of RNR NAK timer code `code` (IBA Table 45; only the low
/// 5 bits are used). Code 0 is the longest, 655.36 ms; 1–31 run from 0.01 ms to 491.52 ms.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    /// IBA Table 45, in units of 10 µs (0.01 ms), index = timer code.
    const TABLE_10US: [u64; 32] = [
        65536, // 0: 655.36 ms
        1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, // 1..16: 0.01 .. 2.56 ms
        384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, // 17..26: 3.84 .. 81.92 ms
        12288, 16384, 24576, 32768, 49152, // 27..31: 122.88 .. 491.52 ms
    ];
    TABLE_10US[(code & 0x1F) as usize] * 10_000
}

/// The first `N` bytes of `bytes`, or `Truncated`.
fn first<const N: usize>(bytes: &[u8]) -> Result<&[u8; N], PacketError> {
    bytes.first_chunk().ok_or(PacketError::Truncated { needed: N, got: bytes.len() })
}

/// The big-endian 24-bit value at `at` in a header.
fn u24_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

/// The big-endian 32-bit value at `at` in a header.
fn u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The big-endian 64-bit value at `at` in a header.
fn u64_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    let mut v = [0; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bth_fields_round_trip() {
        let bth = Bth {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            pkey: 0xABCD,
            fecn: true,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: Psn::new(0xFE_DCBA),
        };
        let mut out = Vec::new();
        bth.emit(&mut out);
        assert_eq!(out, [0x0A, 0xE0, 0xAB, 0xCD, 0x80, 0x12, 0x34, 0x56, 0x80, 0xFE, 0xDC, 0xBA]);
        assert_eq!(Bth::parse(&out), Ok(bth));
    }

    #[test]
    fn bth_rejects_other_versions_and_short_input() {
        let mut bytes = [0u8; 12];
        bytes[1] = 0x01;
        assert_eq!(Bth::parse(&bytes), Err(PacketError::BadVersion(1)));
        assert_eq!(Bth::parse(&bytes[..11]), Err(PacketError::Truncated { needed: 12, got: 11 }));
    }

    #[test]
    fn bth_ignores_reserved_bits() {
        let mut bytes = [0u8; 12];
        bytes[4] = 0x3F;
        bytes[8] = 0x7F;
        assert_eq!(Bth::parse(&bytes), Ok(Bth::default()));
    }

    #[test]
    fn aeth_syndromes() {
        assert_eq!(Aeth::ack(7), Aeth { syndrome: 0x1F, msn: 7 });
        assert_eq!(Aeth::ack(7).kind(), AethKind::Ack { credits: 31 });
        assert_eq!(Aeth::rnr_nak(14, 1).syndrome, 0x2E);
        assert_eq!(Aeth::rnr_nak(14, 1).kind(), AethKind::RnrNak { timer: 14 });
        assert_eq!(Aeth::nak(NakCode::PsnSequenceError, 1).syndrome, 0x60);
        assert_eq!(Aeth::nak(NakCode::RemoteAccessError, 1).syndrome, 0x62);
        for code in [
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ] {
            assert_eq!(Aeth::nak(code, 0).kind(), AethKind::Nak(code));
            assert_eq!(NakCode::from_code(code as u8), Some(code));
        }
        assert_eq!(Aeth { syndrome: 0x65, msn: 0 }.kind(), AethKind::Reserved(0x65));
        assert_eq!(Aeth { syndrome: 0x40, msn: 0 }.kind(), AethKind::Reserved(0x40));
        assert_eq!(Aeth { syndrome: 0x9F, msn: 0 }.kind(), AethKind::Ack { credits: 31 });
    }

    #[test]
    fn rnr_timer_values() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(25), 61_440_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(rnr_timer_ns(32 + 14), rnr_timer_ns(14));
    }

    #[test]
    fn rnr_timer_table_follows_the_spec_progression() {
        // From code 2 on the table doubles every two codes: 2k -> 0.01 ms * 2^k,
        // 2k+1 -> 0.015 ms * 2^k; and each code waits longer than the one before.
        for code in 2..32u8 {
            let k = u32::from(code / 2);
            let expected = if code % 2 == 0 { 10_000 << k } else { 15_000 << k };
            assert_eq!(rnr_timer_ns(code), expected, "code {code}");
            assert!(rnr_timer_ns(code) > rnr_timer_ns(code - 1));
        }
        assert!(rnr_timer_ns(0) > rnr_timer_ns(31));
    }

    #[test]
    fn deth_masks_and_reads_reserved_byte_as_ignored() {
        let deth = Deth { qkey: Deth::GSI_QKEY, src_qp: 1 };
        let mut out = Vec::new();
        deth.emit(&mut out);
        assert_eq!(out, [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]);
        out[4] = 0xFF;
        assert_eq!(Deth::parse(&out), Ok(deth));
    }
}
