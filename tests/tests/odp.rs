//! On-demand paging (`IBV_ACCESS_ON_DEMAND`, issue 30; rxe's `rxe_odp.c`): an MR over the
//! program's pages that are neither pinned nor moved. WRITE, READ, SEND and both atomics
//! carry the bytes and completions of ordinary MRs; the NIC follows the program's mapping of
//! the moment (a page mapped again after registration is read as its new bytes); a page that
//! is not mapped fails the WR as rxe fails it (the responder's remote-access NAK, the
//! requester's `LOC_PROT_ERR`), never the process. Direct reach declines ODP MRs on both
//! sides, so each test runs with reach on and off and sees the same outcome.
//! (`cabi/ibverbs/tests/odp.rs` holds the C side: the flag, `odp_caps`, `ibv_advise_mr`.)

use std::time::Duration;

use softverbs_sim::conn::ConnOpts;
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const PAGE: usize = 4096;

/// `pages` pages of fresh anonymous memory, unmapped when dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(pages: usize) -> Mapping {
        let len = pages * PAGE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        Mapping { ptr: ptr.cast(), len }
    }
    fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }
    /// The bytes at `off`, read by the program.
    fn get(&self, off: usize, n: usize) -> Vec<u8> {
        // SAFETY: in this mapping, whose pages the test has mapped at this point.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), n) }.to_vec()
    }
    fn set(&self, off: usize, data: &[u8]) {
        // SAFETY: as `get`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
    }
    /// Unmaps page `page`.
    fn unmap(&self, page: usize) {
        // SAFETY: a page of this mapping; the test touches it no more until it maps it again.
        assert_eq!(unsafe { libc::munmap(self.ptr.add(page * PAGE).cast(), PAGE) }, 0);
    }
    /// Maps a fresh page at page `page` (after `unmap`), filled with `byte`.
    fn remap(&self, page: usize, byte: u8) {
        // SAFETY: MAP_FIXED over this mapping's own page, which `unmap` left free.
        let p = unsafe {
            libc::mmap(
                self.ptr.add(page * PAGE).cast(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p.cast(), self.ptr.wrapping_add(page * PAGE), "mmap MAP_FIXED");
        self.set(page * PAGE, &[byte; PAGE]);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: this mapping's own range (munmap of pages already unmapped is harmless).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 }
}

fn pair(test: &str, reach: bool) -> RcPair {
    let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
    RcPair::new(test, cap(), 1 << 16, &opts, |soft| soft.set_reach(reach))
}

fn all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

fn reached(p: &RcPair) -> u64 {
    p.soft.stats("softverbs0").unwrap().nic.reached
}

/// Posts `wr` on a's QP and returns its completion.
fn run(p: &RcPair, wr: SendWr<'_>) -> WorkCompletion {
    p.a.qp.post_send(&[wr]).expect("post_send");
    p.a.cq.poll_n(1, WAIT).expect("a completion")[0]
}

fn rdma<'a>(op: WrOpcode, sges: &'a [Sge], id: u64, to: u64, rkey: u32) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        sg_list: sges,
        opcode: op,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        ..Default::default()
    }
}

fn wc(id: u64, status: WcStatus, opcode: WcOpcode, len: u32, qpn: u32) -> WorkCompletion {
    WorkCompletion { wr_id: id, status, opcode, byte_len: len, qp_num: qpn, ..Default::default() }
}

