//! The per-post timestamps of the perftest-style tests, read as perftest reads them: perftest's
//! `get_cycles()` is the CPU's time-stamp counter (`rdtsc` on x86-64), and so is UCX's
//! `ucs_get_time()`, not `clock_gettime`. Where the counter runs at a constant rate
//! (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`) it is read directly and converted with
//! a rate calibrated against the monotonic clock at the start; elsewhere the monotonic clock
//! is read (`Instant`). Only the per-iteration records use it; a run's elapsed time is always
//! the monotonic clock's.

use std::time::{Duration, Instant};

/// A clock of nanoseconds since its start.
pub(super) struct Stamp {
    t0: Instant,
    /// The counter at `t0`, and nanoseconds per tick as a 32.32 fixed-point number; None: read
    /// `t0.elapsed()`.
    tsc: Option<(u64, u64)>,
}

impl Stamp {
    /// Starts the clock (spending about 5 ms to calibrate the counter the first time).
    pub(super) fn start() -> Stamp {
        let tsc = constant_tsc().then(calibrate).flatten();
        match tsc {
            Some(q) => {
                let (t0, c0) = (Instant::now(), ticks());
                Stamp { t0, tsc: Some((c0, q)) }
            }
            None => Stamp { t0: Instant::now(), tsc: None },
        }
    }

    /// Nanoseconds since the start.
    #[inline]
    pub(super) fn ns(&self) -> u64 {
        match self.tsc {
            Some((c0, q)) => ((u128::from(ticks().wrapping_sub(c0)) * u128::from(q)) >> 32) as u64,
            None => self.t0.elapsed().as_nanos() as u64,
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn ticks() -> u64 {
    0
}

/// Whether the counter ticks at one rate whatever the CPU's frequency and sleep states.
fn constant_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
                let has = |f: &str| l.split_whitespace().any(|w| w == f);
                has("constant_tsc") && has("nonstop_tsc")
            })
        })
}

/// Nanoseconds per tick (32.32 fixed point) over a 5 ms window; None if the counter does not
/// move forward with the clock.
fn calibrate() -> Option<u64> {
    let (i0, c0) = (Instant::now(), ticks());
    std::thread::sleep(Duration::from_millis(5));
    let (i1, c1) = (Instant::now(), ticks());
    let (ns, n) = ((i1 - i0).as_nanos(), u128::from(c1.checked_sub(c0)?));
    (n > 0).then(|| ((ns << 32) / n) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_keeps_pace_with_the_monotonic_clock() {
        let s = Stamp::start();
        let i0 = Instant::now();
        let a = s.ns();
        std::thread::sleep(Duration::from_millis(30));
        let b = s.ns();
        let real = i0.elapsed().as_nanos() as u64;
        assert!(b > a, "it moves forward");
        // Within 10 % of the clock over 30 ms (the calibration window is 5 ms).
        let d = b - a;
        assert!(d.abs_diff(real) < real / 10, "stamp {d} ns against the clock's {real} ns");
    }
}
