//! The values of `<infiniband/verbs.h>`'s enums: one table per verbs enum, variant ↔ `IBV_*`
//! value, the one place softverbs writes those numbers down. The `hw` backend (through
//! `rdma-sys`), both C libraries (`cabi/`) and the tests' wire codec convert through
//! [`IbvEnum`]; nothing else relies on a variant's order or discriminant. The values are facts
//! of the header (rdma-core 44's `<infiniband/verbs.h>`), checked against
//! `rdma-sys`' bindings by the `hw` backend's tests and against the C header by the C library's
//! layout test.

use crate::types::{
    AsyncEventType, GidType, LinkLayer, Mtu, PortState, QpState, QpType, WcOpcode, WcStatus,
    WrOpcode,
};

/// A softverbs enum that mirrors a C enum of `<infiniband/verbs.h>`: its table of
/// `(variant, value, IBV_* name)` rows, and the two conversions derived from it.
pub trait IbvEnum: Copy + PartialEq + Sized + 'static {
    /// The C enum's name (`enum ibv_qp_state`).
    const C_ENUM: &'static str;
    /// Every variant with its `IBV_*` value and name; a variant may have a second, later row
    /// for another C value it also reads as (`IBV_PORT_ACTIVE_DEFER` → `Active`), which
    /// [`to_ibv`](IbvEnum::to_ibv) never gives.
    const TABLE: &'static [(Self, u32, &'static str)];

    /// The `IBV_*` value of this variant (its first row).
    fn to_ibv(self) -> u32;
    /// The variant of an `IBV_*` value; `None` for a value softverbs has no variant for.
    fn from_ibv(value: u32) -> Option<Self>;
    /// The value as the C `int` field that holds it (`ibv_qp_attr.qp_state`, `ibv_wc.status`).
    #[inline]
    fn to_c_int(self) -> i32 {
        self.to_ibv() as i32
    }
    /// The variant of a C `int` field; `None` for a negative value or one with no variant.
    #[inline]
    fn from_c_int(value: i32) -> Option<Self> {
        u32::try_from(value).ok().and_then(Self::from_ibv)
    }
    /// The `IBV_*` name of this variant (`IBV_QPS_RTS`).
    fn ibv_name(self) -> &'static str {
        Self::TABLE
            .iter()
            .find(|r| r.0 == self)
            .map(|r| r.2)
            .expect("every variant is in its table (tested)")
    }
}

/// Writes the `IbvEnum` impl of one enum from its rows `Variant = value IBV_NAME`: the table,
/// and both conversions as `match`es over the same rows (a jump table on the post and poll
/// paths, not a search; a later row for a variant already listed is only read).
macro_rules! ibv_enum {
    ($ty:ident, $c:literal, [$($v:ident = $n:literal $name:ident),* $(,)?]) => {
        impl IbvEnum for $ty {
            const C_ENUM: &'static str = $c;
            const TABLE: &'static [(Self, u32, &'static str)] =
                &[$(($ty::$v, $n, stringify!($name))),*];
            #[inline]
            #[allow(unreachable_patterns)]
            fn to_ibv(self) -> u32 {
                match self {
                    $($ty::$v => $n,)*
                }
            }
            #[inline]
            fn from_ibv(value: u32) -> Option<Self> {
                match value {
                    $($n => Some($ty::$v),)*
                    _ => None,
                }
            }
        }
    };
}

ibv_enum!(QpType, "enum ibv_qp_type", [
    Rc = 2 IBV_QPT_RC,
    Uc = 3 IBV_QPT_UC,
    Ud = 4 IBV_QPT_UD,
]);

ibv_enum!(QpState, "enum ibv_qp_state", [
    Reset = 0 IBV_QPS_RESET,
    Init = 1 IBV_QPS_INIT,
    Rtr = 2 IBV_QPS_RTR,
    Rts = 3 IBV_QPS_RTS,
    Sqd = 4 IBV_QPS_SQD,
    Sqe = 5 IBV_QPS_SQE,
    Err = 6 IBV_QPS_ERR,
]);

ibv_enum!(WrOpcode, "enum ibv_wr_opcode", [
    RdmaWrite = 0 IBV_WR_RDMA_WRITE,
    RdmaWriteWithImm = 1 IBV_WR_RDMA_WRITE_WITH_IMM,
    Send = 2 IBV_WR_SEND,
    SendWithImm = 3 IBV_WR_SEND_WITH_IMM,
    RdmaRead = 4 IBV_WR_RDMA_READ,
    AtomicCmpAndSwp = 5 IBV_WR_ATOMIC_CMP_AND_SWP,
    AtomicFetchAndAdd = 6 IBV_WR_ATOMIC_FETCH_AND_ADD,
    LocalInv = 7 IBV_WR_LOCAL_INV,
    BindMw = 8 IBV_WR_BIND_MW,
    SendWithInv = 9 IBV_WR_SEND_WITH_INV,
    Flush = 14 IBV_WR_FLUSH,
    AtomicWrite = 15 IBV_WR_ATOMIC_WRITE,
]);

