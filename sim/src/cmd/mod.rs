//! The `softverbs` commands, one file each, and what they share: the error that carries an exit
//! status, registering the backends, and opening a device by name.
//!
//! They are programs built on this crate's library (the connection helpers in [`crate::conn`],
//! the peer launcher in [`crate::peer`], the simulator in [`crate::world`]), which never names
//! them; they sit in this crate because the design card puts the `softverbs` binary in `sim/`.

pub mod demo;
pub mod devinfo;
pub mod fabric;
pub mod perf;
pub mod pingpong;
pub mod sim;

use std::fmt;
use std::net::Ipv6Addr;
use std::path::Path;
use std::sync::Arc;

use crate::conn::PortAddress;
use nic_model::soft::Soft;
use verbs_api::{Context, Errno, Gid};

/// A command's failure: the message to print and the exit status (1: something failed,
/// 2: the command was asked for something that does not exist, as a bad argument).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliError {
    /// The process exit status.
    pub status: u8,
    /// What failed, for stderr.
    pub message: String,
}

impl CliError {
    /// Something failed while running (exit status 1).
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError { status: 1, message: message.into() }
    }
    /// The user asked for something that does not exist (exit status 2, like a bad argument).
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError { status: 2, message: message.into() }
    }
}

/// A message alone is a failure (exit status 1); usage errors are made with [`CliError::usage`].
impl From<String> for CliError {
    fn from(message: String) -> CliError {
        CliError::failed(message)
    }
}

/// As `From<String>`.
impl From<&str> for CliError {
    fn from(message: &str) -> CliError {
        CliError::failed(message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The error of a failed write to the command's output.
fn output_error(e: std::io::Error) -> CliError {
    CliError::failed(format!("writing the output: {e}"))
}

/// The soft devices on the shared-memory fabric in `fabric` (or `$SOFTVERBS_FABRIC`, or the
/// per-user default directory).
pub fn shared_memory(fabric: Option<&Path>) -> Result<Soft, CliError> {
    Soft::shared_memory(fabric)
        .map_err(|e| CliError::failed(format!("opening the shared-memory fabric: {e}")))
}

/// Register `soft` and, when `verbs-api` was built with the `rdma-sys` feature, the `hw`
/// provider (libibverbs' devices), so that [`verbs_api::device_list_detailed`] and
/// [`Context::open`] see the devices of both. Call it once per process.
pub fn register_backends(soft: &Soft) {
    verbs_api::register_provider(Arc::new(soft.clone()));
    if let Some(hw) = verbs_api::hw_provider() {
        verbs_api::register_provider(hw);
    }
}

/// [`register_backends`] with the soft devices of the fabric in `fabric`; returns them.
pub fn register_fabric(fabric: Option<&Path>) -> Result<Soft, CliError> {
    let soft = shared_memory(fabric)?;
    register_backends(&soft);
    Ok(soft)
}

/// Turn a failure to find or open `name` into the CLI's error: a device that does not exist
/// is a usage error (exit status 2), anything else a failure.
fn device_error(name: &str, e: verbs_api::Error) -> CliError {
    if e.errno == Errno::NoDev {
        CliError::usage(e.message)
    } else {
        CliError::failed(format!("opening {name}: {e}"))
    }
}

/// `sim:` devices live inside a simulated world that only `softverbs sim` builds; a command
/// between processes cannot use one.
fn refuse_sim(name: &str) -> Result<(), CliError> {
    if verbs_api::backend_of(name) == "sim" {
        return Err(CliError::usage(format!(
            "{name} is a device of the deterministic simulator, which exists only inside a \
             simulated world: run one with `softverbs sim SCENARIO.toml`, or use the sim \
             backend from a program (docs/simulator.md). This command needs a soft device \
             (softverbs0, ...) or a real one."
        )));
    }
    Ok(())
}

/// Find a device of the registered backends by name without opening it
/// ([`verbs_api::find_device`]); an unknown name is a usage error naming it and saying why.
pub fn find_device(name: &str) -> Result<verbs_api::Device, CliError> {
    refuse_sim(name)?;
    verbs_api::find_device(name).map_err(|e| device_error(name, e))
}

/// Open a device of the registered backends by name, with [`Context::open`] (the backend is
/// chosen by the name); an unknown name is a usage error naming it and saying why.
pub fn open_device(name: &str) -> Result<Context, CliError> {
    refuse_sim(name)?;
    Context::open(name).map_err(|e| device_error(name, e))
}

/// How peers reach port 1 of `ctx` ([`PortAddress::of`]); a GID index the port does not have
/// is a usage error, like any bad option value.
pub fn port_address(ctx: &Context, gid_idx: Option<u32>) -> Result<PortAddress, CliError> {
    PortAddress::of(ctx, gid_idx).map_err(|e| match (gid_idx, e.errno) {
        (Some(i), Errno::Inval) => CliError::usage(format!("-g {i}: {}", e.message)),
        _ => CliError::failed(format!("querying port 1 of {}: {e}", ctx.device_name())),
    })
}

/// A GID the way `inet_ntop(AF_INET6)` writes it, as `ibv_rc_pingpong` prints GIDs:
/// `::` for zero, `::ffff:10.0.0.1` for an IPv4-mapped one.
pub fn gid_ntop(gid: &Gid) -> String {
    Ipv6Addr::from(gid.0).to_string()
}
