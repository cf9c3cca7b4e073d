//! The verbs API end to end on the soft backend, two devices in one process over the
//! in-process wire: every verb the foundation offers, with the bytes that landed, every
//! work-completion field, statuses and ordering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nic_model::soft::Soft;
use softverbs_sim::conn::{self, ConnOpts, Endpoint};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 3,
        max_recv_sge: 3,
        max_inline_data: 128,
    }
}

/// Two connected RC endpoints on a private loopback fabric.
fn pair_with(opts: ConnOpts) -> (Soft, Endpoint, Endpoint) {
    let soft = Soft::loopback();
    let c0 = soft.open("softverbs0").unwrap();
    let c1 = soft.open("softverbs1").unwrap();
    let a = Endpoint::new(&c0, QpType::Rc, cap(), 64, 1 << 20).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap(), 64, 1 << 20).unwrap();
    let (ia, ib) = (a.info(0x100).unwrap(), b.info(0x200).unwrap());
    conn::connect(&a.qp, 0x100, &ib, &opts).unwrap();
    conn::connect(&b.qp, 0x200, &ia, &opts).unwrap();
    (soft, a, b)
}

fn pair() -> (Soft, Endpoint, Endpoint) {
    pair_with(ConnOpts::default())
}

fn one(cq: &CompletionQueue) -> WorkCompletion {
    cq.poll_n(1, WAIT).unwrap()[0]
}

#[test]
fn devices_are_listed_opened_and_queried() {
    let soft = Soft::loopback();
    let names: Vec<String> =
        Provider::devices(&soft).unwrap().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["softverbs0", "softverbs1"]);
    let ctx = soft.open("softverbs0").unwrap();
    let dev = ctx.query_device().unwrap();
    assert_eq!(dev.phys_port_cnt, 1);
    assert!(
        dev.max_qp >= 64 && dev.max_qp_wr >= 1024 && dev.max_sge >= 4 && dev.max_qp_rd_atom >= 1
    );
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    // A RoCE v2 port as rxe presents one: no LID, no subnet manager, rxe's GID table length
    // and capability flags (IB_PORT_CM_SUP).
    assert_eq!((port.lid, port.sm_lid, port.lmc), (0, 0, 0));
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(port.gid_tbl_len, 1024);
    assert_eq!(port.port_cap_flags, PORT_CAP_CM_SUP);
    assert_eq!(port.active_mtu, Mtu::Mtu4096);
    let e = ctx.query_port(2).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("port 2"), "{}", e.message);
    // Entries past the two a port fills read as zero; past the table they do not exist.
    assert_eq!(ctx.query_gid(1, 2).unwrap(), Gid::default());
    assert_eq!(ctx.query_gid(1, 1023).unwrap(), Gid::default());
    assert_eq!(ctx.query_gid(1, 1024).unwrap_err().errno, Errno::Inval);
    assert_eq!(ctx.query_gid_entry(1, 2).unwrap_err().errno, Errno::NoData);
    assert_eq!(ctx.query_gid_entry(1, 1024).unwrap_err().errno, Errno::Inval);
    let e = soft.open("softverbs9").unwrap_err();
    assert_eq!(e.errno, Errno::NoDev);
    assert!(e.message.contains("softverbs9"), "{}", e.message);
    // Registered as a provider, devices are found by name.
    register_provider(Arc::new(Soft::loopback()));
    assert!(device_list().unwrap().iter().any(|d| d.name() == "softverbs1"));
    assert_eq!(Context::open("mlx5_0").unwrap_err().errno, Errno::NoDev);
}

