//! The completer: retires send WQEs in order on ACKs, READ responses and atomic ACKs; turns NAKs
//! into retries or error completions; runs the local ACK timer and the RNR back-off.

use verbs_api::{AccessFlags, Sge, WcStatus, WrOpcode};

use super::qp::Qp;
use super::req::{ack_timeout_ns, go_back};
use super::time::{Nanos, Now};
use super::{Hca, Hex};
use crate::packet::{rnr_timer_ns, Aeth, AethKind, NakCode, OpFlags, Opcode, Packet, Psn};
use crate::prefetch::prefetch;

/// A response packet (ACK, NAK, READ response, atomic ACK) arrived for this QP.
pub(crate) fn handle_response(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, pkt: &Packet<'_>) {
    let psn = pkt.bth.psn;
    if !takes_response(qp, hca, psn) {
        return;
    }
    let Some(info) = pkt.bth.opcode.info() else { return };
    if info.flags.contains(OpFlags::READ) {
        on_read_response(qp, hca, now, pkt, info.flags);
        return;
    }
    let Some(aeth) = pkt.aeth else { return };
    if info.flags.contains(OpFlags::ATOMIC) {
        if let Some(orig) = pkt.atomic_ack_eth {
            on_atomic_ack(qp, hca, now, psn, orig);
        }
        return;
    }
    on_aeth(qp, hca, now, psn, aeth);
}

/// An RC ACKNOWLEDGE (an ACK, RNR NAK or NAK) arrived for this QP, read without a [`Packet`]
/// (the receive fast path, `packet::peek_rc_acknowledge`): what [`handle_response`] does with
/// one.
pub(crate) fn handle_acknowledge(
    qp: &mut Qp,
    hca: &mut Hca,
    now: &mut Now<'_>,
    psn: Psn,
    aeth: Aeth,
) {
    if takes_response(qp, hca, psn) {
        on_aeth(qp, hca, now, psn, aeth);
    }
}

/// Whether this QP takes a response with this PSN: it is sending (RTS or SQD; otherwise the
/// packet counts as one for no QP) and the PSN falls inside what it sent, [comp_psn, psn) of
/// the requester (otherwise it is ignored).
fn takes_response(qp: &Qp, hca: &mut Hca, psn: Psn) -> bool {
    if !matches!(qp.state, verbs_api::QpState::Rts | verbs_api::QpState::Sqd) {
        hca.stats.rx_no_qp += 1;
        return false;
    }
    psn.diff(qp.req.psn) < 0
}

/// The AETH of an ACKNOWLEDGE: retire what it acknowledges, then back off (RNR NAK), retry
/// (sequence error NAK) or fail the oldest WQE (the other NAKs).
fn on_aeth(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, psn: Psn, aeth: Aeth) {
    match aeth.kind() {
        AethKind::Ack { .. } => {
            if psn.diff(qp.req.comp_psn) < 0 {
                return; // an old ACK
            }
            if ack_through(qp, hca, now, psn) {
                start_retry(qp, hca, now, false);
            }
        }
        AethKind::RnrNak { timer } => {
            hca.stats.rnr_naks_received += 1;
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                timer, "RNR NAK received");
            if psn.diff(qp.req.comp_psn) < 0 {
                return;
            }
            if ack_through(qp, hca, now, psn.add(Psn::MASK)) {
                start_retry(qp, hca, now, false);
                return;
            }
            if qp.req.rnr_left == 0 {
                tracing::warn!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                    rnr_retry = qp.attr.rnr_retry, "RNR retries exhausted");
                hca.stats.rnr_retry_exceeded += 1;
                fail_front(qp, hca, WcStatus::RnrRetryExcErr);
                return;
            }
            if qp.attr.rnr_retry != 7 {
                qp.req.rnr_left -= 1;
            }
            qp.req.timer_ns = None;
            qp.req.rnr_timer_ns = Some(now.get() + rnr_timer_ns(timer));
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                wait_ns = rnr_timer_ns(timer), rnr_left = qp.req.rnr_left,
                "RNR wait: resending after the responder's timer");
        }
        AethKind::Nak(code) => {
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                code = ?code, "NAK received");
            if psn.diff(qp.req.comp_psn) < 0 {
                return;
            }
            if ack_through(qp, hca, now, psn.add(Psn::MASK)) {
                start_retry(qp, hca, now, false);
                return;
            }
            match code {
                NakCode::PsnSequenceError => {
                    hca.stats.seq_naks_received += 1;
                    start_retry(qp, hca, now, false)
                }
                NakCode::InvalidRequest => fail_front(qp, hca, WcStatus::RemInvReqErr),
                NakCode::RemoteAccessError => fail_front(qp, hca, WcStatus::RemAccessErr),
                NakCode::RemoteOperationalError | NakCode::InvalidRdRequest => {
                    fail_front(qp, hca, WcStatus::RemOpErr)
                }
            }
        }
        AethKind::Reserved(code) => {
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(psn.value()),
                code, "acknowledge with a reserved AETH code received");
            fail_front(qp, hca, WcStatus::RemOpErr)
        }
    }
}

