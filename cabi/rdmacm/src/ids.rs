//! Event channels, ids and addressing: `rdma_create_event_channel`, `rdma_create_id`,
//! `rdma_bind_addr`, `rdma_listen`, `rdma_resolve_addr`, `rdma_resolve_route`,
//! `rdma_getaddrinfo`, and the small calls (`rdma_event_str`, ports, options, `rpoll`).
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::Mutex;

use verbs_api::{IbvEnum, QpType};

use crate::cm_abi::*;
use crate::state::*;
use crate::v6::set_route;

/// `rdma_create_event_channel`: a channel whose `fd` is pollable (readable when an event waits).
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    // The clock flushes the outbox, which any send may need from now on.
    crate::watch::start();
    channel_for_c(false)
}

/// `rdma_destroy_event_channel`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    // Only a live channel of ours: a second destroy is ignored instead of closing a descriptor
    // twice.
    if channels().lock().expect("channels").remove(&(ch as usize)) {
        // SAFETY: made by rdma_create_event_channel (the C struct is the box's first field).
        drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
    }
}

/// Make and register an id on `ch` (also for the ids a CONNECT_REQUEST brings).
pub fn make_id(ch: *mut rdma_event_channel, context: *mut c_void, ps: c_int) -> *mut Id {
    // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, zero numbers).
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = ch;
    c.context = context;
    c.ps = ps;
    // As librdmacm's rdma_create_id: UD for the UDP and IPoIB port spaces, else RC (an
    // RDMA_PS_IB id made by rdma_create_ep takes the hints' type instead).
    let ud = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB;
    c.qp_type = (if ud { QpType::Ud } else { QpType::Rc }).to_c_int();
    let id = Box::into_raw(Box::new(Id {
        c,
        token: token(),
        st: Mutex::new(St::default()),
        busy: Default::default(),
    }));
    // SAFETY: just made.
    let t = unsafe { (*id).token };
    ids().lock().expect("ids").insert(t, id as usize);
    id
}

/// `rdma_create_id` on a channel: an id on `ch` in port space `ps` (`RDMA_PS_TCP`: RC,
/// `RDMA_PS_UDP` or `RDMA_PS_IPOIB`: UD, `RDMA_PS_IB`: RC unless `rdma_create_ep` asks for
/// UD); sync.rs exports the call (a NULL channel there
/// makes a synchronous id).
pub unsafe fn create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() || ch.is_null() {
        return fail(libc::EINVAL);
    }
    if ![RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB, RDMA_PS_IB].contains(&ps) {
        eprintln!("librdmacm (softverbs): rdma_create_id: port space {ps:#x} is not supported (RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB or RDMA_PS_IB)");
        return fail(libc::EPROTONOSUPPORT);
    }
    // SAFETY: id is the caller's out pointer.
    unsafe { *id = make_id(ch, context, ps).cast() };
    0
}

