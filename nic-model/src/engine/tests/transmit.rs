//! Transmit: reused buffers, ACK coalescing in the queue, and a host's lent wire.

use super::*;

// ---------------- transmit buffers ----------------

#[test]
fn a_recycled_buffer_carries_the_next_datagram_and_nothing_stale() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
    let write = |wr_id: u64, off: u64| SendWr {
        wr_id,
        sg_list: &[],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + off, rkey: b.key },
        ..Default::default()
    };
    let long = pattern(900, 1);
    a.mem.write(0, &long).unwrap();
    let sg = [sge(&a, 0, 900)];
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(1, 0) }]).unwrap();
    let first = p.a.poll_transmit().expect("the WRITE is sent at once");
    let reused = first.data.as_ptr();
    p.b.handle_packet(p.now, &first.data);
    p.a.recycle(first.data);

    // A shorter datagram in the same buffer: its own length, a valid ICRC, its own bytes.
    let short = pattern(20, 2);
    a.mem.write(1000, &short).unwrap();
    let sg = [sge(&a, 1000, 20)];
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(2, 2000) }]).unwrap();
    let second = p.a.poll_transmit().expect("the second WRITE is sent at once");
    assert_eq!(second.data.as_ptr(), reused, "the transmit reused the recycled buffer");
    let (_, pkt) = packet::parse_datagram(&second.data).expect("a whole, valid datagram");
    assert_eq!(pkt.payload, &short[..]);
    assert_eq!(second.data.len(), packet::datagram_len(&pkt));
    p.b.handle_packet(p.now, &second.data);
    assert_eq!(read_mem(&b, 0, 900), long);
    assert_eq!(read_mem(&b, 2000, 20), short);

    // Buffers larger than any datagram are not kept.
    let huge = Vec::with_capacity(1 << 20);
    let huge_ptr = huge.as_ptr();
    p.a.recycle(huge);
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(3, 3000) }]).unwrap();
    let third = p.a.poll_transmit().expect("the third WRITE is sent at once");
    assert_ne!(third.data.as_ptr(), huge_ptr);
    p.b.handle_packet(p.now, &third.data);
    p.drive();
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(read_mem(&b, 3000, 20), short);
}

// ---------------- ACK coalescing ----------------

#[test]
fn acks_queued_back_to_back_are_coalesced_into_one() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for id in 1..=3 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"abc").unwrap();
    for id in 1..=3 {
        let wr = SendWr {
            wr_id: id,
            sg_list: &[sge(&a, id - 1, 1)],
            send_flags: signaled(),
            ..Default::default()
        };
        post_send(&mut p, &a, wr);
    }
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(sends.len(), 3);
    for t in &sends {
        p.b.handle_packet(p.now, &t.data);
    }
    // The receives completed before any ACK was built.
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!(
        received.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, 1), (2, WcStatus::Success, 1), (3, WcStatus::Success, 1)]
    );
    assert_eq!(read_mem(&b, 64, 1), b"a");
    assert_eq!(read_mem(&b, 192, 1), b"c");
    let acks: Vec<Transmit> = std::iter::from_fn(|| p.b.poll_transmit()).collect();
    assert_eq!(acks.len(), 1, "one ACK for the three messages");
    let (opcode, psn, aeth) = parsed(&acks[0]);
    assert_eq!(opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(psn, 0xFFFFF2, "the PSN of the last SEND");
    assert_eq!(aeth, Some(packet::Aeth::ack(3)), "MSN 3: three messages completed");
    assert!(!p.b.has_transmit());
    // The one ACK retires all three sends.
    p.a.handle_packet(p.now, &acks[0].data);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(p.a.next_timeout(), None, "nothing left in flight");
}

#[test]
fn an_ack_is_not_coalesced_past_a_response_queued_after_it() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for id in 1..=2 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    b.mem.write(512, b"read me").unwrap();
    let sg = [sge(&a, 0, 4)];
    let send = |id| SendWr { wr_id: id, sg_list: &sg, ..Default::default() };
    let read = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 1024, 7)],
        opcode: WrOpcode::RdmaRead,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 512, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, send(1));
    post_send(&mut p, &a, read);
    post_send(&mut p, &a, SendWr { send_flags: signaled(), ..send(3) });
    let requests: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(requests.len(), 3);
    for t in &requests {
        p.b.handle_packet(p.now, &t.data);
    }
    // The READ response stands between the two ACKs, so neither replaces the other and every
    // response leaves in PSN order.
    let out: Vec<_> = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| parsed(&t)).collect();
    assert_eq!(
        out.iter().map(|(op, psn, _)| (*op, *psn)).collect::<Vec<_>>(),
        [
            (Opcode::RC_ACKNOWLEDGE, 0xFFFFF0),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0xFFFFF1),
            (Opcode::RC_ACKNOWLEDGE, 0xFFFFF2)
        ]
    );
    assert_eq!(out[0].2, Some(packet::Aeth::ack(1)));
    assert_eq!(out[2].2, Some(packet::Aeth::ack(3)));
}