/// Retire every SEND/WRITE WQE whose last PSN is at or before `psn` (an ACK is cumulative).
/// Returns true if a READ/atomic WQE in that range has no response yet: its response was lost
/// and the requester must ask again.
fn ack_through(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, psn: Psn) -> bool {
    let mut progress = false;
    let mut lost_response = false;
    while let Some(w) = qp.sq.front() {
        if !w.started || w.last_psn().diff(psn) > 0 {
            break;
        }
        if w.is_rd_atomic() {
            lost_response = true;
            break;
        }
        // Completed in place, then dropped: the WQE is not moved out of the queue first.
        hca.complete_send(qp, w, WcStatus::Success);
        qp.sq.pop_front();
        // The next ACK retires the WQE now at the front and reads the one behind it to stop;
        // the one after that it retires in turn. Written when posted, under a deep queue they
        // have left the cache by then: the one behind the front is fetched now, two ACKs
        // ahead (the front was, at the ACK before).
        if let Some(w) = qp.sq.get(1) {
            prefetch(w);
        }
        qp.req.next = qp.req.next.saturating_sub(1);
        progress = true;
    }
    let mut after = psn.next();
    // An ACK (or a later response) never acknowledges the responses of a READ or atomic that
    // have not arrived: the oldest PSN outstanding stops where its responses stopped.
    if let Some(w) = qp.sq.front() {
        if w.started && w.is_rd_atomic() && after.diff(w.first_psn) > 0 {
            // Only the responses themselves move the oldest PSN through a READ's range.
            after =
                if w.first_psn.diff(qp.req.comp_psn) >= 0 { w.first_psn } else { qp.req.comp_psn };
        }
    }
    if after.diff(qp.req.comp_psn) > 0 && !lost_response {
        qp.req.comp_psn = after;
        progress = true;
    } else if lost_response {
        if let Some(w) = qp.sq.front() {
            if w.first_psn.diff(qp.req.comp_psn) > 0 {
                qp.req.comp_psn = w.first_psn;
            }
        }
    }
    if progress {
        made_progress(qp, now);
    }
    lost_response
}

/// Forward progress: retry counters reset and the timer restarts (or stops if nothing is in flight).
fn made_progress(qp: &mut Qp, now: &mut Now<'_>) {
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_left = qp.attr.rnr_retry;
    qp.req.retrying_from = None;
    qp.req.timer_ns = if qp.req.psn.diff(qp.req.comp_psn) > 0 {
        ack_timeout_ns(qp.attr.timeout).map(|t| now.ack_deadline(t))
    } else {
        None
    };
}

