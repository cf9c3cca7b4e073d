//! `SOCK_DGRAM` rsockets (UD): not yet implemented; every call on one fails with
//! `EOPNOTSUPP` and a line saying so.
use std::ffi::c_int;

use super::verbs::err;
use super::Sock;

/// A datagram rsocket's state.
#[derive(Default)]
pub struct Dgram {
    /// The address `rconnect` fixed, if any.
    pub peer: Option<[u8; 128]>,
}

impl Dgram {
    /// The descriptors `rpoll` sleeps on for it.
    pub fn sleep_fds(&mut self, fd: c_int) -> Vec<c_int> {
        vec![fd]
    }
    /// Read a completion-channel event.
    pub fn take_cq_event(&mut self) {}
}

fn unsupported(what: &str) -> c_int {
    eprintln!("librdmacm (softverbs): {what} on a SOCK_DGRAM rsocket is not supported yet");
    err(libc::EOPNOTSUPP)
}

/// After `rbind`.
pub fn bound(_s: &mut Sock) -> c_int {
    unsupported("rbind")
}

/// `rconnect`.
pub fn connect(_s: &mut Sock, _addr: *const libc::sockaddr) -> c_int {
    unsupported("rconnect")
}

/// `rrecvfrom`.
pub fn recv(
    _s: &mut Sock,
    _buf: &mut [u8],
    _flags: c_int,
    _src: *mut libc::sockaddr,
    _len: *mut u32,
) -> isize {
    unsupported("rrecvfrom") as isize
}

/// `rsendto`.
pub fn send(_s: &mut Sock, _buf: &[u8], _flags: c_int, _dst: *const libc::sockaddr) -> isize {
    unsupported("rsendto") as isize
}

/// What `rpoll` reports.
pub fn revents(_s: &mut Sock) -> i16 {
    libc::POLLERR
}

/// Release its verbs objects.
pub fn destroy(_s: &mut Sock) {}
