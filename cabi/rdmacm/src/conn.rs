//! Connections: `rdma_create_qp` (the QP walked to INIT, then RTR and RTS as the connection is
//! made), `rdma_connect` / `rdma_accept` / `rdma_reject` / `rdma_disconnect` as REQ, REP, RTU,
//! REJ, DREQ and DREP messages, and `rdma_get_cm_event` turning what arrives into events.
use std::ffi::{c_int, c_void};

use crate::cm_abi::*;
use crate::state::*;
use verbs_api::{IbvEnum, QpAttrMask, QpState};

use softverbs_cabi_abi::{
    ibv_context, ibv_device_attr, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, verbs_context, vslot, IBV_QP_INIT_ATTR_PD,
};

unsafe extern "C" {
    fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
}

// The `ibv_qp_attr_mask` bits the CM's moves use, from verbs-api's `QpAttrMask` (libibverbs'
// values).
const fn mask(m: QpAttrMask) -> c_int {
    m.bits() as c_int
}
pub const STATE: c_int = mask(QpAttrMask::STATE);
pub const ACCESS: c_int = mask(QpAttrMask::ACCESS_FLAGS);
pub const PKEY: c_int = mask(QpAttrMask::PKEY_INDEX);
pub const PORT: c_int = mask(QpAttrMask::PORT);
pub const QKEY: c_int = mask(QpAttrMask::QKEY);
pub const AV: c_int = mask(QpAttrMask::AV);
pub const MTU: c_int = mask(QpAttrMask::PATH_MTU);
pub const TIMEOUT: c_int = mask(QpAttrMask::TIMEOUT);
pub const RETRY: c_int = mask(QpAttrMask::RETRY_CNT);
pub const RNR_RETRY: c_int = mask(QpAttrMask::RNR_RETRY);
pub const RQ_PSN: c_int = mask(QpAttrMask::RQ_PSN);
pub const MAX_RD: c_int = mask(QpAttrMask::MAX_QP_RD_ATOMIC);
pub const MIN_RNR: c_int = mask(QpAttrMask::MIN_RNR_TIMER);
pub const SQ_PSN: c_int = mask(QpAttrMask::SQ_PSN);
pub const MAX_DEST_RD: c_int = mask(QpAttrMask::MAX_DEST_RD_ATOMIC);
pub const DEST_QPN: c_int = mask(QpAttrMask::DEST_QPN);

/// Move `qp` with `attr`/`mask`, naming the step in the message if the verbs refuse.
pub fn modify(qp: *mut ibv_qp, mut attr: ibv_qp_attr, mask: c_int, step: &str) -> c_int {
    // SAFETY: qp is the id's live QP.
    let r = unsafe { ibv_modify_qp(qp, &mut attr, mask) };
    // A move to ERR finds the QP in ERR already when the program moved it, or disconnects
    // twice: not worth a line.
    if r != 0 && QpState::from_c_int(attr.qp_state) != Some(QpState::Err) {
        eprintln!("librdmacm (softverbs): moving the QP to {step} failed (errno {r})");
    }
    r
}

/// The QP to INIT (UD: on to RTS, as librdmacm does for UD ids).
fn qp_init(qp: *mut ibv_qp, ud: bool) -> c_int {
    let mut a = ibv_qp_attr {
        qp_state: QpState::Init.to_c_int(),
        port_num: 1,
        pkey_index: 0,
        ..Default::default()
    };
    if ud {
        a.qkey = RDMA_UDP_QKEY;
        let r = modify(qp, a, STATE | PKEY | PORT | QKEY, "INIT");
        if r != 0 {
            return r;
        }
        let r = modify(
            qp,
            ibv_qp_attr { qp_state: QpState::Rtr.to_c_int(), ..Default::default() },
            STATE,
            "RTR",
        );
        if r != 0 {
            return r;
        }
        return modify(
            qp,
            ibv_qp_attr { qp_state: QpState::Rts.to_c_int(), ..Default::default() },
            STATE | SQ_PSN,
            "RTS",
        );
    }
    a.qp_access_flags = 1 | 2 | 4 | 8; // local write, remote write, read, atomic
    modify(qp, a, STATE | PKEY | PORT | ACCESS, "INIT")
}

