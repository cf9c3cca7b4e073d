//! The NIC thread of a soft device: when it stands by for the program, when it runs the
//! engine, spins and parks, and how it tells a program that polls memory from one that calls
//! in (see the parent module, "Who runs the engine").

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{BELL_FREE, BELL_LENT, BELL_NIC, BELL_WAITER};
use super::{Core, MAX_PARK};
use crate::cost::{self, Syscall};
use crate::wire::os;

/// Standby intervals in a row after which the NIC thread makes itself a background thread
/// (`SCHED_BATCH` on Linux) until it takes over again, so that its wake-ups never preempt a
/// busy-polling thread; not at once, so that a program blocking in a verb for every message
/// pays no switch (docs/decisions.md, "Background standby").
const BACKGROUND_AFTER_STANDBYS: u32 = 4;

/// How long a standby look that finds a datagram in the inbox waits for the program to take it
/// (an inline round) before it concludes that the program polls memory, not a CQ, and the NIC
/// thread takes over for it (docs/decisions.md, "A target polling memory"). A program that
/// calls in runs a round every microsecond or so; a look waits this only when a datagram waits.
const LEFT_BEHIND_GRACE: Duration = Duration::from_micros(50);

/// Doorbell wake-ups in a row, with the program calling in, whose round found nothing left to
/// do (the program had taken the datagram itself) after which a NIC thread serving a program
/// that polls memory stands by again.
const IDLE_WAKES_TO_STANDBY: u32 = 64;

impl Core {
    /// A standby look: whether the program, although it called in since the last look
    /// (`rounds` inline rounds so far), leaves a datagram in the inbox that only the NIC will
    /// take: a one-sided request (`Port::one_sided_waits`: it completes nothing, so a
    /// program polling its CQ has no reason to take it) waits, and no inline round runs for
    /// [`LEFT_BEHIND_GRACE`]. Then the program polls memory (as `ib_write_lat` and one-sided
    /// protocols do). The thread sleeps through the grace rather than spin: the program may
    /// be waiting for this very core. Costs a load while the inbox is empty.
    fn left_behind(&self, rounds: u64) -> bool {
        if self.port.idle() || !self.port.one_sided_waits() {
            return false;
        }
        let start = Instant::now();
        loop {
            let waited = start.elapsed();
            if waited >= LEFT_BEHIND_GRACE {
                return true;
            }
            cost::syscalls(Syscall::Park, 1);
            std::thread::park_timeout(LEFT_BEHIND_GRACE - waited);
            if self.inline_rounds.load(Ordering::Relaxed) != rounds
                || self.takeover.load(Ordering::Acquire)
                || !self.port.one_sided_waits()
            {
                return false;
            }
        }
    }
}

