use super::*;

fn spec(toml_text: &str) -> WorkloadSpec {
    toml::from_str(toml_text).unwrap()
}

fn gen(s: &WorkloadSpec, hosts: usize, seed: u64) -> Result<Vec<Flow>, String> {
    let mut rng = Rng::new(seed);
    generate(s, &mut GenContext { hosts, target: 0, link_gbps: 100.0, rng: &mut rng })
}

/// Over a long run the offered load is the target: the bytes the flows carry, over the time
/// they arrive in and the hosts' capacity, within 5 % (web search) or 10 % (the data-mining
/// tail weighs more) of `load`.
#[test]
fn poisson_arrivals_offer_the_target_load() {
    for (cdf, cap, bound) in
        [("websearch", "", 0.05), ("hadoop", "max_flow_bytes = 10000000", 0.10)]
    {
        for load in [0.3, 0.7] {
            let s = spec(&format!(
                "kind = \"poisson\"\ncdf = \"{cdf}\"\nload = {load}\nflows = 200000\n{cap}"
            ));
            let hosts = 16;
            let flows = gen(&s, hosts, 3).unwrap_or_else(|e| panic!("{e}"));
            let bytes: u64 = flows.iter().map(|f| f.size).sum();
            let span_ns = flows.last().unwrap().start_ns as f64;
            let offered = bytes as f64 * 8.0 / (span_ns * hosts as f64 * 100.0);
            assert!(
                (offered - load).abs() / load < bound,
                "{cdf} at load {load}: offered {offered:.4}"
            );
            assert!(flows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
            assert!(flows.iter().all(|f| f.src != f.dst && f.src < hosts && f.dst < hosts));
        }
    }
}

#[test]
fn incast_and_permutation_have_their_shapes() {
    let s = spec("kind = \"incast\"\nsize = 4096\nfan_in = 5");
    let mut rng = Rng::new(1);
    let f = generate(&s, &mut GenContext { hosts: 8, target: 2, link_gbps: 0.0, rng: &mut rng })
        .unwrap();
    assert_eq!(f.len(), 5);
    assert!(f.iter().all(|f| f.dst == 2 && f.src != 2 && f.size == 4096 && f.start_ns == 0));
    let mut srcs: Vec<usize> = f.iter().map(|f| f.src).collect();
    srcs.dedup();
    assert_eq!(srcs.len(), 5);

    let s = spec("kind = \"permutation\"\ncdf = \"websearch\"\nmax_flow_bytes = 100000");
    let f = gen(&s, 9, 4).unwrap();
    assert_eq!(f.len(), 9);
    let mut dsts: Vec<usize> = f.iter().map(|f| f.dst).collect();
    dsts.sort_unstable();
    assert_eq!(dsts, (0..9).collect::<Vec<_>>(), "every host receives once");
    assert!(f.iter().enumerate().all(|(i, f)| f.src == i && f.dst != i && f.size <= 100_000));
}

#[test]
fn the_same_seed_gives_the_same_flows_and_another_seed_others() {
    let s = spec("kind = \"poisson\"\ncdf = \"hadoop\"\nload = 0.5\nflows = 500");
    assert_eq!(gen(&s, 8, 9).unwrap(), gen(&s, 8, 9).unwrap());
    assert_ne!(gen(&s, 8, 9).unwrap(), gen(&s, 8, 10).unwrap());
}

#[test]
fn bad_workloads_are_refused_naming_the_setting() {
    let err = |t: &str, hosts| gen(&spec(t), hosts, 1).unwrap_err();
    assert!(err("kind = \"poisson\"\ncdf = \"websearch\"", 4).contains("needs load"));
    assert!(err("kind = \"poisson\"\ncdf = \"websearch\"\nload = 1.5", 4).contains("load 1.5"));
    assert!(err("kind = \"poisson\"\nload = 0.5", 4).contains("needs cdf"));
    assert!(err("kind = \"incast\"\nsize = 1\ncdf = \"hadoop\"", 4).contains("both"));
    assert!(err("kind = \"incast\"\nsize = 10\nfan_in = 4", 4).contains("fan_in 4"));
    assert!(err("kind = \"ring\"\nsize = 10", 4).contains("\"ring\""));
    assert!(err("kind = \"incast\"\nsize = 10", 1).contains("at least 2 hosts"));
    assert!(err("kind = \"incast\"\nsize = 0", 4).contains("at least 1 byte"));
    let e = toml::from_str::<WorkloadSpec>("kind = \"incast\"\nsizes = 3").unwrap_err();
    assert!(e.to_string().contains("sizes"), "{e}");
}

#[test]
fn slowdown_is_fct_over_the_ideal_and_buckets_split_by_size() {
    let rec = |size, fct| FlowRecord {
        conn: "a -> b".into(),
        size,
        start_ns: 0,
        fct_ns: fct,
        ideal_ns: ideal_fct_ns(size, 8.0, 1000),
    };
    // 8 Gbit/s: a byte a ns; 1 µs of round trip.
    assert_eq!(ideal_fct_ns(5000, 8.0, 1000), 6000);
    let flows =
        [rec(5000, 6000), rec(5000, 12_000), rec(50_000, 102_000), rec(20_000_000, 40_002_000)];
    let t = bucket_table(&flows);
    let labels: Vec<&str> = t.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["< 10 KB", "10 KB - 100 KB", ">= 10 MB", "all"]);
    assert_eq!((t[0].flows, t[0].mean, t[0].max), (2, 1.5, 2.0));
    assert_eq!(t[1].p50, 2.0);
    assert_eq!(t[3].flows, 4);
    let mut json = Vec::new();
    Results { flows: flows.to_vec(), ..Results::default() }.write_json(&mut json).unwrap();
    let json = String::from_utf8(json).unwrap();
    assert!(json.starts_with("{\"flows\":[{\"conn\":\"a -> b\",\"size\":5000,"), "{json}");
    assert!(json.contains("\"bucket\":\"< 10 KB\",\"flows\":2,\"mean\":1.5,"), "{json}");
}
