//! What every measurement of `softverbs perf` shares: its bounds and queue depths, the machine
//! line, the run's fabric directory, starting this program again as the peer process
//! ([`softverbs_sim::peer`]), connecting the two QPs, and the busy poll of the completion queue.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use softverbs_sim::peer::{fabric_base, FabricDir, Parent, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};
use verbs_api::{CompletionQueue, Mtu, QpCap, QpType, QueuePair, WcStatus, WorkCompletion};

use super::Common;
use crate::cmd::{self, CliError};

/// Bound on every handshake step with the peer.
pub(super) const HANDSHAKE: Duration = Duration::from_secs(20);
/// Bound on one measured phase (a whole run of iterations).
pub(super) const PHASE: Duration = Duration::from_secs(120);
/// Receives kept posted on each side of the ping-pong.
pub(super) const RX_DEPTH: usize = 64;
/// Send queue depth; large enough for the bandwidth window and for selective signaling.
pub(super) const SQ_DEPTH: u32 = 256;
const CLIENT_PSN: u32 = 0x00_1000;
const SERVER_PSN: u32 = 0x00_8000;

/// nproc, CPU model and kernel, in one line.
pub fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{nproc} CPUs ({cpu}), Linux {kernel}")
}

/// CPU time of this whole process (every thread), in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`;
/// 0 if the clock cannot be read).
pub fn process_cpu_ns() -> u64 {
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    crate::cmd::cpu_clock_ns(CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0)
}

/// `-d DEV [-g N]`: the device options a spawned `lat`, `bw` or peer process needs.
pub(super) fn device_args(c: &Common) -> Vec<String> {
    let mut args = vec!["-d".to_string(), c.ib_dev.clone()];
    if let Some(g) = c.gid_idx {
        args.extend(["-g".to_string(), g.to_string()]);
    }
    args
}

/// How this program starts itself as a peer.
pub(super) struct Launcher {
    /// What goes before the subcommand (see [`super::run`]).
    pub(super) prefix: Vec<String>,
}

impl Launcher {
    /// This program with the prefix and `args`.
    pub(super) fn command(&self, args: &[String]) -> Result<Command, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
        let mut c = Command::new(exe);
        c.args(&self.prefix).args(args);
        Ok(c)
    }

    /// Start `<sub> --peer --fabric DIR -d DEV [-g N] <extra>`, speaking lines on its stdin and
    /// stdout (its stderr is this process's).
    pub(super) fn spawn(
        &self,
        sub: &str,
        common: &Common,
        fabric: &Path,
        extra: &[String],
    ) -> Result<Peer, String> {
        self.spawn_without_device(sub, fabric, &[device_args(common), extra.to_vec()].concat())
    }

    /// Start `<sub> --peer --fabric DIR <extra>`: [`Launcher::spawn`] for a measurement that
    /// opens no device (`floor`).
    pub(super) fn spawn_without_device(
        &self,
        sub: &str,
        fabric: &Path,
        extra: &[String],
    ) -> Result<Peer, String> {
        let mut args = vec![sub.to_string(), "--peer".into(), "--fabric".into()];
        args.push(fabric.display().to_string());
        args.extend_from_slice(extra);
        Peer::spawn("the peer process", self.command(&args)?, Stderr::Inherit)
    }
}

/// The run's fabric directory: the one given (by `--fabric` or `$SOFTVERBS_FABRIC`), else a
/// fresh `softverbs-perf-<pid>` under /dev/shm, removed at the end, after removing those of
/// earlier runs that were killed.
pub(super) fn run_dir(given: Option<&Path>) -> Result<FabricDir, String> {
    let env = std::env::var_os(nic_model::wire::FABRIC_ENV).filter(|d| !d.is_empty());
    if let Some(p) = given.map(PathBuf::from).or(env.map(PathBuf::from)) {
        return Ok(FabricDir::given(p));
    }
    for (dir, pid) in remove_dead_runs(&fabric_base()) {
        let _ = writeln!(
            std::io::stderr(),
            "softverbs perf: removed {}, left by run {pid}, which is gone",
            dir.display()
        );
    }
    FabricDir::create(&format!("{PERF_DIR_PREFIX}{}", std::process::id()))
}

/// The name of a run's own fabric directory, before the run's pid.
const PERF_DIR_PREFIX: &str = "softverbs-perf-";

/// The directories of earlier perf runs that were killed, removed ([`softverbs_sim::peer::remove_dead_runs`]).
fn remove_dead_runs(base: &Path) -> Vec<(PathBuf, u32)> {
    softverbs_sim::peer::remove_dead_runs(base, PERF_DIR_PREFIX)
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: SQ_DEPTH,
        max_recv_wr: RX_DEPTH as u32 * 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

fn opts() -> ConnOpts {
    ConnOpts { mtu: Mtu::Mtu4096, ..ConnOpts::default() }
}

/// Register the backends over `fabric` and open `c.ib_dev`: a connected pair's one side, and
/// the connection options its port needs. Messages of `msg_len` bytes (`-s`) must fit the
/// port's `max_msg_sz`: a usage error otherwise, before any memory is registered.
fn endpoint(
    c: &Common,
    fabric: &Path,
    msg_len: u32,
    mr_len: usize,
) -> Result<(Endpoint, PortAddress), CliError> {
    let soft = cmd::register_fabric(Some(fabric))?;
    if let (Some(file), false) = (&c.pcap, c.peer) {
        soft.capture_to(Some(file), "--pcap");
    }
    let ctx = cmd::open_device(&c.ib_dev)?;
    cmd::check_message_size(&ctx, 1, "-s", u64::from(msg_len))?;
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(), SQ_DEPTH + 2 * RX_DEPTH as u32, mr_len)
        .map_err(|e| e.to_string())?;
    let addr = cmd::port_address(&ctx, c.gid_idx)?;
    Ok((ep, addr))
}

