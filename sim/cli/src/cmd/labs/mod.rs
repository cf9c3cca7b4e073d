//! `softverbs labs`: the graded C labs of `labs/` (list them, show one's README, check a
//! student's program against it), for learners writing their first verbs programs in C.

mod check;
mod latency;
pub mod spec;
mod wire;

use std::io::Write;
use std::path::PathBuf;

use super::{output_error, CliError};

/// What `softverbs labs` takes.
#[derive(clap::Args, Debug, Clone)]
pub struct LabsArgs {
    #[command(subcommand)]
    pub action: Option<LabsAction>,
}

/// `softverbs labs list|show|check`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum LabsAction {
    /// List the labs (the default).
    List,
    /// Print lab N's README: its goal, what to read, the steps and hints.
    Show {
        /// The lab's number.
        n: u32,
    },
    /// Run your lab program on softverbs and grade it: the wire, the completions, the memory.
    ///
    /// Exit status 0 when every check passes, 1 when one fails (each failure says what is
    /// wrong), 2 for a lab or program that does not exist.
    Check {
        /// The lab's number.
        n: u32,
        /// Your built program, e.g. ./a.out.
        program: PathBuf,
    },
}

fn lab(n: u32) -> Result<&'static spec::Lab, CliError> {
    spec::lab(n).ok_or_else(|| {
        let have: Vec<String> = spec::LABS.iter().map(|l| l.n.to_string()).collect();
        CliError::usage(format!("there is no lab {n}: the labs are {}", have.join(", ")))
    })
}

/// `softverbs labs ...`.
pub fn run(args: &LabsArgs, w: &mut dyn Write) -> Result<(), CliError> {
    match args.action.clone().unwrap_or(LabsAction::List) {
        LabsAction::List => {
            for l in spec::LABS {
                writeln!(w, "{}  {:<24} labs/{}", l.n, l.title, l.dir).map_err(output_error)?;
            }
            writeln!(
                w,
                "softverbs labs show N: the lab's README; softverbs labs check N ./a.out: grade \
                 your program (reference solutions: labs/solutions/, to read after trying)"
            )
            .map_err(output_error)
        }
        LabsAction::Show { n } => w.write_all(lab(n)?.readme.as_bytes()).map_err(output_error),
        LabsAction::Check { n, program } => check::check(lab(n)?, &program, w),
    }
}
