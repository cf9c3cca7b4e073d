//! `SOFTVERBS_FAULTS`: a seeded fault plan for any soft-backend run, in the simulator's fault
//! vocabulary ([`crate::fault`]): the plan's grammar (inline words or a TOML file), and each
//! port's faults as its send and receive paths apply them.
//!
//! Inline: words separated by spaces, commas or semicolons, each `[DEV:][tx:|rx:]WORD`:
//! `seed=N`, `loss=R`, `dup=R` (or `duplicate=R`), `corrupt=R`, `truncate=R` (a rate `R` as
//! `5%` or `0.05`), `reorder=DURATION` (or `reorder_jitter_ns=N`: each packet held a uniform
//! 0..=that long), `drop=KIND#K` (the K-th packet of a kind, from 1), `pause=DURATION@TIME`
//! (nothing in or out for DURATION from TIME after the device opened), `fail@TIME` (the port
//! goes down for good). Durations take `ns`, `us`, `ms` or `s`. Rates and reorder without
//! `tx:`/`rx:` apply to both directions; `drop` without one counts the packets the port sends.
//! `@FILE` reads the same words from a TOML file: `key = value` lines (the scenario files'
//! link keys), under `[tx]`, `[rx]`, `[DEV]` or `[DEV.tx]` tables.
//!
//! On the way out the plan is a layer around the port's sending half (`Faulted`, as
//! smoltcp's `FaultInjector` wraps a device); on the way in the device's progress round asks
//! the same `PortFaults` before the engine sees a datagram.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::engine::{Egress, SendOutcome};
use crate::fault::{DropNth, FaultParams, Rng};
use crate::packet::IPV4_UDP_LEN;

/// Packets a port holds for their reorder jitter at most; beyond, they pass at once.
const MAX_HELD: usize = 4096;

/// Packet kinds `drop=KIND#K` names, by BTH opcode class.
const KINDS: [&str; 8] =
    ["send", "write", "read-req", "read-resp", "ack", "atomic", "atomic-ack", "any"];

/// The connection manager's MADs `drop=KIND#K` also names, by attribute ID from 0x0010 (REQ):
/// the process's CM sends and receives them itself (they are not the port's packets), and
/// applies these words to them ([`FaultPlan::mad_drops`]).
pub const MAD_KINDS: [&str; 9] = [
    "cm-req",
    "cm-mra",
    "cm-rej",
    "cm-rep",
    "cm-rtu",
    "cm-dreq",
    "cm-drep",
    "cm-sidr-req",
    "cm-sidr-rep",
];

/// The kind of a datagram (an index into [`KINDS`]); "any" (7) when it is none of the others.
fn kind_of(datagram: &[u8]) -> usize {
    let Some(&op) = datagram.get(IPV4_UDP_LEN) else { return 7 };
    if op >> 5 > 3 {
        return 7;
    }
    match op & 0x1f {
        0x00..=0x05 => 0,
        0x06..=0x0b => 1,
        0x0c => 2,
        0x0d..=0x0f => 3,
        0x10 => 4,
        0x11 => 6,
        0x12 | 0x13 => 5,
        _ => 7,
    }
}

/// Which way a packet goes through the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Tx,
    Rx,
}

#[derive(Clone, Debug, PartialEq)]
enum What {
    Seed(u64),
    Loss(f64),
    Dup(f64),
    Corrupt(f64),
    Truncate(f64),
    Reorder(u64),
    Drop(usize, u64),
    /// `drop=cm-…#K`: an index into [`MAD_KINDS`].
    DropMad(usize, u64),
    Pause {
        at_ns: u64,
        for_ns: u64,
    },
    Fail {
        at_ns: u64,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    device: Option<String>,
    tx: bool,
    rx: bool,
    what: What,
    /// The word as written (without its device), for the plan's description.
    word: String,
}

/// A parsed `SOFTVERBS_FAULTS` plan.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    rules: Vec<Rule>,
    /// The plan as given, to repeat it.
    text: String,
}

fn parse_rate(v: &str) -> Option<f64> {
    let r = match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => v.parse::<f64>().ok()?,
    };
    (r.is_finite() && (0.0..=1.0).contains(&r)).then_some(r)
}

fn parse_duration_ns(v: &str) -> Option<u64> {
    let (num, scale) = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(u, s)| v.strip_suffix(u).map(|n| (n, *s)))?;
    let n: f64 = num.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0 && n * scale < 1e18).then_some((n * scale) as u64)
}

