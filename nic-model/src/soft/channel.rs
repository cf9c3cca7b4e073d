//! A soft completion channel's queue of events: filled by whoever pushes a completion to an
//! armed CQ (the NIC thread, or a program thread in a verb), emptied by `ibv_get_cq_event`, and
//! mirrored, once a program asks for the channel's fd, by an eventfd that is readable exactly
//! while an event is queued — as the kernel's uverbs completion event file is.
//!
//! The eventfd is in semaphore mode and its count is the queue's length: every change of the
//! queue and of the count happens under the queue's lock (a push writes 1, a pop or a purge
//! reads 1 per event), so a read made there never blocks, whatever the program did to the
//! fd's `O_NONBLOCK`. A program blocks on the fd itself (`poll`, `epoll`), outside the lock;
//! nothing wakes periodically.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use verbs_api::{Errno, Error, Result};

use super::{Port, SoftCq};

/// How often [`ChannelInner::wait_interruptible`] looks whether the device was closed.
const CLOSE_LOOK: Duration = Duration::from_millis(100);

/// What [`ChannelInner::watch`] found.
pub(crate) enum Watch {
    /// The oldest event, taken.
    Event(Arc<SoftCq>),
    /// The device was closed.
    Closed,
    /// None queued: the next event, or the close, unparks the port's doorbell.
    Watching,
}

/// The events of one completion channel. It holds CQs weakly: the NIC thread queues
/// notifications without keeping a CQ (and so the device) alive.
#[derive(Default)]
pub(crate) struct ChannelInner {
    queue: Mutex<Queue>,
    /// Signalled when an event is queued while a thread waits in [`ChannelInner::wait`], and
    /// when the device closes.
    ready: Condvar,
    /// The eventfd behind the channel's fd, once asked for ([`ChannelInner::fd`]).
    fd: OnceLock<OwnedFd>,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Weak<SoftCq>>,
    /// Threads waiting on `ready`: a push signals the condition variable only when there are
    /// some (a C program waits on the fd instead).
    waiters: usize,
    /// The device was closed: waiters give up.
    closed: bool,
    /// The doorbell a thread blocked in `ibv_get_cq_event` sleeps on while it runs the engine
    /// itself (`Core::drive_until_event`): a push, or the close, rings it.
    bell: Option<Arc<dyn Port>>,
}

