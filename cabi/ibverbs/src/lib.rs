//! softverbs as `libibverbs.so.1`: the libibverbs C ABI (rdma-core 44's symbols, version nodes
//! and object layouts) over the soft backend, so unmodified C verbs programs run on soft
//! devices, on the same shared-memory fabric (`SOFTVERBS_FABRIC`) as Rust programs.
//!
//! Every exported function is `#[no_mangle] extern "C"` with the name libibverbs gives it;
//! `build.rs` puts each in the version node `symbols.txt` names. The objects handed to C
//! (`ibv_context`, `ibv_cq`, `ibv_qp`, ...) are boxes whose first field is the C struct, so a
//! pointer to the C struct is a pointer to the box; a magic word after it catches destroyed and
//! foreign objects where that can be seen. docs/c.md is the user's guide.
#![allow(clippy::missing_safety_doc)]

mod convert;
mod cq_ex;
mod device;
mod extra;
mod mw;
mod object;
mod ops;
mod qp;
mod qp_ex;
mod srq_ah;
mod strs;
mod stubs;
mod verbs;

use std::ffi::c_int;
use std::sync::OnceLock;

use nic_model::soft::Soft;
use verbs_api::Error;

// Each exported symbol's version node, generated from symbols.txt by build.rs.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/symver.s")));

/// The soft devices of this process: the shared-memory fabric of `SOFTVERBS_FABRIC` (or the
/// default directory), opened on the first verb that needs it.
fn soft() -> Result<&'static Soft, &'static Error> {
    static SOFT: OnceLock<Result<Soft, Error>> = OnceLock::new();
    SOFT.get_or_init(|| {
        init_log();
        Soft::shared_memory(None)
    })
    .as_ref()
}

/// With `SOFTVERBS_LOG` or `RUST_LOG` set (a tracing filter such as `debug`), log every refused
/// call with its reason to stderr; silent otherwise, as libibverbs is.
fn init_log() {
    let filter = std::env::var("SOFTVERBS_LOG").or_else(|_| std::env::var("RUST_LOG"));
    if let Ok(filter) = filter {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// Set the calling thread's `errno`.
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Log a refused call (`what`: the verb, `why`: the reason) and return `errno` (also set as the
/// thread's `errno`), for the verbs that return an error number.
fn refuse(what: &str, errno: c_int, why: &str) -> c_int {
    // The backend's messages mostly begin with the verb already.
    match why.starts_with(what) {
        true => tracing::warn!(verb = what, errno, "{why}"),
        false => tracing::warn!(verb = what, errno, "{what}: {why}"),
    }
    set_errno(errno);
    errno
}

/// [`refuse`] with a verbs-api error.
fn refuse_err(what: &str, e: &Error) -> c_int {
    refuse(what, e.errno.code(), &e.message)
}

/// Log a refused call, set `errno` and return NULL, for the verbs that return an object.
fn refuse_null<T>(what: &str, errno: c_int, why: &str) -> *mut T {
    refuse(what, errno, why);
    std::ptr::null_mut()
}
