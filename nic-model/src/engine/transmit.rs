//! Transmit, the NIC's way out: how the packets the transport makes become IPv4/UDP
//! datagrams, straight onto the host's [`Egress`] when they may go now, else into the NIC's
//! one transmit queue, which the NIC itself drains into the egress ([`Nic::flush_transmit`])
//! or the host pulls ([`Nic::poll_transmit`]); and the buffers given back for reuse. All of it
//! is the transmit room ([`TxRoom`]), which the rest of the NIC reaches as `hca.tx`.

use std::collections::VecDeque;

use crate::packet::{self, Icrc, Ip6Udp, IpUdp, Packet};

use super::addr::Ip6Path;
use super::qp::Qp;
use super::reach::{ReachAsk, ReachOp};
use super::{Hca, Nic};

/// The longest datagram that goes straight onto a host's [`Egress`] (built on the stack, then
/// copied into the egress's buffer); longer ones take the transmit queue, as fast for them
/// (docs/decisions.md, "Direct wire for small datagrams only").
const DIRECT_DATAGRAM: usize = 256;

/// The most datagrams of the transmit queue offered to the egress at once
/// ([`Egress::send_batch`]): one `sendmmsg` on the UDP wire.
pub const SEND_BATCH: usize = 64;

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

/// What an [`Egress`] did with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// It is on its way (in the destination's inbox, or taken by a layer that delays or
    /// loses it as a link would).
    Sent,
    /// No room for it now (the destination's inbox is full): backpressure, try again later.
    Full,
    /// No port has the destination address (or its owner is dead): the datagram is gone, as a
    /// NIC's is, and RC will retry and eventually report `RETRY_EXC_ERR`.
    Unreachable,
}

/// The way out that a host lends its NIC ([`Nic::set_egress`]): a port's sending half, or
/// layers around one (a capture, a tap, a fault plan), as smoltcp's `PcapWriter` and
/// `FaultInjector` wrap a device. A datagram goes into the egress's own buffer (a ring slot)
/// as soon as it is made, instead of into a [`Transmit`] that waits in a queue. While the
/// NIC's transmit queue is empty, every datagram of up to 256 bytes goes this way (the ACKs
/// and small messages that latency waits for); one the egress refuses (`Full`) is queued, and
/// so is everything after it, so order holds; the NIC sends its queue through the same
/// egress when the host calls [`Nic::flush_transmit`]. An ACK sent straight out is not
/// coalesced with the next.
///
/// The calls go one way: the engine calls the egress, which never calls the engine back.
pub trait Egress: Send {
    /// Puts `datagram` for `dst` on its way (copies it into the egress's buffer), unless the
    /// outcome is `Full` or `Unreachable`.
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome;

    /// Direct reach: does `op` in the memory of the port at `dst`, at the range and with the
    /// right `ask` names, when this egress can reach that memory without packets, nothing
    /// observes it, and the responder's published rights allow the access (`engine::reach`).
    /// Returns the word an atomic found there (0 for a WRITE or READ); None, having done
    /// nothing, sends packets, which every egress can.
    fn reach(&mut self, _dst: [u8; 4], _ask: &ReachAsk, _op: &ReachOp<'_>) -> Option<u64> {
        None
    }

    /// Whether [`Egress::reach`] may succeed at all (a cheap test made before each candidate
    /// WR's checks, so that an egress that never reaches costs nothing).
    fn reaches(&self) -> bool {
        false
    }

    /// Whether datagrams may go out without their ICRC ([`Egress::send_without_icrc`]): true
    /// only for an egress on which nothing can look at them on the sender's side (no capture,
    /// tap or fault plan), whose receivers set or skip the ICRC themselves
    /// (docs/architecture.md, "The ICRC where nobody looks"). Asked once, when the egress is
    /// lent ([`Nic::set_egress`]).
    fn takes_unset_icrc(&self) -> bool {
        false
    }

