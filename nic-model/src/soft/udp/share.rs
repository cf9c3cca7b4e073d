//! Several processes on one interface address (docs/decisions.md, "Several processes on one
//! address"): UDP port 4791 binds once per address, so the ports of one address share it.
//!
//! Each port claims a block of QP numbers, 1 to 254 (its QPs are `block << 16 | n`), by
//! binding a Unix datagram socket to the abstract name `softverbs-roce/IFACE/IP/BLOCK`:
//! the kernel refuses a name already bound and frees it when its process exits or dies, and
//! abstract names belong to the network namespace, so the claim is crash-safe and per host.
//! That socket is also the port's inbox: the one port that holds UDP 4791 on the address
//! (the gate, the first to bind it; another binds it when it goes) hands each datagram whose
//! destination QP is in another block to that block's inbox, with the sender's address and
//! port in front ([`FORWARD_HEAD`] bytes); a port sending to its own address puts its datagram
//! straight into the destination block's inbox.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};

/// The bytes in front of a datagram handed between the ports of one address: the sender's
/// IPv4 address, its UDP port (big-endian) and two zero bytes.
pub(super) const FORWARD_HEAD: usize = 8;

/// The bytes in front of an IPv6 datagram handed between the ports of one address (RoCE v2
/// over IPv6, `v6.rs`): four zero bytes, the sender's UDP port (big-endian), 6 and 0 (where
/// an IPv4 head has two zero bytes), the sender's IPv6 address and the one it was sent to.
pub(super) const FORWARD_HEAD6: usize = 40;

/// The blocks of QP numbers there are: 1 to 254 (block 0 holds QP 0 and 1, block 255 the
/// multicast QPN 0xFFFFFF).
const BLOCKS: std::ops::RangeInclusive<u8> = 1..=254;

/// A port's claim on its address: its block of QP numbers and its inbox.
pub(super) struct Share {
    /// The block its QP numbers are in.
    pub(super) block: u8,
    /// The inbox (bound to the block's name), nonblocking; also what the gate sends from.
    pub(super) inbox: UnixDatagram,
    /// `softverbs-roce/IFACE/IP/`: a block's name is this and its number.
    stem: String,
}

impl Share {
    /// Claims the first free block of `iface`'s address `ip`. An error: all 254 are taken
    /// (then it is `AddrInUse`), or the socket could not be made.
    pub(super) fn claim(iface: &str, ip: [u8; 4]) -> std::io::Result<Share> {
        let stem = format!("softverbs-roce/{iface}/{}/", Ipv4Addr::from(ip));
        for block in BLOCKS {
            let name = UnixAddr::from_abstract_name(format!("{stem}{block}"))?;
            match UnixDatagram::bind_addr(&name) {
                Ok(inbox) => {
                    inbox.set_nonblocking(true)?;
                    super::grow_buffers(inbox.as_raw_fd());
                    return Ok(Share { block, inbox, stem });
                }
                Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            ErrorKind::AddrInUse,
            format!("all {} blocks of QP numbers of the address are held", BLOCKS.count()),
        ))
    }

    /// Whether another port holds a block of this address (so that whoever holds UDP 4791
    /// there is one of ours, not the kernel's rxe or another program).
    pub(super) fn others(&self) -> bool {
        let Ok(probe) = UnixDatagram::unbound() else { return false };
        BLOCKS
            .filter(|&b| b != self.block)
            .any(|b| self.name(b).is_ok_and(|name| probe.connect_addr(&name).is_ok()))
    }

    fn name(&self, block: u8) -> std::io::Result<UnixAddr> {
        UnixAddr::from_abstract_name(format!("{}{block}", self.stem))
    }

    /// The block a datagram's UDP payload is for: its BTH's destination QP's, when that is
    /// another port's (not this one's, not QP 1 or block 0 or 255, which stay here).
    pub(super) fn elsewhere(&self, payload: &[u8]) -> Option<u8> {
        let block = *payload.get(5)?;
        if payload.len() < 12 || block == self.block || !BLOCKS.contains(&block) {
            return None;
        }
        Some(block)
    }

