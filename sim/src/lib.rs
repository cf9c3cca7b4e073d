//! softverbs beyond the NIC: the deterministic simulator (`world/`), the packet ladders drawn
//! from its runs (`ladder/`), and the one launcher of peer processes (`peer`). The `softverbs`
//! command line, built on them, is its own crate (`sim/cli/`, package `softverbs`).

pub mod ladder;
pub mod peer;
pub mod world;

/// The connection helpers, now in `verbs-api` ([`verbs_api::conn`]), named here too so that
/// programs written against `softverbs_sim::conn` keep compiling.
pub use verbs_api::conn;
