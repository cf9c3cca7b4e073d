//! Scenarios: a world, a fault schedule and an RC workload described in TOML, run
//! deterministically from a seed, with a summary of what happened. `softverbs sim FILE.toml`
//! runs one; the tests run the samples in `sim/scenarios/`.
//!
//! The workload runs through the sim backend's verbs objects (PDs, CQs, QPs, MRs), exactly as a
//! verbs program would; the runner polls CQs between events and never reads a clock.

mod run;

pub use run::*;
