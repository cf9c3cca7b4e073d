//! The `softverbs` commands, one file each, and what they share: the error that carries an exit
//! status, registering the backends, and opening a device by name.
//!
//! They are programs built on the crates below (the connection helpers in [`verbs_api::conn`],
//! the peer launcher in [`softverbs_sim::peer`], the simulator in [`softverbs_sim::world`]), which
//! never name them.

/// `println!` for a command's report lines: a reader that has gone (EPIPE) ends the command
/// quietly ([`CliError::output_closed`]) instead of panicking; `?` passes it up.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cmd::print_line(format_args!($($arg)*))?
    };
}

pub mod book;
pub mod counters;
pub mod demo;
pub mod devinfo;
pub mod devnodes;
pub mod fabric;
pub mod labs;
pub mod learn;
pub mod logs;
pub mod perf;
pub mod pingpong;
pub mod run;
pub mod sim;
pub mod sim_results;
pub mod sweep;
pub mod words;

use std::fmt;
use std::io::Write;
use std::net::Ipv6Addr;
use std::path::Path;
use std::sync::Arc;

use nic_model::engine::slot_of_gid;
use nic_model::soft::Soft;
use nic_model::wire::{Fabric, WireError, FABRIC_ENV};
use verbs_api::conn::{PortAddress, QpInfo};
use verbs_api::{Context, Errno, Gid};

/// A command's failure: the message to print and the exit status (1: something failed,
/// 2: the command was asked for something that does not exist, as a bad argument), or, with
/// status 0 and no message, a command that stopped because its output was closed.
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
    /// The command's stdout was closed by its reader (`softverbs devinfo | head`): it stops at
    /// once and exits with status 0 saying nothing, as ripgrep and fd do; nothing failed that
    /// anyone is still listening for.
    pub fn output_closed() -> CliError {
        CliError { status: 0, message: String::new() }
    }
    /// Whether this is [`CliError::output_closed`].
    pub fn is_output_closed(&self) -> bool {
        self.status == 0
    }
    /// Print the error as `softverbs CMD: message` on stderr, unless it is
    /// [`CliError::output_closed`]; returns the exit status. A stderr that is closed too
    /// (`2>&1 | head`) is no reason to panic: the status says what happened.
    pub fn report(&self, cmd: &str) -> std::process::ExitCode {
        if !self.is_output_closed() {
            let _ = writeln!(std::io::stderr(), "softverbs {cmd}: {}", self.message);
        }
        std::process::ExitCode::from(self.status)
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

/// A CPU-time clock read in nanoseconds (`clock_gettime`; `CLOCK_PROCESS_CPUTIME_ID`, or a
/// thread's clock id as `pthread_getcpuclockid` forms it), or `None` if the kernel refuses
/// the clock: `perf` and `learn` both read CPU time through here.
pub(crate) fn cpu_clock_ns(clock: i32) -> Option<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec (two i64 on 64-bit Linux) to a valid pointer;
    // a clock id naming no clock of ours is an error return, not undefined behaviour.
    if unsafe { clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The error of a failed write to the command's output: [`CliError::output_closed`] when the
/// reader has gone (EPIPE), a failure otherwise.
pub(crate) fn output_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return CliError::output_closed();
    }
    CliError::failed(format!("writing the output: {e}"))
}

/// One line on stdout, for [`outln!`].
pub(crate) fn print_line(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args).and_then(|()| out.write_all(b"\n")).map_err(output_error)
}

/// The soft devices on the shared-memory fabric in `fabric` (or `$SOFTVERBS_FABRIC`, or the
/// per-user default directory). An environment value that does not parse is a usage error
/// naming the variable.
pub fn shared_memory(fabric: Option<&Path>) -> Result<Soft, CliError> {
    Soft::shared_memory(fabric).map_err(|e| {
        if e.errno == Errno::Inval {
            CliError::usage(e.message)
        } else {
            CliError::failed(format!("opening the shared-memory fabric: {e}"))
        }
    })
}

/// Soft devices joined by the in-process wire ([`Soft::loopback`]); an environment value that
/// does not parse is a usage error naming the variable, as with [`shared_memory`].
pub fn loopback() -> Result<Soft, CliError> {
    nic_model::soft::EnvConfig::from_env().map_err(|e| CliError::usage(e.message))?;
    Ok(Soft::loopback())
}

/// Where the name of the fabric directory came from: `--fabric`, `$SOFTVERBS_FABRIC`, or
/// neither (None: the per-user default).
fn fabric_named_by(flag: Option<&Path>) -> Option<&'static str> {
    if flag.is_some() {
        Some("--fabric")
    } else if std::env::var_os(FABRIC_ENV).is_some_and(|v| !v.is_empty()) {
        Some("$SOFTVERBS_FABRIC")
    } else {
        None
    }
}

/// The fabric a command that only reads (`devices`, `fabric`) looks at, never created: None
/// when the default directory does not exist yet (an empty fabric), a usage error naming the
/// path and the option or variable when a directory the user named does not exist.
pub fn existing_fabric(flag: Option<&Path>) -> Result<Option<Fabric>, CliError> {
    match Fabric::open_existing(flag) {
        Ok(fabric) => Ok(Some(fabric)),
        Err(WireError::NoFabric { dir }) => match fabric_named_by(flag) {
            None => Ok(None),
            Some(by) => Err(CliError::usage(format!(
                "fabric directory {} ({by}) does not exist: no process has opened a soft \
                 device on it (a typo? processes on one fabric must name the same directory)",
                dir.display()
            ))),
        },
        Err(e) => Err(CliError::failed(format!("opening the shared-memory fabric: {e}"))),
    }
}

