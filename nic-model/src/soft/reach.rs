//! Direct reach on the soft backend: the device's side (MR memory from its reach arena, and
//! what it publishes there for peers: its MRs as they are registered, its RC QPs whenever the
//! engine's QP epoch moves) and the peer's side (other ports' reach files, mapped on demand
//! beside the sending half's connections to their inboxes, and [`place`], which does what
//! the engine asked in the memory reached). `engine::reach` says when a requester uses it;
//! `wire::reach` holds the shared file.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use verbs_api::{AccessFlags, Result};

use crate::engine::mr::MrMemory;
use crate::engine::{Nic, PsnMirror, QpFacts, ReachAsk, ReachOp, Traffic};
use crate::wire::reach::{ReachArena, ReachView, Reached};

/// A device's own reach file and what it has published there.
pub(crate) struct SoftReach {
    arena: Arc<ReachArena>,
    /// The engine's QP epoch last published (`u64::MAX`: never).
    epoch: AtomicU64,
    /// The QPs published as live, and a buffer for the engine's facts.
    published: Mutex<(Vec<u32>, Vec<QpFacts>)>,
    /// Every QP slot a QP was ever published in, sorted: where peers count reached traffic.
    slots: Mutex<Vec<u16>>,
    /// The reached traffic last added up ([`SoftReach::reached`]): sent packets and bytes,
    /// received packets and bytes.
    reached: [AtomicU64; 4],
    /// Whether the last look found the mark set: the next adds up again, since a peer's
    /// counts may land just after the mark it saw set was cleared.
    again: AtomicBool,
}

impl SoftReach {
    pub(crate) fn new(arena: Arc<ReachArena>) -> SoftReach {
        SoftReach {
            arena,
            epoch: AtomicU64::new(u64::MAX),
            published: Mutex::new((Vec::new(), Vec::new())),
            slots: Mutex::new(Vec::new()),
            reached: Default::default(),
            again: AtomicBool::new(false),
        }
    }

    /// Whether peers must send packets (a capture, a tap or a fault plan on this device).
    pub(crate) fn set_observed(&self, observed: bool) {
        self.arena.set_observed(observed);
    }

    /// The port went down for good: nothing reaches it any more, and it reaches nothing.
    pub(crate) fn set_port_down(&self) {
        self.arena.set_port_down();
    }

    /// What peers' reached operations in this port's memory stood for, seen from this port
    /// (requests received; ACKs and responses sent), for its counters. Added up again only when
    /// a peer counted something since the last look or the one before, or when `fresh`
    /// (`Soft::stats`): two loads and a store otherwise.
    pub(crate) fn reached(&self, fresh: bool) -> Traffic {
        let counted = self.arena.take_counted();
        // Under the device lock: one writer.
        let again = self.again.load(Ordering::Relaxed);
        self.again.store(counted, Ordering::Relaxed);
        if fresh || counted || again {
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let t = self.arena.reached(&slots);
            let v = [t.sent_packets, t.sent_bytes, t.received_packets, t.received_bytes];
            for (c, v) in self.reached.iter().zip(v) {
                c.store(v, Ordering::Relaxed);
            }
        }
        let get = |i: usize| self.reached[i].load(Ordering::Relaxed);
        Traffic {
            sent_packets: get(0),
            sent_bytes: get(1),
            received_packets: get(2),
            received_bytes: get(3),
        }
    }

    /// MR memory from the arena, or from the heap when the arena has no room (that MR is
    /// then reached by packets only).
    pub(crate) fn mr_memory(&self, len: usize) -> Result<Arc<MrMemory>> {
        match self.arena.allocate(len) {
            Some(block) => {
                let ptr = block.ptr();
                // SAFETY: the block is `len` zeroed, 64-aligned bytes of the arena mapping,
                // which the block keeps alive.
                Ok(unsafe { MrMemory::hosted(ptr, len, Box::new(block)) })
            }
            None => MrMemory::allocate(len),
        }
    }

    pub(crate) fn mr_registered(
        &self,
        key: u32,
        pd: u32,
        access: AccessFlags,
        iova: u64,
        memory: &MrMemory,
    ) {
        let ptr = memory.addr() as *const u8;
        self.arena.publish_mr(key, pd, access.bits(), iova, ptr, memory.len());
    }

    pub(crate) fn mr_withdrawn(&self, key: u32) {
        self.arena.withdraw_mr(key);
    }

    /// Publishes the engine's RC QPs if its QP epoch moved since the last time: one compare
    /// per call otherwise. Called under the device lock after verbs and progress rounds. Each
    /// QP published live gets its slot's expected-PSN word as its responder's mirror
    /// (`engine::PsnMirror`), so packets that move the PSN move the published one at once;
    /// a QP withdrawn loses it.
    #[inline]
    pub(crate) fn sync(&self, nic: &mut Nic) {
        let e = nic.qp_epoch();
        if self.epoch.load(Ordering::Relaxed) != e {
            self.republish(nic, e);
        }
    }

