//! Direct reach (`docs/architecture.md`, "Direct reach"): while nothing observes the wire, an
//! RC QP that is sending nothing else does an RDMA WRITE, READ or atomic in the responder's
//! registered memory itself, with no packet. These tests hold what a program relies on: the
//! bytes that land and every work-completion field, exactly as over packets; every error the
//! responder would report still reported (by the packets that then carry the WR); the order
//! of a WR behind one in flight; no reach while a tap, capture or fault plan could see the
//! wire; and the MR's deregistration, after which nothing reaches its memory.
//!
//! Two devices of one process on a shared-memory fabric reach each other through the same
//! files as two processes do (each maps the other's reach file); `multiprocess.rs` runs
//! reached WRITEs and READs between processes and against a peer that dies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nic_model::soft::TapDir;
use softverbs_sim::conn::ConnOpts;
use softverbs_tests::{pattern, RcPair};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const MR_LEN: usize = 1 << 20;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

/// softverbs0 (a) and softverbs1 (b), connected, with direct reach on or off.
struct Pair(RcPair);

impl std::ops::Deref for Pair {
    type Target = RcPair;
    fn deref(&self) -> &RcPair {
        &self.0
    }
}

fn pair(test: &str, reach: bool) -> Pair {
    let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
    Pair(RcPair::new(test, cap(), MR_LEN, &opts, |soft| soft.set_reach(reach)))
}

