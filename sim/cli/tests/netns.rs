//! softverbs as a RoCE v2 device over UDP between hosts (issue 31): network namespaces joined
//! by veth pairs (or a bridge) stand in for hosts, each process's device on its namespace's
//! interface (`--netdev`, `SOFTVERBS_NETDEV`). rdma-core's pingpongs, perftest and `softverbs
//! pingpong` across two hosts; the wire captured inside a namespace and decoded by tshark as
//! RoCE v2 with no malformed frame, every ICRC checked; four hosts all to all with every byte
//! checked; 2 % loss each way; a host killed mid-transfer; processes sharing one address, its UDP 4791
//! taken over when its holder dies.
//!
//! The hosts and their helpers are in common/netns.rs. Namespaces need root: without it each test says why it skips, and with
//! `SOFTVERBS_REQUIRE_NETNS=1` (as CI sets) that is a failure. Every namespace is removed when
//! its test ends, failed or not (a guard's drop), and every process is killed.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::{
    check_pingpong, have, ip, may_make_hosts, pair, roce_datagrams, text, tshark_decode, Capture,
    Hosts, Proc, LIMIT,
};

/// A free TCP port number for a tool's exchange (namespaces have their own ports: any works).
fn port(n: u16) -> String {
    (18_600 + n).to_string()
}

/// ibv_rc_pingpong's or ibv_ud_pingpong's arguments from GID index 1 (the IPv4 address).
fn pingpong_args<'a>(tool: &'a str, port: &'a str, size: &'a str, iters: &'a str) -> Vec<&'a str> {
    let mut v = vec![tool, "-g", "1", "-p", port, "-s", size, "-n", iters];
    if tool == "ibv_rc_pingpong" {
        v.push("--chk");
    }
    v
}

#[test]
fn the_pingpongs_run_across_two_hosts_as_rocev2_on_the_wire() {
    let test = "the_pingpongs_run_across_two_hosts_as_rocev2_on_the_wire";
    if !may_make_hosts(test) || !have(test, "ibv_rc_pingpong") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new(2, 1);
    let mut cap = Capture::start(&h, 0);
    let p = port(1);
    for (tool, size) in [("ibv_rc_pingpong", "4096"), ("ibv_ud_pingpong", "512")] {
        let args = pingpong_args(tool, &p, size, "20");
        let mut client = args.clone();
        client.push(h.addr(0));
        let (s, c) = pair(h.run(0, &args), || h.run(1, &client), tool);
        for out in [&s, &c] {
            check_pingpong(out, size.parse().unwrap(), 20);
        }
        // Each side saw the other's IPv4 address as its GID.
        assert!(s.contains("GID ::ffff:10.231.0.1") && s.contains("GID ::ffff:10.231.0.2"), "{s}");
    }
    let file = cap.stop().to_path_buf();
    let (frames, _) = roce_datagrams(&file);
    assert!(frames.len() >= 4 * 20, "the pingpongs' datagrams were captured: {}", frames.len());
    for f in &frames {
        // The kernel's headers, the ICRC over them: what rxe or a RoCE NIC would check.
        nic_model::packet::parse_datagram(f)
            .unwrap_or_else(|e| panic!("a datagram on the wire does not check ({e}): {f:02x?}"));
        // UDP checksum 0, as rxe's prepare_udp_hdr leaves it (RoCE v2 over IPv4 needs none).
        assert_eq!(f[26..28], [0, 0], "the UDP checksum: {f:02x?}");
    }
    let decoded = tshark_decode(&file);
    // 4096 bytes at the 1024-byte MTU of a 1500-byte link: four packets a message.
    for op in ["RC Send First", "RC Send Middle", "RC Send Last", "RC Acknowledge", "UD Send Only"]
    {
        assert!(decoded.contains(op), "no {op} decoded:\n{decoded}");
    }
}

