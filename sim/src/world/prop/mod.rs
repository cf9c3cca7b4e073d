//! Property testing the transports on the simulator: proptest strategies for workloads and
//! fault schedules (plain values, so failures shrink), a runner that plays a [`Case`] in a
//! two-node world, and the oracles (in [`oracle`]) every outcome must satisfy.
//!
//! A [`Case`] is everything a run depends on: the world's seed, the QP type, the WRs posted on
//! `a`'s QP towards `b`, the faults (a loss window, the k-th packet dropped, a partition that
//! heals, ...), the QP's retry attributes, a late receiver, a cut that outlasts the retries,
//! the path MTU, the NICs' send window and the first PSNs. [`run_case`] plays it and checks
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
//! - RC with bounded faults and retries left: everything completes successfully; on a clean
//!   link nothing is retransmitted and no timer fires;
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

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use verbs_api::{Mtu, QpType, WrOpcode};

mod contention;
mod faults;
mod layout;
pub mod oracle;
mod run;
mod verdict;

pub use contention::run_contention;
pub use faults::schedule_faults;
pub use oracle::{AtomicOp, AtomicResult, ExpectedWc};
pub use run::{run_case, Outcome, RUN_LIMIT_NS};

/// What one WR does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `IBV_WR_SEND` (`IBV_WR_SEND_WITH_IMM` if the item has an immediate).
    Send,
    /// `IBV_WR_RDMA_WRITE` (`IBV_WR_RDMA_WRITE_WITH_IMM` with an immediate: consumes a receive).
    Write,
    /// `IBV_WR_RDMA_READ`.
    Read,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` of the shared target word.
    CompareSwap,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` of the shared target word.
    FetchAdd,
}

/// One WR of a workload (an `ibv_send_wr`, as a value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkItem {
    /// What.
    pub kind: OpKind,
    /// Message length in bytes (8 for atomics).
    pub len: u32,
    /// Gather list length (and, for an RC SEND, the receive's scatter list length), 1–3.
    pub sges: u8,
    /// `IBV_SEND_INLINE` (SEND/WRITE of at most [`MAX_INLINE`] bytes).
    pub inline: bool,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// `imm_data` (SEND/WRITE only).
    pub imm: Option<u32>,
    /// `compare_add`: the CAS compare value or the FADD addend.
    pub operand: u64,
    /// `swap`: the CAS swap value.
    pub swap: u64,
}

impl WorkItem {
    /// A signaled WR of `kind` and `len` bytes from one SGE, not inline, without an immediate,
    /// with zero operands (atomics are always 8 bytes).
    pub fn new(kind: OpKind, len: u32) -> WorkItem {
        let atomic = matches!(kind, OpKind::CompareSwap | OpKind::FetchAdd);
        WorkItem {
            kind,
            len: if atomic { 8 } else { len },
            sges: 1,
            inline: false,
            signaled: true,
            imm: None,
            operand: 0,
            swap: 0,
        }
    }

    /// Whether it consumes a receive WQE at the target (a SEND or a WRITE with immediate).
    pub fn consumes_recv(&self) -> bool {
        self.kind == OpKind::Send || (self.kind == OpKind::Write && self.imm.is_some())
    }

    /// The atomic it is, if it is one.
    pub fn atomic_op(&self) -> Option<AtomicOp> {
        match self.kind {
            OpKind::CompareSwap => {
                Some(AtomicOp::CompareSwap { compare: self.operand, swap: self.swap })
            }
            OpKind::FetchAdd => Some(AtomicOp::FetchAdd { add: self.operand }),
            _ => None,
        }
    }

    /// The `ibv_wr_opcode` it is posted with.
    pub(crate) fn wr_opcode(&self) -> WrOpcode {
        match (self.kind, self.imm.is_some()) {
            (OpKind::Send, false) => WrOpcode::Send,
            (OpKind::Send, true) => WrOpcode::SendWithImm,
            (OpKind::Write, false) => WrOpcode::RdmaWrite,
            (OpKind::Write, true) => WrOpcode::RdmaWriteWithImm,
            (OpKind::Read, _) => WrOpcode::RdmaRead,
            (OpKind::CompareSwap, _) => WrOpcode::AtomicCmpAndSwp,
            (OpKind::FetchAdd, _) => WrOpcode::AtomicFetchAndAdd,
        }
    }
}

