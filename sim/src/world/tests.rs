//! Tests of the world itself: links, faults, routing, determinism; through the sim backend.

use verbs_api::{QpCap, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode};

use super::*;
use crate::conn::{ConnOpts, Endpoint};

const CAP: QpCap = QpCap {
    max_send_wr: 256,
    max_recv_wr: 256,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 64,
};

fn pair(world: &SimWorld, opts: ConnOpts) -> (Endpoint, Endpoint) {
    connect_rc(world, 0, 1, CAP, 1024, 1 << 20, &opts, (100, 200)).unwrap()
}

fn drain(cq: &verbs_api::CompletionQueue) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 32];
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn write(a: &Endpoint, b: &Endpoint, wr_id: u64, off: usize, len: u32) {
    let sge = [a.mr.sge(off, len)];
    let wr = SendWr {
        wr_id,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: verbs_api::RdmaTarget { remote_addr: b.mr.addr() + off as u64, rkey: b.mr.rkey() },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
}

#[test]
fn send_and_write_cross_a_clean_link() {
    let world = SimWorld::mesh(1, 2, LinkParams::default());
    let (a, b) = pair(&world, ConnOpts::default());
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[b.mr.sge(0, 4096)] }]).unwrap();
    a.mr.write(0, b"hello, world").unwrap();
    let sge = [a.mr.sge(0, 12)];
    let send =
        SendWr { wr_id: 1, sg_list: &sge, send_flags: SendFlags::SIGNALED, ..Default::default() };
    a.qp.post_send(&[send]).unwrap();
    let t0 = world.now_ns();
    assert!(world.run_until_idle(10_000));
    assert!(world.now_ns() > t0, "time passed in the world");
    let wa = drain(&a.cq);
    let wb = drain(&b.cq);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!((wb[0].wr_id, wb[0].byte_len, wb[0].status), (7, 12, WcStatus::Success));
    assert_eq!(b.mr.read_vec(0, 12).unwrap(), b"hello, world");
}

#[test]
fn bandwidth_and_latency_set_the_completion_time() {
    let params = LinkParams { latency_ns: 10_000, bandwidth_gbps: 8.0, ..LinkParams::default() };
    let world = SimWorld::mesh(1, 2, params);
    let (a, b) = pair(&world, ConnOpts { mtu: verbs_api::Mtu::Mtu4096, ..ConnOpts::default() });
    let t0 = world.now_ns();
    write(&a, &b, 1, 0, 64 * 1024);
    let cq = a.cq.clone();
    let mut done = Vec::new();
    let outcome = world.run_until_pred(
        || {
            done.extend(drain(&cq));
            !done.is_empty()
        },
        u64::MAX,
    );
    assert_eq!(outcome, RunOutcome::Satisfied);
    let dt = world.now_ns() - t0;
    // 64 KiB at 1 byte/ns is at least 65.5 µs of serialisation plus 2 × 10 µs of latency.
    assert!(dt >= 65_536 + 20_000, "{dt}");
    assert!(dt < 65_536 * 2 + 40_000, "{dt}");
    assert_eq!(done[0].status, WcStatus::Success);
}

#[test]
fn lossy_link_still_delivers_and_counts_faults() {
    let params =
        LinkParams { loss: 0.05, dup: 0.05, reorder_jitter_ns: 3_000, ..LinkParams::default() };
    let world = SimWorld::mesh(42, 2, params);
    let opts = ConnOpts { timeout: 8, retry_cnt: 7, ..ConnOpts::default() };
    let (a, b) = pair(&world, opts);
    let pattern: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.mr.write(0, &pattern).unwrap();
    for i in 0..10 {
        write(&a, &b, i, i as usize * 20_000, 20_000);
    }
    assert!(world.run_until_idle(10_000_000));
    let wc = drain(&a.cq);
    assert_eq!(wc.len(), 10);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    assert_eq!(b.mr.read_vec(0, pattern.len()).unwrap(), pattern);
    let w = world.lock();
    let t = w.total_stats();
    assert!(t.lost > 0 && t.duplicated > 0 && t.jittered > 0, "{t:?}");
    assert!(w.nic(0).unwrap().stats().retransmits > 0);
}

