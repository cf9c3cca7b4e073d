//! rdma-core's CM tools and perftest `-R`, unmodified, on softverbs' librdmacm.so.1 and
//! libibverbs.so.1, as a server and a client process: rping exchanges 100 verified pings and
//! disconnects; ucmatose connects several RC ids and udaddy UD ids (SIDR, the UDP Q_Key) and
//! move data; perftest `-R` (ib_send_bw, ib_read_bw, ib_atomic_bw, ib_write_lat, ib_send_lat,
//! ib_read_lat) reports its tables — its second connection's REQ may come while the server is
//! between two listens, which softverbs' CM answers once the server listens again; a connect
//! to a port nobody listens on is REJECTED with status 8, and an address of no softverbs port
//! gets ADDR_ERROR with a message saying so.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use cm::{env, leftovers, ping_text};
use common::{text, tool};

#[test]
fn rping_100_pings_verified() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let env = env();
    let p = common::free_port().to_string();
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env,
        (&rping, &["-s", "-p", &p, "-C", "100", "-v"]),
        &format!(":{p}"),
        (&rping, &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-v"]),
        Duration::from_secs(60),
    );
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", ping_text(n))).collect();
    let got: Vec<&str> = co.lines().collect();
    assert_eq!(got, want, "client output");
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", ping_text(n))).collect();
    let got: Vec<&str> = so.lines().collect();
    assert_eq!(got, want, "server output");
    // rping's own closing lines, on stderr: each side saw DISCONNECTED; the server was waiting
    // for the next ping's advertisement (state 10 = DISCONNECTED) when it came. The client's
    // line is rping's own race: after rdma_disconnect its main thread joins the CQ thread
    // (which ends at the first flushed completion, at once) and exits, whether or not its CM
    // thread has read the DISCONNECTED that the server's DREP brings (so with the kernel's CM
    // too); about one run in 70 here, it has not.
    assert!(cm::rping_client_closing(&ce), "client stderr: {ce}");
    let mut sl: Vec<&str> = se.lines().collect();
    sl.sort();
    assert_eq!(sl, ["server DISCONNECT EVENT...", "wait for RDMA_READ_ADV state 10"], "{se}");
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
}

/// mckey, rdma-core's multicast test: a receiver joins 239.1.2.3 (its QP attached, 20
/// receives posted) and a sender joins and sends 20 datagrams of 1000 bytes with immediate
/// data to the group's QPN 0xFFFFFF; the receiver ends only once it has polled all 20
/// completions (a datagram lost would keep it waiting past the limit). The sender starts once
/// the receiver's port is in the fabric's multicast registry (mckey then waits 3 s before it
/// sends, for the switches, as it does with rxe). With direct reach on and off: a UD SEND is
/// never reached, so both must go the same.
#[test]
fn mckey_sends_to_a_multicast_group_and_the_receiver_gets_every_datagram() {
    let Some(mckey) = tool("mckey", "mckey", "rdmacm-utils") else { return };
    for reach in ["1", "0"] {
        mckey_pair(&mckey, reach);
    }
}

