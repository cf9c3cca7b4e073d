//! Packet ladders: a simulator run's ladder has one arrow per delivered or dropped packet of
//! its trace, in the trace's order and with its PSNs, drops crossed out, the local ACK timeout
//! and the RNR wait and timer marked, completions where they were polled; the SVG is
//! well-formed and its arrows and labels match the packets one to one; the terminal ladder's
//! lines are exact and fit 100 columns; `sim --ladder --svg` and `demo --ladder --svg` draw
//! them from the command line.

mod common;

use std::process::Command;

use common::xml::{attr_values, well_formed};
use softverbs_sim::ladder::{self, from_sim, Event, Ladder, MarkKind, Response};
use softverbs_sim::world::scenario::{run, RunOptions, RunPackets, Scenario};
use softverbs_sim::world::trace::TraceKind;

/// Two nodes, a lossy cable, three kinds of operation: seed 4 loses a SEND and the sequence
/// NAK that would have reported it, so the requester sits out its local ACK timeout.
const LOSSY: &str = r#"
name = "small"
seed = 4
max_time_ms = 100
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
from = "a"
to = "b"
latency_ns = 1000
bandwidth_gbps = 25
loss = 0.1
[[connection]]
from = "a"
to = "b"
mtu = 1024
timeout = 8
window = 2
ops = [
  { op = "write", size = 3000, count = 2 },
  { op = "send", size = 100, count = 2 },
  { op = "read", size = 2048, count = 1 },
]
"#;

/// The receiver posts its receives 15 µs late: the first SEND is RNR-NAKed, twice.
const RNR: &str = r#"
name = "rnr-small"
seed = 1
max_time_ms = 100
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
from = "a"
to = "b"
latency_ns = 1000
bandwidth_gbps = 25
[[connection]]
from = "a"
to = "b"
rnr_retry = 7
min_rnr_timer = 1
recv_delay_us = 15
window = 2
ops = [ { op = "send", size = 100, count = 2 } ]
"#;

fn packets_of(toml: &str) -> RunPackets {
    let sc = Scenario::from_toml(toml).unwrap();
    let r = run(&sc, &RunOptions { packets: true, ..RunOptions::default() }).unwrap();
    assert!(r.passed, "{:?}", r.failure);
    r.packets.expect("packets were asked for")
}

/// (PSN, dropped) of each delivered or dropped packet of the trace, in order.
fn trace_packets(run: &RunPackets) -> Vec<(u32, bool)> {
    run.trace
        .iter()
        .filter(|r| r.kind == TraceKind::Deliver || r.kind.name().starts_with("drop"))
        .map(|r| (r.psn, r.kind != TraceKind::Deliver))
        .collect()
}

fn labels(l: &Ladder) -> Vec<String> {
    l.packets().map(|p| p.label()).collect()
}

#[test]
fn a_sim_ladder_has_every_packet_of_the_trace_in_order() {
    let run = packets_of(LOSSY);
    let l = from_sim::ladder("t", &run);
    assert_eq!(l.lanes, ["a", "b"]);
    let got: Vec<(u32, bool)> = l.packets().map(|p| (p.psn, p.dropped.is_some())).collect();
    assert_eq!(got, trace_packets(&run));
    assert_eq!(got.len(), 18, "{:#?}", labels(&l));
    // Two losses: the SEND of PSN 0x7a4f3d, and the NAK that reported it.
    let drops: Vec<String> =
        l.packets().filter(|p| p.dropped == Some("lost")).map(|p| p.label()).collect();
    assert_eq!(
        drops,
        ["RC SEND ONLY PSN 0x7a4f3d", "RC ACKNOWLEDGE PSN 0x7a4f3d NAK PSN sequence error"]
    );
    let marks: Vec<(usize, MarkKind, &str)> = l
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Mark(m) => Some((m.lane, m.kind, m.label.as_str())),
            Event::Packet(_) => None,
        })
        .collect();
    assert_eq!(
        marks.iter().filter(|m| m.1 == MarkKind::Timer).collect::<Vec<_>>(),
        [&(0, MarkKind::Timer, "local ACK timeout: go back and resend")]
    );
    // Every completion of the run: five on the requester, two receives on the responder.
    let cqes: Vec<(usize, &str)> =
        marks.iter().filter(|m| m.1 == MarkKind::Completion).map(|m| (m.0, m.2)).collect();
    assert_eq!(
        cqes,
        [
            (0, "CQE IBV_WC_RDMA_WRITE IBV_WC_SUCCESS"),
            (0, "CQE IBV_WC_RDMA_WRITE IBV_WC_SUCCESS"),
            (1, "CQE IBV_WC_RECV IBV_WC_SUCCESS"),
            (1, "CQE IBV_WC_RECV IBV_WC_SUCCESS"),
            (0, "CQE IBV_WC_SEND IBV_WC_SUCCESS"),
            (0, "CQE IBV_WC_SEND IBV_WC_SUCCESS"),
            (0, "CQE IBV_WC_RDMA_READ IBV_WC_SUCCESS"),
        ]
    );
}

