//! The consumer side of an inbox ring, owned by one port: takes packets out in ring order and
//! parks the NIC thread on the doorbell futex when there is nothing to do.

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::layout::{
    self, lap_seq, CORRUPTED, LEN_ICRC_UNSET, STATE_BROKEN, STATE_CLOSED, STATE_READY,
};
use super::os;
use super::segment::{Segment, SlotWords};
use super::sender::wake_if_parked;

/// How long the head slot may stay claimed but unpublished before the consumer checks
/// whether its writer is still alive. Far above any real copy time, so a live ring never
/// pays for the check.
pub const WRITER_STALL_CHECK: Duration = Duration::from_millis(10);

/// Longest single park; longer timeouts are clamped (the caller parks again).
pub const MAX_PARK: Duration = Duration::from_secs(24 * 60 * 60);

/// Counters of one inbox, since it was created (process-local).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InboxStats {
    /// Packets handed to `recv` / `recv_with`.
    pub received: u64,
    /// Packets that `recv` had to cut to the caller's buffer.
    pub truncated: u64,
    /// Times `park` went to sleep on the doorbell.
    pub parks: u64,
    /// Sleeps ended by a sender's or `unpark`'s wakeup.
    pub wakeups: u64,
    /// Sleeps ended by their timeout.
    pub park_timeouts: u64,
    /// Slots dropped because their writer died before publishing them.
    pub abandoned: u64,
    /// Slots dropped because their length word was impossible (corrupted segment).
    pub corrupt: u64,
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    truncated: AtomicU64,
    parks: AtomicU64,
    wakeups: AtomicU64,
    park_timeouts: AtomicU64,
    abandoned: AtomicU64,
    corrupt: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter that only the holder of the receiving role writes: a load and a
/// store, no locked instruction on the receive path (readers see it whole, and late at worst;
/// docs/decisions.md, "Relaxed received counter").
fn add_as_receiver(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// The receiving end of a port, created by [`Fabric::create_inbox`](super::Fabric::create_inbox).
/// `Send + Sync`; receiving is single-consumer, so a `recv` that finds another thread already
/// receiving returns `None` instead of racing it. Dropping it closes the segment (senders get
/// [`WireError::Closed`](super::WireError::Closed)) and removes its file, in the process that
/// created it only: a child of `fork()` drops a copy, and the parent's port stays open.
///
/// # A sender that dies while writing
/// A sender claims a slot (CAS on the tail) before it copies the packet in and publishes it.
/// If its process dies in between, the slot stays claimed but unpublished, and since the
/// consumer takes slots strictly in order, every later packet waits behind it. The consumer
/// detects this: claimed slots carry the writer's pid, and when the head slot has stayed
/// unpublished for [`WRITER_STALL_CHECK`] the consumer checks that pid; if the process is gone
/// it drops the half-written slot (counted in [`InboxStats::abandoned`]) and moves on. While the
/// writer is alive, or in the few instructions between the CAS and the pid stamp (where the
/// slot does not name its writer yet), the consumer keeps returning `None` for that slot:
/// a sender that dies exactly there wedges the inbox until its owner recreates the port.
/// Recovery also needs `recv` to be called; a parked owner notices at its next park timeout.
///
/// # A stray write into the ring
/// Another process of the same user can write anywhere in the segment. Values that cannot
/// occur are found where the ring is looked at anyway, at no cost to a sane ring: `recv`
/// finds a head slot whose sequence number is neither free nor published for this lap, a
/// sender finds head and tail more than a ring apart or an unknown state word, and
/// [`check_health`](Inbox::check_health) (for the owner's idle moments) looks at all three.
/// The first one found makes the inbox **broken**, for good: [`problem`](Inbox::problem) says
/// what was wrong, `recv` delivers nothing more, and the segment's state word says so, so
/// that every sender and `softverbs fabric` report it, naming the file. The owner's port is
/// down; a new port (a new inbox) is the way on. A value that a sane ring can hold (a tail
/// moved by less than a ring, a length word within the slot) cannot be told from traffic.
pub struct Inbox {
    seg: Segment,
    lid: u16,
    gid: [u8; 16],
    /// (st_dev, st_ino) of our file, so drop removes our file and never a successor's.
    file_id: (u64, u64),
    receiving: AtomicBool,
    unpark_token: AtomicBool,
    /// Ring position of the stalled head slot, and when the stall was first seen or last
    /// checked (ns since `epoch`); only touched by the receiving thread.
    stall_pos: AtomicU64,
    stall_since_ns: AtomicU64,
    epoch: Instant,
    counters: Counters,
    /// What made the inbox broken (see "A stray write into the ring").
    broken: OnceLock<String>,
    /// The process that created it: only there does dropping it close the port and remove
    /// the file (a child of `fork()` drops a copy).
    owner: u32,
}

/// Holds the single-consumer role for the duration of one `recv`.
struct Receiving<'a>(&'a AtomicBool);