    #[cold]
    fn republish(&self, nic: &mut Nic, epoch: u64) {
        let mut g = self.published.lock().unwrap_or_else(|e| e.into_inner());
        let (live, facts) = &mut *g;
        nic.qp_facts(facts);
        let mut now_live = Vec::with_capacity(facts.len());
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for f in facts.iter() {
            if f.live && self.arena.publish_qp(f) {
                now_live.push(f.qpn);
                let keep: Arc<dyn std::any::Any + Send + Sync> = self.arena.clone();
                // SAFETY: the word lies in the arena's mapping, which `keep` keeps mapped.
                let mirror = unsafe { PsnMirror::new(self.arena.epsn_word(f.qpn), keep) };
                nic.set_psn_mirror(f.qpn, Some(mirror));
                let slot = (f.qpn as usize % crate::wire::reach::QP_SLOTS) as u16;
                if let Err(at) = slots.binary_search(&slot) {
                    slots.insert(at, slot);
                }
            } else {
                nic.set_psn_mirror(f.qpn, None);
            }
        }
        for qpn in live.iter() {
            if !now_live.contains(qpn) {
                self.arena.withdraw_qp(*qpn);
                nic.set_psn_mirror(*qpn, None);
            }
        }
        *live = now_live;
        self.epoch.store(epoch, Ordering::Relaxed);
    }
}

/// A peer's reach file as a port's connections know it.
pub(crate) enum PeerReach {
    /// Mapped.
    Mapped(ReachView),
    /// It has none (reach is off there): look again after this many asks.
    Absent(u32),
}

/// How many asks go by before a port without a reach file is looked for again.
const ABSENT_RETRY: u32 = 4096;

/// The reach of the peer at `lid`, opened on first use among `views` (sorted by LID); then
/// `ask` checked against it.
pub(crate) fn reach<'l>(
    views: &'l mut Vec<(u16, PeerReach)>,
    dir: &std::path::Path,
    lid: u16,
    ask: &ReachAsk,
) -> Option<Reached<'l>> {
    let at = match views.binary_search_by_key(&lid, |(l, _)| *l) {
        Ok(at) => at,
        Err(at) => {
            let v = match ReachView::open(dir, lid) {
                Some(v) => PeerReach::Mapped(v),
                None => PeerReach::Absent(ABSENT_RETRY),
            };
            views.insert(at, (lid, v));
            at
        }
    };
    let blocked = match &mut views[at].1 {
        PeerReach::Absent(n) => {
            *n -= 1;
            Some(*n == 0)
        }
        PeerReach::Mapped(v) => v.blocked(),
    };
    match blocked {
        // Gone (closed, dead, or looked for long enough): the LID's next owner has a new file.
        Some(true) => {
            views.remove(at);
            None
        }
        Some(false) => None,
        None => match &views[at].1 {
            PeerReach::Mapped(v) => {
                let r = v.resolve(ask)?;
                // The responder's port counts the packets this stands for.
                v.count(ask.dest_qpn, &ask.traffic);
                Some(r)
            }
            PeerReach::Absent(_) => None,
        },
    }
}

/// Does `op` in the peer's memory that `r` reached (the range the ask named, checked by
/// [`ReachView::resolve`]) and returns the word an atomic found there (0 otherwise). The copies
/// go between that range and the requester's own MR memory, in the order of its SGEs.
pub(crate) fn place(r: &Reached<'_>, op: &ReachOp<'_>) -> u64 {
    match *op {
        ReachOp::CompareSwap { compare, swap } => {
            // SAFETY: the 8 bytes lie in the peer's MR (resolve checked the range); the address
            // is 8-aligned (iova and memory share their offset within 8 bytes, checked at
            // reg_mr, and the engine checked the iova's alignment).
            let word = unsafe { AtomicU64::from_ptr(r.ptr as *mut u64) };
            match word.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            }
        }
        ReachOp::FetchAdd { add } => {
            // SAFETY: as for CompareSwap.
            let word = unsafe { AtomicU64::from_ptr(r.ptr as *mut u64) };
            word.fetch_add(add, Ordering::AcqRel)
        }
        ReachOp::WriteInline(data) => {
            // SAFETY: resolve checked [ptr, ptr + len) against the peer's MR; inline data is
            // the whole message.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.ptr, data.len()) };
            0
        }
        ReachOp::Write(local) | ReachOp::Read(local) => {
            let read = matches!(op, ReachOp::Read(_));
            let mut done = 0usize;
            for (memory, off, n) in local.pieces() {
                // SAFETY: `done + n` is within the message, which resolve checked against the
                // peer's MR; the local range was checked by the engine's `resolve_local`.
                let remote = unsafe { r.ptr.add(done) };
                // SAFETY: as above; local MR memory and the peer's arena never overlap.
                unsafe {
                    if read {
                        memory.copy_from_raw(off, remote, n);
                    } else {
                        memory.copy_to_raw(off, remote, n);
                    }
                }
                done += n;
            }
            0
        }
    }
}
