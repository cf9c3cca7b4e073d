//! Queue pairs and shared receive queues: the transport type, the state, capacities, the
//! attributes a modify sets and their mask, the address vector, and the access rights a QP and
//! an MR grant (`enum ibv_qp_type`, `enum ibv_qp_state`, `struct ibv_qp_cap`,
//! `struct ibv_qp_attr`, `struct ibv_ah_attr`, `struct ibv_srq_attr`, `enum ibv_access_flags`).

use std::fmt;

use super::device::{Gid, Mtu};

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
        /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to this MR (`ibv_bind_mw`,
        /// `IBV_WR_BIND_MW`).
        const MW_BIND = 1 << 4;
        /// `IBV_ACCESS_FLUSH_GLOBAL`: peers may FLUSH it for global visibility (on a QP:
        /// the QP takes such FLUSHes).
        const FLUSH_GLOBAL = 1 << 8;
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

/// Attributes to create an SRQ (`struct ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqInitAttr {
    /// `attr.max_wr`.
    pub max_wr: u32,
    /// `attr.max_sge`.
    pub max_sge: u32,
    /// `attr.srq_limit`.
    pub srq_limit: u32,
}

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// `max_wr`.
    pub max_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `srq_limit`.
    pub srq_limit: u32,
}

bitflags::bitflags! {
    /// Which SRQ attributes a modify changes (`enum ibv_srq_attr_mask`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct SrqAttrMask: u32 {
        /// `IBV_SRQ_MAX_WR` (resize).
        const MAX_WR = 1;
        /// `IBV_SRQ_LIMIT` (arm the limit event).
        const LIMIT = 1 << 1;
    }
}
