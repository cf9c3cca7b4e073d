//! The connection manager across hosts over IPv6: librdmacm's programs between two network
//! namespaces on a veth pair, each end with its IPv4 address, its link-local IPv6 address and
//! a global one (`fd32::N/64`, given `nodad`), addressed by IPv6 as over rxe: `rping -s -a ::`
//! and `rping -c -a fd32::1` with every ping's bytes checked, the CM's MADs captured as
//! InfiniBand CM MADs on QP1 over IPv6 only (REQ, REP, RTU, DREQ, DREP, none malformed, no
//! IPv4 datagram), with direct reach on and off; a server bound to its global address; a
//! client to the link-local address with its scope id (`fe80::…%IFACE`); `ucmatose` and
//! `udaddy` (SIDR); a lost REQ and a lost REP sent again; a connect to a port nobody listens on
//! is REJECTED.
//!
//! As sim/cli/tests/netns_cm.rs (the hosts and their helpers are common/netns.rs): root is
//! needed, a test without it says why it skips (`SOFTVERBS_REQUIRE_NETNS=1`, as CI sets, makes
//! that a failure), every namespace is removed and every process killed when a test ends,
//! failed or not.

mod common;

use std::process::{Output, Stdio};

use common::netns::{
    cm_mads, have, may_make_hosts, roce_datagrams, rping_text, text, Capture, Hosts, Proc, LIMIT,
};

/// Two hosts on a veth pair with IPv4 addresses and `fd32::N/64` (given `nodad`, usable at
/// once); with `link_local`, each host's link-local address too, awaited (at most 20 s) until
/// duplicate address detection let it go.
fn v6_hosts(link_local: bool) -> (Hosts, Vec<String>) {
    let h = Hosts::new(2, 1);
    for i in 0..2 {
        h.add_v6(i, &format!("fd32::{}/64", i + 1));
    }
    let ll = match link_local {
        true => (0..2).map(|i| h.link_local(i)).collect(),
        false => Vec::new(),
    };
    (h, ll)
}

/// An rping server on host 0 (`server_addr`, port `port`) and, once it listens, a client on
/// host 1 to `client_addr`, `count` pings each, with `SOFTVERBS_REACH=reach`; both must exit 0
/// and print every ping's bytes.
fn rping(h: &Hosts, server_addr: &str, client_addr: &str, port: u16, count: usize, reach: &str) {
    let (p, n) = (port.to_string(), count.to_string());
    let what = format!("rping -a {client_addr} (server -a {server_addr}), SOFTVERBS_REACH={reach}");
    let mut server = h.run(0, &["rping", "-s", "-a", server_addr, "-p", &p, "-C", &n, "-v"]);
    server.env("SOFTVERBS_REACH", reach);
    let mut client = h.run(1, &["rping", "-c", "-a", client_addr, "-p", &p, "-C", &n, "-v"]);
    client.env("SOFTVERBS_REACH", reach);
    let server = Proc::spawn(server, &format!("{what}: server"));
    h.await_cm_listen(0, port, &what);
    let client = Proc::spawn(client, &format!("{what}: client")).finish(LIMIT);
    let server = server.finish(LIMIT);
    let texts = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let ((so, se), (co, ce)) = (texts(&server), texts(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{what}:\nserver:\n{so}{se}\nclient:\n{co}{ce}"
    );
    let want: Vec<String> = (0..count).map(|n| format!("ping data: {}", rping_text(n))).collect();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "{what}: client output; stderr: {ce}");
    let want: Vec<String> =
        (0..count).map(|n| format!("server ping data: {}", rping_text(n))).collect();
    assert_eq!(so.lines().collect::<Vec<_>>(), want, "{what}: server output; stderr: {se}");
}

#[test]
fn rping_runs_across_two_hosts_over_ipv6_with_its_cm_as_mads_over_ipv6() {
    let test = "rping_runs_across_two_hosts_over_ipv6_with_its_cm_as_mads_over_ipv6";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let (h, _) = v6_hosts(false);
    for (reach, port) in [("1", 7274), ("0", 7275)] {
        let mut cap = Capture::start(&h, 0);
        rping(&h, "::", "fd32::1", port, 50, reach);
        let file = cap.stop().to_path_buf();
        let mads = cm_mads(&file);
        for r in &mads {
            assert_eq!(
                (r[0].as_str(), r[1].as_str()),
                ("0x000001", "0x0000000080010000"),
                "to QP1 with the GSI Q_Key: {r:?}"
            );
        }
        let attrs: Vec<&str> = mads.iter().map(|r| r[2].as_str()).collect();
        assert_eq!(&attrs[..3], ["0x0010", "0x0013", "0x0014"], "REQ, REP, RTU: {mads:?}");
        assert!(attrs.contains(&"0x0015") && attrs.contains(&"0x0016"), "DREQ, DREP: {mads:?}");
        // Everything, MADs and the QPs' traffic, went over IPv6.
        let (v4, v6) = roce_datagrams(&file);
        assert!(v4.is_empty(), "{} RoCE datagrams over IPv4", v4.len());
        assert!(v6.len() > mads.len(), "{} over IPv6, {} of them MADs", v6.len(), mads.len());
        for i in 0..2 {
            assert!(h.cm_leftovers(i).is_empty(), "host {i}'s CM left {:?}", h.cm_leftovers(i));
        }
    }
    // A server bound to its global address.
    rping(&h, "fd32::1", "fd32::1", 7276, 10, "1");
}

