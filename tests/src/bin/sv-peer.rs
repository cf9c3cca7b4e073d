//! `sv-peer`: the other process of the multi-process tests. It opens `softverbs0` on the
//! shared-memory fabric given on its command line and speaks a line protocol with the test on
//! stdin/stdout (diagnostics go to stderr). Modes:
//!
//! - `target`: an RC endpoint whose MR holds the seed's pattern; prints
//!   `INFO <qpinfo> <addr> <rkey>`, reads the initiator's `INFO`, connects, prints `READY`,
//!   then blocks in `read()` on stdin, making no verbs call, until `DONE`; then prints
//!   `CHECKSUM <fnv1a of the MR>`, `COUNTERS <hex>...` and `BYE`.
//! - `echo`: prints `INFO`, reads `INFO`, connects, prints `READY`, then answers each of
//!   `--iters` pings with its pong (checking every completion field), prints `ECHOED <n>`,
//!   waits for `DONE` and prints `BYE`.
//! - `hold`: opens the device with a full set of resources, prints `HOLD <lid> <pid>`, and
//!   exits 0 on `EXIT` (nonzero if stdin closes first).
//! - `verbs`: serves verbs calls for the test ([`softverbs_tests::remote`]): prints
//!   `VERBS <device>`, then runs each request line on its device until `BYE`.
//!
//! Every error exits nonzero with a message; every wait is bounded; a closed stdin (the test
//! died) ends the process; a watchdog ends it after `--deadline-secs` whatever it is doing.
//! All verbs resources are dropped before the process exits, so its inbox segment goes away,
//! unless `--exit-holding` asks it to exit with everything open, as many C programs do.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nic_model::engine::{slot_of_gid, GID_INDEX_IPV4};
use nic_model::soft::Soft;
use softverbs_sim::conn::{self, ConnOpts, Endpoint};
use softverbs_sim::peer::Parent;
use softverbs_tests::remote;
use softverbs_tests::*;
use verbs_api::{
    Context, Mtu, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

const USAGE: &str = "usage: sv-peer <target|echo|hold|verbs> <fabric-dir> [--seed N] [--psn N] \
                     [--mtu N] [--mr-len N] [--iters N] [--deadline-secs N] [--exit-at-once] [--exit-holding]";

/// The bound on any single wait for a completion.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
struct Opts {
    mode: String,
    dir: PathBuf,
    seed: u64,
    psn: u32,
    mtu: Mtu,
    mr_len: usize,
    iters: u64,
    deadline: Duration,
    /// Exit as soon as the resources are dropped, without waiting for the NIC thread to
    /// remove the inbox (see `wait_inbox_gone`).
    exit_at_once: bool,
    /// Exit the process as soon as the mode ends, its device and everything else still open
    /// (as a C program that returns from `main` without closing anything).
    exit_holding: bool,
}

fn parse_num(flag: &str, v: Option<&String>) -> Result<u64, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|e| format!("{flag} {v:?}: {e}"))
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mode = args.first().ok_or("missing mode")?.clone();
        if !matches!(mode.as_str(), "target" | "echo" | "hold" | "verbs") {
            return Err(format!("unknown mode {mode:?}"));
        }
        let dir = PathBuf::from(args.get(1).ok_or("missing fabric dir")?);
        let mut o = Opts {
            mode,
            dir,
            seed: 1,
            psn: 0x8000,
            mtu: conn_opts().mtu,
            mr_len: TARGET_MR_LEN,
            iters: 1000,
            deadline: Duration::from_secs(120),
            exit_at_once: false,
            exit_holding: false,
        };
        let mut it = args[2..].iter();
        while let Some(flag) = it.next() {
            match flag.as_str() {
                "--seed" => o.seed = parse_num(flag, it.next())?,
                "--psn" => {
                    o.psn = u32::try_from(parse_num(flag, it.next())?)
                        .ok()
                        .filter(|p| *p <= 0xFF_FFFF)
                        .ok_or("--psn must fit in 24 bits")?
                }
                "--mtu" => {
                    let v = parse_num(flag, it.next())?;
                    o.mtu = u32::try_from(v)
                        .ok()
                        .and_then(Mtu::from_bytes)
                        .ok_or_else(|| format!("--mtu {v}: not 256, 512, 1024, 2048 or 4096"))?
                }
                "--mr-len" => {
                    o.mr_len = usize::try_from(parse_num(flag, it.next())?)
                        .map_err(|e| format!("--mr-len: {e}"))?
                }
                "--iters" => o.iters = parse_num(flag, it.next())?,
                "--deadline-secs" => o.deadline = Duration::from_secs(parse_num(flag, it.next())?),
                "--exit-at-once" => o.exit_at_once = true,
                "--exit-holding" => o.exit_holding = true,
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if o.mr_len < 2 * COUNTER_AREA_LEN {
            return Err(format!("--mr-len {} is smaller than two counter areas", o.mr_len));
        }
        Ok(o)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Opts::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sv-peer: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    start_watchdog(opts.mode.clone(), opts.deadline);
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sv-peer {} (pid {}): {e}", opts.mode, std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// Ends the process after `deadline`, whatever the main thread is blocked in.
fn start_watchdog(mode: String, deadline: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        eprintln!("sv-peer {mode}: watchdog: still running after {deadline:?}; exiting");
        std::process::exit(3);
    });
}

