//! Directed links: their parameters (latency, bandwidth, queue limit, fault probabilities), the
//! FIFO that serialises packets onto them, and the per-link counters of what they did.

use std::collections::VecDeque;

use nic_model::fault::DropNth;

/// What a link is like. Probabilities are per packet, in [0, 1].
#[derive(Clone, Debug, PartialEq)]
#[repr(C)]
pub struct LinkParams {
    /// One-way propagation delay.
    pub latency_ns: u64,
    /// Line rate in Gbit/s (bits per ns); 0 means infinitely fast (no serialisation delay).
    pub bandwidth_gbps: f64,
    /// Packets a switch's link may hold waiting for or in serialisation; more are tail-dropped.
    /// 0 means unbounded. A NIC's own link never tail-drops: it paces its NIC, whose send queue
    /// holds what waits (see `World::transmit`), so there the limit only caps how many
    /// datagrams the NIC commits to the serialiser at once.
    pub queue_limit: usize,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is duplicated.
    pub dup: f64,
    /// Each packet is delayed by a uniform extra 0..=this many ns, which reorders packets.
    pub reorder_jitter_ns: u64,
    /// Probability one bit of a packet is flipped (the receiver's ICRC check then drops it).
    pub corrupt: f64,
    /// Probability a packet is cut short.
    pub truncate: f64,
    /// RED-like ECN marking at this link's queue (a switch's egress queue), or none (the
    /// default: nothing is marked and no random number is drawn).
    pub ecn: Option<super::cc::EcnMarking>,
}

impl Default for LinkParams {
    /// A clean 100 Gbit/s link with 1 µs latency and a 1024-packet queue.
    fn default() -> LinkParams {
        LinkParams {
            latency_ns: 1_000,
            bandwidth_gbps: 100.0,
            queue_limit: 1024,
            loss: 0.0,
            dup: 0.0,
            reorder_jitter_ns: 0,
            corrupt: 0.0,
            truncate: 0.0,
            ecn: None,
        }
    }
}

impl LinkParams {
    /// The link's per-packet faults, in the vocabulary the soft backend's fault plans share.
    pub fn faults(&self) -> nic_model::fault::FaultParams {
        nic_model::fault::FaultParams {
            loss: self.loss,
            dup: self.dup,
            reorder_jitter_ns: self.reorder_jitter_ns,
            corrupt: self.corrupt,
            truncate: self.truncate,
        }
    }

    /// Serialisation time of `bytes` on this link.
    pub fn serialisation_ns(&self, bytes: usize) -> u64 {
        if self.bandwidth_gbps <= 0.0 {
            return 0;
        }
        ((bytes as f64 * 8.0) / self.bandwidth_gbps).ceil() as u64
    }
}

/// Counters of one link (and, summed, of the world). Every injected fault is counted.
/// In declaration order (`repr(C)`): the three every packet counts come first, next to the
/// link's parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct LinkStats {
    /// Packets offered to the link.
    pub offered: u64,
    /// Packets that reached the far end (before the far node looked at them).
    pub delivered: u64,
    /// Bytes that reached the far end.
    pub delivered_bytes: u64,
    /// Random losses (a lossy cable).
    pub lost: u64,
    /// Tail drops at a full queue: only on a switch's link (its egress queue).
    pub queue_drops: u64,
    /// Drops because the link was partitioned when the packet was sent or arrived.
    pub partition_drops: u64,
    /// Explicit drops of the k-th packet.
    pub nth_drops: u64,
    /// Duplicates made.
    pub duplicated: u64,
    /// Packets delayed by a non-zero reorder jitter.
    pub jittered: u64,
    /// Bit flips.
    pub corrupted: u64,
    /// Truncations.
    pub truncated: u64,
    /// Packets marked CE (congestion experienced) by the link's ECN marking.
    pub ecn_marked: u64,
    /// The longest queue a packet found on entering, bytes (the line's busy time ahead of it
    /// times its rate; 0 on an infinitely fast link). Summed stats keep the largest.
    pub peak_queue_bytes: u64,
    /// Times a PFC pause stopped the link (refreshes of a pause not counted again).
    pub pfc_pauses: u64,
    /// Time the link spent paused by PFC, ns (pauses still running not counted).
    pub paused_ns: u64,
}

impl LinkStats {
    /// Every injected fault (losses, tail drops, partition drops, k-th drops, duplicates,
    /// jitter, corruption, truncation).
    pub fn faults(&self) -> u64 {
        self.lost
            + self.queue_drops
            + self.partition_drops
            + self.nth_drops
            + self.duplicated
            + self.jittered
            + self.corrupted
            + self.truncated
    }

