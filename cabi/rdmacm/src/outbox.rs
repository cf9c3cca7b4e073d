//! The CM's outbox: control messages are sent without blocking, and one that finds the peer's
//! channel socket full (a Unix datagram socket queues `net.unix.max_dgram_qlen` messages, 10
//! by default) waits here, in order behind any other for the same socket, until the CM's clock
//! (watch.rs) gets it through. A sender never blocks on a peer that is itself blocked sending
//! to it (a listener accepting 100 REQs while its requester sends the rest), and a message is
//! never dropped for a full queue. A REQ that cannot be delivered within the life of a REQ
//! under the kernel's CM gives its id `UNREACHABLE` (`-ETIMEDOUT`), what the kernel's CM gives
//! when every retry of a REQ went unanswered (a listener whose backlog stays full drops them):
//! the clock makes that event ([`flush`] hands the expired messages back). Messages are bytes
//! here, so that this module names no other.
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A message waiting for room in its peer's socket.
struct Pending {
    to: PathBuf,
    msg: Vec<u8>,
    since: Instant,
}

fn queue() -> &'static Mutex<VecDeque<Pending>> {
    static Q: Mutex<VecDeque<Pending>> = Mutex::new(VecDeque::new());
    &Q
}

/// What wakes the clock when a message starts waiting (set once the clock runs).
static WAKER: OnceLock<fn()> = OnceLock::new();

/// Call `wake` whenever a message starts waiting (the clock then calls [`flush`]).
pub fn set_waker(wake: fn()) {
    let _ = WAKER.set(wake);
}

/// How one non-blocking send went.
enum Sent {
    Done,
    /// The peer's queue is full: try again later.
    Full,
    /// Nobody is bound there (the process ended, or the name is stale).
    Gone,
}

/// One `sendto` without blocking, whatever the socket's own mode.
fn try_send(sock: &UnixDatagram, to: &Path, bytes: &[u8]) -> Sent {
    let b = to.as_os_str().as_encoded_bytes();
    // SAFETY: all-zero is a valid sockaddr_un; the path is copied in below, NUL-terminated.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if b.len() >= sa.sun_path.len() {
        return Sent::Gone;
    }
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in sa.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    // SAFETY: the socket is open; the buffer and address are ours and sized as passed.
    let r = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            (&sa as *const libc::sockaddr_un).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r >= 0 {
        return Sent::Done;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Sent::Full,
        _ => Sent::Gone,
    }
}

/// Send the message `bytes` to the socket at `to` from `sock`, now or (its queue full, or older
/// messages to it waiting) later, in order; false only if nobody is bound at `to`.
pub fn send(sock: &UnixDatagram, to: &Path, bytes: &[u8]) -> bool {
    let mut q = queue().lock().expect("outbox");
    if !q.iter().any(|p| p.to == to) {
        match try_send(sock, to, bytes) {
            Sent::Done => return true,
            Sent::Gone => return false,
            Sent::Full => {}
        }
    }
    q.push_back(Pending { to: to.to_path_buf(), msg: bytes.to_vec(), since: Instant::now() });
    drop(q);
    if let Some(wake) = WAKER.get() {
        wake();
    }
    true
}

/// Whether messages wait (the clock then calls [`flush`] often).
pub fn waiting() -> bool {
    !queue().lock().expect("outbox").is_empty()
}

/// Send what waits, in order per peer socket, from `sock` (the clock's); a message to a socket
/// that is gone is dropped (the peer's death is reported by the clock's peer check). The
/// messages `expires` says may expire (REQs) and that waited `life` or more are taken out and
/// returned.
pub fn flush(sock: &UnixDatagram, life: Duration, expires: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut q = queue().lock().expect("outbox");
    let mut full: Vec<PathBuf> = Vec::new();
    let mut expired = Vec::new();
    let now = Instant::now();
    let mut i = 0;
    while i < q.len() {
        if full.contains(&q[i].to) {
            i += 1;
            continue;
        }
        match try_send(sock, &q[i].to, &q[i].msg) {
            Sent::Done | Sent::Gone => {
                q.remove(i);
            }
            Sent::Full if now >= q[i].since + life && expires(&q[i].msg) => {
                expired.extend(q.remove(i).map(|p| p.msg));
            }
            Sent::Full => {
                full.push(q[i].to.clone());
                i += 1;
            }
        }
    }
    expired
}
