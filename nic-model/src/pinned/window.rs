//! The moving window: while a range of the program's pages is copied and the copy mapped in
//! its place (at registration, and back at deregistration), another thread of the program
//! writing those pages (a neighbour's heap object, `malloc`'s own chunk headers, a NIC
//! thread freeing memory the main thread allocated) would write the old pages after the
//! copy, and its bytes would be lost. So the range is made read-only for the move, and a
//! `SIGSEGV` handler, installed only for it, holds a thread that faults on it until the new
//! pages are in place; the thread's write then runs again, on them. A fault anywhere else
//! goes to the handler that was there before (put back, and the instruction run again).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The range being moved (0, 0: none).
static LO: AtomicUsize = AtomicUsize::new(0);
static HI: AtomicUsize = AtomicUsize::new(0);

/// The `SIGSEGV` action the window replaced (written only under the table's fork lock,
/// before the window opens).
struct Old(UnsafeCell<libc::sigaction>);

// SAFETY: written by the one thread that opens windows (under the fork lock) before the
// handler can run; read by the handler and that thread.
unsafe impl Sync for Old {}

static OLD: Old = Old(UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// Runs `mv` (which copies `lo..lo+len` and maps the copy over it) with the range
/// read-only and writers held until `mv` returns; `prot` is put back if `mv` fails (false).
/// The caller holds the fork lock (one window at a time).
pub(super) fn moving(lo: usize, len: usize, prot: libc::c_int, mv: impl FnOnce() -> bool) -> bool {
    // SAFETY: a handler that only loads atomics, yields and calls sigaction (each
    // async-signal-safe); the old action is saved where the handler finds it.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = held as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGSEGV, &act, OLD.0.get()) != 0 {
            return mv();
        }
    }
    LO.store(lo, Ordering::SeqCst);
    HI.store(lo + len, Ordering::SeqCst);
    // SAFETY: the program's pages, made read-only for the move (reads go on).
    let ro = unsafe { libc::mprotect(lo as *mut libc::c_void, len, libc::PROT_READ) } == 0;
    let moved = mv();
    if !moved && ro {
        // SAFETY: as above: the old protection back on the pages that did not move.
        unsafe { libc::mprotect(lo as *mut libc::c_void, len, prot) };
    }
    HI.store(0, Ordering::SeqCst);
    LO.store(0, Ordering::SeqCst);
    // The action saved above goes back unless the program set one of its own meanwhile
    // (a signal handler installed while the window was open stays the program's).
    // SAFETY: reads the current action, then puts back the one saved above.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        let ours = libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut now) == 0
            && now.sa_sigaction == held as *const () as usize;
        if ours {
            libc::sigaction(libc::SIGSEGV, OLD.0.get(), std::ptr::null_mut());
        }
    }
    moved
}

extern "C" fn held(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let inside = LO.load(Ordering::SeqCst) <= addr && addr < HI.load(Ordering::SeqCst);
    while HI.load(Ordering::SeqCst) != 0 {
        // SAFETY: async-signal-safe.
        unsafe { libc::sched_yield() };
    }
    if !inside {
        // Not ours: the old action back, and the instruction runs again into it.
        // SAFETY: async-signal-safe; the saved action.
        unsafe { libc::sigaction(libc::SIGSEGV, OLD.0.get(), std::ptr::null_mut()) };
    }
}
