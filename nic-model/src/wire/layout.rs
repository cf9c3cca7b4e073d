//! The byte layout of an inbox segment, and the checks that a mapped file really is one.
//!
//! A segment is one file, mapped `MAP_SHARED` by its owner and by every sender. It holds no
//! pointers, only offsets and indices, so every process sees the same thing at its own address.
//! All fields are in native byte order: segments never leave the machine.
//!
//! ```text
//! offset  size  field
//! ------  ----  ------------------------------------------------ line 0: identity, never changes
//!      0     8  magic            b"SVWIRE\0\x01"
//!      8     4  version          layout version, LAYOUT_VERSION (4)
//!     12     4  header_size      bytes before slot 0, HEADER_SIZE (896)
//!     16     4  slots            slot count, a power of two in 2..=65536
//!     20     4  slot_size        payload bytes per slot, a multiple of 64 in 64..=65536
//!     24     8  total_size       header_size + slots * (SLOT_HEADER_SIZE + slot_size) = file length
//!     32     4  owner_pid        pid of the process that created the inbox
//!     36     2  lid              the port's LID (also in the file name)
//!     38     2  reserved         zero
//!     40     8  owner_start      owner's start time (Linux /proc/<pid>/stat field 22), 0 if unknown
//!     48    16  gid              the port's GID
//! ------  ----  ------------------------------------------------ line 1: lifecycle
//!     64     4  state            0 initialising, 1 ready (stored last, Release), 2 closed,
//!                                3 broken (its owner found the ring corrupted)
//! ------  ----  ------------------------------------------------ lines 2..5: one word per line
//!    128     8  tail             producers' claim index (CAS by any sender)
//!    192     8  head             consumer's index (written only by the owner)
//!    256     4  doorbell         futex word; bumped by whoever wakes a parked owner
//!    320     4  parked           1 while the owner is (about to be) asleep on the doorbell
//! ------  ----  ------------------------------------------------ lines 6..13: the port's counters
//!    384    32  label            the owning device's name, UTF-8, zero-padded (4 words)
//!    416     4  counter_count    how many counter words the owner publishes
//!    448   448  counters         COUNTER_WORDS u64 words, written only by the owner
//! ------  ----  ------------------------------------------------ slots, each 64 + slot_size bytes
//!    896        slot i at HEADER_SIZE + i * (64 + slot_size), line-aligned:
//!                 +0  4  seq         Vyukov sequence mod 2^32: i + k*slots free, + 1 full
//!                 +4  4  len         payload length in bytes; bit 31 (LEN_ICRC_UNSET) set if
//!                                    the sender left the packet's ICRC unset
//!                 +8  4  writer_pid  pid of the sender that claimed the slot, 0 when free
//!                +12     payload     slot_size bytes (the rest of the slot is padding)
//! ```
//!
//! The payload starts in the same cache line as the slot's sequence number: a consumer that
//! sees a packet published has its first 52 bytes already (an ACK is 48, a SEND of 8 bytes
//! 52), instead of waiting for a second line to come over from the sender's core. Layout 1
//! put the payload on the next line (docs/decisions.md, "Wire layout 2").
//!
//! The counters block is the owner's port counters for `softverbs counters` in another
//! process: the owner's NIC thread stores them with relaxed atomic stores once per batch of
//! progress rounds, readers load them the same way (each word whole, the set not a snapshot).
//! Which word means what is the soft backend's business (`soft::counters`); the wire only
//! carries them. Layout 2 had no counters block (docs/decisions.md, "Port counters in the
//! inbox header").
//!
//! The length word's top bit is the sender's word to the receiver that the RoCE datagram in
//! the slot ends with four zero bytes where its ICRC goes: nothing observed the sender's side,
//! and the receiver sets the ICRC if something observes its own side, or skips the check
//! (docs/architecture.md, "The ICRC where nobody looks"). Layout 3 had no such bit.
//!
//! Indices are `u64` and never wrap in practice (2^64 packets); a slot keeps the low 32 bits
//! of its sequence, enough to tell this lap from the last (laps are `slots` apart and every
//! lap rewrites every slot). The header's identity line is written before `state` becomes
//! ready, with a Release store that openers read with Acquire, so a half-initialised file is
//! refused as "not ready" rather than misread.

