//! Congestion control in the simulated fabric, as RoCE deployments run it: switches mark ECN
//! at their egress queues (RED-like, [`EcnMarking`]), the receiving NIC answers a marked
//! packet with a CNP (RoCEv2 opcode 0x81, at most one per QP every `cnp_interval_ns`), and the
//! sending NIC paces each of its flows at the rate a [`RateControl`] sets — DCQCN's reaction
//! point ([`dcqcn::Dcqcn`]) or one a user writes.
//!
//! Where each piece sits, and why (docs/decisions.md, "Simulator: congestion control"):
//! - **Marking** is a link parameter ([`crate::world::LinkParams::ecn`]), used on a switch's
//!   links (its egress queues): the queue's backlog in bytes is the time its line is still
//!   busy times its rate. The ECN bits are in the IPv4 TOS byte, which the ICRC masks, so a
//!   marked packet's ICRC stays valid; its IPv4 header checksum is rewritten.
//! - **The NIC's half** (ECT on what it sends, CNPs, the per-QP rate limiter) belongs to the
//!   node, not the engine: the engine still builds every datagram; the node, which already
//!   paces its NIC by its link, takes from the engine's queue only a datagram whose flow's
//!   limiter has the credit for it ([`nic_model::engine::Nic::poll_transmit_where`]), so a
//!   slowed QP does not hold back the others. A flow is a (destination port, destination QP)
//!   of the sender; a CNP names the sender's own QP, which the NIC maps to that flow.
//! - **Off by default**: without [`CcConfig`] (`World::set_congestion_control`) and without
//!   [`EcnMarking`] on a link, nothing here runs and no random number is drawn, so every
//!   existing trace is unchanged.

pub mod dcqcn;
pub(crate) mod nic;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use nic_model::engine::Transmit;
use nic_model::packet::{self, Bth, IpUdp, Opcode, Packet, Psn};
use serde::Deserialize;

pub use dcqcn::{Dcqcn, DcqcnAlgorithm, DcqcnParams};

/// One flow's congestion control at the sending NIC: the rate its limiter lets it send at,
/// and the signals that move it. The simulator calls it only for flows of a node with
/// congestion control on, never on a path without it. Implement it (with a [`CcAlgorithm`]
/// that makes one per flow) to try another algorithm; [`check_flow`] property-tests it.
pub trait RateControl: Send + fmt::Debug {
    /// The rate the flow may send at now, Gbit/s (kept within [`CcAlgorithm`]'s minimum and
    /// the line rate by the caller's checks, see [`check_flow`]).
    fn rate_gbps(&self) -> f64;
    /// Run whatever timers are due by `now_ns` (called before every other call, with
    /// non-decreasing times).
    fn advance(&mut self, now_ns: u64);
    /// The flow put `bytes` (a whole datagram) on the wire at `now_ns`.
    fn on_sent(&mut self, now_ns: u64, bytes: usize);
    /// A CNP for this flow arrived at `now_ns`.
    fn on_cnp(&mut self, now_ns: u64);
}

/// A congestion-control algorithm: makes a [`RateControl`] for each new flow.
pub trait CcAlgorithm: Send + Sync + fmt::Debug {
    /// Its name, for summaries.
    fn name(&self) -> &str;
    /// The state of a flow that starts at `now_ns` on a line of `line_gbps`.
    fn new_flow(&self, line_gbps: f64, now_ns: u64) -> Box<dyn RateControl>;
}

/// RED-like ECN marking at an egress queue, DCQCN's congestion point: a packet entering a
/// queue with `backlog` bytes ahead of it is marked CE with probability 0 below `kmin_bytes`,
/// rising linearly to `pmax` at `kmax_bytes`, and 1 above. Only ECN-capable packets (ECT) are
/// marked; others pass untouched.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcnMarking {
    /// `Kmin`: no mark below this backlog, bytes.
    pub kmin_bytes: u64,
    /// `Kmax`: every packet marked above this backlog, bytes.
    pub kmax_bytes: u64,
    /// `Pmax`: the marking probability at `Kmax` (0..=1).
    pub pmax: f64,
}

