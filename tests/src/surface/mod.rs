//! The verbs surface beyond plain RC — UC, UD and address handles, SRQs, async events, device
//! limits, `EBUSY`, CQ resize, completion channels, and RC/UC/UD side by side — as test bodies
//! written once against `verbs-api` ([`bodies`]), and the [`Backend`]s they run on: the soft
//! backend in one process, the soft backend with device B in another process over the
//! shared-memory fabric, and the simulator.
//!
//! A body gets two devices, A and B, and asks its backend only for what differs between
//! backends: how to wait for completions (real or virtual time) and whether a packet can be
//! lost on the wire.

pub mod bodies;

use std::path::Path;
use std::time::Duration;

use nic_model::soft::Soft;
use softverbs_sim::world::{LinkChange, LinkParams, SimWorld};
use verbs_api::{AsyncEvent, CompletionQueue, Context, WorkCompletion};

use crate::remote::RemoteDevice;
use crate::{FabricDir, Peer};

/// Bound on one wait for completions or an event (real time on soft, virtual time in the sim).
pub const WAIT: Duration = Duration::from_secs(10);
/// Bound on the verbs peer exiting once told to.
const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Bound on this process's devices removing their inboxes after the last handle drops.
const CLEANUP_WAIT: Duration = Duration::from_secs(2);

/// Two devices, A and B, and what a test body cannot do the same way on every backend.
pub trait Backend {
    /// Which backend, for messages.
    fn name(&self) -> &str;
    /// Device A (in the test's process).
    fn a(&self) -> &Context;
    /// Device B (in another process on [`SoftProcesses`]).
    fn b(&self) -> &Context;
    /// Waits (bounded by [`WAIT`]) until `n` completions have come out of `cq`, and returns
    /// them, oldest first; panics naming what arrived if they do not.
    fn wait(&self, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion>;
    /// Makes the wire lose the `nth` packet (0: the next) that A sends to B from now on;
    /// false if this backend's wire never loses packets.
    fn lose_a_to_b(&self, nth: u64) -> bool;
    /// Lets everything still in flight arrive, where the backend can tell (the sim runs until
    /// idle); elsewhere the bodies order their checks behind a later message instead.
    fn settle(&self) {}
}

/// The next async event of `ctx` (bounded by [`WAIT`]).
pub fn next_event(be: &dyn Backend, ctx: &Context) -> AsyncEvent {
    ctx.get_async_event(Some(WAIT))
        .unwrap_or_else(|e| panic!("[{}] no async event on {}: {e}", be.name(), ctx.device_name()))
}

/// Asserts that `cq` holds no completion now.
pub fn assert_no_completion(be: &dyn Backend, cq: &CompletionQueue, why: &str) {
    let mut wc = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut wc).unwrap_or_else(|e| panic!("[{}] poll: {e}", be.name()));
    assert_eq!(n, 0, "[{}] {why}, yet the CQ holds {:?}", be.name(), &wc[..n]);
}

// ---------------- in real time: soft in one process, or a real NIC ----------------

/// Two contexts whose devices make progress by themselves in real time, so waiting is polling
/// and nothing is lost: two soft devices over an in-process loopback wire
/// ([`RealTimePair::soft_loopback`]), or two contexts of one real NIC ([`RealTimePair::of`]).
pub struct RealTimePair {
    name: &'static str,
    a: Context,
    b: Context,
    /// The loopback provider the soft devices belong to, kept alive with them.
    _soft: Option<Soft>,
}

impl RealTimePair {
    /// `softverbs0` and `softverbs1` of a fresh loopback fabric.
    pub fn soft_loopback() -> RealTimePair {
        let soft = Soft::loopback();
        let a = soft.open("softverbs0").expect("opening softverbs0");
        let b = soft.open("softverbs1").expect("opening softverbs1");
        RealTimePair { name: "soft loopback", a, b, _soft: Some(soft) }
    }

    /// Two contexts opened elsewhere (e.g. of a real device), reported as `name`.
    pub fn of(name: &'static str, a: Context, b: Context) -> RealTimePair {
        RealTimePair { name, a, b, _soft: None }
    }
}

fn poll_wait(name: &str, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    cq.poll_n(n, WAIT).unwrap_or_else(|e| panic!("[{name}] waiting for {n} completions: {e}"))
}

impl Backend for RealTimePair {
    fn name(&self) -> &str {
        self.name
    }
    fn a(&self) -> &Context {
        &self.a
    }
    fn b(&self) -> &Context {
        &self.b
    }
    fn wait(&self, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
        poll_wait(self.name(), cq, n)
    }
    fn lose_a_to_b(&self, _nth: u64) -> bool {
        false
    }
}

// ---------------- soft, two processes ----------------

