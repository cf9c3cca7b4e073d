//! The `soft` backend: software NICs that implement the verbs provider traits, driven in real
//! time over a wire — in-process ([`Soft::loopback`]), shared memory between processes
//! ([`Soft::shared_memory`]), or RoCE v2 over UDP on a network interface between hosts
//! (`SOFTVERBS_NETDEV`, [`UdpPort`]).
//!
//! A [`Soft`] owns a set of device names (`softverbs0`, `softverbs1`, ...). Opening a name
//! starts that device's NIC the first time (a NIC engine, a port on the wire with a LID the
//! fabric assigns, and a NIC thread); later opens share it, as contexts of one real device do.

mod capture;
mod channel;
pub mod counters;
mod device;
mod env;
pub mod faults;
pub mod netdev;
mod port;
pub(crate) mod reach;
mod tap;
#[cfg(test)]
mod tests;
mod udp;

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use verbs_api::provider::{CompChannelOps, ContextOps, CqOps, Provider};
use verbs_api::{
    AsyncEvent, CompChannel, CompletionQueue, DeviceInfo, Errno, Error, Result, WorkCompletion,
};

pub use counters::{Backpressure, Tally};
pub use device::{AsyncWatcher, DeviceStats};
pub use env::{
    EnvConfig, DEFAULT_DEVICES, DEFAULT_SPIN, DEFAULT_STANDBY, MAX_DEVICES, PID_PLACEHOLDER,
};
pub use faults::{FaultCounters, FaultPlan};
pub use port::{LoopEgress, LoopPort, Loopback, Port, SendOutcome, ShmEgress, ShmPort};
pub use tap::{Tap, TapDir};
pub use udp::{gsi_gate_name, gsi_socket_name, zero_udp_checksums, UdpEgress, UdpPort};

use crate::engine::{Nic, NicConfig, Now};
use crate::verbs::{EngineContext, EngineCq, Host};
use crate::wire::{Fabric, InboxConfig, WireError};
use channel::ChannelInner;
use device::{Core, CqEntry, Device, Driven, Round};

/// What a set of soft devices' ports attach to.
enum Medium {
    Loopback(Arc<Loopback>),
    Shm(Fabric),
    /// RoCE v2 over UDP on the named network interface (`SOFTVERBS_NETDEV`).
    Udp(String),
}

/// A set of soft devices on one wire; implements [`Provider`] (`soft`).
#[derive(Clone)]
pub struct Soft {
    inner: Arc<SoftInner>,
}

struct SoftInner {
    medium: Medium,
    names: Vec<String>,
    devices: Mutex<BTreeMap<String, Weak<Device>>>,
    config: Mutex<NicConfig>,
    /// What the environment set ([`EnvConfig`]), or why it could not be read: then opening
    /// or listing a device fails with that error.
    env: std::result::Result<EnvConfig, Error>,
    /// The capture file of devices opened from now on and what named it (see
    /// [`Soft::capture_to`]).
    pcap: Mutex<Option<(PathBuf, String)>>,
    /// The fault plan of devices opened from now on, and its seed (see [`Soft::fault_plan`]).
    faults: Mutex<Option<(FaultPlan, u64)>>,
    /// Whether devices opened from now on take part in direct reach (see [`Soft::set_reach`]).
    reach: std::sync::atomic::AtomicBool,
}

impl Soft {
    fn with_medium(medium: Medium, env: std::result::Result<EnvConfig, Error>) -> Soft {
        let n = env.as_ref().map_or(DEFAULT_DEVICES, |e| e.devices);
        let pcap = env.as_ref().ok().and_then(|e| e.pcap.clone());
        // Checked when the environment was read: it parses.
        let reach = env.as_ref().is_ok_and(|e| e.reach);
        let faults = env.as_ref().ok().and_then(|e| e.faults.as_deref()).and_then(|t| {
            let plan = FaultPlan::parse(t).ok()?;
            let seed = plan.seed().unwrap_or_else(|| fresh_entropy() & 0xffff_ffff);
            Some((plan, seed))
        });
        Soft {
            inner: Arc::new(SoftInner {
                medium,
                names: (0..n).map(|i| format!("softverbs{i}")).collect(),
                devices: Mutex::new(BTreeMap::new()),
                config: Mutex::new(NicConfig::new("", 0)),
                env,
                pcap: Mutex::new(pcap.map(|p| (p, "SOFTVERBS_PCAP".to_string()))),
                faults: Mutex::new(faults),
                reach: std::sync::atomic::AtomicBool::new(reach),
            }),
        }
    }

