//! IPv6 link-local addresses on softverbs' librdmacm.so.1: a port's `fe80::<EUI-64>` with a
//! scope id (`%lo`) as the address of rping (100 verified pings), ucmatose (RC) and udaddy (UD),
//! each as a server and a client process; c/ipv6.c checks in one process what rdma_getaddrinfo,
//! the ids' routes and the QP's path hold, and the errors for a link-local address without a
//! scope id and for one of no softverbs port.
//!
//! In a fresh fabric the first process to open the devices (the server, here) gets fabric slots
//! 1 and 2: its first port is 10.0.0.1, whose link-local address is `fe80::aff:fe00:1`.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use cm::{env, leftovers, ping_text};
use common::{text, tool};

/// The server's first port, by its link-local address and scope.
const SERVER: &str = "fe80::aff:fe00:1%lo";

/// `program server_args` and, once it listens as `10.0.0.1:port`, `program client_args`; both
/// to exit 0 within 60 s, leaving nothing in the CM's directory. (server, client) output, each
/// stdout then stderr.
fn pair(program: &Path, port: u16, server_args: &[&str], client_args: &[&str]) -> (String, String) {
    pair_at(program, &format!("10.0.0.1:{port}"), server_args, client_args)
}

/// [`pair`] with the server's listening name (`0.0.0.0:port` for any address).
fn pair_at(
    program: &Path,
    name: &str,
    server_args: &[&str],
    client_args: &[&str],
) -> (String, String) {
    let env = env();
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env,
        (program, server_args),
        name,
        (program, client_args),
        Duration::from_secs(60),
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
    (format!("{so}{se}"), format!("{co}{ce}"))
}

/// The rping client's lines, less its closing DISCONNECTED line: that line is rping's own
/// race (`cm::rping_client_closing` says why), which a channel teardown that took up to
/// 100 ms (the completion channel's pump thread, gone) used to hide.
fn client_pings(c: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = c.lines().collect();
    if let Some(last) = lines.last() {
        if cm::rping_client_closing(&format!("{last}\n")) {
            lines.pop();
        }
    }
    lines
}

#[test]
fn rping_over_a_link_local_address_verifies_100_pings() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (s, c) = pair(
        &rping,
        port,
        &["-s", "-a", SERVER, "-p", &p, "-C", "100", "-v"],
        &["-c", "-a", SERVER, "-p", &p, "-C", "100", "-v"],
    );
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", ping_text(n))).collect();
    assert_eq!(client_pings(&c), want, "client output");
    let got: Vec<&str> = s.lines().filter(|l| l.starts_with("server ping data: ")).collect();
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", ping_text(n))).collect();
    assert_eq!(got, want, "server output:\n{s}");
}

#[test]
fn rping_to_ipv6_loopback_reaches_a_server_on_any_address() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let p = common::free_port().to_string();
    let (s, c) = pair_at(
        &rping,
        &format!("0.0.0.0:{p}"),
        &["-s", "-a", "::0", "-p", &p, "-C", "10", "-v"],
        &["-c", "-a", "::1", "-p", &p, "-C", "10", "-v"],
    );
    let want: Vec<String> = (0..10).map(|n| format!("ping data: {}", ping_text(n))).collect();
    assert_eq!(client_pings(&c), want, "client output");
    let got = s.lines().filter(|l| l.starts_with("server ping data: ")).count();
    assert_eq!(got, 10, "server output:\n{s}");
}

#[test]
fn ucmatose_connects_two_rc_ids_over_link_local_addresses() {
    let Some(t) = tool("ucmatose", "ucmatose", "rdmacm-utils") else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (s, c) =
        pair(&t, port, &["-b", SERVER, "-p", &p, "-c", "2"], &["-s", SERVER, "-p", &p, "-c", "2"]);
    cm::assert_ucmatose(&s, &c);
}

#[test]
fn udaddy_exchanges_datagrams_over_link_local_addresses() {
    let Some(t) = tool("udaddy", "udaddy", "rdmacm-utils") else { return };
    // udaddy's port is fixed (7174); each test's fabric is its own CM namespace.
    let (s, c) = pair(&t, 7174, &["-b", SERVER], &["-s", SERVER]);
    cm::assert_udaddy(&s, &c);
}

#[test]
fn a_link_local_address_without_a_scope_id_is_einval_with_a_message() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let env = env();
    let out = env.run(
        &rping,
        &["-c", "-a", "fe80::aff:fe00:1", "-p", "7000", "-C", "1"],
        Duration::from_secs(30),
    );
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert_eq!(
        e,
        "librdmacm (softverbs): rdma_resolve_addr: the link-local address fe80::aff:fe00:1 needs \
         a scope id (write fe80::aff:fe00:1%lo: the soft ports take any interface's)\n\
         rdma_resolve_addr: Invalid argument\n"
    );
}

#[test]
fn routes_and_the_qp_path_are_ipv6_end_to_end() {
    let test = "routes_and_the_qp_path_are_ipv6_end_to_end";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "ipv6", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "getaddrinfo: family AF_INET6, 28 bytes, fe80::aff:fe00:1%lo\n\
         listener: ::\n\
         active: fe80::aff:fe00:2%lo -> fe80::aff:fe00:1%lo, sgid fe80::aff:fe00:2, \
         dgid fe80::aff:fe00:1\n\
         passive: fe80::aff:fe00:1%lo -> fe80::aff:fe00:2%lo\n\
         active QP: sgid_index 0, dgid fe80::aff:fe00:1\n\
         received: over IPv6\n\
         bind without a scope id: -1 EINVAL\n\
         fe80::1: ADDR_ERROR, -EHOSTUNREACH\n"
    );
    assert_eq!(
        e,
        "librdmacm (softverbs): rdma_bind_addr: the link-local address fe80::aff:fe00:1 needs a \
         scope id (write fe80::aff:fe00:1%lo: the soft ports take any interface's)\n\
         librdmacm (softverbs): fe80::1 is the address of no softverbs port (a port's IPv6 \
         address is its link-local GID, fe80::<EUI-64>, with a scope id; here: \
         fe80::aff:fe00:1, fe80::aff:fe00:2)\n"
    );
}
