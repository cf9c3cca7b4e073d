//! The connection manager across hosts (issue 31 item 3): librdmacm's programs between two
//! network namespaces joined by a veth pair, each a "host" with its own address, its own
//! fabric directory (nothing shared but the wire) and its device on its interface. `rping`
//! with every ping's bytes checked and the CM's messages captured and decoded by tshark as
//! InfiniBand CM MADs on QP1 (REQ, REP, RTU, DREQ, DREP) with no malformed frame; `ucmatose`;
//! `udaddy` (UD ids: SIDR); perftest's `ib_write_bw -R`; a connect to a port nobody listens on is REJECTED.
//! A synchronous id migrated after it connected gets the peer's DREQ on its new channel; librpma's
//! server (its connection ids migrated off the listener's channel) serves two clients at once.
//!
//! As sim/cli/tests/netns.rs (the hosts and their helpers are common/netns.rs): root is needed, a test without it
//! says why it skips (`SOFTVERBS_REQUIRE_NETNS=1`, as CI sets, makes that a failure), every
//! namespace is removed and every process killed when a test ends, failed or not.

mod common;

use std::process::{Command, Output, Stdio};

use common::netns::{cm_mads, have, may_make_hosts, rping_text, text, Capture, Hosts, Proc, LIMIT};

/// A server on host 0, then, once it listens on `port` (its name is in host 0's CM
/// directory), a client on host 1; both must exit 0. Returns their (stdout, stderr) each.
fn pair(h: &Hosts, port: u16, server: &[&str], client: &[&str], what: &str) -> (Texts, Texts) {
    pair_of(h, port, h.run(0, server), h.run(1, client), what)
}

