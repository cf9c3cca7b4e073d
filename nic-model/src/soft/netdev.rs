//! `SOFTVERBS_NETDEV=IFACE`: what a soft port takes from a network interface to be a RoCE v2
//! device on it, as rxe takes it from its netdev: the IPv4 addresses (the first one no other
//! process holds becomes the port's), the MAC, the MTU, and from them the GID table
//! (ib_core's `roce_gid_mgmt.c` order) and `active_mtu` (rxe's `rxe_set_mtu`).

use std::ffi::CString;
use std::net::{Ipv4Addr, Ipv6Addr};

use verbs_api::{Errno, Error, Gid, Mtu};

use crate::engine::{eui64_of_mac, NetdevAddr};

/// What the interface has: its name, index, MAC, MTU and addresses, in the kernel's order
/// (the order `ip addr` lists them in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The interface name.
    pub name: String,
    /// Its index (`if_nametoindex`): the scope of its link-local IPv6 addresses.
    pub index: u32,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its MTU in bytes.
    pub mtu: u32,
    /// Its IPv4 addresses.
    pub ipv4: Vec<[u8; 4]>,
    /// Its IPv6 addresses.
    pub ipv6: Vec<[u8; 16]>,
}

/// rxe's `RXE_MAX_HDR_LENGTH`: the bytes of headers rxe takes off the interface MTU before it
/// picks an IB MTU (`eth_mtu_int_to_enum`).
pub const RXE_MAX_HDR_LENGTH: u32 = 80;

/// `active_mtu` of a RoCE port on an interface of MTU `mtu`, as rxe's `rxe_set_mtu` picks it:
/// the MTU less [`RXE_MAX_HDR_LENGTH`], rounded down to an IB MTU, 256 at the least, 4096 at
/// the most (1500 gives 1024, 9000 gives 4096).
pub fn rxe_active_mtu(mtu: u32) -> Mtu {
    match mtu.saturating_sub(RXE_MAX_HDR_LENGTH) {
        4096.. => Mtu::Mtu4096,
        2048.. => Mtu::Mtu2048,
        1024.. => Mtu::Mtu1024,
        512.. => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// The GID table of a RoCE v2 port on `iface` sending from `ipv4` and from the IPv6
/// addresses `ipv6` (those of the interface it receives on), in ib_core's order: the default
/// GID (`fe80::` and the EUI-64 of the MAC, `make_default_gid`) first, then the IPv4 address
/// (`enum_netdev_ipv4_ips`), then the IPv6 addresses (`enum_netdev_ipv6_ips`) but one equal
/// to the default GID, which the cache does not add twice. The interface's other IPv4
/// addresses are left out: other processes receive on them (docs/decisions.md, "A RoCE
/// device on a network interface"); so are IPv6 addresses the port does not receive on
/// ("IPv6 between hosts").
pub fn gid_table(iface: &Interface, ipv4: [u8; 4], ipv6: &[[u8; 16]]) -> Vec<Gid> {
    let default = Gid::link_local(eui64_of_mac(iface.mac));
    let mut gids = vec![default, Gid::from_ipv4(ipv4)];
    for a in iface.ipv6.iter().filter(|a| ipv6.contains(a)) {
        let g = Gid(*a);
        if !gids.contains(&g) {
            gids.push(g);
        }
    }
    gids
}

/// The port's addresses on `iface` when it sends from `ipv4` and the IPv6 addresses `ipv6`.
pub fn netdev_addr(iface: &Interface, ipv4: [u8; 4], ipv6: &[[u8; 16]]) -> NetdevAddr {
    NetdevAddr {
        name: iface.name.clone(),
        ifindex: iface.index,
        ipv4,
        ipv6: iface.ipv6.iter().filter(|a| ipv6.contains(a)).copied().collect(),
        ipv6_used: Default::default(),
        mac: iface.mac,
        gids: gid_table(iface, ipv4, ipv6),
        active_mtu: rxe_active_mtu(iface.mtu),
    }
}

/// Reads interface `name` of this process's network namespace: an error ([`Errno::NoDev`])
/// names it when it does not exist, or has no IPv4 address (softverbs sends RoCE v2 over
/// IPv4 on an interface).
pub fn lookup(name: &str) -> Result<Interface, Error> {
    let nodev = |why: String| Error::new(Errno::NoDev, format!("SOFTVERBS_NETDEV={name:?}: {why}"));
    let cname = CString::new(name).map_err(|_| nodev("the name holds a NUL byte".into()))?;
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(nodev(format!("not an interface name (1 to {} bytes)", libc::IFNAMSIZ - 1)));
    }
    // SAFETY: `cname` is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(nodev(format!(
            "no such network interface in this network namespace ({})",
            std::io::Error::last_os_error()
        )));
    }
    let (mac, mtu) =
        mac_and_mtu(name).map_err(|e| nodev(format!("reading its MAC and MTU: {e}")))?;
    let (ipv4, ipv6) = addresses(name).map_err(|e| nodev(format!("reading its addresses: {e}")))?;
    if ipv4.is_empty() {
        return Err(nodev(format!(
            "the interface has no IPv4 address (give it one: ip addr add 10.0.0.1/24 dev {name})"
        )));
    }
    Ok(Interface { name: name.to_string(), index, mac, mtu, ipv4, ipv6 })
}

/// An `ifreq` naming interface `name` (shorter than `IFNAMSIZ`, checked by the caller).
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is a C struct of integers, arrays and a union of them: all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    req
}