/// Claim the listening name `ip:port` for `id` (EADDRINUSE while a live listener has it).
fn claim(id: &Id, ip: [u8; 4], port: u16) -> Result<PathBuf, c_int> {
    let name = listen_name(ip, port, ps_ib(id));
    let target = format!("{}#{}", channel_of(id).path.display(), id.token);
    for _ in 0..2 {
        match std::os::unix::fs::symlink(&target, &name) {
            Ok(()) => return Ok(name),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A listener whose process exited is stale, a closed one free; replaced in
                // one step (a REQ may be waiting for this listener: `watch`).
                if listener_at(&name).is_some() {
                    return Err(libc::EADDRINUSE);
                }
                if replace_link(&target, &name).is_ok() {
                    return Ok(name);
                }
            }
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
    Err(libc::EADDRINUSE)
}

/// `rdma_bind_addr`: bind to a softverbs port's address (or any address, `0.0.0.0`) and a port
/// (0: one is picked).
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(cid: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let (v6, v4) = match crate::v6::read(addr, "rdma_bind_addr") {
        Ok(crate::v6::Addr6::Port(ip, port, scope)) => (Some(scope), Some((ip, port))),
        Ok(crate::v6::Addr6::Local { ip, port, scope, addr, index }) => {
            // An address of the interface (wire6.rs): the port's, spoken from.
            crate::wire6::set_local(id.token, addr, index);
            (Some(scope), Some((ip, port)))
        }
        Ok(crate::v6::Addr6::Remote(a, ..)) => {
            let text = std::net::Ipv6Addr::from(a);
            crate::state::log_reason(format_args!(
                "rdma_bind_addr: {text} is no address of this host's interface"
            ));
            return fail(libc::EADDRNOTAVAIL);
        }
        Ok(crate::v6::Addr6::Foreign(text)) => {
            crate::state::log_reason(format_args!("rdma_bind_addr: {text} is the address of no softverbs port here (a port's IPv6 address is its link-local GID, fe80::...)"));
            return fail(libc::EADDRNOTAVAIL);
        }
        Ok(crate::v6::Addr6::NotV6) => (None, read_sockaddr(addr)),
        Err(e) => return fail(e),
    };
    let Some((ip, mut port)) = v4 else {
        eprintln!(
            "librdmacm (softverbs): rdma_bind_addr: only IPv4 and IPv6 addresses are supported"
        );
        return fail(libc::EAFNOSUPPORT);
    };
    if let Some(scope) = v6 {
        crate::v6::mark(id.token, scope);
    }
    // A loopback address binds the id to this process's first soft device (the kernel's CM binds
    // it to its first active device, so `verbs` is set) but listens on any address: 127.0.0.1
    // reaches whichever process listens on the port (state.rs, is_loopback).
    let loopback = is_loopback(ip);
    // The address the id reports (`rdma_get_local_addr`) is the one bound, as the kernel's:
    // a loopback one too (libfabric's rxm hands it to its peers as the listener's name).
    let shown = ip;
    let ip = if loopback { [0; 4] } else { ip };
    let dev = if loopback {
        devices().first().copied()
    } else if ip == [0; 4] {
        None
    } else {
        match dev_of_ip(ip) {
            Some(d) => Some(d),
            None => {
                // As the kernel's librdmacm, silent: UCX, MPI and libfabric probe every host
                // address; the reason only under SOFTVERBS_LOG.
                crate::state::log_reason(format_args!(
                    "rdma_bind_addr: {}.{}.{}.{} is the address of no softverbs port here (ports: {})",
                    ip[0], ip[1], ip[2], ip[3], port_list()
                ));
                return fail(libc::EADDRNOTAVAIL);
            }
        }
    };
    let mut tries = 0;
    let name = loop {
        let p = if port == 0 { ephemeral_port() } else { port };
        match claim(id, ip, p) {
            Ok(n) => {
                port = p;
                break n;
            }
            Err(libc::EADDRINUSE) if port == 0 && tries < 64 => tries += 1,
            Err(e) => return fail(e),
        }
    };
    let mut st = id.st.lock().expect("id");
    st.src = (ip, port);
    st.listen = Some(name);
    drop(st);
    let c = cid;
    // SAFETY: the caller's live id.
    unsafe {
        if let Some(d) = dev {
            (*c).verbs = d.ctx;
            (*c).port_num = 1;
        }
    }
    crate::cq::give_pd(c);
    set_route(id, (shown, port), None);
    0
}

/// The addresses of this process's soft ports, for messages.
pub fn port_list() -> String {
    let v: Vec<String> = devices()
        .iter()
        .map(|d| format!("{}.{}.{}.{}", d.ip[0], d.ip[1], d.ip[2], d.ip[3]))
        .collect();
    if v.is_empty() {
        "none: is the fabric set up?".into()
    } else {
        v.join(", ")
    }
}

/// The IPv6 (link-local) addresses of this process's soft ports, for messages.
fn port_list6() -> String {
    let v: Vec<String> = devices()
        .iter()
        .map(|d| std::net::Ipv6Addr::from(crate::v6::link_local(d.ip)).to_string())
        .collect();
    if v.is_empty() {
        "none: is the fabric set up?".into()
    } else {
        v.join(", ")
    }
}

/// `rdma_listen`: accept CONNECT_REQUESTs on the bound address. The backlog is taken as the
/// kernel's (any value); REQs a listener has not read yet wait in its channel socket, and those
/// that find it full in their requester's outbox (outbox.rs), so none is rejected for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(cid: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    crate::wire::start();
    if id.st.lock().expect("id").listen.is_none() {
        // As librdmacm: listening unbound binds to any address and a picked port.
        // SAFETY: all-zero sockaddr_in with the family set is "0.0.0.0:0".
        let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        s.sin_family = libc::AF_INET as libc::sa_family_t;
        // SAFETY: cid is live; s is a sockaddr_in.
        let r = unsafe { rdma_bind_addr(cid, (&mut s as *mut libc::sockaddr_in).cast()) };
        if r != 0 {
            return r;
        }
    }
    0
}

