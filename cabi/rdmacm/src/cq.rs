//! What librdmacm gives an id's verbs objects: the device's PD that every id on a device
//! carries (`id->pd`), and the CQs with completion channels `rdma_create_qp` makes when the
//! QP's attributes name none (`id->send_cq`, `id->recv_cq` and their channels, on which the
//! `rdma_verbs.h` helpers `rdma_get_send_comp` / `rdma_get_recv_comp` wait), destroyed with
//! the QP (rdma-core, librdmacm/cma.c: `ucma_create_cqs`, `ucma_destroy_cqs`).
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use crate::cm_abi::*;
use crate::state::*;
use softverbs_cabi_abi::{ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp_init_attr};

unsafe extern "C" {
    fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd;
    fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel;
    fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    fn ibv_create_cq(
        c: *mut ibv_context,
        cqe: c_int,
        ctx: *mut c_void,
        ch: *mut ibv_comp_channel,
        vector: c_int,
    ) -> *mut ibv_cq;
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
}

/// Raw verbs pointers kept in the tables below (the objects are softverbs' own, usable from
/// any thread).
#[derive(Clone, Copy)]
pub struct Raw<T>(pub T);
// SAFETY: pointers to softverbs verbs objects, which are thread-safe; the tables only hold them.
unsafe impl<T> Send for Raw<T> {}

/// The PD of each device (by context), allocated when an id first lands on it and kept for the
/// process, as librdmacm keeps one per device for its ids.
pub fn dev_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    static PDS: OnceLock<Mutex<HashMap<usize, Raw<*mut ibv_pd>>>> = OnceLock::new();
    let mut m = PDS.get_or_init(Default::default).lock().expect("pds");
    if let Some(p) = m.get(&(ctx as usize)) {
        return p.0;
    }
    // SAFETY: ctx is an open device of ours.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if !pd.is_null() {
        m.insert(ctx as usize, Raw(pd));
    }
    pd
}

/// Give an id that has a device but no PD the device's PD (librdmacm sets `id->pd` when an id
/// binds to a device, so `rdma_reg_msgs(id, ...)` works without an `ibv_alloc_pd`).
pub fn give_pd(cid: *mut rdma_cm_id) {
    // SAFETY: the caller's live id.
    unsafe {
        if (*cid).pd.is_null() && !(*cid).verbs.is_null() {
            (*cid).pd = dev_pd((*cid).verbs);
        }
    }
}

/// The CQs and channels the CM made for an id's QP (destroyed with it).
#[derive(Default, Clone, Copy)]
struct Made {
    send: Option<(Raw<*mut ibv_cq>, Raw<*mut ibv_comp_channel>)>,
    recv: Option<(Raw<*mut ibv_cq>, Raw<*mut ibv_comp_channel>)>,
}

/// CQs made by the CM, by id token.
fn made() -> &'static Mutex<HashMap<u64, Made>> {
    static M: OnceLock<Mutex<HashMap<u64, Made>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// A CQ of `n` entries with a completion channel of its own, whose context is the id.
fn cq_with_channel(cid: *mut rdma_cm_id, n: u32) -> Option<(*mut ibv_cq, *mut ibv_comp_channel)> {
    // SAFETY: the caller's live id with a device.
    let ctx = unsafe { (*cid).verbs };
    // SAFETY: ctx is an open device.
    let ch = unsafe { ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return None;
    }
    // SAFETY: as above; the channel just made.
    let cq = unsafe { ibv_create_cq(ctx, n as c_int, cid.cast(), ch, 0) };
    if cq.is_null() {
        // SAFETY: just made, unused.
        unsafe { ibv_destroy_comp_channel(ch) };
        return None;
    }
    Some((cq, ch))
}

/// Complete `attr` for `rdma_create_qp` as librdmacm does: a send and a receive CQ, each with
/// its completion channel, where the attributes name none (sized by the queue's work requests;
/// none for a queue of 0), and the id's SRQ if it has one. 0, or -1 with errno.
pub fn fill_qp_attr(cid: *mut rdma_cm_id, attr: &mut ibv_qp_init_attr) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if id.c.verbs.is_null() {
        eprintln!("librdmacm (softverbs): rdma_create_qp on an id with no device (bind or resolve an address first)");
        return fail(libc::EINVAL);
    }
    let mut m = Made::default();
    if attr.recv_cq.is_null() && attr.cap.max_recv_wr > 0 {
        let Some((cq, ch)) = cq_with_channel(cid, attr.cap.max_recv_wr) else { return -1 };
        m.recv = Some((Raw(cq), Raw(ch)));
        attr.recv_cq = cq;
    }
    if attr.send_cq.is_null() && attr.cap.max_send_wr > 0 {
        let Some((cq, ch)) = cq_with_channel(cid, attr.cap.max_send_wr) else {
            record(id, m);
            destroy_cqs(cid);
            return -1;
        };
        m.send = Some((Raw(cq), Raw(ch)));
        attr.send_cq = cq;
    }
    if attr.srq.is_null() {
        attr.srq = id.c.srq;
    }
    record(id, m);
    0
}

/// Keep what the CM made for `id` and show it in the id's CQ fields, as librdmacm does.
fn record(id: &Id, m: Made) {
    let c = &id.c as *const rdma_cm_id as *mut rdma_cm_id;
    // SAFETY: the live id's own fields.
    unsafe {
        if let Some((cq, ch)) = m.recv {
            (*c).recv_cq = cq.0;
            (*c).recv_cq_channel = ch.0;
        }
        if let Some((cq, ch)) = m.send {
            (*c).send_cq = cq.0;
            (*c).send_cq_channel = ch.0;
        }
    }
    if m.recv.is_some() || m.send.is_some() {
        made().lock().expect("made").insert(id.token, m);
    }
}

/// Destroy the CQs and channels the CM made for the id (those the program gave stay its own).
pub fn destroy_cqs(cid: *mut rdma_cm_id) {
    let Some(id) = id_ref(cid) else { return };
    let Some(m) = made().lock().expect("made").remove(&id.token) else { return };
    for (cq, ch) in [m.recv, m.send].into_iter().flatten() {
        // SAFETY: made by fill_qp_attr for this id; its QP is gone.
        unsafe {
            ibv_destroy_cq(cq.0);
            ibv_destroy_comp_channel(ch.0);
        }
    }
    // SAFETY: the live id's own fields.
    unsafe {
        if m.recv.is_some() {
            (*cid).recv_cq = std::ptr::null_mut();
            (*cid).recv_cq_channel = std::ptr::null_mut();
        }
        if m.send.is_some() {
            (*cid).send_cq = std::ptr::null_mut();
            (*cid).send_cq_channel = std::ptr::null_mut();
        }
    }
}
