//! The objects below a context that QPs, SRQs and AHs build on: PDs, MRs over any memory of the
//! process, CQs and their polling, completion channels (the backend's eventfd as the
//! channel's `fd`, signalled as each event is queued, so it works with `poll`/`epoll`).

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::time::Duration;

use verbs_api::{
    CompChannel, CompletionQueue, Errno, MemoryRegion, MrAdvice, ProtectionDomain, Sge,
    WorkCompletion,
};

use crate::convert::{access, wc_c};
use crate::object::{ctx_of, free, lookup, obj, track, Magic, CQS};
use crate::{refuse, refuse_err, refuse_null, set_errno};
use softverbs_cabi_abi::*;

/// A protection domain.
#[repr(C)]
pub(crate) struct Pd {
    pub c: ibv_pd,
    magic: Magic,
    pub pd: ProtectionDomain,
}

/// `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    let Some(ctx) = ctx_of("ibv_alloc_pd", c) else { return null_mut() };
    match ctx.ctx.alloc_pd() {
        Ok(pd) => {
            let b = Box::new(Pd { c: ibv_pd { context: c, handle: 0 }, magic: Magic::Pd, pd });
            Box::into_raw(b) as *mut ibv_pd
        }
        Err(e) => refuse_null("ibv_alloc_pd", e.errno.code(), &e.message),
    }
}

/// `ibv_dealloc_pd`: `EBUSY` while objects made from it live.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    let Some(pd) = obj::<Pd, _>("ibv_dealloc_pd", p, Magic::Pd) else { return libc::EINVAL };
    if let Err(e) = pd.pd.clone().dealloc() {
        return refuse_err("ibv_dealloc_pd", &e);
    }
    // SAFETY: checked live above.
    unsafe { free::<Pd, _>(p) };
    0
}

/// The tracing target of the lines that record each MR's keys and each QP's number as they are
/// made and destroyed (`SOFTVERBS_LOG=softverbs::objects=debug`): what `softverbs labs check`
/// reads to tell a stale key, a peer's key and the sender's own key apart.
pub(crate) const OBJECTS: &str = "softverbs::objects";

/// The wall clock in nanoseconds since 1970, the clock of the captures' timestamps.
pub(crate) fn wall_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// A memory region over the program's own memory.
#[repr(C)]
pub(crate) struct Mr {
    c: ibv_mr,
    magic: Magic,
    pub(crate) mr: MemoryRegion,
}

/// `IBV_ACCESS_ON_DEMAND`: register without pinning (on-demand paging).
const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;

fn reg_mr(what: &str, p: *mut ibv_pd, addr: *mut c_void, len: usize, acc: u32) -> *mut ibv_mr {
    let acc_raw = acc;
    let Some(pd) = obj::<Pd, _>(what, p, Magic::Pd) else { return null_mut() };
    let acc = match access(what, acc) {
        Ok(a) => a,
        Err(_) => return null_mut(),
    };
    let made = match acc_raw & IBV_ACCESS_ON_DEMAND {
        // SAFETY: libibverbs' contract: the memory stays valid until ibv_dereg_mr, and the program
        // does not free it while WRs use it. reg_mr_raw pins as the kernel does: a range that is
        // not mapped as the access needs (NULL included) is EFAULT, length 0 EINVAL.
        0 => unsafe { pd.pd.reg_mr_raw(addr as *mut u8, len, acc) },
        // Not pinned: the NIC pages the program's memory in at each access (rxe_odp.c).
        _ => pd.pd.reg_mr_on_demand(addr as u64, len, acc),
    };
    match made {
        Ok(mr) => {
            let c = ibv_mr {
                context: pd.c.context,
                pd: p,
                addr,
                length: len,
                handle: mr.lkey(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            };
            tracing::debug!(
                target: OBJECTS,
                "reg_mr pid={} key={:#x} addr={:#x} length={len} access={acc_raw:#x} at={}",
                std::process::id(),
                mr.rkey(),
                addr as usize,
                wall_ns()
            );
            Box::into_raw(Box::new(Mr { c, magic: Magic::Mr, mr })) as *mut ibv_mr
        }
        Err(e) => refuse_null(what, e.errno.code(), &e.message),
    }
}

/// `ibv_reg_mr`: register `len` bytes of the program's memory at `addr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    acc: c_int,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr", p, addr, len, acc as u32)
}

