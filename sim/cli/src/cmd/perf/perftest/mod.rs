//! perftest's eight verbs tests as `softverbs perf send_lat|send_bw|write_lat|write_bw|
//! read_lat|read_bw|atomic_lat|atomic_bw` (also spelled `send-lat` …): perftest's flags and
//! their meanings, its banner and result table, plus `--json` and `--plot`. The client process
//! (this one) starts the server as its peer process, exchanges QP and MR information over the
//! peer's stdin/stdout (where perftest uses a TCP socket), and per message size says `RUN`,
//! measures (`run.rs`, with `stamp.rs`'s per-post timestamps) and prints a row (`out.rs`).

mod out;
mod run;
mod stamp;

use std::path::PathBuf;
use std::time::Duration;

use softverbs_sim::peer::Parent;
use verbs_api::conn::{self, ConnOpts, PortAddress, QpInfo};
use verbs_api::{
    AhAttr, CompChannel, Context, LinkLayer, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType,
    UdTarget,
};

use super::runner::{run_dir, Launcher, HANDSHAKE};
use crate::cmd::{self, CliError};
use out::{AddrLine, BwRow, LatDurRow, LatRow, Progress, RULE};
use run::{AtomicType, Kind, Plan, Remote, Side, Verb};

/// perftest's largest message (`MAX_SIZE`, 8 MiB): the end of an `-a` sweep.
const MAX_SIZE: u32 = 1 << 23;
/// perftest's default CQ moderation (`DEF_CQ_MOD`): one signaled WR in this many.
const DEF_CQ_MOD: u32 = 100;
/// The most operations a run times one by one (`-n` x `-q`): 1 GiB of timestamps.
const MAX_KEPT: u64 = 1 << 27;
/// The most QPs `-q` takes here.
const MAX_QPS: u32 = 16;
const CLIENT_PSN: u32 = 0x00_1000;
const SERVER_PSN: u32 = 0x00_8000;

/// `-c`: the transport (perftest's `connection_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ConnType {
    /// Reliable connected.
    #[value(name = "RC")]
    Rc,
    /// Unreliable connected (send and write tests).
    #[value(name = "UC")]
    Uc,
    /// Unreliable datagram (perftest has it for send tests only).
    #[value(name = "UD")]
    Ud,
}

impl ConnType {
    fn name(self) -> &'static str {
        match self {
            ConnType::Rc => "RC",
            ConnType::Uc => "UC",
            ConnType::Ud => "UD",
        }
    }
}

/// Arguments of every perftest-style test (perftest's own flags, same letters and meanings).
#[derive(clap::Args, Debug, Clone)]
pub(super) struct PtArgs {
    /// Message size in bytes [default: 2 for latency, 65536 for bandwidth; atomics are 8].
    #[arg(short = 's', long = "size", value_parser = clap::value_parser!(u32).range(1..))]
    size: Option<u32>,
    /// Iterations (per QP) [default: 1000; 5000 for write_bw, as perftest].
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u64).range(5..))]
    iters: Option<u64>,
    /// Every size from 2 to 2^23 bytes in powers of two, one row each (atomics: 8 only).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// The device both processes open.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", default_value = "softverbs0")]
    ib_dev: String,
    /// The GID index both sides send from (perftest's -x); checked against ibv_query_gid.
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    gid_index: Option<u32>,
    /// Accepted for perftest's command lines: it keeps perftest going when the CPU frequency
    /// governor is not "performance"; softverbs times with the monotonic clock, not cycles.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Run each size for this many seconds instead of -n iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECONDS", value_parser = super::parse_seconds)]
    duration: Option<f64>,
    /// Number of QPs (bandwidth tests; latency tests use one, as perftest's).
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_QPS as i64))]
    qps: u32,
    /// Outstanding operations per QP [default: 128 for bandwidth, 1 for latency].
    #[arg(short = 't', long = "tx-depth", value_parser = clap::value_parser!(u32).range(1..=512))]
    tx_depth: Option<u32>,
    /// Connection type: RC, UC (send, write) or UD (send).
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC", ignore_case = true)]
    conn: ConnType,
    /// Bandwidth in Gb/sec (10^9 bits a second) instead of MiB/sec (2^20 bytes a second).
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// The atomic of the atomic tests.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value = "FETCH_AND_ADD")]
    atomic: AtomicType,
    /// Path MTU in bytes (256..4096), at most the port's active MTU [default: the active MTU].
    #[arg(short = 'm', long = "mtu")]
    mtu: Option<u32>,
    /// Messages up to this many bytes are posted inline (send and write tests) [default: the
    /// device's max_inline_data].
    #[arg(short = 'I', long = "inline_size")]
    inline: Option<u32>,
    /// QP timeout: an RC request unacknowledged for 4.096 us x 2^N is sent again (perftest's
    /// -u; its default, 14, is 67 ms: a debug build moving megabytes on a busy machine may
    /// need more).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
    qp_timeout: u8,
    /// Sleep on a completion channel instead of busy polling (not with write tests, as
    /// perftest).
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// One JSON object per size row on stdout instead of the banner and table.
    #[arg(long)]
    json: bool,
    /// With -a: draw bandwidth (or latency) against message size into FILE.svg: the y axis
    /// log10 where the values span a decade or more; a latency plot leaves out each size's
    /// first tenth of iterations (the warm-up), which the table keeps.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Fabric directory [default: $SOFTVERBS_FABRIC, else a fresh one under /dev/shm].
    #[arg(long, value_name = "DIR")]
    fabric: Option<PathBuf>,
    /// Write a pcap capture of the client's device to FILE (docs/guide.md, "Captures").
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Internal: run as the server (peer) process.
    #[arg(long, hide = true)]
    peer: bool,
}

