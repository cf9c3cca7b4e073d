//! Launching a peer — a second process (or a thread) that runs the other side of a
//! connection — and talking to it line by line: the one way the demo, the benchmarks and the
//! multi-process tests start their other side, swap QP information and make sure nothing is
//! left behind.
//!
//! The guarantees every user relies on: each wait for the peer has a deadline (its output is
//! read on a thread of its own, so a silent peer is a timeout, not a hang); a [`Peer`] that is
//! dropped, also while a test panics, kills and reaps its process; a [`FabricDir`] this process
//! created is removed with every segment in it when dropped.
//!
//! The line protocol: the peer speaks first with `INFO <qpinfo> [<addr> <rkey>]`
//! ([`info_line`]), the launcher answers with its own `INFO`, both connect, and the peer says
//! `READY`; what follows is the user's own.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use verbs_api::conn::QpInfo;

/// How often a bounded wait for an exit looks again.
const POLL: Duration = Duration::from_millis(2);
/// How long a peer that closed its stdout has to exit before a message says how it ended.
const EXIT_GRACE: Duration = Duration::from_secs(2);

// ---------------- QP information on one line ----------------

/// The `INFO <qpinfo> [<addr> <rkey>]` line a side sends: its QP's address ([`QpInfo::to_wire`])
/// and, for a side that offers one-sided access, its MR's address and rkey in hex.
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

/// A QP's information and, when the side offers one, its MR's address and rkey.
pub type PeerInfo = (QpInfo, Option<(u64, u32)>);

// ---------------- the launcher's side ----------------

/// What becomes of a peer process's stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// Shared with this process (a command's peer reports its errors on the same terminal).
    Inherit,
    /// Collected, for [`Peer::stderr`] and the messages about the peer (tests).
    Capture,
}

/// What runs the peer.
enum Runner {
    Process {
        child: Child,
        status: Option<ExitStatus>,
        stderr: Option<Arc<Mutex<String>>>,
        stderr_thread: Option<JoinHandle<()>>,
    },
    Thread(Option<JoinHandle<Result<(), String>>>),
    /// A peer on another host, over a TCP connection (`demo --connect`).
    Remote(std::net::TcpStream),
}

/// The other side of a connection, in a child process or on a thread, spoken to in lines: its
/// input, its output as lines that arrive through a reader thread (so every wait has a
/// deadline), and the process or thread itself. Dropping it closes the peer's input and kills
/// and reaps its process.
pub struct Peer {
    name: String,
    to: Option<Box<dyn Write + Send>>,
    lines: Receiver<String>,
    runner: Runner,
}

