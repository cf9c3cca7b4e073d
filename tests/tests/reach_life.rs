//! Direct reach over the life of the responder (`docs/architecture.md`, "Direct reach"): what
//! a program relies on when the peer dies, deregisters memory or takes its QP out of service
//! while a requester reaches it, and the order in which a message's bytes become visible.
//! Every test runs with direct reach on and off and asserts the same outcome both ways, as a
//! fast path is another way to execute the same semantics:
//!
//! - a peer killed with SIGKILL answers nothing more: the very next WRITE or READ fails with
//!   `RETRY_EXC_ERR`, and a READ brings none of the dead process's memory;
//! - no byte lands after the responder's `ibv_modify_qp(ERR)` or `ibv_destroy_qp` returned;
//! - a poller that sees a WRITE's last byte finds every byte before it there;
//! - a message longer than reach takes goes as packets with the same bytes and completion.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use softverbs_sim::conn::{self, ConnOpts, Endpoint};
use softverbs_tests::{conn_opts, pattern, FabricDir, Peer, RcPair};
use verbs_api::*;

const PEER: &str = env!("CARGO_BIN_EXE_sv-peer");
const WAIT: Duration = Duration::from_secs(20);
const LINE_WAIT: Duration = Duration::from_secs(30);

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 4, max_send_sge: 16, max_recv_sge: 1, max_inline_data: 0 }
}

/// softverbs0 (a) and softverbs1 (b), connected, with direct reach on or off; an ACK timeout
/// of 4.096 µs × 2^`timeout` and `retry_cnt` 2.
fn pair(test: &str, reach: bool, mr_len: usize, timeout: u8) -> RcPair {
    let opts = ConnOpts { retry_cnt: 2, timeout, ..ConnOpts::default() };
    RcPair::new(test, cap(), mr_len, &opts, |soft| soft.set_reach(reach))
}

fn reached(p: &RcPair) -> u64 {
    p.soft.stats("softverbs0").unwrap().nic.reached
}

fn write_wr<'a>(sges: &'a [Sge], id: u64, to: u64, rkey: u32) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        sg_list: sges,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        ..Default::default()
    }
}

fn read_wr<'a>(sges: &'a [Sge], id: u64, from: u64, rkey: u32) -> SendWr<'a> {
    SendWr { opcode: WrOpcode::RdmaRead, ..write_wr(sges, id, from, rkey) }
}

/// Posts `wr` on `ep` and waits for its one completion.
fn run(ep: &Endpoint, wr: SendWr<'_>) -> WorkCompletion {
    ep.qp.post_send(&[wr]).expect("post_send");
    ep.cq.poll_n(1, WAIT).expect("a completion")[0]
}

/// A target process (`sv-peer target`, its MR of pattern seed 1) and this process's RC
/// endpoint on softverbs0, connected with `opts` from `psn`, reach on or off as the target's.
struct Connected {
    target: Peer,
    soft: nic_model::soft::Soft,
    ep: Endpoint,
    remote: conn::QpInfo,
    raddr: u64,
    rkey: u32,
    // Bound first where destructured, so that it is dropped last: the fabric directory goes
    // after everything in it.
    _dir: FabricDir,
}

fn connect_to_target(tag: &str, reach: bool, opts: &ConnOpts, psn: u32) -> Connected {
    let dir = FabricDir::new(tag);
    let env = [("SOFTVERBS_REACH", if reach { "on" } else { "off" })];
    let args = ["target".to_string(), dir.path().display().to_string()];
    let mut target = Peer::spawn_env("target", PEER.as_ref(), &args, &env);
    let soft = nic_model::soft::Soft::shared_memory(Some(dir.path())).expect("soft");
    soft.set_reach(reach);
    let ctx = soft.open("softverbs0").expect("softverbs0");
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(), 16, 8192).expect("the initiator");
    let me = ep.info(psn).expect("QP info");
    let (remote, mr) = target.swap_info(&me, LINE_WAIT);
    let (raddr, rkey) = mr.expect("the target's INFO names its MR");
    conn::connect(&ep.qp, psn, &remote, opts).expect("connecting");
    target.expect_line("READY", LINE_WAIT);
    Connected { target, soft, ep, remote, raddr, rkey, _dir: dir }
}

