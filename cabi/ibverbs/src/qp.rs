//! Queue pairs: `ibv_create_qp` (and the `verbs_context.create_qp_ex` op behind the inline
//! `ibv_create_qp_ex`), modify, query, destroy, and the data path the inline `ibv_post_send` /
//! `ibv_post_recv` reach through `ibv_context.ops`.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr::null_mut;

use verbs_api::{
    AtomicTarget, IbvEnum, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, QueuePair,
    RdmaTarget, SendFlags, SendWr, Sge, UdTarget, WrOpcode,
};

use crate::convert::{access, post_recv_chain, sges, MAX_SGE};
use crate::object::{free, lookup, obj, track, Magic, QPS};
use crate::qp_ex::{self, Batch, QpHead};
use crate::srq_ah::{ah_attr, ah_attr_c, ah_of, srq_of};
use crate::verbs::{cq_of, Mr, Pd};
use crate::{refuse, refuse_err, refuse_null};
use softverbs_cabi_abi::*;

/// A queue pair.
#[repr(C)]
pub(crate) struct Qp {
    head: QpHead,
    qp: QueuePair,
    max_inline: u32,
    /// The send queue's depth as granted: a chain is posted in batches of one more.
    max_send_wr: u32,
}

fn make_qp(what: &str, p: *mut ibv_pd, init: &mut ibv_qp_init_attr, ex: bool) -> *mut ibv_qp {
    let Some(pd) = obj::<Pd, _>(what, p, Magic::Pd) else { return null_mut() };
    let Some(ty) = QpType::from_c_int(init.qp_type) else {
        return refuse_null(
            what,
            libc::EOPNOTSUPP,
            &format!("QP type {}: softverbs has RC (2), UC (3) and UD (4)", init.qp_type),
        );
    };
    let Some(scq) = cq_of(what, init.send_cq) else { return null_mut() };
    let Some(rcq) = cq_of(what, init.recv_cq) else { return null_mut() };
    let srq = if init.srq.is_null() {
        None
    } else {
        match srq_of(what, init.srq) {
            Some(s) => Some(s.srq.clone()),
            None => return null_mut(),
        }
    };
    let c = init.cap;
    let ia = QpInitAttr {
        qp_type: ty,
        send_cq: scq.cq.clone(),
        recv_cq: rcq.cq.clone(),
        srq,
        cap: QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        },
        sq_sig_all: init.sq_sig_all != 0,
    };
    let qp = match pd.pd.create_qp(&ia) {
        Ok(q) => q,
        Err(e) => return refuse_null(what, e.errno.code(), &e.message),
    };
    let cap = qp.query().map(|(_, c)| c).unwrap_or(ia.cap);
    init.cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    // SAFETY: plain old data (NULL function pointers).
    let mut cx: ibv_qp_ex = unsafe { std::mem::zeroed() };
    if ex {
        qp_ex::fill(&mut cx);
    }
    let cq = &mut cx.qp_base;
    cq.context = pd.c.context;
    cq.qp_context = init.qp_context;
    cq.pd = p;
    cq.send_cq = init.send_cq;
    cq.recv_cq = init.recv_cq;
    cq.srq = init.srq;
    cq.qp_num = qp.qp_num();
    cq.handle = qp.qp_num();
    cq.state = 0;
    cq.qp_type = init.qp_type;
    let qpn = qp.qp_num();
    let batch = Batch::new(ex.then(|| qp.clone()));
    let head = QpHead { c: cx, magic: Magic::Qp, batch: UnsafeCell::new(batch) };
    let b = Box::into_raw(Box::new(Qp {
        head,
        qp,
        max_inline: cap.max_inline_data,
        max_send_wr: cap.max_send_wr,
    }));
    track(&QPS, qpn, Some(b as usize));
    tracing::debug!(target: crate::verbs::OBJECTS, "create_qp pid={} qpn={qpn:#x}", std::process::id());
    b as *mut ibv_qp
}

/// `ibv_create_qp`: the granted capacities are written back into `init->cap`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(p: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    if init.is_null() {
        return refuse_null("ibv_create_qp", libc::EINVAL, "qp_init_attr is NULL");
    }
    // SAFETY: checked non-NULL.
    make_qp("ibv_create_qp", p, unsafe { &mut *init }, false)
}

