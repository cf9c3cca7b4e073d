// The symbol versioning both C libraries share, included by their build scripts
// (`include!("../symver.rs")`): from a `symbols.txt` of `symbol@VERSION` lines it writes the
// linker version script that defines the version nodes, and the `.symver` lines that put each
// export in its node (rustc's own anonymous version script decides what is exported, so the
// nodes come from a second script and the assignments from the assembler: docs/c.md, "How the
// symbols are versioned").

/// Writes `<out>/<map_name>` (the nodes, each parented on the one before unless `standalone`
/// says it stands alone) and `<out>/symver.s` from `list`; panics, failing the build, on a
/// line that names an unknown node. Returns the map's path.
fn write_version_files(
    nodes: &[&str],
    standalone: fn(&str) -> bool,
    list: &str,
    out: &std::path::Path,
    map_name: &str,
) -> std::path::PathBuf {
    use std::fmt::Write as _;
    let mut map = String::new();
    let mut prev: Option<&str> = None;
    for &n in nodes {
        match prev {
            Some(p) if !standalone(n) => writeln!(map, "{n} {{ }} {p};"),
            _ => writeln!(map, "{n} {{ }};"),
        }
        .expect("string");
        prev = Some(n);
    }
    let mut asm = String::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (sym, ver) = line.split_once('@').expect("symbol@VERSION");
        assert!(nodes.contains(&ver), "symbols.txt: unknown version node {ver}");
        writeln!(asm, ".symver {sym}, {sym}@@{ver}").expect("string");
    }
    let path = out.join(map_name);
    std::fs::write(&path, map).expect("write map");
    std::fs::write(out.join("symver.s"), asm).expect("write asm");
    path
}
