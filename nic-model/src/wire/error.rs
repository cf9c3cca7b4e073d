//! The one error type of the wire: every variant that concerns a file names it, and says what
//! was wrong with it, so that `softverbs fabric` and a failing program both print something a
//! user can act on.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What can go wrong when opening a fabric, creating or connecting to an inbox, or sending.
#[derive(Debug)]
pub enum WireError {
    /// A system call on a fabric file or directory failed.
    Io { path: PathBuf, source: io::Error },
    /// A segment file is not a usable inbox: wrong magic, layout version, sizes, state or owner.
    BadSegment { path: PathBuf, what: String },
    /// No inbox file exists for this LID.
    NoSuchPort { lid: u16, path: PathBuf },
    /// The destination ring has no free slot; the caller retries later or drops the packet.
    Full,
    /// The packet does not fit in one slot of the destination ring.
    TooLarge { len: usize, max: usize },
    /// The process that owns the segment has exited.
    OwnerDead { path: PathBuf, pid: u32 },
    /// The owner closed its inbox (the port went away); reconnect to find its successor.
    Closed { path: PathBuf },
    /// An [`InboxConfig`](super::InboxConfig) value is out of range.
    BadConfig(String),
    /// The fabric directory exists but belongs to another user.
    ForeignDir { path: PathBuf, uid: u32 },
    /// The fabric directory is not one this user alone controls: a symbolic link, not a
    /// directory, or open to other users (not mode 0700). `what` says which.
    UnsafeDir { path: PathBuf, what: String },
    /// Every LID of the unicast range is taken in this fabric.
    NoFreeLid { dir: PathBuf },
    /// The fabric directory does not exist (and was opened for reading only).
    NoFabric { dir: PathBuf },
}

impl WireError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> WireError {
        WireError::Io { path: path.into(), source }
    }

    pub(crate) fn bad_segment(path: impl Into<PathBuf>, what: impl Into<String>) -> WireError {
        WireError::BadSegment { path: path.into(), what: what.into() }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            WireError::BadSegment { path, what } => {
                write!(f, "{}: not a usable inbox segment: {what}", path.display())
            }
            WireError::NoSuchPort { lid, path } => write!(
                f,
                "no port with LID {lid} in the fabric ({} does not exist)",
                path.display()
            ),
            WireError::Full => write!(f, "the destination inbox ring is full"),
            WireError::TooLarge { len, max } => {
                write!(f, "packet of {len} bytes does not fit in an inbox slot of {max} bytes")
            }
            WireError::OwnerDead { path, pid } => {
                write!(f, "{}: the owner process {pid} of this segment is dead", path.display())
            }
            WireError::Closed { path } => {
                write!(f, "{}: the inbox was closed by its owner", path.display())
            }
            WireError::BadConfig(what) => write!(f, "invalid inbox configuration: {what}"),
            WireError::ForeignDir { path, uid } => write!(
                f,
                "fabric directory {} belongs to uid {uid}, not to this user; \
                 choose another directory with SOFTVERBS_FABRIC",
                path.display()
            ),
            WireError::UnsafeDir { path, what } => write!(
                f,
                "fabric directory {} is refused: {what}; a fabric directory must be a real \
                 directory of this user with mode 0700 (fix it, or choose another directory \
                 with SOFTVERBS_FABRIC)",
                path.display()
            ),
            WireError::NoFreeLid { dir } => write!(
                f,
                "no free LID left in fabric {} (every unicast LID has a live inbox)",
                dir.display()
            ),
            WireError::NoFabric { dir } => write!(
                f,
                "fabric directory {} does not exist (no process has opened a soft device on it)",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
