//! Work completions: how a finished or flushed WQE becomes a `WorkCompletion` in its QP's CQ,
//! with the CQ's notification or overrun event.

use verbs_api::{
    AsyncElement, AsyncEvent, AsyncEventType, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};

use super::cq::CqId;
use super::qp::{Qp, SendWqe};
use super::{Hca, Hex, NicEvent};

impl Hca {
    /// Push a completion; fires the CQ's armed event, or records an overrun (and its async event).
    /// Whether the completion found room (false: the CQ overran, or is gone).
    ///
    /// A completion in error carries its `wr_id`, `status`, `qp_num` and `vendor_err` and
    /// nothing else (every other field 0), as rxe fills a user CQ's: its `make_send_cqe` and
    /// the responder's `do_complete`/`flush_recv_wqe` set the opcode, length and flags only
    /// for a success (`ibv_poll_cq(3)`: the other fields are undefined then).
    pub(crate) fn complete(&mut self, cq: CqId, mut wc: WorkCompletion, solicited: bool) -> bool {
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                tracing::warn!(device = %self.cfg.name, qpn = %Hex(wc.qp_num), cq,
                    wr_id = wc.wr_id, status = ?wc.status, opcode = ?wc.opcode,
                    "error completion");
            }
            wc = WorkCompletion {
                wr_id: wc.wr_id,
                status: wc.status,
                qp_num: wc.qp_num,
                vendor_err: wc.vendor_err,
                ..WorkCompletion::default()
            };
        }
        let Some(c) = self.cqs.get_mut(&cq) else { return false };
        let had_overrun = c.overrun > 0;
        let (added, fire) = c.push(wc, solicited);
        if added || !had_overrun {
            // A new completion, or a CQ that has just overrun (every poll now reports it).
            self.reportable += 1;
        }
        if fire {
            self.events.push_back(NicEvent::CqNotify(cq));
        }
        if !added && !had_overrun {
            tracing::warn!(device = %self.cfg.name, cq, "CQ overrun: a completion found it full");
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::CqErr,
                element: AsyncElement::Cq(cq as u64),
            }));
        }
        added
    }

    /// Complete a send WQE: visible if signaled or failed.
    pub(crate) fn complete_send(&mut self, qp: &Qp, w: &SendWqe, status: WcStatus) {
        self.complete_send_wr(qp, (w.wr_id, w.opcode, w.len, w.signaled), status);
    }

    /// [`Hca::complete_send`] of a WR known by its id, opcode, length and signaling (one done
    /// by direct reach has no WQE).
    pub(crate) fn complete_send_wr(
        &mut self,
        qp: &Qp,
        (wr_id, opcode, len, signaled): (u64, verbs_api::WrOpcode, u32, bool),
        status: WcStatus,
    ) {
        if status == WcStatus::Success && !signaled {
            return;
        }
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::for_send(opcode),
            byte_len: if opcode.is_atomic() { 8 } else { len },
            qp_num: qp.qpn,
            ..WorkCompletion::default()
        };
        self.complete(qp.send_cq, wc, false);
    }

    /// A receive completion that found its CQ full: as rxe's responder
    /// (`RESPST_ERR_CQ_OVERFLOW`, class G), the QP goes to the error state, flushing what is
    /// posted, and the request is not acknowledged, so the requester retries into a QP that
    /// no longer answers. The CQ's overrun event is already raised; rxe raises none for the QP.
    pub(crate) fn recv_cq_overflow(&mut self, qp: &mut Qp) {
        tracing::warn!(device = %self.cfg.name, qpn = %Hex(qp.qpn),
            "receive CQ overrun: the QP goes to ERR and the request is not acknowledged");
        self.enter_error(qp, None);
    }

    /// Complete a receive WQE; whether its CQ had room (see [`Hca::recv_cq_overflow`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_recv(
        &mut self,
        qp: &Qp,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
        slid: u16,
        solicited: bool,
    ) -> bool {
        let mut wc_flags = WcFlags::empty();
        if imm.is_some() {
            wc_flags |= WcFlags::WITH_IMM;
        }
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm_data: imm.unwrap_or(0),
            qp_num: qp.qpn,
            src_qp,
            wc_flags,
            slid,
            ..WorkCompletion::default()
        };
        self.complete(qp.recv_cq, wc, solicited)
    }

    /// Complete the receive WQE of a SEND WITH INVALIDATE that invalidated `rkey`
    /// (`IBV_WC_WITH_INV`, the rkey in `imm_data`, as rxe's `do_complete`); whether its CQ
    /// had room.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_recv_inv(
        &mut self,
        qp: &Qp,
        wr_id: u64,
        byte_len: u32,
        rkey: u32,
        src_qp: u32,
        slid: u16,
        solicited: bool,
    ) -> bool {
        let wc = WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len,
            imm_data: rkey,
            qp_num: qp.qpn,
            src_qp,
            wc_flags: WcFlags::WITH_INV,
            slid,
            ..WorkCompletion::default()
        };
        self.complete(qp.recv_cq, wc, solicited)
    }

    /// Complete a UD receive (its flags carry GRH); whether its CQ had room.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_ud_recv(
        &mut self,
        qp: &Qp,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
        slid: u16,
        wc_flags: WcFlags,
        solicited: bool,
    ) -> bool {
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm_data: imm.unwrap_or(0),
            qp_num: qp.qpn,
            src_qp,
            wc_flags,
            slid,
            ..WorkCompletion::default()
        };
        self.complete(qp.recv_cq, wc, solicited)
    }
}
