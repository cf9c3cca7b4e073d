//! Queue pairs (`struct ibv_qp`), shared receive queues (`struct ibv_srq`) and address handles
//! (`struct ibv_ah`), and the conversion of work-request lists into linked C lists.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_sys::{
    atomic_t, bind_mw_t, ibv_ah, ibv_create_ah, ibv_create_qp, ibv_create_srq, ibv_destroy_ah,
    ibv_destroy_qp, ibv_destroy_srq, ibv_modify_qp, ibv_modify_srq, ibv_mw, ibv_mw_bind_info,
    ibv_qp, ibv_qp_init_attr, ibv_query_qp, ibv_query_srq, ibv_recv_wr, ibv_send_flags,
    ibv_send_wr, ibv_sge, ibv_srq, ibv_srq_attr, ibv_srq_init_attr, rdma_t, ud_t,
};

use super::convert::{
    ah_attr_to_ibv, qp_attr_from_ibv, qp_attr_to_ibv, qp_cap_from_ibv, qp_cap_to_ibv,
    qp_type_to_ibv, wr_opcode_to_ibv, zeroed_qp_attr, QP_ATTR_MASK_ALL,
};
use super::mw::rkey_index;
use super::pd::Region;
use super::sys::{self, Guarded, Owned};
use super::{downcast, next_key, object_id, same_context, HwCq, HwPd};
use crate::error::{Errno, Error, Result};
use crate::object::{CompletionQueue, QpInitAttr, SendWr, SharedReceiveQueue};
use crate::provider::*;
use crate::types::*;

/// A queue pair (`ibv_create_qp`; `ibv_destroy_qp` on [`QpOps::destroy`] or drop). It holds
/// its PD, CQs and SRQ, so they outlive it.
pub struct HwQp {
    raw: Guarded<ibv_qp>,
    pd: Arc<HwPd>,
    _send_cq: CompletionQueue,
    _recv_cq: CompletionQueue,
    srq: Option<SharedReceiveQueue>,
    qp_num: u32,
    qp_type: QpType,
}

fn hw_cq<'a>(cq: &'a CompletionQueue, what: &str) -> Result<&'a HwCq> {
    downcast::<HwCq>(cq.ops().as_any(), "ibv_create_qp", what)
}

