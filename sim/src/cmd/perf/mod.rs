//! `softverbs perf`: benchmarks of the soft backend between two real processes on the
//! shared-memory fabric — SEND ping-pong latency, RDMA WRITE bandwidth, the raw shared-memory
//! floor, idle CPU, system calls per iteration and the NIC thread's spin window.
//!
//! Every measurement spawns its peer as a second process of the same binary (hidden `--peer`),
//! exchanges QP information over the child's stdin/stdout, bounds every wait, and ends with
//! one `RESULT` line of `key=value` pairs that `scripts/perf.sh` and the other subcommands parse.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use verbs_api::{
    CompletionQueue, Mtu, QpCap, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::cmd::{self, CliError};
use crate::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};

/// Bound on every handshake step with the peer.
const HANDSHAKE: Duration = Duration::from_secs(20);
/// Bound on one measured phase (a whole run of iterations).
const PHASE: Duration = Duration::from_secs(120);
/// Receives kept posted on each side of the ping-pong.
const RX_DEPTH: usize = 64;
/// Send queue depth; large enough for the bandwidth window and for selective signaling.
const SQ_DEPTH: u32 = 256;
/// Ping-pong sends are signaled every this many (selective signaling, as perftest does).
const SIGNAL_EVERY: u64 = 32;
const CLIENT_PSN: u32 = 0x00_1000;
const SERVER_PSN: u32 = 0x00_8000;

/// Arguments of `softverbs perf`.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    #[command(subcommand)]
    cmd: PerfCmd,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum PerfCmd {
    /// RC SEND ping-pong: half round trip (median, percentiles).
    Lat(LatArgs),
    /// RDMA WRITE bandwidth with a window of outstanding WRITEs.
    Bw(BwArgs),
    /// Raw shared-memory ping-pong of one counter: the floor of any shm transport here.
    Floor(FloorArgs),
    /// CPU time of a connected, idle device over a sleep.
    Idle(IdleArgs),
    /// System calls per ping-pong iteration, counted with `strace -f -c`.
    Syscalls(SyscallArgs),
    /// Latency and idle CPU for several values of SOFTVERBS_SPIN_US.
    Spin(SpinArgs),
}

/// Options every subcommand shares.
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Fabric directory [default: $SOFTVERBS_FABRIC, else a fresh one under /dev/shm, removed
    /// at the end]
    #[arg(long, value_name = "DIR")]
    fabric: Option<PathBuf>,
    /// The device both processes open (softverbsN, or a real NIC when built with rdma-sys).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", default_value = "softverbs0")]
    ib_dev: String,
    /// The GID index both sides send from (default: 0, or on RoCE the first IPv4-mapped GID).
    #[arg(short = 'g', long = "gid-idx", value_name = "GID_INDEX")]
    gid_idx: Option<u32>,
    /// Internal: run as the peer process.
    #[arg(long, hide = true)]
    peer: bool,
}