/// `rdma_resolve_addr` (sync.rs exports it): pick the local soft port (the one of `src`, else
/// the first whose address is not `dst`'s) and queue ADDR_RESOLVED; ADDR_ERROR (-EHOSTUNREACH)
/// for an address of no softverbs port.
pub unsafe fn resolve_addr(
    cid: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let mut local6 = None;
    let (v6, d) = match crate::v6::read(dst, "rdma_resolve_addr") {
        Ok(crate::v6::Addr6::Port(ip, port, scope)) => (Some(scope), Some((ip, port))),
        Ok(crate::v6::Addr6::Local { ip, port, scope, addr, index }) => {
            local6 = Some((addr, index));
            (Some(scope), Some((ip, port)))
        }
        Ok(crate::v6::Addr6::Remote(a, port, scope)) => {
            // Another host over IPv6 (wire6.rs): spoken to from the interface's address that
            // reaches it, through the gateway, by a stand-in IPv4 address inside the CM.
            let Some(from) = crate::wire6::source_for(&a) else {
                eprintln!("librdmacm (softverbs): rdma_resolve_addr: no IPv6 address of the interface reaches {} (its addresses: {})", std::net::Ipv6Addr::from(a), crate::wire6::list());
                post_local(id, ev::ADDR_ERROR, -libc::EHOSTUNREACH);
                return 0;
            };
            local6 = Some(crate::wire6::local(id.token).unwrap_or(from));
            (Some(scope), Some((crate::wire6::alias(a, scope), port)))
        }
        Ok(crate::v6::Addr6::Foreign(text)) => {
            eprintln!("librdmacm (softverbs): {text} is the address of no softverbs port (a port's IPv6 address is its link-local GID, fe80::<EUI-64>, with a scope id; here: {})", port_list6());
            post_local(id, ev::ADDR_ERROR, -libc::EHOSTUNREACH);
            return 0;
        }
        Ok(crate::v6::Addr6::NotV6) => (None, read_sockaddr(dst)),
        Err(e) => return fail(e),
    };
    let Some(d) = d else {
        eprintln!("librdmacm (softverbs): rdma_resolve_addr: the destination must be an IPv4 or IPv6 address");
        return fail(libc::EAFNOSUPPORT);
    };
    // The any address resolves as loopback, as the kernel's CM does (cma_resolve_loopback):
    // libfabric's verbs provider resolves 0.0.0.0 while it builds its fi_info.
    let d = if d.0 == [0; 4] { ([127, 0, 0, 1], d.1) } else { d };
    let s = match crate::v6::read(src, "rdma_resolve_addr") {
        Ok(crate::v6::Addr6::Port(ip, _, _)) => Some(ip),
        Ok(crate::v6::Addr6::Local { ip, addr, index, .. }) => {
            local6 = Some((addr, index));
            Some(ip)
        }
        Ok(crate::v6::Addr6::Remote(a, ..)) => {
            eprintln!("librdmacm (softverbs): rdma_resolve_addr: source {} is no address of this host's interface ({})", std::net::Ipv6Addr::from(a), crate::wire6::list());
            return fail(libc::EADDRNOTAVAIL);
        }
        Ok(crate::v6::Addr6::Foreign(text)) => {
            eprintln!("librdmacm (softverbs): rdma_resolve_addr: source {text} is the address of no softverbs port here ({})", port_list6());
            return fail(libc::EADDRNOTAVAIL);
        }
        Ok(crate::v6::Addr6::NotV6) => read_sockaddr(src).map(|s| s.0),
        Err(e) => return fail(e),
    }
    .filter(|ip| *ip != [0; 4] && !is_loopback(*ip));
    if let Some(scope) = v6 {
        crate::v6::mark(id.token, scope);
    }
    if let Some((addr, index)) = local6 {
        crate::wire6::set_local(id.token, addr, index);
    }
    let dev = match s {
        Some(ip) => match dev_of_ip(ip) {
            Some(dv) => dv,
            None => {
                eprintln!("librdmacm (softverbs): rdma_resolve_addr: source {}.{}.{}.{} is the address of no softverbs port here (ports: {})", ip[0], ip[1], ip[2], ip[3], port_list());
                return fail(libc::EADDRNOTAVAIL);
            }
        },
        None => match devices().iter().find(|x| x.ip != d.0).or(devices().first()) {
            Some(dv) => *dv,
            None => {
                eprintln!("librdmacm (softverbs): rdma_resolve_addr: no softverbs device (is SOFTVERBS_FABRIC set up?)");
                return fail(libc::ENODEV);
            }
        },
    };
    // On a network interface, any other address is another host's, reached by the CM's
    // MADs (wire.rs); the source is the interface address the device holds.
    let across = crate::wire::remote(d.0).is_some();
    if !across && !is_fabric_ip(d.0) && !is_loopback(d.0) && d.0[0] & 0xF0 != 0xE0 {
        eprintln!(
            "librdmacm (softverbs): {}.{}.{}.{} is the address of no softverbs port (softverbs ports are 10.0.x.y, and 127.0.0.1 reaches any listener; here: {})",
            d.0[0], d.0[1], d.0[2], d.0[3], port_list()
        );
        post_local(id, ev::ADDR_ERROR, -libc::EHOSTUNREACH);
        return 0;
    }
    let mut st = id.st.lock().expect("id");
    if st.src.1 == 0 {
        st.src = (dev.ip, ephemeral_port());
    }
    st.src.0 = dev.ip;
    st.dst = d;
    st.state.move_to(CmState::AddrResolved);
    let src = st.src;
    drop(st);
    // SAFETY: the caller's live id.
    unsafe {
        (*cid).verbs = dev.ctx;
        (*cid).port_num = 1;
    }
    crate::cq::give_pd(cid);
    set_route(id, src, Some(d));
    post_local(id, ev::ADDR_RESOLVED, 0);
    0
}

