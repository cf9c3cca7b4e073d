//! The responder: checks each request's PSN (duplicates, gaps), executes SENDs into receive
//! WQEs, RDMA WRITEs and READs against MRs, and atomics (each first checked by the rules of
//! `rights`); answers with ACKs, NAKs, READ responses and atomic ACKs; keeps the READ/atomic
//! resources that answer duplicates.

use verbs_api::{
    AccessFlags, AsyncEventType, QpState, QpType, WcFlags, WcOpcode, WcStatus, GRH_LEN,
};

use super::mr::DmaError;
use super::qp::{Qp, RdResource, WriteCtx};
use super::rights::{self, RemoteOp, Request};
use super::{Hca, Hex};
use crate::cost::{self, CopyAt};
use crate::packet::{Aeth, Bth, NakCode, OpFlags, Opcode, Packet, Psn, SendOnly};

mod flush;

/// The `slid` of a receive completion: a RoCE sender has no LID (rxe leaves the field 0); a UD
/// receiver finds the sender's address in the GRH area instead.
const ROCE_SLID: u16 = 0;

/// A request packet arrived for this QP.
pub(crate) fn handle_request(qp: &mut Qp, hca: &mut Hca, ip_header: &[u8], pkt: &Packet<'_>) {
    if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
        hca.stats.rx_no_qp += 1;
        return;
    }
    match qp.qp_type {
        QpType::Rc => {}
        QpType::Uc => return uc_request(qp, hca, pkt),
        QpType::Ud => return ud_request(qp, hca, ip_header, pkt),
    }
    let Some(info) = pkt.bth.opcode.info() else { return };
    let flags = info.flags;
    let psn = pkt.bth.psn;
    let d = psn.diff(qp.resp.epsn);
    if d > 0 {
        hca.stats.rx_out_of_sequence += 1;
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            hca.stats.seq_naks_sent += 1;
            let epsn = qp.resp.epsn;
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                epsn = %Hex(epsn.value()), opcode = %pkt.bth.opcode,
                "sequence error NAK sent: a request arrived ahead of the expected PSN");
            hca.transmit_aeth(qp, epsn, Aeth::nak(NakCode::PsnSequenceError, qp.resp.msn));
        }
        return;
    }
    if d < 0 {
        hca.stats.rx_duplicates += 1;
        duplicate(qp, hca, pkt, flags);
        return;
    }
    qp.resp.nak_sent = false;
    if !payload_fits_mtu(qp, pkt, flags) {
        // A malformed request (or a requester on another path MTU): class C, as in rxe.
        hca.stats.rx_bad_length += 1;
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    }
    let src_lid = ROCE_SLID;
    if flags.contains(OpFlags::SEND) {
        on_send(qp, hca, pkt, flags, src_lid);
    } else if flags.contains(OpFlags::WRITE) {
        on_write(qp, hca, pkt, flags, src_lid);
    } else if flags.contains(OpFlags::READ) {
        on_read(qp, hca, pkt);
    } else if flags.contains(OpFlags::ATOMIC) {
        on_atomic(qp, hca, pkt);
    } else if flags.intersects(OpFlags::ATOMIC_WRITE | OpFlags::FLUSH) {
        flush::on_request(qp, hca, pkt, flags);
    }
}

/// Whether a SEND or RDMA WRITE packet carries what its place in the message allows at this
/// QP's path MTU (IBA 9.7.5.1.2 length checks): a FIRST or MIDDLE packet exactly one MTU, a
/// LAST packet 1 to MTU bytes, an ONLY packet at most one MTU. Other requests carry none.
fn payload_fits_mtu(qp: &Qp, pkt: &Packet<'_>, flags: OpFlags) -> bool {
    if !flags.intersects(OpFlags::SEND | OpFlags::WRITE) {
        return true;
    }
    let (len, mtu) = (pkt.payload.len() as u64, u64::from(qp.mtu()));
    rights::payload_fits(flags.contains(OpFlags::START), flags.contains(OpFlags::END), len, mtu)
}

