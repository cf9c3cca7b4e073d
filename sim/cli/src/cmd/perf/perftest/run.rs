//! The measured loops of the perftest-style tests (`perf send_lat` … `perf atomic_bw`), both
//! sides: what `ib_send_lat`, `ib_write_bw` and the rest do between their set-up and their
//! report, on QPs `mod.rs` has connected. The client records a timestamp per post (and per
//! completion for bandwidth); the peer serves (ping-pong replies, receives) or stays passive.

use std::time::{Duration, Instant};

use super::stamp::Stamp;

use verbs_api::{
    AtomicTarget, CompChannel, CompletionQueue, MemoryRegion, ProtectionDomain, QueuePair,
    RdmaTarget, RecvWr, SendFlags, SendWr, UdTarget, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// Which verb a test measures (perftest's `verb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verb {
    /// `IBV_WR_SEND` (`ib_send_*`).
    Send,
    /// `IBV_WR_RDMA_WRITE` (`ib_write_*`).
    Write,
    /// `IBV_WR_RDMA_READ` (`ib_read_*`).
    Read,
    /// `IBV_WR_ATOMIC_*` (`ib_atomic_*`).
    Atomic,
}

/// Latency or bandwidth (perftest's `tst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Ping-pong (send, write) or one operation at a time (read, atomic).
    Lat,
    /// A window of `-t` outstanding operations per QP.
    Bw,
}

/// The atomic of `-A` (perftest's `atomicType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum AtomicType {
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (perftest's default).
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

/// Receives kept posted per QP by the side that receives SENDs (perftest's `DEF_RX_SEND` is
/// 512; bounded here by the CQ both queues share).
pub(super) const RX_DEPTH: u32 = 256;
/// Latency tests signal one send in this many (selective signaling, as perftest does).
const LAT_SIGNAL_EVERY: u64 = 16;
/// A peer whose iteration count is unknown (a `-D` run, or UC where messages may be lost)
/// stops after this long without a message.
const IDLE_GAP: Duration = Duration::from_millis(300);
/// Bound on one size's measurement beyond its `-D` duration.
pub(super) const PHASE: Duration = Duration::from_secs(120);

/// One side's verbs objects: every QP completes into the one CQ; one MR whose first half is
/// the send (or READ destination) area and second half the receive (or WRITE target) area.
pub(super) struct Side {
    /// The PD of the QPs, the MR and (UD) the address handles.
    pub(super) pd: ProtectionDomain,
    /// The CQ of every QP's send and receive queue.
    pub(super) cq: CompletionQueue,
    /// The CQ's completion channel with `-e`.
    pub(super) channel: Option<CompChannel>,
    /// The connected QPs (`-q`).
    pub(super) qps: Vec<QueuePair>,
    /// The registered buffer.
    pub(super) mr: MemoryRegion,
    /// On UD, where each QP's SENDs go (the peer's QP of the same index); empty otherwise.
    pub(super) ud: Vec<UdTarget>,
}

impl Side {
    /// Offset of the receive area.
    pub(super) fn half(&self) -> usize {
        self.mr.len() / 2
    }
}

/// What one size's run does.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    pub(super) verb: Verb,
    pub(super) size: u32,
    /// Iterations per QP; 0 with a duration.
    pub(super) iters: u64,
    pub(super) duration: Option<Duration>,
    pub(super) tx_depth: u32,
    pub(super) cq_mod: u32,
    /// Messages of at most this many bytes are posted inline.
    pub(super) inline: u32,
    pub(super) atomic: AtomicType,
}

/// The peer's MR, as the client reaches it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Remote {
    pub(super) addr: u64,
    pub(super) rkey: u32,
    /// Offset of its receive area.
    pub(super) half: u64,
}

/// What a client run recorded (nanoseconds since its start).
#[derive(Debug, Default)]
pub(super) struct Raw {
    /// When each operation was posted (every QP's, in posting order); empty with `-D`.
    pub(super) posted: Vec<u64>,
    /// (operations completed so far, when) at each signaled completion; empty with `-D`.
    pub(super) completed: Vec<(u64, u64)>,
    /// Operations completed.
    pub(super) ops: u64,
    /// From the first post to the last completion.
    pub(super) elapsed_ns: u64,
}

