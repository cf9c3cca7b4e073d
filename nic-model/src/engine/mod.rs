//! The transport engine of one software NIC, sans-IO in the quinn-proto style: it never reads a
//! clock, sleeps, spawns or does I/O. Inputs are verbs calls, [`Nic::handle_packet`] and
//! [`Nic::handle_timeout`], each with `now` in nanoseconds (or, for a received packet, the
//! caller's clock, read only if the packet arms a timer: [`Nic::handle_packet_at`]); outputs
//! are pulled:
//! [`Nic::poll_transmit`] (RoCEv2 datagrams to put on a wire), [`Nic::next_timeout`],
//! [`Nic::poll_event`] (CQ notifications, async events) and the completions in each CQ.
//!
//! The transport is split as the specification and Linux's rxe split it: `req` (the requester
//! turns WQEs into request packets), `resp` (the responder executes requests and answers) and
//! `comp` (the completer retires WQEs on ACKs and runs the retry and RNR timers).

mod comp;
pub mod cq;
pub mod mr;
pub mod qp;
mod req;
mod resp;
mod srq;
mod timers;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use verbs_api::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventType, DeviceAttr, Error, Gid, LinkLayer, Mtu,
    PortAttr, PortState, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, Result, SendFlags,
    SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use crate::packet::{self, IpUdp, Packet};
use cq::{Arm, Cq, CqId};
use mr::{MrMemory, MrTable, PdId};
use qp::{Qp, RecvWqe, SendWqe};
use timers::TimerIndex;

/// Virtual or monotonic time in nanoseconds; the engine never reads a clock itself.
pub type Nanos = u64;

/// The time of one call into the engine: given by the caller ([`Now::At`]), or read from the
/// caller's clock the first time the engine needs it and then the same for the rest of the call
/// ([`Now::Lazy`]). The engine needs the time only to arm a timer, so a real-time host that
/// hands over its clock reads it for no call that arms none: a received SEND, an ACK that
/// retires everything in flight. The engine itself still reads no clock.
pub enum Now<'c> {
    /// This time.
    At(Nanos),
    /// What this clock says when first asked.
    Lazy(&'c mut dyn FnMut() -> Nanos),
}

impl Now<'_> {
    /// The time of the call: the clock is read the first time only.
    pub fn get(&mut self) -> Nanos {
        match self {
            Now::At(t) => *t,
            Now::Lazy(clock) => {
                let t = clock();
                *self = Now::At(t);
                t
            }
        }
    }

    /// The deadline of a local ACK timer of `timeout` ns armed now: `now + timeout` if the time
    /// is known, else [`UNSTAMPED`], which the host turns into a deadline at its next look at
    /// the clock ([`Nic::stamp_timers`]). The timeout is the least time the requester waits
    /// (IBA 9.7.6.1.3 lets it wait longer), so starting it a little late is within the rules,
    /// and a post, which arms the timer for every message sent into an idle QP, reads no clock.
    pub(crate) fn ack_deadline(&self, timeout: Nanos) -> Nanos {
        match self {
            Now::At(t) => t + timeout,
            Now::Lazy(_) => UNSTAMPED,
        }
    }
}

/// The deadline of a local ACK timer armed while the time was not read ([`Now::ack_deadline`]):
/// earlier than any real deadline (each is at least a timeout after the clock's start), so the
/// timer index files these first and the host's next timer check finds them.
pub(crate) const UNSTAMPED: Nanos = 0;

/// The IPv4 address softverbs gives the port with this LID (`10.0.x.y`, `x.y` = the LID).
pub fn ip_of_lid(lid: u16) -> [u8; 4] {
    [10, 0, (lid >> 8) as u8, lid as u8]
}

/// The LID of a softverbs port address (inverse of [`ip_of_lid`]; 0 for foreign addresses).
pub fn lid_of_ip(ip: [u8; 4]) -> u16 {
    if ip[0] == 10 && ip[1] == 0 {
        u16::from_be_bytes([ip[2], ip[3]])
    } else {
        0
    }
}

/// Where an address vector (`ibv_ah_attr`) points: the IPv4 address of a softverbs port, from
/// its GID when `is_global`, else from its LID; otherwise what is wrong with it.
fn av_destination(av: &verbs_api::AhAttr) -> std::result::Result<[u8; 4], String> {
    if av.is_global {
        av.dgid.to_ipv4().ok_or_else(|| {
            format!("dgid {} is not an IPv4-mapped GID of a softverbs port", av.dgid)
        })
    } else if av.dlid == 0 {
        Err("dlid 0 without a GRH (is_global) names no port".into())
    } else {
        Ok(ip_of_lid(av.dlid))
    }
}

/// `ibv_create_ah`'s checks, for backends whose address handles live outside the engine: the
/// vector must name a softverbs port, on port 1.
pub fn check_ah(attr: &verbs_api::AhAttr) -> Result<()> {
    av_destination(attr).map_err(|why| Error::inval(format!("ibv_create_ah: {why}")))?;
    if attr.port_num > 1 {
        return Err(Error::inval(format!(
            "ibv_create_ah: port_num {} does not exist (the device has port 1)",
            attr.port_num
        )));
    }
    Ok(())
}

/// Device limits (the `ibv_device_attr` a soft NIC reports and enforces).
#[derive(Clone, Debug)]
pub struct Limits {
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_pd`.
    pub max_pd: u32,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_inline_data`.
    pub max_inline_data: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `max_qp_rd_atom` and `max_qp_init_rd_atom`.
    pub max_rd_atom: u8,
    /// `max_srq`.
    pub max_srq: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qp: 1024,
            max_qp_wr: 16384,
            max_sge: 32,
            max_cq: 1024,
            max_cqe: 65536,
            max_mr: 4096,
            max_pd: 1024,
            max_mr_size: 1 << 32,
            max_inline_data: 256,
            max_msg_sz: 1 << 30,
            max_rd_atom: 16,
            max_srq: 256,
        }
    }
}

