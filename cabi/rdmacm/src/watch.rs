//! The CM's clock: one background thread per process, started when first needed, for what the
//! kernel's CM does on its own time — a REQ held while the port's listener is between two
//! `rdma_listen`s, DISCONNECTED for a connection whose peer process died (the kernel sends the
//! DREQ on a dead process's behalf) or whose DREQ went unanswered past its retries,
//! TIMEWAIT_EXIT once a disconnected id's timewait passed, and the messages that wait in the
//! outbox for room in their peer's socket (outbox.rs). It only sends messages to channel sockets; `rdma_get_cm_event` turns them into events, so
//! events stay ordered per channel and are read by the program's own thread.
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cm_abi::ev;
use crate::state::*;

/// One try of a CM message under the kernel's CM (cma.c, cm.c): twice the RoCE packet life
/// time (2^(16-8) ms) plus the CM response timeout (`CMA_CM_RESPONSE_TIMEOUT` 20: 2^(20-8)
/// ms), 4.608 s; `SOFTVERBS_CM_TRY_MS` sets another (tests shorten it).
pub fn cm_try() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| {
        const DEFAULT: u64 = 4608;
        let ms = match std::env::var("SOFTVERBS_CM_TRY_MS") {
            Err(_) => DEFAULT,
            Ok(v) if v.is_empty() => DEFAULT,
            Ok(v) => match v.parse::<u64>() {
                Ok(ms) if ms > 0 => ms,
                _ => {
                    eprintln!("librdmacm (softverbs): SOFTVERBS_CM_TRY_MS=\"{v}\" is not a number of milliseconds above 0; using the kernel's {DEFAULT}");
                    DEFAULT
                }
            },
        };
        Duration::from_millis(ms)
    })
}

/// The life of a REQ or DREQ under the kernel's CM: sent, then resent up to
/// `CMA_MAX_CM_RETRIES` (15) times, each try [`cm_try`] long: 16 tries, 74 s. A REQ unanswered
/// that long gives `UNREACHABLE` (`-ETIMEDOUT`), a DREQ `DISCONNECTED` all the same.
pub fn cm_life() -> Duration {
    16 * cm_try()
}

/// The IB CM's timewait for a RoCE path: 2^(t-8) ms for t = packet life time (16 for RoCE in
/// the kernel's cma.c) + 1, i.e. 512 ms.
pub const TIMEWAIT: Duration = Duration::from_millis(512);

/// How often connections' peers are checked: DISCONNECTED (or REJECTED, for a connection not
/// yet established) follows a peer's death within this (plus the program's own wait).
pub const PEER_CHECK: Duration = Duration::from_millis(100);

/// A REQ waiting for a listener.
struct HeldReq {
    /// When the REQ was held ([`cm_life`] counts from here).
    born: Instant,
    msg: Msg,
    /// The connecting id's channel socket (REJECTED goes there when no listener came).
    chan: PathBuf,
    dst: ([u8; 4], u16),
}

/// A message due to a channel of this process at a time: TIMEWAIT_EXIT, or the DREP that a
/// DREQ's timeout stands for.
struct Timer {
    at: Instant,
    chan: PathBuf,
    msg: Msg,
}

#[derive(Default)]
struct Work {
    reqs: Vec<HeldReq>,
    timers: Vec<Timer>,
    /// Some connection is established: peers are checked.
    watch_peers: bool,
}

struct Clock {
    work: Mutex<Work>,
    wake: Condvar,
}

/// The clock, its thread started on first use.
fn clock() -> &'static Clock {
    static C: OnceLock<&'static Clock> = OnceLock::new();
    C.get_or_init(|| {
        let c: &'static Clock =
            Box::leak(Box::new(Clock { work: Mutex::new(Work::default()), wake: Condvar::new() }));
        crate::outbox::set_waker(kick);
        let spawned =
            std::thread::Builder::new().name("softverbs-cm-clock".into()).spawn(move || {
                // The program's signals are its own threads' (the kernel's CM has none).
                nic_model::wire::block_async_signals();
                run(c)
            });
        if let Err(e) = spawned {
            eprintln!("librdmacm (softverbs): cannot start the CM's clock thread: {e}");
        }
        c
    })
}

/// Hold `msg` (a REQ from the id whose channel socket is `chan`) while the process that closed
/// the port's listener may listen again ([`look_up`]'s `Closed`): delivered to the port's next
/// listener; REJECTED (status 8) once that process waited for CM events, destroyed its channel
/// or ended without listening again; UNREACHABLE (`-ETIMEDOUT`) after [`cm_life`].
pub fn hold_req(msg: Msg, chan: &Path, dst: ([u8; 4], u16)) {
    let c = clock();
    let born = Instant::now();
    c.work.lock().expect("clock").reqs.push(HeldReq { born, msg, chan: chan.into(), dst });
    c.wake.notify_one();
}

/// `msg` to the channel socket `chan` after `after`.
fn at_time(after: Duration, chan: &Path, msg: Msg) {
    let c = clock();
    let at = Instant::now() + after;
    c.work.lock().expect("clock").timers.push(Timer { at, chan: chan.into(), msg });
    c.wake.notify_one();
}

