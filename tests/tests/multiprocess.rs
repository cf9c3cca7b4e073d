//! The soft backend between processes over the shared-memory fabric: one-sided operations
//! served by a sleeping target's NIC thread, a peer SIGKILLed mid-transfer, corrupted and
//! foreign segments, a SEND/RECV ping-pong, cleanup of segments when processes exit, and a
//! dead process's successor that a survivor's retransmissions must not reach.
//!
//! Each test has its own fabric directory and its own `sv-peer` children, both in guards that
//! clean up on panic; at its end it checks that no child runs and no segment file is left. The
//! tests take a common lock so that their processes do not compete for the CPUs, which keeps
//! the timing-sensitive ones (short ACK timeouts) honest on small machines.

use std::collections::VecDeque;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nic_model::engine::{ip_of_slot, slot_of_gid, GID_INDEX_IPV4};
use nic_model::soft::Soft;
use nic_model::wire::{Fabric, InboxConfig, LAYOUT_VERSION};
use softverbs_sim::conn::{self, ConnOpts, Endpoint, QpInfo};
use softverbs_tests::remote::RemoteDevice;
use softverbs_tests::*;
use verbs_api::*;

const PEER: &str = env!("CARGO_BIN_EXE_sv-peer");
/// Bound on waiting for one protocol line from a child.
const LINE_WAIT: Duration = Duration::from_secs(30);
/// Bound on waiting for a child to exit once told to.
const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Bound on this process's NIC threads removing their inboxes after the last handle drops.
const CLEANUP_WAIT: Duration = Duration::from_secs(2);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn spawn_peer(name: &str, mode: &str, dir: &FabricDir, extra: &[&str]) -> Peer {
    let mut args = vec![mode.to_string(), dir.path().display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Peer::spawn(name, PEER.as_ref(), &args)
}

/// The end of every test: every child reaped, no segment file left.
fn finish(dir: &FabricDir, peers: &mut [&mut Peer]) {
    for p in peers.iter_mut() {
        p.assert_exited();
    }
    dir.assert_empty_within(CLEANUP_WAIT);
}

fn open_soft(dir: &FabricDir) -> (Soft, Context) {
    let soft = Soft::shared_memory(Some(dir.path())).expect("opening the test's fabric");
    let ctx = soft.open("softverbs0").expect("opening softverbs0");
    (soft, ctx)
}

// ---------------- 1. one-sided operations against a sleeping target ----------------

const OPS: u64 = 10_000;
/// WRs in flight at most.
const WINDOW: u64 = 64;
const SIGNAL_EVERY: u64 = 16;
const MAX_MSG: usize = 64 << 10;
/// One local buffer per WR in flight: a message and the gaps between its SGEs fit.
const SLOT: usize = MAX_MSG + 1024;
/// Where RDMA WRITEs may land: everything but the counter area.
const DATA_LEN: usize = TARGET_MR_LEN - COUNTER_AREA_LEN;
const TARGET_SEED: u64 = 0x5EED_0001;
/// PSNs close to the 24-bit wrap, so both directions wrap during the run.
const TARGET_PSN: u32 = 0xFF_FFF0;
const INITIATOR_PSN: u32 = 0xFF_FF80;

fn is_signaled(wr_id: u64) -> bool {
    wr_id % SIGNAL_EVERY == SIGNAL_EVERY - 1 || wr_id == OPS - 1
}

/// 1 B to 64 KiB, mostly small: about 4 KB on average.
fn message_len(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=45 => rng.range(1, 64),
        46..=92 => rng.range(65, 4096),
        93..=94 => MAX_MSG,
        _ => rng.range(4097, MAX_MSG),
    }
}