#[test]
fn memory_regions_have_keys_bounds_and_deregistration() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    assert_eq!(mr.len(), 4096);
    assert_eq!(mr.lkey(), mr.rkey());
    assert_eq!(mr.addr() % 64, 0);
    mr.write(4090, b"abcdef").unwrap();
    assert_eq!(mr.read_vec(4090, 6).unwrap(), b"abcdef");
    let e = mr.write(4091, b"abcdef").unwrap_err();
    assert!(e.message.contains("outside the MR"), "{}", e.message);
    let e = pd.reg_mr(16, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(e.message.contains("require IBV_ACCESS_LOCAL_WRITE"), "{}", e.message);
    let other = pd.reg_mr(16, AccessFlags::LOCAL_WRITE).unwrap();
    assert_ne!(other.lkey(), mr.lkey());
    assert_eq!(pd.clone().dealloc().unwrap_err().errno, Errno::Busy);
    mr.dereg().unwrap();
    other.dereg().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn every_operation_with_every_completion_field() {
    let (_soft, a, b) = pair();
    let (aq, bq) = (a.qp.qp_num(), b.qp.qp_num());
    let alid = a.ctx.query_port(1).unwrap().lid;
    // SEND with immediate, gathered from three SGEs into two.
    a.mr.write(0, b"hello ").unwrap();
    a.mr.write(100, b"verbs ").unwrap();
    a.mr.write(200, b"world").unwrap();
    let rsg = [b.mr.sge(0, 8), b.mr.sge(1000, 100)];
    b.qp.post_recv(&[RecvWr { wr_id: 10, sg_list: &rsg }]).unwrap();
    let ssg = [a.mr.sge(0, 6), a.mr.sge(100, 6), a.mr.sge(200, 5)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &ssg,
        opcode: WrOpcode::SendWithImm,
        send_flags: SendFlags::SIGNALED,
        imm_data: 0xfeed,
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(
        one(&a.cq),
        WorkCompletion {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 17,
            qp_num: aq,
            ..Default::default()
        }
    );
    assert_eq!(
        one(&b.cq),
        WorkCompletion {
            wr_id: 10,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 17,
            imm_data: 0xfeed,
            qp_num: bq,
            src_qp: aq,
            wc_flags: WcFlags::WITH_IMM,
            slid: alid,
            ..Default::default()
        }
    );
    let mut got = b.mr.read_vec(0, 8).unwrap();
    got.extend(b.mr.read_vec(1000, 9).unwrap());
    assert_eq!(got, b"hello verbs world");
    // RDMA WRITE of 100 KiB (many packets at MTU 1024), then WRITE_WITH_IMM.
    let data: Vec<u8> = (0..100 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    a.mr.write(4096, &data).unwrap();
    let sg = [a.mr.sge(4096, data.len() as u32)];
    let wr = SendWr {
        wr_id: 2,
        sg_list: &sg,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mr.addr() + 200_000, rkey: b.mr.rkey() },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(
        one(&a.cq),
        WorkCompletion {
            wr_id: 2,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaWrite,
            byte_len: data.len() as u32,
            qp_num: aq,
            ..Default::default()
        }
    );
    assert_eq!(b.mr.read_vec(200_000, data.len()).unwrap(), data);
    b.qp.post_recv(&[RecvWr { wr_id: 11, sg_list: &[] }]).unwrap();
    let sg = [a.mr.sge(4096, 10)];
    let wr = SendWr {
        wr_id: 3,
        sg_list: &sg,
        opcode: WrOpcode::RdmaWriteWithImm,
        send_flags: SendFlags::SIGNALED,
        imm_data: 7,
        rdma: RdmaTarget { remote_addr: b.mr.addr() + 500_000, rkey: b.mr.rkey() },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(one(&a.cq).opcode, WcOpcode::RdmaWrite);
    assert_eq!(
        one(&b.cq),
        WorkCompletion {
            wr_id: 11,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 10,
            imm_data: 7,
            qp_num: bq,
            src_qp: aq,
            wc_flags: WcFlags::WITH_IMM,
            slid: alid,
            ..Default::default()
        }
    );
    // RDMA READ back what was written, scattered into two SGEs.
    let sg = [a.mr.sge(300_000, 50_000), a.mr.sge(400_000, 52_400)];
    let wr = SendWr {
        wr_id: 4,
        sg_list: &sg,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mr.addr() + 200_000, rkey: b.mr.rkey() },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(
        one(&a.cq),
        WorkCompletion {
            wr_id: 4,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaRead,
            byte_len: 102_400,
            qp_num: aq,
            ..Default::default()
        }
    );
    let mut back = a.mr.read_vec(300_000, 50_000).unwrap();
    back.extend(a.mr.read_vec(400_000, 52_400).unwrap());
    assert_eq!(back, data);
    // Atomics.
    b.mr.write_u64(800_000, 5).unwrap();
    let (s1, s2) = ([a.mr.sge(900_000, 8)], [a.mr.sge(900_008, 8)]);
    let cas = SendWr {
        wr_id: 5,
        sg_list: &s1,
        opcode: WrOpcode::AtomicCmpAndSwp,
        send_flags: SendFlags::SIGNALED,
        atomic: AtomicTarget {
            remote_addr: b.mr.addr() + 800_000,
            rkey: b.mr.rkey(),
            compare_add: 5,
            swap: 50,
        },
        ..Default::default()
    };
    let fad = SendWr {
        wr_id: 6,
        sg_list: &s2,
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: SendFlags::SIGNALED,
        atomic: AtomicTarget {
            remote_addr: b.mr.addr() + 800_000,
            rkey: b.mr.rkey(),
            compare_add: 3,
            swap: 0,
        },
        ..Default::default()
    };
    a.qp.post_send(&[cas, fad]).unwrap();
    let wcs = a.cq.poll_n(2, WAIT).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect::<Vec<_>>(),
        vec![
            (5, WcStatus::Success, WcOpcode::CompSwap, 8),
            (6, WcStatus::Success, WcOpcode::FetchAdd, 8)
        ]
    );
    assert_eq!(a.mr.read_u64(900_000).unwrap(), 5);
    assert_eq!(a.mr.read_u64(900_008).unwrap(), 50);
    assert_eq!(b.mr.read_u64(800_000).unwrap(), 53);
}

#[test]
fn completion_channel_notifies_and_times_out() {
    let (_soft, a, b) = pair();
    let ch = b.ctx.create_comp_channel().unwrap();
    let cq = b.ctx.create_cq(16, Some(&ch), 0).unwrap();
    let qp =
        b.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap: cap(),
            sq_sig_all: false,
        })
        .unwrap();
    // Reconnect a to the new QP: a fresh pair of QPs.
    let aqp =
        a.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: a.cq.clone(),
            recv_cq: a.cq.clone(),
            srq: None,
            cap: cap(),
            sq_sig_all: true,
        })
        .unwrap();
    let ia = conn::QpInfo { qpn: aqp.qp_num(), ..a.info(1).unwrap() };
    let ib = conn::QpInfo { qpn: qp.qp_num(), ..b.info(2).unwrap() };
    conn::connect(&aqp, 1, &ib, &ConnOpts::default()).unwrap();
    conn::connect(&qp, 2, &ia, &ConnOpts::default()).unwrap();
    // Nothing armed: a bounded wait times out.
    let t = Instant::now();
    let e = ch.get_cq_event(Some(Duration::from_millis(50))).unwrap_err();
    assert_eq!(e.errno, Errno::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(45));
    // Solicited-only: an unsolicited SEND does not wake; a solicited one does.
    cq.req_notify(true).unwrap();
    let rsg = [b.mr.sge(0, 64), b.mr.sge(64, 64)];
    qp.post_recv(&[
        RecvWr { wr_id: 1, sg_list: &rsg[..1] },
        RecvWr { wr_id: 2, sg_list: &rsg[1..] },
    ])
    .unwrap();
    let data = *b"x";
    aqp.post_send(&[SendWr {
        wr_id: 1,
        inline_data: Some(&data),
        send_flags: SendFlags::INLINE,
        ..Default::default()
    }])
    .unwrap();
    assert_eq!(
        ch.get_cq_event(Some(Duration::from_millis(100))).unwrap_err().errno,
        Errno::TimedOut
    );
    aqp.post_send(&[SendWr {
        wr_id: 2,
        inline_data: Some(&data),
        send_flags: SendFlags::INLINE | SendFlags::SOLICITED,
        ..Default::default()
    }])
    .unwrap();
    let ev = ch.get_cq_event(Some(WAIT)).unwrap();
    assert_eq!(ev, cq);
    ch.ack_cq_events(&ev, 1);
    let wcs = cq.poll_n(2, WAIT).unwrap();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(a.cq.poll_n(2, WAIT).unwrap().len(), 2, "sq_sig_all signals both");
}

