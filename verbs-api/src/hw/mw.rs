//! Memory windows (`struct ibv_mw`): `ibv_alloc_mw` and `ibv_dealloc_mw`. Binding is a work
//! request on a QP (`IBV_WR_BIND_MW`, built in `qp.rs`) for both types: a type 1 window's
//! [`MemoryWindow::bind`](crate::MemoryWindow::bind) posts one, as rdma-core's rxe provider
//! implements `ibv_bind_mw`.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rdma_sys::{ibv_alloc_mw, ibv_dealloc_mw, ibv_mw, ibv_mw_type};

use super::sys::{self, Guarded};
use super::HwPd;
use crate::error::{Errno, Error, Result};
use crate::object::{MwOps, MwType};

/// The rkey index of a window (`rkey & !0xff`): what a bind keeps of its rkey.
pub(crate) fn rkey_index(rkey: u32) -> u32 {
    rkey & !0xff
}

/// A memory window (`ibv_alloc_mw`; `ibv_dealloc_mw` on [`MwOps::dealloc`] or drop). It holds
/// its PD, so the PD outlives it.
pub struct HwMw {
    raw: Guarded<ibv_mw>,
    pd: Arc<HwPd>,
    /// The rkey the program's handle holds now (a bind sets the next one before posting).
    rkey: AtomicU32,
    index: u32,
    ty: MwType,
}

impl HwMw {
    /// `ibv_alloc_mw(pd, IBV_MW_TYPE_1 or IBV_MW_TYPE_2)`; `EOPNOTSUPP` if the provider has
    /// no `alloc_mw`, else the provider's errno (a device without windows of that type
    /// refuses it).
    pub(crate) fn alloc(pd: &HwPd, ty: MwType) -> Result<Arc<dyn MwOps>> {
        let call = format!("ibv_alloc_mw({ty:?})");
        let c_ty = match ty {
            MwType::Type1 => ibv_mw_type::IBV_MW_TYPE_1,
            MwType::Type2 => ibv_mw_type::IBV_MW_TYPE_2,
        };
        let live = pd.live(&call)?;
        sys::clear_errno();
        // SAFETY: the PD is live (read lock held), so is its context and its ops table.
        let mw = unsafe { ibv_alloc_mw(live.ptr(), c_ty) };
        let Some(mw) = mw else {
            return Err(Error::new(
                Errno::NotSup,
                format!("{call}: the device's provider has no alloc_mw"),
            ));
        };
        let mw = sys::check_ptr(&call, mw)?;
        // SAFETY: a fresh window; `rkey` is a plain field.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        let index = rkey_index(rkey);
        let mut mws = pd.lock_mws();
        if mws.contains_key(&index) {
            // The device gave two live windows of this PD the same index: binds could not
            // tell them apart. Give this one back.
            // SAFETY: a fresh window nothing else knows of.
            let _ = unsafe { ibv_dealloc_mw(mw.as_ptr()) };
            return Err(Error::new(
                Errno::NotSup,
                format!("{call}: the device reused the rkey index {index:#x} of a live window"),
            ));
        }
        mws.insert(index, mw.as_ptr() as usize);
        drop(mws);
        Ok(Arc::new(HwMw {
            raw: Guarded::new(mw, "memory window"),
            pd: pd.arc(),
            rkey: AtomicU32::new(rkey),
            index,
            ty,
        }))
    }

    /// The `struct ibv_mw *`, for FFI; null once deallocated.
    pub fn as_ptr(&self) -> *mut ibv_mw {
        self.raw.peek()
    }
}

impl Drop for HwMw {
    fn drop(&mut self) {
        if !self.raw.peek().is_null() {
            self.pd.lock_mws().remove(&self.index);
        }
        // SAFETY: last reference and out of the registry: no post names the window any more.
        self.raw.destroy_on_drop(|mw| unsafe { ibv_dealloc_mw(mw) });
    }
}

impl MwOps for HwMw {
    fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }
    fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Release);
    }
    fn mw_type(&self) -> MwType {
        self.ty
    }
    /// `ibv_dealloc_mw`: out of the PD's registry first (so no bind names it while it goes),
    /// back in if the provider refuses.
    fn dealloc(&self) -> Result<()> {
        self.raw.destroy("ibv_dealloc_mw", |mw| {
            let mut mws = self.pd.lock_mws();
            let entry = mws.remove(&self.index);
            // SAFETY: the write lock excludes every other use of the window pointer, and the
            // registry lock every post that could name it.
            let rc = unsafe { ibv_dealloc_mw(mw) };
            if rc != 0 {
                if let Some(p) = entry {
                    mws.insert(self.index, p);
                }
            }
            rc
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
