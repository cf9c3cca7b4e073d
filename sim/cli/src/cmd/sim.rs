//! `softverbs sim SCENARIO.toml`: run a scenario in the deterministic simulator and print what
//! happened (see `docs/simulator.md`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use softverbs_sim::world::scenario::{self, RunOptions, Scenario};

use super::CliError;

/// What `softverbs sim` does besides running one scenario.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum SimAction {
    /// Run a scenario once per value of a link parameter and compare the runs (goodput
    /// against loss: go-back-N's cliff).
    Sweep(super::sweep::SweepArgs),
}

/// Arguments of `softverbs sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// The scenario file (TOML; samples in sim/scenarios/).
    #[arg(required = true)]
    pub scenario: Option<PathBuf>,
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
    /// events per wall-clock second, and wall time per event.
    #[arg(long)]
    pub stats: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Draw the run's packet ladder in the terminal: an arrow per packet, drops, timers,
    /// RNR waits and completions (docs/learn/ladders.md).
    #[arg(long)]
    pub ladder: bool,
    /// Write the run's packet ladder as an SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Print the results tables (completion-time slowdown by flow size, pause time per port,
    /// time series) even without a `[workload]` (which prints them anyway).
    #[arg(long)]
    pub results: bool,
    /// Sample switch queue lengths and host transmit rates every this many µs of virtual time
    /// (overrides the `[workload]` table's `sample_us`).
    #[arg(long, value_name = "US")]
    pub sample_us: Option<u64>,
    /// Write the report as JSON to FILE (`-`: standard output, instead of the summary).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write SVG plots of the results into DIR: slowdown.svg, queues.svg, rates.svg, pauses.svg
    /// (those the run has data for).
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Space the ladder's rows by time (a longer gap, more rows, labelled with its length)
    /// rather than evenly, as `demo --time-scale` does; with --ladder or --svg.
    #[arg(long)]
    pub time_scale: bool,
}

/// Run `softverbs sim`: exit 0 if the workload completed as the scenario expects, 1 if not, 2
/// if the scenario could not be run.
pub fn main(args: SimArgs, action: Option<SimAction>) -> ExitCode {
    if let Some(SimAction::Sweep(s)) = action {
        return match super::sweep::main(&s, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => e.report("sim sweep"),
        };
    }
    let Some(path) = args.scenario.clone() else {
        let _ = writeln!(std::io::stderr(), "softverbs sim: which scenario? (a TOML file)");
        return ExitCode::from(2);
    };
    let sc = match Scenario::load(&path) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "softverbs sim: {e}");
            return ExitCode::from(2);
        }
    };
    if args.time_scale && !args.ladder && args.svg.is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "softverbs sim: --time-scale spaces a ladder's rows: give --ladder or --svg FILE too"
        );
        return ExitCode::from(2);
    }
    let seed = args.seed.unwrap_or(sc.seed);
    let json_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    if let Err(e) = if json_stdout { Ok(()) } else { writeln!(std::io::stdout(), "seed {seed}") } {
        return super::output_error(e).report("sim");
    }
    let opts = RunOptions {
        seed: Some(seed),
        pcap: args.pcap.clone(),
        pcap_drops: args.pcap_drops,
        trace: args.trace.clone(),
        progress: !args.quiet,
        packets: args.ladder || args.svg.is_some(),
        sample_us: args.sample_us,
    };
    match scenario::run(&sc, &opts) {
        Ok(report) => {
            let outputs = super::sim_results::Outputs {
                results: args.results,
                stats: args.stats,
                json: args.json.as_deref(),
                plots: args.plots.as_deref(),
            };
            if let Err(e) = super::sim_results::write(&outputs, &sc, &report, json_stdout) {
                return e.report("sim");
            }
            if let Some(run) = &report.packets {
                let title = format!("softverbs sim {}, seed {seed}: packet ladder", sc.name);
                let mut l = softverbs_sim::ladder::from_sim::ladder(&title, run);
                l.time_scale = args.time_scale;
                if args.ladder {
                    let mut out = std::io::stdout().lock();
                    if let Err(e) =
                        writeln!(out).and_then(|()| softverbs_sim::ladder::print(&l, &mut out))
                    {
                        return super::output_error(e).report("sim");
                    }
                }
                if let Some(path) = &args.svg {
                    if let Err(e) = softverbs_sim::ladder::write_svg(&l, path) {
                        return CliError::failed(e).report("sim");
                    }
                }
            }
            if report.passed {
                ExitCode::SUCCESS
            } else {
                let _ = writeln!(
                    std::io::stderr(),
                    "softverbs sim: reproduce with: softverbs sim {} --seed {seed}",
                    path.display()
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
