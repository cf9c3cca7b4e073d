//! `softverbs demo --break KIND`: the failure drills. Each is a live two-process run (the
//! target is a second process of this binary, as in the demo) that breaks one thing on purpose
//! and shows what carries the failure: the packets on the wire, with each NAK's AETH syndrome
//! and each RNR NAK's timer named, the silence and the retransmissions of a dead peer; both
//! sides' work completions, the async events and the flushed work requests; then why it failed
//! and how a real program avoids it. Everything printed is read from the run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nic_model::packet::{self, rnr_timer_ns, AethKind, NakCode};
use nic_model::soft::TapDir;
use softverbs_sim::peer::{Parent, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};
use verbs_api::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventType, Context, Mtu, QpAttr, QpAttrMask, QpCap,
    QpState, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode,
};

use super::ladder::Recorder;
use super::w;
use crate::cmd::words::describe_packet;
use crate::cmd::{self, CliError};

/// The drills, in the order `--break`'s error lists them.
pub const KINDS: [&str; 8] =
    ["rkey", "bounds", "small-recv", "no-recv", "rnr", "peer-dies", "no-gid", "cq-overrun"];

/// One failure drill (`demo --break KIND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// An RDMA WRITE with an rkey the target never handed out.
    Rkey,
    /// An RDMA WRITE that runs past the end of the target's memory region.
    Bounds,
    /// A SEND longer than the receive buffer the target posted.
    SmallRecv,
    /// A SEND to a target that posted no receive, with `rnr_retry` 0.
    NoRecv,
    /// A SEND that meets RNR NAKs until the target posts its receive late.
    Rnr,
    /// A SEND to a target process that was killed: silence, timeouts, retries.
    PeerDies,
    /// An address vector without a GRH on a RoCE port.
    NoGid,
    /// More completions than the target's CQ holds.
    CqOverrun,
}

impl Break {
    /// Parses a KIND; an unknown one's error lists the kinds (clap makes it exit 2).
    pub fn parse(s: &str) -> Result<Break, String> {
        Ok(match s {
            "rkey" => Break::Rkey,
            "bounds" => Break::Bounds,
            "small-recv" => Break::SmallRecv,
            "no-recv" => Break::NoRecv,
            "rnr" => Break::Rnr,
            "peer-dies" => Break::PeerDies,
            "no-gid" => Break::NoGid,
            "cq-overrun" => Break::CqOverrun,
            _ => return Err(format!("no drill {s:?}; the kinds are {}", KINDS.join(", "))),
        })
    }

    /// The KIND as typed.
    pub fn name(self) -> &'static str {
        match self {
            Break::Rkey => KINDS[0],
            Break::Bounds => KINDS[1],
            Break::SmallRecv => KINDS[2],
            Break::NoRecv => KINDS[3],
            Break::Rnr => KINDS[4],
            Break::PeerDies => KINDS[5],
            Break::NoGid => KINDS[6],
            Break::CqOverrun => KINDS[7],
        }
    }

    /// Both sides' connection attributes: ibv_rc_pingpong's, with the retry attributes each
    /// drill needs to stay short.
    fn conn_opts(self, addr: &PortAddress) -> Result<ConnOpts, String> {
        let mut o = ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() };
        match self {
            Break::NoRecv => o.rnr_retry = 0,
            // 1.28 ms between tries; 7 retries forever, so the late receive always lands.
            Break::Rnr => o.min_rnr_timer = 14,
            // 4.096 µs × 2^10 ≈ 4.2 ms per local ACK timeout, 3 retries.
            Break::PeerDies => {
                o.timeout = 10;
                o.retry_cnt = 3;
            }
            _ => {}
        }
        addr.conn_opts(o).map_err(|e| e.to_string())
    }

    /// The target's CQ depth.
    fn target_cq(self) -> u32 {
        if self == Break::CqOverrun {
            1
        } else {
            16
        }
    }
}

