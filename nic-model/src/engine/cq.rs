//! Completion queues: a bounded FIFO of work completions, overrun detection, and the
//! arm-for-notification state (`ibv_req_notify_cq`).

use std::collections::VecDeque;

use verbs_api::{Errno, Error, Result, WcStatus, WorkCompletion};

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
