//! Completion queues: a bounded FIFO of work completions, overrun detection, the
//! arm-for-notification state (`ibv_req_notify_cq`), and the CQ verbs (`ibv_create_cq`,
//! `ibv_poll_cq`, ...).

use std::collections::VecDeque;

use verbs_api::{Errno, Error, Result, WcStatus, WorkCompletion};

use super::{Hca, Nic};

/// A completion queue's id within a device.
pub type CqId = u32;

/// How a CQ is armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Not armed: no event.
    None,
    /// Next completion of any kind.
    Next,
    /// Next solicited receive completion (or any error completion).
    Solicited,
}

/// One CQ.
pub struct Cq {
    /// Capacity in completions.
    pub capacity: u32,
    entries: VecDeque<WorkCompletion>,
    /// Completions lost because the CQ was full.
    pub overrun: u64,
    /// Arm state.
    pub arm: Arm,
    /// QPs that use this CQ (send or receive).
    pub users: u32,
}

impl Cq {
    /// An empty CQ with room for `capacity` completions.
    pub fn new(capacity: u32) -> Cq {
        Cq { capacity, entries: VecDeque::new(), overrun: 0, arm: Arm::None, users: 0 }
    }

    /// Add a completion; returns `(added, notify)`: whether it fit, and whether an armed event fires.
    pub fn push(&mut self, wc: WorkCompletion, solicited: bool) -> (bool, bool) {
        if self.entries.len() >= self.capacity as usize {
            self.overrun += 1;
            return (false, false);
        }
        self.entries.push_back(wc);
        let fire = match self.arm {
            Arm::None => false,
            Arm::Next => true,
            Arm::Solicited => solicited || wc.status != WcStatus::Success,
        };
        if fire {
            self.arm = Arm::None;
        }
        (true, fire)
    }

    /// Poll up to `out.len()` completions, oldest first. Once completions were lost to an overrun,
    /// the CQ is in error (as on hardware) and every poll says so.
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
        if self.overrun > 0 {
            return Err(Error::new(
                Errno::Io,
                format!(
                    "ibv_poll_cq: CQ overrun: {} completion(s) were lost because the CQ of {} entries was full",
                    self.overrun, self.capacity
                ),
            ));
        }
        let n = out.len().min(self.entries.len());
        for slot in &mut out[..n] {
            *slot = self.entries.pop_front().expect("n is at most the number queued");
        }
        Ok(n)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Resize (`ibv_resize_cq`): fails if the new size cannot hold what is queued.
    pub fn resize(&mut self, capacity: u32) -> Result<()> {
        if (capacity as usize) < self.entries.len() {
            return Err(Error::inval(format!(
                "ibv_resize_cq: {capacity} entries cannot hold the {} completions queued",
                self.entries.len()
            )));
        }
        self.capacity = capacity;
        Ok(())
    }
}

impl Nic {
    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId> {
        let l = &self.hca.cfg.limits;
        if cqe == 0 || cqe > l.max_cqe {
            return Err(Error::inval(format!(
                "ibv_create_cq: cqe {cqe} is not in 1..={}",
                l.max_cqe
            )));
        }
        if self.hca.cqs.len() >= l.max_cq as usize {
            return Err(Error::nomem(format!(
                "ibv_create_cq: the device's max_cq {} is reached",
                l.max_cq
            )));
        }
        let id = self.hca.next_cq;
        self.hca.next_cq += 1;
        self.hca.cqs.insert(id, Cq::new(cqe));
        Ok(id)
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        match self.hca.cqs.get(&cq) {
            None => Err(Error::inval(format!("ibv_destroy_cq: CQ {cq} does not exist"))),
            Some(c) if c.users > 0 => Err(Error::busy(format!(
                "ibv_destroy_cq: CQ {cq} is still used by {} QP(s)",
                c.users
            ))),
            Some(_) => {
                if let Some(c) = self.hca.cqs.remove(&cq) {
                    self.hca.reportable -= c.len() + usize::from(c.overrun > 0);
                }
                Ok(())
            }
        }
    }

    /// `ibv_poll_cq`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.hca.cq_mut(cq)?.poll(out)?;
        self.hca.reportable -= n;
        debug_assert_eq!(
            self.hca.reportable,
            self.hca.cqs.values().map(|c| c.len() + usize::from(c.overrun > 0)).sum::<usize>(),
            "every completion added or polled is counted"
        );
        Ok(n)
    }

    /// What `ibv_poll_cq` would report over every CQ of the NIC: completions queued, plus one
    /// for each CQ that overran. A host polling a CQ can watch it to see that a packet it
    /// handed over completed something, without looking the CQ up.
    pub fn completions_pending(&self) -> usize {
        self.hca.reportable
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.hca.cqs.get(&cq).map_or(0, |c| c.len())
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<()> {
        let c = self.hca.cq_mut(cq)?;
        c.arm = if solicited_only { Arm::Solicited } else { Arm::Next };
        Ok(())
    }

    /// `ibv_resize_cq`.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<()> {
        let max = self.hca.cfg.limits.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(Error::inval(format!("ibv_resize_cq: cqe {cqe} is not in 1..={max}")));
        }
        self.hca.cq_mut(cq)?.resize(cqe)
    }
}

impl Hca {
    fn cq_mut(&mut self, cq: CqId) -> Result<&mut Cq> {
        self.cqs.get_mut(&cq).ok_or_else(|| Error::inval(format!("CQ {cq} does not exist")))
    }
}