impl Pair {
    fn reached(&self) -> u64 {
        self.soft.stats("softverbs0").unwrap().nic.reached
    }
    fn sent(&self) -> u64 {
        self.soft.stats("softverbs0").unwrap().nic.tx_packets
    }
    /// A signaled WRITE of a's first 64 bytes to the start of b's MR, which must succeed
    /// with the completion of [`ok`].
    fn write_ok(&self, id: u64) {
        let sges = [self.a.mr.sge(0, 64)];
        let wc = self.run(write_wr(&sges, id, self.b.mr.addr(), self.b.mr.rkey()));
        ok(&wc, id, WcOpcode::RdmaWrite, 64, self.a.qp.qp_num());
    }
    /// Post `wr` on a's QP and wait for its one completion.
    fn run(&self, wr: SendWr<'_>) -> WorkCompletion {
        self.a.qp.post_send(&[wr]).expect("post_send");
        self.a.cq.poll_n(1, WAIT).expect("a completion")[0]
    }
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

/// The completion every test expects of a successful WR of a's QP.
fn ok(wc: &WorkCompletion, id: u64, opcode: WcOpcode, len: u32, qpn: u32) {
    let want = WorkCompletion {
        wr_id: id,
        status: WcStatus::Success,
        opcode,
        byte_len: len,
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    assert_eq!(*wc, want);
}

#[test]
fn write_read_and_atomics_are_reached_with_the_bytes_and_completions_of_packets() {
    let p = pair("reach_ops", true);
    let (a, b) = (&p.a, &p.b);
    let qpn = a.qp.qp_num();
    // A WRITE gathered from three SGEs into b's MR at +1000.
    let data = pattern(3, 0, 3000);
    a.mr.write(0, &data[..1000]).unwrap();
    a.mr.write(5000, &data[1000..2500]).unwrap();
    a.mr.write(9000, &data[2500..]).unwrap();
    let sges = [a.mr.sge(0, 1000), a.mr.sge(5000, 1500), a.mr.sge(9000, 500)];
    let wc = p.run(write_wr(&sges, 1, b.mr.addr() + 1000, b.mr.rkey()));
    ok(&wc, 1, WcOpcode::RdmaWrite, 3000, qpn);
    assert_eq!(b.mr.read_vec(1000, 3000).unwrap(), data, "the WRITE's bytes landed in place");
    assert_eq!(b.mr.read_vec(0, 1000).unwrap(), vec![0; 1000], "nothing before them");
    assert_eq!(b.mr.read_vec(4000, 64).unwrap(), vec![0; 64], "nothing after them");
    // An inline WRITE.
    let inline = SendWr {
        inline_data: Some(b"inline!"),
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..write_wr(&[], 2, b.mr.addr() + 8000, b.mr.rkey())
    };
    ok(&p.run(inline), 2, WcOpcode::RdmaWrite, 7, qpn);
    assert_eq!(b.mr.read_vec(8000, 7).unwrap(), b"inline!");
    // IBV_SEND_INLINE over a gather list: read at post time, straight into b's memory.
    let sges = [a.mr.sge(5000, 20), a.mr.sge(0, 12)];
    let gathered = SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..write_wr(&sges, 21, b.mr.addr() + 9000, b.mr.rkey())
    };
    ok(&p.run(gathered), 21, WcOpcode::RdmaWrite, 32, qpn);
    a.mr.write(5000, &[0; 20]).unwrap(); // the program may reuse its buffer at once
    let want: Vec<u8> = data[1000..1020].iter().chain(&data[..12]).copied().collect();
    assert_eq!(b.mr.read_vec(9000, 32).unwrap(), want);
    // A READ scattered into two SGEs.
    let sges = [a.mr.sge(20000, 1200), a.mr.sge(30000, 1800)];
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        ..write_wr(&sges, 3, b.mr.addr() + 1000, b.mr.rkey())
    };
    ok(&p.run(read), 3, WcOpcode::RdmaRead, 3000, qpn);
    assert_eq!(a.mr.read_vec(20000, 1200).unwrap(), data[..1200]);
    assert_eq!(a.mr.read_vec(30000, 1800).unwrap(), data[1200..]);
    // Fetch-and-add, then compare-and-swap, on b's word at +64.
    b.mr.write(64, &40u64.to_ne_bytes()).unwrap();
    let word = [a.mr.sge(40000, 8)];
    let atomic = |id, opcode, compare_add, swap| SendWr {
        wr_id: id,
        sg_list: &word,
        opcode,
        send_flags: SendFlags::SIGNALED,
        atomic: AtomicTarget {
            remote_addr: b.mr.addr() + 64,
            rkey: b.mr.rkey(),
            compare_add,
            swap,
        },
        ..Default::default()
    };
    ok(&p.run(atomic(4, WrOpcode::AtomicFetchAndAdd, 2, 0)), 4, WcOpcode::FetchAdd, 8, qpn);
    assert_eq!(a.mr.read_vec(40000, 8).unwrap(), 40u64.to_ne_bytes(), "the original value");
    assert_eq!(b.mr.read_vec(64, 8).unwrap(), 42u64.to_ne_bytes(), "added");
    ok(&p.run(atomic(5, WrOpcode::AtomicCmpAndSwp, 42, 7)), 5, WcOpcode::CompSwap, 8, qpn);
    assert_eq!(a.mr.read_vec(40000, 8).unwrap(), 42u64.to_ne_bytes());
    assert_eq!(b.mr.read_vec(64, 8).unwrap(), 7u64.to_ne_bytes(), "swapped");
    ok(&p.run(atomic(6, WrOpcode::AtomicCmpAndSwp, 1, 9)), 6, WcOpcode::CompSwap, 8, qpn);
    assert_eq!(b.mr.read_vec(64, 8).unwrap(), 7u64.to_ne_bytes(), "a failed compare swaps nothing");
    assert_eq!(p.reached(), 7, "all seven by direct reach");
    assert_eq!(p.sent(), 0, "and not one packet");
    // An unsignaled WRITE completes nothing, and its bytes still land.
    let sges = [a.mr.sge(0, 16)];
    let quiet = SendWr {
        send_flags: SendFlags::empty(),
        ..write_wr(&sges, 7, b.mr.addr() + 50000, b.mr.rkey())
    };
    a.qp.post_send(&[quiet]).unwrap();
    assert_eq!(b.mr.read_vec(50000, 16).unwrap(), data[..16]);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 0, "no completion for an unsignaled WR");
}

