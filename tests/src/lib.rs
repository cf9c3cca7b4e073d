//! Shared helpers for the cross-crate integration tests: the deterministic data both sides of a
//! multi-process test derive from a seed, the line protocol between a test and its `sv-peer`
//! child, and guards that remove a test's fabric directory and kill its children even when the
//! test panics. [`remote`] carries verbs calls to a device in a child process; [`surface`]
//! holds the test bodies that run on every backend.

pub mod remote;
pub mod surface;

use std::fs::{self, DirBuilder};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softverbs_sim::conn::{ConnOpts, QpInfo};
use verbs_api::{AccessFlags, Mtu};

// ---------------- what both processes agree on ----------------

/// Size of the target's memory region in the one-sided tests.
pub const TARGET_MR_LEN: usize = 4 << 20;
/// Bytes at the end of the target's MR that hold the atomic counters; RDMA WRITEs stay out of it.
pub const COUNTER_AREA_LEN: usize = 4096;
/// How many 8-byte counters the counter area holds.
pub const COUNTERS: usize = 16;
/// Distance between two counters (each on its own cache line).
pub const COUNTER_STRIDE: usize = 64;

/// Offset of counter `index` in an MR of `mr_len` bytes.
pub fn counter_offset(mr_len: usize, index: usize) -> usize {
    assert!(index < COUNTERS, "counter {index} exists");
    mr_len - COUNTER_AREA_LEN + index * COUNTER_STRIDE
}

/// Connection parameters both sides of the tests use (the initiator may change timeout and
/// retries): MTU 1024, so large messages are many packets, and 16 outstanding READs/atomics.
pub fn conn_opts() -> ConnOpts {
    ConnOpts {
        mtu: Mtu::Mtu1024,
        max_rd_atomic: 16,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ..ConnOpts::default()
    }
}

/// SplitMix64: one well-mixed word per input word.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small seeded PRNG (xorshift64*): the workloads are reproducible from their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix64(seed) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no values");
        self.next_u64() % n
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        lo + self.below((hi - lo) as u64 + 1) as usize
    }
    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// Random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let w = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
}

