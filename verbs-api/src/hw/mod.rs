//! The `hw` backend: real RDMA NICs, or the kernel's Soft-RoCE (`rdma_rxe`), through libibverbs
//! (bindings from the `rdma-sys` crate). A program written against `verbs-api` runs here
//! unchanged; see `docs/hardware.md` for building, device names and what differs from the
//! `soft` backend.
//!
//! Every verb is one libibverbs call. The data-path verbs that `verbs.h` defines as static
//! inline functions (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) are not exported by `libibverbs.so`; rdma-sys 0.3 re-implements them
//! in Rust as calls through `context->ops` that `unwrap()` the function pointer. This module
//! calls through `context->ops` itself and turns a missing operation into `EOPNOTSUPP` rather
//! than a panic.
//!
//! Object lifetimes follow libibverbs' rules by construction: each wrapper holds an `Arc` of
//! what it was created from (a QP its PD, CQs and SRQ; a PD its context), so dropping handles
//! in any order destroys children first. An explicit `destroy()`/`dealloc()`/`dereg()` returns
//! the kernel's answer (`EBUSY` while something still uses the object); afterwards the handle's
//! verbs fail with `EINVAL`. Completion and async events are acknowledged as soon as they are
//! read, so a destroy never blocks on an unacknowledged event.
//!
//! Its rooms, bottom up: `sys` (errno, ownership and locking of raw pointers) and `convert`
//! (the vocabulary to and from the C structs); one room per object family — `context`, `pd`
//! (PDs and MRs), `cq` (CQs and completion channels), `qp` (QPs, SRQs and AHs); then `verbs`,
//! the context's and PD's verbs that create those objects; and this module, which lists and
//! opens devices ([`HwProvider`]).

#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod context;
mod convert;
mod cq;
mod mw;
mod pd;
mod qp;
mod sys;
mod verbs;

use std::any::Any;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::{
    ibv_device, ibv_free_device_list, ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name,
};

pub use context::HwContext;
pub use cq::{HwCompChannel, HwCq};
pub use mw::HwMw;
pub use pd::{HwMr, HwPd};
pub use qp::{HwAh, HwQp, HwSrq};

use crate::error::{Errno, Error, Result};
use crate::provider::{ContextOps, DeviceInfo, Provider};

/// The `hw` provider: libibverbs' devices. Register it with [`crate::register_provider`], then
/// open devices by their libibverbs names (`mlx5_0`, `rxe0`, ...) with [`crate::Context::open`].
pub fn provider() -> Arc<dyn Provider> {
    Arc::new(HwProvider)
}

/// The [`Provider`] over libibverbs (`ibv_get_device_list`, `ibv_open_device`).
#[derive(Debug, Default, Clone, Copy)]
pub struct HwProvider;

impl Provider for HwProvider {
    fn name(&self) -> &'static str {
        "hw"
    }

    /// `ibv_get_device_list`. No devices and no RDMA in the kernel are both `ENODEV`, with a
    /// message starting "no RDMA devices:" and libibverbs' reason.
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let list = DeviceList::get()?;
        Ok(list.iter().map(|d| d.info()).collect())
    }

    /// `ibv_get_device_list` + `ibv_open_device` by name.
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>> {
        let list = DeviceList::get()?;
        let Some(dev) = list.iter().find(|d| d.name() == name) else {
            let known: Vec<String> = list.iter().map(|d| d.name()).collect();
            return Err(Error::new(
                Errno::NoDev,
                format!("no RDMA device named {name:?} (libibverbs devices: {})", known.join(", ")),
            ));
        };
        // The device list may be freed once the device is open (ibv_get_device_list(3)).
        let ctx: Arc<dyn ContextOps> = HwContext::open(dev.ptr, name)?;
        Ok(ctx)
    }
}

/// The array `ibv_get_device_list` returns, freed with `ibv_free_device_list` on drop.
struct DeviceList {
    list: *mut *mut ibv_device,
    len: usize,
}

/// One entry of a [`DeviceList`], valid while the list is.
struct ListedDevice {
    ptr: *mut ibv_device,
}

impl ListedDevice {
    fn name(&self) -> String {
        // SAFETY: `ptr` is a device of a live list; ibv_get_device_name returns its name, a
        // NUL-terminated string inside the device, or NULL.
        let p = unsafe { ibv_get_device_name(self.ptr) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated and alive as long as the list (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn info(&self) -> DeviceInfo {
        // SAFETY: `ptr` is a device of a live list; the call only reads it (network order).
        let guid = unsafe { ibv_get_device_guid(self.ptr) };
        DeviceInfo { name: self.name(), node_guid: u64::from_be(guid), provider: "hw" }
    }
}

impl DeviceList {
    /// `ibv_get_device_list`, or the `ENODEV` error that says why there is nothing to list.
    fn get() -> Result<DeviceList> {
        let mut n: c_int = 0;
        sys::clear_errno();
        // SAFETY: `n` is a valid out-parameter; the call returns NULL or an array we own.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let code = match sys::errno() {
                0 => libc::EIO,
                e => e,
            };
            let why = match code {
                libc::ENOSYS => ": the kernel has no RDMA support",
                libc::EPERM | libc::EACCES => ": permission denied (check /dev/infiniband/*)",
                _ => "",
            };
            return Err(no_devices(format!(
                "ibv_get_device_list failed: {}{why}",
                sys::describe_errno(code)
            )));
        }
        let list = DeviceList { list, len: usize::try_from(n).unwrap_or(0) };
        if list.len == 0 {
            return Err(no_devices(
                "libibverbs found no devices (no RDMA driver is bound; for Soft-RoCE: \
                 modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0)"
                    .to_string(),
            ));
        }
        Ok(list)
    }

    fn iter(&self) -> impl Iterator<Item = ListedDevice> + '_ {
        (0..self.len).map(|i| {
            // SAFETY: the array has `len` valid entries (followed by a NULL terminator).
            ListedDevice { ptr: unsafe { *self.list.add(i) } }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once, here; opened
        // contexts stay valid after the list is freed.
        unsafe { ibv_free_device_list(self.list) };
    }
}

fn no_devices(reason: String) -> Error {
    Error::new(Errno::NoDev, format!("no RDMA devices: {reason}"))
}

/// The base of the ids the `hw` backend gives CQs and SRQs ("hw" in the top bytes), so that
/// they never equal a `soft` or `sim` id when handles of several backends are compared.
const ID_BASE: u64 = 0x6877 << 48;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh object key: small enough to travel as a `cq_context`/`srq_context` pointer value
/// on any platform. [`object_id`] is the id the API shows.
fn next_key() -> usize {
    NEXT_ID.fetch_add(1, Ordering::Relaxed) as usize
}

/// The public id of an object key.
fn object_id(key: usize) -> u64 {
    ID_BASE | key as u64
}

/// The `hw` object behind a handle of another backend-independent type, or `EINVAL` saying that
/// it came from another backend.
fn downcast<'a, T: 'static>(any: &'a dyn Any, call: &str, what: &str) -> Result<&'a T> {
    any.downcast_ref::<T>().ok_or_else(|| {
        Error::inval(format!("{call}: the {what} does not belong to the hw backend"))
    })
}

/// `EINVAL` unless two objects come from the same device context: the kernel names objects by
/// per-context handles, so mixing contexts would silently address the wrong object.
fn same_context(call: &str, a: &Arc<HwContext>, b: &Arc<HwContext>, what: &str) -> Result<()> {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(Error::inval(format!("{call}: the {what} belongs to another device context")))
    }
}