#[test]
fn what_the_responder_refuses_goes_as_packets_and_fails_as_before() {
    let p = pair("reach_refused", true);
    let (a, b) = (&p.a, &p.b);
    let sges = [a.mr.sge(0, 64)];
    // Past the end of b's MR: the responder's NAK, REM_ACCESS_ERR, and the QP in ERR.
    let wc = p.run(write_wr(&sges, 1, b.mr.addr() + MR_LEN as u64 - 32, b.mr.rkey()));
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr));
    assert_eq!(p.reached(), 0);
    assert!(p.sent() >= 1, "the WRITE went as a packet");

    let p = pair("reach_bad_key", true);
    let sges = [p.a.mr.sge(0, 64)];
    let wc = p.run(write_wr(&sges, 2, p.b.mr.addr(), p.b.mr.rkey() ^ 0x100));
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RemAccessErr), "a key that names no MR");
    assert_eq!(p.reached(), 0);

    // An MR without REMOTE_WRITE.
    let p = pair("reach_no_right", true);
    let ro = p.b.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let sges = [p.a.mr.sge(0, 64)];
    let wc = p.run(write_wr(&sges, 3, ro.addr(), ro.rkey()));
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::RemAccessErr));
    assert_eq!(ro.read_vec(0, 64).unwrap(), vec![0; 64], "nothing landed");
    assert_eq!(p.reached(), 0);
}

#[test]
fn a_deregistered_mr_is_never_reached_again() {
    let p = pair("reach_dereg", true);
    let mr = p.b.pd.reg_mr(4096, AccessFlags::all()).unwrap();
    let (addr, rkey) = (mr.addr(), mr.rkey());
    let sges = [p.a.mr.sge(0, 64)];
    ok(&p.run(write_wr(&sges, 1, addr, rkey)), 1, WcOpcode::RdmaWrite, 64, p.a.qp.qp_num());
    assert_eq!(p.reached(), 1);
    mr.dereg().expect("ibv_dereg_mr");
    let wc = p.run(write_wr(&sges, 2, addr, rkey));
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RemAccessErr), "its key is dead");
    assert_eq!(p.reached(), 1, "the second WRITE went as a packet");
}

#[test]
fn a_wr_behind_one_in_flight_waits_its_turn_as_packets() {
    let p = pair("reach_order", true);
    let (a, b) = (&p.a, &p.b);
    // A SEND with no receive posted at b waits for its RNR retries... post a receive so it
    // completes; the WRITE posted right behind it, in the same call, may not overtake it.
    let rsge = [b.mr.sge(100000, 64)];
    b.qp.post_recv(&[RecvWr { wr_id: 50, sg_list: &rsge }]).unwrap();
    a.mr.write(0, b"first, then the write").unwrap();
    let s1 = [a.mr.sge(0, 21)];
    let send = SendWr {
        wr_id: 1,
        sg_list: &s1,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    let s2 = [a.mr.sge(0, 5)];
    let write = write_wr(&s2, 2, b.mr.addr() + 200000, b.mr.rkey());
    a.qp.post_send(&[send, write]).unwrap();
    let wc = a.cq.poll_n(2, WAIT).expect("two completions");
    assert_eq!((wc[0].wr_id, wc[0].opcode), (1, WcOpcode::Send), "in the order posted");
    assert_eq!((wc[1].wr_id, wc[1].opcode), (2, WcOpcode::RdmaWrite));
    assert_eq!(b.mr.read_vec(200000, 5).unwrap(), b"first");
    assert_eq!(p.reached(), 0, "the WRITE went behind the SEND, as packets");
    let got = b.cq.poll_n(1, WAIT).expect("b's receive");
    assert_eq!((got[0].wr_id, got[0].byte_len), (50, 21));
}

#[test]
fn nothing_is_reached_while_a_tap_could_see_the_wire() {
    // A tap on the requester.
    let p = pair("reach_tap_a", true);
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    p.soft
        .set_tap(
            "softverbs0",
            Some(Arc::new(move |_: TapDir, _: &[u8]| {
                s.fetch_add(1, Ordering::Relaxed);
            })),
        )
        .unwrap();
    p.write_ok(1);
    assert_eq!(p.reached(), 0);
    assert!(seen.load(Ordering::Relaxed) >= 2, "the tap saw the WRITE and its ACK");
    // A tap on the responder only: it publishes that it is observed.
    let p = pair("reach_tap_b", true);
    p.soft.set_tap("softverbs1", Some(Arc::new(|_: TapDir, _: &[u8]| {}))).unwrap();
    p.write_ok(2);
    assert_eq!(p.reached(), 0, "the responder's tap must see the WRITE");
    // Taken off again: reached.
    p.soft.set_tap("softverbs1", None).unwrap();
    p.write_ok(3);
    assert_eq!(p.reached(), 1);
}

#[test]
fn with_reach_off_everything_goes_as_packets() {
    let p = pair("reach_off", false);
    p.write_ok(1);
    assert_eq!(p.reached(), 0);
    assert_eq!(p.sent(), 1);
}

#[test]
fn a_qp_out_of_rts_at_the_responder_is_not_reached() {
    let p = pair("reach_err", true);
    let sges = [p.a.mr.sge(0, 64)];
    p.write_ok(1);
    assert_eq!(p.reached(), 1);
    // b's QP to ERR: a's next WRITE must not land; it goes as packets, which b drops, and
    // a's retries run out.
    let attr = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    p.b.qp.modify(&attr, QpAttrMask::STATE).expect("to ERR");
    p.a.mr.write(0, &[0xab; 64]).unwrap();
    let wc = p.run(write_wr(&sges, 2, p.b.mr.addr() + 4096, p.b.mr.rkey()));
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RetryExcErr));
    assert_eq!(p.b.mr.read_vec(4096, 64).unwrap(), vec![0; 64], "nothing landed");
    assert_eq!(p.reached(), 1);
}

