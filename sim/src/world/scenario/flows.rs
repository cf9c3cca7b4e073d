//! A scenario's `[workload]` and results: the generated flows turned into connections (one RC
//! connection per flow, one WRITE of its size at its arrival), the time series sampled while
//! the run goes, and the [`Results`] gathered at its end (each message's completion time and
//! ideal, the series, pause time per port). Off unless the scenario has a `[workload]` or the
//! run asks for samples: then the run does exactly what it did before.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::spec::{ConnSpec, Expect, Names, OpSpec, Scenario};
use crate::world::workload::{
    generate, ideal_fct_ns, FlowRecord, GenContext, PortPause, Results, Series, MAX_WORKLOAD_BYTES,
};
use crate::world::{NodeId, Rng, World};

/// The connections the workload adds, each with its start, ns after the run's start.
pub(super) fn workload_conns(
    sc: &Scenario,
    w: &World,
    seed: u64,
) -> Result<Vec<(ConnSpec, u64)>, String> {
    let Some(spec) = &sc.workload else { return Ok(Vec::new()) };
    let hosts: Vec<String> = match &spec.hosts {
        Some(h) => h.clone(),
        None => w.nodes().iter().filter(|n| !n.is_switch()).map(|n| n.name.clone()).collect(),
    };
    let mut ids = Vec::new();
    for h in &hosts {
        let id = w.node_by_name(h).ok_or_else(|| format!("[workload] names no node {h:?}"))?;
        if w.nodes()[id].is_switch() {
            return Err(format!("[workload] host {h:?} is a switch"));
        }
        ids.push(id);
    }
    let target = match &spec.target {
        None => 0,
        Some(t) => hosts
            .iter()
            .position(|h| h == t)
            .ok_or_else(|| format!("[workload] target {t:?} is not one of its hosts"))?,
    };
    let link_gbps = match spec.link_gbps {
        Some(g) => g,
        None => ids
            .first()
            .and_then(|&h| w.links().iter().find(|l| l.src == h))
            .map_or(0.0, |l| l.params.bandwidth_gbps),
    };
    // Its own stream from the seed, apart from the world's and the random ops'.
    let mut rng = Rng::new(seed ^ 0x3300_f10f_5eed);
    let flows =
        generate(spec, &mut GenContext { hosts: hosts.len(), target, link_gbps, rng: &mut rng })?;
    let total: u64 = flows.iter().map(|f| f.size).sum();
    if total > MAX_WORKLOAD_BYTES {
        return Err(format!(
            "[workload] would move {total} bytes, above the {MAX_WORKLOAD_BYTES} a run may \
             register: lower flows or set max_flow_bytes"
        ));
    }
    Ok(flows
        .into_iter()
        .map(|f| {
            let conn = ConnSpec {
                from: Names::One(hosts[f.src].clone()),
                to: hosts[f.dst].clone(),
                mtu: spec.mtu,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 12,
                max_rd_atomic: 4,
                window: spec.window,
                recv_delay_us: 0,
                start_us: 0,
                expect: Expect::Success,
                ops: vec![OpSpec {
                    op: "write".into(),
                    size: f.size as u32,
                    max_size: None,
                    count: 1,
                }],
            };
            (conn, f.start_ns)
        })
        .collect())
}

/// Samples taken while the run goes: every switch egress queue's backlog and every host's
/// transmitted bytes, every `every_ns`.
pub(super) struct Sampler {
    every_ns: u64,
    next_ns: u64,
    start_ns: u64,
    /// When the last samples were read (the world's clock).
    read_at_ns: u64,
    /// The links sampled as queues (a switch's egress), and their samples.
    queues: Vec<(usize, Vec<(u64, f64)>)>,
    /// Each host's links out, the bytes they had delivered at the last sample, and its samples.
    hosts: Vec<HostSamples>,
    /// Each congestion-controlled flow's rate limit, by (sender, destination, destination
    /// QP), once it has one.
    cc: std::collections::BTreeMap<(NodeId, NodeId, u32), Vec<(u64, f64)>>,
}

/// A host, its links out, the bytes they had delivered at the last sample, and its samples.
type HostSamples = (NodeId, Vec<usize>, u64, Vec<(u64, f64)>);