const MR_LEN: usize = 4096;
const INITIATOR_PSN: u32 = 0x00_1000;
const TARGET_PSN: u32 = 0x00_8000;
const WAIT: Duration = Duration::from_secs(10);
const HANDSHAKE: Duration = Duration::from_secs(30);
/// How long the target waits for async events that have not arrived yet.
const EVENT_WAIT: Duration = Duration::from_millis(200);

fn cap() -> QpCap {
    QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

/// `enum ibv_event_type`'s name of an async event.
pub fn event_name(t: AsyncEventType) -> &'static str {
    match t {
        AsyncEventType::CqErr => "IBV_EVENT_CQ_ERR",
        AsyncEventType::QpFatal => "IBV_EVENT_QP_FATAL",
        AsyncEventType::QpReqErr => "IBV_EVENT_QP_REQ_ERR",
        AsyncEventType::QpAccessErr => "IBV_EVENT_QP_ACCESS_ERR",
        AsyncEventType::CommEst => "IBV_EVENT_COMM_EST",
        AsyncEventType::SqDrained => "IBV_EVENT_SQ_DRAINED",
        AsyncEventType::QpLastWqeReached => "IBV_EVENT_QP_LAST_WQE_REACHED",
        AsyncEventType::SrqLimitReached => "IBV_EVENT_SRQ_LIMIT_REACHED",
        AsyncEventType::PortActive => "IBV_EVENT_PORT_ACTIVE",
        AsyncEventType::PortErr => "IBV_EVENT_PORT_ERR",
        AsyncEventType::DeviceFatal => "IBV_EVENT_DEVICE_FATAL",
    }
}

/// An async event: its type's name and what it is about.
fn describe_event(ev: &AsyncEvent) -> String {
    let about = match ev.element {
        AsyncElement::Qp(n) => format!("QP {n:#x}"),
        AsyncElement::Cq(n) => format!("CQ {n}"),
        AsyncElement::Srq(n) => format!("SRQ {n}"),
        AsyncElement::Port(n) => format!("port {n}"),
        AsyncElement::Device => "the device".into(),
    };
    format!("{} on {about}", event_name(ev.event_type))
}

fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "IBV_QPS_RESET",
        QpState::Init => "IBV_QPS_INIT",
        QpState::Rtr => "IBV_QPS_RTR",
        QpState::Rts => "IBV_QPS_RTS",
        QpState::Sqd => "IBV_QPS_SQD",
        QpState::Sqe => "IBV_QPS_SQE",
        QpState::Err => "IBV_QPS_ERR",
    }
}

/// One completion as a drill shows it: the status's `enum ibv_wc_status` name, number and
/// `ibv_wc_status_str` text, and `vendor_err`.
pub fn describe_status(wc: &WorkCompletion) -> String {
    let mut s = format!(
        "wr_id={} status={} ({}, \"{}\") vendor_err={:#x}",
        wc.wr_id,
        wc.status.name(),
        wc.status as u32,
        wc.status.as_str(),
        wc.vendor_err
    );
    if wc.status == WcStatus::Success {
        s.push_str(&format!(" opcode={} byte_len={}", wc.opcode.name(), wc.byte_len));
    }
    s
}

/// The name IBA gives a NAK code, as the AETH syndrome's meaning.
fn nak_meaning(c: NakCode) -> &'static str {
    match c {
        NakCode::PsnSequenceError => "PSN sequence error",
        NakCode::InvalidRequest => "invalid request",
        NakCode::RemoteAccessError => "remote access error",
        NakCode::RemoteOperationalError => "remote operational error",
        NakCode::InvalidRdRequest => "invalid RD request",
    }
}

