//! rsockets: rdma-core's socket-like API over RDMA (`<rdma/rsocket.h>`), as librdmacm exports
//! it (`rsocket`, `rbind`, `rlisten`, `raccept`, `rconnect`, `rclose`, `rsend`, `rrecv`, ...):
//! a `SOCK_STREAM` rsocket is an RC connection made with the CM (this library's own
//! `rdma_*` calls, as a program would make them) carrying softverbs' own stream protocol
//! (conn.rs); a `SOCK_DGRAM` one is a UD QP (dgram.rs). An rsocket's number is its CM event
//! channel's descriptor, so it never collides with a descriptor of the process and `rpoll`
//! tells the two apart.
//!
//! Calls on one rsocket are serialised by its lock. A stream's blocking `rrecv`, `rsend` or
//! `riowrite` sleeps on the completion and CM channels with the lock released, so one thread
//! may send while another waits to receive; a blocking connect, accept or close, and a
//! datagram rsocket's calls, keep it while they wait.
mod conn;
mod dgram;
mod io;
mod opts;
mod poll;
mod verbs;

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::cm_abi::*;
use conn::{Conn, Sizes};
use verbs::*;

/// Where an rsocket is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    Fresh,
    Listening,
    Resolving,
    Routing,
    Connecting,
    Connected,
    Failed,
}

/// The options `rsetsockopt` keeps (those that shape a connection apply when it is made; an
/// accepted rsocket takes its listener's).
#[derive(Clone, Copy)]
pub struct Opts {
    pub sndbuf: usize,
    pub rcvbuf: usize,
    pub sq: u32,
    pub rq: u32,
    pub inline: u32,
    pub iomaps: u32,
    pub nodelay: c_int,
    pub keepalive: c_int,
    pub keepidle: c_int,
    pub reuseaddr: c_int,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            sndbuf: 1 << 17,
            rcvbuf: 1 << 17,
            sq: 128,
            rq: 128,
            inline: 64,
            iomaps: 0,
            nodelay: 0,
            keepalive: 0,
            keepidle: 7200,
            reuseaddr: 0,
        }
    }
}

/// One rsocket.
pub struct Sock {
    /// Its number (the channel's descriptor).
    pub fd: c_int,
    pub ch: *mut rdma_event_channel,
    pub id: *mut rdma_cm_id,
    pub state: State,
    pub nonblock: bool,
    /// `SO_ERROR`: why a non-blocking connect failed.
    pub err: c_int,
    pub opts: Opts,
    pub conn: Option<Box<Conn>>,
    /// A datagram rsocket's state (dgram.rs), if it is one.
    pub dgram: Option<Box<dgram::Dgram>>,
}
// SAFETY: the pointers are softverbs' CM and verbs objects, usable from any thread; a Sock is
// only reached through its Mutex.
unsafe impl Send for Sock {}

/// An rsocket as the table holds it.
pub type Shared = Arc<Mutex<Sock>>;

fn table() -> &'static Mutex<HashMap<c_int, Shared>> {
    static T: OnceLock<Mutex<HashMap<c_int, Shared>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The rsocket numbered `fd`, or None (not an rsocket: `EBADF` for the calls).
pub fn get(fd: c_int) -> Option<Shared> {
    table().lock().expect("rsockets").get(&fd).cloned()
}

/// Lock an rsocket (a panic in another thread's call does not make it unusable).
pub fn lock(s: &Shared) -> MutexGuard<'_, Sock> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new non-blocking CM channel and an id on it in `ps`; an rsocket in the table, its number.
fn open(ps: c_int, opts: Opts, nonblock: bool) -> Result<(c_int, Shared), c_int> {
    // SAFETY: this library's own calls; the id and channel are destroyed on failure.
    unsafe {
        let ch = rdma_create_event_channel();
        if ch.is_null() {
            return Err(errno());
        }
        let fd = (*ch).fd;
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        let mut id = std::ptr::null_mut();
        if rdma_create_id(ch, &mut id, std::ptr::null_mut(), ps) != 0 {
            let e = errno();
            rdma_destroy_event_channel(ch);
            return Err(e);
        }
        let s = Sock {
            fd,
            ch,
            id,
            state: State::Fresh,
            nonblock,
            err: 0,
            opts,
            conn: None,
            dgram: None,
        };
        let s = Arc::new(Mutex::new(s));
        table().lock().expect("rsockets").insert(fd, s.clone());
        Ok((fd, s))
    }
}

