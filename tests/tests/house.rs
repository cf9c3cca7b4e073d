//! The house rules of the source tree, checked for every crate of the workspace: sibling modules
//! name each other in one direction only (no import circles), and no source file outside tests
//! grows past about 800 lines.
//!
//! Why a test: a newcomer finds a concept by its room; a circle between two rooms, or a room that
//! holds eight concepts, is how a tree stops showing its architecture. The check reads the
//! sources as text (no compiler plugin): it strips comments and literals, lists the paths each
//! file names (`crate::a::b`, `super::x`, `self::x`, a child module, or a name it imported), and
//! resolves them to module files. A child naming its own ancestors (`super::Nic`, an `impl Nic`
//! block beside an object) is ordinary Rust scoping and is not an edge; an edge is lifted to the
//! two siblings under the modules' lowest common ancestor, and the siblings of each parent must
//! form a graph without cycles. Test code (`tests.rs`, `tests/` folders, `#[cfg(test)] mod`
//! blocks) is left out of both rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose module trees are checked, as (crate name, source root folder).
const CRATES: &[(&str, &str)] = &[
    ("verbs_api", "verbs-api/src"),
    ("nic_model", "nic-model/src"),
    ("softverbs_sim", "sim/src"),
    ("softverbs", "sim/cli/src"),
    ("softverbs_tests", "tests/src"),
    ("softverbs_cabi_abi", "cabi/abi/src"),
    ("softverbs_ibverbs", "cabi/ibverbs/src"),
    ("softverbs_rdmacm", "cabi/rdmacm/src"),
    ("rspreload", "cabi/rspreload/src"),
];

/// "About 800 lines": the most non-test lines one source file may have.
const MAX_FILE_LINES: usize = 850;

/// Source folders whose files are test support or test bodies, exempt from the size rule.
const SIZE_EXEMPT: &[&str] = &["tests/src/"];

/// A module path inside one crate: `[]` is the crate root, `["engine", "req"]` is `crate::engine::req`.
type ModPath = Vec<String>;