    /// Devices joined by an in-process wire: for programs and tests that run every NIC in one
    /// process. An environment variable that does not parse ([`EnvConfig`]) makes every open
    /// of a device fail with an error naming it.
    pub fn loopback() -> Soft {
        Soft::with_medium(Medium::Loopback(Loopback::new()), EnvConfig::from_env())
    }

    /// Devices on the shared-memory fabric in `dir` (or `SOFTVERBS_FABRIC`, or
    /// `/dev/shm/softverbs-<uid>`): processes on one machine talk RDMA through it. The
    /// directory is created when the first device is opened, not before, so that a program
    /// that only lists devices leaves nothing behind. An environment variable that does not
    /// parse ([`EnvConfig`]) is an error ([`Errno::Inval`]) naming it. With
    /// `SOFTVERBS_NETDEV=IFACE` the devices are RoCE v2 devices on that network interface
    /// instead ([`UdpPort`]; docs/guide.md, "Across machines"), and `dir` is not used.
    pub fn shared_memory(dir: Option<&Path>) -> Result<Soft> {
        let env = EnvConfig::from_env()?;
        if let Some(name) = env.netdev.clone() {
            return Ok(Soft::with_medium(Medium::Udp(name), Ok(env)));
        }
        let fabric = match Fabric::open_existing(dir) {
            Ok(fabric) => fabric,
            Err(WireError::NoFabric { .. }) => Fabric::locate(dir),
            Err(e) => return Err(Error::new(Errno::Io, e.to_string())),
        };
        Ok(Soft::with_medium(Medium::Shm(fabric), Ok(env)))
    }

    /// Devices that are RoCE v2 devices on network interface `iface`, as
    /// `SOFTVERBS_NETDEV=iface` makes [`Soft::shared_memory`]'s (docs/guide.md, "Across
    /// machines"): each opened device binds UDP port 4791 on a free IPv4 address of the
    /// interface. The interface is looked up when a device is opened, and an error names it.
    pub fn netdev(iface: &str) -> Soft {
        Soft::with_medium(Medium::Udp(iface.to_string()), EnvConfig::from_env())
    }

