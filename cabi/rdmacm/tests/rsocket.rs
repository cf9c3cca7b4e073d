//! The rsocket API (issue 30), with rdma-core's own rsocket tools unmodified as a server and a
//! client process each: `rstream` (its default latency and bandwidth runs, blocking and
//! non-blocking, data verified), `riostream` (riomap/riowrite), `rcopy` (a file copied, its
//! bytes compared); and a C program for the edge cases (end of stream, a write to a closed
//! peer, a bad descriptor). Each with direct reach on and off, the same outcome both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cm::leftovers;
use common::tool;

/// The `softverbs` binary, which `softverbs run` needs: None (with a note) when it is not built
/// (this package's tests alone do not build it; `cargo test --workspace` does), a failure when
/// SOFTVERBS_REQUIRE_C=1 says it must be there.
fn softverbs(test: &str) -> Option<PathBuf> {
    let bin = common::target_dir().join("softverbs");
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var("SOFTVERBS_REQUIRE_C").as_deref() != Ok("1"),
        "{test}: {} is not built (cargo test --workspace builds it)",
        bin.display()
    );
    eprintln!("{test}: the softverbs binary is not built: the programs run with LD_LIBRARY_PATH");
    None
}

/// A command running `prog` in `env`'s fabric with SOFTVERBS_REACH=`reach`: through
/// `softverbs run --fabric` when `run` names the binary (it sets the library path itself),
/// else with the Env's LD_LIBRARY_PATH.
fn command(env: &common::Env, run: Option<&Path>, prog: &Path, reach: &str) -> Command {
    let mut c = match run {
        Some(bin) => {
            let mut c = env.command(bin);
            c.env_remove("LD_LIBRARY_PATH").env_remove("SOFTVERBS_FABRIC");
            c.arg("run").arg("--fabric").arg(env.fabric.path()).arg("--").arg(prog);
            c
        }
        None => env.command(prog),
    };
    c.env("SOFTVERBS_REACH", reach);
    c
}

/// Run `prog` as a server (`sargs`) and client (`cargs` then `-s 127.0.0.1`) on a fresh port
/// with SOFTVERBS_REACH=`reach` (through `softverbs run` when `run` names it); both must exit
/// 0. (server, client) stdout.
fn rs_pair(
    prog: &Path,
    run: Option<&Path>,
    (sargs, cargs): (&[&str], &[&str]),
    reach: &str,
    limit: Duration,
) -> (String, String) {
    let env = cm::env();
    let p = common::free_port().to_string();
    let mut sa: Vec<&str> = vec!["-p", &p];
    sa.extend_from_slice(sargs);
    let mut ca: Vec<&str> = vec!["-s", "127.0.0.1", "-p", &p];
    ca.extend_from_slice(cargs);
    let mut server =
        common::Guard(Some(command(&env, run, prog, reach).args(&sa).spawn().expect("spawn")));
    cm::wait_listening(&env, &format!(":{p}"), &mut server);
    let client = command(&env, run, prog, reach).args(&ca).spawn().expect("spawn");
    let client = common::finish(common::Guard(Some(client)), limit, "client");
    let what = format!("{} {}", prog.display(), sa.join(" "));
    let server = cm::finish_server(server, limit, &what, &client);
    let ((so, se), (co, ce)) = (common::text(&server), common::text(&client));
    assert!(
        server.status.success() && client.status.success(),
        "reach {reach}: {what}: server {:?}:\n{so}{se}\nclient {:?}:\n{co}{ce}",
        server.status,
        client.status
    );
    assert!(leftovers(&env).is_empty(), "the CM left {:?} behind", leftovers(&env));
    (so, co)
}

/// The result lines (after the header) of rstream / riostream output.
fn results(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .collect()
}