#[derive(clap::Args, Debug, Clone)]
struct LatArgs {
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    size: u32,
    /// Measured iterations per run.
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Unmeasured iterations before the first run.
    #[arg(short = 'w', long, default_value_t = 10_000)]
    warmup: u64,
    /// Runs (each reports its own median).
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// After the runs, sleep this long connected and report each process's CPU time.
    #[arg(long, hide = true, default_value_t = 0.0)]
    idle_seconds: f64,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct BwArgs {
    /// WRITE size in bytes.
    #[arg(short = 's', long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u32).range(1..))]
    size: u32,
    /// WRITEs per run.
    #[arg(short = 'n', long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Outstanding WRITEs (at most the send queue depth, 256, minus one).
    #[arg(short = 'W', long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..SQ_DEPTH as i64))]
    window: u32,
    /// Runs.
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct FloorArgs {
    /// Measured iterations per run.
    #[arg(short = 'n', long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Unmeasured iterations first.
    #[arg(short = 'w', long, default_value_t = 100_000)]
    warmup: u64,
    /// Runs.
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Internal: the shared page (peer only).
    #[arg(long, hide = true)]
    page: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct IdleArgs {
    /// How long to sleep while connected, in seconds (at most 3600).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    seconds: f64,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct SyscallArgs {
    /// Iterations of the large run.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    iters: u64,
    /// Iterations of the small run whose count is subtracted (setup and teardown).
    #[arg(long, default_value_t = 10_000)]
    base: u64,
    /// Keep the counter's summaries in this directory (by default they are written to the
    /// temporary directory and removed once read).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// How to count: `perf` (`perf stat -e raw_syscalls:sys_enter`, which does not slow the
    /// processes down), `strace` (`strace -f -c`, which does: each counted call stops its
    /// thread for the tracer), or `auto` (perf if it works here, else strace).
    #[arg(long, default_value = "auto", value_parser = ["auto", "perf", "strace"])]
    counter: String,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct SpinArgs {
    /// SOFTVERBS_SPIN_US values to try.
    #[arg(long, value_delimiter = ',', default_value = "0,10,50,200")]
    values: Vec<u64>,
    /// Latency iterations per run.
    #[arg(short = 'n', long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Latency runs per value.
    #[arg(short = 'r', long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Idle seconds per value (at most 3600).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    seconds: f64,
    #[command(flatten)]
    common: Common,
}

/// A duration in seconds in (0, 3600].
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 3600]")),
    }
}

/// Run `softverbs perf` (the peer is spawned as `<this exe> perf ...`).
pub fn main(args: PerfArgs) -> ExitCode {
    run(args, &["perf"])
}

/// Run the benchmarks; `peer_prefix` is what goes before the subcommand when this program
/// spawns itself as the peer (`["perf"]` for the `softverbs` CLI, empty for a program whose
/// arguments are [`PerfArgs`] directly, like the benches).
pub fn run(args: PerfArgs, peer_prefix: &[&str]) -> ExitCode {
    let me = Launcher { prefix: peer_prefix.iter().map(|s| s.to_string()).collect() };
    let r = match &args.cmd {
        PerfCmd::Lat(a) if a.common.peer => lat_peer(a),
        PerfCmd::Lat(a) => lat(&me, a).map(|_| ()),
        PerfCmd::Bw(a) if a.common.peer => bw_peer(a),
        PerfCmd::Bw(a) => bw(&me, a).map(|_| ()),
        PerfCmd::Floor(a) if a.common.peer => floor_peer(a),
        PerfCmd::Floor(a) => floor(&me, a).map(|_| ()),
        PerfCmd::Idle(a) => idle(&me, a),
        PerfCmd::Syscalls(a) => syscalls(&me, a),
        PerfCmd::Spin(a) => spin(&me, a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softverbs perf: {e}");
            ExitCode::from(e.status)
        }
    }
}

// ---------------- the machine, statistics, output ----------------

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

/// Percentiles of a sample set, in nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
struct Dist {
    min: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Dist {
    fn of(samples: &mut [f64]) -> Dist {
        if samples.is_empty() {
            return Dist::default();
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Dist {
            min: samples[0],
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }
}

fn median(v: &[f64]) -> f64 {
    Dist::of(&mut v.to_vec()).p50
}

fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1e3)
}

/// Parse `key=value` pairs of the last `RESULT <name>` line of `text`.
fn parse_result(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let line = text.lines().rev().find(|l| l.starts_with(&format!("RESULT {name} ")))?;
    Some(
        line.split_whitespace()
            .skip(2)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn field(kv: &[(String, String)], key: &str) -> Option<f64> {
    kv.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.parse().ok())
}

/// CPU time of this whole process (every thread), in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`;
/// 0 if the clock cannot be read).
pub fn process_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec (two i64 on 64-bit Linux) to a valid pointer.
    let rc = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------- the peer process ----------------

/// `-d DEV [-g N]`: the device options a spawned `lat`, `bw` or peer process needs.
fn device_args(c: &Common) -> Vec<String> {
    let mut args = vec!["-d".to_string(), c.ib_dev.clone()];
    if let Some(g) = c.gid_idx {
        args.extend(["-g".to_string(), g.to_string()]);
    }
    args
}

/// How this program starts itself as a peer.
struct Launcher {
    prefix: Vec<String>,
}

impl Launcher {
    fn command(&self, args: &[String]) -> Result<Command, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
        let mut c = Command::new(exe);
        c.args(&self.prefix).args(args);
        Ok(c)
    }

    /// Start `<sub> --peer --fabric DIR -d DEV [-g N] <extra>` with piped stdin and stdout.
    fn spawn(
        &self,
        sub: &str,
        common: &Common,
        fabric: &Path,
        extra: &[String],
    ) -> Result<Peer, String> {
        let mut args = vec![sub.to_string(), "--peer".into(), "--fabric".into()];
        args.push(fabric.display().to_string());
        args.extend(device_args(common));
        args.extend_from_slice(extra);
        let mut child = self
            .command(&args)?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the peer process: {e}"))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Peer { child: Some(child), stdin: Some(stdin), lines: rx })
    }
}

/// The peer process: its stdin, its stdout as lines, and a kill-on-drop guard.
struct Peer {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    fn say(&mut self, s: &str) -> Result<(), String> {
        let w = self.stdin.as_mut().ok_or("the peer's stdin is closed")?;
        writeln!(w, "{s}").and_then(|_| w.flush()).map_err(|e| format!("writing to the peer: {e}"))
    }

    fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => l
                .strip_prefix(word)
                .map(|s| s.trim().to_string())
                .ok_or_else(|| format!("expected {word:?} from the peer, got {l:?}")),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no {word:?} from the peer in {timeout:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(format!("the peer exited before sending {word:?}"))
            }
        }
    }

