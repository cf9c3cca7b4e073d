//! Property testing the transports on the simulator: proptest strategies for workloads and
//! fault schedules (plain values, so failures shrink), a runner that plays a [`Case`] in a
//! two-node world (the nodes meet at a switch), and the oracles (in [`oracle`]) every outcome
//! must satisfy.
//!
//! A [`Case`] is everything a run depends on: the world's seed, the QP type, the WRs posted on
//! `a`'s QP towards `b`, the faults (a loss window, the k-th packet dropped, a partition that
//! heals, ...), the QP's retry attributes, a late receiver, a cut that outlasts the retries,
//! the path MTU, the NICs' send window, the first PSNs and the switch's queue limit (finite in
//! most cases, small in some, so bursts lose their tails). [`run_case`] plays it and checks
//! every oracle; [`check_case`] does the same inside a proptest body, printing the seed first.
//! What is checked (each item names the oracle; `docs/simulator.md` has the table):
//! - RC: every message is delivered exactly once and in order — receive completions match the
//!   SENDs and WRITE-with-immediates one for one, in post order
//!   ([`oracle::check_exactly_once_in_order`]), with every field a program reads
//!   ([`oracle::check_wc`]: `wr_id`, `status`, `opcode`, `byte_len`, `imm_data` and
//!   `IBV_WC_WITH_IMM`, `qp_num`, `src_qp`); send completions come in post order, one per
//!   signaled WR, with the same fields; the bytes at the target equal what was sent (gathered
//!   from 1–3 SGEs or inline, scattered into 1–3 SGEs) and no other byte of either MR changed;
//!   a READ returns the target's bytes; atomics behave as if executed one at a time
//!   ([`oracle::check_atomics_serial`], also across several QPs: [`run_contention`]);
//! - RC with bounded faults, finite queues and retries left: everything completes successfully
//!   (the conditions are in `docs/simulator.md`); on a clean link (no fault, no tail dropped)
//!   nothing is retransmitted and no timer fires;
//! - RC with a cut that outlasts the retries: the first unfinished WR completes with
//!   `RETRY_EXC_ERR`, every later one with `WR_FLUSH_ERR`, and once the cut heals nothing more is
//!   sent or delivered;
//! - RC with `rnr_retry = 7` and receives posted late: everything is delivered once the
//!   receives are posted, also under faults; on a clean link after RNR NAKs and without a
//!   single local ACK timeout;
//! - UC: each message is delivered at most once, in order, whole or not at all
//!   ([`oracle::check_at_most_once_in_order`]); on a clean link, all of them;
//! - UD: each datagram is delivered at most once ([`oracle::check_at_most_once`]), whole, with
//!   its GRH, and sent exactly once (never retransmitted).
//!
//! The rooms: `case.rs` holds a case as values and `strategy.rs` the strategies that generate
//! them; `run.rs` plays a two-node case, `layout.rs` places its bytes in the MRs and
//! `verdict.rs` checks the outcome per transport; `contention.rs` plays a [`ContentionCase`];
//! `faults.rs` turns fault values into link changes; [`oracle`] holds the oracles themselves.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

mod case;
mod contention;
mod faults;
mod layout;
pub mod oracle;
mod run;
mod strategy;
mod verdict;

pub use case::{
    engine_window, Case, ContentionCase, Dir, FaultEvent, FaultKind, OpKind, WorkItem, MAX_INLINE,
};
pub use contention::run_contention;
pub use faults::schedule_faults;
pub use oracle::{AtomicOp, AtomicResult, ExpectedWc};
pub use run::{run_case, Outcome, RUN_LIMIT_NS};
pub use strategy::{
    bounded_case, bounded_fault, contention_case, datagram_fault_schedule, fault_schedule, mtu,
    partition_case, psns, queue_limit, rnr_case, size, uc_case, uc_workload, ud_case, ud_workload,
    window, work_item, workload,
};

fn describe(case: &Case) -> String {
    format!(
        "case: seed {} ({:?}, {} WRs, {} fault events, queue {}{}{})",
        case.seed,
        case.qp_type,
        case.workload.len(),
        case.faults.len(),
        case.queue_limit,
        case.cut_at_ns.map(|c| format!(", cut at {c} ns")).unwrap_or_default(),
        if case.recv_delay_ns > 0 {
            format!(", receives after {} ns", case.recv_delay_ns)
        } else {
            String::new()
        }
    )
}

/// [`run_case`] for a proptest body: prints the case's seed first, then runs it; a violation
/// fails the test case (and proptest shrinks it).
pub fn check_case(case: &Case) -> Result<Outcome, TestCaseError> {
    eprintln!("{}", describe(case));
    run_case(case).map_err(TestCaseError::fail)
}

/// [`run_contention`] for a proptest body: prints the seed first.
pub fn check_contention(case: &ContentionCase) -> Result<Outcome, TestCaseError> {
    eprintln!(
        "contention case: seed {} ({} requesters, {} atomics, {} fault events)",
        case.seed,
        case.per_qp.len(),
        case.per_qp.iter().map(Vec::len).sum::<usize>(),
        case.faults.len()
    );
    run_contention(case).map_err(TestCaseError::fail)
}

/// The proptest configuration the suites use: `PROPTEST_CASES` cases (default `default`), and
/// a generator seed from `PROPTEST_RNG_SEED` or a fresh one, printed before any case runs so a
/// run can be replayed (`PROPTEST_RNG_SEED=S` regenerates the same cases).
pub fn config(default: u32) -> ProptestConfig {
    use std::hash::{BuildHasher, Hasher};
    let cases =
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let seed =
        std::env::var("PROPTEST_RNG_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            // Outside the simulated path: a fresh seed per run, so runs explore different cases.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0);
            h.finish()
        });
    eprintln!(
        "proptest: {cases} cases, generator seed {seed} (replay with PROPTEST_RNG_SEED={seed})"
    );
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}