/// INIT, RTR towards `remote` and RTS, with the options `addr`'s port needs.
pub(super) fn connect(
    ep: &Endpoint,
    addr: &PortAddress,
    psn: u32,
    remote: &QpInfo,
) -> Result<(), String> {
    connect_qp(&ep.qp, addr, psn, remote)
}

/// [`connect`] for any RC QP of the device: INIT, RTR towards `remote`, RTS.
pub(super) fn connect_qp(
    qp: &QueuePair,
    addr: &PortAddress,
    psn: u32,
    remote: &QpInfo,
) -> Result<(), String> {
    let opts = addr.conn_opts(opts()).map_err(|e| e.to_string())?;
    conn::connect(qp, psn, remote, &opts).map_err(|e| e.to_string())
}

/// Initiator side: start the peer, swap QP info, connect; returns once the peer is READY, with
/// the peer's MR address and rkey. Messages are `msg_len` bytes, the MR `mr_len`.
pub(super) fn connect_to_peer(
    me: &Launcher,
    sub: &str,
    common: &Common,
    fabric: &Path,
    extra: &[String],
    (msg_len, mr_len): (u32, usize),
) -> Result<(Endpoint, Peer, u64, u32), CliError> {
    // Open the device first: a bad -d or -s fails here, before a peer is started.
    let (ep, addr) = endpoint(common, fabric, msg_len, mr_len)?;
    let mut peer = me.spawn(sub, common, fabric, extra)?;
    let mine = addr.qp_info(&ep.qp, CLIENT_PSN);
    let (remote, mr) = peer.swap_info(&mine, Some((ep.mr.addr(), ep.mr.rkey())), HANDSHAKE)?;
    let (raddr, rkey) = mr.ok_or("the peer's INFO names no memory region")?;
    connect(&ep, &addr, CLIENT_PSN, &remote)?;
    peer.expect("READY", HANDSHAKE)?;
    Ok((ep, peer, raddr, rkey))
}

/// Peer side: swap QP info with the parent and connect (the caller then says READY).
pub(super) fn accept_parent(
    parent: &mut Parent,
    common: &Common,
    fabric: &Path,
    (msg_len, mr_len): (u32, usize),
) -> Result<Endpoint, CliError> {
    let (ep, addr) = endpoint(common, fabric, msg_len, mr_len)?;
    let mine = addr.qp_info(&ep.qp, SERVER_PSN);
    let (remote, _) = parent.swap_info(&mine, Some((ep.mr.addr(), ep.mr.rkey())))?;
    connect(&ep, &addr, SERVER_PSN, &remote)?;
    Ok(ep)
}

/// Busy-poll `cq` until it returns at least one completion; every completion must succeed.
/// Returns how many of those were receives.
pub(super) fn poll_some(
    cq: &CompletionQueue,
    wcs: &mut [WorkCompletion],
    deadline: Instant,
) -> Result<(usize, usize), String> {
    let mut spins = 0u32;
    loop {
        let n = cq.poll(wcs).map_err(|e| e.to_string())?;
        if n > 0 {
            let mut recvs = 0;
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "work completion failed: {} ({}), wr_id {}",
                        wc.status.name(),
                        wc.status,
                        wc.wr_id
                    ));
                }
                if wc.opcode == verbs_api::WcOpcode::Recv {
                    recvs += 1;
                }
            }
            return Ok((n, recvs));
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && Instant::now() >= deadline {
            return Err("timed out waiting for a completion".into());
        }
        // No `spin_loop` (PAUSE) hint, as ibv_rc_pingpong and fi_pingpong poll
        // (docs/decisions.md, "Benchmark poll loops without a PAUSE hint").
    }
}

/// The error of a `lat` run in a child process that failed: a usage error (status 2, a bad
/// device, say) stays one.
pub(super) fn child_failed(what: &str, out: &std::process::Output) -> CliError {
    let message = format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim_end());
    match out.status.code() {
        Some(2) => CliError::usage(message),
        _ => CliError::failed(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_runs_directory_is_removed_and_a_live_ones_kept() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let base = tmp.path().to_path_buf();
        // A pid that is certainly gone: a child that has exited and been reaped.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_dir = base.join(format!("{PERF_DIR_PREFIX}{dead}"));
        std::fs::create_dir_all(&dead_dir).unwrap();
        std::fs::write(dead_dir.join("port-1.inbox"), b"left behind").unwrap();
        let live_dir = base.join(format!("{PERF_DIR_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&live_dir).unwrap();
        let other = base.join("softverbs-perf-notapid");
        std::fs::create_dir_all(&other).unwrap();

        let removed = remove_dead_runs(&base);

        let gone = std::fs::exists(&dead_dir).unwrap();
        let kept = (std::fs::exists(&live_dir).unwrap(), std::fs::exists(&other).unwrap());
        assert_eq!(removed, vec![(dead_dir, dead)]);
        assert!(!gone, "the dead run's directory is gone");
        assert_eq!(kept, (true, true), "the live run's and the unrelated directory stay");
    }
}
