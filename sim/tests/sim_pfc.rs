//! PFC and congestion control on the wire and as properties: the pause frames and CNPs of a
//! run decode in Wireshark as what they are (when `tshark` is installed), and PFC is lossless:
//! with PFC on and the headroom `PfcConfig::headroom_needed` asks for, no switch drops a packet
//! whatever the incast, the speeds and the thresholds.

use std::path::{Path, PathBuf};

#[path = "../cli/tests/pcap_check/mod.rs"]
#[allow(dead_code)] // its pcap readers serve sim_pcap.rs; tshark_fields serves this file
mod pcap_check;
use pcap_check::tshark_fields;

use proptest::prelude::*;
use softverbs_sim::world::pfc::PfcConfig;
use softverbs_sim::world::scenario::{run, Report, RunOptions, Scenario};

fn sample(name: &str) -> Scenario {
    Scenario::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)).unwrap()
}

fn run_to(sc: &Scenario, pcap: &Path) -> Report {
    eprintln!("scenario {}: seed {}", sc.name, sc.seed);
    let opts = RunOptions { pcap: Some(pcap.to_path_buf()), ..RunOptions::default() };
    let r = run(sc, &opts).unwrap();
    assert!(r.passed, "{}: {:?}", sc.name, r.failure);
    r
}

#[test]
fn pause_frames_decode_as_pfc_for_priority_3_with_xoff_and_xon() {
    let dir = tempfile::Builder::new().prefix("softverbs-pfc-").tempdir().unwrap();
    let pcap = dir.path().join("pfc.pcap");
    let r = run_to(&sample("pfc-incast.toml"), &pcap);
    let fields = ["macc.opcode", "macc.cbfc.enbv", "macc.cbfc.pause_time.c3"];
    let Some(rows) = tshark_fields("sim_pfc", &pcap, &fields) else { return };
    let pauses: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "0x0101").collect();
    assert_eq!(
        pauses.len() as u64,
        r.net.xoff_frames + r.net.xon_frames,
        "every frame sent arrived"
    );
    assert!(pauses.iter().all(|p| p[1] == "0x0008"), "class-enable vector: priority 3 only");
    let xon = pauses.iter().filter(|p| p[2] == "0").count() as u64;
    let xoff = pauses.iter().filter(|p| p[2] == "65535").count() as u64;
    assert_eq!((xoff, xon), (r.net.xoff_frames, r.net.xon_frames));
}

#[test]
fn cnps_decode_as_rocev2_opcode_129_to_the_senders_qp() {
    let dir = tempfile::Builder::new().prefix("softverbs-cnp-").tempdir().unwrap();
    let pcap = dir.path().join("cnp.pcap");
    let r = run_to(&sample("dcqcn-fair.toml"), &pcap);
    let fields = ["infiniband.bth.opcode", "infiniband.bth.destqp", "ip.dsfield.ecn"];
    let Some(rows) = tshark_fields("sim_pfc", &pcap, &fields) else { return };
    let cnps: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "129").collect();
    assert_eq!(cnps.len() as u64, r.net.cnps_received);
    // A CNP goes to the QP that sent the marked data: a QP data packets come from, i.e. one
    // that the receiver's ACKs go to.
    let ack_qps: Vec<&String> = rows.iter().filter(|r| r[0] == "17").map(|r| &r[1]).collect();
    assert!(cnps.iter().all(|c| ack_qps.contains(&&c[1])), "CNPs go to the senders' QPs");
    let ce = rows.iter().filter(|r| r[0] != "129" && r[0] != "17" && r[2] == "3").count();
    assert_eq!(ce as u64, r.net.ce_received, "tshark sees the CE marks the receiver counted");
}

