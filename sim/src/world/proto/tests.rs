//! What a protocol on the simulator relies on: the run loop's order and fields, failed
//! completions apart, timers at their exact virtual time, the outcome of a run, and a server
//! with several QPs on one CQ.

use verbs_api::{
    QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

use super::*;
use crate::world::{connect_rc, LinkChange, LinkParams, RunOutcome, World};

const CAP: QpCap = QpCap {
    max_send_wr: 16,
    max_recv_wr: 16,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

fn send(e: &Endpoint, wr_id: u64, len: u32, imm: Option<u32>) {
    let sge = [e.mr.sge(0, len)];
    let wr = SendWr {
        wr_id,
        sg_list: &sge,
        opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
        send_flags: SendFlags::SIGNALED,
        imm_data: imm.unwrap_or(0),
        ..Default::default()
    };
    e.qp.post_send(&[wr]).unwrap();
}

fn recv(e: &Endpoint, wr_id: u64) {
    let sge = [e.mr.sge(0, 256)];
    e.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).unwrap();
}

fn next(run: &mut RunLoop) -> Next {
    run.next(u64::MAX).unwrap()
}

#[test]
fn run_loop_returns_completions_of_several_cqs_in_virtual_time_order_with_every_field() {
    // node0 sends to node1 and, 50 µs of virtual time later, to node2.
    let world = SimWorld::mesh(1, 3, LinkParams::default());
    let opts = ConnOpts::default();
    let (a1, b1) = connect_rc(&world, 0, 1, CAP, 64, 4096, &opts, (10, 20)).unwrap();
    let (a2, b2) = connect_rc(&world, 0, 2, CAP, 64, 4096, &opts, (30, 40)).unwrap();
    recv(&b1, 71);
    recv(&b2, 72);
    let mut run = RunLoop::new(&world);
    // The later receiver's CQ first: order must come from time, not from the CQs' indices.
    let (q_b2, q_a2, q_b1, q_a1) =
        (run.add_cq(&b2.cq), run.add_cq(&a2.cq), run.add_cq(&b1.cq), run.add_cq(&a1.cq));
    let t0 = run.now_ns();
    send(&a1, 1, 100, Some(0xfeed));
    let wake = run.set_timer_after(50_000);
    let mut got = Vec::new();
    loop {
        match next(&mut run) {
            Next::Completion(c) => got.push(c),
            Next::Timer(t) if t == wake => {
                assert_eq!(run.now_ns(), t0 + 50_000);
                send(&a2, 2, 200, None);
            }
            Next::Idle => break,
            other => panic!("{other:?}"),
        }
    }
    let order: Vec<(CqIndex, u64)> = got.iter().map(|c| (c.cq, c.wc.wr_id)).collect();
    assert_eq!(order, [(q_b1, 71), (q_a1, 1), (q_b2, 72), (q_a2, 2)], "{got:#?}");
    assert!(got.windows(2).all(|p| p[0].at_ns < p[1].at_ns), "{got:#?}");
    assert!(got[0].at_ns > t0 && got[2].at_ns > t0 + 50_000, "{got:#?}");
    let slid = |e: &Endpoint| e.ctx.query_port(1).unwrap().lid;
    let recv_wc =
        |wr_id, byte_len, imm_data, flags, qp: &Endpoint, src: &Endpoint| WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len,
            imm_data,
            qp_num: qp.qp.qp_num(),
            src_qp: src.qp.qp_num(),
            wc_flags: flags,
            slid: slid(src),
            ..got[0].wc
        };
    assert_eq!(got[0].wc, recv_wc(71, 100, 0xfeed, WcFlags::WITH_IMM, &b1, &a1));
    assert_eq!(got[2].wc, recv_wc(72, 200, 0, WcFlags::empty(), &b2, &a2));
    assert_eq!((got[0].wc.pkey_index, got[0].wc.sl, got[0].wc.vendor_err), (0, 0, 0));
    let send_wc = |wr_id, byte_len, qp: &Endpoint| WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len,
        qp_num: qp.qp.qp_num(),
        ..WorkCompletion::default()
    };
    assert_eq!(got[1].wc, send_wc(1, 100, &a1));
    assert_eq!(got[3].wc, send_wc(2, 200, &a2));
}

