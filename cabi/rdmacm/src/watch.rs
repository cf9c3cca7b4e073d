//! The CM's clock: one background thread per process, started when first needed, for what the
//! kernel's CM does on its own time — a REQ held while the port's listener is between two
//! `rdma_listen`s, DISCONNECTED for a connection whose peer process died (the kernel sends the
//! DREQ on a dead process's behalf), and TIMEWAIT_EXIT once a disconnected id's timewait passed.
//! It only sends messages to channel sockets; `rdma_get_cm_event` turns them into events, so
//! events stay ordered per channel and are read by the program's own thread.
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cm_abi::{ev, RDMA_PS_TCP};
use crate::state::*;

/// How long a REQ waits for a listener that is between two `rdma_listen`s on its port: well
/// inside the IB CM's REQ timeout (librdmacm's is about 4 s per try), long enough for a server
/// process that is starved of CPU for a moment (docs/decisions.md, "The CM's clock"). Past it
/// the REQ waits on only while the listener's process is at work ([`process_at_work`]).
pub const REQ_HOLD: Duration = Duration::from_secs(2);

/// The longest a held REQ waits for a process that stays at work: the life of a REQ under the
/// kernel's CM (cma.c), which sends it up to `CMA_MAX_CM_RETRIES` (15) times more, each try
/// waiting twice the RoCE packet life time (2^(16-8) ms) plus the CM response timeout
/// (`CMA_CM_RESPONSE_TIMEOUT` 20: 2^(20-8) ms), 16 tries of 4.608 s.
pub const REQ_LIFE: Duration = Duration::from_millis(16 * 4608);

/// How often a held REQ past its hold looks again at whether the listener's process works.
const AT_WORK_RECHECK: Duration = Duration::from_millis(100);

/// The IB CM's timewait for a RoCE path: 2^(t-8) ms for t = packet life time (16 for RoCE in
/// the kernel's cma.c) + 1, i.e. 512 ms.
pub const TIMEWAIT: Duration = Duration::from_millis(512);

/// How often connections' peers are checked: DISCONNECTED (or REJECTED, for a connection not
/// yet established) follows a peer's death within this (plus the program's own wait).
pub const PEER_CHECK: Duration = Duration::from_millis(100);

/// A REQ waiting for a listener.
struct HeldReq {
    /// When the REQ was held ([`REQ_LIFE`] counts from here).
    born: Instant,
    until: Instant,
    msg: Msg,
    /// The connecting id's channel socket (REJECTED goes there when no listener came).
    chan: PathBuf,
    dst: ([u8; 4], u16),
}

/// A TIMEWAIT_EXIT due for an id.
struct Timer {
    at: Instant,
    chan: PathBuf,
    token: u64,
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
        let spawned =
            std::thread::Builder::new().name("softverbs-cm-clock".into()).spawn(move || run(c));
        if let Err(e) = spawned {
            eprintln!("librdmacm (softverbs): cannot start the CM's clock thread: {e}");
        }
        c
    })
}

/// Hold `msg` (a REQ from the id whose channel socket is `chan`) until a listener takes the
/// port of `dst`, or REJECTED (status 8) after [`REQ_HOLD`].
pub fn hold_req(msg: Msg, chan: &Path, dst: ([u8; 4], u16)) {
    let c = clock();
    let born = Instant::now();
    let until = born + REQ_HOLD;
    c.work.lock().expect("clock").reqs.push(HeldReq { born, until, msg, chan: chan.into(), dst });
    c.wake.notify_one();
}

