//! The `softverbs` binary as a user runs it: `devices`, `devinfo`, `pingpong` between two
//! processes, `fabric` and `fabric clean` after a crash, and `demo`. Every test has its own
//! fabric directory and TCP ports, every child is killed and reaped when the test ends, and
//! every wait has a deadline.

use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use softverbs_sim::peer::{FabricDir, Peer, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The longest any one command of these tests may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// A fabric directory of its own (a [`FabricDir`]), removed when the test ends.
struct TempFabric(FabricDir);

impl TempFabric {
    fn new(name: &str) -> TempFabric {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("softverbs-cli-test-{}-{n}-{name}", std::process::id());
        TempFabric(FabricDir::create(&name).expect("creating the fabric directory"))
    }

    fn path(&self) -> &str {
        self.0.path().to_str().expect("temp paths are UTF-8")
    }

    /// The names in the directory, sorted.
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.0.path())
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A TCP port nobody listens on: one the kernel just handed out and took back.
fn unused_tcp_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("a bound address").port()
}

/// A running `softverbs` process, started as a [`Peer`]: its stdout lines arrive with a
/// deadline, its stderr is collected, and it is killed and reaped when dropped.
struct Proc {
    peer: Peer,
    stdout: Vec<String>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        Proc::spawn_with_env(args, &[])
    }

    /// As [`Proc::spawn`], with these environment variables set (an empty value removes one).
    fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut command = Command::new(BIN);
        for (k, v) in env {
            if v.is_empty() {
                command.env_remove(k);
            } else {
                command.env(k, v);
            }
        }
        command.args(args);
        let mut peer =
            Peer::spawn("softverbs", command, Stderr::Capture).expect("starting softverbs");
        // The commands read nothing: their stdin is empty.
        peer.close_stdin();
        Proc { peer, stdout: Vec::new() }
    }

    /// Start a `pingpong` server on a free TCP port (`-p 0`); returns it and the port it printed.
    fn pingpong_server(args: &[&str]) -> (Proc, String) {
        let mut server = Proc::spawn(&[&["pingpong", "-p", "0"], args].concat());
        let line = server.wait_for_line("listening on TCP port", DEADLINE);
        let port = line.rsplit(' ').next().expect("a port number").to_string();
        assert!(port.parse::<u16>().is_ok_and(|p| p != 0), "{line:?}");
        (server, port)
    }

    fn pid(&self) -> u32 {
        self.peer.pid().expect("a process")
    }

    /// Wait until a stdout line contains `needle`; panics after `timeout`.
    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.peer.recv_line(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => {
                    panic!("no line with {needle:?} within {timeout:?}; got {:?}: {e}", self.stdout)
                }
            }
        }
    }

    fn kill(&mut self) {
        self.peer.kill();
    }

    /// Wait for the process to exit, killing it (and failing the test) after `timeout`.
    fn finish(mut self, timeout: Duration) -> Finished {
        let status = match self.peer.wait_exit(timeout) {
            Ok(st) => st,
            Err(e) => panic!("softverbs {:?} did not exit within {timeout:?}: {e}", self.stdout),
        };
        self.stdout.extend(self.peer.remaining_lines(timeout));
        let stderr = self.peer.stderr();
        Finished { status, stdout: std::mem::take(&mut self.stdout).join("\n"), stderr }
    }
}

#[derive(Debug)]
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run softverbs to completion with the default deadline.
fn run(args: &[&str]) -> Finished {
    Proc::spawn(args).finish(DEADLINE)
}

fn assert_success(f: &Finished, what: &str) {
    assert!(f.status.success(), "{what} failed: {f:#?}");
}

