//! For programs that make and move their QP themselves (`rping -q`): `rdma_init_qp_attr`, the
//! attributes and mask the kernel's CM gives for each state (drivers/infiniband/core/cma.c
//! `rdma_init_qp_attr`, cm.c `cm_init_qp_{init,rtr,rts}_attr`), and `rdma_establish`, which
//! sends the RTU that a CONNECT_RESPONSE left to the program.
use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use crate::cm_abi::*;
use crate::conn::{
    psn, ACCESS, AV, DEST_QPN, MAX_DEST_RD, MAX_RD, MIN_RNR, MTU, PKEY, PORT, QKEY, RETRY,
    RNR_RETRY, RQ_PSN, SQ_PSN, STATE, TIMEOUT,
};
use crate::state::*;
use verbs_api::{AccessFlags, IbvEnum, QpState};

use softverbs_cabi_abi::ibv_qp_attr;

// <infiniband/verbs.h>: enum ibv_access_flags (the mask bits and states are conn.rs's).
const REMOTE_WRITE: u32 = AccessFlags::REMOTE_WRITE.bits();
const REMOTE_READ: u32 = AccessFlags::REMOTE_READ.bits();
const REMOTE_ATOMIC: u32 = AccessFlags::REMOTE_ATOMIC.bits();

/// `rdma_init_qp_attr`: for the state in `attr.qp_state`, the attributes and mask with which
/// the program moves its own QP along with the connection, as the kernel's CM gives them:
///
/// - INIT: state, P_Key index 0, port 1, and for a UD id the Q_Key (`0x01234567`), for an RC
///   id the access flags: none before a connection, remote write once one is being made, with
///   remote read and atomic when the peer offers RDMA READ / atomic resources;
/// - RTR (RC, once the peer's REQ or REP came): the address vector to the peer's GID, the path
///   MTU (1024; across hosts the REQ's, the active side's port MTU), the peer's QP number and starting PSN, the responder resources, RNR timer 0;
/// - RTS (RC, as RTR): this side's starting PSN (the one the REQ or REP carries), ACK timeout
///   17 (a RoCE path's packet life time, 16, + 1, as the kernel CM; the same as the QPs the CM
///   moves itself), retry count 7, the RNR retry count, the initiator depth.
///
/// A UD id gets the INIT set for every state, as from the kernel. RTR or RTS of an RC id before
/// the peer is known is -1 with `EINVAL` and a line saying why (the kernel's CM refuses them too).
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    cid: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if attr.is_null() || mask.is_null() {
        return fail(libc::EINVAL);
    }
    if id.c.verbs.is_null() {
        eprintln!("librdmacm (softverbs): rdma_init_qp_attr: the id has no device yet (bind or resolve an address first)");
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes, read for the state asked for.
    let want = unsafe { (*attr).qp_state };
    let mut st = id.st.lock().expect("id");
    let state = QpState::from_c_int(want);
    let mut a = ibv_qp_attr { qp_state: want, ..Default::default() };
    let peer = st.peer.is_some();
    let m = if is_ud(id) || state == Some(QpState::Init) {
        a.pkey_index = 0;
        a.port_num = 1;
        if is_ud(id) {
            a.qkey = RDMA_UDP_QKEY;
            STATE | PKEY | PORT | QKEY
        } else {
            // A connection is being made once this side sent a REQ (its PSN is chosen) or
            // got one.
            if peer || st.my_psn != 0 {
                a.qp_access_flags = REMOTE_WRITE;
                if !peer || st.req_rd_atomic > 0 {
                    a.qp_access_flags |= REMOTE_READ | REMOTE_ATOMIC;
                }
            }
            STATE | PKEY | PORT | ACCESS
        }
    } else if !peer {
        eprintln!(
            "librdmacm (softverbs): rdma_init_qp_attr: no {} attributes before the peer's connection request or reply",
            if state == Some(QpState::Rtr) { "RTR" } else { "RTS" }
        );
        return fail(libc::EINVAL);
    } else if state == Some(QpState::Rtr) {
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        (a.ah_attr.grh.dgid.raw, a.ah_attr.grh.sgid_index) =
            crate::v6::path_gid(id.token, st.dst.0);
        a.ah_attr.grh.hop_limit = 64;
        a.path_mtu = crate::state::path_mtu(&st); // as the CM's own moves
        a.dest_qp_num = st.peer_qpn;
        a.rq_psn = st.peer_psn;
        a.max_dest_rd_atomic = st.req_rd_atomic.max(1);
        a.min_rnr_timer = 0;
        STATE | AV | MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD | MIN_RNR
    } else if state == Some(QpState::Rts) {
        if st.my_psn == 0 {
            // The passive side before rdma_accept: the PSN its REP will carry.
            st.my_psn = (psn() & 0xff_ffff).max(1);
        }
        a.sq_psn = st.my_psn;
        a.timeout = crate::state::ack_timeout(&st);
        a.retry_cnt = 7;
        a.rnr_retry = st.rnr_retry;
        a.max_rd_atomic = st.req_rd_atomic.max(1);
        STATE | SQ_PSN | TIMEOUT | RETRY | RNR_RETRY | MAX_RD
    } else {
        eprintln!("librdmacm (softverbs): rdma_init_qp_attr: state {want} is not INIT (1), RTR (2) or RTS (3)");
        return fail(libc::EINVAL);
    };
    drop(st);
    // SAFETY: the caller's out parameters.
    unsafe {
        *attr = a;
        *mask = m;
    }
    0
}

/// The ids that got a CONNECT_RESPONSE and owe their peer the RTU (by token).
fn pending() -> &'static Mutex<HashSet<u64>> {
    static P: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// Note that `id` got a CONNECT_RESPONSE: its RTU waits for `rdma_establish`.
pub fn await_establish(id: &Id) {
    pending().lock().expect("pending").insert(id.token);
}

/// `rdma_establish`: after a CONNECT_RESPONSE (an RC id without a CM-made QP, which the program
/// moved to RTS itself), send the RTU that gives the accepting side ESTABLISHED. Any other id
/// (one with a QP, one that got no reply, a passive one) is -1 with `EINVAL`, as librdmacm's.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(cid: *mut rdma_cm_id) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let owed = pending().lock().expect("pending").remove(&id.token);
    let mut st = id.st.lock().expect("id");
    let (Some((to, tok)), true, true) = (st.peer.clone(), owed, id.c.qp.is_null()) else {
        eprintln!("librdmacm (softverbs): rdma_establish is for an id without a CM-made QP after its CONNECT_RESPONSE");
        return fail(libc::EINVAL);
    };
    st.state.move_to(CmState::Established);
    drop(st);
    let mut rtu = Msg::new(kind::RTU, tok);
    rtu.from = id.token;
    send(channel_of(id), &to, &rtu);
    0
}
