//! Runs `softverbs perf` subcommands without the CLI: `cargo run --release --example perf_run -- lat`.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    perf: softverbs::cmd::perf::PerfArgs,
}

fn main() -> std::process::ExitCode {
    softverbs::cmd::perf::run(Cli::parse().perf, &[])
}