fn parse_word(word: &str) -> Result<Rule, String> {
    let bad = |why: &str| format!("{word:?}: {why}");
    let mut rest = word;
    let mut device = None;
    let (mut tx, mut rx) = (true, true);
    let mut scoped = false;
    while let Some((head, tail)) = rest.split_once(':') {
        if head.contains(['=', '@']) {
            break;
        }
        match head {
            "tx" => (tx, rx, scoped) = (true, false, true),
            "rx" => (tx, rx, scoped) = (false, true, true),
            d if d.starts_with("softverbs") && device.is_none() => device = Some(d.to_string()),
            other => {
                return Err(bad(&format!("{other:?} is neither tx, rx nor a device (softverbsN)")))
            }
        }
        rest = tail;
    }
    let what = if let Some(at) = rest.strip_prefix("fail@") {
        let at_ns = parse_duration_ns(at)
            .ok_or_else(|| bad("fail@TIME needs a time such as 1s or 200ms"))?;
        What::Fail { at_ns }
    } else {
        let (key, value) =
            rest.split_once('=').ok_or_else(|| bad("expected KEY=VALUE or fail@TIME"))?;
        let rate = || {
            parse_rate(value)
                .ok_or_else(|| bad("a rate is a fraction in 0..=1 or a percentage (5%)"))
        };
        match key {
            "seed" => What::Seed(value.parse().map_err(|_| bad("the seed is a whole number"))?),
            "loss" => What::Loss(rate()?),
            "dup" | "duplicate" => What::Dup(rate()?),
            "corrupt" => What::Corrupt(rate()?),
            "truncate" => What::Truncate(rate()?),
            "reorder" => What::Reorder(
                parse_duration_ns(value).ok_or_else(|| bad("reorder takes a duration such as 50us"))?,
            ),
            "reorder_jitter_ns" => What::Reorder(value.parse().map_err(|_| bad("a whole number of ns"))?),
            "drop" => {
                let (kind, k) = value.split_once('#').ok_or_else(|| bad("drop=KIND#K, such as drop=ack#3"))?;
                let mad = MAD_KINDS.iter().position(|n| *n == kind);
                let port_kind = KINDS.iter().position(|n| *n == kind);
                if mad.is_none() && port_kind.is_none() {
                    return Err(bad(&format!(
                        "unknown packet kind {kind:?} (kinds: {}, {})",
                        KINDS.join(", "),
                        MAD_KINDS.join(", ")
                    )));
                }
                let k: u64 = k.parse().ok().filter(|&k| k >= 1).ok_or_else(|| bad("K counts from 1"))?;
                if !scoped {
                    (tx, rx) = (true, false);
                }
                match (port_kind, mad) {
                    (Some(kind), _) => What::Drop(kind, k),
                    (None, m) => What::DropMad(m.unwrap_or_default(), k),
                }
            }
            "pause" => {
                let (dur, at) = value.split_once('@').ok_or_else(|| bad("pause=DURATION@TIME, such as pause=200ms@1s"))?;
                let for_ns = parse_duration_ns(dur).ok_or_else(|| bad("the pause's length is a duration such as 200ms"))?;
                let at_ns = parse_duration_ns(at).ok_or_else(|| bad("the pause's start is a time such as 1s"))?;
                What::Pause { at_ns, for_ns }
            }
            other => {
                return Err(bad(&format!(
                    "unknown word {other:?} (seed, loss, dup, corrupt, truncate, reorder, drop, pause, fail@)"
                )))
            }
        }
    };
    if matches!(what, What::Seed(_)) && (device.is_some() || scoped) {
        return Err(bad("the seed is the plan's, not a device's or a direction's"));
    }
    let shown = match &device {
        Some(d) => word.strip_prefix(d.as_str()).and_then(|w| w.strip_prefix(':')).unwrap_or(word),
        None => word,
    };
    Ok(Rule { device, tx, rx, what, word: shown.to_string() })
}

