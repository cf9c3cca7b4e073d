//! The transmit queue sent in batches ([`Egress::send_batch`], the UDP wire's `sendmmsg`):
//! whatever part of each batch the egress takes, every datagram leaves once, in order.

use std::sync::Mutex;

use super::*;

/// What the egress does with the next batch it is offered: take its first `n` (at least
/// one), refuse its first for want of room, or find its first unreachable.
#[derive(Clone, Copy, Debug)]
enum Step {
    Take(usize),
    Full,
    Unreachable,
}

/// An egress that sends batches as a script says (then takes whole batches), recording what
/// left and what was lost, and the size of each batch it was offered.
#[derive(Clone, Default)]
struct Scripted {
    script: Arc<Mutex<VecDeque<Step>>>,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    lost: Arc<Mutex<Vec<Vec<u8>>>>,
    offered: Arc<Mutex<Vec<usize>>>,
}

impl Egress for Scripted {
    fn send(&mut self, _dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.sent.lock().unwrap().push(datagram.to_vec());
        SendOutcome::Sent
    }

    fn send_batch(&mut self, batch: &[Transmit], outcomes: &mut [SendOutcome]) -> usize {
        assert!(!batch.is_empty() && !outcomes.is_empty(), "offered an empty batch");
        self.offered.lock().unwrap().push(batch.len());
        let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Take(usize::MAX));
        match step {
            Step::Take(n) => {
                let n = n.clamp(1, batch.len().min(outcomes.len()));
                for t in &batch[..n] {
                    self.sent.lock().unwrap().push(t.data.clone());
                }
                outcomes[..n].fill(SendOutcome::Sent);
                n
            }
            Step::Full => {
                outcomes[0] = SendOutcome::Full;
                1
            }
            Step::Unreachable => {
                self.lost.lock().unwrap().push(batch[0].data.clone());
                outcomes[0] = SendOutcome::Unreachable;
                1
            }
        }
    }
}

fn psns(datagrams: &[Vec<u8>]) -> Vec<u32> {
    datagrams.iter().map(|d| packet::parse_datagram(d).expect("valid").1.bth.psn.value()).collect()
}

/// A 40 KiB WRITE of 40 datagrams through an egress that takes batches in part, refuses some
/// (backpressure: they wait at the head, and the host flushes again) and loses one: every
/// datagram is offered until it is sent or lost, each exactly once, in PSN order; the rest of
/// a batch the egress did not take is offered again, first.
#[test]
fn partial_and_refused_batches_keep_order_and_lose_or_repeat_nothing() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
    let wire = Scripted::default();
    wire.script.lock().unwrap().extend([
        Step::Take(3),
        Step::Full,
        Step::Take(1),
        Step::Unreachable,
        Step::Take(5),
        Step::Full,
        Step::Full,
        Step::Take(2),
    ]);
    p.a.set_egress(Some(Box::new(wire.clone())));
    let len = 40 * 1024;
    a.mem.write(0, &pattern(len, 7)).unwrap();
    let sg = [sge(&a, 0, len as u32)];
    let wr = SendWr {
        wr_id: 5,
        sg_list: &sg,
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 1024, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    assert!(p.a.has_transmit(), "1 KiB datagrams take the queue");
    let mut flushes = 0;
    let mut backpressured = 0;
    while p.a.has_transmit() {
        flushes += 1;
        assert!(flushes < 100, "the queue drains");
        let f = p.a.flush_transmit();
        backpressured += f.backpressured;
        // A refusal leaves the queue waiting for room, as before batching.
        assert_eq!(p.a.transmit_waits(), p.a.has_transmit());
    }
    assert_eq!(flushes, 4, "three refusals, then the rest");
    assert!(backpressured > 0);
    let sent = wire.sent.lock().unwrap().clone();
    let lost = wire.lost.lock().unwrap().clone();
    assert_eq!(lost.len(), 1);
    let first = psns(&sent)[0];
    let want: Vec<u32> = (0..40).map(|i| (first + i) & 0xFF_FFFF).collect();
    let mut all = psns(&sent);
    all.extend(psns(&lost));
    all.sort_unstable();
    let mut want_sorted = want.clone();
    want_sorted.sort_unstable();
    assert_eq!(all, want_sorted, "each datagram left or was lost exactly once");
    let lost_psn = psns(&lost)[0];
    assert_eq!(psns(&sent), want.iter().copied().filter(|&x| x != lost_psn).collect::<Vec<_>>());
    // The egress was offered the head of the queue each time, up to the engine's batch.
    let offered = wire.offered.lock().unwrap().clone();
    assert!(offered.iter().all(|&n| (1..=SEND_BATCH).contains(&n)), "{offered:?}");
    assert_eq!(offered[0], 40);
    assert_eq!(offered[1], 37, "what the egress did not take is offered again");

    // Delivered, the datagrams before the lost one land, and the loss is recovered as on any
    // wire: B NAKs the gap, A sends again, and the WRITE completes with every byte.
    for d in sent.iter().chain(lost.iter()) {
        p.b.handle_packet(p.now, d);
    }
    for t in std::iter::from_fn(|| p.b.poll_transmit()).collect::<Vec<_>>() {
        p.a.handle_packet(p.now, &t.data);
    }
    for _ in 0..10 {
        let _ = p.a.flush_transmit();
        for d in std::mem::take(&mut *wire.sent.lock().unwrap()) {
            p.b.handle_packet(p.now, &d);
        }
        for t in std::iter::from_fn(|| p.b.poll_transmit()).collect::<Vec<_>>() {
            p.a.handle_packet(p.now, &t.data);
        }
    }
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(5, WcStatus::Success)]
    );
    assert_eq!(read_mem(&b, 1024, len), pattern(len, 7));
}
