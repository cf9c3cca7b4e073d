//! UD multicast: the groups this NIC's QPs are attached to (`ibv_attach_mcast`), and the
//! delivery of a datagram sent to a group to every QP attached to it, as rxe's
//! `rxe_mcast.c` keeps its groups and `rxe_rcv_mcast_pkt` delivers.

use verbs_api::{Errno, Error, Gid, QpType, Result};

use super::Nic;

/// The destination QP number of a datagram sent to a multicast group (`IB_MULTICAST_QPN`).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// `max_mcast_grp`: rxe's `RXE_MAX_MCAST_GRP`.
pub const MAX_MCAST_GRP: u32 = 8192;
/// `max_mcast_qp_attach`: rxe's `RXE_MAX_MCAST_QP_ATTACH`.
pub const MAX_MCAST_QP_ATTACH: u32 = 56;
/// `max_total_mcast_qp_attach`: rxe's `RXE_MAX_TOT_MCAST_QP_ATTACH`.
pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = 0x70000;

/// Whether `gid` is a multicast address, as the kernel's `rdma_is_multicast_addr`: an IPv6
/// multicast address (`ff00::/8`) or an IPv4-mapped one in `224.0.0.0/4`.
pub fn is_multicast_gid(gid: &Gid) -> bool {
    gid.0[0] == 0xff || gid.to_ipv4().is_some_and(is_multicast_ipv4)
}

/// Whether `ip` is an IPv4 multicast address (`224.0.0.0/4`).
pub fn is_multicast_ipv4(ip: [u8; 4]) -> bool {
    ip[0] & 0xF0 == 0xE0
}

/// What an attach or a detach did to the port's membership of the group: a host that tells
/// other ports which groups it receives (the soft fabric's registry) joins on the first QP
/// and leaves after the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// The first QP of this port attached to the group: the port joins it.
    Joined,
    /// The last QP of this port detached from the group: the port leaves it.
    Left,
    /// The port was and stays a member.
    Unchanged,
}

impl Nic {
    /// `ibv_attach_mcast` of QP `qpn` to the group `gid` (the LID means nothing on a RoCE
    /// port). `EINVAL` for a GID that is not multicast or a QP that is not UD, as the kernel's
    /// `ib_attach_mcast`; attaching twice is not an error and attaches once, as rxe's
    /// `rxe_attach_mcg`; `ENOMEM` past the device's limits, as rxe's.
    pub fn attach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<Membership> {
        const W: &str = "ibv_attach_mcast";
        self.check_mcast(W, qpn, &gid)?;
        let groups = self.mcast.len();
        let total: usize = self.mcast.values().map(Vec::len).sum();
        let members = self.mcast.get(&gid);
        if members.is_some_and(|m| m.contains(&qpn)) {
            return Ok(Membership::Unchanged);
        }
        let full = match members {
            None if groups >= MAX_MCAST_GRP as usize => Some("max_mcast_grp groups"),
            Some(m) if m.len() >= MAX_MCAST_QP_ATTACH as usize => {
                Some("max_mcast_qp_attach QPs in this group")
            }
            _ if total >= MAX_TOTAL_MCAST_QP_ATTACH as usize => {
                Some("max_total_mcast_qp_attach attachments")
            }
            _ => None,
        };
        if let Some(what) = full {
            return Err(Error::new(Errno::NoMem, format!("{W}: the device has {what} already")));
        }
        let members = self.mcast.entry(gid).or_default();
        members.push(qpn);
        Ok(if members.len() == 1 { Membership::Joined } else { Membership::Unchanged })
    }

    /// `ibv_detach_mcast`: `EINVAL` as [`Nic::attach_mcast`], and for a QP not attached to the
    /// group (rxe's `rxe_detach_mcg`).
    pub fn detach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<Membership> {
        self.check_mcast("ibv_detach_mcast", qpn, &gid)?;
        let members = self.mcast.get_mut(&gid);
        let Some(at) = members.as_ref().and_then(|m| m.iter().position(|&q| q == qpn)) else {
            return Err(Error::inval(format!(
                "ibv_detach_mcast: QP {qpn:#x} is not attached to {}",
                std::net::Ipv6Addr::from(gid.0)
            )));
        };
        let members = members.expect("found above");
        members.remove(at);
        if members.is_empty() {
            self.mcast.remove(&gid);
            return Ok(Membership::Left);
        }
        Ok(Membership::Unchanged)
    }

    /// The groups QP `qpn` is attached to (to detach it before it is destroyed).
    pub fn mcast_groups_of(&self, qpn: u32) -> Vec<Gid> {
        self.mcast.iter().filter(|(_, m)| m.contains(&qpn)).map(|(g, _)| *g).collect()
    }

    fn check_mcast(&self, verb: &str, qpn: u32, gid: &Gid) -> Result<()> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| Error::inval(format!("{verb}: QP {qpn:#x} does not exist")))?;
        if qp.qp_type != QpType::Ud {
            return Err(Error::inval(format!(
                "{verb}: QP {qpn:#x} is an {} QP; only a UD QP joins a multicast group",
                verbs_api::ibv::IbvEnum::ibv_name(qp.qp_type)
            )));
        }
        if !is_multicast_gid(gid) {
            return Err(Error::inval(format!(
                "{verb}: {} is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100)",
                std::net::Ipv6Addr::from(gid.0)
            )));
        }
        Ok(())
    }

    /// The QPs a datagram to the group `gid` goes to on this port: every QP attached to it
    /// but the one that sent it, when it came from this port (`from_self`: the sender's
    /// DETH source QP).
    pub(super) fn mcast_members(&self, gid: &Gid, from_self: Option<u32>) -> Vec<u32> {
        self.mcast
            .get(gid)
            .map(|m| m.iter().copied().filter(|&q| Some(q) != from_self).collect())
            .unwrap_or_default()
    }
}