/// `verbs_context.create_qp_ex`: `struct ibv_qp_init_attr_ex` begins with the fields of
/// `ibv_qp_init_attr`. As rxe's `check_qp_init_attr`: `IBV_QP_INIT_ATTR_PD` is required,
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS` taken with no flag set, `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`
/// (the `ibv_wr_*` API) taken with the operations [`send_ops_refused`] leaves; the rest is
/// refused with `EOPNOTSUPP`, so no QP ever has a NULL `ibv_wr_*` pointer the program asked for.
pub(crate) unsafe extern "C" fn create_qp_ex(
    _c: *mut ibv_context,
    init: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    const W: &str = "ibv_create_qp_ex";
    if init.is_null() {
        return refuse_null(W, libc::EINVAL, "qp_init_attr_ex is NULL");
    }
    // SAFETY: checked non-NULL; the caller's struct ibv_qp_init_attr_ex.
    let (mask, pd, flags, ops, ty) = unsafe {
        let i = &*init;
        (i.comp_mask, i.pd, i.create_flags, i.send_ops_flags, i.qp_type)
    };
    if mask & IBV_QP_INIT_ATTR_PD == 0
        || mask & !(IBV_QP_INIT_ATTR_PD | CREATE_FLAGS | SEND_OPS_FLAGS) != 0
    {
        return refuse_null(
            W,
            libc::EOPNOTSUPP,
            &format!(
                "comp_mask {mask:#x}: softverbs, as rxe, takes IBV_QP_INIT_ATTR_PD, _CREATE_FLAGS \
                 and _SEND_OPS_FLAGS only (no XRC, TSO or RSS)"
            ),
        );
    }
    if mask & CREATE_FLAGS != 0 && flags != 0 {
        return refuse_null(
            W,
            libc::EOPNOTSUPP,
            &format!("create_flags {flags:#x}: rxe and softverbs support none"),
        );
    }
    if mask & SEND_OPS_FLAGS != 0 {
        if let Some(why) = send_ops_refused(ty, ops) {
            return refuse_null(W, libc::EOPNOTSUPP, &why);
        }
    }
    // SAFETY: checked non-NULL; its prefix is laid out as an ibv_qp_init_attr (the layout test
    // checks both structs against verbs.h).
    let base = unsafe { &mut *(init as *mut ibv_qp_init_attr) };
    make_qp(W, pd, base, mask & SEND_OPS_FLAGS != 0)
}

/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
const SEND_OPS_FLAGS: u32 = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
const CREATE_FLAGS: u32 = 1 << 2;

/// `IBV_QP_EX_WITH_RDMA_WRITE`, `_RDMA_WRITE_WITH_IMM`, `_SEND`, `_SEND_WITH_IMM`: the
/// operations every connected QP type has, and `_BIND_MW` (RC and UC, as rxe).
const OPS_UC: u64 = 0b1111 | 1 << 8;
/// [`OPS_UC`] and `IBV_QP_EX_WITH_RDMA_READ`, `_ATOMIC_CMP_AND_SWP`, `_ATOMIC_FETCH_AND_ADD`,
/// `_LOCAL_INV`, `_BIND_MW`, `_SEND_WITH_INV`, and [`FLUSH_AND_ATOMIC_WRITE`].
const OPS_RC: u64 = 0b11_1111_1111 | FLUSH_AND_ATOMIC_WRITE;
/// `IBV_QP_EX_WITH_FLUSH` (1 << 11) and `IBV_QP_EX_WITH_ATOMIC_WRITE` (1 << 12): RC only.
const FLUSH_AND_ATOMIC_WRITE: u64 = 0b11 << 11;
/// `IBV_QP_EX_WITH_SEND`, `_SEND_WITH_IMM`.
const OPS_UD: u64 = 0b1100;
/// What rxe's provider takes beyond softverbs (`RXE_SUP_RC_QP_SEND_OPS_FLAGS`): nothing now.
const RXE_ONLY_RC: u64 = 0;
/// `RXE_SUP_UC_QP_SEND_OPS_FLAGS` beyond softverbs': SEND_WITH_INV (the IBA has no UC opcode
/// that carries an IETH; rxe fails the WR at execution).
const RXE_ONLY_UC: u64 = 1 << 9;

/// Why a QP of type `ty` cannot have the `ibv_wr_*` operations `ops`, or None. softverbs fills
/// an entry point for each operation it takes ([`qp_ex::fill`]); an operation rxe refuses for
/// the type is refused as rxe does, and one rxe takes but softverbs does not (SEND_WITH_INV on
/// UC) is refused too rather than left a NULL pointer.
fn send_ops_refused(ty: c_int, ops: u64) -> Option<String> {
    let (ours, rxe_only, name) = match QpType::from_c_int(ty) {
        Some(QpType::Rc) => (OPS_RC, RXE_ONLY_RC, "RC"),
        Some(QpType::Uc) => (OPS_UC, RXE_ONLY_UC, "UC"),
        Some(QpType::Ud) => (OPS_UD, 0, "UD"),
        _ => {
            return Some(format!(
                "send_ops_flags on QP type {ty}: rxe takes them for RC, UC and UD only"
            ))
        }
    };
    let extra = ops & !ours;
    if extra == 0 {
        return None;
    }
    Some(match extra & !rxe_only {
        0 => format!(
            "send_ops_flags {ops:#x}: {extra:#x} are rxe's but not softverbs' (SEND_WITH_INV \
             on UC: the IBA has no UC opcode that carries an IETH)"
        ),
        _ => format!("send_ops_flags {ops:#x}: {extra:#x} are not supported on a {name} QP (rxe refuses them too)"),
    })
}

/// `ibv_qp_to_qp_ex`: the `ibv_qp_ex` of a QP made with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`;
/// NULL for any other, as libibverbs gives.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(p: *mut ibv_qp) -> *mut ibv_qp_ex {
    match qp_of("ibv_qp_to_qp_ex", p) {
        // SAFETY: the batch is only read here, to see whether the QP has the wr_* API.
        Some(q) if unsafe { (*q.head.batch.get()).qp.is_some() } => p as *mut ibv_qp_ex,
        _ => null_mut(),
    }
}

