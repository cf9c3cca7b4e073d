//! Work requests and their completions: send flags and opcodes, SGEs, the targets of RDMA and
//! atomic operations, receive WRs, completion opcodes, statuses and `struct ibv_wc`.
//!
//! The send WR (`struct ibv_send_wr`) carries an address handle for UD, so it lives with the
//! queue pair's object in `object/qp.rs`, above the handle it names.

use std::fmt;

use super::qp::{AccessFlags, QpType};

bitflags::bitflags! {
    /// Flags of a send work request (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// `IBV_SEND_FENCE`: wait for earlier READs/atomics before starting this WR.
        const FENCE = 1;
        /// `IBV_SEND_SIGNALED`: generate a work completion even if the QP is not `sq_sig_all`.
        const SIGNALED = 1 << 1;
        /// `IBV_SEND_SOLICITED`: set the solicited-event bit in the last packet.
        const SOLICITED = 1 << 2;
        /// `IBV_SEND_INLINE`: copy the data at post time (no lkey needed).
        const INLINE = 1 << 3;
    }
}

/// Bytes at the start of a UD receive buffer that receive the Global Route Header
/// (`sizeof(struct ibv_grh)`); on RoCEv2 over IPv4 the last 20 of them hold the IPv4 header.
/// A UD receive's `byte_len` counts them.
pub const GRH_LEN: usize = 40;

bitflags::bitflags! {
    /// Flags of a work completion (`enum ibv_wc_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// `IBV_WC_GRH`: the first 40 bytes of the receive buffer hold a GRH (UD).
        const GRH = 1;
        /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// `IBV_WC_WITH_INV`: a SEND WITH INVALIDATE invalidated the rkey that `imm_data`
        /// holds (`ibv_wc_read_invalidated_rkey`; C's `imm_data`/`invalidated_rkey` union).
        const WITH_INV = 1 << 3;
    }
}

/// Operation of a send work request (`enum ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WrOpcode {
    /// `IBV_WR_SEND`.
    #[default]
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm,
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm,
    /// `IBV_WR_RDMA_READ`.
    RdmaRead,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    AtomicCmpAndSwp,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    AtomicFetchAndAdd,
    /// `IBV_WR_ATOMIC_WRITE` (`ibv_wr_atomic_write`, RC only): the 8 bytes of the WR's
    /// `inline_data` (or of its one 8-byte SGE) written at `rdma.remote_addr` in one store,
    /// after every earlier write of the QP is placed (IBA 1.5 9.4.6). The responder needs
    /// `IBV_ACCESS_REMOTE_WRITE`, as for an RDMA WRITE, and an 8-byte-aligned address.
    AtomicWrite,
    /// `IBV_WR_FLUSH` (`ibv_wr_flush`, RC only): make the responder's memory named by
    /// `rdma` and [`SendWr::flush`](crate::SendWr::flush) visible at the placement type asked
    /// (IBA 1.5 9.4.5). The responder needs `IBV_ACCESS_FLUSH_GLOBAL` on the QP and the MR.
    Flush,
    /// `IBV_WR_LOCAL_INV`: invalidate a type 2 memory window's rkey (`invalidate_rkey`) at
    /// this QP's own device.
    LocalInv,
    /// `IBV_WR_BIND_MW`: bind a memory window to a range of an MR (`bind_mw`).
    BindMw,
    /// `IBV_WR_SEND_WITH_INV`: a SEND that invalidates `invalidate_rkey` at the receiver.
    SendWithInv,
}

impl WrOpcode {
    /// The `IBV_WR_*` name.
    pub fn name(self) -> &'static str {
        match self {
            WrOpcode::Send => "IBV_WR_SEND",
            WrOpcode::SendWithImm => "IBV_WR_SEND_WITH_IMM",
            WrOpcode::RdmaWrite => "IBV_WR_RDMA_WRITE",
            WrOpcode::RdmaWriteWithImm => "IBV_WR_RDMA_WRITE_WITH_IMM",
            WrOpcode::RdmaRead => "IBV_WR_RDMA_READ",
            WrOpcode::AtomicCmpAndSwp => "IBV_WR_ATOMIC_CMP_AND_SWP",
            WrOpcode::AtomicFetchAndAdd => "IBV_WR_ATOMIC_FETCH_AND_ADD",
            WrOpcode::AtomicWrite => "IBV_WR_ATOMIC_WRITE",
            WrOpcode::Flush => "IBV_WR_FLUSH",
            WrOpcode::LocalInv => "IBV_WR_LOCAL_INV",
            WrOpcode::BindMw => "IBV_WR_BIND_MW",
            WrOpcode::SendWithInv => "IBV_WR_SEND_WITH_INV",
        }
    }
    /// Whether this opcode carries immediate data.
    pub fn has_imm(self) -> bool {
        matches!(self, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }
    /// Whether this is an atomic.
    pub fn is_atomic(self) -> bool {
        matches!(self, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }
    /// Whether this is a local operation (`IBV_WR_LOCAL_INV`, `IBV_WR_BIND_MW`): done by the
    /// NIC itself, with nothing on the wire.
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::LocalInv | WrOpcode::BindMw)
    }
    /// Whether the QP type can carry this opcode (`ibv_post_send`, rxe's `rxe_wr_opcode_info`:
    /// READ, atomics, ATOMIC WRITE, FLUSH, LOCAL_INV and SEND_WITH_INV are RC only, BIND_MW RC
    /// and UC; UD is SEND only).
    pub fn valid_for(self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc => true,
            QpType::Uc => !matches!(
                self,
                WrOpcode::RdmaRead
                    | WrOpcode::AtomicCmpAndSwp
                    | WrOpcode::AtomicFetchAndAdd
                    | WrOpcode::AtomicWrite
                    | WrOpcode::Flush
                    | WrOpcode::LocalInv
                    | WrOpcode::SendWithInv
            ),
            QpType::Ud => matches!(self, WrOpcode::Send | WrOpcode::SendWithImm),
        }
    }
}

