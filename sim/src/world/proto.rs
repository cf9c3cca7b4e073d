//! Writing a protocol on the simulator: a run loop that polls several CQs while it advances
//! virtual time ([`RunLoop`]), the protocol's own timers in virtual time, and connecting a
//! server whose QPs share one CQ to several clients in one call ([`connect_rc_server`]).
//!
//! A protocol on verbs is a loop: post work, wait for completions or a timeout, react. In the
//! simulator nothing happens between events, so the loop is also what advances the clock:
//! [`RunLoop::next`] runs the world event by event, polls every CQ it was given after each
//! event, and hands out one [`Next`] at a time: a completion (with the CQ it came from and
//! the virtual time it was found), a failed completion apart, a timer that fired, or why the
//! run stopped (idle, or the deadline).
//!
//! ```
//! use softverbs_sim::conn::ConnOpts;
//! use softverbs_sim::world::proto::{connect_rc_server, Next, RunLoop};
//! use softverbs_sim::world::{LinkParams, SimWorld};
//! use verbs_api::{QpCap, RecvWr, SendFlags, SendWr};
//!
//! // A server (node 0) with one QP per client (nodes 1 and 2), all on one CQ.
//! let world = SimWorld::mesh(7, 3, LinkParams::default());
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let (server, clients) =
//!     connect_rc_server(&world, 0, &[1, 2], cap, 64, 4096, &ConnOpts::default()).unwrap();
//! for (i, _) in clients.iter().enumerate() {
//!     let sge = [server.mr.sge(i * 64, 64)];
//!     server.qps[i].post_recv(&[RecvWr { wr_id: i as u64, sg_list: &sge }]).unwrap();
//! }
//! for c in &clients {
//!     let sge = [c.mr.sge(0, 16)];
//!     let wr = SendWr { wr_id: 9, sg_list: &sge, send_flags: SendFlags::SIGNALED, ..Default::default() };
//!     c.qp.post_send(&[wr]).unwrap();
//! }
//! let mut run = RunLoop::new(&world);
//! let server_cq = run.add_cq(&server.cq);
//! // The protocol's own timeout: give up 1 ms of virtual time from now.
//! let give_up = run.set_timer_after(1_000_000);
//! let mut requests = 0;
//! while requests < 2 {
//!     match run.next(u64::MAX).unwrap() {
//!         Next::Completion(c) if c.cq == server_cq => requests += 1,
//!         Next::Completion(_) => {}
//!         Next::Failed(c) => panic!("a completion failed: {:?}", c.wc),
//!         Next::Timer(_) => panic!("no request within 1 ms"),
//!         end @ (Next::Idle | Next::Deadline) => panic!("{end:?}"),
//!     }
//! }
//! assert!(run.cancel_timer(give_up));
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use verbs_api::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCap, QpType,
    QueuePair, Result, WcStatus, WorkCompletion,
};

use super::{NodeId, SimWorld};
use crate::conn::{connect, create_qp_on, ConnOpts, Endpoint};

/// Which of a [`RunLoop`]'s CQs a completion came from: the index [`RunLoop::add_cq`] gave.
pub type CqIndex = usize;

/// A timer of a [`RunLoop`], as [`RunLoop::set_timer_at`] gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u64);

/// A work completion as the run loop found it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Completion {
    /// The CQ it was polled from.
    pub cq: CqIndex,
    /// Virtual time when it was found: the time of the event that produced it (polling after
    /// every event, the loop finds each completion at the time it was queued).
    pub at_ns: u64,
    /// The work completion, every field as `ibv_poll_cq` gives it.
    pub wc: WorkCompletion,
}