/// The first eight bytes of every segment.
pub const MAGIC: [u8; 8] = *b"SVWIRE\0\x01";
/// The layout described in this module; bump it for any incompatible change.
pub const LAYOUT_VERSION: u32 = 4;
/// Cache line size the layout is padded to.
pub const CACHE_LINE: usize = 64;
/// Bytes before slot 0.
pub const HEADER_SIZE: usize = 14 * CACHE_LINE;
/// Bytes each slot has beyond its payload: its words, and padding that keeps every slot
/// cache-line aligned (the payload starts at [`SLOT_OFF_PAYLOAD`], in the same line as them).
pub const SLOT_HEADER_SIZE: usize = CACHE_LINE;

/// The sequence number a slot holds for ring position `pos`: its low 32 bits (see the layout).
#[inline(always)]
pub fn lap_seq(pos: u64) -> u32 {
    pos as u32
}

pub const MIN_SLOTS: u32 = 2;
pub const MAX_SLOTS: u32 = 65536;
pub const MIN_SLOT_SIZE: u32 = 64;
pub const MAX_SLOT_SIZE: u32 = 65536;
/// Largest LID handed out: the InfiniBand unicast range is 0x0001..=0xBFFF.
pub const MAX_LID: u16 = 0xBFFF;

pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 8;
pub const OFF_HEADER_SIZE: usize = 12;
pub const OFF_SLOTS: usize = 16;
pub const OFF_SLOT_SIZE: usize = 20;
pub const OFF_TOTAL_SIZE: usize = 24;
pub const OFF_OWNER_PID: usize = 32;
pub const OFF_LID: usize = 36;
pub const OFF_OWNER_START: usize = 40;
pub const OFF_GID: usize = 48;
pub const OFF_STATE: usize = CACHE_LINE;
pub const OFF_TAIL: usize = 2 * CACHE_LINE;
pub const OFF_HEAD: usize = 3 * CACHE_LINE;
pub const OFF_DOORBELL: usize = 4 * CACHE_LINE;
pub const OFF_PARKED: usize = 5 * CACHE_LINE;
/// The owning device's name ([`LABEL_LEN`] bytes, zero-padded), in the counters block.
pub const OFF_LABEL: usize = 6 * CACHE_LINE;
/// Bytes of [`OFF_LABEL`]: a device name longer than this is cut.
pub const LABEL_LEN: usize = 32;
/// How many of the [`COUNTER_WORDS`] words the owner fills.
pub const OFF_COUNTER_COUNT: usize = OFF_LABEL + LABEL_LEN;
/// The first counter word.
pub const OFF_COUNTERS: usize = 7 * CACHE_LINE;
/// Room for counters: seven lines of `u64` words.
pub const COUNTER_WORDS: usize = 7 * CACHE_LINE / 8;

pub const SLOT_OFF_SEQ: usize = 0;
pub const SLOT_OFF_LEN: usize = 4;
pub const SLOT_OFF_WRITER: usize = 8;
pub const SLOT_OFF_PAYLOAD: usize = 12;
/// The bit of a slot's `len` word that says its packet's ICRC was left unset; the length is
/// the word without it (at most [`MAX_SLOT_SIZE`], far below).
pub const LEN_ICRC_UNSET: u32 = 1 << 31;
const _: () = assert!(MAX_SLOT_SIZE < LEN_ICRC_UNSET);

/// Values of the `state` word.
pub const STATE_INITIALISING: u32 = 0;
pub const STATE_READY: u32 = 1;
pub const STATE_CLOSED: u32 = 2;
/// The owner found the ring corrupted and took its port down: nobody uses the ring again.
pub const STATE_BROKEN: u32 = 3;

/// How every problem that can only come from a stray write into a live segment begins, in
/// errors and in `softverbs fabric`.
pub const CORRUPTED: &str = "corrupted: ";

/// Bytes of the header that [`Header::parse`] needs: the identity line plus the state word.
pub const HEADER_READ_LEN: usize = OFF_STATE + 4;

