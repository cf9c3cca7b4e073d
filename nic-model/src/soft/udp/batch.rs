//! The UDP wire's batched system calls: the datagrams of the transmit queue leave in one
//! `sendmmsg` per batch ([`Egress::send_batch`](crate::engine::Egress::send_batch)) instead
//! of a `sendto` each, byte for byte the same datagrams in the same order
//! (docs/decisions.md, "Batched system calls on the UDP wire").

use std::net::SocketAddrV4;

use crate::engine::SendOutcome;

/// The most datagrams one `sendmmsg` carries: the engine's batch.
pub(super) const SEND_MAX: usize = crate::engine::SEND_BATCH;

/// What one `sendmmsg` of `run` datagrams returned, as each datagram's outcome, in order:
/// the ones the kernel took are `Sent`; when it took none, the first is `Full` for want of
/// room in the socket's buffer or the device's queue (`EAGAIN`, `ENOBUFS`: the engine keeps
/// it and what follows, and retries) or `Unreachable` for any other error (no route, the link
/// down, larger than the link: lost, as a NIC's frame would be). The datagrams after those
/// written are untouched: the engine offers them again, and an error the kernel met after a
/// partial send is met again by the next call, on its first datagram. Returns how many
/// outcomes it wrote: at least one when `run` is not zero.
pub(super) fn outcomes_of(
    result: std::io::Result<usize>,
    run: usize,
    outcomes: &mut [SendOutcome],
) -> usize {
    let run = run.min(outcomes.len());
    if run == 0 {
        return 0;
    }
    match result {
        Ok(k) if k > 0 => {
            let k = k.min(run);
            outcomes[..k].fill(SendOutcome::Sent);
            k
        }
        // Nothing sent and no error (not seen from Linux): as a full buffer, retried.
        Ok(_) => {
            outcomes[0] = SendOutcome::Full;
            1
        }
        Err(e) if is_full(&e) => {
            outcomes[0] = SendOutcome::Full;
            1
        }
        Err(e) => {
            tracing::debug!(error = %e, "UDP send");
            outcomes[0] = SendOutcome::Unreachable;
            1
        }
    }
}