// ---------------- a host's egress ----------------

#[test]
fn small_datagrams_go_straight_onto_a_lent_wire_and_queue_when_it_is_full() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let wire = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(wire.clone())));
    for id in 1..=4 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"abcd").unwrap();
    let send =
        |id: u64| SendWr { wr_id: id, sg_list: &[], send_flags: signaled(), ..Default::default() };
    // On the wire at once, with the bytes the queue would have had; nothing queued.
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 0, 1)], ..send(1) });
    assert!(!p.a.has_transmit());
    let on_wire = wire.take();
    assert_eq!(on_wire.len(), 1);
    let (ip, pkt) = packet::parse_datagram(&on_wire[0]).expect("a valid datagram");
    assert_eq!(
        (pkt.bth.opcode, pkt.bth.psn.value(), pkt.payload),
        (Opcode::RC_SEND_ONLY, 0xFFFFF0, &b"a"[..])
    );
    assert_eq!((ip.src, ip.dst), (ip_of_slot(1), ip_of_slot(2)));
    assert_eq!(p.a.stats().tx_packets, 1);

    // Full: the SEND is queued, and the next one queues behind it though the wire has room.
    wire.full.store(true, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 1, 1)], ..send(2) });
    wire.full.store(false, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 2, 1)], ..send(3) });
    assert!(wire.take().is_empty(), "nothing overtakes a queued datagram");
    let queued: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(queued.iter().map(|t| parsed(t).1).collect::<Vec<_>>(), [0xFFFFF1, 0xFFFFF2]);
    // One refused again when the NIC flushes its queue waits there, for room (the queue is
    // the NIC's one backlog).
    wire.full.store(true, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 3, 1)], ..send(4) });
    let flushed = p.a.flush_transmit();
    assert_eq!((flushed.moved, flushed.backpressured, p.a.transmit_waits()), (false, 1, true));
    wire.full.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(wire.take().is_empty());
    let paused: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(paused.len(), 1);
    assert_eq!(p.a.stats().tx_packets, 4, "each datagram counted once, whichever way it went");

    // Every SEND arrives once, in order; the receiver completes all four.
    for d in
        on_wire.iter().chain(queued.iter().map(|t| &t.data)).chain(paused.iter().map(|t| &t.data))
    {
        p.b.handle_packet(p.now, d);
    }
    let got = poll_all(&mut p.b, b.cq);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(),
        [(1, 1), (2, 1), (3, 1), (4, 1)]
    );
    assert_eq!(read_mem(&b, 64 * 4, 1), b"d");
}

#[test]
fn acks_on_a_lent_wire_go_one_by_one_and_a_large_datagram_takes_the_queue() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
    let wire = FakeEgress { to: 1, ..FakeEgress::default() };
    p.b.set_egress(Some(Box::new(wire.clone())));
    for id in 1..=3 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 2048 * id, 1024)] }])
            .unwrap();
    }
    for id in 1..=2 {
        post_send(
            &mut p,
            &a,
            SendWr { wr_id: id, sg_list: &[sge(&a, 0, 8)], ..Default::default() },
        );
    }
    for t in std::iter::from_fn(|| p.a.poll_transmit()).collect::<Vec<_>>() {
        p.b.handle_packet(p.now, &t.data);
    }
    // Emitted as they were made: none is left in a queue to be replaced by the next.
    let acks = wire.take();
    assert_eq!(acks.len(), 2);
    for (ack, psn) in acks.iter().zip([0xFFFFF0, 0xFFFFF1]) {
        let (_, pkt) = packet::parse_datagram(ack).expect("a valid ACK");
        assert_eq!((pkt.bth.opcode, pkt.bth.psn.value()), (Opcode::RC_ACKNOWLEDGE, psn));
    }
    assert!(!p.b.has_transmit());
    // B's own message of 1 KiB is over the direct size: it takes the queue.
    p.a.post_recv(a.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&a, 4096, 1024)] }]).unwrap();
    let now = p.now;
    p.b.post_send(
        now,
        b.qpn,
        &[SendWr { wr_id: 7, sg_list: &[sge(&b, 0, 1000)], ..Default::default() }],
    )
    .unwrap();
    assert!(wire.take().is_empty());
    let big = p.b.poll_transmit().expect("queued");
    assert_eq!(big.data.len(), 20 + 8 + 12 + 1000 + 4);
}