/// After the address exchange of a command whose peer was started by someone else
/// (`pingpong`): a soft device reaches the peer's port only through this fabric, so a peer
/// whose GID names no port here, or names this process's own port, runs on another fabric.
/// Say so, naming the directory searched, rather than let the first message time out.
pub fn check_peer_on_fabric(
    soft: &Soft,
    ctx: &Context,
    me: &QpInfo,
    remote: &QpInfo,
) -> Result<(), CliError> {
    let Some(fabric) = soft.fabric() else { return Ok(()) };
    if verbs_api::backend_of(&ctx.device_name()) != "soft" {
        return Ok(());
    }
    let Some(slot) = slot_of_gid(&remote.gid) else { return Ok(()) };
    let dir = fabric.dir().display();
    let path = fabric.inbox_path(slot);
    let why = if remote.gid == me.gid {
        format!("GID {} is this process's own port there", gid_ntop(&remote.gid))
    } else if !path.exists() {
        format!("there is no {}", path.display())
    } else {
        return Ok(());
    };
    Err(CliError::failed(format!(
        "the peer's port (GID {}) is not on the fabric {dir} that this process searched ({why}): \
         the peer uses another fabric directory; give both the same --fabric DIR (or \
         SOFTVERBS_FABRIC)",
        gid_ntop(&remote.gid)
    )))
}

/// A port number `ctx` does not have is a usage error naming the option: `-i 2: softverbs0
/// has no port 2 (phys_port_cnt 1)`.
pub fn check_port(ctx: &Context, opt: &str, port: u8) -> Result<(), CliError> {
    let name = ctx.device_name();
    let attr = ctx
        .query_device()
        .map_err(|e| CliError::failed(format!("ibv_query_device on {name}: {e}")))?;
    if port == 0 || port > attr.phys_port_cnt {
        return Err(CliError::usage(format!(
            "{opt} {port}: {name} has no port {port} (phys_port_cnt {})",
            attr.phys_port_cnt
        )));
    }
    Ok(())
}

/// Messages of `size` bytes on `port` of `ctx`: more than the port's `max_msg_sz` is a usage
/// error naming the option and the limit, before any memory is registered or peer started.
pub fn check_message_size(ctx: &Context, port: u8, opt: &str, size: u64) -> Result<(), CliError> {
    let name = ctx.device_name();
    let pa = ctx
        .query_port(port)
        .map_err(|e| CliError::failed(format!("ibv_query_port on {name} port {port}: {e}")))?;
    if size > u64::from(pa.max_msg_sz) {
        return Err(CliError::usage(format!(
            "{opt} {size}: larger than the largest message {name} port {port} takes \
             (max_msg_sz {})",
            pa.max_msg_sz
        )));
    }
    Ok(())
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

/// What the demo teaches about addressing on RoCE: port 1's GID table (the entries that hold
/// a GID) and which index this side sends from, and why — the index asked for with `-g`, or
/// the first IPv4 GID, as perftest's `ib_write_bw` picks it.
pub fn gid_choice_lines(ctx: &Context, addr: &PortAddress, asked: Option<u32>) -> Vec<String> {
    let mut lines = vec![
        "Port 1 is a RoCE v2 port (Ethernet link layer, LID 0): a peer is addressed by a GID, an"
            .to_string(),
        "IP address of the port, named by its index in the port's GID table:".to_string(),
    ];
    let len = ctx.query_port(1).map_or(0, |p| p.gid_tbl_len);
    for index in 0..len {
        let Ok(e) = ctx.query_gid_entry(1, index) else { continue };
        let family = if e.gid.to_ipv4().is_some() { "IPv4" } else { "IPv6" };
        let mark = if index == addr.gid_index { "   <- this side sends from it" } else { "" };
        lines.push(format!(
            "  GID[{index:3}]: {}, {}, {family}{mark}",
            gid_ntop(&e.gid),
            e.gid_type.as_str()
        ));
    }
    let family = if addr.gid.to_ipv4().is_some() { "IPv4" } else { "IPv6" };
    let why = match asked {
        Some(_) => "the entry -g asked for".to_string(),
        None => "the entry ib_write_bw would pick (the first IPv4 GID)".to_string(),
    };
    let kind = ctx.query_gid_entry(1, addr.gid_index).map_or("", |e| e.gid_type.as_str());
    lines.push(format!(
        "GID index {}: {}, {kind}, {family} — {why}.",
        addr.gid_index,
        gid_ntop(&addr.gid)
    ));
    lines.push(
        "Each QP's address vector carries a GRH: the peer's GID as dgid, this index as sgid_index."
            .to_string(),
    );
    lines
}

/// A GID the way `inet_ntop(AF_INET6)` writes it, as `ibv_rc_pingpong` prints GIDs:
/// `::` for zero, `::ffff:10.0.0.1` for an IPv4-mapped one.
pub fn gid_ntop(gid: &Gid) -> String {
    Ipv6Addr::from(gid.0).to_string()
}

/// A JSON string literal of `s` (RFC 8259 escapes: `\"`, `\\`, `\n`, other controls as `\u00XX`),
/// for the commands' `--json` output.
pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod json_tests {
    use super::json_str;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