fn mckey_pair(mckey: &Path, reach: &str) {
    let env = env();
    let args = ["-m", "239.1.2.3", "-b", "127.0.0.1", "-C", "20", "-S", "1000"];
    let spawn = |args: &[&str]| {
        common::Guard(Some(
            env.command(mckey).env("SOFTVERBS_REACH", reach).args(args).spawn().expect("spawn"),
        ))
    };
    let mut receiver = spawn(&args);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !member(&env, "mcast-00000000000000000000ffffef010203.") {
        let exited = receiver.0.as_mut().expect("receiver").try_wait().expect("try_wait");
        assert!(
            exited.is_none() && std::time::Instant::now() < deadline,
            "the receiver never joined ({exited:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sender_args: Vec<&str> = args.iter().copied().chain(["-s"]).collect();
    let sender = common::finish(spawn(&sender_args), Duration::from_secs(30), "mckey sender");
    let receiver = cm::finish_server(receiver, Duration::from_secs(30), "mckey receiver", &sender);
    let ((so, se), (ro, re)) = (text(&sender), text(&receiver));
    assert!(
        sender.status.success() && receiver.status.success(),
        "reach {reach}: sender:\n{so}{se}\nreceiver:\n{ro}{re}"
    );
    let joined = "mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0";
    let receiver_lines = [
        "mckey: starting server",
        "mckey: joining",
        joined,
        "receiving data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
    ];
    cm::assert_lines("receiver", &ro, &receiver_lines);
    let sender_lines = [
        "mckey: starting client",
        "mckey: joining",
        joined,
        "initiating data transfers",
        "data transfers complete",
        "test complete",
        "return status 0",
    ];
    cm::assert_lines("sender", &so, &sender_lines);
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
    assert!(!member(&env, "mcast-"), "a multicast membership was left in the fabric");
}

/// Whether a file of the fabric's directory starts with `prefix` (a multicast membership).
fn member(env: &common::Env, prefix: &str) -> bool {
    std::fs::read_dir(env.fabric.path())
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
}

/// rdma-core's pyverbs loads on softverbs' libraries: its `cmid` module binds
/// `rdma_join_multicast`, `rdma_join_multicast_ex` and `rdma_leave_multicast` when it loads
/// (issue 30), and its device list names the soft devices.
#[test]
fn pyverbs_loads_and_lists_the_soft_devices() {
    let test = "pyverbs_loads_and_lists_the_soft_devices";
    let Some(_) = common::file(test, "/usr/lib/python3/dist-packages/pyverbs", "python3-pyverbs")
    else {
        return;
    };
    let script = "import pyverbs.cmid, pyverbs.device as d; \
                  print(' '.join(x.name.decode() for x in d.get_device_list()))";
    let out = env().run(Path::new("/usr/bin/python3"), &["-c", script], Duration::from_secs(60));
    let (o, e) = text(&out);
    assert!(out.status.success(), "pyverbs did not load:\n{o}{e}");
    assert_eq!(o.trim(), "softverbs0 softverbs1", "{e}");
}

#[test]
fn connect_to_no_listener_is_rejected_with_status_8() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let env = env();
    let p = common::free_port().to_string();
    let out =
        env.run(&rping, &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "1"], Duration::from_secs(30));
    let (o, e) = text(&out);
    assert!(!out.status.success());
    assert!(format!("{o}{e}").contains("cma event RDMA_CM_EVENT_REJECTED, error 8"), "{o}{e}");
}

#[test]
fn an_address_of_no_softverbs_port_is_an_addr_error() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let env = env();
    // A documentation address (TEST-NET-3): nothing is sent anywhere.
    let out = env.run(
        &rping,
        &["-c", "-a", "203.0.113.9", "-p", "7000", "-C", "1"],
        Duration::from_secs(30),
    );
    let (o, e) = text(&out);
    assert!(!out.status.success());
    let all = format!("{o}{e}");
    assert!(
        all.contains("librdmacm (softverbs): 203.0.113.9 is the address of no softverbs port"),
        "{all}"
    );
    assert!(all.contains("cma event RDMA_CM_EVENT_ADDR_ERROR, error -113"), "{all}");
}

/// Run `program server_args` and, once it listens on `port`, `program client_args`; both must
/// exit 0 within 60 s. Returns (server, client) stdout and stderr joined.
fn pair(program: &Path, port: u16, server_args: &[&str], client_args: &[&str]) -> (String, String) {
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env(),
        (program, server_args),
        &format!(":{port}"),
        (program, client_args),
        Duration::from_secs(60),
    );
    (format!("{so}{se}"), format!("{co}{ce}"))
}

