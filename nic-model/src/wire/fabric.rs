//! A fabric: the directory whose segment files are the ports' inboxes. Allocates LIDs,
//! connects senders, lists what is there and cleans up after dead processes.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use verbs_api::Gid;

use super::layout::{
    self, Geometry, Header, HEADER_READ_LEN, HEADER_SIZE, MAGIC, MAX_LID, OFF_HEAD, OFF_TAIL,
    SLOT_OFF_SEQ,
};
use super::os::{self, FileLock};
use super::segment::Segment;
use super::{Inbox, Sender, WireError};
use crate::engine::ip_of_slot;

/// Environment variable that overrides the default fabric directory.
pub const FABRIC_ENV: &str = "SOFTVERBS_FABRIC";

/// Name of the lock file that serialises LID allocation and cleaning. It holds the last LID
/// allocated (2 bytes, big-endian; anything else reads as none), where the next allocation
/// starts looking.
const LOCK_NAME: &str = ".lock";

/// Sizes and identity of a new inbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboxConfig {
    /// Ring slots: a power of two in 2..=65536.
    pub slots: u32,
    /// Bytes per slot, the largest packet: a multiple of 64 in 64..=65536.
    pub slot_size: u32,
    /// The port's GID, published in the segment header for senders and `softverbs fabric`.
    /// All zeros (the default) means the GID the fabric assigns with the LID,
    /// [`Fabric::port_gid`]: the zero GID is never a port's address.
    pub gid: [u8; 16],
}

impl Default for InboxConfig {
    /// 1024 slots of 4352 bytes: a 4096-byte MTU payload plus every RoCEv2 header.
    fn default() -> InboxConfig {
        InboxConfig { slots: 1024, slot_size: 4352, gid: [0; 16] }
    }
}

/// One file of a fabric directory, as [`Fabric::list`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    /// From the file name `port-<lid>.inbox`; None for any other name.
    pub lid: Option<u16>,
    pub owner_pid: Option<u32>,
    /// Whether the owner process is running (false when unknown).
    pub alive: bool,
    pub gid: Option<[u8; 16]>,
    pub slots: Option<u32>,
    pub slot_size: Option<u32>,
    /// Why the file is not a usable inbox, if it is not one; a problem only a stray write into
    /// the segment can cause starts with [`CORRUPTED`](super::CORRUPTED).
    pub problem: Option<String>,
}

/// A port's counters as its owner last published them ([`Fabric::read_counters`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedCounters {
    pub lid: u16,
    pub owner_pid: u32,
    /// The port's GID, as its segment header carries it.
    pub gid: [u8; 16],
    /// The owner's device name (`softverbs0`), empty if it has not written one yet.
    pub label: String,
    /// The counter words, in the owner's order (`soft::counters::COUNTERS`).
    pub values: Vec<u64>,
}

/// What may be done with an existing port file, judged under the fabric lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// In use, or not ours to touch.
    Keep,
    /// A softverbs segment whose owner is gone, or a truncated file left by a creator that
    /// died (creation happens under the lock, so under the lock no creation is in progress).
    Reclaim,
}

/// A fabric directory (see the module documentation).
#[derive(Clone, Debug)]
pub struct Fabric {
    dir: PathBuf,
}

/// Where a fabric lives: `explicit`, else `$SOFTVERBS_FABRIC`, else a per-user directory
/// under /dev/shm (or the temporary directory where there is no /dev/shm).
fn resolve_dir(explicit: Option<&Path>, env: Option<OsString>, uid: u32) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    if let Some(dir) = env.filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    base.join(format!("softverbs-{uid}"))
}

/// Parses `port-<lid>.inbox` (canonical decimal, unicast range).
fn lid_of_name(name: &str) -> Option<u16> {
    let digits = name.strip_prefix("port-")?.strip_suffix(".inbox")?;
    let lid: u16 = digits.parse().ok()?;
    (lid != 0 && lid <= MAX_LID && digits == lid.to_string()).then_some(lid)
}

