//! BTH opcodes and the one table of per-opcode facts (headers carried, their lengths and offsets,
//! state-machine flags) that drives parsing, emitting and the transport engine. The bottom of the
//! packet layer: the header codecs take their lengths from here, and nothing here names them.
//!
//! An opcode is 3 bits of transport (RC 000, UC 001, UD 011, CNP 100) and 5 bits of operation
//! (IBA 9.2.1, Table 38; FLUSH and ATOMIC WRITE from IBA 1.5). The table below lists every
//! opcode softverbs speaks; anything else (RD, XRC, reserved codes) is unknown and
//! [`Opcode::info`] returns `None`.

use bitflags::bitflags;
use core::fmt;

/// The BTH `OpCode` field (byte 0): transport in bits 7–5, operation in bits 4–0.
/// `Default` is 0x00 (RC SEND FIRST), only so that [`Bth`](super::Bth) can derive `Default`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Opcode(pub u8);

/// The transport service an opcode belongs to (BTH `OpCode` bits 7–5).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Transport {
    /// Reliable Connection, opcodes 0x00–0x1F.
    Rc,
    /// Unreliable Connection, opcodes 0x20–0x3F.
    Uc,
    /// Unreliable Datagram, opcodes 0x60–0x7F.
    Ud,
    /// RoCEv2 congestion notification, opcodes 0x80–0x9F (only 0x81, CNP, is defined).
    Cnp,
}

impl Transport {
    /// The value of the opcode's transport bits (7–5) for this transport, e.g. 0x20 for UC.
    pub const fn opcode_base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
        }
    }
}

bitflags! {
    /// Per-opcode facts from the opcode table: direction, position in the message, operation,
    /// responder actions, and which extension headers follow the BTH.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    pub struct OpFlags: u32 {
        /// Sent by a requester: SEND, RDMA WRITE, RDMA READ REQUEST, COMPARE SWAP, FETCH ADD.
        const REQUEST = 1 << 0;
        /// Sent by a responder to the requester: RDMA READ RESPONSE *, ACKNOWLEDGE,
        /// ATOMIC ACKNOWLEDGE.
        const RESPONSE = 1 << 1;
        /// First packet of a message (FIRST and ONLY opcodes, and every single-packet opcode).
        const START = 1 << 2;
        /// Neither first nor last packet of a message (MIDDLE opcodes).
        const MIDDLE = 1 << 3;
        /// Last packet of a message (LAST and ONLY opcodes, and every single-packet opcode).
        const END = 1 << 4;
        /// Part of a SEND message.
        const SEND = 1 << 5;
        /// Part of an RDMA WRITE message.
        const WRITE = 1 << 6;
        /// Part of an RDMA READ: the READ REQUEST and its READ RESPONSE packets.
        const READ = 1 << 7;
        /// Part of an atomic operation: COMPARE SWAP, FETCH ADD and their ATOMIC ACKNOWLEDGE.
        const ATOMIC = 1 << 8;
        /// A pure acknowledgement: ACKNOWLEDGE and ATOMIC ACKNOWLEDGE.
        const ACK = 1 << 9;
        /// The responder needs a receive WQE for this packet: every SEND packet, and RDMA WRITE
        /// LAST/ONLY WITH IMMEDIATE.
        const RWR = 1 << 10;
        /// Generates a responder completion: the LAST/ONLY packet of a SEND, and RDMA WRITE
        /// LAST/ONLY WITH IMMEDIATE.
        const COMP = 1 << 11;
        /// The message delivers immediate data to the receiver (the WITH IMMEDIATE opcodes).
        const IMM = 1 << 12;
        /// The message invalidates a remote key at the receiver (SEND … WITH INVALIDATE).
        const INVALIDATE = 1 << 13;
        /// The packet may carry payload (SEND, RDMA WRITE, RDMA READ RESPONSE); others must not.
        const PAYLOAD = 1 << 14;
        /// An RDMA Extended Transport Header (RETH, 16 B) follows the BTH (and DETH).
        const RETH = 1 << 15;
        /// An ACK Extended Transport Header (AETH, 4 B) is present.
        const AETH = 1 << 16;
        /// An Atomic Extended Transport Header (AtomicETH, 28 B) follows the BTH.
        const ATOMIC_ETH = 1 << 17;
        /// An Atomic Acknowledge Extended Transport Header (AtomicAckETH, 8 B) follows the AETH.
        const ATOMIC_ACK_ETH = 1 << 18;
        /// A Datagram Extended Transport Header (DETH, 8 B) directly follows the BTH.
        const DETH = 1 << 19;
        /// An Invalidate Extended Transport Header (IETH, 4 B) precedes the payload.
        const IETH = 1 << 20;
        /// Immediate data (ImmDt, 4 B) precedes the payload.
        const IMMDT = 1 << 21;
        /// An RDMA FLUSH (IBA 1.5 9.4.5): no payload, answered by a zero-length RDMA READ
        /// RESPONSE ONLY.
        const FLUSH = 1 << 22;
        /// An RDMA ATOMIC WRITE (IBA 1.5 9.4.6): 8 bytes placed in one store, answered by a
        /// zero-length RDMA READ RESPONSE ONLY.
        const ATOMIC_WRITE = 1 << 23;
        /// A FLUSH Extended Transport Header (FETH, 4 B: placement type, selectivity) follows
        /// the BTH, before the RETH.
        const FETH = 1 << 24;
    }
}

