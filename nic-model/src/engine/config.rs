//! What a NIC is: its name, identity, address and the device limits it reports and enforces.

use std::sync::Arc;

use verbs_api::{Gid, GidType, Mtu};

use super::addr::{eui64_of_mac, ip_of_slot, mac_of_ip, port_gid_entry, NetdevAddr};

/// The lowest QP number a QP gets: 0 and 1 name the special QPs (SMI, GSI).
pub(crate) const MIN_QPN: u32 = 2;
/// The highest QP number a QP gets: 0xFFFFFF is the multicast QPN.
pub(crate) const MAX_QPN: u32 = 0x00FF_FFFE;

/// One SplitMix64 output for the state word `x` (the state advanced by the golden gamma, then
/// mixed): well-spread bits from any word. The one copy in the workspace: [`NicConfig::new`]'s
/// entropy, the simulator's generator seeding and the tests' data patterns all use it.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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
    /// Node GUID. [`NicConfig::new`] makes it the EUI-64 of the port's MAC, as rxe does; the
    /// soft backend gives each device name one of its own instead, which `ibv_devices` shows
    /// before the port (and so its address) exists.
    pub node_guid: u64,
    /// Port 1's slot in its fabric, which gives it its IPv4 address `10.0.x.y`
    /// ([`NicConfig::ip`]) and with that its MAC and GIDs. The port's LID is 0: it is a RoCE
    /// port.
    pub slot: u16,
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
    /// Random bits the host draws for this NIC; the engine draws none itself. Its QP numbers
    /// start where these say ([`first_qpn`](NicConfig::first_qpn)), as a hardware NIC's do
    /// not start at a fixed number: a NIC made in place of another (a process that restarted
    /// on a freed address) does not hand out the numbers of the one before, so a stale packet
    /// for an old QP finds no QP of the same number. Its memory keys come from them too
    /// (a random first MR index and a random key byte per registration, as rxe makes keys; see
    /// [`MrTable`](super::mr::MrTable)), so a program that sends its own rkey for its peer's
    /// fails as on rxe. The soft backend draws them from the
    /// operating system for each device it opens, the simulator from its seed;
    /// [`NicConfig::new`] derives them from the slot, so that tests made with it are
    /// deterministic.
    pub entropy: u64,
    /// The network interface the port is a RoCE v2 device on (`SOFTVERBS_NETDEV`), whose
    /// addresses replace those of the slot: its IPv4 address, MAC, GID table and MTU. None: a
    /// port of a softverbs fabric, addressed by its slot.
    pub netdev: Option<Arc<NetdevAddr>>,
    /// The block of QP numbers the port holds among the processes that share its network
    /// interface address (`SOFTVERBS_NETDEV`): its QPs are `block << 16 | n`, so that no two
    /// processes on the address hand out one number (docs/decisions.md, "Several processes
    /// on one address"). None: the whole 24-bit space.
    pub qpn_block: Option<u8>,
}

impl NicConfig {
    /// A NIC with default limits on the port in fabric slot `slot`.
    pub fn new(name: impl Into<String>, slot: u16) -> NicConfig {
        NicConfig {
            name: name.into(),
            node_guid: eui64_of_mac(mac_of_ip(ip_of_slot(slot))),
            slot,
            max_mtu: Mtu::Mtu4096,
            limits: Limits::default(),
            retry_cnt_7_infinite: false,
            ack_every: 64,
            window: 512,
            entropy: splitmix64(u64::from(slot)),
            netdev: None,
            qpn_block: None,
        }
    }
    /// The first QP number the NIC hands out: from [`NicConfig::entropy`], anywhere in the
    /// 24-bit space but 0 and 1 (the special QPs) and 0xFFFFFF (the multicast QPN), or in
    /// the port's block ([`NicConfig::qpn_block`]).
    pub fn first_qpn(&self) -> u32 {
        let (lo, hi) = self.qpn_range();
        lo + (self.entropy % u64::from(hi - lo + 1)) as u32
    }
    /// The lowest and highest QP numbers the NIC hands out: the 24-bit space but the special
    /// QPs and the multicast QPN, or the port's block ([`NicConfig::qpn_block`], 1 to 254).
    pub fn qpn_range(&self) -> (u32, u32) {
        match self.qpn_block {
            Some(b) if (1..=254).contains(&b) => (u32::from(b) << 16, u32::from(b) << 16 | 0xFFFF),
            _ => (MIN_QPN, MAX_QPN),
        }
    }
    /// The port's IPv4 address, from its slot (or its network interface): the address the
    /// wire delivers to.
    #[inline]
    pub fn ip(&self) -> [u8; 4] {
        match &self.netdev {
            None => ip_of_slot(self.slot),
            Some(n) => n.ipv4,
        }
    }
    /// The port's MAC address, made from its IPv4 address (locally administered), or its
    /// network interface's.
    pub fn mac(&self) -> [u8; 6] {
        match &self.netdev {
            None => mac_of_ip(self.ip()),
            Some(n) => n.mac,
        }
    }
    /// Entry `index` of the port's GID table, as rxe's is (see [`gid_entry`](super::addr::gid_entry), or its network
    /// interface's, [`NetdevAddr::gids`]); `None` if empty.
    pub fn gid_entry(&self, index: u32) -> Option<(Gid, GidType)> {
        port_gid_entry(self.ip(), self.netdev.as_deref(), index)
    }
    /// The port's `active_mtu`: its largest MTU, or what its network interface carries.
    pub fn active_mtu(&self) -> Mtu {
        match &self.netdev {
            None => self.max_mtu,
            Some(n) => n.active_mtu,
        }
    }
}
