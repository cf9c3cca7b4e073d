//! The `soft` backend: software NICs that implement the verbs provider traits, driven in real
//! time over a wire — in-process ([`Soft::loopback`]) or shared memory between processes
//! ([`Soft::shared_memory`]).
//!
//! A [`Soft`] owns a set of device names (`softverbs0`, `softverbs1`, ...). Opening a name
//! starts that device's NIC the first time (a NIC engine, a port on the wire with a LID the
//! fabric assigns, and a NIC thread); later opens share it, as contexts of one real device do.

mod device;
mod port;

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use verbs_api::provider::{
    AhOps, CompChannelOps, ContextOps, CqOps, MrOps, PdOps, Provider, QpOps, SrqOps,
};
use verbs_api::{
    AccessFlags, AhAttr, AsyncEvent, CompChannel, CompletionQueue, DeviceAttr, DeviceInfo, Errno,
    Error, Gid, PortAttr, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpType, RecvWr, Result, SendWr,
    SrqAttr, SrqAttrMask, SrqInitAttr, WorkCompletion,
};

pub use device::{DeviceStats, Tap, TapDir, WireCounters, DEFAULT_SPIN, DEFAULT_STANDBY};
pub use port::{LoopPort, Loopback, Port, SendOutcome, ShmPort};

use crate::engine::mr::MrMemory;
use crate::engine::{Nic, NicConfig};
use crate::wire::{Fabric, InboxConfig};
use device::{CqEntry, Device};

enum WireKind {
    Loopback(Arc<Loopback>),
    Shm(Fabric),
}

/// A set of soft devices on one wire; implements [`Provider`] (`soft`).
#[derive(Clone)]
pub struct Soft {
    inner: Arc<SoftInner>,
}

struct SoftInner {
    wire: WireKind,
    names: Vec<String>,
    devices: Mutex<BTreeMap<String, Weak<Device>>>,
    config: Mutex<NicConfig>,
}

/// How many devices a [`Soft`] offers unless told otherwise (`SOFTVERBS_DEVICES`).
pub const DEFAULT_DEVICES: usize = 2;

impl Soft {
    fn with_wire(wire: WireKind) -> Soft {
        let n = std::env::var("SOFTVERBS_DEVICES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_DEVICES)
            .clamp(1, 64);
        Soft {
            inner: Arc::new(SoftInner {
                wire,
                names: (0..n).map(|i| format!("softverbs{i}")).collect(),
                devices: Mutex::new(BTreeMap::new()),
                config: Mutex::new(NicConfig::new("", 0)),
            }),
        }
    }

    /// Devices joined by an in-process wire: for programs and tests that run every NIC in one process.
    pub fn loopback() -> Soft {
        Soft::with_wire(WireKind::Loopback(Loopback::new()))
    }

    /// Devices on the shared-memory fabric in `dir` (or `SOFTVERBS_FABRIC`, or
    /// `/dev/shm/softverbs-<uid>`): processes on one machine talk RDMA through it.
    pub fn shared_memory(dir: Option<&Path>) -> Result<Soft> {
        let fabric = Fabric::open(dir).map_err(|e| Error::new(Errno::Io, e.to_string()))?;
        Ok(Soft::with_wire(WireKind::Shm(fabric)))
    }

    /// Change the NIC settings (limits, retry quirks) used by devices opened from now on.
    pub fn configure(&self, f: impl FnOnce(&mut NicConfig)) {
        f(&mut self.inner.config.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The fabric directory, for a shared-memory `Soft`.
    pub fn fabric(&self) -> Option<&Fabric> {
        match &self.inner.wire {
            WireKind::Shm(f) => Some(f),
            WireKind::Loopback(_) => None,
        }
    }

    /// The device names it offers.
    pub fn device_names(&self) -> &[String] {
        &self.inner.names
    }

    /// Open a device: `ibv_open_device` on `softverbsN`.
    pub fn open(&self, name: &str) -> Result<verbs_api::Context> {
        Ok(verbs_api::Context::from_ops(Arc::new(SoftContext { dev: self.device(name)? })))
    }

    /// Copy every datagram the named (open) device sends and receives to `tap`.
    pub fn set_tap(&self, name: &str, tap: Option<Tap>) -> Result<()> {
        self.device(name)?.set_tap(tap);
        Ok(())
    }

    /// The counters of the named (open) device: what its engine and its port did.
    pub fn stats(&self, name: &str) -> Result<DeviceStats> {
        Ok(self.device(name)?.stats())
    }

    fn device(&self, name: &str) -> Result<Arc<Device>> {
        let Some(index) = self.inner.names.iter().position(|n| n == name) else {
            return Err(Error::new(
                Errno::NoDev,
                format!("no soft device named {name:?} (devices: {})", self.inner.names.join(", ")),
            ));
        };
        let mut devices = self.inner.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.get(name).and_then(Weak::upgrade) {
            return Ok(d);
        }
        let (port, lid): (Arc<dyn Port>, u16) = match &self.inner.wire {
            WireKind::Loopback(lb) => {
                let p = lb.attach(4096);
                let lid = p.lid();
                (Arc::new(p), lid)
            }
            WireKind::Shm(fabric) => {
                let p = ShmPort::create(fabric.clone(), InboxConfig::default())
                    .map_err(|e| Error::new(Errno::Io, format!("opening {name}: {e}")))?;
                let lid = p.lid();
                (Arc::new(p), lid)
            }
        };
        let mut cfg = self.inner.config.lock().unwrap_or_else(|e| e.into_inner()).clone();
        cfg.name = name.to_string();
        cfg.lid = lid;
        cfg.node_guid = node_guid(index);
        let dev = Device::start(name.to_string(), Nic::new(cfg), port);
        devices.insert(name.to_string(), Arc::downgrade(&dev));
        Ok(dev)
    }
}

/// The node GUID of `softverbs<index>`, the same in `ibv_devices` (not opened) and
/// `ibv_query_device` (opened) and in every process, as a real NIC's GUID is: the EUI-64 of
/// the locally administered MAC address 02:00:5e:00:00:<index>.
fn node_guid(index: usize) -> u64 {
    0x0200_5eff_fe00_0000 | index as u64
}

impl Provider for Soft {
    fn name(&self) -> &'static str {
        "soft"
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .inner
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| DeviceInfo { name: n.clone(), node_guid: node_guid(i), provider: "soft" })
            .collect())
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(SoftContext { dev: self.device(name)? }))
    }
}

