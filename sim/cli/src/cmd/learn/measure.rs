//! What `softverbs learn` measures inside one process, from the kernel's own per-thread books
//! and softverbs' counters ([`nic_model::cost`]): each thread's CPU time (its thread CPU
//! clock, nanoseconds), its user/kernel split (`getrusage(
//! RUSAGE_THREAD)` for the calling thread), its context switches (`status`) and its
//! read/write system calls and bytes (`io`: `syscr`, `syscw`, `rchar`, `wchar`). A process's
//! snapshot travels between the two processes of a lesson as one line of `key=value` pairs.

use nic_model::cost::{self, Cost, Syscalls};

/// One thread's books at one moment (differences are taken with [`ThreadSample::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSample {
    /// CPU time, user and kernel, in nanoseconds (schedstat's first field).
    pub cpu_ns: u64,
    /// Of which in the kernel, in nanoseconds (only for a thread that sampled itself; else
    /// from the tick-based `stat` fields).
    pub sys_ns: u64,
    /// Voluntary context switches (the thread blocked).
    pub vcsw: u64,
    /// Involuntary ones (the scheduler took the CPU away).
    pub ivcsw: u64,
    /// read-family system calls the kernel counted.
    pub syscr: u64,
    /// write-family system calls the kernel counted.
    pub syscw: u64,
    /// Bytes those reads returned (the kernel copied them out).
    pub rchar: u64,
    /// Bytes those writes took (the kernel copied them in).
    pub wchar: u64,
}

impl ThreadSample {
    /// What happened between `earlier` and this sample. The kernel share is an estimate
    /// (the kernel splits a thread's exact CPU time by the ticks it sampled in each mode), so
    /// it is kept within the CPU time.
    pub fn since(&self, e: &ThreadSample) -> ThreadSample {
        let cpu_ns = self.cpu_ns.saturating_sub(e.cpu_ns);
        ThreadSample {
            cpu_ns,
            sys_ns: self.sys_ns.saturating_sub(e.sys_ns).min(cpu_ns),
            vcsw: self.vcsw.saturating_sub(e.vcsw),
            ivcsw: self.ivcsw.saturating_sub(e.ivcsw),
            syscr: self.syscr.saturating_sub(e.syscr),
            syscw: self.syscw.saturating_sub(e.syscw),
            rchar: self.rchar.saturating_sub(e.rchar),
            wchar: self.wchar.saturating_sub(e.wchar),
        }
    }

    /// The sum of two threads' books.
    pub fn plus(&self, o: &ThreadSample) -> ThreadSample {
        ThreadSample {
            cpu_ns: self.cpu_ns + o.cpu_ns,
            sys_ns: self.sys_ns + o.sys_ns,
            vcsw: self.vcsw + o.vcsw,
            ivcsw: self.ivcsw + o.ivcsw,
            syscr: self.syscr + o.syscr,
            syscw: self.syscw + o.syscw,
            rchar: self.rchar + o.rchar,
            wchar: self.wchar + o.wchar,
        }
    }
}

fn task_file(tid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/{file}")).unwrap_or_default()
}

fn field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim_start_matches(':').trim()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The kernel's ticks per second for `stat`'s times (USER_HZ, 100 on Linux).
const USER_HZ: u64 = 100;

/// The `io` file of thread `tid`, read with one `read(2)` (the file is far below 4 KiB), and
/// how many bytes that read returned.
fn io_file(tid: u32) -> (String, usize) {
    let mut buf = [0u8; 4096];
    let n = std::fs::File::open(format!("/proc/self/task/{tid}/io"))
        .and_then(|mut f| std::io::Read::read(&mut f, &mut buf))
        .unwrap_or(0);
    (String::from_utf8_lossy(&buf[..n]).into_owned(), n)
}

/// Thread `tid`'s books apart from `io`.
fn thread_without_io(tid: u32) -> ThreadSample {
    let cpu_ns = cpu_ns(tid);
    let stat = task_file(tid, "stat");
    let stime = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].split_whitespace().nth(12))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let status = task_file(tid, "status");
    ThreadSample {
        cpu_ns,
        sys_ns: stime * (1_000_000_000 / USER_HZ),
        vcsw: field(&status, "voluntary_ctxt_switches"),
        ivcsw: field(&status, "nonvoluntary_ctxt_switches"),
        ..ThreadSample::default()
    }
}

