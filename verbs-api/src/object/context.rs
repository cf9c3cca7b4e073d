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
use crate::types::{AsyncEvent, DeviceAttr, Gid, GidEntry, PortAttr};

/// An open device (`struct ibv_context`), as a backend implements it; programs hold a
/// [`Context`].
pub trait ContextOps: Send + Sync {
    /// The device name.
    fn device_name(&self) -> String;
    /// `ibv_query_device`.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// `ibv_query_port`.
    fn query_port(&self, port_num: u8) -> Result<PortAttr>;
    /// `ibv_query_gid`: the GID at `index`; an empty entry of the table reads as zero, an
    /// index past `gid_tbl_len` is `EINVAL`.
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid>;
    /// `ibv_query_gid_ex`: the entry at `index` with its type; `ENODATA` for an empty entry,
    /// `EINVAL` past `gid_tbl_len`.
    fn query_gid_entry(&self, port_num: u8, index: u32) -> Result<GidEntry> {
        let _ = index;
        Err(Error::new(
            Errno::NotSup,
            format!("ibv_query_gid_ex(port {port_num}): not supported by this device"),
        ))
    }
    /// `ibv_query_gid_table`: every valid entry of every port, in port then index order. By
    /// default built from [`ContextOps::query_gid_entry`] over each port's `gid_tbl_len`.
    fn query_gid_table(&self) -> Result<Vec<GidEntry>> {
        let ports = self.query_device()?.phys_port_cnt;
        let mut table = Vec::new();
        for port in 1..=ports {
            let len = self.query_port(port)?.gid_tbl_len;
            for index in 0..len {
                match self.query_gid_entry(port, index) {
                    Ok(e) => table.push(e),
                    Err(e) if e.errno == Errno::NoData => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(table)
    }
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
    /// `ibv_query_gid`: the GID at `index` of port `port_num`; an empty entry reads as zero,
    /// an index past the port's `gid_tbl_len` is `EINVAL`.
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        self.ops.query_gid(port_num, index)
    }
    /// `ibv_query_gid_ex`: the GID table entry at `index` of port `port_num`, with its type
    /// (RoCE v2 on softverbs ports); `ENODATA` if the entry is empty, `EINVAL` past the table.
    pub fn query_gid_entry(&self, port_num: u8, index: u32) -> Result<GidEntry> {
        self.ops.query_gid_entry(port_num, index)
    }
    /// `ibv_query_gid_table`: the valid GID entries of every port of the device, in port and
    /// index order (empty entries left out, as libibverbs leaves them out).
    pub fn query_gid_table(&self) -> Result<Vec<GidEntry>> {
        self.ops.query_gid_table()
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