/// perftest's eight tests, each a subcommand of `softverbs perf`.
#[derive(clap::Subcommand, Debug, Clone)]
pub(super) enum PtCmd {
    /// perftest's ib_send_lat: SEND ping-pong, half round trip.
    #[command(name = "send_lat", alias = "send-lat")]
    SendLat(PtArgs),
    /// perftest's ib_send_bw: SEND bandwidth, the server receiving.
    #[command(name = "send_bw", alias = "send-bw")]
    SendBw(PtArgs),
    /// perftest's ib_write_lat: RDMA WRITE ping-pong, each side polling its memory.
    #[command(name = "write_lat", alias = "write-lat")]
    WriteLat(PtArgs),
    /// perftest's ib_write_bw: RDMA WRITE bandwidth.
    ///
    /// Up to 1 MiB a WRITE goes by direct reach: one copy by the CPU straight into the peer's
    /// memory, no packet, so the figure is a memory copy's, not a wire's (SOFTVERBS_REACH=off
    /// sends packets through the emulated NICs; docs/learn/perftest.md, "Three bandwidths").
    #[command(name = "write_bw", alias = "write-bw")]
    WriteBw(PtArgs),
    /// perftest's ib_read_lat: one RDMA READ at a time, full round trip.
    #[command(name = "read_lat", alias = "read-lat")]
    ReadLat(PtArgs),
    /// perftest's ib_read_bw: RDMA READ bandwidth.
    #[command(name = "read_bw", alias = "read-bw")]
    ReadBw(PtArgs),
    /// perftest's ib_atomic_lat: one atomic at a time, full round trip.
    #[command(name = "atomic_lat", alias = "atomic-lat")]
    AtomicLat(PtArgs),
    /// perftest's ib_atomic_bw: atomic operations a second.
    #[command(name = "atomic_bw", alias = "atomic-bw")]
    AtomicBw(PtArgs),
}

impl PtCmd {
    /// The test and its arguments.
    fn test(&self) -> (Test, &PtArgs) {
        let (verb, kind, a) = match self {
            PtCmd::SendLat(a) => (Verb::Send, Kind::Lat, a),
            PtCmd::SendBw(a) => (Verb::Send, Kind::Bw, a),
            PtCmd::WriteLat(a) => (Verb::Write, Kind::Lat, a),
            PtCmd::WriteBw(a) => (Verb::Write, Kind::Bw, a),
            PtCmd::ReadLat(a) => (Verb::Read, Kind::Lat, a),
            PtCmd::ReadBw(a) => (Verb::Read, Kind::Bw, a),
            PtCmd::AtomicLat(a) => (Verb::Atomic, Kind::Lat, a),
            PtCmd::AtomicBw(a) => (Verb::Atomic, Kind::Bw, a),
        };
        (Test { verb, kind }, a)
    }

