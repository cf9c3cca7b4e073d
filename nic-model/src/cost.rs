//! What the emulation itself costs, counted process-wide so that a program (`softverbs learn`)
//! can show it without `perf` or `strace`: the bytes the emulated NIC copies, by kind, and the
//! system calls the soft backend issues, split by whether a NIC thread or a program's thread
//! made them.
//!
//! A byte counter is a relaxed load and store beside the copy it counts, no locked
//! instruction, as the inbox's received counter (docs/decisions.md, "Relaxed received
//! counter"): the copies of one device are made under its device lock, so its counts are
//! exact; two devices of one process copying at the same instant may lose an increment. A
//! system-call counter is an atomic add beside the system call itself. Nothing here is on a
//! path that did not already copy or enter the kernel. The counters only grow; a reader takes
//! two [`snapshot`]s and subtracts ([`Cost::since`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a counted byte copy happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyAt {
    /// The DMA step reading registered memory into the NIC (a gather: SEND, WRITE, READ
    /// response data). A real NIC does this as a DMA read; here the CPU copies.
    Gather,
    /// The emulation writing a payload into a packet it builds (in a ring slot, or a buffer
    /// that later goes to one), and copying a built datagram into a ring slot. A real NIC has
    /// no such step: it puts the bytes on the wire as it reads them.
    Packet,
    /// The DMA step writing a packet's payload into registered memory (a scatter). A real NIC
    /// does this as a DMA write.
    Scatter,
    /// The program copying into or out of registered memory through the MR's `read`/`write`.
    Program,
}

/// Where a counted system call happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syscall {
    /// `futex(FUTEX_WAIT)` on an inbox doorbell: a NIC thread parking.
    FutexWait,
    /// `futex(FUTEX_WAKE)` on an inbox doorbell: a sender waking a parked receiver.
    FutexWake,
    /// The NIC thread's own parker (`park_timeout`: one futex wait, none if a wake-up was
    /// already pending) while it stands by.
    Park,
    /// Waking the NIC thread's parker (`unpark`; at most one futex wake, only when it sleeps).
    Unpark,
    /// `sched_getscheduler`/`sched_setscheduler` of a NIC thread going to the background or
    /// back, each counted.
    Sched,
}

const COPIES: usize = 4;
const SYSCALLS: usize = 5;

static COPIED: [AtomicU64; COPIES] = [const { AtomicU64::new(0) }; COPIES];
/// Rows: made on a program's thread, made on a NIC thread.
static CALLS: [[AtomicU64; SYSCALLS]; 2] = [const { [const { AtomicU64::new(0) }; SYSCALLS] }; 2];

thread_local! {
    static ON_NIC_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a NIC thread: its system calls count as the emulated NIC's.
pub(crate) fn mark_nic_thread() {
    ON_NIC_THREAD.with(|c| c.set(true));
}

/// Counts `n` bytes copied at `at`.
#[inline]
pub(crate) fn copied(at: CopyAt, n: usize) {
    let c = &COPIED[at as usize];
    c.store(c.load(Ordering::Relaxed).wrapping_add(n as u64), Ordering::Relaxed);
}

/// Counts `n` system calls of `kind` made by the calling thread.
#[inline]
pub(crate) fn syscalls(kind: Syscall, n: u64) {
    let row = usize::from(ON_NIC_THREAD.with(Cell::get));
    CALLS[row][kind as usize].fetch_add(n, Ordering::Relaxed);
}

/// The system calls the soft backend made on one kind of thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Syscalls {
    /// `futex` waits on inbox doorbells (parking).
    pub futex_wait: u64,
    /// `futex` wakes of a parked peer's doorbell.
    pub futex_wake: u64,
    /// Parks of the NIC thread's own parker while standing by (each at most one system call).
    pub park: u64,
    /// Wakes of a NIC thread's parker (each at most one system call).
    pub unpark: u64,
    /// Scheduling-policy calls (`sched_getscheduler`, `sched_setscheduler`).
    pub sched: u64,
}

impl Syscalls {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.futex_wait + self.futex_wake + self.park + self.unpark + self.sched
    }

    fn since(&self, earlier: &Syscalls) -> Syscalls {
        Syscalls {
            futex_wait: self.futex_wait - earlier.futex_wait,
            futex_wake: self.futex_wake - earlier.futex_wake,
            park: self.park - earlier.park,
            unpark: self.unpark - earlier.unpark,
            sched: self.sched - earlier.sched,
        }
    }
}

/// The process's counters at one moment ([`snapshot`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Bytes the emulated NIC read from registered memory (its DMA reads).
    pub gathered: u64,
    /// Bytes the emulation copied into packets and ring slots (no real NIC does this).
    pub packet: u64,
    /// Bytes the emulated NIC wrote into registered memory (its DMA writes).
    pub scattered: u64,
    /// Bytes the program copied into or out of registered memory (`MemoryRegion::read`/`write`).
    pub program: u64,
    /// System calls the soft backend made on program threads (inside verbs calls).
    pub program_calls: Syscalls,
    /// System calls the soft backend made on NIC threads.
    pub nic_calls: Syscalls,
}

impl Cost {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Cost) -> Cost {
        Cost {
            gathered: self.gathered - earlier.gathered,
            packet: self.packet - earlier.packet,
            scattered: self.scattered - earlier.scattered,
            program: self.program - earlier.program,
            program_calls: self.program_calls.since(&earlier.program_calls),
            nic_calls: self.nic_calls.since(&earlier.nic_calls),
        }
    }
}

fn calls(row: usize) -> Syscalls {
    let c = |k: Syscall| CALLS[row][k as usize].load(Ordering::Relaxed);
    Syscalls {
        futex_wait: c(Syscall::FutexWait),
        futex_wake: c(Syscall::FutexWake),
        park: c(Syscall::Park),
        unpark: c(Syscall::Unpark),
        sched: c(Syscall::Sched),
    }
}

/// The counters of this process now: every device, every thread, since the process started.
pub fn snapshot() -> Cost {
    let c = |k: CopyAt| COPIED[k as usize].load(Ordering::Relaxed);
    Cost {
        gathered: c(CopyAt::Gather),
        packet: c(CopyAt::Packet),
        scattered: c(CopyAt::Scatter),
        program: c(CopyAt::Program),
        program_calls: calls(0),
        nic_calls: calls(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The byte counters are checked exactly end to end, one device per process
    // (sim/cli/tests/learn.rs, zero-copy): here other tests copy at the same time.
    #[test]
    fn system_calls_count_by_thread_and_subtract() {
        let before = snapshot();
        syscalls(Syscall::FutexWake, 1);
        std::thread::spawn(|| {
            mark_nic_thread();
            syscalls(Syscall::Park, 2);
        })
        .join()
        .unwrap();
        let d = snapshot().since(&before);
        // Other tests in this process may count too: at least ours are there.
        assert!(d.program_calls.futex_wake >= 1);
        assert!(d.nic_calls.park >= 2);
    }
}
