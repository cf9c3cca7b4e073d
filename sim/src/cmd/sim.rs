//! `softverbs sim SCENARIO.toml`: run a scenario in the deterministic simulator and print what
//! happened (see `docs/simulator.md`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::world::scenario::{self, RunOptions, Scenario};

/// Arguments of `softverbs sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// The scenario file (TOML; samples in sim/scenarios/).
    pub scenario: PathBuf,
    /// The seed (default: the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write every delivered datagram to this pcap file (Wireshark decodes it as RRoCE).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Also capture dropped datagrams, at the time they were dropped.
    #[arg(long, requires = "pcap")]
    pub pcap_drops: bool,
    /// Write the event trace here, one record a line, with its hash last.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Also print how fast it simulated: simulated packets (datagrams over one link) and
    /// events per wall-clock second.
    #[arg(long)]
    pub stats: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Run `softverbs sim`: exit 0 if the workload completed as the scenario expects, 1 if not, 2
/// if the scenario could not be run.
pub fn main(args: SimArgs) -> ExitCode {
    let sc = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "softverbs sim: {e}");
            return ExitCode::from(2);
        }
    };
    let seed = args.seed.unwrap_or(sc.seed);
    if let Err(e) = writeln!(std::io::stdout(), "seed {seed}") {
        return super::output_error(e).report("sim");
    }
    let opts = RunOptions {
        seed: Some(seed),
        pcap: args.pcap.clone(),
        pcap_drops: args.pcap_drops,
        trace: args.trace.clone(),
        progress: !args.quiet,
    };
    match scenario::run(&sc, &opts) {
        Ok(report) => {
            let mut out = std::io::stdout().lock();
            let printed = report.write_summary(&mut out).and_then(|()| {
                if args.stats {
                    report.write_stats(&mut out)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = printed {
                return super::output_error(e).report("sim");
            }
            drop(out);
            if report.passed {
                ExitCode::SUCCESS
            } else {
                let _ = writeln!(
                    std::io::stderr(),
                    "softverbs sim: reproduce with: softverbs sim {} --seed {seed}",
                    args.scenario.display()
                );
                ExitCode::from(1)
            }
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "softverbs sim: {e}");
            ExitCode::from(2)
        }
    }
}
