//! Every `symbol@version` that the ibverbs-utils, perftest and rdma-core's provider and CM
//! libraries import from libibverbs.so.1 (tests/required-symbols.txt, measured on rdma-core 44)
//! is exported by the built library as that version's default (`@@`), and the SONAME is
//! `libibverbs.so.1`.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

#[test]
fn every_required_symbol_is_exported_with_its_version() {
    let test = "every_required_symbol_is_exported_with_its_version";
    let Some(nm) = common::tool(test, "nm", "binutils") else { return };
    let lib = common::built_library();
    let out = Command::new(nm)
        .args(["-D", "--with-symbol-versions", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm");
    assert!(out.status.success());
    let have: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    let want = include_str!("required-symbols.txt");
    let missing: Vec<String> = want
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.replacen('@', "@@", 1))
        .filter(|s| !have.contains(s))
        .collect();
    assert_eq!(want.lines().filter(|l| !l.is_empty()).count(), 111);
    assert!(missing.is_empty(), "not exported with their version:\n{}", missing.join("\n"));
    // Nothing else leaks unversioned: every exported function or object carries a node.
    let unversioned: Vec<&String> =
        have.iter().filter(|s| !s.contains('@') && !s.starts_with("IBVERBS_")).collect();
    assert!(unversioned.is_empty(), "unversioned exports: {unversioned:?}");
}

#[test]
fn the_soname_is_libibverbs_so_1() {
    let test = "the_soname_is_libibverbs_so_1";
    let Some(readelf) = common::tool(test, "readelf", "binutils") else { return };
    let out =
        Command::new(readelf).arg("-d").arg(common::built_library()).output().expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Library soname: [libibverbs.so.1]"), "{text}");
}
