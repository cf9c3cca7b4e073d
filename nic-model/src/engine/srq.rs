//! Shared receive queues (`ibv_create_srq`): receive WQEs that any QP attached to the SRQ may
//! consume, with the limit event that tells a program to replenish them; and how a QP takes its
//! next receive WQE, from its SRQ or its own receive queue.

use std::collections::VecDeque;

use verbs_api::{AsyncElement, AsyncEvent, AsyncEventType, Error, RecvWr, Result};

use super::mr::PdId;
use super::qp::{Qp, RecvWqe};
use super::{Hca, Nic, NicEvent};

/// One SRQ.
pub(crate) struct Srq {
    pub(crate) pd: PdId,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// Armed limit: when the queue falls below it, SRQ_LIMIT_REACHED fires once and it disarms.
    pub(crate) limit: u32,
    pub(crate) queue: VecDeque<RecvWqe>,
    pub(crate) users: u32,
}

impl Nic {
    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: PdId, max_wr: u32, max_sge: u32, limit: u32) -> Result<u32> {
        let l = &self.hca.cfg.limits;
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_create_srq: PD {pd} does not exist")));
        }
        if max_wr == 0 || max_wr > l.max_qp_wr {
            return Err(Error::inval(format!(
                "ibv_create_srq: max_wr {max_wr} is not in 1..={}",
                l.max_qp_wr
            )));
        }
        if max_sge == 0 || max_sge > l.max_sge {
            return Err(Error::inval(format!(
                "ibv_create_srq: max_sge {max_sge} is not in 1..={}",
                l.max_sge
            )));
        }
        if limit > max_wr {
            return Err(Error::inval(format!(
                "ibv_create_srq: srq_limit {limit} exceeds max_wr {max_wr}"
            )));
        }
        if self.hca.srqs.len() >= l.max_srq as usize {
            return Err(Error::nomem(format!(
                "ibv_create_srq: the device's max_srq {} is reached",
                l.max_srq
            )));
        }
        let id = self.hca.next_srq;
        self.hca.next_srq += 1;
        self.hca
            .srqs
            .insert(id, Srq { pd, max_wr, max_sge, limit, queue: VecDeque::new(), users: 0 });
        Ok(id)
    }

    fn srq_mut(&mut self, id: u32, verb: &str) -> Result<&mut Srq> {
        self.hca
            .srqs
            .get_mut(&id)
            .ok_or_else(|| Error::inval(format!("{verb}: SRQ {id} does not exist")))
    }

    /// `ibv_modify_srq`: `max_wr` (resize, never below what is queued) and/or `limit` (arm).
    pub fn modify_srq(&mut self, id: u32, max_wr: Option<u32>, limit: Option<u32>) -> Result<()> {
        let max_qp_wr = self.hca.cfg.limits.max_qp_wr;
        let srq = self.srq_mut(id, "ibv_modify_srq")?;
        if let Some(m) = max_wr {
            if m == 0 || m > max_qp_wr || (m as usize) < srq.queue.len() {
                return Err(Error::inval(format!(
                    "ibv_modify_srq: max_wr {m} must be in 1..={max_qp_wr} and hold the {} queued WRs",
                    srq.queue.len()
                )));
            }
        }
        let new_max = max_wr.unwrap_or(srq.max_wr);
        if let Some(l) = limit {
            if l > new_max {
                return Err(Error::inval(format!(
                    "ibv_modify_srq: srq_limit {l} exceeds max_wr {new_max}"
                )));
            }
            srq.limit = l;
        }
        srq.max_wr = new_max;
        Ok(())
    }

    /// `ibv_query_srq`: (max_wr, max_sge, srq_limit).
    pub fn query_srq(&self, id: u32) -> Result<(u32, u32, u32)> {
        let srq = self
            .hca
            .srqs
            .get(&id)
            .ok_or_else(|| Error::inval(format!("ibv_query_srq: SRQ {id} does not exist")))?;
        Ok((srq.max_wr, srq.max_sge, srq.limit))
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, id: u32, wrs: &[RecvWr<'_>]) -> Result<()> {
        let Some(srq) = self.hca.srqs.get(&id) else {
            return Err(Error::inval(format!("ibv_post_srq_recv: SRQ {id} does not exist")));
        };
        let (pd, max_sge, max_wr) = (srq.pd, srq.max_sge, srq.max_wr);
        for (i, wr) in wrs.iter().enumerate() {
            let what = format!("ibv_post_srq_recv: wr[{i}] (wr_id {})", wr.wr_id);
            if self.hca.srqs.get(&id).map_or(0, |s| s.queue.len()) >= max_wr as usize {
                return Err(Error::nomem(format!("{what}: the SRQ is full ({max_wr} WRs)")));
            }
            if wr.sg_list.len() > max_sge as usize {
                return Err(Error::inval(format!(
                    "{what}: {} SGEs exceed max_sge {max_sge}",
                    wr.sg_list.len()
                )));
            }
            self.hca
                .check_sges(pd, wr.sg_list)
                .map_err(|m| Error::inval(format!("{what}: {m}")))?;
            let len = wr.sg_list.iter().map(|s| s.length as u64).sum();
            if let Some(s) = self.hca.srqs.get_mut(&id) {
                s.queue.push_back(RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.into(), len });
            }
        }
        Ok(())
    }

    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
    pub fn destroy_srq(&mut self, id: u32) -> Result<()> {
        let srq = self.srq_mut(id, "ibv_destroy_srq")?;
        if srq.users > 0 {
            return Err(Error::busy(format!(
                "ibv_destroy_srq: SRQ {id} is still used by {} QP(s)",
                srq.users
            )));
        }
        self.hca.srqs.remove(&id);
        Ok(())
    }

    /// Attach a newly created QP to an SRQ (`ibv_qp_init_attr.srq`).
    pub fn attach_srq(&mut self, qpn: u32, srq: u32) -> Result<()> {
        let Some(s) = self.hca.srqs.get_mut(&srq) else {
            return Err(Error::inval(format!("ibv_create_qp: SRQ {srq} does not exist")));
        };
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_create_qp: QP {qpn:#x} does not exist")));
        };
        // RC, UC and UD QPs may all take their receives from an SRQ, as rxe allows.
        if s.pd != qp.pd {
            return Err(Error::inval(format!(
                "ibv_create_qp: SRQ {srq} is in PD {}, the QP in PD {}; softverbs checks receive \
                 buffers against the QP's PD, so both must be the same",
                s.pd, qp.pd
            )));
        }
        s.users += 1;
        qp.srq = Some(srq);
        Ok(())
    }
}

impl Hca {
    /// The next receive WQE for a message arriving on `qp` (its SRQ's, or its own).
    pub(crate) fn take_recv(&mut self, qp: &mut Qp) -> Option<RecvWqe> {
        let Some(id) = qp.srq else { return qp.rq.pop_front() };
        let srq = self.srqs.get_mut(&id)?;
        let w = srq.queue.pop_front()?;
        if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
            srq.limit = 0;
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: AsyncElement::Srq(id as u64),
            }));
        }
        Some(w)
    }

    /// Whether a receive WQE is waiting for `qp`.
    pub(crate) fn has_recv(&self, qp: &Qp) -> bool {
        match qp.srq {
            Some(id) => self.srqs.get(&id).is_some_and(|s| !s.queue.is_empty()),
            None => !qp.rq.is_empty(),
        }
    }

    /// Give back a receive WQE that a lost UC message had started to fill.
    pub(crate) fn return_recv(&mut self, qp: &mut Qp, w: RecvWqe) {
        match qp.srq.and_then(|id| self.srqs.get_mut(&id)) {
            Some(srq) => srq.queue.push_front(w),
            None => qp.rq.push_front(w),
        }
    }
}
