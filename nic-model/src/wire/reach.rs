//! Direct reach: a port's registered memory, and the facts that guard it, in a shared file
//! that the NICs of other processes map, so that a requester places an RDMA WRITE, takes an
//! RDMA READ or runs an atomic in the responder's memory itself, with no packet and no work
//! for the responder's CPU, as a real NIC's DMA does (`docs/architecture.md`, "Direct reach").
//!
//! The file is `port-<lid>.reach` beside the port's inbox (mode 0600). It holds a header, a
//! table of the owner's QPs and one of its MRs (the facts a responder's rights depend on:
//! state, access flags, PD, the connected peer; key, PD, range, access; this layer only reads
//! them for the engine's rules, `ReachAsk::check`), and the **arena**: a large sparse
//! region from which the owner allocates the memory of the MRs it owns
//! ([`ReachArena::allocate`]). Tables are written only by the owner, under its device lock,
//! each slot behind a sequence lock; readers retry a torn read. A peer that uses an MR counts
//! itself in the QP slot's `users` first (one locked operation) and reads the QP's and the
//! MR's slots after; the owner withdraws a slot (an MR's `valid`, a QP's `live`) and then
//! waits until the QP's `users` (for an MR: every live QP slot's) has been seen at zero before
//! `ibv_dereg_mr`, `ibv_modify_qp` or `ibv_destroy_qp` returns, so no peer touches memory
//! after its MR or QP is gone (the two sides use sequentially consistent operations, so one
//! of them always sees the other). The count is never forced: memory a peer is still counted
//! in on after the wait's bound is held back from reuse ([`ReachArena::withdraw_mr`]).
//!
//! The owner's death is seen per operation without a system call: its NIC thread holds a
//! robust, process-shared mutex in the header ([`ReachArena::keep`]); the kernel marks the
//! mutex's word `FUTEX_OWNER_DIED` (and clears its owner) as that thread dies, and a peer
//! reads the word before every reach ([`ReachView::blocked`]).
//!
//! Reach is used only when nothing can look at the wire and the port is up: the owner sets
//! `observed` when its device has a capture, a tap or a fault plan, or its port went down, and
//! a requester with any of them sends packets.
//!
//! A QP's slot also holds its expected PSN, which the responder keeps current as packets move
//! it ([`ReachArena::epsn_word`]), and its path MTU. Beside the tables, one counter block per
//! QP slot holds the packets that reached operations stood for (written by the one requester
//! connected to that QP, read by the owner for its port counters, [`ReachArena::reached`]).

