//! The `hw` backend on a machine without RDMA (libibverbs answers ENOSYS, or finds no devices):
//! every entry point fails with `ENODEV` and a message saying why, and nothing panics. On a
//! machine with a device (a NIC, or Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`) the
//! same tests open it, query it and run an RC loopback through it instead.
#![cfg(feature = "rdma-sys")]

use std::time::Duration;

use verbs_api::*;

/// The reasons libibverbs gives for having nothing to list.
fn assert_no_devices_error(e: &Error) {
    assert_eq!(e.errno, Errno::NoDev, "{e}");
    assert!(e.message.starts_with("no RDMA devices:"), "{e}");
    assert!(
        e.message.contains("ibv_get_device_list failed") || e.message.contains("found no devices"),
        "the message should carry libibverbs' reason: {e}"
    );
}

#[test]
fn devices_fail_with_enodev_or_list_openable_devices() {
    let p = hw::provider();
    assert_eq!(p.name(), "hw");
    match p.devices() {
        Err(e) => {
            eprintln!("hw provider: {e}");
            assert_no_devices_error(&e);
            if e.message.contains("ENOSYS") {
                assert!(e.message.contains("the kernel has no RDMA support"), "{e}");
            }
        }
        Ok(devs) => {
            assert!(!devs.is_empty(), "an Ok list is never empty");
            for d in devs {
                assert_eq!(d.provider, "hw");
                let ctx = Context::from_ops(p.open(&d.name).expect("a listed device opens"));
                assert_eq!(ctx.device_name(), d.name);
                let attr = ctx.query_device().expect("ibv_query_device");
                assert!(attr.phys_port_cnt >= 1, "{attr:?}");
                let port = ctx.query_port(1).expect("ibv_query_port");
                assert!(port.gid_tbl_len >= 1 || port.link_layer == LinkLayer::InfiniBand);
                ctx.query_gid(1, 0).expect("ibv_query_gid(1, 0)");
            }
        }
    }
}

#[test]
fn opening_a_missing_device_is_enodev_not_a_panic() {
    let p = hw::provider();
    let have_mlx5_0 = p.devices().is_ok_and(|d| d.iter().any(|d| d.name == "mlx5_0"));
    match p.open("mlx5_0") {
        Err(e) => {
            assert!(!have_mlx5_0);
            assert_eq!(e.errno, Errno::NoDev, "{e}");
            match p.devices() {
                Err(_) => assert_no_devices_error(&e),
                Ok(_) => assert!(e.message.contains("no RDMA device named \"mlx5_0\""), "{e}"),
            }
        }
        Ok(ctx) => {
            assert!(have_mlx5_0);
            ctx.query_device().expect("ibv_query_device on mlx5_0");
        }
    }
    let e = p.open("").err().expect("no device has an empty name");
    assert_eq!(e.errno, Errno::NoDev, "{e}");
}

#[test]
fn the_registry_reports_why_there_are_no_devices() {
    register_provider(hw::provider());
    let hw_devices = hw::provider().devices();
    match device_list() {
        Err(e) => {
            eprintln!("device_list: {e}");
            assert!(hw_devices.is_err());
            assert_eq!(e.errno, Errno::NoDev, "{e}");
            assert!(e.message.contains("no RDMA devices"), "{e}");
            assert!(e.message.contains("hw: "), "the hw provider's reason is named: {e}");
        }
        Ok(list) => {
            let hw: Vec<&Device> = list.iter().filter(|d| d.provider() == "hw").collect();
            assert_eq!(hw.len(), hw_devices.as_ref().map_or(0, Vec::len));
            for d in hw {
                d.open().expect("a listed device opens").query_port(1).expect("ibv_query_port");
            }
        }
    }
    let none_at_all = hw_devices.is_err();
    let have_mlx5_0 = hw_devices.is_ok_and(|d| d.iter().any(|d| d.name == "mlx5_0"));
    match Context::open("mlx5_0") {
        Err(e) => {
            eprintln!("Context::open: {e}");
            assert!(!have_mlx5_0);
            assert_eq!(e.errno, Errno::NoDev, "{e}");
            assert!(e.message.contains("mlx5_0"), "{e}");
            if none_at_all {
                // The name selects the hw backend, whose own reason comes first.
                assert_no_devices_error(&e);
                assert!(e.message.contains("(looking for \"mlx5_0\")"), "{e}");
            }
        }
        Ok(ctx) => assert_eq!(ctx.device_name(), "mlx5_0"),
    }
}

/// The first device, or `None` on a machine without RDMA (where the tests above cover it). With
/// `SOFTVERBS_HW_DEVICE` set (CI names a soft device there) that device must be listed and
/// open: a missing one fails the test rather than skipping it.
fn first_device() -> Option<Context> {
    let asked = std::env::var("SOFTVERBS_HW_DEVICE").ok();
    let devs = match (hw::provider().devices(), &asked) {
        (Ok(devs), _) => devs,
        (Err(e), Some(name)) => panic!("SOFTVERBS_HW_DEVICE={name}, but no device is listed: {e}"),
        (Err(_), None) => return None,
    };
    let name = asked.unwrap_or_else(|| devs[0].name.clone());
    Some(Context::from_ops(hw::provider().open(&name).expect("the device opens")))
}