/// The words of a TOML plan file (see the module documentation).
fn toml_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut prefix = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = match raw.find('#') {
            // A '#' inside quotes is drop=KIND#K's.
            Some(at) if raw[..at].matches('"').count() % 2 == 0 => &raw[..at],
            _ => raw,
        }
        .trim();
        if line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            prefix =
                section.split('.').map(|p| format!("{}:", p.trim().trim_matches('"'))).collect();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: {line:?} is not KEY = VALUE", i + 1))?;
        let (key, value) = (key.trim(), value.trim());
        let values: Vec<&str> = match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Some(list) => list.split(',').map(str::trim).filter(|v| !v.is_empty()).collect(),
            None => vec![value],
        };
        for v in values {
            let v = v.trim_matches('"');
            words.push(match key {
                "fail" => format!("{prefix}fail@{v}"),
                _ => format!("{prefix}{key}={v}"),
            });
        }
    }
    Ok(words)
}

impl FaultPlan {
    /// Parses a plan: inline words, or `@FILE`. The error names the bad word (or file line).
    pub fn parse(text: &str) -> Result<FaultPlan, String> {
        let words: Vec<String> = match text.trim().strip_prefix('@') {
            Some(file) => {
                let body =
                    std::fs::read_to_string(file).map_err(|e| format!("reading {file}: {e}"))?;
                toml_words(&body).map_err(|e| format!("{file}: {e}"))?
            }
            None => text
                .split([' ', '\t', '\n', ',', ';'])
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect(),
        };
        let rules = words.iter().map(|w| parse_word(w)).collect::<Result<Vec<_>, _>>()?;
        Ok(FaultPlan { rules, text: text.trim().to_string() })
    }

    /// The plan's `drop=cm-…#K` words, for the CM that sends and receives MADs: (attribute
    /// ID, on the way out (else in), K counting from 1), for any device.
    pub fn mad_drops(&self) -> Vec<(u16, bool, u64)> {
        let mut v = Vec::new();
        for r in &self.rules {
            if let What::DropMad(i, k) = r.what {
                if r.tx {
                    v.push((0x0010 + i as u16, true, k));
                }
                if r.rx {
                    v.push((0x0010 + i as u16, false, k));
                }
            }
        }
        v
    }

    /// The plan's seed, if it names one.
    pub fn seed(&self) -> Option<u64> {
        self.rules.iter().find_map(|r| match r.what {
            What::Seed(s) => Some(s),
            _ => None,
        })
    }

    /// The plan with `seed=N` in front when it names no seed, so that it repeats a run.
    pub fn with_seed(&self, seed: u64) -> String {
        match self.seed() {
            Some(_) => self.text.clone(),
            None => format!("seed={seed} {}", self.text),
        }
    }

    /// What applies to `device`, with `seed` as its seed; None when nothing does.
    pub(crate) fn for_device(&self, device: &str, seed: u64) -> Option<PortFaults> {
        let rules: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| !matches!(r.what, What::Seed(_)))
            .filter(|r| r.device.as_deref().is_none_or(|d| d == device))
            .collect();
        if rules.is_empty() {
            return None;
        }
        let mut f = PortFaults {
            // Each device its own stream, the same for the same seed and name.
            rng: Rng::new(seed ^ crate::engine::splitmix64(name_hash(device))),
            tx: DirFaults::default(),
            rx: DirFaults::default(),
            pause: None,
            fail_at_ns: None,
            failed: false,
            held: VecDeque::new(),
            counts: FaultCounters::default(),
            epoch: Instant::now(),
            timed: false,
            description: format!("seed={seed}"),
        };
        for r in rules {
            let _ = write!(f.description, " {}", r.word);
            for (on, d) in [(r.tx, &mut f.tx), (r.rx, &mut f.rx)] {
                if !on {
                    continue;
                }
                match r.what {
                    What::Loss(v) => d.params.loss = v,
                    What::Dup(v) => d.params.dup = v,
                    What::Corrupt(v) => d.params.corrupt = v,
                    What::Truncate(v) => d.params.truncate = v,
                    What::Reorder(ns) => d.params.reorder_jitter_ns = ns,
                    What::Drop(kind, k) => d.drops[kind].add(k - 1),
                    _ => {}
                }
            }
            match r.what {
                What::Pause { at_ns, for_ns } => {
                    f.pause = Some((at_ns, at_ns.saturating_add(for_ns)))
                }
                What::Fail { at_ns } => f.fail_at_ns = Some(at_ns),
                _ => {}
            }
        }
        f.timed = f.pause.is_some()
            || f.fail_at_ns.is_some()
            || f.tx.params.reorder_jitter_ns > 0
            || f.rx.params.reorder_jitter_ns > 0;
        Some(f)
    }
}

