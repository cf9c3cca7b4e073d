//! Programs that make and move their QP themselves, with `rdma_init_qp_attr` and
//! `rdma_establish`, on softverbs' librdmacm.so.1: `rping -q` exchanges 100 verified pings as two
//! processes, its client getting CONNECT_RESPONSE (not ESTABLISHED) and its server ESTABLISHED
//! after the client's rdma_establish; and c/init_qp_attr.c checks each state's attributes and
//! mask, that the two sides' PSNs and QP numbers cross over, and that a SEND then lands.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

mod cm;

use std::path::Path;
use std::time::Duration;

use cm::{env, leftovers, ping_text};
use common::{text, tool};

/// `rping -s ARGS` and `rping -c -a 127.0.0.1 ARGS`, both to exit 0 within 60 s: their
/// (stdout, stderr) each, server first.
fn rping_pair(rping: &Path, args: &[&str]) -> ((String, String), (String, String)) {
    let env = env();
    let port = common::free_port().to_string();
    let mut s_args = vec!["-s", "-p", &port];
    s_args.extend_from_slice(args);
    let mut c_args = vec!["-c", "-a", "127.0.0.1", "-p", &port];
    c_args.extend_from_slice(args);
    let (s, c) = cm::pair_ok(
        &env,
        (rping, &s_args),
        &format!("0.0.0.0:{port}"),
        (rping, &c_args),
        Duration::from_secs(60),
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
    (s, c)
}

#[test]
fn rping_q_moves_its_own_qp_and_exchanges_100_verified_pings() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let ((so, se), (co, ce)) = rping_pair(&rping, &["-q", "-C", "100", "-v"]);
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", ping_text(n))).collect();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "client output");
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", ping_text(n))).collect();
    assert_eq!(so.lines().collect::<Vec<_>>(), want, "server output");
    // rping's own race (tests/tools.rs): the client may exit before its CM thread reads the
    // DISCONNECTED the server's DREP brings.
    assert!(cm::rping_client_closing(&ce), "client stderr: {ce}");
    let mut sl: Vec<&str> = se.lines().collect();
    sl.sort();
    assert_eq!(sl, ["server DISCONNECT EVENT...", "wait for RDMA_READ_ADV state 10"], "{se}");
}

#[test]
fn rping_q_client_gets_connect_response_and_its_establish_gives_the_server_established() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let ((so, se), (co, ce)) = rping_pair(&rping, &["-q", "-C", "1", "-d"]);
    let (se, ce) = (format!("{so}{se}"), format!("{co}{ce}"));
    // rping -d names each CM event it gets ("cma_event type RDMA_CM_EVENT_... cma_id ...").
    let events = |s: &str| -> Vec<String> {
        s.lines()
            .filter_map(|l| l.strip_prefix("cma_event type "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    // The client's DISCONNECTED may come after it exits (rping's own race, tests/tools.rs).
    let mut client = events(&ce);
    if client.last().map(String::as_str) == Some("RDMA_CM_EVENT_DISCONNECTED") {
        client.pop();
    }
    assert_eq!(
        client,
        [
            "RDMA_CM_EVENT_ADDR_RESOLVED",
            "RDMA_CM_EVENT_ROUTE_RESOLVED",
            "RDMA_CM_EVENT_CONNECT_RESPONSE"
        ],
        "client:\n{ce}"
    );
    assert_eq!(
        events(&se),
        [
            "RDMA_CM_EVENT_CONNECT_REQUEST",
            "RDMA_CM_EVENT_ESTABLISHED",
            "RDMA_CM_EVENT_DISCONNECTED"
        ],
        "server:\n{se}"
    );
}

#[test]
fn init_qp_attr_gives_each_states_attributes_and_mask() {
    let test = "init_qp_attr_gives_each_states_attributes_and_mask";
    let env = env();
    let port = common::free_port().to_string();
    let Some(out) = cm::run_c(test, &env, "init_qp_attr", &[&port]) else { return };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    // IBV_QP_* mask bits: STATE 0x1, ACCESS_FLAGS 0x8, PKEY_INDEX 0x10, PORT 0x20, AV 0x80,
    // PATH_MTU 0x100, TIMEOUT 0x200, RETRY_CNT 0x400, RNR_RETRY 0x800, RQ_PSN 0x1000,
    // MAX_QP_RD_ATOMIC 0x2000, MIN_RNR_TIMER 0x8000, SQ_PSN 0x10000, MAX_DEST_RD_ATOMIC 0x20000,
    // DEST_QPN 0x100000.
    assert_eq!(
        o,
        "before connect: INIT mask 0x39 access 0 pkey 0 port 1\n\
         before connect: RTR -1 EINVAL\n\
         after connect: INIT mask 0x39 access 0xe\n\
         passive INIT mask 0x39 access 0xe pkey 0 port 1\n\
         passive RTR mask 0x129181 mtu 3 dest_qp ok rq_psn ok max_dest_rd 1 min_rnr 0 \
         dgid ok sgid_index 1\n\
         passive RTS mask 0x12e01 sq_psn set timeout 17 retry 7 rnr_retry 7 max_rd 1\n\
         active event RDMA_CM_EVENT_CONNECT_RESPONSE\n\
         active RTR mask 0x129181 dest_qp ok rq_psn ok\n\
         active RTS mask 0x12e01 sq_psn ok\n\
         passive event RDMA_CM_EVENT_ESTABLISHED\n\
         rdma_establish again: -1 EINVAL\n\
         received: self-moved QPs\n",
        "stderr:\n{e}"
    );
}
