//! The UDP wire (`SOFTVERBS_NETDEV`): a port that is a RoCE v2 device on a network interface.
//! It receives on a UDP socket bound to one IPv4 address of the interface, port 4791, and to
//! the interface itself (`SO_BINDTODEVICE`); its sending half hands each datagram's UDP
//! payload (BTH to ICRC, byte for byte) to the kernel for the peer's address, port 4791.
//!
//! The ports of one address share it (`udp/share.rs`): one holds UDP 4791 and hands the
//! others what is for their QPs; the others send from UDP ports of their own.
//!
//! The kernel writes the IPv4 and UDP headers, and the ICRC covers most of them, so the
//! sending half makes the engine's headers the kernel's before it sets the ICRC: the source
//! port (the socket's) and identification 0 (what Linux puts in a DF datagram of an
//! unconnected socket, as in rxe's). The receiving half rebuilds the headers of each
//! datagram from what the socket reports (source address and port, its own address) with
//! identification 0 and DF, and hands the engine the whole datagram, ICRC to check. The masked
//! fields (TOS, TTL, the checksums) do not matter.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use verbs_api::{Errno, Error};

use super::counters::{self, Tally};
use super::netdev::{self, Interface};
use super::port::{completes_nothing, Port, SendOutcome};
use crate::engine::{is_multicast_ipv4, Egress, NetdevAddr, Transmit};
use crate::packet::{self, Icrc, IpUdp, IPV4_UDP_LEN, ROCE_UDP_PORT};
use share::Share;

/// The receive buffer a port asks for (`SO_RCVBUF`): some 8000 datagrams of a 1024-byte
/// MTU, more than a QP's window.
const RECV_BUFFER: libc::c_int = 16 << 20;

/// The largest UDP payload an IPv4 datagram holds.
const MAX_PAYLOAD: usize = 65_507;

/// A port on a network interface: the socket it sends from, its share of the address with
/// the host's other ports on it (`udp/share.rs`), UDP 4791 while it holds it, and a wake-up for
/// its parked receiver.
pub struct UdpPort {
    /// What it sends from: UDP 4791 if it held it when it opened, else a port of its own.
    tx: Arc<UdpSocket>,
    addr: Arc<NetdevAddr>,
    iface: Interface,
    share: Arc<Share>,
    /// The descriptor of UDP 4791 while this port holds it, else -1 (it is closed only when
    /// the port is dropped).
    gate_fd: AtomicI32,
    /// An eventfd: `unpark` writes it, `park` polls it beside the sockets.
    wake: OwnedFd,
    /// The receiver's state (one thread at a time, under the device lock).
    rx: Mutex<Rx>,
    /// Where datagrams to QP1 go: the process's connection manager.
    gsi: gsi::GsiForward,
    /// Datagrams the receiver took from UDP 4791 and has not handed on yet (a round that
    /// stopped at a completion leaves them for the next), and whether the first of them is
    /// a request that completes nothing: for [`Port::idle`] and
    /// [`Port::one_sided_waits`], which do not take the receiver's lock.
    taken: AtomicUsize,
    taken_one_sided: AtomicBool,
    /// The IPv6 addresses it sends from and receives on (`udp/v6.rs`).
    six: Arc<[v6::Six]>,
}

/// What the receiving half keeps: where a datagram is rebuilt, headers and payload; UDP 4791
/// once held; when to try to bind it next; room to hand a datagram on.
struct Rx {
    buf: Vec<u8>,
    /// What one `recvmmsg` took from UDP 4791 (`udp/batch.rs`).
    batch: batch::RecvBatch,
    gate: Option<UdpSocket>,
    next_try: Instant,
    head: Vec<u8>,
    /// UDP 4791 of each IPv6 address (`UdpPort::six`), where this port holds it.
    gates6: Vec<Option<UdpSocket>>,
    /// Rounds counted, for reading the IPv6 sockets every [`v6::V6_IDLE_EVERY`]-th.
    v6_tick: u32,
}

/// How often a port that does not hold UDP 4791 tries to bind it: the longest the address
/// goes deaf after its holder exits or dies (datagrams then are lost, as a network loses
/// them, and the transport retries).
pub const GATE_RETRY: Duration = Duration::from_millis(100);

