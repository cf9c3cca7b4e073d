//! Captures of real runs (`SOFTVERBS_PCAP=FILE`, `--pcap FILE`): every datagram a process's
//! soft devices send and receive, in one pcap file per process that Wireshark decodes as
//! RoCEv2 (the writer is [`crate::packet::PcapWriter`]).
//!
//! - **Several devices in one process** share one file (a device opened with the same file
//!   name joins the capture already open). A datagram between two devices of the process is
//!   recorded once, when it is sent: receptions from the process's own devices are skipped.
//! - **Several processes**: `{pid}` in the name is replaced by the process id, so each process
//!   writes its own file (merge them with `mergecap`). A process that finds the file being
//!   written by another (an exclusive `flock`) fails to open its device with an error naming
//!   the variable, rather than interleaving records into a file nobody can read.
//! - **Timestamps** are the wall clock (nanoseconds), so the files of two processes merge in
//!   order.
//! - **Where**: on the way out a layer around the port's sending half ([`Captured`], as
//!   smoltcp's `PcapWriter` wraps a device) records what went into a peer's inbox; on the
//!   way in the device's progress round records what it hands the engine.
//! - **Cost**: nothing when no capture is asked for (no layer, and the device's receiving
//!   tap is `None`, a branch that was already there); otherwise a lock and a copy into a 64 KiB buffer per datagram. The
//!   buffer is written out when full, when a device's NIC thread goes idle, when the last
//!   device using the file closes, and when the process exits normally (`exit`, or returning
//!   from `main`) with devices still open, as C programs often do (an `atexit` handler).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use verbs_api::{Errno, Error, Result};

use super::env::PID_PLACEHOLDER;
use crate::engine::{Egress, SendOutcome};
use crate::packet::PcapWriter;

/// Bytes buffered before a write to the file.
const BUFFER: usize = 64 * 1024;

/// The captures this process has open, by file name, so that devices asking for the same file
/// share it.
static OPEN: Mutex<BTreeMap<PathBuf, Weak<Capture>>> = Mutex::new(BTreeMap::new());

/// Registers [`flush_at_exit`] once, with the first capture.
static AT_EXIT: std::sync::Once = std::sync::Once::new();

/// Write out every open capture's buffer: the process is exiting, and a program that never
/// closed its devices (or whose NIC threads were busy to the end) would otherwise lose the
/// datagrams since the last flush. Other threads still run during `atexit`, so this takes the
/// same locks as they do, one capture at a time.
extern "C" fn flush_at_exit() {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    for c in open.values().filter_map(Weak::upgrade) {
        c.flush();
    }
}

/// One open capture file and what it needs to tell the process's own datagrams apart.
pub(crate) struct Capture {
    path: PathBuf,
    /// Where the wall clock was when `epoch` was taken (nanoseconds since 1970).
    wall_at_epoch: u64,
    epoch: Instant,
    inner: Mutex<Inner>,
}

struct Inner {
    /// None once a write failed (reported once on stderr): the capture stops there.
    out: Option<PcapWriter<BufWriter<File>>>,
    /// The IPv4 addresses of the devices writing here: their datagrams are recorded when sent.
    local: Vec<[u8; 4]>,
}

/// `name` with `{pid}` replaced by this process's id.
pub(crate) fn expand(name: &Path) -> PathBuf {
    match name.to_str() {
        Some(s) if s.contains(PID_PLACEHOLDER) => {
            PathBuf::from(s.replace(PID_PLACEHOLDER, &std::process::id().to_string()))
        }
        _ => name.to_path_buf(),
    }
}