// ---------------- faithful to the packets: PSNs, path MTUs, ports, send queues, counters ----------------

/// softverbs0 (a) and softverbs1 (b) as [`pair`] makes them, but set up by hand: a's QP with
/// `cap`, sending from `a_psn` on `a_opts`; b's on `b_opts`, expecting 0x100 (what a said it
/// would send from). A right pair has `a_psn` 0x100 and the same path MTU on both sides.
fn pair_set(
    test: &str,
    reach: bool,
    cap: QpCap,
    a_psn: u32,
    a_opts: &ConnOpts,
    b_opts: &ConnOpts,
) -> Pair {
    use softverbs_sim::conn::{connect, Endpoint};
    let dir = softverbs_tests::FabricDir::new(test);
    let soft = nic_model::soft::Soft::shared_memory(Some(dir.path())).expect("soft");
    soft.set_reach(reach);
    let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    let a = Endpoint::new(&c0, QpType::Rc, cap, 64, MR_LEN).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap, 64, MR_LEN).unwrap();
    let (ia, ib) = (a.info(0x100).unwrap(), b.info(0x200).unwrap());
    connect(&a.qp, a_psn, &ib, a_opts).unwrap();
    connect(&b.qp, 0x200, &ia, b_opts).unwrap();
    Pair(RcPair { soft, a, b, dir })
}

/// Retries that run out in about 0.2 s (3 x 4.096 us x 2^14): long enough that a machine
/// under load does not retransmit what a NAK or an ACK answers, so reach on and off end alike.
fn short_retries() -> ConnOpts {
    ConnOpts { retry_cnt: 2, timeout: 14, ..ConnOpts::default() }
}

/// Retries for tests whose WRs all end without one (success, or a NAK at once): a second
/// before the timer fires, so that no retransmission changes what they count.
fn no_retries() -> ConnOpts {
    ConnOpts { retry_cnt: 2, timeout: 18, ..ConnOpts::default() }
}

/// One of the one-sided operations, on a's first `len` bytes and b's MR at +4096.
#[derive(Clone, Copy, Debug)]
enum Op {
    Write(u32),
    Read(u32),
    FetchAdd,
}

impl Pair {
    /// Posts `op` (wr_id `id`) on a's QP and waits for its completion: its status, and b's
    /// first 8 KiB after it.
    fn outcome(&self, op: Op, id: u64) -> (WcStatus, u32, Vec<u8>) {
        let (a, b) = (&self.a, &self.b);
        a.mr.write(0, &pattern(9, 0, 8192)).unwrap();
        let len = match op {
            Op::Write(n) | Op::Read(n) => n,
            Op::FetchAdd => 8,
        };
        let sges = [a.mr.sge(0, len)];
        let to = b.mr.addr() + 4096;
        let wr = match op {
            Op::Write(_) => write_wr(&sges, id, to, b.mr.rkey()),
            Op::Read(_) => SendWr { opcode: WrOpcode::RdmaRead, ..write_wr(&sges, id, to, 0) },
            Op::FetchAdd => SendWr {
                opcode: WrOpcode::AtomicFetchAndAdd,
                atomic: AtomicTarget {
                    remote_addr: to,
                    rkey: b.mr.rkey(),
                    compare_add: 5,
                    swap: 0,
                },
                ..write_wr(&sges, id, 0, 0)
            },
        };
        let wr = SendWr { rdma: RdmaTarget { remote_addr: to, rkey: b.mr.rkey() }, ..wr };
        let wc = self.run(wr);
        assert_eq!(wc.wr_id, id);
        (wc.status, wc.byte_len, b.mr.read_vec(0, 8192).unwrap())
    }
}

