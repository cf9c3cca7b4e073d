//! The sim backend through the verbs API: device names, the `sim` provider, one program that
//! runs unchanged on `soft` and `sim` (only the way time passes differs), and a stale
//! connection's retransmission among three nodes.

use std::sync::Arc;
use std::time::Duration;

use nic_model::soft::Soft;
use softverbs_sim::conn::{connect, ConnOpts, Endpoint, PortAddress};
use softverbs_sim::world::trace::TraceKind;
use softverbs_sim::world::{LinkParams, RunOutcome, SimWorld, World};
use verbs_api::{
    CompletionQueue, Context, QpCap, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcFlags,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

const CAP: QpCap = QpCap {
    max_send_wr: 16,
    max_recv_wr: 16,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 64,
};

/// The program: connect, SEND a greeting, RDMA WRITE a block, READ it back. `wait(cq, n)` is
/// how it waits for `n` completions (real time on soft, virtual time in the simulator).
fn program(
    a: &Context,
    b: &Context,
    wait: &dyn Fn(&CompletionQueue, usize) -> Vec<WorkCompletion>,
) {
    program_from(a, b, None, wait)
}

/// [`program`] with both sides sending from GID index `gid_index` (by default the first IPv4
/// GID; 0 is the link-local one: RoCE v2 over IPv6).
fn program_from(
    a: &Context,
    b: &Context,
    gid_index: Option<u32>,
    wait: &dyn Fn(&CompletionQueue, usize) -> Vec<WorkCompletion>,
) {
    let ea = Endpoint::new(a, QpType::Rc, CAP, 64, 8192).unwrap();
    let eb = Endpoint::new(b, QpType::Rc, CAP, 64, 8192).unwrap();
    let (pa, pb) = (PortAddress::of(a, gid_index).unwrap(), PortAddress::of(b, gid_index).unwrap());
    let (oa, ob) =
        (pa.conn_opts(ConnOpts::default()).unwrap(), pb.conn_opts(ConnOpts::default()).unwrap());
    connect(&ea.qp, 1, &pb.qp_info(&eb.qp, 2), &oa).unwrap();
    connect(&eb.qp, 2, &pa.qp_info(&ea.qp, 1), &ob).unwrap();
    eb.qp.post_recv(&[RecvWr { wr_id: 9, sg_list: &[eb.mr.sge(0, 64)] }]).unwrap();
    ea.mr.write(0, b"hi there").unwrap();
    ea.mr.write(1024, &[0xab; 1000]).unwrap();
    let s0 = [ea.mr.sge(0, 8)];
    let s1 = [ea.mr.sge(1024, 1000)];
    let s2 = [ea.mr.sge(4096, 1000)];
    let remote = RdmaTarget { remote_addr: eb.mr.addr() + 2048, rkey: eb.mr.rkey() };
    let f = SendFlags::SIGNALED;
    ea.qp
        .post_send(&[
            SendWr { wr_id: 1, sg_list: &s0, send_flags: f, ..Default::default() },
            SendWr {
                wr_id: 2,
                sg_list: &s1,
                opcode: WrOpcode::RdmaWrite,
                send_flags: f,
                rdma: remote,
                ..Default::default()
            },
            SendWr {
                wr_id: 3,
                sg_list: &s2,
                opcode: WrOpcode::RdmaRead,
                send_flags: f,
                rdma: remote,
                ..Default::default()
            },
        ])
        .unwrap();
    let wa = wait(&ea.cq, 3);
    let wb = wait(&eb.cq, 1);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(wa[2].opcode, WcOpcode::RdmaRead);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (9, 8));
    assert_eq!(eb.mr.read_vec(0, 8).unwrap(), b"hi there");
    assert_eq!(ea.mr.read_vec(4096, 1000).unwrap(), vec![0xab; 1000]);
}

#[test]
fn the_same_program_runs_on_soft_and_sim() {
    let soft = Soft::loopback();
    let (a, b) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    program(&a, &b, &|cq, n| cq.poll_n(n, Duration::from_secs(10)).unwrap());

    let world = SimWorld::mesh(1, 2, LinkParams::default());
    let (a, b) = (world.context(0).unwrap(), world.context(1).unwrap());
    assert_eq!(a.device_name(), "sim:node0");
    let w2 = world.clone();
    program(&a, &b, &move |cq, n| {
        let mut got = Vec::new();
        let mut buf = [WorkCompletion::default(); 8];
        let t0 = w2.now_ns();
        let outcome = w2.run_until_pred(
            || {
                let k = cq.poll(&mut buf).unwrap();
                got.extend_from_slice(&buf[..k]);
                got.len() >= n
            },
            t0 + 1_000_000_000,
        );
        assert_eq!(outcome, RunOutcome::Satisfied);
        got
    });
}

