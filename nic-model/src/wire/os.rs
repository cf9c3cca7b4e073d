//! The operating-system calls the wire needs, each in one small function: who we are, whether
//! a process is alive, the fabric directory lock, reserving a segment's memory, the futex
//! that a parked owner sleeps on, and the scheduling policy of a NIC thread standing by. None
//! of these is on the data path.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

#[cfg(target_os = "linux")]
use crate::cost::{self, Syscall};

/// The effective uid of this process (the owner of the files it creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`) and
/// whether it is a zombie; None where /proc is not available or the process is gone.
#[cfg(target_os = "linux")]
fn proc_stat(pid: u32) -> Option<(u64, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ..."; comm may contain spaces and parentheses, so split after
    // the last ')'. Fields after it start at field 3 (state); starttime is field 22.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z" || state == "X"))
}

#[cfg(not(target_os = "linux"))]
fn proc_stat(_pid: u32) -> Option<(u64, bool)> {
    None
}

/// This process's start time as recorded in segment headers (0 if unknown).
pub fn own_start_time() -> u64 {
    proc_stat(std::process::id()).map_or(0, |(start, _)| start)
}

/// Whether process `pid` exists and is not a zombie; when `start` is non-zero it must also
/// match the process's start time, so a recycled pid does not count as the original owner.
pub fn process_alive(pid: u32, start: u64) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check; nothing is sent.
    let rc = unsafe { libc::kill(raw, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match proc_stat(pid) {
        Some((_, true)) => false,
        Some((actual, false)) => start == 0 || actual == start,
        None => true,
    }
}

/// An exclusive `flock` on a file, held until drop. Serialises LID allocation and cleaning
/// among all processes of a fabric; the kernel drops it if the holder dies.
pub struct FileLock {
    file: File,
}

impl FileLock {
    /// The locked file.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn acquire(file: File) -> io::Result<FileLock> {
        loop {
            // SAFETY: the descriptor belongs to `file`, which is open for the whole call.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(FileLock { file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Gives `file` its final length with the memory reserved up front, so that a full tmpfs
/// shows up here as ENOSPC instead of as SIGBUS on first touch of a page.
pub fn reserve(file: &File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let Ok(off_len) = libc::off_t::try_from(len) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment too large for this platform",
            ));
        };
        // SAFETY: the descriptor belongs to `file`, which is open for writing for the whole call.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_len) };
        match rc {
            0 => return Ok(()),
            libc::EOPNOTSUPP | libc::EINVAL => {}
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
    file.set_len(len)
}

/// Sleeps until `word` is woken, no longer holds `expected`, or `timeout` passes; spurious
/// returns are possible and callers loop. The word lives in a shared mapping, so this is a
/// process-shared futex (no FUTEX_PRIVATE_FLAG). Returns whether a signal handler ran on this
/// thread meanwhile and cut the sleep short (`EINTR`: a timed futex wait is never restarted).
#[cfg(target_os = "linux")]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9, so it fits in every platform's c_long.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    cost::syscalls(Syscall::FutexWait, 1);
    // SAFETY: `word` is a live, 4-byte aligned u32 in a mapping that outlives the call;
    // FUTEX_WAIT only reads it, and `ts` is a valid timespec on our stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Wakes every process sleeping in [`futex_wait`] on `word`.
#[cfg(target_os = "linux")]
pub fn futex_wake(word: &AtomicU32) {
    cost::syscalls(Syscall::FutexWake, 1);
    // SAFETY: `word` is a live, 4-byte aligned u32 in a mapping that outlives the call;
    // FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Portable fallback: poll the word with short sleeps (bounded by `timeout`); no signal is
/// seen.
#[cfg(not(target_os = "linux"))]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    use std::sync::atomic::Ordering;
    let deadline = std::time::Instant::now() + timeout;
    while word.load(Ordering::Acquire) == expected {
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(1)));
    }
    false
}

/// The signals a fault raises on the thread that faulted: never blocked (a blocked one would
/// kill the process instead of reaching a handler).
#[cfg(unix)]
const FAULT_SIGNALS: [libc::c_int; 6] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS];

