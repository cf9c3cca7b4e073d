//! Direct reach, the requester's half: an RDMA WRITE, RDMA READ or atomic of an RC QP that
//! is sending nothing else is done in the responder's memory at post time, when the host's
//! wire can reach that memory ([`Wire::reach`]) and nothing observes the wire, instead of as
//! packets. The WR then completes at once, with the completion its ACK would have brought.
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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use verbs_api::{AccessFlags, QpState, QpType, WcStatus, WrOpcode};

use super::qp::Qp;
use super::rights::{self, Grant, MrRights, QpRights, RemoteOp, Request};
use super::send_check::CheckedWr;
use super::{Hca, Nic};

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
}

impl ReachAsk {
    /// The responder's rules for this ask, over the facts the responder published for its QP
    /// (`qp`) and for the MR the rkey names (`mr`; None: no such MR). First what a packet's
    /// arrival proves before the responder looks at it (the QP takes requests, in RTR, RTS or
    /// SQD; the requester is its connected peer, rxe's `check_addr`), then every rule of
    /// `rights::check`, so that what the packet responder refuses is refused here too.
    /// None refuses: the WR then goes as packets, and the responder's NAK reports it.
    #[inline]
    pub fn check(&self, qp: &QpFacts, mr: Option<&MrRights>) -> Option<Grant> {
        if !qp.live || qp.dest_qpn != self.src_qpn || qp.dest_ip != self.src_ip {
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

/// A reached range of a peer's MR: its first byte in this process, valid until this drops
/// (the owner's `ibv_dereg_mr` waits for it).
pub struct Reached<'a> {
    users: &'a AtomicU32,
    /// The first byte.
    pub ptr: *mut u8,
}

impl<'a> Reached<'a> {
    /// A guard over `users`, which the host has already counted this use in; it uncounts it
    /// when dropped. `ptr` starts null.
    pub fn new(users: &'a AtomicU32) -> Reached<'a> {
        Reached { users, ptr: std::ptr::null_mut() }
    }
}

impl Drop for Reached<'_> {
    fn drop(&mut self) {
        self.users.fetch_sub(1, Ordering::SeqCst);
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
        && !hca.wire_paused
        && hca.wire.as_deref().is_some_and(|w| w.reaches())
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
    let ask = ReachAsk {
        src_qpn: qp.qpn,
        src_ip: hca.cfg.ip(),
        dest_qpn: qp.attr.dest_qp_num,
        request: Request { op, rkey, va, len: u64::from(w.len()) },
    };
    let Hca { wire, mrs, .. } = hca;
    let Some(wire) = wire.as_deref_mut() else { return false };
    let Some(r) = wire.reach(qp.dst_ip, &ask) else { return false };
    if atomic {
        // SAFETY: the host checked that the 8 bytes lie in the peer's MR; the address is
        // 8-aligned (iova and memory share their offset within 8 bytes, checked at reg_mr).
        let word = unsafe { AtomicU64::from_ptr(r.ptr as *mut u64) };
        let (compare_add, swap) = (wr.atomic.compare_add, wr.atomic.swap);
        let orig = if wr.opcode == WrOpcode::AtomicCmpAndSwp {
            match word.compare_exchange(compare_add, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            }
        } else {
            word.fetch_add(compare_add, Ordering::AcqRel)
        };
        drop(r);
        let s = wr.sg_list[0];
        if let Ok((mr, off)) = mrs.resolve_local(qp.pd, &s, AccessFlags::LOCAL_WRITE) {
            let _ = mr.memory.write(off, &orig.to_ne_bytes());
        }
    } else {
        let mut done = 0usize;
        if let Some(data) = wr.inline_data {
            // SAFETY: the host checked [ptr, ptr + len) against the peer's MR; inline data
            // is the whole message.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.ptr, data.len()) };
        } else {
            for s in wr.sg_list {
                let n = s.length as usize;
                if n == 0 {
                    // Nothing to copy (an inline gather list may name no MR for it).
                    continue;
                }
                let need = if read { AccessFlags::LOCAL_WRITE } else { AccessFlags::empty() };
                let Ok((mr, off)) = mrs.resolve_local(qp.pd, s, need) else { break };
                // SAFETY: `done + n` is within the message, which the host checked against
                // the peer's MR; the local range was checked by `resolve_local`.
                let remote = unsafe { r.ptr.add(done) };
                // SAFETY: as above; local MR memory and the peer's arena never overlap.
                unsafe {
                    if read {
                        mr.memory.copy_from_raw(off, remote, n);
                    } else {
                        mr.memory.copy_to_raw(off, remote, n);
                    }
                }
                done += n;
            }
        }
        drop(r);
    }
    hca.stats.reached += 1;
    hca.complete_send_wr(qp, (wr.wr_id, wr.opcode, w.len(), w.signaled()), WcStatus::Success);
    true
}