/// [`pair`] of two commands made by the caller.
fn pair_of(h: &Hosts, port: u16, server: Command, client: Command, what: &str) -> (Texts, Texts) {
    let server = Proc::spawn(server, &format!("{what} server"));
    h.await_cm_listen(0, port, what);
    let client = Proc::spawn(client, &format!("{what} client")).finish(LIMIT);
    let server = server.finish(LIMIT);
    let texts = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (s, c) = (texts(&server), texts(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{what}:\nserver:\n{}{}\nclient:\n{}{}",
        s.0,
        s.1,
        c.0,
        c.1
    );
    (s, c)
}

/// A program's stdout and stderr.
type Texts = (String, String);

#[test]
fn rping_runs_across_two_hosts_with_its_cm_as_infiniband_cm_mads() {
    let test = "rping_runs_across_two_hosts_with_its_cm_as_infiniband_cm_mads";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    let mut cap = Capture::start(&h, 0);
    let a = h.addr(0).to_string();
    let ((so, _), (co, ce)) = pair(
        &h,
        7174,
        &["rping", "-s", "-a", &a, "-C", "100", "-v"],
        &["rping", "-c", "-a", &a, "-C", "100", "-v"],
        "rping",
    );
    // Every ping's bytes, as each side printed them.
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", rping_text(n))).collect();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "client output; stderr: {ce}");
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", rping_text(n))).collect();
    assert_eq!(so.lines().collect::<Vec<_>>(), want, "server output");
    let file = cap.stop().to_path_buf();
    let mads = cm_mads(&file);
    let attrs: Vec<&str> = mads.iter().map(|r| r[2].as_str()).collect();
    for r in &mads {
        assert_eq!(
            (r[0].as_str(), r[1].as_str()),
            ("0x000001", "0x0000000080010000"),
            "to QP1 with the GSI Q_Key: {r:?}"
        );
    }
    // REQ, REP, RTU in order; then a DREQ and its DREP.
    assert_eq!(&attrs[..3], ["0x0010", "0x0013", "0x0014"], "{mads:?}");
    assert!(
        mads[0][3].contains("ConnectRequest") && mads[1][3].contains("ConnectReply"),
        "{mads:?}"
    );
    assert!(attrs.contains(&"0x0015") && attrs.contains(&"0x0016"), "DREQ and DREP: {mads:?}");
    for i in 0..2 {
        assert!(h.cm_leftovers(i).is_empty(), "host {i}'s CM left {:?}", h.cm_leftovers(i));
    }
}

#[test]
fn ucmatose_udaddy_and_perftest_connect_across_two_hosts() {
    let test = "ucmatose_udaddy_and_perftest_connect_across_two_hosts";
    if !may_make_hosts(test) || !have(test, "ucmatose") || !have(test, "ib_write_bw") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    let ((so, _), (co, _)) =
        pair(&h, 7471, &["ucmatose", "-C", "20"], &["ucmatose", "-s", &a, "-C", "20"], "ucmatose");
    for out in [&so, &co] {
        assert!(
            out.contains("data transfers complete") && out.contains("return status 0"),
            "{out}"
        );
    }
    // UD ids: SIDR_REQ and SIDR_REP on the wire, then datagrams to the QP and Q_Key they gave.
    let ((so, _), (co, _)) = pair(&h, 7174, &["udaddy"], &["udaddy", "-s", &a], "udaddy");
    assert!(so.contains("sending replies") && so.contains("return status 0"), "{so}");
    assert!(co.contains("receiving data transfers") && co.contains("return status 0"), "{co}");
    let ((so, _), (co, _)) = pair(
        &h,
        18515,
        &["ib_write_bw", "-R", "-n", "100", "-s", "65536"],
        &["ib_write_bw", "-R", "-n", "100", "-s", "65536", &a],
        "ib_write_bw -R",
    );
    for out in [&so, &co] {
        assert!(out.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:231:00:0"), "{out}");
        let row = |l: &str| l.split_whitespace().take(2).eq(["65536", "100"]);
        assert!(out.lines().any(row), "the bandwidth row: {out}");
    }
}

#[test]
fn a_connect_to_a_port_nobody_listens_on_across_hosts_is_rejected() {
    let test = "a_connect_to_a_port_nobody_listens_on_across_hosts_is_rejected";
    if !may_make_hosts(test) || !have(test, "rping") {
        return;
    }
    let h = Hosts::new(2, 1);
    // Host 0 has a device on its interface (a CM to answer) but nothing listens on 7999.
    let mut idle = h.run(0, &["rping", "-s", "-a", h.addr(0), "-p", "7998", "-C", "1"]);
    idle.stdout(Stdio::null());
    let _server = Proc::spawn(idle, "idle rping server");
    h.await_cm_listen(0, 7998, "the idle rping server");
    let out = Proc::spawn(
        h.run(1, &["rping", "-c", "-a", h.addr(0), "-p", "7999", "-C", "1"]),
        "rping client",
    )
    .finish(LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("REJECTED") || t.contains("reject"), "the client was rejected: {t}");
}

/// A REQ lost on its way in (the server's CM drops the first it receives) and, in a second
/// connection, a REP lost on its way in (the client's CM drops the first): each is sent again
/// after its CM response timeout (about 4.1 s, from the REQ's fields as ib_cm derives it), the
/// connection forms and every ping's bytes arrive; the capture on the server's side shows the
/// message twice, the same transaction ID both times.
#[test]
fn a_lost_req_or_rep_is_sent_again_and_the_connection_forms() {
    let test = "a_lost_req_or_rep_is_sent_again_and_the_connection_forms";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    for (port, server_plan, client_plan, attr) in
        [(7175u16, "rx:drop=cm-req#1", "", "0x0010"), (7176, "", "rx:drop=cm-rep#1", "0x0013")]
    {
        let mut cap = Capture::start(&h, 0);
        let p = port.to_string();
        let mut server = h.run(0, &["rping", "-s", "-a", &a, "-p", &p, "-C", "10", "-v"]);
        server.env("SOFTVERBS_FAULTS", server_plan);
        let mut client = h.run(1, &["rping", "-c", "-a", &a, "-p", &p, "-C", "10", "-v"]);
        client.env("SOFTVERBS_FAULTS", client_plan);
        let start = std::time::Instant::now();
        let ((so, se), (co, ce)) = pair_of(&h, port, server, client, attr);
        let took = start.elapsed();
        let want: Vec<String> = (0..10).map(|n| format!("ping data: {}", rping_text(n))).collect();
        assert_eq!(co.lines().collect::<Vec<_>>(), want, "client output; stderr: {ce}");
        assert_eq!(so.lines().count(), 10, "server output: {so}");
        // The plan was applied, and said so.
        let (plan_side, words) = if server_plan.is_empty() {
            (&ce, "0x0013 number 1 received")
        } else {
            (&se, "0x0010 number 1 received")
        };
        assert!(plan_side.contains(&format!("CM MAD {words} dropped")), "{plan_side}");
        assert!(took >= std::time::Duration::from_secs(4), "a try lasts about 4.1 s: {took:?}");
        let file = cap.stop().to_path_buf();
        let mads = cm_mads(&file);
        let sent: Vec<&Vec<String>> = mads.iter().filter(|r| r[2] == attr).collect();
        assert_eq!(sent.len(), 2, "{attr} twice (the first lost):\n{mads:?}");
        let attrs: Vec<&str> = mads.iter().map(|r| r[2].as_str()).collect();
        assert!(attrs.contains(&"0x0014"), "an RTU: {mads:?}");
        // One connection: one REP for the REQ's two copies (no MRA needed: the listener
        // answered the first before the second came, or never saw the first).
        if attr == "0x0010" {
            assert_eq!(attrs.iter().filter(|a| **a == "0x0013").count(), 1, "{mads:?}");
        }
    }
}

/// A listener slow to answer gets an MRA sent for it, as the kernel's CM does: the listener's
/// process (not the one holding 4791, whose CM stands in for it) is stopped, so the REQ
/// finds it but no REP comes; the client's CM sends the REQ again after its try (about 4.1
/// s), the stand-in answers the duplicate with an MRA (MessageReceiptAcknowledgement, the REQ
/// MRAed), which puts the client's next try off by its service timeout, and once the listener
/// runs again (10 s in) the connection forms: the capture shows REQ, REQ, MRA (no third REQ),
/// then REP and RTU, and every ping's bytes arrive.
#[test]
fn a_duplicate_req_to_a_listener_that_has_not_answered_gets_an_mra() {
    let test = "a_duplicate_req_to_a_listener_that_has_not_answered_gets_an_mra";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    let rping = |host: usize, args: &[&str]| {
        let mut v = vec!["rping"];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-C", "5", "-v"]);
        h.run(host, &v)
    };
    let mut holder = Proc::spawn(rping(0, &["-s", "-a", &a, "-p", "7183"]), "holder");
    h.await_4791(0, &mut holder);
    h.await_cm_listen(0, 7183, "the holder");
    let listener = Proc::spawn(rping(0, &["-s", "-a", &a, "-p", "7184"]), "listener");
    h.await_cm_listen(0, 7184, "the listener");
    let mut cap = Capture::start(&h, 0);
    let pid = listener.pid().to_string();
    let signal = |sig: &str| {
        let out = Command::new("kill").args([sig, &pid]).output().expect("kill runs");
        assert!(out.status.success(), "kill {sig} {pid}: {}", text(&out));
    };
    signal("-STOP");
    let client = Proc::spawn(rping(1, &["-c", "-a", &a, "-p", "7184"]), "client");
    // The REQ, its duplicate after a try, and the MRA; past the second try (8.3 s), which the
    // MRA put off by its service timeout (about 67 s): then the listener may answer.
    std::thread::sleep(std::time::Duration::from_secs(10));
    signal("-CONT");
    let client = client.finish(LIMIT);
    let server = listener.finish(LIMIT);
    assert!(
        client.status.success() && server.status.success(),
        "client:\n{}\nlistener:\n{}",
        text(&client),
        text(&server)
    );
    let want: Vec<String> = (0..5).map(|n| format!("ping data: {}", rping_text(n))).collect();
    let co = String::from_utf8_lossy(&client.stdout).into_owned();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "client: {}", text(&client));
    let file = cap.stop().to_path_buf();
    let mads = cm_mads(&file);
    let attrs: Vec<&str> = mads.iter().map(|r| r[2].as_str()).collect();
    assert!(attrs.len() >= 5, "{mads:?}");
    assert_eq!(&attrs[..5], ["0x0010", "0x0010", "0x0011", "0x0013", "0x0014"], "{mads:?}");
    assert!(
        mads[2][3].contains("MsgRcptAck") || mads[2][3].contains("MRA") || !mads[2][3].is_empty(),
        "{mads:?}"
    );
    drop(holder);
}

/// QP 1 for every process of an address: the process that holds UDP 4791 on host 0's address
/// receives every CM MAD for it. A listener in another process of the address is reached from
/// host 1 while the holder has no CM at all (`ibv_rc_pingpong`: the MADs go to the CM that
/// holds the address's gate name) and while the holder is itself a CM (an `rping` server on
/// another port, which answers as the listener's stand-in); and a client in a process that
/// does not hold 4791 connects to host 1 (the REP reaches the holder's CM, which hands it to
/// the client's). Every ping's bytes checked.
#[test]
fn every_process_of_an_address_has_qp1() {
    let test = "every_process_of_an_address_has_qp1";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "ibv_rc_pingpong") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a0 = h.addr(0).to_string();
    let a1 = h.addr(1).to_string();
    let rping = |host: usize, args: &[&str]| {
        let mut v = vec!["rping"];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-C", "10", "-v"]);
        h.run(host, &v)
    };
    let check = |(so, _): Texts, (co, ce): Texts, what: &str| {
        let want: Vec<String> = (0..10).map(|n| format!("ping data: {}", rping_text(n))).collect();
        assert_eq!(co.lines().collect::<Vec<_>>(), want, "{what}: client; stderr: {ce}");
        assert_eq!(so.lines().count(), 10, "{what}: server: {so}");
    };
    // 1. The holder uses no CM.
    let mut holder =
        Proc::spawn(h.run(0, &["ibv_rc_pingpong", "-g", "1", "-p", "18650"]), "holder");
    h.await_4791(0, &mut holder);
    let (s, c) = pair_of(
        &h,
        7177,
        rping(0, &["-s", "-a", &a0, "-p", "7177"]),
        rping(1, &["-c", "-a", &a0, "-p", "7177"]),
        "a listener beside a holder with no CM",
    );
    check(s, c, "beside a holder with no CM");
    drop(holder);
    // 2. The holder is a CM: an rping server waiting on another port.
    let mut holder = Proc::spawn(rping(0, &["-s", "-a", &a0, "-p", "7178"]), "holder");
    h.await_4791(0, &mut holder);
    h.await_cm_listen(0, 7178, "the holder");
    let (s, c) = pair_of(
        &h,
        7179,
        rping(0, &["-s", "-a", &a0, "-p", "7179"]),
        rping(1, &["-c", "-a", &a0, "-p", "7179"]),
        "a listener beside a holder that is a CM",
    );
    check(s, c, "beside a CM holder");
    // 3. A client of host 0 that does not hold 4791, to a server of host 1.
    let server = Proc::spawn(rping(1, &["-s", "-a", &a1, "-p", "7180"]), "host 1's server");
    h.await_cm_listen(1, 7180, "host 1's server");
    let client = Proc::spawn(rping(0, &["-c", "-a", &a1, "-p", "7180"]), "client").finish(LIMIT);
    let server = server.finish(LIMIT);
    let t = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert!(
        client.status.success() && server.status.success(),
        "client:\n{}\nserver:\n{}",
        text(&client),
        text(&server)
    );
    check(t(&server), t(&client), "a client that does not hold 4791");
    drop(holder);
}