impl UdpPort {
    /// Opens a port on the first IPv4 address of `name` where UDP port 4791 is free or held
    /// by another softverbs port (processes share an address: docs/decisions.md, "Several
    /// processes on one address"), restricted to that interface. An error names the
    /// interface and why: it does not exist, has no IPv4 address, or every address's port
    /// 4791 is held by something else.
    pub fn open(name: &str) -> Result<UdpPort, Error> {
        let iface = netdev::lookup(name)?;
        let io = |ip: [u8; 4], what: &str, e: std::io::Error| {
            Error::new(
                Errno::Io,
                format!("SOFTVERBS_NETDEV={name}: {what} on {}: {e}", Ipv4Addr::from(ip)),
            )
        };
        let mut taken = Vec::new();
        for &ip in &iface.ipv4 {
            // The block first, so that a port that finds 4791 held sees its holder's block.
            let share = match Share::claim(&iface.name, ip) {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::AddrInUse => {
                    taken.push(Ipv4Addr::from(ip));
                    continue;
                }
                Err(e) => return Err(io(ip, "claiming a block of QP numbers", e)),
            };
            match bind(&iface, ip, ROCE_UDP_PORT) {
                Ok(sock) => {
                    let sock = Arc::new(sock);
                    return UdpPort::with_sockets(&iface, ip, share, sock.clone(), Some(sock));
                }
                Err(e) if e.kind() == ErrorKind::AddrInUse && share.others() => {
                    let tx = bind(&iface, ip, 0).map_err(|e| io(ip, "binding a UDP port", e))?;
                    return UdpPort::with_sockets(&iface, ip, share, Arc::new(tx), None);
                }
                Err(e) if e.kind() == ErrorKind::AddrInUse => taken.push(Ipv4Addr::from(ip)),
                Err(e) => return Err(io(ip, "binding UDP port 4791", e)),
            }
        }
        let list: Vec<String> = taken.iter().map(|a| format!("{a}:4791")).collect();
        Err(Error::new(
            Errno::Busy,
            format!(
                "SOFTVERBS_NETDEV={name}: UDP port 4791 is taken on every IPv4 address of the \
                 interface ({}) by another program (the kernel's rxe, or a RoCE device that is \
                 not softverbs), or 254 softverbs ports share each already: give the interface \
                 another address for this one (ip addr add ... dev {name}), or run it on \
                 another host or namespace ({})",
                list.join(", "),
                netdev::describe(&iface)
            ),
        ))
    }

    fn with_sockets(
        iface: &Interface,
        ip: [u8; 4],
        share: Share,
        tx: Arc<UdpSocket>,
        gate: Option<Arc<UdpSocket>>,
    ) -> Result<UdpPort, Error> {
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
        // The IPv6 addresses go with the interface's first IPv4 address (docs/decisions.md,
        // "IPv6 between hosts on the UDP wire").
        let (six, gates6) = v6::open(iface, iface.ipv4.first() == Some(&ip), || share.others());
        let held: Vec<[u8; 16]> = six.iter().map(|s| s.addr).collect();
        let addr = netdev::netdev_addr(iface, ip, &held);
        tracing::info!(netdev = %addr.name, ip = %Ipv4Addr::from(addr.ipv4), block = share.block,
            holds_4791 = gate.is_some(), "RoCE v2 port on a network interface: UDP 4791");
        // The port that holds 4791 from the start sends from it (one socket serves both);
        // a duplicate descriptor lets the receiver own its socket.
        let gate = match gate {
            Some(g) => Some(g.try_clone().map_err(|e| Error::new(Errno::Io, e.to_string()))?),
            None => None,
        };
        Ok(UdpPort {
            tx,
            addr: Arc::new(addr),
            iface: iface.clone(),
            gate_fd: AtomicI32::new(gate.as_ref().map_or(-1, AsRawFd::as_raw_fd)),
            share: Arc::new(share),
            wake,
            rx: Mutex::new(Rx {
                buf: vec![0; IPV4_UDP_LEN + MAX_PAYLOAD + share::FORWARD_HEAD6],
                batch: batch::RecvBatch::new(IPV4_UDP_LEN),
                gate,
                next_try: Instant::now() + GATE_RETRY,
                head: Vec::new(),
                gates6,
                v6_tick: 0,
            }),
            gsi: gsi::GsiForward::new(ip),
            taken: AtomicUsize::new(0),
            taken_one_sided: AtomicBool::new(false),
            six: six.into(),
        })
    }

    /// The port's addresses, for its engine's configuration.
    pub fn addr(&self) -> Arc<NetdevAddr> {
        self.addr.clone()
    }

    /// The block of QP numbers the port holds ([`NicConfig::qpn_block`](crate::engine::NicConfig::qpn_block)).
    pub fn qpn_block(&self) -> u8 {
        self.share.block
    }

