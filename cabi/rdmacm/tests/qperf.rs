//! qperf (Debian 12's 0.4.11), unmodified, on softverbs' libibverbs.so.1 and librdmacm.so.1:
//! a `qperf` server and one client process per test, on a private fabric. qperf exchanges its
//! setup over a TCP control connection and its server forks a child per test.
//!
//! - With `-cm1` (the connection made by rdma_cm), every RC test runs and reports a
//!   non-zero, finite figure in its unit, and the `ver_` tests verify every atomic's result:
//!   each test for one second at the default message size, some also at 8 bytes and 64 KiB,
//!   with direct reach on; a subset with it off.
//! - Without `-cm1` (qperf's default), and in every UC and UD test (qperf uses the CM for RC
//!   only), qperf addresses its peer by LID with no GRH, which a RoCE port refuses, on rxe as
//!   here (the kernel's `rdma_check_ah_attr`): the test fails at once with
//!   "failed to modify QP to RTR: Invalid argument" (RC, UC) or "failed to create address
//!   handle: Invalid argument" (UD), on both sides, and the server serves the next test.
//!   (qperf's `xrc_*` tests exist only when it is built against the old XRC API, which
//!   rdma-core lacks: Debian's qperf answers "bad test".)
//!
//! qperf ends each timed test with `SIGALRM`, which must interrupt a blocking
//! `ibv_get_cq_event` (tests/signal.rs in softverbs-ibverbs). Each client run is bounded
//! (30 s); the server and its forked children are one process group, killed and reaped
//! whatever happens.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::{text, tool, Env};

/// Every RC test qperf has, each over rdma_cm.
const RC: [&str; 12] = [
    "rc_bw",
    "rc_bi_bw",
    "rc_lat",
    "rc_rdma_read_bw",
    "rc_rdma_read_lat",
    "rc_rdma_write_bw",
    "rc_rdma_write_lat",
    "rc_rdma_write_poll_lat",
    "rc_compare_swap_mr",
    "rc_fetch_add_mr",
    "ver_rc_compare_swap",
    "ver_rc_fetch_add",
];

/// A qperf server (`qperf -lp PORT`) and the children it forks, in a process group of their
/// own: killed and reaped when dropped.
struct Server {
    child: Option<Child>,
    port: String,
}

