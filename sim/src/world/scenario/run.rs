//! Scenarios: a world, a fault schedule and an RC workload described in TOML, run
//! deterministically from a seed, with a summary of what happened. `softverbs sim FILE.toml`
//! runs one; the tests run the samples in `sim/scenarios/`.
//!
//! The workload runs through the sim backend's verbs objects (PDs, CQs, QPs, MRs), exactly as a
//! verbs program would; the runner polls CQs between events and never reads a clock.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use verbs_api::{
    AtomicTarget, Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion,
    WrOpcode,
};

use crate::conn::{ConnOpts, Endpoint};
use crate::world::{connect_rc, LinkChange, LinkId, LinkParams, NodeId, Rng, SimWorld, World};

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for the summary.
    #[serde(default)]
    pub name: String,
    /// The seed used unless `--seed` overrides it.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Give up (and fail) when virtual time passes this many ms after the start.
    #[serde(default = "default_max_time_ms")]
    pub max_time_ms: u64,
    /// Give up (and fail) after this many events.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Print a progress line to stderr every this many virtual ms (0: never).
    #[serde(default)]
    pub progress_every_ms: u64,
    /// NIC settings for every node.
    #[serde(default)]
    pub nic: NicSpec,
    /// The nodes.
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSpec>,
    /// The links.
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    /// Changes to links at virtual times.
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSpec>,
    /// RC connections and what each does.
    #[serde(rename = "connection")]
    pub connections: Vec<ConnSpec>,
}

fn default_seed() -> u64 {
    1
}
fn default_max_time_ms() -> u64 {
    10_000
}
fn default_max_events() -> u64 {
    50_000_000
}

/// NIC settings.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Treat `retry_cnt = 7` as infinite (rxe's behaviour).
    #[serde(default)]
    pub retry_cnt_7_infinite: bool,
    /// Ask for an ACK every this many packets of a long message.
    pub ack_every: Option<u32>,
    /// Unacknowledged packets a QP may have in flight.
    pub window: Option<u32>,
}

/// One node, or `count` nodes named `name0`, `name1`, ...
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Its name (or the prefix of the names, with `count`).
    pub name: String,
    /// Make this many nodes.
    pub count: Option<usize>,
    /// A switch rather than a NIC.
    #[serde(default)]
    pub switch: bool,
}

/// One node name or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// One name.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Names {
    fn list(&self) -> Vec<String> {
        match self {
            Names::One(n) => vec![n.clone()],
            Names::Many(v) => v.clone(),
        }
    }
}

/// Link parameters, each optional (defaults: [`LinkParams::default`], or the link's current
/// values in a `set` fault).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// See [`LinkParams::latency_ns`].
    pub latency_ns: Option<u64>,
    /// See [`LinkParams::bandwidth_gbps`].
    pub bandwidth_gbps: Option<f64>,
    /// See [`LinkParams::queue_limit`].
    pub queue_limit: Option<usize>,
    /// See [`LinkParams::loss`].
    pub loss: Option<f64>,
    /// See [`LinkParams::dup`].
    pub dup: Option<f64>,
    /// See [`LinkParams::reorder_jitter_ns`].
    pub reorder_jitter_ns: Option<u64>,
    /// See [`LinkParams::corrupt`].
    pub corrupt: Option<f64>,
    /// See [`LinkParams::truncate`].
    pub truncate: Option<f64>,
}

impl ParamSpec {
    fn over(&self, base: &LinkParams) -> LinkParams {
        LinkParams {
            latency_ns: self.latency_ns.unwrap_or(base.latency_ns),
            bandwidth_gbps: self.bandwidth_gbps.unwrap_or(base.bandwidth_gbps),
            queue_limit: self.queue_limit.unwrap_or(base.queue_limit),
            loss: self.loss.unwrap_or(base.loss),
            dup: self.dup.unwrap_or(base.dup),
            reorder_jitter_ns: self.reorder_jitter_ns.unwrap_or(base.reorder_jitter_ns),
            corrupt: self.corrupt.unwrap_or(base.corrupt),
            truncate: self.truncate.unwrap_or(base.truncate),
        }
    }
}

/// Links from each of `from` to each of `to` (and back, unless `duplex = false`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Source node(s).
    pub from: Names,
    /// Destination node(s).
    pub to: Names,
    /// Also add the reverse link (default true).
    #[serde(default = "yes")]
    pub duplex: bool,
    /// Its parameters.
    #[serde(flatten)]
    pub params: ParamSpec,
}