    /// [`Egress::send`] of a datagram whose ICRC the engine left unset
    /// ([`packet::Icrc::Unset`]: four zero bytes), marked so for its receiver; called only on
    /// an egress that [`takes_unset_icrc`](Egress::takes_unset_icrc). The default sets the
    /// ICRC in a copy and sends that, so it is right on any egress.
    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.send(dst, &packet::with_icrc_ipv4(datagram))
    }

    /// Sends what the egress held back and whose time has come (a fault plan's reordered
    /// datagrams); whether it sent or dropped any. [`Nic::flush_transmit`] calls it first.
    fn release(&mut self) -> bool {
        false
    }

    /// Whether the port at `dst` is alive and has datagrams in its inbox it has not taken
    /// yet: its NIC is late, not the network lossy. A local ACK timeout then waits another
    /// timeout instead of spending a retry, as a hardware NIC (or rxe's softirq) would have
    /// answered whatever its host's CPUs were doing, where a software NIC's thread can be
    /// starved or stopped. Asked only when a timer fires. Only an egress whose delivery
    /// loses nothing says yes; the default (and any layer that loses datagrams on purpose,
    /// a fault plan) says no.
    fn peer_busy(&self, _dst: [u8; 4]) -> bool {
        false
    }

    /// Sends datagrams of `batch` in order, as many as it can at once (one system call for
    /// several where the egress can: the UDP wire's `sendmmsg`), writing each one's outcome
    /// into `outcomes` and stopping after the first `Full`; returns how many outcomes it
    /// wrote: at least one while `batch` and `outcomes` are not empty, at most either's
    /// length. Those it wrote are the first datagrams of `batch`, each sent at most once; the
    /// rest were not touched. [`Nic::flush_transmit`] sends its queue this way. The default
    /// sends them one by one with [`Egress::send`], so layers that look at each datagram (a
    /// capture, a fault plan) see each as before.
    fn send_batch(&mut self, batch: &[Transmit], outcomes: &mut [SendOutcome]) -> usize {
        let mut n = 0;
        for (t, out) in batch.iter().zip(outcomes.iter_mut()) {
            *out = self.send(t.dst, &t.data);
            n += 1;
            if *out == SendOutcome::Full {
                break;
            }
        }
        n
    }
}

/// A boxed egress is one: so layers compose over an egress chosen at run time.
impl<E: Egress + ?Sized> Egress for Box<E> {
    #[inline]
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        (**self).send(dst, datagram)
    }
    #[inline]
    fn reach(&mut self, dst: [u8; 4], ask: &ReachAsk, op: &ReachOp<'_>) -> Option<u64> {
        (**self).reach(dst, ask, op)
    }
    #[inline]
    fn reaches(&self) -> bool {
        (**self).reaches()
    }
    #[inline]
    fn takes_unset_icrc(&self) -> bool {
        (**self).takes_unset_icrc()
    }
    #[inline]
    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        (**self).send_without_icrc(dst, datagram)
    }
    #[inline]
    fn release(&mut self) -> bool {
        (**self).release()
    }
    fn peer_busy(&self, dst: [u8; 4]) -> bool {
        (**self).peer_busy(dst)
    }
    #[inline]
    fn send_batch(&mut self, batch: &[Transmit], outcomes: &mut [SendOutcome]) -> usize {
        (**self).send_batch(batch, outcomes)
    }
}

/// What one [`Nic::flush_transmit`] did, for the host's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use = "refused datagrams are the host's counters to keep"]
pub struct Flushed {
    /// Whether anything left the queue (sent, lost, dropped) or the egress released
    /// something it held.
    pub moved: bool,
    /// RC and UC datagrams that began to wait for room in the queue: the one the egress
    /// refused, unless it was waiting already, and every one behind it that was not.
    pub backpressured: u64,
    /// UD datagrams the egress refused from the queue, dropped (UD never retransmits: this
    /// is loss the program sees, as behind a congested switch).
    pub ud_dropped: u64,
}