/// The target side of a drill: set up as the drill needs, then report its completions, its
/// async events and its QP's state once the initiator says DONE.
pub fn run_target(
    ctx: &Context,
    kind: Break,
    gid_idx: Option<u32>,
    parent: &mut Parent<'_>,
) -> Result<(), String> {
    let ep = Endpoint::new(ctx, QpType::Rc, cap(), kind.target_cq(), MR_LEN)
        .map_err(|e| e.to_string())?;
    let addr = cmd::port_address(ctx, gid_idx).map_err(|e| e.message)?;
    let opts = kind.conn_opts(&addr)?;
    let recv_len = if kind == Break::SmallRecv { 16 } else { 256 };
    let posted = match kind {
        Break::Rkey | Break::Bounds | Break::SmallRecv => 1,
        Break::CqOverrun => 3,
        _ => 0,
    };
    let info = addr.qp_info(&ep.qp, TARGET_PSN);
    let (remote, _) = parent.swap_info(&info, Some((ep.mr.addr(), ep.mr.rkey())))?;
    conn::connect(&ep.qp, TARGET_PSN, &remote, &opts).map_err(|e| e.to_string())?;
    for i in 0..posted {
        let sge = [ep.mr.sge(i * 256, recv_len)];
        ep.qp
            .post_recv(&[RecvWr { wr_id: 100 + i as u64, sg_list: &sge }])
            .map_err(|e| e.to_string())?;
    }
    parent.say(&format!("target posted {posted} receive(s) of {recv_len} bytes"))?;
    parent.say("READY")?;
    if kind == Break::Rnr {
        parent.expect("POST")?;
        let sge = [ep.mr.sge(0, recv_len)];
        ep.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &sge }]).map_err(|e| e.to_string())?;
        parent.say("POSTED")?;
    }
    if kind == Break::PeerDies {
        // What the kernel does for a program that died: destroy its QP. Its NIC then drops
        // every packet for that QP number without a word.
        parent.expect("DIE")?;
        ep.qp.clone().destroy().map_err(|e| e.to_string())?;
        parent.say("DEAD")?;
        parent.expect("DONE")?;
        parent.say(&format!("target QP {:#x}: destroyed; its NIC answered nothing", info.qpn))?;
        return parent.say("BYE");
    }
    parent.expect("DONE")?;
    // Events first: each arrived when the NIC raised it; wait a little for a late one.
    loop {
        match ctx.get_async_event(Some(EVENT_WAIT)) {
            // The port's own PORT_ACTIVE at start-up is not the drill's.
            Ok(ev) if ev.event_type == AsyncEventType::PortActive => {}
            Ok(ev) => parent.say(&format!("target async event: {}", describe_event(&ev)))?,
            Err(_) => break,
        }
    }
    let mut buf = [WorkCompletion::default(); 8];
    loop {
        match ep.cq.poll(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                for wc in &buf[..n] {
                    parent.say(&format!("target CQ: {}", describe_status(wc)))?;
                }
            }
            Err(e) => {
                parent.say(&format!("target ibv_poll_cq: {e}"))?;
                break;
            }
        }
    }
    let state = ep.qp.state().map_err(|e| e.to_string())?;
    parent.say(&format!("target QP {:#x} state: {}", info.qpn, state_name(state)))?;
    parent.say("BYE")
}

/// The drill's target process (`demo --target --break KIND`).
pub fn target_main(
    fabric: Option<&Path>,
    ib_dev: &str,
    gid_idx: Option<u32>,
    kind: Break,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    cmd::register_fabric(fabric)?;
    let ctx = cmd::open_device(ib_dev)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut parent = Parent::new(&mut input, out);
    run_target(&ctx, kind, gid_idx, &mut parent)
        .map_err(|e| CliError::failed(format!("target: {e}")))
}

/// Datagrams the initiator's device sent and received, with when.
type TimedLog = Arc<Mutex<Vec<(Instant, TapDir, Vec<u8>)>>>;