use std::fs::{File, OpenOptions, Permissions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use verbs_api::AccessFlags;

use super::{os, WireError};
use crate::engine::{Grant, MrRights, QpFacts, ReachAsk, Traffic};
use held::{drain, Held};

mod held;
mod keeper;
mod reached;
pub use keeper::Keeper;
pub use reached::Reached;

const MAGIC: u64 = u64::from_be_bytes(*b"SVREACH1");
const VERSION: u32 = 4;
/// Header bytes (one page).
const HEADER: usize = 4096;
/// Bytes per table slot.
const SLOT: usize = 64;
/// QP slots (a QP number maps to slot `qpn % QP_SLOTS`).
pub const QP_SLOTS: usize = 4096;
/// MR slots (a key maps to slot `(key >> 8) & (MR_SLOTS - 1)`: its index, masked; the engine
/// gives live MRs indices that differ in their low bits, `engine::mr::MrTable`).
pub const MR_SLOTS: usize = 16384;
/// Where the tables end.
const TABLES_END: usize = HEADER + (QP_SLOTS + MR_SLOTS) * SLOT;
/// The reached-traffic counters, one block of [`SLOT`] bytes per QP slot (four u64 words, see
/// [`ReachView::count`]), after the tables.
const COUNTS: usize = TABLES_END;
/// Where the shared words end (the header, the tables and the counters).
const SHARED_END: usize = COUNTS + QP_SLOTS * SLOT;
/// Where the arena starts: after the shared words, at a 2 MiB boundary.
const ARENA_OFF: usize = SHARED_END.next_multiple_of(2 << 20);
/// The arena's size: address space only (the file is sparse; pages exist once allocated).
pub const ARENA_LEN: usize = 64 << 30;
/// The granule of arena allocations (MR memory is 64-byte aligned, as the heap's is).
const GRANULE: usize = 64;
/// The page (blocks of [`ReachArena::allocate_pages`] start and end on one).
const PAGE: usize = 4096;
/// How long `ibv_dereg_mr`, `ibv_modify_qp` and `ibv_destroy_qp` wait for peers still
/// copying (then they return, and the MR's memory is held back until the peers leave).
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// The bits of a robust futex word that name its owner thread (`FUTEX_TID_MASK`).
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

// Header words (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_PID: usize = 12;
const H_START: usize = 16;
const H_STATE: usize = 24;
const H_OBSERVED: usize = 28;
const H_LEN: usize = 32;
/// The keeper: a robust, process-shared `pthread_mutex_t` the owner's NIC thread holds.
const H_KEEPER: usize = 64;
/// Room for it (glibc's is 40 bytes on 64-bit targets, musl's 40, 24 on 32-bit ones).
const KEEPER_LEN: usize = 48;
/// The byte offset of the keeper's futex word in the file (0: no keeper yet), and the id of
/// the thread that holds it.
const H_KEEPER_AT: usize = H_KEEPER + KEEPER_LEN;
const H_KEEPER_TID: usize = H_KEEPER_AT + 4;
/// Set by a requester that counted reached traffic, cleared by the owner that adds it up (on
/// a cache line of its own, after the keeper's: requesters read the words above on every
/// reach).
const H_COUNTED: usize = 128;

// Why peers must send packets (bits of the `observed` word).
/// A capture, a tap or a fault plan looks at the wire.
const PACKETS_OBSERVED: u32 = 1;
/// The port is down (its inbox was found damaged): nothing reaches it.
const PACKETS_PORT_DOWN: u32 = 2;

// QP slot words (u32 index within the slot).
const Q_SEQ: usize = 0;
const Q_QPN: usize = 1;
const Q_LIVE: usize = 2;
const Q_ACCESS: usize = 3;
const Q_PD: usize = 4;
const Q_DEST_QPN: usize = 5;
const Q_DEST_IP: usize = 6;
const Q_RD_ATOMIC: usize = 7;
const Q_EPSN: usize = 8;
const Q_MTU: usize = 9;
/// Peers inside an operation on this QP (the slot's last word).
const Q_USERS: usize = 15;

// MR slot words (u32 index within the slot; 64-bit values take two).
const M_SEQ: usize = 0;
const M_KEY: usize = 1;
const M_PD: usize = 2;
const M_ACCESS: usize = 3;
const M_VALID: usize = 4;
// Word 5 held the MR's own count of peers inside up to layout 3; the QP slot's count serves
// (`withdraw_mr`).
const M_IOVA: usize = 6; // and 7
const M_LEN: usize = 8; // and 9
const M_OFF: usize = 10; // and 11

/// The shared file, mapped.
struct Mapping {
    map: MmapRaw,
}

impl Mapping {
    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= SHARED_END && off.is_multiple_of(4));
        // SAFETY: offsets are within the header and tables (which the mapping always covers)
        // and 4-aligned (the mapping is page-aligned); shared words are only used as atomics.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off) as *mut u32) }
    }
    fn word64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= SHARED_END && off.is_multiple_of(8));
        // SAFETY: as for `word`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off) as *mut u64) }
    }
    fn qp(&self, i: usize, w: usize) -> &AtomicU32 {
        self.word(HEADER + i * SLOT + w * 4)
    }
    /// Counter `w` (0..4) of QP slot `i`'s reached traffic.
    fn count(&self, i: usize, w: usize) -> &AtomicU64 {
        self.word64(COUNTS + i * SLOT + w * 8)
    }
    fn mr(&self, i: usize, w: usize) -> &AtomicU32 {
        self.word(HEADER + (QP_SLOTS + i) * SLOT + w * 4)
    }
    fn mr64(&self, i: usize, w: usize) -> u64 {
        let lo = self.mr(i, w).load(Ordering::Relaxed) as u64;
        let hi = self.mr(i, w + 1).load(Ordering::Relaxed) as u64;
        lo | hi << 32
    }
    fn set_mr64(&self, i: usize, w: usize, v: u64) {
        self.mr(i, w).store(v as u32, Ordering::Relaxed);
        self.mr(i, w + 1).store((v >> 32) as u32, Ordering::Relaxed);
    }
    fn arena(&self) -> *mut u8 {
        // SAFETY: the mapping is ARENA_OFF + ARENA_LEN bytes long.
        unsafe { self.map.as_mut_ptr().add(ARENA_OFF) }
    }
}