/// The transmit room: the NIC's one transmit queue and everything it takes to emit a
/// datagram. Nothing else in the NIC holds a datagram on its way out.
pub(crate) struct TxRoom {
    /// Datagrams made and not yet sent, in order. The first `refused` of them met a full
    /// destination on a flush and wait for room; nothing goes straight out while any wait.
    queue: VecDeque<Transmit>,
    refused: usize,
    /// The QP whose ACK is the last datagram in `queue`, if it is one and has not been
    /// offered to the egress: a later ACK of that QP replaces it (`resp::ack`).
    last_ack: Option<u32>,
    /// The host's egress, if it lent one ([`Nic::set_egress`]).
    egress: Option<Box<dyn Egress>>,
    /// Whether datagrams that go straight out carry their ICRC: `Unset` only on an egress
    /// that takes them without (`Egress::takes_unset_icrc`, asked when it was lent).
    direct_icrc: Icrc,
    /// Datagram buffers given back with [`Nic::recycle`], reused by the next transmits.
    spare: Vec<Vec<u8>>,
    /// The requester's payload buffer, kept between calls so sending allocates nothing.
    pub(crate) scratch: Vec<u8>,
    /// The IPv4 identification of the last datagram.
    ip_ident: u16,
}

impl TxRoom {
    pub(crate) fn new() -> TxRoom {
        TxRoom {
            queue: VecDeque::new(),
            refused: 0,
            last_ack: None,
            egress: None,
            direct_icrc: Icrc::Carried,
            spare: Vec::new(),
            scratch: Vec::new(),
            ip_ident: 0,
        }
    }

    /// The ACK of `qpn` just queued is the queue's last datagram (see `resp::ack`).
    pub(crate) fn queued_ack(&mut self, qpn: u32) {
        self.last_ack = Some(qpn);
    }

    /// Whether direct reach may be tried: the host lent an egress that reaches, and no
    /// datagram waits for room (whatever waits was posted before and goes first).
    #[inline]
    pub(crate) fn may_reach(&self) -> bool {
        self.refused == 0 && self.egress.as_deref().is_some_and(|e| e.reaches())
    }

    /// Direct reach through the egress (see [`Egress::reach`]).
    #[inline]
    pub(crate) fn reach(&mut self, dst: [u8; 4], ask: &ReachAsk, op: &ReachOp<'_>) -> Option<u64> {
        self.egress.as_deref_mut()?.reach(dst, ask, op)
    }

    /// [`Egress::peer_busy`] of the lent egress (no egress: no).
    #[cold]
    pub(crate) fn peer_busy(&self, dst: [u8; 4]) -> bool {
        self.egress.as_deref().is_some_and(|e| e.peer_busy(dst))
    }

    fn recycle(spare: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
        if spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_MAX_BYTES {
            buf.clear();
            spare.push(buf);
        }
    }

    /// Whether a datagram may go straight out now: the host lent an egress and nothing is
    /// queued ahead (nothing waits for room either, then).
    #[inline]
    fn may_send_direct(&self) -> bool {
        self.queue.is_empty() && self.egress.is_some()
    }

    /// The egress, if a datagram may go straight onto it now.
    #[inline]
    fn direct(&mut self) -> Option<&mut (dyn Egress + 'static)> {
        match self.queue.is_empty() {
            true => self.egress.as_deref_mut(),
            false => None,
        }
    }
}