/// Run drill `kind` from this process (the initiator), printing to `out`.
///
/// `ladder` and `svg` draw the drill's packet ladder after it, as `demo --ladder` / `--svg` do.
pub fn run(
    kind: Break,
    fabric: Option<&Path>,
    ib_dev: &str,
    gid_idx: Option<u32>,
    (ladder, svg, time_scale): (bool, Option<PathBuf>, bool),
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if verbs_api::backend_of(ib_dev) != "soft" {
        return Err(CliError::usage(format!(
            "--break needs a softverbs device (its packets are shown); {ib_dev} is not one"
        )));
    }
    let soft = cmd::shared_memory(fabric)?;
    cmd::register_backends(&soft);
    let ctx = cmd::open_device(ib_dev)?;
    let addr = cmd::port_address(&ctx, gid_idx)?;
    w(
        out,
        &format!(
            "softverbs demo --break {}: a failure on purpose, and what shows it.\n",
            kind.name()
        ),
    );
    if kind == Break::NoGid {
        no_gid(&ctx, &addr, out).map_err(CliError::failed)?;
        if ladder || svg.is_some() {
            w(out, "\nNo packet ladder: ibv_modify_qp refused the QP, so nothing was sent.");
        }
        return Ok(());
    }
    let rec = Recorder::new(ladder, svg, time_scale).map(Arc::new);
    if let Some(r) = &rec {
        r.rnr_retry(kind.conn_opts(&addr).map_err(CliError::failed)?.rnr_retry);
    }
    let dir = soft.fabric().expect("shared-memory soft has a fabric").dir().to_path_buf();
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failed(format!("finding this program: {e}")))?;
    let mut c = Command::new(exe);
    c.args(["demo", "--target", "--break", kind.name(), "-d", ib_dev, "--fabric"]).arg(&dir);
    if let Some(g) = gid_idx {
        c.args(["-g", &g.to_string()]);
    }
    let mut peer = Peer::spawn("the target process", c, Stderr::Inherit)?;
    let log: TimedLog = Arc::new(Mutex::new(Vec::new()));
    let tap_log = log.clone();
    let tap_rec = rec.clone();
    soft.set_tap(
        ib_dev,
        Some(Arc::new(move |dir, data| {
            if let Some(r) = &tap_rec {
                r.packet(dir, data);
            }
            tap_log.lock().unwrap_or_else(|e| e.into_inner()).push((
                Instant::now(),
                dir,
                data.to_vec(),
            ));
        })),
    )
    .map_err(|e| CliError::failed(e.to_string()))?;
    let result = initiator(kind, &ctx, &addr, ib_dev, (&log, rec.as_deref()), &mut peer, out);
    let _ = soft.set_tap(ib_dev, None);
    // Drawn whether or not the drill ran as planned, as the demo's is.
    let drawn = match &rec {
        Some(r) => r.draw(ib_dev, ib_dev, true, out),
        None => Ok(()),
    };
    result.map_err(CliError::failed)?;
    drawn?;
    peer.finish(WAIT).map_err(CliError::failed)
}

