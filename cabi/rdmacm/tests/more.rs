//! tests/c/issue30.c (issue 30's librdmacm entry points): `rdma_get_devices` lists the
//! contexts the CM's ids use; the ECE set on an id without a CM-made QP reaches the peer in the
//! REQ and comes back in the REP (vendor echoed, the passive side's options), as the kernel's
//! CM carries it; `rdma_notify` answers as `ib_cm_notify`; `rdma_reject_ece` rejects with 35.
//! Run with direct reach on and off: the same lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use cm::env;
use common::text;

#[test]
fn devices_ece_notify_and_reject_ece_answer_as_librdmacm_over_rxe() {
    let test = "devices_ece_notify_and_reject_ece_answer_as_librdmacm_over_rxe";
    for reach in ["on", "off"] {
        let env = env();
        std::env::set_var("SOFTVERBS_REACH", reach);
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "issue30", &[&port]) else { return };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert_eq!(
            o,
            "devices: 2, terminated: yes\n\
             the id's context is listed: yes\n\
             set_local_ece(vendor 0): -1 EINVAL\n\
             notify before connecting: -1 EINVAL\n\
             passive reads vendor 0x15b3 options 0x5\n\
             active event RDMA_CM_EVENT_CONNECT_RESPONSE\n\
             active reads vendor 0x15b3 options 0x1\n\
             notify(COMM_EST) while connecting: 0 \n\
             notify(COMM_EST) established: -1 EISCONN\n\
             notify(PORT_ACTIVE): -1 EINVAL\n\
             active event RDMA_CM_EVENT_REJECTED\n\
             reject_ece: REJECTED 35\n",
            "reach {reach}"
        );
    }
}
