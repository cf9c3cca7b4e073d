//! Shared helpers for the cross-crate integration tests: the deterministic data both sides of a
//! multi-process test derive from a seed, and the test's forms (panicking, with the child's
//! stderr in every message) of [`softverbs_sim::peer`]'s guards, which talk to an `sv-peer`
//! child, remove a test's fabric directory and kill its children even when the test panics. [`remote`] carries verbs calls to a device in a child process; [`surface`]
//! holds the test bodies that run on every backend.

#[cfg(doctest)]
mod docs;
pub mod remote;
pub mod surface;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softverbs_sim::conn::{ConnOpts, QpInfo};
use softverbs_sim::peer::{self, Stderr};
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

/// SplitMix64: one well-mixed word per input word (the engine's one copy).
pub use nic_model::engine::splitmix64;

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

/// The `INFO` line and its parser live with the peer launcher, [`softverbs_sim::peer`].
pub use softverbs_sim::peer::{info_line, parse_info_line};

// ---------------- two connected devices in this process ----------------

/// Two connected RC endpoints, softverbs0 (`a`, QP number exchanged as PSN 0x100) and
/// softverbs1 (`b`, 0x200), on a shared-memory fabric of the test's own: the set-up of the
/// tests that look at what goes between two soft devices (direct reach, the ICRC).
pub struct RcPair {
    /// The provider both devices were opened from (for taps, stats, direct reach).
    pub soft: nic_model::soft::Soft,
    /// softverbs0's endpoint.
    pub a: softverbs_sim::conn::Endpoint,
    /// softverbs1's endpoint.
    pub b: softverbs_sim::conn::Endpoint,
    /// The fabric directory, removed last.
    pub dir: FabricDir,
}

impl RcPair {
    /// The pair, each endpoint with `cap`, a CQ of 64 and an MR of `mr_len` bytes, connected
    /// with `opts`; `configure` runs on the provider before the devices open (e.g. to turn
    /// direct reach off).
    pub fn new(
        test: &str,
        cap: verbs_api::QpCap,
        mr_len: usize,
        opts: &ConnOpts,
        configure: impl FnOnce(&nic_model::soft::Soft),
    ) -> RcPair {
        use softverbs_sim::conn::{connect, Endpoint};
        let dir = FabricDir::new(test);
        let soft = nic_model::soft::Soft::shared_memory(Some(dir.path())).expect("soft");
        configure(&soft);
        let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
        let a = Endpoint::new(&c0, verbs_api::QpType::Rc, cap, 64, mr_len).unwrap();
        let b = Endpoint::new(&c1, verbs_api::QpType::Rc, cap, 64, mr_len).unwrap();
        let (ia, ib) = (a.info(0x100).unwrap(), b.info(0x200).unwrap());
        connect(&a.qp, 0x100, &ib, opts).unwrap();
        connect(&b.qp, 0x200, &ia, opts).unwrap();
        RcPair { soft, a, b, dir }
    }
}

// ---------------- the test's side: fabric directories and children ----------------

static DIR_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A test's own fabric directory (under /dev/shm when it exists, like the default fabric),
/// removed with everything in it when the guard drops, also during a panic: a
/// [`softverbs_sim::peer::FabricDir`] with a name of the test's and assertions for tests.
#[derive(Debug)]
pub struct FabricDir(peer::FabricDir);

