//! Pure conversions between the softverbs vocabulary and libibverbs' C structs and enums. No
//! verb is called here, so every mapping is unit-tested against the constants of the bindings.
//! The enums' values come from [`crate::ibv`]'s tables (one per enum, shared with the C
//! libraries and the tests' codec); the pairs below only check those tables against `rdma-sys`.

use std::ffi::{c_char, c_int, c_uint};

use rdma_sys::{
    ibv_ah_attr, ibv_atomic_cap, ibv_device_attr, ibv_gid, ibv_global_route, ibv_mtu,
    ibv_port_attr, ibv_port_state, ibv_qp_attr, ibv_qp_cap, ibv_qp_state, ibv_qp_type, ibv_wc,
    ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode,
};

#[cfg(test)]
use rdma_sys::ibv_event_type;

use crate::ibv::IbvEnum;
use crate::types::AsyncEventType;
use crate::types::*;

/// `IBV_LINK_LAYER_*` (preprocessor macros in verbs.h, so not in the bindings), for the tests.
#[cfg(test)]
pub(crate) const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `IBV_LINK_LAYER_INFINIBAND`.
#[cfg(test)]
pub(crate) const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
#[cfg(test)]
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// Every `ibv_qp_attr_mask` bit softverbs knows (`IBV_QP_STATE` ..= `IBV_QP_DEST_QPN`).
pub(crate) const QP_ATTR_MASK_ALL: c_int = (1 << 21) - 1;

/// The bindings' constant for each variant, per enum: the tests hold [`crate::ibv`]'s tables to
/// them.
#[cfg(test)]
const QP_STATES: [(QpState, ibv_qp_state::Type); 7] = [
    (QpState::Reset, ibv_qp_state::IBV_QPS_RESET),
    (QpState::Init, ibv_qp_state::IBV_QPS_INIT),
    (QpState::Rtr, ibv_qp_state::IBV_QPS_RTR),
    (QpState::Rts, ibv_qp_state::IBV_QPS_RTS),
    (QpState::Sqd, ibv_qp_state::IBV_QPS_SQD),
    (QpState::Sqe, ibv_qp_state::IBV_QPS_SQE),
    (QpState::Err, ibv_qp_state::IBV_QPS_ERR),
];

#[cfg(test)]
const QP_TYPES: [(QpType, ibv_qp_type::Type); 3] = [
    (QpType::Rc, ibv_qp_type::IBV_QPT_RC),
    (QpType::Uc, ibv_qp_type::IBV_QPT_UC),
    (QpType::Ud, ibv_qp_type::IBV_QPT_UD),
];

#[cfg(test)]
const WR_OPCODES: [(WrOpcode, ibv_wr_opcode::Type); 10] = [
    (WrOpcode::Send, ibv_wr_opcode::IBV_WR_SEND),
    (WrOpcode::SendWithImm, ibv_wr_opcode::IBV_WR_SEND_WITH_IMM),
    (WrOpcode::RdmaWrite, ibv_wr_opcode::IBV_WR_RDMA_WRITE),
    (WrOpcode::RdmaWriteWithImm, ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM),
    (WrOpcode::RdmaRead, ibv_wr_opcode::IBV_WR_RDMA_READ),
    (WrOpcode::AtomicCmpAndSwp, ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP),
    (WrOpcode::AtomicFetchAndAdd, ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD),
    (WrOpcode::LocalInv, ibv_wr_opcode::IBV_WR_LOCAL_INV),
    (WrOpcode::BindMw, ibv_wr_opcode::IBV_WR_BIND_MW),
    (WrOpcode::SendWithInv, ibv_wr_opcode::IBV_WR_SEND_WITH_INV),
];

#[cfg(test)]
const WC_OPCODES: [(WcOpcode, ibv_wc_opcode::Type); 9] = [
    (WcOpcode::Send, ibv_wc_opcode::IBV_WC_SEND),
    (WcOpcode::RdmaWrite, ibv_wc_opcode::IBV_WC_RDMA_WRITE),
    (WcOpcode::RdmaRead, ibv_wc_opcode::IBV_WC_RDMA_READ),
    (WcOpcode::CompSwap, ibv_wc_opcode::IBV_WC_COMP_SWAP),
    (WcOpcode::FetchAdd, ibv_wc_opcode::IBV_WC_FETCH_ADD),
    (WcOpcode::BindMw, ibv_wc_opcode::IBV_WC_BIND_MW),
    (WcOpcode::LocalInv, ibv_wc_opcode::IBV_WC_LOCAL_INV),
    (WcOpcode::Recv, ibv_wc_opcode::IBV_WC_RECV),
    (WcOpcode::RecvRdmaWithImm, ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM),
];