/// Forwards `from`'s lines to a channel until it ends (or nobody listens any more).
fn read_lines(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Peer {
    /// Starts `cmd` (its program, arguments and environment set by the caller) with piped stdin
    /// and stdout; `name` appears in every message about it.
    pub fn spawn(name: &str, mut cmd: Command, stderr: Stderr) -> Result<Peer, String> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        cmd.stderr(match stderr {
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Capture => Stdio::piped(),
        });
        let mut child = cmd.spawn().map_err(|e| {
            format!("starting {name} ({}): {e}", cmd.get_program().to_string_lossy())
        })?;
        let to = child.stdin.take().expect("stdin is piped");
        let lines = read_lines(child.stdout.take().expect("stdout is piped"));
        let (stderr, stderr_thread) = match child.stderr.take() {
            Some(mut pipe) => {
                let text = Arc::new(Mutex::new(String::new()));
                let sink = text.clone();
                let thread = std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match pipe.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => sink
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push_str(&String::from_utf8_lossy(&buf[..n])),
                        }
                    }
                });
                (Some(text), Some(thread))
            }
            None => (None, None),
        };
        Ok(Peer {
            name: name.to_string(),
            to: Some(Box::new(to)),
            lines,
            runner: Runner::Process { child, status: None, stderr, stderr_thread },
        })
    }

    /// Runs `side` on a thread, its input and output joined to this `Peer` by pipes: the same
    /// conversation as with a process, for a peer in this process (`demo --in-process`).
    pub fn thread<F>(name: &str, side: F) -> Result<Peer, String>
    where
        F: FnOnce(&mut dyn BufRead, &mut dyn Write) -> Result<(), String> + Send + 'static,
    {
        let (their_in, to) = std::io::pipe().map_err(|e| format!("a pipe for {name}: {e}"))?;
        let (from, mut their_out) =
            std::io::pipe().map_err(|e| format!("a pipe for {name}: {e}"))?;
        let handle = std::thread::spawn(move || {
            let mut input = BufReader::new(their_in);
            side(&mut input, &mut their_out)
        });
        Ok(Peer {
            name: name.to_string(),
            to: Some(Box::new(to)),
            lines: read_lines(from),
            runner: Runner::Thread(Some(handle)),
        })
    }

    /// A peer on another host that speaks the same lines over the TCP connection `stream`
    /// (`softverbs demo --connect` to a `demo --server`): there is no process or thread here to
    /// wait for or kill; [`Peer::finish`] closes the connection.
    pub fn stream(name: &str, stream: std::net::TcpStream) -> Result<Peer, String> {
        let clone = |s: &std::net::TcpStream| {
            s.try_clone().map_err(|e| format!("a second handle on the connection to {name}: {e}"))
        };
        let (to, from) = (clone(&stream)?, clone(&stream)?);
        Ok(Peer {
            name: name.to_string(),
            to: Some(Box::new(to)),
            lines: read_lines(from),
            runner: Runner::Remote(stream),
        })
    }

    /// The name messages call it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process's pid (`None` for a thread or a peer on another host).
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Runner::Process { child, .. } => Some(child.id()),
            Runner::Thread(_) | Runner::Remote(_) => None,
        }
    }

    /// What the process wrote to stderr so far (empty unless [`Stderr::Capture`]).
    pub fn stderr(&self) -> String {
        match &self.runner {
            Runner::Process { stderr: Some(s), .. } => {
                s.lock().unwrap_or_else(|e| e.into_inner()).clone()
            }
            _ => String::new(),
        }
    }

    /// Whether it is running or how it ended, and its stderr if captured: the tail of every
    /// message about the peer.
    pub fn state(&mut self) -> String {
        let status = match &mut self.runner {
            Runner::Process { status: Some(s), .. } => format!("exited: {s}"),
            Runner::Process { child, status, .. } => match child.try_wait() {
                Ok(Some(s)) => {
                    *status = Some(s);
                    format!("exited: {s}")
                }
                Ok(None) => "still running".to_string(),
                Err(e) => format!("unknown ({e})"),
            },
            Runner::Thread(Some(h)) if !h.is_finished() => "still running".to_string(),
            Runner::Thread(_) => "finished".to_string(),
            Runner::Remote(s) => match s.peer_addr() {
                Ok(a) => format!("connected from {a}"),
                Err(_) => "disconnected".to_string(),
            },
        };
        let mut s = match self.pid() {
            Some(pid) => format!("{} (pid {pid}) is {status}", self.name),
            None => format!("{} is {status}", self.name),
        };
        if let Runner::Process { stderr: Some(_), .. } = self.runner {
            s.push_str(&format!("; its stderr:\n{}", self.stderr()));
        }
        s
    }

    /// Sends one line; an error says what the peer did.
    pub fn send_line(&mut self, line: &str) -> Result<(), String> {
        let Some(to) = self.to.as_mut() else {
            return Err(format!("writing {line:?} to {}: its stdin is closed", self.name));
        };
        if let Err(e) = writeln!(to, "{line}").and_then(|_| to.flush()) {
            let state = self.state();
            return Err(format!("writing {line:?} to {}: {e}; {state}", self.name));
        }
        Ok(())
    }

    /// The next line, waiting at most `timeout`; an error (no line in time, or the peer's
    /// output closed) says what the peer did.
    pub fn recv_line(&mut self, timeout: Duration) -> Result<String, String> {
        self.recv(timeout, "line")
    }

    fn recv(&mut self, timeout: Duration, what: &str) -> Result<String, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                let state = self.state();
                Err(format!("{}: no {what} within {timeout:?}; {state}", self.name))
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The peer closed its output; give it a moment to exit so the message says how.
                self.try_wait_for(EXIT_GRACE);
                let state = self.state();
                Err(format!("{}: output closed while waiting for {what}; {state}", self.name))
            }
        }
    }

    /// The next line, which must start with `prefix`, waiting at most `timeout`.
    pub fn expect_line(&mut self, prefix: &str, timeout: Duration) -> Result<String, String> {
        let line = self.recv(timeout, &format!("{prefix:?} line"))?;
        if line.starts_with(prefix) {
            return Ok(line);
        }
        let state = self.state();
        Err(format!("{}: expected a line starting {prefix:?}, got {line:?}; {state}", self.name))
    }

    /// The rest of the next line, which must start with `word` (trimmed), at most `timeout`.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, String> {
        let line = self.expect_line(word, timeout)?;
        Ok(line[word.len()..].trim().to_string())
    }

    /// The launcher's half of the QP exchange: waits (at most `timeout`) for the peer's `INFO`
    /// line, then answers with its own.
    pub fn swap_info(
        &mut self,
        mine: &QpInfo,
        my_mr: Option<(u64, u32)>,
        timeout: Duration,
    ) -> Result<PeerInfo, String> {
        let theirs = parse_info_line(&self.expect_line("INFO ", timeout)?)
            .map_err(|e| format!("{}: {e}", self.name))?;
        self.send_line(&info_line(mine, my_mr))?;
        Ok(theirs)
    }

    /// Closes the peer's input: what it sees when this process dies, and its cue to end.
    pub fn close_stdin(&mut self) {
        self.to = None;
    }

    /// The lines the peer still writes until its output closes, at most `timeout` in all.
    pub fn remaining_lines(&mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut v = Vec::new();
        while let Ok(l) =
            self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            v.push(l);
        }
        v
    }

    /// Waits at most `timeout` for the process to exit; its status, or `None` if it still runs
    /// (or is a thread).
    pub fn try_wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let Runner::Process { child, status, stderr_thread, .. } = &mut self.runner else {
            return None;
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = *status {
                return Some(s);
            }
            match child.try_wait() {
                Ok(Some(s)) => {
                    *status = Some(s);
                    // The pipe is at EOF once the process is gone, unless a child of its own
                    // still holds it: wait for the rest of its stderr, but not for ever.
                    let end = Instant::now() + EXIT_GRACE;
                    while stderr_thread.as_ref().is_some_and(|t| !t.is_finished())
                        && Instant::now() < end
                    {
                        std::thread::sleep(POLL);
                    }
                    if stderr_thread.as_ref().is_some_and(|t| t.is_finished()) {
                        let _ = stderr_thread.take().map(JoinHandle::join);
                    }
                    return Some(s);
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Waits at most `timeout` for the process to exit; on timeout kills it and says so.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        if let Some(s) = self.try_wait_for(timeout) {
            return Ok(s);
        }
        self.kill();
        let state = self.state();
        Err(format!("{} did not exit within {timeout:?}; killed it. {state}", self.name))
    }

    /// Closes the peer's input and waits at most `timeout` for it to end well: a process with
    /// status 0 (else it is killed), a thread with `Ok` (its error is returned as `name: error`).
    pub fn finish(mut self, timeout: Duration) -> Result<(), String> {
        self.close_stdin();
        let deadline = Instant::now() + timeout;
        match &mut self.runner {
            Runner::Process { .. } => match self.try_wait_for(timeout) {
                Some(st) if st.success() => Ok(()),
                Some(st) => Err(format!("{} failed: {st}", self.name)),
                None => {
                    self.kill();
                    Err(format!("{} did not exit", self.name))
                }
            },
            Runner::Remote(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
                Ok(())
            }
            Runner::Thread(handle) => {
                let h = handle.take().expect("the thread is taken only here");
                while !h.is_finished() {
                    if Instant::now() >= deadline {
                        return Err(format!("{} did not end within {timeout:?}", self.name));
                    }
                    std::thread::sleep(POLL);
                }
                match h.join() {
                    Ok(r) => r.map_err(|e| format!("{}: {e}", self.name)),
                    Err(_) => Err(format!("the {} thread panicked", self.name)),
                }
            }
        }
    }

    /// SIGKILLs the process (if it still runs) and reaps it; its status. A thread cannot be
    /// killed: it ends when it reads the end of its input.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let Runner::Process { child, status, .. } = &mut self.runner else { return None };
        if status.is_none() {
            let _ = child.kill();
            *status = child.wait().ok();
        }
        *status
    }

    /// How the process ended, once it has been reaped.
    pub fn status(&self) -> Option<ExitStatus> {
        match &self.runner {
            Runner::Process { status, .. } => *status,
            Runner::Thread(_) | Runner::Remote(_) => None,
        }
    }

    /// The signal that ended the process, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status().and_then(|s| s.signal())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.to = None;
        self.kill();
    }
}

