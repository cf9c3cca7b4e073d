//! RDMA ATOMIC WRITE and FLUSH (IBA 1.5; `ibv_wr_atomic_write`, `ibv_wr_flush`), as rxe does
//! them: the bytes that land, every work-completion field, the statuses of what the responder
//! refuses (rxe's NAKs), the refusals at post time, and the packets on the wire (opcodes 0x1D
//! and 0x1C, the FETH, the zero-length RDMA READ RESPONSE ONLY that answers both). Direct
//! reach leaves both to the packet path: every behaviour test runs with reach on and off and
//! asserts the same outcome, and that nothing was reached.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nic_model::packet::{parse_datagram, Feth, Opcode, Reth};
use nic_model::soft::TapDir;
use softverbs_sim::conn::ConnOpts;
use softverbs_tests::{pattern, RcPair};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const MR_LEN: usize = 1 << 16;

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 4, max_send_sge: 2, max_recv_sge: 1, max_inline_data: 0 }
}

/// softverbs0 (a) and softverbs1 (b), connected, each QP taking `access` from its peer, with
/// direct reach on or off. Both MRs are registered with every right (FLUSH_GLOBAL included).
fn pair(test: &str, reach: bool, access: AccessFlags) -> RcPair {
    let tag = format!("{test}_{}", if reach { "on" } else { "off" });
    let opts = ConnOpts { retry_cnt: 2, timeout: 12, access, ..ConnOpts::default() };
    RcPair::new(&tag, cap(), MR_LEN, &opts, |soft| soft.set_reach(reach))
}

fn all_remote() -> AccessFlags {
    AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::FLUSH_GLOBAL
}

fn reached(p: &RcPair) -> u64 {
    p.soft.stats("softverbs0").unwrap().nic.reached
}

fn atomic_write<'a>(id: u64, to: u64, rkey: u32, value: &'a [u8]) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::AtomicWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        inline_data: Some(value),
        ..Default::default()
    }
}

fn flush(
    id: u64,
    to: u64,
    rkey: u32,
    len: u32,
    placement: FlushType,
    level: FlushLevel,
) -> SendWr<'static> {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::Flush,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        flush: FlushTarget { len, placement, level },
        ..Default::default()
    }
}

/// Posts `wr` on a and waits for its one completion.
fn run(p: &RcPair, wr: SendWr<'_>) -> WorkCompletion {
    p.a.qp.post_send(&[wr]).expect("post_send");
    p.a.cq.poll_n(1, WAIT).expect("a completion")[0]
}

/// The completion every successful send-side WR of a has: this id, opcode and length.
fn ok(p: &RcPair, id: u64, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id: id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        qp_num: p.a.qp.qp_num(),
        ..WorkCompletion::default()
    }
}

fn both_ways(test: fn(bool)) {
    test(true);
    test(false);
}