#[test]
fn modify_qp_enforces_the_state_table_and_query_reports() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(), 8, 4096).unwrap();
    let (attr, qcap) = ep.qp.query().unwrap();
    assert_eq!(attr.qp_state, QpState::Reset);
    assert_eq!(qcap, cap());
    let e = ep
        .qp
        .modify(&QpAttr { qp_state: QpState::Rtr, ..Default::default() }, QpAttrMask::STATE)
        .unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("RESET -> RTR is not a valid transition"), "{}", e.message);
    let e = ep
        .qp
        .modify(
            &QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() },
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX,
        )
        .unwrap_err();
    assert!(e.message.contains("IBV_QP_ACCESS_FLAGS"), "{}", e.message);
    conn::to_init(&ep.qp, &ConnOpts::default()).unwrap();
    let remote = ep.info(0x42).unwrap();
    let e = ep
        .qp
        .modify(
            &QpAttr { qp_state: QpState::Rtr, ..Default::default() },
            QpAttrMask::STATE | QpAttrMask::AV,
        )
        .unwrap_err();
    assert!(e.message.contains("IBV_QP_PATH_MTU"), "{}", e.message);
    conn::to_rtr(&ep.qp, &remote, &ConnOpts::default()).unwrap();
    conn::to_rts(&ep.qp, 0x77, &ConnOpts::default()).unwrap();
    let (attr, _) = ep.qp.query().unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.path_mtu, Mtu::Mtu1024);
    assert_eq!(attr.dest_qp_num, ep.qp.qp_num());
    assert_eq!((attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer), (14, 7, 7, 12));
    assert_eq!(attr.sq_psn, 0x77);
    assert_eq!(attr.rq_psn, 0x42);
    // Any state to ERR, then RESET.
    ep.qp
        .modify(&QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(ep.qp.state().unwrap(), QpState::Err);
    ep.qp
        .modify(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(ep.qp.state().unwrap(), QpState::Reset);
}

#[test]
fn moving_to_error_flushes_every_outstanding_wqe() {
    let (_soft, a, b) = pair();
    let rsg = [b.mr.sge(0, 16)];
    b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &rsg }, RecvWr { wr_id: 2, sg_list: &rsg }])
        .unwrap();
    b.qp.modify(&QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    let wcs = b.cq.poll_n(2, WAIT).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect::<Vec<_>>(),
        vec![(1, WcStatus::WrFlushErr, b.qp.qp_num()), (2, WcStatus::WrFlushErr, b.qp.qp_num())]
    );
    let _ = a;
}

