//! The transport engine of one software NIC, sans-IO in the quinn-proto style: it never reads a
//! clock, sleeps, spawns or does I/O. [`Nic`] is its face; this page is the contract between it
//! and the host that runs it (the simulator's world, or a soft device's NIC thread).
//!
//! # What the host calls
//!
//! - **Verbs**, as a program's calls arrive: [`Nic::alloc_pd`], [`Nic::reg_mr`],
//!   [`Nic::create_cq`], [`Nic::create_qp`], [`Nic::modify_qp`], [`Nic::post_send`] (or
//!   [`Nic::post_send_at`]), [`Nic::post_recv`], [`Nic::poll_cq`], [`Nic::req_notify_cq`],
//!   [`Nic::create_srq`] and the rest. A post sends what it may at once: the call is the
//!   doorbell.
//! - **[`Nic::handle_packet`]** with each datagram that arrives for the NIC's address, or
//!   [`Nic::handle_packet_at`] with a lazy clock ([`Now::Lazy`]) that is read only if the packet
//!   arms a timer. Anything is accepted: malformed datagrams are counted and dropped, and
//!   so are RC and UC packets from a port other than their QP's peer
//!   ([`NicStats::rx_wrong_source`]).
//! - **[`Nic::handle_timeout`]** once the time [`Nic::next_timeout`] names has come (early, it
//!   fires nothing that is not due; late, it only delays retries).
//! - **[`Nic::stamp_timers`]**, for a host that hands over a lazy clock: calls that did not read
//!   it arm their ACK timers unstamped, reported by [`Nic::next_timeout`] as due at time 0
//!   until the host stamps them (or calls [`Nic::handle_timeout`], which stamps first).
//!
//! Every entry point that may arm a timer takes `now` in nanoseconds from the host's clock
//! (virtual or monotonic, never going back): the engine needs no other sense of time.
//!
//! # What the host pulls, after each call
//!
//! - **[`Nic::flush_transmit`]**, for a host that lent an [`Egress`]: the NIC sends its
//!   transmit queue through it, in order, until the egress refuses one for want of room (the
//!   destination's inbox is full). A refused RC or UC datagram waits at the head of the queue
//!   with everything behind it, and nothing goes straight out meanwhile, so none overtakes
//!   it; a refused UD datagram is dropped. The host calls it after any call that left
//!   datagrams queued ([`Nic::has_transmit`]), and again soon while some wait
//!   ([`Nic::transmit_waits`]); the returned [`Flushed`] counts the refusals.
//! - **[`Nic::poll_transmit`]**, for a host that puts datagrams on the wire itself (the
//!   simulator, which paces them by its links): RoCEv2 datagrams, each to its
//!   [`Transmit::dst`], until `None`. Nothing leaves the NIC but through the egress or by
//!   this call; a host that leaves datagrams queued stalls the NIC's peers.
//! - **[`Nic::next_timeout`]**: when to call [`Nic::handle_timeout`] next; it changes after any
//!   call, so the host asks again after each.
//! - **[`Nic::poll_event`]**: CQ notifications for armed CQs and asynchronous events, for the
//!   program's completion channel and `ibv_get_async_event`.
//! - **Completions**, which stay in their CQs until the program polls them
//!   ([`Nic::poll_cq`]); [`Nic::completions_pending`] counts them over every CQ.
//!
//! # What the host may give back
//!
//! - **[`Nic::recycle`]**: a datagram's buffer once its bytes are delivered or copied, so the
//!   next transmit reuses it (at most [`SPARE_BUFFERS`] are kept). Optional.
//! - **An [`Egress`]** ([`Nic::set_egress`]): the host's way out, lent for good (a port's
//!   sending half, or layers around one: a capture, a tap, a fault plan). Small datagrams made
//!   while nothing is queued go straight into it; the queue goes through it on
//!   [`Nic::flush_transmit`]; direct reach goes through it ([`Egress::reach`]). The calls go
//!   one way: the engine calls the egress, never the reverse, and the host never borrows it
//!   back (lending another replaces it).
//!
//! # Inside
//!
//! The transport is split as the specification and Linux's rxe split it: `req` (the requester
//! turns WQEs into request packets), `resp` (the responder executes requests and answers) and
//! `comp` (the completer retires WQEs on ACKs and runs the retry and RNR timers). Around them:
//! `post` (the post path) checks each send WR once (`send_check`) and hands it to the first
//! executor that can take it (`reach`, `req`'s send-now, the send queue); `resp` and `reach`
//! hold requests to the responder's rules in `rights`; `receive` dispatches arriving
//! datagrams to `resp` and `comp`; `transmit` (the transmit room: the one transmit queue, the
//! lent egress, the datagram buffers) puts what they make on its way out; `timers` files
//! QPs by deadline. Each object's verbs sit beside it (`mr`, `cq`, `srq`; the QP's in
//! `qp_verbs`, above the transport they start), and `completion` turns finished WQEs into work
//! completions. The NIC-wide state every transport step borrows beside its QP is `Hca`.
//!
//! # Log events
//!
//! The engine emits `tracing` events (it does no I/O itself: whether and where they go is the
//! host's subscriber's business, and with none installed they cost a static level check). Each
//! names the device (`device`) and QP (`qpn`, hex) and, where there is one, the PSN (`psn`,
//! hex) and status. `warn`: error completions, transport and RNR retries exhausted, a QP
//! forced into the error state. `debug`: QP state changes by `ibv_modify_qp`, retransmissions
//! with their `cause` (`timeout`, or `sequence`: a sequence-error NAK or a response showing an
//! earlier one was lost), NAKs and RNR NAKs sent and received, RNR waits, flushes. No event
//! sits on the per-packet fast paths (`receive`'s, the post path, the common ACK).

