//! One soft device: a NIC engine, its port on a wire, real time, and the progress that runs the
//! engine inline in verbs calls and in a per-device NIC thread.
//!
//! # Who runs the engine
//! A program that is calling in (posting, polling) lends the NIC its own CPU: each post transmits
//! at once and each poll that finds its CQ short drains the inbox. While that happens the NIC
//! thread *stands by*: it sleeps on its own thread parker, not on the inbox doorbell, so neither
//! the program nor its peers pay a system call to wake it, and two cores are not shared by four
//! busy-polling threads. When the program stops calling in (no inline round during a standby
//! interval) or is about to block in a verb (`ibv_get_async_event`; a thread blocked in
//! `ibv_get_cq_event` runs the engine itself, `device/driver.rs`), the NIC thread takes over:
//! it runs progress rounds, spins for a bounded window after its last work, and then parks
//! on the doorbell futex, where a sender wakes it only because it is parked. That is how
//! one-sided operations complete while the target program sleeps, and why an idle device costs
//! no CPU. A program that calls in but waits for its peer's one-sided requests by polling
//! memory (`ib_write_lat`) leaves them in the inbox; the NIC thread notices at a standby look
//! and serves it as a sleeping one (`device/nic_thread.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use verbs_api::{AsyncElement, AsyncEvent};

use super::capture::{Capture, Captured};
use super::counters::{self, Backpressure, PortCounters, Tally};
use super::faults::{lock_faults, Dir, FaultCounters, Faulted, PortFaults, Verdict};
use super::port::Port;
use super::reach::SoftReach;
use super::tap::{observer, Tap, TapDir, Tapped};
use super::{ChannelInner, SoftCq};
use crate::cost::{self, Syscall};
use crate::engine::{Egress, Nic, NicEvent, NicStats, Now};
use crate::packet::{with_icrc_ipv4, Icrc};
pub(crate) use driver::Driven;
use nic_thread::nic_thread;

mod driver;
mod nic_thread;

/// What [`super::Soft::watch_async_events`] calls for each async event: quick, and never a
/// verb of the device (it may run on the NIC thread with the device locked).
pub type AsyncWatcher = Arc<dyn Fn() + Send + Sync>;

/// The longest the NIC thread sleeps when no timer is pending.
const MAX_PARK: Duration = Duration::from_millis(100);

/// How soon the NIC thread retries datagrams that met a full inbox. A receiver frees slots
/// without telling its senders, so the sender polls; only a backpressured device pays.
const BACKLOG_RETRY: Duration = Duration::from_micros(20);

/// Datagrams taken from the inbox per progress round, so a flood cannot starve timers.
const RX_BURST: usize = 256;

/// Rounds look at the timers (which needs the clock) only once in this many, whether or not
/// they received anything: a busy-polling program's poll then costs a few loads, and the
/// poll that receives a SEND reads no clock. Timers are tens of microseconds at the least; a
/// check every few hundred nanoseconds is plenty (docs/decisions.md, "Lazy clock").
const TIMER_CHECK_EVERY: u32 = 16;

/// What a progress round is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Round {
    /// Everything: receive all that is there, send all that is owed.
    Full,
    /// Polling a CQ: stop receiving once a packet has added a completion (see
    /// [`Core::progress_locked`]).
    Poll,
}

/// What the device lock protects: the engine (with the port's sending half lent to it, and
/// its one transmit queue) and what travels with it.
pub(crate) struct State {
    pub(crate) nic: Nic,
    /// What looks at the datagrams the port receives (the capture, then the tap), if anything.
    rx_tap: Option<Tap>,
    /// Rounds since the last one that read the clock (see [`TIMER_CHECK_EVERY`]).
    rounds_since_clock: u32,
    backpressure: Backpressure,
}

