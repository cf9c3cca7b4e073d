//! The `softverbs` command-line tool: list and query devices, run the demo and the RC
//! ping-pong test between processes, benchmark, simulate, and look after the shared-memory
//! fabric.
//!
//! Logs: `-v` (info: devices opened and closed, ports attached to and detached from the fabric,
//! dead owners' segments removed), `-vv` (debug: QP state changes, retransmissions and their
//! cause, NAKs, RNR waits), `-vvv` (trace), on stderr; `RUST_LOG` overrides them. Silent
//! without either. `devinfo`'s own `-v` is `ibv_devinfo`'s (every attribute): there the log's
//! flag goes before the command, `softverbs -v devinfo`.
//!
//! Exit status: 0 on success, 1 when something failed (the message says what), 2 for bad
//! arguments, including a device that does not exist, a port, size or count the device cannot
//! take, an environment value that does not parse, and a fabric directory that a command which
//! only reads it was told to use but does not exist. A command whose output is closed early
//! (`softverbs devinfo | head`) stops at once, quietly, with status 0.
//!
//! A closed output is handled where the commands write (EPIPE, [`CliError::output_closed`]),
//! not by restoring SIGPIPE's default action: these commands also write to TCP sockets and to
//! their peer processes' pipes, where a peer that has gone is an error to report ("is the peer
//! still running?"), not a reason to die silently.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use softverbs::cmd::counters::{self, CountersArgs};
use softverbs::cmd::devinfo::{self, DevinfoArgs};
use softverbs::cmd::fabric::{self, FabricAction};
use softverbs::cmd::logs::{self, LogOpt};
use softverbs::cmd::{self, book, demo, labs, learn, perf, pingpong, run, sim, CliError};

