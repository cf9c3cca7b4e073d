//! `fork()` with open devices, as `ibv_fork_init` promises: the child has no mapping of the
//! memory of the MRs the parent's device owns (it is `MADV_DONTFORK`), and nothing the child
//! does with the verbs objects it inherited disturbs the parent's devices: dropping them (or
//! exiting) withdraws none of the parent's MRs or QPs, zeroes no memory, closes no port and
//! removes no file. The parent's MRs keep their bytes and its peer keeps reaching them, with
//! direct reach on and off.

use std::time::{Duration, Instant};

use softverbs_sim::conn::ConnOpts;
use softverbs_tests::{pattern, RcPair};
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const MR_LEN: usize = 1 << 16;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Whether `addr` lies in one of this process's mappings (`/proc/self/maps`).
fn mapped(addr: u64) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines().any(|l| {
        let range = l.split(' ').next().unwrap_or("");
        let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
        let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
        (a..b).contains(&addr)
    })
}

/// Waits (bounded) for the child; kills it on time out. Its exit status, or None if it hung
/// or died by a signal.
fn reap(child: libc::pid_t) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our own child; WNOHANG does not block.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if r == child {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if start.elapsed() > WAIT {
            // SAFETY: our own child.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn write_wr<'a>(sges: &'a [Sge], id: u64, op: WrOpcode, to: u64, rkey: u32) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        sg_list: sges,
        opcode: op,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: to, rkey },
        ..Default::default()
    }
}

fn child_drops_everything(reach: bool) {
    let test = if reach { "fork_reach" } else { "fork_packets" };
    let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
    let p = RcPair::new(test, cap(), MR_LEN, &opts, |soft| soft.set_reach(reach));
    let data = pattern(29, 0, 4096);
    p.a.mr.write(0, &data).unwrap();
    let files = p.dir.segment_files();
    assert!(files.iter().any(|f| f.extension().is_some_and(|e| e == "inbox")), "{files:?}");
    if reach {
        assert!(files.iter().any(|f| f.extension().is_some_and(|e| e == "reach")), "{files:?}");
    }
    let addr = p.a.mr.addr();
    // SAFETY: the child calls only what is named below and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        // The child: is a's MR mapped here? Then it drops every object it inherited, as a
        // program that cleans up does, and exits without the test harness.
        let seen = mapped(addr);
        let RcPair { soft, a, b, dir } = p;
        std::mem::forget(dir);
        drop(a);
        drop(b);
        drop(soft);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(10 + i32::from(seen)) };
    }
    let status = reap(child);
    assert!(status.is_some(), "the child hung or crashed dropping its inherited objects");
    let seen = status.unwrap() == 11;
    assert_eq!(status.map(|s| s / 10), Some(1), "the child finished");
    if reach {
        // Owned MR memory is in the reach arena: MADV_DONTFORK, as ibv_fork_init makes it.
        assert!(!seen, "the child has no mapping of the parent's registered memory");
    }
    // The parent's device is untouched: its files, its MR's bytes, its port and QPs.
    assert_eq!(p.dir.segment_files(), files, "no file removed by the child");
    assert_eq!(p.a.mr.read_vec(0, 4096).unwrap(), data, "the MR kept its bytes");
    let (a, b) = (&p.a, &p.b);
    // The peer WRITEs into a's MR and READs it back.
    let more = pattern(30, 0, 512);
    b.mr.write(0, &more).unwrap();
    let sges = [b.mr.sge(0, 512)];
    b.qp.post_send(&[write_wr(&sges, 1, WrOpcode::RdmaWrite, a.mr.addr() + 8192, a.mr.rkey())])
        .unwrap();
    let wc = b.cq.poll_n(1, WAIT).expect("the WRITE's completion")[0];
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(a.mr.read_vec(8192, 512).unwrap(), more, "the WRITE landed in the parent's MR");
    let sges = [b.mr.sge(1024, 4096)];
    b.qp.post_send(&[write_wr(&sges, 2, WrOpcode::RdmaRead, a.mr.addr(), a.mr.rkey())]).unwrap();
    let wc = b.cq.poll_n(1, WAIT).expect("the READ's completion")[0];
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(wc.byte_len, 4096);
    assert_eq!(b.mr.read_vec(1024, 4096).unwrap(), data, "the READ found the parent's bytes");
    // And the parent's own QP still sends.
    let sges = [a.mr.sge(0, 64)];
    a.qp.post_send(&[write_wr(&sges, 3, WrOpcode::RdmaWrite, b.mr.addr() + 9000, b.mr.rkey())])
        .unwrap();
    let wc = a.cq.poll_n(1, WAIT).expect("a's WRITE's completion")[0];
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success));
    assert_eq!(b.mr.read_vec(9000, 64).unwrap(), data[..64]);
}

#[test]
fn a_child_that_drops_what_it_inherited_leaves_the_parent_alone_reach_on() {
    child_drops_everything(true);
}

#[test]
fn a_child_that_drops_what_it_inherited_leaves_the_parent_alone_reach_off() {
    child_drops_everything(false);
}