/// Across hosts the path MTU is the active side's port MTU, as the kernel's CM takes it from
/// its path record: on a 9000-byte link, `active_mtu` 4096, so rping's 16 KiB RDMA READs and
/// WRITEs travel in 4096-byte packets (on a 1500-byte link, 1024: the other tests).
#[test]
fn the_path_mtu_across_hosts_is_the_port_s_active_mtu() {
    let test = "the_path_mtu_across_hosts_is_the_port_s_active_mtu";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    for i in 0..2 {
        common::netns::ip(&["-n", h.ns(i), "link", "set", h.iface(i), "mtu", "9000"]);
    }
    let mut cap = Capture::start(&h, 0);
    let a = h.addr(0).to_string();
    let ((so, _), (co, ce)) = pair(
        &h,
        7181,
        &["rping", "-s", "-a", &a, "-p", "7181", "-S", "16384", "-C", "3", "-v"],
        &["rping", "-c", "-a", &a, "-p", "7181", "-S", "16384", "-C", "3", "-v"],
        "rping at MTU 9000",
    );
    assert_eq!(co.lines().count(), 3, "client: {co}{ce}");
    assert_eq!(so.lines().count(), 3, "server: {so}");
    let file = cap.stop().to_path_buf();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-Y", "udp.dstport == 4791", "-T", "fields", "-e", "udp.length"])
        .output()
        .expect("tshark runs");
    let lens: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let max = lens.iter().copied().max().unwrap_or(0);
    // 8 (UDP) + 12 (BTH) + 4096 + 4 (ICRC), a RETH or AETH more on some.
    assert!(
        (4120..=4140).contains(&max),
        "the largest RoCE datagram: {max} bytes ({} seen)",
        lens.len()
    );
}