/// `rsocket`: a `SOCK_STREAM` (RC) or `SOCK_DGRAM` (UD) rsocket of `AF_INET` or `AF_INET6`;
/// `SOCK_NONBLOCK` in `type` makes it non-blocking.
#[no_mangle]
pub unsafe extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return err(libc::EAFNOSUPPORT);
    }
    let nonblock = kind & libc::SOCK_NONBLOCK != 0;
    match kind & 0xf {
        libc::SOCK_STREAM if protocol == 0 || protocol == libc::IPPROTO_TCP => {
            match open(RDMA_PS_TCP, Opts::default(), nonblock) {
                Ok((fd, _)) => fd,
                Err(e) => err(e),
            }
        }
        libc::SOCK_DGRAM if protocol == 0 || protocol == libc::IPPROTO_UDP => {
            match open(RDMA_PS_UDP, Opts::default(), nonblock) {
                Ok((fd, s)) => {
                    lock(&s).dgram = Some(Box::default());
                    fd
                }
                Err(e) => err(e),
            }
        }
        _ => err(libc::EPROTONOSUPPORT),
    }
}

/// `rbind`: `rdma_bind_addr` on the rsocket's id (a datagram rsocket also makes its QP).
#[no_mangle]
pub unsafe extern "C" fn rbind(fd: c_int, addr: *const libc::sockaddr, _len: u32) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    if addr.is_null() {
        return err(libc::EFAULT);
    }
    if s.state != State::Fresh {
        return err(libc::EINVAL);
    }
    // SAFETY: our id; the caller's address.
    if unsafe { rdma_bind_addr(s.id, addr.cast_mut()) } != 0 {
        return -1;
    }
    if s.dgram.is_some() {
        return dgram::bound(&mut s);
    }
    0
}

/// `rlisten`: `rdma_listen`; connections are then taken with `raccept`.
#[no_mangle]
pub unsafe extern "C" fn rlisten(fd: c_int, backlog: c_int) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    if s.dgram.is_some() {
        return err(libc::EOPNOTSUPP);
    }
    // SAFETY: our id.
    if unsafe { rdma_listen(s.id, backlog) } != 0 {
        return -1;
    }
    s.state = State::Listening;
    0
}

/// How long a blocking connect or an accept's handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(30);

/// `rconnect`: resolve the address and route, make the QP and connect (a non-blocking rsocket
/// returns `EINPROGRESS`; `rpoll` reports `POLLOUT` once it is connected, `SO_ERROR` why not).
#[no_mangle]
pub unsafe extern "C" fn rconnect(fd: c_int, addr: *const libc::sockaddr, _len: u32) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    if addr.is_null() {
        return err(libc::EFAULT);
    }
    if s.dgram.is_some() {
        return dgram::connect(&mut s, addr);
    }
    match s.state {
        State::Fresh => {}
        State::Connected => return err(libc::EISCONN),
        State::Resolving | State::Routing | State::Connecting => return err(libc::EALREADY),
        State::Listening | State::Failed => return err(libc::EINVAL),
    }
    // SAFETY: our id (bound or not); the caller's address.
    if unsafe { rdma_resolve_addr(s.id, std::ptr::null_mut(), addr.cast_mut(), 2000) } != 0 {
        return -1;
    }
    s.state = State::Resolving;
    if s.nonblock {
        drive(&mut s, false);
        return match s.state {
            State::Connected => 0,
            State::Failed => err(std::mem::take(&mut s.err)),
            _ => err(libc::EINPROGRESS),
        };
    }
    drive(&mut s, true);
    match s.state {
        State::Connected => 0,
        _ => err(std::mem::take(&mut s.err)),
    }
}

