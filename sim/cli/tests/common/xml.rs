//! A small XML well-formedness check for the SVGs softverbs writes (shared by the ladder
//! tests): one root element, every tag closed in order, attributes quoted and unique, text
//! free of raw `<` and of `&` that starts no entity. Enough to know a browser parses the file;
//! the ladder tests then read the elements they count from the same text.

/// `Ok(root element name)` if `s` is well-formed XML, else what is wrong and where.
pub fn well_formed(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut stack: Vec<String> = Vec::new();
    let mut root: Option<String> = None;
    let mut i = 0;
    let entity_ok = |at: usize| {
        let rest = &s[at..];
        ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].iter().any(|e| rest.starts_with(e))
            || (rest.starts_with("&#") && rest[2..].find(';').is_some_and(|n| n > 0 && n < 8))
    };
    while i < b.len() {
        match b[i] {
            b'<' => {
                let end = s[i..].find('>').ok_or(format!("unclosed tag at byte {i}"))? + i;
                let tag = &s[i + 1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().ok_or(format!("</{name}> closes nothing at {i}"))?;
                    if open != name.trim() {
                        return Err(format!("</{name}> closes <{open}> at byte {i}"));
                    }
                } else if tag.starts_with('?') || tag.starts_with("!--") {
                    // A declaration or a comment.
                } else {
                    let self_closing = tag.ends_with('/');
                    let body = tag.trim_end_matches('/');
                    let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
                    let name = &body[..name_end];
                    if name.is_empty()
                        || !name
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '-' || c == ':' || c == '_')
                    {
                        return Err(format!("bad element name {name:?} at byte {i}"));
                    }
                    attributes(&body[name_end..])
                        .map_err(|e| format!("<{name}> at byte {i}: {e}"))?;
                    if stack.is_empty() {
                        if root.is_some() {
                            return Err(format!("a second root element <{name}> at byte {i}"));
                        }
                        root = Some(name.to_string());
                    }
                    if !self_closing {
                        stack.push(name.to_string());
                    }
                }
                i = end + 1;
            }
            b'&' if !entity_ok(i) => return Err(format!("a bare & at byte {i}")),
            b'>' if stack.is_empty() => return Err(format!("a stray > at byte {i}")),
            c if stack.is_empty() && !c.is_ascii_whitespace() => {
                return Err(format!("text outside the root element at byte {i}"))
            }
            _ => i += 1,
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> is never closed"));
    }
    root.ok_or_else(|| "no element".to_string())
}

fn attributes(mut s: &str) -> Result<(), String> {
    let mut seen = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() {
            return Ok(());
        }
        let eq = s.find('=').ok_or(format!("attribute without a value: {s:?}"))?;
        let name = s[..eq].trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("bad attribute name {name:?}"));
        }
        if seen.contains(&name.to_string()) {
            return Err(format!("attribute {name} twice"));
        }
        seen.push(name.to_string());
        let rest = &s[eq + 1..];
        let q = rest.chars().next().ok_or("value missing")?;
        if q != '"' && q != '\'' {
            return Err(format!("unquoted value of {name}"));
        }
        let close = rest[1..].find(q).ok_or(format!("unterminated value of {name}"))?;
        let value = &rest[1..1 + close];
        if value.contains('<') {
            return Err(format!("< in the value of {name}"));
        }
        s = &rest[close + 2..];
    }
}

/// Every `attr="..."` value of the elements named `elem` whose opening tag contains `marker`,
/// in document order.
pub fn attr_values(s: &str, marker: &str, attr: &str) -> Vec<String> {
    s.match_indices(marker)
        .filter_map(|(at, _)| {
            let tag_end = s[at..].find('>')? + at;
            let tag = &s[at..tag_end];
            let k = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
            Some(tag[k..k + tag[k..].find('"')?].to_string())
        })
        .collect()
}

#[test]
fn the_checker_rejects_what_is_not_xml() {
    assert_eq!(well_formed(r#"<svg a="1"><g><text>x &amp; y</text></g></svg>"#).unwrap(), "svg");
    for bad in [
        "<svg><g></svg>",
        "<svg a=1></svg>",
        "<svg>a & b</svg>",
        "<svg></svg><svg></svg>",
        "<svg a=\"1\" a=\"2\"/>",
        "<svg>",
        "text<svg/>",
    ] {
        assert!(well_formed(bad).is_err(), "{bad}");
    }
}

/// Whether `svg` renders: `rsvg-convert` (librsvg, what GNOME and many documentation tools
/// draw SVG with) turns it into a PNG without an error. `Ok(false)` when `rsvg-convert` is not
/// installed, which fails the caller's test when `SOFTVERBS_REQUIRE_RSVG=1` (set by `.ci/run`,
/// which installs librsvg2-bin).
pub fn renders(svg: &std::path::Path) -> Result<bool, String> {
    let out = match std::process::Command::new("rsvg-convert").arg(svg).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var("SOFTVERBS_REQUIRE_RSVG").is_ok_and(|v| v == "1") {
                return Err("rsvg-convert is not installed (apt-get install librsvg2-bin)".into());
            }
            eprintln!("rsvg-convert is not installed: {} not rendered", svg.display());
            return Ok(false);
        }
        Err(e) => return Err(format!("running rsvg-convert: {e}")),
    };
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!("rsvg-convert {}: {}: {why}", svg.display(), out.status));
    }
    if !out.stdout.starts_with(b"\x89PNG\r\n\x1a\n") || out.stdout.len() < 100 {
        return Err(format!("rsvg-convert {}: no PNG came out", svg.display()));
    }
    Ok(true)
}

#[test]
fn the_render_check_refuses_what_librsvg_cannot_draw() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bad = dir.path().join("bad.svg");
    std::fs::write(&bad, "<svg xmlns=\"http://www.w3.org/2000/svg\"><g></svg>").unwrap();
    let good = dir.path().join("good.svg");
    std::fs::write(
        &good,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><rect width=\"5\" height=\"5\"/></svg>",
    )
    .unwrap();
    if renders(&good).expect("a small valid SVG renders") {
        assert!(renders(&bad).is_err(), "a broken SVG is refused");
    }
}