/// A number with exactly two decimals, as `%.2f` prints it.
fn is_two_decimals(s: &str) -> bool {
    match s.split_once('.') {
        Some((i, d)) => {
            !i.is_empty()
                && i.bytes().all(|b| b.is_ascii_digit())
                && d.len() == 2
                && d.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// The four fields of an address line: `  local address:  LID 0x0001, QPN 0x000011, PSN
/// 0x1a2b3c, GID ::`, checked to have `ibv_rc_pingpong`'s form.
fn address_fields(line: &str, which: &str) -> [String; 4] {
    let rest = line.strip_prefix(which).unwrap_or_else(|| panic!("{line:?} is no {which:?}"));
    let words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(words.len(), 8, "{line:?}");
    let hex = |w: &str, digits: usize| {
        let h = w.trim_end_matches(',').strip_prefix("0x").unwrap_or("");
        h.len() == digits && h.bytes().all(|b| b.is_ascii_hexdigit())
    };
    assert!(words[0] == "LID" && hex(words[1], 4), "{line:?}");
    assert!(words[2] == "QPN" && hex(words[3], 6), "{line:?}");
    assert!(words[4] == "PSN" && hex(words[5], 6), "{line:?}");
    assert!(words[6] == "GID" && words[7].parse::<std::net::Ipv6Addr>().is_ok(), "{line:?}");
    [words[1], words[3], words[5], words[7]].map(|w| w.trim_end_matches(',').to_string())
}

/// One side's output as `ibv_rc_pingpong` prints it: its own address, the peer's address and
/// the two closing lines, for `iters` exchanges of `size` bytes. Returns (local, remote).
fn check_pingpong_output(out: &str, size: u64, iters: u64) -> ([String; 4], [String; 4]) {
    let lines: Vec<&str> = out.lines().collect();
    let find = |prefix: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in {out}"))
    };
    let local = address_fields(find("  local address:  "), "  local address:  ");
    let remote = address_fields(find("  remote address: "), "  remote address: ");
    // "25600 bytes in 0.12 seconds = 546.13 Mbit/sec"
    let bytes_line = find(&format!("{} bytes in ", size * iters * 2));
    let w: Vec<&str> = bytes_line.split(' ').collect();
    assert_eq!(w.len(), 8, "{bytes_line:?}");
    assert!(is_two_decimals(w[3]) && w[4] == "seconds" && w[5] == "=", "{bytes_line:?}");
    assert!(is_two_decimals(w[6]) && w[7] == "Mbit/sec", "{bytes_line:?}");
    // "200 iters in 0.12 seconds = 120.00 usec/iter"
    let iters_line = find(&format!("{iters} iters in "));
    let w: Vec<&str> = iters_line.split(' ').collect();
    assert_eq!(w.len(), 8, "{iters_line:?}");
    assert!(is_two_decimals(w[3]) && w[4] == "seconds" && w[5] == "=", "{iters_line:?}");
    assert!(is_two_decimals(w[6]) && w[7] == "usec/iter", "{iters_line:?}");
    // The closing lines are the last two, as in ibv_rc_pingpong.
    let n = lines.len();
    assert!(n >= 2 && lines[n - 2] == bytes_line && lines[n - 1] == iters_line, "{out}");
    (local, remote)
}

/// `softverbs pingpong` serving on a free port and `softverbs pingpong localhost` connecting
/// to it, on one fabric, both with `extra` (and `-g 1`, the port's IPv4 GID, as a RoCE port
/// needs, unless `extra` names a GID index): both must succeed, print ibv_rc_pingpong's
/// lines, and each must have received exactly the address the other sent. Returns both
/// outputs.
fn pingpong_pair(name: &str, extra: &[&str], size: u64, iters: u64) -> (Finished, Finished) {
    let fabric = TempFabric::new(name);
    let mut args = vec!["--fabric", fabric.path(), "--timeout", "20"];
    if !extra.contains(&"-g") {
        args.extend_from_slice(&["-g", "1"]);
    }
    args.extend_from_slice(extra);
    let (server, port) = Proc::pingpong_server(&[&args[..], &["--accept-timeout", "60"]].concat());
    let client = Proc::spawn(
        &[&["pingpong"], &args[..], &["-p", &port, "localhost", "--connect-timeout", "30"]]
            .concat(),
    );
    let c = client.finish(DEADLINE);
    let s = server.finish(DEADLINE);
    assert_success(&c, "the pingpong client");
    assert_success(&s, "the pingpong server");
    let (c_local, c_remote) = check_pingpong_output(&c.stdout, size, iters);
    let (s_local, s_remote) = check_pingpong_output(&s.stdout, size, iters);
    assert_eq!(c_remote, s_local, "the client got the server's LID, QPN, PSN and GID");
    assert_eq!(s_remote, c_local, "the server got the client's LID, QPN, PSN and GID");
    assert_eq!((c_local[0].as_str(), s_local[0].as_str()), ("0x0000", "0x0000"), "RoCE: LID 0");
    assert_ne!(c_local[3], s_local[3], "two processes, two ports, two GIDs");
    // Each process removed its inbox as it closed its device, before it exited.
    assert_eq!(fabric.entries(), [".lock"], "segments left behind");
    (c, s)
}

#[test]
fn devices_lists_the_soft_devices() {
    let fabric = TempFabric::new("devices");
    let f = run(&["devices", "--fabric", fabric.path()]);
    assert_success(&f, "devices");
    let lines: Vec<&str> = f.stdout.lines().collect();
    assert_eq!(lines[0], "    device          \t   node GUID");
    for name in ["softverbs0", "softverbs1"] {
        let row = lines
            .iter()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from {}", f.stdout));
        let guid = row.split('\t').nth(1).expect("a GUID column");
        assert!(guid.len() == 16 && guid.bytes().all(|b| b.is_ascii_hexdigit()), "{row:?}");
    }
}

#[test]
fn devices_and_devinfo_agree_on_node_guids() {
    let fabric = TempFabric::new("guids");
    let listed = run(&["devices", "--fabric", fabric.path()]);
    assert_success(&listed, "devices");
    for name in ["softverbs0", "softverbs1"] {
        let row = listed
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from {}", listed.stdout));
        let guid = row.split('\t').nth(1).expect("a GUID column").trim();
        // devinfo prints the same 64 bits as four groups: 0200:5eff:fe00:0000.
        let grouped: Vec<&str> = (0..4).map(|i| &guid[4 * i..4 * i + 4]).collect();
        let grouped = grouped.join(":");
        let info = run(&["devinfo", "--fabric", fabric.path(), "-d", name]);
        assert_success(&info, "devinfo");
        for label in ["node_guid:", "sys_image_guid:"] {
            let line = info
                .stdout
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no {label} in {}", info.stdout));
            assert_eq!(line.trim_start()[label.len()..].trim(), grouped, "{name}: {line:?}");
        }
    }
    // A second process sees the same GUIDs: they belong to the device, not to the process.
    let again = run(&["devices", "--fabric", fabric.path()]);
    assert_eq!(again.stdout, listed.stdout);
}

#[test]
fn devinfo_shows_an_active_roce_port_and_its_gid_table() {
    let fabric = TempFabric::new("devinfo");
    let f = run(&["devinfo", "--fabric", fabric.path(), "-d", "softverbs0", "-v"]);
    assert_success(&f, "devinfo");
    let out = &f.stdout;
    assert!(out.starts_with("hca_id:\tsoftverbs0\n"), "{out}");
    assert!(!out.contains("softverbs1"), "-d shows one device: {out}");
    assert!(out.contains("PORT_ACTIVE (4)"), "{out}");
    assert!(out.contains("max_qp:"), "{out}");
    let value = |label: &str| -> &str {
        out.lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} in {out}"))
            .trim()
    };
    // A RoCE v2 port as rxe presents one: no LID, no SM, rxe's capability flags and table.
    assert_eq!(value("port_lid:"), "0");
    assert_eq!(value("sm_lid:"), "0");
    assert_eq!(value("link_layer:"), "Ethernet");
    assert_eq!(value("port_cap_flags:"), "0x00010000");
    assert_eq!(value("gid_tbl_len:"), "1024");
    // Its GID table as ibv_devinfo -v prints rxe's: the link-local GID from the MAC
    // 02:00:0a:00:00:01 (the first port takes 10.0.0.1), then the IPv4 GID; nothing more.
    let gids: Vec<&str> = out.lines().filter(|l| l.contains("GID[")).map(str::trim).collect();
    assert_eq!(
        gids,
        ["GID[  0]:\t\tfe80::aff:fe00:1, RoCE v2", "GID[  1]:\t\t::ffff:10.0.0.1, RoCE v2"],
        "{out}"
    );
}

#[test]
fn devinfo_of_an_unknown_device_is_a_usage_error() {
    let fabric = TempFabric::new("nosuch");
    let f = run(&["devinfo", "--fabric", fabric.path(), "-d", "nosuch"]);
    assert_eq!(f.status.code(), Some(2), "{f:#?}");
    assert!(f.stderr.contains("nosuch"), "{f:#?}");
}

#[test]
fn pingpong_polling() {
    pingpong_pair("pp-poll", &["-n", "200", "-s", "64"], 64, 200);
}

/// Without -g, ibv_rc_pingpong sends the zero GID and addresses the peer by LID alone, which
/// a RoCE port refuses: as on rxe, the pair fails at RTR, and the message says what to give.
#[test]
fn pingpong_without_a_gid_index_is_refused_as_on_roce() {
    let fabric = TempFabric::new("pp-nogid");
    let args = ["--fabric", fabric.path(), "--timeout", "5", "-n", "10"];
    let (server, port) = Proc::pingpong_server(&[&args[..], &["--accept-timeout", "60"]].concat());
    let client = Proc::spawn(&[&["pingpong"], &args[..], &["-p", &port, "localhost"]].concat());
    let c = client.finish(DEADLINE);
    let s = server.finish(DEADLINE);
    for f in [&c, &s] {
        assert_eq!(f.status.code(), Some(1), "{f:#?}");
        assert!(f.stdout.lines().any(|l| l.contains("local address:") && l.ends_with("GID ::")));
    }
    for f in [&c, &s] {
        let e = &f.stderr;
        if e.contains("Failed to modify QP to RTR") {
            assert!(e.contains("port 1 is RoCE (Ethernet link layer)"), "{f:#?}");
            assert!(e.contains("give -g GID_INDEX"), "{f:#?}");
            return;
        }
    }
    panic!("neither side said why: {c:#?} {s:#?}");
}

#[test]
fn pingpong_with_completion_events() {
    pingpong_pair("pp-events", &["-n", "200", "-s", "64", "-e"], 64, 200);
}

#[test]
fn pingpong_multi_packet_messages() {
    pingpong_pair("pp-mtu", &["-n", "50", "-m", "256", "-s", "5000", "-r", "10"], 5000, 50);
}

#[test]
fn pingpong_by_gid() {
    let (c, s) = pingpong_pair("pp-gid", &["-n", "50", "-s", "64", "-g", "1"], 64, 50);
    // With -g 1 each side sends its port's IPv4 GID (::ffff:10.0.0.N) and uses a GRH.
    for out in [&c.stdout, &s.stdout] {
        for line in out.lines().filter(|l| l.contains("address:")) {
            assert!(line.contains("LID 0x0000,"), "{line:?}");
            let gid = line.rsplit(' ').next().expect("a GID");
            assert!(gid.starts_with("::ffff:10.0."), "{line:?}");
        }
    }
}

#[test]
fn pingpong_default_port_and_options_are_ibv_rc_pingpongs() {
    // The command line of ibv_rc_pingpong(1), option for option, with its defaults.
    let f = run(&["pingpong", "--help"]);
    assert_success(&f, "pingpong --help");
    for opt in [
        "-p, --port <PORT>",
        "-d, --ib-dev <DEV>",
        "-i, --ib-port <PORT>",
        "-s, --size <SIZE>",
        "-m, --mtu <MTU>",
        "-r, --rx-depth <RX_DEPTH>",
        "-n, --iters <ITERS>",
        "-l, --sl <SL>",
        "-e, --events",
        "-g, --gid-idx <GID_INDEX>",
        "[default: 18515]",
        "[default: 4096]",
        "[default: 1024]",
        "[default: 500]",
        "[default: 1000]",
    ] {
        assert!(f.stdout.contains(opt), "{opt:?} missing from {}", f.stdout);
    }
}

#[test]
fn pingpong_client_without_server_fails_in_time() {
    let fabric = TempFabric::new("pp-noserver");
    let port = unused_tcp_port().to_string();
    let t0 = Instant::now();
    let f = Proc::spawn(&[
        "pingpong",
        "--fabric",
        fabric.path(),
        "-p",
        &port,
        "--connect-timeout",
        "2",
        "127.0.0.1",
    ])
    .finish(Duration::from_secs(20));
    assert_eq!(f.status.code(), Some(1), "{f:#?}");
    assert!(f.stderr.contains("Couldn't connect"), "{f:#?}");
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
}

#[test]
fn pingpong_server_notices_a_dead_client() {
    let fabric = TempFabric::new("pp-dead");
    let common = ["--fabric", fabric.path(), "-n", "100000000", "-s", "64", "-g", "1"];
    let (server, port) = Proc::pingpong_server(&[&common[..], &["--timeout", "3"]].concat());
    let mut client =
        Proc::spawn(&[&["pingpong"], &common[..], &["-p", &port, "127.0.0.1"]].concat());
    client.wait_for_line("remote address:", DEADLINE);
    std::thread::sleep(Duration::from_millis(200));
    client.kill();
    let s = server.finish(Duration::from_secs(30));
    assert_eq!(s.status.code(), Some(1), "{s:#?}");
    assert!(
        s.stderr.contains("no completion within") || s.stderr.contains("Failed status"),
        "{s:#?}"
    );
}

#[test]
fn fabric_lists_and_cleans_a_crashed_process() {
    let fabric = TempFabric::new("fabric");
    let (mut server, _port) =
        Proc::pingpong_server(&["--fabric", fabric.path(), "--accept-timeout", "60"]);
    let pid = server.pid().to_string();
    let segment_line = |out: &str| -> String {
        out.lines()
            .find(|l| l.contains("port-1.inbox"))
            .unwrap_or_else(|| panic!("no port-1.inbox in {out}"))
            .to_string()
    };

    let f = run(&["fabric", "--fabric", fabric.path()]);
    assert_success(&f, "fabric");
    let line = segment_line(&f.stdout);
    assert!(line.contains(&format!("{pid} alive")), "{line:?}");
    assert!(line.contains("1024 x 4352 B"), "{line:?}");
    // The header carries the IPv4 GID of the port (slot 1), as ibv_query_gid(1, 1) reports it.
    assert!(line.split_whitespace().any(|w| w == "::ffff:10.0.0.1"), "{line:?}");

    // A stray write into the live port's inbox (its head word, at byte 192 of layout 2): the
    // listing says the segment is corrupted, whether or not its owner has noticed yet.
    let segment = std::path::Path::new(fabric.path()).join("port-1.inbox");
    let file = std::fs::OpenOptions::new().write(true).open(&segment).expect("open the inbox");
    std::os::unix::fs::FileExt::write_all_at(&file, &1001u64.to_ne_bytes(), 192)
        .expect("the stray write");
    let f = run(&["fabric", "--fabric", fabric.path()]);
    assert_success(&f, "fabric");
    let line = segment_line(&f.stdout);
    assert!(line.contains("corrupted: "), "{line:?}");
    assert!(f.stdout.contains("port is down"), "{f:#?}");

    server.kill(); // SIGKILL: the segment stays behind
    let f = run(&["fabric", "--fabric", fabric.path()]);
    assert_success(&f, "fabric");
    let line = segment_line(&f.stdout);
    assert!(line.contains(&format!("{pid} dead")), "{line:?}");

    let f = run(&["fabric", "clean", "--fabric", fabric.path()]);
    assert_success(&f, "fabric clean");
    assert!(f.stdout.contains("removed") && f.stdout.contains("port-1.inbox"), "{f:#?}");
    assert_eq!(fabric.entries(), [".lock"]);

    let f = run(&["fabric", "--fabric", fabric.path()]);
    assert_success(&f, "fabric");
    assert!(f.stdout.contains("no segments"), "{f:#?}");
}

#[test]
fn a_fabric_directory_that_is_a_symbolic_link_is_refused_by_name() {
    let fabric = TempFabric::new("symlink");
    let link = std::path::Path::new(fabric.path()).join("link");
    std::os::unix::fs::symlink(fabric.path(), &link).expect("symlink");
    let link = link.to_str().expect("temp paths are UTF-8");
    let f = run(&["fabric", "--fabric", link]);
    assert_eq!(f.status.code(), Some(1), "{f:#?}");
    assert!(f.stderr.contains(link) && f.stderr.contains("symbolic link"), "{f:#?}");
}

/// What the demo tells a learner, checked against what happened: the packets of each
/// operation with their PSNs, the ACK that covers them, every completion, the measurements.
fn check_demo_story(out: &str) {
    let has = |needle: &str| assert!(out.contains(needle), "{needle:?} missing from:\n{out}");
    has("initiator: softverbs0 port 1, LID ");
    // QP numbers are drawn at random when a device opens; the PSNs are the demo's own.
    let qp = out.split("; RC QP 0x").nth(1).and_then(|rest| rest.split(',').next());
    let qpn = qp.and_then(|hex| u32::from_str_radix(hex, 16).ok());
    assert!(qpn.is_some_and(|q| (2..0x00FF_FFFF).contains(&q)), "initiator QPN {qp:?}:\n{out}");
    has(", first PSN 0x001000");
    has("first PSN 0x008000");
    // One line per packet; the WRITE of 2500 bytes at MTU 1024 is FIRST, MIDDLE, LAST.
    for packet in [
        "-> RC SEND ONLY                       PSN 0x001000",
        "-> RC RDMA WRITE FIRST                PSN 0x001001",
        "-> RC RDMA WRITE MIDDLE               PSN 0x001002",
        "-> RC RDMA WRITE LAST                 PSN 0x001003",
        "<- RC ACKNOWLEDGE                     PSN 0x001003",
        "-> RC RDMA READ REQUEST               PSN 0x001004",
        "<- RC RDMA READ RESPONSE ONLY         PSN 0x001004",
        "-> RC COMPARE SWAP                    PSN 0x001005",
        "<- RC ATOMIC ACKNOWLEDGE              PSN 0x001006",
    ] {
        has(packet);
    }
    has("=> sent 3 packets (PSN 0x001001 to 0x001003), got 1 back, acknowledging every PSN up to 0x001003; 2696 bytes of IPv4/UDP datagrams both ways");
    has("initiator CQ: wr_id=2 status=IBV_WC_SUCCESS opcode=IBV_WC_RDMA_WRITE byte_len=2500");
    has("target CQ: wr_id=100 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=22");
    has("all 2500 bytes as sent");
    has("target memory [atomic counter]: 50");
    // The measurements: one row per operation, with what was captured.
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("== Measurements"))
        .filter(|l| l.trim_end().ends_with(" us") && l.contains(" B "))
        .collect();
    assert_eq!(rows.len(), 5, "{out}");
    assert!(
        rows[1].contains("RDMA WRITE") && rows[1].contains("2500 B") && rows[1].contains("3 / 1")
    );
    has("All five operations completed with the right data.");
}

