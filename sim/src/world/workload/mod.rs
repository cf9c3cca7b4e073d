//! Workloads and results: flows drawn from a flow-size distribution ([`FlowCdf`], two classic
//! ones built in) arriving as a Poisson process at a target load, or an incast, or a
//! permutation ([`generate`]); and what a run's flows achieved — completion times and their
//! slowdown by size bucket, queue-length and rate time series, pause time per port — as text
//! tables, JSON and SVG plots (`results.rs`, `plot.rs`).
//!
//! A scenario's `[workload]` table ([`WorkloadSpec`]) turns the generated flows into RC
//! connections, one per flow, each posting one RDMA WRITE of the flow's size at its arrival
//! time; its seed is the run's.

mod cdf;
mod plot;
mod results;

pub use cdf::FlowCdf;
pub use plot::write_plots;
pub use results::{
    bucket_table, ideal_fct_ns, json_num, json_str, FlowRecord, PortPause, Results, Series,
    SlowdownBucket, BUCKET_EDGES,
};

use serde::Deserialize;

use crate::world::Rng;

/// The `[workload]` table of a scenario: generated flows instead of (or besides) fixed
/// `[[connection]]`s.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `poisson` (open-loop arrivals at `load`), `incast` (`fan_in` senders to `target` at
    /// once) or `permutation` (each host sends to another, a random derangement, at once).
    pub kind: String,
    /// The flow sizes: `websearch`, `hadoop`, or a CDF file's path. Either this or `size`.
    pub cdf: Option<String>,
    /// Every flow this many bytes (instead of `cdf`).
    pub size: Option<u64>,
    /// Sizes above this are cut to it (the data-mining tail reaches 1 GB). No cap by default.
    pub max_flow_bytes: Option<u64>,
    /// `poisson`: the offered load per host as a share of its link's bandwidth (0 < load ≤ 1).
    pub load: Option<f64>,
    /// `poisson`: how many flows to generate. 100.
    pub flows: Option<usize>,
    /// The hosts taking part (default: every node that is not a switch).
    pub hosts: Option<Vec<String>>,
    /// `incast`: the receiver (default: the first host).
    pub target: Option<String>,
    /// `incast`: how many senders (default: every other host); they are the hosts after the
    /// target, in order.
    pub fan_in: Option<usize>,
    /// The hosts' link bandwidth `load` is a share of, Gbit/s (default: the first host's
    /// first link's).
    pub link_gbps: Option<f64>,
    /// Path MTU of the flows' connections. 1024.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// WRs each flow keeps outstanding (a flow is one WRITE: 1 is enough).
    #[serde(default = "one")]
    pub window: u32,
    /// Sample switch queues and host rates every this many µs of virtual time (0: no time
    /// series).
    #[serde(default)]
    pub sample_us: u64,
}

fn default_mtu() -> u32 {
    1024
}
fn one() -> u32 {
    1
}

/// One generated flow: host indexes (into the workload's host list), bytes, and its arrival,
/// ns after the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Sending host.
    pub src: usize,
    /// Receiving host.
    pub dst: usize,
    /// Bytes.
    pub size: u64,
    /// Arrival, ns after the run's start.
    pub start_ns: u64,
}

/// What [`generate`] needs besides the spec: the number of hosts, their link's bandwidth, and
/// the workload's random stream.
pub struct GenContext<'a> {
    /// Hosts taking part.
    pub hosts: usize,
    /// Index of the incast target among them.
    pub target: usize,
    /// Their link bandwidth, Gbit/s.
    pub link_gbps: f64,
    /// The random stream (derived from the run's seed).
    pub rng: &'a mut Rng,
}

/// The most bytes a scenario's workload may move: each flow's connection registers its size at
/// both ends, so a run refuses more (naming `flows` and `max_flow_bytes`) rather than exhaust
/// memory. [`generate`] itself has no limit.
pub const MAX_WORKLOAD_BYTES: u64 = 1 << 30;

