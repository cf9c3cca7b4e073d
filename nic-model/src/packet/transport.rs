//! [`Packet`]: one transport packet, BTH through payload and pad, as the header codecs stacked in
//! the order and with the headers the opcode table lists for its opcode (smoltcp's "Repr").
//!
//! Which extension headers a packet carries comes from the opcode table
//! ([`OpcodeInfo::flags`]); nothing here matches on individual opcodes. The ICRC and the
//! IPv4/UDP encapsulation belong to the datagram layer above.

use super::headers::{Aeth, AtomicEth, Bth, Deth, Feth, Reth, U24_MAX};
use super::opcode::{
    OpFlags, OpcodeInfo, ATOMIC_ACK_ETH_LEN, EXTENSION_HEADERS, EXTENSION_HEADER_FLAGS, IETH_LEN,
    IMMDT_LEN, MAX_HEADER_LEN,
};
use super::PacketError;

/// One transport packet, BTH through payload, in parsed form (smoltcp "Repr" style).
///
/// Exactly the extension headers the opcode table lists for `bth.opcode` are `Some`; the
/// others are `None`. The pad and the ICRC are not represented: they follow from the rest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Packet<'a> {
    /// Base Transport Header.
    pub bth: Bth,
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// FETH (FLUSH).
    pub feth: Option<Feth>,
    /// RETH (RDMA WRITE FIRST/ONLY, RDMA READ REQUEST, FLUSH, ATOMIC WRITE).
    pub reth: Option<Reth>,
    /// AtomicETH (COMPARE SWAP, FETCH ADD).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (ACKNOWLEDGE, ATOMIC ACKNOWLEDGE, READ RESPONSE FIRST/LAST/ONLY).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original remote data an atomic found (ATOMIC ACKNOWLEDGE).
    pub atomic_ack_eth: Option<u64>,
    /// ImmDt: `u32::from_be_bytes` of the 4 wire bytes (… WITH IMMEDIATE).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate (SEND … WITH INVALIDATE).
    pub ieth: Option<u32>,
    /// The payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// A packet with the given BTH and payload and no extension headers.
    pub const fn new(bth: Bth, payload: &'a [u8]) -> Packet<'a> {
        Packet {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
            ieth: None,
            payload,
        }
    }

    /// Bytes BTH..payload+pad (without ICRC). For an unknown opcode, counts a bare BTH.
    pub fn transport_len(&self) -> usize {
        let header_len = self.bth.opcode.info().map_or(Bth::LEN, |info| info.header_len);
        header_len + self.payload.len() + self.pad_len()
    }

    /// Pad bytes that bring the payload to a multiple of 4: the `PadCnt` emit writes.
    pub const fn pad_len(&self) -> usize {
        self.payload.len().wrapping_neg() & 3
    }

    /// Parse a transport packet: `bytes` is BTH..payload+pad, without the ICRC (which only
    /// the RoCEv2 layer can check). Checks `TVer`, the opcode, header lengths and pad count.
    pub fn parse(bytes: &'a [u8]) -> Result<Packet<'a>, PacketError> {
        let bth = Bth::parse(bytes)?;
        let info = bth.opcode.info().ok_or(PacketError::UnknownOpcode(bth.opcode.0))?;
        Packet::parse_after_bth(bth, info, bytes)
    }

    /// [`Packet::parse`] once `bth` (parsed from the start of `bytes`) and its opcode's `info`
    /// are known: the RoCEv2 layer has both already.
    // Always inlined: its two callers then build the 160-byte packet in place instead of
    // copying it out of a return slot, once per received datagram.
    #[inline(always)]
    pub(super) fn parse_after_bth(
        bth: Bth,
        info: &OpcodeInfo,
        bytes: &'a [u8],
    ) -> Result<Packet<'a>, PacketError> {
        let (headers, rest) = bytes
            .split_at_checked(info.header_len)
            .ok_or(PacketError::Truncated { needed: info.header_len, got: bytes.len() })?;

        let mut pkt = Packet::new(bth, &[]);
        let flags = info.flags;
        // Extension headers in IBA order. `headers` is exactly `header_len` long, the sum of
        // their lengths, so each one finds its bytes.
        let mut ext = headers.get(Bth::LEN..).unwrap_or(&[]);
        // SEND, RDMA WRITE MIDDLE/LAST, READ RESPONSE MIDDLE have nothing to look for.
        if flags.intersects(EXTENSION_HEADER_FLAGS) {
            if flags.contains(OpFlags::DETH) {
                pkt.deth = Some(Deth::from_bytes(take(&mut ext)?));
            }
            if flags.contains(OpFlags::FETH) {
                pkt.feth = Some(Feth::from_bytes(take(&mut ext)?));
            }
            if flags.contains(OpFlags::RETH) {
                pkt.reth = Some(Reth::from_bytes(take(&mut ext)?));
            }
            if flags.contains(OpFlags::ATOMIC_ETH) {
                pkt.atomic_eth = Some(AtomicEth::from_bytes(take(&mut ext)?));
            }
            if flags.contains(OpFlags::AETH) {
                pkt.aeth = Some(Aeth::from_bytes(take(&mut ext)?));
            }
            if flags.contains(OpFlags::ATOMIC_ACK_ETH) {
                let orig = take::<ATOMIC_ACK_ETH_LEN>(&mut ext)?;
                pkt.atomic_ack_eth = Some(u64::from_be_bytes(*orig));
            }
            if flags.contains(OpFlags::IMMDT) {
                pkt.imm = Some(u32::from_be_bytes(*take::<IMMDT_LEN>(&mut ext)?));
            }
            if flags.contains(OpFlags::IETH) {
                pkt.ieth = Some(u32::from_be_bytes(*take::<IETH_LEN>(&mut ext)?));
            }
        }
        // Whatever is left of the headers (a CNP's reserved bytes) is ignored.

        if rest.len() % 4 != 0 {
            return Err(PacketError::BadLength("payload and pad are not a multiple of 4 bytes"));
        }
        let payload_len = rest
            .len()
            .checked_sub(usize::from(bth.pad_count))
            .ok_or(PacketError::BadLength("pad count exceeds the bytes after the headers"))?;
        if payload_len > 0 && !flags.contains(OpFlags::PAYLOAD) {
            return Err(PacketError::UnexpectedPayload(payload_len));
        }
        pkt.payload = rest.get(..payload_len).unwrap_or(&[]);
        Ok(pkt)
    }

    /// The extension headers present, as opcode-table flags.
    #[inline]
    fn present_headers(&self) -> OpFlags {
        let flag = |present: bool, flag: OpFlags| if present { flag } else { OpFlags::empty() };
        flag(self.deth.is_some(), OpFlags::DETH)
            | flag(self.feth.is_some(), OpFlags::FETH)
            | flag(self.reth.is_some(), OpFlags::RETH)
            | flag(self.atomic_eth.is_some(), OpFlags::ATOMIC_ETH)
            | flag(self.aeth.is_some(), OpFlags::AETH)
            | flag(self.atomic_ack_eth.is_some(), OpFlags::ATOMIC_ACK_ETH)
            | flag(self.imm.is_some(), OpFlags::IMMDT)
            | flag(self.ieth.is_some(), OpFlags::IETH)
    }

    /// Check that the packet can be emitted: a known opcode, exactly the extension headers the
    /// opcode table lists, payload only where allowed, and 24-bit fields within 24 bits.
    #[inline]
    pub fn check(&self) -> Result<&'static OpcodeInfo, PacketError> {
        // Every packet is checked as it is emitted: the test that passes is a few compares, and
        // only a failing packet walks the headers to name what is wrong.
        let u24 = |value: u32| value <= U24_MAX;
        match self.bth.opcode.info() {
            Some(info)
                if self.present_headers() == info.flags & EXTENSION_HEADER_FLAGS
                    && (self.payload.is_empty() || info.flags.contains(OpFlags::PAYLOAD))
                    && u24(self.bth.dest_qp)
                    && self.deth.is_none_or(|deth| u24(deth.src_qp))
                    && self.aeth.is_none_or(|aeth| u24(aeth.msn)) =>
            {
                Ok(info)
            }
            _ => self.check_in_order(),
        }
    }

    /// [`Packet::check`] one condition at a time, in the order that decides which error a packet
    /// with several faults gets.
    #[cold]
    #[inline(never)]
    pub(super) fn check_in_order(&self) -> Result<&'static OpcodeInfo, PacketError> {
        let info = self.bth.opcode.info().ok_or(PacketError::UnknownOpcode(self.bth.opcode.0))?;
        let present = self.present_headers();
        let wanted = info.flags & EXTENSION_HEADER_FLAGS;
        if present != wanted {
            // The first header, in IBA order, that is missing or should not be there.
            for &(flag, name, _) in &EXTENSION_HEADERS {
                match (wanted.contains(flag), present.contains(flag)) {
                    (true, false) => return Err(PacketError::MissingHeader(name)),
                    (false, true) => return Err(PacketError::UnexpectedHeader(name)),
                    _ => {}
                }
            }
        }
        if !self.payload.is_empty() && !info.flags.contains(OpFlags::PAYLOAD) {
            return Err(PacketError::UnexpectedPayload(self.payload.len()));
        }
        if self.bth.dest_qp > U24_MAX {
            return Err(PacketError::FieldTooWide("BTH DestQP"));
        }
        if self.deth.is_some_and(|deth| deth.src_qp > U24_MAX) {
            return Err(PacketError::FieldTooWide("DETH SrcQP"));
        }
        if self.aeth.is_some_and(|aeth| aeth.msn > U24_MAX) {
            return Err(PacketError::FieldTooWide("AETH MSN"));
        }
        Ok(info)
    }

    /// Append BTH..payload+pad to `out` ([`Packet::transport_len`] bytes). `PadCnt` is computed
    /// from the payload length, whatever `bth.pad_count` says. Nothing is written on error.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), PacketError> {
        let info = self.check()?;
        let mut headers = [0; MAX_HEADER_LEN];
        self.write_headers(&mut headers);
        out.reserve(info.header_len + self.payload.len() + self.pad_len());
        out.extend_from_slice(&headers[..info.header_len]);
        out.extend_from_slice(self.payload);
        out.extend_from_slice(&[0; 3][..self.pad_len()]);
        Ok(())
    }

    /// Write the BTH (with `PadCnt` computed from the payload) and the extension headers into
    /// the front of `headers`, after a successful [`Packet::check`]: they fill its first
    /// `header_len` bytes, and bytes the packet reserves (a CNP's 16) are left as they are,
    /// zero in a zeroed buffer.
    #[inline(always)]
    pub(super) fn write_headers(&self, headers: &mut [u8; MAX_HEADER_LEN]) {
        /// Put `bytes` at `*at` and move past them. The opcode table bounds the headers of
        /// every checked packet by `MAX_HEADER_LEN`.
        fn put<const N: usize>(headers: &mut [u8; MAX_HEADER_LEN], at: &mut usize, bytes: [u8; N]) {
            headers[*at..*at + N].copy_from_slice(&bytes);
            *at += N;
        }
        // pad < 4, so the cast is exact.
        let bth = Bth { pad_count: self.pad_len() as u8, ..self.bth };
        let mut at = 0;
        put(headers, &mut at, bth.to_bytes());
        if let Some(deth) = &self.deth {
            put(headers, &mut at, deth.to_bytes());
        }
        if let Some(feth) = &self.feth {
            put(headers, &mut at, feth.to_bytes());
        }
        if let Some(reth) = &self.reth {
            put(headers, &mut at, reth.to_bytes());
        }
        if let Some(atomic_eth) = &self.atomic_eth {
            put(headers, &mut at, atomic_eth.to_bytes());
        }
        if let Some(aeth) = &self.aeth {
            put(headers, &mut at, aeth.to_bytes());
        }
        if let Some(orig) = self.atomic_ack_eth {
            put(headers, &mut at, orig.to_be_bytes());
        }
        if let Some(imm) = self.imm {
            put(headers, &mut at, imm.to_be_bytes());
        }
        if let Some(rkey) = self.ieth {
            put(headers, &mut at, rkey.to_be_bytes());
        }
    }
}

