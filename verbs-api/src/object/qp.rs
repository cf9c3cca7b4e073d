//! The queue pair (`struct ibv_qp`): the trait a backend implements, the handle a program holds,
//! and the two structs that name other objects — the attributes that create a QP (its CQs and
//! SRQ) and the send work request (its UD address handle).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::ah::AddressHandle;
use super::cq::CompletionQueue;
use super::srq::SharedReceiveQueue;
use crate::error::{Errno, Error, Result};
use crate::types::*;

/// A queue pair (`struct ibv_qp`), as a backend implements it; programs hold a
/// [`QueuePair`].
pub trait QpOps: Send + Sync {
    /// `qp_num`.
    fn qp_num(&self) -> u32;
    /// `qp_type`.
    fn qp_type(&self) -> QpType;
    /// `ibv_post_send`. On error, the WRs before the one named in the message were posted (like `bad_wr`).
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()>;
    /// `ibv_post_recv`.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()>;
    /// `ibv_modify_qp`.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// `ibv_query_qp`: all attributes and the capabilities.
    fn query(&self) -> Result<(QpAttr, QpCap)>;
    /// `ibv_destroy_qp`.
    fn destroy(&self) -> Result<()>;
    /// `ibv_attach_mcast`: the QP receives the UD datagrams sent to the multicast group
    /// `gid` (`lid` is the group's LID, which a RoCE port ignores). A backend without
    /// multicast refuses it (`EOPNOTSUPP`).
    fn attach_mcast(&self, _gid: &Gid, _lid: u16) -> Result<()> {
        Err(Error::new(Errno::NotSup, "ibv_attach_mcast: this backend has no multicast"))
    }
    /// `ibv_detach_mcast`: undoes [`QpOps::attach_mcast`].
    fn detach_mcast(&self, _gid: &Gid, _lid: u16) -> Result<()> {
        Err(Error::new(Errno::NotSup, "ibv_detach_mcast: this backend has no multicast"))
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// Attributes to create a QP (`struct ibv_qp_init_attr`).
#[derive(Clone, Debug)]
pub struct QpInitAttr {
    /// `qp_type`.
    pub qp_type: QpType,
    /// `send_cq`.
    pub send_cq: CompletionQueue,
    /// `recv_cq`.
    pub recv_cq: CompletionQueue,
    /// `srq`: receives come from this SRQ instead of the QP's own receive queue.
    pub srq: Option<SharedReceiveQueue>,
    /// `cap`.
    pub cap: QpCap,
    /// `sq_sig_all`: every send WR generates a completion.
    pub sq_sig_all: bool,
}

/// A queue pair (`struct ibv_qp`).
#[derive(Clone)]
pub struct QueuePair {
    pub(super) ops: Arc<dyn QpOps>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueuePair({:?} {:#x})", self.qp_type(), self.qp_num())
    }
}

impl QueuePair {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn QpOps> {
        &self.ops
    }
    /// `qp->qp_num`.
    pub fn qp_num(&self) -> u32 {
        self.ops.qp_num()
    }
    /// `qp->qp_type`.
    pub fn qp_type(&self) -> QpType {
        self.ops.qp_type()
    }
    /// `ibv_post_send`.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        self.ops.post_send(wrs)
    }
    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.ops.post_recv(wrs)
    }
    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.ops.modify(attr, mask)
    }
    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<(QpAttr, QpCap)> {
        self.ops.query()
    }
    /// The current state (`ibv_query_qp` with `IBV_QP_STATE`).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.ops.query()?.0.qp_state)
    }
    /// `ibv_attach_mcast`: receive the UD datagrams sent to the multicast group `gid`.
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.ops.attach_mcast(gid, lid)
    }
    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.ops.detach_mcast(gid, lid)
    }
    /// `ibv_destroy_qp`.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
}

/// The destination of a UD send (`wr.ud` of `struct ibv_send_wr`).
#[derive(Clone, Debug)]
pub struct UdTarget {
    /// `ah`: the address handle.
    pub ah: AddressHandle,
    /// `remote_qpn`.
    pub remote_qpn: u32,
    /// `remote_qkey`.
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`); a list is a slice of these.
#[derive(Clone, Debug, Default)]
pub struct SendWr<'a> {
    /// `wr_id`, returned in the completion.
    pub wr_id: u64,
    /// `sg_list`: the gather list.
    pub sg_list: &'a [Sge],
    /// `opcode`.
    pub opcode: WrOpcode,
    /// `send_flags`.
    pub send_flags: SendFlags,
    /// `imm_data` (host order here; network order on the wire).
    pub imm_data: u32,
    /// `wr.rdma`, for RDMA WRITE / READ, and the remote address and R_Key of an ATOMIC WRITE
    /// (`ibv_wr_atomic_write`) or a FLUSH (`ibv_wr_flush`).
    pub rdma: RdmaTarget,
    /// `wr.atomic`, for atomics.
    pub atomic: AtomicTarget,
    /// `wr.ud`, for UD sends.
    pub ud: Option<UdTarget>,
    /// `invalidate_rkey`: the rkey an `IBV_WR_LOCAL_INV` or `IBV_WR_SEND_WITH_INV` invalidates.
    pub invalidate_rkey: u32,
    /// `wr.bind_mw`, for `IBV_WR_BIND_MW`.
    pub bind_mw: MwBind,
    /// Inline payload given as bytes rather than SGEs (with [`SendFlags::INLINE`]): softverbs' safe
    /// form of an inline SGE that points at unregistered memory. When set, `sg_list` is ignored.
    /// An ATOMIC WRITE's 8 bytes (`ibv_wr_atomic_write`'s `atomic_wr`) come here or in one
    /// 8-byte SGE.
    pub inline_data: Option<&'a [u8]>,
    /// A FLUSH's length, placement type and level (`ibv_wr_flush`); unused by other opcodes.
    pub flush: FlushTarget,
}
