//! The requester: turns send WQEs into request packets (segmenting at the path MTU), within the
//! send window, the `max_rd_atomic` limit and fences, and arms the local ACK timer.

use verbs_api::{QpState, QpType, WcStatus, WrOpcode};

use super::qp::Qp;
use super::send_check::CheckedWr;
use super::time::Now;
use super::Hca;
use crate::packet::{AtomicEth, Bth, Deth, Feth, Opcode, Packet, Reth, Transport};

/// Local ACK timeout for the `timeout` attribute: 4.096 µs × 2^timeout; 0 means no timer.
pub(crate) fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// Send every packet the QP may send now.
#[inline]
pub(crate) fn drive(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>) {
    // Inline, so that the common case after a received packet, nothing to send, costs no call.
    if qp.req.next < qp.sq.len() && qp.state == QpState::Rts && qp.req.rnr_timer_ns.is_none() {
        send_queued(qp, hca, now);
    }
}

/// The send-now executor of `ibv_post_send`, for the message latency waits on: an RC SEND or
/// RDMA WRITE, with or without immediate data, that is one small packet, posted to a QP that
/// is sending nothing else (every earlier WQE has gone out) and has room in its send window.
/// It sends the packet [`step`] would send for the WQE, built straight from the checked WR,
/// and queues the WQE as sent. Returns false (having done nothing) when the WR is not such a
/// case; the send queue then takes it.
pub(crate) fn post_now(
    qp: &mut Qp,
    hca: &mut Hca,
    now: &mut Now<'_>,
    checked: &CheckedWr<'_, '_>,
) -> bool {
    use verbs_api::SendFlags;
    let wr = checked.wr();
    let is_send = match wr.opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => true,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => false,
        _ => return false,
    };
    let req = &qp.req;
    let len = checked.len();
    if qp.qp_type != QpType::Rc
        || qp.state != QpState::Rts
        || req.next != qp.sq.len()
        || req.pkt != 0
        || req.rnr_timer_ns.is_some()
        || req.psn != req.high_psn
        || req.psn.diff(req.comp_psn) >= hca.cfg.window as i32
        || wr.send_flags.contains(SendFlags::FENCE)
        || qp.ip6.is_some()
        || len as usize > FAST_PAYLOAD
        || len > qp.mtu()
        || len > hca.cfg.limits.max_msg_sz
        || !hca.may_send_direct()
    {
        return false;
    }
    // The payload, read now (inline data is copied at post time anyway, and a gather list
    // that goes out at once is read at once).
    let mut buf = [0u8; FAST_PAYLOAD];
    let len = len as usize;
    if !checked.read_into(qp, &hca.mrs, &mut buf[..len]) {
        return false;
    }
    let payload = &buf[..len];
    let psn = qp.req.psn;
    let with_imm = wr.opcode.has_imm();
    let solicited = wr.send_flags.contains(SendFlags::SOLICITED);
    let bth = Bth {
        opcode: segment_opcode(is_send, with_imm, true, true),
        solicited,
        ack_req: true,
        pkey: 0xFFFF,
        dest_qp: qp.attr.dest_qp_num,
        psn,
        ..Bth::default()
    };
    let reth = (!is_send).then_some(Reth {
        va: wr.rdma.remote_addr,
        rkey: wr.rdma.rkey,
        dma_len: len as u32,
    });
    hca.transmit_request(qp, &bth, reth.as_ref(), with_imm.then_some(wr.imm_data), payload);
    qp.sq.push_back(checked.sent_wqe(payload, psn));
    qp.req.next += 1;
    qp.req.psn = psn.next();
    qp.req.high_psn = qp.req.psn;
    if qp.req.timer_ns.is_none() {
        qp.req.timer_ns = ack_timeout_ns(qp.attr.timeout).map(|t| now.ack_deadline(t));
    }
    true
}

/// The largest payload [`post_now`] sends: its datagram then fits the wire's direct path.
const FAST_PAYLOAD: usize = 128;

/// [`drive`] for a QP with WQEs to (continue to) send.
fn send_queued(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>) {
    let mut scratch = std::mem::take(&mut hca.tx.scratch);
    while step(qp, hca, now, &mut scratch) {}
    hca.tx.scratch = scratch;
}

