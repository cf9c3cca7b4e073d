//! The datagram codec's tests: emit and parse against the oracle and golden frames, every
//! check's error, the engine's own entries, and both ways of carrying the ICRC.

use super::super::headers::{Aeth, AethKind, AtomicEth, Deth, Feth, NakCode, Reth};
use super::super::opcode::{opcode_table, Opcode};
use super::super::oracle;
use super::super::psn::Psn;
use super::super::testing::{
    any_ip_udp, datagram, ip_variants, reseal, sample, FRAME_1, FRAME_10, FRAME_12, FRAME_4,
    FRAME_5, FRAME_9,
};
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// The IPv4/UDP fields every golden frame shares.
const GOLDEN_IP: IpUdp = IpUdp {
    src: [10, 0, 0, 1],
    dst: [10, 0, 0, 2],
    src_port: 49152,
    tos: 0x02,
    ttl: 64,
    ident: 0x1234,
    dont_fragment: true,
};

/// Parse a golden datagram, check it re-emits byte-identically, and return the packet.
fn parse_golden(bytes: &[u8]) -> Packet<'_> {
    let (ip, pkt) = parse_datagram(bytes).unwrap();
    assert_eq!(ip, GOLDEN_IP);
    assert_eq!(datagram_len(&pkt), bytes.len());
    let mut out = Vec::new();
    emit_datagram(&ip, &pkt, &mut out).unwrap();
    assert_eq!(out, bytes, "re-emit is byte-identical");
    pkt
}

fn bth(opcode: Opcode, dest_qp: u32, psn: u32, ack_req: bool, pad_count: u8) -> Bth {
    Bth { opcode, pkey: 0xFFFF, dest_qp, ack_req, psn: Psn::new(psn), pad_count, ..Bth::default() }
}

#[test]
fn golden_1_rdma_write_only() {
    let bytes = datagram(FRAME_1);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::RC_RDMA_WRITE_ONLY, 0x11, 0x12_3456, true, 3));
    assert_eq!(pkt.reth, Some(Reth { va: 0x0000_7f00_0000_1000, rkey: 0x1234_5678, dma_len: 13 }));
    assert_eq!(pkt.payload, b"hello, rdma!!");
    assert_eq!(
        Packet { reth: None, payload: &[], ..pkt },
        Packet::new(pkt.bth, &[]),
        "no other extension headers"
    );
    assert_eq!(icrc_ipv4(&bytes[..bytes.len() - 4]), 0xd9b4_895a);
}

#[test]
fn golden_4_rnr_nak() {
    let bytes = datagram(FRAME_4);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::RC_ACKNOWLEDGE, 0x22, 0x12_3457, false, 0));
    assert_eq!(pkt.aeth, Some(Aeth::rnr_nak(14, 1)));
    assert_eq!(pkt.aeth.unwrap().kind(), AethKind::RnrNak { timer: 14 });
    assert_eq!(Packet { aeth: None, ..pkt }, Packet::new(pkt.bth, &[]));
}

#[test]
fn golden_5_psn_sequence_nak() {
    let bytes = datagram(FRAME_5);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::RC_ACKNOWLEDGE, 0x22, 0x12_3457, false, 0));
    assert_eq!(pkt.aeth, Some(Aeth { syndrome: 0x60, msn: 1 }));
    assert_eq!(pkt.aeth.unwrap().kind(), AethKind::Nak(NakCode::PsnSequenceError));
    assert_eq!(Packet { aeth: None, ..pkt }, Packet::new(pkt.bth, &[]));
}

#[test]
fn golden_9_read_response_only() {
    let bytes = datagram(FRAME_9);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0x22, 0x12_3459, false, 0));
    assert_eq!(pkt.aeth, Some(Aeth::ack(2)));
    assert_eq!(pkt.aeth.unwrap().kind(), AethKind::Ack { credits: 0x1F });
    assert_eq!(pkt.payload, b"READDATA");
    assert_eq!(Packet { aeth: None, payload: &[], ..pkt }, Packet::new(pkt.bth, &[]));
}

#[test]
fn golden_10_compare_swap() {
    let bytes = datagram(FRAME_10);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::RC_COMPARE_SWAP, 0x11, 0x12_345a, true, 0));
    assert_eq!(
        pkt.atomic_eth,
        Some(AtomicEth { va: 0x0000_7f00_0000_3000, rkey: 0xbeef, swap_add: 7, compare: 0 })
    );
    assert!(pkt.payload.is_empty());
    assert_eq!(Packet { atomic_eth: None, ..pkt }, Packet::new(pkt.bth, &[]));
}

