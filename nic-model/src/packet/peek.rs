//! The receive fast paths: an RC SEND ONLY or an RC ACKNOWLEDGE read straight from the datagram's
//! bytes, without building a [`Packet`](super::Packet), under exactly the checks
//! [`parse_datagram`](super::parse_datagram) makes (property tests hold the two to that).

use super::datagram::{checked_datagram, Checked, Icrc};
use super::headers::{Aeth, Bth};
use super::ipv4_udp::IPV4_UDP_LEN;
use super::opcode::{OpFlags, Opcode, IMMDT_LEN};

/// Where an RC SEND ONLY's payload starts, from the opcode table.
const SEND_ONLY_HEADER_LEN: usize = Opcode::RC_SEND_ONLY.row().header_len;
/// Where an RC SEND ONLY WITH IMMEDIATE's payload starts.
const SEND_ONLY_IMM_HEADER_LEN: usize = Opcode::RC_SEND_ONLY_WITH_IMMEDIATE.row().header_len;
/// Where an RC SEND ONLY WITH IMMEDIATE's ImmDt starts.
const SEND_ONLY_IMMDT_AT: usize = Opcode::RC_SEND_ONLY_WITH_IMMEDIATE
    .row()
    .header_offset(OpFlags::IMMDT)
    .expect("SEND ONLY WITH IMMEDIATE carries ImmDt");
// The peek reads ImmDt as whatever follows `SEND_ONLY_IMMDT_AT` in the headers: the 4 bytes that
// end them, and nothing in a plain SEND ONLY, whose headers end there.
const _: () = assert!(SEND_ONLY_IMMDT_AT + IMMDT_LEN == SEND_ONLY_IMM_HEADER_LEN);
const _: () = assert!(SEND_ONLY_HEADER_LEN == SEND_ONLY_IMMDT_AT);

/// Where an RC ACKNOWLEDGE's headers end (it carries no payload), from the opcode table.
const ACKNOWLEDGE_HEADER_LEN: usize = Opcode::RC_ACKNOWLEDGE.row().header_len;
/// Where an RC ACKNOWLEDGE's AETH starts.
const ACKNOWLEDGE_AETH_AT: usize = Opcode::RC_ACKNOWLEDGE
    .row()
    .header_offset(OpFlags::AETH)
    .expect("an ACKNOWLEDGE carries an AETH");
// The AETH ends the headers, so the bytes from `ACKNOWLEDGE_AETH_AT` are exactly an AETH.
const _: () = assert!(ACKNOWLEDGE_AETH_AT + Aeth::LEN == ACKNOWLEDGE_HEADER_LEN);

/// What the responder's fast path needs of an RC SEND ONLY, with or without immediate data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendOnly<'a> {
    /// IPv4 source address (the requester's port).
    pub(crate) src: [u8; 4],
    /// The BTH.
    pub(crate) bth: Bth,
    /// The immediate data of SEND ONLY WITH IMMEDIATE.
    pub(crate) imm: Option<u32>,
    /// The payload, without pad.
    pub(crate) payload: &'a [u8],
}

/// [`parse_datagram`] for the packet latency waits on: if `bytes` is a datagram that
/// `parse_datagram` accepts and its packet is an RC SEND ONLY, with or without immediate data,
/// the fields a responder needs, read without building a [`Packet`]; otherwise `None`, and the
/// caller parses it in full (which also says what is wrong with a bad one). Every check is
/// `parse_datagram`'s: the datagram's are shared, and those of the transport packet are the
/// ones `Packet::parse` makes for these two opcodes (a property test holds the two to that).
///
/// [`parse_datagram`]: super::parse_datagram
/// [`Packet`]: super::Packet
#[inline]
pub(crate) fn peek_rc_send_only(bytes: &[u8], icrc: Icrc) -> Option<SendOnly<'_>> {
    let Checked { ipv4, transport, .. } = checked_datagram(bytes, icrc).ok()?;
    let bth = Bth::parse(transport).ok()?;
    let header_len = match bth.opcode {
        Opcode::RC_SEND_ONLY => SEND_ONLY_HEADER_LEN,
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE => SEND_ONLY_IMM_HEADER_LEN,
        _ => return None,
    };
    let (headers, rest) = transport.split_at_checked(header_len)?;
    // As `Packet::parse`: payload and pad a multiple of 4 bytes, the pad within them.
    if rest.len() % 4 != 0 {
        return None;
    }
    let payload = rest.get(..rest.len().checked_sub(usize::from(bth.pad_count))?)?;
    let imm =
        headers.get(SEND_ONLY_IMMDT_AT..).and_then(|h| h.try_into().ok()).map(u32::from_be_bytes);
    Some(SendOnly { src: [ipv4[12], ipv4[13], ipv4[14], ipv4[15]], bth, imm, payload })
}