/// Send one packet; false if the requester must wait.
fn step(qp: &mut Qp, hca: &mut Hca, now: &mut Now<'_>, scratch: &mut Vec<u8>) -> bool {
    let next = qp.req.next;
    if next >= qp.sq.len() {
        return false;
    }
    if qp.sq[next].opcode.is_local() {
        return local_op(qp, hca, next);
    }
    // The window bounds unacknowledged packets, so only RC has one: a UC message longer than
    // the window would otherwise never finish (UC retires a WQE only once it is all sent).
    if qp.qp_type == QpType::Rc && qp.req.psn.diff(qp.req.comp_psn) >= hca.cfg.window as i32 {
        return false;
    }
    let w = &qp.sq[next];
    if qp.req.pkt == 0 && !w.started {
        // Execution-time checks, as a NIC makes them when it fetches the WQE.
        // A FLUSH moves no bytes: its length is not a message's.
        let status = if w.len > hca.cfg.limits.max_msg_sz && w.opcode != WrOpcode::Flush {
            Some(WcStatus::LocLenErr) // longer than the port's max_msg_sz
        } else if w.is_rd_atomic() && qp.attr.max_rd_atomic == 0 {
            Some(WcStatus::LocQpOpErr) // the QP was set up to initiate no READs/atomics
        } else {
            None
        };
        if let Some(status) = status {
            fail_wqe(qp, hca, next, status);
            return false;
        }
    }
    let w = &qp.sq[next];
    // Counting outstanding READs/atomics walks the in-flight WQEs: only a WQE that starts and
    // is limited by them (a READ, an atomic, a fenced WR) pays for it, not every packet.
    if qp.req.pkt == 0 && (w.is_rd_atomic() || w.fence) {
        let outstanding_rd = qp.rd_atomic_outstanding();
        if w.is_rd_atomic() && outstanding_rd >= qp.attr.max_rd_atomic as usize {
            return false;
        }
        if w.fence && outstanding_rd > 0 {
            return false;
        }
    }
    let mtu = if qp.qp_type == QpType::Ud { qp.sq[next].len.max(1) } else { qp.mtu() };
    let w = &mut qp.sq[next];
    if !w.started {
        w.started = true;
        w.first_psn = qp.req.psn;
    }
    let w = &qp.sq[next];
    let psn = qp.req.psn;
    let transport = match qp.qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    let mut dest_qp = qp.attr.dest_qp_num;
    let mut dst_ip = qp.dst_ip;
    let mut tos_ttl = qp.ip_tos_ttl;
    let mut deth = None;
    let mut ud_ip6 = None;
    if let Some(ud) = &w.ud {
        dest_qp = ud.remote_qpn;
        dst_ip = ud.dst_ip;
        tos_ttl = ud.ip_tos_ttl;
        ud_ip6 = ud.ip6;
        // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBA 10.2.5).
        let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { qp.attr.qkey } else { ud.remote_qkey };
        deth = Some(Deth { qkey, src_qp: qp.qpn });
    }
    let mut bth = Bth { pkey: 0xFFFF, dest_qp, psn, ..Bth::default() };
    let mut pkt;
    let mut advance = 1;
    let mut done_wqe = true;
    match w.opcode {
        WrOpcode::RdmaRead => {
            // A READ asks for its responses from packet `pkt` on: 0 the first time; on a
            // retry, the first response not yet received (`go_back`), with the remote address
            // and length advanced past what arrived, as the IBA allows and rxe's requester does.
            let skip = qp.req.pkt.min(w.npsn.saturating_sub(1));
            let done = (skip * mtu).min(w.len);
            bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
            bth.ack_req = true;
            pkt = Packet::new(bth, &[]);
            pkt.reth = Some(Reth {
                va: w.rdma.remote_addr.wrapping_add(done as u64),
                rkey: w.rdma.rkey,
                dma_len: w.len - done,
            });
            advance = w.npsn - skip;
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            bth.opcode = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                Opcode::RC_COMPARE_SWAP
            } else {
                Opcode::RC_FETCH_ADD
            };
            bth.ack_req = true;
            pkt = Packet::new(bth, &[]);
            let (swap_add, compare) = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                (w.atomic.swap, w.atomic.compare_add)
            } else {
                (w.atomic.compare_add, 0)
            };
            pkt.atomic_eth = Some(AtomicEth {
                va: w.atomic.remote_addr,
                rkey: w.atomic.rkey,
                swap_add,
                compare,
            });
        }
        WrOpcode::AtomicWrite => {
            // One packet: the RETH names the word, the payload is its 8 bytes (rxe).
            let mut value = [0u8; 8];
            match &w.inline {
                Some(d) => value.copy_from_slice(&d[..8]),
                None => {
                    if hca.mrs.gather(qp.pd, &w.sges, 0, &mut value).is_err() {
                        fail_wqe(qp, hca, next, WcStatus::LocProtErr);
                        return false;
                    }
                }
            }
            scratch.clear();
            scratch.extend_from_slice(&value);
            bth.opcode = Opcode::RC_ATOMIC_WRITE;
            bth.ack_req = true;
            pkt = Packet::new(bth, scratch);
            pkt.reth = Some(Reth { va: w.rdma.remote_addr, rkey: w.rdma.rkey, dma_len: 8 });
        }
        WrOpcode::Flush => {
            // One packet, no payload (oA19-2): FETH, then the RETH of the range.
            bth.opcode = Opcode::RC_FLUSH;
            bth.ack_req = true;
            pkt = Packet::new(bth, &[]);
            pkt.feth = Some(Feth {
                placement: w.flush.placement.bits(),
                selectivity: w.flush.level.to_ibv(),
            });
            pkt.reth = Some(Reth { va: w.rdma.remote_addr, rkey: w.rdma.rkey, dma_len: w.len });
        }
        _ => {
            let i = qp.req.pkt;
            let npkts = w.npsn;
            let first = i == 0;
            let last = i + 1 == npkts;
            let off = (i * mtu) as usize;
            let n = (w.len as usize - off).min(mtu as usize);
            if w.inline.is_none() {
                scratch.resize(n, 0);
                if hca.mrs.gather(qp.pd, &w.sges, off, scratch).is_err() {
                    // The MR went away (deregistered) after the post: a local protection error.
                    fail_wqe(qp, hca, next, WcStatus::LocProtErr);
                    return false;
                }
            }
            // Inline data was copied into the WQE at post time: send it from there.
            let payload: &[u8] = match &w.inline {
                Some(d) => &d[off..off + n],
                None => scratch,
            };
            let is_send =
                matches!(w.opcode, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv);
            let with_imm = w.opcode.has_imm();
            let with_inv = last && w.opcode == WrOpcode::SendWithInv;
            bth.opcode = match (with_inv, first) {
                // RC only (`WrOpcode::valid_for`): the IBA has no UC or UD invalidate opcodes.
                (true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                (true, false) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                _ => segment_opcode(is_send, with_imm, first, last).with_transport(transport),
            };
            bth.solicited = last && w.solicited;
            // An ACK is asked for at the end of a message, every `ack_every` packets, and by
            // the packet that fills the send window: nothing more can go until it is answered.
            let fills_window = psn.next().diff(qp.req.comp_psn) >= hca.cfg.window as i32;
            bth.ack_req = transport == Transport::Rc
                && (last || (i + 1).is_multiple_of(hca.cfg.ack_every) || fills_window);
            pkt = Packet::new(bth, payload);
            pkt.deth = deth;
            if !is_send && first {
                pkt.reth = Some(Reth { va: w.rdma.remote_addr, rkey: w.rdma.rkey, dma_len: w.len });
            }
            if with_imm && last {
                pkt.imm = Some(w.imm);
            }
            if with_inv {
                pkt.ieth = Some(w.imm);
            }
            done_wqe = last;
        }
    }
    let retransmit = qp.req.psn.diff(qp.req.high_psn) < 0;
    if deth.is_none() && qp.ip6.is_some() {
        // A connected QP on an IPv6 path.
        hca.transmit(qp, &pkt);
    } else if let Some(path) = &ud_ip6 {
        // A UD datagram whose address handle sends over IPv6.
        hca.transmit6(dst_ip, path, tos_ttl, qp.sport, &pkt);
    } else {
        hca.transmit_to(dst_ip, tos_ttl, qp.sport, &pkt);
    }
    if retransmit {
        hca.stats.retransmits += 1;
    }
    qp.req.psn = qp.req.psn.add(advance);
    if qp.req.psn.diff(qp.req.high_psn) > 0 {
        qp.req.high_psn = qp.req.psn;
    }
    if done_wqe && transport != Transport::Rc {
        // UC and UD have no acknowledgements: a WQE is complete once its last packet is sent.
        let w = qp.sq.pop_front().expect("next == 0 on UC/UD, the WQE being sent");
        qp.req.pkt = 0;
        qp.req.comp_psn = qp.req.psn;
        hca.complete_send(qp, &w, WcStatus::Success);
        return true;
    }
    if done_wqe {
        qp.req.next += 1;
        qp.req.pkt = 0;
    } else {
        qp.req.pkt += 1;
    }
    if qp.req.timer_ns.is_none() {
        qp.req.timer_ns = ack_timeout_ns(qp.attr.timeout).map(|t| now.ack_deadline(t));
    }
    true
}