/// Cuts `len` bytes into 1-3 pieces (each at least one byte) and places them in the local
/// slot at `base` with gaps between them; returns (local offset, length) per piece.
fn scatter_pieces(rng: &mut Rng, base: usize, len: usize) -> Vec<(usize, usize)> {
    let want = match rng.below(10) {
        0..=6 => 1,
        7..=8 => 2,
        _ => 3,
    }
    .min(len);
    let mut cuts: Vec<usize> = Vec::new();
    while cuts.len() + 1 < want {
        let c = rng.range(1, len - 1);
        if !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort_unstable();
    cuts.push(len);
    let mut pieces = Vec::new();
    let (mut start, mut pos) = (0, base);
    for end in cuts {
        pieces.push((pos, end - start));
        pos += end - start + rng.range(0, 64);
        start = end;
    }
    assert!(pos <= base + SLOT, "pieces fit in their slot");
    pieces
}

/// What a WR's completion must have produced locally.
enum Check {
    Nothing,
    /// A READ: these local pieces hold exactly these bytes.
    Bytes {
        pieces: Vec<(usize, usize)>,
        expect: Vec<u8>,
    },
    /// An atomic: the original value landed at this local offset.
    Original {
        at: usize,
        value: u64,
    },
}

struct Posted {
    wr_id: u64,
    opcode: WrOpcode,
    len: u32,
    remote_off: usize,
    check: Check,
}

/// The initiator's knowledge of the target's memory, and the generator of the workload.
struct Workload {
    rng: Rng,
    model: Vec<u8>,
    recent_writes: VecDeque<(usize, usize)>,
    counts: [u64; 4],
    bytes_written: u64,
    bytes_read: u64,
}

impl Workload {
    fn counter(&self, index: usize) -> u64 {
        let off = counter_offset(TARGET_MR_LEN, index);
        u64::from_ne_bytes(self.model[off..off + 8].try_into().expect("8 bytes"))
    }

    fn set_counter(&mut self, index: usize, v: u64) {
        let off = counter_offset(TARGET_MR_LEN, index);
        self.model[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }

    /// Plans WR `wr_id`, prepares its local buffers in `mr`, and applies its effect to the model.
    /// Returns the record and its SGEs, remote address operands and atomic operands.
    fn plan(&mut self, wr_id: u64, mr: &MemoryRegion) -> (Posted, Vec<Sge>, AtomicTarget) {
        let base = (wr_id % WINDOW) as usize * SLOT;
        let mut atomic = AtomicTarget::default();
        let kind = self.rng.below(100);
        let (opcode, pieces, remote_off, check) = if kind < 40 {
            let len = message_len(&mut self.rng);
            let roff = self.rng.range(0, DATA_LEN - len);
            let mut data = vec![0u8; len];
            self.rng.fill(&mut data);
            let pieces = scatter_pieces(&mut self.rng, base, len);
            let mut at = 0;
            for &(loff, plen) in &pieces {
                mr.write(loff, &data[at..at + plen]).expect("writing a local buffer");
                at += plen;
            }
            self.model[roff..roff + len].copy_from_slice(&data);
            self.recent_writes.push_back((roff, len));
            if self.recent_writes.len() > 32 {
                self.recent_writes.pop_front();
            }
            self.counts[0] += 1;
            self.bytes_written += len as u64;
            (WrOpcode::RdmaWrite, pieces, roff, Check::Nothing)
        } else if kind < 70 {
            let (roff, len) = match self.recent_writes.len() {
                n if n > 0 && self.rng.percent(50) => {
                    // Some of a region written earlier in the run.
                    let (start, wlen) = self.recent_writes[self.rng.below(n as u64) as usize];
                    let s = self.rng.range(start, start + wlen - 1);
                    (s, self.rng.range(1, start + wlen - s))
                }
                _ => {
                    // Anywhere, the target's initial pattern or counters included.
                    let len = message_len(&mut self.rng);
                    (self.rng.range(0, TARGET_MR_LEN - len), len)
                }
            };
            let expect = self.model[roff..roff + len].to_vec();
            let pieces = scatter_pieces(&mut self.rng, base, len);
            // Poison the destination with the complement, so a READ that does not land fails.
            let mut at = 0;
            for &(loff, plen) in &pieces {
                let poison: Vec<u8> = expect[at..at + plen].iter().map(|b| !b).collect();
                mr.write(loff, &poison).expect("poisoning a local buffer");
                at += plen;
            }
            self.counts[1] += 1;
            self.bytes_read += len as u64;
            (WrOpcode::RdmaRead, pieces, roff, Check::Bytes { pieces: Vec::new(), expect })
        } else {
            let index = self.rng.below(COUNTERS as u64) as usize;
            let current = self.counter(index);
            let roff = counter_offset(TARGET_MR_LEN, index);
            mr.write_u64(base, !current).expect("poisoning the atomic result buffer");
            let opcode = if kind < 85 {
                let matches = self.rng.percent(50);
                let compare =
                    if matches { current } else { current ^ (1 + self.rng.below(u64::MAX - 1)) };
                let swap = self.rng.next_u64();
                if matches {
                    self.set_counter(index, swap);
                }
                atomic.compare_add = compare;
                atomic.swap = swap;
                self.counts[2] += 1;
                WrOpcode::AtomicCmpAndSwp
            } else {
                let add = self.rng.next_u64() >> self.rng.below(64);
                self.set_counter(index, current.wrapping_add(add));
                atomic.compare_add = add;
                self.counts[3] += 1;
                WrOpcode::AtomicFetchAndAdd
            };
            (opcode, vec![(base, 8)], roff, Check::Original { at: base, value: current })
        };
        let check = match check {
            Check::Bytes { expect, .. } => Check::Bytes { pieces: pieces.clone(), expect },
            other => other,
        };
        let sges: Vec<Sge> = pieces.iter().map(|&(off, len)| mr.sge(off, len as u32)).collect();
        let len = pieces.iter().map(|p| p.1).sum::<usize>() as u32;
        (Posted { wr_id, opcode, len, remote_off, check }, sges, atomic)
    }
}

/// Verifies what a retired WR left in local memory.
fn verify_retired(p: &Posted, mr: &MemoryRegion) {
    match &p.check {
        Check::Nothing => {}
        Check::Bytes { pieces, expect } => {
            let mut got = Vec::with_capacity(expect.len());
            for &(off, len) in pieces {
                got.extend(mr.read_vec(off, len).expect("reading a local buffer"));
            }
            if let Some(i) = got.iter().zip(expect).position(|(a, b)| a != b) {
                panic!(
                    "wr {}: RDMA READ of {} bytes at target offset {:#x} ({} SGEs) differs at \
                     byte {i}: got {:#04x}, expected {:#04x}",
                    p.wr_id,
                    expect.len(),
                    p.remote_off,
                    pieces.len(),
                    got[i],
                    expect[i]
                );
            }
        }
        Check::Original { at, value } => {
            let got = mr.read_u64(*at).expect("reading an atomic result");
            assert_eq!(
                got,
                *value,
                "wr {}: {} on the counter at target offset {:#x} returned {got:#x}, the model \
                 says the original was {value:#x}",
                p.wr_id,
                p.opcode.name(),
                p.remote_off
            );
        }
    }
}

/// The system call number of `read` on this architecture, if this test knows it.
const SYS_READ: Option<&str> = if cfg!(target_arch = "x86_64") {
    Some("0")
} else if cfg!(target_arch = "aarch64") {
    Some("63")
} else {
    None
};

/// What the main thread of `pid` is doing, from `/proc/<pid>/task/<pid>/syscall`: true when it
/// is blocked in `read(0, ...)`; None when the kernel does not tell us.
fn blocked_in_stdin_read(pid: u32) -> Option<bool> {
    let sys_read = SYS_READ?;
    let text = fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")).ok()?;
    let mut it = text.split_whitespace();
    Some(it.next() == Some(sys_read) && it.next() == Some("0x0"))
}

#[test]
fn one_sided_operations_complete_while_the_target_sleeps() {
    let _serial = serial();
    let started = Instant::now();
    let dir = FabricDir::new("one_sided");
    let seed = TARGET_SEED.to_string();
    let psn = TARGET_PSN.to_string();
    let mut target = spawn_peer("target", "target", &dir, &["--seed", &seed, "--psn", &psn]);
    {
        let (_soft, ctx) = open_soft(&dir);
        let cap = QpCap {
            max_send_wr: 2 * WINDOW as u32,
            max_recv_wr: 1,
            max_send_sge: 3,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 256, WINDOW as usize * SLOT)
            .expect("creating the initiator's endpoint");
        let me = ep.info(INITIATOR_PSN).expect("the initiator's QP info");
        let (remote, mr) = target.swap_info(&me, LINE_WAIT);
        let (raddr, rkey) = mr.expect("the target's INFO names its MR");
        conn::connect(&ep.qp, INITIATOR_PSN, &remote, &conn_opts()).expect("connecting");
        target.expect_line("READY", LINE_WAIT);

        let mut w = Workload {
            rng: Rng::new(0xC0FFEE),
            model: pattern(TARGET_SEED, 0, TARGET_MR_LEN),
            recent_writes: VecDeque::new(),
            counts: [0; 4],
            bytes_written: 0,
            bytes_read: 0,
        };
        let mut batch_rng = Rng::new(0xBA7C4);
        let run_started = Instant::now();
        let deadline = run_started + Duration::from_secs(120);
        let mut pending: VecDeque<Posted> = VecDeque::new();
        let (mut next, mut retired) = (0u64, 0u64);
        let mut completions = 0u64;
        let mut wcs = [WorkCompletion::default(); 32];
        // Where the target's main thread is while its NIC serves us: sampled during the run.
        let (mut asleep, mut awake, mut unknown) = (0u32, 0u32, 0u32);
        let mut next_sample = 0u64;
        while retired < OPS {
            if next >= next_sample {
                next_sample += OPS / 20;
                match blocked_in_stdin_read(target.pid()) {
                    Some(true) => asleep += 1,
                    Some(false) => awake += 1,
                    None => unknown += 1,
                }
            }
            let room = (retired + WINDOW - next).min(OPS - next);
            if room > 0 {
                // Its own generator: how WRs are grouped into post lists depends on timing,
                // the WRs themselves only on the seed.
                let batch =
                    if batch_rng.percent(20) { batch_rng.range(1, 4) as u64 } else { 1 }.min(room);
                let mut planned = Vec::new();
                for wr_id in next..next + batch {
                    planned.push(w.plan(wr_id, &ep.mr));
                }
                let wrs: Vec<SendWr<'_>> = planned
                    .iter()
                    .map(|(p, sges, atomic)| SendWr {
                        wr_id: p.wr_id,
                        sg_list: sges,
                        opcode: p.opcode,
                        send_flags: if is_signaled(p.wr_id) {
                            SendFlags::SIGNALED
                        } else {
                            SendFlags::empty()
                        },
                        rdma: RdmaTarget { remote_addr: raddr + p.remote_off as u64, rkey },
                        atomic: AtomicTarget {
                            remote_addr: raddr + p.remote_off as u64,
                            rkey,
                            ..*atomic
                        },
                        ..Default::default()
                    })
                    .collect();
                ep.qp.post_send(&wrs).unwrap_or_else(|e| {
                    panic!("posting wr {next}..{}: {e}; {}", next + batch, target.stderr())
                });
                pending.extend(planned.into_iter().map(|(p, _, _)| p));
                next += batch;
            }
            let n = ep.cq.poll(&mut wcs).expect("polling the CQ");
            for wc in &wcs[..n] {
                completions += 1;
                let expected_id = (retired..OPS).find(|&id| is_signaled(id)).expect("one is left");
                let p = pending.iter().find(|p| p.wr_id == wc.wr_id);
                assert_eq!(
                    wc.status,
                    WcStatus::Success,
                    "wr {} ({:?}) failed: {wc:?}; target stderr: {}",
                    wc.wr_id,
                    p.map(|p| p.opcode),
                    target.stderr()
                );
                assert_eq!(
                    wc.wr_id,
                    expected_id,
                    "completions must come in post order: after wr {} the next signaled WR is \
                     {expected_id}, got {wc:?}",
                    retired as i64 - 1
                );
                let p = p.expect("a completion names a pending WR");
                assert_eq!(wc.opcode, WcOpcode::for_send(p.opcode), "{wc:?}");
                assert_eq!(wc.qp_num, ep.qp.qp_num(), "{wc:?}");
                if p.opcode == WrOpcode::RdmaRead || p.opcode.is_atomic() {
                    assert_eq!(wc.byte_len, p.len, "byte_len of {wc:?}");
                }
                while pending.front().is_some_and(|p| p.wr_id <= wc.wr_id) {
                    let p = pending.pop_front().expect("front exists");
                    verify_retired(&p, &ep.mr);
                }
                retired = wc.wr_id + 1;
            }
            if n == 0 && room == 0 {
                if Instant::now() > deadline {
                    panic!(
                        "{retired} of {OPS} WRs retired, {next} posted, after {:?}; target: {}",
                        run_started.elapsed(),
                        target.stderr()
                    );
                }
                std::thread::yield_now();
            }
        }
        let run_time = run_started.elapsed();
        assert_eq!(
            awake, 0,
            "the target's main thread must sleep in read(0) during the run: {asleep} samples \
             asleep, {awake} not"
        );
        println!(
            "[one_sided] target main thread blocked in read(0) in {asleep} of {} samples \
             ({unknown} unavailable)",
            asleep + awake + unknown
        );
        assert!(pending.is_empty());
        assert_eq!(completions, OPS.div_ceil(SIGNAL_EVERY), "one completion per signaled WR");
        assert_eq!(ep.qp.state().expect("querying the QP"), QpState::Rts);

        target.send_line("DONE");
        let checksum = target.expect_line("CHECKSUM ", LINE_WAIT);
        let counters = target.expect_line("COUNTERS", LINE_WAIT);
        target.expect_line("BYE", LINE_WAIT);
        target.wait_success(EXIT_WAIT);
        let got = u64::from_str_radix(checksum.trim_start_matches("CHECKSUM "), 16)
            .expect("a hex checksum");
        let want = fnv1a(&w.model);
        let model_counters: Vec<u64> = (0..COUNTERS).map(|i| w.counter(i)).collect();
        let got_counters: Vec<u64> = counters
            .split_whitespace()
            .skip(1)
            .map(|v| u64::from_str_radix(v, 16).expect("hex counters"))
            .collect();
        assert_eq!(got_counters, model_counters, "the target's counters against the model");
        assert_eq!(got, want, "FNV-1a of the target's MR {got:#x}, of the model {want:#x}");
        println!(
            "[one_sided] {OPS} WRs ({} WRITE, {} READ, {} CAS, {} FETCH_ADD; {} KiB written, \
             {} KiB read) in {run_time:?}",
            w.counts[0],
            w.counts[1],
            w.counts[2],
            w.counts[3],
            w.bytes_written >> 10,
            w.bytes_read >> 10
        );
    }
    finish(&dir, &mut [&mut target]);
    println!("[one_sided] took {:?}", started.elapsed());
}

// ---------------- 2. a peer SIGKILLed mid-transfer ----------------

#[test]
fn a_peer_killed_mid_transfer_fails_the_transfer_fast_and_its_segment_is_cleaned() {
    let _serial = serial();
    let started = Instant::now();
    // 512 MiB in all: far more than can land in the moments between the third completion and
    // the kill, even when the scheduler keeps this thread from the kill for tens of ms.
    const WRITES: u64 = 2048;
    const LEN: usize = 256 << 10;
    const KILL_AFTER: usize = 3;
    let dir = FabricDir::new("killed_peer");
    // MTU 4096: a quarter of the packets per byte, so a target NIC thread that gets little
    // CPU (debug build, loaded machine) still acknowledges within the short timeout.
    let mut target = spawn_peer("target", "target", &dir, &["--mtu", "4096"]);
    {
        // Packets: with direct reach every WRITE would be placed (and complete) at post time,
        // before the kill; `a_reached_peer_that_dies_is_noticed` covers reach.
        let soft = Soft::shared_memory(Some(dir.path())).expect("opening the test's fabric");
        soft.set_reach(false);
        let ctx = soft.open("softverbs0").expect("opening softverbs0");
        let opts = ConnOpts { timeout: 10, retry_cnt: 3, mtu: Mtu::Mtu4096, ..conn_opts() };
        let cap = QpCap {
            max_send_wr: WRITES as u32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 2 * WRITES as u32, LEN)
            .expect("creating the initiator's endpoint");
        let mut data = vec![0u8; LEN];
        Rng::new(7).fill(&mut data);
        ep.mr.write(0, &data).expect("filling the source buffer");
        let me = ep.info(0x1234).expect("QP info");
        let (remote, mr) = target.swap_info(&me, LINE_WAIT);
        let (raddr, rkey) = mr.expect("the target's INFO names its MR");
        conn::connect(&ep.qp, 0x1234, &remote, &opts).expect("connecting");
        target.expect_line("READY", LINE_WAIT);

        let sge = [ep.mr.sge(0, LEN as u32)];
        let wrs: Vec<SendWr<'_>> = (0..WRITES)
            .map(|i| SendWr {
                wr_id: i,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget {
                    remote_addr: raddr + (i as usize * LEN % (TARGET_MR_LEN - LEN)) as u64,
                    rkey,
                },
                ..Default::default()
            })
            .collect();
        ep.qp.post_send(&wrs).expect("posting the WRITEs");
        // Poll lazily: the NIC threads do the work, and a busy-polling test thread would take
        // a CPU from the target's NIC thread, which must answer within the short timeout.
        let mut done = Vec::new();
        let mut wcs = [WorkCompletion::default(); 32];
        let first_deadline = Instant::now() + LINE_WAIT;
        while done.len() < KILL_AFTER {
            let n = ep.cq.poll(&mut wcs[..KILL_AFTER - done.len()]).expect("polling the CQ");
            done.extend_from_slice(&wcs[..n]);
            if n == 0 {
                assert!(
                    Instant::now() < first_deadline,
                    "{} of the first {KILL_AFTER} WRITEs completed within {LINE_WAIT:?}; {}",
                    done.len(),
                    target.stderr()
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if let Some(bad) = done.iter().find(|w| w.status != WcStatus::Success) {
            // With a 4.2 ms ACK timeout and 3 retries, a live target whose NIC thread gets no
            // CPU for ~17 ms is given up on, correctly; on an overloaded machine this happens.
            panic!(
                "before the kill, with the target alive, wr {} completed with {}: the live \
                 target did not answer for timeout x (retry_cnt + 1) = ~17 ms (CPU starved?); \
                 first completions {done:?}; target stderr: {}",
                bad.wr_id,
                bad.status.name(),
                target.stderr()
            );
        }
        let killed_at = Instant::now();
        target.kill();
        assert_eq!(target.signal(), Some(9), "the target died of SIGKILL");

        while (done.len() as u64) < WRITES {
            let n = ep.cq.poll(&mut wcs).expect("polling the CQ");
            done.extend_from_slice(&wcs[..n]);
            if n == 0 {
                if killed_at.elapsed() > Duration::from_secs(5) {
                    let st: Vec<_> = done.iter().map(|w| (w.wr_id, w.status.name())).collect();
                    panic!(
                        "{} of {WRITES} WRs completed within 5 s of the kill: {st:?}",
                        done.len()
                    );
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let failed_within = killed_at.elapsed();
        let ok = done.iter().take_while(|w| w.status == WcStatus::Success).count();
        assert!(ok >= KILL_AFTER && (ok as u64) < WRITES, "{ok} WRITEs succeeded");
        for (i, wc) in done.iter().enumerate() {
            let want = match i {
                i if i < ok => WcStatus::Success,
                i if i == ok => WcStatus::RetryExcErr,
                _ => WcStatus::WrFlushErr,
            };
            assert_eq!((wc.wr_id, wc.status), (i as u64, want), "completion {i}: {wc:?}");
            assert_eq!(wc.qp_num, ep.qp.qp_num());
        }
        // Timeout 10 is 4.2 ms; 1 + 3 retries is ~17 ms; anything near 5 s is a hang.
        assert!(failed_within < Duration::from_secs(5), "took {failed_within:?}");
        assert_eq!(ep.qp.state().expect("querying the QP"), QpState::Err);
        println!(
            "[killed_peer] {ok} WRITEs succeeded; wr {ok} failed with RETRY_EXC_ERR and {} were \
             flushed, all within {failed_within:?} of the SIGKILL",
            WRITES as usize - ok - 1
        );

        let fabric = soft.fabric().expect("a shared-memory fabric");
        let slot = |gid: &Gid| slot_of_gid(gid).expect("a softverbs port's IPv4 GID");
        let own_slot = slot(&ctx.query_gid(1, GID_INDEX_IPV4).expect("query_gid"));
        let remote_slot = slot(&remote.gid);
        let listed = fabric.list().expect("listing the fabric");
        let dead = listed.iter().find(|s| s.lid == Some(remote_slot));
        assert!(
            dead.is_none_or(|s| !s.alive && s.owner_pid == Some(target.pid())),
            "the killed target's segment must be gone or listed dead: {listed:?}"
        );
        println!(
            "[killed_peer] before clean the dead target's segment is {}",
            if dead.is_some() { "listed dead" } else { "already cleaned by the sender" }
        );
        fabric.clean().expect("cleaning the fabric");
        let listed = fabric.list().expect("listing the fabric");
        assert!(
            !listed.iter().any(|s| s.lid == Some(remote_slot)),
            "clean removes the dead segment: {listed:?}"
        );
        assert!(
            listed.iter().any(|s| s.lid == Some(own_slot) && s.alive),
            "our own segment stays: {listed:?}"
        );
    }
    finish(&dir, &mut [&mut target]);
    println!("[killed_peer] took {:?}", started.elapsed());
}

/// Direct reach into a peer process's memory, and that peer's death: WRITEs are reached (no
/// packet, the bytes in the target's MR, which the target reads back and reports), and once
/// the target is SIGKILLed and reaped not one more WRITE is reached (`wire::reach`: the kernel
/// marks the dead NIC thread's keeper mutex, which every reach looks at): they go as packets
/// and fail with RETRY_EXC_ERR as they do to any dead peer.
#[test]
fn a_reached_peer_that_dies_is_noticed() {
    let _serial = serial();
    let dir = FabricDir::new("reached_peer_dies");
    let mut target = spawn_peer("target", "target", &dir, &[]);
    {
        let (soft, ctx) = open_soft(&dir);
        let opts = ConnOpts { timeout: 10, retry_cnt: 3, ..conn_opts() };
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 32, 4096).expect("the initiator");
        let me = ep.info(0x4321).expect("QP info");
        let (remote, mr) = target.swap_info(&me, LINE_WAIT);
        let (raddr, rkey) = mr.expect("the target's INFO names its MR");
        conn::connect(&ep.qp, 0x4321, &remote, &opts).expect("connecting");
        target.expect_line("READY", LINE_WAIT);
        let write = |id: u64, off: u64| -> WorkCompletion {
            let sge = [ep.mr.sge(0, 64)];
            let wr = SendWr {
                wr_id: id,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget { remote_addr: raddr + off, rkey },
                ..Default::default()
            };
            ep.qp.post_send(&[wr]).expect("post_send");
            ep.cq.poll_n(1, LINE_WAIT).expect("a completion")[0]
        };
        ep.mr.write(0, &[0x5a; 64]).unwrap();
        for i in 0..8 {
            let wc = write(i, i * 64);
            assert_eq!((wc.wr_id, wc.status, wc.byte_len), (i, WcStatus::Success, 64));
        }
        let stats = soft.stats("softverbs0").expect("stats");
        assert_eq!(stats.nic.reached, 8, "reached, not sent: {stats:?}");
        assert_eq!(stats.nic.tx_packets, 0, "{stats:?}");

        target.kill();
        let killed_at = Instant::now();
        let mut failed = None;
        for i in 8..100_000u64 {
            let wc = write(i, (i % 32) * 64);
            if wc.status != WcStatus::Success {
                failed = Some((i, wc));
                break;
            }
            assert!(killed_at.elapsed() < Duration::from_secs(5), "WRITEs still succeed 5 s on");
        }
        let (i, wc) = failed.expect("a WRITE fails once the target is dead");
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::RetryExcErr), "{wc:?}");
        let reached_after = soft.stats("softverbs0").expect("stats").nic.reached - 8;
        println!(
            "[reached_peer_dies] {reached_after} WRITEs were reached after the kill, then wr {i} \
             failed with RETRY_EXC_ERR {:?} after it",
            killed_at.elapsed()
        );
        assert_eq!((reached_after, i), (0, 8), "the first WRITE after the kill fails");
    }
    finish(&dir, &mut [&mut target]);
}

// ---------------- 3. corrupted and foreign segments ----------------

/// Offsets of the segment header fields this test corrupts (see the wire layout module).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_LID: usize = 36;
const OFF_STATE: usize = 64;

struct BadSegment {
    what: &'static str,
    lid: u16,
    /// The file's bytes; None for a LID with no file at all.
    bytes: Option<Vec<u8>>,
    /// What `Fabric::connect` must say about it.
    problem: String,
    /// What `Fabric::list` must say about it (it reads only the identity line, so a short
    /// file of garbage is "bad magic" there).
    listed: String,
}

fn bad_segments(image: &[u8]) -> Vec<BadSegment> {
    let with_lid = |lid: u16| {
        let mut b = image.to_vec();
        b[OFF_LID..OFF_LID + 2].copy_from_slice(&lid.to_ne_bytes());
        b
    };
    let case = |what, lid, bytes, problem: String| BadSegment {
        what,
        lid,
        bytes,
        listed: problem.clone(),
        problem,
    };
    let mut v = Vec::new();
    let mut b = with_lid(20);
    b[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(b"NOTSVWIR");
    v.push(case("wrong magic", 20, Some(b), "bad magic".into()));
    let mut b = with_lid(21);
    b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&(LAYOUT_VERSION + 6).to_ne_bytes());
    let version = format!("layout version {}, expected {LAYOUT_VERSION}", LAYOUT_VERSION + 6);
    v.push(case("wrong layout version", 21, Some(b), version));
    let mut b = with_lid(22);
    b.extend_from_slice(&[0u8; 64]);
    let size =
        format!("the file is {} bytes but its header says {}", image.len() + 64, image.len());
    v.push(case("wrong size (longer)", 22, Some(b), size));
    let b = with_lid(23)[..100].to_vec();
    v.push(case("wrong size (truncated)", 23, Some(b), "truncated".into()));
    v.push(BadSegment {
        what: "short foreign file",
        lid: 24,
        bytes: Some(vec![0x77; 100]),
        problem: "truncated".into(),
        listed: "bad magic 0x7777777777777777".into(),
    });
    let lid = "its header says LID 999, its name LID 25".to_string();
    v.push(case("LID differs from its name", 25, Some(with_lid(999)), lid));
    let mut b = with_lid(26);
    b[OFF_STATE..OFF_STATE + 4].copy_from_slice(&0u32.to_ne_bytes());
    v.push(case("not ready", 26, Some(b), "not ready".into()));
    v.push(case("no file", 27, None, "no port with LID 27".into()));
    v
}

#[test]
fn corrupted_and_foreign_segments_are_refused_and_sends_to_them_fail_cleanly() {
    let _serial = serial();
    let started = Instant::now();
    let dir = FabricDir::new("bad_segments");
    {
        let (soft, ctx) = open_soft(&dir);
        let fabric: &Fabric = soft.fabric().expect("a shared-memory fabric");
        // A genuine segment image (header written by the wire itself, owner: this process),
        // which each case then breaks in one way.
        let image = {
            let inbox = fabric
                .create_inbox(InboxConfig { slots: 8, slot_size: 64, gid: [0; 16] })
                .expect("creating a sample inbox");
            fs::read(inbox.path()).expect("reading the sample inbox")
        };
        let cases = bad_segments(&image);
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        for c in &cases {
            let path = fabric.inbox_path(c.lid);
            if let Some(bytes) = &c.bytes {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .expect("creating a bad segment");
                f.write_all(bytes).expect("writing a bad segment");
                files.push((path.clone(), bytes.clone()));
            }
            let e = fabric.connect(c.lid).expect_err(c.what).to_string();
            assert!(
                e.contains(&path.display().to_string()) && e.contains(&c.problem),
                "{}: connect error {e:?} must name {} and say {:?}",
                c.what,
                path.display(),
                c.problem
            );
        }
        let listed = fabric.list().expect("listing the fabric");
        for c in cases.iter().filter(|c| c.bytes.is_some()) {
            let path = fabric.inbox_path(c.lid);
            let info = listed.iter().find(|s| s.path == path).expect("every file is listed");
            assert!(
                info.problem.as_deref().is_some_and(|p| p.contains(&c.listed)),
                "{}: list says {info:?}, expected a problem saying {:?}",
                c.what,
                c.listed
            );
        }

        // An RC QP aimed at each of those LIDs: its WRITE is retried, then fails; nothing panics.
        let opts = ConnOpts { timeout: 8, retry_cnt: 2, ..conn_opts() };
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let cq = ctx.create_cq(64, None, 0).expect("create_cq");
        let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).expect("reg_mr");
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qps: Vec<QueuePair> = cases
            .iter()
            .map(|c| {
                let qp = pd
                    .create_qp(&QpInitAttr {
                        qp_type: QpType::Rc,
                        send_cq: cq.clone(),
                        recv_cq: cq.clone(),
                        srq: None,
                        cap,
                        sq_sig_all: true,
                    })
                    .expect("create_qp");
                let gid = Gid::from_ipv4(ip_of_slot(c.lid));
                let remote = QpInfo { lid: 0, qpn: 0x11, psn: 0, gid };
                conn::connect(&qp, 0, &remote, &opts).expect("connecting to a bad LID");
                qp
            })
            .collect();
        let sge = [mr.sge(0, 100)];
        let posted_at = Instant::now();
        for (i, qp) in qps.iter().enumerate() {
            let wr = |n: u64| SendWr {
                wr_id: i as u64 * 10 + n,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite,
                rdma: RdmaTarget { remote_addr: 0x1000, rkey: 0x42 },
                ..Default::default()
            };
            qp.post_send(&[wr(0), wr(1)]).expect("posting to a bad LID");
        }
        let wcs = cq.poll_n(2 * qps.len(), Duration::from_secs(10)).expect("every WR completes");
        let failed_within = posted_at.elapsed();
        for (i, (c, qp)) in cases.iter().zip(&qps).enumerate() {
            let mine: Vec<(u64, WcStatus)> = wcs
                .iter()
                .filter(|w| w.qp_num == qp.qp_num())
                .map(|w| (w.wr_id, w.status))
                .collect();
            let base = i as u64 * 10;
            assert_eq!(
                mine,
                vec![(base, WcStatus::RetryExcErr), (base + 1, WcStatus::WrFlushErr)],
                "{}: completions of the QP aimed at LID {}",
                c.what,
                c.lid
            );
            assert_eq!(qp.state().expect("query"), QpState::Err, "{}", c.what);
        }
        println!("[bad_segments] {} QPs failed cleanly within {failed_within:?}", qps.len());

        // Nobody touched the files, and clean leaves them (they are not ours to remove).
        for (path, bytes) in &files {
            assert_eq!(&fs::read(path).expect("reading a bad segment"), bytes, "{path:?}");
        }
        let removed = fabric.clean().expect("cleaning the fabric");
        assert!(removed.is_empty(), "clean must not remove live or foreign files: {removed:?}");
        for (path, _) in &files {
            fs::remove_file(path).expect("removing a bad segment");
        }
    }
    finish(&dir, &mut []);
    println!("[bad_segments] took {:?}", started.elapsed());
}

// ---------------- 4. SEND/RECV ping-pong between processes ----------------

#[test]
fn send_recv_ping_pong_between_processes_checks_every_completion_field() {
    let _serial = serial();
    let started = Instant::now();
    const ITERS: u64 = 1000;
    const SEED: u64 = 0xEC40;
    const RECV_OFF: usize = 0;
    const SEND_OFF: usize = 4096;
    const RECV_BASE: u64 = 1 << 40;
    let dir = FabricDir::new("ping_pong");
    let (seed, iters) = (SEED.to_string(), ITERS.to_string());
    let mut echo = spawn_peer("echo", "echo", &dir, &["--seed", &seed, "--iters", &iters]);
    {
        let (_soft, ctx) = open_soft(&dir);
        let cap = QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: PING_MAX_LEN as u32,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 32, 8192).expect("creating the endpoint");
        let me = ep.info(0x777).expect("QP info");
        let (remote, _) = echo.swap_info(&me, LINE_WAIT);
        conn::connect(&ep.qp, 0x777, &remote, &conn_opts()).expect("connecting");
        echo.expect_line("READY", LINE_WAIT);

        let loop_started = Instant::now();
        for i in 0..ITERS {
            let ping = ping_message(SEED, i);
            let pong = pong_message(i, &ping);
            let imm = ping_imm(i);
            let rsge = [ep.mr.sge(RECV_OFF, 2 * PING_MAX_LEN as u32)];
            ep.qp.post_recv(&[RecvWr { wr_id: RECV_BASE + i, sg_list: &rsge }]).expect("post_recv");
            ep.mr.write(SEND_OFF, &ping).expect("writing the ping");
            let ssge = [ep.mr.sge(SEND_OFF, ping.len() as u32)];
            let mut flags = SendFlags::SIGNALED;
            if i % 5 == 0 {
                flags |= SendFlags::INLINE;
            }
            let wr = SendWr {
                wr_id: i,
                sg_list: &ssge,
                opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
                send_flags: flags,
                imm_data: imm.unwrap_or(0),
                ..Default::default()
            };
            ep.qp.post_send(&[wr]).expect("post_send");
            let wcs = ep
                .cq
                .poll_n(2, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("iteration {i}: {e}; echo stderr: {}", echo.stderr()));
            let send = wcs.iter().find(|w| w.wr_id == i).expect("the send completion");
            let recv = wcs.iter().find(|w| w.wr_id == RECV_BASE + i).expect("the receive");
            assert_eq!(
                (send.status, send.opcode, send.qp_num),
                (WcStatus::Success, WcOpcode::Send, me.qpn),
                "iteration {i}: send completion {send:?}"
            );
            let want = WorkCompletion {
                wr_id: RECV_BASE + i,
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: pong.len() as u32,
                imm_data: imm.map_or(0, |v| !v),
                qp_num: me.qpn,
                src_qp: remote.qpn,
                wc_flags: if imm.is_some() { WcFlags::WITH_IMM } else { WcFlags::empty() },
                slid: remote.lid,
                ..*recv
            };
            assert_eq!(*recv, want, "iteration {i}: receive completion");
            let got = ep.mr.read_vec(RECV_OFF, pong.len()).expect("reading the pong");
            assert_eq!(got, pong, "iteration {i}: the pong's bytes");
        }
        let loop_time = loop_started.elapsed();
        echo.expect_line(&format!("ECHOED {ITERS}"), LINE_WAIT);
        echo.send_line("DONE");
        echo.expect_line("BYE", LINE_WAIT);
        echo.wait_success(EXIT_WAIT);
        println!(
            "[ping_pong] {ITERS} round trips in {loop_time:?} ({:.1} us each)",
            loop_time.as_secs_f64() * 1e6 / ITERS as f64
        );
    }
    finish(&dir, &mut [&mut echo]);
    println!("[ping_pong] took {:?}", started.elapsed());
}

/// A program that exits with its device still open (as C programs that return from `main`
/// do) keeps its capture: the records buffered since the NIC thread last went idle are
/// written at exit, not lost. The echo peer captures with `SOFTVERBS_PCAP` and exits holding
/// its device right after its last pong.
#[test]
fn a_process_that_exits_holding_its_device_keeps_its_capture() {
    let _serial = serial();
    const ITERS: u64 = 20;
    let dir = FabricDir::new("exit_capture");
    let pcap = dir.path().join("echo.pcap");
    let (seed, iters) = (0xCA9u64.to_string(), ITERS.to_string());
    let args: Vec<String> = ["echo", &dir.path().display().to_string(), "--seed", &seed]
        .iter()
        .map(|s| s.to_string())
        .chain(["--iters".into(), iters, "--exit-holding".into()])
        .collect();
    let mut echo = Peer::spawn_env(
        "echo",
        PEER.as_ref(),
        &args,
        &[("SOFTVERBS_PCAP", pcap.to_str().expect("UTF-8 path"))],
    );
    {
        let (_soft, ctx) = open_soft(&dir);
        let cap = QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: PING_MAX_LEN as u32,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 32, 8192).expect("creating the endpoint");
        let me = ep.info(0x999).expect("QP info");
        let (remote, _) = echo.swap_info(&me, LINE_WAIT);
        conn::connect(&ep.qp, 0x999, &remote, &conn_opts()).expect("connecting");
        echo.expect_line("READY", LINE_WAIT);
        for i in 0..ITERS {
            let ping = ping_message(0xCA9, i);
            let rsge = [ep.mr.sge(0, 2 * PING_MAX_LEN as u32)];
            ep.qp.post_recv(&[RecvWr { wr_id: 1 << 40 | i, sg_list: &rsge }]).expect("post_recv");
            ep.mr.write(4096, &ping).expect("writing the ping");
            let ssge = [ep.mr.sge(4096, ping.len() as u32)];
            let imm = ping_imm(i);
            let wr = SendWr {
                wr_id: i,
                sg_list: &ssge,
                opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
                send_flags: SendFlags::SIGNALED,
                imm_data: imm.unwrap_or(0),
                ..Default::default()
            };
            ep.qp.post_send(&[wr]).expect("post_send");
            let wcs = ep.cq.poll_n(2, Duration::from_secs(10)).expect("the ping's completions");
            assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        }
        echo.expect_line(&format!("ECHOED {ITERS}"), LINE_WAIT);
        echo.send_line("DONE");
        echo.expect_line("BYE", LINE_WAIT);
        echo.wait_success(EXIT_WAIT);
    }
    // Records: a 24-byte file header, then a 16-byte header and the datagram each.
    let bytes = fs::read(&pcap).expect("the echo's capture exists");
    let mut at = 24;
    let mut records = 0;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + len;
        records += 1;
    }
    assert_eq!(at, bytes.len(), "the capture ends on a whole record");
    // Each round: the ping in, the pong out, at least one ACK each way.
    assert!(records >= 2 * ITERS as usize, "{records} records for {ITERS} round trips");
    echo.assert_exited();
    // The echo left its inbox behind (it never closed its device): not part of this check.
    let _ = fs::remove_dir_all(dir.path());
}

// ---------------- 5. segments go away with their processes ----------------

/// Starts `sv-peer hold`, checks its segment is listed alive under its pid, and returns the
/// peer and its segment's path.
fn hold(dir: &FabricDir, fabric: &Fabric, name: &str, extra: &[&str]) -> (Peer, PathBuf) {
    let mut p = spawn_peer(name, "hold", dir, extra);
    let line = p.expect_line("HOLD ", LINE_WAIT);
    let mut it = line.split_whitespace().skip(1);
    let slot: u16 = it.next().and_then(|v| v.parse().ok()).expect("HOLD <slot> <pid>");
    let pid: u32 = it.next().and_then(|v| v.parse().ok()).expect("HOLD <slot> <pid>");
    assert_eq!(pid, p.pid());
    let path = fabric.inbox_path(slot);
    let listed = fabric.list().expect("listing the fabric");
    let info = listed.iter().find(|s| s.path == path).expect("the child's segment is listed");
    assert!(info.alive && info.owner_pid == Some(pid) && info.problem.is_none(), "{info:?}");
    (p, path)
}

#[test]
fn a_child_that_exits_leaves_no_segment_behind() {
    let _serial = serial();
    let started = Instant::now();
    let dir = FabricDir::new("cleanup");
    let fabric = Fabric::open(Some(dir.path())).expect("opening the fabric");
    let mut peers = Vec::new();
    for round in 0..3 {
        let (mut p, path) = hold(&dir, &fabric, &format!("hold-{round}"), &[]);
        p.send_line("EXIT");
        p.wait_success(EXIT_WAIT);
        assert!(!path.exists(), "{} is left after a normal exit", path.display());
        peers.push(p);
    }
    // A child whose test goes away (stdin closes) exits with an error, and cleans up too.
    let (mut p, path) = hold(&dir, &fabric, "hold-orphan", &[]);
    p.close_stdin();
    let status = p.wait_exit(EXIT_WAIT);
    assert!(!status.success(), "a closed stdin is an error: {status}");
    assert!(p.stderr().contains("stdin closed"), "{}", p.stderr());
    assert!(!path.exists(), "{} is left after the child saw its stdin close", path.display());
    peers.push(p);
    assert!(fabric.list().expect("listing").is_empty(), "nothing is left to list");
    let mut refs: Vec<&mut Peer> = peers.iter_mut().collect();
    finish(&dir, &mut refs);
    println!("[cleanup] took {:?}", started.elapsed());
}

/// The same, for a program that exits the moment it has dropped its last verbs handle.
/// `sv-peer` normally waits for its inbox to disappear before exiting; `--exit-at-once` skips
/// that, so this checks that dropping the last handle itself removes the segment: the NIC
/// thread never owns the device, so the dropping thread always joins it and drops the port.
#[test]
fn a_child_that_exits_right_after_dropping_its_context_leaves_no_segment() {
    let _serial = serial();
    let dir = FabricDir::new("cleanup_at_once");
    let fabric = Fabric::open(Some(dir.path())).expect("opening the fabric");
    let mut peers = Vec::new();
    for round in 0..20 {
        let (mut p, path) = hold(&dir, &fabric, &format!("hold-{round}"), &["--exit-at-once"]);
        p.send_line("EXIT");
        p.wait_success(EXIT_WAIT);
        assert!(!path.exists(), "round {round}: {} is left after a normal exit", path.display());
        peers.push(p);
    }
    let mut refs: Vec<&mut Peer> = peers.iter_mut().collect();
    finish(&dir, &mut refs);
}

// ---------------- 6. a dead process's place taken by a new one ----------------

/// Issue 17's stale retransmission over shared memory. This process's `softverbs0` (the
/// survivor) is connected to a QP of an `old` child, with the fixed first PSN that examples
/// use; `old` is SIGKILLed, and the survivor, not knowing, posts a SEND to it and goes on
/// retransmitting. A `new` child then opens a port and connects a QP to this process's
/// `softverbs1` (a third party) with that same PSN. The survivor's retransmissions must not
/// reach the new child's QP, and the third party's first SEND must land in the new QP's first
/// receive with every completion field right.
///
/// Before the fix the new child got the dead one's LID (the lowest free) and its first QP the
/// dead one's QP number (0x11 in every process), so the survivor's retransmission was taken
/// for the third party's first SEND (it filled the first receive, labelled as from the third
/// party), and the third party's real first SEND was dropped as a duplicate.
#[test]
fn a_dead_processs_successor_gets_its_peers_first_send_not_a_stale_retransmission() {
    let _serial = serial();
    const PSN: u32 = 0x1234;
    let dir = FabricDir::new("stale_retransmission");
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let endpoint = |ctx: &Context, who: &str| {
        Endpoint::new(ctx, QpType::Rc, cap, 16, 4096)
            .unwrap_or_else(|e| panic!("creating {who}'s endpoint: {e}"))
    };
    let verbs_peer = |name: &str| {
        let args = ["verbs".to_string(), dir.path().display().to_string()];
        RemoteDevice::attach(Peer::spawn(name, PEER.as_ref(), &args))
            .unwrap_or_else(|e| panic!("starting the {name} verbs peer: {e}"))
    };
    {
        let (soft, survivor_ctx) = open_soft(&dir);
        let third_ctx = soft.open("softverbs1").expect("opening softverbs1");
        let survivor = endpoint(&survivor_ctx, "the survivor");
        let third = endpoint(&third_ctx, "the third party");

        let old = verbs_peer("old");
        let old_ep = endpoint(old.context(), "the old child");
        let old_info = old_ep.info(PSN).expect("the old child's QP info");
        // ~270 ms per try and 6 retries: the survivor retransmits for about 2 s.
        let survivor_opts = ConnOpts { timeout: 16, retry_cnt: 6, ..conn_opts() };
        conn::connect(&survivor.qp, PSN, &old_info, &survivor_opts).expect("connecting survivor");
        let survivor_info = survivor.info(PSN).expect("the survivor's QP info");
        conn::connect(&old_ep.qp, PSN, &survivor_info, &conn_opts()).expect("connecting old");
        drop(old_ep);
        old.kill();

        // The survivor's SEND: its first transmission finds a dead port, its retries go on.
        survivor.mr.write(0, b"stale: for the dead process").expect("writing the stale SEND");
        let sge = [survivor.mr.sge(0, 27)];
        let wr = SendWr {
            wr_id: 1,
            sg_list: &sge,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        survivor.qp.post_send(&[wr]).expect("posting the survivor's SEND");

        let new = verbs_peer("new");
        let new_ep = endpoint(new.context(), "the new child");
        let new_info = new_ep.info(PSN).expect("the new child's QP info");
        let third_info = third.info(PSN).expect("the third party's QP info");
        conn::connect(&new_ep.qp, PSN, &third_info, &conn_opts()).expect("connecting new");
        conn::connect(&third.qp, PSN, &new_info, &conn_opts()).expect("connecting third");
        for (wr_id, off) in [(10, 0), (11, 1024)] {
            let sge = [new_ep.mr.sge(off, 1024)];
            new_ep.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).expect("posting a receive");
        }
        // Every retransmission of the survivor happens while the new QP waits: its SEND ends
        // with RETRY_EXC_ERR, the dead peer having answered nothing.
        let wc = survivor.cq.poll_n(1, Duration::from_secs(20)).expect("the survivor's SEND");
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RetryExcErr), "{wc:?}");

        let msg: Vec<u8> = (0..300u32).map(|i| (i * 13) as u8).collect();
        third.mr.write(0, &msg).expect("writing the third party's SEND");
        let sge = [third.mr.sge(0, 300)];
        let wr = SendWr {
            wr_id: 2,
            sg_list: &sge,
            opcode: WrOpcode::SendWithImm,
            imm_data: 0xC0FF_EE01,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        third.qp.post_send(&[wr]).expect("posting the third party's SEND");
        let sent = third.cq.poll_n(1, Duration::from_secs(10)).expect("the third party's SEND");
        assert_eq!((sent[0].wr_id, sent[0].status), (2, WcStatus::Success), "{sent:?}");
        let got = new_ep.cq.poll_n(1, Duration::from_secs(10)).expect("the new QP's receive");
        let want = WorkCompletion {
            wr_id: 10,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 300,
            imm_data: 0xC0FF_EE01,
            qp_num: new_info.qpn,
            src_qp: third_info.qpn,
            wc_flags: WcFlags::WITH_IMM,
            slid: third_info.lid,
            ..WorkCompletion::default()
        };
        assert_eq!(got, [want], "the new QP's first receive");
        assert_eq!(new_ep.mr.read_vec(0, 300).expect("reading the receive"), msg);
        std::thread::sleep(Duration::from_millis(100));
        let mut more = [WorkCompletion::default(); 2];
        let n = new_ep.cq.poll(&mut more).expect("polling again");
        assert_eq!(n, 0, "the new QP completed more: {:?}", &more[..n]);
        // What kept the retransmissions away: a new address for the new process (and a QP number
        // of its own, which is random and so not asserted).
        assert_ne!(new_info.gid, old_info.gid, "the new child got the dead one's address at once");

        drop(new_ep);
        new.close(EXIT_WAIT);
        // The dead child's segment, if the survivor's sends have not cleaned it already.
        soft.fabric().expect("a shared-memory Soft has a fabric").clean().expect("cleaning");
    }
    dir.assert_empty_within(CLEANUP_WAIT);
}
