//! Registration of a program's memory as the kernel pins it (`ib_umem_get`, which every
//! verbs provider's `ibv_reg_mr` goes through): a range of length 0 is refused with `EINVAL`,
//! and a range whose pages are not all mapped — readable, and writable when the MR may be
//! written (`IBV_ACCESS_LOCAL_WRITE`, `REMOTE_WRITE`, `REMOTE_ATOMIC`) — with `EFAULT`, naming
//! the first address that cannot be pinned. A NIC never touches memory it could not pin, so no
//! peer's WRITE can fault inside the engine of the MR's owner.
//!
//! The check reads `/proc/self/maps` once per registration (registration is not on the data
//! path); where that file cannot be read it falls back to `mincore`, which sees whether pages
//! are mapped but not their protection.

use verbs_api::{AccessFlags, Errno, Error, Result};

/// The access flags under which the kernel pins pages for writing (`ib_access_writable`).
fn writable(access: AccessFlags) -> bool {
    access.intersects(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
    )
}

/// Whether `ibv_reg_mr` of `len` bytes at `addr` with `access` could pin them: `Ok`, or the
/// errno and reason the kernel would give.
pub fn check_pinnable(addr: u64, len: usize, access: AccessFlags) -> Result<()> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok();
    check_pinnable_in(maps.as_deref(), addr, len, access)
}

/// [`check_pinnable`] against `maps`, the text of `/proc/self/maps` read by the caller (None
/// where it cannot be read: `mincore` then).
pub(crate) fn check_pinnable_in(
    maps: Option<&str>,
    addr: u64,
    len: usize,
    access: AccessFlags,
) -> Result<()> {
    if len == 0 {
        return Err(Error::inval("ibv_reg_mr: length 0 (the kernel pins no pages for it)"));
    }
    let end = addr.checked_add(len as u64).ok_or_else(|| {
        Error::inval(format!("ibv_reg_mr: {addr:#x} + {len} passes the end of the address space"))
    })?;
    let write = writable(access);
    let hole = match maps {
        Some(maps) => first_unpinnable(maps, addr, end, write),
        None => first_unmapped(addr, end),
    };
    match hole {
        None => Ok(()),
        Some((at, why)) => Err(Error::new(
            Errno::Fault,
            format!(
                "ibv_reg_mr: {len} bytes at {addr:#x}: the memory at {at:#x} is {why}, so it \
                 cannot be pinned"
            ),
        )),
    }
}

/// The first address of `[start, end)` that `maps` (the text of `/proc/<pid>/maps`) says
/// cannot be pinned, and why; None when the whole range can.
fn first_unpinnable(maps: &str, start: u64, end: u64, write: bool) -> Option<(u64, &'static str)> {
    let mut at = start;
    for line in maps.lines() {
        let Some((range, perms, name)) = parse_line(line) else { continue };
        let (lo, hi) = range;
        if hi <= at {
            continue;
        }
        if lo > at {
            return Some((at, "not mapped"));
        }
        let perms = perms.as_bytes();
        if perms.first() != Some(&b'r') {
            return Some((at, "mapped without read access"));
        }
        if write && perms.get(1) != Some(&b'w') {
            return Some((at, "mapped read-only and the access flags let the MR be written"));
        }
        // The kernel's special mappings are not pages a NIC can pin.
        if name.starts_with("[vvar") || name == "[vsyscall]" {
            return Some((at, "a special kernel mapping"));
        }
        at = hi;
        if at >= end {
            return None;
        }
    }
    Some((at, "not mapped"))
}

/// One line of `/proc/<pid>/maps`: `start-end perms offset dev inode [name]`.
fn parse_line(line: &str) -> Option<((u64, u64), &str, &str)> {
    let mut fields = line.splitn(6, ' ');
    let (lo, hi) = fields.next()?.split_once('-')?;
    let range = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
    let perms = fields.next()?;
    let name = fields.nth(3).unwrap_or("").trim();
    Some((range, perms, name))
}

/// The first unmapped page of `[start, end)` by `mincore` (which fails with `ENOMEM` when a
/// page of its range is not mapped), found by halving; None when all are mapped.
fn first_unmapped(start: u64, end: u64) -> Option<(u64, &'static str)> {
    // SAFETY: sysconf only reads a system constant.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    };
    let mapped = |lo: u64, hi: u64| -> bool {
        let lo = lo & !(page - 1);
        let pages = (hi - lo).div_ceil(page) as usize;
        let mut vec = vec![0u8; pages];
        // SAFETY: mincore only reads the page tables of [lo, hi) and writes `pages` bytes
        // into `vec`, which has them; an unmapped page is reported as ENOMEM, not touched.
        let rc =
            unsafe { libc::mincore(lo as *mut libc::c_void, (hi - lo) as usize, vec.as_mut_ptr()) };
        rc == 0
    };
    if mapped(start, end) {
        return None;
    }
    let (mut lo, mut hi) = (start, end);
    while hi - lo > page {
        let mid = lo + (((hi - lo) / 2) & !(page - 1)).max(page);
        if mapped(lo, mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo.max(start), "not mapped"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/prog
00652000-00653000 r--p 00052000 08:02 173521      /usr/bin/prog
00653000-00655000 rw-p 00053000 08:02 173521      /usr/bin/prog
00655000-00656000 ---p 00000000 00:00 0
00656000-00658000 rw-p 00000000 00:00 0           [heap]
7ffd1000-7ffd3000 r--p 00000000 00:00 0           [vvar]
";

    #[test]
    fn a_range_is_pinnable_only_where_every_page_is_mapped_as_the_access_needs() {
        let w = |s, e| first_unpinnable(MAPS, s, e, true);
        let r = |s, e| first_unpinnable(MAPS, s, e, false);
        assert_eq!(w(0x653000, 0x654000), None);
        assert_eq!(r(0x400100, 0x400200), None, "code is readable");
        assert_eq!(r(0x652000, 0x655000), None, "across two mappings");
        assert!(w(0x652000, 0x655000).unwrap().1.contains("read-only"));
        assert_eq!(w(0x10000, 0x11000), Some((0x10000, "not mapped")));
        assert_eq!(r(0x452000, 0x453000), Some((0x452000, "not mapped")), "a gap");
        assert_eq!(r(0x450000, 0x653000), Some((0x452000, "not mapped")), "a gap inside");
        assert_eq!(r(0x654000, 0x657000).map(|h| h.0), Some(0x655000), "a guard page");
        assert_eq!(r(0x657000, 0x659000), Some((0x658000, "not mapped")), "past the last");
        assert_eq!(r(0x7ffd1000, 0x7ffd1008).map(|h| h.1), Some("a special kernel mapping"));
    }

    #[test]
    fn this_process_memory_is_checked_as_mapped_or_not() {
        let buf = vec![0u8; 3 * 4096];
        let at = buf.as_ptr() as u64;
        assert!(check_pinnable(at, buf.len(), AccessFlags::all()).is_ok());
        let e = check_pinnable(0x10000, 4096, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert_eq!(e.errno, Errno::Fault);
        assert!(e.message.contains("0x10000"), "{e}");
        let e = check_pinnable(at, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert_eq!(e.errno, Errno::Inval);
        // mincore, where /proc is not mounted, agrees about what is mapped.
        assert_eq!(first_unmapped(at, at + buf.len() as u64), None);
        assert_eq!(first_unmapped(0x10000, 0x12000).map(|h| h.0), Some(0x10000));
    }
}
