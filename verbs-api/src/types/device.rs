//! The device and its ports: device and port attributes, GIDs, the MTU, and the asynchronous
//! events a device reports (`struct ibv_device_attr`, `struct ibv_port_attr`, `union ibv_gid`,
//! `struct ibv_gid_entry`, `enum ibv_mtu`, `struct ibv_async_event`).

use std::fmt;

/// A 128-bit global identifier (`union ibv_gid`). On a RoCE port a GID is an IP address: an
/// IPv6 address, or an IPv4 address as the IPv4-mapped `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub fn from_ipv4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }
    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
            Some([g[12], g[13], g[14], g[15]])
        } else {
            None
        }
    }
    /// The IPv6 link-local GID `fe80::<interface id>` (the default GID of a RoCE port, whose
    /// interface id is the EUI-64 of the port's MAC).
    pub fn link_local(interface_id: u64) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&interface_id.to_be_bytes());
        Gid(g)
    }
    /// Whether every byte is zero: an empty GID table entry reads so.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The subnet prefix (high 64 bits), big-endian.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The interface id (low 64 bits), big-endian.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
}

impl fmt::Display for Gid {
    /// Formats as `ibv_devinfo` does: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The kind of a GID table entry (`enum ibv_gid_type`; its values in [`crate::ibv`]): what a packet sent from
/// it looks like on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GidType {
    /// `IBV_GID_TYPE_IB`: an InfiniBand GID (IB link layer).
    #[default]
    Ib,
    /// `IBV_GID_TYPE_ROCE_V1`: RoCE v1, the IB GRH straight on Ethernet (ethertype 0x8915).
    RoceV1,
    /// `IBV_GID_TYPE_ROCE_V2`: RoCE v2, IPv4 or IPv6 and UDP port 4791.
    RoceV2,
}

impl GidType {
    /// As `ibv_devinfo -v` names it: `IB`, `RoCE v1`, `RoCE v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        }
    }
}

/// One entry of a port's GID table (`struct ibv_gid_entry`, what `ibv_query_gid_ex` and
/// `ibv_query_gid_table` return).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct GidEntry {
    /// `gid`.
    pub gid: Gid,
    /// `gid_index`: its index in the port's table (an address vector's `sgid_index`).
    pub gid_index: u32,
    /// `port_num`.
    pub port_num: u32,
    /// `gid_type`.
    pub gid_type: GidType,
    /// `ndev_ifindex`: the interface index of the net device the GID belongs to; 0 if none
    /// (softverbs ports have no net device).
    pub ndev_ifindex: u32,
}

/// `IB_PORT_CM_SUP` in `port_cap_flags`: the port supports connection management (the one
/// flag rxe reports).
pub const PORT_CAP_CM_SUP: u32 = 1 << 16;
/// `IBV_PORT_IP_BASED_GIDS` in `port_cap_flags`: the port's GIDs are IP addresses (RoCE
/// hardware providers report it; rxe does not).
pub const PORT_CAP_IP_BASED_GIDS: u32 = 1 << 26;

