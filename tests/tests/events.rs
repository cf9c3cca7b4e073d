//! Completion events as the kernel delivers them (issue 29, item 3 and "events without the
//! pump"): when a completion is pushed to an armed CQ — by direct reach inside
//! `ibv_post_send`, by any verb's own work (a receive posted to a QP in error is flushed at
//! once), or by the NIC thread — its event is queued then, and the channel's fd is readable
//! then; a destroyed CQ's events are purged. Every test runs with direct reach on and off and
//! expects the same.
//!
//! Why the timing bound fails without the fix: the waiting thread's `get_cq_event` hands the
//! engine to the NIC thread, which, finding no work, parks on its inbox for up to 100 ms (no
//! timer is armed). A completion made on another thread that leaves the event in the engine
//! for the NIC thread's next round is then seen only when that park ends, tens of
//! milliseconds later; delivered at once, it wakes the waiter in well under the bound.

use std::thread;
use std::time::{Duration, Instant};

use softverbs_sim::conn::{connect, create_qp_on, ConnOpts, PortAddress};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);
/// How long the post waits after the waiter blocked: past the NIC thread's 50 µs spin, so it
/// is parked on its inbox when the completion comes.
const SETTLE: Duration = Duration::from_millis(20);
/// At once, with room for a loaded machine; a NIC thread's parked round comes 80 ms later.
const PROMPT: Duration = Duration::from_millis(50);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Two connected devices, with a's QP completing into a CQ bound to a channel.
struct Evented {
    p: RcPair,
    ch: CompChannel,
    cq: CompletionQueue,
    qa: QueuePair,
    _qb: QueuePair,
}

fn evented(test: &str, reach: bool) -> Evented {
    let opts = ConnOpts::default();
    let p = RcPair::new(test, cap(), 1 << 16, &opts, |s| s.set_reach(reach));
    let ch = p.a.ctx.create_comp_channel().expect("channel");
    let cq = p.a.ctx.create_cq(16, Some(&ch), 0).expect("cq with channel");
    let qa = create_qp_on(&p.a.pd, &cq, QpType::Rc, cap()).expect("qp a");
    let qb = create_qp_on(&p.b.pd, &p.b.cq, QpType::Rc, cap()).expect("qp b");
    let ia = PortAddress::of(&p.a.ctx, None).unwrap().qp_info(&qa, 0x300);
    let ib = PortAddress::of(&p.b.ctx, None).unwrap().qp_info(&qb, 0x400);
    connect(&qa, 0x300, &ib, &opts).expect("connect a");
    connect(&qb, 0x400, &ia, &opts).expect("connect b");
    Evented { p, ch, cq, qa, _qb: qb }
}

impl Evented {
    fn reached(&self) -> u64 {
        self.p.soft.stats("softverbs0").unwrap().nic.reached
    }

    /// Arms the CQ, blocks a thread in `get_cq_event`, runs `act` once that thread is
    /// waiting, and returns how long after `act` the thread had its event, and the event.
    fn wake_after(&self, act: impl FnOnce()) -> (Duration, CompletionQueue) {
        self.cq.req_notify(false).expect("req_notify");
        let ch = self.ch.clone();
        let waiter = thread::spawn(move || {
            let ev = ch.get_cq_event(Some(WAIT));
            (Instant::now(), ev)
        });
        thread::sleep(SETTLE);
        let acted = Instant::now();
        act();
        let (woke, ev) = waiter.join().expect("waiter");
        (woke.saturating_duration_since(acted), ev.expect("an event within 10 s"))
    }

    /// A signaled 64-byte WRITE of a's MR into b's MR at `off`.
    fn write(&self, id: u64, off: u64) {
        let sges = [self.p.a.mr.sge(0, 64)];
        self.qa
            .post_send(&[SendWr {
                wr_id: id,
                sg_list: &sges,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget {
                    remote_addr: self.p.b.mr.addr() + off,
                    rkey: self.p.b.mr.rkey(),
                },
                ..Default::default()
            }])
            .expect("post_send");
    }
}

fn completion(id: u64, status: WcStatus, opcode: WcOpcode, len: u32, qpn: u32) -> WorkCompletion {
    WorkCompletion { wr_id: id, status, opcode, byte_len: len, qp_num: qpn, ..Default::default() }
}

#[test]
fn a_write_wakes_a_thread_blocked_in_get_cq_event_at_once() {
    for reach in [true, false] {
        let e = evented(&format!("event_write_{reach}"), reach);
        e.p.a.mr.write(0, &[0x5a; 64]).unwrap();
        let reached = e.reached();
        let (delay, ev) = e.wake_after(|| e.write(7, 128));
        assert!(ev == e.cq, "[reach {reach}] the event names the armed CQ");
        e.ch.ack_cq_events(&ev, 1);
        let wc = e.cq.poll_n(1, WAIT).expect("the completion");
        let qpn = e.qa.qp_num();
        assert_eq!(wc, vec![completion(7, WcStatus::Success, WcOpcode::RdmaWrite, 64, qpn)]);
        assert_eq!(e.p.b.mr.read_vec(128, 64).unwrap(), vec![0x5a; 64], "[reach {reach}]");
        assert_eq!(e.reached() - reached, u64::from(reach), "[reach {reach}] reached or not");
        assert!(delay < PROMPT, "[reach {reach}] the event came {delay:?} after the post");
    }
}

