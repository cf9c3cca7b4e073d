//! `softverbs book`: the guide's pages (docs/learn and docs/zh-TW) become a site with a table of
//! contents and the other language a click away, and a broken link between pages (a missing
//! page, a heading that is not there, a file of the repository that does not exist) fails the
//! build, named with its page.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("the workspace root").into()
}

fn book(docs: &Path, out: &Path) -> (i32, String, String) {
    let o = Command::new(BIN)
        .arg("book")
        .arg("--docs")
        .arg(docs)
        .arg("--out")
        .arg(out)
        .output()
        .expect("softverbs runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn md_pages(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("a docs directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_docs_build_into_a_site_with_every_page_and_its_counterpart() {
    let out = tempfile::tempdir().expect("tmp");
    let (code, stdout, stderr) = book(&root().join("docs"), out.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("every link checked"), "{stdout}");
    for dir in ["learn", "zh-TW", "zh-TW/learn"] {
        for page in md_pages(&root().join("docs").join(dir)) {
            let html = out.path().join(dir).join(page.replace(".md", ".html"));
            let text = std::fs::read_to_string(&html)
                .unwrap_or_else(|e| panic!("{}: {e}", html.display()));
            // The table of contents of its book, with this page marked.
            assert!(
                text.contains("<nav class=\"toc\">") && text.contains("class=\"here\""),
                "{page}"
            );
        }
    }
    let index = std::fs::read_to_string(out.path().join("index.html")).expect("index");
    assert!(
        index.contains("href=\"learn/README.html\"")
            && index.contains("href=\"zh-TW/README.html\"")
    );
    assert!(
        index.contains("href=\"learn/glossary.html\"")
            && index.contains("href=\"zh-TW/glossary.html\"")
    );
    let mr = std::fs::read_to_string(out.path().join("learn/mr.html")).expect("mr");
    assert!(mr.contains("<a class=\"lang\" href=\"../zh-TW/learn/mr.html\">繁體中文</a>"), "{mr}");
    let zh = std::fs::read_to_string(out.path().join("zh-TW/glossary.html")).expect("glossary");
    assert!(zh.contains("href=\"../learn/glossary.html\">English</a>"), "{zh}");
    // Links between pages lead to the pages' HTML, anchors kept; headings carry them.
    let drills = std::fs::read_to_string(out.path().join("learn/drills.html")).expect("drills");
    assert!(drills.contains("<h2 id=\"no-recv\">"), "{drills}");
    assert!(out.path().join("learn/ladder-lossy.svg").is_file());
}

#[test]
fn a_broken_link_fails_the_build_and_is_named() {
    let docs = tempfile::tempdir().expect("tmp");
    for dir in ["learn", "zh-TW", "zh-TW/learn"] {
        std::fs::create_dir_all(docs.path().join(dir)).expect("mkdir");
    }
    let write = |p: &str, t: &str| std::fs::write(docs.path().join(p), t).expect("write");
    write("learn/README.md", "# Lessons\n\n[one](one.md) [gone](gone.md) [here](one.md#there)\n");
    write("learn/one.md", "# One\n\n## Here\n\n[up](README.md#lessons) [guide](../guide.md)\n");
    write("zh-TW/README.md", "# 課程\n\n[一](learn/one.md)\n");
    write("zh-TW/learn/one.md", "# 一\n\n[回到課程列表](README.md)\n");
    let out = tempfile::tempdir().expect("tmp");
    let (code, _, stderr) = book(docs.path(), out.path());
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("4 broken link(s) in the book"), "{stderr}");
    for want in [
        "docs/learn/README.md: gone.md: no such file",
        "docs/learn/README.md: one.md#there: learn/one.md has no heading #there",
        "docs/learn/one.md: ../guide.md: no such file",
        "docs/zh-TW/learn/one.md: README.md: no such file",
    ] {
        assert!(stderr.contains(want), "no {want:?} in:\n{stderr}");
    }
    // Mended, it builds.
    write("learn/README.md", "# Lessons\n\n[one](one.md) [here](one.md#here)\n");
    write("learn/one.md", "# One\n\n## Here\n\n[up](README.md#lessons)\n");
    write("zh-TW/learn/one.md", "# 一\n\n[回到課程列表](../README.md)\n");
    let (code, stdout, stderr) = book(docs.path(), out.path());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // No docs here: a clear error.
    let (code, _, stderr) = book(&docs.path().join("nowhere"), out.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("has no learn/ directory"), "{stderr}");
}