#[test]
fn rping_connects_to_a_link_local_address_with_its_scope_id() {
    let test = "rping_connects_to_a_link_local_address_with_its_scope_id";
    if !may_make_hosts(test) || !have(test, "rping") {
        return;
    }
    let (h, ll) = v6_hosts(true);
    let to = format!("{}%{}", ll[0], h.iface(1));
    rping(&h, "::", &to, 7277, 10, "1");
}

/// A server on host 0 and, once it listens on `port`, a client on host 1; both must exit 0.
/// Returns their stdouts.
fn pair(h: &Hosts, port: u16, server: &[&str], client: &[&str], what: &str) -> (String, String) {
    let server = Proc::spawn(h.run(0, server), &format!("{what} server"));
    h.await_cm_listen(0, port, what);
    let client = Proc::spawn(h.run(1, client), &format!("{what} client")).finish(LIMIT);
    let server = server.finish(LIMIT);
    let (s, c) = (text(&server), text(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{what}:\nserver:\n{s}\nclient:\n{c}"
    );
    (s, c)
}

#[test]
fn ucmatose_and_udaddy_connect_across_two_hosts_over_ipv6() {
    let test = "ucmatose_and_udaddy_connect_across_two_hosts_over_ipv6";
    if !may_make_hosts(test) || !have(test, "ucmatose") || !have(test, "udaddy") {
        return;
    }
    let (h, _) = v6_hosts(false);
    let (so, co) = pair(
        &h,
        7471,
        &["ucmatose", "-b", "::", "-C", "20"],
        &["ucmatose", "-s", "fd32::1", "-C", "20"],
        "ucmatose",
    );
    for out in [&so, &co] {
        assert!(
            out.contains("data transfers complete") && out.contains("return status 0"),
            "{out}"
        );
    }
    // UD ids: SIDR_REQ and SIDR_REP over IPv6, then datagrams over IPv6 to the QP and Q_Key
    // they gave.
    let (so, co) = pair(&h, 7174, &["udaddy", "-b", "::"], &["udaddy", "-s", "fd32::1"], "udaddy");
    assert!(so.contains("sending replies") && so.contains("return status 0"), "{so}");
    assert!(co.contains("receiving data transfers") && co.contains("return status 0"), "{co}");
}

/// A REQ lost on its way in (the server's CM drops the first it receives) and, in a second
/// connection, a REP lost on its way in (the client's CM drops the first), over IPv6: each is
/// sent again after its try (about 4.1 s, as over IPv4), the connection forms and every
/// ping's bytes arrive; the capture shows the message twice, over IPv6.
#[test]
fn a_lost_req_or_rep_over_ipv6_is_sent_again_and_the_connection_forms() {
    let test = "a_lost_req_or_rep_over_ipv6_is_sent_again_and_the_connection_forms";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let (h, _) = v6_hosts(false);
    for (port, server_plan, client_plan, attr) in
        [(7285u16, "rx:drop=cm-req#1", "", "0x0010"), (7286, "", "rx:drop=cm-rep#1", "0x0013")]
    {
        let mut cap = Capture::start(&h, 0);
        let p = port.to_string();
        let mut server = h.run(0, &["rping", "-s", "-a", "::", "-p", &p, "-C", "10", "-v"]);
        server.env("SOFTVERBS_FAULTS", server_plan);
        let mut client = h.run(1, &["rping", "-c", "-a", "fd32::1", "-p", &p, "-C", "10", "-v"]);
        client.env("SOFTVERBS_FAULTS", client_plan);
        let server = Proc::spawn(server, "server");
        h.await_cm_listen(0, port, attr);
        let client = Proc::spawn(client, "client").finish(LIMIT);
        let server = server.finish(LIMIT);
        let (s, c) = (text(&server), text(&client));
        assert!(server.status.success() && client.status.success(), "{attr}:\n{s}\n{c}");
        let want = (0..10).map(|n| format!("ping data: {}", rping_text(n)));
        assert!(want.clone().all(|l| c.contains(&l)), "every ping's bytes: {c}");
        let plan_side = if server_plan.is_empty() { &c } else { &s };
        assert!(plan_side.contains("number 1 received dropped"), "{plan_side}");
        let file = cap.stop().to_path_buf();
        let mads = cm_mads(&file);
        let sent = mads.iter().filter(|r| r[2] == attr).count();
        assert_eq!(sent, 2, "{attr} twice (the first lost):\n{mads:?}");
        assert!(mads.iter().any(|r| r[2] == "0x0014"), "an RTU: {mads:?}");
        let (v4, v6) = roce_datagrams(&file);
        assert!(v4.is_empty() && !v6.is_empty(), "over IPv6 only: {} over IPv4", v4.len());
    }
}

/// QP 1 for every process of an address, over IPv6: UDP 4791 of `fd32::1` is held by one
/// process of host 0, which receives every CM MAD for its address. A listener in another
/// process is reached from host 1 while the holder has no CM (`ibv_rc_pingpong`: the MADs go
/// to the CM holding the address's gate name) and while the holder is itself a CM (an rping
/// server on another port, which hands the REQ, with its IPv6 addresses, to the listener's
/// process); and a client in a process that does not hold 4791 connects to host 1 (the REP
/// reaches the holder's CM, which hands it on). Every ping's bytes checked.
#[test]
fn every_process_of_an_address_has_qp1_over_ipv6() {
    let test = "every_process_of_an_address_has_qp1_over_ipv6";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "ibv_rc_pingpong") {
        return;
    }
    let (h, _) = v6_hosts(false);
    let rping = |host: usize, args: &[&str]| {
        let mut v = vec!["rping"];
        v.extend_from_slice(args);
        v.extend_from_slice(&["-C", "10", "-v"]);
        h.run(host, &v)
    };
    let check = |server: Proc, client: Proc, what: &str| {
        let client = client.finish(LIMIT);
        let server = server.finish(LIMIT);
        let (s, c) = (text(&server), text(&client));
        assert!(server.status.success() && client.status.success(), "{what}:\n{s}\n{c}");
        for n in 0..10 {
            let want = format!("ping data: {}", rping_text(n));
            assert!(c.lines().any(|l| l == want), "{what}: client: {c}");
            assert!(s.lines().any(|l| l == format!("server {want}")), "{what}: server: {s}");
        }
    };
    // 1. The holder uses no CM.
    let mut holder =
        Proc::spawn(h.run(0, &["ibv_rc_pingpong", "-g", "2", "-p", "18660"]), "holder");
    h.await_4791_v6(0, "fd32::1", &mut holder);
    let server = Proc::spawn(rping(0, &["-s", "-a", "::", "-p", "7287"]), "server");
    h.await_cm_listen(0, 7287, "server");
    let client = Proc::spawn(rping(1, &["-c", "-a", "fd32::1", "-p", "7287"]), "client");
    check(server, client, "beside a holder with no CM");
    drop(holder);
    // 2. The holder is a CM: an rping server waiting on another port.
    let mut holder = Proc::spawn(rping(0, &["-s", "-a", "::", "-p", "7288"]), "holder");
    h.await_4791_v6(0, "fd32::1", &mut holder);
    h.await_cm_listen(0, 7288, "the holder");
    let server = Proc::spawn(rping(0, &["-s", "-a", "fd32::1", "-p", "7289"]), "server");
    h.await_cm_listen(0, 7289, "server");
    let client = Proc::spawn(rping(1, &["-c", "-a", "fd32::1", "-p", "7289"]), "client");
    check(server, client, "beside a CM holder");
    // 3. A client of host 0 that does not hold 4791, to a server of host 1.
    let server = Proc::spawn(rping(1, &["-s", "-a", "::", "-p", "7290"]), "host 1's server");
    h.await_cm_listen(1, 7290, "host 1's server");
    let client = Proc::spawn(rping(0, &["-c", "-a", "fd32::2", "-p", "7290"]), "client");
    check(server, client, "a client that does not hold 4791");
    drop(holder);
}

#[test]
fn a_connect_over_ipv6_to_a_port_nobody_listens_on_is_rejected() {
    let test = "a_connect_over_ipv6_to_a_port_nobody_listens_on_is_rejected";
    if !may_make_hosts(test) || !have(test, "rping") {
        return;
    }
    let (h, _) = v6_hosts(false);
    // Host 0 has a CM to answer, but nothing listens on 7999.
    let mut idle = h.run(0, &["rping", "-s", "-a", "::", "-p", "7998", "-C", "1"]);
    idle.stdout(Stdio::null());
    let _server = Proc::spawn(idle, "idle rping server");
    h.await_cm_listen(0, 7998, "the idle rping server");
    let out = Proc::spawn(
        h.run(1, &["rping", "-c", "-a", "fd32::1", "-p", "7999", "-C", "1"]),
        "rping client",
    )
    .finish(LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("REJECTED") || t.contains("reject"), "the client was rejected: {t}");
}