/// The flows of `spec`, in arrival order. Errors name the setting that is wrong.
pub fn generate(spec: &WorkloadSpec, cx: &mut GenContext) -> Result<Vec<Flow>, String> {
    let cap = spec.max_flow_bytes.unwrap_or(u64::MAX);
    if cap == 0 {
        return Err("[workload] max_flow_bytes must be at least 1".into());
    }
    let sizes = match (&spec.cdf, spec.size) {
        (Some(c), None) => Sizes::Cdf(FlowCdf::named_or_file(c)?),
        (None, Some(s)) if s >= 1 => Sizes::Fixed(s.min(cap)),
        (None, Some(_)) => return Err("[workload] size must be at least 1 byte".into()),
        (Some(_), Some(_)) => return Err("[workload] gives both cdf and size: choose one".into()),
        (None, None) => return Err("[workload] needs cdf (a distribution) or size".into()),
    };
    if cx.hosts < 2 {
        return Err(format!("[workload] needs at least 2 hosts, has {}", cx.hosts));
    }
    let flows = match spec.kind.as_str() {
        "poisson" => {
            let load = spec.load.ok_or("[workload] kind = \"poisson\" needs load")?;
            if !(load > 0.0 && load <= 1.0) {
                return Err(format!("[workload] load {load} is not in (0, 1]"));
            }
            if !(cx.link_gbps.is_finite() && cx.link_gbps > 0.0) {
                return Err(format!("[workload] link_gbps {} is not a bandwidth", cx.link_gbps));
            }
            let n = spec.flows.unwrap_or(100);
            poisson(&sizes, cap, load, n, cx)
        }
        "incast" => {
            let fan_in = spec.fan_in.unwrap_or(cx.hosts - 1);
            if fan_in == 0 || fan_in >= cx.hosts {
                return Err(format!(
                    "[workload] fan_in {fan_in} must be 1..={} (the other hosts)",
                    cx.hosts - 1
                ));
            }
            (1..=fan_in)
                .map(|k| Flow {
                    src: (cx.target + k) % cx.hosts,
                    dst: cx.target,
                    size: sizes.draw(cx.rng, cap),
                    start_ns: 0,
                })
                .collect()
        }
        "permutation" => {
            let to = derangement(cx.hosts, cx.rng);
            (0..cx.hosts)
                .map(|src| Flow { src, dst: to[src], size: sizes.draw(cx.rng, cap), start_ns: 0 })
                .collect()
        }
        k => {
            return Err(format!(
                "[workload] kind {k:?} is not one of \"poisson\", \"incast\", \"permutation\""
            ))
        }
    };
    Ok(flows)
}

/// Where sizes come from.
enum Sizes {
    Cdf(FlowCdf),
    Fixed(u64),
}

impl Sizes {
    fn draw(&self, rng: &mut Rng, cap: u64) -> u64 {
        match self {
            Sizes::Cdf(c) => c.sample(rng, cap),
            Sizes::Fixed(s) => *s,
        }
    }
    fn mean(&self, cap: u64) -> f64 {
        match self {
            Sizes::Cdf(c) => c.mean(cap),
            Sizes::Fixed(s) => *s as f64,
        }
    }
}

/// `n` flows arriving as a Poisson process: each host offers `load` of its link, so the
/// aggregate rate is hosts × load × bandwidth / mean size; each flow's source is uniform over
/// the hosts and its destination uniform over the others.
fn poisson(sizes: &Sizes, cap: u64, load: f64, n: usize, cx: &mut GenContext) -> Vec<Flow> {
    // Flows per ns, all hosts: bits per ns offered over bits per flow.
    let rate = cx.hosts as f64 * load * cx.link_gbps / (sizes.mean(cap) * 8.0);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let u = (cx.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        t += -(1.0 - u).ln() / rate;
        let src = cx.rng.below(cx.hosts as u64) as usize;
        let dst = (src + 1 + cx.rng.below(cx.hosts as u64 - 1) as usize) % cx.hosts;
        out.push(Flow { src, dst, size: sizes.draw(cx.rng, cap), start_ns: t as u64 });
    }
    out
}

/// A uniformly random permutation of `0..n` with no fixed point (n ≥ 2): shuffle until none
/// is fixed (about e tries on average).
fn derangement(n: usize, rng: &mut Rng) -> Vec<usize> {
    loop {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, rng.below(i as u64 + 1) as usize);
        }
        if p.iter().enumerate().all(|(i, &j)| i != j) {
            return p;
        }
    }
}

#[cfg(test)]
mod tests;
