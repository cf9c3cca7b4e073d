//! The packet path between nodes: routing, what a link does to a packet it is offered
//! (faults, queueing, serialisation), and delivery at the far end (to a NIC, or a switch that
//! forwards it on).

use nic_model::engine::slot_of_datagram_addr;

use super::event::{event_key, EventKind, SOURCE_BITS, SOURCE_LINK};
use super::link::{Hdr, InFlight};
use super::trace::{TraceKind, NONE};
use super::{LinkId, Node, NodeId, World};

impl World {
    fn capture_drop(&mut self, data: &[u8]) {
        if let Some(c) = self.capture.as_mut().filter(|c| c.dropped_too && c.error.is_none()) {
            if let Err(e) = c.writer.write_datagram(self.now_ns, data) {
                c.error = Some(e);
            }
        }
    }
    /// The link a packet at `from` bound for `to`, of flow hash `hash` ([`Hdr::hash`]),
    /// takes: one of the shortest paths' first links, chosen by the packet's flow (ECMP, as a
    /// RoCE fabric hashes the UDP source port a NIC derives from the QP): a flow keeps one
    /// path, so its packets stay in order, and flows spread over the paths.
    pub(super) fn route(&mut self, from: NodeId, to: NodeId, hash: u32) -> Option<LinkId> {
        if self.routes_dirty {
            self.compute_routes();
        }
        let set = self.routes.set(from, to)?;
        let r = &self.routes;
        match set.len {
            1 => Some(r.pool[set.start as usize]),
            k => Some(r.pool[set.start as usize + (hash as u64 % k as u64) as usize]),
        }
    }

    /// The first links of every shortest path from `from` to `to`, in link-index order (none
    /// if no path leads there or either node does not exist): the set [`World::route`] picks
    /// from, for tests.
    #[cfg(test)]
    pub(super) fn next_links(&mut self, from: NodeId, to: NodeId) -> &[LinkId] {
        if self.routes_dirty {
            self.compute_routes();
        }
        match self.routes.set(from, to) {
            None => &[],
            Some(set) => &self.routes.pool[set.start as usize..(set.start + set.len) as usize],
        }
    }

    /// Shortest paths by hop count (BFS from every destination over reversed links), and for
    /// each (from, to) every link that starts one, in link-index order, so routing is
    /// deterministic.
    ///
    /// It runs once per topology (the first packet after a node or link is added), not per
    /// packet, and it is the one part of a run whose cost grows with the square of the node
    /// count (a table of every (from, to)), so it works on flat arrays: the links into each
    /// node as one list, and per destination only the nodes its search reached.
    pub(super) fn compute_routes(&mut self) {
        let n = self.nodes.len();
        self.route_computations += 1;
        let mut build = RouteBuild::new(n);
        // Links into each node, in link-index order (a counting sort by destination): the BFS
        // visits them in the same order as a scan of all links would, without a pass over
        // every link per node visited.
        let mut into_start = vec![0u32; n + 1];
        for l in &self.links {
            into_start[l.dst + 1] += 1;
        }
        for v in 0..n {
            into_start[v + 1] += into_start[v];
        }
        let mut fill = into_start.clone();
        let mut into: Vec<(u32, u32)> = vec![(0, 0); self.links.len()];
        for (id, l) in self.links.iter().enumerate() {
            let at = &mut fill[l.dst];
            into[*at as usize] = (id as u32, l.src as u32);
            *at += 1;
        }
        // Switches relay, NICs do not.
        let relays: Vec<bool> = self.nodes.iter().map(Node::is_switch).collect();
        let mut firsts: Vec<Vec<LinkId>> = vec![Vec::new(); n];
        let mut dist = vec![u32::MAX; n];
        let mut reached: Vec<usize> = Vec::with_capacity(n);
        for to in 0..n {
            for &v in &reached {
                dist[v] = u32::MAX;
                firsts[v].clear();
            }
            reached.clear();
            dist[to] = 0;
            reached.push(to);
            let mut head = 0;
            while let Some(&v) = reached.get(head) {
                head += 1;
                // A packet at a link's source can reach `v` through it only if `v` is the
                // destination or relays.
                if v != to && !relays[v] {
                    continue;
                }
                let next = dist[v] + 1;
                for &(id, src) in &into[into_start[v] as usize..into_start[v + 1] as usize] {
                    let src = src as usize;
                    if dist[src] == u32::MAX {
                        dist[src] = next;
                        reached.push(src);
                    }
                    // Every link into a node one hop nearer starts a shortest path.
                    if dist[src] == next {
                        firsts[src].push(id as LinkId);
                    }
                }
            }
            for &from in &reached {
                let links = &mut firsts[from];
                if links.is_empty() {
                    continue;
                }
                links.sort_unstable();
                build.put(from, to, links);
            }
        }
        self.routes = build.finish();
        self.routes.routed =
            self.nodes.iter().any(Node::is_switch) || self.routes.sets.iter().any(|s| s.len > 1);
        self.routes_dirty = false;
    }

