//! RC recovery: lost, duplicated and reordered packets, go-back-N, duplicate READs and atomics, RNR
//! NAKs and retry exhaustion.

use super::*;

// ---------------- loss, duplication, retransmission ----------------

#[test]
fn lost_middle_packet_is_recovered_by_psn_nak() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(1024, 7);
    a.mem.write(0, &data).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    p.filter = Box::new(|d, pkt, _| {
        if d == Dir::AtoB
            && pkt.bth.psn.value() == 0xFFFFF1
            && pkt.bth.opcode == Opcode::RC_SEND_MIDDLE
        {
            Fate::drop_first()
        } else {
            Fate::Deliver
        }
    });
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 1024)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // The responder NAKs the gap once; the requester goes back to the lost PSN.
    let naks = p.log.iter().filter(|s| s.dir == Dir::BtoA && s.aeth == Some(0x60)).count();
    assert_eq!(naks, 1);
    assert_eq!(read_mem(&b, 0, 1024), data);
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.len(), 1, "delivered exactly once");
    assert_eq!(rwc[0].byte_len, 1024);
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
    assert!(p.a.stats().retransmits >= 1);
}

#[test]
fn lost_ack_is_recovered_by_timeout_and_duplicate_is_not_redelivered() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 64, 64)] }]).unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    a.mem.write(0, b"once").unwrap();
    let start = p.now;
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 4)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // timeout 10 = 4.096 us * 1024 = 4.19 ms before the retransmission.
    assert!(p.now - start >= 4096 << 10, "the retransmission waited for the ACK timeout");
    assert_eq!(p.a.stats().timeouts, 1);
    assert_eq!(p.b.stats().rx_duplicates, 1);
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.len(), 1, "the duplicate SEND consumed no second receive");
    assert_eq!(read_mem(&b, 64, 4), vec![0; 4]);
    assert_eq!(poll_all(&mut p.a, a.cq).len(), 1);
}

#[test]
fn duplicated_and_reordered_packets_deliver_exactly_once_in_order() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for i in 0..4 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: i, sg_list: &[sge(&b, i * 1024, 1024)] }]).unwrap();
    }
    p.filter = Box::new(|d, _, n| match (d, n % 5) {
        (Dir::AtoB, 1) => Fate::Duplicate,
        (Dir::AtoB, 3) => Fate::Delay(3_000),
        _ => Fate::Deliver,
    });
    for i in 0..4u64 {
        a.mem.write(i as usize * 1024, &pattern(700, i as u8)).unwrap();
        post_send(
            &mut p,
            &a,
            SendWr {
                wr_id: i,
                sg_list: &[sge(&a, i * 1024, 700)],
                send_flags: signaled(),
                ..Default::default()
            },
        );
    }
    p.drive();
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert!(rwc.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 700));
    for i in 0..4 {
        assert_eq!(read_mem(&b, i * 1024, 700), pattern(700, i as u8));
    }
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        swc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
}

#[test]
fn duplicate_read_is_re_executed() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(0, b"version1").unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaRead,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        },
    );
    // Let the first response be lost, then change the target before the retry.
    p.drive_until(p.now + 10_000);
    b.mem.write(0, b"version2").unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_RDMA_READ_REQUEST]
    );
    assert_eq!(p.b.stats().rx_duplicates, 1);
    assert_eq!(read_mem(&a, 0, 8), b"version2", "the duplicate READ read memory again");
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(0, &100u64.to_ne_bytes()).unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: signaled(),
        atomic: AtomicTarget { remote_addr: b.mem.addr(), rkey: b.key, compare_add: 1, swap: 0 },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_FETCH_ADD, Opcode::RC_FETCH_ADD]);
    assert_eq!(u64::from_ne_bytes(read_mem(&b, 0, 8).try_into().unwrap()), 101, "executed once");
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 0, 8).try_into().unwrap()),
        100,
        "the replayed original value"
    );
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 1, ..Default::default() });
    let rd = |id: u64| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[rd(1), rd(2), rd(3)]).unwrap();
    // Only one READ request leaves before its response returns.
    assert!(p.a.poll_transmit().is_some());
    assert!(p.a.poll_transmit().is_none(), "the second READ waits for the first response");
    p.log.clear();
    // Deliver by hand: re-post to restart cleanly.
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 1, ..Default::default() });
    let rd = |id: u64| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[rd(1), rd(2), rd(3)]).unwrap();
    p.drive();
    // Requests and responses alternate.
    let seq: Vec<_> = p.log.iter().map(|s| s.dir).collect();
    assert_eq!(seq, vec![Dir::AtoB, Dir::BtoA, Dir::AtoB, Dir::BtoA, Dir::AtoB, Dir::BtoA]);
    assert_eq!(poll_all(&mut p.a, a.cq).len(), 3);
}

