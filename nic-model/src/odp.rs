//! On-demand paging (`IBV_ACCESS_ON_DEMAND`, rxe's `rxe_odp.c`): the NIC's accesses to a
//! program's memory that is registered but not pinned, so that may be unmapped, or mapped
//! again with other pages, at any time. Each access follows the program's mapping of the
//! moment and never faults: copies go through `process_vm_readv`/`process_vm_writev` on the
//! own process, which return `EFAULT` for a page that is not mapped (or not writable for a
//! write) instead of raising `SIGSEGV`; an atomic's word is first made present and writable
//! with `madvise(MADV_POPULATE_WRITE)`, which fails the same way and changes no byte.
//!
//! A failed access is the error rxe's `rxe_odp_mr_copy` gives when its page fault fails
//! (`EFAULT`): the caller turns it into the requester's `IBV_WC_LOC_PROT_ERR` or the
//! responder's remote-access NAK, as for a range outside the MR.

use verbs_api::{Errno, Error, Result};

/// One access of on-demand memory.
pub(crate) enum Op<'a> {
    /// Copy out of the program's memory into the buffer.
    Read(&'a mut [u8]),
    /// Copy the bytes into the program's memory.
    Write(&'a [u8]),
}

/// Does `op` at the program's address `addr`, fault-safe: `EFAULT` (naming the address) if a
/// page of the range is not mapped as the access needs; no byte is then promised to be copied.
pub(crate) fn access(addr: u64, op: Op<'_>) -> Result<()> {
    let (n, done) = match op {
        Op::Read(buf) => {
            let n = buf.len();
            let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: n };
            let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: n };
            // SAFETY: the local iovec is the caller's buffer; the remote one names our own
            // process's memory, which the kernel reads with a fault check (EFAULT, no signal).
            (n, unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) })
        }
        Op::Write(data) => {
            let n = data.len();
            let local = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: n };
            let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: n };
            // SAFETY: as above; the kernel only reads the local buffer.
            (n, unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) })
        }
    };
    if n == 0 || done == n as isize {
        return Ok(());
    }
    Err(fault(addr, n, done))
}

#[cold]
fn fault(addr: u64, n: usize, done: isize) -> Error {
    let why = match done {
        d if d < 0 => std::io::Error::last_os_error().to_string(),
        d => format!("only {d} bytes are mapped"),
    };
    Error::new(
        Errno::Fault,
        format!("on-demand MR: {n} bytes at {addr:#x} cannot be paged in ({why})"),
    )
}

/// The system's page size.
fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    }
}

/// Pages in `[addr, addr+len)` as a prefetch does (`ibv_advise_mr`): for writing
/// (`MADV_POPULATE_WRITE`) or reading (`MADV_POPULATE_READ`); `EFAULT` naming the range if a
/// page is not mapped so. Where the kernel lacks these (before Linux 5.14) a fault-safe read of
/// one byte per page stands in, for writing too.
pub(crate) fn populate(addr: u64, len: u64, write: bool) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let lo = addr & !(page - 1);
    let hi = addr.saturating_add(len).div_ceil(page) * page;
    let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
    // SAFETY: populating changes no byte of the range and maps nothing new: it faults in
    // pages already mapped, or fails (ENOMEM, EFAULT) where they are not.
    let rc = unsafe { libc::madvise(lo as *mut libc::c_void, (hi - lo) as usize, advice) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    // EINVAL is also the answer for a range mapped without the permission asked.
    if err.raw_os_error() == Some(libc::EINVAL) && !populate_known() {
        // A kernel before 5.14: read a byte of each page (which sees whether it is mapped
        // and readable, not whether it is writable).
        let mut at = lo.max(addr);
        while at < hi {
            access(at, Op::Read(&mut [0u8]))?;
            at = (at & !(page - 1)) + page;
        }
        return Ok(());
    }
    Err(Error::new(
        Errno::Fault,
        format!(
            "on-demand MR: {len} bytes at {addr:#x} cannot be paged in for {} ({err})",
            if write { "writing" } else { "reading" }
        ),
    ))
}

