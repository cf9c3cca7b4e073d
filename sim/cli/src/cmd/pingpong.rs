//! `softverbs pingpong [HOST]`: `ibv_rc_pingpong` on softverbs. Two processes exchange their
//! LID, QPN, PSN and GID over TCP, connect one RC QP each, and bounce a SIZE-byte SEND back
//! and forth ITERS times; each side prints the throughput and the time per round trip.
//!
//! It follows `ibv_rc_pingpong`'s protocol and loop (same options and defaults, same address
//! message, same "post the next send only when the previous send and a receive completed"
//! rule, same closing lines), with four additions: every wait is bounded (connect, accept, TCP
//! reads, completions), so a dead peer gives an error rather than a hang; the client retries
//! its TCP connect so it may be started before the server; a server started with `-p 0` takes
//! a free port and prints it; and after the test both sides exchange a final "done", so
//! neither destroys its QP while the other still expects ACKs (a peer that closed its socket,
//! as `ibv_rc_pingpong` does, is accepted there, so either side may be the real tool).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use verbs_api::conn::QpInfo;
use verbs_api::{
    AccessFlags, AhAttr, CompChannel, CompletionQueue, Context, Gid, LinkLayer, MemoryRegion, Mtu,
    QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendFlags, SendWr,
    WorkCompletion, WrOpcode,
};

use crate::cmd::{self, gid_ntop, CliError};

/// `wr_id` of receives, as in `ibv_rc_pingpong`.
const RECV_WRID: u64 = 1;
/// `wr_id` of sends.
const SEND_WRID: u64 = 2;
/// The address message: `"%04x:%06x:%06x:%s"` plus its NUL, `sizeof msg` in `ibv_rc_pingpong`.
const ADDR_MSG_LEN: usize = 52;
/// What each side sends when it is done, NUL included (`sizeof "done"`).
const DONE: &[u8; 5] = b"done\0";

/// The longest any one wait may be told to last: a day. Every wait is a deadline on the
/// clock, and a bound keeps `now + wait` from overflowing it.
const MAX_WAIT_SECS: u64 = 86_400;

/// Options of `softverbs pingpong` (those of `ibv_rc_pingpong`, plus the bounds on waiting).
#[derive(clap::Args, Debug, Clone)]
pub struct PingpongArgs {
    /// Connect to the server on HOST; without it, be the server.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// TCP port for exchanging the QP addresses (server: 0 takes a free one and prints it).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// The RDMA device: softverbsN, or a real NIC (mlx5_0, rxe0, ...) when built with rdma-sys.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", default_value = "softverbs0")]
    pub ib_dev: String,
    /// The device port.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,
    /// Bytes per message.
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub size: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: Mtu,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rx_depth: u32,
    /// Message exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Service level of the QP's path.
    #[arg(short = 'l', long = "sl", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..16))]
    pub sl: u8,
    /// Sleep on completion events instead of busy-polling the CQ.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Send this GID index's GID and address the peer by GID (is_global), as RoCE ports need:
    /// on softverbs 1 is the port's IPv4 GID (RoCE v2), 0 its IPv6 link-local one.
    #[arg(short = 'g', long = "gid-idx", value_name = "GID_INDEX")]
    pub gid_idx: Option<u32>,
    /// Client: keep retrying the TCP connect for this many seconds (at most a day).
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_SECS))]
    pub connect_timeout: u64,
    /// Server: wait this many seconds for a client (0: wait as long as it takes; at most a day).
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(0..=MAX_WAIT_SECS))]
    pub accept_timeout: u64,
    /// Longest wait for the peer once connected: each TCP read and each completion (at most
    /// a day).
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub timeout: u64,
    /// Write a pcap capture of this process's device (both directions of every datagram) to
    /// FILE; `{pid}` in the name stands for the process id (docs/guide.md, "Captures").
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Check every byte of every message: each side sends a pattern of its own for each
    /// message, from a buffer apart from the one it receives into, and the receiver compares
    /// (both sides need it; ibv_rc_pingpong's --chk looks at one byte a page).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
}

fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<u32>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("{s:?} is not a path MTU (256, 512, 1024, 2048 or 4096)"))
}

/// A first PSN nobody can predict across runs (`lrand48() & 0xffffff` seeded with pid and time
/// in `ibv_rc_pingpong`): splitmix64 of the clock and the pid.
fn initial_psn() -> u32 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z & 0x00ff_ffff) as u32
}

/// `"  local address:  LID 0x0001, QPN 0x000011, PSN 0x1a2b3c, GID ::"`.
fn address_line(which: &str, d: &QpInfo) -> String {
    format!(
        "  {which} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_ntop(&d.gid)
    )
}

/// The two closing lines, computed as `ibv_rc_pingpong` does (both directions' bytes).
pub fn summary(size: u32, iters: u32, elapsed: Duration) -> [String; 2] {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(size) * u64::from(iters) * 2;
    [
        format!(
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        ),
        format!(
            "{iters} iters in {:.2} seconds = {:.2} usec/iter",
            usec / 1e6,
            usec / iters as f64
        ),
    ]
}

/// Everything one side holds: `struct pingpong_context`.
struct PingpongCtx {
    ctx: Context,
    channel: Option<CompChannel>,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    size: u32,
    rx_depth: u32,
    send_flags: SendFlags,
    /// With `--chk`: this side's number in the pattern (0 server, 1 client); the send buffer
    /// is the MR's first `size` bytes, the receive buffer the next.
    chk: Option<u8>,
}

/// Byte `j` of message `index` that side `side` sends with `--chk`.
fn pattern(side: u8, index: u32, j: usize) -> u8 {
    let j = j as u32;
    (j.wrapping_mul(7) ^ (j >> 8))
        .wrapping_add(index.wrapping_mul(131))
        .wrapping_add(u32::from(side) * 29) as u8
}

