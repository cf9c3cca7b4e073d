//! A connection's life cycle on softverbs' librdmacm.so.1, with tests/c/cm_life.c as a server
//! and a client process: a REQ that comes while the server is between two `rdma_listen`s on
//! its port waits for the next listener (perftest `-R`'s pattern, once a hang) however long the
//! server sleeps or works, is REJECTED (status 8) at once if the server waits for events
//! without listening again, and is UNREACHABLE after its life; a DREQ nobody answers gives
//! DISCONNECTED after its timeout; a peer (client
//! or server) that is SIGKILLed or exits without disconnecting gets the survivor DISCONNECTED
//! with its QP left as it was (RTS, as for a peer that disconnected: the kernel's CM leaves a
//! QP to its program, whose rdma_disconnect moves it to ERR), and one that dies before the
//! connection is made gets the other side REJECTED (status 4 or 28, as the dead process's
//! kernel would send); after DISCONNECTED each side gets TIMEWAIT_EXIT once the timewait
//! (512 ms) passed.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cm::leftovers;
use common::{finish, text, Env, Guard};

/// An Env with this package's librdmacm.so.1, and cm_life compiled into it (None: no C
/// compiler or librdmacm headers, the test skips as the other C tests do).
fn setup(test: &str) -> Option<(Env, PathBuf)> {
    let env = cm::env();
    let exe = cm::compile(test, &env, "tests/c/cm_life.c", "cm_life")?;
    Some((env, exe))
}

/// Start `cm_life server PORT N RELISTEN_MS [extra]` and wait (at most 10 s) until it listens.
fn server(env: &Env, exe: &Path, args: &[&str]) -> Guard {
    let mut g = Guard(Some(env.command(exe).arg("server").args(args).spawn().expect("spawn")));
    cm::wait_listening(env, &format!("0.0.0.0:{}", args[0]), &mut g);
    g
}

/// The lines of `out` about connection `c`, without the prefix.
fn conn_lines(out: &str, c: usize) -> Vec<String> {
    let p = format!("conn {c}: ");
    out.lines().filter_map(|l| l.strip_prefix(&p)).map(str::to_owned).collect()
}

/// What the side that disconnected prints after its connection ended: DISCONNECTED, its QP
/// in ERR (its own rdma_disconnect moved it), TIMEWAIT_EXIT no sooner than the timewait.
const ACTIVE_ENDING: [&str; 4] = [
    "RDMA_CM_EVENT_DISCONNECTED, status 0",
    "QP ERR",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT, status 0",
    "timewait at least 500 ms: yes",
];

/// What the side whose peer disconnected (or died) prints: DISCONNECTED with its QP still in
/// RTS (the peer's DREQ leaves it alone, as the kernel's CM and librdmacm do), its own
/// rdma_disconnect moving it to ERR, then TIMEWAIT_EXIT no sooner than the timewait.
const PASSIVE_ENDING: [&str; 5] = [
    "RDMA_CM_EVENT_DISCONNECTED, status 0",
    "QP RTS",
    "rdma_disconnect, QP ERR",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT, status 0",
    "timewait at least 500 ms: yes",
];

/// What the client prints of a connection that lived and ended: resolved, ESTABLISHED, then
/// [`ACTIVE_ENDING`] (`passive`: [`PASSIVE_ENDING`], the server ended it).
fn client_life(passive: bool) -> Vec<&'static str> {
    let mut v = vec![
        "RDMA_CM_EVENT_ADDR_RESOLVED, status 0",
        "RDMA_CM_EVENT_ROUTE_RESOLVED, status 0",
        "RDMA_CM_EVENT_ESTABLISHED, status 0",
    ];
    if passive {
        v.extend(PASSIVE_ENDING);
    } else {
        v.extend(ACTIVE_ENDING);
    }
    v
}

/// What the server prints of a connection that lived and that the client ended: the request,
/// ESTABLISHED, then [`PASSIVE_ENDING`].
fn server_life() -> Vec<&'static str> {
    let mut v =
        vec!["RDMA_CM_EVENT_CONNECT_REQUEST, status 0", "RDMA_CM_EVENT_ESTABLISHED, status 0"];
    v.extend(PASSIVE_ENDING);
    v
}

/// cm_life's client of one connection exited 0 after its whole life ([`client_life`]), with
/// "done" last and nothing on stderr.
fn assert_client_lived(client: &Output, passive: bool) {
    let (co, ce) = text(client);
    assert!(client.status.success(), "client {:?}:\n{co}{ce}", client.status);
    assert_eq!(conn_lines(&co, 0), client_life(passive), "client:\n{co}{ce}");
    assert_eq!(co.lines().last(), Some("done"));
    assert_eq!(ce, "");
}

