//! What the C-library tests share: the built `libibverbs.so.1` in a directory of its own, a
//! private fabric, the system tools (skipped with a note when absent, a failure with
//! `SOFTVERBS_REQUIRE_C=1`), and two-process runs with bounded waits that kill what they
//! started, even when a test fails.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The directory cargo put this test's crate outputs in (`target/<profile>/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The cdylib cargo built for this package: in `target/<profile>/deps/` when cargo built it
/// for these tests, also in `target/<profile>/` when it was built on its own; the newer one.
pub fn built_library() -> PathBuf {
    let dir = target_dir();
    let found = [dir.join("libsoftverbs_ibverbs.so"), dir.join("deps/libsoftverbs_ibverbs.so")]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max();
    match found {
        Some((_, p)) => p,
        None => panic!(
            "{}: libsoftverbs_ibverbs.so was not built (cargo test builds it)",
            dir.display()
        ),
    }
}

/// Whether a missing C tool is a failure (`SOFTVERBS_REQUIRE_C=1`, as CI sets) or a skip.
fn required() -> bool {
    std::env::var("SOFTVERBS_REQUIRE_C").as_deref() == Ok("1")
}

/// `name` on PATH, or None after saying on stderr that `test` skips it (a panic instead with
/// `SOFTVERBS_REQUIRE_C=1`).
pub fn tool(test: &str, name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()));
    if found.is_none() {
        if required() {
            panic!("SOFTVERBS_REQUIRE_C=1 but {name} is not on PATH: apt-get install {package}");
        }
        eprintln!("{test}: skipped: {name} is not on PATH (apt-get install {package}; SOFTVERBS_REQUIRE_C=1 makes this an error)");
    }
    found
}

/// `path` exists, or as [`tool`] for a missing file.
pub fn file(test: &str, path: &str, package: &str) -> Option<PathBuf> {
    if Path::new(path).exists() {
        return Some(PathBuf::from(path));
    }
    if required() {
        panic!("SOFTVERBS_REQUIRE_C=1 but {path} is missing: apt-get install {package}");
    }
    eprintln!("{test}: skipped: {path} is missing (apt-get install {package}; SOFTVERBS_REQUIRE_C=1 makes this an error)");
    None
}

/// A directory holding `libibverbs.so.1` (the built library) and a private fabric directory:
/// what `softverbs run` sets up, per test.
pub struct Env {
    pub lib: tempfile::TempDir,
    pub fabric: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let lib = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(built_library(), lib.path().join("libibverbs.so.1"))
            .expect("symlink");
        let fabric = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(fabric.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        Env { lib, fabric }
    }