impl PingpongCtx {
    /// `pp_init_ctx`: PD, MR, (channel), CQ, QP, and the QP in INIT.
    fn new(ctx: Context, a: &PingpongArgs) -> Result<PingpongCtx, CliError> {
        let fail = |what: &str, e: verbs_api::Error| CliError::failed(format!("{what}: {e}"));
        let pd = ctx.alloc_pd().map_err(|e| fail("Couldn't allocate PD", e))?;
        let chk = a.chk.then_some(u8::from(a.host.is_some()));
        let buffers = if chk.is_some() { 2 } else { 1 };
        let mr = pd
            .reg_mr(a.size as usize * buffers, AccessFlags::LOCAL_WRITE)
            .map_err(|e| fail("Couldn't register MR", e))?;
        // The buffer's initial contents, as ibv_rc_pingpong's memset.
        mr.write(0, &vec![0x7b; a.size as usize]).map_err(|e| fail("Couldn't fill the MR", e))?;
        let channel = if a.events {
            Some(
                ctx.create_comp_channel()
                    .map_err(|e| fail("Couldn't create completion channel", e))?,
            )
        } else {
            None
        };
        let cq = ctx
            .create_cq(a.rx_depth + 1, channel.as_ref(), 0)
            .map_err(|e| fail("Couldn't create CQ", e))?;
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: a.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| fail("Couldn't create QP", e))?;
        // Send inline when the device granted enough inline space (ibv_query_qp's cap).
        let (_, cap) = qp.query().map_err(|e| fail("Couldn't query QP", e))?;
        let mut send_flags = SendFlags::SIGNALED;
        if cap.max_inline_data >= a.size {
            send_flags |= SendFlags::INLINE;
        }
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: a.ib_port,
            qp_access_flags: AccessFlags::empty(),
            ..Default::default()
        };
        qp.modify(
            &init,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .map_err(|e| fail("Failed to modify QP to INIT", e))?;
        Ok(PingpongCtx {
            ctx,
            channel,
            cq,
            qp,
            mr,
            size: a.size,
            rx_depth: a.rx_depth,
            send_flags,
            chk,
        })
    }

    /// `pp_post_recv`: post up to `n` receives of the whole buffer; returns how many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        let at = if self.chk.is_some() { self.size as usize } else { 0 };
        let sge = [self.mr.sge(at, self.size)];
        let wr = [RecvWr { wr_id: RECV_WRID, sg_list: &sge }];
        (0..n).take_while(|_| self.qp.post_recv(&wr).is_ok()).count() as u32
    }

    /// `pp_post_send`: one signaled SEND of the whole buffer, message `index` (with `--chk`
    /// its pattern written first).
    fn post_send(&self, index: u32) -> Result<(), CliError> {
        if let Some(side) = self.chk {
            let bytes: Vec<u8> = (0..self.size as usize).map(|j| pattern(side, index, j)).collect();
            self.mr
                .write(0, &bytes)
                .map_err(|e| CliError::failed(format!("Couldn't fill the send buffer: {e}")))?;
        }
        let sge = [self.mr.sge(0, self.size)];
        self.qp
            .post_send(&[SendWr {
                wr_id: SEND_WRID,
                sg_list: &sge,
                opcode: WrOpcode::Send,
                send_flags: self.send_flags,
                ..Default::default()
            }])
            .map_err(|e| CliError::failed(format!("Couldn't post send: {e}")))
    }

    /// With `--chk`: the receive buffer holds message `index` of the peer's pattern, every
    /// byte; otherwise nothing to check.
    fn check_received(&self, index: u32) -> Result<(), CliError> {
        let Some(side) = self.chk else { return Ok(()) };
        let mut got = vec![0u8; self.size as usize];
        self.mr
            .read(self.size as usize, &mut got)
            .map_err(|e| CliError::failed(format!("Couldn't read the receive buffer: {e}")))?;
        let peer = 1 - side;
        match got.iter().enumerate().find(|&(j, &b)| b != pattern(peer, index, j)) {
            None => Ok(()),
            Some((j, &b)) => Err(CliError::failed(format!(
                "--chk: byte {j} of message {index} from the peer is {b:#04x}, not {:#04x}",
                pattern(peer, index, j)
            ))),
        }
    }

    /// `pp_connect_ctx`: INIT → RTR towards `dest` → RTS from `my_psn`, with
    /// `ibv_rc_pingpong`'s attributes (and a GRH when the peer sent a GID).
    fn connect(&self, a: &PingpongArgs, my_psn: u32, dest: &QpInfo) -> Result<(), CliError> {
        let mut ah_attr =
            AhAttr { dlid: dest.lid, sl: a.sl, port_num: a.ib_port, ..Default::default() };
        if dest.gid.interface_id() != 0 {
            ah_attr.is_global = true;
            ah_attr.hop_limit = 1;
            ah_attr.dgid = dest.gid;
            ah_attr.sgid_index = a.gid_idx.unwrap_or(0) as u8;
        }
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: a.mtu,
            dest_qp_num: dest.qpn,
            rq_psn: dest.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr,
            ..Default::default()
        };
        self.qp
            .modify(
                &rtr,
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
                    | QpAttrMask::MAX_DEST_RD_ATOMIC
                    | QpAttrMask::MIN_RNR_TIMER,
            )
            .map_err(|e| {
                // ibv_rc_pingpong sends no GID without -g, and a RoCE port refuses the
                // LID-only vector that makes: say what to give.
                let hint = if a.gid_idx.is_none() && !ah_attr.is_global {
                    " (on a RoCE port give -g GID_INDEX, as ibv_rc_pingpong needs there: on \
                     softverbs -g 1 is the port's IPv4 GID; `softverbs devinfo -v` lists the \
                     GID table)"
                } else {
                    ""
                };
                CliError::failed(format!("Failed to modify QP to RTR: {e}{hint}"))
            })?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: my_psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.qp
            .modify(
                &rts,
                QpAttrMask::STATE
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::MAX_QP_RD_ATOMIC,
            )
            .map_err(|e| CliError::failed(format!("Failed to modify QP to RTS: {e}")))
    }
}

// ---------------- the TCP side: exchanging addresses ----------------

