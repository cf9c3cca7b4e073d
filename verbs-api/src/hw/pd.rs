//! Protection domains (`struct ibv_pd`) and memory regions (`struct ibv_mr`), including the
//! page-aligned memory an MR owns.

use std::alloc::Layout;
use std::any::Any;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};

use rdma_sys::{ibv_dealloc_pd, ibv_dereg_mr, ibv_mr, ibv_pd, ibv_reg_mr};

use super::sys::{self, Guarded};
use super::HwContext;
use crate::error::{Error, Result};
use crate::provider::*;
use crate::types::*;

/// A protection domain (`ibv_alloc_pd`; `ibv_dealloc_pd` on [`PdOps::dealloc`] or drop).
pub struct HwPd {
    raw: Guarded<ibv_pd>,
    pub(crate) ctx: Arc<HwContext>,
    /// The registered MRs by lkey: where their memory is. Inline sends check their SGEs here
    /// (the provider copies inline data from the addresses without looking at lkeys).
    mrs: Mutex<HashMap<u32, Region>>,
    /// The allocated memory windows by rkey index (`rkey & !0xff`, which a bind keeps: it
    /// changes only the key byte, `ibv_inc_rkey`), as `struct ibv_mw *` addresses: an
    /// `IBV_WR_BIND_MW` names its window by rkey and the provider wants the pointer. An entry
    /// leaves before its window is deallocated, under this lock.
    pub(crate) mws: Mutex<HashMap<u32, usize>>,
    me: Weak<HwPd>,
}

/// The memory of one registered MR.
#[derive(Clone, Copy)]
pub(crate) struct Region {
    addr: u64,
    len: usize,
    /// The `struct ibv_mr *` (as an address), which an `IBV_WR_BIND_MW` names in its
    /// `bind_info.mr`; valid while the entry is in the registry.
    pub(crate) mr: usize,
}

impl HwPd {
    pub(crate) fn new(pd: NonNull<ibv_pd>, ctx: Arc<HwContext>) -> Arc<HwPd> {
        Arc::new_cyclic(|me| HwPd {
            raw: Guarded::new(pd, "protection domain"),
            ctx,
            mrs: Mutex::new(HashMap::new()),
            mws: Mutex::new(HashMap::new()),
            me: me.clone(),
        })
    }