impl Fabric {
    /// Opens the fabric directory: `explicit` if given, else `$SOFTVERBS_FABRIC` if set, else
    /// `/dev/shm/softverbs-<uid>` (`<temp dir>/softverbs-<uid>` without /dev/shm). A missing
    /// directory is created with mode 0700; an existing one must be a directory, not a
    /// symbolic link ([`WireError::UnsafeDir`]), belong to this user
    /// ([`WireError::ForeignDir`]) and have mode 0700 ([`WireError::UnsafeDir`]). For a program
    /// that attaches ports; one that only looks uses [`Fabric::open_existing`].
    pub fn open(explicit: Option<&Path>) -> Result<Fabric, WireError> {
        let fabric = Fabric::locate(explicit);
        fabric.create_dir()?;
        Ok(fabric)
    }

    /// Opens the fabric directory as [`Fabric::open`] does, but never creates it: a missing
    /// one is [`WireError::NoFabric`]. For listing, cleaning, and a [`Soft`](crate::soft::Soft)
    /// that creates it only when it attaches its first port.
    pub fn open_existing(explicit: Option<&Path>) -> Result<Fabric, WireError> {
        let fabric = Fabric::locate(explicit);
        fabric.check_dir()?;
        Ok(fabric)
    }

    /// The fabric directory [`Fabric::open`] would use, untouched (it may not exist).
    pub fn locate(explicit: Option<&Path>) -> Fabric {
        let dir = resolve_dir(explicit, std::env::var_os(FABRIC_ENV), os::effective_uid());
        Fabric { dir }
    }

