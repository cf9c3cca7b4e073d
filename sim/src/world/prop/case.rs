//! A property case as plain values: the WRs of a workload, the faults of a schedule, and
//! everything else a run depends on, so proptest can generate and shrink them.

use verbs_api::{Mtu, QpType, WrOpcode};

use super::AtomicOp;

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
    /// Packets the switch's link in each direction may queue; more are tail-dropped (0:
    /// unbounded). Bursts longer than this lose their tails, as at a real switch's egress
    /// queue (a NIC's own link paces it and never drops).
    pub queue_limit: usize,
}

impl Case {
    /// An RC case on a clean link with `workload`: `retry_cnt` 7, `timeout` 10 (4 ms),
    /// `rnr_retry` 7, receives posted first, MTU 1024, the engine's window, PSNs from the seed,
    /// the simulator's default link queue (1,024 packets).
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
            queue_limit: crate::world::LinkParams::default().queue_limit,
        }
    }
}

/// The send window the engine has unless told otherwise (`NicConfig::new`).
pub fn engine_window() -> u32 {
    nic_model::engine::NicConfig::new("", 0).window
}

/// The largest inline payload the property QPs allow.
pub const MAX_INLINE: u32 = 64;
/// Several RC requesters running atomics on one word of one target, under faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentionCase {
    /// The world's seed.
    pub seed: u64,
    /// Each requester's atomics, in post order.
    pub per_qp: Vec<Vec<AtomicOp>>,
    /// Faults, applied to every requester's pair of links.
    pub faults: Vec<FaultEvent>,
    /// Packets each of the switch's links may queue (0: unbounded), as [`Case::queue_limit`].
    pub queue_limit: usize,
}
