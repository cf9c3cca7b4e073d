//! The verbs and CM calls rsockets makes, through the C ABI as a program would (softverbs'
//! libibverbs.so.1 and this library's own exports), and the data-path verbs that `verbs.h`
//! inlines (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`: a call
//! through the context's ops).
use std::ffi::{c_int, c_void};

use crate::cm_abi::*;
use softverbs_cabi_abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_mr, ibv_pd, ibv_qp, ibv_qp_init_attr, ibv_recv_wr,
    ibv_send_wr, ibv_wc,
};

unsafe extern "C" {
    pub fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        c: *mut ibv_context,
        cqe: c_int,
        ctx: *mut c_void,
        ch: *mut ibv_comp_channel,
        vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int)
        -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_get_cq_event(
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut ibv_cq, n: u32);

    pub fn rdma_create_event_channel() -> *mut rdma_event_channel;
    pub fn rdma_destroy_event_channel(ch: *mut rdma_event_channel);
    pub fn rdma_create_id(
        ch: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        ctx: *mut c_void,
        ps: c_int,
    ) -> c_int;
    pub fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int;
    pub fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    pub fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src: *mut libc::sockaddr,
        dst: *mut libc::sockaddr,
        ms: c_int,
    ) -> c_int;
    pub fn rdma_resolve_route(id: *mut rdma_cm_id, ms: c_int) -> c_int;
    pub fn rdma_connect(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int;
    pub fn rdma_accept(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int;
    pub fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int;
    pub fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_get_cm_event(ch: *mut rdma_event_channel, e: *mut *mut rdma_cm_event) -> c_int;
    pub fn rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int;
    pub fn rdma_migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int;
    pub fn rdma_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    pub fn rdma_destroy_qp(id: *mut rdma_cm_id);
}

/// `IBV_WR_RDMA_WRITE`, `IBV_WR_RDMA_WRITE_WITH_IMM`, `IBV_WR_SEND`.
pub const WR_WRITE: c_int = 0;
pub const WR_WRITE_IMM: c_int = 1;
pub const WR_SEND: c_int = 2;
/// `IBV_SEND_SIGNALED`, `IBV_SEND_INLINE`.
pub const SEND_SIGNALED: u32 = 2;
pub const SEND_INLINE: u32 = 8;
/// `IBV_WC_RECV`, `IBV_WC_RECV_RDMA_WITH_IMM`.
pub const WC_RECV: c_int = 128;
pub const WC_RECV_IMM: c_int = 129;
/// `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_RW: c_int = 1 | 2;

/// `ibv_post_send`.
///
/// # Safety
/// `qp` is a live QP; `wr` a valid chain.
pub unsafe fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: the QP's context and its ops, filled by softverbs' libibverbs.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, &mut bad),
            None => libc::ENOSYS,
        }
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: as post_send.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, wr, &mut bad),
            None => libc::ENOSYS,
        }
    }
}

/// `ibv_poll_cq`.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> c_int {
    // SAFETY: as post_send.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, wc.len() as c_int, wc.as_mut_ptr()),
            None => -1,
        }
    }
}

/// `ibv_req_notify_cq(cq, 0)`.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe fn req_notify(cq: *mut ibv_cq) -> c_int {
    // SAFETY: as post_send.
    unsafe {
        match (*(*cq).context).ops.req_notify_cq {
            Some(f) => f(cq, 0),
            None => libc::ENOSYS,
        }
    }
}

/// Whether `fd` is readable within `ms` (0: now; -1: no limit).
pub fn readable(fd: c_int, ms: c_int) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd of ours.
    unsafe { libc::poll(&mut p, 1, ms) > 0 && p.revents != 0 }
}

/// Set errno and return -1.
pub fn err(e: c_int) -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// The current errno.
pub fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

/// Make `fd` non-blocking (a channel rsockets polls itself, so reading it never sleeps).
pub fn set_nonblocking(fd: c_int) {
    // SAFETY: plain fcntl on a descriptor of ours.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
}

/// Read and acknowledge every event waiting on a (non-blocking) completion channel.
///
/// # Safety
/// `cc` is a live completion channel made non-blocking with [`set_nonblocking`].
pub unsafe fn drain_cq_events(cc: *mut ibv_comp_channel) {
    let (mut cq, mut ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the caller's channel; each event acknowledged on its CQ.
    while unsafe { ibv_get_cq_event(cc, &mut cq, &mut ctx) } == 0 {
        unsafe { ibv_ack_cq_events(cq, 1) };
    }
}

/// Releases what a connection's or a datagram socket's `new` made, after its QP: the MRs, the
/// CQ, the completion channel and the PD, in that order, each skipped when NULL (a `new` that
/// failed part-way).
///
/// # Safety
/// Each pointer is NULL or a live object of that kind that nothing else releases, and the QP
/// that used them is destroyed.
pub unsafe fn release(
    mrs: &[*mut ibv_mr],
    cq: *mut ibv_cq,
    cc: *mut ibv_comp_channel,
    pd: *mut ibv_pd,
) {
    // SAFETY: the caller's objects, each released once, users before what they use.
    unsafe {
        for &mr in mrs.iter().filter(|m| !m.is_null()) {
            ibv_dereg_mr(mr);
        }
        if !cq.is_null() {
            ibv_destroy_cq(cq);
        }
        if !cc.is_null() {
            ibv_destroy_comp_channel(cc);
        }
        if !pd.is_null() {
            ibv_dealloc_pd(pd);
        }
    }
}