fn yes() -> bool {
    true
}

/// What a fault does.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FaultAction {
    /// Cut the links.
    Partition,
    /// Restore them.
    Heal,
    /// Change their parameters.
    Set,
}

/// A change to the links between `from` and `to` (both ways unless `duplex = false`) at a
/// virtual time (µs after the start).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// When, in µs after the start.
    pub at_us: u64,
    /// What.
    pub action: FaultAction,
    /// Source node(s).
    pub from: Names,
    /// Destination node(s).
    pub to: Names,
    /// Both directions (default true).
    #[serde(default = "yes")]
    pub duplex: bool,
    /// New parameters, for `set`.
    #[serde(flatten)]
    pub params: ParamSpec,
}

/// An operation, or `count` of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// `send`, `send_imm`, `write`, `write_imm`, `read`, `cas`, `fadd`, or `random` (uniform
    /// over the others with a size uniform in `size..=max_size`).
    pub op: String,
    /// Bytes (ignored by atomics).
    #[serde(default)]
    pub size: u32,
    /// Largest size, for `random`.
    pub max_size: Option<u32>,
    /// How many.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// What a connection's WRs are expected to end with.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Every WR succeeds.
    #[default]
    Success,
    /// Some WR fails (e.g. retries exhausted by a permanent partition); the rest are flushed.
    Error,
}

/// An RC connection from each of `from` to `to`, each running the same operations.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnSpec {
    /// The requester node(s): one connection per name.
    pub from: Names,
    /// The responder node.
    pub to: String,
    /// Path MTU in bytes (256..4096).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    #[serde(default = "default_timeout")]
    pub timeout: u8,
    /// Transport retries.
    #[serde(default = "seven")]
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    #[serde(default = "seven")]
    pub rnr_retry: u8,
    /// RNR timer code the responder asks for.
    #[serde(default = "default_min_rnr")]
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics.
    #[serde(default = "four")]
    pub max_rd_atomic: u8,
    /// WRs the requester keeps outstanding.
    #[serde(default = "default_window")]
    pub window: u32,
    /// The responder posts its receives this many µs after the start (RNR until then).
    #[serde(default)]
    pub recv_delay_us: u64,
    /// The requester starts this many µs after the start.
    #[serde(default)]
    pub start_us: u64,
    /// What the WRs should end with.
    #[serde(default)]
    pub expect: Expect,
    /// The operations, in post order.
    pub ops: Vec<OpSpec>,
}

fn default_mtu() -> u32 {
    1024
}
fn default_timeout() -> u8 {
    14
}
fn seven() -> u8 {
    7
}
fn default_min_rnr() -> u8 {
    12
}
fn four() -> u8 {
    4
}
fn default_window() -> u32 {
    16
}

/// How to run a scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Override the scenario's seed.
    pub seed: Option<u64>,
    /// Write a pcap of every delivered datagram here.
    pub pcap: Option<PathBuf>,
    /// Also capture dropped datagrams.
    pub pcap_drops: bool,
    /// Write the text trace here.
    pub trace: Option<PathBuf>,
    /// Print progress lines to stderr.
    pub progress: bool,
}