#[cfg(test)]
const WC_STATUSES: [(WcStatus, ibv_wc_status::Type); 22] = [
    (WcStatus::Success, ibv_wc_status::IBV_WC_SUCCESS),
    (WcStatus::LocLenErr, ibv_wc_status::IBV_WC_LOC_LEN_ERR),
    (WcStatus::LocQpOpErr, ibv_wc_status::IBV_WC_LOC_QP_OP_ERR),
    (WcStatus::LocEecOpErr, ibv_wc_status::IBV_WC_LOC_EEC_OP_ERR),
    (WcStatus::LocProtErr, ibv_wc_status::IBV_WC_LOC_PROT_ERR),
    (WcStatus::WrFlushErr, ibv_wc_status::IBV_WC_WR_FLUSH_ERR),
    (WcStatus::MwBindErr, ibv_wc_status::IBV_WC_MW_BIND_ERR),
    (WcStatus::BadRespErr, ibv_wc_status::IBV_WC_BAD_RESP_ERR),
    (WcStatus::LocAccessErr, ibv_wc_status::IBV_WC_LOC_ACCESS_ERR),
    (WcStatus::RemInvReqErr, ibv_wc_status::IBV_WC_REM_INV_REQ_ERR),
    (WcStatus::RemAccessErr, ibv_wc_status::IBV_WC_REM_ACCESS_ERR),
    (WcStatus::RemOpErr, ibv_wc_status::IBV_WC_REM_OP_ERR),
    (WcStatus::RetryExcErr, ibv_wc_status::IBV_WC_RETRY_EXC_ERR),
    (WcStatus::RnrRetryExcErr, ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR),
    (WcStatus::LocRddViolErr, ibv_wc_status::IBV_WC_LOC_RDD_VIOL_ERR),
    (WcStatus::RemInvRdReqErr, ibv_wc_status::IBV_WC_REM_INV_RD_REQ_ERR),
    (WcStatus::RemAbortErr, ibv_wc_status::IBV_WC_REM_ABORT_ERR),
    (WcStatus::InvEecnErr, ibv_wc_status::IBV_WC_INV_EECN_ERR),
    (WcStatus::InvEecStateErr, ibv_wc_status::IBV_WC_INV_EEC_STATE_ERR),
    (WcStatus::FatalErr, ibv_wc_status::IBV_WC_FATAL_ERR),
    (WcStatus::RespTimeoutErr, ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR),
    (WcStatus::GeneralErr, ibv_wc_status::IBV_WC_GENERAL_ERR),
];

#[cfg(test)]
const PORT_STATES: [(PortState, ibv_port_state::Type); 6] = [
    (PortState::Nop, ibv_port_state::IBV_PORT_NOP),
    (PortState::Down, ibv_port_state::IBV_PORT_DOWN),
    (PortState::Init, ibv_port_state::IBV_PORT_INIT),
    (PortState::Armed, ibv_port_state::IBV_PORT_ARMED),
    (PortState::Active, ibv_port_state::IBV_PORT_ACTIVE),
    // "Active, deferred": the link is up and usable; softverbs has no separate state for it.
    (PortState::Active, ibv_port_state::IBV_PORT_ACTIVE_DEFER),
];