impl Server {
    fn start(env: &Env, qperf: &Path, reach: &str) -> Server {
        let port = common::free_port();
        let mut cmd = env.command(qperf);
        cmd.args(["-lp", &port.to_string()]).env("SOFTVERBS_REACH", reach).process_group(0);
        let mut s = Server {
            child: Some(cmd.spawn().expect("spawn qperf server")),
            port: port.to_string(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listening(port) {
            let exited = s.child.as_mut().expect("server").try_wait().expect("try_wait");
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "qperf never listened ({exited:?})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// Once the child serving the last test has ended (10 s at most), kill the group and
    /// reap the server: what it printed.
    fn stop(mut self) -> Output {
        let c = self.child.take().expect("server");
        let kids = format!("/proc/{0}/task/{0}/children", c.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&kids).unwrap_or_default().trim().is_empty() {
            if Instant::now() > deadline {
                kill_group(c.id());
                let out = c.wait_with_output().expect("server output");
                let (o, e) = text(&out);
                panic!("the server's child still ran 10 s after its client ended:\n{o}{e}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_group(c.id());
        c.wait_with_output().expect("server output")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(c.id());
            let _ = c.wait();
        }
    }
}

/// SIGKILL to process group `pgid` (the server and the children it forked).
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// Whether a socket listens on TCP `port` (`/proc/net/tcp6`, `tcp`: state 0A), without
/// connecting to it (a connection would make the server fork a child waiting for a request).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp6", "/proc/net/tcp"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
    })
}

/// `qperf -lp PORT localhost ARGS TEST` to its end (30 s at most).
fn client(env: &Env, qperf: &Path, s: &Server, reach: &str, args: &[&str], test: &str) -> Output {
    let mut all = vec!["-lp", &s.port, "localhost"];
    all.extend_from_slice(args);
    all.push(test);
    let mut cmd = env.command(qperf);
    cmd.args(&all).env("SOFTVERBS_REACH", reach);
    let what = format!("[reach {reach}] qperf {}", all.join(" "));
    common::finish(common::Guard(Some(cmd.spawn().expect("spawn"))), Duration::from_secs(30), &what)
}

fn qperf() -> Option<PathBuf> {
    tool("qperf", "qperf", "qperf")
}

/// Run each of `tests` over rdma_cm with `args`: exit 0, the test's name line, and one figure
/// (`bw`, `latency` or `msg_rate`) that is finite and above zero, in a unit qperf uses for it.
fn over_cm(reach: &str, runs: &[(&[&str], &[&str])]) {
    let Some(q) = qperf() else { return };
    let env = cm::env();
    let server = Server::start(&env, &q, reach);
    for (args, tests) in runs {
        // `-to 15`: qperf's own bound on each exchange over its control connection (5 s by
        // default), generous for a loaded machine; each run is bounded at 30 s anyway.
        let mut all = vec!["-cm1", "-t", "1", "-to", "15"];
        all.extend_from_slice(args);
        for t in *tests {
            let out = client(&env, &q, &server, reach, &all, t);
            let (o, e) = text(&out);
            let what = format!("[reach {reach}] {t} {}", all.join(" "));
            assert!(out.status.success() && e.is_empty(), "{what}: {:?}\n{o}{e}", out.status);
            let lines: Vec<&str> = o.lines().collect();
            assert_eq!(lines.first().copied(), Some(format!("{t}:").as_str()), "{what}:\n{o}");
            assert_eq!(lines.len(), 2, "{what}: one figure:\n{o}");
            let f: Vec<&str> = lines[1].split_whitespace().collect();
            assert!(f.len() == 4 && f[1] == "=", "{what}: {:?}", lines[1]);
            let v: f64 = f[2].parse().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{what}: {:?}", lines[1]);
            let units: &[&str] = match f[0] {
                "bw" => &["bytes/sec", "KB/sec", "MB/sec", "GB/sec", "TB/sec"],
                "latency" => &["ns", "us", "ms", "sec"],
                "msg_rate" => &["/sec", "K/sec", "M/sec", "G/sec"],
                _ => panic!("{what}: an unknown figure {:?}", lines[1]),
            };
            assert!(units.contains(&f[3]), "{what}: {:?}", lines[1]);
        }
    }
    let out = server.stop();
    let (o, e) = text(&out);
    assert!(o.is_empty() && e.is_empty(), "[reach {reach}] the server said:\n{o}{e}");
    // No check of what the CM left: qperf 0.4.11 never destroys two of its ids (its client
    // makes its channel and id twice; its server destroys the listening id's QP, not the
    // connection's), which the kernel frees at exit and softverbs' CM sweeps when the next
    // channel is made (their processes are gone).
}

#[test]
fn every_rc_test_over_the_cm_reports_its_figure_reach_on() {
    over_cm(
        "1",
        &[
            (&[], &RC),
            (&["-m", "8"], &["rc_bw", "rc_lat", "rc_rdma_write_poll_lat"]),
            (&["-m", "64K"], &["rc_rdma_read_bw", "rc_rdma_write_lat", "rc_bi_bw"]),
        ],
    );
}

#[test]
fn rc_tests_over_the_cm_report_their_figures_reach_off() {
    over_cm(
        "0",
        &[
            (
                &[],
                &[
                    "rc_bw",
                    "rc_lat",
                    "rc_rdma_read_lat",
                    "rc_rdma_write_poll_lat",
                    "ver_rc_compare_swap",
                    "ver_rc_fetch_add",
                ],
            ),
            (&["-m", "64K"], &["rc_rdma_write_bw"]),
        ],
    );
}

/// Without rdma_cm qperf addresses by LID: refused as rxe refuses it, on both sides, and the
/// server carries on.
#[test]
fn without_the_cm_every_test_is_refused_as_on_rxe() {
    let Some(q) = qperf() else { return };
    let rtr = "failed to modify QP to RTR: Invalid argument";
    let ah = "failed to create address handle: Invalid argument";
    let mut want: Vec<(&str, &str)> = RC.iter().map(|t| (*t, rtr)).collect();
    want.extend(
        ["uc_bw", "uc_bi_bw", "uc_lat", "uc_rdma_write_bw", "uc_rdma_write_lat"]
            .into_iter()
            .chain(["uc_rdma_write_poll_lat"])
            .map(|t| (t, rtr)),
    );
    want.extend(["ud_bw", "ud_bi_bw", "ud_lat"].into_iter().map(|t| (t, ah)));
    for reach in ["1", "0"] {
        let env = cm::env();
        let server = Server::start(&env, &q, reach);
        // Reach off, a few: nothing reaches a wire either way.
        let tests: Vec<(&str, &str)> = match reach {
            "1" => want.clone(),
            _ => want
                .iter()
                .copied()
                .filter(|(t, _)| ["rc_bw", "uc_lat", "ud_bw"].contains(t))
                .collect(),
        };
        for (t, msg) in &tests {
            let out = client(&env, &q, &server, reach, &["-t", "1"], t);
            let (o, e) = text(&out);
            let all = format!("{o}{e}");
            assert!(!out.status.success(), "[reach {reach}] {t} succeeded:\n{all}");
            // The client's own error, or the server's, which qperf relays as "server: ...".
            let ok = all.lines().any(|l| l == *msg || l == format!("server: {msg}"));
            assert!(ok, "[reach {reach}] {t}: no `{msg}`:\n{all}");
        }
        let out = server.stop();
        let (o, e) = text(&out);
        for l in format!("{o}{e}").lines() {
            assert!(l == rtr || l == ah, "[reach {reach}] the server said {l:?}:\n{o}{e}");
        }
    }
}

/// Debian's qperf has no XRC tests (rdma-core has no `ibv_open_xrc_domain`): it says so.
#[test]
fn xrc_tests_are_not_built_into_debians_qperf() {
    let Some(q) = qperf() else { return };
    let env = Env::new();
    let out = env.run(&q, &["localhost", "xrc_bw"], Duration::from_secs(10));
    let (o, e) = text(&out);
    assert!(!out.status.success());
    assert!(format!("{o}{e}").contains("xrc_bw: bad test"), "{o}{e}");
}