/// Bytes of a Base Transport Header (BTH), which every packet starts with.
pub(crate) const BTH_LEN: usize = 12;
/// Bytes of a Datagram Extended Transport Header (DETH: Q_Key and source QP).
pub(crate) const DETH_LEN: usize = 8;
/// Bytes of a FLUSH Extended Transport Header (FETH: placement type and selectivity).
pub const FETH_LEN: usize = 4;
/// Bytes of an RDMA Extended Transport Header (RETH: virtual address, R_Key, DMA length).
pub(crate) const RETH_LEN: usize = 16;
/// Bytes of an Atomic Extended Transport Header (AtomicETH: address, R_Key, two operands).
pub(crate) const ATOMIC_ETH_LEN: usize = 28;
/// Bytes of an ACK Extended Transport Header (AETH: syndrome and MSN).
pub(crate) const AETH_LEN: usize = 4;
/// Bytes of an Atomic Acknowledge Extended Transport Header (AtomicAckETH: original remote data).
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Bytes of immediate data (ImmDt).
pub const IMMDT_LEN: usize = 4;
/// Bytes of an Invalidate Extended Transport Header (IETH: the R_Key to invalidate).
pub const IETH_LEN: usize = 4;
/// Bytes a RoCEv2 CNP carries after its BTH (reserved, sent as zero).
pub const CNP_RESERVED_LEN: usize = 16;

/// The extension headers in IBA order (the order in which they follow the BTH, and of
/// [`Packet`](super::Packet)'s fields): the flag that stands for each, its name and its length.
pub(crate) const EXTENSION_HEADERS: [(OpFlags, &str, usize); 8] = [
    (OpFlags::DETH, "DETH", DETH_LEN),
    (OpFlags::FETH, "FETH", FETH_LEN),
    (OpFlags::RETH, "RETH", RETH_LEN),
    (OpFlags::ATOMIC_ETH, "AtomicETH", ATOMIC_ETH_LEN),
    (OpFlags::AETH, "AETH", AETH_LEN),
    (OpFlags::ATOMIC_ACK_ETH, "AtomicAckETH", ATOMIC_ACK_ETH_LEN),
    (OpFlags::IMMDT, "ImmDt", IMMDT_LEN),
    (OpFlags::IETH, "IETH", IETH_LEN),
];

/// The opcode-table flags that stand for an extension header.
pub(crate) const EXTENSION_HEADER_FLAGS: OpFlags = OpFlags::DETH
    .union(OpFlags::FETH)
    .union(OpFlags::RETH)
    .union(OpFlags::ATOMIC_ETH)
    .union(OpFlags::AETH)
    .union(OpFlags::ATOMIC_ACK_ETH)
    .union(OpFlags::IMMDT)
    .union(OpFlags::IETH);

/// One row of the opcode table: what a packet with this opcode is and carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode this row describes.
    pub opcode: Opcode,
    /// The opcode's name in IBA Table 38 style, e.g. `"RC RDMA WRITE ONLY"`.
    pub name: &'static str,
    /// The transport service (from the opcode's top 3 bits).
    pub transport: Transport,
    /// What the packet is, what the responder does with it, and which headers it carries.
    pub flags: OpFlags,
    /// Bytes of BTH plus extension headers (plus, for CNP, its 16 reserved bytes): where the
    /// payload starts.
    pub header_len: usize,
}