fn initiator(
    kind: Break,
    ctx: &Context,
    addr: &PortAddress,
    dev: &str,
    (log, rec): (&TimedLog, Option<&Recorder>),
    peer: &mut Peer,
    out: &mut dyn Write,
) -> Result<(), String> {
    let ep = Endpoint::new(ctx, QpType::Rc, cap(), 16, MR_LEN).map_err(|e| e.to_string())?;
    let opts = kind.conn_opts(addr)?;
    let my = addr.qp_info(&ep.qp, INITIATOR_PSN);
    let (target, target_mr) = peer.swap_info(&my, None, HANDSHAKE)?;
    let (raddr, rkey) = target_mr.ok_or("the target's INFO names no memory region")?;
    conn::connect(&ep.qp, INITIATOR_PSN, &target, &opts).map_err(|e| e.to_string())?;
    let posted = peer.expect_line("target posted", HANDSHAKE)?;
    peer.expect("READY", HANDSHAKE)?;
    w(
        out,
        &format!(
            "  initiator: {dev}, RC QP {:#x}; target: its own {dev} in pid {}, RC QP {:#x}",
            my.qpn,
            peer.pid().unwrap_or(0),
            target.qpn
        ),
    );
    w(
        out,
        &format!(
            "  the {}; its memory region: {MR_LEN} bytes at {raddr:#x}, rkey {rkey:#x}",
            posted
        ),
    );
    w(out, &format!("  retry attributes: timeout {} ({:.1} ms), retry_cnt {}, rnr_retry {}, target min_rnr_timer {} ({} us)", opts.timeout, timeout_us(opts.timeout) / 1000.0, opts.retry_cnt, opts.rnr_retry, opts.min_rnr_timer, rnr_timer_ns(opts.min_rnr_timer) / 1000));
    w(out, "");
    for l in intro(kind) {
        w(out, &format!("  {l}"));
    }
    ep.mr.write(0, &[0x5a; 256]).map_err(|e| e.to_string())?;
    let big = [ep.mr.sge(0, 64)];
    let small = [ep.mr.sge(0, 8)];
    let (wr, expect_wcs): (SendWr<'_>, usize) = match kind {
        Break::Rkey | Break::Bounds => {
            let (va, key) = if kind == Break::Rkey {
                (raddr, rkey ^ 0x5500)
            } else {
                (raddr + MR_LEN as u64 - 16, rkey)
            };
            let wr = SendWr {
                wr_id: 1,
                sg_list: &big,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget { remote_addr: va, rkey: key },
                ..Default::default()
            };
            (wr, 2)
        }
        Break::CqOverrun => (send(1, &small), 3),
        Break::Rnr => (send(1, &big), 1),
        _ => (send(1, &big), 2),
    };
    if kind == Break::PeerDies {
        peer.send_line("DIE")?;
        peer.expect("DEAD", HANDSHAKE)?;
    }
    // A second work request behind the first: what happens to the rest of a queue. Both in
    // one ibv_post_send, so the second is on the send queue before any answer to the first
    // can come back, however the machine schedules this thread.
    let mut wrs: Vec<SendWr<'_>> = vec![wr];
    match kind {
        Break::CqOverrun => wrs.extend([send(2, &small), send(3, &small)]),
        Break::Rnr => {}
        _ => wrs.push(send(2, &small)),
    }
    log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let t0 = Instant::now();
    ep.qp.post_send(&wrs).map_err(|e| e.to_string())?;
    if kind == Break::Rnr {
        wait_rnr_naks(log, 2)?;
        peer.send_line("POST")?;
        peer.expect("POSTED", HANDSHAKE)?;
    }
    let wcs = ep.cq.poll_n(expect_wcs, WAIT).map_err(|e| e.to_string())?;
    let elapsed = t0.elapsed();
    if let Some(r) = rec {
        wcs.iter().for_each(|wc| r.cqe(wc));
    }
    // The last packets (an ACK after the completion) are in the log by now or never.
    std::thread::sleep(Duration::from_millis(20));
    let entries = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    w(out, "\nOn the wire (time since ibv_post_send; -> sent by the initiator, <- received):");
    wire_lines(out, dev, t0, &entries, &opts);
    w(
        out,
        &format!(
            "\nThe initiator's completions ({:.2} ms after the post):",
            elapsed.as_secs_f64() * 1e3
        ),
    );
    for wc in &wcs {
        w(out, &format!("  initiator CQ: {}", describe_status(wc)));
    }
    let flushed = wcs.iter().filter(|c| c.status == WcStatus::WrFlushErr).count();
    if flushed > 0 {
        w(out, &format!("  {flushed} work request(s) behind the failed one flushed (IBV_WC_WR_FLUSH_ERR): the QP is in error, nothing behind the failure completes."));
    }
    let mut events = Vec::new();
    while let Ok(ev) = ctx.get_async_event(Some(Duration::from_millis(50))) {
        if ev.event_type != AsyncEventType::PortActive {
            events.push(ev);
        }
    }
    for ev in &events {
        w(out, &format!("  initiator async event: {}", describe_event(ev)));
    }
    if events.is_empty() {
        w(out, "  initiator async events: none");
    }
    let state = ep.qp.state().map_err(|e| e.to_string())?;
    w(out, &format!("  initiator QP {:#x} state: {}", my.qpn, state_name(state)));
    peer.send_line("DONE")?;
    w(out, "\nThe target, once told the run is over:");
    loop {
        let l = peer.recv_line(HANDSHAKE)?;
        if l == "BYE" {
            break;
        }
        if let Some(r) = rec {
            r.target_line(&l);
        }
        w(out, &format!("  {l}"));
    }
    w(out, "\nWhy, and how to fix it in a real program:");
    for l in why(kind) {
        w(out, &format!("  {l}"));
    }
    Ok(())
}