    /// Change the NIC settings (limits, retry quirks) used by devices opened from now on.
    pub fn configure(&self, f: impl FnOnce(&mut NicConfig)) {
        f(&mut self.inner.config.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Devices opened from now on write every datagram they send and receive to the pcap file
    /// `file` (None: no capture), in place of `SOFTVERBS_PCAP`; `origin` names where the name
    /// came from (`--pcap`) in errors. `{pid}` in the name stands for the process id. All
    /// devices of a process that name one file share it; another process writing the file
    /// makes the open fail (docs/guide.md, "Captures").
    pub fn capture_to(&self, file: Option<&Path>, origin: &str) {
        *self.inner.pcap.lock().unwrap_or_else(|e| e.into_inner()) =
            file.map(|f| (f.to_path_buf(), origin.to_string()));
    }

    /// Whether devices opened from now on take part in direct reach, in place of
    /// `SOFTVERBS_REACH` (on by default): their MRs' memory can be reached by peers' NICs,
    /// and they reach their peers', for RDMA WRITE, READ and atomics, with no packets while
    /// nothing observes the wire (docs/guide.md, "Direct reach"). Off, those travel as
    /// packets, as everything does over the loopback wire.
    pub fn set_reach(&self, on: bool) {
        self.inner.reach.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Devices opened from now on apply the fault plan `plan` (None: none), in place of
    /// `SOFTVERBS_FAULTS`: the same words (docs/guide.md, "Faults in real runs"). A plan that
    /// does not parse is an error ([`Errno::Inval`]) naming the bad word.
    pub fn fault_plan(&self, plan: Option<&str>) -> Result<()> {
        let parsed = match plan {
            Some(text) => {
                let p = FaultPlan::parse(text).map_err(|e| Error::new(Errno::Inval, e))?;
                let seed = p.seed().unwrap_or_else(|| fresh_entropy() & 0xffff_ffff);
                Some((p, seed))
            }
            None => None,
        };
        *self.inner.faults.lock().unwrap_or_else(|e| e.into_inner()) = parsed;
        Ok(())
    }

    /// The fabric directory, for a shared-memory `Soft`.
    pub fn fabric(&self) -> Option<&Fabric> {
        match &self.inner.medium {
            Medium::Shm(f) => Some(f),
            Medium::Loopback(_) | Medium::Udp(_) => None,
        }
    }

    /// The device names it offers.
    pub fn device_names(&self) -> &[String] {
        &self.inner.names
    }

    /// Open a device: `ibv_open_device` on `softverbsN`.
    pub fn open(&self, name: &str) -> Result<verbs_api::Context> {
        Ok(verbs_api::Context::from_ops(Arc::new(EngineContext::new(self.device(name)?))))
    }

    /// Call `watcher` once for each async event of the named (open) device: once now for each
    /// event already queued, then as each is queued. Returns the token for
    /// [`Soft::unwatch_async_events`]. For libibverbs' pollable `async_fd` (the C library,
    /// cabi/ibverbs, signals an eventfd from it); Rust programs block in
    /// `Context::get_async_event` instead.
    pub fn watch_async_events(&self, name: &str, watcher: AsyncWatcher) -> Result<u64> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let dev = self.device(name)?;
        let token = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Under the watchers' lock no event is queued, so each is counted once.
        let mut watchers = dev.async_watchers.lock().unwrap_or_else(|e| e.into_inner());
        let queued = dev.async_events.lock().unwrap_or_else(|e| e.into_inner()).len();
        for _ in 0..queued {
            watcher();
        }
        watchers.push((token, watcher));
        Ok(token)
    }

    /// Stop the watcher [`Soft::watch_async_events`] returned `token` for (nothing if the
    /// device is closed or the token unknown).
    pub fn unwatch_async_events(&self, name: &str, token: u64) {
        let devices = self.inner.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dev) = devices.get(name).and_then(Weak::upgrade) {
            dev.async_watchers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(t, _)| *t != token);
        }
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
        let env = self.inner.env.clone()?;
        let Some(index) = self.inner.names.iter().position(|n| n == name) else {
            return Err(Error::new(
                Errno::NoDev,
                format!("no soft device named {name:?} (devices: {})", self.inner.names.join(", ")),
            ));
        };
        let mut devices = self.inner.devices.lock().unwrap_or_else(|e| e.into_inner());
        // A device a child of fork() inherited is its parent's (the NIC thread and the port are
        // there): the child opens its own, as a child's ibv_open_device gets its own context.
        if let Some(d) = devices.get(name).and_then(Weak::upgrade).filter(|d| !d.inherited()) {
            return Ok(d);
        }
        let mut netdev = None;
        let mut qpn_block = None;
        let (port, lid): (Arc<dyn Port>, u16) = match &self.inner.medium {
            Medium::Udp(iface) => {
                let p = UdpPort::open(iface)
                    .map_err(|e| Error::new(e.errno, format!("opening {name}: {}", e.message)))?;
                netdev = Some(p.addr());
                qpn_block = Some(p.qpn_block());
                (Arc::new(p), 0)
            }
            Medium::Loopback(lb) => {
                let p = lb.attach(4096);
                let lid = p.lid();
                (Arc::new(p), lid)
            }
            Medium::Shm(fabric) => {
                // Attaching the first port is what creates the fabric directory.
                fabric
                    .create_dir()
                    .map_err(|e| Error::new(Errno::Io, format!("opening {name}: {e}")))?;
                let p = ShmPort::create(
                    fabric.clone(),
                    InboxConfig::default(),
                    self.inner.reach.load(std::sync::atomic::Ordering::Relaxed),
                )
                .map_err(|e| Error::new(Errno::Io, format!("opening {name}: {e}")))?;
                let lid = p.lid();
                (Arc::new(p), lid)
            }
        };
        let mut cfg = self.inner.config.lock().unwrap_or_else(|e| e.into_inner()).clone();
        cfg.name = name.to_string();
        cfg.slot = lid;
        cfg.netdev = netdev;
        cfg.qpn_block = qpn_block;
        cfg.node_guid = node_guid(index);
        cfg.entropy = fresh_entropy();
        let pcap = self.inner.pcap.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let capture = match pcap {
            Some((file, origin)) => Some(capture::Capture::open(&file, &origin)?),
            None => None,
        };
        let faults = self.inner.faults.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(
            |(plan, seed)| {
                let f = plan.for_device(name, *seed)?;
                let again = plan.with_seed(*seed);
                // Once, at open, so that a run can be repeated (a library prints nothing
                // else; this is what the user asked for by setting the plan).
                eprintln!(
                    "softverbs: fault plan for {name}: {} — set SOFTVERBS_FAULTS='{again}' to repeat",
                    f.description
                );
                tracing::info!(device = name, plan = %f.description, repeat = %again, "fault plan");
                Some(f)
            },
        );
        let dev = Device::start(name.to_string(), Nic::new(cfg), port, &env, capture, faults);
        devices.insert(name.to_string(), Arc::downgrade(&dev));
        Ok(dev)
    }
}

