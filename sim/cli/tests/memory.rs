//! `softverbs perf memory` as real processes: a device with 1,000 RC QPs connected to a peer
//! process, with traffic through every one, grows less than 64 MiB beyond its registered memory
//! (issue 21, item 3); the table names every step; `--json` carries the same figures;
//! `--max-mib` fails a run that exceeds it; bad flags exit 2 naming the flag.

mod common;

use common::Run;

/// Run `softverbs perf memory <args>` (see [`common::softverbs`]).
fn memory(args: &[&str]) -> Run {
    let mut all = vec!["perf", "memory"];
    all.extend_from_slice(args);
    common::softverbs("memory", &all)
}

/// The number after `"key":` in a JSON object.
fn json_u64(json: &str, key: &str) -> u64 {
    let at = json.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("{key} in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().unwrap_or_else(|_| panic!("{key} is a number in {json}"))
}

#[test]
fn a_thousand_connected_rc_qps_stay_under_64_mib_beyond_registered_memory() {
    let r = memory(&["--max-mib", "64"]);
    let breakdown = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.status.success(), "the run failed ({}):\n{breakdown}", r.status);
    let steps: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("step "))
        .skip(1)
        .take_while(|l| !l.starts_with("fabric shared memory"))
        .map(|l| l.split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        steps,
        [
            "process baseline",
            "device opened",
            "+1 PD",
            "+16 CQs of 4096 entries",
            "+1000 MRs of 4096 B (written)",
            "+1000 RC QPs (sq 256, rq 128) created",
            "1000 QPs connected (RTS)",
            "after 4 WRITEs + 1 READ each way per QP",
        ],
        "{breakdown}"
    );
    let last = r.stdout.lines().last().unwrap_or("");
    let mib: f64 = last
        .strip_prefix("registered memory: 4096000 B; device growth beyond it: ")
        .and_then(|s| s.strip_suffix(" MiB for 1000 connected RC QPs"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the summary line, got {last:?}:\n{breakdown}"));
    assert!(mib > 0.0 && mib < 64.0, "{mib} MiB beyond registered memory:\n{breakdown}");
}

#[test]
fn json_carries_every_step_and_max_mib_fails_a_run_that_exceeds_it() {
    let r = memory(&["-q", "10", "--mrs", "4", "--cqs", "2", "--json", "--max-mib", "0"]);
    assert_eq!(r.status.code(), Some(1), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("beyond registered memory, more than --max-mib 0"),
        "stderr: {}",
        r.stderr
    );
    let json = r.stdout.trim();
    assert!(json.starts_with("{\"test\":\"memory\"") && json.ends_with("]}"), "{json}");
    assert_eq!(json_u64(json, "qps"), 10);
    assert_eq!(json_u64(json, "tx_depth"), 256);
    assert_eq!(json_u64(json, "rx_depth"), 128);
    assert_eq!(json_u64(json, "registered_bytes"), 4 * 4096);
    assert!(json_u64(json, "inbox_bytes") >= 1024 * 4352, "{json}");
    assert!(json_u64(json, "beyond_registered_bytes") > 0, "{json}");
    assert_eq!(json.matches("\"rss_kib\":").count(), 8, "{json}");
    assert!(json.contains("\"step\":\"10 QPs connected (RTS)\""), "{json}");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let r = memory(&["-s", "8192", "--mr-size", "4096"]);
    assert_eq!(r.status.code(), Some(2), "stderr: {}", r.stderr);
    assert!(r.stderr.contains("-s 8192 is larger than --mr-size 4096"), "{}", r.stderr);
    let r = memory(&["-q", "0"]);
    assert_eq!(r.status.code(), Some(2), "stderr: {}", r.stderr);
    assert!(r.stderr.contains("'--qps <QPS>'"), "{}", r.stderr);
}
