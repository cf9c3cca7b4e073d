//! The `softverbs` binary as a user runs it: `devices`, `devinfo`, `pingpong` between two
//! processes, `fabric` and `fabric clean` after a crash, and `demo`. Every test has its own
//! fabric directory and TCP ports, every child is killed and reaped when the test ends, and
//! every wait has a deadline.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The longest any one command of these tests may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// A fabric directory of its own, removed when the test ends.
struct TempFabric(PathBuf);

impl TempFabric {
    fn new(name: &str) -> TempFabric {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "softverbs-cli-test-{}-{}-{name}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempFabric(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("temp paths are UTF-8")
    }

    /// The names in the directory, sorted.
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for TempFabric {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TCP port for this test: distinct per test, and per test binary run.
fn tcp_port(k: u16) -> u16 {
    20000 + (std::process::id() % 1000) as u16 * 10 + k
}

/// A running `softverbs` process: stdout arrives line by line on a channel, stderr is collected.
/// Killed and reaped when dropped.
struct Proc {
    child: Option<Child>,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stdout_reader: Option<JoinHandle<()>>,
    stderr_reader: Option<JoinHandle<String>>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting softverbs");
        let out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Proc {
            child: Some(child),
            lines,
            stdout: Vec::new(),
            stdout_reader: Some(stdout_reader),
            stderr_reader: Some(stderr_reader),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Wait until a stdout line contains `needle`; panics after `timeout`.
    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => {
                    panic!("no line with {needle:?} within {timeout:?}; got {:?}", self.stdout)
                }
            }
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for the process to exit, killing it (and failing the test) after `timeout`.
    fn finish(mut self, timeout: Duration) -> Finished {
        let deadline = Instant::now() + timeout;
        let mut child = self.child.take().expect("running");
        let status = loop {
            match child.try_wait().expect("waiting for softverbs") {
                Some(st) => break st,
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("softverbs {:?} did not exit within {timeout:?}", self.stdout);
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        if let Some(t) = self.stdout_reader.take() {
            let _ = t.join();
        }
        self.stdout.extend(self.lines.try_iter());
        let stderr = self.stderr_reader.take().and_then(|t| t.join().ok()).unwrap_or_default();
        Finished { status, stdout: std::mem::take(&mut self.stdout).join("\n"), stderr }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
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

/// `  local address:  LID 0x0001, QPN 0x000011, PSN 0x1a2b3c, GID ::`
fn check_address_line(line: &str, which: &str) {
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
}

/// Checks `ibv_rc_pingpong`'s output: the two address lines and the two closing lines.
fn check_pingpong_output(out: &str, size: u64, iters: u64) {
    let lines: Vec<&str> = out.lines().collect();
    let find = |prefix: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in {out}"))
    };
    check_address_line(find("  local address:  "), "  local address:  ");
    check_address_line(find("  remote address: "), "  remote address: ");
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
}

/// A server and a client on one fabric, both with `extra`; both must succeed.
fn pingpong_pair(name: &str, k: u16, extra: &[&str], size: u64, iters: u64) {
    let fabric = TempFabric::new(name);
    let port = tcp_port(k).to_string();
    let mut args = vec!["pingpong", "--fabric", fabric.path(), "-p", &port, "--timeout", "20"];
    args.extend_from_slice(extra);
    let server = Proc::spawn(&[&args[..], &["--accept-timeout", "60"]].concat());
    let client = Proc::spawn(&[&args[..], &["127.0.0.1", "--connect-timeout", "30"]].concat());
    let c = client.finish(DEADLINE);
    let s = server.finish(DEADLINE);
    assert_success(&c, "the pingpong client");
    assert_success(&s, "the pingpong server");
    check_pingpong_output(&c.stdout, size, iters);
    check_pingpong_output(&s.stdout, size, iters);
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
fn devinfo_shows_an_active_port_with_a_lid_and_gid() {
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
    let lid: u16 = value("port_lid:").parse().expect("a decimal LID");
    assert_ne!(lid, 0);
    // The IPv4-mapped GID ::ffff:10.0.x.y as eight groups, with the LID in the last one.
    let gid = value("GID[  0]:");
    let expect = format!("0000:0000:0000:0000:0000:ffff:0a00:{lid:04x}");
    assert!(gid.starts_with(&expect), "GID {gid:?}, expected {expect}");
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
    pingpong_pair("pp-poll", 1, &["-n", "200", "-s", "64"], 64, 200);
}

#[test]
fn pingpong_with_completion_events() {
    pingpong_pair("pp-events", 2, &["-n", "200", "-s", "64", "-e"], 64, 200);
}

#[test]
fn pingpong_multi_packet_messages() {
    pingpong_pair("pp-mtu", 3, &["-n", "50", "-m", "256", "-s", "5000"], 5000, 50);
}

#[test]
fn pingpong_by_gid() {
    pingpong_pair("pp-gid", 4, &["-n", "50", "-s", "64", "-g", "0"], 64, 50);
}

#[test]
fn pingpong_client_without_server_fails_in_time() {
    let fabric = TempFabric::new("pp-noserver");
    let port = tcp_port(5).to_string();
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
    let port = tcp_port(6).to_string();
    let common = ["pingpong", "--fabric", fabric.path(), "-p", &port, "-n", "100000000"];
    let server = Proc::spawn(&[&common[..], &["-s", "64", "--timeout", "3"]].concat());
    let mut client = Proc::spawn(&[&common[..], &["-s", "64", "127.0.0.1"]].concat());
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
    let port = tcp_port(7).to_string();
    let mut server = Proc::spawn(&[
        "pingpong",
        "--fabric",
        fabric.path(),
        "-p",
        &port,
        "--accept-timeout",
        "60",
    ]);
    server.wait_for_line("local address:", DEADLINE);
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
    // The header carries the GID of the port (LID 1), as ibv_query_gid reports it.
    assert!(line.split_whitespace().any(|w| w == "::ffff:10.0.0.1"), "{line:?}");

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
fn demo_between_processes() {
    let fabric = TempFabric::new("demo");
    let f = run(&["demo", "--fabric", fabric.path()]);
    assert_success(&f, "demo");
    assert!(f.stdout.contains("All five operations completed"), "{f:#?}");
}

#[test]
fn demo_in_process() {
    let f = run(&["demo", "--in-process"]);
    assert_success(&f, "demo --in-process");
    assert!(f.stdout.contains("All five operations completed"), "{f:#?}");
}

#[test]
fn demo_refuses_a_device_it_cannot_use() {
    let f = run(&["demo", "--in-process", "-d", "nosuch"]);
    assert_eq!(f.status.code(), Some(2), "{f:#?}");
    assert!(f.stderr.contains("nosuch"), "{f:#?}");
}