/// What a NIC is: its name, identity, address and limits.
#[derive(Clone, Debug)]
pub struct NicConfig {
    /// Device name (`softverbs0`).
    pub name: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Port 1's LID, assigned by the fabric.
    pub lid: u16,
    /// Largest path MTU.
    pub max_mtu: Mtu,
    /// Limits.
    pub limits: Limits,
    /// Treat `retry_cnt = 7` as infinite, as Linux rxe does (the verbs documentation does not).
    pub retry_cnt_7_infinite: bool,
    /// ACK-request every this many packets of a long message, besides the last one.
    pub ack_every: u32,
    /// Unacknowledged packets a QP may have in flight.
    pub window: u32,
}

impl NicConfig {
    /// A NIC with default limits on the port with this LID.
    pub fn new(name: impl Into<String>, lid: u16) -> NicConfig {
        NicConfig {
            name: name.into(),
            node_guid: 0x0200_5eff_fe00_0000 | lid as u64,
            lid,
            max_mtu: Mtu::Mtu4096,
            limits: Limits::default(),
            retry_cnt_7_infinite: false,
            ack_every: 64,
            window: 512,
        }
    }
    /// The port's IPv4 address.
    pub fn ip(&self) -> [u8; 4] {
        ip_of_lid(self.lid)
    }
    /// The port's GID (IPv4-mapped).
    pub fn gid(&self) -> Gid {
        Gid::from_ipv4(self.ip())
    }
}

/// The longest datagram that goes straight onto a host's [`Wire`] (built on the stack, then
/// copied into the wire's buffer). Longer ones take the transmit queue: for full-MTU packets
/// the queue's reused buffers measured faster (1 MiB WRITE bandwidth), and the saving is in
/// small packets, the ones latency waits for.
const DIRECT_DATAGRAM: usize = 256;

/// Datagram buffers a NIC keeps for reuse ([`Nic::recycle`]): enough for a full send window
/// (512 packets) in flight on two QPs.
pub const SPARE_BUFFERS: usize = 1024;

/// The largest buffer a NIC keeps for reuse: an IPv4 datagram is at most 65535 bytes.
const SPARE_MAX_BYTES: usize = 1 << 16;

/// A datagram to put on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IPv4 address (a port: see [`lid_of_ip`]).
    pub dst: [u8; 4],
    /// The IPv4/UDP/RoCEv2 datagram.
    pub data: Vec<u8>,
}

/// What a [`Wire`] did with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireOutcome {
    /// It is on the wire.
    Sent,
    /// The wire has no room for it now (the destination's inbox is full).
    Full,
    /// No port has the destination address: the datagram is gone, as a NIC's is.
    Unreachable,
}

/// A way onto the wire that a host can lend its NIC ([`Nic::set_wire`]), so that a datagram
/// goes into the wire's own buffer (a ring slot) as soon as it is made, instead of into a
/// [`Transmit`] that waits in a queue until the host copies it there. While the NIC's transmit
/// queue is empty and the wire is not paused ([`Nic::pause_wire`]), every datagram of up to
/// 256 bytes goes this way (the ACKs and small messages that latency waits for); one the wire
/// refuses (`Full`) is queued for [`Nic::poll_transmit`], and so is everything after it, so
/// order holds. An ACK sent this way is not coalesced with the next.
pub trait Wire: Send {
    /// Puts `datagram` for `dst` on the wire (copies it into the wire's buffer), unless the
    /// outcome is `Full` or `Unreachable`.
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> WireOutcome;
}

/// Something the program may want to be woken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicEvent {
    /// An armed CQ got a completion (`ibv_get_cq_event` will return it).
    CqNotify(CqId),
    /// An asynchronous event (`ibv_get_async_event`).
    Async(AsyncEvent),
}

/// Counters of what the NIC did; the simulator's summary and the tests read them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Packets emitted.
    pub tx_packets: u64,
    /// Packets accepted by the parser.
    pub rx_packets: u64,
    /// Packets dropped because they did not parse (bad ICRC, truncated, foreign).
    pub rx_malformed: u64,
    /// Of those, ICRC mismatches.
    pub rx_bad_icrc: u64,
    /// Packets for a QP that does not exist or is not in a state to take them.
    pub rx_no_qp: u64,
    /// Duplicate requests seen by a responder.
    pub rx_duplicates: u64,
    /// Packets retransmitted by go-back-N.
    pub retransmits: u64,
    /// Local ACK timeouts that fired.
    pub timeouts: u64,
    /// PSN-sequence-error NAKs sent.
    pub seq_naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// UC/UD messages dropped (gaps, Q_Key mismatch, no receive WQE).
    pub dropped_messages: u64,
    /// SEND/WRITE packets whose payload does not fit their place in the message at the path
    /// MTU (RC: NAK invalid request; UC: the message is dropped).
    pub rx_bad_length: u64,
}

/// One software NIC: its PDs, MRs, CQs and QPs, and the transport that runs them.
pub struct Nic {
    qps: BTreeMap<u32, Qp>,
    /// Every QP with an armed timer, by its earliest deadline, so that [`Nic::next_timeout`]
    /// is not a walk over every QP. Each entry point that may arm, move or clear a QP's timers
    /// refiles that QP ([`refile_timer`]).
    timers: TimerIndex,
    hca: Hca,
}