/// `ibv_reg_mr_iova2`: as `ibv_reg_mr`; soft MRs are addressed by virtual address, so the
/// IOVA must be `addr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    p: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    acc: u32,
) -> *mut ibv_mr {
    if iova != addr as u64 {
        return refuse_null(
            "ibv_reg_mr_iova2",
            libc::EOPNOTSUPP,
            "an IOVA other than the address is not supported",
        );
    }
    reg_mr("ibv_reg_mr_iova2", p, addr, len, acc)
}

/// `ibv_reg_mr_iova`: see [`ibv_reg_mr_iova2`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    p: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    acc: c_int,
) -> *mut ibv_mr {
    // SAFETY: same contract.
    unsafe { ibv_reg_mr_iova2(p, addr, len, iova, acc as u32) }
}

/// `ibv_dereg_mr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    let Some(mr) = obj::<Mr, _>("ibv_dereg_mr", m, Magic::Mr) else { return libc::EINVAL };
    let key = mr.c.rkey;
    if let Err(e) = mr.mr.clone().dereg() {
        return refuse_err("ibv_dereg_mr", &e);
    }
    tracing::debug!(target: OBJECTS, "dereg_mr pid={} key={key:#x} at={}", std::process::id(), wall_ns());
    // SAFETY: checked live above.
    unsafe { free::<Mr, _>(m) };
    0
}

/// A completion channel: the backend's channel, whose fd (an eventfd the backend signals as
/// it queues each event, on whichever thread pushed the completion) is `c.fd`, readable
/// exactly while `ibv_get_cq_event` would not block.
#[repr(C)]
pub(crate) struct Channel {
    c: ibv_comp_channel,
    magic: Magic,
    pub ch: CompChannel,
}

/// `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    let Some(ctx) = ctx_of("ibv_create_comp_channel", c) else { return null_mut() };
    let ch = match ctx.ctx.create_comp_channel() {
        Ok(ch) => ch,
        Err(e) => return refuse_null("ibv_create_comp_channel", e.errno.code(), &e.message),
    };
    let fd = match ch.fd() {
        Ok(fd) => fd,
        Err(e) => return refuse_null("ibv_create_comp_channel", e.errno.code(), &e.message),
    };
    let c = ibv_comp_channel { context: c, fd, refcnt: 0 };
    Box::into_raw(Box::new(Channel { c, magic: Magic::Channel, ch })) as *mut ibv_comp_channel
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it. The fd closes with it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(p: *mut ibv_comp_channel) -> c_int {
    let Some(ch) = obj::<Channel, _>("ibv_destroy_comp_channel", p, Magic::Channel) else {
        return libc::EINVAL;
    };
    if ch.c.refcnt > 0 {
        return refuse("ibv_destroy_comp_channel", libc::EBUSY, "CQs still use the channel");
    }
    // SAFETY: checked live; the backend's channel (and its fd) goes with the box.
    unsafe { free::<Channel, _>(p) };
    0
}