// ---------------- RNR ----------------

#[test]
fn rnr_nak_then_delivery_once_a_receive_is_posted() {
    let (mut p, a, b) = setup(ConnOpts { rnr_retry: 7, min_rnr_timer: 14, ..Default::default() });
    a.mem.write(0, b"late").unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 4)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    // Several RNR NAKs (timer 14 = 1.28 ms each) while no receive is posted.
    let t0 = p.now;
    p.drive_until(t0 + 5_000_000);
    let rnrs = p.log.iter().filter(|s| s.dir == Dir::BtoA && s.aeth == Some(0x20 | 14)).count();
    assert!(rnrs >= 3, "rnr_retry 7 retries forever: {rnrs} RNR NAKs");
    assert!(poll_all(&mut p.a, a.cq).is_empty());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 5, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.drive();
    assert_eq!(read_mem(&b, 0, 4), b"late");
    assert_eq!(poll_all(&mut p.b, b.cq).len(), 1);
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
    // The gaps between retries honour the advertised timer.
    assert!(p.now - t0 >= 3 * 1_280_000);
}

#[test]
fn rnr_retry_exhausted_then_flush() {
    let (mut p, a, b) = setup(ConnOpts { rnr_retry: 2, ..Default::default() });
    let now = p.now;
    let sg = [sge(&a, 0, 4)];
    let wr = |id| SendWr {
        wr_id: id,
        sg_list: &sg,
        send_flags: SendFlags::empty(),
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[wr(1), wr(2), wr(3)]).unwrap();
    p.drive();
    // One first try plus two retries, each refused.
    let rnrs = p
        .log
        .iter()
        .filter(|s| s.dir == Dir::BtoA && s.aeth.is_some_and(|x| x & 0x60 == 0x20))
        .count();
    assert_eq!(rnrs, 3);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)],
        "errors complete even unsignaled"
    );
    assert_eq!(p.a.qp_state(a.qpn), Some(QpState::Err));
    let _ = b;
}

// ---------------- retry exhaustion ----------------

#[test]
fn retry_exhausted_gives_retry_exc_err_then_flush() {
    let (mut p, a, b) = setup(ConnOpts { retry_cnt: 2, timeout: 8, ..Default::default() });
    p.filter = Box::new(|d, _, _| if d == Dir::AtoB { Fate::Drop } else { Fate::Deliver });
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    let sg = [sge(&a, 0, 4)];
    let wr = |id| SendWr { wr_id: id, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    p.a.post_send(now, a.qpn, &[wr(1), wr(2)]).unwrap();
    let t0 = p.now;
    p.drive();
    let tries = p.log.iter().filter(|s| s.dir == Dir::AtoB && s.psn == 0xFFFFF0).count();
    assert_eq!(tries, 3, "one first try and retry_cnt = 2 retries");
    let timeout = 4096u64 << 8;
    assert!(p.now - t0 >= 3 * timeout && p.now - t0 < 4 * timeout + 10_000);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(got, vec![(1, WcStatus::RetryExcErr, a.qpn), (2, WcStatus::WrFlushErr, a.qpn)]);
    assert_eq!(p.a.qp_state(a.qpn), Some(QpState::Err));
    // The completion reports the error; a requester raises no async event for it (IBA; mlx5).
    assert_eq!(p.a.poll_event(), None);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "nothing was delivered");
    // Posting to a QP in the error state completes with a flush.
    p.a.post_send(p.now, a.qpn, &[wr(3)]).unwrap();
    assert_eq!(
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::WrFlushErr)]
    );
}

// ---------------- READ responses past a bounded queue ----------------

