//! Verbs across a process boundary, for the multi-process tests: a `verbs-api` backend whose
//! objects live in an `sv-peer verbs` child. Each verb is one request line on the child's stdin
//! and one reply line on its stdout; the child runs it on its own device ([`serve`]). A test
//! body written against [`verbs_api::Context`] thus drives a device in another process
//! unchanged: the data moves between the two processes' NICs over the shared-memory fabric, and
//! only the verbs calls cross the pipe.
//!
//! Requests are `<verb> <handle> <fields...>`; replies are `OK <fields...>` or
//! `ERR <errno> <message>`, so errors keep their errno and their words across the pipe. Numbers
//! are decimal, bytes are hex (`-` when empty, `~` for "none"). The child prints
//! `VERBS <device>` first and answers `BYE` by dropping everything and exiting.
//!
//! `codec.rs` writes and reads the lines, `client.rs` is the test's side ([`RemoteDevice`]) and
//! `server.rs` the child's ([`serve`]); the client and the server both stand on the codec and
//! never name each other.

use std::time::Duration;

mod client;
mod codec;
mod server;

pub use client::RemoteDevice;
pub use server::serve;

/// Bound on waiting for a reply, on top of the call's own timeout.
pub const REPLY_WAIT: Duration = Duration::from_secs(30);
/// What "wait forever" (`None`) becomes for a blocking verb across the pipe: every wait here
/// has a bound.
pub const BLOCKING_CAP: Duration = Duration::from_secs(30);
