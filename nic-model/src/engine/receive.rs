//! Receive dispatch: a datagram from the wire goes to its QP's responder (requests) or
//! completer (responses), by a fast path for the packets latency waits on or in full.

use verbs_api::QpType;

use crate::packet;

use super::time::{Nanos, Now};
use super::timers::refile_timer;
use super::{comp, req, resp, Nic};

impl Nic {
    /// A datagram arrived from the wire. Malformed packets (bad ICRC, truncated, foreign) are
    /// dropped and counted, never trusted; so are RC and UC packets that do not come from
    /// their QP's peer.
    pub fn handle_packet(&mut self, now: Nanos, data: &[u8]) {
        self.handle_packet_at(&mut Now::At(now), data);
    }

    /// [`Nic::handle_packet`] at a time that may be read only if the packet needs it.
    #[inline]
    pub fn handle_packet_at(&mut self, now: &mut Now<'_>, data: &[u8]) {
        self.handle_packet_with(now, data, packet::Icrc::Carried);
    }

    /// [`Nic::handle_packet_at`] of a datagram that carries its ICRC or not (`icrc`): a host
    /// whose wire told it the sender left the ICRC unset, and which has nothing that looks at
    /// the datagram, passes [`packet::Icrc::Unset`], and every check but the ICRC's is made
    /// (docs/architecture.md, "The ICRC where nobody looks"). IPv6 datagrams always carry it.
    pub fn handle_packet_with(&mut self, now: &mut Now<'_>, data: &[u8], icrc: packet::Icrc) {
        // The packets latency waits on take fast paths that read them without building a
        // `Packet`: an RC SEND ONLY in sequence with a receive posted for it (the responder's),
        // and an RC ACKNOWLEDGE (the completer's). Anything else, or anything wrong with them,
        // takes the general path, which also says what is wrong. The opcode picks the path
        // before anything is checked, so no datagram is checked twice. Each path checks that
        // an RC or UC packet comes from its QP's path (`Qp::is_from_path`) before it touches the
        // QP; the fast paths leave a stranger's packet to the general path, which counts it.
        match packet::opcode_of(data) {
            Some(packet::Opcode::RC_SEND_ONLY | packet::Opcode::RC_SEND_ONLY_WITH_IMMEDIATE) => {
                if let Some(send) = packet::peek_rc_send_only(data, icrc) {
                    if let Some(qp) = self.qps.get_mut(&send.bth.dest_qp) {
                        if qp.is_from_path(send.src)
                            && resp::receive_send_only(qp, &mut self.hca, &send)
                        {
                            self.hca.stats.rx_packets += 1;
                            req::drive(qp, &mut self.hca, now);
                            refile_timer(&mut self.timers, qp);
                            return;
                        }
                    }
                }
            }
            Some(packet::Opcode::RC_ACKNOWLEDGE) => {
                if let Some(ack) = packet::peek_rc_acknowledge(data, icrc) {
                    if let Some(qp) = self.qps.get_mut(&ack.bth.dest_qp) {
                        if qp.qp_type == QpType::Rc && qp.is_from_path(ack.src) {
                            self.hca.stats.rx_packets += 1;
                            comp::handle_acknowledge(qp, &mut self.hca, now, ack.bth.psn, ack.aeth);
                            req::drive(qp, &mut self.hca, now);
                            refile_timer(&mut self.timers, qp);
                            return;
                        }
                    }
                }
            }
            _ => {}
        }
        self.handle_packet_general(now, data, icrc);
    }

