//! The world's one source of randomness: xoshiro256** seeded through SplitMix64 (it lives in
//! `nic_model::fault`, with the fault vocabulary). Small, fast, and the same on every platform,
//! so a seed names a run.

/// The generator of the shared fault vocabulary (`nic_model::fault`): the simulator's links and
/// the soft backend's fault plans draw from the same stream for the same seed.
pub use nic_model::fault::Rng;
