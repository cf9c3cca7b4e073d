//! softverbs' `librspreload.so`: with `LD_PRELOAD`, a program's TCP sockets (`AF_INET` /
//! `AF_INET6`, `SOCK_STREAM`) become rsockets of softverbs' `librdmacm.so.1`, as rdma-core's
//! preload library does; every other descriptor is passed to the C library untouched.
//!
//! The program sees an ordinary descriptor (a real socket kept open as a placeholder, so its
//! number is the program's and nothing else takes it); the table maps it to the rsocket. The
//! rsockets' own descriptors (their CM and completion channels) are not in the table, so the
//! calls librdmacm makes on them reach the C library. The C library's functions are found with
//! `dlsym(RTLD_NEXT)`, librdmacm's with `dlopen`; a call made while they are being found (by
//! the loader itself) goes to the C library.
#![allow(clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{c_int, c_long, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

/// The descriptors the table can map (higher ones are left to the C library).
const MAX_FD: usize = 1 << 16;
/// The rsocket behind each program descriptor, or -1.
static MAP: [AtomicI32; MAX_FD] = [const { AtomicI32::new(-1) }; MAX_FD];

fn rs_of(fd: c_int) -> Option<c_int> {
    let r = MAP.get(usize::try_from(fd).ok()?)?.load(Ordering::Acquire);
    (r >= 0).then_some(r)
}

fn set_map(fd: c_int, rs: c_int) {
    if let Some(m) = usize::try_from(fd).ok().and_then(|i| MAP.get(i)) {
        m.store(rs, Ordering::Release);
    }
}

thread_local! {
    /// Set while the functions are being looked up (the loader's own calls pass through).
    static LOOKING: Cell<bool> = const { Cell::new(false) };
}

/// A function of the next library (`RTLD_NEXT`) or of librdmacm, by name.
fn sym(handle: *mut c_void, name: &CStr) -> usize {
    // SAFETY: dlsym with a NUL-terminated name.
    unsafe { libc::dlsym(handle, name.as_ptr()) as usize }
}

/// The C library's and librdmacm's functions this library calls.
struct Fns {
    socket: usize,
    close: usize,
    poll: usize,
    fcntl: usize,
    next: std::collections::HashMap<&'static str, usize>,
    rs: std::collections::HashMap<&'static str, usize>,
}

const NEXT: [&str; 22] = [
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "recv",
    "recvfrom",
    "recvmsg",
    "read",
    "readv",
    "send",
    "sendto",
    "sendmsg",
    "write",
    "writev",
    "shutdown",
    "getpeername",
    "getsockname",
    "setsockopt",
    "getsockopt",
    "select",
    "dup2",
];
const RS: [&str; 24] = [
    "rsocket",
    "rbind",
    "rlisten",
    "raccept",
    "rconnect",
    "rrecv",
    "rrecvfrom",
    "rrecvmsg",
    "rread",
    "rreadv",
    "rsend",
    "rsendto",
    "rsendmsg",
    "rwrite",
    "rwritev",
    "rshutdown",
    "rgetpeername",
    "rgetsockname",
    "rsetsockopt",
    "rgetsockopt",
    "rclose",
    "rpoll",
    "rfcntl",
    "rselect",
];

fn fns() -> Option<&'static Fns> {
    static F: OnceLock<Option<Fns>> = OnceLock::new();
    if LOOKING.with(Cell::get) {
        return None;
    }
    F.get_or_init(|| {
        LOOKING.with(|l| l.set(true));
        let c = |n: &str| std::ffi::CString::new(n).expect("name");
        let next = |n: &str| sym(libc::RTLD_NEXT, &c(n));
        // SAFETY: dlopen of the library this one stands in front of.
        let lib =
            unsafe { libc::dlopen(c"librdmacm.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        let f = Fns {
            socket: next("socket"),
            close: next("close"),
            poll: next("poll"),
            fcntl: next("fcntl"),
            next: NEXT.iter().map(|&n| (n, next(n))).collect(),
            rs: if lib.is_null() {
                Default::default()
            } else {
                RS.iter().map(|&n| (n, sym(lib, &c(n)))).collect()
            },
        };
        LOOKING.with(|l| l.set(false));
        Some(f)
    })
    .as_ref()
}

/// The C library's `name`, as a function of type `F` (a fn pointer type).
macro_rules! next {
    ($name:expr, $t:ty) => {{
        let p = fns().and_then(|f| f.next.get($name).copied()).filter(|&p| p != 0);
        // SAFETY: the C library's function of that name, with its C signature.
        p.map(|p| unsafe { std::mem::transmute::<usize, $t>(p) })
    }};
}
/// librdmacm's `name`.
macro_rules! rs {
    ($name:expr, $t:ty) => {{
        let p = fns().and_then(|f| f.rs.get($name).copied()).filter(|&p| p != 0);
        // SAFETY: librdmacm's function of that name, with its C signature.
        p.map(|p| unsafe { std::mem::transmute::<usize, $t>(p) })
    }};
}

fn enosys() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