    /// A command for `program` that loads softverbs as libibverbs.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env("LD_LIBRARY_PATH", self.lib.path())
            .env("SOFTVERBS_FABRIC", self.fabric.path())
            .env_remove("RUST_LOG")
            .env_remove("SOFTVERBS_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run `program args` to the end, within `limit`.
    pub fn run(&self, program: &Path, args: &[&str], limit: Duration) -> Output {
        let child = self.command(program).args(args).spawn().expect("spawn");
        finish(Guard(Some(child)), limit, &format!("{} {}", program.display(), args.join(" ")))
    }
}

/// A child process killed (and reaped) when dropped, so a failing test leaves none behind.
pub struct Guard(pub Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait (polling every 20 ms) until the child ends or `limit` passes: whether it ended.
pub fn ended_within(g: &mut Guard, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let c = g.0.as_mut().expect("child");
        if c.try_wait().expect("try_wait").is_some() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for the child within `limit` and collect its output; panic (killing it) past that.
pub fn finish(mut g: Guard, limit: Duration, what: &str) -> Output {
    let ended = ended_within(&mut g, limit);
    let mut c = g.0.take().expect("child");
    if ended {
        return c.wait_with_output().expect("output");
    }
    let _ = c.kill();
    let out = c.wait_with_output().expect("output");
    panic!(
        "{what}: still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run the C program `exe` in `env` with direct reach `reach` (`SOFTVERBS_REACH`), at most 60 s
/// (killed past that, the test failing with its output): its stdout, after checking that it
/// exited 0 (the failure shows both outputs, labelled with the reach).
pub fn run_reach(env: &Env, exe: &Path, reach: &str, test: &str) -> (String, String) {
    let mut cmd = env.command(exe);
    cmd.env("SOFTVERBS_REACH", reach);
    let out = finish(Guard(Some(cmd.spawn().expect("spawn"))), Duration::from_secs(60), test);
    let (o, e) = text(&out);
    assert!(out.status.success(), "[reach {reach}] {:?}\n{o}{e}", out.status);
    (o, e)
}

/// A TCP port nobody listens on now (tests run in parallel, each exchange on its own port).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The text of an output's stdout and stderr.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Run a server (`program server_args`) and a client (`program client_args localhost`, which
/// the tool connects with, retried while the server is not yet listening) to the end, each
/// within `limit`; both must exit 0. Returns (server, client) output.
pub fn pair(
    env: &Env,
    program: &Path,
    server_args: &[&str],
    client_args: &[&str],
    limit: Duration,
) -> (Output, Output) {
    pair_of(env, (program, server_args), (program, client_args), limit)
}

/// [`pair`] with a different program on each side: (program, args) of the server, then of the
/// client.
pub fn pair_of(
    env: &Env,
    (server_prog, server_args): (&Path, &[&str]),
    (program, client_args): (&Path, &[&str]),
    limit: Duration,
) -> (Output, Output) {
    let what =
        format!("{} {} / {}", server_prog.display(), server_args.join(" "), program.display());
    let server =
        Guard(Some(env.command(server_prog).args(server_args).spawn().expect("spawn server")));
    let start = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(150));
        let out = env.run(program, client_args, limit);
        let (o, e) = text(&out);
        let refused = !out.status.success()
            && (e.contains("Couldn't connect")
                || o.contains("Couldn't connect")
                || e.contains("Unable to open file descriptor"));
        if !refused || start.elapsed() > Duration::from_secs(5) {
            break out;
        }
    };
    let server = finish(server, limit, &what);
    let (so, se) = text(&server);
    let (co, ce) = text(&client);
    assert!(
        server.status.success() && client.status.success(),
        "{what}: server {:?}, client {:?}\nserver stdout:\n{so}\nserver stderr:\n{se}\nclient stdout:\n{co}\nclient stderr:\n{ce}",
        server.status,
        client.status
    );
    (server, client)
}

/// `tests/c/NAME.c` compiled by the system C compiler against `<infiniband/verbs.h>` (with
/// `-Wall`, `-libverbs` and `libs`) into a temporary directory: the directory (the program
/// goes with it) and the program. None, the test skipped, when the compiler or the header is
/// missing (an error under `SOFTVERBS_REQUIRE_C=1`); a compile error fails the test.
pub fn build_c(test: &str, name: &str, libs: &[&str]) -> Option<(tempfile::TempDir, PathBuf)> {
    let cc = tool(test, "cc", "gcc")?;
    file(test, "/usr/include/infiniband/verbs.h", "libibverbs-dev")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new(cc)
        .arg("-Wall")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .args(libs)
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc {name}.c:\n{}", String::from_utf8_lossy(&out.stderr));
    Some((dir, exe))
}

/// Runs the built C program `exe` with `args` and direct reach `reach` (`SOFTVERBS_REACH`),
/// `extra` added to its environment, on a fabric of its own, for at most 60 s; panics unless
/// it exits 0, showing what it printed. Its stdout and stderr.
pub fn run_c(
    exe: &Path,
    args: &[&str],
    reach: &str,
    extra: &[(&str, &str)],
    what: &str,
) -> (String, String) {
    let env = Env::new();
    let mut cmd = env.command(exe);
    cmd.args(args).env("SOFTVERBS_REACH", reach).envs(extra.iter().copied());
    let out = finish(Guard(Some(cmd.spawn().expect("spawn"))), Duration::from_secs(60), what);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{what}, reach {reach}: {:?}\n{o}{e}", out.status);
    (o, e)
}

/// A C program of `tests/c/` built as `name` whose argument names a case: each of `cases`
/// runs with direct reach on and off, and must print the case's lines, then `done`.
pub fn run_cases(test: &str, name: &str, cases: &[(&str, &str)]) {
    let Some((_dir, exe)) = build_c(test, name, &[]) else { return };
    for reach in ["1", "0"] {
        for (case, want) in cases {
            let (o, e) = run_c(&exe, &[case], reach, &[], case);
            assert_eq!(o, format!("{want}done\n"), "{case}, reach {reach}\n{e}");
        }
    }
}
