//! The `ibv_wr_*` API: a QP made by `ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`
//! is an `ibv_qp_ex` whose function pointers build work requests between `ibv_wr_start` and
//! `ibv_wr_complete`, which posts them in order (or `ibv_wr_abort`, which drops them).
//!
//! libibverbs leaves serialising one QP's `wr_start` … `wr_complete` to the program (as for
//! `ibv_post_send` itself), so the batch being built is kept unlocked in the QP; its buffers
//! are reused from batch to batch, so a warmed-up QP allocates nothing.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};

use std::ptr::null_mut;

use verbs_api::{
    AtomicTarget, FlushLevel, FlushTarget, FlushType, MwBind, QueuePair, RdmaTarget, SendFlags,
    SendWr, Sge, UdTarget, WrOpcode,
};

use crate::object::Magic;
use crate::refuse;
use crate::srq_ah::ah_of;
use softverbs_cabi_abi::*;

/// The front of every QP box (`crate::qp::Qp`): the C struct, the magic word, and the batch
/// the `ibv_wr_*` calls build.
#[repr(C)]
pub(crate) struct QpHead {
    pub c: ibv_qp_ex,
    pub magic: Magic,
    pub batch: UnsafeCell<Batch>,
}

/// One work request of the batch; its SGEs and inline bytes are ranges of [`Batch`]'s pools.
#[derive(Clone, Copy)]
struct Pending {
    wr_id: u64,
    flags: u32,
    opcode: WrOpcode,
    /// Immediate data, or the rkey to invalidate.
    imm: u32,
    bind: MwBind,
    rdma: RdmaTarget,
    atomic: AtomicTarget,
    ud: Option<(*mut ibv_ah, u32, u32)>,
    sges: (usize, usize),
    inline: Option<(usize, usize)>,
    flush: FlushTarget,
}

/// The batch between `ibv_wr_start` and `ibv_wr_complete`, and the first problem found in it
/// (reported by `ibv_wr_complete`, as providers do).
#[derive(Default)]
pub(crate) struct Batch {
    /// The QP the batch is posted to.
    pub qp: Option<QueuePair>,
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    error: c_int,
    /// The allocation of the list handed to the backend, kept empty between batches.
    posting: Vec<SendWr<'static>>,
}

impl Batch {
    /// An empty batch for `qp` (None: the QP has no `ibv_wr_*` API).
    pub(crate) fn new(qp: Option<QueuePair>) -> Batch {
        Batch { qp, ..Default::default() }
    }
}

/// The batch of the QP behind `q`.
///
/// # Safety
/// `q` is a live softverbs QP's `ibv_qp_ex`; the program serialises its `ibv_wr_*` calls.
unsafe fn batch<'a>(q: *mut ibv_qp_ex) -> &'a mut Batch {
    // SAFETY: the caller's contract: q is the front of a QpHead.
    unsafe { &mut *(*(q as *const QpHead)).batch.get() }
}

/// Start a new WR of `opcode` with the `wr_id` and `wr_flags` the inline set.
unsafe fn push(q: *mut ibv_qp_ex, opcode: WrOpcode) -> &'static mut Pending {
    // SAFETY: the caller's contract (see `batch`).
    let (b, wr_id, flags) = unsafe { (batch(q), (*q).wr_id, (*q).wr_flags) };
    let at = b.sges.len();
    b.wrs.push(Pending {
        wr_id,
        flags,
        opcode,
        imm: 0,
        bind: MwBind::default(),
        rdma: RdmaTarget::default(),
        atomic: AtomicTarget::default(),
        ud: None,
        sges: (at, at),
        inline: None,
        flush: FlushTarget::default(),
    });
    let last = b.wrs.len() - 1;
    // SAFETY: the batch lives as long as the QP; the reference is used before the next call.
    unsafe { &mut *(&mut b.wrs[last] as *mut Pending) }
}

unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    // SAFETY: called through the QP's own pointer.
    let b = unsafe { batch(q) };
    b.wrs.clear();
    b.sges.clear();
    b.inline.clear();
    b.error = 0;
}

unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    // SAFETY: as wr_start.
    unsafe { wr_start(q) };
}

unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    // SAFETY: called through the QP's own pointer.
    unsafe { push(q, WrOpcode::Send) };
}

unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::SendWithImm) }.imm = u32::from_be(imm);
}

unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::RdmaWrite) }.rdma = RdmaTarget { remote_addr: addr, rkey };
}

unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: as wr_send.
    let w = unsafe { push(q, WrOpcode::RdmaWriteWithImm) };
    w.rdma = RdmaTarget { remote_addr: addr, rkey };
    w.imm = u32::from_be(imm);
}

unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::RdmaRead) }.rdma = RdmaTarget { remote_addr: addr, rkey };
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    cmp: u64,
    swap: u64,
) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::AtomicCmpAndSwp) }.atomic =
        AtomicTarget { remote_addr: addr, rkey, compare_add: cmp, swap };
}

unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::AtomicFetchAndAdd) }.atomic =
        AtomicTarget { remote_addr: addr, rkey, compare_add: add, swap: 0 };
}

/// `ibv_wr_atomic_write`: the 8 bytes at `value` (copied now, as rxe's provider copies them
/// into the WQE) written at `addr` in one store.
unsafe extern "C" fn wr_atomic_write(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    value: *const c_void,
) {
    // SAFETY: as wr_send; the batch outlives the call.
    let b = unsafe { batch(q) };
    if value.is_null() {
        b.error = refuse("ibv_wr_atomic_write", libc::EINVAL, "atomic_wr is NULL");
        return;
    }
    let at = b.inline.len();
    // SAFETY: libibverbs' contract: atomic_wr points at 8 readable bytes.
    b.inline.extend_from_slice(unsafe { std::slice::from_raw_parts(value as *const u8, 8) });
    // SAFETY: as wr_send.
    let w = unsafe { push(q, WrOpcode::AtomicWrite) };
    w.rdma = RdmaTarget { remote_addr: addr, rkey };
    w.inline = Some((at, at + 8));
}

/// `ibv_wr_flush`: make `[addr, +len)` (`IBV_FLUSH_RANGE`) or the whole MR of `rkey`
/// (`IBV_FLUSH_MR`) visible at the placement `ty` (`IBV_FLUSH_GLOBAL`, `IBV_FLUSH_PERSISTENT`).
/// A level or placement type rdma-core does not define, or a length past 32 bits (the RETH's
/// DMA length), fails the batch with `EINVAL` at `ibv_wr_complete`.
unsafe extern "C" fn wr_flush(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    len: usize,
    ty: u8,
    level: u8,
) {
    const W: &str = "ibv_wr_flush";
    // SAFETY: as wr_send.
    let b = unsafe { batch(q) };
    let placement = FlushType::from_bits(ty);
    let level = FlushLevel::from_ibv(level);
    let (Some(placement), Some(level), Ok(len)) = (placement, level, u32::try_from(len)) else {
        b.error = refuse(W, libc::EINVAL, &format!("type {ty:#x}, level {level:?}, len {len}"));
        return;
    };
    // SAFETY: as wr_send.
    let w = unsafe { push(q, WrOpcode::Flush) };
    w.rdma = RdmaTarget { remote_addr: addr, rkey };
    w.flush = FlushTarget { len, placement, level };
}

unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::SendWithInv) }.imm = rkey;
}

unsafe extern "C" fn wr_local_inv(q: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::LocalInv) }.imm = rkey;
}

/// `ibv_wr_bind_mw`: bind `mw` (of either type, as rxe's provider takes it) with the new
/// `rkey`, as `info` says; a NULL `info` binds nothing (a bind error at execution).
unsafe extern "C" fn wr_bind_mw(
    q: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the caller's struct ibv_mw_bind_info, when not NULL.
    let info = match unsafe { info.as_ref() } {
        Some(i) => *i,
        None => ibv_mw_bind_info { mr: null_mut(), addr: 0, length: 0, mw_access_flags: 0 },
    };
    let bind = crate::mw::bind_of(mw, rkey, &info);
    // SAFETY: as wr_send.
    unsafe { push(q, WrOpcode::BindMw) }.bind = bind;
}

/// The WR being built, or None (the batch remembers `EINVAL`) when no opcode call came first.
unsafe fn last<'a>(q: *mut ibv_qp_ex, what: &str) -> Option<(&'a mut Batch, usize)> {
    // SAFETY: the caller's contract.
    let b = unsafe { batch(q) };
    match b.wrs.len() {
        0 => {
            b.error = refuse(what, libc::EINVAL, "no work request started (call an opcode first)");
            None
        }
        n => Some((b, n - 1)),
    }
}

unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: called through the QP's own pointer.
    if let Some((b, i)) = unsafe { last(q, "ibv_wr_set_ud_addr") } {
        b.wrs[i].ud = Some((ah, qpn, qkey));
    }
}

unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: called through the QP's own pointer.
    if let Some((b, i)) = unsafe { last(q, "ibv_wr_set_sge") } {
        let at = b.sges.len();
        b.sges.push(Sge { addr, length, lkey });
        b.wrs[i].sges = (at, at + 1);
    }
}

unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    // SAFETY: called through the QP's own pointer.
    if let Some((b, i)) = unsafe { last(q, "ibv_wr_set_sge_list") } {
        let at = b.sges.len();
        for k in 0..n {
            // SAFETY: the caller's list of n SGEs.
            let s = unsafe { &*list.add(k) };
            b.sges.push(Sge { addr: s.addr, length: s.length, lkey: s.lkey });
        }
        b.wrs[i].sges = (at, at + n);
    }
}

unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, len: usize) {
    let buf = ibv_data_buf { addr, length: len };
    // SAFETY: one buffer, the caller's.
    unsafe { wr_set_inline_data_list(q, 1, &buf) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    // SAFETY: called through the QP's own pointer.
    if let Some((b, i)) = unsafe { last(q, "ibv_wr_set_inline_data") } {
        let at = b.inline.len();
        for k in 0..n {
            // SAFETY: the caller's n buffers of readable memory (copied now, as a NIC copies
            // inline data into the WQE).
            let d = unsafe { &*list.add(k) };
            let bytes = unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) };
            b.inline.extend_from_slice(bytes);
        }
        b.wrs[i].inline = Some((at, b.inline.len()));
        b.wrs[i].flags |= SendFlags::INLINE.bits();
    }
}

/// `ibv_wr_complete`: post the batch in order, in one call of the backend (as a provider
/// rings one doorbell), so WRs completed inside the call hold their send-queue slots until it
/// returns and a batch longer than the queue is refused `ENOMEM` (rxe, mlx5). The first
/// refusal (or a problem found while building) is returned and the rest of the batch is
/// dropped.
unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
    const W: &str = "ibv_wr_complete";
    // SAFETY: q came from ibv_qp_to_qp_ex; the magic check refuses a destroyed QP.
    if q.is_null() || unsafe { (*(q as *const QpHead)).magic } != Magic::Qp {
        return refuse(W, libc::EINVAL, "not a live softverbs QP");
    }
    // SAFETY: checked above.
    let b = unsafe { batch(q) };
    let Some(qp) = b.qp.clone() else { return libc::EINVAL };
    let mut rc = b.error;
    if rc == 0 {
        let mut wrs = reuse(std::mem::take(&mut b.posting));
        for w in &b.wrs {
            let ud = match w.ud {
                Some((ah, remote_qpn, remote_qkey)) => match ah_of(W, ah) {
                    Some(a) => Some(UdTarget { ah: a.ah.clone(), remote_qpn, remote_qkey }),
                    None => {
                        // Those before it are posted; none after.
                        rc = libc::EINVAL;
                        break;
                    }
                },
                None => None,
            };
            wrs.push(SendWr {
                wr_id: w.wr_id,
                sg_list: &b.sges[w.sges.0..w.sges.1],
                opcode: w.opcode,
                send_flags: SendFlags::from_bits_truncate(w.flags),
                imm_data: w.imm,
                rdma: w.rdma,
                atomic: w.atomic,
                ud,
                inline_data: w.inline.map(|(s, e)| &b.inline[s..e]),
                flush: w.flush,
                invalidate_rkey: w.imm,
                bind_mw: w.bind,
            });
        }
        if !wrs.is_empty() {
            if let Err(e) = qp.post_send(&wrs) {
                rc = crate::refuse_err(W, &e);
            }
        }
        b.posting = reuse(wrs);
    }
    b.wrs.clear();
    b.sges.clear();
    b.inline.clear();
    b.error = 0;
    rc
}

/// An empty list of WRs in the allocation of `v` (emptied): a warmed-up QP allocates none.
fn reuse<'b>(mut v: Vec<SendWr<'_>>) -> Vec<SendWr<'b>> {
    v.clear();
    // An empty vector collected into one of the same layout keeps its allocation.
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

/// Fill the `ibv_wr_*` entry points of a QP made with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`; the
/// operations softverbs lacks (TSO, XRC) stay NULL, and `ibv_create_qp_ex` refuses a QP whose `send_ops_flags` ask for one of them
/// (`crate::qp`'s `send_ops_refused`), so no program can reach a NULL pointer it asked for.
pub(crate) fn fill(q: &mut ibv_qp_ex) {
    q.comp_mask = 0;
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_atomic_write = Some(wr_atomic_write);
    q.wr_flush = Some(wr_flush);
}