#[test]
fn ucmatose_connects_four_rc_ids_and_moves_data() {
    let Some(t) = tool("ucmatose", "ucmatose", "rdmacm-utils") else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (s, c) = pair(&t, port, &["-p", &p, "-c", "4"], &["-s", "127.0.0.1", "-p", &p, "-c", "4"]);
    cm::assert_ucmatose(&s, &c);
}

#[test]
fn udaddy_exchanges_datagrams_over_ud_ids() {
    let Some(t) = tool("udaddy", "udaddy", "rdmacm-utils") else { return };
    // udaddy's port is fixed (7174); each test's fabric is its own CM namespace.
    let (s, c) = pair(&t, 7174, &[], &["-s", "127.0.0.1"]);
    cm::assert_udaddy(&s, &c);
}

/// What perftest's client prints when its own clock calibration fails (get_clock.c: the
/// cycle counter and the wall clock, sampled over short sleeps, correlate below r² 0.9, as on
/// a loaded machine); it then exits 1 ("Can't produce a report") before its last exchange,
/// and its server waits for ever, over rxe too.
const PERFTEST_CLOCK: &str = "Correlation coefficient r^2";

/// perftest `program -R args` between two processes; the client's result rows (lines of at
/// least four numbers), none with a zero figure. A run whose client failed its own clock
/// calibration ([`PERFTEST_CLOCK`]) is run again, on a new port, at most twice.
fn perf(program: &str, args: &[&str]) -> Vec<Vec<f64>> {
    let Some(t) = tool(program, program, "perftest") else { return Vec::new() };
    let (s, c) = (1..=3)
        .find_map(|attempt| {
            let port = common::free_port();
            let p = port.to_string();
            let mut server = vec!["-R", "-p", &p];
            server.extend_from_slice(args);
            let mut client = server.clone();
            client.push("127.0.0.1");
            let gives_up = (attempt < 3).then_some(PERFTEST_CLOCK);
            let ran = cm::run_pair_unless(
                &env(),
                (&t, &server),
                &format!(":{port}"),
                (&t, &client),
                Duration::from_secs(60),
                gives_up,
            );
            if ran.is_none() {
                eprintln!("{program}: perftest could not calibrate its clock (try {attempt} of 3)");
            }
            ran
        })
        .expect("the third run is always kept");
    let ((so, se), (co, ce)) = cm::both_ok(program, &s, &c);
    let (s, c) = (format!("{so}{se}"), format!("{co}{ce}"));
    for bad in ["Couldn't", "failed", "Failed", "error", "Error", "Unable"] {
        assert!(!s.contains(bad) && !c.contains(bad), "{program}: a line says `{bad}`:\n{s}\n{c}");
    }
    let rows: Vec<Vec<f64>> = c
        .lines()
        .filter_map(|l| {
            let n: Option<Vec<f64>> = l.split_whitespace().map(|x| x.parse().ok()).collect();
            n.filter(|n| n.len() >= 4)
        })
        .collect();
    assert!(!rows.is_empty(), "{program}: no result row:\n{c}");
    for r in &rows {
        assert!(r[2..].iter().any(|&x| x > 0.0), "{program}: only zero figures in {r:?}");
    }
    rows
}

#[test]
fn ib_send_bw_over_the_cm() {
    for r in perf("ib_send_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (65536.0, 200.0));
    }
}

#[test]
fn ib_read_bw_over_the_cm() {
    for r in perf("ib_read_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (65536.0, 200.0));
    }
}

#[test]
fn ib_atomic_bw_over_the_cm() {
    for r in perf("ib_atomic_bw", &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (8.0, 200.0));
    }
}

/// The latency tests' rows: 2 bytes, the iteration count, then the latencies in µs.
fn lat(program: &str) {
    for r in perf(program, &["-n", "200"]) {
        assert_eq!((r[0], r[1]), (2.0, 200.0), "{program}: {r:?}");
        assert!(r[2] <= r[3], "{program}: t_min over t_max in {r:?}");
    }
}

#[test]
fn ib_write_lat_over_the_cm() {
    lat("ib_write_lat");
}

