//! Synchronous ids: an id made with a NULL event channel gets a private channel of its own, and
//! each call that the real CM answers with an event (`rdma_resolve_addr`, `rdma_resolve_route`,
//! `rdma_connect`, `rdma_accept`, `rdma_disconnect`) waits for that event and turns its status
//! into the call's result, as librdmacm's `ucma_complete` does (rdma-core, librdmacm/cma.c).
//! The event stays in the id's `event` field until the next call, as there. This file exports
//! those calls and `rdma_create_id` / `rdma_destroy_id` over their channel-based halves in
//! ids.rs, conn.rs and events.rs.
use std::collections::HashSet;
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use std::ffi::c_void;

use crate::cm_abi::*;
use crate::events::{rdma_ack_cm_event, rdma_get_cm_event};
use crate::state::*;

/// How long a synchronous connect or accept waits for the peer (the IB CM gives up on a REQ or
/// REP without an answer after its retries too, with `ETIMEDOUT`).
pub const CONNECT_WAIT: Duration = Duration::from_secs(20);
/// How long a synchronous disconnect waits for its DISCONNECTED: the peer's DREP (status 0), or
/// the DREQ's tries running out ([`crate::watch::cm_life`], then status `-ETIMEDOUT`, as the
/// kernel's `IB_CM_DREQ_ERROR`), as librdmacm's `ucma_complete` blocks until the kernel gives
/// it. One more try's length on top is only a guard: the clock's event ends the wait first.
pub fn disconnect_wait() -> Duration {
    crate::watch::cm_life() + crate::watch::cm_try()
}

/// The tokens of the synchronous ids (each owns its channel).
fn sync_ids() -> &'static Mutex<HashSet<u64>> {
    static S: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A private, non-blocking channel for a synchronous id (the waits here poll it with a bound).
pub fn own_channel() -> *mut rdma_event_channel {
    // The clock flushes the outbox, which any send may need from now on.
    crate::watch::start();
    channel_for_c(true)
}

/// Record `id` as synchronous (its channel is its own, destroyed with it).
pub fn mark(id: &Id) {
    sync_ids().lock().expect("sync ids").insert(id.token);
}

/// Whether `id` is synchronous.
pub fn is_sync(id: &Id) -> bool {
    sync_ids().lock().expect("sync ids").contains(&id.token)
}

/// Forget a synchronous id being destroyed; its channel, to destroy after the id.
pub fn forget(id: &Id) -> Option<*mut rdma_event_channel> {
    sync_ids().lock().expect("sync ids").remove(&id.token).then_some(id.c.channel)
}

/// Move the id a synchronous listener's CONNECT_REQUEST made onto a private channel of its own
/// (librdmacm migrates it so; its peer replies to the id's own name from its `rdma_accept` on,
/// and what comes to the listener's channel for it before is forwarded there: events.rs).
pub fn adopt(cid: *mut rdma_cm_id) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let ch = own_channel();
    if ch.is_null() {
        return -1;
    }
    // SAFETY: the live id, not yet handed to the program.
    unsafe { (*cid).channel = ch };
    mark(id);
    0
}

/// Wait at most `limit` (None: for ever) for the next event of a synchronous id, leave it in the
/// id's `event` (acking the one before), and map its status to the call's result as
/// `ucma_complete` does: 0, or -1 with errno (`ECONNREFUSED` for REJECTED, else the status).
pub fn wait(cid: *mut rdma_cm_id, limit: Option<Duration>, what: &str) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    if !is_sync(id) {
        return 0;
    }
    // SAFETY: the live id's fields, used by this thread only while it waits.
    unsafe {
        if !(*cid).event.is_null() {
            rdma_ack_cm_event((*cid).event);
            (*cid).event = std::ptr::null_mut();
        }
    }
    let e = match next_event(channel_of(id), limit) {
        Ok(e) => e,
        // A signal handler without SA_RESTART ran: -1 with EINTR, as ucma_complete's
        // rdma_get_cm_event fails; the id carries on, its event waiting on its channel.
        Err(libc::EINTR) => return fail(libc::EINTR),
        Err(_) => {
            if what == "rdma_disconnect" {
                // The clock's DREQ timeout did not come (it always does first): disconnected all
                // the same, with the status the kernel's CM gives a DREQ out of tries.
                id.st.lock().expect("id").state.move_to(CmState::Disconnect);
                return fail(libc::ETIMEDOUT);
            }
            eprintln!(
                "librdmacm (softverbs): {what}: no answer from the peer in {} s",
                limit.unwrap_or_default().as_secs()
            );
            return fail(libc::ETIMEDOUT);
        }
    };
    // SAFETY: the event just got; the id's own field.
    let (kind, status) = unsafe {
        (*cid).event = e;
        ((*e).event, (*e).status)
    };
    match (kind, status) {
        (_, 0) => 0,
        (ev::REJECTED, _) => fail(libc::ECONNREFUSED),
        (_, s) => fail(s.abs()),
    }
}

