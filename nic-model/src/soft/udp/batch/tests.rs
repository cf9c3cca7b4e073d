//! `sendmmsg`'s results as each datagram's outcome, and a batch on real sockets.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use super::{outcomes_of, sendmmsg_to, RecvBatch, RECV_MAX, SEND_MAX};
use crate::engine::SendOutcome;
use SendOutcome::{Full, Sent, Unreachable};

fn errno(e: i32) -> std::io::Result<usize> {
    Err(std::io::Error::from_raw_os_error(e))
}

/// The kernel took some: those are sent, the rest untouched (offered again); took none: the
/// first is refused for want of room (EAGAIN, ENOBUFS) or lost (any other error), nothing
/// after it decided.
#[test]
fn each_datagram_s_outcome_follows_what_the_kernel_took() {
    let mut out = [Full; 8];
    assert_eq!(outcomes_of(Ok(5), 5, &mut out), 5);
    assert_eq!(out[..5], [Sent; 5]);
    let mut out = [Unreachable; 8];
    assert_eq!(outcomes_of(Ok(3), 5, &mut out), 3, "a partial send");
    assert_eq!(out[..4], [Sent, Sent, Sent, Unreachable], "the rest untouched");
    assert_eq!(outcomes_of(Ok(9), 5, &mut out), 5, "never more than were offered");
    for (result, first) in [
        (errno(libc::EAGAIN), Full),
        (errno(libc::ENOBUFS), Full),
        (Ok(0), Full),
        (errno(libc::EMSGSIZE), Unreachable),
        (errno(libc::ENETUNREACH), Unreachable),
        (errno(libc::EHOSTUNREACH), Unreachable),
    ] {
        let mut out = [Sent; 8];
        assert_eq!(outcomes_of(result, 5, &mut out), 1);
        assert_eq!(out[0], first);
    }
    assert_eq!(outcomes_of(Ok(1), 0, &mut [Sent; 4]), 0, "nothing offered");
    assert_eq!(outcomes_of(Ok(4), 4, &mut [Full; 2]), 2, "no more than room for outcomes");
}

/// One `sendmmsg` of a full batch of datagrams of different lengths to two receivers:
/// each arrives once, in order, byte for byte, from the one sending socket.
#[test]
fn a_batch_arrives_in_order_byte_for_byte() {
    let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let tx = UdpSocket::bind(lo).expect("a UDP socket on 127.0.0.1");
    let rx = [UdpSocket::bind(lo).expect("receiver"), UdpSocket::bind(lo).expect("receiver")];
    for r in &rx {
        r.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    }
    let to: Vec<SocketAddrV4> = rx
        .iter()
        .map(|r| match r.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => unreachable!("bound to IPv4"),
        })
        .collect();
    let datagrams: Vec<Vec<u8>> =
        (0..SEND_MAX).map(|i| (0..40 + 17 * i).map(|j| (i * 7 + j) as u8).collect()).collect();
    let payloads: Vec<&[u8]> = datagrams.iter().map(Vec::as_slice).collect();
    let dsts: Vec<SocketAddrV4> = (0..SEND_MAX).map(|i| to[i % 2]).collect();
    let mut sent = 0;
    for _ in 0..100 {
        if sent == SEND_MAX {
            break;
        }
        // The loopback may take a batch in parts; the rest goes again, as the engine does.
        match sendmmsg_to(tx.as_raw_fd(), &payloads[sent..], &dsts[sent..]) {
            Ok(n) => sent += n,
            Err(e) if super::is_full(&e) => std::thread::sleep(std::time::Duration::from_millis(1)),
            Err(e) => panic!("sendmmsg: {e}"),
        }
    }
    assert_eq!(sent, SEND_MAX);
    let mut buf = vec![0u8; 4096];
    for (i, d) in datagrams.iter().enumerate() {
        let (n, from) = rx[i % 2].recv_from(&mut buf).expect("each datagram arrives");
        assert_eq!(&buf[..n], &d[..], "datagram {i}");
        assert_eq!(from, tx.local_addr().unwrap());
    }
    for r in &rx {
        r.set_nonblocking(true).unwrap();
        assert!(r.recv_from(&mut buf).is_err(), "nothing twice");
    }
}

/// `recvmmsg` takes up to a batch; the datagrams are handed on one at a time, in order, each
/// with its sender and headroom; those a round leaves wait for the next (nothing is received
/// over them), and the next batch is received only when they are all taken.
#[test]
fn received_batches_hand_on_each_datagram_once_in_order() {
    let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let tx = UdpSocket::bind(lo).expect("a UDP socket on 127.0.0.1");
    let rx = UdpSocket::bind(lo).expect("receiver");
    rx.set_nonblocking(true).unwrap();
    let mut batch = RecvBatch::new(28);
    assert_eq!(batch.fill(rx.as_raw_fd(), 64, false), 0, "nothing there");
    let total = RECV_MAX + 4;
    let datagrams: Vec<Vec<u8>> = (0..total).map(|i| vec![i as u8; 30 + i]).collect();
    for d in &datagrams {
        tx.send_to(d, rx.local_addr().unwrap()).expect("sent");
    }
    let from = match tx.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        std::net::SocketAddr::V6(_) => unreachable!("bound to IPv4"),
    };
    let mut got = Vec::new();
    // A round that takes three, then stops (a completion): the rest wait, and a fill does not
    // receive over them.
    assert_eq!(batch.fill(rx.as_raw_fd(), 64, true), 1, "one, with recvfrom");
    let (slot, len, sender) = batch.take().expect("waiting");
    assert_eq!((sender, &slot[28..28 + len]), (from, &datagrams[0][..]));
    got.push(datagrams[0].clone());
    let mut deadline = 0;
    while batch.fill(rx.as_raw_fd(), 64, false) == 0 {
        deadline += 1;
        assert!(deadline < 5000, "the datagrams arrive on the loopback");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let first = batch.waiting();
    assert!(first <= RECV_MAX);
    for _ in 0..3.min(first) {
        let (slot, len, sender) = batch.take().expect("waiting");
        assert_eq!(sender, from);
        got.push(slot[28..28 + len].to_vec());
    }
    assert_eq!(batch.fill(rx.as_raw_fd(), 64, false), first - 3.min(first), "the rest wait");
    assert_eq!(batch.peek().map(<[u8]>::len), Some(datagrams[got.len()].len()));
    for _ in 0..1000 {
        if got.len() == total {
            break;
        }
        if batch.fill(rx.as_raw_fd(), 64, false) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        while let Some((slot, len, sender)) = batch.take() {
            assert_eq!(sender, from);
            got.push(slot[28..28 + len].to_vec());
        }
    }
    assert_eq!(got, datagrams, "each once, in order, byte for byte");
    assert_eq!(batch.fill(rx.as_raw_fd(), 64, false), 0, "nothing twice");
}

