//! The RoCEv2 Invariant CRC (ICRC): CRC-32 over the fields of a datagram that no router
//! changes, so that corruption anywhere between the two NICs is caught.
//!
//! Every packet is hashed twice (once to send it, once to check it), and most are short (an ACK
//! covers 44 bytes), so on x86-64 with carry-less multiply (PCLMULQDQ, detected at run time) the
//! CRC is folded 16 bytes at a time with the masked fields OR-ed in as the bytes are loaded: no
//! copy of the datagram, no call per piece (docs/decisions.md, "ICRC fold"). Longer datagrams
//! (over 128 bytes) are folded 256 bytes at a time over 512-bit registers where the CPU has
//! AVX-512 and VPCLMULQDQ (`wide`; "Wide ICRC fold"). Other CPUs, and inputs shorter than the
//! masked headers or not a multiple of 4 bytes (never a datagram) are hashed with crc32fast.
//!
//! A datagram that differs from one hashed before only in a few bytes at fixed offsets (an RC
//! QP's ACK, from its template) gets its ICRC from the earlier one with [`IcrcPatch`]: a table
//! load per changed byte.

use std::sync::OnceLock;

use crc32fast::Hasher;

/// The CRC-32 generator polynomial with its x^32 term, bit i ↔ x^i.
const POLY: u64 = 0x1_04C1_1DB7;

/// Bytes at the start of a datagram that contain masked fields: IPv4 (20) + UDP (8) + BTH (12).
const MASKED_LEN: usize = 40;

/// Offsets, within the datagram, of the bytes replaced by 0xFF before hashing: IPv4 TOS (1),
/// TTL (8) and header checksum (10–11); UDP checksum (26–27); BTH byte 4, FECN/BECN/reserved (32).
const MASKED_BYTES: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];

/// The CRC-32 of the 8 bytes of 0xFF that stand in for the (absent) LRH, i.e. the complement of
/// rxe's seed 0xDEBB20E3: hashing starts from here instead of hashing the 8 bytes every time.
const PSEUDO_LRH_CRC: u32 = !0xDEBB_20E3;

/// Datagrams up to this long are hashed by crc32fast in one pass over a masked copy, cheaper for
/// short ones than two passes (docs/decisions.md, "ICRC in one pass over a masked copy").
const ONE_PASS_LEN: usize = 128;

/// The longest datagram the one-block fold hashes: its multiplies run one after the other, so
/// crc32fast's four-way fold wins beyond (docs/decisions.md, "ICRC fold"). Only x86-64 has
/// the fold (`folded`), so only there does the constant exist.
#[cfg(target_arch = "x86_64")]
const FOLD_MAX_LEN: usize = ONE_PASS_LEN;

/// ICRC over a RoCEv2 IPv4 datagram (`datagram_without_icrc` = IPv4 header .. end of pad,
/// assuming a 20-byte IPv4 header), masked as the specification requires: 8 × 0xFF pseudo-LRH,
/// IPv4 TOS/TTL/checksum all ones, UDP checksum 0xFFFF, BTH byte 4 0xFF. Returns the CRC-32
/// value (zlib's `crc32`); on the wire it is stored least-significant byte first.
#[inline]
pub fn icrc_ipv4(datagram_without_icrc: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if datagram_without_icrc.len() <= FOLD_MAX_LEN {
        if std::arch::is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: the CPU has PCLMULQDQ (checked just above) and SSE2 (every x86-64 has
            // it), the only features `folded` needs; it has no other precondition.
            if let Some(icrc) = unsafe { folded::icrc(datagram_without_icrc) } {
                return icrc;
            }
        }
    } else if wide_fold() {
        // SAFETY: the CPU has AVX-512F, VPCLMULQDQ and PCLMULQDQ (`wide_fold`), the only
        // features `wide` needs; it has no other precondition.
        if let Some(icrc) = unsafe { wide::icrc(datagram_without_icrc, &WIDE_MASKS_IPV4) } {
            return icrc;
        }
    }
    icrc_portable(datagram_without_icrc)
}

/// Whether the CPU can run the 512-bit fold (`wide`): std caches what it detected, so this is
/// a load and a test.
#[cfg(target_arch = "x86_64")]
#[inline]
fn wide_fold() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
}

/// `MASKED_BYTES` as the 512-bit fold ORs them in.
#[cfg(target_arch = "x86_64")]
static WIDE_MASKS_IPV4: wide::Masks = {
    let mut ones = [(0, 0xFF); MASKED_BYTES.len()];
    let mut i = 0;
    while i < ones.len() {
        ones[i].0 = MASKED_BYTES[i];
        i += 1;
    }
    wide::masks(&ones)
};