/// The async events softverbs can name. The others (path migration, LID/P_Key/SM/GID changes,
/// client reregister, SRQ and WQ errors) have no [`AsyncEventType`].
#[cfg(test)]
const EVENT_TYPES: [(AsyncEventType, ibv_event_type); 11] = [
    (AsyncEventType::CqErr, ibv_event_type::IBV_EVENT_CQ_ERR),
    (AsyncEventType::QpFatal, ibv_event_type::IBV_EVENT_QP_FATAL),
    (AsyncEventType::QpReqErr, ibv_event_type::IBV_EVENT_QP_REQ_ERR),
    (AsyncEventType::QpAccessErr, ibv_event_type::IBV_EVENT_QP_ACCESS_ERR),
    (AsyncEventType::CommEst, ibv_event_type::IBV_EVENT_COMM_EST),
    (AsyncEventType::SqDrained, ibv_event_type::IBV_EVENT_SQ_DRAINED),
    (AsyncEventType::QpLastWqeReached, ibv_event_type::IBV_EVENT_QP_LAST_WQE_REACHED),
    (AsyncEventType::SrqLimitReached, ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED),
    (AsyncEventType::PortActive, ibv_event_type::IBV_EVENT_PORT_ACTIVE),
    (AsyncEventType::PortErr, ibv_event_type::IBV_EVENT_PORT_ERR),
    (AsyncEventType::DeviceFatal, ibv_event_type::IBV_EVENT_DEVICE_FATAL),
];

/// `QpState` → `enum ibv_qp_state`.
pub(crate) fn qp_state_to_ibv(s: QpState) -> ibv_qp_state::Type {
    s.to_ibv()
}
/// `enum ibv_qp_state` → `QpState` (`IBV_QPS_UNKNOWN` and other values: `None`).
pub(crate) fn qp_state_from_ibv(s: ibv_qp_state::Type) -> Option<QpState> {
    QpState::from_ibv(s)
}
/// `QpType` → `enum ibv_qp_type`.
pub(crate) fn qp_type_to_ibv(t: QpType) -> ibv_qp_type::Type {
    t.to_ibv()
}
#[cfg(test)]
/// `enum ibv_qp_type` → `QpType` (XRC, raw packet and driver QPs: `None`).
pub(crate) fn qp_type_from_ibv(t: ibv_qp_type::Type) -> Option<QpType> {
    QpType::from_ibv(t)
}
/// `WrOpcode` → `enum ibv_wr_opcode`.
pub(crate) fn wr_opcode_to_ibv(op: WrOpcode) -> ibv_wr_opcode::Type {
    op.to_ibv()
}
#[cfg(test)]
/// `WcOpcode` → `enum ibv_wc_opcode`.
pub(crate) fn wc_opcode_to_ibv(op: WcOpcode) -> ibv_wc_opcode::Type {
    op.to_ibv()
}
/// `enum ibv_wc_opcode` → `WcOpcode`. softverbs posts no TSO, flush, atomic-write or
/// tag-matching WRs, so those never complete; should one appear, a receive-side opcode (bit 7
/// set) reads as `Recv` and a send-side one as `Send`.
pub(crate) fn wc_opcode_from_ibv(op: ibv_wc_opcode::Type) -> WcOpcode {
    WcOpcode::from_ibv(op).unwrap_or(if op & ibv_wc_opcode::IBV_WC_RECV != 0 {
        WcOpcode::Recv
    } else {
        WcOpcode::Send
    })
}
#[cfg(test)]
/// `WcStatus` → `enum ibv_wc_status`.
pub(crate) fn wc_status_to_ibv(s: WcStatus) -> ibv_wc_status::Type {
    s.to_ibv()
}
/// `enum ibv_wc_status` → `WcStatus`; the tag-matching statuses (and anything newer) are
/// `GeneralErr`.
pub(crate) fn wc_status_from_ibv(s: ibv_wc_status::Type) -> WcStatus {
    WcStatus::from_ibv(s).unwrap_or(WcStatus::GeneralErr)
}
/// `enum ibv_port_state` → `PortState` (unknown values: `Down`).
pub(crate) fn port_state_from_ibv(s: ibv_port_state::Type) -> PortState {
    PortState::from_ibv(s).unwrap_or(PortState::Down)
}
/// `enum ibv_event_type` (as the raw integer) → `AsyncEventType`.
pub(crate) fn event_type_from_ibv(t: c_uint) -> Option<AsyncEventType> {
    AsyncEventType::from_ibv(t)
}
/// `enum ibv_mtu` → `Mtu` (unknown values: 1024, the smallest MTU every RoCE port supports).
pub(crate) fn mtu_from_ibv(m: ibv_mtu::Type) -> Mtu {
    Mtu::from_ibv(m).unwrap_or(Mtu::Mtu1024)
}
/// `Mtu` → `enum ibv_mtu`.
pub(crate) fn mtu_to_ibv(m: Mtu) -> ibv_mtu::Type {
    m.to_ibv()
}
/// `IBV_LINK_LAYER_*` → `LinkLayer`; "unspecified" is InfiniBand, as libibverbs treats it.
pub(crate) fn link_layer_from_ibv(l: u8) -> LinkLayer {
    // A link layer newer than this code: the verbs behave as on InfiniBand.
    LinkLayer::from_ibv(l.into()).unwrap_or(LinkLayer::InfiniBand)
}

