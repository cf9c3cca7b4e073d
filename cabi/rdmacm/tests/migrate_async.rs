//! tests/c/migrate_async.c: asynchronous ids moved to another event channel after they
//! connected (`rdma_migrate_id`), as librpma moves the id its listener's channel gave and its
//! client's id. With the kernel's CM (`RDMA_USER_CM_CMD_MIGRATE_ID`) the id's pending and later
//! events are on the new channel at once, whether or not anybody reads the old one, and
//! destroying the old channel loses none of them. Before, they stayed on the old channel (the
//! peer, the gateway and the clock had recorded it at connect time) and reached the new one only
//! when the program read the old one. Direct reach on and off: the same lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use cm::{env, leftovers};
use common::text;

#[test]
fn an_asynchronous_id_migrated_after_it_connected_gets_its_events_on_the_new_channel() {
    let test = "an_asynchronous_id_migrated_after_it_connected_gets_its_events_on_the_new_channel";
    for reach in ["on", "off"] {
        std::env::set_var("SOFTVERBS_REACH", reach);
        for when in ["pending", "later"] {
            for old in ["keep", "destroy"] {
                let env = env();
                let port = common::free_port().to_string();
                let Some(out) = cm::run_c(test, &env, "migrate_async", &[&port, when, old]) else {
                    return;
                };
                let (o, e) = text(&out);
                let case = format!("reach {reach}, {when}, {old}");
                assert!(out.status.success(), "{case}: {o}{e}");
                let est = "client: RDMA_CM_EVENT_ESTABLISHED status 0\n";
                let destroyed = if old == "destroy" { "old channels destroyed\n" } else { "" };
                let (before, after) = if when == "pending" { (est, "") } else { ("", est) };
                assert_eq!(
                    o,
                    format!(
                        "client: RDMA_CM_EVENT_ADDR_RESOLVED status 0\n\
                         client: RDMA_CM_EVENT_ROUTE_RESOLVED status 0\n\
                         listener: RDMA_CM_EVENT_CONNECT_REQUEST status 0\n\
                         {before}{after}{destroyed}\
                         server: RDMA_CM_EVENT_ESTABLISHED status 0\n\
                         server: RDMA_CM_EVENT_DISCONNECTED status 0\n\
                         client: RDMA_CM_EVENT_DISCONNECTED status 0\n\
                         client: RDMA_CM_EVENT_TIMEWAIT_EXIT status 0\n\
                         server: RDMA_CM_EVENT_TIMEWAIT_EXIT status 0\n\
                         done\n"
                    ),
                    "{case}: {e}"
                );
                assert_eq!(e, "", "{case}");
                assert!(leftovers(&env).is_empty(), "{case}: the CM left {:?}", leftovers(&env));
            }
        }
    }
}
