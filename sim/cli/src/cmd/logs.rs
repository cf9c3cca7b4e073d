//! The commands' log: `-v` (info), `-vv` (debug), `-vvv` (trace) or `RUST_LOG`, printed on
//! stderr by a `tracing-subscriber` formatter. With neither, no subscriber is installed and the
//! library's events (`nic_model`'s engine, soft devices and fabric) cost a static level check.
//!
//! One variable, `RUST_LOG`, not a project-specific one besides: its filter syntax already
//! scopes what a user wants (`RUST_LOG=nic_model::engine=debug`), every Rust program that
//! links the library reads the same one through its own subscriber, and a second variable would
//! need precedence rules for no case the first cannot express.

use std::io::Write;

use tracing_subscriber::filter::{EnvFilter, LevelFilter};

use super::CliError;

/// The variable whose filter, when set and not empty, overrides `-v`.
pub const LOG_ENV: &str = "RUST_LOG";

/// `-v`, `-vv`, `-vvv`: the log's level on stderr (info, debug, trace).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct LogOpt {
    /// Log to stderr: -v lifecycle (info), -vv protocol events (debug), -vvv per packet (trace).
    /// RUST_LOG, if set, overrides it.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// The level `-v` given `count` times asks for; `None` for none (no log at all).
pub fn level_of(count: u8) -> Option<LevelFilter> {
    match count {
        0 => None,
        1 => Some(LevelFilter::INFO),
        2 => Some(LevelFilter::DEBUG),
        _ => Some(LevelFilter::TRACE),
    }
}

/// Install the log for this process: `RUST_LOG`'s filter if it is set and not empty, else the
/// level of `-v` given `verbose` times, else nothing. A `RUST_LOG` that does not parse is a
/// usage error that names it.
pub fn init(verbose: u8) -> Result<(), CliError> {
    let filter = match std::env::var(LOG_ENV) {
        Ok(v) if !v.trim().is_empty() => EnvFilter::builder()
            .parse(&v)
            .map_err(|e| CliError::usage(format!("{LOG_ENV}={v:?} does not parse: {e}")))?,
        Ok(_) | Err(std::env::VarError::NotPresent) => match level_of(verbose) {
            Some(level) => EnvFilter::default().add_directive(level.into()),
            None => return Ok(()),
        },
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(CliError::usage(format!("{LOG_ENV}={v:?} is not UTF-8")))
        }
    };
    // Nothing is printed about a stderr that is closed (`2>&1 | head`): the log is best effort.
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .try_init();
    if let Err(e) = installed {
        let _ = writeln!(std::io::stderr(), "softverbs: the log was not installed: {e}");
    }
    Ok(())
}
