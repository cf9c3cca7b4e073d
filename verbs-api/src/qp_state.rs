//! The IBA QP state table: which `ibv_modify_qp` transitions exist and which attributes each one
//! requires and allows, per QP type (IBA 1.x, §10.3 and §11.2.4.2; the kernel's
//! `ib_modify_qp_is_ok` enforces the same table). Every backend that validates a modify itself
//! uses this one table.

use crate::error::{Error, Result};
use crate::ibv::IbvEnum;
use crate::types::{Mtu, QpAttr, QpAttrMask, QpState, QpType};

type M = QpAttrMask;

/// Required and optional attributes of one transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Attributes that must be in the mask.
    pub required: QpAttrMask,
    /// Attributes that may be in the mask.
    pub optional: QpAttrMask,
}

const fn t(required: QpAttrMask, optional: QpAttrMask) -> Option<Transition> {
    Some(Transition { required, optional })
}

/// The row of the state table for `cur -> next` and a QP type, or `None` if the transition does not exist.
pub fn transition(qp_type: QpType, cur: QpState, next: QpState) -> Option<Transition> {
    use QpState::*;
    use QpType::*;
    let none = M::empty();
    match (cur, next) {
        (_, Reset) | (_, Err) => t(none, none),
        (Reset, Init) => match qp_type {
            Ud => t(M::PKEY_INDEX.union(M::PORT).union(M::QKEY), none),
            Uc | Rc => t(M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS), none),
        },
        (Init, Init) => match qp_type {
            Ud => t(none, M::PKEY_INDEX.union(M::PORT).union(M::QKEY)),
            Uc | Rc => t(none, M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS)),
        },
        (Init, Rtr) => match qp_type {
            Ud => t(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc => t(
                M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
            Rc => t(
                M::AV
                    .union(M::PATH_MTU)
                    .union(M::DEST_QPN)
                    .union(M::RQ_PSN)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::MIN_RNR_TIMER),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
        },
        (Rtr, Rts) => match qp_type {
            Ud => t(M::SQ_PSN, M::CUR_STATE.union(M::QKEY)),
            Uc => t(
                M::SQ_PSN,
                M::CUR_STATE.union(M::ALT_PATH).union(M::ACCESS_FLAGS).union(M::PATH_MIG_STATE),
            ),
            Rc => t(
                M::SQ_PSN
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC),
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
        },
        (Rts, Rts) | (Sqd, Rts) => match qp_type {
            Ud => t(none, M::CUR_STATE.union(M::QKEY)),
            Uc => t(
                none,
                M::CUR_STATE.union(M::ACCESS_FLAGS).union(M::ALT_PATH).union(M::PATH_MIG_STATE),
            ),
            Rc => t(
                none,
                M::CUR_STATE
                    .union(M::ACCESS_FLAGS)
                    .union(M::ALT_PATH)
                    .union(M::PATH_MIG_STATE)
                    .union(M::MIN_RNR_TIMER),
            ),
        },
        (Rts, Sqd) => t(none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match qp_type {
            Ud => t(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc => t(
                none,
                M::AV
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => t(
                none,
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
        },
        (Sqe, Rts) => match qp_type {
            Ud => t(none, M::CUR_STATE.union(M::QKEY)),
            Uc | Rc => t(none, M::CUR_STATE.union(M::ACCESS_FLAGS)),
        },
        _ => None,
    }
}

/// Limits a modify is checked against.
#[derive(Clone, Copy, Debug)]
pub struct ModifyLimits {
    /// The number of physical ports (ports are 1-based).
    pub port_count: u8,
    /// The P_Key table length.
    pub pkey_tbl_len: u16,
    /// The GID table length (`gid_tbl_len`): an address vector's `sgid_index` lies below it.
    pub gid_tbl_len: u32,
    /// The port's largest MTU.
    pub max_mtu: Mtu,
    /// `max_qp_init_rd_atom`.
    pub max_rd_atomic: u8,
    /// `max_qp_rd_atom`.
    pub max_dest_rd_atomic: u8,
}

/// Check a `modify_qp` against the state table and the attribute ranges; return the state to move to.
/// Errors are `EINVAL` naming the transition and the attribute that was missing, not allowed or out of range.
pub fn check_modify(
    qp_type: QpType,
    cur: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &ModifyLimits,
) -> Result<QpState> {
    if mask.bits() & !QpAttrMask::all().bits() != 0 {
        return Err(Error::inval(format!(
            "ibv_modify_qp: unknown attribute mask bits {:#x}",
            mask.bits() & !QpAttrMask::all().bits()
        )));
    }
    if mask.contains(M::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(Error::inval(format!(
            "ibv_modify_qp: IBV_QP_CUR_STATE says {} but the QP is in {}",
            attr.cur_qp_state, cur
        )));
    }
    let next = if mask.contains(M::STATE) { attr.qp_state } else { cur };
    let Some(row) = transition(qp_type, cur, next) else {
        return Err(Error::inval(format!(
            "ibv_modify_qp: {cur} -> {next} is not a valid transition for an {} QP",
            qp_type.ibv_name()
        )));
    };
    let given = mask.difference(M::STATE);
    let missing = row.required.difference(given);
    if !missing.is_empty() {
        return Err(Error::inval(format!(
            "ibv_modify_qp: {cur} -> {next} on an {} QP requires {} (missing from the attribute mask)",
            qp_type.ibv_name(),
            missing.names()
        )));
    }
    let extra = given.difference(row.required.union(row.optional));
    if !extra.is_empty() {
        return Err(Error::inval(format!(
            "ibv_modify_qp: {} is not allowed in {cur} -> {next} on an {} QP",
            extra.names(),
            qp_type.ibv_name()
        )));
    }
    check_ranges(attr, mask, limits)?;
    Ok(next)
}

fn check_ranges(attr: &QpAttr, mask: QpAttrMask, limits: &ModifyLimits) -> Result<()> {
    let bad = |what: &str, why: String| Err(Error::inval(format!("ibv_modify_qp: {what} {why}")));
    if mask.contains(M::PORT) && (attr.port_num == 0 || attr.port_num > limits.port_count) {
        return bad(
            "IBV_QP_PORT",
            format!("port_num {} does not exist (ports 1..={})", attr.port_num, limits.port_count),
        );
    }
    if mask.contains(M::PKEY_INDEX) && attr.pkey_index >= limits.pkey_tbl_len {
        return bad(
            "IBV_QP_PKEY_INDEX",
            format!(
                "pkey_index {} is beyond the table of {}",
                attr.pkey_index, limits.pkey_tbl_len
            ),
        );
    }
    if mask.contains(M::PATH_MTU) && attr.path_mtu > limits.max_mtu {
        return bad(
            "IBV_QP_PATH_MTU",
            format!(
                "{} exceeds the port's max MTU {}",
                attr.path_mtu.bytes(),
                limits.max_mtu.bytes()
            ),
        );
    }
    if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
        return bad("IBV_QP_TIMEOUT", format!("timeout {} is not in 0..=31", attr.timeout));
    }
    if mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
        return bad("IBV_QP_RETRY_CNT", format!("retry_cnt {} is not in 0..=7", attr.retry_cnt));
    }
    if mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
        return bad("IBV_QP_RNR_RETRY", format!("rnr_retry {} is not in 0..=7", attr.rnr_retry));
    }
    if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return bad(
            "IBV_QP_MIN_RNR_TIMER",
            format!("min_rnr_timer {} is not in 0..=31", attr.min_rnr_timer),
        );
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > limits.max_rd_atomic {
        return bad(
            "IBV_QP_MAX_QP_RD_ATOMIC",
            format!(
                "{} exceeds the device's max_qp_init_rd_atom {}",
                attr.max_rd_atomic, limits.max_rd_atomic
            ),
        );
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > limits.max_dest_rd_atomic {
        return bad(
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            format!(
                "{} exceeds the device's max_qp_rd_atom {}",
                attr.max_dest_rd_atomic, limits.max_dest_rd_atomic
            ),
        );
    }
    if mask.contains(M::DEST_QPN) && attr.dest_qp_num > 0x00FF_FFFF {
        return bad("IBV_QP_DEST_QPN", format!("{:#x} is wider than 24 bits", attr.dest_qp_num));
    }
    if mask.contains(M::RQ_PSN) && attr.rq_psn > 0x00FF_FFFF {
        return bad("IBV_QP_RQ_PSN", format!("{:#x} is wider than 24 bits", attr.rq_psn));
    }
    if mask.contains(M::SQ_PSN) && attr.sq_psn > 0x00FF_FFFF {
        return bad("IBV_QP_SQ_PSN", format!("{:#x} is wider than 24 bits", attr.sq_psn));
    }
    if mask.contains(M::AV)
        && attr.ah_attr.is_global
        && u32::from(attr.ah_attr.sgid_index) >= limits.gid_tbl_len
    {
        return bad(
            "IBV_QP_AV",
            format!(
                "sgid_index {} is past the port's GID table (gid_tbl_len {})",
                attr.ah_attr.sgid_index, limits.gid_tbl_len
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ModifyLimits = ModifyLimits {
        port_count: 1,
        pkey_tbl_len: 1,
        gid_tbl_len: 1024,
        max_mtu: Mtu::Mtu4096,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
    };

    fn init_mask() -> QpAttrMask {
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
    }

    #[test]
    fn reset_to_init_needs_port_pkey_access() {
        let attr = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
        let next = check_modify(QpType::Rc, QpState::Reset, &attr, init_mask(), &LIMITS).unwrap();
        assert_eq!(next, QpState::Init);
        let err = check_modify(QpType::Rc, QpState::Reset, &attr, M::STATE | M::PORT, &LIMITS)
            .unwrap_err();
        assert_eq!(err.errno, crate::Errno::Inval);
        assert!(err.message.contains("IBV_QP_ACCESS_FLAGS"), "{}", err.message);
        assert!(err.message.contains("IBV_QP_PKEY_INDEX"), "{}", err.message);
    }

    #[test]
    fn ud_init_needs_qkey_not_access() {
        let attr = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
        let err =
            check_modify(QpType::Ud, QpState::Reset, &attr, init_mask(), &LIMITS).unwrap_err();
        assert!(err.message.contains("IBV_QP_QKEY"), "{}", err.message);
        let ok = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
        assert_eq!(check_modify(QpType::Ud, QpState::Reset, &attr, ok, &LIMITS), Ok(QpState::Init));
    }

    #[test]
    fn extra_attribute_is_named() {
        let attr = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Reset, &attr, init_mask() | M::SQ_PSN, &LIMITS)
            .unwrap_err();
        assert!(err.message.contains("IBV_QP_SQ_PSN is not allowed"), "{}", err.message);
    }

    #[test]
    fn invalid_transition_is_rejected() {
        let attr = QpAttr { qp_state: QpState::Rts, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Init, &attr, M::STATE, &LIMITS).unwrap_err();
        assert!(err.message.contains("INIT -> RTS is not a valid transition"), "{}", err.message);
    }

    #[test]
    fn rc_rtr_and_rts_required_sets() {
        let rtr = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        let attr = QpAttr { qp_state: QpState::Rtr, path_mtu: Mtu::Mtu1024, ..Default::default() };
        assert_eq!(check_modify(QpType::Rc, QpState::Init, &attr, rtr, &LIMITS), Ok(QpState::Rtr));
        let err = check_modify(QpType::Rc, QpState::Init, &attr, rtr - M::MIN_RNR_TIMER, &LIMITS)
            .unwrap_err();
        assert!(err.message.contains("IBV_QP_MIN_RNR_TIMER"));
        // UC does not take MIN_RNR_TIMER at all.
        let err =
            check_modify(QpType::Uc, QpState::Init, &attr, rtr - M::MAX_DEST_RD_ATOMIC, &LIMITS)
                .unwrap_err();
        assert!(err.message.contains("IBV_QP_MIN_RNR_TIMER is not allowed"), "{}", err.message);
        let rts =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        let attr = QpAttr { qp_state: QpState::Rts, ..Default::default() };
        assert_eq!(check_modify(QpType::Rc, QpState::Rtr, &attr, rts, &LIMITS), Ok(QpState::Rts));
    }

    #[test]
    fn any_state_to_error_and_reset() {
        for cur in [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Err] {
            for next in [QpState::Err, QpState::Reset] {
                let attr = QpAttr { qp_state: next, ..Default::default() };
                assert_eq!(check_modify(QpType::Rc, cur, &attr, M::STATE, &LIMITS), Ok(next));
            }
        }
    }

    #[test]
    fn ranges_are_checked() {
        let rts =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        let attr = QpAttr { qp_state: QpState::Rts, retry_cnt: 8, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Rtr, &attr, rts, &LIMITS).unwrap_err();
        assert!(err.message.contains("retry_cnt 8"), "{}", err.message);
        let attr = QpAttr { qp_state: QpState::Rts, max_rd_atomic: 17, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Rtr, &attr, rts, &LIMITS).unwrap_err();
        assert!(err.message.contains("IBV_QP_MAX_QP_RD_ATOMIC"), "{}", err.message);
        let attr = QpAttr { qp_state: QpState::Rts, sq_psn: 1 << 24, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Rtr, &attr, rts, &LIMITS).unwrap_err();
        assert!(err.message.contains("IBV_QP_SQ_PSN"), "{}", err.message);
    }

    #[test]
    fn cur_state_must_match() {
        let attr =
            QpAttr { qp_state: QpState::Rts, cur_qp_state: QpState::Init, ..Default::default() };
        let err = check_modify(QpType::Rc, QpState::Rts, &attr, M::CUR_STATE, &LIMITS).unwrap_err();
        assert!(err.message.contains("IBV_QP_CUR_STATE"), "{}", err.message);
    }
}