/// Polls the CQ, or with `-e` waits on its channel when the CQ is empty.
struct Poller<'a> {
    side: &'a Side,
    wcs: [WorkCompletion; 64],
}

impl<'a> Poller<'a> {
    fn new(side: &'a Side) -> Poller<'a> {
        Poller { side, wcs: [WorkCompletion::default(); 64] }
    }

    /// Completions now, possibly none; every one must have succeeded.
    #[inline]
    fn try_poll(&mut self) -> Result<usize, String> {
        let n = self.side.cq.poll(&mut self.wcs).map_err(|e| e.to_string())?;
        for wc in &self.wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "work completion failed: {} ({}), wr_id {:#x}",
                    wc.status.name(),
                    wc.status,
                    wc.wr_id
                ));
            }
        }
        Ok(n)
    }

    /// At least one completion, by busy polling or, with a channel, by sleeping on it; 0 if
    /// none came by `deadline`.
    fn wait(&mut self, deadline: Instant) -> Result<usize, String> {
        let mut spins = 0u32;
        loop {
            let n = self.try_poll()?;
            if n > 0 {
                return Ok(n);
            }
            if let Some(ch) = &self.side.channel {
                // Arm, look once more (a completion may have landed before arming), then sleep.
                self.side.cq.req_notify(false).map_err(|e| e.to_string())?;
                let n = self.try_poll()?;
                if n > 0 {
                    return Ok(n);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(0);
                }
                match ch.get_cq_event(Some(left)) {
                    Ok(cq) => ch.ack_cq_events(&cq, 1),
                    Err(e) if e.errno == verbs_api::Errno::TimedOut => {}
                    Err(e) => return Err(format!("ibv_get_cq_event: {e}")),
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && Instant::now() >= deadline {
                return Ok(0);
            }
        }
    }

    /// [`Poller::wait`], where nothing by `deadline` is an error.
    fn must(&mut self, deadline: Instant) -> Result<usize, String> {
        match self.wait(deadline)? {
            0 => Err("timed out waiting for a completion".into()),
            n => Ok(n),
        }
    }
}

/// Post one receive on QP `q` spanning `side`'s whole receive area: a message of any size of
/// an `-a` sweep fits, and on UD the 40-byte GRH a UD receive puts in front of it too.
fn post_recv(side: &Side, q: usize) -> Result<(), String> {
    let len = u32::try_from(side.mr.len() - side.half()).map_err(|_| "receive area too large")?;
    let sge = [side.mr.sge(side.half(), len)];
    side.qps[q].post_recv(&[RecvWr { wr_id: q as u64, sg_list: &sge }]).map_err(|e| e.to_string())
}

/// Fill every QP's receive queue (the SEND tests' receiving side, before it says GO).
pub(super) fn post_receives(side: &Side) -> Result<(), String> {
    for q in 0..side.qps.len() {
        for _ in 0..RX_DEPTH {
            post_recv(side, q)?;
        }
    }
    Ok(())
}

/// The work request of `plan` on QP `q` of `side` towards `remote`.
fn work_request<'s>(
    side: &Side,
    q: usize,
    plan: &Plan,
    sge: &'s [verbs_api::Sge],
    remote: Remote,
) -> SendWr<'s> {
    let mut flags = SendFlags::empty();
    if plan.size <= plan.inline && matches!(plan.verb, Verb::Send | Verb::Write) {
        flags |= SendFlags::INLINE;
    }
    let rdma = RdmaTarget { remote_addr: remote.addr + remote.half, rkey: remote.rkey };
    let (opcode, rdma, atomic) = match plan.verb {
        Verb::Send => (WrOpcode::Send, RdmaTarget::default(), AtomicTarget::default()),
        Verb::Write => (WrOpcode::RdmaWrite, rdma, AtomicTarget::default()),
        // READ fetches the peer's send area into this side's receive area.
        Verb::Read => (
            WrOpcode::RdmaRead,
            RdmaTarget { remote_addr: remote.addr, rkey: remote.rkey },
            AtomicTarget::default(),
        ),
        Verb::Atomic => {
            let target = AtomicTarget {
                remote_addr: remote.addr + remote.half,
                rkey: remote.rkey,
                compare_add: if plan.atomic == AtomicType::FetchAndAdd { 1 } else { 0 },
                swap: 0,
            };
            let op = match plan.atomic {
                AtomicType::CmpAndSwap => WrOpcode::AtomicCmpAndSwp,
                AtomicType::FetchAndAdd => WrOpcode::AtomicFetchAndAdd,
            };
            (op, RdmaTarget::default(), target)
        }
    };
    let ud = side.ud.get(q).cloned();
    SendWr {
        wr_id: 0,
        sg_list: sge,
        opcode,
        send_flags: flags,
        rdma,
        atomic,
        ud,
        ..Default::default()
    }
}

