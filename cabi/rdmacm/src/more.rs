//! The rest of rdma-core 44's `librdmacm.so.1` that programs bind at load (issue 30):
//! `rdma_get_devices` / `rdma_free_devices` (libfabric), `rdma_create_srq_ex`, the ECE calls
//! (pyverbs), `rdma_notify`, each as librdmacm answers over rxe. The rsocket API and UD
//! multicast are not here (docs/c.md, "What runs and what does not").
use std::ffi::c_int;

use crate::cm_abi::rdma_cm_id;
use crate::ep::rdma_create_srq;
use crate::state::*;
use softverbs_cabi_abi::{ibv_context, ibv_cq, ibv_pd, ibv_srq_attr, ibv_srq_init_attr};

/// `rdma_get_devices`: the soft devices' contexts, the ones the CM's ids use (opened once per
/// process and never closed, as librdmacm keeps its devices open), in a NULL-terminated array
/// that `rdma_free_devices` frees; `*num_devices` (if not NULL) gets their count.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let devs = devices();
    let size = (devs.len() + 1) * size_of::<*mut ibv_context>();
    // SAFETY: a fresh allocation the program gives back to rdma_free_devices (libc::free).
    let list = unsafe { libc::malloc(size) } as *mut *mut ibv_context;
    if list.is_null() {
        if !num_devices.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num_devices = 0 };
        }
        fail(libc::ENOMEM);
        return list;
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: within the len + 1 entries allocated.
        unsafe { *list.add(i) = d.ctx };
    }
    // SAFETY: the last entry.
    unsafe { *list.add(devs.len()) = std::ptr::null_mut() };
    if !num_devices.is_null() {
        // SAFETY: the caller's int.
        unsafe { *num_devices = devs.len() as c_int };
    }
    list
}

/// `rdma_free_devices`: frees the array `rdma_get_devices` gave (the contexts stay open).
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: NULL or the malloc'd array rdma_get_devices returned.
    unsafe { libc::free(list.cast()) };
}

/// `struct ibv_srq_init_attr_ex` (verbs.h).
#[repr(C)]
pub struct SrqInitAttrEx {
    pub srq_context: *mut std::ffi::c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut std::ffi::c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: [u32; 2],
}

/// `IBV_SRQ_INIT_ATTR_TYPE`, `_PD`.
const SRQ_TYPE: u32 = 1;
const SRQ_PD: u32 = 2;

/// `rdma_create_srq_ex`: as librdmacm, `IBV_SRQ_INIT_ATTR_TYPE` is required (`EINVAL`); a
/// basic SRQ is made as `rdma_create_srq` makes it (on `attr->pd` or the id's PD); XRC and
/// tag-matching SRQs are refused (`EOPNOTSUPP`), as rxe has neither.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    cid: *mut rdma_cm_id,
    attr: *mut SrqInitAttrEx,
) -> c_int {
    if id_ref(cid).is_none() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes, checked non-NULL.
    let a = unsafe { &mut *attr };
    if a.comp_mask & SRQ_TYPE == 0 {
        return fail(libc::EINVAL);
    }
    if a.srq_type != 0 {
        eprintln!("librdmacm (softverbs): rdma_create_srq_ex: only basic SRQs (no XRC or TM)");
        return fail(libc::EOPNOTSUPP);
    }
    let pd = if a.comp_mask & SRQ_PD != 0 { a.pd } else { std::ptr::null_mut() };
    let mut basic = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
    // SAFETY: a live id and our attributes.
    let rc = unsafe { rdma_create_srq(cid, pd, &mut basic) };
    a.attr = basic.attr;
    if rc == 0 {
        // SAFETY: the id is live.
        a.pd = unsafe { (*cid).pd };
        a.comp_mask |= SRQ_PD;
    }
    rc
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct Ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `rdma_set_local_ece`: the vendor id and options the next REQ or REP carries, for an id
/// without a QP (`EINVAL` otherwise, or for vendor id 0 or a comp_mask, as librdmacm).
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(cid: *mut rdma_cm_id, ece: *mut Ece) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    // SAFETY: NULL or the caller's ECE.
    let Some(e) = (unsafe { ece.as_ref() }) else { return fail(libc::EINVAL) };
    if !id.c.qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
        return fail(libc::EINVAL);
    }
    id.st.lock().expect("id").local_ece = [e.vendor_id, e.options];
    0
}

/// `rdma_get_remote_ece`: the ECE the peer's REQ or REP carried (zeros if none), for an id
/// without a QP (`EINVAL` otherwise, as librdmacm).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(cid: *mut rdma_cm_id, ece: *mut Ece) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if ece.is_null() || !id.c.qp.is_null() {
        return fail(libc::EINVAL);
    }
    let [vendor_id, options] = id.st.lock().expect("id").remote_ece;
    // SAFETY: the caller's ECE, checked non-NULL.
    unsafe { ece.write(Ece { vendor_id, options, comp_mask: 0 }) };
    0
}

/// `IBV_EVENT_COMM_EST`.
const COMM_EST: c_int = 4;
/// `IBV_EVENT_LID_CHANGE`.
const LID_CHANGE: c_int = 11;

/// `rdma_notify`: as the kernel's `ib_cm_notify` answers. `IBV_EVENT_COMM_EST` on a
/// connection being set up is taken (the RTU that softverbs' CM always sends establishes it,
/// so there is nothing more to do), on an established one `EISCONN`;
/// `IBV_EVENT_LID_CHANGE` on an id with a connection is taken; anything else, or an id with
/// no connection, is `EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(cid: *mut rdma_cm_id, event: c_int) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let st = id.st.lock().expect("id");
    if st.peer.is_none() {
        return fail(libc::EINVAL);
    }
    match (event, st.state) {
        (COMM_EST, CmState::Established) => fail(libc::EISCONN),
        (COMM_EST, CmState::Connect) | (LID_CHANGE, _) => 0,
        _ => fail(libc::EINVAL),
    }
}