/// A local operation (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`) at `sq[index]`: nothing goes on
/// the wire, the NIC does it (rxe's `rxe_do_local_ops`) once every WQE before it has completed,
/// so that its completion keeps its place in post order and WRs after it see its effect. A
/// failure completes it with rxe's status (`IBV_WC_MW_BIND_ERR` for a bind,
/// `IBV_WC_LOC_QP_OP_ERR` for an invalidation) and moves the QP to the error state.
fn local_op(qp: &mut Qp, hca: &mut Hca, index: usize) -> bool {
    if index != 0 {
        return false;
    }
    let w = qp.sq.pop_front().expect("index < len");
    let failed = match w.opcode {
        WrOpcode::BindMw => {
            let b = w.bind.as_deref().copied().unwrap_or_default();
            hca.mws.bind(&hca.mrs, qp.pd, qp.qpn, &b).err().map(|e| (e, WcStatus::MwBindErr))
        }
        _ => hca.mws.invalidate(w.imm).err().map(|e| (e, WcStatus::LocQpOpErr)),
    };
    match failed {
        None => {
            hca.complete_send(qp, &w, WcStatus::Success);
            true
        }
        Some((why, status)) => {
            tracing::debug!(device = %hca.cfg.name, qpn = %super::Hex(qp.qpn),
                opcode = w.opcode.name(), why, "local operation failed");
            hca.complete_send(qp, &w, status);
            hca.enter_error(qp, None);
            false
        }
    }
}

