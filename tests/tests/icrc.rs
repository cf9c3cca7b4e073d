//! The ICRC where nobody looks (`docs/architecture.md`): a soft device whose side of the wire
//! nothing observes (no capture, tap or fault plan) sends the datagrams it puts straight into
//! a peer's ring slot with their ICRC unset, and the slot says so; a receiver that nothing
//! observes checks everything else, and one that something observes sets the ICRC before
//! anything sees the datagram. These tests hold what a user relies on: every datagram a tap
//! or capture shows is a whole, valid RoCEv2 datagram on either side, whoever sent it; the
//! messages arrive with their bytes and completions either way; and a datagram that claims an
//! ICRC still has it checked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nic_model::engine::{ip_of_slot, slot_of_ip};
use nic_model::packet::{parse_datagram, with_icrc_ipv4, Opcode};
use nic_model::soft::{Soft, TapDir};
use nic_model::wire::{Fabric, InboxConfig};
use softverbs_sim::conn::{self, ConnOpts, Endpoint};
use softverbs_tests::{pattern, FabricDir, RcPair};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// softverbs0 (a) and softverbs1 (b), connected.
fn pair(test: &str) -> RcPair {
    RcPair::new(test, cap(), 1 << 16, &ConnOpts::default(), |_| {})
}

/// Every datagram a tap saw, with its direction.
type Seen = Arc<Mutex<Vec<(TapDir, Vec<u8>)>>>;

fn tap(soft: &Soft, device: &str) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    soft.set_tap(
        device,
        Some(Arc::new(move |dir: TapDir, d: &[u8]| s.lock().unwrap().push((dir, d.to_vec())))),
    )
    .unwrap();
    seen
}

/// `n` SENDs of 8 to 40 bytes from a to b, each received into its own buffer and checked:
/// the bytes that landed and both sides' completions.
fn sends(p: &RcPair, n: u64) {
    let (a, b) = (&p.a, &p.b);
    for i in 0..n {
        let off = 256 * i as usize;
        let rsge = [b.mr.sge(off, 256)];
        b.qp.post_recv(&[RecvWr { wr_id: 100 + i, sg_list: &rsge }]).unwrap();
        let len = 8 + 4 * (i as usize % 9);
        let data = pattern(i, 0, len);
        a.mr.write(off, &data).unwrap();
        let sge = [a.mr.sge(off, len as u32)];
        let wr = SendWr {
            wr_id: i,
            sg_list: &sge,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        a.qp.post_send(&[wr]).unwrap();
        let sent = a.cq.poll_n(1, WAIT).expect("the SEND's completion")[0];
        let got = b.cq.poll_n(1, WAIT).expect("the receive's completion")[0];
        let want = |wr_id, opcode, byte_len, qp_num| WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode,
            byte_len,
            qp_num,
            ..WorkCompletion::default()
        };
        // As rxe does, a send completion's byte_len is the message's length.
        assert_eq!(sent, want(i, WcOpcode::Send, len as u32, a.qp.qp_num()), "SEND {i}");
        // An RC receive names the sending QP, as rxe's does.
        let recv = WorkCompletion {
            src_qp: a.qp.qp_num(),
            ..want(100 + i, WcOpcode::Recv, len as u32, b.qp.qp_num())
        };
        assert_eq!(got, recv, "receive {i}");
        assert_eq!(b.mr.read_vec(off, len).unwrap(), data, "message {i}'s bytes");
    }
}

/// The datagrams `device` dropped for a bad ICRC.
fn bad_icrcs(p: &RcPair, device: &str) -> u64 {
    p.soft.stats(device).unwrap().nic.rx_bad_icrc
}

/// Every datagram is whole: it parses, ICRC checked, as an RC SEND ONLY or ACKNOWLEDGE.
fn all_whole(seen: &Seen, dir: TapDir, expect: &[Opcode]) -> usize {
    let seen = seen.lock().unwrap();
    let mut n = 0;
    for (d, bytes) in seen.iter().filter(|(d, _)| *d == dir) {
        let (_, pkt) = parse_datagram(bytes)
            .unwrap_or_else(|e| panic!("{d:?} datagram {n} is not whole: {e:?}"));
        assert!(expect.contains(&pkt.bth.opcode), "{d:?}: {:?}", pkt.bth.opcode);
        n += 1;
    }
    n
}

