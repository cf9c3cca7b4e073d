//! Backend parity: one test body, written once against `verbs-api`, runs on the soft backend
//! (in one process, by LID and by GID, and with its peer device in another process), in the
//! simulator, and, given `SOFTVERBS_HW_DEVICE=<name>` in a build with `--features
//! verbs-api/rdma-sys`, on a real device (or the kernel's Soft-RoCE). Without one, it says
//! that it skipped the hardware case and why.

use std::sync::{Mutex, MutexGuard};

use softverbs_sim::conn::{self, ConnOpts, Endpoint};
use softverbs_tests::surface::{Backend, RealTimePair, SimPair, SoftProcesses};
use verbs_api::*;

const PEER: &str = env!("CARGO_BIN_EXE_sv-peer");

/// SEND, RDMA WRITE, RDMA READ, CAS and FETCH_ADD between two endpoints, checking data and
/// completions, each side addressing the other by GID from its port's first IPv4 GID, as
/// RoCE requires.
fn body(be: &dyn Backend) {
    let (c0, c1) = (be.a(), be.b());
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let a = Endpoint::new(c0, QpType::Rc, cap, 16, 1 << 16).unwrap();
    let b = Endpoint::new(c1, QpType::Rc, cap, 16, 1 << 16).unwrap();
    let opts = conn::PortAddress::of(c0, None).unwrap().conn_opts(ConnOpts::default()).unwrap();
    conn::connect(&a.qp, 0x10, &b.info(0x20).unwrap(), &opts).unwrap();
    conn::connect(&b.qp, 0x20, &a.info(0x10).unwrap(), &opts).unwrap();
    let sig = SendFlags::SIGNALED;
    // SEND
    a.mr.write(0, b"parity").unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[b.mr.sge(0, 64)] }]).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &[a.mr.sge(0, 6)],
        send_flags: sig,
        ..Default::default()
    }])
    .unwrap();
    let w = be.wait(&a.cq, 1)[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode, w.qp_num),
        (1, WcStatus::Success, WcOpcode::Send, a.qp.qp_num())
    );
    let r = be.wait(&b.cq, 1)[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.src_qp),
        (7, WcStatus::Success, WcOpcode::Recv, 6, a.qp.qp_num())
    );
    assert_eq!(b.mr.read_vec(0, 6).unwrap(), b"parity");
    // WRITE then READ back
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
    a.mr.write(1000, &data).unwrap();
    let rt = RdmaTarget { remote_addr: b.mr.addr() + 10_000, rkey: b.mr.rkey() };
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &[a.mr.sge(1000, 5000)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: sig,
        rdma: rt,
        ..Default::default()
    }])
    .unwrap();
    assert_eq!(be.wait(&a.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(b.mr.read_vec(10_000, 5000).unwrap(), data);
    a.qp.post_send(&[SendWr {
        wr_id: 3,
        sg_list: &[a.mr.sge(20_000, 5000)],
        opcode: WrOpcode::RdmaRead,
        send_flags: sig,
        rdma: rt,
        ..Default::default()
    }])
    .unwrap();
    let w = be.wait(&a.cq, 1)[0];
    assert_eq!((w.status, w.opcode, w.byte_len), (WcStatus::Success, WcOpcode::RdmaRead, 5000));
    assert_eq!(a.mr.read_vec(20_000, 5000).unwrap(), data);
    // Atomics
    b.mr.write_u64(40_000, 1).unwrap();
    let at = |ca, sw| AtomicTarget {
        remote_addr: b.mr.addr() + 40_000,
        rkey: b.mr.rkey(),
        compare_add: ca,
        swap: sw,
    };
    let (s1, s2) = ([a.mr.sge(48_000, 8)], [a.mr.sge(48_008, 8)]);
    let cas = SendWr {
        wr_id: 4,
        sg_list: &s1,
        opcode: WrOpcode::AtomicCmpAndSwp,
        send_flags: sig,
        atomic: at(1, 10),
        ..Default::default()
    };
    let fad = SendWr {
        wr_id: 5,
        sg_list: &s2,
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: sig,
        atomic: at(5, 0),
        ..Default::default()
    };
    a.qp.post_send(&[cas, fad]).unwrap();
    let ws = be.wait(&a.cq, 2);
    assert_eq!(
        ws.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![
            (4, WcStatus::Success, WcOpcode::CompSwap),
            (5, WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    assert_eq!((a.mr.read_u64(48_000).unwrap(), a.mr.read_u64(48_008).unwrap()), (1, 10));
    assert_eq!(b.mr.read_u64(40_000).unwrap(), 15);
}

/// Two connected RC endpoints of `be`, A addressing B.
fn connected(be: &dyn Backend) -> (Endpoint, Endpoint) {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let a = Endpoint::new(be.a(), QpType::Rc, cap, 16, 1 << 16).unwrap();
    let b = Endpoint::new(be.b(), QpType::Rc, cap, 16, 1 << 16).unwrap();
    let opts = conn::PortAddress::of(be.a(), None).unwrap().conn_opts(ConnOpts::default()).unwrap();
    conn::connect(&a.qp, 0x10, &b.info(0x20).unwrap(), &opts).unwrap();
    conn::connect(&b.qp, 0x20, &a.info(0x10).unwrap(), &opts).unwrap();
    (a, b)
}

/// A completion with these fields and every other one zero.
fn wc(
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    qp_num: u32,
) -> WorkCompletion {
    WorkCompletion { wr_id, status, opcode, byte_len, qp_num, ..WorkCompletion::default() }
}

/// Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
/// `IBV_WR_SEND_WITH_INV`, `ibv_dealloc_mw`): B binds a type 1 and a type 2 window onto
/// ranges of its MR, A writes through each window's rkey, A's SEND WITH INVALIDATE takes a
/// third window's key, B invalidates the type 2 window and A's next write through it is a
/// remote access error.
fn mw_body(be: &dyn Backend) {
    let (a, b) = connected(be);
    let (a_qpn, b_qpn) = (a.qp.qp_num(), b.qp.qp_num());
    let sig = SendFlags::SIGNALED;
    let rights = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let info = |off: u64| MwBindInfo {
        mr: Some(&b.mr),
        addr: b.mr.addr() + off,
        length: 256,
        access: rights,
        zero_based: false,
    };
    let mw1 = b.pd.alloc_mw(MwType::Type1).expect("ibv_alloc_mw type 1");
    let mw2 = b.pd.alloc_mw(MwType::Type2).expect("ibv_alloc_mw type 2");
    assert_eq!((mw1.mw_type(), mw2.mw_type()), (MwType::Type1, MwType::Type2));
    let old1 = mw1.rkey();
    let rkey1 = mw1.bind(&b.qp, &info(4096), 11, sig).expect("ibv_bind_mw");
    assert_eq!((rkey1, mw1.rkey()), (inc_rkey(old1), inc_rkey(old1)));
    assert_eq!(be.wait(&b.cq, 1)[0], wc(11, WcStatus::Success, WcOpcode::BindMw, 0, b_qpn));
    let old2 = mw2.rkey();
    // A type 2 window bound by an IBV_WR_BIND_MW of its own, at `at` of B's MR.
    let bind2 = |id: u64, mw: &MemoryWindow, at: u64| {
        let bind = SendWr {
            wr_id: id,
            opcode: WrOpcode::BindMw,
            send_flags: sig,
            bind_mw: mw.bind_wr(&info(at)),
            ..Default::default()
        };
        b.qp.post_send(&[bind]).expect("IBV_WR_BIND_MW");
        assert_eq!(be.wait(&b.cq, 1)[0], wc(id, WcStatus::Success, WcOpcode::BindMw, 0, b_qpn));
    };
    bind2(12, &mw2, 8192);
    let rkey2 = mw2.rkey();
    assert_eq!(rkey2, inc_rkey(old2));
    // A WRITE through each window lands.
    let write = |id: u64, off: u64, rkey: u32, from: usize| {
        let sges = [a.mr.sge(from, 64)];
        let wr = SendWr {
            wr_id: id,
            sg_list: &sges,
            opcode: WrOpcode::RdmaWrite,
            send_flags: sig,
            rdma: RdmaTarget { remote_addr: b.mr.addr() + off, rkey },
            ..Default::default()
        };
        a.qp.post_send(&[wr]).expect("post_send");
        be.wait(&a.cq, 1)[0]
    };
    let d1: Vec<u8> = (0..64u8).map(|i| i ^ 0x5a).collect();
    let d2: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(7)).collect();
    a.mr.write(0, &d1).unwrap();
    a.mr.write(64, &d2).unwrap();
    assert_eq!(
        write(21, 4096 + 16, rkey1, 0),
        wc(21, WcStatus::Success, WcOpcode::RdmaWrite, 64, a_qpn)
    );
    assert_eq!(b.mr.read_vec(4096 + 16, 64).unwrap(), d1);
    assert_eq!(
        write(22, 8192, rkey2, 64),
        wc(22, WcStatus::Success, WcOpcode::RdmaWrite, 64, a_qpn)
    );
    assert_eq!(b.mr.read_vec(8192, 64).unwrap(), d2);
    // A SEND WITH INVALIDATE takes a third window's (type 2) key away; B's receive says so.
    let mw3 = b.pd.alloc_mw(MwType::Type2).expect("ibv_alloc_mw type 2");
    bind2(14, &mw3, 12288);
    let rkey3 = mw3.rkey();
    b.qp.post_recv(&[RecvWr { wr_id: 15, sg_list: &[b.mr.sge(16384, 64)] }]).unwrap();
    let inv = SendWr {
        wr_id: 24,
        sg_list: &[a.mr.sge(0, 16)],
        opcode: WrOpcode::SendWithInv,
        send_flags: sig,
        invalidate_rkey: rkey3,
        ..Default::default()
    };
    a.qp.post_send(&[inv]).expect("IBV_WR_SEND_WITH_INV");
    assert_eq!(be.wait(&a.cq, 1)[0], wc(24, WcStatus::Success, WcOpcode::Send, 16, a_qpn));
    let want = WorkCompletion {
        imm_data: rkey3,
        src_qp: a_qpn,
        wc_flags: WcFlags::WITH_INV,
        ..wc(15, WcStatus::Success, WcOpcode::Recv, 16, b_qpn)
    };
    assert_eq!(be.wait(&b.cq, 1)[0], want);
    assert_eq!(b.mr.read_vec(16384, 16).unwrap(), d1[..16]);
    // LOCAL_INV takes the type 2 window's key away: the same WRITE is refused.
    let inv = SendWr {
        wr_id: 13,
        opcode: WrOpcode::LocalInv,
        send_flags: sig,
        invalidate_rkey: rkey2,
        ..Default::default()
    };
    b.qp.post_send(&[inv]).expect("IBV_WR_LOCAL_INV");
    assert_eq!(be.wait(&b.cq, 1)[0], wc(13, WcStatus::Success, WcOpcode::LocalInv, 0, b_qpn));
    b.mr.write(8192, &[0u8; 64]).unwrap();
    let w = write(23, 8192, rkey2, 64);
    // In error only wr_id, status, qp_num and vendor_err are set, as rxe fills them (opcode 0
    // is IBV_WC_SEND).
    assert_eq!(w, wc(23, WcStatus::RemAccessErr, WcOpcode::Send, 0, a_qpn));
    assert_eq!(b.mr.read_vec(8192, 64).unwrap(), [0u8; 64]);
    mw1.dealloc().expect("ibv_dealloc_mw type 1");
    mw2.dealloc().expect("ibv_dealloc_mw type 2");
    mw3.dealloc().expect("ibv_dealloc_mw type 2");
}

#[test]
fn parity_on_soft_loopback() {
    body(&RealTimePair::soft_loopback());
    mw_body(&RealTimePair::soft_loopback());
}

/// The multi-process runs take turns, so their processes do not compete for the CPUs.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn parity_on_soft_between_processes() {
    let _serial = serial();
    let be = SoftProcesses::new(PEER.as_ref(), "parity");
    // The two processes' ports are RoCE ports: no LID, each its own IPv4 GID, which is what
    // the body addresses the other by.
    let gid = |ctx: &Context| conn::PortAddress::of(ctx, None).unwrap();
    let (a, b) = (gid(be.a()), gid(be.b()));
    assert_eq!((a.lid, b.lid, a.gid_index, b.gid_index), (0, 0, 1, 1));
    assert!(a.gid.to_ipv4().is_some() && b.gid.to_ipv4().is_some() && a.gid != b.gid);
    body(&be);
    be.finish();
}

#[test]
fn parity_in_the_simulator() {
    let seed = 0x5EED_0006;
    println!("[sim] seed {seed:#x}");
    body(&SimPair::new(seed));
    mw_body(&SimPair::new(seed));
}

#[test]
fn parity_on_hardware() {
    let Ok(name) = std::env::var("SOFTVERBS_HW_DEVICE") else {
        println!("skipped the hardware case: SOFTVERBS_HW_DEVICE is not set (set it to a device name, e.g. rxe0, and build with --features verbs-api/rdma-sys)");
        return;
    };
    let Some(hw) = verbs_api::hw_provider() else {
        panic!(
            "SOFTVERBS_HW_DEVICE={name} is set but this build lacks --features verbs-api/rdma-sys"
        );
    };
    register_provider(hw);
    let open =
        |what| Context::open(&name).unwrap_or_else(|e| panic!("opening {name} ({what}): {e}"));
    body(&RealTimePair::of("hardware", open("a"), open("b")));
    mw_body(&RealTimePair::of("hardware", open("a"), open("b")));
}
