//! One mapped segment file: the only place that turns offsets of the layout into references.
//!
//! Every shared word is reached as an atomic through [`Segment`]'s accessors, which check
//! bounds and alignment once (at map time) so callers cannot build an out-of-range reference.
//! Payload bytes are reached only through the two `unsafe fn`s at the bottom, whose callers
//! must own the slot under the ring protocol.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::layout::{
    self, Geometry, Header, CACHE_LINE, HEADER_READ_LEN, OFF_DOORBELL, OFF_HEAD, OFF_PARKED,
    OFF_STATE, OFF_TAIL, SLOT_OFF_LEN, SLOT_OFF_PAYLOAD, SLOT_OFF_SEQ, SLOT_OFF_WRITER,
};
use super::WireError;

/// A `MAP_SHARED` mapping of a whole segment file whose geometry has been checked.
pub struct Segment {
    map: MmapRaw,
    path: PathBuf,
    geometry: Geometry,
    /// `slots - 1`: a ring position masked with it is a slot index.
    slot_mask: u64,
}

impl Segment {
    /// Maps `file` (of `file_len` bytes, at least the header) and checks its header; returns
    /// the mapping and the header it holds. Errors name `path`.
    pub fn open(file: &File, path: &Path, file_len: u64) -> Result<(Segment, Header), WireError> {
        let len = usize::try_from(file_len).map_err(|_| {
            WireError::bad_segment(path, format!("size {file_len} is too large to map"))
        })?;
        if len < layout::HEADER_SIZE {
            return Err(WireError::bad_segment(path, layout::truncated(file_len)));
        }
        let map = MmapOptions::new().len(len).map_raw(file).map_err(|e| WireError::io(path, e))?;
        let bytes = read_header(&map, file, path)?;
        let header =
            Header::parse(&bytes, file_len).map_err(|w| WireError::bad_segment(path, w))?;
        let geometry = header.check(file_len).map_err(|w| WireError::bad_segment(path, w))?;
        Ok((Segment::new(map, path, geometry), header))
    }