impl HwQp {
    pub(crate) fn create(pd: &HwPd, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        let call = format!("ibv_create_qp({:?}, {:?})", init.qp_type, init.cap);
        let send_cq = hw_cq(&init.send_cq, "send_cq")?;
        let recv_cq = hw_cq(&init.recv_cq, "recv_cq")?;
        same_context("ibv_create_qp", &send_cq.ctx, &pd.ctx, "send_cq")?;
        same_context("ibv_create_qp", &recv_cq.ctx, &pd.ctx, "recv_cq")?;
        let srq = match &init.srq {
            Some(s) => {
                let s = downcast::<HwSrq>(s.ops().as_any(), "ibv_create_qp", "srq")?;
                if !Arc::ptr_eq(&s.pd, &pd.arc()) {
                    return Err(Error::inval(
                        "ibv_create_qp: the srq belongs to another protection domain",
                    ));
                }
                Some(s)
            }
            None => None,
        };
        // Read locks keep the objects alive through the call; one lock per object (the two
        // CQs are often the same, and a second read lock on one RwLock may deadlock).
        let pd_live = pd.live(&call)?;
        let send_live = send_cq.live(&call)?;
        let recv_live =
            if std::ptr::eq(send_cq, recv_cq) { None } else { Some(recv_cq.live(&call)?) };
        let srq_live = match srq {
            Some(s) => Some(s.raw.live(&call)?),
            None => None,
        };
        let mut attr = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_live.ptr(),
            recv_cq: recv_live.as_ref().map_or(send_live.ptr(), |l| l.ptr()),
            srq: srq_live.as_ref().map_or(std::ptr::null_mut(), |l| l.ptr()),
            cap: qp_cap_to_ibv(&init.cap),
            qp_type: qp_type_to_ibv(init.qp_type),
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        sys::clear_errno();
        // SAFETY: the PD, CQs and SRQ are live (read locks held); `attr` is a valid init attr.
        let qp = unsafe { ibv_create_qp(pd_live.ptr(), &mut attr) };
        let qp = sys::check_ptr(&call, qp)?;
        // SAFETY: a fresh QP; `qp_num` is a plain field.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        Ok(Arc::new(HwQp {
            raw: Guarded::new(qp, "queue pair"),
            pd: pd.arc(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            srq: init.srq.clone(),
            qp_num,
            qp_type: init.qp_type,
        }))
    }

    /// The `struct ibv_qp *`, for FFI; null once destroyed.
    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.raw.peek()
    }

    /// Build the C list for `ibv_post_send`, checking what the provider would trust blindly:
    /// the opcode against the QP type, UD address handles (their PD), and the memory behind
    /// inline SGEs.
    ///
    /// An `IBV_WR_BIND_MW` names its window by rkey and its MR by lkey; `binds` (the PD's MR
    /// and window registries, locked through the post) turns them into the `struct ibv_mw *`
    /// and `struct ibv_mr *` the provider reads, and the window's `rkey` field is set to the
    /// rkey the WR says it has now, which the provider reads as the key to replace.
    fn build_send(&self, wrs: &[SendWr<'_>], binds: Option<Binds<'_>>) -> Result<SendList> {
        let mut list = SendList { sges: Vec::new(), _inline: Vec::new(), wrs: Vec::new() };
        let mut spans = Vec::with_capacity(wrs.len());
        // The windows this list binds, each once (the provider reads one `mw->rkey` for all).
        let mut bound: Vec<usize> = Vec::new();
        for (i, wr) in wrs.iter().enumerate() {
            let bad = |why: String| {
                Error::inval(format!("ibv_post_send: WR {i} (wr_id {:#x}): {why}", wr.wr_id))
            };
            if !wr.opcode.valid_for(self.qp_type) {
                return Err(bad(format!(
                    "{} is not valid on an {} QP",
                    wr.opcode.name(),
                    crate::ibv::IbvEnum::ibv_name(self.qp_type)
                )));
            }
            let start = list.sges.len();
            if let Some(data) = wr.inline_data {
                if !data.is_empty() {
                    let length = u32::try_from(data.len())
                        .map_err(|_| bad(format!("{} bytes of inline data", data.len())))?;
                    list.sges.push(ibv_sge { addr: data.as_ptr() as u64, length, lkey: 0 });
                }
            } else if wr.send_flags.contains(SendFlags::INLINE) {
                // The provider memcpy's inline SGEs from their addresses without checking the
                // lkey; copy them here, from registered memory only.
                let mut data = Vec::new();
                for sge in wr.sg_list {
                    self.pd.copy_registered(sge, &mut data).map_err(|e| bad(e.message))?;
                }
                if !data.is_empty() {
                    let length = u32::try_from(data.len())
                        .map_err(|_| bad(format!("{} bytes of inline data", data.len())))?;
                    list.sges.push(ibv_sge { addr: data.as_ptr() as u64, length, lkey: 0 });
                    // Moving the Vec keeps its heap buffer (and the SGE's address) in place.
                    list._inline.push(data);
                }
            } else {
                list.sges.extend(wr.sg_list.iter().map(sge_to_ibv));
            }
            spans.push((start, list.sges.len() - start));

            let mut w = zeroed_send_wr();
            w.wr_id = wr.wr_id;
            w.opcode = wr_opcode_to_ibv(wr.opcode);
            let mut flags = wr.send_flags.bits();
            if wr.inline_data.is_some() {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            w.send_flags = flags;
            if wr.opcode.has_imm() {
                w.imm_data_invalidated_rkey_union.imm_data = wr.imm_data.to_be();
            }
            match wr.opcode {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                    w.wr.rdma = rdma_t { remote_addr: wr.rdma.remote_addr, rkey: wr.rdma.rkey };
                }
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                    w.wr.atomic = atomic_t {
                        remote_addr: wr.atomic.remote_addr,
                        compare_add: wr.atomic.compare_add,
                        swap: wr.atomic.swap,
                        rkey: wr.atomic.rkey,
                    };
                }
                WrOpcode::Send | WrOpcode::SendWithImm => {}
                // Refused by `post_send` before the list is built.
                WrOpcode::AtomicWrite | WrOpcode::Flush => {}
                WrOpcode::SendWithInv | WrOpcode::LocalInv => {
                    w.imm_data_invalidated_rkey_union.invalidated_rkey = wr.invalidate_rkey;
                }
                WrOpcode::BindMw => {
                    let Some((mrs, mws)) = binds else {
                        return Err(bad("IBV_WR_BIND_MW without the registries".into()));
                    };
                    w.bind_mw_tso_union.bind_mw =
                        bind_to_ibv(&wr.bind_mw, mrs, mws, &mut bound).map_err(&bad)?;
                }
            }
            if self.qp_type == QpType::Ud {
                let Some(ud) = &wr.ud else {
                    return Err(bad("a UD send needs `ud` (address handle, QPN, Q_Key)".into()));
                };
                let ah = downcast::<HwAh>(ud.ah.ops().as_any(), "ibv_post_send", "address handle")
                    .map_err(|e| bad(e.message))?;
                if !Arc::ptr_eq(&ah.pd, &self.pd) {
                    return Err(bad("the address handle belongs to another PD".into()));
                }
                w.wr.ud = ud_t {
                    ah: ah.ah.as_ptr(),
                    remote_qpn: ud.remote_qpn,
                    remote_qkey: ud.remote_qkey,
                };
            }
            list.wrs.push(w);
        }
        // Link only now that neither vector grows any more.
        let sge_base = list.sges.as_mut_ptr();
        let wr_base = list.wrs.as_mut_ptr();
        let n = list.wrs.len();
        for (i, &(start, count)) in spans.iter().enumerate() {
            let num_sge = sys::to_c_int("ibv_post_send: num_sge", count)?;
            // SAFETY: `i < n` and `start + count <= sges.len()`; neither vector is resized
            // after this point, so the pointers stay valid while the list lives.
            unsafe {
                let w = wr_base.add(i);
                (*w).num_sge = num_sge;
                (*w).sg_list = if count == 0 { std::ptr::null_mut() } else { sge_base.add(start) };
                (*w).next = if i + 1 < n { wr_base.add(i + 1) } else { std::ptr::null_mut() };
            }
        }
        Ok(list)
    }
}

