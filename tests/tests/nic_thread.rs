//! The soft device's NIC thread as the operating system sees it: while the program busy-polls
//! it stands by as a background thread (`SCHED_BATCH`), whose periodic wake-ups never preempt
//! a polling thread; when the program stops calling in, it becomes an ordinary thread again
//! and takes over. Its own test binary, so that the only NIC thread in the process is this
//! test's.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use nic_model::soft::Soft;
use softverbs_tests::FabricDir;
use verbs_api::WorkCompletion;

/// `SCHED_OTHER` and `SCHED_BATCH`, as /proc reports a thread's policy.
const SCHED_OTHER: u32 = 0;
const SCHED_BATCH: u32 = 3;

/// The scheduling policy of this process's thread named `name` (field 41 of its
/// /proc/self/task/<tid>/stat), or None if there is no such thread.
fn policy_of_thread(name: &str) -> Option<u32> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // Fields after the parenthesised comm start at field 3; the policy is field 41.
        let rest = &stat[stat.rfind(')')? + 1..];
        return rest.split_whitespace().nth(38)?.parse().ok();
    }
    None
}

/// Waits (at most `limit`) until the NIC thread has `policy`, doing `each` meanwhile; returns
/// the last policy seen.
fn wait_for_policy(
    name: &str,
    policy: u32,
    limit: Duration,
    mut each: impl FnMut(),
) -> Option<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = policy_of_thread(name);
        if seen == Some(policy) || Instant::now() >= deadline {
            return seen;
        }
        each();
    }
}

#[test]
fn the_nic_thread_stands_by_in_the_background_and_takes_over_as_an_ordinary_thread() {
    let dir = FabricDir::new("nic_thread_policy");
    let soft = Soft::shared_memory(Some(dir.path())).expect("soft on the fabric");
    let ctx = soft.open("softverbs0").expect("opening softverbs0");
    let cq = ctx.create_cq(16, None, 0).expect("cq");
    let nic = "softverbs0-nic";
    // The thread names itself as it starts, which may be a moment after `open` returns.
    let seen = wait_for_policy(nic, SCHED_OTHER, Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(1));
    });
    assert_eq!(seen, Some(SCHED_OTHER), "an ordinary thread at first");

    // Busy-polling: after a few standby intervals (1 ms each) the thread is in the background.
    let mut wcs = [WorkCompletion::default(); 4];
    let seen = wait_for_policy(nic, SCHED_BATCH, Duration::from_secs(5), || {
        assert_eq!(cq.poll(&mut wcs).expect("polling"), 0, "nothing to complete");
    });
    assert_eq!(
        seen,
        Some(SCHED_BATCH),
        "a busy-polled device's NIC thread stands by as SCHED_BATCH"
    );

    // The program stops calling in: the thread takes over, an ordinary thread again.
    let seen = wait_for_policy(nic, SCHED_OTHER, Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(1));
    });
    assert_eq!(seen, Some(SCHED_OTHER), "a NIC thread that takes over is SCHED_OTHER");
    drop((cq, ctx, soft));
}
