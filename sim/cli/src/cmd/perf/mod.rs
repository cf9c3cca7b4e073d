//! `softverbs perf`: benchmarks of the soft backend between two real processes on the
//! shared-memory fabric, one file per measurement — SEND ping-pong latency (`lat.rs`), RDMA WRITE
//! bandwidth (`bw.rs`), the raw shared-memory floor (`floor.rs`), idle CPU (`idle.rs`), system
//! calls per iteration (`syscalls.rs`), resident memory per object (`memory.rs`) and the NIC thread's spin window (`spin.rs`) — with their
//! statistics in `stats.rs` and the plumbing they share in `runner.rs`; and perftest's eight
//! verbs tests (`send_lat` … `atomic_bw`, in their own room `perftest/`: flags and set-up in
//! `mod.rs`, the measured loops in `run.rs`, banner, tables, JSON and plot in `out.rs`), which
//! print perftest's table rather than a `RESULT` line.
//!
//! Every measurement spawns its peer as a second process of the same binary (hidden `--peer`),
//! exchanges QP information over the child's stdin/stdout, bounds every wait, and ends with
//! one `RESULT` line of `key=value` pairs that `scripts/perf.sh` and the other subcommands parse.

mod bw;
mod floor;
mod idle;
mod lat;
mod memory;
mod perftest;
mod runner;
mod spin;
mod stats;
mod syscalls;

use std::path::PathBuf;
use std::process::ExitCode;

pub use bw::BwResult;
pub use lat::LatResult;
pub use runner::{machine, process_cpu_ns};

use runner::Launcher;

/// Arguments of `softverbs perf`.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    #[command(subcommand)]
    cmd: PerfCmd,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum PerfCmd {
    /// RC SEND ping-pong: half round trip, median of runs (perftest's layout: send_lat).
    Lat(lat::LatArgs),
    /// RDMA WRITE bandwidth in GB/s, data checked (perftest's layout: write_bw).
    Bw(bw::BwArgs),
    /// Resident memory of a device, per CQ entry, per MR and per connected RC QP.
    Memory(memory::MemArgs),
    /// Raw shared-memory ping-pong of one counter: the floor of any shm transport here.
    Floor(floor::FloorArgs),
    /// CPU time of a connected, idle device over a sleep.
    Idle(idle::IdleArgs),
    /// System calls per ping-pong iteration, counted with `perf stat` (or `strace -f -c` where
    /// perf cannot trace; see --counter).
    Syscalls(syscalls::SyscallArgs),
    /// Latency and idle CPU for several values of SOFTVERBS_SPIN_US.
    Spin(spin::SpinArgs),
    /// perftest's eight tests: send_lat, send_bw, write_lat, write_bw, read_lat, read_bw,
    /// atomic_lat, atomic_bw.
    #[command(flatten)]
    Perftest(perftest::PtCmd),
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
    /// Write a pcap capture of this process's device (both directions of every datagram) to
    /// FILE; `{pid}` in the name stands for the process id (docs/guide.md, "Captures").
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Internal: run as the peer process.
    #[arg(long, hide = true)]
    peer: bool,
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
        PerfCmd::Lat(a) if a.common.peer => lat::lat_peer(a),
        PerfCmd::Lat(a) => lat::lat(&me, a).map(|_| ()),
        PerfCmd::Bw(a) if a.common.peer => bw::bw_peer(a),
        PerfCmd::Bw(a) => bw::bw(&me, a).map(|_| ()),
        PerfCmd::Memory(a) if a.common.peer => memory::memory_peer(a),
        PerfCmd::Memory(a) => memory::memory(&me, a),
        PerfCmd::Floor(a) if a.peer => floor::floor_peer(a),
        PerfCmd::Floor(a) => floor::floor(&me, a).map(|_| ()),
        PerfCmd::Idle(a) => idle::idle(&me, a),
        PerfCmd::Syscalls(a) => syscalls::syscalls(&me, a),
        PerfCmd::Spin(a) => spin::spin(&me, a),
        PerfCmd::Perftest(c) => c.run(&me),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report("perf"),
    }
}

/// Latency and bandwidth with the default options, for `cargo bench` (which runs a program
/// whose own arguments are [`PerfArgs`]; `peer_prefix` as in [`run`]).
pub fn bench(peer_prefix: &[&str]) -> Result<(LatResult, BwResult), String> {
    let me = Launcher { prefix: peer_prefix.iter().map(|s| s.to_string()).collect() };
    let common = Common {
        fabric: None,
        ib_dev: "softverbs0".into(),
        gid_idx: None,
        pcap: None,
        peer: false,
    };
    let l = lat::lat(
        &me,
        &lat::LatArgs {
            size: 8,
            iters: 100_000,
            warmup: 10_000,
            runs: 5,
            idle_seconds: 0.0,
            common: common.clone(),
        },
    )
    .map_err(|e| e.message)?;
    let b = bw::bw(&me, &bw::BwArgs { size: 1 << 20, iters: 2000, window: 16, runs: 5, common })
        .map_err(|e| e.message)?;
    Ok((l, b))
}
