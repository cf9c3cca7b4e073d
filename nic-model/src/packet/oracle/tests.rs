//! The oracle's own tests: it reads the reference's golden frames as the reference decodes them,
//! it gives the RFC's and the IBA's verdict on frames mutated one rule at a time (and the codec
//! gives the same), and a codec with one rule written wrong disagrees with it, which is what
//! makes it an oracle rather than a copy.

use super::super::datagram::parse_datagram as codec_parse;
use super::super::testing::{datagram, ip_variants, reseal, sample, FRAME_1, FRAME_12, FRAME_4};
use super::*;
use crate::packet::opcode_table;

/// Frame 1 of the reference, field by field as tshark decodes it.
#[test]
fn the_golden_write_reads_as_the_reference_decodes_it() {
    let bytes = datagram(FRAME_1);
    let (ip, pkt) = parse_datagram(&bytes).unwrap();
    assert_eq!(
        (ip.src, ip.dst, ip.src_port, ip.tos, ip.ttl),
        ([10, 0, 0, 1], [10, 0, 0, 2], 49152, 2, 64)
    );
    assert_eq!((ip.ident, ip.dont_fragment), (0x1234, true));
    assert_eq!(pkt.bth.opcode, Opcode(10), "RC RDMA WRITE Only (10)");
    assert_eq!((pkt.bth.pad_count, pkt.bth.pkey, pkt.bth.dest_qp), (3, 65535, 0x11));
    assert_eq!((pkt.bth.ack_req, pkt.bth.psn), (true, Psn::new(1_193_046)));
    assert_eq!(pkt.reth, Some(Reth { va: 0x0000_7f00_0000_1000, rkey: 0x1234_5678, dma_len: 13 }));
    assert_eq!(pkt.payload, b"hello, rdma!!");
    // "Invariant CRC: 0x5a89b4d9" is the wire bytes; the CRC is 0xd9b4895a, sent LSB first.
    assert_eq!(icrc_by_definition(&bytes[..bytes.len() - 4]), 0xd9b4_895a);
    assert_eq!(bytes[bytes.len() - 4..], [0x5a, 0x89, 0xb4, 0xd9]);
    // rxe's seed is the CRC state after the 8 bytes of ones that stand for the LRH.
    assert_eq!(!crc32fast::hash(&[0xFF; 8]), 0xDEBB_20E3);
    let mut out = Vec::new();
    emit_datagram(&ip, &pkt, &mut out).unwrap();
    assert_eq!(out, bytes, "the oracle's emit rebuilds the golden frame");
}