    /// Close its stdin and wait (bounded) for a successful exit.
    fn finish(mut self) -> Result<(), String> {
        drop(self.stdin.take());
        let mut c = self.child.take().expect("the child is taken only here");
        let deadline = Instant::now() + HANDSHAKE;
        loop {
            match c.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(format!("the peer process failed: {st}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return Err("the peer process did not exit".into());
                }
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The peer side of the line protocol: its stdin and stdout.
struct Parent {
    input: std::io::StdinLock<'static>,
}

impl Parent {
    fn new() -> Parent {
        Parent { input: std::io::stdin().lock() }
    }
    fn say(&self, s: &str) -> Result<(), String> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{s}")
            .and_then(|_| out.flush())
            .map_err(|e| format!("writing to the parent: {e}"))
    }
    /// The next line; `None` at end of input (the parent closed the pipe or died).
    fn line(&mut self) -> Result<Option<String>, String> {
        let mut l = String::new();
        match self.input.read_line(&mut l) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(l.trim_end().to_string())),
            Err(e) => Err(format!("reading from the parent: {e}")),
        }
    }
    fn expect(&mut self, word: &str) -> Result<String, String> {
        match self.line()? {
            Some(l) => l
                .strip_prefix(word)
                .map(|s| s.trim().to_string())
                .ok_or_else(|| format!("expected {word:?} from the parent, got {l:?}")),
            None => Err(format!("the parent closed the pipe before {word:?}")),
        }
    }
}

/// A fabric directory this run created and removes when dropped, or the one given (by
/// `--fabric` or `$SOFTVERBS_FABRIC`).
struct FabricDir {
    path: PathBuf,
    owned: bool,
}

impl FabricDir {
    fn new(given: Option<&Path>) -> Result<FabricDir, String> {
        let env = std::env::var_os(nic_model::wire::FABRIC_ENV).filter(|d| !d.is_empty());
        if let Some(p) = given.map(PathBuf::from).or(env.map(PathBuf::from)) {
            return Ok(FabricDir { path: p, owned: false });
        }
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        for (dir, pid) in remove_dead_runs(&base) {
            eprintln!(
                "softverbs perf: removed {}, left by run {pid}, which is gone",
                dir.display()
            );
        }
        let path = base.join(format!("{PERF_DIR_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        Ok(FabricDir { path, owned: true })
    }
}

/// The name of a run's own fabric directory, before the run's pid.
const PERF_DIR_PREFIX: &str = "softverbs-perf-";

/// Removes the fabric directories in `base` of earlier runs whose process is gone (a run that
/// was killed cannot remove its own), and returns them with those pids. A directory whose pid
/// belongs to a live process, this run's or another's, is left alone, as is anything else.
fn remove_dead_runs(base: &Path) -> Vec<(PathBuf, u32)> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PERF_DIR_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if !path.is_dir() || pid == std::process::id() || nic_model::wire::process_alive(pid) {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push((path, pid));
        }
    }
    removed
}

impl Drop for FabricDir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------- connecting ----------------

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
/// the connection options its port needs.
fn endpoint(c: &Common, fabric: &Path, mr_len: usize) -> Result<(Endpoint, PortAddress), CliError> {
    cmd::register_fabric(Some(fabric))?;
    let ctx = cmd::open_device(&c.ib_dev)?;
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(), SQ_DEPTH + 2 * RX_DEPTH as u32, mr_len)
        .map_err(|e| e.to_string())?;
    let addr = cmd::port_address(&ctx, c.gid_idx)?;
    Ok((ep, addr))
}

fn info_line(ep: &Endpoint, addr: &PortAddress, psn: u32) -> String {
    let i = addr.qp_info(&ep.qp, psn);
    format!("{} {:x} {:x}", i.to_wire(), ep.mr.addr(), ep.mr.rkey())
}

fn parse_info(s: &str) -> Result<(QpInfo, u64, u32), String> {
    let mut it = s.split_whitespace();
    let info = it.next().and_then(QpInfo::from_wire).ok_or("malformed QP info")?;
    let addr =
        it.next().and_then(|s| u64::from_str_radix(s, 16).ok()).ok_or("malformed address")?;
    let rkey = it.next().and_then(|s| u32::from_str_radix(s, 16).ok()).ok_or("malformed rkey")?;
    Ok((info, addr, rkey))
}

/// INIT, RTR towards `remote` and RTS, with the options `addr`'s port needs.
fn connect(ep: &Endpoint, addr: &PortAddress, psn: u32, remote: &QpInfo) -> Result<(), String> {
    let opts = addr.conn_opts(opts()).map_err(|e| e.to_string())?;
    conn::connect(&ep.qp, psn, remote, &opts).map_err(|e| e.to_string())
}

/// Initiator side: start the peer, swap QP info, connect; returns once the peer is READY.
fn connect_to_peer(
    me: &Launcher,
    sub: &str,
    common: &Common,
    fabric: &Path,
    extra: &[String],
    mr_len: usize,
) -> Result<(Endpoint, Peer, u64, u32), CliError> {
    // Open the device first: a bad -d fails here, before a peer is started.
    let (ep, addr) = endpoint(common, fabric, mr_len)?;
    let mut peer = me.spawn(sub, common, fabric, extra)?;
    let (remote, raddr, rkey) = parse_info(&peer.expect("INFO", HANDSHAKE)?)?;
    peer.say(&format!("INFO {}", info_line(&ep, &addr, CLIENT_PSN)))?;
    connect(&ep, &addr, CLIENT_PSN, &remote)?;
    peer.expect("READY", HANDSHAKE)?;
    Ok((ep, peer, raddr, rkey))
}