/// rstream with custom sizes, data verified, through `softverbs run`: non-blocking and
/// blocking calls, rpoll (`-T a`, on the server) spinning and blocking, addresses from rdma_getaddrinfo
/// (`-T r`, its route set with RDMA_ROUTE), and 8 KiB buffers (`-B`: the ring wraps inside
/// each 10 000-byte transfer, credits come back many times a transfer); with direct reach on
/// and off.
#[test]
fn rstream_custom_verified() {
    let Some(rstream) = tool("rstream", "rstream", "rdmacm-utils") else { return };
    let run = softverbs("rstream_custom_verified");
    for reach in ["1", "0"] {
        for mode in [
            &["-T", "n"][..],
            &["-T", "b"],
            &["-T", "a"],
            &["-T", "a", "-T", "b"],
            &["-T", "r"],
            &["-B", "8192"],
        ] {
            let mut args = vec!["-S", "10000", "-C", "200", "-T", "v"];
            let mut client = args.clone();
            args.extend_from_slice(mode);
            // rstream's own race, on rxe as here: the server closes right after its last
            // send, and a client that still has transfers to read and polls (`-T a`) gets
            // POLLIN with POLLHUP, which rstream's do_poll takes for an error (exit 16). So
            // the polling modes run on the server (whose last call is a send); its client
            // uses nonblocking calls, which read what arrived before the close.
            let polls = mode.contains(&"a");
            client.extend_from_slice(if polls { &["-T", "n"][..] } else { mode });
            let (s, c) = rs_pair(
                &rstream,
                run.as_deref(),
                (&args, &client),
                reach,
                Duration::from_secs(120),
            );
            assert_eq!(results(&s), ["custom 9.7k 200 1"], "{mode:?}: {s}");
            assert_eq!(results(&c), ["custom 9.7k 200 1"], "{mode:?}: {c}");
        }
    }
}

#[test]
fn rsocket_edge_cases_from_c() {
    let test = "rsocket_edge_cases_from_c";
    for reach in ["1", "0"] {
        let env = cm::env();
        let Some(exe) = cm::compile(test, &env, "tests/c/rsocket_edges.c", "rsocket_edges") else {
            return;
        };
        let (p, q) = (common::free_port().to_string(), common::free_port().to_string());
        let child = env.command(&exe).env("SOFTVERBS_REACH", reach).args([&p, &q]).spawn();
        let out = common::finish(
            common::Guard(Some(child.expect("spawn"))),
            Duration::from_secs(60),
            test,
        );
        let (o, e) = common::text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert_eq!(
            o,
            "rsend while another thread waits in rrecv: 4 \n\
             server rrecv: 4 \n\
             server rsend: 4 \n\
             the waiting thread got pong\n\
             rsend hello: 5 \n\
             rrecv: 5 \n\
             got hello\n\
             peer port 1\n\
             server rclose: 0 \n\
             rrecv after peer rclose: 0 \n\
             rsend after peer rclose: -1 ECONNRESET\n\
             rclose: 0 \n\
             client rshutdown(SHUT_WR): 0 \n\
             server rrecv: 0 \n\
             server rsend back: 4 \n\
             client rrecv: 4 \n\
             got back\n\
             client rsend after SHUT_WR: -1 EPIPE\n\
             F_GETFL has O_NONBLOCK: 1\n\
             non-blocking rrecv: -1 EAGAIN\n\
             rpoll, nothing ready: 0 \n\
             rpoll, the pipe: 1 \n\
             revents 0 1\n\
             server rsend: 4 \n\
             rpoll, the rsocket: 1 \n\
             revents 1\n\
             rrecv: 4 \n\
             rclose: 0 \n\
             rclose: 0 \n\
             rsend on a pipe: -1 EBADF\n\
             rrecv on -1: -1 EBADF\n\
             rclose on a closed rsocket: -1 EBADF\n\
             rsetsockopt on a pipe: -1 EBADF\n\
             rconnect to nobody: -1 ECONNREFUSED\n\
             rclose: 0 \n\
             rclose listener: 0 \n",
            "reach {reach}\n{e}"
        );
        assert!(cm::leftovers(&env).is_empty(), "the CM left {:?} behind", cm::leftovers(&env));
    }
}

/// rstream's default sizes (64 B, 4 KiB, 64 KiB, 1 MiB), each as a custom run with fewer
/// transfers than its default run's (which is `rstream_default_run`), through `softverbs run`
/// with its default non-blocking calls, data verified.
#[test]
fn rstream_default_sizes() {
    let Some(rstream) = tool("rstream", "rstream", "rdmacm-utils") else { return };
    let run = softverbs("rstream_default_sizes");
    for (size, count, want) in [
        ("64", "2000", "custom 64 2k 1"),
        ("4096", "500", "custom 4k 500 1"),
        ("65536", "100", "custom 64k 100 1"),
        ("1048576", "10", "custom 1m 10 1"),
    ] {
        let args = ["-S", size, "-C", count, "-T", "v"];
        let (s, c) =
            rs_pair(&rstream, run.as_deref(), (&args, &args), "1", Duration::from_secs(120));
        assert_eq!(results(&s), [want], "server:\n{s}");
        assert_eq!(results(&c), [want], "client:\n{c}");
    }
}

