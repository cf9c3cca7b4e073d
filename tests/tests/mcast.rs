//! UD multicast (`ibv_attach_mcast`, `ibv_detach_mcast`) as rxe does it: a UD datagram sent
//! to a multicast group (its GID `::ffff:239.x.y.z`, QPN 0xFFFFFF) reaches every QP attached to
//! the group, on every port of the fabric, the sender's own port's other QPs included, and no
//! detached QP nor the sending QP itself; each receiver's completion and GRH are those of a
//! UD receive. Run over the shared-memory fabric (its registry of members, `wire/mcast.rs`)
//! and the in-process one, with direct reach on and off (a UD SEND is never reached: the
//! outcome must be the same).

use std::time::Duration;

use nic_model::soft::Soft;
use softverbs_sim::conn::{Endpoint, PortAddress};
use softverbs_tests::FabricDir;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x0123_4567;
const GROUP: [u8; 4] = [239, 1, 2, 3];
const MESSAGES: u64 = 3;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

fn ud(ctx: &Context) -> Endpoint {
    let ep = Endpoint::new(ctx, QpType::Ud, cap(), 64, 1 << 12).unwrap();
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, qkey: QKEY, ..Default::default() };
    ep.qp.modify(&init, m).unwrap();
    ep.qp
        .modify(&QpAttr { qp_state: QpState::Rtr, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 1, ..Default::default() };
    ep.qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap();
    for i in 0..MESSAGES {
        let sge = ep.mr.sge(i as usize * 256, 256);
        ep.qp.post_recv(&[RecvWr { wr_id: 100 + i, sg_list: &[sge] }]).unwrap();
    }
    ep
}

fn message(i: u64) -> [u8; 16] {
    let mut m = *b"to the group #..";
    m[14..].copy_from_slice(&(i as u16).to_be_bytes());
    m
}