/// Which way a fault acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Requests (a → b).
    Forward,
    /// Responses (b → a).
    Backward,
}

/// A fault, as a value. Probabilities are in parts per million per packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Lose packets with probability `ppm` / 10^6 for `dur_ns`.
    Loss {
        /// Direction.
        dir: Dir,
        /// Parts per million.
        ppm: u32,
        /// How long.
        dur_ns: u64,
    },
    /// Duplicate packets with probability `ppm` / 10^6 for `dur_ns`.
    Duplicate {
        /// Direction.
        dir: Dir,
        /// Parts per million.
        ppm: u32,
        /// How long.
        dur_ns: u64,
    },
    /// Flip a bit in packets with probability `ppm` / 10^6 for `dur_ns` (the ICRC catches it).
    Corrupt {
        /// Direction.
        dir: Dir,
        /// Parts per million.
        ppm: u32,
        /// How long.
        dur_ns: u64,
    },
    /// Cut packets short with probability `ppm` / 10^6 for `dur_ns` (the parser rejects them).
    Truncate {
        /// Direction.
        dir: Dir,
        /// Parts per million.
        ppm: u32,
        /// How long.
        dur_ns: u64,
    },
    /// Delay packets by up to `jitter_ns` (reordering them) for `dur_ns`.
    Reorder {
        /// Direction.
        dir: Dir,
        /// Largest extra delay.
        jitter_ns: u64,
        /// How long.
        dur_ns: u64,
    },
    /// Drop the `n`-th packet the link carries once the workload starts (the event's `at_ns`
    /// does not matter: packets, not time, name the victim).
    DropNth {
        /// Direction.
        dir: Dir,
        /// Which packet, 0 = the first after the workload is posted.
        n: u64,
    },
    /// Cut both directions for `dur_ns`, then heal (packets in flight are lost too).
    Partition {
        /// How long.
        dur_ns: u64,
    },
}

/// A fault at a time (ns after the workload is posted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// When.
    pub at_ns: u64,
    /// What.
    pub kind: FaultKind,
}

/// Everything a property run depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The world's seed (and of the message contents).
    pub seed: u64,
    /// The transport: `Rc`, `Uc` or `Ud`.
    pub qp_type: QpType,
    /// WRs posted on `a`'s QP, in order.
    pub workload: Vec<WorkItem>,
    /// Faults.
    pub faults: Vec<FaultEvent>,
    /// `retry_cnt` (RC).
    pub retry_cnt: u8,
    /// `timeout` exponent (RC): 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// `rnr_retry` (RC; 7 = infinite).
    pub rnr_retry: u8,
    /// The receiver posts its receives this long after the workload (0: before it).
    pub recv_delay_ns: u64,
    /// Cut both directions at this time and keep them cut until the requester has completed
    /// every WR (so its retries run out); then the runner heals the cut and checks that nothing
    /// more happens.
    pub cut_at_ns: Option<u64>,
    /// Path MTU (RC, UC; UD uses the port's).
    pub mtu: Mtu,
    /// The NICs' send window in packets ([`engine_window`] unless a strategy narrows it).
    pub window: u32,
    /// The first PSNs of `a` and `b` (24 bits).
    pub psns: (u32, u32),
}

impl Case {
    /// An RC case on a clean link with `workload`: `retry_cnt` 7, `timeout` 10 (4 ms),
    /// `rnr_retry` 7, receives posted first, MTU 1024, the engine's window, PSNs from the seed.
    pub fn new(seed: u64, workload: Vec<WorkItem>) -> Case {
        Case {
            seed,
            qp_type: QpType::Rc,
            workload,
            faults: Vec::new(),
            retry_cnt: 7,
            timeout: 10,
            rnr_retry: 7,
            recv_delay_ns: 0,
            cut_at_ns: None,
            mtu: Mtu::Mtu1024,
            window: engine_window(),
            psns: ((seed & 0xFF_FFFF) as u32, ((seed >> 24) & 0xFF_FFFF) as u32),
        }
    }
}