impl Capture {
    /// The capture of `name` (`{pid}` expanded): the one this process has open, or a new file
    /// (truncated, locked against other processes). `origin` names where the name came from
    /// (`SOFTVERBS_PCAP`, `--pcap`) in errors.
    pub(crate) fn open(name: &Path, origin: &str) -> Result<Arc<Capture>> {
        let path = expand(name);
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(&path).and_then(Weak::upgrade) {
            return Ok(c);
        }
        let fail =
            |what: String| Error::new(Errno::Io, format!("{origin}={}: {what}", name.display()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| fail(format!("cannot create {}: {e}", path.display())))?;
        lock_exclusive(&file).map_err(|e| {
            fail(format!(
                "{} is being written by another process ({e}); put {PID_PLACEHOLDER} in the \
                 name to give each process its own file",
                path.display()
            ))
        })?;
        file.set_len(0).map_err(|e| fail(format!("cannot truncate {}: {e}", path.display())))?;
        let out = PcapWriter::new(BufWriter::with_capacity(BUFFER, file))
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
        let wall_at_epoch =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let c = Arc::new(Capture {
            path: path.clone(),
            wall_at_epoch,
            epoch: Instant::now(),
            inner: Mutex::new(Inner { out: Some(out), local: Vec::new() }),
        });
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(path, Arc::downgrade(&c));
        AT_EXIT.call_once(|| {
            // SAFETY: registers a function that takes no arguments and touches only this
            // module's statics; a failure to register (no room) leaves the other flushes.
            unsafe { libc::atexit(flush_at_exit) };
        });
        Ok(c)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A device with IPv4 address `ip` writes here from now on.
    pub(crate) fn join(&self, ip: [u8; 4]) {
        self.lock().local.push(ip);
    }

    /// The device with address `ip` closed: write out what is buffered.
    pub(crate) fn leave(&self, ip: [u8; 4]) {
        let mut inner = self.lock();
        if let Some(i) = inner.local.iter().position(|&l| l == ip) {
            inner.local.swap_remove(i);
        }
        self.flush_locked(&mut inner);
    }

    /// Write out what is buffered (a device went idle).
    pub(crate) fn flush(&self) {
        self.flush_locked(&mut self.lock());
    }

    fn flush_locked(&self, inner: &mut Inner) {
        if let Some(Err(e)) = inner.out.as_mut().map(PcapWriter::flush) {
            self.failed(inner, e);
        }
    }

    fn failed(&self, inner: &mut Inner, e: std::io::Error) {
        inner.out = None;
        eprintln!(
            "softverbs: writing the capture {} failed: {e}; it stops here",
            self.path.display()
        );
    }

    /// Record one datagram (the device's tap calls this): every one sent, and those
    /// `received` from outside the process.
    pub(crate) fn record(&self, received: bool, datagram: &[u8]) {
        let time = self.wall_at_epoch + self.epoch.elapsed().as_nanos() as u64;
        let mut inner = self.lock();
        if received {
            let src = datagram.get(12..16).unwrap_or(&[]);
            if inner.local.iter().any(|l| l[..] == *src) {
                return;
            }
        }
        if let Some(Err(e)) = inner.out.as_mut().map(|w| w.write_datagram(time, datagram)) {
            self.failed(&mut inner, e);
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(Err(e)) = inner.out.take().map(|w| w.into_inner()) {
            eprintln!("softverbs: writing the capture {} failed: {e}", self.path.display());
        }
    }
}

/// A port's sending half (or its other layers) whose datagrams a capture records, each one
/// that went into a peer's inbox.
pub(crate) struct Captured<S> {
    inner: S,
    capture: Arc<Capture>,
}

impl<S: Egress> Captured<S> {
    pub(crate) fn new(inner: S, capture: Arc<Capture>) -> Captured<S> {
        Captured { inner, capture }
    }
}

impl<S: Egress> Egress for Captured<S> {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let outcome = self.inner.send(dst, datagram);
        if outcome == SendOutcome::Sent {
            self.capture.record(false, datagram);
        }
        outcome
    }

    fn release(&mut self) -> bool {
        self.inner.release()
    }

    // Looking at datagrams loses none.
    fn peer_busy(&self, dst: [u8; 4]) -> bool {
        self.inner.peer_busy(dst)
    }
}

/// Take an exclusive advisory lock on `file` without waiting (held until it is closed).
#[cfg(unix)]
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows open; no memory is passed.
    match unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(unix))]
fn lock_exclusive(_file: &File) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own for one test, removed with what it holds when dropped, even when
    /// the test fails.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("softverbs-capture-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn pid_in_the_name_is_this_process_and_one_file_is_shared() {
        let dir = TempDir::new("shared");
        let name = dir.0.join("run-{pid}.pcap");
        let a = Capture::open(&name, "SOFTVERBS_PCAP").unwrap();
        let b = Capture::open(&name, "SOFTVERBS_PCAP").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "devices of one process share the file");
        let path = name.with_file_name(format!("run-{}.pcap", std::process::id()));
        assert_eq!(a.path, path);
        // Sent datagrams are recorded; received ones from a device of the process are not.
        a.join([10, 0, 0, 1]);
        let mut d = [0u8; 40];
        d[12..16].copy_from_slice(&[10, 0, 0, 1]);
        a.record(false, &d);
        a.record(true, &d);
        d[12..16].copy_from_slice(&[10, 0, 0, 9]);
        a.record(true, &d);
        drop((a, b));
        assert_eq!(std::fs::read(&path).unwrap().len(), 24 + 2 * (16 + 14 + 40));
    }

    #[test]
    fn a_file_another_writer_holds_is_refused_naming_the_variable() {
        let dir = TempDir::new("held");
        let path = dir.0.join("held.pcap");
        let held = File::create(&path).unwrap();
        lock_exclusive(&held).unwrap();
        let e = Capture::open(&path, "SOFTVERBS_PCAP").err().expect("refused");
        assert_eq!(e.errno, Errno::Io);
        assert!(
            e.message.starts_with(&format!("SOFTVERBS_PCAP={}: ", path.display()))
                && e.message.contains("being written by another process")
                && e.message.contains("{pid}"),
            "{}",
            e.message
        );
        let e = Capture::open(Path::new("/nonexistent-dir/x.pcap"), "--pcap").err().unwrap();
        assert!(
            e.message.starts_with("--pcap=/nonexistent-dir/x.pcap: cannot create"),
            "{}",
            e.message
        );
    }
}
