//! Workloads and results: the sample workload scenarios pass; every flow's completion time is
//! at least its ideal; the same seed gives byte-identical results (their JSON) and another
//! seed other flows; sampling the queues and rates only observes (a run's trace is the same
//! with and without it); the JSON is well formed and the plots are written.

use std::path::PathBuf;

use softverbs_sim::world::scenario::{run, Report, RunOptions, Scenario};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    Scenario::load(&path).unwrap()
}

fn run_seed(sc: &Scenario, seed: Option<u64>, sample_us: Option<u64>) -> Report {
    eprintln!("scenario {}: seed {}", sc.name, seed.unwrap_or(sc.seed));
    run(sc, &RunOptions { seed, sample_us, ..RunOptions::default() }).unwrap()
}

fn json(r: &Report) -> String {
    let mut out = Vec::new();
    r.write_json(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn workload_scenarios_pass_with_every_slowdown_at_least_one() {
    for (name, flows) in [("workload-websearch.toml", 60), ("workload-incast-pfc.toml", 7)] {
        let sc = scenario(name);
        let r = run_seed(&sc, None, None);
        assert!(r.passed, "{name}: {:?}", r.failure);
        assert_eq!(r.connections.len(), flows, "{name}: a connection per flow");
        assert_eq!(r.results.flows.len(), flows, "{name}: a result per flow");
        for f in &r.results.flows {
            assert!(f.ideal_ns > 0 && f.fct_ns >= f.ideal_ns, "{name}: {f:?} beat its ideal");
            assert!(f.slowdown() >= 1.0);
        }
        let sizes: u64 = r.results.flows.iter().map(|f| f.size).sum();
        assert_eq!(sizes, r.goodput_bytes, "{name}: the flows are the run's bytes");
        assert!(!r.results.queues.is_empty() && !r.results.rates.is_empty(), "{name}: sampled");
    }
}

#[test]
fn the_incast_under_pfc_reports_pause_time_per_sender_port() {
    let r = run_seed(&scenario("workload-incast-pfc.toml"), None, None);
    let ports: Vec<&str> = r.results.pauses.iter().map(|p| p.link.as_str()).collect();
    assert_eq!(
        ports,
        ["h1 -> sw", "h2 -> sw", "h3 -> sw", "h4 -> sw", "h5 -> sw", "h6 -> sw", "h7 -> sw"]
    );
    assert!(r.results.pauses.iter().all(|p| p.pauses > 0 && p.paused_ns > 0));
    let total: u64 = r.results.pauses.iter().map(|p| p.paused_ns).sum();
    assert_eq!(total, r.net.paused_ns, "the ports' pause times add up to the run's");
    // The queue towards the receiver is the busiest, and held bytes while the senders paused.
    assert_eq!(r.results.queues[0].name, "sw -> h0 queue");
    assert!(r.results.queues[0].points.iter().any(|p| p.1 >= 100_000.0));
}

#[test]
fn the_same_seed_gives_byte_identical_results_and_another_seed_others() {
    let sc = scenario("workload-websearch.toml");
    let (a, b) = (run_seed(&sc, None, None), run_seed(&sc, None, None));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(json(&a), json(&b));
    let c = run_seed(&sc, Some(sc.seed + 1), None);
    assert_ne!(a.results.flows, c.results.flows);
}

/// Sampling reads the world and changes nothing: the same trace, completions and results with
/// and without it, on a scenario without a workload (which then gets series too).
#[test]
fn sampling_only_observes() {
    let sc = scenario("pfc-incast.toml");
    let (plain, sampled) = (run_seed(&sc, None, None), run_seed(&sc, None, Some(1)));
    assert_eq!(plain.trace_hash, sampled.trace_hash);
    assert_eq!(plain.trace_records, sampled.trace_records);
    assert_eq!(plain.completion_ns, sampled.completion_ns);
    assert_eq!(plain.results.flows, sampled.results.flows);
    assert!(plain.results.queues.is_empty() && !sampled.results.queues.is_empty());
    assert_eq!(sampled.results.sample_ns, 1000);
    // Every message of a fixed workload has its completion time and ideal too.
    assert_eq!(plain.results.flows.len() as u64, plain.messages_delivered);
    assert!(plain.results.flows.iter().all(|f| f.fct_ns >= f.ideal_ns));
}

#[test]
fn a_workload_too_big_to_register_is_refused_naming_what_to_change() {
    let mut sc = scenario("workload-websearch.toml");
    let w = sc.workload.as_mut().unwrap();
    (w.max_flow_bytes, w.flows) = (None, Some(2000));
    let e = run(&sc, &RunOptions::default()).err().unwrap();
    assert!(e.contains("lower flows or set max_flow_bytes"), "{e}");
    let mut sc = scenario("workload-incast-pfc.toml");
    sc.workload.as_mut().unwrap().target = Some("sw".into());
    let e = run(&sc, &RunOptions::default()).err().unwrap();
    assert!(e.contains("target \"sw\" is not one of its hosts"), "{e}");
}

#[test]
fn the_json_is_well_formed_and_the_plots_are_written() {
    let r = run_seed(&scenario("workload-incast-pfc.toml"), None, None);
    let j = json(&r);
    let rest = value(j.trim_end().as_bytes()).unwrap_or_else(|e| panic!("{e} in {j}"));
    assert!(rest.is_empty(), "trailing bytes after the JSON value");
    for key in
        ["\"slowdown_by_size\":[", "\"pauses\":[{\"port\":\"h1 -> sw\"", "\"queues\":[{\"name\":"]
    {
        assert!(j.contains(key), "{key} missing");
    }
    let dir = tempfile::Builder::new().prefix("softverbs-plots-").tempdir().unwrap();
    let files = softverbs_sim::world::workload::write_plots(&r.results, "t", dir.path()).unwrap();
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["slowdown.svg", "queues.svg", "rates.svg", "pauses.svg"]);
    for f in &files {
        let svg = std::fs::read_to_string(f).unwrap();
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")
                && svg.ends_with("</svg>\n")
        );
    }
}