/// The send window the engine has unless told otherwise (`NicConfig::new`).
pub fn engine_window() -> u32 {
    nic_model::engine::NicConfig::new("", 0).window
}

/// The largest inline payload the property QPs allow.
pub const MAX_INLINE: u32 = 64;

/// Message sizes from 0 B to 1 MiB, small ones likely.
pub fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => 0u32..=64,
        4 => 65u32..=4096,
        2 => 4097u32..=65536,
        1 => 65537u32..=(1 << 20),
    ]
}

/// One WR of `kind` (SEND/WRITE with or without an immediate; inline when small enough; atomics
/// of 8 bytes with small operands, so CAS sometimes matches).
fn item_of(
    kind: impl Strategy<Value = OpKind> + 'static,
    len: BoxedStrategy<u32>,
) -> BoxedStrategy<WorkItem> {
    (
        kind,
        len,
        1u8..=3,
        any::<bool>(),
        any::<bool>(),
        prop::option::of(any::<u32>()),
        0u64..4,
        0u64..5,
    )
        .prop_map(|(kind, len, sges, inline, signaled, imm, operand, swap)| {
            let atomic = matches!(kind, OpKind::CompareSwap | OpKind::FetchAdd);
            let len = if atomic { 8 } else { len };
            let data = matches!(kind, OpKind::Send | OpKind::Write);
            WorkItem {
                kind,
                len,
                sges: if atomic || len < 3 { 1 } else { sges },
                inline: inline && data && len <= MAX_INLINE,
                signaled,
                imm: if data { imm } else { None },
                operand,
                swap,
            }
        })
        .boxed()
}

/// One RC WR: SEND, WRITE (either with an immediate), READ, CAS or FADD, 0 B–1 MiB, 1–3 SGEs,
/// inline when small, signaled or not.
pub fn work_item() -> impl Strategy<Value = WorkItem> {
    let kind = prop_oneof![
        4 => Just(OpKind::Send),
        4 => Just(OpKind::Write),
        2 => Just(OpKind::Read),
        1 => Just(OpKind::CompareSwap),
        1 => Just(OpKind::FetchAdd),
    ];
    item_of(kind, size().boxed())
}

/// An RC workload of 1..=`max` WRs.
pub fn workload(max: usize) -> impl Strategy<Value = Vec<WorkItem>> {
    prop::collection::vec(work_item(), 1..=max.max(1))
}

/// A UC workload of 1..=`max` SENDs and WRITEs (UC has no READ or atomics).
pub fn uc_workload(max: usize) -> impl Strategy<Value = Vec<WorkItem>> {
    let kind = prop_oneof![Just(OpKind::Send), Just(OpKind::Write)];
    prop::collection::vec(item_of(kind, size().boxed()), 1..=max.max(1))
}

/// A UD workload of 1..=`max` SENDs of at most `mtu` bytes (a UD message is one packet).
pub fn ud_workload(max: usize, mtu: Mtu) -> impl Strategy<Value = Vec<WorkItem>> {
    let len = prop_oneof![3 => 0u32..=64, 1 => 0u32..=mtu.bytes()].boxed();
    prop::collection::vec(item_of(Just(OpKind::Send), len), 1..=max.max(1))
}

/// Path MTUs, 1024 and 4096 likeliest.
pub fn mtu() -> impl Strategy<Value = Mtu> {
    prop_oneof![
        1 => Just(Mtu::Mtu256),
        1 => Just(Mtu::Mtu512),
        3 => Just(Mtu::Mtu1024),
        1 => Just(Mtu::Mtu2048),
        3 => Just(Mtu::Mtu4096),
    ]
}

/// The NICs' send window: mostly the engine's own, sometimes a narrow one (1–64 packets) so
/// that messages stall on it mid-way.
pub fn window() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(engine_window()), 1 => 1u32..=64]
}

/// First PSNs: anywhere, or just before the 24-bit wrap so a workload crosses it.
pub fn psns() -> impl Strategy<Value = (u32, u32)> {
    let psn = prop_oneof![2 => 0u32..=0xFF_FFFF, 1 => 0xFF_FF00u32..=0xFF_FFFF];
    (psn.clone(), psn)
}

