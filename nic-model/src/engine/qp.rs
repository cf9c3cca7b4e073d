//! Queue pairs: the work queues, the requester/responder/completer state each QP carries, and
//! the QP state machine (attributes, reset, and the error transition with its flush). The QP
//! verbs are in `qp_verbs`.

use std::any::Any;
use std::collections::VecDeque;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use verbs_api::{
    AsyncElement, AsyncEvent, AsyncEventType, AtomicTarget, QpAttr, QpAttrMask, QpCap, QpState,
    QpType, RdmaTarget, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use super::addr::Ip6Path;
use super::cq::CqId;
use super::mr::PdId;
use super::{Hca, Hex, NicEvent};
use crate::packet::Psn;

/// A WQE's scatter/gather list as posted. A single SGE, the common case, is kept inline so that
/// posting a WR allocates nothing; other lengths live on the heap. Reads as `&[Sge]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SgList {
    /// Exactly one SGE.
    One(Sge),
    /// None, or more than one.
    Many(Vec<Sge>),
}

impl Default for SgList {
    fn default() -> SgList {
        SgList::Many(Vec::new())
    }
}

impl From<&[Sge]> for SgList {
    fn from(sges: &[Sge]) -> SgList {
        match sges {
            [one] => SgList::One(*one),
            _ => SgList::Many(sges.to_vec()),
        }
    }
}

impl Deref for SgList {
    type Target = [Sge];
    fn deref(&self) -> &[Sge] {
        match self {
            SgList::One(sge) => std::slice::from_ref(sge),
            SgList::Many(sges) => sges,
        }
    }
}

/// Bytes of inline data a send WQE holds in place; longer inline data (up to the device's
/// `max_inline_data`) lives on the heap.
pub const INLINE_IN_WQE: usize = 64;

/// The data of an inline send (`IBV_SEND_INLINE`), copied at post time as a NIC copies it into
/// the WQE. Up to [`INLINE_IN_WQE`] bytes are kept in the WQE itself, so that posting a small
/// inline send allocates nothing. Reads as `&[u8]`.
#[derive(Clone)]
pub enum InlineData {
    /// At most [`INLINE_IN_WQE`] bytes: the first `len` of `bytes`.
    InWqe {
        /// Bytes in use.
        len: u8,
        /// The data, then unused bytes.
        bytes: [u8; INLINE_IN_WQE],
    },
    /// More than [`INLINE_IN_WQE`] bytes.
    Heap(Vec<u8>),
}

impl InlineData {
    /// `len` bytes, written by `fill` into a zeroed buffer of exactly that length.
    pub fn filled<E>(
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<InlineData, E> {
        if len <= INLINE_IN_WQE {
            let mut bytes = [0u8; INLINE_IN_WQE];
            fill(&mut bytes[..len])?;
            // Fits: len <= INLINE_IN_WQE < 256.
            Ok(InlineData::InWqe { len: len as u8, bytes })
        } else {
            let mut bytes = vec![0u8; len];
            fill(&mut bytes)?;
            Ok(InlineData::Heap(bytes))
        }
    }
}

impl From<&[u8]> for InlineData {
    fn from(data: &[u8]) -> InlineData {
        if data.len() <= INLINE_IN_WQE {
            let mut bytes = [0u8; INLINE_IN_WQE];
            bytes[..data.len()].copy_from_slice(data);
            // Fits: len <= INLINE_IN_WQE < 256.
            InlineData::InWqe { len: data.len() as u8, bytes }
        } else {
            InlineData::Heap(data.to_vec())
        }
    }
}

impl Deref for InlineData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            InlineData::InWqe { len, bytes } => &bytes[..usize::from(*len)],
            InlineData::Heap(bytes) => bytes,
        }
    }
}

impl std::fmt::Debug for InlineData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InlineData({} bytes)", self.len())
    }
}

/// Where a UD send goes (`wr.ud` of `ibv_post_send`), resolved when it is posted: the address
/// handle's port address, the remote QPN and the Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// IPv4 address of the destination port.
    pub dst_ip: [u8; 4],
    /// IPv4 TOS and TTL, from the address handle's GRH (see [`Qp::ip_tos_ttl`]).
    pub ip_tos_ttl: (u8, u8),
    /// RoCE v2 over IPv6: the address handle sends from the port's link-local GID (index 0)
    /// to a port's link-local GID, with these addresses and flow label.
    pub(crate) ip6: Option<super::addr::Ip6Path>,
    /// `remote_qpn`.
    pub remote_qpn: u32,
    /// `remote_qkey` (high bit set: use the QP's own Q_Key).
    pub remote_qkey: u32,
}