#[test]
fn remote_errors_reach_the_requester() {
    let (_soft, a, b) = pair();
    let sg = [a.mr.sge(0, 8)];
    let wr = SendWr {
        wr_id: 9,
        sg_list: &sg,
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mr.addr() + b.mr.len() as u64, rkey: b.mr.rkey() },
        ..Default::default()
    };
    let after =
        SendWr { wr_id: 10, sg_list: &sg, send_flags: SendFlags::SIGNALED, ..Default::default() };
    a.qp.post_send(&[wr, after]).unwrap();
    let wcs = a.cq.poll_n(2, WAIT).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(9, WcStatus::RemAccessErr), (10, WcStatus::WrFlushErr)]
    );
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    let port_up = a.ctx.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(port_up.event_type, AsyncEventType::PortActive, "the port came up first");
    // The requester learns of the error from its completion alone; the responder's program
    // gets the IBA's affiliated event for an access violation (as mlx5 raises it).
    let none = a.ctx.get_async_event(Some(Duration::from_millis(100)));
    assert!(none.is_err(), "no async event on the requester: {none:?}");
    let port_up = b.ctx.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(port_up.event_type, AsyncEventType::PortActive, "the port came up first");
    let ev = b.ctx.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(
        ev,
        AsyncEvent {
            event_type: AsyncEventType::QpAccessErr,
            element: AsyncElement::Qp(b.qp.qp_num())
        }
    );
}

#[test]
fn rnr_waits_in_real_time_until_a_receive_is_posted() {
    let (_soft, a, b) = pair_with(ConnOpts { min_rnr_timer: 1, ..ConnOpts::default() });
    let data = *b"late";
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        inline_data: Some(&data),
        send_flags: SendFlags::INLINE | SendFlags::SIGNALED,
        ..Default::default()
    }])
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut wc = [WorkCompletion::default()];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 0, "still waiting on RNR");
    b.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: &[b.mr.sge(0, 16)] }]).unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    assert_eq!(one(&b.cq).byte_len, 4);
    assert_eq!(b.mr.read_vec(0, 4).unwrap(), b"late");
}

#[test]
fn retry_exhaustion_when_the_peer_is_gone() {
    let (soft, a, b) = pair_with(ConnOpts { timeout: 8, retry_cnt: 2, ..ConnOpts::default() });
    // Destroy the peer's QP: its packets now reach no QP and are dropped.
    drop(b);
    let _ = soft;
    let sg = [a.mr.sge(0, 8)];
    let t = Instant::now();
    a.qp.post_send(&[
        SendWr { wr_id: 1, sg_list: &sg, ..Default::default() },
        SendWr { wr_id: 2, sg_list: &sg, ..Default::default() },
    ])
    .unwrap();
    let wcs = a.cq.poll_n(2, WAIT).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let timeout = Duration::from_nanos(4096 << 8);
    assert!(
        t.elapsed() >= timeout * 3,
        "three attempts, each waiting the ACK timeout: {:?}",
        t.elapsed()
    );
}

#[test]
fn cq_overrun_is_reported() {
    let soft = Soft::loopback();
    let c0 = soft.open("softverbs0").unwrap();
    let c1 = soft.open("softverbs1").unwrap();
    let a = Endpoint::new(&c0, QpType::Rc, cap(), 2, 4096).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap(), 8, 4096).unwrap();
    conn::connect(&a.qp, 1, &b.info(2).unwrap(), &ConnOpts::default()).unwrap();
    conn::connect(&b.qp, 2, &a.info(1).unwrap(), &ConnOpts::default()).unwrap();
    let wrs: Vec<_> = (0..4)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
            ..Default::default()
        })
        .collect();
    a.qp.post_send(&wrs).unwrap();
    let deadline = Instant::now() + WAIT;
    let err = loop {
        let mut wc = [WorkCompletion::default(); 1];
        match a.cq.poll(&mut wc[..0]) {
            Err(e) => break e,
            Ok(_) if Instant::now() > deadline => panic!("no overrun reported"),
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    assert!(err.message.contains("overrun"), "{}", err.message);
    assert_eq!(a.ctx.get_async_event(Some(WAIT)).unwrap().event_type, AsyncEventType::PortActive);
    let ev = a.ctx.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(ev.event_type, AsyncEventType::CqErr);
}

#[test]
fn destroying_resources_in_use_is_ebusy() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let ep = Endpoint::new(&ctx, QpType::Rc, cap(), 8, 4096).unwrap();
    assert_eq!(ep.cq.clone().destroy().unwrap_err().errno, Errno::Busy);
    assert_eq!(ep.pd.clone().dealloc().unwrap_err().errno, Errno::Busy);
    ep.qp.clone().destroy().unwrap();
    ep.cq.clone().destroy().unwrap();
}

