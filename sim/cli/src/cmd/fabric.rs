//! `softverbs fabric [list|clean]`: what the shared-memory fabric directory holds, and the
//! removal of the segments whose owner process is dead.

use std::io::Write;
use std::path::Path;

use nic_model::wire::{Fabric, SegmentInfo, CORRUPTED};
use verbs_api::Gid;

use super::{gid_ntop, output_error, CliError};

/// What `softverbs fabric` does.
#[derive(clap::Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricAction {
    /// List the segments (the default).
    List,
    /// Remove the segments whose owner process is dead.
    Clean,
}

fn segment_row(s: &SegmentInfo) -> [String; 6] {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    let owner = match s.owner_pid {
        Some(pid) => format!("{pid} {}", if s.alive { "alive" } else { "dead" }),
        None => "-".to_string(),
    };
    let geometry = match (s.slots, s.slot_size) {
        (Some(n), Some(size)) => format!("{n} x {size} B"),
        _ => "-".to_string(),
    };
    [
        s.path.display().to_string(),
        opt(s.lid.map(|l| l.to_string())),
        opt(s.gid.map(|g| gid_ntop(&Gid(g)))),
        owner,
        geometry,
        opt(s.problem.clone()),
    ]
}

/// `softverbs fabric [list|clean]`.
pub fn fabric(
    dir: Option<&Path>,
    action: FabricAction,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    // Looking never creates: a directory that does not exist is named, or, for the default
    // one, an empty fabric.
    let Some(fabric) = super::existing_fabric(dir)? else {
        let shown = Fabric::locate(dir).dir().display().to_string();
        let said = match action {
            FabricAction::List => {
                writeln!(out, "fabric {shown}: no segments (no such directory yet)")
            }
            FabricAction::Clean => {
                writeln!(out, "fabric {shown}: nothing to clean (no such directory)")
            }
        };
        return said.map_err(output_error);
    };
    let shown = fabric.dir().display().to_string();
    match action {
        FabricAction::List => {
            let segments = fabric
                .list()
                .map_err(|e| CliError::failed(format!("listing the fabric {shown}: {e}")))?;
            fabric_list(&shown, &segments, out).map_err(output_error)
        }
        FabricAction::Clean => {
            let removed = fabric
                .clean()
                .map_err(|e| CliError::failed(format!("cleaning the fabric {shown}: {e}")))?;
            (|| {
                if removed.is_empty() {
                    writeln!(out, "fabric {shown}: nothing to clean (no segment of a dead owner)")?;
                }
                for s in &removed {
                    let why = match (s.owner_pid, &s.problem) {
                        (Some(pid), _) => format!("owner pid {pid} is dead"),
                        (None, Some(p)) => p.clone(),
                        (None, None) => "left by a creator that died".to_string(),
                    };
                    let lid = s.lid.map(|l| format!("slot {l}, ")).unwrap_or_default();
                    writeln!(out, "removed {} ({lid}{why})", s.path.display())?;
                }
                Ok(())
            })()
            .map_err(output_error)
        }
    }
}

fn fabric_list(shown: &str, segments: &[SegmentInfo], out: &mut dyn Write) -> std::io::Result<()> {
    if segments.is_empty() {
        return writeln!(out, "fabric {shown}: no segments");
    }
    let n = segments.len();
    writeln!(out, "fabric {shown}: {n} segment{}", if n == 1 { "" } else { "s" })?;
    let header = ["path", "slot", "GID", "owner", "slots x size", "problem"].map(String::from);
    let rows: Vec<[String; 6]> =
        std::iter::once(header).chain(segments.iter().map(segment_row)).collect();
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        writeln!(out, "  {}", line.trim_end())?;
    }
    if segments.iter().any(|s| s.problem.as_deref().is_some_and(|p| p.starts_with(CORRUPTED))) {
        writeln!(
            out,
            "A corrupted segment was written over by a stray write: its ring cannot be trusted, \
             so its port is down (its owner got IBV_EVENT_PORT_ERR and sends to it fail); the \
             owner closes and reopens its device to get a new port."
        )?;
    }
    if segments.iter().any(|s| s.owner_pid.is_some() && !s.alive) {
        writeln!(out, "Segments of dead owners can be removed with `softverbs fabric clean`.")?;
    }
    Ok(())
}