/// IPv4 TOS and TTL of packets whose address vector has no GRH: IpUdp's defaults.
pub const DEFAULT_TOS_TTL: (u8, u8) = (0, 64);

/// The IPv4 TOS and TTL an address vector gives its packets: RoCEv2 carries the GRH's
/// `traffic_class` in the IPv4 TOS byte and its `hop_limit` in the TTL, as rxe sends them.
pub fn ip_tos_ttl(av: &verbs_api::AhAttr) -> (u8, u8) {
    if av.is_global {
        (av.traffic_class, av.hop_limit)
    } else {
        DEFAULT_TOS_TTL
    }
}

/// A posted send WR, with its progress through the requester.
#[derive(Clone, Debug)]
pub struct SendWqe {
    /// `wr_id`.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Generates a completion on success.
    pub signaled: bool,
    /// Sets SE on the last packet.
    pub solicited: bool,
    /// Waits for earlier READs/atomics.
    pub fence: bool,
    /// The gather list (empty for inline data).
    pub sges: SgList,
    /// The data of an inline send, copied at post time.
    pub inline: Option<InlineData>,
    /// Message length in bytes (8 for atomics).
    pub len: u32,
    /// WRITE/READ target.
    pub rdma: RdmaTarget,
    /// Atomic operands.
    pub atomic: AtomicTarget,
    /// A FLUSH's placement type and level (its length is `len`, its target `rdma`).
    pub flush: verbs_api::FlushTarget,
    /// Immediate data (host order), or the rkey a LOCAL_INV or SEND_WITH_INV invalidates
    /// (C's `imm_data`/`invalidate_rkey` union).
    pub imm: u32,
    /// What a BIND_MW binds (boxed: only bind WRs carry one).
    pub bind: Option<Box<verbs_api::MwBind>>,
    /// UD destination, resolved from the address handle at post time.
    pub ud: Option<UdDest>,
    /// The first PSN, once started.
    pub first_psn: Psn,
    /// PSNs this WQE uses (packets; for READ, response packets).
    pub npsn: u32,
    /// Whether the requester has started it (its PSNs are fixed from then on).
    pub started: bool,
}

impl SendWqe {
    /// READ or atomic: needs a response, counts against `max_rd_atomic`. An ATOMIC WRITE or
    /// FLUSH is answered by a response too, but counts against nothing and is retired by a
    /// later ACK as a WRITE is, as in rxe (its `WR_ATOMIC_OR_READ_MASK` leaves them out).
    pub fn is_rd_atomic(&self) -> bool {
        self.opcode == WrOpcode::RdmaRead || self.opcode.is_atomic()
    }
    /// The last PSN it uses.
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }
}

/// A posted receive WR.
#[derive(Clone, Debug)]
pub struct RecvWqe {
    /// `wr_id`.
    pub wr_id: u64,
    /// The scatter list.
    pub sges: SgList,
    /// Total capacity in bytes.
    pub len: u64,
}

/// Requester and completer state of one QP (the send side).
#[derive(Clone, Debug, Default)]
pub struct ReqState {
    /// Index in the SQ of the next WQE to (continue to) send.
    pub next: usize,
    /// Packets of `sq[next]` already sent.
    pub pkt: u32,
    /// The next PSN to send.
    pub psn: Psn,
    /// The oldest PSN not yet acknowledged.
    pub comp_psn: Psn,
    /// One past the highest PSN ever sent (to tell retransmissions from first sends).
    pub high_psn: Psn,
    /// Transport retries left (`retry_cnt`, reset on progress).
    pub retry_left: u8,
    /// RNR retries left (`rnr_retry`; 7 = infinite).
    pub rnr_left: u8,
    /// Local ACK timeout deadline, armed while packets are unacknowledged.
    pub timer_ns: Option<u64>,
    /// RNR back-off deadline; the requester is paused until then.
    pub rnr_timer_ns: Option<u64>,
    /// The PSN a go-back-N triggered by a NAK or out-of-order response restarted from, so one
    /// loss costs one retry rather than one per late packet.
    pub retrying_from: Option<Psn>,
}

