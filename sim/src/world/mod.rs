//! The deterministic simulator: NIC engines in a discrete-event world of directed links with
//! latency, bandwidth, queue limits and faults, one virtual clock and one seeded RNG.
//!
//! A [`World`] owns everything that happens: nodes (each a [`Nic`] with one port, LID = node
//! index + 1, or a switch that forwards), links, events ordered by (time, sequence number), the
//! RNG, the [`trace::Trace`] and an optional pcap capture. Nothing reads a wall clock, spawns a
//! thread or iterates a hash map, so a seed and the inputs fix the whole run.
//!
//! Packets on a link arrive in the order they were sent unless jitter or a latency change
//! reorders them, so each link keeps its packets in flight in a FIFO (its wire) and only the
//! head of each wire sits in the event heap; a packet that would arrive before the one queued
//! ahead of it becomes an event of its own. Either way every event keeps its (time, sequence
//! number) key and events run in exactly that order: the heap stays small (a few entries per
//! link) however many packets are in flight.
//! [`SimWorld`] shares a world between verbs handles: each node is a verbs `Context`
//! ([`SimWorld::context`]) so programs written against `verbs_api` run here unchanged.

mod backend;
mod link;
pub mod prop;
mod rng;
pub mod scenario;
pub mod trace;

use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use nic_model::engine::{lid_of_ip, Nic, NicConfig, NicEvent};
use nic_model::packet::PcapWriter;

pub use backend::{connect_rc, SimProvider};
pub use link::{Link, LinkChange, LinkParams, LinkStats};
pub use rng::Rng;
use trace::{peek_bth, Trace, TraceKind, TraceRecord, NONE};

/// A node, by index (its port's LID is the index + 1).
pub type NodeId = usize;
/// A directed link, by index.
pub type LinkId = usize;

/// Where the world's clock starts: 1 ms, so "time 0" never looks like "unset" in a trace.
pub const START_NS: u64 = 1_000_000;

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
}

impl Node {
    /// Whether it is a switch.
    pub fn is_switch(&self) -> bool {
        self.nic.is_none()
    }
}

enum EventKind {
    /// A packet reaches the far end of a link.
    Arrive { link: LinkId, data: Vec<u8> },
    /// A node's engine timer may be due.
    Timer { node: NodeId },
    /// A scheduled link change.
    Change { link: LinkId, change: LinkChange },
}

/// The heap key of an event: (time, sequence number << SOURCE_BITS | source). The sequence
/// number makes the order total and FIFO among equal times; the source says where the event's
/// body is: a slot of the slab, or (with [`SOURCE_WIRE`]) the packet at the head of a link's
/// wire. So the heap moves 16-byte keys, not packets.
type EventKey = std::cmp::Reverse<(u64, u64)>;

/// Bits of the key below the sequence number.
const SOURCE_BITS: u32 = 25;
/// Set in a source that names a link (its wire's head), clear in one that names a slab slot.
const SOURCE_WIRE: u64 = 1 << 24;
/// Slots the slab may hold at once, and links a world may have (24 bits of the source).
const MAX_SLOTS: usize = 1 << 24;

/// A packet on a link's wire: its arrival key and its bytes.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    arrive_ns: u64,
    seq: u64,
    data: Vec<u8>,
}

/// A pcap capture of the run.
struct Capture {
    writer: PcapWriter<Box<dyn Write + Send>>,
    dropped_too: bool,
    error: Option<std::io::Error>,
}

/// The simulated world. See the module documentation.
pub struct World {
    now_ns: u64,
    seq: u64,
    heap: BinaryHeap<EventKey>,
    /// Events waiting: in the slab or on a wire.
    pending: usize,
    /// Event bodies, by slot; `free` lists the empty slots.
    slab: Vec<Option<EventKind>>,
    free: Vec<u32>,
    nodes: Vec<Node>,
    links: Vec<Link>,
    /// `next_hop[from][to]`: the link a packet at `from` bound for `to` takes.
    next_hop: Vec<Vec<Option<LinkId>>>,
    routes_dirty: bool,
    rng: Rng,
    seed: u64,
    trace: Trace,
    capture: Option<Capture>,
    events_run: u64,
    no_route_drops: u64,
    nic_template: NicConfig,
    /// Completion channels: each a queue of (node, CQ) notifications (see the backend).
    pub(crate) channels: Vec<VecDeque<(NodeId, u32)>>,
    /// Which channel each (node, CQ) notifies.
    pub(crate) cq_channel: std::collections::BTreeMap<(NodeId, u32), usize>,
}