/// Acknowledge everything up to `psn`. If the last datagram queued for the wire is an ACK of
/// this QP that has not left yet, this one replaces it (coalescing, as the IBA allows: an ACK
/// acknowledges every request up to its PSN), so a burst of requests received in one go
/// costs one ACK; nothing queued after it is overtaken.
fn ack(qp: &Qp, hca: &mut Hca, psn: Psn) {
    hca.retract_ack(qp.qpn);
    if hca.transmit_aeth(qp, psn, Aeth::ack(qp.resp.msn)) {
        hca.tx.queued_ack(qp.qpn);
    }
}

/// NAK a request with an error code and move this QP to the error state, as rxe does for
/// class C/D errors: the requester gets the matching remote error status, and this QP's
/// program the IBA's affiliated event for it (access violation, invalid request), as mlx5
/// raises them (rxe raises none).
fn nak_error(qp: &mut Qp, hca: &mut Hca, psn: Psn, code: NakCode) {
    tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
        code = ?code, "NAK sent");
    hca.transmit_aeth(qp, psn, Aeth::nak(code, qp.resp.msn));
    let event = match code {
        NakCode::RemoteAccessError => AsyncEventType::QpAccessErr,
        NakCode::InvalidRequest => AsyncEventType::QpReqErr,
        _ => AsyncEventType::QpFatal,
    };
    hca.enter_error(qp, Some(event));
}

fn rnr_nak(qp: &mut Qp, hca: &mut Hca, psn: Psn) {
    hca.stats.rnr_naks_sent += 1;
    tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
        min_rnr_timer = qp.attr.min_rnr_timer, "RNR NAK sent: no receive WQE posted");
    hca.transmit_aeth(qp, psn, Aeth::rnr_nak(qp.attr.min_rnr_timer, qp.resp.msn));
}

fn on_send(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>, flags: OpFlags, src_lid: u16) {
    let psn = pkt.bth.psn;
    if flags.contains(OpFlags::START) {
        if qp.resp.recv.is_some() {
            nak_error(qp, hca, psn, NakCode::InvalidRequest); // a new message before the last ended
            return;
        }
        let Some(w) = hca.take_recv(qp) else {
            rnr_nak(qp, hca, psn);
            return;
        };
        qp.resp.recv = Some((w, 0));
    } else if qp.resp.recv.is_none() {
        nak_error(qp, hca, psn, NakCode::InvalidRequest); // MIDDLE/LAST without FIRST
        return;
    }
    let (w, off) = qp.resp.recv.take().expect("set above");
    match hca.mrs.scatter(qp.pd, &w.sges, off as usize, pkt.payload) {
        Ok(()) => {}
        Err(e) => {
            let (status, code) = match e {
                DmaError::Length => (WcStatus::LocLenErr, NakCode::InvalidRequest),
                DmaError::WrongPd => (WcStatus::LocQpOpErr, NakCode::RemoteOperationalError),
                DmaError::BadKey | DmaError::Bounds | DmaError::Access => {
                    (WcStatus::LocProtErr, NakCode::RemoteOperationalError)
                }
            };
            hca.complete_recv(
                qp,
                w.wr_id,
                status,
                WcOpcode::Recv,
                0,
                None,
                qp.attr.dest_qp_num,
                src_lid,
                false,
            );
            nak_error(qp, hca, psn, code);
            return;
        }
    }
    let off = off + pkt.payload.len() as u64;
    qp.resp.set_epsn(psn.next());
    if flags.contains(OpFlags::END) {
        if let Some(rkey) = pkt.ieth {
            if !on_invalidate(qp, hca, pkt, w.wr_id, off as u32, rkey, src_lid) {
                return;
            }
        } else if !complete_message(
            hca,
            qp,
            w.wr_id,
            WcOpcode::Recv,
            off as u32,
            pkt.imm,
            src_lid,
            pkt.bth.solicited,
        ) {
            return;
        }
        qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    } else {
        qp.resp.recv = Some((w, off));
    }
    if pkt.bth.ack_req {
        ack(qp, hca, psn);
    }
}

