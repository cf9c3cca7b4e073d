//! The address handle (`struct ibv_ah`): the trait a backend implements and the handle a
//! program holds, to name the destination of UD sends.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::types::AhAttr;

/// An address handle (`struct ibv_ah`), as a backend implements it; programs hold an
/// [`AddressHandle`].
pub trait AhOps: Send + Sync {
    /// The address vector it was created with.
    fn attr(&self) -> AhAttr;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// An address handle (`struct ibv_ah`), for UD sends.
#[derive(Clone)]
pub struct AddressHandle {
    pub(super) ops: Arc<dyn AhOps>,
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AddressHandle({:?})", self.ops.attr())
    }
}

impl AddressHandle {
    /// Wrap a backend address handle.
    pub fn from_ops(ops: Arc<dyn AhOps>) -> AddressHandle {
        AddressHandle { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn AhOps> {
        &self.ops
    }
    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        self.ops.attr()
    }
}