/// `rdma_resolve_route` (sync.rs exports it): the fabric has one route to every port:
/// ROUTE_RESOLVED.
pub unsafe fn resolve_route(cid: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let mut st = id.st.lock().expect("id");
    if !st.state.has_addr() {
        eprintln!("librdmacm (softverbs): rdma_resolve_route before rdma_resolve_addr");
        return fail(libc::EINVAL);
    }
    st.state.move_to(CmState::RouteResolved);
    drop(st);
    post_local(id, ev::ROUTE_RESOLVED, 0);
    0
}

/// `rdma_event_str`: the event's name as librdmacm spells it.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static CStr = match event {
        0 => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        1 => c"RDMA_CM_EVENT_ADDR_ERROR",
        2 => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        3 => c"RDMA_CM_EVENT_ROUTE_ERROR",
        4 => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        5 => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        6 => c"RDMA_CM_EVENT_CONNECT_ERROR",
        7 => c"RDMA_CM_EVENT_UNREACHABLE",
        8 => c"RDMA_CM_EVENT_REJECTED",
        9 => c"RDMA_CM_EVENT_ESTABLISHED",
        10 => c"RDMA_CM_EVENT_DISCONNECTED",
        11 => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        12 => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        13 => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        14 => c"RDMA_CM_EVENT_ADDR_CHANGE",
        15 => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

/// The port of a route address field (network order, as `rdma_get_src_port` returns it).
fn port_of(field: &[u8; 128]) -> u16 {
    u16::from_ne_bytes([field[2], field[3]])
}

