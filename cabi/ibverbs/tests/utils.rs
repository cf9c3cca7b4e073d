//! rdma-core's ibverbs-utils, unmodified, on softverbs' libibverbs.so.1: `ibv_devices`,
//! `ibv_devinfo -v`, and the pingpongs as two real processes (RC plain, with completion events
//! and 4 KiB messages; UC; UD; SRQ), each exchanging GIDs over its own TCP port: GID index 1
//! (the IPv4-mapped RoCE v2 GID, which every QP type takes) and, for RC and UC, index 0 (the
//! link-local IPv6 GID).

mod common;

use std::time::Duration;

use common::{pair, text, tool, Env};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn ibv_devices_lists_the_soft_devices_with_their_guids() {
    let Some(t) = tool("ibv_devices", "ibv_devices", "ibverbs-utils") else { return };
    let env = Env::new();
    let out = env.run(&t, &[], LIMIT);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let rows: Vec<Vec<&str>> = o.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 2, "two default devices:\n{o}");
    assert_eq!(rows[0], ["softverbs0", "02005efffe000000"], "{o}");
    assert_eq!(rows[1], ["softverbs1", "02005efffe000001"], "{o}");
    assert_eq!(e, "");
}

#[test]
fn ibv_devinfo_shows_the_device_its_port_and_gid() {
    let Some(t) = tool("ibv_devinfo", "ibv_devinfo", "ibverbs-utils") else { return };
    let env = Env::new();
    let out = env.run(&t, &["-v", "-d", "softverbs1"], LIMIT);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let field = |name: &str| {
        o.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {name} in:\n{o}"))
    };
    assert_eq!(field("hca_id:"), "softverbs1");
    assert_eq!(field("node_guid:"), "0200:5eff:fe00:0001");
    assert_eq!(field("vendor_id:"), "0x5346");
    assert_eq!(field("phys_port_cnt:"), "1");
    assert_eq!(field("atomic_cap:"), "ATOMIC_HCA (1)");
    assert_eq!(field("num_comp_vectors:"), "1");
    assert_eq!(field("state:"), "PORT_ACTIVE (4)");
    assert_eq!(field("active_mtu:"), "4096 (5)");
    assert_eq!(field("link_layer:"), "Ethernet");
    assert_eq!(field("port_lid:"), "0");
    assert_eq!(field("sm_lid:"), "0");
    // rxe's GID table: the link-local GID from the port's MAC, then the IPv4-mapped address.
    let gid0 = field("GID[  0]:");
    assert!(gid0.starts_with("fe80::") && gid0.ends_with(", RoCE v2"), "{gid0}");
    let gid1 = field("GID[  1]:");
    assert!(gid1.starts_with("::ffff:10.0.0.") && gid1.ends_with(", RoCE v2"), "{gid1}");
    assert_eq!(e, "");
}

/// Run a pingpong tool between softverbs0 (server) and softverbs1 (client) from GID index
/// `gid`, and check both report `iters` iterations of `size` bytes and the GIDs they used.
fn pingpong(tool_name: &str, gid: &str, extra: &[&str], size: usize, iters: usize) {
    let Some(t) = tool(tool_name, tool_name, "ibverbs-utils") else { return };
    let env = Env::new();
    let port = common::free_port().to_string();
    let (s, n) = (size.to_string(), iters.to_string());
    let mut server = vec!["-d", "softverbs0", "-g", gid, "-p", &port, "-s", &s, "-n", &n];
    server.extend_from_slice(extra);
    let mut client = server.clone();
    client[1] = "softverbs1";
    client.push("localhost");
    let (so, co) = pair(&env, &t, &server, &client, LIMIT);
    for (who, out) in [("server", so), ("client", co)] {
        let (o, e) = text(&out);
        let bytes = format!("{} bytes in ", 2 * size * iters);
        let its = format!("{iters} iters in ");
        assert!(
            o.lines().any(|l| l.starts_with(&bytes)),
            "{tool_name} {who}: no `{bytes}` line:\n{o}{e}"
        );
        assert!(
            o.lines().any(|l| l.starts_with(&its)),
            "{tool_name} {who}: no `{its}` line:\n{o}{e}"
        );
        let prefix = if gid == "0" { "GID fe80::" } else { "GID ::ffff:10.0.0." };
        let addrs: Vec<&str> =
            o.lines().filter(|l| l.contains("address:") && l.contains("LID 0x0000")).collect();
        assert!(
            addrs.len() >= 2 && addrs.iter().all(|l| l.contains(prefix)),
            "{tool_name} {who}: {prefix}\n{o}"
        );
        assert_eq!(e, "", "{tool_name} {who}: stderr");
    }
}

#[test]
fn ibv_rc_pingpong_runs() {
    pingpong("ibv_rc_pingpong", "1", &[], 4096, 200);
}

#[test]
fn ibv_rc_pingpong_over_ipv6_link_local_gids() {
    pingpong("ibv_rc_pingpong", "0", &[], 4096, 200);
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", "1", &["-e"], 4096, 200);
}

#[test]
fn ibv_rc_pingpong_through_the_ibv_wr_api() {
    // -N: ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ibv_qp_to_qp_ex, and
    // ibv_wr_start / ibv_wr_send / ibv_wr_set_sge / ibv_wr_complete for every send.
    pingpong("ibv_rc_pingpong", "1", &["-N"], 4096, 200);
}

#[test]
fn ibv_rc_pingpong_4k_messages_1000_iterations() {
    pingpong("ibv_rc_pingpong", "1", &["-c"], 4096, 1000);
}

#[test]
fn ibv_uc_pingpong_runs() {
    pingpong("ibv_uc_pingpong", "1", &[], 4096, 200);
}

#[test]
fn ibv_uc_pingpong_over_ipv6_link_local_gids() {
    pingpong("ibv_uc_pingpong", "0", &[], 4096, 200);
}

#[test]
fn ibv_ud_pingpong_runs() {
    pingpong("ibv_ud_pingpong", "1", &[], 1024, 200);
}

#[test]
fn ibv_srq_pingpong_runs() {
    pingpong("ibv_srq_pingpong", "1", &[], 4096, 200);
}