fn foreign(what: &str) -> Error {
    Error::inval(format!("{what} belongs to another device or backend"))
}

// ---------------- context ----------------

struct SoftContext {
    dev: Arc<Device>,
}

impl ContextOps for SoftContext {
    fn device_name(&self) -> String {
        self.dev.name.clone()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.dev.lock().device_attr())
    }
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        if port_num != 1 {
            return Err(Error::inval(format!(
                "ibv_query_port: port {port_num} does not exist (the device has port 1)"
            )));
        }
        Ok(self.dev.lock().port_attr())
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        if port_num != 1 || index != 0 {
            return Err(Error::inval(format!("ibv_query_gid: port {port_num} index {index} does not exist (port 1 has GID index 0)")));
        }
        Ok(self.dev.lock().config().gid())
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let id = self.dev.lock().alloc_pd()?;
        Ok(Arc::new(SoftPd { dev: self.dev.clone(), id, gone: AtomicBool::new(false) }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        Ok(Arc::new(SoftChannel {
            inner: Arc::new(ChannelInner::default()),
            dev: Arc::downgrade(&self.dev),
        }))
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
                    .downcast_ref::<SoftChannel>()
                    .ok_or_else(|| foreign("the completion channel"))?
                    .inner
                    .clone(),
            ),
        };
        let id = self.dev.lock().create_cq(cqe)?;
        let cq = Arc::new(SoftCq {
            dev: self.dev.clone(),
            id,
            cqe: AtomicU32::new(cqe),
            channel,
            gone: AtomicBool::new(false),
        });
        let entry = CqEntry { cq: Arc::downgrade(&cq), channel: cq.channel.clone() };
        self.dev.cqs.lock().unwrap_or_else(|e| e.into_inner()).insert(id, entry);
        Ok(cq)
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.dev.hand_over();
        pop_within(&self.dev.async_events, &self.dev.async_ready, timeout, || Ok(())).map_err(|e| {
            e.unwrap_or_else(|| {
                Error::new(Errno::TimedOut, "ibv_get_async_event: no event within the timeout")
            })
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- PD and MR ----------------

struct SoftPd {
    dev: Arc<Device>,
    id: u32,
    gone: AtomicBool,
}

impl SoftPd {
    fn register(&self, memory: Arc<MrMemory>, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let key = self.dev.lock().reg_mr(self.id, memory.clone(), access)?;
        Ok(Arc::new(SoftMr {
            dev: self.dev.clone(),
            key,
            memory,
            access,
            gone: AtomicBool::new(false),
        }))
    }
}

impl PdOps for SoftPd {
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
            let c = cq.ops().as_any().downcast_ref::<SoftCq>().ok_or_else(|| foreign(what))?;
            if !Arc::ptr_eq(&c.dev, &self.dev) {
                return Err(foreign(what));
            }
            Ok(c.id)
        };
        let send_cq = cq_of(&init.send_cq, "ibv_create_qp: send_cq")?;
        let recv_cq = cq_of(&init.recv_cq, "ibv_create_qp: recv_cq")?;
        let srq = match &init.srq {
            None => None,
            Some(q) => {
                let sq = q
                    .ops()
                    .as_any()
                    .downcast_ref::<SoftSrq>()
                    .ok_or_else(|| foreign("ibv_create_qp: srq"))?;
                if !Arc::ptr_eq(&sq.dev, &self.dev) {
                    return Err(foreign("ibv_create_qp: srq"));
                }
                Some(sq.id)
            }
        };
        let mut nic = self.dev.lock();
        let (qpn, cap) =
            nic.create_qp(self.id, init.qp_type, send_cq, recv_cq, init.cap, init.sq_sig_all)?;
        if let Some(id) = srq {
            if let Err(e) = nic.attach_srq(qpn, id) {
                let _ = nic.destroy_qp(qpn);
                return Err(e);
            }
        }
        drop(nic);
        Ok(Arc::new(SoftQp {
            dev: self.dev.clone(),
            qpn,
            qp_type: init.qp_type,
            cap,
            _cqs: (init.send_cq.clone(), init.recv_cq.clone()),
            gone: AtomicBool::new(false),
        }))
    }
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let id = self.dev.lock().create_srq(self.id, init.max_wr, init.max_sge, init.srq_limit)?;
        Ok(Arc::new(SoftSrq { dev: self.dev.clone(), id, gone: AtomicBool::new(false) }))
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        crate::engine::check_ah(attr)?;
        Ok(Arc::new(SoftAh { attr: *attr }))
    }
    fn dealloc(&self) -> Result<()> {
        self.dev.lock().dealloc_pd(self.id)?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SoftPd {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.dev.lock().dealloc_pd(self.id);
        }
    }
}