/// The SGE a client posts from: the send area, except READ and atomics, which land their
/// result in the receive area.
fn local_sge(side: &Side, plan: &Plan) -> verbs_api::Sge {
    match plan.verb {
        Verb::Send | Verb::Write => side.mr.sge(0, plan.size),
        Verb::Read | Verb::Atomic => side.mr.sge(side.half(), plan.size),
    }
}

/// The value a ping-pong puts in a message's last byte on iteration `i`: never 0, so a cleared
/// receive area never looks like an arrival.
#[inline]
fn mark(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Busy-read the last byte of the receive area of a `size`-byte message until it is `want`
/// (how `ib_write_lat` notices the peer's WRITE: it polls memory, not a CQ).
fn poll_memory(side: &Side, size: u32, want: u8, deadline: Instant) -> Result<bool, String> {
    let at = side.half() + size as usize - 1;
    let mut b = [0u8];
    let mut spins = 0u32;
    loop {
        side.mr.read(at, &mut b).map_err(|e| e.to_string())?;
        if b[0] == want {
            return Ok(true);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// One side of a ping-pong: sends (or WRITEs) and waits for the other side's.
struct PingPong<'a> {
    side: &'a Side,
    plan: Plan,
    remote: Remote,
    poll: Poller<'a>,
    sent: u64,
    /// A signaled send whose completion has not been polled yet.
    signaled_out: bool,
}

impl<'a> PingPong<'a> {
    fn new(side: &'a Side, plan: Plan, remote: Remote) -> PingPong<'a> {
        PingPong { side, plan, remote, poll: Poller::new(side), sent: 0, signaled_out: false }
    }

    /// Post the next message. Every `LAT_SIGNAL_EVERY`th is signaled; before posting one, the
    /// previous signaled one's completion is reaped, so the send queue never fills.
    #[inline]
    fn send(&mut self, deadline: Instant) -> Result<(), String> {
        self.sent += 1;
        let signal = self.sent.is_multiple_of(LAT_SIGNAL_EVERY);
        if signal && self.signaled_out {
            self.reap(deadline)?;
        }
        if self.plan.verb == Verb::Write {
            let at = self.plan.size as usize - 1;
            self.side.mr.write(at, &[mark(self.sent)]).map_err(|e| e.to_string())?;
        }
        let sge = [local_sge(self.side, &self.plan)];
        let mut wr = work_request(self.side, 0, &self.plan, &sge, self.remote);
        wr.wr_id = self.sent;
        if signal {
            wr.send_flags |= SendFlags::SIGNALED;
            self.signaled_out = true;
        }
        self.side.qps[0].post_send(&[wr]).map_err(|e| e.to_string())
    }

    /// Wait for the signaled send's completion (receives seen meanwhile are an error: the
    /// ping-pong has one message in flight each way).
    fn reap(&mut self, deadline: Instant) -> Result<(), String> {
        while self.signaled_out {
            let n = self.poll.must(deadline)?;
            for wc in &self.poll.wcs[..n] {
                match wc.opcode {
                    WcOpcode::Recv => return Err("a message arrived out of turn".into()),
                    _ => self.signaled_out = false,
                }
            }
        }
        Ok(())
    }

    /// Wait for the other side's message number `n`; false if none came by `deadline`.
    #[inline]
    fn recv(&mut self, n: u64, deadline: Instant) -> Result<bool, String> {
        if self.plan.verb == Verb::Write {
            return poll_memory(self.side, self.plan.size, mark(n), deadline);
        }
        loop {
            // With -e, sleep on the channel; otherwise spin on the CQ.
            let got = self.poll.wait(deadline)?;
            if got == 0 {
                return Ok(false);
            }
            let mut recvs = 0;
            for wc in &self.poll.wcs[..got] {
                if wc.opcode == WcOpcode::Recv {
                    recvs += 1;
                } else {
                    self.signaled_out = false;
                }
            }
            for _ in 0..recvs {
                post_recv(self.side, 0)?;
            }
            match recvs {
                0 => {}
                1 => return Ok(true),
                k => return Err(format!("{k} messages arrived at once in a ping-pong")),
            }
        }
    }
}

/// Calls `tick` about every 4096 iterations with how many are done (for a progress line).
pub(super) type Tick<'t> = &'t mut dyn FnMut(u64);

/// The client's side of a latency test: ping-pong for SEND and WRITE, one READ or atomic at a
/// time otherwise; a timestamp right before each post (as perftest takes `tposted`).
pub(super) fn client_lat(
    side: &Side,
    plan: Plan,
    remote: Remote,
    tick: Tick,
) -> Result<Raw, String> {
    let mut raw = Raw::default();
    let stamp = Stamp::start();
    let t0 = Instant::now();
    let end = plan.duration.map(|d| t0 + d);
    let deadline = t0 + plan.duration.unwrap_or_default() + PHASE;
    if end.is_none() {
        raw.posted.reserve_exact(plan.iters as usize);
    }
    let mut i = 0u64;
    let mut pp = PingPong::new(side, plan, remote);
    loop {
        match end {
            Some(e) if i.is_multiple_of(64) && Instant::now() >= e => break,
            None if i == plan.iters => break,
            _ => {}
        }
        if end.is_none() {
            raw.posted.push(stamp.ns());
        }
        match plan.verb {
            Verb::Send | Verb::Write => {
                pp.send(deadline)?;
                if !pp.recv(i + 1, deadline)? {
                    return Err(format!("no reply to message {} within the time bound", i + 1));
                }
            }
            Verb::Read | Verb::Atomic => {
                let sge = [local_sge(side, &plan)];
                let mut wr = work_request(side, 0, &plan, &sge, remote);
                wr.wr_id = i;
                wr.send_flags |= SendFlags::SIGNALED;
                side.qps[0].post_send(&[wr]).map_err(|e| e.to_string())?;
                pp.poll.must(deadline)?;
            }
        }
        i += 1;
        if i.is_multiple_of(4096) {
            tick(i);
        }
    }
    raw.elapsed_ns = t0.elapsed().as_nanos() as u64;
    raw.ops = i;
    pp.reap(deadline)?;
    Ok(raw)
}

/// The peer's side of a SEND or WRITE ping-pong: reply to each message. Stops after `iters`
/// (when known) or once nothing has come for [`IDLE_GAP`]; returns how many it answered.
pub(super) fn peer_pingpong(
    side: &Side,
    plan: Plan,
    remote: Remote,
    first_bound: Duration,
) -> Result<u64, String> {
    let mut pp = PingPong::new(side, plan, remote);
    let stop = Instant::now() + first_bound + plan.duration.unwrap_or_default() + PHASE;
    let mut n = 0u64;
    loop {
        if plan.iters != 0 && n == plan.iters {
            break;
        }
        let gap = if n == 0 { first_bound } else { IDLE_GAP };
        let bound = if plan.iters != 0 { stop } else { (Instant::now() + gap).min(stop) };
        if !pp.recv(n + 1, bound)? {
            if plan.iters != 0 {
                return Err(format!("message {} never came", n + 1));
            }
            break;
        }
        n += 1;
        pp.send(stop)?;
    }
    pp.reap(stop)?;
    Ok(n)
}

/// The client's side of a bandwidth test: keep `tx_depth` operations outstanding on every QP,
/// one in `cq_mod` signaled; `iters` per QP, or for the duration (then one last signaled
/// operation per QP drains the queue).
pub(super) fn client_bw(
    side: &Side,
    plan: Plan,
    remote: Remote,
    tick: Tick,
) -> Result<Raw, String> {
    let nq = side.qps.len();
    let mut raw = Raw::default();
    let timed = plan.duration.is_none();
    if timed {
        raw.posted.reserve_exact(plan.iters as usize * nq);
        raw.completed.reserve_exact((plan.iters as usize * nq) / plan.cq_mod as usize + nq);
    }
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    // Each QP's count the run ends at; a duration run sets them when the time is up.
    let mut limit = vec![if timed { plan.iters } else { u64::MAX }; nq];
    let sge = [local_sge(side, &plan)];
    // One work request per QP, built once: a post changes only its wr_id and flags.
    let mut wrs: Vec<SendWr> =
        (0..nq).map(|q| work_request(side, q, &plan, &sge, remote)).collect();
    let flags = wrs.first().map_or(SendFlags::empty(), |w| w.send_flags);
    let mut poll = Poller::new(side);
    let stamp = Stamp::start();
    let t0 = Instant::now();
    let end = plan.duration.map(|d| t0 + d);
    let deadline = t0 + plan.duration.unwrap_or_default() + PHASE;
    let mut total_done = 0u64;
    let mut last_tick = 0u64;
    loop {
        for q in 0..nq {
            while posted[q] < limit[q] && posted[q] - done[q] < u64::from(plan.tx_depth) {
                let k = posted[q];
                let wr = &mut wrs[q];
                wr.wr_id = ((q as u64) << 48) | k;
                wr.send_flags = flags;
                if (k + 1).is_multiple_of(u64::from(plan.cq_mod)) || k + 1 == limit[q] {
                    wr.send_flags |= SendFlags::SIGNALED;
                }
                if timed {
                    raw.posted.push(stamp.ns());
                }
                side.qps[q].post_send(std::slice::from_ref(wr)).map_err(|e| e.to_string())?;
                posted[q] += 1;
            }
        }
        if let Some(e) = end {
            if limit[0] == u64::MAX && Instant::now() >= e {
                // Time is up: each QP's next post is its last, and signaled, so that every
                // operation posted is reaped and the queues are empty for the next size.
                for q in 0..nq {
                    limit[q] = posted[q] + 1;
                }
                continue;
            }
        }
        if (0..nq).all(|q| done[q] >= limit[q]) {
            break;
        }
        let n = poll.must(deadline)?;
        for wc in &poll.wcs[..n] {
            let q = (wc.wr_id >> 48) as usize;
            let k = wc.wr_id & ((1 << 48) - 1);
            let Some(d) = done.get_mut(q) else {
                return Err(format!("a completion with an unknown wr_id {:#x}", wc.wr_id));
            };
            total_done += k + 1 - *d;
            *d = k + 1;
            if timed {
                raw.completed.push((total_done, stamp.ns()));
            }
        }
        if total_done - last_tick >= 4096 {
            last_tick = total_done;
            tick(total_done);
        }
    }
    raw.elapsed_ns = t0.elapsed().as_nanos() as u64;
    raw.ops = total_done;
    Ok(raw)
}

/// The peer's side of `send_bw`: keep receives posted and count the messages. Stops after
/// `expect` (when known) or once nothing has come for [`IDLE_GAP`]; returns the count.
pub(super) fn peer_receive(
    side: &Side,
    plan: Plan,
    expect: u64,
    first_bound: Duration,
) -> Result<u64, String> {
    let mut poll = Poller::new(side);
    let stop = Instant::now() + first_bound + plan.duration.unwrap_or_default() + PHASE;
    let mut got = 0u64;
    let mut last = Instant::now();
    let mut spins = 0u32;
    while expect == 0 || got < expect {
        // With -e, sleep on the channel (a short while, to look at the clock); else spin.
        let n = if side.channel.is_some() {
            poll.wait(Instant::now() + Duration::from_millis(50))?
        } else {
            poll.try_poll()?
        };
        for wc in &poll.wcs[..n] {
            if wc.opcode == WcOpcode::Recv {
                got += 1;
                post_recv(side, wc.wr_id as usize)?;
            }
        }
        if n > 0 {
            last = Instant::now();
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) || side.channel.is_some() {
            let now = Instant::now();
            let gap = if got == 0 { first_bound } else { IDLE_GAP };
            if now >= stop || (expect == 0 && now.duration_since(last) >= gap) {
                if expect != 0 {
                    return Err(format!("{got} of {expect} messages arrived"));
                }
                break;
            }
        }
    }
    Ok(got)
}