/// Where the port of `ctx` sits in the fabric (its inbox's slot), from its IPv4 GID.
fn fabric_slot(ctx: &Context) -> Result<u16, String> {
    let gid = ctx.query_gid(1, GID_INDEX_IPV4).map_err(|e| e.to_string())?;
    slot_of_gid(&gid).ok_or_else(|| format!("GID {gid} names no port of the fabric"))
}

/// Opens the device, runs the mode, and drops every verbs resource before returning.
fn run(o: &Opts) -> Result<(), String> {
    let soft = Soft::shared_memory(Some(&o.dir)).map_err(|e| format!("opening the fabric: {e}"))?;
    let fabric = soft.fabric().expect("a shared-memory Soft has a fabric").clone();
    let (result, slot) = {
        let ctx = soft.open("softverbs0").map_err(|e| format!("opening softverbs0: {e}"))?;
        let slot = fabric_slot(&ctx)?;
        // Blocking reads on stdin: a closed stdin (the test died) ends the mode.
        let r = match o.mode.as_str() {
            "target" => target(&ctx, o, &mut Parent::stdio()),
            "echo" => echo(&ctx, o, &mut Parent::stdio()),
            "hold" => hold(&ctx, &mut Parent::stdio()),
            "verbs" => remote::serve(&ctx, &mut std::io::stdin().lock(), &mut std::io::stdout()),
            _ => unreachable!("modes are checked when parsing"),
        };
        if o.exit_holding {
            std::process::exit(if r.is_ok() { 0 } else { 1 });
        }
        (r, slot)
        // ctx and everything the mode created are dropped here.
    };
    drop(soft);
    if !o.exit_at_once {
        wait_inbox_gone(&fabric.inbox_path(slot))?;
    }
    result
}