#[test]
fn a_req_waits_for_a_server_between_two_listens_and_both_sides_get_timewait_exit() {
    let test = "a_req_waits_for_a_server_between_two_listens_and_both_sides_get_timewait_exit";
    // The server takes 300 ms to listen again after its first connection; the client's second
    // REQ leaves as soon as the first connection is ESTABLISHED.
    two_connections_across_a_relisten(test, &["300"]);
}

#[test]
fn a_req_waits_for_a_server_that_works_between_two_listens() {
    let test = "a_req_waits_for_a_server_that_works_between_two_listens";
    // 3 s on the CPU between the two listens: a server on a loaded machine (perftest -R's,
    // starved of CPU, once left its client REJECTED and itself waiting forever for a
    // CONNECT_REQUEST).
    let Some((client, _)) = req_between_listens(test, &["3000", "busy"], &[]) else { return };
    assert_client_lived(&client, false);
}

#[test]
fn a_req_waits_for_a_server_asleep_between_two_listens() {
    let test = "a_req_waits_for_a_server_asleep_between_two_listens";
    // The server sleeps 6 s before it listens again. What decides is what the server does
    // next, not how long it takes or whether it runs meanwhile (this was REJECTED after a 2 s
    // hold): it listens again without waiting for events in between, so the REQ is its.
    let Some((client, took)) = req_between_listens(test, &["6000"], &[]) else { return };
    assert_client_lived(&client, false);
    assert!(took >= Duration::from_secs(5), "connected after {took:?}, before the relisten");
}

#[test]
fn a_req_to_a_server_that_waits_for_events_without_listening_again_is_rejected() {
    let test = "a_req_to_a_server_that_waits_for_events_without_listening_again_is_rejected";
    // The server waits for its first connection's ESTABLISHED after closing its listener,
    // then spends 6 s on the CPU before it listens again: as with the kernel's CM, a REQ to a
    // port nobody listens on is REJECTED (status 8) at once (this waited, past a 2 s hold,
    // until the relisten, while the server was running).
    let Some((client, took)) = req_between_listens(test, &["6000", "waitfirstbusy"], &[]) else {
        return;
    };
    assert_client_rejected(&client, 8);
    assert!(took < Duration::from_secs(5), "REJECTED after {took:?}, not at once");
}

#[test]
fn a_req_held_past_its_life_is_unreachable() {
    let test = "a_req_held_past_its_life_is_unreachable";
    // The server sleeps 20 s between its listens; the client's CM tries last 50 ms here
    // (SOFTVERBS_CM_TRY_MS), so its REQ's life (16 tries) ends at 0.8 s: UNREACHABLE with
    // -ETIMEDOUT, what the kernel's CM gives when a REQ's every retry went unanswered.
    let cm_try = [("SOFTVERBS_CM_TRY_MS", "50")];
    let Some((client, _)) = req_between_listens(test, &["20000"], &cm_try) else { return };
    let (co, ce) = text(&client);
    assert_eq!(
        conn_lines(&co, 0),
        [
            "RDMA_CM_EVENT_ADDR_RESOLVED, status 0",
            "RDMA_CM_EVENT_ROUTE_RESOLVED, status 0",
            "RDMA_CM_EVENT_UNREACHABLE, status -110"
        ],
        "client:\n{co}{ce}"
    );
}

#[test]
fn a_dreq_nobody_answers_gives_disconnected_after_its_timeout() {
    let test = "a_dreq_nobody_answers_gives_disconnected_after_its_timeout";
    let Some((env, exe)) = setup(test) else { return };
    let port = common::free_port().to_string();
    // The server takes the connection, then sleeps without reading its events: nobody answers
    // the client's DREQ. Its CM tries last 50 ms (SOFTVERBS_CM_TRY_MS): after 16 of them the
    // client is DISCONNECTED all the same, with -ETIMEDOUT as cma.c reports IB_CM_DREQ_ERROR,
    // its QP in ERR, and its timewait follows (this waited for ever; cm_life gives up after
    // 10 s without an event).
    let _server = server(&env, &exe, &[&port, "1", "-1", "hold"]);
    let mut c = env.command(&exe);
    c.env("SOFTVERBS_CM_TRY_MS", "50").args(["client", "127.0.0.1", &port, "1", "disconnect"]);
    let client = finish(Guard(Some(c.spawn().expect("spawn client"))), limit(), "cm_life client");
    let (co, ce) = text(&client);
    assert!(client.status.success(), "client {:?}:\n{co}{ce}", client.status);
    let mut want = client_life(false);
    want[3] = "RDMA_CM_EVENT_DISCONNECTED, status -110";
    assert_eq!(conn_lines(&co, 0), want, "client:\n{co}{ce}");
    assert_eq!(co.lines().last(), Some("done"));
}

