//! The data calls: `rrecv`, `rsend` and their `read`/`write`/vector/message/address forms,
//! and `riomap`, `riounmap`, `riowrite` (writes straight into memory the peer mapped).
use std::ffi::{c_int, c_void};

use super::verbs::err;
use std::sync::MutexGuard;

use super::{drive, get, lock, pump, Shared, Sock, State};

/// How long one sleep of a blocking call lasts before it looks again.
const SLICE: c_int = 1000;

/// A stream rsocket ready for data (a connecting non-blocking one moved along), or the errno.
fn ready(s: &mut Sock) -> Result<(), c_int> {
    if matches!(s.state, State::Resolving | State::Routing | State::Connecting) {
        drive(s, !s.nonblock);
    }
    match s.state {
        State::Connected => Ok(()),
        State::Resolving | State::Routing | State::Connecting => Err(libc::EAGAIN),
        _ => Err(libc::ENOTCONN),
    }
}

/// Sleep until the rsocket's completion or CM channel has something, at most `ms`, with the
/// rsocket unlocked meanwhile (another thread may send while this one waits to receive);
/// the lock again.
fn sleep<'a>(sh: &'a Shared, mut g: MutexGuard<'a, Sock>, ms: c_int) -> MutexGuard<'a, Sock> {
    let Some(mut p) = super::prepare_wait(&mut g) else { return g };
    drop(g);
    // SAFETY: our pollfds.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    let mut g = lock(sh);
    if let Some(c) = g.conn.as_mut() {
        c.take_cq_event();
    }
    g
}

/// `rrecv` on a stream rsocket into `buf`; the lock back with the result.
fn recv<'a>(
    sh: &'a Shared,
    mut s: MutexGuard<'a, Sock>,
    buf: &mut [u8],
    flags: c_int,
) -> (isize, MutexGuard<'a, Sock>) {
    if let Err(e) = ready(&mut s) {
        return (err(e) as isize, s);
    }
    let nb = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let waitall = flags & libc::MSG_WAITALL != 0 && !nb;
    let peek = flags & libc::MSG_PEEK != 0;
    let mut got = 0;
    loop {
        let Some(c) = s.conn.as_mut() else { return (err(libc::ENOTCONN) as isize, s) };
        c.progress();
        if c.readable() == 0 && !c.peer_eof {
            // A DISCONNECTED (a peer gone without its CLOSE) is only looked for when no data
            // waits: the CM channel costs a system call.
            pump(&mut s);
        }
        let Some(c) = s.conn.as_mut() else { return (err(libc::ENOTCONN) as isize, s) };
        if c.shut_rd {
            return (got as isize, s);
        }
        got += c.read(&mut buf[got..], peek);
        if got == buf.len() || got > 0 && (!waitall || peek) {
            return (got as isize, s);
        }
        if c.readable() == 0 && c.peer_eof {
            return (got as isize, s);
        }
        if c.broken != 0 {
            let e = c.broken;
            return (if got > 0 { got as isize } else { err(e) as isize }, s);
        }
        if nb {
            return (if got > 0 { got as isize } else { err(libc::EAGAIN) as isize }, s);
        }
        s = sleep(sh, s, SLICE);
    }
}

/// `rsend` on a stream rsocket from `buf`.
fn send<'a>(sh: &'a Shared, mut s: MutexGuard<'a, Sock>, buf: &[u8], flags: c_int) -> isize {
    if let Err(e) = ready(&mut s) {
        return err(e) as isize;
    }
    let nb = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut sent = 0;
    loop {
        let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) as isize };
        c.progress();
        if !c.writable() {
            pump(&mut s);
        }
        let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) as isize };
        if c.shut_wr {
            return err(libc::EPIPE) as isize;
        }
        if c.peer_gone || c.broken != 0 {
            let e = if c.broken != 0 { c.broken } else { libc::ECONNRESET };
            return if sent > 0 { sent as isize } else { err(e) as isize };
        }
        sent += c.write(&buf[sent..]);
        if sent == buf.len() {
            return sent as isize;
        }
        if nb {
            return if sent > 0 { sent as isize } else { err(libc::EAGAIN) as isize };
        }
        s = sleep(sh, s, SLICE);
    }
}

/// The caller's buffer as a slice (empty for a NULL one of length 0).
///
/// # Safety
/// `p` holds `n` bytes (or `n` is 0).
unsafe fn bytes<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: the caller's.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