#[test]
fn golden_12_ud_send_only() {
    let bytes = datagram(FRAME_12);
    let pkt = parse_golden(&bytes);
    assert_eq!(pkt.bth, bth(Opcode::UD_SEND_ONLY, 0x44, 1, false, 1));
    assert_eq!(pkt.deth, Some(Deth { qkey: 0x1111_1111, src_qp: 0x33 }));
    assert_eq!(pkt.payload, b"ud-datagram");
    assert_eq!(Packet { deth: None, payload: &[], ..pkt }, Packet::new(pkt.bth, &[]));
}

#[test]
fn golden_frames_rebuilt_from_fields() {
    // Frame 1 from scratch, with a stale pad count that emit must override.
    let reth = Reth { va: 0x0000_7f00_0000_1000, rkey: 0x1234_5678, dma_len: 13 };
    let pkt = Packet {
        reth: Some(reth),
        ..Packet::new(bth(Opcode::RC_RDMA_WRITE_ONLY, 0x11, 0x12_3456, true, 0), b"hello, rdma!!")
    };
    let mut out = Vec::new();
    emit_datagram(&GOLDEN_IP, &pkt, &mut out).unwrap();
    assert_eq!(out, datagram(FRAME_1));
}

#[test]
fn flipped_bits_fail_the_icrc() {
    let good = datagram(FRAME_1);
    // One bit of the ICRC itself (frame 2 of the reference).
    let mut bad = good.clone();
    let first_icrc_byte = bad.len() - ICRC_LEN;
    bad[first_icrc_byte] ^= 0x01;
    assert_eq!(
        parse_datagram(&bad),
        Err(PacketError::BadIcrc { expected: 0xd9b4_895a, got: 0xd9b4_895b })
    );
    // One payload bit.
    let mut bad = good.clone();
    bad[IPV4_UDP_LEN + 28 + 2] ^= 0x20;
    assert!(matches!(parse_datagram(&bad), Err(PacketError::BadIcrc { .. })));
    // One pad bit.
    let mut bad = good;
    let last_pad_byte = bad.len() - ICRC_LEN - 1;
    bad[last_pad_byte] ^= 0x01;
    assert!(matches!(parse_datagram(&bad), Err(PacketError::BadIcrc { .. })));
}

#[test]
fn mutable_fields_do_not_change_the_icrc() {
    // Frame 17 of the reference: TOS 0x03, TTL 3 and FECN changed in flight.
    let original = datagram(FRAME_1);
    let (ip, pkt) = parse_datagram(&original).unwrap();
    let ip = IpUdp { tos: 0x03, ttl: 3, ..ip };
    let pkt = Packet { bth: Bth { fecn: true, becn: true, ..pkt.bth }, ..pkt };
    let mut out = Vec::new();
    emit_datagram(&ip, &pkt, &mut out).unwrap();
    assert_ne!(out, original);
    assert_eq!(out[out.len() - 4..], original[original.len() - 4..]);
    let (ip2, pkt2) = parse_datagram(&out).unwrap();
    assert_eq!((ip2, pkt2), (ip, pkt));
    // A nonzero UDP checksum is ignored too.
    out[26] = 0x12;
    out[27] = 0x34;
    assert_eq!(parse_datagram(&out), Ok((ip, pkt)));
}

#[test]
fn ip_and_udp_checks() {
    let good = datagram(FRAME_4);
    let with = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        b
    };
    assert_eq!(parse_datagram(&with(0, 0x65)), Err(PacketError::NotIpv4));
    assert!(matches!(parse_datagram(&with(0, 0x46)), Err(PacketError::BadIpHeader(_))));
    assert!(matches!(parse_datagram(&with(9, 6)), Err(PacketError::BadIpHeader(_))));
    assert!(matches!(parse_datagram(&with(6, 0x60)), Err(PacketError::BadIpHeader(_))));
    assert!(matches!(parse_datagram(&with(15, 9)), Err(PacketError::BadIpHeader(_))));
    assert!(matches!(parse_datagram(&with(3, 0x31)), Err(PacketError::Truncated { .. })));
    assert!(matches!(parse_datagram(&with(3, 0x10)), Err(PacketError::BadLength(_))));
    assert_eq!(
        parse_datagram(&good[..good.len() - 1]),
        Err(PacketError::Truncated { needed: good.len(), got: good.len() - 1 })
    );
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(parse_datagram(&trailing), Err(PacketError::BadLength(_))));
    assert_eq!(parse_datagram(&with(23, 0xb8)), Err(PacketError::NotRoce { dst_port: 4792 }));
    assert!(matches!(parse_datagram(&with(25, 0x1d)), Err(PacketError::BadLength(_))));
    assert_eq!(parse_datagram(&[]), Err(PacketError::Truncated { needed: 20, got: 0 }));
}