/// What [`RunLoop::next`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Next {
    /// A successful completion.
    Completion(Completion),
    /// A completion whose status is not `IBV_WC_SUCCESS` (its QP is in the error state, or a
    /// flushed WR): apart, so a protocol cannot mistake it for progress.
    Failed(Completion),
    /// A timer fired, at exactly the virtual time it was set for.
    Timer(TimerId),
    /// Nothing is left to happen: no event, no timer, no completion. A protocol waiting for
    /// something now waits forever.
    Idle,
    /// The deadline came first; the clock stands at the deadline.
    Deadline,
}

/// The run loop of a protocol on the simulator: several CQs, timers in virtual time. See the
/// module documentation for an example.
///
/// Order: completions come out in virtual-time order; those found after the same event in the
/// order of the CQs' indices, then of each CQ. A timer due at time T fires after every
/// completion of the events at or before T. Timers due at the same time fire in the order
/// they were set.
pub struct RunLoop {
    world: SimWorld,
    cqs: Vec<CompletionQueue>,
    found: VecDeque<Next>,
    /// Pending timers by (time, id), and each id's time.
    timers: BTreeSet<(u64, u64)>,
    timer_at: BTreeMap<u64, u64>,
    next_timer: u64,
    buf: Vec<WorkCompletion>,
}

impl RunLoop {
    /// A run loop over `world`, with no CQ yet.
    pub fn new(world: &SimWorld) -> RunLoop {
        RunLoop {
            world: world.clone(),
            cqs: Vec::new(),
            found: VecDeque::new(),
            timers: BTreeSet::new(),
            timer_at: BTreeMap::new(),
            next_timer: 0,
            buf: vec![WorkCompletion::default(); 32],
        }
    }

    /// Poll `cq` too; the index names it in each [`Completion`].
    pub fn add_cq(&mut self, cq: &CompletionQueue) -> CqIndex {
        self.cqs.push(cq.clone());
        self.cqs.len() - 1
    }

    /// The world's virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.world.now_ns()
    }

    /// Set a timer to fire at virtual time `at_ns` (at once, if that has passed).
    pub fn set_timer_at(&mut self, at_ns: u64) -> TimerId {
        let id = self.next_timer;
        self.next_timer += 1;
        let at = at_ns.max(self.now_ns());
        self.timers.insert((at, id));
        self.timer_at.insert(id, at);
        TimerId(id)
    }

    /// Set a timer to fire `dt_ns` of virtual time from now.
    pub fn set_timer_after(&mut self, dt_ns: u64) -> TimerId {
        self.set_timer_at(self.now_ns().saturating_add(dt_ns))
    }

    /// Cancel a timer: it will not fire. False if it had fired or been cancelled already.
    pub fn cancel_timer(&mut self, timer: TimerId) -> bool {
        match self.timer_at.remove(&timer.0) {
            Some(at) => self.timers.remove(&(at, timer.0)),
            None => false,
        }
    }

    /// The virtual time `timer` will fire at, if it is still pending.
    pub fn timer_due(&self, timer: TimerId) -> Option<u64> {
        self.timer_at.get(&timer.0).copied()
    }

    /// Run the world until something for the protocol happens (a completion on one of the
    /// CQs, or a timer), or nothing is left ([`Next::Idle`]), or nothing more happens by
    /// `deadline_ns` ([`Next::Deadline`], the clock then at the deadline). Errors are the
    /// CQs' poll errors.
    pub fn next(&mut self, deadline_ns: u64) -> Result<Next> {
        loop {
            if let Some(n) = self.found.pop_front() {
                return Ok(n);
            }
            if self.poll_all()? {
                continue;
            }
            let timer = self.timers.first().copied();
            let mut w = self.world.lock();
            let now = w.now_ns();
            if let Some((at, id)) = timer.filter(|&(at, _)| at <= now) {
                self.timers.remove(&(at, id));
                self.timer_at.remove(&id);
                return Ok(Next::Timer(TimerId(id)));
            }
            // An event due at a timer's time runs first: its completions come before the timer.
            let (due, is_event) = match (w.next_event_ns(), timer.map(|t| t.0)) {
                (None, None) => return Ok(Next::Idle),
                (Some(e), Some(t)) if t < e => (t, false),
                (Some(e), _) => (e, true),
                (None, Some(t)) => (t, false),
            };
            if due > deadline_ns {
                w.run_until(deadline_ns);
                return Ok(Next::Deadline);
            }
            if is_event {
                w.step();
            } else {
                w.run_until(due);
            }
        }
    }

    /// Poll every CQ once, in index order, into `found`; true if anything was found.
    fn poll_all(&mut self) -> Result<bool> {
        let at_ns = self.now_ns();
        let mut any = false;
        for (cq, q) in self.cqs.iter().enumerate() {
            loop {
                let n = q.poll(&mut self.buf)?;
                for &wc in &self.buf[..n] {
                    let c = Completion { cq, at_ns, wc };
                    self.found.push_back(if wc.status == WcStatus::Success {
                        Next::Completion(c)
                    } else {
                        Next::Failed(c)
                    });
                }
                any |= n > 0;
                if n < self.buf.len() {
                    break;
                }
            }
        }
        Ok(any)
    }
}

