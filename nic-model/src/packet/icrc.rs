//! The RoCEv2 Invariant CRC (ICRC): CRC-32 over the fields of a datagram that no router
//! changes, so that corruption anywhere between the two NICs is caught.

use std::sync::OnceLock;

use crc32fast::Hasher;

/// Bytes at the start of a datagram that contain masked fields: IPv4 (20) + UDP (8) + BTH (12).
const MASKED_LEN: usize = 40;

/// Offsets, within the datagram, of the bytes replaced by 0xFF before hashing: IPv4 TOS (1),
/// TTL (8) and header checksum (10–11); UDP checksum (26–27); BTH byte 4, FECN/BECN/reserved (32).
const MASKED_BYTES: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];

/// The CRC-32 of the 8 bytes of 0xFF that stand in for the (absent) LRH, i.e. the complement of
/// rxe's seed 0xDEBB20E3: hashing starts from here instead of hashing the 8 bytes every time.
const PSEUDO_LRH_CRC: u32 = !0xDEBB_20E3;

/// Datagrams up to this long are hashed in one pass over a masked copy: for an ACK or a small
/// message, a second pass (the masked header, then the rest in place) costs about a fifth more.
const ONE_PASS_LEN: usize = 128;

/// A hasher seeded with the pseudo-LRH, made once and copied: making one probes the CPU's
/// features, every time.
#[inline]
fn seeded() -> Hasher {
    static SEEDED: OnceLock<Hasher> = OnceLock::new();
    SEEDED.get_or_init(|| Hasher::new_with_initial(PSEUDO_LRH_CRC)).clone()
}

/// The CRC of `masked`, whose masked fields already are 0xFF.
#[inline]
fn hash(masked: &[u8]) -> u32 {
    let mut hasher = seeded();
    hasher.update(masked);
    hasher.finalize()
}

/// ICRC over a RoCEv2 IPv4 datagram (`datagram_without_icrc` = IPv4 header .. end of pad,
/// assuming a 20-byte IPv4 header), masked as the specification requires: 8 × 0xFF pseudo-LRH,
/// IPv4 TOS/TTL/checksum all ones, UDP checksum 0xFFFF, BTH byte 4 0xFF. Returns the CRC-32
/// value (zlib's `crc32`); on the wire it is stored least-significant byte first.
pub fn icrc_ipv4(datagram_without_icrc: &[u8]) -> u32 {
    let len = datagram_without_icrc.len();
    if (MASKED_LEN..=ONE_PASS_LEN).contains(&len) {
        let mut masked = [0u8; ONE_PASS_LEN];
        masked[..len].copy_from_slice(datagram_without_icrc);
        for at in MASKED_BYTES {
            masked[at] = 0xFF;
        }
        return hash(&masked[..len]);
    }
    let head_len = len.min(MASKED_LEN);
    let (head, tail) = datagram_without_icrc.split_at(head_len);
    let mut masked = [0u8; MASKED_LEN];
    masked[..head_len].copy_from_slice(head);
    for at in MASKED_BYTES {
        masked[at] = 0xFF;
    }
    let mut hasher = seeded();
    hasher.update(&masked[..head_len]);
    hasher.update(tail);
    hasher.finalize()
}

/// [`icrc_ipv4`] of a datagram being built, in one pass: the masked fields are set to 0xFF in
/// place for the hashing and then put back, so `datagram_without_icrc` ends unchanged.
#[inline]
pub(crate) fn icrc_ipv4_in_place(datagram_without_icrc: &mut [u8]) -> u32 {
    if datagram_without_icrc.len() < MASKED_LEN {
        return icrc_ipv4(datagram_without_icrc);
    }
    let mut kept = [0u8; MASKED_BYTES.len()];
    for (byte, at) in kept.iter_mut().zip(MASKED_BYTES) {
        *byte = std::mem::replace(&mut datagram_without_icrc[at], 0xFF);
    }
    let icrc = hash(datagram_without_icrc);
    for (at, byte) in MASKED_BYTES.into_iter().zip(kept) {
        datagram_without_icrc[at] = byte;
    }
    icrc
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_length_matches_the_definition_in_place_or_not() {
        for len in (0..=300).chain([1084, 4140]) {
            let datagram: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(113) ^ 0x5a).collect();
            let mut masked = vec![0xFF; 8];
            masked.extend_from_slice(&datagram);
            for at in MASKED_BYTES.into_iter().filter(|&at| at < len) {
                masked[8 + at] = 0xFF;
            }
            let expected = crc32fast::hash(&masked);
            assert_eq!(icrc_ipv4(&datagram), expected, "length {len}");
            let mut building = datagram.clone();
            assert_eq!(icrc_ipv4_in_place(&mut building), expected, "length {len}, in place");
            assert_eq!(building, datagram, "the masked fields are put back");
        }
    }

    #[test]
    fn short_input_does_not_panic() {
        for len in 0..=MASKED_LEN {
            let _ = icrc_ipv4(&vec![0u8; len]);
        }
        assert_eq!(icrc_ipv4(&[]), PSEUDO_LRH_CRC);
    }
}