/// File `qp` in the timer index under its earliest deadline, after a call that may have armed,
/// moved or cleared its local ACK or RNR timer.
#[inline]
fn refile_timer(timers: &mut TimerIndex, qp: &mut Qp) {
    let due = match (qp.req.timer_ns, qp.req.rnr_timer_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if due != qp.timer_filed_ns {
        timers.refile(qp.qpn, qp.timer_filed_ns, due);
        qp.timer_filed_ns = due;
    }
}

/// The parts of the NIC that QPs share, split from the QP table so a QP and the rest can be
/// borrowed at once.
pub(crate) struct Hca {
    cfg: NicConfig,
    mrs: MrTable,
    cqs: BTreeMap<CqId, Cq>,
    pds: BTreeMap<PdId, u32>,
    srqs: BTreeMap<u32, srq::Srq>,
    next_srq: u32,
    next_pd: PdId,
    next_cq: CqId,
    next_qpn: u32,
    tx: VecDeque<Transmit>,
    /// The QP whose ACK is the last datagram in `tx`, if it is one: a later ACK of that QP
    /// replaces it (`resp::ack`).
    last_tx_ack: Option<u32>,
    /// The host's wire, if it lent one ([`Nic::set_wire`]).
    wire: Option<Box<dyn Wire>>,
    /// The host has datagrams the wire refused: until they are gone, everything queues.
    wire_paused: bool,
    /// Datagram buffers given back with [`Nic::recycle`], reused by the next transmits.
    spare: Vec<Vec<u8>>,
    /// The requester's payload buffer, kept between calls so sending allocates nothing.
    pub(crate) scratch: Vec<u8>,
    events: VecDeque<NicEvent>,
    /// [`Nic::completions_pending`].
    reportable: usize,
    stats: NicStats,
    ip_ident: u16,
}

impl Nic {
    /// A NIC with no resources.
    pub fn new(cfg: NicConfig) -> Nic {
        Nic {
            qps: BTreeMap::new(),
            timers: TimerIndex::default(),
            hca: Hca {
                cfg,
                mrs: MrTable::default(),
                cqs: BTreeMap::new(),
                pds: BTreeMap::new(),
                srqs: BTreeMap::new(),
                next_srq: 1,
                next_pd: 1,
                next_cq: 1,
                next_qpn: 0x11,
                tx: VecDeque::new(),
                last_tx_ack: None,
                wire: None,
                wire_paused: false,
                spare: Vec::new(),
                scratch: Vec::new(),
                events: VecDeque::new(),
                reportable: 0,
                stats: NicStats::default(),
                ip_ident: 0,
            },
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &NicConfig {
        &self.hca.cfg
    }

    /// Its counters.
    pub fn stats(&self) -> &NicStats {
        &self.hca.stats
    }

    /// `ibv_query_device`.
    pub fn device_attr(&self) -> DeviceAttr {
        let l = &self.hca.cfg.limits;
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid: self.hca.cfg.node_guid,
            sys_image_guid: self.hca.cfg.node_guid,
            max_mr_size: l.max_mr_size,
            vendor_id: 0x5346,
            vendor_part_id: 1,
            hw_ver: 1,
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            max_sge: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_rd_atom as u32,
            max_qp_init_rd_atom: l.max_rd_atom as u32,
            max_srq: l.max_srq,
            max_srq_wr: l.max_qp_wr,
            max_srq_sge: l.max_sge,
            max_ah: 65536,
            max_pkeys: 1,
            phys_port_cnt: 1,
            max_inline_data: l.max_inline_data,
            max_msg_sz: l.max_msg_sz,
            atomic_hca: true,
        }
    }

    /// `ibv_query_port` for port 1.
    pub fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: PortState::Active,
            max_mtu: self.hca.cfg.max_mtu,
            active_mtu: self.hca.cfg.max_mtu,
            gid_tbl_len: 1,
            max_msg_sz: self.hca.cfg.limits.max_msg_sz,
            pkey_tbl_len: 1,
            lid: self.hca.cfg.lid,
            sm_lid: 1,
            lmc: 0,
            active_width: 2,
            active_speed: 32,
            phys_state: 5,
            link_layer: LinkLayer::Ethernet,
        }
    }

    // ---- PDs and MRs ----

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
        if self.hca.mrs.any_in_pd(pd) || qps > 0 || srqs > 0 {
            return Err(Error::busy(format!(
                "ibv_dealloc_pd: PD {pd} still has MRs, QPs or SRQs ({qps} QPs, {srqs} SRQs)"
            )));
        }
        self.hca.pds.remove(&pd);
        Ok(())
    }

    /// `ibv_reg_mr`: returns the key (lkey = rkey).
    pub fn reg_mr(&mut self, pd: PdId, memory: Arc<MrMemory>, access: AccessFlags) -> Result<u32> {
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_reg_mr: PD {pd} does not exist")));
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
        if self.hca.mrs.len() >= self.hca.cfg.limits.max_mr as usize {
            return Err(Error::nomem(format!(
                "ibv_reg_mr: the device's max_mr {} is reached",
                self.hca.cfg.limits.max_mr
            )));
        }
        Ok(self.hca.mrs.insert(pd, memory, access))
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, key: u32) -> Result<()> {
        self.hca
            .mrs
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| Error::inval(format!("ibv_dereg_mr: no MR with key {key:#x}")))
    }

    // ---- CQs ----

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId> {
        let l = &self.hca.cfg.limits;
        if cqe == 0 || cqe > l.max_cqe {
            return Err(Error::inval(format!(
                "ibv_create_cq: cqe {cqe} is not in 1..={}",
                l.max_cqe
            )));
        }
        if self.hca.cqs.len() >= l.max_cq as usize {
            return Err(Error::nomem(format!(
                "ibv_create_cq: the device's max_cq {} is reached",
                l.max_cq
            )));
        }
        let id = self.hca.next_cq;
        self.hca.next_cq += 1;
        self.hca.cqs.insert(id, Cq::new(cqe));
        Ok(id)
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        match self.hca.cqs.get(&cq) {
            None => Err(Error::inval(format!("ibv_destroy_cq: CQ {cq} does not exist"))),
            Some(c) if c.users > 0 => Err(Error::busy(format!(
                "ibv_destroy_cq: CQ {cq} is still used by {} QP(s)",
                c.users
            ))),
            Some(_) => {
                if let Some(c) = self.hca.cqs.remove(&cq) {
                    self.hca.reportable -= c.len() + usize::from(c.overrun > 0);
                }
                Ok(())
            }
        }
    }

    /// `ibv_poll_cq`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.hca.cq_mut(cq)?.poll(out)?;
        self.hca.reportable -= n;
        debug_assert_eq!(
            self.hca.reportable,
            self.hca.cqs.values().map(|c| c.len() + usize::from(c.overrun > 0)).sum::<usize>(),
            "every completion added or polled is counted"
        );
        Ok(n)
    }

    /// What `ibv_poll_cq` would report over every CQ of the NIC: completions queued, plus one
    /// for each CQ that overran. A host polling a CQ can watch it to see that a packet it
    /// handed over completed something, without looking the CQ up.
    pub fn completions_pending(&self) -> usize {
        self.hca.reportable
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.hca.cqs.get(&cq).map_or(0, |c| c.len())
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<()> {
        let c = self.hca.cq_mut(cq)?;
        c.arm = if solicited_only { Arm::Solicited } else { Arm::Next };
        Ok(())
    }

    /// `ibv_resize_cq`.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<()> {
        let max = self.hca.cfg.limits.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(Error::inval(format!("ibv_resize_cq: cqe {cqe} is not in 1..={max}")));
        }
        self.hca.cq_mut(cq)?.resize(cqe)
    }

    // ---- QPs ----

    /// `ibv_create_qp`: returns the QP number and the capabilities granted.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Result<(u32, QpCap)> {
        let l = self.hca.cfg.limits.clone();
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_create_qp: PD {pd} does not exist")));
        }
        for (cq, what) in [(send_cq, "send_cq"), (recv_cq, "recv_cq")] {
            if !self.hca.cqs.contains_key(&cq) {
                return Err(Error::inval(format!("ibv_create_qp: {what} {cq} does not exist")));
            }
        }
        let checks = [
            ("max_send_wr", cap.max_send_wr, l.max_qp_wr),
            ("max_recv_wr", cap.max_recv_wr, l.max_qp_wr),
            ("max_send_sge", cap.max_send_sge, l.max_sge),
            ("max_recv_sge", cap.max_recv_sge, l.max_sge),
            ("max_inline_data", cap.max_inline_data, l.max_inline_data),
        ];
        for (what, v, max) in checks {
            if v > max {
                return Err(Error::inval(format!(
                    "ibv_create_qp: cap.{what} {v} exceeds the device limit {max}"
                )));
            }
        }
        if self.qps.len() >= l.max_qp as usize {
            return Err(Error::nomem(format!(
                "ibv_create_qp: the device's max_qp {} is reached",
                l.max_qp
            )));
        }
        let qpn = self.hca.next_qpn;
        self.hca.next_qpn = (self.hca.next_qpn + 1) & 0x00FF_FFFF;
        if self.hca.next_qpn < 0x11 {
            self.hca.next_qpn = 0x11;
        }
        // Like real providers, grant at least one WR and SGE so the QP is usable.
        let granted = QpCap {
            max_send_wr: cap.max_send_wr.max(1),
            max_recv_wr: cap.max_recv_wr.max(1),
            max_send_sge: cap.max_send_sge.max(1),
            max_recv_sge: cap.max_recv_sge.max(1),
            max_inline_data: cap.max_inline_data,
        };
        for cq in [send_cq, recv_cq] {
            if let Some(c) = self.hca.cqs.get_mut(&cq) {
                c.users += 1;
            }
        }
        self.qps.insert(qpn, Qp::new(qpn, qp_type, pd, send_cq, recv_cq, granted, sq_sig_all));
        Ok((qpn, granted))
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_destroy_qp: QP {qpn:#x} does not exist")))?;
        self.timers.refile(qpn, qp.timer_filed_ns, None);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.hca.cqs.get_mut(&cq) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|id| self.hca.srqs.get_mut(&id)) {
            s.users = s.users.saturating_sub(1);
        }
        Ok(())
    }

    /// `ibv_modify_qp`, checked against the IBA state table.
    pub fn modify_qp(
        &mut self,
        now: Nanos,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<()> {
        let limits = verbs_api::qp_state::ModifyLimits {
            port_count: 1,
            pkey_tbl_len: 1,
            max_mtu: self.hca.cfg.max_mtu,
            max_rd_atomic: self.hca.cfg.limits.max_rd_atom,
            max_dest_rd_atomic: self.hca.cfg.limits.max_rd_atom,
        };
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_modify_qp: QP {qpn:#x} does not exist")));
        };
        let next = verbs_api::qp_state::check_modify(qp.qp_type, qp.state, attr, mask, &limits)?;
        if mask.contains(QpAttrMask::AV) {
            qp.dst_ip = av_destination(&attr.ah_attr)
                .map_err(|why| Error::inval(format!("ibv_modify_qp: IBV_QP_AV: {why}")))?;
            qp.ip_tos_ttl = qp::ip_tos_ttl(&attr.ah_attr);
        }
        if next == QpState::Reset {
            qp.reset();
            refile_timer(&mut self.timers, qp);
            return Ok(());
        }
        qp.apply_attrs(attr, mask);
        let was = qp.state;
        qp.state = next;
        if qp.qp_type == QpType::Rc && matches!(next, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            // The path (address, destination QP) is fixed from RTR on; build the ACK once.
            let ip = IpUdp {
                src: self.hca.cfg.ip(),
                dst: qp.dst_ip,
                src_port: qp.sport,
                tos: qp.ip_tos_ttl.0,
                ttl: qp.ip_tos_ttl.1,
                ..IpUdp::default()
            };
            qp.ack_template = Some(packet::AckTemplate::new(&ip, qp.attr.dest_qp_num));
        }
        if next == QpState::Err && was != QpState::Err {
            self.hca.flush(qp);
        }
        if next == QpState::Rts {
            req::drive(qp, &mut self.hca, &mut Now::At(now));
        }
        refile_timer(&mut self.timers, qp);
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpCap)> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_query_qp: QP {qpn:#x} does not exist")))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        a.cap = qp.cap;
        a.sq_psn = qp.req.psn.value();
        a.rq_psn = qp.resp.epsn.value();
        Ok((a, qp.cap))
    }

    /// The state of a QP, if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// `ibv_post_send`. Each WR is checked before it is queued; the first bad one is an error
    /// naming its index (those before it were posted, as with `bad_wr`).
    pub fn post_send(&mut self, now: Nanos, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        self.post_send_at(&mut Now::At(now), qpn, wrs)
    }

    /// [`Nic::post_send`] at a time that is read only if a packet arms the ACK timer (not
    /// when one is already running for an earlier request).
    pub fn post_send_at(&mut self, now: &mut Now<'_>, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        let max_msg = self.hca.cfg.limits.max_msg_sz;
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_post_send: QP {qpn:#x} does not exist")))?;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if req::post_now(qp, &mut self.hca, now, wr) {
                continue;
            }
            match self.hca.check_send(qp, wr, max_msg) {
                Ok(wqe) => {
                    qp.sq.push_back(wqe);
                }
                Err(e) => {
                    result = Err(Error::new(
                        e.errno,
                        format!("ibv_post_send: wr[{i}] (wr_id {}): {}", wr.wr_id, e.message),
                    ));
                    break;
                }
            }
        }
        if qp.state == QpState::Err {
            self.hca.flush(qp);
        } else {
            req::drive(qp, &mut self.hca, now);
        }
        refile_timer(&mut self.timers, qp);
        result
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wrs: &[RecvWr<'_>]) -> Result<()> {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_post_recv: QP {qpn:#x} does not exist")));
        };
        if qp.state == QpState::Reset {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} is in RESET; post receives in INIT or later"
            )));
        }
        if qp.srq.is_some() {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} takes its receives from an SRQ; use ibv_post_srq_recv"
            )));
        }
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |m: String| {
                Error::inval(format!("ibv_post_recv: wr[{i}] (wr_id {}): {m}", wr.wr_id))
            };
            if qp.rq.len() >= qp.cap.max_recv_wr as usize {
                result = Err(Error::nomem(format!(
                    "ibv_post_recv: wr[{i}] (wr_id {}): the receive queue is full ({} WRs, max_recv_wr)",
                    wr.wr_id, qp.cap.max_recv_wr
                )));
                break;
            }
            if wr.sg_list.len() > qp.cap.max_recv_sge as usize {
                result = Err(fail(format!(
                    "{} SGEs exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_recv_sge
                )));
                break;
            }
            if let Err(m) = self.hca.check_sges(qp.pd, wr.sg_list) {
                result = Err(fail(m));
                break;
            }
            let len = wr.sg_list.iter().map(|s| s.length as u64).sum();
            qp.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.into(), len });
        }
        if qp.state == QpState::Err {
            // Flushing clears the QP's timers.
            self.hca.flush(qp);
            refile_timer(&mut self.timers, qp);
        }
        result
    }

    // ---- the wire side ----

    /// A datagram arrived from the wire. Malformed packets (bad ICRC, truncated, foreign) are
    /// dropped and counted, never trusted.
    pub fn handle_packet(&mut self, now: Nanos, data: &[u8]) {
        self.handle_packet_at(&mut Now::At(now), data);
    }

    /// [`Nic::handle_packet`] at a time that may be read only if the packet needs it.
    pub fn handle_packet_at(&mut self, now: &mut Now<'_>, data: &[u8]) {
        // The packets latency waits on take fast paths that read them without building a
        // `Packet`: an RC SEND ONLY in sequence with a receive posted for it (the responder's),
        // and an RC ACKNOWLEDGE (the completer's). Anything else, or anything wrong with them,
        // takes the general path, which also says what is wrong. The opcode picks the path
        // before anything is checked, so no datagram is checked twice.
        match packet::opcode_of(data) {
            Some(packet::Opcode::RC_SEND_ONLY | packet::Opcode::RC_SEND_ONLY_WITH_IMMEDIATE) => {
                if let Some(send) = packet::peek_rc_send_only(data) {
                    if let Some(qp) = self.qps.get_mut(&send.bth.dest_qp) {
                        if resp::receive_send_only(qp, &mut self.hca, &send) {
                            self.hca.stats.rx_packets += 1;
                            req::drive(qp, &mut self.hca, now);
                            refile_timer(&mut self.timers, qp);
                            return;
                        }
                    }
                }
            }
            Some(packet::Opcode::RC_ACKNOWLEDGE) => {
                if let Some(ack) = packet::peek_rc_acknowledge(data) {
                    if let Some(qp) = self.qps.get_mut(&ack.bth.dest_qp) {
                        if qp.qp_type == QpType::Rc {
                            self.hca.stats.rx_packets += 1;
                            comp::handle_acknowledge(qp, &mut self.hca, now, ack.bth.psn, ack.aeth);
                            req::drive(qp, &mut self.hca, now);
                            refile_timer(&mut self.timers, qp);
                            return;
                        }
                    }
                }
            }
            _ => {}
        }
        self.handle_packet_general(now, data);
    }

    /// [`Nic::handle_packet_at`] without the responder's fast path: every packet parsed in
    /// full (the fast path's tests compare the two).
    fn handle_packet_general(&mut self, now: &mut Now<'_>, data: &[u8]) {
        let (ip, pkt) = match packet::parse_datagram(data) {
            Ok(v) => v,
            Err(e) => {
                self.hca.stats.rx_malformed += 1;
                if matches!(e, packet::PacketError::BadIcrc { .. }) {
                    self.hca.stats.rx_bad_icrc += 1;
                }
                return;
            }
        };
        self.hca.stats.rx_packets += 1;
        let Some(qp) = self.qps.get_mut(&pkt.bth.dest_qp) else {
            self.hca.stats.rx_no_qp += 1;
            return;
        };
        let Some(info) = pkt.bth.opcode.info() else {
            self.hca.stats.rx_malformed += 1;
            return;
        };
        let transport_ok = matches!(
            (info.transport, qp.qp_type),
            (packet::Transport::Rc, QpType::Rc)
                | (packet::Transport::Uc, QpType::Uc)
                | (packet::Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            self.hca.stats.rx_no_qp += 1;
            return;
        }
        if info.flags.contains(packet::OpFlags::REQUEST) {
            let ip_header: &[u8; 20] =
                data[..20].try_into().expect("a parsed datagram has an IPv4 header");
            resp::handle_request(qp, &mut self.hca, &ip, ip_header, &pkt);
        } else {
            comp::handle_response(qp, &mut self.hca, now, &pkt);
        }
        req::drive(qp, &mut self.hca, now);
        refile_timer(&mut self.timers, qp);
    }

    /// Run every timer due at `now` (local ACK timeouts, RNR back-offs).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.stamp_timers(now);
        for qp in self.qps.values_mut() {
            comp::handle_timers(qp, &mut self.hca, now);
            req::drive(qp, &mut self.hca, &mut Now::At(now));
            refile_timer(&mut self.timers, qp);
        }
    }

    /// Starts the local ACK timers that calls which did not read the clock armed (a post on a
    /// real-time host, see [`Now::Lazy`]): each is due a timeout after `now`. A host that hands
    /// the engine a lazy clock calls this (or [`Nic::handle_timeout`], which does) whenever it
    /// looks at the clock for the timers; until then [`Nic::next_timeout`] reports such a
    /// timer as due at once, at time 0.
    pub fn stamp_timers(&mut self, now: Nanos) {
        while let Some(qpn) = self.timers.first_unstamped() {
            let qp = self.qps.get_mut(&qpn).expect("the timer index files only existing QPs");
            if qp.req.timer_ns == Some(UNSTAMPED) {
                qp.req.timer_ns = req::ack_timeout_ns(qp.attr.timeout).map(|t| now + t);
            }
            refile_timer(&mut self.timers, qp);
            debug_assert_ne!(qp.timer_filed_ns, Some(UNSTAMPED), "a stamped timer is due later");
        }
    }

    /// The earliest pending timer: time 0 while a timer waits for [`Nic::stamp_timers`].
    pub fn next_timeout(&self) -> Option<Nanos> {
        let next = self.timers.earliest();
        debug_assert_eq!(
            next,
            self.qps.values().flat_map(|q| [q.req.timer_ns, q.req.rnr_timer_ns]).flatten().min(),
            "every QP whose timers changed was refiled"
        );
        next
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.hca.last_tx_ack = None;
        self.hca.tx.pop_front()
    }

    /// Give back the buffer of a datagram this NIC transmitted once its bytes are no longer
    /// needed (delivered and handled, or copied onto a wire), so that a later transmit reuses
    /// the allocation, as a NIC reuses its transmit ring. Optional: a buffer not given back is
    /// simply freed; any `Vec` is accepted. At most [`SPARE_BUFFERS`] are kept, so a NIC holds
    /// no more than it once had in flight.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.hca.recycle(buf);
    }

    /// Lend the NIC a way onto the wire (see [`Wire`]); `None` takes it back, after which
    /// every datagram is queued for [`Nic::poll_transmit`].
    pub fn set_wire(&mut self, wire: Option<Box<dyn Wire>>) {
        self.hca.wire = wire;
    }

    /// The wire lent with [`Nic::set_wire`], for the host to send what it polled through it.
    pub fn wire_mut(&mut self) -> Option<&mut (dyn Wire + 'static)> {
        self.hca.wire.as_deref_mut()
    }

    /// While `paused`, datagrams are queued rather than emitted through the wire: a host
    /// pauses it while it holds datagrams the wire refused, so that none overtakes them.
    pub fn pause_wire(&mut self, paused: bool) {
        self.hca.wire_paused = paused;
    }

    /// Whether datagrams are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.hca.tx.is_empty()
    }

    /// The next notification or async event.
    pub fn poll_event(&mut self) -> Option<NicEvent> {
        self.hca.events.pop_front()
    }
}