    /// Whether the port holds UDP 4791 on its address now.
    pub fn holds_4791(&self) -> bool {
        self.gate_fd.load(Ordering::Relaxed) >= 0
    }
}

/// Asks a socket for 16 MiB of receive and send buffer ([`RECV_BUFFER`]: `SO_RCVBUFFORCE`
/// past `net.core.rmem_max` where the process may, CAP_NET_ADMIN, else up to that limit).
fn grow_buffers(fd: libc::c_int) {
    let room: libc::c_int = RECV_BUFFER;
    for opts in [[libc::SO_RCVBUFFORCE, libc::SO_RCVBUF], [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF]] {
        for opt in opts {
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
    }
}

/// A non-blocking UDP socket on `ip`:`port` (0: one the kernel picks), bound to `iface` too,
/// sending datagrams with DF (so that the kernel's identification is 0, which the ICRC
/// covers) and UDP checksum 0.
fn bind(iface: &Interface, ip: [u8; 4], port: u16) -> std::io::Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(ip), port))?;
    let fd = sock.as_raw_fd();
    bind_to_device(fd, iface);
    // Room for the bursts a window of RC packets makes while the receiver is busy: a datagram
    // the buffer cannot hold is lost (RcvbufErrors) and costs a retransmission.
    grow_buffers(fd);
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
    no_udp_checksum(fd);
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// Binds `fd` to `iface` (`SO_BINDTODEVICE`) so it receives on that interface alone. A refusal
/// is logged: the socket is bound to an address of the interface already, and a process
/// without the right (kernels before 5.7 ask CAP_NET_RAW) still receives only what is sent to
/// that address.
pub(crate) fn bind_to_device(fd: std::os::fd::RawFd, iface: &Interface) {
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
        tracing::info!(error = %std::io::Error::last_os_error(), netdev = %iface.name,
            "SO_BINDTODEVICE refused: receiving on the address alone");
    }
}

/// Sends with UDP checksum 0 (`SO_NO_CHECK`), as rxe's `prepare_udp_hdr` and RoCE NICs leave
/// it over IPv4: the ICRC guards the datagram, and a capture shows rxe's bytes. A kernel that
/// refuses keeps computing it; a receiver ignores it either way.
pub(crate) fn no_udp_checksum(fd: std::os::fd::RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is an open socket; the value is an int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            std::ptr::from_ref(&on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "SO_NO_CHECK refused");
    }
}

impl Port for UdpPort {
    fn lid(&self) -> u16 {
        0
    }

    fn ip(&self) -> [u8; 4] {
        self.addr.ipv4
    }

    fn egress(&self, tally: &Arc<Tally>) -> Box<dyn Egress> {
        let local = UnixDatagram::unbound().ok().filter(|u| u.set_nonblocking(true).is_ok());
        if let Some(u) = &local {
            grow_buffers(u.as_raw_fd());
        }
        let port = self.tx.local_addr().map_or(ROCE_UDP_PORT, |a| a.port());
        Box::new(UdpEgress {
            sock: self.tx.clone(),
            port,
            own: self.addr.ipv4,
            share: self.share.clone(),
            local,
            six: self.six.clone(),
            tally: tally.clone(),
            scratch: Vec::new(),
            head: Vec::new(),
            bufs: Vec::new(),
        })
    }