/// The last packet of a SEND WITH INVALIDATE, its payload placed: invalidate `rkey` (a type 2
/// window of this device, rxe's `invalidate_rkey`) and complete the receive with
/// `IBV_WC_WITH_INV`. If the key cannot be invalidated (rxe's `RESPST_ERR_INVALIDATE_RKEY`,
/// class J) the receive completes with `IBV_WC_REM_INV_REQ_ERR`, the request is still
/// acknowledged and this QP goes to ERR, as rxe does. False when the caller must stop (no
/// acknowledgement: the QP is in ERR for a full CQ).
fn on_invalidate(
    qp: &mut Qp,
    hca: &mut Hca,
    pkt: &Packet<'_>,
    wr_id: u64,
    byte_len: u32,
    rkey: u32,
    src_lid: u16,
) -> bool {
    let src_qp = qp.attr.dest_qp_num;
    let solicited = pkt.bth.solicited;
    if let Err(why) = hca.mws.invalidate(rkey) {
        tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), rkey = %Hex(rkey), why,
            "SEND WITH INVALIDATE of a key that cannot be invalidated");
        let status = WcStatus::RemInvReqErr;
        let room =
            hca.complete_recv(qp, wr_id, status, WcOpcode::Recv, 0, None, src_qp, src_lid, false);
        if room && pkt.bth.ack_req {
            ack(qp, hca, pkt.bth.psn);
        }
        hca.enter_error(qp, None);
        return false;
    }
    if !hca.complete_recv_inv(qp, wr_id, byte_len, rkey, src_qp, src_lid, solicited) {
        hca.recv_cq_overflow(qp);
        return false;
    }
    true
}

/// The fast path of [`handle_request`] for the message latency waits on: an RC SEND ONLY (with
/// or without immediate data) in sequence, for a QP with a receive of its own posted that
/// takes the payload. It does what `handle_request` and `on_send` do for it (place the
/// payload, complete the receive, acknowledge) without a parsed [`Packet`]. For anything else
/// it returns false and the caller takes the general path; it has then changed nothing, but
/// for a receive that cannot take the payload the bytes the scatter wrote before it failed,
/// which the general path writes again before it fails the receive.
pub(crate) fn receive_send_only(qp: &mut Qp, hca: &mut Hca, send: &SendOnly<'_>) -> bool {
    let psn = send.bth.psn;
    let fits_mtu = send.payload.len() as u64 <= u64::from(qp.mtu());
    if qp.qp_type != QpType::Rc
        || !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        || psn != qp.resp.epsn
        || qp.resp.recv.is_some()
        || qp.srq.is_some()
        || !fits_mtu
    {
        return false;
    }
    let Some(w) = qp.rq.front() else { return false };
    if hca.mrs.scatter(qp.pd, &w.sges, 0, send.payload).is_err() {
        return false;
    }
    let w = qp.rq.pop_front().expect("the receive just written");
    qp.resp.nak_sent = false;
    qp.resp.set_epsn(psn.next());
    qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    if !complete_message(
        hca,
        qp,
        w.wr_id,
        WcOpcode::Recv,
        send.payload.len() as u32,
        send.imm,
        ROCE_SLID,
        send.bth.solicited,
    ) {
        return true;
    }
    if send.bth.ack_req {
        ack(qp, hca, psn);
    }
    true
}

