//! Generates, from `symbols.txt` (one `symbol@VERSION` a line), the version script defining
//! librdmacm's version nodes and the `.symver` lines that put each export in its node, as
//! cabi/ibverbs/build.rs does for libibverbs; sets the SONAME and links libibverbs.so.1 (at run
//! time softverbs' own, found first on LD_LIBRARY_PATH). The link is against a stub made here
//! from cabi/ibverbs/symbols.txt, not the system's libibverbs-dev (docs/c.md, "Building without
//! libibverbs-dev").
use std::path::PathBuf;

/// librdmacm's version nodes (rdma-core 44, `objdump -T`), each parented on the one before.
const NODES: [&str; 4] = ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

include!("../symver.rs");

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let list = std::fs::read_to_string(dir.join("symbols.txt")).expect("symbols.txt");
    println!("cargo:rerun-if-changed=symbols.txt");
    let map = write_version_files(&NODES, |_| false, &list, &out, "librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    // DT_NEEDED libibverbs.so.1, from the stub's soname: the library is named by its path (no
    // `-libverbs` search that could find the system's), and kept even if nothing referenced it.
    let ibverbs = std::fs::read_to_string(dir.join("../ibverbs/symbols.txt")).expect("symbols");
    println!("cargo:rerun-if-changed=../ibverbs/symbols.txt");
    println!("cargo:rerun-if-changed=../symver.rs");
    let stub = out.join(ibverbs_link_stub(&ibverbs, &out));
    println!("cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg={}", stub.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--pop-state");
}