impl OpcodeInfo {
    /// Where the extension header `header` (one of the header flags, e.g. [`OpFlags::AETH`])
    /// starts in this opcode's packets, in bytes from the start of the BTH; `None` if the opcode
    /// does not carry it. A `const fn`, so that a fast path can take an offset from the table as
    /// a constant (see [`Opcode::row`]).
    pub const fn header_offset(&self, header: OpFlags) -> Option<usize> {
        if !self.flags.contains(header) {
            return None;
        }
        let mut at = BTH_LEN;
        let mut i = 0;
        while i < EXTENSION_HEADERS.len() {
            let (flag, _, len) = EXTENSION_HEADERS[i];
            if flag.bits() == header.bits() {
                return Some(at);
            }
            if self.flags.contains(flag) {
                at += len;
            }
            i += 1;
        }
        None
    }
}

impl Opcode {
    // Reliable Connection (IBA Table 38, transport 000).
    /// RC SEND FIRST (0x00).
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND MIDDLE (0x01).
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND LAST (0x02).
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND LAST WITH IMMEDIATE (0x03): ImmDt.
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC SEND ONLY (0x04).
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND ONLY WITH IMMEDIATE (0x05): ImmDt.
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC RDMA WRITE FIRST (0x06): RETH.
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE MIDDLE (0x07).
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE LAST (0x08).
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE LAST WITH IMMEDIATE (0x09): ImmDt.
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC RDMA WRITE ONLY (0x0A): RETH.
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA WRITE ONLY WITH IMMEDIATE (0x0B): RETH, ImmDt.
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    /// RC RDMA READ REQUEST (0x0C): RETH.
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC RDMA READ RESPONSE FIRST (0x0D): AETH.
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC RDMA READ RESPONSE MIDDLE (0x0E): no AETH.
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC RDMA READ RESPONSE LAST (0x0F): AETH.
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC RDMA READ RESPONSE ONLY (0x10): AETH.
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC ACKNOWLEDGE (0x11): AETH.
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC ACKNOWLEDGE (0x12): AETH, AtomicAckETH.
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC CMP SWAP (0x13): AtomicETH.
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC FETCH ADD (0x14): AtomicETH.
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND LAST WITH INVALIDATE (0x16): IETH.
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC SEND ONLY WITH INVALIDATE (0x17): IETH.
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC FLUSH (0x1C, IBA 1.5): FETH, RETH, no payload.
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    /// RC ATOMIC WRITE (0x1D, IBA 1.5): RETH and 8 bytes of payload.
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);

    // Unreliable Connection (transport 001).
    /// UC SEND FIRST (0x20).
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC SEND MIDDLE (0x21).
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// UC SEND LAST (0x22).
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// UC SEND LAST WITH IMMEDIATE (0x23): ImmDt.
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// UC SEND ONLY (0x24).
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC SEND ONLY WITH IMMEDIATE (0x25): ImmDt.
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// UC RDMA WRITE FIRST (0x26): RETH.
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// UC RDMA WRITE MIDDLE (0x27).
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// UC RDMA WRITE LAST (0x28).
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// UC RDMA WRITE LAST WITH IMMEDIATE (0x29): ImmDt.
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// UC RDMA WRITE ONLY (0x2A): RETH.
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    /// UC RDMA WRITE ONLY WITH IMMEDIATE (0x2B): RETH, ImmDt.
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);

    // Unreliable Datagram (transport 011).
    /// UD SEND ONLY (0x64): DETH.
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND ONLY WITH IMMEDIATE (0x65): DETH, ImmDt.
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);

    /// RoCEv2 Congestion Notification Packet (0x81): BTH with BECN set, then 16 reserved bytes.
    pub const CNP: Opcode = Opcode(0x81);

    /// This opcode's row of the opcode table, or `None` for an opcode softverbs does not speak
    /// (RD, XRC, reserved codes).
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        match INDEX[usize::from(self.0)] {
            NONE => None,
            row => OPCODES.get(usize::from(row)),
        }
    }

    /// [`Opcode::info`] of an opcode in the table, as a `const fn`: a fast path that handles
    /// one opcode takes its header length and offsets from the table as constants, e.g.
    /// `const LEN: usize = Opcode::RC_ACKNOWLEDGE.row().header_len;`.
    ///
    /// # Panics
    /// If the opcode has no row (at compile time, where it is meant to be evaluated).
    pub const fn row(self) -> &'static OpcodeInfo {
        match INDEX[self.0 as usize] {
            NONE => panic!("the opcode has a row in the opcode table"),
            row => &OPCODES[row as usize],
        }
    }

    /// The same operation (low 5 bits) on another transport: RC 0x00, UC 0x20, UD 0x60, CNP
    /// 0x80. The result may be an opcode that does not exist (check [`Opcode::info`]).
    pub const fn with_transport(self, t: Transport) -> Opcode {
        Opcode((self.0 & 0x1F) | t.opcode_base())
    }

    /// Every opcode in the table, in opcode order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        OPCODES.iter().map(|info| info.opcode)
    }
}