/// `ibv_get_cq_event`: take the oldest event and name its CQ; with none queued, block until
/// one is (running the engine meanwhile), or, on a fd the program made non-blocking, -1 with `EAGAIN`,
/// as the kernel's event file answers a read.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    p: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let Some(ch) = obj::<Channel, _>("ibv_get_cq_event", p, Magic::Channel) else { return -1 };
    // SAFETY: a plain system call on the channel's open fd.
    let nonblock = unsafe { libc::fcntl(ch.c.fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    // Blocking, this thread runs the engine until the event comes, woken once by the datagram
    // that brings it (or waits while another thread or the NIC thread does); on a fd the
    // program made non-blocking, the read's EAGAIN when none is queued.
    let cq = match ch.ch.get_cq_event(if nonblock { Some(Duration::ZERO) } else { None }) {
        Ok(cq) => cq,
        Err(e) if nonblock && e.errno == Errno::TimedOut => {
            set_errno(libc::EAGAIN);
            return -1;
        }
        Err(e) => {
            refuse_err("ibv_get_cq_event", &e);
            return -1;
        }
    };
    let cq = lookup(&CQS, cq.ops().id()) as *mut ibv_cq;
    if cq.is_null() {
        // A CQ the C library did not make (cannot be: its events are purged when destroyed).
        refuse("ibv_get_cq_event", libc::EIO, "the event's CQ is not a C CQ");
        return -1;
    }
    // SAFETY: the out pointers are the caller's; cq is a live CQ box (destroying a CQ with
    // unacknowledged events is the program's error, as in libibverbs).
    unsafe {
        if !cq_out.is_null() {
            *cq_out = cq;
        }
        if !cq_context.is_null() {
            *cq_context = (*cq).cq_context;
        }
    }
    0
}

/// A completion queue: an `ibv_cq_ex` (whose `ibv_cq` prefix is all `ibv_create_cq` users
/// see), then softverbs' CQ and the completion `ibv_start_poll`/`ibv_next_poll` last took.
#[repr(C)]
pub(crate) struct Cq {
    pub c: ibv_cq_ex,
    magic: Magic,
    pub cq: CompletionQueue,
    channel: *mut ibv_comp_channel,
    current: std::cell::UnsafeCell<WorkCompletion>,
}

impl Cq {
    /// Where `ibv_start_poll`/`ibv_next_poll` keep the completion the readers read.
    pub(crate) fn current_ptr(&self) -> *mut WorkCompletion {
        self.current.get()
    }
}

/// The CQ box behind `p`, if it is a live softverbs CQ.
#[inline]
pub(crate) fn cq_of<'a>(what: &str, p: *mut ibv_cq) -> Option<&'a Cq> {
    obj::<Cq, ibv_cq_ex>(what, p as *mut ibv_cq_ex, Magic::Cq)
}

/// Make a CQ (both `ibv_create_cq` and `ibv_create_cq_ex`, which then fills the polling entry
/// points of its `ibv_cq_ex`).
pub(crate) fn make_cq(
    what: &str,
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let Some(ctx) = ctx_of(what, c) else { return null_mut() };
    if cqe < 1 || comp_vector != 0 {
        return refuse_null(what, libc::EINVAL, "cqe < 1 or comp_vector not 0");
    }
    let ch = if channel.is_null() {
        None
    } else {
        match obj::<Channel, _>(what, channel, Magic::Channel) {
            Some(ch) => Some(ch),
            None => return null_mut(),
        }
    };
    match ctx.ctx.create_cq(cqe as u32, ch.map(|c| &c.ch), comp_vector as u32) {
        Ok(cq) => {
            // SAFETY: plain old data (the mutex and cond are never used by programs; NULL
            // function pointers).
            let mut cc: ibv_cq_ex = unsafe { std::mem::zeroed() };
            cc.cq.context = c;
            cc.cq.channel = channel;
            cc.cq.cq_context = cq_context;
            cc.cq.cqe = cq.cqe() as c_int;
            let id = cq.ops().id();
            let current = Default::default();
            let p = Box::into_raw(Box::new(Cq { c: cc, magic: Magic::Cq, cq, channel, current }));
            track(&CQS, id, Some(p as usize));
            if !channel.is_null() {
                // SAFETY: checked live above.
                unsafe { (*channel).refcnt += 1 };
            }
            p as *mut ibv_cq
        }
        Err(e) => refuse_null(what, e.errno.code(), &e.message),
    }
}

/// `ibv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    make_cq("ibv_create_cq", c, cqe, cq_context, channel, comp_vector)
}

/// `ibv_resize_cq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(p: *mut ibv_cq, cqe: c_int) -> c_int {
    let Some(cq) = cq_of("ibv_resize_cq", p) else { return libc::EINVAL };
    if cqe < 1 {
        return refuse("ibv_resize_cq", libc::EINVAL, "cqe < 1");
    }
    match cq.cq.resize(cqe as u32) {
        Ok(()) => {
            // SAFETY: checked live.
            unsafe { (*p).cqe = cq.cq.cqe() as c_int };
            0
        }
        Err(e) => refuse_err("ibv_resize_cq", &e),
    }
}

