//! The memory window (`struct ibv_mw`): the trait a backend implements and the handle a program
//! holds. A window grants peers remote access to a range of an MR through an rkey of its own,
//! bound and rebound without registering again: a type 1 window by `ibv_bind_mw` (which posts
//! a bind WR on a QP, as rdma-core's rxe provider does), a type 2 window by an
//! `IBV_WR_BIND_MW` the program posts itself, invalidated by `IBV_WR_LOCAL_INV` or a peer's
//! `IBV_WR_SEND_WITH_INV`.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::mr::MemoryRegion;
use super::qp::{QueuePair, SendWr};
use crate::error::{Error, Result};
use crate::types::{AccessFlags, MwBind, SendFlags, WrOpcode};

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound by `ibv_bind_mw`, on any QP of its PD; not invalidated.
    Type1,
    /// `IBV_MW_TYPE_2` (2B): bound by `IBV_WR_BIND_MW` to one QP, which alone answers for it;
    /// invalidated by `IBV_WR_LOCAL_INV` or a SEND WITH INVALIDATE.
    Type2,
}

impl MwType {
    /// The `enum ibv_mw_type` value (1 or 2).
    pub fn to_ibv(self) -> u32 {
        match self {
            MwType::Type1 => 1,
            MwType::Type2 => 2,
        }
    }
    /// From an `enum ibv_mw_type` value.
    pub fn from_ibv(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::Type1),
            2 => Some(MwType::Type2),
            _ => None,
        }
    }
}

/// `ibv_inc_rkey`: the same key with its low byte (the key byte) advanced by one, as a bind
/// gives a window a new rkey.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A memory window (`struct ibv_mw`), as a backend implements it; programs hold a
/// [`MemoryWindow`].
pub trait MwOps: Send + Sync {
    /// `rkey`: the key peers use now (a bind gives it a new key byte).
    fn rkey(&self) -> u32;
    /// Records the rkey a bind gives the window (`ibv_bind_mw` writes `mw->rkey`).
    fn set_rkey(&self, rkey: u32);
    /// `type`.
    fn mw_type(&self) -> MwType;
    /// `ibv_dealloc_mw`.
    fn dealloc(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// What a bind asks for (`struct ibv_mw_bind_info`).
#[derive(Clone, Copy, Debug, Default)]
pub struct MwBindInfo<'a> {
    /// `mr`: the MR the window opens onto (registered with [`AccessFlags::MW_BIND`]); `None`
    /// with `length` 0 unbinds a type 1 window.
    pub mr: Option<&'a MemoryRegion>,
    /// `addr`: the window's first byte, an address of the MR.
    pub addr: u64,
    /// `length` in bytes.
    pub length: u64,
    /// `mw_access_flags`: the remote rights the window grants.
    pub access: AccessFlags,
    /// `IBV_ACCESS_ZERO_BASED` in `mw_access_flags` (type 2 only).
    pub zero_based: bool,
}

/// A memory window (`struct ibv_mw`), made by [`ProtectionDomain::alloc_mw`](super::ProtectionDomain::alloc_mw).
#[derive(Clone)]
pub struct MemoryWindow {
    pub(super) ops: Arc<dyn MwOps>,
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemoryWindow({:?} rkey {:#x})", self.mw_type(), self.rkey())
    }
}

impl MemoryWindow {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn MwOps> {
        &self.ops
    }
    /// `mw->rkey`.
    pub fn rkey(&self) -> u32 {
        self.ops.rkey()
    }
    /// `mw->type`.
    pub fn mw_type(&self) -> MwType {
        self.ops.mw_type()
    }
    /// The `wr.bind_mw` of an `IBV_WR_BIND_MW` that binds this window as `info` says, with the
    /// next rkey (`ibv_inc_rkey`), which this handle takes as its rkey at once (as
    /// `ibv_bind_mw` does; a program whose bind fails knows the old one).
    pub fn bind_wr(&self, info: &MwBindInfo<'_>) -> MwBind {
        let mw_rkey = self.rkey();
        let new_rkey = inc_rkey(mw_rkey);
        self.ops.set_rkey(new_rkey);
        MwBind {
            mw_rkey,
            new_rkey,
            mr_lkey: info.mr.map_or(0, |m| m.lkey()),
            addr: info.addr,
            length: info.length,
            access: info.access,
            zero_based: info.zero_based,
        }
    }
    /// `ibv_bind_mw`: binds this type 1 window through `qp` (an `IBV_WR_BIND_MW` posted on it,
    /// completing with `IBV_WC_BIND_MW` if `send_flags` has `IBV_SEND_SIGNALED`), and returns
    /// the window's new rkey. `EINVAL` for a type 2 window, for an MR-less bind with an
    /// address or length, or a zero-based one (as libibverbs and rxe refuse them); `EPERM`
    /// for an MR of another PD is left to the backend, which knows the PDs.
    pub fn bind(
        &self,
        qp: &QueuePair,
        info: &MwBindInfo<'_>,
        wr_id: u64,
        send_flags: SendFlags,
    ) -> Result<u32> {
        if self.mw_type() != MwType::Type1 {
            return Err(Error::inval("ibv_bind_mw: the window is not of type 1"));
        }
        if info.mr.is_none() && (info.addr != 0 || info.length != 0) {
            return Err(Error::inval("ibv_bind_mw: an address or length without an MR"));
        }
        if info.zero_based {
            return Err(Error::inval("ibv_bind_mw: a type 1 window cannot be zero-based"));
        }
        let old = self.rkey();
        let bind_mw = self.bind_wr(info);
        let wr =
            SendWr { wr_id, opcode: WrOpcode::BindMw, send_flags, bind_mw, ..SendWr::default() };
        match qp.post_send(std::slice::from_ref(&wr)) {
            Ok(()) => Ok(bind_mw.new_rkey),
            Err(e) => {
                self.ops.set_rkey(old);
                Err(e)
            }
        }
    }
    /// `ibv_dealloc_mw`: a bound window is unbound first.
    pub fn dealloc(self) -> Result<()> {
        self.ops.dealloc()
    }
}