    /// Run the test: as the client, or with the hidden `--peer` as the server.
    pub(super) fn run(&self, me: &Launcher) -> Result<(), CliError> {
        match self.test() {
            (t, a) if a.peer => server(t, a),
            (t, a) => client(me, t, a),
        }
    }
}

/// The test: its verb and kind, and its names.
#[derive(Clone, Copy, Debug)]
struct Test {
    verb: Verb,
    kind: Kind,
}

impl Test {
    /// `write_bw` and the like: the subcommand.
    fn sub(self) -> String {
        let v = match self.verb {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        };
        format!("{v}_{}", if self.kind == Kind::Lat { "lat" } else { "bw" })
    }

    /// perftest's banner title (`testsStr`).
    fn title(self, a: &PtArgs) -> String {
        let v = match self.verb {
            Verb::Send => "Send".to_string(),
            Verb::Write => "RDMA_Write".to_string(),
            Verb::Read => "RDMA_Read".to_string(),
            Verb::Atomic => format!(
                "Atomic {}",
                if a.atomic == AtomicType::CmpAndSwap { "CMP_AND_SWAP" } else { "FETCH_AND_ADD" }
            ),
        };
        format!("{v} {} Test", if self.kind == Kind::Lat { "Latency" } else { "BW" })
    }

    /// perftest's `rtt_factor`: a ping-pong's gap is a round trip, reported halved.
    fn rtt_factor(self) -> f64 {
        match self.verb {
            Verb::Send | Verb::Write => 2.0,
            Verb::Read | Verb::Atomic => 1.0,
        }
    }
}

/// What the flags come to once checked against the test and the device.
struct Setup {
    sizes: Vec<u32>,
    iters: u64,
    tx_depth: u32,
    cq_mod: u32,
    inline: u32,
    mtu: Mtu,
    mr_len: usize,
}

/// Checks that need no device: each names the flag.
fn check_flags(t: Test, a: &PtArgs) -> Result<(), CliError> {
    let bad = |m: String| Err(CliError::usage(m));
    match (t.verb, a.conn) {
        (_, ConnType::Rc) | (Verb::Send, _) | (Verb::Write, ConnType::Uc) => {}
        (v, c) => {
            return bad(format!(
                "-c {}: perftest's {} tests run on {}",
                c.name(),
                t.sub().split('_').next().unwrap_or("these"),
                if v == Verb::Write { "RC or UC" } else { "RC only" }
            ))
        }
    }
    if t.kind == Kind::Lat && a.qps > 1 {
        return bad(format!("-q {}: latency tests use one QP, as perftest's", a.qps));
    }
    if a.events && t.verb == Verb::Write {
        return bad("-e: events are not available with the WRITE verb (as in perftest): \
                    the target of a WRITE gets no completion"
            .into());
    }
    if a.plot.is_some() && !a.all {
        return bad("--plot: draws an -a sweep; add -a".into());
    }
    if a.all && a.size.is_some() {
        return bad("-s: -a runs every size; give one or the other".into());
    }
    if a.duration.is_some() && a.iters.is_some() {
        return bad("-D: runs for a time instead of -n iterations; give one or the other".into());
    }
    if let (Verb::Atomic, Some(s)) = (t.verb, a.size) {
        if s != 8 {
            return bad(format!("-s {s}: atomics are 8 bytes"));
        }
    }
    if let Some(m) = a.mtu {
        if Mtu::from_bytes(m).is_none() {
            return bad(format!("-m {m}: an MTU is 256, 512, 1024, 2048 or 4096"));
        }
    }
    Ok(())
}