/// What a responder remembers of an executed READ or atomic, to answer duplicates.
#[derive(Clone, Debug)]
pub enum RdResource {
    /// A READ: re-executed from memory on a duplicate request.
    Read {
        /// First response PSN.
        psn: Psn,
        /// Response packets.
        npkts: u32,
        /// Remote key, address and length of the original request.
        rkey: u32,
        /// Virtual address.
        va: u64,
        /// Length.
        len: u32,
        /// MSN to report.
        msn: u32,
    },
    /// An atomic: a duplicate is answered from the saved original value, never re-executed.
    Atomic {
        /// Its PSN.
        psn: Psn,
        /// The original remote data it returned.
        orig: u64,
        /// MSN to report.
        msn: u32,
    },
    /// An ATOMIC WRITE or a FLUSH: a duplicate is answered with its zero-length RDMA READ
    /// RESPONSE ONLY again, never executed twice (IBA 1.5 oA19-14, oA19-15; rxe's `replay`).
    Replied {
        /// Its PSN.
        psn: Psn,
        /// MSN to report.
        msn: u32,
    },
}

/// An RDMA WRITE being received.
#[derive(Clone, Copy, Debug)]
pub struct WriteCtx {
    /// The MR key.
    pub rkey: u32,
    /// Next virtual address to write.
    pub va: u64,
    /// Bytes still expected.
    pub remaining: u32,
    /// Total length (`byte_len` of a WRITE_WITH_IMM completion).
    pub total: u32,
}

/// One word of a host's memory where a responder QP's expected PSN is kept current for the
/// peers that reach it (a slot of the port's reach file): the responder stores every move
/// there ([`RespState::set_epsn`]), before the ACK that tells the requester of it
/// is sent, so a requester whose requests were all acknowledged finds the PSN its next
/// request would carry. A plain store, no system call.
#[derive(Clone)]
pub struct PsnMirror {
    word: NonNull<AtomicU32>,
    _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the word is shared memory reached only atomically, valid while `_keep` lives.
unsafe impl Send for PsnMirror {}
// SAFETY: as above.
unsafe impl Sync for PsnMirror {}

impl PsnMirror {
    /// A mirror writing to `word`.
    ///
    /// # Safety
    /// `word` must stay valid for atomic access as long as `keep` lives.
    pub unsafe fn new(word: NonNull<AtomicU32>, keep: Arc<dyn Any + Send + Sync>) -> PsnMirror {
        PsnMirror { word, _keep: keep }
    }

    #[inline]
    pub(crate) fn store(&self, psn: Psn) {
        // SAFETY: `new`'s contract keeps the word valid while `_keep` lives, as it does here.
        unsafe { self.word.as_ref() }.store(psn.value(), Ordering::Release);
    }
}

impl std::fmt::Debug for PsnMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PsnMirror").field("word", &self.word).finish()
    }
}

/// Responder state of one QP (the receive side).
#[derive(Clone, Debug, Default)]
pub struct RespState {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number: request messages completed.
    pub msn: u32,
    /// A PSN-sequence NAK was sent and the expected PSN has not arrived since.
    pub nak_sent: bool,
    /// The receive WQE a multi-packet SEND is filling, and bytes so far.
    pub recv: Option<(RecvWqe, u64)>,
    /// The WRITE being received.
    pub write: Option<WriteCtx>,
    /// Saved READ/atomic resources, oldest first (at most `max_dest_rd_atomic`).
    pub resources: VecDeque<RdResource>,
    /// UC: drop packets until the next FIRST/ONLY after a gap.
    pub drop_msg: bool,
    /// Where the host keeps `epsn` for peers that reach this QP (direct reach): written
    /// whenever `epsn` moves, before any ACK that follows ([`RespState::set_epsn`]).
    pub(crate) mirror: Option<PsnMirror>,
}

impl RespState {
    /// Moves the expected PSN, and its mirror with it: a requester that learns of the move
    /// from this responder's ACK (sent after this) finds the new value published.
    #[inline]
    pub fn set_epsn(&mut self, psn: Psn) {
        self.epsn = psn;
        if let Some(m) = &self.mirror {
            m.store(psn);
        }
    }
}

