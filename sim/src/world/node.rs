//! A node of the world (a NIC, or a switch that only forwards) and how its engine's output
//! enters the world: datagrams onto links at the pace the links serialise them, events into
//! queues, its timer into the event heap.

use std::collections::VecDeque;

use nic_model::engine::{slot_of_ip, Nic, NicEvent, Transmit};

use super::cc::nic::CcPoll;
use super::event::EventKind;
use super::link::Hdr;
use super::trace::{TraceKind, NONE};
use super::{NodeId, World};

/// A node: a NIC, or a switch that only forwards.
pub struct Node {
    /// Its name (`node0`, `sw`, ...).
    pub name: String,
    /// The NIC, or `None` for a switch.
    pub(crate) nic: Option<Nic>,
    /// The engine's earliest timer as last seen.
    timer_ns: Option<u64>,
    /// The earliest `Timer` event in the heap for this node. A timer that moves later leaves
    /// its event in place (it fires, finds nothing due, and schedules the real time), so a
    /// timer re-armed on every ACK costs no event per ACK.
    timer_event_ns: Option<u64>,
    /// Async events the engine raised that no program has taken yet.
    pub(crate) async_events: VecDeque<verbs_api::AsyncEvent>,
    /// CQ notifications not yet dispatched to completion channels.
    pub(crate) cq_events: VecDeque<u32>,
    /// The I/O virtual address the node's next MR gets (see [`World::take_iova`]).
    next_iova: u64,
    /// A datagram taken from the engine whose link had no room yet: it goes first when the
    /// link frees up, so the NIC's datagrams keep their order.
    held: Option<Transmit>,
    /// The earliest `Transmit` event in the heap for this node (at most one is needed).
    tx_event_ns: Option<u64>,
    /// Whether it is in [`World::take_touched`]'s list.
    touched: bool,
}

/// Datagrams a NIC puts into its own link's serialiser at once (fewer if the link's
/// `queue_limit` is smaller). The rest wait in the engine's send queue, as on a real port, so
/// its own link never tail-drops them; the node takes the next ones when the line is free. A
/// few rather than one: one wake-up event per few packets, and still no more than a few
/// datagrams committed to the wire when a go-back-N retry makes them stale.
pub const NIC_TX_DEPTH: usize = 4;

/// Where each node's MR addresses start: page aligned, and far from zero so that a stray
/// small address names nothing.
const IOVA_BASE: u64 = 0x1_0000_0000;
/// MR addresses are page aligned, with a page left free after each MR.
const IOVA_PAGE: u64 = 4096;

impl Node {
    /// A NIC node. Its port comes up with it (IBV_EVENT_PORT_ACTIVE), as a soft device's does.
    pub(super) fn with_nic(name: String, nic: Nic) -> Node {
        let port_active = verbs_api::AsyncEvent {
            event_type: verbs_api::AsyncEventType::PortActive,
            element: verbs_api::AsyncElement::Port(1),
        };
        Node {
            name,
            nic: Some(nic),
            timer_ns: None,
            timer_event_ns: None,
            async_events: VecDeque::from([port_active]),
            cq_events: VecDeque::new(),
            next_iova: IOVA_BASE,
            held: None,
            tx_event_ns: None,
            touched: false,
        }
    }

    /// A switch: no NIC, so no timer and no events.
    pub(super) fn switch(name: String) -> Node {
        Node {
            name,
            nic: None,
            timer_ns: None,
            timer_event_ns: None,
            async_events: VecDeque::new(),
            cq_events: VecDeque::new(),
            next_iova: IOVA_BASE,
            held: None,
            tx_event_ns: None,
            touched: false,
        }
    }

    /// Whether it is a switch.
    pub fn is_switch(&self) -> bool {
        self.nic.is_none()
    }
}

impl World {
    /// Take what a node's engine produced: datagrams onto links (as many as they have room
    /// for), events into queues, and its next timer into the heap.
    pub(super) fn flush(&mut self, node: NodeId) {
        self.transmit(node);
        let n = &mut self.nodes[node];
        let Some(nic) = n.nic.as_mut() else { return };
        while let Some(ev) = nic.poll_event() {
            match ev {
                NicEvent::CqNotify(cq) => n.cq_events.push_back(cq),
                NicEvent::Async(a) => n.async_events.push_back(a),
            }
        }
        let next = nic.next_timeout();
        n.timer_ns = next;
        if let Some(t) = next {
            let at = t.max(self.now_ns);
            if n.timer_event_ns.is_none_or(|e| at < e) {
                n.timer_event_ns = Some(at);
                self.push(at, EventKind::Timer { node });
            }
        }
        if !self.nodes[node].cq_events.is_empty() {
            self.dispatch_cq_events(node);
        }
    }