/// The QP to RTR then RTS towards the peer recorded in `st`, at its GID `gid` from this port's
/// GID index (v6.rs `path_gid`).
pub fn qp_connect(
    qp: *mut ibv_qp,
    st: &St,
    responder: u8,
    initiator: u8,
    gid: ([u8; 16], u8),
) -> c_int {
    let mut a = ibv_qp_attr {
        qp_state: QpState::Rtr.to_c_int(),
        path_mtu: crate::state::path_mtu(st), // the REQ's: the active side's port MTU
        dest_qp_num: st.peer_qpn,
        rq_psn: st.peer_psn,
        max_dest_rd_atomic: responder.max(1),
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid.raw = gid.0;
    a.ah_attr.grh.sgid_index = gid.1;
    a.ah_attr.grh.hop_limit = 64;
    let r = modify(qp, a, STATE | AV | MTU | RQ_PSN | MAX_DEST_RD | MIN_RNR | DEST_QPN, "RTR");
    if r != 0 {
        return r;
    }
    let b = ibv_qp_attr {
        qp_state: QpState::Rts.to_c_int(),
        sq_psn: st.my_psn,
        timeout: crate::state::ack_timeout(st),
        retry_cnt: 7,
        rnr_retry: st.rnr_retry,
        max_rd_atomic: initiator.max(1),
        ..Default::default()
    };
    modify(qp, b, STATE | SQ_PSN | TIMEOUT | RETRY | RNR_RETRY | MAX_RD, "RTS")
}

/// `rdma_create_qp`: a QP on the id's device (`pd`, or the id's own), moved to INIT (UD: RTS).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    cid: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's arguments, checked there.
    unsafe { create_qp(cid, pd, attr, std::ptr::null_mut()) }
}

