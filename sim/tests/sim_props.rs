//! Property suites: RC on the simulator under generated workloads and fault schedules, checked
//! by the oracles of `softverbs_sim::world::prop`. The case budget is `PROPTEST_CASES`
//! (default small, so the suite takes about a minute in debug); a longer run:
//! `PROPTEST_CASES=2000 cargo test -p softverbs-sim --release --test sim_props`.
//! Each case prints its world seed; a failure prints the minimal case, which
//! `prop::run_case` replays exactly.

use proptest::prelude::*;
use softverbs_sim::world::prop::{self, bounded_case, partition_case, rnr_case, run_case};

fn run(case: &prop::Case) -> Result<prop::Outcome, TestCaseError> {
    let out = run_case(case).map_err(TestCaseError::fail)?;
    eprintln!(
        "case: seed {} ({} WRs, {} fault events, {} faults injected)",
        case.seed,
        case.workload.len(),
        case.faults.len(),
        out.faults_injected
    );
    Ok(out)
}

proptest! {
    #![proptest_config(prop::config(32))]

    #[test]
    fn bounded_faults_with_retries_left_complete_exactly_once(case in bounded_case()) {
        run(&case)?;
    }

    #[test]
    fn a_permanent_partition_ends_in_retry_exceeded_then_flushes(case in partition_case()) {
        run(&case)?;
    }

    #[test]
    fn rnr_with_infinite_retry_delivers_once_receives_are_posted(case in rnr_case()) {
        run(&case)?;
    }

    #[test]
    fn the_same_case_replays_the_same_trace(case in bounded_case()) {
        let a = run(&case)?;
        let b = run(&case)?;
        prop_assert_eq!(a.trace_hash, b.trace_hash);
    }
}

/// Faults really happen in the bounded suite: a fixed case with every fault kind.
#[test]
fn every_fault_kind_is_injected_and_survived() {
    use prop::{Dir, FaultEvent, FaultKind, OpKind, WorkItem};
    let item = |kind, len| WorkItem {
        kind,
        len,
        sges: 2,
        inline: false,
        signaled: true,
        imm: Some(7),
        operand: 1,
        swap: 2,
    };
    let mut workload =
        vec![item(OpKind::Write, 200_000), item(OpKind::Send, 50_000), item(OpKind::Read, 100_000)];
    workload.push(WorkItem {
        kind: OpKind::FetchAdd,
        len: 8,
        sges: 1,
        imm: None,
        ..item(OpKind::FetchAdd, 8)
    });
    let dur_ns = 5_000_000;
    let faults = vec![
        FaultEvent { at_ns: 0, kind: FaultKind::Loss { dir: Dir::Forward, ppm: 30_000, dur_ns } },
        FaultEvent {
            at_ns: 0,
            kind: FaultKind::Duplicate { dir: Dir::Forward, ppm: 30_000, dur_ns },
        },
        FaultEvent {
            at_ns: 0,
            kind: FaultKind::Corrupt { dir: Dir::Forward, ppm: 30_000, dur_ns },
        },
        FaultEvent {
            at_ns: 0,
            kind: FaultKind::Reorder { dir: Dir::Forward, jitter_ns: 2_000, dur_ns },
        },
        FaultEvent { at_ns: 0, kind: FaultKind::DropNth { dir: Dir::Backward, n: 0 } },
        FaultEvent { at_ns: 20_000, kind: FaultKind::Partition { dur_ns: 100_000 } },
    ];
    let case = prop::Case {
        seed: 77,
        workload,
        faults,
        retry_cnt: 7,
        timeout: 10,
        rnr_retry: 7,
        recv_delay_ns: 0,
        cut_at_ns: None,
        mtu: verbs_api::Mtu::Mtu1024,
        window: prop::DEFAULT_WINDOW,
    };
    let out = run_case(&case).unwrap();
    assert!(out.faults_injected > 10, "{}", out.faults_injected);
}