#[test]
fn a_failed_completion_comes_out_as_failed() {
    let world = SimWorld::mesh(2, 2, LinkParams::default());
    let (a, b) = connect_rc(&world, 0, 1, CAP, 64, 4096, &ConnOpts::default(), (1, 2)).unwrap();
    let sge = [a.mr.sge(0, 8)];
    let wr = SendWr {
        wr_id: 5,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() ^ 0x5a5a },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    let mut run = RunLoop::new(&world);
    let q = run.add_cq(&a.cq);
    match next(&mut run) {
        Next::Failed(c) => {
            assert_eq!(c.cq, q);
            assert_eq!((c.wc.wr_id, c.wc.status), (5, WcStatus::RemAccessErr), "{c:?}");
            assert_eq!(c.wc.qp_num, a.qp.qp_num());
        }
        other => panic!("want the failed WRITE, got {other:?}"),
    }
}

#[test]
fn a_timer_fires_at_exactly_its_virtual_time_and_not_after_cancel() {
    let world = SimWorld::mesh(3, 2, LinkParams::default());
    let mut run = RunLoop::new(&world);
    let t0 = run.now_ns();
    let late = run.set_timer_at(t0 + 3_000);
    let first = run.set_timer_at(t0 + 1_234);
    let same = run.set_timer_at(t0 + 1_234);
    let cancelled = run.set_timer_at(t0 + 2_000);
    assert!(run.cancel_timer(cancelled));
    assert!(!run.cancel_timer(cancelled), "a cancelled timer cannot be cancelled twice");
    assert_eq!(next(&mut run), Next::Timer(first));
    assert_eq!(run.now_ns(), t0 + 1_234);
    assert_eq!(next(&mut run), Next::Timer(same), "same time: the order they were set");
    assert_eq!(run.now_ns(), t0 + 1_234);
    // The deadline before the next timer: it stops there, and the timer is still due.
    assert_eq!(run.next(t0 + 2_500).unwrap(), Next::Deadline);
    assert_eq!(run.now_ns(), t0 + 2_500);
    assert_eq!(run.timer_due(late), Some(t0 + 3_000));
    assert_eq!(next(&mut run), Next::Timer(late));
    assert_eq!(run.now_ns(), t0 + 3_000);
    assert_eq!(next(&mut run), Next::Idle, "the cancelled timer never fires");
    assert_eq!(run.now_ns(), t0 + 3_000);
    assert!(!run.cancel_timer(late), "a fired timer is gone");
}

#[test]
fn a_timer_fires_between_the_events_around_its_time() {
    let world = SimWorld::mesh(4, 2, LinkParams::default());
    let (a, b) = connect_rc(&world, 0, 1, CAP, 64, 4096, &ConnOpts::default(), (1, 2)).unwrap();
    recv(&b, 9);
    let mut run = RunLoop::new(&world);
    run.add_cq(&b.cq);
    let t0 = run.now_ns();
    send(&a, 1, 8, None);
    // Far before the SEND can arrive (a link's latency is microseconds).
    let early = run.set_timer_at(t0 + 1);
    assert_eq!(next(&mut run), Next::Timer(early));
    assert_eq!(run.now_ns(), t0 + 1);
    assert!(matches!(next(&mut run), Next::Completion(c) if c.wc.wr_id == 9 && c.at_ns > t0 + 1));
}