type SocketFn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type PollFn = unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
type FcntlFn = unsafe extern "C" fn(c_int, c_int, c_long) -> c_int;

/// A C-library function found by name without the table (the loader may call it first).
fn direct(cached: Option<usize>, name: &CStr) -> Option<usize> {
    cached.filter(|&p| p != 0).or_else(|| Some(sym(libc::RTLD_NEXT, name)).filter(|&p| p != 0))
}

/// The C library's `socket`.
unsafe fn real_socket(d: c_int, t: c_int, p: c_int) -> c_int {
    match direct(fns().map(|f| f.socket), c"socket") {
        // SAFETY: libc's socket.
        Some(f) => unsafe { std::mem::transmute::<usize, SocketFn>(f)(d, t, p) },
        None => enosys(),
    }
}

/// The C library's `close`.
unsafe fn real_close(fd: c_int) -> c_int {
    match direct(fns().map(|f| f.close), c"close") {
        // SAFETY: libc's close.
        Some(f) => unsafe { std::mem::transmute::<usize, CloseFn>(f)(fd) },
        None => enosys(),
    }
}

/// `socket`: a TCP socket becomes an rsocket (the C library's socket if librdmacm cannot make
/// one: no device), anything else is the C library's.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    let tcp = (domain == libc::AF_INET || domain == libc::AF_INET6)
        && kind & 0xf == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP);
    if tcp {
        if let Some(rsocket) = rs!("rsocket", SocketFn) {
            // SAFETY: librdmacm's rsocket.
            let r = unsafe { rsocket(domain, kind, protocol) };
            if r >= 0 {
                return placeholder(r);
            }
        }
    }
    // SAFETY: libc's.
    unsafe { real_socket(domain, kind, protocol) }
}

/// A program descriptor for rsocket `r` (a real socket held open), mapped to it.
fn placeholder(r: c_int) -> c_int {
    // SAFETY: libc's socket.
    let fd = unsafe { real_socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    if fd < 0 || fd as usize >= MAX_FD {
        if let Some(rclose) = rs!("rclose", CloseFn) {
            // SAFETY: librdmacm's rclose of the rsocket just made.
            unsafe { rclose(r) };
        }
        if fd >= 0 {
            // SAFETY: the placeholder just made.
            unsafe { real_close(fd) };
        }
        return enosys();
    }
    set_map(fd, r);
    fd
}

/// Define a call that goes to librdmacm's `$r` for a mapped descriptor, the C library's `$n`
/// otherwise.
macro_rules! forward {
    ($n:ident, $r:literal, ($($a:ident: $t:ty),*) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($n), "`: `", $r, "` on an rsocket, the C library's otherwise.")]
        #[no_mangle]
        pub unsafe extern "C" fn $n(fd: c_int, $($a: $t),*) -> $ret {
            type F = unsafe extern "C" fn(c_int, $($t),*) -> $ret;
            if let Some(r) = rs_of(fd) {
                return match rs!($r, F) {
                    // SAFETY: librdmacm's function with the caller's arguments.
                    Some(f) => unsafe { f(r, $($a),*) },
                    None => enosys() as $ret,
                };
            }
            match next!(stringify!($n), F) {
                // SAFETY: the C library's function with the caller's arguments.
                Some(f) => unsafe { f(fd, $($a),*) },
                None => enosys() as $ret,
            }
        }
    };
}

forward!(bind, "rbind", (a: *const libc::sockaddr, l: u32) -> c_int);
forward!(listen, "rlisten", (b: c_int) -> c_int);
forward!(connect, "rconnect", (a: *const libc::sockaddr, l: u32) -> c_int);
forward!(recv, "rrecv", (b: *mut c_void, l: usize, f: c_int) -> isize);
forward!(recvfrom, "rrecvfrom", (b: *mut c_void, l: usize, f: c_int, a: *mut libc::sockaddr, al: *mut u32) -> isize);
forward!(recvmsg, "rrecvmsg", (m: *mut libc::msghdr, f: c_int) -> isize);
forward!(read, "rread", (b: *mut c_void, l: usize) -> isize);
forward!(readv, "rreadv", (v: *const libc::iovec, n: c_int) -> isize);
forward!(send, "rsend", (b: *const c_void, l: usize, f: c_int) -> isize);
forward!(sendto, "rsendto", (b: *const c_void, l: usize, f: c_int, a: *const libc::sockaddr, al: u32) -> isize);
forward!(sendmsg, "rsendmsg", (m: *const libc::msghdr, f: c_int) -> isize);
forward!(write, "rwrite", (b: *const c_void, l: usize) -> isize);
forward!(writev, "rwritev", (v: *const libc::iovec, n: c_int) -> isize);
forward!(shutdown, "rshutdown", (h: c_int) -> c_int);
forward!(getpeername, "rgetpeername", (a: *mut libc::sockaddr, l: *mut u32) -> c_int);
forward!(getsockname, "rgetsockname", (a: *mut libc::sockaddr, l: *mut u32) -> c_int);
forward!(setsockopt, "rsetsockopt", (lv: c_int, n: c_int, v: *const c_void, l: u32) -> c_int);
forward!(getsockopt, "rgetsockopt", (lv: c_int, n: c_int, v: *mut c_void, l: *mut u32) -> c_int);

