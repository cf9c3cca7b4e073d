//! Helpers the packet layer's tests share: a valid packet of any opcode, IPv4/UDP fields to vary,
//! resealing a mutated datagram so that parsing reaches the checks behind its checksums, and the
//! golden frames of the wire-format reference.

use super::headers::{Aeth, AtomicEth, Bth, Deth, Feth, Reth};
use super::ipv4_udp::{ones_complement_sum, IpUdp, IPV4_LEN};
use super::opcode::{OpFlags, Opcode};
use super::psn::Psn;
use super::transport::Packet;
use proptest::prelude::*;

/// A valid packet for `opcode`, every header it needs filled from `seed`.
pub(super) fn sample(opcode: Opcode, seed: u64, payload: &[u8]) -> Packet<'_> {
    let info = opcode.info().unwrap();
    let f = info.flags;
    let s32 = seed as u32;
    let payload = if f.contains(OpFlags::PAYLOAD) { payload } else { &[] };
    let mut pkt = Packet::new(
        Bth {
            opcode,
            solicited: seed & 1 != 0,
            mig_req: seed & 2 != 0,
            pad_count: 0,
            pkey: (seed >> 8) as u16,
            fecn: seed & 4 != 0,
            becn: seed & 8 != 0,
            dest_qp: s32 & 0x00FF_FFFF,
            ack_req: seed & 16 != 0,
            psn: Psn::new((seed >> 24) as u32),
        },
        payload,
    );
    pkt.bth.pad_count = pkt.pad_len() as u8;
    let flag = |flag: OpFlags| f.contains(flag);
    pkt.deth =
        flag(OpFlags::DETH).then_some(Deth { qkey: s32 ^ 0x5555, src_qp: (s32 >> 3) & 0xFF_FFFF });
    pkt.feth = flag(OpFlags::FETH).then_some(Feth {
        placement: (seed >> 32) as u8 & 0x0F,
        selectivity: (seed >> 36) as u8 & 3,
    });
    pkt.reth = flag(OpFlags::RETH).then_some(Reth {
        va: seed.rotate_left(7),
        rkey: !s32,
        dma_len: s32 >> 1,
    });
    pkt.atomic_eth = flag(OpFlags::ATOMIC_ETH).then_some(AtomicEth {
        va: seed.rotate_left(13),
        rkey: s32.rotate_left(3),
        swap_add: seed.wrapping_mul(3),
        compare: !seed,
    });
    pkt.aeth = flag(OpFlags::AETH)
        .then_some(Aeth { syndrome: (seed >> 40) as u8, msn: (s32 >> 5) & 0xFF_FFFF });
    pkt.atomic_ack_eth = flag(OpFlags::ATOMIC_ACK_ETH).then_some(seed.wrapping_mul(7));
    pkt.imm = flag(OpFlags::IMMDT).then_some(s32.wrapping_mul(11));
    pkt.ieth = flag(OpFlags::IETH).then_some(s32.wrapping_mul(13));
    pkt
}

/// Any IPv4/UDP fields: addresses, source port, TOS, TTL, identification, DF.
pub(super) fn any_ip_udp() -> impl Strategy<Value = IpUdp> {
    any::<([u8; 4], [u8; 4], u16, u8, u8, u16, bool)>().prop_map(
        |(src, dst, src_port, tos, ttl, ident, dont_fragment)| IpUdp {
            src,
            dst,
            src_port,
            tos,
            ttl,
            ident,
            dont_fragment,
        },
    )
}

/// IPv4/UDP fields worth varying: identification, TOS, TTL, DF, addresses, source port.
pub(super) fn ip_variants() -> [IpUdp; 4] {
    [
        IpUdp::default(),
        IpUdp { src: [10, 0, 0, 1], dst: [10, 0, 0, 2], ident: 0x1234, tos: 2, ..IpUdp::default() },
        IpUdp {
            src: [255, 255, 255, 255],
            dst: [192, 168, 77, 9],
            src_port: 0xFFFF,
            tos: 0xFF,
            ttl: 0xFF,
            ident: 0xFFFF,
            dont_fragment: false,
        },
        IpUdp { ttl: 0, tos: 0xB8, ident: 0x8000, dont_fragment: false, ..IpUdp::default() },
    ]
}

/// Recompute the IPv4 checksum and ICRC of a (mutated) datagram so parsing reaches the
/// transport headers.
pub(super) fn reseal(bytes: &mut [u8]) {
    if bytes.len() >= IPV4_LEN {
        bytes[10] = 0;
        bytes[11] = 0;
        let header: [u8; IPV4_LEN] = bytes[..IPV4_LEN].try_into().unwrap();
        let checksum = !ones_complement_sum(&header);
        bytes[10..12].copy_from_slice(&checksum.to_be_bytes());
    }
    super::set_icrc_ipv4(bytes);
}

/// Golden frames from the wire-format reference (whole Ethernet frames).
pub(super) const FRAME_1: &str = concat!(
    "02000000000202000000000108004502004c12344000401114690a0000010a000002c00012b70038",
    "00000a30ffff000000118012345600007f0000001000123456780000000d68656c6c6f2c2072646d",
    "6121210000005a89b4d9",
);
pub(super) const FRAME_4: &str = concat!(
    "02000000000202000000000108004502003012344000401114850a0000010a000002c00012b7001c",
    "00001100ffff00000022001234572e0000012d4c7d4e",
);
pub(super) const FRAME_5: &str = concat!(
    "02000000000202000000000108004502003012344000401114850a0000010a000002c00012b7001c",
    "00001100ffff0000002200123457600000012363b635",
);
pub(super) const FRAME_9: &str = concat!(
    "020000000002020000000001080045020038123440004011147d0a0000010a000002c00012b70024",
    "00001000ffff00000022001234591f0000025245414444415441686eda4a",
);
pub(super) const FRAME_10: &str = concat!(
    "020000000002020000000001080045020048123440004011146d0a0000010a000002c00012b70034",
    "00001300ffff000000118012345a00007f00000030000000beef0000000000000007000000000000",
    "0000ad3c3acd",
);
pub(super) const FRAME_12: &str = concat!(
    "02000000000202000000000108004502004012344000401114750a0000010a000002c00012b7002c",
    "00006410ffff0000004400000001111111110000003375642d646174616772616d00fdc54a20",
);

/// The datagram inside a golden Ethernet frame.
pub(super) fn datagram(frame_hex: &str) -> Vec<u8> {
    let frame: Vec<u8> = (0..frame_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&frame_hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(&frame[12..14], &[0x08, 0x00], "Ethernet II carrying IPv4");
    frame[14..].to_vec()
}
