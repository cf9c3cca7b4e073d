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

/// `symbol@VERSION` of every function and object `lib` defines (`objdump -T`), without the
/// version nodes' own entries.
fn exports(objdump: &std::path::Path, lib: &std::path::Path) -> BTreeSet<String> {
    let out = Command::new(objdump).arg("-T").arg(lib).output().expect("objdump");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| (l.contains(" DF ") || l.contains(" DO ")) && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, sym) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            let ver = ver.trim_matches(|c| c == '(' || c == ')');
            (ver != *sym).then(|| format!("{sym}@{ver}"))
        })
        .collect()
}

/// What the system's libibverbs.so.1 exports that softverbs' does not, on purpose: the
/// `IBVERBS_1.0` versions of the verbs, rdma-core's compat-1_0.c, which wrap the objects of
/// the 2006 libibverbs 1.0 ABI (`struct ibv_context_1_0` and its kin) for programs linked
/// before libibverbs 1.1. No program built since binds them (each is a non-default version
/// beside the default `@@IBVERBS_1.1` one), and softverbs has no 1.0 object layouts.
const DELIBERATELY_ABSENT: [&str; 33] = [
    "ibv_ack_async_event@IBVERBS_1.0",
    "ibv_ack_cq_events@IBVERBS_1.0",
    "ibv_alloc_pd@IBVERBS_1.0",
    "ibv_attach_mcast@IBVERBS_1.0",
    "ibv_close_device@IBVERBS_1.0",
    "ibv_create_ah@IBVERBS_1.0",
    "ibv_create_cq@IBVERBS_1.0",
    "ibv_create_qp@IBVERBS_1.0",
    "ibv_create_srq@IBVERBS_1.0",
    "ibv_dealloc_pd@IBVERBS_1.0",
    "ibv_dereg_mr@IBVERBS_1.0",
    "ibv_destroy_ah@IBVERBS_1.0",
    "ibv_destroy_cq@IBVERBS_1.0",
    "ibv_destroy_qp@IBVERBS_1.0",
    "ibv_destroy_srq@IBVERBS_1.0",
    "ibv_detach_mcast@IBVERBS_1.0",
    "ibv_free_device_list@IBVERBS_1.0",
    "ibv_get_async_event@IBVERBS_1.0",
    "ibv_get_cq_event@IBVERBS_1.0",
    "ibv_get_device_guid@IBVERBS_1.0",
    "ibv_get_device_list@IBVERBS_1.0",
    "ibv_get_device_name@IBVERBS_1.0",
    "ibv_modify_qp@IBVERBS_1.0",
    "ibv_modify_srq@IBVERBS_1.0",
    "ibv_open_device@IBVERBS_1.0",
    "ibv_query_device@IBVERBS_1.0",
    "ibv_query_gid@IBVERBS_1.0",
    "ibv_query_pkey@IBVERBS_1.0",
    "ibv_query_port@IBVERBS_1.0",
    "ibv_query_qp@IBVERBS_1.0",
    "ibv_query_srq@IBVERBS_1.0",
    "ibv_reg_mr@IBVERBS_1.0",
    "ibv_resize_cq@IBVERBS_1.0",
];

/// Every `symbol@version` the system's libibverbs.so.1 (rdma-core, Debian 12) exports is
/// exported by softverbs' library, but for [`DELIBERATELY_ABSENT`]; a loader that binds any
/// of them at start-up (libfabric binds `ibv_reg_dmabuf_mr`, pyverbs `ibv_import_*`) finds it.
#[test]
fn every_symbol_the_system_libibverbs_exports_is_exported() {
    let test = "every_symbol_the_system_libibverbs_exports_is_exported";
    let Some(objdump) = common::tool(test, "objdump", "binutils") else { return };
    let sys = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";
    let Some(sys) = common::file(test, sys, "libibverbs1") else { return };
    let theirs = exports(&objdump, &sys);
    let ours = exports(&objdump, &common::built_library());
    let missing: Vec<&String> = theirs
        .iter()
        .filter(|s| !ours.contains(*s) && !DELIBERATELY_ABSENT.contains(&s.as_str()))
        .collect();
    assert!(missing.is_empty(), "the system's libibverbs exports, softverbs' not: {missing:?}");
    for s in DELIBERATELY_ABSENT {
        assert!(theirs.contains(s), "{s} is listed as absent but the system has no such export");
    }
}