impl Nic {
    /// The next datagram to send, for a host that puts the queue on the wire itself (the
    /// simulator, which paces it by its links).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let tx = &mut self.hca.tx;
        tx.last_ack = None;
        let t = tx.queue.pop_front()?;
        tx.refused = tx.refused.saturating_sub(1);
        Some(t)
    }

    /// [`Nic::poll_transmit`] for a host that paces flows apart (the simulator's congestion
    /// control, whose rate limiter holds back one QP): the first queued datagram `may_send`
    /// accepts, so that a held-back flow does not hold back the flows queued behind it, as a
    /// NIC's per-QP scheduler does not. `may_send` sees the datagrams in queue order and must
    /// refuse every later datagram of a flow it refused once in the same call, so that each
    /// flow's datagrams keep their order. It costs a scan of the queue when the head is
    /// refused; [`Nic::poll_transmit`], which the simulator calls when no flow is paced, is
    /// unchanged. Datagrams an egress refused (never in the simulator) go first, unasked.
    pub fn poll_transmit_where(
        &mut self,
        mut may_send: impl FnMut(&Transmit) -> bool,
    ) -> Option<Transmit> {
        if self.hca.tx.refused > 0 {
            return self.poll_transmit();
        }
        let tx = &mut self.hca.tx;
        let at = (0..tx.queue.len()).find(|&i| may_send(&tx.queue[i]))?;
        // `retract_ack` replaces the last queued datagram only if it still is that ACK.
        tx.last_ack = None;
        tx.queue.remove(at)
    }

    /// Give back the buffer of a datagram this NIC transmitted once its bytes are no longer
    /// needed (delivered and handled, or copied onto a wire), so that a later transmit reuses
    /// the allocation, as a NIC reuses its transmit ring. Optional: a buffer not given back is
    /// simply freed; any `Vec` is accepted. At most [`SPARE_BUFFERS`] are kept, so a NIC holds
    /// no more than it once had in flight.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        TxRoom::recycle(&mut self.hca.tx.spare, buf);
    }

    /// Lend the NIC a way out (see [`Egress`]); `None` takes it back, after which every
    /// datagram is queued for [`Nic::poll_transmit`]. Datagrams queued always carry their
    /// ICRC; those sent straight out through an egress that
    /// [`takes_unset_icrc`](Egress::takes_unset_icrc) do not. The host never borrows the
    /// egress back: the NIC sends its queue through it ([`Nic::flush_transmit`]).
    pub fn set_egress(&mut self, egress: Option<Box<dyn Egress>>) {
        let tx = &mut self.hca.tx;
        tx.direct_icrc = match egress.as_deref().is_some_and(|e| e.takes_unset_icrc()) {
            true => Icrc::Unset,
            false => Icrc::Carried,
        };
        tx.egress = egress;
    }

    /// Sends the transmit queue through the lent egress, in order, until the egress refuses
    /// one for want of room (first letting the egress release what it held back, see
    /// [`Egress::release`]). A refused RC or UC datagram waits at the head of the queue with
    /// everything behind it (backpressure: retried on the next flush, nothing lost, nothing
    /// overtakes it, and nothing goes straight out meanwhile); a refused UD datagram is
    /// dropped, as a congested switch drops it. Without an egress it does nothing. The host
    /// calls it after each call that may have queued datagrams ([`Nic::has_transmit`]), and
    /// soon again while some wait ([`Nic::transmit_waits`]).
    pub fn flush_transmit(&mut self) -> Flushed {
        let TxRoom { queue, refused, last_ack, egress, spare, .. } = &mut self.hca.tx;
        let mut out = Flushed::default();
        let Some(egress) = egress.as_deref_mut() else { return out };
        out.moved = egress.release();
        *last_ack = None;
        // The queue's head goes in batches (Egress::send_batch): what each datagram became
        // is decided in order, exactly as if they went one by one.
        let mut outcomes = [SendOutcome::Full; SEND_BATCH];
        'queue: while !queue.is_empty() {
            let sent = egress.send_batch(queue.as_slices().0, &mut outcomes);
            debug_assert!(sent >= 1, "an egress sends at least one datagram of a batch");
            for &outcome in &outcomes[..sent.min(SEND_BATCH)] {
                let t = queue.front().expect("an outcome for each datagram of the queue");
                match outcome {
                    SendOutcome::Full if !is_ud(&t.data) => {
                        out.backpressured += (queue.len() - *refused) as u64;
                        *refused = queue.len();
                        break 'queue;
                    }
                    outcome => {
                        out.ud_dropped += u64::from(outcome == SendOutcome::Full);
                        out.moved = true;
                        *refused = refused.saturating_sub(1);
                        let t = queue.pop_front().expect("the queue's head was just looked at");
                        // The bytes are on their way: the buffer serves the next packet.
                        TxRoom::recycle(spare, t.data);
                    }
                }
            }
            if sent == 0 {
                break;
            }
        }
        out
    }

    /// Whether datagrams are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.hca.tx.queue.is_empty()
    }

    /// Whether datagrams the egress refused wait in the queue for room at their destination:
    /// a host retries ([`Nic::flush_transmit`]) soon, since a receiver frees room without
    /// telling its senders.
    pub fn transmit_waits(&self) -> bool {
        self.hca.tx.refused > 0
    }
}

