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
use crate::types::{AccessFlags, AhAttr, Sge, SrqInitAttr};

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
    /// `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` over the program's `len` bytes at `addr`:
    /// nothing is pinned or checked at registration, and the NIC follows the program's
    /// mapping at each access (a page that is not mapped then fails that access, not the
    /// program). `EOPNOTSUPP` where the device has no on-demand paging.
    fn reg_mr_on_demand(
        &self,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        let _ = (addr, len, access);
        Err(Error::new(Errno::NotSup, "ibv_reg_mr: IBV_ACCESS_ON_DEMAND is not supported"))
    }
    /// `ibv_advise_mr`: prefetch the ranges `sges` name of on-demand MRs of this PD, before
    /// returning when `flush` (`IBV_ADVISE_MR_FLAG_FLUSH`), else as a hint. `EOPNOTSUPP`
    /// where the device has no on-demand paging.
    fn advise_mr(&self, advice: MrAdvice, flush: bool, sges: &[Sge]) -> Result<()> {
        let _ = (advice, flush, sges);
        Err(Error::new(Errno::NotSup, "ibv_advise_mr: not supported by this device"))
    }
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

/// What `ibv_advise_mr` advises (`enum ibv_advise_mr_advice`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrAdvice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH`: page the ranges in for reading.
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`: page them in for writing.
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`: map the pages already present, fault none.
    PrefetchNoFault,
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
    /// `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` ([`PdOps::reg_mr_on_demand`]). Safe: the
    /// NIC never dereferences the program's pages, it copies them fault-safely.
    pub fn reg_mr_on_demand(
        &self,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        Ok(MemoryRegion { ops: self.ops.reg_mr_on_demand(addr, len, access)? })
    }
    /// `ibv_advise_mr` ([`PdOps::advise_mr`]).
    pub fn advise_mr(&self, advice: MrAdvice, flush: bool, sges: &[Sge]) -> Result<()> {
        self.ops.advise_mr(advice, flush, sges)
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