/// Every operation between ODP MRs, and between an ODP and an ordinary MR, on a pair with
/// direct reach `reach`; then a responder page unmapped, mapped again, and unmapped.
fn operations(reach: bool) {
    let p = pair(if reach { "odp_ops_reach" } else { "odp_ops_packets" }, reach);
    let (a, b) = (&p.a, &p.b);
    let qpn = a.qp.qp_num();
    let (am, bm) = (Mapping::new(2), Mapping::new(2));
    let ao = a.pd.reg_mr_on_demand(am.addr(0), 2 * PAGE, all()).expect("a's ODP MR");
    let bo = b.pd.reg_mr_on_demand(bm.addr(0), 2 * PAGE, all()).expect("b's ODP MR");
    assert_eq!(ao.addr(), am.addr(0), "an ODP MR keeps the program's address");
    let before = reached(&p);

    // WRITE ODP -> ODP across b's page boundary, and ordinary -> ODP, ODP -> ordinary.
    let msg: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    am.set(100, &msg);
    let s = [ao.sge(100, 300)];
    let w = run(&p, rdma(WrOpcode::RdmaWrite, &s, 1, bo.addr() + PAGE as u64 - 150, bo.rkey()));
    assert_eq!(w, wc(1, WcStatus::Success, WcOpcode::RdmaWrite, 300, qpn));
    assert_eq!(bm.get(PAGE - 150, 300), msg, "the WRITE's bytes, in b's own pages");
    a.mr.write(0, b"from an ordinary MR").unwrap();
    let s = [a.mr.sge(0, 19)];
    let w = run(&p, rdma(WrOpcode::RdmaWrite, &s, 2, bo.addr() + 8, bo.rkey()));
    assert_eq!(w, wc(2, WcStatus::Success, WcOpcode::RdmaWrite, 19, qpn));
    assert_eq!(bm.get(8, 19), b"from an ordinary MR");
    let s = [ao.sge(100, 64)];
    let w = run(&p, rdma(WrOpcode::RdmaWrite, &s, 3, b.mr.addr() + 64, b.mr.rkey()));
    assert_eq!(w, wc(3, WcStatus::Success, WcOpcode::RdmaWrite, 64, qpn));
    let mut got = vec![0u8; 64];
    b.mr.read(64, &mut got).unwrap();
    assert_eq!(got, msg[..64]);

    // READ ODP -> ODP, two SGEs.
    bm.set(2000, b"read me from b's pages");
    let s = [ao.sge(3000, 10), ao.sge(3500, 12)];
    let w = run(&p, rdma(WrOpcode::RdmaRead, &s, 4, bo.addr() + 2000, bo.rkey()));
    assert_eq!(w, wc(4, WcStatus::Success, WcOpcode::RdmaRead, 22, qpn));
    assert_eq!(am.get(3000, 10), b"read me fr");
    assert_eq!(am.get(3500, 12), b"om b's pages");

    // SEND ODP -> a receive into ODP.
    let rs = [bo.sge(6000, 100)];
    b.qp.post_recv(&[RecvWr { wr_id: 70, sg_list: &rs }]).unwrap();
    am.set(0, b"a send through unpinned pages");
    let s = [ao.sge(0, 29)];
    let send = SendWr { opcode: WrOpcode::Send, ..rdma(WrOpcode::Send, &s, 5, 0, 0) };
    let w = run(&p, send);
    assert_eq!(w, wc(5, WcStatus::Success, WcOpcode::Send, 29, qpn));
    let r = b.cq.poll_n(1, WAIT).expect("b's receive")[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (70, WcStatus::Success, WcOpcode::Recv, 29)
    );
    assert_eq!((r.qp_num, r.src_qp, r.wc_flags), (b.qp.qp_num(), a.qp.qp_num(), WcFlags::empty()));
    assert_eq!(bm.get(6000, 29), b"a send through unpinned pages");

    // Atomics on b's ODP word, the original value landing in a's ODP memory.
    bm.set(4096 + 64, &40u64.to_ne_bytes());
    let s = [ao.sge(512, 8)];
    let atomic = |id, op, compare_add, swap| SendWr {
        wr_id: id,
        sg_list: &s,
        opcode: op,
        send_flags: SendFlags::SIGNALED,
        atomic: AtomicTarget {
            remote_addr: bo.addr() + 4096 + 64,
            rkey: bo.rkey(),
            compare_add,
            swap,
        },
        ..Default::default()
    };
    let w = run(&p, atomic(6, WrOpcode::AtomicFetchAndAdd, 2, 0));
    assert_eq!(w, wc(6, WcStatus::Success, WcOpcode::FetchAdd, 8, qpn));
    assert_eq!(am.get(512, 8), 40u64.to_ne_bytes());
    let w = run(&p, atomic(7, WrOpcode::AtomicCmpAndSwp, 42, 99));
    assert_eq!(w, wc(7, WcStatus::Success, WcOpcode::CompSwap, 8, qpn));
    assert_eq!(am.get(512, 8), 42u64.to_ne_bytes());
    assert_eq!(bm.get(4096 + 64, 8), 99u64.to_ne_bytes());
    // An ATOMIC WRITE from a's ODP word into b's, as rxe's RC odp_caps take it.
    am.set(520, &0x1122_3344_5566_7788u64.to_ne_bytes());
    let s = [ao.sge(520, 8)];
    let w = run(&p, rdma(WrOpcode::AtomicWrite, &s, 11, bo.addr() + 4096 + 128, bo.rkey()));
    assert_eq!(w, wc(11, WcStatus::Success, WcOpcode::AtomicWrite, 8, qpn));
    assert_eq!(bm.get(4096 + 128, 8), 0x1122_3344_5566_7788u64.to_ne_bytes());
    assert_eq!(reached(&p), before, "direct reach declines every WR that names ODP memory");
    // ... and still takes one between pinned MRs, when it is on.
    let s = [a.mr.sge(0, 8)];
    let w = run(&p, rdma(WrOpcode::RdmaWrite, &s, 10, b.mr.addr(), b.mr.rkey()));
    assert_eq!(w, wc(10, WcStatus::Success, WcOpcode::RdmaWrite, 8, qpn));
    assert_eq!(reached(&p), before + u64::from(reach));

    // b's second page unmapped and mapped again with other bytes: the NIC reads the new page.
    bm.unmap(1);
    bm.remap(1, 0x5a);
    let s = [ao.sge(0, 16)];
    let w = run(&p, rdma(WrOpcode::RdmaRead, &s, 8, bo.addr() + PAGE as u64 + 100, bo.rkey()));
    assert_eq!(w, wc(8, WcStatus::Success, WcOpcode::RdmaRead, 16, qpn));
    assert_eq!(am.get(0, 16), [0x5a; 16], "the page mapped after registration");

    // Unmapped again: a WRITE there is NAKed as rxe's failed ODP page fault, an rkey
    // violation, and the requester completes it with REM_ACCESS_ERR. The process lives.
    bm.unmap(1);
    let s = [ao.sge(0, 16)];
    let w = run(&p, rdma(WrOpcode::RdmaWrite, &s, 9, bo.addr() + PAGE as u64 + 8, bo.rkey()));
    // In error: wr_id, status and qp_num, the rest 0, as rxe's user CQ entries.
    assert_eq!(w, wc(9, WcStatus::RemAccessErr, WcOpcode::Send, 0, qpn));
    assert_eq!(bm.get(0, 8), 0u64.to_ne_bytes(), "b's first page is intact");
}