/// A snapshot of a soft device's counters ([`crate::soft::Soft::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// The engine's counters.
    pub nic: NicStats,
    /// What became of datagrams a full destination inbox refused.
    pub backpressure: Backpressure,
    /// The port's packet and byte counts.
    pub port: PortCounters,
    /// The faults its plan injected (`SOFTVERBS_FAULTS`); zero without one.
    pub faults: FaultCounters,
    /// Why the port is down for good, naming its inbox segment, which a stray write corrupted
    /// (`IBV_EVENT_PORT_ERR` was queued when the NIC thread found it, and `ibv_query_port`
    /// says `PORT_DOWN`); None while the port is up.
    pub port_error: Option<String>,
    /// The last send that found a destination's inbox corrupted, naming that segment: its
    /// datagrams are lost, as to a port that is down, until RC gives up (`RETRY_EXC_ERR`).
    pub peer_problem: Option<String>,
    /// The packets that peers' direct reach into this port's memory stood for, seen from this
    /// port (their requests received, the ACKs and responses sent); this port's own reached
    /// requests are in `nic.reached_traffic`. Neither is in `nic` or `port`'s packet counts,
    /// which count the wire; [`DeviceStats::counters`] adds them as `softverbs counters` does.
    pub reached_here: crate::engine::Traffic,
}

impl DeviceStats {
    /// Every port counter as `softverbs counters` shows it ([`counters::COUNTERS`], in order),
    /// the packets direct reach stood for included.
    pub fn counters(&self) -> [u64; counters::COUNT] {
        let down = self.port_error.is_some();
        counters::values(
            &self.nic,
            &self.backpressure,
            &self.port,
            &self.faults,
            &self.reached_here,
            down,
        )
    }
}

// The verbs layer calls the engine through the lock (`dev.lock().alloc_pd()`); the rest of
// the state is the progress loop's business.
impl std::ops::Deref for State {
    type Target = Nic;
    fn deref(&self) -> &Nic {
        &self.nic
    }
}

impl std::ops::DerefMut for State {
    fn deref_mut(&mut self) -> &mut Nic {
        &mut self.nic
    }
}

/// A CQ as the progress loop knows it: where its notifications go, without keeping it alive.
pub(crate) struct CqEntry {
    pub(crate) cq: Weak<SoftCq>,
    pub(crate) channel: Option<Arc<ChannelInner>>,
    /// Armed by the program and its event not delivered yet (counted in `Core::armed_cqs`).
    pub(crate) armed: bool,
}

/// Everything of a device that both the program's threads and the NIC thread use. The NIC
/// thread holds an `Arc<Core>` and never a [`Device`], so the last handle is always dropped by
/// a program thread, which can then join the NIC thread.
pub(crate) struct Core {
    pub(crate) name: String,
    /// This device's number among the devices this process started: the high half of its
    /// CQs' and SRQs' handle ids, so ids are unique across devices.
    serial: u32,
    state: Mutex<State>,
    pub(crate) port: Arc<dyn Port>,
    epoch: Instant,
    pub(crate) cqs: Mutex<BTreeMap<u32, CqEntry>>,
    /// The device's completion channels, told when it closes ([`ChannelInner::close`]).
    channels: Mutex<Vec<Weak<ChannelInner>>>,
    pub(crate) async_events: Mutex<VecDeque<AsyncEvent>>,
    pub(crate) async_ready: Condvar,
    /// Called once for every async event queued from now on ([`super::Soft::watch_async_events`]),
    /// with the token that removes it.
    pub(crate) async_watchers: Mutex<Vec<(u64, AsyncWatcher)>>,
    shutdown: AtomicBool,
    /// When the NIC thread, parked on the doorbell, will wake by itself (ns since epoch;
    /// `u64::MAX` when it is not parked there).
    parked_until_ns: AtomicU64,
    /// Progress rounds run inline by verbs calls; written under the state lock. The NIC thread
    /// stands by while it moves.
    inline_rounds: AtomicU64,
    /// Set when the program is about to block: the NIC thread takes over at once.
    takeover: AtomicBool,
    /// CQs with a channel that the program armed and whose event has not come: while there
    /// are any, the NIC thread does not stand by, since the program may be waiting in
    /// `poll`/`epoll` on the channel's fd, calling no verb.
    armed_cqs: AtomicU32,
    /// Who sleeps on the inbox doorbell: nobody, the NIC thread, or a thread blocked in
    /// `ibv_get_cq_event` that runs the engine itself (`driver::BELL_*`).
    doorbell: AtomicU8,
    /// How many times a waiter took the doorbell (the NIC thread tells a new one by it).
    drives: AtomicU64,
    /// A waiter is taking the doorbell from the NIC thread: the thread does not park there.
    bell_wanted: AtomicBool,
    nic_thread: OnceLock<Thread>,
    /// Why the port went down for good (see [`Core::check_port`]).
    port_error: OnceLock<String>,
    spin: Duration,
    standby: Duration,
    /// The capture file this device writes to (`SOFTVERBS_PCAP`, `--pcap`): a layer of
    /// every sending half the device lends, and part of its receiving tap.
    capture: Option<Arc<Capture>>,
    /// The port's own counters ([`DeviceStats::port`]); the sending half lent to the engine
    /// adds to them too.
    tally: Arc<Tally>,
    /// The port's faults (`SOFTVERBS_FAULTS`), shared with the layer around the sending half
    /// lent to the engine; None without a plan, and then the receiving path never looks
    /// further.
    faults: Option<Arc<Mutex<PortFaults>>>,
    /// What the device publishes for peers that reach its memory (a port with a reach file).
    pub(crate) reach: Option<SoftReach>,
    /// The process that opened the device: in any other (a child of `fork()`), its handles
    /// are inherited copies, and dropping them leaves the device alone ([`Core::inherited`]).
    owner: u32,
}