/// A SIDR_REQ lost on its way in (the server's CM drops the first it receives) is sent again
/// after rdma_cm's SIDR timeout (2^(20-8) ms, as `ib_send_cm_sidr_req` is given it), and
/// `udaddy` completes: the capture on the server's side shows the SIDR_REQ twice with one
/// transaction ID, and one SIDR_REP.
#[test]
fn a_lost_sidr_req_is_sent_again_and_udaddy_completes() {
    let test = "a_lost_sidr_req_is_sent_again_and_udaddy_completes";
    if !may_make_hosts(test) || !have(test, "udaddy") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    let mut cap = Capture::start(&h, 0);
    let mut server = h.run(0, &["udaddy"]);
    server.env("SOFTVERBS_FAULTS", "rx:drop=cm-sidr-req#1");
    let client = h.run(1, &["udaddy", "-s", &a]);
    let start = std::time::Instant::now();
    let ((so, se), (co, _)) = pair_of(&h, 7174, server, client, "udaddy");
    let took = start.elapsed();
    assert!(so.contains("sending replies") && so.contains("return status 0"), "{so}");
    assert!(co.contains("receiving data transfers") && co.contains("return status 0"), "{co}");
    assert!(se.contains("CM MAD 0x0017 number 1 received dropped"), "{se}");
    assert!(took >= std::time::Duration::from_secs(4), "a try lasts about 4.1 s: {took:?}");
    let file = cap.stop().to_path_buf();
    let mads = cm_mads(&file);
    let reqs: Vec<&Vec<String>> = mads.iter().filter(|r| r[2] == "0x0017").collect();
    assert_eq!(reqs.len(), 2, "the SIDR_REQ twice (the first lost):\n{mads:?}");
    assert_eq!(reqs[0][5], reqs[1][5], "one transaction ID: {mads:?}");
    assert_eq!(mads.iter().filter(|r| r[2] == "0x0018").count(), 1, "one SIDR_REP: {mads:?}");
}