impl<'a> Receiving<'a> {
    fn claim(flag: &'a AtomicBool) -> Option<Receiving<'a>> {
        flag.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Receiving(flag))
    }
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Frees a slot when dropped, so a panicking `recv_with` closure still consumes its packet.
struct Release<'a> {
    inbox: &'a Inbox,
    pos: u64,
    slot: &'a SlotWords<'a>,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.inbox.release(self.pos, self.slot);
    }
}

enum Stall {
    /// Nothing to do yet: the slot is empty, or its writer is (or may be) still writing.
    Wait,
    /// Look at the slot again (it was dropped, or was published meanwhile).
    Retry,
}

impl Inbox {
    pub(crate) fn new(seg: Segment, lid: u16, gid: [u8; 16], file_id: (u64, u64)) -> Inbox {
        Inbox {
            seg,
            lid,
            gid,
            file_id,
            receiving: AtomicBool::new(false),
            unpark_token: AtomicBool::new(false),
            stall_pos: AtomicU64::new(u64::MAX),
            stall_since_ns: AtomicU64::new(0),
            epoch: Instant::now(),
            counters: Counters::default(),
            broken: OnceLock::new(),
            owner: std::process::id(),
        }
    }

    /// This port's LID.
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// This port's GID, as written in the segment header.
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// The segment file.
    pub fn path(&self) -> &Path {
        self.seg.path()
    }

    /// Largest packet the ring carries, in bytes; a `recv` buffer of this size never truncates.
    pub fn slot_size(&self) -> usize {
        self.seg.geometry().slot_size as usize
    }

    /// Number of slots in the ring.
    pub fn slots(&self) -> u32 {
        self.seg.geometry().slots
    }