/// [`icrc_ipv4`] with crc32fast over a masked copy: for any length, on any CPU.
fn icrc_portable(datagram_without_icrc: &[u8]) -> u32 {
    /// A hasher seeded with the pseudo-LRH, made once and copied: making one probes the CPU's
    /// features, every time.
    fn seeded() -> Hasher {
        static SEEDED: OnceLock<Hasher> = OnceLock::new();
        SEEDED.get_or_init(|| Hasher::new_with_initial(PSEUDO_LRH_CRC)).clone()
    }
    let len = datagram_without_icrc.len();
    if (MASKED_LEN..=ONE_PASS_LEN).contains(&len) {
        let mut masked = [0u8; ONE_PASS_LEN];
        masked[..len].copy_from_slice(datagram_without_icrc);
        for at in MASKED_BYTES {
            masked[at] = 0xFF;
        }
        let mut hasher = seeded();
        hasher.update(&masked[..len]);
        return hasher.finalize();
    }
    let head_len = len.min(MASKED_LEN);
    let (head, tail) = datagram_without_icrc.split_at(head_len);
    let mut masked = [0u8; MASKED_LEN];
    masked[..head_len].copy_from_slice(head);
    for at in MASKED_BYTES.into_iter().filter(|&at| at < head_len) {
        masked[at] = 0xFF;
    }
    let mut hasher = seeded();
    hasher.update(&masked[..head_len]);
    hasher.update(tail);
    hasher.finalize()
}

/// Bytes at the start of an IPv6 datagram that contain masked fields: IPv6 (40) + UDP (8) +
/// BTH (12).
const MASKED_LEN_IPV6: usize = 60;

/// The bits of an IPv6 datagram that the ICRC hashes as ones, by byte offset: the version
/// stays; the traffic class and flow label (the rest of the first word) and the hop limit; then
/// the UDP checksum and the BTH's FECN/BECN/reserved byte.
const MASKED_BITS_IPV6: [(usize, u8); 8] =
    [(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF), (46, 0xFF), (47, 0xFF), (52, 0xFF)];

/// `MASKED_BITS_IPV6` as the 512-bit fold ORs them in.
#[cfg(target_arch = "x86_64")]
static WIDE_MASKS_IPV6: wide::Masks = wide::masks(&MASKED_BITS_IPV6);

/// ICRC over a RoCEv2 IPv6 datagram (`datagram_without_icrc` = IPv6 header .. end of pad,
/// assuming no extension headers), masked as the specification requires: 8 × 0xFF
/// pseudo-LRH, IPv6 traffic class, flow label and hop limit all ones, UDP checksum 0xFFFF,
/// BTH byte 4 0xFF. Returns the CRC-32 value, stored least-significant byte first. IPv6
/// datagrams are rare enough (a QP sending from an IPv6 GID) to take crc32fast over a masked
/// copy of the headers rather than the 16-byte fold; over 128 bytes they take the 512-bit
/// fold where the CPU has it, as IPv4 ones do.
pub fn icrc_ipv6(datagram_without_icrc: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if datagram_without_icrc.len() > FOLD_MAX_LEN && wide_fold() {
        // SAFETY: as in `icrc_ipv4`.
        if let Some(icrc) = unsafe { wide::icrc(datagram_without_icrc, &WIDE_MASKS_IPV6) } {
            return icrc;
        }
    }
    let head_len = datagram_without_icrc.len().min(MASKED_LEN_IPV6);
    let (head, tail) = datagram_without_icrc.split_at(head_len);
    let mut masked = [0u8; MASKED_LEN_IPV6];
    masked[..head_len].copy_from_slice(head);
    for (at, bits) in MASKED_BITS_IPV6.into_iter().filter(|&(at, _)| at < head_len) {
        masked[at] |= bits;
    }
    let mut hasher = Hasher::new_with_initial(PSEUDO_LRH_CRC);
    hasher.update(&masked[..head_len]);
    hasher.update(tail);
    hasher.finalize()
}

