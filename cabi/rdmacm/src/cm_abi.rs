//! The C layouts of librdmacm's public structs (`<rdma/rdma_cma.h>`, rdma-core 44), with the
//! enum values programs compare against; sizes are checked at compile time against what gcc
//! gives for the system header.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

use softverbs_cabi_abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_srq,
};

/// `struct rdma_event_channel`: the descriptor programs poll.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_ib_addr`: the GIDs of both ends (here the ports' IP addresses) and the P_Key.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    pub _pad: [u8; 6],
}

/// `struct rdma_addr`: source and destination socket addresses (a `sockaddr_storage` each).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: [u8; 128],
    pub dst: [u8; 128],
    pub ib: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

// The sizes gcc gives for rdma-core 44's <rdma/rdma_cma.h>.
const _: () = assert!(size_of::<rdma_cm_id>() == 416);
const _: () = assert!(size_of::<rdma_route>() == 312);
const _: () = assert!(size_of::<rdma_cm_event>() == 80);
const _: () = assert!(size_of::<rdma_conn_param>() == 24);
const _: () = assert!(size_of::<rdma_ud_param>() == 56);
const _: () = assert!(size_of::<rdma_addrinfo>() == 96);
const _: () = assert!(std::mem::offset_of!(rdma_cm_id, ps) == 344);
const _: () = assert!(std::mem::offset_of!(rdma_cm_id, qp_type) == 408);

/// `enum rdma_cm_event_type`.
#[allow(dead_code)]
pub mod ev {
    pub const ADDR_RESOLVED: i32 = 0;
    pub const ADDR_ERROR: i32 = 1;
    pub const ROUTE_RESOLVED: i32 = 2;
    pub const ROUTE_ERROR: i32 = 3;
    pub const CONNECT_REQUEST: i32 = 4;
    pub const CONNECT_RESPONSE: i32 = 5;
    pub const CONNECT_ERROR: i32 = 6;
    pub const UNREACHABLE: i32 = 7;
    pub const REJECTED: i32 = 8;
    pub const ESTABLISHED: i32 = 9;
    pub const DISCONNECTED: i32 = 10;
    pub const TIMEWAIT_EXIT: i32 = 15;
}

/// `enum rdma_port_space` values softverbs takes.
pub const RDMA_PS_TCP: c_int = 0x0106;
/// UDP port space: UD ids.
pub const RDMA_PS_UDP: c_int = 0x0111;
/// IPoIB port space (UD as well).
pub const RDMA_PS_IPOIB: c_int = 0x0002;
/// IB port space (libfabric's verbs provider): the id's QP type decides RC or UD, and its
/// ports are its own ([`crate::state::listen_name`]).
pub const RDMA_PS_IB: c_int = 0x013F;
/// `RDMA_UDP_QKEY`: the Q_Key of UD ids of the UDP port space.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// `RAI_PASSIVE`.
pub const RAI_PASSIVE: c_int = 1;

/// `rdma_set_option`'s level for the id's own options (`RDMA_OPTION_ID`).
pub const RDMA_OPTION_ID: c_int = 0;
/// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout (a `u8`).
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
