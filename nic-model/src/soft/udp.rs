//! The UDP wire (`SOFTVERBS_NETDEV`): a port that is a RoCE v2 device on a network interface.
//! It receives on a UDP socket bound to one IPv4 address of the interface, port 4791, and to
//! the interface itself (`SO_BINDTODEVICE`); its sending half hands each datagram's UDP
//! payload (BTH to ICRC, byte for byte) to the kernel for the peer's address, port 4791.
//!
//! The kernel writes the IPv4 and UDP headers, and the ICRC covers most of them, so the
//! sending half makes the engine's headers the kernel's before it sets the ICRC: source port
//! 4791 (the socket's) and identification 0 (what Linux puts in a DF datagram of an
//! unconnected socket, as in rxe's). The receiving half rebuilds the headers of each
//! datagram from what the socket reports (source address and port, its own address) with
//! identification 0 and DF, and hands the engine the whole datagram, ICRC to check. The masked
//! fields (TOS, TTL, the checksums) do not matter.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use verbs_api::{Errno, Error};

use super::counters::{self, Tally};
use super::netdev::{self, Interface};
use super::port::{completes_nothing, Port, SendOutcome};
use crate::engine::{is_multicast_ipv4, Egress, NetdevAddr};
use crate::packet::{self, Icrc, IpUdp, IPV4_UDP_LEN, ROCE_UDP_PORT};

/// The receive buffer a port asks for (`SO_RCVBUF`): some 8000 datagrams of a 1024-byte
/// MTU, more than a QP's window.
const RECV_BUFFER: libc::c_int = 16 << 20;

/// The largest UDP payload an IPv4 datagram holds.
const MAX_PAYLOAD: usize = 65_507;

/// A port on a network interface: its UDP socket and a wake-up for its parked receiver.
pub struct UdpPort {
    sock: Arc<UdpSocket>,
    addr: Arc<NetdevAddr>,
    /// An eventfd: `unpark` writes it, `park` polls it beside the socket.
    wake: OwnedFd,
    /// Where a received datagram is rebuilt, headers and payload (the receiver is one
    /// thread at a time, under the device lock).
    buf: Mutex<Vec<u8>>,
    /// Where datagrams to QP1 go: the process's connection manager.
    gsi: gsi::GsiForward,
}

impl UdpPort {
    /// Binds UDP port 4791 on the first IPv4 address of `name` that no other socket holds
    /// (one process per address: docs/decisions.md, "A RoCE device on a network
    /// interface"), restricted to that interface. An error names the interface and why:
    /// it does not exist, has no IPv4 address, or every address's port 4791 is taken.
    pub fn open(name: &str) -> Result<UdpPort, Error> {
        let iface = netdev::lookup(name)?;
        let mut taken = Vec::new();
        for &ip in &iface.ipv4 {
            match bind(&iface, ip) {
                Ok(sock) => return UdpPort::with_socket(sock, netdev::netdev_addr(&iface, ip)),
                Err(e) if e.kind() == ErrorKind::AddrInUse => taken.push(Ipv4Addr::from(ip)),
                Err(e) => {
                    return Err(Error::new(
                        Errno::Io,
                        format!(
                            "SOFTVERBS_NETDEV={name}: binding UDP port 4791 on {}: {e}",
                            Ipv4Addr::from(ip)
                        ),
                    ))
                }
            }
        }
        let list: Vec<String> = taken.iter().map(|a| format!("{a}:4791")).collect();
        Err(Error::new(
            Errno::Busy,
            format!(
                "SOFTVERBS_NETDEV={name}: UDP port 4791 is taken on every IPv4 address of the \
                 interface ({}): another process is a RoCE device there (another softverbs \
                 process, or the kernel's rxe). One process per address: give the interface \
                 another address for this one (ip addr add ... dev {name}), or run it on another \
                 host or namespace ({})",
                list.join(", "),
                netdev::describe(&iface)
            ),
        ))
    }

