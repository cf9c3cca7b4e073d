//! `rpoll` and `rselect` over rsockets and ordinary descriptors together: each rsocket's state
//! is looked at (its completions polled, a connect moved along), and if nothing is ready the
//! caller sleeps in `poll(2)` on the rsockets' completion and CM channels and the ordinary
//! descriptors, until one of them or the timeout wakes it.
use std::ffi::c_int;
use std::time::{Duration, Instant};

use super::verbs::{err, readable};
use super::{drive, get, lock, pump, State};

/// What an rsocket reports for `events` now.
fn revents(fd: c_int, events: i16) -> i16 {
    let Some(s) = get(fd) else { return libc::POLLNVAL };
    let mut s = lock(&s);
    let mut r: i16 = 0;
    if s.dgram.is_some() {
        r = super::dgram::revents(&mut s);
    } else {
        match s.state {
            State::Listening if readable(s.fd, 0) => r |= libc::POLLIN,
            State::Resolving | State::Routing | State::Connecting => drive(&mut s, false),
            _ => {}
        }
        match s.state {
            State::Failed => r |= libc::POLLOUT | libc::POLLERR,
            State::Fresh => r |= libc::POLLOUT,
            State::Connected => {
                let idle = s.conn.as_mut().is_some_and(|c| {
                    c.progress();
                    c.readable() == 0 && !c.peer_eof
                });
                if idle {
                    pump(&mut s);
                }
                if let Some(c) = s.conn.as_mut() {
                    if c.readable() > 0 || c.peer_eof || c.shut_rd || c.broken != 0 {
                        r |= libc::POLLIN;
                    }
                    if c.writable() {
                        r |= libc::POLLOUT;
                    }
                    if c.broken != 0 {
                        r |= libc::POLLERR;
                    }
                    if c.peer_gone && c.readable() == 0 {
                        r |= libc::POLLHUP;
                    }
                }
            }
            _ => {}
        }
    }
    r & (events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL)
}

/// The descriptors to sleep on for rsocket `fd` (its completion channel armed first); None if
/// completions came while arming (look again instead of sleeping).
fn sleep_fds(fd: c_int) -> Option<Vec<c_int>> {
    let Some(s) = get(fd) else { return Some(Vec::new()) };
    let mut s = lock(&s);
    let fd = s.fd;
    if let Some(d) = s.dgram.as_mut() {
        let v = d.sleep_fds(fd);
        return (!v.is_empty()).then_some(v);
    }
    let connected = s.state == State::Connected;
    match s.conn.as_mut() {
        Some(c) if connected => {
            if c.arm() {
                return None;
            }
            Some(vec![c.cc_fd(), fd])
        }
        _ => Some(vec![fd]),
    }
}

/// Read the completion-channel events that woke a sleep on rsocket `fd`.
fn woke(fd: c_int) {
    if let Some(s) = get(fd) {
        let mut s = lock(&s);
        if let Some(c) = s.conn.as_mut() {
            c.take_cq_event();
        }
        if let Some(d) = s.dgram.as_mut() {
            d.take_cq_event();
        }
    }
}

/// `rpoll`: `poll` over rsockets and ordinary descriptors.
#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    if nfds > 0 && fds.is_null() {
        return err(libc::EFAULT);
    }
    // SAFETY: the caller's array of nfds entries.
    let fds = if nfds == 0 {
        &mut [][..]
    } else {
        unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        // Look at everything without sleeping.
        let mut plain: Vec<libc::pollfd> = Vec::new();
        let mut ready = 0;
        for p in fds.iter_mut() {
            p.revents = 0;
            if p.fd < 0 {
                continue;
            }
            if get(p.fd).is_some() {
                p.revents = revents(p.fd, p.events);
            } else {
                plain.push(libc::pollfd { fd: p.fd, events: p.events, revents: 0 });
            }
        }
        if !plain.is_empty() {
            // SAFETY: our array.
            let r = unsafe { libc::poll(plain.as_mut_ptr(), plain.len() as libc::nfds_t, 0) };
            if r < 0 {
                return -1;
            }
            let mut it = plain.iter();
            for p in fds.iter_mut().filter(|p| p.fd >= 0 && get(p.fd).is_none()) {
                p.revents = it.next().map_or(0, |q| q.revents);
            }
        }
        ready += fds.iter().filter(|p| p.revents != 0).count();
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if ready > 0 || left == Some(Duration::ZERO) {
            return ready as c_int;
        }
        // Sleep on every rsocket's channels and the ordinary descriptors.
        let mut sleep: Vec<libc::pollfd> = Vec::new();
        let mut owners: Vec<c_int> = Vec::new();
        let mut again = false;
        for p in fds.iter().filter(|p| p.fd >= 0) {
            if get(p.fd).is_some() {
                match sleep_fds(p.fd) {
                    Some(v) => {
                        for f in v {
                            sleep.push(libc::pollfd { fd: f, events: libc::POLLIN, revents: 0 });
                            owners.push(p.fd);
                        }
                    }
                    None => again = true,
                }
            } else {
                sleep.push(libc::pollfd { fd: p.fd, events: p.events, revents: 0 });
                owners.push(-1);
            }
        }
        if again {
            continue;
        }
        let ms = left.map_or(-1, |l| l.as_millis().min(c_int::MAX as u128) as c_int);
        // SAFETY: our array.
        let r = unsafe { libc::poll(sleep.as_mut_ptr(), sleep.len() as libc::nfds_t, ms) };
        if r < 0 {
            return -1;
        }
        for (p, &o) in sleep.iter().zip(&owners) {
            if p.revents != 0 && o >= 0 {
                woke(o);
            }
        }
    }
}

/// `rselect`: `select` over rsockets and ordinary descriptors (through [`rpoll`]).
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return err(libc::EINVAL);
    }
    // SAFETY: the caller's sets and timeval, as `select`'s; `rpoll` over our array.
    unsafe {
        softverbs_cabi_abi::select::select_by_poll(nfds, rd, wr, ex, tv, |fds, ms| {
            rpoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms)
        })
    }
}