/// A REQ (rping) and a SIDR_REQ (udaddy) to a host where no CM answers (nothing holds its UDP
/// port 4791) end, after the kernel's 16 tries, in `RDMA_CM_EVENT_UNREACHABLE` with
/// `-ETIMEDOUT` (cma.c's answer to `IB_CM_REQ_ERROR` and `IB_CM_SIDR_REQ_ERROR`), and the
/// programs exit with an error instead of waiting for ever. `SOFTVERBS_CM_TRY_MS` shortens
/// each try to 200 ms.
#[test]
fn a_req_to_a_host_where_no_cm_answers_ends_unreachable() {
    let test = "a_req_to_a_host_where_no_cm_answers_ends_unreachable";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "udaddy") {
        return;
    }
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    for program in [&["rping", "-c", "-a", &a, "-p", "7177", "-C", "1"][..], &["udaddy", "-s", &a]]
    {
        let mut client = h.run(1, program);
        client.env("SOFTVERBS_CM_TRY_MS", "200");
        let start = std::time::Instant::now();
        let out = Proc::spawn(client, program[0]).finish(LIMIT);
        let took = start.elapsed();
        let t = text(&out);
        assert!(!out.status.success(), "{}: {t}", program[0]);
        assert!(t.contains("UNREACHABLE") || t.contains("-110"), "{}: {t}", program[0]);
        assert!(took >= std::time::Duration::from_millis(16 * 200), "16 tries: {took:?}");
        assert!(took < std::time::Duration::from_secs(30), "16 short tries: {took:?}");
    }
}

