//! Programs that make and move their QP themselves, with `rdma_init_qp_attr` and
//! `rdma_establish`, on softverbs' librdmacm.so.1: `rping -q` exchanges 100 verified pings as two
//! processes, its client getting CONNECT_RESPONSE (not ESTABLISHED) and its server ESTABLISHED
//! after the client's rdma_establish; and c/init_qp_attr.c checks each state's attributes and
//! mask, that the two sides' PSNs and QP numbers cross over, and that a SEND then lands.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{finish, text, tool, Env, Guard};

/// An Env whose library directory also holds this package's librdmacm.so.1.
fn env() -> Env {
    let e = Env::new();
    let cm = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let cm = if cm.exists() { cm } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    assert!(cm.exists(), "{}: librdmacm was not built", cm.display());
    std::os::unix::fs::symlink(cm, e.lib.path().join("librdmacm.so.1")).expect("symlink");
    e
}

/// Wait (at most 10 s) until `name` is a listening name in the fabric's CM directory.
fn wait_listening(env: &Env, name: &str, server: &mut Guard) {
    let path = env.fabric.path().join("cm").join(name);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::symlink_metadata(&path).is_err() {
        let exited = server.0.as_mut().expect("server").try_wait().expect("try_wait");
        assert!(exited.is_none() && Instant::now() < deadline, "never listened ({exited:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The name appears at rdma_bind_addr; give the server the moment to reach its event loop.
    std::thread::sleep(Duration::from_millis(300));
}

/// The payload rping sends as ping `n` (rping.c: the ping number, then letters from 'A' + n,
/// wrapping after 'z', up to the 64-byte buffer's end less its NUL).
fn ping_text(n: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = 65 + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c == 122 { 65 } else { c + 1 };
    }
    s
}

/// `rping -s ARGS` and `rping -c -a 127.0.0.1 ARGS`, both to exit 0 within 60 s: their
/// (stdout, stderr) each, server first.
fn rping_pair(rping: &Path, args: &[&str]) -> ((String, String), (String, String)) {
    let env = env();
    let port = common::free_port().to_string();
    let mut s_args = vec!["-s", "-p", &port];
    s_args.extend_from_slice(args);
    let mut c_args = vec!["-c", "-a", "127.0.0.1", "-p", &port];
    c_args.extend_from_slice(args);
    let mut server = Guard(Some(env.command(rping).args(&s_args).spawn().expect("spawn")));
    wait_listening(&env, &format!("0.0.0.0:{port}"), &mut server);
    let client = env.run(rping, &c_args, Duration::from_secs(60));
    let server = finish(server, Duration::from_secs(60), "rping -s");
    let (c, s) = (text(&client), text(&server));
    assert!(
        client.status.success() && server.status.success(),
        "client {:?}:\n{}{}\nserver {:?}:\n{}{}",
        client.status,
        c.0,
        c.1,
        server.status,
        s.0,
        s.1
    );
    let left: Vec<_> = std::fs::read_dir(env.fabric.path().join("cm"))
        .expect("cm dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "the CM left {left:?} behind");
    (s, c)
}

#[test]
fn rping_q_moves_its_own_qp_and_exchanges_100_verified_pings() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let ((so, se), (co, ce)) = rping_pair(&rping, &["-q", "-C", "100", "-v"]);
    let want: Vec<String> = (0..100).map(|n| format!("ping data: {}", ping_text(n))).collect();
    assert_eq!(co.lines().collect::<Vec<_>>(), want, "client output");
    let want: Vec<String> =
        (0..100).map(|n| format!("server ping data: {}", ping_text(n))).collect();
    assert_eq!(so.lines().collect::<Vec<_>>(), want, "server output");
    assert_eq!(ce, "client DISCONNECT EVENT...\n");
    let mut sl: Vec<&str> = se.lines().collect();
    sl.sort();
    assert_eq!(sl, ["server DISCONNECT EVENT...", "wait for RDMA_READ_ADV state 10"], "{se}");
}

#[test]
fn rping_q_client_gets_connect_response_and_its_establish_gives_the_server_established() {
    let Some(rping) = tool("rping", "rping", "rdmacm-utils") else { return };
    let ((so, se), (co, ce)) = rping_pair(&rping, &["-q", "-C", "1", "-d"]);
    let (se, ce) = (format!("{so}{se}"), format!("{co}{ce}"));
    // rping -d names each CM event it gets ("cma_event type RDMA_CM_EVENT_... cma_id ...").
    let events = |s: &str| -> Vec<String> {
        s.lines()
            .filter_map(|l| l.strip_prefix("cma_event type "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        events(&ce),
        [
            "RDMA_CM_EVENT_ADDR_RESOLVED",
            "RDMA_CM_EVENT_ROUTE_RESOLVED",
            "RDMA_CM_EVENT_CONNECT_RESPONSE",
            "RDMA_CM_EVENT_DISCONNECTED"
        ],
        "client:\n{ce}"
    );
    assert_eq!(
        events(&se),
        [
            "RDMA_CM_EVENT_CONNECT_REQUEST",
            "RDMA_CM_EVENT_ESTABLISHED",
            "RDMA_CM_EVENT_DISCONNECTED"
        ],
        "server:\n{se}"
    );
}

#[test]
fn init_qp_attr_gives_each_states_attributes_and_mask() {
    let test = "init_qp_attr_gives_each_states_attributes_and_mask";
    let Some(cc) = tool(test, "cc", "gcc") else { return };
    let Some(_) = common::file(test, "/usr/include/rdma/rdma_cma.h", "librdmacm-dev") else {
        return;
    };
    let env = env();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/init_qp_attr.c");
    let exe = env.lib.path().join("init_qp_attr");
    let out = Command::new(cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let port = common::free_port().to_string();
    let out = env.run(&exe, &[&port], Duration::from_secs(30));
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    // IBV_QP_* mask bits: STATE 0x1, ACCESS_FLAGS 0x8, PKEY_INDEX 0x10, PORT 0x20, AV 0x80,
    // PATH_MTU 0x100, TIMEOUT 0x200, RETRY_CNT 0x400, RNR_RETRY 0x800, RQ_PSN 0x1000,
    // MAX_QP_RD_ATOMIC 0x2000, MIN_RNR_TIMER 0x8000, SQ_PSN 0x10000, MAX_DEST_RD_ATOMIC 0x20000,
    // DEST_QPN 0x100000.
    assert_eq!(
        o,
        "before connect: INIT mask 0x39 access 0 pkey 0 port 1\n\
         before connect: RTR -1 EINVAL\n\
         after connect: INIT mask 0x39 access 0xe\n\
         passive INIT mask 0x39 access 0xe pkey 0 port 1\n\
         passive RTR mask 0x129181 mtu 3 dest_qp ok rq_psn ok max_dest_rd 1 min_rnr 0 \
         dgid ok sgid_index 1\n\
         passive RTS mask 0x12e01 sq_psn set timeout 14 retry 7 rnr_retry 7 max_rd 1\n\
         active event RDMA_CM_EVENT_CONNECT_RESPONSE\n\
         active RTR mask 0x129181 dest_qp ok rq_psn ok\n\
         active RTS mask 0x12e01 sq_psn ok\n\
         passive event RDMA_CM_EVENT_ESTABLISHED\n\
         rdma_establish again: -1 EINVAL\n\
         received: self-moved QPs\n",
        "stderr:\n{e}"
    );
}