#[test]
fn perftest_writes_and_reads_across_two_hosts() {
    let test = "perftest_writes_and_reads_across_two_hosts";
    if !may_make_hosts(test) || !have(test, "ib_write_bw") {
        return;
    }
    let h = Hosts::new(2, 1);
    for (n, tool, extra) in [(2, "ib_write_bw", ["-s", "65536"]), (3, "ib_read_lat", ["-s", "64"])]
    {
        let p = port(n);
        let args = [tool, "-x", "1", "-n", "20", "-p", p.as_str(), extra[0], extra[1]];
        let mut client = args.to_vec();
        client.push(h.addr(0));
        let (s, c) = pair(h.run(0, &args), || h.run(1, &client), tool);
        // The client reports (and so the server of a bandwidth test).
        assert!(c.contains("#bytes"), "{tool}: no result table:\n{c}");
        assert!(!s.contains("Failed") && !c.contains("Failed"), "{tool}:\n{s}\n{c}");
        let row = c.lines().find(|l| l.trim_start().starts_with(extra[1])).unwrap_or("");
        assert!(row.split_whitespace().nth(1) == Some("20"), "{tool}: 20 iterations:\n{c}");
    }
}

#[test]
fn softverbs_pingpong_runs_across_two_hosts() {
    let test = "softverbs_pingpong_runs_across_two_hosts";
    if !may_make_hosts(test) {
        return;
    }
    let h = Hosts::new(2, 1);
    let p = port(4);
    let args = ["pingpong", "-g", "1", "-p", p.as_str(), "-s", "1000", "-n", "50", "--chk"];
    let mut client = args.to_vec();
    client.push(h.addr(0));
    let (s, c) = pair(h.softverbs(0, &args), || h.softverbs(1, &client), "softverbs pingpong");
    for out in [&s, &c] {
        check_pingpong(out, 1000, 50);
        assert!(out.contains("--chk: every byte of the peer's 50 messages as sent"), "{out}");
    }
}

#[test]
fn processes_share_one_address_and_reach_each_other_and_other_hosts() {
    let test = "processes_share_one_address_and_reach_each_other_and_other_hosts";
    if !may_make_hosts(test) || !have(test, "ibv_rc_pingpong") || !have(test, "ib_write_bw") {
        return;
    }
    let h = Hosts::new(2, 1);
    // A first process holds the device (and UDP 4791 on 10.231.0.1) while it waits.
    let p = port(5);
    let mut holder =
        Proc::spawn(h.run(0, &pingpong_args("ibv_rc_pingpong", &p, "64", "5")), "holder");
    h.await_4791(0, &mut holder);
    // A second process on the address: the same GID, rxe's MTU.
    let out = Proc::spawn(h.softverbs(0, &["devinfo", "-v"]), "devinfo").finish(LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("GID[  1]:\t\t::ffff:10.231.0.1, RoCE v2"), "{t}");
    assert!(t.contains("active_mtu:\t\t1024 (3)"), "rxe's choice for a 1500-byte MTU:\n{t}");
    // The holder's client is a process on the same address.
    let mut client = pingpong_args("ibv_rc_pingpong", &p, "64", "5");
    client.push(h.addr(0));
    let out = Proc::spawn(h.run(0, &client), "local client").finish(LIMIT);
    let (s, c) = (text(&holder.take().finish(LIMIT)), text(&out));
    assert!(out.status.success(), "local client:\n{c}\nholder:\n{s}");
    check_pingpong(&s, 64, 5);
    check_pingpong(&c, 64, 5);
    // Two processes of host 0, neither the first, with one of host 1 and with each other,
    // while a third holds 4791.
    let p = port(8);
    let mut holder =
        Proc::spawn(h.run(0, &pingpong_args("ibv_rc_pingpong", &p, "64", "5")), "holder");
    h.await_4791(0, &mut holder);
    let p = port(11);
    let args = ["pingpong", "-g", "1", "-p", p.as_str(), "-s", "1000", "-n", "50", "--chk"];
    for (server, client) in [(0, 1), (1, 0), (0, 0)] {
        let mut to = args.to_vec();
        to.push(h.addr(server));
        let (s, c) = pair(h.softverbs(server, &args), || h.softverbs(client, &to), "pingpong");
        for out in [&s, &c] {
            check_pingpong(out, 1000, 50);
            assert!(out.contains("--chk: every byte of the peer's 50 messages as sent"), "{out}");
        }
    }
    // perftest across and within the host.
    let p = port(12);
    let bw = ["ib_write_bw", "-x", "1", "-s", "4096", "-n", "200", "-p", p.as_str()];
    for (server, client) in [(0, 1), (0, 0)] {
        let mut to = bw.to_vec();
        to.push(h.addr(server));
        let (s, c) = pair(h.run(server, &bw), || h.run(client, &to), "ib_write_bw");
        assert!(!s.contains("Failed") && !c.contains("Failed"), "ib_write_bw:\n{s}\n{c}");
        let row = c.lines().find(|l| l.trim_start().starts_with("4096")).unwrap_or("");
        assert!(row.split_whitespace().nth(1) == Some("200"), "200 iterations:\n{c}");
    }
    drop(holder);
}

