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