    /// Add `o` into `self`.
    pub fn add(&mut self, o: &LinkStats) {
        self.offered += o.offered;
        self.delivered += o.delivered;
        self.delivered_bytes += o.delivered_bytes;
        self.lost += o.lost;
        self.queue_drops += o.queue_drops;
        self.partition_drops += o.partition_drops;
        self.nth_drops += o.nth_drops;
        self.duplicated += o.duplicated;
        self.jittered += o.jittered;
        self.corrupted += o.corrupted;
        self.truncated += o.truncated;
        self.ecn_marked += o.ecn_marked;
        self.peak_queue_bytes = self.peak_queue_bytes.max(o.peak_queue_bytes);
        self.pfc_pauses += o.pfc_pauses;
        self.paused_ns += o.paused_ns;
    }

    /// `(name, count)` of each fault kind, for summaries.
    pub fn fault_kinds(&self) -> [(&'static str, u64); 8] {
        [
            ("loss", self.lost),
            ("queue-drop", self.queue_drops),
            ("partition-drop", self.partition_drops),
            ("nth-drop", self.nth_drops),
            ("duplicate", self.duplicated),
            ("jitter", self.jittered),
            ("corrupt", self.corrupted),
            ("truncate", self.truncated),
        ]
    }
}

/// A change to a link, applied now or at a scheduled virtual time.
#[derive(Clone, Debug, PartialEq)]
pub enum LinkChange {
    /// Replace the link's parameters (packets already queued keep their times).
    Params(LinkParams),
    /// Cut the link: packets sent on it, and packets on it when they would arrive, are dropped.
    Partition,
    /// Undo a partition.
    Heal,
    /// Drop the packet with this index among those offered to the link (0 = the first ever).
    DropNth(u64),
}

/// One directed link.
///
/// Laid out in declaration order (`repr(C)`), each link starting a cache line: what every
/// packet reads or writes (the FIFOs, the line's clock, the fault switches, the parameters,
/// the first three counters) fills its first five lines, the rest of the counters and PFC's
/// state the last two. In a world of a thousand hosts a link is cold when its next packet
/// comes, and each line touched is a miss.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Link {
    /// Packets serialised and propagating, in arrival order (see the world's event order).
    pub(crate) in_flight: VecDeque<InFlight>,
    /// Finish times of the packets in its FIFO (waiting or being serialised), oldest first.
    pub(crate) queue: VecDeque<u64>,
    /// With PFC on: packets waiting for the line (one serialises at a time, so that a pause
    /// stops the rest), their bytes, and the one serialising (its ingress link, its length).
    pub(crate) waiting: VecDeque<Waiting>,
    /// When the line is free again.
    pub(crate) busy_until_ns: u64,
    /// The longest busy time a packet found ahead of it on entering (`stats.peak_queue_bytes`
    /// in time, so the per-packet check is an integer compare).
    pub(crate) peak_ahead_ns: u64,
    /// The busy times packets found ahead of them on entering, summed (for the mean queue).
    pub(crate) sum_ahead_ns: u64,
    pub(crate) waiting_bytes: u64,
    /// The last (datagram length, serialisation time) this link computed: a stream's
    /// datagrams are mostly one size, and the time is a floating-point division and a rounding
    /// per packet otherwise. Cleared when the parameters change.
    last_serialisation: (usize, u64),
    /// Where packets enter.
    pub src: usize,
    /// Where they come out.
    pub dst: usize,
    /// Indices of offered packets to drop.
    pub(crate) drop_nth: DropNth,
    /// Whether it is cut.
    pub partitioned: bool,
    /// Its parameters now.
    pub params: LinkParams,
    /// Its counters.
    pub stats: LinkStats,
    pub(crate) serialising: Option<(u32, u32)>,
    /// PFC: paused until then (0: not paused), and since when.
    pub(crate) paused_until_ns: u64,
    pub(crate) paused_since_ns: Option<u64>,
}

/// A packet waiting for a link's line with PFC on.
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    pub(crate) data: Vec<u8>,
    pub(crate) extra_ns: u64,
    /// The link it came into its switch on (`NONE` from a NIC).
    pub(crate) ingress: u32,
}

impl Link {
    pub(crate) fn new(src: usize, dst: usize, params: LinkParams) -> Link {
        Link {
            src,
            dst,
            params,
            partitioned: false,
            stats: LinkStats::default(),
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            busy_until_ns: 0,
            drop_nth: DropNth::default(),
            last_serialisation: NO_SERIALISATION,
            peak_ahead_ns: 0,
            sum_ahead_ns: 0,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            serialising: None,
            paused_until_ns: 0,
            paused_since_ns: None,
        }
    }