/// The classic connection bug, a requester's PSN that is not its responder's expected PSN:
/// every operation fails (or, behind, is taken for a duplicate) by reach exactly as by
/// packets, never a SUCCESS by reach that packets would not give.
#[test]
fn a_requester_off_its_responders_psn_ends_as_its_packets_do() {
    let cap = cap();
    for (a_psn, what) in [(0x200, "0x100 ahead"), (0xfd, "3 behind")] {
        for op in [Op::Write(4096), Op::Read(4096), Op::FetchAdd, Op::Write(64)] {
            let mut ends = Vec::new();
            for reach in [true, false] {
                let o = short_retries();
                let p = pair_set("reach_psn", reach, cap, a_psn, &o, &o);
                let end = p.outcome(op, 1);
                assert_eq!(p.reached(), 0, "{what}, {op:?}: never reached");
                ends.push(end);
            }
            assert_eq!(ends[0], ends[1], "{what}, {op:?}: reach on and off end alike");
            // Ahead, the sequence-error NAK names a PSN the requester has passed, so its
            // retries run out; behind, duplicates are ACKed with a PSN it never sent, so they
            // run out too, but for a 4 KiB WRITE whose LAST packet is the first at the
            // expected PSN: a LAST without its FIRST, an invalid request (as on rxe).
            let want = match (a_psn, op) {
                (0xfd, Op::Write(4096)) => WcStatus::RemInvReqErr,
                _ => WcStatus::RetryExcErr,
            };
            assert_eq!(ends[0].0, want, "{what}, {op:?}");
            if matches!(op, Op::Write(_)) {
                assert_eq!(ends[0].2[4096..4160], [0; 64], "{what}, {op:?}: nothing landed");
            }
        }
    }
}

