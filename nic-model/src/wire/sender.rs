//! The producer side of an inbox ring: any thread of any process of the fabric that has
//! mapped a port's inbox can enqueue packets into it, without locks and without system calls.
//!
//! The ring is Dmitry Vyukov's bounded queue: each slot carries a sequence number; a slot at
//! ring position `pos` is free for this lap when its sequence is `pos` and full when it is
//! `pos + 1`. A producer claims `pos` by CAS on the shared tail, fills the slot, then
//! publishes it with a Release store of `pos + 1`. The consumer frees it by storing
//! `pos + slots`, which makes it free for the next lap, and then advances the head.
//!
//! A producer learns that its slot is free from the head, not from the slot's sequence: the
//! slot at `pos` is free once the head has passed `pos - slots` (the consumer frees a slot
//! before it advances the head). It keeps the last head it read and reads the shared one
//! again only when that says the ring is full, so a send does not wait for the cache line the
//! consumer last wrote (the slot's sequence) to come over from the consumer's core; the head's
//! line comes over once per lap of the ring at most (docs/decisions.md, "Head-based slot
//! claim").

use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use super::layout::{self, lap_seq, Header, CORRUPTED, LEN_ICRC_UNSET, STATE_CLOSED, STATE_READY};
use super::os;
use super::segment::{Segment, SlotWords};
use super::WireError;
use crate::cost::{self, CopyAt};
use crate::small_copy;

/// Upper bound on claim attempts in one `send`. Every failed attempt means another producer
/// made progress, so only a corrupted ring (a tail that other writers keep moving) can
/// reach it; it turns that case into an error instead of a livelock.
const MAX_CLAIM_ATTEMPTS: u32 = 1 << 22;

/// A mapping of some port's inbox, for sending to it. Cheap to clone (clones share the
/// mapping); `Send + Sync`, and any number of senders in any number of processes may send
/// into the same inbox at once. The sending pid is recorded at connect time (reading it per
/// send would be a system call), so a child process after `fork` should connect afresh.
#[derive(Clone)]
pub struct Sender {
    seg: Arc<Segment>,
    lid: u16,
    gid: [u8; 16],
    owner_pid: u32,
    owner_start: u64,
    /// This process's pid, stamped into claimed slots so the owner can tell a dead writer.
    writer_pid: u32,
    /// The consumer's head as last read (shared by clones): slots before `head + slots` are
    /// free. Only ever behind the real head, so it can only make a free slot look taken.
    known_head: Arc<AtomicU64>,
}