#[test]
fn a_receive_flushed_by_post_recv_wakes_get_cq_event_at_once() {
    for reach in [true, false] {
        let e = evented(&format!("event_flush_{reach}"), reach);
        let attr = QpAttr { qp_state: QpState::Err, ..Default::default() };
        e.qa.modify(&attr, QpAttrMask::STATE).expect("to ERR");
        let sges = [e.p.a.mr.sge(0, 64)];
        let (delay, ev) =
            e.wake_after(|| e.qa.post_recv(&[RecvWr { wr_id: 9, sg_list: &sges }]).unwrap());
        assert!(ev == e.cq, "[reach {reach}] the event names the armed CQ");
        e.ch.ack_cq_events(&ev, 1);
        let wc = e.cq.poll_n(1, WAIT).expect("the flushed completion");
        let qpn = e.qa.qp_num();
        // A completion in error carries wr_id, status and qp_num only (opcode 0), as rxe's.
        assert_eq!(wc, vec![completion(9, WcStatus::WrFlushErr, WcOpcode::Send, 0, qpn)]);
        assert!(delay < PROMPT, "[reach {reach}] the event came {delay:?} after the post");
    }
}

/// Whether `fd` is readable now (`poll` with no wait).
fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; the channel's fd is open while the channel lives.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Waits (at most 10 s) until `fd` is readable; whether it became so.
fn becomes_readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: as in `readable`.
    let n = unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as i32) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn the_channel_fd_is_readable_exactly_while_an_event_is_queued_and_a_destroyed_cq_takes_its_events()
{
    for reach in [true, false] {
        let e = evented(&format!("event_fd_{reach}"), reach);
        let fd = e.ch.fd().expect("the channel's fd");
        assert_eq!(e.ch.fd().unwrap(), fd, "one fd per channel");
        let none = |what: &str| {
            let err = e.ch.get_cq_event(Some(Duration::ZERO)).err();
            assert_eq!(err.map(|x| x.errno), Some(Errno::TimedOut), "[reach {reach}] {what}");
        };
        assert!(!readable(fd), "[reach {reach}] nothing queued yet");
        none("nothing queued yet");
        // Two events (armed again in between): the fd stays readable until both are taken.
        for id in [1, 2] {
            e.cq.req_notify(false).unwrap();
            e.write(id, 64 * id);
            assert!(becomes_readable(fd), "[reach {reach}] event {id}");
            e.cq.poll_n(1, WAIT).expect("the completion");
        }
        let ev = e.ch.get_cq_event(Some(Duration::ZERO)).expect("the first event");
        assert!(ev == e.cq);
        assert!(readable(fd), "[reach {reach}] one event still queued");
        e.ch.get_cq_event(Some(Duration::ZERO)).expect("the second event");
        assert!(!readable(fd), "[reach {reach}] both taken");
        none("both taken");
        e.ch.ack_cq_events(&e.cq, 2);
        // An event left queued, then its CQ destroyed: the event goes with the CQ.
        e.cq.req_notify(false).unwrap();
        e.write(3, 256);
        assert!(becomes_readable(fd), "[reach {reach}] event 3");
        drop(ev);
        let Evented { p, ch, cq, qa, _qb } = e;
        qa.destroy().expect("destroy the QP");
        cq.destroy().expect("destroy the CQ");
        assert!(!readable(fd), "[reach {reach}] the destroyed CQ's event is gone");
        let err = ch.get_cq_event(Some(Duration::ZERO)).err().map(|x| x.errno);
        assert_eq!(err, Some(Errno::TimedOut), "[reach {reach}] no event of a destroyed CQ");
        drop((ch, p));
    }
}

#[test]
fn a_thread_waiting_for_an_event_gives_up_with_eio_when_the_device_closes() {
    let dir = softverbs_tests::FabricDir::new("event_close");
    let soft = nic_model::soft::Soft::shared_memory(Some(dir.path())).expect("soft");
    let ctx = soft.open("softverbs0").expect("open");
    let ch = ctx.create_comp_channel().expect("channel");
    let waiter = thread::spawn(move || ch.get_cq_event(None).err().map(|e| e.errno));
    thread::sleep(SETTLE);
    let closed = Instant::now();
    drop(ctx);
    drop(soft);
    let got = waiter.join().expect("waiter");
    assert_eq!(got, Some(Errno::Io));
    assert!(closed.elapsed() < Duration::from_secs(5));
}