impl fmt::Display for Opcode {
    /// The table name (e.g. `RC RDMA WRITE ONLY`), or `UNKNOWN(0x..)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(info) => f.write_str(info.name),
            None => write!(f, "UNKNOWN({:#04x})", self.0),
        }
    }
}

/// The opcode table, in opcode order; [`opcode_table`] is its public face.
static OPCODES: [OpcodeInfo; 40] = TABLE;

/// The table's contents, a constant so that [`INDEX`] can be built from it at compile time.
/// Each row: opcode, name, transport, what the packet is, then the headers after the BTH.
#[rustfmt::skip]
const TABLE: [OpcodeInfo; 40] = {
    use OpFlags as F;
    use Transport::{Cnp, Rc, Uc, Ud};

    // Flag sets shared by RC and UC.
    const SEND_FIRST: &[OpFlags] =     &[F::REQUEST, F::SEND, F::START, F::RWR, F::PAYLOAD];
    const SEND_MIDDLE: &[OpFlags] =    &[F::REQUEST, F::SEND, F::MIDDLE, F::RWR, F::PAYLOAD];
    const SEND_LAST: &[OpFlags] =      &[F::REQUEST, F::SEND, F::END, F::RWR, F::COMP, F::PAYLOAD];
    const SEND_LAST_IMM: &[OpFlags] =  &[F::REQUEST, F::SEND, F::END, F::RWR, F::COMP, F::PAYLOAD,
                                         F::IMM, F::IMMDT];
    const SEND_ONLY: &[OpFlags] =      &[F::REQUEST, F::SEND, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD];
    const SEND_ONLY_IMM: &[OpFlags] =  &[F::REQUEST, F::SEND, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD, F::IMM, F::IMMDT];
    const WRITE_FIRST: &[OpFlags] =    &[F::REQUEST, F::WRITE, F::START, F::PAYLOAD, F::RETH];
    const WRITE_MIDDLE: &[OpFlags] =   &[F::REQUEST, F::WRITE, F::MIDDLE, F::PAYLOAD];
    const WRITE_LAST: &[OpFlags] =     &[F::REQUEST, F::WRITE, F::END, F::PAYLOAD];
    const WRITE_LAST_IMM: &[OpFlags] = &[F::REQUEST, F::WRITE, F::END, F::RWR, F::COMP, F::PAYLOAD,
                                         F::IMM, F::IMMDT];
    const WRITE_ONLY: &[OpFlags] =     &[F::REQUEST, F::WRITE, F::START, F::END, F::PAYLOAD,
                                         F::RETH];
    const WRITE_ONLY_IMM: &[OpFlags] = &[F::REQUEST, F::WRITE, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD, F::IMM, F::RETH, F::IMMDT];
    // RC only.
    const READ_REQUEST: &[OpFlags] =   &[F::REQUEST, F::READ, F::START, F::END, F::RETH];
    const READ_RESP_FIRST: &[OpFlags] = &[F::RESPONSE, F::READ, F::START, F::PAYLOAD, F::AETH];
    const READ_RESP_MIDDLE: &[OpFlags] = &[F::RESPONSE, F::READ, F::MIDDLE, F::PAYLOAD];
    const READ_RESP_LAST: &[OpFlags] = &[F::RESPONSE, F::READ, F::END, F::PAYLOAD, F::AETH];
    const READ_RESP_ONLY: &[OpFlags] = &[F::RESPONSE, F::READ, F::START, F::END, F::PAYLOAD,
                                         F::AETH];
    const ACKNOWLEDGE: &[OpFlags] =    &[F::RESPONSE, F::ACK, F::START, F::END, F::AETH];
    const ATOMIC_ACK: &[OpFlags] =     &[F::RESPONSE, F::ACK, F::ATOMIC, F::START, F::END, F::AETH,
                                         F::ATOMIC_ACK_ETH];
    const ATOMIC: &[OpFlags] =         &[F::REQUEST, F::ATOMIC, F::START, F::END, F::ATOMIC_ETH];
    const SEND_LAST_INV: &[OpFlags] =  &[F::REQUEST, F::SEND, F::END, F::RWR, F::COMP, F::PAYLOAD,
                                         F::INVALIDATE, F::IETH];
    const SEND_ONLY_INV: &[OpFlags] =  &[F::REQUEST, F::SEND, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD, F::INVALIDATE, F::IETH];
    const FLUSH: &[OpFlags] =          &[F::REQUEST, F::FLUSH, F::START, F::END, F::FETH, F::RETH];
    const ATOMIC_WRITE: &[OpFlags] =   &[F::REQUEST, F::ATOMIC_WRITE, F::START, F::END, F::PAYLOAD,
                                         F::RETH];
    // UD.
    const UD_SEND: &[OpFlags] =        &[F::REQUEST, F::SEND, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD, F::DETH];
    const UD_SEND_IMM: &[OpFlags] =    &[F::REQUEST, F::SEND, F::START, F::END, F::RWR, F::COMP,
                                         F::PAYLOAD, F::IMM, F::DETH, F::IMMDT];

    [
        row(0x00, "RC SEND FIRST",                     Rc, SEND_FIRST),
        row(0x01, "RC SEND MIDDLE",                    Rc, SEND_MIDDLE),
        row(0x02, "RC SEND LAST",                      Rc, SEND_LAST),
        row(0x03, "RC SEND LAST WITH IMMEDIATE",       Rc, SEND_LAST_IMM),
        row(0x04, "RC SEND ONLY",                      Rc, SEND_ONLY),
        row(0x05, "RC SEND ONLY WITH IMMEDIATE",       Rc, SEND_ONLY_IMM),
        row(0x06, "RC RDMA WRITE FIRST",               Rc, WRITE_FIRST),
        row(0x07, "RC RDMA WRITE MIDDLE",              Rc, WRITE_MIDDLE),
        row(0x08, "RC RDMA WRITE LAST",                Rc, WRITE_LAST),
        row(0x09, "RC RDMA WRITE LAST WITH IMMEDIATE", Rc, WRITE_LAST_IMM),
        row(0x0A, "RC RDMA WRITE ONLY",                Rc, WRITE_ONLY),
        row(0x0B, "RC RDMA WRITE ONLY WITH IMMEDIATE", Rc, WRITE_ONLY_IMM),
        row(0x0C, "RC RDMA READ REQUEST",              Rc, READ_REQUEST),
        row(0x0D, "RC RDMA READ RESPONSE FIRST",       Rc, READ_RESP_FIRST),
        row(0x0E, "RC RDMA READ RESPONSE MIDDLE",      Rc, READ_RESP_MIDDLE),
        row(0x0F, "RC RDMA READ RESPONSE LAST",        Rc, READ_RESP_LAST),
        row(0x10, "RC RDMA READ RESPONSE ONLY",        Rc, READ_RESP_ONLY),
        row(0x11, "RC ACKNOWLEDGE",                    Rc, ACKNOWLEDGE),
        row(0x12, "RC ATOMIC ACKNOWLEDGE",             Rc, ATOMIC_ACK),
        row(0x13, "RC COMPARE SWAP",                   Rc, ATOMIC),
        row(0x14, "RC FETCH ADD",                      Rc, ATOMIC),
        // 0x15 is reserved.
        row(0x16, "RC SEND LAST WITH INVALIDATE",      Rc, SEND_LAST_INV),
        row(0x17, "RC SEND ONLY WITH INVALIDATE",      Rc, SEND_ONLY_INV),
        // 0x18–0x1B are reserved.
        row(0x1C, "RC FLUSH",                          Rc, FLUSH),
        row(0x1D, "RC ATOMIC WRITE",                   Rc, ATOMIC_WRITE),
        row(0x20, "UC SEND FIRST",                     Uc, SEND_FIRST),
        row(0x21, "UC SEND MIDDLE",                    Uc, SEND_MIDDLE),
        row(0x22, "UC SEND LAST",                      Uc, SEND_LAST),
        row(0x23, "UC SEND LAST WITH IMMEDIATE",       Uc, SEND_LAST_IMM),
        row(0x24, "UC SEND ONLY",                      Uc, SEND_ONLY),
        row(0x25, "UC SEND ONLY WITH IMMEDIATE",       Uc, SEND_ONLY_IMM),
        row(0x26, "UC RDMA WRITE FIRST",               Uc, WRITE_FIRST),
        row(0x27, "UC RDMA WRITE MIDDLE",              Uc, WRITE_MIDDLE),
        row(0x28, "UC RDMA WRITE LAST",                Uc, WRITE_LAST),
        row(0x29, "UC RDMA WRITE LAST WITH IMMEDIATE", Uc, WRITE_LAST_IMM),
        row(0x2A, "UC RDMA WRITE ONLY",                Uc, WRITE_ONLY),
        row(0x2B, "UC RDMA WRITE ONLY WITH IMMEDIATE", Uc, WRITE_ONLY_IMM),
        row(0x64, "UD SEND ONLY",                      Ud, UD_SEND),
        row(0x65, "UD SEND ONLY WITH IMMEDIATE",       Ud, UD_SEND_IMM),
        // A CNP is neither request nor response and belongs to no message: it only carries BECN.
        OpcodeInfo {
            opcode: Opcode::CNP,
            name: "CNP",
            transport: Cnp,
            flags: OpFlags::empty(),
            header_len: BTH_LEN + CNP_RESERVED_LEN,
        },
    ]
};