// ---------------- a peer stopped with SIGSTOP ----------------

/// Sends SIGCONT to the stopped child when dropped, so a failing test leaves no stopped
/// process behind (the Peer's own drop then kills and reaps it).
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        // SAFETY: a signal to our own child, which the Peer reaps.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0, "SIGSTOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGCONT) };
    }
}

/// The target is stopped (SIGSTOP, as a debugger's breakpoint stops a server) for 40 times
/// the requester's whole retry budget, with a WRITE outstanding. On hardware, or rxe, its
/// NIC would have answered whatever its process did; here its NIC thread is stopped with it,
/// so the request waits unread in its inbox: that is lateness, not loss, and spends no retry.
/// Continued, the WRITE completes with SUCCESS and its bytes are there (read back); with
/// direct reach on, it completes without the stopped process at all. Before the peer's
/// unread inbox counted as late, this ended in RETRY_EXC_ERR with reach off.
fn a_stopped_peer_is_late_not_lost(reach: bool) {
    let tag = if reach { "stopped_reach_on" } else { "stopped_reach_off" };
    // 4.2 ms × (1 + 2 retries): about 12.6 ms of retry budget.
    let opts = ConnOpts { timeout: 10, retry_cnt: 2, ..conn_opts() };
    let Connected { _dir, mut target, soft, ep, raddr, rkey, .. } =
        connect_to_target(tag, reach, &opts, 0x5321);
    let rs = [ep.mr.sge(0, 64)];
    let wc = run(&ep, read_wr(&rs, 1, raddr, rkey));
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "alive: {wc:?}");

    let stopped = Stopped::stop(target.pid());
    std::thread::sleep(Duration::from_millis(20));
    let bytes = pattern(9, 0, 512);
    ep.mr.write(4096, &bytes).unwrap();
    let ws = [ep.mr.sge(4096, 512)];
    ep.qp.post_send(&[write_wr(&ws, 2, raddr + 1024, rkey)]).expect("post_send");
    std::thread::sleep(Duration::from_millis(500));
    let early = ep.cq.poll_n(1, Duration::ZERO).unwrap_or_default();
    if reach {
        // Reached: the stopped process's memory took the bytes, as a NIC's DMA would.
        assert_eq!(
            early.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(2, WcStatus::Success)]
        );
    } else {
        assert!(early.is_empty(), "no completion while the responder's NIC is stopped: {early:?}");
    }
    drop(stopped);
    let wc = if reach { early[0] } else { ep.cq.poll_n(1, WAIT).expect("a completion")[0] };
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::Success, WcOpcode::RdmaWrite),
        "{wc:?}"
    );
    let back = [ep.mr.sge(0, 512)];
    let wc = run(&ep, read_wr(&back, 3, raddr + 1024, rkey));
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (3, WcStatus::Success, 512), "{wc:?}");
    assert_eq!(ep.mr.read_vec(0, 512).unwrap(), bytes, "the WRITE's bytes are there");
    let nic = soft.stats("softverbs0").unwrap().nic;
    assert_eq!((nic.retries, nic.retry_exceeded), (0, 0), "no retry spent on a late peer");
    if !reach {
        assert!(nic.timeouts_deferred > 0, "the timer waited for the stopped peer: {nic:?}");
    }
    drop(ep);
    target.kill();
}

#[test]
fn a_stopped_peer_is_late_not_lost_with_reach_on() {
    a_stopped_peer_is_late_not_lost(true);
}

#[test]
fn a_stopped_peer_is_late_not_lost_with_reach_off() {
    a_stopped_peer_is_late_not_lost(false);
}

// ---------------- a peer killed with SIGKILL ----------------

