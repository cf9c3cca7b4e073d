//! Endpoints: `rdma_create_ep`, `rdma_destroy_ep`, `rdma_get_request`, `rdma_create_srq` and
//! `rdma_destroy_srq` over synchronous ids (sync.rs), as rdma-core's librdmacm/cma.c does.
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use crate::cm_abi::*;
use crate::conn::{rdma_create_qp, rdma_destroy_qp};
use crate::cq::{destroy_cqs, give_pd, Raw};
use crate::events::rdma_ack_cm_event;
use crate::ids::rdma_bind_addr;
use crate::state::*;
use crate::sync::{self, rdma_create_id, rdma_destroy_id, rdma_resolve_addr, rdma_resolve_route};
use softverbs_cabi_abi::{ibv_pd, ibv_qp_init_attr, ibv_srq, ibv_srq_init_attr};

unsafe extern "C" {
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
}

/// `IBV_QPT_XRC_RECV`: XRC is not modelled.
const XRC_RECV: c_int = verbs_api::ibv::IBV_QPT_XRC_RECV as c_int;
/// `IBV_QPT_XRC_SEND`.
const XRC_SEND: c_int = verbs_api::ibv::IBV_QPT_XRC_SEND as c_int;

/// The QP attributes a passive endpoint gives the ids `rdma_get_request` returns, by token.
fn passive() -> &'static Mutex<HashMap<u64, Raw<ibv_qp_init_attr>>> {
    static P: OnceLock<Mutex<HashMap<u64, Raw<ibv_qp_init_attr>>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// Keep errno across clean-up calls that may set it.
fn keep_errno<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: the calling thread's errno slot.
    let e = unsafe { *libc::__errno_location() };
    let r = f();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    r
}

/// `rdma_create_ep`: a synchronous id for `res` (from `rdma_getaddrinfo`). Passive
/// (`RAI_PASSIVE`): bound to the source address, keeping `pd` and `qp_init_attr` for the ids
/// `rdma_get_request` returns. Active: the address and route resolved (waiting for each) and,
/// with `qp_init_attr`, a QP made (with CQs of its own when the attributes name none).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: NULL or the caller's addrinfo.
    let Some(r) = (unsafe { res.as_ref() }) else {
        eprintln!(
            "librdmacm (softverbs): rdma_create_ep needs the rdma_addrinfo of rdma_getaddrinfo"
        );
        return fail(libc::EINVAL);
    };
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    if r.ai_qp_type == XRC_SEND || r.ai_qp_type == XRC_RECV {
        eprintln!("librdmacm (softverbs): rdma_create_ep: XRC QPs are not supported");
        return fail(libc::EOPNOTSUPP);
    }
    let mut cid = std::ptr::null_mut();
    // SAFETY: a NULL channel makes a synchronous id.
    if unsafe {
        rdma_create_id(std::ptr::null_mut(), &mut cid, std::ptr::null_mut(), r.ai_port_space)
    } != 0
    {
        return -1;
    }
    if r.ai_qp_type != 0 {
        // SAFETY: the id just made.
        unsafe { (*cid).qp_type = r.ai_qp_type };
    }
    // SAFETY: the id just made; the caller's attributes.
    let ret = unsafe { setup_ep(cid, r, pd, qp_init_attr) };
    if ret != 0 {
        // SAFETY: the id just made.
        keep_errno(|| unsafe { rdma_destroy_ep(cid) });
        return ret;
    }
    // SAFETY: the caller's out pointer.
    unsafe { *out = cid };
    0
}

/// The passive or active half of `rdma_create_ep`.
unsafe fn setup_ep(
    cid: *mut rdma_cm_id,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY (whole body): cid is the live id just made; the other pointers are the caller's.
    unsafe {
        if r.ai_flags & RAI_PASSIVE != 0 {
            if rdma_bind_addr(cid, r.ai_src_addr) != 0 {
                return -1;
            }
            if !pd.is_null() {
                (*cid).pd = pd;
            }
            if !qp_init_attr.is_null() {
                // Plain C data: a copy the listener keeps.
                let mut a = std::ptr::read(qp_init_attr);
                a.qp_type = (*cid).qp_type;
                let tok = id_ref(cid).map_or(0, |i| i.token);
                passive().lock().expect("passive").insert(tok, Raw(a));
            }
            return 0;
        }
        if rdma_resolve_addr(cid, r.ai_src_addr, r.ai_dst_addr, 2000) != 0
            || rdma_resolve_route(cid, 2000) != 0
        {
            return -1;
        }
        if let Some(a) = qp_init_attr.as_mut() {
            a.qp_type = (*cid).qp_type;
            return rdma_create_qp(cid, pd, a);
        }
        0
    }
}