struct Module {
    file: PathBuf,
    /// The file's code with comments, literals and test blocks blanked (newlines kept).
    code: String,
    /// Names this module brought into scope with `use`, mapped to the absolute path they name
    /// (`None` for a path outside the crate).
    imports: BTreeMap<String, Option<Vec<String>>>,
    /// The absolute paths of its glob imports (`use x::*`).
    globs: Vec<Vec<String>>,
    /// The names of the items it defines (structs, functions, traits, ...).
    items: BTreeSet<String>,
    is_test: bool,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under a crate's `src`, or `None` for a separate crate root
/// (`main.rs`, `bin/`).
fn module_path(rel: &Path) -> Option<ModPath> {
    let parts: Vec<String> =
        rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.first().is_some_and(|p| p == "bin") || parts == ["main.rs"] {
        return None;
    }
    let mut path: ModPath = parts[..parts.len() - 1].to_vec();
    let last = parts.last().expect("a file name");
    let stem = last.strip_suffix(".rs").expect("a .rs file");
    if stem != "mod" && stem != "lib" {
        path.push(stem.to_string());
    }
    Some(path)
}

/// Blanks comments, string and char literals (keeping newlines), so that only code is searched.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b.get(i.wrapping_sub(1)).is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < b.len() {
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let is_char = matches!((next, b.get(i + 2)), (Some('\\'), _) | (Some(_), Some('\'')));
            if is_char {
                out.push(' ');
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    if b[i] == '\\' {
                        out.push(' ');
                        i += 1;
                    }
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks every `#[cfg(test)]` item (an inline test module or helper) up to its closing brace.
fn strip_test_blocks(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let text: Vec<char> = out.clone();
    let pat: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pat.len() <= text.len() {
        if text[i..i + pat.len()] == pat[..] {
            // Blank through the item: to the end of its first brace block, or its `;`.
            let mut j = i;
            let mut depth = 0usize;
            while j < text.len() {
                match text[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            break;
                        }
                    }
                    ';' if depth == 0 => break,
                    _ => {}
                }
                j += 1;
            }
            for ch in out.iter_mut().take((j + 1).min(text.len())).skip(i) {
                if *ch != '\n' {
                    *ch = ' ';
                }
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The names a file defines as items (`struct X`, `fn x`, `trait X`, ...), for following globs.
fn items_in(code: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] =
        &["struct", "enum", "trait", "type", "fn", "const", "static", "union", "macro_rules!"];
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| KEYWORDS.contains(&w[0]) && !KEYWORDS.contains(&w[1]))
        .map(|w| w[1].to_string())
        .collect()
}

/// The `use` declarations of a file, flattened to (name in scope, path as written).
fn use_trees(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(pos) = code[i..].find("use ") {
        let at = i + pos;
        let starts_word =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        i = at + 4;
        if !starts_word {
            continue;
        }
        let Some(end) = code[i..].find(';') else { break };
        // `x::Y as Z` keeps its alias through the whitespace removal as `x::Y@Z`.
        let words: Vec<&str> = code[i..i + end].split_whitespace().collect();
        let tree: String =
            words.iter().map(|w| if *w == "as" { "@" } else { w }).collect::<Vec<_>>().concat();
        flatten_use(&[], &tree, &mut out);
        i += end;
    }
    out
}

fn flatten_use(prefix: &[String], tree: &str, out: &mut Vec<(String, Vec<String>)>) {
    // Split the top level of a `{a, b::{c, d}}` group on commas.
    if let Some(open) = tree.find('{') {
        if tree.ends_with('}') {
            let head: Vec<String> = tree[..open]
                .trim_end_matches("::")
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let mut base = prefix.to_vec();
            base.extend(head);
            let inner = &tree[open + 1..tree.len() - 1];
            let mut depth = 0;
            let mut start = 0;
            for (k, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        flatten_use(&base, &inner[start..k], out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            flatten_use(&base, &inner[start..], out);
            return;
        }
    }
    if tree.is_empty() {
        return;
    }
    if let Some(glob) = tree.strip_suffix('*') {
        // A glob: recorded under the name `*`, its path without the star.
        let mut path = prefix.to_vec();
        path.extend(glob.split("::").filter(|s| !s.is_empty()).map(String::from));
        out.push(("*".to_string(), path));
        return;
    }
    let (path_part, alias) = match tree.split_once('@') {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (tree, None),
    };
    let mut path = prefix.to_vec();
    path.extend(path_part.split("::").filter(|s| !s.is_empty()).map(String::from));
    let Some(last) = path.last().cloned() else { return };
    let name = match alias {
        Some(a) => a,
        None if last == "self" => {
            path.pop();
            match path.last() {
                Some(l) => l.clone(),
                None => return,
            }
        }
        None => last,
    };
    if name != "_" {
        out.push((name, path));
    }
}

impl Module {
    fn new(file: PathBuf, code: String, is_test: bool) -> Module {
        let items = items_in(&code);
        Module { file, code, imports: BTreeMap::new(), globs: Vec::new(), items, is_test }
    }
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    fn is_module(&self, p: &[String]) -> bool {
        self.modules.contains_key(p)
    }

    /// Turns a path as written in module `at` into an absolute path inside the crate, or `None`
    /// when it leaves the crate (std, another crate) or names nothing known.
    fn absolute(&self, at: &[String], path: &[String], crate_name: &str) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut abs: Vec<String>;
        let mut rest = &path[1..];
        match first.as_str() {
            "crate" => abs = Vec::new(),
            "self" => abs = at.to_vec(),
            "super" => {
                abs = at.to_vec();
                abs.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    abs.pop()?;
                    rest = &rest[1..];
                }
            }
            name if name == crate_name => abs = Vec::new(),
            name => {
                let mut child = at.to_vec();
                child.push(name.to_string());
                if self.is_module(&child) {
                    abs = child;
                } else if let Some(Some(target)) =
                    self.modules.get(at).and_then(|m| m.imports.get(name))
                {
                    abs = target.clone();
                } else {
                    return None;
                }
            }
        }
        abs.extend(rest.iter().cloned());
        Some(abs)
    }

    /// Whether the module at `path` defines or imports `name` (what a glob of it brings in).
    fn names(&self, path: &[String], name: &str) -> bool {
        let mut child = path.to_vec();
        child.push(name.to_string());
        self.is_module(&child)
            || self.modules.get(path).is_some_and(|m| {
                m.items.contains(name) || m.imports.get(name).is_some_and(|t| t.is_some())
            })
    }

    /// Reads each module's `use` declarations into absolute paths; once every module is known,
    /// since a path may start at a child module.
    fn resolve_imports(&mut self, crate_name: &str) {
        let paths: Vec<ModPath> = self.modules.keys().cloned().collect();
        for at in &paths {
            let mut imports = BTreeMap::new();
            let mut globs = Vec::new();
            for (alias, path) in use_trees(&self.modules[at].code) {
                let abs = self.absolute(at, &path, crate_name);
                if alias == "*" {
                    globs.extend(abs);
                } else {
                    imports.insert(alias, abs);
                }
            }
            let m = self.modules.get_mut(at).expect("listed");
            m.imports = imports;
            m.globs = globs;
        }
    }

    /// The module file that an absolute path lands in, following `use` re-exports on the way.
    fn resolve(&self, abs: &[String], hops: usize) -> Option<ModPath> {
        let mut at: ModPath = Vec::new();
        for (k, seg) in abs.iter().enumerate() {
            let mut child = at.clone();
            child.push(seg.clone());
            if self.is_module(&child) {
                at = child;
                continue;
            }
            // An item of `at`, or a name `at` imported from elsewhere, by name or by a glob.
            let m = self.modules.get(&at)?;
            if m.items.contains(seg) || hops >= 8 {
                return Some(at);
            }
            let target = match m.imports.get(seg) {
                Some(Some(target)) => Some(target.clone()),
                Some(None) => None,
                None => m.globs.iter().find(|g| self.names(g, seg)).map(|g| {
                    let mut t = g.clone();
                    t.push(seg.clone());
                    t
                }),
            };
            let Some(mut next) = target else { return Some(at) };
            next.extend(abs[k + 1..].iter().cloned());
            return self.resolve(&next, hops + 1).or(Some(at));
        }
        Some(at)
    }
}

fn load_crate(root: &Path, name: &str, src: &str) -> Crate {
    let mut files = Vec::new();
    rust_files(&root.join(src), &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root.join(src)).expect("under src").to_path_buf();
        let Some(path) = module_path(&rel) else { continue };
        let is_test = path.iter().any(|s| s == "tests");
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let code = strip_test_blocks(&strip(&text));
        modules.insert(path, Module::new(file, code, is_test));
    }
    let mut krate = Crate { modules };
    krate.resolve_imports(name);
    krate
}

/// Every path expression (`a::b::c`) in the code, with its line number, not counting the tail of
/// a longer path.
fn paths_in(code: &str) -> Vec<(usize, Vec<String>)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident_start = |c: char| c.is_alphabetic() || c == '_';
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        let prev_is_path = i >= 2 && chars[i - 1] == ':' && chars[i - 2] == ':';
        let prev_is_ident = i >= 1 && ident_char(chars[i - 1]);
        if ident_start(c) && !prev_is_path && !prev_is_ident {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < chars.len() && ident_char(chars[j]) {
                    j += 1;
                }
                segs.push(chars[s..j].iter().collect::<String>());
                if j + 2 < chars.len()
                    && chars[j] == ':'
                    && chars[j + 1] == ':'
                    && ident_start(chars[j + 2])
                {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push((line, segs));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn is_ancestor(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && b[..a.len()] == *a
}

/// An edge between two siblings, with one place that makes it.
struct Edge {
    why: String,
}

/// Sibling edges of one crate, grouped by their parent module.
fn sibling_edges(krate: &Crate, name: &str) -> BTreeMap<ModPath, BTreeMap<(String, String), Edge>> {
    let root = workspace_root();
    let mut out: BTreeMap<ModPath, BTreeMap<(String, String), Edge>> = BTreeMap::new();
    for (at, m) in &krate.modules {
        if m.is_test {
            continue;
        }
        let mut named: Vec<(usize, Vec<String>)> = paths_in(&m.code);
        // `use` trees with braces are not path expressions as a whole; add their flattened paths.
        for (_, path) in use_trees(&m.code) {
            named.push((0, path));
        }
        for (line, path) in named {
            let Some(abs) = krate.absolute(at, &path, name) else { continue };
            let Some(target) = krate.resolve(&abs, 0) else { continue };
            if krate.modules.get(&target).is_some_and(|t| t.is_test) {
                continue;
            }
            if is_ancestor(at, &target) || is_ancestor(&target, at) {
                continue;
            }
            let common = at.iter().zip(&target).take_while(|(a, b)| a == b).count();
            let parent = at[..common].to_vec();
            let (from, to) = (at[common].clone(), target[common].clone());
            let rel = m.file.strip_prefix(&root).unwrap_or(&m.file).display().to_string();
            let where_ = if line > 0 { format!("{rel}:{line}") } else { format!("{rel} (use)") };
            out.entry(parent)
                .or_default()
                .entry((from, to))
                .or_insert(Edge { why: format!("{where_} names {}", path.join("::")) });
        }
    }
    out
}

/// The cycles of a directed graph, each once, as lists of nodes (Tarjan's strongly connected
/// components of two or more nodes, or a node with an edge to itself).
fn cycles(edges: &BTreeMap<(String, String), Edge>) -> Vec<Vec<String>> {
    let mut nodes: BTreeSet<&String> = BTreeSet::new();
    for (a, b) in edges.keys() {
        nodes.insert(a);
        nodes.insert(b);
    }
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of = |n: &String| nodes.iter().position(|m| *m == n).expect("a node");
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[index_of(a)].push(index_of(b));
    }
    // Tarjan, iteratively bounded by the node count (graphs here have tens of nodes).
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    visit(w, adj, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            t.sccs.push(scc);
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &adj, &mut t);
        }
    }
    t.sccs
        .into_iter()
        .filter(|s| s.len() > 1 || adj[s[0]].contains(&s[0]))
        .map(|s| {
            let mut names: Vec<String> = s.into_iter().map(|i| nodes[i].clone()).collect();
            names.sort();
            names
        })
        .collect()
}

