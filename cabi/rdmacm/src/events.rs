//! `rdma_get_cm_event` / `rdma_ack_cm_event`: what arrives on a channel's socket (the peer's
//! REQ, REP, RTU, REJ, DREQ, DREP, or this process's own resolution events) becomes the event
//! librdmacm gives, and the id state moves with it (the QP only on REJECTED, as librdmacm's
//! `rdma_get_cm_event`); and `rdma_destroy_id`.
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cm_abi::*;
use crate::conn::{modify, qp_connect, STATE};
use crate::ids::make_id;
use crate::state::*;
use crate::v6::set_route;
use verbs_api::{IbvEnum, QpState};

use softverbs_cabi_abi::ibv_qp_attr;

/// An event: its C struct first, then the private data it points to.
#[repr(C)]
struct Ev {
    c: rdma_cm_event,
    pd: [u8; 256],
}

/// The private data length the kernel's CM gives an event made from a REQ, REP or REJ: the
/// whole field of the MAD it came in, whatever the sender put there (zeros after it), less the
/// CM's IP header (36 bytes) in a REQ (`cma_set_req_event_data`: 92 - 36; SIDR_REQ 216 - 36),
/// REP 196 (`cma_set_rep_event_data`; SIDR_REP 136), REJ 148; none for the rest. softverbs'
/// gateway across hosts gives these lengths as the MADs carry them (wire.rs); this is the same
/// on one host.
fn kernel_pd_len(kind: i32, ud: bool) -> usize {
    match (kind, ud) {
        (ev::CONNECT_REQUEST, false) => 56,
        (ev::CONNECT_REQUEST, true) => 180,
        (ev::ESTABLISHED | ev::CONNECT_RESPONSE | ev::CONNECT_ERROR, false) => 196,
        (ev::ESTABLISHED, true) => 136,
        (ev::REJECTED, _) => 148,
        _ => 0,
    }
}

/// A new event for `id` (a C id pointer); with the message `m` it came from, its private data
/// (as long as the kernel's CM gives it: [`kernel_pd_len`]) and connection parameters.
fn event(id: *mut Id, kind: i32, status: i32, m: Option<&Msg>) -> Box<Ev> {
    // SAFETY: all-zero is a valid rdma_cm_event (NULL pointers, zero numbers).
    let mut e: Box<Ev> = Box::new(unsafe { std::mem::zeroed() });
    e.c.id = id.cast();
    e.c.event = kind;
    e.c.status = status;
    if let Some(m) = m {
        // SAFETY: the caller's live id (counted busy, or just made).
        let ud = is_ud(unsafe { &*id });
        let sent = (m.pd_len as usize).min(256);
        e.pd[..sent].copy_from_slice(&m.pd[..sent]);
        // The rest of the field is zeros (`e.pd` is zeroed).
        let n = sent.max(kernel_pd_len(kind, ud)).min(256);
        let pdp = if n == 0 { std::ptr::null() } else { e.pd.as_ptr().cast() };
        // Writing a union member is safe; conn is the one connected ids read.
        {
            e.c.param.conn = rdma_conn_param {
                private_data: pdp,
                private_data_len: n as u8,
                responder_resources: m.rd_atomic,
                initiator_depth: m.rd_atomic,
                flow_control: 1,
                retry_count: 7,
                rnr_retry_count: m.rnr_retry,
                srq: 0,
                qp_num: m.qpn,
            };
        }
    }
    e
}