/// Fills `buf` with the seed's pattern as it lies at byte `offset` of a region: byte `p` of the
/// region is byte `p % 8` of `splitmix64(seed ^ p / 8)`, so any sub-range can be recomputed.
pub fn pattern_fill(seed: u64, offset: usize, buf: &mut [u8]) {
    let mut word = [0u8; 8];
    let mut word_index = u64::MAX;
    for (i, b) in buf.iter_mut().enumerate() {
        let p = offset + i;
        let w = (p / 8) as u64;
        if w != word_index {
            word_index = w;
            word = splitmix64(seed ^ w.wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes();
        }
        *b = word[p % 8];
    }
}

/// The seed's pattern for `len` bytes at `offset`.
pub fn pattern(seed: u64, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    pattern_fill(seed, offset, &mut v);
    v
}

/// 64-bit FNV-1a offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues a 64-bit FNV-1a hash over `bytes` (start from [`FNV_OFFSET`]).
pub fn fnv1a_update(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_update(FNV_OFFSET, bytes)
}

/// Largest ping of the ping-pong test.
pub const PING_MAX_LEN: usize = 256;

/// The `i`-th ping of the ping-pong test: 1..=256 bytes derived from `seed` and `i`.
pub fn ping_message(seed: u64, i: u64) -> Vec<u8> {
    let h = splitmix64(seed ^ i.wrapping_mul(0x9E37_79B9));
    let len = 1 + (h % PING_MAX_LEN as u64) as usize;
    pattern(h, 0, len)
}

/// What the echo peer answers to the `i`-th ping: the bytes reversed and scrambled with `i`,
/// plus one byte, so both content and length differ from the ping.
pub fn pong_message(i: u64, ping: &[u8]) -> Vec<u8> {
    let key = (i as u8) ^ 0x5A;
    let mut v: Vec<u8> = ping.iter().rev().map(|b| b ^ key).collect();
    v.push((i % 251) as u8);
    v
}

/// Whether iteration `i` of the ping-pong uses SEND_WITH_IMM, and the immediate it carries.
pub fn ping_imm(i: u64) -> Option<u32> {
    (i % 4 == 1).then_some(0xABC0_0000 ^ i as u32)
}

/// The `INFO <qpinfo> [<addr> <rkey>]` line a peer sends first.
pub fn info_line(info: &QpInfo, mr: Option<(u64, u32)>) -> String {
    match mr {
        Some((addr, rkey)) => format!("INFO {} {addr:x} {rkey:x}", info.to_wire()),
        None => format!("INFO {}", info.to_wire()),
    }
}

/// Parses [`info_line`]; the MR part is `None` when absent.
pub fn parse_info_line(line: &str) -> Result<(QpInfo, Option<(u64, u32)>), String> {
    let rest = line.strip_prefix("INFO ").ok_or_else(|| format!("expected INFO, got {line:?}"))?;
    let mut it = rest.split_whitespace();
    let info = it
        .next()
        .and_then(QpInfo::from_wire)
        .ok_or_else(|| format!("malformed QP info in {line:?}"))?;
    let mr = match (it.next(), it.next()) {
        (None, _) => None,
        (Some(a), Some(k)) => {
            let addr =
                u64::from_str_radix(a, 16).map_err(|e| format!("address in {line:?}: {e}"))?;
            let rkey = u32::from_str_radix(k, 16).map_err(|e| format!("rkey in {line:?}: {e}"))?;
            Some((addr, rkey))
        }
        (Some(_), None) => return Err(format!("address without rkey in {line:?}")),
    };
    Ok((info, mr))
}

// ---------------- the test's side: fabric directories and children ----------------

static DIR_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A test's own fabric directory (under /dev/shm when it exists, like the default fabric),
/// removed with everything in it when the guard drops, also during a panic.
#[derive(Debug)]
pub struct FabricDir {
    path: PathBuf,
}

impl FabricDir {
    /// Creates a fresh, empty directory (mode 0700) named after the test, and prints its path.
    pub fn new(test: &str) -> FabricDir {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!("sv-test-{}-{n}-{nanos:x}-{test}", std::process::id()));
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap_or_else(|e| panic!("creating fabric dir {}: {e}", path.display()));
        println!("[{test}] fabric dir {}", path.display());
        FabricDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every file in it but the fabric's lock file, sorted.
    pub fn segment_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(&self.path)
            .unwrap_or_else(|e| panic!("listing {}: {e}", self.path.display()))
            .map(|e| e.expect("reading a directory entry").path())
            .filter(|p| p.file_name().is_some_and(|n| n != ".lock"))
            .collect();
        v.sort();
        v
    }

    /// Waits (at most `timeout`) until no segment file is left; panics naming those that are.
    /// The wait is for this process's own devices, whose NIC threads remove their inboxes
    /// after the last handle is dropped; a file left by an exited child never goes away.
    pub fn assert_empty_within(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self.segment_files();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!("segment files left in the fabric dir after {timeout:?}: {left:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for FabricDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            eprintln!("removing fabric dir {}: {e}", self.path.display());
        }
    }
}

/// A child process speaking the line protocol on its stdin/stdout. Its stdout lines arrive
/// through a reader thread so every wait has a deadline; its stderr is collected for panic
/// messages. Dropping it kills and reaps the child.
pub struct Peer {
    name: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_thread: Option<JoinHandle<()>>,
}