#[test]
fn bad_creation_arguments_are_named() {
    let soft = Soft::loopback();
    let ctx = soft.open("softverbs0").unwrap();
    let e2 = ctx.create_cq(0, None, 0).unwrap_err();
    assert!(e2.message.contains("cqe 0"), "{}", e2.message);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None, 0).unwrap();
    let e3 = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq,
            srq: None,
            cap: QpCap { max_send_sge: 1000, ..cap() },
            sq_sig_all: false,
        })
        .unwrap_err();
    assert!(e3.message.contains("max_send_sge 1000"), "{}", e3.message);
}

fn ud_endpoint(ctx: &Context, qkey: u32) -> Endpoint {
    let ep = Endpoint::new(ctx, QpType::Ud, cap(), 64, 1 << 16).unwrap();
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    ep.qp
        .modify(&QpAttr { qp_state: QpState::Init, port_num: 1, qkey, ..Default::default() }, m)
        .unwrap();
    ep.qp
        .modify(&QpAttr { qp_state: QpState::Rtr, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 1, ..Default::default() };
    ep.qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap();
    ep
}

/// One device runs RC, UC and UD QPs at once; each keeps its own semantics.
#[test]
fn rc_uc_and_ud_on_one_device_at_once() {
    let (soft, rc_a, rc_b) = pair();
    let c0 = rc_a.ctx.clone();
    let c1 = rc_b.ctx.clone();
    let uc_a = Endpoint::new(&c0, QpType::Uc, cap(), 64, 1 << 16).unwrap();
    let uc_b = Endpoint::new(&c1, QpType::Uc, cap(), 64, 1 << 16).unwrap();
    let uc_opts = ConnOpts { access: AccessFlags::REMOTE_WRITE, ..ConnOpts::default() };
    conn::connect(&uc_a.qp, 10, &uc_b.info(20).unwrap(), &uc_opts).unwrap();
    conn::connect(&uc_b.qp, 20, &uc_a.info(10).unwrap(), &uc_opts).unwrap();
    let ud_a = ud_endpoint(&c0, 0x11);
    let ud_b = ud_endpoint(&c1, 0x22);
    let b_gid = conn::PortAddress::of(&c1, None).unwrap().gid;
    let ah = ud_a.pd.create_ah(&conn::av_to(b_gid, &ConnOpts::default())).unwrap();
    // Receives on all three.
    rc_b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[rc_b.mr.sge(0, 64)] }]).unwrap();
    uc_b.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[uc_b.mr.sge(0, 64)] }]).unwrap();
    ud_b.qp.post_recv(&[RecvWr { wr_id: 3, sg_list: &[ud_b.mr.sge(0, 128)] }]).unwrap();
    let (rc_msg, uc_msg, ud_msg) = (*b"over RC", *b"over UC", *b"over UD");
    let sig = SendFlags::INLINE | SendFlags::SIGNALED;
    rc_a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            inline_data: Some(&rc_msg),
            send_flags: sig,
            ..Default::default()
        }])
        .unwrap();
    uc_a.qp
        .post_send(&[SendWr {
            wr_id: 2,
            inline_data: Some(&uc_msg),
            send_flags: sig,
            ..Default::default()
        }])
        .unwrap();
    let ud = UdTarget { ah: ah.clone(), remote_qpn: ud_b.qp.qp_num(), remote_qkey: 0x22 };
    ud_a.qp
        .post_send(&[SendWr {
            wr_id: 3,
            inline_data: Some(&ud_msg),
            send_flags: sig,
            ud: Some(ud),
            ..Default::default()
        }])
        .unwrap();
    let rc = one(&rc_b.cq);
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len, rc.src_qp, rc.wc_flags),
        (1, WcStatus::Success, 7, rc_a.qp.qp_num(), WcFlags::empty())
    );
    let uc = one(&uc_b.cq);
    assert_eq!(
        (uc.wr_id, uc.status, uc.byte_len, uc.src_qp),
        (2, WcStatus::Success, 7, uc_a.qp.qp_num())
    );
    let udw = one(&ud_b.cq);
    let a_lid = c0.query_port(1).unwrap().lid;
    assert_eq!(
        udw,
        WorkCompletion {
            wr_id: 3,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 47,
            qp_num: ud_b.qp.qp_num(),
            src_qp: ud_a.qp.qp_num(),
            wc_flags: WcFlags::GRH,
            slid: a_lid,
            ..Default::default()
        }
    );
    assert_eq!(rc_b.mr.read_vec(0, 7).unwrap(), b"over RC");
    assert_eq!(uc_b.mr.read_vec(0, 7).unwrap(), b"over UC");
    assert_eq!(ud_b.mr.read_vec(40, 7).unwrap(), b"over UD", "after the 40-byte GRH");
    for (ep, id) in [(&rc_a, 1), (&uc_a, 2), (&ud_a, 3)] {
        let w = one(&ep.cq);
        assert_eq!((w.wr_id, w.status, w.opcode), (id, WcStatus::Success, WcOpcode::Send));
    }
    // READ is refused at post time on UC, and UD refuses a message beyond the MTU.
    let e = uc_a
        .qp
        .post_send(&[SendWr { opcode: WrOpcode::RdmaRead, ..Default::default() }])
        .unwrap_err();
    assert!(e.message.contains("not valid on an IBV_QPT_UC QP"), "{}", e.message);
    let big = [ud_a.mr.sge(0, 5000)];
    let ud = UdTarget { ah, remote_qpn: ud_b.qp.qp_num(), remote_qkey: 0x22 };
    let e = ud_a
        .qp
        .post_send(&[SendWr { sg_list: &big, ud: Some(ud), ..Default::default() }])
        .unwrap_err();
    assert!(e.message.contains("exceeds the path MTU"), "{}", e.message);
    drop(soft);
}

