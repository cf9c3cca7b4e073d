//! The thin layer between the `hw` backend and libibverbs: errno capture and messages, `poll(2)`
//! waits on the event file descriptors, and the guarded raw pointers every wrapper holds.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rdma_sys::{ibv_async_event, ibv_context, ibv_cq, ibv_gid_entry, ibv_qp, ibv_srq};

use crate::error::{Errno, Error, Result};

extern "C" {
    /// `_ibv_query_gid_ex` (libibverbs 1.11, rdma-core 32): the function behind the inline
    /// `ibv_query_gid_ex`. rdma-sys generates `struct ibv_gid_entry` but, its allow-list
    /// matching `ibv_*` only, not this underscored symbol, so it is declared here.
    pub(crate) fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int;
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clear `errno`, so that a call which fails without setting it is not blamed on an older error.
pub(crate) fn clear_errno() {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = 0 };
}

/// The symbolic name of an errno value, for messages.
pub(crate) fn errno_name(code: i32) -> Option<&'static str> {
    let name = match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENODATA => "ENODATA",
        libc::ENOSYS => "ENOSYS",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => return None,
    };
    Some(name)
}

/// `strerror` text plus the symbolic name: "Function not implemented (ENOSYS)".
pub(crate) fn describe_errno(code: i32) -> String {
    let text = std::io::Error::from_raw_os_error(code).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match errno_name(code) {
        Some(name) => format!("{text} ({name})"),
        None => format!("{text} (errno {code})"),
    }
}

/// The error of a failed libibverbs call: its errno mapped with [`Errno::from_code`] and a message
/// that names the call, says what it was doing and adds a hint where one helps.
pub(crate) fn call_error(call: &str, code: i32) -> Error {
    let hint = match code {
        libc::ENOMEM if call.starts_with("ibv_reg_mr") => {
            "; the locked-memory limit may be too low (check `ulimit -l`, see docs/hardware.md)"
        }
        libc::EPERM | libc::EACCES => "; check the permissions of /dev/infiniband/*",
        _ => "",
    };
    Error::new(Errno::from_code(code), format!("{call} failed: {}{hint}", describe_errno(code)))
}

/// The errno of a verb that returned `rc != 0`. libibverbs calls document "0 or the errno
/// value", but some providers return `-errno` and some return -1 with `errno` set; all three
/// are understood.
pub(crate) fn rc_errno(rc: c_int) -> i32 {
    match rc {
        r if r > 0 => r,
        -1 => match errno() {
            0 => libc::EIO,
            e => e,
        },
        r => r.checked_neg().unwrap_or(libc::EIO),
    }
}

/// `Ok` for `rc == 0`, else the call's error.
pub(crate) fn check_rc(call: &str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(call_error(call, rc_errno(rc)))
    }
}

/// A non-null pointer returned by a call, else the call's error from `errno`.
pub(crate) fn check_ptr<T>(call: &str, p: *mut T) -> Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(|| {
        let e = errno();
        call_error(call, if e == 0 { libc::EIO } else { e })
    })
}

/// An integer argument that must fit a C `int`.
pub(crate) fn to_c_int(
    what: &str,
    v: impl TryInto<c_int> + Copy + std::fmt::Display,
) -> Result<c_int> {
    v.try_into().map_err(|_| Error::inval(format!("{what} {v} does not fit a C int")))
}

/// Put a file descriptor in non-blocking mode, so that a read after `poll(2)` never blocks when
/// another thread took the event first.
pub(crate) fn set_nonblocking(call: &str, fd: c_int) -> Result<()> {
    // SAFETY: F_GETFL on a descriptor only reads its flags; an invalid fd gives -1/EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(call_error(call, errno()));
    }
    // SAFETY: F_SETFL with the old flags plus O_NONBLOCK changes only the blocking mode.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(call_error(call, errno()));
    }
    Ok(())
}

/// When a bounded wait ends.
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now().checked_add(t).unwrap_or_else(far_future))
}

fn far_future() -> Instant {
    // About 30 years: effectively forever, and still representable.
    Instant::now() + Duration::from_secs(1 << 30)
}

/// Wait with `poll(2)` until `fd` is readable (or in error, so the following read reports it).
/// `Ok(false)` when the deadline passed first; `None` waits forever.
pub(crate) fn wait_readable(call: &str, fd: c_int, deadline: Option<Instant>) -> Result<bool> {
    loop {
        let timeout_ms: c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so that a wait never ends early; clamp to what poll(2) takes.
                let ms = left.as_nanos().div_ceil(1_000_000);
                c_int::try_from(ms).unwrap_or(c_int::MAX)
            }
        };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is one valid pollfd that lives across the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc > 0 {
            return Ok(true);
        }
        if rc == 0 {
            match deadline {
                Some(d) if Instant::now() < d => continue,
                _ => return Ok(false),
            }
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(call_error(&format!("{call}: poll(2)"), e));
        }
    }
}

/// A libibverbs object that is destroyed only when its wrapper is dropped.
pub(crate) struct Owned<T>(NonNull<T>);

impl<T> Owned<T> {
    pub(crate) fn new(p: NonNull<T>) -> Owned<T> {
        Owned(p)
    }
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }
}