#[test]
fn ib_send_lat_over_the_cm() {
    lat("ib_send_lat");
}

#[test]
fn ib_read_lat_over_the_cm() {
    lat("ib_read_lat");
}

/// What [`cm::finish_server`] says of a server that is still running after its client: here
/// `sleep 30` and an `echo` for client.
#[test]
fn a_server_that_does_not_end_is_shown_with_its_stacks_and_its_clients_output() {
    let env = env();
    let server =
        common::Guard(Some(env.command(Path::new("/bin/sleep")).arg("30").spawn().expect("spawn")));
    let client = env.run(Path::new("/bin/echo"), &["the client's line"], Duration::from_secs(10));
    let limit = Duration::from_millis(200);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cm::finish_server(server, limit, "sleep 30", &client)
    }));
    let err = panicked.expect_err("finish_server panics");
    let msg = err.downcast_ref::<String>().expect("a formatted message");
    assert!(msg.starts_with("sleep 30: still running 200ms after its client ended."), "{msg}");
    // gdb's backtrace names the thread as "Thread 1 (...)"; /proc's word as "thread PID (sleep)".
    assert!(msg.contains("Thread 1 ") || msg.contains(" (sleep): state S, waits in "), "{msg}");
    assert!(msg.contains("client exit status: 0, stdout:\nthe client's line\n"), "{msg}");
}

/// What [`cm::run_pair`] says of a client still running past its limit: here `sleep 30` for
/// both; both processes' stacks, and the server's state, are in the message.
#[test]
fn a_client_that_does_not_end_is_shown_with_its_stacks_and_its_servers() {
    let env = env();
    let spawn = || {
        common::Guard(Some(env.command(Path::new("/bin/sleep")).arg("30").spawn().expect("spawn")))
    };
    let (server, client) = (spawn(), spawn());
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cm::client_hung(client, server, Duration::from_millis(200), "sleep 30")
    }));
    let err = panicked.expect_err("client_hung panics");
    let msg = err.downcast_ref::<String>().expect("a formatted message");
    assert!(msg.starts_with("sleep 30: still running after 200ms.\nWhere it waited:\n"), "{msg}");
    assert!(msg.contains("server still running; where it waits:\n"), "{msg}");
    // gdb's backtrace names a thread "Thread 1 (...)"; /proc's word "thread PID (sleep)".
    let stacks = msg.matches("Thread 1 ").count() + msg.matches(" (sleep): state ").count();
    assert_eq!(stacks, 2, "{msg}");
}

/// ucmatose with 100 connections from one client process: the listener's unread
/// CONNECT_REQUESTs and the requester's REQs beyond what its channel socket queues wait (the
/// kernel honours `rdma_listen`'s backlog, 0 taken as its limit of 1024) instead of being
/// rejected; every connection moves its data. (Beyond about 20 pending REQs, each was
/// REJECTED with status 8, or both processes blocked on each other's full socket.)
#[test]
fn ucmatose_connects_100_rc_ids_and_moves_data() {
    let Some(t) = tool("ucmatose", "ucmatose", "rdmacm-utils") else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (s, c) =
        pair(&t, port, &["-p", &p, "-c", "100"], &["-s", "127.0.0.1", "-p", &p, "-c", "100"]);
    cm::assert_ucmatose(&s, &c);
}