#[test]
fn transport_errors_behind_a_good_icrc() {
    let good = datagram(FRAME_4);
    let resealed = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        reseal(&mut b);
        b
    };
    assert_eq!(parse_datagram(&resealed(28 + 1, 0x01)), Err(PacketError::BadVersion(1)));
    assert_eq!(parse_datagram(&resealed(28, 0x15)), Err(PacketError::UnknownOpcode(0x15)));
    // An AtomicETH opcode in a datagram with room for an AETH only.
    assert_eq!(
        parse_datagram(&resealed(28, 0x13)),
        Err(PacketError::Truncated { needed: 28 + 40 + 4, got: good.len() })
    );
    // A pad count on a packet without payload.
    assert!(matches!(parse_datagram(&resealed(28 + 1, 0x10)), Err(PacketError::BadLength(_))));
}

#[test]
fn emit_rejects_oversized_datagrams() {
    let payload = vec![0u8; 65536];
    let pkt = Packet::new(bth(Opcode::RC_SEND_MIDDLE, 1, 1, false, 0), &payload);
    let mut out = vec![1, 2, 3];
    assert!(matches!(
        emit_datagram(&IpUdp::default(), &pkt, &mut out),
        Err(PacketError::BadLength(_))
    ));
    assert!(out.is_empty());
    // The largest that fits: payload + pad is a multiple of 4.
    let max = (65535 - IPV4_UDP_LEN - 12 - ICRC_LEN) & !3;
    let pkt = Packet::new(pkt.bth, &payload[..max]);
    emit_datagram(&IpUdp::default(), &pkt, &mut out).unwrap();
    assert_eq!(out.len(), 65532);
    assert_eq!(parse_datagram(&out).unwrap().1, pkt);
    let pkt = Packet::new(pkt.bth, &payload[..max + 1]);
    assert!(emit_datagram(&IpUdp::default(), &pkt, &mut out).is_err());
}

#[test]
fn every_opcode_round_trips() {
    let payload: Vec<u8> = (0..=42).collect();
    for (i, info) in opcode_table().iter().enumerate() {
        for len in [0, 1, 2, 3, 4, 43] {
            let seed = 0x0123_4567_89AB_CDEFu64.rotate_left(i as u32 * 5 + len as u32);
            let pkt = sample(info.opcode, seed, &payload[..len]);
            let ip = IpUdp { src: [192, 168, 0, 1], dst: [192, 168, 0, 2], ..IpUdp::default() };
            let mut out = Vec::new();
            emit_datagram(&ip, &pkt, &mut out).unwrap();
            assert_eq!(out.len(), datagram_len(&pkt), "{}", info.name);
            assert_eq!(out.len() % 4, 0, "datagrams are 4-byte aligned");
            assert_eq!(
                out.len(),
                IPV4_UDP_LEN + info.header_len + pkt.payload.len() + pkt.pad_len() + ICRC_LEN
            );
            assert_eq!(parse_datagram(&out), Ok((ip, pkt)), "{}", info.name);
        }
    }
}

#[test]
fn imm_is_the_big_endian_wire_value() {
    let pkt = Packet {
        imm: Some(0xdead_beef),
        ..Packet::new(bth(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, 1, 1, false, 0), &[])
    };
    let mut out = Vec::new();
    emit_datagram(&IpUdp::default(), &pkt, &mut out).unwrap();
    assert_eq!(out[IPV4_UDP_LEN + 12..IPV4_UDP_LEN + 16], [0xde, 0xad, 0xbe, 0xef]);
}

fn any_packet_bytes() -> impl Strategy<Value = (IpUdp, usize, u64, Vec<u8>)> {
    (any_ip_udp(), 0..opcode_table().len(), any::<u64>(), vec(any::<u8>(), 0..300))
}

