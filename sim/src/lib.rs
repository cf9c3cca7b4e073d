//! softverbs beyond the NIC: helpers to connect QPs as verbs programs do, the demo, the
//! deterministic simulator, benchmarks, and the `softverbs` command-line tool's commands.

pub mod conn;
pub mod demo;
pub mod info;
pub mod perf;
pub mod pingpong;
pub mod sim_cli;
pub mod world;
