//! Direct reach, the requester's half: an RDMA WRITE, RDMA READ or atomic of an RC QP that
//! is sending nothing else is done in the responder's memory at post time, when the host's
//! egress can reach that memory ([`Egress::reach`](super::Egress::reach)) and nothing observes
//! the wire, instead of as packets. The WR then completes at once, with the completion its ACK
//! would have brought.
//! The engine says what to do ([`ReachOp`]) and the egress does it: the call goes one way,
//! engine → egress → the shared-memory fabric, and only the outcome comes back.
//!
//! What keeps the transport's semantics: the QP's send queue is empty (every earlier WQE was
//! acknowledged, so the responder has placed everything sent before, and the order of
//! placements and completions holds); no PSN is used, so the PSN sequences of both ends stay
//! as they were; the responder's rights (QP state, the connected peer, then the rules of
//! `rights` that the packet responder runs: access flags, key, PD, range, MR access) are
//! checked over what the responder published, which the host's wire reads and hands to
//! [`ReachAsk::check`], and anything that fails a check goes as packets, so every error is the
//! responder's NAK as before. The WR itself was checked by `send_check::check_send`, as every
//! WR is. Why, and what was measured: `docs/decisions.md`, "Direct reach".

use verbs_api::{AccessFlags, QpState, QpType, WcStatus, WrOpcode};

use super::mr::{MrMemory, MrTable, PdId};
use super::qp::{PsnMirror, Qp};
use super::rights::{self, Grant, MrRights, QpRights, RemoteOp, Request};
use super::send_check::CheckedWr;
use super::{Hca, Nic};
use crate::packet::{Opcode, ICRC_LEN, IPV4_UDP_LEN};

/// What a requester asks the host to reach: the responder QP it is connected to, and the
/// request (operation, rkey, range) the responder's rules are checked against.
#[derive(Clone, Copy, Debug)]
pub struct ReachAsk {
    /// The requester's QP.
    pub src_qpn: u32,
    /// The requester's port address.
    pub src_ip: [u8; 4],
    /// The responder's QP (the requester's `dest_qp_num`).
    pub dest_qpn: u32,
    /// The operation and the memory it names, as its RETH or AtomicETH would carry them.
    pub request: Request,
    /// The requester's next PSN: the PSN its first packet would carry. Its send queue is
    /// empty and everything it sent was acknowledged, so on a pair set up right this is the
    /// responder's expected PSN.
    pub psn: u32,
    /// The requester's path MTU in bytes.
    pub mtu: u32,
    /// The packets the operation stands for, which both ports count
    /// (`softverbs counters`), seen from the requester.
    pub traffic: Traffic,
}

impl ReachAsk {
    /// The responder's rules for this ask, over the facts the responder published for its QP
    /// (`qp`) and for the MR the rkey names (`mr`; None: no such MR). First what a packet's
    /// arrival proves before the responder looks at it (the QP takes requests, in RTR, RTS or
    /// SQD; the requester is its connected peer, rxe's `check_addr`); then what its packets
    /// would meet first: their PSN is the responder's expected PSN (else a sequence error NAK,
    /// or a duplicate, on rxe as here) and each packet's length passes the responder's path
    /// MTU (`rights::message_fits_mtu`; else an invalid request NAK); then every rule of
    /// `rights::check`, so that what the packet responder refuses is refused here too.
    /// None refuses: the WR then goes as packets, and the responder's NAK reports it.
    #[inline]
    pub fn check(&self, qp: &QpFacts, mr: Option<&MrRights>) -> Option<Grant> {
        if !qp.live || qp.dest_qpn != self.src_qpn || qp.dest_ip != self.src_ip {
            return None;
        }
        let (sent_mtu, mtu) = (u64::from(self.mtu), u64::from(qp.mtu));
        if qp.epsn != self.psn
            || !rights::message_fits_mtu(self.request.op, self.request.len, sent_mtu, mtu)
        {
            return None;
        }
        let rights = QpRights {
            access: AccessFlags::from_bits_retain(qp.access),
            pd: qp.pd,
            max_dest_rd_atomic: qp.max_dest_rd_atomic,
        };
        rights::check(&rights, &self.request, mr).ok()
    }
}