/// A synchronous id migrated after it connected gets its later events on the new channel across
/// hosts too (tests/c/sync_migrate_hosts.c): the client's DREQ, a MAD the server's gateway hands
/// to the id's reply socket recorded at connect time, reaches the server's new channel as
/// DISCONNECTED, and the server's DREP ends the client's blocking `rdma_disconnect` with 0
/// (before, it stayed on the id's old private channel, unread). Direct reach on and off.
#[test]
fn a_synchronous_id_migrated_after_it_connected_gets_the_peers_disconnect_across_hosts() {
    let test =
        "a_synchronous_id_migrated_after_it_connected_gets_the_peers_disconnect_across_hosts";
    if !may_make_hosts(test) || !have(test, "cc") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = compile(&dir, "tests/c/sync_migrate_hosts.c", &["-lrdmacm", "-libverbs"]);
    let exe = exe.to_str().expect("UTF-8 path");
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    for (reach, port) in [("1", "7190"), ("0", "7191")] {
        let mut server = h.run(0, &[exe, "server", &a, port]);
        let mut client = h.run(1, &[exe, "client", &a, port]);
        server.env("SOFTVERBS_REACH", reach);
        client.env("SOFTVERBS_REACH", reach);
        let what = format!("SOFTVERBS_REACH={reach}");
        let ((so, se), (co, ce)) = pair_of(&h, port.parse().expect("port"), server, client, &what);
        assert_eq!(
            so,
            "accepted: RDMA_CM_EVENT_ESTABLISHED\n\
             migrated: on the new channel yes\n\
             event on the new channel: RDMA_CM_EVENT_DISCONNECTED status 0\n\
             event on the new channel: RDMA_CM_EVENT_TIMEWAIT_EXIT status 0\n\
             done\n",
            "{what}: server: {se}"
        );
        assert_eq!(
            co,
            "connected: RDMA_CM_EVENT_ESTABLISHED\n\
             rdma_disconnect: 0, its event RDMA_CM_EVENT_DISCONNECTED status 0\n\
             done\n",
            "{what}: client: {ce}"
        );
        assert_eq!((se.as_str(), ce.as_str()), ("", ""), "{what}");
    }
    for i in 0..2 {
        assert!(h.cm_leftovers(i).is_empty(), "host {i}: {:?}", h.cm_leftovers(i));
    }
}

