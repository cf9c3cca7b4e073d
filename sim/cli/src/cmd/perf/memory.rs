//! `softverbs perf memory`: the resident memory of an open device, step by step — baseline,
//! device opened, a PD, N CQs (per entry), N MRs (per MR beyond its own pages), N RC QPs created
//! and connected to a peer process (per QP), and after a burst of traffic through them all —
//! read from /proc/self/status and /proc/self/smaps_rollup, with the fabric's shared-memory
//! inbox per port; `--max-mib` makes it a check (issue 21, item 3).

use std::time::Instant;

use softverbs_sim::peer::{FabricDir, Parent};
use verbs_api::conn::{self, PortAddress};
use verbs_api::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCap, QpType, QueuePair, RdmaTarget,
    SendFlags, SendWr, WorkCompletion, WrOpcode,
};

use super::runner::{self, poll_some, run_dir, Launcher, HANDSHAKE, PHASE, RX_DEPTH, SQ_DEPTH};
use super::Common;
use crate::cmd::{self, CliError};
use nic_model::wire::InboxConfig;

/// Most QPs one run connects (the device's `max_qp` bounds it too).
const MAX_QPS: u32 = 16384;
const CLIENT_PSN: u32 = 0x00_2000;
const SERVER_PSN: u32 = 0x00_9000;

#[derive(clap::Args, Debug, Clone)]
pub(super) struct MemArgs {
    /// RC QPs to create, connect to the peer process and send through.
    #[arg(short = 'q', long = "qps", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=MAX_QPS as i64))]
    qps: u32,
    /// Send queue depth of each QP (max_send_wr) [default: as `softverbs perf lat`/`bw`;
    /// perftest's ib_write_bw uses 128].
    #[arg(short = 't', long = "tx-depth", default_value_t = SQ_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..=16384))]
    tx_depth: u32,
    /// Receive queue depth of each QP (max_recv_wr) [default: as `softverbs perf lat`/`bw`].
    #[arg(short = 'r', long = "rx-depth", default_value_t = 2 * RX_DEPTH as u32,
          value_parser = clap::value_parser!(u32).range(1..=16384))]
    rx_depth: u32,
    /// CQs to create in the CQ step.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    cqs: u32,
    /// Entries of each of those CQs (cqe).
    #[arg(long = "cq-entries", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    cq_entries: u32,
    /// MRs to register in the MR step (every page written, so resident).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=65536))]
    mrs: u32,
    /// Bytes of each MR.
    #[arg(long = "mr-size", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(8..=(1 << 24)))]
    mr_size: u32,
    /// RDMA WRITEs of --size bytes each QP sends in the traffic burst (then one READ each way).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    writes: u32,
    /// Bytes of each WRITE and READ of the burst (up to --mr-size).
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=(1 << 24)))]
    size: u32,
    /// Fail (exit status 1, the table printed) if the device's growth beyond registered memory
    /// exceeds this many MiB.
    #[arg(long = "max-mib", value_name = "MIB")]
    max_mib: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: Common,
}

/// One reading of this process's memory, in KiB.
#[derive(Clone, Copy, Debug, Default)]
struct Mem {
    /// VmRSS: every resident page.
    rss: u64,
    /// RssAnon: heap, stacks, anonymous mappings (the emulator's own objects live here).
    anon: u64,
    /// RssFile: resident pages of mapped files (libraries; an inbox whose fabric directory is on
    /// a disk file system rather than tmpfs).
    file: u64,
    /// RssShmem: resident pages of shared memory (the fabric's inbox segments in /dev/shm).
    shmem: u64,
    /// Private_Clean + Private_Dirty of smaps_rollup: pages only this process maps.
    private: u64,
    /// Shared_Clean + Shared_Dirty of smaps_rollup: pages another process maps too (an inbox
    /// page the peer has written to, shared libraries).
    shared: u64,
}

