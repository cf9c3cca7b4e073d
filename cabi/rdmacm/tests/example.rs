//! examples/c/cm_connect.c, compiled against the system headers and run as a server and a
//! client process on softverbs' librdmacm.so.1 and libibverbs.so.1: each prints the CM events
//! it expects, in order, the private data and the SEND's payload arrive.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::time::Duration;

#[test]
fn the_cm_example_connects_sends_and_disconnects() {
    let test = "the_cm_example_connects_sends_and_disconnects";
    let env = cm::env();
    let Some(exe) = cm::compile(test, &env, "../../examples/c/cm_connect.c", "cm_connect") else {
        return;
    };
    let port = common::free_port().to_string();
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env,
        (&exe, &["server", &port]),
        &format!("0.0.0.0:{port}"),
        (&exe, &["client", "127.0.0.1", &port]),
        Duration::from_secs(30),
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
