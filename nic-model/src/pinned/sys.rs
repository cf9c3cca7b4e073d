//! The memory-map system calls, made directly rather than through the C library's wrappers:
//! a program may hook those (UCX's memory hooks patch `mmap`, `munmap`, `mremap` and
//! `madvise` to drop its registration cache's entries), and moving registered pages changes
//! nothing the program could see: its cache must not take it for an unmapping.

use libc::{c_int, c_void, off_t};

/// `mmap(2)`; `MAP_FAILED` on failure.
///
/// # Safety
/// As `mmap`.
pub(super) unsafe fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's, as for mmap.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

/// `munmap(2)`.
///
/// # Safety
/// As `munmap`.
pub(super) unsafe fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: the caller's, as for munmap.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `mremap(2)` to a fixed address; `MAP_FAILED` on failure.
///
/// # Safety
/// As `mremap`.
pub(super) unsafe fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's, as for mremap.
    unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new) as *mut c_void }
}

/// `madvise(2)`.
///
/// # Safety
/// As `madvise`.
pub(super) unsafe fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    // SAFETY: the caller's, as for madvise.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}
