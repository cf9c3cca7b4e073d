//! The protection domain (`struct ibv_pd`): the trait a backend implements and the handle a
//! program holds, from which MRs, QPs, SRQs and AHs are made.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::ah::{AddressHandle, AhOps};
use super::mr::{MemoryRegion, MrOps};
use super::mw::{MemoryWindow, MwOps, MwType};
use super::qp::{QpInitAttr, QpOps, QueuePair};
use super::srq::{SharedReceiveQueue, SrqOps};
use crate::error::{Errno, Error, Result};
use crate::types::{AccessFlags, AhAttr, SrqInitAttr};

/// A protection domain (`struct ibv_pd`), as a backend implements it; programs hold a
/// [`ProtectionDomain`].
pub trait PdOps: Send + Sync {
    /// `ibv_reg_mr` over memory the MR owns: `len` zeroed bytes.
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>>;
    /// `ibv_reg_mr` over caller memory. As the kernel pins it: a range whose pages are not all
    /// mapped as `access` needs (readable; writable when the MR may be written) is `EFAULT`,
    /// length 0 is `EINVAL`.
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
    /// `ibv_alloc_mw`; a backend without memory windows refuses it (`EOPNOTSUPP`).
    fn alloc_mw(&self, ty: MwType) -> Result<Arc<dyn MwOps>> {
        let _ = ty;
        Err(Error::new(Errno::NotSup, "ibv_alloc_mw: this device has no memory windows"))
    }
    /// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or AHs use it.
    fn dealloc(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A protection domain (`struct ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(super) ops: Arc<dyn PdOps>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProtectionDomain")
    }
}

impl ProtectionDomain {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn PdOps> {
        &self.ops
    }
    /// `ibv_reg_mr` over `len` zeroed bytes that the MR owns for its whole life.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        Ok(MemoryRegion { ops: self.ops.reg_mr(len, access)? })
    }
    /// `ibv_reg_mr` over caller memory, for FFI.
    ///
    /// # Safety
    /// See [`PdOps::reg_mr_raw`]: the memory must outlive the MR and every WR using it.
    pub unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: the caller upholds the contract documented above.
        Ok(MemoryRegion { ops: unsafe { self.ops.reg_mr_raw(addr, len, access)? } })
    }
    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<QueuePair> {
        Ok(QueuePair { ops: self.ops.create_qp(init)? })
    }
    /// `ibv_create_srq`.
    pub fn create_srq(&self, init: &SrqInitAttr) -> Result<SharedReceiveQueue> {
        Ok(SharedReceiveQueue { ops: self.ops.create_srq(init)? })
    }
    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        Ok(AddressHandle { ops: self.ops.create_ah(attr)? })
    }
    /// `ibv_alloc_mw`: a memory window of type `ty` on this PD, bound to nothing.
    pub fn alloc_mw(&self, ty: MwType) -> Result<MemoryWindow> {
        Ok(MemoryWindow { ops: self.ops.alloc_mw(ty)? })
    }
    /// `ibv_dealloc_pd`: `EBUSY` while anything was created from it and is not destroyed.
    pub fn dealloc(self) -> Result<()> {
        self.ops.dealloc()
    }
}
