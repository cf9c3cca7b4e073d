//! The event queue and the loop that runs it: events ordered by (time, sequence number), their
//! bodies in a slab or at the head of a link's packets in flight, and the run helpers.
//!
//! Packets on a link arrive in the order they were sent unless jitter or a latency change
//! reorders them, so each link keeps its packets in flight in a FIFO and only the head of
//! each FIFO sits in the event heap; a packet that would arrive before the one queued
//! ahead of it becomes an event of its own. Either way every event keeps its (time, sequence
//! number) key and events run in exactly that order: the heap stays small (a few entries per
//! link) however many packets are in flight.

use std::collections::binary_heap::PeekMut;

use super::{LinkChange, LinkId, NodeId, World};

/// What happens when an event runs.
pub(super) enum EventKind {
    /// A packet reaches the far end of a link.
    Arrive { link: LinkId, data: Vec<u8>, hdr: super::link::Hdr },
    /// A node's engine timer may be due.
    Timer { node: NodeId },
    /// The line of a link a NIC waits to transmit on is free (see `World::transmit`).
    Transmit { node: NodeId },
    /// A scheduled link change.
    Change { link: LinkId, change: LinkChange },
    /// PFC: a link's line may be free, or its pause over (`World::link_free`).
    LinkFree { link: LinkId },
    /// PFC: a pause frame reaches the start of `link`.
    Pause { link: LinkId, quanta: u16 },
    /// PFC: time to refresh the XOFF of ingress `link`.
    PauseRefresh { link: LinkId },
}

/// The heap key of an event: (time, sequence number << SOURCE_BITS | source). The sequence
/// number makes the order total and FIFO among equal times; the source says where the event's
/// body is: a slot of the slab, or (with [`SOURCE_LINK`]) the packet at the head of a link's
/// packets in flight. So the heap moves 16-byte keys, not packets.
///
/// The pair is packed into one `u128` (time in the high half), which orders exactly as the
/// pair does and compares without a branch: the heap's sifts are a tenth of a busy run's
/// work in the simulator itself.
pub(super) type EventKey = std::cmp::Reverse<u128>;

/// The heap key of an event at `at_ns` with `key` (sequence number and source).
#[inline]
pub(super) fn event_key(at_ns: u64, key: u64) -> EventKey {
    std::cmp::Reverse((at_ns as u128) << 64 | key as u128)
}

/// The (time, sequence number and source) of a heap key.
#[inline]
fn split_key(k: &EventKey) -> (u64, u64) {
    ((k.0 >> 64) as u64, k.0 as u64)
}

/// Bits of the key below the sequence number.
pub(super) const SOURCE_BITS: u32 = 25;
/// Set in a source that names a link (the head of its packets in flight), clear in one that
/// names a slab slot.
pub(super) const SOURCE_LINK: u64 = 1 << 24;
/// Slots the slab may hold at once, and links a world may have (24 bits of the source).
pub(super) const MAX_SLOTS: usize = 1 << 24;

/// How a run towards a condition ended ([`World::run_until_pred`],
/// [`SimWorld::run_until_pred`](super::SimWorld::run_until_pred)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The condition held.
    Satisfied,
    /// No event was left before the condition held: nothing will ever change again unless
    /// the program posts more work (a lost completion or a protocol waiting for itself).
    Idle,
    /// Events were still pending, but the next one is after the deadline: the condition did
    /// not hold in time.
    Deadline,
}

impl RunOutcome {
    /// True if the condition held.
    pub fn is_satisfied(self) -> bool {
        self == RunOutcome::Satisfied
    }

    /// Why a run must stop before the next event (at `next`, if any), or `None` if that
    /// event is due by `deadline_ns`.
    pub(super) fn stop(next: Option<u64>, deadline_ns: u64) -> Option<RunOutcome> {
        match next {
            None => Some(RunOutcome::Idle),
            Some(t) if t > deadline_ns => Some(RunOutcome::Deadline),
            Some(_) => None,
        }
    }
}