#[test]
fn demo_between_processes() {
    let fabric = TempFabric::new("demo");
    let f = run(&["demo", "--fabric", fabric.path()]);
    assert_success(&f, "demo");
    assert!(f.stdout.contains("A second process (pid "), "{}", f.stdout);
    check_demo_story(&f.stdout);
    assert_eq!(fabric.entries(), [".lock"], "segments left behind");
}

#[test]
fn demo_in_process() {
    let f = run(&["demo", "--in-process"]);
    assert_success(&f, "demo --in-process");
    check_demo_story(&f.stdout);
}

#[test]
fn demo_refuses_a_device_it_cannot_use() {
    let fabric = TempFabric::new("demo-nodev");
    for mode in ["--in-process", "--fabric"] {
        let mut args = vec!["demo", mode];
        if mode == "--fabric" {
            args.push(fabric.path());
        }
        let f = run(&[&args[..], &["-d", "softverbs7"]].concat());
        assert_eq!(f.status.code(), Some(2), "{f:#?}");
        assert!(f.stderr.contains("no soft device named \"softverbs7\""), "{f:#?}");
        assert!(f.stderr.contains("softverbs0, softverbs1"), "the devices are listed: {f:#?}");
        assert!(f.stdout.is_empty(), "nothing started: {f:#?}");
    }
    // The target process never started, so it left no segment behind.
    assert!(fabric.entries().iter().all(|e| e == ".lock"), "{:?}", fabric.entries());
}

