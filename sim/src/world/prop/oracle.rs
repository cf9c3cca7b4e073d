//! Oracles: checks of what a verbs transport guarantees, over what a program can observe (work
//! completions, message ids, memory). Each returns `Err` with a description of the first
//! violation, so a property test can report it as it is; none of them panics on what it is
//! given. [`super::run_case`] composes them; user protocol tests can call them directly.

use std::collections::BTreeSet;

use verbs_api::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// What one work completion must say (the fields of `struct ibv_wc` a program relies on).
///
/// An error completion is checked for `wr_id`, `status` and `qp_num` only: `ibv_poll_cq(3)`
/// leaves its other fields undefined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedWc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status`.
    pub status: WcStatus,
    /// `opcode`.
    pub opcode: WcOpcode,
    /// `byte_len`.
    pub byte_len: u32,
    /// `imm_data`, with `IBV_WC_WITH_IMM` in `wc_flags`; `None`: the flag must be clear.
    pub imm: Option<u32>,
    /// `IBV_WC_GRH` in `wc_flags` (UD receives).
    pub grh: bool,
    /// `qp_num`: the local QP.
    pub qp_num: u32,
    /// `src_qp`: the remote QP a receive came from; `None` when not checked (send side).
    pub src_qp: Option<u32>,
}

/// Check one completion against what it must say; the error lists every field that differs.
pub fn check_wc(expected: &ExpectedWc, got: &WorkCompletion) -> Result<(), String> {
    let e = expected;
    let mut wrong = Vec::new();
    if got.wr_id != e.wr_id {
        wrong.push(format!("wr_id {} (expected {})", got.wr_id, e.wr_id));
    }
    if got.status != e.status {
        wrong.push(format!("status {:?} (expected {:?})", got.status, e.status));
    }
    if got.qp_num != e.qp_num {
        wrong.push(format!("qp_num {:#x} (expected {:#x})", got.qp_num, e.qp_num));
    }
    if e.status == WcStatus::Success {
        if got.opcode != e.opcode {
            wrong.push(format!("opcode {} (expected {})", got.opcode.name(), e.opcode.name()));
        }
        if got.byte_len != e.byte_len {
            wrong.push(format!("byte_len {} (expected {})", got.byte_len, e.byte_len));
        }
        let with_imm = got.wc_flags.contains(WcFlags::WITH_IMM);
        match e.imm {
            Some(imm) if !with_imm || got.imm_data != imm => wrong.push(format!(
                "imm_data {:#x} with flags {:?} (expected {imm:#x} and WITH_IMM)",
                got.imm_data, got.wc_flags
            )),
            None if with_imm => wrong
                .push(format!("flags {:?} have WITH_IMM, but no immediate was sent", got.wc_flags)),
            _ => {}
        }
        if got.wc_flags.contains(WcFlags::GRH) != e.grh {
            wrong.push(format!(
                "flags {:?} (expected GRH {})",
                got.wc_flags,
                if e.grh { "set" } else { "clear" }
            ));
        }
        if let Some(src) = e.src_qp {
            if got.src_qp != src {
                wrong.push(format!("src_qp {:#x} (expected {src:#x})", got.src_qp));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("completion of wr_id {}: {}", e.wr_id, wrong.join(", ")))
    }
}

/// Completions equal to the expected ones, one for one and in order (`what` names the queue).
pub fn check_completions(
    what: &str,
    expected: &[ExpectedWc],
    got: &[WorkCompletion],
) -> Result<(), String> {
    for (k, (e, g)) in expected.iter().zip(got).enumerate() {
        check_wc(e, g).map_err(|m| format!("{what}, completion #{k}: {m}"))?;
    }
    if expected.len() != got.len() {
        let ids = |v: &mut dyn Iterator<Item = u64>| v.collect::<Vec<_>>();
        return Err(format!(
            "{what}: {} completions (wr_ids {:?}), expected {} (wr_ids {:?})",
            got.len(),
            ids(&mut got.iter().map(|c| c.wr_id)),
            expected.len(),
            ids(&mut expected.iter().map(|c| c.wr_id)),
        ));
    }
    Ok(())
}

/// `got` (ids of messages, in delivery order) is exactly `sent`: every message once, in order
/// (RC).
pub fn check_exactly_once_in_order(what: &str, sent: &[u64], got: &[u64]) -> Result<(), String> {
    if got == sent {
        return Ok(());
    }
    let at = sent.iter().zip(got).position(|(s, g)| s != g).unwrap_or(sent.len().min(got.len()));
    Err(format!(
        "{what}: delivered {got:?}, expected {sent:?} exactly once each, in order (first difference at #{at})"
    ))
}

/// `got` is a subsequence of `sent`: each message at most once, in order (UC).
pub fn check_at_most_once_in_order(what: &str, sent: &[u64], got: &[u64]) -> Result<(), String> {
    let mut rest = sent.iter();
    for (k, g) in got.iter().enumerate() {
        if !rest.any(|s| s == g) {
            return Err(format!(
                "{what}: delivery #{k} is message {g}, which was not sent after the one before it \
                 (duplicated, reordered or never sent); delivered {got:?}, sent {sent:?}"
            ));
        }
    }
    Ok(())
}

/// Every id in `got` was sent and appears at most once, in any order (UD).
pub fn check_at_most_once(what: &str, sent: &[u64], got: &[u64]) -> Result<(), String> {
    let sent: BTreeSet<u64> = sent.iter().copied().collect();
    let mut seen = BTreeSet::new();
    for g in got {
        if !sent.contains(g) {
            return Err(format!("{what}: message {g} was delivered but never sent"));
        }
        if !seen.insert(*g) {
            return Err(format!("{what}: message {g} was delivered twice: {got:?}"));
        }
    }
    Ok(())
}

/// Bytes equal, or the first offset where they differ.
pub fn check_bytes(what: &str, expected: &[u8], got: &[u8]) -> Result<(), String> {
    if expected.len() != got.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), expected.len()));
    }
    match expected.iter().zip(got).position(|(e, g)| e != g) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            expected.len(),
            got[i],
            expected[i]
        )),
    }
}