/// What the completer needs of an RC ACKNOWLEDGE (an ACK, an RNR NAK or a NAK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acknowledge {
    /// IPv4 source address (the responder's port).
    pub(crate) src: [u8; 4],
    /// The BTH.
    pub(crate) bth: Bth,
    /// The AETH.
    pub(crate) aeth: Aeth,
}

/// [`parse_datagram`] for the response a requester waits on: if `bytes` is a datagram that
/// `parse_datagram` accepts and its packet is an RC ACKNOWLEDGE, its BTH and AETH, read without
/// building a [`Packet`], and where it comes from; otherwise `None`, and the caller parses it
/// in full. As for
/// [`peek_rc_send_only`], every check is `parse_datagram`'s (a property test holds the two to
/// that): an ACKNOWLEDGE has no payload, and what follows its AETH would have to be a whole
/// number of 4-byte words all of them pad, of which there are at most 3 bytes, so nothing may.
///
/// [`parse_datagram`]: super::parse_datagram
/// [`Packet`]: super::Packet
#[inline]
pub(crate) fn peek_rc_acknowledge(bytes: &[u8], icrc: Icrc) -> Option<Acknowledge> {
    let Checked { ipv4, transport, .. } = checked_datagram(bytes, icrc).ok()?;
    let bth = Bth::parse(transport).ok()?;
    if bth.opcode != Opcode::RC_ACKNOWLEDGE {
        return None;
    }
    let (headers, rest) = transport.split_at_checked(ACKNOWLEDGE_HEADER_LEN)?;
    if !rest.is_empty() || bth.pad_count != 0 {
        return None;
    }
    let aeth = Aeth::from_bytes(headers[ACKNOWLEDGE_AETH_AT..].try_into().ok()?);
    Some(Acknowledge { src: [ipv4[12], ipv4[13], ipv4[14], ipv4[15]], bth, aeth })
}

/// The BTH opcode of a datagram, if it is long enough to have one: what a receiver looks at to
/// pick a fast path before checking anything (each fast path checks the whole datagram).
#[inline]
pub(crate) fn opcode_of(datagram: &[u8]) -> Option<Opcode> {
    datagram.get(IPV4_UDP_LEN).map(|&op| Opcode(op))
}

#[cfg(test)]
mod tests {
    use super::super::datagram::{emit_datagram, parse_datagram_with, ICRC_LEN};
    use super::super::ipv4_udp::IPV4_LEN;
    use super::super::opcode::opcode_table;
    use super::super::testing::{any_ip_udp, reseal, sample};
    use super::super::transport::Packet;
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// What the peek tests do to a datagram before both parsers see it: one byte changed
    /// (`damage`: where, and with what it is XORed), a few bytes cut or added at the end
    /// (`resize`), and then, if `reframe`, lengths, checksum and ICRC made right again.
    fn mangle(bytes: &mut Vec<u8>, damage: Option<(usize, u8)>, resize: i8, reframe: bool) {
        if let Some((at, xor)) = damage {
            let at = at % bytes.len();
            bytes[at] ^= xor.max(1);
        }
        let len = (bytes.len() as isize + isize::from(resize)).max(0) as usize;
        bytes.resize(len, 0);
        if reframe && bytes.len() >= IPV4_UDP_LEN + ICRC_LEN {
            reframe_datagram(bytes);
        }
    }