impl Peer {
    /// Starts `exe` with `args`; `name` appears in every message about it.
    pub fn spawn(name: &str, exe: &Path, args: &[String]) -> Peer {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({}): {e}", exe.display()));
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let stderr_thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match stderr_pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
        });
        println!("[{name}] started pid {}: {} {}", child.id(), exe.display(), args.join(" "));
        Peer {
            name: name.to_string(),
            child: Some(child),
            status: None,
            stdin: Some(stdin),
            lines,
            stderr,
            stderr_thread: Some(stderr_thread),
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn state(&mut self) -> String {
        let status = match (&self.status, self.child.as_mut()) {
            (Some(s), _) => format!("exited: {s}"),
            (None, Some(c)) => match c.try_wait() {
                Ok(Some(s)) => {
                    self.status = Some(s);
                    format!("exited: {s}")
                }
                Ok(None) => "still running".to_string(),
                Err(e) => format!("unknown ({e})"),
            },
            (None, None) => "gone".to_string(),
        };
        format!("{} (pid {}) is {status}; its stderr:\n{}", self.name, self.pid(), self.stderr())
    }

    /// Sends one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        if let Err(e) = self.try_send_line(line) {
            panic!("{e}");
        }
    }

    /// Sends one line to the child's stdin; an error says what the child did.
    pub fn try_send_line(&mut self, line: &str) -> Result<(), String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(format!("writing {line:?} to {}: its stdin is closed", self.name));
        };
        if let Err(e) = writeln!(stdin, "{line}").and_then(|_| stdin.flush()) {
            let state = self.state();
            return Err(format!("writing {line:?} to {}: {e}; {state}", self.name));
        }
        Ok(())
    }

    /// The next line from the child's stdout, waiting at most `timeout`; an error (no line in
    /// time, or stdout closed) says what the child did.
    pub fn recv_line(&mut self, timeout: Duration) -> Result<String, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                let state = self.state();
                Err(format!("{}: no line within {timeout:?}; {state}", self.name))
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The child closed stdout; give it a moment to exit so the message says how.
                self.try_wait_for(Duration::from_secs(2));
                let state = self.state();
                Err(format!("{}: stdout closed; {state}", self.name))
            }
        }
    }

    /// Closes the child's stdin (what it sees when the test process dies).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next line from the child's stdout, which must start with `prefix`; panics on a
    /// different line, end of output, or after `timeout`, saying what the child did.
    pub fn expect_line(&mut self, prefix: &str, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) if line.starts_with(prefix) => line,
            Ok(line) => {
                let state = self.state();
                panic!("{}: expected a line starting {prefix:?}, got {line:?}; {state}", self.name)
            }
            Err(RecvTimeoutError::Timeout) => {
                let state = self.state();
                panic!("{}: no {prefix:?} line within {timeout:?}; {state}", self.name)
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The child closed stdout; give it a moment to exit so the message says how.
                self.try_wait_for(Duration::from_secs(2));
                let state = self.state();
                panic!("{}: stdout closed while waiting for {prefix:?}; {state}", self.name)
            }
        }
    }

    fn try_wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.status {
                return Some(s);
            }
            let child = self.child.as_mut()?;
            match child.try_wait() {
                Ok(Some(s)) => {
                    self.status = Some(s);
                    if let Some(t) = self.stderr_thread.take() {
                        // The pipe is at EOF once the child is gone (it starts no processes).
                        let _ = t.join();
                    }
                    return Some(s);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Ok(None) => return None,
                Err(e) => panic!("waiting for {}: {e}", self.name),
            }
        }
    }

    /// Waits for the child to exit, at most `timeout`; on timeout kills it and panics.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(s) = self.try_wait_for(timeout) {
            return s;
        }
        self.kill();
        let state = self.state();
        panic!("{} did not exit within {timeout:?}; killed it. {state}", self.name);
    }

    /// Waits for the child to exit with status 0 (bounded); panics with its stderr otherwise.
    pub fn wait_success(&mut self, timeout: Duration) {
        let s = self.wait_exit(timeout);
        if !s.success() {
            let state = self.state();
            panic!("{} failed: {state}", self.name);
        }
    }

    /// SIGKILLs the child (if still running) and reaps it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        let child = self.child.as_mut()?;
        let _ = child.kill();
        let s = child.wait().ok();
        self.status = s;
        s
    }

    /// Panics unless the child has exited and been reaped.
    pub fn assert_exited(&mut self) {
        if self.child.is_some() && self.try_wait_for(Duration::ZERO).is_none() {
            let state = self.state();
            panic!("{} is still running at the end of the test; {state}", self.name);
        }
    }

    /// The signal that ended the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stdin = None;
        self.kill();
    }
}
