//! The environment variables that shape a [`Soft`](super::Soft), read once when it is built:
//! a value that does not parse is an error naming the variable and the value, never a
//! default in disguise.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use verbs_api::{Errno, Error};

/// How long the NIC thread busy-polls after its last piece of work before it parks: long enough
/// that a thread serving a sleeping target is usually still spinning when the next request
/// comes (docs/decisions.md, "Spin window"). Overridable with `SOFTVERBS_SPIN_US`.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// How long the NIC thread sleeps at a time while the program runs the engine inline, and so the
/// longest it takes to take over after the program stops calling in (at once when the program
/// blocks in a verb). Rare enough that its wake-ups stay out of the 99th percentile, short
/// enough that a peer's ACK timeout never sees the hand-over (docs/decisions.md, "Standby
/// interval"). Overridable with `SOFTVERBS_STANDBY_US`.
pub const DEFAULT_STANDBY: Duration = Duration::from_millis(1);

/// How many devices a [`Soft`](super::Soft) offers unless told otherwise (`SOFTVERBS_DEVICES`).
pub const DEFAULT_DEVICES: usize = 2;

/// The most devices `SOFTVERBS_DEVICES` may ask for.
pub const MAX_DEVICES: usize = 64;

/// What the environment sets: `SOFTVERBS_DEVICES`, `SOFTVERBS_SPIN_US`, `SOFTVERBS_STANDBY_US`,
/// `SOFTVERBS_PCAP` (unset or empty: the default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// Devices offered: `softverbs0` .. `softverbs<devices - 1>`.
    pub devices: usize,
    /// How long a NIC thread busy-polls after its last work ([`DEFAULT_SPIN`]).
    pub spin: Duration,
    /// How long a NIC thread sleeps at a time while the program runs the engine inline
    /// ([`DEFAULT_STANDBY`]).
    pub standby: Duration,
    /// The pcap file every device of the process writes its datagrams to (`SOFTVERBS_PCAP`;
    /// `{pid}` in it stands for the process id); None: no capture. See docs/guide.md,
    /// "Captures".
    pub pcap: Option<PathBuf>,
    /// The fault plan every device of the process applies (`SOFTVERBS_FAULTS`, checked to
    /// parse; see [`super::faults`] and docs/guide.md, "Faults in real runs"); None: none.
    pub faults: Option<String>,
    /// Whether peers' NICs may reach the memory of the MRs this process's devices own, and
    /// its devices theirs (`SOFTVERBS_REACH`: `on`, the default, or `off`; docs/guide.md,
    /// "Direct reach"). Off, every RDMA WRITE, READ and atomic travels as packets.
    pub reach: bool,
    /// The network interface the process's devices are RoCE v2 devices on
    /// (`SOFTVERBS_NETDEV`; docs/guide.md, "Across machines"); None: the shared-memory fabric.
    pub netdev: Option<String>,
    /// Whether `ibv_reg_mr` of a program's buffer moves its pages onto shared memory, where
    /// they stay the NIC's until `ibv_dereg_mr` and peers reach them (`SOFTVERBS_PIN`: `on`,
    /// the default, or `off`; `crate::pinned`, docs/c.md, "Registered memory").
    pub pin: bool,
}

impl Default for EnvConfig {
    fn default() -> EnvConfig {
        EnvConfig {
            devices: DEFAULT_DEVICES,
            spin: DEFAULT_SPIN,
            standby: DEFAULT_STANDBY,
            pcap: None,
            faults: None,
            reach: true,
            netdev: None,
            pin: true,
        }
    }
}

impl EnvConfig {
    /// Read the variables of this process's environment; an error ([`Errno::Inval`]) names
    /// the variable, its value and what it should be.
    pub fn from_env() -> Result<EnvConfig, Error> {
        EnvConfig::parse(|var| std::env::var_os(var))
            .map_err(|message| Error::new(Errno::Inval, message))
    }

    /// As [`EnvConfig::from_env`], reading variables with `get`.
    fn parse(get: impl Fn(&str) -> Option<OsString>) -> Result<EnvConfig, String> {
        let mut c = EnvConfig::default();
        if let Some(n) = value(&get, "SOFTVERBS_DEVICES", "a number of devices in 1..=64", |v| {
            v.parse::<usize>().ok().filter(|n| (1..=MAX_DEVICES).contains(n))
        })? {
            c.devices = n;
        }
        for (var, slot) in
            [("SOFTVERBS_SPIN_US", &mut c.spin), ("SOFTVERBS_STANDBY_US", &mut c.standby)]
        {
            if let Some(us) =
                value(&get, var, "a whole number of microseconds", |v| v.parse::<u64>().ok())?
            {
                *slot = Duration::from_micros(us);
            }
        }
        c.pcap = value(&get, "SOFTVERBS_PCAP", PCAP_WHAT, parse_pcap)?;
        if let Some(on) = value(&get, "SOFTVERBS_REACH", "`on` or `off`", |v| match v {
            "on" | "1" => Some(true),
            "off" | "0" => Some(false),
            _ => None,
        })? {
            c.reach = on;
        }
        c.netdev = value(&get, "SOFTVERBS_NETDEV", "a network interface name", |v| {
            (v.len() < 16 && !v.contains(['/', ' ', '\0'])).then(|| v.to_string())
        })?;
        if let Some(on) = value(&get, "SOFTVERBS_PIN", "`on` or `off`", crate::pinned::setting)? {
            c.pin = on;
        }
        if let Some(raw) = get("SOFTVERBS_FAULTS").filter(|v| !v.is_empty()) {
            let text = raw.to_str().ok_or_else(|| {
                format!("SOFTVERBS_FAULTS={:?} is not UTF-8", raw.to_string_lossy())
            })?;
            super::faults::FaultPlan::parse(text).map_err(|e| format!("SOFTVERBS_FAULTS: {e}"))?;
            c.faults = Some(text.to_string());
        }
        Ok(c)
    }
}