#[test]
fn odp_mrs_carry_write_read_send_and_atomics_as_pinned_ones_with_reach_on() {
    operations(true);
}

#[test]
fn odp_mrs_carry_write_read_send_and_atomics_as_pinned_ones_with_reach_off() {
    operations(false);
}

/// What a responder's unmapped page and a requester's unmapped page give, with reach `reach`.
fn faults(reach: bool) -> Vec<(WcStatus, u32)> {
    let mut out = Vec::new();
    for (i, what) in ["read", "atomic", "local", "recv"].into_iter().enumerate() {
        let p = pair(&format!("odp_fault_{i}_{reach}"), reach);
        let (a, b) = (&p.a, &p.b);
        let (am, bm) = (Mapping::new(2), Mapping::new(2));
        let ao = a.pd.reg_mr_on_demand(am.addr(0), 2 * PAGE, all()).unwrap();
        let bo = b.pd.reg_mr_on_demand(bm.addr(0), 2 * PAGE, all()).unwrap();
        let far = bo.addr() + PAGE as u64 + 64;
        let w = match what {
            "read" => {
                bm.unmap(1);
                let s = [a.mr.sge(0, 32)];
                run(&p, rdma(WrOpcode::RdmaRead, &s, 1, far, bo.rkey()))
            }
            "recv" => {
                // The receive buffer's page is gone: the receive completes with LOC_PROT_ERR
                // and the sender gets the NAK of a bad receive SGE (REM_OP_ERR), as for a
                // receive whose lkey is wrong.
                bm.unmap(1);
                let rs = [bo.sge(PAGE + 8, 64)];
                b.qp.post_recv(&[RecvWr { wr_id: 70, sg_list: &rs }]).unwrap();
                let s = [a.mr.sge(0, 32)];
                let w =
                    run(&p, SendWr { opcode: WrOpcode::Send, ..rdma(WrOpcode::Send, &s, 1, 0, 0) });
                let r = b.cq.poll_n(1, WAIT).expect("b's receive")[0];
                assert_eq!(
                    (r.wr_id, r.status, r.qp_num),
                    (70, WcStatus::LocProtErr, b.qp.qp_num())
                );
                w
            }
            "atomic" => {
                bm.unmap(1);
                let s = [a.mr.sge(0, 8)];
                let wr = SendWr {
                    wr_id: 1,
                    sg_list: &s,
                    opcode: WrOpcode::AtomicFetchAndAdd,
                    send_flags: SendFlags::SIGNALED,
                    atomic: AtomicTarget {
                        remote_addr: far,
                        rkey: bo.rkey(),
                        compare_add: 1,
                        swap: 0,
                    },
                    ..Default::default()
                };
                run(&p, wr)
            }
            _ => {
                // The requester's own source page is gone: its gather fails, LOC_PROT_ERR.
                am.unmap(1);
                let s = [ao.sge(PAGE + 8, 32)];
                run(&p, rdma(WrOpcode::RdmaWrite, &s, 1, b.mr.addr(), b.mr.rkey()))
            }
        };
        assert_eq!(w.wr_id, 1);
        assert_eq!(w.qp_num, a.qp.qp_num());
        out.push((w.status, w.byte_len));
    }
    out
}