// The layout's own promises, checked at compile time.
const _: () = {
    assert!(OFF_GID + 16 <= OFF_STATE, "the identity fits in line 0");
    assert!(OFF_TAIL == OFF_STATE + CACHE_LINE);
    assert!(OFF_HEAD == OFF_TAIL + CACHE_LINE);
    assert!(OFF_DOORBELL == OFF_HEAD + CACHE_LINE);
    assert!(OFF_PARKED == OFF_DOORBELL + CACHE_LINE);
    assert!(OFF_LABEL == OFF_PARKED + CACHE_LINE && LABEL_LEN & 7 == 0);
    assert!(OFF_COUNTER_COUNT + 4 <= OFF_COUNTERS && OFF_COUNTERS == OFF_LABEL + CACHE_LINE);
    assert!(HEADER_SIZE == OFF_COUNTERS + COUNTER_WORDS * 8);
    assert!(OFF_TAIL & 7 == 0 && OFF_HEAD & 7 == 0 && OFF_TOTAL_SIZE & 7 == 0);
    assert!(SLOT_OFF_WRITER + 4 == SLOT_OFF_PAYLOAD && SLOT_OFF_PAYLOAD <= SLOT_HEADER_SIZE);
    assert!(
        CACHE_LINE - SLOT_OFF_PAYLOAD == 52,
        "an ACK (48 bytes) and an 8-byte SEND (52) share their sequence number's line"
    );
    assert!(HEADER_READ_LEN <= HEADER_SIZE);
};

/// Validated ring geometry: everything needed to find a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub slots: u32,
    pub slot_size: u32,
}

impl Geometry {
    /// Checks the ranges that both a new config and an opened header must satisfy.
    pub fn new(slots: u32, slot_size: u32) -> Result<Geometry, String> {
        if !(MIN_SLOTS..=MAX_SLOTS).contains(&slots) || !slots.is_power_of_two() {
            return Err(format!(
                "slot count {slots} is not a power of two in {MIN_SLOTS}..={MAX_SLOTS}"
            ));
        }
        if !(MIN_SLOT_SIZE..=MAX_SLOT_SIZE).contains(&slot_size)
            || slot_size & (CACHE_LINE as u32 - 1) != 0
        {
            return Err(format!(
                "slot size {slot_size} is not a multiple of {CACHE_LINE} in \
                 {MIN_SLOT_SIZE}..={MAX_SLOT_SIZE}"
            ));
        }
        Ok(Geometry { slots, slot_size })
    }

    /// Distance between the starts of two consecutive slots.
    pub fn slot_stride(self) -> u64 {
        SLOT_HEADER_SIZE as u64 + u64::from(self.slot_size)
    }

    /// The file length this geometry needs (fits in u64 for every valid geometry).
    pub fn total_size(self) -> u64 {
        HEADER_SIZE as u64 + u64::from(self.slots) * self.slot_stride()
    }

    /// Byte offset of slot `index` (already reduced modulo `slots`).
    pub fn slot_offset(self, index: u64) -> usize {
        debug_assert!(index < u64::from(self.slots));
        // Cannot overflow: the segment of this size is mapped, so it fits in usize.
        (HEADER_SIZE as u64 + index * self.slot_stride()) as usize
    }
}

/// The identity fields of a segment header, decoded from bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub header_size: u32,
    pub slots: u32,
    pub slot_size: u32,
    pub total_size: u64,
    pub owner_pid: u32,
    pub lid: u16,
    pub owner_start: u64,
    pub gid: [u8; 16],
    pub state: u32,
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_ne_bytes(a)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

impl Header {
    /// A header for a new segment (state still initialising).
    pub fn new(
        geometry: Geometry,
        owner_pid: u32,
        owner_start: u64,
        lid: u16,
        gid: [u8; 16],
    ) -> Header {
        Header {
            version: LAYOUT_VERSION,
            header_size: HEADER_SIZE as u32,
            slots: geometry.slots,
            slot_size: geometry.slot_size,
            total_size: geometry.total_size(),
            owner_pid,
            lid,
            owner_start,
            gid,
            state: STATE_INITIALISING,
        }
    }