impl Sampler {
    /// A sampler for `w`, or none when `every_ns` is 0.
    pub(super) fn new(w: &World, start_ns: u64, every_ns: u64) -> Option<Sampler> {
        if every_ns == 0 {
            return None;
        }
        let queues = (0..w.links().len())
            .filter(|&l| w.nodes()[w.links()[l].src].is_switch())
            .map(|l| (l, Vec::new()))
            .collect();
        let hosts = (0..w.nodes().len())
            .filter(|&n| !w.nodes()[n].is_switch())
            .map(|n| {
                let out: Vec<usize> =
                    (0..w.links().len()).filter(|&l| w.links()[l].src == n).collect();
                (n, out, 0, Vec::new())
            })
            .collect();
        Some(Sampler {
            every_ns,
            next_ns: start_ns,
            start_ns,
            read_at_ns: start_ns,
            queues,
            hosts,
            cc: Default::default(),
        })
    }

    /// Take the samples due by `now` (reading the world, changing nothing in it). A rate is
    /// the bytes delivered since the last reading over the time since then.
    pub(super) fn sample(&mut self, w: &World, now: u64) {
        while now >= self.next_ns {
            let since = now.saturating_sub(self.read_at_ns);
            self.read_at_ns = now;
            let t = self.next_ns - self.start_ns;
            for (l, pts) in &mut self.queues {
                pts.push((t, w.links()[*l].backlog_bytes(now) as f64));
            }
            for (_, out, last, pts) in &mut self.hosts {
                let bytes: u64 = out.iter().map(|&l| w.links()[l].stats.delivered_bytes).sum();
                if t > 0 {
                    let b = (bytes - *last) as f64 * 8.0;
                    pts.push((t, if since > 0 { b / since as f64 } else { 0.0 }));
                }
                *last = bytes;
            }
            for n in 0..w.nodes().len() {
                for (dst, qp, rate, _) in w.cc_flows(n) {
                    self.cc.entry((n, dst, qp)).or_default().push((t, rate));
                }
            }
            self.next_ns += self.every_ns;
        }
    }
}

/// The most series of each kind kept (the busiest): a plot's colours, a table's lines.
const MAX_SERIES: usize = 8;

/// Keep the `MAX_SERIES` series with the largest peaks (ties: the first), in their order.
fn busiest(mut all: Vec<Series>) -> Vec<Series> {
    let peak = |s: &Series| s.points.iter().map(|p| p.1).fold(0.0, f64::max);
    all.retain(|s| peak(s) > 0.0);
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by(|&a, &b| peak(&all[b]).total_cmp(&peak(&all[a])).then(a.cmp(&b)));
    order.truncate(MAX_SERIES);
    order.sort_unstable();
    order.into_iter().map(|i| std::mem::take(&mut all[i])).collect()
}

/// The shortest propagation delay (ns) of each (source, destination) pair, relaying only
/// through switches (0 if no path): one Dijkstra pass per source over the links grouped by
/// where they start, keeping only the answers asked for. (A pass per flow end over every
/// link made a 1,024-host fat tree's results cost more than its traffic.)
fn path_latencies(
    w: &World,
    pairs: impl IntoIterator<Item = (NodeId, NodeId)>,
) -> BTreeMap<(NodeId, NodeId), u64> {
    let mut wanted: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
    for (src, dst) in pairs {
        wanted.entry(src).or_default().push(dst);
    }
    let mut out = vec![Vec::new(); w.nodes().len()];
    for l in w.links() {
        out[l.src].push((l.dst, l.params.latency_ns));
    }
    let (mut dist, mut heap) = (vec![u64::MAX; out.len()], BinaryHeap::new());
    let mut answers = BTreeMap::new();
    for (src, dsts) in wanted {
        dist.fill(u64::MAX);
        dist[src] = 0;
        heap.push(Reverse((0u64, src)));
        while let Some(Reverse((d, u))) = heap.pop() {
            if d > dist[u] {
                continue;
            }
            for &(v, latency_ns) in &out[u] {
                let nd = d + latency_ns;
                if nd < dist[v] {
                    dist[v] = nd;
                    // A host ends a path: it relays nothing, so it never needs the heap.
                    if w.nodes()[v].is_switch() {
                        heap.push(Reverse((nd, v)));
                    }
                }
            }
        }
        for dst in dsts {
            answers.insert((src, dst), if dist[dst] == u64::MAX { 0 } else { dist[dst] });
        }
    }
    answers
}

/// A message that completed: connection, payload bytes, whether its data went from the
/// responder to the requester (a READ), posted and completed (ns, world clock).
pub(super) type Done = (usize, u64, bool, u64, u64);