// ---------------- the peer's side ----------------

/// The peer's end of the line protocol: its input (stdin, or a pipe from [`Peer::thread`]) and
/// its output. Reads block: a peer waits for its launcher, whose death closes the input.
pub struct Parent<'a> {
    input: Box<dyn BufRead + 'a>,
    output: Box<dyn Write + 'a>,
}

impl Parent<'static> {
    /// This process's stdin and stdout (locked for as long as the `Parent` lives).
    pub fn stdio() -> Parent<'static> {
        Parent { input: Box::new(std::io::stdin().lock()), output: Box::new(std::io::stdout()) }
    }
}

impl<'a> Parent<'a> {
    /// Over `input` and `output`.
    pub fn new(input: &'a mut dyn BufRead, output: &'a mut dyn Write) -> Parent<'a> {
        Parent { input: Box::new(input), output: Box::new(output) }
    }

    /// Sends one line to the launcher.
    pub fn say(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.output, "{line}")
            .and_then(|_| self.output.flush())
            .map_err(|e| format!("writing to the parent: {e}"))
    }

    /// The next line; `None` at the end of the input (the launcher closed it, or died).
    pub fn line(&mut self) -> Result<Option<String>, String> {
        let mut l = String::new();
        match self.input.read_line(&mut l) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(l.trim_end().to_string())),
            Err(e) => Err(format!("reading from the parent: {e}")),
        }
    }

    /// The rest of the next line, which must start with `word` (trimmed).
    pub fn expect(&mut self, word: &str) -> Result<String, String> {
        match self.line()? {
            Some(l) => l
                .strip_prefix(word)
                .map(|s| s.trim().to_string())
                .ok_or_else(|| format!("expected {word:?} from the parent, got {l:?}")),
            None => Err(format!("stdin closed before {word:?}: the parent process is gone")),
        }
    }

    /// The next line, which must be exactly `word`.
    pub fn expect_exactly(&mut self, word: &str) -> Result<(), String> {
        match self.line()? {
            Some(l) if l == word => Ok(()),
            Some(l) => Err(format!("expected {word:?} from the parent, got {l:?}")),
            None => Err(format!("stdin closed before {word:?}: the parent process is gone")),
        }
    }

    /// The peer's half of the QP exchange: sends its `INFO` line, then reads the launcher's.
    pub fn swap_info(
        &mut self,
        mine: &QpInfo,
        my_mr: Option<(u64, u32)>,
    ) -> Result<PeerInfo, String> {
        self.say(&info_line(mine, my_mr))?;
        match self.line()? {
            Some(l) => parse_info_line(&l),
            None => Err("stdin closed before INFO: the parent process is gone".into()),
        }
    }
}

