//! The sample scenarios in `sim/scenarios/` run in-process through the library: each finishes
//! as it expects, and a second run with the same seed has the same trace hash and a
//! byte-identical capture. A different seed gives a different trace when faults are random.
//! Every message that succeeded left exactly its seeded bytes and completions (the runner
//! checks them; `run.rs` tests that a damaged byte fails a run).

use std::path::PathBuf;

use softverbs_sim::world::scenario::{run, Report, RunOptions, Scenario};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    Scenario::load(&path).unwrap()
}

fn run_seed(sc: &Scenario, seed: Option<u64>) -> Report {
    run_capture(sc, seed, None)
}

fn run_capture(sc: &Scenario, seed: Option<u64>, pcap: Option<PathBuf>) -> Report {
    // The seed first, so a run that fails in any way can be replayed.
    eprintln!("scenario {}: seed {}", sc.name, seed.unwrap_or(sc.seed));
    let r = run(sc, &RunOptions { seed, pcap, ..RunOptions::default() }).unwrap();
    let mut text = Vec::new();
    r.write_summary(&mut text).unwrap();
    eprintln!("{}", String::from_utf8_lossy(&text));
    r
}

fn check(name: &str) -> Report {
    let sc = scenario(name);
    // Removed with its captures when dropped, even when an assertion below fails.
    let dir = tempfile::Builder::new().prefix("softverbs-scenario-").tempdir().unwrap();
    let pcaps =
        [dir.path().join(format!("{name}.1.pcap")), dir.path().join(format!("{name}.2.pcap"))];
    let first = run_capture(&sc, None, Some(pcaps[0].clone()));
    assert!(first.passed, "{name}: {:?}", first.failure);
    for c in &first.connections {
        let ok = c.statuses.get("success").copied().unwrap_or(0) as usize;
        assert_eq!(c.delivered, ok, "{name}: {}: every success had its data checked", c.name);
        assert!(c.check_failure.is_none() && (ok == 0 || c.verified_bytes > 0), "{c:?}");
    }
    let second = run_capture(&sc, None, Some(pcaps[1].clone()));
    assert_eq!(first.trace_hash, second.trace_hash, "{name}: same seed, different trace");
    assert_eq!(first.trace_records, second.trace_records);
    assert_eq!(first.completion_ns, second.completion_ns);
    let [a, b] = pcaps.each_ref().map(|p| std::fs::read(p).unwrap());
    assert!(a.len() > 24, "{name}: the capture holds packets");
    let differ = a.iter().zip(&b).position(|(x, y)| x != y);
    assert_eq!((a.len(), differ), (b.len(), None), "{name}: same seed, different capture");
    first
}

#[test]
fn lossy_link() {
    let r = check("lossy-link.toml");
    let fault = |k: &str| r.faults.iter().find(|f| f.0 == k).unwrap().1;
    for k in ["loss", "duplicate", "jitter", "corrupt", "truncate"] {
        assert!(fault(k) > 0, "no {k} fault was injected");
    }
    assert!(r.rx_bad_icrc > 0 && r.retransmits > 0);
    assert!(r.rx_malformed > 0, "truncated packets are malformed, apart from bad ICRCs");
    // Exactly once: each of the 150 messages delivered, its bytes and completions checked.
    assert_eq!(r.messages_delivered, 150);
    // The sender's NIC is paced by its link: nothing is tail-dropped there, and go-back-N
    // resends about a round trip of packets per loss, not nearly everything (95 % before).
    assert_eq!(r.fault("queue-drop"), 0, "a NIC's own link never tail-drops");
    assert!(r.retransmit_share() < 0.4, "{:.3}", r.retransmit_share());
    assert!(r.goodput_gbps() > 4.0, "{:.3} Gbit/s of 25", r.goodput_gbps());
    let other = run_seed(&scenario("lossy-link.toml"), Some(2));
    assert!(other.passed);
    assert_ne!(other.trace_hash, r.trace_hash, "another seed gives other random faults");
}

#[test]
fn lossy_link_topology_without_faults_streams_at_the_line_rate() {
    // The same link and workload with the faults taken away: the sender's NIC is paced by its
    // own link, so nothing is dropped anywhere, nothing is sent twice, and the goodput is
    // that of a 25 Gbit/s link.
    let mut sc = scenario("lossy-link.toml");
    for l in &mut sc.links {
        let p = &mut l.params;
        (p.loss, p.dup, p.reorder_jitter_ns) = (Some(0.0), Some(0.0), Some(0));
        (p.corrupt, p.truncate) = (Some(0.0), Some(0.0));
        assert_eq!(p.queue_limit, Some(512), "the sample keeps its finite queue");
    }
    let r = run_seed(&sc, None);
    assert!(r.passed, "{:?}", r.failure);
    assert_eq!(r.messages_delivered, 150);
    assert!(r.faults.iter().all(|f| f.1 == 0), "no drop, no fault: {:?}", r.faults);
    assert_eq!((r.retransmits, r.timeouts, r.seq_naks), (0, 0, 0));
    let gbps = r.goodput_bytes as f64 * 8.0 / r.elapsed_ns as f64;
    assert!(gbps > 20.0, "goodput {gbps:.2} Gbit/s on a 25 Gbit/s link");
}