#[test]
fn demo_on_another_soft_device() {
    let fabric = TempFabric::new("demo-dev");
    let f = run(&["demo", "--fabric", fabric.path(), "-d", "softverbs1"]);
    assert_success(&f, "demo -d softverbs1");
    assert!(f.stdout.contains("initiator: softverbs1 port 1"), "{}", f.stdout);
    assert!(f.stdout.contains("wire  softverbs1 -> RC SEND ONLY"), "{}", f.stdout);
    let f = run(&["demo", "--in-process", "-d", "softverbs1"]);
    assert_success(&f, "demo --in-process -d softverbs1");
    assert!(f.stdout.contains("initiator: softverbs1 port 1"), "{}", f.stdout);
    assert!(f.stdout.contains("target:    softverbs0 port 1"), "{}", f.stdout);
    assert!(f.stdout.contains("addressed by GID (sgid_index 1)"), "{}", f.stdout);
    // The demo teaches the GID index: the table it chose from, and why.
    assert!(
        f.stdout.contains(
            "GID index 1: ::ffff:10.0.0.1, RoCE v2, IPv4 — the entry ib_write_bw would pick \
             (the first IPv4 GID)."
        ),
        "{}",
        f.stdout
    );
    assert!(f.stdout.contains("  GID[  0]: fe80::aff:fe00:1, RoCE v2, IPv6\n"), "{}", f.stdout);
    // -g names the index, and changes nothing else.
    let f = run(&["demo", "--in-process", "-g", "1"]);
    assert_success(&f, "demo --in-process -g 1");
    assert!(f.stdout.contains("the entry -g asked for"), "{}", f.stdout);
    check_demo_story(&f.stdout);
    // Index 0 is the IPv6 link-local GID: RoCE v2 over IPv6, as -g 0 gives on rxe.
    let f = run(&["demo", "--in-process", "-g", "0"]);
    assert_success(&f, "demo --in-process -g 0");
    assert!(f.stdout.contains("GID index 0: fe80::aff:fe00:"), "{}", f.stdout);
    assert!(
        f.stdout.contains("wire  softverbs0 -> RC SEND ONLY")
            && f.stdout.contains(" fe80::aff:fe00:"),
        "the wire lines show IPv6 addresses: {}",
        f.stdout
    );
    // The WRITE's three packets and its ACK, each 20 bytes longer than over IPv4.
    assert!(
        f.stdout.contains(
            "=> sent 3 packets (PSN 0x001001 to 0x001003), got 1 back, acknowledging every PSN \
             up to 0x001003; 2776 bytes of IPv6/UDP datagrams both ways"
        ),
        "{}",
        f.stdout
    );
    let f = run(&["demo", "--in-process", "-g", "5"]);
    assert_eq!(f.status.code(), Some(2), "{f:#?}");
    assert!(f.stderr.contains("-g 5: GID index 5 of port 1 is empty"), "{f:#?}");
    assert!(f.stdout.is_empty(), "nothing started: {f:#?}");
}

