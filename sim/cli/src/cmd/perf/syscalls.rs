//! `softverbs perf syscalls`: system calls per ping-pong iteration in both processes, counted
//! with `perf stat` or `strace -f -c` over a large and a small `lat` run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::runner::{child_failed, device_args, Launcher};
use super::Common;
use crate::cmd::CliError;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct SyscallArgs {
    /// Iterations of the large run.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    pub(super) iters: u64,
    /// Iterations of the small run whose count is subtracted (setup and teardown).
    #[arg(long, default_value_t = 10_000)]
    pub(super) base: u64,
    /// Keep the counter's summaries in this directory (by default they are written to the
    /// temporary directory and removed once read).
    #[arg(long)]
    pub(super) out_dir: Option<PathBuf>,
    /// How to count: `perf` (`perf stat -e raw_syscalls:sys_enter`, which does not slow the
    /// processes down), `strace` (`strace -f -c`, which does: each counted call stops its
    /// thread for the tracer), or `auto` (perf if it works here, else strace).
    #[arg(long, default_value = "auto", value_parser = ["auto", "perf", "strace"])]
    pub(super) counter: String,
    #[command(flatten)]
    pub(super) common: Common,
}

fn strace_total(path: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    // The summary's last line: "100.00  secs  usecs/call  calls  [errors]  total".
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with("total"))
        .ok_or_else(|| format!("no total line in {}", path.display()))?;
    line.split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("cannot parse the strace total {line:?}"))
}

/// The total of a `perf stat -x, -e raw_syscalls:sys_enter -o FILE` run.
fn perf_stat_total(path: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    // CSV: "count,unit,event,...", after comment lines.
    let line = text
        .lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .ok_or_else(|| format!("no raw_syscalls line in {}", path.display()))?;
    line.split(',')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("cannot parse the perf stat count {line:?}"))
}

/// Whether `perf stat` can count system calls here (installed, and allowed to trace).
fn perf_stat_works() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(super) fn syscalls(me: &Launcher, a: &SyscallArgs) -> Result<(), CliError> {
    if a.base >= a.iters {
        return Err(CliError::usage(format!(
            "--base {} must be smaller than --iters {}",
            a.base, a.iters
        )));
    }
    let use_perf = match a.counter.as_str() {
        "perf" => true,
        "strace" => false,
        _ => perf_stat_works(),
    };
    let counter = if use_perf { "perf" } else { "strace" };
    outln!("counting with {counter}");
    let keep = a.out_dir.is_some();
    let out_dir = a.out_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut totals = Vec::new();
    for n in [a.base, a.iters] {
        let file = out_dir.join(format!("softverbs-{counter}-{}-{n}.txt", std::process::id()));
        let mut args = vec!["lat".to_string(), "-n".into(), n.to_string()];
        args.extend(["-w".into(), "0".into(), "-r".into(), "1".into()]);
        args.extend(device_args(&a.common));
        if let Some(f) = &a.common.fabric {
            args.extend(["--fabric".into(), f.display().to_string()]);
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = if use_perf {
            let mut c = Command::new("perf");
            c.args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o"]).arg(&file).arg("--");
            c
        } else {
            let mut c = Command::new("strace");
            c.args(["-f", "-c", "-o"]).arg(&file);
            c
        };
        let out = cmd.arg(exe).args(&me.prefix).args(&args).stdin(Stdio::null()).output().map_err(
            |e| format!("running {counter} (apt-get install -y linux-perf strace): {e}"),
        )?;
        if !out.status.success() {
            return Err(child_failed(&format!("{counter} run of {n} iterations"), &out));
        }
        let total = if use_perf { perf_stat_total(&file) } else { strace_total(&file) };
        if !keep {
            let _ = std::fs::remove_file(&file);
        }
        let total = total?;
        let kept = if keep { format!(" ({})", file.display()) } else { String::new() };
        outln!("  {n:>7} iterations: {total} system calls in the whole process tree{kept}");
        totals.push(total);
    }
    let per = (totals[1] as f64 - totals[0] as f64) / (a.iters - a.base) as f64;
    outln!(
        "system calls per ping-pong iteration (both processes, all threads): {per:.5} = ({} - {}) / ({} - {})",
        totals[1], totals[0], a.iters, a.base
    );
    outln!(
        "RESULT syscalls iters={} base={} total={} base_total={} per_iter={per:.6} counter={counter}",
        a.iters, a.base, totals[1], totals[0]
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_total_parses() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let f = dir.path().join("s.txt");
        std::fs::write(
            &f,
            "% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n 50.00    0.000010           1        10         2 futex\n------ ----------- ----------- --------- --------- ----------------\n100.00    0.000020           1       123         4 total\n",
        )
        .expect("write");
        assert_eq!(strace_total(&f), Ok(123));
    }
}