impl EcnMarking {
    /// The DCQCN paper's setting: `Kmin` 5 KB, `Kmax` 200 KB, `Pmax` 1 %.
    pub const DCQCN_PAPER: EcnMarking =
        EcnMarking { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.01 };

    /// The probability that a packet arriving at `backlog_bytes` is marked.
    pub fn probability(&self, backlog_bytes: u64) -> f64 {
        if backlog_bytes <= self.kmin_bytes {
            0.0
        } else if backlog_bytes > self.kmax_bytes {
            1.0
        } else {
            let span = (self.kmax_bytes - self.kmin_bytes).max(1) as f64;
            self.pmax * (backlog_bytes - self.kmin_bytes) as f64 / span
        }
    }

    /// Whether the thresholds make sense; the error names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.kmin_bytes > self.kmax_bytes {
            return Err(format!(
                "ECN: kmin ({} bytes) is above kmax ({} bytes)",
                self.kmin_bytes, self.kmax_bytes
            ));
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return Err(format!("ECN: pmax must be within [0, 1], not {}", self.pmax));
        }
        Ok(())
    }
}

/// The NICs' congestion control: the algorithm, and the notification point's CNP pacing.
#[derive(Clone, Debug)]
pub struct CcConfig {
    /// The reaction point's algorithm.
    pub algorithm: Arc<dyn CcAlgorithm>,
    /// A receiving NIC sends at most one CNP per QP every this many ns (the DCQCN paper's N,
    /// 50 µs; NIC: `min_time_between_cnps`).
    pub cnp_interval_ns: u64,
    /// The most credit a flow's limiter saves while it waits, bytes: a burst it may send at
    /// line rate after an idle time. At least one datagram.
    pub burst_bytes: u64,
}

impl CcConfig {
    /// DCQCN with `params`, a CNP per QP every 50 µs at most, and a burst of 16 KiB.
    pub fn dcqcn(params: DcqcnParams) -> CcConfig {
        CcConfig {
            algorithm: Arc::new(DcqcnAlgorithm(params)),
            cnp_interval_ns: 50_000,
            burst_bytes: 16 * 1024,
        }
    }
}

/// A flow's rate limiter: a token bucket of bytes refilled at the flow's rate, at most
/// `burst` full. A datagram leaves only when the bucket holds all its bytes, so the credit
/// never goes negative.
#[derive(Clone, Debug)]
pub struct Pacer {
    credit: f64,
    last_ns: u64,
    burst: f64,
}

impl Pacer {
    /// A full bucket of `burst` bytes at `now_ns`.
    pub fn new(burst: u64, now_ns: u64) -> Pacer {
        Pacer { credit: burst as f64, last_ns: now_ns, burst: burst as f64 }
    }

    /// The credit now, bytes.
    pub fn credit(&self) -> f64 {
        self.credit
    }

    /// Add what `rate_gbps` earned since the last refill.
    pub fn refill(&mut self, now_ns: u64, rate_gbps: f64) {
        if now_ns > self.last_ns {
            let earned = (now_ns - self.last_ns) as f64 * rate_gbps / 8.0;
            self.credit = (self.credit + earned).min(self.burst);
            self.last_ns = now_ns;
        }
    }

    /// Take `len` bytes if the bucket holds them (a datagram longer than the bucket needs it
    /// full, and empties it).
    pub fn try_take(&mut self, len: usize) -> bool {
        let need = (len as f64).min(self.burst);
        if self.credit < need {
            return false;
        }
        self.credit = (self.credit - len as f64).max(0.0);
        true
    }

    /// When a datagram of `len` bytes may leave at `rate_gbps` (now, if it may).
    pub fn ready_at(&self, len: usize, rate_gbps: f64) -> u64 {
        let missing = (len as f64).min(self.burst) - self.credit;
        if missing <= 0.0 || rate_gbps <= 0.0 {
            return self.last_ns;
        }
        self.last_ns + (missing * 8.0 / rate_gbps).ceil() as u64
    }
}

