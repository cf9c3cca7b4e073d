//! `softverbs sim`'s output besides the ladder: the summary, `--stats`, the results tables
//! (always with a `[workload]`, else with `--results`), `--json` and `--plots`.

use std::path::Path;

use softverbs_sim::world::scenario::{Report, Scenario};

use super::{output_error, CliError};

/// What `softverbs sim` was asked to print and write besides the summary.
pub struct Outputs<'a> {
    /// `--results`: the results tables even without a `[workload]`.
    pub results: bool,
    /// `--stats`.
    pub stats: bool,
    /// `--json FILE` (`-`: standard output).
    pub json: Option<&'a Path>,
    /// `--plots DIR`.
    pub plots: Option<&'a Path>,
}

/// Print and write what `args` asks for about `report`; with `json_stdout`, the JSON is the
/// only thing on standard output.
pub fn write(
    args: &Outputs,
    sc: &Scenario,
    report: &Report,
    json_stdout: bool,
) -> Result<(), CliError> {
    if !json_stdout {
        let mut out = std::io::stdout().lock();
        report.write_summary(&mut out).map_err(output_error)?;
        if sc.workload.is_some() || args.results {
            report.results.write_text(&mut out).map_err(output_error)?;
        }
        if args.stats {
            report.write_stats(&mut out).map_err(output_error)?;
        }
    }
    if let Some(path) = args.json {
        if json_stdout {
            report.write_json(&mut std::io::stdout().lock()).map_err(output_error)?;
        } else {
            let mut f = Vec::new();
            report.write_json(&mut f).map_err(output_error)?;
            std::fs::write(path, f)
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        }
    }
    if let Some(dir) = args.plots {
        let title = format!("{} (seed {})", sc.name, report.seed);
        softverbs_sim::world::workload::write_plots(&report.results, &title, dir)
            .map_err(CliError::failed)?;
    }
    Ok(())
}
