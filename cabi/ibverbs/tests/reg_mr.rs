//! tests/c/reg_mr.c on the library: `ibv_reg_mr` refuses memory the kernel could not pin —
//! not mapped (`EFAULT`), mapped without the access the flags need (`EFAULT`), length 0
//! (`EINVAL`) — and a valid registration still takes an RDMA WRITE; with direct reach on and
//! off (issue 29, item 13).

mod common;

const EXPECTED: &str = "\
unmapped 0x10000: refused errno=EFAULT
NULL: refused errno=EFAULT
length 0: refused errno=EINVAL
past the mapping's end: refused errno=EFAULT
inside the mapping: registered errno=0
read-only, LOCAL_WRITE: refused errno=EFAULT
read-only, REMOTE_READ: registered errno=0
PROT_NONE: refused errno=EFAULT
lkey == rkey: yes
post_send: 0
write: n=1 wr_id=9 status=success landed=landed
still running
";

#[test]
fn reg_mr_refuses_what_the_kernel_cannot_pin_and_takes_the_rest() {
    let test = "reg_mr_refuses_what_the_kernel_cannot_pin_and_takes_the_rest";
    let Some((_dir, exe)) = common::build_c(test, "reg_mr", &[]) else { return };
    for reach in ["on", "off"] {
        let (o, e) = common::run_c(&exe, &[], reach, &[("SOFTVERBS_LOG", "warn")], test);
        assert_eq!(o, EXPECTED, "reach {reach}");
        assert!(e.contains("the memory at 0x10000 is not mapped"), "the log names it:\n{e}");
    }
}
