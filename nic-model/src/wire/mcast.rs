//! The fabric's multicast registry: which ports receive which UD multicast group, where every
//! process of the fabric sees it. A port that has a QP attached to a group
//! (`ibv_attach_mcast`) has an empty file `mcast-<group GID, 32 hex digits>.<lid>` in the
//! fabric directory, made with exclusive creation and removed when its last QP leaves or the
//! port goes; a sender to the group sends one copy of the datagram to each member port's
//! inbox (a switch's multicast forwarding), and the receiving engine gives it to each QP
//! attached there. A dead port's files are skipped by senders (its inbox is gone or dead)
//! and removed by `Fabric::clean` with its inbox.

use std::fs;
use std::io;
use std::path::Path;

use super::WireError;

const PREFIX: &str = "mcast-";

fn hex(group: &[u8; 16]) -> String {
    group.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `path` is a registry file (not a segment: `Fabric::list` skips it).
pub(crate) fn is_mcast_file(path: &Path) -> bool {
    member_of(path).is_some()
}

/// The group and LID a registry file names.
fn member_of(path: &Path) -> Option<(String, u16)> {
    let name = path.file_name()?.to_str()?;
    let (group, lid) = name.strip_prefix(PREFIX)?.split_once('.')?;
    (group.len() == 32 && group.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| Some((group.to_owned(), lid.parse().ok()?)))
        .flatten()
}

/// The port `lid` of the fabric in `dir` receives the multicast group `group` (idempotent).
pub fn join_group(dir: &Path, group: &[u8; 16], lid: u16) -> Result<(), WireError> {
    let path = dir.join(format!("{PREFIX}{}.{lid}", hex(group)));
    match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(WireError::io(&path, e)),
    }
}

/// The port `lid` no longer receives the group `group` (idempotent).
pub fn leave_group(dir: &Path, group: &[u8; 16], lid: u16) -> Result<(), WireError> {
    let path = dir.join(format!("{PREFIX}{}.{lid}", hex(group)));
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WireError::io(&path, e)),
    }
}

/// The LIDs of the ports that receive the group `group`, in order (one directory read:
/// multicast is not on the latency path).
pub fn group_members(dir: &Path, group: &[u8; 16]) -> Result<Vec<u16>, WireError> {
    let want = hex(group);
    let entries = fs::read_dir(dir).map_err(|e| WireError::io(dir, e))?;
    let mut lids: Vec<u16> = entries
        .flatten()
        .filter_map(|e| member_of(&e.path()))
        .filter(|(g, _)| *g == want)
        .map(|(_, lid)| lid)
        .collect();
    lids.sort_unstable();
    Ok(lids)
}

/// Removes the registry files of ports that are gone (`gone(lid)`: `Fabric::clean` asks
/// whether the port's inbox is, after it removed dead owners' segments).
pub(crate) fn clean_groups(dir: &Path, gone: impl Fn(u16) -> bool) -> Result<(), WireError> {
    let entries = fs::read_dir(dir).map_err(|e| WireError::io(dir, e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if let Some((_, lid)) = member_of(&path) {
            if gone(lid) {
                let _ = fs::remove_file(&path);
            }
        }
    }
    Ok(())
}
