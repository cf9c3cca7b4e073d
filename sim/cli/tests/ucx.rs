//! The software that finds RDMA devices through `/dev/infiniband` and sysfs, run as its users
//! run it, through `softverbs run`: the device nodes and sysfs entries `softverbs run` shows
//! the program (as root and, where the machine lets a user make namespaces, as `nobody`), and
//! the host's `/dev` and `/sys` untouched; UCX's `ucx_info -d` listing the soft devices with
//! the rc and ud transports; `ucx_perftest` between two processes over `UCX_TLS=rc,self` and
//! `ud_verbs,self`. Needs the softverbs-ibverbs library (`cargo test --workspace` builds it)
//! and Debian's ucx-utils: without them each test says so and skips, unless
//! `SOFTVERBS_REQUIRE_C=1`, which makes that a failure. Every wait is bounded and every process
//! started is killed when a test fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

fn required() -> bool {
    std::env::var("SOFTVERBS_REQUIRE_C").as_deref() == Ok("1")
}

/// Whether `test` can run: the library is built and `tools` are on PATH; else None after a
/// note on stderr (a panic under `SOFTVERBS_REQUIRE_C=1`).
fn ready(test: &str, tools: &[(&str, &str)]) -> Option<()> {
    let dir = Path::new(BIN).parent().expect("target/<profile>");
    let lib = ["libsoftverbs_ibverbs.so", "deps/libsoftverbs_ibverbs.so"]
        .iter()
        .any(|f| dir.join(f).is_file());
    let mut missing = Vec::new();
    if !lib {
        missing
            .push("libsoftverbs_ibverbs.so is not built (cargo build -p softverbs-ibverbs)".into());
    }
    for (tool, package) in tools {
        if which(tool).is_none() {
            missing.push(format!("{tool} is not on PATH (apt-get install {package})"));
        }
    }
    if missing.is_empty() {
        return namespaces(test);
    }
    let missing = missing.join("; ");
    assert!(!required(), "SOFTVERBS_REQUIRE_C=1 but {missing}");
    eprintln!("{test}: skipped: {missing} (SOFTVERBS_REQUIRE_C=1 makes this an error)");
    None
}

/// Whether `softverbs run` can make its namespace here; if not (user namespaces disabled, or a
/// container without them), None after a note: what `softverbs run` then does (run the
/// program, warned, without the entries) is all there is to see.
fn namespaces(test: &str) -> Option<()> {
    let f = fabric();
    let out = run(f.path(), &["true"], &[], Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "softverbs run -- true:\n{}", show(&out));
    if stderr.contains("no namespace of its own") {
        eprintln!("{test}: skipped: softverbs run can make no namespace here: {stderr}");
        return None;
    }
    Some(())
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|f| f.is_file())
}

/// A fabric directory of the test's own (private, as softverbs requires), removed at the end.
fn fabric() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new().prefix("softverbs-ucx-test-").tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

