//! The deterministic simulator: NIC engines in a discrete-event world of directed links with
//! latency, bandwidth, queue limits and faults, one virtual clock and one seeded RNG.
//!
//! A [`World`] owns everything that happens: nodes (each a [`Nic`] with one RoCE port in
//! fabric slot node index + 1, IPv4 address 10.0.0.<index + 1>, or a switch that forwards), links, events ordered by (time, sequence number), the
//! RNG, the [`trace::Trace`] and an optional pcap capture. Nothing reads a wall clock, spawns a
//! thread or iterates a hash map, so a seed and the inputs fix the whole run.
//!
//! [`SimWorld`] shares a world between verbs handles: each node is a verbs `Context`
//! ([`SimWorld::context`]) so programs written against `verbs_api` run here unchanged.
//!
//! The rooms: this file holds the [`World`] itself (building its topology, changing links,
//! its counters and capture); `event.rs` the event queue and the run loop; `node.rs` a node
//! and how its engine's output enters the world; `fabric.rs` the packet path (routing, link
//! faults, delivery); `link.rs` a link's parameters and counters; `shared.rs` the [`SimWorld`]
//! handle and `backend.rs` the verbs device over it; `trace.rs` and `rng.rs` what makes a run
//! reproducible; `scenario` and `prop` are two ways to drive a world, and `proto` the run loop, timers and
//! connect helpers for a user protocol written on verbs.

mod backend;
pub mod cc;
mod event;
mod fabric;
mod link;
mod node;
pub mod pfc;
// Behind the `prop` feature (on by default), which the `softverbs` command line turns off so
// that proptest is not built into it.
#[cfg(feature = "prop")]
pub mod prop;
pub mod proto;
mod rng;
pub mod scenario;
mod shared;
pub mod trace;
pub mod workload;

use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;

use nic_model::engine::{eui64_of_mac, Nic, NicConfig};
use nic_model::packet::PcapWriter;

pub use backend::{connect_rc, SimProvider};
pub use event::RunOutcome;
use event::{EventKey, EventKind, MAX_SLOTS};
use fabric::Routes;
pub use link::{Link, LinkChange, LinkParams, LinkStats};
pub use node::Node;
pub use rng::Rng;
pub use shared::SimWorld;
use trace::{peek_bth, Trace, TraceKind, TraceRecord, NONE};

/// A node, by index (its port holds fabric slot index + 1: IPv4 10.0.0.<index + 1>).
pub type NodeId = usize;
/// A directed link, by index.
pub type LinkId = usize;