#[test]
fn a_wire_that_takes_datagrams_without_their_icrc_gets_them_so_and_the_queue_gets_them_whole() {
    // Both sides lend a wire on which nothing looks at the datagrams (the soft backend's, with
    // no capture, tap or fault plan): the SEND and its ACK go onto it with four zero bytes
    // where the ICRC goes, and each receiver, told so, checks everything but the ICRC.
    let (mut p, a, b) = setup(ConnOpts::default());
    let wa = FakeEgress { to: 2, unset_icrc: true, ..FakeEgress::default() };
    let wb = FakeEgress { to: 1, unset_icrc: true, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(wa.clone())));
    p.b.set_egress(Some(Box::new(wb.clone())));
    for id in 1..=3 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"abcdefgh").unwrap();
    let sg = [sge(&a, 0, 8)];
    let send =
        |id: u64| SendWr { wr_id: id, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    post_send(&mut p, &a, send(1));
    assert!(wa.take().is_empty(), "nothing went with its ICRC");
    let unset = wa.take_unset();
    assert_eq!(unset.len(), 1);
    let d = &unset[0];
    assert_eq!(d[d.len() - 4..], [0; 4], "the ICRC is left zero");
    let whole = packet::with_icrc_ipv4(d);
    let (_, pkt) = packet::parse_datagram(&whole).expect("whole once its ICRC is set");
    assert_eq!((pkt.bth.opcode, pkt.bth.psn.value()), (Opcode::RC_SEND_ONLY, 0xFFFFF0));
    assert_eq!(pkt.payload, b"abcdefgh");

    // Taken as carrying an ICRC, it is a bad one, dropped and counted; told it has none,
    // the receiver takes it.
    p.b.handle_packet(p.now, d);
    assert_eq!((p.b.stats().rx_bad_icrc, p.b.stats().rx_malformed), (1, 1));
    assert!(poll_all(&mut p.b, b.cq).is_empty());
    let now = p.now;
    p.b.handle_packet_with(&mut Now::At(now), d, packet::Icrc::Unset);
    let got = poll_all(&mut p.b, b.cq);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::Recv, 8, b.qpn)]
    );
    assert_eq!(read_mem(&b, 64, 8), b"abcdefgh");

    // The ACK went back the same way, and completes the SEND.
    let acks = wb.take_unset();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0][acks[0].len() - 4..], [0; 4]);
    p.a.handle_packet_with(&mut Now::At(now), &acks[0], packet::Icrc::Unset);
    let done = poll_all(&mut p.a, a.cq);
    assert_eq!(
        done.iter().map(|w| (w.wr_id, w.status, w.opcode, w.qp_num)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, WcOpcode::Send, a.qpn)]
    );

    // A datagram the wire refuses waits in the queue, where a host may tap it: it carries
    // its ICRC, and so does the one queued behind it.
    wa.full.store(true, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, send(2));
    wa.full.store(false, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, send(3));
    assert!(wa.take().is_empty() && wa.take_unset().is_empty());
    let queued: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(queued.len(), 2);
    for (t, psn) in queued.iter().zip([0xFFFFF1, 0xFFFFF2]) {
        let (_, pkt) = packet::parse_datagram(&t.data).expect("a queued datagram is whole");
        assert_eq!(pkt.bth.psn.value(), psn);
    }

    // Lent again without that property, the wire gets every datagram whole.
    let plain = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(plain.clone())));
    post_send(&mut p, &a, send(4));
    let sent = plain.take();
    assert_eq!(sent.len(), 1);
    packet::parse_datagram(&sent[0]).expect("a whole datagram");
}

// ---------------- a retry and the requests still queued ----------------

