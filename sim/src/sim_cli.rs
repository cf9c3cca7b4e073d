//! `softverbs sim SCENARIO.toml`: run a scenario in the deterministic simulator (being written).

use std::process::ExitCode;

/// Arguments of `softverbs sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {}

/// Run `softverbs sim`.
pub fn main(args: SimArgs) -> ExitCode {
    let _ = args;
    eprintln!("softverbs sim: not implemented yet");
    ExitCode::from(2)
}