/// The target is SIGKILLed and reaped (its death is observable). From then on every
/// operation fails with RETRY_EXC_ERR: a READ leaves the local buffer as it was (the dead
/// process's memory is not read), a fetch-and-add returns nothing, a WRITE lands nowhere;
/// each on the QP reset and connected again to the dead peer's QP; nothing is reached.
fn a_killed_peer_answers_nothing(reach: bool) {
    let tag = if reach { "killed_reach_on" } else { "killed_reach_off" };
    let opts = ConnOpts { timeout: 10, retry_cnt: 3, ..conn_opts() };
    let Connected { _dir, mut target, soft, ep, remote, raddr, rkey } =
        connect_to_target(tag, reach, &opts, 0x4321);
    {
        // Alive: a READ brings the target's pattern (seed 1), a WRITE succeeds.
        let rs = [ep.mr.sge(0, 64)];
        let wc = run(&ep, read_wr(&rs, 1, raddr, rkey));
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (1, WcStatus::Success, 64), "{wc:?}");
        assert_eq!(ep.mr.read_vec(0, 64).unwrap(), pattern(1, 0, 64));
        let ws = [ep.mr.sge(4096, 64)];
        let wc = run(&ep, write_wr(&ws, 2, raddr + 64, rkey));
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{wc:?}");
        let before = soft.stats("softverbs0").unwrap().nic.reached;
        assert_eq!(before, if reach { 2 } else { 0 }, "reached while alive only with reach on");

        target.kill();
        ep.mr.write(0, &[0xee; 64]).unwrap();
        let fa = [ep.mr.sge(1024, 8)];
        ep.mr.write_u64(1024, 0xfeed).unwrap();
        let fetch_add = SendWr {
            wr_id: 5,
            sg_list: &fa,
            opcode: WrOpcode::AtomicFetchAndAdd,
            send_flags: SendFlags::SIGNALED,
            atomic: AtomicTarget { remote_addr: raddr + 128, rkey, compare_add: 1, swap: 0 },
            ..Default::default()
        };
        let ops = [
            (3, read_wr(&rs, 3, raddr, rkey)),
            (4, write_wr(&ws, 4, raddr + 64, rkey)),
            (5, fetch_add),
            (6, read_wr(&rs, 6, raddr + 256, rkey)),
        ];
        for (i, (id, wr)) in ops.into_iter().enumerate() {
            if i > 0 {
                // The failure put the QP in ERR: reset it and connect it to the dead QP again.
                let reset = QpAttr { qp_state: QpState::Reset, ..QpAttr::default() };
                ep.qp.modify(&reset, QpAttrMask::STATE).expect("to RESET");
                conn::connect(&ep.qp, 0x4321 + i as u32 * 0x100, &remote, &opts)
                    .expect("connecting again");
            }
            let wc = run(&ep, wr);
            assert_eq!((wc.wr_id, wc.status), (id, WcStatus::RetryExcErr), "{wc:?}");
        }
        assert_eq!(ep.mr.read_vec(0, 64).unwrap(), vec![0xee; 64], "nothing read from the dead");
        assert_eq!(ep.mr.read_u64(1024).unwrap(), 0xfeed, "no original value from the dead");
        let after = soft.stats("softverbs0").unwrap().nic.reached;
        assert_eq!(after, before, "nothing was reached after the kill");
    }
    target.assert_exited();
}

#[test]
fn a_killed_peer_answers_nothing_with_reach_on() {
    a_killed_peer_answers_nothing(true);
}

#[test]
fn a_killed_peer_answers_nothing_with_reach_off() {
    a_killed_peer_answers_nothing(false);
}

// ---------------- no byte after the responder's QP leaves service ----------------

/// How the responder takes its QP out of service.
#[derive(Clone, Copy, Debug)]
enum Leave {
    Err,
    Destroy,
}

