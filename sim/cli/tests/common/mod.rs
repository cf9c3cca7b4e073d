//! What the CLI tests of `softverbs` share: running the binary as a real process on a fabric
//! directory of its own, bounded and checked for leftover segments, and (`xml`) a small XML
//! well-formedness check for the SVGs the commands draw.
//!
//! Each test file that needs it says `mod common;`; not every file uses every item.
#![allow(dead_code)]

use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softverbs_sim::peer::{FabricDir, Peer, Stderr};

pub mod netns;
pub mod xml;

/// The `softverbs` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// Bound on one command (a debug build, two cores shared with the other tests).
pub const BOUND: Duration = Duration::from_secs(120);

/// How a `softverbs` run ended and what it printed.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `softverbs <args> --fabric DIR` on a fabric directory of its own (named after `tag`);
/// the process is killed (and the test fails) past [`BOUND`]; the directory must be empty of
/// segments when the run ends, and is removed.
pub fn softverbs(tag: &str, args: &[&str]) -> Run {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let fabric = FabricDir::create(&format!("softverbs-{tag}-test-{}-{n}", std::process::id()))
        .expect("a fabric directory");
    let dir = fabric.path().to_str().expect("UTF-8 path").to_string();
    let mut c = Command::new(BIN);
    c.args(args).args(["--fabric", &dir]);
    let label = format!("softverbs {}", args.first().copied().unwrap_or(""));
    let mut p = Peer::spawn(&label, c, Stderr::Capture).expect("starting softverbs");
    p.close_stdin();
    let status = p.wait_exit(BOUND).unwrap_or_else(|e| panic!("softverbs {args:?}: {e}"));
    let stdout = p.remaining_lines(BOUND).join("\n");
    let stderr = p.stderr();
    fabric.wait_empty(Duration::from_secs(10)).expect("no segments left behind");
    Run { status, stdout, stderr }
}
