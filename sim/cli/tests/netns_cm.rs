//! The connection manager across hosts (issue 31 item 3): librdmacm's programs between two
//! network namespaces joined by a veth pair, each a "host" with its own address, its own
//! fabric directory (nothing shared but the wire) and its device on its interface. `rping`
//! with every ping's bytes checked and the CM's messages captured and decoded by tshark as
//! InfiniBand CM MADs on QP1 (REQ, REP, RTU, DREQ, DREP) with no malformed frame; `ucmatose`;
//! `udaddy` (UD ids: SIDR); perftest's `ib_write_bw -R`; a connect to a port nobody listens on is REJECTED.
//!
//! As sim/cli/tests/netns.rs (whose helpers these follow): root is needed, a test without it
//! says why it skips (`SOFTVERBS_REQUIRE_NETNS=1`, as CI sets, makes that a failure), every
//! namespace is removed and every process killed when a test ends, failed or not.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::BIN;

/// Bound on one program (a debug build on a loaded machine).
const LIMIT: Duration = Duration::from_secs(90);

fn may_make_hosts(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|v| v.split_whitespace().nth(1) == Some("0"))
    });
    let ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    let why = match (root, ip) {
        (true, true) => return true,
        (false, _) => "not root (network namespaces need CAP_SYS_ADMIN)",
        (true, false) => "`ip` is not installed (apt-get install iproute2)",
    };
    if std::env::var("SOFTVERBS_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("SOFTVERBS_REQUIRE_NETNS=1 but {test} cannot run: {why}");
    }
    eprintln!("{test}: skipped: {why} (SOFTVERBS_REQUIRE_NETNS=1 makes this an error)");
    false
}

