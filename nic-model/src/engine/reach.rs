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
//! as they were; the responder's rights (QP state and access flags, the connected peer, key,
//! PD, range, MR access) are checked by the host from what the responder published, and
//! anything that fails a check goes as packets, so every error is the responder's NAK as
//! before. Why, and what was measured: `docs/decisions.md`, "Direct reach".

use verbs_api::{AccessFlags, QpState, QpType, WcStatus, WrOpcode};

use super::mr::{MrMemory, MrTable, PdId};
use super::qp::Qp;
use super::{Hca, Nic};

/// What a requester asks the host to reach: the responder QP it is connected to, the range
/// and the right.
#[derive(Clone, Copy, Debug)]
pub struct ReachAsk {
    /// The requester's QP.
    pub src_qpn: u32,
    /// The requester's port address.
    pub src_ip: [u8; 4],
    /// The responder's QP (the requester's `dest_qp_num`).
    pub dest_qpn: u32,
    /// The rkey.
    pub rkey: u32,
    /// The first byte's address (iova).
    pub va: u64,
    /// Bytes.
    pub len: u64,
    /// The access bit the operation needs (`IBV_ACCESS_REMOTE_WRITE`, `_READ` or `_ATOMIC`).
    pub need: u32,
    /// A READ or an atomic: the responder must allow some (`max_dest_rd_atomic` > 0).
    pub rd_atomic: bool,
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
        self.sges.iter().map_while(move |s| {
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
        }));
    }
}

/// Whether `wr` is one that direct reach may do, on this QP, now (before its checks).
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

/// One operation to do by reach, as its WR says it.
struct Op<'a> {
    opcode: WrOpcode,
    wr_id: u64,
    signaled: bool,
    len: u32,
    sges: &'a [verbs_api::Sge],
    inline: Option<&'a [u8]>,
    rkey: u32,
    va: u64,
    compare_add: u64,
    swap: u64,
}

/// Does a [`candidate`] WR by direct reach, straight from the WR, after the checks
/// `check_send` makes (inline data, which must be read at post time, is copied from where it
/// is straight into the peer's memory). False, having done nothing, when the responder cannot
/// be reached for it (it goes as packets) or when the WR is wrong: every WR these checks
/// refuse is one `check_send` refuses too, so only the general path reports errors.
#[inline]
pub(crate) fn post(qp: &Qp, hca: &mut Hca, wr: &verbs_api::SendWr<'_>) -> bool {
    use verbs_api::SendFlags;
    let inline = wr.send_flags.contains(SendFlags::INLINE) || wr.inline_data.is_some();
    let max_inline = qp.cap.max_inline_data as usize;
    let (len, data) = match wr.inline_data {
        Some(d) if inline => {
            if wr.opcode != WrOpcode::RdmaWrite || d.len() > max_inline {
                return false;
            }
            (d.len() as u64, Some(d))
        }
        _ => {
            if wr.sg_list.len() > qp.cap.max_send_sge as usize
                || hca.check_sges(qp.pd, wr.sg_list).is_err()
            {
                return false;
            }
            let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            if inline && (wr.opcode != WrOpcode::RdmaWrite || len > max_inline as u64) {
                return false;
            }
            (len, None)
        }
    };
    let Ok(len) = u32::try_from(len) else { return false };
    let atomic = wr.opcode.is_atomic();
    let (rkey, va) = match atomic {
        true => (wr.atomic.rkey, wr.atomic.remote_addr),
        false => (wr.rdma.rkey, wr.rdma.remote_addr),
    };
    if atomic && (len != 8 || !va.is_multiple_of(8)) {
        return false;
    }
    let op = Op {
        opcode: wr.opcode,
        wr_id: wr.wr_id,
        signaled: qp.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
        len,
        sges: wr.sg_list,
        inline: data,
        rkey,
        va,
        compare_add: wr.atomic.compare_add,
        swap: wr.atomic.swap,
    };
    place(qp, hca, &op)
}

/// Does `w` in the responder's memory and completes it; false (having done nothing) when it
/// cannot be done so.
fn place(qp: &Qp, hca: &mut Hca, w: &Op<'_>) -> bool {
    let atomic = w.opcode.is_atomic();
    let read = w.opcode == WrOpcode::RdmaRead;
    if w.len > hca.cfg.limits.max_msg_sz || ((read || atomic) && qp.attr.max_rd_atomic == 0) {
        return false;
    }
    let need = match w.opcode {
        WrOpcode::RdmaWrite => AccessFlags::REMOTE_WRITE,
        WrOpcode::RdmaRead => AccessFlags::REMOTE_READ,
        _ => AccessFlags::REMOTE_ATOMIC,
    };
    // (`post` checked the atomic's length and alignment.)
    if atomic && (w.sges.len() != 1 || w.sges[0].length < 8) {
        return false;
    }
    // Where the data lands locally must take it (a READ's or atomic's SGEs need LOCAL_WRITE);
    // the wire path reports a failure here as LOC_PROT_ERR, so leave it to it.
    if read || atomic {
        let local = AccessFlags::LOCAL_WRITE;
        if w.sges.iter().any(|s| hca.mrs.resolve_local(qp.pd, s, local).is_err()) {
            return false;
        }
    }
    let ask = ReachAsk {
        src_qpn: qp.qpn,
        src_ip: hca.cfg.ip(),
        dest_qpn: qp.attr.dest_qp_num,
        rkey: w.rkey,
        va: w.va,
        len: u64::from(w.len),
        need: need.bits(),
        rd_atomic: read || atomic,
    };
    let Hca { tx, mrs, .. } = hca;
    let mrs = &*mrs;
    let local = |need| LocalSges { mrs, pd: qp.pd, sges: w.sges, need };
    let op = match w.opcode {
        WrOpcode::AtomicCmpAndSwp => ReachOp::CompareSwap { compare: w.compare_add, swap: w.swap },
        WrOpcode::AtomicFetchAndAdd => ReachOp::FetchAdd { add: w.compare_add },
        WrOpcode::RdmaRead => ReachOp::Read(local(AccessFlags::LOCAL_WRITE)),
        _ => match w.inline {
            Some(data) => ReachOp::WriteInline(data),
            None => ReachOp::Write(local(AccessFlags::empty())),
        },
    };
    let Some(orig) = tx.reach(qp.dst_ip, &ask, &op) else { return false };
    if atomic {
        let s = w.sges[0];
        if let Ok((mr, off)) = mrs.resolve_local(qp.pd, &s, AccessFlags::LOCAL_WRITE) {
            let _ = mr.memory.write(off, &orig.to_ne_bytes());
        }
    }
    hca.stats.reached += 1;
    hca.complete_send_wr(qp, (w.wr_id, w.opcode, w.len, w.signaled), WcStatus::Success);
    true
}