/// The longest BTH plus extension headers of any opcode in the table (an atomic request's 40).
pub(crate) const MAX_HEADER_LEN: usize = {
    let mut max = 0;
    let mut row = 0;
    while row < TABLE.len() {
        if TABLE[row].header_len > max {
            max = TABLE[row].header_len;
        }
        row += 1;
    }
    max
};

/// The whole opcode table, one row per opcode softverbs speaks, in opcode order.
pub fn opcode_table() -> &'static [OpcodeInfo] {
    &OPCODES
}

/// Marks an opcode with no row in [`INDEX`].
const NONE: u8 = u8::MAX;

/// Opcode value to row number in [`OPCODES`], built at compile time so lookups are one load.
static INDEX: [u8; 256] = {
    let mut index = [NONE; 256];
    let mut row = 0;
    while row < TABLE.len() {
        let code = TABLE[row].opcode.0 as usize;
        assert!(index[code] == NONE, "opcode listed twice in the table");
        index[code] = row as u8;
        row += 1;
    }
    index
};

/// A table row whose header length follows from its header flags.
const fn row(code: u8, name: &'static str, transport: Transport, flags: &[OpFlags]) -> OpcodeInfo {
    let mut all = OpFlags::empty();
    let mut i = 0;
    while i < flags.len() {
        all = all.union(flags[i]);
        i += 1;
    }
    assert!(
        code & 0xE0 == transport.opcode_base(),
        "opcode's transport bits disagree with its transport"
    );
    OpcodeInfo { opcode: Opcode(code), name, transport, flags: all, header_len: headers_len(all) }
}