fn name_hash(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// What a port's faults did: every injected fault, by kind (counters `fault_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets lost on the way out.
    pub loss_tx: u64,
    /// Packets lost on the way in.
    pub loss_rx: u64,
    /// Copies made.
    pub duplicate: u64,
    /// Packets held for a non-zero reorder jitter.
    pub reorder: u64,
    /// Bit flips.
    pub corrupt: u64,
    /// Packets cut short.
    pub truncate: u64,
    /// Packets dropped by `drop=KIND#K`.
    pub drop_nth: u64,
    /// Packets dropped while the port was paused.
    pub pause: u64,
    /// Packets dropped because the port had failed (`fail@`).
    pub port_failed: u64,
}

#[derive(Default)]
struct DirFaults {
    params: FaultParams,
    drops: [DropNth; 8],
    /// Packets of each kind seen so far (for `drop=KIND#K`).
    seen: [u64; 8],
}

/// A packet held for its reorder jitter.
pub(crate) struct Held {
    pub(crate) due_ns: u64,
    pub(crate) dir: Dir,
    pub(crate) dst: [u8; 4],
    pub(crate) data: Vec<u8>,
}

/// What becomes of one packet.
pub(crate) enum Verdict {
    /// Lost.
    Drop,
    /// On its way: its bytes changed (`Some`), and a copy behind it (`dup`).
    Pass { altered: Option<Vec<u8>>, dup: bool },
    /// Held for its jitter (taken by [`PortFaults::take_due`]).
    Held,
}

/// One port's faults as its paths apply them; the device keeps it behind a mutex that only
/// a run with a plan ever takes.
pub(crate) struct PortFaults {
    rng: Rng,
    tx: DirFaults,
    rx: DirFaults,
    /// Nothing in or out between these times (ns since the device opened).
    pause: Option<(u64, u64)>,
    fail_at_ns: Option<u64>,
    failed: bool,
    held: VecDeque<Held>,
    pub(crate) counts: FaultCounters,
    epoch: Instant,
    /// Whether any fault depends on time (only then is the clock read per packet).
    timed: bool,
    /// The plan as it applies to this port, for the start-up line.
    pub(crate) description: String,
}

impl PortFaults {
    fn now_ns(&self) -> u64 {
        if self.timed {
            self.epoch.elapsed().as_nanos() as u64
        } else {
            0
        }
    }

    /// Whether the port's `fail@` time has come (the device then takes the port down).
    pub(crate) fn fail_due(&mut self) -> bool {
        if !self.failed && self.fail_at_ns.is_some_and(|t| self.now_ns() >= t) {
            self.failed = true;
        }
        self.failed
    }

    /// The `fail@` word's time, for the port-down message.
    pub(crate) fn fail_at(&self) -> Option<u64> {
        self.fail_at_ns
    }

    /// The fate of one packet going `dir` (to `dst` when sent).
    pub(crate) fn judge(&mut self, dir: Dir, dst: [u8; 4], data: &[u8]) -> Verdict {
        let now = self.now_ns();
        if self.fail_due() {
            self.counts.port_failed += 1;
            return Verdict::Drop;
        }
        if self.pause.is_some_and(|(from, to)| (from..to).contains(&now)) {
            self.counts.pause += 1;
            return Verdict::Drop;
        }
        let d = match dir {
            Dir::Tx => &mut self.tx,
            Dir::Rx => &mut self.rx,
        };
        let kind = kind_of(data);
        for k in [kind, 7] {
            let index = d.seen[k];
            d.seen[k] += 1;
            if d.drops[k].take(index) {
                self.counts.drop_nth += 1;
                return Verdict::Drop;
            }
            if kind == 7 {
                break;
            }
        }
        if d.params.lose(&mut self.rng) {
            match dir {
                Dir::Tx => self.counts.loss_tx += 1,
                Dir::Rx => self.counts.loss_rx += 1,
            }
            return Verdict::Drop;
        }
        let fate = d.params.decide(&mut self.rng, data.len());
        self.counts.duplicate += u64::from(fate.duplicate);
        self.counts.corrupt += u64::from(fate.flip.is_some());
        self.counts.truncate += u64::from(fate.keep.is_some());
        let altered = fate.alters().then(|| {
            let mut v = data.to_vec();
            fate.apply(&mut v);
            v
        });
        if fate.jitter_ns > 0 && self.held.len() < MAX_HELD {
            self.counts.reorder += 1;
            let data = altered.unwrap_or_else(|| data.to_vec());
            let due_ns = now + fate.jitter_ns;
            if fate.duplicate {
                self.held.push_back(Held { due_ns, dir, dst, data: data.clone() });
            }
            self.held.push_back(Held { due_ns, dir, dst, data });
            return Verdict::Held;
        }
        Verdict::Pass { altered, dup: fate.duplicate }
    }