fn map_file(file: &File, path: &Path) -> Result<Mapping, WireError> {
    let map = MmapOptions::new()
        .len(ARENA_OFF + ARENA_LEN)
        .map_raw(file)
        .map_err(|e| WireError::io(path, e))?;
    Ok(Mapping { map })
}

/// The reach file's path for the port with this LID, in the fabric directory `dir`.
pub fn reach_path(dir: &Path, lid: u16) -> PathBuf {
    dir.join(format!("port-{lid}.reach"))
}

/// Whether `path` names a reach file (`port-<lid>.reach`).
pub fn is_reach_file(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.strip_prefix("port-")
            .and_then(|r| r.strip_suffix(".reach"))
            .is_some_and(|lid| lid.parse::<u16>().is_ok())
    })
}

/// Whether the reach file at `path` is this user's and its owner is gone (dead, or it never
/// finished writing the header): [`crate::wire::Fabric::clean`] removes it then.
pub fn owner_gone(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(file) = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) else {
        return false;
    };
    match file.metadata() {
        Ok(m) if m.is_file() && m.uid() == os::effective_uid() => {}
        _ => return false,
    }
    let mut h = [0u8; 24];
    if file.read_exact_at(&mut h, 0).is_err() {
        return true;
    }
    let u64_at = |a: usize| u64::from_ne_bytes(h[a..a + 8].try_into().expect("8 bytes"));
    let pid = u32::from_ne_bytes(h[H_PID..H_PID + 4].try_into().expect("4 bytes"));
    u64_at(H_MAGIC) != MAGIC || !os::process_alive(pid, u64_at(H_START))
}

/// The owner's side: creates the file, allocates MR memory from its arena and publishes what
/// peers may reach. Removes the file when dropped (memory handed out stays mapped until the
/// last [`ArenaBlock`] is gone, since each holds the arena). A `fork()` child has no mapping
/// of it (`MADV_DONTFORK`), and its drops of the arena and blocks do nothing ([`Self::owned`]).
pub struct ReachArena {
    /// Never unmapped in a non-owner: the range is absent there, or holds another mapping.
    mapping: std::mem::ManuallyDrop<Mapping>,
    /// The process that created the file.
    owner: u32,
    file: File,
    path: PathBuf,
    /// Free arena ranges (offset, length), sorted by offset.
    free: Mutex<Vec<(usize, usize)>>,
    /// MRs withdrawn while a peer was still counted in on their slot ([`ReachArena::withdraw_mr`]):
    /// their slots are not reused, nor their memory, until the count drops.
    held: Mutex<Vec<Held>>,
}

// SAFETY: the mapping is shared memory reached only through atomics and raw copies.
unsafe impl Send for ReachArena {}
// SAFETY: as above; the free list is behind a mutex.
unsafe impl Sync for ReachArena {}

