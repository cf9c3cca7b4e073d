//! Cache prefetch hints: ask the CPU to bring bytes the program reads a little later into the
//! cache now, so that the read does not wait on memory. A hint changes no result (and does
//! nothing off x86-64); it pays where a deep queue lets data leave the cache between the time
//! it is written and the time it is read: the simulator's packets in flight and the send WQEs
//! that an ACK retires (docs/decisions.md, "Prefetching what the next event reads").

/// Prefetches every cache line of `bytes` into all cache levels (`PREFETCHT0`).
#[inline(always)]
pub fn prefetch_bytes(bytes: &[u8]) {
    prefetch_range(bytes.as_ptr(), bytes.len());
}

/// Prefetches every cache line of `value` (its own bytes, not what it points to).
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    prefetch_range((value as *const T).cast(), size_of::<T>());
}

/// Prefetches the cache lines that hold the `len` bytes from `start`: one every 64 bytes, and
/// the last byte's (which the others miss when `start` is not at a line's start). No
/// arithmetic beyond the offsets, so that a `T` of known size unrolls to its prefetches.
#[inline(always)]
fn prefetch_range(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        if len == 0 {
            return;
        }
        let mut offset = 0;
        while offset < len {
            // SAFETY: a prefetch reads nothing the program sees and never faults, whatever the
            // address; these are the bytes of a live reference.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset).cast()) };
            offset += 64;
        }
        // SAFETY: as above.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(len - 1).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_slice_or_value_may_be_prefetched_and_nothing_changes() {
        let bytes: Vec<u8> = (0..=255).collect();
        // Empty, one byte, across a line, every offset and length near the ends.
        for start in 0..70 {
            for len in [0, 1, 2, 63, 64, 65, 127, 128, 129, 186 - start] {
                prefetch_bytes(&bytes[start..start + len]);
            }
        }
        prefetch(&bytes);
        prefetch(&[0u64; 40]);
        prefetch(&());
        assert!(bytes.iter().enumerate().all(|(i, &b)| usize::from(b) == i));
    }
}
