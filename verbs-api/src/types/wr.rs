//! The verbs vocabulary: the structs, enums and flags of `<infiniband/verbs.h>`, as Rust types.

use std::fmt;

bitflags::bitflags! {
    /// Memory-region access rights (`enum ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the NIC may write this MR for local operations (receives, READ responses, atomic results).
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE into it (requires LOCAL_WRITE).
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ from it.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it (requires LOCAL_WRITE).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

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
    }
}

/// Transport service of a QP (`enum ibv_qp_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// `IBV_QPT_RC`: reliable connected.
    Rc,
    /// `IBV_QPT_UC`: unreliable connected.
    Uc,
    /// `IBV_QPT_UD`: unreliable datagram.
    Ud,
}

/// QP state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    #[default]
    Reset,
    /// `IBV_QPS_INIT`.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error (UC/UD).
    Sqe,
    /// `IBV_QPS_ERR`.
    Err,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        };
        f.write_str(s)
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// `IBV_MTU_256`.
    Mtu256 = 1,
    /// `IBV_MTU_512`.
    Mtu512 = 2,
    /// `IBV_MTU_1024`.
    #[default]
    Mtu1024 = 3,
    /// `IBV_MTU_2048`.
    Mtu2048 = 4,
    /// `IBV_MTU_4096`.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes of payload per packet.
    pub fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }
    /// The enum from a byte count (256, 512, 1024, 2048, 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// The enum from its `ibv_mtu` value (1..=5).
    pub fn from_ibv(v: u32) -> Option<Mtu> {
        Mtu::from_bytes(256u32.checked_shl(v.checked_sub(1)?)?)
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
    /// Whether the QP type can carry this opcode (`ibv_post_send`: READ and atomics are RC only; UD is SEND only).
    pub fn valid_for(self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc => true,
            QpType::Uc => !matches!(
                self,
                WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
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
    /// `IBV_WC_RECV`: a receive consumed by a SEND (or SEND_WITH_IMM).
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// The opcode a successful send-side completion of `op` reports.
    pub fn for_send(op: WrOpcode) -> WcOpcode {
        match op {
            WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
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
            WcOpcode::Recv => "IBV_WC_RECV",
            WcOpcode::RecvRdmaWithImm => "IBV_WC_RECV_RDMA_WITH_IMM",
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

/// A 128-bit global identifier (`union ibv_gid`); softverbs ports use IPv4-mapped GIDs as RoCEv2 does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub fn from_ipv4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }
    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
            Some([g[12], g[13], g[14], g[15]])
        } else {
            None
        }
    }
    /// The subnet prefix (high 64 bits), big-endian.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The interface id (low 64 bits), big-endian.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
}

impl fmt::Display for Gid {
    /// Formats as `ibv_devinfo` does: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    Nop,
    /// `IBV_PORT_DOWN`.
    #[default]
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`.
    Active,
}

impl PortState {
    /// The name `ibv_port_state_str` returns.
    pub fn as_str(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
        }
    }
}

/// Link layer of a port (`IBV_LINK_LAYER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_INFINIBAND`.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE).
    #[default]
    Ethernet,
}

/// Device attributes (`struct ibv_device_attr`), the limits a device enforces.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeviceAttr {
    /// `fw_ver`.
    pub fw_ver: String,
    /// `node_guid`.
    pub node_guid: u64,
    /// `sys_image_guid`.
    pub sys_image_guid: u64,
    /// `max_mr_size`: the largest MR in bytes.
    pub max_mr_size: u64,
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`: WRs per work queue.
    pub max_qp_wr: u32,
    /// `max_sge`: SGEs per WR.
    pub max_sge: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`: entries per CQ.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_pd`.
    pub max_pd: u32,
    /// `max_qp_rd_atom`: outstanding READs/atomics a QP may receive.
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: outstanding READs/atomics a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// `max_srq`.
    pub max_srq: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `max_srq_sge`.
    pub max_srq_sge: u32,
    /// `max_ah`.
    pub max_ah: u32,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `phys_port_cnt`.
    pub phys_port_cnt: u8,
    /// The largest inline data a QP may request (softverbs extension; rdma-core reports it per QP).
    pub max_inline_data: u32,
    /// The largest message in bytes (`ibv_port_attr.max_msg_sz`, repeated here for convenience).
    pub max_msg_sz: u32,
    /// `atomic_cap`: whether atomics are supported and how (true = `IBV_ATOMIC_HCA`).
    pub atomic_hca: bool,
}

/// Port attributes (`struct ibv_port_attr`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PortAttr {
    /// `state`.
    pub state: PortState,
    /// `max_mtu`.
    pub max_mtu: Mtu,
    /// `active_mtu`.
    pub active_mtu: Mtu,
    /// `gid_tbl_len`.
    pub gid_tbl_len: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `lid`: the port's LID, assigned by the fabric.
    pub lid: u16,
    /// `sm_lid`.
    pub sm_lid: u16,
    /// `lmc`.
    pub lmc: u8,
    /// `active_width` (IBTA encoding; 2 = 4x).
    pub active_width: u8,
    /// `active_speed` (IBTA encoding).
    pub active_speed: u8,
    /// `phys_state` (5 = LinkUp).
    pub phys_state: u8,
    /// `link_layer`.
    pub link_layer: LinkLayer,
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

/// The destination of a UD send (`wr.ud` of `struct ibv_send_wr`).
#[derive(Clone, Debug)]
pub struct UdTarget {
    /// `ah`: the address handle.
    pub ah: crate::AddressHandle,
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
    /// `wr.rdma`, for RDMA WRITE / READ.
    pub rdma: RdmaTarget,
    /// `wr.atomic`, for atomics.
    pub atomic: AtomicTarget,
    /// `wr.ud`, for UD sends.
    pub ud: Option<UdTarget>,
    /// Inline payload given as bytes rather than SGEs (with [`SendFlags::INLINE`]): softverbs' safe
    /// form of an inline SGE that points at unregistered memory. When set, `sg_list` is ignored.
    pub inline_data: Option<&'a [u8]>,
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
    /// `imm_data` (host order), valid with [`WcFlags::WITH_IMM`].
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

/// Capacities of a QP (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

/// An address vector (`struct ibv_ah_attr` with its `ibv_global_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
    /// `src_path_bits`.
    pub src_path_bits: u8,
    /// `static_rate`.
    pub static_rate: u8,
    /// `is_global`: whether `grh` is valid (required on RoCE).
    pub is_global: bool,
    /// `port_num`.
    pub port_num: u8,
    /// `grh.dgid`.
    pub dgid: Gid,
    /// `grh.flow_label`.
    pub flow_label: u32,
    /// `grh.sgid_index`.
    pub sgid_index: u8,
    /// `grh.hop_limit`.
    pub hop_limit: u8,
    /// `grh.traffic_class`.
    pub traffic_class: u8,
}

bitflags::bitflags! {
    /// Which `QpAttr` fields a modify or query uses (`enum ibv_qp_attr_mask`, same bit values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`.
        const STATE = 1;
        /// `IBV_QP_CUR_STATE`.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`.
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`.
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`.
        const DEST_QPN = 1 << 20;
    }
}

impl QpAttrMask {
    /// The `IBV_QP_*` name of each set bit, comma-separated.
    pub fn names(self) -> String {
        const NAMES: [&str; 21] = [
            "IBV_QP_STATE",
            "IBV_QP_CUR_STATE",
            "IBV_QP_EN_SQD_ASYNC_NOTIFY",
            "IBV_QP_ACCESS_FLAGS",
            "IBV_QP_PKEY_INDEX",
            "IBV_QP_PORT",
            "IBV_QP_QKEY",
            "IBV_QP_AV",
            "IBV_QP_PATH_MTU",
            "IBV_QP_TIMEOUT",
            "IBV_QP_RETRY_CNT",
            "IBV_QP_RNR_RETRY",
            "IBV_QP_RQ_PSN",
            "IBV_QP_MAX_QP_RD_ATOMIC",
            "IBV_QP_ALT_PATH",
            "IBV_QP_MIN_RNR_TIMER",
            "IBV_QP_SQ_PSN",
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            "IBV_QP_PATH_MIG_STATE",
            "IBV_QP_CAP",
            "IBV_QP_DEST_QPN",
        ];
        let mut out = Vec::new();
        for (i, n) in NAMES.iter().enumerate() {
            if self.bits() & (1 << i) != 0 {
                out.push(*n);
            }
        }
        out.join(", ")
    }
}

/// QP attributes for modify and query (`struct ibv_qp_attr`); which fields count is said by a [`QpAttrMask`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// `qp_state`: the state to move to.
    pub qp_state: QpState,
    /// `cur_qp_state`.
    pub cur_qp_state: QpState,
    /// `path_mtu`.
    pub path_mtu: Mtu,
    /// `qkey` (UD).
    pub qkey: u32,
    /// `rq_psn`: the first PSN the responder expects.
    pub rq_psn: u32,
    /// `sq_psn`: the first PSN the requester sends.
    pub sq_psn: u32,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `qp_access_flags`: which remote operations the responder allows.
    pub qp_access_flags: AccessFlags,
    /// `cap` (query only here).
    pub cap: QpCap,
    /// `ah_attr`: the primary path.
    pub ah_attr: AhAttr,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `en_sqd_async_notify`.
    pub en_sqd_async_notify: bool,
    /// `sq_draining` (query).
    pub sq_draining: bool,
    /// `max_rd_atomic`: outstanding READs/atomics this QP may initiate.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`: outstanding READs/atomics this QP accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`: the RNR NAK timer code this responder advertises (0 = 655.36 ms).
    pub min_rnr_timer: u8,
    /// `port_num`.
    pub port_num: u8,
    /// `timeout`: local ACK timeout, 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// `retry_cnt`: transport retries (0-7).
    pub retry_cnt: u8,
    /// `rnr_retry`: RNR retries (0-6; 7 = infinite).
    pub rnr_retry: u8,
}
