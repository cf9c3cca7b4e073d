//! tests/c/bind_opts.c (issue 30, what pyverbs' RDMA-CM tests need): a loopback bind sets the
//! id's device; a bind to an address of no soft port fails with EADDRNOTAVAIL and prints
//! nothing (the kernel's librdmacm is silent; UCX, MPI and libfabric probe host addresses), its
//! reason only under SOFTVERBS_LOG; rdma_getaddrinfo keeps the hints' source address;
//! RDMA_OPTION_ID_ACK_TIMEOUT is the QP's timeout. With direct reach on and off: the same lines.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use cm::env;
use common::text;

#[test]
fn loopback_bind_has_a_device_foreign_bind_is_silent_and_ack_timeout_reaches_the_qp() {
    let test = "loopback_bind_has_a_device_foreign_bind_is_silent_and_ack_timeout_reaches_the_qp";
    for reach in ["on", "off"] {
        let env = env();
        std::env::set_var("SOFTVERBS_REACH", reach);
        std::env::remove_var("SOFTVERBS_LOG");
        std::env::remove_var("RUST_LOG");
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "bind_opts", &[&port]) else { return };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert_eq!(
            o,
            "bind 127.0.0.1: verbs set port_num 1\n\
             bind 192.0.2.1: -1 EADDRNOTAVAIL\n\
             getaddrinfo(dst, hints src): src 127.0.0.1 dst set\n\
             getaddrinfo(hints src only): src 127.0.0.1 dst none\n\
             getaddrinfo(hints dst only): src none dst set\n\
             getaddrinfo(nothing): -1 EINVAL\n\
             resolve 0.0.0.0: resolved, verbs set\n\
             ack timeout of 4 bytes: -1 EINVAL\n\
             active QP timeout 12\n\
             passive QP timeout 9\n",
            "reach {reach}"
        );
        assert!(!e.contains("192.0.2.1"), "reach {reach}: a refused bind printed:\n{e}");
    }
    // The reason, when asked for.
    let env = env();
    let port = common::free_port().to_string();
    let Some(exe) = cm::compile(test, &env, "tests/c/bind_opts.c", "bind_opts") else { return };
    let child = env.command(&exe).arg(&port).env("SOFTVERBS_LOG", "warn").spawn().expect("spawn");
    let out = common::finish(common::Guard(Some(child)), Duration::from_secs(30), "bind_opts");
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(
        e.contains("rdma_bind_addr: 192.0.2.1 is the address of no softverbs port"),
        "SOFTVERBS_LOG gives no reason:\n{e}"
    );
}