impl World {
    /// An empty world whose randomness all comes from `seed`.
    pub fn new(seed: u64) -> World {
        World {
            now_ns: START_NS,
            seq: 0,
            heap: BinaryHeap::new(),
            pending: 0,
            slab: Vec::new(),
            free: Vec::new(),
            nodes: Vec::new(),
            links: Vec::new(),
            next_hop: Vec::new(),
            routes_dirty: false,
            rng: Rng::new(seed),
            seed,
            trace: Trace::default(),
            capture: None,
            events_run: 0,
            no_route_drops: 0,
            nic_template: NicConfig::new("", 0),
            channels: Vec::new(),
            cq_channel: std::collections::BTreeMap::new(),
        }
    }

    /// The seed it was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual time now, in ns.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Change the NIC settings (limits, window, ACK coalescing) of nodes added from now on.
    pub fn configure_nics(&mut self, f: impl FnOnce(&mut NicConfig)) {
        f(&mut self.nic_template);
    }

    /// Add a NIC node; its port's LID is its index + 1 and its device name `sim:<name>`.
    pub fn add_node(&mut self, name: impl Into<String>) -> NodeId {
        let name = name.into();
        let id = self.nodes.len();
        let lid = u16::try_from(id + 1).expect("a world has fewer than 65535 nodes");
        let mut cfg = self.nic_template.clone();
        cfg.name = format!("sim:{name}");
        cfg.lid = lid;
        cfg.node_guid = 0x0200_5eff_fe00_0000 | lid as u64;
        // The port comes up with the node (IBV_EVENT_PORT_ACTIVE), as a soft device's does.
        let port_active = verbs_api::AsyncEvent {
            event_type: verbs_api::AsyncEventType::PortActive,
            element: verbs_api::AsyncElement::Port(1),
        };
        self.nodes.push(Node {
            name,
            nic: Some(Nic::new(cfg)),
            timer_ns: None,
            timer_event_ns: None,
            async_events: VecDeque::from([port_active]),
            cq_events: VecDeque::new(),
        });
        self.routes_dirty = true;
        id
    }