// ---------------- fabric directories ----------------

/// Where fabric directories go: /dev/shm when it exists (like the default fabric), else the
/// temporary directory.
pub fn fabric_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Removes the fabric directories `<prefix><pid>` (or `<prefix><pid>-<anything>`) in `base`
/// of earlier runs whose process is gone (a run that was killed cannot remove its own), and
/// returns them with those pids. A directory whose pid belongs to a live process, this run's
/// or another's, is left alone, as is anything else.
pub fn remove_dead_runs(base: &Path, prefix: &str) -> Vec<(PathBuf, u32)> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|p| p.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if !path.is_dir() || pid == std::process::id() || nic_model::wire::process_alive(pid) {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push((path, pid));
        }
    }
    removed
}

/// A fabric directory for one run: one this process created (mode 0700), removed with
/// everything in it when dropped, also during a panic; or one it was given, left alone.
#[derive(Debug)]
pub struct FabricDir {
    path: PathBuf,
    owned: bool,
}

impl FabricDir {
    /// Creates `name` under [`fabric_base`] (mode 0700; an existing directory of this user
    /// with that mode is reused), as a fabric creates its directory: a symbolic link or a
    /// directory of another user planted at that predictable name is refused, never followed
    /// (nor chmod'ed) and never removed.
    pub fn create(name: &str) -> Result<FabricDir, String> {
        let path = fabric_base().join(name);
        nic_model::wire::Fabric::open(Some(&path))
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        Ok(FabricDir { path, owned: true })
    }