impl ReachArena {
    /// Creates `port-<lid>.reach` in `dir` (replacing a stale one of a dead owner).
    pub fn create(dir: &Path, lid: u16) -> Result<ReachArena, WireError> {
        let path = reach_path(dir, lid);
        let _ = std::fs::remove_file(&path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| WireError::io(&path, e))?;
        let setup = || -> Result<Mapping, WireError> {
            file.set_permissions(Permissions::from_mode(0o600))
                .map_err(|e| WireError::io(&path, e))?;
            // The header and tables are reserved (a full tmpfs fails here, not by SIGBUS); the
            // arena's pages only as MRs take them.
            os::reserve(&file, SHARED_END as u64).map_err(|e| WireError::io(&path, e))?;
            file.set_len((ARENA_OFF + ARENA_LEN) as u64).map_err(|e| WireError::io(&path, e))?;
            map_file(&file, &path)
        };
        let mapping = match setup() {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        // A fork child gets none of it, as ibv_fork_init keeps registered memory from it.
        // SAFETY: advice on a mapping this function made; it moves no memory.
        unsafe {
            libc::madvise(mapping.map.as_mut_ptr().cast(), mapping.map.len(), libc::MADV_DONTFORK)
        };
        mapping.word64(H_START).store(os::own_start_time(), Ordering::Relaxed);
        mapping.word(H_PID).store(std::process::id(), Ordering::Relaxed);
        mapping.word(H_VERSION).store(VERSION, Ordering::Relaxed);
        mapping.word64(H_LEN).store((ARENA_OFF + ARENA_LEN) as u64, Ordering::Relaxed);
        mapping.word64(H_MAGIC).store(MAGIC, Ordering::Release);
        super::at_exit::remove_at_exit(&path);
        Ok(ReachArena {
            mapping: std::mem::ManuallyDrop::new(mapping),
            owner: std::process::id(),
            file,
            path,
            free: Mutex::new(vec![(0, ARENA_LEN)]),
            held: Mutex::new(Vec::new()),
        })
    }

    /// Whether this process created the arena (not a `fork()` child): asked only on drops.
    pub fn owned(&self) -> bool {
        std::process::id() == self.owner
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether peers must send packets rather than reach (a capture, tap or fault plan).
    pub fn set_observed(&self, observed: bool) {
        let w = self.mapping.word(H_OBSERVED);
        match observed {
            true => w.fetch_or(PACKETS_OBSERVED, Ordering::SeqCst),
            false => w.fetch_and(!PACKETS_OBSERVED, Ordering::SeqCst),
        };
    }

    /// The port went down for good (its inbox was found damaged): peers send packets, which
    /// are lost as to any port that is down, and its own requests go as packets too.
    pub fn set_port_down(&self) {
        self.mapping.word(H_OBSERVED).fetch_or(PACKETS_PORT_DOWN, Ordering::SeqCst);
    }

    /// Whether [`ReachArena::set_port_down`] was called.
    pub fn port_down(&self) -> bool {
        self.mapping.word(H_OBSERVED).load(Ordering::Relaxed) & PACKETS_PORT_DOWN != 0
    }

    /// The word of QP `qpn`'s slot that holds its expected PSN, for the responder to keep
    /// current ([`crate::engine::PsnMirror`]); valid as long as this arena lives. Only while
    /// the slot holds that QP, published live, is it that QP's.
    pub fn epsn_word(&self, qpn: u32) -> std::ptr::NonNull<AtomicU32> {
        std::ptr::NonNull::from(self.mapping.qp(qpn as usize % QP_SLOTS, Q_EPSN))
    }

    /// Whether a peer counted reached traffic since the last call (which clears the mark).
    pub fn take_counted(&self) -> bool {
        let w = self.mapping.word(H_COUNTED);
        w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::AcqRel) != 0
    }

    /// The traffic peers' reached operations stood for in the QP slots `slots` (the ones
    /// this port has published QPs in), seen from this port: their requests received, the
    /// ACKs and responses sent. Counters are never reset while the file exists, so the sum
    /// over every slot ever used is the port's total.
    pub fn reached(&self, slots: &[u16]) -> Traffic {
        let m = &self.mapping;
        let mut t = Traffic::default();
        for &i in slots {
            let get = |w| m.count(usize::from(i), w).load(Ordering::Relaxed);
            let seen = Traffic {
                sent_packets: get(0),
                sent_bytes: get(1),
                received_packets: get(2),
                received_bytes: get(3),
            };
            t.add(&seen.mirrored());
        }
        t
    }

    /// `len` zeroed bytes of the arena, or None when the arena (or `/dev/shm`) has no room:
    /// the caller then allocates from the heap, and that MR is not reachable.
    pub fn allocate(self: &std::sync::Arc<Self>, len: usize) -> Option<ArenaBlock> {
        self.allocate_aligned(len, GRANULE)
    }

    /// [`Self::allocate`] of whole pages, at a file offset that is a multiple of the page
    /// size: what a program's registered pages move onto (`crate::pinned`), mapped over the
    /// program's range through [`Self::fd`] at [`ArenaBlock::file_offset`].
    pub fn allocate_pages(self: &std::sync::Arc<Self>, len: usize) -> Option<ArenaBlock> {
        self.allocate_aligned(len.next_multiple_of(PAGE), PAGE)
    }

    fn allocate_aligned(
        self: &std::sync::Arc<Self>,
        len: usize,
        align: usize,
    ) -> Option<ArenaBlock> {
        let size = len.max(1).next_multiple_of(GRANULE);
        self.reap();
        let off = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let fits = |&(o, l): &(usize, usize)| o.next_multiple_of(align) + size <= o + l;
            let i = free.iter().position(fits)?;
            let (o, l) = free[i];
            let off = o.next_multiple_of(align);
            // What is left before and after the block stays free.
            let mut rest = Vec::with_capacity(2);
            rest.extend((off > o).then_some((o, off - o)));
            rest.extend((off + size < o + l).then_some((off + size, o + l - off - size)));
            free.splice(i..=i, rest);
            off
        };
        // Memory for the pages now, so a full /dev/shm is an error here, not SIGBUS later.
        // SAFETY: the descriptor is open for the call; the range lies within the file.
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&self.file),
                (ARENA_OFF + off) as libc::off_t,
                size as libc::off_t,
            )
        };
        if rc != 0 {
            self.release(off, size);
            return None;
        }
        // SAFETY: within the arena.
        let ptr = unsafe { self.mapping.arena().add(off) };
        Some(ArenaBlock { arena: self.clone(), off, size, ptr })
    }

    /// Gives a range back, zeroed for its next user: whole pages are punched out of the file
    /// (their memory returns to the system), the edges are cleared by hand.
    fn release(&self, off: usize, size: usize) {
        let page = 4096;
        let (a, b) = (off.next_multiple_of(page), (off + size) / page * page);
        let base = self.mapping.arena();
        // SAFETY: [off, off+size) lies in the arena and nobody uses it any more.
        unsafe {
            if a < b {
                std::ptr::write_bytes(base.add(off), 0, a - off);
                std::ptr::write_bytes(base.add(b), 0, off + size - b);
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(&self.file),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    (ARENA_OFF + a) as libc::off_t,
                    (b - a) as libc::off_t,
                );
            } else {
                std::ptr::write_bytes(base.add(off), 0, size);
            }
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let i = free.partition_point(|&(o, _)| o < off);
        free.insert(i, (off, size));
        // Coalesce with the neighbours.
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }

    /// The reach file's descriptor, for mapping blocks' pages elsewhere (`crate::pinned`).
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// The arena offset of `ptr..ptr+len`, if it lies in the arena.
    fn offset_of(&self, ptr: *const u8, len: usize) -> Option<usize> {
        let base = self.mapping.arena() as usize;
        let p = ptr as usize;
        (p >= base && p + len <= base + ARENA_LEN).then(|| p - base)
    }

    /// Publishes an MR whose memory is `ptr..ptr+len`; false (and nothing published) when that
    /// memory is not in the arena or its slot holds another MR.
    pub fn publish_mr(
        &self,
        key: u32,
        pd: u32,
        access: u32,
        iova: u64,
        ptr: *const u8,
        len: usize,
    ) -> bool {
        let Some(off) = self.offset_of(ptr, len) else { return false };
        if len == 0 {
            return false;
        }
        let m = &self.mapping;
        let i = mr_slot(key);
        if m.mr(i, M_VALID).load(Ordering::SeqCst) != 0 {
            return false;
        }
        // A slot a peer may still be using under an MR withdrawn before keeps its count.
        self.reap();
        if self.lock_held().iter().any(|h| h.slot == i) {
            return false;
        }
        let seq = m.mr(i, M_SEQ);
        seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        m.mr(i, M_KEY).store(key, Ordering::Relaxed);
        m.mr(i, M_PD).store(pd, Ordering::Relaxed);
        m.mr(i, M_ACCESS).store(access, Ordering::Relaxed);
        m.set_mr64(i, M_IOVA, iova);
        m.set_mr64(i, M_LEN, len as u64);
        m.set_mr64(i, M_OFF, off as u64);
        seq.fetch_add(1, Ordering::Release);
        m.mr(i, M_VALID).store(1, Ordering::SeqCst);
        true
    }

    /// Withdraws the MR `key` (if published): no peer starts using it after this, and those
    /// using it have finished when it returns true. A peer still counted in after
    /// a second (a stopped process, or one that died in the middle of a copy) is never
    /// uncounted by force: it returns false, and the slot and the MR's memory are held back
    /// (neither reused) until the count drops, so a late copy lands in memory nobody uses and
    /// a late uncount finds its own count. `ibv_dereg_mr` returns either way, as rxe's does
    /// once the MR takes no new access.
    pub fn withdraw_mr(&self, key: u32) -> bool {
        let m = &self.mapping;
        let i = mr_slot(key);
        if m.mr(i, M_KEY).load(Ordering::Relaxed) != key
            || m.mr(i, M_VALID).load(Ordering::SeqCst) == 0
        {
            return true;
        }
        m.mr(i, M_VALID).store(0, Ordering::SeqCst);
        let off = m.mr64(i, M_OFF) as usize;
        let seq = m.mr(i, M_SEQ);
        seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        m.mr(i, M_KEY).store(0, Ordering::Relaxed);
        seq.fetch_add(1, Ordering::Release);
        let qps = self.drain_qps();
        if qps.is_empty() {
            return true;
        }
        tracing::warn!(path = %self.path.display(), key,
            "a peer is still inside a deregistered MR (stopped, or died mid-copy): its memory \
             is held back until it leaves");
        self.lock_held().push(Held { slot: i, off, size: None, qps });
        false
    }

    /// Publishes a QP's facts (replacing what its slot said), or clears its slot when
    /// `facts.live` is false. False if the slot holds another live QP.
    pub fn publish_qp(&self, facts: &QpFacts) -> bool {
        let m = &self.mapping;
        let i = facts.qpn as usize % QP_SLOTS;
        let held = m.qp(i, Q_QPN).load(Ordering::Relaxed);
        if held != facts.qpn && m.qp(i, Q_LIVE).load(Ordering::Relaxed) != 0 {
            return false;
        }
        let seq = m.qp(i, Q_SEQ);
        seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        m.qp(i, Q_QPN).store(facts.qpn, Ordering::Relaxed);
        m.qp(i, Q_LIVE).store(u32::from(facts.live), Ordering::Relaxed);
        m.qp(i, Q_ACCESS).store(facts.access, Ordering::Relaxed);
        m.qp(i, Q_PD).store(facts.pd, Ordering::Relaxed);
        m.qp(i, Q_DEST_QPN).store(facts.dest_qpn, Ordering::Relaxed);
        m.qp(i, Q_DEST_IP).store(u32::from_be_bytes(facts.dest_ip), Ordering::Relaxed);
        m.qp(i, Q_RD_ATOMIC).store(facts.max_dest_rd_atomic, Ordering::Relaxed);
        m.qp(i, Q_EPSN).store(facts.epsn, Ordering::Relaxed);
        m.qp(i, Q_MTU).store(facts.mtu, Ordering::Relaxed);
        // Sequentially consistent: a peer that counts itself in after a withdrawing owner
        // looked at `users` reads this (`ReachView::resolve`).
        seq.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Clears the slot of QP `qpn` if it holds that QP, and waits (at most a second)
    /// until no peer is inside an operation on it: no byte lands through it once this returns
    /// (`ibv_modify_qp` to a state that takes no requests, `ibv_destroy_qp`).
    pub fn withdraw_qp(&self, qpn: u32) {
        let i = qpn as usize % QP_SLOTS;
        if self.mapping.qp(i, Q_QPN).load(Ordering::Relaxed) == qpn {
            let facts = QpFacts {
                qpn,
                live: false,
                access: 0,
                pd: 0,
                dest_qpn: 0,
                dest_ip: [0; 4],
                max_dest_rd_atomic: 0,
                epsn: 0,
                mtu: 0,
            };
            self.publish_qp(&facts);
            if !drain(self.mapping.qp(i, Q_USERS)) {
                tracing::warn!(path = %self.path.display(), qpn,
                    "a peer is still inside an operation on a QP taken out of service \
                     (stopped, or died mid-copy)");
            }
        }
    }
}