/// The PD's MR registry (by lkey) and window registry (by rkey index), locked.
type Binds<'a> = (&'a HashMap<u32, Region>, &'a HashMap<u32, usize>);

/// `IBV_ACCESS_ZERO_BASED` of `enum ibv_access_flags` (verbs.h), which a bind's
/// `mw_access_flags` carries.
const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;

/// `MwBind` → `struct ibv_send_wr`'s `bind_mw` (`mw`, `rkey`, `bind_info {mr, addr, length,
/// mw_access_flags}`). Refused (`EINVAL`): a window rkey that is not a live window of the
/// QP's PD, an lkey that is not an MR of it (with a nonzero length; an unbind names none),
/// a new rkey of another index, and a second bind of one window in one list. The window's
/// `rkey` field is set to `b.mw_rkey`; the caller holds the registry lock, which every post
/// naming the window and its deallocation take.
fn bind_to_ibv(
    b: &MwBind,
    mrs: &HashMap<u32, Region>,
    mws: &HashMap<u32, usize>,
    bound: &mut Vec<usize>,
) -> std::result::Result<bind_mw_t, String> {
    let Some(&mw) = mws.get(&rkey_index(b.mw_rkey)) else {
        return Err(format!(
            "IBV_WR_BIND_MW: rkey {:#x} is not a memory window of this protection domain",
            b.mw_rkey
        ));
    };
    if rkey_index(b.new_rkey) != rkey_index(b.mw_rkey) {
        return Err(format!(
            "IBV_WR_BIND_MW: the new rkey {:#x} changes more than the key byte of {:#x}",
            b.new_rkey, b.mw_rkey
        ));
    }
    if bound.contains(&mw) {
        return Err(format!(
            "IBV_WR_BIND_MW: the window of rkey {:#x} is bound twice in one post",
            b.mw_rkey
        ));
    }
    let mr = if b.length == 0 && b.mr_lkey == 0 {
        std::ptr::null_mut()
    } else {
        match mrs.get(&b.mr_lkey) {
            Some(r) => r.mr as *mut rdma_sys::ibv_mr,
            None => {
                return Err(format!(
                    "IBV_WR_BIND_MW: lkey {:#x} is not a memory region of this protection domain",
                    b.mr_lkey
                ))
            }
        }
    };
    bound.push(mw);
    let mw = mw as *mut ibv_mw;
    // SAFETY: the window is in the registry, so allocated and not yet deallocated; the
    // registry lock (held by the caller through the post) serializes every write and the
    // provider's read of this field.
    unsafe { (*mw).rkey = b.mw_rkey };
    let zero = if b.zero_based { IBV_ACCESS_ZERO_BASED } else { 0 };
    Ok(bind_mw_t {
        mw,
        rkey: b.new_rkey,
        bind_info: ibv_mw_bind_info {
            mr,
            addr: b.addr,
            length: b.length,
            mw_access_flags: b.access.bits() | zero,
        },
    })
}

