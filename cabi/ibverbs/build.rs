//! Generates, from `symbols.txt` (one `symbol@VERSION` a line, the exports libibverbs.so.1
//! gives the programs and provider libraries softverbs runs with), the linker version script
//! that defines the version nodes and the `.symver` lines that put each symbol in its node:
//! rustc's own anonymous version script decides what is exported, so the nodes come from a
//! second script and the assignments from the assembler (docs/c.md, "How the symbols are
//! versioned").
use std::path::PathBuf;

/// The version nodes of rdma-core 44's libibverbs, each parented on the one before, as the
/// real library defines them (`readelf -V`).
const NODES: [&str; 13] = [
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
];

include!("../symver.rs");

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let list = std::fs::read_to_string(dir.join("symbols.txt")).expect("symbols.txt");
    println!("cargo:rerun-if-changed=symbols.txt");
    let map = write_version_files(
        &NODES,
        |n| n.starts_with("IBVERBS_PRIVATE"),
        &list,
        &out,
        "libibverbs.map",
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