/// A started device: the shared core plus the NIC thread, joined on drop so that the port (and
/// its inbox segment) is gone when the last handle is.
pub(crate) struct Device {
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
}

impl std::ops::Deref for Device {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

/// Devices started by this process so far (see [`Core::handle_id`]).
static DEVICES_STARTED: AtomicU32 = AtomicU32::new(0);

impl Device {
    pub(crate) fn start(
        name: String,
        mut nic: Nic,
        port: Arc<dyn Port>,
        env: &super::EnvConfig,
        capture: Option<Arc<Capture>>,
        faults: Option<PortFaults>,
    ) -> Arc<Device> {
        let faults = faults.map(|f| Arc::new(Mutex::new(f)));
        if let Some(c) = &capture {
            c.join(port.ip());
        }
        let rx_tap = observer(capture.as_ref(), None);
        let tally = Arc::new(Tally::default());
        nic.set_egress(Some(lend(port.as_ref(), &tally, capture.as_ref(), None, faults.as_ref())));
        port.set_label(&name);
        let reach = port.arena().map(|a| SoftReach::new(a.clone()));
        let core = Arc::new(Core {
            name,
            serial: DEVICES_STARTED.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State {
                nic,
                rx_tap,
                rounds_since_clock: 0,
                backpressure: Backpressure::default(),
            }),
            port,
            epoch: Instant::now(),
            cqs: Mutex::new(BTreeMap::new()),
            channels: Mutex::new(Vec::new()),
            // The port comes up as the device starts (IBV_EVENT_PORT_ACTIVE).
            async_events: Mutex::new(VecDeque::from([AsyncEvent {
                event_type: verbs_api::AsyncEventType::PortActive,
                element: verbs_api::AsyncElement::Port(1),
            }])),
            async_ready: Condvar::new(),
            async_watchers: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            parked_until_ns: AtomicU64::new(u64::MAX),
            inline_rounds: AtomicU64::new(0),
            takeover: AtomicBool::new(false),
            armed_cqs: AtomicU32::new(0),
            doorbell: AtomicU8::new(driver::BELL_FREE),
            drives: AtomicU64::new(0),
            bell_wanted: AtomicBool::new(false),
            nic_thread: OnceLock::new(),
            port_error: OnceLock::new(),
            spin: env.spin,
            standby: env.standby,
            capture,
            reach,
            tally,
            faults,
            owner: std::process::id(),
        });
        if let Some(r) = &core.reach {
            r.set_observed(core.capture.is_some() || core.faults.is_some());
        }
        {
            // Readers see every counter from the start, zero until the port does something.
            let st = core.lock();
            core.publish_counters(&st.nic, &st.backpressure);
        }
        let for_thread = core.clone();
        // The NIC thread keeps the reach file (peers see the owner alive while it lives): the
        // device is open once it does.
        let (kept, keeping) = std::sync::mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name(format!("{}-nic", core.name))
            .spawn(move || {
                // The program's signals are its own threads' (rxe's NIC is in the kernel).
                crate::wire::block_async_signals();
                let _keeper = for_thread.reach.as_ref().and_then(|r| r.keep());
                let _ = kept.send(());
                nic_thread(for_thread)
            })
            .expect("spawning the NIC thread");
        let _ = keeping.recv();
        let _ = core.nic_thread.set(handle.thread().clone());
        tracing::info!(device = %core.name, slot = core.state.lock().map_or(0, |s| s.nic.config().slot),
            "device opened");
        Arc::new(Device { core, thread: Some(handle) })
    }
}

