//! Addressing: a port's identity as rxe presents a RoCE port (an IPv4 address from its fabric
//! slot, a MAC made from that, the EUI-64 from the MAC), its GID table, and where an address
//! vector (`ibv_ah_attr`) points.

use std::net::Ipv6Addr;

use verbs_api::{Errno, Error, Gid, GidType, Mtu, Result};

/// `gid_tbl_len` of a port: rxe's `RXE_PORT_GID_TBL_LEN`. Entries past the two a port fills
/// read as zero, as on rxe.
pub const GID_TBL_LEN: u32 = 1024;

/// The GID index of a port's IPv6 link-local GID `fe80::<EUI-64>`: the default GID the kernel
/// puts first for every GID type the port supports (rxe: RoCE v2 only).
pub const GID_INDEX_LINK_LOCAL: u32 = 0;

/// The GID index of a port's IPv4 address as the GID `::ffff:a.b.c.d` (RoCE v2): the first
/// IP-based GID after the default one, as rxe's table has it for a netdev with one IPv4
/// address. `ib_write_bw` and `ibv_rc_pingpong -g 1` send from it.
pub const GID_INDEX_IPV4: u32 = 1;

/// The IPv4 address of the port in fabric slot `slot` (`10.0.x.y`, `x.y` = the slot). The
/// wire delivers by this address.
pub fn ip_of_slot(slot: u16) -> [u8; 4] {
    [10, 0, (slot >> 8) as u8, slot as u8]
}

/// The fabric slot of a softverbs port address (inverse of [`ip_of_slot`]; 0 for foreign
/// addresses).
pub fn slot_of_ip(ip: [u8; 4]) -> u16 {
    if ip[0] == 10 && ip[1] == 0 {
        u16::from_be_bytes([ip[2], ip[3]])
    } else {
        0
    }
}

/// The fabric slot of the softverbs port whose IPv4 GID (index [`GID_INDEX_IPV4`]) is `gid`:
/// where its inbox is in the fabric (`softverbs fabric` lists slots). `None` for a GID that
/// is not a softverbs port's IPv4 GID.
pub fn slot_of_gid(gid: &Gid) -> Option<u16> {
    gid.to_ipv4().map(slot_of_ip).filter(|&s| s != 0)
}

/// The fabric slot of the port a datagram comes from (`dst` false) or goes to (`dst` true),
/// read from its IP header: an IPv4 address `10.0.x.y`, or an IPv6 link-local address made
/// from a softverbs MAC; 0 for a foreign address or a runt. For a router that forwards by
/// the datagram alone (the simulator's switches).
pub fn slot_of_datagram_addr(datagram: &[u8], dst: bool) -> u16 {
    if datagram.first().is_some_and(|b| b >> 4 == 6) {
        let at = if dst { 24 } else { 8 };
        datagram
            .get(at..at + 16)
            .and_then(|a| <[u8; 16]>::try_from(a).ok())
            .and_then(|a| ip_of_link_local(&Gid(a)))
            .map_or(0, slot_of_ip)
    } else {
        let at = if dst { 16 } else { 12 };
        match datagram.get(at..at + 4) {
            Some(&[a, b, c, d]) => slot_of_ip([a, b, c, d]),
            _ => 0,
        }
    }
}

/// The MAC address of the port with IPv4 address `ip`: `02:00:a:b:c:d`, locally administered
/// (bit 1 of the first octet) and unicast, so that every port's MAC differs as its address does.
pub fn mac_of_ip(ip: [u8; 4]) -> [u8; 6] {
    [0x02, 0x00, ip[0], ip[1], ip[2], ip[3]]
}

/// The modified EUI-64 of a MAC, as the kernel's `addrconf_addr_eui48` makes it (and rxe its
/// node GUID and the interface id of its link-local GID): `ff:fe` inserted in the middle and
/// the universal/local bit flipped.
pub fn eui64_of_mac(mac: [u8; 6]) -> u64 {
    let eui = [mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]];
    u64::from_be_bytes(eui)
}