/// The flags checked against the device (message size, inline size, MTU).
fn setup(t: Test, a: &PtArgs, ctx: &Context) -> Result<Setup, CliError> {
    let name = ctx.device_name();
    let dev = ctx.query_device().map_err(|e| CliError::failed(format!("ibv_query_device: {e}")))?;
    let port = ctx.query_port(1).map_err(|e| CliError::failed(format!("ibv_query_port: {e}")))?;
    let sizes: Vec<u32> = match (t.verb, a.all, a.size) {
        (Verb::Atomic, _, _) => vec![8],
        (_, true, _) => {
            let mut top = MAX_SIZE.min(port.max_msg_sz);
            if a.conn == ConnType::Ud {
                top = top.min(a.mtu.unwrap_or(port.active_mtu.bytes()));
            }
            (1..=23).map(|e| 1u32 << e).filter(|&s| s <= top).collect()
        }
        (_, false, Some(s)) => vec![s],
        (_, false, None) => vec![if t.kind == Kind::Lat { 2 } else { 65536 }],
    };
    let largest = *sizes.iter().max().unwrap_or(&8);
    cmd::check_message_size(ctx, 1, "-s", u64::from(largest))?;
    let mtu = match a.mtu.and_then(Mtu::from_bytes) {
        Some(m) if m > port.active_mtu => {
            return Err(CliError::usage(format!(
                "-m {}: larger than {name} port 1's active MTU ({})",
                m.bytes(),
                port.active_mtu.bytes()
            )))
        }
        Some(m) => m,
        None => port.active_mtu,
    };
    if a.conn == ConnType::Ud && largest > mtu.bytes() {
        return Err(CliError::usage(format!(
            "-s {largest}: a UD message is at most one packet, the path MTU ({} bytes; -m)",
            mtu.bytes()
        )));
    }
    let inline = match (t.verb, a.inline) {
        (Verb::Read | Verb::Atomic, Some(i)) if i > 0 => {
            return Err(CliError::usage(format!("-I {i}: READ and atomics carry no inline data")))
        }
        (_, Some(i)) if i > dev.max_inline_data => {
            return Err(CliError::usage(format!(
                "-I {i}: larger than {name}'s max_inline_data ({})",
                dev.max_inline_data
            )))
        }
        (_, Some(i)) => i,
        (Verb::Send | Verb::Write, None) => dev.max_inline_data,
        _ => 0,
    };
    let tx_depth = a.tx_depth.unwrap_or(if t.kind == Kind::Lat { 1 } else { 128 });
    let iters: u64 =
        a.iters.unwrap_or(if t.verb == Verb::Write && t.kind == Kind::Bw { 5000 } else { 1000 });
    // Every post's time is kept (8 bytes each) for the statistics: bound that memory.
    if iters.saturating_mul(u64::from(a.qps)) > MAX_KEPT {
        return Err(CliError::usage(format!(
            "-n {iters}: more than {MAX_KEPT} operations (x -q {}), each of whose times is kept \
             for the statistics; use -D for long runs",
            a.qps
        )));
    }
    // Both halves must hold the largest message (and a UD receive's GRH); atomics need 8
    // aligned bytes.
    let mr_len = (2 * (largest as usize + 64)).max(4096);
    if mr_len as u64 > dev.max_mr_size {
        return Err(CliError::usage(format!(
            "-s {largest}: two messages do not fit {name}'s max_mr_size ({})",
            dev.max_mr_size
        )));
    }
    Ok(Setup { sizes, iters, tx_depth, cq_mod: DEF_CQ_MOD.min(tx_depth), inline, mtu, mr_len })
}

/// Open the device over `fabric` and make one side's objects: a CQ (on a channel with -e), the
/// QPs, one MR.
fn open_side(
    t: Test,
    a: &PtArgs,
    fabric: &std::path::Path,
) -> Result<(Context, PortAddress, Setup, Side), CliError> {
    let soft = cmd::register_fabric(Some(fabric))?;
    if let (Some(file), false) = (&a.pcap, a.peer) {
        soft.capture_to(Some(file), "--pcap");
    }
    let ctx = cmd::open_device(&a.ib_dev)?;
    let addr = PortAddress::of(&ctx, a.gid_index).map_err(|e| match a.gid_index {
        Some(i) if e.errno == verbs_api::Errno::Inval => {
            CliError::usage(format!("-x {i}: {}", e.message))
        }
        _ => CliError::failed(format!("querying port 1 of {}: {e}", ctx.device_name())),
    })?;
    let s = setup(t, a, &ctx)?;
    let e = |what: &str, err: verbs_api::Error| CliError::failed(format!("{what}: {err}"));
    let pd = ctx.alloc_pd().map_err(|x| e("ibv_alloc_pd", x))?;
    let channel: Option<CompChannel> = if a.events {
        Some(ctx.create_comp_channel().map_err(|x| e("ibv_create_comp_channel", x))?)
    } else {
        None
    };
    let depth = a.qps * (s.tx_depth.max(16) + run::RX_DEPTH) + 64;
    let cq = ctx.create_cq(depth, channel.as_ref(), 0).map_err(|x| e("ibv_create_cq", x))?;
    let cap = QpCap {
        max_send_wr: s.tx_depth.max(32) + 1,
        max_recv_wr: run::RX_DEPTH + 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: s.inline,
    };
    let qp_type = match a.conn {
        ConnType::Rc => QpType::Rc,
        ConnType::Uc => QpType::Uc,
        ConnType::Ud => QpType::Ud,
    };
    let mut qps = Vec::new();
    for _ in 0..a.qps {
        qps.push(conn::create_qp_on(&pd, &cq, qp_type, cap).map_err(|x| e("ibv_create_qp", x))?);
    }
    let mr = pd.reg_mr(s.mr_len, verbs_api::AccessFlags::all()).map_err(|x| e("ibv_reg_mr", x))?;
    Ok((ctx, addr, s, Side { pd, cq, channel, qps, mr, ud: Vec::new() }))
}