impl Device {
    /// The shared core, which a thread blocked in a verb holds without keeping the device
    /// open.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Whether this handle is a copy a child of `fork()` inherited ([`Core::inherited`]).
    pub(crate) fn inherited(&self) -> bool {
        self.core.inherited()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.core.inherited() {
            // A child of fork(): the NIC thread, the port, the reach file and the memory of
            // the MRs are the parent's. Nothing here may stop, close, remove or zero them, nor
            // join a thread this process does not have, nor take a lock another thread may
            // have held at the fork: the core (and everything it holds) is never dropped here.
            std::mem::forget(self.thread.take());
            std::mem::forget(self.core.clone());
            return;
        }
        self.core.shutdown.store(true, Ordering::Release);
        self.core.wake_nic_thread();
        // Threads waiting for a completion event of this device give up.
        for ch in self.core.channels.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            if let Some(ch) = ch.upgrade() {
                ch.close();
            }
        }
        if let Some(h) = self.thread.take() {
            // Only program threads hold a Device, so this never runs on the NIC thread.
            let _ = h.join();
            tracing::info!(device = %self.core.name, "device closed");
        }
        if let Some(c) = &self.core.capture {
            c.leave(self.core.port.ip());
        }
    }
}

impl Core {
    /// Whether this process is not the one that opened the device (a child of `fork()` that
    /// inherited its handles). One system call: asked only when a handle goes.
    pub(crate) fn inherited(&self) -> bool {
        std::process::id() != self.owner
    }

    /// Nanoseconds of the device's monotonic clock.
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copy datagrams to `tap` (replacing the last one set), and to the capture file if the
    /// device writes one.
    pub(crate) fn set_tap(&self, tap: Option<Tap>) {
        let rx_tap = observer(self.capture.as_ref(), tap.clone());
        if let Some(r) = &self.reach {
            r.set_observed(rx_tap.is_some() || self.faults.is_some());
        }
        let egress =
            lend(self.port.as_ref(), &self.tally, self.capture.as_ref(), tap, self.faults.as_ref());
        let mut st = self.lock();
        // A fresh sending half with the tap around it (it reconnects to peers on demand).
        st.nic.set_egress(Some(egress));
        st.rx_tap = rx_tap;
    }

    /// The id a CQ or SRQ handle of this device reports (`CqOps::id`, `SrqOps::id`) and async
    /// events name it by, for the engine's number `engine_id`.
    pub(crate) fn handle_id(&self, engine_id: u32) -> u64 {
        (u64::from(self.serial) << 32) | u64::from(engine_id)
    }

    pub(crate) fn stats(&self) -> DeviceStats {
        let st = self.lock();
        DeviceStats {
            nic: st.nic.stats().clone(),
            backpressure: st.backpressure,
            port: self.tally.snapshot(),
            faults: self.fault_counts(),
            port_error: self.port_error.get().cloned(),
            peer_problem: self.port.peer_problem(),
            reached_here: self.reached_here(true),
        }
    }