/// What every command that opens a device says about a real NIC's name on this machine: with
/// the hw backend and no RDMA, libibverbs' reason; without the backend, how to get it.
#[test]
fn a_real_device_without_hardware_is_a_usage_error() {
    let hw = verbs_api::hw_provider();
    if hw.as_ref().is_some_and(|p| p.devices().is_ok()) {
        println!(
            "skipped: this machine has RDMA devices, so there is no \"no device\" error to check"
        );
        return;
    }
    let fabric = TempFabric::new("nohw");
    let commands: [&[&str]; 4] = [
        &["devinfo", "--fabric", fabric.path(), "-d", "mlx5_0"],
        &["pingpong", "--fabric", fabric.path(), "-d", "mlx5_0"],
        &["demo", "--fabric", fabric.path(), "-d", "mlx5_0"],
        &["perf", "lat", "--fabric", fabric.path(), "-d", "mlx5_0"],
    ];
    for args in commands {
        let f = run(args);
        assert_eq!(f.status.code(), Some(2), "{args:?}: {f:#?}");
        let first = f.stderr.lines().last().unwrap_or("");
        if hw.is_some() {
            // "softverbs pingpong: no RDMA devices: ibv_get_device_list failed: ..."
            assert!(first.contains(": no RDMA devices: "), "{args:?}: {f:#?}");
            assert!(first.contains("(looking for \"mlx5_0\""), "{args:?}: {f:#?}");
        } else {
            assert!(first.contains("no RDMA device named \"mlx5_0\""), "{args:?}: {f:#?}");
            assert!(first.contains("--features verbs-api/rdma-sys"), "{args:?}: {f:#?}");
        }
        assert!(!f.stderr.contains("panicked"), "{args:?}: {f:#?}");
    }
    assert!(fabric.entries().iter().all(|e| e == ".lock"), "{:?}", fabric.entries());
}

#[test]
fn sim_devices_are_refused_with_an_explanation() {
    let fabric = TempFabric::new("simdev");
    for cmd in ["demo", "pingpong"] {
        let f = run(&[cmd, "--fabric", fabric.path(), "-d", "sim:node0"]);
        assert_eq!(f.status.code(), Some(2), "{f:#?}");
        assert!(
            f.stderr.contains("sim:node0 is a device of the deterministic simulator"),
            "{f:#?}"
        );
        assert!(f.stderr.contains("softverbs sim SCENARIO.toml"), "{f:#?}");
    }
}

#[test]
fn bad_option_values_are_usage_errors() {
    let cases: [(&[&str], &str); 8] = [
        (&["pingpong", "-s", "0"], "--size"),
        (&["pingpong", "-m", "1000"], "path MTU"),
        (&["pingpong", "-p", "0", "localhost"], "-p 0"),
        (&["perf", "bw", "-W", "0"], "--window"),
        (&["perf", "lat", "-n", "0"], "--iters"),
        (&["perf", "idle", "--seconds", "0"], "--seconds"),
        (&["perf", "lat", "-g", "3"], "-g 3"),
        (&["pingpong", "-g", "1024", "-p", "0"], "sgid of index 1024"),
    ];
    let fabric = TempFabric::new("badopts");
    for (args, named) in cases {
        let f = run(&[args, &["--fabric", fabric.path()]].concat());
        assert_eq!(f.status.code(), Some(2), "{args:?}: {f:#?}");
        assert!(f.stderr.contains(named), "{args:?} should name {named:?}: {f:#?}");
    }
}