/// The next event on a synchronous id's private (non-blocking) channel, within `limit`; else
/// the errno the wait ends with: `ETIMEDOUT` past `limit`, `EINTR` when a signal handler
/// installed without `SA_RESTART` cut it short (librdmacm's `ucma_complete` reads the kernel's
/// CM file, whose wait such a handler ends; the sleep here cannot tell which handler ran, so it
/// carries on only when all of them restart: `nic_model::wire::handlers_restart`), or the
/// channel's own error.
pub fn next_event(ch: &Channel, limit: Option<Duration>) -> Result<*mut rdma_cm_event, c_int> {
    let deadline = limit.map(|l| Instant::now() + l);
    loop {
        let mut e = std::ptr::null_mut();
        let chp = &ch.c as *const rdma_event_channel as *mut rdma_event_channel;
        // SAFETY: the live channel; e is ours.
        if unsafe { rdma_get_cm_event(chp, &mut e) } == 0 {
            return Ok(e);
        }
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if err != libc::EAGAIN {
            return Err(err);
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(l) => l.as_millis().max(1) as c_int,
                None => return Err(libc::ETIMEDOUT),
            },
            None => -1,
        };
        let mut p = libc::pollfd { fd: ch.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours.
        let rc = unsafe { libc::poll(&mut p, 1, left) };
        let eintr = rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        if eintr && !nic_model::wire::handlers_restart() {
            return Err(libc::EINTR);
        }
    }
}

/// Destroy a synchronous id's own channel (after the id is gone).
fn drop_channel(ch: *mut rdma_event_channel) {
    if channels().lock().expect("channels").remove(&(ch as usize)) {
        // SAFETY: made by own_channel (the C struct is the box's first field), now unregistered.
        drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
    }
}

/// `rdma_create_id`: an id on `ch` in port space `ps` (`RDMA_PS_TCP`: RC, `RDMA_PS_UDP` or
/// `RDMA_PS_IPOIB`: UD); with a NULL `ch`, a synchronous id on a channel of its own.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if !ch.is_null() || id.is_null() {
        // SAFETY: the caller's arguments, checked there.
        return unsafe { crate::ids::create_id(ch, id, context, ps) };
    }
    let own = own_channel();
    if own.is_null() {
        return -1;
    }
    // SAFETY: our channel; the caller's out pointer.
    if unsafe { crate::ids::create_id(own, id, context, ps) } != 0 {
        drop_channel(own);
        return -1;
    }
    // SAFETY: the id just made.
    let Some(new) = id_ref(unsafe { *id }) else { return fail(libc::EINVAL) };
    mark(new);
    0
}

/// `rdma_destroy_id`: release the id's listening name and the id (a connected id sends its
/// peer a DREQ first); a synchronous id's last event and channel go with it (librdmacm's
/// `ucma_free_id`).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(cid: *mut rdma_cm_id) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let own = forget(id);
    // SAFETY: the live id's own field.
    unsafe {
        if own.is_some() && !(*cid).event.is_null() {
            rdma_ack_cm_event((*cid).event);
        }
    }
    crate::v6::forget(id.token);
    crate::mcast::forget(id.token);
    // SAFETY: the caller's live id.
    let r = unsafe { crate::events::destroy_id(cid) };
    if let Some(ch) = own {
        drop_channel(ch);
    }
    r
}

/// `rdma_join_multicast`: the id's QP attached to the group `addr` and MULTICAST_JOIN
/// (mcast.rs); a synchronous id waits for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    cid: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    match crate::mcast::join_full(cid, addr, context) {
        0 => wait(cid, Some(CONNECT_WAIT), "rdma_join_multicast"),
        r => r,
    }
}

/// `rdma_join_multicast_ex`: as [`rdma_join_multicast`], with join flags (a send-only member's
/// QP is not attached).
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    cid: *mut rdma_cm_id,
    attr: *mut crate::mcast::JoinAttrEx,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, checked there.
    match unsafe { crate::mcast::join_ex(cid, attr, context) } {
        0 => wait(cid, Some(CONNECT_WAIT), "rdma_join_multicast_ex"),
        r => r,
    }
}

/// `rdma_resolve_addr`: the local soft port for `dst` (ADDR_RESOLVED, or ADDR_ERROR with
/// `-EHOSTUNREACH` for an address of no softverbs port); a synchronous id waits for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    cid: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, checked there.
    match unsafe { crate::ids::resolve_addr(cid, src, dst, timeout_ms) } {
        0 => wait(cid, Some(CONNECT_WAIT), "rdma_resolve_addr"),
        r => r,
    }
}

