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
