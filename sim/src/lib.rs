//! softverbs beyond the NIC: helpers to connect QPs as verbs programs do, the demo, and the
//! `softverbs` command-line tool.

pub mod conn;
pub mod demo;
