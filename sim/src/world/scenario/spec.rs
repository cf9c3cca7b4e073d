//! The scenario file's model: what a TOML scenario may say (nodes, links, faults, connections
//! and their operations), with its defaults and the names of its operations.

use std::path::Path;

use serde::Deserialize;
use verbs_api::WrOpcode;

use crate::world::cc::{DcqcnParams, EcnMarking};
use crate::world::LinkParams;

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for the summary.
    #[serde(default)]
    pub name: String,
    /// The seed used unless `--seed` overrides it.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Give up (and fail) when virtual time passes this many ms after the start.
    #[serde(default = "default_max_time_ms")]
    pub max_time_ms: u64,
    /// Give up (and fail) after this many events.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Print a progress line to stderr every this many virtual ms (0: never).
    #[serde(default)]
    pub progress_every_ms: u64,
    /// NIC settings for every node.
    #[serde(default)]
    pub nic: NicSpec,
    /// The nodes.
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSpec>,
    /// The links.
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    /// Changes to links at virtual times.
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSpec>,
    /// RC connections and what each does (none when a `[workload]` makes them).
    #[serde(default, rename = "connection")]
    pub connections: Vec<ConnSpec>,
    /// Bounds on what the whole run achieved (its `[expect]` table); a run outside them fails.
    #[serde(default)]
    pub expect: RunBounds,
    /// Congestion control at the NICs (its `[congestion]` table); off when absent.
    #[serde(default)]
    pub congestion: Option<CongestionSpec>,
    /// Priority flow control at every switch ingress (its `[pfc]` table); off when absent.
    #[serde(default)]
    pub pfc: Option<PfcSpec>,
    /// Generated flows (its `[workload]` table): a Poisson, incast or permutation workload
    /// with sizes from a CDF; off when absent.
    #[serde(default)]
    pub workload: Option<crate::world::workload::WorkloadSpec>,
}

/// Bounds on a whole run, checked after every connection's own expectation: they make a
/// scenario fail when the network, not only a status, behaves other than it should.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBounds {
    /// Least goodput (payload bytes of successful WRs over the run's virtual time), Gbit/s.
    pub min_goodput_gbps: Option<f64>,
    /// Largest share of the packets the NICs sent that were retransmissions (0..=1).
    pub max_retransmit_share: Option<f64>,
    /// Most tail drops at switch egress queues (0: the run must never overflow a queue).
    pub max_queue_drops: Option<u64>,
    /// Fewest tail drops at switch egress queues (a scenario about congestion needs some).
    pub min_queue_drops: Option<u64>,
    /// Fewest packets marked CE at switch queues.
    pub min_ecn_marks: Option<u64>,
    /// Fewest CNPs the NICs sent.
    pub min_cnps: Option<u64>,
    /// Largest backlog any switch egress queue held, bytes.
    pub max_switch_queue_bytes: Option<u64>,
    /// Largest mean backlog a switch egress queue showed the packets entering it, bytes: the
    /// queue a run holds, not its first burst.
    pub max_mean_switch_queue_bytes: Option<u64>,
    /// Least Jain fairness index (0..=1) of the connections' goodputs while all of them were
    /// active (from the last start to the first connection's last completion).
    pub min_jain_fairness: Option<f64>,
    /// Fewest times PFC paused a link.
    pub min_pfc_pauses: Option<u64>,
    /// Most times PFC paused a link (0: PFC must never have had to act).
    pub max_pfc_pauses: Option<u64>,
    /// Whether the run must end in a PFC deadlock (true: the scenario shows one, and passes
    /// when it is detected) or must not (false, and the default: a deadlock fails the run).
    pub pfc_deadlock: Option<bool>,
    /// Least goodput of named connections (`"a -> b" = Gbit/s`), each over its own time.
    #[serde(default)]
    pub min_conn_goodput_gbps: std::collections::BTreeMap<String, f64>,
    /// Most goodput of named connections (a victim of head-of-line blocking gets less).
    #[serde(default)]
    pub max_conn_goodput_gbps: std::collections::BTreeMap<String, f64>,
}

/// The `[congestion]` table: the NICs' congestion control.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CongestionSpec {
    /// `dcqcn` (the only built-in one; a program adds its own through
    /// [`crate::world::cc::CcAlgorithm`]).
    pub algorithm: String,
    /// A NIC sends at most one CNP per QP every this many µs (DCQCN's N). 50.
    #[serde(default = "default_cnp_interval_us")]
    pub cnp_interval_us: f64,
    /// The most a flow's limiter saves up, bytes. 16384.
    #[serde(default = "default_burst")]
    pub burst_bytes: u64,
    /// DCQCN's parameters (`[congestion.dcqcn]`), each defaulting to the paper's.
    #[serde(default)]
    pub dcqcn: DcqcnParams,
}

