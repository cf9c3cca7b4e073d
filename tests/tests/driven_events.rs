//! A thread blocked in `get_cq_event` runs its device's engine (docs/decisions.md, "The waiter
//! runs the engine"); what other event consumers see must not change: a second thread
//! blocked on another channel of the device, a thread in `poll` on another channel's fd, the
//! same thread waiting in `poll` after it drove, a timeout. Every test runs with direct reach
//! on and off and expects the same. Correctness only: each wait is bounded, nothing is timed.

use std::thread;
use std::time::Duration;

use softverbs_sim::conn::{connect, create_qp_on, ConnOpts, PortAddress};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);
/// Long enough that a waiter is blocked (and drives, or waits on its channel) before the
/// message that ends its wait is sent.
const SETTLE: Duration = Duration::from_millis(20);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// On device a: `N` channels, each with a CQ and a QP connected to its own QP on b.
struct Waiters {
    p: RcPair,
    chs: Vec<CompChannel>,
    cqs: Vec<CompletionQueue>,
    qas: Vec<QueuePair>,
    qbs: Vec<QueuePair>,
}

fn waiters(test: &str, reach: bool, n: usize) -> Waiters {
    let opts = ConnOpts::default();
    let p = RcPair::new(test, cap(), 1 << 16, &opts, |s| s.set_reach(reach));
    let (mut chs, mut cqs, mut qas, mut qbs) = (vec![], vec![], vec![], vec![]);
    for i in 0..n as u32 {
        let ch = p.a.ctx.create_comp_channel().expect("channel");
        let cq = p.a.ctx.create_cq(16, Some(&ch), 0).expect("cq with a channel");
        let qa = create_qp_on(&p.a.pd, &cq, QpType::Rc, cap()).expect("qp a");
        let qb = create_qp_on(&p.b.pd, &p.b.cq, QpType::Rc, cap()).expect("qp b");
        let ia = PortAddress::of(&p.a.ctx, None).unwrap().qp_info(&qa, 0x300 + i);
        let ib = PortAddress::of(&p.b.ctx, None).unwrap().qp_info(&qb, 0x400 + i);
        connect(&qa, 0x300 + i, &ib, &opts).expect("connect a");
        connect(&qb, 0x400 + i, &ia, &opts).expect("connect b");
        qa.post_recv(&[RecvWr {
            wr_id: 10 + u64::from(i),
            sg_list: &[p.a.mr.sge(64 * i as usize, 8)],
        }])
        .expect("post_recv");
        cq.req_notify(false).expect("arm");
        chs.push(ch);
        cqs.push(cq);
        qas.push(qa);
        qbs.push(qb);
    }
    Waiters { p, chs, cqs, qas, qbs }
}

impl Waiters {
    /// b sends 8 bytes to a's QP `i`.
    fn send_to(&self, i: usize) {
        let msg = [i as u8 + 1; 8];
        let wr = SendWr {
            wr_id: 100 + i as u64,
            inline_data: Some(&msg),
            send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..Default::default()
        };
        self.qbs[i].post_send(&[wr]).expect("post_send");
        let wc = self.p.b.cq.poll_n(1, WAIT).expect("b's send completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (100 + i as u64, WcStatus::Success));
    }

    /// The event of a's CQ `i` was taken: its receive completed with b's bytes.
    fn check(&self, i: usize, ev: &CompletionQueue, what: &str) {
        assert!(*ev == self.cqs[i], "{what}: the event names CQ {i}");
        self.chs[i].ack_cq_events(ev, 1);
        let wc = self.cqs[i].poll_n(1, WAIT).expect("the receive");
        let want = WorkCompletion {
            wr_id: 10 + i as u64,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 8,
            qp_num: self.qas[i].qp_num(),
            src_qp: wc[0].src_qp,
            wc_flags: wc[0].wc_flags,
            ..Default::default()
        };
        assert_eq!(wc, vec![want], "{what}");
        let got = self.p.a.mr.read_vec(64 * i, 8).unwrap();
        assert_eq!(got, vec![i as u8 + 1; 8], "{what}: the bytes");
    }
}

/// Waits (at most [`WAIT`]) in `poll` until `fd` is readable; whether it became so.
fn poll_readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; the channel's fd is open while the channel lives.
    let n = unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as i32) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn two_threads_blocked_on_two_channels_of_one_device_each_get_their_event() {
    for reach in [true, false] {
        let w = waiters(&format!("driven_two_{reach}"), reach, 2);
        thread::scope(|s| {
            let waiting: Vec<_> =
                w.chs.iter().map(|ch| s.spawn(move || ch.get_cq_event(Some(WAIT)))).collect();
            thread::sleep(SETTLE);
            // The second channel's event first, then the first's: whichever thread drives,
            // the other is served.
            for (i, t) in [1usize, 0].into_iter().zip(waiting.into_iter().rev()) {
                w.send_to(i);
                let ev = t.join().expect("waiter").expect("an event within 10 s");
                w.check(i, &ev, &format!("[reach {reach}] waiter {i}"));
            }
        });
    }
}

