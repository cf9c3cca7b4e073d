//! A world shared between verbs handles: [`SimWorld`] puts the [`World`] behind one lock so
//! every node can be a verbs `Context` (see the backend) while the program drives the clock.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{LinkParams, NodeId, RunOutcome, World};

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
    /// poll CQs through verbs handles), or until no event is left ([`RunOutcome::Idle`]) or
    /// none is due by `deadline_ns` ([`RunOutcome::Deadline`]). For a loop over several CQs
    /// with timers, see [`super::proto::RunLoop`].
    pub fn run_until_pred(&self, mut pred: impl FnMut() -> bool, deadline_ns: u64) -> RunOutcome {
        loop {
            if pred() {
                return RunOutcome::Satisfied;
            }
            let mut w = self.lock();
            if let Some(end) = RunOutcome::stop(w.next_event_ns(), deadline_ns) {
                drop(w);
                return if pred() { RunOutcome::Satisfied } else { end };
            }
            w.step();
        }
    }

    pub(crate) fn arc(&self) -> &Arc<Mutex<World>> {
        &self.inner
    }
}
