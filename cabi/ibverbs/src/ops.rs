//! The context and its ops table, on top of every room (as rdma-core's rxe.c ends with
//! `rxe_ctx_ops` and `rxe_alloc_context`): `ibv_open_device` fills the `ibv_context_ops` and
//! the `verbs_context` slots with the rooms' entry points; `ibv_close_device` undoes it.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};

use softverbs_cabi_abi::*;

use crate::device::{dev_of, query_device_ex, query_port_ex};
use crate::object::{ctx_of, Ctx, Magic};
use crate::{cq_ex, mw, qp, refuse_null, soft, srq_ah, verbs};

/// `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(d) = dev_of(dev) else {
        return refuse_null("ibv_open_device", libc::EINVAL, "not a listed device");
    };
    let soft = match soft() {
        Ok(s) => s,
        Err(e) => return refuse_null("ibv_open_device", e.errno.code(), &e.message),
    };
    let ctx = match soft.open(&d.name) {
        Ok(c) => c,
        Err(e) => return refuse_null("ibv_open_device", e.errno.code(), &e.message),
    };
    let mut ops = [std::ptr::null::<c_void>(); 39];
    ops[vslot::QUERY_PORT] = query_port_ex as *const c_void;
    ops[vslot::QUERY_DEVICE_EX] = query_device_ex as *const c_void;
    ops[vslot::CREATE_QP_EX] = qp::create_qp_ex as *const c_void;
    ops[vslot::CREATE_CQ_EX] = cq_ex::create_cq_ex as *const c_void;
    ops[vslot::ADVISE_MR] = verbs::advise_mr as *const c_void;
    // SAFETY: ibv_context_ops is all pointers; all zeroes (NULL) is valid.
    let mut cops: ibv_context_ops = unsafe { std::mem::zeroed() };
    cops.poll_cq = Some(verbs::poll_cq);
    cops.req_notify_cq = Some(verbs::req_notify_cq);
    cops.post_srq_recv = Some(srq_ah::post_srq_recv);
    cops.post_send = Some(qp::post_send);
    cops.post_recv = Some(qp::post_recv);
    cops.alloc_mw = mw::alloc_mw as *const c_void;
    cops.bind_mw = qp::bind_mw as *const c_void;
    cops.dealloc_mw = mw::dealloc_mw as *const c_void;
    // The async event fd: an eventfd the device signals once per event it queues, so the fd is
    // readable while `ibv_get_async_event` would not block.
    // SAFETY: plain syscall; semaphore mode makes one read take one event.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if async_fd < 0 {
        return refuse_null("ibv_open_device", libc::EMFILE, "no eventfd for the async events");
    }
    let signal = move || {
        let one = 1u64;
        // SAFETY: the fd stays open until the watcher is removed (ibv_close_device).
        unsafe { libc::write(async_fd, &one as *const u64 as *const c_void, 8) };
    };
    let watch = match soft.watch_async_events(&d.name, std::sync::Arc::new(signal)) {
        Ok(t) => t,
        Err(e) => {
            // SAFETY: our fd.
            unsafe { libc::close(async_fd) };
            return refuse_null("ibv_open_device", e.errno.code(), &e.message);
        }
    };
    // The command fd: a real character device's fd (`/dev/null`), so programs that `dup` or
    // `fstat` it as they would rxe's `/dev/infiniband/uverbsN` (pyverbs before
    // `ibv_import_device`) get a valid descriptor; nothing is ever written to it, and
    // `ibv_import_device` of it is `EOPNOTSUPP`, as rxe's. -1 if it cannot be opened.
    // SAFETY: a plain open of a constant path.
    let cmd_fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let b = Box::new(Ctx {
        v: verbs_context {
            ops,
            sz: size_of::<verbs_context>(),
            context: ibv_context {
                device: dev,
                ops: cops,
                cmd_fd,
                async_fd,
                num_comp_vectors: 1,
                mutex: pthread_mutex_t([0; 40]),
                abi_compat: usize::MAX as *mut c_void,
            },
        },
        magic: Magic::Context,
        ctx,
        name: d.name.clone(),
        watch,
    });
    let p = Box::into_raw(b);
    // SAFETY: p is a live box.
    unsafe { &mut (*p).v.context }
}

/// `ibv_close_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(c: *mut ibv_context) -> c_int {
    if ctx_of("ibv_close_device", c).is_none() {
        return -1;
    }
    // SAFETY: ctx_of checked this is a live Ctx made by Box::into_raw.
    let p = unsafe { (c as *mut u8).sub(offset_of!(verbs_context, context)) as *mut Ctx };
    // SAFETY: as above; the watcher goes before its fd, the magic before the memory.
    unsafe {
        (*p).magic = Magic::Dead;
        if let Ok(soft) = soft() {
            soft.unwatch_async_events(&(*p).name, (*p).watch);
        }
        libc::close((*p).v.context.async_fd);
        if (*p).v.context.cmd_fd >= 0 {
            libc::close((*p).v.context.cmd_fd);
        }
        drop(Box::from_raw(p));
    }
    0
}