/// The `[pfc]` table: priority flow control at every switch ingress port.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcSpec {
    /// The lossless priority, 0..=7. 3.
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// XOFF above this many bytes buffered per ingress port.
    pub xoff_bytes: u64,
    /// XON at or below this many.
    pub xon_bytes: u64,
    /// Bytes above XOFF a port may still take; beyond, a packet is dropped.
    pub headroom_bytes: u64,
}

fn default_priority() -> u8 {
    3
}

fn default_cnp_interval_us() -> f64 {
    50.0
}
fn default_burst() -> u64 {
    16 * 1024
}

fn default_seed() -> u64 {
    1
}
fn default_max_time_ms() -> u64 {
    10_000
}
fn default_max_events() -> u64 {
    50_000_000
}

/// NIC settings.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Treat `retry_cnt = 7` as infinite (rxe's behaviour).
    #[serde(default)]
    pub retry_cnt_7_infinite: bool,
    /// Ask for an ACK every this many packets of a long message.
    pub ack_every: Option<u32>,
    /// Unacknowledged packets a QP may have in flight.
    pub window: Option<u32>,
}

/// One node, or `count` nodes named `name0`, `name1`, ...
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Its name (or the prefix of the names, with `count`).
    pub name: String,
    /// Make this many nodes.
    pub count: Option<usize>,
    /// A switch rather than a NIC.
    #[serde(default)]
    pub switch: bool,
}

/// One node name or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// One name.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Names {
    /// The names, one or several.
    pub(super) fn list(&self) -> Vec<String> {
        match self {
            Names::One(n) => vec![n.clone()],
            Names::Many(v) => v.clone(),
        }
    }
}

/// Link parameters, each optional (defaults: [`LinkParams::default`], or the link's current
/// values in a `set` fault).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// See [`LinkParams::latency_ns`].
    pub latency_ns: Option<u64>,
    /// See [`LinkParams::bandwidth_gbps`].
    pub bandwidth_gbps: Option<f64>,
    /// See [`LinkParams::queue_limit`].
    pub queue_limit: Option<usize>,
    /// See [`LinkParams::loss`].
    pub loss: Option<f64>,
    /// See [`LinkParams::dup`].
    pub dup: Option<f64>,
    /// See [`LinkParams::reorder_jitter_ns`].
    pub reorder_jitter_ns: Option<u64>,
    /// See [`LinkParams::corrupt`].
    pub corrupt: Option<f64>,
    /// See [`LinkParams::truncate`].
    pub truncate: Option<f64>,
    /// ECN marking's `Kmin`, bytes (see [`LinkParams::ecn`]); any `ecn_*` turns marking on,
    /// the others defaulting to the DCQCN paper's (5 KB, 200 KB, 1 %).
    pub ecn_kmin_bytes: Option<u64>,
    /// ECN marking's `Kmax`, bytes.
    pub ecn_kmax_bytes: Option<u64>,
    /// ECN marking's `Pmax` (0..=1).
    pub ecn_pmax: Option<f64>,
}

impl ParamSpec {
    /// These parameters over `base`: each one given replaces `base`'s.
    pub(super) fn over(&self, base: &LinkParams) -> LinkParams {
        LinkParams {
            latency_ns: self.latency_ns.unwrap_or(base.latency_ns),
            bandwidth_gbps: self.bandwidth_gbps.unwrap_or(base.bandwidth_gbps),
            queue_limit: self.queue_limit.unwrap_or(base.queue_limit),
            loss: self.loss.unwrap_or(base.loss),
            dup: self.dup.unwrap_or(base.dup),
            reorder_jitter_ns: self.reorder_jitter_ns.unwrap_or(base.reorder_jitter_ns),
            corrupt: self.corrupt.unwrap_or(base.corrupt),
            truncate: self.truncate.unwrap_or(base.truncate),
            ecn: self.ecn(base.ecn),
        }
    }

    /// ECN marking over `base`'s: any `ecn_*` given turns it on.
    fn ecn(&self, base: Option<EcnMarking>) -> Option<EcnMarking> {
        if self.ecn_kmin_bytes.is_none() && self.ecn_kmax_bytes.is_none() && self.ecn_pmax.is_none()
        {
            return base;
        }
        let b = base.unwrap_or(EcnMarking::DCQCN_PAPER);
        Some(EcnMarking {
            kmin_bytes: self.ecn_kmin_bytes.unwrap_or(b.kmin_bytes),
            kmax_bytes: self.ecn_kmax_bytes.unwrap_or(b.kmax_bytes),
            pmax: self.ecn_pmax.unwrap_or(b.pmax),
        })
    }
}