#[test]
fn a_tap_on_the_receiver_only_sees_whole_datagrams_from_a_sender_that_left_the_icrc_unset() {
    let p = pair("icrc_rx_tap");
    let seen = tap(&p.soft, "softverbs1");
    sends(&p, 10);
    // b received the SENDs (sent by a, which nothing observes) and sent the ACKs.
    assert_eq!(all_whole(&seen, TapDir::Rx, &[Opcode::RC_SEND_ONLY]), 10);
    assert!(all_whole(&seen, TapDir::Tx, &[Opcode::RC_ACKNOWLEDGE]) >= 1);
    assert_eq!((bad_icrcs(&p, "softverbs0"), bad_icrcs(&p, "softverbs1")), (0, 0));
}

#[test]
fn a_tap_on_the_sender_only_sees_whole_datagrams_both_ways() {
    let p = pair("icrc_tx_tap");
    let seen = tap(&p.soft, "softverbs0");
    sends(&p, 10);
    assert_eq!(all_whole(&seen, TapDir::Tx, &[Opcode::RC_SEND_ONLY]), 10);
    // The ACKs came from b, which nothing observes: made whole for a's tap.
    assert!(all_whole(&seen, TapDir::Rx, &[Opcode::RC_ACKNOWLEDGE]) >= 1);
    assert_eq!((bad_icrcs(&p, "softverbs0"), bad_icrcs(&p, "softverbs1")), (0, 0));
}

#[test]
fn an_unobserved_device_marks_what_it_leaves_unset_and_an_observed_one_sends_it_whole() {
    // softverbs0 sends UD datagrams to a raw inbox (no NIC behind it), which reads the slots.
    let dir = FabricDir::new("icrc_raw");
    let fabric = Fabric::open(Some(dir.path())).unwrap();
    let inbox =
        fabric.create_inbox(InboxConfig { slots: 16, slot_size: 4352, gid: [0; 16] }).unwrap();
    let soft = Soft::shared_memory(Some(dir.path())).unwrap();
    let ctx = soft.open("softverbs0").unwrap();
    let ep = Endpoint::new(&ctx, QpType::Ud, cap(), 64, 4096).unwrap();
    let attrs = [
        (
            QpAttr { qp_state: QpState::Init, port_num: 1, qkey: 0x1111, ..Default::default() },
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        ),
        (QpAttr { qp_state: QpState::Rtr, ..Default::default() }, QpAttrMask::STATE),
        (
            QpAttr { qp_state: QpState::Rts, sq_psn: 0, ..Default::default() },
            QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        ),
    ];
    for (attr, mask) in attrs {
        ep.qp.modify(&attr, mask).unwrap();
    }
    let gid = Gid::from_ipv4(ip_of_slot(inbox.lid()));
    let ah = ep.pd.create_ah(&conn::av_to(gid, &ConnOpts::default())).unwrap();
    let send = |id: u64| {
        ep.mr.write(0, &pattern(id, 0, 24)).unwrap();
        let sge = [ep.mr.sge(0, 24)];
        let wr = SendWr {
            wr_id: id,
            sg_list: &sge,
            send_flags: SendFlags::SIGNALED,
            ud: Some(UdTarget { ah: ah.clone(), remote_qpn: 0x77, remote_qkey: 0x1111 }),
            ..Default::default()
        };
        ep.qp.post_send(&[wr]).unwrap();
        let wc = ep.cq.poll_n(1, WAIT).expect("the UD SEND's completion")[0];
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
        let mut got = Vec::new();
        let n = inbox.recv_while_marked(usize::MAX, |bytes, unset| {
            got.push((bytes.to_vec(), unset));
            true
        });
        assert_eq!(n, 1, "one datagram per SEND");
        got.pop().unwrap()
    };
    let check = |bytes: &[u8], id: u64| {
        let (_, pkt) = parse_datagram(bytes).expect("whole");
        assert_eq!(
            (pkt.bth.opcode, pkt.bth.dest_qp, pkt.payload),
            (Opcode::UD_SEND_ONLY, 0x77, &pattern(id, 0, 24)[..])
        );
    };
    // Nothing observes softverbs0: the ICRC is left unset, and the slot says so.
    let (bytes, unset) = send(1);
    assert!(unset, "the slot is marked");
    assert_eq!(bytes[bytes.len() - 4..], [0; 4], "four zero bytes where the ICRC goes");
    assert!(parse_datagram(&bytes).is_err(), "without its ICRC it is not a whole datagram");
    let whole = with_icrc_ipv4(&bytes);
    check(&whole, 1);
    // A tap on softverbs0: whole, unmarked, and the bytes the tap saw.
    let seen = tap(&soft, "softverbs0");
    let (bytes, unset) = send(2);
    assert!(!unset, "an observed device's datagram carries its ICRC");
    check(&bytes, 2);
    assert_eq!(seen.lock().unwrap().as_slice(), [(TapDir::Tx, bytes.clone())]);
    // The tap taken off again: unset again.
    soft.set_tap("softverbs0", None).unwrap();
    assert!(send(3).1);
}