/// TIMEWAIT_EXIT for id `token` on the channel socket `chan`, [`TIMEWAIT`] from now.
pub fn start_timewait(chan: &Path, token: u64) {
    let c = clock();
    let at = Instant::now() + TIMEWAIT;
    c.work.lock().expect("clock").timers.push(Timer { at, chan: chan.into(), token });
    c.wake.notify_one();
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

/// The listener of `dst`'s port now, as `rdma_connect` looks for it.
pub fn find_listener((dst, port): ([u8; 4], u16)) -> Option<(PathBuf, u64)> {
    listen_names(dst, port).iter().find_map(|n| listener_at(n))
}

/// Whether a live process had a listener on `dst`'s port and has none now (it destroyed its
/// listening id and may be about to listen again: perftest `-R` does, between its two
/// connections).
pub fn between_listens((dst, port): ([u8; 4], u16)) -> bool {
    listen_names(dst, port).iter().any(|n| closed_listener(n))
}

/// Whether a process that had a listener on `dst`'s port and may listen again is at work
/// ([`process_at_work`]).
fn listener_at_work((dst, port): ([u8; 4], u16)) -> bool {
    listen_names(dst, port).iter().filter_map(|n| closed_listener_pid(n)).any(process_at_work)
}

/// Whether a thread of process `pid` other than softverbs' own (the NIC, CM clock and CQ event
/// threads, whose names begin with `softverbs`) is running or waiting for the CPU (state `R`)
/// or for the disk (`D`), as `/proc/PID/task/TID/stat` says: the process is on its way
/// somewhere, perhaps to its next `rdma_listen`, slower than the hold on a loaded machine. One
/// that sleeps (in a blocking call, or between two listens) is not.
pub fn process_at_work(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { return false };
        // "TID (NAME) STATE ...": a name may hold spaces and parentheses, the state follows the
        // last ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else { return false };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        let state = rest.trim_start().chars().next();
        !name.starts_with("softverbs") && matches!(state, Some('R' | 'D'))
    })
}

/// Where a listener of `dst:port` may be registered: the address, any address, and for a
/// loopback destination every address with that port.
fn listen_names(dst: [u8; 4], port: u16) -> Vec<PathBuf> {
    let mut names = vec![listen_name(dst, port), listen_name([0; 4], port)];
    if is_loopback(dst) {
        // Loopback reaches whichever process listens on the port.
        let suffix = format!(":{port}");
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
            let sent = find_listener(r.dst).is_some_and(|(path, tok)| {
                r.msg.to = tok;
                let ok = sock.send_to(r.msg.bytes(), &path).is_ok();
                if ok {
                    delivered.push((r.msg.from, path));
                }
                ok
            });
            // The hold is over unless the process that will listen is still at work: on a
            // loaded machine it may be waiting for the CPU, and perftest -R's server, left
            // without the REQ, would wait for it forever.
            let over = !sent
                && now >= r.until
                && (now >= r.born + REQ_LIFE || !listener_at_work(r.dst) || {
                    r.until = now + AT_WORK_RECHECK;
                    false
                });
            if sent || over {
                let r = w.reqs.swap_remove(i);
                if !sent {
                    let mut m = Msg::new(kind::LOCAL, r.msg.from);
                    m.event = ev::REJECTED;
                    m.status = 8;
                    let _ = sock.send_to(m.bytes(), &r.chan);
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
            let mut m = Msg::new(kind::LOCAL, t.token);
            m.event = ev::TIMEWAIT_EXIT;
            let _ = sock.send_to(m.bytes(), &t.chan);
        }
        if w.watch_peers && now >= next_peer_check {
            drop(w);
            check_peers(&sock);
            next_peer_check = Instant::now() + PEER_CHECK;
            w = c.work.lock().expect("clock");
        }
        // Sleep until the next thing is due: a held REQ is retried every 5 ms.
        let mut until = now + Duration::from_secs(3600);
        if !w.reqs.is_empty() {
            until = until.min(now + Duration::from_millis(5));
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
/// id's state (the IB CM's `cm_destroy_id`): a DREQ once established (DISCONNECTED, QP in ERR,
/// timewait), else a REJ — status 4 (timeout) from a requester, 28 (consumer defined) from a
/// listener's process that took the REQ.
fn check_peers(sock: &UnixDatagram) {
    // Ids are read under the registry's lock: rdma_destroy_id unregisters before it frees.
    let mut suspects = Vec::new();
    if let Ok(ids) = ids().lock() {
        for &addr in ids.values() {
            // SAFETY: registered, so alive while the registry's lock is held.
            let id = unsafe { &*(addr as *const Id) };
            if id.c.ps != RDMA_PS_TCP {
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
                suspects.push((id.token, channel_of(id).path.clone(), peer, tok));
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
            let _ = sock.send_to(m.bytes(), &chan);
        }
    }
}