/// perftest's Q_Key for UD (`DEF_QKEY`).
const QKEY: u32 = 0x1111_1111;

/// Connect QP `q` of `side` towards `remote`, with the path MTU of `-m` and the timeout of `-u`
/// (`(mtu, timeout)`); a UD QP instead goes
/// to RTS with perftest's Q_Key and gets an address handle for `remote`.
fn connect(
    side: &mut Side,
    q: usize,
    addr: &PortAddress,
    (mtu, timeout): (Mtu, u8),
    psn: u32,
    remote: &QpInfo,
) -> Result<(), String> {
    let opts = addr
        .conn_opts(ConnOpts { mtu, timeout, ..ConnOpts::default() })
        .map_err(|e| e.to_string())?;
    let qp = &side.qps[q];
    if qp.qp_type() != QpType::Ud {
        return conn::connect(qp, psn, remote, &opts).map_err(|e| e.to_string());
    }
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qkey: QKEY,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    qp.modify(&init, mask).map_err(|e| format!("UD QP to INIT: {e}"))?;
    let rtr = QpAttr { qp_state: QpState::Rtr, ..Default::default() };
    qp.modify(&rtr, QpAttrMask::STATE).map_err(|e| format!("UD QP to RTR: {e}"))?;
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn: psn, ..Default::default() };
    qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .map_err(|e| format!("UD QP to RTS: {e}"))?;
    let ah = side
        .pd
        .create_ah(&AhAttr { dlid: remote.lid, ..conn::av_to(remote.gid, &opts) })
        .map_err(|e| format!("ibv_create_ah: {e}"))?;
    side.ud.push(UdTarget { ah, remote_qpn: remote.qpn, remote_qkey: QKEY });
    Ok(())
}

/// The flags the server process gets: the same test, device and QP shape.
fn peer_args(a: &PtArgs) -> Vec<String> {
    let mut v = vec!["-d".to_string(), a.ib_dev.clone(), "-q".into(), a.qps.to_string()];
    v.extend(["-c".into(), a.conn.name().into()]);
    if let Some(x) = a.gid_index {
        v.extend(["-x".into(), x.to_string()]);
    }
    if let Some(s) = a.size {
        v.extend(["-s".into(), s.to_string()]);
    }
    if a.all {
        v.push("-a".into());
    }
    if let Some(t) = a.tx_depth {
        v.extend(["-t".into(), t.to_string()]);
    }
    if let Some(m) = a.mtu {
        v.extend(["-m".into(), m.to_string()]);
    }
    if let Some(i) = a.inline {
        v.extend(["-I".into(), i.to_string()]);
    }
    if a.events {
        v.push("-e".into());
    }
    v.extend(["-u".into(), a.qp_timeout.to_string()]);
    // The server's own bounds on a size's run grow with the duration.
    if let Some(d) = a.duration {
        v.extend(["-D".into(), d.to_string()]);
    }
    v
}

fn plan(t: Test, a: &PtArgs, s: &Setup, size: u32) -> Plan {
    Plan {
        verb: t.verb,
        size,
        iters: if a.duration.is_some() { 0 } else { s.iters },
        duration: a.duration.map(Duration::from_secs_f64),
        tx_depth: s.tx_depth,
        cq_mod: s.cq_mod,
        inline: s.inline,
        atomic: a.atomic,
    }
}

/// A row of the table, whichever kind.
enum Row {
    Bw(BwRow),
    Lat(LatRow),
    LatDur(LatDurRow),
}

