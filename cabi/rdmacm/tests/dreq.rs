//! tests/c/dreq_qp.c: the peer's DREQ leaves a connected id's QP alone, as the kernel's CM
//! (cma.c's `cma_ib_handler` turns IB_CM_DREQ_RECEIVED into DISCONNECTED and nothing more) and
//! librdmacm (whose `rdma_get_cm_event` moves a QP to ERR on REJECTED only) leave it over rxe:
//! at DISCONNECTED the QP is still in RTS and a posted receive is not flushed; the program's own
//! `rdma_disconnect` moves the QP to ERR and flushes it (librdmacm's `ucma_shutdown`, which runs
//! whether or not DISCONNECTED came first), and sends the DREP that gives the active side its
//! DISCONNECTED (the kernel's CM sends none before: ib_cm's DREQ_RCVD waits for the consumer).
//! Run with direct reach on and off: the same lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use cm::env;
use common::text;

#[test]
fn the_peers_dreq_leaves_the_qp_in_rts_until_the_programs_own_rdma_disconnect() {
    let test = "the_peers_dreq_leaves_the_qp_in_rts_until_the_programs_own_rdma_disconnect";
    for reach in ["on", "off"] {
        let env = env();
        std::env::set_var("SOFTVERBS_REACH", reach);
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "dreq_qp", &[&port]) else { return };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        // A flushed completion: wr_id, status and qp_num (what libibverbs says is valid on an
        // error status), every other field zero, opcode included, as rxe's flush_recv_wqe.
        let wc = |who: &str, wr_id: &str| {
            format!(
                "{who} wc: wr_id {wr_id} status Work Request Flushed Error opcode 0 \
                 vendor_err 0 byte_len 0 imm 0 own qp yes src_qp 0 wc_flags 0 pkey_index 0 \
                 slid 0 sl 0 dlid_path_bits 0"
            )
        };
        let mut lines: Vec<String> = o.lines().map(str::to_owned).collect();
        // The two timewaits end 512 ms after each side's DISCONNECTED, in either order.
        let n = lines.len();
        if n > 3 {
            lines[n - 3..n - 1].sort();
        }
        let want = [
            "active event RDMA_CM_EVENT_ESTABLISHED, status 0".to_owned(),
            "passive event RDMA_CM_EVENT_ESTABLISHED, status 0".to_owned(),
            "active QP after its rdma_disconnect: ERR".to_owned(),
            wc("active", "0xac"),
            "active cq after it: 0".to_owned(),
            "passive event RDMA_CM_EVENT_DISCONNECTED, status 0".to_owned(),
            "passive QP at DISCONNECTED: RTS".to_owned(),
            "passive cq at DISCONNECTED: 0".to_owned(),
            "an event before the passive's rdma_disconnect: none".to_owned(),
            "passive QP after its rdma_disconnect: ERR".to_owned(),
            wc("passive", "0x9a"),
            "passive cq after it: 0".to_owned(),
            "active event RDMA_CM_EVENT_DISCONNECTED, status 0".to_owned(),
            "active event RDMA_CM_EVENT_TIMEWAIT_EXIT, status 0".to_owned(),
            "passive event RDMA_CM_EVENT_TIMEWAIT_EXIT, status 0".to_owned(),
            "done".to_owned(),
        ];
        assert_eq!(lines, want, "reach {reach}:\n{o}{e}");
        assert_eq!(e, "", "reach {reach}");
    }
}

/// tests/c/dreq_gone.c: the active side's rdma_disconnect after the passive program went quiet
/// as perftest -R's server does (its data channel unread after the accept; its id destroyed
/// without rdma_disconnect, its channel too, or rdma_disconnect and destroy with the active
/// side's DREQ unread): each ends with the active side's DISCONNECTED, status 0, then
/// TIMEWAIT_EXIT, each within 10 s where the DREQ's life is 74 s, as under the kernel's CM (a
/// destroyed connected id sends its DREQ, `cm_destroy_id`; a DREQ for an id that no longer
/// exists gets a DREP, `cm_dreq_handler`'s `cm_issue_drep`). Reach on and off.
#[test]
fn a_disconnect_after_the_peer_destroyed_its_id_ends_within_the_dreqs_first_tries() {
    let test = "a_disconnect_after_the_peer_destroyed_its_id_ends_within_the_dreqs_first_tries";
    for reach in ["on", "off"] {
        let env = env();
        std::env::set_var("SOFTVERBS_REACH", reach);
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "dreq_gone", &[&port]) else { return };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        let mut want = Vec::new();
        for order in ["destroyed", "channel", "unread"] {
            for ev in ["DISCONNECTED", "TIMEWAIT_EXIT"] {
                want.push(format!("{order}: active event RDMA_CM_EVENT_{ev}, status 0"));
            }
        }
        want.push("done".to_owned());
        assert_eq!(o.lines().collect::<Vec<_>>(), want, "reach {reach}:\n{o}{e}");
        assert_eq!(e, "", "reach {reach}");
        assert!(cm::leftovers(&env).is_empty(), "reach {reach}: {:?}", cm::leftovers(&env));
    }
}
