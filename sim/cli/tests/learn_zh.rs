//! The Traditional Chinese pages (docs/zh-TW/) keep up with the English lessons' pages
//! (docs/learn/): each English page has its zh-TW counterpart or is named as not yet translated,
//! the counterparts keep the wire lines and commands exactly (their `text` blocks are the
//! English page's), their links lead somewhere, they are written in Traditional characters, and
//! the glossary covers the terms the pages use.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// English pages of docs/learn/ that have no zh-TW counterpart yet: none today. A page added in
/// English may wait here for its translation, and leaves in the commit that adds it (`pending_pages_really_are_pending` holds the list to
/// the truth in both directions).
const PENDING: &[&str] = &[];

/// Terms the learn pages use that a reader must find in the glossary's English column.
const TERMS: &[&str] = &[
    "RDMA",
    "verbs",
    "queue pair (QP)",
    "completion queue (CQ)",
    "work request (WR)",
    "work completion (WC)",
    "memory region (MR)",
    "lkey / rkey",
    "scatter/gather entry (SGE)",
    "zero copy",
    "kernel bypass",
    "one-sided operation",
    "system call",
    "context switch",
    "latency",
    "bandwidth",
    "RoCE",
    "InfiniBand",
    "iWARP",
    "BTH",
    "PSN",
    "LID",
    "GID / GID index",
    "subnet manager",
    "MTU",
    "PFC",
    "ECN / DCQCN",
    "go-back-N",
    "packet ladder (sequence diagram)",
    "goodput",
    "local ACK timeout",
    "RNR NAK (receiver not ready)",
    "perftest",
    "emulated NIC",
];

/// Characters found only in Simplified Chinese (each beside its Traditional form), none of
/// which may appear in a zh-TW page.
const SIMPLIFIED: &[(char, char)] = &[
    ('这', '這'),
    ('们', '們'),
    ('个', '個'),
    ('对', '對'),
    ('发', '發'),
    ('时', '時'),
    ('说', '說'),
    ('网', '網'),
    ('络', '絡'),
    ('据', '據'),
    ('问', '問'),
    ('题', '題'),
    ('设', '設'),
    ('备', '備'),
    ('连', '連'),
    ('传', '傳'),
    ('输', '輸'),
    ('数', '數'),
    ('为', '為'),
    ('与', '與'),
    ('执', '執'),
    ('间', '間'),
    ('议', '議'),
    ('绪', '緒'),
    ('队', '隊'),
    ('区', '區'),
    ('储', '儲'),
    ('读', '讀'),
    ('写', '寫'),
];

fn root() -> PathBuf {
    // This crate is sim/cli/, two levels below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The `.md` file names of a directory.
fn pages(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect()
}

/// The `text` blocks of a page, in order: the wire lines, tables and outputs it shows.
fn text_blocks(page: &str) -> Vec<String> {
    let (mut blocks, mut open): (Vec<String>, Option<String>) = (Vec::new(), None);
    for line in page.lines() {
        match (open.take(), line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.trim() == "text" => open = Some(String::new()),
            (None, Some(_)) => open = Some("\u{0}".into()),
            (Some(b), Some(_)) => {
                if !b.starts_with('\u{0}') {
                    blocks.push(b);
                }
            }
            (Some(mut b), None) => {
                b.push_str(line);
                b.push('\n');
                open = Some(b);
            }
            (None, None) => {}
        }
    }
    blocks
}

fn zh_pages() -> Vec<PathBuf> {
    let zh = root().join("docs/zh-TW");
    let mut all: Vec<PathBuf> = pages(&zh).into_iter().map(|n| zh.join(n)).collect();
    all.extend(pages(&zh.join("learn")).into_iter().map(|n| zh.join("learn").join(n)));
    all
}

#[test]
fn every_english_learn_page_has_a_zh_tw_counterpart_or_is_pending() {
    let mut en = pages(&root().join("docs/learn"));
    let zh = pages(&root().join("docs/zh-TW/learn"));
    // The English glossary's counterpart is docs/zh-TW/glossary.md, beside the pages.
    assert!(en.remove("glossary.md") && root().join("docs/zh-TW/glossary.md").is_file());
    let pending: BTreeSet<String> = PENDING.iter().map(|s| s.to_string()).collect();
    let missing: Vec<_> = en.iter().filter(|p| !zh.contains(*p) && !pending.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "English learn pages with no docs/zh-TW/learn/ counterpart: {missing:?}"
    );
    let orphans: Vec<_> = zh.iter().filter(|p| !en.contains(*p)).collect();
    assert!(orphans.is_empty(), "zh-TW learn pages with no English original: {orphans:?}");
    for must in ["perftest.md", "roce-ib-iwarp.md", "real-cluster.md"] {
        assert!(zh.contains(must), "docs/zh-TW/learn/{must} is missing");
    }
}

#[test]
fn pending_pages_really_are_pending() {
    let en = pages(&root().join("docs/learn"));
    let zh = pages(&root().join("docs/zh-TW/learn"));
    for p in PENDING {
        assert!(en.contains(*p), "PENDING names {p}, which docs/learn/ does not have");
        assert!(!zh.contains(*p), "docs/zh-TW/learn/{p} exists: take it out of PENDING");
    }
    // The zh-TW README tells its readers which lessons are English-only for now.
    let readme = read(&root().join("docs/zh-TW/README.md"));
    assert!(
        readme.contains("../learn/README.md"),
        "docs/zh-TW/README.md points to the English lessons"
    );
}

#[test]
fn the_translations_keep_the_wire_lines_and_commands_exactly() {
    let zh = root().join("docs/zh-TW/learn");
    for name in pages(&zh) {
        let en_blocks = text_blocks(&read(&root().join("docs/learn").join(&name)));
        let zh_blocks = text_blocks(&read(&zh.join(&name)));
        assert!(!en_blocks.is_empty(), "docs/learn/{name} has text blocks to compare");
        assert_eq!(
            zh_blocks, en_blocks,
            "docs/zh-TW/learn/{name}: its text blocks differ from the English page's"
        );
    }
}

#[test]
fn the_zh_tw_pages_link_to_pages_that_exist() {
    for page in zh_pages() {
        let text = read(&page);
        for link in text.split("](").skip(1).filter_map(|s| s.split(')').next()) {
            if link.starts_with("http") {
                continue;
            }
            let target =
                page.parent().expect("a directory").join(link.split('#').next().unwrap_or(link));
            assert!(target.exists(), "{}: the link {link} leads nowhere", page.display());
        }
    }
}

#[test]
fn the_zh_tw_pages_are_in_traditional_characters() {
    for page in zh_pages() {
        let text = read(&page);
        for (simplified, traditional) in SIMPLIFIED {
            assert!(
                !text.contains(*simplified),
                "{}: the Simplified {simplified} (Traditional: {traditional})",
                page.display()
            );
        }
        assert!(
            text.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).count() > 100,
            "{} is mostly not Chinese",
            page.display()
        );
    }
}

