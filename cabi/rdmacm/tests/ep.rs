//! Endpoints and synchronous ids on softverbs' librdmacm.so.1: rdma-core's `rdma_server` and
//! `rdma_client` (rdma_create_ep, rdma_get_request, blocking rdma_connect / rdma_accept /
//! rdma_disconnect, the rdma_verbs.h helpers over the CQs the CM makes) exchange their messages
//! as two processes; a blocking connect to a port nobody listens on fails with ECONNREFUSED and
//! one to an address of no softverbs port with EHOSTUNREACH, as the real library's.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{finish, text, tool, Env, Guard};

/// An Env whose library directory also holds this package's librdmacm.so.1.
fn env() -> Env {
    let e = Env::new();
    let cm = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let cm = if cm.exists() { cm } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    assert!(cm.exists(), "{}: librdmacm was not built", cm.display());
    std::os::unix::fs::symlink(cm, e.lib.path().join("librdmacm.so.1")).expect("symlink");
    e
}

/// Wait (at most 10 s) until `name` is a listening name in the fabric's CM directory.
fn wait_listening(env: &Env, name: &str, server: &mut Guard) {
    let path = env.fabric.path().join("cm").join(name);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::symlink_metadata(&path).is_err() {
        let exited = server.0.as_mut().expect("server").try_wait().expect("try_wait");
        assert!(exited.is_none() && Instant::now() < deadline, "never listened ({exited:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The name appears at the bind; give the server the moment to reach rdma_get_request.
    std::thread::sleep(Duration::from_millis(200));
}

/// What the CM left in the fabric's directory (nothing, once both processes destroyed their
/// ids and channels).
fn leftovers(env: &Env) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(env.fabric.path().join("cm"))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

#[test]
fn rdma_server_and_rdma_client_exchange_their_messages() {
    let Some(server_bin) = tool("rdma_server", "rdma_server", "rdmacm-utils") else { return };
    let Some(client_bin) = tool("rdma_client", "rdma_client", "rdmacm-utils") else { return };
    let env = env();
    let port = common::free_port().to_string();
    let mut server =
        Guard(Some(env.command(&server_bin).args(["-p", &port]).spawn().expect("spawn")));
    wait_listening(&env, &format!("0.0.0.0:{port}"), &mut server);
    let started = Instant::now();
    let client = env.run(&client_bin, &["-s", "127.0.0.1", "-p", &port], Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(30), "rdma_server");
    let (co, ce) = text(&client);
    let (so, se) = text(&server);
    assert!(
        client.status.success() && server.status.success(),
        "client {:?}:\n{co}{ce}\nserver {:?}:\n{so}{se}",
        client.status,
        server.status
    );
    // Each prints start and `end 0` only when every call returned 0: rdma_create_ep,
    // rdma_get_request, the QP's capabilities (inline data), rdma_reg_msgs, rdma_post_recv,
    // rdma_accept / rdma_connect, rdma_get_recv_comp / rdma_get_send_comp, rdma_disconnect.
    assert_eq!(so, "rdma_server: start\nrdma_server: end 0\n");
    assert_eq!(co, "rdma_client: start\nrdma_client: end 0\n");
    assert_eq!((se.as_str(), ce.as_str()), ("", ""));
    // Both disconnected each other: no wait for a DREQ's timeout.
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

#[test]
fn a_blocking_connect_to_a_port_nobody_listens_on_is_refused() {
    let Some(client_bin) = tool("rdma_client", "rdma_client", "rdmacm-utils") else { return };
    let env = env();
    let port = common::free_port().to_string();
    let out = env.run(&client_bin, &["-s", "127.0.0.1", "-p", &port], Duration::from_secs(30));
    let (o, e) = text(&out);
    assert_eq!(out.status.code(), Some(255), "{o}{e}");
    assert_eq!(o, "rdma_client: start\nrdma_client: end -1\n");
    // rdma_connect waited for its event, REJECTED, and returned -1 with ECONNREFUSED.
    assert_eq!(e, "rdma_connect: Connection refused\n");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

#[test]
fn a_blocking_resolve_of_an_address_of_no_softverbs_port_fails_with_ehostunreach() {
    let Some(client_bin) = tool("rdma_client", "rdma_client", "rdmacm-utils") else { return };
    let env = env();
    // A documentation address (TEST-NET-3): nothing is sent anywhere.
    let out = env.run(&client_bin, &["-s", "203.0.113.9", "-p", "7471"], Duration::from_secs(30));
    let (o, e) = text(&out);
    assert_eq!(o, "rdma_client: start\nrdma_client: end -1\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0]
            .starts_with("librdmacm (softverbs): 203.0.113.9 is the address of no softverbs port"),
        "{e}"
    );
    // rdma_create_ep's rdma_resolve_addr got ADDR_ERROR (-EHOSTUNREACH) and failed with it.
    assert_eq!(lines[1], "rdma_create_ep: No route to host");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}
