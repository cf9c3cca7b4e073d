//! Directed links: their parameters (latency, bandwidth, queue limit, fault probabilities), the
//! FIFO that serialises packets onto them, and the per-link counters of what they did.

use std::collections::VecDeque;

use nic_model::engine::slot_of_datagram_addr;
use nic_model::fault::DropNth;

use super::trace::{peek_bth, NONE};

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
/// Laid out in declaration order (`repr(C)`), each link starting a cache line, so that a
/// packet on a link without faults touches three of its lines: the first two hold what
/// `offer_from`, `enqueue`, the step and the arrival read or write
/// (the FIFO headers; the line's clock and queue sums; copies of the latency, the queue
/// limit and the far end; the switches that say whether the fault path must run), the third
/// the first counters every packet adds to. The parameters, the rest of the counters, PFC's
/// state and the drop list come after, read only by a link with faults, PFC or ECN. In a
/// world of a thousand hosts a link is cold when its next packet comes, and each line
/// touched is a miss.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Link {
    /// Packets serialised and propagating, in arrival order (see the world's event order).
    pub(crate) in_flight: VecDeque<InFlight>,
    /// Finish times of the packets in its FIFO (waiting or being serialised), oldest first.
    pub(crate) queue: VecDeque<u64>,
    /// When the line is free again.
    pub(crate) busy_until_ns: u64,
    /// The longest busy time a packet found ahead of it on entering (`stats.peak_queue_bytes`
    /// in time, so the per-packet check is an integer compare).
    pub(crate) peak_ahead_ns: u64,
    /// The busy times packets found ahead of them on entering, summed (for the mean queue).
    pub(crate) sum_ahead_ns: u64,
    pub(crate) waiting_bytes: u64,
    /// `params.latency_ns`, next to the clock.
    pub(crate) latency_ns: u64,
    /// `dst`, next to the clock.
    pub(crate) dst_node: u32,
    /// `params.queue_limit`, saturated to `u32::MAX` (no FIFO holds that many packets).
    pub(crate) queue_limit: u32,
    /// The last (datagram length, serialisation time) this link computed: a stream's
    /// datagrams are mostly one size, and the time is a floating-point division and a rounding
    /// per packet otherwise. Cleared when the parameters change; a length or time over
    /// `u32::MAX` is not remembered.
    last_serialisation: (u32, u32),
    /// `waiting.len()`, next to the clock.
    pub(crate) waiting_len: u32,
    /// Whether it is cut.
    pub partitioned: bool,
    /// Whether a packet offered may meet anything but the FIFO: a partition, a pending
    /// k-th drop, a fault probability or jitter that is not zero (or not a number), ECN
    /// marking. When false, the fault path would draw no random number and change nothing,
    /// so it is skipped and its fields are not read.
    pub(crate) faulty: bool,
    /// Whether `dst` is a switch (it forwards what arrives).
    pub(crate) dst_switch: bool,
    /// Its counters.
    pub stats: LinkStats,
    /// Its parameters now.
    pub params: LinkParams,
    /// Where packets enter.
    pub src: usize,
    /// Where they come out.
    pub dst: usize,
    /// Indices of offered packets to drop.
    pub(crate) drop_nth: DropNth,
    /// With PFC on: packets waiting for the line (one serialises at a time, so that a pause
    /// stops the rest), their bytes, and the one serialising (its ingress link, its length).
    pub(crate) waiting: VecDeque<Waiting>,
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
    pub(crate) fn new(src: usize, dst: usize, dst_switch: bool, params: LinkParams) -> Link {
        let mut l = Link {
            src,
            dst,
            dst_node: u32::try_from(dst).expect("a world has fewer than 2^32 nodes"),
            dst_switch,
            latency_ns: 0,
            queue_limit: 0,
            faulty: false,
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
            waiting_len: 0,
            serialising: None,
            paused_until_ns: 0,
            paused_since_ns: None,
        };
        l.refresh();
        l
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
        self.refresh();
    }

    /// Copy the parameters the per-packet path reads next to the clock, and decide whether
    /// a packet may meet a fault here (see `faulty`).
    fn refresh(&mut self) {
        let p = &self.params;
        self.latency_ns = p.latency_ns;
        self.queue_limit = u32::try_from(p.queue_limit).unwrap_or(u32::MAX);
        // `chance(p)` draws nothing for p <= 0; a NaN is not <= 0, so it counts as a fault.
        let clean = p.loss <= 0.0
            && p.dup <= 0.0
            && p.corrupt <= 0.0
            && p.truncate <= 0.0
            && p.reorder_jitter_ns == 0
            && p.ecn.is_none();
        self.faulty = !clean || self.partitioned || !self.drop_nth.is_empty();
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
        self.queue_len(now_ns) + self.waiting_len as usize
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
        if self.last_serialisation.0 as usize == bytes {
            return self.last_serialisation.1 as u64;
        }
        let ns = self.params.serialisation_ns(bytes);
        if let (Ok(b), Ok(t)) = (u32::try_from(bytes), u32::try_from(ns)) {
            self.last_serialisation = (b, t);
        }
        ns
    }

    /// Record a packet entering the FIFO at `now_ns` that leaves it at `finish_ns`, forgetting
    /// those that have left (so an unbounded link's FIFO does not grow with every packet).
    pub(crate) fn note_queued(&mut self, now_ns: u64, finish_ns: u64) {
        self.queue_len(now_ns);
        self.queue.push_back(finish_ns);
    }
}

/// No serialisation time remembered yet: (0 bytes, 0 ns), which is also the right answer for
/// an empty datagram on any link.
const NO_SERIALISATION: (u32, u32) = (0, 0);

