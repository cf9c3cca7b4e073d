//! The ICRC of a long datagram by VPCLMULQDQ over 512-bit registers (AVX-512): four
//! accumulators of 64 bytes each fold 256 bytes per iteration, so four independent chains of
//! carry-less multiplies hide each other's latency, and each multiply instruction does four
//! 16-byte blocks' work. The masked header fields are OR-ed into the first 64 bytes as they
//! load (they all lie within them, for IPv4 and IPv6): no copy. What is left after the last
//! whole 64 bytes (under 64, a multiple of 4) goes through the 16-byte fold of `folded`, which
//! also does the final reduction (docs/decisions.md, "Wide ICRC fold").
//!
//! Conventions are `folded`'s: a 16-byte lane, read as a little-endian `u128`, is the
//! polynomial L·x^64 + H of its two 64-bit halves, the first (L) carrying the earlier message
//! bits; a carry-less product of two 64-bit operands comes out times x. Carrying a lane `d`
//! bits forward (multiplying it by x^d) is therefore L·(x^(d+64) mod P) + H·(x^d mod P), that
//! is L times the operand x^(d+63) mod P and H times the operand x^(d−1) mod P, each product
//! congruent mod P and of degree below 96, so the lane stays 128 bits.

use std::arch::x86_64::{
    __m128i, __m512i, _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_xor_si256,
    _mm512_castsi512_si256, _mm512_clmulepi64_epi128, _mm512_extracti64x4_epi64,
    _mm512_loadu_si512, _mm512_mask_blend_epi64, _mm512_or_si512, _mm512_set_epi64,
    _mm512_ternarylogic_epi64, _mm512_xor_si512, _mm_xor_si128,
};

use super::folded::{self, operand, x_pow_mod_p};
use super::PSEUDO_LRH_CRC;

/// Bytes per accumulator: one 512-bit register, four 16-byte lanes.
const WIDTH: usize = 64;

/// Accumulators folded side by side in the main loop.
const ACCUMULATORS: usize = 4;

/// Bytes per iteration of the main loop.
const STRIDE: usize = WIDTH * ACCUMULATORS;

/// The shortest input the fold takes: the masked fields lie in the first 64 bytes.
pub(super) const MIN_LEN: usize = WIDTH;

/// The operands that carry a 16-byte lane `bits` forward: (for L, for H) = (x^(bits+63),
/// x^(bits−1)) mod P as operands (module documentation).
pub(super) const fn lane_constants(bits: u32) -> (u64, u64) {
    (operand(x_pow_mod_p(bits + 63)), operand(x_pow_mod_p(bits - 1)))
}

/// Carries each lane one iteration forward (256 bytes = 2048 bits).
const BY_STRIDE: (u64, u64) = lane_constants(8 * STRIDE as u32);
/// Carries each lane one register forward (64 bytes = 512 bits).
const BY_WIDTH: (u64, u64) = lane_constants(8 * WIDTH as u32);
/// Carries each lane two registers forward (1024 bits).
const BY_2_WIDTHS: (u64, u64) = lane_constants(2 * 8 * WIDTH as u32);
/// Carries each lane three registers forward (1536 bits).
const BY_3_WIDTHS: (u64, u64) = lane_constants(3 * 8 * WIDTH as u32);
/// Carry a register's lanes 0, 1 and 2 forward to where lane 3 ends: 384, 256 and 128 bits.
const BY_3_LANES: (u64, u64) = lane_constants(384);
/// See [`BY_3_LANES`].
const BY_2_LANES: (u64, u64) = lane_constants(256);
/// See [`BY_3_LANES`].
const BY_1_LANE: (u64, u64) = lane_constants(128);

/// 64 bytes whose bits are OR-ed into the first 64 bytes of a datagram: ones where the ICRC
/// hashes a field as all ones whatever it holds.
pub(super) type Masks = [u8; WIDTH];

/// [`Masks`] from (offset, bits) pairs, each offset below 64.
pub(super) const fn masks(ones: &[(usize, u8)]) -> Masks {
    let mut masks = [0; WIDTH];
    let mut i = 0;
    while i < ones.len() {
        masks[ones[i].0] |= ones[i].1;
        i += 1;
    }
    masks
}

/// A register whose four lanes each hold the constants `(for_l, for_h)`.
#[inline]
#[target_feature(enable = "avx512f")]
fn every_lane((for_l, for_h): (u64, u64)) -> __m512i {
    let (l, h) = (for_l as i64, for_h as i64);
    _mm512_set_epi64(h, l, h, l, h, l, h, l)
}

