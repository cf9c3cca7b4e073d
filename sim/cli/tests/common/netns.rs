//! Hosts made of network namespaces (issue 31), shared by netns.rs, netns_cm.rs,
//! netns_cm6.rs, netns_v6.rs and netns_apps.rs: namespaces joined by a veth pair (or a
//! bridge), each a "host" with its own interface, IPv4 addresses (IPv6 ones on request) and
//! fabric directory (nothing shared but the wire); processes killed and reaped when dropped; a
//! tshark capture of an interface and its decoding; rping's ping texts.
//!
//! Namespaces need root: without it each test says why it skips, and with
//! `SOFTVERBS_REQUIRE_NETNS=1` (as CI sets) that is a failure. Every namespace is removed when
//! its test ends, failed or not (a guard's drop), and every process is killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::BIN;

/// Bound on one program (a debug build on a loaded machine).
pub const LIMIT: Duration = Duration::from_secs(90);

/// Whether this process may make network namespaces (root, with `ip`); otherwise says on
/// stderr why `test` skips, or panics with `SOFTVERBS_REQUIRE_NETNS=1`.
pub fn may_make_hosts(test: &str) -> bool {
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

/// Whether a tool is installed; otherwise a skip, or a failure with SOFTVERBS_REQUIRE_C=1.
pub fn have(test: &str, tool: &str) -> bool {
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

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One host: its namespace, interface, IPv4 addresses and fabric directory.
pub struct Host {
    pub ns: String,
    pub iface: String,
    pub addrs: Vec<String>,
    pub fabric: tempfile::TempDir,
}

/// Hosts: network namespaces, each with one interface and its IPv4 addresses, removed (with
/// their interfaces) when dropped.
pub struct Hosts {
    /// Every namespace made, the switch's included.
    all: Vec<String>,
    pub hosts: Vec<Host>,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.all {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Hosts {
    /// `n` hosts with `addrs` IPv4 addresses each (10.231.k.i/16): two joined by a veth
    /// pair, more by a bridge in a namespace of its own.
    pub fn new(n: usize, addrs: usize) -> Hosts {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag =
            format!("{}{}", std::process::id() % 100_000, SEQ.fetch_add(1, Ordering::Relaxed));
        let mut h = Hosts { all: Vec::new(), hosts: Vec::new() };
        for i in 0..n {
            let ns = format!("svnet{tag}h{i}");
            ip(&["netns", "add", &ns]);
            h.all.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            let addrs = (0..addrs).map(|k| format!("10.231.{k}.{}", i + 1)).collect();
            let fabric = tempfile::tempdir().expect("tempdir");
            h.hosts.push(Host { ns, iface: format!("sv{tag}h{i}"), addrs, fabric });
        }
        if n == 2 {
            let (a, b) = (&h.hosts[0], &h.hosts[1]);
            ip(&[
                "link", "add", &a.iface, "netns", &a.ns, "type", "veth", "peer", "name", &b.iface,
                "netns", &b.ns,
            ]);
        } else {
            let sw = format!("svnet{tag}sw");
            ip(&["netns", "add", &sw]);
            h.all.push(sw.clone());
            ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
            ip(&["-n", &sw, "link", "set", "br0", "up"]);
            for (i, host) in h.hosts.iter().enumerate() {
                let port = format!("p{i}");
                ip(&[
                    "link",
                    "add",
                    &host.iface,
                    "netns",
                    &host.ns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &port,
                    "netns",
                    &sw,
                ]);
                ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"]);
            }
        }
        for host in &h.hosts {
            for a in &host.addrs {
                ip(&["-n", &host.ns, "addr", "add", &format!("{a}/16"), "dev", &host.iface]);
            }
            ip(&["-n", &host.ns, "link", "set", &host.iface, "up"]);
        }
        h
    }

    pub fn ns(&self, i: usize) -> &str {
        &self.hosts[i].ns
    }

    pub fn iface(&self, i: usize) -> &str {
        &self.hosts[i].iface
    }

    pub fn addr(&self, i: usize) -> &str {
        &self.hosts[i].addrs[0]
    }

    /// `PROGRAM ARGS` in host `i`'s namespace on its fabric directory, with no inherited
    /// log filter, fault plan or interface; stdin closed, stdout and stderr piped.
    pub fn exec(&self, i: usize, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns(i), program]).args(args);
        c.env_remove("RUST_LOG").env_remove("SOFTVERBS_FAULTS").env_remove("SOFTVERBS_NETDEV");
        c.env("SOFTVERBS_FABRIC", self.hosts[i].fabric.path());
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// `softverbs ARGS` in host `i`'s namespace on its interface (`--netdev` after ARGS[0]).
    pub fn softverbs(&self, i: usize, args: &[&str]) -> Command {
        let mut all = vec![args[0], "--netdev", self.iface(i)];
        all.extend_from_slice(&args[1..]);
        self.exec(i, BIN, &all)
    }

    /// A C program on softverbs' libraries in host `i` (`softverbs run --netdev`).
    pub fn run(&self, i: usize, program: &[&str]) -> Command {
        let mut args = vec!["run", "--"];
        args.extend_from_slice(program);
        self.softverbs(i, &args)
    }

    /// What the CM left in host `i`'s fabric directory (nothing, once its programs ended).
    pub fn cm_leftovers(&self, i: usize) -> Vec<PathBuf> {
        let dir = self.hosts[i].fabric.path().join("cm");
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect()
    }

    /// Waits until a process in host `i` holds UDP 4791 on its address (`ss` lists it, bound
    /// to the interface too: `ADDR%IFACE:4791`); panics with what `p` printed if it ended
    /// first.
    pub fn await_4791(&self, i: usize, p: &mut Proc) {
        self.await_4791_listed(i, &format!("{}%", self.addr(i)), p);
    }

    /// [`Hosts::await_4791`] for the IPv6 address `addr` (`ss` lists `[ADDR]%IFACE:4791`).
    pub fn await_4791_v6(&self, i: usize, addr: &str, p: &mut Proc) {
        self.await_4791_listed(i, &format!("[{addr}]%"), p);
    }

    /// Waits until `ss` in host `i` lists a UDP 4791 socket whose line holds `needle`; panics
    /// with what `p` printed if it ended first, or past 30 s.
    fn await_4791_listed(&self, i: usize, needle: &str, p: &mut Proc) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ss = Command::new("ip")
                .args(["netns", "exec", self.ns(i), "ss", "-Huln", "sport = :4791"])
                .output()
                .expect("ss runs");
            if String::from_utf8_lossy(&ss.stdout).contains(needle) {
                return;
            }
            if p.ended() || Instant::now() > deadline {
                let _ = p.0.as_mut().expect("process").kill();
                let what = p.1.clone();
                panic!("{what} never held {needle}4791:\n{}", text(&p.take().finish(LIMIT)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Gives host `i` the IPv6 address `addr` (with its prefix length) on its interface,
    /// `nodad`: usable at once, without duplicate address detection.
    pub fn add_v6(&self, i: usize, addr: &str) {
        ip(&["-n", self.ns(i), "-6", "addr", "add", addr, "dev", self.iface(i), "nodad"]);
    }

    /// The link-local address the kernel gave host `i`'s interface, once duplicate address
    /// detection let it go (no longer `tentative`); panics past 20 s.
    pub fn link_local(&self, i: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new("ip")
                .args(["-n", self.ns(i), "-6", "-o", "addr", "show", "dev", self.iface(i)])
                .args(["scope", "link"])
                .output()
                .expect("ip runs");
            let t = String::from_utf8_lossy(&out.stdout).into_owned();
            let ready = t.lines().find(|l| !l.contains("tentative")).and_then(|l| {
                let a = l.split_whitespace().skip_while(|w| *w != "inet6").nth(1)?;
                Some(a.split('/').next()?.to_string())
            });
            if let Some(a) = ready {
                return a;
            }
            assert!(Instant::now() < deadline, "no link-local address on {}: {t}", self.iface(i));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until something in host `i` listens on CM port `port` (its name is in the
    /// host's CM directory); panics past 30 s.
    pub fn await_cm_listen(&self, i: usize, port: u16, what: &str) {
        let suffix = format!(":{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.cm_leftovers(i).iter().any(|p| p.to_string_lossy().ends_with(&suffix)) {
            assert!(Instant::now() < deadline, "{what}: nothing listened on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A process killed and reaped when dropped.
pub struct Proc(pub Option<Child>, pub String);

impl Proc {
    pub fn spawn(mut c: Command, what: &str) -> Proc {
        Proc(Some(c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"))), what.to_string())
    }

    /// Waits up to `limit`; panics with what it printed past that.
    pub fn finish(mut self, limit: Duration) -> Output {
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

    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("child").id()
    }

    /// Whether it has ended.
    pub fn ended(&mut self) -> bool {
        self.0.as_mut().expect("child").try_wait().expect("try_wait").is_some()
    }

    /// Takes the process out of this one (which then kills nothing).
    pub fn take(&mut self) -> Proc {
        Proc(self.0.take(), self.1.clone())
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

/// A program's stdout then stderr.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A capture of one namespace's interface by tshark, stopped when dropped or by `stop`.
pub struct Capture {
    proc: Proc,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    pub fn start(h: &Hosts, i: usize) -> Capture {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("wire.pcap");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", h.ns(i), "tshark", "-q", "-i", h.iface(i), "-F", "pcap", "-w"]);
        c.arg(&file).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let proc = Proc::spawn(c, "tshark");
        // tshark writes the file's header once it captures.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&file).map_or(0, |m| m.len()) < 24 {
            assert!(Instant::now() < deadline, "tshark did not start capturing");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        Capture { proc, file, _dir: dir }
    }

    /// Stops tshark (SIGINT: it writes out what it holds) and returns the file.
    pub fn stop(&mut self) -> &Path {
        // dumpcap writes what it captured in batches: give it a moment before it stops.
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

/// `tshark -r PCAP` with UDP 4791 decoded as InfiniBand and Wireshark's heuristic payload
/// dissectors off (RPC and NVMe over RDMA, ... take a pingpong's bytes for theirs and call
/// them malformed), then `args`.
fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["--disable-protocol", "rpcordma", "--disable-protocol", "nvme-rdma"])
        .args(["--disable-protocol", "smb_direct", "--disable-protocol", "iser"])
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What tshark decodes in `pcap`, with no malformed frame: one line per frame,
/// `protocol<TAB>opcode<TAB>info`.
pub fn tshark_decode(pcap: &Path) -> String {
    let t = tshark(
        pcap,
        &[
            "-Y",
            "udp.port==4791",
            "-T",
            "fields",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "_ws.col.Info",
        ],
    );
    assert!(!t.contains("Malformed"), "tshark found malformed frames:\n{t}");
    t
}

/// The CM MADs tshark finds in `pcap` (`dst_qp`, `qkey`, `attribute`, `info`, malformed (empty),
/// transaction ID per frame), none malformed.
pub fn cm_mads(pcap: &Path) -> Vec<Vec<String>> {
    let t = tshark(
        pcap,
        &[
            "-Y",
            "infiniband.mad || _ws.malformed",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.deth.q_key",
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "_ws.col.Info",
            "-e",
            "_ws.malformed",
            "-e",
            "infiniband.mad.transactionid",
        ],
    );
    let rows: Vec<Vec<String>> =
        t.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect();
    for r in &rows {
        assert_eq!(r.get(4).map(String::as_str), Some(""), "a malformed frame:\n{t}");
    }
    rows
}

/// The pingpong's closing lines are there, and no byte was wrong.
pub fn check_pingpong(out: &str, size: usize, iters: usize) {
    let bytes = format!("{} bytes in ", 2 * size * iters);
    assert!(out.lines().any(|l| l.starts_with(&bytes)), "no `{bytes}`:\n{out}");
    assert!(out.contains(&format!("{iters} iters in ")), "{out}");
    assert!(!out.contains("Invalid data"), "a byte was wrong:\n{out}");
}

/// The RoCE v2 datagrams (to UDP port 4791) of a pcap file (Ethernet), each whole from its IP
/// header: the IPv4 ones, then the IPv6 ones.
pub fn roce_datagrams(pcap: &Path) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let f = std::fs::read(pcap).expect("the capture");
    assert!(f.len() >= 24, "no pcap header");
    let mut at = 24;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    while at + 16 <= f.len() {
        let incl = u32::from_le_bytes(f[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &f[at + 16..(at + 16 + incl).min(f.len())];
        at += 16 + incl;
        let is_roce4 = frame.len() > 14 + 28
            && frame[12..14] == [0x08, 0x00]
            && frame[14 + 9] == 17
            && frame[14 + 22..14 + 24] == 4791u16.to_be_bytes();
        let is_roce6 = frame.len() > 14 + 48
            && frame[12..14] == [0x86, 0xdd]
            && frame[14 + 6] == 17
            && frame[14 + 42..14 + 44] == 4791u16.to_be_bytes();
        if is_roce4 {
            v4.push(frame[14..].to_vec());
        } else if is_roce6 {
            v6.push(frame[14..].to_vec());
        }
    }
    (v4, v6)
}

/// A server started with `server`, then a client made by `client` run to the end, retried
/// while the server is not listening yet; both must exit 0. Returns (server, client) output.
pub fn pair(server: Command, client: impl Fn() -> Command, what: &str) -> (String, String) {
    let server = Proc::spawn(server, &format!("{what} server"));
    let start = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(200));
        let out = Proc::spawn(client(), &format!("{what} client")).finish(LIMIT);
        let t = text(&out);
        let refused = !out.status.success()
            && (t.contains("Couldn't connect") || t.contains("Unable to open file descriptor"));
        if !refused || start.elapsed() > Duration::from_secs(15) {
            break out;
        }
    };
    let server = server.finish(LIMIT);
    let (s, c) = (text(&server), text(&client));
    assert!(
        server.status.success() && client.status.success(),
        "{what}:\nserver:\n{s}\nclient:\n{c}"
    );
    (s, c)
}

/// rping's ping `n` (rping.c: "rdma-ping-%d: " then letters from 'A' + n % 58 to 63 bytes).
pub fn rping_text(n: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = 65 + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c == 122 { 65 } else { c + 1 };
    }
    s
}
