//! One error type for every verb: an errno-style cause plus a message saying what was wrong.

use std::fmt;

/// The errno a libibverbs call would return (`errno` after a failed `ibv_*` call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EINVAL`: an argument, attribute, mask or state is invalid.
    Inval,
    /// `ENOMEM`: a queue is full or a resource limit was reached.
    NoMem,
    /// `EBUSY`: the resource is still in use.
    Busy,
    /// `ENOSYS`: the kernel or provider does not implement the call.
    NoSys,
    /// `ENODEV`: no such device.
    NoDev,
    /// `EAGAIN`: nothing available now (e.g. no completion event yet).
    Again,
    /// `ETIMEDOUT`: a bounded wait ran out.
    TimedOut,
    /// `EPERM` / `EACCES`: not allowed.
    Perm,
    /// `EIO`: the device or wire failed (a corrupted segment, a dead peer).
    Io,
    /// `EOPNOTSUPP`: the operation is not supported by this device.
    NotSup,
    /// `ENODATA`: a table entry within the table's size holds nothing (`ibv_query_gid_ex` on
    /// an empty GID table entry).
    NoData,
    /// `EFAULT`: an address the call was given is not mapped as the call needs it (memory
    /// that `ibv_reg_mr` cannot pin).
    Fault,
    /// `EINTR`: a signal handler ran while the call was blocked, and the call is not
    /// restarted (`ibv_get_cq_event`, as the kernel's read of the event file, when the
    /// handler was installed without `SA_RESTART`).
    Intr,
}

impl Errno {
    /// The C errno value (Linux numbering).
    pub fn code(self) -> i32 {
        match self {
            Errno::Inval => 22,
            Errno::NoMem => 12,
            Errno::Busy => 16,
            Errno::NoSys => 38,
            Errno::NoDev => 19,
            Errno::Again => 11,
            Errno::TimedOut => 110,
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NotSup => 95,
            Errno::NoData => 61,
            Errno::Fault => 14,
            Errno::Intr => 4,
        }
    }

    /// The symbolic name, as `strerror`'s macro (`EINVAL`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Errno::Inval => "EINVAL",
            Errno::NoMem => "ENOMEM",
            Errno::Busy => "EBUSY",
            Errno::NoSys => "ENOSYS",
            Errno::NoDev => "ENODEV",
            Errno::Again => "EAGAIN",
            Errno::TimedOut => "ETIMEDOUT",
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NotSup => "EOPNOTSUPP",
            Errno::NoData => "ENODATA",
            Errno::Fault => "EFAULT",
            Errno::Intr => "EINTR",
        }
    }

    /// Map a C errno value back (unknown values become `EIO`).
    pub fn from_code(code: i32) -> Errno {
        match code {
            22 => Errno::Inval,
            12 => Errno::NoMem,
            16 => Errno::Busy,
            38 => Errno::NoSys,
            19 => Errno::NoDev,
            11 => Errno::Again,
            110 => Errno::TimedOut,
            1 | 13 => Errno::Perm,
            95 => Errno::NotSup,
            61 => Errno::NoData,
            14 => Errno::Fault,
            4 => Errno::Intr,
            _ => Errno::Io,
        }
    }
}

/// The error of every verb: which errno a real NIC's libibverbs would set, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The errno-style cause.
    pub errno: Errno,
    /// What was wrong, naming the argument, attribute or object.
    pub message: String,
    /// For a verb given a list of work requests (`ibv_post_send`, `ibv_post_recv`): the index
    /// of the one refused, which `*bad_wr` names (those before it were posted); None for
    /// other verbs, or when the list as a whole was refused.
    pub wr_index: Option<usize>,
}

impl Error {
    /// An error with this cause and message.
    pub fn new(errno: Errno, message: impl Into<String>) -> Error {
        Error { errno, message: message.into(), wr_index: None }
    }
    /// This error, about the work request at `index` of the list the verb was given.
    pub fn at_wr(mut self, index: usize) -> Error {
        self.wr_index = Some(index);
        self
    }
    /// `EINVAL` with a message.
    pub fn inval(message: impl Into<String>) -> Error {
        Error::new(Errno::Inval, message)
    }
    /// `ENOMEM` with a message.
    pub fn nomem(message: impl Into<String>) -> Error {
        Error::new(Errno::NoMem, message)
    }
    /// `EBUSY` with a message.
    pub fn busy(message: impl Into<String>) -> Error {
        Error::new(Errno::Busy, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// The result of a verb.
pub type Result<T> = std::result::Result<T, Error>;
