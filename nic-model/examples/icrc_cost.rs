//! Nanoseconds per ICRC of one datagram, by `icrc_ipv4` (the path this CPU takes: the 16-byte
//! fold up to 128 bytes, the 512-bit fold above where the CPU has AVX-512 and VPCLMULQDQ) and
//! by crc32fast the way the portable path hashes a long datagram (a masked copy of the first
//! 40 bytes, then the rest in place).
//!
//! `cargo run --release -p nic-model --example icrc_cost -- [LEN...]` (default 64 256 1060
//! 4100). Each figure is the fastest of 15 rounds of 200 000 calls, so that a neighbour's load
//! shows less; still only a ratio within one run means much on a shared machine.

use std::hint::black_box;
use std::time::Instant;

use nic_model::packet::icrc_ipv4;

/// The ICRC as the portable path computes it for a long datagram: crc32fast seeded with the
/// pseudo-LRH, over a masked copy of the first 40 bytes and then the rest.
fn by_crc32fast(datagram: &[u8]) -> u32 {
    let mut head = [0u8; 40];
    head.copy_from_slice(&datagram[..40]);
    for at in [1, 8, 10, 11, 26, 27, 32] {
        head[at] = 0xFF;
    }
    let mut hasher = crc32fast::Hasher::new_with_initial(!0xDEBB_20E3);
    hasher.update(&head);
    hasher.update(&datagram[40..]);
    hasher.finalize()
}

/// The fastest of 15 rounds, in nanoseconds per call of `f` on `datagram`.
fn ns_per_call(datagram: &[u8], f: fn(&[u8]) -> u32) -> f64 {
    const CALLS: u32 = 200_000;
    (0..15)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..CALLS {
                black_box(f(black_box(datagram)));
            }
            t0.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let lens: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or_else(|_| panic!("a length in bytes, not {a:?}")))
        .collect();
    let lens = if lens.is_empty() { vec![64, 256, 1060, 4100] } else { lens };
    println!("{:>6} {:>10} {:>10} {:>7}", "bytes", "icrc_ipv4", "crc32fast", "ratio");
    for len in lens {
        assert!(len >= 40 && len.is_multiple_of(4), "a datagram: at least 40 bytes, 4-aligned");
        let datagram: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(113) ^ 0x5a).collect();
        assert_eq!(icrc_ipv4(&datagram), by_crc32fast(&datagram), "the same ICRC both ways");
        let ours = ns_per_call(&datagram, icrc_ipv4);
        let theirs = ns_per_call(&datagram, by_crc32fast);
        println!("{len:>6} {ours:>10.1} {theirs:>10.1} {:>7.2}", theirs / ours);
    }
}
