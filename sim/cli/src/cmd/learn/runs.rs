//! The measured runs the lessons are made of, each done once by RDMA and once by TCP between
//! the same two processes: a ping-pong (latency, system calls per message) and a one-way stream
//! (bandwidth, copies, CPU per byte). Each returns both processes' books over the run.

use std::time::{Duration, Instant};

use verbs_api::{RdmaTarget, SendFlags, SendWr, WrOpcode};

use super::measure::Snap;
use super::session::{self, parse_done, Session, DEPTH, WAIT};
use super::tcp::TcpCount;

/// One run's measurements.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Wall-clock time of the run, on the initiator.
    pub wall: Duration,
    /// The initiator's books over the run.
    pub mine: Snap,
    /// The target's books over the run.
    pub theirs: Snap,
    /// The initiator's TCP calls (TCP runs).
    pub tcp_mine: TcpCount,
    /// The target's TCP calls (TCP runs).
    pub tcp_theirs: TcpCount,
    /// Messages the run carried (both directions).
    pub messages: u64,
    /// Bytes the run carried (both directions).
    pub bytes: u64,
}

impl Run {
    /// Both processes' books together.
    pub fn both(&self) -> Snap {
        self.mine.plus(&self.theirs)
    }

    /// Both sides' TCP calls together.
    pub fn tcp_calls(&self) -> u64 {
        self.tcp_mine.calls() + self.tcp_theirs.calls()
    }
}

fn since(now: &TcpCount, then: &TcpCount) -> TcpCount {
    TcpCount {
        reads: now.reads - then.reads,
        writes: now.writes - then.writes,
        read_bytes: now.read_bytes - then.read_bytes,
        written_bytes: now.written_bytes - then.written_bytes,
    }
}

/// `iters` round trips of `size`-byte SENDs; both programs busy-poll their CQs.
pub fn rdma_pingpong(s: &mut Session, iters: usize, size: u32) -> Result<Run, String> {
    let ahead = iters.min(DEPTH as usize / 2);
    for i in 0..ahead {
        session::post_recv(&s.ep, i as u64, 0, size)?;
    }
    s.ask(&format!("ECHO {iters} {size}"), "GO")?;
    let before = Snap::take();
    let t0 = Instant::now();
    let (mut posted, mut sends) = (ahead, 0);
    for i in 0..iters {
        session::wait_sends(&s.ep, &mut sends, i.saturating_sub(DEPTH as usize / 2))?;
        session::post_send(&s.ep, i as u64, 4096, size)?;
        session::wait_recv(&s.ep, &mut sends)?;
        if posted < iters {
            session::post_recv(&s.ep, posted as u64, 0, size)?;
            posted += 1;
        }
    }
    session::wait_sends(&s.ep, &mut sends, iters)?;
    let wall = t0.elapsed();
    let mine = Snap::take_end().since(&before);
    let (theirs, _, _) = parse_done(&s.peer.expect("DONE", WAIT)?)?;
    let n = 2 * iters as u64;
    Ok(Run { wall, mine, theirs, messages: n, bytes: n * u64::from(size), ..Run::default() })
}

/// `iters` round trips of `size` bytes over TCP: each side writes, then reads until the
/// whole message is there.
pub fn tcp_pingpong(s: &mut Session, iters: usize, size: usize) -> Result<Run, String> {
    s.ask(&format!("TCPECHO {iters} {size}"), "GO")?;
    let mut buf = vec![0x33u8; size];
    let c0 = s.tcp.count;
    let before = Snap::take();
    let t0 = Instant::now();
    for _ in 0..iters {
        s.tcp.write_all(&buf)?;
        s.tcp.read_total(size as u64, &mut buf)?;
    }
    let wall = t0.elapsed();
    let mine = Snap::take_end().since(&before);
    let tcp_mine = since(&s.tcp.count, &c0);
    let (theirs, tcp_theirs, _) = parse_done(&s.peer.expect("DONE", WAIT)?)?;
    let n = 2 * iters as u64;
    Ok(Run { wall, mine, theirs, tcp_mine, tcp_theirs, messages: n, bytes: n * size as u64 })
}

/// Which way a one-sided stream goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// RDMA WRITEs into the target's memory (TCP: this side sends, the target receives).
    ToTarget,
    /// RDMA READs of the target's memory (TCP: the target sends, this side receives).
    FromTarget,
}

/// `total` bytes as RDMA WRITEs (or READs) of `msg` bytes, up to [`DEPTH`]/2 outstanding, over
/// the target's MR again and again; the target program only waits for its next command line.
pub fn rdma_stream(s: &mut Session, way: Way, total: u64, msg: u32) -> Result<Run, String> {
    let slots = (s.ep.mr.len() / msg as usize).clamp(1, DEPTH as usize / 2);
    let count = total.div_ceil(u64::from(msg)) as usize;
    let (raddr, rkey) = s.remote;
    let theirs0 = s.their_snap(false)?;
    let before = Snap::take();
    let t0 = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    while done < count {
        while posted < count && posted - done < slots {
            let off = (posted % slots) * msg as usize;
            let len = (total - posted as u64 * u64::from(msg)).min(u64::from(msg)) as u32;
            let sge = [s.ep.mr.sge(off, len)];
            let wr = SendWr {
                wr_id: posted as u64,
                sg_list: &sge,
                opcode: if way == Way::ToTarget { WrOpcode::RdmaWrite } else { WrOpcode::RdmaRead },
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget { remote_addr: raddr + off as u64, rkey },
                ..Default::default()
            };
            s.ep.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
            posted += 1;
        }
        done += session::poll(&s.ep, 1)?.len();
    }
    let wall = t0.elapsed();
    let mine = Snap::take_end().since(&before);
    let theirs = s.their_snap(true)?.since(&theirs0);
    Ok(Run { wall, mine, theirs, messages: count as u64, bytes: total, ..Run::default() })
}

/// `total` bytes over TCP in writes of `chunk` bytes, read into a `chunk`-byte buffer.
pub fn tcp_stream(s: &mut Session, way: Way, total: u64, chunk: usize) -> Result<Run, String> {
    let cmd = match way {
        Way::ToTarget => format!("TCPRECV {total} {chunk}"),
        Way::FromTarget => format!("TCPSEND {total} {chunk}"),
    };
    s.ask(&cmd, "GO")?;
    let mut buf = vec![0x5au8; chunk];
    let c0 = s.tcp.count;
    let before = Snap::take();
    let t0 = Instant::now();
    match way {
        Way::ToTarget => {
            let mut left = total;
            while left > 0 {
                let n = left.min(chunk as u64) as usize;
                s.tcp.write_all(&buf[..n])?;
                left -= n as u64;
            }
        }
        Way::FromTarget => {
            s.tcp.read_total(total, &mut buf)?;
        }
    }
    // The run ends when the receiver has everything: its DONE comes after its last read.
    let tcp_mine = since(&s.tcp.count, &c0);
    let mine_now = Snap::take_end();
    let (theirs, tcp_theirs, _) = parse_done(&s.peer.expect("DONE", WAIT)?)?;
    let wall = t0.elapsed();
    let mine = mine_now.since(&before);
    let messages = total.div_ceil(chunk as u64);
    Ok(Run { wall, mine, theirs, tcp_mine, tcp_theirs, messages, bytes: total })
}