/// Whether the kernel knows `MADV_POPULATE_READ` (Linux 5.14+): asked once, of a page that is
/// surely mapped and readable (this function's own code).
fn populate_known() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| {
        let at = (populate_known as *const () as u64) & !(page_size() - 1);
        // SAFETY: populating a mapped code page for reading changes nothing.
        unsafe { libc::madvise(at as *mut libc::c_void, 1, libc::MADV_POPULATE_READ) == 0 }
    })
}

/// Makes the aligned 8-byte word at `addr` present and writable (an atomic's target), or
/// `EFAULT`.
pub(crate) fn probe_word(addr: u64) -> Result<()> {
    populate(addr, 8, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::mr::MrMemory;

    /// An anonymous mapping of `pages` pages.
    fn map(pages: usize) -> *mut u8 {
        let len = pages * page_size() as usize;
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p.cast()
    }

    #[test]
    fn accesses_follow_the_mapping_and_an_unmapped_page_is_efault() {
        let page = page_size() as usize;
        let p = map(2);
        let a = p as u64;
        access(a + 10, Op::Write(b"hello")).unwrap();
        let mut out = [0u8; 5];
        access(a + 10, Op::Read(&mut out)).unwrap();
        assert_eq!(&out, b"hello");
        probe_word(a + 8).unwrap();
        populate(a, 2 * page as u64, false).unwrap();
        // SAFETY: our mapping's second page.
        unsafe { libc::munmap(p.add(page).cast(), page) };
        let e = access(a + page as u64 - 2, Op::Read(&mut out)).unwrap_err();
        assert_eq!(e.errno, Errno::Fault, "{e}");
        let e = access(a + page as u64, Op::Write(b"x")).unwrap_err();
        assert_eq!(e.errno, Errno::Fault, "{e}");
        assert_eq!(probe_word(a + page as u64).unwrap_err().errno, Errno::Fault);
        assert_eq!(populate(a, 2 * page as u64, true).unwrap_err().errno, Errno::Fault);
        // A read-only page is readable, not writable.
        // SAFETY: our mapping's first page.
        unsafe { libc::mprotect(p.cast(), page, libc::PROT_READ) };
        access(a + 10, Op::Read(&mut out)).unwrap();
        assert_eq!(access(a + 10, Op::Write(b"x")).unwrap_err().errno, Errno::Fault);
        assert_eq!(probe_word(a + 8).unwrap_err().errno, Errno::Fault);
        // SAFETY: our mapping's first page.
        unsafe { libc::munmap(p.cast(), page) };
    }

    #[test]
    fn on_demand_memory_is_reached_only_fault_safely_and_within_its_length() {
        let page = page_size() as usize;
        let p = map(2);
        let m = MrMemory::on_demand(p as u64, 2 * page);
        assert!(m.is_odp());
        assert_eq!((m.addr(), m.len()), (p as u64, 2 * page));
        m.write(page - 2, b"abcd").unwrap();
        let mut out = [0u8; 4];
        m.read(page - 2, &mut out).unwrap();
        assert_eq!(&out, b"abcd");
        m.place(8, &7u64.to_ne_bytes()).unwrap();
        assert_eq!(m.fetch_add(8, 1), Some(7));
        assert_eq!(m.compare_swap(8, 8, 50), Some(8));
        assert_eq!(m.fetch_add(4, 1), None, "misaligned");
        assert_eq!(m.fetch_add(2 * page, 1), None, "out of bounds");
        let e = m.read(2 * page - 2, &mut out).unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "outside the MR: {e}");
        // SAFETY: our mapping's second page.
        unsafe { libc::munmap(p.add(page).cast(), page) };
        assert_eq!(m.read(page - 2, &mut out).unwrap_err().errno, Errno::Fault);
        assert_eq!(m.write(page, b"x").unwrap_err().errno, Errno::Fault);
        assert_eq!(m.fetch_add(page + 8, 1), None, "an unmapped word: no atomic, no fault");
        // An ordinary MR's copies are untouched: the fast path.
        let o = MrMemory::allocate(16).unwrap();
        assert!(!o.is_odp());
        o.write(8, b"12345678").unwrap();
        assert_eq!(o.fetch_add(8, 0), Some(u64::from_ne_bytes(*b"12345678")));
        // SAFETY: our mapping's first page.
        unsafe { libc::munmap(p.cast(), page) };
    }
}