    /// Creates the directory (mode 0700, its missing parents too) unless it exists, then
    /// checks it as [`Fabric::open_existing`] does. Only the directory's own last component is
    /// created here with `mkdir`, so a symbolic link planted in its place is found, not
    /// followed; the mode is set on the opened directory, not through its path.
    pub fn create_dir(&self) -> Result<(), WireError> {
        let dir = &self.dir;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| WireError::io(parent, e))?;
        }
        let created = match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(WireError::io(dir, e)),
        };
        self.open_dir(created).map(drop)
    }

    /// The directory exists, is a directory (not a symbolic link to one), belongs to this
    /// user and has mode 0700.
    fn check_dir(&self) -> Result<(), WireError> {
        self.open_dir(false).map(drop)
    }

    /// Opens the directory itself (`O_DIRECTORY | O_NOFOLLOW`: a symbolic link in its place
    /// fails instead of being followed) and checks what the descriptor is, so that nothing can
    /// be swapped in between the check and the use. `created`: this process has just made it,
    /// so a mode the umask narrowed is set to 0700 (through the descriptor).
    fn open_dir(&self, created: bool) -> Result<File, WireError> {
        let dir = &self.dir;
        let unsafe_dir = |what: String| WireError::UnsafeDir { path: dir.clone(), what };
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WireError::NoFabric { dir: dir.clone() })
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                let what = match fs::symlink_metadata(dir) {
                    Ok(meta) if meta.file_type().is_symlink() => match fs::read_link(dir) {
                        Ok(to) => format!("it is a symbolic link (to {})", to.display()),
                        Err(_) => "it is a symbolic link".to_string(),
                    },
                    _ => "it is not a directory".to_string(),
                };
                return Err(unsafe_dir(what));
            }
            Err(e) => return Err(WireError::io(dir, e)),
        };
        let meta = file.metadata().map_err(|e| WireError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(unsafe_dir("it is not a directory".to_string()));
        }
        let uid = os::effective_uid();
        if meta.uid() != uid {
            return Err(WireError::ForeignDir { path: dir.clone(), uid: meta.uid() });
        }
        let mut mode = meta.mode() & 0o7777;
        if created && mode != 0o700 {
            file.set_permissions(Permissions::from_mode(0o700))
                .map_err(|e| WireError::io(dir, e))?;
            mode = 0o700;
        }
        if mode != 0o700 {
            return Err(unsafe_dir(format!(
                "it has mode {mode:04o}, so other users can reach its segments \
                 (`chmod 700 {}` makes it private)",
                dir.display()
            )));
        }
        Ok(file)
    }

    /// The GID the fabric gives the port with this LID, as a subnet manager assigns addresses:
    /// the IPv4-mapped form (`::ffff:10.0.x.y`) of the port's IPv4 address
    /// ([`ip_of_slot`](crate::engine::ip_of_slot)), which the port reports at GID index 1.
    pub fn port_gid(lid: u16) -> [u8; 16] {
        Gid::from_ipv4(ip_of_slot(lid)).0
    }

    /// The fabric directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment file of the port with this LID (whether or not it exists).
    pub fn inbox_path(&self, lid: u16) -> PathBuf {
        self.dir.join(format!("port-{lid}.inbox"))
    }

    /// Takes the fabric lock, after checking the directory again: every file of the fabric
    /// is created under it, so none is created in a directory that was swapped meanwhile.
    fn lock(&self) -> Result<FileLock, WireError> {
        self.check_dir()?;
        let path = self.dir.join(LOCK_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| WireError::io(&path, e))?;
        let meta = file.metadata().map_err(|e| WireError::io(&path, e))?;
        let uid = os::effective_uid();
        if !meta.is_file() || meta.uid() != uid {
            return Err(WireError::io(
                &path,
                io::Error::other(format!(
                    "the fabric's lock file is not a regular file owned by this user (uid {uid})"
                )),
            ));
        }
        FileLock::acquire(file).map_err(|e| WireError::io(&path, e))
    }

    /// Creates this process's inbox for a new port, with the next free LID after the last one
    /// allocated in this fabric, round the space 1..=MAX_LID: a freed LID is handed out again
    /// only once every other has been, so that packets still on their way to a port that
    /// went away do not reach the next process to open one. A port file whose owner is dead
    /// counts as free: it is removed and its LID reused.
    pub fn create_inbox(&self, cfg: InboxConfig) -> Result<Inbox, WireError> {
        let geometry = Geometry::new(cfg.slots, cfg.slot_size).map_err(WireError::BadConfig)?;
        usize::try_from(geometry.total_size()).map_err(|_| {
            WireError::BadConfig(format!(
                "{} slots of {} bytes do not fit in this platform's address space",
                cfg.slots, cfg.slot_size
            ))
        })?;
        let lock = self.lock()?;
        let last = last_lid(lock.file());
        for step in 1..=MAX_LID {
            let lid = ((u32::from(last) + u32::from(step) - 1) % u32::from(MAX_LID) + 1) as u16;
            let path = self.inbox_path(lid);
            let file = match create_new(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let (info, verdict) = inspect(&path);
                    if verdict != Verdict::Reclaim {
                        continue;
                    }
                    remove_if_present(&path)?;
                    tracing::info!(path = %path.display(), lid, owner_pid = info.owner_pid,
                        problem = info.problem.as_deref(),
                        "removed a dead owner's segment to reuse its LID");
                    match create_new(&path) {
                        Ok(file) => file,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                        Err(e) => return Err(WireError::io(&path, e)),
                    }
                }
                Err(e) => return Err(WireError::io(&path, e)),
            };
            let gid = if cfg.gid == [0; 16] { Fabric::port_gid(lid) } else { cfg.gid };
            let header = Header::new(geometry, std::process::id(), os::own_start_time(), lid, gid);
            return match init_inbox(&file, &path, &header) {
                Ok(inbox) => {
                    tracing::info!(fabric = %self.dir.display(), lid, path = %path.display(),
                        slots = cfg.slots, slot_size = cfg.slot_size, "attached a port to the fabric");
                    // Best effort: a cursor not written only makes the next allocation start
                    // earlier; the LID itself is this process's by the exclusive creation.
                    let _ = lock.file().write_all_at(&lid.to_be_bytes(), 0);
                    Ok(inbox)
                }
                Err(e) => {
                    // Best effort: the error that matters is the one being returned.
                    let _ = fs::remove_file(&path);
                    Err(e)
                }
            };
        }
        Err(WireError::NoFreeLid { dir: self.dir.clone() })
    }

    /// Maps the inbox of the port with this LID for sending. Checks owner, magic, layout
    /// version, sizes against the file length, LID and state; every error names the file.
    pub fn connect(&self, lid: u16) -> Result<Sender, WireError> {
        let (seg, header) = self.open_segment(lid)?;
        Ok(Sender::new(seg, &header))
    }

    /// What the owner of the port with this LID last published in its segment's counters
    /// block (the soft backend's port counters, for `softverbs counters`): the same checks
    /// as [`Fabric::connect`], so a foreign, corrupted, closed or dead owner's segment is an
    /// error naming the file.
    pub fn read_counters(&self, lid: u16) -> Result<PublishedCounters, WireError> {
        let (seg, header) = self.open_segment(lid)?;
        let mut label = Vec::with_capacity(layout::LABEL_LEN);
        for i in 0..layout::LABEL_LEN / 8 {
            label.extend_from_slice(&seg.label_word(i).load(Ordering::Relaxed).to_ne_bytes());
        }
        let end = label.iter().position(|&b| b == 0).unwrap_or(label.len());
        let n = (seg.counter_count().load(Ordering::Relaxed) as usize).min(layout::COUNTER_WORDS);
        let values =
            (0..n).filter_map(|i| seg.counter(i).map(|w| w.load(Ordering::Relaxed))).collect();
        Ok(PublishedCounters {
            lid,
            owner_pid: header.owner_pid,
            gid: header.gid,
            label: String::from_utf8_lossy(&label[..end]).into_owned(),
            values,
        })
    }

    /// Opens, maps and checks the inbox of the port with this LID (see [`Fabric::connect`]).
    fn open_segment(&self, lid: u16) -> Result<(Segment, Header), WireError> {
        let path = self.inbox_path(lid);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WireError::NoSuchPort { lid, path })
            }
            Err(e) => return Err(WireError::io(&path, e)),
        };
        let meta = file.metadata().map_err(|e| WireError::io(&path, e))?;
        if !meta.is_file() {
            return Err(WireError::bad_segment(&path, "not a regular file"));
        }
        let uid = os::effective_uid();
        if meta.uid() != uid {
            return Err(WireError::bad_segment(
                &path,
                format!("owned by uid {}, not by this user (uid {uid})", meta.uid()),
            ));
        }
        let (seg, header) = Segment::open(&file, &path, meta.len())?;
        if header.lid != lid {
            return Err(WireError::bad_segment(
                &path,
                format!("its header says LID {}, its name LID {lid}", header.lid),
            ));
        }
        if header.state == super::layout::STATE_CLOSED {
            return Err(WireError::Closed { path });
        }
        super::layout::check_state(header.state).map_err(|w| WireError::bad_segment(&path, w))?;
        if !os::process_alive(header.owner_pid, header.owner_start) {
            return Err(WireError::OwnerDead { path, pid: header.owner_pid });
        }
        Ok((seg, header))
    }

    /// Every file of the fabric directory (but its lock file), sorted by path, with what its
    /// header says and whether its owner is alive; files that are not usable inboxes are
    /// listed with the reason.
    pub fn list(&self) -> Result<Vec<SegmentInfo>, WireError> {
        Ok(self.inspect_all()?.into_iter().map(|(info, _)| info).collect())
    }

    fn inspect_all(&self) -> Result<Vec<(SegmentInfo, Verdict)>, WireError> {
        let entries = fs::read_dir(&self.dir).map_err(|e| WireError::io(&self.dir, e))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| WireError::io(&self.dir, e))?;
            if entry.file_name() == LOCK_NAME
                || super::reach::is_reach_file(&entry.path())
                || super::mcast::is_mcast_file(&entry.path())
            {
                continue;
            }
            found.push(inspect(&entry.path()));
        }
        found.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        Ok(found)
    }

    /// Removes the segments whose owner process is dead (and truncated port files that a
    /// dying creator left); returns what was removed. Files of live owners, of other users,
    /// of other layout versions and with other names are never touched.
    pub fn clean(&self) -> Result<Vec<SegmentInfo>, WireError> {
        let _lock = self.lock()?;
        let mut removed = Vec::new();
        for (info, verdict) in self.inspect_all()? {
            if verdict == Verdict::Reclaim {
                remove_if_present(&info.path)?;
                tracing::info!(path = %info.path.display(), lid = info.lid,
                    owner_pid = info.owner_pid, problem = info.problem.as_deref(),
                    "removed a dead owner's segment");
                removed.push(info);
            }
        }
        // Reach files beside the inboxes go with their owners (they are not listed).
        for entry in fs::read_dir(&self.dir).map_err(|e| WireError::io(&self.dir, e))?.flatten() {
            let path = entry.path();
            if super::reach::is_reach_file(&path) && super::reach::owner_gone(&path) {
                remove_if_present(&path)?;
                tracing::info!(path = %path.display(), "removed a dead owner's reach file");
            }
        }
        // Multicast memberships of ports that are gone (wire/mcast.rs).
        super::mcast::clean_groups(&self.dir, |lid| !self.inbox_path(lid).exists())?;
        Ok(removed)
    }
}

