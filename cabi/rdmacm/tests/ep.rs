//! Endpoints and synchronous ids on softverbs' librdmacm.so.1: rdma-core's `rdma_server` and
//! `rdma_client` (rdma_create_ep, rdma_get_request, blocking rdma_connect / rdma_accept /
//! rdma_disconnect, the rdma_verbs.h helpers over the CQs the CM makes) exchange their messages
//! as two processes; a blocking connect to a port nobody listens on fails with ECONNREFUSED and
//! one to an address of no softverbs port with EHOSTUNREACH, as the real library's; and
//! c/verbs_helpers.c runs every rdma_verbs.h helper over CM-made CQs and an SRQ; cmtime times
//! four connections through every step; c/sync_ids.c checks the events synchronous calls leave
//! in `id->event` and the bound on a blocking connect to a listener that never answers;
//! c/destroy_wait.c that `rdma_destroy_id` waits for the id's events to be acknowledged.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

mod cm;

use std::time::{Duration, Instant};

use cm::{env, leftovers, wait_listening};
use common::{finish, text, tool, Guard};

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

#[test]
fn the_rdma_verbs_h_helpers_work_on_cm_made_cqs_and_an_srq() {
    let test = "the_rdma_verbs_h_helpers_work_on_cm_made_cqs_and_an_srq";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "verbs_helpers", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    // Opcodes: IBV_WC_SEND 0, RDMA_WRITE 1, RDMA_READ 2, RECV 128; wr_id the helper's context.
    assert_eq!(
        o,
        "CM-made CQs: yes\n\
         passive QP on the SRQ: yes\n\
         post_send: send comp status 0 opcode 0 wr_id 1\n\
         post_recv: recv comp status 0 opcode 128 wr_id 11 byte_len 4: one\n\
         inline: send comp status 0 opcode 0 wr_id 2\n\
         inline: recv comp status 0 opcode 128 wr_id 12 byte_len 7: inline\n\
         post_sendv: send comp status 0 opcode 0 wr_id 3\n\
         post_recvv: recv comp status 0 opcode 128 wr_id 13 byte_len 7: two\n\
         post_recvv: first sge one\n\
         post_write: send comp status 0 opcode 1 wr_id 4\n\
         post_writev: send comp status 0 opcode 1 wr_id 5\n\
         region: onetwo\n\
         post_read: send comp status 0 opcode 2 wr_id 6\n\
         post_readv: send comp status 0 opcode 2 wr_id 7\n\
         read back: onetwo\n\
         after destroy: CQs, channels and SRQ gone\n"
    );
    assert_eq!(e, "");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

#[test]
fn cmtime_times_four_connections_through_every_step() {
    let Some(t) = tool("cmtime", "cmtime", "rdmacm-utils") else { return };
    let env = env();
    let port = common::free_port().to_string();
    // cmtime's server serves until it is stopped: the Guard kills it when the test ends.
    let mut server = Guard(Some(env.command(&t).args(["-p", &port]).spawn().expect("spawn")));
    wait_listening(&env, &format!("0.0.0.0:{port}"), &mut server);
    let client = env.run(&t, &["-s", "127.0.0.1", "-p", &port, "-c", "4"], Duration::from_secs(30));
    let (o, e) = text(&client);
    assert!(client.status.success(), "{o}{e}");
    let steps: Vec<&str> = o.lines().collect();
    assert_eq!(
        steps[..8],
        [
            "creating id",
            "resolving address",
            "resolving route",
            "creating qp",
            "connecting",
            "disconnecting",
            "destroying id",
            "step              total ms     max ms     min us  us / conn"
        ],
        "{o}"
    );
    // One row a step, each with four figures, for the four connections.
    let rows: Vec<(&str, usize)> = steps[8..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(step, figs)| {
            (step.trim(), figs.split_whitespace().filter(|f| f.parse::<f64>().is_ok()).count())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("create id", 4),
            ("resolve addr", 4),
            ("resolve route", 4),
            ("create qp", 4),
            ("connect", 4),
            ("disconnect", 4),
            ("destroy", 4)
        ],
        "{o}"
    );
    assert_eq!(e, "");
}

#[test]
fn synchronous_calls_return_with_their_event_and_a_silent_peer_times_out() {
    let test = "synchronous_calls_return_with_their_event_and_a_silent_peer_times_out";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "sync_ids", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    // The connect's bound is sync.rs's CONNECT_WAIT, 20 s.
    assert_eq!(
        o,
        "rdma_get_request on a listener with a channel: -1 EINVAL\n\
         synchronous id: channel of its own yes\n\
         rdma_resolve_addr returned with RDMA_CM_EVENT_ADDR_RESOLVED\n\
         rdma_resolve_route returned with RDMA_CM_EVENT_ROUTE_RESOLVED\n\
         rdma_connect: -1 ETIMEDOUT after about 20 s\n"
    );
    assert_eq!(
        e,
        "librdmacm (softverbs): rdma_get_request needs a listener made without an event channel \
         (rdma_create_ep, or rdma_create_id with NULL)\n\
         librdmacm (softverbs): rdma_connect: no answer from the peer in 20 s\n"
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// `rdma_destroy_id` waits until the id's events are acknowledged, as librdmacm's does: one
/// thread holds the id's event while another destroys the id, and the destroy returns only
/// after the acknowledgement (before, it freed the id under the event, and rping's client,
/// which destroys its id while its CM thread may still be handling DISCONNECTED, could read
/// freed memory: it once printed "server DISCONNECT EVENT...").
#[test]
fn destroy_id_waits_for_its_events_to_be_acknowledged() {
    let test = "destroy_id_waits_for_its_events_to_be_acknowledged";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "destroy_wait", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(
        o,
        "event RDMA_CM_EVENT_ADDR_RESOLVED\n\
         destroy returned before the ack: no\n\
         the event's id still holds its context: yes\n\
         destroy returned after the ack: yes\n"
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}