/// Run test `t` as the client: start the server, print the banner, one row per size.
fn client(me: &Launcher, t: Test, a: &PtArgs) -> Result<(), CliError> {
    check_flags(t, a)?;
    let dir = run_dir(a.fabric.as_deref())?;
    // Open the device first: a bad -d, -x, -s, -m or -I fails here, before a peer is started.
    let (ctx, addr, s, mut side) = open_side(t, a, dir.path())?;
    let mut args =
        vec![t.sub(), "--peer".into(), "--fabric".into(), dir.path().display().to_string()];
    args.extend(peer_args(a));
    let mut peer = softverbs_sim::peer::Peer::spawn(
        "the server process",
        me.command(&args)?,
        softverbs_sim::peer::Stderr::Inherit,
    )?;
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for q in 0..side.qps.len() {
        let info = addr.qp_info(&side.qps[q], CLIENT_PSN + q as u32);
        let (remote, mr) =
            peer.swap_info(&info, Some((side.mr.addr(), side.mr.rkey())), HANDSHAKE)?;
        let (raddr, rkey) = mr.ok_or("the server's INFO names no memory region")?;
        connect(&mut side, q, &addr, (s.mtu, a.qp_timeout), info.psn, &remote)?;
        mine.push(info);
        theirs.push((remote, raddr, rkey));
    }
    peer.expect("READY", HANDSHAKE)?;
    let port = ctx.query_port(1).map_err(|e| e.to_string())?;
    if !a.json {
        banner(t, a, &s, &ctx, &addr, port.link_layer)?;
        for info in &mine {
            addr_lines(t, "local", info, side.mr.rkey(), side.mr.addr())?;
        }
        for (remote, raddr, rkey) in &theirs {
            addr_lines(t, "remote", remote, *rkey, *raddr)?;
        }
        outln!("{RULE}");
        outln!("{}", header(t, a));
    }
    let remote = Remote { addr: theirs[0].1, rkey: theirs[0].2, half: (s.mr_len / 2) as u64 };
    if t.verb == Verb::Send && t.kind == Kind::Lat {
        run::post_receives(&side)?;
    }
    let mut progress = Progress::new();
    let mut plot = Vec::new();
    for (k, &size) in s.sizes.iter().enumerate() {
        let p = plan(t, a, &s, size);
        // A fresh receive area: a ping-pong's WRITE marks must not match an earlier size's.
        side.mr.write(side.half(), &vec![0u8; size as usize]).map_err(|e| e.to_string())?;
        peer.send_line(&format!("RUN {size} {}", p.iters))?;
        peer.expect("GO", HANDSHAKE)?;
        let nsizes = s.sizes.len();
        let mut tick = |done: u64| {
            progress.show(|| {
                format!("{}: {size} bytes ({}/{nsizes}), {done} operations", t.sub(), k + 1)
            })
        };
        let raw = match t.kind {
            Kind::Lat => run::client_lat(&side, p, remote, &mut tick)?,
            Kind::Bw => run::client_bw(&side, p, remote, &mut tick)?,
        };
        peer.send_line("END")?;
        let served: u64 = peer
            .expect("DONE", HANDSHAKE + p.duration.unwrap_or_default())?
            .trim()
            .parse()
            .map_err(|_| "the server's DONE line has no count")?;
        if t.verb == Verb::Send && t.kind == Kind::Bw && a.conn == ConnType::Rc && served != raw.ops
        {
            return Err(CliError::failed(format!(
                "{} SENDs completed but the server received {served}",
                raw.ops
            )));
        }
        let row = match (t.kind, a.duration) {
            (Kind::Bw, _) => Row::Bw(out::bw_row(
                size,
                raw.ops,
                raw.elapsed_ns,
                &raw.posted,
                &raw.completed,
                a.report_gbits,
            )),
            (Kind::Lat, Some(_)) => {
                Row::LatDur(LatDurRow::of(size, raw.ops, raw.elapsed_ns, t.rtt_factor()))
            }
            (Kind::Lat, None) => Row::Lat(
                out::lat_row(size, &raw.posted, t.rtt_factor())
                    .ok_or("too few iterations for latency statistics")?,
            ),
        };
        progress.clear();
        let conn = a.conn.name();
        match &row {
            Row::Bw(r) if a.json => outln!("{}", r.json(&t.sub(), conn, a.report_gbits)),
            Row::Bw(r) => outln!("{}", r.line()),
            Row::Lat(r) if a.json => outln!("{}", r.json(&t.sub(), conn)),
            Row::Lat(r) => outln!("{}", r.line()),
            Row::LatDur(r) if a.json => outln!("{}", r.json(&t.sub(), conn)),
            Row::LatDur(r) => outln!("{}", r.line()),
        }
        plot.push(match row {
            Row::Bw(r) => (size, r.avg),
            // The plot leaves out each size's first iterations (the warm-up: first touches of
            // the buffers, a cold NIC thread), which the table, as perftest's, keeps.
            Row::Lat(_) => {
                let warm = out::plot_warmup(raw.posted.len());
                let kept = out::lat_row(size, &raw.posted[warm..], t.rtt_factor());
                (size, kept.map_or(0.0, |r| r.t_typical))
            }
            Row::LatDur(r) => (size, r.t_avg),
        });
    }
    if !a.json {
        outln!("{RULE}");
    }
    peer.close_stdin();
    peer.finish(HANDSHAKE)?;
    if let Some(file) = &a.plot {
        let y = match (t.kind, a.report_gbits) {
            (Kind::Bw, false) => "BW average [MiB/sec]",
            (Kind::Bw, true) => "BW average [Gb/sec]",
            (Kind::Lat, _) if a.duration.is_some() => "t_avg [usec]",
            (Kind::Lat, _) => "t_typical [usec]",
        };
        let title = format!("softverbs perf {} ({}, {})", t.sub(), a.conn.name(), a.ib_dev);
        let note = match (t.kind, a.duration) {
            (Kind::Lat, None) => format!(
                "median of each size's iterations after its first {}% (the warm-up, left out)\n{}",
                100 / out::PLOT_WARMUP_DIVISOR,
                data_path(t)
            ),
            (Kind::Lat, Some(_)) | (Kind::Bw, _) => {
                format!("average over each size's run\n{}", data_path(t))
            }
        };
        std::fs::write(file, out::svg_plot(&title, &note, y, &plot))
            .map_err(|e| CliError::failed(format!("--plot {}: {e}", file.display())))?;
    }
    Ok(())
}

