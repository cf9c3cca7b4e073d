//! What softverbs does not do, answered as libibverbs answers for a device without it: the
//! `IBVERBS_PRIVATE_34` entry points that rdma-core's provider and CM libraries bind when they
//! load (so perftest's `libmlx5.so.1`, `libefa.so.1`, `librdmacm.so.1` load against this
//! library and find no device of theirs), ECE, and the kernel-ABI copy helpers.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;

use crate::refuse;

/// `verbs_allow_disassociate_destroy` (IBVERBS_PRIVATE_34): a flag providers read.
#[no_mangle]
pub static mut verbs_allow_disassociate_destroy: u8 = 0;

/// A kernel command of the provider interface (`ibv_cmd_*`, `execute_ioctl`): soft devices have
/// no kernel side, so each refuses with `EOPNOTSUPP` (no provider reaches them: no device is
/// theirs).
macro_rules! no_kernel {
    ($($name:ident)*) => {$(
        #[doc = concat!("`", stringify!($name), "` (IBVERBS_PRIVATE_34): `EOPNOTSUPP`, soft devices have no kernel side.")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            refuse(stringify!($name), libc::EOPNOTSUPP, "soft devices have no kernel command interface")
        }
    )*};
}
no_kernel! {
    ibv_cmd_advise_mr
    ibv_cmd_alloc_dm
    ibv_cmd_alloc_mw
    ibv_cmd_alloc_pd
    ibv_cmd_attach_mcast
    ibv_cmd_close_xrcd
    ibv_cmd_create_ah
    ibv_cmd_create_counters
    ibv_cmd_create_cq
    ibv_cmd_create_cq_ex
    ibv_cmd_create_flow
    ibv_cmd_create_flow_action_esp
    ibv_cmd_create_qp
    ibv_cmd_create_qp_ex
    ibv_cmd_create_qp_ex2
    ibv_cmd_create_rwq_ind_table
    ibv_cmd_create_srq
    ibv_cmd_create_srq_ex
    ibv_cmd_create_wq
    ibv_cmd_dealloc_mw
    ibv_cmd_dealloc_pd
    ibv_cmd_dereg_mr
    ibv_cmd_destroy_ah
    ibv_cmd_destroy_counters
    ibv_cmd_destroy_cq
    ibv_cmd_destroy_flow
    ibv_cmd_destroy_flow_action
    ibv_cmd_destroy_qp
    ibv_cmd_destroy_rwq_ind_table
    ibv_cmd_destroy_srq
    ibv_cmd_destroy_wq
    ibv_cmd_detach_mcast
    ibv_cmd_free_dm
    ibv_cmd_get_context
    ibv_cmd_modify_cq
    ibv_cmd_modify_flow_action_esp
    ibv_cmd_modify_qp
    ibv_cmd_modify_qp_ex
    ibv_cmd_modify_srq
    ibv_cmd_modify_wq
    ibv_cmd_open_qp
    ibv_cmd_open_xrcd
    ibv_cmd_poll_cq
    ibv_cmd_post_recv
    ibv_cmd_post_send
    ibv_cmd_post_srq_recv
    ibv_cmd_query_context
    ibv_cmd_query_device_any
    ibv_cmd_query_mr
    ibv_cmd_query_port
    ibv_cmd_query_qp
    ibv_cmd_query_srq
    ibv_cmd_read_counters
    ibv_cmd_reg_dm_mr
    ibv_cmd_reg_dmabuf_mr
    ibv_cmd_reg_mr
    ibv_cmd_req_notify_cq
    ibv_cmd_rereg_mr
    ibv_cmd_resize_cq
    execute_ioctl
}

/// `verbs_register_driver_34`: a provider library's constructor registers its driver; soft
/// devices are never theirs, so the registration is kept nowhere.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {
    tracing::debug!(
        "verbs_register_driver_34: a provider library loaded; its devices are not softverbs'"
    );
}

/// `__verbs_log` (a provider's debug print): dropped.
#[no_mangle]
pub extern "C" fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_char) {}

/// `_verbs_init_and_alloc_context`: no provider context is ever made (`EOPNOTSUPP`, NULL).
#[no_mangle]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    refuse("_verbs_init_and_alloc_context", libc::EOPNOTSUPP, "no provider devices");
    null_mut()
}

/// `verbs_open_device`: as `_verbs_init_and_alloc_context`.
#[no_mangle]
pub extern "C" fn verbs_open_device() -> *mut c_void {
    refuse("verbs_open_device", libc::EOPNOTSUPP, "no provider devices");
    null_mut()
}

/// `verbs_set_ops`, `verbs_uninit_context`, `verbs_init_cq`: only a provider context would use
/// them, and there is none.
#[no_mangle]
pub extern "C" fn verbs_set_ops(_ctx: *mut c_void, _ops: *const c_void) {}
/// See [`verbs_set_ops`].
#[no_mangle]
pub extern "C" fn verbs_uninit_context(_ctx: *mut c_void) {}
/// See [`verbs_set_ops`].
#[no_mangle]
pub extern "C" fn verbs_init_cq(_cq: *mut c_void) {}

/// `ibv_query_ece`: no enhanced connection establishment (`EOPNOTSUPP`).
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    refuse("ibv_query_ece", libc::EOPNOTSUPP, "softverbs has no ECE")
}

/// `ibv_set_ece`: see [`ibv_query_ece`].
#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    refuse("ibv_set_ece", libc::EOPNOTSUPP, "softverbs has no ECE")
}

/// `ibv_resolve_eth_l2_from_gid`: soft ports have no Ethernet neighbours to resolve.
#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid() -> c_int {
    refuse("ibv_resolve_eth_l2_from_gid", libc::EOPNOTSUPP, "no Ethernet neighbours")
}

/// `ibv_get_sysfs_path`: soft devices have no sysfs (NULL).
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    std::ptr::null()
}

/// `ibv_copy_ah_attr_from_kern`, `ibv_copy_qp_attr_from_kern`, `ibv_copy_path_rec_from_kern`:
/// conversions of kernel structs librdmacm receives from the kernel CM, which soft devices
/// never hand out; nothing to copy.
#[no_mangle]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
/// See [`ibv_copy_ah_attr_from_kern`].
#[no_mangle]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
/// See [`ibv_copy_ah_attr_from_kern`].
#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *const c_void) {}

/// `ibv_fork_init`: soft MRs are plain process memory that the NIC reads and writes from the
/// process itself, so a child's copy-on-write pages never confuse it; nothing to set up.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (2), for the reason in [`ibv_fork_init`].
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_dontfork_range`, `ibv_dofork_range`: nothing to do (see [`ibv_fork_init`]).
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
/// See [`ibv_dontfork_range`].
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