fn dir() -> impl Strategy<Value = Dir> {
    prop_oneof![Just(Dir::Forward), Just(Dir::Backward)]
}

/// Per-packet fault rates in parts per million: often high enough to hit a short workload.
fn ppm(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![1 => 1u32..max / 10, 2 => max / 10..=max]
}

/// A fault a transport with retries left must ride out (with duplication only if `dup`).
fn fault_kind(dup: bool) -> BoxedStrategy<FaultKind> {
    let dur = || 10_000u64..2_000_000;
    let loss = (dir(), ppm(200_000), dur()).prop_map(|(dir, ppm, dur_ns)| FaultKind::Loss {
        dir,
        ppm,
        dur_ns,
    });
    let duplicate = (dir(), ppm(200_000), dur())
        .prop_map(|(dir, ppm, dur_ns)| FaultKind::Duplicate { dir, ppm, dur_ns });
    let corrupt = (dir(), ppm(100_000), dur()).prop_map(|(dir, ppm, dur_ns)| FaultKind::Corrupt {
        dir,
        ppm,
        dur_ns,
    });
    let truncate = (dir(), ppm(100_000), dur())
        .prop_map(|(dir, ppm, dur_ns)| FaultKind::Truncate { dir, ppm, dur_ns });
    let reorder = (dir(), 1u64..5_000, dur())
        .prop_map(|(dir, jitter_ns, dur_ns)| FaultKind::Reorder { dir, jitter_ns, dur_ns });
    let drop_nth = (dir(), prop_oneof![3 => 0u64..8, 1 => 8u64..256])
        .prop_map(|(dir, n)| FaultKind::DropNth { dir, n });
    let partition = (1_000u64..1_000_000).prop_map(|dur_ns| FaultKind::Partition { dur_ns });
    if dup {
        prop_oneof![loss, duplicate, corrupt, truncate, reorder, drop_nth, partition].boxed()
    } else {
        prop_oneof![loss, corrupt, truncate, reorder, drop_nth, partition].boxed()
    }
}

/// A fault that RC with retries left must ride out: up to 20 % loss or duplication, up to 10 %
/// corruption or truncation, reordering, a dropped packet, a partition shorter than the retry
/// budget — each for at most 2 ms.
pub fn bounded_fault() -> impl Strategy<Value = FaultKind> {
    fault_kind(true)
}

/// 1..=`max` faults of `kind` (or, one time in seven, none), most starting at once (acting on
/// the first burst of packets) or in the first `early_ns` (where short workloads run), some up
/// to 2 ms.
fn schedule_of(
    kind: BoxedStrategy<FaultKind>,
    max: usize,
    early_ns: u64,
) -> BoxedStrategy<Vec<FaultEvent>> {
    let at = prop_oneof![3 => Just(0u64), 2 => 0u64..early_ns, 1 => 0u64..2_000_000];
    let event = (at, kind).prop_map(|(at_ns, kind)| FaultEvent { at_ns, kind });
    prop_oneof![
        1 => Just(Vec::new()),
        6 => prop::collection::vec(event, 1..=max.max(1)),
    ]
    .boxed()
}

/// 0..=`max` bounded faults, most from the start or in the first 5 µs (where small workloads
/// run), some up to 2 ms; an empty schedule (a clean link) one time in seven.
pub fn fault_schedule(max: usize) -> impl Strategy<Value = Vec<FaultEvent>> {
    schedule_of(fault_kind(true), max, 5_000)
}

/// Like [`fault_schedule`] without duplication and packed into the first 2 µs, where a burst
/// of datagrams is on the wire. Without duplication because UD has no PSNs: a datagram the
/// network duplicates is received twice, so "at most once" holds only on a network that does
/// not duplicate.
pub fn datagram_fault_schedule(max: usize) -> impl Strategy<Value = Vec<FaultEvent>> {
    schedule_of(fault_kind(false), max, 2_000)
}