/// `rdma_resolve_route`: ROUTE_RESOLVED (the fabric has one route to every port); a
/// synchronous id waits for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(cid: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    // SAFETY: as above.
    match unsafe { crate::ids::resolve_route(cid, timeout_ms) } {
        0 => wait(cid, Some(CONNECT_WAIT), "rdma_resolve_route"),
        r => r,
    }
}

/// `rdma_connect`: a REQ to the listener at the resolved address; ESTABLISHED, or REJECTED
/// (status 8 when nothing listens there). A synchronous id waits: 0, or `ECONNREFUSED`.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(cid: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: as above.
    match unsafe { crate::conn::connect(cid, param) } {
        0 => wait(cid, Some(CONNECT_WAIT), "rdma_connect"),
        r => r,
    }
}

/// `rdma_accept`: the QP to RTR and RTS and a REP; ESTABLISHED follows the requester's RTU, for
/// which a synchronous RC id waits (a UD id has no RTU: it only drops its CONNECT_REQUEST).
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(cid: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: as above.
    let r = unsafe { crate::conn::accept(cid, param) };
    let Some(id) = id_ref(cid).filter(|_| r == 0) else { return r };
    if !is_ud(id) {
        return wait(cid, Some(CONNECT_WAIT), "rdma_accept");
    }
    if is_sync(id) && !id.c.event.is_null() {
        // SAFETY: the id's own event.
        unsafe {
            rdma_ack_cm_event(id.c.event);
            (*cid).event = std::ptr::null_mut();
        }
    }
    0
}

/// `rdma_disconnect`: the QP to ERR and a DREQ; DISCONNECTED follows the peer's DREP, for which
/// a synchronous id waits: 0 with the DREP, or -1 with `ETIMEDOUT` once the DREQ's tries ran
/// out (status `-ETIMEDOUT`, librdmacm's `ucma_complete` on the kernel's `IB_CM_DREQ_ERROR`).
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(cid: *mut rdma_cm_id) -> c_int {
    // An id already disconnected (its DISCONNECTED delivered) has no event left to wait for.
    let done = id_ref(cid).is_some_and(|id| id.st.lock().expect("id").state.disconnected());
    // SAFETY: as above.
    match unsafe { crate::conn::disconnect(cid) } {
        0 if !done => wait(cid, Some(disconnect_wait()), "rdma_disconnect"),
        r => r,
    }
}

/// `rdma_migrate_id`: move the id to channel `ch` (its later events are read there), as
/// librdmacm's: a synchronous id becomes asynchronous (the event its last call left is
/// acknowledged, its private channel goes), and with a NULL `ch` an asynchronous id becomes
/// synchronous on a channel of its own (a synchronous one: `EINVAL`). What waits on the old
/// channel for the id follows it, and so does what its peer, the gateway and the clock send it
/// later (they reply to the id's own name, which now names the new channel: home.rs), as the
/// kernel moves an id's events to the new channel's file at once; the name it listens on
/// (claimed at `rdma_bind_addr`) names the new channel.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    cid: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    let Some(id) = id_ref(cid) else { return fail(libc::EINVAL) };
    let was_sync = is_sync(id);
    let ours = channels().lock().expect("channels").contains(&(ch as usize));
    if (ch.is_null() && was_sync) || (!ch.is_null() && !ours) {
        return fail(libc::EINVAL);
    }
    let old = id.c.channel;
    if ch == old {
        // Already there (a synchronous id named its own channel: it stays as it is).
        return 0;
    }
    let new = if ch.is_null() { own_channel() } else { ch };
    if new.is_null() {
        return -1;
    }
    // SAFETY: the caller's live id: its last synchronous event, and its channel.
    unsafe {
        if was_sync && !(*cid).event.is_null() {
            rdma_ack_cm_event((*cid).event);
            (*cid).event = std::ptr::null_mut();
        }
        (*cid).channel = new;
    }
    let st = id.st.lock().expect("id");
    if let Some(name) = &st.listen {
        // SAFETY: channels of ours (checked, or made above).
        let (from, to) = unsafe { (&*old.cast::<Channel>(), &*new.cast::<Channel>()) };
        let mine = format!("{}#{}", from.path.display(), id.token);
        if std::fs::read_link(name).is_ok_and(|t| t.to_string_lossy() == mine) {
            let _ = replace_link(&format!("{}#{}", to.path.display(), id.token), name);
        }
    }
    drop(st);
    // SAFETY: channels of ours, live (the old one is destroyed only below, or by the program
    // after this call).
    crate::home::migrate(id, unsafe { &*old.cast::<Channel>() }, unsafe {
        &*new.cast::<Channel>()
    });
    if ch.is_null() {
        mark(id);
    } else if was_sync {
        sync_ids().lock().expect("sync ids").remove(&id.token);
        // Its private channel goes: what waited there for it moved with it.
        drop_channel(old);
    }
    0
}