/// The last LID allocated, as the lock file records it (0: none, or unreadable).
fn last_lid(lock: &File) -> u16 {
    let mut bytes = [0; 2];
    match lock.read_exact_at(&mut bytes, 0) {
        Ok(()) => Some(u16::from_be_bytes(bytes)).filter(|&lid| lid <= MAX_LID).unwrap_or(0),
        Err(_) => 0,
    }
}

fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn remove_if_present(path: &Path) -> Result<(), WireError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WireError::io(path, e)),
    }
}

/// Sizes, initialises and maps a freshly created port file.
pub(crate) fn init_inbox(file: &File, path: &Path, header: &Header) -> Result<Inbox, WireError> {
    // The umask may have narrowed the creation mode; 0600 is what the fabric promises.
    file.set_permissions(Permissions::from_mode(0o600)).map_err(|e| WireError::io(path, e))?;
    os::reserve(file, header.total_size).map_err(|e| WireError::io(path, e))?;
    let meta = file.metadata().map_err(|e| WireError::io(path, e))?;
    let seg = Segment::init(file, path, header)?;
    let inbox = Inbox::new(seg, header.lid, header.gid, (meta.dev(), meta.ino()));
    super::at_exit::remove_at_exit(path);
    Ok(inbox)
}

/// Reads whatever a file of the fabric directory says about itself.
fn inspect(path: &Path) -> (SegmentInfo, Verdict) {
    let lid = path.file_name().and_then(|n| n.to_str()).and_then(lid_of_name);
    let mut info = SegmentInfo {
        path: path.to_path_buf(),
        lid,
        owner_pid: None,
        alive: false,
        gid: None,
        slots: None,
        slot_size: None,
        problem: None,
    };
    let verdict = inspect_into(path, &mut info).unwrap_or_else(|problem| {
        info.problem = Some(problem);
        Verdict::Keep
    });
    (info, verdict)
}