/// An atomic operation on one 64-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: write `swap` if the word equals `compare`.
    CompareSwap {
        /// `compare_add`.
        compare: u64,
        /// `swap`.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` (wrapping).
    FetchAdd {
        /// `compare_add`.
        add: u64,
    },
}

impl AtomicOp {
    /// The word after this operation ran on `word`.
    pub fn apply(self, word: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } if word == compare => swap,
            AtomicOp::CompareSwap { .. } => word,
            AtomicOp::FetchAdd { add } => word.wrapping_add(add),
        }
    }
}

/// An atomic that completed: what it asked for and the original value it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicResult {
    /// The operation.
    pub op: AtomicOp,
    /// The value the word had before it (what the completion's buffer received).
    pub returned: u64,
}

/// Interleavings [`check_atomics_serial`] explores before it gives up.
pub const MAX_ATOMIC_STATES: usize = 1 << 20;

/// The atomics of several QPs (each list in its post order, all on one word that starts at
/// `initial`) behave as if executed one at a time: some interleaving that keeps each QP's order
/// gives every operation the value it returned, and leaves `last` in the word (if given). For one
/// QP that is the sequential result; with fetch-and-add only, the word ends as the sum. Gives up
/// with an error after [`MAX_ATOMIC_STATES`] states rather than search for long.
pub fn check_atomics_serial(
    initial: u64,
    per_qp: &[Vec<AtomicResult>],
    last: Option<u64>,
) -> Result<(), String> {
    // Depth-first over (next op of each QP, word); a state seen once need not be seen again.
    let mut seen: BTreeSet<(Vec<usize>, u64)> = BTreeSet::new();
    let mut stack = vec![(vec![0usize; per_qp.len()], initial)];
    let mut deepest = (0usize, Vec::new());
    while let Some((pos, word)) = stack.pop() {
        if !seen.insert((pos.clone(), word)) {
            continue;
        }
        if seen.len() > MAX_ATOMIC_STATES {
            return Err(format!(
                "atomics: more than {MAX_ATOMIC_STATES} interleavings to check; use fewer atomics"
            ));
        }
        let done: usize = pos.iter().sum();
        if done > deepest.0 || deepest.1.is_empty() {
            deepest = (done, pos.clone());
        }
        if pos.iter().zip(per_qp).all(|(&p, ops)| p == ops.len()) {
            if last.is_none_or(|l| l == word) {
                return Ok(());
            }
            continue;
        }
        for (q, ops) in per_qp.iter().enumerate() {
            if let Some(r) = ops.get(pos[q]).filter(|r| r.returned == word) {
                let mut next = pos.clone();
                next[q] += 1;
                stack.push((next, r.op.apply(word)));
            }
        }
    }
    let stuck: Vec<String> = deepest
        .1
        .iter()
        .zip(per_qp)
        .enumerate()
        .filter_map(|(q, (&p, ops))| ops.get(p).map(|r| format!("QP #{q} op #{p} {r:?}")))
        .collect();
    Err(format!(
        "atomics: no one-at-a-time order explains the results (from {initial}, ending at {last:?}); \
         the longest explained prefix ({} ops) stops before: {}",
        deepest.0,
        if stuck.is_empty() { "the final value".to_string() } else { stuck.join("; ") }
    ))
}