/// ucmatose in the port space `RDMA_PS_IB` (`-P ib`, what libfabric's verbs provider uses):
/// RC ids, as `rdma_create_id` makes them there; its ports are not the TCP port space's, so a
/// TCP client to that port is REJECTED with status 8 (the kernel's service IDs differ by port
/// space). (`rdma_create_id` refused the port space.)
#[test]
fn ucmatose_in_the_ib_port_space() {
    let Some(t) = tool("ucmatose", "ucmatose", "rdmacm-utils") else { return };
    let env = env();
    let port = common::free_port();
    let p = port.to_string();
    let ((so, se), (co, ce)) = cm::pair_ok(
        &env,
        (&t, &["-P", "ib", "-p", &p, "-c", "4"]),
        &format!(":{port}.ib"),
        (&t, &["-P", "ib", "-s", "127.0.0.1", "-p", &p, "-c", "4"]),
        Duration::from_secs(60),
    );
    cm::assert_ucmatose(&format!("{so}{se}"), &format!("{co}{ce}"));
    let mut server = common::Guard(Some(
        env.command(&t).args(["-P", "ib", "-p", &p, "-c", "1"]).spawn().expect("spawn"),
    ));
    cm::wait_listening(&env, &format!(":{port}.ib"), &mut server);
    let tcp = env.run(&t, &["-s", "127.0.0.1", "-p", &p, "-c", "1"], Duration::from_secs(30));
    let (o, e) = text(&tcp);
    assert!(o.contains("cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8"), "{o}{e}");
}

/// How many times each perftest `-R` program runs in [`perf_runs`], and how many pairs run at
/// once (perftest spends about 1.8 s of each run measuring the CPU's clock against the wall
/// clock, a wait that overlaps).
const RUNS: usize = 50;
const AT_ONCE: usize = 4;

/// perftest `program -R` [`RUNS`] times, [`AT_ONCE`] pairs at a time, each pair on its own
/// fabric: both connections of every run are made (the second REQ may come while the server
/// is between its two listens, and waits for its next one), every run reports rows of `want`
/// (bytes, iterations), and none hangs (each pair bounded as [`pair`] is).
///
/// `.ci/run` runs the workspace's tests twice (plain, then with the rdma-sys feature, which
/// changes nothing here): its second pass sets `SOFTVERBS_SKIP_LONG_RUNS=1`, and these
/// runs (about 200 s on a loaded machine) are then skipped with a note, so CI pays once.
fn perf_runs(program: &str, want: (f64, f64)) {
    if std::env::var_os("SOFTVERBS_SKIP_LONG_RUNS").is_some_and(|v| v == "1") {
        eprintln!("{program} -R, {RUNS} runs: skipped (SOFTVERBS_SKIP_LONG_RUNS=1: .ci/run's second pass)");
        return;
    }
    if tool(program, program, "perftest").is_none() {
        return;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..AT_ONCE {
            s.spawn(|| {
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < RUNS {
                    for r in perf(program, &["-n", "20"]) {
                        assert_eq!((r[0], r[1]), want, "{program}: {r:?}");
                    }
                }
            });
        }
    });
}

#[test]
fn ib_send_bw_over_the_cm_50_runs() {
    perf_runs("ib_send_bw", (65536.0, 20.0));
}

#[test]
fn ib_read_bw_over_the_cm_50_runs() {
    perf_runs("ib_read_bw", (65536.0, 20.0));
}

#[test]
fn ib_write_lat_over_the_cm_50_runs() {
    perf_runs("ib_write_lat", (2.0, 20.0));
}

/// What [`perf`] does with a client that failed perftest's own clock calibration: the run
/// ends as soon as the client does, its server (here an rping server, which would wait for
/// ever) killed, and says so with None, so that `perf` runs it again. Without the give-up,
/// `finish_server` would wait 60 s for that server and panic.
#[test]
fn a_client_that_failed_perftests_clock_calibration_ends_its_run() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let p = common::free_port().to_string();
    let says = format!(
        "echo '{PERFTEST_CLOCK}: 0.83 < 0.9' >&2; echo \"Can't produce a report\" >&2; exit 1"
    );
    let ran = cm::run_pair_unless(
        &env(),
        (&rping, &["-s", "-p", &p]),
        &format!(":{p}"),
        (Path::new("/bin/sh"), &["-c", &says]),
        Duration::from_secs(60),
        Some(PERFTEST_CLOCK),
    );
    assert!(ran.is_none(), "the run was kept: {ran:?}");
}
