//! Generates, from `symbols.txt` (one `symbol@VERSION` a line), the version script defining
//! librdmacm's version nodes and the `.symver` lines that put each export in its node, as
//! cabi/ibverbs/build.rs does for libibverbs; sets the SONAME and links libibverbs.so.1 (at run
//! time softverbs' own, found first on LD_LIBRARY_PATH).
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
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
