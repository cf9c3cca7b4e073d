//! examples/c/cm_connect.c, compiled against the system headers and run as a server and a
//! client process on softverbs' librdmacm.so.1 and libibverbs.so.1: each prints the CM events
//! it expects, in order, the private data and the SEND's payload arrive.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{finish, text, tool, Env, Guard};

#[test]
fn the_cm_example_connects_sends_and_disconnects() {
    let test = "the_cm_example_connects_sends_and_disconnects";
    let Some(cc) = tool(test, "cc", "gcc") else { return };
    let Some(_) = common::file(test, "/usr/include/rdma/rdma_cma.h", "librdmacm-dev") else {
        return;
    };
    let env = Env::new();
    let ib = common::built_library();
    let cm = ib.with_file_name("libsoftverbs_rdmacm.so");
    let cm = if cm.exists() { cm } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    std::os::unix::fs::symlink(cm, env.lib.path().join("librdmacm.so.1")).expect("symlink");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/cm_connect.c");
    let exe = env.lib.path().join("cm_connect");
    let out = Command::new(cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let port = common::free_port().to_string();
    let server = Guard(Some(env.command(&exe).args(["server", &port]).spawn().expect("spawn")));
    // Bounded: the server's name appears in the fabric's cm/ directory when it binds.
    let name = env.fabric.path().join("cm").join(format!("0.0.0.0:{port}"));
    let start = std::time::Instant::now();
    while std::fs::symlink_metadata(&name).is_err() {
        assert!(start.elapsed() < Duration::from_secs(10), "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let client = env.run(&exe, &["client", "127.0.0.1", &port], Duration::from_secs(30));
    let server = finish(server, Duration::from_secs(30), "cm_connect server");
    let (co, ce) = text(&client);
    let (so, se) = text(&server);
    assert!(
        client.status.success() && server.status.success(),
        "client:\n{co}{ce}\nserver:\n{so}{se}"
    );
    assert_eq!(
        co,
        "event RDMA_CM_EVENT_ADDR_RESOLVED, status 0\nevent RDMA_CM_EVENT_ROUTE_RESOLVED, status 0\n\
         event RDMA_CM_EVENT_ESTABLISHED, status 0\nevent RDMA_CM_EVENT_DISCONNECTED, status 0\ndone\n"
    );
    assert_eq!(
        so,
        "event RDMA_CM_EVENT_CONNECT_REQUEST, status 0\nprivate data: hello from the client\n\
         event RDMA_CM_EVENT_ESTABLISHED, status 0\nreceived: one SEND over the connection\n\
         event RDMA_CM_EVENT_DISCONNECTED, status 0\ndone\n"
    );
    assert_eq!((ce.as_str(), se.as_str()), ("", ""));
}