fn on_write(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>, flags: OpFlags, src_lid: u16) {
    let psn = pkt.bth.psn;
    // A WRITE with immediate consumes a receive WQE at its last packet: check before any side
    // effect so an RNR NAK leaves nothing half-done.
    let needs_recv = flags.contains(OpFlags::RWR);
    if needs_recv && !hca.has_recv(qp) {
        rnr_nak(qp, hca, psn);
        return;
    }
    if flags.contains(OpFlags::START) {
        let Some(reth) = pkt.reth else {
            nak_error(qp, hca, psn, NakCode::InvalidRequest);
            return;
        };
        let req = Request {
            op: RemoteOp::Write,
            rkey: reth.rkey,
            va: reth.va,
            len: u64::from(reth.dma_len),
        };
        if let Err(code) = rights::request(qp, &hca.mrs, &hca.mws, &req) {
            nak_error(qp, hca, psn, code);
            return;
        }
        qp.resp.write = Some(WriteCtx {
            rkey: reth.rkey,
            va: reth.va,
            remaining: reth.dma_len,
            total: reth.dma_len,
        });
    }
    let Some(mut ctx) = qp.resp.write else {
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    };
    let n = pkt.payload.len() as u32;
    let last = flags.contains(OpFlags::END);
    if n > ctx.remaining || (last && n != ctx.remaining) {
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    }
    if n > 0 {
        let need = AccessFlags::REMOTE_WRITE;
        let placed = rights::remote(&hca.mrs, &hca.mws, qp.pd, ctx.rkey, ctx.va, n as u64, need)
            .map(|(mr, off)| mr.memory.place(off, pkt.payload));
        if !matches!(placed, Ok(Ok(()))) {
            nak_error(qp, hca, psn, NakCode::RemoteAccessError); // deregistered mid-message
            return;
        }
        cost::copied(CopyAt::Scatter, n as usize);
    }
    ctx.va += n as u64;
    ctx.remaining -= n;
    qp.resp.set_epsn(psn.next());
    if last {
        qp.resp.write = None;
        qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
        if needs_recv {
            let w = hca.take_recv(qp).expect("checked non-empty above");
            if !complete_message(
                hca,
                qp,
                w.wr_id,
                WcOpcode::RecvRdmaWithImm,
                ctx.total,
                pkt.imm,
                src_lid,
                pkt.bth.solicited,
            ) {
                return;
            }
        }
    } else {
        qp.resp.write = Some(ctx);
    }
    if pkt.bth.ack_req {
        ack(qp, hca, psn);
    }
}

fn on_read(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>) {
    let psn = pkt.bth.psn;
    let Some(reth) = pkt.reth else {
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    };
    let req =
        Request { op: RemoteOp::Read, rkey: reth.rkey, va: reth.va, len: u64::from(reth.dma_len) };
    if let Err(code) = rights::request(qp, &hca.mrs, &hca.mws, &req) {
        nak_error(qp, hca, psn, code);
        return;
    }
    let npkts = qp.packets_for(reth.dma_len);
    qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    let res = RdResource::Read {
        psn,
        npkts,
        rkey: reth.rkey,
        va: reth.va,
        len: reth.dma_len,
        msn: qp.resp.msn,
    };
    save_resource(qp, res);
    qp.resp.set_epsn(psn.add(npkts));
    send_read_responses(qp, hca, psn, npkts, reth.rkey, reth.va, reth.dma_len, 0, qp.resp.msn);
}

/// Send READ response packets `from..npkts` of a READ whose first response PSN is `first`.
#[allow(clippy::too_many_arguments)]
fn send_read_responses(
    qp: &mut Qp,
    hca: &mut Hca,
    first: Psn,
    npkts: u32,
    rkey: u32,
    va: u64,
    len: u32,
    from: u32,
    msn: u32,
) {
    let mtu = qp.mtu() as usize;
    let mut buf = vec![0u8; mtu.min(len as usize)];
    for i in from..npkts {
        let off = i as usize * mtu;
        let n = (len as usize - off).min(mtu);
        let data = &mut buf[..n];
        if n > 0 {
            let at = va + off as u64;
            let read = rights::remote(
                &hca.mrs,
                &hca.mws,
                qp.pd,
                rkey,
                at,
                n as u64,
                AccessFlags::REMOTE_READ,
            )
            .map(|(mr, o)| mr.memory.read(o, data));
            if !matches!(read, Ok(Ok(()))) {
                nak_error(qp, hca, first.add(i), NakCode::RemoteAccessError);
                return;
            }
            cost::copied(CopyAt::Gather, n);
        }
        let opcode = match (i == 0, i + 1 == npkts) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        let bth = Bth {
            opcode,
            pkey: 0xFFFF,
            dest_qp: qp.attr.dest_qp_num,
            psn: first.add(i),
            ..Bth::default()
        };
        let mut p = Packet::new(bth, data);
        if opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            p.aeth = Some(Aeth::ack(msn));
        }
        hca.transmit(qp, &p);
    }
}