/// rstream's whole default run (no options: latency then bandwidth, 64 B to 1 MiB, 100 000
/// transfers of 64 B each way, non-blocking calls) through `softverbs run`; every test line on
/// both sides. Ignored by default: it takes a minute or more in a debug build on a two-core
/// machine (`cargo test -p softverbs-rdmacm --test rsocket -- --ignored` runs it).
#[test]
#[ignore]
fn rstream_default_run() {
    let Some(rstream) = tool("rstream", "rstream", "rdmacm-utils") else { return };
    let run = softverbs("rstream_default_run");
    let (s, c) = rs_pair(&rstream, run.as_deref(), (&[], &[]), "1", Duration::from_secs(300));
    let want = [
        "64_lat 64 1 100k",
        "4k_lat 4k 1 10k",
        "64k_lat 64k 1 1k",
        "1m_lat 1m 1 100",
        "64_bw 64 100k 1",
        "4k_bw 4k 10k 1",
        "64k_bw 64k 1k 1",
        "1m_bw 1m 100 1",
    ];
    assert_eq!(results(&s), want, "server:\n{s}");
    assert_eq!(results(&c), want, "client:\n{c}");
}

/// riostream: each side riomaps a buffer and riowrites into the peer's (the receiver polls
/// the buffer's last byte, calling nothing), data verified; with direct reach on and off.
#[test]
fn riostream_riowrite_verified() {
    let Some(riostream) = tool("riostream", "riostream", "rdmacm-utils") else { return };
    for reach in ["1", "0"] {
        for args in [
            &["-S", "100000", "-C", "50", "-T", "v"][..],
            &["-S", "4096", "-C", "200", "-T", "b", "-T", "v"][..],
        ] {
            let (s, c) = rs_pair(&riostream, None, (args, args), reach, Duration::from_secs(120));
            let want = if args[1] == "4096" { "custom 4k 200 1" } else { "custom 97k 50 1" };
            assert_eq!(results(&s), [want], "{s}");
            assert_eq!(results(&c), [want], "{c}");
        }
    }
}

/// rcopy: a 3 MB file of random bytes copied to the server's side, the same bytes there; with
/// direct reach on and off. (rcopy's server never ends: it is killed after its client.)
#[test]
fn rcopy_copies_a_file_byte_for_byte() {
    let Some(rcopy) = tool("rcopy", "rcopy", "rdmacm-utils") else { return };
    for reach in ["1", "0"] {
        let env = cm::env();
        let dir = tempfile::tempdir().expect("tempdir");
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        let mut bytes = vec![0u8; 3_000_017];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        std::fs::write(&src, &bytes).expect("write");
        let p = common::free_port().to_string();
        let server = env.command(&rcopy).env("SOFTVERBS_REACH", reach).args(["-p", &p]).spawn();
        let mut server = common::Guard(Some(server.expect("spawn")));
        cm::wait_listening(&env, &format!(":{p}"), &mut server);
        let to = format!("127.0.0.1:{}", dst.display());
        let client = env
            .command(&rcopy)
            .env("SOFTVERBS_REACH", reach)
            .args([src.to_str().expect("path"), &to, "-p", &p])
            .spawn()
            .expect("spawn");
        let out = common::finish(common::Guard(Some(client)), Duration::from_secs(60), "rcopy");
        let (o, e) = common::text(&out);
        assert!(out.status.success(), "reach {reach}: {o}{e}");
        assert!(o.contains("3000017 bytes in"), "{o}");
        drop(server);
        assert!(std::fs::read(&dst).expect("the copy") == bytes, "reach {reach}: the copy differs");
    }
}

