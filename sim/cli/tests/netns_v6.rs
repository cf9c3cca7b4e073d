//! RoCE v2 over IPv6 between hosts on the UDP wire (issue 31 item 2): two network namespaces
//! joined by a veth pair, each end with its IPv4 address, its link-local IPv6 address (the
//! default GID, index 0) and a global one (`fd31::N/64`, index 2). rdma-core's pingpongs from
//! GID index 0 and from the global GID's index, captured on the veth and decoded by tshark as
//! RoCE v2 over IPv6 with no malformed frame, every datagram's ICRC checked over the kernel's
//! headers; `ibv_devinfo -v` lists the GID table as rxe builds it.
//!
//! The hosts and their helpers are in common/netns.rs. Namespaces need root: without it each
//! test says why it skips, and with `SOFTVERBS_REQUIRE_NETNS=1` (as CI sets) that is a failure.
//! Every namespace is removed when its test ends, failed or not, and every process is killed.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::{
    check_pingpong, have, may_make_hosts, pair, roce_datagrams, text, tshark_decode, Capture,
    Hosts, Proc, LIMIT,
};

/// The GID index of the global IPv6 address: after the default GID (the link-local address)
/// and the IPv4 address.
const GLOBAL: &str = "2";

/// Two hosts on a veth pair with IPv4 (10.231.0.N) and IPv6 addresses: `fd31::N/64` given
/// with `nodad` (usable at once), and the link-local address the kernel makes when the link
/// comes up, awaited (at most 20 s) until duplicate address detection let it go. Returns the
/// hosts and each host's link-local address.
fn v6_hosts() -> (Hosts, [String; 2]) {
    let h = Hosts::new(2, 1);
    for i in 0..2 {
        h.add_v6(i, &format!("fd31::{}/64", i + 1));
    }
    let ll = [h.link_local(0), h.link_local(1)];
    (h, ll)
}

#[test]
fn the_pingpongs_run_over_ipv6_across_two_hosts_from_the_link_local_and_a_global_gid() {
    let test = "the_pingpongs_run_over_ipv6_across_two_hosts_from_the_link_local_and_a_global_gid";
    if !may_make_hosts(test) || !have(test, "ibv_rc_pingpong") || !have(test, "tshark") {
        return;
    }
    let (h, ll) = v6_hosts();
    let mut cap = Capture::start(&h, 0);
    let runs = [
        ("ibv_rc_pingpong", "0", "4096", "18641"),
        ("ibv_rc_pingpong", GLOBAL, "4096", "18642"),
        ("ibv_ud_pingpong", GLOBAL, "512", "18643"),
        ("ibv_ud_pingpong", "0", "512", "18644"),
    ];
    for (tool, gid, size, port) in runs {
        let mut args = vec![tool, "-g", gid, "-p", port, "-s", size, "-n", "20"];
        if tool == "ibv_rc_pingpong" {
            args.push("--chk");
        }
        let mut client = args.clone();
        client.push(h.addr(0));
        let what = format!("{tool} -g {gid}");
        let (s, c) = pair(h.run(0, &args), || h.run(1, &client), &what);
        for out in [&s, &c] {
            check_pingpong(out, size.parse().unwrap(), 20);
        }
        // Each side saw the other's IPv6 address as its GID.
        let want = match gid {
            "0" => [format!("GID {}", ll[0]), format!("GID {}", ll[1])],
            _ => ["GID fd31::1".to_string(), "GID fd31::2".to_string()],
        };
        for w in &want {
            assert!(s.contains(w.as_str()) && c.contains(w.as_str()), "{what}: no {w}:\n{s}\n{c}");
        }
    }
    let file = cap.stop().to_path_buf();
    let (v4, frames) = roce_datagrams(&file);
    assert_eq!(v4.len(), 0, "every datagram went over IPv6");
    // Two RC runs of 20 round trips of 4-packet messages and their ACKs, two UD runs.
    assert!(frames.len() >= 2 * 20 * 2 * 4 + 2 * 20 * 2, "captured: {}", frames.len());
    let (mut link, mut global) = (0, 0);
    for f in &frames {
        // The kernel's headers, the ICRC over them: what rxe or a RoCE NIC would check.
        let (ip, _) = nic_model::packet::parse_datagram6(f)
            .unwrap_or_else(|e| panic!("a datagram on the wire does not check ({e}): {f:02x?}"));
        // UDP checksum 0, as rxe's prepare_udp_hdr leaves it over IPv6 too (its receiving
        // tunnel socket takes zero checksums, and so does softverbs').
        assert_eq!(f[46..48], [0, 0], "the UDP checksum: {f:02x?}");
        match ip.src[0] {
            0xfe => link += 1,
            0xfd => global += 1,
            _ => panic!("from neither address: {f:02x?}"),
        }
    }
    assert!(link > 0 && global > 0, "link-local {link}, global {global}");
    let decoded = tshark_decode(&file);
    // 4096 bytes at the 1024-byte MTU of a 1500-byte link: four packets a message.
    for op in ["RC Send First", "RC Send Middle", "RC Send Last", "RC Acknowledge", "UD Send Only"]
    {
        assert!(decoded.contains(op), "no {op} decoded:\n{decoded}");
    }
    assert!(decoded.lines().all(|l| l.starts_with("RRoCE\t")), "not all RoCE v2:\n{decoded}");
}

