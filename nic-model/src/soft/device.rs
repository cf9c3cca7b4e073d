//! One soft device: a NIC engine, its port on a wire, real time, and the progress that runs the
//! engine inline in verbs calls and in a per-device NIC thread.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use verbs_api::provider::CqOps;
use verbs_api::AsyncEvent;

use super::port::{Port, SendOutcome};
use super::SoftCq;
use crate::engine::{Nic, NicEvent, Transmit};

/// Receives a copy of every datagram a device sends or receives, for teaching output (the demo
/// prints each packet) and captures.
pub type Tap = Arc<dyn Fn(TapDir, &[u8]) + Send + Sync>;

/// Direction of a tapped datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapDir {
    /// Sent by this device.
    Tx,
    /// Received by this device.
    Rx,
}

/// How long the NIC thread busy-polls after its last piece of work before it parks (see
/// docs/performance.md for how this was measured). Overridable with `SOFTVERBS_SPIN_US`.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// The longest the NIC thread sleeps when no timer is pending.
const MAX_PARK: Duration = Duration::from_millis(100);

/// Datagrams taken from the inbox per progress round, so a flood cannot starve timers.
const RX_BURST: usize = 256;

pub(crate) struct Device {
    pub(crate) name: String,
    pub(crate) nic: Mutex<Nic>,
    pub(crate) port: Arc<dyn Port>,
    epoch: Instant,
    /// Datagrams the wire refused (inbox full), sent first on the next round.
    backlog: Mutex<VecDeque<Transmit>>,
    pub(crate) cqs: Mutex<BTreeMap<u32, Weak<SoftCq>>>,
    pub(crate) async_events: Mutex<VecDeque<AsyncEvent>>,
    pub(crate) async_ready: Condvar,
    tap: Mutex<Option<Tap>>,
    shutdown: AtomicBool,
    /// When the NIC thread will wake by itself (ns since epoch; u64::MAX when not parked).
    parked_until_ns: AtomicU64,
    spin: Duration,
    /// The NIC thread, joined on drop so the port (and its inbox segment) is gone when the
    /// last handle is.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Device {
    pub(crate) fn start(name: String, nic: Nic, port: Arc<dyn Port>) -> Arc<Device> {
        let spin = std::env::var("SOFTVERBS_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(DEFAULT_SPIN);
        let dev = Arc::new(Device {
            name,
            nic: Mutex::new(nic),
            port,
            epoch: Instant::now(),
            backlog: Mutex::new(VecDeque::new()),
            cqs: Mutex::new(BTreeMap::new()),
            async_events: Mutex::new(VecDeque::new()),
            async_ready: Condvar::new(),
            tap: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            parked_until_ns: AtomicU64::new(u64::MAX),
            spin,
            thread: Mutex::new(None),
        });
        // The port comes up as the device starts (IBV_EVENT_PORT_ACTIVE).
        dev.async_events.lock().unwrap_or_else(|e| e.into_inner()).push_back(AsyncEvent {
            event_type: verbs_api::AsyncEventType::PortActive,
            element: verbs_api::AsyncElement::Port(1),
        });
        let weak = Arc::downgrade(&dev);
        let port = dev.port.clone();
        let thread_name = format!("{}-nic", dev.name);
        let handle = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || nic_thread(weak, port))
            .expect("spawning the NIC thread");
        *dev.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        dev
    }