/// TIMEWAIT_EXIT for id `token` on the channel socket `chan`, [`TIMEWAIT`] from now.
pub fn start_timewait(chan: &Path, token: u64) {
    let mut m = Msg::new(kind::LOCAL, token);
    m.event = ev::TIMEWAIT_EXIT;
    at_time(TIMEWAIT, chan, m);
}

/// The DREQ of id `token` (channel socket `chan`) times out after [`cm_life`]: a DREP to
/// itself then, so the id gets DISCONNECTED (and its timewait) even if the peer never answers
/// (stopped, or dead on another host), as after the IB CM's last DREQ retry
/// (`IB_CM_DREQ_ERROR`, which cma.c reports as DISCONNECTED with status `-ETIMEDOUT`). One that
/// came first makes it a no-op: the id is disconnected already.
pub fn start_dreq_timeout(chan: &Path, token: u64) {
    let mut m = Msg::new(kind::DREP, token);
    m.status = -libc::ETIMEDOUT;
    at_time(cm_life(), chan, m);
}

/// Start the clock (if it runs already, nothing): before a channel can send, so that a message
/// that waits in the outbox is always flushed.
pub fn start() {
    clock();
}

/// Wake the clock: a message waits in the outbox (outbox.rs).
fn kick() {
    clock().wake.notify_one();
}

/// Check connections' peers (from the REQ on) from now on.
pub fn watch_peers() {
    let c = clock();
    let mut w = c.work.lock().expect("clock");
    if !w.watch_peers {
        w.watch_peers = true;
        c.wake.notify_one();
    }
}

/// Whether a process is bound at channel socket `path`: a connect to a Unix datagram socket
/// whose owner exited is refused (its descriptors close at exit, before its parent reaps it),
/// and nothing is sent, so the peer's `fd` does not wake.
pub fn socket_alive(path: &Path) -> bool {
    UnixDatagram::unbound().and_then(|s| s.connect(path)).is_ok()
}

/// What listens on `dst`'s port now (in the port space `RDMA_PS_IB` if `ib`), as
/// `rdma_connect` looks for it, each name read once ([`named`]): a live listener; else
/// [`Named::Closed`] if a live process closed its listener there and has not waited for CM
/// events since (it may listen again: perftest `-R` does, between its two connections;
/// `state::release_closed_listeners`); else nothing.
pub fn look_up((dst, port): ([u8; 4], u16), ib: bool) -> Named {
    let mut closed = false;
    for n in listen_names(dst, port, ib) {
        match named(&n) {
            Named::Listener(p, tok) => return Named::Listener(p, tok),
            Named::Closed => closed = true,
            Named::Nothing => {}
        }
    }
    if closed {
        Named::Closed
    } else {
        Named::Nothing
    }
}

/// Where a listener of `dst:port` may be registered: the address, any address, and for a
/// loopback destination every address with that port.
fn listen_names(dst: [u8; 4], port: u16, ib: bool) -> Vec<PathBuf> {
    let mut names = vec![listen_name(dst, port, ib), listen_name([0; 4], port, ib)];
    if is_loopback(dst) {
        // Loopback reaches whichever process listens on the port.
        let suffix = format!(":{port}{}", if ib { ".ib" } else { "" });
        let rd = std::fs::read_dir(cm_dir()).into_iter().flatten().flatten();
        names.extend(rd.map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(&suffix)));
    }
    names
}