impl FabricDir {
    /// Creates a fresh, empty directory (mode 0700) named after the test, and prints its path.
    pub fn new(test: &str) -> FabricDir {
        // A test process that crashed (a signal: no drop ran) left its directories; the next
        // test run removes those whose process is gone.
        for (dir, pid) in peer::remove_dead_runs(&peer::fabric_base(), "sv-test-") {
            println!(
                "[{test}] removed {}, left by test process {pid}, which is gone",
                dir.display()
            );
        }
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("sv-test-{}-{n}-{nanos:x}-{test}", std::process::id());
        let dir = peer::FabricDir::create(&name).unwrap_or_else(|e| panic!("{e}"));
        println!("[{test}] fabric dir {}", dir.path().display());
        FabricDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Every file in it but the fabric's lock file, sorted.
    pub fn segment_files(&self) -> Vec<PathBuf> {
        self.0.segment_files().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits (at most `timeout`) until no segment file is left; panics naming those that are.
    /// The wait is for this process's own devices, whose NIC threads remove their inboxes
    /// after the last handle is dropped; a file left by an exited child never goes away.
    pub fn assert_empty_within(&self, timeout: Duration) {
        self.0.wait_empty(timeout).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A child process speaking the line protocol on its stdin/stdout: a
/// [`softverbs_sim::peer::Peer`] whose stderr is collected for the messages, with the
/// panicking forms a test wants. Every wait has a deadline; dropping it kills and reaps the
/// child.
pub struct Peer(peer::Peer);

impl Peer {
    /// Starts `exe` with `args`; `name` appears in every message about it.
    pub fn spawn(name: &str, exe: &Path, args: &[String]) -> Peer {
        Peer::spawn_env(name, exe, args, &[])
    }

    /// [`Peer::spawn`] with `env` added to the child's environment.
    pub fn spawn_env(name: &str, exe: &Path, args: &[String], env: &[(&str, &str)]) -> Peer {
        let mut cmd = Command::new(exe);
        cmd.args(args).envs(env.iter().copied());
        let p = peer::Peer::spawn(name, cmd, Stderr::Capture).unwrap_or_else(|e| panic!("{e}"));
        println!(
            "[{name}] started pid {}: {} {}",
            p.pid().unwrap_or(0),
            exe.display(),
            args.join(" ")
        );
        Peer(p)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.0.pid().unwrap_or(0)
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.0.stderr()
    }

    /// Sends one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        if let Err(e) = self.0.send_line(line) {
            panic!("{e}");
        }
    }

    /// Sends one line to the child's stdin; an error says what the child did.
    pub fn try_send_line(&mut self, line: &str) -> Result<(), String> {
        self.0.send_line(line)
    }

    /// The next line from the child's stdout, waiting at most `timeout`; an error (no line in
    /// time, or stdout closed) says what the child did.
    pub fn recv_line(&mut self, timeout: Duration) -> Result<String, String> {
        self.0.recv_line(timeout)
    }

    /// Closes the child's stdin (what it sees when the test process dies).
    pub fn close_stdin(&mut self) {
        self.0.close_stdin();
    }

    /// The next line from the child's stdout, which must start with `prefix`; panics on a
    /// different line, end of output, or after `timeout`, saying what the child did.
    pub fn expect_line(&mut self, prefix: &str, timeout: Duration) -> String {
        self.0.expect_line(prefix, timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The initiator's half of the QP exchange ([`peer::Peer::swap_info`]): the child's `INFO`
    /// line, answered with `mine`; panics as [`Peer::expect_line`] does.
    pub fn swap_info(&mut self, mine: &QpInfo, timeout: Duration) -> (QpInfo, Option<(u64, u32)>) {
        self.0.swap_info(mine, None, timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits for the child to exit, at most `timeout`; on timeout kills it and panics.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        self.0.wait_exit(timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits for the child to exit with status 0 (bounded); panics with its stderr otherwise.
    pub fn wait_success(&mut self, timeout: Duration) {
        let s = self.wait_exit(timeout);
        if !s.success() {
            let state = self.0.state();
            panic!("{} failed: {state}", self.0.name());
        }
    }

    /// SIGKILLs the child (if still running) and reaps it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.0.kill()
    }

    /// Panics unless the child has exited and been reaped.
    pub fn assert_exited(&mut self) {
        if self.0.try_wait_for(Duration::ZERO).is_none() {
            let state = self.0.state();
            panic!("{} is still running at the end of the test; {state}", self.0.name());
        }
    }

    /// The signal that ended the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.0.signal()
    }
}
