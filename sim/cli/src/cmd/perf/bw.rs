//! `softverbs perf bw`: RDMA WRITE bandwidth with a window of outstanding WRITEs, the data
//! checked at the target afterwards.

use std::time::Instant;

use softverbs_sim::peer::Parent;
use verbs_api::{RdmaTarget, SendFlags, SendWr, WorkCompletion, WrOpcode};

use super::runner::{
    accept_parent, connect_to_peer, machine, poll_some, run_dir, Launcher, HANDSHAKE, PHASE,
    SQ_DEPTH,
};
use super::stats::median;
use super::Common;
use crate::cmd::CliError;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct BwArgs {
    /// WRITE size in bytes.
    #[arg(short = 's', long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) size: u32,
    /// WRITEs per run.
    #[arg(short = 'n', long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) iters: u64,
    /// Outstanding WRITEs (at most the send queue depth, 256, minus one).
    #[arg(short = 'W', long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..SQ_DEPTH as i64))]
    pub(super) window: u32,
    /// Runs.
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) runs: u64,
    #[command(flatten)]
    pub(super) common: Common,
}

/// What `bw` measured.
#[derive(Clone, Debug)]
pub struct BwResult {
    /// Median over runs, GB/s (10^9 bytes per second).
    pub median_gbps: f64,
}

fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(7)
}

pub(super) fn bw(me: &Launcher, a: &BwArgs) -> Result<BwResult, CliError> {
    if a.iters == 0 || a.runs == 0 || a.size == 0 || a.window == 0 || a.window >= SQ_DEPTH {
        return Err(CliError::usage(format!(
            "size, iterations and runs must be positive and the window in 1..{SQ_DEPTH}"
        )));
    }
    let dir = run_dir(a.common.fabric.as_deref())?;
    let extra = vec!["-s".into(), a.size.to_string()];
    let len = a.size as usize;
    let (ep, mut peer, raddr, rkey) =
        connect_to_peer(me, "bw", &a.common, dir.path(), &extra, (a.size, len))?;
    let data: Vec<u8> = (0..len).map(pattern).collect();
    ep.mr.write(0, &data).map_err(|e| e.to_string())?;
    outln!(
        "softverbs perf bw: {} B RDMA WRITEs, window {}, between two processes on {}",
        a.size,
        a.window,
        a.common.ib_dev
    );
    outln!("machine: {}", machine());
    outln!("data path: {}", super::perftest::one_sided_path());
    let sge = [ep.mr.sge(0, a.size)];
    let wr = SendWr {
        wr_id: 0,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: raddr, rkey },
        ..Default::default()
    };
    let mut wcs = [WorkCompletion::default(); 32];
    let mut results = Vec::new();
    // One unmeasured run first (page faults, ring warm-up), then the measured ones.
    for r in 0..=a.runs {
        let n = if r == 0 { a.iters.min(64) } else { a.iters };
        let deadline = Instant::now() + PHASE;
        let (mut posted, mut done) = (0u64, 0u64);
        let t0 = Instant::now();
        while done < n {
            while posted < n && posted - done < a.window as u64 {
                ep.qp.post_send(std::slice::from_ref(&wr)).map_err(|e| e.to_string())?;
                posted += 1;
            }
            done += poll_some(&ep.cq, &mut wcs, deadline)?.0 as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        if r > 0 {
            let gbps = n as f64 * a.size as f64 / secs / 1e9;
            outln!("  run {r}: {gbps:.3} GB/s ({:.1} us per WRITE)", secs * 1e6 / n as f64);
            results.push(gbps);
        }
    }
    peer.send_line("CHECK")?;
    let got = peer.expect("SUM", HANDSHAKE)?;
    let want = checksum(&data);
    if got != want.to_string() {
        return Err(format!("the target's memory has checksum {got}, expected {want}").into());
    }
    let med = median(&results);
    let (lo, hi) = results.iter().fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
    outln!("bandwidth (GB/s): median {med:.3}  min {lo:.3}  max {hi:.3}  (data verified at the target)");
    outln!(
        "RESULT bw size={} iters={} window={} runs={} median_gbps={med:.4} min_gbps={lo:.4} max_gbps={hi:.4}",
        a.size, a.iters, a.window, a.runs
    );
    peer.finish(HANDSHAKE)?;
    Ok(BwResult { median_gbps: med })
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

pub(super) fn bw_peer(a: &BwArgs) -> Result<(), CliError> {
    let mut parent = Parent::stdio();
    let fabric = a.common.fabric.clone().ok_or("the peer needs --fabric")?;
    let ep = accept_parent(&mut parent, &a.common, &fabric, (a.size, a.size as usize))?;
    parent.say("READY")?;
    // The target's CPU takes no part: it sleeps in read() while the WRITEs land.
    while let Some(l) = parent.line()? {
        if l == "CHECK" {
            let got = ep.mr.read_vec(0, a.size as usize).map_err(|e| e.to_string())?;
            parent.say(&format!("SUM {}", checksum(&got)))?;
        }
    }
    Ok(())
}
