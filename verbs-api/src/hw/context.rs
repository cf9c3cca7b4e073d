//! An open libibverbs device (`struct ibv_context`): queries, PDs, CQs, completion channels and
//! the async event queue.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of, MaybeUninit};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdma_sys::{
    ibv_ack_async_event, ibv_alloc_pd, ibv_close_device, ibv_context, ibv_device, ibv_device_attr,
    ibv_get_async_event, ibv_gid, ibv_open_device, ibv_port_attr, ibv_query_device, ibv_query_gid,
    ibv_query_port, verbs_context,
};

use super::convert::{self, device_attr_from_ibv, gid_from_ibv, port_attr_from_ibv};
use super::sys::{self, Owned, RawAsyncElement, RawAsyncEvent};
use super::{cq, object_id, HwPd};
use crate::error::{Errno, Error, Result};
use crate::handles::CompChannel;
use crate::provider::*;
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
    /// [`ContextOps::get_async_event`] can bound its wait with `poll(2)`.
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

    pub(crate) fn arc(&self) -> Arc<HwContext> {
        self.me.upgrade().expect("a HwContext is only reachable through its Arc")
    }

    fn async_fd(&self) -> c_int {
        // SAFETY: the context is open; `async_fd` is a plain field set by ibv_open_device.
        unsafe { (*self.ctx.as_ptr()).async_fd }
    }

    /// What the `ibv_query_port` macro of verbs.h does: the provider's full-size
    /// `verbs_context->query_port` when the context is extended and has one, else the exported
    /// compat symbol over a zeroed struct.
    ///
    /// rdma-sys' `___ibv_query_port` cannot be used: it tests `abi_compat` against `u32::MAX`
    /// where verbs.h means `UINTPTR_MAX`, so on 64-bit it always takes the compat path.
    fn port_attr(&self, port_num: u8) -> Result<ibv_port_attr> {
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
    unsafe fn convert_event(ev: &RawAsyncEvent) -> Option<AsyncEvent> {
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

impl ContextOps for HwContext {
    fn device_name(&self) -> String {
        self.name.clone()
    }

    /// `ibv_query_device`, plus `max_msg_sz` from port 1 (`ibv_query_port`).
    fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is integers and a char array; all-zero is valid.
        let mut attr: ibv_device_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        sys::clear_errno();
        // SAFETY: the context is open and `attr` is a valid, writable ibv_device_attr.
        let rc = unsafe { ibv_query_device(self.ctx.as_ptr(), &mut attr) };
        sys::check_rc("ibv_query_device", rc)?;
        let max_msg_sz =
            if attr.phys_port_cnt > 0 { self.port_attr(1).map_or(0, |p| p.max_msg_sz) } else { 0 };
        Ok(device_attr_from_ibv(&attr, max_msg_sz))
    }

    /// `ibv_query_port`.
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        Ok(port_attr_from_ibv(&self.port_attr(port_num)?))
    }

    /// `ibv_query_gid`. RoCE ports list several GIDs (RoCEv1/v2, IPv4/IPv6 addresses of the
    /// netdev); unused entries read as zero.
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        let call = format!("ibv_query_gid(port {port_num}, index {index})");
        let index = sys::to_c_int("ibv_query_gid: index", index)?;
        let mut gid = ibv_gid { raw: [0; 16] };
        sys::clear_errno();
        // SAFETY: the context is open and `gid` is a valid, writable ibv_gid.
        let rc = unsafe { ibv_query_gid(self.ctx.as_ptr(), port_num, index, &mut gid) };
        sys::check_rc(&call, rc)?;
        Ok(gid_from_ibv(&gid))
    }

    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        sys::clear_errno();
        // SAFETY: the context is open.
        let pd = unsafe { ibv_alloc_pd(self.ctx.as_ptr()) };
        let pd = sys::check_ptr("ibv_alloc_pd", pd)?;
        let pd: Arc<dyn PdOps> = HwPd::new(pd, self.arc());
        Ok(pd)
    }

    /// `ibv_create_comp_channel`.
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        let ch: Arc<dyn CompChannelOps> = cq::HwCompChannel::create(self.arc())?;
        Ok(ch)
    }

    /// `ibv_create_cq` with room for at least `cqe` completions.
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let cq: Arc<dyn CqOps> = cq::HwCq::create(self.arc(), cqe, channel, comp_vector)?;
        Ok(cq)
    }

    /// `poll(2)` on `async_fd` bounded by `timeout`, then `ibv_get_async_event` and at once
    /// `ibv_ack_async_event`. Events softverbs has no name for (path migration, LID/P_Key/SM/GID
    /// changes, client reregister, SRQ and WQ errors) are acknowledged and skipped.
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        let deadline = sys::deadline(timeout);
        loop {
            if !sys::wait_readable("ibv_get_async_event", self.async_fd(), deadline)? {
                return Err(Error::new(
                    Errno::TimedOut,
                    format!("ibv_get_async_event: no async event within {timeout:?}"),
                ));
            }
            let mut ev = RawAsyncEvent {
                element: RawAsyncElement { wq: std::ptr::null_mut::<c_void>() },
                event_type: 0,
            };
            sys::clear_errno();
            // SAFETY: the context is open; `ev` has the layout of struct ibv_async_event.
            let rc = unsafe { ibv_get_async_event(self.ctx.as_ptr(), ev.as_ffi()) };
            if rc != 0 {
                match sys::rc_errno(rc) {
                    // Another thread took the event, or a signal interrupted the read.
                    libc::EAGAIN | libc::EINTR => continue,
                    e => return Err(sys::call_error("ibv_get_async_event", e)),
                }
            }
            // SAFETY: `ev` was just returned and is acknowledged only below.
            let event = unsafe { Self::convert_event(&ev) };
            // SAFETY: acknowledges exactly the event ibv_get_async_event returned.
            unsafe { ibv_ack_async_event(ev.as_ffi()) };
            if let Some(event) = event {
                return Ok(event);
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