/// Operation a work completion reports (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    #[default]
    Send,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd,
    /// `IBV_WC_BIND_MW`: a memory window bind (`ibv_bind_mw`, `IBV_WR_BIND_MW`).
    BindMw,
    /// `IBV_WC_LOCAL_INV`: an `IBV_WR_LOCAL_INV`.
    LocalInv,
    /// `IBV_WC_RECV`: a receive consumed by a SEND (or SEND_WITH_IMM).
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// `IBV_WC_FLUSH`: a FLUSH completed.
    Flush,
    /// `IBV_WC_ATOMIC_WRITE`: an ATOMIC WRITE completed.
    AtomicWrite,
}

impl WcOpcode {
    /// The opcode a successful send-side completion of `op` reports.
    pub fn for_send(op: WrOpcode) -> WcOpcode {
        match op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
            WrOpcode::Flush => WcOpcode::Flush,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
        }
    }
    /// The `IBV_WC_*` name.
    pub fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "IBV_WC_SEND",
            WcOpcode::RdmaWrite => "IBV_WC_RDMA_WRITE",
            WcOpcode::RdmaRead => "IBV_WC_RDMA_READ",
            WcOpcode::CompSwap => "IBV_WC_COMP_SWAP",
            WcOpcode::FetchAdd => "IBV_WC_FETCH_ADD",
            WcOpcode::BindMw => "IBV_WC_BIND_MW",
            WcOpcode::LocalInv => "IBV_WC_LOCAL_INV",
            WcOpcode::Recv => "IBV_WC_RECV",
            WcOpcode::RecvRdmaWithImm => "IBV_WC_RECV_RDMA_WITH_IMM",
            WcOpcode::Flush => "IBV_WC_FLUSH",
            WcOpcode::AtomicWrite => "IBV_WC_ATOMIC_WRITE",
        }
    }
}

/// Status of a work completion (`enum ibv_wc_status`), with the same meanings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: a receive buffer too small, or a message longer than allowed.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`: an internal QP consistency error (e.g. a WQE the QP cannot execute).
    LocQpOpErr,
    /// `IBV_WC_LOC_EEC_OP_ERR` (RD only; never produced).
    LocEecOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: a local SGE's lkey, bounds or access rights are wrong.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP is in the error state.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR`: an unexpected response opcode.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`: a protection error on a local data buffer during an incoming RDMA.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid (length, opcode).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: the responder refused the rkey, bounds or access rights.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: the local ACK timeout and `retry_cnt` ran out.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: RNR NAKs exhausted `rnr_retry`.
    RnrRetryExcErr,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LocRddViolErr,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemInvRdReqErr,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr,
    /// `IBV_WC_INV_EECN_ERR`.
    InvEecnErr,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    InvEecStateErr,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr,
}

impl WcStatus {
    /// The string `ibv_wc_status_str` returns.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "operation aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
    /// The `IBV_WC_*` name.
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
            WcStatus::RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            WcStatus::RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            WcStatus::InvEecnErr => "IBV_WC_INV_EECN_ERR",
            WcStatus::InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
            WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
            WcStatus::RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scatter/gather element (`struct ibv_sge`): `length` bytes at virtual address `addr` of the MR whose lkey is `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// `addr`: a virtual address inside the MR.
    pub addr: u64,
    /// `length` in bytes.
    pub length: u32,
    /// `lkey` of the MR.
    pub lkey: u32,
}

/// The remote side of an RDMA WRITE or READ (`wr.rdma` of `struct ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RdmaTarget {
    /// `remote_addr`.
    pub remote_addr: u64,
    /// `rkey`.
    pub rkey: u32,
}

/// The operands of an atomic (`wr.atomic` of `struct ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AtomicTarget {
    /// `remote_addr`: 8-byte aligned.
    pub remote_addr: u64,
    /// `rkey`.
    pub rkey: u32,
    /// `compare_add`: the value to compare (CAS) or add (FETCH_ADD).
    pub compare_add: u64,
    /// `swap`: the value to swap in (CAS).
    pub swap: u64,
}