/// One CM event of `ch`, copied out (kind, status, private data) and acknowledged, with the
/// id it is for; None if none is waiting.
fn next_event(ch: *mut rdma_event_channel) -> Option<(c_int, c_int, Vec<u8>, *mut rdma_cm_id)> {
    let mut e = std::ptr::null_mut();
    // SAFETY: our channel (non-blocking); the event is read then acknowledged.
    unsafe {
        if rdma_get_cm_event(ch, &mut e) != 0 {
            return None;
        }
        let (kind, status, id) = ((*e).event, (*e).status, (*e).id);
        let c = (*e).param.conn;
        let data = if c.private_data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize)
                .to_vec()
        };
        rdma_ack_cm_event(e);
        Some((kind, status, data, id))
    }
}

/// Move a connecting rsocket along with its CM events (all that wait; `block`: until it is
/// connected or failed, within [`HANDSHAKE`]); on a connected one, note a DISCONNECTED.
pub fn drive(s: &mut Sock, block: bool) {
    let deadline = Instant::now() + HANDSHAKE;
    loop {
        if s.state == State::Failed || s.state == State::Connected && block {
            return;
        }
        let Some((kind, status, data, _)) = next_event(s.ch) else {
            if !block {
                return;
            }
            if Instant::now() >= deadline {
                s.state = State::Failed;
                s.err = libc::ETIMEDOUT;
                return;
            }
            readable(s.fd, 200);
            continue;
        };
        step(s, kind, status, &data);
    }
}

fn fail(s: &mut Sock, e: c_int) {
    s.state = State::Failed;
    s.err = e;
    s.conn = None;
}

/// One CM event's effect on the rsocket.
fn step(s: &mut Sock, kind: c_int, _status: c_int, data: &[u8]) {
    match (s.state, kind) {
        (State::Resolving, ev::ADDR_RESOLVED) => {
            // SAFETY: our id.
            if unsafe { rdma_resolve_route(s.id, 2000) } != 0 {
                fail(s, errno());
                return;
            }
            s.state = State::Routing;
        }
        (State::Routing, ev::ROUTE_RESOLVED) => {
            let c = match Conn::new(s.id, sizes(&s.opts)) {
                Ok(c) => c,
                Err(e) => return fail(s, e),
            };
            let hello = c.hello();
            s.conn = Some(c);
            let mut p = conn_param(&hello);
            // SAFETY: our id with its QP; the private data lives across the call.
            if unsafe { rdma_connect(s.id, &mut p) } != 0 {
                fail(s, errno());
                return;
            }
            s.state = State::Connecting;
        }
        (State::Connecting, ev::ESTABLISHED) => {
            let ok = s.conn.as_mut().is_some_and(|c| c.set_peer(data.as_ptr().cast(), data.len()));
            if ok {
                s.state = State::Connected;
            } else {
                eprintln!("librdmacm (softverbs): rconnect: the peer is not a softverbs rsocket");
                fail(s, libc::ECONNREFUSED);
            }
        }
        (State::Connected, ev::DISCONNECTED) => {
            if let Some(c) = s.conn.as_mut() {
                c.peer_eof = true;
                c.peer_gone = true;
            }
        }
        (State::Connected, _) => {}
        (_, ev::REJECTED | ev::CONNECT_ERROR) => fail(s, libc::ECONNREFUSED),
        (_, ev::UNREACHABLE | ev::ADDR_ERROR | ev::ROUTE_ERROR) => fail(s, libc::EHOSTUNREACH),
        (_, ev::DISCONNECTED) => fail(s, libc::ECONNRESET),
        _ => {}
    }
}

/// The connection sizes of the options.
fn sizes(o: &Opts) -> Sizes {
    Sizes { sndbuf: o.sndbuf, rcvbuf: o.rcvbuf, sq: o.sq, rq: o.rq }
}