/// The NIC thread: stand by while the program runs the engine inline; otherwise progress while
/// there is work, spin a while, then park on the doorbell. A program that calls in but leaves
/// datagrams in the inbox (it polls memory for what they bring) is served as a sleeping one:
/// the thread does not stand by, and parks on the doorbell after each piece of work, so each
/// datagram wakes it, until such wake-ups keep finding that the program took the datagram.
pub(super) fn nic_thread(core: Arc<Core>) {
    cost::mark_nic_thread();
    let mut last_work = Instant::now();
    let mut seen_rounds = core.inline_rounds.load(Ordering::Relaxed);
    // Standby intervals in a row, and whether the thread has made itself a background thread.
    let mut standbys = 0u32;
    let mut background = false;
    // Serving a program that polls memory (see `Core::left_behind`); this loop just parked on
    // the doorbell; wake-ups in a row that found the program had done the work.
    let mut poller = false;
    let mut woke = false;
    let mut idle_wakes = 0u32;
    // When the NIC thread last saw the program call in (seen only while it serves a program
    // that polls memory).
    let mut last_call = Instant::now();
    // Looks in a row that found a waiter driving the engine (`driver.rs`), and how many
    // drives had begun at the last look.
    let mut driven_looks = 0u32;
    let mut drives_seen = core.drives.load(Ordering::Relaxed);
    let mut drive_seen_at = Instant::now();
    while !core.shutdown.load(Ordering::Acquire) {
        let bell = core.doorbell.load(Ordering::Acquire);
        if bell == BELL_WAITER || bell == BELL_LENT {
            let drives = core.drives.load(Ordering::Relaxed);
            let again = std::mem::replace(&mut drives_seen, drives) != drives;
            // Lent back, and no thread drove since the last look, or the program hands
            // the engine over: take the doorbell back and run as usual.
            let lapsed = bell == BELL_LENT
                && (driven_looks != 0 && !again || core.takeover.load(Ordering::Acquire));
            if !(lapsed
                && core
                    .doorbell
                    .compare_exchange(BELL_LENT, BELL_FREE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok())
            {
                // A thread blocked in `ibv_get_cq_event` runs the engine and sleeps on the
                // doorbell, or did and will be back: stand by. For long only while the same
                // thread waits, as it wakes us when it returns after a long wait.
                // (It waited a standby interval by then, so it wakes us: `driver.rs`.)
                if again || driven_looks == 0 {
                    drive_seen_at = Instant::now();
                }
                let long = bell == BELL_WAITER
                    && !again
                    && driven_looks != 0
                    && drive_seen_at.elapsed() >= core.standby;
                driven_looks = driven_looks.saturating_add(1);
                core.check_port();
                if let Some(c) = &core.capture {
                    // As when idle: a killed program's capture holds everything up to here.
                    c.flush();
                }
                cost::syscalls(Syscall::Park, 1);
                std::thread::park_timeout(if long { MAX_PARK } else { core.standby });
                seen_rounds = core.inline_rounds.load(Ordering::Relaxed);
                last_work = Instant::now();
                continue;
            }
        }
        driven_looks = 0;
        let rounds = core.inline_rounds.load(Ordering::Relaxed);
        let handed_over = core.takeover.swap(false, Ordering::AcqRel);
        // The program calls in and waits for no event: sleep where no sender has to wake us.
        let waits = core.armed_cqs.load(Ordering::Acquire) != 0;
        let calling_in = rounds != seen_rounds && !handed_over && !waits;
        if poller && rounds != seen_rounds {
            last_call = Instant::now();
        }
        if calling_in && !poller {
            if core.left_behind(rounds) {
                poller = true;
                idle_wakes = 0;
                last_call = Instant::now();
                tracing::debug!(device = %core.name,
                    "NIC thread: the program leaves datagrams in the inbox; serving it");
            } else {
                // The program is calling in. Sleep where no sender has to wake us.
                seen_rounds = rounds;
                standbys = standbys.saturating_add(1);
                if standbys == BACKGROUND_AFTER_STANDBYS {
                    background = os::set_background(true);
                    tracing::debug!(device = %core.name, background,
                        "NIC thread: standing by while the program drives the engine");
                }
                core.check_port();
                cost::syscalls(Syscall::Park, 1);
                std::thread::park_timeout(core.standby);
                last_work = Instant::now();
                continue;
            }
        }
        if standbys != 0 || handed_over {
            tracing::trace!(device = %core.name, handed_over, "NIC thread takes over");
        }
        standbys = 0;
        if background {
            // Taking over: an ordinary thread again (once; it is not retried).
            os::set_background(false);
            background = false;
        }
        seen_rounds = rounds;
        let after_park = std::mem::take(&mut woke);
        let did = core.progress_background();
        if did == Some(true) {
            last_work = Instant::now();
            idle_wakes = 0;
            continue;
        }
        if poller {
            // Woken, and nothing left to do: the program took the datagram itself (it holds
            // the lock, or ran a round meanwhile). Or, woken or not, it has not called in for
            // a whole standby interval: it sleeps (it only set up, say, and waits in `read`),
            // and the spin window serves it better, as it serves any program that sleeps.
            let took = after_park && (calling_in || did.is_none());
            idle_wakes += u32::from(took);
            let quiet = last_call.elapsed() >= core.standby;
            if idle_wakes >= IDLE_WAKES_TO_STANDBY || quiet {
                tracing::debug!(device = %core.name, quiet,
                    "NIC thread: the program takes its datagrams again, or sleeps");
                poller = false;
                continue;
            }
        }
        if !poller && last_work.elapsed() < core.spin {
            std::hint::spin_loop();
            continue;
        }
        core.check_port();
        if let Some(c) = &core.capture {
            // Idle: a killed program's capture holds everything up to here.
            c.flush();
        }
        let (budget, until) = core.park_budget();
        if core.bell_wanted.load(Ordering::Acquire) {
            // A waiter takes the doorbell: let it, and stand by from the next look.
            std::thread::yield_now();
            continue;
        }
        let bell = core.doorbell.compare_exchange(
            BELL_FREE,
            BELL_NIC,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if bell.is_ok() {
            core.parked_until_ns.store(until, Ordering::Release);
            if !budget.is_zero() && !core.shutdown.load(Ordering::Acquire) {
                tracing::trace!(device = %core.name, budget_ns = budget.as_nanos() as u64,
                    "NIC thread parks on the doorbell");
                core.port.park(budget);
            }
            core.parked_until_ns.store(u64::MAX, Ordering::Release);
            core.doorbell.store(BELL_FREE, Ordering::Release);
        }
        woke = true;
        // Whatever woke us, look for work at once; then spin a full window only after work.
        last_work = Instant::now().checked_sub(core.spin).unwrap_or_else(Instant::now);
    }
}