/// One queue pair.
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Transport.
    pub qp_type: QpType,
    /// Its PD.
    pub pd: PdId,
    /// Send CQ.
    pub send_cq: CqId,
    /// Receive CQ.
    pub recv_cq: CqId,
    /// The SRQ its receives come from, if any.
    pub srq: Option<u32>,
    /// Capacities.
    pub cap: QpCap,
    /// Every send WR completes visibly.
    pub sq_sig_all: bool,
    /// State.
    pub state: QpState,
    /// Attributes as last modified.
    pub attr: QpAttr,
    /// Destination IPv4 address (from the address vector): the port the wires deliver to.
    pub dst_ip: [u8; 4],
    /// An RC/UC QP that sends from an IPv6 GID: its datagrams' IPv6 addresses and flow label
    /// (RoCE v2 over IPv6); `None` for RoCE v2 over IPv4.
    pub(crate) ip6: Option<Ip6Path>,
    /// IPv4 TOS and TTL of its packets: the address vector's GRH `traffic_class` and
    /// `hop_limit` (as rxe maps them), or 0 and 64 for a vector without a GRH.
    pub ip_tos_ttl: (u8, u8),
    /// UDP source port: per-QP entropy, as RoCEv2 NICs choose it.
    pub sport: u16,
    /// The responder's ACK datagram, prebuilt when the QP (RC) reaches RTR with its path
    /// known, and rebuilt by every later `modify`; `None` before that.
    pub(crate) ack_template: Option<crate::packet::AckTemplate>,
    /// Send queue: posted and not yet completed, oldest first.
    pub sq: VecDeque<SendWqe>,
    /// Receive queue.
    pub rq: VecDeque<RecvWqe>,
    /// Requester/completer.
    pub req: ReqState,
    /// Responder.
    pub resp: RespState,
    /// The deadline the NIC's timer index files this QP under (the earlier of its two timers
    /// when it was last refiled); kept apart from `req` so a reset cannot lose track of it.
    pub timer_filed_ns: Option<u64>,
}