    fn with_socket(sock: UdpSocket, addr: NetdevAddr) -> Result<UdpPort, Error> {
        // SAFETY: eventfd with valid flags; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::new(
                Errno::Io,
                format!("eventfd: {}", std::io::Error::last_os_error()),
            ));
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        tracing::info!(netdev = %addr.name, ip = %Ipv4Addr::from(addr.ipv4),
            "RoCE v2 port on a network interface: UDP 4791");
        Ok(UdpPort {
            sock: Arc::new(sock),
            addr: Arc::new(addr),
            wake,
            buf: Mutex::new(vec![0; IPV4_UDP_LEN + MAX_PAYLOAD]),
            gsi: gsi::GsiForward::new(),
        })
    }

    /// The port's addresses, for its engine's configuration.
    pub fn addr(&self) -> Arc<NetdevAddr> {
        self.addr.clone()
    }
}

/// A non-blocking UDP socket on `ip`:4791, bound to `iface` too, sending datagrams with DF
/// (so that the kernel's identification is 0, which the ICRC covers).
fn bind(iface: &Interface, ip: [u8; 4]) -> std::io::Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(ip), ROCE_UDP_PORT))?;
    let fd = sock.as_raw_fd();
    let name = iface.name.as_bytes();
    // SAFETY: `fd` is an open socket; the option value is the name's bytes and their length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        // Bound to the address already; a process without the right (kernels before 5.7
        // ask CAP_NET_RAW) still receives only what is sent to it.
        tracing::info!(error = %std::io::Error::last_os_error(), netdev = %iface.name,
            "SO_BINDTODEVICE refused: receiving on the address alone");
    }
    // Room for the bursts a window of RC packets makes while the receiver is busy: a datagram
    // the buffer cannot hold is lost (RcvbufErrors) and costs a retransmission. Forced past
    // net.core.rmem_max where the process may (CAP_NET_ADMIN), else up to that limit.
    let room: libc::c_int = RECV_BUFFER;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `fd` is an open socket; the value is an int.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                std::ptr::from_ref(&room).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    let pmtu: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: `fd` is an open socket; the value is an int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            std::ptr::from_ref(&pmtu).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    sock.set_nonblocking(true)?;
    Ok(sock)
}

impl Port for UdpPort {
    fn lid(&self) -> u16 {
        0
    }

    fn ip(&self) -> [u8; 4] {
        self.addr.ipv4
    }

    fn egress(&self, tally: &Arc<Tally>) -> Box<dyn Egress> {
        Box::new(UdpEgress { sock: self.sock.clone(), tally: tally.clone(), scratch: Vec::new() })
    }