/// RoCE v2 over IPv6 in the simulator: two nodes behind a switch, each QP sending from its
/// port's link-local GID. The switch forwards the IPv6 datagrams by the link-local address
/// they carry, and the capture holds IPv6 datagrams only.
#[test]
fn the_program_runs_over_ipv6_through_a_simulated_switch() {
    let mut w = World::new(7);
    w.trace_mut().set_keep(true);
    let (a, b) = (w.add_node("a"), w.add_node("b"));
    let sw = w.add_switch("sw");
    w.add_duplex(a, sw, LinkParams::default());
    w.add_duplex(sw, b, LinkParams::default());
    let world = SimWorld::new(w);
    let (ca, cb) = (world.context(a).unwrap(), world.context(b).unwrap());
    let w2 = world.clone();
    program_from(&ca, &cb, Some(0), &move |cq, n| {
        let mut got = Vec::new();
        let mut buf = [WorkCompletion::default(); 8];
        let t0 = w2.now_ns();
        let outcome = w2.run_until_pred(
            || {
                let k = cq.poll(&mut buf).unwrap();
                got.extend_from_slice(&buf[..k]);
                got.len() >= n
            },
            t0 + 1_000_000_000,
        );
        assert_eq!(outcome, RunOutcome::Satisfied);
        got
    });
    let w = world.lock();
    let forwarded = w.trace().records().iter().filter(|r| r.kind == TraceKind::Forward).count();
    // At least the SEND, the WRITE, the READ request and its response went through it.
    assert!(forwarded >= 4, "the switch forwarded the IPv6 datagrams: {forwarded}");
}

#[test]
fn the_sim_provider_lists_and_opens_devices() {
    let world = SimWorld::mesh(1, 3, LinkParams::default());
    verbs_api::register_provider(Arc::new(world.provider()));
    let names: Vec<String> = verbs_api::device_list()
        .unwrap()
        .iter()
        .filter(|d| d.provider() == "sim")
        .map(|d| d.name().to_string())
        .collect();
    assert_eq!(names, ["sim:node0", "sim:node1", "sim:node2"]);
    let ctx = Context::open("sim:node2").unwrap();
    // A RoCE port with LID 0; node 2 holds slot 3, so its IPv4 GID is ::ffff:10.0.0.3.
    assert_eq!(ctx.query_port(1).unwrap().lid, 0);
    assert_eq!(ctx.query_gid(1, 1).unwrap(), verbs_api::Gid::from_ipv4([10, 0, 0, 3]));
    assert!(world.open("sim:nobody").is_err());
}

#[test]
fn get_cq_event_waits_in_virtual_time() {
    let world = SimWorld::mesh(1, 2, LinkParams { latency_ns: 50_000, ..LinkParams::default() });
    let (a, b) = (world.context(0).unwrap(), world.context(1).unwrap());
    let ch = b.create_comp_channel().unwrap();
    let cq = b.create_cq(16, Some(&ch), 0).unwrap();
    let eb = {
        let pd = b.alloc_pd().unwrap();
        let qp = pd
            .create_qp(&verbs_api::QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                srq: None,
                cap: CAP,
                sq_sig_all: false,
            })
            .unwrap();
        let mr = pd.reg_mr(4096, verbs_api::AccessFlags::all()).unwrap();
        Endpoint { ctx: b.clone(), pd, cq: cq.clone(), qp, mr }
    };
    let ea = Endpoint::new(&a, QpType::Rc, CAP, 16, 4096).unwrap();
    let opts = ConnOpts::default();
    connect(&ea.qp, 1, &eb.info(2).unwrap(), &opts).unwrap();
    connect(&eb.qp, 2, &ea.info(1).unwrap(), &opts).unwrap();
    eb.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: &[eb.mr.sge(0, 64)] }]).unwrap();
    cq.req_notify(false).unwrap();
    assert!(ch.get_cq_event(Some(Duration::from_micros(10))).is_err(), "nothing yet");
    let s = [ea.mr.sge(0, 4)];
    ea.qp.post_send(&[SendWr { wr_id: 1, sg_list: &s, ..Default::default() }]).unwrap();
    let t0 = world.now_ns();
    let got = ch.get_cq_event(Some(Duration::from_millis(1))).unwrap();
    assert!(got == cq);
    assert!(world.now_ns() - t0 >= 50_000, "the wait took the link's latency in virtual time");
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 5);
}