/// A linked `ibv_send_wr` list and the SGEs and inline copies it points into.
struct SendList {
    sges: Vec<ibv_sge>,
    /// Inline data copied out of registered memory; the SGEs point into it.
    _inline: Vec<Vec<u8>>,
    wrs: Vec<ibv_send_wr>,
}

/// A linked `ibv_recv_wr` list and the SGEs it points into.
struct RecvList {
    _sges: Vec<ibv_sge>,
    wrs: Vec<ibv_recv_wr>,
}

fn sge_to_ibv(s: &Sge) -> ibv_sge {
    ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }
}

fn zeroed_send_wr() -> ibv_send_wr {
    // SAFETY: ibv_send_wr is integers, raw pointers and unions of those: all-zero is valid.
    unsafe { MaybeUninit::<ibv_send_wr>::zeroed().assume_init() }
}

fn build_recv(call: &str, wrs: &[RecvWr<'_>]) -> Result<RecvList> {
    let mut sges: Vec<ibv_sge> =
        wrs.iter().flat_map(|w| w.sg_list.iter().map(sge_to_ibv)).collect();
    let mut list: Vec<ibv_recv_wr> = Vec::with_capacity(wrs.len());
    let base = sges.as_mut_ptr();
    let mut start = 0;
    for wr in wrs {
        let count = wr.sg_list.len();
        list.push(ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            // SAFETY: `start + count <= sges.len()`, and `sges` is not resized any more.
            sg_list: if count == 0 { std::ptr::null_mut() } else { unsafe { base.add(start) } },
            num_sge: sys::to_c_int(&format!("{call}: num_sge"), count)?,
        });
        start += count;
    }
    let wr_base = list.as_mut_ptr();
    for i in 1..list.len() {
        // SAFETY: both indices are in bounds and `list` is not resized any more.
        unsafe { (*wr_base.add(i - 1)).next = wr_base.add(i) };
    }
    Ok(RecvList { _sges: sges, wrs: list })
}

/// The index of the WR a post call returned as `bad_wr` (by address, no pointer arithmetic
/// on a pointer the provider handed back).
fn bad_index<T>(base: *const T, bad: *const T, len: usize) -> Option<usize> {
    let off = (bad as usize).checked_sub(base as usize)?;
    let i = off / std::mem::size_of::<T>();
    (i < len && off % std::mem::size_of::<T>() == 0).then_some(i)
}

fn post_error<T>(call: &str, rc: c_int, base: *const T, bad: *const T, ids: &[u64]) -> Error {
    let code = sys::rc_errno(rc);
    let what = sys::describe_errno(code);
    let at = bad_index(base, bad, ids.len());
    let msg = match at {
        Some(i) => format!(
            "{call} failed at WR {i} (wr_id {:#x}): {what}; the {i} WRs before it were posted",
            ids[i]
        ),
        None => format!("{call} failed: {what}"),
    };
    let e = Error::new(Errno::from_code(code), msg);
    match at {
        Some(i) => e.at_wr(i),
        None => e,
    }
}

impl Drop for HwQp {
    fn drop(&mut self) {
        // SAFETY: last reference, so no verb uses the QP; its async events were acknowledged
        // when read, so ibv_destroy_qp does not wait.
        self.raw.destroy_on_drop(|qp| unsafe { ibv_destroy_qp(qp) });
    }
}