/// `key:   N kB` lines of a /proc file, summed over `keys`.
fn kib(text: &str, keys: &[&str]) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| keys.contains(&k.trim()))
        .filter_map(|(_, v)| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn read_mem() -> Result<Mem, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup")
        .map_err(|e| format!("reading /proc/self/smaps_rollup: {e}"))?;
    Ok(Mem {
        rss: kib(&status, &["VmRSS"]),
        anon: kib(&status, &["RssAnon"]),
        file: kib(&status, &["RssFile"]),
        shmem: kib(&status, &["RssShmem"]),
        private: kib(&rollup, &["Private_Clean", "Private_Dirty"]),
        shared: kib(&rollup, &["Shared_Clean", "Shared_Dirty"]),
    })
}

/// One row of the table.
struct Step {
    name: String,
    mem: Mem,
    /// Objects the step made and what one is: ("QP", 1000).
    per: Option<(&'static str, u64)>,
    /// Registered bytes the step made resident (not counted against the device).
    registered: u64,
}

/// What the client measured, printed as a table or JSON.
struct Report {
    steps: Vec<Step>,
    inbox_bytes: u64,
    inbox_slots: u32,
    slot_size: u32,
}

impl Report {
    fn baseline(&self) -> Mem {
        self.steps[0].mem
    }
    fn registered(&self) -> u64 {
        self.steps.iter().map(|s| s.registered).sum()
    }
    /// Resident growth since the baseline, beyond registered memory, in bytes.
    fn beyond_registered(&self) -> u64 {
        let last = self.steps.last().map_or(0, |s| s.mem.rss);
        (last.saturating_sub(self.baseline().rss) * 1024).saturating_sub(self.registered())
    }
}

fn mib(kib: f64) -> String {
    format!("{:.2}", kib / 1024.0)
}

/// The client: measure each step; the peer process holds the other end of every QP.
pub(super) fn memory(me: &Launcher, a: &MemArgs) -> Result<(), CliError> {
    if a.size > a.mr_size {
        return Err(CliError::usage(format!(
            "-s {} is larger than --mr-size {}: the burst's WRITEs and READs come from one MR",
            a.size, a.mr_size
        )));
    }
    let fabric = run_dir(a.common.fabric.as_deref())?;
    let r = measure(me, a, &fabric)?;
    let beyond = r.beyond_registered();
    if a.json {
        outln!("{}", json(a, &r));
    } else {
        table(a, &r)?;
    }
    match a.max_mib {
        Some(m) if beyond > m << 20 => Err(CliError::failed(format!(
            "the device grew {} MiB beyond registered memory, more than --max-mib {m}",
            mib(beyond as f64 / 1024.0)
        ))),
        _ => Ok(()),
    }
}

/// Step `name`: read memory now.
fn step(
    steps: &mut Vec<Step>,
    name: String,
    per: Option<(&'static str, u64)>,
    registered: u64,
) -> Result<(), String> {
    steps.push(Step { name, mem: read_mem()?, per, registered });
    Ok(())
}

fn measure(me: &Launcher, a: &MemArgs, fabric: &FabricDir) -> Result<Report, CliError> {
    let mut steps = Vec::new();
    step(&mut steps, "process baseline".into(), None, 0)?;
    let _soft = cmd::register_fabric(Some(fabric.path()))?;
    let ctx = cmd::open_device(&a.common.ib_dev)?;
    let addr = cmd::port_address(&ctx, a.common.gid_idx)?;
    check_limits(&ctx, a)?;
    step(&mut steps, "device opened".into(), None, 0)?;
    // This port's inbox is the one segment in the fabric directory before the peer starts.
    // (Its reach file, a sparse 64 GiB, holds the arena of MR memory: counted as MRs' pages.)
    let inbox_bytes = fabric
        .segment_files()?
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "inbox"))
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let InboxConfig { slots: inbox_slots, slot_size, .. } = InboxConfig::default();

    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    step(&mut steps, "+1 PD".into(), None, 0)?;