    /// The `struct ibv_pd *`, for FFI; null once deallocated.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.raw.peek()
    }

    pub(crate) fn live(&self, call: &str) -> Result<sys::Live<'_, ibv_pd>> {
        self.raw.live(call)
    }

    pub(crate) fn arc(&self) -> Arc<HwPd> {
        self.me.upgrade().expect("a HwPd is only reachable through its Arc")
    }

    /// `ibv_reg_mr` of `addr..addr+len`; `owned` is the memory the MR keeps, if it owns it.
    fn register(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
        owned: Option<PageBuf>,
    ) -> Result<Arc<dyn MrOps>> {
        let call = format!("ibv_reg_mr({len} bytes, {access:?})");
        let pd = self.raw.live(&call)?;
        let flags = sys::to_c_int("ibv_reg_mr: access", access.bits())?;
        sys::clear_errno();
        // SAFETY: the PD is live; the memory is either `owned` (allocated for `len` bytes) or
        // the caller's, valid per the contract of `reg_mr_raw`.
        let mr = unsafe { ibv_reg_mr(pd.ptr(), addr.cast(), len, flags) };
        let mr = sys::check_ptr(&call, mr)?;
        // SAFETY: ibv_reg_mr returned a valid MR; its keys are plain fields.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        let addr = addr as u64;
        self.lock_mrs().insert(lkey, Region { addr, len, mr: mr.as_ptr() as usize });
        Ok(Arc::new(HwMr {
            raw: Guarded::new(mr, "memory region"),
            pd: self.arc(),
            owned: Mutex::new(owned),
            lkey,
            rkey,
            addr,
            len,
            access,
        }))
    }

    /// `ibv_reg_mr` over `len` zeroed bytes, page-aligned and rounded up to whole pages, that
    /// the MR owns until it is deregistered or dropped.
    pub(super) fn reg_owned(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let buf = PageBuf::zeroed(len)?;
        let addr = buf.ptr.as_ptr();
        self.register(addr, len, access, Some(buf))
    }

    /// `ibv_reg_mr` over caller memory.
    ///
    /// # Safety
    /// As [`PdOps::reg_mr_raw`]: the memory stays valid, and is touched only through the NIC
    /// and the MR, until the MR is deregistered and every WR that used it has completed.
    pub(super) unsafe fn reg_borrowed(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        self.register(addr, len, access, None)
    }

    /// `ibv_dealloc_pd`: the kernel answers `EBUSY` while MRs, QPs, SRQs or AHs use the PD.
    pub(super) fn dealloc_pd(&self) -> Result<()> {
        // SAFETY: the write lock excludes every other use of the PD pointer.
        self.raw.destroy("ibv_dealloc_pd", |pd| unsafe { ibv_dealloc_pd(pd) })
    }

    pub(crate) fn lock_mrs(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Region>> {
        self.mrs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_mws(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.mws.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append the bytes an SGE names to `out`, after checking that they lie inside an MR of
    /// this PD with that lkey. The copy happens under the registry lock, and an MR leaves the
    /// registry before its memory can be freed, so the memory is valid while it is read.
    pub(crate) fn copy_registered(&self, sge: &Sge, out: &mut Vec<u8>) -> Result<()> {
        let mrs = self.lock_mrs();
        let Some(r) = mrs.get(&sge.lkey) else {
            return Err(Error::inval(format!(
                "lkey {:#x} is not a memory region of this protection domain",
                sge.lkey
            )));
        };
        let end = sge.addr.checked_add(u64::from(sge.length));
        let inside =
            sge.addr >= r.addr && end.is_some_and(|e| e <= r.addr.saturating_add(r.len as u64));
        if !inside {
            return Err(Error::inval(format!(
                "SGE {:#x}+{} is outside the memory region with lkey {:#x} ({:#x}+{})",
                sge.addr, sge.length, sge.lkey, r.addr, r.len
            )));
        }
        let len = sge.length as usize;
        if len == 0 {
            return Ok(());
        }
        let start = out.len();
        out.resize(start + len, 0);
        // SAFETY: the source range lies inside a registered MR (checked above) whose memory
        // stays valid while the registry lock is held; the destination was just sized.
        unsafe {
            std::ptr::copy_nonoverlapping(
                sge.addr as usize as *const u8,
                out.as_mut_ptr().add(start),
                len,
            )
        };
        Ok(())
    }
}

impl Drop for HwPd {
    fn drop(&mut self) {
        // SAFETY: every object created from the PD holds an Arc of it, so none is left.
        self.raw.destroy_on_drop(|pd| unsafe { ibv_dealloc_pd(pd) });
    }
}

/// Zeroed, page-aligned memory of whole pages, owned by one MR.
struct PageBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: PageBuf is a unique owner of plain bytes; it is only read and written by copying.
unsafe impl Send for PageBuf {}
// SAFETY: as above; the MR serializes freeing against every copy.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    fn zeroed(len: usize) -> Result<PageBuf> {
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096);
        let too_big = || Error::nomem(format!("ibv_reg_mr: {len} bytes cannot be allocated"));
        let size = len.max(1).checked_next_multiple_of(page).ok_or_else(too_big)?;
        let layout = Layout::from_size_align(size, page).map_err(|_| too_big())?;
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(too_big)?;
        Ok(PageBuf { ptr, layout })
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A memory region (`ibv_reg_mr`; `ibv_dereg_mr` on [`MrOps::dereg`] or drop). Its memory is
/// read and written by copying, with bounds checks, and not at all once deregistered.
pub struct HwMr {
    raw: Guarded<ibv_mr>,
    pd: Arc<HwPd>,
    owned: Mutex<Option<PageBuf>>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    access: AccessFlags,
}

impl HwMr {
    /// The `struct ibv_mr *`, for FFI; null once deregistered.
    pub fn as_ptr(&self) -> *mut ibv_mr {
        self.raw.peek()
    }

    fn check_range(&self, call: &str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::inval(format!(
                "{call}: {len} bytes at offset {offset} exceed the memory region of {} bytes",
                self.len
            ))),
        }
    }

    /// Deregister (`ibv_dereg_mr`) with the registry entry removed first, so no inline send
    /// copies from memory that is about to go; put it back if the kernel refuses. Both happen
    /// under the MR's write lock, so only a live MR ever touches the entry of its lkey.
    fn deregister(&self) -> Result<()> {
        self.raw.destroy("ibv_dereg_mr", |mr| {
            let region = self.pd.lock_mrs().remove(&self.lkey);
            // SAFETY: the write lock excludes every other use of the MR pointer and its memory.
            let rc = unsafe { ibv_dereg_mr(mr) };
            if rc != 0 {
                if let Some(r) = region {
                    self.pd.lock_mrs().insert(self.lkey, r);
                }
            }
            rc
        })?;
        // The NIC can no longer touch the memory: free it now.
        self.owned.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }
}

impl Drop for HwMr {
    fn drop(&mut self) {
        // After an explicit dereg the kernel may have given the lkey to a newer MR, whose
        // registry entry must stay.
        if !self.raw.peek().is_null() {
            self.pd.lock_mrs().remove(&self.lkey);
        }
        // SAFETY: last reference: nothing else uses the MR; the memory is freed after this.
        self.raw.destroy_on_drop(|mr| unsafe { ibv_dereg_mr(mr) });
    }
}

impl MrOps for HwMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn access(&self) -> AccessFlags {
        self.access
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let _live = self.raw.live("MemoryRegion::read")?;
        self.check_range("MemoryRegion::read", offset, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        // SAFETY: the range is inside the MR (checked); its memory is valid while the MR is
        // live (held by `_live`; owned memory is freed only after deregistration, caller
        // memory per reg_mr_raw's contract). The NIC may write it concurrently; bytes are
        // copied, no reference into the MR is created.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.addr as usize as *const u8).add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let _live = self.raw.live("MemoryRegion::write")?;
        self.check_range("MemoryRegion::write", offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `read`, with the MR memory as the destination.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.addr as usize as *mut u8).add(offset),
                data.len(),
            )
        };
        Ok(())
    }

    /// `ibv_dereg_mr`; the memory the MR owns is freed with it.
    fn dereg(&self) -> Result<()> {
        self.deregister()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