/// The UDP wire's `send_batch` on real sockets: a run of datagrams for another host leaves
/// with one `sendmmsg`, each in the kernel's form (as `send` makes it); a multicast datagram
/// in the run goes alone and is unreachable; the engine's way of offering the rest again
/// (its queue) gets every datagram there once, in order, byte for byte, and counts each.
#[test]
fn the_egress_sends_a_queue_in_batches_each_datagram_as_send_would() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::engine::{Transmit, SEND_BATCH};
    use crate::packet::{self, Bth, IpUdp, Opcode, Packet, Psn, IPV4_UDP_LEN, ROCE_UDP_PORT};
    use crate::soft::counters::Tally;
    use crate::soft::udp::{kernel_form, share::Share, UdpEgress};

    // A loopback address of this test's own for the peer's port 4791 (all of 127/8 is the
    // loopback), so that nothing else on the host holds it.
    let pid = std::process::id();
    let peer = [127, 91, (pid >> 8) as u8, pid as u8 | 1];
    let Ok(rx) = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(peer), ROCE_UDP_PORT)) else {
        eprintln!("skipped: 127.91.x.y:4791 is taken");
        return;
    };
    rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let own = [127, 0, 0, 1];
    let sock = Arc::new(UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(own), 0)).unwrap());
    let port = sock.local_addr().unwrap().port();
    let tally = Arc::new(Tally::default());
    let mut egress = UdpEgress {
        sock,
        port,
        own,
        share: Arc::new(Share::claim(&format!("batchtest{pid}"), own).expect("a block")),
        local: None,
        six: Arc::from(Vec::new()),
        tally: tally.clone(),
        scratch: Vec::new(),
        head: Vec::new(),
        bufs: Vec::new(),
    };
    let datagram = |dst: [u8; 4], psn: u32, len: usize| {
        let ip = IpUdp { src: own, dst, src_port: 0xc000, ident: psn as u16, ..IpUdp::default() };
        let bth = Bth {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qp: 0x12,
            psn: Psn::new(psn),
            ..Bth::default()
        };
        let payload: Vec<u8> = (0..len).map(|i| (i + psn as usize) as u8).collect();
        let mut out = Vec::new();
        packet::emit_datagram(&ip, &Packet::new(bth, &payload), &mut out).expect("emits");
        Transmit { dst, data: out }
    };
    // 100 datagrams, one of them multicast (no route here), more than a batch.
    let mut queue: std::collections::VecDeque<Transmit> = (0..100u32)
        .map(|i| match i {
            30 => datagram([224, 0, 0, 1], i, 8),
            _ => datagram(peer, i, 40 + (i as usize * 13) % 1000),
        })
        .collect();
    let want: Vec<Vec<u8>> = queue
        .iter()
        .filter(|t| t.dst == peer)
        .map(|t| {
            let mut d = t.data.clone();
            kernel_form(&mut d, port);
            d[IPV4_UDP_LEN..].to_vec()
        })
        .collect();
    let mut outcomes = [Full; SEND_BATCH];
    let (mut calls, mut unreachable) = (0, 0);
    while !queue.is_empty() {
        calls += 1;
        assert!(calls < 1000, "the queue drains");
        let n = crate::engine::Egress::send_batch(&mut egress, queue.as_slices().0, &mut outcomes);
        assert!(n >= 1, "at least one outcome");
        for &o in &outcomes[..n] {
            match o {
                Sent => {}
                Unreachable => unreachable += 1,
                // The loopback's buffer was full: offered again, as the engine does.
                Full => break,
            }
            queue.pop_front();
        }
    }
    assert_eq!(unreachable, 1, "the multicast datagram");
    assert!(calls <= 6, "batches, not one call a datagram: {calls} calls");
    let mut buf = vec![0u8; 2048];
    for (i, w) in want.iter().enumerate() {
        let (n, from) = rx.recv_from(&mut buf).expect("each datagram arrives");
        assert_eq!(&buf[..n], &w[..], "datagram {i}, the kernel's form byte for byte");
        assert_eq!(from, std::net::SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(own), port)));
    }
    rx.set_nonblocking(true).unwrap();
    assert!(rx.recv_from(&mut buf).is_err(), "nothing twice");
    assert_eq!(tally.xmit_packets.load(Ordering::Relaxed), 99);
    assert_eq!(tally.unreachable.load(Ordering::Relaxed), 1);
}
