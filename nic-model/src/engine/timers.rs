//! The NIC's index of armed QP timers: every QP with a local ACK or RNR timer armed is filed
//! under its earliest deadline, so the NIC's next timeout is read without visiting every QP.
//!
//! The earliest entry is kept apart from the others. A busy QP re-arms its ACK timer on every
//! ACK; while it stays the earliest (always, when it is the only QP with a timer) that is an
//! overwrite, not a tree update.

use std::collections::BTreeSet;

use super::{Nanos, UNSTAMPED};

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
