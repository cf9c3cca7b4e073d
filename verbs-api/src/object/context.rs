//! The open device (`struct ibv_context`): the trait a backend implements and the handle a
//! program holds, which queries the device and makes PDs, CQs and completion channels. A device
//! is found and opened by name in [`crate::device`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::cq::{CompChannel, CompChannelOps, CompletionQueue, CqOps};
use super::pd::{PdOps, ProtectionDomain};
use crate::error::{Errno, Error, Result};
use crate::types::{AsyncEvent, DeviceAttr, Gid, PortAttr};

/// An open device (`struct ibv_context`), as a backend implements it; programs hold a
/// [`Context`].
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

/// An open device (`struct ibv_context`).
#[derive(Clone)]
pub struct Context {
    pub(super) ops: Arc<dyn ContextOps>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({})", self.ops.device_name())
    }
}

impl Context {
    /// Wrap a backend context.
    pub fn from_ops(ops: Arc<dyn ContextOps>) -> Context {
        Context { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn ContextOps> {
        &self.ops
    }
    /// The device name.
    pub fn device_name(&self) -> String {
        self.ops.device_name()
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.ops.query_device()
    }
    /// `ibv_query_port`.
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        self.ops.query_port(port_num)
    }
    /// `ibv_query_gid`.
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        self.ops.query_gid(port_num, index)
    }
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain { ops: self.ops.alloc_pd()? })
    }
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        Ok(CompChannel { ops: self.ops.create_comp_channel()? })
    }
    /// `ibv_create_cq` with room for at least `cqe` completions.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<CompletionQueue> {
        Ok(CompletionQueue { ops: self.ops.create_cq(cqe, channel, comp_vector)? })
    }
    /// `ibv_get_async_event` with a bound; `ETIMEDOUT` if none arrived. (Events need no ack in softverbs'
    /// safe API: `ibv_ack_async_event` is implied when the returned value is dropped.)
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.ops.get_async_event(timeout)
    }
}