    fn recv_burst(&self, max: usize, f: &mut dyn FnMut(&[u8], Icrc) -> bool) -> usize {
        let mut guard = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let rx = &mut *guard;
        if rx.gate.is_none() || rx.gates6.iter().any(Option::is_none) {
            self.try_gate(rx);
        }
        let mut n = 0;
        // What the host's other ports handed over, then what the network sent.
        while n < max {
            let len = match self.share.inbox.recv(&mut rx.buf[IPV4_UDP_LEN - share::FORWARD_HEAD..])
            {
                Ok(len) => len,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            n += 1;
            if share::is_v6(&rx.buf[IPV4_UDP_LEN - share::FORWARD_HEAD..]) {
                let Some(total) = v6::from_inbox6(&mut rx.buf, len) else { continue };
                if !f(&rx.buf[..total], Icrc::Carried) {
                    return n;
                }
                continue;
            }
            if len < share::FORWARD_HEAD {
                continue;
            }
            let Some(from) = share::sender(&rx.buf[IPV4_UDP_LEN - share::FORWARD_HEAD..]) else {
                continue;
            };
            let len = len - share::FORWARD_HEAD;
            let Some(total) = rebuild(&mut rx.buf, len, SocketAddr::V4(from), self.addr.ipv4)
            else {
                continue;
            };
            if !f(&rx.buf[..total], Icrc::Carried) {
                return n;
            }
        }
        // One datagram (`recvfrom`), then while they keep coming a batch at a time
        // (`recvmmsg`), handed on one by one; those a round leaves (it stopped at a
        // completion) are the next round's first.
        // RoCE v2 over IPv6 (`udp/v6.rs`): one datagram at a time; every round once the
        // engine may meet IPv6 datagrams, before that every V6_IDLE_EVERY-th (for the
        // address's other processes, when this one holds an IPv6 address's 4791), so that
        // an IPv4 program's rounds make no system call for IPv6.
        rx.v6_tick = rx.v6_tick.wrapping_add(1);
        if !self.six.is_empty()
            && (self.addr.ipv6_used.is_armed() || rx.v6_tick.is_multiple_of(v6::V6_IDLE_EVERY))
        {
            let (took, more) = self.recv6(rx, max.saturating_sub(n), f);
            n += took;
            if !more {
                return n;
            }
        }
        let Rx { batch, gate, head, .. } = rx;
        let mut flowing = false;
        while n < max {
            let Some(gate) = gate else { break };
            if batch.fill(gate.as_raw_fd(), max - n, !flowing) == 0 {
                break;
            }
            flowing = true;
            let Some((slot, len, from)) = batch.take() else { break };
            n += 1;
            // A datagram for another port of the address goes to its inbox.
            if let Some(block) = self.share.elsewhere(&slot[IPV4_UDP_LEN..IPV4_UDP_LEN + len]) {
                let payload = &slot[IPV4_UDP_LEN..IPV4_UDP_LEN + len];
                match self.share.hand(&self.share.inbox, block, from, payload, head) {
                    Ok(()) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        // Its inbox is full: lost, as a congested network loses it.
                        tracing::debug!(block, "the inbox of a port of this address is full");
                        continue;
                    }
                    // Nobody holds the block: this engine drops it and counts it (no QP).
                    Err(_) => {}
                }
            }
            let Some(total) = rebuild(slot, len, SocketAddr::V4(from), self.addr.ipv4) else {
                continue;
            };
            if gsi::is_gsi(&slot[..total]) {
                if !self.gsi.forward(&slot[..total]) {
                    tracing::debug!("a MAD to QP1 and no connection manager in this process");
                }
                continue;
            }
            if !f(&slot[..total], Icrc::Carried) {
                break;
            }
        }
        let first = batch.peek().and_then(|p| p.first().copied());
        self.taken_one_sided.store(
            first.is_some_and(|op| {
                let mut h = [0u8; IPV4_UDP_LEN + 1];
                h[0] = 0x45;
                h[IPV4_UDP_LEN] = op;
                completes_nothing(&h)
            }),
            Ordering::Relaxed,
        );
        self.taken.store(batch.waiting(), Ordering::Release);
        n
    }

    fn park(&self, timeout: Duration) {
        self.park_interruptible(timeout);
    }