#[test]
fn perf_runs_on_the_device_it_is_given() {
    let fabric = TempFabric::new("perf");
    let f = run(&[
        "perf",
        "lat",
        "--fabric",
        fabric.path(),
        "-d",
        "softverbs1",
        "-n",
        "200",
        "-w",
        "10",
        "-r",
        "1",
    ]);
    assert_success(&f, "perf lat -d softverbs1");
    let result = f.stdout.lines().find(|l| l.starts_with("RESULT lat ")).expect("a RESULT line");
    assert!(result.contains("size=8 iters=200 runs=1 median_us="), "{result:?}");
    assert!(f.stdout.contains("between two processes on softverbs1"), "{}", f.stdout);
    let f =
        run(&["perf", "bw", "--fabric", fabric.path(), "-d", "softverbs1", "-n", "8", "-r", "1"]);
    assert_success(&f, "perf bw -d softverbs1");
    assert!(f.stdout.contains("between two processes on softverbs1"), "{}", f.stdout);
    assert!(f.stdout.contains("(data verified at the target)"), "{}", f.stdout);
}

#[test]
fn the_fabric_comes_from_the_environment_unless_a_flag_names_one() {
    let from_env = TempFabric::new("env");
    let from_flag = TempFabric::new("flag");
    let env = [("SOFTVERBS_FABRIC", from_env.path())];
    let mut server = Proc::spawn_with_env(&["pingpong", "-p", "0", "--accept-timeout", "60"], &env);
    server.wait_for_line("listening on TCP port", DEADLINE);
    // The inbox, and the reach file through which peers' NICs reach its MRs' memory.
    assert_eq!(from_env.entries(), [".lock", "port-1.inbox", "port-1.reach"]);
    let f = Proc::spawn_with_env(&["fabric"], &env).finish(DEADLINE);
    assert_success(&f, "fabric");
    assert!(f.stdout.starts_with(&format!("fabric {}: 1 segment", from_env.path())), "{f:#?}");
    let f = Proc::spawn_with_env(&["fabric", "--fabric", from_flag.path()], &env).finish(DEADLINE);
    assert_success(&f, "fabric --fabric");
    assert_eq!(f.stdout.trim(), format!("fabric {}: no segments", from_flag.path()));
    server.kill();
}

/// What users of `ibv_*` tools rely on: a device, port, size or count the device cannot take
/// is a usage error (status 2) that names the option and the limit, before anything starts,
/// for every command; `perf floor` uses no device and refuses `-d` rather than ignore it.
#[test]
fn every_bad_device_port_size_or_count_is_a_usage_error_naming_the_limit() {
    let serve = ["-p", "0", "--accept-timeout", "5"];
    let cases: [(&[&str], &[&str]); 15] = [
        (&[&["pingpong", "-i", "2"], &serve[..]].concat(), &["-i 2", "no port 2"]),
        (
            &[&["pingpong", "-s", "2000000000"], &serve[..]].concat(),
            &["-s 2000000000", "max_msg_sz 1073741824"],
        ),
        (&[&["pingpong", "-r", "100000"], &serve[..]].concat(), &["-r 100000", "max_qp_wr 16384"]),
        (
            &["perf", "lat", "-s", "2000000000", "-n", "1", "-w", "0", "-r", "1"],
            &["-s 2000000000", "max_msg_sz 1073741824"],
        ),
        (
            &["perf", "bw", "-s", "2000000000", "-n", "1", "-r", "1"],
            &["-s 2000000000", "max_msg_sz 1073741824"],
        ),
        (&["perf", "floor", "-d", "softverbs9", "-n", "10", "-w", "0", "-r", "1"], &["'-d'"]),
        (&["perf", "floor", "-d", "mlx5_0", "-n", "10", "-w", "0", "-r", "1"], &["'-d'"]),
        (&["perf", "idle", "-d", "softverbs9", "--seconds", "0.1"], &["softverbs9"]),
        (&["perf", "lat", "-d", "softverbs9"], &["no soft device named \"softverbs9\""]),
        // Counts whose samples cannot be kept, or whose sum overflows, are usage errors too.
        (&["perf", "lat", "-n", "9223372036854775807", "-r", "2"], &["-r 2", "134217728"]),
        (&["perf", "floor", "-n", "9223372036854775807", "-r", "2"], &["-r 2", "134217728"]),
        (&["perf", "lat", "-w", "18446744073709551615", "-n", "10"], &["-w 18446744073709551615"]),
        // A wait too long to add to the clock.
        (
            &["pingpong", "--connect-timeout", "18446744073709551615", "localhost"],
            &["--connect-timeout"],
        ),
        (
            &["pingpong", "--accept-timeout", "18446744073709551615", "-p", "0"],
            &["--accept-timeout"],
        ),
        (&["pingpong", "--timeout", "18446744073709551615", "-p", "0"], &["--timeout"]),
    ];
    let fabric = TempFabric::new("limits");
    for (args, named) in cases {
        let f = Proc::spawn(&[args, &["--fabric", fabric.path()]].concat()).finish(DEADLINE);
        assert_eq!(f.status.code(), Some(2), "{args:?}: {f:#?}");
        for n in named {
            assert!(f.stderr.contains(n), "{args:?} should name {n:?}: {f:#?}");
        }
        assert!(!f.stderr.contains("WorkCompletion {"), "no debug dump: {f:#?}");
        assert!(!f.stdout.contains("RESULT"), "nothing was measured: {f:#?}");
    }
}

