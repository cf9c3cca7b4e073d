//! The structured event trace of a run and its running hash. Every packet a link takes, every
//! delivery, drop, injected fault, timer and scheduled change is one [`TraceRecord`]; the hash
//! folds each record's canonical encoding (fixed-width little-endian words) with a 64-bit
//! FNV-1a-style step, so two runs with the same seed and inputs have equal hashes exactly when
//! their traces are identical.

use std::fmt;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum TraceKind {
    /// A packet entered a link (queued for serialisation).
    Send = 1,
    /// A packet reached the NIC at the end of its path.
    Deliver = 2,
    /// A packet reached a switch and was forwarded.
    Forward = 3,
    /// A packet was lost to the link's random loss.
    DropLoss = 4,
    /// A packet was dropped because the link's queue was full (tail drop).
    DropQueue = 5,
    /// A packet was dropped because its link was partitioned (at send or at delivery time).
    DropPartition = 6,
    /// A packet was dropped because of an explicit "drop the k-th packet" fault.
    DropNth = 7,
    /// A packet had no route to its destination.
    DropNoRoute = 8,
    /// A packet was duplicated (the copy follows as its own `Send`).
    Duplicate = 9,
    /// One bit of a packet was flipped.
    Corrupt = 10,
    /// A packet was cut short.
    Truncate = 11,
    /// A packet was delayed by reorder jitter.
    Jitter = 12,
    /// A node's engine timers ran.
    Timer = 13,
    /// A scheduled link change took effect.
    Change = 14,
    /// A packet entering a link's queue was marked CE (ECN); the argument is the queue's
    /// backlog in bytes.
    EcnMark = 15,
    /// A PFC pause frame reached the start of a link (the argument is its quanta: 0 resumes).
    PfcPause = 16,
    /// A PFC deadlock was detected (the argument is the cycle's length in links).
    PfcDeadlock = 17,
}

impl TraceKind {
    /// A short lowercase name for text traces.
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Send => "send",
            TraceKind::Deliver => "deliver",
            TraceKind::Forward => "forward",
            TraceKind::DropLoss => "drop-loss",
            TraceKind::DropQueue => "drop-queue",
            TraceKind::DropPartition => "drop-partition",
            TraceKind::DropNth => "drop-nth",
            TraceKind::DropNoRoute => "drop-no-route",
            TraceKind::Duplicate => "duplicate",
            TraceKind::Corrupt => "corrupt",
            TraceKind::Truncate => "truncate",
            TraceKind::Jitter => "jitter",
            TraceKind::Timer => "timer",
            TraceKind::Change => "change",
            TraceKind::EcnMark => "ecn-mark",
            TraceKind::PfcPause => "pfc-pause",
            TraceKind::PfcDeadlock => "pfc-deadlock",
        }
    }
}

/// A value meaning "none" in the numeric fields of a record.
pub const NONE: u32 = u32::MAX;

/// One event of the trace. Packet fields come from the BTH (peeked, so corrupted packets
/// still show what they carry); `NONE` where they do not apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Virtual time in ns.
    pub time_ns: u64,
    /// What happened.
    pub kind: TraceKind,
    /// The link involved, or `NONE`.
    pub link: u32,
    /// The node involved (timer, delivery), or `NONE`.
    pub node: u32,
    /// BTH opcode, or `NONE`.
    pub opcode: u32,
    /// BTH PSN, or `NONE`.
    pub psn: u32,
    /// BTH destination QP, or `NONE`.
    pub qp: u32,
    /// Datagram length in bytes, or an event-specific value (bit flipped, delay, new length).
    pub arg: u64,
}

impl TraceRecord {
    /// The canonical encoding the hash folds: four little-endian 64-bit words.
    #[inline(always)]
    fn words(&self) -> [u64; 4] {
        [
            self.time_ns,
            (self.kind as u64) | (self.opcode as u64) << 8 | (self.link as u64) << 32,
            self.node as u64 | (self.psn as u64) << 32,
            self.qp as u64 ^ self.arg.rotate_left(32),
        ]
    }
}

impl fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: u32| if v == NONE { "-".to_string() } else { v.to_string() };
        write!(
            f,
            "{:>12} {:<14} link={} node={}",
            self.time_ns,
            self.kind.name(),
            opt(self.link),
            opt(self.node)
        )?;
        if self.opcode != NONE {
            write!(f, " op={:#04x} psn={} qp={:#x}", self.opcode, self.psn, self.qp)?;
        }
        write!(f, " arg={}", self.arg)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The running trace: a hash of every record, and optionally the records themselves.
#[derive(Clone, Debug)]
pub struct Trace {
    hash: u64,
    count: u64,
    keep: bool,
    records: Vec<TraceRecord>,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace { hash: FNV_OFFSET, count: 0, keep: false, records: Vec::new() }
    }
}

impl Trace {
    /// Keep every record in memory (for `--trace FILE`, pcap cross-checks and tests), or only
    /// the hash (long runs).
    pub fn set_keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Fold one record in.
    #[inline(always)]
    pub fn record(&mut self, r: TraceRecord) {
        for w in r.words() {
            // FNV-1a over 64-bit words (one xor-multiply per word) rather than bytes: the same
            // sensitivity to every bit, a fifth of the work on the per-packet path.
            self.hash = (self.hash ^ w).wrapping_mul(FNV_PRIME);
        }
        self.count += 1;
        if self.keep {
            self.records.push(r);
        }
    }

    /// The hash of everything recorded so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How many records were folded in.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The kept records (empty unless [`Trace::set_keep`] was on).
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Write the kept records as text, one a line, with the hash last.
    pub fn write_text(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        for r in &self.records {
            writeln!(out, "{r}")?;
        }
        writeln!(out, "# {} records, hash {:016x}", self.count, self.hash)
    }
}

/// Peek the BTH fields of a datagram (IPv4 20 B or IPv6 40 B ‖ UDP 8 B ‖ BTH): opcode, PSN,
/// destination QP; `NONE` for each field the bytes are too short to hold.
#[inline(always)]
pub fn peek_bth(data: &[u8]) -> (u32, u32, u32) {
    let bth = if data.first().is_some_and(|b| b >> 4 == 6) { 48 } else { 28 };
    // Every packet but a runt holds the whole BTH: one bounds check for its three fields.
    if let Some(&[op, _, _, _, _, q0, q1, q2, _, p0, p1, p2]) = data.get(bth..bth + 12) {
        let be24 = |a: u8, b: u8, c: u8| u32::from_be_bytes([0, a, b, c]);
        return (op as u32, be24(p0, p1, p2), be24(q0, q1, q2));
    }
    let opcode = data.get(bth).map_or(NONE, |&b| b as u32);
    let be24 = |at: usize| {
        data.get(at..at + 3).map_or(NONE, |b| u32::from_be_bytes([0, b[0], b[1], b[2]]))
    };
    (opcode, be24(bth + 9), be24(bth + 5))
}