    fn recv_burst(&self, max: usize, f: &mut dyn FnMut(&[u8], Icrc) -> bool) -> usize {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while n < max {
            let (len, from) = match self.sock.recv_from(&mut buf[IPV4_UDP_LEN..]) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // An ICMP error queued for an earlier send: nothing was received.
                    tracing::debug!(error = %e, "UDP receive");
                    continue;
                }
            };
            n += 1;
            let Some(total) = rebuild(&mut buf, len, from, self.addr.ipv4) else { continue };
            if gsi::is_gsi(&buf[..total]) {
                if !self.gsi.forward(&buf[..total]) {
                    tracing::debug!("a MAD to QP1 and no connection manager in this process");
                }
                continue;
            }
            if !f(&buf[..total], Icrc::Carried) {
                break;
            }
        }
        n
    }

    fn park(&self, timeout: Duration) {
        let mut fds = [
            libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `fds` is a valid array of two pollfds, `ts` a valid timespec, no sigmask.
        unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        if fds[1].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reading the eventfd's 8-byte count into `count` resets it.
            unsafe { libc::read(self.wake.as_raw_fd(), std::ptr::from_mut(&mut count).cast(), 8) };
        }
    }

    fn unpark(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes to the eventfd adds one to its count.
        unsafe { libc::write(self.wake.as_raw_fd(), std::ptr::from_ref(&one).cast(), 8) };
    }

    fn describe(&self) -> String {
        format!(
            "UDP {}:{ROCE_UDP_PORT} on network interface {}",
            Ipv4Addr::from(self.addr.ipv4),
            self.addr.name
        )
    }

    fn idle(&self) -> bool {
        let mut waiting: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int: the size of the next datagram, 0 if none.
        let r = unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::FIONREAD, &mut waiting) };
        r == 0 && waiting == 0
    }

    fn one_sided_waits(&self) -> bool {
        // The first datagram only: its BTH opcode, peeked.
        let mut head = [0u8; IPV4_UDP_LEN + 1];
        head[0] = 0x45;
        // SAFETY: peeking one byte into `head`'s last byte.
        let n = unsafe {
            libc::recv(
                self.sock.as_raw_fd(),
                head[IPV4_UDP_LEN..].as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 1 && completes_nothing(&head)
    }
}

/// Writes the IPv4 and UDP headers of a datagram whose `len`-byte UDP payload, from `from`,
/// is in `buf` after them, as the sender's kernel wrote them (identification 0, DF; the
/// masked fields as they come). Returns the datagram's length; None for a sender that is not
/// IPv4 (an IPv4 socket receives none).
fn rebuild(buf: &mut [u8], len: usize, from: SocketAddr, own: [u8; 4]) -> Option<usize> {
    let SocketAddr::V4(from) = from else { return None };
    let ip = IpUdp { src: from.ip().octets(), dst: own, src_port: from.port(), ..IpUdp::default() };
    let header = packet::ipv4_udp_header(&ip, len)?;
    buf[..IPV4_UDP_LEN].copy_from_slice(&header);
    Some(IPV4_UDP_LEN + len)
}

/// Makes an engine's IPv4 datagram (no options, at least headers and ICRC long, at most
/// 64 KiB) the one
/// the kernel puts on the wire for its UDP payload: identification 0 with DF, UDP source port
/// 4791 (the socket's), and the ICRC over those.
fn kernel_form(d: &mut [u8]) {
    let ip = IpUdp {
        src: [d[12], d[13], d[14], d[15]],
        dst: [d[16], d[17], d[18], d[19]],
        src_port: ROCE_UDP_PORT,
        tos: d[1],
        ttl: d[8],
        ident: 0,
        dont_fragment: true,
    };
    if let Some(header) = packet::ipv4_udp_header(&ip, d.len() - IPV4_UDP_LEN) {
        d[..IPV4_UDP_LEN].copy_from_slice(&header);
    }
    packet::set_icrc_ipv4(d);
}

/// The sending half of a [`UdpPort`]: the socket, and a buffer where a datagram's headers
/// become the kernel's and its ICRC is set.
pub struct UdpEgress {
    sock: Arc<UdpSocket>,
    tally: Arc<Tally>,
    scratch: Vec<u8>,
}

impl UdpEgress {
    fn send_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let outcome = self.send_uncounted(dst, datagram);
        match outcome {
            SendOutcome::Sent => self.tally.sent(datagram.len()),
            SendOutcome::Unreachable => counters::add(&self.tally.unreachable, 1),
            SendOutcome::Full => {}
        }
        outcome
    }

    fn send_uncounted(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        // The engine's datagrams are IPv4 without options; multicast has no route here.
        if is_multicast_ipv4(dst)
            || datagram.len() < IPV4_UDP_LEN + packet::ICRC_LEN
            || datagram[0] != 0x45
        {
            return SendOutcome::Unreachable;
        }
        let d = &mut self.scratch;
        d.clear();
        d.extend_from_slice(datagram);
        kernel_form(d);
        let to = SocketAddrV4::new(Ipv4Addr::from(dst), ROCE_UDP_PORT);
        match self.sock.send_to(&d[IPV4_UDP_LEN..], to) {
            Ok(_) => SendOutcome::Sent,
            Err(e) if e.kind() == ErrorKind::WouldBlock => SendOutcome::Full,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => SendOutcome::Full,
            Err(e) => {
                // No route, the link down, or larger than the link (EMSGSIZE: a path MTU
                // above what the interface carries): lost, as a NIC's frame would be.
                tracing::debug!(error = %e, dst = %Ipv4Addr::from(dst), "UDP send");
                SendOutcome::Unreachable
            }
        }
    }
}

impl Egress for UdpEgress {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.send_icrc(dst, datagram)
    }

    // Its ICRC is set here anyway, over the kernel's headers.
    fn takes_unset_icrc(&self) -> bool {
        true
    }

    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.send_icrc(dst, datagram)
    }
}

mod gsi;
pub use gsi::gsi_socket_name;

#[cfg(test)]
mod tests;