fn atomic_write_places_its_8_bytes_and_completes(reach: bool) {
    let p = pair("aw_ok", reach, all_remote());
    let (to, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    p.b.mr.write(0, &pattern(7, 0, 256)).unwrap();
    // From the WR's bytes (ibv_wr_atomic_write's atomic_wr).
    let wc = run(&p, atomic_write(1, to + 64, rkey, b"ABCDEFGH"));
    assert_eq!(wc, ok(&p, 1, WcOpcode::AtomicWrite, 8));
    // From one 8-byte SGE.
    p.a.mr.write(512, b"12345678").unwrap();
    let sge = [p.a.mr.sge(512, 8)];
    let wr = SendWr { sg_list: &sge, inline_data: None, ..atomic_write(2, to + 128, rkey, &[]) };
    assert_eq!(run(&p, wr), ok(&p, 2, WcOpcode::AtomicWrite, 8));
    let mut want = pattern(7, 0, 256);
    want[64..72].copy_from_slice(b"ABCDEFGH");
    want[128..136].copy_from_slice(b"12345678");
    assert_eq!(p.b.mr.read_vec(0, 256).unwrap(), want, "exactly the 8 bytes, nothing else");
    // Unsignaled: no completion, and a later signaled one is the only one.
    let quiet = SendWr { send_flags: SendFlags::empty(), ..atomic_write(3, to, rkey, b"quietly!") };
    p.a.qp.post_send(&[quiet]).unwrap();
    assert_eq!(
        run(&p, atomic_write(4, to + 8, rkey, b"loudly!!")),
        ok(&p, 4, WcOpcode::AtomicWrite, 8)
    );
    assert_eq!(p.b.mr.read_vec(0, 16).unwrap(), b"quietly!loudly!!");
    let mut none = [WorkCompletion::default(); 4];
    assert_eq!(p.b.cq.poll(&mut none).unwrap(), 0, "the responder completes nothing");
    assert_eq!(reached(&p), 0, "direct reach leaves ATOMIC WRITE to the packets");
}

#[test]
fn atomic_write_places_its_8_bytes_and_completes_reach_on_and_off() {
    both_ways(atomic_write_places_its_8_bytes_and_completes);
}

fn flush_completes_after_the_writes_before_it(reach: bool) {
    let p = pair("flush_ok", reach, all_remote());
    let (to, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    let data = pattern(3, 0, 4096);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, 4096)];
    let write = SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: to + 1000, rkey },
        ..Default::default()
    };
    let range = flush(2, to + 1000, rkey, 4096, FlushType::GLOBAL, FlushLevel::Range);
    p.a.qp.post_send(&[write, range]).unwrap();
    let wc = p.a.cq.poll_n(1, WAIT).unwrap()[0];
    assert_eq!(wc, ok(&p, 2, WcOpcode::Flush, 4096), "the unsignaled WRITE completes nothing");
    assert_eq!(p.b.mr.read_vec(1000, 4096).unwrap(), data);
    // The whole MR: its address and length are not looked at.
    let whole = flush(3, 0, rkey, 0, FlushType::GLOBAL, FlushLevel::Mr);
    assert_eq!(run(&p, whole), ok(&p, 3, WcOpcode::Flush, 0));
    // A zero-length range at the MR's start.
    let nothing = flush(4, to, rkey, 0, FlushType::GLOBAL, FlushLevel::Range);
    assert_eq!(run(&p, nothing), ok(&p, 4, WcOpcode::Flush, 0));
    // The WRITE may be reached (placed at its post, before the FLUSH goes); never a FLUSH.
    assert_eq!(reached(&p), u64::from(reach), "direct reach leaves FLUSH to the packets");
}

#[test]
fn flush_completes_after_the_writes_before_it_reach_on_and_off() {
    both_ways(flush_completes_after_the_writes_before_it);
}

