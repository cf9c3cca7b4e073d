//! softverbs beyond the NIC: helpers to connect QPs as verbs programs do, a launcher for peer
//! processes, the deterministic simulator, and the `softverbs` command-line tool's commands.

pub mod cmd;
pub mod conn;
pub mod ladder;
pub mod peer;
pub mod world;