#[test]
fn run_until_pred_tells_satisfied_idle_and_deadline_apart() {
    let mut w = World::new(5);
    let (a, b) = (w.add_node("a"), w.add_node("b"));
    let (l, _) = w.add_duplex(a, b, LinkParams::default());
    let t0 = w.now_ns();
    assert_eq!(w.run_until_pred(|_| false, u64::MAX), RunOutcome::Idle);
    w.schedule(t0 + 10_000, l, LinkChange::Partition);
    assert_eq!(w.run_until_pred(|_| false, t0 + 1_000), RunOutcome::Deadline);
    assert_eq!(w.pending_events(), 1);
    assert_eq!(w.run_until_pred(|w| w.now_ns() >= t0 + 10_000, u64::MAX), RunOutcome::Satisfied);
    let world = SimWorld::new(w);
    assert_eq!(world.run_until_pred(|| false, u64::MAX), RunOutcome::Idle);
    world.lock().schedule(t0 + 20_000, l, LinkChange::Heal);
    assert_eq!(world.run_until_pred(|| false, t0 + 15_000), RunOutcome::Deadline);
    assert_eq!(world.run_until_pred(|| true, t0 + 15_000), RunOutcome::Satisfied);
    assert!(RunOutcome::Satisfied.is_satisfied() && !RunOutcome::Idle.is_satisfied());
}

#[test]
fn a_server_with_n_qps_on_one_cq_connected_in_one_call_talks_to_n_clients() {
    const N: usize = 4;
    let world = SimWorld::mesh(6, 3, LinkParams::default());
    // Two clients on each of nodes 1 and 2.
    let nodes = [1, 2, 1, 2];
    let (server, clients) =
        connect_rc_server(&world, 0, &nodes, CAP, 64, 4096, &ConnOpts::default()).unwrap();
    assert_eq!((server.qps.len(), clients.len()), (N, N));
    let mut run = RunLoop::new(&world);
    let sq = run.add_cq(&server.cq);
    for (i, c) in clients.iter().enumerate() {
        let sge = [server.mr.sge(i * 64, 64)];
        server.qps[i].post_recv(&[RecvWr { wr_id: i as u64, sg_list: &sge }]).unwrap();
        let reply = [c.mr.sge(1024, 64)];
        c.qp.post_recv(&[RecvWr { wr_id: 100 + i as u64, sg_list: &reply }]).unwrap();
        run.add_cq(&c.cq);
        c.mr.write(0, format!("hello from {i}").as_bytes()).unwrap();
        send(c, i as u64, 12, None);
    }
    let (mut replies, mut asked) = (vec![None; N], 0);
    while replies.iter().any(Option::is_none) {
        let c = match next(&mut run) {
            Next::Completion(c) => c,
            other => panic!("{other:?} before every reply came"),
        };
        match (c.cq == sq, c.wc.opcode) {
            (true, WcOpcode::Recv) => {
                let i = server.qp_index(c.wc.qp_num).expect("one of the server's QPs");
                assert_eq!(c.wc.wr_id, i as u64, "the receive came on client {i}'s QP");
                assert_eq!(c.wc.src_qp, clients[i].qp.qp_num());
                let got = server.mr.read_vec(i * 64, 12).unwrap();
                assert_eq!(got, format!("hello from {i}").as_bytes());
                server.mr.write(2048 + i * 64, format!("hi {i}").as_bytes()).unwrap();
                let sge = [server.mr.sge(2048 + i * 64, 4)];
                let wr = SendWr { wr_id: 50 + i as u64, sg_list: &sge, ..Default::default() };
                server.qps[i].post_send(&[wr]).unwrap();
                asked += 1;
            }
            (false, WcOpcode::Recv) => {
                let i = (c.wc.wr_id - 100) as usize;
                assert_eq!(c.cq, sq + 1 + i);
                assert_eq!(c.wc.src_qp, server.qps[i].qp_num());
                replies[i] = Some(clients[i].mr.read_vec(1024, 4).unwrap());
            }
            (false, WcOpcode::Send) => {}
            other => panic!("unexpected {other:?}: {c:?}"),
        }
    }
    assert_eq!(asked, N);
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r.unwrap(), format!("hi {i}").as_bytes());
    }
}