/// Peer side: swap QP info with the parent and connect (the caller then says READY).
fn accept_parent(
    parent: &mut Parent,
    common: &Common,
    fabric: &Path,
    mr_len: usize,
) -> Result<Endpoint, CliError> {
    let (ep, addr) = endpoint(common, fabric, mr_len)?;
    parent.say(&format!("INFO {}", info_line(&ep, &addr, SERVER_PSN)))?;
    let (remote, _, _) = parse_info(&parent.expect("INFO")?)?;
    connect(&ep, &addr, SERVER_PSN, &remote)?;
    Ok(ep)
}

/// Busy-poll `cq` until it returns at least one completion; every completion must succeed.
/// Returns how many of those were receives.
fn poll_some(
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
                    return Err(format!("work completion failed: {wc:?}"));
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
        // No `spin_loop` (PAUSE) hint, as ibv_rc_pingpong and fi_pingpong poll: on this AMD
        // EPYC under KVM a PAUSE costs about 65 cycles, and a loop dense in them draws
        // pause-loop VM exits (docs/performance.md).
    }
}

// ---------------- 1. SEND ping-pong latency ----------------

/// The ping-pong loop both sides run: one SEND per received message.
struct PingPong<'a> {
    ep: &'a Endpoint,
    size: u32,
    sent: u64,
    wcs: [WorkCompletion; 32],
}

impl<'a> PingPong<'a> {
    fn new(ep: &'a Endpoint, size: u32) -> Result<PingPong<'a>, String> {
        for i in 0..RX_DEPTH {
            post_recv(ep, size, i as u64)?;
        }
        Ok(PingPong { ep, size, sent: 0, wcs: [WorkCompletion::default(); 32] })
    }

    fn send(&mut self) -> Result<(), String> {
        self.sent += 1;
        let sge = [self.ep.mr.sge(0, self.size)];
        let mut flags = if self.size <= 64 { SendFlags::INLINE } else { SendFlags::empty() };
        if self.sent.is_multiple_of(SIGNAL_EVERY) {
            flags |= SendFlags::SIGNALED;
        }
        let wr = SendWr {
            wr_id: self.sent,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: flags,
            ..Default::default()
        };
        self.ep.qp.post_send(&[wr]).map_err(|e| e.to_string())
    }

    /// Wait for one received message and repost its receive.
    fn recv(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            let (_, recvs) = poll_some(&self.ep.cq, &mut self.wcs, deadline)?;
            for _ in 0..recvs {
                post_recv(self.ep, self.size, 0)?;
            }
            match recvs {
                0 => continue,
                1 => return Ok(()),
                n => return Err(format!("{n} messages arrived at once in a ping-pong")),
            }
        }
    }
}

fn post_recv(ep: &Endpoint, size: u32, wr_id: u64) -> Result<(), String> {
    let off = ep.mr.len() / 2;
    let sge = [ep.mr.sge(off, size)];
    ep.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).map_err(|e| e.to_string())
}

/// What `lat` measured.
#[derive(Clone, Debug)]
pub struct LatResult {
    /// Median of the per-run medians, ns (half round trip).
    pub median_ns: f64,
    /// 99th percentile over every measured iteration, ns.
    pub p99_ns: f64,
}

fn lat(me: &Launcher, a: &LatArgs) -> Result<LatResult, CliError> {
    if a.iters == 0 || a.runs == 0 || a.size == 0 {
        return Err(CliError::usage("size, iterations and runs must be positive"));
    }
    let dir = FabricDir::new(a.common.fabric.as_deref())?;
    let total = a.warmup + a.runs * a.iters;
    let extra = vec![
        "-s".into(),
        a.size.to_string(),
        "-n".into(),
        total.to_string(),
        "-w".into(),
        "0".into(),
        "-r".into(),
        "1".into(),
        "--idle-seconds".into(),
        a.idle_seconds.to_string(),
    ];
    let mr_len = (2 * a.size as usize).max(4096);
    let (ep, mut peer, _, _) = connect_to_peer(me, "lat", &a.common, &dir.path, &extra, mr_len)?;
    let mut pp = PingPong::new(&ep, a.size)?;
    peer.say("GO")?;
    println!(
        "softverbs perf lat: {}-byte RC SEND ping-pong between two processes on {}, half round \
         trip",
        a.size, a.common.ib_dev
    );
    println!("machine: {}", machine());
    println!("{} runs x {} iterations after {} warm-up iterations", a.runs, a.iters, a.warmup);
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.warmup {
        pp.send()?;
        pp.recv(deadline)?;
    }
    let mut all = Vec::with_capacity((a.runs * a.iters) as usize);
    let mut run_medians = Vec::new();
    let mut run_means = Vec::new();
    for r in 0..a.runs {
        let deadline = Instant::now() + PHASE;
        let mut samples = Vec::with_capacity(a.iters as usize);
        // One clock read per round trip, right after the post, while the message is on its
        // way (a read costs about 25 ns on this VM; after the receive it would add that to
        // every round trip, which fi_pingpong's loop does not pay). The iterations run back to
        // back, so each round trip is the distance from one post's read to the next one's;
        // the last ends with the last receive.
        let t_run = Instant::now();
        let mut last = t_run;
        for i in 0..a.iters {
            pp.send()?;
            let now = Instant::now();
            if i > 0 {
                samples.push(now.duration_since(last).as_nanos() as f64 / 2.0);
            }
            last = now;
            pp.recv(deadline)?;
        }
        let end = Instant::now();
        samples.push(end.duration_since(last).as_nanos() as f64 / 2.0);
        // What fi_pingpong reports as usec/xfer: elapsed / (2 x iterations).
        let mean = end.duration_since(t_run).as_nanos() as f64 / a.iters as f64 / 2.0;
        run_means.push(mean);
        all.extend_from_slice(&samples);
        let d = Dist::of(&mut samples);
        run_medians.push(d.p50);
        println!(
            "  run {}: median {} us  p99 {} us  mean {} us",
            r + 1,
            us(d.p50),
            us(d.p99),
            us(mean)
        );
    }
    let d = Dist::of(&mut all);
    let med = median(&run_medians);
    let mean = median(&run_means);
    println!(
        "half round trip (us): median of run medians {}  median of run means {}  min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        us(med),
        us(mean),
        us(d.min),
        us(d.p50),
        us(d.p90),
        us(d.p99),
        us(d.p999),
        us(d.max)
    );
    let mut idle = String::new();
    if a.idle_seconds > 0.0 {
        let (cpu, wall) = idle_window(a.idle_seconds);
        let theirs = peer.expect("CPU", HANDSHAKE + Duration::from_secs_f64(a.idle_seconds))?;
        let mut it = theirs.split_whitespace().filter_map(|s| s.parse::<f64>().ok());
        let (pc, pw) = (it.next().unwrap_or(0.0), it.next().unwrap_or(1.0));
        let mine = cpu as f64 / wall as f64 * 100.0;
        let other = pc / pw * 100.0;
        println!(
            "idle for {:.1} s after the runs: CPU {mine:.3}% of a core (this process), {other:.3}% (peer)",
            a.idle_seconds
        );
        idle = format!(" idle_cpu_pct={mine:.4} peer_idle_cpu_pct={other:.4}");
    }
    println!(
        "RESULT lat size={} iters={} runs={} median_us={} mean_us={} p99_us={} min_us={} p999_us={}{idle}",
        a.size,
        a.iters,
        a.runs,
        us(med),
        us(mean),
        us(d.p99),
        us(d.min),
        us(d.p999)
    );
    peer.finish()?;
    Ok(LatResult { median_ns: med, p99_ns: d.p99 })
}