fn on_atomic(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>) {
    let psn = pkt.bth.psn;
    let Some(a) = pkt.atomic_eth else {
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    };
    let is_cas = pkt.bth.opcode == Opcode::RC_COMPARE_SWAP;
    let req = Request { op: RemoteOp::Atomic, rkey: a.rkey, va: a.va, len: 8 };
    let orig = match rights::request(qp, &hca.mrs, &hca.mws, &req) {
        Ok(Some((mr, off))) => {
            let orig = if is_cas {
                mr.memory.compare_swap(off, a.compare, a.swap_add)
            } else {
                mr.memory.fetch_add(off, a.swap_add)
            };
            // An aligned word of on-demand memory that is not mapped: rxe_odp_atomic_op's
            // failed page fault, an rkey violation.
            match orig {
                None if mr.memory.is_odp() && a.va.is_multiple_of(8) => {
                    Err(NakCode::RemoteAccessError)
                }
                o => o.ok_or(NakCode::InvalidRequest),
            }
        }
        // (An atomic always names 8 bytes: `Nothing` is never its grant.)
        Ok(None) => Err(NakCode::InvalidRequest),
        Err(code) => Err(code),
    };
    let orig = match orig {
        Ok(orig) => orig,
        Err(code) => {
            nak_error(qp, hca, psn, code);
            return;
        }
    };
    qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    save_resource(qp, RdResource::Atomic { psn, orig, msn: qp.resp.msn });
    qp.resp.set_epsn(psn.next());
    send_atomic_ack(qp, hca, psn, orig, qp.resp.msn);
}

fn send_atomic_ack(qp: &Qp, hca: &mut Hca, psn: Psn, orig: u64, msn: u32) {
    let bth = Bth {
        opcode: Opcode::RC_ATOMIC_ACKNOWLEDGE,
        pkey: 0xFFFF,
        dest_qp: qp.attr.dest_qp_num,
        psn,
        ..Bth::default()
    };
    let mut p = Packet::new(bth, &[]);
    p.aeth = Some(Aeth::ack(msn));
    p.atomic_ack_eth = Some(orig);
    hca.transmit(qp, &p);
}

fn save_resource(qp: &mut Qp, res: RdResource) {
    let cap = (qp.attr.max_dest_rd_atomic as usize).max(1);
    while qp.resp.resources.len() >= cap {
        qp.resp.resources.pop_front();
    }
    qp.resp.resources.push_back(res);
}

/// A request with a PSN before the expected one: answer it without executing it twice.
fn duplicate(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>, flags: OpFlags) {
    let psn = pkt.bth.psn;
    if flags.contains(OpFlags::READ) {
        // Re-execute the READ from memory, from the packet the request's PSN names: a retry
        // asks from its first response not yet received, its RETH advanced to match. As rxe
        // does, a request that asks for more than the saved READ (another R_Key, or bytes
        // outside it) is not answered.
        let Some(asked) = pkt.reth else { return };
        let found = qp.resp.resources.iter().find_map(|r| match *r {
            RdResource::Read { psn: first, npkts, rkey, va, len, msn }
                if psn.diff(first) >= 0
                    && psn.diff(first.add(npkts)) < 0
                    && asked.rkey == rkey
                    && asked.va >= va
                    && (asked.va - va).saturating_add(asked.dma_len as u64) <= len as u64 =>
            {
                Some((first, npkts, rkey, va, len, msn))
            }
            _ => None,
        });
        if let Some((first, npkts, rkey, va, len, msn)) = found {
            let from = psn.diff(first) as u32;
            send_read_responses(qp, hca, first, npkts, rkey, va, len, from, msn);
        }
        return;
    }
    if flags.contains(OpFlags::ATOMIC) {
        // Never execute an atomic twice: replay the saved original value.
        let found = qp.resp.resources.iter().find_map(|r| match *r {
            RdResource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
            _ => None,
        });
        if let Some((orig, msn)) = found {
            send_atomic_ack(qp, hca, psn, orig, msn);
        }
        return;
    }
    if flags.intersects(OpFlags::ATOMIC_WRITE | OpFlags::FLUSH) {
        flush::duplicate(qp, hca, psn);
        return;
    }
    // SEND/WRITE: already executed; acknowledge again (every duplicate, as rxe does, since the
    // packet that asked for an ACK may be the one a go-back-N burst lost) so the requester
    // recovers from a lost ACK without waiting for its timer.
    let last = qp.resp.epsn.add(Psn::MASK);
    ack(qp, hca, last);
}