type AcceptFn = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut u32) -> c_int;

/// `accept`: on an rsocket, `raccept` and a new program descriptor for the connection.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut libc::sockaddr, l: *mut u32) -> c_int {
    if let Some(r) = rs_of(fd) {
        let Some(raccept) = rs!("raccept", AcceptFn) else { return enosys() };
        // SAFETY: librdmacm's raccept with the caller's arguments.
        let n = unsafe { raccept(r, a, l) };
        return if n < 0 { n } else { placeholder(n) };
    }
    match next!("accept", AcceptFn) {
        // SAFETY: the C library's accept.
        Some(f) => unsafe { f(fd, a, l) },
        None => enosys(),
    }
}

/// `accept4`: as [`accept`] (`SOCK_NONBLOCK` makes the rsocket non-blocking).
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut libc::sockaddr,
    l: *mut u32,
    flags: c_int,
) -> c_int {
    if rs_of(fd).is_some() {
        // SAFETY: as accept.
        let n = unsafe { accept(fd, a, l) };
        if n >= 0 && flags & libc::SOCK_NONBLOCK != 0 {
            // SAFETY: our fcntl on the new descriptor.
            unsafe { fcntl(n, libc::F_SETFL, libc::O_NONBLOCK as c_long) };
        }
        return n;
    }
    type F = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut u32, c_int) -> c_int;
    match next!("accept4", F) {
        // SAFETY: the C library's accept4.
        Some(f) => unsafe { f(fd, a, l, flags) },
        None => enosys(),
    }
}

/// `close`: an rsocket is `rclose`d and its placeholder closed.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(r) = rs_of(fd) {
        set_map(fd, -1);
        if let Some(rclose) = rs!("rclose", CloseFn) {
            // SAFETY: librdmacm's rclose.
            unsafe { rclose(r) };
        }
    }
    // SAFETY: libc's close.
    unsafe { real_close(fd) }
}

/// `fcntl`: `F_GETFL` / `F_SETFL` on an rsocket are `rfcntl`'s, everything else the C
/// library's. (Variadic in C; on x86-64 the third argument arrives as a plain one.)
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    if let Some(r) = rs_of(fd) {
        if cmd == libc::F_GETFL || cmd == libc::F_SETFL {
            return match rs!("rfcntl", FcntlFn) {
                // SAFETY: librdmacm's rfcntl.
                Some(f) => unsafe { f(r, cmd, arg) },
                None => enosys(),
            };
        }
    }
    match direct(fns().map(|f| f.fcntl), c"fcntl") {
        // SAFETY: libc's fcntl.
        Some(f) => unsafe { std::mem::transmute::<usize, FcntlFn>(f)(fd, cmd, arg) },
        None => enosys(),
    }
}

/// `poll`: with an rsocket among the descriptors, `rpoll` over them (rsockets by their
/// numbers); otherwise the C library's.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array.
    let list = if n == 0 || fds.is_null() {
        &mut [][..]
    } else {
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    if list.iter().any(|p| rs_of(p.fd).is_some()) {
        if let Some(rpoll) = rs!("rpoll", PollFn) {
            let mut mine: Vec<libc::pollfd> = list
                .iter()
                .map(|p| libc::pollfd { fd: rs_of(p.fd).unwrap_or(p.fd), ..*p })
                .collect();
            // SAFETY: librdmacm's rpoll on our copy.
            let r = unsafe { rpoll(mine.as_mut_ptr(), n, timeout) };
            for (p, m) in list.iter_mut().zip(&mine) {
                p.revents = m.revents;
            }
            return r;
        }
    }
    match direct(fns().map(|f| f.poll), c"poll") {
        // SAFETY: libc's poll.
        Some(f) => unsafe { std::mem::transmute::<usize, PollFn>(f)(fds, n, timeout) },
        None => enosys(),
    }
}

type SelectFn = unsafe extern "C" fn(
    c_int,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *mut libc::fd_set,
    *mut libc::timeval,
) -> c_int;

/// `select`: with an rsocket in the sets, [`poll`] over them; otherwise the C library's.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets (each NULL or an fd_set).
    let isset = |s: *mut libc::fd_set, fd: c_int| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
    let n = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    if !(0..n).any(|fd| rs_of(fd).is_some() && (isset(rd, fd) || isset(wr, fd) || isset(ex, fd))) {
        return match next!("select", SelectFn) {
            // SAFETY: the C library's select.
            Some(f) => unsafe { f(nfds, rd, wr, ex, tv) },
            None => enosys(),
        };
    }
    // SAFETY: the caller's sets and timeval, as `select`'s; `poll` (this library's, which
    // takes rsockets) over our array.
    unsafe {
        softverbs_cabi_abi::select::select_by_poll(nfds, rd, wr, ex, tv, |fds, ms| {
            poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms)
        })
    }
}