/// Give a UD id's event the peer's address handle attributes, QP number and Q_Key (the
/// `param.ud` of librdmacm's SIDR events) instead of the connection parameters.
fn ud_param(e: &mut Ev, peer_ip: [u8; 4], m: &Msg) {
    let mut ah =
        softverbs_cabi_abi::ibv_ah_attr { is_global: 1, port_num: 1, ..Default::default() };
    ah.grh.dgid.raw = gid_of(peer_ip);
    ah.grh.sgid_index = 1;
    if let Some((a, _)) = crate::wire6::peer(peer_ip) {
        // Across hosts over IPv6 (wire6.rs): from the interface's address that reaches it.
        ah.grh.dgid.raw = a;
        ah.grh.sgid_index = crate::wire6::source_for(&a).map_or(0, |l| l.1);
    }
    ah.grh.hop_limit = 64;
    // SAFETY: conn's private data fields were written by event(); ud shares them.
    let (pd, len) = unsafe { (e.c.param.conn.private_data, e.c.param.conn.private_data_len) };
    e.c.param.ud = rdma_ud_param {
        private_data: pd,
        private_data_len: len,
        ah_attr: ah,
        qp_num: m.qpn,
        qkey: m.qkey,
    };
}

/// Process one message; the event it makes, if any, counted in its id's `busy` until it is
/// acknowledged. The id the message is for is counted busy while it is handled (under the
/// registry's lock, so `rdma_destroy_id` in another thread waits for it instead of freeing it).
fn handle(ch: &Channel, m: &Msg) -> Option<Box<Ev>> {
    let idp = {
        let ids = ids().lock().ok()?;
        let Some(&addr) = ids.get(&m.to) else {
            drop(ids);
            if m.kind == kind::REQ {
                orphan_req(ch, m);
            }
            return None;
        };
        let idp = addr as *mut Id;
        // SAFETY: registered, so alive; counted busy before the registry's lock is released.
        unsafe { (*idp).busy.fetch_add(1, Ordering::SeqCst) };
        idp
    };
    let e = handle_for(ch, m, idp);
    if let Some(e) = &e {
        // SAFETY: the event's id is the handled one (alive: counted) or one just made for it.
        unsafe { (*e.c.id.cast::<Id>()).busy.fetch_add(1, Ordering::SeqCst) };
    }
    // SAFETY: counted above, so not freed yet.
    unsafe { (*idp).busy.fetch_sub(1, Ordering::SeqCst) };
    e
}

