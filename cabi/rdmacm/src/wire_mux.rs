//! QP 1 for every process of an address (issue 31): UDP port 4791 binds once per address, so
//! CM MADs from other hosts arrive at the port that holds it (nic-model's `soft/udp/share.rs`),
//! which hands them to its own process's CM, or, when that process has none, to the CM holding
//! the address's gate name (`softverbs-gsi-gate/IP`, [`Gate`]). The CM that receives a MAD
//! answers a REQ for any listener of the host (the CM directory names every process's
//! listeners) as the listener's stand-in; any other MAD it has no connection for (a REP, RTU,
//! REJ, DREQ, DREP, MRA or SIDR_REP for a connection another process of the address started)
//! it hands to the other CMs of the host ([`to_others`]), marked so that none hands it on
//! again, and the one whose connection it is takes it (docs/decisions.md, "QP 1 for every
//! process of an address").
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::state::cm_dir;

/// What a CM puts in front of a MAD it hands to another (a datagram starts with an IPv4
/// header, 0x45, so the two never mix).
pub const HANDED: &[u8; 4] = b"SVFW";

/// How often a CM that does not hold the gate name tries to take it (its holder may be gone).
const RETRY: Duration = Duration::from_secs(1);

/// The address's gate name, once this process's CM holds it.
pub struct Gate {
    name: String,
    held: Mutex<(Option<UnixDatagram>, Instant)>,
}

impl Gate {
    /// The gate of address `ip`, taken now if free.
    pub fn new(ip: [u8; 4]) -> Gate {
        let g = Gate {
            name: nic_model::soft::gsi_gate_name(ip),
            held: Mutex::new((None, Instant::now())),
        };
        g.take();
        g
    }

    /// Tries to bind the gate name if not held and the last try is [`RETRY`] old; the
    /// socket's descriptor (-1: not held), for poll.
    pub fn take(&self) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let mut h = self.held.lock().expect("gate");
        if h.0.is_none() && h.1 <= Instant::now() {
            h.1 = Instant::now() + RETRY;
            h.0 = SocketAddr::from_abstract_name(&self.name)
                .and_then(|a| UnixDatagram::bind_addr(&a))
                .and_then(|s| s.set_nonblocking(true).map(|()| s))
                .ok();
        }
        h.0.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// The next datagram waiting on the gate, if it is held.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        self.held.lock().expect("gate").0.as_ref()?.recv(buf).ok()
    }
}

/// Hands the QP 1 datagram `d` (no connection here) to the other CMs of the host: each CM
/// with a gateway has its channel socket `ch-PID-wire` in the CM directory and receives on
/// `softverbs-gsi-PID`. How many took it.
pub fn to_others(d: &[u8]) -> usize {
    let me = std::process::id();
    let Ok(sock) = UnixDatagram::unbound() else { return 0 };
    let _ = sock.set_nonblocking(true);
    let mut msg = Vec::with_capacity(HANDED.len() + d.len());
    msg.extend_from_slice(HANDED);
    msg.extend_from_slice(d);
    let mut n = 0;
    for e in std::fs::read_dir(cm_dir()).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|s| s.strip_prefix("ch-")?.strip_suffix("-wire")?.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let to = SocketAddr::from_abstract_name(nic_model::soft::gsi_socket_name(pid));
        if to.and_then(|to| sock.send_to_addr(&msg, &to)).is_ok() {
            n += 1;
        }
    }
    n
}