/// Sleep `seconds` and return (CPU ns of this process, wall ns) over the sleep.
fn idle_window(seconds: f64) -> (u64, u64) {
    let c0 = process_cpu_ns();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let wall = t0.elapsed().as_nanos() as u64;
    (process_cpu_ns().saturating_sub(c0), wall.max(1))
}

fn lat_peer(a: &LatArgs) -> Result<(), CliError> {
    let mut parent = Parent::new();
    let fabric = a.common.fabric.clone().ok_or("the peer needs --fabric")?;
    let mr_len = (2 * a.size as usize).max(4096);
    let ep = accept_parent(&mut parent, &a.common, &fabric, mr_len)?;
    // Post the receives before READY so the first SEND never meets an empty RQ.
    let mut pp = PingPong::new(&ep, a.size)?;
    parent.say("READY")?;
    parent.expect("GO")?;
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.iters {
        pp.recv(deadline)?;
        pp.send()?;
    }
    if a.idle_seconds > 0.0 {
        let (cpu, wall) = idle_window(a.idle_seconds);
        parent.say(&format!("CPU {cpu} {wall}"))?;
    }
    // Stay until the parent is done with the last completions.
    while parent.line()?.is_some() {}
    Ok(())
}

// ---------------- 2. RDMA WRITE bandwidth ----------------

/// What `bw` measured.
#[derive(Clone, Debug)]
pub struct BwResult {
    /// Median over runs, GB/s (10^9 bytes per second).
    pub median_gbps: f64,
}

fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(7)
}