fn send<'a>(wr_id: u64, sg: &'a [verbs_api::Sge]) -> SendWr<'a> {
    SendWr {
        wr_id,
        sg_list: sg,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    }
}

/// The local ACK timeout of attribute `timeout`: 4.096 µs × 2^timeout, in µs.
fn timeout_us(timeout: u8) -> f64 {
    4.096 * f64::from(1u32 << timeout.min(31))
}

/// Waits (bounded) until the initiator has received `n` RNR NAKs.
fn wait_rnr_naks(log: &TimedLog, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, d, data)| {
                *d == TapDir::Rx
                    && aeth_kind(data).is_some_and(|k| matches!(k, AethKind::RnrNak { .. }))
            })
            .count();
        if seen >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{seen} of {n} RNR NAKs arrived within {WAIT:?}"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn aeth_kind(data: &[u8]) -> Option<AethKind> {
    packet::parse_any_datagram(data).ok().and_then(|(_, _, p)| p.aeth.map(|a| a.kind()))
}

/// Each packet, and under the ones that carry the failure what they mean: a NAK's syndrome, an
/// RNR NAK's timer, a retransmission after a local ACK timeout.
fn wire_lines(
    out: &mut dyn Write,
    dev: &str,
    t0: Instant,
    entries: &[(Instant, TapDir, Vec<u8>)],
    opts: &ConnOpts,
) {
    let mut sent: Vec<(u32, Instant)> = Vec::new();
    let (mut rnr_waits, mut rounds, mut rnr_naks) = (0, 0, 0);
    let mut last_rnr = t0;
    // Whether the initiator's QP went to the error state (an RNR NAK with no retry left).
    let mut dead = false;
    if entries.is_empty() {
        w(out, "  (nothing)");
    }
    for (at, dir, data) in entries {
        let arrow = if *dir == TapDir::Tx { "->" } else { "<-" };
        let ms = at.saturating_duration_since(t0).as_secs_f64() * 1e3;
        w(out, &format!("  wire {ms:>8.3} ms  {dev} {arrow} {}", describe_packet(data)));
        let Ok((_, _, p)) = packet::parse_any_datagram(data) else { continue };
        let psn = p.bth.psn.value();
        if *dir == TapDir::Tx {
            let first = sent.first().map(|(q, _)| *q);
            if let Some(&(_, last)) = sent.iter().rev().find(|(q, _)| *q == psn) {
                let gap = at.saturating_duration_since(last).as_secs_f64() * 1e3;
                if Some(psn) != first {
                    w(out, "           resent behind it: go-back-N resends every packet after the lost one");
                } else if rnr_waits > 0 {
                    rnr_waits -= 1;
                    rounds += 1;
                    let waited = at.saturating_duration_since(last_rnr).as_secs_f64() * 1e3;
                    w(out, &format!("           RNR retry {rounds} (rnr_retry {}): PSN {psn:#08x} again, {waited:.3} ms after the RNR NAK", opts.rnr_retry));
                } else {
                    rounds += 1;
                    w(out, &format!("           {gap:.3} ms of silence: the local ACK timeout (timeout {} = {:.1} ms) fired; retry {rounds} of retry_cnt {}", opts.timeout, timeout_us(opts.timeout) / 1000.0, opts.retry_cnt));
                }
            }
            sent.push((psn, *at));
            continue;
        }
        let Some(a) = p.aeth else { continue };
        match a.kind() {
            AethKind::Nak(c) => {
                w(
                    out,
                    &format!(
                        "           NAK: {} (syndrome {:#04x}) for PSN {psn:#08x}",
                        nak_meaning(c),
                        a.syndrome
                    ),
                );
                if c == NakCode::PsnSequenceError && rnr_naks > 0 {
                    // Why it follows an RNR NAK: the refused SEND was not taken, so the one
                    // behind it arrived out of order.
                    let then = match dead {
                        true => "the initiator's QP is already in IBV_QPS_ERR and ignores it",
                        false => "the initiator resends from that PSN after its RNR wait",
                    };
                    w(out, &format!("           the SEND behind reached the target while it still expected PSN {psn:#08x}, which it refused with the RNR NAK (a refused request is not taken, so the next PSN is out of order): the target NAKs it once, naming the PSN it expects; {then}"));
                }
            }
            AethKind::RnrNak { timer } => {
                rnr_naks += 1;
                last_rnr = *at;
                if opts.rnr_retry < 7 && rnr_naks > u32::from(opts.rnr_retry) {
                    dead = true;
                    w(
                        out,
                        &format!(
                            "           RNR NAK: receiver not ready, no receive posted (syndrome {:#04x}); no RNR retry left (rnr_retry {}): no wait, the QP goes to IBV_QPS_ERR and the SEND completes with IBV_WC_RNR_RETRY_EXC_ERR",
                            a.syndrome, opts.rnr_retry
                        ),
                    );
                    continue;
                }
                rnr_waits += 1;
                w(
                    out,
                    &format!(
                        "           RNR NAK: receiver not ready, no receive posted (syndrome {:#04x}); wait at least {} us (timer {timer}), then retry",
                        a.syndrome,
                        rnr_timer_ns(timer) / 1000
                    ),
                );
            }
            _ => {}
        }
    }
}