/// cm_life's client (one connection) got REJECTED with `status` once its address and route
/// were resolved, and exited 1 (it expected ESTABLISHED).
fn assert_client_rejected(client: &Output, status: i32) {
    let (co, ce) = text(client);
    let rejected = format!("RDMA_CM_EVENT_REJECTED, status {status}");
    assert_eq!(
        conn_lines(&co, 0),
        [
            "RDMA_CM_EVENT_ADDR_RESOLVED, status 0",
            "RDMA_CM_EVENT_ROUTE_RESOLVED, status 0",
            rejected.as_str()
        ],
        "client:\n{co}{ce}"
    );
    assert_eq!(client.status.code(), Some(1), "the client expected ESTABLISHED");
}

/// A REQ that comes while the server is between two listens: a server of two connections
/// (`RELISTEN_MS` and cm_life's mode in `relisten`) accepts a first client, which holds its
/// connection; once the server's listening id is closed (its name points at token 0), a second
/// client connects once and disconnects. That client's output, and how long it ran.
fn req_between_listens(
    test: &str,
    relisten: &[&str],
    client_env: &[(&str, &str)],
) -> Option<(Output, Duration)> {
    let (env, exe) = setup(test)?;
    let port = common::free_port().to_string();
    let mut args = vec![port.as_str(), "2"];
    args.extend_from_slice(relisten);
    let _server = server(&env, &exe, &args);
    let mut first = Guard(Some(
        env.command(&exe).args(["client", "127.0.0.1", &port, "1", "hold"]).spawn().expect("spawn"),
    ));
    wait_line(first.0.as_mut().expect("client").stdout.take().expect("stdout"), "holding");
    // Bounded: the server closes its listener right after its accept (its name then points at
    // token 0, or is gone once the server waited for events).
    let name = env.fabric.path().join("cm").join(format!("0.0.0.0:{port}"));
    let start = Instant::now();
    while std::fs::read_link(&name).is_ok_and(|t| !t.to_string_lossy().ends_with("#0")) {
        assert!(start.elapsed() < limit(), "the server never closed its listener");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    let mut c = env.command(&exe);
    c.args(["client", "127.0.0.1", &port, "1", "disconnect"]).envs(client_env.iter().copied());
    let client = finish(Guard(Some(c.spawn().expect("spawn client"))), limit(), "cm_life client");
    Some((client, t0.elapsed()))
}

/// cm_life's client connects twice to a server that destroys its listening id after the first
/// connection and listens again after `relisten` (`RELISTEN_MS` and cm_life's mode); both
/// connections go through their whole life on both sides, and the CM leaves nothing behind.
fn two_connections_across_a_relisten(test: &str, relisten: &[&str]) {
    let Some((env, exe)) = setup(test) else { return };
    let port = common::free_port().to_string();
    let mut args = vec!["server", port.as_str(), "2"];
    args.extend_from_slice(relisten);
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env,
        (&exe, &args),
        &format!("0.0.0.0:{port}"),
        (&exe, &["client", "127.0.0.1", &port, "2", "disconnect"]),
        limit(),
    );
    for c in 0..2 {
        assert_eq!(conn_lines(&co, c), client_life(false), "client, connection {c}:\n{co}");
        assert_eq!(conn_lines(&so, c), server_life(), "server, connection {c}:\n{so}");
    }
    assert_eq!(co.lines().last(), Some("done"));
    assert_eq!(so.lines().last(), Some("done"));
    assert_eq!((ce.as_str(), se.as_str()), ("", ""));
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// Every wait of these tests: 30 s (a loaded machine; the programs bound their own waits to
/// 10 s per event).
fn limit() -> Duration {
    Duration::from_secs(30)
}

/// Connect a client in `mode` to a one-connection server; once the client printed
/// `ready_line`, SIGKILL it if `kill` (else it exits by itself); the server's output and how
/// long after that it took the server to finish.
fn survivor(test: &str, mode: &str, ready_line: &str, kill: bool) -> Option<(String, Duration)> {
    let (env, exe) = setup(test)?;
    let port = common::free_port().to_string();
    let server = server(&env, &exe, &[&port, "1", "-1"]);
    let mut child = env
        .command(&exe)
        .args(["client", "127.0.0.1", &port, "1", mode])
        .spawn()
        .expect("spawn client");
    let stdout = child.stdout.take().expect("stdout");
    let mut client = Guard(Some(child));
    wait_line(stdout, ready_line);
    let c = client.0.as_mut().expect("client");
    if kill {
        // SIGKILL: the client's library sends nothing more.
        c.kill().expect("kill");
    }
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().expect("try_wait") {
            break s;
        }
        assert!(t0.elapsed() < limit(), "the client did not end");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.success(), !kill, "client status {status:?}");
    let server = finish(server, limit(), "cm_life server");
    let took = t0.elapsed();
    let (so, se) = text(&server);
    assert!(server.status.success(), "server {:?}:\n{so}{se}", server.status);
    assert_eq!(se, "");
    Some((so, took))
}