/// Fills `info`; `Err` is a problem that leaves the file alone.
fn inspect_into(path: &Path, info: &mut SegmentInfo) -> Result<Verdict, String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    let uid = os::effective_uid();
    if meta.uid() != uid {
        return Err(format!("owned by uid {}, not by this user (uid {uid})", meta.uid()));
    }
    let Some(lid) = info.lid else {
        return Err("not a port segment (expected a name like port-<lid>.inbox)".to_string());
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let mut bytes = [0u8; HEADER_READ_LEN];
    let got = read_prefix(&file, &mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    let file_len = meta.len();
    let header = match Header::parse(&bytes[..got], file_len) {
        Ok(header) => header,
        Err(problem) => {
            // A short file that holds nothing but (a prefix of) our magic or zeros is what
            // a creator leaves when it dies between creating and sizing the file.
            let prefix = &bytes[..got.min(MAGIC.len())];
            let ours = file_len < HEADER_SIZE as u64
                && (prefix.iter().all(|&b| b == 0) || MAGIC.starts_with(prefix));
            info.problem = Some(problem);
            return Ok(if ours { Verdict::Reclaim } else { Verdict::Keep });
        }
    };
    info.owner_pid = Some(header.owner_pid);
    info.gid = Some(header.gid);
    info.slots = Some(header.slots);
    info.slot_size = Some(header.slot_size);
    info.alive = os::process_alive(header.owner_pid, header.owner_start);
    info.problem = match header.check(file_len) {
        Err(problem) => Some(problem),
        Ok(_) if header.lid != lid => {
            Some(format!("its header says LID {}, its name LID {lid}", header.lid))
        }
        Ok(_) => None,
    };
    if let Ok(geometry) = header.check_geometry(file_len) {
        if let Some(ring) = ring_problem(&file, geometry) {
            info.problem = Some(match info.problem.take() {
                Some(first) => format!("{first}; {ring}"),
                None => ring,
            });
        }
    }
    Ok(if info.alive { Verdict::Keep } else { Verdict::Reclaim })
}

/// What is impossible about the ring of a segment file (see [`layout::ring_problem`]), read
/// without mapping it: only a reading that two snapshots in a row agree on counts, so a busy
/// ring (whose words move between the reads) is never reported, and a wedged one always is.
fn ring_problem(file: &File, geometry: Geometry) -> Option<String> {
    let word = |off: usize, len: usize| -> Option<u64> {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b[..len], off as u64).ok()?;
        Some(match len {
            4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            _ => u64::from_ne_bytes(b),
        })
    };
    let snapshot = || -> Option<(u64, u64, u32)> {
        let head = word(OFF_HEAD, 8)?;
        let tail = word(OFF_TAIL, 8)?;
        let index = head & (u64::from(geometry.slots) - 1);
        let seq = word(geometry.slot_offset(index) + SLOT_OFF_SEQ, 4)? as u32;
        (word(OFF_HEAD, 8)? == head).then_some((head, tail, seq))
    };
    let mut last = None;
    for _ in 0..8 {
        let now = snapshot();
        if now.is_some() && now == last {
            let (head, tail, seq) = now?;
            return layout::ring_problem(geometry.slots, head, tail, seq);
        }
        last = now;
    }
    None
}

