//! Scenarios: a world, a fault schedule and an RC workload described in TOML, run
//! deterministically from a seed, with a summary of what happened. `softverbs sim FILE.toml`
//! runs one; the tests run the samples in `sim/scenarios/`.
//!
//! The file's model (`spec.rs`) is read first; running it (`run.rs`) builds the world and plays
//! the workload through the sim backend's verbs objects (PDs, CQs, QPs, MRs), exactly as a
//! verbs program would, polling CQs between events and never reading a clock; the
//! [`Report`] says what happened.

mod check;
mod flows;
mod net;
mod report;
mod run;
mod spec;

pub use report::{cqe_label, jain, ConnReport, NetReport, Report, RunPackets};
pub use run::{run, RunOptions};
pub use spec::{
    CongestionSpec, ConnSpec, Expect, FaultAction, FaultSpec, LinkSpec, Names, NicSpec, NodeSpec,
    OpSpec, ParamSpec, PfcSpec, RunBounds, Scenario,
};
