//! Segment files of ports still open when the process exits, removed then. A program that
//! ends without closing its devices (`exit()` from `main`, an error path, `MPI_Abort`) runs no
//! drop, and its inbox and reach files stayed in the fabric until `softverbs fabric clean`;
//! the kernel closes an rxe device's resources when a process exits, so nothing of it stays.
//! The files are unlinked only: peers that still map them find the owner gone as after a
//! crash (the keeper's robust mutex, the owner's pid), and nothing is written to them here,
//! since the NIC threads may still run while `atexit` handlers do.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// A file this process made: its path, its (device, inode) and the pid that made it.
struct Own {
    path: PathBuf,
    id: (u64, u64),
    pid: u32,
}

static OWN: Mutex<Vec<Own>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Removes `path` at exit if this process still holds it then (see [`forget`]); the file must
/// exist now (its identity is read here). A fork child inherits the list but removes nothing
/// of its parent's.
pub(crate) fn remove_at_exit(path: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    let own =
        Own { path: path.to_path_buf(), id: (meta.dev(), meta.ino()), pid: std::process::id() };
    OWN.lock().unwrap_or_else(|e| e.into_inner()).push(own);
    HANDLER.call_once(|| {
        // SAFETY: registers a function that takes no arguments and touches only this module's
        // statics; if there is no room, files stay as before (`softverbs fabric clean`).
        unsafe { libc::atexit(remove_all) };
    });
}

/// The file at `path` is removed (or given up) by its owner: nothing to do at exit.
pub(crate) fn forget(path: &Path) {
    OWN.lock().unwrap_or_else(|e| e.into_inner()).retain(|o| o.path != path);
}

extern "C" fn remove_all() {
    // Another thread may hold the lock as the process exits: then leave the files as a
    // crash would, rather than wait.
    let Ok(own) = OWN.try_lock() else { return };
    let me = std::process::id();
    for o in own.iter().filter(|o| o.pid == me) {
        // Only the very file this process made: a later owner's file at the same name stays.
        if std::fs::symlink_metadata(&o.path).is_ok_and(|m| (m.dev(), m.ino()) == o.id) {
            let _ = std::fs::remove_file(&o.path);
        }
    }
}
