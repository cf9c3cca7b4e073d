use proptest::prelude::*;

use super::super::{icrc_ipv4, icrc_ipv6, MASKED_BITS_IPV6, MASKED_BYTES, POLY, WIDE_MASKS_IPV4};
use super::*;

/// Whether this CPU runs the 512-bit fold; where it does not, the tests of `icrc` itself say
/// so and pass (the dispatching functions are still checked, on their other paths).
fn wide_here() -> bool {
    super::super::wide_fold()
}

/// The ICRC by its definition: crc32 over 8 × 0xFF and a copy of `datagram` with `masks`
/// OR-ed into its first 64 bytes.
fn by_definition(datagram: &[u8], masks: &Masks) -> u32 {
    let mut masked = vec![0xFF; 8];
    masked.extend_from_slice(datagram);
    for (byte, mask) in masked[8..].iter_mut().zip(masks) {
        *byte |= mask;
    }
    crc32fast::hash(&masked)
}

fn ipv4_masks() -> Masks {
    masks(&MASKED_BYTES.map(|at| (at, 0xFF)))
}

/// `len` pseudo-random bytes (xorshift64 from `seed`).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// x^n mod P by square and multiply over a bitwise product: independent of `x_pow_mod_p`'s
/// n shifts.
fn x_pow_mod_p_by_squaring(n: u32) -> u64 {
    fn mul_mod_p(a: u64, b: u64) -> u64 {
        let mut product: u64 = 0;
        for bit in 0..32 {
            if b >> bit & 1 == 1 {
                product ^= a << bit;
            }
        }
        for deg in (32..64).rev() {
            if product >> deg & 1 == 1 {
                product ^= POLY << (deg - 32);
            }
        }
        product
    }
    let (mut result, mut base, mut n) = (1, 2, n);
    while n > 0 {
        if n & 1 == 1 {
            result = mul_mod_p(result, base);
        }
        base = mul_mod_p(base, base);
        n >>= 1;
    }
    result
}

#[test]
fn the_folding_constants_are_the_powers_of_x_they_claim() {
    for (constants, bits) in [
        (BY_STRIDE, 2048),
        (BY_WIDTH, 512),
        (BY_2_WIDTHS, 1024),
        (BY_3_WIDTHS, 1536),
        (BY_3_LANES, 384),
        (BY_2_LANES, 256),
        (BY_1_LANE, 128),
    ] {
        let expected = (
            x_pow_mod_p_by_squaring(bits + 63).reverse_bits(),
            x_pow_mod_p_by_squaring(bits - 1).reverse_bits(),
        );
        assert_eq!(constants, expected, "carrying {bits} bits");
    }
    // The 16-byte fold's own constant, by both methods: the convention is the same.
    assert_eq!(lane_constants(128).0, x_pow_mod_p(191).reverse_bits());
}

#[test]
fn the_ipv4_masks_are_the_masked_bytes() {
    let masks = ipv4_masks();
    for (at, &mask) in masks.iter().enumerate() {
        assert_eq!(mask == 0xFF, MASKED_BYTES.contains(&at), "byte {at}");
        assert!(mask == 0 || mask == 0xFF, "byte {at}");
    }
    assert_eq!(masks, WIDE_MASKS_IPV4);
}

#[test]
fn every_length_up_to_9200_matches_the_definition() {
    let (v4, v6) = (ipv4_masks(), masks(&MASKED_BITS_IPV6));
    for len in 0..=9200 {
        let datagram = bytes(len, 0x9E37_79B9_7F4A_7C15 ^ len as u64);
        let (want4, want6) = (by_definition(&datagram, &v4), by_definition(&datagram, &v6));
        // The dispatching functions, on every path they take for this length.
        assert_eq!(icrc_ipv4(&datagram), want4, "IPv4, length {len}");
        assert_eq!(icrc_ipv6(&datagram), want6, "IPv6, length {len}");
        if wide_here() {
            // SAFETY: the CPU has the features (`wide_here`).
            let (got4, got6) = unsafe { (icrc(&datagram, &v4), icrc(&datagram, &v6)) };
            let takes = len >= MIN_LEN && len.is_multiple_of(4);
            assert_eq!(got4, takes.then_some(want4), "wide IPv4, length {len}");
            assert_eq!(got6, takes.then_some(want6), "wide IPv6, length {len}");
        }
    }
    if !wide_here() {
        eprintln!("this CPU has no AVX-512F and VPCLMULQDQ: the 512-bit fold was not run");
    }
}

#[test]
fn a_golden_long_datagram() {
    // An RC RDMA WRITE ONLY of 1,024 bytes (i % 251) from 10.0.0.1 to 10.0.0.2, QP 0x11,
    // PSN 0x1234, with the IPv4 TOS, TTL and checksums and the BTH's byte 4 set to values the
    // ICRC must not see. Its ICRC computed by Python's zlib.crc32 over the 8 bytes of 0xFF
    // and the masked datagram.
    let mut datagram = vec![
        0x45, 0x03, 0x04, 0x3c, 0x00, 0x00, 0x40, 0x00, 0x07, 0x11, 0xab, 0xcd, 10, 0, 0, 1, 10, 0,
        0, 2, 0xc0, 0x00, 0x12, 0xb7, 0x04, 0x28, 0x5a, 0x5a, 0x0a, 0x40, 0xff, 0xff, 0xc0, 0x00,
        0x00, 0x11, 0x80, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
        0x00, 0xbe, 0xef, 0x00, 0x00, 0x04, 0x00,
    ];
    datagram.extend((0..1024u32).map(|i| (i % 251) as u8));
    assert_eq!(datagram.len(), 1080);
    assert_eq!(icrc_ipv4(&datagram), GOLDEN_LONG_ICRC);
    assert_eq!(icrc_ipv4(&datagram), by_definition(&datagram, &ipv4_masks()));
}

/// See `a_golden_long_datagram`.
const GOLDEN_LONG_ICRC: u32 = 0x5e6b_adea;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_datagrams_match_the_definition(
        len in 0usize..=9200,
        seed in any::<u64>(),
        masked in any::<[u8; 8]>(),
    ) {
        let datagram = bytes(len, seed);
        let icrc4 = icrc_ipv4(&datagram);
        prop_assert_eq!(icrc4, by_definition(&datagram, &ipv4_masks()));
        let icrc6 = icrc_ipv6(&datagram);
        prop_assert_eq!(icrc6, by_definition(&datagram, &masks(&MASKED_BITS_IPV6)));
        // Other values in the masked fields leave the ICRC as it was.
        let mut other = datagram.clone();
        for (&at, value) in MASKED_BYTES.iter().zip(masked).filter(|&(&at, _)| at < len) {
            other[at] = value;
        }
        prop_assert_eq!(icrc_ipv4(&other), icrc4);
        let mut other = datagram;
        for ((at, bits), value) in MASKED_BITS_IPV6.into_iter().zip(masked) {
            if at < len {
                other[at] = other[at] & !bits | value & bits;
            }
        }
        prop_assert_eq!(icrc_ipv6(&other), icrc6);
    }
}
