//! The documentation keeps its promises: every scenario (```toml block) in the README, the
//! guide and the simulator page loads and its run passes.

use std::path::{Path, PathBuf};

use softverbs_sim::world::scenario::{run, RunOptions, Scenario};

/// The pages whose scenarios are run.
const SCENARIO_PAGES: [&str; 3] = ["README.md", "docs/guide.md", "docs/simulator.md"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn page(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// A fenced block: where it starts (`page:line` of its first content line), its info string
/// (`toml`, `sh`, ...) and its lines.
struct Block {
    at: String,
    info: String,
    lines: Vec<String>,
}

/// The fenced blocks of a page, and the lines outside them (numbered from 1).
fn split_page(rel: &str, text: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::new());
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match (open.take(), line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => {
                let at = format!("{rel}:{}", i + 2);
                open = Some(Block { at, info: info.trim().to_string(), lines: Vec::new() });
            }
            (Some(block), Some(_)) => blocks.push(block),
            (Some(mut block), None) => {
                block.lines.push(line.to_string());
                open = Some(block);
            }
            (None, None) => prose.push((i + 1, line.to_string())),
        }
    }
    assert!(open.is_none(), "{rel}: a fenced block is not closed");
    (blocks, prose)
}

// ---------------- scenarios ----------------

#[test]
fn every_scenario_in_the_docs_loads_and_its_run_passes() {
    let mut ran = 0;
    for rel in SCENARIO_PAGES {
        let (blocks, _) = split_page(rel, &page(rel));
        for b in blocks.iter().filter(|b| b.info == "toml") {
            let text = b.lines.join("\n");
            let sc = Scenario::from_toml(&text)
                .unwrap_or_else(|e| panic!("{}: the scenario does not load: {e}", b.at));
            eprintln!("{}: scenario {:?}, seed {}", b.at, sc.name, sc.seed);
            let report = run(&sc, &RunOptions::default())
                .unwrap_or_else(|e| panic!("{}: the scenario does not run: {e}", b.at));
            let mut summary = Vec::new();
            report.write_summary(&mut summary).expect("writing to a Vec");
            let summary = String::from_utf8_lossy(&summary);
            eprintln!("{summary}");
            assert!(report.passed, "{}: {:?}\n{summary}", b.at, report.failure);
            assert!(!report.connections.is_empty(), "{}: no connection ran\n{summary}", b.at);
            ran += 1;
        }
    }
    assert!(ran >= 1, "docs/simulator.md shows a scenario");
}
