//! The `sim` backend: every NIC node of a [`SimWorld`] as a verbs device (`sim:<node>`), so
//! the same program runs on `soft` and in the simulator. Each handle holds the shared world and
//! its node; a verb locks the world, calls the engine with the virtual `now`, and puts what the
//! engine sent on the simulated wire. Polling a CQ does not advance time; blocking calls
//! (`get_cq_event`, `get_async_event`) run the world until their event or their timeout, in
//! virtual time.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nic_model::engine::mr::MrMemory;
use nic_model::engine::{Nic, Now};
use nic_model::verbs::{EngineContext, EngineCq, Host};
use verbs_api::provider::{CompChannelOps, ContextOps, CqOps, Provider};
use verbs_api::{
    AsyncElement, AsyncEvent, CompChannel, CompletionQueue, Context, DeviceInfo, Errno, Error,
    QpCap, QpType, Result, WorkCompletion,
};

use super::{NodeId, SimWorld, World};

/// How many events a blocking call without a timeout may run before it gives up (a bound, so a
/// program waiting for an event that never comes fails instead of spinning forever).
const MAX_BLOCKING_EVENTS: u64 = 50_000_000;

/// The device name of a node.
pub(crate) fn device_name(w: &World, node: NodeId) -> String {
    format!("sim:{}", w.nodes[node].name)
}

impl SimWorld {
    /// Open node `node` as a verbs device (`ibv_open_device` on `sim:<name>`).
    pub fn context(&self, node: NodeId) -> Result<Context> {
        let w = self.lock();
        match w.nodes.get(node) {
            Some(n) if !n.is_switch() => {}
            Some(_) => return Err(Error::new(Errno::NoDev, format!("node {node} is a switch"))),
            None => return Err(Error::new(Errno::NoDev, format!("no node {node} in the world"))),
        }
        drop(w);
        let host = Arc::new(SimNode { world: self.clone(), node });
        Ok(Context::from_ops(Arc::new(EngineContext::new(host))))
    }

    /// Open a node by device name (`sim:node0`).
    pub fn open(&self, name: &str) -> Result<Context> {
        let found = {
            let w = self.lock();
            (0..w.nodes.len()).find(|&i| !w.nodes[i].is_switch() && device_name(&w, i) == name)
        };
        match found {
            Some(n) => self.context(n),
            None => Err(Error::new(Errno::NoDev, format!("no sim device named {name:?}"))),
        }
    }

    /// The `sim` provider over this world, to register with `verbs_api::register_provider`.
    pub fn provider(&self) -> SimProvider {
        SimProvider { world: self.clone() }
    }

    /// Run the world until `ready` finds something, or `timeout` of virtual time passes
    /// (`None`: until the world is idle or a large event bound).
    fn block_on<T>(
        &self,
        timeout: Option<Duration>,
        what: &str,
        mut ready: impl FnMut(&mut World) -> Option<T>,
    ) -> Result<T> {
        let mut w = self.lock();
        let deadline = timeout.map(|t| w.now_ns().saturating_add(t.as_nanos() as u64));
        for _ in 0..MAX_BLOCKING_EVENTS {
            if let Some(v) = ready(&mut w) {
                return Ok(v);
            }
            let due = w.next_event_ns().filter(|&t| deadline.is_none_or(|d| t <= d));
            if due.is_none() {
                if let Some(d) = deadline {
                    w.run_until(d);
                }
                return ready(&mut w).ok_or_else(|| {
                    Error::new(Errno::TimedOut, format!("{what}: no event within {timeout:?} of virtual time (the world is idle or past the deadline)"))
                });
            }
            w.step();
        }
        Err(Error::new(
            Errno::TimedOut,
            format!("{what}: no event within {MAX_BLOCKING_EVENTS} events"),
        ))
    }
}

/// The `sim` provider: the NIC nodes of one world.
#[derive(Clone)]
pub struct SimProvider {
    world: SimWorld,
}

impl Provider for SimProvider {
    fn name(&self) -> &'static str {
        "sim"
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let w = self.world.lock();
        Ok((0..w.nodes.len())
            .filter(|&i| !w.nodes[i].is_switch())
            .map(|i| DeviceInfo {
                name: device_name(&w, i),
                node_guid: w.nic(i).map_or(0, |n| n.config().node_guid),
                provider: "sim",
            })
            .collect())
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>> {
        Ok(self.world.open(name)?.ops().clone())
    }
}

/// The world-wide id of a node's CQ or SRQ ([`CqOps::id`], [`SrqOps::id`], and the element
/// of their async events).
fn handle_id(node: NodeId, engine_id: u32) -> u64 {
    (node as u64) << 32 | engine_id as u64
}

// ---------------- the node as the host of its verbs objects ----------------

/// A NIC node of a world, as the host of the engine's verbs objects ([`nic_model::verbs`]).
/// Verbs never advance virtual time, except the blocking ones, which run the world.
pub struct SimNode {
    world: SimWorld,
    node: NodeId,
}

