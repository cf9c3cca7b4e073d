//! A host's lazy clock (`Now::Lazy`): read only when a timer is armed, and timers armed without it
//! stamped at the host's next look.

use super::*;

/// A post through a lazy clock (a real-time host's) arms the ACK timer without reading the
/// clock; the timer is due "at once" until the host stamps it, and then fires only a full
/// timeout after the stamp: late is allowed, early is not.
#[test]
fn post_with_lazy_clock_arms_an_unstamped_timer_that_the_host_stamps() {
    let (mut p, a, _b) = setup(ConnOpts { retry_cnt: 2, timeout: 8, ..Default::default() });
    let timeout = 4096u64 << 8;
    let sg = [sge(&a, 0, 4)];
    let wr = SendWr { wr_id: 1, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    let mut clock = || -> Nanos { panic!("a post that arms the ACK timer reads no clock") };
    p.a.post_send_at(&mut Now::Lazy(&mut clock), a.qpn, &[wr]).unwrap();
    let sent = p.a.stats().tx_packets;
    assert_eq!(sent, 1, "the SEND went out");
    // The host takes it onto the wire, where it is lost: the retry below sends it again.
    assert!(p.a.poll_transmit().is_some());
    assert_eq!(p.a.next_timeout(), Some(0), "an unstamped timer is due at once");

    // The host's next look at the clock: stamping gives the deadline, firing nothing.
    let t0 = 5_000_000;
    p.a.handle_timeout(t0);
    assert_eq!(p.a.next_timeout(), Some(t0 + timeout));
    assert_eq!(p.a.stats().timeouts, 0, "stamping is not a timeout");
    p.a.handle_timeout(t0 + timeout - 1);
    assert_eq!(p.a.stats().timeouts, 0, "not before a full timeout after the stamp");
    assert_eq!(p.a.stats().tx_packets, sent, "no retransmission yet");

    // A full timeout after the stamp the requester retries: the SEND goes again.
    p.a.handle_timeout(t0 + timeout);
    assert_eq!(p.a.stats().timeouts, 1);
    assert_eq!(p.a.stats().retransmits, 1);
    assert_eq!(p.a.next_timeout(), Some(t0 + 2 * timeout), "re-armed from the retry");

    // stamp_timers alone leaves stamped timers as they are.
    p.a.stamp_timers(t0 + timeout + 77);
    assert_eq!(p.a.next_timeout(), Some(t0 + 2 * timeout));
}

/// A lazy clock (a real-time host's) is never read on the data path: a received SEND arms
/// nothing, and an ACK that leaves packets in flight restarts the ACK timer unstamped, to be
/// stamped at the host's next look at the clock (`post_with_lazy_clock_arms_…` covers posts).
#[test]
fn a_lazy_clock_is_not_read_on_the_data_path() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let timeout_ns = req::ack_timeout_ns(ConnOpts::default().timeout).unwrap();
    for id in 1..=2 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"twice").unwrap();
    let sg = [sge(&a, 0, 5)];
    let send = |id| SendWr { wr_id: id, sg_list: &sg, ..Default::default() };
    let posted_at = p.now;
    p.a.post_send(posted_at, a.qpn, &[SendWr { send_flags: signaled(), ..send(1) }]).unwrap();
    p.a.post_send(posted_at, a.qpn, &[SendWr { send_flags: signaled(), ..send(2) }]).unwrap();
    assert_eq!(p.a.next_timeout(), Some(posted_at + timeout_ns), "armed by the first send");

    // Deliver each datagram with a clock that counts how often it is read.
    let mut reads = 0;
    let mut deliver = |to: &mut Nic, t: Transmit, clock_ns: u64| {
        let mut clock = || {
            reads += 1;
            clock_ns
        };
        to.handle_packet_at(&mut Now::Lazy(&mut clock), &t.data);
    };
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(sends.len(), 2);
    let mut acks = Vec::new();
    for t in sends {
        deliver(&mut p.b, t, 1);
        // Drained after each SEND, so that the two ACKs are not coalesced into one.
        acks.extend(std::iter::from_fn(|| p.b.poll_transmit()));
    }
    assert_eq!(acks.len(), 2, "one ACK per message");
    let mut acks = acks.into_iter();
    let first_ack_at = posted_at + 5_000;
    deliver(&mut p.a, acks.next().unwrap(), first_ack_at);
    let second_ack_at = posted_at + 9_000;
    deliver(&mut p.a, acks.next().unwrap(), second_ack_at);
    // The responder armed nothing; the first ACK left send 2 in flight and restarted the
    // timer, unstamped; the last ACK stopped it.
    assert_eq!(reads, 0, "neither the SENDs nor the ACKs read the clock");
    assert_eq!(p.a.next_timeout(), None);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!(
        received.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(),
        [(1, 5), (2, 5)]
    );

    // A timer restarted by a lazily read time is due a full timeout after that time.
    p.a.post_send(posted_at, a.qpn, &[send(3), send(4)]).unwrap();
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 3, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 4, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.handle_packet(second_ack_at, &sends[0].data);
    let ack = p.b.poll_transmit().expect("the ACK of send 3");
    p.b.handle_packet(second_ack_at, &sends[1].data);
    let mut at_ns = || -> Nanos { panic!("restarting the timer reads no clock") };
    p.a.handle_packet_at(&mut Now::Lazy(&mut at_ns), &ack.data);
    assert_eq!(p.a.next_timeout(), Some(0), "restarted, waiting for its stamp");
    // The host's next timer check stamps it: due a full timeout after that check.
    let checked_at = second_ack_at + 20_000;
    p.a.handle_timeout(checked_at);
    assert_eq!(p.a.next_timeout(), Some(checked_at + timeout_ns));
    assert_eq!(p.a.stats().timeouts, 0);
}