/// `Ok` if `cond` holds, else the violation `msg` describes (built only when needed).
pub(crate) fn oracle_ok(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fadd(add: u64, returned: u64) -> AtomicResult {
        AtomicResult { op: AtomicOp::FetchAdd { add }, returned }
    }
    fn cas(compare: u64, swap: u64, returned: u64) -> AtomicResult {
        AtomicResult { op: AtomicOp::CompareSwap { compare, swap }, returned }
    }

    #[test]
    fn atomics_one_at_a_time_are_recognised_and_others_are_not() {
        // One QP: the sequential result.
        assert!(check_atomics_serial(0, &[vec![fadd(2, 0), cas(2, 9, 2), fadd(1, 9)]], Some(10))
            .is_ok());
        assert!(check_atomics_serial(0, &[vec![fadd(2, 0), fadd(1, 0)]], Some(3)).is_err());
        // Two QPs interleaved: B's add came between A's two.
        let a = vec![fadd(1, 0), fadd(1, 11)];
        let b = vec![fadd(10, 1)];
        assert!(check_atomics_serial(0, &[a.clone(), b.clone()], Some(12)).is_ok());
        assert!(check_atomics_serial(0, &[a.clone(), b.clone()], Some(13)).is_err());
        // Both saw 0: executed at once, not one at a time.
        let lost_update = [vec![fadd(1, 0)], vec![fadd(1, 0)]];
        let e = check_atomics_serial(0, &lost_update, Some(1)).unwrap_err();
        assert!(e.contains("no one-at-a-time order"), "{e}");
        // A failed CAS leaves the word; the search explores both orders.
        let c = [vec![cas(0, 5, 0)], vec![cas(0, 7, 5)]];
        assert!(check_atomics_serial(0, &c, Some(5)).is_ok());
        assert!(check_atomics_serial(0, &c, None).is_ok());
    }

    #[test]
    fn delivery_orders() {
        assert!(check_exactly_once_in_order("x", &[1, 2, 3], &[1, 2, 3]).is_ok());
        assert!(check_exactly_once_in_order("x", &[1, 2, 3], &[1, 3]).is_err());
        assert!(check_at_most_once_in_order("x", &[1, 2, 3], &[1, 3]).is_ok());
        assert!(check_at_most_once_in_order("x", &[1, 2, 3], &[3, 1]).is_err());
        assert!(check_at_most_once_in_order("x", &[1, 2, 3], &[1, 1]).is_err());
        assert!(check_at_most_once("x", &[1, 2, 3], &[3, 1]).is_ok());
        assert!(check_at_most_once("x", &[1, 2, 3], &[3, 3]).is_err());
        assert!(check_at_most_once("x", &[1, 2, 3], &[4]).is_err());
    }

    #[test]
    fn completions_are_checked_field_by_field() {
        let e = ExpectedWc {
            wr_id: 4,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 100,
            imm: Some(7),
            grh: false,
            qp_num: 0x11,
            src_qp: Some(0x12),
        };
        let good = WorkCompletion {
            wr_id: 4,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 100,
            imm_data: 7,
            qp_num: 0x11,
            src_qp: 0x12,
            wc_flags: WcFlags::WITH_IMM,
            ..WorkCompletion::default()
        };
        assert!(check_wc(&e, &good).is_ok());
        for bad in [
            WorkCompletion { byte_len: 99, ..good },
            WorkCompletion { imm_data: 8, ..good },
            WorkCompletion { wc_flags: WcFlags::empty(), ..good },
            WorkCompletion { src_qp: 0x13, ..good },
            WorkCompletion { opcode: WcOpcode::Recv, ..good },
            WorkCompletion { qp_num: 0x12, ..good },
        ] {
            assert!(check_wc(&e, &bad).is_err(), "{bad:?}");
        }
        // An error completion: only wr_id, status and qp_num are defined.
        let flushed = ExpectedWc { status: WcStatus::WrFlushErr, ..e };
        let got = WorkCompletion {
            wr_id: 4,
            status: WcStatus::WrFlushErr,
            qp_num: 0x11,
            ..WorkCompletion::default()
        };
        assert!(check_wc(&flushed, &got).is_ok());
        let e2 = check_completions("send queue", &[e, e], &[good]).unwrap_err();
        assert!(e2.contains("1 completions"), "{e2}");
    }
}