#[test]
fn sibling_modules_name_each_other_in_one_direction() {
    let root = workspace_root();
    let mut found = Vec::new();
    for (name, src) in CRATES {
        let krate = load_crate(&root, name, src);
        assert!(!krate.modules.is_empty(), "{src}: no modules found; is the path right?");
        for (parent, edges) in sibling_edges(&krate, name) {
            for cycle in cycles(&edges) {
                let mut lines = Vec::new();
                for ((a, b), e) in &edges {
                    if cycle.contains(a) && cycle.contains(b) {
                        lines.push(format!("    {a} -> {b}: {}", e.why));
                    }
                }
                let at = if parent.is_empty() {
                    (*name).to_string()
                } else {
                    format!("{name}::{}", parent.join("::"))
                };
                found.push(format!("  in {at}: {{{}}}\n{}", cycle.join(", "), lines.join("\n")));
            }
        }
    }
    assert!(found.is_empty(), "import circles among sibling modules:\n{}", found.join("\n"));
}

#[test]
fn no_source_file_outside_tests_is_over_about_800_lines() {
    let root = workspace_root();
    let mut big = Vec::new();
    for (name, src) in CRATES {
        let krate = load_crate(&root, name, src);
        for m in krate.modules.values() {
            let rel = m.file.strip_prefix(&root).unwrap_or(&m.file).display().to_string();
            if m.is_test || SIZE_EXEMPT.iter().any(|p| rel.starts_with(p)) {
                continue;
            }
            // Lines before the first inline test block are the file's own code.
            let text = std::fs::read_to_string(&m.file).expect("readable");
            let lines = text.lines().take_while(|l| l.trim() != "#[cfg(test)]").count();
            if lines > MAX_FILE_LINES {
                big.push(format!("  {rel}: {lines} lines"));
            }
        }
    }
    assert!(
        big.is_empty(),
        "source files over {MAX_FILE_LINES} lines outside tests:\n{}",
        big.join("\n")
    );
}