/// What a NIC's congestion control did (per node; [`crate::world::World::cc_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CcStats {
    /// Packets received with CE set (congestion experienced).
    pub ce_received: u64,
    /// CNPs sent (notification point).
    pub cnps_sent: u64,
    /// CE-marked packets that found their QP's CNP sent less than `cnp_interval_ns` ago.
    pub cnps_coalesced: u64,
    /// CNPs received (reaction point).
    pub cnps_received: u64,
    /// Times a flow's limiter held its next datagram back.
    pub paced: u64,
}

impl CcStats {
    /// Add `o` into `self`.
    pub fn add(&mut self, o: &CcStats) {
        self.ce_received += o.ce_received;
        self.cnps_sent += o.cnps_sent;
        self.cnps_coalesced += o.cnps_coalesced;
        self.cnps_received += o.cnps_received;
        self.paced += o.paced;
    }
}

/// A flow of a sending NIC: its destination port's slot and the destination QP.
pub(crate) type FlowKey = (u16, u32);

/// One flow's state at its sending NIC.
#[derive(Debug)]
pub(crate) struct Flow {
    pub(crate) ctl: Box<dyn RateControl>,
    pub(crate) pacer: Pacer,
    /// The lowest rate it was ever set to, Gbit/s.
    pub(crate) min_rate_gbps: f64,
}

/// A NIC node's congestion-control state.
#[derive(Debug, Default)]
pub(crate) struct NodeCc {
    pub(crate) flows: BTreeMap<FlowKey, Flow>,
    /// When each local QP last sent a CNP.
    pub(crate) last_cnp: BTreeMap<u32, u64>,
    /// CNPs waiting for the link, sent before the engine's datagrams (as a NIC sends them at
    /// a higher priority).
    pub(crate) outbox: VecDeque<Transmit>,
    pub(crate) stats: CcStats,
    /// The rate its flows start at (its fastest link's), once looked up.
    pub(crate) line_gbps: Option<f64>,
}

/// The world's congestion control: the configuration and every node's state.
#[derive(Debug)]
pub(crate) struct CcState {
    pub(crate) cfg: CcConfig,
    pub(crate) nodes: Vec<NodeCc>,
}

impl CcState {
    pub(crate) fn new(cfg: CcConfig) -> CcState {
        CcState { cfg, nodes: Vec::new() }
    }
}

/// The IPv4 header's length and where the BTH starts in an IPv4 RoCEv2 datagram.
const IPV4_LEN: usize = 20;
const BTH_AT: usize = packet::IPV4_UDP_LEN;

/// ECN codepoints (the TOS byte's low 2 bits).
pub const ECN_NOT_ECT: u8 = 0b00;
/// ECT(0): ECN-capable transport, what RoCE NICs send.
pub const ECN_ECT0: u8 = 0b10;
/// CE: congestion experienced, set by a switch.
pub const ECN_CE: u8 = 0b11;

/// The ECN codepoint of an IPv4 datagram (`None` for IPv6 or a runt).
pub fn ecn_of(data: &[u8]) -> Option<u8> {
    match data.first() {
        Some(b) if b >> 4 == 4 && data.len() >= IPV4_LEN => Some(data[1] & 0b11),
        _ => None,
    }
}

