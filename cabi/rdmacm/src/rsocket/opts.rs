//! `rsetsockopt`, `rgetsockopt`, `rfcntl`, `rgetsockname`, `rgetpeername`: the options the
//! rdma-core tools set (`SO_REUSEADDR`, `SO_SNDBUF`/`SO_RCVBUF`, `TCP_NODELAY`, keepalive,
//! `SOL_RDMA`'s queue, inline and iomap sizes) and the addresses of the rsocket's id.
use std::ffi::{c_int, c_long, c_void};

use super::verbs::err;
use super::{get, lock, State};

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;

/// The int an option's value holds.
fn int_of(v: *const c_void, len: u32) -> Option<c_int> {
    // SAFETY: the caller's value, at least an int long.
    (!v.is_null() && len as usize >= size_of::<c_int>())
        .then(|| unsafe { std::ptr::read_unaligned(v.cast::<c_int>()) })
}

/// `rsetsockopt`. Sizes apply to connections made after (an accepted rsocket takes its
/// listener's); a buffer is at least 4 KiB and at most 16 MiB, a queue 8 to 1024 entries.
#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: u32,
) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    if level == SOL_RDMA && name == RDMA_ROUTE {
        // A route from rdma_getaddrinfo: the CM resolves its own.
        return 0;
    }
    let Some(v) = int_of(val, len) else { return err(libc::EINVAL) };
    let o = &mut s.opts;
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = v,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive = v,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sndbuf = (v.max(0) as usize).clamp(4096, 1 << 24),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rcvbuf = (v.max(0) as usize).clamp(4096, 1 << 24),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {}
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = v,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => o.keepidle = v,
        (SOL_RDMA, RDMA_SQSIZE) => o.sq = (v.max(0) as u32).clamp(8, 1024),
        (SOL_RDMA, RDMA_RQSIZE) => o.rq = (v.max(0) as u32).clamp(8, 1024),
        (SOL_RDMA, RDMA_INLINE) => o.inline = v.max(0) as u32,
        (SOL_RDMA, RDMA_IOMAPSIZE) => o.iomaps = v.max(0) as u32,
        _ => return err(libc::ENOPROTOOPT),
    }
    0
}

/// `rgetsockopt`: the values set, and `SO_ERROR` (read once: why a connect failed).
#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut u32,
) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    // SAFETY: the caller's length.
    if val.is_null() || len.is_null() || (unsafe { *len } as usize) < size_of::<c_int>() {
        return err(libc::EINVAL);
    }
    let o = s.opts;
    let v: c_int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut s.err),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sndbuf as c_int,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rcvbuf as c_int,
        (libc::SOL_SOCKET, libc::SO_TYPE) => {
            if s.dgram.is_some() {
                libc::SOCK_DGRAM
            } else {
                libc::SOCK_STREAM
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => o.keepidle,
        (SOL_RDMA, RDMA_SQSIZE) => o.sq as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => o.rq as c_int,
        (SOL_RDMA, RDMA_INLINE) => o.inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => o.iomaps as c_int,
        _ => return err(libc::ENOPROTOOPT),
    };
    // SAFETY: the caller's buffer, an int long at least.
    unsafe {
        std::ptr::write_unaligned(val.cast::<c_int>(), v);
        *len = size_of::<c_int>() as u32;
    }
    0
}

/// `rfcntl(fd, F_GETFL)` / `rfcntl(fd, F_SETFL, flags)`: only `O_NONBLOCK` means anything.
/// (Variadic in C; on x86-64 the third argument arrives as a plain one.)
#[no_mangle]
pub unsafe extern "C" fn rfcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    match cmd {
        libc::F_GETFL => libc::O_RDWR | if s.nonblock { libc::O_NONBLOCK } else { 0 },
        libc::F_SETFL => {
            s.nonblock = arg as c_int & libc::O_NONBLOCK != 0;
            0
        }
        _ => err(libc::ENOSYS),
    }
}

/// The length of the socket address in `ss` (a `sockaddr_storage`'s 128 bytes).
fn addr_len(ss: &[u8; 128]) -> usize {
    match u16::from_ne_bytes([ss[0], ss[1]]) as c_int {
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => size_of::<libc::sockaddr_in>(),
    }
}

/// Copy the address `ss` to the caller's `addr` (at most `*len` bytes) and set `*len` to its
/// length; nothing if `addr` is NULL.
///
/// # Safety
/// `addr` and `len` are NULL or the caller's.
pub unsafe fn copy_addr(ss: &[u8; 128], addr: *mut libc::sockaddr, len: *mut u32) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let n = addr_len(ss);
    // SAFETY: the caller's buffer of *len bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(ss.as_ptr(), addr.cast::<u8>(), n.min(*len as usize));
        *len = n as u32;
    }
}

fn name(fd: c_int, addr: *mut libc::sockaddr, len: *mut u32, peer: bool) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let s = lock(&s);
    if addr.is_null() || len.is_null() {
        return err(libc::EFAULT);
    }
    if peer && s.state != State::Connected && s.dgram.as_ref().is_none_or(|d| d.peer.is_none()) {
        return err(libc::ENOTCONN);
    }
    // SAFETY: our id's route; the caller's buffer.
    unsafe {
        let a = &(*s.id).route.addr;
        copy_addr(if peer { &a.dst } else { &a.src }, addr, len);
    }
    0
}

/// `rgetsockname`: the rsocket's own address (its id's source).
#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> c_int {
    name(fd, addr, len, false)
}

/// `rgetpeername`: the connected peer's address.
#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> c_int {
    name(fd, addr, len, true)
}
