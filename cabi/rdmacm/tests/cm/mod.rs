//! What the CM tests of ep.rs, qpattr.rs and ipv6.rs share: an Env that also holds this
//! package's librdmacm.so.1, a bounded wait for a listener's name, what the CM left behind,
//! rping's payloads, and a C test program compiled and run.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{self, tool, Env, Guard};

/// An Env whose library directory also holds this package's librdmacm.so.1.
pub fn env() -> Env {
    let e = Env::new();
    let cm = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let cm = if cm.exists() { cm } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    assert!(cm.exists(), "{}: librdmacm was not built", cm.display());
    std::os::unix::fs::symlink(cm, e.lib.path().join("librdmacm.so.1")).expect("symlink");
    e
}

/// Wait (at most 10 s) until `name` (`a.b.c.d:port`) is a listening name in the fabric's CM
/// directory, then a moment more for the server to reach its event loop.
pub fn wait_listening(env: &Env, name: &str, server: &mut Guard) {
    let path = env.fabric.path().join("cm").join(name);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::symlink_metadata(&path).is_err() {
        let exited = server.0.as_mut().expect("server").try_wait().expect("try_wait");
        assert!(exited.is_none() && Instant::now() < deadline, "never listened ({exited:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
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

/// Compile `tests/c/<name>.c` against the system headers and run it in `env` with `args`
/// (30 s at most); None (skipped with a note) without a C compiler or librdmacm-dev.
pub fn run_c(test: &str, env: &Env, name: &str, args: &[&str]) -> Option<Output> {
    let cc = tool(test, "cc", "gcc")?;
    common::file(test, "/usr/include/rdma/rdma_cma.h", "librdmacm-dev")?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = env.lib.path().join(name);
    let out = Command::new(cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(env.run(&exe, args, Duration::from_secs(30)))
}
