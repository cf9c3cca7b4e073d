//! `softverbs perf spin`: latency and idle CPU for several values of `SOFTVERBS_SPIN_US`, each
//! a `lat` run in a child process whose `RESULT` line it reads.

use std::process::Stdio;

use super::runner::{child_failed, device_args, machine, Launcher};
use super::stats::{field, parse_result};
use super::{parse_seconds, Common};
use crate::cmd::CliError;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct SpinArgs {
    /// SOFTVERBS_SPIN_US values to try.
    #[arg(long, value_delimiter = ',', default_value = "0,10,50,200")]
    pub(super) values: Vec<u64>,
    /// Latency iterations per run.
    #[arg(short = 'n', long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) iters: u64,
    /// Latency runs per value.
    #[arg(short = 'r', long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) runs: u64,
    /// Idle seconds per value (at most 3600).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    pub(super) seconds: f64,
    #[command(flatten)]
    pub(super) common: Common,
}

pub(super) fn spin(me: &Launcher, a: &SpinArgs) -> Result<(), CliError> {
    if a.common.pcap.is_some() {
        return Err(CliError::usage(
            "--pcap: perf spin runs perf lat many times; capture one run with perf lat --pcap FILE",
        ));
    }
    outln!("softverbs perf spin: SOFTVERBS_SPIN_US against 8-byte latency and idle CPU");
    outln!("machine: {}", machine());
    outln!("| SOFTVERBS_SPIN_US | median half-RTT (us) | p99 (us) | idle CPU, % of a core (initiator / peer) |");
    outln!("|---|---|---|---|");
    for &v in &a.values {
        let mut args = vec!["lat".to_string(), "-n".into(), a.iters.to_string()];
        args.extend([
            "-r".into(),
            a.runs.to_string(),
            "--idle-seconds".into(),
            a.seconds.to_string(),
        ]);
        args.extend(device_args(&a.common));
        if let Some(f) = &a.common.fabric {
            args.extend(["--fabric".into(), f.display().to_string()]);
        }
        let out = me
            .command(&args)?
            .env("SOFTVERBS_SPIN_US", v.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running lat: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let kv = parse_result(&text, "lat")
            .ok_or_else(|| child_failed(&format!("lat with SOFTVERBS_SPIN_US={v}"), &out))?;
        let g = |k: &str| field(&kv, k).unwrap_or(f64::NAN);
        outln!(
            "| {v} | {:.3} | {:.3} | {:.3} / {:.3} |",
            g("median_us"),
            g("p99_us"),
            g("idle_cpu_pct"),
            g("peer_idle_cpu_pct")
        );
        outln!(
            "RESULT spin spin_us={v} median_us={:.3} p99_us={:.3} idle_cpu_pct={:.4} peer_idle_cpu_pct={:.4}",
            g("median_us"),
            g("p99_us"),
            g("idle_cpu_pct"),
            g("peer_idle_cpu_pct")
        );
    }
    Ok(())
}