/// Blocks every asynchronous signal on the calling thread, for the threads softverbs starts
/// inside a program (a device's NIC thread, the CM's clock and wire threads). rxe runs its
/// NIC in the kernel, so a program's signals (its `SIGALRM`, `SIGINT`, `SIGCHLD`, ...) go to
/// the program's own threads only: a signal the program blocks in all of them stays pending,
/// and one it leaves open interrupts the thread that waits for it. A library thread that
/// took them would run the program's handlers on a thread the program never made and leave
/// its blocked call uninterrupted. The fault signals (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`,
/// `SIGTRAP`, `SIGSYS`) stay open.
#[cfg(unix)]
pub fn block_async_signals() {
    // SAFETY: an all-zero sigset_t is a valid value to fill; the calls only write `set` and
    // this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in FAULT_SIGNALS {
            libc::sigdelset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Portable fallback: nothing to block.
#[cfg(not(unix))]
pub fn block_async_signals() {}

/// Whether a blocking call that a signal handler interrupted should carry on, as the kernel
/// restarts a `read` of a uverbs event file (`ibv_get_cq_event`) after a handler installed
/// with `SA_RESTART`, or fail with `EINTR`, as it does after one installed without it.
/// Which signal came is not known to a sleep that only saw `EINTR`, so: it carries on when
/// every handler the program installed for an asynchronous signal has `SA_RESTART` (glibc's
/// `signal()` installs them so), and fails when one has not (qperf's `SIGALRM` handler,
/// which ends a test's loop by interrupting its wait). Handlers of the signals a fault
/// raises on the faulting thread (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`,
/// `SIGSYS`: a Rust program's stack-overflow guard) are left out: they interrupt no sleep.
/// Called only after an interrupted sleep: up to 64 `sigaction` queries.
#[cfg(target_os = "linux")]
pub fn handlers_restart() -> bool {
    (1..=libc::SIGRTMAX()).filter(|s| !FAULT_SIGNALS.contains(s)).all(|sig| {
        // SAFETY: an all-zero sigaction is a valid value of the plain C struct.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: with a null new action, sigaction only writes the current one into `old`.
        let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
        let handled =
            rc == 0 && old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        !handled || old.sa_flags & libc::SA_RESTART != 0
    })
}

/// Portable fallback: interrupted sleeps carry on.
#[cfg(not(target_os = "linux"))]
pub fn handlers_restart() -> bool {
    true
}

/// Portable fallback: sleepers poll, so there is nobody to wake.
#[cfg(not(target_os = "linux"))]
pub fn futex_wake(_word: &AtomicU32) {}

/// Makes the calling thread, if it is an ordinary (`SCHED_OTHER`) thread, a background one
/// (`SCHED_BATCH`), or back. The scheduler never lets a waking batch thread preempt a running
/// thread: it runs when a CPU is free or at the running thread's next time-slice boundary. A
/// NIC thread standing by uses it, so that its periodic look at the program costs the
/// busy-polling threads of a fully loaded machine no preemption. Any thread may switch between
/// the two without privileges; a thread with another policy (a real-time program's) is left
/// as it is. Returns whether the thread is now a background thread.
#[cfg(target_os = "linux")]
pub fn set_background(background: bool) -> bool {
    let (from, to) = match background {
        true => (libc::SCHED_OTHER, libc::SCHED_BATCH),
        false => (libc::SCHED_BATCH, libc::SCHED_OTHER),
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param for both
    // policies (priority 0), and the calls have no other preconditions.
    unsafe {
        if libc::sched_getscheduler(0) == from {
            libc::sched_setscheduler(0, to, &param);
            cost::syscalls(Syscall::Sched, 1);
        }
        cost::syscalls(Syscall::Sched, 2);
        libc::sched_getscheduler(0) == libc::SCHED_BATCH
    }
}

/// [`set_background`] where the scheduler has no such policy: nothing changes.
#[cfg(not(target_os = "linux"))]
pub fn set_background(_background: bool) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(std::process::id(), own_start_time()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn `true`");
        let pid = child.id();
        child.wait().expect("wait for `true`");
        assert!(!process_alive(pid, 0));
        assert!(!process_alive(0, 0));
        assert!(!process_alive(u32::MAX, 0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_switches_to_the_background_and_back() {
        // In a thread of its own: the policy is per thread.
        std::thread::spawn(|| {
            // SAFETY: sched_getscheduler(0) asks about the calling thread; no preconditions.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(policy(), libc::SCHED_OTHER);
            assert!(set_background(true), "now a background thread");
            assert_eq!(policy(), libc::SCHED_BATCH);
            assert!(set_background(true), "still one");
            assert!(!set_background(false), "an ordinary thread again");
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .expect("the thread's checks");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_recycled_pid_is_not_the_owner() {
        let start = own_start_time();
        assert_ne!(start, 0, "/proc/self/stat has a start time");
        assert!(!process_alive(std::process::id(), start + 1));
    }
}