/// `softverbs run --fabric DIR -- args...` with piped output and the given environment.
fn run_cmd(fabric: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run").arg("--fabric").arg(fabric).arg("--").args(args);
    c.envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// A child killed and reaped when dropped.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The child's output once it ends, within `limit`; killed and a panic past that.
fn finish(mut g: Guard, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    let mut c = g.0.take().expect("child");
    loop {
        if c.try_wait().expect("try_wait").is_some() {
            return c.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let out = c.wait_with_output().expect("output");
            panic!("{what}: still running after {limit:?}\n{}", show(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Run `softverbs run -- args` to the end within `limit`.
fn run(fabric: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let child = run_cmd(fabric, args, env).spawn().expect("spawn softverbs run");
    finish(Guard(Some(child)), limit, &args.join(" "))
}

/// What a program sees through `softverbs run`, printed by a shell: the node's file type, the
/// sysfs attributes UCX, pyverbs and NCCL read.
const LOOK: &str = "stat -c %F /dev/infiniband/uverbs0 /dev/infiniband/uverbs1; \
     test -r /dev/infiniband/uverbs0 && test -w /dev/infiniband/uverbs0 && echo rw; \
     p=/sys/class/infiniband/softverbs1/ports/1; \
     cat $p/state $p/phys_state $p/rate $p/link_layer $p/gid_attrs/types/1 $p/gid_attrs/ndevs/1 \
         /sys/class/infiniband_verbs/uverbs1/ibdev; \
     ls /sys/class/infiniband/softverbs0/device/net/; ls /sys/class/net/lo/ >/dev/null && echo net; \
     ls /dev/shm >/dev/null && ls /sys/class/infiniband/ && id -u";

fn check_look(out: &Output, uid: u32, who: &str) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{who}: {}", show(out));
    let want = [
        "character special file",
        "character special file",
        "rw",
        "4: ACTIVE",
        "5: LinkUp",
        "100 Gb/sec (4X EDR)",
        "Ethernet",
        "RoCE v2",
        "lo",
        "softverbs1",
        "lo",
        "net",
        "softverbs0",
        "softverbs1",
    ];
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.pop(), Some(uid.to_string().as_str()), "{who}: the program's uid\n{text}");
    assert_eq!(lines, want, "{who}: what the program sees\n{}", show(out));
}

/// `softverbs run` shows the program the device nodes and sysfs of the soft devices, as root
/// and (where this machine lets a user make a user namespace) as `nobody`; the host's `/dev`
/// and `/sys` are as they were after.
#[test]
fn softverbs_run_shows_device_nodes_and_sysfs_to_the_program_alone() {
    let test = "softverbs_run_shows_device_nodes_and_sysfs_to_the_program_alone";
    let Some(()) = ready(test, &[]) else { return };
    let before =
        (Path::new("/dev/infiniband").exists(), Path::new("/sys/class/infiniband").exists());
    let f = fabric();
    let out = run(f.path(), &["sh", "-c", LOOK], &[], Duration::from_secs(30));
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    check_look(&out, uid, "the caller");
    assert_eq!(
        (Path::new("/dev/infiniband").exists(), Path::new("/sys/class/infiniband").exists()),
        before,
        "the host's /dev and /sys changed"
    );
    // Off, the program sees the host's view.
    let off = run(
        f.path(),
        &["sh", "-c", "test -e /sys/class/infiniband/softverbs0 && echo shown || echo absent"],
        &[("SOFTVERBS_NAMESPACE", "off")],
        Duration::from_secs(30),
    );
    assert_eq!(String::from_utf8_lossy(&off.stdout).trim(), "absent", "{}", show(&off));
    disabled_namespaces_warn_and_run_the_program(test, f.path());
    if uid != 0 {
        return;
    }
    // As a user without privileges: `nobody`, through setpriv, if it may run the binary here.
    let Some(setpriv) = which("setpriv") else {
        eprintln!("{test}: the non-root half skipped: no setpriv (util-linux)");
        return;
    };
    let nobody = |args: &[&str]| {
        let mut c = Command::new(&setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]).args(args);
        c.env_remove("SOFTVERBS_LOG").stdin(Stdio::null());
        c
    };
    let can = nobody(&["--version"]).output().expect("setpriv");
    if !can.status.success() {
        eprintln!("{test}: the non-root half skipped: nobody cannot run {BIN} here");
        return;
    }
    let mut c = nobody(&["run", "--", "sh", "-c", LOOK]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = finish(Guard(Some(c.spawn().expect("spawn"))), Duration::from_secs(30), "nobody");
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|n| n.trim() != "0");
    if String::from_utf8_lossy(&out.stderr).contains("no namespace of its own") {
        // User namespaces are off: the program runs, warned, without the entries.
        assert!(
            !userns,
            "a namespace was refused though max_user_namespaces allows them\n{}",
            show(&out)
        );
        eprintln!("{test}: user namespaces are disabled here; the warning was given");
        return;
    }
    check_look(&out, 65534, "nobody");
}

/// Where no namespace can be made, `softverbs run` still runs the program, as before issue 30,
/// after a warning naming why: shown in a user namespace of the test's own whose
/// `max_user_namespaces` is 0, with CAP_SYS_ADMIN dropped (so neither a mount namespace alone
/// nor a user namespace can be made). Skipped (with a note) where the test cannot make that
/// user namespace.
fn disabled_namespaces_warn_and_run_the_program(test: &str, fabric: &Path) {
    let (Some(unshare), Some(_)) = (which("unshare"), which("setpriv")) else {
        eprintln!("{test}: the disabled-namespace half skipped: no unshare or setpriv");
        return;
    };
    let inner = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-sys_admin \
         {BIN} run --fabric {} -- sh -c 'test -e /dev/infiniband/uverbs0 && echo shown || echo \
         absent'",
        fabric.display()
    );
    let mut c = Command::new(unshare);
    c.args(["-U", "-r", "sh", "-c", &inner]).stdin(Stdio::null());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = finish(Guard(Some(c.spawn().expect("spawn"))), Duration::from_secs(30), "unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("unshare failed") || stderr.contains("Permission denied") {
        eprintln!("{test}: the disabled-namespace half skipped: {stderr}");
        return;
    }
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "absent", "{}", show(&out));
    assert!(stderr.contains("warning: no namespace of its own can be made"), "{}", show(&out));
    assert!(stderr.contains("user namespaces are disabled"), "{}", show(&out));
}

/// `ucx_info -d` through `softverbs run` lists each soft device as a memory domain with the
/// rc_verbs and ud_verbs transports on its port 1.
#[test]
fn ucx_info_lists_the_soft_devices_with_rc_and_ud() {
    let test = "ucx_info_lists_the_soft_devices_with_rc_and_ud";
    let Some(()) = ready(test, &[("ucx_info", "ucx-utils")]) else { return };
    let f = fabric();
    let out = run(f.path(), &["ucx_info", "-d"], &[], Duration::from_secs(60));
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for dev in ["softverbs0", "softverbs1"] {
        let section: Vec<&str> = text
            .split("# Memory domain: ")
            .filter(|s| s.starts_with(&format!("{dev}\n")))
            .collect();
        assert_eq!(section.len(), 1, "{dev} is listed once as a memory domain\n{}", show(&out));
        for tl in ["rc_verbs", "ud_verbs"] {
            let found = section[0].split("#      Transport: ").any(|t| {
                t.starts_with(&format!("{tl}\n")) && t.contains(&format!("Device: {dev}:1\n"))
            });
            assert!(found, "{dev}: no {tl} transport on {dev}:1\n{}", section[0]);
        }
    }
}

/// `ucx_perftest` between two processes, each through `softverbs run`, over `UCX_TLS=rc,self`
/// and `ud_verbs,self`: tag matching latency, PUT bandwidth and GET, 1000 iterations of 4 KiB
/// each; both exit 0 and the client reports all 1000 iterations. (ucx_perftest checks no
/// payload; the MPI and pyverbs runs do.) RC also with direct reach off (`SOFTVERBS_REACH=0`):
/// the same outcome (UD has no one-sided operations for reach to take).
#[test]
fn ucx_perftest_runs_over_rc_and_ud() {
    let test = "ucx_perftest_runs_over_rc_and_ud";
    let Some(()) = ready(test, &[("ucx_perftest", "ucx-utils")]) else { return };
    let f = fabric();
    for (tls, reach) in [("rc,self", "on"), ("ud_verbs,self", "on"), ("rc,self", "off")] {
        for t in ["tag_lat", "ucp_put_bw", "ucp_get"] {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
                .to_string();
            let env =
                [("UCX_TLS", tls), ("UCX_NET_DEVICES", "softverbs0:1"), ("SOFTVERBS_REACH", reach)];
            let what = format!("UCX_TLS={tls} SOFTVERBS_REACH={reach} ucx_perftest -t {t}");
            let server = run_cmd(f.path(), &["ucx_perftest", "-p", &port], &env)
                .spawn()
                .expect("spawn server");
            let server = Guard(Some(server));
            // The client retries while the server is not yet listening.
            let start = Instant::now();
            let client = loop {
                std::thread::sleep(Duration::from_millis(300));
                let args =
                    ["ucx_perftest", "-p", &port, "127.0.0.1", "-t", t, "-n", "1000", "-s", "4096"];
                let out = run(f.path(), &args, &env, Duration::from_secs(90));
                let refused = String::from_utf8_lossy(&out.stderr).contains("Connection refused");
                if !refused || start.elapsed() > Duration::from_secs(10) {
                    break out;
                }
            };
            let server = finish(server, Duration::from_secs(30), &what);
            assert!(client.status.success(), "{what}: client\n{}", show(&client));
            assert!(server.status.success(), "{what}: server\n{}", show(&server));
            let text = String::from_utf8_lossy(&client.stdout);
            let fin = text.lines().find(|l| l.starts_with("Final:")).unwrap_or_else(|| {
                panic!("{what}: no Final line\n{}", show(&client));
            });
            let iters: Vec<&str> = fin.split_whitespace().collect();
            assert_eq!(iters.get(1), Some(&"1000"), "{what}: {fin}");
        }
    }
}

/// Open MPI over UCX (`--mca pml ucx`) on the soft devices, as its users launch it (`mpirun`
/// through `softverbs run`, 4 ranks on two cores: `--oversubscribe`; root needs
/// `--allow-run-as-root`): tests/c/mpi_check.c's ping-pong between ranks 0 and 1 (1 B to
/// 1 MiB, 200 round trips each, every byte checked on both sides) and a 4-rank allreduce of
/// 100 000 longs (every element checked), over `UCX_TLS=rc,self` (direct reach on and off:
/// the same outcome) and over `ud_verbs,self`; mpirun exits 0, no rank reports an error, and
/// no rank outlives it.
#[test]
fn open_mpi_over_ucx_pingpong_and_allreduce_on_rc_and_ud() {
    let test = "open_mpi_over_ucx_pingpong_and_allreduce_on_rc_and_ud";
    let tools = [("mpicc", "libopenmpi-dev"), ("mpirun", "openmpi-bin")];
    let Some(()) = ready(test, &tools) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("mpi_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
    let cc = Command::new("mpicc").arg("-Wall").arg("-o").arg(&exe).arg(&src).output();
    let cc = cc.expect("mpicc");
    assert!(cc.status.success(), "mpicc:\n{}", show(&cc));
    let exe = exe.to_str().expect("UTF-8 path");
    let f = fabric();
    for (tls, reach) in [("rc,self", "on"), ("rc,self", "off"), ("ud_verbs,self", "on")] {
        let tls_arg = format!("UCX_TLS={tls}");
        let args = [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "4",
            "--mca",
            "pml",
            "ucx",
            "--mca",
            "btl",
            "self",
            "-x",
            &tls_arg,
            "-x",
            "UCX_NET_DEVICES=softverbs0:1",
            exe,
        ];
        let out = run(f.path(), &args, &[("SOFTVERBS_REACH", reach)], Duration::from_secs(120));
        let what = format!("mpirun -np 4 over {tls}, SOFTVERBS_REACH={reach}");
        assert!(out.status.success(), "{what}:\n{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines, ["pingpong ok 200", "allreduce ok 4"], "{what}:\n{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        for bad in ["ERROR", "rror:", "Segmentation", "abort", "signal"] {
            assert!(!stderr.contains(bad), "{what}: {bad:?} on stderr:\n{}", show(&out));
        }
        let left = Command::new("pgrep").arg("-f").arg(exe).output().expect("pgrep");
        assert!(left.stdout.is_empty(), "{what}: ranks left running: {:?}", left.stdout);
    }
}

/// `fi_pingpong -p PROVIDER -e EP -I 50 -c` (data integrity checks on) between a server and a
/// client, each through `softverbs run` with `env`, with control ports of their own: both exit
/// 0, nothing on stderr, and the client prints a row per size (64 B to 1 MiB; a datagram
/// endpoint: to 4 KiB) with 50 sent and 50 acknowledged.
/// [`fi_pingpong_once`], run again (at most twice) when the rdm client's only fault was a
/// flushed completion at teardown after every size had passed. That flush is libfabric 1.17's own, not
/// the NIC's: when the peer disconnects, rxm's CM thread closes the connection's msg endpoint
/// (`rxm_close_conn`: `fi_close`, and only then `rxm_flush_msg_cq`), and the verbs provider's
/// `vrb_ep_close` reports every send or receive whose completion is still unread in the CQ as
/// `IBV_WC_WR_FLUSH_ERR` (`vrb_flush_sq`, `vrb_flush_rq`): a completion the main thread had
/// not read yet when the peer's DREQ was handled (the client's last "fin" send, acknowledged by
/// the peer, is one) comes back flushed. In the failing runs watched with
/// `SOFTVERBS_LOG=nic_model::engine::qp=debug` the client's QP never left RTS and the engine
/// flushed nothing; upstream commit 697688386 drains the CQ first. rxe goes through the same
/// code. 7 of 90 runs failed so here (two cores shared by several test runs), 0 of 16 on an
/// idle or a busy machine alone, and one CI run, beside the other tests, met it twice in a
/// row. Any other failure, or the same one three times, fails the test.
fn fi_pingpong(fabric: &Path, provider: &str, ep: &str, env: &[(&str, &str)]) {
    for attempt in 1..=3 {
        let run = std::panic::catch_unwind(|| fi_pingpong_once(fabric, provider, ep, env));
        let Err(e) = run else { return };
        let msg = e
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| e.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let teardown = ep == "rdm"
            && msg.contains("cq_readerr: Work Request Flushed Error")
            && msg.contains("\n1m      50      =50");
        if !teardown || attempt == 3 {
            std::panic::resume_unwind(e);
        }
        eprintln!(
            "fi_pingpong rdm: libfabric 1.17's flush at teardown (run {attempt}), again:\n{msg}"
        );
    }
}

fn fi_pingpong_once(fabric: &Path, provider: &str, ep: &str, env: &[(&str, &str)]) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let common = ["fi_pingpong", "-p", provider, "-e", ep, "-I", "50", "-c"];
    let what = format!("fi_pingpong -p '{provider}' -e {ep} with {env:?}");
    let mut server_args = common.to_vec();
    server_args.extend(["-B", &port]);
    let server = Guard(Some(run_cmd(fabric, &server_args, env).spawn().expect("spawn server")));
    let start = Instant::now();
    let mut client_args = common.to_vec();
    client_args.extend(["-P", &port, "127.0.0.1"]);
    let client = loop {
        std::thread::sleep(Duration::from_millis(300));
        let out = run(fabric, &client_args, env, Duration::from_secs(60));
        let refused = String::from_utf8_lossy(&out.stderr).contains("Connection refused");
        if !refused || start.elapsed() > Duration::from_secs(10) {
            break out;
        }
    };
    let server = finish(server, Duration::from_secs(30), &what);
    assert!(server.status.success(), "{what}: server\n{}", show(&server));
    assert!(client.status.success(), "{what}: client\n{}", show(&client));
    for (who, out) in [("server", &server), ("client", &client)] {
        assert!(out.stderr.is_empty(), "{what}: {who} wrote to stderr\n{}", show(out));
    }
    let text = String::from_utf8_lossy(&client.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("bytes"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let sizes: Vec<&str> = rows.iter().filter_map(|r| r.first().copied()).collect();
    let want: &[&str] = match ep {
        "dgram" => &["64", "256", "1k", "4k"],
        _ => &["64", "256", "1k", "4k", "64k", "1m"],
    };
    assert_eq!(sizes, want, "{what}:\n{}", show(&client));
    for r in &rows {
        assert_eq!((r.get(1), r.get(2)), (Some(&"50"), Some(&"=50")), "{what}: {r:?}");
    }
}

/// libfabric's verbs provider on the soft devices, each payload checked by fi_pingpong: over a
/// datagram endpoint (UD), over a msg endpoint (RC, connected through librdmacm: a synchronous
/// id migrated to the event queue's channel, `RDMA_MAX_RESP_RES`), and over `verbs;ofi_rxm` rdm
/// (rxm's connections over msg endpoints, its listener named by the loopback address it bound;
/// eager, segmented and rendezvous (RDMA READ) sizes). msg and rdm run with direct reach on
/// and off, with the same outcome. rxm sizes its completion queue as (rx + tx queue size) x
/// `FI_UNIVERSE_SIZE` (256 by default: 262 144 entries) without looking at the device's
/// `max_cqe` (65 536 here, 32 767 on rxe; libfabric issue 10692), so the rdm runs set
/// `FI_UNIVERSE_SIZE=64`, as they would on rxe. And they set `FI_OFI_RXM_USE_SRX=1`: 1.17's
/// rxm closes a connection's endpoint before it drains the completions still queued for it,
/// and reposts a receive buffer from one of them onto the closed endpoint (libfabric commit
/// 697688386, "fix the msg_ep use-after-free at connection teardown"); when the peer's
/// disconnect is handled before the last receive completion is read, the process dies of
/// SIGSEGV after the run (4 of about 25 runs here, under load). With a shared receive
/// context the buffer goes back to it instead.
#[test]
fn fi_pingpong_over_libfabrics_verbs_provider() {
    let test = "fi_pingpong_over_libfabrics_verbs_provider";
    let Some(()) = ready(test, &[("fi_pingpong", "libfabric-bin")]) else { return };
    let f = fabric();
    fi_pingpong(f.path(), "verbs", "dgram", &[]);
    for reach in ["on", "off"] {
        let env = [("SOFTVERBS_REACH", reach)];
        fi_pingpong(f.path(), "verbs", "msg", &env);
        let env =
            [("SOFTVERBS_REACH", reach), ("FI_UNIVERSE_SIZE", "64"), ("FI_OFI_RXM_USE_SRX", "1")];
        fi_pingpong(f.path(), "verbs;ofi_rxm", "rdm", &env);
    }
}
