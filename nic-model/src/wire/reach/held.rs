//! What a withdrawal waits for: the QP slots peers are counted in on, and the MRs withdrawn
//! while a peer was still inside, held back (neither slot nor memory reused) until it leaves.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use super::{ReachArena, DRAIN_LIMIT, QP_SLOTS, Q_LIVE, Q_USERS};

/// An MR slot withdrawn with a peer still inside, and the memory it named.
pub(super) struct Held {
    pub(super) slot: usize,
    /// The MR's arena offset (its block's, which starts there).
    pub(super) off: usize,
    /// The block's size once it was given back (the MR is gone), else None.
    pub(super) size: Option<usize>,
    /// The QP slots a peer was still counted in on when the MR was withdrawn: the memory
    /// comes back once each has been seen at zero.
    pub(super) qps: Vec<usize>,
}

impl ReachArena {
    /// After an MR's `valid` was cleared: waits until every QP slot a peer was counted in on
    /// has been seen at zero (a peer counts itself in on the QP slot before it reads the MR's
    /// slot, both sequentially consistent, so one seen at zero has left or will read the MR
    /// withdrawn). Live QPs are waited for, at most [`DRAIN_LIMIT`] in all; a slot no longer
    /// live is not (no new operation starts there; one still counted in is a stopped or dead
    /// peer). The slots still counted in: the MR's memory is held back until they are seen at
    /// zero ([`ReachArena::reap`]).
    pub(super) fn drain_qps(&self) -> Vec<usize> {
        let m = &self.mapping;
        let mut busy: Vec<usize> =
            (0..QP_SLOTS).filter(|&q| m.qp(q, Q_USERS).load(Ordering::SeqCst) != 0).collect();
        let start = Instant::now();
        busy.retain(|&q| {
            let users = m.qp(q, Q_USERS);
            while users.load(Ordering::SeqCst) != 0 {
                if m.qp(q, Q_LIVE).load(Ordering::Relaxed) == 0 || start.elapsed() > DRAIN_LIMIT {
                    return true;
                }
                std::thread::yield_now();
            }
            false
        });
        busy
    }

    pub(super) fn lock_held(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back the memory of held MRs whose peers have left (their count dropped).
    pub(super) fn reap(&self) {
        let mut freed = Vec::new();
        {
            let mut held = self.lock_held();
            if held.is_empty() {
                return;
            }
            held.retain_mut(|h| {
                h.qps.retain(|&q| self.mapping.qp(q, Q_USERS).load(Ordering::SeqCst) != 0);
                let inside = !h.qps.is_empty();
                if !inside {
                    freed.extend(h.size.map(|size| (h.off, size)));
                }
                inside
            });
        }
        for (off, size) in freed {
            self.release(off, size);
        }
    }

    /// A block's range comes back from its MR: released, unless a peer is still inside it.
    pub(super) fn give_back(&self, off: usize, size: usize) {
        {
            let mut held = self.lock_held();
            // A held MR may name part of the block (a program's pinned pages, which MRs
            // over parts of them share): the first holds the block for all of them.
            let within = |h: &Held| h.size.is_none() && h.off >= off && h.off < off + size;
            let at: Vec<usize> = (0..held.len()).filter(|&i| within(&held[i])).collect();
            if let Some(&first) = at.first() {
                for &i in at[1..].iter().rev() {
                    let other = held.remove(i);
                    held[first].qps.extend(other.qps);
                }
                // Released from the block's start (the MR's may lie inside it).
                held[first].off = off;
                held[first].size = Some(size);
                drop(held);
                self.reap();
                return;
            }
        }
        self.release(off, size);
    }
}

/// Waits until `users` is zero, at most [`DRAIN_LIMIT`]; whether it got there.
pub(super) fn drain(users: &AtomicU32) -> bool {
    let start = Instant::now();
    while users.load(Ordering::SeqCst) != 0 {
        if start.elapsed() > DRAIN_LIMIT {
            return false;
        }
        std::thread::yield_now();
    }
    true
}