struct SoftMr {
    dev: Arc<Device>,
    key: u32,
    memory: Arc<MrMemory>,
    access: AccessFlags,
    gone: AtomicBool,
}

impl MrOps for SoftMr {
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
        self.dev.lock().dereg_mr(self.key)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.dev.lock().dereg_mr(self.key);
        }
    }
}

// ---------------- CQ and completion channel ----------------

/// A soft CQ (the backend object behind [`CompletionQueue`]).
pub(crate) struct SoftCq {
    dev: Arc<Device>,
    id: u32,
    cqe: AtomicU32,
    pub(crate) channel: Option<Arc<ChannelInner>>,
    gone: AtomicBool,
}

impl CqOps for SoftCq {
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let mut nic = self.dev.lock();
        if nic.cq_len(self.id) < wc.len() {
            // Polling is where an application lends the NIC its CPU: run the engine inline.
            self.dev.progress_inline(&mut nic);
        }
        nic.poll_cq(self.id, wc)
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.dev.lock().req_notify_cq(self.id, solicited_only)
    }
    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        self.dev.lock().resize_cq(self.id, cqe)?;
        self.cqe.store(cqe, Ordering::Relaxed);
        Ok(())
    }
    fn destroy(&self) -> Result<()> {
        self.dev.lock().destroy_cq(self.id)?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn id(&self) -> u64 {
        self.dev.handle_id(self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SoftCq {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.dev.lock().destroy_cq(self.id);
        }
        self.dev.cqs.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

/// The queue of a completion channel. It holds CQs weakly: the NIC thread queues
/// notifications without keeping a CQ (and so the device) alive.
#[derive(Default)]
pub(crate) struct ChannelInner {
    events: Mutex<VecDeque<Weak<SoftCq>>>,
    ready: Condvar,
}

impl ChannelInner {
    pub(crate) fn notify(&self, cq: Weak<SoftCq>) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push_back(cq);
        self.ready.notify_all();
    }
}

struct SoftChannel {
    inner: Arc<ChannelInner>,
    dev: Weak<Device>,
}

impl CompChannelOps for SoftChannel {
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        // The program is about to sleep: the NIC thread must run the engine meanwhile.
        if let Some(dev) = self.dev.upgrade() {
            dev.hand_over();
        }
        let alive = || match self.dev.strong_count() {
            0 => Err(Error::new(Errno::Io, "ibv_get_cq_event: the device was closed")),
            _ => Ok(()),
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let cq =
                pop_within(&self.inner.events, &self.inner.ready, left, alive).map_err(|e| {
                    e.unwrap_or_else(|| {
                        let t = timeout.unwrap_or_default();
                        Error::new(
                            Errno::TimedOut,
                            format!("ibv_get_cq_event: no completion event within {t:?}"),
                        )
                    })
                })?;
            // A notification for a CQ destroyed meanwhile has no one to go to.
            if let Some(cq) = cq.upgrade() {
                return Ok(cq);
            }
        }
    }
    fn ack_cq_events(&self, _cq: &CompletionQueue, _nevents: u32) {}
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- QP ----------------

struct SoftQp {
    dev: Arc<Device>,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    _cqs: (CompletionQueue, CompletionQueue),
    gone: AtomicBool,
}

impl QpOps for SoftQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        let now = self.dev.now();
        let mut nic = self.dev.lock();
        let r = nic.post_send(now, self.qpn, wrs);
        // A post transmits at once: the doorbell is this call.
        self.dev.progress_inline(&mut nic);
        r
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.dev.lock().post_recv(self.qpn, wrs)
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let now = self.dev.now();
        let mut nic = self.dev.lock();
        nic.modify_qp(now, self.qpn, attr, mask)?;
        self.dev.progress_inline(&mut nic);
        Ok(())
    }
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let (a, _) = self.dev.lock().query_qp(self.qpn)?;
        Ok((a, self.cap))
    }
    fn destroy(&self) -> Result<()> {
        self.dev.lock().destroy_qp(self.qpn)?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.dev.lock().destroy_qp(self.qpn);
        }
    }
}