impl QpOps for HwQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// `ibv_post_send` (through `context->ops.post_send`). `inline_data` becomes one SGE with
    /// `IBV_SEND_INLINE`; the provider copies it before returning.
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        if let Some(i) =
            wrs.iter().position(|w| matches!(w.opcode, WrOpcode::AtomicWrite | WrOpcode::Flush))
        {
            // struct ibv_send_wr has no fields for them: the ibv_wr_* API carries them.
            let what = wrs[i].opcode.name();
            let e = Error::inval(format!("ibv_post_send: {what} is posted with ibv_wr_*"));
            return Err(e.at_wr(i));
        }
        // A bind names its MR and window through the PD's registries, held through the post
        // so neither can be released while the provider reads them (only lists that bind).
        let binding = wrs.iter().any(|w| w.opcode == WrOpcode::BindMw);
        let mrs = binding.then(|| self.pd.lock_mrs());
        let mws = binding.then(|| self.pd.lock_mws());
        let binds = mrs.as_deref().zip(mws.as_deref());
        let mut list = self.build_send(wrs, binds)?;
        let live = self.raw.live("ibv_post_send")?;
        let qp = live.ptr();
        // SAFETY: the QP is live, so is its context.
        let post = unsafe { (*(*qp).context).ops.post_send }.ok_or_else(|| {
            Error::new(Errno::NotSup, "ibv_post_send: the provider has no post_send")
        })?;
        let base = list.wrs.as_mut_ptr();
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        sys::clear_errno();
        // SAFETY: the QP is live; `base` heads a well-formed list whose SGEs, inline copies
        // and address handles (held by `wrs`) outlive the call.
        let rc = unsafe { post(qp, base, &mut bad) };
        if rc != 0 {
            let ids: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
            return Err(post_error("ibv_post_send", rc, base, bad, &ids));
        }
        Ok(())
    }

    /// `ibv_post_recv` (through `context->ops.post_recv`). A QP attached to an SRQ has no
    /// receive queue of its own: `EINVAL`.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.srq.is_some() {
            return Err(Error::inval(
                "ibv_post_recv: the QP receives from its SRQ; post receives to the SRQ",
            ));
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut list = build_recv("ibv_post_recv", wrs)?;
        let live = self.raw.live("ibv_post_recv")?;
        let qp = live.ptr();
        // SAFETY: the QP is live, so is its context.
        let post = unsafe { (*(*qp).context).ops.post_recv }.ok_or_else(|| {
            Error::new(Errno::NotSup, "ibv_post_recv: the provider has no post_recv")
        })?;
        let base = list.wrs.as_mut_ptr();
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        sys::clear_errno();
        // SAFETY: the QP is live; `base` heads a well-formed list that outlives the call.
        let rc = unsafe { post(qp, base, &mut bad) };
        if rc != 0 {
            let ids: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
            return Err(post_error("ibv_post_recv", rc, base, bad, &ids));
        }
        Ok(())
    }

    /// `ibv_modify_qp` with the attribute mask passed bit for bit (`QpAttrMask` has the
    /// `ibv_qp_attr_mask` values). The kernel checks the transition and the attributes.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let unknown = mask.bits() & !QpAttrMask::all().bits();
        if unknown != 0 {
            return Err(Error::inval(format!(
                "ibv_modify_qp: unknown attribute mask bits {unknown:#x}"
            )));
        }
        let call = if mask.contains(QpAttrMask::STATE) {
            format!("ibv_modify_qp(to {} with {})", attr.qp_state, mask.names())
        } else {
            format!("ibv_modify_qp({})", mask.names())
        };
        let live = self.raw.live(&call)?;
        let mut c = qp_attr_to_ibv(attr);
        let bits = sys::to_c_int("ibv_modify_qp: mask", mask.bits())?;
        sys::clear_errno();
        // SAFETY: the QP is live; `c` is a valid ibv_qp_attr.
        let rc = unsafe { ibv_modify_qp(live.ptr(), &mut c, bits) };
        sys::check_rc(&call, rc)
    }

    /// `ibv_query_qp` with every attribute; the capabilities come from the returned init attr.
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let live = self.raw.live("ibv_query_qp")?;
        let mut c = zeroed_qp_attr();
        // SAFETY: ibv_qp_init_attr is integers and raw pointers: all-zero is valid.
        let mut init: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        sys::clear_errno();
        // SAFETY: the QP is live; `c` and `init` are valid, writable structs.
        let rc = unsafe { ibv_query_qp(live.ptr(), &mut c, QP_ATTR_MASK_ALL, &mut init) };
        sys::check_rc("ibv_query_qp", rc)?;
        let attr = qp_attr_from_ibv(&c).map_err(|s| {
            Error::new(
                Errno::Io,
                format!("ibv_query_qp: the QP is in state {s}, unknown to softverbs"),
            )
        })?;
        Ok((attr, qp_cap_from_ibv(&init.cap)))
    }

    /// `ibv_destroy_qp`.
    fn destroy(&self) -> Result<()> {
        // SAFETY: the write lock excludes every other use of the QP pointer.
        self.raw.destroy("ibv_destroy_qp", |qp| unsafe { ibv_destroy_qp(qp) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A shared receive queue (`ibv_create_srq`; `ibv_destroy_srq` on [`SrqOps::destroy`] or drop).
pub struct HwSrq {
    raw: Guarded<ibv_srq>,
    pd: Arc<HwPd>,
    key: usize,
}

impl HwSrq {
    pub(crate) fn create(pd: &HwPd, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let call = format!(
            "ibv_create_srq(max_wr {}, max_sge {}, srq_limit {})",
            init.max_wr, init.max_sge, init.srq_limit
        );
        let pd_live = pd.live(&call)?;
        let key = next_key();
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::without_provenance_mut(key),
            attr: ibv_srq_attr {
                max_wr: init.max_wr,
                max_sge: init.max_sge,
                srq_limit: init.srq_limit,
            },
        };
        sys::clear_errno();
        // SAFETY: the PD is live; `attr` is valid; srq_context is an integer key.
        let srq = unsafe { ibv_create_srq(pd_live.ptr(), &mut attr) };
        let srq = sys::check_ptr(&call, srq)?;
        Ok(Arc::new(HwSrq { raw: Guarded::new(srq, "shared receive queue"), pd: pd.arc(), key }))
    }

    /// The `struct ibv_srq *`, for FFI; null once destroyed.
    pub fn as_ptr(&self) -> *mut ibv_srq {
        self.raw.peek()
    }

    /// The id async events name this SRQ by ([`AsyncElement::Srq`]).
    pub fn id(&self) -> u64 {
        object_id(self.key)
    }
}

impl Drop for HwSrq {
    fn drop(&mut self) {
        // SAFETY: last reference; QPs hold their SRQ, so none uses it.
        self.raw.destroy_on_drop(|srq| unsafe { ibv_destroy_srq(srq) });
    }
}

impl SrqOps for HwSrq {
    /// `ibv_post_srq_recv` (through `context->ops.post_srq_recv`).
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut list = build_recv("ibv_post_srq_recv", wrs)?;
        let live = self.raw.live("ibv_post_srq_recv")?;
        let srq = live.ptr();
        // SAFETY: the SRQ is live, so is its context.
        let post = unsafe { (*(*srq).context).ops.post_srq_recv }.ok_or_else(|| {
            Error::new(Errno::NotSup, "ibv_post_srq_recv: the provider has no post_srq_recv")
        })?;
        let base = list.wrs.as_mut_ptr();
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        sys::clear_errno();
        // SAFETY: the SRQ is live; `base` heads a well-formed list that outlives the call.
        let rc = unsafe { post(srq, base, &mut bad) };
        if rc != 0 {
            let ids: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
            return Err(post_error("ibv_post_srq_recv", rc, base, bad, &ids));
        }
        Ok(())
    }

    /// `ibv_modify_srq` (`SrqAttrMask` has the `ibv_srq_attr_mask` values).
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let call = format!("ibv_modify_srq({mask:?})");
        let unknown = mask.bits() & !SrqAttrMask::all().bits();
        if unknown != 0 {
            return Err(Error::inval(format!("{call}: unknown attribute mask bits {unknown:#x}")));
        }
        let live = self.raw.live(&call)?;
        let mut c =
            ibv_srq_attr { max_wr: attr.max_wr, max_sge: attr.max_sge, srq_limit: attr.srq_limit };
        let bits = sys::to_c_int("ibv_modify_srq: mask", mask.bits())?;
        sys::clear_errno();
        // SAFETY: the SRQ is live; `c` is a valid ibv_srq_attr.
        let rc = unsafe { ibv_modify_srq(live.ptr(), &mut c, bits) };
        sys::check_rc(&call, rc)
    }

    /// `ibv_query_srq`.
    fn query(&self) -> Result<SrqAttr> {
        let live = self.raw.live("ibv_query_srq")?;
        let mut c = ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: 0 };
        sys::clear_errno();
        // SAFETY: the SRQ is live; `c` is a valid, writable ibv_srq_attr.
        let rc = unsafe { ibv_query_srq(live.ptr(), &mut c) };
        sys::check_rc("ibv_query_srq", rc)?;
        Ok(SrqAttr { max_wr: c.max_wr, max_sge: c.max_sge, srq_limit: c.srq_limit })
    }

    /// `ibv_destroy_srq`: the kernel answers `EBUSY` while a QP uses the SRQ.
    fn destroy(&self) -> Result<()> {
        // SAFETY: the write lock excludes every other use of the SRQ pointer.
        self.raw.destroy("ibv_destroy_srq", |srq| unsafe { ibv_destroy_srq(srq) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An address handle (`ibv_create_ah`; `ibv_destroy_ah` on drop). UD sends name it. The verbs
/// specification leaves destroying an AH that outstanding sends still use undefined (most
/// providers copy the address vector at post time, not all promise to), so keep the handle
/// until those sends have completed.
pub struct HwAh {
    ah: Owned<ibv_ah>,
    pd: Arc<HwPd>,
    attr: AhAttr,
}

impl HwAh {
    pub(crate) fn create(pd: &HwPd, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        let call = format!(
            "ibv_create_ah(port {}, dlid {}, is_global {}, dgid {}, sgid_index {})",
            attr.port_num,
            attr.dlid,
            attr.is_global,
            std::net::Ipv6Addr::from(attr.dgid.0),
            attr.sgid_index
        );
        let pd_live = pd.live(&call)?;
        let mut c = ah_attr_to_ibv(attr);
        sys::clear_errno();
        // SAFETY: the PD is live; `c` is a valid ibv_ah_attr.
        let ah = unsafe { ibv_create_ah(pd_live.ptr(), &mut c) };
        let ah = sys::check_ptr(&call, ah)?;
        Ok(Arc::new(HwAh { ah: Owned::new(ah), pd: pd.arc(), attr: *attr }))
    }

    /// The `struct ibv_ah *`, for FFI. Valid while this object is.
    pub fn as_ptr(&self) -> *mut ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for HwAh {
    fn drop(&mut self) {
        // SAFETY: last reference; destroyed once.
        unsafe { ibv_destroy_ah(self.ah.as_ptr()) };
    }
}

impl AhOps for HwAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_lists_are_linked_in_order() {
        let a =
            [Sge { addr: 0x1000, length: 64, lkey: 7 }, Sge { addr: 0x2000, length: 8, lkey: 7 }];
        let wrs = [
            RecvWr { wr_id: 1, sg_list: &a },
            RecvWr { wr_id: 2, sg_list: &[] },
            RecvWr { wr_id: 3, sg_list: &a[1..] },
        ];
        let list = build_recv("test", &wrs).unwrap();
        let mut p: *const ibv_recv_wr = list.wrs.as_ptr();
        let mut seen = Vec::new();
        while !p.is_null() {
            // SAFETY: `p` walks the list `build_recv` linked, inside `list`.
            let w = unsafe { &*p };
            let sges: Vec<(u64, u32)> = (0..w.num_sge as usize)
                // SAFETY: `num_sge` entries follow `sg_list`.
                .map(|j| unsafe { &*w.sg_list.add(j) })
                .map(|s| (s.addr, s.length))
                .collect();
            seen.push((w.wr_id, sges));
            p = w.next;
        }
        assert_eq!(
            seen,
            vec![(1, vec![(0x1000, 64), (0x2000, 8)]), (2, vec![]), (3, vec![(0x2000, 8)])]
        );
    }

    #[test]
    fn bad_wr_index_is_found_by_address() {
        let v = [0u64; 4];
        let base = v.as_ptr();
        assert_eq!(bad_index(base, &v[2], 4), Some(2));
        assert_eq!(bad_index(base, std::ptr::null(), 4), None);
        assert_eq!(bad_index(base, base.wrapping_add(9), 4), None);
    }
}