/// [`handle`]'s work for the message's id `idp` (counted busy by the caller).
fn handle_for(ch: &Channel, m: &Msg, idp: *mut Id) -> Option<Box<Ev>> {
    // SAFETY: counted busy by the caller, so alive.
    let id = unsafe { &*idp };
    if !std::ptr::eq(id.c.channel.cast::<Channel>(), ch) {
        // The id moved to another channel (rdma_migrate_id): its events are read there.
        send(ch, &channel_of(id).path, m);
        return None;
    }
    let ud = is_ud(id);
    match m.kind {
        kind::LOCAL => Some(event(idp, m.event, m.status, None)),
        kind::JOIN => {
            let mut e = event(idp, m.event, 0, None);
            let mut ah =
                softverbs_cabi_abi::ibv_ah_attr { is_global: 1, port_num: 1, ..Default::default() };
            ah.grh.dgid.raw = gid_of(m.dst_ip);
            ah.grh.sgid_index = 1;
            ah.grh.hop_limit = 1;
            e.c.param.ud = rdma_ud_param {
                private_data: m.from as *const std::ffi::c_void,
                private_data_len: 0,
                ah_attr: ah,
                qp_num: m.qpn,
                qkey: m.qkey,
            };
            Some(e)
        }
        kind::REQ => {
            let child = make_id(id.c.channel, id.c.context, id.c.ps);
            // SAFETY: just made.
            let c = unsafe { &mut *child };
            // The listener's QP type (RDMA_PS_IB ids choose theirs).
            c.c.qp_type = id.c.qp_type;
            // The port the REQ was sent to; for a wildcard or loopback address, the listener's
            // port or this process's first.
            let dev = dev_of_ip(m.dst_ip)
                .or_else(|| devices().iter().copied().find(|d| d.ctx == id.c.verbs))
                .or_else(|| devices().first().copied())?;
            c.c.verbs = dev.ctx;
            c.c.port_num = 1;
            crate::cq::give_pd(child.cast());
            if m.v6 != 0 {
                // The requester's family is the new id's, as the kernel's CM gives it.
                crate::v6::mark(c.token, u32::from_ne_bytes(m.scope));
            }
            // A peer across hosts over IPv6: by this process's stand-in for it (wire6.rs).
            let peer_ip = if m.src6 != [0; 16] {
                let a = m.dst6;
                let index = crate::wire6::local_index(&a).unwrap_or(0);
                crate::wire6::set_local(c.token, a, index);
                crate::wire6::alias(m.src6, u32::from_ne_bytes(m.scope))
            } else {
                m.src_ip
            };
            let mut st = c.st.lock().expect("id");
            st.src = (dev.ip, m.dst_port);
            st.dst = (peer_ip, m.src_port);
            st.peer = Some((m.reply_path(), m.from));
            st.peer_qpn = m.qpn;
            st.peer_psn = m.psn;
            // The passive side takes the REQ's path MTU, as ib_cm's cm_req_handler.
            st.path_mtu = m.mtu;
            st.req_rd_atomic = m.rd_atomic;
            st.rnr_retry = m.rnr_retry;
            st.remote_ece = m.ece;
            st.state.move_to(CmState::Connect);
            drop(st);
            set_route(c, (dev.ip, m.dst_port), Some((peer_ip, m.src_port)));
            crate::watch::watch_peers();
            let mut e = event(child, ev::CONNECT_REQUEST, 0, Some(m));
            e.c.listen_id = idp.cast();
            if ud {
                ud_param(&mut e, peer_ip, m);
            }
            Some(e)
        }
        kind::REP => {
            let mut st = id.st.lock().expect("id");
            st.req_to = None;
            st.remote_ece = m.ece;
            st.peer = Some((m.reply_path(), m.from));
            st.peer_qpn = m.qpn;
            st.peer_psn = m.psn;
            // A loopback destination becomes the accepting port's own address.
            if is_loopback(st.dst.0) {
                st.dst.0 = m.src_ip;
                let (src, dst) = (st.src, st.dst);
                set_route(id, src, Some(dst));
            }
            if ud {
                // SIDR: the reply is all; no RTU, no connection state.
                let ip = st.dst.0;
                drop(st);
                let mut e = event(idp, ev::ESTABLISHED, 0, Some(m));
                ud_param(&mut e, ip, m);
                return Some(e);
            }
            let qp = id.c.qp;
            if qp.is_null() && !ud {
                // The program moves its QP itself (rdma_init_qp_attr): CONNECT_RESPONSE, and
                // the RTU waits for its rdma_establish, as with the kernel's CM.
                st.req_rd_atomic = m.rd_atomic;
                st.rnr_retry = m.rnr_retry;
                drop(st);
                crate::qpattr::await_establish(id);
                return Some(event(idp, ev::CONNECT_RESPONSE, 0, Some(m)));
            }
            if !qp.is_null()
                && !ud
                && qp_connect(
                    qp,
                    &st,
                    m.rd_atomic,
                    m.rd_atomic,
                    crate::v6::path_gid(id.token, st.dst.0),
                ) != 0
            {
                drop(st);
                return Some(event(idp, ev::CONNECT_ERROR, -libc::EINVAL, Some(m)));
            }
            st.state.move_to(CmState::Established);
            let to = m.reply_path();
            drop(st);
            crate::watch::watch_peers();
            let mut rtu = Msg::new(kind::RTU, m.from);
            rtu.from = id.token;
            send(ch, &to, &rtu);
            Some(event(idp, ev::ESTABLISHED, 0, Some(m)))
        }
        kind::RTU => {
            id.st.lock().expect("id").state.move_to(CmState::Established);
            crate::watch::watch_peers();
            Some(event(idp, ev::ESTABLISHED, 0, None))
        }
        kind::GONE => {
            // Decided when read: an RTU queued before this has made the id established.
            let st = id.st.lock().expect("id");
            let (k, status) =
                match (st.state.disconnected(), st.state.established(), st.peer.is_some()) {
                    (true, _, _) => return None,
                    (false, true, _) => (kind::DREQ, 0),
                    // A CONNECT_REQUEST (accepted or not) whose requester died: timeout.
                    (false, false, true) => (kind::REJ, 4),
                    // A REQ the listener's process took and never answered: consumer defined.
                    (false, false, false) => (kind::REJ, 28),
                };
            drop(st);
            let mut as_sent = *m;
            as_sent.kind = k;
            as_sent.status = status;
            // The same id, still counted busy by `handle`.
            handle_for(ch, &as_sent, idp)
        }
        kind::REJ => {
            // The connection attempt is over: nothing left to watch.
            let mut st = id.st.lock().expect("id");
            st.req_to = None;
            st.peer_gone = true;
            drop(st);
            // As the kernel's CM: a rejected id's QP goes to ERR.
            if !id.c.qp.is_null() && !ud {
                modify(
                    id.c.qp,
                    ibv_qp_attr { qp_state: QpState::Err.to_c_int(), ..Default::default() },
                    STATE,
                    "ERR",
                );
            }
            Some(event(idp, ev::REJECTED, m.status, Some(m)))
        }
        kind::DREQ | kind::DREP => {
            let mut st = id.st.lock().expect("id");
            let first = st.state.move_to(CmState::Disconnect);
            // The DREP a DREQ gets, as the IB CM's: none yet for the first (DREQ_RCVD: the
            // program's rdma_disconnect or rdma_destroy_id sends it, `drep_to`), none for a
            // repeat of it while that waits; at once when this side sent its own DREQ
            // (crossing DREQs: the program asked to disconnect already) or answered before
            // (a repeat in timewait, ib_cm's cm_dreq_handler).
            let answer_now =
                m.kind == kind::DREQ && (st.dreq_sent || !first) && st.drep_to.is_none();
            if m.kind == kind::DREQ && first && !st.dreq_sent {
                st.drep_to = Some((m.reply_path(), m.from));
            }
            let home = crate::home::home(id, &st);
            drop(st);
            if answer_now {
                let mut r = Msg::new(kind::DREP, m.from);
                r.from = id.token;
                send(ch, &m.reply_path(), &r);
                if first && !ud {
                    crate::watch::start_timewait(&home, id.token);
                }
            }
            if !first {
                return None;
            }
            // The QP is left as it is, as the kernel's CM (cma.c's `cma_ib_handler` only
            // turns IB_CM_DREQ_RECEIVED into DISCONNECTED) and librdmacm (`rdma_get_cm_event`
            // moves it to ERR on REJECTED alone) leave it: it goes to ERR at the program's own
            // `rdma_disconnect` (or is destroyed), and its receives stay posted until then.
            // As the IB CM: a connected id enters timewait when the DREP comes (or leaves:
            // above, and `conn::answer_dreq`), and TIMEWAIT_EXIT follows when it ends (UD ids
            // have no connection, hence no timewait).
            if m.kind == kind::DREP && !ud {
                crate::watch::start_timewait(&home, id.token);
            }
            // Status 0, or -ETIMEDOUT after a DREQ nobody answered (`watch::start_dreq_timeout`).
            Some(event(idp, ev::DISCONNECTED, m.status, None))
        }
        _ => None,
    }
}