fn tcp_error(what: &str, e: std::io::Error) -> CliError {
    let hint = match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            " (timed out: is the peer still running? see --timeout)"
        }
        std::io::ErrorKind::UnexpectedEof => " (the peer closed the connection)",
        _ => "",
    };
    CliError::failed(format!("{what}: {e}{hint}"))
}

fn write_dest(sock: &mut TcpStream, d: &QpInfo) -> std::io::Result<()> {
    let mut msg = d.to_wire().into_bytes();
    msg.push(0);
    debug_assert_eq!(msg.len(), ADDR_MSG_LEN, "the address message has ibv_rc_pingpong's size");
    sock.write_all(&msg)
}

fn read_dest(sock: &mut TcpStream) -> Result<QpInfo, CliError> {
    let mut msg = [0u8; ADDR_MSG_LEN];
    sock.read_exact(&mut msg).map_err(|e| tcp_error("Couldn't read remote address", e))?;
    let text = msg.split(|&b| b == 0).next().unwrap_or(&[]);
    let text = String::from_utf8_lossy(text);
    QpInfo::from_wire(&text)
        .ok_or_else(|| CliError::failed(format!("Couldn't parse remote address {text:?}")))
}

fn read_done(sock: &mut TcpStream) -> Result<(), CliError> {
    let mut msg = [0u8; DONE.len()];
    sock.read_exact(&mut msg).map_err(|e| tcp_error("Couldn't read \"done\" from the peer", e))?;
    check_done(&msg)
}

fn check_done(msg: &[u8; DONE.len()]) -> Result<(), CliError> {
    if msg != DONE {
        return Err(CliError::failed(format!("expected \"done\" from the peer, got {msg:?}")));
    }
    Ok(())
}

