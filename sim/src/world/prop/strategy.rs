//! Proptest strategies for property cases: message sizes, workloads per transport, MTUs,
//! windows, first PSNs and fault schedules, and the case families the suites run.

use proptest::prelude::*;
use verbs_api::{Mtu, QpType};

use super::{engine_window, MAX_INLINE};
use super::{AtomicOp, Case, ContentionCase, Dir, FaultEvent, FaultKind, OpKind, WorkItem};

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

/// Switch queues in packets (between the cases' 100 Gbit/s ports and the switch's 25 Gbit/s
/// links towards them): mostly the simulator's default (1,024), often a shorter one, a
/// small one (`smallest`..64) that a burst of a message or of READ responses overflows, and
/// sometimes unbounded (0). A tail dropped at a full queue is a fault like any loss: RC
/// recovers from it, at worst one local ACK timeout for every queue's worth of a burst's tail
/// (`docs/simulator.md`), which is what `smallest` keeps inside the run limit.
pub fn queue_limit(smallest: usize) -> BoxedStrategy<usize> {
    let default = Just(crate::world::LinkParams::default().queue_limit);
    let smallest = smallest.max(1);
    if smallest >= 64 {
        return prop_oneof![3 => default, 4 => smallest..1024, 1 => Just(0usize)].boxed();
    }
    prop_oneof![
        3 => default,
        2 => 64usize..1024,
        2 => smallest..64,
        1 => Just(0usize),
    ]
    .boxed()
}

/// The smallest queue for RC cases whose local ACK timeout is 4 ms (timeout 10): a 1 MiB READ
/// at MTU 256 (4,096 responses) then needs at most 1,024 timeouts, about 4.3 s of the 10 s.
const SMALLEST_QUEUE: usize = 4;

/// The smallest queue for RNR cases, whose local ACK timeout is 67 ms (timeout 14): the same
/// READ then needs at most 64 timeouts, about 4.3 s.
const SMALLEST_QUEUE_RNR: usize = 64;

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

/// An RC case with bounded faults, finite queues and retries left (it must complete
/// successfully).
pub fn bounded_case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        workload(8),
        fault_schedule(4),
        mtu(),
        window(),
        psns(),
        queue_limit(SMALLEST_QUEUE),
    )
        .prop_map(|(seed, workload, faults, mtu, window, psns, queue_limit)| Case {
            faults,
            mtu,
            window,
            psns,
            queue_limit,
            ..Case::new(seed, workload)
        })
}

/// An RC case cut partway, until the requester gives up (it must end in `RETRY_EXC_ERR`, then
/// flushes, then silence). The cut comes early enough that most cases are still running.
pub fn partition_case() -> impl Strategy<Value = Case> {
    let cut = prop_oneof![2 => 0u64..2_000, 2 => 0u64..20_000, 1 => 0u64..200_000];
    (any::<u64>(), workload(8), cut, 0u8..=3, mtu(), psns(), queue_limit(SMALLEST_QUEUE)).prop_map(
        |(seed, workload, cut, retry_cnt, mtu, psns, queue_limit)| Case {
            retry_cnt,
            timeout: 5,
            cut_at_ns: Some(cut),
            mtu,
            psns,
            queue_limit,
            ..Case::new(seed, workload)
        },
    )
}

/// An RC case whose receiver posts late (RNR NAKs until it does; `rnr_retry = 7` waits
/// forever), mostly under bounded faults too. The first WR is a SEND, so every case meets an
/// RNR NAK.
pub fn rnr_case() -> impl Strategy<Value = Case> {
    let first = item_of(Just(OpKind::Send), size().boxed());
    let delay = 5_000u64..3_000_000;
    (
        any::<u64>(),
        first,
        workload(5),
        delay,
        mtu(),
        fault_schedule(3),
        queue_limit(SMALLEST_QUEUE_RNR),
    )
        .prop_map(|(seed, first, rest, delay, mtu, faults, queue_limit)| {
            let mut workload = vec![first];
            workload.extend(rest);
            Case {
                timeout: 14,
                recv_delay_ns: delay,
                mtu,
                faults,
                queue_limit,
                ..Case::new(seed, workload)
            }
        })
}

/// A UC case with faults, most in the first 2 µs where its burst of packets is on the wire
/// (none of them may deliver a message twice, out of order or in part).
pub fn uc_case() -> impl Strategy<Value = Case> {
    let faults = schedule_of(fault_kind(true), 3, 2_000);
    (any::<u64>(), uc_workload(8), faults, mtu(), psns(), queue_limit(2)).prop_map(
        |(seed, workload, faults, mtu, psns, queue_limit)| Case {
            qp_type: QpType::Uc,
            faults,
            mtu,
            psns,
            queue_limit,
            ..Case::new(seed, workload)
        },
    )
}

/// A UD case with faults other than duplication (see [`datagram_fault_schedule`]).
pub fn ud_case() -> impl Strategy<Value = Case> {
    (any::<u64>(), ud_workload(12, Mtu::Mtu4096), datagram_fault_schedule(3), queue_limit(2))
        .prop_map(|(seed, workload, faults, queue_limit)| Case {
            qp_type: QpType::Ud,
            faults,
            mtu: Mtu::Mtu4096,
            queue_limit,
            ..Case::new(seed, workload)
        })
}
/// 2–4 requesters with 1–6 atomics each (CAS with small values so some succeed, FADD),
/// with bounded faults.
pub fn contention_case() -> impl Strategy<Value = ContentionCase> {
    let op = prop_oneof![
        (0u64..8, 0u64..8).prop_map(|(compare, swap)| AtomicOp::CompareSwap { compare, swap }),
        (0u64..4).prop_map(|add| AtomicOp::FetchAdd { add }),
    ];
    let per_qp = prop::collection::vec(prop::collection::vec(op, 1..=6), 2..=4);
    (any::<u64>(), per_qp, fault_schedule(3), queue_limit(SMALLEST_QUEUE)).prop_map(
        |(seed, per_qp, faults, queue_limit)| ContentionCase { seed, per_qp, faults, queue_limit },
    )
}