impl Sender {
    pub(crate) fn new(seg: Segment, header: &Header) -> Sender {
        Sender {
            seg: Arc::new(seg),
            lid: header.lid,
            gid: header.gid,
            owner_pid: header.owner_pid,
            owner_start: header.owner_start,
            writer_pid: std::process::id(),
            known_head: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The destination port's LID.
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The destination's segment file.
    pub fn path(&self) -> &Path {
        self.seg.path()
    }

    /// The destination port's GID, as its owner wrote it in the header.
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// Largest packet [`send`](Sender::send) accepts, in bytes.
    pub fn slot_size(&self) -> usize {
        self.seg.geometry().slot_size as usize
    }

    /// Number of slots in the destination ring.
    pub fn slots(&self) -> u32 {
        self.seg.geometry().slots
    }

    /// The pid of the process that owns the destination inbox.
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// Enqueues a copy of `pkt`. Errors: [`WireError::TooLarge`] if it does not fit in a slot,
    /// [`WireError::Full`] if every slot holds an unread packet (backpressure: retry later or
    /// drop), [`WireError::Closed`] if the owner closed the inbox, [`WireError::BadSegment`]
    /// naming the file if the ring is corrupted (see [`Inbox`](super::Inbox)). Makes a system
    /// call only to wake an owner that is parked on its doorbell.
    pub fn send(&self, pkt: &[u8]) -> Result<(), WireError> {
        self.send_marked(pkt, false)
    }

    /// [`send`](Sender::send), telling the receiver whether the RoCE datagram `pkt` ends
    /// with its ICRC left unset (`icrc_unset`: four zero bytes; see the layout's `len` word):
    /// the receiver's [`Inbox::recv_while_marked`](super::Inbox::recv_while_marked) hands
    /// that on. The wire itself never looks inside a packet.
    pub fn send_marked(&self, pkt: &[u8], icrc_unset: bool) -> Result<(), WireError> {
        self.send_with_mark(pkt.len(), icrc_unset, |slot| {
            small_copy::copy_from_slice(slot, pkt);
            cost::copied(CopyAt::Packet, pkt.len());
        })
    }

    /// Enqueues a packet of `len` bytes that `fill` writes in place, into the slot itself:
    /// one copy less than [`send`](Sender::send) for a sender that builds the packet anyway.
    /// `fill` gets exactly `len` bytes, of unspecified content. Errors as for `send`; on an
    /// error `fill` is not called. Should `fill` panic, the slot is published with an empty
    /// packet (the consumer drops it as malformed), so the ring never waits for it.
    pub fn send_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), WireError> {
        self.send_with_mark(len, false, fill)
    }

    /// [`send_with`](Sender::send_with) with the mark of [`send_marked`](Sender::send_marked).
    #[inline]
    fn send_with_mark(
        &self,
        len: usize,
        icrc_unset: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WireError> {
        let max = self.slot_size();
        if len > max {
            return Err(WireError::TooLarge { len, max });
        }
        let state = self.seg.state().load(Ordering::Relaxed);
        if state != STATE_READY {
            return Err(self.not_ready(state));
        }
        let tail = self.seg.tail();
        let slots = u64::from(self.slots());
        let mut pos = tail.load(Ordering::Relaxed);
        let mut attempts = 0;
        let (pos, slot) = loop {
            attempts += 1;
            if attempts > MAX_CLAIM_ATTEMPTS {
                return Err(WireError::bad_segment(
                    self.path(),
                    format!("{CORRUPTED}the ring's tail never settles"),
                ));
            }
            if pos.wrapping_sub(self.known_head.load(Ordering::Relaxed)) >= slots {
                // Full as far as we know: look at the consumer's head. Acquire pairs with
                // its Release, so the slot it freed is really done with.
                let head = self.seg.head().load(Ordering::Acquire);
                self.known_head.store(head, Ordering::Relaxed);
                let ahead = pos.wrapping_sub(head);
                if ahead > slots {
                    // The tail is more than a ring ahead of the head, or behind it.
                    let now = tail.load(Ordering::Relaxed);
                    if now == pos {
                        let slots = self.slots();
                        return Err(WireError::bad_segment(
                            self.path(),
                            format!(
                                "{CORRUPTED}the ring's head {head} and tail {pos} are more \
                                 than a ring apart (a ring is {slots} slots)"
                            ),
                        ));
                    }
                    pos = now;
                    continue;
                }
                if ahead == slots {
                    // Every slot holds a packet the consumer has not taken.
                    return Err(WireError::Full);
                }
            }
            match tail.compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break (pos, self.seg.slot(pos)),
                Err(current) => pos = current,
            }
        };
        // The slot is ours until we publish it; `Publish` publishes it however this ends, so a
        // claimed slot is always published by a live sender.
        slot.writer.store(self.writer_pid, Ordering::Relaxed);
        let mut publish = Publish { slot, pos, len: 0 };
        // SAFETY: we won the tail CAS for `pos` and saw the head past `pos - slots` (the
        // consumer is done with the slot's last lap), so until `publish` stores its sequence
        // number no other process reads or writes its payload; the slice is gone by then.
        fill(unsafe { self.seg.payload_mut(&publish.slot, len) });
        // Fits: checked against slot_size (at most 65536) above, below the mark's bit.
        publish.len = len as u32 | if icrc_unset { LEN_ICRC_UNSET } else { 0 };
        drop(publish);
        wake_if_parked(&self.seg);
        Ok(())
    }

    /// The error for a state word other than ready: closed by its owner, or (broken or an
    /// unknown value) a corrupted segment.
    #[cold]
    fn not_ready(&self, state: u32) -> WireError {
        match state {
            STATE_CLOSED => WireError::Closed { path: self.path().to_path_buf() },
            layout::STATE_INITIALISING => WireError::bad_segment(
                self.path(),
                format!("{CORRUPTED}the state word went back to initialising"),
            ),
            other => WireError::bad_segment(
                self.path(),
                layout::check_state(other).err().unwrap_or_default(),
            ),
        }
    }

    /// Whether the inbox holds packets its owner has not taken yet (from any sender): the
    /// consumer's head is behind the tail. A look at two words, no system call.
    pub fn unread(&self) -> bool {
        self.seg.head().load(Ordering::Acquire) != self.seg.tail().load(Ordering::Acquire)
    }

    /// Whether the owner still has this inbox open: false once it closed it or exited (a
    /// recycled pid does not count). May make a system call; meant for occasional checks,
    /// e.g. when sends keep failing with [`WireError::Full`].
    pub fn owner_alive(&self) -> bool {
        self.seg.state().load(Ordering::Acquire) != STATE_CLOSED
            && os::process_alive(self.owner_pid, self.owner_start)
    }
}

/// Publishes a claimed slot when dropped: with the packet's length once it is written, or
/// as an empty packet if the writer panicked first.
struct Publish<'a> {
    slot: SlotWords<'a>,
    pos: u64,
    len: u32,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        self.slot.len.store(self.len, Ordering::Relaxed);
        self.slot.seq.store(lap_seq(self.pos.wrapping_add(1)), Ordering::Release);
    }
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("lid", &self.lid)
            .field("path", &self.path())
            .field("owner_pid", &self.owner_pid)
            .finish_non_exhaustive()
    }
}

/// Wakes the owner if it is parked (or about to be). Called after publishing a packet or
/// setting an unpark token. The SeqCst fence pairs with the one in `Inbox::park`: either the
/// owner's re-check sees our packet, or we see its parked flag, so no wakeup is lost. The
/// swap lets only one of many concurrent senders pay for the system call.
pub(crate) fn wake_if_parked(seg: &Segment) {
    fence(Ordering::SeqCst);
    let parked = seg.parked();
    if parked.load(Ordering::Relaxed) != 0 && parked.swap(0, Ordering::AcqRel) != 0 {
        seg.doorbell().fetch_add(1, Ordering::Release);
        os::futex_wake(seg.doorbell());
    }
}
