//! Memory regions and the DMA step: the MR table (keys, PDs, access rights, I/O virtual
//! addresses), the gather and scatter copies between MR memory and packets with key, bounds and
//! access checks, and the PD and MR verbs (`ibv_alloc_pd`, `ibv_reg_mr` and their inverses).
//!
//! An MR is named on the wire and in SGEs by its I/O virtual address (iova), as
//! `ibv_reg_mr_iova2` allows: the address a program and its peers use for the MR's first byte,
//! which need not be where its memory is. The host chooses it (the soft backend uses the
//! memory's own address, as `ibv_reg_mr` does; the simulator gives each node's MRs addresses
//! of its own, so the bytes on its wire do not depend on the heap).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use verbs_api::{AccessFlags, Errno, Error, Result, Sge};

use crate::cost::{self, CopyAt};
use crate::small_copy;

use super::Nic;

/// The bytes behind one MR: owned by the MR (allocated zeroed, 64-byte aligned) or borrowed from
/// the caller through `reg_mr_raw`. Reads and writes copy, because the NIC and the program may
/// touch the same bytes concurrently, exactly as with a real NIC's DMA.
pub struct MrMemory {
    ptr: *mut u8,
    /// The bytes the inline copies may touch: `len`, or 0 for on-demand memory, whose every
    /// access then takes the out-of-line path (`crate::odp`) with no test of its own here.
    fast_len: usize,
    len: usize,
    /// On-demand paging (`IBV_ACCESS_ON_DEMAND`): the program's pages, which may be unmapped.
    odp: bool,
    owned: Option<Layout>,
    /// What keeps memory that the host allocated alive (see [`MrMemory::hosted`]).
    _keep: Option<Box<dyn Send + Sync>>,
}

// SAFETY: the memory is only accessed through raw-pointer copies and atomics bounded by `len`;
// like DMA memory it is shared by design, and the pointer stays valid for the life of the value.
unsafe impl Send for MrMemory {}
// SAFETY: as above; no `&`/`&mut` references to the bytes are ever handed out.
unsafe impl Sync for MrMemory {}