/// The IPv6 and UDP headers' length (RoCE v2 over IPv6).
const IPV6_UDP_LEN: usize = 48;

/// Whether a datagram the engine emitted is UD traffic (its BTH opcode's transport bits).
fn is_ud(datagram: &[u8]) -> bool {
    datagram
        .get(match datagram.first() {
            Some(b) if b >> 4 == 6 => IPV6_UDP_LEN,
            _ => packet::IPV4_UDP_LEN,
        })
        .and_then(|&op| packet::Opcode(op).info())
        .is_some_and(|info| info.transport == packet::Transport::Ud)
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
    /// into a buffer of the spare pool, then straight onto the host's egress if it may go now,
    /// else into the transmit queue. Returns whether it was queued. The GRH's traffic class
    /// and hop limit are the IPv6 header's, as the IPv4 TOS and TTL are over IPv4.
    pub(crate) fn transmit6(
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
        let tx = &mut self.tx;
        let mut data = tx.spare.pop().unwrap_or_default();
        packet::emit_datagram6(&ip, pkt, &mut data)
            .expect("the engine builds only packets its opcode table allows, at most an MTU long");
        if let Some(egress) = tx.direct() {
            if egress.send(dst, &data) != SendOutcome::Full {
                TxRoom::recycle(&mut tx.spare, data);
                return false;
            }
        }
        tx.queue.push_back(Transmit { dst, data });
        true
    }

    /// Take back the last queued datagram if it is an ACK of `qpn` (see `resp::ack`).
    pub(crate) fn retract_ack(&mut self, qpn: u32) {
        let tx = &mut self.tx;
        if tx.last_ack == Some(qpn) {
            if let Some(t) = tx.queue.pop_back() {
                self.stats.tx_packets -= 1;
                TxRoom::recycle(&mut tx.spare, t.data);
            }
        }
    }

    /// Take back the requests of `qp` still waiting in the transmit queue, because a go-back-N
    /// retry is about to make them again from the PSN it goes back to: a NIC rewinds its send
    /// queue, and what had not left its port yet then goes once, from there, rather than once
    /// stale and once again. A host that paces its NIC by its line rate (the simulator) leaves
    /// a window's worth here; one that drains the queue at once leaves nothing. Datagrams the
    /// egress refused are not taken back: they were offered to the wire already. Returns the
    /// PSN of the first request taken back, which had never been sent. Runs on a retry only.
    pub(crate) fn unqueue_requests(&mut self, qp: &Qp) -> Option<packet::Psn> {
        const BTH: usize = packet::IPV4_UDP_LEN;
        let (dst, dest_qp) = (qp.dst_ip, qp.attr.dest_qp_num);
        let tx = &mut self.tx;
        let mut first = None;
        let mut kept = tx.refused;
        for i in tx.refused..tx.queue.len() {
            let d = &tx.queue[i].data;
            let request = tx.queue[i].dst == dst
                && d.len() >= BTH + packet::Bth::LEN
                && u32::from_be_bytes([0, d[BTH + 5], d[BTH + 6], d[BTH + 7]]) == dest_qp
                && packet::Opcode(d[BTH])
                    .info()
                    .is_some_and(|o| o.flags.contains(packet::OpFlags::REQUEST));
            if !request {
                tx.queue.swap(kept, i);
                kept += 1;
                continue;
            }
            if first.is_none() {
                let psn = u32::from_be_bytes([0, d[BTH + 9], d[BTH + 10], d[BTH + 11]]);
                first = Some(packet::Psn::new(psn));
            }
        }
        while tx.queue.len() > kept {
            let t = tx.queue.pop_back().expect("more than `kept` datagrams are queued");
            self.stats.tx_packets -= 1;
            TxRoom::recycle(&mut tx.spare, t.data);
        }
        if first.is_some() {
            // The last queued datagram may no longer be the ACK `retract_ack` would replace.
            tx.last_ack = None;
        }
        first
    }

    /// Emit one packet: straight onto the host's egress if it is small and may go now (see
    /// [`Egress`]), else into the transmit queue. Returns whether it was queued.
    pub(crate) fn transmit_to(
        &mut self,
        dst: [u8; 4],
        (tos, ttl): (u8, u8),
        sport: u16,
        pkt: &Packet<'_>,
    ) -> bool {
        let ip = self.next_ip_udp(dst, (tos, ttl), sport);
        let len = packet::engine_datagram_len(pkt);
        if len <= DIRECT_DATAGRAM && self.tx.may_send_direct() {
            // Built in cache-hot memory, then copied: built in the ring slot, its ICRC waits for
            // lines still owned by the reader's core (docs/decisions.md, "Build a direct
            // datagram on the stack, then copy").
            let mut local = [0u8; DIRECT_DATAGRAM];
            let icrc = self.tx.direct_icrc;
            packet::emit_engine_datagram_into(&ip, pkt, &mut local[..len], icrc);
            return self.send_built(dst, &mut local[..len], icrc);
        }
        let mut data = self.tx.spare.pop().unwrap_or_default();
        packet::emit_engine_datagram(&ip, pkt, &mut data);
        self.tx.queue.push_back(Transmit { dst, data });
        true
    }

    /// [`Hca::transmit_to`] for the requester's fast path (`req::post_now`): a request of
    /// `qp` built without a [`Packet`] (`packet::emit_request_into`; the headers are the ones
    /// `bth.opcode` lists), small enough to go straight out, as `post_now` made sure it may
    /// (an egress that refuses it queues it, as `send_built` does).
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
    /// queued (rather than sent straight out through the host's egress).
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
        self.tx.last_ack = None;
        self.stats.tx_packets += 1;
        self.tx.ip_ident = self.tx.ip_ident.wrapping_add(1);
        self.tx.ip_ident
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
    /// if it may go straight onto an egress that takes it so (one that goes into the queue
    /// instead has it set after all).
    #[inline]
    fn icrc_for_direct(&self) -> Icrc {
        match self.tx.may_send_direct() {
            true => self.tx.direct_icrc,
            false => Icrc::Carried,
        }
    }

    /// Sends a datagram already built (its ICRC set or not, as `icrc` says): onto the host's
    /// egress if it may go now and the egress takes it, else into the transmit queue, with
    /// its ICRC set. Returns whether it was queued.
    fn send_built(&mut self, dst: [u8; 4], bytes: &mut [u8], icrc: Icrc) -> bool {
        let tx = &mut self.tx;
        if let Some(egress) = tx.direct() {
            let outcome = match icrc {
                Icrc::Carried => egress.send(dst, bytes),
                Icrc::Unset => egress.send_without_icrc(dst, bytes),
            };
            if outcome != SendOutcome::Full {
                return false;
            }
        }
        if icrc == Icrc::Unset {
            // A queued datagram may meet a tap or a capture before it goes: it is whole.
            packet::set_icrc_ipv4(bytes);
        }
        let mut data = tx.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        tx.queue.push_back(Transmit { dst, data });
        true
    }

    /// Whether a datagram may go straight onto the host's egress now: nothing is queued ahead
    /// of it (and so nothing waits for room).
    #[inline]
    pub(crate) fn may_send_direct(&self) -> bool {
        self.tx.may_send_direct()
    }
}
