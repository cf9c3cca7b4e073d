//! tests/c/signal.c on the library: a blocking `ibv_get_cq_event` that a signal handler
//! interrupts fails with `EINTR` when the handler was installed without `SA_RESTART`, and
//! carries on (returning the event that comes later) when it was installed with it, as the
//! kernel's read of the completion event file does. qperf ends each timed test with such a
//! `SIGALRM` and, in its default event mode, waited in `ibv_get_cq_event` forever: its peer
//! then gave up with "failed to receive results: timed out". Run with direct reach on and off
//! (no datagram is involved; the outcome must not depend on it).

mod common;

use common::Env;

const EXPECTED: &str = "\
without SA_RESTART: rc=-1 errno=EINTR handler ran: yes
with SA_RESTART: rc=0 cq=cq context=0xa handler ran meanwhile: yes
flushed: n=1 wr_id=11 status=Work Request Flushed Error
";

#[test]
fn a_handler_without_sa_restart_interrupts_get_cq_event_and_one_with_it_does_not() {
    let test = "get_cq_event_signal";
    let Some((_dir, exe)) = common::build_c(test, "signal", &["-lpthread"]) else { return };
    let env = Env::new();
    for reach in ["on", "off"] {
        let (o, e) = common::run_reach(&env, &exe, reach, test);
        assert_eq!(o, EXPECTED, "[reach {reach}] stderr:\n{e}");
    }
}
