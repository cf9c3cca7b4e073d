//! An open libibverbs device (`struct ibv_context`): opening and closing it, and what its
//! queries and async event queue need. Its verbs (`impl ContextOps`) are in `verbs.rs`, above
//! the PDs and CQs they create, since each of those holds the context it came from.

use std::ffi::c_int;
use std::mem::{offset_of, size_of, MaybeUninit};
use std::sync::{Arc, Weak};

use rdma_sys::{
    ibv_close_device, ibv_context, ibv_device, ibv_open_device, ibv_port_attr, ibv_query_port,
    verbs_context,
};

use super::convert;
use super::object_id;
use super::sys::{self, Owned, RawAsyncEvent};
use crate::error::Result;
use crate::types::*;

/// An open device (`ibv_open_device`; closed with `ibv_close_device` when the last handle and
/// the last object created from it are gone).
pub struct HwContext {
    ctx: Owned<ibv_context>,
    name: String,
    me: Weak<HwContext>,
}

impl HwContext {
    /// `ibv_open_device`, and put the async event descriptor in non-blocking mode so that
    /// [`ContextOps::get_async_event`](crate::provider::ContextOps::get_async_event) can bound its wait with `poll(2)`.
    pub(crate) fn open(dev: *mut ibv_device, name: &str) -> Result<Arc<HwContext>> {
        sys::clear_errno();
        // SAFETY: `dev` is an entry of a live device list.
        let raw = unsafe { ibv_open_device(dev) };
        let ctx = sys::check_ptr(&format!("ibv_open_device({name})"), raw)?;
        let ctx = Arc::new_cyclic(|me| HwContext {
            ctx: Owned::new(ctx),
            name: name.to_string(),
            me: me.clone(),
        });
        // On failure `ctx` is dropped here, which closes the device.
        sys::set_nonblocking("ibv_open_device: async_fd", ctx.async_fd())?;
        Ok(ctx)
    }

    /// The `struct ibv_context *`, for FFI (for example rdma-cm). Valid while this object is.
    pub fn as_ptr(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    /// The device name it was opened by.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn arc(&self) -> Arc<HwContext> {
        self.me.upgrade().expect("a HwContext is only reachable through its Arc")
    }

    pub(super) fn async_fd(&self) -> c_int {
        // SAFETY: the context is open; `async_fd` is a plain field set by ibv_open_device.
        unsafe { (*self.ctx.as_ptr()).async_fd }
    }

    /// What the `ibv_query_port` macro of verbs.h does: the provider's full-size
    /// `verbs_context->query_port` when the context is extended and has one, else the exported
    /// compat symbol over a zeroed struct.
    ///
    /// rdma-sys' `___ibv_query_port` cannot be used: it tests `abi_compat` against `u32::MAX`
    /// where verbs.h means `UINTPTR_MAX`, so on 64-bit it always takes the compat path.
    pub(super) fn port_attr(&self, port_num: u8) -> Result<ibv_port_attr> {
        let ctx = self.ctx.as_ptr();
        // SAFETY: ibv_port_attr is plain integers; zero is valid and is what the compat path
        // relies on for the fields it does not fill.
        let mut attr: ibv_port_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        sys::clear_errno();
        // SAFETY: `vctx` is this context's live verbs_context (see verbs_context()).
        let query = self.verbs_context().and_then(|vctx| unsafe { (*vctx).query_port });
        let rc = match query {
            // SAFETY: the context is open; `attr` is writable and as long as we say.
            Some(q) => unsafe { q(ctx, port_num, &mut attr, size_of::<ibv_port_attr>()) },
            // SAFETY: the context is open; the compat struct is a prefix of ibv_port_attr.
            None => unsafe { ibv_query_port(ctx, port_num, (&raw mut attr).cast()) },
        };
        sys::check_rc(&format!("ibv_query_port(port {port_num})"), rc)?;
        Ok(attr)
    }

    /// `verbs_get_ctx` of verbs.h: the `struct verbs_context` around this context, if the
    /// provider made an extended one (`abi_compat == UINTPTR_MAX`) big enough to hold
    /// `query_port`.
    fn verbs_context(&self) -> Option<*mut verbs_context> {
        let ctx = self.ctx.as_ptr();
        // SAFETY: the context is open; `abi_compat` is a plain field.
        let abi_compat = unsafe { (*ctx).abi_compat };
        if abi_compat.addr() != usize::MAX {
            return None;
        }
        // The ibv_context is the last field of verbs_context, as in verbs.h's container_of.
        let vctx =
            ctx.wrapping_byte_sub(offset_of!(verbs_context, context)).cast::<verbs_context>();
        // SAFETY: an extended context is embedded in a verbs_context; `sz` says how much of
        // it (counted back from `context`) the provider allocated.
        let sz = unsafe { (*vctx).sz };
        let needed = size_of::<verbs_context>() - offset_of!(verbs_context, query_port);
        (sz >= needed).then_some(vctx)
    }

    /// Map one async event to the softverbs vocabulary (`None`: a kind softverbs cannot name).
    ///
    /// # Safety
    /// `ev` must be an event just returned by `ibv_get_async_event` and not yet acknowledged, so
    /// that the object it names is still alive.
    pub(super) unsafe fn convert_event(ev: &RawAsyncEvent) -> Option<AsyncEvent> {
        use AsyncEventType as T;
        let event_type = convert::event_type_from_ibv(ev.event_type)?;
        let element = match event_type {
            T::CqErr => {
                // SAFETY: for CQ events the union holds the CQ, alive until the ack (caller).
                let ctx = unsafe { (*ev.element.cq).cq_context };
                AsyncElement::Cq(object_id(ctx.addr()))
            }
            T::QpFatal
            | T::QpReqErr
            | T::QpAccessErr
            | T::CommEst
            | T::SqDrained
            | T::QpLastWqeReached => {
                // SAFETY: for QP events the union holds the QP, alive until the ack (caller).
                AsyncElement::Qp(unsafe { (*ev.element.qp).qp_num })
            }
            T::SrqLimitReached => {
                // SAFETY: for SRQ events the union holds the SRQ, alive until the ack (caller).
                let ctx = unsafe { (*ev.element.srq).srq_context };
                AsyncElement::Srq(object_id(ctx.addr()))
            }
            T::PortActive | T::PortErr => {
                // SAFETY: for port events the union holds the port number.
                let port = unsafe { ev.element.port_num };
                AsyncElement::Port(u8::try_from(port).unwrap_or(0))
            }
            T::DeviceFatal => AsyncElement::Device,
        };
        Some(AsyncEvent { event_type, element })
    }
}

impl Drop for HwContext {
    fn drop(&mut self) {
        // SAFETY: every object created from this context holds an Arc of it, so none is left;
        // the context is closed exactly once.
        unsafe { ibv_close_device(self.ctx.as_ptr()) };
    }
}