/// Issue 17's stale retransmission in a world of three nodes. Node 0 still has a connection
/// to B's QP from before (it sends to B's QP number with the first PSN B will expect) and
/// posts a SEND while B's QP is not yet connected; B's QP is then connected to node 2, and
/// node 0's retransmission reaches it, in sequence, from an address that is not its peer's.
/// B must drop it (and count it), and node 2's first SEND, with that very PSN, must land in
/// B's first receive with every completion field right; node 0's SEND, answered by nobody,
/// fails with RETRY_EXC_ERR. Before B checked the source, the stale SEND filled B's first
/// receive (its completion naming node 2's QP as the sender, B's ACK going to node 2), and
/// node 2's SEND was then dropped as a duplicate.
#[test]
fn a_stale_retransmission_from_a_third_node_does_not_reach_a_new_connection() {
    const PSN: u32 = 0x1000;
    let world = SimWorld::mesh(17, 3, LinkParams::default());
    let ctx: Vec<Context> = (0..3).map(|i| world.context(i).unwrap()).collect();
    let [old, b, new] =
        [0, 1, 2].map(|i| Endpoint::new(&ctx[i], QpType::Rc, CAP, 64, 8192).unwrap());
    // ~1 ms of virtual time per try, 3 retries.
    let old_opts = ConnOpts { timeout: 8, retry_cnt: 3, ..ConnOpts::default() };
    connect(&old.qp, PSN, &b.info(PSN).unwrap(), &old_opts).unwrap();
    old.mr.write(0, b"stale: from a connection B no longer has").unwrap();
    let stale_sge = [old.mr.sge(0, 40)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &stale_sge,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    old.qp.post_send(&[wr]).unwrap();
    // The first transmission finds B's QP in RESET and is dropped.
    world.run_for(100_000);
    assert_eq!(world.lock().nic(1).unwrap().stats().rx_no_qp, 1);

    let opts = ConnOpts::default();
    connect(&b.qp, PSN, &new.info(PSN).unwrap(), &opts).unwrap();
    connect(&new.qp, PSN, &b.info(PSN).unwrap(), &opts).unwrap();
    for (id, off) in [(10, 0), (11, 1024)] {
        b.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &[b.mr.sge(off, 1024)] }]).unwrap();
    }
    // Node 0's retransmissions (3 retries) all arrive while B's QP is connected to node 2.
    let mut old_wc = [WorkCompletion::default(); 2];
    let t0 = world.now_ns();
    assert_eq!(
        world.run_until_pred(|| old.cq.poll(&mut old_wc[..1]).unwrap() == 1, t0 + 1_000_000_000),
        RunOutcome::Satisfied,
        "node 0's SEND never completed"
    );
    assert_eq!((old_wc[0].wr_id, old_wc[0].status), (1, WcStatus::RetryExcErr), "{:?}", old_wc[0]);

    let msg: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    new.mr.write(0, &msg).unwrap();
    let sge = [new.mr.sge(0, 300)];
    let wr = SendWr {
        wr_id: 2,
        sg_list: &sge,
        opcode: WrOpcode::SendWithImm,
        imm_data: 0x0102_0304,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    new.qp.post_send(&[wr]).unwrap();
    let mut got = Vec::new();
    let mut buf = [WorkCompletion::default(); 4];
    let t0 = world.now_ns();
    let outcome = world.run_until_pred(
        || {
            let k = b.cq.poll(&mut buf).unwrap();
            got.extend_from_slice(&buf[..k]);
            !got.is_empty()
        },
        t0 + 100_000_000,
    );
    assert_eq!(outcome, RunOutcome::Satisfied, "node 2's SEND never arrived");
    // Anything else that would arrive (there must be nothing) has time to.
    world.run_for(1_000_000);
    let k = b.cq.poll(&mut buf).unwrap();
    got.extend_from_slice(&buf[..k]);
    assert_eq!(
        got,
        [WorkCompletion {
            wr_id: 10,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 300,
            imm_data: 0x0102_0304,
            qp_num: b.qp.qp_num(),
            src_qp: new.qp.qp_num(),
            wc_flags: WcFlags::WITH_IMM,
            // A RoCE completion names no source LID: the sender is its src_qp alone.
            slid: 0,
            ..WorkCompletion::default()
        }]
    );
    assert_eq!(b.mr.read_vec(0, 300).unwrap(), msg);
    let w = new.cq.poll_n(1, Duration::ZERO).unwrap();
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    let stats = world.lock().nic(1).unwrap().stats().clone();
    assert_eq!(stats.rx_duplicates, 0, "node 2's SEND was taken for a duplicate");
    assert_eq!(
        stats.rx_wrong_source, 3,
        "node 0's 3 retries all reach B's QP once it is connected"
    );
}

/// Memory keys in the simulator come from its seed (issue 29, item 10): a run with the same
/// seed has the same keys, so it reproduces; another seed, or another node, has others, as rxe
/// draws a key byte per registration and devices' indices differ.
#[test]
fn keys_come_from_the_seed() {
    use verbs_api::AccessFlags;
    let keys = |seed: u64| -> Vec<u32> {
        let world = SimWorld::mesh(seed, 2, LinkParams::default());
        let mut keys = Vec::new();
        for node in 0..2 {
            let ctx = world.context(node).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            for _ in 0..3 {
                let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
                assert_eq!(mr.lkey(), mr.rkey());
                keys.push(mr.rkey());
            }
        }
        keys
    };
    let run = keys(11);
    assert_eq!(run, keys(11), "the same seed, the same keys");
    assert_ne!(run[0], run[3], "two nodes' first MRs: {run:x?}");
    assert_ne!(run[0] >> 8, run[3] >> 8, "two nodes' indices: {run:x?}");
    assert_ne!(run, keys(12), "another seed, other keys");
}