impl World {
    /// The time of the next event, if any.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.heap.peek().map(|k| split_key(k).0)
    }

    /// Run the next event; false if there is none.
    pub fn step(&mut self) -> bool {
        let Some(mut top) = self.heap.peek_mut() else { return false };
        let (at_ns, key) = split_key(&top);
        debug_assert!(at_ns >= self.now_ns, "the clock never goes back");
        self.now_ns = at_ns;
        self.events_run += 1;
        self.pending -= 1;
        let source = key & ((1 << SOURCE_BITS) - 1);
        let index = (source & (MAX_SLOTS as u64 - 1)) as usize;
        if source & SOURCE_LINK != 0 {
            let link = &mut self.links[index];
            // Only a NIC reads a packet's bytes; a switch reads its `Hdr`.
            let to_nic = !link.dst_switch;
            let in_flight = &mut link.in_flight;
            let p = in_flight.pop_front().expect("a link key names the packet at its head");
            debug_assert_eq!((p.arrive_ns, p.seq), (at_ns, key >> SOURCE_BITS));
            // The next packet in flight takes its place in the heap: one sift, not two.
            match in_flight.front() {
                Some(next) => {
                    // It arrives a few events from now: have its bytes on their way to the
                    // cache (its queue may have held it long enough for them to leave).
                    if to_nic {
                        nic_model::prefetch::prefetch_bytes(&next.data);
                    }
                    *top = event_key(next.arrive_ns, next.seq << SOURCE_BITS | source);
                    drop(top);
                }
                None => drop(PeekMut::pop(top)),
            }
            self.arrive(index, p.data, p.hdr);
            return true;
        }
        PeekMut::pop(top);
        let kind = self.slab[index].take().expect("a heap key names a full slot");
        self.free.push(index as u32);
        match kind {
            EventKind::Arrive { link, data, hdr } => self.arrive(link, data, hdr),
            EventKind::Timer { node } => self.fire_timer(node),
            EventKind::Transmit { node } => self.wake_transmit(node),
            EventKind::Change { link, change } => self.change_link(link, change),
            EventKind::LinkFree { link } => self.link_free(link),
            EventKind::Pause { link, quanta } => self.pause_arrive(link, quanta),
            EventKind::PauseRefresh { link } => self.pause_refresh(link),
        }
        true
    }

    /// Run until no event is left, or `max_events` have run; true if the world went idle.
    pub fn run_until_idle(&mut self, max_events: u64) -> bool {
        for _ in 0..max_events {
            if !self.step() {
                return true;
            }
        }
        self.heap.is_empty()
    }

    /// Run every event due at or before `deadline_ns`, then move the clock to it.
    pub fn run_until(&mut self, deadline_ns: u64) {
        while self.next_event_ns().is_some_and(|t| t <= deadline_ns) {
            self.step();
        }
        self.now_ns = self.now_ns.max(deadline_ns);
    }

    /// Run until `pred` holds (checked before each event), or until the next event would be
    /// after `deadline_ns` or none is left; says which of the three ended the run. The clock
    /// stops at the event after which `pred` became true, or at the last event run (it does
    /// not move to the deadline).
    pub fn run_until_pred(
        &mut self,
        mut pred: impl FnMut(&World) -> bool,
        deadline_ns: u64,
    ) -> RunOutcome {
        loop {
            if pred(self) {
                return RunOutcome::Satisfied;
            }
            if let Some(end) = RunOutcome::stop(self.next_event_ns(), deadline_ns) {
                return if pred(self) { RunOutcome::Satisfied } else { end };
            }
            self.step();
        }
    }

    /// The sequence number of the next event.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        assert!(self.seq < 1 << (64 - SOURCE_BITS), "fewer than 2^39 events in a world's life");
        self.pending += 1;
        self.seq
    }

    pub(super) fn push(&mut self, at_ns: u64, kind: EventKind) {
        let seq = self.next_seq();
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(kind);
                s
            }
            None => {
                assert!(self.slab.len() < MAX_SLOTS, "fewer than 2^24 events are pending at once");
                self.slab.push(Some(kind));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(event_key(at_ns, seq << SOURCE_BITS | slot as u64));
    }
}
