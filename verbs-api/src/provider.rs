//! The provider traits a backend implements, and the registry that finds devices by name.
//!
//! A backend (`soft`, `sim`, `hw`) registers a [`Provider`]; [`crate::device_list`] asks every
//! registered provider for its devices, and the handles in [`crate::handles`] dispatch each verb to
//! the backend object behind them. Dynamic dispatch keeps one program independent of the backend.

use std::any::Any;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::{Errno, Error, Result};
use crate::handles::{CompChannel, CompletionQueue, QpInitAttr};
use crate::types::*;

/// A backend that owns devices (`struct verbs_device_ops` in rdma-core, roughly).
pub trait Provider: Send + Sync {
    /// The provider's name (`soft`, `sim`, `hw`).
    fn name(&self) -> &'static str;
    /// Its devices (`ibv_get_device_list`). An error says why none can be listed.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// Open a device by name (`ibv_open_device`).
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>>;
}

/// What `ibv_get_device_list` tells about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `ibv_get_device_name`.
    pub name: String,
    /// `ibv_get_device_guid` (host order).
    pub node_guid: u64,
    /// The provider that owns it.
    pub provider: &'static str,
}

/// An open device (`struct ibv_context`).
pub trait ContextOps: Send + Sync {
    /// The device name.
    fn device_name(&self) -> String;
    /// `ibv_query_device`.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// `ibv_query_port`.
    fn query_port(&self, port_num: u8) -> Result<PortAttr>;
    /// `ibv_query_gid`.
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid>;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>>;
    /// `ibv_create_comp_channel`.
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>>;
    /// `ibv_create_cq`.
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>>;
    /// `ibv_get_async_event`, bounded by `timeout` (`None` waits forever); `ETIMEDOUT` if none came.
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        let _ = timeout;
        Err(Error::new(Errno::NotSup, "ibv_get_async_event: not supported by this device"))
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A protection domain (`struct ibv_pd`).
pub trait PdOps: Send + Sync {
    /// `ibv_reg_mr` over memory the MR owns: `len` zeroed bytes.
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>>;
    /// `ibv_reg_mr` over caller memory.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid, and must be touched only through the NIC and the MR's
    /// methods, until the MR is deregistered and every WR that referenced it has completed.
    unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>>;
    /// `ibv_create_qp`.
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>>;
    /// `ibv_create_srq`.
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let _ = init;
        Err(Error::new(Errno::NotSup, "ibv_create_srq: not supported by this device yet"))
    }
    /// `ibv_create_ah`.
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        let _ = attr;
        Err(Error::new(Errno::NotSup, "ibv_create_ah: not supported by this device yet"))
    }
    /// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or AHs use it.
    fn dealloc(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A memory region (`struct ibv_mr`). Its memory is read and written by copying, because the NIC
/// (a remote WRITE, say) may change it at any time.
pub trait MrOps: Send + Sync {
    /// `lkey`.
    fn lkey(&self) -> u32;
    /// `rkey`.
    fn rkey(&self) -> u32;
    /// `addr`: the virtual address of the first byte, as SGEs and peers name it.
    fn addr(&self) -> u64;
    /// `length` in bytes.
    fn len(&self) -> usize;
    /// Whether the MR is zero bytes long.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The access flags it was registered with.
    fn access(&self) -> AccessFlags;
    /// Copy `buf.len()` bytes out of the MR from `offset`.
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()>;
    /// Copy `data` into the MR at `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// `ibv_dereg_mr`: the keys stop working at once; WRs that still name them fail with a protection error.
    fn dereg(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A completion queue (`struct ibv_cq`).
pub trait CqOps: Send + Sync {
    /// `ibv_poll_cq`: fill up to `wc.len()` completions; returns how many. An overrun CQ is an error.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// `ibv_req_notify_cq`.
    fn req_notify(&self, solicited_only: bool) -> Result<()>;
    /// The capacity (`cq->cqe`).
    fn cqe(&self) -> u32;
    /// `ibv_resize_cq`.
    fn resize(&self, cqe: u32) -> Result<()> {
        let _ = cqe;
        Err(Error::new(Errno::NotSup, "ibv_resize_cq: not supported by this device yet"))
    }
    /// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
    fn destroy(&self) -> Result<()>;
    /// A backend-unique id, to tell CQs apart in events.
    fn id(&self) -> u64;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A completion channel (`struct ibv_comp_channel`).
pub trait CompChannelOps: Send + Sync {
    /// `ibv_get_cq_event`, bounded by `timeout` (`None` waits forever): the CQ that has an event.
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>>;
    /// `ibv_ack_cq_events`.
    fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32);
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A queue pair (`struct ibv_qp`).
pub trait QpOps: Send + Sync {
    /// `qp_num`.
    fn qp_num(&self) -> u32;
    /// `qp_type`.
    fn qp_type(&self) -> QpType;
    /// `ibv_post_send`. On error, the WRs before the one named in the message were posted (like `bad_wr`).
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()>;
    /// `ibv_post_recv`.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()>;
    /// `ibv_modify_qp`.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// `ibv_query_qp`: all attributes and the capabilities.
    fn query(&self) -> Result<(QpAttr, QpCap)>;
    /// `ibv_destroy_qp`.
    fn destroy(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A shared receive queue (`struct ibv_srq`).
pub trait SrqOps: Send + Sync {
    /// `ibv_post_srq_recv`.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()>;
    /// `ibv_modify_srq`.
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()>;
    /// `ibv_query_srq`.
    fn query(&self) -> Result<SrqAttr>;
    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
    fn destroy(&self) -> Result<()>;
    /// A backend-unique id, as [`AsyncElement::Srq`] names it.
    fn id(&self) -> u64 {
        0
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// An address handle (`struct ibv_ah`).
pub trait AhOps: Send + Sync {
    /// The address vector it was created with.
    fn attr(&self) -> AhAttr;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// Attributes to create an SRQ (`struct ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqInitAttr {
    /// `attr.max_wr`.
    pub max_wr: u32,
    /// `attr.max_sge`.
    pub max_sge: u32,
    /// `attr.srq_limit`.
    pub srq_limit: u32,
}

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// `max_wr`.
    pub max_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `srq_limit`.
    pub srq_limit: u32,
}

bitflags::bitflags! {
    /// Which SRQ attributes a modify changes (`enum ibv_srq_attr_mask`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct SrqAttrMask: u32 {
        /// `IBV_SRQ_MAX_WR` (resize).
        const MAX_WR = 1;
        /// `IBV_SRQ_LIMIT` (arm the limit event).
        const LIMIT = 1 << 1;
    }
}

/// The kind of an asynchronous event (`enum ibv_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEventType {
    /// `IBV_EVENT_CQ_ERR`: a CQ overran.
    CqErr,
    /// `IBV_EVENT_QP_FATAL`: the NIC moved a QP to the error state.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`.
    QpReqErr,
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    QpAccessErr,
    /// `IBV_EVENT_COMM_EST`.
    CommEst,
    /// `IBV_EVENT_SQ_DRAINED`.
    SqDrained,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ in error will consume no more WQEs.
    QpLastWqeReached,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    SrqLimitReached,
    /// `IBV_EVENT_PORT_ACTIVE`.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`.
    PortErr,
    /// `IBV_EVENT_DEVICE_FATAL`.
    DeviceFatal,
}

/// What an async event is about (`element` of `struct ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by [`CqOps::id`].
    Cq(u64),
    /// An SRQ, by backend id.
    Srq(u64),
    /// A port, by number.
    Port(u8),
    /// The device.
    Device,
}

/// An asynchronous event (`struct ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// `event_type`.
    pub event_type: AsyncEventType,
    /// `element`.
    pub element: AsyncElement,
}

/// The backend a device name selects, as [`crate::Context::open`] routes it: `softverbs<N>`
/// is a `soft` device, `sim:<node>` a `sim` device, and any other name (`mlx5_0`, `rxe0`, ...)
/// a libibverbs device of the `hw` backend.
pub fn backend_of(name: &str) -> &'static str {
    let soft_index = name.strip_prefix("softverbs");
    if soft_index.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        "soft"
    } else if name.starts_with("sim:") {
        "sim"
    } else {
        "hw"
    }
}

/// The `hw` provider (libibverbs) if this build of `verbs-api` has the `rdma-sys` feature,
/// else `None`. Lets a program register real devices without `cfg` of its own: a feature
/// enabled as `--features verbs-api/rdma-sys` is visible here but not in the program's crate.
pub fn hw_provider() -> Option<Arc<dyn Provider>> {
    #[cfg(feature = "rdma-sys")]
    return Some(crate::hw::provider());
    #[cfg(not(feature = "rdma-sys"))]
    None
}

static PROVIDERS: RwLock<Vec<Arc<dyn Provider>>> = RwLock::new(Vec::new());

/// Register a backend. Registering a provider name twice keeps the first.
pub fn register_provider(p: Arc<dyn Provider>) {
    let mut list = PROVIDERS.write().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|q| q.name() == p.name()) {
        list.push(p);
    }
}

/// The registered providers, in registration order.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    PROVIDERS.read().unwrap_or_else(|e| e.into_inner()).clone()
}
