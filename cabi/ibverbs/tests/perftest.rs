//! perftest, unmodified, on softverbs' libibverbs.so.1 (its libmlx5/libefa/librdmacm load
//! against the library's IBVERBS_PRIVATE_34 entry points): every test completes as two
//! processes, its result table parses with non-zero figures, and no line reports a failure.
//! Sizes and iterations are small (CI has two cores).

mod common;

use std::time::Duration;

use common::{pair, text, tool, Env};

/// Run `program` between softverbs0 and softverbs1 with `args`; return the client's table rows
/// (the lines after the header whose first field is a number) after checking both sides.
fn perf(program: &str, args: &[&str]) -> Vec<Vec<f64>> {
    let Some(t) = tool(program, program, "perftest") else { return Vec::new() };
    let env = Env::new();
    let port = common::free_port().to_string();
    let mut server = vec!["-d", "softverbs0", "-p", &port];
    server.extend_from_slice(args);
    let mut client = server.clone();
    client[1] = "softverbs1";
    client.push("localhost");
    let (so, co) = pair(&env, &t, &server, &client, Duration::from_secs(90));
    let mut rows = Vec::new();
    for (who, out) in [("server", &so), ("client", &co)] {
        let (o, e) = text(out);
        let all = format!("{o}{e}");
        for bad in ["Couldn't", "failed", "Failed", "error", "Error", "Unable"] {
            assert!(!all.contains(bad), "{program} {who}: a line says `{bad}`:\n{all}");
        }
        let these: Vec<Vec<f64>> = o
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let nums: Option<Vec<f64>> = f.iter().map(|x| x.parse::<f64>().ok()).collect();
                nums.filter(|n| n.len() >= 4)
            })
            .collect();
        // READ and atomic latency tests measure on the requester (the client) only.
        if who == "client" || program == "ib_send_lat" || program == "ib_write_lat" {
            assert!(!these.is_empty(), "{program} {who}: no result row:\n{o}");
        }
        if who == "client" {
            rows = these;
        }
    }
    // Bandwidth is printed in MB/s with two decimals, so a 2-byte row of `-a` may read 0.00;
    // its message rate may not.
    let small = args.contains(&"-a");
    for r in &rows {
        // A latency row's t_stdev (its seventh column) may be 0.00 when every sample was
        // reached in about the same time (C programs' MRs are reached: docs/c.md).
        let stdev = |i: usize| r.len() == 9 && i == 6;
        let zero = if small {
            r[0] == 0.0 || r[1] == 0.0 || r[r.len() - 1] == 0.0
        } else {
            r.iter().enumerate().any(|(i, &v)| v == 0.0 && !stdev(i))
        };
        assert!(!zero, "{program}: a zero figure in {r:?}");
    }
    rows
}

#[test]
fn ib_send_lat() {
    for r in perf("ib_send_lat", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (2.0, 200.0));
    }
}

#[test]
fn ib_send_bw() {
    for r in perf("ib_send_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (65536.0, 200.0));
    }
}

#[test]
fn ib_send_bw_ud() {
    for r in perf("ib_send_bw", &["-c", "UD", "-n", "200"]) {
        assert_eq!((r[0], r[1]), (4096.0, 200.0));
    }
}

#[test]
fn ib_write_lat() {
    for r in perf("ib_write_lat", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (2.0, 200.0));
    }
}

#[test]
fn ib_write_bw() {
    for r in perf("ib_write_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (65536.0, 200.0));
    }
}

#[test]
fn ib_write_bw_all_sizes() {
    let rows = perf("ib_write_bw", &["-a", "-n", "20"]);
    if rows.is_empty() && common::tool("ib_write_bw", "ib_write_bw", "perftest").is_none() {
        return;
    }
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (1..=23).map(|i| (1u64 << i) as f64).collect();
    assert_eq!(sizes, want, "-a runs every power of two from 2 B to 8 MiB");
}

#[test]
fn ib_read_lat() {
    for r in perf("ib_read_lat", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (2.0, 200.0));
    }
}

#[test]
fn ib_read_bw() {
    for r in perf("ib_read_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (65536.0, 200.0));
    }
}

#[test]
fn ib_atomic_lat() {
    for r in perf("ib_atomic_lat", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (8.0, 200.0));
    }
}

#[test]
fn ib_atomic_bw() {
    for r in perf("ib_atomic_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (8.0, 200.0));
    }
}

/// Event-driven (`-e`): each side blocks in `ibv_get_cq_event`, whose thread runs the engine
/// (docs/decisions.md, "The waiter runs the engine").
#[test]
fn ib_send_lat_events() {
    for r in perf("ib_send_lat", &["-e", "-n", "200"]) {
        assert_eq!((r[0], r[1]), (2.0, 200.0));
    }
}
