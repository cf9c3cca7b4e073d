//! An event-driven ping-pong (`ib_send_lat -e`): each side arms its CQ, blocks in
//! `get_cq_event`, takes the message and answers. The thread blocked in `get_cq_event` runs
//! the engine itself and sleeps on the inbox doorbell, so the datagram that brings its
//! completion wakes it, once; the NIC threads stand by meanwhile. Before, the waiter handed
//! the engine to its NIC thread, which parked on the doorbell: every message woke that NIC
//! thread, which then woke the waiter (two wake-ups a hop, measured 38–86 µs a hop).
//!
//! Its own test binary: it counts the system calls NIC threads make (`nic_model::cost`,
//! process-wide), and sets the NIC threads' spin window to zero (`SOFTVERBS_SPIN_US`, read
//! when the provider is made), so that a NIC thread that runs the engine for the waiter parks
//! on the doorbell after every message, whatever the machine's speed; and the standby
//! interval long (`SOFTVERBS_STANDBY_US`), so that on a loaded machine a hop slower than the
//! default 1 ms does not end the NIC thread's standby between two waits (which is right, but
//! not what is counted here). Counting, not timing.

use std::time::Duration;

use softverbs_sim::conn::{connect, create_qp_on, ConnOpts, PortAddress};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);
/// Round trips of the ping-pong.
const ROUNDS: u64 = 100;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// One side: a channel, a CQ bound to it, a QP completing into it.
struct Side {
    ch: CompChannel,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn side(ctx: &Context, pd: &ProtectionDomain) -> Side {
    let ch = ctx.create_comp_channel().expect("channel");
    let cq = ctx.create_cq(16, Some(&ch), 0).expect("cq with a channel");
    let qp = create_qp_on(pd, &cq, QpType::Rc, cap()).expect("qp");
    Side { ch, cq, qp }
}

impl Side {
    /// Blocks in `get_cq_event` until the receive `id` has completed with `msg`, taking the
    /// signaled sends' completions on the way, and checks every field of each.
    fn await_recv(&self, id: u64, msg: &[u8; 8], mr: &MemoryRegion, sent: &mut u64) {
        loop {
            let ev = self.ch.get_cq_event(Some(WAIT)).expect("an event within 10 s");
            assert!(ev == self.cq, "the event names the armed CQ");
            self.ch.ack_cq_events(&ev, 1);
            self.cq.req_notify(false).expect("arm again");
            let mut wc = [WorkCompletion::default(); 4];
            let mut got = false;
            loop {
                let n = self.cq.poll(&mut wc).expect("poll");
                if n == 0 {
                    break;
                }
                for w in &wc[..n] {
                    let send = w.opcode == WcOpcode::Send;
                    let want = WorkCompletion {
                        wr_id: if send { *sent } else { id },
                        status: WcStatus::Success,
                        opcode: w.opcode,
                        byte_len: 8,
                        qp_num: self.qp.qp_num(),
                        src_qp: w.src_qp,
                        wc_flags: w.wc_flags,
                        ..Default::default()
                    };
                    assert_eq!(*w, want, "a completion in order, every field as posted");
                    if send {
                        *sent += 1;
                    } else {
                        assert_eq!(w.opcode, WcOpcode::Recv);
                        got = true;
                    }
                }
            }
            if got {
                assert_eq!(&mr.read_vec(0, 8).unwrap()[..], msg, "the message's bytes");
                return;
            }
        }
    }

    fn post_recv(&self, id: u64, mr: &MemoryRegion) {
        self.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &[mr.sge(0, 8)] }]).expect("post_recv");
    }

    fn send(&self, id: u64, msg: &[u8; 8]) {
        let wr = SendWr {
            wr_id: id,
            inline_data: Some(msg),
            send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..Default::default()
        };
        self.qp.post_send(&[wr]).expect("post_send");
    }
}

#[test]
fn an_event_driven_ping_pong_wakes_the_waiting_thread_not_the_nic_thread() {
    std::env::set_var("SOFTVERBS_SPIN_US", "0");
    std::env::set_var("SOFTVERBS_STANDBY_US", "50000");
    for reach in [true, false] {
        let opts = ConnOpts::default();
        let p =
            RcPair::new(&format!("driven_{reach}"), cap(), 1 << 16, &opts, |s| s.set_reach(reach));
        let (a, b) = (side(&p.a.ctx, &p.a.pd), side(&p.b.ctx, &p.b.pd));
        let ia = PortAddress::of(&p.a.ctx, None).unwrap().qp_info(&a.qp, 0x300);
        let ib = PortAddress::of(&p.b.ctx, None).unwrap().qp_info(&b.qp, 0x400);
        connect(&a.qp, 0x300, &ib, &opts).expect("connect a");
        connect(&b.qp, 0x400, &ia, &opts).expect("connect b");
        for s in [&a, &b] {
            s.cq.req_notify(false).unwrap();
        }
        let before = nic_model::cost::snapshot();
        std::thread::scope(|scope| {
            let (b, mrb) = (&b, &p.b.mr);
            scope.spawn(move || {
                let mut sent = 0;
                for i in 0..ROUNDS {
                    b.post_recv(i, mrb);
                    b.await_recv(i, &(2 * i).to_le_bytes(), mrb, &mut sent);
                    b.send(i, &(2 * i + 1).to_le_bytes());
                }
            });
            let mut sent = 0;
            for i in 0..ROUNDS {
                a.post_recv(i, &p.a.mr);
                a.send(i, &(2 * i).to_le_bytes());
                a.await_recv(i, &(2 * i + 1).to_le_bytes(), &p.a.mr, &mut sent);
            }
        });
        let cost = nic_model::cost::snapshot().since(&before);
        eprintln!("[reach {reach}] {cost:?}");
        // Before: the NIC threads parked on their doorbells about once a message (2 ROUNDS;
        // 328 counted). Now a handful, but a loaded machine (CI, two cores, other tests and
        // builds) can preempt a waiter before it parks, and the NIC thread takes that message:
        // 37 seen once in CI. Half a park per round trip still fails the old design by 6x.
        assert!(
            cost.nic_calls.futex_wait < ROUNDS / 2,
            "[reach {reach}] NIC threads parked on the doorbell {} times in {ROUNDS} round \
             trips: they, not the waiters, were woken by the messages ({cost:?})",
            cost.nic_calls.futex_wait
        );
    }
}