/// Complete `sq[index]` with a local error and move the QP to the error state. While WQEs
/// before it are still unacknowledged the requester waits, so that they complete first and
/// completions stay in post order; `drive` comes back here when they have.
fn fail_wqe(qp: &mut Qp, hca: &mut Hca, index: usize, status: WcStatus) {
    if index != 0 {
        return;
    }
    let w = qp.sq.pop_front().expect("index < len");
    hca.complete_send(qp, &w, status);
    // The completion reports it: no async event.
    hca.enter_error(qp, None);
}

/// The opcode of packet `first`/`last` of a SEND or RDMA WRITE message.
fn segment_opcode(is_send: bool, with_imm: bool, first: bool, last: bool) -> Opcode {
    match (is_send, first, last, with_imm) {
        (true, true, true, false) => Opcode::RC_SEND_ONLY,
        (true, true, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (true, true, false, _) => Opcode::RC_SEND_FIRST,
        (true, false, false, _) => Opcode::RC_SEND_MIDDLE,
        (true, false, true, false) => Opcode::RC_SEND_LAST,
        (true, false, true, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (false, true, true, false) => Opcode::RC_RDMA_WRITE_ONLY,
        (false, true, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (false, true, false, _) => Opcode::RC_RDMA_WRITE_FIRST,
        (false, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (false, false, true, false) => Opcode::RC_RDMA_WRITE_LAST,
        (false, false, true, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    }
}

/// Go back to the oldest unacknowledged PSN and send again from there (go-back-N). Requests
/// still in the transmit queue are taken back first (they would go again anyway): they were
/// never sent, so sending them now is not a retransmission.
pub(crate) fn go_back(qp: &mut Qp, hca: &mut Hca) {
    if let Some(unsent) = hca.unqueue_requests(qp) {
        if unsent.diff(qp.req.high_psn) < 0 {
            qp.req.high_psn = unsent;
        }
    }
    qp.req.next = 0;
    qp.req.pkt = 0;
    let Some(w) = qp.sq.front() else {
        return;
    };
    if !w.started {
        qp.req.psn = qp.req.comp_psn;
        return;
    }
    if w.is_rd_atomic() {
        // An atomic is asked for again (the responder replays its saved result). A READ is
        // asked for again from its first response not yet received, `comp_psn` (the completer
        // takes responses in order only): the responses that arrived are not asked for twice,
        // so a burst longer than a queue on the path moves on with every retry instead of
        // losing the same tail each time.
        let got = qp.req.comp_psn.diff(w.first_psn).max(0) as u32;
        qp.req.pkt = got.min(w.npsn.saturating_sub(1));
        qp.req.psn = w.first_psn.add(qp.req.pkt);
    } else {
        let sent = qp.req.comp_psn.diff(w.first_psn).max(0) as u32;
        qp.req.pkt = sent.min(w.npsn.saturating_sub(1));
        qp.req.psn = w.first_psn.add(qp.req.pkt);
    }
}