    /// Publishes the port's counters where other processes read them (the inbox segment's
    /// counters block, for `softverbs counters`): a few dozen relaxed stores, no system call.
    /// Called once per [`TIMER_CHECK_EVERY`] rounds and before the NIC thread parks, never
    /// per packet.
    fn publish_counters(&self, nic: &Nic, backpressure: &Backpressure) {
        let values = counters::values(
            nic.stats(),
            backpressure,
            &self.tally.snapshot(),
            &self.fault_counts(),
            &self.reached_here(false),
            self.port_down(),
        );
        self.port.publish(&values);
    }

    /// What peers' direct reach into this port's memory stood for (see
    /// [`DeviceStats::reached_here`]); added up again when a peer counted something, or when
    /// `fresh`.
    fn reached_here(&self, fresh: bool) -> crate::engine::Traffic {
        self.reach.as_ref().map_or_else(Default::default, |r| r.reached(fresh))
    }

    /// What the port's fault plan did so far (zero without one).
    fn fault_counts(&self) -> FaultCounters {
        self.faults.as_deref().map_or_else(FaultCounters::default, |f| lock_faults(f).counts)
    }

    /// A received datagram under a fault plan: lost, held for its jitter, or handed to the
    /// engine (changed, and twice, as the plan's dice say).
    #[cold]
    fn receive_faulted(
        &self,
        f: &Mutex<PortFaults>,
        nic: &mut Nic,
        now: &mut Now<'_>,
        tap: &Option<Tap>,
        pkt: &[u8],
        icrc: Icrc,
    ) {
        // The plan looks at the datagram (and may damage it): it must be whole first.
        let whole;
        let pkt = match icrc {
            Icrc::Carried => pkt,
            Icrc::Unset => {
                whole = with_icrc_ipv4(pkt);
                &whole
            }
        };
        let verdict = lock_faults(f).judge(Dir::Rx, [0; 4], pkt);
        if let Verdict::Pass { altered, dup } = verdict {
            let bytes = altered.as_deref().unwrap_or(pkt);
            for _ in 0..1 + usize::from(dup) {
                self.tally.received(bytes.len());
                if let Some(t) = tap {
                    t(TapDir::Rx, bytes);
                }
                nic.handle_packet_at(now, bytes);
            }
        }
    }

    /// Hands to the engine the received packets the fault plan held for their reorder jitter
    /// whose time has come; whether there were any. (The ones held on the way out are the
    /// fault layer's, released when the engine flushes: [`Egress::release`].)
    #[cold]
    fn release_held(
        &self,
        f: &Mutex<PortFaults>,
        nic: &mut Nic,
        now: &mut Now<'_>,
        tap: &Option<Tap>,
    ) -> bool {
        let mut did = false;
        loop {
            let Some(h) = lock_faults(f).take_due(Dir::Rx) else { break };
            did = true;
            self.tally.received(h.data.len());
            if let Some(t) = tap {
                t(TapDir::Rx, &h.data);
            }
            nic.handle_packet_at(now, &h.data);
        }
        did
    }

    /// A progress round run by a verbs call on the program's thread (the caller holds the
    /// lock). Tells the NIC thread that the program is calling in.
    pub(crate) fn progress_inline(&self, st: &mut State, round: Round) -> bool {
        let did = self.progress_locked(st, round);
        // Under the state lock, so a plain increment is enough; the NIC thread only compares.
        let n = self.inline_rounds.load(Ordering::Relaxed);
        self.inline_rounds.store(n.wrapping_add(1), Ordering::Relaxed);
        did
    }

    /// The round after a verb that gave the engine work (`Host::with_nic_now`), unless the
    /// verb was a post done wholly by direct reach and nothing waits (no datagram to send or
    /// receive, no timer): then only the NIC thread is told that the program calls in.
    pub(crate) fn progress_after_verb(&self, st: &mut State) {
        let quiet = st.nic.take_quiet_post();
        let waiting = st.nic.has_transmit() || !self.port.idle();
        if quiet && !waiting && st.nic.next_timeout().is_none() {
            let n = self.inline_rounds.load(Ordering::Relaxed);
            self.inline_rounds.store(n.wrapping_add(1), Ordering::Relaxed);
            // A reached WR's completion may have fired its CQ's event: delivered now.
            self.deliver_events(&mut st.nic);
            return;
        }
        self.progress_inline(st, Round::Full);
    }