/// Dropping the last handle of a device joins its NIC thread, which removes the inbox; but when
/// the NIC thread itself holds the last reference at that moment (it upgrades one for every
/// progress round), nobody waits for it, and a process that exits at once can leave the file
/// behind. Wait (bounded) until it is gone.
fn wait_inbox_gone(path: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while path.exists() {
        if Instant::now() >= deadline {
            return Err(format!("{} still exists 5 s after closing the device", path.display()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn err(e: verbs_api::Error) -> String {
    e.to_string()
}

fn target(ctx: &Context, o: &Opts, io: &mut Parent) -> Result<(), String> {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ep = Endpoint::new(ctx, QpType::Rc, cap, 16, o.mr_len).map_err(err)?;
    let mut chunk = vec![0u8; 64 << 10];
    for off in (0..o.mr_len).step_by(chunk.len()) {
        let n = chunk.len().min(o.mr_len - off);
        pattern_fill(o.seed, off, &mut chunk[..n]);
        ep.mr.write(off, &chunk[..n]).map_err(err)?;
    }
    let info = ep.info(o.psn).map_err(err)?;
    let (remote, _) = io.swap_info(&info, Some((ep.mr.addr(), ep.mr.rkey())))?;
    let opts = ConnOpts { mtu: o.mtu, ..conn_opts() };
    conn::connect(&ep.qp, o.psn, &remote, &opts).map_err(err)?;
    io.say("READY")?;
    // From here until DONE this program only sleeps in read(); the NIC thread serves the peer.
    io.expect_exactly("DONE")?;
    let state = ep.qp.state().map_err(err)?;
    if state != QpState::Rts {
        return Err(format!("the target QP is in {state} after the run, expected RTS"));
    }
    let mut wc = [WorkCompletion::default(); 4];
    let n = ep.cq.poll(&mut wc).map_err(err)?;
    if n != 0 {
        return Err(format!("one-sided operations produced target completions: {:?}", &wc[..n]));
    }
    let mut h = FNV_OFFSET;
    for off in (0..o.mr_len).step_by(chunk.len()) {
        let n = chunk.len().min(o.mr_len - off);
        ep.mr.read(off, &mut chunk[..n]).map_err(err)?;
        h = fnv1a_update(h, &chunk[..n]);
    }
    io.say(&format!("CHECKSUM {h:016x}"))?;
    let mut counters = String::from("COUNTERS");
    for i in 0..COUNTERS {
        let v = ep.mr.read_u64(counter_offset(o.mr_len, i)).map_err(err)?;
        counters.push_str(&format!(" {v:x}"));
    }
    io.say(&counters)?;
    io.say("BYE")
}

/// Polls one completion, bounded by [`WAIT`].
fn one_wc(ep: &Endpoint, what: &str) -> Result<WorkCompletion, String> {
    let wcs = ep.cq.poll_n(1, WAIT).map_err(|e| format!("waiting for {what}: {e}"))?;
    Ok(wcs[0])
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

const RECV_OFF: usize = 0;
const RECV_LEN: usize = 2 * PING_MAX_LEN;
const SEND_OFF: usize = 4096;
const RECV_WR_BASE: u64 = 1 << 32;
const SEND_WR_BASE: u64 = 2 << 32;

fn echo(ctx: &Context, o: &Opts, io: &mut Parent) -> Result<(), String> {
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: PING_MAX_LEN as u32,
    };
    let ep = Endpoint::new(ctx, QpType::Rc, cap, 32, 8192).map_err(err)?;
    let me = ep.info(o.psn).map_err(err)?;
    let (remote, _) = io.swap_info(&me, None)?;
    conn::connect(&ep.qp, o.psn, &remote, &conn_opts()).map_err(err)?;
    let post_recv = |i: u64| {
        let sge = [ep.mr.sge(RECV_OFF, RECV_LEN as u32)];
        ep.qp.post_recv(&[RecvWr { wr_id: RECV_WR_BASE + i, sg_list: &sge }]).map_err(err)
    };
    post_recv(0)?;
    io.say("READY")?;
    for i in 0..o.iters {
        let ping = ping_message(o.seed, i);
        let imm = ping_imm(i);
        let wc = one_wc(&ep, &format!("ping {i}"))?;
        // SEND_WITH_IMM also completes as IBV_WC_RECV, with IBV_WC_WITH_IMM.
        let expect_op = WcOpcode::Recv;
        check(
            wc.wr_id == RECV_WR_BASE + i
                && wc.status == WcStatus::Success
                && wc.opcode == expect_op
                && wc.byte_len as usize == ping.len()
                && wc.qp_num == me.qpn
                && wc.src_qp == remote.qpn
                && wc.slid == remote.lid
                && wc.wc_flags.contains(WcFlags::WITH_IMM) == imm.is_some()
                && imm.is_none_or(|v| wc.imm_data == v),
            || {
                format!(
                    "ping {i}: receive completion {wc:?}, expected wr_id {:#x}, success, \
                     {expect_op:?}, byte_len {}, qp_num {:#x}, src_qp {:#x}, slid {}, imm {imm:?}",
                    RECV_WR_BASE + i,
                    ping.len(),
                    me.qpn,
                    remote.qpn,
                    remote.lid
                )
            },
        )?;
        let got = ep.mr.read_vec(RECV_OFF, ping.len()).map_err(err)?;
        check(got == ping, || format!("ping {i}: received {got:02x?}, expected {ping:02x?}"))?;
        post_recv(i + 1)?;
        let pong = pong_message(i, &ping);
        ep.mr.write(SEND_OFF, &pong).map_err(err)?;
        let sge = [ep.mr.sge(SEND_OFF, pong.len() as u32)];
        let inline = i % 3 == 0 && pong.len() <= PING_MAX_LEN;
        let wr = SendWr {
            wr_id: SEND_WR_BASE + i,
            sg_list: &sge,
            opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
            send_flags: if inline {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::SIGNALED
            },
            imm_data: imm.map_or(0, |v| !v),
            ..Default::default()
        };
        ep.qp.post_send(&[wr]).map_err(err)?;
        let wc = one_wc(&ep, &format!("pong {i}"))?;
        check(
            wc.wr_id == SEND_WR_BASE + i
                && wc.status == WcStatus::Success
                && wc.opcode == WcOpcode::Send
                && wc.qp_num == me.qpn,
            || format!("pong {i}: send completion {wc:?}"),
        )?;
    }
    io.say(&format!("ECHOED {}", o.iters))?;
    io.expect_exactly("DONE")?;
    io.say("BYE")
}

fn hold(ctx: &Context, io: &mut Parent) -> Result<(), String> {
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ep = Endpoint::new(ctx, QpType::Rc, cap, 8, 4096).map_err(err)?;
    io.say(&format!("HOLD {} {}", fabric_slot(ctx)?, std::process::id()))?;
    io.expect_exactly("EXIT")?;
    drop(ep);
    Ok(())
}