    /// Add a switch: a node without a NIC that forwards each packet towards its destination.
    pub fn add_switch(&mut self, name: impl Into<String>) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node {
            name: name.into(),
            nic: None,
            timer_ns: None,
            timer_event_ns: None,
            async_events: VecDeque::new(),
            cq_events: VecDeque::new(),
        });
        self.routes_dirty = true;
        id
    }

    /// Add a directed link `src → dst`.
    pub fn add_link(&mut self, src: NodeId, dst: NodeId, params: LinkParams) -> LinkId {
        assert!(src < self.nodes.len() && dst < self.nodes.len(), "add_link: no such node");
        assert!(src != dst, "add_link: a link joins two different nodes");
        assert!(self.links.len() < MAX_SLOTS, "a world has fewer than 2^24 links");
        self.links.push(Link::new(src, dst, params));
        self.routes_dirty = true;
        self.links.len() - 1
    }

    /// Add a link each way with the same parameters: `(a → b, b → a)`.
    pub fn add_duplex(&mut self, a: NodeId, b: NodeId, params: LinkParams) -> (LinkId, LinkId) {
        (self.add_link(a, b, params.clone()), self.add_link(b, a, params))
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with this name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The links.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The link `src → dst`, if there is one.
    pub fn link_between(&self, src: NodeId, dst: NodeId) -> Option<LinkId> {
        self.links.iter().position(|l| l.src == src && l.dst == dst)
    }

    /// A node's NIC (`None` for a switch).
    pub fn nic(&self, node: NodeId) -> Option<&Nic> {
        self.nodes.get(node).and_then(|n| n.nic.as_ref())
    }

    /// Call into a node's NIC with the current time, then put what it sent on the wire and
    /// re-arm its timer. This is how every verbs call reaches an engine.
    ///
    /// Panics if `node` is a switch or does not exist (a programming error in the caller).
    pub fn with_nic<R>(&mut self, node: NodeId, f: impl FnOnce(&mut Nic, u64) -> R) -> R {
        let now = self.now_ns;
        let nic = self.nodes[node].nic.as_mut().expect("with_nic: the node has a NIC");
        let r = f(nic, now);
        self.flush(node);
        r
    }

    /// Apply a change to a link now.
    pub fn change_link(&mut self, link: LinkId, change: LinkChange) {
        self.record(TraceKind::Change, link as u32, NONE, &[], change_code(&change));
        self.links[link].apply(&change);
    }

    /// Apply a change to a link at virtual time `at_ns` (now, if that has passed).
    pub fn schedule(&mut self, at_ns: u64, link: LinkId, change: LinkChange) {
        assert!(link < self.links.len(), "schedule: no such link");
        self.push(at_ns.max(self.now_ns), EventKind::Change { link, change });
    }

    /// Partition (or heal) both directions between `a` and `b` now.
    pub fn set_partition(&mut self, a: NodeId, b: NodeId, partitioned: bool) {
        let change = if partitioned { LinkChange::Partition } else { LinkChange::Heal };
        for l in [self.link_between(a, b), self.link_between(b, a)].into_iter().flatten() {
            self.change_link(l, change.clone());
        }
    }

    /// The trace (its hash, and its records if kept).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The trace, to change whether records are kept.
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.trace
    }

    /// Write every datagram delivered to a NIC (and, with `dropped_too`, every dropped one at
    /// the time it was dropped) to a pcap capture on `out`.
    pub fn capture_to(
        &mut self,
        out: Box<dyn Write + Send>,
        dropped_too: bool,
    ) -> std::io::Result<()> {
        self.capture = Some(Capture { writer: PcapWriter::new(out)?, dropped_too, error: None });
        Ok(())
    }

    /// End the capture: flush it and report the first write error, if any.
    pub fn finish_capture(&mut self) -> std::io::Result<()> {
        match self.capture.take() {
            None => Ok(()),
            Some(c) => {
                if let Some(e) = c.error {
                    return Err(e);
                }
                c.writer.into_inner().map(|_| ())
            }
        }
    }

    /// Every link's counters summed (packets with no route are counted apart, in
    /// [`World::no_route_drops`]).
    pub fn total_stats(&self) -> LinkStats {
        let mut t = LinkStats::default();
        for l in &self.links {
            t.add(&l.stats);
        }
        t
    }

    /// Packets dropped because no path led to their destination.
    pub fn no_route_drops(&self) -> u64 {
        self.no_route_drops
    }

    /// Events processed so far.
    pub fn events_run(&self) -> u64 {
        self.events_run
    }

    /// Events waiting to run (packets in flight, timers, scheduled changes).
    pub fn pending_events(&self) -> usize {
        self.pending
    }

    /// The time of the next event, if any.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.0 .0)
    }

    // ---- running ----

    /// Run the next event; false if there is none.
    pub fn step(&mut self) -> bool {
        let Some(mut top) = self.heap.peek_mut() else { return false };
        let std::cmp::Reverse((at_ns, key)) = *top;
        debug_assert!(at_ns >= self.now_ns, "the clock never goes back");
        self.now_ns = at_ns;
        self.events_run += 1;
        self.pending -= 1;
        let source = key & ((1 << SOURCE_BITS) - 1);
        let index = (source & (MAX_SLOTS as u64 - 1)) as usize;
        if source & SOURCE_WIRE != 0 {
            let wire = &mut self.links[index].wire;
            let p = wire.pop_front().expect("a wire key names the packet at its head");
            debug_assert_eq!((p.arrive_ns, p.seq), (at_ns, key >> SOURCE_BITS));
            // The next packet on the wire takes its place in the heap: one sift, not two.
            match wire.front() {
                Some(next) => {
                    *top = std::cmp::Reverse((next.arrive_ns, next.seq << SOURCE_BITS | source));
                    drop(top);
                }
                None => drop(PeekMut::pop(top)),
            }
            self.arrive(index, p.data);
            return true;
        }
        PeekMut::pop(top);
        let kind = self.slab[index].take().expect("a heap key names a full slot");
        self.free.push(index as u32);
        match kind {
            EventKind::Arrive { link, data } => self.arrive(link, data),
            EventKind::Timer { node } => self.fire_timer(node),
            EventKind::Change { link, change } => self.change_link(link, change),
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
    /// after `deadline_ns` or none is left; true if `pred` held. The clock stops at the event
    /// after which `pred` became true.
    pub fn run_until_pred(
        &mut self,
        mut pred: impl FnMut(&World) -> bool,
        deadline_ns: u64,
    ) -> bool {
        loop {
            if pred(self) {
                return true;
            }
            if self.next_event_ns().is_none_or(|t| t > deadline_ns) {
                return pred(self);
            }
            self.step();
        }
    }

    // ---- inside ----

    /// The sequence number of the next event.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        assert!(self.seq < 1 << (64 - SOURCE_BITS), "fewer than 2^39 events in a world's life");
        self.pending += 1;
        self.seq
    }

    fn push(&mut self, at_ns: u64, kind: EventKind) {
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
        self.heap.push(std::cmp::Reverse((at_ns, seq << SOURCE_BITS | slot as u64)));
    }

    fn record(&mut self, kind: TraceKind, link: u32, node: u32, data: &[u8], arg: u64) {
        let (opcode, psn, qp) = if data.is_empty() { (NONE, NONE, NONE) } else { peek_bth(data) };
        self.trace.record(TraceRecord {
            time_ns: self.now_ns,
            kind,
            link,
            node,
            opcode,
            psn,
            qp,
            arg,
        });
    }

    fn capture_drop(&mut self, data: &[u8]) {
        if let Some(c) = self.capture.as_mut().filter(|c| c.dropped_too && c.error.is_none()) {
            if let Err(e) = c.writer.write_datagram(self.now_ns, data) {
                c.error = Some(e);
            }
        }
    }

    /// Take what a node's engine produced: datagrams onto links, events into queues, and its
    /// next timer into the heap.
    fn flush(&mut self, node: NodeId) {
        loop {
            let Some(nic) = self.nodes[node].nic.as_mut() else { return };
            let Some(t) = nic.poll_transmit() else { break };
            let to = (lid_of_ip(t.dst) as usize).wrapping_sub(1);
            self.forward(node, to, t.data);
        }
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

    fn dispatch_cq_events(&mut self, node: NodeId) {
        while let Some(cq) = self.nodes[node].cq_events.pop_front() {
            if let Some(&ch) = self.cq_channel.get(&(node, cq)) {
                self.channels[ch].push_back((node, cq));
            }
        }
    }

    fn fire_timer(&mut self, node: NodeId) {
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

    fn route(&mut self, from: NodeId, to: NodeId) -> Option<LinkId> {
        if self.routes_dirty {
            self.compute_routes();
        }
        *self.next_hop.get(from)?.get(to)?
    }

    /// Shortest paths by hop count (BFS from every destination over reversed links; ties go to
    /// the lower link index), so routing is deterministic.
    fn compute_routes(&mut self) {
        let n = self.nodes.len();
        self.next_hop = vec![vec![None; n]; n];
        for to in 0..n {
            let mut dist = vec![usize::MAX; n];
            dist[to] = 0;
            let mut frontier = VecDeque::from([to]);
            while let Some(v) = frontier.pop_front() {
                for (id, l) in self.links.iter().enumerate() {
                    // A packet at `l.src` can reach `v` through `l`; switches relay, NICs do not.
                    if l.dst != v || dist[l.src] != usize::MAX {
                        continue;
                    }
                    if v != to && !self.nodes[v].is_switch() {
                        continue;
                    }
                    dist[l.src] = dist[v] + 1;
                    self.next_hop[l.src][to] = Some(id);
                    frontier.push_back(l.src);
                }
            }
        }
        self.routes_dirty = false;
    }

    /// Put a packet at `at` bound for node `to` onto the next link of its path.
    fn forward(&mut self, at: NodeId, to: NodeId, data: Vec<u8>) {
        match self.route(at, to) {
            Some(link) => self.offer(link, data),
            None => {
                self.no_route_drops += 1;
                self.record(TraceKind::DropNoRoute, NONE, at as u32, &data, data.len() as u64);
                self.capture_drop(&data);
            }
        }
    }

    /// Count and trace a dropped packet, and capture it if asked.
    fn drop_packet(&mut self, link: LinkId, kind: TraceKind, data: &[u8], arg: u64) {
        let s = &mut self.links[link].stats;
        match kind {
            TraceKind::DropPartition => s.partition_drops += 1,
            TraceKind::DropNth => s.nth_drops += 1,
            TraceKind::DropLoss => s.lost += 1,
            TraceKind::DropQueue => s.queue_drops += 1,
            _ => unreachable!("drop_packet is only called with a drop kind"),
        }
        self.record(kind, link as u32, NONE, data, arg);
        self.capture_drop(data);
    }

    /// A packet enters a link: faults, the FIFO, and its arrival event.
    fn offer(&mut self, link: LinkId, mut data: Vec<u8>) {
        let now = self.now_ns;
        let lid = link as u32;
        let len = data.len() as u64;
        let l = &mut self.links[link];
        let index = l.stats.offered;
        l.stats.offered += 1;
        if l.partitioned {
            return self.drop_packet(link, TraceKind::DropPartition, &data, len);
        }
        if !l.drop_nth.is_empty() && l.drop_nth.remove(&index) {
            return self.drop_packet(link, TraceKind::DropNth, &data, index);
        }
        let p = &self.links[link].params;
        let (loss, dup, corrupt, truncate) = (p.loss, p.dup, p.corrupt, p.truncate);
        let (limit, jitter_max) = (p.queue_limit, p.reorder_jitter_ns);
        if self.rng.chance(loss) {
            return self.drop_packet(link, TraceKind::DropLoss, &data, len);
        }
        if limit > 0 && self.links[link].queue_len(now) >= limit {
            return self.drop_packet(link, TraceKind::DropQueue, &data, len);
        }
        let duplicate = self.rng.chance(dup);
        if self.rng.chance(corrupt) && data.len() > 28 {
            // Flip a bit the ICRC covers: anywhere from the BTH on, except BTH byte 4 (the
            // FECN/BECN byte, which the ICRC masks because switches may change it).
            let span = (data.len() - 29) as u64;
            let mut at = 28 + self.rng.below(span) as usize;
            if at >= 32 {
                at += 1;
            }
            let bit = self.rng.below(8) as u8;
            data[at] ^= 1 << bit;
            self.links[link].stats.corrupted += 1;
            self.record(TraceKind::Corrupt, lid, NONE, &data, (at as u64) << 3 | bit as u64);
        }
        if self.rng.chance(truncate) && !data.is_empty() {
            let keep = self.rng.below(data.len() as u64) as usize;
            data.truncate(keep);
            self.links[link].stats.truncated += 1;
            self.record(TraceKind::Truncate, lid, NONE, &data, keep as u64);
        }
        let mut extra_ns = 0;
        if jitter_max > 0 {
            extra_ns = self.rng.below(jitter_max + 1);
            if extra_ns > 0 {
                self.links[link].stats.jittered += 1;
                self.record(TraceKind::Jitter, lid, NONE, &data, extra_ns);
            }
        }
        self.record(TraceKind::Send, lid, NONE, &data, data.len() as u64);
        let copy = duplicate.then(|| data.clone());
        self.enqueue(link, data, extra_ns);
        if let Some(copy) = copy {
            self.links[link].stats.duplicated += 1;
            self.record(TraceKind::Duplicate, lid, NONE, &copy, copy.len() as u64);
            // The copy follows its original through the FIFO, without further faults.
            self.enqueue(link, copy, 0);
        }
    }

    /// Serialise a packet behind those already in the link's FIFO and schedule its arrival:
    /// on the link's wire behind the packets ahead of it, or as an event of its own if it
    /// overtakes one of them (jitter, a lower latency).
    fn enqueue(&mut self, link: LinkId, data: Vec<u8>, extra_ns: u64) {
        let now = self.now_ns;
        let l = &mut self.links[link];
        let start = now.max(l.busy_until_ns);
        let finish = start + l.params.serialisation_ns(data.len());
        l.busy_until_ns = finish;
        l.note_queued(now, finish);
        let arrive_ns = finish + l.params.latency_ns + extra_ns;
        if l.wire.back().is_some_and(|last| last.arrive_ns > arrive_ns) {
            return self.push(arrive_ns, EventKind::Arrive { link, data });
        }
        let seq = self.next_seq();
        let l = &mut self.links[link];
        if l.wire.is_empty() {
            let key = seq << SOURCE_BITS | SOURCE_WIRE | link as u64;
            self.heap.push(std::cmp::Reverse((arrive_ns, key)));
        }
        l.wire.push_back(InFlight { arrive_ns, seq, data });
    }

    fn arrive(&mut self, link: LinkId, data: Vec<u8>) {
        let lid = link as u32;
        if self.links[link].partitioned {
            return self.drop_packet(link, TraceKind::DropPartition, &data, data.len() as u64);
        }
        let l = &mut self.links[link];
        l.stats.delivered += 1;
        l.stats.delivered_bytes += data.len() as u64;
        let node = l.dst;
        if self.nodes[node].is_switch() {
            self.record(TraceKind::Forward, lid, node as u32, &data, data.len() as u64);
            // The destination comes from the IPv4 header; a runt packet goes nowhere.
            let to = node_of_ip(&data, IPV4_DST);
            return self.forward(node, to, data);
        }
        self.record(TraceKind::Deliver, lid, node as u32, &data, data.len() as u64);
        if let Some(c) = self.capture.as_mut().filter(|c| c.error.is_none()) {
            if let Err(e) = c.writer.write_datagram(self.now_ns, &data) {
                c.error = Some(e);
            }
        }
        let now = self.now_ns;
        if let Some(nic) = self.nodes[node].nic.as_mut() {
            nic.handle_packet(now, &data);
        }
        // The buffer goes back to the NIC that sent it, which reuses it for its next datagram.
        let from = node_of_ip(&data, IPV4_SRC);
        if let Some(nic) = self.nodes.get_mut(from).and_then(|n| n.nic.as_mut()) {
            nic.recycle(data);
        }
        self.flush(node);
    }
}

/// Offsets of the source and destination addresses in an IPv4 header.
const IPV4_SRC: usize = 12;
const IPV4_DST: usize = 16;

/// The node whose port has the IPv4 address at `at` in a datagram, or `usize::MAX` (no node)
/// for a foreign address or a runt packet.
fn node_of_ip(data: &[u8], at: usize) -> NodeId {
    match data.get(at..at + 4) {
        Some(&[a, b, c, d]) => (lid_of_ip([a, b, c, d]) as usize).wrapping_sub(1),
        _ => usize::MAX,
    }
}

fn change_code(c: &LinkChange) -> u64 {
    match c {
        LinkChange::Params(_) => 1,
        LinkChange::Partition => 2,
        LinkChange::Heal => 3,
        LinkChange::DropNth(n) => 4 | n << 8,
    }
}

/// A world shared by verbs handles (`Arc<Mutex<World>>`). Cloning it is cheap; every clone is
/// the same world. Polling a CQ never advances time: the program does, with the run helpers.
#[derive(Clone)]
pub struct SimWorld {
    inner: Arc<Mutex<World>>,
}

impl SimWorld {
    /// Share `world`.
    pub fn new(world: World) -> SimWorld {
        SimWorld { inner: Arc::new(Mutex::new(world)) }
    }

    /// A world of `n` NIC nodes (`node0`, ...) joined pairwise by duplex links with `params`
    /// (a full mesh), with `seed`.
    pub fn mesh(seed: u64, n: usize, params: LinkParams) -> SimWorld {
        let mut w = World::new(seed);
        let ids: Vec<NodeId> = (0..n).map(|i| w.add_node(format!("node{i}"))).collect();
        for (i, &a) in ids.iter().enumerate() {
            for &b in &ids[i + 1..] {
                w.add_duplex(a, b, params.clone());
            }
        }
        SimWorld::new(w)
    }

    /// Lock the world for direct access (do not hold it across verbs calls on its handles).
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.lock().now_ns()
    }

    /// See [`World::step`].
    pub fn step(&self) -> bool {
        self.lock().step()
    }

    /// See [`World::run_until_idle`].
    pub fn run_until_idle(&self, max_events: u64) -> bool {
        self.lock().run_until_idle(max_events)
    }

    /// See [`World::run_until`].
    pub fn run_until(&self, deadline_ns: u64) {
        self.lock().run_until(deadline_ns)
    }

    /// Run for `dt_ns` of virtual time from now.
    pub fn run_for(&self, dt_ns: u64) {
        let mut w = self.lock();
        let deadline = w.now_ns() + dt_ns;
        w.run_until(deadline)
    }

    /// Run until `pred` holds, checked before each event with the world unlocked (so it may
    /// poll CQs through verbs handles), or until no event is due by `deadline_ns`; true if
    /// `pred` held.
    pub fn run_until_pred(&self, mut pred: impl FnMut() -> bool, deadline_ns: u64) -> bool {
        loop {
            if pred() {
                return true;
            }
            let mut w = self.lock();
            if w.next_event_ns().is_none_or(|t| t > deadline_ns) {
                drop(w);
                return pred();
            }
            w.step();
        }
    }

    pub(crate) fn arc(&self) -> &Arc<Mutex<World>> {
        &self.inner
    }
}

#[cfg(test)]
mod tests;
