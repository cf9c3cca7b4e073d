//! `softverbs perf lat`: RC SEND ping-pong between two processes, half round trip per message
//! (median of the runs' medians, percentiles over every iteration), and on request the CPU time
//! each process spends idle afterwards (what `perf idle` and `perf spin` read).

use std::time::{Duration, Instant};

use softverbs_sim::peer::Parent;
use verbs_api::conn::Endpoint;
use verbs_api::{RecvWr, SendFlags, SendWr, WorkCompletion, WrOpcode};

use super::runner::{
    accept_parent, connect_to_peer, machine, poll_some, process_cpu_ns, run_dir, Launcher,
    HANDSHAKE, PHASE, RX_DEPTH,
};
use super::stats::{iterations, median, us, Dist};
use super::Common;
use crate::cmd::CliError;

/// Ping-pong sends are signaled every this many (selective signaling, as perftest does).
const SIGNAL_EVERY: u64 = 32;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct LatArgs {
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) size: u32,
    /// Measured iterations per run.
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) iters: u64,
    /// Unmeasured iterations before the first run.
    #[arg(short = 'w', long, default_value_t = 10_000)]
    pub(super) warmup: u64,
    /// Runs (each reports its own median).
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) runs: u64,
    /// After the runs, sleep this long connected and report each process's CPU time.
    #[arg(long, hide = true, default_value_t = 0.0)]
    pub(super) idle_seconds: f64,
    #[command(flatten)]
    pub(super) common: Common,
}

/// The ping-pong loop both sides run: one SEND per received message.
struct PingPong<'a> {
    ep: &'a Endpoint,
    size: u32,
    sent: u64,
    wcs: [WorkCompletion; 32],
}

impl<'a> PingPong<'a> {
    fn new(ep: &'a Endpoint, size: u32) -> Result<PingPong<'a>, String> {
        for i in 0..RX_DEPTH {
            post_recv(ep, size, i as u64)?;
        }
        Ok(PingPong { ep, size, sent: 0, wcs: [WorkCompletion::default(); 32] })
    }

    fn send(&mut self) -> Result<(), String> {
        self.sent += 1;
        let sge = [self.ep.mr.sge(0, self.size)];
        let mut flags = if self.size <= 64 { SendFlags::INLINE } else { SendFlags::empty() };
        if self.sent.is_multiple_of(SIGNAL_EVERY) {
            flags |= SendFlags::SIGNALED;
        }
        let wr = SendWr {
            wr_id: self.sent,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: flags,
            ..Default::default()
        };
        self.ep.qp.post_send(&[wr]).map_err(|e| e.to_string())
    }

    /// Wait for one received message and repost its receive.
    fn recv(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            let (_, recvs) = poll_some(&self.ep.cq, &mut self.wcs, deadline)?;
            for _ in 0..recvs {
                post_recv(self.ep, self.size, 0)?;
            }
            match recvs {
                0 => continue,
                1 => return Ok(()),
                n => return Err(format!("{n} messages arrived at once in a ping-pong")),
            }
        }
    }
}

fn post_recv(ep: &Endpoint, size: u32, wr_id: u64) -> Result<(), String> {
    let off = ep.mr.len() / 2;
    let sge = [ep.mr.sge(off, size)];
    ep.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).map_err(|e| e.to_string())
}

/// What `lat` measured.
#[derive(Clone, Debug)]
pub struct LatResult {
    /// Median of the per-run medians, ns (half round trip).
    pub median_ns: f64,
    /// 99th percentile over every measured iteration, ns.
    pub p99_ns: f64,
}

