//! Memory windows between two soft devices, as rxe has them: a type 1 window bound by
//! `ibv_bind_mw` and a type 2 window bound by `IBV_WR_BIND_MW`, each granting a peer its own
//! range and rights through its own rkey; `IBV_WR_LOCAL_INV` and `IBV_WR_SEND_WITH_INV`
//! taking a type 2 window's rkey away; and the errors rxe gives for a bad bind, an
//! invalidation it cannot do, a window out of range and an MR with windows bound.
//!
//! Every test runs with direct reach on and off and asserts the same outcome: direct reach
//! leaves a window's rkey to the packet path, so the two differ in nothing a program sees.

use std::time::Duration;

use softverbs_sim::conn::ConnOpts;
use softverbs_tests::{pattern, RcPair};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const MR_LEN: usize = 1 << 16;
/// The window: 256 bytes at this offset of b's MR.
const WIN_OFF: u64 = 4096;
const WIN_LEN: u64 = 256;

fn pair(test: &str, reach: bool) -> RcPair {
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
    let name = format!("{test}-{}", if reach { "reach" } else { "packets" });
    RcPair::new(&name, cap, MR_LEN, &opts, |soft| soft.set_reach(reach))
}

/// Runs `f` with direct reach on, then off.
fn both(f: impl Fn(bool)) {
    f(true);
    f(false);
}

fn one(cq: &CompletionQueue) -> WorkCompletion {
    let wcs = cq.poll_n(1, WAIT).expect("a completion");
    wcs[0]
}

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

fn failed(wc: &WorkCompletion, id: u64, status: WcStatus, qpn: u32) {
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (id, status, qpn), "{wc:?}");
}

fn info(p: &RcPair, access: AccessFlags) -> MwBindInfo<'_> {
    MwBindInfo {
        mr: Some(&p.b.mr),
        addr: p.b.mr.addr() + WIN_OFF,
        length: WIN_LEN,
        access,
        zero_based: false,
    }
}

fn rw() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
}

/// a's signaled RDMA WRITE of `len` bytes from its MR's start to `to` under `rkey`.
fn write(p: &RcPair, id: u64, to: u64, rkey: u32, len: u32) -> WorkCompletion {
    let sges = [p.a.mr.sge(0, len)];
    let wr = SendWr {
        wr_id: id,
        sg_list: &sges,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        ..Default::default()
    };
    p.a.qp.post_send(&[wr]).expect("post_send");
    one(&p.a.cq)
}

/// a's signaled RDMA READ of `len` bytes at `from` under `rkey` into its MR at 8 KiB.
fn read(p: &RcPair, id: u64, from: u64, rkey: u32, len: u32) -> WorkCompletion {
    let sges = [p.a.mr.sge(8192, len)];
    let wr = SendWr {
        wr_id: id,
        sg_list: &sges,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: from, rkey },
        ..Default::default()
    };
    p.a.qp.post_send(&[wr]).expect("post_send");
    one(&p.a.cq)
}

/// b binds `mw` (type 2) through its QP with `IBV_WR_BIND_MW`, signaled as `id`.
fn bind_type2(p: &RcPair, mw: &MemoryWindow, id: u64, info: &MwBindInfo<'_>) -> WorkCompletion {
    let wr = SendWr {
        wr_id: id,
        opcode: WrOpcode::BindMw,
        send_flags: SendFlags::SIGNALED,
        bind_mw: mw.bind_wr(info),
        ..Default::default()
    };
    p.b.qp.post_send(&[wr]).expect("post_send of the bind");
    one(&p.b.cq)
}