    /// Hands `payload` from `from` to block `block`'s inbox, from `sock` (an inbox or an
    /// unbound socket). `head` is scratch room. Err: nobody holds the block
    /// (`ConnectionRefused` or `NotFound`), or its inbox is full (`WouldBlock`).
    pub(super) fn hand(
        &self,
        sock: &UnixDatagram,
        block: u8,
        from: SocketAddrV4,
        payload: &[u8],
        head: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        head.clear();
        head.extend_from_slice(&from.ip().octets());
        head.extend_from_slice(&from.port().to_be_bytes());
        head.extend_from_slice(&[0, 0]);
        head.extend_from_slice(payload);
        sock.send_to_addr(head, &self.name(block)?).map(|_| ())
    }
}

impl Share {
    /// Hands `payload`, an IPv6 datagram's UDP payload from `src`:`port` to `dst`, to block
    /// `block`'s inbox, as [`Share::hand`] does for IPv4 (an [`FORWARD_HEAD6`]-byte head).
    pub(super) fn hand6(
        &self,
        sock: &UnixDatagram,
        block: u8,
        (src, port, dst): ([u8; 16], u16, [u8; 16]),
        payload: &[u8],
        head: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        head.clear();
        head.extend_from_slice(&[0; 4]);
        head.extend_from_slice(&port.to_be_bytes());
        head.extend_from_slice(&[6, 0]);
        head.extend_from_slice(&src);
        head.extend_from_slice(&dst);
        head.extend_from_slice(payload);
        sock.send_to_addr(head, &self.name(block)?).map(|_| ())
    }
}

/// The sender (address and UDP port) and destination a handed IPv6 datagram names in front
/// of it ([`Share::hand6`]); None if it is an IPv4 one or too short.
pub(super) fn sender6(message: &[u8]) -> Option<([u8; 16], u16, [u8; 16])> {
    let h = message.get(..FORWARD_HEAD6)?;
    if h[6] != 6 {
        return None;
    }
    let src = <[u8; 16]>::try_from(&h[8..24]).ok()?;
    let dst = <[u8; 16]>::try_from(&h[24..40]).ok()?;
    Some((src, u16::from_be_bytes([h[4], h[5]]), dst))
}

/// Whether a handed message carries an IPv6 datagram ([`Share::hand6`]'s head).
pub(super) fn is_v6(message: &[u8]) -> bool {
    message.get(6) == Some(&6)
}

/// The sender a handed datagram names in front of it; None if it is too short.
pub(super) fn sender(message: &[u8]) -> Option<SocketAddrV4> {
    let h = message.get(..FORWARD_HEAD)?;
    if h[6] != 0 {
        return None;
    }
    Some(SocketAddrV4::new(Ipv4Addr::new(h[0], h[1], h[2], h[3]), u16::from_be_bytes([h[4], h[5]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks are claimed one per port, freed with the port (its socket), and seen by the
    /// others; a datagram handed to a block arrives with its sender in front; what stays with
    /// the holder (its own block, QP 1, too short) is not handed on.
    #[test]
    fn blocks_are_claimed_freed_and_handed_to() {
        let iface = format!("test{}", std::process::id());
        let ip = [10, 9, 8, 7];
        let a = Share::claim(&iface, ip).expect("a block");
        assert!(!a.others(), "alone on the address");
        let b = Share::claim(&iface, ip).expect("another block");
        assert_ne!(a.block, b.block);
        assert!(a.others() && b.others());
        let mut payload = vec![0u8; 40];
        payload[5] = b.block;
        assert_eq!(a.elsewhere(&payload), Some(b.block));
        assert_eq!(b.elsewhere(&payload), None, "its own block");
        payload[5..8].copy_from_slice(&[0, 0, 1]);
        assert_eq!(a.elsewhere(&payload), None, "QP 1 stays with the holder");
        assert_eq!(a.elsewhere(&[0u8; 8]), None, "too short for a BTH");

        payload[5] = b.block;
        let from = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 20), 4791);
        let mut head = Vec::new();
        a.hand(&a.inbox, b.block, from, &payload, &mut head).expect("handed");
        let mut got = vec![0u8; 128];
        let n = b.inbox.recv(&mut got).expect("arrived");
        assert_eq!(n, FORWARD_HEAD + payload.len());
        assert_eq!(sender(&got[..n]), Some(from));
        assert_eq!(&got[FORWARD_HEAD..n], &payload[..]);
        assert_eq!(sender(&got[..3]), None);

        // The block of a port that went is free again, and nobody receives for it.
        let freed = b.block;
        drop(b);
        assert!(a.hand(&a.inbox, freed, from, &payload, &mut head).is_err());
        let c = Share::claim(&iface, ip).expect("a block again");
        assert_eq!(c.block, freed);
    }
}
