//! tests/c/create_qp_ex.c: `rdma_create_qp_ex` as librdmacm's. It read `comp_mask` 4 bytes past
//! where `<infiniband/verbs.h>` puts it (after `ibv_qp_init_attr`'s tail padding, in the low half
//! of the PD pointer), so librpma's QPs (`IBV_QP_INIT_ATTR_PD` alone) were refused with a
//! garbage mask; and it refused every extended attribute but the PD where librdmacm passes them
//! to `ibv_create_qp_ex`. Direct reach on and off: the same lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use common::text;

#[test]
fn rdma_create_qp_ex_reads_verbs_h_layout_and_passes_extended_attributes_on() {
    let test = "rdma_create_qp_ex_reads_verbs_h_layout_and_passes_extended_attributes_on";
    for reach in ["on", "off"] {
        std::env::set_var("SOFTVERBS_REACH", reach);
        let env = cm::env();
        let port = common::free_port().to_string();
        let Some(out) = cm::run_c(test, &env, "create_qp_ex", &[&port]) else { return };
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert_eq!(
            o,
            "XRCD: -1 EOPNOTSUPP, qp none\n\
             send: wr_id 9, success, opcode SEND\n\
             recv: wr_id 7, success, opcode RECV, 32 bytes: through ibv_wr_send\n\
             done\n",
            "reach {reach}: {e}"
        );
        assert!(cm::leftovers(&env).is_empty(), "the CM left {:?}", cm::leftovers(&env));
    }
}