#[test]
fn a_retry_takes_back_the_requests_still_queued_and_sends_each_once() {
    // A host that paces its NIC (the simulator) leaves requests in the transmit queue: a retry
    // goes back to the oldest unacknowledged PSN and makes them again, so the queued copies are
    // taken back rather than sent stale before their own retransmissions.
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu256, timeout: 8, ..ConnOpts::default() });
    a.mem.write(0, &pattern(1024, 3)).unwrap();
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 1024)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(p.now, a.qpn, &[wr]).unwrap();
    assert_eq!(p.a.stats().tx_packets, 4, "four packets at MTU 256");
    // The host takes the first onto the wire, where it is lost; three wait in the queue.
    let first = p.a.poll_transmit().expect("the first packet");
    let psn0 = parsed(&first).1;
    let deadline = p.a.next_timeout().expect("the ACK timer is armed");
    p.a.handle_timeout(deadline);
    assert_eq!(p.a.stats().timeouts, 1);
    let mut again = Vec::new();
    while let Some(t) = p.a.poll_transmit() {
        again.push(parsed(&t).1);
    }
    let psns: Vec<u32> = (0..4).map(|i| (psn0 + i) & 0xFF_FFFF).collect();
    assert_eq!(again, psns, "each PSN once, in order, from the one the retry went back to");
    assert_eq!(p.a.stats().retransmits, 1, "only the packet that had left was sent again");
    assert_eq!(p.a.stats().tx_packets, 5, "4 sent, 1 of them twice");
}

// ---------------- the queue as the one backlog ----------------

#[test]
fn a_datagram_the_egress_refuses_on_a_flush_waits_at_the_head_and_holds_back_the_rest() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let egress = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(egress.clone())));
    for id in 1..=2 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    let full = |on: bool| egress.full.store(on, std::sync::atomic::Ordering::Relaxed);
    let send = |id: u64| SendWr { wr_id: id, sg_list: &[], ..Default::default() };
    // Refused straight out, then refused again from the queue: it waits, counted once.
    full(true);
    post_send(&mut p, &a, send(1));
    assert_eq!(p.a.flush_transmit(), Flushed { moved: false, backpressured: 1, ud_dropped: 0 });
    assert!(p.a.transmit_waits());
    assert_eq!(p.a.flush_transmit(), Flushed::default(), "a datagram waiting is counted once");
    // With room again, the next one does not overtake it: it queues behind.
    full(false);
    post_send(&mut p, &a, send(2));
    assert!(egress.take().is_empty() && p.a.has_transmit());
    assert_eq!(p.a.flush_transmit(), Flushed { moved: true, backpressured: 0, ud_dropped: 0 });
    assert!(!p.a.transmit_waits() && !p.a.has_transmit());
    let sent = egress.take();
    let psns: Vec<u32> = sent
        .iter()
        .map(|d| packet::parse_datagram(d).expect("whole datagrams").1.bth.psn.value())
        .collect();
    assert_eq!(psns, [0xFFFFF0, 0xFFFFF1], "in order, each once");
    assert_eq!(p.a.stats().tx_packets, 2);
}

#[test]
fn a_ud_datagram_the_egress_refuses_on_a_flush_is_dropped() {
    let (mut p, a, _b, qa, qb) = ud_pair();
    let egress = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(egress.clone())));
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(roce_av(2))));
    egress.full.store(true, std::sync::atomic::Ordering::Relaxed);
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 6)],
        ud: Some(UdTarget { ah, remote_qpn: qb, remote_qkey: 0x2222 }),
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, qa, &[wr]).unwrap();
    assert!(p.a.has_transmit(), "refused straight out, it is queued");
    assert_eq!(p.a.flush_transmit(), Flushed { moved: true, backpressured: 0, ud_dropped: 1 });
    assert!(!p.a.has_transmit() && !p.a.transmit_waits());
    assert!(egress.take().is_empty());
}

// ---------------- a host that paces flows apart ----------------

