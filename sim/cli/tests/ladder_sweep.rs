//! `softverbs sim sweep`: each row of the table is the numbers of a direct run of the scenario
//! with that loss and seed; goodput falls as loss rises (go-back-N); a sweep is exactly the
//! same each time for a seed; the plot is well-formed with a point per run; `--explain`
//! speaks from the same numbers; bad parameters are clear errors. The SVGs committed under
//! docs/learn/ are exactly what the commands they name write today.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::xml::{attr_values, well_formed};
use softverbs::cmd::sweep::{
    explain, parse_param, plot, plot_title, sweep, sweep_seeds, table, with_param,
};
use softverbs_sim::ladder::{from_sim, svg};
use softverbs_sim::world::scenario::{run, RunOptions, Scenario};

const LOSSES: [f64; 4] = [0.0, 0.001, 0.01, 0.05];

fn root() -> PathBuf {
    // This crate is sim/cli/, two levels below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

fn scenario(name: &str) -> Scenario {
    Scenario::load(&root().join("sim/scenarios").join(name)).unwrap()
}

#[test]
fn each_row_is_the_run_of_its_value_and_goodput_falls_with_loss() {
    let sc = scenario("go-back-n.toml");
    let rows = sweep(&sc, "loss", &LOSSES, 1).unwrap();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let direct = run(
            &with_param(&sc, "loss", r.value),
            &RunOptions { seed: Some(1), ..RunOptions::default() },
        )
        .unwrap();
        assert_eq!(r.report.trace_hash, direct.trace_hash, "loss {}", r.value);
        assert_eq!(r.report.goodput_bytes, direct.goodput_bytes);
        assert_eq!(r.report.packets_sent, direct.packets_sent);
        assert_eq!(r.report.retransmits, direct.retransmits);
        assert_eq!(r.report.elapsed_ns, direct.elapsed_ns);
        // Every byte of every message arrived, whatever the loss.
        assert!(r.all_delivered(), "loss {}: {:?}", r.value, r.report.failure);
        assert_eq!(r.report.goodput_bytes, 256 * 16384);
    }
    // Without loss nothing is sent twice; with more loss, more is, and goodput falls.
    assert_eq!(rows[0].report.retransmits, 0);
    assert_eq!(rows[0].report.fault("loss"), 0);
    for w in rows.windows(2) {
        let (a, b) = (&w[0].report, &w[1].report);
        assert!(b.goodput_gbps() < a.goodput_gbps(), "{} -> {}", w[0].value, w[1].value);
        assert!(b.retransmits > a.retransmits && b.fault("loss") > a.fault("loss"));
    }
    // go-back-N: each loss costs many packets, not one.
    let last = &rows[3].report;
    assert!(
        last.retransmits > 5 * last.fault("loss"),
        "{} for {}",
        last.retransmits,
        last.fault("loss")
    );
    // The table prints these numbers.
    let lines = table("loss", &rows);
    assert_eq!(
        lines[0],
        "     loss        goodput  packets sent   lost  retransmitted  timeouts  completion time  delivered"
    );
    for (line, r) in lines[1..].iter().zip(&rows) {
        let p = &r.report;
        let want = format!(
            "{:>8.3} Gb/s  {:>12}  {:>5}  {:>11.1} %  {:>8}  {:>12.3} ms  all",
            p.goodput_gbps(),
            p.packets_sent,
            p.fault("loss"),
            p.retransmit_share() * 100.0,
            p.timeouts,
            p.elapsed_ns as f64 / 1e6
        );
        assert!(line.ends_with(&want), "{line:?} vs {want:?}");
    }
    assert!(lines[1].starts_with("      0 %") && lines[2].starts_with("    0.1 %"));
    assert!(lines[3].starts_with("      1 %") && lines[4].starts_with("      5 %"));
}

#[test]
fn a_sweep_is_the_same_every_time_for_a_seed() {
    let sc = scenario("go-back-n.toml");
    let text = |seed| {
        let rows = sweep(&sc, "loss", &[0.01, 0.05], seed).unwrap();
        (table("loss", &rows), explain(&sc, "loss", &rows), plot("t", "loss", &rows))
    };
    assert_eq!(text(1), text(1));
    assert_ne!(text(1).0, text(2).0, "another seed loses other packets");
}

