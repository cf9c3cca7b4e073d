//! The documentation's Rust examples as doctests: each Markdown page below is this module's
//! documentation for rustdoc, so `cargo test --doc -p softverbs-tests` (part of
//! `cargo test --workspace`) compiles every ```rust block (and every untagged one: a block
//! that is not Rust says what it is, ```text, ```sh or ```toml) and runs it unless it is
//! marked `no_run`, with the reason beside it. They live in this crate because it depends on
//! all three crates an example may use (`verbs_api`, `nic_model`, `softverbs_sim`) and on
//! nothing a user's program would not, is never published, and forwards the `rdma-sys`
//! feature, so the hardware page's example compiles with the real-NIC backend too. The
//! scenarios (```toml) and the command lines of the pages are run by `sim/cli/tests/docs.rs`.

#[doc = include_str!("../../README.md")]
pub struct Readme;

#[doc = include_str!("../../docs/guide.md")]
pub struct Guide;

#[doc = include_str!("../../docs/simulator.md")]
pub struct Simulator;

#[doc = include_str!("../../docs/hardware.md")]
pub struct Hardware;

#[doc = include_str!("../../docs/c.md")]
pub struct CPrograms;

#[doc = include_str!("../../docs/architecture.md")]
pub struct Architecture;

#[doc = include_str!("../../docs/performance.md")]
pub struct Performance;

#[doc = include_str!("../../docs/decisions.md")]
pub struct Decisions;