    pub(crate) fn apply(&mut self, change: &LinkChange) {
        match change {
            LinkChange::Params(p) => {
                self.params = p.clone();
                self.last_serialisation = NO_SERIALISATION;
            }
            LinkChange::Partition => self.partitioned = true,
            LinkChange::Heal => self.partitioned = false,
            LinkChange::DropNth(n) => self.drop_nth.add(*n),
        }
    }

    /// Packets in the FIFO at `now_ns`.
    pub fn queue_len(&mut self, now_ns: u64) -> usize {
        while self.queue.front().is_some_and(|&t| t <= now_ns) {
            self.queue.pop_front();
        }
        self.queue.len()
    }

    /// The bytes waiting ahead of a packet entering now: the time the line is still busy
    /// times its rate (0 on an infinitely fast link).
    pub fn backlog_bytes(&self, now_ns: u64) -> u64 {
        let ahead = self.busy_until_ns.saturating_sub(now_ns);
        (ahead as f64 * self.params.bandwidth_gbps.max(0.0) / 8.0) as u64 + self.waiting_bytes
    }

    /// The time a packet entering now waits before its serialisation starts (with PFC on,
    /// for the packets waiting too, at the line rate, pauses not counted).
    #[inline]
    pub(crate) fn ahead_ns(&self, now_ns: u64) -> u64 {
        let busy = self.busy_until_ns.saturating_sub(now_ns);
        match self.waiting_bytes {
            0 => busy,
            b => busy + self.params.serialisation_ns(b as usize),
        }
    }

    /// Packets in the queue at `now_ns`, serialising or waiting.
    pub(crate) fn held(&mut self, now_ns: u64) -> usize {
        self.queue_len(now_ns) + self.waiting.len()
    }

    /// The mean backlog the packets that entered the queue found ahead of them, bytes (what
    /// an arriving packet sees, averaged; at the current line rate).
    pub fn mean_queue_bytes(&self) -> f64 {
        let entered = self.stats.offered.max(1) as f64;
        self.sum_ahead_ns as f64 / entered * self.params.bandwidth_gbps.max(0.0) / 8.0
    }

    /// [`LinkParams::serialisation_ns`] of `bytes` on this link, remembering the last answer.
    #[inline]
    pub(crate) fn serialisation_ns(&mut self, bytes: usize) -> u64 {
        if self.last_serialisation.0 != bytes {
            self.last_serialisation = (bytes, self.params.serialisation_ns(bytes));
        }
        self.last_serialisation.1
    }

    /// Record a packet entering the FIFO at `now_ns` that leaves it at `finish_ns`, forgetting
    /// those that have left (so an unbounded link's FIFO does not grow with every packet).
    pub(crate) fn note_queued(&mut self, now_ns: u64, finish_ns: u64) {
        self.queue_len(now_ns);
        self.queue.push_back(finish_ns);
    }
}

/// No serialisation time remembered yet (no datagram is `usize::MAX` bytes long).
const NO_SERIALISATION: (usize, u64) = (usize::MAX, 0);

/// A packet in flight on a link: its arrival key and its bytes.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    pub(super) arrive_ns: u64,
    pub(super) seq: u64,
    pub(super) data: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::{Link, LinkParams, LinkStats};

    /// What every packet touches sits in a link's first five cache lines.
    #[test]
    fn a_packet_touches_five_lines_of_its_link() {
        const LINE: usize = 64;
        assert_eq!(align_of::<Link>(), LINE, "each link starts a line");
        assert!(offset_of!(Link, params) + size_of::<LinkParams>() <= 5 * LINE);
        let counted = offset_of!(Link, stats) + offset_of!(LinkStats, delivered_bytes) + 8;
        assert!(counted <= 5 * LINE, "offered, delivered and their bytes end at {counted}");
        for end in [
            offset_of!(Link, in_flight),
            offset_of!(Link, queue),
            offset_of!(Link, waiting),
            offset_of!(Link, busy_until_ns),
            offset_of!(Link, last_serialisation),
            offset_of!(Link, dst),
            offset_of!(Link, drop_nth),
            offset_of!(Link, partitioned),
        ] {
            assert!(end < 3 * LINE, "the FIFOs, clocks and fault switches fill three lines");
        }
        assert!(size_of::<Link>() <= 7 * LINE, "a link is {} bytes", size_of::<Link>());
    }
}
