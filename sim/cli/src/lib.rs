//! The `softverbs` command line's commands (transitional: the next commit names this crate's
//! paths; the simulator's modules are named here so the moved files' `crate::` paths hold).

pub mod cmd;

pub use simulator::{conn, ladder, peer, world};