/// The QP box behind `p`, if it is a live softverbs QP.
pub(crate) fn qp_of<'a>(what: &str, p: *mut ibv_qp) -> Option<&'a Qp> {
    obj::<Qp, ibv_qp_ex>(what, p as *mut ibv_qp_ex, Magic::Qp)
}

impl Qp {
    /// softverbs' QP.
    pub(crate) fn qp(&self) -> &QueuePair {
        &self.qp
    }
}

/// `ibv_modify_qp`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    const W: &str = "ibv_modify_qp";
    let Some(q) = qp_of(W, p) else { return libc::EINVAL };
    if attr.is_null() {
        return refuse(W, libc::EINVAL, "qp_attr is NULL");
    }
    // SAFETY: checked non-NULL.
    let a = unsafe { &*attr };
    let Some(m) = QpAttrMask::from_bits(mask as u32) else {
        return refuse(
            W,
            libc::EOPNOTSUPP,
            &format!("attr_mask {mask:#x} has bits softverbs lacks"),
        );
    };
    let st = |s| QpState::from_c_int(s).ok_or(());
    let (Ok(state), Ok(cur)) = (
        if m.contains(QpAttrMask::STATE) { st(a.qp_state) } else { Ok(QpState::Reset) },
        if m.contains(QpAttrMask::CUR_STATE) { st(a.cur_qp_state) } else { Ok(QpState::Reset) },
    ) else {
        return refuse(W, libc::EINVAL, "qp_state is not a QP state");
    };
    let mtu = if m.contains(QpAttrMask::PATH_MTU) {
        match Mtu::from_c_int(a.path_mtu) {
            Some(m) => m,
            None => return refuse(W, libc::EINVAL, &format!("path_mtu {} is no MTU", a.path_mtu)),
        }
    } else {
        Mtu::default()
    };
    let acc = if m.contains(QpAttrMask::ACCESS_FLAGS) {
        match access(W, a.qp_access_flags) {
            Ok(f) => f,
            Err(e) => return e,
        }
    } else {
        Default::default()
    };
    let qa = QpAttr {
        qp_state: state,
        cur_qp_state: cur,
        path_mtu: mtu,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: acc,
        cap: QpCap {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        },
        ah_attr: ah_attr(&a.ah_attr),
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        sq_draining: false,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    };
    match q.qp.modify(&qa, m) {
        Ok(()) => {
            if m.contains(QpAttrMask::STATE) {
                // SAFETY: checked live.
                unsafe { (*p).state = a.qp_state };
            }
            0
        }
        Err(e) => refuse_err(W, &e),
    }
}