fn have(test: &str, tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    if !found {
        if std::env::var("SOFTVERBS_REQUIRE_C").as_deref() == Ok("1") {
            panic!("SOFTVERBS_REQUIRE_C=1 but {tool} is not on PATH");
        }
        eprintln!("{test}: skipped: {tool} is not on PATH");
    }
    found
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two hosts: namespaces joined by a veth pair, 10.232.0.1 and 10.232.0.2, each with a
/// fabric directory of its own; removed when dropped.
struct Hosts {
    ns: [String; 2],
    iface: [String; 2],
    fabric: [tempfile::TempDir; 2],
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Hosts {
    fn new() -> Hosts {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag =
            format!("{}{}", std::process::id() % 100_000, SEQ.fetch_add(1, Ordering::Relaxed));
        let ns = [format!("svcm{tag}a"), format!("svcm{tag}b")];
        let iface = [format!("svc{tag}a"), format!("svc{tag}b")];
        let fabric = [tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir")];
        ip(&["netns", "add", &ns[0]]);
        let h = Hosts { ns, iface, fabric };
        ip(&["netns", "add", &h.ns[1]]);
        let (a, b) = (&h.ns, &h.iface);
        ip(&[
            "link", "add", &b[0], "netns", &a[0], "type", "veth", "peer", "name", &b[1], "netns",
            &a[1],
        ]);
        for i in 0..2 {
            ip(&["-n", &a[i], "link", "set", "lo", "up"]);
            ip(&["-n", &a[i], "addr", "add", &format!("{}/24", h.addr(i)), "dev", &b[i]]);
            ip(&["-n", &a[i], "link", "set", &b[i], "up"]);
        }
        h
    }

    fn addr(&self, i: usize) -> String {
        format!("10.232.0.{}", i + 1)
    }

    /// A C program on softverbs' libraries in host `i` (`softverbs run --netdev`).
    fn run(&self, i: usize, program: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], BIN, "run", "--netdev", &self.iface[i], "--"]);
        c.args(program);
        c.env_remove("RUST_LOG").env_remove("SOFTVERBS_FAULTS").env_remove("SOFTVERBS_NETDEV");
        c.env("SOFTVERBS_FABRIC", self.fabric[i].path());
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// What the CM left in host `i`'s fabric directory (nothing, once its programs ended).
    fn cm_leftovers(&self, i: usize) -> Vec<PathBuf> {
        let dir = self.fabric[i].path().join("cm");
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect()
    }
}

/// A process killed and reaped when dropped.
struct Proc(Option<Child>, String);

impl Proc {
    fn spawn(mut c: Command, what: &str) -> Proc {
        Proc(Some(c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"))), what.to_string())
    }

    fn finish(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let mut c = self.0.take().expect("child");
        loop {
            if c.try_wait().expect("try_wait").is_some() {
                return c.wait_with_output().expect("output");
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let out = c.wait_with_output().expect("output");
                panic!("{}: still running after {limit:?}:\n{}", self.1, text(&out));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().expect("child").id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A server on host 0, then, once it listens on `port` (its name is in host 0's CM
/// directory), a client on host 1; both must exit 0. Returns their (stdout, stderr) each.
fn pair(h: &Hosts, port: u16, server: &[&str], client: &[&str], what: &str) -> (Texts, Texts) {
    let server = Proc::spawn(h.run(0, server), &format!("{what} server"));
    let suffix = format!(":{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.cm_leftovers(0).iter().any(|p| p.to_string_lossy().ends_with(&suffix)) {
        assert!(Instant::now() < deadline, "{what}: the server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = Proc::spawn(h.run(1, client), &format!("{what} client")).finish(LIMIT);
    let server = server.finish(LIMIT);
    let texts = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (s, c) = (texts(&server), texts(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{what}:\nserver:\n{}{}\nclient:\n{}{}",
        s.0,
        s.1,
        c.0,
        c.1
    );
    (s, c)
}

/// A program's stdout and stderr.
type Texts = (String, String);

/// rping's ping `n` (rping.c: "rdma-ping-%d: " then letters from 'A' + n % 58 to 63 bytes).
fn ping_text(n: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = 65 + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c == 122 { 65 } else { c + 1 };
    }
    s
}

/// A tshark capture of host `i`'s interface, stopped when dropped or by `stop`.
struct Capture {
    proc: Proc,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    fn start(h: &Hosts, i: usize) -> Capture {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cm.pcap");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &h.ns[i], "tshark", "-q", "-i", &h.iface[i], "-F", "pcap", "-w"]);
        c.arg(&file).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let proc = Proc::spawn(c, "tshark");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&file).map_or(0, |m| m.len()) < 24 {
            assert!(Instant::now() < deadline, "tshark did not start capturing");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        Capture { proc, file, _dir: dir }
    }

    fn stop(&mut self) -> &Path {
        std::thread::sleep(Duration::from_secs(1));
        let _ = Command::new("kill").args(["-INT", &self.proc.pid().to_string()]).output();
        let deadline = Instant::now() + Duration::from_secs(20);
        let c = self.proc.0.as_mut().expect("tshark");
        while c.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < deadline, "tshark did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        &self.file
    }
}

/// The CM MADs tshark finds in `pcap` (`dst_qp<TAB>qkey<TAB>attribute<TAB>info` per frame),
/// none malformed.
fn cm_mads(pcap: &Path) -> Vec<Vec<String>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["--disable-protocol", "rpcordma", "--disable-protocol", "nvme-rdma"])
        .args(["--disable-protocol", "smb_direct", "--disable-protocol", "iser"])
        .args(["-Y", "infiniband.mad || _ws.malformed", "-T", "fields"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.deth.q_key"])
        .args(["-e", "infiniband.mad.attributeid", "-e", "_ws.col.Info", "-e", "_ws.malformed"])
        .output()
        .expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<String>> =
        t.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect();
    for r in &rows {
        assert_eq!(r.get(4).map(String::as_str), Some(""), "a malformed frame:\n{t}");
    }
    rows
}

#[test]
fn rping_runs_across_two_hosts_with_its_cm_as_infiniband_cm_mads() {
    let test = "rping_runs_across_two_hosts_with_its_cm_as_infiniband_cm_mads";
    if !may_make_hosts(test) || !have(test, "rping") || !have(test, "tshark") {
        return;
    }
    let h = Hosts::new();
    let mut cap = Capture::start(&h, 0);
    let a = h.addr(0);
    let ((so, _), (co, ce)) = pair(
        &h,
        7174,
        &["rping", "-s", "-a", &a, "-C", "100", "-v"],
        &["rping", "-c", "-a", &a, "-C", "100", "-v"],
        "rping",
    );
    // Every ping's bytes, as each side printed them.
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", ping_text(n))).collect();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "client output; stderr: {ce}");
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", ping_text(n))).collect();
    assert_eq!(so.lines().collect::<Vec<_>>(), want, "server output");
    let file = cap.stop().to_path_buf();
    let mads = cm_mads(&file);
    let attrs: Vec<&str> = mads.iter().map(|r| r[2].as_str()).collect();
    for r in &mads {
        assert_eq!(
            (r[0].as_str(), r[1].as_str()),
            ("0x000001", "0x0000000080010000"),
            "to QP1 with the GSI Q_Key: {r:?}"
        );
    }
    // REQ, REP, RTU in order; then a DREQ and its DREP.
    assert_eq!(&attrs[..3], ["0x0010", "0x0013", "0x0014"], "{mads:?}");
    assert!(
        mads[0][3].contains("ConnectRequest") && mads[1][3].contains("ConnectReply"),
        "{mads:?}"
    );
    assert!(attrs.contains(&"0x0015") && attrs.contains(&"0x0016"), "DREQ and DREP: {mads:?}");
    for i in 0..2 {
        assert!(h.cm_leftovers(i).is_empty(), "host {i}'s CM left {:?}", h.cm_leftovers(i));
    }
}

#[test]
fn ucmatose_udaddy_and_perftest_connect_across_two_hosts() {
    let test = "ucmatose_udaddy_and_perftest_connect_across_two_hosts";
    if !may_make_hosts(test) || !have(test, "ucmatose") || !have(test, "ib_write_bw") {
        return;
    }
    let h = Hosts::new();
    let a = h.addr(0);
    let ((so, _), (co, _)) =
        pair(&h, 7471, &["ucmatose", "-C", "20"], &["ucmatose", "-s", &a, "-C", "20"], "ucmatose");
    for out in [&so, &co] {
        assert!(
            out.contains("data transfers complete") && out.contains("return status 0"),
            "{out}"
        );
    }
    // UD ids: SIDR_REQ and SIDR_REP on the wire, then datagrams to the QP and Q_Key they gave.
    let ((so, _), (co, _)) = pair(&h, 7174, &["udaddy"], &["udaddy", "-s", &a], "udaddy");
    assert!(so.contains("sending replies") && so.contains("return status 0"), "{so}");
    assert!(co.contains("receiving data transfers") && co.contains("return status 0"), "{co}");
    let ((so, _), (co, _)) = pair(
        &h,
        18515,
        &["ib_write_bw", "-R", "-n", "100", "-s", "65536"],
        &["ib_write_bw", "-R", "-n", "100", "-s", "65536", &a],
        "ib_write_bw -R",
    );
    for out in [&so, &co] {
        assert!(out.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:232:00:0"), "{out}");
        let row = |l: &str| l.split_whitespace().take(2).eq(["65536", "100"]);
        assert!(out.lines().any(row), "the bandwidth row: {out}");
    }
}

#[test]
fn a_connect_to_a_port_nobody_listens_on_across_hosts_is_rejected() {
    let test = "a_connect_to_a_port_nobody_listens_on_across_hosts_is_rejected";
    if !may_make_hosts(test) || !have(test, "rping") {
        return;
    }
    let h = Hosts::new();
    // Host 0 has a device on its interface (a CM to answer) but nothing listens on 7999.
    let mut idle = h.run(0, &["rping", "-s", "-a", &h.addr(0), "-p", "7998", "-C", "1"]);
    idle.stdout(Stdio::null());
    let _server = Proc::spawn(idle, "idle rping server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.cm_leftovers(0).iter().any(|p| p.to_string_lossy().ends_with(":7998")) {
        assert!(Instant::now() < deadline, "the idle server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Proc::spawn(
        h.run(1, &["rping", "-c", "-a", &h.addr(0), "-p", "7999", "-C", "1"]),
        "rping client",
    )
    .finish(LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("REJECTED") || t.contains("reject"), "the client was rejected: {t}");
}
