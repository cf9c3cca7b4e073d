//! Generates, from `symbols.txt` (one `symbol@VERSION` a line, the exports libibverbs.so.1
//! gives the programs and provider libraries softverbs runs with), the linker version script
//! that defines the version nodes and the `.symver` lines that put each symbol in its node:
//! rustc's own anonymous version script decides what is exported, so the nodes come from a
//! second script and the assignments from the assembler (docs/c.md, "How the symbols are
//! versioned").
use std::path::PathBuf;

include!("../symver.rs");

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let list = std::fs::read_to_string(dir.join("symbols.txt")).expect("symbols.txt");
    println!("cargo:rerun-if-changed=symbols.txt");
    let map =
        write_version_files(&IBVERBS_NODES, ibverbs_standalone, &list, &out, "libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