#[derive(Parser)]
#[command(
    name = "softverbs",
    version,
    about = "A userspace RDMA NIC emulator: verbs, RC transport and shared-memory wires"
)]
struct Cli {
    /// Log to stderr: -v lifecycle (info), -vv protocol events (debug), -vvv per packet (trace).
    /// RUST_LOG, if set, overrides it. Also after each command but devinfo (whose -v is
    /// ibv_devinfo's).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--fabric DIR` and `--netdev IFACE`, on every command that touches the shared-memory fabric
/// (`perf` has its own).
#[derive(clap::Args, Debug, Clone)]
struct FabricOpt {
    /// The shared-memory fabric directory [default: $SOFTVERBS_FABRIC, else /dev/shm/softverbs-UID]
    ///
    /// Processes on one fabric reach each other's ports through the segment files in it.
    #[arg(long, value_name = "DIR", global = true)]
    fabric: Option<PathBuf>,
    /// Make the devices RoCE v2 devices on network interface IFACE (UDP port 4791 on its
    /// IPv4 address) instead of ports of the fabric: SOFTVERBS_NETDEV for this process and
    /// the programs it runs (docs/guide.md, "Across machines")
    #[arg(long, value_name = "IFACE", global = true)]
    netdev: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the RDMA devices and their node GUIDs (like ibv_devices).
    Devices {
        #[command(flatten)]
        fabric: FabricOpt,
        #[command(flatten)]
        log: LogOpt,
    },
    /// Show the devices' attributes and ports (like ibv_devinfo).
    Devinfo {
        #[command(flatten)]
        args: DevinfoArgs,
        #[command(flatten)]
        fabric: FabricOpt,
    },
    /// RDMA between two NICs, packet by packet, explained for learners.
    ///
    /// The initiator (this process) and a target (a second process, or a thread with
    /// --in-process) exchange a SEND, an RDMA WRITE, an RDMA READ, a compare-and-swap and a
    /// fetch-and-add; the demo prints every packet and what it means, every completion, the
    /// bytes that landed and how long each operation took.
    Demo {
        /// Run both NICs in this process over the in-process wire.
        #[arg(long)]
        in_process: bool,
        /// The initiator's device; the target opens the device of the same name in its own
        /// process (softverbsN, or a real NIC when built with the rdma-sys feature).
        #[arg(short = 'd', long = "ib-dev", value_name = "DEV", default_value = "softverbs0")]
        ib_dev: String,
        /// The GID index both sides send from (default: 0, or on RoCE the first IPv4-mapped GID).
        #[arg(short = 'g', long = "gid-idx", value_name = "GID_INDEX")]
        gid_idx: Option<u32>,
        /// Write a pcap capture of this process's devices (both directions of every datagram;
        /// with --in-process both NICs) to FILE (docs/guide.md, "Captures").
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        /// After the run, draw its packet ladder in the terminal: an arrow per packet with its
        /// opcode and PSN, ACKs back, completions marked (docs/learn/ladders.md).
        #[arg(long)]
        ladder: bool,
        /// After the run, write its packet ladder as an SVG file.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Space the ladder's rows by time (a longer gap, more rows, labelled with its length)
        /// rather than evenly.
        #[arg(long)]
        time_scale: bool,
        /// Run a failure drill instead: KIND is one of rkey, bounds, small-recv, no-recv, rnr,
        /// peer-dies, no-gid, cq-overrun (docs/learn/drills.md).
        #[arg(long = "break", value_name = "KIND", value_parser = demo::drill::Break::parse)]
        brk: Option<demo::drill::Break>,
        /// The language of the explanatory lines: en or zh-TW (繁體中文). Wire lines, verbs
        /// names, completions and measured lines stay as they are.
        #[arg(long, value_name = "LANG", default_value = "en", value_parser = learn::lang::parse)]
        lang: learn::lang::Lang,
        /// Internal: run as the demo's target process.
        #[arg(long, hide = true)]
        target: bool,
        /// Run the target alone on this host and wait for an initiator on another host
        /// (`--connect`) on TCP port --port (docs/guide.md, "Across machines").
        #[arg(long, conflicts_with_all = ["in_process", "connect", "brk", "pcap", "ladder", "svg"])]
        server: bool,
        /// Be the initiator of the target that `softverbs demo --server` runs on host ADDR.
        #[arg(long, value_name = "ADDR", conflicts_with_all = ["in_process", "brk"])]
        connect: Option<String>,
        /// The TCP port of --server and --connect's exchange.
        #[arg(long, value_name = "PORT", default_value_t = demo::remote::DEFAULT_PORT)]
        port: u16,
        #[command(flatten)]
        fabric: FabricOpt,
        #[command(flatten)]
        log: LogOpt,
    },
    /// The primer's RDMA concepts, each shown live and measured against TCP in the same run.
    ///
    /// Without CONCEPT, the list of lessons: zero-copy, bypass, one-sided, messages, sge, vs-tcp,
    /// qp-states, mr (docs/learn/README.md).
    Learn {
        #[command(flatten)]
        args: learn::LearnArgs,
        #[command(flatten)]
        log: LogOpt,
    },
    /// The RC ping-pong test between two processes (like ibv_rc_pingpong).
    ///
    /// Run it without HOST to serve, then with HOST (e.g. localhost) in a second process on
    /// the same fabric to connect.
    Pingpong {
        #[command(flatten)]
        args: pingpong::PingpongArgs,
        #[command(flatten)]
        fabric: FabricOpt,
        #[command(flatten)]
        log: LogOpt,
    },
    /// Benchmarks between two processes on one device (softverbs0 unless -d).
    Perf {
        #[command(flatten)]
        args: perf::PerfArgs,
        #[command(flatten)]
        log: LogOpt,
    },
    /// Run a scenario in the deterministic simulator, or sweep one of its link parameters.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Sim {
        #[command(subcommand)]
        action: Option<sim::SimAction>,
        #[command(flatten)]
        args: sim::SimArgs,
        #[command(flatten)]
        log: LogOpt,
    },
    /// Show every live port's counters on the fabric (like perfquery / rdma statistic).
    ///
    /// Packets and bytes each way, retransmissions, timeouts, NAKs, duplicates and drops by
    /// cause, named as rdma-core's port counters and rxe's and mlx5's hardware counters name
    /// them; each port's owner publishes them in its inbox segment.
    Counters {
        #[command(flatten)]
        args: CountersArgs,
        #[command(flatten)]
        fabric: FabricOpt,
        #[command(flatten)]
        log: LogOpt,
    },
    /// Run a C verbs program (ibv_rc_pingpong, ib_write_bw, your own) on the soft devices.
    ///
    /// Puts softverbs' libibverbs.so.1 first on the program's library search path (build it
    /// with `cargo build -p softverbs-ibverbs`) and hands it the fabric (docs/c.md).
    Run {
        #[command(flatten)]
        args: run::RunArgs,
        #[command(flatten)]
        fabric: FabricOpt,
    },
    /// The graded C labs (labs/): list them, show one, check your program against it.
    Labs {
        #[command(flatten)]
        args: labs::LabsArgs,
    },
    /// Build the learner's guide (docs/learn, docs/zh-TW) as a static site, every link checked.
    Book {
        #[command(flatten)]
        args: book::BookArgs,
    },
    /// List the fabric directory's segments, or clean up those of dead processes.
    Fabric {
        #[command(subcommand)]
        action: Option<FabricAction>,
        #[command(flatten)]
        fabric: FabricOpt,
        #[command(flatten)]
        log: LogOpt,
    },
}