#[test]
fn rnr_storm() {
    let r = check("rnr-storm.toml");
    assert!(r.rnr_naks > 0);
}

#[test]
fn incast() {
    let r = check("incast.toml");
    assert_eq!(r.connections.len(), 8);
    assert!(r.fault("queue-drop") > 0, "the bottleneck tail-drops");
    // Only the switch's link towards rx may drop: the senders' own links pace them.
}

#[test]
fn partition_heals() {
    let r = check("partition-heals.toml");
    assert!(r.faults.iter().any(|f| f.0 == "partition-drop" && f.1 > 0));
    let cut = &r.connections[1];
    assert_eq!(cut.statuses.get("transport retry counter exceeded"), Some(&1), "{cut:?}");
}

#[test]
fn a_run_outside_its_expect_bounds_fails_and_says_which() {
    let mut sc = scenario("lossy-link.toml");
    sc.expect.min_goodput_gbps = Some(30.0);
    let r = run_seed(&sc, None);
    assert!(!r.passed);
    let why = r.failure.unwrap();
    assert!(why.starts_with("goodput ") && why.ends_with("is below min_goodput_gbps 30"), "{why}");
    let mut sc = scenario("lossy-link.toml");
    sc.expect.max_retransmit_share = Some(0.01);
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(
        why.contains("% of the packets sent were retransmissions, above max_retransmit_share 0.01"),
        "{why}"
    );
    let mut sc = scenario("rnr-storm.toml");
    sc.expect.min_queue_drops = Some(1);
    let why = run_seed(&sc, None).failure.unwrap();
    assert_eq!(why, "0 tail drops at switch queues, below min_queue_drops 1");
    let mut sc = scenario("incast.toml");
    sc.expect.max_queue_drops = Some(0);
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(why.ends_with("tail drops at switch queues, above max_queue_drops 0"), "{why}");
}

#[test]
fn bad_scenarios_are_errors_not_panics() {
    assert!(Scenario::from_toml("node = 3").is_err());
    let sc = Scenario::from_toml(
        r#"
        [[node]]
        name = "a"
        [[connection]]
        from = "a"
        to = "nobody"
        ops = [ { op = "send", size = 1 } ]
        "#,
    )
    .unwrap();
    assert!(run(&sc, &RunOptions::default()).unwrap_err().contains("nobody"));
}

/// The records of a pcap file the simulator wrote: each one's datagram (after the 14-byte
/// Ethernet header).
fn pcap_datagrams(bytes: &[u8]) -> Vec<Vec<u8>> {
    let (mut out, mut at) = (Vec::new(), 24);
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    while at + 16 <= bytes.len() {
        let end = (at + 16 + word(at + 8) as usize).min(bytes.len());
        out.push(bytes[(at + 16 + 14).min(end)..end].to_vec());
        at = end;
    }
    out
}

#[test]
fn dcqcn_incast_holds_the_queue_low_without_a_drop() {
    let r = check("dcqcn-incast.toml");
    assert!(r.net.ecn_marked > 0 && r.net.cnps_sent > 0, "{:?}", r.net);
    assert_eq!(r.net.cnps_sent, r.net.cnps_received, "every CNP reached its sender");
    assert_eq!(r.fault("queue-drop"), 0);
    // The same incast without congestion control: the queue fills and stays full.
    let mut sc = scenario("dcqcn-incast.toml");
    sc.congestion = None;
    let plain = run_seed(&sc, None);
    assert_eq!((plain.net.cnps_sent, plain.net.ecn_marked), (0, 0), "NICs send Not-ECT");
    assert!(
        plain.net.mean_switch_queue_bytes > 5.0 * r.net.mean_switch_queue_bytes,
        "without DCQCN {:.0} bytes, with {:.0}",
        plain.net.mean_switch_queue_bytes,
        r.net.mean_switch_queue_bytes
    );
}

#[test]
fn dcqcn_fair_shares_the_port() {
    let r = check("dcqcn-fair.toml");
    let shared: Vec<f64> = r.connections.iter().map(|c| c.shared_goodput_gbps).collect();
    assert!(shared.iter().all(|&g| g > 9.0 && g < 16.0), "{shared:?}");
}

#[test]
fn cnps_and_ce_marks_are_on_the_wire_as_nics_send_them() {
    let sc = scenario("dcqcn-fair.toml");
    let dir = tempfile::Builder::new().prefix("softverbs-cnp-").tempdir().unwrap();
    let pcap = dir.path().join("cnp.pcap");
    let r = run_capture(&sc, None, Some(pcap.clone()));
    assert!(r.passed, "{:?}", r.failure);
    let records = pcap_datagrams(&std::fs::read(&pcap).unwrap());
    let cnps: Vec<&Vec<u8>> = records.iter().filter(|d| d.get(28) == Some(&0x81)).collect();
    assert_eq!(cnps.len() as u64, r.net.cnps_received);
    for d in &cnps {
        // IPv4 ‖ UDP to 4791 ‖ BTH (BECN set, P_Key 0xFFFF, PSN 0) ‖ 16 reserved ‖ ICRC.
        assert_eq!(d.len(), 60);
        assert_eq!(&d[22..24], &4791u16.to_be_bytes());
        assert_eq!(d[32] & 0x40, 0x40);
        assert_eq!(&d[30..32], &[0xff, 0xff]);
        assert_eq!(&d[37..40], &[0, 0, 0]);
        assert!(d[40..56].iter().all(|&b| b == 0));
    }
    let data = records.iter().filter(|d| d.get(28).is_some_and(|&op| op < 0x11));
    let ce = data.clone().filter(|d| d[1] & 3 == 3).count() as u64;
    assert_eq!(ce, r.net.ce_received, "every CE mark the receiver counted is in the capture");
    assert!(data.clone().all(|d| d[1] & 3 != 0), "data leaves ECN-capable");
}