/// `ibv_devinfo -v` on the interface lists the GID table as rxe builds it: the default GID
/// (the link-local address) at 0, the IPv4 address at 1, the global IPv6 address at 2.
#[test]
fn devinfo_lists_the_ipv6_gids_of_the_interface() {
    let test = "devinfo_lists_the_ipv6_gids_of_the_interface";
    if !may_make_hosts(test) || !have(test, "ibv_devinfo") {
        return;
    }
    let (h, ll) = v6_hosts();
    let out = Proc::spawn(h.run(0, &["ibv_devinfo", "-d", "softverbs0", "-v"]), "ibv_devinfo")
        .finish(LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let gids: Vec<&str> = t.lines().filter(|l| l.contains("GID[")).map(str::trim).collect();
    assert_eq!(
        gids,
        [
            format!("GID[  0]:\t\t{}, RoCE v2", ll[0]),
            "GID[  1]:\t\t::ffff:10.231.0.1, RoCE v2".to_string(),
            "GID[  2]:\t\tfd31::1, RoCE v2".to_string(),
        ],
        "{t}"
    );
    // sysfs says the same, as the kernel's files for rxe say it (what show_gids reads).
    let p = "/sys/class/infiniband/softverbs0/ports/1";
    let script = format!(
        "cat {p}/gids/2 {p}/gid_attrs/types/2 {p}/gid_attrs/ndevs/2; ls {p}/gids | sort -n | tail -1"
    );
    let out = Proc::spawn(h.run(0, &["sh", "-c", &script]), "sysfs").finish(LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert_eq!(
        t,
        format!("fd31:0000:0000:0000:0000:0000:0000:0001\nRoCE v2\n{}\n2\n", h.iface(0)),
        "{t}"
    );
}

/// The UDP sockets host `i` has on `addr` (`ss -Hulnp`: local address and owner), one a line.
fn udp_on(h: &Hosts, i: usize, addr: &str) -> Vec<String> {
    let ss = Command::new("ip")
        .args(["netns", "exec", h.ns(i), "ss", "-Hulnp"])
        .output()
        .expect("ss runs");
    let t = String::from_utf8_lossy(&ss.stdout).into_owned();
    t.lines().filter(|l| l.contains(&format!("[{addr}]"))).map(str::to_string).collect()
}

/// Waits (at most 30 s) until a UDP socket of host `i` on `[addr]` matches `want`.
fn await_udp(h: &Hosts, i: usize, addr: &str, what: &str, want: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !udp_on(h, i, addr).iter().any(|l| want(l)) {
        assert!(Instant::now() < deadline, "{what}: {:?}", udp_on(h, i, addr));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The processes of an address share its IPv6 addresses as they share the IPv4 one: while a
/// first process holds UDP 4791 on `fd31::1` (and the link-local address), others of host 0
/// reach host 1 and each other from GID 2 and GID 0, every byte checked, their datagrams
/// from host 1 handed on by the holder; when the holder dies, a process that was waiting takes
/// `[fd31::1]:4791` over and its pingpong with host 1 completes.
#[test]
fn processes_of_an_address_share_its_ipv6_addresses() {
    let test = "processes_of_an_address_share_its_ipv6_addresses";
    if !may_make_hosts(test) || !have(test, "ibv_rc_pingpong") {
        return;
    }
    let (h, _) = v6_hosts();
    let holder_args = ["ibv_rc_pingpong", "-g", GLOBAL, "-p", "18651", "-s", "64", "-n", "5"];
    let mut holder = Proc::spawn(h.run(0, &holder_args), "holder");
    h.await_4791(0, &mut holder);
    await_udp(&h, 0, "fd31::1", "the holder on [fd31::1]:4791", |l| {
        l.contains("]%sv") && l.contains(":4791 ")
    });
    for (gid, server, client, port) in [
        (GLOBAL, 0, 1, "18652"),
        (GLOBAL, 1, 0, "18653"),
        (GLOBAL, 0, 0, "18654"),
        ("0", 0, 1, "18655"),
    ] {
        let args = ["pingpong", "-g", gid, "-p", port, "-s", "1000", "-n", "50", "--chk"];
        let mut to = args.to_vec();
        to.push(h.addr(server));
        let what = format!("pingpong -g {gid} from host {client} to host {server}");
        let (s, c) = pair(h.softverbs(server, &args), || h.softverbs(client, &to), &what);
        for out in [&s, &c] {
            check_pingpong(out, 1000, 50);
            assert!(out.contains("--chk: every byte of the peer's 50 messages as sent"), "{out}");
        }
    }
    // A server that opened its device while the holder held 4791 (it sends from a port of
    // its own on fd31::1), then the holder dies: the server takes 4791 over.
    let args = ["pingpong", "-g", GLOBAL, "-p", "18656", "-s", "1000", "-n", "50", "--chk"];
    let server = Proc::spawn(h.softverbs(0, &args), "waiting server");
    let pid = format!("pid={},", server.pid());
    await_udp(&h, 0, "fd31::1", "the waiting server on fd31::1", |l| l.contains(&pid));
    assert!(
        udp_on(&h, 0, "fd31::1").iter().all(|l| !(l.contains(&pid) && l.contains(":4791 "))),
        "the waiting server does not hold 4791 yet"
    );
    drop(holder);
    let mut to = args.to_vec();
    to.push(h.addr(0));
    let client = Proc::spawn(h.softverbs(1, &to), "client").finish(LIMIT);
    let (s, c) = (text(&server.finish(LIMIT)), text(&client));
    assert!(client.status.success(), "client:\n{c}\nserver:\n{s}");
    for out in [&s, &c] {
        check_pingpong(out, 1000, 50);
    }
    assert!(
        udp_on(&h, 0, "fd31::1").iter().all(|l| !l.contains(":4791 ")),
        "nobody holds [fd31::1]:4791 once every process ended"
    );
}
