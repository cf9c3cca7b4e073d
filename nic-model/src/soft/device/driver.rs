//! A program thread blocked in `ibv_get_cq_event` runs the engine itself: it parks on the
//! inbox doorbell, so the datagram that brings its completion wakes it once, as rxe's softirq
//! does the work and wakes the waiter; the NIC thread stands by meanwhile (docs/decisions.md,
//! "The waiter runs the engine").
//!
//! The doorbell has one sleeper at a time ([`Core::doorbell`]): the NIC thread or one such
//! waiter. A second waiter, or one that cannot have the doorbell soon, waits as before, on
//! the channel, with the engine handed to the NIC thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs_api::{Errno, Error};

use super::{Core, Round};
use crate::cost::{self, Syscall};
use crate::soft::channel::Watch;
use crate::soft::{ChannelInner, SoftCq};

/// Nobody sleeps on the doorbell (or the NIC thread runs, spins or stands by).
pub(crate) const BELL_FREE: u8 = 0;
/// The NIC thread is about to park, or is parked, on the doorbell.
pub(crate) const BELL_NIC: u8 = 1;
/// A thread blocked in `ibv_get_cq_event` drives the engine and sleeps on the doorbell.
pub(crate) const BELL_WAITER: u8 = 2;
/// Such a thread returned with its event, and the program calls in (it is expected back in
/// `ibv_get_cq_event` soon): the NIC thread still stands by, for one standby interval, and
/// arming a CQ does not wake it.
pub(crate) const BELL_LENT: u8 = 3;

/// How long a waiter that finds the NIC thread on the doorbell, having woken it, yields for it
/// to leave before it waits on the channel instead (the thread leaves as soon as it runs).
const TAKE_BELL_WITHIN: Duration = Duration::from_millis(1);

/// What [`Core::drive_until_event`] came to.
pub(crate) enum Driven {
    /// The channel's oldest event.
    Event(Arc<SoftCq>),
    /// The timeout passed with no event.
    TimedOut,
    /// The device was closed.
    Closed(Error),
    /// The doorbell is another's: wait on the channel, with the engine handed over.
    Busy,
    /// A signal handler ran while this thread slept, and it was not installed with
    /// `SA_RESTART` ([`crate::wire::os::handlers_restart`]): `EINTR`, as the kernel's read
    /// of the event file fails.
    Interrupted,
}

impl Core {
    /// Takes the doorbell for a waiter: free, or the NIC thread's, which is woken off it
    /// (and, seeing [`Core::bell_wanted`], does not park there again meanwhile).
    fn take_bell(&self) -> bool {
        let mut since: Option<Instant> = None;
        let taken = loop {
            let now = self.doorbell.load(Ordering::Acquire);
            let from = if now == BELL_LENT { BELL_LENT } else { BELL_FREE };
            match self.doorbell.compare_exchange(
                from,
                BELL_WAITER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.drives.fetch_add(1, Ordering::Relaxed);
                    break true;
                }
                Err(BELL_WAITER) => break false,
                Err(BELL_LENT | BELL_FREE) => {}
                Err(_) => {
                    // The NIC thread sleeps there (or is about to): it leaves once woken.
                    let since = *since.get_or_insert_with(|| {
                        self.bell_wanted.store(true, Ordering::Release);
                        Instant::now()
                    });
                    if since.elapsed() >= TAKE_BELL_WITHIN {
                        break false;
                    }
                    self.port.unpark();
                    std::thread::yield_now();
                }
            }
        };
        if since.is_some() {
            self.bell_wanted.store(false, Ordering::Release);
        }
        taken
    }

    /// `ibv_get_cq_event` on `ch` with none queued: run the engine on this thread until an
    /// event is queued on `ch`, parking on the doorbell between rounds (until a datagram
    /// comes, the next timer, another thread queues an event, or the device closes).
    pub(crate) fn drive_until_event(&self, ch: &ChannelInner, timeout: Option<Duration>) -> Driven {
        if !self.take_bell() {
            return Driven::Busy;
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut interrupted = false;
        let out = loop {
            if self.shutdown.load(Ordering::Acquire) {
                break closed();
            }
            let did = {
                let mut st = self.lock();
                self.progress_inline(&mut st, Round::Full)
            };
            match ch.watch(&self.port) {
                Watch::Event(cq) => break Driven::Event(cq),
                Watch::Closed => break closed(),
                Watch::Watching => {}
            }
            if interrupted && !crate::wire::os::handlers_restart() {
                ch.unwatch();
                break Driven::Interrupted;
            }
            interrupted = false;
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                ch.unwatch();
                break Driven::TimedOut;
            }
            if did {
                ch.unwatch();
                continue;
            }
            let (mut budget, until) = self.park_budget();
            if let Some(l) = left {
                budget = budget.min(l);
            }
            self.parked_until_ns.store(until, Ordering::Release);
            interrupted = self.port.park_interruptible(budget);
            self.parked_until_ns.store(u64::MAX, Ordering::Release);
            ch.unwatch();
        };
        // The NIC thread stood by for us. Wake it if the program may now sleep elsewhere (a
        // CQ is still armed, another thread handed the engine over) or if it may sleep for
        // long (it does so only once it saw us wait a standby interval); otherwise lend it
        // the doorbell back: the program calls in.
        let armed = self.armed_cqs.load(Ordering::Acquire) != 0;
        if armed || self.takeover.load(Ordering::Acquire) || start.elapsed() >= self.standby {
            self.doorbell.store(BELL_FREE, Ordering::Release);
            if let Some(t) = self.nic_thread.get() {
                cost::syscalls(Syscall::Unpark, 1);
                t.unpark();
            }
        } else {
            self.doorbell.store(BELL_LENT, Ordering::Release);
        }
        out
    }
}

fn closed() -> Driven {
    Driven::Closed(Error::new(Errno::Io, "ibv_get_cq_event: the device was closed"))
}