#[test]
fn fast_paths_agree_with_the_general_code_for_every_opcode() {
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let (mut fast, mut engine, mut general) = (Vec::new(), Vec::new(), Vec::new());
    for (i, info) in opcode_table().iter().enumerate() {
        for len in (0..=300).chain([4096]) {
            let seed = 0x0123_4567_89AB_CDEFu64.rotate_left(i as u32 * 7 + len as u32);
            let pkt = sample(info.opcode, seed, &payload[..len]);
            for ip in ip_variants() {
                emit_datagram(&ip, &pkt, &mut fast).unwrap();
                oracle::emit_datagram(&ip, &pkt, &mut general).unwrap();
                assert_eq!(fast, general, "{} with {len} bytes, {ip:?}", info.name);
                emit_engine_datagram(&ip, &pkt, &mut engine);
                assert_eq!(engine, general, "engine entry: {} with {len} bytes", info.name);
                // Into a buffer of the right length with stale bytes in it (a ring slot).
                let mut slot = vec![0xA5; engine_datagram_len(&pkt)];
                emit_engine_datagram_into(&ip, &pkt, &mut slot, Icrc::Carried);
                assert_eq!(slot, general, "into a slot: {} with {len} bytes", info.name);
                // Without its ICRC: the same bytes, zeros where the ICRC goes, and the
                // ICRC set afterwards is the one it would have carried.
                slot.fill(0xA5);
                emit_engine_datagram_into(&ip, &pkt, &mut slot, Icrc::Unset);
                let (covered, icrc) = slot.split_at(slot.len() - ICRC_LEN);
                assert_eq!(covered, &general[..covered.len()], "{}", info.name);
                assert_eq!(icrc, [0; ICRC_LEN], "{}: the ICRC is left zero", info.name);
                assert_eq!(
                    parse_datagram_with(&slot, Icrc::Unset),
                    Ok((ip, pkt)),
                    "{}: every check but the ICRC's passes",
                    info.name
                );
                set_icrc_ipv4(&mut slot);
                assert_eq!(slot, general, "set afterwards: {} with {len} bytes", info.name);
                assert_eq!(parse_datagram(&fast), oracle::parse_datagram(&general));
                assert_eq!(parse_datagram(&fast), Ok((ip, pkt)), "{}", info.name);
            }
        }
    }
}

#[test]
fn emit_checks_agree_with_the_ordered_checks_for_every_opcode_swap() {
    // The headers of one row under every opcode byte, with and without payload, with each
    // 24-bit field too wide: the quick check passes and fails exactly where the ordered one
    // does, with the same error.
    let payload = [7u8; 5];
    let (mut fast, mut general) = (Vec::new(), Vec::new());
    for (i, info) in opcode_table().iter().enumerate() {
        for (code, len, wide) in (0..=u8::MAX).flat_map(|code| {
            [0, 5].into_iter().flat_map(move |len| (0..4).map(move |wide| (code, len, wide)))
        }) {
            let mut pkt = sample(info.opcode, i as u64 * 0x9E37_79B9, &payload);
            pkt.payload = &payload[..len];
            pkt.bth.opcode = Opcode(code);
            match wide {
                1 => pkt.bth.dest_qp |= 1 << 24,
                2 => pkt.deth.iter_mut().for_each(|deth| deth.src_qp |= 1 << 30),
                3 => pkt.aeth.iter_mut().for_each(|aeth| aeth.msn = u32::MAX),
                _ => {}
            }
            assert_eq!(pkt.check(), pkt.check_in_order(), "{} as {code:#04x}", info.name);
            let ip = IpUdp::default();
            assert_eq!(
                emit_datagram(&ip, &pkt, &mut fast),
                oracle::emit_datagram(&ip, &pkt, &mut general)
            );
            assert_eq!(fast, general);
        }
    }
}

#[test]
fn every_value_of_every_ip_udp_byte_parses_as_the_general_code_does() {
    // Each IPv4/UDP header byte set to each value, checksums made right again (or not):
    // the word compares let through exactly what the field-by-field checks accept.
    for frame in [FRAME_1, FRAME_4, FRAME_12] {
        let good = datagram(frame);
        for at in 0..IPV4_UDP_LEN {
            for value in 0..=u8::MAX {
                for resealed in [false, true] {
                    let mut bytes = good.clone();
                    bytes[at] = value;
                    if resealed {
                        reseal(&mut bytes);
                    }
                    assert_eq!(
                        parse_datagram(&bytes),
                        oracle::parse_datagram(&bytes),
                        "byte {at} = {value:#04x}"
                    );
                }
            }
        }
    }
}

