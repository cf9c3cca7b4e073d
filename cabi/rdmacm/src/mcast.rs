//! UD multicast through the CM: `rdma_join_multicast`, `rdma_join_multicast_ex` and
//! `rdma_leave_multicast`, as librdmacm does them over rxe: a join attaches the id's QP (if it
//! has one, and unless it joins as a send-only member) to the group's GID
//! (`ibv_attach_mcast`, through the C ABI like librdmacm's `ucma_process_join`) and queues
//! RDMA_CM_EVENT_MULTICAST_JOIN, whose `param.ud` holds the group's address handle
//! attributes, QP number 0xFFFFFF and the Q_Key the kernel's CM gives a UDP id's groups
//! (`RDMA_UDP_QKEY`); a leave detaches it. Only IPv4 groups (`224.0.0.0/4`, or their
//! IPv4-mapped IPv6 form): the soft fabric routes datagrams by IPv4 address.
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use crate::cm_abi::*;
use crate::state::*;
use softverbs_cabi_abi::{ibv_gid, ibv_qp};

unsafe extern "C" {
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

/// `RDMA_CM_EVENT_MULTICAST_JOIN`.
pub const MULTICAST_JOIN: i32 = 12;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct JoinAttrEx {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}
/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`, `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`.
const ATTR_ADDRESS: u32 = 1;
const ATTR_JOIN_FLAGS: u32 = 2;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER`, `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`.
const FULLMEMBER: u32 = 0;
const SENDONLY_FULLMEMBER: u32 = 1;

/// One group an id joined: its IPv4 address and the QP it attached (NULL for a send-only
/// member or an id without a QP then).
struct Joined {
    group: [u8; 4],
    qp: usize,
}

/// The groups each id (by token) joined.
fn joined() -> &'static Mutex<HashMap<u64, Vec<Joined>>> {
    static J: OnceLock<Mutex<HashMap<u64, Vec<Joined>>>> = OnceLock::new();
    J.get_or_init(Default::default)
}

fn is_multicast(ip: [u8; 4]) -> bool {
    ip[0] & 0xF0 == 0xE0
}

/// `rdma_join_multicast` (exported by sync.rs, which waits for a synchronous id's event):
/// joins the group `addr` as a full member; `context` comes back as the event's
/// `param.ud.private_data`.
pub fn join_full(cid: *mut rdma_cm_id, addr: *mut libc::sockaddr, context: *mut c_void) -> c_int {
    join(cid, addr, FULLMEMBER, context)
}

/// `rdma_join_multicast_ex` (exported by sync.rs): as [`join_full`], with the join flags of
/// `attr` (a send-only full member's QP is not attached: it sends to the group, receives
/// nothing).
///
/// # Safety
/// `attr` is NULL or the caller's `struct rdma_cm_join_mc_attr_ex`.
pub unsafe fn join_ex(cid: *mut rdma_cm_id, attr: *mut JoinAttrEx, context: *mut c_void) -> c_int {
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct.
    let a = unsafe { &*attr };
    if a.comp_mask >= ATTR_ADDRESS << 2 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & ATTR_ADDRESS == 0
        || a.comp_mask & ATTR_JOIN_FLAGS == 0
        || a.join_flags > SENDONLY_FULLMEMBER
    {
        return fail(libc::EINVAL);
    }
    join(cid, a.addr, a.join_flags, context)
}

fn join(
    cid: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    flags: u32,
    context: *mut c_void,
) -> c_int {
    const W: &str = "librdmacm (softverbs): rdma_join_multicast";
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if !is_ud(id) || id.c.verbs.is_null() {
        eprintln!("{W}: the id must be a UD id (RDMA_PS_UDP, RDMA_PS_IPOIB) bound to a device (rdma_bind_addr or rdma_resolve_addr)");
        return fail(libc::EINVAL);
    }
    let Some((group, _)) = read_sockaddr(addr) else {
        eprintln!("{W}: only IPv4 groups (224.0.0.0/4) are supported: the soft fabric routes by IPv4 address");
        return fail(libc::EOPNOTSUPP);
    };
    if !is_multicast(group) {
        eprintln!(
            "{W}: {}.{}.{}.{} is not a multicast address",
            group[0], group[1], group[2], group[3]
        );
        return fail(libc::EINVAL);
    }
    let mut all = joined().lock().expect("joined");
    let mine = all.entry(id.token).or_default();
    if mine.iter().any(|j| j.group == group) {
        return fail(libc::EADDRINUSE);
    }
    let gid = ibv_gid { raw: gid_of(group) };
    let qp = if flags == SENDONLY_FULLMEMBER { std::ptr::null_mut() } else { id.c.qp };
    // SAFETY: the id's QP, made by rdma_create_qp through the same libibverbs.
    if !qp.is_null() && unsafe { ibv_attach_mcast(qp, &gid, 0) } != 0 {
        return -1;
    }
    mine.push(Joined { group, qp: qp as usize });
    drop(all);
    let ch = channel_of(id);
    let mut m = Msg::new(kind::JOIN, id.token);
    m.event = MULTICAST_JOIN;
    m.dst_ip = group;
    m.from = context as u64;
    m.qpn = 0x00FF_FFFF;
    m.qkey = RDMA_UDP_QKEY;
    send(ch, &ch.path, &m);
    0
}

/// `rdma_leave_multicast`: leaves the group `addr` (detaching the QP it attached);
/// `EADDRNOTAVAIL` for a group the id did not join.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    cid: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let Some((group, _)) = read_sockaddr(addr) else { return fail(libc::EADDRNOTAVAIL) };
    let mut all = joined().lock().expect("joined");
    let mine = all.entry(id.token).or_default();
    let Some(at) = mine.iter().position(|j| j.group == group) else {
        return fail(libc::EADDRNOTAVAIL);
    };
    let j = mine.remove(at);
    // The QP it attached, if it is still the id's (rdma_destroy_qp detached it already).
    if j.qp != 0 && j.qp == id.c.qp as usize {
        let gid = ibv_gid { raw: gid_of(group) };
        // SAFETY: the id's live QP.
        unsafe { ibv_detach_mcast(id.c.qp, &gid, 0) };
    }
    0
}

/// The id `token` is destroyed: it is in no group any more (its QP, destroyed first, was
/// detached from them by the verbs).
pub fn forget(token: u64) {
    joined().lock().expect("joined").remove(&token);
}