fn on_read_response(
    qp: &mut Qp,
    hca: &mut Hca,
    now: &mut Now<'_>,
    pkt: &Packet<'_>,
    flags: OpFlags,
) {
    let psn = pkt.bth.psn;
    if psn.diff(qp.req.comp_psn) < 0 {
        return; // a duplicate of a response already placed
    }
    // Earlier SEND/WRITE WQEs are implicitly acknowledged by a later READ response.
    if ack_through(qp, hca, now, psn.add(Psn::MASK)) {
        // A READ/atomic before this one has no response: lost.
        let front_is_this = qp.sq.front().is_some_and(|w| {
            w.started && psn.diff(w.first_psn) >= 0 && psn.diff(w.last_psn()) <= 0
        });
        if !front_is_this {
            start_retry(qp, hca, now, false);
            return;
        }
    }
    if psn != qp.req.comp_psn {
        start_retry(qp, hca, now, false); // an earlier response packet was lost
        return;
    }
    let mtu = qp.mtu() as usize;
    let Some(w) = qp.sq.front() else { return };
    if matches!(w.opcode, WrOpcode::AtomicWrite | WrOpcode::Flush) && w.started {
        // Their answer is one RDMA READ RESPONSE ONLY with no payload (rxe's completer takes
        // it as an ACK for an ATOMIC WRITE and as an empty READ for a FLUSH: the same).
        if pkt.bth.opcode != Opcode::RC_RDMA_READ_RESPONSE_ONLY || !pkt.payload.is_empty() {
            fail_front(qp, hca, WcStatus::BadRespErr);
            return;
        }
        qp.req.comp_psn = psn.next();
        complete_front(qp, hca);
        made_progress(qp, now);
        return;
    }
    if w.opcode != WrOpcode::RdmaRead || !w.started {
        fail_front(qp, hca, WcStatus::BadRespErr);
        return;
    }
    let index = psn.diff(w.first_psn) as usize;
    let off = index * mtu;
    let end_flag = flags.contains(OpFlags::END);
    let expected = if end_flag { (w.len as usize).saturating_sub(off) } else { mtu };
    if pkt.payload.len() != expected || off > w.len as usize {
        fail_front(qp, hca, WcStatus::BadRespErr);
        return;
    }
    if let Err(e) = hca.mrs.scatter(qp.pd, &w.sges, off, pkt.payload) {
        let _ = e;
        fail_front(qp, hca, WcStatus::LocProtErr);
        return;
    }
    qp.req.comp_psn = psn.next();
    if end_flag {
        complete_front(qp, hca);
    }
    made_progress(qp, now);
}

fn on_atomic_ack(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, psn: Psn, orig: u64) {
    if psn.diff(qp.req.comp_psn) < 0 {
        return;
    }
    if ack_through(qp, hca, now, psn.add(Psn::MASK)) {
        let front_is_this =
            qp.sq.front().is_some_and(|w| w.started && w.first_psn == psn && w.opcode.is_atomic());
        if !front_is_this {
            start_retry(qp, hca, now, false);
            return;
        }
    }
    if psn != qp.req.comp_psn {
        start_retry(qp, hca, now, false);
        return;
    }
    let Some(w) = qp.sq.front() else { return };
    if !w.opcode.is_atomic() {
        fail_front(qp, hca, WcStatus::BadRespErr);
        return;
    }
    let sge: Sge = w.sges[0];
    let placed = hca
        .mrs
        .resolve_local(qp.pd, &sge, AccessFlags::LOCAL_WRITE)
        .map(|(mr, off)| mr.memory.write(off, &orig.to_ne_bytes()));
    if !matches!(placed, Ok(Ok(()))) {
        fail_front(qp, hca, WcStatus::LocProtErr);
        return;
    }
    qp.req.comp_psn = psn.next();
    complete_front(qp, hca);
    made_progress(qp, now);
}

