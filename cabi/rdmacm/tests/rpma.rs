//! librpma (PMDK's remote memory library, Debian's librpma0 1.2) unmodified over softverbs'
//! librdmacm.so.1 and libibverbs.so.1: tests/c/rpma_pair.c as a server process and client
//! processes. librpma moves the server's connection id from its endpoint's channel to one of
//! the connection's own after `rdma_accept` and waits there for ESTABLISHED, the endpoint's
//! channel unread (its next connection's REQ waits there meanwhile); the client moves its
//! synchronous id after it connected. Each client writes 4 KiB (`rpma_write`), flushes it to
//! visibility (`rpma_flush`: librpma reads the region back, as on rxe), reads it (`rpma_read`),
//! sends a message and gets the server's answer (the sum of the bytes the server found); every
//! byte and every completion is checked by the program; then both see `RPMA_CONN_CLOSED`.
//! Three connections on one endpoint: one client alone, then two at once. Direct reach on and
//! off: the same lines both ways.

mod cm;
#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use cm::{env, leftovers};
use common::{text, Guard};

#[test]
fn librpma_writes_flushes_reads_and_sends_over_three_connections_of_one_endpoint() {
    let test = "librpma_writes_flushes_reads_and_sends_over_three_connections_of_one_endpoint";
    if common::file(test, "/usr/include/librpma.h", "librpma-dev").is_none() {
        return;
    }
    let Some((_dir, exe)) = common::build_c(test, "rpma_pair", &["-lrpma", "-lrdmacm"]) else {
        return;
    };
    let limit = Duration::from_secs(60);
    for reach in ["1", "0"] {
        let env = env();
        let port = common::free_port().to_string();
        let args = |role: &str, n: &str| -> Vec<String> {
            [role, "127.0.0.1", &port, n].iter().map(|s| s.to_string()).collect()
        };
        let spawn = |a: Vec<String>| {
            let c = env.command(&exe).env("SOFTVERBS_REACH", reach).args(&a).spawn();
            Guard(Some(c.expect("spawn rpma_pair")))
        };
        let mut server = spawn(args("server", "3"));
        cm::wait_listening(&env, &format!(":{port}"), &mut server);
        let mut outs = Vec::new();
        outs.push(common::finish(spawn(args("client", "1")), limit, "client 1"));
        let (c2, c3) = (spawn(args("client", "2")), spawn(args("client", "3")));
        outs.push(common::finish(c2, limit, "client 2"));
        outs.push(common::finish(c3, limit, "client 3"));
        let server = cm::finish_server(server, limit, "rpma_pair server", &outs[2]);
        let (so, se) = text(&server);
        let report = outs.iter().map(|o| format!("{:?}: {}{}", o.status, text(o).0, text(o).1));
        let report: Vec<String> = report.collect();
        assert!(
            server.status.success() && outs.iter().all(|o| o.status.success()),
            "reach {reach}: server {:?}:\n{so}{se}\nclients:\n{}",
            server.status,
            report.join("\n")
        );
        // 4096 bytes of client k's pattern, i * 7 + k * 13 + i / 256 (mod 256), summed.
        let sum = |k: usize| (0..4096).map(|i| (i * 7 + k * 13 + i / 256) % 256).sum::<usize>();
        for (k, out) in outs.iter().enumerate().map(|(i, o)| (i + 1, o)) {
            let (o, e) = text(out);
            assert_eq!(
                o,
                format!(
                    "client {k}: written, flushed, read back, answered sum {}, closed\n",
                    sum(k)
                ),
                "reach {reach}: {e}"
            );
            assert_eq!(e, "", "reach {reach}, client {k}");
        }
        // Clients 2 and 3 came at once: the server took them in the order their REQs came.
        let mut lines: Vec<&str> = so.lines().collect();
        lines[1..].sort();
        let want: Vec<String> = (1..=3)
            .map(|k| format!("server: client {k}: 4096 bytes as written, sum {}, closed", sum(k)))
            .collect();
        assert_eq!(lines, want, "reach {reach}: {se}");
        assert_eq!(se, "", "reach {reach}");
        assert!(leftovers(&env).is_empty(), "reach {reach}: the CM left {:?}", leftovers(&env));
    }
}