    let cqs: Vec<CompletionQueue> = (0..a.cqs)
        .map(|_| ctx.create_cq(a.cq_entries, None, 0))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let name = format!("+{} CQs of {} entries", a.cqs, a.cq_entries);
    step(&mut steps, name, Some(("CQ entry", u64::from(a.cqs) * u64::from(a.cq_entries))), 0)?;

    let page = vec![0x5au8; a.mr_size as usize];
    let mrs: Vec<MemoryRegion> = (0..a.mrs)
        .map(|_| {
            let mr = pd.reg_mr(a.mr_size as usize, AccessFlags::all())?;
            mr.write(0, &page)?;
            Ok(mr)
        })
        .collect::<Result<_, verbs_api::Error>>()
        .map_err(|e| e.to_string())?;
    let name = format!("+{} MRs of {} B (written)", a.mrs, a.mr_size);
    step(
        &mut steps,
        name,
        Some(("MR", u64::from(a.mrs))),
        u64::from(a.mrs) * u64::from(a.mr_size),
    )?;

    // The QPs complete into one CQ of their own, as perftest's -q runs do.
    let cq = ctx.create_cq(cq_depth(a), None, 0).map_err(|e| e.to_string())?;
    let qps: Vec<QueuePair> = (0..a.qps)
        .map(|_| conn::create_qp_on(&pd, &cq, QpType::Rc, cap(a)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let name = format!("+{} RC QPs (sq {}, rq {}) created", a.qps, a.tx_depth, a.rx_depth);
    step(&mut steps, name, Some(("QP", u64::from(a.qps))), 0)?;

    let mut peer = me.spawn("memory", &a.common, fabric.path(), &peer_args(a))?;
    let local = &mrs[0];
    let mut remote = (0, 0);
    for (i, qp) in qps.iter().enumerate() {
        let mine = addr.qp_info(qp, CLIENT_PSN);
        let (theirs, mr) = peer.swap_info(&mine, Some((local.addr(), local.rkey())), HANDSHAKE)?;
        remote = mr.ok_or("the peer's INFO names no memory region")?;
        runner::connect_qp(qp, &addr, CLIENT_PSN, &theirs).map_err(|e| format!("QP {i}: {e}"))?;
    }
    peer.expect("READY", HANDSHAKE)?;
    step(&mut steps, format!("{} QPs connected (RTS)", a.qps), Some(("QP", u64::from(a.qps))), 0)?;

    // Traffic: this side WRITEs and READs through every QP, then the peer does the same to
    // this side, so both the requester's and the responder's state is exercised here.
    burst(&qps, &cq, local, remote, a).map_err(|e| format!("the traffic burst: {e}"))?;
    peer.send_line("BURST")?;
    peer.expect("DONE", PHASE)?;
    let name = format!("after {} WRITEs + 1 READ each way per QP", a.writes);
    step(&mut steps, name, Some(("QP", u64::from(a.qps))), 0)?;
    peer.close_stdin();
    peer.finish(HANDSHAKE)?;
    drop((qps, cq, mrs, cqs, pd, ctx));
    Ok(Report { steps, inbox_bytes, inbox_slots, slot_size })
}

/// The device must allow what was asked: a usage error naming the flag otherwise.
fn check_limits(ctx: &Context, a: &MemArgs) -> Result<(), CliError> {
    let d = ctx.query_device().map_err(|e| e.to_string())?;
    let checks = [
        ("-q", a.qps, d.max_qp, "max_qp"),
        ("--cqs", a.cqs + 1, d.max_cq, "max_cq"),
        ("--cq-entries", a.cq_entries.max(cq_depth(a)), d.max_cqe, "max_cqe"),
        ("--mrs", a.mrs, d.max_mr, "max_mr"),
        ("-t", a.tx_depth, d.max_qp_wr, "max_qp_wr"),
        ("-r", a.rx_depth, d.max_qp_wr, "max_qp_wr"),
    ];
    for (flag, want, max, field) in checks {
        if want > max {
            return Err(CliError::usage(format!(
                "{flag}: {} allows {field} {max}, this run needs {want}",
                ctx.device_name()
            )));
        }
    }
    Ok(())
}

fn cap(a: &MemArgs) -> QpCap {
    QpCap {
        max_send_wr: a.tx_depth,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// The QPs' shared CQ: room for one burst window of every QP.
fn cq_depth(a: &MemArgs) -> u32 {
    a.qps.saturating_mul(a.writes + 2).clamp(64, 65536)
}

fn peer_args(a: &MemArgs) -> Vec<String> {
    [
        ("-q", a.qps),
        ("-t", a.tx_depth),
        ("-r", a.rx_depth),
        ("--mr-size", a.mr_size),
        ("--writes", a.writes),
        ("-s", a.size),
    ]
    .iter()
    .flat_map(|(f, v)| [f.to_string(), v.to_string()])
    .collect()
}

/// Every QP in turn: `a.writes` WRITEs of `a.size` bytes and one READ, all signaled, each QP's
/// completions reaped before the next QP posts (the CQ is shared).
fn burst(
    qps: &[QueuePair],
    cq: &CompletionQueue,
    local: &MemoryRegion,
    (raddr, rkey): (u64, u32),
    a: &MemArgs,
) -> Result<(), String> {
    let sge = [local.sge(0, a.size)];
    let write = SendWr {
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: raddr, rkey },
        ..Default::default()
    };
    let read = SendWr { opcode: WrOpcode::RdmaRead, ..write.clone() };
    let mut wcs = [WorkCompletion::default(); 64];
    let deadline = Instant::now() + PHASE;
    for qp in qps {
        for _ in 0..a.writes {
            qp.post_send(std::slice::from_ref(&write)).map_err(|e| e.to_string())?;
        }
        qp.post_send(std::slice::from_ref(&read)).map_err(|e| e.to_string())?;
        let mut done = 0;
        while done < a.writes as usize + 1 {
            done += poll_some(cq, &mut wcs, deadline)?.0;
        }
    }
    Ok(())
}

/// The peer process: the other end of every QP; on `BURST`, it sends the same burst back.
pub(super) fn memory_peer(a: &MemArgs) -> Result<(), CliError> {
    let fabric = a.common.fabric.clone().ok_or("the peer needs --fabric")?;
    let _soft = cmd::register_fabric(Some(&fabric))?;
    let ctx = cmd::open_device(&a.common.ib_dev)?;
    let addr: PortAddress = cmd::port_address(&ctx, a.common.gid_idx)?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let mr = pd.reg_mr(a.mr_size as usize, AccessFlags::all()).map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(cq_depth(a), None, 0).map_err(|e| e.to_string())?;
    let mut parent = Parent::stdio();
    let mut qps = Vec::with_capacity(a.qps as usize);
    let mut remote = (0, 0);
    for _ in 0..a.qps {
        let qp = conn::create_qp_on(&pd, &cq, QpType::Rc, cap(a)).map_err(|e| e.to_string())?;
        let mine = addr.qp_info(&qp, SERVER_PSN);
        let (theirs, theirs_mr) = parent.swap_info(&mine, Some((mr.addr(), mr.rkey())))?;
        remote = theirs_mr.ok_or("the parent's INFO names no memory region")?;
        runner::connect_qp(&qp, &addr, SERVER_PSN, &theirs)?;
        qps.push(qp);
    }
    parent.say("READY")?;
    parent.expect_exactly("BURST")?;
    burst(&qps, &cq, &mr, remote, a)?;
    parent.say("DONE")?;
    // Stay until the parent has read its last step and closes our input.
    while parent.line()?.is_some() {}
    Ok(())
}

/// The table, with the per-object cost of each step and where the megabytes go.
fn table(a: &MemArgs, r: &Report) -> Result<(), CliError> {
    outln!(
        "softverbs perf memory: resident memory of {} as objects are added; the peer process \
         holds the other end of every QP",
        a.common.ib_dev
    );
    outln!("machine: {}", runner::machine());
    outln!(
        "{:<44} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
        "step",
        "RSS MiB",
        "delta",
        "anon",
        "file",
        "shmem",
        "shared",
        "per object"
    );
    let mut prev = r.baseline();
    for s in &r.steps {
        let delta = s.mem.rss as f64 - prev.rss as f64;
        let per = s.per.map_or(String::new(), |(what, n)| {
            // The device's own objects are heap (anon) memory. The pages of MRs that own
            // their memory are in the device's reach file (shmem or file, docs/guide.md,
            // "Direct reach"), or heap when it has none: an MR step counts all of its growth.
            if s.registered > 0 {
                let own = delta * 1024.0 - s.registered as f64;
                format!("{:.0} B per {what} beyond its pages", own / n as f64)
            } else {
                let anon = s.mem.anon as f64 - prev.anon as f64;
                format!("{:.0} B heap per {what}", anon * 1024.0 / n as f64)
            }
        });
        outln!(
            "{:<44} {:>8} {:>+8.2} {:>8} {:>8} {:>8} {:>8}  {}",
            s.name,
            mib(s.mem.rss as f64),
            delta / 1024.0,
            mib(s.mem.anon as f64),
            mib(s.mem.file as f64),
            mib(s.mem.shmem as f64),
            mib(s.mem.shared as f64),
            per
        );
        prev = s.mem;
    }
    outln!(
        "fabric shared memory: {} B inbox per port ({} slots × {} B, plus slot and file \
         headers), this device's and each peer's it sends to; resident as slots are written; \
         counted in RSS as shmem (tmpfs, /dev/shm) or file (a fabric directory on disk), and \
         as shared once the other process has touched the same page",
        r.inbox_bytes,
        r.inbox_slots,
        r.slot_size
    );
    outln!("per object: heap (anon) growth of the step over the objects it made");
    outln!(
        "registered memory: {} B; device growth beyond it: {} MiB for {} connected RC QPs",
        r.registered(),
        mib(r.beyond_registered() as f64 / 1024.0),
        a.qps
    );
    Ok(())
}

fn json(a: &MemArgs, r: &Report) -> String {
    let steps: Vec<String> = r
        .steps
        .iter()
        .map(|s| {
            format!(
                "{{\"step\":\"{}\",\"rss_kib\":{},\"anon_kib\":{},\"file_kib\":{},\"shmem_kib\":{},\
                 \"private_kib\":{},\"shared_kib\":{},\"objects\":{},\"registered\":{}}}",
                s.name,
                s.mem.rss,
                s.mem.anon,
                s.mem.file,
                s.mem.shmem,
                s.mem.private,
                s.mem.shared,
                s.per.map_or(0, |p| p.1),
                s.registered
            )
        })
        .collect();
    format!(
        "{{\"test\":\"memory\",\"qps\":{},\"tx_depth\":{},\"rx_depth\":{},\"inbox_bytes\":{},\
         \"registered_bytes\":{},\"beyond_registered_bytes\":{},\"steps\":[{}]}}",
        a.qps,
        a.tx_depth,
        a.rx_depth,
        r.inbox_bytes,
        r.registered(),
        r.beyond_registered(),
        steps.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_summed_in_kib() {
        let text = "Name:\tx\nVmRSS:\t  1234 kB\nRssAnon:\t 1000 kB\nShared_Clean:  5 kB\n\
                    Shared_Dirty: 7 kB\n";
        assert_eq!(kib(text, &["VmRSS"]), 1234);
        assert_eq!(kib(text, &["Shared_Clean", "Shared_Dirty"]), 12);
        assert_eq!(kib(text, &["RssShmem"]), 0);
    }
}