/// What the drill does, before it runs.
fn intro(kind: Break) -> &'static [&'static str] {
    match kind {
        Break::Rkey => &[
            "The initiator posts an RDMA WRITE of 64 bytes with an rkey the target never handed out,",
            "then a SEND behind it.",
        ],
        Break::Bounds => &[
            "The initiator posts an RDMA WRITE of 64 bytes that starts 16 bytes before the end of the",
            "target's memory region, then a SEND behind it.",
        ],
        Break::SmallRecv => &[
            "The target posted a receive of 16 bytes; the initiator SENDs 64, then a SEND behind it.",
        ],
        Break::NoRecv => &[
            "The target posted no receive; the initiator SENDs with rnr_retry 0, then a SEND behind it.",
        ],
        Break::Rnr => &[
            "The target posted no receive yet; the initiator SENDs with rnr_retry 7 (retry forever).",
            "After the second RNR NAK the target posts its receive, and the next retry lands.",
        ],
        Break::PeerDies => &[
            "Once connected, the target program destroys its QP, as the kernel does for a program that",
            "dies: its NIC drops every packet for that QP without an answer. The initiator then SENDs,",
            "then a SEND behind it.",
        ],
        Break::NoGid => &[],
        Break::CqOverrun => &[
            "The target's CQ holds 1 completion and the target does not poll it; it posted three",
            "receives, and the initiator SENDs three messages.",
        ],
    }
}

/// Why the drill failed and how a real program avoids it.
fn why(kind: Break) -> &'static [&'static str] {
    match kind {
        Break::Rkey => &[
            "The target's NIC checks every RDMA request's rkey against its memory regions; an unknown key is",
            "a remote access error, fatal to the connection on both sides. Send the peer the rkey of the MR",
            "(mr->rkey, not lkey) and never use it after ibv_dereg_mr.",
        ],
        Break::Bounds => &[
            "The rkey was right but [remote_addr, remote_addr + length) left the region: the same remote",
            "access error. Check offsets against the length the peer advertised before posting.",
        ],
        Break::SmallRecv => &[
            "A SEND must fit the receive it consumes: the target's receive completed with",
            "IBV_WC_LOC_LEN_ERR and the initiator got IBV_WC_REM_INV_REQ_ERR. Post receives at least as",
            "large as the largest message (agree on a maximum), or use RDMA WRITE into a sized buffer.",
        ],
        Break::NoRecv => &[
            "A SEND needs a posted receive; without one the target answers with an RNR NAK, and with",
            "rnr_retry 0 the first one is fatal (IBV_WC_RNR_RETRY_EXC_ERR). Post receives before the peer",
            "can send (before RTR), keep the receive queue filled, and set rnr_retry (7 = forever).",
        ],
        Break::Rnr => &[
            "Receiver not ready is flow control, not an error: the requester waits min_rnr_timer and",
            "tries again, up to rnr_retry times (7 = forever). Each wait costs latency, so post receives",
            "ahead of the traffic; a finite rnr_retry turns a stuck peer into IBV_WC_RNR_RETRY_EXC_ERR.",
        ],
        Break::PeerDies => &[
            "A dead peer answers nothing: the requester waits the local ACK timeout, resends, and after",
            "retry_cnt retries completes with IBV_WC_RETRY_EXC_ERR. Choose timeout and retry_cnt for how",
            "fast you must notice, and tear the connection down (or reconnect) on that status.",
        ],
        Break::NoGid => &[
            "RoCE ports have no LIDs: every address vector must carry a GRH (is_global = 1, dgid,",
            "sgid_index). Fill ah_attr.grh from the peer's GID (ibv_query_gid), as ibv_rc_pingpong -g does.",
        ],
        Break::CqOverrun => &[
            "A CQ holds at most cqe completions; one more overruns it (IBV_EVENT_CQ_ERR) and completions",
            "are lost. Size each CQ for every WR that can complete into it (send + receive queue depths)",
            "and poll it often enough.",
        ],
    }
}

