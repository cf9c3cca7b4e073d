//! The two processes of a lesson: this one (the initiator, the "program A" of the lesson) and a
//! target process of this same binary (`learn --target`, started with the project's peer
//! launcher), joined by an RC QP pair on the shared-memory fabric and by a TCP connection over
//! loopback. The target obeys one-line commands (post receives, poll, echo, move TCP bytes, run
//! a compute loop) and measures itself inside each, so that both columns of a lesson's table
//! come from the same two processes in the same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softverbs_sim::peer::{fabric_base, remove_dead_runs, FabricDir, Parent, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress};
use verbs_api::{
    Mtu, QpCap, QpType, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode,
};

use super::measure::{self, Snap};
use super::tcp::{self, Tcp, TcpCount};
use crate::cmd::{self, CliError};

/// Bound on each handshake step and each command's reply.
pub const WAIT: Duration = Duration::from_secs(120);
const INITIATOR_PSN: u32 = 0x00_1000;
const TARGET_PSN: u32 = 0x00_8000;
/// A run's own fabric directory (when none is given) is this and the run's pid.
const RUN_DIR_PREFIX: &str = "softverbs-learn-";
/// Work requests kept in each queue.
pub const DEPTH: u32 = 64;

/// Where the lesson runs: the device both processes open, the fabric, each side's MR size.
#[derive(Clone, Debug)]
pub struct Where {
    /// The device name (`-d`), opened by both processes.
    pub ib_dev: String,
    /// The fabric directory, if given (else a fresh one, removed at the end).
    pub fabric: Option<PathBuf>,
    /// Bytes of registered memory on each side.
    pub mr_len: usize,
}

fn cap(max_sge: u32) -> QpCap {
    QpCap {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: max_sge,
        max_recv_sge: max_sge,
        max_inline_data: 0,
    }
}

fn opts(addr: &PortAddress) -> Result<ConnOpts, String> {
    addr.conn_opts(ConnOpts { mtu: Mtu::Mtu4096, ..ConnOpts::default() }).map_err(|e| e.to_string())
}

/// A side's endpoint: the QP takes as many SGEs as the device allows (`max_sge`).
fn endpoint(ib_dev: &str, mr_len: usize) -> Result<(Endpoint, PortAddress, u32), CliError> {
    let ctx = cmd::open_device(ib_dev)?;
    let max_sge =
        ctx.query_device().map_err(|e| CliError::failed(format!("ibv_query_device: {e}")))?.max_sge;
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(max_sge), 4 * DEPTH, mr_len)
        .map_err(|e| CliError::failed(e.to_string()))?;
    let addr = cmd::port_address(&ctx, None)?;
    Ok((ep, addr, max_sge))
}

/// The initiator's side of a lesson, connected to its target by RDMA and TCP.
pub struct Session {
    /// This side's PD, CQ, QP and MR.
    pub ep: Endpoint,
    /// The target's MR: address and rkey.
    pub remote: (u64, u32),
    /// The device's (and so the QP's) `max_sge`.
    pub max_sge: u32,
    /// The TCP connection to the target.
    pub tcp: Tcp,
    /// The target process.
    pub peer: Peer,
    soft: nic_model::soft::Soft,
    ib_dev: String,
    _dir: FabricDir,
}

impl Session {
    /// Starts the target process and connects to it.
    pub fn start(w: &Where) -> Result<Session, CliError> {
        let env = std::env::var_os(nic_model::wire::FABRIC_ENV).filter(|d| !d.is_empty());
        let dir = match w.fabric.clone().or(env.map(PathBuf::from)) {
            Some(p) => FabricDir::given(p),
            None => {
                // Runs that were killed could not remove their own directories.
                for (dir, pid) in remove_dead_runs(&fabric_base(), RUN_DIR_PREFIX) {
                    eprintln!(
                        "softverbs learn: removed {}, left by run {pid}, which is gone",
                        dir.display()
                    );
                }
                FabricDir::create(&format!("{RUN_DIR_PREFIX}{}", std::process::id()))?
            }
        };
        let soft = cmd::register_fabric(Some(dir.path()))?;
        let (ep, addr, max_sge) = endpoint(&w.ib_dev, w.mr_len)?;
        let exe = std::env::current_exe()
            .map_err(|e| CliError::failed(format!("finding this program: {e}")))?;
        let mut c = Command::new(exe);
        c.args(["learn", "--target", "-d", &w.ib_dev, "--mr", &w.mr_len.to_string()]);
        c.arg("--fabric").arg(dir.path());
        let mut peer = Peer::spawn("the target process", c, Stderr::Inherit)?;
        let mine = addr.qp_info(&ep.qp, INITIATOR_PSN);
        let (theirs, mr) = peer.swap_info(&mine, None, WAIT)?;
        let remote = mr.ok_or("the target's INFO names no memory region")?;
        conn::connect(&ep.qp, INITIATOR_PSN, &theirs, &opts(&addr)?).map_err(|e| e.to_string())?;
        let port: u16 = peer
            .expect("TCP", WAIT)?
            .parse()
            .map_err(|e| CliError::failed(format!("the target's TCP port: {e}")))?;
        let tcp = tcp::connect(port)?;
        peer.expect("READY", WAIT)?;
        let ib_dev = w.ib_dev.clone();
        Ok(Session { ep, remote, max_sge, tcp, peer, soft, ib_dev, _dir: dir })
    }

