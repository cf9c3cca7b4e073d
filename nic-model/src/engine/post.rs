//! The post path: `ibv_post_send` and `ibv_post_recv`. A send WR goes through one pipeline:
//! `send_check::check_send` makes every check `ibv_post_send` makes (or returns the error
//! naming what is wrong) and gives a `CheckedWr`, the only way to have one; then an executor
//! takes it, the first that can: direct reach (`reach::post`), the send-now fast path
//! (`req::post_now`), or the send queue (`CheckedWr::queued_wqe`, for the requester). The
//! executors test only whether they can do the WR (an empty send queue, a reachable peer, a
//! small payload...), never whether it is right: a rule for every send WR goes into
//! `check_send`, and every path obeys it.

use verbs_api::{Error, QpState, RecvWr, Result, SendWr};

use super::qp::RecvWqe;
use super::send_check::check_send;
use super::time::{Nanos, Now};
use super::timers::refile_timer;
use super::Nic;
use super::{reach, req};

impl Nic {
    /// `ibv_post_send`. Each WR is checked before it is queued; the first bad one is an error
    /// naming its index (those before it were posted, as with `bad_wr`).
    pub fn post_send(&mut self, now: Nanos, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        self.post_send_at(&mut Now::At(now), qpn, wrs)
    }

    /// [`Nic::post_send`] at a time that is read only if a packet arms the ACK timer (not
    /// when one is already running for an earlier request).
    pub fn post_send_at(&mut self, now: &mut Now<'_>, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_post_send: QP {qpn:#x} does not exist")))?;
        let mut result = Ok(());
        let mut quiet = true;
        // WRs of this call done by direct reach: each holds a slot of the send queue until
        // the call ends, as on rxe (`check_send`).
        let mut done_at_once = 0;
        // Bytes this call copied by direct reach, under the device lock: a WR that would take
        // the call over `reach::REACH_CALL_BYTES` goes as packets instead.
        let mut reached_bytes = 0u64;
        for (i, wr) in wrs.iter().enumerate() {
            let wr = match check_send(qp, &self.hca, wr, done_at_once) {
                Ok(checked) => checked,
                Err(e) => {
                    result = Err(Error::new(
                        e.errno,
                        format!("ibv_post_send: wr[{i}] (wr_id {}): {}", wr.wr_id, e.message),
                    )
                    .at_wr(i));
                    break;
                }
            };
            let bytes = reached_bytes + u64::from(wr.len());
            if bytes <= reach::REACH_CALL_BYTES
                && reach::candidate(qp, &self.hca, wr.wr().opcode)
                && reach::post(qp, &mut self.hca, &wr)
            {
                done_at_once += 1;
                reached_bytes = bytes;
                continue;
            }
            quiet = false;
            if req::post_now(qp, &mut self.hca, now, &wr) {
                continue;
            }
            let wqe = wr.queued_wqe(qp, &self.hca.mrs);
            qp.sq.push_back(wqe);
        }
        self.hca.quiet_post = quiet && result.is_ok();
        if qp.state == QpState::Err {
            self.hca.flush(qp);
        } else {
            req::drive(qp, &mut self.hca, now);
        }
        refile_timer(&mut self.timers, qp);
        result
    }

    /// Whether the last `ibv_post_send` did every WR by direct reach (`engine::reach`), so
    /// that it gave the wire nothing; reading it clears it. A host may then skip the
    /// progress round it runs after a post, when nothing else waits either.
    pub fn take_quiet_post(&mut self) -> bool {
        std::mem::take(&mut self.hca.quiet_post)
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wrs: &[RecvWr<'_>]) -> Result<()> {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_post_recv: QP {qpn:#x} does not exist")));
        };
        if qp.state == QpState::Reset {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} is in RESET; post receives in INIT or later"
            )));
        }
        if qp.srq.is_some() {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} takes its receives from an SRQ; use ibv_post_srq_recv"
            )));
        }
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |m: String| {
                Error::inval(format!("ibv_post_recv: wr[{i}] (wr_id {}): {m}", wr.wr_id))
            };
            if qp.rq.len() >= qp.cap.max_recv_wr as usize {
                result = Err(Error::nomem(format!(
                    "ibv_post_recv: wr[{i}] (wr_id {}): the receive queue is full ({} WRs, max_recv_wr)",
                    wr.wr_id, qp.cap.max_recv_wr
                )));
                break;
            }
            if wr.sg_list.len() > qp.cap.max_recv_sge as usize {
                result = Err(fail(format!(
                    "{} SGEs exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_recv_sge
                )));
                break;
            }
            if let Err(m) = self.hca.check_sges(qp.pd, wr.sg_list) {
                result = Err(fail(m));
                break;
            }
            let len = wr.sg_list.iter().map(|s| s.length as u64).sum();
            qp.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.into(), len });
        }
        if qp.state == QpState::Err {
            // Flushing clears the QP's timers.
            self.hca.flush(qp);
            refile_timer(&mut self.timers, qp);
        }
        result
    }
}