/// [`rdma_create_qp`] and [`rdma_create_qp_ex`]: the CQs the attributes lack made, the QP made
/// by `ibv_create_qp`, or by the device's `create_qp_ex` with the extended attributes `ex`
/// (whose first fields are `attr`), then moved to INIT and shown in the id.
unsafe fn create_qp(
    cid: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
    ex: *mut ibv_qp_init_attr_ex,
) -> c_int {
    if id_ref(cid).is_none() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's id.
    let pd = if pd.is_null() { unsafe { (*cid).pd } } else { pd };
    if pd.is_null() || attr.is_null() {
        eprintln!("librdmacm (softverbs): rdma_create_qp needs a PD and init attributes");
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    if crate::cq::fill_qp_attr(cid, unsafe { &mut *attr }) != 0 {
        return -1;
    }
    let qp = if ex.is_null() {
        // SAFETY: the caller's attributes and PD.
        unsafe { ibv_create_qp(pd, attr) }
    } else {
        // SAFETY: the caller's extended attributes, now with the PD and CQs.
        unsafe {
            (*ex).pd = pd;
            (*ex).comp_mask |= IBV_QP_INIT_ATTR_PD;
            create_qp_ex_op(pd, ex)
        }
    };
    if qp.is_null() {
        // The verbs' errno, whatever undoing the CQs leaves in it.
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
        crate::cq::destroy_cqs(cid);
        return fail(err);
    }
    // SAFETY: the caller's attributes.
    if qp_init(qp, unsafe { (*attr).qp_type } == UD_QPT) != 0 {
        // SAFETY: just made.
        unsafe { ibv_destroy_qp(qp) };
        crate::cq::destroy_cqs(cid);
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's id and the new QP.
    unsafe {
        (*cid).qp = qp;
        (*cid).pd = pd;
        (*cid).send_cq = (*attr).send_cq;
        (*cid).recv_cq = (*attr).recv_cq;
        // Not the id's `srq`: librdmacm sets that only in rdma_create_srq, and rdma_destroy_ep
        // destroys it; the program's own SRQ (libfabric's shared receive context) stays its.
        (*cid).qp_type = (*attr).qp_type;
    }
    0
}

/// What `<infiniband/verbs.h>`'s inline `ibv_create_qp_ex` does: the `create_qp_ex` op of the
/// PD's device, from the `verbs_context` in front of its `ibv_context`; NULL with `EOPNOTSUPP`
/// when the device has none.
unsafe fn create_qp_ex_op(pd: *mut ibv_pd, ex: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    type CreateQpEx =
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
    // SAFETY: a PD of the loaded libibverbs; its context is live.
    let ctx = unsafe { (*pd).context };
    // SAFETY: as verbs.h's verbs_get_ctx: `abi_compat` says whether a verbs_context sits in
    // front of the context, and its `sz` whether it reaches the op.
    let op = unsafe {
        if ctx.is_null() || (*ctx).abi_compat as usize != usize::MAX {
            std::ptr::null()
        } else {
            let v = ctx.cast::<u8>().sub(std::mem::offset_of!(verbs_context, context));
            let v = v.cast::<verbs_context>();
            let reach = size_of::<verbs_context>() - vslot::CREATE_QP_EX * size_of::<usize>();
            if (*v).sz >= reach {
                (*v).ops[vslot::CREATE_QP_EX]
            } else {
                std::ptr::null()
            }
        }
    };
    if op.is_null() {
        fail(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: the op's C signature (verbs.h's `create_qp_ex`).
    let f = unsafe { std::mem::transmute::<*const c_void, CreateQpEx>(op) };
    // SAFETY: the device's own op, with its context and the caller's attributes.
    unsafe { f(ctx, ex) }
}

/// `rdma_create_qp_ex`: as `rdma_create_qp`, with the PD in the extended attributes
/// (`IBV_QP_INIT_ATTR_PD`, else the id's) and the other extended attributes (the `ibv_wr_*`
/// API's `send_ops_flags`, ...) passed to the device's `ibv_create_qp_ex`, as librdmacm does.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    cid: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 { a.pd } else { std::ptr::null_mut() };
    // The first fields of ibv_qp_init_attr_ex are an ibv_qp_init_attr's (cabi-abi's layout
    // test checks both against verbs.h).
    let base = attr.cast::<ibv_qp_init_attr>();
    if a.comp_mask & !IBV_QP_INIT_ATTR_PD == 0 {
        // SAFETY: as rdma_create_qp.
        return unsafe { create_qp(cid, pd, base, std::ptr::null_mut()) };
    }
    // SAFETY: as rdma_create_qp, with the extended attributes.
    unsafe { create_qp(cid, pd, base, attr) }
}

/// `rdma_destroy_qp`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(cid: *mut rdma_cm_id) {
    if id_ref(cid).is_none() {
        return;
    }
    // SAFETY: the caller's id; its QP made by rdma_create_qp.
    unsafe {
        if !(*cid).qp.is_null() {
            ibv_destroy_qp((*cid).qp);
            (*cid).qp = std::ptr::null_mut();
        }
    }
    crate::cq::destroy_cqs(cid);
}

/// The private data of a connection parameter (at most `max` bytes, librdmacm's limit for
/// the message), or None when too long.
fn private(p: *const c_void, len: u8, max: usize) -> Option<Vec<u8>> {
    if p.is_null() || len == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the caller's buffer of len bytes.
    let v = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) }.to_vec();
    (v.len() <= max).then_some(v)
}