/// `rdma_get_src_port`: the local port, in network byte order.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(cid: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's id.
    id_ref(cid).map_or(0, |_| port_of(unsafe { &(*cid).route.addr.src }))
}

/// `rdma_get_dst_port`: the remote port, in network byte order.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(cid: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's id.
    id_ref(cid).map_or(0, |_| port_of(unsafe { &(*cid).route.addr.dst }))
}

/// `rdma_set_option`: `RDMA_OPTION_ID_ACK_TIMEOUT` (a `u8`) is the local ACK timeout the CM
/// gives the id's QP at RTS (`rdma_init_qp_attr` too), as the kernel's CM; the other options
/// (type of service, reuse-address, IPv6 only, an IB path) are accepted and ignored: the soft
/// fabric has one service level and no address reuse wait.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    cid: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT {
        if optval.is_null() || optlen != 1 {
            eprintln!("librdmacm (softverbs): rdma_set_option: RDMA_OPTION_ID_ACK_TIMEOUT takes a u8 (optlen 1, here {optlen})");
            return fail(libc::EINVAL);
        }
        // SAFETY: the caller's one byte.
        let t = unsafe { *optval.cast::<u8>() };
        id.st.lock().expect("id").ack_timeout = Some(t);
    }
    0
}

/// An `rdma_addrinfo` with room for its addresses.
#[repr(C)]
struct AiBox {
    c: rdma_addrinfo,
    src: [u8; 128],
    dst: [u8; 128],
}

