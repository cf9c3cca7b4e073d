//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//! SIGCOMM 2015, section 3.1 and Figure 7): the sending NIC's per-QP rate state machine.
//!
//! The current rate `Rc` falls on every CNP by a fraction `alpha / 2` of itself, after the
//! target rate `Rt` took its old value; `alpha` moves towards 1 by `g` on a CNP and decays by
//! `(1 - g)` every `alpha_timer_us` (the paper's K) without one. Recovery counts two kinds of
//! rate-increase events since the last CNP: the timer (every `rate_timer_us`, T) and the byte
//! counter (every `byte_counter` bytes sent, B). While both counts are below `fast_recovery`
//! (F), each event halves the distance to `Rt` (fast recovery); once one count reaches F,
//! `Rt` first grows by `rai_mbps` (additive increase), and once both do, by `i * rhai_mbps`
//! with `i` the smaller count beyond F (hyper increase); `Rc` then moves halfway to `Rt`.
//!
//! Timers are not events of the world: [`RateControl::advance`] runs the ticks due since it
//! last ran, in order, whenever the flow is looked at (before a send, on a CNP). Nothing
//! between two looks depends on the rate, so the state is what eager timers would have made.

use serde::Deserialize;

use super::{CcAlgorithm, RateControl};

/// DCQCN's parameters, named as in the paper (NIC firmware names in the field docs: the
/// `rpg_*` and `dce_tcp_*` parameters of NVIDIA/Mellanox ConnectX NICs, `mlxconfig` and
/// `/sys/class/net/*/ecn/roce_rp/`). Defaults: the paper's section 5 settings as this
/// simulator reads them (`docs/simulator.md`, "Congestion control").
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DcqcnParams {
    /// `g`: the gain of the `alpha` update (NIC: `dce_tcp_g`, in 1/1024ths). 1/256.
    pub g: f64,
    /// K: `alpha` decays by `(1 - g)` every this many µs without a CNP (NIC: `dce_tcp_rtt`). 55.
    pub alpha_timer_us: f64,
    /// T: the rate-increase timer, µs (NIC: `rpg_time_reset`). 55.
    pub rate_timer_us: f64,
    /// B: the rate-increase byte counter, bytes (NIC: `rpg_byte_reset`). 10 MB.
    pub byte_counter: u64,
    /// F: rate-increase events of each kind before additive increase (NIC: `rpg_threshold`). 5.
    pub fast_recovery: u32,
    /// `R_AI`: the additive increase step, Mbit/s (NIC: `rpg_ai_rate`). 40.
    pub rai_mbps: f64,
    /// `R_HAI`: the hyper increase step, Mbit/s (NIC: `rpg_hai_rate`). 100.
    pub rhai_mbps: f64,
    /// The lowest rate, Mbit/s (NIC: `rpg_min_rate`). 10.
    pub min_rate_mbps: f64,
    /// `alpha` a flow starts with (NIC: `initial_alpha_value`, in 1/1024ths). 1.
    pub initial_alpha: f64,
}

impl Default for DcqcnParams {
    fn default() -> DcqcnParams {
        DcqcnParams {
            g: 1.0 / 256.0,
            alpha_timer_us: 55.0,
            rate_timer_us: 55.0,
            byte_counter: 10_000_000,
            fast_recovery: 5,
            rai_mbps: 40.0,
            rhai_mbps: 100.0,
            min_rate_mbps: 10.0,
            initial_alpha: 1.0,
        }
    }
}

impl DcqcnParams {
    /// Whether the parameters make sense; the error names the first that does not.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("alpha_timer_us", self.alpha_timer_us),
            ("rate_timer_us", self.rate_timer_us),
            ("min_rate_mbps", self.min_rate_mbps),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("dcqcn: {name} must be a positive number, not {v}"));
            }
        }
        for (name, v) in [("rai_mbps", self.rai_mbps), ("rhai_mbps", self.rhai_mbps)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("dcqcn: {name} must be a number >= 0, not {v}"));
            }
        }
        for (name, v) in [("g", self.g), ("initial_alpha", self.initial_alpha)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("dcqcn: {name} must be within [0, 1], not {v}"));
            }
        }
        if self.byte_counter == 0 {
            return Err("dcqcn: byte_counter must be at least 1 byte".into());
        }
        Ok(())
    }
}

/// DCQCN as a [`CcAlgorithm`]: every flow gets a [`Dcqcn`] with these parameters.
#[derive(Clone, Debug, Default)]
pub struct DcqcnAlgorithm(pub DcqcnParams);

impl CcAlgorithm for DcqcnAlgorithm {
    fn name(&self) -> &str {
        "dcqcn"
    }
    fn new_flow(&self, line_gbps: f64, now_ns: u64) -> Box<dyn RateControl> {
        Box::new(Dcqcn::new(self.0.clone(), line_gbps, now_ns))
    }
}