/// The thread: deliver held REQs, fire timers, check peers; sleep until the next thing is due.
fn run(c: &'static Clock) {
    let Ok(sock) = UnixDatagram::unbound() else { return };
    let mut next_peer_check = Instant::now();
    let mut w = c.work.lock().expect("clock");
    loop {
        let now = Instant::now();
        // Held REQs: to the listener once there is one; REJECTED when the hold ends.
        let mut delivered = Vec::new();
        let mut i = 0;
        while i < w.reqs.len() {
            let r = &mut w.reqs[i];
            // The hold ends by what the process that closed the listener does (listens again,
            // waits for CM events, destroys its channel, ends), or with the REQ's life.
            let (sent, over) = match look_up(r.dst, r.msg.ps_ib != 0) {
                Named::Listener(path, tok) => {
                    r.msg.to = tok;
                    if crate::outbox::send(&sock, &path, r.msg.bytes()) {
                        delivered.push((r.msg.from, path));
                        (true, None)
                    } else {
                        // Its process ended since the look: nobody listens.
                        (false, Some((ev::REJECTED, 8)))
                    }
                }
                Named::Closed if now >= r.born + cm_life() => {
                    (false, Some((ev::UNREACHABLE, -libc::ETIMEDOUT)))
                }
                Named::Closed => (false, None),
                Named::Nothing => (false, Some((ev::REJECTED, 8))),
            };
            if sent || over.is_some() {
                let r = w.reqs.swap_remove(i);
                if let Some((event, status)) = over {
                    let mut m = Msg::new(kind::LOCAL, r.msg.from);
                    m.event = event;
                    m.status = status;
                    crate::outbox::send(&sock, &r.chan, m.bytes());
                }
            } else {
                i += 1;
            }
        }
        if !delivered.is_empty() {
            // The requesting ids (when they are this process's) watch the listener's process
            // from now on; their locks are taken without the clock's.
            drop(w);
            for (from, path) in delivered {
                note_req_to(from, path);
            }
            w = c.work.lock().expect("clock");
        }
        // Timewait ends.
        let (due, left): (Vec<Timer>, Vec<Timer>) = w.timers.drain(..).partition(|t| t.at <= now);
        w.timers = left;
        for t in due {
            crate::outbox::send(&sock, &t.chan, t.msg.bytes());
        }
        // Messages that found their peer's socket full.
        drop(w);
        let is_req = |b: &[u8]| Msg::from_bytes(b).is_some_and(|m| m.kind == kind::REQ);
        for b in crate::outbox::flush(&sock, cm_life(), is_req) {
            // A REQ that waited a REQ's life for room in the listener's socket: UNREACHABLE,
            // as after the kernel's last REQ retry.
            let Some(req) = Msg::from_bytes(&b) else { continue };
            let mut m = Msg::new(kind::LOCAL, req.from);
            m.event = ev::UNREACHABLE;
            m.status = -libc::ETIMEDOUT;
            crate::outbox::send(&sock, &req.reply_path(), m.bytes());
        }
        w = c.work.lock().expect("clock");
        if w.watch_peers && now >= next_peer_check {
            drop(w);
            check_peers(&sock);
            next_peer_check = Instant::now() + PEER_CHECK;
            w = c.work.lock().expect("clock");
        }
        // Sleep until the next thing is due: a held REQ is retried every 5 ms, the outbox every
        // 1 ms.
        let mut until = now + Duration::from_secs(3600);
        if !w.reqs.is_empty() {
            until = until.min(now + Duration::from_millis(5));
        }
        if crate::outbox::waiting() {
            until = until.min(now + Duration::from_millis(1));
        }
        if let Some(t) = w.timers.iter().map(|t| t.at).min() {
            until = until.min(t);
        }
        if w.watch_peers {
            until = until.min(next_peer_check);
        }
        let wait = until.saturating_duration_since(Instant::now());
        w = c.wake.wait_timeout(w, wait).expect("clock").0;
    }
}

/// Record on id `token`, if it is this process's, that its REQ went to `path`.
fn note_req_to(token: u64, path: PathBuf) {
    if let Ok(ids) = ids().lock() {
        if let Some(&addr) = ids.get(&token) {
            // SAFETY: registered, so alive while the registry's lock is held.
            let id = unsafe { &*(addr as *const Id) };
            if let Ok(mut st) = id.st.lock() {
                st.req_to = Some(path);
            }
        }
    }
}

/// For every RC id whose peer's channel socket is gone, a GONE message to the id's own channel
/// (once): `rdma_get_cm_event` makes it what the dead process's kernel would have sent for the
/// id's state (the IB CM's `cm_destroy_id`): a DREQ once established (DISCONNECTED; the QP
/// and the DREP are left to the program's rdma_disconnect), else a REJ — status 4 (timeout)
/// from a requester, 28 (consumer defined) from a listener's process that took the REQ.
fn check_peers(sock: &UnixDatagram) {
    // Ids are read under the registry's lock: rdma_destroy_id unregisters before it frees.
    let mut suspects = Vec::new();
    if let Ok(ids) = ids().lock() {
        for &addr in ids.values() {
            // SAFETY: registered, so alive while the registry's lock is held.
            let id = unsafe { &*(addr as *const Id) };
            if is_ud(id) {
                continue;
            }
            let Ok(st) = id.st.try_lock() else { continue };
            if st.state.disconnected() || st.peer_gone {
                continue;
            }
            // The peer once known (a REQ or REP came), else where the REQ went.
            let what = match (&st.peer, &st.req_to) {
                (Some((peer, tok)), _) => Some((peer.clone(), *tok)),
                (None, Some(to)) => Some((to.clone(), 0)),
                _ => None,
            };
            if let Some((peer, tok)) = what {
                suspects.push((id.token, crate::home::home(id, &st), peer, tok));
            }
        }
    }
    for (token, chan, peer, peer_tok) in suspects {
        if socket_alive(&peer) {
            continue;
        }
        // Mark it so that this is sent once; the id may be gone since (then nothing to do).
        let marked = ids().lock().ok().and_then(|ids| {
            let addr = *ids.get(&token)?;
            // SAFETY: registered, so alive while the lock is held.
            let id = unsafe { &*(addr as *const Id) };
            let mut st = id.st.lock().ok()?;
            let first = !st.peer_gone && !st.state.disconnected();
            st.peer_gone = true;
            Some(first)
        });
        if marked == Some(true) {
            let mut m = Msg::new(kind::GONE, token);
            m.from = peer_tok;
            m.set_reply(&peer);
            crate::outbox::send(sock, &chan, m.bytes());
        }
    }
}