/// What the fabric reads of a packet's bytes: the BTH fields its trace records show, the
/// destination's fabric slot and the flow's ECMP hash. Taken from the bytes where they are warm
/// (the NIC has just written them, or a fault has just changed them) and carried with the
/// packet through links and switches, so a switch forwards a packet without reading its bytes:
/// at a thousand hosts they have left the cache by the time the packet arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hdr {
    /// Opcode, PSN and destination QP, as [`super::trace::peek_bth`] (`NONE` for an empty
    /// packet, as the trace records it).
    bth: (u32, u32, u32),
    /// The fabric slot of the destination address (0 for a foreign address or a runt).
    pub(crate) to_slot: u16,
    /// The flow's ECMP hash ([`flow_hash`]).
    pub(crate) hash: u32,
}

impl Hdr {
    /// Read what the fabric needs from a datagram: the BTH fields, and with `routed` (a
    /// world with a switch or a choice of paths) the destination and the hash; without, they
    /// are never read, and stay 0.
    #[inline]
    pub(crate) fn of(data: &[u8], routed: bool) -> Hdr {
        let bth = if data.is_empty() { (NONE, NONE, NONE) } else { peek_bth(data) };
        match routed {
            true => Hdr {
                bth,
                to_slot: slot_of_datagram_addr(data, true),
                hash: flow_hash(data) as u32,
            },
            false => Hdr { bth, to_slot: 0, hash: 0 },
        }
    }

    /// Opcode, PSN and destination QP for a trace record.
    #[inline]
    pub(crate) fn bth(&self) -> (u32, u32, u32) {
        self.bth
    }
}

/// A flow's hash for ECMP (under 2^32): source and destination address and UDP source port, read from an
/// IPv4 or IPv6 datagram (0 for one too short to have them, which then takes the first path).
fn flow_hash(data: &[u8]) -> u64 {
    let (src, dst, sport) = match data.first().map(|b| b >> 4) {
        Some(6) => (8..24, 24..40, 40),
        _ => (12..16, 16..20, 20),
    };
    let fold = |r: std::ops::Range<usize>| {
        data.get(r).map_or(0u64, |b| b.iter().fold(0u64, |h, &x| h.rotate_left(8) ^ x as u64))
    };
    let port = data.get(sport..sport + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]) as u64);
    let h = fold(src) ^ fold(dst).rotate_left(21) ^ port.rotate_left(42);
    // A multiplicative mix, so that nearby ports and addresses land on different paths.
    h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

/// A packet in flight on a link: its arrival key, its bytes and what the fabric reads of
/// them. One cache line each, so the step that takes it reads one line of the link's FIFO.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct InFlight {
    pub(super) arrive_ns: u64,
    pub(super) seq: u64,
    pub(super) data: Vec<u8>,
    pub(super) hdr: Hdr,
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::{Link, LinkChange, LinkParams, LinkStats};

    /// What a packet on a link without faults touches sits in a link's first three cache
    /// lines.
    #[test]
    fn a_packet_touches_three_lines_of_its_link() {
        const LINE: usize = 64;
        assert_eq!(align_of::<Link>(), LINE, "each link starts a line");
        for end in [
            offset_of!(Link, in_flight) + 32,
            offset_of!(Link, queue) + 32,
            offset_of!(Link, waiting_bytes) + 8,
            offset_of!(Link, latency_ns) + 8,
            offset_of!(Link, dst_node) + 4,
            offset_of!(Link, queue_limit) + 4,
            offset_of!(Link, last_serialisation) + 8,
            offset_of!(Link, waiting_len) + 4,
            offset_of!(Link, partitioned) + 1,
            offset_of!(Link, faulty) + 1,
            offset_of!(Link, dst_switch) + 1,
        ] {
            assert!(end <= 2 * LINE, "the FIFOs, clocks and switches fill two lines ({end})");
        }
        let counted = offset_of!(Link, stats) + offset_of!(LinkStats, delivered_bytes) + 8;
        assert!(offset_of!(Link, stats) >= 2 * LINE, "the counters start the third line");
        assert!(counted <= 3 * LINE, "offered, delivered and their bytes end at {counted}");
        let _ = size_of::<LinkParams>();
    }

    /// A link whose packets can meet no fault skips the fault path; any fault, a partition,
    /// a k-th drop or ECN marking (and a probability that is not a number) takes it.
    #[test]
    fn only_a_link_that_can_do_nothing_to_a_packet_skips_the_fault_path() {
        let clean = Link::new(0, 1, false, LinkParams::default());
        assert!(!clean.faulty);
        let with = |f: fn(&mut LinkParams)| {
            let mut p = LinkParams::default();
            f(&mut p);
            Link::new(0, 1, true, p).faulty
        };
        assert!(with(|p| p.loss = 0.01));
        assert!(with(|p| p.dup = f64::NAN));
        assert!(with(|p| p.corrupt = 1.0));
        assert!(with(|p| p.truncate = 0.5));
        assert!(with(|p| p.reorder_jitter_ns = 1));
        assert!(with(|p| p.ecn = Some(crate::world::cc::EcnMarking::DCQCN_PAPER)));
        for change in [LinkChange::Partition, LinkChange::DropNth(3)] {
            let mut l = clean.clone();
            l.apply(&change);
            assert!(l.faulty, "{change:?}");
        }
        let mut l = clean.clone();
        l.apply(&LinkChange::Params(LinkParams {
            latency_ns: 7,
            queue_limit: 1 << 40,
            ..Default::default()
        }));
        assert!(!l.faulty);
        assert_eq!(
            (l.latency_ns, l.queue_limit),
            (7, u32::MAX),
            "the copies follow the parameters"
        );
    }
}