impl Cmd {
    /// How many times `-v` was given after the command (devinfo's `-v` is not the log's).
    fn verbose(&self) -> u8 {
        match self {
            Cmd::Devices { log, .. }
            | Cmd::Demo { log, .. }
            | Cmd::Pingpong { log, .. }
            | Cmd::Learn { log, .. }
            | Cmd::Perf { log, .. }
            | Cmd::Sim { log, .. }
            | Cmd::Counters { log, .. }
            | Cmd::Fabric { log, .. } => log.verbose,
            Cmd::Devinfo { .. } | Cmd::Run { .. } | Cmd::Labs { .. } | Cmd::Book { .. } => 0,
        }
    }

    /// The fabric options of the commands that open devices.
    fn fabric_opt(&self) -> Option<&FabricOpt> {
        match self {
            Cmd::Devices { fabric, .. }
            | Cmd::Devinfo { fabric, .. }
            | Cmd::Demo { fabric, .. }
            | Cmd::Pingpong { fabric, .. }
            | Cmd::Counters { fabric, .. }
            | Cmd::Run { fabric, .. }
            | Cmd::Fabric { fabric, .. } => Some(fabric),
            Cmd::Learn { .. }
            | Cmd::Perf { .. }
            | Cmd::Sim { .. }
            | Cmd::Labs { .. }
            | Cmd::Book { .. } => None,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Cmd::Devices { .. } => "devices",
            Cmd::Devinfo { .. } => "devinfo",
            Cmd::Demo { .. } => "demo",
            Cmd::Pingpong { .. } => "pingpong",
            Cmd::Learn { .. } => "learn",
            Cmd::Perf { .. } => "perf",
            Cmd::Sim { .. } => "sim",
            Cmd::Counters { .. } => "counters",
            Cmd::Fabric { .. } => "fabric",
            Cmd::Run { .. } => "run",
            Cmd::Labs { .. } => "labs",
            Cmd::Book { .. } => "book",
        }
    }
}

fn report(cmd: &str, r: Result<(), CliError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(cmd),
    }
}

