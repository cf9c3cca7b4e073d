//! The NIC's index of armed QP timers: every QP with a local ACK or RNR timer armed is filed
//! under its earliest deadline, so the NIC's next timeout is read without visiting every QP;
//! and the timer entry points ([`Nic::handle_timeout`], [`Nic::stamp_timers`],
//! [`Nic::next_timeout`]).
//!
//! The earliest entry is kept apart from the others. A busy QP re-arms its ACK timer on every
//! ACK; while it stays the earliest (always, when it is the only QP with a timer) that is an
//! overwrite, not a tree update.

use std::collections::BTreeSet;

use super::qp::Qp;
use super::time::{Nanos, Now, UNSTAMPED};
use super::{comp, req, Nic};

/// The (deadline, QPN) of every QP with an armed timer; `first` is the least of them and is not
/// also in `rest`.
#[derive(Debug, Default)]
pub(crate) struct TimerIndex {
    first: Option<(Nanos, u32)>,
    rest: BTreeSet<(Nanos, u32)>,
}

impl TimerIndex {
    /// The earliest deadline of all.
    pub(crate) fn earliest(&self) -> Option<Nanos> {
        self.first.map(|(t, _)| t)
    }

    /// A QP filed under [`UNSTAMPED`], if any: those are the earliest entries.
    pub(crate) fn first_unstamped(&self) -> Option<u32> {
        self.first.filter(|&(t, _)| t == UNSTAMPED).map(|(_, qpn)| qpn)
    }

    /// QP `qpn`, filed under `old` (or not filed), is now due at `new` (or has no timer).
    pub(crate) fn refile(&mut self, qpn: u32, old: Option<Nanos>, new: Option<Nanos>) {
        if old == new {
            return;
        }
        if let (Some(old), Some(new)) = (old, new) {
            let stays_first = self.rest.first().is_none_or(|&next| (new, qpn) < next);
            if self.first == Some((old, qpn)) && stays_first {
                self.first = Some((new, qpn));
                return;
            }
        }
        if let Some(t) = old {
            self.remove((t, qpn));
        }
        if let Some(t) = new {
            self.insert((t, qpn));
        }
    }

    fn remove(&mut self, entry: (Nanos, u32)) {
        if self.first == Some(entry) {
            self.first = self.rest.pop_first();
        } else {
            self.rest.remove(&entry);
        }
    }

    fn insert(&mut self, entry: (Nanos, u32)) {
        match self.first {
            Some(first) if first < entry => {
                self.rest.insert(entry);
            }
            Some(first) => {
                self.rest.insert(first);
                self.first = Some(entry);
            }
            None => self.first = Some(entry),
        }
    }
}

/// File `qp` in the timer index under its earliest deadline, after a call that may have armed,
/// moved or cleared its local ACK or RNR timer.
#[inline]
pub(super) fn refile_timer(timers: &mut TimerIndex, qp: &mut Qp) {
    let due = match (qp.req.timer_ns, qp.req.rnr_timer_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if due != qp.timer_filed_ns {
        timers.refile(qp.qpn, qp.timer_filed_ns, due);
        qp.timer_filed_ns = due;
    }
}

impl Nic {
    /// Run every timer due at `now` (local ACK timeouts, RNR back-offs).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.stamp_timers(now);
        for qp in self.qps.values_mut() {
            comp::handle_timers(qp, &mut self.hca, now);
            req::drive(qp, &mut self.hca, &mut Now::At(now));
            refile_timer(&mut self.timers, qp);
        }
    }

    /// Starts the local ACK timers that calls which did not read the clock armed (a post on a
    /// real-time host, see [`Now::Lazy`]): each is due a timeout after `now`. A host that hands
    /// the engine a lazy clock calls this (or [`Nic::handle_timeout`], which does) whenever it
    /// looks at the clock for the timers; until then [`Nic::next_timeout`] reports such a
    /// timer as due at once, at time 0.
    pub fn stamp_timers(&mut self, now: Nanos) {
        while let Some(qpn) = self.timers.first_unstamped() {
            let qp = self.qps.get_mut(&qpn).expect("the timer index files only existing QPs");
            if qp.req.timer_ns == Some(UNSTAMPED) {
                qp.req.timer_ns = req::ack_timeout_ns(qp.attr.timeout).map(|t| now + t);
            }
            refile_timer(&mut self.timers, qp);
            debug_assert_ne!(qp.timer_filed_ns, Some(UNSTAMPED), "a stamped timer is due later");
        }
    }

    /// The earliest pending timer: time 0 while a timer waits for [`Nic::stamp_timers`].
    pub fn next_timeout(&self) -> Option<Nanos> {
        let next = self.timers.earliest();
        debug_assert_eq!(
            next,
            self.qps.values().flat_map(|q| [q.req.timer_ns, q.req.rnr_timer_ns]).flatten().min(),
            "every QP whose timers changed was refiled"
        );
        next
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn earliest_is_the_least_deadline_of_every_armed_qp(
            ops in proptest::collection::vec((0u32..6, proptest::option::of(0u64..40)), 0..200)
        ) {
            let mut index = TimerIndex::default();
            let mut armed: BTreeMap<u32, Nanos> = BTreeMap::new();
            for (qpn, due) in ops {
                index.refile(qpn, armed.get(&qpn).copied(), due);
                match due {
                    Some(t) => armed.insert(qpn, t),
                    None => armed.remove(&qpn),
                };
                prop_assert_eq!(index.earliest(), armed.values().min().copied());
                prop_assert_eq!(index.rest.len() + usize::from(index.first.is_some()), armed.len());
            }
        }
    }
}