impl Drop for ReachArena {
    fn drop(&mut self) {
        if !self.owned() {
            return; // A fork child's copy: the file and its memory are the parent's.
        }
        self.mapping.word(H_STATE).store(1, Ordering::SeqCst);
        super::at_exit::forget(&self.path);
        let _ = std::fs::remove_file(&self.path);
        // SAFETY: dropped once, here, in the process that mapped it.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.mapping) };
    }
}

fn mr_slot(key: u32) -> usize {
    const _: () = assert!(MR_SLOTS.is_power_of_two());
    (key >> 8) as usize & (MR_SLOTS - 1)
}

/// Memory of the arena owned by one MR; given back (zeroed) when dropped.
pub struct ArenaBlock {
    arena: std::sync::Arc<ReachArena>,
    off: usize,
    size: usize,
    ptr: *mut u8,
}

// SAFETY: the block's bytes are reached only through raw copies and atomics (MR memory).
unsafe impl Send for ArenaBlock {}
// SAFETY: as above.
unsafe impl Sync for ArenaBlock {}

impl ArenaBlock {
    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The block's offset in the reach file ([`ReachArena::fd`]).
    pub fn file_offset(&self) -> u64 {
        (ARENA_OFF + self.off) as u64
    }
}

impl Drop for ArenaBlock {
    fn drop(&mut self) {
        if self.arena.owned() {
            self.arena.give_back(self.off, self.size);
        }
    }
}