    /// A packet held going `dir` whose time has come, if any.
    pub(crate) fn take_due(&mut self, dir: Dir) -> Option<Held> {
        if self.held.is_empty() {
            return None;
        }
        let now = self.now_ns();
        let at = self.held.iter().position(|h| h.due_ns <= now && h.dir == dir)?;
        self.held.remove(at)
    }

    /// When the NIC thread must look again (ns since the device opened): the earliest held
    /// packet, the fail time.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let held = self.held.iter().map(|h| h.due_ns).min();
        let fail = self.fail_at_ns.filter(|_| !self.failed);
        held.into_iter().chain(fail).min()
    }

    /// Nanoseconds since the device opened, as the plan's times count.
    pub(crate) fn elapsed_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// The fault plan's state, even if a thread panicked holding it.
pub(crate) fn lock_faults(f: &Mutex<PortFaults>) -> MutexGuard<'_, PortFaults> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port's sending half (or its other layers) under the port's fault plan: each datagram is
/// lost (as on a link, the sender does not know), held for its jitter and sent when its time
/// comes ([`Egress::release`]), or sent, changed and copied as the plan's dice say. The plan
/// is shared with the device's receiving path, which applies its other direction.
pub(crate) struct Faulted<S> {
    inner: S,
    plan: Arc<Mutex<PortFaults>>,
}

impl<S: Egress> Faulted<S> {
    pub(crate) fn new(inner: S, plan: Arc<Mutex<PortFaults>>) -> Faulted<S> {
        Faulted { inner, plan }
    }
}

