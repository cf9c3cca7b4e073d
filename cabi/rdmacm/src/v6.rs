//! IPv6 in the CM: a softverbs port's IPv6 address is its link-local GID (GID index 0,
//! `fe80::` and the EUI-64 of its MAC `02:00:a:b:c:d`, as rxe's netdev has), which names the
//! same port as its IPv4 address `a.b.c.d`. An id addressed so (or bound to `::`) is an IPv6
//! id: its route holds `sockaddr_in6`s with the scope id, its RC QP sends from GID index 0 to
//! the peer's link-local GID (RoCE v2 over IPv6). A UD id's address handles (`param.ud`) stay
//! on the IPv4 GIDs (an address handle from GID index 0 would send over IPv6). A link-local address needs a scope id, as with
//! the kernel's CM (`EINVAL` without); the soft ports sit on no host interface, so any
//! interface's index names them (`fe80::...%lo`). `::1` is as `127.0.0.1`: it reaches whichever
//! process listens on the port.
use std::collections::HashMap;
use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::sync::{Mutex, OnceLock};

/// The link-local address (and GID) of the port whose IPv4 address is `ip`.
pub fn link_local(ip: [u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    // The modified EUI-64 of MAC 02:00:a:b:c:d: ff:fe in the middle, the U/L bit flipped.
    a[8..16].copy_from_slice(&[0x00, 0x00, ip[0], 0xff, 0xfe, ip[1], ip[2], ip[3]]);
    a
}

/// The IPv4 address of the softverbs port whose link-local address is `a` (inverse of
/// [`link_local`]); None for any other address.
pub fn ip_of_link_local(a: &[u8; 16]) -> Option<[u8; 4]> {
    let ip = [a[10], a[13], a[14], a[15]];
    (link_local(ip) == *a).then_some(ip)
}

/// The IPv6 ids (by token) and their scope ids (0 for an id bound to `::`).
fn scopes() -> &'static Mutex<HashMap<u64, u32>> {
    static S: OnceLock<Mutex<HashMap<u64, u32>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// Record the id `token` as IPv6, with `scope`.
pub fn mark(token: u64, scope: u32) {
    scopes().lock().expect("scopes").insert(token, scope);
}

/// The scope id of an IPv6 id; None for an IPv4 one.
pub fn scope(token: u64) -> Option<u32> {
    scopes().lock().expect("scopes").get(&token).copied()
}

/// Forget a destroyed id.
pub fn forget(token: u64) {
    scopes().lock().expect("scopes").remove(&token);
    crate::wire6::forget(token);
}

/// The GID a QP of id `token` sends to for the port `ip`, and its own GID index: the
/// link-local GID and index 0 for an IPv6 id, the IPv4-mapped GID and index 1 otherwise.
pub fn path_gid(token: u64, ip: [u8; 4]) -> ([u8; 16], u8) {
    if let Some((peer, _)) = crate::wire6::peer(ip) {
        // A peer across hosts over IPv6: from the id's address of the interface.
        let from = crate::wire6::local(token).or_else(|| crate::wire6::source_for(&peer));
        return (peer, from.map_or(0, |l| l.1));
    }
    if scope(token).is_some() {
        (link_local(ip), 0)
    } else {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        (g, 1)
    }
}

/// Store the id's addresses in its C route (`rdma_cm_id.route.addr`: IPv4 ones, or for an
/// IPv6 id IPv6 ones).
pub fn set_route(id: &crate::state::Id, src: ([u8; 4], u16), dst: Option<([u8; 4], u16)>) {
    let c = &id.c as *const crate::cm_abi::rdma_cm_id as *mut crate::cm_abi::rdma_cm_id;
    // SAFETY: the id's own C struct; programs read it only between calls.
    let r = unsafe { &mut (*c).route.addr };
    r.ib.pkey = 0xffff;
    if let Some(scope) = scope(id.token) {
        // An IPv6 id: link-local addresses and GIDs (v6.rs), or the interface's and a peer's
        // across hosts (wire6.rs).
        r.ib.sgid = write_src6(id.token, &mut r.src, src.0, src.1, scope);
        if let Some(d) = dst {
            r.ib.dgid = write_sockaddr6(&mut r.dst, d.0, d.1, scope);
        }
        return;
    }
    crate::state::write_sockaddr(&mut r.src, src.0, src.1);
    r.ib.sgid = crate::state::gid_of(src.0);
    if let Some(d) = dst {
        crate::state::write_sockaddr(&mut r.dst, d.0, d.1);
        r.ib.dgid = crate::state::gid_of(d.0);
    }
}

/// The source `sockaddr_in6` of the IPv6 id `token` on port `ip`: the interface's address it
/// speaks from across hosts (wire6.rs), else as [`write_sockaddr6`]. Returns its GID.
pub fn write_src6(token: u64, out: &mut [u8; 128], ip: [u8; 4], port: u16, scope: u32) -> [u8; 16] {
    match crate::wire6::local(token) {
        Some((a, _)) => {
            let scope = if crate::wire6::is_link_local(&a) { crate::wire6::ifindex() } else { 0 };
            put_sockaddr6(out, a, port, scope);
            a
        }
        None => write_sockaddr6(out, ip, port, scope),
    }
}

/// A `sockaddr_in6` for the port `ip` (its link-local address with `scope`; `::` for
/// `0.0.0.0`, `::1` for loopback; the IPv6 peer behind a stand-in address of wire6.rs, with
/// its scope) and `port`, into a `sockaddr_storage`-sized field. Returns the route's GID for
/// it: the peer's address, else the port's link-local GID.
pub fn write_sockaddr6(out: &mut [u8; 128], ip: [u8; 4], port: u16, scope: u32) -> [u8; 16] {
    if let Some((a, scope)) = crate::wire6::peer(ip) {
        put_sockaddr6(out, a, port, scope);
        return a;
    }
    let (a, scope) = if ip[0] == 127 {
        (Ipv6Addr::LOCALHOST.octets(), 0)
    } else if ip != [0; 4] {
        (link_local(ip), scope)
    } else {
        ([0; 16], 0)
    };
    put_sockaddr6(out, a, port, scope);
    link_local(ip)
}

/// Writes the `sockaddr_in6` of `a`, `port` and `scope` into a `sockaddr_storage`-sized field.
fn put_sockaddr6(out: &mut [u8; 128], a: [u8; 16], port: u16, scope: u32) {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    s.sin6_port = port.to_be();
    s.sin6_addr.s6_addr = a;
    s.sin6_scope_id = scope;
    out.fill(0);
    let n = size_of::<libc::sockaddr_in6>();
    // SAFETY: sockaddr_in6 is plain data of n bytes.
    let b =
        unsafe { std::slice::from_raw_parts((&s as *const libc::sockaddr_in6).cast::<u8>(), n) };
    out[..n].copy_from_slice(b);
}

/// What an IPv6 `sockaddr_in6` names.
pub enum Addr6 {
    /// Not an IPv6 address (the caller reads it as IPv4).
    NotV6,
    /// `::` (any address) or a port's link-local address with its scope id: the port's IPv4
    /// address (`0.0.0.0` for any), the port number and the scope id.
    Port([u8; 4], u16, u32),
    /// An IPv6 address of no softverbs port, as text.
    Foreign(String),
    /// On a network interface (`SOFTVERBS_NETDEV`, wire6.rs): one of the interface's IPv6
    /// addresses, the port's GID `index`, with the port's IPv4 address, the port number and
    /// the scope id.
    Local { ip: [u8; 4], port: u16, scope: u32, addr: [u8; 16], index: u8 },
    /// On a network interface: another host's IPv6 address (reached by the CM's MADs over
    /// IPv6), the port number and the scope id.
    Remote([u8; 16], u16, u32),
}

/// Read `sa` if it is an IPv6 address other than an IPv4-mapped one (which the IPv4 path
/// reads). A link-local address without a scope id is -1 with `EINVAL`, as with the kernel's
/// CM, and a line saying so (`what` names the call).
pub fn read(sa: *const libc::sockaddr, what: &str) -> Result<Addr6, c_int> {
    // SAFETY: NULL or the caller's sockaddr, read by its family.
    if sa.is_null() || unsafe { (*sa).sa_family } as c_int != libc::AF_INET6 {
        return Ok(Addr6::NotV6);
    }
    // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
    let s = unsafe { &*(sa as *const libc::sockaddr_in6) };
    let a = s.sin6_addr.s6_addr;
    let port = u16::from_be(s.sin6_port);
    if a[..10].iter().all(|&b| b == 0) && a[10..12] == [0xff, 0xff] {
        return Ok(Addr6::NotV6);
    }
    if a == [0; 16] {
        return Ok(Addr6::Port([0; 4], port, 0));
    }
    if a == Ipv6Addr::LOCALHOST.octets() {
        // As 127.0.0.1: whichever process listens on the port (state.rs `is_loopback`).
        return Ok(Addr6::Port([127, 0, 0, 1], port, 0));
    }
    let text = Ipv6Addr::from(a).to_string();
    match ip_of_link_local(&a) {
        Some(_) if s.sin6_scope_id == 0 => {
            eprintln!("librdmacm (softverbs): {what}: the link-local address {text} needs a scope id (write {text}%lo: the soft ports take any interface's)");
            Err(libc::EINVAL)
        }
        Some(ip) => Ok(Addr6::Port(ip, port, s.sin6_scope_id)),
        None if crate::wire::on() && a[0] != 0xff => across(a, port, s.sin6_scope_id, what),
        None => Ok(Addr6::Foreign(text)),
    }
}

/// An IPv6 address that names no soft port, on a network interface: the interface's own, or
/// another host's. A link-local one without a scope id is `EINVAL`, as with the kernel's CM
/// (it cannot tell the link).
fn across(a: [u8; 16], port: u16, scope: u32, what: &str) -> Result<Addr6, c_int> {
    let text = Ipv6Addr::from(a).to_string();
    if crate::wire6::is_link_local(&a) && scope == 0 {
        eprintln!("librdmacm (softverbs): {what}: the link-local address {text} needs a scope id (write {text}%IFACE)");
        return Err(libc::EINVAL);
    }
    let dev = crate::state::devices().first().copied();
    match (crate::wire6::local_index(&a), dev) {
        (Some(index), Some(d)) => Ok(Addr6::Local { ip: d.ip, port, scope, addr: a, index }),
        _ => Ok(Addr6::Remote(a, port, scope)),
    }
}
