//! What a backend implements: a [`Provider`] that lists and opens its devices, and one trait per
//! verbs object (defined beside each object's handle in `object/`, re-exported here).
//!
//! A backend (`soft`, `sim`, `hw`) registers its provider with [`crate::register_provider`];
//! the handles dispatch each verb to the backend object behind them. Dynamic dispatch keeps one
//! program independent of the backend.

use std::sync::Arc;

use crate::error::Result;

pub use crate::object::{
    AhOps, CompChannelOps, ContextOps, CqOps, MrOps, MwOps, PdOps, QpOps, SrqOps,
};

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
