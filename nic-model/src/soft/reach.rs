//! Direct reach on the soft backend: the device's side (MR memory from its reach arena, and
//! what it publishes there for peers: its MRs as they are registered, its RC QPs whenever the
//! engine's QP epoch moves) and the peer's side (other ports' reach files, mapped on demand
//! beside the sending half's connections to their inboxes, and [`place`], which does what
//! the engine asked in the memory reached). `engine::reach` says when a requester uses it;
//! `wire::reach` holds the shared file.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use verbs_api::{AccessFlags, Result};

use crate::engine::mr::MrMemory;
use crate::engine::{Nic, PsnMirror, QpFacts, ReachAsk, ReachOp, Traffic};
use crate::small_copy::{store_in_order, TAIL};
use crate::wire::reach::{Keeper, ReachArena, ReachView, Reached};

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

    /// The device's reach arena (where a program's registered pages move: `crate::pinned`).
    pub(crate) fn arena(&self) -> &Arc<ReachArena> {
        &self.arena
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
        // On-demand memory is the program's, maybe unmapped: peers never reach it.
        if memory.is_odp() {
            return;
        }
        let ptr = memory.addr() as *const u8;
        self.arena.publish_mr(key, pd, access.bits(), iova, ptr, memory.len());
    }

    /// Withdraws the MR: when this returns no peer is inside it, or its memory is held back
    /// until the last one leaves (`ReachArena::withdraw_mr`); either way it is deregistered.
    pub(crate) fn mr_withdrawn(&self, key: u32) {
        let _ = self.arena.withdraw_mr(key);
    }

    /// Makes the calling thread (the device's NIC thread) the reach file's keeper, whose
    /// death peers see at their next reach ([`ReachArena::keep`]).
    pub(crate) fn keep(&self) -> Option<Keeper> {
        let keeper = self.arena.keep();
        if keeper.is_none() {
            tracing::info!(path = %self.arena.path().display(),
                "no keeper for the reach file: peers send packets to this port");
        }
        keeper
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
///
/// The last bytes of a message become visible last, as a NIC's DMA writes it in address order
/// and as programs that poll a message's last byte rely on (`ib_write_lat`, FaRM- and
/// HERD-style rings): everything but the last [`TAIL`] bytes is copied (a `memcpy` may store
/// in any order), then a release fence, then the tail, byte by byte in address order (one
/// 8-byte store when it is an aligned word). That holds for a WRITE in the peer's memory and
/// for a READ in the requester's.
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
            unsafe { crate::small_copy::copy_ordered(data.as_ptr(), r.ptr, data.len()) };
            0
        }
        ReachOp::Write(local) => {
            let body = r.len.saturating_sub(TAIL);
            let mut tail = [0u8; TAIL];
            let mut done = 0usize;
            for (memory, off, n) in local.pieces() {
                let head = n.min(body.saturating_sub(done));
                // SAFETY: `done + n` is within the message, which resolve checked against the
                // peer's MR; the local range was checked by the engine's `resolve_local`; local
                // MR memory and the peer's arena never overlap; the tail's part of the piece
                // lies in `tail` (it starts at `body`, and the message ends at `body + TAIL`).
                unsafe {
                    if head != 0 {
                        memory.copy_to_raw(off, r.ptr.add(done), head);
                    }
                    if head != n {
                        let into = tail.as_mut_ptr().add(done + head - body);
                        memory.copy_to_raw(off + head, into, n - head);
                    }
                }
                done += n;
            }
            let end = done.max(body);
            fence(Ordering::Release);
            // SAFETY: [body, end) is the message's tail, inside the range resolve checked.
            unsafe { store_in_order(r.ptr.add(body), &tail[..end - body]) };
            0
        }
        ReachOp::Read(local) => {
            let body = r.len.saturating_sub(TAIL);
            // The local places of the tail's bytes, written after the fence.
            let mut tail: [(*mut u8, u8); TAIL] = [(std::ptr::null_mut(), 0); TAIL];
            let mut tail_n = 0usize;
            let mut done = 0usize;
            for (memory, off, n) in local.pieces() {
                let head = n.min(body.saturating_sub(done));
                if head != 0 {
                    // SAFETY: as for Write, the other way round.
                    unsafe { memory.copy_from_raw(off, r.ptr.add(done), head) };
                }
                let base = memory.addr() as *mut u8;
                for k in head..n {
                    // Within the local MR (`resolve_local` checked [off, off + n)).
                    if off + k < memory.len() {
                        // SAFETY: `done + k` is within the message (resolve checked it).
                        let byte = unsafe { r.ptr.add(done + k).read_volatile() };
                        // SAFETY: within the local MR's memory (checked just above).
                        tail[tail_n] = (unsafe { base.add(off + k) }, byte);
                        tail_n += 1;
                    }
                }
                done += n;
            }
            fence(Ordering::Release);
            for &(at, byte) in &tail[..tail_n] {
                // SAFETY: each place lies in the requester's MR memory (recorded above).
                unsafe { AtomicU8::from_ptr(at).store(byte, Ordering::Release) };
            }
            0
        }
    }
}