/// A right pair stays reached after packets moved its PSNs (SENDs, and a WRITE that went
/// behind one): the responder keeps its published expected PSN current.
#[test]
fn a_right_pair_is_reached_after_packets_moved_its_psns() {
    let p = pair("reach_psn_moves", true);
    let (a, b) = (&p.a, &p.b);
    for i in 0..2 {
        let rsge = [b.mr.sge(100_000 + 4096 * i, 4096)];
        b.qp.post_recv(&[RecvWr { wr_id: 50 + i as u64, sg_list: &rsge }]).unwrap();
    }
    let s = [a.mr.sge(0, 3000)];
    let send = |id| SendWr {
        wr_id: id,
        sg_list: &s[..],
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    let s1 = [a.mr.sge(0, 64)];
    // A 3-packet SEND, then a WRITE behind it in the same call: both as packets.
    a.qp.post_send(&[send(1), write_wr(&s1, 2, b.mr.addr(), b.mr.rkey())]).unwrap();
    assert_eq!(a.cq.poll_n(2, WAIT).expect("two completions").len(), 2);
    assert_eq!(p.reached(), 0);
    // Nothing in flight now: reached, at the PSNs the packets left.
    p.write_ok(3);
    assert_eq!(p.reached(), 1, "reached after the packets");
    // And a SEND after it still meets the PSN b expects.
    a.qp.post_send(&[send(4)]).unwrap();
    let wc = a.cq.poll_n(1, WAIT).expect("the SEND");
    assert_eq!((wc[0].wr_id, wc[0].status), (4, WcStatus::Success));
    p.write_ok(5);
    assert_eq!(p.reached(), 2);
}

/// Path MTUs that differ: what the packets cannot carry (a WRITE's FIRST packet of another
/// MTU, an ONLY packet over the responder's MTU, READ responses cut at another MTU) fails by
/// reach as by packets; a message of one packet under both MTUs is reached.
#[test]
fn path_mtus_that_differ_end_as_the_packets_do() {
    let cap = cap();
    let small = ConnOpts { mtu: Mtu::Mtu256, ..no_retries() };
    let large = ConnOpts { mtu: Mtu::Mtu1024, ..no_retries() };
    for (a_opts, b_opts, what) in [(&small, &large, "256 to 1024"), (&large, &small, "1024 to 256")]
    {
        for op in [Op::Write(4096), Op::Write(600), Op::Read(4096), Op::Write(200), Op::Read(200)] {
            let mut ends = Vec::new();
            let mut reached = 0;
            for reach in [true, false] {
                let p = pair_set("reach_mtu", reach, cap, 0x100, a_opts, b_opts);
                ends.push(p.outcome(op, 1));
                reached += p.reached();
            }
            assert_eq!(ends[0], ends[1], "{what}, {op:?}: reach on and off end alike");
            let one_packet = matches!(op, Op::Write(200) | Op::Read(200));
            assert_eq!(ends[0].0 == WcStatus::Success, one_packet, "{what}, {op:?}: {ends:?}");
            assert_eq!(reached, u64::from(one_packet), "{what}, {op:?}: reached when it fits");
        }
        // The measured case: a 4 KiB WRITE from 256 to 1024 is an invalid request.
    }
    let p = pair_set("reach_mtu_4k", true, cap, 0x100, &small, &large);
    assert_eq!(p.outcome(Op::Write(4096), 7).0, WcStatus::RemInvReqErr);
}

/// A port that went down (its inbox found damaged: its owner gets PORT_ERR) is reached no
/// more: WRITEs and READs fail RETRY_EXC_ERR, as their packets do.
#[test]
fn a_port_that_is_down_is_not_reached() {
    for reach in [true, false] {
        let p =
            pair_set("reach_port_down", reach, cap(), 0x100, &short_retries(), &short_retries());
        let (status, _, _) = p.outcome(Op::Write(64), 1);
        assert_eq!(status, WcStatus::Success, "reach {reach}: before");
        p.b.mr.write(4096, &[0; 64]).unwrap();
        // A stray write into b's inbox (its head word): b's NIC finds it and takes its port down.
        let lid = nic_model::engine::slot_of_gid(&p.b.info(0).unwrap().gid).expect("b's slot");
        let inbox = p.dir.path().join(format!("port-{lid}.inbox"));
        let file = std::fs::OpenOptions::new().write(true).open(&inbox).expect("b's inbox");
        std::os::unix::fs::FileExt::write_all_at(&file, &1001u64.to_ne_bytes(), 192).unwrap();
        let ctx = &p.b.ctx;
        let first = ctx.get_async_event(Some(WAIT)).expect("PORT_ACTIVE");
        assert_eq!(first.event_type, AsyncEventType::PortActive);
        let ev = ctx.get_async_event(Some(WAIT)).expect("PORT_ERR");
        assert_eq!((ev.event_type, ev.element), (AsyncEventType::PortErr, AsyncElement::Port(1)));
        let reached = p.reached();
        let wc = p.outcome(Op::Write(64), 2);
        assert_eq!(wc.0, WcStatus::RetryExcErr, "reach {reach}: a WRITE to a port that is down");
        assert_eq!(wc.2[4096..4160], [0; 64], "reach {reach}: nothing landed");
        assert_eq!(p.reached(), reached, "reach {reach}: not reached");
    }
    // A READ too, on a fresh pair.
    for reach in [true, false] {
        let p =
            pair_set("reach_port_down_r", reach, cap(), 0x100, &short_retries(), &short_retries());
        let lid = nic_model::engine::slot_of_gid(&p.b.info(0).unwrap().gid).expect("b's slot");
        let inbox = p.dir.path().join(format!("port-{lid}.inbox"));
        let file = std::fs::OpenOptions::new().write(true).open(&inbox).expect("b's inbox");
        std::os::unix::fs::FileExt::write_all_at(&file, &1001u64.to_ne_bytes(), 192).unwrap();
        let ctx = &p.b.ctx;
        let _active = ctx.get_async_event(Some(WAIT)).expect("PORT_ACTIVE");
        let ev = ctx.get_async_event(Some(WAIT)).expect("PORT_ERR");
        assert_eq!(ev.event_type, AsyncEventType::PortErr);
        assert_eq!(p.outcome(Op::Read(64), 3).0, WcStatus::RetryExcErr, "reach {reach}: a READ");
        assert_eq!(p.reached(), 0);
    }
}

/// The send queue's depth holds for WRs that complete inside `ibv_post_send`: eight WRITEs
/// in one call on a QP with max_send_wr 4 post four, and the fifth fails ENOMEM (rxe's ring
/// fills before its doorbell; mlx5 the same), by reach as by packets.
#[test]
fn the_send_queue_depth_holds_for_wrs_done_at_once() {
    let cap = QpCap { max_send_wr: 4, ..cap() };
    for reach in [true, false] {
        let o = no_retries();
        let p = pair_set("reach_sq_depth", reach, cap, 0x100, &o, &o);
        let (a, b) = (&p.a, &p.b);
        a.mr.write(0, &pattern(4, 0, 8 * 64)).unwrap();
        let sges: Vec<[Sge; 1]> = (0..8).map(|i| [a.mr.sge(64 * i, 64)]).collect();
        let wrs: Vec<SendWr<'_>> = (0..8)
            .map(|i| write_wr(&sges[i], i as u64 + 1, b.mr.addr() + 64 * i as u64, b.mr.rkey()))
            .collect();
        let err = a.qp.post_send(&wrs).expect_err("the fifth does not fit");
        assert_eq!(err.errno, Errno::NoMem, "reach {reach}: {err}");
        assert!(err.message.contains("wr[4]"), "reach {reach}: bad_wr is the fifth: {err}");
        assert_eq!(err.wr_index, Some(4), "reach {reach}: the error names the fifth");
        let wc = a.cq.poll_n(4, WAIT).expect("four completions");
        let ids: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(ids, (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
        let mut more = [WorkCompletion::default(); 4];
        assert_eq!(a.cq.poll(&mut more).unwrap(), 0, "reach {reach}: nothing more");
        assert_eq!(b.mr.read_vec(0, 256).unwrap(), pattern(4, 0, 8 * 64)[..256]);
        assert_eq!(b.mr.read_vec(256, 256).unwrap(), vec![0; 256], "reach {reach}: no more");
        assert_eq!(p.reached(), if reach { 4 } else { 0 });
        if reach {
            // Completed, polled or not, a WR holds no slot: a later call posts four again
            // (as on rxe once the completer retired them).
            a.qp.post_send(&wrs[4..]).expect("four more in a later call");
            assert_eq!(a.cq.poll_n(4, WAIT).expect("their completions").len(), 4);
        }
    }
}

/// The port counters (`softverbs counters`) count what reached operations stand for, on both
/// sides, as the same operations count over packets.
#[test]
fn counters_count_reached_operations_as_their_packets() {
    use nic_model::soft::counters::{index_of, COUNTERS};
    let names = [
        "port_xmit_packets",
        "port_rcv_packets",
        "port_xmit_data",
        "port_rcv_data",
        "sent_pkts",
        "rcvd_pkts",
    ];
    let mut seen = Vec::new();
    for reach in [true, false] {
        let o = no_retries();
        let p = pair_set("reach_counters", reach, cap(), 0x100, &o, &o);
        let mut i = 0;
        for op in [Op::Write(64), Op::Write(3000), Op::Read(3000), Op::FetchAdd, Op::Write(0)] {
            i += 1;
            assert_eq!(p.outcome(op, i).0, WcStatus::Success, "{op:?}");
        }
        assert_eq!(p.reached(), if reach { 5 } else { 0 });
        let both: Vec<Vec<u64>> = ["softverbs0", "softverbs1"]
            .iter()
            .map(|d| {
                let c = p.soft.stats(d).unwrap().counters();
                names.iter().map(|n| c[index_of(n).unwrap()]).collect()
            })
            .collect();
        seen.push(both);
    }
    assert_eq!(seen[0], seen[1], "{names:?} of a and b, reach on and off");
    // a sent 1 + 3 + 1 + 1 + 1 requests and received 1 + 1 + 3 + 1 + 1 answers.
    assert_eq!(seen[0][0][0], 7, "a's port_xmit_packets");
    assert_eq!(seen[0][0][1], 7, "a's port_rcv_packets");
    assert_eq!(seen[0][1][..2], [seen[0][0][1], seen[0][0][0]], "b's mirror a's");
    assert!(COUNTERS.len() > names.len());
}
