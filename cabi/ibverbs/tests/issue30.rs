//! tests/c/issue30.c on the library, with direct reach on and off (the same lines both ways):
//! the entry points loaders bind answer as libibverbs over rxe; `ibv_create_qp_ex` refuses
//! `send_ops_flags` and `create_flags` as rxe's provider does (never a NULL `ibv_wr_*` pointer)
//! and takes a zero `create_flags`; `max_inline_data` 0 is rounded up as rxe rounds it and an
//! inline SEND within it arrives; a QP destroyed before its async event is read never has the
//! event delivered (with a NULL `qp`, which crashed UCX), nor a destroyed CQ's overrun event; a UD address handle from GID index 0
//! sends over IPv6 as rxe's does, and the receive's GRH area holds the IPv6 header.

mod common;

const EXPECTED: &str = "\
reg_dmabuf_mr: NULL errno=EOPNOTSUPP
rereg_mr(access): rc=-4 errno=EOPNOTSUPP
rereg_mr(access without the flag): rc=-1 errno=EINVAL
import_pd: NULL errno=EOPNOTSUPP
import_mr: NULL errno=EOPNOTSUPP
import_device(-1): NULL errno=EINVAL
dup(cmd_fd): ok
import_device(dup of cmd_fd): NULL errno=EOPNOTSUPP
rate_to_mbps(100G): 103125, mbps_to_ibv_rate(25781): 15, rate_to_mult(10G): 4
qp_ex(RC, send/write/read/atomics): object
qp_ex(UC, ATOMIC_WRITE): NULL errno=EOPNOTSUPP
qp_ex(UC, SEND_WITH_INV): NULL errno=EOPNOTSUPP
qp_ex(RC, TSO): NULL errno=EOPNOTSUPP
qp_ex(UD, RDMA_WRITE): NULL errno=EOPNOTSUPP
qp_ex(create_flags 0): object
qp_ex(create_flags SCATTER_FCS): NULL errno=EOPNOTSUPP
max_inline_data granted: 16
in order: 0
post inline 16: rc=0
completions: 2, statuses 0 0, received: sixteen bytes!!
bad rkey: 1 completion, status remote access error
async events after destroy: 0, naming NULL: 0, then EAGAIN
small cq overrun event queued: yes
async events after cq destroy: 0, naming NULL: 0, then EAGAIN
ah from gid 0: object
post ud: rc=0
ud completions: 2, recv status 0 byte_len 50 grh yes, ip version 6, source gid 0: yes, data: over ipv6
init_ah_from_wc: rc=0 sgid_index 0 dgid is gid 0: yes flow label 0x12345
still running
";

#[test]
fn issue_30_entry_points_qp_ex_checks_inline_rounding_and_destroyed_qps_events_as_rxe() {
    let test = "issue_30_entry_points_qp_ex_checks_inline_rounding_and_destroyed_qps_events_as_rxe";
    let Some((_dir, exe)) = common::build_c(test, "issue30", &[]) else { return };
    for reach in ["on", "off"] {
        let (o, e) = common::run_c(&exe, &[], reach, &[], test);
        assert_eq!(o, EXPECTED, "reach {reach}\n{e}");
    }
}
