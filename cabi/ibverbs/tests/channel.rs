//! tests/c/channel.c on the library: a completion channel's fd behaves as the kernel's
//! completion event file: epoll finds it readable as soon as a completion reaches an armed CQ
//! (here one a verb makes itself, a receive flushed by `ibv_post_recv` on a QP in error),
//! `ibv_get_cq_event` on a non-blocking fd with nothing queued fails with `EAGAIN` and on a
//! blocking one waits for the event, a destroyed CQ's events are purged (the next
//! `ibv_get_cq_event` finds none, not `EIO`), and an idle program has no thread but the NIC
//! thread that wakes (no pump). Run with direct reach on and off (its completions are
//! made by verbs themselves, so nothing is reached either way; the outcome must not depend
//! on it).

mod common;

use common::Env;

const EXPECTED: &str = "\
non-blocking, none queued: rc=-1 errno=EAGAIN
epoll before: 0
epoll after the flush: 1 (data 42), at once: yes
get_cq_event: rc=0 cq=a context=0xa
flushed: n=1 wr_id=11 status=Work Request Flushed Error
taken, none left: rc=-1 errno=EAGAIN epoll=0
blocking get_cq_event: rc=0 cq=a, at once: yes
idle wake-ups of other threads: 0
b's event queued: 1
b flushed: n=1 wr_id=13
destroy_cq(b): rc=0
epoll after destroy: 0
get_cq_event after destroy: rc=-1 errno=EAGAIN
destroy_comp_channel: rc=0
";

#[test]
fn the_channel_fd_is_readable_at_once_nonblocking_gives_eagain_and_destroyed_cqs_events_go() {
    let test = "channel_fd";
    let Some((_dir, exe)) = common::build_c(test, "channel", &["-lpthread"]) else { return };
    let env = Env::new();
    for reach in ["on", "off"] {
        let (o, e) = common::run_reach(&env, &exe, reach, test);
        assert_eq!(o, EXPECTED, "[reach {reach}] stderr:\n{e}");
    }
}