#[test]
fn when_the_holder_of_4791_dies_another_process_takes_it_over() {
    let test = "when_the_holder_of_4791_dies_another_process_takes_it_over";
    if !may_make_hosts(test) || !have(test, "ibv_rc_pingpong") {
        return;
    }
    let h = Hosts::new(2, 1);
    let mut holder =
        Proc::spawn(h.run(0, &pingpong_args("ibv_rc_pingpong", &port(9), "64", "5")), "holder");
    h.await_4791(0, &mut holder);
    // A second process of host 0 talks to host 1 (its datagrams arrive through the holder).
    let p = port(10);
    let args = ["pingpong", "-g", "1", "-p", p.as_str(), "-s", "4096", "-n", "1500", "--chk"];
    let mut to1 = args.to_vec();
    to1.push(h.addr(1));
    let server = Proc::spawn(h.softverbs(1, &args), "server");
    // The client retries its connect while the server starts; once connected (the TCP
    // exchange stays open while they bounce), mid-transfer, the holder is killed (SIGKILL:
    // nothing of it runs to hand anything over).
    let mut client = Proc::spawn(h.softverbs(0, &to1), "client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ss = Command::new("ip")
            .args(["netns", "exec", h.ns(1), "ss", "-Htn", "state", "established"])
            .arg(format!("( sport = :{p} )"))
            .output()
            .expect("ss runs");
        if !String::from_utf8_lossy(&ss.stdout).trim().is_empty() {
            break;
        }
        let ended = client.0.as_mut().expect("client").try_wait().expect("try_wait").is_some();
        assert!(!ended && Instant::now() < deadline, "the client never connected");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let running = client.0.as_mut().expect("client").try_wait().expect("try_wait").is_none();
    drop(holder);
    let t = text(&client.take().finish(LIMIT));
    assert!(running, "the transfer ended before the holder was killed:\n{t}");
    // The client took 4791 over and its transport retried what was lost meanwhile: within
    // RC's budget (retry_cnt 7 ACK timeouts of 67 ms, about half a second), else it would
    // have ended in RETRY_EXC_ERR.
    check_pingpong(&t, 4096, 1500);
    assert!(t.contains("--chk: every byte of the peer's 1500 messages as sent"), "{t}");
    let s = text(&server.finish(LIMIT));
    check_pingpong(&s, 4096, 1500);
}

#[test]
fn four_hosts_all_to_all_with_every_byte_checked() {
    let test = "four_hosts_all_to_all_with_every_byte_checked";
    if !may_make_hosts(test) {
        return;
    }
    // One address a host, which its three processes share.
    all_to_all(&Hosts::new(4, 1), |i| i);
}

/// Four processes on one address, all to all: twelve processes share it.
#[test]
fn four_processes_on_one_address_all_to_all_with_every_byte_checked() {
    let test = "four_processes_on_one_address_all_to_all_with_every_byte_checked";
    if !may_make_hosts(test) {
        return;
    }
    all_to_all(&Hosts::new(2, 1), |_| 0);
}

/// Four parties, each in host `host_of(i)`, each pair a `softverbs pingpong --chk` (a server
/// in one, its client in the other). Twelve processes: they sleep on completion events (-e)
/// rather than busy-poll, so that none is starved of the CPU for the half second after which
/// RC gives up (retry_cnt 7, timeout 14).
fn all_to_all(h: &Hosts, host_of: impl Fn(usize) -> usize) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    let mut n = 10;
    for a in 0..4 {
        for b in a + 1..4 {
            n += 1;
            let p = port(n);
            let args: Vec<String> =
                ["pingpong", "-g", "1", "-p", &p, "-s", "4096", "-n", "20", "--chk", "-e"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            servers.push(Proc::spawn(h.softverbs(host_of(a), &argv), "server"));
            clients.push((host_of(b), args, h.addr(host_of(a)).to_string()));
        }
    }
    // The clients retry their connect while their servers start.
    let mut running = Vec::new();
    for (b, args, to) in &clients {
        let mut c: Vec<&str> = args.iter().map(String::as_str).collect();
        c.push(to);
        running.push(Proc::spawn(h.softverbs(*b, &c), "client"));
    }
    for (i, p) in running.into_iter().chain(servers).enumerate() {
        let out = p.finish(LIMIT);
        let t = text(&out);
        assert!(out.status.success(), "pingpong {i}:\n{t}");
        check_pingpong(&t, 4096, 20);
        assert!(t.contains("--chk: every byte of the peer's 20 messages as sent"), "{t}");
    }
}

#[test]
fn two_percent_loss_each_way_still_delivers_every_byte() {
    let test = "two_percent_loss_each_way_still_delivers_every_byte";
    if !may_make_hosts(test) {
        return;
    }
    let h = Hosts::new(2, 1);
    let p = port(6);
    // softverbs pingpong: both sides say "done" before they destroy their QPs, so a lost
    // last ACK is retransmitted to a QP that still exists (ibv_rc_pingpong's server may be
    // gone by then, and its client then ends in RETRY_EXC_ERR, as on rxe).
    let args = ["pingpong", "-g", "1", "-p", p.as_str(), "-s", "4096", "-n", "100", "--chk"];
    let mut client = args.to_vec();
    client.push(h.addr(0));
    let faults = |mut c: Command, seed: &str| {
        c.env("SOFTVERBS_FAULTS", format!("seed={seed} loss=2%"));
        c
    };
    let (s, c) = pair(
        faults(h.softverbs(0, &args), "11"),
        || faults(h.softverbs(1, &client), "12"),
        "lossy",
    );
    for out in [&s, &c] {
        check_pingpong(out, 4096, 100);
        assert!(out.contains("--chk: every byte of the peer's 100 messages as sent"), "{out}");
        assert!(out.contains("fault plan for softverbs0: seed="), "the plan was applied:\n{out}");
    }
}

#[test]
fn a_host_that_vanishes_ends_its_peer_s_qp_in_retry_exceeded() {
    let test = "a_host_that_vanishes_ends_its_peer_s_qp_in_retry_exceeded";
    if !may_make_hosts(test) || !have(test, "ib_write_bw") {
        return;
    }
    let h = Hosts::new(2, 1);
    let p = port(7);
    // A writer that always has WRITEs in flight (a pingpong would wait for a receive that
    // never comes, as on any RDMA NIC).
    let args = ["ib_write_bw", "-x", "1", "-s", "65536", "-n", "100000000", "-p", p.as_str()];
    let mut client = args.to_vec();
    client.push(h.addr(0));
    let mut server = Proc::spawn(h.run(0, &args), "server");
    let start = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(300));
        let mut c = Proc::spawn(h.run(1, &client), "client");
        // Connected: perftest keeps its TCP exchange open while it writes (a loaded machine
        // may take seconds to get there); refused (the server was not listening yet): again.
        let connected = loop {
            let ss = Command::new("ip")
                .args(["netns", "exec", h.ns(0), "ss", "-Htn", "state", "established"])
                .arg(format!("( sport = :{p} )"))
                .output()
                .expect("ss runs");
            if !String::from_utf8_lossy(&ss.stdout).trim().is_empty() {
                break true;
            }
            if c.0.as_mut().expect("client").try_wait().expect("try_wait").is_some() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the client never connected");
            std::thread::sleep(Duration::from_millis(100));
        };
        if connected {
            break c;
        }
    };
    // Mid-transfer.
    std::thread::sleep(Duration::from_secs(1));
    // The server's whole host goes: its process killed, its link down.
    if let Some(mut c) = server.0.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    ip(&["-n", h.ns(0), "link", "set", h.iface(0), "down"]);
    let out = client.finish(LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "the client cannot have finished 10^8 writes:\n{t}");
    // perftest's words for a completion with IBV_WC_RETRY_EXC_ERR (12).
    assert!(t.contains("Failed status 12"), "RETRY_EXC_ERR ends the QP:\n{t}");
}