#[test]
fn a_type_1_window_grants_its_range_and_rights_and_nothing_else() {
    both(|reach| {
        let p = pair("mw-type1", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let mw = p.b.pd.alloc_mw(MwType::Type1).expect("ibv_alloc_mw");
        assert_eq!(mw.mw_type(), MwType::Type1);
        let old = mw.rkey();
        assert_ne!(old, p.b.mr.rkey());
        let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let rkey = mw.bind(&p.b.qp, &info(&p, access), 7, SendFlags::SIGNALED).expect("bind");
        assert_eq!(rkey, inc_rkey(old));
        assert_eq!(mw.rkey(), rkey);
        ok(&one(&p.b.cq), 7, WcOpcode::BindMw, 0, b_qpn);

        let data = pattern(3, 0, 64);
        p.a.mr.write(0, &data).unwrap();
        let base = p.b.mr.addr() + WIN_OFF;
        ok(&write(&p, 1, base + 16, rkey, 64), 1, WcOpcode::RdmaWrite, 64, a_qpn);
        assert_eq!(p.b.mr.read_vec(WIN_OFF as usize + 16, 64).unwrap(), data);
        ok(&read(&p, 2, base + 16, rkey, 64), 2, WcOpcode::RdmaRead, 64, a_qpn);
        assert_eq!(p.a.mr.read_vec(8192, 64).unwrap(), data);
        // The window's last bytes, then one byte past its end: a remote access error.
        ok(&write(&p, 3, base + WIN_LEN - 8, rkey, 8), 3, WcOpcode::RdmaWrite, 8, a_qpn);
        failed(&write(&p, 4, base + WIN_LEN - 8, rkey, 9), 4, WcStatus::RemAccessErr, a_qpn);
        assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
        // b: the NAK put its QP in error too; the MR cannot go while the window is bound.
        let e = p.b.mr.clone().dereg().unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "{e}");
        mw.dealloc().expect("ibv_dealloc_mw of a bound window");
        p.b.mr.clone().dereg().expect("ibv_dereg_mr once the window is gone");
    });
}

#[test]
fn a_type_1_window_refuses_the_rights_it_does_not_grant_and_its_old_key() {
    both(|reach| {
        let p = pair("mw-type1-rights", reach);
        let a_qpn = p.a.qp.qp_num();
        let mw = p.b.pd.alloc_mw(MwType::Type1).unwrap();
        let read_only = AccessFlags::REMOTE_READ;
        let rkey = mw.bind(&p.b.qp, &info(&p, read_only), 7, SendFlags::empty()).unwrap();
        // Unsignaled: no completion; a READ works, the old key does not.
        let base = p.b.mr.addr() + WIN_OFF;
        ok(&read(&p, 1, base, rkey, 32), 1, WcOpcode::RdmaRead, 32, a_qpn);
        let none = p.b.cq.poll_n(1, Duration::from_millis(50));
        assert_eq!(none.map_err(|e| e.errno), Err(Errno::TimedOut), "an unsignaled bind");
        failed(&write(&p, 2, base, rkey, 8), 2, WcStatus::RemAccessErr, a_qpn);
        let p = pair("mw-type1-oldkey", reach);
        let mw2 = p.b.pd.alloc_mw(MwType::Type1).unwrap();
        let _ = mw2.bind(&p.b.qp, &info(&p, rw()), 7, SendFlags::empty()).unwrap();
        let base = p.b.mr.addr() + WIN_OFF;
        let stale = mw2.rkey().wrapping_sub(1) & 0xff | (mw2.rkey() & !0xff);
        let a_qpn = p.a.qp.qp_num();
        failed(&read(&p, 3, base, stale, 8), 3, WcStatus::RemAccessErr, a_qpn);
    });
}

