//! Addressing: a port's identity as rxe presents a RoCE port (an IPv4 address from its fabric
//! slot, a MAC made from that, the EUI-64 from the MAC), its GID table, and where an address
//! vector (`ibv_ah_attr`) points.

use std::net::Ipv6Addr;

use verbs_api::{Errno, Error, Gid, GidType, Result};

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

/// Where an address vector (`ibv_ah_attr`) of a port with IPv4 address `ip` points: the IPv4
/// address of the destination port; otherwise the errno and what is wrong with it. On a RoCE
/// port the vector must carry a GRH (`is_global`): the LID is 0 and means nothing there, as
/// hardware and rxe refuse a vector without one. The source is the `sgid_index` entry of the
/// port's GID table, so that entry must hold a GID; an IPv6 one (the link-local entry) would
/// make the packets RoCE v2 over IPv6, which the soft wire does not carry.
pub(super) fn av_destination(
    ip: [u8; 4],
    av: &verbs_api::AhAttr,
) -> std::result::Result<[u8; 4], (Errno, String)> {
    if !av.is_global {
        return Err((
            Errno::Inval,
            "port 1 is RoCE (Ethernet link layer): an address vector needs a GRH with a GID \
             (is_global, dgid, sgid_index); a LID names no port there"
                .into(),
        ));
    }
    let sgid_index = u32::from(av.sgid_index);
    match gid_entry(ip, sgid_index) {
        Some((gid, _)) if gid.to_ipv4().is_none() => {
            return Err((
                Errno::NotSup,
                format!(
                    "sgid_index {sgid_index} is the IPv6 GID {}: RoCE v2 over IPv6 is not \
                     carried by softverbs; use GID index {GID_INDEX_IPV4} ({}), the port's IPv4 GID",
                    Ipv6Addr::from(gid.0),
                    Ipv6Addr::from(Gid::from_ipv4(ip).0)
                ),
            ))
        }
        Some(_) => {}
        None => {
            return Err((
                Errno::Inval,
                format!(
                    "sgid_index {sgid_index} is an empty entry of port 1's GID table (entries \
                     {GID_INDEX_LINK_LOCAL} and {GID_INDEX_IPV4} hold GIDs)"
                ),
            ))
        }
    }
    av.dgid.to_ipv4().ok_or_else(|| {
        let why = if av.dgid.0[..2] == [0xfe, 0x80] {
            "is an IPv6 link-local GID: RoCE v2 over IPv6 is not carried by softverbs; use the \
             peer's IPv4 GID (::ffff:a.b.c.d, its GID index 1)"
        } else {
            "is not the IPv4 GID (::ffff:a.b.c.d) of a softverbs port"
        };
        (Errno::Inval, format!("dgid {} {why}", Ipv6Addr::from(av.dgid.0)))
    })
}

/// `ibv_create_ah`'s checks for a port with IPv4 address `ip`: the vector must carry a GRH
/// naming a softverbs port from a GID this port has, on port 1.
pub fn check_ah(ip: [u8; 4], attr: &verbs_api::AhAttr) -> Result<()> {
    if attr.port_num > 1 {
        return Err(Error::inval(format!(
            "ibv_create_ah: port_num {} does not exist (the device has port 1)",
            attr.port_num
        )));
    }
    av_destination(ip, attr)
        .map(drop)
        .map_err(|(errno, why)| Error::new(errno, format!("ibv_create_ah: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
