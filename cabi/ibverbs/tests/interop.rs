//! One fabric for both languages: rdma-core's `ibv_rc_pingpong` (C, on softverbs'
//! libibverbs.so.1) against `softverbs pingpong` (Rust, on verbs-api), both directions, with
//! the same TCP exchange and GIDs.

mod common;

use std::time::Duration;

use common::{pair_of, text, tool, Env};

/// The `softverbs` binary, when `cargo test --workspace` built it.
fn softverbs(test: &str) -> Option<std::path::PathBuf> {
    let b = common::target_dir().join("softverbs");
    if b.exists() {
        return Some(b);
    }
    if std::env::var("SOFTVERBS_REQUIRE_C").as_deref() == Ok("1") {
        panic!("{test}: {} is not built (cargo test --workspace builds it)", b.display());
    }
    eprintln!("{test}: skipped: the softverbs binary is not built (run cargo test --workspace)");
    None
}

fn check(who: &str, out: &std::process::Output) {
    let (o, e) = text(out);
    assert!(o.lines().any(|l| l.starts_with("8192000 bytes in ")), "{who}:\n{o}{e}");
    assert!(o.lines().any(|l| l.starts_with("1000 iters in ")), "{who}:\n{o}{e}");
    assert!(
        o.contains("remote address: LID 0x0000") && o.contains("GID ::ffff:10.0.0."),
        "{who}:\n{o}"
    );
}

#[test]
fn ibv_rc_pingpong_client_against_softverbs_pingpong_server() {
    let test = "ibv_rc_pingpong_client_against_softverbs_pingpong_server";
    let (Some(sv), Some(c)) = (softverbs(test), tool(test, "ibv_rc_pingpong", "ibverbs-utils"))
    else {
        return;
    };
    let env = Env::new();
    let port = common::free_port().to_string();
    let (s, cl) = pair_of(
        &env,
        (&sv, &["pingpong", "-g", "1", "-p", &port]),
        (&c, &["-d", "softverbs1", "-g", "1", "-p", &port, "localhost"]),
        Duration::from_secs(60),
    );
    check("softverbs pingpong (server)", &s);
    check("ibv_rc_pingpong (client)", &cl);
}

#[test]
fn softverbs_pingpong_client_against_ibv_rc_pingpong_server() {
    let test = "softverbs_pingpong_client_against_ibv_rc_pingpong_server";
    let (Some(sv), Some(c)) = (softverbs(test), tool(test, "ibv_rc_pingpong", "ibverbs-utils"))
    else {
        return;
    };
    let env = Env::new();
    let port = common::free_port().to_string();
    let (s, cl) = pair_of(
        &env,
        (&c, &["-g", "1", "-p", &port]),
        (&sv, &["pingpong", "-d", "softverbs1", "-g", "1", "-p", &port, "localhost"]),
        Duration::from_secs(60),
    );
    check("ibv_rc_pingpong (server)", &s);
    check("softverbs pingpong (client)", &cl);
}