/// `rdma_destroy_ep`: the id's QP, SRQ (with the CQs the CM made) and the id.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(cid: *mut rdma_cm_id) {
    let Some(id) = id_ref(cid) else { return };
    passive().lock().expect("passive").remove(&id.token);
    // SAFETY: the caller's live id.
    unsafe {
        if !(*cid).qp.is_null() {
            rdma_destroy_qp(cid);
        }
        if !(*cid).srq.is_null() {
            rdma_destroy_srq(cid);
        }
        rdma_destroy_id(cid);
    }
}

/// `rdma_get_request`: wait for the next connection request on a synchronous listener and
/// return its new (synchronous) id, with a QP made from the listener's `rdma_create_ep`
/// attributes; the CONNECT_REQUEST event stays in the new id's `event`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    let Some(l) = id_ref(listen) else { return fail(libc::EINVAL) };
    if !sync::is_sync(l) || out.is_null() {
        eprintln!("librdmacm (softverbs): rdma_get_request needs a listener made without an event channel (rdma_create_ep, or rdma_create_id with NULL)");
        return fail(libc::EINVAL);
    }
    // SAFETY: the listener's own field.
    unsafe {
        if !(*listen).event.is_null() {
            rdma_ack_cm_event((*listen).event);
            (*listen).event = std::ptr::null_mut();
        }
    }
    let e = match sync::next_event(channel_of(l), None) {
        Ok(e) => e,
        Err(errno) => return fail(errno),
    };
    // SAFETY: the event just got.
    let (kind, status, child) = unsafe { ((*e).event, (*e).status, (*e).id) };
    let err = if kind == ev::REJECTED {
        libc::ECONNREFUSED
    } else if status != 0 {
        status.abs()
    } else if kind != ev::CONNECT_REQUEST {
        libc::EINVAL
    } else {
        0
    };
    if err != 0 || sync::adopt(child) != 0 {
        // SAFETY: the listener's own field keeps the event, as librdmacm's.
        unsafe { (*listen).event = e };
        return if err != 0 { fail(err) } else { -1 };
    }
    give_pd(child);
    // SAFETY: plain C data, copied so that rdma_create_qp may fill it in.
    let attr =
        passive().lock().expect("passive").get(&l.token).map(|r| unsafe { std::ptr::read(&r.0) });
    if let Some(mut a) = attr {
        // SAFETY: the new id; the listener's PD (NULL: the new id's own).
        if unsafe { rdma_create_qp(child, (*listen).pd, &mut a) } != 0 {
            // SAFETY: as above.
            unsafe { (*listen).event = e };
            return -1;
        }
    }
    // SAFETY: the caller's out pointer; the new id's own field.
    unsafe {
        (*child).event = e;
        *out = child;
    }
    0
}

/// `rdma_create_srq`: an SRQ on the id's device (`pd`, or the id's own), which the QP that
/// `rdma_create_qp` makes next uses.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    cid: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    if id_ref(cid).is_none() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY (whole body): the caller's live id and attributes.
    unsafe {
        if (*cid).qp_type == XRC_RECV {
            eprintln!("librdmacm (softverbs): rdma_create_srq: XRC SRQs are not supported");
            return fail(libc::EOPNOTSUPP);
        }
        let pd = if pd.is_null() { (*cid).pd } else { pd };
        if pd.is_null() {
            eprintln!(
                "librdmacm (softverbs): rdma_create_srq needs a PD (bind or resolve the id first)"
            );
            return fail(libc::EINVAL);
        }
        let srq = ibv_create_srq(pd, attr);
        if srq.is_null() {
            return -1;
        }
        if (*cid).pd.is_null() {
            (*cid).pd = pd;
        }
        (*cid).srq = srq;
    }
    0
}

/// `rdma_destroy_srq`: the id's SRQ and the CQs the CM made for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(cid: *mut rdma_cm_id) {
    if id_ref(cid).is_none() {
        return;
    }
    // SAFETY: the caller's live id; its SRQ made by rdma_create_srq.
    unsafe {
        if !(*cid).srq.is_null() {
            ibv_destroy_srq((*cid).srq);
            (*cid).srq = std::ptr::null_mut();
        }
    }
    destroy_cqs(cid);
}