    /// Put a packet at switch `at` bound for node `to` onto the next link of its path.
    fn forward(&mut self, at: NodeId, to: NodeId, data: Vec<u8>, hdr: Hdr, ingress: u32) {
        match self.route(at, to, hdr.hash) {
            Some(link) => self.offer_from(link, data, hdr, ingress),
            None => self.no_route(at, data),
        }
    }

    /// Count, trace and capture a packet at `at` that no path leads from.
    pub(super) fn no_route(&mut self, at: NodeId, data: Vec<u8>) {
        self.no_route_drops += 1;
        self.record(TraceKind::DropNoRoute, NONE, at as u32, &data, data.len() as u64);
        self.capture_drop(&data);
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

    /// A packet from a NIC enters a link: see [`World::offer_from`] (tests; the world's own
    /// NICs go through [`World::transmit`], which reads the packet's [`Hdr`] once for routing
    /// and the link).
    #[cfg(test)]
    pub(super) fn offer(&mut self, link: LinkId, data: Vec<u8>) {
        self.prepare_routes();
        let hdr = Hdr::of(&data, self.routes.routed);
        self.offer_from(link, data, hdr, NONE);
    }

    /// A packet enters a link (at a switch, having come in on `ingress`; `NONE` from a NIC):
    /// faults, the FIFO, and its arrival event.
    pub(super) fn offer_from(&mut self, link: LinkId, mut data: Vec<u8>, hdr: Hdr, ingress: u32) {
        let now = self.now_ns;
        let lid = link as u32;
        let len = data.len() as u64;
        let l = &mut self.links[link];
        let index = l.stats.offered;
        l.stats.offered += 1;
        let limit = l.queue_limit as usize;
        // A link without faults skips what would draw nothing and change nothing.
        let faults = match l.faulty {
            false => None,
            true => {
                if l.partitioned {
                    return self.drop_packet(link, TraceKind::DropPartition, &data, len);
                }
                if l.drop_nth.take(index) {
                    return self.drop_packet(link, TraceKind::DropNth, &data, index);
                }
                let faults = l.params.faults();
                if faults.lose(&mut self.rng) {
                    return self.drop_packet(link, TraceKind::DropLoss, &data, len);
                }
                Some(faults)
            }
        };
        if self.pfc.is_some() {
            // Lossless: the ingress port's headroom bounds what a switch holds, not the queue.
            if !self.pfc_admits(ingress, len) {
                self.pfc_note_drop();
                return self.drop_packet(link, TraceKind::DropQueue, &data, len);
            }
        } else if limit > 0 && self.links[link].queue_len(now) >= limit {
            return self.drop_packet(link, TraceKind::DropQueue, &data, len);
        }
        let l = &mut self.links[link];
        let ahead_ns = l.ahead_ns(now);
        l.sum_ahead_ns += ahead_ns;
        if ahead_ns > l.peak_ahead_ns {
            l.peak_ahead_ns = ahead_ns;
            l.stats.peak_queue_bytes = l.backlog_bytes(now);
        }
        let Some(faults) = faults else {
            self.record_hdr(TraceKind::Send, lid, NONE, &hdr, len);
            return match self.pfc.is_some() {
                true => self.pfc_push(link, data, 0, ingress),
                false => self.enqueue(link, data, hdr, 0),
            };
        };
        if let Some(ecn) = l.params.ecn {
            self.mark_ecn(link, &mut data, ecn);
        }
        let fate = faults.decide(&mut self.rng, data.len());
        let duplicate = fate.duplicate;
        if let Some((at, bit)) = fate.flip {
            data[at] ^= 1 << bit;
            self.links[link].stats.corrupted += 1;
            self.record(TraceKind::Corrupt, lid, NONE, &data, (at as u64) << 3 | bit as u64);
        }
        if let Some(keep) = fate.keep {
            data.truncate(keep);
            self.links[link].stats.truncated += 1;
            self.record(TraceKind::Truncate, lid, NONE, &data, keep as u64);
        }
        let extra_ns = fate.jitter_ns;
        if extra_ns > 0 {
            self.links[link].stats.jittered += 1;
            self.record(TraceKind::Jitter, lid, NONE, &data, extra_ns);
        }
        self.record(TraceKind::Send, lid, NONE, &data, data.len() as u64);
        // The marks and faults may have changed what the next hops read.
        let hdr = Hdr::of(&data, self.routes.routed);
        let copy = duplicate.then(|| data.clone());
        let pfc = self.pfc.is_some();
        match pfc {
            true => self.pfc_push(link, data, extra_ns, ingress),
            false => self.enqueue(link, data, hdr, extra_ns),
        }
        if let Some(copy) = copy {
            self.links[link].stats.duplicated += 1;
            self.record(TraceKind::Duplicate, lid, NONE, &copy, copy.len() as u64);
            // The copy follows its original through the FIFO, without further faults.
            match pfc {
                true => self.pfc_push(link, copy, 0, NONE),
                false => self.enqueue(link, copy, hdr, 0),
            }
        }
    }

    /// ECN marking as the packet enters the link's queue (see [`super::cc::EcnMarking`]): an
    /// ECN-capable data packet is marked CE with the probability the backlog ahead of it
    /// gives, drawn from the world's generator only when that is strictly between 0 and 1.
    fn mark_ecn(&mut self, link: LinkId, data: &mut [u8], ecn: super::cc::EcnMarking) {
        use super::cc;
        if !matches!(cc::ecn_of(data), Some(e) if e != cc::ECN_NOT_ECT && e != cc::ECN_CE)
            || !cc::is_data(data)
        {
            return;
        }
        let backlog = self.links[link].backlog_bytes(self.now_ns);
        if self.rng.chance(ecn.probability(backlog)) {
            cc::set_ecn(data, cc::ECN_CE);
            self.links[link].stats.ecn_marked += 1;
            self.record(TraceKind::EcnMark, link as u32, NONE, data, backlog);
        }
    }

    /// Serialise a packet behind those already in the link's FIFO and schedule its arrival:
    /// in the link's FIFO of packets in flight behind the ones ahead of it, or as an event of its own if it
    /// overtakes one of them (jitter, a lower latency).
    pub(super) fn enqueue(&mut self, link: LinkId, data: Vec<u8>, hdr: Hdr, extra_ns: u64) {
        let now = self.now_ns;
        let l = &mut self.links[link];
        let start = now.max(l.busy_until_ns);
        let finish = start + l.serialisation_ns(data.len());
        l.busy_until_ns = finish;
        l.note_queued(now, finish);
        let arrive_ns = finish + l.latency_ns + extra_ns;
        if l.in_flight.back().is_some_and(|last| last.arrive_ns > arrive_ns) {
            return self.push(arrive_ns, EventKind::Arrive { link, data, hdr });
        }
        let seq = self.next_seq();
        let l = &mut self.links[link];
        if l.in_flight.is_empty() {
            let key = seq << SOURCE_BITS | SOURCE_LINK | link as u64;
            self.heap.push(event_key(arrive_ns, key));
        }
        l.in_flight.push_back(InFlight { arrive_ns, seq, data, hdr });
    }

    /// A packet reaches the far end of `link`: a switch forwards it (reading only `hdr`, not
    /// its bytes), a NIC takes it.
    pub(super) fn arrive(&mut self, link: LinkId, data: Vec<u8>, hdr: Hdr) {
        let lid = link as u32;
        if self.links[link].partitioned {
            return self.drop_packet(link, TraceKind::DropPartition, &data, data.len() as u64);
        }
        let l = &mut self.links[link];
        l.stats.delivered += 1;
        l.stats.delivered_bytes += data.len() as u64;
        let node = l.dst_node as NodeId;
        if l.dst_switch {
            self.record_hdr(TraceKind::Forward, lid, node as u32, &hdr, data.len() as u64);
            // The destination comes from the IP header; a runt packet goes nowhere.
            let to = (hdr.to_slot as usize).wrapping_sub(1);
            return self.forward(node, to, data, hdr, lid);
        }
        self.record_hdr(TraceKind::Deliver, lid, node as u32, &hdr, data.len() as u64);
        if let Some(c) = self.capture.as_mut().filter(|c| c.error.is_none()) {
            if let Err(e) = c.writer.write_datagram(self.now_ns, &data) {
                c.error = Some(e);
            }
        }
        let now = self.now_ns;
        self.touch(node);
        if self.cc.is_some() && self.cc_receive(node, &data) {
            // A CNP: the NIC's congestion control took it, the engine never sees one.
            return self.flush(node);
        }
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

/// The route table: for each (from, to), the equal-cost next links a packet at `from` bound
/// for `to` may take.
///
/// Packed for the cache, as a thousand-host world routes every packet at three switches and
/// its NIC: each node's row names, per destination, one of the few distinct sets of next links
/// that node has (2 bytes, 0 for none), and a row where every other node is reached through
/// one set (a NIC's, with its one link) is not read at all.
#[derive(Default)]
pub(super) struct Routes {
    rows: Vec<RouteRow>,
    /// Whether a packet's destination or flow hash is ever read ([`Hdr::of`]): some node is a
    /// switch, or has a choice of next links.
    pub(super) routed: bool,
    /// `table[from * nodes + to]`: 0 (no path), or k for `sets[rows[from].base + k - 1]`.
    table: Vec<u16>,
    /// Each row's distinct sets, row after row.
    sets: Vec<HopSet>,
    /// The links of every set; a set is a range of it.
    pool: Vec<LinkId>,
}

/// One node's row of the route table.
#[derive(Clone, Copy, Default)]
struct RouteRow {
    /// Where its sets start in `sets`.
    base: u32,
    /// The set every other node is reached through, when there is one such set for all
    /// (then `table` is not read).
    uniform: Option<HopSet>,
}

impl Routes {
    /// The next links from `from` to `to`: `None` if no path, or either node does not exist.
    #[inline]
    fn set(&self, from: NodeId, to: NodeId) -> Option<HopSet> {
        let n = self.rows.len();
        if from >= n || to >= n {
            return None;
        }
        let row = self.rows[from];
        if let Some(set) = row.uniform {
            return (from != to).then_some(set);
        }
        match self.table[from * n + to] {
            0 => None,
            k => Some(self.sets[row.base as usize + k as usize - 1]),
        }
    }
}

/// A route table being filled, (from, to) in any order.
struct RouteBuild {
    n: usize,
    table: Vec<u16>,
    /// Per row: its distinct sets, each by its links, with its 1-based number (deterministic:
    /// numbered in the order first seen; the map is only looked up, never iterated).
    seen: Vec<std::collections::HashMap<Vec<LinkId>, u16>>,
}

impl RouteBuild {
    fn new(n: usize) -> RouteBuild {
        RouteBuild { n, table: vec![0; n * n], seen: vec![Default::default(); n] }
    }

    fn put(&mut self, from: NodeId, to: NodeId, links: &[LinkId]) {
        let seen = &mut self.seen[from];
        let k = match seen.get(links) {
            Some(&k) => k,
            None => {
                let k = u16::try_from(seen.len() + 1)
                    .ok()
                    .filter(|&k| k < u16::MAX)
                    .expect("a node has fewer than 65535 distinct sets of next links");
                seen.insert(links.to_vec(), k);
                k
            }
        };
        self.table[from * self.n + to] = k;
    }

    fn finish(self) -> Routes {
        let n = self.n;
        let mut r = Routes { table: self.table, ..Routes::default() };
        for (from, seen) in self.seen.into_iter().enumerate() {
            let base = r.sets.len() as u32;
            // In their numbers' order, so the pool's layout is the same every run.
            let mut sets: Vec<(Vec<LinkId>, u16)> = seen.into_iter().collect();
            sets.sort_unstable_by_key(|s| s.1);
            let sets: Vec<HopSet> = sets
                .into_iter()
                .map(|(links, _)| {
                    let set = HopSet { start: r.pool.len() as u32, len: links.len() as u32 };
                    r.pool.extend_from_slice(&links);
                    set
                })
                .collect();
            r.sets.extend_from_slice(&sets);
            let row = &r.table[from * n..(from + 1) * n];
            let first = row.iter().enumerate().find(|&(to, _)| to != from).map(|(_, &k)| k);
            let uniform = match first {
                Some(k) if k != 0 => {
                    row.iter().enumerate().all(|(to, &x)| x == if to == from { 0 } else { k })
                }
                _ => false,
            };
            let uniform = uniform.then(|| sets[first.unwrap_or(1) as usize - 1]);
            r.rows.push(RouteRow { base, uniform });
        }
        r
    }
}

/// A range of [`Routes`]' `pool`: the equal-cost next links of one (from, to).
#[derive(Clone, Copy, Debug)]
struct HopSet {
    start: u32,
    len: u32,
}

/// Offsets of the source and destination addresses in an IPv4 header.
const IPV4_SRC: usize = 12;
const IPV4_DST: usize = 16;

/// The node whose port has the address at `at` (an IPv4 header's offset) in a datagram, or
/// `usize::MAX` (no node) for a foreign address or a runt packet. An IPv6 datagram (a QP
/// sending from a link-local GID) names its ports by their link-local addresses, which
/// [`slot_of_datagram_addr`] reads.
fn node_of_ip(data: &[u8], at: usize) -> NodeId {
    (slot_of_datagram_addr(data, at == IPV4_DST) as usize).wrapping_sub(1)
}
