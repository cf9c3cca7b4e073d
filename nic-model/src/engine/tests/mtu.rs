//! Payload length against the path MTU: packets too long for the responder's MTU.

use super::*;

/// A requester on a larger path MTU than its responder sends packets the responder must not
/// take: an RC responder NAKs them (invalid request) and enters ERR, so the requester's WR
/// fails with REM_INV_REQ_ERR and nothing is written past what the MTU allows.
#[test]
fn rc_packets_longer_than_the_responders_mtu_are_invalid_requests() {
    for (len, what) in [(600u32, "an ONLY packet over the MTU"), (1500, "a FIRST packet")] {
        let mut p = Pair::new();
        let a = side(&mut p.a, ALL);
        let b = side(&mut p.b, ALL);
        connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
        connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts { mtu: Mtu::Mtu256, ..ConnOpts::default() });
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 4096)] }]).unwrap();
        a.mem.write(0, &pattern(len as usize, 3)).unwrap();
        let wr = SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, len)],
            send_flags: signaled(),
            ..Default::default()
        };
        post_send(&mut p, &a, wr);
        p.drive();
        assert!(
            p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x61)),
            "{what}: NAK invalid request"
        );
        let wc = poll_all(&mut p.a, a.cq);
        assert_eq!(
            wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::RemInvReqErr)],
            "{what}"
        );
        assert_eq!(p.b.stats().rx_bad_length, 1, "{what}");
        assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err), "{what}");
        assert_eq!(
            poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(9, WcStatus::WrFlushErr)],
            "{what}: the receive is flushed, not filled"
        );
        assert_eq!(read_mem(&b, 0, 16), vec![0; 16], "{what}: nothing landed");
    }
}

/// A UC packet whose payload breaks the MTU rules is dropped with its message (UC has no
/// NAK); the next message arrives normally.
#[test]
fn uc_packets_that_break_the_mtu_lose_their_message() {
    let (mut p, _, b, _, qb) = uc_pair();
    for id in 1..=2 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 1024)] }]).unwrap();
    }
    // Forged by hand: UC SEND ONLY packets from A at B's expected PSNs, on a 256-byte path.
    let forge = |psn: u32, payload: &[u8]| {
        let bth = packet::Bth {
            opcode: Opcode::UC_SEND_ONLY,
            pkey: 0xFFFF,
            dest_qp: qb,
            psn: packet::Psn::new(psn),
            ..Default::default()
        };
        let ip = packet::IpUdp { src: ip_of_slot(1), dst: ip_of_slot(2), ..Default::default() };
        let mut bytes = Vec::new();
        packet::emit_datagram(&ip, &packet::Packet::new(bth, payload), &mut bytes).unwrap();
        bytes
    };
    let now = p.now;
    p.b.handle_packet(now, &forge(5, &pattern(300, 1)));
    assert_eq!(p.b.stats().rx_bad_length, 1);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "nothing delivered");
    // The next message arrives whole, in the receive the dropped one did not take.
    p.b.handle_packet(now, &forge(6, b"after"));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len, w.qp_num)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 5, qb)]
    );
    assert_eq!(read_mem(&b, 1024, 5), b"after");
}
