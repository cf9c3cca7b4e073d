//! The rest of rdma-core 44's public `libibverbs.so.1` (issue 30): entry points that programs
//! and libraries bind when they load (libfabric binds `ibv_reg_dmabuf_mr`, pyverbs the import
//! and in-order verbs), each answering as libibverbs answers over rxe. rxe's provider has no
//! `rereg_mr`, `reg_dmabuf_mr`, `import_*` or `query_qp_data_in_order` op, so libibverbs runs
//! its dummy op (`libibverbs/dummy_ops.c`): `EOPNOTSUPP`, or 0 for the in-order query. The
//! rate conversions are the pure tables of `libibverbs/verbs.c`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::object::{obj, Magic};
use crate::verbs::Mr;
use crate::{refuse, refuse_null};
use softverbs_cabi_abi::*;

/// `enum ibv_rate` with each rate's multiple of 2.5 Gb/s (-1: none) and its Mb/s, as
/// `ibv_rate_to_mult` and `ibv_rate_to_mbps` give them (verbs.h).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),       // IBV_RATE_2_5_GBPS
    (5, 2, 5000),       // IBV_RATE_5_GBPS
    (3, 4, 10000),      // IBV_RATE_10_GBPS
    (6, 8, 20000),      // IBV_RATE_20_GBPS
    (4, 12, 30000),     // IBV_RATE_30_GBPS
    (7, 16, 40000),     // IBV_RATE_40_GBPS
    (8, 24, 60000),     // IBV_RATE_60_GBPS
    (9, 32, 80000),     // IBV_RATE_80_GBPS
    (10, 48, 120000),   // IBV_RATE_120_GBPS
    (11, -1, 14062),    // IBV_RATE_14_GBPS
    (12, -1, 56250),    // IBV_RATE_56_GBPS
    (13, -1, 112500),   // IBV_RATE_112_GBPS
    (14, -1, 168750),   // IBV_RATE_168_GBPS
    (15, -1, 25781),    // IBV_RATE_25_GBPS
    (16, -1, 103125),   // IBV_RATE_100_GBPS
    (17, -1, 206250),   // IBV_RATE_200_GBPS
    (18, -1, 309375),   // IBV_RATE_300_GBPS
    (19, 11, 28125),    // IBV_RATE_28_GBPS
    (20, 20, 53125),    // IBV_RATE_50_GBPS
    (21, 160, 425000),  // IBV_RATE_400_GBPS
    (22, 240, 637500),  // IBV_RATE_600_GBPS
    (23, 320, 850000),  // IBV_RATE_800_GBPS
    (24, 480, 1275000), // IBV_RATE_1200_GBPS
];

/// `IBV_RATE_MAX`: what the reverse conversions give for a value no rate has.
const IBV_RATE_MAX: c_int = 0;

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, -1 for none.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, `IBV_RATE_MAX` for none.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult && mult > 0).map_or(IBV_RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, -1 for none.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: the rate of a speed in Mb/s, `IBV_RATE_MAX` for none.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(IBV_RATE_MAX, |r| r.0)
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION | _PD | _ACCESS`.
const REREG_FLAGS: c_int = 0b111;
/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
const REREG_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
const REREG_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT`.
const REREG_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`.
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: libibverbs' own input checks (`IBV_REREG_MR_ERR_INPUT`, `EINVAL`), then the
/// provider's op, which rxe lacks: `IBV_REREG_MR_ERR_CMD` with `errno` `EOPNOTSUPP`, the MR
/// unchanged (deregister and register again instead).
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    const W: &str = "ibv_rereg_mr";
    if obj::<Mr, _>(W, mr, Magic::Mr).is_none() {
        return REREG_ERR_INPUT;
    }
    let bad = flags & !REREG_FLAGS != 0
        || (flags & REREG_TRANSLATION != 0 && (length == 0 || addr.is_null()))
        || (access != 0 && flags & REREG_ACCESS == 0);
    if bad {
        refuse(W, libc::EINVAL, &format!("flags {flags:#x} with these arguments are invalid"));
        return REREG_ERR_INPUT;
    }
    refuse(W, libc::EOPNOTSUPP, "rxe has no re-registration; deregister and register again");
    REREG_ERR_CMD
}

/// `ibv_reg_dmabuf_mr`: rxe registers no dma-buf (NULL, `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    refuse_null("ibv_reg_dmabuf_mr", libc::EOPNOTSUPP, "rxe registers no dma-buf memory")
}