    /// [`Nic::handle_packet_at`] without the responder's fast path: every packet parsed in
    /// full (the fast path's tests compare the two).
    pub(super) fn handle_packet_general(
        &mut self,
        now: &mut Now<'_>,
        data: &[u8],
        icrc: packet::Icrc,
    ) {
        // RoCE v2 over IPv6 (a QP sending from a link-local GID), else over IPv4.
        let parsed = match data.first() {
            Some(b) if b >> 4 == 6 => {
                packet::parse_datagram6(data).map(|(ip, p)| (Src::V6(ip.src), p))
            }
            _ => packet::parse_datagram_with(data, icrc).map(|(ip, p)| {
                if p.bth.dest_qp == super::MULTICAST_QPN && super::is_multicast_ipv4(ip.dst) {
                    (Src::Group(ip.src, ip.dst), p)
                } else {
                    (Src::V4(ip.src), p)
                }
            }),
        };
        let (src, pkt) = match parsed {
            Ok(v) => v,
            Err(e) => {
                self.hca.stats.rx_malformed += 1;
                if matches!(e, packet::PacketError::BadIcrc { .. }) {
                    self.hca.stats.rx_bad_icrc += 1;
                }
                return;
            }
        };
        self.hca.stats.rx_packets += 1;
        if let Src::Group(from, group) = src {
            return self.receive_multicast(from, group, &data[..20], &pkt);
        }
        let Some(qp) = self.qps.get_mut(&pkt.bth.dest_qp) else {
            self.hca.stats.rx_no_qp += 1;
            return;
        };
        let Some(info) = pkt.bth.opcode.info() else {
            self.hca.stats.rx_malformed += 1;
            return;
        };
        let transport_ok = matches!(
            (info.transport, qp.qp_type),
            (packet::Transport::Rc, QpType::Rc)
                | (packet::Transport::Uc, QpType::Uc)
                | (packet::Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            self.hca.stats.rx_no_qp += 1;
            return;
        }
        let from_path = match &src {
            Src::V4(ip) => qp.is_from_path(*ip),
            Src::V6(ip) => qp.is_from_path6(ip),
            Src::Group(..) => false,
        };
        if !from_path {
            self.hca.stats.rx_wrong_source += 1;
            return;
        }
        if info.flags.contains(packet::OpFlags::REQUEST) {
            // The IP header a UD receive's GRH area holds: the IPv4 header (after 20 zero
            // bytes) or the 40-byte IPv6 header, as rxe writes them.
            let ip_header: &[u8] = match src {
                Src::V4(_) => &data[..20],
                Src::V6(_) => &data[..40],
                Src::Group(..) => return,
            };
            resp::handle_request(qp, &mut self.hca, ip_header, &pkt);
        } else {
            comp::handle_response(qp, &mut self.hca, now, &pkt);
        }
        req::drive(qp, &mut self.hca, now);
        refile_timer(&mut self.timers, qp);
    }
}

/// Where a parsed datagram came from: the source address of its IP header.
enum Src {
    /// RoCE v2 over IPv4.
    V4([u8; 4]),
    /// RoCE v2 over IPv6.
    V6([u8; 16]),
    /// A UD datagram to a multicast group (QPN 0xFFFFFF, an IPv4 multicast destination):
    /// its source and the group's address.
    Group([u8; 4], [u8; 4]),
}

impl Nic {
    /// A UD datagram sent to the group `group` goes to each QP of this NIC attached to it,
    /// as rxe's `rxe_rcv_mcast_pkt` delivers it, each QP checking its Q_Key and taking a
    /// receive of its own; the QP that sent it (when it came from this port) is left out.
    fn receive_multicast(
        &mut self,
        from: [u8; 4],
        group: [u8; 4],
        ip_header: &[u8],
        pkt: &packet::Packet<'_>,
    ) {
        let ud = pkt.bth.opcode.info().is_some_and(|i| i.transport == packet::Transport::Ud);
        let own = (from == self.hca.cfg.ip()).then(|| pkt.deth.map(|d| d.src_qp)).flatten();
        let members = self.mcast_members(&verbs_api::Gid::from_ipv4(group), own);
        if !ud || members.is_empty() {
            self.hca.stats.rx_no_qp += 1;
            return;
        }
        for qpn in members {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                resp::handle_request(qp, &mut self.hca, ip_header, pkt);
            }
        }
    }
}
