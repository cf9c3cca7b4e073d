//! What the CLI tests of `softverbs` share: running the binary as a real process on a fabric
//! directory of its own, bounded and checked for leftover segments, and a small XML
//! well-formedness check for the SVGs the commands draw.
//!
//! Each test file that needs it says `mod common;`; not every file uses every item.
#![allow(dead_code)]

use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softverbs_sim::peer::{FabricDir, Peer, Stderr};

/// The `softverbs` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// Bound on one command (a debug build, two cores shared with the other tests).
pub const BOUND: Duration = Duration::from_secs(120);

/// How a `softverbs` run ended and what it printed.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `softverbs <args> --fabric DIR` on a fabric directory of its own (named after `tag`);
/// the process is killed (and the test fails) past [`BOUND`]; the directory must be empty of
/// segments when the run ends, and is removed.
pub fn softverbs(tag: &str, args: &[&str]) -> Run {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let fabric = FabricDir::create(&format!("softverbs-{tag}-test-{}-{n}", std::process::id()))
        .expect("a fabric directory");
    let dir = fabric.path().to_str().expect("UTF-8 path").to_string();
    let mut c = Command::new(BIN);
    c.args(args).args(["--fabric", &dir]);
    let label = format!("softverbs {}", args.first().copied().unwrap_or(""));
    let mut p = Peer::spawn(&label, c, Stderr::Capture).expect("starting softverbs");
    p.close_stdin();
    let status = p.wait_exit(BOUND).unwrap_or_else(|e| panic!("softverbs {args:?}: {e}"));
    let stdout = p.remaining_lines(BOUND).join("\n");
    let stderr = p.stderr();
    fabric.wait_empty(Duration::from_secs(10)).expect("no segments left behind");
    Run { status, stdout, stderr }
}

/// A well-formedness check of XML: tags nest and close, attributes are quoted, `&` starts an
/// entity. Returns the root element's name.
pub fn xml_root(s: &str) -> Result<String, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut root = None;
    let mut rest = s;
    while let Some(i) = rest.find(['<', '&']) {
        let text = &rest[..i];
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        rest = &rest[i..];
        if rest.starts_with('&') {
            let end = rest.find(';').ok_or("an & without ;")?;
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&&rest[..=end]) {
                return Err(format!("unknown entity {}", &rest[..=end]));
            }
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').ok_or("an unclosed tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') {
            if !tag.ends_with('?') {
                return Err(format!("bad declaration {tag:?}"));
            }
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => continue,
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let name = body.split_whitespace().next().ok_or("an empty tag")?.to_string();
        // Attributes: name="value" pairs, values without '<' or a bare '"'.
        let mut attrs = body[name.len()..].trim();
        while !attrs.is_empty() {
            let eq = attrs.find("=\"").ok_or(format!("an unquoted attribute in <{name}>"))?;
            let close = attrs[eq + 2..].find('"').ok_or("an unclosed attribute value")?;
            let value = &attrs[eq + 2..eq + 2 + close];
            if value.contains('<') {
                return Err(format!("'<' in an attribute of <{name}>"));
            }
            attrs = attrs[eq + 3 + close..].trim_start();
        }
        if stack.is_empty() {
            if root.is_some() {
                return Err("two root elements".into());
            }
            root = Some(name.clone());
        }
        if !self_closing {
            stack.push(name);
        }
    }
    if !stack.is_empty() || !rest.trim().is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    root.ok_or_else(|| "no root element".into())
}

#[test]
fn the_xml_check_rejects_what_is_not_xml() {
    assert_eq!(
        xml_root("<?xml version=\"1.0\"?>\n<svg a=\"1\"><g/><t>x &amp; y</t></svg>\n"),
        Ok("svg".into())
    );
    assert!(xml_root("<svg><g></svg>").is_err());
    assert!(xml_root("<svg a=1></svg>").is_err());
    assert!(xml_root("<svg>a & b</svg>").is_err());
    assert!(xml_root("<svg></svg><svg></svg>").is_err());
}
