//! The CM across hosts over IPv6 (`SOFTVERBS_NETDEV`): an id whose peer is another host's
//! IPv6 address, as `rping -c -a fd31::2` or `-a fe80::...%eth0` over rxe.
//!
//! The CM inside a process names ports and peers by an IPv4 address (its messages, its ids'
//! state, the gateway's connections), and an IPv6 id on one host maps its link-local address
//! to the port's IPv4 one (v6.rs). A peer across hosts has no IPv4 address to map to, so each
//! process gives every IPv6 peer it meets a stand-in IPv4 address of its own, [`alias`]: one of
//! the reserved class E block `240.0.0.0/8`, which no interface holds and nothing routes. The
//! stand-in never leaves the process: the gateway (wire.rs) turns it into the peer's IPv6
//! address (and scope) when it sends a MAD, the route (`rdma_get_route`'s `sockaddr_in6`s) and
//! the QP's path (its destination GID) show the real address, and a REQ handed to a listener
//! in another process carries the IPv6 addresses themselves (`Msg::src6`, `Msg::dst6`), which
//! that process maps to its own stand-ins.
//!
//! The id's own side: an address of the interface the device is on, a GID of its port (index
//! 0 the link-local one, 2 on the global ones: nic-model's `soft/netdev.rs`), picked as the
//! kernel picks a source (the link-local one for a link-local peer, else the global one that
//! shares the longest prefix with the peer) or the one the program bound ([`set_local`]).
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};

use nic_model::packet::{
    emit_gsi_datagram6, parse_datagram, parse_datagram6, Ip6Udp, IpCmHeader, Packet, IPV6_UDP_LEN,
    MAD_LEN, ROCE_UDP_PORT,
};
use softverbs_cabi_abi::{ibv_context, ibv_gid};

use crate::state::{devices, gid_of, Msg};

unsafe extern "C" {
    fn ibv_query_gid(
        c: *mut ibv_context,
        port: u8,
        index: libc::c_int,
        gid: *mut ibv_gid,
    ) -> libc::c_int;
}

/// The first byte of every stand-in address (class E, reserved).
const ALIAS: u8 = 240;

/// An IPv6 address and its scope id (0 but for a link-local address).
type Peer = ([u8; 16], u32);

/// An IPv6 address of the interface and its GID index.
type Local = ([u8; 16], u8);

/// The IPv6 peers met so far, with their scope ids: the i-th is stand-in `240.` and i + 1.
fn peers() -> &'static Mutex<Vec<Peer>> {
    static P: OnceLock<Mutex<Vec<Peer>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// The stand-in IPv4 address of the IPv6 peer `addr` (a link-local one with its `scope`),
/// made on first use; the same address always gets the same stand-in in this process.
pub fn alias(addr: [u8; 16], scope: u32) -> [u8; 4] {
    let scope = if is_link_local(&addr) { scope } else { 0 };
    let mut p = peers().lock().expect("peers");
    let i = match p.iter().position(|&(a, s)| a == addr && s == scope) {
        Some(i) => i,
        None => {
            p.push((addr, scope));
            p.len() - 1
        }
    };
    let n = (i as u32 + 1).to_be_bytes();
    [ALIAS, n[1], n[2], n[3]]
}

/// The IPv6 peer (address and scope id) behind stand-in `ip`; None for any other address.
pub fn peer(ip: [u8; 4]) -> Option<Peer> {
    if ip[0] != ALIAS {
        return None;
    }
    let i = u32::from_be_bytes([0, ip[1], ip[2], ip[3]]).checked_sub(1)?;
    peers().lock().expect("peers").get(i as usize).copied()
}

/// Whether `a` is a link-local unicast address (`fe80::/10`).
pub fn is_link_local(a: &[u8; 16]) -> bool {
    a[0] == 0xfe && a[1] & 0xc0 == 0x80
}

/// The IPv6 GIDs of the first device's port (the one on the interface) with their indexes:
/// the addresses this host's CM speaks from.
pub fn local_gids() -> &'static [Local] {
    static G: OnceLock<Vec<Local>> = OnceLock::new();
    G.get_or_init(|| {
        let Some(dev) = devices().first() else { return Vec::new() };
        let mut out = Vec::new();
        for i in 0..16u8 {
            let mut g = ibv_gid::default();
            // SAFETY: an open context; g is ours.
            if unsafe { ibv_query_gid(dev.ctx, 1, i.into(), &mut g) } != 0 {
                break;
            }
            let mapped = g.raw[..10].iter().all(|&b| b == 0) && g.raw[10..12] == [0xff, 0xff];
            if g.raw != [0; 16] && !mapped {
                out.push((g.raw, i));
            }
        }
        out
    })
}