mod addr;
mod comp;
mod completion;
mod config;
pub mod cq;
mod mcast;
pub mod mr;
pub mod mw;
mod post;
pub mod qp;
mod qp_verbs;
mod reach;
mod receive;
mod req;
mod resp;
mod rights;
mod send_check;
mod srq;
mod time;
mod timers;
mod transmit;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use verbs_api::{AsyncEvent, DeviceAttr, LinkLayer, PortAttr, PortState};

pub use addr::{
    check_ah, eui64_of_mac, gid_entry, ip_of_slot, mac_of_ip, slot_of_datagram_addr, slot_of_gid,
    slot_of_ip, NetdevAddr, GID_INDEX_IPV4, GID_INDEX_LINK_LOCAL, GID_TBL_LEN,
};
pub use config::{splitmix64, Limits, NicConfig};
pub use mcast::{is_multicast_gid, is_multicast_ipv4, Membership, MULTICAST_QPN};
pub use qp::PsnMirror;
pub use reach::{LocalSges, QpFacts, ReachAsk, ReachOp, Traffic};
pub use rights::{Grant, MrRights, RemoteOp, Request};
pub use time::{Nanos, Now};
pub use transmit::{Egress, Flushed, SendOutcome, Transmit, SEND_BATCH, SPARE_BUFFERS};

use cq::{Cq, CqId};
use mr::{MrTable, PdId};
use qp::Qp;
use timers::TimerIndex;

/// A QP number or PSN as log events show it: hex, as `ibv_rc_pingpong` prints QPNs and PSNs.
#[derive(Clone, Copy)]
pub(crate) struct Hex(pub(crate) u32);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
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
    /// RC and UC packets dropped because they do not come from the QP's connected peer: their
    /// IPv4 source is not the destination of the QP's address vector (a stale connection's
    /// retransmission reaching a new QP with the same number, or a stray sender). They never
    /// touch the QP's PSN state (rxe's `check_addr`).
    pub rx_wrong_source: u64,
    /// Duplicate requests seen by a responder.
    pub rx_duplicates: u64,
    /// Packets retransmitted by go-back-N.
    pub retransmits: u64,
    /// Local ACK timeouts that fired.
    pub timeouts: u64,
    /// Local ACK timeouts that waited another timeout instead of spending a retry, because
    /// the responder was alive and had not read its inbox yet ([`Egress::peer_busy`]).
    pub timeouts_deferred: u64,
    /// Go-back-N restarts, each spending one of the QP's `retry_cnt` (after a timeout, a
    /// sequence-error NAK or a response showing a loss); rxe's `completer_retry_err`.
    pub retries: u64,
    /// Send WQEs failed with `IBV_WC_RETRY_EXC_ERR` (rxe's `retry_exceeded_err`).
    pub retry_exceeded: u64,
    /// Send WQEs failed with `IBV_WC_RNR_RETRY_EXC_ERR` (rxe's `retry_rnr_exceeded_err`).
    pub rnr_retry_exceeded: u64,
    /// RC requests that arrived ahead of the expected PSN, each one (rxe's
    /// `out_of_seq_request`); one sequence-error NAK answers a run of them.
    pub rx_out_of_sequence: u64,
    /// PSN-sequence-error NAKs sent.
    pub seq_naks_sent: u64,
    /// PSN-sequence-error NAKs received (rxe's `rcvd_seq_err`).
    pub seq_naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// UC/UD messages dropped (gaps, Q_Key mismatch, no receive WQE).
    pub dropped_messages: u64,
    /// SEND/WRITE packets whose payload does not fit their place in the message at the path
    /// MTU (RC: NAK invalid request; UC: the message is dropped).
    pub rx_bad_length: u64,
    /// RDMA WRITEs, READs and atomics done by direct reach in the responder's memory, with
    /// no packet (`docs/architecture.md`, "Direct reach").
    pub reached: u64,
    /// The packets those reached operations stand for, seen from this requester (their
    /// requests sent, their ACKs and responses received): not in `tx_packets` and
    /// `rx_packets`, which count the wire's, and added to them in the port counters
    /// (`softverbs counters`), so that these read as with reach off.
    pub reached_traffic: Traffic,
}