/// A peer's side: another port's reach file, mapped.
pub struct ReachView {
    mapping: Mapping,
    /// Where the owner's keeper word is ([`ReachArena::keep`]; 0 until it is known) and the
    /// thread it names while the owner lives.
    keeper_at: usize,
    keeper_tid: u32,
}

// SAFETY: shared memory reached only through atomics and raw copies.
unsafe impl Send for ReachView {}

impl ReachView {
    /// Maps the reach file of the port with this LID in `dir`; None if it has none (reach
    /// is off there, or it is of another layout, user or size).
    pub fn open(dir: &Path, lid: u16) -> Option<ReachView> {
        let path = reach_path(dir, lid);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file()
            || meta.uid() != os::effective_uid()
            || meta.len() != (ARENA_OFF + ARENA_LEN) as u64
        {
            return None;
        }
        let mapping = map_file(&file, &path).ok()?;
        if mapping.word64(H_MAGIC).load(Ordering::Acquire) != MAGIC
            || mapping.word(H_VERSION).load(Ordering::Relaxed) != VERSION
            || mapping.word64(H_LEN).load(Ordering::Relaxed) != meta.len()
        {
            return None;
        }
        let pid = mapping.word(H_PID).load(Ordering::Relaxed);
        let start = mapping.word64(H_START).load(Ordering::Relaxed);
        if !os::process_alive(pid, start) {
            return None;
        }
        let mut view = ReachView { mapping, keeper_at: 0, keeper_tid: 0 };
        view.find_keeper();
        Some(view)
    }

