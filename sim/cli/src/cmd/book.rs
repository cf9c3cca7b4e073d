//! `softverbs book --out DIR`: the learner's guide (`docs/learn`, and its Traditional Chinese
//! in `docs/zh-TW`) as a static site: one HTML page per Markdown page, each with its book's
//! table of contents, its previous and next pages and its counterpart in the other language,
//! and a landing page. Every link between pages is checked as the site is built (the page
//! exists, and so does the heading an anchor names); a link to another file of the repository
//! must name a file that exists, and is shown as its path. Any broken link fails the build,
//! each named with its page.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{html, CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use super::{output_error, CliError};

/// What `softverbs book` takes.
#[derive(clap::Args, Debug, Clone)]
pub struct BookArgs {
    /// Where to write the site (made if missing; its pages are overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The repository's docs directory (default: docs, from the current directory).
    #[arg(long, value_name = "DIR", default_value = "docs")]
    pub docs: PathBuf,
}

/// One of the two books: its title, its language, its first page, and the directories (under
/// docs/) whose pages it holds.
struct Book {
    title: &'static str,
    lang: &'static str,
    index: &'static str,
    dirs: &'static [&'static str],
}

const BOOKS: [Book; 2] = [
    Book {
        title: "softverbs: learning RDMA by measurement",
        lang: "en",
        index: "learn/README.md",
        dirs: &["learn"],
    },
    Book {
        title: "softverbs：用量測學 RDMA",
        lang: "zh-TW",
        index: "zh-TW/README.md",
        dirs: &["zh-TW", "zh-TW/learn"],
    },
];

/// A page of a book: its path under docs/ (`learn/mr.md`), its title and its Markdown.
struct Page {
    path: String,
    title: String,
    text: String,
}

/// The anchor GitHub gives a heading: lowercase, spaces to `-`, other punctuation dropped.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `path` with `.` and `..` resolved, as a `/`-separated string under docs/, or None if it
/// climbs out of the repository (above docs/'s parent).
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut above = 0;
    for c in path.components() {
        match c {
            Component::ParentDir if parts.pop().is_none() => above += 1,
            Component::ParentDir => {}
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    match above {
        0 => Some(parts.join("/")),
        1 => Some(format!("../{}", parts.join("/"))),
        _ => None,
    }
}

/// The Markdown pages of `dirs` under `docs`, by path.
fn read_pages(docs: &Path, dirs: &[&str]) -> Result<BTreeMap<String, Page>, CliError> {
    let mut pages = BTreeMap::new();
    for dir in dirs {
        let entries = std::fs::read_dir(docs.join(dir)).map_err(|e| {
            CliError::usage(format!("cannot read {}: {e}", docs.join(dir).display()))
        })?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".md") {
                continue;
            }
            let text = std::fs::read_to_string(e.path())
                .map_err(|err| CliError::failed(format!("{}: {err}", e.path().display())))?;
            let title = text
                .lines()
                .find_map(|l| l.strip_prefix("# "))
                .unwrap_or(&name)
                .replace('`', "")
                .to_string();
            let path = format!("{dir}/{name}");
            pages.insert(path.clone(), Page { path, title, text });
        }
    }
    Ok(pages)
}

/// The order of a book: its index, then the pages in the order the index links them (and the
/// pages those link, breadth first), then any left, by name.
fn order(book: &Book, pages: &BTreeMap<String, Page>) -> Vec<String> {
    let mut seen = vec![book.index.to_string()];
    let mut at = 0;
    while at < seen.len() {
        let page = &pages[&seen[at]];
        let dir = Path::new(&page.path).parent().unwrap_or(Path::new(""));
        for (url, _) in links(&page.text) {
            let file = url.split('#').next().unwrap_or("");
            if file.is_empty() || file.contains("://") || !file.ends_with(".md") {
                continue;
            }
            if let Some(p) = normalize(&dir.join(file)) {
                if pages.contains_key(&p) && !seen.contains(&p) {
                    seen.push(p);
                }
            }
        }
        at += 1;
    }
    for p in pages.keys() {
        if !seen.contains(p) {
            seen.push(p.clone());
        }
    }
    seen
}

