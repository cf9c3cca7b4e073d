//! RoCE v2 over IPv6 on the UDP wire (docs/decisions.md, "IPv6 between hosts on the UDP
//! wire"): a port of the interface's first IPv4 address also sends from and receives on the
//! interface's IPv6 addresses, each through a UDP socket of its own bound to the address
//! (a link-local one with the interface as its scope) and to the interface. As over IPv4,
//! UDP 4791 of each address is held by one port of the host, which hands the others what is
//! for their QPs (`share.rs`, with the sender's and the destination's IPv6 addresses in
//! front); the others send from a UDP port of their own on the address.
//!
//! The kernel writes the IPv6 and UDP headers. The ICRC masks the traffic class, the flow
//! label, the hop limit and the UDP checksum (rxe's `rxe_icrc_hdr`), and the kernel keeps the
//! addresses and the lengths the engine wrote, so the sending half changes one field: the UDP
//! source port, the socket's. The receiving half rebuilds the headers from the sender's
//! address and port (`recvfrom`) and the address the socket is bound to, the destination.

use std::io::ErrorKind;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use super::netdev::Interface;
use super::{share, Rx, UdpEgress, UdpPort};
use crate::engine::SendOutcome;
use crate::packet::{self, Icrc, Ip6Udp, IPV4_UDP_LEN, IPV6_UDP_LEN, ROCE_UDP_PORT};

/// The most IPv6 addresses of an interface a port uses (the others are left out of its GID
/// table, logged): what `park` polls is a fixed array.
pub(super) const MAX_SIX: usize = 8;

/// One IPv6 address a port sends from and receives on.
pub(super) struct Six {
    /// The address (the IPv6 source of what the port sends from it).
    pub(super) addr: [u8; 16],
    /// The interface's index: the scope of a link-local address, its own or a peer's.
    pub(super) ifindex: u32,
    /// What the port sends from: UDP 4791 if it held it when it opened, else a port of its
    /// own on the address.
    pub(super) tx: Arc<UdpSocket>,
    /// The UDP port `tx` is bound to (the datagrams' source port, which the ICRC covers).
    pub(super) port: u16,
    /// The descriptor of the address's UDP 4791 while this port holds it, else -1.
    pub(super) gate_fd: AtomicI32,
}

/// How often a port whose engine has met no IPv6 path or UD QP yet
/// ([`NetdevAddr::ipv6_used`](crate::engine::NetdevAddr::ipv6_used)) reads the IPv6 sockets
/// it holds: every this many rounds (what waits there is for the address's other processes;
/// `park` wakes for it, so an idle port takes it within as many quick rounds).
pub(super) const V6_IDLE_EVERY: u32 = 32;

/// Whether `a` is a link-local unicast address (`fe80::/10`), reached on the interface.
pub(super) fn is_link_local(a: &[u8; 16]) -> bool {
    a[0] == 0xfe && a[1] & 0xc0 == 0x80
}

/// The IPv6 addresses of `iface` a port of its IPv4 address `first` (the interface's first:
/// the IPv6 addresses go with it) sends from and receives on, with UDP 4791 of each that it
/// holds (None where another softverbs port of the address holds it: `shared` says whether
/// one exists). An address whose 4791 another program holds, or that is not ready (a
/// tentative address, duplicate address detection not done), is left out and logged.
pub(super) fn open(
    iface: &Interface,
    first: bool,
    shared: impl Fn() -> bool,
) -> (Vec<Six>, Vec<Option<UdpSocket>>) {
    let (mut six, mut gates) = (Vec::new(), Vec::new());
    if !first {
        return (six, gates);
    }
    for &addr in &iface.ipv6 {
        if six.len() == MAX_SIX {
            tracing::info!(netdev = %iface.name, addr = %Ipv6Addr::from(addr),
                "more IPv6 addresses than a port uses ({MAX_SIX}): this one is left out");
            continue;
        }
        let opened = match bind(iface, addr, ROCE_UDP_PORT) {
            Ok(sock) => sock.try_clone().map(|g| (Arc::new(sock), Some(g))),
            Err(e) if e.kind() == ErrorKind::AddrInUse && shared() => {
                bind(iface, addr, 0).map(|tx| (Arc::new(tx), None))
            }
            Err(e) => Err(e),
        };
        let (tx, gate) = match opened {
            Ok(v) => v,
            Err(e) => {
                tracing::info!(netdev = %iface.name, addr = %Ipv6Addr::from(addr), error = %e,
                    "an IPv6 address of the interface left out (UDP 4791 another program's, \
                     or the address not ready)");
                continue;
            }
        };
        let port = tx.local_addr().map_or(ROCE_UDP_PORT, |a| a.port());
        let fd = gate.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        six.push(Six { addr, ifindex: iface.index, tx, port, gate_fd: AtomicI32::new(fd) });
        gates.push(gate);
    }
    (six, gates)
}

