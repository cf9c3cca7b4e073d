//! Running a scenario: build its world, play each connection's workload through the sim
//! backend's verbs objects, polling CQs between events and checking each completion, check
//! the bytes every successful WR left (`check.rs`), and gather the report.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use verbs_api::{
    AtomicTarget, Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion,
};

use super::check::Plan;
use super::report::{ConnReport, Report, RunPackets};
use super::spec::{Expect, FaultAction, Names, Op, Scenario};
use crate::conn::{ConnOpts, Endpoint};
use crate::world::{connect_rc, LinkChange, LinkId, LinkParams, NodeId, Rng, SimWorld, World};

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
    /// Keep every packet, timer and completion in [`Report::packets`] (for a packet ladder).
    pub packets: bool,
    /// Sample switch queues and host rates every this many µs into [`Report::results`]
    /// (overrides the `[workload]` table's `sample_us`; 0: none).
    pub sample_us: Option<u64>,
}

/// A capture kept in memory, shared with the world that writes it.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The records of a pcap file `PcapWriter` wrote: each one's time (ns) and datagram (the
/// bytes after its 14-byte Ethernet header).
fn pcap_records(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 24;
    let word = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while at + 16 <= bytes.len() {
        let t = word(bytes, at) as u64 * 1_000_000_000 + word(bytes, at + 4) as u64;
        let len = word(bytes, at + 8) as usize;
        let end = (at + 16 + len).min(bytes.len());
        out.push((t, bytes.get(at + 16 + 14..end).unwrap_or(&[]).to_vec()));
        at = end;
    }
    out
}

struct Conn {
    name: String,
    /// The requester's node and the responder's.
    nodes: (NodeId, NodeId),
    a: Endpoint,
    b: Endpoint,
    /// The messages, where their bytes live, and their patterns.
    plan: Plan,
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
    /// Each message's send completion status, once it has one.
    op_status: Vec<Option<WcStatus>>,
    /// Receive completions seen.
    recvs_done: usize,
    /// The first completion or data check that failed.
    error: Option<String>,
    /// Payload bytes of its successful WRs, and when the last completed.
    done_bytes: u64,
    done_ns: u64,
    /// (time, payload bytes) of each successful WR.
    done_log: Vec<(u64, u64)>,
}

impl Conn {
    /// Keep the first check that failed.
    fn fail_check(&mut self, e: String) {
        self.error.get_or_insert(e);
    }

    /// Take the target's receive completions, checking each against the next message that
    /// consumes a receive.
    fn poll_recvs(
        &mut self,
        wcs: &mut [WorkCompletion],
        mut log: Option<&mut Vec<(u64, usize, String)>>,
        now: u64,
    ) -> Result<(), String> {
        loop {
            let n = self.b.cq.poll(wcs).map_err(|e| format!("{}: poll: {e}", self.name))?;
            if n == 0 {
                return Ok(());
            }
            // Read only when there is something to check: most polls find nothing, and the
            // QP objects are cold by then in a world of a thousand hosts.
            let qpns = (self.a.qp.qp_num(), self.b.qp.qp_num());
            for wc in &wcs[..n] {
                if let Some(log) = log.as_deref_mut() {
                    log.push((now, self.nodes.1, super::cqe_label(wc)));
                }
                if let Err(e) = self.plan.check_recv_wc(self.recvs_done, wc, qpns) {
                    self.fail_check(e);
                }
                self.recvs_done += 1;
            }
        }
    }
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
    run_inner(sc, opts, &mut |_, _, _| {})
}

