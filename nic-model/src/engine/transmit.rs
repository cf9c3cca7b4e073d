//! Transmit: how the packets the transport makes become IPv4/UDP datagrams, straight onto the
//! host's wire when they may go now, else into the transmit queue the host polls; and the
//! buffers the host gives back for reuse.

use crate::packet::{self, Ip6Udp, IpUdp, Packet};

use super::addr::Ip6Path;
use super::qp::Qp;
use super::{Hca, Nic};

/// The longest datagram that goes straight onto a host's [`Wire`] (built on the stack, then
/// copied into the wire's buffer); longer ones take the transmit queue, as fast for them
/// (docs/decisions.md, "Direct wire for small datagrams only").
const DIRECT_DATAGRAM: usize = 256;

/// Datagram buffers a NIC keeps for reuse ([`Nic::recycle`]): enough for a full send window
/// (512 packets) in flight on two QPs.
pub const SPARE_BUFFERS: usize = 1024;

/// The largest buffer a NIC keeps for reuse: an IPv4 datagram is at most 65535 bytes.
const SPARE_MAX_BYTES: usize = 1 << 16;

/// A datagram to put on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IPv4 address (a port: see [`slot_of_ip`](super::slot_of_ip)).
    pub dst: [u8; 4],
    /// The IPv4/UDP/RoCEv2 datagram.
    pub data: Vec<u8>,
}

/// What a [`Wire`] did with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireOutcome {
    /// It is on the wire.
    Sent,
    /// The wire has no room for it now (the destination's inbox is full).
    Full,
    /// No port has the destination address: the datagram is gone, as a NIC's is.
    Unreachable,
}

/// A way onto the wire that a host can lend its NIC ([`Nic::set_wire`]), so that a datagram
/// goes into the wire's own buffer (a ring slot) as soon as it is made, instead of into a
/// [`Transmit`] that waits in a queue until the host copies it there. While the NIC's transmit
/// queue is empty and the wire is not paused ([`Nic::pause_wire`]), every datagram of up to
/// 256 bytes goes this way (the ACKs and small messages that latency waits for); one the wire
/// refuses (`Full`) is queued for [`Nic::poll_transmit`], and so is everything after it, so
/// order holds. An ACK sent this way is not coalesced with the next.
pub trait Wire: Send {
    /// Puts `datagram` for `dst` on the wire (copies it into the wire's buffer), unless the
    /// outcome is `Full` or `Unreachable`.
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> WireOutcome;

    /// Direct reach: the bytes `ask` names in the memory of the port at `dst`, when this wire
    /// can reach them without packets, nothing observes it, and the responder's published
    /// rights allow the access (`engine::reach`); None sends packets, which every wire can.
    fn reach(&mut self, _dst: [u8; 4], _ask: &super::ReachAsk) -> Option<super::Reached<'_>> {
        None
    }

    /// Whether [`Wire::reach`] may succeed at all (a cheap test made before each candidate
    /// WR's checks, so that a wire that never reaches costs nothing).
    fn reaches(&self) -> bool {
        false
    }

    /// Whether datagrams may go onto this wire without their ICRC
    /// ([`Wire::send_without_icrc`]): true only for a wire on which nothing can look at them
    /// on the sender's side (no capture, tap or fault plan), whose receivers set or skip the
    /// ICRC themselves (docs/architecture.md, "The ICRC where nobody looks"). Asked once,
    /// when the wire is lent ([`Nic::set_wire`]).
    fn takes_unset_icrc(&self) -> bool {
        false
    }

    /// [`Wire::send`] of a datagram whose ICRC the engine left unset
    /// ([`packet::Icrc::Unset`]: four zero bytes), marked so for its receiver; called only on
    /// a wire that [`takes_unset_icrc`](Wire::takes_unset_icrc). The default sets the ICRC in
    /// a copy and sends that, so it is right on any wire.
    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> WireOutcome {
        self.send(dst, &packet::with_icrc_ipv4(datagram))
    }
}

