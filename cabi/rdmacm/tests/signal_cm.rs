//! tests/c/signal_cm.c: a signal during a blocking `rdma_get_cm_event`. The kernel's CM waits
//! for the event interruptibly (`ucma_get_event`), so a handler installed without `SA_RESTART`
//! ends the call with -1 and `EINTR`, as qperf's `SIGALRM` relies on for `ibv_get_cq_event`;
//! with `SA_RESTART` the read is restarted and the call returns the next event. Before, the
//! call carried on after any signal.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use cm::{env, leftovers};
use common::text;

/// Run `tests/c/<program>.c` with a free port (and `mode`, if any) in a fresh CM environment:
/// it must exit 0, print exactly `want`, nothing on stderr, and leave nothing in the CM's
/// directory (`label` names the case in a failure). False when the C program could not be
/// built (skipped, with a note).
fn expect(test: &str, program: &str, mode: Option<&str>, label: &str, want: &str) -> bool {
    let env = env();
    let port = common::free_port().to_string();
    let args: Vec<&str> = std::iter::once(port.as_str()).chain(mode).collect();
    let Some(out) = cm::run_c(test, &env, program, &args) else { return false };
    let (o, e) = text(&out);
    assert!(out.status.success(), "{label}: {o}{e}");
    assert_eq!(o, want, "{label}: {e}");
    assert_eq!(e, "", "{label}");
    assert!(leftovers(&env).is_empty(), "{label}: the CM left {:?}", leftovers(&env));
    true
}

#[test]
fn a_signal_ends_a_blocking_rdma_get_cm_event_unless_its_handler_restarts() {
    let test = "a_signal_ends_a_blocking_rdma_get_cm_event_unless_its_handler_restarts";
    for (mode, want) in [
        ("eintr", "rdma_get_cm_event: -1 EINTR after an alarm within 5 s: yes\ndone\n"),
        ("restart", "event RDMA_CM_EVENT_ADDR_RESOLVED status 0 after an alarm\ndone\n"),
    ] {
        if !expect(test, "signal_cm", Some(mode), mode, want) {
            return;
        }
    }
}

/// tests/c/signal_threads.c: the threads softverbs starts inside a program (a device's NIC
/// thread, the CM's clock and wire threads) block the program's asynchronous signals, so a
/// signal the program blocks in its own thread stays pending and its handler runs on that
/// thread once unblocked, as with rxe, whose NIC and CM live in the kernel. Before, one of
/// those threads took it at once.
#[test]
fn a_signal_the_program_blocks_waits_for_it_and_no_softverbs_thread_takes_it() {
    let test = "a_signal_the_program_blocks_waits_for_it_and_no_softverbs_thread_takes_it";
    for reach in ["on", "off"] {
        std::env::set_var("SOFTVERBS_REACH", reach);
        let want = "threads besides the program's: some\n\
             while blocked: handler ran 0 times, SIGUSR1 pending\n\
             unblocked: handler ran 1 times, on this thread\n\
             done\n";
        if !expect(test, "signal_threads", None, &format!("reach {reach}"), want) {
            return;
        }
    }
}

/// tests/c/sync_signal.c: a synchronous `rdma_connect` (an id without a channel) waits for its
/// answer as librdmacm's `ucma_complete` does, in a read that a handler installed without
/// `SA_RESTART` ends: -1 with `EINTR`; with `SA_RESTART` it carries on to the answer (here the
/// listener's reject, 2 s in: `ECONNREFUSED`). Before, the wait carried on after any signal.
#[test]
fn a_signal_ends_a_synchronous_rdma_connect_unless_its_handler_restarts() {
    let test = "a_signal_ends_a_synchronous_rdma_connect_unless_its_handler_restarts";
    for (mode, want) in [
        ("eintr", "rdma_connect: -1 EINTR after an alarm\ndone\n"),
        ("restart", "rdma_connect: -1 ECONNREFUSED after an alarm\ndone\n"),
    ] {
        if !expect(test, "sync_signal", Some(mode), mode, want) {
            return;
        }
    }
}