pub(super) fn lat(me: &Launcher, a: &LatArgs) -> Result<LatResult, CliError> {
    if a.iters == 0 || a.runs == 0 || a.size == 0 {
        return Err(CliError::usage("size, iterations and runs must be positive"));
    }
    let total = iterations(a.iters, a.runs, a.warmup)?;
    let dir = run_dir(a.common.fabric.as_deref())?;
    let extra = vec![
        "-s".into(),
        a.size.to_string(),
        "-n".into(),
        total.to_string(),
        "-w".into(),
        "0".into(),
        "-r".into(),
        "1".into(),
        "--idle-seconds".into(),
        a.idle_seconds.to_string(),
    ];
    let mr_len = (2 * a.size as usize).max(4096);
    let (ep, mut peer, _, _) =
        connect_to_peer(me, "lat", &a.common, dir.path(), &extra, (a.size, mr_len))?;
    let mut pp = PingPong::new(&ep, a.size)?;
    peer.send_line("GO")?;
    outln!(
        "softverbs perf lat: {}-byte RC SEND ping-pong between two processes on {}, half round \
         trip",
        a.size,
        a.common.ib_dev
    );
    outln!("machine: {}", machine());
    outln!("data path: {}", super::perftest::SEND_PATH);
    outln!("{} runs x {} iterations after {} warm-up iterations", a.runs, a.iters, a.warmup);
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.warmup {
        pp.send()?;
        pp.recv(deadline)?;
    }
    let mut all = Vec::with_capacity((a.runs * a.iters) as usize);
    let mut run_medians = Vec::new();
    let mut run_means = Vec::new();
    for r in 0..a.runs {
        let deadline = Instant::now() + PHASE;
        let mut samples = Vec::with_capacity(a.iters as usize);
        // One clock read per round trip, right after the post, while the message is on its way
        // (docs/decisions.md, "perf lat reads its clock right after the post"): the iterations
        // run back to back, so each round trip is the distance from one post's read to the
        // next one's; the last ends with the last receive.
        let t_run = Instant::now();
        let mut last = t_run;
        for i in 0..a.iters {
            pp.send()?;
            let now = Instant::now();
            if i > 0 {
                samples.push(now.duration_since(last).as_nanos() as f64 / 2.0);
            }
            last = now;
            pp.recv(deadline)?;
        }
        let end = Instant::now();
        samples.push(end.duration_since(last).as_nanos() as f64 / 2.0);
        // What fi_pingpong reports as usec/xfer: elapsed / (2 x iterations).
        let mean = end.duration_since(t_run).as_nanos() as f64 / a.iters as f64 / 2.0;
        run_means.push(mean);
        all.extend_from_slice(&samples);
        let d = Dist::of(&mut samples);
        run_medians.push(d.p50);
        outln!("{}", d.run_line(r + 1, mean));
    }
    let d = Dist::of(&mut all);
    let med = median(&run_medians);
    let mean = median(&run_means);
    outln!(
        "half round trip (us): median of run medians {}  median of run means {}  min {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        us(med),
        us(mean),
        us(d.min),
        us(d.p50),
        us(d.p90),
        us(d.p99),
        us(d.p999),
        us(d.max)
    );
    let mut idle = String::new();
    if a.idle_seconds > 0.0 {
        let (cpu, wall) = idle_window(a.idle_seconds);
        let theirs = peer.expect("CPU", HANDSHAKE + Duration::from_secs_f64(a.idle_seconds))?;
        let mut it = theirs.split_whitespace().filter_map(|s| s.parse::<f64>().ok());
        let (pc, pw) = (it.next().unwrap_or(0.0), it.next().unwrap_or(1.0));
        let mine = cpu as f64 / wall as f64 * 100.0;
        let other = pc / pw * 100.0;
        outln!(
            "idle for {:.1} s after the runs: CPU {mine:.3}% of a core (this process), {other:.3}% (peer)",
            a.idle_seconds
        );
        idle = format!(" idle_cpu_pct={mine:.4} peer_idle_cpu_pct={other:.4}");
    }
    outln!(
        "RESULT lat size={} iters={} runs={} median_us={} mean_us={} p99_us={} min_us={} p999_us={}{idle}",
        a.size,
        a.iters,
        a.runs,
        us(med),
        us(mean),
        us(d.p99),
        us(d.min),
        us(d.p999)
    );
    peer.finish(HANDSHAKE)?;
    Ok(LatResult { median_ns: med, p99_ns: d.p99 })
}

/// Sleep `seconds` and return (CPU ns of this process, wall ns) over the sleep.
fn idle_window(seconds: f64) -> (u64, u64) {
    let c0 = process_cpu_ns();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let wall = t0.elapsed().as_nanos() as u64;
    (process_cpu_ns().saturating_sub(c0), wall.max(1))
}

pub(super) fn lat_peer(a: &LatArgs) -> Result<(), CliError> {
    let mut parent = Parent::stdio();
    let fabric = a.common.fabric.clone().ok_or("the peer needs --fabric")?;
    let mr_len = (2 * a.size as usize).max(4096);
    let ep = accept_parent(&mut parent, &a.common, &fabric, (a.size, mr_len))?;
    // Post the receives before READY so the first SEND never meets an empty RQ.
    let mut pp = PingPong::new(&ep, a.size)?;
    parent.say("READY")?;
    parent.expect("GO")?;
    let deadline = Instant::now() + PHASE;
    for _ in 0..a.iters {
        pp.recv(deadline)?;
        pp.send()?;
    }
    if a.idle_seconds > 0.0 {
        let (cpu, wall) = idle_window(a.idle_seconds);
        parent.say(&format!("CPU {cpu} {wall}"))?;
    }
    // Stay until the parent is done with the last completions.
    while parent.line()?.is_some() {}
    Ok(())
}