/// Set the ECN codepoint of an IPv4 datagram and rewrite its header checksum (the ICRC masks
/// the TOS byte, so it stays valid). Does nothing to IPv6 or a runt.
pub fn set_ecn(data: &mut [u8], ecn: u8) {
    if ecn_of(data).is_none() {
        return;
    }
    data[1] = (data[1] & !0b11) | (ecn & 0b11);
    data[10] = 0;
    data[11] = 0;
    let mut sum = 0u32;
    for w in data[..IPV4_LEN].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    data[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The BTH opcode of an IPv4 datagram.
fn opcode(data: &[u8]) -> Option<u8> {
    ecn_of(data)?;
    data.get(BTH_AT).copied()
}

/// The BTH destination QP of an IPv4 datagram.
pub(crate) fn dest_qp(data: &[u8]) -> Option<u32> {
    let b = data.get(BTH_AT + 5..BTH_AT + 8)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// Whether a datagram is one a flow's limiter paces and a switch may mark: IPv4 RoCEv2
/// carrying data or a request (not an ACK, an atomic ACK or a CNP, which are never held
/// back, as a NIC's responder and notification point send them outside its rate limiter).
pub(crate) fn is_data(data: &[u8]) -> bool {
    match opcode(data) {
        Some(op) => {
            op != Opcode::RC_ACKNOWLEDGE.0 && op != Opcode::RC_ATOMIC_ACKNOWLEDGE.0 && op < 0x80
        }
        None => false,
    }
}

/// Whether a datagram is a CNP.
pub(crate) fn is_cnp(data: &[u8]) -> bool {
    opcode(data) == Some(Opcode::CNP.0)
}

/// A CNP as NICs send it: IPv4/UDP from `src` to `dst` (the sender of the marked packet),
/// BTH opcode 0x81 with BECN set, P_Key 0xFFFF, the destination QP the sender's QP, PSN 0,
/// 16 reserved zero bytes, ICRC.
pub fn build_cnp(src: [u8; 4], dst: [u8; 4], dest_qp: u32, src_port: u16) -> Vec<u8> {
    let ip = IpUdp { src, dst, src_port, ..IpUdp::default() };
    let pkt = Packet {
        bth: Bth {
            opcode: Opcode::CNP,
            becn: true,
            pkey: 0xffff,
            dest_qp,
            psn: Psn::new(0),
            ..Bth::default()
        },
        deth: None,
        feth: None,
        reth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm: None,
        ieth: None,
        payload: &[],
    };
    let mut out = Vec::new();
    packet::emit_datagram(&ip, &pkt, &mut out).expect("a CNP is in the opcode table");
    out
}

/// One thing that happens to a flow, for [`check_flow`].
#[derive(Clone, Copy, Debug)]
pub enum FlowEvent {
    /// Time passes (ns).
    Wait(u64),
    /// The flow tries to send a datagram of this many bytes (it goes if its limiter allows).
    Send(usize),
    /// A CNP arrives.
    Cnp,
}

/// Drive a new flow of `alg` on a line of `line_gbps` through `events`, with a limiter of
/// `burst` bytes, and check after every step what any algorithm must keep: the rate a
/// finite number within [`min_gbps`, `line_gbps`] and the limiter's credit never negative, and
/// the bytes sent never more than the burst plus what the line rate allows. The error names
/// the step and what broke. A property test over generated events (see this module's tests)
/// checks an algorithm, DCQCN's or a user's.
pub fn check_flow(
    alg: &dyn CcAlgorithm,
    line_gbps: f64,
    min_gbps: f64,
    burst: u64,
    events: &[FlowEvent],
) -> Result<(), String> {
    let mut now = 1_000_000u64;
    let start = now;
    let mut ctl = alg.new_flow(line_gbps, now);
    let mut pacer = Pacer::new(burst, now);
    let mut sent = 0u64;
    for (i, e) in events.iter().enumerate() {
        match *e {
            FlowEvent::Wait(dt) => now += dt,
            FlowEvent::Send(len) => {
                ctl.advance(now);
                pacer.refill(now, ctl.rate_gbps());
                if pacer.try_take(len) {
                    sent += len as u64;
                    ctl.on_sent(now, len);
                }
            }
            FlowEvent::Cnp => {
                ctl.advance(now);
                pacer.refill(now, ctl.rate_gbps());
                ctl.on_cnp(now);
            }
        }
        ctl.advance(now);
        let r = ctl.rate_gbps();
        if !(r.is_finite() && r >= min_gbps - 1e-9 && r <= line_gbps + 1e-9) {
            return Err(format!(
                "step {i} ({e:?}): rate {r} Gbit/s outside [{min_gbps}, {line_gbps}]"
            ));
        }
        if pacer.credit() < 0.0 {
            return Err(format!("step {i} ({e:?}): negative credit {}", pacer.credit()));
        }
        let allowed = burst as f64 + (now - start) as f64 * line_gbps / 8.0 + 1.0;
        if sent as f64 > allowed {
            return Err(format!(
                "step {i} ({e:?}): {sent} bytes sent, more than the line rate allows ({allowed})"
            ));
        }
    }
    Ok(())
}