/// Each refused request fails a's WR with `status` (and, as every remote error, moves a's QP
/// to ERR: a later WR is flushed); b's memory is untouched.
fn refused(reach: bool) {
    type Case = (&'static str, AccessFlags, fn(u64, u32) -> SendWr<'static>, WcStatus);
    let cases: [Case; 7] = [
        // rxe's RESPST_ERR_MISALIGNED_ATOMIC: an invalid request NAK.
        (
            "aw_misaligned",
            all_remote(),
            |to, k| atomic_write(9, to + 4, k, b"ABCDEFGH"),
            WcStatus::RemInvReqErr,
        ),
        // Outside the MR, or a wrong R_Key: rxe's RESPST_ERR_RKEY_VIOLATION.
        (
            "aw_outside",
            all_remote(),
            |to, k| atomic_write(9, to + MR_LEN as u64 - 4, k, b"ABCDEFGH"),
            WcStatus::RemAccessErr,
        ),
        (
            "aw_bad_key",
            all_remote(),
            |to, k| atomic_write(9, to, k ^ 0x100, b"ABCDEFGH"),
            WcStatus::RemAccessErr,
        ),
        // A QP that takes no RDMA WRITE takes no ATOMIC WRITE (rxe checks REMOTE_WRITE).
        (
            "aw_no_write",
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            |to, k| atomic_write(9, to, k, b"ABCDEFGH"),
            WcStatus::RemAccessErr,
        ),
        // A QP without IBV_ACCESS_FLUSH_GLOBAL takes no global FLUSH.
        (
            "flush_no_right",
            AccessFlags::REMOTE_WRITE,
            |to, k| flush(9, to, k, 64, FlushType::GLOBAL, FlushLevel::Range),
            WcStatus::RemAccessErr,
        ),
        // No memory here is persistent.
        (
            "flush_persistent",
            all_remote(),
            |to, k| flush(9, to, k, 64, FlushType::PERSISTENT, FlushLevel::Range),
            WcStatus::RemAccessErr,
        ),
        (
            "flush_outside",
            all_remote(),
            |to, k| flush(9, to, k, MR_LEN as u32 + 1, FlushType::GLOBAL, FlushLevel::Range),
            WcStatus::RemAccessErr,
        ),
    ];
    for (name, access, wr, status) in cases {
        let p = pair(name, reach, access);
        let (to, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
        p.b.mr.write(0, &[0x5a; 64]).unwrap();
        let tail = MR_LEN - 64;
        p.b.mr.write(tail, &[0x5a; 64]).unwrap();
        let wc = run(&p, wr(to, rkey));
        // In error: wr_id, status and qp_num, every other field 0 (opcode 0), as rxe's
        // make_send_cqe fills a user CQ's.
        let want = WorkCompletion { status, ..ok(&p, 9, WcOpcode::Send, 0) };
        assert_eq!(wc, want, "{name}");
        assert_eq!(p.b.mr.read_vec(0, 64).unwrap(), [0x5a; 64], "{name}: b's memory");
        assert_eq!(p.b.mr.read_vec(tail, 64).unwrap(), [0x5a; 64], "{name}: b's memory");
        // a's QP is in ERR: the next WR is flushed.
        p.a.qp.post_send(&[atomic_write(10, to, rkey, b"ABCDEFGH")]).unwrap();
        let next = p.a.cq.poll_n(1, WAIT).unwrap()[0];
        assert_eq!((next.wr_id, next.status), (10, WcStatus::WrFlushErr), "{name}");
        assert_eq!(reached(&p), 0, "{name}");
    }
}

#[test]
fn what_the_responder_refuses_fails_as_on_rxe_reach_on_and_off() {
    both_ways(refused);
}

#[test]
fn the_post_refuses_what_cannot_be_sent() {
    let p = pair("post_checks", true, all_remote());
    let (to, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    // Not 8 bytes.
    let e = p.a.qp.post_send(&[atomic_write(1, to, rkey, b"1234")]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e:?}");
    assert!(e.message.contains("8 bytes"), "{}", e.message);
    // RC only: a UC QP refuses both.
    let ctx = p.soft.open("softverbs0").unwrap();
    let uc = softverbs_sim::conn::Endpoint::new(&ctx, QpType::Uc, cap(), 4, 4096).unwrap();
    let info = uc.info(0x300).unwrap();
    softverbs_sim::conn::connect(&uc.qp, 0x300, &info, &ConnOpts::default()).unwrap();
    for wr in [
        atomic_write(2, to, rkey, b"12345678"),
        flush(3, to, rkey, 8, FlushType::GLOBAL, FlushLevel::Range),
    ] {
        let e = uc.qp.post_send(&[wr]).unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "{e:?}");
        assert!(e.message.contains("not valid on an IBV_QPT_UC QP"), "{}", e.message);
    }
    // An MR cannot be registered for persistent FLUSHes from Rust: the flag does not exist;
    // FLUSH_GLOBAL can.
    assert!(p.a.pd.reg_mr(4096, AccessFlags::FLUSH_GLOBAL).is_ok());
}

#[test]
fn the_packets_are_rxes() {
    // A tap on both sides (which keeps reach off): what a sent and what b answered.
    let p = pair("wire", true, all_remote());
    let seen = Arc::new(Mutex::new(Vec::<(TapDir, Vec<u8>)>::new()));
    let s = seen.clone();
    p.soft
        .set_tap(
            "softverbs0",
            Some(Arc::new(move |dir: TapDir, d: &[u8]| s.lock().unwrap().push((dir, d.to_vec())))),
        )
        .unwrap();
    let (to, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    assert_eq!(run(&p, atomic_write(1, to + 16, rkey, b"ABCDEFGH")).status, WcStatus::Success);
    let wc = run(&p, flush(2, to + 32, rkey, 100, FlushType::GLOBAL, FlushLevel::Mr));
    assert_eq!(wc.status, WcStatus::Success);
    p.soft.set_tap("softverbs0", None).unwrap();
    let seen = seen.lock().unwrap();
    let packets: Vec<_> = seen
        .iter()
        .map(|(dir, d)| {
            let (_, pkt) = parse_datagram(d).expect("a well-formed datagram, ICRC and all");
            (dir, pkt.bth.opcode, pkt.bth.psn, pkt.feth, pkt.reth, pkt.aeth, pkt.payload.to_vec())
        })
        .collect();
    assert_eq!(packets.len(), 4, "two requests and their two answers: {packets:?}");
    let (d0, op0, psn0, feth0, reth0, _, pay0) = &packets[0];
    assert_eq!((**d0, *op0), (TapDir::Tx, Opcode::RC_ATOMIC_WRITE));
    assert_eq!((*feth0, *reth0), (None, Some(Reth { va: to + 16, rkey, dma_len: 8 })));
    assert_eq!(pay0, b"ABCDEFGH");
    let (d2, op2, psn2, feth2, reth2, _, pay2) = &packets[2];
    assert_eq!((**d2, *op2), (TapDir::Tx, Opcode::RC_FLUSH));
    // Placement type 1 (global), selectivity 1 (the whole MR); the RETH as posted.
    assert_eq!(*feth2, Some(Feth { placement: 1, selectivity: 1 }));
    assert_eq!(*reth2, Some(Reth { va: to + 32, rkey, dma_len: 100 }));
    assert!(pay2.is_empty());
    assert_eq!(psn2.value(), psn0.next().value(), "one PSN each");
    // Each answered by a zero-length RDMA READ RESPONSE ONLY with an ACK, at its PSN.
    for (answer, psn) in [(&packets[1], psn0), (&packets[3], psn2)] {
        let (dir, op, rpsn, _, _, aeth, payload) = answer;
        assert_eq!((**dir, *op), (TapDir::Rx, Opcode::RC_RDMA_READ_RESPONSE_ONLY));
        assert_eq!(rpsn, psn);
        let aeth = aeth.expect("an AETH");
        assert!(matches!(aeth.kind(), nic_model::packet::AethKind::Ack { .. }), "{aeth:?}");
        assert!(payload.is_empty());
    }
    // The bytes of the FETH and the ATOMIC WRITE's headers on the wire (after IPv4 and UDP).
    let flush_dg = &seen[2].1;
    assert_eq!(flush_dg[28], 0x1C);
    assert_eq!(&flush_dg[40..44], &[0, 0, 0, 0x11], "FETH: selectivity 1, placement type 1");
    assert_eq!(&flush_dg[44..52], &(to + 32).to_be_bytes(), "RETH after the FETH");
    let aw_dg = &seen[0].1;
    assert_eq!(aw_dg[28], 0x1D);
    assert_eq!(&aw_dg[40..48], &(to + 16).to_be_bytes());
    assert_eq!(&aw_dg[52..56], &8u32.to_be_bytes());
    assert_eq!(&aw_dg[56..64], b"ABCDEFGH");
}
