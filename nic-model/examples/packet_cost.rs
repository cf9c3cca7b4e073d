//! The cost of building and checking one small RoCEv2 datagram: `emit_datagram` and
//! `parse_datagram` (ICRC included) in a loop, for the packets a latency-bound workload sends.
//!
//! `cargo run --release -p nic-model --example packet_cost -- [KIND] [ITERS]` prints wall time
//! per call (noisy on a shared machine). For exact instruction counts run it under callgrind and
//! read the inclusive counts of `packet_cost::emit_one` and `packet_cost::parse_one`, each
//! called ITERS times:
//!
//! `valgrind --tool=callgrind --callgrind-out-file=/tmp/cg target/release/examples/packet_cost
//! send8 10000` then `callgrind_annotate --inclusive=yes /tmp/cg | grep _one`.
//!
//! KIND is one of `send8` (RC SEND ONLY, 8 bytes), `ack` (RC ACKNOWLEDGE), `write8` (RC RDMA
//! WRITE ONLY, RETH, 8 bytes), `read_req` (RC RDMA READ REQUEST), `read_resp8` (RC RDMA READ
//! RESPONSE ONLY, AETH, 8 bytes), `ud8` (UD SEND ONLY, DETH, 8 bytes) or `all` (the default).

use std::hint::black_box;
use std::time::Instant;

use nic_model::packet::{
    emit_datagram, parse_datagram, Aeth, Bth, Deth, IpUdp, Opcode, Packet, Psn, Reth,
};

/// The packet kinds measured, by name.
const KINDS: [&str; 6] = ["send8", "ack", "write8", "read_req", "read_resp8", "ud8"];

/// The packet of kind `kind`, carrying `payload` where the opcode carries one.
fn packet<'a>(kind: &str, payload: &'a [u8]) -> Packet<'a> {
    let bth = |opcode| Bth {
        opcode,
        pkey: 0xFFFF,
        dest_qp: 0x11,
        ack_req: true,
        psn: Psn::new(0x1234),
        ..Bth::default()
    };
    let reth = Some(Reth { va: 0x7f00_0000_1000, rkey: 0xbeef, dma_len: 8 });
    match kind {
        "send8" => Packet::new(bth(Opcode::RC_SEND_ONLY), payload),
        "ack" => {
            Packet { aeth: Some(Aeth::ack(7)), ..Packet::new(bth(Opcode::RC_ACKNOWLEDGE), &[]) }
        }
        "write8" => Packet { reth, ..Packet::new(bth(Opcode::RC_RDMA_WRITE_ONLY), payload) },
        "read_req" => Packet { reth, ..Packet::new(bth(Opcode::RC_RDMA_READ_REQUEST), &[]) },
        "read_resp8" => Packet {
            aeth: Some(Aeth::ack(7)),
            ..Packet::new(bth(Opcode::RC_RDMA_READ_RESPONSE_ONLY), payload)
        },
        "ud8" => Packet {
            deth: Some(Deth { qkey: 0x1111_2222, src_qp: 0x12 }),
            ..Packet::new(bth(Opcode::UD_SEND_ONLY), payload)
        },
        other => panic!("unknown packet kind {other:?}; known: {KINDS:?}"),
    }
}

#[inline(never)]
fn emit_one(ip: &IpUdp, pkt: &Packet<'_>, out: &mut Vec<u8>) {
    emit_datagram(ip, pkt, out).expect("the measured packets are valid");
}

#[inline(never)]
fn parse_one(bytes: &[u8]) -> usize {
    let (ip, pkt) = parse_datagram(bytes).expect("the measured datagrams are valid");
    black_box(&ip);
    pkt.payload.len()
}

fn measure(kind: &str, iters: u32) {
    let payload = [0x5a; 8];
    let pkt = packet(kind, &payload);
    let ip = IpUdp { src: [10, 0, 0, 1], dst: [10, 0, 0, 2], ..IpUdp::default() };
    let mut out = Vec::with_capacity(4096);
    let t0 = Instant::now();
    for i in 0..iters {
        let ip = IpUdp { ident: i as u16, ..ip };
        emit_one(black_box(&ip), black_box(&pkt), &mut out);
    }
    let emit_ns = t0.elapsed().as_nanos() as f64 / f64::from(iters);
    let bytes = out.clone();
    let t0 = Instant::now();
    let mut sum = 0;
    for _ in 0..iters {
        sum += parse_one(black_box(&bytes));
    }
    let parse_ns = t0.elapsed().as_nanos() as f64 / f64::from(iters);
    assert_eq!(sum, pkt.payload.len() * iters as usize);
    println!("{kind:>10}: {} bytes, emit {emit_ns:.1} ns, parse {parse_ns:.1} ns", bytes.len());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "all".into());
    let iters: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    if kind == "all" {
        KINDS.iter().for_each(|kind| measure(kind, iters));
    } else {
        measure(&kind, iters);
    }
}