/// Run softverbs with its stdout a pipe whose reader has gone (`| head` after head exited);
/// with `stderr_too`, stderr goes into the same pipe (`2>&1 | head`), else it is captured.
/// Returns the exit status and what reached stderr.
fn run_into_closed_pipe(args: &[&str], stderr_too: bool) -> (ExitStatus, String) {
    use std::io::Read;
    use std::process::Stdio;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut command = Command::new(BIN);
    command.args(args).stdin(Stdio::null());
    if stderr_too {
        command.stderr(writer.try_clone().expect("a second write end"));
    } else {
        command.stderr(Stdio::piped());
    }
    command.stdout(writer);
    let mut child = command.spawn().expect("starting softverbs");
    // The command's own stdin, stdout and stderr are the child's now.
    drop(command);
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for softverbs") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("softverbs {args:?} did not exit within {DEADLINE:?} with its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr).expect("reading stderr");
    }
    (status, stderr)
}

/// `softverbs devinfo | head` and `2>&1 | head`: once the reader is gone, every command stops
/// quietly with status 0, as ripgrep and fd do, instead of panicking (status 101).
#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let fabric = TempFabric::new("epipe");
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/lossy-link.toml");
    let commands: [&[&str]; 8] = [
        &["devices", "--fabric", fabric.path()],
        &["devinfo", "--fabric", fabric.path()],
        &["devinfo", "-l", "--fabric", fabric.path()],
        &["fabric", "--fabric", fabric.path()],
        &["pingpong", "-p", "0", "--accept-timeout", "5", "--fabric", fabric.path()],
        &["perf", "floor", "-n", "10", "-w", "0", "-r", "1", "--fabric", fabric.path()],
        &["sim", scenario, "--quiet"],
        &["--help"],
    ];
    for args in commands {
        for stderr_too in [false, true] {
            let (status, stderr) = run_into_closed_pipe(args, stderr_too);
            assert_eq!(status.code(), Some(0), "{args:?} (stderr too: {stderr_too}): {stderr}");
            assert_eq!(beyond_hw_note(&stderr), "", "{args:?}: nothing to say on stderr");
        }
    }
}

/// A command that only reads the fabric (`devices`, `fabric`, `fabric clean`) creates no
/// directory: a fabric named by `--fabric` or `$SOFTVERBS_FABRIC` that does not exist is a
/// usage error naming the path and where it came from; the default one, missing, is empty.
#[test]
fn commands_that_only_read_do_not_create_the_fabric() {
    let base = TempFabric::new("nocreate");
    let parent = format!("{}/typo", base.path());
    let missing = format!("{parent}/fabric");
    for args in [&["devices"][..], &["fabric"], &["fabric", "clean"]] {
        let f = run(&[args, &["--fabric", &missing]].concat());
        assert_eq!(f.status.code(), Some(2), "{args:?}: {f:#?}");
        assert!(f.stderr.contains(&format!("{missing} (--fabric) does not exist")), "{f:#?}");
        assert!(f.stdout.is_empty(), "{args:?}: {f:#?}");
        assert!(!std::path::Path::new(&parent).exists(), "{args:?} created {parent}");
        let f = Proc::spawn_with_env(args, &[("SOFTVERBS_FABRIC", &missing)]).finish(DEADLINE);
        assert_eq!(f.status.code(), Some(2), "{args:?}: {f:#?}");
        assert!(f.stderr.contains(&format!("{missing} ($SOFTVERBS_FABRIC) does not exist")));
        assert!(!std::path::Path::new(&parent).exists(), "{args:?} created {parent}");
    }
    // Opening a device attaches a port, which is what creates a fabric.
    let f = run(&["devinfo", "--fabric", &missing, "-d", "softverbs0"]);
    assert_success(&f, "devinfo on a new fabric");
    let f = run(&["fabric", "--fabric", &missing]);
    assert_success(&f, "fabric");
    assert_eq!(f.stdout.trim(), format!("fabric {missing}: no segments"));
}

/// Environment values that do not parse are errors naming the variable and the value, on
/// every path that builds soft devices (shared memory and the in-process wire).
#[test]
fn environment_values_that_do_not_parse_are_named() {
    let fabric = TempFabric::new("env-values");
    let cases = [
        ("SOFTVERBS_DEVICES", "abc"),
        ("SOFTVERBS_DEVICES", "-1"),
        ("SOFTVERBS_DEVICES", "0"),
        ("SOFTVERBS_DEVICES", "65"),
        ("SOFTVERBS_SPIN_US", "fast"),
        ("SOFTVERBS_STANDBY_US", "-5"),
    ];
    for (var, value) in cases {
        for args in [
            &["devices", "--fabric", fabric.path()][..],
            &["devinfo", "--fabric", fabric.path(), "-d", "softverbs0"],
            &["demo", "--in-process"],
        ] {
            let f = Proc::spawn_with_env(args, &[(var, value)]).finish(DEADLINE);
            assert_eq!(f.status.code(), Some(2), "{var}={value} {args:?}: {f:#?}");
            assert!(f.stderr.contains(&format!("{var}={value:?}")), "{var}={value}: {f:#?}");
            assert!(f.stdout.is_empty(), "{var}={value} {args:?}: {f:#?}");
        }
    }
    // A value that parses is used.
    let f = Proc::spawn_with_env(
        &["devices", "--fabric", fabric.path()],
        &[("SOFTVERBS_DEVICES", "3")],
    )
    .finish(DEADLINE);
    assert_success(&f, "devices with SOFTVERBS_DEVICES=3");
    assert!(f.stdout.contains("softverbs2") && !f.stdout.contains("softverbs3"), "{f:#?}");
}

/// Two `pingpong`s on different fabrics: each says that the peer's port is not on the fabric
/// it searched, and names that directory, instead of timing out without a hint.
#[test]
fn pingpong_on_two_fabrics_names_the_fabric_searched() {
    let (a, b) = (TempFabric::new("fabric-a"), TempFabric::new("fabric-b"));
    let (server, port) = Proc::pingpong_server(&[
        "--fabric",
        a.path(),
        "-g",
        "1",
        "--timeout",
        "3",
        "--accept-timeout",
        "30",
    ]);
    let client = Proc::spawn(&[
        "pingpong",
        "-g",
        "1",
        "--fabric",
        b.path(),
        "--timeout",
        "3",
        "-p",
        &port,
        "localhost",
    ]);
    let c = client.finish(DEADLINE);
    let s = server.finish(DEADLINE);
    for (f, dir) in [(&c, b.path()), (&s, a.path())] {
        assert_eq!(f.status.code(), Some(1), "{f:#?}");
        assert!(f.stderr.contains(&format!("not on the fabric {dir}")), "{f:#?}");
        assert!(f.stderr.contains("--fabric"), "says how to fix it: {f:#?}");
    }
}