/// Connection parameters carrying `hello`.
fn conn_param(hello: &conn::Hello) -> rdma_conn_param {
    rdma_conn_param {
        private_data: (hello as *const conn::Hello).cast(),
        private_data_len: size_of::<conn::Hello>() as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

/// `raccept`: the next connection request on a listening rsocket, accepted (its QP made, its
/// handshake completed); the new rsocket is blocking, as an accepted socket is. A
/// non-blocking listener with no request waiting gives `EAGAIN`.
#[no_mangle]
pub unsafe extern "C" fn raccept(fd: c_int, addr: *mut libc::sockaddr, len: *mut u32) -> c_int {
    let Some(l) = get(fd) else { return err(libc::EBADF) };
    let l = lock(&l);
    if l.state != State::Listening {
        return err(libc::EINVAL);
    }
    let (id, data) = loop {
        match next_event(l.ch) {
            Some((ev::CONNECT_REQUEST, _, data, id)) => break (id, data),
            Some(_) => continue,
            None if l.nonblock => return err(libc::EAGAIN),
            None => {
                readable(l.fd, 1000);
            }
        }
    };
    let opts = l.opts;
    drop(l);
    match accept_one(id, &data, opts) {
        Ok(fd) => {
            if let Some(s) = get(fd) {
                let s = lock(&s);
                // SAFETY: the caller's buffer and length, and the new id's route.
                unsafe { opts::copy_addr(&(*s.id).route.addr.dst, addr, len) };
            }
            fd
        }
        Err(e) => err(e),
    }
}

/// Accept the request of `id` (the peer's private data `data`) on a channel of its own.
fn accept_one(id: *mut rdma_cm_id, data: &[u8], opts: Opts) -> Result<c_int, c_int> {
    if conn::read_hello(data.as_ptr().cast(), data.len()).is_none() {
        eprintln!("librdmacm (softverbs): raccept: a connection request not from an rsocket");
        // SAFETY: the request's id, rejected and destroyed.
        unsafe {
            rdma_reject(id, std::ptr::null(), 0);
            rdma_destroy_id(id);
        }
        return Err(libc::ECONNABORTED);
    }
    // SAFETY: a new channel; the request's id moved to it (its event was acknowledged).
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return Err(errno());
    }
    // SAFETY: as above.
    unsafe {
        let fd = (*ch).fd;
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        if rdma_migrate_id(id, ch) != 0 {
            let e = errno();
            rdma_destroy_id(id);
            rdma_destroy_event_channel(ch);
            return Err(e);
        }
    }
    let mut s = Sock {
        // SAFETY: our channel.
        fd: unsafe { (*ch).fd },
        ch,
        id,
        state: State::Connecting,
        nonblock: false,
        err: 0,
        opts,
        conn: None,
        dgram: None,
    };
    let result = (|| {
        let mut c = Conn::new(id, sizes(&opts))?;
        c.set_peer(data.as_ptr().cast(), data.len());
        let hello = c.hello();
        s.conn = Some(c);
        let mut p = conn_param(&hello);
        // SAFETY: the id with its QP; the private data lives across the call.
        if unsafe { rdma_accept(id, &mut p) } != 0 {
            return Err(errno());
        }
        // The handshake's end (the RTU): then the peer's QP is ready for our writes.
        let deadline = Instant::now() + HANDSHAKE;
        loop {
            match next_event(ch) {
                Some((ev::ESTABLISHED, ..)) => return Ok(()),
                Some((ev::CONNECT_RESPONSE | ev::ADDR_RESOLVED, ..)) => {}
                Some(_) => return Err(libc::ECONNABORTED),
                None if Instant::now() >= deadline => return Err(libc::ETIMEDOUT),
                None => {
                    readable(s.fd, 200);
                }
            }
        }
    })();
    match result {
        Ok(()) => {
            s.state = State::Connected;
            let fd = s.fd;
            table().lock().expect("rsockets").insert(fd, Arc::new(Mutex::new(s)));
            Ok(fd)
        }
        Err(e) => {
            destroy(&mut s);
            Err(e)
        }
    }
}

/// Release an rsocket's connection, id and channel.
fn destroy(s: &mut Sock) {
    s.conn = None;
    dgram::destroy(s);
    // SAFETY: our id and channel, destroyed once (the Sock is out of the table).
    unsafe {
        rdma_destroy_id(s.id);
        rdma_destroy_event_channel(s.ch);
    }
}

/// Wait for a connected rsocket's completions or CM events, at most `ms`.
pub fn wait(s: &mut Sock, ms: c_int) {
    let (fd, ch) = (s.fd, s.ch);
    let Some(c) = s.conn.as_mut() else {
        readable(fd, ms);
        return;
    };
    if c.arm() {
        return;
    }
    let mut p = [
        libc::pollfd { fd: c.cc_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: two pollfds of ours.
    unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
    if p[0].revents != 0 {
        c.take_cq_event();
    }
    if p[1].revents != 0 {
        while let Some((kind, status, data, _)) = next_event(ch) {
            step(s, kind, status, &data);
        }
    }
}

/// Arm a connected rsocket's CQ for a sleep: the pollfds of its completion and CM channels,
/// or None if completions came meanwhile (look again instead of sleeping).
pub fn prepare_wait(s: &mut Sock) -> Option<[libc::pollfd; 2]> {
    let fd = s.fd;
    let c = s.conn.as_mut()?;
    if c.arm() {
        return None;
    }
    Some([
        libc::pollfd { fd: c.cc_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
    ])
}

/// Note the CM events waiting on a connected rsocket (DISCONNECTED).
pub fn pump(s: &mut Sock) {
    while let Some((kind, status, data, _)) = next_event(s.ch) {
        step(s, kind, status, &data);
    }
}

/// `rshutdown`: `SHUT_RD` ends reading (rrecv returns 0), `SHUT_WR` sends the end of stream
/// (the peer's rrecv returns 0 once it read the rest), `SHUT_RDWR` both.
#[no_mangle]
pub unsafe extern "C" fn rshutdown(fd: c_int, how: c_int) -> c_int {
    let Some(s) = get(fd) else { return err(libc::EBADF) };
    let mut s = lock(&s);
    if s.dgram.is_some() {
        return 0;
    }
    let Some(c) = s.conn.as_mut() else { return err(libc::ENOTCONN) };
    match how {
        libc::SHUT_RD => c.shut_rd = true,
        libc::SHUT_WR => {
            c.shut_wr = true;
            c.end(false);
        }
        libc::SHUT_RDWR => {
            c.shut_rd = true;
            c.shut_wr = true;
            c.end(true);
        }
        _ => return err(libc::EINVAL),
    }
    0
}

/// How long `rclose` waits for what it sent to be delivered.
const LINGER: Duration = Duration::from_secs(5);

/// `rclose`: tell the peer (its reads then end, its writes fail with `ECONNRESET`), wait for
/// what was sent to be delivered (at most 5 s), disconnect and release everything.
#[no_mangle]
pub unsafe extern "C" fn rclose(fd: c_int) -> c_int {
    let Some(s) = table().lock().expect("rsockets").remove(&fd) else {
        return err(libc::EBADF);
    };
    let mut s = lock(&s);
    if let Some(c) = s.conn.as_mut() {
        c.end(true);
        let deadline = Instant::now() + LINGER;
        while let Some(c) = s.conn.as_mut() {
            c.progress();
            if c.drained() || c.broken != 0 || c.peer_gone || Instant::now() >= deadline {
                break;
            }
            wait(&mut s, 100);
        }
        // SAFETY: our connected id.
        unsafe { rdma_disconnect(s.id) };
    }
    destroy(&mut s);
    0
}

/// At the process's exit, the rsockets it left open are closed as the kernel would close a
/// process's sockets: the peers see a disconnect, the listening names go (rstream, for one,
/// never closes its listener). One another thread is using is left alone.
extern "C" fn close_all_at_exit() {
    let all: Vec<Shared> = match table().try_lock() {
        Ok(mut t) => t.drain().map(|(_, s)| s).collect(),
        Err(_) => return,
    };
    for s in all {
        if let Ok(mut s) = s.try_lock() {
            if s.conn.is_some() {
                // SAFETY: our connected id.
                unsafe { rdma_disconnect(s.id) };
            }
            destroy(&mut s);
        }
    }
}

#[used]
#[unsafe(link_section = ".fini_array")]
static CLOSE_ALL_AT_EXIT: extern "C" fn() = close_all_at_exit;