/// A frame with one rule broken (or one field changed that no rule forbids), and the oracle's
/// verdict, which the codec must share.
#[test]
fn each_rule_broken_alone_gets_its_verdict_from_both() {
    type Edit = fn(&mut Vec<u8>);
    let fine = |r: &Result<(IpUdp, Packet<'_>), PacketError>| r.is_ok();
    let cases: [(&str, Edit, bool, Option<PacketError>); 18] = [
        ("MF set", |b| b[6] |= 0x20, true, Some(PacketError::BadIpHeader("fragmented datagram"))),
        ("offset 1", |b| b[7] = 1, true, Some(PacketError::BadIpHeader("fragmented datagram"))),
        (
            "offset's top bit",
            |b| b[6] |= 0x10,
            true,
            Some(PacketError::BadIpHeader("fragmented datagram")),
        ),
        ("DF cleared", |b| b[6] &= !0x40, true, None),
        ("reserved flag set", |b| b[6] |= 0x80, true, None),
        ("version 6", |b| b[0] = 0x65, false, Some(PacketError::NotIpv4)),
        (
            "IHL 6",
            |b| b[0] = 0x46,
            true,
            Some(PacketError::BadIpHeader("IHL is not 5 (IPv4 options are not supported)")),
        ),
        ("protocol TCP", |b| b[9] = 6, true, Some(PacketError::BadIpHeader("protocol is not UDP"))),
        (
            "checksum + 1",
            |b| b[11] = b[11].wrapping_add(1),
            false,
            Some(PacketError::BadIpHeader("header checksum mismatch")),
        ),
        ("UDP port 4792", |b| b[23] = 0xb8, true, Some(PacketError::NotRoce { dst_port: 4792 })),
        (
            "UDP length + 1",
            |b| b[25] += 1,
            true,
            Some(PacketError::BadLength("UDP length disagrees with the IPv4 total length")),
        ),
        // Fields the ICRC masks change in flight without a reseal of the ICRC.
        ("UDP checksum", |b| b[26] = 0x12, false, None),
        ("TTL and TOS", |b| fix_ip_checksum(b, |b| (b[8], b[1]) = (3, 3)), false, None),
        ("FECN and BECN", |b| b[32] |= 0xC0, false, None),
        // IBA 9.2: reserved bits are ignored, TVer must be 0, the opcode must be known.
        ("AckReq's reserved bits", |b| b[36] |= 0x7F, true, None),
        ("TVer 1", |b| b[29] |= 1, true, Some(PacketError::BadVersion(1))),
        ("opcode 0x15", |b| b[28] = 0x15, true, Some(PacketError::UnknownOpcode(0x15))),
        ("P_Key, not resealed", |b| b[30] = 0x7F, false, None),
    ];
    for (what, edit, resealed, verdict) in cases {
        let mut bytes = datagram(FRAME_1);
        edit(&mut bytes);
        if resealed {
            reseal(&mut bytes);
        }
        let oracle = parse_datagram(&bytes);
        match (&verdict, what) {
            (None, "P_Key, not resealed") => {
                assert!(matches!(oracle, Err(PacketError::BadIcrc { .. })), "{what}: {oracle:?}")
            }
            (None, _) => assert!(fine(&oracle), "{what}: accepted, got {oracle:?}"),
            (Some(e), _) => assert_eq!(oracle.as_ref().err(), Some(e), "{what}"),
        }
        assert_eq!(codec_parse(&bytes), oracle, "{what}: the codec agrees");
    }
}

/// Recompute only the IPv4 header checksum after `edit`, leaving the ICRC as it was.
fn fix_ip_checksum(b: &mut [u8], edit: impl FnOnce(&mut [u8])) {
    edit(b);
    b[10..12].fill(0);
    let checksum = !ones_complement_sum(&b[..20]);
    b[10..12].copy_from_slice(&checksum.to_be_bytes());
}

/// Every opcode with a few payload lengths and IPv4/UDP fields, as the oracle emits them, the
/// golden frames, and every value of every IPv4, UDP and BTH byte of three of them (resealed or
/// not): the datagrams the mutants are tried on.
fn corpus() -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..64).collect();
    let mut all = Vec::new();
    for (i, info) in opcode_table().iter().enumerate() {
        for len in [0, 1, 4, 13, 64] {
            for ip in ip_variants() {
                let pkt = sample(
                    info.opcode,
                    0x9E37_79B9_7F4A_7C15u64.rotate_left(i as u32),
                    &payload[..len],
                );
                let mut out = Vec::new();
                emit_datagram(&ip, &pkt, &mut out).unwrap();
                all.push(out);
            }
        }
    }
    for frame in [FRAME_1, FRAME_4, FRAME_12] {
        let good = datagram(frame);
        for at in 0..IP_HEADER + UDP_HEADER + BTH {
            for value in 0..=u8::MAX {
                let mut bytes = good.clone();
                bytes[at] = value;
                all.push(bytes.clone());
                reseal(&mut bytes);
                all.push(bytes);
            }
        }
    }
    all
}