/// What produces this test's figures (a banner line perftest does not have): a WRITE, READ
/// or atomic by direct reach is one copy by the CPU straight into (or out of) the peer's
/// memory, no packet, so its bandwidth is a memory copy's; a SEND, or anything with
/// `SOFTVERBS_REACH` off, goes as packets through the emulated NICs.
fn data_path(t: Test) -> &'static str {
    match t.verb {
        Verb::Send => SEND_PATH,
        _ => one_sided_path(),
    }
}

/// How a SEND travels: always as packets.
pub(super) const SEND_PATH: &str =
    "packets through the emulated NICs (a SEND needs the peer's receive)";

/// How an RDMA WRITE, READ or atomic travels in this process: by direct reach unless
/// `SOFTVERBS_REACH` turns it off.
pub(super) fn one_sided_path() -> &'static str {
    if std::env::var("SOFTVERBS_REACH").is_ok_and(|v| v == "0" || v == "off") {
        "packets through the emulated NICs (SOFTVERBS_REACH off)"
    } else {
        "direct reach up to 1 MiB: the CPU copies straight into the peer's memory, no packet (SOFTVERBS_REACH=off: packets)"
    }
}

fn header(t: Test, a: &PtArgs) -> &'static str {
    match (t.kind, a.duration, a.report_gbits) {
        (Kind::Bw, _, false) => out::BW_HEADER,
        (Kind::Bw, _, true) => out::BW_HEADER_G,
        (Kind::Lat, Some(_), _) => out::LAT_DUR_HEADER,
        (Kind::Lat, None, _) => out::LAT_HEADER,
    }
}