impl Qp {
    /// A new QP in RESET.
    pub fn new(
        qpn: u32,
        qp_type: QpType,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Qp {
        Qp {
            qpn,
            qp_type,
            pd,
            send_cq,
            recv_cq,
            srq: None,
            cap,
            sq_sig_all,
            state: QpState::Reset,
            attr: QpAttr::default(),
            dst_ip: [0; 4],
            ip6: None,
            ip_tos_ttl: DEFAULT_TOS_TTL,
            sport: 0xC000 | (qpn.wrapping_mul(0x9E37_79B1) >> 18) as u16,
            ack_template: None,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            req: ReqState::default(),
            resp: RespState::default(),
            timer_filed_ns: None,
        }
    }

    /// Store the attributes a (validated) modify carries.
    pub fn apply_attrs(&mut self, attr: &QpAttr, mask: QpAttrMask) {
        let a = &mut self.attr;
        let m = mask;
        if m.contains(QpAttrMask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if m.contains(QpAttrMask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if m.contains(QpAttrMask::PORT) {
            a.port_num = attr.port_num;
        }
        if m.contains(QpAttrMask::QKEY) {
            a.qkey = attr.qkey;
        }
        if m.contains(QpAttrMask::AV) {
            a.ah_attr = attr.ah_attr;
        }
        if m.contains(QpAttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if m.contains(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if m.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            self.req.retry_left = attr.retry_cnt;
        }
        if m.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            self.req.rnr_left = attr.rnr_retry;
        }
        if m.contains(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
            self.resp.set_epsn(Psn::new(attr.rq_psn));
        }
        if m.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
            self.req.psn = Psn::new(attr.sq_psn);
            self.req.comp_psn = Psn::new(attr.sq_psn);
            self.req.high_psn = Psn::new(attr.sq_psn);
        }
        if m.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m.contains(QpAttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if m.contains(QpAttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if m.contains(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
    }

    /// Back to the state of a freshly created QP (the `* -> RESET` transition): queues emptied
    /// without completions, as the specification says.
    pub fn reset(&mut self) {
        self.state = QpState::Reset;
        self.attr = QpAttr::default();
        self.sq.clear();
        self.rq.clear();
        self.req = ReqState::default();
        self.resp = RespState::default();
        self.ack_template = None;
        self.dst_ip = [0; 4];
        self.ip6 = None;
        self.ip_tos_ttl = DEFAULT_TOS_TTL;
    }

    /// Whether a packet from the IPv4 address `src` may reach this QP's transport. An RC or UC
    /// QP is connected to one remote QP, at the port its address vector names, and takes
    /// packets of that connection only: rxe's `check_addr` drops a packet whose source address
    /// is not the vector's destination. A packet from any other port, such as a stale
    /// connection's retransmission to a new QP that got the same number, is not for it. The
    /// BTH names only the destination QP, so the address is what can be checked. UD takes
    /// anyone's, and a QP without a path yet (RESET, INIT) turns every packet away by its
    /// state anyway.
    /// A QP whose path is IPv6 takes no IPv4 packet from it: each path speaks one version.
    #[inline]
    pub(crate) fn is_from_path(&self, src: [u8; 4]) -> bool {
        (src == self.dst_ip && self.ip6.is_none())
            || self.qp_type == QpType::Ud
            || matches!(self.state, QpState::Reset | QpState::Init)
    }

    /// [`Qp::is_from_path`] for an IPv6 packet from `src`: an RC or UC QP whose path is IPv6
    /// takes it from its `dgid` only; UD takes anyone's, as over IPv4 (the receive's GRH area
    /// then holds the IPv6 header).
    pub(crate) fn is_from_path6(&self, src: &[u8; 16]) -> bool {
        self.qp_type == QpType::Ud
            || self.ip6.is_some_and(|p| p.dst == *src)
            || matches!(self.state, QpState::Reset | QpState::Init)
    }

    /// Outstanding READ/atomic WQEs (sent, not completed).
    pub fn rd_atomic_outstanding(&self) -> usize {
        self.sq.iter().take(self.req.next).filter(|w| w.is_rd_atomic()).count()
    }

    /// Path MTU in bytes.
    pub fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// Packets a message of `len` bytes takes at this QP's MTU (a zero-length message is one packet).
    pub fn packets_for(&self, len: u32) -> u32 {
        len.div_ceil(self.mtu()).max(1)
    }
}

impl Hca {
    /// Move a QP to the error state: the failing WQE has been completed by the caller; every
    /// other outstanding send and receive WQE completes with `WR_FLUSH_ERR`.
    ///
    /// `event` is the affiliated async event the IBA gives (`man ibv_get_async_event`):
    /// a responder that NAKs an access violation raises `IBV_EVENT_QP_ACCESS_ERR`, an invalid
    /// request `IBV_EVENT_QP_REQ_ERR`, a failure it cannot report otherwise
    /// `IBV_EVENT_QP_FATAL`, as mlx5 does; a requester whose error is in a work completion
    /// (`RETRY_EXC_ERR`, `REM_ACCESS_ERR`, a local error) raises none: the completion says it.
    pub(crate) fn enter_error(&mut self, qp: &mut Qp, event: Option<AsyncEventType>) {
        if qp.state != QpState::Err {
            tracing::warn!(device = %self.cfg.name, qpn = %Hex(qp.qpn), from = ?qp.state,
                to = ?QpState::Err, event = ?event, "QP state change: an error moves it to ERR");
            qp.state = QpState::Err;
            self.qp_epoch += 1;
            if let Some(event_type) = event {
                self.events.push_back(NicEvent::Async(AsyncEvent {
                    event_type,
                    element: AsyncElement::Qp(qp.qpn),
                }));
            }
        }
        self.flush(qp);
    }

    /// Flush every WQE of a QP in the error state.
    pub(crate) fn flush(&mut self, qp: &mut Qp) {
        tracing::debug!(device = %self.cfg.name, qpn = %Hex(qp.qpn), send_wqes = qp.sq.len(),
            recv_wqes = qp.rq.len() + usize::from(qp.resp.recv.is_some()),
            "flushing the QP's work requests with WR_FLUSH_ERR");
        qp.req.timer_ns = None;
        qp.req.rnr_timer_ns = None;
        qp.req.next = 0;
        qp.req.pkt = 0;
        while let Some(w) = qp.sq.pop_front() {
            let wc = WorkCompletion {
                wr_id: w.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::for_send(w.opcode),
                qp_num: qp.qpn,
                ..WorkCompletion::default()
            };
            self.complete(qp.send_cq, wc, false);
        }
        if let Some((w, _)) = qp.resp.recv.take() {
            self.complete_recv(
                qp,
                w.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                0,
                None,
                0,
                0,
                false,
            );
        }
        qp.resp.write = None;
        while let Some(w) = qp.rq.pop_front() {
            self.complete_recv(
                qp,
                w.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                0,
                None,
                0,
                0,
                false,
            );
        }
        if qp.srq.is_some() {
            // A QP on an SRQ will consume no more of its WQEs: it may now be destroyed.
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::QpLastWqeReached,
                element: AsyncElement::Qp(qp.qpn),
            }));
        }
    }
}