/// udpong over `SOCK_DGRAM` rsockets (UD): the client resolves the server's address (SIDR),
/// logs in, and runs an echo test (every datagram answered: 2 × 100 transfers counted) and a
/// one-way test (the server counts what it received; UD may drop, as UDP does, so at most
/// the 500 sent); with direct reach on and off. (udpong's server never ends: it is killed
/// after its client.)
#[test]
fn udpong_echo_and_one_way_over_ud() {
    let Some(udpong) = tool("udpong", "udpong", "rdmacm-utils") else { return };
    for reach in ["1", "0"] {
        let env = cm::env();
        let p = common::free_port().to_string();
        let server = env.command(&udpong).env("SOFTVERBS_REACH", reach).args(["-p", &p]).spawn();
        let mut server = common::Guard(Some(server.expect("spawn")));
        cm::wait_listening(&env, &format!(":{p}"), &mut server);
        for (args, echo) in [
            (&["-S", "200", "-C", "100", "-T", "e"][..], true),
            (&["-S", "1000", "-C", "500"][..], false),
        ] {
            let mut a = vec!["-s", "127.0.0.1", "-p", &p];
            a.extend_from_slice(args);
            let client = env.command(&udpong).env("SOFTVERBS_REACH", reach).args(&a).spawn();
            let out = common::finish(
                common::Guard(Some(client.expect("spawn"))),
                Duration::from_secs(60),
                "udpong",
            );
            let (o, e) = common::text(&out);
            assert!(out.status.success(), "reach {reach} {args:?}: {o}{e}");
            let line: Vec<&str> = o.lines().nth(1).unwrap_or_default().split_whitespace().collect();
            assert_eq!(line.get(..2), Some(&["custom", args[1]][..]), "{o}");
            let xfers: u32 = line.get(2).and_then(|x| x.parse().ok()).unwrap_or(0);
            if echo {
                assert_eq!(xfers, 200, "reach {reach}: every echo counted:\n{o}");
            } else {
                assert!((1..=500).contains(&xfers), "reach {reach}: {o}");
            }
        }
        drop(server);
    }
}

/// librspreload.so: rstream in its plain-sockets mode (`-T s`: socket, bind, accept, send,
/// recv, fcntl, poll of the C library), preloaded, runs over rsockets: its listener appears in
/// the fabric's CM directory (a TCP listener never would) and the data is verified; blocking
/// and non-blocking, with poll (`-T a`, on the server).
#[test]
fn rspreload_turns_rstreams_tcp_sockets_into_rsockets() {
    let Some(rstream) = tool("rstream", "rstream", "rdmacm-utils") else { return };
    let lib = common::built_library().with_file_name("librspreload.so");
    let lib = if lib.exists() { lib } else { common::target_dir().join("librspreload.so") };
    assert!(lib.exists(), "{}: librspreload.so was not built", lib.display());
    for mode in [&["-T", "n"][..], &["-T", "b"], &["-T", "a"]] {
        let env = cm::env();
        let p = common::free_port().to_string();
        let args = ["-T", "s", "-S", "10000", "-C", "100", "-T", "v"];
        let run = |extra: &[&str], mode: &[&str]| {
            let mut c = env.command(&rstream);
            c.env("LD_PRELOAD", &lib).args(extra).args(["-p", &p]).args(args).args(mode);
            common::Guard(Some(c.spawn().expect("spawn")))
        };
        let mut server = run(&[], mode);
        cm::wait_listening(&env, &format!(":{p}"), &mut server);
        // Polling (`-T a`) on the server only: rstream's client fails on POLLHUP when the
        // server's close arrives while it still polls for data (rstream_custom_verified).
        let client_mode = if mode.contains(&"a") { &["-T", "n"][..] } else { mode };
        let client = run(&["-s", "127.0.0.1"], client_mode);
        let client = common::finish(client, Duration::from_secs(60), "client");
        let server = cm::finish_server(server, Duration::from_secs(60), "rstream server", &client);
        let ((so, se), (co, ce)) = (common::text(&server), common::text(&client));
        assert!(
            server.status.success() && client.status.success(),
            "{mode:?}: server:\n{so}{se}\nclient:\n{co}{ce}"
        );
        assert_eq!(results(&so), ["custom 9.7k 100 1"], "{so}");
        assert_eq!(results(&co), ["custom 9.7k 100 1"], "{co}");
    }
}