    /// Nanoseconds of the device's monotonic clock.
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Nic> {
        self.nic.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_tap(&self, tap: Option<Tap>) {
        *self.tap.lock().unwrap_or_else(|e| e.into_inner()) = tap;
    }

    /// One round of progress: take what the inbox holds, fire due timers, send what the
    /// engine has, deliver events. Returns whether anything happened. No system calls unless
    /// a peer must be woken.
    pub(crate) fn progress(&self) -> bool {
        let mut nic = self.lock();
        self.progress_locked(&mut nic)
    }

    pub(crate) fn progress_locked(&self, nic: &mut Nic) -> bool {
        let now = self.now();
        let tap = self.tap.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let received = self.port.recv_burst(RX_BURST, &mut |pkt| {
            if let Some(t) = &tap {
                t(TapDir::Rx, pkt);
            }
            nic.handle_packet(now, pkt);
        });
        let mut did = received > 0;
        if nic.next_timeout().is_some_and(|t| t <= now) {
            nic.handle_timeout(now);
            did = true;
        }
        did |= self.flush_tx(nic, tap.as_ref());
        while let Some(ev) = nic.poll_event() {
            did = true;
            self.deliver(ev);
        }
        // A timer armed by this round may be earlier than the NIC thread's wake-up.
        if let Some(t) = nic.next_timeout() {
            // Only a parked NIC thread needs waking; while it runs it sees the timer itself.
            let parked_until = self.parked_until_ns.load(Ordering::Acquire);
            if parked_until != u64::MAX && t < parked_until {
                self.port.unpark();
            }
        }
        did
    }

    fn flush_tx(&self, nic: &mut Nic, tap: Option<&Tap>) -> bool {
        let mut backlog = self.backlog.lock().unwrap_or_else(|e| e.into_inner());
        let mut did = false;
        loop {
            let t = match backlog.pop_front() {
                Some(t) => t,
                None => match nic.poll_transmit() {
                    Some(t) => t,
                    None => break,
                },
            };
            match self.port.send(t.dst, &t.data) {
                SendOutcome::Sent | SendOutcome::Unreachable => {
                    if let Some(tap) = tap {
                        tap(TapDir::Tx, &t.data);
                    }
                    did = true;
                }
                SendOutcome::Full => {
                    // Backpressure, not loss: keep it (and everything after it) for later.
                    backlog.push_front(t);
                    while let Some(t) = nic.poll_transmit() {
                        backlog.push_back(t);
                    }
                    break;
                }
            }
        }
        did
    }

    fn deliver(&self, ev: NicEvent) {
        match ev {
            NicEvent::CqNotify(id) => {
                let cq = self
                    .cqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&id)
                    .and_then(Weak::upgrade);
                if let Some(cq) = cq {
                    if let Some(ch) = cq.channel.clone() {
                        let ops: Arc<dyn CqOps> = cq;
                        ch.notify(ops);
                    }
                }
            }
            NicEvent::Async(ev) => {
                self.async_events.lock().unwrap_or_else(|e| e.into_inner()).push_back(ev);
                self.async_ready.notify_all();
            }
        }
    }

    /// How long the NIC thread may sleep: until the next timer, at most [`MAX_PARK`].
    fn park_budget(&self) -> (Duration, u64) {
        let now = self.now();
        let next = self.lock().next_timeout();
        let until = match next {
            Some(t) => t.min(now + MAX_PARK.as_nanos() as u64),
            None => now + MAX_PARK.as_nanos() as u64,
        };
        (Duration::from_nanos(until.saturating_sub(now)), until)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        self.port.unpark();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            // The NIC thread itself may drop the last reference (it upgrades briefly); it
            // cannot join itself, and it is about to return anyway.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// The NIC thread: progress while there is work, spin a while, then park on the doorbell.
fn nic_thread(dev: Weak<Device>, port: Arc<dyn Port>) {
    let mut last_work = Instant::now();
    loop {
        let Some(d) = dev.upgrade() else { return };
        if d.shutdown.load(Ordering::Acquire) {
            return;
        }
        if d.progress() {
            last_work = Instant::now();
            continue;
        }
        if last_work.elapsed() < d.spin {
            drop(d);
            std::hint::spin_loop();
            continue;
        }
        let (budget, until) = d.park_budget();
        d.parked_until_ns.store(until, Ordering::Release);
        drop(d); // never keep the device alive while asleep
        if !budget.is_zero() {
            port.park(budget);
        }
        if let Some(d) = dev.upgrade() {
            d.parked_until_ns.store(u64::MAX, Ordering::Release);
        }
        let now = Instant::now();
        last_work = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
    }
}