/// A READ whose response burst is longer than a queue on its path: a queue of `queue` packets
/// between B and A tail-drops every response after the first `queue` of each burst (a burst
/// being what one READ request, first or retried, calls for). Each retry must ask only for what
/// has not arrived, so that every retry moves `queue` packets further; a retry of the whole
/// READ would lose the same tail every time.
fn read_through_bounded_queue(len: usize, queue: usize, retry_cnt: u8) -> (Pair, Side, Side) {
    let (mut p, a, b) = setup(ConnOpts { retry_cnt, timeout: 8, ..Default::default() });
    let data = pattern(len, 41);
    b.mem.write(0, &data).unwrap();
    let mut in_burst = 0usize;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::AtoB && pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
            in_burst = 0;
        }
        if d == Dir::BtoA
            && pkt.bth.opcode.info().is_some_and(|i| i.flags.contains(packet::OpFlags::READ))
        {
            in_burst += 1;
            if in_burst > queue {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 9,
            sg_list: &[sge(&a, 100, len as u32)],
            opcode: WrOpcode::RdmaRead,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        },
    );
    p.drive();
    (p, a, b)
}

#[test]
fn read_longer_than_a_queue_resumes_where_its_responses_stopped() {
    // 4,865 bytes at MTU 256: 20 responses through a queue of 8 take three requests.
    let len = 4865;
    let (mut p, a, _b) = read_through_bounded_queue(len, 8, 3);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len, wc[0].qp_num),
        (9, WcStatus::Success, WcOpcode::RdmaRead, len as u32, a.qpn)
    );
    assert_eq!(read_mem(&a, 100, len), pattern(len, 41), "every byte landed once, in place");
    assert_eq!(read_mem(&a, 0, 100), vec![0; 100], "nothing before the buffer");
    assert_eq!(read_mem(&a, 100 + len, 64), vec![0; 64], "nothing after it");
    // Each retry asks from the first response PSN not yet received: 0xFFFFF0, then 8 and 16
    // packets on (crossing the PSN wrap).
    let requests: Vec<u32> = p
        .log
        .iter()
        .filter(|s| s.dir == Dir::AtoB && s.opcode == Opcode::RC_RDMA_READ_REQUEST)
        .map(|s| s.psn)
        .collect();
    assert_eq!(requests, vec![0xFFFFF0, 0xFFFFF8, 0x000000]);
    assert_eq!(p.a.qp_state(a.qpn), Some(QpState::Rts));
}

#[test]
fn read_retry_resumes_even_with_one_retry_per_queue_length() {
    // 20 responses through a queue of 2 need ten requests: nine retries, each making progress,
    // so the retry counter (1) is reset by every burst that moves the READ on.
    let len = 4865;
    let (mut p, a, _b) = read_through_bounded_queue(len, 2, 1);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(9, WcStatus::Success, len as u32)]
    );
    assert_eq!(read_mem(&a, 100, len), pattern(len, 41));
    let requests =
        p.log.iter().filter(|s| s.dir == Dir::AtoB && s.opcode == Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(requests.count(), 10);
}

// ---------------- an RNR NAK, then the next request's sequence NAK ----------------

/// A send completion's (wr_id, status, opcode, byte_len, qp_num).
/// A requester completion: (wr_id, status, opcode, byte_len, whether qp_num names `a`'s QP).
type SendWc = (u64, WcStatus, WcOpcode, u32, bool);

/// Two pipelined SENDs to a receiver with no receive posted, on a link that loses nothing: the
/// first is RNR NAKed (`min_rnr_timer` code `rnr_code`), and the second, arriving while the
/// responder still expects the first, is answered with a PSN sequence error NAK for the
/// first's PSN. The receives are posted `post_after_ns` after the SENDs; `delay` says what
/// extra delay (ns) each packet the responder sends meets. Returns the requester's completions
/// (wr_id, status, opcode, byte_len, qp_num is `a`'s), the NAKs the responder sent (RNR, sequence) and
/// the requester's counters; when both SENDs succeed, checks that they were delivered once, in
/// order, with their bytes.
fn rnr_then_sequence_nak(
    retry_cnt: u8,
    rnr_code: u8,
    post_after_ns: u64,
    delay: fn(&packet::Packet<'_>) -> u64,
) -> (Vec<SendWc>, (usize, usize), NicStats) {
    let opts = ConnOpts {
        retry_cnt,
        timeout: 6,
        rnr_retry: 7,
        min_rnr_timer: rnr_code,
        ..Default::default()
    };
    let (mut p, a, b) = setup(opts);
    p.filter = Box::new(move |d, pkt, _| match delay(pkt) {
        ns if d == Dir::BtoA && ns > 0 => Fate::Delay(ns),
        _ => Fate::Deliver,
    });
    a.mem.write(0, b"first!second").unwrap();
    let now = p.now;
    let (s1, s2) = ([sge(&a, 0, 6)], [sge(&a, 6, 6)]);
    let wr1 = SendWr { wr_id: 1, sg_list: &s1, send_flags: signaled(), ..Default::default() };
    let wr2 = SendWr { wr_id: 2, sg_list: &s2, send_flags: signaled(), ..Default::default() };
    p.a.post_send(now, a.qpn, &[wr1, wr2]).unwrap();
    p.drive_until(now + post_after_ns);
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 10, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 11, sg_list: &[sge(&b, 64, 64)] }]).unwrap();
    p.drive();
    let naks = |code: u8, mask: u8| {
        let nak = |s: &&Seen| s.dir == Dir::BtoA && s.aeth.is_some_and(|x| x & mask == code);
        p.log.iter().filter(nak).count()
    };
    let counts = (naks(0x20, 0xE0), naks(0x60, 0xFF));
    let got: Vec<_> = poll_all(&mut p.a, a.cq)
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num == a.qpn))
        .collect();
    if got.iter().all(|w| w.1 == WcStatus::Success) {
        let recv: Vec<_> =
            poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
        assert_eq!(recv, vec![(10, WcStatus::Success, 6), (11, WcStatus::Success, 6)]);
        assert_eq!(
            (read_mem(&b, 0, 6), read_mem(&b, 64, 6)),
            (b"first!".to_vec(), b"second".to_vec())
        );
    }
    (got, counts, p.a.stats().clone())
}

