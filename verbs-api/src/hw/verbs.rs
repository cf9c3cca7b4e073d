//! The verbs of the two objects that make others: the context's (`impl ContextOps`: queries,
//! `ibv_alloc_pd`, `ibv_create_cq`, completion channels, async events) and the PD's
//! (`impl PdOps`: MRs, QPs, SRQs, AHs).
//!
//! They sit here, above the rooms of the objects they create, rather than beside `HwContext`
//! and `HwPd`, because every object holds the context or PD it came from (so it is destroyed
//! first): with the verbs beside their structs, `context.rs` and `cq.rs`, `pd.rs` and `qp.rs`
//! would each name the other.

use std::any::Any;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ibv_ack_async_event, ibv_alloc_pd, ibv_device_attr, ibv_get_async_event, ibv_gid,
    ibv_gid_entry, ibv_query_device, ibv_query_gid,
};

use super::context::HwContext;
use crate::ibv::IbvEnum;

use super::convert::{device_attr_from_ibv, gid_from_ibv, port_attr_from_ibv};
use super::cq::{HwCompChannel, HwCq};
use super::pd::HwPd;
use super::qp::{HwAh, HwQp, HwSrq};
use super::sys::{self, RawAsyncElement, RawAsyncEvent};
use crate::error::{Errno, Error, Result};
use crate::object::{CompChannel, MwOps, MwType, QpInitAttr};
use crate::provider::*;
use crate::types::*;

impl ContextOps for HwContext {
    fn device_name(&self) -> String {
        self.name().to_string()
    }

    /// `ibv_query_device`, plus `max_msg_sz` from port 1 (`ibv_query_port`).
    fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is integers and a char array; all-zero is valid.
        let mut attr: ibv_device_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        sys::clear_errno();
        // SAFETY: the context is open and `attr` is a valid, writable ibv_device_attr.
        let rc = unsafe { ibv_query_device(self.as_ptr(), &mut attr) };
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
        let rc = unsafe { ibv_query_gid(self.as_ptr(), port_num, index, &mut gid) };
        sys::check_rc(&call, rc)?;
        Ok(gid_from_ibv(&gid))
    }

    /// `ibv_query_gid_ex`: `ENODATA` for an empty entry, as the provider says.
    fn query_gid_entry(&self, port_num: u8, index: u32) -> Result<GidEntry> {
        let call = format!("ibv_query_gid_ex(port {port_num}, index {index})");
        // SAFETY: ibv_gid_entry is integers and the 16-byte GID union; all-zero is valid.
        let mut entry: ibv_gid_entry = unsafe { MaybeUninit::zeroed().assume_init() };
        sys::clear_errno();
        // SAFETY: the context is open; `entry` is a valid, writable ibv_gid_entry of the size
        // passed, and flags 0 asks for nothing beyond it.
        let rc = unsafe {
            sys::_ibv_query_gid_ex(
                self.as_ptr(),
                u32::from(port_num),
                index,
                &mut entry,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        sys::check_rc(&call, rc)?;
        Ok(GidEntry {
            gid: gid_from_ibv(&entry.gid),
            gid_index: entry.gid_index,
            port_num: entry.port_num,
            gid_type: GidType::from_ibv(entry.gid_type).ok_or_else(|| {
                Error::new(Errno::Io, format!("{call}: unknown gid_type {}", entry.gid_type))
            })?,
            ndev_ifindex: entry.ndev_ifindex,
        })
    }

    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        sys::clear_errno();
        // SAFETY: the context is open.
        let pd = unsafe { ibv_alloc_pd(self.as_ptr()) };
        let pd = sys::check_ptr("ibv_alloc_pd", pd)?;
        let pd: Arc<dyn PdOps> = HwPd::new(pd, self.arc());
        Ok(pd)
    }

    /// `ibv_create_comp_channel`.
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        let ch: Arc<dyn CompChannelOps> = HwCompChannel::create(self.arc())?;
        Ok(ch)
    }

    /// `ibv_create_cq` with room for at least `cqe` completions.
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let cq: Arc<dyn CqOps> = HwCq::create(self.arc(), cqe, channel, comp_vector)?;
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
            let rc = unsafe { ibv_get_async_event(self.as_ptr(), ev.as_ffi()) };
            if rc != 0 {
                match sys::rc_errno(rc) {
                    // Another thread took the event, or a signal interrupted the read.
                    libc::EAGAIN | libc::EINTR => continue,
                    e => return Err(sys::call_error("ibv_get_async_event", e)),
                }
            }
            // SAFETY: `ev` was just returned and is acknowledged only below.
            let event = unsafe { HwContext::convert_event(&ev) };
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

impl PdOps for HwPd {
    /// `ibv_reg_mr` over `len` zeroed bytes that the MR owns.
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        self.reg_owned(len, access)
    }

    /// `ibv_reg_mr` over caller memory.
    unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        // SAFETY: the caller upholds reg_mr_raw's contract, which is reg_borrowed's.
        unsafe { self.reg_borrowed(addr, len, access) }
    }

    /// `ibv_create_qp`.
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        HwQp::create(self, init)
    }

    /// `ibv_create_srq`.
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        HwSrq::create(self, init)
    }

    /// `ibv_create_ah`.
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        HwAh::create(self, attr)
    }

    /// `ibv_alloc_mw` of type 1 or 2.
    fn alloc_mw(&self, ty: MwType) -> Result<Arc<dyn MwOps>> {
        super::HwMw::alloc(self, ty)
    }

    /// `ibv_dealloc_pd`: the kernel answers `EBUSY` while MRs, QPs, SRQs or AHs use the PD.
    fn dealloc(&self) -> Result<()> {
        self.dealloc_pd()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
