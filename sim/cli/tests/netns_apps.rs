//! Issue 31's programs across two hosts (network namespaces joined by a veth pair, see
//! common/netns.rs): the Rust example `sim/cli/examples/rc_exchange.rs` (QP addresses
//! exchanged over TCP as `ibv_rc_pingpong` does, a SEND each way and an RDMA WRITE, every byte
//! checked) and `softverbs demo --server` / `--connect ADDR`.
//!
//! The example is compiled into this test binary (`#[path]`) and run by re-running the binary
//! with `SOFTVERBS_TEST_RC_EXCHANGE` set (its arguments, separated by 0x1f): a filtered
//! `cargo test --test netns_apps` builds no examples, and the program under test must be the
//! example's own code.

mod common;
#[allow(dead_code)]
#[path = "../examples/rc_exchange.rs"]
mod rc_exchange;

use common::netns::{may_make_hosts, text, Hosts, Proc, LIMIT};

/// Where the test binary runs as the example.
const AS_EXAMPLE: &str = "SOFTVERBS_TEST_RC_EXCHANGE";

/// Not a test of its own: with `SOFTVERBS_TEST_RC_EXCHANGE` set this process is the example
/// (its exit status is the example's); without, it does nothing.
#[test]
fn run_as_rc_exchange() {
    let Ok(args) = std::env::var(AS_EXAMPLE) else { return };
    let args = args.split('\u{1f}').map(str::to_string);
    let code = match rc_exchange::parse_args(args) {
        Ok(a) => match rc_exchange::run(&a) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("rc_exchange: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("rc_exchange: {e}");
            2
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// The example in host `i` with `args`.
fn rc_exchange(h: &Hosts, i: usize, args: &[&str]) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary");
    let exe = exe.to_str().expect("UTF-8 path");
    let mut c =
        h.exec(i, exe, &["--exact", "run_as_rc_exchange", "--nocapture", "--test-threads=1"]);
    c.env(AS_EXAMPLE, args.join("\u{1f}"));
    c
}

#[test]
fn the_rust_example_exchanges_and_checks_its_bytes_across_two_hosts() {
    let test = "the_rust_example_exchanges_and_checks_its_bytes_across_two_hosts";
    if !may_make_hosts(test) {
        return;
    }
    let h = Hosts::new(2, 1);
    let server =
        Proc::spawn(rc_exchange(&h, 0, &["--netdev", h.iface(0), "-p", "18700"]), "server");
    // The client retries while the server is not listening yet.
    let start = std::time::Instant::now();
    let client = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let args = ["--netdev", h.iface(1), "-p", "18700", h.addr(0)];
        let out = Proc::spawn(rc_exchange(&h, 1, &args), "client").finish(LIMIT);
        let refused = !out.status.success() && text(&out).contains("Connection refused");
        if !refused || start.elapsed() > std::time::Duration::from_secs(20) {
            break out;
        }
    };
    let server = server.finish(LIMIT);
    let (s, c) = (text(&server), text(&client));
    assert!(server.status.success() && client.status.success(), "server:\n{s}\nclient:\n{c}");
    for out in [&s, &c] {
        assert!(out.contains("SEND: every byte of the peer's 4096 bytes as sent"), "{out}");
        assert!(
            out.contains("GID ::ffff:10.231.0.1") && out.contains("GID ::ffff:10.231.0.2"),
            "{out}"
        );
        assert!(out.contains("\ndone\n"), "{out}");
    }
    assert!(s.contains("RDMA WRITE: every byte of the client's 65536 bytes as sent"), "{s}");
    assert!(c.contains("RDMA WRITE: 65536 bytes into the server's memory"), "{c}");
}

#[test]
fn softverbs_demo_runs_across_two_hosts() {
    let test = "softverbs_demo_runs_across_two_hosts";
    if !may_make_hosts(test) {
        return;
    }
    let h = Hosts::new(2, 1);
    let server = Proc::spawn(h.softverbs(0, &["demo", "--server", "--port", "18701"]), "server");
    let start = std::time::Instant::now();
    let client = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let args = ["demo", "--connect", h.addr(0), "--port", "18701"];
        let out = Proc::spawn(h.softverbs(1, &args), "client").finish(LIMIT);
        let refused = !out.status.success() && text(&out).contains("Connection refused");
        if !refused || start.elapsed() > std::time::Duration::from_secs(20) {
            break out;
        }
    };
    let server = server.finish(LIMIT);
    let (s, c) = (text(&server), text(&client));
    assert!(server.status.success() && client.status.success(), "server:\n{s}\nclient:\n{c}");
    // The initiator's wire lines: RoCE v2 between the two hosts' addresses.
    let wire = "10.231.0.2 -> 10.231.0.1";
    for op in ["RC SEND ONLY", "RC RDMA WRITE FIRST", "RC RDMA READ REQUEST", "RC COMPARE SWAP"] {
        assert!(c.lines().any(|l| l.contains(op) && l.contains(wire)), "no {op} on the wire:\n{c}");
    }
    assert!(c.contains("target:    softverbs0 on 10.231.0.1 port 1"), "{c}");
    assert!(c.contains("All five operations completed with the right data."), "{c}");
    // The target's side, as it told the initiator, printed on its host too.
    assert!(s.contains("The initiator connected from 10.231.0.2:"), "{s}");
    for line in [
        "target memory [recv buffer]: \"Hello from softverbs0!\"",
        "2500 B written by RDMA WRITE]: starts \"RDMA WRITE: zero copy, no remote CPU. RD\", all 2500 bytes as sent",
        "target memory [atomic counter]: 50",
    ] {
        assert!(s.contains(line) && c.contains(line), "{line}:\nserver:\n{s}\nclient:\n{c}");
    }
}

#[test]
fn softverbs_demo_connect_names_a_server_that_is_not_there() {
    let test = "softverbs_demo_connect_names_a_server_that_is_not_there";
    if !may_make_hosts(test) {
        return;
    }
    let h = Hosts::new(2, 1);
    let args = ["demo", "--connect", h.addr(0), "--port", "18702"];
    let out = Proc::spawn(h.softverbs(1, &args), "client").finish(LIMIT);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("--connect 10.231.0.1: TCP port 18702: Connection refused"), "{t}");
    assert!(t.contains("is `softverbs demo --server` running there?"), "{t}");
}