/// What direct reach does in the responder's memory ([`Egress::reach`](super::Egress::reach)):
/// the engine says what, the egress does it, and nothing comes back but the outcome.
#[derive(Clone, Copy)]
pub enum ReachOp<'a> {
    /// An RDMA WRITE of inline data: these bytes, the whole message.
    WriteInline(&'a [u8]),
    /// An RDMA WRITE from the requester's memory: these places, in order.
    Write(LocalSges<'a>),
    /// An RDMA READ into the requester's memory: these places, in order.
    Read(LocalSges<'a>),
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on the 8-byte word.
    CompareSwap {
        /// The value compared with.
        compare: u64,
        /// The value stored if they are equal.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on the 8-byte word.
    FetchAdd {
        /// The value added.
        add: u64,
    },
}

/// The local SGEs of a reached WR: the requester's own memory, as its MRs hold it.
#[derive(Clone, Copy)]
pub struct LocalSges<'a> {
    mrs: &'a MrTable,
    pd: PdId,
    sges: &'a [verbs_api::Sge],
    need: AccessFlags,
}

impl<'a> LocalSges<'a> {
    /// Each SGE's memory, the offset of its first byte there and its length, in order
    /// (`post` checked every one; the list stops at one that no longer resolves).
    pub fn pieces(&self) -> impl Iterator<Item = (&'a MrMemory, usize, usize)> + 'a {
        let (mrs, pd, need) = (self.mrs, self.pd, self.need);
        // A zero-length SGE copies nothing and may name no MR (an inline gather list's).
        self.sges.iter().filter(|s| s.length != 0).map_while(move |s| {
            let (mr, off) = mrs.resolve_local(pd, s, need).ok()?;
            Some((&*mr.memory, off, s.length as usize))
        })
    }
}

/// What a responder's QP allows, as a host publishes it for peers that reach its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpFacts {
    /// The QP number.
    pub qpn: u32,
    /// In RTR or RTS: it accepts requests.
    pub live: bool,
    /// `qp_access_flags` (the verbs bits).
    pub access: u32,
    /// Its PD.
    pub pd: u32,
    /// The QP it is connected to (`dest_qp_num`).
    pub dest_qpn: u32,
    /// The IPv4 address of the port it is connected to.
    pub dest_ip: [u8; 4],
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u32,
    /// Its expected PSN (the responder's, 24 bits): kept current as packets move it
    /// ([`PsnMirror`]).
    pub epsn: u32,
    /// Its path MTU in bytes.
    pub mtu: u32,
}

/// The packets a reached operation stands for, seen from one port: what it would have sent
/// and received, and their datagrams' bytes (IPv4 header to ICRC), as the port counters count
/// them (`docs/guide.md`, "Counters").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Datagrams sent.
    pub sent_packets: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Datagrams received.
    pub received_packets: u64,
    /// Their bytes.
    pub received_bytes: u64,
}

impl Traffic {
    /// The same packets seen from the other end.
    #[inline]
    pub fn mirrored(self) -> Traffic {
        Traffic {
            sent_packets: self.received_packets,
            sent_bytes: self.received_bytes,
            received_packets: self.sent_packets,
            received_bytes: self.sent_bytes,
        }
    }

    /// Adds `other` in (wrapping, as counters do).
    #[inline]
    pub fn add(&mut self, other: &Traffic) {
        self.sent_packets = self.sent_packets.wrapping_add(other.sent_packets);
        self.sent_bytes = self.sent_bytes.wrapping_add(other.sent_bytes);
        self.received_packets = self.received_packets.wrapping_add(other.received_packets);
        self.received_bytes = self.received_bytes.wrapping_add(other.received_bytes);
    }

    /// What an RC operation `op` of `len` bytes on a path MTU of `mtu` bytes (a power of two,
    /// as every path MTU is) is on the wire,
    /// seen from its requester, when nothing else is in flight (its send queue was empty):
    /// a WRITE's request packets and one ACK per ACK they ask for (at the last packet and
    /// every `ack_every`; the packet path may coalesce ACKs of requests that arrive together,
    /// which a lone message's do not); a READ's request and its responses; an atomic's
    /// request and its atomic ACK.
    #[inline]
    pub fn of(op: RemoteOp, len: u32, mtu: u32, ack_every: u32) -> Traffic {
        // A datagram's bytes around its payload, per opcode: constants, so that the reach
        // path does only the arithmetic below.
        const fn around(opcode: Opcode) -> u64 {
            (IPV4_UDP_LEN + opcode.row().header_len + ICRC_LEN) as u64
        }
        const W: [u64; 4] = [
            around(Opcode::RC_RDMA_WRITE_ONLY),
            around(Opcode::RC_RDMA_WRITE_FIRST),
            around(Opcode::RC_RDMA_WRITE_MIDDLE),
            around(Opcode::RC_RDMA_WRITE_LAST),
        ];
        const R: [u64; 4] = [
            around(Opcode::RC_RDMA_READ_RESPONSE_ONLY),
            around(Opcode::RC_RDMA_READ_RESPONSE_FIRST),
            around(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE),
            around(Opcode::RC_RDMA_READ_RESPONSE_LAST),
        ];
        const ACK: u64 = around(Opcode::RC_ACKNOWLEDGE);
        const READ_REQUEST: u64 = around(Opcode::RC_RDMA_READ_REQUEST);
        const ATOMIC: u64 = around(Opcode::RC_FETCH_ADD);
        const ATOMIC_ACK: u64 = around(Opcode::RC_ATOMIC_ACKNOWLEDGE);
        const ATOMIC_WRITE: u64 = around(Opcode::RC_ATOMIC_WRITE) + 8;
        const FLUSH: u64 = around(Opcode::RC_FLUSH);
        let padded = |payload: u32| u64::from(payload.next_multiple_of(4));
        // A path MTU is a power of two: a shift, not a division, on the reach path.
        let n = ((u64::from(len) + u64::from(mtu) - 1) >> mtu.trailing_zeros()).max(1) as u32;
        // Packets of `len` bytes cut at the MTU: ONLY, or FIRST, MIDDLEs and LAST.
        let cut = |around: &[u64; 4]| match n {
            1 => around[0] + padded(len),
            _ => {
                let last = len - (n - 1) * mtu;
                around[1]
                    + u64::from(n - 2) * (around[2] + padded(mtu))
                    + around[3]
                    + padded(mtu)
                    + padded(last)
            }
        };
        let (sent_packets, sent_bytes, received_packets, received_bytes) = match op {
            RemoteOp::Write => {
                let acks = match n <= ack_every || ack_every == 0 {
                    true => 1,
                    false => n.div_ceil(ack_every),
                };
                (u64::from(n), cut(&W), u64::from(acks), u64::from(acks) * ACK)
            }
            RemoteOp::Read => (1, READ_REQUEST, u64::from(n), cut(&R)),
            RemoteOp::Atomic => (1, ATOMIC, 1, ATOMIC_ACK),
            // Never reached (`candidate` leaves them to the packet path): their packets.
            RemoteOp::AtomicWrite => (1, ATOMIC_WRITE, 1, R[0]),
            RemoteOp::Flush { .. } => (1, FLUSH, 1, R[0]),
        };
        Traffic { sent_packets, sent_bytes, received_packets, received_bytes }
    }
}

impl Nic {
    /// A number that moves whenever a QP's state or attributes may have changed: a host that
    /// publishes [`Nic::qp_facts`] does it again when this moved.
    pub fn qp_epoch(&self) -> u64 {
        self.hca.qp_epoch
    }

    /// The facts of every RC QP, for direct reach (`engine::reach`); an RC QP over IPv6 is
    /// never live here (its peers send packets).
    pub fn qp_facts(&self, out: &mut Vec<QpFacts>) {
        out.clear();
        out.extend(self.qps.values().filter(|q| q.qp_type == QpType::Rc).map(|q| QpFacts {
            qpn: q.qpn,
            live: matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) && q.ip6.is_none(),
            access: q.attr.qp_access_flags.bits(),
            pd: q.pd,
            dest_qpn: q.attr.dest_qp_num,
            dest_ip: q.dst_ip,
            max_dest_rd_atomic: u32::from(q.attr.max_dest_rd_atomic),
            epsn: q.resp.epsn.value(),
            mtu: q.mtu(),
        }));
    }

    /// Has RC QP `qpn`'s responder keep its expected PSN current in `mirror` (None: nowhere)
    /// from now on, starting with the PSN it expects now; a host that publishes the QP's
    /// [`QpFacts`] for direct reach gives it the published word. False if there is no such QP.
    pub fn set_psn_mirror(&mut self, qpn: u32, mirror: Option<PsnMirror>) -> bool {
        let Some(q) = self.qps.get_mut(&qpn) else { return false };
        if let Some(m) = &mirror {
            m.store(q.resp.epsn);
        }
        q.resp.mirror = mirror;
        true
    }
}