/// a streams 1 MiB WRITEs into b's MR, alternating two fill bytes, while b takes its QP out
/// of service; once that verb returned, b's memory must not change any more.
fn no_byte_lands_after_the_qp_leaves(reach: bool, leave: Leave) {
    const LEN: usize = 1 << 20;
    const ROUNDS: u64 = 6;
    for round in 0..ROUNDS {
        let tag = format!("qp_leaves_{leave:?}_{}", if reach { "on" } else { "off" });
        let RcPair { soft, a, b, dir } = pair(&tag, reach, 2 * LEN, 12);
        a.mr.write(0, &vec![0x11; LEN]).unwrap();
        a.mr.write(LEN, &vec![0x22; LEN]).unwrap();
        let posted = AtomicU64::new(0);
        let (b_mr, b_qp) = (b.mr, b.qp);
        let (addr, rkey) = (b_mr.addr(), b_mr.rkey());
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let deadline = Instant::now() + WAIT;
                let mut id = 0u64;
                // Until the first WRITE that fails (every one posted after the QP left).
                while Instant::now() < deadline {
                    let sges = [a.mr.sge((id as usize % 2) * LEN, LEN as u32)];
                    let wc = run(&a, write_wr(&sges, id, addr, rkey));
                    posted.fetch_add(1, Ordering::Relaxed);
                    if wc.status != WcStatus::Success {
                        return (id, wc.status);
                    }
                    id += 1;
                }
                (id, WcStatus::Success)
            });
            // Let WRITEs flow, then leave at a moment that moves with the round.
            let until = Instant::now() + WAIT;
            while posted.load(Ordering::Relaxed) < 2 + round && Instant::now() < until {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_micros(137 * round));
            match leave {
                Leave::Err => {
                    let attr = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                    b_qp.modify(&attr, QpAttrMask::STATE).expect("to ERR");
                }
                Leave::Destroy => b_qp.destroy().expect("ibv_destroy_qp"),
            }
            let then = b_mr.read_vec(0, LEN).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let later = b_mr.read_vec(0, LEN).unwrap();
            let (id, status) = writer.join().expect("the writer");
            let changed = then.iter().zip(&later).filter(|(x, y)| x != y).count();
            assert_eq!(
                changed, 0,
                "round {round}: {changed} bytes changed after {leave:?} returned (reach {reach})"
            );
            // A WRITE the responder never took fails as any to a QP out of service.
            assert_ne!(status, WcStatus::Success, "round {round}: no WRITE failed up to wr {id}");
        });
        drop((a, b_mr, soft));
        drop(dir);
    }
}

#[test]
fn no_byte_lands_after_modify_qp_err_returns_with_reach_on() {
    no_byte_lands_after_the_qp_leaves(true, Leave::Err);
}

#[test]
fn no_byte_lands_after_modify_qp_err_returns_with_reach_off() {
    no_byte_lands_after_the_qp_leaves(false, Leave::Err);
}

#[test]
fn no_byte_lands_after_destroy_qp_returns_with_reach_on() {
    no_byte_lands_after_the_qp_leaves(true, Leave::Destroy);
}

#[test]
fn no_byte_lands_after_destroy_qp_returns_with_reach_off() {
    no_byte_lands_after_the_qp_leaves(false, Leave::Destroy);
}

// ---------------- the last byte last ----------------

/// A thread of b polls the last byte of a WRITE's target, as `ib_write_lat` and ring
/// protocols do; when it flips to the round's value, every byte before it must hold that
/// value too. Rounds alternate lengths that take glibc's different `memcpy` paths.
fn last_byte_lands_last(reach: bool) {
    const ROUNDS: u32 = 1000;
    const LENS: [usize; 4] = [700, 3000, 20_000, 300_000];
    let tag = if reach { "last_byte_on" } else { "last_byte_off" };
    let p = pair(tag, reach, 1 << 20, 18);
    let base = p.b.mr.addr() as usize;
    let round_no = AtomicU64::new(0);
    let bad = AtomicU64::new(0);
    let watching = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=ROUNDS {
                let len = LENS[round as usize % LENS.len()];
                let v = (round % 251 + 1) as u8;
                let deadline = Instant::now() + WAIT;
                // SAFETY: b's MR is this process's own memory (the soft backend's `addr` is
                // its first byte) and at least `len` bytes long; other threads write it only
                // through the NIC, and we only read, byte by byte, atomically.
                let at = |k: usize| unsafe { AtomicU8::from_ptr((base + k) as *mut u8) };
                watching.store(true, Ordering::Release);
                while at(len - 1).load(Ordering::Acquire) != v {
                    if Instant::now() > deadline {
                        bad.fetch_add(1_000_000, Ordering::Relaxed);
                        return;
                    }
                    std::hint::spin_loop();
                }
                // The first bytes first: glibc's memcpy stores its first vector last.
                if (0..len).any(|k| at(k).load(Ordering::Relaxed) != v) {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
                watching.store(false, Ordering::Release);
                round_no.store(u64::from(round), Ordering::Release);
            }
        });
        let mut fill = Vec::new();
        for round in 1..=ROUNDS {
            let len = LENS[round as usize % LENS.len()];
            let v = (round % 251 + 1) as u8;
            fill.clear();
            fill.resize(len, v);
            p.a.mr.write(0, &fill).unwrap();
            let deadline = Instant::now() + WAIT;
            while !watching.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::yield_now();
            }
            let sges = [p.a.mr.sge(0, len as u32)];
            let wc = run(&p.a, write_wr(&sges, u64::from(round), p.b.mr.addr(), p.b.mr.rkey()));
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            while round_no.load(Ordering::Acquire) < u64::from(round) {
                assert!(Instant::now() < deadline, "the poller did not see round {round}");
                assert!(bad.load(Ordering::Relaxed) < 1_000_000, "the poller gave up");
                std::thread::yield_now();
            }
        }
    });
    assert_eq!(bad.load(Ordering::Relaxed), 0, "rounds whose last byte came before the others");
    assert_eq!(reached(&p) > 0, reach);
}