    /// Move a NIC's datagrams onto its links while they have room: up to [`NIC_TX_DEPTH`]
    /// datagrams waiting or serialising on a link (as a real port's serialiser paces its NIC).
    /// When the next datagram's link is full, the node keeps it and wakes when that link's line
    /// is free; datagrams the engine made meanwhile stay in its send queue behind it.
    pub(super) fn transmit(&mut self, node: NodeId) {
        let now = self.now_ns;
        loop {
            let n = &mut self.nodes[node];
            let t = match n.held.take() {
                Some(t) => t,
                None if self.cc.is_some() => match self.cc_poll(node) {
                    CcPoll::Take(t) => t,
                    CcPoll::Wait(at) => return self.wake_transmit_at(node, at),
                    CcPoll::Empty => return,
                },
                None => match n.nic.as_mut().and_then(Nic::poll_transmit) {
                    Some(t) => t,
                    None => return,
                },
            };
            let to = (slot_of_ip(t.dst) as usize).wrapping_sub(1);
            self.prepare_routes();
            let hdr = Hdr::of(&t.data, self.routes.routed);
            let Some(link) = self.route(node, to, hdr.hash) else {
                self.no_route(node, t.data);
                continue;
            };
            let l = &mut self.links[link];
            let depth = match l.queue_limit as usize {
                0 => NIC_TX_DEPTH,
                q => q.min(NIC_TX_DEPTH),
            };
            if l.held(now) < depth {
                self.offer_from(link, t.data, hdr, NONE);
                continue;
            }
            self.nodes[node].held = Some(t);
            if self.pfc.is_some() {
                // The link's next `LinkFree` (its line free, its pause over) calls back.
                return;
            }
            // The line is busy until the datagrams in its serialiser are out: wake then.
            let at = self.links[link].busy_until_ns;
            return self.wake_transmit_at(node, at);
        }
    }

    /// Wake `node`'s transmit at `at` (unless a wake-up at or before it is pending).
    fn wake_transmit_at(&mut self, node: NodeId, at: u64) {
        let n = &mut self.nodes[node];
        if n.tx_event_ns.is_none_or(|e| at < e) {
            n.tx_event_ns = Some(at);
            self.push(at, EventKind::Transmit { node });
        }
    }

    /// A `Transmit` event: the line of a link this node waits for may be free.
    pub(super) fn wake_transmit(&mut self, node: NodeId) {
        self.touch(node);
        let n = &mut self.nodes[node];
        if n.tx_event_ns == Some(self.now_ns) {
            n.tx_event_ns = None;
        }
        self.transmit(node);
    }

    /// An event runs `node`'s engine (a packet, its timer, its line freeing up): note it for
    /// [`World::take_touched`]. A program's own verbs calls are not noted; it knows them.
    pub(super) fn touch(&mut self, node: NodeId) {
        let n = &mut self.nodes[node];
        if !n.touched && n.nic.is_some() {
            n.touched = true;
            self.touched.push(node);
        }
    }

    /// The NIC nodes whose engines an event ran since the last call (each once, in the order they first
    /// ran), moved into `out` (cleared first): only their CQs can hold new completions, so a
    /// driver of many connections polls those alone instead of every CQ after every event.
    pub fn take_touched(&mut self, out: &mut Vec<NodeId>) {
        out.clear();
        std::mem::swap(out, &mut self.touched);
        for &n in out.iter() {
            self.nodes[n].touched = false;
        }
    }

    /// The I/O virtual address of a new MR of `len` bytes on `node`: the next free page from a
    /// fixed base, so that the addresses (and the RETHs that carry them) follow from the order
    /// of registrations alone, never from where the heap put the memory.
    pub(crate) fn take_iova(&mut self, node: NodeId, len: usize) -> u64 {
        let n = &mut self.nodes[node];
        let iova = n.next_iova;
        let pages = (len as u64).div_ceil(IOVA_PAGE) + 1;
        n.next_iova = iova.saturating_add(pages.saturating_mul(IOVA_PAGE));
        iova
    }

    fn dispatch_cq_events(&mut self, node: NodeId) {
        while let Some(cq) = self.nodes[node].cq_events.pop_front() {
            if let Some(&ch) = self.cq_channel.get(&(node, cq)) {
                self.channels[ch].push_back((node, cq));
            }
        }
    }

    pub(super) fn fire_timer(&mut self, node: NodeId) {
        self.touch(node);
        let now = self.now_ns;
        let n = &mut self.nodes[node];
        if n.timer_event_ns == Some(now) {
            n.timer_event_ns = None;
        }
        // Nothing due: the timer moved later or was cancelled; `flush` schedules its real time.
        if n.timer_ns.is_some_and(|t| t <= now) {
            n.timer_ns = None;
            let Some(nic) = n.nic.as_mut() else { return };
            nic.handle_timeout(now);
            self.record(TraceKind::Timer, NONE, node as u32, &[], 0);
        }
        self.flush(node);
    }
}