/// Entry `index` of the GID table of the port with IPv4 address `ip`, as rxe's is for a
/// netdev with that one IPv4 address and its link-local IPv6 address: the core puts the
/// default GID (`fe80::` + the MAC's EUI-64) first for each GID type the port supports —
/// rxe's `core_cap_flags` are `RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP`, RoCE v2 alone, so no
/// RoCE v1 entries — then one entry per IP address; the link-local IPv6 address equals the
/// default GID and is not added twice. `None` for an empty entry.
pub fn gid_entry(ip: [u8; 4], index: u32) -> Option<(Gid, GidType)> {
    match index {
        GID_INDEX_LINK_LOCAL => {
            Some((Gid::link_local(eui64_of_mac(mac_of_ip(ip))), GidType::RoceV2))
        }
        GID_INDEX_IPV4 => Some((Gid::from_ipv4(ip), GidType::RoceV2)),
        _ => None,
    }
}

/// The addresses of a port that is a RoCE v2 device on a network interface, as rxe takes them
/// from its netdev (`rxe_net.c`, ib_core's `roce_gid_mgmt.c`): the one IPv4 address the port
/// sends from and receives on, the interface's MAC, the GID table and the active MTU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetdevAddr {
    /// The interface name (`eth0`).
    pub name: String,
    /// Its index (`if_nametoindex`): the network device of every GID (`ndev_ifindex` of
    /// `struct ibv_gid_entry`).
    pub ifindex: u32,
    /// The IPv4 address datagrams leave from and arrive at (UDP port 4791).
    pub ipv4: [u8; 4],
    /// The interface's IPv6 addresses the port sends from and receives on (UDP port 4791,
    /// RoCE v2 over IPv6): those its GID table lists after the IPv4 one, and the link-local
    /// one when it is the default GID.
    pub ipv6: Vec<[u8; 16]>,
    /// Whether the engine may meet IPv6 datagrams: set once a path from an IPv6 GID is made
    /// or a UD QP is created, so that the port reads its IPv6 sockets in every round only
    /// then (an IPv4 program pays no system call for them: docs/decisions.md, "IPv6 between
    /// hosts on the UDP wire").
    pub ipv6_used: Ipv6Used,
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// The GID table, index by index (all RoCE v2): the default GID `fe80::<EUI-64 of the
    /// MAC>`, the IPv4 address as `::ffff:a.b.c.d`, then the interface's other IPv6 addresses.
    pub gids: Vec<Gid>,
    /// `active_mtu`: the interface MTU less rxe's 80 bytes of headers, rounded down to an IB
    /// MTU (`eth_mtu_int_to_enum`).
    pub active_mtu: Mtu,
}