/// A random starting PSN (24 bits).
pub fn psn() -> u32 {
    (token() as u32).wrapping_mul(2_654_435_761) ^ std::process::id() & 0xff_ffff
}

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH` in `rdma_conn_param`: as many as the device
/// allows.
const RD_MAX: u8 = 0xff;

/// The id's device's `max_qp_rd_atom` and `max_qp_init_rd_atom` (librdmacm's
/// `max_responder_resources` and `max_initiator_depth`); 1 each without a device.
fn rd_limits(id: &Id) -> (u8, u8) {
    // SAFETY: all-zero is a valid ibv_device_attr.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the id's device context (set once its address is bound or resolved).
    if id.c.verbs.is_null() || unsafe { ibv_query_device(id.c.verbs, &mut a) } != 0 {
        return (1, 1);
    }
    let cap = |v: c_int| v.clamp(1, RD_MAX as c_int - 1) as u8;
    (cap(a.max_qp_rd_atom), cap(a.max_qp_init_rd_atom))
}

/// The responder resources and initiator depth an `rdma_connect` or `rdma_accept` asks for, as
/// librdmacm's: `RD_MAX` is the device's maximum (at most `offered`, the REQ's, for an
/// accept); another value over the device's is `EINVAL` for an `RDMA_PS_TCP` id
/// (`ucma_valid_param`), else taken as it is.
fn rd_atomic(id: &Id, p: &rdma_conn_param, offered: u8, what: &str) -> Result<(u8, u8), c_int> {
    let (resp_max, init_max) = rd_limits(id);
    let pick = |v: u8, max: u8, name: &str| match v {
        RD_MAX => Ok(max.min(offered)),
        v if v > max && id.c.ps == RDMA_PS_TCP => {
            eprintln!("librdmacm (softverbs): {what}: {name} {v} is over the device's {max}");
            Err(fail(libc::EINVAL))
        }
        v => Ok(v),
    };
    Ok((
        pick(p.responder_resources, resp_max, "responder_resources")?,
        pick(p.initiator_depth, init_max, "initiator_depth")?,
    ))
}

/// `rdma_connect` (sync.rs exports it): send a REQ to the listener at the resolved address;
/// REJECTED (status 8, invalid service ID, as the IB CM answers) when nothing listens there.
pub unsafe fn connect(cid: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    // SAFETY: NULL or the caller's parameters.
    let p = unsafe { param.as_ref() };
    let Some(pd) = p.map_or(Some(Vec::new()), |p| private(p.private_data, p.private_data_len, 56))
    else {
        eprintln!("librdmacm (softverbs): rdma_connect: private data over 56 bytes");
        return fail(libc::EINVAL);
    };
    // NULL parameters: the device's maxima, as librdmacm's rdma_connect.
    let init = match p.map(|p| rd_atomic(id, p, RD_MAX, "rdma_connect")) {
        Some(Ok((_, init))) => init,
        Some(Err(r)) => return r,
        None => rd_limits(id).1,
    };
    let mut st = id.st.lock().expect("id");
    if !st.state.has_addr() {
        eprintln!("librdmacm (softverbs): rdma_connect before the address and route are resolved");
        return fail(libc::EINVAL);
    }
    st.state.move_to(CmState::Connect);
    st.my_psn = psn() & 0xff_ffff;
    st.rnr_retry = p.map_or(7, |p| p.rnr_retry_count);
    let ch = channel_of(id);
    let mut m = Msg::new(kind::REQ, 0);
    m.from = id.token;
    m.set_reply(&crate::home::reply_name(id, &mut st));
    // SAFETY: the caller's id; its QP, if any.
    m.qpn = unsafe { (*cid).qp.as_ref().map_or(p.map_or(0, |p| p.qp_num), |q| q.qp_num) };
    m.psn = st.my_psn;
    m.src_ip = st.src.0;
    m.src_port = st.src.1;
    m.dst_ip = st.dst.0;
    m.dst_port = st.dst.1;
    m.rd_atomic = init;
    m.rnr_retry = st.rnr_retry;
    st.path_mtu = crate::state::port_mtu(id.c.verbs);
    m.mtu = st.path_mtu;
    // With a QP, librdmacm takes the local ECE from ibv_query_ece, which has none (as rxe).
    m.ece = if id.c.qp.is_null() { st.local_ece } else { [0, 0] };
    if let Some(scope) = crate::v6::scope(id.token) {
        m.v6 = 1;
        m.scope = scope.to_ne_bytes();
    }
    let ib = ps_ib(id);
    m.ps_ib = ib as u8;
    m.set_pd(&pd);
    let dst = st.dst;
    drop(st);
    // A peer on another host: through the gateway (wire.rs), which takes a REQ to token 0.
    let found = match crate::wire::remote(dst.0) {
        Some(gateway) => {
            // A UD id connects by SIDR on the wire: the gateway knows it by the Q_Key.
            if is_ud(id) {
                m.qkey = RDMA_UDP_QKEY;
            }
            Named::Listener(gateway, 0)
        }
        None => crate::watch::look_up(dst, ib),
    };
    match found {
        Named::Listener(path, tok) => {
            m.to = tok;
            if send(ch, &path, &m) {
                id.st.lock().expect("id").req_to = Some(path);
                crate::watch::watch_peers();
                return 0;
            }
        }
        Named::Closed => {
            // The process that listened there is alive and may listen again (perftest -R
            // does, between its two connections): the REQ waits for what it does next.
            crate::watch::hold_req(m, &m.reply_path(), dst);
            return 0;
        }
        Named::Nothing => {}
    }
    post_local(id, ev::REJECTED, 8);
    0
}

/// Give `id` DISCONNECTED as if its peer had answered a DREQ (the peer is gone).
fn disconnected_now(id: &Id) {
    let ch = channel_of(id);
    send(ch, &ch.path, &Msg::new(kind::DREP, id.token));
}

/// Send the DREP that the peer's DREQ waits for, if one does (`St::drep_to`); with
/// `timewait` (the id lives on), the id enters timewait and TIMEWAIT_EXIT follows after it. A
/// peer gone meanwhile gets nothing (its socket is gone; its ids with it).
pub fn answer_dreq(id: &Id, timewait: bool) {
    let mut st = id.st.lock().expect("id");
    let Some((to, tok)) = st.drep_to.take() else { return };
    let home = crate::home::home(id, &st);
    drop(st);
    let ch = channel_of(id);
    let mut r = Msg::new(kind::DREP, tok);
    r.from = id.token;
    send(ch, &to, &r);
    if timewait && !is_ud(id) {
        crate::watch::start_timewait(&home, id.token);
    }
}

/// `rdma_accept` (sync.rs exports it): move the QP to RTR and RTS and send the REP;
/// ESTABLISHED follows the RTU.
pub unsafe fn accept(cid: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    // SAFETY: NULL or the caller's parameters.
    let p = unsafe { param.as_ref() };
    let Some(pd) = p.map_or(Some(Vec::new()), |p| private(p.private_data, p.private_data_len, 196))
    else {
        eprintln!("librdmacm (softverbs): rdma_accept: private data over 196 bytes");
        return fail(libc::EINVAL);
    };
    let mut st = id.st.lock().expect("id");
    let Some((to, tok)) = st.peer.clone() else {
        eprintln!("librdmacm (softverbs): rdma_accept on an id without a connection request");
        return fail(libc::EINVAL);
    };
    // Chosen once: rdma_init_qp_attr may have given it to a QP the program moves itself.
    if st.my_psn == 0 {
        st.my_psn = (psn() & 0xff_ffff).max(1);
    }
    if let Some(p) = p {
        st.rnr_retry = p.rnr_retry_count;
    }
    // SAFETY: the caller's id.
    let qp = unsafe { (*cid).qp };
    let (resp, init) = match p.map(|p| rd_atomic(id, p, st.req_rd_atomic, "rdma_accept")) {
        Some(Ok(r)) => r,
        Some(Err(r)) => return r,
        // NULL parameters: the REQ's, at most the device's, as librdmacm's rdma_accept.
        None => {
            let (resp_max, init_max) = rd_limits(id);
            (st.req_rd_atomic.min(resp_max), st.req_rd_atomic.min(init_max))
        }
    };
    let gid = crate::v6::path_gid(id.token, st.dst.0);
    if !qp.is_null() && !is_ud(id) && qp_connect(qp, &st, resp, init, gid) != 0 {
        return fail(libc::EINVAL);
    }
    let ch = channel_of(id);
    let mut m = Msg::new(kind::REP, tok);
    m.from = id.token;
    m.set_reply(&crate::home::reply_name(id, &mut st));
    // SAFETY: NULL or the id's QP.
    m.qpn = unsafe { qp.as_ref().map_or(p.map_or(0, |p| p.qp_num), |q| q.qp_num) };
    m.psn = st.my_psn;
    m.qkey = RDMA_UDP_QKEY;
    m.rd_atomic = init;
    // As librdmacm: the REQ's vendor echoed, with this side's options (none with a QP).
    m.ece = [st.remote_ece[0], if qp.is_null() { st.local_ece[1] } else { 0 }];
    m.src_ip = st.src.0;
    m.src_port = st.src.1;
    m.set_pd(&pd);
    drop(st);
    if !send(ch, &to, &m) {
        // The requester's process is gone: its kernel would have rejected the connection
        // (status 4, timeout) when its id went.
        let mut r = Msg::new(kind::REJ, id.token);
        r.status = 4;
        send(ch, &ch.path, &r);
    }
    0
}

/// `rdma_reject`: send a REJ (the peer gets REJECTED, status 28: consumer defined).
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(cid: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { reject_with(cid, data, len, 28) }
}

/// `rdma_reject_ece`: a REJ with the reason "vendor option not supported" (status 35).
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    cid: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { reject_with(cid, data, len, 35) }
}

/// A REJ with `status` (the REJ reason the peer's REJECTED event carries).
unsafe fn reject_with(cid: *mut rdma_cm_id, data: *const c_void, len: u8, status: i32) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let Some(pd) = private(data, len, 148) else { return fail(libc::EINVAL) };
    // The request is answered: the id has no peer any more (an accept after this is EINVAL).
    let Some((to, tok)) = id.st.lock().expect("id").peer.take() else { return fail(libc::EINVAL) };
    let mut m = Msg::new(kind::REJ, tok);
    m.status = status;
    m.set_pd(&pd);
    send(channel_of(id), &to, &m);
    0
}

/// `rdma_disconnect` (sync.rs exports it): QP to ERR (flushing what is posted) and a DREQ to
/// the peer; DISCONNECTED follows its DREP (at once when the peer is gone). On an id whose peer
/// disconnected first (its DREQ read, DISCONNECTED given), the QP still goes to ERR, as
/// librdmacm's `ucma_shutdown` does before it asks the kernel, and no DREQ leaves.
pub unsafe fn disconnect(cid: *mut rdma_cm_id) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if !id.c.qp.is_null() {
        modify(
            id.c.qp,
            ibv_qp_attr { qp_state: QpState::Err.to_c_int(), ..Default::default() },
            STATE,
            "ERR",
        );
    }
    let mut st = id.st.lock().expect("id");
    let Some((to, tok)) = st.peer.clone() else { return fail(libc::EINVAL) };
    let done = st.state.disconnected();
    if !done {
        st.dreq_sent = true;
    }
    let home = crate::home::reply_name(id, &mut st);
    drop(st);
    if done {
        // The peer's DREQ came first: DISCONNECTED is given already, and the DREP answers it
        // now (the kernel's rdma_disconnect: `ib_send_cm_dreq` fails in DREQ_RCVD, so
        // `ib_send_cm_drep`); once answered, or after a DREP, nothing is sent.
        answer_dreq(id, true);
        return 0;
    }
    let ch = channel_of(id);
    let mut m = Msg::new(kind::DREQ, tok);
    m.from = id.token;
    m.set_reply(&home);
    if !send(ch, &to, &m) {
        disconnected_now(id);
    } else {
        // As the IB CM: DISCONNECTED after the DREQ's last retry if no DREP came.
        crate::watch::start_dreq_timeout(&home, id.token);
    }
    0
}