/// The interface's IPv6 addresses, for messages.
pub fn list() -> String {
    let v: Vec<String> = local_gids().iter().map(|(a, _)| Ipv6Addr::from(*a).to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The GID index of `addr` if it is an IPv6 address of this host's port.
pub fn local_index(addr: &[u8; 16]) -> Option<u8> {
    local_gids().iter().find(|(a, _)| a == addr).map(|&(_, i)| i)
}

/// The address (and GID index) this host speaks from to `peer`: the link-local one for a
/// link-local peer, else the global one with the longest prefix in common with it.
pub fn source_for(peer: &[u8; 16]) -> Option<Local> {
    let common = |a: &[u8; 16]| {
        let x = u128::from_be_bytes(*a) ^ u128::from_be_bytes(*peer);
        x.leading_zeros()
    };
    local_gids()
        .iter()
        .filter(|(a, _)| is_link_local(a) == is_link_local(peer))
        .max_by_key(|(a, i)| (common(a), std::cmp::Reverse(*i)))
        .copied()
}

/// The local IPv6 address (and GID index) of each id across hosts over IPv6, by token.
fn locals() -> &'static Mutex<HashMap<u64, Local>> {
    static L: OnceLock<Mutex<HashMap<u64, Local>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// The id `token` speaks from `addr`, GID index `index`.
pub fn set_local(token: u64, addr: [u8; 16], index: u8) {
    locals().lock().expect("locals").insert(token, (addr, index));
}

/// The local IPv6 address and GID index of the id `token`, if it has one of the interface's.
pub fn local(token: u64) -> Option<Local> {
    locals().lock().expect("locals").get(&token).copied()
}

/// Forget a destroyed id.
pub fn forget(token: u64) {
    locals().lock().expect("locals").remove(&token);
}

/// The interface's index (the scope of its link-local address), 0 if unknown.
pub fn ifindex() -> u32 {
    static I: OnceLock<u32> = OnceLock::new();
    *I.get_or_init(|| {
        let name = std::env::var("SOFTVERBS_NETDEV").unwrap_or_default();
        let Ok(c) = std::ffi::CString::new(name) else { return 0 };
        // SAFETY: a NUL-terminated name.
        unsafe { libc::if_nametoindex(c.as_ptr()) }
    })
}

/// UDP sockets and their ports, by source address.
type Sockets = HashMap<[u8; 16], (UdpSocket, u16)>;

/// The gateway's IPv6 sockets, one per source address, made on first use.
fn sockets() -> &'static Mutex<Sockets> {
    static S: OnceLock<Mutex<Sockets>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// A UDP socket on `[src]:0` (a link-local one scoped to the interface) that sends checksum 0,
/// as rxe sends QP1's MADs over IPv6, and its port.
fn open(src: [u8; 16]) -> std::io::Result<(UdpSocket, u16)> {
    let scope = if is_link_local(&src) { ifindex() } else { 0 };
    let sock = UdpSocket::bind(SocketAddrV6::new(Ipv6Addr::from(src), 0, 0, scope))?;
    // A kernel without the option sends checksums, which every receiver takes.
    let _ = nic_model::soft::zero_udp_checksums(sock.as_raw_fd());
    let port = sock.local_addr()?.port();
    Ok((sock, port))
}

/// The UDP payload (BTH to ICRC) of the datagram that carries `mad` to the IPv6 peer behind
/// stand-in `to`, from the address [`source_for`] it and the gateway's socket there (made on
/// first use), the ICRC over those IPv6 headers; None if `to` is no stand-in. Errors name
/// what failed.
pub fn gsi_payload(to: [u8; 4], mad: &[u8; MAD_LEN]) -> Option<Result<Vec<u8>, String>> {
    let (dst, _) = peer(to)?;
    let (src, _) = match source_for(&dst) {
        Some(s) => s,
        None => {
            let why = format!("no IPv6 address of the interface reaches {}", Ipv6Addr::from(dst));
            return Some(Err(why));
        }
    };
    let mut socks = sockets().lock().expect("sockets");
    let src_port = match socks.entry(src) {
        std::collections::hash_map::Entry::Occupied(e) => e.get().1,
        std::collections::hash_map::Entry::Vacant(v) => match open(src) {
            Ok(s) => v.insert(s).1,
            Err(e) => return Some(Err(format!("a socket on [{}]: {e}", Ipv6Addr::from(src)))),
        },
    };
    drop(socks);
    let ip = Ip6Udp { src, dst, src_port, ..Ip6Udp::default() };
    let mut out = Vec::with_capacity(MAD_LEN + 80);
    if let Err(e) = emit_gsi_datagram6(&ip, 0, mad, &mut out) {
        return Some(Err(format!("a MAD over IPv6: {e}")));
    }
    Some(Ok(out.split_off(IPV6_UDP_LEN)))
}

/// Sends a MAD's UDP payload made by [`gsi_payload`] to the IPv6 peer behind stand-in `to`'s
/// UDP port 4791, from the socket it was made for. Errors name what failed.
pub fn send(to: [u8; 4], payload: &[u8]) -> Result<(), String> {
    let (dst, scope) = peer(to).ok_or("no IPv6 peer behind the stand-in address")?;
    let (src, _) = source_for(&dst).ok_or("no IPv6 address of the interface reaches it")?;
    let socks = sockets().lock().expect("sockets");
    let (sock, _) = socks.get(&src).ok_or("no socket on the source address")?;
    let at = SocketAddrV6::new(Ipv6Addr::from(dst), ROCE_UDP_PORT, 0, scope);
    sock.send_to(payload, at).map(|_| ()).map_err(|e| format!("to {at}: {e}"))
}

/// The IP CM header and the path's local and remote GIDs of the REQ (or SIDR_REQ) `m` that
/// the local id `m.from` sends from the port of address `ip`: IPv6 ones to a peer behind a
/// stand-in (cma.c's `cma_format_hdr` for an `AF_INET6` id: version 6, the source port, the
/// id's source and destination addresses), else IPv4 ones.
pub fn req_addrs(m: &Msg, ip: [u8; 4]) -> (IpCmHeader, [u8; 16], [u8; 16]) {
    let Some((peer, _)) = peer(m.dst_ip) else {
        let hdr = IpCmHeader {
            src_port: m.src_port,
            src: Ipv4Addr::from(m.src_ip).into(),
            dst: Ipv4Addr::from(m.dst_ip).into(),
        };
        return (hdr, gid_of(ip), gid_of(m.dst_ip));
    };
    let from = local(m.from).or_else(|| source_for(&peer)).map_or([0; 16], |l| l.0);
    let hdr = IpCmHeader {
        src_port: m.src_port,
        src: Ipv6Addr::from(from).into(),
        dst: Ipv6Addr::from(peer).into(),
    };
    (hdr, from, peer)
}

/// The sender (its address, a stand-in for an IPv6 one) and the transport packet of a QP1
/// datagram from the port: IPv4 or IPv6 by its first nibble, the ICRC checked.
pub fn parse_any(d: &[u8]) -> Option<([u8; 4], Packet<'_>)> {
    if d.first()? >> 4 == 6 {
        let (ip, pkt) = parse_datagram6(d).ok()?;
        let scope = if is_link_local(&ip.src) { ifindex() } else { 0 };
        Some((alias(ip.src, scope), pkt))
    } else {
        let (ip, pkt) = parse_datagram(d).ok()?;
        Some((ip.src, pkt))
    }
}

/// Marks the REQ (or SIDR_REQ) `m` for a listener as an IPv6 peer's if `from` stands in for
/// one: the family and scope of the new id, and the addresses of the IP CM header (as cma.c's
/// `cma_save_ip6_info`: the id's source is the header's destination, its peer the header's
/// source), which a listener in another process maps to stand-ins of its own.
pub fn mark_req(m: &mut Msg, from: [u8; 4], hdr: Option<IpCmHeader>) {
    let Some((addr, scope)) = peer(from) else { return };
    m.v6 = 1;
    m.scope = scope.to_ne_bytes();
    let v6 = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V6(x) if x.to_ipv4_mapped().is_none() => Some(x.octets()),
        _ => None,
    };
    m.src6 = hdr.and_then(|h| v6(h.src)).unwrap_or(addr);
    m.dst6 =
        hdr.and_then(|h| v6(h.dst)).or_else(|| source_for(&addr).map(|l| l.0)).unwrap_or_default();
}