/// The address of port 1 as seen by a QP on the same port: on RoCE a GID (the first
/// IPv4-mapped one, or `SOFTVERBS_HW_GID_INDEX`), on InfiniBand the LID.
fn loopback_av(ctx: &Context) -> AhAttr {
    let port = ctx.query_port(1).expect("ibv_query_port");
    if port.link_layer == LinkLayer::InfiniBand {
        return AhAttr { dlid: port.lid, port_num: 1, ..Default::default() };
    }
    let index = match std::env::var("SOFTVERBS_HW_GID_INDEX") {
        Ok(v) => v.parse().unwrap_or_else(|e| {
            panic!("SOFTVERBS_HW_GID_INDEX={v:?} is not a GID index (a number): {e}")
        }),
        Err(_) => (0..port.gid_tbl_len)
            .find(|&i| ctx.query_gid(1, i).is_ok_and(|g| g.to_ipv4().is_some()))
            .unwrap_or(0),
    };
    let dgid = ctx.query_gid(1, index).expect("ibv_query_gid");
    AhAttr {
        is_global: true,
        port_num: 1,
        dgid,
        sgid_index: u8::try_from(index).expect("GID index fits u8"),
        hop_limit: 64,
        ..Default::default()
    }
}

/// An RC QP's attributes: both queues on `cq`, 8 WRs of one SGE each way, `inline` bytes of
/// inline data.
fn rc_init(cq: &CompletionQueue, inline: u32) -> QpInitAttr {
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        srq: None,
        cap,
        sq_sig_all: false,
    }
}

fn connect(qp: &QueuePair, remote_qpn: u32, av: AhAttr, mtu: Mtu) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: access,
        ..Default::default()
    };
    let m =
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS;
    qp.modify(&init, m).expect("RESET -> INIT");
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: av,
        path_mtu: mtu,
        dest_qp_num: remote_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    qp.modify(&rtr, m).expect("INIT -> RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, m).expect("RTR -> RTS");
    assert_eq!(qp.state().expect("ibv_query_qp"), QpState::Rts);
}

/// Only on a machine with a device: RC SEND and RDMA WRITE between two QPs on port 1, a
/// completion event, and the EBUSY rules of destruction.
#[test]
fn rc_loopback_on_a_real_device() {
    let Some(ctx) = first_device() else {
        return;
    };
    let mtu = ctx.query_port(1).expect("ibv_query_port").active_mtu.min(Mtu::Mtu1024);
    let av = loopback_av(&ctx);
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr_a = pd.reg_mr(4096, access).expect("ibv_reg_mr");
    let mr_b = pd.reg_mr(4096, access).expect("ibv_reg_mr");
    assert_eq!(mr_a.read_vec(0, 16).unwrap(), vec![0; 16], "owned MR memory starts zeroed");
    assert_eq!(mr_a.write(4090, &[0; 7]).unwrap_err().errno, Errno::Inval);

    let channel = ctx.create_comp_channel().expect("ibv_create_comp_channel");
    let cq_a = ctx.create_cq(16, None, 0).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, Some(&channel), 0).expect("ibv_create_cq");
    let qp_a = pd.create_qp(&rc_init(&cq_a, 16)).expect("ibv_create_qp");
    let qp_b = pd.create_qp(&rc_init(&cq_b, 16)).expect("ibv_create_qp");
    connect(&qp_a, qp_b.qp_num(), av, mtu);
    connect(&qp_b, qp_a.qp_num(), av, mtu);

    cq_b.req_notify(false).expect("ibv_req_notify_cq");
    let e = channel.get_cq_event(Some(Duration::from_millis(20))).unwrap_err();
    assert_eq!(e.errno, Errno::TimedOut, "{e}");

    mr_a.write(0, b"hello over a real NIC").unwrap();
    qp_b.post_recv(&[RecvWr { wr_id: 7, sg_list: &[mr_b.sge(0, 64)] }]).expect("ibv_post_recv");
    let send = SendWr {
        wr_id: 1,
        sg_list: &[mr_a.sge(0, 21)],
        opcode: WrOpcode::SendWithImm,
        send_flags: SendFlags::SIGNALED,
        imm_data: 0x1234_5678,
        ..Default::default()
    };
    qp_a.post_send(&[send]).expect("ibv_post_send");
    let wc = cq_a.poll_n(1, Duration::from_secs(5)).expect("send completion");
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (1, WcStatus::Success, WcOpcode::Send));
    let ev = channel.get_cq_event(Some(Duration::from_secs(5))).expect("a completion event");
    assert_eq!(ev, cq_b);
    channel.ack_cq_events(&ev, 1);
    let wc = cq_b.poll_n(1, Duration::from_secs(5)).expect("receive completion");
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (7, WcStatus::Success, WcOpcode::Recv));
    assert_eq!(wc[0].byte_len, 21);
    assert_eq!(wc[0].imm_data, 0x1234_5678);
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc[0].src_qp, qp_a.qp_num());
    assert_eq!(mr_b.read_vec(0, 21).unwrap(), b"hello over a real NIC");

    let write = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        inline_data: Some(&b"inline!"[..]),
        rdma: RdmaTarget { remote_addr: mr_b.addr() + 100, rkey: mr_b.rkey() },
        ..Default::default()
    };
    if qp_a.query().expect("ibv_query_qp").1.max_inline_data >= 7 {
        qp_a.post_send(&[write]).expect("ibv_post_send");
        let wc = cq_a.poll_n(1, Duration::from_secs(5)).expect("write completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
        assert_eq!(mr_b.read_vec(100, 7).unwrap(), b"inline!");
    }

    // Destruction follows the kernel's rules: EBUSY while in use, then fine.
    assert_eq!(pd.clone().dealloc().unwrap_err().errno, Errno::Busy);
    assert_eq!(cq_a.clone().destroy().unwrap_err().errno, Errno::Busy);
    qp_a.destroy().expect("ibv_destroy_qp");
    qp_b.destroy().expect("ibv_destroy_qp");
    cq_a.destroy().expect("ibv_destroy_cq");
    mr_a.dereg().expect("ibv_dereg_mr");
    drop((mr_b, cq_b, channel));
    pd.dealloc().expect("ibv_dealloc_pd");
}

