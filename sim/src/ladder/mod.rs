//! Packet ladders (sequence diagrams) of a run: one lifeline per node, an arrow per packet with
//! its opcode and PSN, ACKs and NAKs back, drops crossed out, timer firings, RNR waits and
//! completions marked on the lifelines. `model.rs` is what a ladder holds, fed by the demo's
//! wire tap (`cmd/demo/ladder.rs`) and by the simulator's trace (`from_sim.rs`); `text.rs`
//! draws it in the terminal (`--ladder`), `svg.rs` as an SVG file (`--svg FILE`).

pub mod from_sim;
pub mod model;
pub mod svg;
pub mod text;

pub use model::{nak_name, Event, Ladder, Mark, MarkKind, Packet, Response};

use std::io::Write;
use std::path::Path;

/// Print the terminal ladder of `l` to `out` (its middle elided past [`text::DEFAULT_ROWS`]
/// rows).
pub fn print(l: &Ladder, out: &mut dyn Write) -> std::io::Result<()> {
    for line in text::render(l, text::DEFAULT_ROWS) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Write the SVG ladder of `l` to `path` (its middle elided past [`svg::DEFAULT_ROWS`] rows);
/// the error names the file.
pub fn write_svg(l: &Ladder, path: &Path) -> Result<(), String> {
    std::fs::write(path, svg::render(l, svg::DEFAULT_ROWS))
        .map_err(|e| format!("writing the ladder to {}: {e}", path.display()))
}