    /// Make the IPv4 and UDP lengths, the IPv4 checksum and the ICRC of a (resized or damaged)
    /// datagram right again, so that only the transport packet's own checks (opcode, header
    /// lengths, pad) can refuse it.
    fn reframe_datagram(bytes: &mut [u8]) {
        let len = bytes.len() as u16;
        bytes[2..4].copy_from_slice(&len.to_be_bytes());
        bytes[24..26].copy_from_slice(&(len - IPV4_LEN as u16).to_be_bytes());
        reseal(bytes);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The responder's fast parse accepts exactly the datagrams `parse_datagram` accepts
        /// whose packet is an RC SEND ONLY (with or without immediate), and reads the same
        /// fields: SEND ONLYs of any size and fields, other opcodes, and all of them with a
        /// byte changed, cut short or lengthened.
        #[test]
        fn the_send_only_peek_agrees_with_parse(
            ip in any_ip_udp(),
            op in prop_oneof![
                Just(Opcode::RC_SEND_ONLY),
                Just(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE),
                (0..opcode_table().len()).prop_map(|i| opcode_table()[i].opcode),
            ],
            seed in any::<u64>(),
            payload in vec(any::<u8>(), 0..300),
            damage in prop_oneof![
                Just(None),
                (any::<usize>(), any::<u8>()).prop_map(Some),
            ],
            resize in prop_oneof![Just(0i8), -5i8..5],
            reframe in any::<bool>(),
        ) {
            let pkt = sample(op, seed, &payload);
            let mut bytes = Vec::new();
            prop_assume!(emit_datagram(&ip, &pkt, &mut bytes).is_ok());
            mangle(&mut bytes, damage, resize, reframe);
            let send_only = |p: &Packet<'_>| {
                matches!(p.bth.opcode, Opcode::RC_SEND_ONLY | Opcode::RC_SEND_ONLY_WITH_IMMEDIATE)
            };
            // With the ICRC checked, and without (the sender left it unset).
            for icrc in [Icrc::Carried, Icrc::Unset] {
                match (peek_rc_send_only(&bytes, icrc), parse_datagram_with(&bytes, icrc)) {
                    (Some(s), Ok((ip, p))) => {
                        prop_assert!(send_only(&p));
                        prop_assert_eq!(s, SendOnly { src: ip.src, bth: p.bth, imm: p.imm, payload: p.payload });
                    }
                    (None, Ok((_, p))) => prop_assert!(!send_only(&p), "peek refused {:?}", p),
                    (Some(s), Err(e)) => prop_assert!(false, "peek took {:?}, parse refused: {:?}", s, e),
                    (None, Err(_)) => {}
                }
            }
        }
    }

    proptest! {
        /// `peek_rc_acknowledge` takes exactly the datagrams `parse_datagram` accepts as RC
        /// ACKNOWLEDGEs, and reads the same source address, BTH and AETH from them.
        #[test]
        fn the_acknowledge_peek_accepts_what_parse_accepts(
            ip in any_ip_udp(),
            op in prop_oneof![
                3 => Just(Opcode::RC_ACKNOWLEDGE),
                1 => (0..opcode_table().len()).prop_map(|i| opcode_table()[i].opcode),
            ],
            seed in any::<u64>(),
            payload in vec(any::<u8>(), 0..40),
            pad in prop_oneof![3 => Just(0u8), 1 => 1u8..4],
            damage in prop_oneof![
                3 => Just(None),
                1 => (any::<usize>(), any::<u8>()).prop_map(Some),
            ],
            resize in prop_oneof![Just(0i8), -5i8..9],
            reframe in any::<bool>(),
        ) {
            let pkt = sample(op, seed, &payload);
            let mut bytes = Vec::new();
            prop_assume!(emit_datagram(&ip, &pkt, &mut bytes).is_ok());
            // A pad count with or without the bytes it counts (`resize` adds some; `reframe`
            // makes them count).
            bytes[IPV4_UDP_LEN + 1] = (bytes[IPV4_UDP_LEN + 1] & !0x30) | (pad << 4);
            mangle(&mut bytes, damage, resize, reframe);
            for icrc in [Icrc::Carried, Icrc::Unset] {
                match (peek_rc_acknowledge(&bytes, icrc), parse_datagram_with(&bytes, icrc)) {
                    (Some(a), Ok((ip, p))) => {
                        prop_assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
                        prop_assert_eq!(Some(a), p.aeth.map(|aeth| Acknowledge { src: ip.src, bth: p.bth, aeth }));
                    }
                    (None, Ok((_, p))) => prop_assert_ne!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE, "peek refused {:?}", p),
                    (Some(a), Err(e)) => prop_assert!(false, "peek took {:?}, parse refused: {:?}", a, e),
                    (None, Err(_)) => {}
                }
            }
        }
    }
}