/// `poll_transmit_where` hands out the first datagram the host accepts, so one QP held back
/// does not hold back another queued behind it, and each QP's datagrams keep their order.
#[test]
fn poll_transmit_where_skips_a_held_back_qp_and_keeps_each_qps_order() {
    let o = ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() };
    let (mut p, a, b) = setup(o);
    let (a2, b2) = (side(&mut p.a, ALL), side(&mut p.b, ALL));
    connect(&mut p.a, a2.qpn, 2, b2.qpn, o);
    connect(&mut p.b, b2.qpn, 1, a2.qpn, o);
    let dest = |t: &Transmit| u32::from_be_bytes([0, t.data[33], t.data[34], t.data[35]]);
    for (s, t, wr_id, len) in [(&a, &b, 1u64, 3000u32), (&a2, &b2, 2, 500)] {
        s.mem.write(0, &pattern(len as usize, wr_id as u8)).unwrap();
        let sg = [sge(s, 0, len)];
        let wr = SendWr {
            wr_id,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: t.mem.addr(), rkey: t.key },
            ..Default::default()
        };
        p.a.post_send(p.now, s.qpn, &[wr]).unwrap();
    }
    // Queued: QP 1's three packets, then QP 2's one. Hold QP 1 back: QP 2's comes out.
    let first = p.a.poll_transmit_where(|t| dest(t) != b.qpn).expect("QP 2's WRITE");
    assert_eq!(dest(&first), b2.qpn);
    assert!(p.a.poll_transmit_where(|_| false).is_none(), "nothing accepted, nothing taken");
    // QP 1's, in PSN order, all still there.
    let rest: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit_where(|_| true)).collect();
    assert_eq!(rest.len(), 3);
    assert!(rest.iter().all(|t| dest(t) == b.qpn));
    let psns: Vec<u32> = rest.iter().map(|t| parsed(t).1).collect();
    assert_eq!(psns, [psns[0], psns[0] + 1, psns[0] + 2]);
    for t in std::iter::once(first).chain(rest) {
        p.b.handle_packet(p.now, &t.data);
    }
    p.drive();
    assert_eq!(read_mem(&b, 0, 3000), pattern(3000, 1));
    assert_eq!(read_mem(&b2, 0, 500), pattern(500, 2));
    let wcs = [poll_all(&mut p.a, a.cq), poll_all(&mut p.a, a2.cq)];
    assert_eq!(
        wcs.map(|w| w.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>()),
        [vec![(1, WcStatus::Success)], vec![(2, WcStatus::Success)]]
    );
}

#[test]
fn an_ack_timeout_while_the_peer_has_not_read_its_inbox_waits_again_and_spends_no_retry() {
    // A software responder whose NIC thread is starved or stopped has the request in its
    // inbox, unread: nothing is lost, and a hardware NIC would have answered. The timer
    // waits another timeout each time; once the peer reads, recovery is as ever.
    let opts = ConnOpts { timeout: 8, retry_cnt: 1, ..ConnOpts::default() };
    let (mut p, a, b) = setup(opts);
    let wire = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(wire.clone())));
    a.mem.write(0, b"late").unwrap();
    let wr = SendWr {
        wr_id: 7,
        sg_list: &[sge(&a, 0, 4)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(p.now, a.qpn, &[wr]).unwrap();
    let sent = wire.take();
    assert_eq!(sent.len(), 1, "the WRITE went out");
    wire.busy.store(true, std::sync::atomic::Ordering::Relaxed);
    // Far more timeouts than retry_cnt allows: none spends a retry, none resends.
    for _ in 0..5 {
        let due = p.a.next_timeout().expect("the ACK timer stays armed");
        p.a.handle_timeout(due);
    }
    let s = p.a.stats();
    assert_eq!((s.timeouts, s.timeouts_deferred, s.retries, s.retransmits), (0, 5, 0, 0));
    assert!(wire.take().is_empty(), "nothing sent again while the peer has it unread");
    assert!(poll_all(&mut p.a, a.cq).is_empty(), "no completion: the WRITE is still on its way");
    // The peer reads it at last: its ACK completes the WRITE, with its bytes there.
    wire.busy.store(false, std::sync::atomic::Ordering::Relaxed);
    p.b.handle_packet(p.now, &sent[0]);
    for t in std::iter::from_fn(|| p.b.poll_transmit()) {
        p.a.handle_packet(p.now, &t.data);
    }
    let wcs = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [(7, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(read_mem(&b, 0, 4), b"late");
    // A peer that does not hold the request unread is a loss again: retries are spent.
    let (mut p, a, _b) = setup(opts);
    let wire = FakeEgress { to: 2, ..FakeEgress::default() };
    p.a.set_egress(Some(Box::new(wire.clone())));
    let wr = SendWr {
        wr_id: 8,
        sg_list: &[sge(&a, 0, 4)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: 0, rkey: 0 },
        ..Default::default()
    };
    p.a.post_send(p.now, a.qpn, &[wr]).unwrap();
    for _ in 0..2 {
        let due = p.a.next_timeout().expect("armed");
        p.a.handle_timeout(due);
    }
    let s = p.a.stats();
    assert_eq!((s.timeouts, s.timeouts_deferred, s.retry_exceeded), (2, 0, 1));
    let wcs = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(8, WcStatus::RetryExcErr)]
    );
}