/// BTH plus the extension headers `flags` names.
const fn headers_len(flags: OpFlags) -> usize {
    let mut len = BTH_LEN;
    let mut i = 0;
    while i < EXTENSION_HEADERS.len() {
        let (header, _, header_len) = EXTENSION_HEADERS[i];
        if flags.contains(header) {
            len += header_len;
        }
        i += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(op: Opcode) -> &'static OpcodeInfo {
        op.info().expect("opcode is in the table")
    }

    #[test]
    fn table_is_in_order_and_indexed() {
        let codes: Vec<u8> = Opcode::all().map(|op| op.0).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        assert_eq!(codes, sorted);
        assert_eq!(codes.len(), 40);
        for row in opcode_table() {
            assert_eq!(info(row.opcode), row);
        }
    }

    #[test]
    fn known_and_unknown_codes() {
        let known: Vec<u8> = (0x00..=0x14)
            .chain([0x16, 0x17, 0x1C, 0x1D])
            .chain(0x20..=0x2B)
            .chain([0x64, 0x65, 0x81])
            .collect();
        for code in 0..=255u8 {
            assert_eq!(Opcode(code).info().is_some(), known.contains(&code), "{code:#x}");
        }
        // Reserved RC 0x15 and 0x18–0x1B, UC FLUSH and ATOMIC WRITE, RD and XRC are not spoken.
        for code in [0x15, 0x18, 0x1B, 0x1E, 0x2C, 0x3C, 0x3D, 0x40, 0x44, 0x60, 0x80, 0xA4] {
            assert!(Opcode(code).info().is_none(), "{code:#x}");
        }
    }

    #[test]
    fn header_lengths() {
        assert_eq!(info(Opcode::RC_SEND_MIDDLE).header_len, 12);
        assert_eq!(info(Opcode::RC_RDMA_WRITE_FIRST).header_len, 12 + 16);
        assert_eq!(info(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).header_len, 12 + 16 + 4);
        assert_eq!(info(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).header_len, 12 + 16 + 4);
        assert_eq!(info(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE).header_len, 12 + 4);
        assert_eq!(info(Opcode::RC_RDMA_READ_REQUEST).header_len, 12 + 16);
        assert_eq!(info(Opcode::RC_RDMA_READ_RESPONSE_FIRST).header_len, 12 + 4);
        assert_eq!(info(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).header_len, 12);
        assert_eq!(info(Opcode::RC_ACKNOWLEDGE).header_len, 12 + 4);
        assert_eq!(info(Opcode::RC_ATOMIC_ACKNOWLEDGE).header_len, 12 + 4 + 8);
        assert_eq!(info(Opcode::RC_COMPARE_SWAP).header_len, 12 + 28);
        assert_eq!(info(Opcode::RC_SEND_ONLY_WITH_INVALIDATE).header_len, 12 + 4);
        assert_eq!(info(Opcode::UD_SEND_ONLY).header_len, 12 + 8);
        assert_eq!(info(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).header_len, 12 + 8 + 4);
        assert_eq!(info(Opcode::CNP).header_len, 12 + 16);
        assert_eq!(info(Opcode::RC_FLUSH).header_len, 12 + 4 + 16);
        assert_eq!(info(Opcode::RC_ATOMIC_WRITE).header_len, 12 + 16);
    }

    #[test]
    fn header_offsets() {
        let at = |op: Opcode, header| info(op).header_offset(header);
        assert_eq!(at(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, OpFlags::IMMDT), Some(12));
        assert_eq!(at(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, OpFlags::RETH), Some(12));
        assert_eq!(at(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, OpFlags::IMMDT), Some(12 + 16));
        assert_eq!(at(Opcode::RC_ACKNOWLEDGE, OpFlags::AETH), Some(12));
        assert_eq!(at(Opcode::RC_ATOMIC_ACKNOWLEDGE, OpFlags::ATOMIC_ACK_ETH), Some(12 + 4));
        assert_eq!(at(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, OpFlags::IMMDT), Some(12 + 8));
        assert_eq!(at(Opcode::RC_SEND_ONLY, OpFlags::IMMDT), None);
        assert_eq!(at(Opcode::RC_ACKNOWLEDGE, OpFlags::SEND), None);
        // rxe's offsets: FETH right after the BTH, the RETH after it.
        assert_eq!(at(Opcode::RC_FLUSH, OpFlags::FETH), Some(12));
        assert_eq!(at(Opcode::RC_FLUSH, OpFlags::RETH), Some(12 + 4));
        assert_eq!(at(Opcode::RC_ATOMIC_WRITE, OpFlags::RETH), Some(12));
        // The last header of every opcode ends where its payload starts.
        for row in opcode_table() {
            let last = EXTENSION_HEADERS.iter().rev().find(|(flag, ..)| row.flags.contains(*flag));
            let end =
                last.map_or(BTH_LEN, |&(flag, _, len)| row.header_offset(flag).unwrap() + len);
            let reserved = if row.opcode == Opcode::CNP { CNP_RESERVED_LEN } else { 0 };
            assert_eq!(end + reserved, row.header_len, "{}", row.name);
        }
    }

    #[test]
    fn const_rows_are_the_rows() {
        for row in opcode_table() {
            assert!(core::ptr::eq(row.opcode.row(), info(row.opcode)), "{}", row.name);
        }
        const ACK_LEN: usize = Opcode::RC_ACKNOWLEDGE.row().header_len;
        assert_eq!(ACK_LEN, 16);
    }

    #[test]
    fn every_packet_has_a_direction_and_position() {
        for row in opcode_table().iter().filter(|r| r.transport != Transport::Cnp) {
            let f = row.flags;
            assert!(f.contains(OpFlags::REQUEST) != f.contains(OpFlags::RESPONSE), "{}", row.name);
            let position = f.intersection(OpFlags::START | OpFlags::MIDDLE | OpFlags::END);
            assert!(!position.is_empty(), "{}", row.name);
            assert!(!f.contains(OpFlags::MIDDLE) || position == OpFlags::MIDDLE, "{}", row.name);
            let ops = f.intersection(
                OpFlags::SEND
                    | OpFlags::WRITE
                    | OpFlags::READ
                    | OpFlags::ATOMIC
                    | OpFlags::FLUSH
                    | OpFlags::ATOMIC_WRITE,
            );
            // One operation family, except for a plain ACKNOWLEDGE, which acks any of them.
            let families = if row.opcode == Opcode::RC_ACKNOWLEDGE { 0 } else { 1 };
            assert_eq!(ops.bits().count_ones(), families, "{}", row.name);
            // Immediate and invalidate semantics go with their headers.
            assert_eq!(f.contains(OpFlags::IMM), f.contains(OpFlags::IMMDT), "{}", row.name);
            assert_eq!(f.contains(OpFlags::INVALIDATE), f.contains(OpFlags::IETH), "{}", row.name);
            // A responder completion ends a message and consumes a receive WQE.
            assert!(!f.contains(OpFlags::COMP) || f.contains(OpFlags::RWR | OpFlags::END));
            // Every SEND packet needs a receive WQE; the name must match the transport.
            assert!(!f.contains(OpFlags::SEND) || f.contains(OpFlags::RWR), "{}", row.name);
            let prefix = match row.transport {
                Transport::Rc => "RC ",
                Transport::Uc => "UC ",
                Transport::Ud => "UD ",
                Transport::Cnp => unreachable!(),
            };
            assert!(row.name.starts_with(prefix), "{}", row.name);
        }
    }

    #[test]
    fn uc_mirrors_rc() {
        for rc in Opcode::all().filter(|op| op.0 <= 0x0B) {
            let uc = rc.with_transport(Transport::Uc);
            let (rc, uc) = (info(rc), info(uc));
            assert_eq!(rc.flags, uc.flags);
            assert_eq!(rc.header_len, uc.header_len);
            assert_eq!(rc.name[3..], uc.name[3..]);
            assert_eq!(uc.transport, Transport::Uc);
        }
    }

    #[test]
    fn with_transport_swaps_the_top_bits() {
        assert_eq!(Opcode::RC_SEND_ONLY.with_transport(Transport::Ud), Opcode::UD_SEND_ONLY);
        assert_eq!(
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.with_transport(Transport::Rc),
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE
        );
        assert_eq!(
            Opcode::UC_RDMA_WRITE_FIRST.with_transport(Transport::Rc),
            Opcode::RC_RDMA_WRITE_FIRST
        );
        assert_eq!(Opcode::RC_SEND_MIDDLE.with_transport(Transport::Cnp), Opcode::CNP);
    }

    #[test]
    fn payload_only_where_allowed() {
        for op in [
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_FETCH_ADD,
            Opcode::RC_FLUSH,
            Opcode::CNP,
        ] {
            assert!(!info(op).flags.contains(OpFlags::PAYLOAD), "{op}");
        }
        assert!(info(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).flags.contains(OpFlags::PAYLOAD));
    }

    #[test]
    fn display_names() {
        assert_eq!(Opcode::RC_RDMA_WRITE_ONLY.to_string(), "RC RDMA WRITE ONLY");
        assert_eq!(Opcode(0x15).to_string(), "UNKNOWN(0x15)");
    }
}