/// The most bytes one `ibv_post_send` copies by direct reach: a message longer than this, and
/// a WR of a list that would take the call's reached bytes over it, goes as packets. A reach
/// copies inside `ibv_post_send` with the device lock held, and meanwhile the device answers
/// no other peer; this bounds that to one copy of 1 MiB (tens of microseconds, about as long
/// as the packet path holds the lock to build a window of packets), where a 1 GiB message, or
/// a list of a thousand 1 MiB WRITEs, would stop the device for a tenth of a second
/// (`docs/decisions.md`, "Reach over the responder's life").
pub(crate) const REACH_CALL_BYTES: u64 = 1 << 20;

/// Whether direct reach may take a WR with this opcode on this QP now: its own eligibility
/// (a cheap test; `check_send` has already checked the WR).
#[inline]
pub(crate) fn candidate(qp: &Qp, hca: &Hca, opcode: WrOpcode) -> bool {
    matches!(
        opcode,
        WrOpcode::RdmaWrite
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
    ) && qp.sq.is_empty()
        && qp.qp_type == QpType::Rc
        && qp.state == QpState::Rts
        && qp.ip6.is_none()
        && qp.req.rnr_timer_ns.is_none()
        && hca.tx.may_reach()
}

/// The direct-reach executor of `ibv_post_send`: does a [`candidate`] WR, checked by
/// `check_send`, in the responder's memory (inline data, which must be read at post time, is
/// copied from where it is straight into the peer's memory) and completes it. False, having
/// done nothing, when it cannot be done so (the responder cannot be reached for it, or refuses
/// it, or it fails at execution): the WR then goes as packets, whose NAK or completion reports
/// what is wrong, so only the packet path reports errors.
#[inline]
pub(crate) fn post(qp: &Qp, hca: &mut Hca, w: &CheckedWr<'_, '_>) -> bool {
    place(qp, hca, w)
}