/// Two QPs share one SRQ; the limit event fires when it runs low; a QP on an SRQ that enters
/// the error state reports "last WQE reached".
#[test]
fn srq_is_shared_and_reports_its_limit() {
    let soft = Soft::loopback();
    let c0 = soft.open("softverbs0").unwrap();
    let c1 = soft.open("softverbs1").unwrap();
    assert_eq!(
        c1.get_async_event(Some(WAIT)).unwrap(),
        AsyncEvent { event_type: AsyncEventType::PortActive, element: AsyncElement::Port(1) }
    );
    let pd = c1.alloc_pd().unwrap();
    let mr = pd.reg_mr(1 << 16, AccessFlags::LOCAL_WRITE).unwrap();
    let srq = pd.create_srq(&SrqInitAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    assert_eq!(srq.query().unwrap(), SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 });
    let cq = c1.create_cq(32, None, 0).unwrap();
    let mk = |srq: &SharedReceiveQueue| {
        pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: Some(srq.clone()),
            cap: cap(),
            sq_sig_all: false,
        })
        .unwrap()
    };
    let (r1, r2) = (mk(&srq), mk(&srq));
    let s1 = Endpoint::new(&c0, QpType::Rc, cap(), 32, 4096).unwrap();
    let s2 = Endpoint::new(&c0, QpType::Rc, cap(), 32, 4096).unwrap();
    let port1 = conn::PortAddress::of(&c1, None).unwrap();
    for (s, r) in [(&s1, &r1), (&s2, &r2)] {
        let rinfo = port1.qp_info(r, 9);
        conn::connect(&s.qp, 5, &rinfo, &ConnOpts::default()).unwrap();
        conn::connect(r, 9, &s.info(5).unwrap(), &ConnOpts::default()).unwrap();
    }
    let e = r1.post_recv(&[RecvWr { wr_id: 1, sg_list: &[mr.sge(0, 8)] }]).unwrap_err();
    assert!(e.message.contains("use ibv_post_srq_recv"), "{}", e.message);
    let wrs: Vec<_> = (0..4u64).map(|i| [mr.sge(i as usize * 64, 64)]).collect();
    let recvs: Vec<_> = wrs
        .iter()
        .enumerate()
        .map(|(i, sg)| RecvWr { wr_id: 100 + i as u64, sg_list: sg })
        .collect();
    srq.post_recv(&recvs).unwrap();
    srq.modify(&SrqAttr { srq_limit: 3, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    let (m1, m2) = (*b"from qp one", *b"from qp two");
    s1.qp
        .post_send(&[SendWr {
            wr_id: 1,
            inline_data: Some(&m1),
            send_flags: SendFlags::INLINE,
            ..Default::default()
        }])
        .unwrap();
    s2.qp
        .post_send(&[SendWr {
            wr_id: 2,
            inline_data: Some(&m2),
            send_flags: SendFlags::INLINE,
            ..Default::default()
        }])
        .unwrap();
    let wcs = cq.poll_n(2, WAIT).unwrap();
    let mut got: Vec<_> = wcs.iter().map(|w| (w.qp_num, w.wr_id, w.byte_len)).collect();
    got.sort();
    let mut want = [(r1.qp_num(), 100, 11), (r2.qp_num(), 101, 11)];
    want.sort_by_key(|w| w.0);
    // Which QP consumed which WQE depends on arrival order; the set of WQEs is the first two.
    let ids: std::collections::BTreeSet<u64> = got.iter().map(|g| g.1).collect();
    assert_eq!(ids, [100, 101].into_iter().collect());
    assert_eq!(
        got.iter().map(|g| (g.0, g.2)).collect::<Vec<_>>(),
        want.iter().map(|w| (w.0, w.2)).collect::<Vec<_>>()
    );
    let landed: Vec<Vec<u8>> =
        wcs.iter().map(|w| mr.read_vec((w.wr_id - 100) as usize * 64, 11).unwrap()).collect();
    assert!(landed.contains(&m1.to_vec()) && landed.contains(&m2.to_vec()));
    // 4 -> 2 WQEs: below the limit of 3, the event fires once and disarms.
    let ev = c1.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(
        ev,
        AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(srq.id())
        }
    );
    assert_eq!(srq.query().unwrap().srq_limit, 0, "the limit disarms after firing");
    assert_eq!(srq.clone().destroy().unwrap_err().errno, Errno::Busy);
    r1.modify(&QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE).unwrap();
    let ev = c1.get_async_event(Some(WAIT)).unwrap();
    assert_eq!(
        ev,
        AsyncEvent {
            event_type: AsyncEventType::QpLastWqeReached,
            element: AsyncElement::Qp(r1.qp_num())
        }
    );
    let e =
        srq.modify(&SrqAttr { max_wr: 1, ..Default::default() }, SrqAttrMask::MAX_WR).unwrap_err();
    assert!(e.message.contains("hold the 2 queued"), "{}", e.message);
}