/// A minimal JSON syntax check: parse one value, return what follows it.
fn value(s: &[u8]) -> Result<&[u8], String> {
    let s = ws(s);
    match s.first() {
        Some(b'{') => seq(&s[1..], b'}', |s| {
            let s = string(ws(s))?;
            let s = ws(s);
            if s.first() != Some(&b':') {
                return Err("no ':' after a key".into());
            }
            value(&s[1..])
        }),
        Some(b'[') => seq(&s[1..], b']', value),
        Some(b'"') => string(s),
        Some(b't') if s.starts_with(b"true") => Ok(&s[4..]),
        Some(b'f') if s.starts_with(b"false") => Ok(&s[5..]),
        Some(b'n') if s.starts_with(b"null") => Ok(&s[4..]),
        Some(c) if c.is_ascii_digit() || *c == b'-' => {
            let n = s.iter().take_while(|c| b"0123456789+-.eE".contains(c)).count();
            std::str::from_utf8(&s[..n]).unwrap().parse::<f64>().map_err(|e| e.to_string())?;
            Ok(&s[n..])
        }
        _ => Err(format!("unexpected {:?}", String::from_utf8_lossy(&s[..s.len().min(20)]))),
    }
}

fn ws(s: &[u8]) -> &[u8] {
    &s[s.iter().take_while(|c| c.is_ascii_whitespace()).count()..]
}

fn string(s: &[u8]) -> Result<&[u8], String> {
    if s.first() != Some(&b'"') {
        return Err("want a string".into());
    }
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Ok(&s[i + 1..]),
            c if c < 0x20 => return Err("control character in a string".into()),
            _ => i += 1,
        }
    }
    Err("unterminated string".into())
}

fn seq(
    mut s: &[u8],
    close: u8,
    item: impl Fn(&[u8]) -> Result<&[u8], String>,
) -> Result<&[u8], String> {
    s = ws(s);
    if s.first() == Some(&close) {
        return Ok(&s[1..]);
    }
    loop {
        s = ws(item(s)?);
        match s.first() {
            Some(b',') => s = &s[1..],
            Some(c) if *c == close => return Ok(&s[1..]),
            _ => return Err("want ',' or the closing bracket".into()),
        }
    }
}

/// With DCQCN on, sampling gives each flow's rate limit over time, always within (0, line
/// rate], and the trace stays the one the unsampled run has.
#[test]
fn dcqcn_rate_series_stay_within_the_line_rate() {
    let sc = scenario("dcqcn-fair.toml");
    let (plain, sampled) = (run_seed(&sc, None, None), run_seed(&sc, None, Some(2)));
    assert_eq!(plain.trace_hash, sampled.trace_hash);
    assert!(plain.results.cc_rates.is_empty());
    let cc = &sampled.results.cc_rates;
    assert!(!cc.is_empty(), "no rate series");
    for s in cc {
        assert!(s.points.iter().all(|p| p.1 > 0.0 && p.1 <= 100.0 + 1e-9), "{s:?}");
    }
    assert!(cc.iter().any(|s| s.points.iter().any(|p| p.1 < 100.0)), "DCQCN cut some flow's rate");
}