/// Both SENDs of [`rnr_then_sequence_nak`] completed successfully, in order, on `a`'s QP.
const BOTH_SENT: [SendWc; 2] = [
    (1, WcStatus::Success, WcOpcode::Send, 6, true),
    (2, WcStatus::Success, WcOpcode::Send, 6, true),
];

fn no_delay(_: &packet::Packet<'_>) -> u64 {
    0
}

#[test]
fn a_sequence_nak_behind_an_rnr_nak_spends_one_transport_retry() {
    // The IBA counts a PSN sequence error NAK against retry_cnt whatever caused it, and so does
    // rxe (its completer takes the NAK once the RNR wait is over and spends a retry): with
    // retry_cnt 0 the first SEND ends in RETRY_EXC_ERR on a link that loses nothing.
    let (got, (rnr, seq), p) = rnr_then_sequence_nak(0, 16, 1_000_000, no_delay);
    assert_eq!((rnr, seq), (1, 1), "one RNR NAK, then one sequence NAK");
    let st: Vec<_> = got.iter().map(|w| (w.0, w.1, w.4)).collect();
    assert_eq!(st, vec![(1, WcStatus::RetryExcErr, true), (2, WcStatus::WrFlushErr, true)]);
    assert_eq!(p.timeouts, 0);
    // With a retry left, the same sequence completes: the NAK spends it, and the local ACK
    // timer, which would spend more, does not run out while the RNR NAK is waited out.
    for retry_cnt in 1..=3 {
        let (got, (rnr, seq), p) = rnr_then_sequence_nak(retry_cnt, 16, 6_000_000, no_delay);
        assert!(rnr >= 2 && seq >= 1, "retry_cnt {retry_cnt}: {rnr} RNR, {seq} sequence NAKs");
        assert_eq!(got, BOTH_SENT, "retry_cnt {retry_cnt}");
        assert_eq!(p.timeouts, 0, "retry_cnt {retry_cnt}");
    }
}

#[test]
fn the_ack_timer_restarts_when_the_rnr_wait_ends() {
    // The RNR wait (0.24 ms) is shorter than the local ACK timeout (0.26 ms), and the ACK of
    // the retransmission comes 50 µs late (a queue on the way). The ACK timer measures a
    // request's wait for its response: it starts again with the retransmission, so it does
    // not fire before that ACK and spend a retry on nothing lost.
    fn late_ack(pkt: &packet::Packet<'_>) -> u64 {
        if pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE && pkt.aeth.is_some_and(|a| a.syndrome < 0x20) {
            50_000
        } else {
            0
        }
    }
    for retry_cnt in 1..=3 {
        let (got, (rnr, seq), p) = rnr_then_sequence_nak(retry_cnt, 9, 100_000, late_ack);
        assert_eq!((rnr, seq), (1, 1), "retry_cnt {retry_cnt}");
        assert_eq!(got, BOTH_SENT, "retry_cnt {retry_cnt}");
        assert_eq!(p.timeouts, 0, "retry_cnt {retry_cnt}: no ACK timeout fired");
    }
}