/// Sender S and receiver A on the first device, receivers B and C on the second; S, A, B and
/// C attach, C detaches; S sends three datagrams to the group. A and B get each, in order,
/// with every field; C and S get none.
fn group_reaches_attached_qps(soft: &Soft) {
    let c0 = soft.open("softverbs0").unwrap();
    let c1 = soft.open("softverbs1").unwrap();
    let (s, a, b, c) = (ud(&c0), ud(&c0), ud(&c1), ud(&c1));
    let group = Gid::from_ipv4(GROUP);
    for ep in [&s, &a, &b, &c] {
        ep.qp.attach_mcast(&group, 0).unwrap();
    }
    c.qp.detach_mcast(&group, 0).unwrap();
    let from = PortAddress::of(&c0, Some(1)).unwrap().gid;
    let av = AhAttr {
        port_num: 1,
        is_global: true,
        dgid: group,
        sgid_index: 1,
        hop_limit: 1,
        ..Default::default()
    };
    let ah = s.pd.create_ah(&av).unwrap();
    for i in 0..MESSAGES {
        let m = message(i);
        let wr = SendWr {
            wr_id: i,
            inline_data: Some(&m),
            send_flags: SendFlags::INLINE | SendFlags::SIGNALED,
            ud: Some(UdTarget { ah: ah.clone(), remote_qpn: 0xFF_FFFF, remote_qkey: QKEY }),
            ..Default::default()
        };
        s.qp.post_send(&[wr]).unwrap();
    }
    let sent = s.cq.poll_n(MESSAGES as usize, WAIT).unwrap();
    assert!(sent.iter().all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    for (who, ep) in [("A (the sender's port)", &a), ("B (another port)", &b)] {
        let got = ep.cq.poll_n(MESSAGES as usize, WAIT).unwrap();
        assert_eq!(got.len(), MESSAGES as usize, "{who} got every datagram");
        for (i, wc) in got.iter().enumerate() {
            assert_eq!(wc.status, WcStatus::Success, "{who}");
            assert_eq!(wc.opcode, WcOpcode::Recv, "{who}");
            assert_eq!(wc.wr_id, 100 + i as u64, "{who}: in order");
            assert_eq!(wc.byte_len, 40 + 16, "{who}: GRH and payload");
            assert_eq!(wc.qp_num, ep.qp.qp_num(), "{who}");
            assert_eq!(wc.src_qp, s.qp.qp_num(), "{who}");
            assert!(wc.wc_flags.contains(WcFlags::GRH), "{who}");
            let bytes = ep.mr.read_vec(i * 256, 56).unwrap();
            assert_eq!(bytes[40..], message(i as u64), "{who}: the payload");
            // The GRH area holds the IPv4 header (after 20 zero bytes): source the sender's
            // port, destination the group.
            assert_eq!(bytes[20 + 12..20 + 16], from.0[12..], "{who}: IPv4 source");
            assert_eq!(bytes[20 + 16..20 + 20], GROUP, "{who}: IPv4 destination is the group");
        }
    }
    // A and B have had theirs; anything for C or S would have come with them.
    std::thread::sleep(Duration::from_millis(100));
    for (who, ep) in [("C (detached)", &c), ("S (the sender itself)", &s)] {
        let mut wc = [WorkCompletion::default(); 4];
        let n = ep.cq.poll(&mut wc).unwrap();
        assert_eq!(n, 0, "{who} received {:?}", &wc[..n]);
    }
}

#[test]
fn a_datagram_to_a_group_reaches_every_attached_qp_over_shared_memory() {
    for reach in [true, false] {
        let dir = FabricDir::new(&format!("mcast_shm_{reach}"));
        let soft = Soft::shared_memory(Some(dir.path())).unwrap();
        soft.set_reach(reach);
        group_reaches_attached_qps(&soft);
    }
}

#[test]
fn a_datagram_to_a_group_reaches_every_attached_qp_in_process() {
    for reach in [true, false] {
        let soft = Soft::loopback();
        soft.set_reach(reach);
        group_reaches_attached_qps(&soft);
    }
}

/// rxe's (the kernel's `ib_attach_mcast`) refusals: a QP that is not UD, a GID that is not
/// multicast; and detaching a QP that is not attached.
#[test]
fn attach_refuses_what_the_kernel_refuses() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let ud = ud(&ctx);
    let rc = Endpoint::new(&ctx, QpType::Rc, cap(), 8, 64).unwrap();
    let group = Gid::from_ipv4(GROUP);
    let errno = |r: Result<()>| r.unwrap_err().errno;
    assert_eq!(errno(rc.qp.attach_mcast(&group, 0)), Errno::Inval);
    assert_eq!(errno(ud.qp.attach_mcast(&Gid::from_ipv4([10, 0, 0, 1]), 0)), Errno::Inval);
    assert_eq!(errno(ud.qp.detach_mcast(&group, 0)), Errno::Inval);
    let mut v6 = [0u8; 16];
    v6[0] = 0xff;
    v6[1] = 0x0e;
    v6[15] = 1;
    ud.qp.attach_mcast(&Gid(v6), 0).unwrap();
    ud.qp.attach_mcast(&group, 0).unwrap();
    ud.qp.attach_mcast(&group, 0).unwrap();
    ud.qp.detach_mcast(&group, 0).unwrap();
    assert_eq!(errno(ud.qp.detach_mcast(&group, 0)), Errno::Inval, "attached once");
}

/// The device reports rxe's multicast limits and holds to them: the 57th QP attached to one
/// group is `ENOMEM`, as rxe's `RXE_MAX_MCAST_QP_ATTACH`.
#[test]
fn the_multicast_limits_are_rxes_and_hold() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let d = ctx.query_device().unwrap();
    assert_eq!(
        (d.max_mcast_grp, d.max_mcast_qp_attach, d.max_total_mcast_qp_attach),
        (8192, 56, 0x70000)
    );
    let group = Gid::from_ipv4(GROUP);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qps: Vec<QueuePair> = (0..57)
        .map(|_| softverbs_sim::conn::create_qp_on(&pd, &cq, QpType::Ud, cap()).unwrap())
        .collect();
    for qp in &qps[..56] {
        qp.attach_mcast(&group, 0).unwrap();
    }
    assert_eq!(qps[56].attach_mcast(&group, 0).unwrap_err().errno, Errno::NoMem);
    qps[0].detach_mcast(&group, 0).unwrap();
    qps[56].attach_mcast(&group, 0).unwrap();
}