fn bw(me: &Launcher, a: &BwArgs) -> Result<BwResult, CliError> {
    if a.iters == 0 || a.runs == 0 || a.size == 0 || a.window == 0 || a.window >= SQ_DEPTH {
        return Err(CliError::usage(format!(
            "size, iterations and runs must be positive and the window in 1..{SQ_DEPTH}"
        )));
    }
    let dir = FabricDir::new(a.common.fabric.as_deref())?;
    let extra = vec!["-s".into(), a.size.to_string()];
    let len = a.size as usize;
    let (ep, mut peer, raddr, rkey) = connect_to_peer(me, "bw", &a.common, &dir.path, &extra, len)?;
    let data: Vec<u8> = (0..len).map(pattern).collect();
    ep.mr.write(0, &data).map_err(|e| e.to_string())?;
    println!(
        "softverbs perf bw: {} B RDMA WRITEs, window {}, between two processes on {}",
        a.size, a.window, a.common.ib_dev
    );
    println!("machine: {}", machine());
    let sge = [ep.mr.sge(0, a.size)];
    let wr = SendWr {
        wr_id: 0,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: raddr, rkey },
        ..Default::default()
    };
    let mut wcs = [WorkCompletion::default(); 32];
    let mut results = Vec::new();
    // One unmeasured run first (page faults, ring warm-up), then the measured ones.
    for r in 0..=a.runs {
        let n = if r == 0 { a.iters.min(64) } else { a.iters };
        let deadline = Instant::now() + PHASE;
        let (mut posted, mut done) = (0u64, 0u64);
        let t0 = Instant::now();
        while done < n {
            while posted < n && posted - done < a.window as u64 {
                ep.qp.post_send(std::slice::from_ref(&wr)).map_err(|e| e.to_string())?;
                posted += 1;
            }
            done += poll_some(&ep.cq, &mut wcs, deadline)?.0 as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        if r > 0 {
            let gbps = n as f64 * a.size as f64 / secs / 1e9;
            println!("  run {r}: {gbps:.3} GB/s ({:.1} us per WRITE)", secs * 1e6 / n as f64);
            results.push(gbps);
        }
    }
    peer.say("CHECK")?;
    let got = peer.expect("SUM", HANDSHAKE)?;
    let want = checksum(&data);
    if got != want.to_string() {
        return Err(format!("the target's memory has checksum {got}, expected {want}").into());
    }
    let med = median(&results);
    let (lo, hi) = results.iter().fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
    println!("bandwidth (GB/s): median {med:.3}  min {lo:.3}  max {hi:.3}  (data verified at the target)");
    println!(
        "RESULT bw size={} iters={} window={} runs={} median_gbps={med:.4} min_gbps={lo:.4} max_gbps={hi:.4}",
        a.size, a.iters, a.window, a.runs
    );
    peer.finish()?;
    Ok(BwResult { median_gbps: med })
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

fn bw_peer(a: &BwArgs) -> Result<(), CliError> {
    let mut parent = Parent::new();
    let fabric = a.common.fabric.clone().ok_or("the peer needs --fabric")?;
    let ep = accept_parent(&mut parent, &a.common, &fabric, a.size as usize)?;
    parent.say("READY")?;
    // The target's CPU takes no part: it sleeps in read() while the WRITEs land.
    while let Some(l) = parent.line()? {
        if l == "CHECK" {
            let got = ep.mr.read_vec(0, a.size as usize).map_err(|e| e.to_string())?;
            parent.say(&format!("SUM {}", checksum(&got)))?;
        }
    }
    Ok(())
}

// ---------------- 3. raw shared-memory floor ----------------

/// One shared page, mapped from a file.
struct SharedPage {
    ptr: *mut u8,
    _file: File,
}

const PAGE: usize = 4096;

impl SharedPage {
    fn map(path: &Path, create: bool) -> Result<SharedPage, String> {
        extern "C" {
            fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
                -> *mut u8;
        }
        const PROT_READ_WRITE: i32 = 0x1 | 0x2;
        const MAP_SHARED: i32 = 0x1;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        if create {
            file.set_len(PAGE as u64).map_err(|e| format!("sizing {}: {e}", path.display()))?;
        }
        // SAFETY: maps PAGE bytes of a file of at least PAGE bytes, shared, at an address the
        // kernel chooses; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            mmap(std::ptr::null_mut(), PAGE, PROT_READ_WRITE, MAP_SHARED, file.as_raw_fd(), 0)
        };
        if ptr as isize == -1 || ptr.is_null() {
            return Err(format!("mmap {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        Ok(SharedPage { ptr, _file: file })
    }

    fn counter(&self) -> &AtomicU64 {
        // SAFETY: the mapping is PAGE bytes, page aligned, alive as long as `self`, and only
        // ever accessed through atomics by both processes.
        unsafe { &*(self.ptr as *const AtomicU64) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        extern "C" {
            fn munmap(addr: *mut u8, len: usize) -> i32;
        }
        // SAFETY: unmaps exactly the mapping made in `map`; no reference outlives `self`.
        unsafe { munmap(self.ptr, PAGE) };
    }
}

/// Spin until the counter reaches `want` (or `stop`); bounded by `deadline`.
fn wait_for(c: &AtomicU64, want: u64, deadline: Instant) -> Result<u64, String> {
    let mut spins = 0u32;
    loop {
        let v = c.load(Ordering::Acquire);
        if v >= want {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(65536) && Instant::now() >= deadline {
            return Err("timed out in the shared-memory ping-pong".into());
        }
        // No PAUSE, as in the verbs ping-pong's poll loop (`poll_some`).
    }
}

const FLOOR_STOP: u64 = u64::MAX;

fn floor(me: &Launcher, a: &FloorArgs) -> Result<f64, CliError> {
    if a.iters == 0 || a.runs == 0 {
        return Err("iterations and runs must be positive".into());
    }
    let dir = FabricDir::new(a.common.fabric.as_deref())?;
    let path = dir.path.join(format!("perf-floor-{}.page", std::process::id()));
    let page = SharedPage::map(&path, true)?;
    let c = page.counter();
    c.store(0, Ordering::Release);
    let extra = vec!["--page".into(), path.display().to_string()];
    let mut peer = me.spawn("floor", &a.common, &dir.path, &extra)?;
    peer.expect("READY", HANDSHAKE)?;
    println!(
        "softverbs perf floor: two processes bounce one counter through one shared page (spinning)"
    );
    println!("machine: {}", machine());
    let mut v = 0u64;
    let mut step = |deadline: Instant| -> Result<(), String> {
        c.store(v + 1, Ordering::Release);
        v = wait_for(c, v + 2, deadline)?;
        Ok(())
    };
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.warmup {
        step(deadline)?;
    }
    let mut run_medians = Vec::new();
    let mut all = Vec::new();
    for r in 0..a.runs {
        let deadline = Instant::now() + PHASE;
        let mut samples = Vec::with_capacity(a.iters as usize);
        let t_run = Instant::now();
        for _ in 0..a.iters {
            let t0 = Instant::now();
            step(deadline)?;
            samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
        }
        let mean = t_run.elapsed().as_nanos() as f64 / a.iters as f64 / 2.0;
        all.extend_from_slice(&samples);
        let d = Dist::of(&mut samples);
        run_medians.push(d.p50);
        println!(
            "  run {}: median {} us  p99 {} us  mean {} us",
            r + 1,
            us(d.p50),
            us(d.p99),
            us(mean)
        );
    }
    c.store(FLOOR_STOP, Ordering::Release);
    let d = Dist::of(&mut all);
    let med = median(&run_medians);
    println!(
        "half round trip (us): median of run medians {}  min {}  p99 {}  max {}",
        us(med),
        us(d.min),
        us(d.p99),
        us(d.max)
    );
    println!(
        "RESULT floor iters={} runs={} median_us={} p99_us={}",
        a.iters,
        a.runs,
        us(med),
        us(d.p99)
    );
    peer.finish()?;
    drop(page);
    let _ = std::fs::remove_file(&path);
    Ok(med)
}

fn floor_peer(a: &FloorArgs) -> Result<(), CliError> {
    let parent = Parent::new();
    let path = a.page.clone().ok_or("the floor peer needs --page")?;
    let page = SharedPage::map(&path, false)?;
    let c = page.counter();
    parent.say("READY")?;
    let mut v = 1u64;
    // Bounded: the parent stops us with FLOOR_STOP, or we give up after PHASE of silence.
    loop {
        let got = wait_for(c, v, Instant::now() + PHASE)?;
        if got == FLOOR_STOP {
            return Ok(());
        }
        c.store(got + 1, Ordering::Release);
        v = got + 2;
    }
}

// ---------------- 5. idle CPU ----------------

fn idle(me: &Launcher, a: &IdleArgs) -> Result<(), CliError> {
    if !(a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err(CliError::usage("--seconds must be in (0, 3600]"));
    }
    if a.common.peer {
        return Err(CliError::usage("idle has no peer role (it runs lat's)"));
    }
    // A short ping-pong first, so both NIC threads have had work and must go back to sleep.
    let la = LatArgs {
        size: 8,
        iters: 1000,
        warmup: 100,
        runs: 1,
        idle_seconds: a.seconds,
        common: a.common.clone(),
    };
    println!(
        "softverbs perf idle: connect, 1100 ping-pongs, then sleep {:.1} s and measure CPU time",
        a.seconds
    );
    lat(me, &la).map(|_| ())
}

// ---------------- 4. system calls per iteration ----------------

fn strace_total(path: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    // The summary's last line: "100.00  secs  usecs/call  calls  [errors]  total".
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with("total"))
        .ok_or_else(|| format!("no total line in {}", path.display()))?;
    line.split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("cannot parse the strace total {line:?}"))
}

/// The total of a `perf stat -x, -e raw_syscalls:sys_enter -o FILE` run.
fn perf_stat_total(path: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    // CSV: "count,unit,event,...", after comment lines.
    let line = text
        .lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .ok_or_else(|| format!("no raw_syscalls line in {}", path.display()))?;
    line.split(',')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("cannot parse the perf stat count {line:?}"))
}

/// Whether `perf stat` can count system calls here (installed, and allowed to trace).
fn perf_stat_works() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn syscalls(me: &Launcher, a: &SyscallArgs) -> Result<(), CliError> {
    if a.base >= a.iters {
        return Err(CliError::usage(format!(
            "--base {} must be smaller than --iters {}",
            a.base, a.iters
        )));
    }
    let use_perf = match a.counter.as_str() {
        "perf" => true,
        "strace" => false,
        _ => perf_stat_works(),
    };
    let counter = if use_perf { "perf" } else { "strace" };
    println!("counting with {counter}");
    let keep = a.out_dir.is_some();
    let out_dir = a.out_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut totals = Vec::new();
    for n in [a.base, a.iters] {
        let file = out_dir.join(format!("softverbs-{counter}-{}-{n}.txt", std::process::id()));
        let mut args = vec!["lat".to_string(), "-n".into(), n.to_string()];
        args.extend(["-w".into(), "0".into(), "-r".into(), "1".into()]);
        args.extend(device_args(&a.common));
        if let Some(f) = &a.common.fabric {
            args.extend(["--fabric".into(), f.display().to_string()]);
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = if use_perf {
            let mut c = Command::new("perf");
            c.args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o"]).arg(&file).arg("--");
            c
        } else {
            let mut c = Command::new("strace");
            c.args(["-f", "-c", "-o"]).arg(&file);
            c
        };
        let out = cmd.arg(exe).args(&me.prefix).args(&args).stdin(Stdio::null()).output().map_err(
            |e| format!("running {counter} (apt-get install -y linux-perf strace): {e}"),
        )?;
        if !out.status.success() {
            return Err(child_failed(&format!("{counter} run of {n} iterations"), &out));
        }
        let total = if use_perf { perf_stat_total(&file) } else { strace_total(&file) };
        if !keep {
            let _ = std::fs::remove_file(&file);
        }
        let total = total?;
        let kept = if keep { format!(" ({})", file.display()) } else { String::new() };
        println!("  {n:>7} iterations: {total} system calls in the whole process tree{kept}");
        totals.push(total);
    }
    let per = (totals[1] as f64 - totals[0] as f64) / (a.iters - a.base) as f64;
    println!(
        "system calls per ping-pong iteration (both processes, all threads): {per:.5} = ({} - {}) / ({} - {})",
        totals[1], totals[0], a.iters, a.base
    );
    println!(
        "RESULT syscalls iters={} base={} total={} base_total={} per_iter={per:.6} counter={counter}",
        a.iters, a.base, totals[1], totals[0]
    );
    Ok(())
}

/// The error of a `lat` run in a child process that failed: a usage error (status 2, a bad
/// device, say) stays one.
fn child_failed(what: &str, out: &std::process::Output) -> CliError {
    let message = format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim_end());
    match out.status.code() {
        Some(2) => CliError::usage(message),
        _ => CliError::failed(message),
    }
}

// ---------------- 6. spin window ----------------

fn spin(me: &Launcher, a: &SpinArgs) -> Result<(), CliError> {
    println!("softverbs perf spin: SOFTVERBS_SPIN_US against 8-byte latency and idle CPU");
    println!("machine: {}", machine());
    println!("| SOFTVERBS_SPIN_US | median half-RTT (us) | p99 (us) | idle CPU, % of a core (initiator / peer) |");
    println!("|---|---|---|---|");
    for &v in &a.values {
        let mut args = vec!["lat".to_string(), "-n".into(), a.iters.to_string()];
        args.extend([
            "-r".into(),
            a.runs.to_string(),
            "--idle-seconds".into(),
            a.seconds.to_string(),
        ]);
        args.extend(device_args(&a.common));
        if let Some(f) = &a.common.fabric {
            args.extend(["--fabric".into(), f.display().to_string()]);
        }
        let out = me
            .command(&args)?
            .env("SOFTVERBS_SPIN_US", v.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running lat: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let kv = parse_result(&text, "lat")
            .ok_or_else(|| child_failed(&format!("lat with SOFTVERBS_SPIN_US={v}"), &out))?;
        let g = |k: &str| field(&kv, k).unwrap_or(f64::NAN);
        println!(
            "| {v} | {:.3} | {:.3} | {:.3} / {:.3} |",
            g("median_us"),
            g("p99_us"),
            g("idle_cpu_pct"),
            g("peer_idle_cpu_pct")
        );
        println!(
            "RESULT spin spin_us={v} median_us={:.3} p99_us={:.3} idle_cpu_pct={:.4} peer_idle_cpu_pct={:.4}",
            g("median_us"),
            g("p99_us"),
            g("idle_cpu_pct"),
            g("peer_idle_cpu_pct")
        );
    }
    Ok(())
}

/// Latency and bandwidth with the default options, for `cargo bench` (which runs a program
/// whose own arguments are [`PerfArgs`]; `peer_prefix` as in [`run`]).
pub fn bench(peer_prefix: &[&str]) -> Result<(LatResult, BwResult), String> {
    let me = Launcher { prefix: peer_prefix.iter().map(|s| s.to_string()).collect() };
    let common = Common { fabric: None, ib_dev: "softverbs0".into(), gid_idx: None, peer: false };
    let l = lat(
        &me,
        &LatArgs {
            size: 8,
            iters: 100_000,
            warmup: 10_000,
            runs: 5,
            idle_seconds: 0.0,
            common: common.clone(),
        },
    )
    .map_err(|e| e.message)?;
    let b = bw(&me, &BwArgs { size: 1 << 20, iters: 2000, window: 16, runs: 5, common })
        .map_err(|e| e.message)?;
    Ok((l, b))
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

    #[test]
    fn percentiles_of_a_known_set() {
        let mut v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let d = Dist::of(&mut v);
        assert_eq!(d.min, 1.0);
        assert_eq!(d.max, 1000.0);
        assert!((d.p50 - 500.0).abs() <= 1.0);
        assert!((d.p99 - 990.0).abs() <= 1.0);
    }

    #[test]
    fn result_lines_parse() {
        let t = "noise\nRESULT lat size=8 median_us=1.250 p99_us=3.000\n";
        let kv = parse_result(t, "lat").expect("a RESULT line");
        assert_eq!(field(&kv, "median_us"), Some(1.25));
        assert_eq!(field(&kv, "p99_us"), Some(3.0));
        assert!(parse_result(t, "bw").is_none());
    }

    #[test]
    fn strace_summary_total_parses() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let f = dir.path().join("s.txt");
        std::fs::write(
            &f,
            "% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n 50.00    0.000010           1        10         2 futex\n------ ----------- ----------- --------- --------- ----------------\n100.00    0.000020           1       123         4 total\n",
        )
        .expect("write");
        assert_eq!(strace_total(&f), Ok(123));
    }
}