impl Hca {
    /// The next receive WQE for a message arriving on `qp` (its SRQ's, or its own).
    pub(crate) fn take_recv(&mut self, qp: &mut Qp) -> Option<RecvWqe> {
        let Some(id) = qp.srq else { return qp.rq.pop_front() };
        let srq = self.srqs.get_mut(&id)?;
        let w = srq.queue.pop_front()?;
        if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
            srq.limit = 0;
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: AsyncElement::Srq(id as u64),
            }));
        }
        Some(w)
    }

    /// Whether a receive WQE is waiting for `qp`.
    pub(crate) fn has_recv(&self, qp: &Qp) -> bool {
        match qp.srq {
            Some(id) => self.srqs.get(&id).is_some_and(|s| !s.queue.is_empty()),
            None => !qp.rq.is_empty(),
        }
    }

    /// Give back a receive WQE that a lost UC message had started to fill.
    pub(crate) fn return_recv(&mut self, qp: &mut Qp, w: RecvWqe) {
        match qp.srq.and_then(|id| self.srqs.get_mut(&id)) {
            Some(srq) => srq.queue.push_front(w),
            None => qp.rq.push_front(w),
        }
    }
    fn cq_mut(&mut self, cq: CqId) -> Result<&mut Cq> {
        self.cqs.get_mut(&cq).ok_or_else(|| Error::inval(format!("CQ {cq} does not exist")))
    }

    /// Post-time SGE checks: every lkey names an MR of this PD and the range lies inside it.
    pub(crate) fn check_sges(
        &self,
        pd: PdId,
        sges: &[verbs_api::Sge],
    ) -> std::result::Result<(), String> {
        for (j, s) in sges.iter().enumerate() {
            let Some(mr) = self.mrs.get(s.lkey) else {
                return Err(format!("sg_list[{j}].lkey {:#x} names no registered MR", s.lkey));
            };
            if mr.pd != pd {
                return Err(format!("sg_list[{j}].lkey {:#x} belongs to another PD", s.lkey));
            }
            if mr.offset_of(s.addr, s.length as u64).is_none() {
                return Err(format!(
                    "sg_list[{j}] [{:#x}, +{}) is outside its MR [{:#x}, +{})",
                    s.addr,
                    s.length,
                    mr.memory.addr(),
                    mr.memory.len()
                ));
            }
        }
        Ok(())
    }

    fn check_send(&self, qp: &Qp, wr: &SendWr<'_>, max_msg: u32) -> Result<SendWqe> {
        let inval = |m: String| Err(Error::inval(m));
        if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe) {
            return inval(format!("QP {:#x} is in {}; ibv_post_send needs RTS", qp.qpn, qp.state));
        }
        if !wr.opcode.valid_for(qp.qp_type) {
            return inval(format!("{} is not valid on a {:?} QP", wr.opcode.name(), qp.qp_type));
        }
        if qp.sq.len() >= qp.cap.max_send_wr as usize {
            return Err(Error::nomem(format!(
                "the send queue is full ({} WRs, max_send_wr)",
                qp.cap.max_send_wr
            )));
        }
        let inline_flag = wr.send_flags.contains(SendFlags::INLINE);
        let inline_ok = matches!(
            wr.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
        );
        let mut inline = None;
        let mut sges = qp::SgList::default();
        let len: u64;
        if inline_flag || wr.inline_data.is_some() {
            if !inline_ok {
                return inval(format!("IBV_SEND_INLINE is not valid with {}", wr.opcode.name()));
            }
            let too_long = |len: usize| {
                Error::inval(format!(
                    "{len} bytes of inline data exceed max_inline_data {}",
                    qp.cap.max_inline_data
                ))
            };
            let data = match wr.inline_data {
                Some(d) if d.len() > qp.cap.max_inline_data as usize => {
                    return Err(too_long(d.len()))
                }
                Some(d) => qp::InlineData::from(d),
                None => {
                    if wr.sg_list.len() > qp.cap.max_send_sge as usize {
                        return inval(format!(
                            "{} SGEs exceed max_send_sge {}",
                            wr.sg_list.len(),
                            qp.cap.max_send_sge
                        ));
                    }
                    let total: usize = wr.sg_list.iter().map(|s| s.length as usize).sum();
                    let gathered = match total <= qp.cap.max_inline_data as usize {
                        true => qp::InlineData::filled(total, |buf| {
                            self.mrs.gather(qp.pd, wr.sg_list, 0, buf)
                        }),
                        false => Err(mr::DmaError::Length),
                    };
                    match gathered {
                        Ok(data) => data,
                        Err(e) => {
                            // The gather checks each SGE as `check_sges` does: only a failure
                            // walks them again, for the message that names the bad one.
                            self.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
                            return match e {
                                mr::DmaError::Length => Err(too_long(total)),
                                e => inval(format!("inline gather failed: {e:?}")),
                            };
                        }
                    }
                }
            };
            len = data.len() as u64;
            inline = Some(data);
        } else {
            if wr.sg_list.len() > qp.cap.max_send_sge as usize {
                return inval(format!(
                    "{} SGEs exceed max_send_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_send_sge
                ));
            }
            self.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
            sges = qp::SgList::from(wr.sg_list);
            len = sges.iter().map(|s| s.length as u64).sum();
        }
        // A message longer than max_msg_sz is accepted here and fails at execution with
        // LOC_LEN_ERR, as on hardware; it must still fit the 32-bit length field.
        let _ = max_msg;
        if len > u32::MAX as u64 {
            return inval(format!("message of {len} bytes does not fit a 32-bit length"));
        }
        if wr.opcode.is_atomic() {
            if len != 8 {
                return inval(format!(
                    "{} needs one 8-byte SGE for the original value, got {len} bytes",
                    wr.opcode.name()
                ));
            }
            if !wr.atomic.remote_addr.is_multiple_of(8) {
                return inval(format!(
                    "atomic remote_addr {:#x} is not 8-byte aligned",
                    wr.atomic.remote_addr
                ));
            }
        }
        let mut ud = None;
        if qp.qp_type == QpType::Ud {
            let Some(wr_ud) = &wr.ud else {
                return inval("a UD send needs wr.ud (address handle, remote QPN, Q_Key)".into());
            };
            let ah = wr_ud.ah.attr();
            let dst_ip = match av_destination(&ah) {
                Ok(ip) => ip,
                Err(why) => return inval(format!("the address handle: {why}")),
            };
            ud = Some(qp::UdDest {
                dst_ip,
                ip_tos_ttl: qp::ip_tos_ttl(&ah),
                remote_qpn: wr_ud.remote_qpn,
                remote_qkey: wr_ud.remote_qkey,
            });
            // UD messages are single packets of at most the port's MTU.
            let mtu = self.cfg.max_mtu.bytes();
            if len > mtu as u64 {
                return inval(format!("a UD message of {len} bytes exceeds the path MTU {mtu}"));
            }
        }
        let signaled = qp.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
        let mut wqe = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled,
            solicited: wr.send_flags.contains(SendFlags::SOLICITED),
            fence: wr.send_flags.contains(SendFlags::FENCE),
            sges,
            inline,
            len: len as u32,
            rdma: wr.rdma,
            atomic: wr.atomic,
            imm: wr.imm_data,
            ud,
            first_psn: packet::Psn::new(0),
            npsn: 0,
            started: false,
        };
        wqe.npsn = if wqe.opcode.is_atomic() || qp.qp_type == QpType::Ud {
            1
        } else {
            qp.packets_for(wqe.len)
        };
        Ok(wqe)
    }

    /// Emit one packet of `qp` to its destination; whether it was queued (see
    /// [`Hca::transmit_to`]).
    pub(crate) fn transmit(&mut self, qp: &Qp, pkt: &Packet<'_>) -> bool {
        self.transmit_to(qp.dst_ip, qp.ip_tos_ttl, qp.sport, pkt)
    }

    /// Take back the last queued datagram if it is an ACK of `qpn` (see `resp::ack`).
    pub(crate) fn retract_ack(&mut self, qpn: u32) {
        if self.last_tx_ack == Some(qpn) {
            if let Some(t) = self.tx.pop_back() {
                self.stats.tx_packets -= 1;
                self.recycle(t.data);
            }
        }
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_MAX_BYTES {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Emit one packet: straight onto the host's wire if it is small and may go now (see
    /// [`Wire`]), else into the transmit queue. Returns whether it was queued.
    pub(crate) fn transmit_to(
        &mut self,
        dst: [u8; 4],
        (tos, ttl): (u8, u8),
        sport: u16,
        pkt: &Packet<'_>,
    ) -> bool {
        let ip = self.next_ip_udp(dst, (tos, ttl), sport);
        let len = packet::engine_datagram_len(pkt);
        if len <= DIRECT_DATAGRAM && self.direct_wire().is_some() {
            // Built in cache-hot memory, then copied: built in the ring slot itself, its ICRC
            // would read back lines whose ownership is still on its way from the reader's
            // core, and the sender would wait for them (measured: slower).
            let mut local = [0u8; DIRECT_DATAGRAM];
            packet::emit_engine_datagram_into(&ip, pkt, &mut local[..len]);
            return self.send_built(dst, &local[..len]);
        }
        let mut data = self.spare.pop().unwrap_or_default();
        packet::emit_engine_datagram(&ip, pkt, &mut data);
        self.tx.push_back(Transmit { dst, data });
        true
    }

    /// [`Hca::transmit_to`] for the requester's fast path (`req::post_now`): a request of
    /// `qp` built without a [`Packet`] (`packet::emit_request_into`; the headers are the ones
    /// `bth.opcode` lists), small enough to go straight onto the wire, as `post_now` made sure
    /// it may (a wire that refuses it queues it, as `send_built` does).
    pub(crate) fn transmit_request(
        &mut self,
        qp: &Qp,
        bth: &packet::Bth,
        reth: Option<&packet::Reth>,
        imm: Option<u32>,
        payload: &[u8],
    ) {
        let ip = self.next_ip_udp(qp.dst_ip, qp.ip_tos_ttl, qp.sport);
        let mut local = [0u8; DIRECT_DATAGRAM];
        let len = packet::emit_request_into(&ip, bth, reth, imm, payload, &mut local);
        self.send_built(qp.dst_ip, &local[..len]);
    }

    /// Emit an ACKNOWLEDGE (an ACK or a NAK) of `qp` from its template: the same datagram
    /// [`Hca::transmit`] would build, for a fraction of the work. Returns whether it was
    /// queued (rather than emitted through the host's wire).
    pub(crate) fn transmit_aeth(&mut self, qp: &Qp, psn: packet::Psn, aeth: packet::Aeth) -> bool {
        let Some(template) = &qp.ack_template else {
            let bth = packet::Bth {
                opcode: packet::Opcode::RC_ACKNOWLEDGE,
                pkey: 0xFFFF,
                dest_qp: qp.attr.dest_qp_num,
                psn,
                ..packet::Bth::default()
            };
            let mut p = Packet::new(bth, &[]);
            p.aeth = Some(aeth);
            return self.transmit(qp, &p);
        };
        let ident = self.next_datagram();
        let mut local = [0u8; packet::ACK_DATAGRAM_LEN];
        template.emit_into(ident, psn, aeth, &mut local);
        self.send_built(qp.dst_ip, &local)
    }

    /// Accounts for one more datagram sent and returns its IPv4 identification. It ends any
    /// chance of replacing the last queued ACK (`resp::ack`).
    fn next_datagram(&mut self) -> u16 {
        self.last_tx_ack = None;
        self.stats.tx_packets += 1;
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// The IPv4 and UDP fields of the next datagram this NIC sends to `dst` ([`next_datagram`]
    /// accounts for it and gives its identification).
    ///
    /// [`next_datagram`]: Hca::next_datagram
    fn next_ip_udp(&mut self, dst: [u8; 4], (tos, ttl): (u8, u8), sport: u16) -> IpUdp {
        let ident = self.next_datagram();
        IpUdp { src: self.cfg.ip(), dst, src_port: sport, ident, tos, ttl, ..IpUdp::default() }
    }

    /// Sends a datagram already built: onto the host's wire if it may go now and the wire
    /// takes it, else into the transmit queue. Returns whether it was queued.
    fn send_built(&mut self, dst: [u8; 4], bytes: &[u8]) -> bool {
        if let Some(wire) = self.direct_wire() {
            if wire.send(dst, bytes) != WireOutcome::Full {
                return false;
            }
        }
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        self.tx.push_back(Transmit { dst, data });
        true
    }

    /// Whether a datagram may go straight onto the host's wire now (see [`Hca::direct_wire`]).
    pub(crate) fn may_send_direct(&self) -> bool {
        self.tx.is_empty() && !self.wire_paused && self.wire.is_some()
    }

    /// The host's wire, if a datagram may go straight onto it now: nothing is queued ahead of
    /// it and the host holds nothing the wire refused.
    fn direct_wire(&mut self) -> Option<&mut (dyn Wire + 'static)> {
        match self.may_send_direct() {
            true => self.wire.as_deref_mut(),
            false => None,
        }
    }

    /// Push a completion; fires the CQ's armed event, or records an overrun (and its async event).
    pub(crate) fn complete(&mut self, cq: CqId, wc: WorkCompletion, solicited: bool) {
        let Some(c) = self.cqs.get_mut(&cq) else { return };
        let had_overrun = c.overrun > 0;
        let (added, fire) = c.push(wc, solicited);
        if added || !had_overrun {
            // A new completion, or a CQ that has just overrun (every poll now reports it).
            self.reportable += 1;
        }
        if fire {
            self.events.push_back(NicEvent::CqNotify(cq));
        }
        if !added && !had_overrun {
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::CqErr,
                element: AsyncElement::Cq(cq as u64),
            }));
        }
    }

    /// Complete a send WQE: visible if signaled or failed.
    pub(crate) fn complete_send(&mut self, qp: &Qp, w: &SendWqe, status: WcStatus) {
        if status == WcStatus::Success && !w.signaled {
            return;
        }
        let byte_len = if w.opcode.is_atomic() { 8 } else { w.len };
        let wc = WorkCompletion {
            wr_id: w.wr_id,
            status,
            opcode: WcOpcode::for_send(w.opcode),
            byte_len,
            qp_num: qp.qpn,
            ..WorkCompletion::default()
        };
        self.complete(qp.send_cq, wc, false);
    }

    /// Complete a receive WQE.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_recv(
        &mut self,
        qp: &Qp,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
        slid: u16,
        solicited: bool,
    ) {
        let mut wc_flags = WcFlags::empty();
        if imm.is_some() {
            wc_flags |= WcFlags::WITH_IMM;
        }
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm_data: imm.unwrap_or(0),
            qp_num: qp.qpn,
            src_qp,
            wc_flags,
            slid,
            ..WorkCompletion::default()
        };
        self.complete(qp.recv_cq, wc, solicited);
    }

    /// Complete a UD receive (its flags carry GRH).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_ud_recv(
        &mut self,
        qp: &Qp,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
        slid: u16,
        wc_flags: WcFlags,
        solicited: bool,
    ) {
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm_data: imm.unwrap_or(0),
            qp_num: qp.qpn,
            src_qp,
            wc_flags,
            slid,
            ..WorkCompletion::default()
        };
        self.complete(qp.recv_cq, wc, solicited);
    }

    /// Move a QP to the error state: the failing WQE has been completed by the caller; every
    /// other outstanding send and receive WQE completes with `WR_FLUSH_ERR`.
    pub(crate) fn enter_error(&mut self, qp: &mut Qp) {
        if qp.state != QpState::Err {
            qp.state = QpState::Err;
            self.events.push_back(NicEvent::Async(AsyncEvent {
                event_type: AsyncEventType::QpFatal,
                element: AsyncElement::Qp(qp.qpn),
            }));
        }
        self.flush(qp);
    }

    /// Flush every WQE of a QP in the error state.
    pub(crate) fn flush(&mut self, qp: &mut Qp) {
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

#[cfg(test)]
mod tests;