#[test]
fn device_limits_are_enforced_and_cqs_resize() {
    let soft = Soft::loopback();
    soft.configure(|c| {
        c.limits.max_qp = 2;
        c.limits.max_cq = 2;
        c.limits.max_mr = 1;
        c.limits.max_srq = 1;
    });
    let ctx = soft.open("softverbs0").unwrap();
    let attr = ctx.query_device().unwrap();
    assert_eq!((attr.max_qp, attr.max_cq, attr.max_mr, attr.max_srq), (2, 2, 1, 1));
    let pd = ctx.alloc_pd().unwrap();
    let _mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap_err().errno, Errno::NoMem);
    let cq = ctx.create_cq(4, None, 0).unwrap();
    let _cq2 = ctx.create_cq(4, None, 0).unwrap();
    let e = ctx.create_cq(4, None, 0).unwrap_err();
    assert_eq!(e.errno, Errno::NoMem);
    assert!(e.message.contains("max_cq 2"), "{}", e.message);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        srq: None,
        cap: cap(),
        sq_sig_all: false,
    };
    let _q1 = pd.create_qp(&init).unwrap();
    let _q2 = pd.create_qp(&init).unwrap();
    assert_eq!(pd.create_qp(&init).unwrap_err().errno, Errno::NoMem);
    let _s = pd.create_srq(&SrqInitAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    assert_eq!(
        pd.create_srq(&SrqInitAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap_err().errno,
        Errno::NoMem
    );
    let e = pd.create_srq(&SrqInitAttr { max_wr: 4, max_sge: 1, srq_limit: 9 }).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    cq.resize(16).unwrap();
    assert_eq!(cq.cqe(), 16);
    assert_eq!(cq.resize(0).unwrap_err().errno, Errno::Inval);
    let e = pd.create_ah(&AhAttr::default()).unwrap_err();
    assert!(e.message.contains("needs a GRH with a GID"), "{}", e.message);
}

/// Two ports of one process are two RoCE v2 ports with identities of their own, each GID table
/// exactly as rxe's for a netdev with one IPv4 address: index 0 the IPv6 link-local GID from
/// the MAC's EUI-64, index 1 the IPv4 GID, both RoCE v2, nothing else.
#[test]
fn two_ports_of_one_process_have_distinct_rxe_gid_tables() {
    let soft = Soft::loopback();
    let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    let table = |ctx: &Context| {
        let entries = ctx.query_gid_table().unwrap();
        let ip = entries[1].gid.to_ipv4().expect("index 1 is the port's IPv4 GID");
        (entries, ip)
    };
    let (t0, ip0) = table(&c0);
    let (t1, ip1) = table(&c1);
    assert_ne!(ip0, ip1, "each port has its own IPv4 address");
    for (t, ip) in [(&t0, ip0), (&t1, ip1)] {
        assert_eq!(ip[..2], [10, 0]);
        // MAC 02:00:a.b.c.d → EUI-64 00:00:a.b:ff:fe:c.d... with the U/L bit flipped.
        let eui = [0x00, 0x00, ip[0], 0xff, 0xfe, ip[1], ip[2], ip[3]];
        let mut ll = [0u8; 16];
        ll[..2].copy_from_slice(&[0xfe, 0x80]);
        ll[8..].copy_from_slice(&eui);
        let expect = vec![
            GidEntry {
                gid: Gid(ll),
                gid_index: 0,
                port_num: 1,
                gid_type: GidType::RoceV2,
                ndev_ifindex: 0,
            },
            GidEntry {
                gid: Gid::from_ipv4(ip),
                gid_index: 1,
                port_num: 1,
                gid_type: GidType::RoceV2,
                ndev_ifindex: 0,
            },
        ];
        assert_eq!(t, &expect);
    }
    assert_ne!(t0[0].gid, t1[0].gid, "the link-local GIDs differ too");
    for ctx in [&c0, &c1] {
        assert_eq!(ctx.query_gid(1, 0).unwrap(), ctx.query_gid_entry(1, 0).unwrap().gid);
        assert_eq!(ctx.query_port(1).unwrap().lid, 0);
    }
}

/// A LID-only address vector on a RoCE port is refused with EINVAL naming why, in
/// `ibv_modify_qp` as in `ibv_create_ah`; an IPv6 source GID is refused naming the index to
/// use instead.
#[test]
fn a_lid_only_address_vector_is_refused_on_a_roce_port() {
    let soft = Soft::loopback();
    let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    let a = Endpoint::new(&c0, QpType::Rc, cap(), 16, 4096).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap(), 16, 4096).unwrap();
    let opts = ConnOpts::default();
    conn::to_init(&a.qp, &opts).unwrap();
    let remote = b.info(0).unwrap();
    let rtr = |ah_attr: AhAttr| QpAttr {
        qp_state: QpState::Rtr,
        ah_attr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: remote.qpn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    let why = "port 1 is RoCE (Ethernet link layer): an address vector needs a GRH with a GID";
    let lid_only = AhAttr { dlid: 1, port_num: 1, ..Default::default() };
    let e = a.qp.modify(&rtr(lid_only), mask).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.starts_with("ibv_modify_qp: IBV_QP_AV: "), "{}", e.message);
    assert!(e.message.contains(why), "{}", e.message);
    assert_eq!(a.qp.query().unwrap().0.qp_state, QpState::Init, "the QP stays in INIT");
    let e = a.pd.create_ah(&lid_only).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains(why), "{}", e.message);
    // Both ends of a path speak one IP version: from the IPv6 link-local GID (index 0) to the
    // peer's IPv4 GID is refused, naming the index that reaches it.
    let v6 = AhAttr { sgid_index: 0, ..conn::av_to(remote.gid, &opts) };
    let e = a.qp.modify(&rtr(v6), mask).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("is an IPv4 GID but sgid_index 0 is the IPv6 GID fe80"), "{e}");
    assert!(e.message.contains("send from GID index 1"), "{}", e.message);
    // A UD address handle from the IPv6 GID to the peer's link-local GID is taken, as rxe
    // takes it (issue 30).
    let peer_ll = c1.query_gid(1, 0).unwrap();
    a.pd.create_ah(&AhAttr { dgid: peer_ll, ..v6 }).expect("an IPv6 UD address handle");
    // With the IPv4 GID the same QP connects.
    a.qp.modify(&rtr(conn::av_to(remote.gid, &opts)), mask).unwrap();
}