fn main() -> ExitCode {
    let mut stdout = std::io::stdout();
    let cli = Cli::parse();
    if let Err(e) = logs::init(cli.verbose.saturating_add(cli.cmd.verbose())) {
        return e.report(cli.cmd.name());
    }
    if let Some(iface) = cli.cmd.fabric_opt().and_then(|f| f.netdev.as_deref()) {
        // Before any thread starts: the devices this process opens, and a program that
        // `run` starts, read it.
        std::env::set_var("SOFTVERBS_NETDEV", iface);
    }
    match cli.cmd {
        // Listing devices reads the fabric, so a directory the user named must exist.
        Cmd::Devices { fabric, log: _ } => report(
            "devices",
            cmd::existing_fabric(fabric.dir())
                .and_then(|_| cmd::register_fabric(fabric.dir()))
                .and_then(|_| devinfo::devices(&mut stdout)),
        ),
        Cmd::Devinfo { args, fabric } => report(
            "devinfo",
            cmd::register_fabric(fabric.dir()).and_then(|_| devinfo::devinfo(&args, &mut stdout)),
        ),
        Cmd::Demo { ib_dev, gid_idx, server: true, port, fabric, .. } => {
            report("demo", demo::remote::serve(fabric.dir(), &ib_dev, gid_idx, port, &mut stdout))
        }
        Cmd::Demo { ib_dev, gid_idx, brk: Some(kind), target: true, fabric, .. } => report(
            "demo",
            demo::drill::target_main(fabric.dir(), &ib_dev, gid_idx, kind, &mut stdout),
        ),
        Cmd::Demo { in_process, ib_dev, gid_idx, target: true, fabric, .. } if !in_process => {
            report("demo", demo::target_main(fabric.dir(), &ib_dev, gid_idx, &mut stdout))
        }
        Cmd::Demo {
            in_process: false,
            ib_dev,
            gid_idx,
            brk: Some(kind),
            fabric,
            pcap: None,
            lang,
            ladder,
            svg,
            time_scale,
            ..
        } => {
            let mut out = learn::lang::Translating::new(&mut stdout, lang);
            let ladder = (ladder, svg, time_scale);
            let r = demo::drill::run(kind, fabric.dir(), &ib_dev, gid_idx, ladder, &mut out);
            let _ = out.finish();
            report("demo", r)
        }
        Cmd::Demo { brk: Some(_), .. } => report(
            "demo",
            Err(CliError::usage("--break runs two processes: without --in-process or --pcap")),
        ),
        Cmd::Demo {
            in_process,
            ib_dev,
            gid_idx,
            target: _,
            fabric,
            log: _,
            pcap,
            brk: None,
            lang,
            ladder,
            svg,
            time_scale,
            server: _,
            connect,
            port,
        } => {
            let opts = demo::DemoOpts {
                in_process,
                fabric: fabric.dir().map(PathBuf::from),
                ib_dev,
                gid_idx,
                pcap,
                ladder,
                svg,
                time_scale,
                connect,
                port,
            };
            let mut out = learn::lang::Translating::new(&mut stdout, lang);
            let r = demo::run(&opts, &mut out);
            let _ = out.finish();
            report("demo", r)
        }
        Cmd::Pingpong { args, fabric, log: _ } => {
            report("pingpong", pingpong::run(fabric.dir(), &args, &mut stdout))
        }
        Cmd::Learn { args, log: _ } => report("learn", learn::run(&args, &mut stdout)),
        Cmd::Perf { args, log: _ } => perf::main(args),
        Cmd::Sim { args, action, log: _ } => sim::main(args, action),
        Cmd::Counters { args, fabric, log: _ } => {
            report("counters", counters::counters(fabric.dir(), &args, &mut stdout))
        }
        Cmd::Run { args, fabric } => report("run", run::run(fabric.dir(), &args)),
        Cmd::Labs { args } => report("labs", labs::run(&args, &mut stdout)),
        Cmd::Book { args } => report("book", book::run(&args, &mut stdout)),
        Cmd::Fabric { action, fabric, log: _ } => report(
            "fabric",
            fabric::fabric(fabric.dir(), action.unwrap_or(FabricAction::List), &mut stdout),
        ),
    }
}

impl FabricOpt {
    fn dir(&self) -> Option<&Path> {
        self.fabric.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // Catches, among others, an option name used twice in one subcommand.
        Cli::command().debug_assert();
    }
}