    /// Decodes the first [`HEADER_READ_LEN`] bytes of a file of `file_len` bytes. Fails only
    /// when the bytes cannot be interpreted at all (too short, not a softverbs segment, another
    /// layout version); the remaining checks are [`Header::check`].
    pub fn parse(bytes: &[u8], file_len: u64) -> Result<Header, String> {
        if bytes.len() < HEADER_READ_LEN {
            return Err(truncated(file_len));
        }
        if bytes[OFF_MAGIC..OFF_MAGIC + 8] != MAGIC {
            let mut magic = [0; 8];
            magic.copy_from_slice(&bytes[OFF_MAGIC..OFF_MAGIC + 8]);
            return Err(format!(
                "bad magic 0x{:016x} (not a softverbs segment)",
                u64::from_be_bytes(magic)
            ));
        }
        let version = u32_at(bytes, OFF_VERSION);
        if version != LAYOUT_VERSION {
            return Err(format!("layout version {version}, expected {LAYOUT_VERSION}"));
        }
        let mut gid = [0; 16];
        gid.copy_from_slice(&bytes[OFF_GID..OFF_GID + 16]);
        Ok(Header {
            version,
            header_size: u32_at(bytes, OFF_HEADER_SIZE),
            slots: u32_at(bytes, OFF_SLOTS),
            slot_size: u32_at(bytes, OFF_SLOT_SIZE),
            total_size: u64_at(bytes, OFF_TOTAL_SIZE),
            owner_pid: u32_at(bytes, OFF_OWNER_PID),
            lid: u16_at(bytes, OFF_LID),
            owner_start: u64_at(bytes, OFF_OWNER_START),
            gid,
            state: u32_at(bytes, OFF_STATE),
        })
    }

    /// Checks sizes against each other and against the file length; returns the geometry.
    pub fn check_geometry(&self, file_len: u64) -> Result<Geometry, String> {
        if file_len < HEADER_SIZE as u64 {
            return Err(truncated(file_len));
        }
        if self.header_size as usize != HEADER_SIZE {
            return Err(format!("header size {}, expected {HEADER_SIZE}", self.header_size));
        }
        let geometry = Geometry::new(self.slots, self.slot_size)?;
        if self.total_size != geometry.total_size() {
            return Err(format!(
                "size {} in the header does not match {} slots of {} bytes ({} expected)",
                self.total_size,
                self.slots,
                self.slot_size,
                geometry.total_size()
            ));
        }
        if file_len != self.total_size {
            return Err(format!(
                "size: the file is {file_len} bytes but its header says {}",
                self.total_size
            ));
        }
        Ok(geometry)
    }

    /// Full check for a segment that is about to be used: geometry, LID and state.
    pub fn check(&self, file_len: u64) -> Result<Geometry, String> {
        let geometry = self.check_geometry(file_len)?;
        if self.lid == 0 || self.lid > MAX_LID {
            return Err(format!("LID {} in the header is not a unicast LID", self.lid));
        }
        check_state(self.state)?;
        Ok(geometry)
    }

    /// Encodes the header (with its current `state`) into the first [`HEADER_READ_LEN`] bytes.
    pub fn encode(&self) -> [u8; HEADER_READ_LEN] {
        let mut b = [0u8; HEADER_READ_LEN];
        b[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&self.version.to_ne_bytes());
        b[OFF_HEADER_SIZE..OFF_HEADER_SIZE + 4].copy_from_slice(&self.header_size.to_ne_bytes());
        b[OFF_SLOTS..OFF_SLOTS + 4].copy_from_slice(&self.slots.to_ne_bytes());
        b[OFF_SLOT_SIZE..OFF_SLOT_SIZE + 4].copy_from_slice(&self.slot_size.to_ne_bytes());
        b[OFF_TOTAL_SIZE..OFF_TOTAL_SIZE + 8].copy_from_slice(&self.total_size.to_ne_bytes());
        b[OFF_OWNER_PID..OFF_OWNER_PID + 4].copy_from_slice(&self.owner_pid.to_ne_bytes());
        b[OFF_LID..OFF_LID + 2].copy_from_slice(&self.lid.to_ne_bytes());
        b[OFF_OWNER_START..OFF_OWNER_START + 8].copy_from_slice(&self.owner_start.to_ne_bytes());
        b[OFF_GID..OFF_GID + 16].copy_from_slice(&self.gid);
        b[OFF_STATE..OFF_STATE + 4].copy_from_slice(&self.state.to_ne_bytes());
        b
    }
}

/// The problem of a file too short to hold a header.
pub fn truncated(file_len: u64) -> String {
    format!("truncated: the file is {file_len} bytes, shorter than the {HEADER_SIZE}-byte header")
}