impl Nic {
    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.hca.last_tx_ack = None;
        self.hca.tx.pop_front()
    }

    /// Give back the buffer of a datagram this NIC transmitted once its bytes are no longer
    /// needed (delivered and handled, or copied onto a wire), so that a later transmit reuses
    /// the allocation, as a NIC reuses its transmit ring. Optional: a buffer not given back is
    /// simply freed; any `Vec` is accepted. At most [`SPARE_BUFFERS`] are kept, so a NIC holds
    /// no more than it once had in flight.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.hca.recycle(buf);
    }

    /// Lend the NIC a way onto the wire (see [`Wire`]); `None` takes it back, after which
    /// every datagram is queued for [`Nic::poll_transmit`]. Datagrams queued that way always
    /// carry their ICRC; those sent straight onto a wire that
    /// [`takes_unset_icrc`](Wire::takes_unset_icrc) do not.
    pub fn set_wire(&mut self, wire: Option<Box<dyn Wire>>) {
        self.hca.direct_icrc = match wire.as_deref().is_some_and(|w| w.takes_unset_icrc()) {
            true => packet::Icrc::Unset,
            false => packet::Icrc::Carried,
        };
        self.hca.wire = wire;
    }

    /// The wire lent with [`Nic::set_wire`], for the host to send what it polled through it.
    pub fn wire_mut(&mut self) -> Option<&mut (dyn Wire + 'static)> {
        self.hca.wire.as_deref_mut()
    }

    /// While `paused`, datagrams are queued rather than emitted through the wire: a host
    /// pauses it while it holds datagrams the wire refused, so that none overtakes them.
    pub fn pause_wire(&mut self, paused: bool) {
        self.hca.wire_paused = paused;
    }

    /// Whether datagrams are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.hca.tx.is_empty()
    }
}

impl Hca {
    /// Emit one packet of `qp` to its destination; whether it was queued (see
    /// [`Hca::transmit_to`]).
    pub(crate) fn transmit(&mut self, qp: &Qp, pkt: &Packet<'_>) -> bool {
        match &qp.ip6 {
            None => self.transmit_to(qp.dst_ip, qp.ip_tos_ttl, qp.sport, pkt),
            Some(path) => self.transmit6(qp.dst_ip, path, qp.ip_tos_ttl, qp.sport, pkt),
        }
    }

    /// Emit one packet of a QP whose path is IPv6 (RoCE v2 over IPv6) to the port at `dst`:
    /// into a buffer of the spare pool, then straight onto the host's wire if it may go now,
    /// else into the transmit queue. Returns whether it was queued. The GRH's traffic class
    /// and hop limit are the IPv6 header's, as the IPv4 TOS and TTL are over IPv4.
    fn transmit6(
        &mut self,
        dst: [u8; 4],
        path: &Ip6Path,
        (traffic_class, hop_limit): (u8, u8),
        src_port: u16,
        pkt: &Packet<'_>,
    ) -> bool {
        self.next_datagram();
        let ip = Ip6Udp {
            src: path.src,
            dst: path.dst,
            src_port,
            traffic_class,
            flow_label: path.flow_label,
            hop_limit,
        };
        let mut data = self.spare.pop().unwrap_or_default();
        packet::emit_datagram6(&ip, pkt, &mut data)
            .expect("the engine builds only packets its opcode table allows, at most an MTU long");
        if let Some(wire) = self.direct_wire() {
            if wire.send(dst, &data) != WireOutcome::Full {
                self.recycle(data);
                return false;
            }
        }
        self.tx.push_back(Transmit { dst, data });
        true
    }

    /// Take back the last queued datagram if it is an ACK of `qpn` (see `resp::ack`).
    pub(crate) fn retract_ack(&mut self, qpn: u32) {
        if self.last_tx_ack == Some(qpn) {
            if let Some(t) = self.tx.pop_back() {
                self.stats.tx_packets -= 1;
                self.recycle(t.data);
            }
        }
    }