/// RoCE v2 over IPv6, as `-g 0` gives it on rxe: two QPs connected from their ports'
/// link-local GIDs (index 0) to each other's move a SEND and an RDMA WRITE.
#[test]
fn an_rc_connection_over_the_link_local_gids_moves_data() {
    let soft = Soft::loopback();
    let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    let a = Endpoint::new(&c0, QpType::Rc, cap(), 16, 4096).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap(), 16, 4096).unwrap();
    let (pa, pb) = (
        conn::PortAddress::of(&c0, Some(0)).unwrap(),
        conn::PortAddress::of(&c1, Some(0)).unwrap(),
    );
    assert_eq!(pa.gid.0[..2], [0xfe, 0x80], "index 0 is the link-local GID");
    let (oa, ob) =
        (pa.conn_opts(ConnOpts::default()).unwrap(), pb.conn_opts(ConnOpts::default()).unwrap());
    conn::connect(&a.qp, 1, &pb.qp_info(&b.qp, 2), &oa).unwrap();
    conn::connect(&b.qp, 2, &pa.qp_info(&a.qp, 1), &ob).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[b.mr.sge(0, 64)] }]).unwrap();
    a.mr.write(0, b"over IPv6").unwrap();
    let sig = SendFlags::SIGNALED;
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &[a.mr.sge(0, 9)],
        send_flags: sig,
        ..Default::default()
    }])
    .unwrap();
    let rdma = RdmaTarget { remote_addr: b.mr.addr() + 1024, rkey: b.mr.rkey() };
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &[a.mr.sge(0, 9)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: sig,
        rdma,
        ..Default::default()
    }])
    .unwrap();
    let wcs = a.cq.poll_n(2, Duration::from_secs(5)).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [(1, WcStatus::Success, WcOpcode::Send), (2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    let r = b.cq.poll_n(1, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len, r[0].src_qp),
        (7, WcStatus::Success, 9, a.qp.qp_num())
    );
    assert_eq!(b.mr.read_vec(0, 9).unwrap(), b"over IPv6");
    assert_eq!(b.mr.read_vec(1024, 9).unwrap(), b"over IPv6");
}