/// An RC case with bounded faults and retries left (it must complete successfully).
pub fn bounded_case() -> impl Strategy<Value = Case> {
    (any::<u64>(), workload(8), fault_schedule(4), mtu(), window(), psns()).prop_map(
        |(seed, workload, faults, mtu, window, psns)| Case {
            faults,
            mtu,
            window,
            psns,
            ..Case::new(seed, workload)
        },
    )
}

/// An RC case cut partway, until the requester gives up (it must end in `RETRY_EXC_ERR`, then
/// flushes, then silence). The cut comes early enough that most cases are still running.
pub fn partition_case() -> impl Strategy<Value = Case> {
    let cut = prop_oneof![2 => 0u64..2_000, 2 => 0u64..20_000, 1 => 0u64..200_000];
    (any::<u64>(), workload(8), cut, 0u8..=3, mtu(), psns()).prop_map(
        |(seed, workload, cut, retry_cnt, mtu, psns)| Case {
            retry_cnt,
            timeout: 5,
            cut_at_ns: Some(cut),
            mtu,
            psns,
            ..Case::new(seed, workload)
        },
    )
}

/// An RC case whose receiver posts late (RNR NAKs until it does; `rnr_retry = 7` waits
/// forever), mostly under bounded faults too. The first WR is a SEND, so every case meets an
/// RNR NAK.
pub fn rnr_case() -> impl Strategy<Value = Case> {
    let first = item_of(Just(OpKind::Send), size().boxed());
    (any::<u64>(), first, workload(5), 5_000u64..3_000_000, mtu(), fault_schedule(3)).prop_map(
        |(seed, first, rest, delay, mtu, faults)| {
            let mut workload = vec![first];
            workload.extend(rest);
            Case { timeout: 14, recv_delay_ns: delay, mtu, faults, ..Case::new(seed, workload) }
        },
    )
}

/// A UC case with faults, most in the first 2 µs where its burst of packets is on the wire
/// (none of them may deliver a message twice, out of order or in part).
pub fn uc_case() -> impl Strategy<Value = Case> {
    let faults = schedule_of(fault_kind(true), 3, 2_000);
    (any::<u64>(), uc_workload(8), faults, mtu(), psns()).prop_map(
        |(seed, workload, faults, mtu, psns)| Case {
            qp_type: QpType::Uc,
            faults,
            mtu,
            psns,
            ..Case::new(seed, workload)
        },
    )
}

/// A UD case with faults other than duplication (see [`datagram_fault_schedule`]).
pub fn ud_case() -> impl Strategy<Value = Case> {
    (any::<u64>(), ud_workload(12, Mtu::Mtu4096), datagram_fault_schedule(3)).prop_map(
        |(seed, workload, faults)| Case {
            qp_type: QpType::Ud,
            faults,
            mtu: Mtu::Mtu4096,
            ..Case::new(seed, workload)
        },
    )
}

/// Several RC requesters running atomics on one word of one target, under faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentionCase {
    /// The world's seed.
    pub seed: u64,
    /// Each requester's atomics, in post order.
    pub per_qp: Vec<Vec<AtomicOp>>,
    /// Faults, applied to every requester's pair of links.
    pub faults: Vec<FaultEvent>,
}

/// 2–4 requesters with 1–6 atomics each (CAS with small values so some succeed, FADD),
/// with bounded faults.
pub fn contention_case() -> impl Strategy<Value = ContentionCase> {
    let op = prop_oneof![
        (0u64..8, 0u64..8).prop_map(|(compare, swap)| AtomicOp::CompareSwap { compare, swap }),
        (0u64..4).prop_map(|add| AtomicOp::FetchAdd { add }),
    ];
    let per_qp = prop::collection::vec(prop::collection::vec(op, 1..=6), 2..=4);
    (any::<u64>(), per_qp, fault_schedule(3)).prop_map(|(seed, per_qp, faults)| ContentionCase {
        seed,
        per_qp,
        faults,
    })
}

fn describe(case: &Case) -> String {
    format!(
        "case: seed {} ({:?}, {} WRs, {} fault events{}{})",
        case.seed,
        case.qp_type,
        case.workload.len(),
        case.faults.len(),
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