    /// Copies the next packet into `buf` and returns the number of bytes copied; `None` if
    /// no packet is ready. A packet longer than `buf` is cut to fit (counted in
    /// [`InboxStats::truncated`]); use a buffer of [`slot_size`](Inbox::slot_size) bytes.
    /// Makes no system call.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        self.recv_with(|bytes| {
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            if n < bytes.len() {
                bump(&self.counters.truncated);
            }
            n
        })
    }

    /// Hands the next packet, in place in its slot, to `f` and returns what `f` returns;
    /// `None` if no packet is ready. The slot is freed when `f` returns (or panics).
    /// Makes no system call.
    pub fn recv_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let _receiving = Receiving::claim(&self.receiving)?;
        let out = self.take(|bytes, _| f(bytes))?;
        add_as_receiver(&self.counters.received, 1);
        Some(out)
    }

    /// Hands up to `max` ready packets, in ring order and in place in their slots, to `f`;
    /// returns how many. Each slot is freed when `f` returns for it (or panics). One call
    /// takes the receiving role once for the whole burst. Makes no system call.
    pub fn recv_burst(&self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        self.recv_while(max, |bytes| {
            f(bytes);
            true
        })
    }

    /// [`recv_burst`](Inbox::recv_burst) that also stops after a packet for which `f` returns
    /// false (that packet is consumed and counted).
    pub fn recv_while(&self, max: usize, mut f: impl FnMut(&[u8]) -> bool) -> usize {
        self.recv_while_marked(max, |bytes, _| f(bytes))
    }

    /// [`recv_while`](Inbox::recv_while) that also hands `f` the sender's mark: whether it
    /// left the RoCE datagram's ICRC unset ([`Sender::send_marked`](super::Sender::send_marked)).
    #[inline]
    pub fn recv_while_marked(&self, max: usize, mut f: impl FnMut(&[u8], bool) -> bool) -> usize {
        // An empty ring, the common case of a busy poll, costs two loads and no claim: the
        // head slot is free for this lap and no sender has claimed it (a claimed one goes on,
        // so that `take` can tell a dead writer). docs/decisions.md, "Empty inbox without the
        // receiving claim".
        let pos = self.seg.head().load(Ordering::Relaxed);
        let slot = self.seg.slot(pos);
        if slot.seq.load(Ordering::Acquire) == lap_seq(pos)
            && slot.writer.load(Ordering::Relaxed) == 0
        {
            return 0;
        }
        let Some(_receiving) = Receiving::claim(&self.receiving) else {
            return 0;
        };
        let mut n = 0;
        while n < max {
            let Some(more) = self.take(&mut f) else { break };
            n += 1;
            if !more {
                break;
            }
        }
        if n > 0 {
            add_as_receiver(&self.counters.received, n as u64);
        }
        n
    }

    /// The body of a receive, for the holder of the receiving role: hands the head packet and
    /// its sender's mark (ICRC unset) to `f` and frees its slot, or returns `None` if no packet
    /// is ready.
    fn take<R>(&self, f: impl FnOnce(&[u8], bool) -> R) -> Option<R> {
        let slot_size = self.slot_size();
        // Bounded: each extra round follows a slot that was dropped or just published.
        for _ in 0..=self.slots() {
            let pos = self.seg.head().load(Ordering::Relaxed);
            let slot = self.seg.slot(pos);
            let seq = slot.seq.load(Ordering::Acquire);
            if seq != lap_seq(pos.wrapping_add(1)) {
                if seq != lap_seq(pos) {
                    // Neither free nor published: the ring was written over. Leave it as it
                    // is and say so.
                    let slots = self.slots();
                    self.set_broken(|| layout::ring_problem(slots, pos, pos, seq));
                    return None;
                }
                // An empty slot names no writer: the common case costs no call and no clock.
                if slot.writer.load(Ordering::Relaxed) != 0 {
                    if let Stall::Retry = self.check_stall(pos, &slot) {
                        continue;
                    }
                }
                // Empty, or still being written.
                return None;
            }
            let word = slot.len.load(Ordering::Relaxed);
            let len = (word & !LEN_ICRC_UNSET) as usize;
            if len > slot_size {
                bump(&self.counters.corrupt);
                self.release(pos, &slot);
                continue;
            }
            let release = Release { inbox: self, pos, slot: &slot };
            // SAFETY: we are the only consumer (the caller holds the receiving role), the slot
            // is published for `pos` (Acquire above pairs with the sender's Release), and no
            // sender touches it again until `release` stores the next lap's sequence number
            // after `f` returns.
            let bytes = unsafe { self.seg.payload(&slot, len) };
            let out = f(bytes, word & LEN_ICRC_UNSET != 0);
            drop(release);
            return Some(out);
        }
        None
    }

    /// Frees the slot at `pos` for the next lap and advances the head.
    fn release(&self, pos: u64, slot: &SlotWords<'_>) {
        let slots = u64::from(self.slots());
        slot.writer.store(0, Ordering::Relaxed);
        slot.seq.store(lap_seq(pos.wrapping_add(slots)), Ordering::Release);
        self.seg.head().store(pos.wrapping_add(1), Ordering::Release);
    }

    /// The head slot at `pos` is not published but a writer claimed it: time the stall and,
    /// after [`WRITER_STALL_CHECK`], drop the slot if its writer process is gone.
    fn check_stall(&self, pos: u64, slot: &SlotWords<'_>) -> Stall {
        let writer = slot.writer.load(Ordering::Relaxed);
        if writer == 0 {
            // Claimed an instant ago (the pid is not stamped yet), or published meanwhile.
            return Stall::Wait;
        }
        let now_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if self.stall_pos.load(Ordering::Relaxed) != pos {
            self.stall_pos.store(pos, Ordering::Relaxed);
            self.stall_since_ns.store(now_ns, Ordering::Relaxed);
            return Stall::Wait;
        }
        let since_ns = self.stall_since_ns.load(Ordering::Relaxed);
        if now_ns.saturating_sub(since_ns) < WRITER_STALL_CHECK.as_nanos() as u64 {
            return Stall::Wait;
        }
        self.stall_since_ns.store(now_ns, Ordering::Relaxed);
        if os::process_alive(writer, 0) {
            return Stall::Wait;
        }
        // The writer is gone. It may have published just before dying; deliver that.
        if slot.seq.load(Ordering::Acquire) != lap_seq(pos) {
            return Stall::Retry;
        }
        bump(&self.counters.abandoned);
        self.release(pos, slot);
        Stall::Retry
    }

    /// Whether any of the first `max` packets ready in the ring, in ring order, is one for
    /// which `f` says yes; none is taken (the next receive hands them out as before). False
    /// if none is ready or another thread is receiving. Makes no system call: for the owner's
    /// NIC thread, which looks at what waits while the program runs the engine.
    pub fn any_ready(&self, max: usize, mut f: impl FnMut(&[u8]) -> bool) -> bool {
        let Some(_receiving) = Receiving::claim(&self.receiving) else { return false };
        let head = self.seg.head().load(Ordering::Relaxed);
        for pos in (0..max as u64).map(|i| head.wrapping_add(i)) {
            let slot = self.seg.slot(pos);
            if slot.seq.load(Ordering::Acquire) != lap_seq(pos.wrapping_add(1)) {
                return false;
            }
            let len = (slot.len.load(Ordering::Relaxed) & !LEN_ICRC_UNSET) as usize;
            if len > self.slot_size() {
                return false;
            }
            // SAFETY: as in `take`: we hold the receiving role, so the head does not move and
            // no slot from it on is released (and rewritten by a sender) while we look; this
            // one is published for `pos` (Acquire above pairs with the sender's Release).
            let bytes = unsafe { self.seg.payload(&slot, len) };
            if f(bytes) {
                return true;
            }
        }
        false
    }

    /// Whether no packet is ready to be received (a claimed slot still being written counts
    /// as not ready). Makes no system call.
    pub fn is_empty(&self) -> bool {
        let pos = self.seg.head().load(Ordering::Acquire);
        self.seg.slot(pos).seq.load(Ordering::Acquire) != lap_seq(pos.wrapping_add(1))
    }

    /// Sleeps until a packet arrives, [`unpark`](Inbox::unpark) is called, or `timeout`
    /// passes (clamped to [`MAX_PARK`]); returns at once if a packet is ready or an unpark is
    /// pending. Spurious early returns are possible: callers loop.
    ///
    /// Protocol: read the doorbell, raise the parked flag, fence, re-check the ring and the
    /// unpark token, then futex-wait for the doorbell to change. A sender publishes, fences,
    /// and bumps the doorbell only if it sees the flag raised, so no wakeup is lost.
    pub fn park(&self, timeout: Duration) {
        self.park_interruptible(timeout);
    }

    /// As [`park`](Inbox::park), but it also returns when a signal handler ran on this
    /// thread while it slept, and says so (true): a program thread blocked in a verb answers
    /// that as the kernel's interrupted read does.
    pub fn park_interruptible(&self, timeout: Duration) -> bool {
        if timeout.is_zero() {
            return false;
        }
        let deadline = Instant::now() + timeout.min(MAX_PARK);
        let doorbell = self.seg.doorbell();
        let parked = self.seg.parked();
        let rung = doorbell.load(Ordering::Acquire);
        parked.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.unpark_token.swap(false, Ordering::AcqRel) || !self.is_empty() {
            parked.store(0, Ordering::Relaxed);
            return false;
        }
        bump(&self.counters.parks);
        let mut interrupted = false;
        let woken = loop {
            if doorbell.load(Ordering::Acquire) != rung {
                break true;
            }
            let now = Instant::now();
            if now >= deadline || interrupted {
                break false;
            }
            interrupted = os::futex_wait(doorbell, rung, deadline - now);
        };
        parked.store(0, Ordering::Release);
        // Whatever woke us, the caller now looks for work; a pending unpark is served too.
        self.unpark_token.swap(false, Ordering::AcqRel);
        if woken {
            bump(&self.counters.wakeups);
        } else {
            bump(&self.counters.park_timeouts);
        }
        interrupted
    }

    /// Wakes the thread parked in [`park`](Inbox::park) (or makes its next park return at
    /// once), e.g. after a local post that the NIC thread must serve. Makes a system call only
    /// if the receiver is actually parked.
    pub fn unpark(&self) {
        self.unpark_token.store(true, Ordering::SeqCst);
        wake_if_parked(&self.seg);
    }

    /// Looks for values a sane ring cannot hold (see "A stray write into the ring"): a state
    /// word other than ready, head and tail more than a ring apart, an impossible sequence
    /// number in the head slot. Returns what made the inbox broken, now or before; None while
    /// it is sane. A few loads, no system call; meant for the owner's idle moments (before it
    /// parks), not for every receive. Skips the ring check while another thread is receiving.
    pub fn check_health(&self) -> Option<&str> {
        if self.broken.get().is_none() {
            let state = self.seg.state().load(Ordering::Acquire);
            if state != STATE_READY {
                // Only the owner closes its inbox, and it has not: any other value is damage.
                self.set_broken(|| match state {
                    STATE_CLOSED => Some(format!(
                        "{CORRUPTED}the state word says closed, but its owner has it open"
                    )),
                    other => layout::check_state(other).err(),
                });
            } else if let Some(_receiving) = Receiving::claim(&self.receiving) {
                // Holding the receiving role, the head cannot move under the reads.
                let head = self.seg.head().load(Ordering::Relaxed);
                let tail = self.seg.tail().load(Ordering::Acquire);
                let seq = self.seg.slot(head).seq.load(Ordering::Acquire);
                self.set_broken(|| layout::ring_problem(self.slots(), head, tail, seq));
            }
        }
        self.problem()
    }

    /// What made this inbox broken, if it is (see "A stray write into the ring"): starts with
    /// "corrupted: " and says which word holds what.
    pub fn problem(&self) -> Option<&str> {
        self.broken.get().map(String::as_str)
    }

    /// Makes the inbox broken with the problem `find` names, if it names one and the inbox
    /// is not broken already; marks the segment so, for its senders and the listing.
    fn set_broken(&self, find: impl FnOnce() -> Option<String>) {
        if self.broken.get().is_some() {
            return;
        }
        if let Some(what) = find() {
            if self.broken.set(what).is_ok() {
                self.seg.state().store(STATE_BROKEN, Ordering::Release);
            }
        }
    }

    /// Writes the owning device's name into the segment's counters block, for
    /// `softverbs counters` (cut to 32 bytes at a
    /// character boundary).
    pub fn set_label(&self, name: &str) {
        let mut bytes = [0u8; super::layout::LABEL_LEN];
        let mut end = name.len().min(bytes.len());
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        for (i, chunk) in bytes.chunks_exact(8).enumerate() {
            let word = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
            self.seg.label_word(i).store(word, Ordering::Relaxed);
        }
    }

    /// Publishes the port's counters into the segment for readers in other processes
    /// ([`Fabric::read_counters`](super::Fabric::read_counters)): relaxed stores only, no
    /// system call; words past the block's 56 are left out.
    /// Only the owner's progress loop calls it.
    pub fn publish_counters(&self, values: &[u64]) {
        let mut n = 0;
        for (i, &v) in values.iter().enumerate() {
            let Some(word) = self.seg.counter(i) else { break };
            word.store(v, Ordering::Relaxed);
            n += 1;
        }
        self.seg.counter_count().store(n, Ordering::Relaxed);
    }

    /// A snapshot of this inbox's counters.
    pub fn stats(&self) -> InboxStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        InboxStats {
            received: get(&c.received),
            truncated: get(&c.truncated),
            parks: get(&c.parks),
            wakeups: get(&c.wakeups),
            park_timeouts: get(&c.park_timeouts),
            abandoned: get(&c.abandoned),
            corrupt: get(&c.corrupt),
        }
    }

    #[cfg(test)]
    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        if std::process::id() != self.owner {
            // A child of fork() holding a copy: the port is the parent's, still open.
            return;
        }
        self.seg.state().store(STATE_CLOSED, Ordering::Release);
        let path: PathBuf = self.path().to_path_buf();
        super::at_exit::forget(&path);
        tracing::info!(lid = self.lid, path = %path.display(), "detached a port from the fabric");
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::MetadataExt;
            if (meta.dev(), meta.ino()) == self.file_id {
                // Nothing to report to from a drop; a leftover file is listed as closed and
                // reclaimed once this process exits.
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("lid", &self.lid)
            .field("path", &self.path())
            .field("slots", &self.slots())
            .field("slot_size", &self.slot_size())
            .finish_non_exhaustive()
    }
}