/// Only on a machine with a device: memory windows of both types are allocated and
/// deallocated (`ibv_alloc_mw`, `ibv_dealloc_mw`), and an `IBV_WR_BIND_MW` the hw backend
/// cannot turn into pointers (a window rkey or an MR lkey not of the QP's PD, one window bound
/// twice in one post) is refused with `EINVAL` before the provider sees it.
#[test]
fn memory_windows_and_the_binds_the_backend_refuses() {
    let Some(ctx) = first_device() else {
        return;
    };
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let mr = pd.reg_mr(8192, AccessFlags::all()).expect("ibv_reg_mr");
    let cq = ctx.create_cq(8, None, 0).expect("ibv_create_cq");
    let qp = pd.create_qp(&rc_init(&cq, 0)).expect("ibv_create_qp");
    let mw1 = pd.alloc_mw(MwType::Type1).expect("ibv_alloc_mw type 1");
    let mw2 = pd.alloc_mw(MwType::Type2).expect("ibv_alloc_mw type 2");
    assert_eq!((mw1.mw_type(), mw2.mw_type()), (MwType::Type1, MwType::Type2));
    assert_ne!(mw1.rkey() & !0xff, mw2.rkey() & !0xff);
    let info = MwBindInfo {
        mr: Some(&mr),
        addr: mr.addr(),
        length: 64,
        access: AccessFlags::REMOTE_WRITE,
        zero_based: false,
    };
    let post = |bind: MwBind| {
        let wr = SendWr { wr_id: 1, opcode: WrOpcode::BindMw, bind_mw: bind, ..Default::default() };
        qp.post_send(&[wr]).unwrap_err()
    };
    let good = MwBind {
        mw_rkey: mw2.rkey(),
        new_rkey: inc_rkey(mw2.rkey()),
        mr_lkey: mr.lkey(),
        addr: mr.addr(),
        length: 64,
        access: AccessFlags::REMOTE_WRITE,
        zero_based: false,
    };
    let e = post(MwBind { mw_rkey: mw2.rkey() ^ 0x7fff_ff00, ..good });
    assert_eq!(e.errno, Errno::Inval, "{e}");
    assert!(e.message.contains("is not a memory window of this protection domain"), "{e}");
    let e = post(MwBind { mr_lkey: mr.lkey() ^ 0x7fff_ff00, ..good });
    assert_eq!(e.errno, Errno::Inval, "{e}");
    assert!(e.message.contains("is not a memory region of this protection domain"), "{e}");
    let e = post(MwBind { new_rkey: good.new_rkey ^ 0x100, ..good });
    assert_eq!(e.errno, Errno::Inval, "{e}");
    let wr = SendWr { wr_id: 1, opcode: WrOpcode::BindMw, bind_mw: good, ..Default::default() };
    let e = qp.post_send(&[wr.clone(), wr]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    assert!(e.message.contains("bound twice in one post"), "{e}");
    // A type 1 bind of a type 2 window, as libibverbs' ibv_bind_mw refuses it.
    let e = mw2.bind(&qp, &info, 2, SendFlags::SIGNALED).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    let again = mw1.clone();
    mw1.dealloc().expect("ibv_dealloc_mw");
    let e = again.dealloc().unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    assert!(e.message.contains("already destroyed"), "{e}");
    drop(mw2);
    drop(qp);
    drop(mr);
    drop(cq);
}