impl<S: Egress> Egress for Faulted<S> {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let verdict = lock_faults(&self.plan).judge(Dir::Tx, dst, datagram);
        match verdict {
            Verdict::Drop | Verdict::Held => SendOutcome::Sent,
            Verdict::Pass { altered, dup } => {
                let bytes = altered.as_deref().unwrap_or(datagram);
                let outcome = self.inner.send(dst, bytes);
                if dup && outcome == SendOutcome::Sent {
                    let _ = self.inner.send(dst, bytes);
                }
                outcome
            }
        }
    }

    fn release(&mut self) -> bool {
        let mut did = self.inner.release();
        loop {
            let Some(h) = lock_faults(&self.plan).take_due(Dir::Tx) else { break };
            did = true;
            let _ = self.inner.send(h.dst, &h.data);
        }
        did
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_and_bad_ones_are_named() {
        let p = FaultPlan::parse(
            "seed=7 loss=5%, tx:dup=0.01 rx:corrupt=0.1% reorder=50us drop=ack#3 \
             softverbs1:pause=200ms@1s softverbs1:fail@2s",
        )
        .expect("a good plan");
        assert_eq!(p.seed(), Some(7));
        let f = p.for_device("softverbs0", 7).expect("faults for softverbs0");
        assert_eq!(f.tx.params.loss, 0.05);
        assert_eq!(f.rx.params.loss, 0.05);
        assert_eq!((f.tx.params.dup, f.rx.params.dup), (0.01, 0.0));
        assert_eq!(f.rx.params.corrupt, 0.001);
        assert_eq!(f.tx.params.reorder_jitter_ns, 50_000);
        assert!(f.pause.is_none() && f.fail_at_ns.is_none());
        assert_eq!(
            f.description,
            "seed=7 loss=5% tx:dup=0.01 rx:corrupt=0.1% reorder=50us drop=ack#3"
        );
        let g = p.for_device("softverbs1", 7).expect("faults for softverbs1");
        assert_eq!(g.pause, Some((1_000_000_000, 1_200_000_000)));
        assert_eq!(g.fail_at_ns, Some(2_000_000_000));
        assert!(FaultPlan::parse("").unwrap().for_device("softverbs0", 1).is_none());
        assert_eq!(FaultPlan::parse("loss=5%").unwrap().with_seed(9), "seed=9 loss=5%");

        for (plan, named) in [
            ("loss=5% bogus=1", "\"bogus=1\": unknown word \"bogus\""),
            ("loss=150%", "\"loss=150%\": a rate"),
            ("drop=nak#1", "\"drop=nak#1\": unknown packet kind \"nak\""),
            ("drop=ack#0", "\"drop=ack#0\": K counts from 1"),
            ("pause=200ms", "\"pause=200ms\": pause=DURATION@TIME"),
            ("fail@soon", "\"fail@soon\": fail@TIME"),
            ("up:loss=1%", "\"up:loss=1%\": \"up\" is neither tx, rx nor a device"),
            ("tx:seed=1", "\"tx:seed=1\": the seed is the plan's"),
            ("@/nonexistent/plan.toml", "reading /nonexistent/plan.toml"),
        ] {
            let e = FaultPlan::parse(plan).unwrap_err();
            assert!(e.starts_with(named), "{plan}: {e}");
        }
    }

    #[test]
    fn a_toml_plan_says_the_same_as_the_words() {
        let dir = std::env::temp_dir().join(format!("softverbs-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plan.toml");
        std::fs::write(
            &file,
            "seed = 7\nloss = 0.05 # both ways\n[tx]\ndup = 0.01\ndrop = [\"ack#3\", \"read-resp#1\"]\n\
             [softverbs1]\nfail = \"2s\"\n",
        )
        .unwrap();
        let p = FaultPlan::parse(&format!("@{}", file.display())).expect("the file parses");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(p.seed(), Some(7));
        let mut f = p.for_device("softverbs0", 7).unwrap();
        assert_eq!((f.tx.params.loss, f.rx.params.loss, f.tx.params.dup), (0.05, 0.05, 0.01));
        assert!(f.tx.drops[4].take(2) && f.tx.drops[3].take(0));
        assert_eq!(p.for_device("softverbs1", 7).unwrap().fail_at_ns, Some(2_000_000_000));
    }

    #[test]
    fn a_paused_port_drops_both_ways_and_a_failed_one_for_good() {
        let mut f =
            FaultPlan::parse("pause=3600s@0s").unwrap().for_device("softverbs0", 1).unwrap();
        assert!(matches!(f.judge(Dir::Tx, [0; 4], &[0; 48]), Verdict::Drop));
        assert!(matches!(f.judge(Dir::Rx, [0; 4], &[0; 48]), Verdict::Drop));
        assert_eq!(f.counts.pause, 2);
        assert!(!f.fail_due());
        let mut f = FaultPlan::parse("fail@0s").unwrap().for_device("softverbs0", 1).unwrap();
        assert!(f.fail_due());
        assert!(matches!(f.judge(Dir::Tx, [0; 4], &[0; 48]), Verdict::Drop));
        assert_eq!((f.counts.port_failed, f.next_deadline()), (1, None));
        let mut f =
            FaultPlan::parse("pause=1ms@3600s").unwrap().for_device("softverbs0", 1).unwrap();
        assert!(matches!(
            f.judge(Dir::Tx, [0; 4], &[0; 48]),
            Verdict::Pass { altered: None, dup: false }
        ));
    }

    #[test]
    fn cm_mad_kinds_are_the_cm_s_and_not_the_port_s() {
        let p = FaultPlan::parse("drop=cm-req#1 rx:drop=cm-rep#2 drop=ack#1").unwrap();
        assert_eq!(p.mad_drops(), vec![(0x0010, true, 1), (0x0013, false, 2)]);
        let p = FaultPlan::parse("rx:drop=cm-sidr-req#1 drop=cm-sidr-rep#3").unwrap();
        assert_eq!(p.mad_drops(), vec![(0x0017, false, 1), (0x0018, true, 3)]);
        assert!(FaultPlan::parse("drop=cm-foo#1").unwrap_err().contains("cm-req"));
    }

    #[test]
    fn the_kth_packet_of_a_kind_is_dropped_once_and_counted() {
        let p = FaultPlan::parse("drop=ack#2").unwrap();
        let mut f = p.for_device("softverbs0", 1).unwrap();
        let mut ack = vec![0u8; 48];
        ack[IPV4_UDP_LEN] = 0x11 - 1; // RC ACKNOWLEDGE (0x11 is ATOMIC ACKNOWLEDGE)
        let verdicts: Vec<bool> =
            (0..4).map(|_| matches!(f.judge(Dir::Tx, [0; 4], &ack), Verdict::Drop)).collect();
        assert_eq!(verdicts, [false, true, false, false]);
        assert!(!matches!(f.judge(Dir::Rx, [0; 4], &ack), Verdict::Drop), "rx is not counted");
        assert_eq!(f.counts.drop_nth, 1);
    }
}