/// A parse's answer, owned, so that answers about different buffers compare.
fn answer(r: Result<(IpUdp, Packet<'_>), PacketError>) -> String {
    format!("{r:?}")
}

/// The codec with one rule written wrong: what it answers on the datagrams that rule decides.
type Mutant = fn(&[u8]) -> String;

/// Fragments are recognised with the DF bit in the mask (0x7FFF instead of MF and offset).
fn df_counted_as_fragment(b: &[u8]) -> String {
    match codec_parse(b) {
        Ok(_) if b[6] & 0x40 != 0 => answer(Err(PacketError::BadIpHeader("fragmented datagram"))),
        r => answer(r),
    }
}

/// The IPv4 checksum summed without the end-around carry.
fn checksum_without_carry(b: &[u8]) -> String {
    match codec_parse(b) {
        Ok(_) if (0..20).step_by(2).fold(0u16, |s, at| s.wrapping_add(be16(b, at))) != 0xFFFF => {
            answer(Err(PacketError::BadIpHeader("header checksum mismatch")))
        }
        r => answer(r),
    }
}

/// The ICRC computed with the TTL left unmasked.
fn icrc_covers_the_ttl(b: &[u8]) -> String {
    match codec_parse(b) {
        Ok(_) => {
            let covered = b.len() - ICRC;
            let mut masked_but_ttl = b[..covered].to_vec();
            let bth = IP_HEADER + UDP_HEADER;
            for at in [IP_TOS, IP_CHECKSUM, IP_CHECKSUM + 1, 26, 27, bth + BTH_RESV8A] {
                masked_but_ttl[at] = 0xFF;
            }
            let mut crc = crc32fast::Hasher::new();
            crc.update(&[0xFF; 8]);
            crc.update(&masked_but_ttl);
            let wrong = crc.finalize();
            let carried = u32::from_le_bytes(b[covered..].try_into().unwrap());
            if wrong == carried {
                answer(codec_parse(b))
            } else {
                answer(Err(PacketError::BadIcrc { expected: wrong, got: carried }))
            }
        }
        r => answer(r),
    }
}

/// An opcode-table row written wrong: READ RESPONSE MIDDLE read as if it carried an AETH, as
/// FIRST, LAST and ONLY do. (The oracle before this one shared the codec's table, so it could
/// not have seen this.)
fn read_middle_with_an_aeth(b: &[u8]) -> String {
    match codec_parse(b) {
        Ok((ip, pkt)) if pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => {
            match pkt.payload.split_first_chunk::<4>() {
                None => answer(Err(PacketError::Truncated { needed: 48, got: b.len() })),
                Some((aeth, payload)) => {
                    let aeth = Aeth { syndrome: aeth[0], msn: be24(aeth, 1) };
                    answer(Ok((ip, Packet { aeth: Some(aeth), payload, ..pkt })))
                }
            }
        }
        r => answer(r),
    }
}

/// DETH's SrcQP read one byte early, from the reserved byte on.
fn deth_src_qp_one_byte_early(b: &[u8]) -> String {
    match codec_parse(b) {
        Ok((ip, pkt)) if pkt.deth.is_some() => {
            let deth = Deth { src_qp: be24(b, 28 + BTH + 4), ..pkt.deth.unwrap() };
            answer(Ok((ip, Packet { deth: Some(deth), ..pkt })))
        }
        r => answer(r),
    }
}

#[test]
fn a_codec_with_one_rule_wrong_disagrees_with_the_oracle() {
    let corpus = corpus();
    let oracle: Vec<String> = corpus.iter().map(|b| answer(parse_datagram(b))).collect();
    let disagreements = |parse: &dyn Fn(&[u8]) -> String| {
        corpus.iter().zip(&oracle).filter(|(b, says)| parse(b) != **says).count()
    };
    assert_eq!(disagreements(&|b| answer(codec_parse(b))), 0, "the codec as it is agrees");
    let mutants: [(&str, Mutant); 5] = [
        ("DF counted as a fragment", df_counted_as_fragment),
        ("checksum without the end-around carry", checksum_without_carry),
        ("ICRC covers the TTL", icrc_covers_the_ttl),
        ("READ RESPONSE MIDDLE with an AETH", read_middle_with_an_aeth),
        ("DETH SrcQP one byte early", deth_src_qp_one_byte_early),
    ];
    for (rule, mutant) in mutants {
        assert!(disagreements(&mutant) > 0, "a codec whose {rule} passes unnoticed");
    }
    // A changed frame the codec must still refuse: the oracle says so on its own.
    let mut fragment = datagram(FRAME_12);
    fragment[6] |= 0x20;
    reseal(&mut fragment);
    assert_eq!(
        parse_datagram(&fragment).err(),
        Some(PacketError::BadIpHeader("fragmented datagram"))
    );
    assert_ne!(
        df_counted_as_fragment(&datagram(FRAME_12)),
        answer(parse_datagram(&datagram(FRAME_12)))
    );
}
