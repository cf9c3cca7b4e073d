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

/// The bytes at a message's end that [`copy_ordered`] stores last, in address order.
pub(crate) const TAIL: usize = 8;

/// [`copy_nonoverlapping`] whose last bytes become visible last, as a NIC's DMA places a
/// message in address order and as programs that poll a message's last byte rely on
/// (`ib_write_lat`, FaRM- and HERD-style rings): everything but the last [`TAIL`] bytes is
/// copied (a `memcpy` stores in any order: glibc stores its tail vectors early, `rep movsb`
/// is unordered within itself), then a release fence, then the tail in address order
/// ([`store_in_order`]). On x86 the fence costs nothing (the CPU keeps stores in order, and
/// glibc fences its own non-temporal stores).
///
/// # Safety
/// As for [`copy_nonoverlapping`].
#[inline]
pub(crate) unsafe fn copy_ordered(src: *const u8, dst: *mut u8, n: usize) {
    let body = n.saturating_sub(TAIL);
    // SAFETY: the caller's contract; [body, n) is the rest of both ranges.
    unsafe {
        copy_nonoverlapping(src, dst, body);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        let mut tail = [0u8; TAIL];
        copy_nonoverlapping(src.add(body), tail.as_mut_ptr(), n - body);
        store_in_order(dst.add(body), &tail[..n - body]);
    }
}

/// Stores `bytes` (at most [`TAIL`]) at `dst` in address order, each visible only after
/// everything stored before it: one release store when they are an aligned 8-byte word,
/// else one release store per byte.
///
/// # Safety
/// `dst..dst + bytes.len()` must be valid for writes.
#[inline]
pub(crate) unsafe fn store_in_order(dst: *mut u8, bytes: &[u8]) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
    if let Ok(word) = <[u8; 8]>::try_from(bytes) {
        if (dst as usize).is_multiple_of(8) {
            // SAFETY: 8 writable bytes (the caller), 8-aligned (just checked).
            let w = unsafe { AtomicU64::from_ptr(dst as *mut u64) };
            w.store(u64::from_ne_bytes(word), Ordering::Release);
            return;
        }
    }
    for (k, &b) in bytes.iter().enumerate() {
        // SAFETY: within `dst..dst + bytes.len()` (the caller).
        unsafe { AtomicU8::from_ptr(dst.add(k)).store(b, Ordering::Release) };
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

    /// The tail of [`copy_ordered`] is stored after everything before it, whichever path the
    /// C library's `memcpy` takes: the message ends 8 bytes into a write-protected page, so
    /// the first store into the tail faults, and the handler checks then that every byte
    /// before the tail is already there. (A plain `memcpy` fails this: glibc stores a tail
    /// vector before the middle, for lengths from 65 bytes up.)
    #[test]
    #[cfg(target_os = "linux")]
    fn the_tail_of_an_ordered_copy_is_stored_last() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static WATCHED: AtomicUsize = AtomicUsize::new(0);
        static BODY: AtomicUsize = AtomicUsize::new(0);
        static BODY_LEN: AtomicUsize = AtomicUsize::new(0);
        static FAULTS: AtomicUsize = AtomicUsize::new(0);
        static MISSING: AtomicUsize = AtomicUsize::new(0);
        const PAGE: usize = 4096;
        const FILL: u8 = 0xa5;

        extern "C" fn on_segv(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
            // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
            let addr = unsafe { (*info).si_addr() } as usize;
            let page = WATCHED.load(Ordering::SeqCst);
            if page == 0 || addr < page || addr >= page + PAGE {
                // Not this test's fault: die of it as without the handler.
                // SAFETY: restoring the default action is async-signal-safe.
                unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
                return;
            }
            FAULTS.fetch_add(1, Ordering::SeqCst);
            let (body, len) = (BODY.load(Ordering::SeqCst), BODY_LEN.load(Ordering::SeqCst));
            // SAFETY: the body lies in the test's readable page just below the watched one.
            let missing = (0..len)
                .filter(|&k| unsafe { std::ptr::read_volatile((body + k) as *const u8) } != FILL)
                .count();
            MISSING.fetch_add(missing, Ordering::SeqCst);
            // SAFETY: the watched page is the test's own mapping; mprotect is async-signal-safe.
            unsafe {
                libc::mprotect(page as *mut libc::c_void, PAGE, libc::PROT_READ | libc::PROT_WRITE)
            };
        }

        // No registration's moving window may open meanwhile: it would save this test's
        // action and put it back after the test had restored its own (or the reverse).
        let _windows = crate::pinned::hold_windows();
        // SAFETY: a private anonymous mapping of two pages, used only here; the handler is
        // this process's SIGSEGV action for the duration of the test, then the previous one.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let base = map as *mut u8;
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_segv as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO;
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGSEGV, &act, &mut old), 0);
            let src = vec![FILL; PAGE + TAIL];
            for n in [9, 40, 108, 200, 300, 1000, 3000, PAGE + TAIL] {
                let body = n - TAIL;
                let dst = base.add(PAGE - body);
                std::ptr::write_bytes(base, 0, 2 * PAGE);
                BODY.store(dst as usize, Ordering::SeqCst);
                BODY_LEN.store(body, Ordering::SeqCst);
                MISSING.store(0, Ordering::SeqCst);
                FAULTS.store(0, Ordering::SeqCst);
                let watched = base.add(PAGE);
                assert_eq!(libc::mprotect(watched as *mut libc::c_void, PAGE, libc::PROT_READ), 0);
                WATCHED.store(watched as usize, Ordering::SeqCst);
                copy_ordered(src.as_ptr(), dst, n);
                WATCHED.store(0, Ordering::SeqCst);
                assert_eq!(FAULTS.load(Ordering::SeqCst), 1, "{n} bytes: the tail was stored");
                assert_eq!(
                    MISSING.load(Ordering::SeqCst),
                    0,
                    "{n} bytes: bytes before the tail were missing when the tail was stored"
                );
                let got = std::slice::from_raw_parts(dst, n);
                assert!(got.iter().all(|&b| b == FILL), "{n} bytes: all copied");
            }
            assert_eq!(libc::sigaction(libc::SIGSEGV, &old, std::ptr::null_mut()), 0);
            libc::munmap(map, 2 * PAGE);
        }
    }
}