#[test]
fn a_thread_in_poll_on_one_channel_is_served_while_another_drives_the_engine() {
    for reach in [true, false] {
        let w = waiters(&format!("driven_poll_{reach}"), reach, 2);
        let fd = w.chs[1].fd().expect("fd");
        thread::scope(|s| {
            let driver = s.spawn(|| w.chs[0].get_cq_event(Some(WAIT)));
            let poller = s.spawn(move || poll_readable(fd));
            thread::sleep(SETTLE);
            w.send_to(1);
            assert!(poller.join().unwrap(), "[reach {reach}] the polled fd became readable");
            let ev = w.chs[1].get_cq_event(Some(Duration::ZERO)).expect("the polled event");
            w.check(1, &ev, &format!("[reach {reach}] polled"));
            w.send_to(0);
            let ev = driver.join().unwrap().expect("the driver's event");
            w.check(0, &ev, &format!("[reach {reach}] driver"));
        });
    }
}

#[test]
fn a_thread_that_drove_then_waits_in_poll_gets_its_next_event() {
    for reach in [true, false] {
        let w = waiters(&format!("driven_then_poll_{reach}"), reach, 1);
        thread::scope(|s| {
            let t = s.spawn(|| w.chs[0].get_cq_event(Some(WAIT)));
            thread::sleep(SETTLE);
            w.send_to(0);
            let ev = t.join().unwrap().expect("the driven event");
            w.check(0, &ev, &format!("[reach {reach}] driven"));
        });
        // Now the same program arms and sleeps in poll, calling no verb.
        w.qas[0].post_recv(&[RecvWr { wr_id: 10, sg_list: &[w.p.a.mr.sge(0, 8)] }]).unwrap();
        w.cqs[0].req_notify(false).unwrap();
        let fd = w.chs[0].fd().unwrap();
        thread::scope(|s| {
            let sender = s.spawn(|| {
                thread::sleep(SETTLE);
                w.send_to(0);
            });
            assert!(poll_readable(fd), "[reach {reach}] the fd became readable");
            sender.join().unwrap();
        });
        let ev = w.chs[0].get_cq_event(Some(Duration::ZERO)).expect("the polled event");
        w.check(0, &ev, &format!("[reach {reach}] polled after driving"));
    }
}

#[test]
fn a_driving_wait_with_a_timeout_times_out_and_the_next_wait_gets_the_event() {
    for reach in [true, false] {
        let w = waiters(&format!("driven_timeout_{reach}"), reach, 1);
        let err = w.chs[0].get_cq_event(Some(Duration::from_millis(30))).err();
        assert_eq!(err.map(|e| e.errno), Some(Errno::TimedOut), "[reach {reach}]");
        thread::scope(|s| {
            let t = s.spawn(|| w.chs[0].get_cq_event(Some(WAIT)));
            thread::sleep(SETTLE);
            w.send_to(0);
            let ev = t.join().unwrap().expect("the event after a timeout");
            w.check(0, &ev, &format!("[reach {reach}] after a timeout"));
        });
    }
}