/// The placeholder in a capture file name (`SOFTVERBS_PCAP`, `--pcap`) that stands for the
/// process id.
pub const PID_PLACEHOLDER: &str = "{pid}";

/// What `SOFTVERBS_PCAP` must be.
const PCAP_WHAT: &str = "a file name (UTF-8, not a directory; `{pid}` is the only placeholder)";

/// A capture file name: UTF-8 (so `{pid}` can be found), not naming a directory, and with no
/// brace other than those of `{pid}` (a mistyped placeholder would otherwise become part of
/// the name).
fn parse_pcap(v: &str) -> Option<PathBuf> {
    let rest = v.replace(PID_PLACEHOLDER, "");
    let dir = v.ends_with('/') || v == "." || v == ".." || v.ends_with("/.") || v.ends_with("/..");
    (!rest.contains(['{', '}']) && !dir).then(|| PathBuf::from(v))
}

/// The value of `var` parsed by `parse`: None when unset or empty, an error naming the
/// variable, the value and `what` it should be when it does not parse.
fn value<T>(
    get: &impl Fn(&str) -> Option<OsString>,
    var: &str,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, String> {
    let Some(raw) = get(var).filter(|v| !v.is_empty()) else { return Ok(None) };
    match raw.to_str().and_then(&parse) {
        Some(v) => Ok(Some(v)),
        None => Err(format!("{var}={:?} is not {what}", raw.to_string_lossy())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<EnvConfig, String> {
        EnvConfig::parse(|var| vars.iter().find(|(k, _)| *k == var).map(|(_, v)| v.into()))
    }

    #[test]
    fn unset_and_empty_are_the_defaults() {
        assert_eq!(parse(&[]), Ok(EnvConfig::default()));
        assert_eq!(
            parse(&[("SOFTVERBS_DEVICES", ""), ("SOFTVERBS_SPIN_US", "")]),
            Ok(EnvConfig::default())
        );
    }

    #[test]
    fn values_that_parse_are_used() {
        let c = parse(&[
            ("SOFTVERBS_DEVICES", "64"),
            ("SOFTVERBS_SPIN_US", "0"),
            ("SOFTVERBS_STANDBY_US", "250"),
        ])
        .expect("valid values");
        assert_eq!(c.devices, 64);
        assert_eq!(c.spin, Duration::ZERO);
        assert_eq!(c.standby, Duration::from_micros(250));
        assert_eq!(c.pcap, None);
        let c = parse(&[("SOFTVERBS_PCAP", "/tmp/run-{pid}.pcap")]).expect("a file name");
        assert_eq!(c.pcap, Some(PathBuf::from("/tmp/run-{pid}.pcap")));
        assert!(c.reach, "direct reach is on by default");
        assert_eq!(
            parse(&[("SOFTVERBS_NETDEV", "veth0")]).expect("a name").netdev.as_deref(),
            Some("veth0")
        );
        for (v, on) in [("off", false), ("0", false), ("on", true), ("1", true)] {
            assert_eq!(parse(&[("SOFTVERBS_REACH", v)]).expect("valid").reach, on, "{v}");
            assert_eq!(parse(&[("SOFTVERBS_PIN", v)]).expect("valid").pin, on, "{v}");
        }
    }

    #[test]
    fn values_that_do_not_parse_name_the_variable_and_the_value() {
        for (var, value, what) in [
            ("SOFTVERBS_DEVICES", "abc", "a number of devices in 1..=64"),
            ("SOFTVERBS_DEVICES", "-1", "a number of devices in 1..=64"),
            ("SOFTVERBS_DEVICES", "0", "a number of devices in 1..=64"),
            ("SOFTVERBS_DEVICES", "65", "a number of devices in 1..=64"),
            ("SOFTVERBS_SPIN_US", "50us", "a whole number of microseconds"),
            ("SOFTVERBS_STANDBY_US", "-5", "a whole number of microseconds"),
            ("SOFTVERBS_PCAP", "/tmp/run-{pdi}.pcap", PCAP_WHAT),
            ("SOFTVERBS_PCAP", "/tmp/", PCAP_WHAT),
            ("SOFTVERBS_PCAP", ".", PCAP_WHAT),
            ("SOFTVERBS_REACH", "no", "`on` or `off`"),
            ("SOFTVERBS_NETDEV", "a-name-far-too-long", "a network interface name"),
            ("SOFTVERBS_NETDEV", "eth/0", "a network interface name"),
            ("SOFTVERBS_PIN", "yes", "`on` or `off`"),
        ] {
            assert_eq!(parse(&[(var, value)]), Err(format!("{var}={value:?} is not {what}")));
        }
    }
}