/// The ICRCs of datagrams that differ from one base datagram of the same length only in the
/// bytes at a few fixed offsets, each from the base's ICRC with one table load per such byte
/// instead of hashing the datagram: how an RC QP's ACKs get theirs (`ack::AckTemplate`, whose
/// identification, PSN and AETH are all that change).
///
/// Why it works. CRC-32 is affine over GF(2): the CRC of a message is a linear function of its
/// bits plus a constant fixed by its length (the initial value and final complement; here also
/// the pseudo-LRH and the masked fields, the same in every datagram). So for datagrams A and B
/// of one length, ICRC(A) ⊕ ICRC(B) = crc0(A ⊕ B), where crc0 is the CRC seeded with 0 and not
/// complemented, which is linear. A ⊕ B is zero except at the offsets, and crc0 of leading
/// zeros is 0, so crc0(A ⊕ B) is the ⊕, over the offsets, of crc0 of the byte there followed by
/// as many zero bytes as come after it in the datagram. That is linear in the byte, so it is a
/// 256-entry table for each offset, fixed by the offset's distance from the end.
#[derive(Debug)]
pub(crate) struct IcrcPatch<const N: usize> {
    /// `tables[i][b]`: crc0 of the byte `b` at the `i`-th offset followed by zeros to the end.
    tables: [[u32; 256]; N],
}

impl<const N: usize> IcrcPatch<N> {
    /// The tables for bytes at `offsets` of datagrams whose ICRC covers `covered_len` bytes (the
    /// datagram without its ICRC). Meant to be evaluated at compile time, into a `static`.
    ///
    /// # Panics
    /// If an offset is not below `covered_len` or is a masked byte (one that the ICRC hashes as
    /// 0xFF, whatever it holds): a table for it would be wrong.
    pub(crate) const fn new(covered_len: usize, offsets: [usize; N]) -> IcrcPatch<N> {
        let mut tables = [[0; 256]; N];
        let mut i = 0;
        while i < N {
            let at = offsets[i];
            assert!(at < covered_len, "an offset inside the bytes the ICRC covers");
            let mut m = 0;
            while m < MASKED_BYTES.len() {
                assert!(MASKED_BYTES[m] != at, "an offset the ICRC does not mask");
                m += 1;
            }
            tables[i] = byte_contributions(covered_len - 1 - at);
            i += 1;
        }
        IcrcPatch { tables }
    }

    /// The ICRC of a datagram that differs from a base datagram, whose ICRC is `base_icrc`,
    /// only at the offsets, where its bytes XOR the base's are `changes` (in the order of the
    /// offsets; simply its bytes there if the base has zeros).
    #[inline]
    pub(crate) fn icrc(&self, base_icrc: u32, changes: [u8; N]) -> u32 {
        let mut icrc = base_icrc;
        for (table, change) in self.tables.iter().zip(changes) {
            icrc ^= table[usize::from(change)];
        }
        icrc
    }
}

/// crc0 (seeded with 0, not complemented) of each byte value followed by `zeros_after` zero
/// bytes. Linear in the byte: the eight single bits are hashed, every other entry is the XOR of
/// the entries of its bits.
const fn byte_contributions(zeros_after: usize) -> [u32; 256] {
    let mut table = [0; 256];
    let mut bit = 0;
    while bit < 8 {
        let mut register = crc0_byte(0, 1 << bit);
        let mut n = 0;
        while n < zeros_after {
            register = crc0_byte(register, 0);
            n += 1;
        }
        table[1 << bit] = register;
        bit += 1;
    }
    let mut byte: usize = 1;
    while byte < 256 {
        let lowest_bit = byte & byte.wrapping_neg();
        table[byte] = table[lowest_bit] ^ table[byte ^ lowest_bit];
        byte += 1;
    }
    table
}

/// The CRC-32 register after one more byte, a bit at a time, bit-reflected as zlib's (and the
/// ICRC) keeps it: no initial value or final complement, so crc0 is this from 0.
const fn crc0_byte(register: u32, byte: u8) -> u32 {
    /// The polynomial without its x^32 term, bit i ↔ x^(31−i).
    const REFLECTED_POLY: u32 = (POLY as u32).reverse_bits();
    let mut register = register ^ byte as u32;
    let mut bit = 0;
    while bit < 8 {
        register = if register & 1 == 1 { register >> 1 ^ REFLECTED_POLY } else { register >> 1 };
        bit += 1;
    }
    register
}