/// Engine regression (found by `bounded_faults_with_retries_left_complete_exactly_once`, seed
/// 60216, shrunk): with the engine's default 512-packet window, a SEND longer than the window
/// that follows another WR stalls mid-message; when the earlier WR's ACK retires it, the
/// completer resets the requester's packet index and the SEND resumes with a SEND FIRST at PSN
/// 517, which the responder NAKs as an invalid request (`REM_INV_REQ_ERR`). Un-ignore when
/// `nic-model/src/engine/comp.rs` (`ack_through`) keeps the index of a partly sent WQE.
#[test]
fn a_message_longer_than_the_window_after_another_wr() {
    use prop::{OpKind, WorkItem};
    let item = |kind, len| WorkItem {
        kind,
        len,
        sges: 1,
        inline: false,
        signaled: true,
        imm: None,
        operand: 0,
        swap: 0,
    };
    let case = prop::Case {
        seed: 60216,
        workload: vec![item(OpKind::Write, 8), item(OpKind::Send, 836_962)],
        faults: Vec::new(),
        retry_cnt: 7,
        timeout: 10,
        rnr_retry: 7,
        recv_delay_ns: 0,
        cut_at_ns: None,
        mtu: verbs_api::Mtu::Mtu1024,
        window: 512,
    };
    run_case(&case).unwrap();
}

/// Engine regression (found by `every_fault_kind_is_injected_and_survived`, seed 77, with
/// responses corrupted; shrunk by hand): a 4096-byte READ at MTU 1024 whose READ RESPONSE FIRST
/// is lost completes with SUCCESS, and the first 1024 bytes of the local buffer are never
/// written. The requester must treat the MIDDLE packet's PSN gap as a lost response and
/// re-issue the READ from the missing PSN. Un-ignore when fixed (and drop the strategy filter
/// `prop::hits_known_read_issue`).
#[test]
fn a_lost_read_response_is_recovered() {
    use prop::{Dir, FaultEvent, FaultKind, OpKind, WorkItem};
    let case = prop::Case {
        seed: 1,
        workload: vec![WorkItem {
            kind: OpKind::Read,
            len: 4096,
            sges: 1,
            inline: false,
            signaled: true,
            imm: None,
            operand: 0,
            swap: 0,
        }],
        faults: vec![FaultEvent {
            at_ns: 0,
            kind: FaultKind::DropNth { dir: Dir::Backward, n: 0 },
        }],
        retry_cnt: 7,
        timeout: 10,
        rnr_retry: 7,
        recv_delay_ns: 0,
        cut_at_ns: None,
        mtu: verbs_api::Mtu::Mtu1024,
        window: prop::DEFAULT_WINDOW,
    };
    run_case(&case).unwrap();
}

/// Engine regression (found by `bounded_faults_with_retries_left_complete_exactly_once` with
/// `SOFTVERBS_PROP_KNOWN_ISSUES=1`, seed 0, shrunk): a 2049-byte READ at MTU 1024 (FIRST,
/// MIDDLE, LAST responses) whose READ RESPONSE MIDDLE is lost completes with SUCCESS and bytes
/// missing. Un-ignore when fixed, and drop the strategy filter `prop::hits_known_read_issue`.
#[test]
fn a_lost_middle_read_response_is_recovered() {
    use prop::{Dir, FaultEvent, FaultKind, OpKind, WorkItem};
    let case = prop::Case {
        seed: 0,
        workload: vec![WorkItem {
            kind: OpKind::Read,
            len: 2049,
            sges: 1,
            inline: false,
            signaled: false,
            imm: None,
            operand: 0,
            swap: 0,
        }],
        faults: vec![FaultEvent {
            at_ns: 0,
            kind: FaultKind::DropNth { dir: Dir::Backward, n: 1 },
        }],
        retry_cnt: 7,
        timeout: 10,
        rnr_retry: 7,
        recv_delay_ns: 0,
        cut_at_ns: None,
        mtu: verbs_api::Mtu::Mtu1024,
        window: prop::DEFAULT_WINDOW,
    };
    run_case(&case).unwrap();
}