/// The interface's MAC (`SIOCGIFHWADDR`) and MTU (`SIOCGIFMTU`), asked of the kernel through
/// a socket, so that they are this network namespace's (sysfs may show another's).
fn mac_and_mtu(name: &str) -> std::io::Result<([u8; 6], u32)> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let mut req = ifreq(name);
    // SAFETY: `fd` is an open socket and `req` a valid ifreq the kernel fills.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled the union's hardware-address member.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, &b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = b as u8;
    }
    let mut req = ifreq(name);
    // SAFETY: as above.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled the union's MTU member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok((mac, u32::try_from(mtu).unwrap_or(0)))
}

/// An interface's IPv4 and IPv6 addresses.
type Addresses = (Vec<[u8; 4]>, Vec<[u8; 16]>);

/// The interface's IPv4 and IPv6 addresses, in the order `getifaddrs` lists them (the
/// kernel's, as `ip addr` shows).
fn addresses(name: &str) -> std::io::Result<Addresses> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, alive until freeifaddrs.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let ifname = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if ifa.ifa_addr.is_null() || ifname.to_bytes() != name.as_bytes() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family says its type.
        match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                v4.push(sin.sin_addr.s_addr.to_ne_bytes());
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                v6.push(sin6.sin6_addr.s6_addr);
            }
            _ => {}
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok((v4, v6))
}

/// How an interface's addresses read in an error or a log line.
pub fn describe(iface: &Interface) -> String {
    let v4: Vec<String> = iface.ipv4.iter().map(|a| Ipv4Addr::from(*a).to_string()).collect();
    let v6: Vec<String> = iface.ipv6.iter().map(|a| Ipv6Addr::from(*a).to_string()).collect();
    format!("{} (IPv4 {}; IPv6 {}; MTU {})", iface.name, v4.join(", "), v6.join(", "), iface.mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_is_rxe_s_choice() {
        // rxe_set_mtu: eth_mtu_int_to_enum(mtu - 80), at least 256.
        for (mtu, want) in [
            (1500, Mtu::Mtu1024),
            (1104, Mtu::Mtu1024),
            (1103, Mtu::Mtu512),
            (9000, Mtu::Mtu4096),
            (4176, Mtu::Mtu4096),
            (4175, Mtu::Mtu2048),
            (2128, Mtu::Mtu2048),
            (576, Mtu::Mtu256),
            (0, Mtu::Mtu256),
            (65536, Mtu::Mtu4096),
        ] {
            assert_eq!(rxe_active_mtu(mtu), want, "interface MTU {mtu}");
        }
    }

    #[test]
    fn the_gid_table_is_ib_core_s_order() {
        let ll: [u8; 16] = "fe80::1c71:a8ff:fe3c:600b".parse::<Ipv6Addr>().unwrap().octets();
        let global: [u8; 16] = "fd00::7".parse::<Ipv6Addr>().unwrap().octets();
        let other: [u8; 16] = "2001:db8::9".parse::<Ipv6Addr>().unwrap().octets();
        let iface = Interface {
            name: "veth0".into(),
            index: 7,
            mac: [0x1e, 0x71, 0xa8, 0x3c, 0x60, 0x0b],
            mtu: 1500,
            ipv4: vec![[10, 201, 0, 1], [10, 201, 0, 9]],
            ipv6: vec![global, ll, other],
        };
        let text = |gids: &[Gid]| -> Vec<String> {
            gids.iter().map(|g| Ipv6Addr::from(g.0).to_string()).collect()
        };
        // The default GID from the MAC (equal to the link-local address, not added twice),
        // the port's IPv4 address, the other IPv6 addresses in the interface's order: the
        // IPv4 users' index 1 stays where it was.
        let all = gid_table(&iface, [10, 201, 0, 1], &[other, ll, global]);
        assert_eq!(
            text(&all),
            ["fe80::1c71:a8ff:fe3c:600b", "::ffff:10.201.0.1", "fd00::7", "2001:db8::9"]
        );
        // Only the IPv6 addresses the port receives on are listed; the default GID always.
        let some = gid_table(&iface, [10, 201, 0, 1], &[other]);
        assert_eq!(text(&some), ["fe80::1c71:a8ff:fe3c:600b", "::ffff:10.201.0.1", "2001:db8::9"]);
        // A port of another IPv4 address: the default GID and its address.
        let none = gid_table(&iface, [10, 201, 0, 9], &[]);
        assert_eq!(text(&none), ["fe80::1c71:a8ff:fe3c:600b", "::ffff:10.201.0.9"]);
        let a = netdev_addr(&iface, [10, 201, 0, 9], &[ll, global]);
        assert_eq!((a.active_mtu, a.ipv4, a.mac), (Mtu::Mtu1024, [10, 201, 0, 9], iface.mac));
        assert_eq!(a.ipv6, [global, ll], "the interface's order");
        assert_eq!(text(&a.gids), ["fe80::1c71:a8ff:fe3c:600b", "::ffff:10.201.0.9", "fd00::7"]);
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = lookup("svnosuch0").expect_err("no such interface");
        assert_eq!(e.errno, Errno::NoDev);
        assert!(e.message.contains("SOFTVERBS_NETDEV=\"svnosuch0\""), "{}", e.message);
        assert!(e.message.contains("no such network interface"), "{}", e.message);
        let e = lookup("a-name-far-too-long-for-linux").expect_err("too long");
        assert!(e.message.contains("not an interface name"), "{}", e.message);
    }

    #[test]
    fn loopback_is_read() {
        // Every network namespace has lo, with 127.0.0.1 when it is up; its MTU is large.
        if let Ok(lo) = lookup("lo") {
            assert!(lo.ipv4.contains(&[127, 0, 0, 1]), "{}", describe(&lo));
            assert!(lo.mtu >= 1500, "{}", describe(&lo));
        }
    }
}