/// perftest's `ctx_print_test_info`, with the lines that apply here.
fn banner(
    t: Test,
    a: &PtArgs,
    s: &Setup,
    ctx: &Context,
    addr: &PortAddress,
    link: LinkLayer,
) -> Result<(), CliError> {
    outln!("{RULE}");
    outln!("                    {}", t.title(a));
    if a.events {
        outln!(" Test with events. Using {}_comp0", a.ib_dev);
    }
    outln!(" Dual-port       : OFF\t\tDevice         : {}", ctx.device_name());
    outln!(" Number of qps   : {}\t\tTransport type : IB", a.qps);
    outln!(" Connection type : {}\t\tUsing SRQ      : OFF", a.conn.name());
    outln!(" TX depth        : {}", s.tx_depth);
    if t.verb == Verb::Send {
        outln!(" RX depth        : {}", run::RX_DEPTH);
    }
    if t.kind == Kind::Bw {
        outln!(" CQ Moderation   : {}", s.cq_mod);
    }
    outln!(" Mtu             : {}[B]", s.mtu.bytes());
    let link = match link {
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::InfiniBand => "IB",
    };
    outln!(" Link type       : {link}");
    outln!(" GID index       : {}", addr.gid_index);
    match t.verb {
        Verb::Send | Verb::Write => outln!(" Max inline data : {}[B]", s.inline),
        Verb::Read | Verb::Atomic => {
            outln!(" Outstand reads  : {}", ConnOpts::default().max_rd_atomic)
        }
    }
    outln!(" rdma_cm QPs\t : OFF");
    outln!(" Data ex. method : pipe to the server process (perftest: Ethernet, a TCP socket)");
    outln!(" Data path       : {}", data_path(t));
    outln!("{RULE}");
    Ok(())
}

/// One QP's address line and its GID line, as perftest prints each QP's.
fn addr_lines(t: Test, side: &str, info: &QpInfo, rkey: u32, vaddr: u64) -> Result<(), CliError> {
    let line = AddrLine {
        side,
        lid: info.lid,
        qpn: info.qpn,
        psn: info.psn,
        out_reads: (t.verb == Verb::Read).then_some(ConnOpts::default().max_rd_atomic),
        rdma: matches!(t.verb, Verb::Read | Verb::Write).then_some((rkey, vaddr)),
    };
    outln!("{}", line.render());
    outln!("{}", out::gid_line(&info.gid));
    Ok(())
}

/// Run test `t` as the server (the peer process): connect, then per `RUN` line serve one size.
fn server(t: Test, a: &PtArgs) -> Result<(), CliError> {
    let mut parent = Parent::stdio();
    let fabric = a.fabric.clone().ok_or("the server needs --fabric")?;
    let (_ctx, addr, s, mut side) = open_side(t, a, &fabric)?;
    let mut remote = None;
    for q in 0..side.qps.len() {
        let info = addr.qp_info(&side.qps[q], SERVER_PSN + q as u32);
        let (theirs, mr) = parent.swap_info(&info, Some((side.mr.addr(), side.mr.rkey())))?;
        let (raddr, rkey) = mr.ok_or("the client's INFO names no memory region")?;
        connect(&mut side, q, &addr, (s.mtu, a.qp_timeout), info.psn, &theirs)?;
        remote.get_or_insert(Remote { addr: raddr, rkey, half: (s.mr_len / 2) as u64 });
    }
    let remote = remote.ok_or("no QP")?;
    if t.verb == Verb::Send {
        run::post_receives(&side)?;
    }
    parent.say("READY")?;
    while let Some(line) = parent.line()? {
        let mut it = line.split_whitespace();
        if it.next() != Some("RUN") {
            continue;
        }
        let size: u32 =
            it.next().and_then(|x| x.parse().ok()).ok_or("a RUN line without a size")?;
        let iters: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let mut p = plan(t, a, &s, size);
        p.iters = iters;
        // A fresh receive area: a ping-pong's WRITE marks must not match an earlier size's.
        side.mr.write(side.half(), &vec![0u8; size as usize]).map_err(|e| e.to_string())?;
        parent.say("GO")?;
        let first = HANDSHAKE;
        let served = match (t.verb, t.kind) {
            (Verb::Send | Verb::Write, Kind::Lat) => run::peer_pingpong(&side, p, remote, first)?,
            (Verb::Send, Kind::Bw) => {
                // UC and UD may lose messages: count until the sender goes quiet.
                let expect = if a.conn == ConnType::Rc { iters * u64::from(a.qps) } else { 0 };
                run::peer_receive(&side, p, expect, first)?
            }
            // READ, WRITE and atomics need nothing of the target's CPU.
            _ => 0,
        };
        parent.expect_exactly("END")?;
        parent.say(&format!("DONE {served}"))?;
    }
    Ok(())
}
