//! The completion queue (`struct ibv_cq`) and the completion channel that wakes its waiters
//! (`struct ibv_comp_channel`): the traits a backend implements and the handles a program holds.

use std::any::Any;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Errno, Error, Result};
use crate::types::WorkCompletion;

/// A completion queue (`struct ibv_cq`), as a backend implements it; programs hold a
/// [`CompletionQueue`].
pub trait CqOps: Send + Sync {
    /// `ibv_poll_cq`: fill up to `wc.len()` completions; returns how many. An overrun CQ is an error.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// `ibv_req_notify_cq`.
    fn req_notify(&self, solicited_only: bool) -> Result<()>;
    /// The capacity (`cq->cqe`).
    fn cqe(&self) -> u32;
    /// `ibv_resize_cq`.
    fn resize(&self, cqe: u32) -> Result<()> {
        let _ = cqe;
        Err(Error::new(Errno::NotSup, "ibv_resize_cq: not supported by this device yet"))
    }
    /// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
    fn destroy(&self) -> Result<()>;
    /// A backend-unique id, to tell CQs apart in events.
    fn id(&self) -> u64;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A completion queue (`struct ibv_cq`).
#[derive(Clone)]
pub struct CompletionQueue {
    pub(super) ops: Arc<dyn CqOps>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompletionQueue(cqe={})", self.cqe())
    }
}

impl PartialEq for CompletionQueue {
    fn eq(&self, other: &Self) -> bool {
        self.ops.id() == other.ops.id()
    }
}

impl CompletionQueue {
    /// Wrap a backend CQ.
    pub fn from_ops(ops: Arc<dyn CqOps>) -> CompletionQueue {
        CompletionQueue { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn CqOps> {
        &self.ops
    }
    /// `ibv_poll_cq`: up to `wc.len()` completions, oldest first; returns how many were written.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.ops.poll(wc)
    }
    /// `ibv_req_notify_cq`: arm the CQ for the next completion (or the next solicited one).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.ops.req_notify(solicited_only)
    }
    /// `cq->cqe`: the capacity.
    pub fn cqe(&self) -> u32 {
        self.ops.cqe()
    }
    /// `ibv_resize_cq`.
    pub fn resize(&self, cqe: u32) -> Result<()> {
        self.ops.resize(cqe)
    }
    /// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
    /// Poll until `n` completions have arrived or `timeout` passes (a bounded busy-poll helper;
    /// not a libibverbs call). Returns what arrived, oldest first; `ETIMEDOUT` names how many were missing.
    pub fn poll_n(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let mut buf = [WorkCompletion::default(); 16];
        let mut spins = 0u32;
        while out.len() < n {
            let want = (n - out.len()).min(buf.len());
            let got = self.poll(&mut buf[..want])?;
            out.extend_from_slice(&buf[..got]);
            if got == 0 {
                if std::time::Instant::now() >= deadline {
                    return Err(Error::new(
                        Errno::TimedOut,
                        format!(
                            "poll_n: {} of {n} completions arrived within {timeout:?}: {out:?}",
                            out.len()
                        ),
                    ));
                }
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        Ok(out)
    }
}

/// A completion channel (`struct ibv_comp_channel`), as a backend implements it; programs
/// hold a [`CompChannel`].
pub trait CompChannelOps: Send + Sync {
    /// `ibv_get_cq_event`, bounded by `timeout` (`None` waits forever): the CQ that has an event.
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>>;
    /// `ibv_ack_cq_events`.
    fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32);
    /// The channel's file descriptor (`channel->fd`; see [`CompChannel::fd`]). A backend
    /// without one says `EOPNOTSUPP`, as this default does.
    fn fd(&self) -> Result<RawFd> {
        Err(Error::new(Errno::NotSup, "this backend's completion channels have no fd"))
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A completion channel (`struct ibv_comp_channel`).
#[derive(Clone)]
pub struct CompChannel {
    pub(super) ops: Arc<dyn CompChannelOps>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompChannel")
    }
}

impl CompChannel {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn CompChannelOps> {
        &self.ops
    }
    /// `ibv_get_cq_event`: block until an armed CQ gets a completion, or `timeout` (`ETIMEDOUT`).
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<CompletionQueue> {
        Ok(CompletionQueue { ops: self.ops.get_cq_event(timeout)? })
    }
    /// `ibv_ack_cq_events`.
    pub fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32) {
        self.ops.ack_cq_events(cq, nevents)
    }
    /// The channel's file descriptor (`channel->fd`), for programs that wait in `poll` or
    /// `epoll` with other fds: readable exactly while an event is queued, as the kernel's
    /// completion event file is. Take the events with `get_cq_event(Some(Duration::ZERO))`
    /// until it says `ETIMEDOUT`; do not read the fd yourself. It belongs to the channel (do
    /// not close it) and stays open while the channel or a CQ bound to it lives. The soft
    /// backend makes it the first time it is asked for; `EOPNOTSUPP` where a backend has none
    /// (the simulator, whose waits are in virtual time).
    pub fn fd(&self) -> Result<RawFd> {
        self.ops.fd()
    }
}
