//! The `softverbs` command-line tool.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use nic_model::soft::Soft;
use softverbs_sim::demo;

#[derive(Parser)]
#[command(
    name = "softverbs",
    version,
    about = "A userspace RDMA NIC emulator: verbs, RC transport and shared-memory wires"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Two NICs exchange a SEND, an RDMA WRITE, an RDMA READ, a compare-and-swap and a
    /// fetch-and-add, printing every packet, completion and the bytes that landed.
    Demo {
        /// Run both NICs in this process over the in-process wire.
        #[arg(long)]
        in_process: bool,
        /// The shared-memory fabric directory (default: $SOFTVERBS_FABRIC or /dev/shm/softverbs-<uid>).
        #[arg(long)]
        fabric: Option<PathBuf>,
        /// Internal: run as the demo's target process.
        #[arg(long, hide = true)]
        target: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Demo { in_process, fabric, target } => {
            if target {
                let soft = match Soft::shared_memory(fabric.as_deref()) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("softverbs demo target: {e}");
                        return ExitCode::from(2);
                    }
                };
                let ctx = match soft.open("softverbs0") {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("softverbs demo target: {e}");
                        return ExitCode::from(2);
                    }
                };
                let stdin = std::io::stdin();
                let mut input = stdin.lock();
                let mut output = std::io::stdout();
                return match demo::run_target(&ctx, &mut input, &mut output) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("softverbs demo target: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            let opts = demo::DemoOpts { in_process, fabric };
            match demo::run(&opts, &mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("softverbs demo: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