/// Random bits for a device being opened ([`NicConfig::entropy`]), different in every process
/// and for every open: std's `RandomState` is keyed from the operating system's randomness
/// once per thread and changes with each one made; the clock and pid are mixed in besides.
fn fresh_entropy() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::hash::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    h.write_u64(nanos);
    h.write_u32(std::process::id());
    h.finish()
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
        self.inner.env.clone()?;
        Ok(self
            .inner
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| DeviceInfo { name: n.clone(), node_guid: node_guid(i), provider: "soft" })
            .collect())
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(EngineContext::new(self.device(name)?)))
    }
}

/// The objects of a soft device are the engine's ([`crate::verbs`]); the device is their host.
pub(crate) type SoftCq = EngineCq<Device>;

impl Host for Device {
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn same_device(&self, other: &Device) -> bool {
        std::ptr::eq(self, other)
    }
    fn with_nic<R>(&self, f: impl FnOnce(&mut Nic) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st);
        // A verb that completes something (`ibv_post_recv` on a QP in error flushes it)
        // delivers its CQ's event now, not at the next progress round.
        self.deliver_events(&mut st.nic);
        if let Some(reach) = &self.reach {
            reach.sync(&mut st);
        }
        r
    }
    fn with_nic_now<R>(&self, f: impl FnOnce(&mut Nic, &mut Now<'_>) -> R) -> R {
        let mut st = self.lock();
        let mut clock = || self.now();
        let r = f(&mut st, &mut Now::Lazy(&mut clock));
        // A post transmits at once: the doorbell is this call.
        self.progress_after_verb(&mut st);
        r
    }
    fn poll_cq(&self, cq: u32, wc: &mut [WorkCompletion]) -> Result<usize> {
        let mut st = self.lock();
        if st.cq_len(cq) < wc.len() {
            // Polling is where an application lends the NIC its CPU: run the engine inline.
            // Under the lock even when nothing is there (docs/decisions.md, "Lock-free empty
            // poll").
            self.progress_inline(&mut st, Round::Poll);
        }
        st.poll_cq(cq, wc)
    }
    fn handle_id(&self, engine_id: u32) -> u64 {
        Core::handle_id(self, engine_id)
    }
    fn port_down(&self) -> bool {
        Core::port_down(self)
    }
    fn mr_memory(&self, len: usize) -> Result<Arc<crate::engine::mr::MrMemory>> {
        match &self.reach {
            Some(r) => r.mr_memory(len),
            None => crate::engine::mr::MrMemory::allocate(len),
        }
    }
    unsafe fn raw_mr_memory(
        &self,
        addr: *mut u8,
        len: usize,
        access: verbs_api::AccessFlags,
    ) -> Result<Arc<crate::engine::mr::MrMemory>> {
        // Under the device lock: this device's NIC thread writes none of the program's heap
        // while its pages move (other threads of the program must not: docs/c.md).
        let _st = self.lock();
        let arena = self.reach.as_ref().map(|r| r.arena());
        // SAFETY: the caller's promise (PdOps::reg_mr_raw).
        unsafe { crate::pinned::pin(addr, len, access, arena) }
    }
    fn mr_registered(
        &self,
        key: u32,
        pd: u32,
        access: verbs_api::AccessFlags,
        iova: u64,
        memory: &crate::engine::mr::MrMemory,
    ) {
        if let Some(r) = &self.reach {
            r.mr_registered(key, pd, access, iova, memory);
        }
    }
    fn mcast_membership(&self, gid: &verbs_api::Gid, change: crate::engine::Membership) {
        use crate::engine::Membership;
        match change {
            Membership::Joined => self.port.join_group(&gid.0),
            Membership::Left => self.port.leave_group(&gid.0),
            Membership::Unchanged => {}
        }
    }
    fn mr_withdrawn(&self, key: u32) {
        if let Some(r) = &self.reach {
            r.mr_withdrawn(key);
        }
    }
    fn inherited(&self) -> bool {
        Core::inherited(self)
    }
    fn create_comp_channel(self: &Arc<Self>) -> Result<Arc<dyn CompChannelOps>> {
        let inner = Arc::new(ChannelInner::default());
        self.add_channel(&inner);
        Ok(Arc::new(SoftChannel { inner, dev: Arc::downgrade(self) }))
    }
    fn bind_cq(&self, cq_id: u32, cq: Weak<SoftCq>, channel: &CompChannel) -> Result<()> {
        let ch = channel
            .ops()
            .as_any()
            .downcast_ref::<SoftChannel>()
            .ok_or_else(|| Error::inval("the completion channel belongs to another backend"))?;
        let entry = CqEntry { cq, channel: Some(ch.inner.clone()), armed: false };
        self.cqs.lock().unwrap_or_else(|e| e.into_inner()).insert(cq_id, entry);
        Ok(())
    }
    fn unbind_cq(&self, cq_id: u32) {
        let entry = self.cqs.lock().unwrap_or_else(|e| e.into_inner()).remove(&cq_id);
        if let Some(CqEntry { cq, channel: Some(ch), armed }) = entry {
            if armed {
                self.disarmed();
            }
            // Events the program has not taken go with the CQ, as the kernel purges them.
            ch.purge(&cq);
        }
    }
    fn cq_armed(&self, cq_id: u32) {
        Core::cq_armed(self, cq_id);
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        // The program is about to sleep: the NIC thread must run the engine meanwhile.
        self.hand_over();
        pop_within(&self.async_events, &self.async_ready, timeout).map_err(|e| {
            e.unwrap_or_else(|| {
                Error::new(Errno::TimedOut, "ibv_get_async_event: no event within the timeout")
            })
        })
    }
}