/// A scenario of `senders` writing into one receiver through `tiers` switches in a row, with
/// PFC on every switch ingress and the headroom each port's cable needs.
#[allow(clippy::too_many_arguments)]
fn lossless_case(
    senders: usize,
    tiers: usize,
    host_gbps: f64,
    bottleneck_gbps: f64,
    latency_ns: u64,
    mtu: u32,
    window: u32,
    size: u32,
    xoff: u64,
) -> String {
    let headroom = PfcConfig::headroom_needed(latency_ns, host_gbps, u64::from(mtu) + 80);
    let mut s = format!(
        "name = \"lossless\"\nseed = 9\nmax_time_ms = 2000\n[expect]\nmax_queue_drops = 0\n\
         [nic]\nretry_cnt_7_infinite = true\nack_every = 8\n\
         [pfc]\nxoff_bytes = {xoff}\nxon_bytes = {}\nheadroom_bytes = {headroom}\n\
         [[node]]\nname = \"s\"\ncount = {senders}\n[[node]]\nname = \"rx\"\n\
         [[node]]\nname = \"sw\"\ncount = {tiers}\nswitch = true\n",
        xoff * 4 / 5
    );
    let all: Vec<String> = (0..senders).map(|i| format!("\"s{i}\"")).collect();
    s += &format!(
        "[[link]]\nfrom = [{}]\nto = \"sw0\"\nlatency_ns = {latency_ns}\nbandwidth_gbps = {host_gbps}\n",
        all.join(", ")
    );
    for t in 1..tiers {
        s += &format!(
            "[[link]]\nfrom = \"sw{}\"\nto = \"sw{t}\"\nlatency_ns = {latency_ns}\nbandwidth_gbps = {host_gbps}\n",
            t - 1
        );
    }
    s += &format!(
        "[[link]]\nfrom = \"sw{}\"\nto = \"rx\"\nlatency_ns = {latency_ns}\nbandwidth_gbps = {bottleneck_gbps}\n",
        tiers - 1
    );
    s += &format!(
        "[[connection]]\nfrom = [{}]\nto = \"rx\"\nmtu = {mtu}\ntimeout = 10\nwindow = {window}\n\
         ops = [ {{ op = \"write\", size = {size}, count = 3 }}, {{ op = \"read\", size = {size} }} ]\n",
        all.join(", ")
    );
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// PFC is lossless: with the headroom a port needs, no switch drops a packet (no tail
    /// drop, no headroom overflow), nothing is retransmitted, and every message arrives.
    #[test]
    fn pfc_with_headroom_never_drops(
        senders in 1usize..=6,
        tiers in 1usize..=2,
        host_gbps in prop::sample::select(vec![25.0f64, 50.0, 100.0]),
        bottleneck_gbps in prop::sample::select(vec![5.0f64, 10.0, 25.0]),
        latency_ns in 100u64..3000,
        mtu in prop::sample::select(vec![1024u32, 4096]),
        window in 1u32..=6,
        size in 4096u32..=131072,
        xoff in 20_000u64..200_000,
    ) {
        let text = lossless_case(
            senders, tiers, host_gbps, bottleneck_gbps, latency_ns, mtu, window, size, xoff,
        );
        let sc = Scenario::from_toml(&text).unwrap();
        let r = run(&sc, &RunOptions::default()).unwrap();
        prop_assert!(r.passed, "{:?}\n{text}", r.failure);
        prop_assert_eq!(r.fault("queue-drop"), 0);
        prop_assert_eq!(r.net.headroom_drops, 0);
        prop_assert_eq!(r.retransmits, 0, "{}", text);
        prop_assert!(r.net.deadlock.is_none());
    }
}

/// The property has teeth: the same incast with no headroom above XOFF drops at the switch.
#[test]
fn without_headroom_a_port_drops() {
    let text = lossless_case(6, 1, 100.0, 5.0, 3000, 4096, 6, 131072, 20_000);
    let at = text.find("headroom_bytes = ").unwrap();
    let end = at + text[at..].find('\n').unwrap();
    let text = format!("{}headroom_bytes = 0{}", &text[..at], &text[end..]);
    let sc = Scenario::from_toml(&text.replace("max_queue_drops = 0", "")).unwrap();
    let r = run(&sc, &RunOptions::default()).unwrap();
    assert!(
        r.net.headroom_drops > 0 && r.fault("queue-drop") == r.net.headroom_drops,
        "{:?}",
        r.net
    );
}

