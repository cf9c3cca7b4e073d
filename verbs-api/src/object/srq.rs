//! The shared receive queue (`struct ibv_srq`): the trait a backend implements and the handle a
//! program holds.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::types::{RecvWr, SrqAttr, SrqAttrMask};

/// A shared receive queue (`struct ibv_srq`), as a backend implements it; programs hold a
/// [`SharedReceiveQueue`].
pub trait SrqOps: Send + Sync {
    /// `ibv_post_srq_recv`.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()>;
    /// `ibv_modify_srq`.
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()>;
    /// `ibv_query_srq`.
    fn query(&self) -> Result<SrqAttr>;
    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
    fn destroy(&self) -> Result<()>;
    /// A backend-unique id, as [`AsyncElement::Srq`](crate::AsyncElement::Srq) names it.
    fn id(&self) -> u64 {
        0
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A shared receive queue (`struct ibv_srq`).
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(super) ops: Arc<dyn SrqOps>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedReceiveQueue")
    }
}

impl SharedReceiveQueue {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn SrqOps> {
        &self.ops
    }
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.ops.post_recv(wrs)
    }
    /// `ibv_modify_srq`.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.ops.modify(attr, mask)
    }
    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr> {
        self.ops.query()
    }
    /// The id async events name it by ([`AsyncElement::Srq`](crate::AsyncElement::Srq)).
    pub fn id(&self) -> u64 {
        self.ops.id()
    }
    /// `ibv_destroy_srq`.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
}