fn with_io(s: ThreadSample, io: &str) -> ThreadSample {
    ThreadSample {
        syscr: field(io, "syscr"),
        syscw: field(io, "syscw"),
        rchar: field(io, "rchar"),
        wchar: field(io, "wchar"),
        ..s
    }
}

/// Thread `tid` of this process, as the kernel books it.
pub fn thread(tid: u32) -> ThreadSample {
    let s = thread_without_io(tid);
    with_io(s, &io_file(tid).0)
}

/// The calling thread's id (`gettid`).
pub fn my_tid() -> u32 {
    // /proc/thread-self names the calling thread's /proc/self/task/<tid>.
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()))
        .unwrap_or_else(std::process::id)
}

/// The calling thread's kernel time in nanoseconds (`getrusage(RUSAGE_THREAD)`), 0 if unknown.
fn my_sys_ns() -> u64 {
    #[repr(C)]
    struct Timeval {
        tv_sec: i64,
        tv_usec: i64,
    }
    #[repr(C)]
    struct Rusage {
        utime: Timeval,
        stime: Timeval,
        rest: [i64; 14],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    const RUSAGE_THREAD: i32 = 1;
    let mut r = Rusage {
        utime: Timeval { tv_sec: 0, tv_usec: 0 },
        stime: Timeval { tv_sec: 0, tv_usec: 0 },
        rest: [0; 14],
    };
    // SAFETY: getrusage writes one struct rusage (two timevals and 14 longs on 64-bit Linux)
    // to a valid pointer.
    if unsafe { getrusage(RUSAGE_THREAD, &mut r) } != 0 {
        return 0;
    }
    r.stime.tv_sec as u64 * 1_000_000_000 + r.stime.tv_usec as u64 * 1000
}

/// The calling thread's books, its kernel time from `getrusage` (finer than `stat`'s ticks).
/// Reading `/proc` is itself a `read(2)` the kernel books for this thread, so the start of a
/// measurement ([`Snap::take`]) reads `io` last and counts that one read as already done, and
/// the end ([`Snap::take_end`]) reads `io` first: the difference is the work alone.
fn me(start: bool) -> ThreadSample {
    let tid = my_tid();
    if start {
        // The CPU clock last, so that reading the rest is not counted as the work's.
        let s = ThreadSample { sys_ns: my_sys_ns(), ..thread_without_io(tid) };
        let (io, n) = io_file(tid);
        let s = with_io(s, &io);
        ThreadSample { syscr: s.syscr + 1, rchar: s.rchar + n as u64, cpu_ns: cpu_ns(tid), ..s }
    } else {
        // The CPU clock and `io` first, for the same reason.
        let cpu = cpu_ns(tid);
        let (io, _) = io_file(tid);
        let sys_ns = my_sys_ns();
        with_io(ThreadSample { sys_ns, cpu_ns: cpu, ..thread_without_io(tid) }, &io)
    }
}

/// Thread `tid`'s CPU time in nanoseconds, from its thread CPU clock (`clock_gettime` with
/// the clock id `pthread_getcpuclockid` gives a thread: `(~tid << 3) | 6` on Linux), which
/// counts up to this instant even while the thread runs; schedstat's first field, which lags
/// a running thread by up to a scheduler tick, where the clock cannot be read.
pub fn cpu_ns(tid: u32) -> u64 {
    if let Some(ns) = crate::cmd::cpu_clock_ns((!(tid as i32) << 3) | 6) {
        return ns;
    }
    task_file(tid, "schedstat").split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The calling thread's CPU time in nanoseconds.
pub fn my_cpu_ns() -> u64 {
    cpu_ns(my_tid())
}

/// The emulated NICs' threads of this process: those named `<device>-nic` (the soft backend
/// names each device's NIC thread so; `comm` keeps 15 bytes).
pub fn nic_threads() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut v: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|tid| task_file(*tid, "comm").trim_end().ends_with("-nic"))
        .collect();
    v.sort();
    v
}

/// The emulated NIC thread of device `name` in this process (`<name>-nic`, cut to the 15
/// bytes `comm` keeps), if there is one (a real NIC has none).
pub fn nic_thread_of(name: &str) -> Option<u32> {
    let comm: String = format!("{name}-nic").chars().take(15).collect();
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .find(|tid| task_file(*tid, "comm").trim_end() == comm)
}

/// One process's books: the calling (program) thread, its NIC threads together, and the
/// soft backend's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snap {
    /// The program's thread that took the snapshot.
    pub program: ThreadSample,
    /// Every emulated NIC thread of the process.
    pub nic: ThreadSample,
    /// softverbs' own counters.
    pub cost: Cost,
}