/// `rdma_getaddrinfo`: `getaddrinfo` for IPv4; with `RAI_PASSIVE` the address is the source
/// (to bind), else the destination (to resolve), with the hints' source address if they give one.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: hints is NULL or the caller's.
    let h = unsafe { hints.as_ref() };
    let hint_src = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0);
    let hint_dst = h.filter(|h| !h.ai_dst_addr.is_null() && h.ai_dst_len > 0);
    if res.is_null()
        || (node.is_null() && service.is_null() && hint_src.is_none() && hint_dst.is_none())
    {
        return fail(libc::EINVAL);
    }
    let passive = h.is_some_and(|h| h.ai_flags & RAI_PASSIVE != 0);
    if node.is_null() && service.is_null() {
        // Nothing to look up: the hints' addresses as they are (as librdmacm; pyverbs'
        // AddrInfo(src=) of a multicast group for rdma_join_multicast, libfabric's verbs
        // provider with the peer's address in ai_dst_addr).
        // SAFETY: all-zero is a valid AiBox.
        let mut b: Box<AiBox> = Box::new(unsafe { std::mem::zeroed() });
        let h = hint_src.or(hint_dst).expect("checked above");
        b.c.ai_flags = h.ai_flags;
        b.c.ai_qp_type = if h.ai_qp_type != 0 { h.ai_qp_type } else { 2 };
        b.c.ai_port_space = if h.ai_port_space != 0 { h.ai_port_space } else { RDMA_PS_TCP };
        if hint_src.is_some() {
            copy_src(&mut b, h);
        }
        if hint_dst.is_some() {
            let n = (h.ai_dst_len as usize).min(b.dst.len());
            // SAFETY: the hints' address of ai_dst_len bytes (at most our buffer's).
            let from = unsafe { std::slice::from_raw_parts(h.ai_dst_addr.cast::<u8>(), n) };
            b.dst[..n].copy_from_slice(from);
            b.c.ai_dst_len = n as u32;
            b.c.ai_dst_addr = b.dst.as_mut_ptr().cast();
        }
        let first = if hint_src.is_some() { h.ai_src_addr } else { h.ai_dst_addr };
        // SAFETY: an address the hints gave starts with its family.
        b.c.ai_family = c_int::from(unsafe { (*first).sa_family });
        // SAFETY: res is the caller's out pointer.
        unsafe { *res = Box::into_raw(b).cast() };
        return 0;
    }
    // SAFETY: all-zero addrinfo is valid hints.
    let mut sh: libc::addrinfo = unsafe { std::mem::zeroed() };
    // IPv4 unless IPv6 is asked for, or the node is an IPv6 literal (`fe80::...%lo`: v6.rs).
    // SAFETY: node is NULL or the caller's C string.
    let literal6 = !node.is_null() && unsafe { CStr::from_ptr(node) }.to_bytes().contains(&b':');
    let want6 = literal6 || h.is_some_and(|h| h.ai_family == libc::AF_INET6);
    sh.ai_family = if want6 { libc::AF_INET6 } else { libc::AF_INET };
    sh.ai_flags = if passive { libc::AI_PASSIVE } else { 0 };
    let mut out: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: node/service are C strings or NULL; out is ours.
    let r = unsafe { libc::getaddrinfo(node, service, &sh, &mut out) };
    if r != 0 || out.is_null() {
        return fail(libc::ENOENT);
    }
    // SAFETY: getaddrinfo's first result.
    let found = read_sockaddr(unsafe { (*out).ai_addr });
    // An IPv6 address (not IPv4-mapped) is kept as it came, with its scope id: 28 bytes.
    let mut six = [0u8; 128];
    let n6 = size_of::<libc::sockaddr_in6>();
    // SAFETY: getaddrinfo's first result: an AF_INET6 one is a sockaddr_in6 of n6 bytes.
    let is6 = unsafe { (*out).ai_family == libc::AF_INET6 } && {
        // SAFETY: as above.
        six[..n6].copy_from_slice(unsafe {
            std::slice::from_raw_parts((*out).ai_addr.cast::<u8>(), n6)
        });
        six[8..18].iter().any(|&b| b != 0) || six[18..20] != [0xff, 0xff]
    };
    // SAFETY: from getaddrinfo.
    unsafe { libc::freeaddrinfo(out) };
    let Some((ip, port)) = found.or(is6.then_some(([0; 4], 0))) else {
        return fail(libc::ENOENT);
    };
    // SAFETY: all-zero is a valid AiBox.
    let mut b: Box<AiBox> = Box::new(unsafe { std::mem::zeroed() });
    b.c.ai_family = if is6 { libc::AF_INET6 } else { libc::AF_INET };
    b.c.ai_qp_type = h.map_or(2, |h| if h.ai_qp_type != 0 { h.ai_qp_type } else { 2 });
    b.c.ai_port_space =
        h.map_or(RDMA_PS_TCP, |h| if h.ai_port_space != 0 { h.ai_port_space } else { RDMA_PS_TCP });
    b.c.ai_flags = h.map_or(0, |h| h.ai_flags);
    let (field, len) = if passive {
        b.c.ai_src_addr = b.src.as_mut_ptr().cast();
        (&mut b.src, &mut b.c.ai_src_len)
    } else {
        b.c.ai_dst_addr = b.dst.as_mut_ptr().cast();
        (&mut b.dst, &mut b.c.ai_dst_len)
    };
    if is6 {
        *field = six;
        *len = n6 as u32;
    } else {
        write_sockaddr(field, ip, port);
        *len = 16;
    }
    // An active lookup keeps the source address the hints give (librdmacm copies it: pyverbs'
    // AddrInfo(src=, dst=) binds with it).
    if let Some(h) = hint_src.filter(|_| !passive) {
        copy_src(&mut b, h);
    }
    // SAFETY: res is the caller's out pointer.
    unsafe { *res = Box::into_raw(b).cast() };
    0
}

/// Copy the source address of hints `h` (non-NULL, `ai_src_len` bytes) into `b`.
fn copy_src(b: &mut AiBox, h: &rdma_addrinfo) {
    let n = (h.ai_src_len as usize).min(b.src.len());
    // SAFETY: the hints' address of ai_src_len bytes (at most our buffer's).
    let from = unsafe { std::slice::from_raw_parts(h.ai_src_addr.cast::<u8>(), n) };
    b.src[..n].copy_from_slice(from);
    b.c.ai_src_len = n as u32;
    b.c.ai_src_addr = b.src.as_mut_ptr().cast();
}

/// `rdma_freeaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: made by rdma_getaddrinfo.
        let b = unsafe { Box::from_raw(p.cast::<AiBox>()) };
        p = b.c.ai_next;
    }
}