#[test]
fn congestion_bounds_fail_naming_the_bound() {
    let mut sc = scenario("dcqcn-fair.toml");
    sc.expect.max_mean_switch_queue_bytes = Some(1000);
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(why.ends_with("above max_mean_switch_queue_bytes 1000"), "{why}");
    let mut sc = scenario("dcqcn-fair.toml");
    sc.expect.min_cnps = Some(1_000_000);
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(why.ends_with("CNPs sent, below min_cnps 1000000"), "{why}");
    let mut sc = scenario("dcqcn-fair.toml");
    sc.expect.min_jain_fairness = Some(1.0);
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(why.contains("is below min_jain_fairness 1"), "{why}");
    let bad = Scenario::from_toml(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/dcqcn-fair.toml"),
        )
        .unwrap()
        .replace("ecn_pmax = 0.01", "ecn_pmax = 2.0"),
    )
    .unwrap();
    let err = run(&bad, &RunOptions::default()).unwrap_err();
    assert!(err.contains("pmax must be within [0, 1], not 2"), "{err}");
    let bad = Scenario::from_toml(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/dcqcn-fair.toml"),
        )
        .unwrap()
        .replace("algorithm = \"dcqcn\"", "algorithm = \"bbr\""),
    )
    .unwrap();
    let err = run(&bad, &RunOptions::default()).unwrap_err();
    assert!(err.contains("algorithm \"bbr\" is not known"), "{err}");
}

/// A connection's goodput in a report, by name.
fn goodput_of(r: &Report, name: &str) -> f64 {
    r.connections.iter().find(|c| c.name == name).unwrap().goodput_gbps
}

#[test]
fn pfc_incast_is_lossless_where_incast_drops() {
    let r = check("pfc-incast.toml");
    assert_eq!((r.fault("queue-drop"), r.retransmits, r.net.headroom_drops), (0, 0, 0));
    assert!(r.net.pfc_pauses >= 8 && r.net.xon_frames > 0, "{:?}", r.net);
    assert!(r.net.deadlock.is_none());
}

#[test]
fn pfc_hol_blocks_the_flow_to_an_idle_port() {
    let r = check("pfc-hol.toml");
    let mut sc = scenario("pfc-hol.toml");
    sc.pfc = None;
    sc.expect = Default::default();
    let lossy = run_seed(&sc, None);
    assert!(lossy.fault("queue-drop") > 0, "without PFC the incast drops");
    let (with, without) = (goodput_of(&r, "s0 -> rx1"), goodput_of(&lossy, "s0 -> rx1"));
    assert!(with * 3.0 < without, "the victim: {with} Gbit/s with PFC, {without} without");
}

#[test]
fn pfc_spreads_congestion_to_an_innocent_flow_two_hops_back() {
    let r = check("pfc-spreading.toml");
    // Both switches paused somebody: sw1 paused sw0's uplink, sw0 its senders.
    let mut sc = scenario("pfc-spreading.toml");
    sc.pfc = None;
    sc.expect = Default::default();
    let lossy = run_seed(&sc, None);
    let (with, without) = (goodput_of(&r, "a3 -> a4"), goodput_of(&lossy, "a3 -> a4"));
    assert!(with * 3.0 < without, "the innocent flow: {with} Gbit/s with PFC, {without} without");
}

#[test]
fn pfc_deadlock_is_detected_and_named() {
    let r = check("pfc-deadlock.toml");
    let cycle = r.net.deadlock.clone().expect("the deadlock is reported");
    assert_eq!(cycle, "sw3 -> sw0 -> sw1 -> sw2 -> sw3");
    assert_eq!(r.messages_delivered, 0, "nothing gets through a deadlocked ring");
    // Not expecting it: the run fails naming the cycle.
    let mut sc = scenario("pfc-deadlock.toml");
    sc.expect.pfc_deadlock = None;
    let why = run_seed(&sc, None).failure.unwrap();
    assert!(why.starts_with("PFC deadlock: a cycle of paused links sw3 -> sw0"), "{why}");
    // Expecting one where there is none fails too.
    let mut sc = scenario("pfc-incast.toml");
    sc.expect.pfc_deadlock = Some(true);
    let why = run_seed(&sc, None).failure.unwrap();
    assert_eq!(why, "no PFC deadlock, and pfc_deadlock = true expects one");
}