/// `ibv_destroy_cq`: `EBUSY` while QPs use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(p: *mut ibv_cq) -> c_int {
    let Some(cq) = cq_of("ibv_destroy_cq", p) else { return libc::EINVAL };
    if let Err(e) = cq.cq.clone().destroy() {
        return refuse_err("ibv_destroy_cq", &e);
    }
    track(&CQS, cq.cq.ops().id(), None);
    if !cq.channel.is_null() {
        // SAFETY: a CQ's channel cannot be destroyed while the CQ lives (refcnt).
        unsafe { (*cq.channel).refcnt -= 1 };
    }
    // SAFETY: checked live.
    unsafe { free::<Cq, ibv_cq_ex>(p as *mut ibv_cq_ex) };
    0
}

/// `ibv_ack_cq_events`.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(p: *mut ibv_cq, nevents: u32) {
    let Some(cq) = cq_of("ibv_ack_cq_events", p) else { return };
    if let Some(ch) = obj::<Channel, _>("ibv_ack_cq_events", cq.channel, Magic::Channel) {
        ch.ch.ack_cq_events(&cq.cq, nevents);
    }
    // SAFETY: checked live.
    unsafe { (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(nevents) };
}

/// `ops.poll_cq`, behind the inline `ibv_poll_cq`: up to `n` completions, or -1.
pub(crate) unsafe extern "C" fn poll_cq(p: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let Some(cq) = cq_of("ibv_poll_cq", p) else { return -1 };
    if n < 0 || (n > 0 && wc.is_null()) {
        refuse("ibv_poll_cq", libc::EINVAL, "negative count or NULL wc array");
        return -1;
    }
    let mut buf = [WorkCompletion::default(); 16];
    let mut done = 0usize;
    let n = n as usize;
    while done < n {
        let want = (n - done).min(buf.len());
        let got = match cq.cq.poll(&mut buf[..want]) {
            Ok(g) => g,
            Err(e) => {
                refuse_err("ibv_poll_cq", &e);
                return -1;
            }
        };
        for (i, w) in buf[..got].iter().enumerate() {
            // SAFETY: the caller gave room for n entries; done + i < n.
            unsafe { wc.add(done + i).write(wc_c(w)) };
        }
        done += got;
        if got < want {
            break;
        }
    }
    done as c_int
}

/// `ops.req_notify_cq`, behind the inline `ibv_req_notify_cq`.
pub(crate) unsafe extern "C" fn req_notify_cq(p: *mut ibv_cq, solicited_only: c_int) -> c_int {
    let Some(cq) = cq_of("ibv_req_notify_cq", p) else { return libc::EINVAL };
    match cq.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => refuse_err("ibv_req_notify_cq", &e),
    }
}

/// `verbs_context.advise_mr`, which the inline `ibv_advise_mr` calls: prefetch ranges of
/// on-demand MRs, as rxe's `rxe_ib_advise_mr` (advice PREFETCH, PREFETCH_WRITE or
/// PREFETCH_NO_FAULT, else `EOPNOTSUPP`; `IBV_ADVISE_MR_FLAG_FLUSH` waits for the pages, else
/// best effort). Returns the errno, 0 on success.
pub(crate) unsafe extern "C" fn advise_mr(
    p: *mut ibv_pd,
    advice: c_int,
    flags: u32,
    list: *mut ibv_sge,
    n: u32,
) -> c_int {
    const WHAT: &str = "ibv_advise_mr";
    const FLUSH: u32 = 1;
    let Some(pd) = obj::<Pd, _>(WHAT, p, Magic::Pd) else { return libc::EINVAL };
    let advice = match advice {
        0 => MrAdvice::Prefetch,
        1 => MrAdvice::PrefetchWrite,
        2 => MrAdvice::PrefetchNoFault,
        a => return refuse(WHAT, libc::EOPNOTSUPP, &format!("advice {a} is not a prefetch")),
    };
    if flags & !FLUSH != 0 || n == 0 {
        return refuse(WHAT, libc::EINVAL, &format!("flags {flags:#x} or num_sge {n}"));
    }
    let mut buf = [Sge::default(); crate::convert::MAX_SGE];
    let n = c_int::try_from(n).unwrap_or(c_int::MAX);
    let Some(sges) = crate::convert::sges(WHAT, list, n, &mut buf) else { return libc::EINVAL };
    match pd.pd.advise_mr(advice, flags & FLUSH != 0, sges) {
        Ok(()) => 0,
        Err(e) => refuse_err(WHAT, &e),
    }
}