/// One QP's DCQCN reaction point. See the module documentation.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    p: DcqcnParams,
    line_gbps: f64,
    min_gbps: f64,
    /// `Rc`, Gbit/s.
    rc: f64,
    /// `Rt`, Gbit/s.
    rt: f64,
    alpha: f64,
    /// Timer (T) and byte-counter (B) events since the last CNP.
    timer_events: u32,
    byte_events: u32,
    /// Bytes sent since the byte counter last fired.
    bytes: u64,
    next_alpha_ns: u64,
    next_rate_ns: u64,
    alpha_ns: u64,
    rate_ns: u64,
}

impl Dcqcn {
    /// A flow at line rate (a new QP sends at line rate until its first CNP).
    pub fn new(p: DcqcnParams, line_gbps: f64, now_ns: u64) -> Dcqcn {
        let min_gbps = (p.min_rate_mbps / 1000.0).min(line_gbps);
        let alpha_ns = ((p.alpha_timer_us * 1000.0) as u64).max(1);
        let rate_ns = ((p.rate_timer_us * 1000.0) as u64).max(1);
        Dcqcn {
            alpha: p.initial_alpha,
            p,
            line_gbps,
            min_gbps,
            rc: line_gbps,
            rt: line_gbps,
            timer_events: 0,
            byte_events: 0,
            bytes: 0,
            next_alpha_ns: now_ns + alpha_ns,
            next_rate_ns: now_ns + rate_ns,
            alpha_ns,
            rate_ns,
        }
    }

    /// `alpha` now.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// `Rt`, the target rate, Gbit/s.
    pub fn target_gbps(&self) -> f64 {
        self.rt
    }

    /// One rate-increase event (the timer's or the byte counter's): fast recovery, additive
    /// or hyper increase by how many of each kind have happened since the last CNP.
    fn increase(&mut self) {
        let f = self.p.fast_recovery;
        let (lo, hi) =
            (self.timer_events.min(self.byte_events), self.timer_events.max(self.byte_events));
        if hi >= f {
            let step = if lo > f { f64::from(lo - f) * self.p.rhai_mbps } else { self.p.rai_mbps };
            self.rt = (self.rt + step / 1000.0).min(self.line_gbps);
        }
        self.rc = ((self.rt + self.rc) / 2.0).clamp(self.min_gbps, self.line_gbps);
    }

    /// Whether more increase events would change nothing: both rates at line rate.
    fn at_line_rate(&self) -> bool {
        self.rc >= self.line_gbps && self.rt >= self.line_gbps
    }
}

impl RateControl for Dcqcn {
    fn rate_gbps(&self) -> f64 {
        self.rc
    }

    fn advance(&mut self, now_ns: u64) {
        if self.next_alpha_ns <= now_ns {
            let ticks = (now_ns - self.next_alpha_ns) / self.alpha_ns + 1;
            self.alpha *= pow_by_squaring(1.0 - self.p.g, ticks);
            self.next_alpha_ns += ticks * self.alpha_ns;
        }
        while self.next_rate_ns <= now_ns {
            if self.at_line_rate() {
                // Nothing left to recover: skip the ticks (an idle flow may wait long).
                let ticks = (now_ns - self.next_rate_ns) / self.rate_ns + 1;
                self.timer_events = self.timer_events.saturating_add(ticks as u32);
                self.next_rate_ns += ticks * self.rate_ns;
                break;
            }
            self.timer_events = self.timer_events.saturating_add(1);
            self.next_rate_ns += self.rate_ns;
            self.increase();
        }
    }

    fn on_sent(&mut self, _now_ns: u64, bytes: usize) {
        self.bytes += bytes as u64;
        while self.bytes >= self.p.byte_counter {
            self.bytes -= self.p.byte_counter;
            self.byte_events = self.byte_events.saturating_add(1);
            self.increase();
        }
    }

    fn on_cnp(&mut self, now_ns: u64) {
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).clamp(self.min_gbps, self.line_gbps);
        self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g;
        self.timer_events = 0;
        self.byte_events = 0;
        self.bytes = 0;
        self.next_alpha_ns = now_ns + self.alpha_ns;
        self.next_rate_ns = now_ns + self.rate_ns;
    }
}

/// `base` to the power `n` by repeated squaring: a fixed sequence of IEEE multiplications,
/// which gives the same bits on every platform (a libm's `pow` need not, and a run must replay
/// anywhere), in O(log n) however long a flow was idle.
fn pow_by_squaring(mut base: f64, mut n: u64) -> f64 {
    let mut acc = 1.0;
    while n > 0 {
        if n & 1 == 1 {
            acc *= base;
        }
        base *= base;
        n >>= 1;
    }
    acc
}
