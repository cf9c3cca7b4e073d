//! `softverbs perf`: benchmarks of the soft backend (being written).

use std::process::ExitCode;

/// Arguments of `softverbs perf`.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {}

/// Run `softverbs perf`.
pub fn main(args: PerfArgs) -> ExitCode {
    let _ = args;
    eprintln!("softverbs perf: not implemented yet");
    ExitCode::from(2)
}