impl ChannelInner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CQ `cq` got a completion while armed: queue its event, and make the fd readable
    /// and wake the waiters now.
    pub(crate) fn notify(&self, cq: Weak<SoftCq>) {
        let mut q = self.lock();
        q.events.push_back(cq);
        if let Some(fd) = self.fd.get() {
            add(fd, 1);
        }
        if q.waiters > 0 {
            self.ready.notify_all();
        }
        if let Some(b) = &q.bell {
            b.unpark();
        }
    }

    /// The CQ `cq` was destroyed: its events that nobody took are gone, as the kernel purges
    /// them from the completion event file.
    pub(crate) fn purge(&self, cq: &Weak<SoftCq>) {
        let mut q = self.lock();
        let before = q.events.len();
        q.events.retain(|e| !Weak::ptr_eq(e, cq));
        if let Some(fd) = self.fd.get() {
            for _ in q.events.len()..before {
                take(fd);
            }
        }
    }

    /// The device was closed: threads waiting for an event give up (`EIO`).
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        self.ready.notify_all();
        if let Some(b) = &q.bell {
            b.unpark();
        }
    }

    /// For a thread about to sleep on `bell` (the device's doorbell) while it runs the
    /// engine: the oldest event if one is queued; otherwise the next push (or the close)
    /// unparks `bell`, until [`ChannelInner::unwatch`].
    pub(crate) fn watch(&self, bell: &Arc<dyn Port>) -> Watch {
        let mut q = self.lock();
        if let Some(cq) = self.pop(&mut q) {
            return Watch::Event(cq);
        }
        if q.closed {
            return Watch::Closed;
        }
        q.bell = Some(bell.clone());
        Watch::Watching
    }

    /// The thread that watched is awake: pushes ring nothing from now on.
    pub(crate) fn unwatch(&self) {
        self.lock().bell = None;
    }

    /// The oldest event, if one is queued (no waiting).
    pub(crate) fn try_pop(&self) -> Option<Arc<SoftCq>> {
        self.pop(&mut self.lock())
    }

    fn pop(&self, q: &mut Queue) -> Option<Arc<SoftCq>> {
        while let Some(cq) = q.events.pop_front() {
            if let Some(fd) = self.fd.get() {
                take(fd);
            }
            // Purged when destroyed, so always alive; a dead one has no one to go to.
            if let Some(cq) = cq.upgrade() {
                return Some(cq);
            }
        }
        None
    }

    /// The oldest event, waiting for one until `timeout` passes (`None`: forever): `Err(None)`
    /// when it passes, `Err(Some(EIO))` once the device is closed.
    pub(crate) fn wait(
        &self,
        timeout: Option<Duration>,
    ) -> std::result::Result<Arc<SoftCq>, Option<Error>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.lock();
        loop {
            if let Some(cq) = self.pop(&mut q) {
                return Ok(cq);
            }
            if q.closed {
                return Err(Some(Error::new(Errno::Io, "ibv_get_cq_event: the device was closed")));
            }
            q.waiters += 1;
            q = match deadline {
                None => self.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        q.waiters -= 1;
                        return Err(None);
                    }
                    self.ready.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
            q.waiters -= 1;
        }
    }

    /// As [`ChannelInner::wait`], for a channel whose fd a program asked for (every C
    /// program's): it sleeps in `ppoll` on the fd, so that a signal handler cuts the wait
    /// short as it cuts the kernel's read of the event file short: `Err(Some(EINTR))` unless
    /// the program's handlers restart ([`crate::wire::os::handlers_restart`]). The close
    /// writes nothing to the fd: the wait looks again every 100 ms.
    pub(crate) fn wait_interruptible(
        &self,
        timeout: Option<Duration>,
    ) -> std::result::Result<Arc<SoftCq>, Option<Error>> {
        let Some(fd) = self.fd.get().map(|f| f.as_raw_fd()) else { return self.wait(timeout) };
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            {
                let mut q = self.lock();
                if let Some(cq) = self.pop(&mut q) {
                    return Ok(cq);
                }
                if q.closed {
                    return Err(Some(Error::new(
                        Errno::Io,
                        "ibv_get_cq_event: the device was closed",
                    )));
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(None);
            }
            let slice = left.unwrap_or(CLOSE_LOOK).min(CLOSE_LOOK);
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::c_long::from(slice.subsec_nanos() as i32),
            };
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, a valid timespec, no sigmask.
            let rc = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
            let eintr =
                rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
            if eintr && !crate::wire::os::handlers_restart() {
                return Err(Some(Error::new(
                    Errno::Intr,
                    "ibv_get_cq_event: a signal handler installed without SA_RESTART ran",
                )));
            }
        }
    }

    /// The channel's fd (`channel->fd`): an eventfd readable exactly while an event is queued,
    /// made the first time it is asked for and closed with the channel.
    pub(crate) fn fd(&self) -> Result<RawFd> {
        let q = self.lock();
        if let Some(fd) = self.fd.get() {
            return Ok(fd.as_raw_fd());
        }
        // SAFETY: a plain system call; semaphore mode makes one read take one event.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::new(
                Errno::from_code(e.raw_os_error().unwrap_or(libc::EMFILE)),
                format!("ibv_create_comp_channel: no eventfd for the channel's fd: {e}"),
            ));
        }
        // SAFETY: raw is the eventfd just made, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Events queued before the fd existed count too.
        add(&fd, q.events.len() as u64);
        let _ = self.fd.set(fd);
        Ok(raw)
    }
}

/// Adds `n` to the eventfd's count (nothing for 0).
fn add(fd: &OwnedFd, n: u64) {
    if n == 0 {
        return;
    }
    // SAFETY: an open eventfd and 8 bytes; the count cannot overflow (one per queued event).
    unsafe { libc::write(fd.as_raw_fd(), &n as *const u64 as *const c_void, 8) };
}

/// Takes 1 from the eventfd's count. Called under the queue's lock for an event it held, so
/// the count is at least 1 and the read does not block.
fn take(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: an open eventfd and 8 bytes.
    unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut c_void, 8) };
}
