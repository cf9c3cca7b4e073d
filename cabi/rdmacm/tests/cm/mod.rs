//! What the CM tests share: an Env that also holds this package's librdmacm.so.1, a bounded
//! wait for a listener's name, a server and a client run as two processes (a server that does
//! not end is shown with its threads' stacks and the client's output), what the CM left
//! behind, rping's payloads, the lines ucmatose and udaddy print, and C test programs compiled
//! and run.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, text, tool, Env, Guard};

/// An Env whose library directory also holds this package's librdmacm.so.1.
pub fn env() -> Env {
    let e = Env::new();
    let cm = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let cm = if cm.exists() { cm } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    assert!(cm.exists(), "{}: librdmacm was not built", cm.display());
    std::os::unix::fs::symlink(cm, e.lib.path().join("librdmacm.so.1")).expect("symlink");
    e
}

/// Wait (at most 10 s) until `name` is a listening name in the fabric's CM directory, then a
/// moment more for the server to reach its event loop (the name appears at `rdma_bind_addr`).
/// `name` is `a.b.c.d:port`, or `:port` for a listener on any address.
pub fn wait_listening(env: &Env, name: &str, server: &mut Guard) {
    let dir = env.fabric.path().join("cm");
    let found = || match name.starts_with(':') {
        true => std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(name)),
        false => std::fs::symlink_metadata(dir.join(name)).is_ok(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !found() {
        let exited = server.0.as_mut().expect("server").try_wait().expect("try_wait");
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "the server never listened as {name} ({exited:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Run `server` (program and arguments) and, once it listens as `name` ([`wait_listening`]),
/// `client`; each within `limit`. (server, client) output, whatever their exit statuses.
pub fn run_pair(
    env: &Env,
    server: (&Path, &[&str]),
    name: &str,
    client: (&Path, &[&str]),
    limit: Duration,
) -> (Output, Output) {
    run_pair_unless(env, server, name, client, limit, None).expect("no client failure ends it")
}

/// [`run_pair`], except that a client that failed with `gives_up` in its stderr ends the run
/// at once: its server, which waits for what that client will never send, is killed, and the
/// answer is None.
pub fn run_pair_unless(
    env: &Env,
    (sp, sargs): (&Path, &[&str]),
    name: &str,
    (cp, cargs): (&Path, &[&str]),
    limit: Duration,
    gives_up: Option<&str>,
) -> Option<(Output, Output)> {
    let mut server = Guard(Some(env.command(sp).args(sargs).spawn().expect("spawn server")));
    wait_listening(env, name, &mut server);
    let mut client = Guard(Some(env.command(cp).args(cargs).spawn().expect("spawn client")));
    let what = format!("{} {}", sp.display(), sargs.join(" "));
    if !common::ended_within(&mut client, limit) {
        client_hung(client, server, limit, &format!("{} {}", cp.display(), cargs.join(" ")));
    }
    let client = client.0.take().expect("client").wait_with_output().expect("output");
    let gave_up = gives_up.is_some_and(|say| {
        !client.status.success() && String::from_utf8_lossy(&client.stderr).contains(say)
    });
    // The server's Guard kills it when dropped.
    (!gave_up).then(|| (finish_server(server, limit, &what, &client), client))
}

/// A client still running `limit` after it started: panic with where it and its server
/// wait (their threads' stacks, taken while both still run), and what each printed (a CI run
/// once showed only the client's output: its server was killed unseen).
pub fn client_hung(mut client: Guard, mut server: Guard, limit: Duration, what: &str) -> ! {
    let cstacks = stacks_of(client.0.as_ref().expect("client").id());
    let s = server.0.as_mut().expect("server");
    let sstate = match s.try_wait() {
        Ok(Some(status)) => format!("server ended: {status}"),
        _ => format!("server still running; where it waits:\n{}", stacks_of(s.id())),
    };
    let out = |g: &mut Guard| {
        let mut c = g.0.take().expect("child");
        let _ = c.kill();
        text(&c.wait_with_output().expect("output"))
    };
    let ((co, ce), (so, se)) = (out(&mut client), out(&mut server));
    panic!(
        "{what}: still running after {limit:?}.\nWhere it waited:\n{cstacks}\n{sstate}\n\
         client stdout:\n{co}\nclient stderr:\n{ce}\nserver stdout:\n{so}\nserver stderr:\n{se}"
    );
}

/// [`run_pair`] with both to exit 0: (server, client) output, each as (stdout, stderr).
pub fn pair_ok(
    env: &Env,
    server: (&Path, &[&str]),
    name: &str,
    client: (&Path, &[&str]),
    limit: Duration,
) -> ((String, String), (String, String)) {
    let (s, c) = run_pair(env, server, name, client, limit);
    both_ok(&server.0.display().to_string(), &s, &c)
}

/// Both of a pair's processes exited 0 (else a panic with `what`, both statuses and outputs):
/// (server, client) output, each as (stdout, stderr).
pub fn both_ok(what: &str, s: &Output, c: &Output) -> ((String, String), (String, String)) {
    let ((so, se), (co, ce)) = (text(s), text(c));
    assert!(
        s.status.success() && c.status.success(),
        "{what}: client {:?}:\n{co}{ce}\nserver {:?}:\n{so}{se}",
        c.status,
        s.status
    );
    ((so, se), (co, ce))
}

/// Wait for the server within `limit` after its client ended. One still running is killed,
/// and the panic says what it was doing: its threads' stacks (gdb, when installed; else the
/// kernel's word on each thread), its output so far, and the client's status and output (a
/// server often waits for something its client never sent because the client failed).
pub fn finish_server(mut g: Guard, limit: Duration, what: &str, client: &Output) -> Output {
    if common::ended_within(&mut g, limit) {
        return g.0.take().expect("server").wait_with_output().expect("output");
    }
    // Still in its Guard while gdb looks, so that it is killed whatever happens.
    let stacks = stacks_of(g.0.as_ref().expect("server").id());
    let mut c = g.0.take().expect("server");
    let _ = c.kill();
    let out = c.wait_with_output().expect("output");
    let ((so, se), (co, ce)) = (text(&out), text(client));
    panic!(
        "{what}: still running {limit:?} after its client ended.\nWhere it waited:\n{stacks}\n\
         server stdout (a pipe: what the program had not flushed died with it):\n{so}\n\
         server stderr:\n{se}\nclient {}, stdout:\n{co}\nclient stderr:\n{ce}",
        client.status
    );
}

/// The threads of process `pid`: `gdb -batch` backtraces (within 60 s) when gdb is on PATH and
/// may attach; else each thread's name, state and kernel wait channel from /proc.
fn stacks_of(pid: u32) -> String {
    let gdb = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("gdb")).find(|f| f.is_file()));
    if let Some(gdb) = gdb {
        let child = Command::new(gdb)
            .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        if let Ok(child) = child {
            let mut g = Guard(Some(child));
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let c = g.0.as_mut().expect("gdb");
                if c.try_wait().ok().flatten().is_some() {
                    let out = g.0.take().expect("gdb").wait_with_output().expect("gdb output");
                    let bt = String::from_utf8_lossy(&out.stdout).into_owned();
                    if bt.contains("Thread ") {
                        return bt;
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let mut lines: Vec<String> = tasks
        .map(|t| {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            let stat = read("stat");
            let state =
                stat.rsplit_once(')').map_or("?", |(_, r)| r.trim_start().get(..1).unwrap_or("?"));
            format!(
                "thread {} ({}): state {state}, waits in {}",
                t.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan").trim()
            )
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// What the CM left in the fabric's directory (nothing, once every process destroyed its ids
/// and channels).
pub fn leftovers(env: &Env) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(env.fabric.path().join("cm"))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

/// The payload rping sends as ping `n` (rping.c: the ping number, then letters from 'A' + n,
/// wrapping after 'z', up to the 64-byte buffer's end less its NUL).
pub fn ping_text(n: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = 65 + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c == 122 { 65 } else { c + 1 };
    }
    s
}

/// Each of `want` is a whole line of `out` (`who`'s output, shown if one is not).
pub fn assert_lines(who: &str, out: &str, want: &[&str]) {
    for w in want {
        assert!(out.lines().any(|l| l == *w), "{who}: no line `{w}`:\n{out}");
    }
}

/// ucmatose's server and client (output each) connected, moved their data and disconnected.
pub fn assert_ucmatose(server: &str, client: &str) {
    assert_lines(
        "server",
        server,
        &["cmatose: starting server", "data transfers complete", "disconnected", "return status 0"],
    );
    assert_lines(
        "client",
        client,
        &["cmatose: connecting", "data transfers complete", "return status 0"],
    );
}

/// udaddy's server and client (output each) resolved each other and exchanged datagrams both
/// ways.
pub fn assert_udaddy(server: &str, client: &str) {
    assert_lines(
        "server",
        server,
        &["sending replies", "data transfers complete", "return status 0"],
    );
    assert_lines(
        "client",
        client,
        &[
            "initiating data transfers",
            "receiving data transfers",
            "data transfers complete",
            "return status 0",
        ],
    );
}

/// Compile the C program `src` (relative to this package) against the system headers as
/// `name` in `env`'s library directory; None (skipped with a note) without a C compiler or
/// librdmacm-dev.
pub fn compile(test: &str, env: &Env, src: &str, name: &str) -> Option<PathBuf> {
    let cc = tool(test, "cc", "gcc")?;
    common::file(test, "/usr/include/rdma/rdma_cma.h", "librdmacm-dev")?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let exe = env.lib.path().join(name);
    let out = Command::new(cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// Compile `tests/c/<name>.c` ([`compile`]) and run it in `env` with `args` (30 s at most).
pub fn run_c(test: &str, env: &Env, name: &str, args: &[&str]) -> Option<Output> {
    let exe = compile(test, env, &format!("tests/c/{name}.c"), name)?;
    Some(env.run(&exe, args, Duration::from_secs(30)))
}

/// Whether `stderr` is what an rping client may print after its last ping: nothing, or the
/// DISCONNECTED line of its CM thread. That line is rping's own race (`tests/tools.rs` says
/// why). It never reads "server": rping frees its control block after `rdma_destroy_id`, which
/// waits for the CM thread to acknowledge the event it is handling (`ep.rs`,
/// `destroy_id_waits_for_its_events_to_be_acknowledged`).
pub fn rping_client_closing(stderr: &str) -> bool {
    matches!(stderr, "" | "client DISCONNECT EVENT...\n")
}