/// Resolve and connect, retrying until `timeout` so the client may start first.
fn client_connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, CliError> {
    let deadline = Instant::now() + timeout;
    loop {
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .map_err(|e| CliError::failed(format!("Couldn't resolve {host}:{port}: {e}")))?
            .collect();
        let mut last = None;
        for addr in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(
                addr,
                left.clamp(Duration::from_millis(10), Duration::from_secs(1)),
            ) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
            return Err(CliError::failed(format!(
                "Couldn't connect to {host}:{port} within {} s (--connect-timeout): {why}",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Listen on `port` of every local address: IPv6 and (dual-stack) IPv4 where the machine has
/// IPv6, else IPv4 only, so a client may name the server `localhost`, `::1` or `127.0.0.1`.
/// Port 0 takes a free port; [`TcpListener::local_addr`] says which.
fn server_listen(port: u16) -> Result<TcpListener, CliError> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| CliError::failed(format!("Couldn't listen to port {port}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CliError::failed(format!("Couldn't listen to port {port}: {e}")))?;
    Ok(listener)
}

/// Wait for one client, for at most `timeout` (None: as long as it takes).
fn server_accept(listener: &TcpListener, timeout: Option<Duration>) -> Result<TcpStream, CliError> {
    let port = listener.local_addr().map_or(0, |a| a.port());
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        match listener.accept() {
            Ok((sock, _)) => {
                sock.set_nonblocking(false)
                    .map_err(|e| CliError::failed(format!("accept() on port {port}: {e}")))?;
                return Ok(sock);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(CliError::failed(format!(
                        "no client connected to port {port} within {} s (--accept-timeout)",
                        timeout.unwrap_or_default().as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CliError::failed(format!("accept() on port {port}: {e}"))),
        }
    }
}

// ---------------- the test ----------------

/// What the ping-pong loop tracks (`scnt`, `rcnt`, `routs`, `pending` of `ibv_rc_pingpong`).
struct Counts {
    sent: u32,
    received: u32,
    /// Receives posted and not yet completed.
    routs: u32,
    /// The wr_ids whose completion the next send waits for.
    pending: u64,
}

/// `parse_single_wc`: count the completion, refill receives, and post the next send when both
/// the previous send and a receive have completed.
fn handle_wc(
    pp: &PingpongCtx,
    c: &mut Counts,
    iters: u32,
    wc: &WorkCompletion,
) -> Result<(), CliError> {
    if wc.status != verbs_api::WcStatus::Success {
        return Err(CliError::failed(format!(
            "Failed status {} ({}) for wr_id {}",
            wc.status, wc.status as u32, wc.wr_id
        )));
    }
    match wc.wr_id {
        SEND_WRID => c.sent += 1,
        RECV_WRID => {
            pp.check_received(c.received)?;
            c.routs = c.routs.saturating_sub(1);
            if c.routs <= 1 {
                c.routs += pp.post_recv(pp.rx_depth - c.routs);
                if c.routs < pp.rx_depth {
                    return Err(CliError::failed(format!(
                        "Couldn't post receive ({} of {})",
                        c.routs, pp.rx_depth
                    )));
                }
            }
            c.received += 1;
        }
        other => return Err(CliError::failed(format!("Completion for unknown wr_id {other}"))),
    }
    c.pending &= !wc.wr_id;
    if c.sent < iters && c.pending == 0 {
        pp.post_send(c.sent)?;
        c.pending = RECV_WRID | SEND_WRID;
    }
    Ok(())
}

fn stalled(c: &Counts, iters: u32, timeout: Duration) -> CliError {
    CliError::failed(format!(
        "no completion within {} s (sent {} and received {} of {iters} messages): \
         is the peer still running? (see --timeout)",
        timeout.as_secs(),
        c.sent,
        c.received
    ))
}

/// The ping-pong loop; returns how long it took.
fn run_test(pp: &PingpongCtx, a: &PingpongArgs, client: bool) -> Result<Duration, CliError> {
    let timeout = Duration::from_secs(a.timeout);
    let mut c = Counts { sent: 0, received: 0, routs: pp.rx_depth, pending: RECV_WRID };
    if client {
        pp.post_send(0)?;
        c.pending |= SEND_WRID;
    }
    let start = Instant::now();
    let mut wc = [WorkCompletion::default(); 2];
    while c.received < a.iters || c.sent < a.iters {
        if let Some(channel) = &pp.channel {
            // Sleep until the CQ has a completion, re-arm it, then poll what is there.
            let ev_cq = channel.get_cq_event(Some(timeout)).map_err(|e| {
                if e.errno == verbs_api::Errno::TimedOut {
                    stalled(&c, a.iters, timeout)
                } else {
                    CliError::failed(format!("Failed to get cq_event: {e}"))
                }
            })?;
            if ev_cq != pp.cq {
                return Err(CliError::failed("CQ event for unknown CQ"));
            }
            channel.ack_cq_events(&ev_cq, 1);
            pp.cq
                .req_notify(false)
                .map_err(|e| CliError::failed(format!("Couldn't request CQ notification: {e}")))?;
        }
        let mut ne;
        let since = Instant::now();
        let mut spins = 0u32;
        loop {
            ne = pp
                .cq
                .poll(&mut wc)
                .map_err(|e| CliError::failed(format!("poll CQ failed: {e}")))?;
            if ne > 0 || pp.channel.is_some() {
                break;
            }
            // A tight loop as ibv_rc_pingpong's: the clock only now and then, no PAUSE hint
            // (docs/decisions.md, "Benchmark poll loops without a PAUSE hint").
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && since.elapsed() >= timeout {
                return Err(stalled(&c, a.iters, timeout));
            }
        }
        for w in &wc[..ne] {
            handle_wc(pp, &mut c, a.iters, w)?;
        }
    }
    Ok(start.elapsed())
}

/// Run `softverbs pingpong` on the fabric in `fabric`, printing to `out`.
pub fn run(fabric: Option<&Path>, a: &PingpongArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let say = |out: &mut dyn Write, s: &str| {
        writeln!(out, "{s}").and_then(|()| out.flush()).map_err(cmd::output_error)
    };
    if a.host.is_some() && a.port == 0 {
        return Err(CliError::usage(
            "-p 0 (a free port) is for the server; give the client the port the server printed",
        ));
    }
    let soft = cmd::register_fabric(fabric)?;
    if let Some(file) = &a.pcap {
        soft.capture_to(Some(file), "--pcap");
    }
    let ctx = cmd::open_device(&a.ib_dev)?;
    check_limits(&ctx, a)?;
    let pp = PingpongCtx::new(ctx, a)?;
    let posted = pp.post_recv(pp.rx_depth);
    if posted < pp.rx_depth {
        return Err(CliError::failed(format!("Couldn't post receive ({posted})")));
    }
    if pp.channel.is_some() {
        pp.cq
            .req_notify(false)
            .map_err(|e| CliError::failed(format!("Couldn't request CQ notification: {e}")))?;
    }
    let port = pp.ctx.query_port(a.ib_port).map_err(|e| {
        CliError::failed(format!("Couldn't get port info of {} port {}: {e}", a.ib_dev, a.ib_port))
    })?;
    if port.link_layer != LinkLayer::Ethernet && port.lid == 0 {
        return Err(CliError::failed("Couldn't get local LID"));
    }
    let gid = match a.gid_idx {
        Some(index) => pp.ctx.query_gid(a.ib_port, index).map_err(|e| {
            let message = format!("can't read sgid of index {index}: {e}");
            // A GID index the port does not have is a bad -g value.
            if e.errno == verbs_api::Errno::Inval {
                CliError::usage(message)
            } else {
                CliError::failed(message)
            }
        })?,
        None => Gid([0; 16]),
    };
    let me = QpInfo { lid: port.lid, qpn: pp.qp.qp_num(), psn: initial_psn(), gid };
    say(out, &address_line("local address: ", &me))?;

    let io_timeout = Some(Duration::from_secs(a.timeout));
    let set_timeouts = |sock: &TcpStream| {
        sock.set_read_timeout(io_timeout)
            .and_then(|()| sock.set_write_timeout(io_timeout))
            .map_err(|e| CliError::failed(format!("setting the TCP timeouts: {e}")))
    };
    let (mut sock, remote) = match &a.host {
        Some(host) => {
            let mut sock = client_connect(host, a.port, Duration::from_secs(a.connect_timeout))?;
            set_timeouts(&sock)?;
            write_dest(&mut sock, &me).map_err(|e| tcp_error("Couldn't send local address", e))?;
            let remote = read_dest(&mut sock)?;
            cmd::check_peer_on_fabric(&soft, &pp.ctx, &me, &remote)?;
            sock.write_all(DONE).map_err(|e| tcp_error("Couldn't write \"done\"", e))?;
            (sock, remote)
        }
        None => {
            let wait = (a.accept_timeout > 0).then(|| Duration::from_secs(a.accept_timeout));
            let listener = server_listen(a.port)?;
            if a.port == 0 {
                let port = listener
                    .local_addr()
                    .map_err(|e| CliError::failed(format!("Couldn't listen: {e}")))?
                    .port();
                say(out, &format!("  listening on TCP port {port}"))?;
            }
            let mut sock = server_accept(&listener, wait)?;
            set_timeouts(&sock)?;
            let remote = read_dest(&mut sock)?;
            let reachable = cmd::check_peer_on_fabric(&soft, &pp.ctx, &me, &remote);
            // The server is ready to receive before it tells the client where it is. A peer
            // on another fabric still gets this side's address, so that it can say so too.
            if reachable.is_ok() {
                pp.connect(a, me.psn, &remote)?;
            }
            write_dest(&mut sock, &me).map_err(|e| tcp_error("Couldn't send local address", e))?;
            reachable?;
            read_done(&mut sock)?;
            (sock, remote)
        }
    };
    say(out, &address_line("remote address:", &remote))?;
    if a.host.is_some() {
        pp.connect(a, me.psn, &remote)?;
    }

    let elapsed = run_test(&pp, a, a.host.is_some())?;
    for line in summary(a.size, a.iters, elapsed) {
        say(out, &line)?;
    }
    if a.chk {
        say(out, &format!("--chk: every byte of the peer's {} messages as sent", a.iters))?;
    }
    finish(&mut sock)
}

/// `-i`, `-s` and `-r` against what the device reports, before anything is allocated: a value
/// it cannot take is a usage error naming the option and the limit, not a failed verb later.
fn check_limits(ctx: &Context, a: &PingpongArgs) -> Result<(), CliError> {
    cmd::check_port(ctx, "-i", a.ib_port)?;
    cmd::check_message_size(ctx, a.ib_port, "-s", u64::from(a.size))?;
    let attr = ctx
        .query_device()
        .map_err(|e| CliError::failed(format!("ibv_query_device on {}: {e}", ctx.device_name())))?;
    // The receive queue holds rx_depth WRs; the CQ one more (the send).
    let max = attr.max_qp_wr.min(attr.max_cqe.saturating_sub(1));
    if a.rx_depth > max {
        return Err(CliError::usage(format!(
            "-r {}: more receives than {} allows (max_qp_wr {}, max_cqe {})",
            a.rx_depth,
            ctx.device_name(),
            attr.max_qp_wr,
            attr.max_cqe
        )));
    }
    Ok(())
}

/// After the test: both sides finished sending and receiving, and only now may either tear
/// its QP down (its peer may still be waiting for the ACK of its last message). A softverbs
/// peer answers "done"; `ibv_rc_pingpong` closes its socket right after the address exchange,
/// so a closed connection is no error here.
fn finish(sock: &mut TcpStream) -> Result<(), CliError> {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let closed = |e: &std::io::Error| {
        matches!(e.kind(), BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof)
    };
    match sock.write_all(DONE) {
        Ok(()) => {}
        Err(e) if closed(&e) => return Ok(()),
        Err(e) => return Err(tcp_error("Couldn't write \"done\"", e)),
    }
    let mut msg = [0u8; DONE.len()];
    match sock.read_exact(&mut msg) {
        Ok(()) => check_done(&msg),
        Err(e) if closed(&e) => Ok(()),
        Err(e) => Err(tcp_error("Couldn't read \"done\" from the peer", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lines_match_ibv_rc_pingpong() {
        let d = QpInfo { lid: 1, qpn: 0x11, psn: 0x1a2b3c, gid: Gid([0; 16]) };
        assert_eq!(
            address_line("local address: ", &d),
            "  local address:  LID 0x0001, QPN 0x000011, PSN 0x1a2b3c, GID ::"
        );
        let d = QpInfo { gid: Gid::from_ipv4([10, 0, 0, 2]), ..d };
        assert_eq!(
            address_line("remote address:", &d),
            "  remote address: LID 0x0001, QPN 0x000011, PSN 0x1a2b3c, GID ::ffff:10.0.0.2"
        );
        let mut msg = d.to_wire().into_bytes();
        msg.push(0);
        assert_eq!(msg.len(), ADDR_MSG_LEN);
    }

    #[test]
    fn summary_counts_both_directions() {
        let [bytes, iters] = summary(4096, 1000, Duration::from_millis(120));
        assert_eq!(bytes, "8192000 bytes in 0.12 seconds = 546.13 Mbit/sec");
        assert_eq!(iters, "1000 iters in 0.12 seconds = 120.00 usec/iter");
    }

    #[test]
    fn chk_patterns_differ_by_side_and_message() {
        let msg = |side, index| (0..4096).map(|j| pattern(side, index, j)).collect::<Vec<u8>>();
        assert_ne!(msg(0, 0), msg(1, 0), "the two sides' messages differ");
        assert_ne!(msg(0, 0), msg(0, 1), "consecutive messages differ");
        assert_ne!(
            msg(0, 0)[..256],
            msg(0, 0)[256..512],
            "the pattern does not repeat every 256 bytes"
        );
    }

    #[test]
    fn psns_are_24_bits() {
        assert!(initial_psn() <= 0x00ff_ffff);
    }

    #[test]
    fn mtus() {
        assert_eq!(parse_mtu("256"), Ok(Mtu::Mtu256));
        assert_eq!(parse_mtu("4096"), Ok(Mtu::Mtu4096));
        assert!(parse_mtu("1000").is_err());
    }
}