/// UC: no ACKs, no NAKs, no retransmission. On a PSN gap (or any error) the responder drops
/// packets until the next FIRST/ONLY, and the message in progress is silently lost; a receive
/// WQE it had started to fill is put back for the next message. Packets behind the expected
/// PSN (duplicates, stragglers) are dropped.
fn uc_request(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>) {
    let Some(info) = pkt.bth.opcode.info() else { return };
    let flags = info.flags;
    let psn = pkt.bth.psn;
    // UC never retransmits, so a PSN behind the expected one carries nothing new: it is a copy
    // the network made, or a straggler of a message already given up. Taking it would deliver
    // a message twice, or out of order.
    if psn.diff(qp.resp.epsn) < 0 {
        hca.stats.rx_duplicates += 1;
        return;
    }
    if psn != qp.resp.epsn {
        uc_abandon(qp, hca);
    }
    qp.resp.set_epsn(psn.next());
    if !payload_fits_mtu(qp, pkt, flags) {
        // UC has no NAK: the malformed packet loses its message, as a gap does.
        hca.stats.rx_bad_length += 1;
        uc_abandon(qp, hca);
        qp.resp.drop_msg = !flags.contains(OpFlags::END);
        return;
    }
    if qp.resp.drop_msg {
        if !flags.contains(OpFlags::START) {
            return;
        }
        qp.resp.drop_msg = false;
    }
    let src_lid = ROCE_SLID;
    if flags.contains(OpFlags::SEND) {
        if flags.contains(OpFlags::START) {
            if qp.resp.recv.is_some() {
                uc_abandon(qp, hca);
                qp.resp.drop_msg = false;
            }
            let Some(w) = hca.take_recv(qp) else {
                hca.stats.dropped_messages += 1; // no receive posted: the message is lost
                qp.resp.drop_msg = !flags.contains(OpFlags::END);
                return;
            };
            qp.resp.recv = Some((w, 0));
        }
        let Some((w, off)) = qp.resp.recv.take() else {
            qp.resp.drop_msg = true;
            return;
        };
        if hca.mrs.scatter(qp.pd, &w.sges, off as usize, pkt.payload).is_err() {
            // A receive that cannot hold the message completes in error (the QP goes on).
            hca.complete_recv(
                qp,
                w.wr_id,
                WcStatus::LocLenErr,
                WcOpcode::Recv,
                0,
                None,
                qp.attr.dest_qp_num,
                src_lid,
                false,
            );
            qp.resp.drop_msg = !flags.contains(OpFlags::END);
            return;
        }
        let off = off + pkt.payload.len() as u64;
        if flags.contains(OpFlags::END) {
            if !complete_message(
                hca,
                qp,
                w.wr_id,
                WcOpcode::Recv,
                off as u32,
                pkt.imm,
                src_lid,
                pkt.bth.solicited,
            ) {
                return;
            }
        } else {
            qp.resp.recv = Some((w, off));
        }
        return;
    }
    // RDMA WRITE (with immediate).
    if flags.contains(OpFlags::START) {
        let ok = pkt.reth.is_some_and(|r| {
            let req =
                Request { op: RemoteOp::Write, rkey: r.rkey, va: r.va, len: u64::from(r.dma_len) };
            rights::request(qp, &hca.mrs, &hca.mws, &req).is_ok()
        });
        let Some(r) = pkt.reth.filter(|_| ok) else {
            hca.stats.dropped_messages += 1;
            qp.resp.drop_msg = !flags.contains(OpFlags::END);
            return;
        };
        qp.resp.write =
            Some(WriteCtx { rkey: r.rkey, va: r.va, remaining: r.dma_len, total: r.dma_len });
    }
    let Some(mut ctx) = qp.resp.write else {
        qp.resp.drop_msg = true;
        return;
    };
    let n = pkt.payload.len() as u32;
    let placed = n <= ctx.remaining
        && (n == 0
            || rights::remote(
                &hca.mrs,
                &hca.mws,
                qp.pd,
                ctx.rkey,
                ctx.va,
                n as u64,
                AccessFlags::REMOTE_WRITE,
            )
            .map(|(mr, off)| mr.memory.place(off, pkt.payload).is_ok())
            .unwrap_or(false));
    if placed {
        cost::copied(CopyAt::Scatter, n as usize);
    }
    if !placed {
        qp.resp.write = None;
        hca.stats.dropped_messages += 1;
        qp.resp.drop_msg = !flags.contains(OpFlags::END);
        return;
    }
    ctx.va += n as u64;
    ctx.remaining -= n;
    if flags.contains(OpFlags::END) {
        qp.resp.write = None;
        if flags.contains(OpFlags::RWR) {
            match hca.take_recv(qp) {
                Some(w) => {
                    if !complete_message(
                        hca,
                        qp,
                        w.wr_id,
                        WcOpcode::RecvRdmaWithImm,
                        ctx.total,
                        pkt.imm,
                        src_lid,
                        pkt.bth.solicited,
                    ) {}
                }
                None => hca.stats.dropped_messages += 1,
            }
        }
    } else {
        qp.resp.write = Some(ctx);
    }
}