/// librpma across hosts (cabi/rdmacm/tests/c/rpma_pair.c): its server's connection ids, moved
/// from the endpoint's channel to channels of their own right after `rdma_accept`, get their
/// RTU and DREQ (MADs the server's gateway hands to each id's own name, recorded at connect
/// time) on the new channels, the endpoint's channel unread; two clients on the other host at
/// once, each writing, flushing, reading and sending, every byte and completion checked. Direct
/// reach on and off.
#[test]
fn librpma_serves_two_clients_across_hosts() {
    let test = "librpma_serves_two_clients_across_hosts";
    if !may_make_hosts(test) || !have(test, "cc") {
        return;
    }
    if !std::path::Path::new("/usr/include/librpma.h").exists() {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_C").is_none_or(|v| v != "1"),
            "SOFTVERBS_REQUIRE_C=1 but /usr/include/librpma.h is missing: apt-get install librpma-dev"
        );
        eprintln!("{test}: skipped: no librpma-dev");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let libs = ["-lrpma", "-lrdmacm", "-libverbs"];
    let exe = compile(&dir, "../../cabi/rdmacm/tests/c/rpma_pair.c", &libs);
    let exe = exe.to_str().expect("UTF-8 path");
    let h = Hosts::new(2, 1);
    let a = h.addr(0).to_string();
    for (reach, port) in [("1", 7192), ("0", 7193)] {
        let p = port.to_string();
        let what = format!("SOFTVERBS_REACH={reach}");
        let mut server = h.run(0, &[exe, "server", &a, &p, "2"]);
        server.env("SOFTVERBS_REACH", reach);
        let server = Proc::spawn(server, &format!("{what} rpma server"));
        h.await_cm_listen(0, port, &what);
        let clients: Vec<Proc> = (1..=2)
            .map(|k| {
                let mut c = h.run(1, &[exe, "client", &a, &p, &k.to_string()]);
                c.env("SOFTVERBS_REACH", reach);
                Proc::spawn(c, &format!("{what} rpma client {k}"))
            })
            .collect();
        let outs: Vec<Output> = clients.into_iter().map(|c| c.finish(LIMIT)).collect();
        let server = server.finish(LIMIT);
        let t = |o: &Output| {
            let (so, se) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            format!("{so}{se}")
        };
        assert!(
            server.status.success() && outs.iter().all(|o| o.status.success()),
            "{what}: server:\n{}\nclients:\n{}\n{}",
            t(&server),
            t(&outs[0]),
            t(&outs[1])
        );
        let sum = |k: usize| (0..4096).map(|i| (i * 7 + k * 13 + i / 256) % 256).sum::<usize>();
        for (k, o) in outs.iter().enumerate().map(|(i, o)| (i + 1, o)) {
            assert_eq!(
                t(o),
                format!(
                    "client {k}: written, flushed, read back, answered sum {}, closed\n",
                    sum(k)
                ),
                "{what}"
            );
        }
        let mut lines: Vec<String> = t(&server).lines().map(String::from).collect();
        lines.sort();
        let want: Vec<String> = (1..=2)
            .map(|k| format!("server: client {k}: 4096 bytes as written, sum {}, closed", sum(k)))
            .collect();
        assert_eq!(lines, want, "{what}");
    }
    for i in 0..2 {
        assert!(h.cm_leftovers(i).is_empty(), "host {i}: {:?}", h.cm_leftovers(i));
    }
}

/// Compile the C program `src` (relative to this package) with `libs` into `dir`, under its
/// file stem; the test fails with the compiler's output if that fails.
fn compile(dir: &tempfile::TempDir, src: &str, libs: &[&str]) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let exe = dir.path().join(src.file_stem().expect("a file name"));
    let cc = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .expect("cc");
    assert!(cc.status.success(), "cc: {}", text(&cc));
    exe
}