/// A server's side of [`connect_rc_server`]: one PD, one CQ that every QP's sends and
/// receives complete into, one RC QP per client (in the clients' order) and one MR.
#[derive(Clone, Debug)]
pub struct RcServer {
    /// The open device.
    pub ctx: Context,
    /// Its PD.
    pub pd: ProtectionDomain,
    /// The CQ all the QPs complete into; a completion's `qp_num` says which QP.
    pub cq: CompletionQueue,
    /// One QP per client: `qps[i]` is connected to the `i`-th client.
    pub qps: Vec<QueuePair>,
    /// A registered buffer with every access right.
    pub mr: MemoryRegion,
}

impl RcServer {
    /// The index of the QP with number `qp_num` (as a completion's `qp_num` names it).
    pub fn qp_index(&self, qp_num: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qp_num() == qp_num)
    }
}

/// Connect a server on node `server` to one client on each of `clients` (a node may appear
/// more than once) over RC, as verbs programs do (INIT, RTR, RTS with [`crate::conn`]),
/// building every [`crate::conn::QpInfo`] from the QPs themselves. The server gets one CQ of
/// `cq_depth`, one QP with `cap` per client, and one MR of `mr_len` bytes; each client an
/// [`Endpoint`] of its own (PD, CQ of `cq_depth`, QP, MR of `mr_len`). Client `i` starts at
/// PSN `2i + 1`, the server's QP `i` at `2i + 2`.
pub fn connect_rc_server(
    world: &SimWorld,
    server: NodeId,
    clients: &[NodeId],
    cap: QpCap,
    cq_depth: u32,
    mr_len: usize,
    opts: &ConnOpts,
) -> Result<(RcServer, Vec<Endpoint>)> {
    let ctx = world.context(server)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(cq_depth, None, 0)?;
    let mr = pd.reg_mr(mr_len, AccessFlags::all())?;
    let port = crate::conn::PortAddress::of(&ctx, None)?;
    let mut qps = Vec::with_capacity(clients.len());
    let mut ends = Vec::with_capacity(clients.len());
    for (i, &node) in clients.iter().enumerate() {
        let (client_psn, server_psn) = (2 * i as u32 + 1, 2 * i as u32 + 2);
        let qp = create_qp_on(&pd, &cq, QpType::Rc, cap)?;
        let end = Endpoint::new(&world.context(node)?, QpType::Rc, cap, cq_depth, mr_len)?;
        let server_info = port.qp_info(&qp, server_psn);
        connect(&qp, server_psn, &end.info(client_psn)?, opts)?;
        connect(&end.qp, client_psn, &server_info, opts)?;
        qps.push(qp);
        ends.push(end);
    }
    Ok((RcServer { ctx, pd, cq, qps, mr }, ends))
}

#[cfg(test)]
mod tests;