/// As [`bytes`], writable.
///
/// # Safety
/// As [`bytes`].
unsafe fn bytes_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        return &mut [];
    }
    // SAFETY: the caller's.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// `rrecvfrom` (the source address is the peer's for a stream; a datagram's own for UD).
#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut libc::sockaddr,
    srclen: *mut u32,
) -> isize {
    let Some(sh) = get(fd) else { return err(libc::EBADF) as isize };
    let mut s = lock(&sh);
    if len > 0 && buf.is_null() {
        return err(libc::EFAULT) as isize;
    }
    // SAFETY: the caller's buffer.
    let out = unsafe { bytes_mut(buf, len) };
    if s.dgram.is_some() {
        return super::dgram::recv(&mut s, out, flags, src, srclen);
    }
    let (n, s) = recv(&sh, s, out, flags);
    if n >= 0 && !src.is_null() {
        // SAFETY: our id's route; the caller's buffer.
        unsafe { super::opts::copy_addr(&(*s.id).route.addr.dst, src, srclen) };
    }
    n
}

/// `rrecv`: like `recv`; 0 at the end of the peer's stream.
#[no_mangle]
pub unsafe extern "C" fn rrecv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: forwarded.
    unsafe { rrecvfrom(fd, buf, len, flags, std::ptr::null_mut(), std::ptr::null_mut()) }
}

/// `rread`: `rrecv` without flags.
#[no_mangle]
pub unsafe extern "C" fn rread(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { rrecv(fd, buf, len, 0) }
}

/// Total length of an iovec array, or None if it is not readable.
///
/// # Safety
/// `iov` holds `n` entries.
unsafe fn iov_slice<'a>(iov: *const libc::iovec, n: c_int) -> Option<&'a [libc::iovec]> {
    if !(0..=1024).contains(&n) || n > 0 && iov.is_null() {
        return None;
    }
    // SAFETY: the caller's array.
    Some(if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(iov, n as usize) } })
}

/// Receive into a gathered buffer, then scatter it over `iov`.
fn recv_iov(fd: c_int, iov: &[libc::iovec], flags: c_int) -> isize {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut tmp = vec![0u8; total];
    // SAFETY: our buffer.
    let n = unsafe { rrecv(fd, tmp.as_mut_ptr().cast(), total, flags) };
    if n > 0 {
        let mut off = 0;
        for v in iov {
            let k = v.iov_len.min(n as usize - off);
            // SAFETY: the caller's iovec entry, k <= its length.
            unsafe { std::ptr::copy_nonoverlapping(tmp[off..].as_ptr(), v.iov_base.cast(), k) };
            off += k;
        }
    }
    n
}

/// Send the gathered bytes of `iov`.
fn send_iov(fd: c_int, iov: &[libc::iovec], flags: c_int) -> isize {
    let mut tmp = Vec::new();
    for v in iov {
        // SAFETY: the caller's iovec entry.
        tmp.extend_from_slice(unsafe { bytes(v.iov_base, v.iov_len) });
    }
    // SAFETY: our buffer.
    unsafe { rsend(fd, tmp.as_ptr().cast(), tmp.len(), flags) }
}

/// `rreadv`.
#[no_mangle]
pub unsafe extern "C" fn rreadv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's array.
    let Some(v) = (unsafe { iov_slice(iov, n) }) else { return err(libc::EINVAL) as isize };
    recv_iov(fd, v, 0)
}

/// `rrecvmsg` (the message's iovec; no control data).
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    if msg.is_null() {
        return err(libc::EFAULT) as isize;
    }
    // SAFETY: the caller's msghdr and its array.
    let Some(v) = (unsafe { iov_slice((*msg).msg_iov, (*msg).msg_iovlen as c_int) }) else {
        return err(libc::EINVAL) as isize;
    };
    // SAFETY: the caller's msghdr.
    unsafe { (*msg).msg_controllen = 0 };
    recv_iov(fd, v, flags)
}

/// `rsendto` (a stream ignores the address, as a connected TCP socket does).
#[no_mangle]
pub unsafe extern "C" fn rsendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dst: *const libc::sockaddr,
    _dstlen: u32,
) -> isize {
    let Some(sh) = get(fd) else { return err(libc::EBADF) as isize };
    let mut s = lock(&sh);
    if len > 0 && buf.is_null() {
        return err(libc::EFAULT) as isize;
    }
    // SAFETY: the caller's buffer.
    let data = unsafe { bytes(buf, len) };
    if s.dgram.is_some() {
        return super::dgram::send(&mut s, data, flags, dst);
    }
    send(&sh, s, data, flags)
}

