//! `softverbs perf idle`: the CPU time of a connected, idle device over a sleep, after a short
//! ping-pong (it runs `lat` with `--idle-seconds`).

use super::lat::{lat, LatArgs};
use super::runner::Launcher;
use super::{parse_seconds, Common};
use crate::cmd::CliError;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct IdleArgs {
    /// How long to sleep while connected, in seconds (at most 3600).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    pub(super) seconds: f64,
    #[command(flatten)]
    pub(super) common: Common,
}

pub(super) fn idle(me: &Launcher, a: &IdleArgs) -> Result<(), CliError> {
    if !(a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err(CliError::usage("--seconds must be in (0, 3600]"));
    }
    if a.common.peer {
        return Err(CliError::usage("idle has no peer role (it runs lat's)"));
    }
    // A short ping-pong first, so both NIC threads have had work and must go back to sleep.
    let la = LatArgs {
        size: 8,
        iters: 1000,
        warmup: 100,
        runs: 1,
        idle_seconds: a.seconds,
        common: a.common.clone(),
    };
    outln!(
        "softverbs perf idle: connect, 1100 ping-pongs, then sleep {:.1} s and measure CPU time",
        a.seconds
    );
    lat(me, &la).map(|_| ())
}
