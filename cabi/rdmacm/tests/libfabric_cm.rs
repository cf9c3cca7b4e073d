//! `rdma_migrate_id` of synchronous ids, as libfabric's verbs provider uses it (c/migrate.c):
//! a synchronous id moved onto an event channel becomes asynchronous (its last event
//! acknowledged, its next calls answered on that channel, a listener bound before the move
//! getting its REQs there), and an asynchronous id moved to NULL becomes synchronous. Before,
//! the moved id stayed synchronous: its `rdma_resolve_route` consumed ROUTE_RESOLVED itself, so
//! libfabric's event queue never saw it, never called `rdma_connect`, and `fi_pingpong -e msg`'s
//! client waited for ever.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

mod cm;

use cm::{env, leftovers};
use common::text;

#[test]
fn a_synchronous_id_migrated_to_a_channel_is_asynchronous_and_back() {
    let test = "a_synchronous_id_migrated_to_a_channel_is_asynchronous_and_back";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "migrate", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "listener on the new channel: yes\n\
         blocking resolve left RDMA_CM_EVENT_ADDR_RESOLVED\n\
         after the migration: event none, channel the new one\n\
         nothing waits on the new channel: EAGAIN\n\
         rdma_resolve_route returned with event none\n\
         client event RDMA_CM_EVENT_ROUTE_RESOLVED status 0\n\
         server event RDMA_CM_EVENT_CONNECT_REQUEST status 0\n\
         request's id on the listener's channel: yes\n\
         client event RDMA_CM_EVENT_ESTABLISHED status 0\n\
         server event RDMA_CM_EVENT_ESTABLISHED status 0\n\
         server event RDMA_CM_EVENT_DISCONNECTED status 0\n\
         client event RDMA_CM_EVENT_DISCONNECTED status 0\n\
         migrated to NULL: channel of its own yes\n\
         blocking resolve left RDMA_CM_EVENT_ADDR_RESOLVED\n\
         a synchronous id migrated to NULL: -1 EINVAL\n"
    );
    assert_eq!(e, "");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH` in `rdma_connect`'s and `rdma_accept`'s
/// parameters (libfabric's verbs provider passes both) give the QPs the device's maxima
/// (c/rd_atomic.c); before, 255 went to `ibv_modify_qp` as it was, the accept's move to RTR was
/// refused (EINVAL), and `fi_pingpong -e msg`'s server failed in `fi_accept`. NULL parameters
/// mean the same, as in librdmacm (before, an `rdma_connect` with NULL offered 1).
#[test]
fn the_maximum_responder_resources_and_initiator_depth_are_the_devices() {
    let test = "the_maximum_responder_resources_and_initiator_depth_are_the_devices";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "rd_atomic", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "initiator depth over the device's: -1 EINVAL\n \
         event RDMA_CM_EVENT_CONNECT_REQUEST\n \
         event RDMA_CM_EVENT_ESTABLISHED\n \
         event RDMA_CM_EVENT_ESTABLISHED\n\
         active: max_rd_atomic the device's, max_dest_rd_atomic the device's\n\
         passive: max_rd_atomic the device's, max_dest_rd_atomic the device's\n \
         event RDMA_CM_EVENT_DISCONNECTED\n \
         event RDMA_CM_EVENT_DISCONNECTED\n \
         event RDMA_CM_EVENT_ADDR_RESOLVED\n \
         event RDMA_CM_EVENT_ROUTE_RESOLVED\n \
         event RDMA_CM_EVENT_CONNECT_REQUEST\n \
         event RDMA_CM_EVENT_ESTABLISHED\n \
         event RDMA_CM_EVENT_ESTABLISHED\n\
         active, NULL parameters: max_rd_atomic the device's, max_dest_rd_atomic the device's\n\
         passive, NULL parameters: max_rd_atomic the device's, max_dest_rd_atomic the device's\n \
         event RDMA_CM_EVENT_DISCONNECTED\n \
         event RDMA_CM_EVENT_DISCONNECTED\n"
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// An id bound to 127.0.0.1 reports that address, as the kernel's CM reports the bound one,
/// and a peer reaches the listener at it (c/loopback_name.c). libfabric's verbs provider binds
/// its passive endpoints to `localhost` when no address is asked for, and rxm hands the
/// listener's name to its peers: it was 0.0.0.0, which rxm's address vector refuses ("invalid
/// address"), so `fi_pingpong -p 'verbs;ofi_rxm' -e rdm`'s client could not insert the
/// server's name.
#[test]
fn a_loopback_bound_listener_reports_its_address_and_is_reached_there() {
    let test = "a_loopback_bound_listener_reports_its_address_and_is_reached_there";
    let env = env();
    let Some(out) = cm::run_c(test, &env, "loopback_name", &[]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "bound to 127.0.0.1, port 0: local address 127.0.0.1, port picked, verbs set\n \
         event RDMA_CM_EVENT_ADDR_RESOLVED\n \
         event RDMA_CM_EVENT_ROUTE_RESOLVED\n \
         event RDMA_CM_EVENT_CONNECT_REQUEST\n \
         event RDMA_CM_EVENT_REJECTED\n"
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// A QP made on the program's own SRQ leaves the SRQ the program's: `rdma_destroy_ep` does not
/// destroy it (c/srq_ep.c). Before, `rdma_create_qp` recorded it as the id's `srq`, as if
/// `rdma_create_srq` had made it, and `rdma_destroy_ep` destroyed it with the first endpoint:
/// `fi_pingpong -p 'verbs;ofi_rxm' -e rdm` with `FI_OFI_RXM_USE_SRX=1` then failed every
/// `fi_close` at its end (the SRQ's destroy refused, EINVAL, and all that depended on it busy).
#[test]
fn rdma_destroy_ep_leaves_the_programs_own_srq() {
    let test = "rdma_destroy_ep_leaves_the_programs_own_srq";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "srq_ep", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "id->srq after rdma_create_qp: NULL\n\
         the SRQ after rdma_destroy_ep: post_srq_recv ok\n\
         ibv_destroy_srq: 0\n"
    );
    assert_eq!(e, "");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}
