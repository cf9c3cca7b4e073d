//! perftest's `ib_write_lat`, unmodified, on the library: each side waits for the other's WRITE
//! by polling its memory while it calls in only to post and to poll its own CQ, so its NIC
//! thread must serve those WRITEs at once rather than stand by for the program (issue 29,
//! Deliver 4; docs/decisions.md, "A target polling memory"). With direct reach on and off, the
//! same bound.
//!
//! Its own test binary: the standby interval is made long (`SOFTVERBS_STANDBY_US`, inherited
//! by both processes), so that a WRITE left to the end of a standby is unmistakable.

mod common;

use std::time::Duration;

use common::{pair, text, tool, Env};

/// The standby interval of both processes' devices, in microseconds: long, so that a WRITE
/// held for a standby cannot pass for a slow wake-up.
const STANDBY_US: u64 = 100_000;
/// The typical (median) latency `ib_write_lat` must report, in microseconds: far below the
/// standby, and above a scheduler tick (4 ms at HZ 250, 10 ms at HZ 100), which on a two-core
/// machine whose cores the two busy-polling programs hold can bound a woken NIC thread's wait
/// for a core in a debug build. Typical here: about 30 µs.
const BOUND_US: f64 = 20_000.0;

#[test]
fn ib_write_lat_between_targets_polling_memory_is_not_held_by_the_standby() {
    let test = "ib_write_lat_between_targets_polling_memory_is_not_held_by_the_standby";
    let Some(t) = tool(test, "ib_write_lat", "perftest") else { return };
    std::env::set_var("SOFTVERBS_STANDBY_US", STANDBY_US.to_string());
    for reach in ["on", "off"] {
        std::env::set_var("SOFTVERBS_REACH", reach);
        let env = Env::new();
        let port = common::free_port().to_string();
        let server = ["-d", "softverbs0", "-p", &port, "-s", "8", "-n", "100"];
        let mut client = server.to_vec();
        client[1] = "softverbs1";
        client.push("localhost");
        let (so, co) = pair(&env, &t, &server, &client, Duration::from_secs(90));
        let (o, e) = text(&co);
        assert!(so.status.success() && co.status.success(), "[reach {reach}]\n{o}{e}");
        // #bytes #iterations t_min t_max t_typical t_avg ...
        let row: Vec<f64> = o
            .lines()
            .map(|l| l.split_whitespace().filter_map(|x| x.parse().ok()).collect::<Vec<f64>>())
            .find(|r| r.len() >= 5)
            .unwrap_or_else(|| panic!("[reach {reach}] no result row:\n{o}{e}"));
        assert_eq!((row[0], row[1]), (8.0, 100.0), "[reach {reach}]");
        eprintln!("[reach {reach}] ib_write_lat -s 8: t_typical {} us", row[4]);
        assert!(
            row[4] < BOUND_US,
            "[reach {reach}] ib_write_lat -s 8 typical {} us with a {STANDBY_US} us standby:\n{o}",
            row[4]
        );
    }
}