/// [`run`], with `before_check(connection, initiator, target)` called on each connection once
/// the workload is over and before its bytes are checked (a test damages a target with it).
fn run_inner(
    sc: &Scenario,
    opts: &RunOptions,
    before_check: &mut dyn FnMut(usize, &Endpoint, &Endpoint),
) -> Result<Report, String> {
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
    super::net::configure(sc, &mut w)?;
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
    let memory = SharedBuf::default();
    if opts.packets {
        w.trace_mut().set_keep(true);
        w.capture_to(Box::new(memory.clone()), true).map_err(|e| format!("capture: {e}"))?;
    } else if let Some(p) = &opts.pcap {
        let file = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
        w.capture_to(Box::new(std::io::BufWriter::new(file)), opts.pcap_drops)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let world = SimWorld::new(w);

    // The workload's own randomness (random ops) comes from a stream derived from the seed,
    // separate from the world's, so adding a random op does not shift the faults.
    let mut wl_rng = Rng::new(seed ^ 0x0005_eed0_f0b5);
    let mut conns = Vec::new();
    // The connections each node takes part in, as requester or responder.
    let mut by_node: Vec<Vec<usize>> = vec![Vec::new(); world.lock().nodes().len()];
    let mut psn = 0x100u32;
    // The scenario's connections, then its workload's (one per generated flow), each with its
    // start (ns after the start).
    let generated = super::flows::workload_conns(sc, &world.lock(), seed)?;
    let all = sc
        .connections
        .iter()
        .map(|c| (c, c.start_us * 1000))
        .chain(generated.iter().map(|(c, t)| (c, *t)));
    for (c, start_after_ns) in all {
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
            // Each connection's patterns from its own seed, so a message that reaches the
            // wrong connection shows too.
            let plan =
                Plan::new(&ops, Rng::new(seed ^ 0xda7a_0000 ^ conns.len() as u64).next_u64());
            psn = psn.wrapping_mul(2_654_435_761).wrapping_add(0x9e37) & 0xFF_FFFF;
            let (pa, pb) = (psn, psn ^ 0x55_5555);
            let (a, b) =
                connect_rc(&world, f, to, cap, cq_depth, plan.mr_len, &conn_opts, (pa, pb))
                    .map_err(|e| format!("connecting {:?} to {:?}: {e}", f, c.to))?;
            plan.fill(&a.mr, &b.mr).map_err(|e| format!("filling the MRs: {e}"))?;
            let name = {
                let w = world.lock();
                format!("{} -> {}", w.nodes()[f].name, w.nodes()[to].name)
            };
            by_node[f].push(conns.len());
            if to != f {
                by_node[to].push(conns.len());
            }
            conns.push(Conn {
                name,
                nodes: (f, to),
                a,
                b,
                op_status: vec![None; plan.msgs.len()],
                plan,
                next: 0,
                window: window as usize,
                outstanding: VecDeque::new(),
                start_ns: start + start_after_ns,
                recv_at_ns: start + c.recv_delay_us * 1000,
                recvs_posted: recvs == 0,
                expect: c.expect,
                statuses: BTreeMap::new(),
                completed: 0,
                failed: false,
                recvs_done: 0,
                error: None,
                done_bytes: 0,
                done_ns: 0,
                done_log: Vec::new(),
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
    // Each round looks only at the connections something may have happened to: all of them
    // in the first round; then those on a node an event ran (only there can a completion
    // appear), those that posted in the round before (a post may complete at once), and
    // those whose start or receive time has come. The rest would find nothing to poll and
    // nothing to post, so skipping them changes nothing, and a round costs what its events
    // touch instead of every connection's two CQs (which made 256 hosts 10 times slower
    // than 64).
    let mut timed: BinaryHeap<Reverse<(u64, usize)>> = conns
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            [(!c.recvs_posted).then_some(c.recv_at_ns), Some(c.start_ns)]
                .map(|t| t.map(|t| Reverse((t, i))))
        })
        .flatten()
        .collect();
    let mut round: Vec<usize> = Vec::new();
    let mut first = true;
    let mut marked = vec![false; conns.len()];
    let mut posted: Vec<usize> = Vec::new();
    let mut touched: Vec<NodeId> = Vec::new();
    let mut finished = vec![false; conns.len()];
    let mut unfinished = conns.len();
    // Routing belongs to building the world; the wall time is the traffic's.
    world.lock().prepare_routes();
    let wall = std::time::Instant::now();
    let mut cqes: Option<Vec<(u64, usize, String)>> = opts.packets.then(Vec::new);
    // Each successful message, for the results; and the time series, if asked for.
    let mut done_msgs: Vec<super::flows::Done> = Vec::new();
    let sample_us = opts
        .sample_us
        .or(sc.workload.as_ref().map(|w| w.sample_us))
        .unwrap_or(0)
        .saturating_mul(1000);
    let mut sampler = super::flows::Sampler::new(&world.lock(), start, sample_us);
    loop {
        let now = world.now_ns();
        for i in round.drain(..) {
            marked[i] = false;
        }
        let mut mark = |i: usize, round: &mut Vec<usize>| {
            if !marked[i] {
                marked[i] = true;
                round.push(i);
            }
        };
        world.lock().take_touched(&mut touched);
        for &n in &touched {
            for &i in &by_node[n] {
                mark(i, &mut round);
            }
        }
        for i in posted.drain(..) {
            mark(i, &mut round);
        }
        while let Some(&Reverse((t, i))) = timed.peek() {
            if t > now {
                break;
            }
            timed.pop();
            mark(i, &mut round);
        }
        if first {
            first = false;
            for i in 0..conns.len() {
                mark(i, &mut round);
            }
        }
        round.sort_unstable();
        for &i in &round {
            let c = &mut conns[i];
            if !c.recvs_posted && now >= c.recv_at_ns {
                // Receive k points at the range of the k-th message that consumes one, and is
                // exactly as long (a WRITE WITH IMMEDIATE's needs no buffer).
                for (k, &msg) in c.plan.receivers.iter().enumerate() {
                    let m = c.plan.msgs[msg];
                    let sge = [c.b.mr.sge(m.off, m.size)];
                    let sg_list = if m.size == 0 || m.op == Op::WriteImm { &[][..] } else { &sge };
                    c.b.qp
                        .post_recv(&[RecvWr { wr_id: k as u64, sg_list }])
                        .map_err(|e| format!("{}: post_recv: {e}", c.name))?;
                }
                c.recvs_posted = true;
            }
            c.poll_recvs(&mut wcs, cqes.as_mut(), now)?;
            loop {
                let n = c.a.cq.poll(&mut wcs).map_err(|e| format!("{}: poll: {e}", c.name))?;
                if n == 0 {
                    break;
                }
                for wc in &wcs[..n] {
                    if let Some(log) = cqes.as_mut() {
                        log.push((now, c.nodes.0, super::cqe_label(wc)));
                    }
                    *c.statuses.entry(wc.status.as_str()).or_default() += 1;
                    c.completed += 1;
                    match c.plan.check_send_wc(wc, c.outstanding.front().copied()) {
                        Ok(()) => c.op_status[wc.wr_id as usize] = Some(wc.status),
                        Err(e) => c.fail_check(e),
                    }
                    c.outstanding.pop_front();
                    let posted = post_times[i].pop_front().unwrap_or(now);
                    if wc.status == WcStatus::Success {
                        completion_ns.push(now - posted);
                        let b = c.plan.msgs.get(wc.wr_id as usize).map_or(0, |m| m.size as u64);
                        (goodput, c.done_bytes, c.done_ns) = (goodput + b, c.done_bytes + b, now);
                        c.done_log.push((now, b));
                        let read =
                            c.plan.msgs.get(wc.wr_id as usize).is_some_and(|m| m.op == Op::Read);
                        done_msgs.push((i, b, read, posted, now));
                    } else {
                        c.failed = true;
                    }
                    last_done_ns = now;
                }
            }
            while !c.failed
                && now >= c.start_ns
                && c.next < c.plan.msgs.len()
                && c.outstanding.len() < c.window
            {
                post_op(c, c.next).map_err(|e| format!("{}: {e}", c.name))?;
                c.outstanding.push_back(c.next as u64);
                post_times[i].push_back(now);
                c.next += 1;
                if posted.last() != Some(&i) {
                    posted.push(i);
                }
            }
            let done = c.completed == c.next && (c.next == c.plan.msgs.len() || c.failed);
            if done != finished[i] {
                finished[i] = done;
                unfinished = if done { unfinished - 1 } else { unfinished + 1 };
            }
        }
        let all_done = unfinished == 0;
        if all_done {
            break;
        }
        let mut w = world.lock();
        if let Some(s) = sampler.as_mut() {
            s.sample(&w, w.now_ns());
        }
        if opts.progress && progress_ns > 0 && w.now_ns() >= next_progress {
            let done: usize = conns.iter().map(|c| c.completed).sum();
            let total: usize = conns.iter().map(|c| c.plan.msgs.len()).sum();
            eprintln!(
                "  t={:.3} ms events={} completed={done}/{total}",
                (w.now_ns() - start) as f64 / 1e6,
                w.events_run()
            );
            next_progress += progress_ns;
        }
        if let Some(d) = super::net::deadlock_failure(&w) {
            failure = Some(d);
            break;
        }
        if w.events_run() >= sc.max_events {
            failure = Some(format!("gave up after {} events", sc.max_events));
            break;
        }
        // The next thing to happen: an event, or a scheduled receive post or connection start.
        let wake = timed.peek().map(|Reverse((t, _))| *t);
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

    let wall_ns = wall.elapsed().as_nanos() as u64;

    // The data: every message that completed successfully left exactly its bytes.
    let (mut delivered, mut verified) = (Vec::new(), Vec::new());
    for (n, c) in conns.iter_mut().enumerate() {
        c.poll_recvs(&mut wcs, cqes.as_mut(), world.now_ns())?;
        before_check(n, &c.a, &c.b);
        let (mut msgs, mut bytes) = (0usize, 0u64);
        for i in 0..c.plan.msgs.len() {
            if c.op_status[i] != Some(WcStatus::Success) {
                continue;
            }
            match c.plan.verify(i, &c.a.mr, &c.b.mr) {
                Ok(b) => (msgs, bytes) = (msgs + 1, bytes + b),
                Err(e) => {
                    c.fail_check(e);
                    break;
                }
            }
        }
        if c.expect == Expect::Success && c.recvs_done != c.plan.receivers.len() {
            let e = format!(
                "{} of the {} messages that consume a receive completed one",
                c.recvs_done,
                c.plan.receivers.len()
            );
            c.fail_check(e);
        }
        delivered.push(msgs);
        verified.push(bytes);
    }

    let mut w = world.lock();
    w.finish_capture().map_err(|e| format!("pcap: {e}"))?;
    let packets = if opts.packets {
        let records = pcap_records(&memory.0.lock().unwrap_or_else(|e| e.into_inner()));
        // The capture has a record for each delivery and each drop, written as the trace
        // records them: pair them up, and write the user's pcap from them (drops only if asked).
        let mut file = match &opts.pcap {
            Some(p) => {
                let f = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
                Some(
                    nic_model::packet::PcapWriter::new(std::io::BufWriter::new(f))
                        .map_err(|e| format!("{}: {e}", p.display()))?,
                )
            }
            None => None,
        };
        let mut next = records.into_iter();
        let mut datagrams = Vec::new();
        for r in w.trace().records() {
            let drop = r.kind.name().starts_with("drop");
            if r.kind.name() != "deliver" && !drop {
                continue;
            }
            let (t, d) = next.next().unwrap_or_default();
            if let Some(f) = file.as_mut().filter(|_| !drop || opts.pcap_drops) {
                f.write_datagram(t, &d).map_err(|e| format!("pcap: {e}"))?;
            }
            datagrams.push(d);
        }
        if let (Some(f), Some(p)) = (file, &opts.pcap) {
            f.into_inner()
                .and_then(|mut b| std::io::Write::flush(&mut b))
                .map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Some(RunPackets {
            nodes: w.nodes().iter().map(|n| (n.name.clone(), n.nic.is_none())).collect(),
            start_ns: start,
            trace: w.trace().records().to_vec(),
            datagrams,
            completions: cqes.take().unwrap_or_default(),
        })
    } else {
        None
    };
    if let Some(p) = &opts.trace {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        );
        w.trace().write_text(&mut f).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let mut connections = Vec::new();
    let shared = super::net::shared_goodputs(conns.iter().map(|c| (c.start_ns, &c.done_log[..])));
    for (n, c) in conns.iter().enumerate() {
        let total = c.plan.msgs.len();
        let ok = c.statuses.get("success").copied().unwrap_or(0) as usize == total;
        let as_expected = c.error.is_none()
            && match c.expect {
                Expect::Success => ok,
                Expect::Error => !ok && c.completed == c.next,
            };
        connections.push(ConnReport {
            name: c.name.clone(),
            posted: c.next,
            total,
            delivered: delivered[n],
            verified_bytes: verified[n],
            statuses: c.statuses.clone(),
            check_failure: c.error.clone(),
            as_expected,
            goodput_gbps: match c.done_ns.saturating_sub(c.start_ns) {
                0 => 0.0,
                ns => c.done_bytes as f64 * 8.0 / ns as f64,
            },
            shared_goodput_gbps: shared[n],
        });
    }
    completion_ns.sort_unstable();
    let links = w.total_stats();
    let mut r = Report {
        name: sc.name.clone(),
        seed,
        trace_hash: w.trace().hash(),
        trace_records: w.trace().len(),
        elapsed_ns: last_done_ns - start,
        events: w.events_run(),
        goodput_bytes: goodput,
        messages_delivered: delivered.iter().sum::<usize>() as u64,
        verified_bytes: verified.iter().sum(),
        packets_sent: 0,
        packets_received: 0,
        retransmits: 0,
        rnr_naks: 0,
        seq_naks: 0,
        timeouts: 0,
        rx_bad_icrc: 0,
        rx_malformed: 0,
        faults: links.fault_kinds().to_vec(),
        completion_ns,
        passed: false,
        failure: failure.clone(),
        connections,
        hops: links.delivered,
        wall_ns,
        packets,
        net: super::net::report(sc, &w),
        results: super::flows::results(
            &w,
            start,
            &conns.iter().map(|c| (c.name.clone(), c.nodes.0, c.nodes.1)).collect::<Vec<_>>(),
            &done_msgs,
            sampler,
        ),
    };
    for n in 0..w.nodes().len() {
        if let Some(nic) = w.nic(n) {
            let s = nic.stats();
            r.retransmits += s.retransmits;
            r.rnr_naks += s.rnr_naks_sent;
            r.seq_naks += s.seq_naks_sent;
            r.timeouts += s.timeouts;
            r.packets_sent += s.tx_packets;
            r.packets_received += s.rx_packets;
            r.rx_bad_icrc += s.rx_bad_icrc;
            // The engine counts a bad ICRC as malformed too; the report keeps them apart.
            r.rx_malformed += s.rx_malformed.saturating_sub(s.rx_bad_icrc);
        }
    }
    r.faults.push(("no-route", w.no_route_drops()));
    r.passed = failure.is_none() && r.connections.iter().all(|c| c.as_expected);
    if r.passed {
        if let Some(why) = r.outside(&sc.expect) {
            r.passed = false;
            r.failure = Some(why);
        }
    }
    super::net::settle_expected_deadlock(sc, &mut r);
    if r.failure.is_none() && !r.passed {
        let bad: Vec<String> = r
            .connections
            .iter()
            .filter(|c| !c.as_expected)
            .map(|c| match &c.check_failure {
                Some(e) => format!("{}: {e}", c.name),
                None => c.name.clone(),
            })
            .collect();
        r.failure = Some(format!("not as expected: {}", bad.join("; ")));
    }
    Ok(r)
}

/// Post message `i` between its ranges of the two MRs (see `check.rs`).
fn post_op(c: &Conn, i: usize) -> verbs_api::Result<()> {
    let (a, b, m) = (&c.a, &c.b, c.plan.msgs[i]);
    let sge = [a.mr.sge(m.off, m.size)];
    let remote_addr = b.mr.addr() + m.off as u64;
    let rdma = RdmaTarget { remote_addr, rkey: b.mr.rkey() };
    let (_, compare_add, swap) = c.plan.atomic_operands(i);
    let atomic = AtomicTarget { remote_addr, rkey: b.mr.rkey(), compare_add, swap };
    let wr_id = i as u64;
    a.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &sge,
        opcode: m.op.wr_opcode(),
        send_flags: SendFlags::SIGNALED,
        imm_data: wr_id as u32,
        rdma,
        atomic,
        ..Default::default()
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of message once or twice, on a clean link.
    const EVERY_OP: &str = r#"
        name = "every-op"
        [[node]]
        name = "a"
        [[node]]
        name = "b"
        [[link]]
        from = "a"
        to = "b"
        [[connection]]
        from = "a"
        to = "b"
        window = 4
        ops = [
          { op = "write", size = 3000, count = 2 }, { op = "send", size = 100, count = 2 },
          { op = "send_imm", size = 0 }, { op = "write_imm", size = 64 },
          { op = "read", size = 5000 }, { op = "cas" }, { op = "fadd", count = 2 },
        ]
    "#;

    fn run_damaged(damage: &mut dyn FnMut(&Endpoint, &Endpoint)) -> Report {
        let sc = Scenario::from_toml(EVERY_OP).unwrap();
        run_inner(&sc, &RunOptions::default(), &mut |_, a, b| damage(a, b)).unwrap()
    }

    /// Message `i`'s offset in this scenario's MRs.
    fn off(i: usize) -> usize {
        let sizes: [usize; 10] = [3000, 3000, 100, 100, 0, 64, 5000, 8, 8, 8];
        sizes[..i].iter().map(|&s| s.max(8).next_multiple_of(8)).sum()
    }

    #[test]
    fn an_intact_run_verifies_every_message() {
        let r = run_damaged(&mut |_, _| {});
        assert!(r.passed, "{:?}", r.failure);
        assert_eq!(r.messages_delivered, 10);
        assert_eq!(r.verified_bytes, 3000 * 2 + 100 * 2 + 64 + 5000 + 16 * 3);
    }

    #[test]
    fn a_damaged_byte_fails_the_run_naming_connection_message_and_byte() {
        // The second WRITE's byte 5 at the target.
        let r = run_damaged(&mut |_, b| {
            let v = b.mr.read_vec(off(1) + 5, 1).unwrap()[0];
            b.mr.write(off(1) + 5, &[!v]).unwrap();
        });
        assert!(!r.passed);
        let why = r.failure.unwrap();
        assert!(
            why.contains("a -> b: message 1 (write of 3000 bytes): byte 5 of the target"),
            "{why}"
        );
        assert_eq!(r.connections[0].delivered, 1, "the check stops at the first damaged message");

        // A SEND's bytes in its receive buffer, a READ's result at the initiator, an atomic's
        // word at the target.
        let cases: [(usize, bool, &str); 3] = [
            (3, false, "message 3 (send of 100 bytes): byte 0 of the target"),
            (6, true, "message 6 (read of 5000 bytes): byte 0 of the initiator's READ buffer"),
            (8, false, "message 8 (fadd of 8 bytes): byte 0 of the target word"),
        ];
        for (i, initiator, want) in cases {
            let r = run_damaged(&mut |a, b| {
                let mr = if initiator { &a.mr } else { &b.mr };
                let v = mr.read_vec(off(i), 1).unwrap()[0];
                mr.write(off(i), &[v ^ 1]).unwrap();
            });
            let why = r.failure.unwrap();
            assert!(why.contains(want), "{why}");
        }
    }

    /// The `--stats` line gives the traffic's packets and events, its wall time, both rates
    /// and the wall time per event, from the report's counts (here with a wall time of
    /// exactly 2 ms, so the rates are known).
    #[test]
    fn the_stats_line_gives_rates_and_the_time_per_event() {
        let mut r = run_damaged(&mut |_, _| {});
        assert!(r.hops > 0 && r.events >= r.hops, "{} hops, {} events", r.hops, r.events);
        r.wall_ns = 2_000_000;
        let mut out = Vec::new();
        r.write_stats(&mut out).unwrap();
        let want = format!(
            "  stats: {} simulated packets (datagrams over one link), {} events, in 2.000 ms of \
             wall time: {:.2} M packets/s, {:.2} M events/s, {} ns per event\n",
            r.hops,
            r.events,
            r.hops as f64 / 2e3,
            r.events as f64 / 2e3,
            2_000_000 / r.events
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