/// no-gid: modify a QP to RTR with an address vector that has no GRH, then with one.
fn no_gid(ctx: &Context, addr: &PortAddress, out: &mut dyn Write) -> Result<(), String> {
    let ep = Endpoint::new(ctx, QpType::Rc, cap(), 16, MR_LEN).map_err(|e| e.to_string())?;
    let opts = Break::NoGid.conn_opts(addr)?;
    conn::to_init(&ep.qp, &opts).map_err(|e| e.to_string())?;
    let peer = QpInfo { lid: 0, qpn: ep.qp.qp_num(), psn: TARGET_PSN, gid: addr.gid };
    w(out, "  A QP in INIT is moved to RTR with an address vector that names the peer by LID only");
    w(out, "  (is_global 0, dlid 0), as InfiniBand programs do. The port is RoCE (Ethernet).");
    let mut av = conn::av_to(peer.gid, &opts);
    av.is_global = false;
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: av,
        path_mtu: opts.mtu,
        dest_qp_num: peer.qpn,
        rq_psn: peer.psn,
        max_dest_rd_atomic: opts.max_rd_atomic,
        min_rnr_timer: opts.min_rnr_timer,
        qp_access_flags: AccessFlags::empty(),
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    match ep.qp.modify(&attr, mask) {
        Ok(()) => return Err("ibv_modify_qp to RTR without a GRH succeeded on a RoCE port".into()),
        Err(e) => {
            w(
                out,
                &format!(
                    "\n  ibv_modify_qp({}) failed: {} (errno {}): {}",
                    mask.names(),
                    e.errno.name(),
                    e.errno.code(),
                    e.message
                ),
            );
        }
    }
    let state = ep.qp.state().map_err(|e| e.to_string())?;
    w(
        out,
        &format!(
            "  the QP stays in {}; nothing was sent (no packet without a path).",
            state_name(state)
        ),
    );
    conn::to_rtr(&ep.qp, &peer, &opts).map_err(|e| e.to_string())?;
    let state = ep.qp.state().map_err(|e| e.to_string())?;
    w(
        out,
        &format!(
            "  with is_global 1, dgid {} and sgid_index {}: ibv_modify_qp succeeded, QP in {}.",
            cmd::gid_ntop(&peer.gid),
            opts.sgid_index,
            state_name(state)
        ),
    );
    w(out, "\nWhy, and how to fix it in a real program:");
    for l in why(Break::NoGid) {
        w(out, &format!("  {l}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_name_round_trip() {
        for k in KINDS {
            assert_eq!(Break::parse(k).unwrap().name(), k);
        }
        let e = Break::parse("nope").unwrap_err();
        assert!(e.contains(&KINDS.join(", ")), "{e}");
        // ibv_wc_status numbering, which describe_status prints.
        assert_eq!(WcStatus::RemAccessErr as u32, 10);
        assert_eq!(WcStatus::WrFlushErr as u32, 5);
        assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
        assert!((timeout_us(10) - 4194.304).abs() < 1e-6);
    }
}