/// Explains a `state` word that is not "ready".
pub fn check_state(state: u32) -> Result<(), String> {
    match state {
        STATE_READY => Ok(()),
        STATE_INITIALISING => {
            Err("not ready (still being initialised, or its creator died while initialising it)"
                .to_string())
        }
        STATE_CLOSED => Err("closed by its owner".to_string()),
        STATE_BROKEN => {
            Err(format!("{CORRUPTED}its owner found the ring damaged and took its port down"))
        }
        other => Err(format!("{CORRUPTED}unknown state word {other}")),
    }
}

/// What is impossible about a ring whose consumer index is `head`, producers' index `tail`
/// and head slot's sequence number `head_seq`, read while `head` did not move: the tail is
/// never behind the head nor more than a ring ahead of it, and the head slot is either free
/// for this lap (`head`) or published (`head + 1`). None for a sane ring.
pub fn ring_problem(slots: u32, head: u64, tail: u64, head_seq: u32) -> Option<String> {
    if tail.wrapping_sub(head) > u64::from(slots) {
        return Some(format!(
            "{CORRUPTED}the ring's head {head} and tail {tail} are more than a ring \
             apart (a ring is {slots} slots)"
        ));
    }
    if head_seq != lap_seq(head) && head_seq != lap_seq(head.wrapping_add(1)) {
        return Some(format!(
            "{CORRUPTED}slot {}'s sequence number {head_seq} is impossible at head {head} \
             (expected {} or {}): the head word or the slot was overwritten",
            head & (u64::from(slots) - 1),
            lap_seq(head),
            lap_seq(head.wrapping_add(1))
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let g = Geometry::new(8, 128).expect("valid geometry");
        let mut h = Header::new(g, 42, 7, 3, [9; 16]);
        h.state = STATE_READY;
        h
    }

    #[test]
    fn header_round_trips() {
        let h = sample();
        let len = h.total_size;
        let back = Header::parse(&h.encode(), len).expect("parses");
        assert_eq!(back, h);
        assert_eq!(back.check(len), Geometry::new(8, 128));
    }

    #[test]
    fn header_checks_name_what_is_wrong() {
        let h = sample();
        let len = h.total_size;
        let mut b = h.encode();
        b[0] = b'X';
        assert!(Header::parse(&b, len).unwrap_err().contains("bad magic"));

        let mut b = h.encode();
        // A segment of the previous layout (a process of an older softverbs on the fabric).
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(Header::parse(&b, len).unwrap_err(), "layout version 1, expected 4");
        // Layout 2 had no counters block: its slots start where layout 3's counters are.
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&2u32.to_ne_bytes());
        assert_eq!(Header::parse(&b, len).unwrap_err(), "layout version 2, expected 4");
        // Layout 3 had no mark for an unset ICRC: its readers would take the mark for a
        // length longer than a slot.
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(Header::parse(&b, len).unwrap_err(), "layout version 3, expected 4");

        assert!(Header::parse(&h.encode()[..50], 50).unwrap_err().contains("truncated"));
        assert!(h.check(100).unwrap_err().contains("truncated"));
        assert!(h.check(len - 64).unwrap_err().contains("size"));

        let mut bad = h;
        bad.slots = 6;
        assert!(bad.check(len).unwrap_err().contains("power of two"));
        let mut bad = h;
        bad.total_size += 64;
        assert!(bad.check(len + 64).unwrap_err().contains("does not match"));
        let mut bad = h;
        bad.state = STATE_INITIALISING;
        assert!(bad.check(len).unwrap_err().contains("not ready"));
        let mut bad = h;
        bad.state = STATE_CLOSED;
        assert!(bad.check(len).unwrap_err().contains("closed"));
        let mut bad = h;
        bad.lid = 0;
        assert!(bad.check(len).unwrap_err().contains("LID"));
    }

    #[test]
    fn geometry_bounds() {
        assert!(Geometry::new(1, 64).is_err());
        assert!(Geometry::new(2, 64).is_ok());
        assert!(Geometry::new(65536, 65536).is_ok());
        assert!(Geometry::new(131072, 64).is_err());
        assert!(Geometry::new(1000, 64).is_err());
        assert!(Geometry::new(4, 32).is_err());
        assert!(Geometry::new(4, 100).is_err());
        assert!(Geometry::new(4, 65536 + 64).is_err());
        let g = Geometry::new(4, 64).expect("valid");
        assert_eq!(g.total_size(), (HEADER_SIZE + 4 * 128) as u64);
        assert_eq!(g.slot_offset(1), HEADER_SIZE + 128);
    }
}