/// Retire the oldest WQE, which its response completed, with `IBV_WC_SUCCESS`.
fn complete_front(qp: &mut Qp, hca: &mut Hca) {
    let w = qp.sq.pop_front().expect("front exists");
    qp.req.next = qp.req.next.saturating_sub(1);
    hca.complete_send(qp, &w, WcStatus::Success);
}

/// Go back N after a loss, spending one transport retry; `RETRY_EXC_ERR` when none are left.
/// A loss signalled by a NAK or an out-of-order response is retried once per restart point.
fn start_retry(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, timeout: bool) {
    if !timeout && qp.req.retrying_from == Some(qp.req.comp_psn) {
        return;
    }
    let cause = if timeout { "timeout" } else { "sequence" };
    if qp.req.retry_left == 0 {
        tracing::warn!(device = %hca.cfg.name, qpn = %Hex(qp.qpn),
            psn = %Hex(qp.req.comp_psn.value()), cause, retry_cnt = qp.attr.retry_cnt,
            "transport retries exhausted");
        hca.stats.retry_exceeded += 1;
        fail_front(qp, hca, WcStatus::RetryExcErr);
        return;
    }
    if !(qp.attr.retry_cnt == 7 && hca.cfg.retry_cnt_7_infinite) {
        qp.req.retry_left -= 1;
    }
    qp.req.retrying_from = Some(qp.req.comp_psn);
    hca.stats.retries += 1;
    tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn), psn = %Hex(qp.req.comp_psn.value()),
        cause, retry_left = qp.req.retry_left, "retransmitting from the oldest unacknowledged PSN");
    go_back(qp, hca);
    qp.req.timer_ns = ack_timeout_ns(qp.attr.timeout).map(|t| now.get() + t);
}

/// Complete the oldest WQE with an error status and move the QP to the error state.
fn fail_front(qp: &mut Qp, hca: &mut Hca, status: WcStatus) {
    if let Some(w) = qp.sq.pop_front() {
        hca.complete_send(qp, &w, status);
    }
    // The completion reports it: no async event.
    hca.enter_error(qp, None);
}

/// Fire the QP's timers that are due.
pub(crate) fn handle_timers(qp: &mut Qp, hca: &mut Hca, now: Nanos) {
    if let Some(t) = qp.req.rnr_timer_ns {
        if now >= t {
            // The RNR wait is over: go back and send again. The local ACK timer measures a
            // request's wait for its response, so it starts again with the retransmission
            // (`req::step` arms it) rather than running on from before the wait: one armed by a
            // sequence NAK that followed the RNR NAK would otherwise fire early and spend a
            // retry on nothing lost.
            qp.req.rnr_timer_ns = None;
            qp.req.timer_ns = None;
            tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn),
                psn = %Hex(qp.req.comp_psn.value()), "RNR wait over: resending");
            go_back(qp, hca);
        }
    }
    if let Some(t) = qp.req.timer_ns {
        debug_assert_ne!(
            t,
            super::time::UNSTAMPED,
            "handle_timeout stamps timers before firing them"
        );
        if now >= t {
            if qp.req.psn.diff(qp.req.comp_psn) <= 0 {
                qp.req.timer_ns = None;
            } else if hca.tx.peer_busy(qp.dst_ip) {
                // The responder's NIC has not taken its datagrams yet (its process is
                // starved or stopped): nothing is lost, so no retry is spent (Egress::peer_busy).
                hca.stats.timeouts_deferred += 1;
                tracing::debug!(device = %hca.cfg.name, qpn = %Hex(qp.qpn),
                    psn = %Hex(qp.req.comp_psn.value()),
                    "ACK timeout while the responder has not read its inbox: waiting again");
                qp.req.timer_ns = ack_timeout_ns(qp.attr.timeout).map(|d| now + d);
            } else {
                hca.stats.timeouts += 1;
                start_retry(qp, hca, &mut Now::At(now), true);
            }
        }
    }
}