/// The soft backend over a shared-memory fabric of its own: device A in this process, device
/// B in an `sv-peer verbs` child that runs every verb the body calls on B. The child is killed
/// and the fabric directory removed if the test panics; [`SoftProcesses::finish`] checks that
/// the child exited cleanly and that no segment is left.
pub struct SoftProcesses {
    // Dropped in this order: A's device, the child, then the directory.
    a: Option<Context>,
    soft: Option<Soft>,
    b: Option<Context>,
    remote: Option<RemoteDevice>,
    dir: FabricDir,
}

impl SoftProcesses {
    /// Starts `peer_exe` (the `sv-peer` binary) in `verbs` mode on a fresh fabric directory
    /// named after `test`, and opens `softverbs0` here.
    pub fn new(peer_exe: &Path, test: &str) -> SoftProcesses {
        let dir = FabricDir::new(test);
        let args = [
            "verbs".to_string(),
            dir.path().display().to_string(),
            "--deadline-secs".to_string(),
            "600".to_string(),
        ];
        let peer = Peer::spawn(&format!("{test}-peer"), peer_exe, &args);
        let remote = RemoteDevice::attach(peer).unwrap_or_else(|e| panic!("[{test}] {e}"));
        let b = remote.context().clone();
        let soft = Soft::shared_memory(Some(dir.path())).expect("opening the test's fabric");
        let a = soft.open("softverbs0").expect("opening softverbs0");
        println!("[{test}] device B is {} in pid {}", b.device_name(), remote.pid());
        SoftProcesses { a: Some(a), soft: Some(soft), b: Some(b), remote: Some(remote), dir }
    }

    /// The end of a passing test: the child exits 0 when told, and no segment file is left.
    pub fn finish(mut self) {
        drop(self.a.take());
        drop(self.soft.take());
        drop(self.b.take());
        if let Some(r) = self.remote.take() {
            r.close(EXIT_WAIT);
        }
        self.dir.assert_empty_within(CLEANUP_WAIT);
    }
}

impl Backend for SoftProcesses {
    fn name(&self) -> &str {
        "soft between processes"
    }
    fn a(&self) -> &Context {
        self.a.as_ref().expect("A is open until finish")
    }
    fn b(&self) -> &Context {
        self.b.as_ref().expect("B is open until finish")
    }
    fn wait(&self, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
        poll_wait(self.name(), cq, n)
    }
    fn lose_a_to_b(&self, _nth: u64) -> bool {
        false
    }
}

// ---------------- the simulator ----------------

/// Two nodes of a simulated world joined by a duplex link; time is virtual and passes only
/// while the body waits.
pub struct SimPair {
    world: SimWorld,
    a: Context,
    b: Context,
}

impl SimPair {
    /// `sim:node0` and `sim:node1` of a world seeded with `seed`, with default links.
    pub fn new(seed: u64) -> SimPair {
        let world = SimWorld::mesh(seed, 2, LinkParams::default());
        let a = world.context(0).expect("opening sim:node0");
        let b = world.context(1).expect("opening sim:node1");
        SimPair { world, a, b }
    }

    /// The world, for assertions about what happened on the wire.
    pub fn world(&self) -> &SimWorld {
        &self.world
    }
}

impl Backend for SimPair {
    fn name(&self) -> &str {
        "sim"
    }
    fn a(&self) -> &Context {
        &self.a
    }
    fn b(&self) -> &Context {
        &self.b
    }
    fn wait(&self, cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
        let mut got = Vec::with_capacity(n);
        let mut buf = [WorkCompletion::default(); 16];
        let mut error = None;
        let deadline = self.world.now_ns() + WAIT.as_nanos() as u64;
        let done = self.world.run_until_pred(
            || {
                let want = (n - got.len()).min(buf.len());
                match cq.poll(&mut buf[..want]) {
                    Ok(k) => got.extend_from_slice(&buf[..k]),
                    Err(e) => error = Some(e),
                }
                error.is_some() || got.len() >= n
            },
            deadline,
        );
        if let Some(e) = error {
            panic!("[sim] waiting for {n} completions: {e}; got {got:?}");
        }
        assert!(
            done.is_satisfied(),
            "[sim] {} of {n} completions within {WAIT:?} of virtual time ({done:?}): {got:?}",
            got.len()
        );
        got
    }
    fn settle(&self) {
        assert!(self.world.run_until_idle(10_000_000), "[sim] the world did not go idle");
    }
    fn lose_a_to_b(&self, nth: u64) -> bool {
        let mut w = self.world.lock();
        let link = w.link_between(0, 1).expect("the mesh links node0 to node1");
        let next = w.links()[link].stats.offered;
        w.change_link(link, LinkChange::DropNth(next + nth));
        true
    }
}
