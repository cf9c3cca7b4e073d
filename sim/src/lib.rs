//! softverbs beyond the NIC: helpers to connect QPs as verbs programs do, a launcher for peer
//! processes, the deterministic simulator, and the `softverbs` command-line tool's commands.

pub mod cmd;
pub mod ladder;
pub mod peer;
pub mod world;

/// The connection helpers, now in `verbs-api` ([`verbs_api::conn`]), named here too so that
/// programs written against `softverbs_sim::conn` keep compiling.
pub use verbs_api::conn;