/// One software NIC: its PDs, MRs, CQs and QPs, and the transport that runs them.
pub struct Nic {
    qps: BTreeMap<u32, Qp>,
    /// Every QP with an armed timer, by its earliest deadline, so that [`Nic::next_timeout`]
    /// is not a walk over every QP. Each entry point that may arm, move or clear a QP's timers
    /// refiles that QP ([`timers::refile_timer`]).
    timers: TimerIndex,
    hca: Hca,
    /// The multicast groups this NIC's QPs are attached to, with their QPs (`mcast.rs`).
    mcast: BTreeMap<verbs_api::Gid, Vec<u32>>,
}

/// The host channel adapter around the QPs (the IBA's HCA, less its QPs): configuration, PDs,
/// MRs, CQs, SRQs, the transmit room (the queue and the host's egress), events and counters. It is split
/// from the QP table so that a QP and the rest can be borrowed at once: every transport step
/// takes `(qp, hca)`.
pub(crate) struct Hca {
    cfg: NicConfig,
    mrs: MrTable,
    mws: mw::MwTable,
    cqs: BTreeMap<CqId, Cq>,
    pds: BTreeMap<PdId, u32>,
    srqs: BTreeMap<u32, srq::Srq>,
    next_srq: u32,
    next_pd: PdId,
    next_cq: CqId,
    /// The QP number the next QP gets if it is free (`Nic::create_qp`): the sequence starts
    /// at [`NicConfig::first_qpn`] and wraps within the 24-bit space.
    next_qpn: u32,
    /// The transmit room: the one transmit queue, the lent egress, the buffers.
    pub(crate) tx: transmit::TxRoom,
    events: VecDeque<NicEvent>,
    /// [`Nic::completions_pending`].
    reportable: usize,
    /// The last `post_send` did every WR by direct reach: nothing for the wire (see
    /// [`Nic::take_quiet_post`]).
    quiet_post: bool,
    /// Moves on whenever a QP's state or attributes may have changed (modify, destroy, an
    /// error): a host that publishes QPs for direct reach republishes when it moved.
    qp_epoch: u64,
    stats: NicStats,
}

impl Nic {
    /// A NIC with no resources.
    pub fn new(cfg: NicConfig) -> Nic {
        let next_qpn = cfg.first_qpn();
        let mrs = MrTable::new(cfg.entropy);
        let entropy = cfg.entropy;
        Nic {
            qps: BTreeMap::new(),
            timers: TimerIndex::default(),
            mcast: BTreeMap::new(),
            hca: Hca {
                cfg,
                mrs,
                mws: mw::MwTable::new(entropy),
                cqs: BTreeMap::new(),
                pds: BTreeMap::new(),
                srqs: BTreeMap::new(),
                next_srq: 1,
                next_pd: 1,
                next_cq: 1,
                next_qpn,
                tx: transmit::TxRoom::new(),
                events: VecDeque::new(),
                reportable: 0,
                stats: NicStats::default(),
                qp_epoch: 0,
                quiet_post: false,
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
            max_mcast_grp: mcast::MAX_MCAST_GRP,
            max_mcast_qp_attach: mcast::MAX_MCAST_QP_ATTACH,
            max_total_mcast_qp_attach: mcast::MAX_TOTAL_MCAST_QP_ATTACH,
            phys_port_cnt: 1,
            max_inline_data: l.max_inline_data,
            max_msg_sz: l.max_msg_sz,
            atomic_hca: true,
        }
    }

    /// `ibv_query_port` for port 1: a RoCE v2 port as rxe presents one (LID 0, no SM).
    pub fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: PortState::Active,
            max_mtu: self.hca.cfg.max_mtu,
            active_mtu: self.hca.cfg.active_mtu(),
            gid_tbl_len: GID_TBL_LEN,
            // What rxe reports: IB_PORT_CM_SUP alone (RXE_PORT_PORT_CAP_FLAGS; rxe does not
            // set `ip_gids`, so IP_BASED_GIDS is not reported).
            port_cap_flags: verbs_api::PORT_CAP_CM_SUP,
            max_msg_sz: self.hca.cfg.limits.max_msg_sz,
            pkey_tbl_len: 1,
            // A RoCE port has no LID and no subnet manager.
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            active_width: 2,
            active_speed: 32,
            phys_state: 5,
            link_layer: LinkLayer::Ethernet,
        }
    }

    /// The next notification or async event.
    pub fn poll_event(&mut self) -> Option<NicEvent> {
        self.hca.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