/// A flag shared by a port on a network interface and its engine ([`NetdevAddr::ipv6_used`]):
/// whether IPv6 datagrams may come. Not part of the addresses' identity: any two compare
/// equal.
#[derive(Clone, Debug, Default)]
pub struct Ipv6Used(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Ipv6Used {
    /// Sets it (for good).
    pub fn arm(&self) {
        if !self.is_armed() {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    /// Whether it is set.
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl PartialEq for Ipv6Used {
    fn eq(&self, _: &Ipv6Used) -> bool {
        true
    }
}

impl Eq for Ipv6Used {}

/// Entry `index` of the GID table of the port with IPv4 address `ip`: [`gid_entry`]'s, or the
/// table of its network interface (`netdev`).
pub(super) fn port_gid_entry(
    ip: [u8; 4],
    netdev: Option<&NetdevAddr>,
    index: u32,
) -> Option<(Gid, GidType)> {
    match netdev {
        None => gid_entry(ip, index),
        Some(n) => n.gids.get(index as usize).map(|g| (*g, GidType::RoceV2)),
    }
}

/// The IPv4 address of the softverbs port whose IPv6 link-local GID is `gid` (`fe80::` and
/// the EUI-64 of its MAC `02:00:a:b:c:d`, inverse of [`gid_entry`]'s index 0); `None` for
/// any other GID.
fn ip_of_link_local(gid: &Gid) -> Option<[u8; 4]> {
    let g = &gid.0;
    if g[..8] != [0xfe, 0x80, 0, 0, 0, 0, 0, 0] || g[11..13] != [0xff, 0xfe] {
        return None;
    }
    let mac = [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]];
    let ip = [mac[2], mac[3], mac[4], mac[5]];
    (mac == mac_of_ip(ip) && slot_of_ip(ip) != 0).then_some(ip)
}

/// The IPv6 side of a connected QP's path when it sends from an IPv6 GID (RoCE v2 over IPv6):
/// its source and destination GIDs, the datagrams' addresses, and the flow label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ip6Path {
    /// The IPv6 source address: this port's GID at `sgid_index`.
    pub(crate) src: [u8; 16],
    /// The IPv6 destination address: the vector's `dgid`.
    pub(crate) dst: [u8; 16],
    /// The vector's `grh.flow_label` (20 bits).
    pub(crate) flow_label: u32,
}

/// Where an address vector (`ibv_ah_attr`) leads: the IPv4 address of the destination port
/// (what the wires route by) and, when the vector sends from an IPv6 GID, its IPv6 path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AvPath {
    /// The destination port's IPv4 address.
    pub(crate) ip: [u8; 4],
    /// RoCE v2 over IPv6: the addresses the datagrams carry instead of IPv4 ones.
    pub(crate) ip6: Option<Ip6Path>,
}

/// Where an address vector (`ibv_ah_attr`) of the port with IPv4 address `ip` (on network
/// interface `netdev`, if any) leads; otherwise
/// the errno and what is wrong with it. On a RoCE port the vector must carry a GRH
/// (`is_global`): the LID is 0 and means nothing there, as hardware and rxe refuse a vector
/// without one. The source is the `sgid_index` entry of the port's GID table, so that entry
/// must hold a GID, and `dgid` must be of the same IP version: the IPv4 GID of a softverbs port
/// (RoCE v2 over IPv4) or, from the link-local entry, a port's link-local GID (RoCE v2 over
/// IPv6, which connected QPs and UD address handles send alike).
pub(super) fn av_path(
    ip: [u8; 4],
    netdev: Option<&NetdevAddr>,
    av: &verbs_api::AhAttr,
) -> std::result::Result<AvPath, (Errno, String)> {
    if !av.is_global {
        return Err((
            Errno::Inval,
            "port 1 is RoCE (Ethernet link layer): an address vector needs a GRH with a GID \
             (is_global, dgid, sgid_index); a LID names no port there"
                .into(),
        ));
    }
    let sgid_index = u32::from(av.sgid_index);
    let Some((sgid, _)) = port_gid_entry(ip, netdev, sgid_index) else {
        let held = match netdev {
            None => format!("entries {GID_INDEX_LINK_LOCAL} and {GID_INDEX_IPV4} hold GIDs"),
            Some(n) => format!(
                "entries 0 to {} hold the GIDs of {}",
                n.gids.len().saturating_sub(1),
                n.name
            ),
        };
        return Err((
            Errno::Inval,
            format!("sgid_index {sgid_index} is an empty entry of port 1's GID table ({held})"),
        ));
    };
    let dgid = Ipv6Addr::from(av.dgid.0);
    if let (Some(n), None) = (netdev, sgid.to_ipv4()) {
        return netdev_path6(n, sgid_index, &sgid, av);
    }
    if sgid.to_ipv4().is_some() {
        return match av.dgid.to_ipv4() {
            Some(dst) => Ok(AvPath { ip: dst, ip6: None }),
            None if netdev.is_some() || ip_of_link_local(&av.dgid).is_some() => Err((
                Errno::Inval,
                format!(
                    "dgid {dgid} is an IPv6 GID but sgid_index {sgid_index} is the IPv4 GID \
                     {}: both ends of a path speak one IP version (send from GID index \
                     {GID_INDEX_LINK_LOCAL} to reach an IPv6 GID, or use the peer's IPv4 GID)",
                    Ipv6Addr::from(sgid.0)
                ),
            )),
            None => Err((
                Errno::Inval,
                format!("dgid {dgid} is not the IPv4 GID (::ffff:a.b.c.d) of a softverbs port"),
            )),
        };
    }
    match ip_of_link_local(&av.dgid) {
        Some(dst) => Ok(AvPath {
            ip: dst,
            ip6: Some(Ip6Path {
                src: sgid.0,
                dst: av.dgid.0,
                flow_label: av.flow_label & 0x000F_FFFF,
            }),
        }),
        None if av.dgid.to_ipv4().is_some() => Err(mixed_versions(dgid, sgid_index, &sgid)),
        None => Err((
            Errno::Inval,
            format!(
                "dgid {dgid} is not the link-local GID (fe80::<EUI-64 of 02:00:a:b:c:d>) of a \
                 softverbs port"
            ),
        )),
    }
}

/// [`av_path`] from the IPv6 GID `sgid` (entry `sgid_index`) of a port on network interface
/// `n`: RoCE v2 over IPv6 between hosts. The source must be an address the port receives on
/// ([`NetdevAddr::ipv6`]); the destination any unicast IPv6 address that is not IPv4-mapped
/// (a link-local one is reached on the interface, its scope). The IPv4 address of the path
/// is unused (0.0.0.0): the UDP wire reads the datagram's own addresses.
fn netdev_path6(
    n: &NetdevAddr,
    sgid_index: u32,
    sgid: &Gid,
    av: &verbs_api::AhAttr,
) -> std::result::Result<AvPath, (Errno, String)> {
    let dgid = Ipv6Addr::from(av.dgid.0);
    if !n.ipv6.contains(&sgid.0) {
        return Err((
            Errno::Inval,
            format!(
                "sgid_index {sgid_index} is the IPv6 GID {} of {}, which this port does not \
                 receive on (the address is not the interface's, is not ready yet, or its \
                 UDP port 4791 is another program's; ports of the interface's other IPv4 \
                 addresses send over IPv4 only: docs/guide.md, \"Across machines\"); send from \
                 GID index {GID_INDEX_IPV4}, the IPv4 address {}",
                Ipv6Addr::from(sgid.0),
                n.name,
                std::net::Ipv4Addr::from(n.ipv4)
            ),
        ));
    }
    if av.dgid.to_ipv4().is_some() {
        return Err(mixed_versions(dgid, sgid_index, sgid));
    }
    if dgid.is_unspecified() || dgid.is_multicast() {
        return Err((
            Errno::Inval,
            format!(
                "dgid {dgid} is not a unicast IPv6 address of another host (multicast over \
                 IPv6 is not done on the UDP wire)"
            ),
        ));
    }
    n.ipv6_used.arm();
    Ok(AvPath {
        ip: [0; 4],
        ip6: Some(Ip6Path { src: sgid.0, dst: av.dgid.0, flow_label: av.flow_label & 0x000F_FFFF }),
    })
}

/// `ibv_create_ah`'s checks for the port with IPv4 address `ip` (on network interface
/// `netdev`, if any): the vector must carry a GRH naming a softverbs port from a GID this port
/// has, on port 1.
pub fn check_ah(ip: [u8; 4], netdev: Option<&NetdevAddr>, attr: &verbs_api::AhAttr) -> Result<()> {
    if attr.port_num > 1 {
        return Err(Error::inval(format!(
            "ibv_create_ah: port_num {} does not exist (the device has port 1)",
            attr.port_num
        )));
    }
    av_path(ip, netdev, attr)
        .map(drop)
        .map_err(|(errno, why)| Error::new(errno, format!("ibv_create_ah: {why}")))
}

/// The refusal of a path from the IPv6 GID `sgid` (entry `sgid_index`) to the IPv4 GID `dgid`.
fn mixed_versions(dgid: Ipv6Addr, sgid_index: u32, sgid: &Gid) -> (Errno, String) {
    (
        Errno::Inval,
        format!(
            "dgid {dgid} is an IPv4 GID but sgid_index {sgid_index} is the IPv6 GID {}: both \
             ends of a path speak one IP version (send from GID index {GID_INDEX_IPV4} to reach \
             an IPv4 GID)",
            Ipv6Addr::from(sgid.0)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_local_gid_names_its_port() {
        let (g0, _) = gid_entry([10, 0, 1, 7], 0).expect("entry 0");
        assert_eq!(ip_of_link_local(&g0), Some([10, 0, 1, 7]));
        assert_eq!(ip_of_link_local(&Gid::link_local(1)), None, "fe80::1 is no port of ours");
        assert_eq!(ip_of_link_local(&Gid::from_ipv4([10, 0, 0, 1])), None);
    }

    #[test]
    fn identity_follows_the_address_as_rxe_derives_it() {
        let ip = [10, 0, 0, 3];
        assert_eq!(mac_of_ip(ip), [0x02, 0x00, 10, 0, 0, 3]);
        // 02:00:0a:00:00:03 → 00:00:0a:ff:fe:00:00:03 (U/L bit flipped, ff:fe inserted).
        assert_eq!(eui64_of_mac(mac_of_ip(ip)), 0x0000_0aff_fe00_0003);
        let (g0, t0) = gid_entry(ip, 0).expect("entry 0");
        assert_eq!(g0.to_string(), "fe80:0000:0000:0000:0000:0aff:fe00:0003");
        assert_eq!(t0, GidType::RoceV2);
        let (g1, t1) = gid_entry(ip, 1).expect("entry 1");
        assert_eq!(g1.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:0003");
        assert_eq!(t1, GidType::RoceV2);
        assert_eq!(gid_entry(ip, 2), None);
        assert_eq!(slot_of_ip(ip_of_slot(0x0102)), 0x0102);
    }

    /// On a network interface a path from an IPv6 GID the port receives on leads over IPv6
    /// to any unicast IPv6 destination; any other source, a destination of the other IP
    /// version or a multicast one is refused, naming why.
    #[test]
    fn on_a_network_interface_an_ipv6_gid_leads_over_ipv6() {
        let v6 = |t: &str| t.parse::<Ipv6Addr>().unwrap().octets();
        let (ll, global) = (v6("fe80::1c71:a8ff:fe3c:600b"), v6("fd00::7"));
        let n = NetdevAddr {
            name: "veth0".into(),
            ifindex: 7,
            ipv4: [10, 201, 0, 1],
            ipv6: vec![global],
            ipv6_used: Ipv6Used::default(),
            mac: [0x1e, 0x71, 0xa8, 0x3c, 0x60, 0x0b],
            gids: vec![Gid(ll), Gid::from_ipv4([10, 201, 0, 1]), Gid(global), Gid(v6("fd00::8"))],
            active_mtu: Mtu::Mtu1024,
        };
        let av = |sgid_index: u8, dgid: [u8; 16]| verbs_api::AhAttr {
            is_global: true,
            port_num: 1,
            sgid_index,
            dgid: Gid(dgid),
            flow_label: 0x1_2345,
            ..verbs_api::AhAttr::default()
        };
        assert!(!n.ipv6_used.is_armed());
        let path = av_path(n.ipv4, Some(&n), &av(2, v6("fd00::9"))).expect("an IPv6 path");
        assert!(n.ipv6_used.is_armed(), "the port now reads its IPv6 sockets");
        let want = Ip6Path { src: global, dst: v6("fd00::9"), flow_label: 0x1_2345 };
        assert_eq!(path, AvPath { ip: [0; 4], ip6: Some(want) });
        let why = |r: std::result::Result<AvPath, (Errno, String)>| {
            let (errno, why) = r.expect_err("refused");
            assert_eq!(errno, Errno::Inval);
            why
        };
        // The link-local address is not one the port receives on here (not ready, say).
        let w = why(av_path(n.ipv4, Some(&n), &av(0, v6("fe80::2"))));
        assert!(w.contains("does not receive on"), "{w}");
        let w = why(av_path(n.ipv4, Some(&n), &av(3, v6("fd00::9"))));
        assert!(w.contains("fd00::8"), "{w}");
        let w = why(av_path(n.ipv4, Some(&n), &av(2, Gid::from_ipv4([10, 201, 0, 2]).0)));
        assert!(w.contains("one IP version"), "{w}");
        let w = why(av_path(n.ipv4, Some(&n), &av(1, v6("fd00::9"))));
        assert!(w.contains("one IP version"), "{w}");
        let w = why(av_path(n.ipv4, Some(&n), &av(2, v6("ff02::1"))));
        assert!(w.contains("multicast"), "{w}");
        // The IPv4 path is as it was.
        let path = av_path(n.ipv4, Some(&n), &av(1, Gid::from_ipv4([10, 201, 0, 2]).0));
        assert_eq!(path, Ok(AvPath { ip: [10, 201, 0, 2], ip6: None }));
    }
}