/// One connection's outcome.
#[derive(Clone, Debug)]
pub struct ConnReport {
    /// `from -> to`.
    pub name: String,
    /// WRs posted.
    pub posted: usize,
    /// WRs in the workload.
    pub total: usize,
    /// Completions by status name.
    pub statuses: BTreeMap<&'static str, u64>,
    /// Whether the outcome is what the scenario expects.
    pub as_expected: bool,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Report {
    /// Scenario name.
    pub name: String,
    /// The seed used.
    pub seed: u64,
    /// The trace hash.
    pub trace_hash: u64,
    /// Trace records.
    pub trace_records: u64,
    /// Virtual time from start to the last completion (or the give-up point), ns.
    pub elapsed_ns: u64,
    /// Events run.
    pub events: u64,
    /// Payload bytes of successful WRs.
    pub goodput_bytes: u64,
    /// Packets offered to links / delivered to NICs.
    pub packets_sent: u64,
    /// Packets that reached the end of a link.
    pub packets_delivered: u64,
    /// Engine retransmissions (all nodes).
    pub retransmits: u64,
    /// RNR NAKs sent (all nodes).
    pub rnr_naks: u64,
    /// PSN-sequence NAKs sent.
    pub seq_naks: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Packets rejected for a bad ICRC.
    pub rx_bad_icrc: u64,
    /// Packets rejected as malformed.
    pub rx_malformed: u64,
    /// Faults injected, by kind.
    pub faults: Vec<(&'static str, u64)>,
    /// Per-message completion times (post to completion), ns, sorted.
    pub completion_ns: Vec<u64>,
    /// Per connection.
    pub connections: Vec<ConnReport>,
    /// Whether every connection finished as expected within the bounds.
    pub passed: bool,
    /// Why not, if not.
    pub failure: Option<String>,
}

impl Scenario {
    /// Parse TOML.
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Scenario::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cas,
    Fadd,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "send" => Op::Send,
            "send_imm" => Op::SendImm,
            "write" => Op::Write,
            "write_imm" => Op::WriteImm,
            "read" => Op::Read,
            "cas" => Op::Cas,
            "fadd" => Op::Fadd,
            _ => return None,
        })
    }
    fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }
    const ALL: [Op; 7] =
        [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read, Op::Cas, Op::Fadd];
}

struct Conn {
    name: String,
    a: Endpoint,
    b: Endpoint,
    ops: Vec<(Op, u32)>,
    next: usize,
    window: usize,
    outstanding: VecDeque<u64>,
    start_ns: u64,
    recv_at_ns: u64,
    recvs_posted: bool,
    expect: Expect,
    statuses: BTreeMap<&'static str, u64>,
    completed: usize,
    failed: bool,
    recv_len: u32,
}

fn resolve(w: &World, names: &Names) -> Result<Vec<NodeId>, String> {
    names
        .list()
        .iter()
        .map(|n| w.node_by_name(n).ok_or_else(|| format!("no node named {n:?}")))
        .collect()
}

fn links_between(w: &World, from: &[NodeId], to: &[NodeId], duplex: bool) -> Vec<LinkId> {
    let mut out = Vec::new();
    for &f in from {
        for &t in to {
            out.extend(w.link_between(f, t));
            if duplex {
                out.extend(w.link_between(t, f));
            }
        }
    }
    out
}