#[test]
fn the_terminal_ladder_draws_arrows_drops_timers_and_completions() {
    let l = from_sim::ladder("softverbs sim small, seed 4: packet ladder", &packets_of(LOSSY));
    let lines = ladder::text::render(&l, 80);
    for line in &lines {
        assert!(line.chars().count() <= 100, "wider than 100 columns: {line}");
    }
    let expect = [
        "softverbs sim small, seed 4: packet ladder",
        "              a                                                                                  b",
        "              ┬                                                                                  ┬",
        "  1.347 µs    ├─ RC RDMA WRITE FIRST PSN 0x7a4f37 ──────────────────────────────────────────────►│",
    ];
    assert_eq!(&lines[..4], expect);
    let find = |needle: &str| {
        lines.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {lines:#?}"))
    };
    assert_eq!(
        find("SEND ONLY PSN 0x7a4f3d ─"),
        "  3.024 µs    ├─ RC SEND ONLY PSN 0x7a4f3d ──────────────────────────✕ lost                      │"
    );
    assert_eq!(
        find("NAK PSN sequence error"),
        "  5.079 µs    │                      lost ✕─ RC ACKNOWLEDGE PSN 0x7a4f3d NAK PSN sequence error ─┤"
    );
    assert_eq!(
        find("local ACK timeout"),
        "  1.053 ms    ◆ local ACK timeout: go back and resend                                            │"
    );
    assert_eq!(
        find("ACKNOWLEDGE PSN 0x7a4f39 ACK"),
        "  3.024 µs    │◄ RC ACKNOWLEDGE PSN 0x7a4f39 ACK ────────────────────────────────────────────────┤"
    );
    assert_eq!(
        find("IBV_WC_RECV"),
        "  1.054 ms    │                                                   CQE IBV_WC_RECV IBV_WC_SUCCESS ●"
    );
    // One row per event between the header and the footer.
    assert_eq!(lines.len(), 3 + l.events.len() + 2);
    assert!(lines[lines.len() - 1].starts_with("► packet  ✕ dropped"));
}

#[test]
fn a_long_ladder_is_elided_in_the_middle_with_the_count_of_packets_left_out() {
    let l = from_sim::ladder("t", &packets_of(LOSSY));
    let lines = ladder::text::render(&l, 10);
    // Five rows, the elision, five rows.
    assert_eq!(lines.len(), 3 + 11 + 2);
    let shown: Vec<&Event> = l.events[..5].iter().chain(&l.events[l.events.len() - 5..]).collect();
    let skipped = &l.events[5..l.events.len() - 5];
    let packets = skipped.iter().filter(|e| matches!(e, Event::Packet(_))).count();
    let marks = skipped.len() - packets;
    assert!(packets > 0 && shown.len() == 10);
    let elided = &lines[3 + 5];
    assert!(elided.contains(&format!("… {packets} packets, {marks} marks …")), "{elided}");
    // The SVG elides the same way.
    let svg = ladder::svg::render(&l, 10);
    well_formed(&svg).unwrap();
    assert_eq!(
        svg.matches(r#"<g class="pkt""#).count(),
        l.events[..5]
            .iter()
            .chain(&l.events[l.events.len() - 5..])
            .filter(|e| matches!(e, Event::Packet(_)))
            .count()
    );
    assert!(svg.contains(&format!("… {packets} packets, {marks} marks …")));
}

#[test]
fn the_svg_ladder_is_well_formed_and_matches_the_packets_one_to_one() {
    let run = packets_of(LOSSY);
    let l = from_sim::ladder("softverbs sim small & friends", &run);
    let svg = ladder::svg::render(&l, 1000);
    assert_eq!(well_formed(&svg).unwrap(), "svg");
    assert!(svg.contains("<title>softverbs sim small &amp; friends</title>"));
    assert!(svg.contains(r#"<marker id="arrow""#) && svg.contains(r#"marker-end="url(#arrow)""#));
    // One group per packet, in order, with its PSN; each has the packet's label as text.
    let psns = attr_values(&svg, r#"<g class="pkt""#, "data-psn");
    let want: Vec<String> = trace_packets(&run).iter().map(|p| format!("{:#08x}", p.0)).collect();
    assert_eq!(psns, want);
    let groups: Vec<&str> = svg.split(r#"<g class="pkt""#).skip(1).collect();
    assert_eq!(groups.len(), l.packets().count());
    for (g, p) in groups.iter().zip(l.packets()) {
        let label = p.label();
        assert!(g.contains(&format!(">{label}")), "{label} not in {g}");
        assert_eq!(g.contains(r#"class="drop""#), p.dropped.is_some(), "{g}");
        assert_eq!(g.contains("marker-end"), p.dropped.is_none(), "{g}");
    }
    assert_eq!(svg.matches(r#"<g class="mark cqe""#).count(), 7);
    assert_eq!(svg.matches(r#"<g class="mark timer""#).count(), 1);
}

#[test]
fn an_rnr_nak_starts_a_wait_that_the_rnr_timer_ends() {
    let l = from_sim::ladder("t", &packets_of(RNR));
    let rnr: Vec<String> = l
        .packets()
        .filter(|p| matches!(p.response, Some(Response::RnrNak(_))))
        .map(|p| p.label())
        .collect();
    assert_eq!(rnr, ["RC ACKNOWLEDGE PSN 0x7a4f37 RNR NAK (timer 1)"; 2]);
    let marks: Vec<&str> = l
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Mark(m) if m.kind != MarkKind::Completion => Some(m.label.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        marks,
        [
            "RNR wait begins",
            "RNR timer fired: send again",
            "RNR wait begins",
            "RNR timer fired: send again"
        ]
    );
    // While it waits, the requester's lifeline is dotted.
    let lines = ladder::text::render(&l, 80);
    let nak = lines.iter().position(|s| s.contains("NAK PSN sequence error")).unwrap();
    assert!(
        lines[nak].starts_with("  2.110 µs    ┊◄ RC ACKNOWLEDGE PSN 0x7a4f37"),
        "{}",
        lines[nak]
    );
    let svg = ladder::svg::render(&l, 80);
    well_formed(&svg).unwrap();
    assert!(svg.contains(r#"<line class="rnr""#));
}

fn softverbs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softverbs"))
}

#[test]
fn sim_ladder_and_svg_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("small.toml");
    std::fs::write(&toml, LOSSY).unwrap();
    let svg = dir.path().join("small.svg");
    let out =
        softverbs().args(["sim", "-q", "--ladder", "--svg"]).arg(&svg).arg(&toml).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines.iter().position(|l| *l == "softverbs sim small, seed 4: packet ladder").unwrap();
    assert!(lines[at + 3].ends_with(
        "├─ RC RDMA WRITE FIRST PSN 0x7a4f37 ──────────────────────────────────────────────►│"
    ));
    let text = std::fs::read_to_string(&svg).unwrap();
    well_formed(&text).unwrap();
    assert_eq!(attr_values(&text, r#"<g class="pkt""#, "data-psn").len(), 18);
    common::xml::renders(&svg).unwrap_or_else(|e| panic!("{e}"));
    // An SVG that cannot be written is an error naming the file.
    let bad = dir.path().join("no/such/dir/x.svg");
    let out = softverbs().args(["sim", "-q", "--svg"]).arg(&bad).arg(&toml).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("writing the ladder to") && err.contains("x.svg"), "{err}");
}

/// `sim --ladder --time-scale` spaces the rows by time as `demo --break --time-scale` does: the
/// local ACK timeout, a millisecond after the packets before it, gets two blank rows (the first
/// labelled with the gap), and the SVG the same labels; without the flag, the rows are even.
#[test]
fn sim_ladder_takes_a_time_scale_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("small.toml");
    std::fs::write(&toml, LOSSY).unwrap();
    let ladder = |scale: bool| {
        let svg = dir.path().join(format!("scale-{scale}.svg"));
        let mut cmd = softverbs();
        cmd.args(["sim", "-q", "--ladder", "--svg"]).arg(&svg);
        if scale {
            cmd.arg("--time-scale");
        }
        let out = cmd.arg(&toml).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(&svg).unwrap())
    };
    let (even, even_svg) = ladder(false);
    let (scaled, scaled_svg) = ladder(true);
    let lines: Vec<&str> = scaled.lines().collect();
    let timer = lines.iter().position(|s| s.contains("◆ local ACK timeout")).unwrap();
    assert!(lines[timer - 2].trim_start().starts_with("+1.0"), "{scaled}");
    assert!(!lines[timer - 1].contains('+'), "{scaled}");
    let mut l = from_sim::ladder("t", &packets_of(LOSSY));
    l.time_scale = true;
    let extra: usize = l.time_gaps().iter().map(|g| g.0).sum();
    assert_eq!(scaled.lines().count(), even.lines().count() + extra, "{scaled}");
    assert!(!even.lines().any(|s| s.trim_start().starts_with("+1.0")), "{even}");
    well_formed(&scaled_svg).unwrap();
    assert!(scaled_svg.contains(r#"font-style="italic">+1.0"#), "{scaled_svg}");
    assert!(!even_svg.contains(r#"font-style="italic">+"#), "{even_svg}");
    // Without a ladder to draw the flag is refused, not ignored.
    let out = softverbs().args(["sim", "-q", "--time-scale"]).arg(&toml).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn demo_ladder_has_the_packets_the_wire_lines_show() {
    let fabric = tempfile::tempdir().unwrap();
    let svg = fabric.path().join("demo.svg");
    let out = softverbs()
        .args(["demo", "--in-process", "--ladder", "--svg"])
        .arg(&svg)
        .env("SOFTVERBS_FABRIC", fabric.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The PSNs of the narrated operations' wire lines, then the unnarrated READ's two.
    let mut want: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("  wire  "))
        .map(|l| l.split("PSN ").nth(1).unwrap()[..8].to_string())
        .collect();
    assert_eq!(want.len(), 12);
    want.extend(["0x001007".to_string(), "0x001007".to_string()]);
    let text = std::fs::read_to_string(&svg).unwrap();
    well_formed(&text).unwrap();
    assert!(text.contains(
        "<title>softverbs demo: packet ladder of the initiator&apos;s wire (softverbs0)</title>"
    ));
    assert_eq!(attr_values(&text, r#"<g class="pkt""#, "data-psn"), want);
    // The terminal ladder: its rows past the time column are exact.
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "softverbs demo: packet ladder of the initiator's wire (softverbs0)")
        .unwrap();
    let rows: Vec<String> =
        lines[at + 3..at + 8].iter().map(|l| l.chars().skip(14).collect()).collect();
    assert_eq!(
        rows,
        [
            "├─ RC SEND ONLY PSN 0x001000 ─────────────────────────────────────────────────────►│",
            "│                                                   CQE IBV_WC_RECV IBV_WC_SUCCESS ●",
            "│◄ RC ACKNOWLEDGE PSN 0x001000 ACK ────────────────────────────────────────────────┤",
            "● CQE IBV_WC_SEND IBV_WC_SUCCESS                                                   │",
            "├─ RC RDMA WRITE FIRST PSN 0x001001 ──────────────────────────────────────────────►│",
        ]
    );
    assert!(
        lines[at + 1].contains("initiator softverbs0")
            && lines[at + 1].ends_with("target softverbs1")
    );
    // The second READ says what it is, just before its request.
    let note = lines
        .iter()
        .position(|l| l.contains("» the RDMA READ again, timed warm"))
        .unwrap_or_else(|| panic!("no note on the second READ:\n{stdout}"));
    assert!(lines[note + 1].contains("RC RDMA READ REQUEST PSN 0x001007"), "{stdout}");
}

/// With a time scale, a long gap takes blank rows labelled with its length; without, none.
#[test]
fn a_time_scale_spaces_the_rows_by_the_gaps_between_them() {
    let mut l = from_sim::ladder("t", &packets_of(LOSSY));
    let even = ladder::text::render(&l, 1000);
    l.time_scale = true;
    let gaps = l.time_gaps();
    let scaled = ladder::text::render(&l, 1000);
    let extra: usize = gaps.iter().map(|g| g.0).sum();
    assert!(extra > 0, "{gaps:?}");
    assert_eq!(scaled.len(), even.len() + extra);
    // The local ACK timeout, about a millisecond after the packets before it, has two rows
    // (1 ms to 10 ms) and the first says how long the gap was.
    let timer = scaled.iter().position(|s| s.contains("◆ local ACK timeout")).unwrap();
    assert!(scaled[timer - 2].trim_start().starts_with("+1.0"), "{scaled:#?}");
    assert!(!scaled[timer - 1].contains('+'), "{scaled:#?}");
    let svg = ladder::svg::render(&l, 1000);
    well_formed(&svg).unwrap();
    assert!(svg.contains(r#"font-style="italic">+1.0"#), "{svg}");
    assert!(!ladder::svg::render(&from_sim::ladder("t", &packets_of(LOSSY)), 1000).contains(">+"));
}

/// A timer that fires and an RNR wait that begins are drawn with different marks.
#[test]
fn timer_and_rnr_wait_marks_differ_in_the_svg() {
    let l = from_sim::ladder("t", &packets_of(RNR));
    let svg = ladder::svg::render(&l, 80);
    well_formed(&svg).unwrap();
    let timer = svg.split(r#"<g class="mark timer">"#).nth(1).unwrap().split('"').nth(1).unwrap();
    assert!(svg.contains(r#"<g class="mark rnrwait"><rect"#), "{svg}");
    assert!(timer.starts_with('M'), "the timer is a diamond path: {timer}");
    assert!(svg.contains("orange square: RNR wait begins"), "{svg}");
}

#[test]
fn a_ladder_leaves_the_pcap_as_it_was() {
    // The ladder takes its datagrams from an in-memory capture with drops and writes --pcap
    // from it: the file must be byte for byte the one a run without a ladder writes.
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("small.toml");
    std::fs::write(&toml, LOSSY).unwrap();
    for drops in [false, true] {
        let mut files = Vec::new();
        for ladder in [false, true] {
            let pcap = dir.path().join(format!("{drops}-{ladder}.pcap"));
            let mut cmd = softverbs();
            cmd.args(["sim", "-q", "--pcap"]).arg(&pcap).arg(&toml);
            if drops {
                cmd.arg("--pcap-drops");
            }
            if ladder {
                cmd.arg("--ladder");
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            files.push(std::fs::read(&pcap).unwrap());
        }
        assert!(files[0].len() > 24 * 10, "{} bytes", files[0].len());
        assert!(files[0] == files[1], "--pcap-drops {drops}: the ladder changed the capture");
    }
}

#[test]
fn many_lifelines_still_fit_100_columns_and_the_svg_widens() {
    let lanes: Vec<String> = (0..5).map(|i| format!("tx{i}")).collect();
    let mut l = Ladder::new("five", lanes);
    // An RC SEND ONLY from the first lifeline to the last, by its bytes.
    let mut d = vec![0u8; 28 + 12];
    d[0] = 0x45;
    d[28] = 0x04;
    d[28 + 9..28 + 12].copy_from_slice(&[0x12, 0x34, 0x56]);
    l.packet(ladder::Packet::from_datagram(0, 4, Some(1000), &d));
    l.mark(2, Some(2000), MarkKind::Completion, "CQE IBV_WC_RECV IBV_WC_SUCCESS".into());
    let lines = ladder::text::render(&l, 80);
    assert!(lines.iter().all(|s| s.chars().count() <= 100), "{lines:#?}");
    assert_eq!(
        lines.last().unwrap(),
        "5 lifelines share 100 columns, so labels are cut short: --svg FILE draws them in full"
    );
    // The arrow crosses the lifelines between; a mark's label is cut at the next lifeline.
    assert_eq!(
        lines[3],
        "  1.000 µs    ├─ RC SEND ONLY PSN 0x123456 ─────────────────────────────────────────────────────►│"
    );
    assert_eq!(
        lines[4],
        "  2.000 µs    │                   │                    ● CQE IBV_WC_RECV I… │                    │"
    );
    assert_eq!(l.packets().next().unwrap().psn, 0x123456);
    let svg = ladder::svg::render(&l, 80);
    well_formed(&svg).unwrap();
    assert!(
        svg.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="1600""#),
        "{}",
        &svg[..120]
    );
}