    fn park_interruptible(&self, timeout: Duration) -> bool {
        if self.taken.load(Ordering::Acquire) != 0 {
            // Datagrams taken from the socket wait for the next round: no sleep.
            return false;
        }
        let gate = self.gate_fd.load(Ordering::Relaxed);
        let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 3 + v6::MAX_SIX];
        fds[0].fd = self.wake.as_raw_fd();
        fds[1].fd = self.share.inbox.as_raw_fd();
        // A negative descriptor is ignored by poll.
        fds[2].fd = gate;
        let mut deaf = gate < 0;
        for (fd, six) in fds[3..].iter_mut().zip(self.six.iter()) {
            fd.fd = six.gate_fd.load(Ordering::Relaxed);
            deaf |= fd.fd < 0;
        }
        // A port that does not hold a 4791 wakes to try to bind it.
        let timeout = if deaf { timeout.min(GATE_RETRY) } else { timeout };
        let nfds = 3 + self.six.len();
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `fds` is a valid array of at least `nfds` pollfds, `ts` a valid timespec, no
        // sigmask.
        let rc =
            unsafe { libc::ppoll(fds.as_mut_ptr(), nfds as libc::nfds_t, &ts, std::ptr::null()) };
        let interrupted =
            rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        if fds[0].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reading the eventfd's 8-byte count into `count` resets it.
            unsafe { libc::read(self.wake.as_raw_fd(), std::ptr::from_mut(&mut count).cast(), 8) };
        }
        interrupted
    }

    fn unpark(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes to the eventfd adds one to its count.
        unsafe { libc::write(self.wake.as_raw_fd(), std::ptr::from_ref(&one).cast(), 8) };
    }

    fn describe(&self) -> String {
        let six: String =
            self.six.iter().map(|s| format!(", [{}]", Ipv6Addr::from(s.addr))).collect();
        format!(
            "UDP {}{six}:{ROCE_UDP_PORT} on network interface {}",
            Ipv4Addr::from(self.addr.ipv4),
            self.addr.name
        )
    }

    fn idle(&self) -> bool {
        let gate = self.gate_fd.load(Ordering::Relaxed);
        self.taken.load(Ordering::Acquire) == 0
            && nothing_waits(self.share.inbox.as_raw_fd())
            && (gate < 0 || nothing_waits(gate))
            && (!self.addr.ipv6_used.is_armed()
                || self.six.iter().all(|s| {
                    let fd = s.gate_fd.load(Ordering::Relaxed);
                    fd < 0 || nothing_waits(fd)
                }))
    }

    fn one_sided_waits(&self) -> bool {
        // The first datagram of each: its BTH opcode, peeked.
        let gate = self.gate_fd.load(Ordering::Relaxed);
        if self.taken.load(Ordering::Acquire) != 0 {
            return self.taken_one_sided.load(Ordering::Relaxed);
        }
        (gate >= 0 && first_completes_nothing(gate, 0))
            || first_completes_nothing(self.share.inbox.as_raw_fd(), share::FORWARD_HEAD)
            || (self.addr.ipv6_used.is_armed()
                && self.six.iter().any(|s| {
                    let fd = s.gate_fd.load(Ordering::Relaxed);
                    fd >= 0 && first_completes_nothing(fd, 0)
                }))
    }
}

impl UdpPort {
    /// Binds UDP 4791 if its time has come and it is free (its holder went).
    fn try_gate(&self, rx: &mut Rx) {
        let now = Instant::now();
        if now < rx.next_try {
            return;
        }
        rx.next_try = now + GATE_RETRY;
        for (six, gate) in self.six.iter().zip(rx.gates6.iter_mut()).filter(|(_, g)| g.is_none()) {
            if let Ok(sock) = v6::bind(&self.iface, six.addr, ROCE_UDP_PORT) {
                tracing::info!(netdev = %self.addr.name, ip = %Ipv6Addr::from(six.addr),
                    block = self.share.block, "took over UDP 4791 on the IPv6 address");
                six.gate_fd.store(sock.as_raw_fd(), Ordering::Relaxed);
                *gate = Some(sock);
            }
        }
        if rx.gate.is_some() {
            return;
        }
        if let Ok(sock) = bind(&self.iface, self.addr.ipv4, ROCE_UDP_PORT) {
            tracing::info!(netdev = %self.addr.name, ip = %Ipv4Addr::from(self.addr.ipv4),
                block = self.share.block, "took over UDP 4791 on the address");
            self.gate_fd.store(sock.as_raw_fd(), Ordering::Relaxed);
            rx.gate = Some(sock);
        }
    }
}

/// Whether no datagram waits on socket `fd` (FIONREAD: the next one's size, 0 if none).
fn nothing_waits(fd: libc::c_int) -> bool {
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes an int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) };
    r == 0 && waiting == 0
}