#[test]
fn corruption_is_caught_by_the_icrc_and_truncation_by_the_parser() {
    for (corrupt, truncate) in [(0.2, 0.0), (0.0, 0.2)] {
        let params = LinkParams { corrupt, truncate, ..LinkParams::default() };
        let world = SimWorld::mesh(5, 2, params);
        let (a, b) = pair(&world, ConnOpts { timeout: 8, ..ConnOpts::default() });
        a.mr.write(0, &[0x5a; 50_000]).unwrap();
        for i in 0..5 {
            write(&a, &b, i, i as usize * 10_000, 10_000);
        }
        assert!(world.run_until_idle(1_000_000));
        assert!(drain(&a.cq).iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(b.mr.read_vec(0, 50_000).unwrap(), vec![0x5a; 50_000]);
        let w = world.lock();
        let t = w.total_stats();
        let rx = |n| w.nic(n).unwrap().stats().clone();
        let (bad_icrc, malformed) =
            (rx(0).rx_bad_icrc + rx(1).rx_bad_icrc, rx(0).rx_malformed + rx(1).rx_malformed);
        if corrupt > 0.0 {
            assert!(t.corrupted > 0);
            assert_eq!(bad_icrc, t.corrupted, "every flipped bit fails the ICRC");
        } else {
            assert!(t.truncated > 0);
            assert_eq!(malformed, t.truncated, "every truncated packet is rejected");
        }
    }
}

#[test]
fn a_partition_drops_packets_already_in_flight() {
    let params = LinkParams { latency_ns: 100_000, ..LinkParams::default() };
    let world = SimWorld::mesh(1, 2, params);
    let (a, b) = pair(&world, ConnOpts { timeout: 12, retry_cnt: 7, ..ConnOpts::default() });
    write(&a, &b, 1, 0, 64);
    world.run_for(10_000);
    {
        let mut w = world.lock();
        assert!(w.pending_events() > 0);
        w.set_partition(0, 1, true);
        let heal_at = w.now_ns() + 1_000_000;
        let l = w.link_between(0, 1).unwrap();
        w.schedule(heal_at, l, LinkChange::Heal);
        let l = w.link_between(1, 0).unwrap();
        w.schedule(heal_at, l, LinkChange::Heal);
    }
    assert!(world.run_until_idle(100_000));
    let w = world.lock();
    assert_eq!(w.links()[0].stats.partition_drops, 1, "the WRITE in flight was dropped on arrival");
    drop(w);
    let wc = drain(&a.cq);
    assert_eq!(wc[0].status, WcStatus::Success, "retried after the heal");
}

#[test]
fn permanent_partition_exhausts_retries() {
    let world = SimWorld::mesh(1, 2, LinkParams::default());
    let (a, b) = pair(&world, ConnOpts { timeout: 4, retry_cnt: 2, ..ConnOpts::default() });
    world.lock().set_partition(0, 1, true);
    write(&a, &b, 1, 0, 64);
    write(&a, &b, 2, 64, 64);
    assert!(world.run_until_idle(100_000));
    let wc = drain(&a.cq);
    assert_eq!(wc.len(), 2);
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    assert_eq!(wc[1].status, WcStatus::WrFlushErr);
}

#[test]
fn a_full_queue_tail_drops_through_a_switch() {
    let mut w = World::new(3);
    // Incast without congestion control loses whole bursts; retry as rxe does (7 = forever).
    // Ask for an ACK every 4 packets: the engine re-ACKs a duplicate only if it carries AckReq,
    // and a go-back-N burst's tail (where the only AckReq would be) is what a full queue drops.
    w.configure_nics(|c| {
        c.retry_cnt_7_infinite = true;
        c.ack_every = 4;
    });
    let senders: Vec<NodeId> = (0..4).map(|i| w.add_node(format!("s{i}"))).collect();
    let rx = w.add_node("rx");
    let sw = w.add_switch("sw");
    let fast = LinkParams { bandwidth_gbps: 100.0, ..LinkParams::default() };
    for &s in &senders {
        w.add_duplex(s, sw, fast.clone());
    }
    let bottleneck = LinkParams { bandwidth_gbps: 10.0, queue_limit: 8, ..LinkParams::default() };
    let (down, _) = w.add_duplex(sw, rx, bottleneck);
    let world = SimWorld::new(w);
    let opts = ConnOpts { timeout: 8, mtu: verbs_api::Mtu::Mtu4096, ..ConnOpts::default() };
    let mut eps = Vec::new();
    for (i, &s) in senders.iter().enumerate() {
        eps.push(connect_rc(&world, s, rx, CAP, 256, 1 << 20, &opts, (i as u32, 1000)).unwrap());
    }
    for (a, b) in &eps {
        write(a, b, 1, 0, 256 * 1024);
    }
    assert!(world.run_until_idle(1_000_000));
    for (a, _) in &eps {
        let wc = drain(&a.cq);
        assert_eq!(wc[0].status, WcStatus::Success);
    }
    assert!(world.lock().links()[down].stats.queue_drops > 0);
}

/// A capture sink the test can read back after the world is done with it.
#[derive(Clone, Default)]
struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn same_seed_same_trace_and_capture_other_seed_other_trace() {
    // Each run's endpoints stay alive until the end, so the runs' MR memory sits at different
    // heap addresses: only what the simulator chose may reach the wire.
    let run = |seed: u64| {
        let params = LinkParams { loss: 0.02, reorder_jitter_ns: 500, ..LinkParams::default() };
        let world = SimWorld::mesh(seed, 2, params);
        let pcap = SharedBuf::default();
        world.lock().capture_to(Box::new(pcap.clone()), true).unwrap();
        let (a, b) = pair(&world, ConnOpts { timeout: 8, ..ConnOpts::default() });
        for i in 0..20 {
            write(&a, &b, i, i as usize * 4096, 4096);
        }
        assert!(world.run_until_idle(1_000_000));
        let mut w = world.lock();
        w.finish_capture().unwrap();
        let bytes = pcap.0.lock().unwrap().clone();
        ((w.trace().hash(), w.trace().len()), bytes, (a, b))
    };
    let (first, second, other) = (run(9), run(9), run(10));
    assert_eq!(first.0, second.0, "same seed, same trace");
    assert!(first.1.len() > 20 * 4096, "the capture holds the writes");
    let differ = first.1.iter().zip(&second.1).position(|(x, y)| x != y);
    assert_eq!(first.1.len(), second.1.len(), "same seed, same capture length");
    assert_eq!(differ, None, "same seed, byte-identical capture (first difference at this offset)");
    assert_ne!(first.0 .0, other.0 .0, "another seed, another trace");
    assert_ne!(first.1, other.1, "another seed, another capture");
}

/// A datagram the trace can tell apart: `index` in the BTH PSN field (the bytes are not a valid
/// RoCEv2 packet; the receiving NIC counts it as malformed).
fn tagged(index: u32) -> Vec<u8> {
    let mut d = vec![0u8; 48];
    d[37..40].copy_from_slice(&index.to_be_bytes()[1..]);
    d
}

#[test]
fn packets_arrive_in_time_order_whether_they_keep_their_place_or_overtake() {
    // Infinitely fast, so every packet offered at once finishes serialising at once and
    // arrives at now + latency + its jitter; equal times keep the order they were sent in.
    let params = LinkParams { bandwidth_gbps: 0.0, reorder_jitter_ns: 4, ..LinkParams::default() };
    let mut w = World::new(11);
    let (a, b) = (w.add_node("a"), w.add_node("b"));
    let (link, _) = w.add_duplex(a, b, params.clone());
    w.trace_mut().set_keep(true);
    let t0 = w.now_ns();
    for i in 0..100 {
        w.offer(link, tagged(i));
    }
    // Then a lower latency: these packets overtake the ones still in flight.
    w.change_link(link, LinkChange::Params(LinkParams { latency_ns: 500, ..params }));
    for i in 100..200 {
        w.offer(link, tagged(i));
    }
    assert_eq!(w.pending_events(), 200);
    assert!(w.run_until_idle(1_000));
    assert_eq!(w.pending_events(), 0);

    let records = w.trace().records();
    let jitter = |i: u32| {
        records.iter().find(|r| r.kind == TraceKind::Jitter && r.psn == i).map_or(0, |r| r.arg)
    };
    let latency = |i: u32| if i < 100 { 1_000 } else { 500 };
    let mut expected: Vec<(u64, u32)> =
        (0..200).map(|i| (t0 + latency(i) + jitter(i), i)).collect();
    expected.sort();
    let delivered: Vec<(u64, u32)> = records
        .iter()
        .filter(|r| r.kind == TraceKind::Deliver)
        .map(|r| (r.time_ns, r.psn))
        .collect();
    assert_eq!(delivered, expected, "every packet once, at its time, FIFO among equal times");
    let sent_order = delivered.windows(2).all(|p| p[0].1 < p[1].1);
    assert!(!sent_order, "jitter and the latency change reordered some packets");
    assert_eq!(w.nic(b).unwrap().stats().rx_malformed, 200);
}

/// Node 0 READs `len` bytes (a pattern) from node 1 at `mtu` over `world`, then runs the world
/// until it is idle; the READ's completions and the bytes that landed.
fn read_across(world: &SimWorld, mtu: verbs_api::Mtu, len: usize) -> (Vec<WorkCompletion>, bool) {
    let opts = ConnOpts { mtu, timeout: 8, retry_cnt: 3, ..ConnOpts::default() };
    let (a, b) = connect_rc(world, 0, 1, CAP, 64, len + 4096, &opts, (0xFFFF00, 200)).unwrap();
    let data: Vec<u8> =
        (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    b.mr.write(0, &data).unwrap();
    let sge = [a.mr.sge(7, len as u32)];
    let wr = SendWr {
        wr_id: 77,
        sg_list: &sge,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: verbs_api::RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
    assert!(world.run_until_idle(50_000_000));
    let landed = a.mr.read_vec(7, len).unwrap() == data
        && a.mr.read_vec(0, 7).unwrap() == [0; 7]
        && a.mr.read_vec(7 + len, 64).unwrap() == [0; 64];
    (drain(&a.cq), landed)
}

/// Whether `wc` is the one work completion of a successful READ of `len` bytes.
fn read_succeeded(wc: &[WorkCompletion], len: usize) -> bool {
    matches!(wc, [w] if (w.wr_id, w.status, w.opcode, w.byte_len)
        == (77, WcStatus::Success, verbs_api::WcOpcode::RdmaRead, len as u32))
}

#[test]
fn a_read_burst_longer_than_the_responders_own_link_queue_is_paced_not_dropped() {
    // 4,865 bytes at MTU 256 is 20 responses made as one burst, onto the responder's own link
    // that queues 8: the link paces its NIC, so nothing is dropped and nothing is asked twice.
    let params = LinkParams { queue_limit: 8, ..LinkParams::default() };
    let world = SimWorld::mesh(1, 2, params);
    let (wc, landed) = read_across(&world, verbs_api::Mtu::Mtu256, 4865);
    assert!(read_succeeded(&wc, 4865), "{wc:?}");
    assert!(landed, "the bytes of the READ landed in place, and no others");
    let w = world.lock();
    assert_eq!(w.total_stats().queue_drops, 0);
    assert_eq!(w.nic(0).unwrap().stats().retransmits, 0, "the READ was asked for once");
}

/// Node 0 (the requester) and node 1 (the responder) joined through a switch whose link to
/// the requester runs at `gbps` with `queue_limit`; the responder's own link runs at 100 Gbit/s.
fn through_a_bottleneck(seed: u64, gbps: f64, queue_limit: usize) -> (SimWorld, LinkId) {
    let mut w = World::new(seed);
    let (rq, rs) = (w.add_node("requester"), w.add_node("responder"));
    let sw = w.add_switch("sw");
    w.add_duplex(rs, sw, LinkParams::default());
    let slow = LinkParams { bandwidth_gbps: gbps, queue_limit, ..LinkParams::default() };
    let (to_requester, _) = w.add_duplex(sw, rq, slow);
    (SimWorld::new(w), to_requester)
}

#[test]
fn a_2_mib_read_completes_through_the_default_switch_queue() {
    // 2,048 responses at MTU 1024 from a 100 Gbit/s port into a 25 Gbit/s one whose switch
    // queue is the default 1,024 packets: the switch drops the burst's tail, and each retry
    // asks only for what has not arrived.
    let (world, to_requester) = through_a_bottleneck(1, 25.0, LinkParams::default().queue_limit);
    let (wc, landed) = read_across(&world, verbs_api::Mtu::Mtu1024, 2 << 20);
    assert!(read_succeeded(&wc, 2 << 20), "{wc:?}");
    assert!(landed);
    assert!(world.lock().links()[to_requester].stats.queue_drops > 0, "the switch dropped tails");
}

#[test]
fn a_read_burst_tail_dropped_at_a_switch_completes() {
    // The responder's burst crosses a switch onto a slower link with a queue of 8: the switch
    // drops the tail of every burst, and every retry still moves the READ on.
    let (world, to_requester) = through_a_bottleneck(5, 10.0, 8);
    let (wc, landed) = read_across(&world, verbs_api::Mtu::Mtu256, 4865);
    assert!(read_succeeded(&wc, 4865), "{wc:?}");
    assert!(landed);
    assert!(world.lock().links()[to_requester].stats.queue_drops > 0, "the switch dropped tails");
}

#[test]
fn a_nic_is_paced_by_its_own_link_and_never_tail_drops_there() {
    // A clean 25 Gbit/s link whose queue holds 16 packets, and 1 MiB of WRITEs posted at once
    // (256 packets at MTU 4096): the NIC sends at the line rate, its send queue holds the rest.
    let params = LinkParams { bandwidth_gbps: 25.0, queue_limit: 16, ..LinkParams::default() };
    let world = SimWorld::mesh(1, 2, params);
    let (a, b) = pair(&world, ConnOpts { mtu: verbs_api::Mtu::Mtu4096, ..ConnOpts::default() });
    let pattern: Vec<u8> =
        (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    a.mr.write(0, &pattern).unwrap();
    let t0 = world.now_ns();
    for i in 0..8 {
        write(&a, &b, i, i as usize * 131_072, 131_072);
    }
    let cq = a.cq.clone();
    let mut done = Vec::new();
    let outcome = world.run_until_pred(
        || {
            done.extend(drain(&cq));
            done.len() == 8
        },
        u64::MAX,
    );
    assert_eq!(outcome, RunOutcome::Satisfied);
    let dt = world.now_ns() - t0;
    assert!(done.iter().all(|w| w.status == WcStatus::Success), "{done:?}");
    assert_eq!(b.mr.read_vec(0, pattern.len()).unwrap(), pattern);
    let w = world.lock();
    for (i, l) in w.links().iter().enumerate() {
        assert_eq!(l.stats.queue_drops, 0, "link {i} tail-dropped its own NIC's packets");
    }
    let s = w.nic(0).unwrap().stats();
    assert_eq!((s.retransmits, s.timeouts), (0, 0), "a clean link needs no recovery");
    // 1 MiB in 256 datagrams of 4,154 bytes is 340.3 µs at 25 Gbit/s, plus 2 µs of latency
    // and the last ACK's way back.
    let gbps = (1u64 << 20) as f64 * 8.0 / dt as f64;
    assert!(gbps > 24.0 && gbps <= 25.0, "goodput {gbps:.2} Gbit/s on a 25 Gbit/s link ({dt} ns)");
}

/// Two leaves of four hosts under four spines: each host writes 64 KiB to the host under the
/// other leaf. Every flow keeps one path (its UDP source port, from its QP, picks it), so no
/// packet arrives out of order, and the eight flows spread over the spines instead of all
/// taking the first (ECMP).
#[test]
fn equal_cost_paths_spread_flows_over_the_spines_and_keep_each_in_order() {
    let mut w = World::new(11);
    let hosts: Vec<NodeId> = (0..8).map(|i| w.add_node(format!("h{i}"))).collect();
    let leaves = [w.add_switch("leaf0"), w.add_switch("leaf1")];
    let spines: Vec<NodeId> = (0..4).map(|i| w.add_switch(format!("spine{i}"))).collect();
    let p = LinkParams { bandwidth_gbps: 100.0, ..LinkParams::default() };
    for (i, &h) in hosts.iter().enumerate() {
        w.add_duplex(h, leaves[i / 4], p.clone());
    }
    let mut up = Vec::new();
    for &l in &leaves {
        for &s in &spines {
            up.push((s, w.add_duplex(l, s, p.clone()).0));
        }
    }
    let world = SimWorld::new(w);
    let opts = ConnOpts { mtu: verbs_api::Mtu::Mtu4096, ..ConnOpts::default() };
    let mut eps = Vec::new();
    for i in 0..8 {
        let (from, to) = (hosts[i], hosts[(i + 4) % 8]);
        eps.push(connect_rc(&world, from, to, CAP, 64, 1 << 17, &opts, (i as u32, 500)).unwrap());
    }
    for (a, b) in &eps {
        write(a, b, 1, 0, 64 * 1024);
    }
    assert!(world.run_until_idle(1_000_000));
    for (a, _) in &eps {
        let wc = drain(&a.cq);
        assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    }
    let w = world.lock();
    let used: std::collections::BTreeSet<NodeId> =
        up.iter().filter(|(_, l)| w.links()[*l].stats.delivered > 0).map(|(s, _)| *s).collect();
    assert!(used.len() >= 3, "the flows took spines {used:?} of 4");
    for n in 0..w.nodes().len() {
        if let Some(nic) = w.nic(n) {
            let s = nic.stats();
            assert_eq!((s.seq_naks_sent, s.retransmits), (0, 0), "node {n}: nothing out of order");
        }
    }
}

/// The next links of every (from, to), found the slow way: hop counts to `to` relaxed over
/// every link until they settle (a packet relays only through switches), then every link out
/// of `from` into a node one hop nearer, in link-index order.
fn reference_routes(w: &World) -> Vec<Vec<Vec<LinkId>>> {
    let n = w.nodes().len();
    let relays = |v: NodeId, to: NodeId| v == to || w.nodes()[v].is_switch();
    (0..n)
        .map(|from| {
            (0..n)
                .map(|to| {
                    let mut d = vec![u64::MAX; n];
                    d[to] = 0;
                    for _ in 0..n {
                        for l in w.links() {
                            if relays(l.dst, to) && d[l.dst] != u64::MAX {
                                d[l.src] = d[l.src].min(d[l.dst] + 1);
                            }
                        }
                    }
                    if from == to || d[from] == u64::MAX {
                        return Vec::new();
                    }
                    (0..w.links().len())
                        .filter(|&id| {
                            let l = &w.links()[id];
                            l.src == from
                                && relays(l.dst, to)
                                && d[l.dst].checked_add(1) == Some(d[from])
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The route table as the world holds it: the links of every (from, to).
fn world_routes(w: &mut World) -> Vec<Vec<Vec<LinkId>>> {
    let n = w.nodes().len();
    (0..n).map(|from| (0..n).map(|to| w.next_links(from, to).to_vec()).collect()).collect()
}

/// Routing picks, for every (from, to), every first link of a shortest path and nothing else,
/// in link-index order: on a fat tree (equal-cost spines), a chain whose middle node is a NIC
/// (which does not relay), parallel links between two switches, and a node no link reaches.
#[test]
fn the_route_table_holds_every_shortest_first_link_and_nothing_else() {
    let p = LinkParams::default;
    let mut tree = World::new(1);
    let hosts: Vec<NodeId> = (0..6).map(|i| tree.add_node(format!("h{i}"))).collect();
    let leaves = [tree.add_switch("leaf0"), tree.add_switch("leaf1"), tree.add_switch("leaf2")];
    let spines: Vec<NodeId> = (0..3).map(|i| tree.add_switch(format!("s{i}"))).collect();
    for (i, &h) in hosts.iter().enumerate() {
        tree.add_duplex(h, leaves[i / 2], p());
    }
    for &l in &leaves {
        for &s in &spines {
            tree.add_duplex(l, s, p());
        }
    }
    let mut chain = World::new(1);
    let (a, sw0, mid, sw1, b) = (
        chain.add_node("a"),
        chain.add_switch("sw0"),
        chain.add_node("mid"),
        chain.add_switch("sw1"),
        chain.add_node("b"),
    );
    let (sw2, c, lonely) = (chain.add_switch("sw2"), chain.add_node("c"), chain.add_node("lonely"));
    let a_up = chain.add_duplex(a, sw0, p()).0;
    for (x, y) in [(sw0, mid), (mid, sw1), (sw1, b), (sw2, c)] {
        chain.add_duplex(x, y, p());
    }
    let parallel = vec![chain.add_link(sw1, sw2, p()), chain.add_link(sw1, sw2, p())];
    chain.add_link(lonely, sw0, p());
    for w in [&mut tree, &mut chain] {
        let want = reference_routes(w);
        assert_eq!(world_routes(w), want);
    }
    // The spot checks the reference could get wrong with the table: a host under another
    // leaf is reached through its own leaf only, and its leaf through every spine.
    assert_eq!(tree.next_links(leaves[0], hosts[5]).len(), 3, "leaf0 reaches h5 by 3 spines");
    assert_eq!(tree.next_links(leaves[2], hosts[5]).len(), 1, "leaf2 reaches h5 directly");
    let routes = world_routes(&mut chain);
    assert_eq!(routes[a][mid], vec![a_up]);
    assert!(routes[a][b].is_empty(), "the only way is through mid, a NIC, which does not relay");
    assert_eq!(routes[sw1][c], parallel, "both parallel links lead to c");
    assert!(routes[sw0][lonely].is_empty(), "no link leads to lonely");
    let n = tree.nodes().len();
    assert!(tree.next_links(hosts[0], n).is_empty(), "no node {n}");
    assert!(tree.next_links(n, hosts[0]).is_empty(), "no node {n}");
}

/// The route table is computed once per topology, never per packet: a fat tree carrying eight
/// 64 KiB WRITEs computes it once; only a change of topology computes it again.
#[test]
fn routes_are_computed_once_per_topology_however_much_traffic_runs() {
    let mut w = World::new(3);
    let hosts: Vec<NodeId> = (0..4).map(|i| w.add_node(format!("h{i}"))).collect();
    let leaves = [w.add_switch("leaf0"), w.add_switch("leaf1")];
    let spine = w.add_switch("spine");
    for (i, &h) in hosts.iter().enumerate() {
        w.add_duplex(h, leaves[i / 2], LinkParams::default());
    }
    for &l in &leaves {
        w.add_duplex(l, spine, LinkParams::default());
    }
    assert_eq!(w.route_computations(), 0, "nothing routed yet");
    let world = SimWorld::new(w);
    let opts = ConnOpts { mtu: verbs_api::Mtu::Mtu4096, ..ConnOpts::default() };
    let mut eps = Vec::new();
    for i in 0..4 {
        let (from, to) = (hosts[i], hosts[(i + 2) % 4]);
        eps.push(connect_rc(&world, from, to, CAP, 64, 1 << 17, &opts, (i as u32, 9)).unwrap());
    }
    for (a, b) in &eps {
        write(a, b, 1, 0, 64 * 1024);
        write(a, b, 2, 64 * 1024, 64 * 1024);
    }
    assert!(world.run_until_idle(1_000_000));
    for (a, _) in &eps {
        assert_eq!(drain(&a.cq).len(), 2);
    }
    let mut w = world.lock();
    assert!(w.total_stats().delivered >= 8 * 16 * 4, "every packet crossed four links");
    assert_eq!(w.route_computations(), 1, "one table for the whole run");
    w.prepare_routes();
    assert_eq!(w.route_computations(), 1, "nothing changed: nothing to compute");
    w.add_switch("spare");
    w.prepare_routes();
    assert_eq!(w.route_computations(), 2, "a new node: a new table");
}