#[test]
fn explain_says_what_the_numbers_say() {
    let sc = scenario("go-back-n.toml");
    let rows = sweep(&sc, "loss", &LOSSES, 1).unwrap();
    let e = explain(&sc, "loss", &rows);
    assert_eq!(e.len(), 5, "{e:#?}");
    let base = &rows[0].report;
    assert_eq!(
        e[0],
        format!(
            "At loss 0 %, the workload moved 4194304 bytes in {:.3} ms of virtual time: {:.2} \
             Gbit/s of goodput, with {} packets sent, 0.0 % of them retransmissions.",
            base.elapsed_ns as f64 / 1e6,
            base.goodput_gbps(),
            base.packets_sent
        )
    );
    let p = &rows[3].report;
    let lost = p.fault("loss");
    assert!(
        e[3].starts_with(&format!(
        "At loss 5 %, goodput was {:.2} Gbit/s ({:.0} % of the first run's); {:.1} % of the {} \
         packets sent were retransmissions: {lost} packets were lost on the links and the NICs \
         sent {} packets again, {:.1} for each one lost, because go-back-N resends",
        p.goodput_gbps(),
        100.0 * p.goodput_gbps() / base.goodput_gbps(),
        p.retransmit_share() * 100.0,
        p.packets_sent,
        p.retransmits,
        p.retransmits as f64 / lost as f64
    )),
        "{}",
        e[3]
    );
    assert!(e[3].contains(&format!("{} times nothing came back", p.timeouts)), "{}", e[3]);
    assert!(e[3].contains("local ACK timeout of 66 µs"), "{}", e[3]);
    assert!(e[3].contains(&format!("{} sequence NAKs", p.seq_naks)), "{}", e[3]);
    assert!(e.last().unwrap().starts_with("The steepest fall is from loss 1 % to 5 %"));
}

