//! The `sim` backend: every NIC node of a [`SimWorld`] as a verbs device (`sim:<node>`), so
//! the same program runs on `soft` and in the simulator. Each handle holds the shared world and
//! its node; a verb locks the world, calls the engine with the virtual `now`, and puts what the
//! engine sent on the simulated wire. Polling a CQ does not advance time; blocking calls
//! (`get_cq_event`, `get_async_event`) run the world until their event or their timeout, in
//! virtual time.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nic_model::engine::mr::MrMemory;
use nic_model::engine::Nic;
use verbs_api::provider::{
    AhOps, CompChannelOps, ContextOps, CqOps, MrOps, PdOps, Provider, QpOps, SrqOps,
};
use verbs_api::{
    AccessFlags, AhAttr, AsyncElement, AsyncEvent, CompChannel, CompletionQueue, Context,
    DeviceAttr, DeviceInfo, Errno, Error, Gid, PortAttr, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpType, RecvWr, Result, SendWr, SrqAttr, SrqAttrMask, SrqInitAttr, WorkCompletion,
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
        Ok(Context::from_ops(Arc::new(SimContext { world: self.clone(), node })))
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

    fn nic_call<R>(&self, node: NodeId, f: impl FnOnce(&mut Nic, u64) -> R) -> R {
        self.lock().with_nic(node, f)
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

fn foreign(what: &str) -> Error {
    Error::inval(format!("{what} belongs to another device or backend"))
}

// ---------------- context ----------------

struct SimContext {
    world: SimWorld,
    node: NodeId,
}

impl SimContext {
    fn nic<R>(&self, f: impl FnOnce(&mut Nic, u64) -> R) -> R {
        self.world.nic_call(self.node, f)
    }
}

impl ContextOps for SimContext {
    fn device_name(&self) -> String {
        device_name(&self.world.lock(), self.node)
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.nic(|n, _| n.device_attr()))
    }
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        if port_num != 1 {
            return Err(Error::inval(format!(
                "ibv_query_port: port {port_num} does not exist (the device has port 1)"
            )));
        }
        Ok(self.nic(|n, _| n.port_attr()))
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        if port_num != 1 || index != 0 {
            return Err(Error::inval(format!(
                "ibv_query_gid: port {port_num} index {index} does not exist (port 1 has GID index 0)"
            )));
        }
        Ok(self.nic(|n, _| n.config().gid()))
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let id = self.nic(|n, _| n.alloc_pd())?;
        Ok(Arc::new(SimPd {
            world: self.world.clone(),
            node: self.node,
            id,
            gone: AtomicBool::new(false),
        }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        let id = {
            let mut w = self.world.lock();
            w.channels.push(Default::default());
            w.channels.len() - 1
        };
        Ok(Arc::new(SimChannel { world: self.world.clone(), id, cqs: Mutex::new(BTreeMap::new()) }))
    }
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        _comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let channel = match channel {
            None => None,
            Some(c) => Some(
                c.ops()
                    .as_any()
                    .downcast_ref::<SimChannel>()
                    .filter(|c| Arc::ptr_eq(c.world.arc(), self.world.arc()))
                    .ok_or_else(|| foreign("the completion channel"))?,
            ),
        };
        let id = self.nic(|n, _| n.create_cq(cqe))?;
        let cq = Arc::new(SimCq {
            world: self.world.clone(),
            node: self.node,
            id,
            cqe: AtomicU32::new(cqe),
            gone: AtomicBool::new(false),
        });
        if let Some(ch) = channel {
            self.world.lock().cq_channel.insert((self.node, id), ch.id);
            ch.cqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((self.node, id), Arc::downgrade(&cq));
        }
        Ok(cq)
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
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- PD and MR ----------------

struct SimPd {
    world: SimWorld,
    node: NodeId,
    id: u32,
    gone: AtomicBool,
}

impl SimPd {
    fn nic<R>(&self, f: impl FnOnce(&mut Nic, u64) -> R) -> R {
        self.world.nic_call(self.node, f)
    }

    fn register(&self, memory: Arc<MrMemory>, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let key = self.nic(|n, _| n.reg_mr(self.id, memory.clone(), access))?;
        Ok(Arc::new(SimMr {
            world: self.world.clone(),
            node: self.node,
            key,
            memory,
            access,
            gone: AtomicBool::new(false),
        }))
    }

    fn same_device(&self, world: &SimWorld, node: NodeId) -> bool {
        Arc::ptr_eq(world.arc(), self.world.arc()) && node == self.node
    }
}

impl PdOps for SimPd {
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        self.register(MrMemory::allocate(len)?, access)
    }
    unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        if addr.is_null() && len > 0 {
            return Err(Error::inval("ibv_reg_mr: addr is NULL"));
        }
        // SAFETY: the caller guarantees the memory outlives the MR (PdOps::reg_mr_raw contract).
        let memory = unsafe { MrMemory::borrow_raw(addr, len) };
        self.register(memory, access)
    }
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        let cq_of = |cq: &CompletionQueue, what: &str| -> Result<u32> {
            let c = cq.ops().as_any().downcast_ref::<SimCq>().ok_or_else(|| foreign(what))?;
            if !self.same_device(&c.world, c.node) {
                return Err(foreign(what));
            }
            Ok(c.id)
        };
        let send_cq = cq_of(&init.send_cq, "ibv_create_qp: send_cq")?;
        let recv_cq = cq_of(&init.recv_cq, "ibv_create_qp: recv_cq")?;
        let srq = match &init.srq {
            None => None,
            Some(q) => {
                let s = q
                    .ops()
                    .as_any()
                    .downcast_ref::<SimSrq>()
                    .filter(|s| self.same_device(&s.world, s.node))
                    .ok_or_else(|| foreign("ibv_create_qp: srq"))?;
                Some(s.id)
            }
        };
        let (qpn, cap) = self.nic(|n, _| -> Result<(u32, QpCap)> {
            let (qpn, cap) =
                n.create_qp(self.id, init.qp_type, send_cq, recv_cq, init.cap, init.sq_sig_all)?;
            if let Some(id) = srq {
                if let Err(e) = n.attach_srq(qpn, id) {
                    let _ = n.destroy_qp(qpn);
                    return Err(e);
                }
            }
            Ok((qpn, cap))
        })?;
        Ok(Arc::new(SimQp {
            world: self.world.clone(),
            node: self.node,
            qpn,
            qp_type: init.qp_type,
            cap,
            _cqs: (init.send_cq.clone(), init.recv_cq.clone()),
            gone: AtomicBool::new(false),
        }))
    }
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let id =
            self.nic(|n, _| n.create_srq(self.id, init.max_wr, init.max_sge, init.srq_limit))?;
        Ok(Arc::new(SimSrq {
            world: self.world.clone(),
            node: self.node,
            id,
            gone: AtomicBool::new(false),
        }))
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        nic_model::engine::check_ah(attr)?;
        Ok(Arc::new(SimAh { attr: *attr }))
    }
    fn dealloc(&self) -> Result<()> {
        self.nic(|n, _| n.dealloc_pd(self.id))?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimPd {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.nic(|n, _| n.dealloc_pd(self.id));
        }
    }
}