/// Whether the first datagram waiting on socket `fd`, whose BTH starts `skip` bytes in, is a
/// request that completes nothing.
fn first_completes_nothing(fd: libc::c_int, skip: usize) -> bool {
    let mut head = [0u8; IPV4_UDP_LEN + 1 + share::FORWARD_HEAD];
    head[0] = 0x45;
    let at = IPV4_UDP_LEN - skip;
    // SAFETY: peeking `skip + 1` bytes into `head` from `at`, which has that room.
    let n = unsafe {
        libc::recv(
            fd,
            head[at..].as_mut_ptr().cast(),
            skip + 1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == (skip + 1) as isize && completes_nothing(&head[..IPV4_UDP_LEN + 1])
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
/// `src_port` (the socket's), and the ICRC over those.
fn kernel_form(d: &mut [u8], src_port: u16) {
    let ip = IpUdp {
        src: [d[12], d[13], d[14], d[15]],
        dst: [d[16], d[17], d[18], d[19]],
        src_port,
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

/// The sending half of a [`UdpPort`]: the socket and its port, the way to the inboxes of
/// the address's other ports (for a datagram to its own address), and a buffer where a
/// datagram's headers become the kernel's and its ICRC is set.
pub struct UdpEgress {
    sock: Arc<UdpSocket>,
    port: u16,
    own: [u8; 4],
    share: Arc<Share>,
    local: Option<UnixDatagram>,
    /// The IPv6 addresses it sends from (`udp/v6.rs`).
    six: Arc<[v6::Six]>,
    tally: Arc<Tally>,
    scratch: Vec<u8>,
    head: Vec<u8>,
    /// Where a batch's datagrams become the kernel's ([`UdpEgress::send_batch`]).
    bufs: Vec<Vec<u8>>,
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

    /// Whether `datagram` for `dst` is one the kernel sends to another host as it is (not
    /// multicast, IPv4 without options, not for a port of this address).
    fn goes_out(&self, dst: [u8; 4], datagram: &[u8]) -> bool {
        !is_multicast_ipv4(dst)
            && datagram.len() >= IPV4_UDP_LEN + packet::ICRC_LEN
            && datagram[0] == 0x45
            && dst != self.own
    }

    fn send_uncounted(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        if datagram.first().is_some_and(|b| b >> 4 == 6) {
            return self.send6(datagram);
        }
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
        kernel_form(d, self.port);
        // To a port of this address: straight into its block's inbox (QP 1, or a block
        // nobody holds, goes to whoever holds 4791, through the kernel).
        if dst == self.own {
            let from = SocketAddrV4::new(Ipv4Addr::from(self.own), self.port);
            let block = d.get(IPV4_UDP_LEN + 5).copied().unwrap_or(0);
            if let (Some(local), true) = (&self.local, (1..=254).contains(&block)) {
                match self.share.hand(local, block, from, &d[IPV4_UDP_LEN..], &mut self.head) {
                    Ok(()) => return SendOutcome::Sent,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return SendOutcome::Full,
                    Err(_) => {}
                }
            }
        }
        let to = SocketAddrV4::new(Ipv4Addr::from(dst), ROCE_UDP_PORT);
        match self.sock.send_to(&d[IPV4_UDP_LEN..], to) {
            Ok(_) => SendOutcome::Sent,
            Err(e) if batch::is_full(&e) => SendOutcome::Full,
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

    /// The run of datagrams at the batch's head that go to other hosts leaves in one
    /// `sendmmsg` (`udp/batch.rs`), each made the kernel's as [`Egress::send`] makes it; a
    /// datagram for this address or one that cannot go goes alone, as before.
    fn send_batch(&mut self, batch: &[Transmit], outcomes: &mut [SendOutcome]) -> usize {
        let max = batch.len().min(outcomes.len()).min(batch::SEND_MAX);
        let run = batch[..max].iter().take_while(|t| self.goes_out(t.dst, &t.data)).count();
        if run <= 1 {
            let Some(t) = batch.first().filter(|_| max > 0) else { return 0 };
            outcomes[0] = self.send_icrc(t.dst, &t.data);
            return 1;
        }
        if self.bufs.len() < run {
            self.bufs.resize_with(run, Vec::new);
        }
        let mut payloads: [&[u8]; batch::SEND_MAX] = [&[]; batch::SEND_MAX];
        let mut to = [SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); batch::SEND_MAX];
        for (i, (t, d)) in batch[..run].iter().zip(self.bufs.iter_mut()).enumerate() {
            d.clear();
            d.extend_from_slice(&t.data);
            kernel_form(d, self.port);
            to[i] = SocketAddrV4::new(Ipv4Addr::from(t.dst), ROCE_UDP_PORT);
        }
        for (p, d) in payloads.iter_mut().zip(&self.bufs[..run]) {
            *p = &d[IPV4_UDP_LEN..];
        }
        let result = batch::sendmmsg_to(self.sock.as_raw_fd(), &payloads[..run], &to[..run]);
        let n = batch::outcomes_of(result, run, outcomes);
        for (t, outcome) in batch.iter().zip(&outcomes[..n]) {
            match outcome {
                SendOutcome::Sent => self.tally.sent(t.data.len()),
                SendOutcome::Unreachable => counters::add(&self.tally.unreachable, 1),
                SendOutcome::Full => {}
            }
        }
        n
    }
}

mod batch;
mod gsi;
mod share;
mod v6;
pub use gsi::{gsi_gate_name, gsi_socket_name};
pub use v6::zero_udp_checksums;

#[cfg(test)]
mod tests;