    /// Packets this side's NIC has retransmitted so far (go-back-N after a timeout or a NAK);
    /// 0 on a device that is not soft.
    pub fn retransmits(&self) -> u64 {
        self.soft.stats(&self.ib_dev).map_or(0, |st| st.nic.retransmits)
    }

    /// Sends a command and returns the rest of the reply line that starts with `answer`.
    pub fn ask(&mut self, command: &str, answer: &str) -> Result<String, String> {
        self.peer.send_line(command)?;
        let line = self.peer.recv_line(WAIT)?;
        if let Some(err) = line.strip_prefix("ERR ") {
            return Err(format!("the target: {err}"));
        }
        line.strip_prefix(answer)
            .map(|s| s.trim().to_string())
            .ok_or_else(|| format!("the target answered {line:?} to {command:?}"))
    }

    /// The target's snapshot now (taken on its program thread, which then waits again), as
    /// the start of a measurement ([`Snap::take`]) or its end ([`Snap::take_end`]).
    pub fn their_snap(&mut self, end: bool) -> Result<Snap, String> {
        Snap::from_line(&self.ask(if end { "SNAPEND" } else { "SNAP" }, "SNAP")?)
    }

    /// Ends the target and waits for it.
    pub fn finish(mut self) -> Result<(), String> {
        self.peer.send_line("BYE")?;
        self.peer.finish(WAIT)
    }
}

/// A finished target command's measurements: its snapshot difference over the work, and its
/// TCP counts if it used TCP.
pub fn parse_done(rest: &str) -> Result<(Snap, TcpCount, Vec<usize>), String> {
    let mut parts = rest.split('|');
    let snap = Snap::from_line(parts.next().unwrap_or("").trim())?;
    let nums: Vec<u64> = parts
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|w| w.parse().map_err(|_| format!("TCP counts in {rest:?}")))
        .collect::<Result<_, _>>()?;
    let count = match nums[..] {
        [reads, writes, read_bytes, written_bytes] => {
            TcpCount { reads, writes, read_bytes, written_bytes }
        }
        _ => TcpCount::default(),
    };
    let sizes = parts
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|w| w.parse().map_err(|_| format!("read sizes in {rest:?}")))
        .collect::<Result<_, _>>()?;
    Ok((snap, count, sizes))
}

fn done_line(snap: &Snap, c: &TcpCount, sizes: &[usize]) -> String {
    let s: Vec<String> = sizes.iter().take(64).map(|n| n.to_string()).collect();
    format!(
        "DONE {} | {} {} {} {} | {}",
        snap.to_line(),
        c.reads,
        c.writes,
        c.read_bytes,
        c.written_bytes,
        s.join(" ")
    )
}

/// Whether [`poll`] gives the core away (`sched_yield`) after each poll that found nothing: set
/// when the machine has fewer free cores than a lesson has busy threads, so that the emulated
/// NIC threads the programs wait for get to run.
pub static YIELD: AtomicBool = AtomicBool::new(false);

/// Busy-polls `ep`'s CQ for `n` completions (bounded by [`WAIT`]); every one must succeed.
/// With [`YIELD`] set, each empty poll yields the core.
pub fn poll(ep: &Endpoint, n: usize) -> Result<Vec<WorkCompletion>, String> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::with_capacity(n);
    let mut buf = [WorkCompletion::default(); 16];
    let mut spins = 0u32;
    while got.len() < n {
        let k = ep.cq.poll(&mut buf[..(n - got.len()).min(16)]).map_err(|e| e.to_string())?;
        for wc in &buf[..k] {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "a work completion failed: {} (wr_id {})",
                    wc.status, wc.wr_id
                ));
            }
        }
        got.extend_from_slice(&buf[..k]);
        if k == 0 && YIELD.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        spins = spins.wrapping_add(1);
        if k == 0 && spins.is_multiple_of(4096) && Instant::now() >= deadline {
            return Err(format!("no completion within {WAIT:?} ({} of {n})", got.len()));
        }
    }
    Ok(got)
}

