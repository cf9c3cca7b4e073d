//! The C layouts of `<infiniband/verbs.h>` (rdma-core 44, x86_64) that programs read, write or
//! call through: written by hand so the workspace builds with Rust alone, and checked field by
//! field against the system header by `cabi/ibverbs/tests/layout.rs`. One crate, so that
//! softverbs' libibverbs.so.1 and librdmacm.so.1 share one copy.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

pub mod select;

/// `pthread_mutex_t` (40 bytes on x86_64 glibc): programs never touch it, it only takes room.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t(pub [u8; 40]);
/// `pthread_cond_t` (48 bytes).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_cond_t(pub [u8; 48]);

/// `union ibv_gid` (8-aligned, for its `global.subnet_prefix` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_device`: what `ibv_get_device_list` lists.
#[repr(C)]
pub struct ibv_device {
    /// `_ops` (two obsolete function pointers).
    pub _ops: [*const c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context_ops`: the data-path verbs the inline functions call.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat: [*const c_void; 7],
    pub alloc_mw: *const c_void,
    pub bind_mw: *const c_void,
    pub dealloc_mw: *const c_void,
    pub _compat_create_cq: *const c_void,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat2: [*const c_void; 7],
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat3: [*const c_void; 4],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat4: [*const c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `(void *)UINTPTR_MAX`: a `verbs_context` sits in front.
    pub abi_compat: *mut c_void,
}

/// Slot indices in [`verbs_context::ops`] (its 39 pointer-sized members in header order).
pub mod vslot {
    pub const QUERY_PORT: usize = 0;
    pub const ADVISE_MR: usize = 1;
    pub const CREATE_CQ_EX: usize = 25;
    pub const QUERY_DEVICE_EX: usize = 27;
    pub const CREATE_QP_EX: usize = 33;
    pub const OPEN_XRCD: usize = 36;
}

/// `struct verbs_context`: the extended ops, in front of the `ibv_context` programs hold.
#[repr(C)]
pub struct verbs_context {
    /// `query_port` … `_ABI_placeholder3`: NULL where softverbs offers nothing.
    pub ops: [*const c_void; 39],
    /// `sz`: the size of this struct, so every op in it counts as present.
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_device_attr_ex`: the legacy attributes, then extended capabilities (all zero
/// in softverbs but `completion_timestamp_mask`, `hca_core_clock` and `phys_port_cnt_ex`).
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps` (general_caps, then three per-transport u32s).
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps`, `rss_caps`, `max_wq_type_rq`, `packet_pacing_caps`, `tm_caps`: zero.
    pub caps: [u8; 80],
    /// `cq_mod_caps` {max_cq_count, max_cq_period}, then padding.
    pub cq_mod_caps: [u16; 4],
    pub max_dm_size: u64,
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (the legacy `_compat_ibv_port_attr` is its first 48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind`: what `ibv_bind_mw` takes.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf` (RSS; softverbs refuses it, the struct only takes room).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: the fields of `ibv_qp_init_attr` (so `comp_mask` sits in what
/// is that struct's tail padding), then the extended ones. `ibv_create_qp_ex` passes it.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*` bits saying which of the fields below are set.
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `IBV_QP_INIT_ATTR_PD` in `ibv_qp_init_attr_ex.comp_mask`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: the QP gets the `ibv_wr_*` API.
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr`; `wr` is the union of `rdma`, `atomic` and `ud`, read as
/// [`SendWrUnion`].
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) / `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: SendWrUnion,
    /// `qp_type.xrc.remote_srqn`.
    pub xrc_remote_srqn: u32,
    /// `bind_mw` {mw, rkey, bind_info {mr, addr, length, mw_access_flags}} / `tso`:
    /// read by `mw_bind_of`'s conversions as words.
    pub tail: [u64; 6],
}

/// The `wr` union of `struct ibv_send_wr` as 32 bytes: `rdma` {remote_addr, rkey}, `atomic`
/// {remote_addr, compare_add, swap, rkey}, `ud` {ah, remote_qpn, remote_qkey}.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SendWrUnion {
    pub w0: u64,
    pub w1: u64,
    pub w2: u64,
    pub w3: u64,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) / `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_async_event`.
#[repr(C)]
pub struct ibv_async_event {
    /// `element`: cq, qp, srq, wq or port_num.
    pub element: *mut c_void,
    pub event_type: c_int,
}

/// `struct ibv_grh` (40 bytes at the front of a UD receive buffer).
#[repr(C)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// `struct ibv_qp_ex`: the QP, then the `ibv_wr_*` entry points the inline functions call.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: *const c_void,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: *const c_void,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
    /// rdma-core 45's addition: past the end of rdma-core 44's `struct ibv_qp_ex`, so a
    /// program built against 44's header never reads it.
    pub wr_flush: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, usize, u8, u8)>,
}

/// `struct ibv_data_buf`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_cq_ex`: the CQ, then the polling entry points the inline `ibv_start_poll`,
/// `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call.
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: *const c_void,
    pub read_cvlan: *const c_void,
    pub read_flow_tag: *const c_void,
    pub read_tm_info: *const c_void,
    pub read_completion_wallclock_ns: *const c_void,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_sa_path_rec` (infiniband/sa.h).
#[repr(C)]
pub struct ibv_sa_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_user_path_rec` (rdma/ib_user_sa.h).
#[repr(C)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}