/// CRC-32 by carry-less multiplication (the folding of Intel's "Fast CRC computation for generic
/// polynomials using PCLMULQDQ", worked out here for the bit-reflected CRC-32 and for inputs
/// whose length is not a multiple of 16).
///
/// Conventions. A 16-byte block read as a little-endian `u128` holds the message bits in
/// transmission order from bit 0, so bit `k` is the coefficient of x^(127−k) (the "128-bit
/// frame"); a `u64` operand likewise has bit `j` ↔ x^(63−j). The carry-less product of two such
/// `u64`s, read in the 128-bit frame, is their polynomial product times x; the constants below
/// are therefore x^(n−1) mod P where the algebra needs x^n mod P. The CRC register of a message
/// M (seeded with 0, no final complement) is reflect32(M·x^32 mod P).
#[cfg(target_arch = "x86_64")]
mod wide;

#[cfg(target_arch = "x86_64")]
mod folded {
    use super::{MASKED_LEN, POLY, PSEUDO_LRH_CRC};
    use std::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si32, _mm_cvtsi32_si128, _mm_cvtsi64_si128,
        _mm_set_epi64x, _mm_slli_epi64, _mm_slli_si128, _mm_srli_si128, _mm_unpacklo_epi64,
        _mm_xor_si128,
    };

    /// x^n mod P, bit i ↔ x^i.
    pub(super) const fn x_pow_mod_p(n: u32) -> u64 {
        let mut r: u64 = 1;
        let mut i = 0;
        while i < n {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= POLY;
            }
            i += 1;
        }
        r
    }

    /// A polynomial of degree < 64 (bit i ↔ x^i) as a `u64` operand (bit j ↔ x^(63−j)).
    pub(super) const fn operand(poly: u64) -> u64 {
        poly.reverse_bits()
    }

    /// Folds the first half of a block 128 bits forward: x·(x^191 mod P) = x^192.
    const K191: u64 = operand(x_pow_mod_p(191));
    /// Folds the second half of a block 128 bits forward: x^128.
    const K127: u64 = operand(x_pow_mod_p(127));
    /// Reduces the first half of the last block: x^96.
    const K95: u64 = operand(x_pow_mod_p(95));
    /// Reduces the 32 highest coefficients left after that: x^64.
    const K63: u64 = operand(x_pow_mod_p(63));
    /// Barrett's μ = ⌊x^64 / P⌋ (degree 32) as an operand.
    const MU: u64 = operand(x64_div_p());
    /// P (degree 32) as an operand.
    const P: u64 = operand(POLY);

    /// ⌊x^64 / P⌋ by long division, bit i ↔ x^i.
    const fn x64_div_p() -> u64 {
        let mut rem: u128 = 1 << 64;
        let mut quotient: u64 = 0;
        let mut deg = 64;
        while deg >= 32 {
            if rem & (1 << deg) != 0 {
                rem ^= (POLY as u128) << (deg - 32);
                quotient |= 1 << (deg - 32);
            }
            deg -= 1;
        }
        quotient
    }

    /// 0xFF at the masked offsets of each of the first three 16-byte blocks (see
    /// `MASKED_BYTES`), OR-ed into the bytes as they are loaded.
    const MASKS: [u128; 3] = {
        let mut masks = [0u128; 3];
        let mut i = 0;
        while i < super::MASKED_BYTES.len() {
            let at = super::MASKED_BYTES[i];
            masks[at / 16] |= 0xFF << (8 * (at % 16));
            i += 1;
        }
        // `icrc` applies the third block's mask to whatever comes first after 32 bytes, be it
        // a block, 8 or 4 bytes: it must mask byte 32 only.
        assert!(masks[2] == 0xFF, "only byte 32 is masked after the first two blocks");
        masks
    };

    /// A 16-byte block (a little-endian `u128`) in a vector register.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn vector(block: u128) -> __m128i {
        _mm_set_epi64x((block >> 64) as i64, block as i64)
    }

    /// The block `x` (= L·x^64 + H), followed by the block `next`, as one block congruent mod P:
    /// x·x^128 + next = L·x^192 + H·x^128 + next.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn fold(x: __m128i, next: __m128i) -> __m128i {
        let k = _mm_set_epi64x(K127 as i64, K191 as i64);
        let folded =
            _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, k), _mm_clmulepi64_si128::<0x11>(x, k));
        _mm_xor_si128(folded, next)
    }

    /// The block `x` followed by the 8 bytes `next` (little-endian): x·x^64 + next
    /// = L·x^128 + H·x^64 + next; H·x^64 + next is the block (H, next).
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn fold_8(x: __m128i, next: u64) -> __m128i {
        let shifted = _mm_unpacklo_epi64(_mm_srli_si128::<8>(x), _mm_cvtsi64_si128(next as i64));
        _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, _mm_cvtsi64_si128(K127 as i64)), shifted)
    }

    /// The block `x` followed by the 4 bytes `next` (little-endian): x·x^32 + next
    /// = L·x^96 + H·x^32 + next, where H·x^32 + next is the frame's bits 32–127.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn fold_4(x: __m128i, next: u32) -> __m128i {
        let shifted = _mm_xor_si128(
            _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)),
            _mm_slli_si128::<12>(_mm_cvtsi32_si128(next as i32)),
        );
        _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, _mm_cvtsi64_si128(K95 as i64)), shifted)
    }

    /// The CRC register reflect32(x·x^32 mod P) of a last block `x`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn reduce(x: __m128i) -> u32 {
        // x·x^32 ≡ L·x^96 + H·x^32: degree < 96, in bits 32–127 of the frame.
        let s = fold_4(x, 0);
        // Its 32 highest coefficients (bits 32–63) times x^64, plus the rest: a polynomial v of
        // degree < 64 in the high half (bits 64–127).
        let t = _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(s, _mm_cvtsi64_si128(K63 as i64)), s);
        // Barrett. q = ⌊⌊v / x^32⌋·μ / x^32⌋: ⌊v / x^32⌋ is the low 32 bits of v, as an operand
        // v << 32; q is bits 31–94 of the product, whose bits below 63 are 0, so (p >> 32) << 1.
        let a = _mm_slli_epi64::<32>(t);
        let p = _mm_clmulepi64_si128::<0x01>(a, _mm_cvtsi64_si128(MU as i64));
        let q = _mm_slli_epi64::<1>(_mm_srli_si128::<4>(p));
        // v mod P = (v − q·P) mod x^32: the high 32 bits of v XOR bits 95–126 of q·P, which
        // the lane shift moves to bits 96–127 next to them.
        let c = _mm_clmulepi64_si128::<0x00>(q, _mm_cvtsi64_si128(P as i64));
        let r = _mm_xor_si128(t, _mm_slli_epi64::<1>(c));
        _mm_cvtsi128_si32(_mm_srli_si128::<12>(r)) as u32
    }

    /// [`super::icrc_ipv4`] of a datagram at least `MASKED_LEN` bytes long and a multiple of 4
    /// (as every datagram is), or `None` for another length.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn icrc(datagram: &[u8]) -> Option<u32> {
        if datagram.len() < MASKED_LEN || !datagram.len().is_multiple_of(4) {
            return None;
        }
        let (head, mut rest) = datagram.split_first_chunk::<32>()?;
        let (first, second) = head.split_at(16);
        let block = |b: &[u8]| u128::from_le_bytes(b.try_into().expect("halves of 32 bytes"));
        // The register after the pseudo-LRH is XOR-ed into the first 32 message bits.
        let mut x = vector((block(first) | MASKS[0]) ^ u128::from(!PSEUDO_LRH_CRC));
        x = fold(x, vector(block(second) | MASKS[1]));
        // The rest starts with the BTH's byte 4, the last masked byte; then nothing is masked.
        let mut mask = MASKS[2];
        while let Some((next, tail)) = rest.split_first_chunk::<16>() {
            x = fold(x, vector(u128::from_le_bytes(*next) | mask));
            mask = 0;
            rest = tail;
        }
        if let Some((next, tail)) = rest.split_first_chunk::<8>() {
            x = fold_8(x, u64::from_le_bytes(*next) | mask as u64);
            mask = 0;
            rest = tail;
        }
        if let Some(next) = rest.first_chunk::<4>() {
            x = fold_4(x, u32::from_le_bytes(*next) | mask as u32);
        }
        Some(!reduce(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ICRC by its definition: crc32 over 8 × 0xFF and a masked copy.
    fn by_definition(datagram: &[u8]) -> u32 {
        let mut masked = vec![0xFF; 8];
        masked.extend_from_slice(datagram);
        for at in MASKED_BYTES.into_iter().filter(|&at| at < datagram.len()) {
            masked[8 + at] = 0xFF;
        }
        crc32fast::hash(&masked)
    }

    #[test]
    fn seed_is_the_crc_of_the_pseudo_lrh() {
        assert_eq!(crc32fast::hash(&[0xFF; 8]), PSEUDO_LRH_CRC);
        assert_eq!(!crc32fast::hash(&[0xFF; 8]), 0xDEBB_20E3);
    }

    #[test]
    fn matches_a_plain_crc_over_a_masked_copy() {
        let datagram: Vec<u8> = (0..97u8).map(|b| b.wrapping_mul(37)).collect();
        let mut masked = vec![0xFF; 8];
        masked.extend_from_slice(&datagram);
        for at in MASKED_BYTES {
            masked[8 + at] = 0xFF;
        }
        assert_eq!(icrc_ipv4(&datagram), crc32fast::hash(&masked));
    }

    #[test]
    fn every_length_matches_the_definition_on_every_path() {
        for len in (0..=300).chain([1084, 4140, 4096 + 60]) {
            for seed in [0x5a_u8, 0x00, 0xFF] {
                let datagram: Vec<u8> =
                    (0..len).map(|i| (i as u8).wrapping_mul(113) ^ seed).collect();
                let expected = by_definition(&datagram);
                assert_eq!(icrc_ipv4(&datagram), expected, "length {len}");
                assert_eq!(icrc_portable(&datagram), expected, "length {len}, portable");
            }
        }
    }

    /// A xorshift64 stream of pseudo-random words from `state` (not zero).
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn random_datagrams_match_the_definition() {
        // A xorshift stream: every bit of the input matters, at every position.
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let len = 40 + (next() % 200) as usize;
            let datagram: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            assert_eq!(icrc_ipv4(&datagram), by_definition(&datagram), "length {len}");
        }
    }

    #[test]
    fn masked_bytes_do_not_matter_and_others_do() {
        let datagram: Vec<u8> = (0..52u8).collect();
        let icrc = icrc_ipv4(&datagram);
        for at in 0..datagram.len() {
            let mut changed = datagram.clone();
            changed[at] ^= 0x41;
            let masked = MASKED_BYTES.contains(&at);
            assert_eq!(icrc_ipv4(&changed) == icrc, masked, "byte {at}");
        }
    }

    #[test]
    fn byte_contributions_are_the_crc_change_of_one_byte_set() {
        // crc(P ‖ b ‖ 0ⁿ) ⊕ crc(P ‖ 0 ‖ 0ⁿ), by crc32fast: the contribution of byte b with n
        // bytes after it, whatever comes before.
        let prefix: Vec<u8> = (0..13u8).map(|i| i.wrapping_mul(59) ^ 0xA7).collect();
        for zeros_after in (0..=70).chain([127, 1000]) {
            let table = byte_contributions(zeros_after);
            let mut message = prefix.clone();
            message.resize(prefix.len() + 1 + zeros_after, 0);
            let unset = crc32fast::hash(&message);
            for byte in 0..=u8::MAX {
                message[prefix.len()] = byte;
                assert_eq!(
                    table[usize::from(byte)],
                    crc32fast::hash(&message) ^ unset,
                    "byte {byte:#04x} with {zeros_after} bytes after it"
                );
            }
        }
    }

    #[test]
    fn a_patched_icrc_is_the_icrc_of_the_changed_datagram() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        // Unmasked bytes at either end of the masked header and in the payload; lengths on
        // both hashing paths.
        const OFFSETS: [usize; 6] = [0, 9, 25, 33, 39, 43];
        for covered_len in [44, 48, 100, 132, 300] {
            let patch = IcrcPatch::new(covered_len, OFFSETS);
            for _ in 0..200 {
                let mut datagram: Vec<u8> = (0..covered_len).map(|_| next() as u8).collect();
                let (base, base_icrc) = (datagram.clone(), icrc_ipv4(&datagram));
                let mut changes = [0; OFFSETS.len()];
                for (at, change) in OFFSETS.into_iter().zip(&mut changes) {
                    *change = next() as u8;
                    datagram[at] ^= *change;
                }
                // Masked bytes may differ too: the ICRC does not see them.
                for at in MASKED_BYTES {
                    datagram[at] = next() as u8;
                }
                assert_ne!(datagram, base);
                assert_eq!(
                    patch.icrc(base_icrc, changes),
                    by_definition(&datagram),
                    "{covered_len} bytes, changes {changes:02x?}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "an offset the ICRC does not mask")]
    fn a_patch_refuses_a_masked_offset() {
        let _ = IcrcPatch::new(44, [4, 8]);
    }

    #[test]
    #[should_panic(expected = "an offset inside the bytes the ICRC covers")]
    fn a_patch_refuses_an_offset_past_the_covered_bytes() {
        let _ = IcrcPatch::new(44, [44]);
    }

    #[test]
    fn short_input_does_not_panic() {
        for len in 0..=MASKED_LEN {
            let _ = icrc_ipv4(&vec![0u8; len]);
        }
        assert_eq!(icrc_ipv4(&[]), PSEUDO_LRH_CRC);
    }
}
