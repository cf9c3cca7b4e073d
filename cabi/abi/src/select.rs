//! `select` carried out by a `poll`: what softverbs' `rselect` (librdmacm) and the `select`
//! of `librspreload.so` share, as rdma-core's `rselect` is its `rpoll` over the sets.

use std::ffi::c_int;

/// Runs `select(nfds, rd, wr, ex, tv)` through `poll`: each descriptor below `nfds` in a set
/// becomes a `pollfd` asking `POLLIN` (read set), `POLLOUT` (write set) or `POLLPRI`
/// (exception set); `tv` becomes milliseconds (NULL: wait for ever); the sets are then
/// rewritten from the results, an error or hang-up counting as readable and writable as
/// `select` reports them. Returns the number of bits set, or `poll`'s negative result
/// (its `errno` left as it set it). `nfds` is clamped to `0..=FD_SETSIZE`; a caller that
/// refuses other values (`EINVAL`, as glibc's `select`) checks before.
///
/// # Safety
/// `rd`, `wr` and `ex` are each NULL or a valid `fd_set`; `tv` is NULL or a valid `timeval`.
pub unsafe fn select_by_poll(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    tv: *mut libc::timeval,
    poll: impl FnOnce(&mut [libc::pollfd], c_int) -> c_int,
) -> c_int {
    let sets = [(rd, libc::POLLIN), (wr, libc::POLLOUT), (ex, libc::POLLPRI)];
    // SAFETY: the caller's sets (each NULL or an fd_set).
    let isset = |s: *mut libc::fd_set, fd: c_int| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
    let mut fds: Vec<libc::pollfd> = (0..nfds.clamp(0, libc::FD_SETSIZE as c_int))
        .filter_map(|fd| {
            let events = sets.iter().filter(|(s, _)| isset(*s, fd)).fold(0, |e, (_, bit)| e | bit);
            (events != 0).then_some(libc::pollfd { fd, events, revents: 0 })
        })
        .collect();
    let ms = if tv.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { *tv };
        (t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000).clamp(0, c_int::MAX as i64) as c_int
    };
    let r = poll(&mut fds, ms);
    if r < 0 {
        return r;
    }
    let mut count = 0;
    // SAFETY: the caller's sets.
    unsafe {
        for (s, _) in sets {
            if !s.is_null() {
                libc::FD_ZERO(s);
            }
        }
        for p in &fds {
            let bad = p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
            for (s, bit) in sets {
                let ready = p.revents & bit != 0 || bad && bit != libc::POLLPRI;
                if !s.is_null() && p.events & bit != 0 && ready {
                    libc::FD_SET(p.fd, s);
                    count += 1;
                }
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(fds: &[c_int]) -> libc::fd_set {
        // SAFETY: a zeroed fd_set is an empty one; FD_SET of descriptors below FD_SETSIZE.
        unsafe {
            let mut s: libc::fd_set = std::mem::zeroed();
            for &fd in fds {
                libc::FD_SET(fd, &mut s);
            }
            s
        }
    }

    fn members(s: &libc::fd_set) -> Vec<c_int> {
        // SAFETY: a valid fd_set.
        (0..64).filter(|&fd| unsafe { libc::FD_ISSET(fd, s) }).collect()
    }

    #[test]
    fn the_sets_become_pollfds_and_come_back_from_the_results() {
        let (mut rd, mut wr, mut ex) = (set_of(&[3, 5]), set_of(&[5, 7]), set_of(&[9]));
        let mut tv = libc::timeval { tv_sec: 2, tv_usec: 500_000 };
        // SAFETY: valid sets and timeval.
        let n = unsafe {
            select_by_poll(10, &mut rd, &mut wr, &mut ex, &mut tv, |fds, ms| {
                assert_eq!(ms, 2500);
                let asked: Vec<_> = fds.iter().map(|p| (p.fd, p.events)).collect();
                let both = libc::POLLIN | libc::POLLOUT;
                assert_eq!(
                    asked,
                    [(3, libc::POLLIN), (5, both), (7, libc::POLLOUT), (9, libc::POLLPRI)]
                );
                fds[0].revents = libc::POLLIN; // 3 readable
                fds[1].revents = libc::POLLHUP; // 5 hung up: readable and writable
                fds[3].revents = libc::POLLERR; // 9: an error is no exception condition
                2
            })
        };
        assert_eq!(n, 3);
        assert_eq!(members(&rd), [3, 5]);
        assert_eq!(members(&wr), [5]);
        assert_eq!(members(&ex), Vec::<c_int>::new());
    }

    #[test]
    fn a_poll_error_leaves_the_sets_and_no_timeval_waits_for_ever() {
        let mut rd = set_of(&[4]);
        // SAFETY: a valid set; NULL write and exception sets and timeval.
        let n = unsafe {
            let null = std::ptr::null_mut();
            select_by_poll(5, &mut rd, null, null, std::ptr::null_mut(), |_, ms| {
                assert_eq!(ms, -1);
                -1
            })
        };
        assert_eq!(n, -1);
        assert_eq!(members(&rd), [4]);
    }
}