/// A non-blocking UDP socket on `[addr]:port` (0: one the kernel picks; a link-local address
/// scoped to `iface`), bound to `iface` too, with room for bursts, never fragmenting
/// (`IPV6_PMTUDISC_DO`: a datagram larger than the link is an error, a lost frame, as over
/// IPv4), with UDP checksum 0 sent and taken, as rxe.
pub(super) fn bind(iface: &Interface, addr: [u8; 16], port: u16) -> std::io::Result<UdpSocket> {
    let scope = if is_link_local(&addr) { iface.index } else { 0 };
    let sock = UdpSocket::bind(SocketAddrV6::new(Ipv6Addr::from(addr), port, 0, scope))?;
    let fd = sock.as_raw_fd();
    super::bind_to_device(fd, iface);
    super::grow_buffers(fd);
    let pmtu: libc::c_int = libc::IPV6_PMTUDISC_DO;
    // SAFETY: `fd` is an open socket; the value is an int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            std::ptr::from_ref(&pmtu).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    zero_udp_checksums(fd)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// `SOL_UDP` and linux/udp.h's `UDP_NO_CHECK6_TX` / `UDP_NO_CHECK6_RX` (not in libc).
const SOL_UDP: libc::c_int = 17;
const UDP_NO_CHECK6_TX: libc::c_int = 101;
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// UDP checksum 0 both ways on the IPv6 UDP socket `fd`, as rxe: its `prepare_udp_hdr` leaves
/// the checksum of an IPv6 datagram at 0 as of an IPv4 one, and its tunnel socket takes such
/// datagrams in. A plain IPv6 socket would drop every datagram a kernel rxe peer sends, so
/// taking them is required; sending 0 keeps a capture rxe's bytes. Also the CM's sockets for
/// its MADs over IPv6 (librdmacm's `wire6.rs`).
pub fn zero_udp_checksums(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    for opt in [UDP_NO_CHECK6_RX, UDP_NO_CHECK6_TX] {
        let on: libc::c_int = 1;
        // SAFETY: `fd` is an open UDP socket; the value is an int.
        let r = unsafe {
            libc::setsockopt(
                fd,
                SOL_UDP,
                opt,
                std::ptr::from_ref(&on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes the IPv6 and UDP headers of a datagram whose `len`-byte UDP payload, from
/// `src`:`src_port` to `dst`, is in `buf` after them, as the sender's kernel wrote them but for
/// the fields the ICRC masks (traffic class, flow label, hop limit, UDP checksum: 0, 0, 64, 0).
/// Returns the datagram's length; None if `buf` is too short or the payload too long.
pub(super) fn rebuild6(
    buf: &mut [u8],
    len: usize,
    src: [u8; 16],
    src_port: u16,
    dst: [u8; 16],
) -> Option<usize> {
    let ip = Ip6Udp { src, dst, src_port, ..Ip6Udp::default() };
    let header = packet::ipv6_udp_header(&ip, len)?;
    buf.get_mut(..IPV6_UDP_LEN)?.copy_from_slice(&header);
    (buf.len() >= IPV6_UDP_LEN + len).then_some(IPV6_UDP_LEN + len)
}

/// Makes an engine's IPv6 datagram (headers and ICRC long at least) the one the kernel puts
/// on the wire for its UDP payload: UDP source port `src_port` (the socket's), and the ICRC
/// over that. The addresses and lengths are the kernel's already; what else it writes
/// (traffic class, flow label, hop limit, UDP checksum) the ICRC does not cover.
pub(super) fn kernel_form6(d: &mut [u8], src_port: u16) {
    if d.len() < IPV6_UDP_LEN + packet::ICRC_LEN {
        return;
    }
    d[40..42].copy_from_slice(&src_port.to_be_bytes());
    packet::set_icrc_ipv6(d);
}

/// The source and destination addresses of an IPv6 datagram (its header's bytes 8–40).
pub(super) fn addresses(d: &[u8]) -> Option<([u8; 16], [u8; 16])> {
    let src = <[u8; 16]>::try_from(d.get(8..24)?).ok()?;
    let dst = <[u8; 16]>::try_from(d.get(24..40)?).ok()?;
    Some((src, dst))
}

/// Rebuilds in `buf` the IPv6 datagram another port of the address handed this one: the
/// `len`-byte message (a [`share::FORWARD_HEAD6`]-byte head, then the UDP payload) is where
/// the inbox's receive put it, [`share::FORWARD_HEAD`] bytes before the IPv4 headers' end.
/// Returns the datagram's length (it starts at `buf[0]`); None for a runt.
pub(super) fn from_inbox6(buf: &mut [u8], len: usize) -> Option<usize> {
    let at = IPV4_UDP_LEN - share::FORWARD_HEAD;
    let (src, port, dst) = share::sender6(buf.get(at..at + len)?)?;
    let plen = len.checked_sub(share::FORWARD_HEAD6)?;
    let from = at + share::FORWARD_HEAD6;
    buf.copy_within(from..from + plen, IPV6_UDP_LEN);
    rebuild6(buf, plen, src, port, dst)
}

/// Whether the RoCE v2 datagram `d` (IPv6 and UDP headers first) is for QP1.
pub(super) fn is_gsi6(d: &[u8]) -> bool {
    d.get(IPV6_UDP_LEN + 5..IPV6_UDP_LEN + 8) == Some(&[0, 0, 1][..])
}

impl UdpPort {
    /// Takes what waits on the IPv6 addresses' UDP 4791 that this port holds, one datagram
    /// at a time, at most `max`: a datagram for another port of the address goes to its
    /// inbox, the others are rebuilt and handed to `f` until it says stop. How many were
    /// taken, and whether `f` wants more.
    pub(super) fn recv6(
        &self,
        rx: &mut Rx,
        max: usize,
        f: &mut dyn FnMut(&[u8], Icrc) -> bool,
    ) -> (usize, bool) {
        let mut n = 0;
        let Rx { buf, gates6, head, .. } = rx;
        for (six, gate) in self.six.iter().zip(gates6.iter()) {
            let Some(gate) = gate else { continue };
            while n < max {
                let (len, from) = match gate.recv_from(&mut buf[IPV6_UDP_LEN..]) {
                    Ok((len, SocketAddr::V6(from))) => (len, from),
                    Ok(_) => {
                        n += 1;
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                n += 1;
                let src = (from.ip().octets(), from.port(), six.addr);
                let payload = &buf[IPV6_UDP_LEN..IPV6_UDP_LEN + len];
                if let Some(block) = self.share.elsewhere(payload) {
                    match self.share.hand6(&self.share.inbox, block, src, payload, head) {
                        Ok(()) => continue,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            tracing::debug!(block, "the inbox of a port of this address is full");
                            continue;
                        }
                        // Nobody holds the block: this engine drops it and counts it.
                        Err(_) => {}
                    }
                }
                let Some(total) = rebuild6(buf, len, src.0, src.1, src.2) else { continue };
                if is_gsi6(&buf[..total]) {
                    // A CM MAD: to the process's CM (or the address's gate), as over IPv4.
                    if !self.gsi.forward(&buf[..total]) {
                        tracing::debug!("a MAD to QP1 over IPv6, and no CM here to take it");
                    }
                    continue;
                }
                if !f(&buf[..total], Icrc::Carried) {
                    return (n, false);
                }
            }
        }
        (n, true)
    }
}

impl UdpEgress {
    /// Sends an engine's IPv6 datagram (RoCE v2 over IPv6) made the kernel's, from the socket
    /// of its source address, to its destination's UDP 4791 (a link-local one on the
    /// interface), or into the destination block's inbox when that address is this port's.
    pub(super) fn send6(&mut self, datagram: &[u8]) -> SendOutcome {
        let Some((src, dst)) = addresses(datagram) else { return SendOutcome::Unreachable };
        let Some(six) = self.six.iter().find(|s| s.addr == src) else {
            return SendOutcome::Unreachable;
        };
        if datagram.len() < IPV6_UDP_LEN + packet::ICRC_LEN {
            return SendOutcome::Unreachable;
        }
        let d = &mut self.scratch;
        d.clear();
        d.extend_from_slice(datagram);
        kernel_form6(d, six.port);
        if self.six.iter().any(|s| s.addr == dst) {
            let block = d.get(IPV6_UDP_LEN + 5).copied().unwrap_or(0);
            if let (Some(local), true) = (&self.local, (1..=254).contains(&block)) {
                let from = (src, six.port, dst);
                match self.share.hand6(local, block, from, &d[IPV6_UDP_LEN..], &mut self.head) {
                    Ok(()) => return SendOutcome::Sent,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return SendOutcome::Full,
                    Err(_) => {}
                }
            }
        }
        let scope = if is_link_local(&dst) { six.ifindex } else { 0 };
        let to = SocketAddrV6::new(Ipv6Addr::from(dst), ROCE_UDP_PORT, 0, scope);
        match six.tx.send_to(&d[IPV6_UDP_LEN..], to) {
            Ok(_) => SendOutcome::Sent,
            Err(e) if super::batch::is_full(&e) => SendOutcome::Full,
            Err(e) => {
                tracing::debug!(error = %e, dst = %to, "UDP send over IPv6");
                SendOutcome::Unreachable
            }
        }
    }
}

#[cfg(test)]
mod tests;