/// A SEND of `len` bytes from offset `off` of `ep`'s MR.
pub fn post_send(ep: &Endpoint, wr_id: u64, off: usize, len: u32) -> Result<(), String> {
    let sge = [ep.mr.sge(off, len)];
    let wr = SendWr {
        wr_id,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    ep.qp.post_send(&[wr]).map_err(|e| e.to_string())
}

/// A receive of `len` bytes at offset `off` of `ep`'s MR.
pub fn post_recv(ep: &Endpoint, wr_id: u64, off: usize, len: u32) -> Result<(), String> {
    let sge = [ep.mr.sge(off, len)];
    ep.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).map_err(|e| e.to_string())
}

/// The target process (`learn --target`): its initiator is the parent, on stdin and stdout.
pub fn target_main(fabric: Option<&Path>, ib_dev: &str, mr_len: usize) -> Result<(), CliError> {
    cmd::register_fabric(fabric)?;
    let (ep, addr, _) = endpoint(ib_dev, mr_len)?;
    let (listener, port) = tcp::listen()?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let mut parent = Parent::new(&mut input, &mut out);
    let info = addr.qp_info(&ep.qp, TARGET_PSN);
    let (remote, _) = parent.swap_info(&info, Some((ep.mr.addr(), ep.mr.rkey())))?;
    conn::connect(&ep.qp, TARGET_PSN, &remote, &opts(&addr)?).map_err(|e| e.to_string())?;
    parent.say(&format!("TCP {port}"))?;
    let mut tcp = tcp::accept(&listener)?;
    parent.say("READY")?;
    let mut compute: Option<Compute> = None;
    while let Some(line) = parent.line()? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match target_command(&ep, &mut tcp, &mut compute, &mut parent, &words) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => format!("ERR {e}"),
        };
        parent.say(&reply)?;
    }
    Ok(())
}

/// The compute loop a target runs on a thread of its own while data arrives.
struct Compute {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64, Duration)>,
}

fn start_compute() -> Compute {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let t0 = Instant::now();
        let cpu0 = measure::my_cpu_ns();
        let mut x = 1u64;
        let mut iters = 0u64;
        while !flag.load(Ordering::Relaxed) {
            for _ in 0..1024 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            iters += 1024;
        }
        (iters, measure::my_cpu_ns() - cpu0, t0.elapsed())
    });
    Compute { stop, thread }
}

fn num<T: std::str::FromStr>(words: &[&str], i: usize) -> Result<T, String> {
    words
        .get(i)
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("argument {i} of {:?}", words.join(" ")))
}