/// Each link and image destination of a page, with whether it is an image.
fn links(text: &str) -> Vec<(String, bool)> {
    Parser::new_ext(text, Options::ENABLE_TABLES)
        .filter_map(|e| match e {
            Event::Start(Tag::Link { dest_url, .. }) => Some((dest_url.to_string(), false)),
            Event::Start(Tag::Image { dest_url, .. }) => Some((dest_url.to_string(), true)),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for e in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match e {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    out.insert(slug(&h));
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            _ => {}
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The path from the directory of page `from` to `to` (both under the site's root).
fn relative(from: &str, to: &str) -> String {
    let depth = from.matches('/').count();
    format!("{}{to}", "../".repeat(depth))
}

/// What a link of page `page` becomes in the site, or why it is broken. `all` are the pages of
/// both books, `docs` the docs directory (for links to other files of the repository).
fn resolve(
    page: &str,
    url: &str,
    all: &BTreeMap<String, (Page, BTreeSet<String>)>,
    docs: &Path,
) -> Result<Option<String>, String> {
    if url.contains("://") || url.starts_with("mailto:") {
        return Ok(None);
    }
    let (file, anchor) = match url.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (url, None),
    };
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    let target = if file.is_empty() {
        page.to_string()
    } else {
        normalize(&dir.join(file)).ok_or_else(|| format!("{url}: leaves the repository"))?
    };
    if let Some((_, heads)) = all.get(&target) {
        if let Some(a) = anchor.filter(|a| !heads.contains(*a)) {
            return Err(format!("{url}: {target} has no heading #{a}"));
        }
        let html = target.trim_end_matches(".md").to_string() + ".html";
        let mut to = relative(page, &html);
        if let Some(a) = anchor {
            to = format!("{to}#{a}");
        }
        return Ok(Some(to));
    }
    // Another file of the repository (docs/guide.md, ../labs/README.md, an image).
    let on_disk = docs.join(&target);
    if on_disk.exists() {
        return Ok(Some(format!("repo:{target}")));
    }
    Err(format!("{url}: no such file ({})", on_disk.display()))
}

/// A path under docs/ (or `../X`, beside it) as the repository names it.
fn repo_path(p: &str) -> String {
    match p.strip_prefix("../") {
        Some(rest) => rest.to_string(),
        None => format!("docs/{p}"),
    }
}

/// The HTML of one page: the book's contents at the side, the page, the previous and next.
#[allow(clippy::too_many_arguments)]
fn render(
    book: &Book,
    page: &Page,
    toc: &[(String, String)],
    counterpart: Option<&str>,
    all: &BTreeMap<String, (Page, BTreeSet<String>)>,
    docs: &Path,
    images: &mut BTreeSet<String>,
    broken: &mut Vec<String>,
) -> String {
    let here = &page.path;
    let mut heading: Option<(HeadingLevel, Vec<Event>)> = None;
    let mut events: Vec<Event> = Vec::new();
    // For each open link: whether it stays a link (false: a repository path, drawn as text).
    let mut links_open: Vec<bool> = Vec::new();
    for e in Parser::new_ext(&page.text, Options::ENABLE_TABLES) {
        // Headings get GitHub's anchors.
        if let Some((level, inner)) = heading.as_mut() {
            match e {
                Event::End(TagEnd::Heading(_)) => {
                    let text: String = inner
                        .iter()
                        .filter_map(|e| match e {
                            Event::Text(t) | Event::Code(t) => Some(t.to_string()),
                            _ => None,
                        })
                        .collect();
                    events.push(Event::Start(Tag::Heading {
                        level: *level,
                        id: Some(CowStr::from(slug(&text))),
                        classes: Vec::new(),
                        attrs: Vec::new(),
                    }));
                    events.append(inner);
                    events.push(e);
                    heading = None;
                }
                e => inner.push(e),
            }
            continue;
        }
        match e {
            Event::Start(Tag::Heading { level, .. }) => heading = Some((level, Vec::new())),
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                match resolve(here, &dest_url, all, docs) {
                    Ok(Some(to)) if to.starts_with("repo:") => {
                        // Not in the book: the words, titled with the repository's path.
                        let path = to.trim_start_matches("repo:");
                        let (_, _) = (link_type, id);
                        let span = format!(
                            "<span class=\"repo\" title=\"in the repository: {}\">",
                            escape(&repo_path(path))
                        );
                        events.push(Event::InlineHtml(CowStr::from(span)));
                        links_open.push(false);
                        continue;
                    }
                    Ok(Some(to)) => events.push(Event::Start(Tag::Link {
                        link_type,
                        dest_url: CowStr::from(to),
                        title,
                        id,
                    })),
                    Ok(None) => {
                        events.push(Event::Start(Tag::Link { link_type, dest_url, title, id }))
                    }
                    Err(why) => {
                        broken.push(format!("docs/{here}: {why}"));
                        events.push(Event::Start(Tag::Link { link_type, dest_url, title, id }));
                    }
                }
                links_open.push(true);
            }
            Event::End(TagEnd::Link) => match links_open.pop() {
                Some(false) => events.push(Event::InlineHtml(CowStr::from("</span>"))),
                _ => events.push(Event::End(TagEnd::Link)),
            },
            Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
                let dir = Path::new(here).parent().unwrap_or(Path::new(""));
                match normalize(&dir.join(dest_url.as_ref())) {
                    Some(p) if docs.join(&p).is_file() => {
                        images.insert(p);
                    }
                    _ => broken.push(format!("docs/{here}: image {dest_url}: no such file")),
                }
                events.push(Event::Start(Tag::Image { link_type, dest_url, title, id }));
            }
            e => events.push(e),
        }
    }
    let mut body = String::new();
    html::push_html(&mut body, events.into_iter());
    let at = toc.iter().position(|(p, _)| p == here).unwrap_or(0);
    let link = |p: &str| relative(here, &(p.trim_end_matches(".md").to_string() + ".html"));
    let mut nav = String::new();
    for (p, title) in toc {
        let class = if p == here { " class=\"here\"" } else { "" };
        let _ = writeln!(nav, "<li{class}><a href=\"{}\">{}</a></li>", link(p), escape(title));
    }
    let mut foot = String::new();
    if at > 0 {
        let (p, t) = &toc[at - 1];
        let _ = write!(foot, "<a rel=\"prev\" href=\"{}\">← {}</a> ", link(p), escape(t));
    }
    if let Some((p, t)) = toc.get(at + 1) {
        let _ = write!(foot, "<a rel=\"next\" href=\"{}\">{} →</a>", link(p), escape(t));
    }
    let other = match (counterpart, book.lang) {
        (Some(p), "en") => format!("<a class=\"lang\" href=\"{}\">繁體中文</a>", link(p)),
        (Some(p), _) => format!("<a class=\"lang\" href=\"{}\">English</a>", link(p)),
        (None, _) => String::new(),
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"{lang}\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title} — {book}</title>\n<link rel=\"stylesheet\" href=\"{css}\">\n</head>\n\
         <body>\n<nav class=\"toc\">\n<p><a href=\"{home}\">{book}</a></p>\n<ol>\n{nav}</ol>\n\
         </nav>\n<main>\n<p class=\"top\">{other}</p>\n{body}<p class=\"pages\">{foot}</p>\n\
         </main>\n</body>\n</html>\n",
        lang = book.lang,
        title = escape(&page.title),
        book = escape(book.title),
        css = relative(here, "book.css"),
        home = relative(here, "index.html"),
    )
}

const CSS: &str = "body{display:flex;margin:0;font-family:sans-serif;line-height:1.5}\
.toc{width:17em;flex:none;padding:1em;background:#f4f4f4;height:100vh;overflow:auto;\
position:sticky;top:0;font-size:90%}.toc .here a{font-weight:bold}\
main{max-width:52em;padding:1em 2em;overflow-x:auto}pre{background:#f6f6f6;padding:.6em;\
overflow-x:auto}code{font-size:90%}table{border-collapse:collapse}td,th{border:1px solid #ccc;\
padding:.2em .5em}.top{text-align:right}.pages{display:flex;justify-content:space-between}\
img{max-width:100%}\n";

/// Build the site of `docs` into `out`; the pages written, or every broken link.
pub fn build(docs: &Path, out: &Path) -> Result<Vec<String>, CliError> {
    let mut all: BTreeMap<String, (Page, BTreeSet<String>)> = BTreeMap::new();
    let mut tocs = Vec::new();
    for book in &BOOKS {
        let pages = read_pages(docs, book.dirs)?;
        if !pages.contains_key(book.index) {
            return Err(CliError::usage(format!("{} has no {}", docs.display(), book.index)));
        }
        let toc: Vec<(String, String)> =
            order(book, &pages).into_iter().map(|p| (p.clone(), pages[&p].title.clone())).collect();
        tocs.push(toc);
        for (path, page) in pages {
            let heads = anchors(&page.text);
            all.insert(path, (page, heads));
        }
    }
    let (mut broken, mut images, mut written) = (Vec::new(), BTreeSet::new(), Vec::new());
    for (book, toc) in BOOKS.iter().zip(&tocs) {
        for (path, _) in toc {
            let (page, _) = &all[path];
            // The counterpart: learn/X.md and zh-TW/learn/X.md (the indexes, each other).
            let counterpart = match book.lang {
                "en" if path == book.index => Some("zh-TW/README.md".to_string()),
                "en" if path == "learn/glossary.md" => Some("zh-TW/glossary.md".to_string()),
                "en" => Some(format!("zh-TW/{path}")),
                _ if path == book.index => Some("learn/README.md".to_string()),
                _ => Some(path.trim_start_matches("zh-TW/").to_string())
                    .filter(|p| p.starts_with("learn/"))
                    .or_else(|| (path == "zh-TW/glossary.md").then(|| "learn/glossary.md".into())),
            }
            .filter(|p| all.contains_key(p));
            let html = render(
                book,
                page,
                toc,
                counterpart.as_deref(),
                &all,
                docs,
                &mut images,
                &mut broken,
            );
            let file = out.join(path.trim_end_matches(".md").to_string() + ".html");
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| CliError::failed(format!("cannot make {}: {e}", dir.display())))?;
            }
            std::fs::write(&file, html)
                .map_err(|e| CliError::failed(format!("cannot write {}: {e}", file.display())))?;
            written.push(file.display().to_string());
        }
    }
    if !broken.is_empty() {
        return Err(CliError::failed(format!(
            "{} broken link(s) in the book:\n  {}",
            broken.len(),
            broken.join("\n  ")
        )));
    }
    for img in images {
        let to = out.join(&img);
        if let Some(dir) = to.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::copy(docs.join(&img), &to)
            .map_err(|e| CliError::failed(format!("cannot copy {img}: {e}")))?;
    }
    std::fs::write(out.join("book.css"), CSS)
        .map_err(|e| CliError::failed(format!("cannot write book.css: {e}")))?;
    let mut index = String::from(
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>softverbs: the \
         book</title>\n<link rel=\"stylesheet\" href=\"book.css\">\n</head>\n<body>\n<main>\n\
         <h1>softverbs: the book</h1>\n",
    );
    for (book, toc) in BOOKS.iter().zip(&tocs) {
        let _ = writeln!(index, "<h2 lang=\"{}\">{}</h2>\n<ol>", book.lang, escape(book.title));
        for (p, t) in toc {
            let _ = writeln!(
                index,
                "<li><a href=\"{}\">{}</a></li>",
                p.trim_end_matches(".md").to_string() + ".html",
                escape(t)
            );
        }
        index.push_str("</ol>\n");
    }
    index.push_str("</main>\n</body>\n</html>\n");
    std::fs::write(out.join("index.html"), index)
        .map_err(|e| CliError::failed(format!("cannot write index.html: {e}")))?;
    written.push(out.join("index.html").display().to_string());
    Ok(written)
}