/// `perf syscalls` counts with `perf stat` where it can (`--counter auto`, the default); its
/// help, and `perf --help`, say so rather than name strace alone.
#[test]
fn perf_help_names_the_syscall_counter_it_uses() {
    let f = run(&["perf", "--help"]);
    assert_success(&f, "perf --help");
    let line = f.stdout.lines().find(|l| l.trim_start().starts_with("syscalls")).expect("syscalls");
    assert!(line.contains("perf stat"), "{line:?}");
    let f = run(&["perf", "syscalls", "--help"]);
    assert_success(&f, "perf syscalls --help");
    let about = f.stdout.lines().next().unwrap_or("");
    assert!(about.contains("`perf stat`") && about.contains("strace"), "{about:?}");
    assert!(f.stdout.contains("[default: auto]"), "{}", f.stdout);
}

/// What stderr holds besides the note that a build with `rdma-sys`, on a machine without kernel
/// RDMA, prints when it lists devices (the hw provider found none).
fn beyond_hw_note(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("note: the hw provider lists no devices"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `-v` logs the lifecycle (ports attached to and detached from the fabric, devices opened and
/// closed) on stderr; without it, and without `RUST_LOG`, stderr stays empty. `-v` goes before
/// `devinfo` (whose own `-v` is ibv_devinfo's) and after the other commands; `RUST_LOG`
/// overrides it, and one that does not parse is a usage error naming it.
#[test]
fn logs_are_silent_by_default_and_verbose_shows_the_lifecycle() {
    let fabric = TempFabric::new("logs");
    let no_log = [("RUST_LOG", "")];
    let quiet = Proc::spawn_with_env(&["devinfo", "--fabric", fabric.path(), "-v"], &no_log)
        .finish(DEADLINE);
    assert_success(&quiet, "devinfo -v");
    assert_eq!(beyond_hw_note(&quiet.stderr), "", "devinfo's -v is ibv_devinfo's, not the log's");
    let loud = Proc::spawn_with_env(&["-v", "devinfo", "--fabric", fabric.path()], &no_log)
        .finish(DEADLINE);
    assert_success(&loud, "-v devinfo");
    assert!(loud.stdout.starts_with("hca_id:") && !loud.stdout.contains("INFO"), "{loud:#?}");
    for line in [
        "INFO nic_model::wire::fabric: attached a port to the fabric",
        "INFO nic_model::soft::device: device opened device=softverbs0",
        "INFO nic_model::soft::device: device closed device=softverbs0",
        "INFO nic_model::wire::inbox: detached a port from the fabric",
    ] {
        assert!(loud.stderr.contains(line), "no {line:?} in {}", loud.stderr);
    }
    assert!(!loud.stderr.contains("DEBUG"), "-v is info: {}", loud.stderr);

    let demo = Proc::spawn_with_env(&["demo", "--in-process"], &no_log).finish(DEADLINE);
    assert_success(&demo, "demo --in-process");
    assert_eq!(demo.stderr, "", "silent by default");
    let demo = Proc::spawn_with_env(&["demo", "--in-process", "-vv"], &no_log).finish(DEADLINE);
    assert_success(&demo, "demo --in-process -vv");
    assert!(demo.stderr.contains("device opened device=softverbs0"), "{}", demo.stderr);
    assert!(
        demo.stderr.contains("DEBUG nic_model::engine::qp_verbs: QP state change"),
        "{}",
        demo.stderr
    );
    assert!(demo.stderr.contains("from=Rtr to=Rts"), "{}", demo.stderr);

    // RUST_LOG overrides -v: only the engine's debug events, and no lifecycle lines.
    let demo = Proc::spawn_with_env(
        &["demo", "--in-process", "-v"],
        &[("RUST_LOG", "nic_model::engine=debug")],
    )
    .finish(DEADLINE);
    assert_success(&demo, "RUST_LOG=nic_model::engine=debug demo --in-process");
    assert!(demo.stderr.contains("QP state change"), "{}", demo.stderr);
    assert!(!demo.stderr.contains("device opened"), "{}", demo.stderr);

    let bad = Proc::spawn_with_env(&["devices"], &[("RUST_LOG", "[")]).finish(DEADLINE);
    assert_eq!(bad.status.code(), Some(2), "{bad:#?}");
    assert!(bad.stderr.starts_with("softverbs devices: RUST_LOG=\"[\" does not parse"), "{bad:#?}");
}

/// `softverbs sim` with a `[workload]` prints the slowdown and pause tables; `--json -` puts
/// the report alone on standard output (the same bytes twice for a seed); `--plots DIR` writes
/// the SVGs the run has data for.
#[test]
fn sim_workload_results_json_and_plots() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/workload-incast-pfc.toml");
    let f = run(&["sim", scenario, "--quiet"]);
    assert_success(&f, "sim workload");
    for want in
        ["flow completion time slowdown", "100 KB - 1 MB", "pause time per port", "h1 -> sw"]
    {
        assert!(f.stdout.contains(want), "{want:?} missing: {}", f.stdout);
    }
    let json = |_| {
        let f = run(&["sim", scenario, "--quiet", "--json", "-"]);
        assert_success(&f, "sim --json -");
        f.stdout
    };
    let (a, b) = (json(1), json(2));
    assert!(a.starts_with("{\"name\":\"workload-incast-pfc\",\"seed\":7,\"passed\":true,"), "{a}");
    assert_eq!(a, b, "the same seed, the same JSON");
    // Removed when dropped, even when an assertion fails.
    let dir = tempfile::Builder::new().prefix("softverbs-plots-").tempdir().unwrap();
    let f = run(&["sim", scenario, "--quiet", "--plots", dir.path().to_str().unwrap()]);
    assert_success(&f, "sim --plots");
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["pauses.svg", "queues.svg", "rates.svg", "slowdown.svg"]);
}
