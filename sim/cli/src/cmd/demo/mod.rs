//! `softverbs demo`: RDMA between two NICs, told packet by packet for people learning it. One
//! SEND, one RDMA WRITE, one RDMA READ, one compare-and-swap and one fetch-and-add; for each,
//! the packets it put on the wire and what they mean, the work completion, the bytes that
//! landed and how long it took. By default the target is a second process of this binary on
//! the shared-memory fabric; `--in-process` runs it on a thread over the in-process wire;
//! `-d DEV` runs it on any device, a real NIC included (whose packets this program cannot see).

pub mod drill;
mod ladder;
pub mod remote;
mod wire;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nic_model::soft::{Soft, TapDir, DEFAULT_SPIN, DEFAULT_STANDBY};
use softverbs_sim::peer::{Parent, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress};
use verbs_api::{
    AtomicTarget, Context, Mtu, QpCap, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::cmd::learn::measure;
pub use crate::cmd::words::{describe_packet, describe_wc};
use crate::cmd::{self, gid_ntop, CliError};
use wire::{explain_wire, printable};

/// Where in the target's MR each operation lands.
const RECV_OFF: usize = 0;
const WRITE_OFF: usize = 1024;
const READ_OFF: usize = 8192;
const ATOMIC_OFF: usize = 16384;
const MR_LEN: usize = 32768;
const READ_TEXT: &[u8] = b"the target's memory, read without the target program";
const WRITE_LEN: usize = 2500;
const INITIATOR_PSN: u32 = 0x00_1000;
const TARGET_PSN: u32 = 0x00_8000;
/// The path MTU: small enough that the 2500-byte WRITE takes several packets.
const PATH_MTU: Mtu = Mtu::Mtu1024;
/// Every wait for a completion or for the target to end is bounded by this.
const WAIT: Duration = Duration::from_secs(10);
/// Bound on each line from the target (its start included, on a busy machine).
const HANDSHAKE: Duration = Duration::from_secs(30);

/// Options of `softverbs demo`.
#[derive(Clone, Debug)]
pub struct DemoOpts {
    /// Run the target on a thread over the in-process wire instead of in a second process.
    pub in_process: bool,
    /// The fabric directory (shared-memory mode).
    pub fabric: Option<PathBuf>,
    /// The initiator's device; the target process opens the device of the same name (with
    /// `in_process`, another soft device, or the same real device).
    pub ib_dev: String,
    /// The GID index both sides send from (default: see [`PortAddress::of`]).
    pub gid_idx: Option<u32>,
    /// Write a pcap capture of this process's devices to this file (`--pcap`).
    pub pcap: Option<PathBuf>,
    /// Draw the packet ladder of the run in the terminal after it (`--ladder`).
    pub ladder: bool,
    /// Write the packet ladder of the run as SVG to this file (`--svg`).
    pub svg: Option<PathBuf>,
    /// Space the ladder's rows by time (`--time-scale`).
    pub time_scale: bool,
    /// The host whose `demo --server` is the target (`--connect`), instead of a process here.
    pub connect: Option<String>,
    /// The TCP port of `--connect`'s exchange (`--port`).
    pub port: u16,
}

impl Default for DemoOpts {
    fn default() -> DemoOpts {
        DemoOpts {
            in_process: false,
            fabric: None,
            ib_dev: "softverbs0".into(),
            gid_idx: None,
            pcap: None,
            ladder: false,
            svg: None,
            time_scale: false,
            connect: None,
            port: remote::DEFAULT_PORT,
        }
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Both sides' connection options on port `addr`: ibv_rc_pingpong's, at [`PATH_MTU`].
fn opts(addr: &PortAddress) -> Result<ConnOpts, String> {
    addr.conn_opts(ConnOpts { mtu: PATH_MTU, ..ConnOpts::default() }).map_err(|e| e.to_string())
}

/// The target side: set up, tell the initiator where its memory is, post one receive, then
/// sleep in a blocking read until the initiator is done — its CPU takes no part in the WRITE,
/// READ and atomics — and finally report what landed in its memory.
pub fn run_target(
    ctx: &Context,
    gid_idx: Option<u32>,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Result<(), String> {
    let mut parent = Parent::new(input, output);
    let ep = Endpoint::new(ctx, QpType::Rc, cap(), 16, MR_LEN).map_err(|e| e.to_string())?;
    ep.mr.write(READ_OFF, READ_TEXT).map_err(|e| e.to_string())?;
    ep.mr.write_u64(ATOMIC_OFF, 7).map_err(|e| e.to_string())?;
    let addr = cmd::port_address(ctx, gid_idx).map_err(|e| e.message)?;
    let info = addr.qp_info(&ep.qp, TARGET_PSN);
    let (remote, _) = parent.swap_info(&info, Some((ep.mr.addr(), ep.mr.rkey())))?;
    conn::connect(&ep.qp, TARGET_PSN, &remote, &opts(&addr)?).map_err(|e| e.to_string())?;
    let sge = [ep.mr.sge(RECV_OFF, 64)];
    ep.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &sge }]).map_err(|e| e.to_string())?;
    parent.say("READY")?;
    // The CPU time of this (the program's) thread and of the device's emulated NIC thread,
    // from here to DONE: what "without the target program" rests on.
    let nic = measure::nic_thread_of(&ctx.device_name());
    // Each read of /proc costs this thread a little CPU: the NIC thread's is read before this
    // thread's at the start and after it at the end, so that cost stays outside the window.
    let nic_before = nic.map(measure::cpu_ns);
    let before = (measure::my_cpu_ns(), nic_before);
    // Block in read(): from here on the target program does nothing until DONE arrives.
    parent.expect("DONE")?;
    let my_after = measure::my_cpu_ns();
    // A NIC thread not found before had not started yet (it names itself first thing): it
    // had used no CPU then.
    let after = match nic.or_else(|| measure::nic_thread_of(&ctx.device_name())) {
        Some(t) => (my_after, Some(measure::cpu_ns(t))),
        None => (my_after, None),
    };
    let before = (before.0, before.1.or(after.1.map(|_| 0)));
    let wcs = ep.cq.poll_n(1, WAIT).map_err(|e| e.to_string())?;
    parent.say(&format!("target CQ: {}", describe_wc(&wcs[0])))?;
    let recv = ep.mr.read_vec(RECV_OFF, wcs[0].byte_len as usize).map_err(|e| e.to_string())?;
    parent.say(&format!("target memory [recv buffer]: {:?}", printable(&recv)))?;
    let w = ep.mr.read_vec(WRITE_OFF, WRITE_LEN).map_err(|e| e.to_string())?;
    let pattern_ok = w.iter().enumerate().all(|(i, &b)| b == write_pattern(i));
    parent.say(&format!(
        "target memory [+{WRITE_OFF}, {WRITE_LEN} B written by RDMA WRITE]: starts {:?}, \
             all {WRITE_LEN} bytes {}",
        printable(&w[..40]),
        if pattern_ok { "as sent" } else { "NOT as sent" }
    ))?;
    parent.say(&format!(
        "target memory [atomic counter]: {}",
        ep.mr.read_u64(ATOMIC_OFF).map_err(|e| e.to_string())?
    ))?;
    let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
    let nic_line = match (before.1, after.1) {
        (Some(a), Some(b)) => format!(
            "its emulated NIC thread ({}-nic) {:.3} ms, the work a real NIC does in silicon",
            ctx.device_name(),
            ms(a, b)
        ),
        _ => "its NIC is hardware, with no thread here".to_string(),
    };
    parent.say(&format!(
        "target CPU while its program slept in read(): its program thread {:.3} ms; {nic_line}",
        ms(before.0, after.0)
    ))?;
    parent.say("BYE")?;
    Ok(())
}

/// The demo's target process (`demo --target`): its initiator is the parent, on stdin and
/// stdout.
pub fn target_main(
    fabric: Option<&Path>,
    ib_dev: &str,
    gid_idx: Option<u32>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    cmd::register_fabric(fabric)?;
    let ctx = cmd::open_device(ib_dev)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    run_target(&ctx, gid_idx, &mut input, out).map_err(|e| CliError::failed(format!("target: {e}")))
}

fn write_pattern(i: usize) -> u8 {
    b"RDMA WRITE: zero copy, no remote CPU. "[i % 38]
}

/// The initiator's link to its target (a process, or a thread with `--in-process`), and what
/// the target's device is called, for the output.
struct Target {
    peer: Peer,
    device: String,
}

/// What the demo prints its lines with (a failed write to stdout is not worth failing over).
fn w(out: &mut dyn Write, s: &str) {
    let _ = writeln!(out, "{s}");
}

/// The soft device the in-process target uses: another one than the initiator's.
fn other_soft_device(soft: &Soft, ib_dev: &str) -> Result<String, CliError> {
    soft.device_names().iter().find(|n| *n != ib_dev).cloned().ok_or_else(|| {
        CliError::usage(
            "--in-process needs two soft devices (SOFTVERBS_DEVICES is 1): one for each side",
        )
    })
}

/// Run the demo, printing to `out`. An unusable device is a usage error (exit status 2).
pub fn run(o: &DemoOpts, out: &mut dyn Write) -> Result<(), CliError> {
    let on_soft = verbs_api::backend_of(&o.ib_dev) == "soft";
    let soft =
        if o.in_process { cmd::loopback()? } else { cmd::shared_memory(o.fabric.as_deref())? };
    cmd::register_backends(&soft);
    if let Some(file) = &o.pcap {
        soft.capture_to(Some(file), "--pcap");
    }
    // Open the device first: a bad -d or -g fails here, before a target is started.
    let ctx = cmd::open_device(&o.ib_dev)?;
    let addr = cmd::port_address(&ctx, o.gid_idx)?;
    let mut target = if o.in_process {
        let device = if on_soft { other_soft_device(&soft, &o.ib_dev)? } else { o.ib_dev.clone() };
        let target_ctx = cmd::open_device(&device)?;
        let gid_idx = o.gid_idx;
        let peer = Peer::thread("target", move |input, output| {
            run_target(&target_ctx, gid_idx, input, output)
        })?;
        w(
            out,
            &format!(
                "softverbs demo: two NICs in one process: the initiator on {}, the target on \
                 {device}, joined by {}.",
                o.ib_dev,
                if on_soft { "the in-process wire" } else { "the NIC's own loopback" }
            ),
        );
        Target { peer, device }
    } else if let Some(host) = &o.connect {
        remote::connect(host, o.port, &o.ib_dev, out)?
    } else {
        let dir = soft
            .fabric()
            .ok_or_else(|| {
                CliError::usage(
                    "on a network interface (--netdev) the demo's target is on another host: run \
                     `softverbs demo --netdev IFACE --server` there and `softverbs demo --netdev \
                     IFACE --connect ADDR` here",
                )
            })?
            .dir()
            .to_path_buf();
        let exe = std::env::current_exe()
            .map_err(|e| CliError::failed(format!("finding this program: {e}")))?;
        let mut cmd = Command::new(exe);
        cmd.args(["demo", "--target", "-d", &o.ib_dev, "--fabric"]).arg(&dir);
        if let Some(g) = o.gid_idx {
            cmd.args(["-g", &g.to_string()]);
        }
        let peer = Peer::spawn("the target process", cmd, Stderr::Inherit)?;
        w(out, "softverbs demo: RDMA between two processes, packet by packet.\n");
        w(
            out,
            &format!(
                "This process (pid {}) is the initiator, on {}. A second process (pid {}) is the \
                 target,",
                std::process::id(),
                o.ib_dev,
                peer.pid().expect("a spawned peer is a process")
            ),
        );
        if on_soft {
            w(
                out,
                &format!(
                    "on its own {}: each process has its own NIC, as each host of a cluster \
                     does. Their ports\nmeet on the shared-memory fabric {}.",
                    o.ib_dev,
                    dir.display()
                ),
            );
        } else {
            w(
                out,
                &format!("on the same device {}, reached through the NIC's loopback.", o.ib_dev),
            );
        }
        Target { peer, device: o.ib_dev.clone() }
    };
    let tap_soft = if on_soft { Some(&soft) } else { None };
    let rec = ladder::Recorder::new(o.ladder, o.svg.clone(), o.time_scale).map(Arc::new);
    let result = initiator(&ctx, &addr, tap_soft, o, &mut target, rec.clone(), out);
    // The ladder is drawn whether or not the run succeeded: a failure is when it helps most.
    let drawn = match &rec {
        Some(r) => r.draw(&o.ib_dev, &target.device, tap_soft.is_some(), out),
        None => Ok(()),
    };
    // On failure the target is dropped: a process is killed and reaped, a thread reads the end
    // of its input and ends.
    result.map_err(CliError::failed)?;
    drawn?;
    target.peer.finish(WAIT).map_err(CliError::failed)
}

/// The datagrams a tapped device sent and received, oldest first.
type WireLog = Arc<Mutex<Vec<(TapDir, Vec<u8>)>>>;

/// One operation's figures, for the table at the end.
struct Measured {
    what: &'static str,
    sent: usize,
    received: usize,
    wire_bytes: usize,
    data_bytes: u32,
    took: Duration,
}

fn initiator(
    ctx: &Context,
    addr: &PortAddress,
    tap_soft: Option<&Soft>,
    o: &DemoOpts,
    target: &mut Target,
    rec: Option<Arc<ladder::Recorder>>,
    out: &mut dyn Write,
) -> Result<(), String> {
    let wire_log: WireLog = Arc::new(Mutex::new(Vec::new()));
    if let Some(soft) = tap_soft {
        let log = wire_log.clone();
        let tap_rec = rec.clone();
        soft.set_tap(
            &o.ib_dev,
            Some(Arc::new(move |dir, data| {
                if let Some(r) = &tap_rec {
                    r.packet(dir, data);
                }
                log.lock().unwrap_or_else(|e| e.into_inner()).push((dir, data.to_vec()));
            })),
        )
        .map_err(|e| e.to_string())?;
    }
    let ep = Endpoint::new(ctx, QpType::Rc, cap(), 16, MR_LEN).map_err(|e| e.to_string())?;
    let opts = opts(addr)?;
    let my = addr.qp_info(&ep.qp, INITIATOR_PSN);
    let (target_info, target_mr) = target.peer.swap_info(&my, None, HANDSHAKE)?;
    let (raddr, rkey) = target_mr.ok_or("the target's INFO names no memory region")?;
    conn::connect(&ep.qp, INITIATOR_PSN, &target_info, &opts).map_err(|e| e.to_string())?;
    target.peer.expect("READY", HANDSHAKE)?;

    w(
        out,
        "\nSetting up, as every verbs program does before its first operation: open the device,",
    );
    w(out, "allocate a protection domain, register memory, create a completion queue and a queue pair.");
    w(
        out,
        &format!(
            "  initiator: {} port 1, LID {}, GID {}; RC QP {:#x}, first PSN {:#08x}",
            o.ib_dev,
            my.lid,
            gid_ntop(&my.gid),
            my.qpn,
            INITIATOR_PSN
        ),
    );
    w(
        out,
        &format!(
            "  target:    {} port 1, LID {}, GID {}; RC QP {:#x}, first PSN {:#08x}",
            target.device,
            target_info.lid,
            gid_ntop(&target_info.gid),
            target_info.qpn,
            target_info.psn
        ),
    );
    w(
        out,
        &format!(
            "             {MR_LEN} bytes registered at {raddr:#x} with rkey {rkey:#x}, open to remote \
             READ, WRITE and atomics"
        ),
    );
    for line in cmd::gid_choice_lines(ctx, addr, o.gid_idx) {
        w(out, &line);
    }
    w(
        out,
        if o.connect.is_some() {
            "The two sides exchanged these over TCP (as ibv_rc_pingpong does), and each QP went"
        } else {
            "The two sides exchanged these over a pipe (ibv_rc_pingpong uses TCP), and each QP went"
        },
    );
    w(
        out,
        &format!(
            "RESET -> INIT -> RTR -> RTS towards the other, with path MTU {} bytes, addressed by \
             GID (sgid_index {}).",
            opts.mtu.bytes(),
            opts.sgid_index
        ),
    );
    w(out, "From now on the target program sleeps in a blocking read(): its NIC works alone.");
    if tap_soft.is_some() {
        w(
            out,
            "\nHow to read the wire lines (-> a packet the initiator sent, <- one it received):",
        );
        w(
            out,
            "  PSN     packet sequence number: each request packet takes the next one; a response",
        );
        w(out, "          carries the PSN of the request it answers");
        w(out, "  to QP   the destination QP number in the base transport header (BTH)");
        w(out, "  AckReq  the requester asks for an acknowledgement of this packet");
        w(out, "  RETH    remote virtual address, rkey and length of an RDMA WRITE or READ");
        w(
            out,
            "  AETH    in responses: ACK or NAK, and the MSN, the number of requests the target",
        );
        w(out, "          has completed on this QP");
    } else {
        w(
            out,
            &format!(
                "\n{} is not a softverbs device, so this program cannot see its packets (capture them \
                 with\ntcpdump on the netdev, UDP port 4791, for RoCE). Completions and data are shown.",
                o.ib_dev
            ),
        );
    }
    w(out, "");

    let mut measured: Vec<Measured> = Vec::new();
    let mut run = |out: &mut dyn Write,
                   what: &'static str,
                   explain: &[&str],
                   wr: SendWr<'_>|
     -> Result<WorkCompletion, String> {
        w(out, &format!("== {} {what}", measured.len() + 1));
        for l in explain {
            w(out, &format!("   {l}"));
        }
        wire_log.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let t0 = Instant::now();
        ep.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
        let wcs = ep.cq.poll_n(1, WAIT).map_err(|e| e.to_string())?;
        let took = t0.elapsed();
        if let Some(r) = &rec {
            r.cqe(&wcs[0]);
        }
        let log = std::mem::take(&mut *wire_log.lock().unwrap_or_else(|e| e.into_inner()));
        let (sent, received, wire_bytes) =
            if tap_soft.is_some() { explain_wire(out, &o.ib_dev, &log) } else { (0, 0, 0) };
        w(out, &format!("  initiator CQ: {}", describe_wc(&wcs[0])));
        w(
            out,
            &format!("  {:.1} us from ibv_post_send to the completion", took.as_secs_f64() * 1e6),
        );
        if wcs[0].status != WcStatus::Success {
            return Err(format!("{what} failed: {}", wcs[0].status));
        }
        measured.push(Measured {
            what,
            sent,
            received,
            wire_bytes,
            data_bytes: wcs[0].byte_len,
            took,
        });
        Ok(wcs[0])
    };

    // 1. SEND: two-sided, consumes the receive the target posted.
    let msg = b"Hello from softverbs0!";
    ep.mr.write(0, msg).map_err(|e| e.to_string())?;
    let sg = [ep.mr.sge(0, msg.len() as u32)];
    run(
        out,
        "SEND (two-sided)",
        &[
            "The target posted a receive buffer; the SEND fills it. Both sides get a completion:",
            "the initiator's arrives with the ACK, the target's is shown at the end.",
        ],
        SendWr {
            wr_id: 1,
            sg_list: &sg,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        },
    )?;
    w(out, "");

    // 2. RDMA WRITE: 2500 bytes from two SGEs, segmented into FIRST/MIDDLE/LAST at MTU 1024.
    let data: Vec<u8> = (0..WRITE_LEN).map(write_pattern).collect();
    ep.mr.write(4096, &data[..1000]).map_err(|e| e.to_string())?;
    ep.mr.write(12288, &data[1000..]).map_err(|e| e.to_string())?;
    let sg = [ep.mr.sge(4096, 1000), ep.mr.sge(12288, (WRITE_LEN - 1000) as u32)];
    run(
        out,
        "RDMA WRITE (one-sided)",
        &[
            "2500 bytes gathered from two places of our MR (two SGEs) into the target's memory.",
            "A message longer than the path MTU is cut into FIRST, MIDDLE(s) and LAST packets;",
            "only the FIRST carries the RETH, only the LAST asks for the ACK, and one ACK covers",
            "them all. The target program is not involved and gets no completion.",
        ],
        SendWr {
            wr_id: 2,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: raddr + WRITE_OFF as u64, rkey },
            ..Default::default()
        },
    )?;
    w(out, "  A successful WRITE completion means the bytes are in the target's memory.\n");

    // 3. RDMA READ of the target's string into our buffer.
    let sg = [ep.mr.sge(20000, READ_TEXT.len() as u32)];
    let wc = run(
        out,
        "RDMA READ (one-sided)",
        &[
            "One request packet with a RETH and no data; the target's NIC answers from its memory",
            "with a READ RESPONSE that carries the PSN of the request (a READ longer than the MTU",
            "gets one response packet, and one PSN, per MTU) and acknowledges it.",
        ],
        SendWr {
            wr_id: 3,
            sg_list: &sg,
            opcode: WrOpcode::RdmaRead,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: raddr + READ_OFF as u64, rkey },
            ..Default::default()
        },
    )?;
    let got = ep.mr.read_vec(20000, wc.byte_len as usize).map_err(|e| e.to_string())?;
    w(out, &format!("  bytes that landed here: {:?}\n", printable(&got)));
    if got != READ_TEXT {
        return Err("RDMA READ returned the wrong bytes".into());
    }

    // 4. Compare-and-swap: 7 -> 42.
    let sg = [ep.mr.sge(24000, 8)];
    run(
        out,
        "ATOMIC COMPARE-AND-SWAP (one-sided)",
        &[
            "If the 8-byte counter in the target's memory is 7, make it 42. The target's NIC does",
            "the compare and the write as one step, and the original value comes back in an",
            "ATOMIC ACKNOWLEDGE, into our buffer.",
        ],
        SendWr {
            wr_id: 4,
            sg_list: &sg,
            opcode: WrOpcode::AtomicCmpAndSwp,
            send_flags: SendFlags::SIGNALED,
            atomic: AtomicTarget {
                remote_addr: raddr + ATOMIC_OFF as u64,
                rkey,
                compare_add: 7,
                swap: 42,
            },
            ..Default::default()
        },
    )?;
    let orig = ep.mr.read_u64(24000).map_err(|e| e.to_string())?;
    w(
        out,
        &format!("  original value returned: {orig}; it matched 7, so the counter now holds 42\n"),
    );
    if orig != 7 {
        return Err(format!("compare-and-swap returned {orig}, expected 7"));
    }

    // 5. Fetch-and-add: +8.
    let sg = [ep.mr.sge(24008, 8)];
    run(
        out,
        "ATOMIC FETCH-AND-ADD (one-sided)",
        &["Add 8 to the target's counter; the value before the add comes back."],
        SendWr {
            wr_id: 5,
            sg_list: &sg,
            opcode: WrOpcode::AtomicFetchAndAdd,
            send_flags: SendFlags::SIGNALED,
            atomic: AtomicTarget {
                remote_addr: raddr + ATOMIC_OFF as u64,
                rkey,
                compare_add: 8,
                swap: 0,
            },
            ..Default::default()
        },
    )?;
    let before = ep.mr.read_u64(24008).map_err(|e| e.to_string())?;
    w(out, &format!("  value before the add: {before}, so the counter is now {}", before + 8));
    if before != 42 {
        return Err(format!("fetch-and-add returned {before}, expected 42"));
    }

    // The RDMA READ again, unnarrated: the time of an operation once the target's NIC thread
    // is awake, beside the first operation's (cold).
    if let Some(r) = &rec {
        r.note("the RDMA READ again, timed warm (beside the cold first operation)");
    }
    let sg = [ep.mr.sge(20000, READ_TEXT.len() as u32)];
    let t0 = Instant::now();
    ep.qp
        .post_send(&[SendWr {
            wr_id: 6,
            sg_list: &sg,
            opcode: WrOpcode::RdmaRead,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: raddr + READ_OFF as u64, rkey },
            ..Default::default()
        }])
        .map_err(|e| e.to_string())?;
    let wc = ep.cq.poll_n(1, WAIT).map_err(|e| e.to_string())?;
    let warm = t0.elapsed();
    if let Some(r) = &rec {
        r.cqe(&wc[0]);
    }
    if wc[0].status != WcStatus::Success {
        return Err(format!("the RDMA READ again failed: {}", wc[0].status));
    }

    target.peer.send_line("DONE")?;
    w(out, "\n== What the target saw, once the initiator woke it up (its program did nothing until now):");
    let mut seen_cpu = false;
    loop {
        let l = target.peer.recv_line(HANDSHAKE)?;
        if l == "BYE" {
            break;
        }
        w(out, &format!("  {l}"));
        if let Some(r) = &rec {
            r.target_line(&l);
        }
        if l.starts_with("target memory [atomic counter]") && !l.ends_with(" 50") {
            return Err(format!("the target's counter is wrong: {l}"));
        }
        if l.starts_with("target memory [recv buffer]") && !l.contains("Hello from softverbs0!") {
            return Err(format!("the SEND did not land: {l}"));
        }
        if l.starts_with("target CPU while") {
            seen_cpu = true;
        }
        if l.starts_with("target memory [+1024") && !l.ends_with("as sent") {
            return Err(format!("the WRITE did not land: {l}"));
        }
    }
    if !seen_cpu {
        return Err("the target did not report its threads' CPU time".into());
    }
    w(
        out,
        "  Its only completion is the SEND's: wr_id 100 names the receive it posted, src_qp and \
         slid\n  the sending QP and port. The WRITE and the atomics changed its memory without one,\n  \
         and without its program, as its threads' CPU times above show.",
    );
    print_measurements(out, &measured, tap_soft.is_some(), warm);
    w(out, "\nAll five operations completed with the right data.");
    Ok(())
}

