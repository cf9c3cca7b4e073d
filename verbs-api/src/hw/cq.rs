//! Completion queues (`struct ibv_cq`) and completion channels (`struct ibv_comp_channel`),
//! with the registry that maps a CQ event back to its handle.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_resize_cq, ibv_wc,
};

use super::convert::wc_from_ibv;
use super::sys::{self, Guarded, Owned};
use super::{downcast, next_key, object_id, same_context, HwContext};
use crate::error::{Errno, Error, Result};
use crate::object::{CompChannel, CompletionQueue};
use crate::provider::*;
use crate::types::*;

/// How many completions one `poll_cq` call fetches at most (a stack buffer, no allocation).
const POLL_BATCH: usize = 16;

/// A completion queue (`ibv_create_cq`; `ibv_destroy_cq` on [`CqOps::destroy`] or drop).
pub struct HwCq {
    raw: Guarded<ibv_cq>,
    pub(crate) ctx: Arc<HwContext>,
    channel: Option<CompChannel>,
    key: usize,
    cqe: AtomicU32,
}

impl HwCq {
    pub(crate) fn create(
        ctx: Arc<HwContext>,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<HwCq>> {
        let call = format!("ibv_create_cq(cqe {cqe}, comp_vector {comp_vector})");
        let ch = match channel {
            Some(c) => {
                let hw = downcast::<HwCompChannel>(c.ops().as_any(), "ibv_create_cq", "channel")?;
                same_context("ibv_create_cq", &hw.ctx, &ctx, "completion channel")?;
                hw.ch.as_ptr()
            }
            None => std::ptr::null_mut(),
        };
        let n = sys::to_c_int("ibv_create_cq: cqe", cqe)?;
        let vector = sys::to_c_int("ibv_create_cq: comp_vector", comp_vector)?;
        let key = next_key();
        sys::clear_errno();
        // SAFETY: the context and the channel (if any) are alive (held by Arcs); cq_context
        // is an integer key, never dereferenced.
        let raw = unsafe {
            ibv_create_cq(ctx.as_ptr(), n, std::ptr::without_provenance_mut(key), ch, vector)
        };
        let raw = sys::check_ptr(&call, raw)?;
        // SAFETY: a fresh CQ; `cqe` is the capacity the provider granted.
        let granted = unsafe { (*raw.as_ptr()).cqe };
        let cq = Arc::new(HwCq {
            raw: Guarded::new(raw, "completion queue"),
            ctx,
            channel: channel.cloned(),
            key,
            cqe: AtomicU32::new(u32::try_from(granted).unwrap_or(cqe)),
        });
        if let Some(ch) = cq.hw_channel() {
            ch.lock_cqs().insert(key, Arc::downgrade(&cq));
        }
        Ok(cq)
    }

    /// The `struct ibv_cq *`, for FFI; null once destroyed.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.raw.peek()
    }

    pub(crate) fn live(&self, call: &str) -> Result<sys::Live<'_, ibv_cq>> {
        self.raw.live(call)
    }

    fn hw_channel(&self) -> Option<&HwCompChannel> {
        self.channel.as_ref().and_then(|c| c.ops().as_any().downcast_ref::<HwCompChannel>())
    }

    fn unregister(&self) {
        if let Some(ch) = self.hw_channel() {
            ch.lock_cqs().remove(&self.key);
        }
    }
}

impl Drop for HwCq {
    fn drop(&mut self) {
        self.unregister();
        // SAFETY: last reference; QPs hold their CQs, so none uses it; its events were
        // acknowledged when read, so ibv_destroy_cq does not wait.
        self.raw.destroy_on_drop(|cq| unsafe { ibv_destroy_cq(cq) });
    }
}

impl CqOps for HwCq {
    /// `ibv_poll_cq` (through `context->ops.poll_cq`), in batches of up to 16. If the provider
    /// fails after some completions were taken, those are returned and the next poll reports
    /// the failure.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let live = self.raw.live("ibv_poll_cq")?;
        let cq = live.ptr();
        // SAFETY: the CQ is live, so is its context; `ops` is a table of function pointers.
        let poll_cq = unsafe { (*(*cq).context).ops.poll_cq }
            .ok_or_else(|| Error::new(Errno::NotSup, "ibv_poll_cq: the provider has no poll_cq"))?;
        let mut buf: [MaybeUninit<ibv_wc>; POLL_BATCH] =
            [const { MaybeUninit::uninit() }; POLL_BATCH];
        let mut done = 0;
        while done < wc.len() {
            let want = (wc.len() - done).min(POLL_BATCH);
            // SAFETY: `buf` has room for `want` (<= POLL_BATCH) entries; the CQ is live.
            let n = unsafe { poll_cq(cq, want as c_int, buf.as_mut_ptr().cast()) };
            if n < 0 {
                if done > 0 {
                    break;
                }
                return Err(Error::new(
                    Errno::Io,
                    format!("ibv_poll_cq failed (returned {n}): the CQ may have overrun"),
                ));
            }
            let n = (n as usize).min(want);
            for (out, raw) in wc[done..done + n].iter_mut().zip(&buf[..n]) {
                // SAFETY: poll_cq initialized the first `n` entries.
                *out = wc_from_ibv(unsafe { raw.assume_init_ref() });
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// `ibv_req_notify_cq` (through `context->ops.req_notify_cq`).
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let live = self.raw.live("ibv_req_notify_cq")?;
        let cq = live.ptr();
        // SAFETY: the CQ is live, so is its context.
        let notify = unsafe { (*(*cq).context).ops.req_notify_cq }.ok_or_else(|| {
            Error::new(Errno::NotSup, "ibv_req_notify_cq: the provider has no req_notify_cq")
        })?;
        sys::clear_errno();
        // SAFETY: the CQ is live.
        let rc = unsafe { notify(cq, c_int::from(solicited_only)) };
        sys::check_rc("ibv_req_notify_cq", rc)
    }

    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }

    /// `ibv_resize_cq`; [`CqOps::cqe`] then reports the capacity the provider granted.
    fn resize(&self, cqe: u32) -> Result<()> {
        let call = format!("ibv_resize_cq(cqe {cqe})");
        let live = self.raw.live(&call)?;
        let n = sys::to_c_int("ibv_resize_cq: cqe", cqe)?;
        sys::clear_errno();
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_resize_cq(live.ptr(), n) };
        sys::check_rc(&call, rc)?;
        // SAFETY: the CQ is live; the provider updated `cqe`.
        let granted = unsafe { (*live.ptr()).cqe };
        self.cqe.store(u32::try_from(granted).unwrap_or(cqe), Ordering::Relaxed);
        Ok(())
    }

    /// `ibv_destroy_cq`: the kernel answers `EBUSY` while a QP uses the CQ.
    fn destroy(&self) -> Result<()> {
        // SAFETY: the write lock excludes every other use of the CQ pointer.
        self.raw.destroy("ibv_destroy_cq", |cq| unsafe { ibv_destroy_cq(cq) })?;
        self.unregister();
        Ok(())
    }

    fn id(&self) -> u64 {
        object_id(self.key)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A completion channel (`ibv_create_comp_channel`; `ibv_destroy_comp_channel` on drop, which
/// happens after every CQ that uses it is gone, since each holds the channel).
pub struct HwCompChannel {
    ch: Owned<ibv_comp_channel>,
    ctx: Arc<HwContext>,
    /// The CQs on this channel by key (their `cq_context`), to turn an event into a handle.
    cqs: Mutex<HashMap<usize, Weak<HwCq>>>,
}

impl HwCompChannel {
    pub(crate) fn create(ctx: Arc<HwContext>) -> Result<Arc<HwCompChannel>> {
        sys::clear_errno();
        // SAFETY: the context is open (held by the Arc).
        let ch = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        let ch = sys::check_ptr("ibv_create_comp_channel", ch)?;
        let ch =
            Arc::new(HwCompChannel { ch: Owned::new(ch), ctx, cqs: Mutex::new(HashMap::new()) });
        // On failure `ch` is dropped here, which destroys the channel.
        sys::set_nonblocking("ibv_create_comp_channel: fd", ch.fd())?;
        Ok(ch)
    }

    /// The `struct ibv_comp_channel *`, for FFI. Valid while this object is.
    pub fn as_ptr(&self) -> *mut ibv_comp_channel {
        self.ch.as_ptr()
    }

    fn fd(&self) -> c_int {
        // SAFETY: the channel is alive; `fd` is a plain field.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    fn lock_cqs(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Weak<HwCq>>> {
        self.cqs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HwCompChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on the channel holds it, so none is left; destroyed once.
        unsafe { ibv_destroy_comp_channel(self.ch.as_ptr()) };
    }
}

impl CompChannelOps for HwCompChannel {
    /// `poll(2)` on the channel's fd bounded by `timeout`, then `ibv_get_cq_event`, and at once
    /// `ibv_ack_cq_events(cq, 1)`: acknowledging before anything else means a concurrent
    /// `ibv_destroy_cq` (which waits for every event to be acknowledged) can never wait on us.
    /// Events of CQs that were dropped or destroyed meanwhile are skipped.
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        let deadline = sys::deadline(timeout);
        loop {
            if !sys::wait_readable("ibv_get_cq_event", self.fd(), deadline)? {
                return Err(Error::new(
                    Errno::TimedOut,
                    format!("ibv_get_cq_event: no completion event within {timeout:?}"),
                ));
            }
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut cq_context = std::ptr::null_mut();
            sys::clear_errno();
            // SAFETY: the channel is alive; both out-parameters are valid.
            let rc = unsafe { ibv_get_cq_event(self.ch.as_ptr(), &mut cq, &mut cq_context) };
            if rc != 0 {
                match sys::rc_errno(rc) {
                    // Another thread took the event, or a signal interrupted the read.
                    libc::EAGAIN | libc::EINTR => continue,
                    e => return Err(sys::call_error("ibv_get_cq_event", e)),
                }
            }
            // SAFETY: `cq` was just returned with an unacknowledged event, so it cannot have
            // been destroyed (ibv_destroy_cq waits for this acknowledgement).
            unsafe { ibv_ack_cq_events(cq, 1) };
            let found = self.lock_cqs().get(&cq_context.addr()).and_then(Weak::upgrade);
            if let Some(cq) = found {
                if !cq.as_ptr().is_null() {
                    return Ok(cq);
                }
            }
        }
    }

    /// `ibv_ack_cq_events`: nothing left to do, since [`CompChannelOps::get_cq_event`]
    /// acknowledges each event as it reads it.
    fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32) {
        let _ = (cq, nevents);
    }

    /// The channel's own fd, which libibverbs reads events from.
    fn fd(&self) -> Result<std::os::fd::RawFd> {
        Ok(HwCompChannel::fd(self))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