/// Build the world, run the workload, and report. Errors are problems with the scenario itself
/// (unknown node, bad op); a workload that does not finish as expected is a report with
/// `passed = false`.
pub fn run(sc: &Scenario, opts: &RunOptions) -> Result<Report, String> {
    let seed = opts.seed.unwrap_or(sc.seed);
    let mut w = World::new(seed);
    w.configure_nics(|c| {
        c.retry_cnt_7_infinite = sc.nic.retry_cnt_7_infinite;
        if let Some(a) = sc.nic.ack_every {
            c.ack_every = a;
        }
        if let Some(win) = sc.nic.window {
            c.window = win;
        }
    });
    for n in &sc.nodes {
        let names: Vec<String> = match n.count {
            None => vec![n.name.clone()],
            Some(k) => (0..k).map(|i| format!("{}{i}", n.name)).collect(),
        };
        for name in names {
            if w.node_by_name(&name).is_some() {
                return Err(format!("node {name:?} is defined twice"));
            }
            if n.switch {
                w.add_switch(name);
            } else {
                w.add_node(name);
            }
        }
    }
    for l in &sc.links {
        let (from, to) = (resolve(&w, &l.from)?, resolve(&w, &l.to)?);
        let params = l.params.over(&LinkParams::default());
        for &f in &from {
            for &t in &to {
                w.add_link(f, t, params.clone());
                if l.duplex {
                    w.add_link(t, f, params.clone());
                }
            }
        }
    }
    let start = w.now_ns();
    for f in &sc.faults {
        let (from, to) = (resolve(&w, &f.from)?, resolve(&w, &f.to)?);
        let links = links_between(&w, &from, &to, f.duplex);
        if links.is_empty() {
            return Err(format!("fault at {} µs names no link", f.at_us));
        }
        for l in links {
            let change = match f.action {
                FaultAction::Partition => LinkChange::Partition,
                FaultAction::Heal => LinkChange::Heal,
                FaultAction::Set => LinkChange::Params(f.params.over(&w.links()[l].params)),
            };
            w.schedule(start + f.at_us * 1000, l, change);
        }
    }
    if opts.trace.is_some() {
        w.trace_mut().set_keep(true);
    }
    if let Some(p) = &opts.pcap {
        let file = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
        w.capture_to(Box::new(std::io::BufWriter::new(file)), opts.pcap_drops)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let world = SimWorld::new(w);

    // The workload's own randomness (random ops) comes from a stream derived from the seed,
    // separate from the world's, so adding a random op does not shift the faults.
    let mut wl_rng = Rng::new(seed ^ 0x0005_eed0_f0b5);
    let mut conns = Vec::new();
    let mut psn = 0x100u32;
    for c in &sc.connections {
        let mtu =
            Mtu::from_bytes(c.mtu).ok_or_else(|| format!("mtu {} is not 256..4096", c.mtu))?;
        let mut ops = Vec::new();
        for o in &c.ops {
            for _ in 0..o.count {
                let (op, size) = if o.op == "random" {
                    let op = Op::ALL[wl_rng.below(Op::ALL.len() as u64) as usize];
                    let hi = o.max_size.unwrap_or(o.size).max(o.size);
                    (op, o.size + wl_rng.below((hi - o.size) as u64 + 1) as u32)
                } else {
                    let op = Op::parse(&o.op).ok_or_else(|| format!("unknown op {:?}", o.op))?;
                    (op, o.size)
                };
                let size = if matches!(op, Op::Cas | Op::Fadd) { 8 } else { size };
                ops.push((op, size));
            }
        }
        let max_size = ops.iter().map(|o| o.1).max().unwrap_or(8).max(8);
        let to = world.lock().node_by_name(&c.to).ok_or_else(|| format!("no node {:?}", c.to))?;
        let from = resolve(&world.lock(), &c.from)?;
        let conn_opts = ConnOpts {
            mtu,
            timeout: c.timeout,
            retry_cnt: c.retry_cnt,
            rnr_retry: c.rnr_retry,
            min_rnr_timer: c.min_rnr_timer,
            max_rd_atomic: c.max_rd_atomic,
            ..ConnOpts::default()
        };
        let window = c.window.max(1);
        let recvs = ops.iter().filter(|o| o.0.consumes_recv()).count() as u32;
        let cap = QpCap {
            max_send_wr: window,
            max_recv_wr: recvs.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let cq_depth = (window + recvs + 16).min(65536);
        for f in from {
            psn = psn.wrapping_mul(2_654_435_761).wrapping_add(0x9e37) & 0xFF_FFFF;
            let (pa, pb) = (psn, psn ^ 0x55_5555);
            let (a, b) = connect_rc(
                &world,
                f,
                to,
                cap,
                cq_depth,
                max_size as usize + 8,
                &conn_opts,
                (pa, pb),
            )
            .map_err(|e| format!("connecting {:?} to {:?}: {e}", f, c.to))?;
            let name = {
                let w = world.lock();
                format!("{} -> {}", w.nodes()[f].name, w.nodes()[to].name)
            };
            conns.push(Conn {
                name,
                a,
                b,
                ops: ops.clone(),
                next: 0,
                window: window as usize,
                outstanding: VecDeque::new(),
                start_ns: start + c.start_us * 1000,
                recv_at_ns: start + c.recv_delay_us * 1000,
                recvs_posted: recvs == 0,
                expect: c.expect,
                statuses: BTreeMap::new(),
                completed: 0,
                failed: false,
                recv_len: max_size,
            });
        }
    }

    let deadline = start + sc.max_time_ms * 1_000_000;
    let progress_ns = sc.progress_every_ms * 1_000_000;
    let mut next_progress = start + progress_ns;
    let mut completion_ns = Vec::new();
    let mut post_times: Vec<VecDeque<u64>> = vec![VecDeque::new(); conns.len()];
    let mut goodput = 0u64;
    let mut wcs = [WorkCompletion::default(); 64];
    let mut failure = None;
    let mut last_done_ns = start;
    loop {
        let now = world.now_ns();
        let mut all_done = true;
        for (i, c) in conns.iter_mut().enumerate() {
            if !c.recvs_posted && now >= c.recv_at_ns {
                let sge = [c.b.mr.sge(0, c.recv_len)];
                let n = c.ops.iter().filter(|o| o.0.consumes_recv()).count();
                for k in 0..n {
                    c.b.qp
                        .post_recv(&[RecvWr { wr_id: k as u64, sg_list: &sge }])
                        .map_err(|e| format!("{}: post_recv: {e}", c.name))?;
                }
                c.recvs_posted = true;
            }
            // Responder-side completions only free receive WQEs; drain them.
            while c.b.cq.poll(&mut wcs).map_err(|e| e.to_string())? > 0 {}
            loop {
                let n = c.a.cq.poll(&mut wcs).map_err(|e| format!("{}: poll: {e}", c.name))?;
                if n == 0 {
                    break;
                }
                for wc in &wcs[..n] {
                    *c.statuses.entry(wc.status.as_str()).or_default() += 1;
                    c.completed += 1;
                    c.outstanding.pop_front();
                    let posted = post_times[i].pop_front().unwrap_or(now);
                    if wc.status == WcStatus::Success {
                        completion_ns.push(now - posted);
                        goodput += c.ops[wc.wr_id as usize].1 as u64;
                    } else {
                        c.failed = true;
                    }
                    last_done_ns = now;
                }
            }
            while !c.failed
                && now >= c.start_ns
                && c.next < c.ops.len()
                && c.outstanding.len() < c.window
            {
                let (op, size) = c.ops[c.next];
                post_op(c, c.next as u64, op, size).map_err(|e| format!("{}: {e}", c.name))?;
                c.outstanding.push_back(c.next as u64);
                post_times[i].push_back(now);
                c.next += 1;
            }
            let finished = c.completed == c.next && (c.next == c.ops.len() || c.failed);
            all_done &= finished;
        }
        if all_done {
            break;
        }
        let mut w = world.lock();
        if opts.progress && progress_ns > 0 && w.now_ns() >= next_progress {
            let done: usize = conns.iter().map(|c| c.completed).sum();
            let total: usize = conns.iter().map(|c| c.ops.len()).sum();
            eprintln!(
                "  t={:.3} ms events={} completed={done}/{total}",
                (w.now_ns() - start) as f64 / 1e6,
                w.events_run()
            );
            next_progress += progress_ns;
        }
        if w.events_run() >= sc.max_events {
            failure = Some(format!("gave up after {} events", sc.max_events));
            break;
        }
        // The next thing to happen: an event, or a scheduled receive post or connection start.
        let wake = conns
            .iter()
            .flat_map(|c| {
                [
                    (!c.recvs_posted).then_some(c.recv_at_ns),
                    (c.next == 0 && w.now_ns() < c.start_ns).then_some(c.start_ns),
                ]
            })
            .flatten()
            .min();
        match (w.next_event_ns(), wake) {
            (Some(t), Some(k)) if k < t => w.run_until(k),
            (Some(t), _) if t > deadline => {
                failure = Some(format!("not finished after {} ms of virtual time", sc.max_time_ms));
                break;
            }
            (Some(_), _) => {
                w.step();
            }
            (None, Some(k)) => w.run_until(k),
            (None, None) => {
                failure = Some("the world went idle with work outstanding".to_string());
                break;
            }
        }
    }

    let mut w = world.lock();
    w.finish_capture().map_err(|e| format!("pcap: {e}"))?;
    if let Some(p) = &opts.trace {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        );
        w.trace().write_text(&mut f).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let mut connections = Vec::new();
    for c in &conns {
        let ok = c.statuses.get("success").copied().unwrap_or(0) as usize == c.ops.len();
        let as_expected = match c.expect {
            Expect::Success => ok,
            Expect::Error => !ok && c.completed == c.next,
        };
        connections.push(ConnReport {
            name: c.name.clone(),
            posted: c.next,
            total: c.ops.len(),
            statuses: c.statuses.clone(),
            as_expected,
        });
    }
    completion_ns.sort_unstable();
    let total = w.total_stats();
    let mut r = Report {
        name: sc.name.clone(),
        seed,
        trace_hash: w.trace().hash(),
        trace_records: w.trace().len(),
        elapsed_ns: last_done_ns - start,
        events: w.events_run(),
        goodput_bytes: goodput,
        packets_sent: total.offered,
        packets_delivered: total.delivered,
        retransmits: 0,
        rnr_naks: 0,
        seq_naks: 0,
        timeouts: 0,
        rx_bad_icrc: 0,
        rx_malformed: 0,
        faults: total.fault_kinds().to_vec(),
        completion_ns,
        passed: false,
        failure: failure.clone(),
        connections,
    };
    for n in 0..w.nodes().len() {
        if let Some(nic) = w.nic(n) {
            let s = nic.stats();
            r.retransmits += s.retransmits;
            r.rnr_naks += s.rnr_naks_sent;
            r.seq_naks += s.seq_naks_sent;
            r.timeouts += s.timeouts;
            r.rx_bad_icrc += s.rx_bad_icrc;
            r.rx_malformed += s.rx_malformed;
        }
    }
    r.faults.push(("no-route", w.no_route_drops()));
    r.passed = failure.is_none() && r.connections.iter().all(|c| c.as_expected);
    if r.failure.is_none() && !r.passed {
        let bad: Vec<&str> =
            r.connections.iter().filter(|c| !c.as_expected).map(|c| c.name.as_str()).collect();
        r.failure = Some(format!("not as expected: {}", bad.join(", ")));
    }
    Ok(r)
}

fn post_op(c: &Conn, wr_id: u64, op: Op, size: u32) -> verbs_api::Result<()> {
    let (a, b) = (&c.a, &c.b);
    let sge = [a.mr.sge(0, size)];
    let rdma = RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() };
    let atomic =
        AtomicTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey(), compare_add: 1, swap: 2 };
    let opcode = match op {
        Op::Send => WrOpcode::Send,
        Op::SendImm => WrOpcode::SendWithImm,
        Op::Write => WrOpcode::RdmaWrite,
        Op::WriteImm => WrOpcode::RdmaWriteWithImm,
        Op::Read => WrOpcode::RdmaRead,
        Op::Cas => WrOpcode::AtomicCmpAndSwp,
        Op::Fadd => WrOpcode::AtomicFetchAndAdd,
    };
    a.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &sge,
        opcode,
        send_flags: SendFlags::SIGNALED,
        imm_data: wr_id as u32,
        rdma,
        atomic,
        ..Default::default()
    }])
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Report {
    /// The summary `softverbs sim` prints.
    pub fn write_summary(&self, out: &mut impl Write) -> std::io::Result<()> {
        let secs = self.elapsed_ns as f64 / 1e9;
        let gbps = if secs > 0.0 { self.goodput_bytes as f64 * 8.0 / secs / 1e9 } else { 0.0 };
        writeln!(out, "scenario {}: {}", self.name, if self.passed { "PASSED" } else { "FAILED" })?;
        if let Some(f) = &self.failure {
            writeln!(out, "  why: {f}")?;
        }
        writeln!(
            out,
            "  seed {}  trace hash {:016x} ({} records)",
            self.seed, self.trace_hash, self.trace_records
        )?;
        writeln!(
            out,
            "  virtual time {:.3} ms, {} events",
            self.elapsed_ns as f64 / 1e6,
            self.events
        )?;
        writeln!(out, "  goodput {} bytes, {gbps:.3} Gbit/s", self.goodput_bytes)?;
        writeln!(out, "  packets sent {} delivered {}", self.packets_sent, self.packets_delivered)?;
        writeln!(
            out,
            "  retransmissions {}  timeouts {}  RNR NAKs {}  sequence NAKs {}  bad ICRC {}  malformed {}",
            self.retransmits, self.timeouts, self.rnr_naks, self.seq_naks, self.rx_bad_icrc, self.rx_malformed
        )?;
        let faults: Vec<String> =
            self.faults.iter().filter(|f| f.1 > 0).map(|(k, n)| format!("{k} {n}")).collect();
        let faults = if faults.is_empty() { "none".to_string() } else { faults.join(", ") };
        writeln!(out, "  faults injected: {faults}")?;
        let c = &self.completion_ns;
        writeln!(
            out,
            "  completion time µs: min {:.2} median {:.2} p99 {:.2} max {:.2} ({} messages)",
            c.first().copied().unwrap_or(0) as f64 / 1e3,
            percentile(c, 0.5) as f64 / 1e3,
            percentile(c, 0.99) as f64 / 1e3,
            c.last().copied().unwrap_or(0) as f64 / 1e3,
            c.len()
        )?;
        for conn in &self.connections {
            let st: Vec<String> = conn.statuses.iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(
                out,
                "  {}: posted {}/{}, {} [{}]",
                conn.name,
                conn.posted,
                conn.total,
                st.join(", "),
                if conn.as_expected { "as expected" } else { "NOT as expected" }
            )?;
        }
        Ok(())
    }
}