proptest! {
    /// The requester's fast emit writes what `emit_datagram` writes, for the four
    /// requests it sends (SEND and RDMA WRITE ONLY, with and without immediate data).
    #[test]
    fn a_request_emitted_without_a_packet_is_the_datagram_emit_writes(
        ip in any_ip_udp(),
        op in proptest::sample::select(vec![
            Opcode::RC_SEND_ONLY,
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::RC_RDMA_WRITE_ONLY,
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        ]),
        seed in any::<u64>(),
        payload in vec(any::<u8>(), 0..200),
        stale in any::<u8>(),
    ) {
        let pkt = sample(op, seed, &payload);
        let mut general = Vec::new();
        emit_datagram(&ip, &pkt, &mut general).unwrap();
        let mut out = [stale; 300];
        let len = emit_request_into(&ip, &pkt.bth, pkt.reth.as_ref(), pkt.imm, pkt.payload, &mut out, Icrc::Carried);
        prop_assert_eq!(&out[..len], &general[..]);
        let mut unset = [stale; 300];
        let unset_len = emit_request_into(&ip, &pkt.bth, pkt.reth.as_ref(), pkt.imm, pkt.payload, &mut unset, Icrc::Unset);
        prop_assert_eq!(unset_len, len);
        prop_assert_eq!(&unset[..len - ICRC_LEN], &general[..len - ICRC_LEN]);
        prop_assert_eq!(&unset[len - ICRC_LEN..len], &[0; ICRC_LEN][..]);
    }
}

proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..200)) {
        let _ = parse_datagram(&bytes);
        let _ = Packet::parse(&bytes);
    }

    #[test]
    fn parse_never_panics_on_resealed_noise(
        mut bytes in vec(any::<u8>(), 44..200),
        op in 0..opcode_table().len(),
    ) {
        // Noise behind a plausible IPv4/UDP header and a valid ICRC reaches the transport
        // parse.
        let len = bytes.len() as u16;
        bytes[0] = 0x45;
        bytes[2..4].copy_from_slice(&len.to_be_bytes());
        bytes[6] = 0;
        bytes[7] = 0;
        bytes[9] = 17;
        bytes[22..24].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
        bytes[24..26].copy_from_slice(&(len - 20).to_be_bytes());
        bytes[28] = opcode_table()[op].opcode.0;
        bytes[29] &= 0xF0;
        reseal(&mut bytes);
        if let Ok((_, pkt)) = parse_datagram(&bytes) {
            // Whatever parses re-emits to the same length.
            prop_assert_eq!(datagram_len(&pkt), bytes.len());
        }
    }

    #[test]
    fn emit_parse_round_trips((ip, row, seed, payload) in any_packet_bytes()) {
        let pkt = sample(opcode_table()[row].opcode, seed, &payload);
        let mut out = Vec::new();
        emit_datagram(&ip, &pkt, &mut out).unwrap();
        prop_assert_eq!(out.len(), datagram_len(&pkt));
        prop_assert_eq!(parse_datagram(&out), Ok((ip, pkt)));
    }

    #[test]
    fn mutations_of_valid_datagrams_never_panic(
        (ip, row, seed, payload) in any_packet_bytes(),
        cut in any::<prop::sample::Index>(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        resealed in any::<bool>(),
    ) {
        let pkt = sample(opcode_table()[row].opcode, seed, &payload);
        let mut out = Vec::new();
        emit_datagram(&ip, &pkt, &mut out).unwrap();
        // Truncation.
        let _ = parse_datagram(&out[..cut.index(out.len())]);
        // Byte flips, with or without fixing up the checksums afterwards.
        for (at, xor) in flips {
            let at = at.index(out.len());
            out[at] ^= xor;
        }
        if resealed {
            reseal(&mut out);
        }
        let result = parse_datagram(&out);
        if !resealed && result.is_ok() {
            // Only a no-op flip (or one in a field the ICRC does not cover) can still parse.
            let (_, again) = result.unwrap();
            prop_assert_eq!(again.payload, pkt.payload);
        }
    }

    #[test]
    fn emit_gives_the_general_result_on_any_packet(
        (ip, row, seed, payload) in any_packet_bytes(),
        opcode in prop_oneof![
            Just(None),
            any::<u8>().prop_map(Some),
            (0..opcode_table().len()).prop_map(|row| Some(opcode_table()[row].opcode.0)),
        ],
        toggles in prop_oneof![Just(0u8), any::<u8>()],
        wide in prop_oneof![Just(0u8), 0..4u8],
    ) {
        // A valid packet, then maybe another opcode (known or not), headers added or
        // dropped, a 24-bit field made wider: the fast check must fail exactly where the
        // ordered one does, with the same error, and write the same bytes when both pass.
        let mut pkt = sample(opcode_table()[row].opcode, seed, &payload);
        if let Some(code) = opcode {
            pkt.bth.opcode = Opcode(code);
        }
        let flip = |bit: u8| toggles & (1 << bit) != 0;
        if flip(0) { pkt.deth = pkt.deth.xor(Some(Deth { qkey: 1, src_qp: 2 })); }
        if flip(1) { pkt.reth = pkt.reth.xor(Some(Reth::default())); }
        if flip(2) { pkt.aeth = pkt.aeth.xor(Some(Aeth::ack(3))); }
        if flip(3) { pkt.imm = pkt.imm.xor(Some(4)); }
        if flip(4) { pkt.atomic_eth = pkt.atomic_eth.xor(Some(AtomicEth::default())); }
        if flip(5) { pkt.ieth = pkt.ieth.xor(Some(5)); }
        if flip(6) { pkt.atomic_ack_eth = pkt.atomic_ack_eth.xor(Some(6)); }
        if flip(7) { pkt.feth = pkt.feth.xor(Some(Feth { placement: 1, selectivity: 0 })); }
        match wide {
            1 => pkt.bth.dest_qp |= 1 << 24,
            2 => if let Some(deth) = &mut pkt.deth { deth.src_qp |= 1 << 30 },
            3 => if let Some(aeth) = &mut pkt.aeth { aeth.msn = u32::MAX },
            _ => {}
        }
        prop_assert_eq!(pkt.check(), pkt.check_in_order());
        let (mut fast, mut general) = (vec![9], vec![9]);
        let result = emit_datagram(&ip, &pkt, &mut fast);
        prop_assert_eq!(&result, &oracle::emit_datagram(&ip, &pkt, &mut general));
        prop_assert_eq!(fast, general);
    }

    #[test]
    fn parse_gives_the_general_result_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..200)) {
        prop_assert_eq!(parse_datagram(&bytes), oracle::parse_datagram(&bytes));
    }

    #[test]
    fn parse_gives_the_general_result_on_mutated_datagrams(
        (ip, row, seed, payload) in any_packet_bytes(),
        cut in any::<prop::sample::Index>(),
        extra in vec(any::<u8>(), 0..6),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        resealed in any::<bool>(),
    ) {
        let pkt = sample(opcode_table()[row].opcode, seed, &payload);
        let mut out = Vec::new();
        emit_datagram(&ip, &pkt, &mut out).unwrap();
        let mut cut_short = out[..cut.index(out.len() + 1)].to_vec();
        if resealed {
            reseal(&mut cut_short);
        }
        prop_assert_eq!(parse_datagram(&cut_short), oracle::parse_datagram(&cut_short));
        out.extend_from_slice(&extra);
        for (at, xor) in flips {
            let at = at.index(out.len());
            out[at] ^= xor;
        }
        if resealed {
            reseal(&mut out);
        }
        prop_assert_eq!(parse_datagram(&out), oracle::parse_datagram(&out));
    }

    #[test]
    fn parse_gives_the_general_result_on_resealed_headers(
        (ip, row, seed, payload) in any_packet_bytes(),
        at in 0..IPV4_UDP_LEN + 40,
        value in any::<u8>(),
        fix_lengths in any::<bool>(),
    ) {
        // One header byte set to anything, the checksums made right again: the transport
        // and IPv4/UDP checks behind the ICRC get exercised.
        let pkt = sample(opcode_table()[row].opcode, seed, &payload);
        let mut out = Vec::new();
        emit_datagram(&ip, &pkt, &mut out).unwrap();
        if let Some(byte) = out.get_mut(at) {
            *byte = value;
        }
        if fix_lengths {
            let len = out.len() as u16;
            out[2..4].copy_from_slice(&len.to_be_bytes());
            out[24..26].copy_from_slice(&(len - 20).to_be_bytes());
        }
        reseal(&mut out);
        prop_assert_eq!(parse_datagram(&out), oracle::parse_datagram(&out));
    }
}