ibv_enum!(WcOpcode, "enum ibv_wc_opcode", [
    Send = 0 IBV_WC_SEND,
    RdmaWrite = 1 IBV_WC_RDMA_WRITE,
    RdmaRead = 2 IBV_WC_RDMA_READ,
    CompSwap = 3 IBV_WC_COMP_SWAP,
    FetchAdd = 4 IBV_WC_FETCH_ADD,
    BindMw = 5 IBV_WC_BIND_MW,
    LocalInv = 6 IBV_WC_LOCAL_INV,
    Recv = 128 IBV_WC_RECV,
    RecvRdmaWithImm = 129 IBV_WC_RECV_RDMA_WITH_IMM,
    Flush = 8 IBV_WC_FLUSH,
    AtomicWrite = 9 IBV_WC_ATOMIC_WRITE,
]);

ibv_enum!(WcStatus, "enum ibv_wc_status", [
    Success = 0 IBV_WC_SUCCESS,
    LocLenErr = 1 IBV_WC_LOC_LEN_ERR,
    LocQpOpErr = 2 IBV_WC_LOC_QP_OP_ERR,
    LocEecOpErr = 3 IBV_WC_LOC_EEC_OP_ERR,
    LocProtErr = 4 IBV_WC_LOC_PROT_ERR,
    WrFlushErr = 5 IBV_WC_WR_FLUSH_ERR,
    MwBindErr = 6 IBV_WC_MW_BIND_ERR,
    BadRespErr = 7 IBV_WC_BAD_RESP_ERR,
    LocAccessErr = 8 IBV_WC_LOC_ACCESS_ERR,
    RemInvReqErr = 9 IBV_WC_REM_INV_REQ_ERR,
    RemAccessErr = 10 IBV_WC_REM_ACCESS_ERR,
    RemOpErr = 11 IBV_WC_REM_OP_ERR,
    RetryExcErr = 12 IBV_WC_RETRY_EXC_ERR,
    RnrRetryExcErr = 13 IBV_WC_RNR_RETRY_EXC_ERR,
    LocRddViolErr = 14 IBV_WC_LOC_RDD_VIOL_ERR,
    RemInvRdReqErr = 15 IBV_WC_REM_INV_RD_REQ_ERR,
    RemAbortErr = 16 IBV_WC_REM_ABORT_ERR,
    InvEecnErr = 17 IBV_WC_INV_EECN_ERR,
    InvEecStateErr = 18 IBV_WC_INV_EEC_STATE_ERR,
    FatalErr = 19 IBV_WC_FATAL_ERR,
    RespTimeoutErr = 20 IBV_WC_RESP_TIMEOUT_ERR,
    GeneralErr = 21 IBV_WC_GENERAL_ERR,
]);

ibv_enum!(Mtu, "enum ibv_mtu", [
    Mtu256 = 1 IBV_MTU_256,
    Mtu512 = 2 IBV_MTU_512,
    Mtu1024 = 3 IBV_MTU_1024,
    Mtu2048 = 4 IBV_MTU_2048,
    Mtu4096 = 5 IBV_MTU_4096,
]);

ibv_enum!(PortState, "enum ibv_port_state", [
    Nop = 0 IBV_PORT_NOP,
    Down = 1 IBV_PORT_DOWN,
    Init = 2 IBV_PORT_INIT,
    Armed = 3 IBV_PORT_ARMED,
    Active = 4 IBV_PORT_ACTIVE,
    // "Active, deferred": the link is up and usable; softverbs has no separate state for it.
    Active = 5 IBV_PORT_ACTIVE_DEFER,
]);

ibv_enum!(LinkLayer, "IBV_LINK_LAYER_* (enum in verbs.h)", [
    InfiniBand = 1 IBV_LINK_LAYER_INFINIBAND,
    Ethernet = 2 IBV_LINK_LAYER_ETHERNET,
    // "Unspecified" is InfiniBand, as libibverbs treats it.
    InfiniBand = 0 IBV_LINK_LAYER_UNSPECIFIED,
]);

ibv_enum!(GidType, "enum ibv_gid_type", [
    Ib = 0 IBV_GID_TYPE_IB,
    RoceV1 = 1 IBV_GID_TYPE_ROCE_V1,
    RoceV2 = 2 IBV_GID_TYPE_ROCE_V2,
]);