/// Give up the UC message in progress: its receive WQE goes back to the head of the queue.
fn uc_abandon(qp: &mut Qp, hca: &mut Hca) {
    if let Some((w, _)) = qp.resp.recv.take() {
        hca.return_recv(qp, w);
        hca.stats.dropped_messages += 1;
    } else if qp.resp.write.take().is_some() {
        hca.stats.dropped_messages += 1;
    }
    qp.resp.drop_msg = true;
}

/// UD: one packet per message. The Q_Key must match; the first [`GRH_LEN`] bytes of the
/// receive buffer get the GRH (for RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header; over
/// IPv6: the IPv6 header), the payload follows. No receive posted, or a Q_Key mismatch: the
/// datagram is dropped and counted.
fn ud_request(qp: &mut Qp, hca: &mut Hca, ip_header: &[u8], pkt: &Packet<'_>) {
    let Some(deth) = pkt.deth else { return };
    if deth.qkey != qp.attr.qkey {
        hca.stats.dropped_messages += 1;
        return;
    }
    let Some(w) = hca.take_recv(qp) else {
        hca.stats.dropped_messages += 1;
        return;
    };
    let mut grh = [0u8; GRH_LEN];
    grh[GRH_LEN - ip_header.len()..].copy_from_slice(ip_header);
    let src_lid = ROCE_SLID;
    let placed = hca
        .mrs
        .scatter(qp.pd, &w.sges, 0, &grh)
        .and_then(|()| hca.mrs.scatter(qp.pd, &w.sges, GRH_LEN, pkt.payload));
    let mut flags = WcFlags::GRH;
    if pkt.imm.is_some() {
        flags |= WcFlags::WITH_IMM;
    }
    let (status, byte_len) = match placed {
        Ok(()) => (WcStatus::Success, (GRH_LEN + pkt.payload.len()) as u32),
        Err(DmaError::Length) => (WcStatus::LocLenErr, 0),
        Err(_) => (WcStatus::LocProtErr, 0),
    };
    let room = hca.complete_ud_recv(
        qp,
        w.wr_id,
        status,
        byte_len,
        pkt.imm,
        deth.src_qp,
        src_lid,
        flags,
        pkt.bth.solicited,
    );
    if !room {
        hca.recv_cq_overflow(qp);
    }
}

/// A message's receive completion (`IBV_WC_SUCCESS`, from the connected peer), as the
/// responder of an RC or UC QP makes it; false when its CQ had no room: the QP went to ERR
/// (rxe's `RESPST_ERR_CQ_OVERFLOW`, class G) and the request is not acknowledged.
#[allow(clippy::too_many_arguments)]
#[inline]
fn complete_message(
    hca: &mut Hca,
    qp: &mut Qp,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
    slid: u16,
    solicited: bool,
) -> bool {
    let src_qp = qp.attr.dest_qp_num;
    let ok = WcStatus::Success;
    if hca.complete_recv(qp, wr_id, ok, opcode, byte_len, imm, src_qp, slid, solicited) {
        return true;
    }
    hca.recv_cq_overflow(qp);
    false
}