/// Where the world's clock starts: 1 ms, so "time 0" never looks like "unset" in a trace.
pub const START_NS: u64 = 1_000_000;

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
    /// Events waiting: in the slab or in flight on a link.
    pending: usize,
    /// Event bodies, by slot; `free` lists the empty slots.
    slab: Vec<Option<EventKind>>,
    free: Vec<u32>,
    nodes: Vec<Node>,
    links: Vec<Link>,
    /// The links a packet at `from` bound for `to` may take (each on a shortest path); a
    /// flow's hash picks one (ECMP).
    routes: Routes,
    routes_dirty: bool,
    /// How many times the route table was computed (once per topology; a test checks that
    /// running traffic never recomputes it).
    route_computations: u64,
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
    /// NIC nodes whose engines ran since [`World::take_touched`] last took them.
    touched: Vec<NodeId>,
    /// Congestion control (ECT, CNPs, per-flow rate limiters), when on: `cc/`.
    cc: Option<Box<cc::CcState>>,
    /// Priority flow control at switch ingress, when on: `pfc.rs`.
    pfc: Option<Box<pfc::PfcState>>,
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
            routes: Routes::default(),
            routes_dirty: false,
            route_computations: 0,
            rng: Rng::new(seed),
            seed,
            trace: Trace::default(),
            capture: None,
            events_run: 0,
            no_route_drops: 0,
            nic_template: NicConfig::new("", 0),
            channels: Vec::new(),
            cq_channel: std::collections::BTreeMap::new(),
            touched: Vec::new(),
            cc: None,
            pfc: None,
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

    /// Add a NIC node; its port holds fabric slot index + 1 (IPv4 address `10.0.0.<index + 1>`
    /// for the first 255), as a RoCE port with LID 0, and its device name is `sim:<name>`.
    pub fn add_node(&mut self, name: impl Into<String>) -> NodeId {
        let name = name.into();
        let id = self.nodes.len();
        let slot = u16::try_from(id + 1).expect("a world has fewer than 65535 nodes");
        let mut cfg = self.nic_template.clone();
        cfg.name = format!("sim:{name}");
        cfg.slot = slot;
        cfg.node_guid = eui64_of_mac(cfg.mac());
        // The NIC's randomness (where its QP numbers start) from the seed, on a stream of its
        // own so that the faults the world's generator draws stay what they were.
        cfg.entropy =
            Rng::new(self.seed ^ (id as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F)).next_u64();
        self.nodes.push(Node::with_nic(name, Nic::new(cfg)));
        self.routes_dirty = true;
        id
    }

    /// Add a switch: a node without a NIC that forwards each packet towards its destination.
    pub fn add_switch(&mut self, name: impl Into<String>) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node::switch(name.into()));
        self.routes_dirty = true;
        id
    }

    /// Add a directed link `src → dst`.
    pub fn add_link(&mut self, src: NodeId, dst: NodeId, params: LinkParams) -> LinkId {
        assert!(src < self.nodes.len() && dst < self.nodes.len(), "add_link: no such node");
        assert!(src != dst, "add_link: a link joins two different nodes");
        assert!(self.links.len() < MAX_SLOTS, "a world has fewer than 2^24 links");
        let dst_switch = self.nodes[dst].is_switch();
        self.links.push(Link::new(src, dst, dst_switch, params));
        if let Some(p) = self.pfc.as_deref_mut() {
            p.ingress_bytes.push(0);
            p.xoff.push(false);
        }
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

    /// Compute the route table now if the topology changed since it was last computed (the
    /// first packet would otherwise do it): a driver that times its events calls this first,
    /// so the one step whose cost grows with the square of the node count is counted with
    /// building the world, not with the traffic.
    #[inline]
    pub fn prepare_routes(&mut self) {
        if self.routes_dirty {
            self.compute_routes();
        }
    }

    /// How many times the route table has been computed: once per change of topology, however
    /// much traffic runs.
    pub fn route_computations(&self) -> u64 {
        self.route_computations
    }

    /// Events processed so far.
    pub fn events_run(&self) -> u64 {
        self.events_run
    }

    /// Events waiting to run (packets in flight, timers, scheduled changes).
    pub fn pending_events(&self) -> usize {
        self.pending
    }

    // ---- inside ----

    /// Fold one record into the trace. Inlined: two to three records per packet hop, and
    /// the call's own cost (saving and restoring registers) was a quarter of its work.
    #[inline(always)]
    fn record(&mut self, kind: TraceKind, link: u32, node: u32, data: &[u8], arg: u64) {
        let bth = if data.is_empty() { (NONE, NONE, NONE) } else { peek_bth(data) };
        self.record_bth(kind, link, node, bth, arg);
    }

    /// [`World::record`] with the BTH's opcode, PSN and destination QP given.
    #[inline(always)]
    fn record_bth(
        &mut self,
        kind: TraceKind,
        link: u32,
        node: u32,
        bth: (u32, u32, u32),
        arg: u64,
    ) {
        let (opcode, psn, qp) = bth;
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
}

impl World {
    /// [`World::record`] of a packet whose BTH fields were read already ([`link::Hdr`]).
    #[inline(always)]
    fn record_hdr(&mut self, kind: TraceKind, link: u32, node: u32, hdr: &link::Hdr, arg: u64) {
        self.record_bth(kind, link, node, hdr.bth(), arg);
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

#[cfg(test)]
mod tests;