struct SimMr {
    world: SimWorld,
    node: NodeId,
    key: u32,
    memory: Arc<MrMemory>,
    access: AccessFlags,
    gone: AtomicBool,
}

impl MrOps for SimMr {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn addr(&self) -> u64 {
        self.memory.addr()
    }
    fn len(&self) -> usize {
        self.memory.len()
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.memory.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.memory.write(offset, data)
    }
    fn dereg(&self) -> Result<()> {
        if self.gone.swap(true, Ordering::AcqRel) {
            return Err(Error::inval("ibv_dereg_mr: the MR is already deregistered"));
        }
        self.world.nic_call(self.node, |n, _| n.dereg_mr(self.key))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimMr {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.world.nic_call(self.node, |n, _| n.dereg_mr(self.key));
        }
    }
}

// ---------------- CQ and completion channel ----------------

struct SimCq {
    world: SimWorld,
    node: NodeId,
    id: u32,
    cqe: AtomicU32,
    gone: AtomicBool,
}

impl CqOps for SimCq {
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.world.nic_call(self.node, |n, _| n.poll_cq(self.id, wc))
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.req_notify_cq(self.id, solicited_only))
    }
    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.resize_cq(self.id, cqe))?;
        self.cqe.store(cqe, Ordering::Relaxed);
        Ok(())
    }
    fn destroy(&self) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.destroy_cq(self.id))?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn id(&self) -> u64 {
        handle_id(self.node, self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimCq {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.world.nic_call(self.node, |n, _| n.destroy_cq(self.id));
        }
        self.world.lock().cq_channel.remove(&(self.node, self.id));
    }
}

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

// ---------------- QP ----------------

struct SimQp {
    world: SimWorld,
    node: NodeId,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    _cqs: (CompletionQueue, CompletionQueue),
    gone: AtomicBool,
}

impl QpOps for SimQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        self.world.nic_call(self.node, |n, now| n.post_send(now, self.qpn, wrs))
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.post_recv(self.qpn, wrs))
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.world.nic_call(self.node, |n, now| n.modify_qp(now, self.qpn, attr, mask))
    }
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let (a, _) = self.world.nic_call(self.node, |n, _| n.query_qp(self.qpn))?;
        Ok((a, self.cap))
    }
    fn destroy(&self) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.destroy_qp(self.qpn))?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimQp {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.world.nic_call(self.node, |n, _| n.destroy_qp(self.qpn));
        }
    }
}

// ---------------- address handles and SRQs ----------------

struct SimAh {
    attr: AhAttr,
}

impl AhOps for SimAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct SimSrq {
    world: SimWorld,
    node: NodeId,
    id: u32,
    gone: AtomicBool,
}

impl SrqOps for SimSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.post_srq_recv(self.id, wrs))
    }
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let max_wr = mask.contains(SrqAttrMask::MAX_WR).then_some(attr.max_wr);
        let limit = mask.contains(SrqAttrMask::LIMIT).then_some(attr.srq_limit);
        self.world.nic_call(self.node, |n, _| n.modify_srq(self.id, max_wr, limit))
    }
    fn query(&self) -> Result<SrqAttr> {
        let (max_wr, max_sge, srq_limit) =
            self.world.nic_call(self.node, |n, _| n.query_srq(self.id))?;
        Ok(SrqAttr { max_wr, max_sge, srq_limit })
    }
    fn destroy(&self) -> Result<()> {
        self.world.nic_call(self.node, |n, _| n.destroy_srq(self.id))?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn id(&self) -> u64 {
        handle_id(self.node, self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimSrq {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.world.nic_call(self.node, |n, _| n.destroy_srq(self.id));
        }
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
