//! The sim backend through the verbs API: device names, the `sim` provider, and one program
//! that runs unchanged on `soft` and `sim` (only the way time passes differs).

use std::sync::Arc;
use std::time::Duration;

use nic_model::soft::Soft;
use softverbs_sim::conn::{connect, ConnOpts, Endpoint};
use softverbs_sim::world::{LinkParams, SimWorld};
use verbs_api::{
    CompletionQueue, Context, QpCap, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
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
    let ea = Endpoint::new(a, QpType::Rc, CAP, 64, 8192).unwrap();
    let eb = Endpoint::new(b, QpType::Rc, CAP, 64, 8192).unwrap();
    let opts = ConnOpts::default();
    connect(&ea.qp, 1, &eb.info(2).unwrap(), &opts).unwrap();
    connect(&eb.qp, 2, &ea.info(1).unwrap(), &opts).unwrap();
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
        assert_eq!(outcome, softverbs_sim::world::RunOutcome::Satisfied);
        got
    });
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
    assert_eq!(ctx.query_port(1).unwrap().lid, 3);
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