/// `x`'s lanes, each multiplied by the x^d that `k`'s lane holds the constants of.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn carry(x: __m512i, k: __m512i) -> __m512i {
    _mm512_xor_si512(_mm512_clmulepi64_epi128::<0x00>(x, k), _mm512_clmulepi64_epi128::<0x11>(x, k))
}

/// `x` carried forward by `k`, plus `next`: three-way XOR in one instruction.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold(x: __m512i, k: __m512i, next: __m512i) -> __m512i {
    let low = _mm512_clmulepi64_epi128::<0x00>(x, k);
    let high = _mm512_clmulepi64_epi128::<0x11>(x, k);
    _mm512_ternarylogic_epi64::<0x96>(low, high, next)
}

/// The ICRC (as [`super::icrc_ipv4`] returns it) of `datagram` with `masks` OR-ed into its
/// first 64 bytes, or `None` unless it is at least [`MIN_LEN`] bytes long and a multiple of 4.
#[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq")]
pub(super) fn icrc(datagram: &[u8], masks: &Masks) -> Option<u32> {
    let len = datagram.len();
    if len < MIN_LEN || !len.is_multiple_of(4) {
        return None;
    }
    let load = |at: usize| {
        let bytes: &[u8; WIDTH] = datagram[at..at + WIDTH].try_into().expect("64 bytes");
        // SAFETY: `bytes` is 64 readable bytes, and the load has no alignment requirement;
        // the CPU has AVX-512F (this function's precondition).
        unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
    };
    // SAFETY: `masks` is 64 readable bytes, as above.
    let masks = unsafe { _mm512_loadu_si512(masks.as_ptr().cast()) };
    // The register after the pseudo-LRH is XOR-ed into the first 32 message bits.
    let seed = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, i64::from(!PSEUDO_LRH_CRC));
    let first = _mm512_xor_si512(_mm512_or_si512(load(0), masks), seed);
    let (mut x, mut at) = if len >= STRIDE {
        let mut a = [first, load(WIDTH), load(2 * WIDTH), load(3 * WIDTH)];
        let by_stride = every_lane(BY_STRIDE);
        let mut at = STRIDE;
        while at + STRIDE <= len {
            a[0] = fold(a[0], by_stride, load(at));
            a[1] = fold(a[1], by_stride, load(at + WIDTH));
            a[2] = fold(a[2], by_stride, load(at + 2 * WIDTH));
            a[3] = fold(a[3], by_stride, load(at + 3 * WIDTH));
            at += STRIDE;
        }
        // a0·x^1536 + a1·x^1024 + a2·x^512 + a3, the three carries independent.
        let early = _mm512_xor_si512(
            carry(a[0], every_lane(BY_3_WIDTHS)),
            carry(a[1], every_lane(BY_2_WIDTHS)),
        );
        (_mm512_ternarylogic_epi64::<0x96>(early, carry(a[2], every_lane(BY_WIDTH)), a[3]), at)
    } else {
        (first, WIDTH)
    };
    let by_width = every_lane(BY_WIDTH);
    while at + WIDTH <= len {
        x = fold(x, by_width, load(at));
        at += WIDTH;
    }
    let mut lane = to_one_lane(x);
    let mut rest = &datagram[at..];
    while let Some((next, tail)) = rest.split_first_chunk::<16>() {
        lane = folded::fold(lane, folded::vector(u128::from_le_bytes(*next)));
        rest = tail;
    }
    if let Some((next, tail)) = rest.split_first_chunk::<8>() {
        lane = folded::fold_8(lane, u64::from_le_bytes(*next));
        rest = tail;
    }
    if let Some(next) = rest.first_chunk::<4>() {
        lane = folded::fold_4(lane, u32::from_le_bytes(*next));
    }
    Some(!folded::reduce(lane))
}

/// The four lanes of `x` as one lane congruent mod P: lanes 0–2 carried to where lane 3 ends,
/// and the four added.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn to_one_lane(x: __m512i) -> __m128i {
    let (l3, h3) = BY_3_LANES;
    let (l2, h2) = BY_2_LANES;
    let (l1, h1) = BY_1_LANE;
    let k =
        _mm512_set_epi64(0, 0, h1 as i64, l1 as i64, h2 as i64, l2 as i64, h3 as i64, l3 as i64);
    // Lanes 0–2 carried; lane 3 as it is (qwords 6 and 7 from `x`).
    let lanes = _mm512_mask_blend_epi64(0b1100_0000, carry(x, k), x);
    let halves =
        _mm256_xor_si256(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64::<1>(lanes));
    _mm_xor_si128(_mm256_castsi256_si128(halves), _mm256_extracti128_si256::<1>(halves))
}

#[cfg(test)]
mod tests;