/// A user's own congestion control runs in the world through `CcAlgorithm`: here one that
/// halves a flow's rate on each CNP and never recovers. Two senders write through a switch
/// whose port marks ECN; the receivers' NICs send CNPs, the senders' flows slow down to what
/// the algorithm says, and every byte still arrives.
#[test]
fn a_users_own_algorithm_runs_in_the_world() {
    use std::sync::{Arc, Mutex};

    use softverbs_sim::conn::ConnOpts;
    use softverbs_sim::world::cc::{CcAlgorithm, CcConfig, EcnMarking, RateControl};
    use softverbs_sim::world::{connect_rc, LinkParams, RunOutcome, SimWorld, World};
    use verbs_api::{
        Mtu, QpCap, RdmaTarget, SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode,
    };

    #[derive(Debug)]
    struct Halving(f64, Arc<Mutex<u64>>);
    impl RateControl for Halving {
        fn rate_gbps(&self) -> f64 {
            self.0
        }
        fn advance(&mut self, _: u64) {}
        fn on_sent(&mut self, _: u64, _: usize) {}
        fn on_cnp(&mut self, _: u64) {
            self.0 = (self.0 / 2.0).max(1.0);
            *self.1.lock().unwrap() += 1;
        }
    }
    #[derive(Debug)]
    struct HalvingAlg(Arc<Mutex<u64>>);
    impl CcAlgorithm for HalvingAlg {
        fn name(&self) -> &str {
            "halving"
        }
        fn new_flow(&self, line: f64, _: u64) -> Box<dyn RateControl> {
            Box::new(Halving(line, self.0.clone()))
        }
    }

    let cnps = Arc::new(Mutex::new(0));
    let mut w = World::new(21);
    let (s0, s1, rx) = (w.add_node("s0"), w.add_node("s1"), w.add_node("rx"));
    let sw = w.add_switch("sw");
    w.add_duplex(s0, sw, LinkParams::default());
    w.add_duplex(s1, sw, LinkParams::default());
    let port = LinkParams {
        bandwidth_gbps: 25.0,
        ecn: Some(EcnMarking::DCQCN_PAPER),
        ..LinkParams::default()
    };
    w.add_duplex(sw, rx, port);
    w.set_congestion_control(Some(CcConfig {
        algorithm: Arc::new(HalvingAlg(cnps.clone())),
        cnp_interval_ns: 50_000,
        burst_bytes: 16 * 1024,
    }));
    let world = SimWorld::new(w);
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let opts = ConnOpts { mtu: Mtu::Mtu4096, ..ConnOpts::default() };
    let len = 1 << 20;
    let mut pairs = Vec::new();
    for (i, s) in [s0, s1].into_iter().enumerate() {
        let (a, b) =
            connect_rc(&world, s, rx, cap, 64, len, &opts, (i as u32 * 2 + 1, i as u32 * 2 + 2))
                .unwrap();
        let bytes: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
        a.mr.write(0, &bytes).unwrap();
        for wr_id in 0..16u64 {
            let chunk = len / 16;
            let sge = [a.mr.sge(wr_id as usize * chunk, chunk as u32)];
            let rdma = RdmaTarget {
                remote_addr: b.mr.addr() + (wr_id as usize * chunk) as u64,
                rkey: b.mr.rkey(),
            };
            let wr = SendWr {
                wr_id,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma,
                ..Default::default()
            };
            a.qp.post_send(&[wr]).unwrap();
        }
        pairs.push((a, b, bytes));
    }
    let mut done = 0;
    let mut wcs = [WorkCompletion::default(); 16];
    let deadline = world.now_ns() + 100_000_000;
    let outcome = world.run_until_pred(
        || {
            for (a, _, _) in &pairs {
                let n = a.cq.poll(&mut wcs).unwrap();
                assert!(wcs[..n].iter().all(|c| c.status == WcStatus::Success), "{:?}", &wcs[..n]);
                done += n;
            }
            done == 32
        },
        deadline,
    );
    assert_eq!(outcome, RunOutcome::Satisfied);
    for (_, b, bytes) in &pairs {
        let mut got = vec![0; len];
        b.mr.read(0, &mut got).unwrap();
        assert!(got == *bytes, "every byte arrived");
    }
    let w = world.lock();
    let stats = w.cc_total_stats();
    assert!(stats.cnps_sent > 0 && stats.cnps_sent == stats.cnps_received, "{stats:?}");
    assert_eq!(
        *cnps.lock().unwrap(),
        stats.cnps_received,
        "every CNP reached the user's algorithm"
    );
    for s in [s0, s1] {
        for (to, _, rate, lowest) in w.cc_flows(s) {
            assert_eq!(to, rx);
            assert!(rate < 100.0 && rate == lowest, "halved, never recovered: {rate}");
        }
    }
}