#[test]
fn a_type_2_window_is_invalidated_by_a_send_with_invalidate() {
    both(|reach| {
        let p = pair("mw-type2-sendinv", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let mw = p.b.pd.alloc_mw(MwType::Type2).expect("ibv_alloc_mw type 2");
        ok(&bind_type2(&p, &mw, 9, &info(&p, rw())), 9, WcOpcode::BindMw, 0, b_qpn);
        let rkey = mw.rkey();
        let base = p.b.mr.addr() + WIN_OFF;
        let data = pattern(5, 0, 32);
        p.a.mr.write(0, &data).unwrap();
        ok(&write(&p, 1, base, rkey, 32), 1, WcOpcode::RdmaWrite, 32, a_qpn);
        assert_eq!(p.b.mr.read_vec(WIN_OFF as usize, 32).unwrap(), data);

        // SEND WITH INVALIDATE of the window's rkey.
        let rsge = [p.b.mr.sge(16384, 64)];
        p.b.qp.post_recv(&[RecvWr { wr_id: 20, sg_list: &rsge }]).unwrap();
        let sges = [p.a.mr.sge(0, 16)];
        let wr = SendWr {
            wr_id: 21,
            sg_list: &sges,
            opcode: WrOpcode::SendWithInv,
            send_flags: SendFlags::SIGNALED,
            invalidate_rkey: rkey,
            ..Default::default()
        };
        p.a.qp.post_send(&[wr]).unwrap();
        ok(&one(&p.a.cq), 21, WcOpcode::Send, 16, a_qpn);
        let wc = one(&p.b.cq);
        let want = WorkCompletion {
            wr_id: 20,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 16,
            imm_data: rkey,
            qp_num: b_qpn,
            src_qp: a_qpn,
            wc_flags: WcFlags::WITH_INV,
            ..WorkCompletion::default()
        };
        assert_eq!(wc, want);
        assert_eq!(p.b.mr.read_vec(16384, 16).unwrap(), data[..16]);
        // The key is gone: a WRITE through it is a remote access error.
        failed(&write(&p, 2, base, rkey, 8), 2, WcStatus::RemAccessErr, a_qpn);
    });
}

#[test]
fn a_type_2_window_is_invalidated_locally_and_bound_again() {
    both(|reach| {
        let p = pair("mw-type2-localinv", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let mw = p.b.pd.alloc_mw(MwType::Type2).unwrap();
        ok(&bind_type2(&p, &mw, 1, &info(&p, rw())), 1, WcOpcode::BindMw, 0, b_qpn);
        let first = mw.rkey();
        let inv = SendWr {
            wr_id: 2,
            opcode: WrOpcode::LocalInv,
            send_flags: SendFlags::SIGNALED,
            invalidate_rkey: first,
            ..Default::default()
        };
        p.b.qp.post_send(&[inv]).unwrap();
        ok(&one(&p.b.cq), 2, WcOpcode::LocalInv, 0, b_qpn);
        // Bound again, with the next key: the old one grants nothing, the new one does.
        ok(&bind_type2(&p, &mw, 3, &info(&p, rw())), 3, WcOpcode::BindMw, 0, b_qpn);
        let second = mw.rkey();
        assert_eq!(second, inc_rkey(first));
        let base = p.b.mr.addr() + WIN_OFF;
        // An atomic through the window.
        p.b.mr.write_u64(WIN_OFF as usize + 8, 40).unwrap();
        let sges = [p.a.mr.sge(0, 8)];
        let wr = SendWr {
            wr_id: 4,
            sg_list: &sges,
            opcode: WrOpcode::AtomicFetchAndAdd,
            send_flags: SendFlags::SIGNALED,
            atomic: AtomicTarget { remote_addr: base + 8, rkey: second, compare_add: 2, swap: 0 },
            ..Default::default()
        };
        p.a.qp.post_send(&[wr]).unwrap();
        ok(&one(&p.a.cq), 4, WcOpcode::FetchAdd, 8, a_qpn);
        assert_eq!(p.a.mr.read_u64(0).unwrap(), 40);
        assert_eq!(p.b.mr.read_u64(WIN_OFF as usize + 8).unwrap(), 42);
        failed(&write(&p, 5, base, first, 8), 5, WcStatus::RemAccessErr, a_qpn);
    });
}

#[test]
fn binds_and_invalidations_fail_as_rxe_fails_them() {
    both(|reach| {
        // A window on an MR registered without IBV_ACCESS_MW_BIND: MW_BIND_ERR, QP to ERR,
        // the WR after it flushed.
        let p = pair("mw-bind-err", reach);
        let b_qpn = p.b.qp.qp_num();
        let plain = p.b.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let mw = p.b.pd.alloc_mw(MwType::Type2).unwrap();
        let bad = MwBindInfo {
            mr: Some(&plain),
            addr: plain.addr(),
            length: 64,
            access: AccessFlags::REMOTE_READ,
            zero_based: false,
        };
        failed(&bind_type2(&p, &mw, 1, &bad), 1, WcStatus::MwBindErr, b_qpn);
        assert_eq!(p.b.qp.state().unwrap(), QpState::Err);

        // LOCAL_INV of an MR's key (rxe invalidates only fast-registration MRs) and of a type
        // 1 window: LOC_QP_OP_ERR.
        for (i, key) in [0u32, 1].into_iter().enumerate() {
            let p = pair(&format!("mw-inv-err{i}"), reach);
            let b_qpn = p.b.qp.qp_num();
            let key = match key {
                0 => p.b.mr.lkey(),
                _ => p.b.pd.alloc_mw(MwType::Type1).unwrap().rkey(),
            };
            let inv = SendWr {
                wr_id: 5,
                opcode: WrOpcode::LocalInv,
                send_flags: SendFlags::SIGNALED,
                invalidate_rkey: key,
                ..Default::default()
            };
            p.b.qp.post_send(&[inv]).unwrap();
            failed(&one(&p.b.cq), 5, WcStatus::LocQpOpErr, b_qpn);
        }

        // A SEND WITH INVALIDATE of a key the responder cannot invalidate: the receive
        // completes with REM_INV_REQ_ERR and the responder's QP goes to ERR; the sender's
        // SEND is acknowledged.
        let p = pair("mw-sendinv-err", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let rsge = [p.b.mr.sge(0, 64)];
        p.b.qp.post_recv(&[RecvWr { wr_id: 30, sg_list: &rsge }]).unwrap();
        let sges = [p.a.mr.sge(0, 8)];
        let wr = SendWr {
            wr_id: 31,
            sg_list: &sges,
            opcode: WrOpcode::SendWithInv,
            send_flags: SendFlags::SIGNALED,
            invalidate_rkey: p.b.mr.rkey(),
            ..Default::default()
        };
        p.a.qp.post_send(&[wr]).unwrap();
        ok(&one(&p.a.cq), 31, WcOpcode::Send, 8, a_qpn);
        failed(&one(&p.b.cq), 30, WcStatus::RemInvReqErr, b_qpn);
        assert_eq!(p.b.qp.state().unwrap(), QpState::Err);

        // ibv_bind_mw refuses a type 2 window, and a zero-based type 1 bind.
        let p = pair("mw-bind-refused", reach);
        let t2 = p.b.pd.alloc_mw(MwType::Type2).unwrap();
        let e = t2.bind(&p.b.qp, &info(&p, rw()), 1, SendFlags::empty()).unwrap_err();
        assert_eq!(e.errno, Errno::Inval);
        let t1 = p.b.pd.alloc_mw(MwType::Type1).unwrap();
        let zb = MwBindInfo { zero_based: true, ..info(&p, rw()) };
        let e = t1.bind(&p.b.qp, &zb, 1, SendFlags::empty()).unwrap_err();
        assert_eq!(e.errno, Errno::Inval);
        // SEND WITH INVALIDATE and LOCAL_INV are RC only (the IBA has no UC opcode for them).
        assert!(!WrOpcode::SendWithInv.valid_for(QpType::Uc));
        assert!(WrOpcode::BindMw.valid_for(QpType::Uc));
        // A PD with a window cannot go.
        let pd = p.b.ctx.alloc_pd().unwrap();
        let w = pd.alloc_mw(MwType::Type1).unwrap();
        assert_eq!(pd.clone().dealloc().unwrap_err().errno, Errno::Busy);
        w.dealloc().unwrap();
        pd.dealloc().unwrap();
    });
}

/// What the tap on a saw leave: each request's opcode and IETH.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(u8, Option<u32>)>>>;

#[test]
fn send_with_invalidate_goes_as_the_iba_opcodes_with_an_ieth() {
    // A tap sees the wire, so direct reach is off either way; the packets are the same.
    both(|reach| {
        let p = pair("mw-wire", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let seen: Seen = Default::default();
        let s = seen.clone();
        let tap = move |dir: nic_model::soft::TapDir, d: &[u8]| {
            if dir == nic_model::soft::TapDir::Tx {
                if let Ok((_, pkt)) = nic_model::packet::parse_datagram(d) {
                    s.lock().unwrap().push((pkt.bth.opcode.0, pkt.ieth));
                }
            }
        };
        p.soft.set_tap("softverbs0", Some(std::sync::Arc::new(tap))).unwrap();
        let mut rkeys = Vec::new();
        // One window per SEND: a 3000-byte SEND (FIRST, MIDDLE, LAST WITH INVALIDATE at the
        // 1024-byte MTU) and an 8-byte one (ONLY WITH INVALIDATE).
        for (i, len) in [3000u32, 8].into_iter().enumerate() {
            let mw = p.b.pd.alloc_mw(MwType::Type2).unwrap();
            let id = 40 + i as u64;
            ok(&bind_type2(&p, &mw, id, &info(&p, rw())), id, WcOpcode::BindMw, 0, b_qpn);
            let rsge = [p.b.mr.sge(16384, 4096)];
            p.b.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &rsge }]).unwrap();
            let data = pattern(id, 0, len as usize);
            p.a.mr.write(0, &data).unwrap();
            let sges = [p.a.mr.sge(0, len)];
            let wr = SendWr {
                wr_id: id,
                sg_list: &sges,
                opcode: WrOpcode::SendWithInv,
                send_flags: SendFlags::SIGNALED,
                invalidate_rkey: mw.rkey(),
                ..Default::default()
            };
            p.a.qp.post_send(&[wr]).unwrap();
            ok(&one(&p.a.cq), id, WcOpcode::Send, len, a_qpn);
            let wc = one(&p.b.cq);
            assert_eq!((wc.wr_id, wc.status, wc.byte_len), (id, WcStatus::Success, len));
            assert_eq!((wc.wc_flags, wc.imm_data), (WcFlags::WITH_INV, mw.rkey()));
            assert_eq!(p.b.mr.read_vec(16384, len as usize).unwrap(), data);
            rkeys.push(mw.rkey());
        }
        p.soft.set_tap("softverbs0", None).unwrap();
        let requests: Vec<(u8, Option<u32>)> =
            seen.lock().unwrap().iter().copied().filter(|(op, _)| *op != 0x11).collect();
        // SEND FIRST, SEND MIDDLE, SEND LAST WITH INVALIDATE (0x16), SEND ONLY WITH
        // INVALIDATE (0x17): only the last packet of a message carries the IETH.
        let want = vec![(0x00, None), (0x01, None), (0x16, Some(rkeys[0])), (0x17, Some(rkeys[1]))];
        assert_eq!(requests, want);
    });
}

#[test]
fn a_zero_based_type_2_window_is_named_from_0() {
    both(|reach| {
        let p = pair("mw-zero-based", reach);
        let (a_qpn, b_qpn) = (p.a.qp.qp_num(), p.b.qp.qp_num());
        let mw = p.b.pd.alloc_mw(MwType::Type2).unwrap();
        let zb = MwBindInfo { zero_based: true, ..info(&p, rw()) };
        ok(&bind_type2(&p, &mw, 1, &zb), 1, WcOpcode::BindMw, 0, b_qpn);
        let data = pattern(9, 0, 16);
        p.a.mr.write(0, &data).unwrap();
        ok(&write(&p, 2, 8, mw.rkey(), 16), 2, WcOpcode::RdmaWrite, 16, a_qpn);
        assert_eq!(p.b.mr.read_vec(WIN_OFF as usize + 8, 16).unwrap(), data);
        ok(&read(&p, 3, 8, mw.rkey(), 16), 3, WcOpcode::RdmaRead, 16, a_qpn);
        assert_eq!(p.a.mr.read_vec(8192, 16).unwrap(), data);
        // Its length from 0: the window's last byte is WIN_LEN - 1.
        failed(&write(&p, 4, WIN_LEN - 8, mw.rkey(), 9), 4, WcStatus::RemAccessErr, a_qpn);
    });
}