/// Read `out` (a child's stdout) until the line `want`, within [`limit`]; the rest is dropped.
fn wait_line(out: std::process::ChildStdout, want: &str) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit();
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l == want => return,
            Ok(l) => seen.push(l),
            Err(e) => panic!("no line `{want}` ({e}); the program printed {seen:?}"),
        }
    }
}

/// The server's whole output when its one client went away without disconnecting.
fn assert_survivor_output(so: &str) {
    assert_eq!(conn_lines(so, 0), server_life(), "server:\n{so}");
    assert_eq!(so.lines().last(), Some("done"));
}

#[test]
fn a_sigkilled_peer_gets_the_survivor_disconnected_with_its_qp_left_to_it() {
    let test = "a_sigkilled_peer_gets_the_survivor_disconnected_with_its_qp_left_to_it";
    let Some((so, took)) = survivor(test, "hold", "holding", true) else { return };
    assert_survivor_output(&so);
    // The peer check runs every 100 ms, the timewait is 512 ms; the rest is a loaded machine.
    assert!(took < Duration::from_secs(5), "the server took {took:?} to finish");
}

#[test]
fn a_peer_that_exits_without_disconnecting_gets_the_survivor_disconnected() {
    let test = "a_peer_that_exits_without_disconnecting_gets_the_survivor_disconnected";
    let Some((so, took)) = survivor(test, "exit", "exiting", false) else { return };
    assert_survivor_output(&so);
    assert!(took < Duration::from_secs(5), "the server took {took:?} to finish");
}

#[test]
fn a_sigkilled_server_gets_the_client_disconnected() {
    let test = "a_sigkilled_server_gets_the_client_disconnected";
    let Some((client, took)) = kill_server_when_holding(test, "hold", "wait") else { return };
    assert_client_lived(&client, true);
    assert!(took < Duration::from_secs(5), "the client took {took:?} to finish");
}

#[test]
fn a_server_killed_before_it_accepts_gets_the_client_rejected_with_status_28() {
    let test = "a_server_killed_before_it_accepts_gets_the_client_rejected_with_status_28";
    let Some((client, took)) = kill_server_when_holding(test, "noaccept", "disconnect") else {
        return;
    };
    // The server's kernel rejects a request its process never answered (consumer defined).
    assert_client_rejected(&client, 28);
    assert!(took < Duration::from_secs(5), "the client took {took:?} to finish");
}

/// A one-connection server in `server_mode` (`hold`: after its connection is established;
/// `noaccept`: at the CONNECT_REQUEST) and a client in `client_mode`; the server is SIGKILLed
/// once it says "holding". The client's output, and how long after the kill it ended.
fn kill_server_when_holding(
    test: &str,
    server_mode: &str,
    client_mode: &str,
) -> Option<(Output, Duration)> {
    let (env, exe) = setup(test)?;
    let port = common::free_port().to_string();
    let mut server = server(&env, &exe, &[&port, "1", "-1", server_mode]);
    let s_out = server.0.as_mut().expect("server").stdout.take().expect("stdout");
    let client = Guard(Some(
        env.command(&exe)
            .args(["client", "127.0.0.1", &port, "1", client_mode])
            .spawn()
            .expect("spawn client"),
    ));
    wait_line(s_out, "holding");
    let s = server.0.as_mut().expect("server");
    s.kill().expect("kill");
    let t0 = Instant::now();
    let killed = s.wait().expect("wait");
    assert!(!killed.success(), "the server ended by itself: {killed:?}");
    let client = finish(client, limit(), "cm_life client");
    Some((client, t0.elapsed()))
}

#[test]
fn a_client_gone_after_its_req_gets_the_server_rejected_with_status_4() {
    let test = "a_client_gone_after_its_req_gets_the_server_rejected_with_status_4";
    let Some((env, exe)) = setup(test) else { return };
    let port = common::free_port().to_string();
    let server = server(&env, &exe, &[&port, "1", "-1"]);
    let client = env.run(&exe, &["client", "127.0.0.1", &port, "1", "reqexit"], limit());
    assert!(client.status.success(), "client: {:?}", text(&client));
    let server = finish(server, limit(), "cm_life server");
    let (so, se) = text(&server);
    // The client's kernel rejects its own pending request when the process ends (timeout).
    assert_eq!(
        conn_lines(&so, 0),
        ["RDMA_CM_EVENT_CONNECT_REQUEST, status 0", "RDMA_CM_EVENT_REJECTED, status 4"],
        "server:\n{so}{se}"
    );
    assert_eq!(server.status.code(), Some(1), "the server expected ESTABLISHED");
}