#[test]
fn a_writes_last_byte_lands_last_with_reach_on() {
    last_byte_lands_last(true);
}

#[test]
fn a_writes_last_byte_lands_last_with_reach_off() {
    last_byte_lands_last(false);
}

// ---------------- large messages ----------------

/// A message of up to 1 MiB is reached; a longer one goes as packets (a reach copies under the
/// device lock, and the device answers nobody else meanwhile), with the same bytes and the
/// same completion both ways.
fn large_messages(reach: bool) {
    const MIB: usize = 1 << 20;
    let tag = if reach { "large_on" } else { "large_off" };
    let p = pair(tag, reach, 3 * MIB, 18);
    let bytes = pattern(7, 0, 3 * MIB);
    p.a.mr.write(0, &bytes).unwrap();
    for (id, len) in [(1u64, MIB), (2, 2 * MIB + 24)] {
        let sges = [p.a.mr.sge(0, len as u32)];
        let before = reached(&p);
        let wc = run(&p.a, write_wr(&sges, id, p.b.mr.addr(), p.b.mr.rkey()));
        let want = WorkCompletion {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaWrite,
            byte_len: len as u32,
            qp_num: p.a.qp.qp_num(),
            ..WorkCompletion::default()
        };
        assert_eq!(wc, want);
        assert!(p.b.mr.read_vec(0, len).unwrap() == bytes[..len], "the bytes of wr {id}");
        let by_reach = reached(&p) - before;
        assert_eq!(by_reach, u64::from(reach && len <= MIB), "wr {id} of {len} bytes");
    }
}

#[test]
fn a_message_over_1_mib_goes_as_packets_with_reach_on() {
    large_messages(true);
}

#[test]
fn a_message_over_1_mib_goes_as_packets_with_reach_off() {
    large_messages(false);
}

/// One `ibv_post_send` copies at most 1 MiB by reach: in a list of four 512 KiB WRITEs the
/// first two are reached and the other two go as packets (the device lock is held for one
/// MiB of copying, not for the whole list), with every byte, and the four completions in
/// order, as with reach off.
fn a_list_of_large_writes(reach: bool) {
    const HALF: usize = 1 << 19;
    let tag = if reach { "list_on" } else { "list_off" };
    let p = pair(tag, reach, 4 * HALF, 18);
    let bytes = pattern(11, 0, 4 * HALF);
    p.a.mr.write(0, &bytes).unwrap();
    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [p.a.mr.sge(i * HALF, HALF as u32)]).collect();
    let wrs: Vec<SendWr<'_>> = (0..4)
        .map(|i| {
            let to = p.b.mr.addr() + (i * HALF) as u64;
            write_wr(&sges[i], 10 + i as u64, to, p.b.mr.rkey())
        })
        .collect();
    let before = reached(&p);
    p.a.qp.post_send(&wrs).expect("post_send of four WRITEs");
    let wcs = p.a.cq.poll_n(4, WAIT).expect("four completions");
    for (i, wc) in wcs.iter().enumerate() {
        let want = WorkCompletion {
            wr_id: 10 + i as u64,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaWrite,
            byte_len: HALF as u32,
            qp_num: p.a.qp.qp_num(),
            ..WorkCompletion::default()
        };
        assert_eq!(*wc, want, "completion {i}");
    }
    assert!(p.b.mr.read_vec(0, 4 * HALF).unwrap() == bytes, "the bytes of the four WRITEs");
    assert_eq!(reached(&p) - before, if reach { 2 } else { 0 }, "WRITEs done by reach");
}