/// Whether a send failed for want of room (the socket's send buffer, the device's queue):
/// backpressure, not loss.
pub(super) fn is_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Sends `payloads[i]` to `to[i]` from socket `fd` with one `sendmmsg` (retried when a
/// signal interrupts it before anything was sent): how many the kernel took, in order, or
/// the error it met on the first. At most [`SEND_MAX`] at once.
pub(super) fn sendmmsg_to(
    fd: libc::c_int,
    payloads: &[&[u8]],
    to: &[SocketAddrV4],
) -> std::io::Result<usize> {
    let n = payloads.len().min(to.len()).min(SEND_MAX);
    // SAFETY: all-zero is a valid value of these C structs (null pointers, zero lengths).
    let mut addrs: [libc::sockaddr_in; SEND_MAX] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iovs: [libc::iovec; SEND_MAX] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; SEND_MAX] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        addrs[i].sin_family = libc::AF_INET as libc::sa_family_t;
        addrs[i].sin_port = to[i].port().to_be();
        addrs[i].sin_addr.s_addr = u32::from_ne_bytes(to[i].ip().octets());
        iovs[i].iov_base = payloads[i].as_ptr().cast_mut().cast();
        iovs[i].iov_len = payloads[i].len();
        let h = &mut msgs[i].msg_hdr;
        h.msg_name = std::ptr::from_mut(&mut addrs[i]).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = std::ptr::from_mut(&mut iovs[i]);
        h.msg_iovlen = 1;
    }
    loop {
        // SAFETY: `msgs[..n]` are valid headers whose name and iovec point into `addrs` and
        // `iovs` and the caller's payloads, all alive and unmoved for the call; the kernel
        // only reads the payloads (it writes each header's `msg_len`).
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The most datagrams one `recvmmsg` takes.
pub(super) const RECV_MAX: usize = 16;

/// The room for each received datagram's UDP payload: more than a RoCE packet of the largest
/// MTU (4096 bytes and its headers). A longer datagram is cut short here, and the engine
/// counts it malformed (its ICRC cannot check), as it counted it whole before.
pub(super) const RECV_ROOM: usize = 9000;

/// Datagrams taken from a socket with one `recvmmsg` and handed on one by one: each in its
/// own slot, `head` bytes of room in front (where the IPv4 and UDP headers are rebuilt).
pub(super) struct RecvBatch {
    slots: Vec<u8>,
    head: usize,
    lens: [usize; RECV_MAX],
    from: [SocketAddrV4; RECV_MAX],
    /// The slots received and the next one to hand on.
    count: usize,
    next: usize,
}

impl RecvBatch {
    /// Room for [`RECV_MAX`] datagrams with `head` bytes in front of each.
    pub(super) fn new(head: usize) -> RecvBatch {
        RecvBatch {
            slots: vec![0; RECV_MAX * (head + RECV_ROOM)],
            head,
            lens: [0; RECV_MAX],
            from: [SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0); RECV_MAX],
            count: 0,
            next: 0,
        }
    }

    /// How many received datagrams wait to be handed on.
    pub(super) fn waiting(&self) -> usize {
        self.count - self.next
    }

    /// The next waiting datagram's UDP payload, without taking it.
    pub(super) fn peek(&self) -> Option<&[u8]> {
        (self.next < self.count).then(|| {
            let at = self.next * (self.head + RECV_ROOM) + self.head;
            &self.slots[at..at + self.lens[self.next]]
        })
    }

    /// Takes the next waiting datagram: its slot (headroom, then the payload, then room to
    /// spare), its payload's length and its sender.
    pub(super) fn take(&mut self) -> Option<(&mut [u8], usize, SocketAddrV4)> {
        if self.next == self.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let size = self.head + RECV_ROOM;
        Some((&mut self.slots[i * size..(i + 1) * size], self.lens[i], self.from[i]))
    }

    /// Receives up to `max` (at most [`RECV_MAX`]) datagrams from nonblocking socket `fd` with
    /// one `recvmmsg`, or one with `recvfrom` when `one` (a round's first look: most find
    /// nothing or one datagram, and `recvfrom` is the cheaper call: the latency path), once
    /// the waiting ones are all taken; how many wait now. A datagram from anything but IPv4 is
    /// dropped (an IPv4 socket gets none); an error (nothing there, an ICMP error of an
    /// earlier send) receives nothing.
    pub(super) fn fill(&mut self, fd: libc::c_int, max: usize, one: bool) -> usize {
        if self.waiting() > 0 {
            return self.waiting();
        }
        self.count = 0;
        self.next = 0;
        let n = if one { 1 } else { max.clamp(1, RECV_MAX) };
        let size = self.head + RECV_ROOM;
        if n == 1 {
            return self.fill_one(fd);
        }
        // SAFETY: all-zero is a valid value of these C structs (null pointers, zero lengths).
        let mut addrs: [libc::sockaddr_in; RECV_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; RECV_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; RECV_MAX] = unsafe { std::mem::zeroed() };
        let base = self.slots.as_mut_ptr();
        for i in 0..n {
            // SAFETY: slot `i` starts `i * size` bytes into `slots`, which holds RECV_MAX
            // slots; its payload room is RECV_ROOM bytes after the headroom.
            iovs[i].iov_base = unsafe { base.add(i * size + self.head) }.cast();
            iovs[i].iov_len = RECV_ROOM;
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = std::ptr::from_mut(&mut addrs[i]).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = std::ptr::from_mut(&mut iovs[i]);
            h.msg_iovlen = 1;
        }
        let mut errors = 0;
        let got = loop {
            // SAFETY: `msgs[..n]` point at `addrs`, `iovs` and distinct slots of `slots`, all
            // alive and unmoved for the call; the kernel writes at most each iovec's length
            // and each name's length. No timeout: the socket does not block.
            let r = unsafe {
                libc::recvmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, 0, std::ptr::null_mut())
            };
            if r >= 0 {
                break r as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return 0,
                // An ICMP error queued for an earlier send: nothing was received; what
                // follows it is (a few such errors in a row at most are looked past).
                _ => {
                    tracing::debug!(error = %e, "UDP receive");
                    errors += 1;
                    if errors == 8 {
                        return 0;
                    }
                }
            }
        };
        for i in 0..got.min(n) {
            if addrs[i].sin_family != libc::AF_INET as libc::sa_family_t {
                continue;
            }
            let ip = std::net::Ipv4Addr::from(addrs[i].sin_addr.s_addr.to_ne_bytes());
            let len = (msgs[i].msg_len as usize).min(RECV_ROOM);
            if i != self.count {
                // Keep the slots in order without gaps.
                let (dst, src) = (self.count * size, i * size);
                self.slots.copy_within(src + self.head..src + self.head + len, dst + self.head);
            }
            self.lens[self.count] = len;
            self.from[self.count] = SocketAddrV4::new(ip, u16::from_be(addrs[i].sin_port));
            self.count += 1;
        }
        self.count
    }

    /// [`RecvBatch::fill`] of one datagram, with `recvfrom`.
    fn fill_one(&mut self, fd: libc::c_int) -> usize {
        let mut errors = 0;
        loop {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            let mut addr_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let room = &mut self.slots[self.head..self.head + RECV_ROOM];
            // SAFETY: `room` is RECV_ROOM writable bytes; `addr` and `addr_len` are valid
            // for the kernel to write the sender's address into.
            let r = unsafe {
                libc::recvfrom(
                    fd,
                    room.as_mut_ptr().cast(),
                    room.len(),
                    0,
                    std::ptr::from_mut(&mut addr).cast(),
                    &mut addr_len,
                )
            };
            if r >= 0 {
                if addr.sin_family != libc::AF_INET as libc::sa_family_t {
                    return 0;
                }
                let ip = std::net::Ipv4Addr::from(addr.sin_addr.s_addr.to_ne_bytes());
                self.lens[0] = (r as usize).min(RECV_ROOM);
                self.from[0] = SocketAddrV4::new(ip, u16::from_be(addr.sin_port));
                self.count = 1;
                return 1;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return 0,
                _ => {
                    tracing::debug!(error = %e, "UDP receive");
                    errors += 1;
                    if errors == 8 {
                        return 0;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