// SAFETY: libibverbs objects may be used from any thread (verbs are thread-safe per the
// libibverbs documentation); `Owned` only hands out the pointer, and the owner destroys the
// object once, in `Drop`, when no other reference to the wrapper remains.
unsafe impl<T> Send for Owned<T> {}
// SAFETY: as above; concurrent verbs on one object are serialized by the provider.
unsafe impl<T> Sync for Owned<T> {}

/// A libibverbs object that can also be destroyed explicitly. Verbs take the read lock (shared,
/// uncontended, no syscall), destruction takes the write lock, so no verb ever sees a freed
/// object; after destruction verbs fail with `EINVAL`.
pub(crate) struct Guarded<T> {
    ptr: RwLock<*mut T>,
    what: &'static str,
}

// SAFETY: libibverbs objects are thread-safe; the lock orders every use of the pointer before
// its destruction, and a destroyed object is represented by null and never dereferenced.
unsafe impl<T> Send for Guarded<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Guarded<T> {}

/// A read lock on a live object.
pub(crate) struct Live<'a, T> {
    guard: RwLockReadGuard<'a, *mut T>,
}

impl<T> Live<'_, T> {
    pub(crate) fn ptr(&self) -> *mut T {
        *self.guard
    }
}

impl<T> Guarded<T> {
    pub(crate) fn new(p: NonNull<T>, what: &'static str) -> Guarded<T> {
        Guarded { ptr: RwLock::new(p.as_ptr()), what }
    }

    /// The object for one verb, or `EINVAL` naming the call if it was destroyed.
    pub(crate) fn live(&self, call: &str) -> Result<Live<'_, T>> {
        let guard = self.ptr.read().unwrap_or_else(|e| e.into_inner());
        if guard.is_null() {
            return Err(Error::inval(format!("{call}: the {} was already destroyed", self.what)));
        }
        Ok(Live { guard })
    }

    /// The current pointer (null once destroyed), for FFI callers.
    pub(crate) fn peek(&self) -> *mut T {
        *self.ptr.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Destroy with `f` (which returns the verb's rc); on success the object is gone for good.
    pub(crate) fn destroy(&self, call: &str, f: impl FnOnce(*mut T) -> c_int) -> Result<()> {
        let mut guard = self.ptr.write().unwrap_or_else(|e| e.into_inner());
        if guard.is_null() {
            return Err(Error::inval(format!("{call}: the {} was already destroyed", self.what)));
        }
        clear_errno();
        check_rc(call, f(*guard))?;
        *guard = std::ptr::null_mut();
        Ok(())
    }

    /// In `Drop`: destroy if still alive, ignoring errors.
    pub(crate) fn destroy_on_drop(&mut self, f: impl FnOnce(*mut T) -> c_int) {
        let p = self.ptr.get_mut().unwrap_or_else(|e| e.into_inner());
        if !p.is_null() {
            let _ = f(*p);
            *p = std::ptr::null_mut();
        }
    }
}

/// `union` of `struct ibv_async_event`'s `element`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union RawAsyncElement {
    pub(crate) cq: *mut ibv_cq,
    pub(crate) qp: *mut ibv_qp,
    pub(crate) srq: *mut ibv_srq,
    pub(crate) wq: *mut c_void,
    pub(crate) port_num: c_int,
}

/// `struct ibv_async_event` with `event_type` as a plain integer. rdma-sys declares it as a Rust
/// enum, and a value the enum does not list (a newer kernel's event) would be undefined
/// behaviour to read; this twin has the same layout and reads any value safely.
#[repr(C)]
pub(crate) struct RawAsyncEvent {
    pub(crate) element: RawAsyncElement,
    pub(crate) event_type: c_uint,
}

const _: () = assert!(
    std::mem::size_of::<RawAsyncEvent>() == std::mem::size_of::<ibv_async_event>()
        && std::mem::align_of::<RawAsyncEvent>() == std::mem::align_of::<ibv_async_event>()
);

impl RawAsyncEvent {
    pub(crate) fn as_ffi(&mut self) -> *mut ibv_async_event {
        (self as *mut RawAsyncEvent).cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_errno_understands_every_convention() {
        assert_eq!(rc_errno(libc::EINVAL), libc::EINVAL);
        assert_eq!(rc_errno(-libc::ENOMEM), libc::ENOMEM);
        clear_errno();
        assert_eq!(rc_errno(-1), libc::EIO);
    }

    #[test]
    fn messages_name_the_call_and_the_errno() {
        let e = call_error("ibv_get_device_list", libc::ENOSYS);
        assert_eq!(e.errno, Errno::NoSys);
        assert_eq!(e.message, "ibv_get_device_list failed: Function not implemented (ENOSYS)");
        let e = call_error("ibv_reg_mr", libc::ENOMEM);
        assert_eq!(e.errno, Errno::NoMem);
        assert!(e.message.contains("ulimit -l"), "{}", e.message);
    }

    #[test]
    fn wait_readable_times_out_and_sees_data() {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let start = Instant::now();
        let d = deadline(Some(Duration::from_millis(20)));
        assert!(!wait_readable("test", fds[0], d).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(20));
        // SAFETY: writes one byte from a live buffer to the pipe we own.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        assert!(wait_readable("test", fds[0], deadline(Some(Duration::ZERO))).unwrap());
        for fd in fds {
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(fd) };
        }
    }
}