fn print_measurements(out: &mut dyn Write, measured: &[Measured], wire: bool, warm: Duration) {
    w(out, "\n== Measurements (each operation once, wall-clock time from post to completion):");
    w(out, "   operation                              data  packets out/in  datagram bytes        time");
    for m in measured {
        let packets = if wire { format!("{} / {}", m.sent, m.received) } else { "-".into() };
        let bytes = if wire { m.wire_bytes.to_string() } else { "-".into() };
        w(
            out,
            &format!(
                "   {:<36} {:>6} B  {:>14}  {:>14}  {:>8.1} us",
                m.what,
                m.data_bytes,
                packets,
                bytes,
                m.took.as_secs_f64() * 1e6
            ),
        );
    }
    let spin_us = DEFAULT_SPIN.as_micros();
    let standby_us = DEFAULT_STANDBY.as_micros();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let cold = measured.first().map_or(0.0, |m| us(m.took));
    let note = [
        &format!("Single samples, so they vary from run to run. The first operation ({cold:.1} us) is"),
        "the cold one: once the connection was set up, the target's NIC thread stood by, asleep",
        &format!("for up to its standby interval ({standby_us} us by default, SOFTVERBS_STANDBY_US) in case the"),
        "target program called in again; the program blocked in read() instead, so the NIC thread",
        "took over only when that interval ended (the first datagram also mapped the target's",
        &format!("inbox). Warm, the NIC thread spins {spin_us} us after its last work, then parks on its"),
        &format!("doorbell, which the sender rings: the RDMA READ again took {:.1} us. On a busy", us(warm)),
        "machine the scheduler can add milliseconds. Latency and bandwidth measured properly:",
        "softverbs perf lat and softverbs perf bw (docs/performance.md).",
    ];
    for l in note {
        w(out, &format!("   {l}"));
    }
}
