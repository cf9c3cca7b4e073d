//! tests/c/odp.c on the library: on-demand paging as rxe (Linux 6.15+) has it (issue 30):
//! rxe's `odp_caps`, `IBV_ACCESS_ON_DEMAND` MRs over unpinned pages carrying a WRITE across
//! a page boundary, a READ and a FETCH_AND_ADD, `ibv_advise_mr` (synchronous, asynchronous,
//! an unknown advice, a range with a hole), and a WRITE into a page unmapped after
//! registration failing with REM_ACCESS_ERR, not the process; with direct reach on and off.

mod common;

const EXPECTED: &str = "\
query_device_ex: 0 general=0x1 rc=0xff uc=0 ud=0x23
reg_mr on demand: registered addr=the program's
write: post=0 n=1 wr_id=1 status=success opcode=1 qp=ok
write landed: yes
read: post=0 n=1 wr_id=2 status=success opcode=2 qp=ok
read landed: read back through the NIC
fetch_add: post=0 n=1 wr_id=3 status=success opcode=4 qp=ok
fetch_add: original=40 now=42
advise_mr prefetch_write flush: 0
advise_mr prefetch async: 0
advise_mr advice 7: EOPNOTSUPP
advise_mr over the hole: EFAULT
write to the hole: post=0 n=1 wr_id=4 status=remote access error opcode=0 qp=ok
dereg: 0 0
still running
";

#[test]
fn odp_mrs_from_c_follow_the_programs_pages_as_rxe() {
    let test = "odp_mrs_from_c_follow_the_programs_pages_as_rxe";
    let Some((_dir, exe)) = common::build_c(test, "odp", &[]) else { return };
    for reach in ["on", "off"] {
        let (o, e) = common::run_c(&exe, &[], reach, &[("SOFTVERBS_LOG", "warn")], test);
        assert_eq!(o, EXPECTED, "reach {reach}\n{e}");
    }
}