#[test]
fn an_unmapped_odp_page_fails_the_wr_as_rxe_with_reach_on_and_off() {
    // (byte_len 0, as every completion in error of rxe's user CQ.)
    let want = vec![
        (WcStatus::RemAccessErr, 0),
        (WcStatus::RemAccessErr, 0),
        (WcStatus::LocProtErr, 0),
        (WcStatus::RemOpErr, 0),
    ];
    assert_eq!(faults(true), want, "reach on");
    assert_eq!(faults(false), want, "reach off");
}

#[test]
fn advise_mr_prefetches_odp_ranges_and_refuses_what_rxe_refuses() {
    let p = pair("odp_advise", true);
    let m = Mapping::new(2);
    let o = p.a.pd.reg_mr_on_demand(m.addr(0), 2 * PAGE, all()).unwrap();
    for advice in [MrAdvice::Prefetch, MrAdvice::PrefetchWrite, MrAdvice::PrefetchNoFault] {
        for flush in [true, false] {
            p.a.pd.advise_mr(advice, flush, &[o.sge(0, 2 * PAGE as u32)]).unwrap();
        }
    }
    // A pinned MR has nothing to page in; an lkey of no MR; a range outside the MR.
    let e = p.a.pd.advise_mr(MrAdvice::Prefetch, true, &[p.a.mr.sge(0, 8)]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    let bad = Sge { addr: m.addr(0), length: 8, lkey: 0x77 };
    assert_eq!(p.a.pd.advise_mr(MrAdvice::Prefetch, true, &[bad]).unwrap_err().errno, Errno::Inval);
    let out = Sge { addr: m.addr(0), length: 3 * PAGE as u32, lkey: o.lkey() };
    // Asynchronous, past the look-up it is best effort (rxe queues it): 0.
    p.a.pd.advise_mr(MrAdvice::Prefetch, false, &[out, p.a.mr.sge(0, 8)]).unwrap();
    let e = p.a.pd.advise_mr(MrAdvice::Prefetch, false, &[bad]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "the look-up fails an asynchronous call too: {e}");
    assert_eq!(p.a.pd.advise_mr(MrAdvice::Prefetch, true, &[out]).unwrap_err().errno, Errno::Fault);
    // rxe looks the MR up for local writing: an ODP MR without LOCAL_WRITE is EINVAL.
    let ro = p.a.pd.reg_mr_on_demand(m.addr(0), PAGE, AccessFlags::REMOTE_READ).unwrap();
    let e = p.a.pd.advise_mr(MrAdvice::Prefetch, true, &[ro.sge(0, 8)]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    // An unmapped page: a synchronous prefetch fails with EFAULT, an asynchronous one is a hint.
    m.unmap(1);
    let s = [o.sge(PAGE, 8)];
    assert_eq!(
        p.a.pd.advise_mr(MrAdvice::PrefetchWrite, true, &s).unwrap_err().errno,
        Errno::Fault
    );
    p.a.pd.advise_mr(MrAdvice::PrefetchWrite, false, &s).unwrap();
    p.a.pd.advise_mr(MrAdvice::PrefetchNoFault, true, &s).unwrap();
}