// ---------------- completion channel ----------------

/// A soft completion channel: its queue of events (and fd) and the device it belongs to.
struct SoftChannel {
    inner: Arc<ChannelInner>,
    dev: Weak<Device>,
}

impl CompChannelOps for SoftChannel {
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        if let Some(cq) = self.inner.try_pop() {
            return Ok(cq);
        }
        let Some(core) = self.dev.upgrade().map(|d| d.core().clone()) else {
            return Err(Error::new(Errno::Io, "ibv_get_cq_event: the device was closed"));
        };
        if timeout.is_some_and(|t| t.is_zero()) {
            // The program will wait elsewhere (epoll on the fd): the NIC thread runs the
            // engine meanwhile.
            core.hand_over();
            return Err(Error::new(
                Errno::TimedOut,
                "ibv_get_cq_event: no completion event queued",
            ));
        }
        // The program is about to sleep: this thread runs the engine meanwhile, woken once
        // by the datagram that brings the event; if another thread does so already, the NIC
        // thread does.
        match core.drive_until_event(&self.inner, timeout) {
            Driven::Event(cq) => return Ok(cq),
            Driven::Closed(e) => return Err(e),
            Driven::TimedOut => {
                let t = timeout.unwrap_or_default();
                return Err(Error::new(
                    Errno::TimedOut,
                    format!("ibv_get_cq_event: no completion event within {t:?}"),
                ));
            }
            Driven::Interrupted => {
                return Err(Error::new(
                    Errno::Intr,
                    "ibv_get_cq_event: a signal handler installed without SA_RESTART ran",
                ));
            }
            Driven::Busy => core.hand_over(),
        }
        drop(core);
        let cq = self.inner.wait_interruptible(timeout).map_err(|e| {
            e.unwrap_or_else(|| {
                let t = timeout.unwrap_or_default();
                Error::new(
                    Errno::TimedOut,
                    format!("ibv_get_cq_event: no completion event within {t:?}"),
                )
            })
        })?;
        Ok(cq)
    }
    fn ack_cq_events(&self, _cq: &CompletionQueue, _nevents: u32) {}
    fn fd(&self) -> Result<std::os::fd::RawFd> {
        self.inner.fd()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Pop the oldest entry of `queue`, waiting on `ready` until one arrives or `timeout` passes
/// (`None` waits forever). A timeout is `Err(None)`, so each verb words its own message.
fn pop_within<T>(
    queue: &Mutex<VecDeque<T>>,
    ready: &Condvar,
    timeout: Option<Duration>,
) -> std::result::Result<T, Option<Error>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(item) = q.pop_front() {
            return Ok(item);
        }
        q = match deadline {
            None => ready.wait(q).unwrap_or_else(|e| e.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(None);
                }
                ready.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0
            }
        };
    }
}