/// The run's results: each message's completion time and ideal (the round trip's shortest
/// propagation delay plus the payload at the sender's line rate), the sampled series, and the
/// time each port spent paused.
pub(super) fn results(
    w: &World,
    start_ns: u64,
    conns: &[(String, NodeId, NodeId)],
    done: &[Done],
    sampler: Option<Sampler>,
) -> Results {
    let ends = |&(c, ..): &Done| (conns[c].1, conns[c].2);
    let latency = path_latencies(w, done.iter().map(ends).flat_map(|(a, b)| [(a, b), (b, a)]));
    let out_gbps = |n: NodeId| {
        w.links().iter().filter(|l| l.src == n).map(|l| l.params.bandwidth_gbps).fold(0.0, f64::max)
    };
    let mut flows = Vec::with_capacity(done.len());
    for &(c, size, read, posted, completed) in done {
        let (name, a, b) = &conns[c];
        let r = latency[&(*a, *b)] + latency[&(*b, *a)];
        let gbps = out_gbps(if read { *b } else { *a });
        flows.push(FlowRecord {
            conn: name.clone(),
            size,
            start_ns: posted - start_ns,
            fct_ns: completed - posted,
            ideal_ns: ideal_fct_ns(size, gbps, r),
        });
    }
    let describe = |l: usize| {
        let l = &w.links()[l];
        format!("{} -> {}", w.nodes()[l.src].name, w.nodes()[l.dst].name)
    };
    let pauses = (0..w.links().len())
        .filter(|&l| w.links()[l].stats.pfc_pauses > 0)
        .map(|l| PortPause {
            link: describe(l),
            pauses: w.links()[l].stats.pfc_pauses,
            paused_ns: w.links()[l].stats.paused_ns,
        })
        .collect();
    let (mut queues, mut rates, mut cc_rates, mut sample_ns) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    if let Some(s) = sampler {
        sample_ns = s.every_ns;
        // The first flows (by sender, destination, QP): a plot's colours.
        cc_rates =
            s.cc.into_iter()
                .take(MAX_SERIES)
                .map(|((n, d, qp), points)| Series {
                    name: format!(
                        "{} -> {} qp {qp:#x} rate",
                        w.nodes()[n].name,
                        w.nodes().get(d).map_or("?", |x| x.name.as_str())
                    ),
                    points,
                })
                .collect();
        queues = busiest(
            s.queues
                .into_iter()
                .map(|(l, points)| Series { name: format!("{} queue", describe(l)), points })
                .collect(),
        );
        rates = busiest(
            s.hosts
                .into_iter()
                .map(|(n, _, _, points)| Series {
                    name: format!("{} tx", w.nodes()[n].name),
                    points,
                })
                .collect(),
        );
    }
    Results { flows, queues, rates, pauses, sample_ns, cc_rates }
}

#[cfg(test)]
mod tests {
    use super::path_latencies;
    use crate::world::{LinkParams, World};

    /// The shortest delay relays through switches only, one pass serves every destination of
    /// a source, and a pair with no path gets 0.
    #[test]
    fn path_latency_relays_only_through_switches() {
        let mut w = World::new(1);
        let (a, b, c, lone) = (w.add_node("a"), w.add_node("b"), w.add_node("c"), w.add_node("d"));
        let (s1, s2) = (w.add_switch("s1"), w.add_switch("s2"));
        let lat = |ns| LinkParams { latency_ns: ns, ..LinkParams::default() };
        // a -> s1 -> b costs 300; a -> c -> b costs 20 but c is a host, so it does not relay.
        w.add_link(a, s1, lat(100));
        w.add_link(s1, b, lat(200));
        w.add_link(a, c, lat(10));
        w.add_link(c, b, lat(10));
        // a -> s2 -> s1 is longer than a -> s1; b -> s2 -> a is the only way back.
        w.add_link(a, s2, lat(50));
        w.add_link(s2, s1, lat(70));
        w.add_link(b, s2, lat(5));
        w.add_link(s2, a, lat(6));
        let pairs = [(a, b), (a, c), (b, a), (c, a), (a, lone), (a, b)];
        let got = path_latencies(&w, pairs);
        assert_eq!(got.len(), 5, "the repeated pair is answered once");
        assert_eq!(got[&(a, b)], 300);
        assert_eq!(got[&(a, c)], 10);
        assert_eq!(got[&(b, a)], 11);
        assert_eq!(got[&(c, a)], 0, "c reaches b, but b is a host and does not relay");
        assert_eq!(got[&(a, lone)], 0);
    }
}
