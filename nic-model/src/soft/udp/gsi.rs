//! QP1 on the UDP wire: a datagram to QP1 (the General Services Interface: the connection
//! manager's MADs) is no engine's; the port hands it, headers rebuilt and ICRC to check, to
//! the process's connection manager (`librdmacm.so.1`, cabi/rdmacm/src/wire.rs), which
//! listens on the abstract Unix datagram socket [`gsi_socket_name`]. Nobody there (a process
//! that uses no CM): the datagram goes to the CM that holds the address's gate name
//! ([`gsi_gate_name`]: some process of the address that uses the CM), which hands each MAD to
//! the process whose listener or connection it is for; nobody at all: it is dropped, as a port
//! without a GSI agent drops MADs.
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The abstract socket name a process's CM receives QP1 datagrams on (`softverbs-gsi-PID`).
pub fn gsi_socket_name(pid: u32) -> String {
    format!("softverbs-gsi-{pid}")
}

/// The abstract socket name the CM of one process of address `ip` holds for the address:
/// where a port whose own process has no CM hands QP1 datagrams (`softverbs-gsi-gate/IP`).
pub fn gsi_gate_name(ip: [u8; 4]) -> String {
    format!("softverbs-gsi-gate/{}", std::net::Ipv4Addr::from(ip))
}

/// Whether the RoCE v2 datagram `d` (IPv4 and UDP headers first) is for QP1.
#[inline]
pub fn is_gsi(d: &[u8]) -> bool {
    // BTH after the 28 header bytes; DestQP is its bytes 5..8.
    d.get(28 + 5..28 + 8) == Some(&[0, 0, 1][..])
}

/// Where a port forwards QP1 datagrams: an unbound socket and the CM's address.
pub struct GsiForward {
    sock: Option<UnixDatagram>,
    to: Option<SocketAddr>,
    /// The address's gate ([`gsi_gate_name`]), when this process's CM takes nothing.
    gate: Option<SocketAddr>,
}

impl GsiForward {
    /// The forwarder of this process's port on address `ip` (sockets that fail to open make
    /// it drop everything).
    pub fn new(ip: [u8; 4]) -> GsiForward {
        let to = SocketAddr::from_abstract_name(gsi_socket_name(std::process::id())).ok();
        let gate = SocketAddr::from_abstract_name(gsi_gate_name(ip)).ok();
        let sock = UnixDatagram::unbound().ok();
        if let Some(s) = &sock {
            let _ = s.set_nonblocking(true);
        }
        GsiForward { sock, to, gate }
    }

    /// Hand `d` to this process's CM, else to the address's gate; false when nobody takes it
    /// (no CM, or its queue full).
    pub fn forward(&self, d: &[u8]) -> bool {
        let Some(s) = &self.sock else { return false };
        [&self.to, &self.gate].into_iter().flatten().any(|to| s.send_to_addr(d, to).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::is_gsi;
    use crate::packet::{emit_gsi_datagram, IpUdp};

    #[test]
    fn only_datagrams_to_qp1_are_the_cms() {
        let ip = IpUdp { src: [10, 0, 0, 1], dst: [10, 0, 0, 2], ttl: 64, ..IpUdp::default() };
        let mut d = Vec::new();
        emit_gsi_datagram(&ip, 0, &[0; 256], &mut d).unwrap();
        assert!(is_gsi(&d));
        d[28 + 6] = 1; // QP 0x000101
        assert!(!is_gsi(&d));
        assert!(!is_gsi(&d[..30]), "a runt is no MAD");
    }
}