#[test]
fn the_glossary_covers_the_terms_the_pages_use() {
    let glossary = read(&root().join("docs/zh-TW/glossary.md"));
    let rows: Vec<(String, String, String)> = glossary
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| English"))
        .map(|l| {
            let cells: Vec<String> =
                l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
            assert_eq!(
                cells.len(),
                3,
                "a glossary row has English, 繁體中文 and an explanation: {l}"
            );
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect();
    for term in TERMS {
        let row = rows.iter().find(|(en, _, _)| en == term || en.starts_with(&format!("{term} (")));
        let (_, zh, why) = row.unwrap_or_else(|| panic!("the glossary has no row for {term}"));
        assert!(!zh.is_empty() && !why.is_empty(), "the glossary row for {term} is incomplete");
    }
    // And the terms really are used: each, by its name or its abbreviation, appears in an
    // English learn page.
    let en: String = pages(&root().join("docs/learn"))
        .iter()
        .map(|n| read(&root().join("docs/learn").join(n)).to_lowercase())
        .collect();
    for term in TERMS {
        let name = term.split(" (").next().unwrap_or(term).split(" / ").next().unwrap_or(term);
        let abbrev = term.split_once(" (").map(|(_, a)| a.trim_end_matches(')'));
        let used = en.contains(&name.to_lowercase())
            || abbrev.is_some_and(|a| en.contains(&a.to_lowercase()));
        assert!(used, "the glossary term {term} appears in no docs/learn page");
    }
}

/// The glossary names each term once, and the English glossary has every term the Chinese one
/// has.
#[test]
fn each_glossary_term_is_there_once_and_in_both_languages() {
    let terms = |path: &str| -> Vec<String> {
        read(&root().join(path))
            .lines()
            .filter(|l| {
                l.starts_with("| ") && !l.starts_with("| English") && !l.starts_with("| Term")
            })
            .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_lowercase())
            .collect()
    };
    let zh = terms("docs/zh-TW/glossary.md");
    let en = terms("docs/learn/glossary.md");
    for (name, list) in [("zh-TW", &zh), ("English", &en)] {
        let mut seen = BTreeSet::new();
        for t in list.iter() {
            assert!(seen.insert(t), "the {name} glossary has {t:?} twice");
        }
    }
    let missing: Vec<&String> = zh.iter().filter(|t| !en.contains(t)).collect();
    assert!(missing.is_empty(), "terms of the zh-TW glossary missing in English: {missing:?}");
}

/// The zh-TW pages link back to zh-TW pages, the index lists every zh-TW page, and the
/// phrases mended in issue 32 stay mended.
#[test]
fn zh_tw_pages_lead_back_to_zh_tw_and_the_index_lists_them_all() {
    let index = read(&root().join("docs/zh-TW/README.md"));
    for page in pages(&root().join("docs/zh-TW/learn")) {
        assert!(
            index.contains(&format!("](learn/{page})")),
            "docs/zh-TW/README.md lacks learn/{page}"
        );
    }
    for path in zh_pages() {
        let text = read(&path);
        assert!(
            !text.contains("回到[課程列表](../../learn/"),
            "{}: a back-link to the English lessons",
            path.display()
        );
        for bad in ["情境切換", "無遺失", "有貨"] {
            assert!(!text.contains(bad), "{}: {bad}", path.display());
        }
    }
}
