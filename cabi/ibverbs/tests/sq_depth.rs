//! tests/c/sq_depth.c on the library: a chain of WRs posted in one `ibv_post_send` (and a
//! batch in one `ibv_wr_complete`) is held to the send queue's depth as one call, as on rxe
//! and mlx5: `ENOMEM` with `*bad_wr` at the first WR that does not fit, those before it
//! posted and completed, none after it. With direct reach on and off.

mod common;

use std::time::Duration;

use common::{text, Env};

const EXPECTED: &str = "\
max_send_wr: 4
post_send(8 chained): rc=ENOMEM bad_wr=4
completions: 4
wc: wr_id=1 status=0 opcode=1 qp ok=yes
wc: wr_id=2 status=0 opcode=1 qp ok=yes
wc: wr_id=3 status=0 opcode=1 qp ok=yes
wc: wr_id=4 status=0 opcode=1 qp ok=yes
first four landed: yes, nothing after: yes
post_send(4 chained): rc=0
completions: 4
post_send(bad second): rc=EINVAL bad_wr=6
completions: 1, wr_id=6
wr_complete(8): rc=ENOMEM
completions: at most four
";

#[test]
fn a_chain_longer_than_the_send_queue_is_refused_at_the_wr_that_does_not_fit() {
    let test = "a_chain_longer_than_the_send_queue_is_refused_at_the_wr_that_does_not_fit";
    let Some((_dir, exe)) = common::build_c(test, "sq_depth", &[]) else { return };
    for reach in ["1", "0"] {
        let env = Env::new();
        let mut cmd = env.command(&exe);
        cmd.env("SOFTVERBS_REACH", reach);
        let child = cmd.spawn().expect("spawn");
        let out = common::finish(common::Guard(Some(child)), Duration::from_secs(60), "sq_depth");
        let (o, e) = text(&out);
        assert!(out.status.success(), "reach {reach}: {:?}\n{o}{e}", out.status);
        assert_eq!(o, EXPECTED, "reach {reach}");
    }
}