/// Pop the oldest entry of `queue`, waiting on `ready` until one arrives or `timeout` passes
/// (`None` waits forever, in slices of 100 ms). `check` runs before each wait and may end it
/// with an error. A timeout is `Err(None)`, so each verb words its own message.
fn pop_within<T>(
    queue: &Mutex<VecDeque<T>>,
    ready: &Condvar,
    timeout: Option<Duration>,
    check: impl Fn() -> Result<()>,
) -> std::result::Result<T, Option<Error>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(item) = q.pop_front() {
            return Ok(item);
        }
        let slice = Duration::from_millis(100);
        let wait = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(None);
                }
                (d - now).min(slice)
            }
            None => slice,
        };
        check().map_err(Some)?;
        q = ready.wait_timeout(q, wait).unwrap_or_else(|e| e.into_inner()).0;
    }
}

// ---------------- address handles ----------------

struct SoftAh {
    attr: AhAttr,
}

impl AhOps for SoftAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- SRQ ----------------

struct SoftSrq {
    dev: Arc<Device>,
    id: u32,
    gone: AtomicBool,
}

impl SrqOps for SoftSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.dev.lock().post_srq_recv(self.id, wrs)
    }
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let max_wr = mask.contains(SrqAttrMask::MAX_WR).then_some(attr.max_wr);
        let limit = mask.contains(SrqAttrMask::LIMIT).then_some(attr.srq_limit);
        self.dev.lock().modify_srq(self.id, max_wr, limit)
    }
    fn query(&self) -> Result<SrqAttr> {
        let (max_wr, max_sge, srq_limit) = self.dev.lock().query_srq(self.id)?;
        Ok(SrqAttr { max_wr, max_sge, srq_limit })
    }
    fn destroy(&self) -> Result<()> {
        self.dev.lock().destroy_srq(self.id)?;
        self.gone.store(true, Ordering::Release);
        Ok(())
    }
    fn id(&self) -> u64 {
        self.dev.handle_id(self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SoftSrq {
    fn drop(&mut self) {
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.dev.lock().destroy_srq(self.id);
        }
    }
}