#[test]
fn a_datagram_that_claims_an_icrc_has_it_checked() {
    // A datagram sent into b's inbox by a raw sender, unmarked, with a wrong ICRC: dropped and
    // counted, as on any RoCE port. The same bytes marked as having none are taken (every
    // other check holds), so the mark, not the bytes, decides whether the ICRC is checked.
    let p = pair("icrc_claimed");
    let fabric = Fabric::open(Some(p.dir.path())).unwrap();
    let b_ip = p.b.info(0).unwrap().gid.to_ipv4().expect("b's IPv4 GID");
    let to_b = fabric.connect(slot_of_ip(b_ip)).unwrap();
    let (a, b) = (&p.a, &p.b);
    // The datagram a would send for its first SEND: taken from a's tap, then a's QP reset
    // so that it sends nothing itself.
    let seen = tap(&p.soft, "softverbs0");
    let rsge = [b.mr.sge(0, 256)];
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &rsge }]).unwrap();
    b.qp.post_recv(&[RecvWr { wr_id: 8, sg_list: &rsge }]).unwrap();
    a.mr.write(0, b"claimed!").unwrap();
    let sge = [a.mr.sge(0, 8)];
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &sge,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    }])
    .unwrap();
    a.cq.poll_n(1, WAIT).expect("the SEND's completion");
    let got = b.cq.poll_n(1, WAIT).expect("the receive")[0];
    assert_eq!((got.wr_id, got.status, got.byte_len), (7, WcStatus::Success, 8));
    let first = seen.lock().unwrap().iter().find(|(d, _)| *d == TapDir::Tx).unwrap().1.clone();
    // The same SEND again (a duplicate PSN, which b acknowledges without a second receive)
    // would prove nothing: give it the next PSN, as a's next SEND would have.
    let (_, pkt) = parse_datagram(&first).unwrap();
    let mut next = first.clone();
    let psn = pkt.bth.psn.value() + 1;
    let at = 28 + 9; // the BTH's PSN, after IPv4 and UDP
    next[at..at + 3].copy_from_slice(&psn.to_be_bytes()[1..]);
    let n = next.len();
    next[n - 4..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let before = bad_icrcs(&p, "softverbs1");
    to_b.send_marked(&next, false).unwrap();
    assert!(b.cq.poll_n(1, Duration::from_millis(300)).is_err(), "a bad ICRC is dropped");
    assert_eq!(bad_icrcs(&p, "softverbs1"), before + 1, "and counted");
    to_b.send_marked(&next, true).unwrap();
    let got = b.cq.poll_n(1, WAIT).expect("taken when marked")[0];
    assert_eq!((got.wr_id, got.status, got.byte_len), (8, WcStatus::Success, 8));
}