#[test]
fn the_plot_is_well_formed_with_a_point_per_run() {
    let sc = scenario("go-back-n.toml");
    let rows = sweep(&sc, "loss", &LOSSES, 1).unwrap();
    let s = plot("go-back-n: goodput against loss (seed 1)", "loss", &rows);
    assert_eq!(well_formed(&s).unwrap(), "svg");
    assert!(s.contains("<title>go-back-n: goodput against loss (seed 1)</title>"));
    assert!(s.contains(">goodput (Gbit/s)<"));
    assert!(s.contains(
        ">loss: per-packet probability on every link (%), logarithmic axis (0 left of the break)<"
    ));
    assert_eq!(s.matches(r#"<g class="point">"#).count(), 4);
    for r in &rows {
        assert!(s.contains(&format!(">{:.2}</text>", r.report.goodput_gbps())));
    }
    let line = attr_values(&s, r#"<polyline class="goodput""#, "points");
    assert_eq!(line.len(), 1);
    // Falling goodput: each point is lower on the page (a larger y) than the one before.
    let ys: Vec<f64> =
        line[0].split(' ').map(|p| p.split(',').nth(1).unwrap().parse().unwrap()).collect();
    assert!(ys.windows(2).all(|w| w[1] > w[0]), "{ys:?}");
}

#[test]
fn bad_parameters_are_clear_errors() {
    assert_eq!(parse_param("loss=0,0.5,1").unwrap(), ("loss".to_string(), vec![0.0, 0.5, 1.0]));
    for (arg, err) in [
        ("loss", "--param \"loss\": expected NAME=V1,V2,..."),
        ("los=0.1", "--param: no link parameter \"los\"; one of loss, dup, corrupt, truncate"),
        ("loss=0.1,x", "--param loss: \"x\" is not a number"),
        ("loss=1.5", "--param loss: 1.5 is not a probability from 0 to 1"),
        ("latency_ns=-3", "--param latency_ns: -3 is not a whole number of 0 or more"),
        ("bandwidth_gbps=0", "--param bandwidth_gbps: 0 is not a positive rate"),
    ] {
        let e = parse_param(arg).unwrap_err();
        assert!(e.starts_with(err), "{arg}: {e}");
    }
    // From the command line: exit status 2 and the message.
    let out = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .args(["sim", "sweep", "sim/scenarios/go-back-n.toml", "--param", "loss=2"])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "softverbs sim sweep: --param loss: 2 is not a probability from 0 to 1\n"
    );
}

#[test]
fn sweep_from_the_command_line_prints_the_table_and_writes_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot_file = dir.path().join("p.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .args(["sim", "sweep", "sim/scenarios/go-back-n.toml", "--param", "loss=0,0.05"])
        .args(["--explain", "--plot"])
        .arg(&plot_file)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "scenario go-back-n, seeds 1 to 5: 5 runs per value of loss on every link, each row the median run"
    );
    let rows = sweep_seeds(&scenario("go-back-n.toml"), "loss", &[0.0, 0.05], 1, 5).unwrap();
    assert_eq!(lines[1..4], table("loss", &rows)[..]);
    assert!(lines.iter().any(|l| l.starts_with("The steepest fall is from loss 0 % to 5 %")));
    well_formed(&std::fs::read_to_string(&plot_file).unwrap()).unwrap();
}

#[test]
fn the_svgs_in_the_docs_are_what_their_commands_write() {
    // docs/learn/ladder-lossy.svg: softverbs sim sim/scenarios/ladder.toml --svg FILE
    let sc = scenario("ladder.toml");
    let r = run(&sc, &RunOptions { packets: true, ..RunOptions::default() }).unwrap();
    let title = format!("softverbs sim {}, seed {}: packet ladder", sc.name, sc.seed);
    let ladder = from_sim::ladder(&title, r.packets.as_ref().unwrap());
    let want = svg::render(&ladder, svg::DEFAULT_ROWS);
    let committed = std::fs::read_to_string(root().join("docs/learn/ladder-lossy.svg")).unwrap();
    assert!(
        committed == want,
        "docs/learn/ladder-lossy.svg is stale: run the command in ladders.md"
    );
    well_formed(&committed).unwrap();
    // docs/learn/go-back-n-sweep.svg: softverbs sim sweep ... --plot FILE
    let sc = scenario("go-back-n.toml");
    let rows = sweep_seeds(&sc, "loss", &LOSSES, sc.seed, 5).unwrap();
    let want = plot(&plot_title(&sc.name, "loss", sc.seed, 5), "loss", &rows);
    let committed = std::fs::read_to_string(root().join("docs/learn/go-back-n-sweep.svg")).unwrap();
    assert!(
        committed == want,
        "docs/learn/go-back-n-sweep.svg is stale: run the command in ladders.md"
    );
}

/// The x axis is spaced by value: 0.1 %, 1 % and 5 % on a logarithmic axis (they span more
/// than a decade), the 0 left of a break; a linear axis where the values do not span a decade.
#[test]
fn the_plot_spaces_values_by_value_on_a_log_axis_where_they_span_decades() {
    let sc = scenario("go-back-n.toml");
    let rows = sweep(&sc, "loss", &LOSSES, 1).unwrap();
    let s = plot("t", "loss", &rows);
    let line = attr_values(&s, r#"<polyline class="goodput""#, "points");
    let xs: Vec<f64> =
        line[0].split(' ').map(|p| p.split(',').next().unwrap().parse().unwrap()).collect();
    // log10(1 % / 0.1 %) = 1 and log10(5 % / 1 %) = 0.7: the gaps keep that ratio.
    let ratio = (xs[3] - xs[2]) / (xs[2] - xs[1]);
    assert!((ratio - 5f64.log10()).abs() < 0.01, "{xs:?}");
    assert!(xs[1] > xs[0] && s.contains(r#"<path class="break""#), "{s}");
    // Values within a decade: linear from 0, so 2 sits twice as far as 1 from 0's place.
    let rows = sweep(&sc, "latency_ns", &[0.0, 1000.0, 2000.0], 1).unwrap();
    let s = plot("t", "latency_ns", &rows);
    let line = attr_values(&s, r#"<polyline class="goodput""#, "points");
    let xs: Vec<f64> =
        line[0].split(' ').map(|p| p.split(',').next().unwrap().parse().unwrap()).collect();
    assert!(((xs[2] - xs[0]) / (xs[1] - xs[0]) - 2.0).abs() < 0.01, "{xs:?}");
    assert!(s.contains(">latency_ns (ns), linear axis<") && !s.contains("class=\"break\""));
}

/// Several seeds per value: each row is the median run, with the spread of goodput in the table
/// and as a bar in the plot.
#[test]
fn several_seeds_give_the_median_run_and_the_spread() {
    let sc = scenario("go-back-n.toml");
    let rows = sweep_seeds(&sc, "loss", &[0.0, 0.05], 1, 5).unwrap();
    for r in &rows {
        assert_eq!(r.goodputs.len(), 5);
        assert!(r.goodputs.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(r.report.goodput_gbps(), r.goodputs[2], "the median run");
        // Each seed's run is a real run of that seed.
        let seeds: Vec<f64> = (1..=5)
            .map(|k| {
                let opts = RunOptions { seed: Some(k), ..RunOptions::default() };
                run(&with_param(&sc, "loss", r.value), &opts).unwrap().goodput_gbps()
            })
            .collect();
        let mut sorted = seeds.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, r.goodputs);
    }
    // Loss makes the seeds differ; none makes them the same.
    assert_eq!(rows[0].goodputs[0], rows[0].goodputs[4]);
    assert!(rows[1].goodputs[0] < rows[1].goodputs[4]);
    let lines = table("loss", &rows);
    assert!(lines[0].contains("min–max (Gb/s)"), "{lines:#?}");
    let (lo, hi) = (rows[1].goodputs[0], rows[1].goodputs[4]);
    assert!(lines[2].contains(&format!("{lo:.3}–{hi:.3}")), "{lines:#?}");
    let s = plot("t", "loss", &rows);
    assert_eq!(well_formed(&s).unwrap(), "svg");
    assert_eq!(s.matches(r#"<path class="spread""#).count(), 2);
    assert!(s.contains("point: the median of 5 seeds; bar: the lowest to the highest seed"));
}