/// Reads up to `buf.len()` bytes from the start of `file`; returns how many there were.
fn read_prefix(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_resolution_order() {
        let explicit = Path::new("/x/explicit");
        assert_eq!(resolve_dir(Some(explicit), Some("/y/env".into()), 7), explicit);
        assert_eq!(resolve_dir(None, Some("/y/env".into()), 7), Path::new("/y/env"));
        let default = resolve_dir(None, Some("".into()), 7);
        assert_eq!(default, resolve_dir(None, None, 7));
        assert!(default.ends_with("softverbs-7"));
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(default, Path::new("/dev/shm/softverbs-7"));
        }
    }

    #[test]
    fn a_new_inbox_publishes_the_gid_of_its_lid() {
        /// Removes the directory however the test ends.
        struct Dir(PathBuf);
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = fs::remove_dir_all(&self.0);
            }
        }
        let dir = Dir(std::env::temp_dir().join(format!("softverbs-gid-{}", std::process::id())));
        let _ = fs::remove_dir_all(&dir.0);
        let fabric = Fabric::open(Some(&dir.0)).expect("open a fresh fabric");
        let first = fabric.create_inbox(InboxConfig::default()).expect("create inbox");
        let second = fabric.create_inbox(InboxConfig::default()).expect("create inbox");
        let listed = fabric.list().expect("list");
        for inbox in [&first, &second] {
            // The GID a port reports (ibv_query_gid) is the one in its segment header.
            let gid =
                verbs_api::Gid::from_ipv4(crate::engine::NicConfig::new("x", inbox.lid()).ip()).0;
            assert_eq!(inbox.gid(), gid);
            let info = listed.iter().find(|i| i.lid == Some(inbox.lid())).expect("listed");
            assert_eq!(info.gid, Some(gid));
        }
        assert_eq!(first.gid(), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]);
        assert_eq!(second.gid(), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
    }

    #[test]
    fn port_names() {
        assert_eq!(lid_of_name("port-1.inbox"), Some(1));
        assert_eq!(lid_of_name("port-49151.inbox"), Some(0xBFFF));
        assert_eq!(lid_of_name("port-49152.inbox"), None);
        assert_eq!(lid_of_name("port-0.inbox"), None);
        assert_eq!(lid_of_name("port-01.inbox"), None);
        assert_eq!(lid_of_name("port-+1.inbox"), None);
        assert_eq!(lid_of_name("port-1.inbox.tmp"), None);
        assert_eq!(lid_of_name("notes.txt"), None);
    }
}