impl Snap {
    /// Now, from the calling thread, as the start of a measurement.
    pub fn take() -> Snap {
        let nic = nic_threads().iter().fold(ThreadSample::default(), |a, t| a.plus(&thread(*t)));
        Snap { program: me(true), nic, cost: cost::snapshot() }
    }

    /// Now, from the calling thread, as the end of a measurement that began with [`Snap::take`].
    pub fn take_end() -> Snap {
        let program = me(false);
        let nic = nic_threads().iter().fold(ThreadSample::default(), |a, t| a.plus(&thread(*t)));
        Snap { program, nic, cost: cost::snapshot() }
    }

    /// What happened between `e` and this snapshot.
    pub fn since(&self, e: &Snap) -> Snap {
        Snap {
            program: self.program.since(&e.program),
            nic: self.nic.since(&e.nic),
            cost: self.cost.since(&e.cost),
        }
    }

    /// The sum of two processes' books (the initiator's and the target's).
    pub fn plus(&self, o: &Snap) -> Snap {
        let c = |a: &Syscalls, b: &Syscalls| Syscalls {
            futex_wait: a.futex_wait + b.futex_wait,
            futex_wake: a.futex_wake + b.futex_wake,
            park: a.park + b.park,
            unpark: a.unpark + b.unpark,
            sched: a.sched + b.sched,
        };
        Snap {
            program: self.program.plus(&o.program),
            nic: self.nic.plus(&o.nic),
            cost: Cost {
                gathered: self.cost.gathered + o.cost.gathered,
                packet: self.cost.packet + o.cost.packet,
                scattered: self.cost.scattered + o.cost.scattered,
                program: self.cost.program + o.cost.program,
                program_calls: c(&self.cost.program_calls, &o.cost.program_calls),
                nic_calls: c(&self.cost.nic_calls, &o.cost.nic_calls),
            },
        }
    }

    /// The line form, `k=v ...`, for the other process.
    pub fn to_line(self) -> String {
        self.values().iter().map(|v| v.to_string()).collect::<Vec<_>>().join(" ")
    }

    /// Parses [`Snap::to_line`].
    pub fn from_line(line: &str) -> Result<Snap, String> {
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse().map_err(|_| format!("a number in the snapshot {line:?}")))
            .collect::<Result<_, _>>()?;
        if v.len() != 2 * 8 + 4 + 2 * 5 {
            return Err(format!("a snapshot of {} numbers: {line:?}", v.len()));
        }
        let t = |s: &[u64]| ThreadSample {
            cpu_ns: s[0],
            sys_ns: s[1],
            vcsw: s[2],
            ivcsw: s[3],
            syscr: s[4],
            syscw: s[5],
            rchar: s[6],
            wchar: s[7],
        };
        let c = |s: &[u64]| Syscalls {
            futex_wait: s[0],
            futex_wake: s[1],
            park: s[2],
            unpark: s[3],
            sched: s[4],
        };
        Ok(Snap {
            program: t(&v[0..8]),
            nic: t(&v[8..16]),
            cost: Cost {
                gathered: v[16],
                packet: v[17],
                scattered: v[18],
                program: v[19],
                program_calls: c(&v[20..25]),
                nic_calls: c(&v[25..30]),
            },
        })
    }

    fn values(&self) -> Vec<u64> {
        let t = |s: &ThreadSample| {
            [s.cpu_ns, s.sys_ns, s.vcsw, s.ivcsw, s.syscr, s.syscw, s.rchar, s.wchar]
        };
        let c = |s: &Syscalls| [s.futex_wait, s.futex_wake, s.park, s.unpark, s.sched];
        let k = &self.cost;
        let mut v = Vec::with_capacity(30);
        v.extend(t(&self.program));
        v.extend(t(&self.nic));
        v.extend([k.gathered, k.packet, k.scattered, k.program]);
        v.extend(c(&k.program_calls));
        v.extend(c(&k.nic_calls));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_as_a_line_and_counts_this_threads_cpu() {
        let a = Snap::take();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = Snap::take_end();
        let d = b.since(&a);
        assert!(d.program.cpu_ns > 0, "the loop used CPU: {d:?}");
        assert_eq!((d.program.syscr, d.program.rchar), (0, 0), "measuring reads nothing: {d:?}");
        assert_eq!(Snap::from_line(&b.to_line()), Ok(b));
        assert!(Snap::from_line("1 2 3").is_err());
    }
}
