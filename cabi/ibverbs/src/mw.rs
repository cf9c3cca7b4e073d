//! Memory windows (`ibv_alloc_mw`, `ibv_dealloc_mw` through the context's ops,
//! as `<infiniband/verbs.h>`'s inlines call them), and the conversion of a bind WR's
//! `bind_mw` (of `ibv_post_send` and `ibv_wr_bind_mw`) into softverbs' [`MwBind`]. As
//! rdma-core's rxe provider, `ibv_bind_mw` posts an `IBV_WR_BIND_MW` on the QP and gives the
//! window the next rkey (`ibv_inc_rkey`) when the post is taken: `crate::qp`'s `bind_mw`,
//! beside the other posts, since it names a QP.

use std::ffi::c_int;
use std::ptr::null_mut;

use softverbs_cabi_abi::*;
use verbs_api::{AccessFlags, MemoryWindow, MwBind, MwBindInfo, MwType};

use crate::object::{free, obj, Magic};
use crate::verbs::{Mr, Pd};
use crate::{refuse_err, refuse_null};

/// `IBV_ACCESS_ZERO_BASED`.
pub(crate) const ZERO_BASED: u32 = 1 << 5;

/// A memory window: the C struct, then softverbs' window.
#[repr(C)]
pub(crate) struct Mw {
    c: ibv_mw,
    magic: Magic,
    pub(crate) mw: MemoryWindow,
}

/// `ops.alloc_mw`, behind the inline `ibv_alloc_mw`.
pub(crate) unsafe extern "C" fn alloc_mw(p: *mut ibv_pd, ty: c_int) -> *mut ibv_mw {
    const W: &str = "ibv_alloc_mw";
    let Some(pd) = obj::<Pd, _>(W, p, Magic::Pd) else { return null_mut() };
    let Some(t) = MwType::from_ibv(ty as u32) else {
        return refuse_null(W, libc::EINVAL, &format!("type {ty}: IBV_MW_TYPE_1 or _2"));
    };
    match pd.pd.alloc_mw(t) {
        Ok(mw) => {
            let c = ibv_mw {
                context: pd.c.context,
                pd: p,
                rkey: mw.rkey(),
                handle: mw.rkey() >> 8,
                mw_type: ty,
            };
            Box::into_raw(Box::new(Mw { c, magic: Magic::Mw, mw })) as *mut ibv_mw
        }
        Err(e) => refuse_null(W, e.errno.code(), &e.message),
    }
}

/// `ops.dealloc_mw`, behind the inline `ibv_dealloc_mw`: a bound window is unbound.
pub(crate) unsafe extern "C" fn dealloc_mw(m: *mut ibv_mw) -> c_int {
    const W: &str = "ibv_dealloc_mw";
    let Some(mw) = obj::<Mw, _>(W, m, Magic::Mw) else { return libc::EINVAL };
    if let Err(e) = mw.mw.clone().dealloc() {
        return refuse_err(W, &e);
    }
    // SAFETY: checked live above.
    unsafe { free::<Mw, _>(m) };
    0
}

/// The bind a C `struct ibv_mw_bind_info` asks for, as softverbs' [`MwBindInfo`].
pub(crate) fn bind_info<'a>(b: &ibv_mw_bind_info, mr: Option<&'a Mr>) -> MwBindInfo<'a> {
    MwBindInfo {
        mr: mr.map(|m| &m.mr),
        addr: b.addr,
        length: b.length,
        access: AccessFlags::from_bits_truncate(b.mw_access_flags & 0xf),
        zero_based: b.mw_access_flags & ZERO_BASED != 0,
    }
}

/// The window behind an `ibv_mw` pointer, or None (with a log line).
pub(crate) fn mw_of<'a>(what: &str, m: *mut ibv_mw) -> Option<&'a Mw> {
    obj::<Mw, _>(what, m, Magic::Mw)
}

/// The `bind_mw` of a C send WR (`ibv_post_send` with `IBV_WR_BIND_MW`), as rxe's provider
/// reads it: the window's rkey now from `mw->rkey`, the MR's lkey from `mr->lkey` (0 with no
/// MR, which a bind of nonzero length then fails with `IBV_WC_MW_BIND_ERR`).
pub(crate) fn bind_wr_of(tail: &[u64; 6]) -> MwBind {
    let (mw, mr) = (tail[0] as *const ibv_mw, tail[2] as *const ibv_mr);
    let info = ibv_mw_bind_info {
        mr: mr as *mut ibv_mr,
        addr: tail[3],
        length: tail[4],
        mw_access_flags: tail[5] as u32,
    };
    bind_of(mw, tail[1] as u32, &info)
}

/// [`bind_wr_of`] from its parts (`ibv_wr_bind_mw` passes them as arguments).
pub(crate) fn bind_of(mw: *const ibv_mw, rkey: u32, info: &ibv_mw_bind_info) -> MwBind {
    // SAFETY: a program names a live window and MR here (NULL is read as none), as with rxe,
    // whose provider reads the same fields; the engine checks every key it is given.
    let (mw_rkey, mr_lkey) = unsafe {
        (
            if mw.is_null() { 0 } else { (*mw).rkey },
            if info.mr.is_null() { 0 } else { (*info.mr).lkey },
        )
    };
    let i = bind_info(info, None);
    MwBind {
        mw_rkey,
        new_rkey: rkey,
        mr_lkey,
        addr: i.addr,
        length: i.length,
        access: i.access,
        zero_based: i.zero_based,
    }
}