bitflags::bitflags! {
    /// The placement type of a FLUSH (`IBV_FLUSH_GLOBAL`, `IBV_FLUSH_PERSISTENT` of
    /// `ibv_wr_flush`'s `type`; the FETH's placement type bits 3–0, IBA 1.5 9.4.5).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct FlushType: u8 {
        /// `IBV_FLUSH_GLOBAL`: the data is visible to every reader of the memory (global
        /// visibility). Needs `IBV_ACCESS_FLUSH_GLOBAL`.
        const GLOBAL = 1;
        /// `IBV_FLUSH_PERSISTENT`: the data is persistent. Needs
        /// `IBV_ACCESS_FLUSH_PERSISTENT`, which rxe, and softverbs, grant no MR: no memory
        /// here is persistent memory.
        const PERSISTENT = 1 << 1;
    }
}

/// What a FLUSH covers (`ibv_wr_flush`'s `level`; the FETH's selectivity bits 5–4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum FlushLevel {
    /// `IBV_FLUSH_RANGE`: the bytes `[remote_addr, +len)`.
    #[default]
    Range,
    /// `IBV_FLUSH_MR`: the whole MR the R_Key names (address and length are not checked).
    Mr,
}

impl FlushLevel {
    /// The `IBV_FLUSH_*` value, as the FETH's selectivity field carries it.
    pub fn to_ibv(self) -> u8 {
        match self {
            FlushLevel::Range => 0,
            FlushLevel::Mr => 1,
        }
    }
    /// The level of an `IBV_FLUSH_*` value; None for another value.
    pub fn from_ibv(v: u8) -> Option<FlushLevel> {
        match v {
            0 => Some(FlushLevel::Range),
            1 => Some(FlushLevel::Mr),
            _ => None,
        }
    }
}

/// A FLUSH's own operands (`ibv_wr_flush`'s `len`, `type` and `level`); its address and R_Key
/// are the WR's `rdma`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FlushTarget {
    /// Bytes from `rdma.remote_addr` (the RETH's DMA length; ignored for [`FlushLevel::Mr`]).
    pub len: u32,
    /// The placement type asked for.
    pub placement: FlushType,
    /// Range or whole MR.
    pub level: FlushLevel,
}

/// What a memory window bind sets (`wr.bind_mw` of `struct ibv_send_wr`, with its
/// `struct ibv_mw_bind_info`), by keys as the NIC sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MwBind {
    /// The window's current rkey (`bind_mw.mw->rkey`).
    pub mw_rkey: u32,
    /// Its rkey once bound (`bind_mw.rkey`): the same index, a new key byte (`ibv_inc_rkey`).
    pub new_rkey: u32,
    /// The MR's lkey (`bind_info.mr->lkey`); unused when `length` is 0.
    pub mr_lkey: u32,
    /// `bind_info.addr`: the window's first byte, an address of the MR.
    pub addr: u64,
    /// `bind_info.length`: 0 unbinds a type 1 window.
    pub length: u64,
    /// `bind_info.mw_access_flags` (the remote rights the window grants), without
    /// `IBV_ACCESS_ZERO_BASED`, which is [`MwBind::zero_based`].
    pub access: AccessFlags,
    /// `IBV_ACCESS_ZERO_BASED`: peers name the window's bytes from 0, not from `addr`.
    pub zero_based: bool,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvWr<'a> {
    /// `wr_id`.
    pub wr_id: u64,
    /// `sg_list`: the scatter list.
    pub sg_list: &'a [Sge],
}

/// A work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// `wr_id` of the WR.
    pub wr_id: u64,
    /// `status`.
    pub status: WcStatus,
    /// `opcode` (valid when status is success, as in libibverbs).
    pub opcode: WcOpcode,
    /// `vendor_err`.
    pub vendor_err: u32,
    /// `byte_len`: bytes received (receives) or transferred (READ, atomics: 8).
    pub byte_len: u32,
    /// `imm_data` (host order), valid with [`WcFlags::WITH_IMM`]; with [`WcFlags::WITH_INV`],
    /// the invalidated rkey (`invalidated_rkey`, which shares its place in C).
    pub imm_data: u32,
    /// `qp_num`: the local QP.
    pub qp_num: u32,
    /// `src_qp`: the remote QP (receives).
    pub src_qp: u32,
    /// `wc_flags`.
    pub wc_flags: WcFlags,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `slid`: the source LID (receives).
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
}