/// `ibv_query_qp_data_in_order`: 0 ("not guaranteed in order"), libibverbs' answer for a
/// provider without the op, as rxe is.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_int,
    _flags: u32,
) -> c_int {
    0
}

/// `ibv_import_device`: a `cmd_fd` that is no character device is `EINVAL` (libibverbs'
/// check); soft devices, like rxe, cannot import a context from one (NULL, `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    const W: &str = "ibv_import_device";
    // SAFETY: a plain stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on the caller's fd into our buffer.
    if unsafe { libc::fstat(cmd_fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return refuse_null(W, libc::EINVAL, "cmd_fd is not a device's command fd");
    }
    refuse_null(W, libc::EOPNOTSUPP, "soft devices, like rxe, import no context")
}

/// `ibv_import_pd`: rxe imports no PD (NULL, `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_c: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    refuse_null("ibv_import_pd", libc::EOPNOTSUPP, "rxe imports no PD")
}

/// `ibv_import_mr`: rxe imports no MR (NULL, `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    refuse_null("ibv_import_mr", libc::EOPNOTSUPP, "rxe imports no MR")
}

/// `ibv_import_dm`: rxe has no device memory (NULL, `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_c: *mut ibv_context, _handle: u32) -> *mut c_void {
    refuse_null("ibv_import_dm", libc::EOPNOTSUPP, "rxe has no device memory")
}

/// `ibv_unimport_pd`, `ibv_unimport_mr`, `ibv_unimport_dm`: nothing was imported, nothing to
/// do (libibverbs' dummy op).
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}
/// See [`ibv_unimport_pd`].
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}
/// See [`ibv_unimport_pd`].
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_register_driver` (IBVERBS_1.1): the pre-rdma-core driver interface, kept by libibverbs
/// as a no-op so old libraries that call it still load.
#[no_mangle]
pub extern "C" fn ibv_register_driver(_name: *const c_char, _init: *const c_void) {}

/// `ibv_read_ibdev_sysfs_file` (IBVERBS_PRIVATE_34, for providers): soft devices have no
/// sysfs directory (-1, `ENOENT`).
#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file(_buf: *mut c_char, _size: usize) -> c_int {
    crate::set_errno(libc::ENOENT);
    -1
}

/// `__ioctl_final_num_attrs` (IBVERBS_PRIVATE_34, for providers building a kernel command):
/// no command is ever built, so the count asked about is the count.
#[no_mangle]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}

/// `ibv_copy_path_rec_to_kern`: a path record in the kernel's layout (`ib_user_path_rec`), for
/// librdmacm's `RDMA_OPTION_IB_PATH`; the field-by-field copy libibverbs makes.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's two records.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.dgid = s.dgid;
    d.sgid = s.sgid;
    d.dlid = s.dlid;
    d.slid = s.slid;
    d.raw_traffic = s.raw_traffic as u32;
    d.flow_label = s.flow_label;
    d.reversible = s.reversible as u32;
    d.mtu = u32::from(s.mtu);
    d.pkey = s.pkey;
    d.hop_limit = s.hop_limit;
    d.traffic_class = s.traffic_class;
    d.numb_path = s.numb_path;
    d.sl = s.sl;
    d.mtu_selector = s.mtu_selector;
    d.rate_selector = s.rate_selector;
    d.rate = s.rate;
    d.packet_life_time_selector = s.packet_life_time_selector;
    d.packet_life_time = s.packet_life_time;
    d.preference = s.preference;
}