#[test]
fn one_post_reaches_at_most_1_mib_with_reach_on() {
    a_list_of_large_writes(true);
}

#[test]
fn one_post_reaches_at_most_1_mib_with_reach_off() {
    a_list_of_large_writes(false);
}

// ---------------- the tail split across SGEs ----------------

/// WRITEs and READs whose last 8 bytes (placed last) are spread over several SGEs, and short
/// ones that are all tail: the same bytes land as with one copy, and nothing around them.
fn tails_across_sges(reach: bool) {
    let tag = if reach { "tails_on" } else { "tails_off" };
    let p = pair(tag, reach, 1 << 16, 18);
    let src = pattern(11, 0, 4096);
    p.a.mr.write(0, &src).unwrap();
    let shapes: [&[u32]; 6] =
        [&[1000, 3, 2, 5], &[7, 1], &[1, 1, 1, 1, 1, 1, 1, 1, 1], &[3], &[9], &[8]];
    let mut id = 0;
    for shape in shapes {
        let len: usize = shape.iter().map(|&n| n as usize).sum();
        // Local pieces 16 bytes apart, so their order matters.
        let mut at = 0usize;
        let pieces: Vec<(usize, u32)> = shape
            .iter()
            .map(|&n| {
                let piece = (at, n);
                at += n as usize + 16;
                piece
            })
            .collect();
        let gathered: Vec<u8> =
            pieces.iter().flat_map(|&(o, n)| src[o..o + n as usize].to_vec()).collect();
        let sges: Vec<Sge> = pieces.iter().map(|&(o, n)| p.a.mr.sge(o, n)).collect();
        // WRITE to b at +8192 + 3 (unaligned), surrounded by a known byte.
        p.b.mr.write(8192, &[0x5c; 2048]).unwrap();
        id += 1;
        let wc = run(&p.a, write_wr(&sges, id, p.b.mr.addr() + 8195, p.b.mr.rkey()));
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, len as u32), "{shape:?}");
        let got = p.b.mr.read_vec(8192, 2048).unwrap();
        assert_eq!(&got[3..3 + len], &gathered[..], "WRITE {shape:?}");
        assert!(got[..3].iter().chain(&got[3 + len..]).all(|&b| b == 0x5c), "{shape:?}");
        // READ it back into a's pieces at +16384, scattered the same way.
        p.a.mr.write(16384, &[0xc5; 4096]).unwrap();
        let back: Vec<Sge> = pieces.iter().map(|&(o, n)| p.a.mr.sge(16384 + o, n)).collect();
        id += 1;
        let wc = run(&p.a, read_wr(&back, id, p.b.mr.addr() + 8195, p.b.mr.rkey()));
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, len as u32), "{shape:?}");
        let mine = p.a.mr.read_vec(16384, 4096).unwrap();
        let mut want = vec![0xc5; 4096];
        for &(o, n) in &pieces {
            want[o..o + n as usize].copy_from_slice(&src[o..o + n as usize]);
        }
        assert!(mine == want, "READ {shape:?}");
    }
    assert_eq!(reached(&p), if reach { 2 * shapes.len() as u64 } else { 0 });
}

#[test]
fn tails_split_across_sges_land_whole_with_reach_on() {
    tails_across_sges(true);
}

#[test]
fn tails_split_across_sges_land_whole_with_reach_off() {
    tails_across_sges(false);
}