    /// Maps a freshly created file of exactly `geometry.total_size()` bytes, writes `header`
    /// and the initial slot sequence numbers, and only then marks the segment ready.
    pub fn init(file: &File, path: &Path, header: &Header) -> Result<Segment, WireError> {
        let geometry = Geometry::new(header.slots, header.slot_size)
            .map_err(|w| WireError::bad_segment(path, w))?;
        let len = usize::try_from(geometry.total_size())
            .map_err(|_| WireError::BadConfig("segment too large for this platform".into()))?;
        let map = MmapOptions::new().len(len).map_raw(file).map_err(|e| WireError::io(path, e))?;
        let seg = Segment::new(map, path, geometry);
        let bytes = header.encode();
        // SAFETY: the mapping is at least HEADER_SIZE > OFF_STATE bytes long, and nobody else
        // uses the identity line before `state` says ready (openers refuse the segment).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), seg.map.as_mut_ptr(), OFF_STATE);
        }
        for index in 0..u64::from(geometry.slots) {
            let slot = seg.slot(index);
            slot.seq.store(index as u32, Ordering::Relaxed);
            slot.len.store(0, Ordering::Relaxed);
            slot.writer.store(0, Ordering::Relaxed);
        }
        seg.tail().store(0, Ordering::Relaxed);
        seg.head().store(0, Ordering::Relaxed);
        seg.doorbell().store(0, Ordering::Relaxed);
        seg.parked().store(0, Ordering::Relaxed);
        seg.state().store(layout::STATE_READY, Ordering::Release);
        Ok(seg)
    }

    fn new(map: MmapRaw, path: &Path, geometry: Geometry) -> Segment {
        assert!(
            map.as_ptr() as usize & (CACHE_LINE - 1) == 0,
            "mmap returns page-aligned addresses"
        );
        assert!(
            map.len() as u64 >= geometry.total_size(),
            "a segment is mapped only after its length was checked against its geometry"
        );
        Segment {
            map,
            path: path.to_path_buf(),
            geometry,
            slot_mask: u64::from(geometry.slots) - 1,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    // The word accessors run several times per packet, so their bounds are not checked again
    // in release builds: every offset passed to them is a layout constant inside the header or
    // a slot bookkeeping word of a slot index below `slots`, and `new` checked that the mapping
    // holds the whole geometry.
    fn word64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off & 7 == 0 && off + 8 <= self.map.len(), "u64 word {off} in bounds");
        // SAFETY: in bounds (see above) and 8-byte aligned (a multiple of 8 from a page-aligned
        // base); the mapping lives as long as `self`, and every process touches this word only
        // atomically.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off & 3 == 0 && off + 4 <= self.map.len(), "u32 word {off} in bounds");
        // SAFETY: in bounds (see above) and 4-byte aligned (a multiple of 4 from a page-aligned
        // base); the mapping lives as long as `self`, and every process touches this word only
        // atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    pub fn state(&self) -> &AtomicU32 {
        self.word32(OFF_STATE)
    }

    pub fn tail(&self) -> &AtomicU64 {
        self.word64(OFF_TAIL)
    }

    pub fn head(&self) -> &AtomicU64 {
        self.word64(OFF_HEAD)
    }

    pub fn doorbell(&self) -> &AtomicU32 {
        self.word32(OFF_DOORBELL)
    }

    pub fn parked(&self) -> &AtomicU32 {
        self.word32(OFF_PARKED)
    }

    /// Word `i` of the counters block; None past [`layout::COUNTER_WORDS`].
    pub fn counter(&self, i: usize) -> Option<&AtomicU64> {
        (i < layout::COUNTER_WORDS).then(|| self.word64(layout::OFF_COUNTERS + 8 * i))
    }

    /// How many counter words the owner fills.
    pub fn counter_count(&self) -> &AtomicU32 {
        self.word32(layout::OFF_COUNTER_COUNT)
    }

    /// Word `i` (of `LABEL_LEN / 8`) of the owner's device name.
    pub fn label_word(&self, i: usize) -> &AtomicU64 {
        assert!(i < layout::LABEL_LEN / 8, "label word {i} in the label");
        self.word64(layout::OFF_LABEL + 8 * i)
    }

    /// The bookkeeping words of the slot that ring position `pos` maps to.
    pub fn slot(&self, pos: u64) -> SlotWords<'_> {
        // Below `slots` after the mask, so the slot lies inside the checked geometry.
        let off = self.geometry.slot_offset(pos & self.slot_mask);
        SlotWords {
            seq: self.word32(off + SLOT_OFF_SEQ),
            len: self.word32(off + SLOT_OFF_LEN),
            writer: self.word32(off + SLOT_OFF_WRITER),
            payload_off: off + SLOT_OFF_PAYLOAD,
        }
    }

    /// The first `len` payload bytes of `slot`, to write in place.
    ///
    /// # Safety
    /// The caller must have claimed the slot (won the tail CAS for its position) and not
    /// published it, so no other process reads or writes this payload while the slice lives,
    /// and must hold no other reference into it.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn payload_mut(&self, slot: &SlotWords<'_>, len: usize) -> &mut [u8] {
        assert!(len <= self.geometry.slot_size as usize, "payload length within its slot");
        // SAFETY: the range lies inside the mapping, which outlives the returned borrow of
        // `self`; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(slot.payload_off), len) }
    }

    /// The first `len` payload bytes of `slot`.
    ///
    /// # Safety
    /// The caller must be the consumer holding a published slot (its sequence number says full
    /// and it has not been released), so no process writes the payload while the slice lives.
    pub unsafe fn payload(&self, slot: &SlotWords<'_>, len: usize) -> &[u8] {
        assert!(len <= self.geometry.slot_size as usize, "payload length within its slot");
        // SAFETY: the range lies inside the mapping, which outlives the returned borrow of
        // `self`; the caller guarantees nobody writes it meanwhile.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(slot.payload_off), len) }
    }
}

/// The shared words at the start of one slot.
pub struct SlotWords<'a> {
    pub seq: &'a AtomicU32,
    pub len: &'a AtomicU32,
    pub writer: &'a AtomicU32,
    payload_off: usize,
}

/// Reads the header of a mapped file: the `state` word first, from the mapping (Acquire,
/// pairing with the creator's Release), then the identity line with `pread`, so a ready
/// state guarantees a fully written identity and no byte is read while someone writes it.
fn read_header(
    map: &MmapRaw,
    file: &File,
    path: &Path,
) -> Result<[u8; HEADER_READ_LEN], WireError> {
    assert!(map.len() >= layout::HEADER_SIZE, "caller checked the length");
    // SAFETY: OFF_STATE is in bounds and 4-byte aligned in a page-aligned mapping that
    // outlives this function; the word is only ever accessed atomically.
    let state = unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(OFF_STATE).cast()) }
        .load(Ordering::Acquire);
    let mut bytes = [0u8; HEADER_READ_LEN];
    file.read_exact_at(&mut bytes[..OFF_STATE], 0).map_err(|e| WireError::io(path, e))?;
    bytes[OFF_STATE..OFF_STATE + 4].copy_from_slice(&state.to_ne_bytes());
    Ok(bytes)
}