/// [`post`]'s work, out of line.
fn place(qp: &Qp, hca: &mut Hca, w: &CheckedWr<'_, '_>) -> bool {
    let wr = w.wr();
    let atomic = wr.opcode.is_atomic();
    let read = wr.opcode == WrOpcode::RdmaRead;
    // What the send queue would fail at execution (LOC_LEN_ERR, LOC_QP_OP_ERR) goes there.
    if w.len() > hca.cfg.limits.max_msg_sz || ((read || atomic) && qp.attr.max_rd_atomic == 0) {
        return false;
    }
    // The original value lands in one SGE (`check_send` made it 8 bytes).
    if atomic && wr.sg_list.len() != 1 {
        return false;
    }
    // On-demand memory may be unmapped: only the packet path's fault-safe copies touch it.
    if hca.mrs.any_odp(wr.sg_list) {
        return false;
    }
    // Where the data lands locally must take it (a READ's or atomic's SGEs need LOCAL_WRITE);
    // the packet path reports a failure here as LOC_PROT_ERR, so leave it to it.
    if read || atomic {
        let local = AccessFlags::LOCAL_WRITE;
        if wr.sg_list.iter().any(|s| hca.mrs.resolve_local(qp.pd, s, local).is_err()) {
            return false;
        }
    }
    let (op, rkey, va) = match (read, atomic) {
        (_, true) => (RemoteOp::Atomic, wr.atomic.rkey, wr.atomic.remote_addr),
        (true, _) => (RemoteOp::Read, wr.rdma.rkey, wr.rdma.remote_addr),
        _ => (RemoteOp::Write, wr.rdma.rkey, wr.rdma.remote_addr),
    };
    // A memory window's rkey: its rules (state, the type 2 window's QP, invalidation) live in
    // the responder's engine alone, which publishes MRs only; the packet path answers for it.
    if super::mw::is_mw_key(rkey) {
        return false;
    }
    let (mtu, len) = (qp.mtu(), w.len());
    let traffic = Traffic::of(op, len, mtu, hca.cfg.ack_every);
    let ask = ReachAsk {
        src_qpn: qp.qpn,
        src_ip: hca.cfg.ip(),
        dest_qpn: qp.attr.dest_qp_num,
        request: Request { op, rkey, va, len: u64::from(len) },
        psn: qp.req.psn.value(),
        mtu,
        traffic,
    };
    let Hca { tx, mrs, .. } = hca;
    let mrs = &*mrs;
    let local = |need| LocalSges { mrs, pd: qp.pd, sges: wr.sg_list, need };
    let (compare_add, swap) = (wr.atomic.compare_add, wr.atomic.swap);
    let op = match wr.opcode {
        WrOpcode::AtomicCmpAndSwp => ReachOp::CompareSwap { compare: compare_add, swap },
        WrOpcode::AtomicFetchAndAdd => ReachOp::FetchAdd { add: compare_add },
        WrOpcode::RdmaRead => ReachOp::Read(local(AccessFlags::LOCAL_WRITE)),
        _ => match wr.inline_data {
            Some(data) => ReachOp::WriteInline(data),
            None => ReachOp::Write(local(AccessFlags::empty())),
        },
    };
    let Some(orig) = tx.reach(qp.dst_ip, &ask, &op) else { return false };
    if atomic {
        let s = wr.sg_list[0];
        if let Ok((mr, off)) = mrs.resolve_local(qp.pd, &s, AccessFlags::LOCAL_WRITE) {
            let _ = mr.memory.write(off, &orig.to_ne_bytes());
        }
    }
    hca.stats.reached += 1;
    hca.stats.reached_traffic.add(&traffic);
    hca.complete_send_wr(qp, (wr.wr_id, wr.opcode, w.len(), w.signaled()), WcStatus::Success);
    true
}