/// `ibv_query_qp`: every attribute, whatever the mask asks (as providers do).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    const W: &str = "ibv_query_qp";
    let Some(q) = qp_of(W, p) else { return libc::EINVAL };
    if attr.is_null() || init.is_null() {
        return refuse(W, libc::EINVAL, "qp_attr or qp_init_attr is NULL");
    }
    let (a, cap) = match q.qp.query() {
        Ok(x) => x,
        Err(e) => return refuse_err(W, &e),
    };
    let ccap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    let c = ibv_qp_attr {
        qp_state: a.qp_state.to_c_int(),
        cur_qp_state: a.cur_qp_state.to_c_int(),
        path_mtu: a.path_mtu.to_c_int(),
        path_mig_state: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: ccap,
        ah_attr: ah_attr_c(&a.ah_attr),
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ..Default::default()
    };
    // SAFETY: both checked non-NULL; p checked live.
    unsafe {
        attr.write(c);
        let i = &mut *init;
        i.qp_context = (*p).qp_context;
        i.send_cq = (*p).send_cq;
        i.recv_cq = (*p).recv_cq;
        i.srq = (*p).srq;
        i.cap = ccap;
        i.qp_type = (*p).qp_type;
        i.sq_sig_all = 0;
        (*p).state = a.qp_state.to_c_int();
    }
    0
}

/// `ibv_destroy_qp`.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(p: *mut ibv_qp) -> c_int {
    let Some(q) = qp_of("ibv_destroy_qp", p) else { return libc::EINVAL };
    if let Err(e) = q.qp.clone().destroy() {
        return refuse_err("ibv_destroy_qp", &e);
    }
    if lookup(&QPS, q.head.c.qp_base.qp_num) == p as usize {
        track(&QPS, q.head.c.qp_base.qp_num, None);
    }
    // SAFETY: checked live.
    unsafe { free::<Qp, ibv_qp_ex>(p as *mut ibv_qp_ex) };
    0
}

/// `ibv_attach_mcast`: the UD QP receives the datagrams sent to the multicast group `gid`
/// (`lid` means nothing on a RoCE port). `EINVAL` for a QP that is not UD or a GID that is not
/// multicast, as the kernel's `ib_attach_mcast`.
///
/// # Safety
/// `p` is a QP of this library; `gid` is NULL or points to a GID.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(p: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mcast("ibv_attach_mcast", p, gid, lid, true) }
}

/// `ibv_detach_mcast`: undoes [`ibv_attach_mcast`]; `EINVAL` for a QP not attached to `gid`.
///
/// # Safety
/// As [`ibv_attach_mcast`].
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(p: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mcast("ibv_detach_mcast", p, gid, lid, false) }
}

/// # Safety
/// As [`ibv_attach_mcast`].
unsafe fn mcast(w: &str, p: *mut ibv_qp, gid: *const ibv_gid, lid: u16, attach: bool) -> c_int {
    let Some(q) = qp_of(w, p) else { return libc::EINVAL };
    if gid.is_null() {
        return refuse(w, libc::EINVAL, "the GID is NULL");
    }
    // SAFETY: non-NULL, and the caller's contract says it points to a GID.
    let gid = verbs_api::Gid(unsafe { (*gid).raw });
    let done = if attach { q.qp.attach_mcast(&gid, lid) } else { q.qp.detach_mcast(&gid, lid) };
    match done {
        Ok(()) => 0,
        Err(e) => refuse_err(w, &e),
    }
}