    /// A completion channel of this device, to be told when the device closes.
    pub(crate) fn add_channel(&self, ch: &Arc<ChannelInner>) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.retain(|c| c.strong_count() > 0);
        channels.push(Arc::downgrade(ch));
    }

    /// The program arms CQ `cq_id` ([`crate::verbs::Host::cq_armed`]): if it has a channel,
    /// count it until its event is delivered, and have a NIC thread that stands by take over
    /// (once, as the first armed CQ is counted: a thread that runs or is parked on the
    /// doorbell needs nothing).
    pub(crate) fn cq_armed(&self, cq_id: u32) {
        let mut cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = cqs.get_mut(&cq_id) else { return };
        if entry.armed {
            return;
        }
        entry.armed = true;
        let lent = self.doorbell.load(Ordering::Acquire) == driver::BELL_LENT;
        if self.armed_cqs.fetch_add(1, Ordering::AcqRel) == 0 && !lent {
            self.takeover.store(true, Ordering::Release);
            if let Some(t) = self.nic_thread.get() {
                cost::syscalls(Syscall::Unpark, 1);
                t.unpark();
            }
        }
    }

    /// An armed CQ's event was delivered, or the CQ is gone.
    pub(crate) fn disarmed(&self) {
        self.armed_cqs.fetch_sub(1, Ordering::AcqRel);
    }

    /// The program is about to block in a verb: have the NIC thread run the engine from now on.
    pub(crate) fn hand_over(&self) {
        self.takeover.store(true, Ordering::Release);
        self.wake_nic_thread();
    }

    /// Whether the port is down (`ibv_query_port` says `PORT_DOWN`).
    pub(crate) fn port_down(&self) -> bool {
        self.port_error.get().is_some()
    }

    /// Looks at the port's end of the wire ([`Port::check`]); the first time it is found
    /// broken (a stray write corrupted the inbox), the port goes down for good, as a real
    /// port whose link fails: `ibv_query_port` says `PORT_DOWN` and `IBV_EVENT_PORT_ERR` is
    /// queued, with the reason, naming the segment, in [`DeviceStats::port_error`]. The inbox
    /// no longer delivers and its senders are refused; QPs stay as they are (their peers'
    /// retries run out). The way on is to close the device and open it again, which makes a
    /// new inbox. The NIC thread calls this when it stands by or parks, never per round.
    fn check_port(&self) {
        if self.port_error.get().is_some() {
            return;
        }
        let why = match (self.port.check(), &self.faults) {
            (Some(why), _) => why,
            (None, Some(f)) if lock_faults(f).fail_due() => {
                let at = lock_faults(f).fail_at().unwrap_or(0);
                format!(
                    "failed by the fault plan (SOFTVERBS_FAULTS fail@{} ms): nothing goes in \
                     or out any more",
                    at / 1_000_000
                )
            }
            _ => return,
        };
        if let Some(r) = &self.reach {
            // Before PORT_ERR: once its owner hears of it, nothing reaches the port.
            r.set_port_down();
        }
        if self.port_error.set(format!("{}: port 1 is down: {why}", self.name)).is_ok() {
            tracing::warn!(device = %self.name, port = 1, reason = %why, "port error: the port is down");
            let ev = AsyncEvent {
                event_type: verbs_api::AsyncEventType::PortErr,
                element: AsyncElement::Port(1),
            };
            self.push_async(ev);
        }
    }

    /// Queue an async event, wake `ibv_get_async_event` and tell the watchers. The watchers'
    /// lock is held across, so a watcher added meanwhile counts each event exactly once.
    fn push_async(&self, ev: AsyncEvent) {
        let watchers = self.async_watchers.lock().unwrap_or_else(|e| e.into_inner());
        self.async_events.lock().unwrap_or_else(|e| e.into_inner()).push_back(ev);
        self.async_ready.notify_all();
        for (_, w) in watchers.iter() {
            w();
        }
    }

    fn wake_nic_thread(&self) {
        self.port.unpark();
        if let Some(t) = self.nic_thread.get() {
            cost::syscalls(Syscall::Unpark, 1);
            t.unpark();
        }
    }

    /// One round of progress: send what the engine has queued (a post's packets leave before
    /// anything else happens), take what the inbox holds, fire due timers, send what that
    /// produced (ACKs included: anything this device sends later follows them, so a peer
    /// sees its send complete before it sees the next message, as with a hardware NIC),
    /// deliver events. Returns whether anything happened. No system calls unless a parked
    /// peer must be woken. The clock is read at most once, and only if a received packet arms
    /// a timer or this is the round in [`TIMER_CHECK_EVERY`] that looks at the pending timers.
    ///
    /// A [`Round::Poll`] stops taking packets once one has added a completion (to any CQ: it
    /// costs no lookup, and the program polls again if it was another's), so that the
    /// completion reaches the program without waiting for packets that arrived behind it; the
    /// next round takes those.
    fn progress_locked(&self, st: &mut State, round: Round) -> bool {
        let State { nic, rx_tap: tap, rounds_since_clock, backpressure } = st;
        let mut did = false;
        if nic.has_transmit() && !nic.transmit_waits() {
            did |= flush(nic, backpressure);
        }
        let completions_before = match round {
            Round::Poll => Some(nic.completions_pending()),
            Round::Full => None,
        };
        let mut clock = || self.now();
        let mut now = Now::Lazy(&mut clock);
        let tally = &self.tally;
        let faults = self.faults.as_deref();
        let received = self.port.recv_burst(RX_BURST, &mut |pkt, icrc| {
            if let Some(f) = faults {
                self.receive_faulted(f, nic, &mut now, tap, pkt, icrc);
            } else {
                tally.received(pkt.len());
                match (tap.as_ref(), icrc) {
                    // Nothing looks at this side: a datagram whose sender left its ICRC
                    // unset is checked for everything else.
                    (None, icrc) => nic.handle_packet_with(&mut now, pkt, icrc),
                    (Some(t), Icrc::Carried) => {
                        t(TapDir::Rx, pkt);
                        nic.handle_packet_at(&mut now, pkt);
                    }
                    (Some(t), Icrc::Unset) => {
                        // A copy: the ring slot is the sender's lap, not ours to change.
                        let whole = with_icrc_ipv4(pkt);
                        t(TapDir::Rx, &whole);
                        nic.handle_packet_at(&mut now, &whole);
                    }
                }
            }
            completions_before.is_none_or(|before| nic.completions_pending() == before)
        });
        did |= received > 0;
        if let Some(f) = faults {
            did |= self.release_held(f, nic, &mut now, tap);
        }
        *rounds_since_clock += 1;
        if *rounds_since_clock >= TIMER_CHECK_EVERY {
            *rounds_since_clock = 0;
            self.publish_counters(nic, backpressure);
            if let Some(due) = nic.next_timeout() {
                let now = now.get();
                if due <= now {
                    nic.handle_timeout(now);
                    did = true;
                }
            }
        }
        if nic.has_transmit() || faults.is_some() {
            did |= flush(nic, backpressure);
        }
        did |= self.deliver_events(nic);
        if let Some(r) = &self.reach {
            r.sync(nic);
        }
        // A timer armed by this round may be earlier than the parked NIC thread's wake-up.
        // While the thread runs or stands by it sees the timer itself (or the program does).
        let parked_until = self.parked_until_ns.load(Ordering::Acquire);
        if parked_until != u64::MAX && nic.next_timeout().is_some_and(|t| t < parked_until) {
            // A timer armed without reading the clock (a post's) is due "at once" until it is
            // stamped: give it its deadline before deciding whether the thread must wake.
            nic.stamp_timers(now.get());
            if nic.next_timeout().is_some_and(|t| t < parked_until) {
                self.port.unpark();
            }
        }
        did
    }

    /// Hands the engine's queued notifications and async events to their channels and
    /// watchers now (the channel's fd becomes readable here, on whichever thread pushed the
    /// completion); whether there were any. Without events, one look at an empty queue.
    #[inline]
    pub(crate) fn deliver_events(&self, nic: &mut Nic) -> bool {
        let mut did = false;
        while let Some(ev) = nic.poll_event() {
            did = true;
            self.deliver(ev);
        }
        did
    }

    #[cold]
    fn deliver(&self, ev: NicEvent) {
        match ev {
            NicEvent::CqNotify(id) => {
                let mut cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(CqEntry { cq, channel: Some(ch), armed }) = cqs.get_mut(&id) {
                    if std::mem::take(armed) {
                        self.disarmed();
                    }
                    ch.notify(cq.clone());
                }
            }
            NicEvent::Async(mut ev) => {
                // The engine names CQs and SRQs by its own numbers; programs know the handles.
                ev.element = match ev.element {
                    AsyncElement::Cq(id) => AsyncElement::Cq(self.handle_id(id as u32)),
                    AsyncElement::Srq(id) => AsyncElement::Srq(self.handle_id(id as u32)),
                    other => other,
                };
                self.push_async(ev);
            }
        }
    }

    /// A round on the NIC thread: whether it did anything; skipped (None) when a program
    /// thread holds the lock, since that thread is running the engine.
    fn progress_background(&self) -> Option<bool> {
        match self.state.try_lock() {
            Ok(mut st) => Some(self.progress_locked(&mut st, Round::Full)),
            Err(TryLockError::Poisoned(e)) => {
                Some(self.progress_locked(&mut e.into_inner(), Round::Full))
            }
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// How long the NIC thread may sleep: until the next timer, at most [`MAX_PARK`], or
    /// [`BACKLOG_RETRY`] while datagrams wait for room in a full inbox.
    fn park_budget(&self) -> (Duration, u64) {
        let now = self.now();
        let mut st = self.lock();
        // Idle: what the port did so far is what another process reads while it sleeps.
        self.publish_counters(&st.nic, &st.backpressure);
        // Timers that posts armed without the clock start now, at the latest.
        st.nic.stamp_timers(now);
        let latest = match st.nic.transmit_waits() {
            false => now + MAX_PARK.as_nanos() as u64,
            true => now + BACKLOG_RETRY.as_nanos() as u64,
        };
        let mut until = st.nic.next_timeout().map_or(latest, |t| t.min(latest));
        if let Some(f) = &self.faults {
            // Held packets and the fail time wake the thread too.
            let g = lock_faults(f);
            if let Some(d) = g.next_deadline() {
                until = until.min(now + d.saturating_sub(g.elapsed_ns()));
            }
        }
        (Duration::from_nanos(until.saturating_sub(now)), until)
    }
}

/// Has the engine send its transmit queue through the sending half it was lent (and the fault
/// layer release what it held), adding what became of refused datagrams to the device's
/// counters; whether anything moved.
fn flush(nic: &mut Nic, backpressure: &mut Backpressure) -> bool {
    let f = nic.flush_transmit();
    backpressure.backpressured += f.backpressured;
    backpressure.ud_dropped_inbox_full += f.ud_dropped;
    f.moved
}

/// The sending half of `port` to lend its engine, inside the layers that look at what it
/// sends: the capture, then the tap, then the fault plan (outermost: what it loses, nothing
/// else sees; what it duplicates, each sees twice). Without them it is the port's own sending
/// half, and a datagram pays one call.
fn lend(
    port: &dyn Port,
    tally: &Arc<Tally>,
    capture: Option<&Arc<Capture>>,
    tap: Option<Tap>,
    faults: Option<&Arc<Mutex<PortFaults>>>,
) -> Box<dyn Egress> {
    let mut egress = port.egress(tally);
    if let Some(c) = capture {
        egress = Box::new(Captured::new(egress, c.clone()));
    }
    if let Some(t) = tap {
        egress = Box::new(Tapped::new(egress, t));
    }
    if let Some(f) = faults {
        egress = Box::new(Faulted::new(egress, f.clone()));
    }
    egress
}