    /// Take back the requests of `qp` still waiting in the transmit queue, because a go-back-N
    /// retry is about to make them again from the PSN it goes back to: a NIC rewinds its send
    /// queue, and what had not left its port yet then goes once, from there, rather than once
    /// stale and once again. A host that paces its NIC by its line rate (the simulator) leaves
    /// a window's worth here; one that drains the queue at once leaves nothing. Returns the
    /// PSN of the first request taken back, which had never been sent. Runs on a retry only.
    pub(crate) fn unqueue_requests(&mut self, qp: &Qp) -> Option<packet::Psn> {
        const BTH: usize = packet::IPV4_UDP_LEN;
        let (dst, dest_qp) = (qp.dst_ip, qp.attr.dest_qp_num);
        let mut first = None;
        let mut kept = 0;
        for i in 0..self.tx.len() {
            let d = &self.tx[i].data;
            let request = self.tx[i].dst == dst
                && d.len() >= BTH + packet::Bth::LEN
                && u32::from_be_bytes([0, d[BTH + 5], d[BTH + 6], d[BTH + 7]]) == dest_qp
                && packet::Opcode(d[BTH])
                    .info()
                    .is_some_and(|o| o.flags.contains(packet::OpFlags::REQUEST));
            if !request {
                self.tx.swap(kept, i);
                kept += 1;
                continue;
            }
            if first.is_none() {
                let psn = u32::from_be_bytes([0, d[BTH + 9], d[BTH + 10], d[BTH + 11]]);
                first = Some(packet::Psn::new(psn));
            }
        }
        while self.tx.len() > kept {
            let t = self.tx.pop_back().expect("more than `kept` datagrams are queued");
            self.stats.tx_packets -= 1;
            self.recycle(t.data);
        }
        if first.is_some() {
            // The last queued datagram may no longer be the ACK `retract_ack` would replace.
            self.last_tx_ack = None;
        }
        first
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_MAX_BYTES {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Emit one packet: straight onto the host's wire if it is small and may go now (see
    /// [`Wire`]), else into the transmit queue. Returns whether it was queued.
    pub(crate) fn transmit_to(
        &mut self,
        dst: [u8; 4],
        (tos, ttl): (u8, u8),
        sport: u16,
        pkt: &Packet<'_>,
    ) -> bool {
        let ip = self.next_ip_udp(dst, (tos, ttl), sport);
        let len = packet::engine_datagram_len(pkt);
        if len <= DIRECT_DATAGRAM && self.direct_wire().is_some() {
            // Built in cache-hot memory, then copied: built in the ring slot, its ICRC waits for
            // lines still owned by the reader's core (docs/decisions.md, "Build a direct
            // datagram on the stack, then copy").
            let mut local = [0u8; DIRECT_DATAGRAM];
            let icrc = self.direct_icrc;
            packet::emit_engine_datagram_into(&ip, pkt, &mut local[..len], icrc);
            return self.send_built(dst, &mut local[..len], icrc);
        }
        let mut data = self.spare.pop().unwrap_or_default();
        packet::emit_engine_datagram(&ip, pkt, &mut data);
        self.tx.push_back(Transmit { dst, data });
        true
    }

    /// [`Hca::transmit_to`] for the requester's fast path (`req::post_now`): a request of
    /// `qp` built without a [`Packet`] (`packet::emit_request_into`; the headers are the ones
    /// `bth.opcode` lists), small enough to go straight onto the wire, as `post_now` made sure
    /// it may (a wire that refuses it queues it, as `send_built` does).
    pub(crate) fn transmit_request(
        &mut self,
        qp: &Qp,
        bth: &packet::Bth,
        reth: Option<&packet::Reth>,
        imm: Option<u32>,
        payload: &[u8],
    ) {
        let ip = self.next_ip_udp(qp.dst_ip, qp.ip_tos_ttl, qp.sport);
        let mut local = [0u8; DIRECT_DATAGRAM];
        let icrc = self.icrc_for_direct();
        let len = packet::emit_request_into(&ip, bth, reth, imm, payload, &mut local, icrc);
        self.send_built(qp.dst_ip, &mut local[..len], icrc);
    }

    /// Emit an ACKNOWLEDGE (an ACK or a NAK) of `qp` from its template: the same datagram
    /// [`Hca::transmit`] would build, for a fraction of the work. Returns whether it was
    /// queued (rather than emitted through the host's wire).
    pub(crate) fn transmit_aeth(&mut self, qp: &Qp, psn: packet::Psn, aeth: packet::Aeth) -> bool {
        let Some(template) = &qp.ack_template else {
            let bth = packet::Bth {
                opcode: packet::Opcode::RC_ACKNOWLEDGE,
                pkey: 0xFFFF,
                dest_qp: qp.attr.dest_qp_num,
                psn,
                ..packet::Bth::default()
            };
            let mut p = Packet::new(bth, &[]);
            p.aeth = Some(aeth);
            return self.transmit(qp, &p);
        };
        let ident = self.next_datagram();
        let mut local = [0u8; packet::ACK_DATAGRAM_LEN];
        let icrc = self.icrc_for_direct();
        template.emit_into(ident, psn, aeth, &mut local, icrc);
        self.send_built(qp.dst_ip, &mut local, icrc)
    }

    /// Accounts for one more datagram sent and returns its IPv4 identification. It ends any
    /// chance of replacing the last queued ACK (`resp::ack`).
    fn next_datagram(&mut self) -> u16 {
        self.last_tx_ack = None;
        self.stats.tx_packets += 1;
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// The IPv4 and UDP fields of the next datagram this NIC sends to `dst` ([`next_datagram`]
    /// accounts for it and gives its identification).
    ///
    /// [`next_datagram`]: Hca::next_datagram
    fn next_ip_udp(&mut self, dst: [u8; 4], (tos, ttl): (u8, u8), sport: u16) -> IpUdp {
        let ident = self.next_datagram();
        IpUdp { src: self.cfg.ip(), dst, src_port: sport, ident, tos, ttl, ..IpUdp::default() }
    }

    /// How a datagram about to be built for [`Hca::send_built`] treats its ICRC: unset only
    /// if it may go straight onto a wire that takes it so (one that goes into the queue
    /// instead has it set after all).
    #[inline]
    fn icrc_for_direct(&self) -> packet::Icrc {
        match self.may_send_direct() {
            true => self.direct_icrc,
            false => packet::Icrc::Carried,
        }
    }

    /// Sends a datagram already built (its ICRC set or not, as `icrc` says): onto the host's
    /// wire if it may go now and the wire takes it, else into the transmit queue, with its
    /// ICRC set. Returns whether it was queued.
    fn send_built(&mut self, dst: [u8; 4], bytes: &mut [u8], icrc: packet::Icrc) -> bool {
        if let Some(wire) = self.direct_wire() {
            let outcome = match icrc {
                packet::Icrc::Carried => wire.send(dst, bytes),
                packet::Icrc::Unset => wire.send_without_icrc(dst, bytes),
            };
            if outcome != WireOutcome::Full {
                return false;
            }
        }
        if icrc == packet::Icrc::Unset {
            // A queued datagram may meet a tap or a capture before it goes: it is whole.
            packet::set_icrc_ipv4(bytes);
        }
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        self.tx.push_back(Transmit { dst, data });
        true
    }

    /// Whether a datagram may go straight onto the host's wire now (see [`Hca::direct_wire`]).
    pub(crate) fn may_send_direct(&self) -> bool {
        self.tx.is_empty() && !self.wire_paused && self.wire.is_some()
    }

    /// The host's wire, if a datagram may go straight onto it now: nothing is queued ahead of
    /// it and the host holds nothing the wire refused.
    fn direct_wire(&mut self) -> Option<&mut (dyn Wire + 'static)> {
        match self.may_send_direct() {
            true => self.wire.as_deref_mut(),
            false => None,
        }
    }
}
