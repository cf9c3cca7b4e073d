//! Copies of a few bytes to a few dozen, inline: the 8-byte payloads, 48-byte ACKs and 52-byte
//! SENDs that a ping-pong hop moves five times (gather, payload, ring slot, scatter, ACK slot).
//! A copy whose length is known only at run time is otherwise a call into the C library's
//! `memcpy`, whose dispatch costs more than the copy at these sizes. Up to 64 bytes are moved
//! as two fixed-size pieces that overlap in the middle (the way `memcpy` itself does it);
//! anything longer goes to `memcpy` (docs/decisions.md, "Inline copies up to 64 bytes").

use std::ptr;

/// `n` bytes from `src` to `dst`, which do not overlap.
///
/// # Safety
/// As for [`ptr::copy_nonoverlapping`]: `src` is valid for reads and `dst` for writes of `n`
/// bytes, and the two ranges do not overlap. No alignment is needed.
#[inline(always)]
pub(crate) unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, n: usize) {
    /// Both ends of the range as two `N`-byte pieces (`N <= n <= 2N`): every byte is covered.
    #[inline(always)]
    unsafe fn ends<const N: usize>(src: *const u8, dst: *mut u8, n: usize) {
        // SAFETY: N <= n, so both pieces lie inside the caller's ranges; both are read before
        // either is written, and the source and destination do not overlap.
        unsafe {
            let head = ptr::read_unaligned(src.cast::<[u8; N]>());
            let tail = ptr::read_unaligned(src.add(n - N).cast::<[u8; N]>());
            ptr::write_unaligned(dst.cast::<[u8; N]>(), head);
            ptr::write_unaligned(dst.add(n - N).cast::<[u8; N]>(), tail);
        }
    }
    // SAFETY (each arm): the caller's contract, and `ends` is called with N <= n <= 2N.
    unsafe {
        match n {
            0 => {}
            1 => *dst = *src,
            2..=3 => ends::<2>(src, dst, n),
            4..=7 => ends::<4>(src, dst, n),
            8..=15 => ends::<8>(src, dst, n),
            16..=31 => ends::<16>(src, dst, n),
            32..=64 => ends::<32>(src, dst, n),
            _ => ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// `dst.copy_from_slice(src)`, inline for short slices.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does.
#[inline(always)]
pub(crate) fn copy_from_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy between slices of one length");
    // SAFETY: both slices are `src.len()` long, and a `&mut` cannot overlap a `&`.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_copies_exactly_its_bytes() {
        let src: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 0..=150 {
            for offset in [0, 1, 3, 7] {
                // Guard bytes around the destination: nothing outside it may change.
                let mut buf = vec![0xA5u8; n + 2 * 64];
                copy_from_slice(&mut buf[64..64 + n], &src[offset..offset + n]);
                assert_eq!(&buf[64..64 + n], &src[offset..offset + n], "{n} bytes from +{offset}");
                assert!(buf[..64].iter().chain(&buf[64 + n..]).all(|&b| b == 0xA5), "{n} bytes");
            }
        }
    }

    #[test]
    #[should_panic(expected = "one length")]
    fn slices_of_two_lengths_are_refused() {
        copy_from_slice(&mut [0; 3], &[1, 2]);
    }
}