/// A REQ whose listening id was destroyed before the REQ was read: it goes to the port's
/// listener if there is one now, waits for the process's next listener on the port if the
/// process may listen again (`watch`), else the requester gets REJECTED
/// (status 8, as for a port nobody listens on) instead of waiting for an answer that never comes.
fn orphan_req(ch: &Channel, m: &Msg) {
    let dst = (m.dst_ip, m.dst_port);
    let ib = m.ps_ib != 0;
    match crate::watch::look_up(dst, ib) {
        Named::Listener(path, tok) => {
            // The port has a listener again (this process's next one, or another's).
            let mut fwd = *m;
            fwd.to = tok;
            if send(ch, &path, &fwd) {
                return;
            }
        }
        Named::Closed => {
            crate::watch::hold_req(*m, &m.reply_path(), dst);
            return;
        }
        Named::Nothing => {}
    }
    let mut r = Msg::new(kind::LOCAL, m.from);
    r.event = ev::REJECTED;
    r.status = 8;
    send(ch, &m.reply_path(), &r);
}

/// `rdma_get_cm_event`: the next event on the channel (blocking unless the channel's `fd` was
/// made non-blocking: then -1 with `EAGAIN` when none waits; -1 with `EINTR` when a signal
/// handler installed without `SA_RESTART` cuts the wait short, as the kernel's read does).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    chp: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    if chp.is_null() || out.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: made by rdma_create_event_channel.
    let ch = unsafe { &*(chp as *const Channel) };
    // Waiting for events without having listened again: the ports whose listeners this
    // process closed are free, and REQs held for them are rejected (docs/decisions.md).
    release_closed_listeners();
    let mut buf = [0u8; size_of::<Msg>()];
    loop {
        // A blocking recv fails with EINTR exactly when the kernel's read of the CM's event
        // file does (`ucma_get_event` waits interruptibly): a signal handler installed without
        // SA_RESTART ran; with SA_RESTART the kernel restarts the recv itself. So EINTR is the
        // caller's, as librdmacm's rdma_get_cm_event returns it.
        let n = match ch.sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) => return fail(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        let Some(m) = Msg::from_bytes(&buf[..n]) else { continue };
        if let Some(e) = handle(ch, &m) {
            let p = Box::into_raw(e);
            // SAFETY: out is the caller's; the event's id is live.
            unsafe {
                *out = p.cast();
                (*(*p).c.id).event = p.cast();
            }
            return 0;
        }
    }
}