type SimCq = EngineCq<SimNode>;

impl Host for SimNode {
    fn device_name(&self) -> String {
        device_name(&self.world.lock(), self.node)
    }
    fn same_device(&self, other: &SimNode) -> bool {
        Arc::ptr_eq(self.world.arc(), other.world.arc()) && self.node == other.node
    }
    fn with_nic<R>(&self, f: impl FnOnce(&mut Nic) -> R) -> R {
        self.world.lock().with_nic(self.node, |n, _| f(n))
    }
    fn with_nic_now<R>(&self, f: impl FnOnce(&mut Nic, &mut Now<'_>) -> R) -> R {
        // What the verb queued goes onto the node's links as the world lock is released.
        self.world.lock().with_nic(self.node, |n, now| f(n, &mut Now::At(now)))
    }
    fn poll_cq(&self, cq: u32, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.with_nic(|n| n.poll_cq(cq, wc))
    }
    fn handle_id(&self, engine_id: u32) -> u64 {
        handle_id(self.node, engine_id)
    }
    fn create_comp_channel(self: &Arc<Self>) -> Result<Arc<dyn CompChannelOps>> {
        let id = {
            let mut w = self.world.lock();
            w.channels.push(Default::default());
            w.channels.len() - 1
        };
        Ok(Arc::new(SimChannel { world: self.world.clone(), id, cqs: Mutex::new(BTreeMap::new()) }))
    }
    fn bind_cq(&self, cq_id: u32, cq: Weak<SimCq>, channel: &CompChannel) -> Result<()> {
        let ch = channel
            .ops()
            .as_any()
            .downcast_ref::<SimChannel>()
            .filter(|c| Arc::ptr_eq(c.world.arc(), self.world.arc()))
            .ok_or_else(|| {
                Error::inval("the completion channel belongs to another world or backend")
            })?;
        self.world.lock().cq_channel.insert((self.node, cq_id), ch.id);
        ch.cqs.lock().unwrap_or_else(|e| e.into_inner()).insert((self.node, cq_id), cq);
        Ok(())
    }
    fn unbind_cq(&self, cq_id: u32) {
        self.world.lock().cq_channel.remove(&(self.node, cq_id));
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        let node = self.node;
        let ev = self
            .world
            .block_on(timeout, "ibv_get_async_event", |w| w.nodes[node].async_events.pop_front())?;
        // The engine names CQs and SRQs by its own ids; programs know them by their handles'.
        let element = match ev.element {
            AsyncElement::Cq(id) => AsyncElement::Cq(handle_id(node, id as u32)),
            AsyncElement::Srq(id) => AsyncElement::Srq(handle_id(node, id as u32)),
            other => other,
        };
        Ok(AsyncEvent { element, ..ev })
    }
    fn owned_mr_iova(&self, memory: &MrMemory) -> u64 {
        // Deterministic addresses: the bytes on the simulated wire follow from the seed.
        self.world.lock().take_iova(self.node, memory.len())
    }
}

// ---------------- completion channel ----------------

struct SimChannel {
    world: SimWorld,
    id: usize,
    cqs: Mutex<BTreeMap<(NodeId, u32), Weak<SimCq>>>,
}

impl CompChannelOps for SimChannel {
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        let id = self.id;
        let cqs = &self.cqs;
        self.world.block_on(timeout, "ibv_get_cq_event", |w| {
            while let Some(key) = w.channels[id].pop_front() {
                let cq =
                    cqs.lock().unwrap_or_else(|e| e.into_inner()).get(&key).and_then(Weak::upgrade);
                if let Some(cq) = cq {
                    return Some(cq as Arc<dyn CqOps>);
                }
            }
            None
        })
    }
    fn ack_cq_events(&self, _cq: &CompletionQueue, _nevents: u32) {}
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Connect an RC QP on node `a` to one on node `b` the way verbs programs do (INIT, RTR, RTS
/// with [`crate::conn`]): each side gets a PD, a CQ of `cq_depth`, a QP with `cap` and an MR of
/// `mr_len` bytes. The first PSNs are `psn_a` and `psn_b`.
#[allow(clippy::too_many_arguments)]
pub fn connect_rc(
    world: &SimWorld,
    a: NodeId,
    b: NodeId,
    cap: QpCap,
    cq_depth: u32,
    mr_len: usize,
    opts: &crate::conn::ConnOpts,
    (psn_a, psn_b): (u32, u32),
) -> Result<(crate::conn::Endpoint, crate::conn::Endpoint)> {
    use crate::conn::{connect, Endpoint};
    let ea = Endpoint::new(&world.context(a)?, QpType::Rc, cap, cq_depth, mr_len)?;
    let eb = Endpoint::new(&world.context(b)?, QpType::Rc, cap, cq_depth, mr_len)?;
    let (ia, ib) = (ea.info(psn_a)?, eb.info(psn_b)?);
    connect(&ea.qp, psn_a, &ib, opts)?;
    connect(&eb.qp, psn_b, &ia, opts)?;
    Ok((ea, eb))
}