    /// Reads where the owner's keeper word is, once the owner has published it.
    #[cold]
    fn find_keeper(&mut self) -> bool {
        let at = self.mapping.word(H_KEEPER_AT).load(Ordering::Acquire) as usize;
        let keeper = H_KEEPER..H_KEEPER + KEEPER_LEN;
        if !keeper.contains(&at) || !at.is_multiple_of(4) {
            return false;
        }
        self.keeper_tid = self.mapping.word(H_KEEPER_TID).load(Ordering::Relaxed);
        self.keeper_at = at;
        true
    }

    /// None while the owner runs and lets peers reach; `Some(true)` once it is gone (closed
    /// its port, or died: this file will not come back), `Some(false)` while something
    /// observes its wire or its port is down (or its keeper is not there yet). Three loads, no
    /// system call: the owner's death is seen by the first reach after its keeper thread died,
    /// since the kernel marks the keeper's word before the process's death can be observed
    /// (its exit status, its pidfd).
    #[inline]
    pub fn blocked(&mut self) -> Option<bool> {
        let m = &self.mapping;
        if m.word(H_STATE).load(Ordering::Acquire) != 0 {
            return Some(true);
        }
        if m.word(H_OBSERVED).load(Ordering::Acquire) != 0 {
            return Some(false);
        }
        if self.keeper_at == 0 && !self.find_keeper() {
            return Some(false);
        }
        let keeper = self.mapping.word(self.keeper_at).load(Ordering::Acquire);
        if keeper & FUTEX_TID_MASK != self.keeper_tid {
            return Some(true);
        }
        None
    }