// The async events softverbs can name. The others (path migration, LID/P_Key/SM/GID changes,
// client reregister, SRQ and WQ errors) have no `AsyncEventType`.
ibv_enum!(AsyncEventType, "enum ibv_event_type", [
    CqErr = 0 IBV_EVENT_CQ_ERR,
    QpFatal = 1 IBV_EVENT_QP_FATAL,
    QpReqErr = 2 IBV_EVENT_QP_REQ_ERR,
    QpAccessErr = 3 IBV_EVENT_QP_ACCESS_ERR,
    CommEst = 4 IBV_EVENT_COMM_EST,
    SqDrained = 5 IBV_EVENT_SQ_DRAINED,
    DeviceFatal = 8 IBV_EVENT_DEVICE_FATAL,
    PortActive = 9 IBV_EVENT_PORT_ACTIVE,
    PortErr = 10 IBV_EVENT_PORT_ERR,
    SrqLimitReached = 15 IBV_EVENT_SRQ_LIMIT_REACHED,
    QpLastWqeReached = 16 IBV_EVENT_QP_LAST_WQE_REACHED,
]);

/// `IBV_QPT_XRC_SEND`: XRC is not modelled; named so the C libraries can refuse it by name.
pub const IBV_QPT_XRC_SEND: u32 = 9;
/// `IBV_QPT_XRC_RECV`.
pub const IBV_QPT_XRC_RECV: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each table: every variant has a row, values and names are unique, and both
    /// conversions invert each other on the first rows.
    fn check<T: IbvEnum + std::fmt::Debug>(all: &[T]) {
        for &v in all {
            assert_eq!(T::from_ibv(v.to_ibv()), Some(v), "{}: {v:?}", T::C_ENUM);
        }
        for (i, a) in T::TABLE.iter().enumerate() {
            assert!(all.contains(&a.0), "{}: {:?} not listed", T::C_ENUM, a.0);
            for b in &T::TABLE[i + 1..] {
                assert_ne!(a.1, b.1, "{}: value {} twice", T::C_ENUM, a.1);
                assert_ne!(a.2, b.2, "{}: {} twice", T::C_ENUM, a.2);
            }
        }
    }

    #[test]
    fn every_table_is_whole_and_one_to_one() {
        use QpState::*;
        check(&[QpType::Rc, QpType::Uc, QpType::Ud]);
        check(&[Reset, Init, Rtr, Rts, Sqd, Sqe, Err]);
        check(&[
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::LocalInv,
            WrOpcode::BindMw,
            WrOpcode::SendWithInv,
            WrOpcode::Flush,
            WrOpcode::AtomicWrite,
        ]);
        check(&[
            WcOpcode::Send,
            WcOpcode::RdmaWrite,
            WcOpcode::RdmaRead,
            WcOpcode::CompSwap,
            WcOpcode::FetchAdd,
            WcOpcode::BindMw,
            WcOpcode::LocalInv,
            WcOpcode::Recv,
            WcOpcode::RecvRdmaWithImm,
            WcOpcode::Flush,
            WcOpcode::AtomicWrite,
        ]);
        check(&WcStatus::TABLE.iter().map(|r| r.0).collect::<Vec<_>>());
        check(&[Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]);
        check(&[
            PortState::Nop,
            PortState::Down,
            PortState::Init,
            PortState::Armed,
            PortState::Active,
        ]);
        check(&[LinkLayer::InfiniBand, LinkLayer::Ethernet]);
        check(&[GidType::Ib, GidType::RoceV1, GidType::RoceV2]);
        check(&AsyncEventType::TABLE.iter().map(|r| r.0).collect::<Vec<_>>());
        assert_eq!(WcStatus::TABLE.len(), 22);
        assert_eq!(PortState::from_ibv(5), Some(PortState::Active));
        assert_eq!(PortState::Active.to_ibv(), 4);
        assert_eq!(LinkLayer::from_ibv(0), Some(LinkLayer::InfiniBand));
        assert_eq!(QpType::from_ibv(IBV_QPT_XRC_SEND), None);
    }

    /// Code outside the C boundary still prints `status as u32` (the CLI's completion lines):
    /// the declaration order of these enums must keep matching their values.
    #[test]
    fn discriminants_that_are_printed_match_the_table() {
        for r in WcStatus::TABLE {
            assert_eq!(r.0 as u32, r.1, "{}", r.2);
        }
        for r in QpState::TABLE {
            assert_eq!(r.0 as u32, r.1, "{}", r.2);
        }
        for r in Mtu::TABLE {
            assert_eq!(r.0 as u32, r.1, "{}", r.2);
        }
        for r in PortState::TABLE.iter().take(5) {
            assert_eq!(r.0 as u32, r.1, "{}", r.2);
        }
    }
}
