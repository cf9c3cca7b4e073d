//! tests/c/sync_disconnect.c: a synchronous id's `rdma_disconnect` and a synchronous id migrated
//! after it connected, against librdmacm over the kernel's CM. A blocking `rdma_disconnect`
//! whose peer's program never answers the DREQ waits for the kernel's DISCONNECTED, which comes
//! after the DREQ's tries (`IB_CM_DREQ_ERROR`, status `-ETIMEDOUT`), and returns -1 with
//! `ETIMEDOUT` (librdmacm's `ucma_complete`); before, softverbs gave up after 3 s and returned 0.
//! A connected synchronous id migrated to a new channel (`rdma_migrate_id`) gets its later
//! events there, the peer's DISCONNECTED included; before, they stayed on its old private
//! channel, where the peer had recorded it at connect time. Direct reach on and off: the same
//! lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use cm::{env, leftovers};
use common::text;

/// One `SOFTVERBS_CM_TRY_MS`: 16 tries, 4 s, past the old 3 s bound.
const TRY_MS: &str = "250";

#[test]
fn a_synchronous_disconnect_waits_for_the_dreqs_tries_and_a_migrated_id_gets_its_events() {
    let test =
        "a_synchronous_disconnect_waits_for_the_dreqs_tries_and_a_migrated_id_gets_its_events";
    std::env::set_var("SOFTVERBS_CM_TRY_MS", TRY_MS);
    for reach in ["on", "off"] {
        std::env::set_var("SOFTVERBS_REACH", reach);
        let env = env();
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "sync_disconnect", &[&port, "silent", TRY_MS]) else {
            return;
        };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert_eq!(
            o,
            "connected: RDMA_CM_EVENT_ESTABLISHED and RDMA_CM_EVENT_ESTABLISHED\n\
             rdma_disconnect: -1 ETIMEDOUT\n\
             its event: RDMA_CM_EVENT_DISCONNECTED status -110\n\
             after the DREQ's 16 tries: yes, within 2 s more: yes\n\
             the passive side's rdma_disconnect: 0\n\
             done\n",
            "reach {reach}: {e}"
        );
        assert_eq!(e, "", "reach {reach}");
        assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
        for side in ["passive", "active"] {
            let env = cm::env();
            let port = common::free_port().to_string();
            let Some(out) = cm::run_c(test, &env, "sync_disconnect", &[&port, side]) else {
                return;
            };
            let (o, e) = text(&out);
            assert!(out.status.success(), "reach {reach}, {side}: {o}{e}");
            assert_eq!(
                o,
                format!(
                    "connected: RDMA_CM_EVENT_ESTABLISHED and RDMA_CM_EVENT_ESTABLISHED\n\
                     migrated: on the new channel yes, event acked\n\
                     {side} event on the new channel: RDMA_CM_EVENT_DISCONNECTED status 0\n\
                     the other side's rdma_disconnect: 0, its event \
                     RDMA_CM_EVENT_DISCONNECTED status 0\n\
                     {side} event on the new channel: RDMA_CM_EVENT_TIMEWAIT_EXIT status 0\n\
                     done\n"
                ),
                "reach {reach}, {side}: {e}"
            );
            assert_eq!(e, "", "reach {reach}, {side}");
            assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
        }
    }
}