/// One C send WR as the backend takes it, its SGEs in `buf` and its inline bytes (read from
/// the program's memory now, as a NIC copies them into the WQE) in `inline_buf`; or the errno
/// it is refused with.
#[inline]
fn convert<'a>(
    q: &Qp,
    w: &ibv_send_wr,
    buf: &'a mut [Sge; MAX_SGE],
    inline_buf: &'a mut [u8; 256],
) -> Result<SendWr<'a>, c_int> {
    const W: &str = "ibv_post_send";
    let Some(opcode) = WrOpcode::from_c_int(w.opcode) else {
        return Err(refuse(
            W,
            libc::EINVAL,
            &format!("opcode {}: not supported by softverbs", w.opcode),
        ));
    };
    if matches!(opcode, WrOpcode::Flush | WrOpcode::AtomicWrite) {
        // struct ibv_send_wr has no fields for them (rxe's provider copies none either).
        let why = format!("{}: post it with ibv_wr_flush / ibv_wr_atomic_write", opcode.name());
        return Err(refuse(W, libc::EINVAL, &why));
    }
    if w.send_flags & !0xf != 0 {
        return Err(refuse(
            W,
            libc::EINVAL,
            &format!("send_flags {:#x}: unknown bits", w.send_flags),
        ));
    }
    if opcode == WrOpcode::BindMw && w.tail[0] == 0 {
        // rxe's provider reads bind_mw.mw->rkey here (and crashes on NULL).
        return Err(refuse(W, libc::EINVAL, "IBV_WR_BIND_MW with bind_mw.mw NULL"));
    }
    let flags = SendFlags::from_bits_truncate(w.send_flags);
    let Some(sg) = sges(W, w.sg_list, w.num_sge, buf) else { return Err(libc::EINVAL) };
    // The SGEs' lkeys of inline data are not looked at.
    let inline_data = if flags.contains(SendFlags::INLINE) {
        let total: usize = sg.iter().map(|s| s.length as usize).sum();
        if total > q.max_inline as usize || total > inline_buf.len() {
            return Err(refuse(
                W,
                libc::EINVAL,
                &format!("{total} inline bytes: more than max_inline_data {}", q.max_inline),
            ));
        }
        let mut off = 0;
        for s in sg {
            // SAFETY: an inline SGE names the program's own readable memory.
            let src = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            inline_buf[off..off + src.len()].copy_from_slice(src);
            off += src.len();
        }
        Some(&inline_buf[..total])
    } else {
        None
    };
    let u = w.wr;
    let ud = if QpType::from_c_int(q.head.c.qp_base.qp_type) == Some(QpType::Ud) {
        let Some(ah) = ah_of(W, u.w0 as *mut ibv_ah) else { return Err(libc::EINVAL) };
        Some(UdTarget {
            ah: ah.ah.clone(),
            remote_qpn: u.w1 as u32,
            remote_qkey: (u.w1 >> 32) as u32,
        })
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        sg_list: sg,
        opcode,
        send_flags: flags,
        imm_data: u32::from_be(w.imm_data),
        rdma: RdmaTarget { remote_addr: u.w0, rkey: u.w1 as u32 },
        atomic: AtomicTarget {
            remote_addr: u.w0,
            compare_add: u.w1,
            swap: u.w2,
            rkey: u.w3 as u32,
        },
        ud,
        inline_data,
        flush: Default::default(),
        invalidate_rkey: w.imm_data,
        bind_mw: match opcode {
            WrOpcode::BindMw => crate::mw::bind_wr_of(&w.tail),
            _ => Default::default(),
        },
    })
}

/// `ops.post_send`, behind the inline `ibv_post_send`. The chain goes to the backend in one
/// call, as a NIC's driver writes every WQE before one doorbell: WRs completed inside the call
/// (direct reach) hold their send-queue slots until it returns, so a chain longer than the
/// queue is refused `ENOMEM` at the WR that does not fit, as on rxe and mlx5, and not
/// accepted because earlier ones retired in between. On a refusal `*bad` names the WR refused
/// (the backend's [`verbs_api::Error::wr_index`]; a WR this library cannot convert is refused
/// here after those before it are posted) and none after it is posted.
pub(crate) unsafe extern "C" fn post_send(
    p: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let Some(q) = qp_of("ibv_post_send", p) else { return libc::EINVAL };
    let set_bad = |at: *mut ibv_send_wr| {
        if !bad.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad = at };
        }
    };
    if wr.is_null() {
        return 0;
    }
    // SAFETY: the caller's WR chain.
    let first = unsafe { &*wr };
    if first.next.is_null() {
        // One WR, the common case: converted on the stack.
        let (mut buf, mut inline_buf) = ([Sge::default(); MAX_SGE], [0u8; 256]);
        let rc = match convert(q, first, &mut buf, &mut inline_buf) {
            Ok(one) => match q.qp.post_send(std::slice::from_ref(&one)) {
                Ok(()) => 0,
                Err(e) => refuse_err("ibv_post_send", &e),
            },
            Err(rc) => rc,
        };
        if rc != 0 {
            set_bad(wr);
        }
        return rc;
    }
    post_chain(q, wr, set_bad)
}