    /// Reads what the responder published for `ask` (its QP's facts, the MR the rkey names)
    /// and hands them to the engine's rules ([`ReachAsk::check`]); when they grant it, the
    /// bytes' address in this mapping and a guard that keeps the MR from being withdrawn until
    /// it drops. This layer decides nothing but that the published MR lies in the arena.
    pub fn resolve(&self, ask: &ReachAsk) -> Option<Reached<'_>> {
        let m = &self.mapping;
        // Counted in on the QP's slot before reading it or the MR's (see `withdraw_qp`,
        // `withdraw_mr`): an owner that withdraws either after this waits for the guard. One
        // locked operation each way per reach.
        let qp_users = m.qp(ask.dest_qpn as usize % QP_SLOTS, Q_USERS);
        qp_users.fetch_add(1, Ordering::SeqCst);
        let i = mr_slot(ask.request.rkey);
        let mut guard = Reached::new(qp_users);
        guard.len = ask.request.len as usize;
        let qp = self.read_qp(ask.dest_qpn)?;
        let mr = self.read_mr(i);
        guard.ptr = match ask.check(&qp, mr.as_ref().map(|(facts, _)| facts))? {
            // Nothing to touch: a pointer valid for no bytes.
            Grant::Nothing => std::ptr::NonNull::dangling().as_ptr(),
            Grant::At(start) => {
                let (facts, off) = mr?;
                if off.checked_add(facts.len)? > ARENA_LEN as u64 {
                    return None;
                }
                // SAFETY: the rules put [start, +len) inside the MR's `facts.len` bytes, which
                // lie inside the arena from `off` (checked just above).
                unsafe { m.arena().add((off + start) as usize) }
            }
        };
        Some(guard)
    }

    /// Counts in QP `qpn`'s slot the packets an operation reached there stood for (seen from
    /// the requester: `t`), for the owner's port counters, and marks that something was
    /// counted. One requester QP is connected to the QP, and it reaches under its own device
    /// lock, so each counter has one writer: a load and a store, no locked instruction.
    pub fn count(&self, qpn: u32, t: &Traffic) {
        let m = &self.mapping;
        let i = qpn as usize % QP_SLOTS;
        let values = [t.sent_packets, t.sent_bytes, t.received_packets, t.received_bytes];
        for (w, v) in values.into_iter().enumerate() {
            let c = m.count(i, w);
            c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        }
        let counted = m.word(H_COUNTED);
        if counted.load(Ordering::Relaxed) == 0 {
            counted.store(1, Ordering::Release);
        }
    }

    /// The MR published in slot `i` and its arena offset, if the slot holds a valid one (read
    /// under its sequence lock; the caller has counted itself in the slot's users first).
    fn read_mr(&self, i: usize) -> Option<(MrRights, u64)> {
        let m = &self.mapping;
        if m.mr(i, M_VALID).load(Ordering::SeqCst) == 0 {
            return None;
        }
        loop_read(m.mr(i, M_SEQ), || {
            let facts = MrRights {
                key: m.mr(i, M_KEY).load(Ordering::Relaxed),
                pd: m.mr(i, M_PD).load(Ordering::Relaxed),
                access: AccessFlags::from_bits_retain(m.mr(i, M_ACCESS).load(Ordering::Relaxed)),
                iova: m.mr64(i, M_IOVA),
                len: m.mr64(i, M_LEN),
            };
            (facts, m.mr64(i, M_OFF))
        })
    }

    fn read_qp(&self, qpn: u32) -> Option<QpFacts> {
        let m = &self.mapping;
        let i = qpn as usize % QP_SLOTS;
        let f = loop_read(m.qp(i, Q_SEQ), || QpFacts {
            qpn: m.qp(i, Q_QPN).load(Ordering::Relaxed),
            live: m.qp(i, Q_LIVE).load(Ordering::Relaxed) != 0,
            access: m.qp(i, Q_ACCESS).load(Ordering::Relaxed),
            pd: m.qp(i, Q_PD).load(Ordering::Relaxed),
            dest_qpn: m.qp(i, Q_DEST_QPN).load(Ordering::Relaxed),
            dest_ip: m.qp(i, Q_DEST_IP).load(Ordering::Relaxed).to_be_bytes(),
            max_dest_rd_atomic: m.qp(i, Q_RD_ATOMIC).load(Ordering::Relaxed),
            epsn: m.qp(i, Q_EPSN).load(Ordering::Relaxed),
            mtu: m.qp(i, Q_MTU).load(Ordering::Relaxed),
        })?;
        (f.qpn == qpn).then_some(f)
    }
}

/// Reads a slot under its sequence lock: a few tries, None if the owner kept writing.
fn loop_read<T>(seq: &AtomicU32, read: impl Fn() -> T) -> Option<T> {
    for _ in 0..8 {
        // Sequentially consistent (a plain load on x86): ordered after the caller's count.
        let s1 = seq.load(Ordering::SeqCst);
        if !s1.is_multiple_of(2) {
            std::hint::spin_loop();
            continue;
        }
        let v = read();
        fence(Ordering::Acquire);
        if seq.load(Ordering::Relaxed) == s1 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests;
