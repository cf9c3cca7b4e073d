//! What a NIC is: its name, identity, address and the device limits it reports and enforces.

use verbs_api::{Gid, Mtu};

use super::addr::ip_of_lid;

/// Device limits (the `ibv_device_attr` a soft NIC reports and enforces).
#[derive(Clone, Debug)]
pub struct Limits {
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_pd`.
    pub max_pd: u32,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_inline_data`.
    pub max_inline_data: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `max_qp_rd_atom` and `max_qp_init_rd_atom`.
    pub max_rd_atom: u8,
    /// `max_srq`.
    pub max_srq: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qp: 1024,
            max_qp_wr: 16384,
            max_sge: 32,
            max_cq: 1024,
            max_cqe: 65536,
            max_mr: 4096,
            max_pd: 1024,
            max_mr_size: 1 << 32,
            max_inline_data: 256,
            max_msg_sz: 1 << 30,
            max_rd_atom: 16,
            max_srq: 256,
        }
    }
}

/// What a NIC is: its name, identity, address and limits.
#[derive(Clone, Debug)]
pub struct NicConfig {
    /// Device name (`softverbs0`).
    pub name: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Port 1's LID, assigned by the fabric.
    pub lid: u16,
    /// Largest path MTU.
    pub max_mtu: Mtu,
    /// Limits.
    pub limits: Limits,
    /// Treat `retry_cnt = 7` as infinite, as Linux rxe does (the verbs documentation does not).
    pub retry_cnt_7_infinite: bool,
    /// ACK-request every this many packets of a long message, besides the last one.
    pub ack_every: u32,
    /// Unacknowledged packets a QP may have in flight.
    pub window: u32,
}

impl NicConfig {
    /// A NIC with default limits on the port with this LID.
    pub fn new(name: impl Into<String>, lid: u16) -> NicConfig {
        NicConfig {
            name: name.into(),
            node_guid: 0x0200_5eff_fe00_0000 | lid as u64,
            lid,
            max_mtu: Mtu::Mtu4096,
            limits: Limits::default(),
            retry_cnt_7_infinite: false,
            ack_every: 64,
            window: 512,
        }
    }
    /// The port's IPv4 address.
    pub fn ip(&self) -> [u8; 4] {
        ip_of_lid(self.lid)
    }
    /// The port's GID (IPv4-mapped).
    pub fn gid(&self) -> Gid {
        Gid::from_ipv4(self.ip())
    }
}
