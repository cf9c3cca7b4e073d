//! The built librdmacm.so.1 exports every symbol of `symbols.txt` in the version node the
//! system's librdmacm (rdma-core) gives it, and its SONAME is `librdmacm.so.1`.

#[path = "../../ibverbs/tests/common/mod.rs"]
mod common;

use std::process::Command;

/// `objdump ARGS FILE`'s stdout, or None (with a note) when objdump is missing.
fn objdump(args: &[&str], file: &str) -> Option<String> {
    let out = Command::new("objdump").args(args).arg(file).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `symbol@VERSION` pairs a library defines.
fn defined(dump: &str) -> Vec<String> {
    dump.lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, sym) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            Some(format!("{sym}@{}", ver.trim_matches(|c| c == '(' || c == ')')))
        })
        .collect()
}

#[test]
fn exports_match_the_system_librdmacm() {
    let lib = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let lib = if lib.exists() { lib } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    let Some(ours) = objdump(&["-T"], lib.to_str().expect("utf-8 path")) else { return };
    let ours = defined(&ours);
    let list = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/symbols.txt"))
        .expect("symbols.txt");
    let want: Vec<&str> =
        list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    for w in &want {
        assert!(ours.iter().any(|o| o == w), "{w} is not exported as such; exports: {ours:?}");
    }
    let sys = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";
    if let Some(p) = common::file("exports_match_the_system_librdmacm", sys, "librdmacm1") {
        let theirs = defined(&objdump(&["-T"], p.to_str().expect("path")).unwrap_or_default());
        for w in &want {
            assert!(theirs.iter().any(|t| t == w), "the system librdmacm has no {w}");
        }
    }
    let soname = objdump(&["-p"], lib.to_str().expect("path")).unwrap_or_default();
    assert!(
        soname
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["SONAME", "librdmacm.so.1"]),
        "{soname}"
    );
}

/// What the system's librdmacm.so.1 exports that softverbs' does not yet: nothing since the
/// rsocket API came (src/rsocket/); kept so that a future gap is listed, not silent.
const NOT_YET: [&str; 0] = [];

/// Every `symbol@version` the system's librdmacm.so.1 exports is exported by softverbs'
/// library, but for [`NOT_YET`] (libfabric binds `rdma_get_devices` at load, pyverbs the ECE
/// calls, rstream and librspreload the rsocket API).
#[test]
fn every_symbol_the_system_librdmacm_exports_is_exported() {
    let test = "every_symbol_the_system_librdmacm_exports_is_exported";
    if common::tool(test, "objdump", "binutils").is_none() {
        return;
    }
    let sys = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";
    let Some(sys) = common::file(test, sys, "librdmacm1") else { return };
    let lib = common::built_library().with_file_name("libsoftverbs_rdmacm.so");
    let lib = if lib.exists() { lib } else { common::target_dir().join("libsoftverbs_rdmacm.so") };
    let theirs = defined(&objdump(&["-T"], sys.to_str().expect("path")).unwrap_or_default());
    let ours = defined(&objdump(&["-T"], lib.to_str().expect("path")).unwrap_or_default());
    let missing: Vec<&String> =
        theirs.iter().filter(|s| !ours.contains(*s) && !NOT_YET.contains(&s.as_str())).collect();
    assert!(missing.is_empty(), "the system's librdmacm exports, softverbs' not: {missing:?}");
    for s in NOT_YET {
        assert!(theirs.iter().any(|t| t == s), "{s} is listed but the system has no such export");
    }
}