/// Path MTU (`enum ibv_mtu`; its values in [`crate::ibv`], which the discriminants repeat for
/// the command line's printouts, a test holding them equal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// `IBV_MTU_256`.
    Mtu256 = 1,
    /// `IBV_MTU_512`.
    Mtu512 = 2,
    /// `IBV_MTU_1024`.
    #[default]
    Mtu1024 = 3,
    /// `IBV_MTU_2048`.
    Mtu2048 = 4,
    /// `IBV_MTU_4096`.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes of payload per packet.
    pub fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }
    /// The enum from a byte count (256, 512, 1024, 2048, 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    Nop,
    /// `IBV_PORT_DOWN`.
    #[default]
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`.
    Active,
}

impl PortState {
    /// The name `ibv_port_state_str` returns.
    pub fn as_str(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
        }
    }
}

/// Link layer of a port (`IBV_LINK_LAYER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_INFINIBAND`.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE).
    #[default]
    Ethernet,
}

/// Device attributes (`struct ibv_device_attr`), the limits a device enforces.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeviceAttr {
    /// `fw_ver`.
    pub fw_ver: String,
    /// `node_guid`.
    pub node_guid: u64,
    /// `sys_image_guid`.
    pub sys_image_guid: u64,
    /// `max_mr_size`: the largest MR in bytes.
    pub max_mr_size: u64,
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`: WRs per work queue.
    pub max_qp_wr: u32,
    /// `max_sge`: SGEs per WR.
    pub max_sge: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`: entries per CQ.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_pd`.
    pub max_pd: u32,
    /// `max_qp_rd_atom`: outstanding READs/atomics a QP may receive.
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: outstanding READs/atomics a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// `max_srq`.
    pub max_srq: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `max_srq_sge`.
    pub max_srq_sge: u32,
    /// `max_ah`.
    pub max_ah: u32,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `max_mcast_grp`: the multicast groups the device's QPs may be attached to at once.
    pub max_mcast_grp: u32,
    /// `max_mcast_qp_attach`: the QPs one multicast group may have attached.
    pub max_mcast_qp_attach: u32,
    /// `max_total_mcast_qp_attach`: QP attachments to multicast groups, in all.
    pub max_total_mcast_qp_attach: u32,
    /// `phys_port_cnt`.
    pub phys_port_cnt: u8,
    /// The largest inline data a QP may request (softverbs extension; rdma-core reports it per QP).
    pub max_inline_data: u32,
    /// The largest message in bytes (`ibv_port_attr.max_msg_sz`, repeated here for convenience).
    pub max_msg_sz: u32,
    /// `atomic_cap`: whether atomics are supported and how (true = `IBV_ATOMIC_HCA`).
    pub atomic_hca: bool,
}

/// Port attributes (`struct ibv_port_attr`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PortAttr {
    /// `state`.
    pub state: PortState,
    /// `max_mtu`.
    pub max_mtu: Mtu,
    /// `active_mtu`.
    pub active_mtu: Mtu,
    /// `gid_tbl_len`.
    pub gid_tbl_len: u32,
    /// `port_cap_flags` (`IBV_PORT_*`, IBA CapabilityMask bits; see [`PORT_CAP_CM_SUP`]).
    pub port_cap_flags: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `lid`: the port's LID, assigned by the subnet manager; 0 on RoCE (Ethernet) ports,
    /// which are addressed by GID.
    pub lid: u16,
    /// `sm_lid`.
    pub sm_lid: u16,
    /// `lmc`.
    pub lmc: u8,
    /// `active_width` (IBTA encoding; 2 = 4x).
    pub active_width: u8,
    /// `active_speed` (IBTA encoding).
    pub active_speed: u8,
    /// `phys_state` (5 = LinkUp).
    pub phys_state: u8,
    /// `link_layer`.
    pub link_layer: LinkLayer,
}

/// The kind of an asynchronous event (`enum ibv_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEventType {
    /// `IBV_EVENT_CQ_ERR`: a CQ overran.
    CqErr,
    /// `IBV_EVENT_QP_FATAL`: the NIC moved a QP to the error state.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`.
    QpReqErr,
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    QpAccessErr,
    /// `IBV_EVENT_COMM_EST`.
    CommEst,
    /// `IBV_EVENT_SQ_DRAINED`.
    SqDrained,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ in error will consume no more WQEs.
    QpLastWqeReached,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    SrqLimitReached,
    /// `IBV_EVENT_PORT_ACTIVE`.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`.
    PortErr,
    /// `IBV_EVENT_DEVICE_FATAL`.
    DeviceFatal,
}

/// What an async event is about (`element` of `struct ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by [`CqOps::id`](crate::provider::CqOps::id).
    Cq(u64),
    /// An SRQ, by backend id.
    Srq(u64),
    /// A port, by number.
    Port(u8),
    /// The device.
    Device,
}

/// An asynchronous event (`struct ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// `event_type`.
    pub event_type: AsyncEventType,
    /// `element`.
    pub element: AsyncElement,
}