/// One command; `None` ends the target.
fn target_command(
    ep: &Endpoint,
    tcp: &mut Tcp,
    compute: &mut Option<Compute>,
    parent: &mut Parent<'_>,
    words: &[&str],
) -> Result<Option<String>, String> {
    let reply = match words.first().copied().unwrap_or("") {
        "BYE" => return Ok(None),
        // The start and the end of a measurement the initiator makes while this program waits.
        "SNAP" => format!("SNAP {}", Snap::take().to_line()),
        "SNAPEND" => format!("SNAP {}", Snap::take_end().to_line()),
        // YIELD 1|0: whether this program gives its core away after each empty poll.
        "YIELD" => {
            YIELD.store(num::<u8>(words, 1)? == 1, Ordering::Relaxed);
            "OK".into()
        }
        "POSTRECV" => {
            // POSTRECV off len [off len ...]: one receive with these SGEs.
            let mut sges = Vec::new();
            for i in (1..words.len()).step_by(2) {
                sges.push(ep.mr.sge(num(words, i)?, num(words, i + 1)?));
            }
            ep.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &sges }]).map_err(|e| e.to_string())?;
            "OK".into()
        }
        "POLL" => {
            let wcs = poll(ep, num(words, 1)?)?;
            let lens: Vec<String> = wcs.iter().map(|w| w.byte_len.to_string()).collect();
            format!("WCS {}", lens.join(" "))
        }
        "READ" => {
            let v = ep.mr.read_vec(num(words, 1)?, num(words, 2)?).map_err(|e| e.to_string())?;
            format!("BYTES {}", v.iter().map(|b| format!("{b:02x}")).collect::<String>())
        }
        "ECHO" => {
            let (iters, size): (usize, u32) = (num(words, 1)?, num(words, 2)?);
            let ahead = iters.min(DEPTH as usize / 2);
            for i in 0..ahead {
                post_recv(ep, i as u64, 0, size)?;
            }
            parent.say("GO")?;
            let before = Snap::take();
            let (mut posted, mut sends) = (ahead, 0);
            for i in 0..iters {
                wait_recv(ep, &mut sends)?;
                if posted < iters {
                    post_recv(ep, posted as u64, 0, size)?;
                    posted += 1;
                }
                // At most half the send queue outstanding.
                wait_sends(ep, &mut sends, i.saturating_sub(DEPTH as usize / 2))?;
                post_send(ep, 0, 0, size)?;
            }
            wait_sends(ep, &mut sends, iters)?;
            done_line(&Snap::take_end().since(&before), &TcpCount::default(), &[])
        }
        "TCPECHO" => {
            let (iters, size): (usize, usize) = (num(words, 1)?, num(words, 2)?);
            let mut buf = vec![0u8; size];
            parent.say("GO")?;
            let c0 = tcp.count;
            let before = Snap::take();
            for _ in 0..iters {
                tcp.read_total(size as u64, &mut buf)?;
                tcp.write_all(&buf)?;
            }
            let d = Snap::take_end().since(&before);
            done_line(&d, &count_since(&tcp.count, &c0), &[])
        }
        "TCPRECV" => {
            let (total, bufsize): (u64, usize) = (num(words, 1)?, num(words, 2)?);
            let mut buf = vec![0u8; bufsize];
            parent.say("GO")?;
            let c0 = tcp.count;
            let before = Snap::take();
            let sizes = tcp.read_total(total, &mut buf)?;
            let d = Snap::take_end().since(&before);
            done_line(&d, &count_since(&tcp.count, &c0), &sizes)
        }
        "TCPSEND" => {
            let (total, chunk): (u64, usize) = (num(words, 1)?, num(words, 2)?);
            let buf = vec![0x5au8; chunk];
            parent.say("GO")?;
            let c0 = tcp.count;
            let before = Snap::take();
            let mut left = total;
            while left > 0 {
                let n = left.min(chunk as u64) as usize;
                tcp.write_all(&buf[..n])?;
                left -= n as u64;
            }
            let d = Snap::take_end().since(&before);
            done_line(&d, &count_since(&tcp.count, &c0), &[])
        }
        "COMPUTE" => {
            if compute.is_some() {
                return Err("a compute loop is already running".into());
            }
            *compute = Some(start_compute());
            "OK".into()
        }
        "STOP" => {
            let c = compute.take().ok_or("no compute loop runs")?;
            c.stop.store(true, Ordering::Relaxed);
            let (iters, cpu_ns, wall) =
                c.thread.join().map_err(|_| "the compute loop panicked".to_string())?;
            format!("LOOP {iters} {cpu_ns} {}", wall.as_nanos())
        }
        other => return Err(format!("unknown command {other:?}")),
    };
    Ok(Some(reply))
}

/// Polls until a receive completes; the send completions seen meanwhile are counted in `sends`.
pub fn wait_recv(ep: &Endpoint, sends: &mut usize) -> Result<WorkCompletion, String> {
    loop {
        let wc = poll(ep, 1)?[0];
        if wc.opcode == verbs_api::WcOpcode::Recv {
            return Ok(wc);
        }
        *sends += 1;
    }
}

/// Polls until `sends` reaches `want` (send completions only; a receive here is an error).
pub fn wait_sends(ep: &Endpoint, sends: &mut usize, want: usize) -> Result<(), String> {
    while *sends < want {
        let wc = poll(ep, 1)?[0];
        if wc.opcode == verbs_api::WcOpcode::Recv {
            return Err("a receive completed where only sends were due".into());
        }
        *sends += 1;
    }
    Ok(())
}

fn count_since(now: &TcpCount, then: &TcpCount) -> TcpCount {
    TcpCount {
        reads: now.reads - then.reads,
        writes: now.writes - then.writes,
        read_bytes: now.read_bytes - then.read_bytes,
        written_bytes: now.written_bytes - then.written_bytes,
    }
}
