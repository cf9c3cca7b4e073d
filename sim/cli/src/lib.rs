//! The `softverbs` command line: its commands, one file each under [`cmd`], built on the crates
//! below it (`verbs-api`, `nic-model`, `softverbs-sim`), which never name them. `main.rs` only
//! parses the command line and dispatches; the library is there so that the benchmarks and
//! the tests reach the commands' parts (`cmd::perf`, `cmd::sweep`) without the process.

pub mod cmd;
