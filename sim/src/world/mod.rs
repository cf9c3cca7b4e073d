//! The deterministic simulator (being written).