impl MrMemory {
    /// `len` zeroed bytes owned by this value.
    pub fn allocate(len: usize) -> Result<Arc<MrMemory>> {
        let size = len.max(1);
        let layout = Layout::from_size_align(size, 64)
            .map_err(|_| Error::inval(format!("ibv_reg_mr: length {len} is too large")))?;
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::nomem(format!("ibv_reg_mr: cannot allocate {len} bytes")));
        }
        Ok(Arc::new(MrMemory {
            ptr,
            fast_len: len,
            len,
            odp: false,
            owned: Some(layout),
            _keep: None,
        }))
    }

    /// `len` zeroed bytes at `ptr` that a host allocated (the soft backend's reach arena),
    /// kept alive by `keep`, which is dropped with this value.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, zeroed, 64-byte aligned memory for as long as `keep` lives.
    pub unsafe fn hosted(ptr: *mut u8, len: usize, keep: Box<dyn Send + Sync>) -> Arc<MrMemory> {
        Arc::new(MrMemory { ptr, fast_len: len, len, odp: false, owned: None, _keep: Some(keep) })
    }

    /// `len` bytes at `ptr` that stay mapped as long as `keep` lives, with no other promise
    /// (a program's registered pages moved onto shared memory, `crate::pinned`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid memory for as long as `keep` lives.
    pub unsafe fn kept(ptr: *mut u8, len: usize, keep: Box<dyn Send + Sync>) -> Arc<MrMemory> {
        Arc::new(MrMemory { ptr, fast_len: len, len, odp: false, owned: None, _keep: Some(keep) })
    }

    /// Borrow caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for as long as the returned value lives.
    pub unsafe fn borrow_raw(ptr: *mut u8, len: usize) -> Arc<MrMemory> {
        Arc::new(MrMemory { ptr, fast_len: len, len, odp: false, owned: None, _keep: None })
    }

    /// The program's `len` bytes at `addr`, registered on demand (`IBV_ACCESS_ON_DEMAND`):
    /// neither pinned nor moved, and never dereferenced. Every access goes through
    /// `crate::odp`, which follows the program's current mapping and answers a page that is
    /// not mapped (or not writable for a write) with an error instead of a fault.
    pub fn on_demand(addr: u64, len: usize) -> Arc<MrMemory> {
        let ptr = addr as *mut u8;
        Arc::new(MrMemory { ptr, fast_len: 0, len, odp: true, owned: None, _keep: None })
    }

    /// Whether this is on-demand memory ([`MrMemory::on_demand`]), which direct reach declines.
    #[inline]
    pub fn is_odp(&self) -> bool {
        self.odp
    }

    /// The process's address of the first byte (an MR's default iova).
    #[inline]
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the inline copies may touch `n` bytes at `offset` (never, for on-demand memory).
    #[inline]
    fn fits(&self, offset: usize, n: usize) -> bool {
        matches!(offset.checked_add(n), Some(end) if end <= self.fast_len)
    }

    #[inline]
    fn check(&self, offset: usize, n: usize) -> Result<()> {
        match self.fits(offset, n) {
            true => Ok(()),
            false => Err(self.outside(offset, n)),
        }
    }

    /// The out-of-line access of on-demand memory (fault-safe), or the bounds error.
    #[cold]
    fn slow(&self, offset: usize, n: usize, op: crate::odp::Op<'_>) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if self.odp && end <= self.len => {
                crate::odp::access(self.ptr as u64 + offset as u64, op)
            }
            _ => Err(self.outside(offset, n)),
        }
    }

    #[cold]
    fn outside(&self, offset: usize, n: usize) -> Error {
        Error::inval(format!(
            "MR access of {n} bytes at offset {offset} is outside the MR of {} bytes",
            self.len
        ))
    }

    /// Copy out.
    #[inline]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        if !self.fits(offset, buf.len()) {
            return self.slow(offset, buf.len(), crate::odp::Op::Read(buf));
        }
        // SAFETY: bounds checked above; the source is valid MR memory and does not overlap `buf`.
        unsafe {
            small_copy::copy_nonoverlapping(self.ptr.add(offset), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Copy in.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.fits(offset, data.len()) {
            return self.slow(offset, data.len(), crate::odp::Op::Write(data));
        }
        // SAFETY: bounds checked above; the destination is valid MR memory and does not overlap `data`.
        unsafe { small_copy::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// [`MrMemory::write`] of a message's bytes as a NIC places them: the last bytes become
    /// visible last (`small_copy::copy_ordered`), so a program polling the last byte of an
    /// RDMA WRITE's target finds every byte before it there.
    pub fn place(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.fits(offset, data.len()) {
            return self.slow(offset, data.len(), crate::odp::Op::Write(data));
        }
        // SAFETY: bounds checked above; the destination is valid MR memory and does not overlap `data`.
        unsafe { small_copy::copy_ordered(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Copy `n` bytes at `offset` out to `dst` (direct reach: into a peer's memory); bytes
    /// outside the MR are not copied.
    ///
    /// # Safety
    /// `dst..dst+n` must be valid for writes and not overlap this MR's bytes.
    #[inline]
    pub unsafe fn copy_to_raw(&self, offset: usize, dst: *mut u8, n: usize) {
        if self.check(offset, n).is_ok() {
            // SAFETY: bounds checked; the caller vouches for `dst`.
            unsafe { small_copy::copy_nonoverlapping(self.ptr.add(offset), dst, n) };
        }
    }

    /// Copy `n` bytes from `src` in at `offset` (direct reach: out of a peer's memory); bytes
    /// outside the MR are not copied.
    ///
    /// # Safety
    /// `src..src+n` must be valid for reads and not overlap this MR's bytes.
    #[inline]
    pub unsafe fn copy_from_raw(&self, offset: usize, src: *const u8, n: usize) {
        if self.check(offset, n).is_ok() {
            // SAFETY: bounds checked; the caller vouches for `src`.
            unsafe { small_copy::copy_nonoverlapping(src, self.ptr.add(offset), n) };
        }
    }

    /// The 8-byte word at `offset` as an atomic; `offset` must be 8-byte aligned in address space.
    fn atomic_at(&self, offset: usize) -> Option<&AtomicU64> {
        self.check(offset, 8).ok()?;
        // SAFETY: in bounds (checked); the address is tested for 8-byte alignment before the cast,
        // and the memory lives as long as `self`.
        unsafe {
            let p = self.ptr.add(offset);
            if !(p as usize).is_multiple_of(8) {
                return None;
            }
            Some(AtomicU64::from_ptr(p as *mut u64))
        }
    }

    /// The word at `offset` of on-demand memory as an atomic, once `crate::odp::probe_word`
    /// (which changes no byte) made its page present and found it writable; None if out of
    /// bounds, misaligned or not mapped so.
    #[cold]
    fn odp_atomic_at(&self, offset: usize) -> Option<&AtomicU64> {
        let end = offset.checked_add(8)?;
        let p = self.ptr.wrapping_add(offset);
        if !self.odp || end > self.len || !(p as usize).is_multiple_of(8) {
            return None;
        }
        crate::odp::probe_word(p as u64).ok()?;
        // SAFETY: the probe found the aligned word mapped and writable just now. The program
        // may unmap it in between (a race rxe closes with its MMU notifier and this NIC does
        // not: docs/decisions.md, "On-demand paging").
        Some(unsafe { AtomicU64::from_ptr(p as *mut u64) })
    }

    /// Atomic compare-and-swap of the 8-byte word at `offset`; returns the original value.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Option<u64> {
        let a = match self.atomic_at(offset) {
            Some(a) => a,
            None => self.odp_atomic_at(offset)?,
        };
        Some(match a.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }

    /// Atomic fetch-and-add of the 8-byte word at `offset`; returns the original value.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Option<u64> {
        let a = match self.atomic_at(offset) {
            Some(a) => a,
            None => self.odp_atomic_at(offset)?,
        };
        Some(a.fetch_add(add, Ordering::AcqRel))
    }

    /// An ATOMIC WRITE: `bytes` stored at `offset` in one 8-byte store, after every earlier
    /// write to memory (release ordering, as rxe's `smp_store_release`); None when the word is
    /// outside the MR or not 8-byte aligned.
    pub fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Option<()> {
        let a = match self.atomic_at(offset) {
            Some(a) => a,
            None => self.odp_atomic_at(offset)?,
        };
        a.store(u64::from_ne_bytes(bytes), Ordering::Release);
        Some(())
    }
}

impl Drop for MrMemory {
    fn drop(&mut self) {
        if let Some(layout) = self.owned {
            // SAFETY: allocated in `allocate` with this layout and not freed before.
            unsafe { dealloc(self.ptr, layout) };
        }
    }
}

/// A protection domain's id.
pub type PdId = u32;

/// One registered MR.
#[derive(Clone)]
pub struct Mr {
    /// The PD it belongs to.
    pub pd: PdId,
    /// Its memory.
    pub memory: Arc<MrMemory>,
    /// Access rights.
    pub access: AccessFlags,
    /// `lkey` (equal to `rkey`, as rxe does).
    pub key: u32,
    /// The I/O virtual address of its first byte: SGEs, RETHs and AtomicETHs name bytes of
    /// the MR by addresses from here.
    pub iova: u64,
}

impl Mr {
    /// The offset of `[va, va+len)` inside this MR, or `None` if it is not wholly inside.
    #[inline]
    pub fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let start = va.checked_sub(self.iova)?;
        let end = start.checked_add(len)?;
        (end <= self.memory.len() as u64).then_some(start as usize)
    }
}

/// Why a DMA step failed; each maps to one work-completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaError {
    /// The key names no MR (never registered, or deregistered since).
    BadKey,
    /// The MR belongs to another PD.
    WrongPd,
    /// The range is outside the MR.
    Bounds,
    /// The MR lacks the access right the operation needs.
    Access,
    /// A receive buffer is too small for the message.
    Length,
}

/// The highest MR index a key can carry: the index is the key's upper 24 bits, and index 0 is
/// never used (as rxe's MR pool starts at index 1), so no key is below `0x100`. The upper
/// half of the index space is the memory windows' (`mw::is_mw_key`), as in rxe.
const MAX_MR_INDEX: u32 = 0x007F_FFFF;
/// Slots of a new table; it doubles when full (up to the device's `max_mr`).
const FIRST_SLOTS: usize = 16;

/// The MR table of one device. A key is made as rxe makes it: `index << 8 | key byte`, where
/// the index comes from a cyclic counter that starts at a random point of the 24-bit space
/// (rxe's pool is one per device, shared by every process, so a program's MRs have indices
/// that differ from any other program's), and the key byte is random for each registration
/// (rxe's `rxe_get_next_key`). `lkey` and `rkey` are the same key, as in rxe. The randomness
/// is drawn from [`NicConfig::entropy`](super::NicConfig::entropy), so that the simulator's
/// keys come from its seed.
///
/// The MR a key names is in slot `index & mask`: lookups are one index and one compare. As in
/// rxe, an index is not given again until the counter comes round (the next registration takes
/// the next free index), so a key of a deregistered MR never names a later MR.
pub struct MrTable {
    slots: Vec<Option<Mr>>,
    count: usize,
    /// How many of them are on-demand ([`MrMemory::is_odp`]): while none are, direct reach
    /// need not look for one among a WR's SGEs.
    odp: usize,
    /// The index the next registration tries first.
    next_index: u32,
    /// The key-byte stream: its seed and how many bytes were drawn.
    key_seed: u64,
    drawn: u64,
}

impl Default for MrTable {
    /// A table whose randomness is all zero bits (for unit tests).
    fn default() -> MrTable {
        MrTable::new(0)
    }
}

impl MrTable {
    /// An empty table whose indices and key bytes are drawn from `entropy`.
    pub fn new(entropy: u64) -> MrTable {
        // A stream of its own: the NIC's first QP number comes from the same word.
        let key_seed = super::splitmix64(entropy ^ 0x4D52_5F4B_4559_5321);
        MrTable {
            slots: (0..FIRST_SLOTS).map(|_| None).collect(),
            count: 0,
            odp: 0,
            next_index: 1 + (key_seed % u64::from(MAX_MR_INDEX)) as u32,
            key_seed,
            drawn: 0,
        }
    }

    #[inline]
    fn slot_of(&self, key: u32) -> usize {
        (key >> 8) as usize & (self.slots.len() - 1)
    }

    /// A random key byte (`rxe_get_next_key`).
    fn key_byte(&mut self) -> u32 {
        self.drawn += 1;
        (super::splitmix64(self.key_seed.wrapping_add(self.drawn)) & 0xff) as u32
    }

    /// Doubles the slots, each MR going to the slot its index names in the larger table
    /// (indices distinct modulo the old size are distinct modulo the new one).
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots = (0..old.len() * 2).map(|_| None).collect();
        for mr in old.into_iter().flatten() {
            let i = self.slot_of(mr.key);
            self.slots[i] = Some(mr);
        }
    }

    /// Register `memory`, named from `iova`; returns the key.
    pub fn insert(
        &mut self,
        pd: PdId,
        memory: Arc<MrMemory>,
        iova: u64,
        access: AccessFlags,
    ) -> u32 {
        if self.count == self.slots.len() {
            self.grow();
        }
        // A free slot is within one lap of the table (it is not full).
        let mut index = self.next_index;
        while self.slots[index as usize & (self.slots.len() - 1)].is_some() {
            index = next_mr_index(index);
        }
        self.next_index = next_mr_index(index);
        let key = index << 8 | self.key_byte();
        let i = self.slot_of(key);
        self.odp += usize::from(memory.is_odp());
        self.slots[i] = Some(Mr { pd, memory, access, key, iova });
        self.count += 1;
        key
    }

    /// The MR this key names.
    #[inline]
    pub fn get(&self, key: u32) -> Option<&Mr> {
        self.slots[self.slot_of(key)].as_ref().filter(|mr| mr.key == key)
    }

    /// Deregister; `None` if the key names no MR.
    pub fn remove(&mut self, key: u32) -> Option<Mr> {
        let i = self.slot_of(key);
        let slot = &mut self.slots[i];
        if slot.as_ref()?.key != key {
            return None;
        }
        self.count -= 1;
        let mr = slot.take();
        self.odp -= usize::from(mr.as_ref().is_some_and(|mr| mr.memory.is_odp()));
        mr
    }

    /// Whether one of `sges` names an on-demand MR (which direct reach declines: its pages
    /// are reached only through the fault-safe copies of `crate::odp`).
    #[inline]
    pub fn any_odp(&self, sges: &[Sge]) -> bool {
        self.odp != 0 && sges.iter().any(|s| self.get(s.lkey).is_some_and(|mr| mr.memory.is_odp()))
    }

    /// Registered MRs.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether none are registered.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether any MR belongs to `pd`.
    pub fn any_in_pd(&self, pd: PdId) -> bool {
        self.slots.iter().flatten().any(|mr| mr.pd == pd)
    }

    /// Resolve a local SGE: its MR and the offset of its first byte.
    #[inline]
    pub fn resolve_local(
        &self,
        pd: PdId,
        sge: &Sge,
        need: AccessFlags,
    ) -> std::result::Result<(&Mr, usize), DmaError> {
        let mr = self.get(sge.lkey).ok_or(DmaError::BadKey)?;
        if mr.pd != pd {
            return Err(DmaError::WrongPd);
        }
        let off = mr.offset_of(sge.addr, sge.length as u64).ok_or(DmaError::Bounds)?;
        if !mr.access.contains(need) {
            return Err(DmaError::Access);
        }
        Ok((mr, off))
    }

    /// Gather `out.len()` bytes starting `msg_off` bytes into the message described by `sges`.
    pub fn gather(
        &self,
        pd: PdId,
        sges: &[Sge],
        mut msg_off: usize,
        out: &mut [u8],
    ) -> std::result::Result<(), DmaError> {
        let mut done = 0;
        for sge in sges {
            if done == out.len() {
                break;
            }
            let len = sge.length as usize;
            if msg_off >= len {
                msg_off -= len;
                continue;
            }
            let (mr, base) = self.resolve_local(pd, sge, AccessFlags::empty())?;
            let n = (len - msg_off).min(out.len() - done);
            mr.memory
                .read(base + msg_off, &mut out[done..done + n])
                .map_err(|_| DmaError::Bounds)?;
            cost::copied(CopyAt::Gather, n);
            done += n;
            msg_off = 0;
        }
        if done == out.len() {
            Ok(())
        } else {
            Err(DmaError::Length)
        }
    }

    /// Scatter `data` at `msg_off` bytes into the buffer described by `sges` (needs LOCAL_WRITE).
    pub fn scatter(
        &self,
        pd: PdId,
        sges: &[Sge],
        mut msg_off: usize,
        data: &[u8],
    ) -> std::result::Result<(), DmaError> {
        let mut done = 0;
        for sge in sges {
            if done == data.len() {
                break;
            }
            let len = sge.length as usize;
            if msg_off >= len {
                msg_off -= len;
                continue;
            }
            let (mr, base) = self.resolve_local(pd, sge, AccessFlags::LOCAL_WRITE)?;
            let n = (len - msg_off).min(data.len() - done);
            mr.memory.write(base + msg_off, &data[done..done + n]).map_err(|_| DmaError::Bounds)?;
            cost::copied(CopyAt::Scatter, n);
            done += n;
            msg_off = 0;
        }
        if done == data.len() {
            Ok(())
        } else {
            Err(DmaError::Length)
        }
    }
}

/// The index after `index`, cyclic in `1..=MAX_MR_INDEX`.
fn next_mr_index(index: u32) -> u32 {
    if index >= MAX_MR_INDEX {
        1
    } else {
        index + 1
    }
}

impl Nic {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> Result<PdId> {
        if self.hca.pds.len() >= self.hca.cfg.limits.max_pd as usize {
            return Err(Error::nomem(format!(
                "ibv_alloc_pd: the device's max_pd {} is reached",
                self.hca.cfg.limits.max_pd
            )));
        }
        let id = self.hca.next_pd;
        self.hca.next_pd += 1;
        self.hca.pds.insert(id, 0);
        Ok(id)
    }

    /// `ibv_dealloc_pd`.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_dealloc_pd: PD {pd} does not exist")));
        }
        let qps = self.qps.values().filter(|q| q.pd == pd).count();
        let srqs = self.hca.srqs.values().filter(|s| s.pd == pd).count();
        if self.hca.mrs.any_in_pd(pd) || self.hca.mws.any_in_pd(pd) || qps > 0 || srqs > 0 {
            return Err(Error::busy(format!(
                "ibv_dealloc_pd: PD {pd} still has MRs, MWs, QPs or SRQs ({qps} QPs, {srqs} SRQs)"
            )));
        }
        self.hca.pds.remove(&pd);
        Ok(())
    }

    /// `ibv_reg_mr_iova2`: register `memory`, whose first byte SGEs and peers name `iova`
    /// (`ibv_reg_mr` is this with `iova = memory.addr()`); returns the key (lkey = rkey).
    ///
    /// Linux requires `iova` and the memory's address to share their offset within a page; the
    /// engine requires what its atomics need: the same offset within 8 bytes, so that an
    /// 8-byte-aligned iova is an 8-byte-aligned word of memory.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        memory: Arc<MrMemory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<u32> {
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_reg_mr: PD {pd} does not exist")));
        }
        if memory.is_empty() {
            // ib_umem_get pins no pages for it, and refuses.
            return Err(Error::inval("ibv_reg_mr: length 0"));
        }
        let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(Error::inval(
                "ibv_reg_mr: IBV_ACCESS_REMOTE_WRITE and IBV_ACCESS_REMOTE_ATOMIC require IBV_ACCESS_LOCAL_WRITE",
            ));
        }
        if memory.len() as u64 > self.hca.cfg.limits.max_mr_size {
            return Err(Error::inval(format!(
                "ibv_reg_mr: length {} exceeds max_mr_size {}",
                memory.len(),
                self.hca.cfg.limits.max_mr_size
            )));
        }
        if iova.checked_add(memory.len() as u64).is_none() {
            return Err(Error::inval(format!(
                "ibv_reg_mr: iova {iova:#x} + length {} passes the end of the address space",
                memory.len()
            )));
        }
        if !(iova ^ memory.addr()).is_multiple_of(8) {
            return Err(Error::inval(format!(
                "ibv_reg_mr: iova {iova:#x} and the memory at {:#x} differ in their offset within 8 bytes",
                memory.addr()
            )));
        }
        if self.hca.mrs.len() >= self.hca.cfg.limits.max_mr as usize {
            return Err(Error::nomem(format!(
                "ibv_reg_mr: the device's max_mr {} is reached",
                self.hca.cfg.limits.max_mr
            )));
        }
        Ok(self.hca.mrs.insert(pd, memory, iova, access))
    }

    /// The program ranges `ibv_advise_mr` prefetches, as rxe's `rxe_ib_advise_mr_prefetch`
    /// finds them: each SGE must name an MR of `pd` with `IBV_ACCESS_LOCAL_WRITE` (`EINVAL`;
    /// rxe looks it up for local writing, so every such MR is writable). A synchronous call
    /// (`sync`) also wants it on demand (`EINVAL`: a pinned MR has nothing to page in) and
    /// holding the range (`EFAULT`, as `ib_umem_odp` refuses); an asynchronous one is
    /// best effort past the look-up, and leaves out what it cannot prefetch.
    pub fn odp_ranges(&self, pd: PdId, sync: bool, sges: &[Sge]) -> Result<Vec<(u64, u64)>> {
        let bad = |errno, why: String| Err(Error::new(errno, format!("ibv_advise_mr: {why}")));
        let mut out = Vec::with_capacity(sges.len());
        for s in sges {
            let mr = match self.hca.mrs.get(s.lkey) {
                Some(mr) if mr.pd == pd && mr.access.contains(AccessFlags::LOCAL_WRITE) => mr,
                _ => {
                    let why = format!("no local-write MR of the PD has lkey {:#x}", s.lkey);
                    return bad(Errno::Inval, why);
                }
            };
            let at = mr.offset_of(s.addr, u64::from(s.length));
            match (mr.memory.is_odp(), at) {
                (true, Some(off)) => out.push((mr.memory.addr() + off as u64, u64::from(s.length))),
                _ if !sync => {}
                (false, _) => {
                    return bad(Errno::Inval, format!("MR {:#x} is not on demand", s.lkey))
                }
                (true, None) => {
                    let why =
                        format!("{} bytes at {:#x} are outside MR {:#x}", s.length, s.addr, s.lkey);
                    return bad(Errno::Fault, why);
                }
            }
        }
        Ok(out)
    }

    /// The check of [`Nic::dereg_mr`] a host makes before it lets go of the MR's memory: no
    /// memory window is bound to the MR `key` names (rxe's `mr->num_mw`), else `EINVAL`.
    pub fn check_no_windows(&self, key: u32) -> Result<()> {
        let bound = self.hca.mws.bound_to(key);
        if bound > 0 && self.hca.mrs.get(key).is_some() {
            return Err(Error::inval(format!(
                "ibv_dereg_mr: {bound} memory window(s) are bound to the MR with key {key:#x}"
            )));
        }
        Ok(())
    }

    /// `ibv_dereg_mr`: `EINVAL` while memory windows are bound to the MR (rxe, after IBA
    /// 10.6.7.2.6).
    pub fn dereg_mr(&mut self, key: u32) -> Result<()> {
        self.check_no_windows(key)?;
        self.hca
            .mrs
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| Error::inval(format!("ibv_dereg_mr: no MR with key {key:#x}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::splitmix64;

    #[test]
    fn keys_of_deregistered_mrs_stay_dead() {
        let mut t = MrTable::new(7);
        let m = MrMemory::allocate(64).unwrap();
        let k1 = t.insert(1, m.clone(), m.addr(), AccessFlags::LOCAL_WRITE);
        assert!(t.get(k1).is_some());
        t.remove(k1).unwrap();
        // Round and round the table: no later MR answers to the first key.
        for _ in 0..3 * FIRST_SLOTS {
            let k2 = t.insert(1, m.clone(), m.addr(), AccessFlags::LOCAL_WRITE);
            assert_ne!(k1 >> 8, k2 >> 8, "an index is not given again within a lap");
            assert!(t.get(k1).is_none());
            assert!(t.remove(k1).is_none());
            t.remove(k2).unwrap();
        }
    }

    #[test]
    fn keys_are_made_as_rxe_makes_them() {
        let m = MrMemory::allocate(64).unwrap();
        let first_keys = |entropy: u64, n: usize| -> Vec<u32> {
            let mut t = MrTable::new(entropy);
            (0..n).map(|_| t.insert(1, m.clone(), m.addr(), AccessFlags::LOCAL_WRITE)).collect()
        };
        // Reproducible from the entropy (the simulator's seed).
        assert_eq!(first_keys(42, 40), first_keys(42, 40));
        // Consecutive indices from a random start, a random key byte each, never index 0.
        let keys = first_keys(42, 40);
        for w in keys.windows(2) {
            assert_eq!(next_mr_index(w[0] >> 8), w[1] >> 8, "{:#x} then {:#x}", w[0], w[1]);
        }
        assert!(keys.iter().all(|&k| k >> 8 != 0));
        let bytes: std::collections::BTreeSet<u32> = keys.iter().map(|k| k & 0xff).collect();
        assert!(bytes.len() > 20, "the key byte varies: {keys:x?}");
        // Two devices' (two processes') first MRs do not share a key, nor an index.
        let firsts: std::collections::BTreeSet<u32> =
            (0..64u64).map(|e| first_keys(splitmix64(e), 1)[0]).collect();
        assert_eq!(firsts.len(), 64, "{firsts:x?}");
        let indices: std::collections::BTreeSet<u32> = firsts.iter().map(|k| k >> 8).collect();
        assert_eq!(indices.len(), 64);
    }

    #[test]
    fn the_table_grows_and_wraps_the_index_space() {
        let m = MrMemory::allocate(64).unwrap();
        // A table whose counter is two short of the last index.
        let mut t = MrTable { next_index: MAX_MR_INDEX - 2, ..MrTable::new(3) };
        let keys: Vec<u32> = (0..100)
            .map(|i| t.insert(1, m.clone(), 0x1000 * i, AccessFlags::LOCAL_WRITE))
            .collect();
        assert!(keys.iter().any(|&k| k >> 8 == 1), "wrapped to index 1: {keys:x?}");
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k).map(|mr| mr.iova), Some(0x1000 * i as u64), "key {k:#x}");
        }
        assert_eq!(t.len(), 100);
    }

    #[test]
    fn gather_and_scatter_cross_sges() {
        let mut t = MrTable::default();
        let a = MrMemory::allocate(8).unwrap();
        let b = MrMemory::allocate(8).unwrap();
        let ka = t.insert(1, a.clone(), 0x1000, AccessFlags::LOCAL_WRITE);
        let kb = t.insert(1, b.clone(), 0x2000, AccessFlags::LOCAL_WRITE);
        let sges = [
            Sge { addr: 0x1000 + 4, length: 4, lkey: ka },
            Sge { addr: 0x2000, length: 8, lkey: kb },
        ];
        t.scatter(1, &sges, 2, b"xyzw").unwrap();
        let mut out = [0u8; 4];
        a.read(4, &mut out).unwrap();
        assert_eq!(&out, b"\0\0xy");
        b.read(0, &mut out).unwrap();
        assert_eq!(&out, b"zw\0\0");
        let mut g = [0u8; 4];
        t.gather(1, &sges, 2, &mut g).unwrap();
        assert_eq!(&g, b"xyzw");
        assert_eq!(t.scatter(1, &sges, 10, b"abc"), Err(DmaError::Length));
        assert_eq!(t.scatter(2, &sges, 0, b"a"), Err(DmaError::WrongPd));
        let ro = t.insert(1, MrMemory::allocate(8).unwrap(), 0x3000, AccessFlags::empty());
        let ro_sge = [Sge { addr: 0x3000, length: 8, lkey: ro }];
        assert_eq!(t.scatter(1, &ro_sge, 0, b"a"), Err(DmaError::Access));
    }

    #[test]
    fn an_mr_is_named_by_its_iova_and_an_impossible_iova_is_refused() {
        let mut nic = Nic::new(crate::engine::NicConfig::new("n", 1));
        let pd = nic.alloc_pd().unwrap();
        let m = MrMemory::allocate(64).unwrap();
        let key = nic.reg_mr(pd, m.clone(), 0x5000, AccessFlags::LOCAL_WRITE).unwrap();
        let mr = nic.hca.mrs.get(key).unwrap();
        assert_eq!(mr.offset_of(0x5008, 8), Some(8), "addresses count from the iova");
        assert_eq!(mr.offset_of(m.addr(), 8), None, "the memory's own address names nothing");
        let e = nic.reg_mr(pd, m.clone(), u64::MAX - 8, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert_eq!(e.errno, verbs_api::Errno::Inval);
        assert!(e.to_string().contains("0xfffffffffffffff7"), "{e}");
        let e = nic.reg_mr(pd, m, 0x5004, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert!(e.to_string().contains("within 8 bytes"), "{e}");
    }

    #[test]
    fn atomics_need_alignment_and_bounds() {
        let m = MrMemory::allocate(16).unwrap();
        m.write(8, &5u64.to_ne_bytes()).unwrap();
        assert_eq!(m.fetch_add(8, 3), Some(5));
        assert_eq!(m.compare_swap(8, 8, 100), Some(8));
        assert_eq!(m.compare_swap(8, 8, 1), Some(100), "a failed CAS returns the current value");
        assert_eq!(m.fetch_add(4, 1), None, "misaligned");
        assert_eq!(m.fetch_add(16, 1), None, "out of bounds");
    }
}
