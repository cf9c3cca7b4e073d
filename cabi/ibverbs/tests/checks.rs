//! tests/c/checks.c on the library: bad input (NULL, a destroyed object, an object in use)
//! and verbs softverbs lacks get the errno libibverbs gives, and the process keeps running; a
//! completion channel's fd, and the context's async event fd, are readable exactly when an
//! event waits (poll); refusals are logged
//! with their reason under `SOFTVERBS_LOG`, and nothing is printed without it.

mod common;

use std::time::Duration;

use common::{text, Env};

const EXPECTED: &str = "\
async fd readable: 1
get_async_event: rc=0
async event: port active, port 1
async fd readable after: 0
alloc_pd(NULL): zero errno=EINVAL
reg_mr(ZERO_BASED): zero errno=EOPNOTSUPP
dealloc_pd(in use): rc=EBUSY
dealloc_pd(destroyed): rc=EINVAL
dereg_mr(NULL): rc=EINVAL
query_port(2): rc=EINVAL
query_gid_ex(99): rc=ENODATA
alloc_mw(type 3): zero errno=EINVAL
open_xrcd: zero errno=EOPNOTSUPP
create_cq_ex(timestamps): zero errno=EOPNOTSUPP
destroy_comp_channel(in use): rc=EBUSY
create_qp(XRC_SEND): zero errno=EOPNOTSUPP
attach_mcast: rc=EINVAL
post_send(BIND_MW of no window): rc=EINVAL
bad_wr names it: yes
fd readable before: 0
fd readable after: 1
get_cq_event: rc=0
event names the cq: yes, context 0x5eed
comp_events_completed: 1
completions: 2, received: evented
start_poll on empty: ENOENT
cq_ex: rc=0 wr_id=33 status=0 opcode=128 byte_len=8 qp_num ok=yes
next_poll: ENOENT
destroy_cq(cq_ex): rc=0
destroy_qp(destroyed): rc=EINVAL
destroy_comp_channel: rc=0
dealloc_pd: rc=0
close_device: rc=0
still running
";

#[test]
fn bad_input_and_missing_verbs_get_libibverbs_errnos_and_channels_poll() {
    let test = "bad_input_and_missing_verbs_get_libibverbs_errnos_and_channels_poll";
    let Some((_dir, exe)) = common::build_c(test, "checks", &[]) else { return };
    let env = Env::new();

    let out = env.run(&exe, &[], Duration::from_secs(60));
    let (o, e) = text(&out);
    assert!(out.status.success(), "{:?}\n{o}{e}", out.status);
    assert_eq!(o, EXPECTED);
    assert_eq!(e, "", "silent without SOFTVERBS_LOG");

    let mut cmd = env.command(&exe);
    cmd.env("SOFTVERBS_LOG", "warn");
    let out = common::finish(
        common::Guard(Some(cmd.spawn().expect("spawn"))),
        Duration::from_secs(60),
        test,
    );
    let (o, e) = text(&out);
    assert_eq!(o, EXPECTED);
    for line in [
        "ibv_alloc_pd: the context is NULL",
        "ibv_reg_mr: access flags 0x21: zero-based MRs are not supported",
        "ibv_dealloc_pd: destroyed object, or not one softverbs made",
        "ibv_query_port: port 2 does not exist",
        "ibv_create_qp: QP type 9: softverbs has RC (2), UC (3) and UD (4)",
        "ibv_attach_mcast: QP 0x",
        "only a UD QP joins a multicast group",
        "ibv_post_send: IBV_WR_BIND_MW with bind_mw.mw NULL",
    ] {
        assert!(e.contains(line), "no log line {line:?} in:\n{e}");
    }
}

/// Each GID names its network device as `softverbs run`'s sysfs does (`gid_attrs/ndevs/N`:
/// `lo`): `ndev_ifindex` of `ibv_query_gid_table` and `ibv_query_gid_ex` is `lo`'s index, so a
/// program that names the GID's interface (`if_indextoname`; the `sideway` crate's
/// `show_gids`) finds one, as over rxe, whose GIDs name its netdev.
#[test]
fn each_gid_names_lo_as_its_network_device() {
    let test = "each_gid_names_lo_as_its_network_device";
    let Some((_dir, exe)) = common::build_c(test, "gid_ndev", &[]) else { return };
    let out = Env::new().run(&exe, &[], Duration::from_secs(60));
    let (o, e) = text(&out);
    assert!(out.status.success(), "{:?}\n{o}{e}", out.status);
    assert_eq!(o, "table 0 ndev lo\ntable 1 ndev lo\ngid 0 ndev lo\ngid 1 ndev lo\n");
}