/// Take the next `N`-byte header off the front of `bytes`.
fn take<'a, const N: usize>(bytes: &mut &'a [u8]) -> Result<&'a [u8; N], PacketError> {
    let (head, tail) =
        bytes.split_first_chunk().ok_or(PacketError::Truncated { needed: N, got: bytes.len() })?;
    *bytes = tail;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::super::opcode::Opcode;
    use super::*;

    #[test]
    fn emit_rejects_wrong_headers() {
        let bth = Bth { opcode: Opcode::RC_RDMA_WRITE_ONLY, ..Bth::default() };
        let mut out = Vec::new();
        assert_eq!(Packet::new(bth, b"x").emit(&mut out), Err(PacketError::MissingHeader("RETH")));
        let pkt = Packet { reth: Some(Reth::default()), imm: Some(1), ..Packet::new(bth, b"x") };
        assert_eq!(pkt.emit(&mut out), Err(PacketError::UnexpectedHeader("ImmDt")));
        let ack = Packet {
            aeth: Some(Aeth::ack(0)),
            ..Packet::new(Bth { opcode: Opcode::RC_ACKNOWLEDGE, ..bth }, b"x")
        };
        assert_eq!(ack.emit(&mut out), Err(PacketError::UnexpectedPayload(1)));
        let unknown = Packet::new(Bth { opcode: Opcode(0x15), ..bth }, &[]);
        assert_eq!(unknown.emit(&mut out), Err(PacketError::UnknownOpcode(0x15)));
        let wide = Packet { bth: Bth { dest_qp: 1 << 24, ..bth }, ..pkt };
        let wide = Packet { imm: None, ..wide };
        assert_eq!(wide.emit(&mut out), Err(PacketError::FieldTooWide("BTH DestQP")));
        assert!(out.is_empty(), "nothing is written on error");
    }

    #[test]
    fn transport_parse_checks_pad_and_payload() {
        let bth = Bth { opcode: Opcode::RC_SEND_ONLY, ..Bth::default() };
        let mut out = Vec::new();
        Packet::new(bth, b"abcde").emit(&mut out).unwrap();
        assert_eq!(out.len(), 12 + 8);
        assert_eq!(out[1] >> 4 & 3, 3);
        let pkt = Packet::parse(&out).unwrap();
        assert_eq!(pkt.payload, b"abcde");
        assert_eq!(pkt.bth.pad_count, 3);
        // Not 4-aligned.
        assert!(matches!(Packet::parse(&out[..19]), Err(PacketError::BadLength(_))));
        // Pad larger than what follows the headers.
        let mut bare = out[..12].to_vec();
        bare[1] |= 0x10;
        assert!(matches!(Packet::parse(&bare), Err(PacketError::BadLength(_))));
        // A header cut short.
        let mut read = Vec::new();
        let req = Packet {
            reth: Some(Reth { va: 1, rkey: 2, dma_len: 3 }),
            ..Packet::new(Bth { opcode: Opcode::RC_RDMA_READ_REQUEST, ..bth }, &[])
        };
        req.emit(&mut read).unwrap();
        assert_eq!(Packet::parse(&read[..20]), Err(PacketError::Truncated { needed: 28, got: 20 }));
        // Payload on a READ REQUEST.
        read.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(Packet::parse(&read), Err(PacketError::UnexpectedPayload(4)));
    }

    #[test]
    fn cnp_reserved_bytes_are_zero_and_ignored() {
        let bth = Bth { opcode: Opcode::CNP, becn: true, dest_qp: 0x22, ..Bth::default() };
        let mut out = Vec::new();
        Packet::new(bth, &[]).emit(&mut out).unwrap();
        assert_eq!(out.len(), 28);
        assert!(out[12..].iter().all(|&b| b == 0));
        out[20] = 0xAA;
        assert_eq!(Packet::parse(&out), Ok(Packet::new(bth, &[])));
    }
}