/// Links from each of `from` to each of `to` (and back, unless `duplex = false`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Source node(s).
    pub from: Names,
    /// Destination node(s).
    pub to: Names,
    /// Also add the reverse link (default true).
    #[serde(default = "yes")]
    pub duplex: bool,
    /// Its parameters.
    #[serde(flatten)]
    pub params: ParamSpec,
}

fn yes() -> bool {
    true
}

/// What a fault does.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FaultAction {
    /// Cut the links.
    Partition,
    /// Restore them.
    Heal,
    /// Change their parameters.
    Set,
}

/// A change to the links between `from` and `to` (both ways unless `duplex = false`) at a
/// virtual time (µs after the start).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// When, in µs after the start.
    pub at_us: u64,
    /// What.
    pub action: FaultAction,
    /// Source node(s).
    pub from: Names,
    /// Destination node(s).
    pub to: Names,
    /// Both directions (default true).
    #[serde(default = "yes")]
    pub duplex: bool,
    /// New parameters, for `set`.
    #[serde(flatten)]
    pub params: ParamSpec,
}

/// An operation, or `count` of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// `send`, `send_imm`, `write`, `write_imm`, `read`, `cas`, `fadd`, or `random` (uniform
    /// over the others with a size uniform in `size..=max_size`).
    pub op: String,
    /// Bytes (ignored by atomics).
    #[serde(default)]
    pub size: u32,
    /// Largest size, for `random`.
    pub max_size: Option<u32>,
    /// How many.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// What a connection's WRs are expected to end with.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Every WR succeeds.
    #[default]
    Success,
    /// Some WR fails (e.g. retries exhausted by a permanent partition); the rest are flushed.
    Error,
}

/// An RC connection from each of `from` to `to`, each running the same operations.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnSpec {
    /// The requester node(s): one connection per name.
    pub from: Names,
    /// The responder node.
    pub to: String,
    /// Path MTU in bytes (256..4096).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    #[serde(default = "default_timeout")]
    pub timeout: u8,
    /// Transport retries.
    #[serde(default = "seven")]
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    #[serde(default = "seven")]
    pub rnr_retry: u8,
    /// RNR timer code the responder asks for.
    #[serde(default = "default_min_rnr")]
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics.
    #[serde(default = "four")]
    pub max_rd_atomic: u8,
    /// WRs the requester keeps outstanding.
    #[serde(default = "default_window")]
    pub window: u32,
    /// The responder posts its receives this many µs after the start (RNR until then).
    #[serde(default)]
    pub recv_delay_us: u64,
    /// The requester starts this many µs after the start.
    #[serde(default)]
    pub start_us: u64,
    /// What the WRs should end with.
    #[serde(default)]
    pub expect: Expect,
    /// The operations, in post order.
    pub ops: Vec<OpSpec>,
}

fn default_mtu() -> u32 {
    1024
}
fn default_timeout() -> u8 {
    14
}
fn seven() -> u8 {
    7
}
fn default_min_rnr() -> u8 {
    12
}
fn four() -> u8 {
    4
}
fn default_window() -> u32 {
    16
}
impl Scenario {
    /// Parse TOML.
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Scenario::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// An operation a connection posts, as an `ibv_wr_opcode` with or without an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cas,
    Fadd,
}

impl Op {
    /// The operation an `op` string names (`random` is not one: the runner draws it).
    pub(super) fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "send" => Op::Send,
            "send_imm" => Op::SendImm,
            "write" => Op::Write,
            "write_imm" => Op::WriteImm,
            "read" => Op::Read,
            "cas" => Op::Cas,
            "fadd" => Op::Fadd,
            _ => return None,
        })
    }
    /// Its name in a scenario file.
    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send_imm",
            Op::Write => "write",
            Op::WriteImm => "write_imm",
            Op::Read => "read",
            Op::Cas => "cas",
            Op::Fadd => "fadd",
        }
    }
    /// The `ibv_wr_opcode` it posts.
    pub(super) fn wr_opcode(self) -> WrOpcode {
        match self {
            Op::Send => WrOpcode::Send,
            Op::SendImm => WrOpcode::SendWithImm,
            Op::Write => WrOpcode::RdmaWrite,
            Op::WriteImm => WrOpcode::RdmaWriteWithImm,
            Op::Read => WrOpcode::RdmaRead,
            Op::Cas => WrOpcode::AtomicCmpAndSwp,
            Op::Fadd => WrOpcode::AtomicFetchAndAdd,
        }
    }
    /// Whether it consumes a receive WQE at the responder.
    pub(super) fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }
    /// Every operation, the set `random` draws from.
    pub(super) const ALL: [Op; 7] =
        [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read, Op::Cas, Op::Fadd];
}