/// `Gid` → `union ibv_gid`.
pub(crate) fn gid_to_ibv(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}
/// `union ibv_gid` → `Gid`.
pub(crate) fn gid_from_ibv(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`.
    Gid(unsafe { g.raw })
}

/// `AhAttr` → `struct ibv_ah_attr`.
pub(crate) fn ah_attr_to_ibv(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: gid_to_ibv(a.dgid),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}
/// `struct ibv_ah_attr` → `AhAttr`.
pub(crate) fn ah_attr_from_ibv(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
        dgid: gid_from_ibv(&a.grh.dgid),
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
    }
}

/// `QpCap` → `struct ibv_qp_cap`.
pub(crate) fn qp_cap_to_ibv(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}
/// `struct ibv_qp_cap` → `QpCap`.
pub(crate) fn qp_cap_from_ibv(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// An all-zero `struct ibv_qp_attr`.
pub(crate) fn zeroed_qp_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is integers, u8 arrays and the 16-byte GID union: all-zero is valid
    // (and is what C callers get from `memset(&attr, 0, sizeof attr)`).
    unsafe { std::mem::MaybeUninit::<ibv_qp_attr>::zeroed().assume_init() }
}

/// `QpAttr` → `struct ibv_qp_attr`, field for field. softverbs has no alternate path or
/// migration state, so `alt_*` stay zero and `path_mig_state` is `IBV_MIG_MIGRATED` (0).
pub(crate) fn qp_attr_to_ibv(a: &QpAttr) -> ibv_qp_attr {
    let mut c = zeroed_qp_attr();
    c.qp_state = qp_state_to_ibv(a.qp_state);
    c.cur_qp_state = qp_state_to_ibv(a.cur_qp_state);
    c.path_mtu = mtu_to_ibv(a.path_mtu);
    c.qkey = a.qkey;
    c.rq_psn = a.rq_psn;
    c.sq_psn = a.sq_psn;
    c.dest_qp_num = a.dest_qp_num;
    c.qp_access_flags = a.qp_access_flags.bits();
    c.cap = qp_cap_to_ibv(&a.cap);
    c.ah_attr = ah_attr_to_ibv(&a.ah_attr);
    c.pkey_index = a.pkey_index;
    c.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
    c.sq_draining = u8::from(a.sq_draining);
    c.max_rd_atomic = a.max_rd_atomic;
    c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    c.min_rnr_timer = a.min_rnr_timer;
    c.port_num = a.port_num;
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c
}

/// `struct ibv_qp_attr` → `QpAttr`, or the raw state if it is not one softverbs knows.
pub(crate) fn qp_attr_from_ibv(c: &ibv_qp_attr) -> Result<QpAttr, ibv_qp_state::Type> {
    let qp_state = qp_state_from_ibv(c.qp_state).ok_or(c.qp_state)?;
    Ok(QpAttr {
        qp_state,
        cur_qp_state: qp_state_from_ibv(c.cur_qp_state).unwrap_or(qp_state),
        path_mtu: mtu_from_ibv(c.path_mtu),
        qkey: c.qkey,
        rq_psn: c.rq_psn,
        sq_psn: c.sq_psn,
        dest_qp_num: c.dest_qp_num,
        qp_access_flags: AccessFlags::from_bits_truncate(c.qp_access_flags),
        cap: qp_cap_from_ibv(&c.cap),
        ah_attr: ah_attr_from_ibv(&c.ah_attr),
        pkey_index: c.pkey_index,
        en_sqd_async_notify: c.en_sqd_async_notify != 0,
        sq_draining: c.sq_draining != 0,
        max_rd_atomic: c.max_rd_atomic,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        port_num: c.port_num,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
    })
}

/// `struct ibv_wc` → `WorkCompletion`. Immediate data arrives in network order and is
/// returned in host order, and only when `IBV_WC_WITH_IMM` says it is there (the same union
/// holds an invalidated rkey otherwise).
pub(crate) fn wc_from_ibv(c: &ibv_wc) -> WorkCompletion {
    let wc_flags = WcFlags::from_bits_truncate(c.wc_flags);
    let imm_data = if wc_flags.contains(WcFlags::WITH_IMM) {
        // SAFETY: both members of the union are u32, so any value the provider wrote is valid.
        u32::from_be(unsafe { c.imm_data_invalidated_rkey_union.imm_data })
    } else if wc_flags.contains(WcFlags::WITH_INV) {
        // SAFETY: as above; the invalidated rkey is in host order.
        unsafe { c.imm_data_invalidated_rkey_union.invalidated_rkey }
    } else {
        0
    };
    WorkCompletion {
        wr_id: c.wr_id,
        status: wc_status_from_ibv(c.status),
        opcode: wc_opcode_from_ibv(c.opcode),
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        imm_data,
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags,
        pkey_index: c.pkey_index,
        slid: c.slid,
        sl: c.sl,
        dlid_path_bits: c.dlid_path_bits,
    }
}

/// A C `int` count or limit as `u32`; a negative value (never meaningful) reads as 0.
fn count(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// A NUL-terminated `char` array (at most its length) as a `String`.
pub(crate) fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `struct ibv_device_attr` → `DeviceAttr`. `max_msg_sz` comes from port 1 (the C struct has
/// none); `max_inline_data` is 0 because libibverbs reports it per QP, not per device: ask for
/// what you need in `QpCap` and read back what `ibv_create_qp` granted with `query()`.
pub(crate) fn device_attr_from_ibv(c: &ibv_device_attr, max_msg_sz: u32) -> DeviceAttr {
    DeviceAttr {
        fw_ver: c_chars_to_string(&c.fw_ver),
        node_guid: u64::from_be(c.node_guid),
        sys_image_guid: u64::from_be(c.sys_image_guid),
        max_mr_size: c.max_mr_size,
        vendor_id: c.vendor_id,
        vendor_part_id: c.vendor_part_id,
        hw_ver: c.hw_ver,
        max_qp: count(c.max_qp),
        max_qp_wr: count(c.max_qp_wr),
        max_sge: count(c.max_sge),
        max_cq: count(c.max_cq),
        max_cqe: count(c.max_cqe),
        max_mr: count(c.max_mr),
        max_pd: count(c.max_pd),
        max_qp_rd_atom: count(c.max_qp_rd_atom),
        max_qp_init_rd_atom: count(c.max_qp_init_rd_atom),
        max_srq: count(c.max_srq),
        max_srq_wr: count(c.max_srq_wr),
        max_srq_sge: count(c.max_srq_sge),
        max_ah: count(c.max_ah),
        max_pkeys: c.max_pkeys,
        max_mcast_grp: count(c.max_mcast_grp),
        max_mcast_qp_attach: count(c.max_mcast_qp_attach),
        max_total_mcast_qp_attach: count(c.max_total_mcast_qp_attach),
        phys_port_cnt: c.phys_port_cnt,
        max_inline_data: 0,
        max_msg_sz,
        atomic_hca: c.atomic_cap != ibv_atomic_cap::IBV_ATOMIC_NONE,
    }
}

/// `struct ibv_port_attr` → `PortAttr`.
pub(crate) fn port_attr_from_ibv(c: &ibv_port_attr) -> PortAttr {
    PortAttr {
        state: port_state_from_ibv(c.state),
        max_mtu: mtu_from_ibv(c.max_mtu),
        active_mtu: mtu_from_ibv(c.active_mtu),
        gid_tbl_len: count(c.gid_tbl_len),
        port_cap_flags: c.port_cap_flags,
        max_msg_sz: c.max_msg_sz,
        pkey_tbl_len: c.pkey_tbl_len,
        lid: c.lid,
        sm_lid: c.sm_lid,
        lmc: c.lmc,
        active_width: c.active_width,
        active_speed: c.active_speed,
        phys_state: c.phys_state,
        link_layer: link_layer_from_ibv(c.link_layer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SrqAttrMask;
    use rdma_sys::{
        ibv_access_flags, ibv_qp_attr_mask, ibv_send_flags, ibv_srq_attr_mask, ibv_wc_flags,
        imm_data_invalidated_rkey_union_t,
    };

    #[test]
    fn qp_attr_mask_bits_are_the_c_constants() {
        let pairs = [
            (QpAttrMask::STATE, ibv_qp_attr_mask::IBV_QP_STATE),
            (QpAttrMask::CUR_STATE, ibv_qp_attr_mask::IBV_QP_CUR_STATE),
            (QpAttrMask::EN_SQD_ASYNC_NOTIFY, ibv_qp_attr_mask::IBV_QP_EN_SQD_ASYNC_NOTIFY),
            (QpAttrMask::ACCESS_FLAGS, ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS),
            (QpAttrMask::PKEY_INDEX, ibv_qp_attr_mask::IBV_QP_PKEY_INDEX),
            (QpAttrMask::PORT, ibv_qp_attr_mask::IBV_QP_PORT),
            (QpAttrMask::QKEY, ibv_qp_attr_mask::IBV_QP_QKEY),
            (QpAttrMask::AV, ibv_qp_attr_mask::IBV_QP_AV),
            (QpAttrMask::PATH_MTU, ibv_qp_attr_mask::IBV_QP_PATH_MTU),
            (QpAttrMask::TIMEOUT, ibv_qp_attr_mask::IBV_QP_TIMEOUT),
            (QpAttrMask::RETRY_CNT, ibv_qp_attr_mask::IBV_QP_RETRY_CNT),
            (QpAttrMask::RNR_RETRY, ibv_qp_attr_mask::IBV_QP_RNR_RETRY),
            (QpAttrMask::RQ_PSN, ibv_qp_attr_mask::IBV_QP_RQ_PSN),
            (QpAttrMask::MAX_QP_RD_ATOMIC, ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC),
            (QpAttrMask::ALT_PATH, ibv_qp_attr_mask::IBV_QP_ALT_PATH),
            (QpAttrMask::MIN_RNR_TIMER, ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER),
            (QpAttrMask::SQ_PSN, ibv_qp_attr_mask::IBV_QP_SQ_PSN),
            (QpAttrMask::MAX_DEST_RD_ATOMIC, ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC),
            (QpAttrMask::PATH_MIG_STATE, ibv_qp_attr_mask::IBV_QP_PATH_MIG_STATE),
            (QpAttrMask::CAP, ibv_qp_attr_mask::IBV_QP_CAP),
            (QpAttrMask::DEST_QPN, ibv_qp_attr_mask::IBV_QP_DEST_QPN),
        ];
        let mut union = 0;
        for (ours, theirs) in pairs {
            assert_eq!(ours.bits(), theirs.0, "{}", ours.names());
            union |= theirs.0;
        }
        assert_eq!(union, QpAttrMask::all().bits());
        assert_eq!(union as c_int, QP_ATTR_MASK_ALL);
    }

    #[test]
    fn flag_bits_are_the_c_constants() {
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
        assert_eq!(AccessFlags::REMOTE_WRITE.bits(), ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
        assert_eq!(AccessFlags::REMOTE_READ.bits(), ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
        assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0);
        assert_eq!(SendFlags::FENCE.bits(), ibv_send_flags::IBV_SEND_FENCE.0);
        assert_eq!(SendFlags::SIGNALED.bits(), ibv_send_flags::IBV_SEND_SIGNALED.0);
        assert_eq!(SendFlags::SOLICITED.bits(), ibv_send_flags::IBV_SEND_SOLICITED.0);
        assert_eq!(SendFlags::INLINE.bits(), ibv_send_flags::IBV_SEND_INLINE.0);
        assert_eq!(WcFlags::GRH.bits(), ibv_wc_flags::IBV_WC_GRH.0);
        assert_eq!(WcFlags::WITH_IMM.bits(), ibv_wc_flags::IBV_WC_WITH_IMM.0);
        assert_eq!(WcFlags::WITH_INV.bits(), ibv_wc_flags::IBV_WC_WITH_INV.0);
        assert_eq!(SrqAttrMask::MAX_WR.bits(), ibv_srq_attr_mask::IBV_SRQ_MAX_WR.0);
        assert_eq!(SrqAttrMask::LIMIT.bits(), ibv_srq_attr_mask::IBV_SRQ_LIMIT.0);
    }

    #[test]
    fn enum_tables_round_trip() {
        for (s, c) in WC_STATUSES {
            assert_eq!(wc_status_from_ibv(wc_status_to_ibv(s)), s);
            assert_eq!(wc_status_to_ibv(wc_status_from_ibv(c)), c);
        }
        // Every ibv_wc_status up to IBV_WC_GENERAL_ERR is listed, in order.
        for (i, (_, c)) in WC_STATUSES.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        assert_eq!(wc_status_from_ibv(ibv_wc_status::IBV_WC_TM_ERR), WcStatus::GeneralErr);
        for (op, c) in WC_OPCODES {
            assert_eq!(wc_opcode_from_ibv(wc_opcode_to_ibv(op)), op);
            assert_eq!(wc_opcode_to_ibv(wc_opcode_from_ibv(c)), c);
        }
        assert_eq!(wc_opcode_from_ibv(ibv_wc_opcode::IBV_WC_TM_RECV), WcOpcode::Recv);
        assert_eq!(wc_opcode_from_ibv(ibv_wc_opcode::IBV_WC_TSO), WcOpcode::Send);
        for (s, c) in QP_STATES {
            assert_eq!(qp_state_from_ibv(qp_state_to_ibv(s)), Some(s));
            assert_eq!(qp_state_to_ibv(qp_state_from_ibv(c).unwrap()), c);
        }
        assert_eq!(qp_state_from_ibv(ibv_qp_state::IBV_QPS_UNKNOWN), None);
        for (t, _) in QP_TYPES {
            assert_eq!(qp_type_from_ibv(qp_type_to_ibv(t)), Some(t));
        }
        assert_eq!(qp_type_from_ibv(ibv_qp_type::IBV_QPT_RAW_PACKET), None);
        // Send-side completions of every WR opcode agree with WcOpcode::for_send.
        for (op, c) in WR_OPCODES {
            assert_eq!(wr_opcode_to_ibv(op), c);
        }
        for m in [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
            assert_eq!(mtu_from_ibv(mtu_to_ibv(m)), m);
        }
        assert_eq!(mtu_to_ibv(Mtu::Mtu4096), ibv_mtu::IBV_MTU_4096);
        for (t, c) in QP_TYPES {
            assert_eq!(qp_type_to_ibv(t), c);
        }
        for (s, c) in PORT_STATES {
            assert_eq!(port_state_from_ibv(c), s);
        }
        assert_eq!(port_state_from_ibv(ibv_port_state::IBV_PORT_ACTIVE), PortState::Active);
        assert_eq!(port_state_from_ibv(ibv_port_state::IBV_PORT_ACTIVE_DEFER), PortState::Active);
        for (t, c) in EVENT_TYPES {
            assert_eq!(event_type_from_ibv(c as c_uint), Some(t));
        }
        assert_eq!(event_type_from_ibv(ibv_event_type::IBV_EVENT_GID_CHANGE as c_uint), None);
        assert_eq!(event_type_from_ibv(1000), None);
        assert_eq!(link_layer_from_ibv(IBV_LINK_LAYER_ETHERNET), LinkLayer::Ethernet);
        assert_eq!(link_layer_from_ibv(IBV_LINK_LAYER_INFINIBAND), LinkLayer::InfiniBand);
        assert_eq!(link_layer_from_ibv(IBV_LINK_LAYER_UNSPECIFIED), LinkLayer::InfiniBand);
    }

    #[test]
    fn qp_attr_round_trips() {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            cur_qp_state: QpState::Init,
            path_mtu: Mtu::Mtu2048,
            qkey: 0x1111_1111,
            rq_psn: 0x12_3456,
            sq_psn: 0x65_4321,
            dest_qp_num: 0xab_cdef,
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 2,
                max_send_sge: 3,
                max_recv_sge: 4,
                max_inline_data: 5,
            },
            ah_attr: AhAttr {
                dlid: 7,
                sl: 1,
                src_path_bits: 0,
                static_rate: 2,
                is_global: true,
                port_num: 1,
                dgid: Gid::from_ipv4([10, 0, 0, 2]),
                flow_label: 0x1234,
                sgid_index: 3,
                hop_limit: 64,
                traffic_class: 8,
            },
            pkey_index: 0,
            en_sqd_async_notify: true,
            sq_draining: false,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 8,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
        };
        let c = qp_attr_to_ibv(&a);
        assert_eq!(c.qp_state, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(c.path_mtu, ibv_mtu::IBV_MTU_2048);
        assert_eq!(c.ah_attr.is_global, 1);
        assert_eq!(qp_attr_from_ibv(&c), Ok(a));
        let mut bad = c;
        bad.qp_state = ibv_qp_state::IBV_QPS_UNKNOWN;
        assert_eq!(qp_attr_from_ibv(&bad), Err(ibv_qp_state::IBV_QPS_UNKNOWN));
    }

    #[test]
    fn wc_maps_every_field() {
        let c = ibv_wc {
            wr_id: 42,
            status: ibv_wc_status::IBV_WC_REM_ACCESS_ERR,
            opcode: ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
            vendor_err: 0x81,
            byte_len: 4096,
            imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                imm_data: 0xdead_beef_u32.to_be(),
            },
            qp_num: 0x11,
            src_qp: 0x22,
            wc_flags: ibv_wc_flags::IBV_WC_WITH_IMM.0 | ibv_wc_flags::IBV_WC_GRH.0 | 4,
            pkey_index: 1,
            slid: 0x33,
            sl: 2,
            dlid_path_bits: 3,
        };
        let wc = wc_from_ibv(&c);
        assert_eq!(
            wc,
            WorkCompletion {
                wr_id: 42,
                status: WcStatus::RemAccessErr,
                opcode: WcOpcode::RecvRdmaWithImm,
                vendor_err: 0x81,
                byte_len: 4096,
                imm_data: 0xdead_beef,
                qp_num: 0x11,
                src_qp: 0x22,
                wc_flags: WcFlags::WITH_IMM | WcFlags::GRH,
                pkey_index: 1,
                slid: 0x33,
                sl: 2,
                dlid_path_bits: 3,
            }
        );
        let no_imm = ibv_wc { wc_flags: 0, ..c };
        assert_eq!(wc_from_ibv(&no_imm).imm_data, 0);
    }

    /// rdma-sys writes the union-bearing structs by hand; their layout must be verbs.h's
    /// (sizes and offsets measured with gcc against Debian 12's rdma-core 44, x86_64).
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn hand_written_structs_match_verbs_h() {
        use rdma_sys::{ibv_async_event, ibv_recv_wr, ibv_send_wr};
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(offset_of!(ibv_send_wr, wr), 40);
        assert_eq!(offset_of!(ibv_send_wr, qp_type), 72);
        assert_eq!(offset_of!(ibv_send_wr, bind_mw_tso_union), 80);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(offset_of!(ibv_wc, qp_num), 28);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(size_of::<ibv_qp_attr>(), 144);
        assert_eq!(size_of::<ibv_async_event>(), 16);
        assert_eq!(size_of::<ibv_port_attr>(), 52);
        assert_eq!(size_of::<ibv_recv_wr>(), 32);
        // `wr.bind_mw` of IBV_WR_BIND_MW: { mw, rkey, bind_info { mr, addr, length,
        // mw_access_flags } }.
        use rdma_sys::{bind_mw_t, ibv_mw_bind_info};
        assert_eq!(size_of::<bind_mw_t>(), 48);
        assert_eq!(offset_of!(bind_mw_t, rkey), 8);
        assert_eq!(offset_of!(bind_mw_t, bind_info), 16);
        assert_eq!(size_of::<ibv_mw_bind_info>(), 32);
        assert_eq!(offset_of!(ibv_mw_bind_info, addr), 8);
        assert_eq!(offset_of!(ibv_mw_bind_info, length), 16);
        assert_eq!(offset_of!(ibv_mw_bind_info, mw_access_flags), 24);
    }

    #[test]
    fn gid_and_strings() {
        let g = Gid::from_ipv4([192, 168, 1, 9]);
        assert_eq!(gid_from_ibv(&gid_to_ibv(g)), g);
        let mut fw = [0 as c_char; 64];
        for (i, b) in b"16.35.1012".iter().enumerate() {
            fw[i] = *b as c_char;
        }
        assert_eq!(c_chars_to_string(&fw), "16.35.1012");
        let full = [b'x' as c_char; 4];
        assert_eq!(c_chars_to_string(&full), "xxxx");
    }
}