    /// A directory someone else owns (`--fabric`, `$SOFTVERBS_FABRIC`): never removed here.
    pub fn given(path: PathBuf) -> FabricDir {
        FabricDir { path, owned: false }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every file in it but the fabric's lock file, sorted.
    pub fn segment_files(&self) -> Result<Vec<PathBuf>, String> {
        let entries = std::fs::read_dir(&self.path)
            .map_err(|e| format!("listing {}: {e}", self.path.display()))?;
        let mut v = Vec::new();
        for e in entries {
            let p = e.map_err(|e| format!("listing {}: {e}", self.path.display()))?.path();
            if p.file_name().is_some_and(|n| n != ".lock") {
                v.push(p);
            }
        }
        v.sort();
        Ok(v)
    }

    /// Waits (at most `timeout`) until no segment file is left; the error names those that
    /// are. Only this process's own devices can still remove theirs (their NIC threads do,
    /// after the last handle is dropped); a file left by an exited process never goes away.
    pub fn wait_empty(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self.segment_files()?;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "segment files left in the fabric dir after {timeout:?}: {left:?}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for FabricDir {
    fn drop(&mut self) {
        if self.owned {
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("removing fabric dir {}: {e}", self.path.display());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_api::Gid;

    fn info() -> QpInfo {
        QpInfo { lid: 3, qpn: 0x11, psn: 0x1234, gid: Gid([0; 16]) }
    }

    /// A test's directory, `sv-test-<pid>-<n>-<nanos>-<test>`, is found by the pid before its
    /// first `-`: a dead process's goes, a live one's and a name without a pid stay.
    #[test]
    fn dead_runs_are_found_by_the_pid_before_the_suffix() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let base = tmp.path();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_dir = base.join(format!("sv-test-{dead}-0-1f-some_test"));
        let live_dir = base.join(format!("sv-test-{}-0-1f-this_test", std::process::id()));
        let other = base.join("sv-test-notapid-0");
        for d in [&dead_dir, &live_dir, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(remove_dead_runs(base, "sv-test-"), vec![(dead_dir.clone(), dead)]);
        assert!(!dead_dir.exists() && live_dir.exists() && other.exists());
    }

    #[test]
    fn info_lines_round_trip_with_and_without_an_mr() {
        let with = info_line(&info(), Some((0x7f00_1000, 0xabc)));
        assert_eq!(parse_info_line(&with), Ok((info(), Some((0x7f00_1000, 0xabc)))));
        assert_eq!(parse_info_line(&info_line(&info(), None)), Ok((info(), None)));
        assert!(parse_info_line("READY").is_err());
    }

    #[test]
    fn a_run_directory_name_taken_by_a_symbolic_link_is_refused_and_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let name = format!("softverbs-peer-test-{}", std::process::id());
        let target = std::env::temp_dir().join(format!("{name}-target"));
        let _ = std::fs::remove_dir_all(&target);
        std::fs::create_dir(&target).expect("the link's target");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).expect("0755");
        let link = fabric_base().join(&name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).expect("plant the link");
        let result = FabricDir::create(&name);
        let mode = std::fs::metadata(&target).expect("stat target").permissions().mode();
        let link_kept = std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&target);
        let err = result.expect_err("a symbolic link is not a run directory");
        assert!(err.contains("symbolic link") && err.contains(&name), "{err}");
        assert_eq!(mode & 0o777, 0o755, "the link's target was not chmod'ed");
        assert!(link_kept, "the refused link was not removed either");
    }

    #[test]
    fn a_silent_peer_is_a_timeout_and_is_killed_on_drop() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let mut p = Peer::spawn("sleeper", cmd, Stderr::Capture).expect("sleep starts");
        let e = p.recv_line(Duration::from_millis(50)).expect_err("sleep says nothing");
        assert!(e.contains("no line within") && e.contains("still running"), "{e}");
        let pid = p.pid().expect("a process");
        drop(p);
        assert!(!nic_model::wire::process_alive(pid), "the dropped peer was killed and reaped");
    }

    #[test]
    fn a_thread_peer_swaps_info_and_reports_its_error() {
        let mut p = Peer::thread("target", |input, output| {
            let mut parent = Parent::new(input, output);
            let (theirs, _) = parent.swap_info(&info(), Some((1, 2)))?;
            parent.say("READY")?;
            parent.expect_exactly("DONE")?;
            Err(format!("saw qpn {:#x}", theirs.qpn))
        })
        .expect("a thread");
        let (theirs, mr) = p.swap_info(&info(), None, Duration::from_secs(5)).expect("INFO");
        assert_eq!((theirs, mr), (info(), Some((1, 2))));
        p.expect_line("READY", Duration::from_secs(5)).expect("READY");
        p.send_line("DONE").expect("DONE");
        assert_eq!(p.finish(Duration::from_secs(5)), Err("target: saw qpn 0x11".into()));
    }
}