/// The `members` of the workspace's `Cargo.toml`, as folders.
fn workspace_members(root: &Path) -> Vec<String> {
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace Cargo.toml");
    let start = toml.find("members").expect("a members list");
    let open = start + toml[start..].find('[').expect("members = [");
    let close = open + toml[open..].find(']').expect("the list ends");
    toml[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn every_crate_of_the_workspace_is_checked() {
    let root = workspace_root();
    let missing: Vec<String> = workspace_members(&root)
        .into_iter()
        .filter(|m| !CRATES.iter().any(|(_, src)| *src == format!("{m}/src")))
        .collect();
    assert!(missing.is_empty(), "workspace members missing from CRATES: {missing:?}");
}

#[test]
fn the_checker_sees_a_circle_and_a_re_export() {
    // Two siblings in a made-up crate, each naming the other: one directly, one through the
    // parent's re-export. The checker must see both edges.
    let mut modules = BTreeMap::new();
    let module = |code: &str| Module::new(PathBuf::from("x.rs"), strip(code), false);
    modules.insert(vec![], module("mod a; mod b; mod c; pub use b::Thing; pub use c::*;"));
    modules.insert(vec!["a".to_string()], module("use super::Thing; fn f() {}"));
    modules.insert(
        vec!["b".to_string()],
        module("pub struct Thing; fn g() { crate::a::f(); } // super::zzz::q"),
    );
    // c is reached only through the parent's glob re-export, and names nobody.
    modules.insert(vec!["c".to_string()], module("pub fn helper() {}"));
    modules.insert(vec!["d".to_string()], module("fn h() { super::helper(); }"));
    let mut krate = Crate { modules };
    krate.resolve_imports("k");
    let edges = sibling_edges(&krate, "k");
    let root_edges = &edges[&Vec::<String>::new()];
    let pairs: Vec<_> = root_edges.keys().cloned().collect();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(pairs, vec![pair("a", "b"), pair("b", "a"), pair("d", "c")]);
    assert_eq!(cycles(root_edges), vec![vec!["a".to_string(), "b".to_string()]]);
}
