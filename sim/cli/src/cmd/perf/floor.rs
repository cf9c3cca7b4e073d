//! `softverbs perf floor`: two processes bounce one counter through one shared page, spinning:
//! the floor under any shared-memory transport on this machine.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use softverbs_sim::peer::Parent;

use super::runner::{machine, run_dir, Launcher, HANDSHAKE, PHASE};
use super::stats::{iterations, median, us, Dist};
use crate::cmd::CliError;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct FloorArgs {
    /// Measured iterations per run.
    #[arg(short = 'n', long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) iters: u64,
    /// Unmeasured iterations first.
    #[arg(short = 'w', long, default_value_t = 100_000)]
    pub(super) warmup: u64,
    /// Runs.
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) runs: u64,
    /// Internal: the shared page (peer only).
    #[arg(long, hide = true)]
    pub(super) page: Option<PathBuf>,
    /// Directory of the shared page [default: $SOFTVERBS_FABRIC, else a fresh one under
    /// /dev/shm, removed at the end]. The floor opens no device, so it takes no -d or -g.
    #[arg(long, value_name = "DIR")]
    pub(super) fabric: Option<PathBuf>,
    /// Internal: run as the peer process.
    #[arg(long, hide = true)]
    pub(super) peer: bool,
}

/// One shared page, mapped from a file.
struct SharedPage {
    ptr: *mut u8,
    _file: File,
}

const PAGE: usize = 4096;

impl SharedPage {
    fn map(path: &Path, create: bool) -> Result<SharedPage, String> {
        extern "C" {
            fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
                -> *mut u8;
        }
        const PROT_READ_WRITE: i32 = 0x1 | 0x2;
        const MAP_SHARED: i32 = 0x1;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        if create {
            file.set_len(PAGE as u64).map_err(|e| format!("sizing {}: {e}", path.display()))?;
        }
        // SAFETY: maps PAGE bytes of a file of at least PAGE bytes, shared, at an address the
        // kernel chooses; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            mmap(std::ptr::null_mut(), PAGE, PROT_READ_WRITE, MAP_SHARED, file.as_raw_fd(), 0)
        };
        if ptr as isize == -1 || ptr.is_null() {
            return Err(format!("mmap {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        Ok(SharedPage { ptr, _file: file })
    }

    fn counter(&self) -> &AtomicU64 {
        // SAFETY: the mapping is PAGE bytes, page aligned, alive as long as `self`, and only
        // ever accessed through atomics by both processes.
        unsafe { &*(self.ptr as *const AtomicU64) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        extern "C" {
            fn munmap(addr: *mut u8, len: usize) -> i32;
        }
        // SAFETY: unmaps exactly the mapping made in `map`; no reference outlives `self`.
        unsafe { munmap(self.ptr, PAGE) };
    }
}

/// Spin until the counter reaches `want` (or `stop`); bounded by `deadline`.
fn wait_for(c: &AtomicU64, want: u64, deadline: Instant) -> Result<u64, String> {
    let mut spins = 0u32;
    loop {
        let v = c.load(Ordering::Acquire);
        if v >= want {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(65536) && Instant::now() >= deadline {
            return Err("timed out in the shared-memory ping-pong".into());
        }
        // No PAUSE, as in the verbs ping-pong's poll loop (`poll_some`).
    }
}

const FLOOR_STOP: u64 = u64::MAX;

pub(super) fn floor(me: &Launcher, a: &FloorArgs) -> Result<f64, CliError> {
    if a.iters == 0 || a.runs == 0 {
        return Err(CliError::usage("iterations and runs must be positive"));
    }
    iterations(a.iters, a.runs, a.warmup)?;
    let dir = run_dir(a.fabric.as_deref())?;
    let path = dir.path().join(format!("perf-floor-{}.page", std::process::id()));
    let page = SharedPage::map(&path, true)?;
    let c = page.counter();
    c.store(0, Ordering::Release);
    let extra = vec!["--page".into(), path.display().to_string()];
    let mut peer = me.spawn_without_device("floor", dir.path(), &extra)?;
    peer.expect("READY", HANDSHAKE)?;
    outln!(
        "softverbs perf floor: two processes bounce one counter through one shared page (spinning)"
    );
    outln!("machine: {}", machine());
    let mut v = 0u64;
    let mut step = |deadline: Instant| -> Result<(), String> {
        c.store(v + 1, Ordering::Release);
        v = wait_for(c, v + 2, deadline)?;
        Ok(())
    };
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.warmup {
        step(deadline)?;
    }
    let mut run_medians = Vec::new();
    let mut all = Vec::new();
    for r in 0..a.runs {
        let deadline = Instant::now() + PHASE;
        let mut samples = Vec::with_capacity(a.iters as usize);
        let t_run = Instant::now();
        for _ in 0..a.iters {
            let t0 = Instant::now();
            step(deadline)?;
            samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
        }
        let mean = t_run.elapsed().as_nanos() as f64 / a.iters as f64 / 2.0;
        all.extend_from_slice(&samples);
        let d = Dist::of(&mut samples);
        run_medians.push(d.p50);
        outln!("{}", d.run_line(r + 1, mean));
    }
    c.store(FLOOR_STOP, Ordering::Release);
    let d = Dist::of(&mut all);
    let med = median(&run_medians);
    outln!(
        "half round trip (us): median of run medians {}  min {}  p99 {}  max {}",
        us(med),
        us(d.min),
        us(d.p99),
        us(d.max)
    );
    outln!(
        "RESULT floor iters={} runs={} median_us={} p99_us={}",
        a.iters,
        a.runs,
        us(med),
        us(d.p99)
    );
    peer.finish(HANDSHAKE)?;
    drop(page);
    let _ = std::fs::remove_file(&path);
    Ok(med)
}

pub(super) fn floor_peer(a: &FloorArgs) -> Result<(), CliError> {
    let mut parent = Parent::stdio();
    let path = a.page.clone().ok_or("the floor peer needs --page")?;
    let page = SharedPage::map(&path, false)?;
    let c = page.counter();
    parent.say("READY")?;
    let mut v = 1u64;
    // Bounded: the parent stops us with FLOOR_STOP, or we give up after PHASE of silence.
    loop {
        let got = wait_for(c, v, Instant::now() + PHASE)?;
        if got == FLOOR_STOP {
            return Ok(());
        }
        c.store(got + 1, Ordering::Release);
        v = got + 2;
    }
}