/// `rsend`: like `send`; a blocking rsocket sends it all, a non-blocking one what fits
/// (`EAGAIN` if nothing does); `ECONNRESET` once the peer closed, `EPIPE` after our
/// `rshutdown(SHUT_WR)`.
#[no_mangle]
pub unsafe extern "C" fn rsend(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: forwarded.
    unsafe { rsendto(fd, buf, len, flags, std::ptr::null(), 0) }
}

/// `rwrite`: `rsend` without flags.
#[no_mangle]
pub unsafe extern "C" fn rwrite(fd: c_int, buf: *const c_void, len: usize) -> isize {
    // SAFETY: forwarded.
    unsafe { rsend(fd, buf, len, 0) }
}

/// `rwritev`.
#[no_mangle]
pub unsafe extern "C" fn rwritev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's array.
    let Some(v) = (unsafe { iov_slice(iov, n) }) else { return err(libc::EINVAL) as isize };
    send_iov(fd, v, 0)
}

/// `rsendmsg` (the message's iovec; a stream ignores its address).
#[no_mangle]
pub unsafe extern "C" fn rsendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    if msg.is_null() {
        return err(libc::EFAULT) as isize;
    }
    // SAFETY: the caller's msghdr and its array.
    let Some(v) = (unsafe { iov_slice((*msg).msg_iov, (*msg).msg_iovlen as c_int) }) else {
        return err(libc::EINVAL) as isize;
    };
    send_iov(fd, v, flags)
}

/// `riomap`: let the peer write into `buf` (`len` bytes) at `offset` (-1: one chosen after
/// the mappings made) with `riowrite`; only `PROT_WRITE` mappings, at most `RDMA_IOMAPSIZE`
/// of them. The offset, or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn riomap(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    _flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    let Some(s) = get(fd) else { return err(libc::EBADF) as libc::off_t };
    let mut s = lock(&s);
    let max = s.opts.iomaps as usize;
    let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) as libc::off_t };
    if buf.is_null() || len == 0 || prot & libc::PROT_WRITE == 0 || offset < -1 {
        return err(libc::EINVAL) as libc::off_t;
    }
    if c.my_maps.len() >= max {
        return err(libc::ENOMEM) as libc::off_t;
    }
    let off = if offset == -1 {
        c.my_maps.iter().map(|m| m.offset + m.len as u64).max().unwrap_or(0)
    } else {
        offset as u64
    };
    match c.iomap(buf, len, off) {
        Ok(()) => off as libc::off_t,
        Err(e) => err(e) as libc::off_t,
    }
}

/// `riounmap`: end the mapping of `buf`.
#[no_mangle]
pub unsafe extern "C" fn riounmap(fd: c_int, buf: *mut c_void, len: usize) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) };
    if c.iounmap(buf, len) {
        0
    } else {
        err(libc::EINVAL)
    }
}

/// `riowrite`: write `count` bytes into the peer's mapping at `offset` (an RDMA WRITE; it
/// lands before anything sent after it). A blocking rsocket writes it all.
#[no_mangle]
pub unsafe extern "C" fn riowrite(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: libc::off_t,
    flags: c_int,
) -> usize {
    let Some(sh) = get(fd) else { return err(libc::EBADF) as usize };
    let mut s = lock(&sh);
    if let Err(e) = ready(&mut s) {
        return err(e) as usize;
    }
    if count > 0 && buf.is_null() || offset < 0 {
        return err(libc::EINVAL) as usize;
    }
    // SAFETY: the caller's buffer.
    let data = unsafe { bytes(buf, count) };
    let nb = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut done = 0;
    loop {
        pump(&mut s);
        let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) as usize };
        c.progress();
        if c.shut_wr {
            return err(libc::EPIPE) as usize;
        }
        if c.peer_gone || c.broken != 0 {
            return if done > 0 { done } else { err(libc::ECONNRESET) as usize };
        }
        match c.iowrite(&data[done..], offset as u64 + done as u64) {
            Ok(n) => done += n,
            Err(e) => return if done > 0 { done } else { err(e) as usize },
        }
        if done == data.len() {
            return done;
        }
        if nb {
            return if done > 0 { done } else { err(libc::EAGAIN) as usize };
        }
        s = sleep(&sh, s, SLICE);
    }
}