/// A WR of a chain being collected: its fields but the borrowed ones, and its SGEs and
/// inline bytes as ranges of the chain's two buffers.
type Part = (SendWr<'static>, (usize, usize), Option<(usize, usize)>);

/// A chain of more than one send WR, posted in batches of at most `max_send_wr + 1` (the
/// backend refuses one of those at the latest, so a hostile chain of any length allocates
/// no more than that).
fn post_chain(q: &Qp, mut wr: *mut ibv_send_wr, set_bad: impl Fn(*mut ibv_send_wr)) -> c_int {
    let bound = q.max_send_wr as usize + 1;
    let (mut buf, mut inline_buf) = ([Sge::default(); MAX_SGE], [0u8; 256]);
    while !wr.is_null() {
        // The batch: each WR with its SGEs and inline bytes as ranges of two shared buffers.
        let mut at: Vec<*mut ibv_send_wr> = Vec::new();
        let mut parts: Vec<Part> = Vec::new();
        let (mut sgl, mut inl) = (Vec::<Sge>::new(), Vec::<u8>::new());
        let mut refused = None;
        while !wr.is_null() && at.len() < bound {
            // SAFETY: the caller's WR chain.
            let w = unsafe { &*wr };
            match convert(q, w, &mut buf, &mut inline_buf) {
                Ok(c) => {
                    let s = (sgl.len(), sgl.len() + c.sg_list.len());
                    sgl.extend_from_slice(c.sg_list);
                    let i = c.inline_data.map(|d| {
                        inl.extend_from_slice(d);
                        (inl.len() - d.len(), inl.len())
                    });
                    parts.push((SendWr { sg_list: &[], inline_data: None, ..c }, s, i));
                    at.push(wr);
                    wr = w.next;
                }
                Err(rc) => {
                    refused = Some(rc);
                    break;
                }
            }
        }
        let wrs: Vec<SendWr<'_>> = parts
            .into_iter()
            .map(|(w, s, i)| SendWr {
                sg_list: &sgl[s.0..s.1],
                inline_data: i.map(|(a, b)| &inl[a..b]),
                ..w
            })
            .collect();
        if !wrs.is_empty() {
            if let Err(e) = q.qp.post_send(&wrs) {
                set_bad(at[e.wr_index.unwrap_or(0).min(at.len() - 1)]);
                return refuse_err("ibv_post_send", &e);
            }
        }
        if let Some(rc) = refused {
            set_bad(wr);
            return rc;
        }
    }
    0
}

/// `ops.post_recv`, behind the inline `ibv_post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    p: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let Some(q) = qp_of("ibv_post_recv", p) else { return libc::EINVAL };
    post_recv_chain("ibv_post_recv", wr, bad, |w| q.qp.post_recv(w))
}

/// `ops.bind_mw`, behind the inline `ibv_bind_mw` (which checked the window's type and the
/// MR's PD): a zero-based bind is `EINVAL`, as rxe's provider refuses it; otherwise the bind
/// WR is posted and the window takes its new rkey. Returns 0 or the errno (also in `errno`).
pub(crate) unsafe extern "C" fn bind_mw(
    q: *mut ibv_qp,
    m: *mut ibv_mw,
    b: *mut ibv_mw_bind,
) -> c_int {
    const W: &str = "ibv_bind_mw";
    let Some(qp) = qp_of(W, q) else { return libc::EINVAL };
    let Some(mw) = crate::mw::mw_of(W, m) else { return libc::EINVAL };
    if b.is_null() {
        return refuse(W, libc::EINVAL, "mw_bind is NULL");
    }
    // SAFETY: checked non-NULL; the caller's struct ibv_mw_bind.
    let b = unsafe { &*b };
    if b.bind_info.mw_access_flags & crate::mw::ZERO_BASED != 0 {
        return refuse(W, libc::EINVAL, "a zero-based bind (rxe refuses it for ibv_bind_mw)");
    }
    let mr = match b.bind_info.mr.is_null() {
        true => None,
        false => match obj::<Mr, _>(W, b.bind_info.mr, Magic::Mr) {
            Some(mr) => Some(mr),
            None => return libc::EINVAL,
        },
    };
    let info = crate::mw::bind_info(&b.bind_info, mr);
    let flags = SendFlags::from_bits_truncate(b.send_flags);
    match mw.mw.bind(qp.qp(), &info, b.wr_id, flags) {
        Ok(rkey) => {
            // SAFETY: our live object; the program reads mw->rkey for the new key.
            unsafe { (*m).rkey = rkey };
            0
        }
        Err(e) => refuse_err(W, &e),
    }
}