/// `softverbs book --out DIR`.
pub fn run(args: &BookArgs, w: &mut dyn Write) -> Result<(), CliError> {
    if !args.docs.join("learn").is_dir() {
        return Err(CliError::usage(format!(
            "{} has no learn/ directory: run from the repository's root, or give --docs",
            args.docs.display()
        )));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::usage(format!("cannot make {}: {e}", args.out.display())))?;
    let written = build(&args.docs, &args.out)?;
    writeln!(
        w,
        "softverbs book: {} pages, every link checked; open {}",
        written.len(),
        args.out.join("index.html").display()
    )
    .map_err(output_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_and_paths_are_as_github_makes_them() {
        assert_eq!(slug("What the check does"), "what-the-check-does");
        assert_eq!(slug("`no-recv`"), "no-recv");
        assert_eq!(
            slug("Goodput against loss: go-back-N's cliff"),
            "goodput-against-loss-go-back-ns-cliff"
        );
        assert_eq!(
            normalize(Path::new("zh-TW/learn/../../learn/mr.md")).as_deref(),
            Some("learn/mr.md")
        );
        assert_eq!(
            normalize(Path::new("learn/../../labs/README.md")).as_deref(),
            Some("../labs/README.md")
        );
        assert_eq!(normalize(Path::new("learn/../../../etc")), None);
        assert_eq!(relative("zh-TW/learn/mr.md", "book.css"), "../../book.css");
    }
}