/// `rdma_ack_cm_event`: free the event (its private data goes with it).
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int {
    if e.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: made by rdma_get_cm_event.
    let b = unsafe { Box::from_raw(e.cast::<Ev>()) };
    // SAFETY: the event's id is alive until this acknowledgement (rdma_destroy_id waits for it).
    let id = unsafe { &*b.c.id.cast::<Id>() };
    if id.c.event == e {
        // SAFETY: the id's own field.
        unsafe { (*b.c.id).event = std::ptr::null_mut() };
    }
    id.busy.fetch_sub(1, Ordering::SeqCst);
    0
}

/// `rdma_destroy_id` (sync.rs exports it): release the listening name and the id (a connected
/// id sends its peer a DREQ first, so the peer sees DISCONNECTED).
pub unsafe fn destroy_id(cid: *mut rdma_cm_id) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let st = id.st.lock().expect("id");
    if let Some(l) = &st.listen {
        close_listener(l, &channel_of(id).path);
    }
    if let (Some((to, tok)), false) = (&st.peer, st.state.disconnected()) {
        let mut m = Msg::new(kind::DREQ, *tok);
        m.from = id.token;
        let ch = channel_of(id);
        m.set_reply(&crate::home::home(id, &st));
        send(ch, to, &m);
    }
    drop(st);
    // A DREQ still unanswered gets its DREP now, as ib_cm's cm_destroy_id sends it.
    crate::conn::answer_dreq(id, false);
    crate::home::forget(id, &id.st.lock().expect("id"));
    ids().lock().expect("ids").remove(&id.token);
    // As librdmacm's: wait until the id's events are acknowledged (and a message for it that
    // another thread is handling is done). librdmacm waits for ever; a program that never
    // acknowledges is told, and the id is left allocated rather than freed under it.
    let start = Instant::now();
    while id.busy.load(Ordering::SeqCst) != 0 {
        if start.elapsed() > DESTROY_WAIT {
            eprintln!(
                "librdmacm (softverbs): rdma_destroy_id: an event of this id was not acknowledged \
                 (rdma_ack_cm_event) within {} s; the id is not freed",
                DESTROY_WAIT.as_secs()
            );
            return 0;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: made by make_id, now unregistered, and no event or handler refers to it.
    drop(unsafe { Box::from_raw(cid.cast::<Id>()) });
    0
}

/// How long `rdma_destroy_id` waits for the id's events to be acknowledged.
const DESTROY_WAIT: Duration = Duration::from_secs(5);
