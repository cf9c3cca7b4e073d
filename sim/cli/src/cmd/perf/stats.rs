//! The statistics of `softverbs perf`: percentiles of a sample set, the median of the runs'
//! figures, microseconds as printed, and the `RESULT` lines one run prints and another parses.

use crate::cmd::CliError;

/// Percentiles of a sample set, in nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Dist {
    pub(super) min: f64,
    pub(super) p50: f64,
    pub(super) p90: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
    pub(super) max: f64,
}

impl Dist {
    pub(super) fn of(samples: &mut [f64]) -> Dist {
        if samples.is_empty() {
            return Dist::default();
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Dist {
            min: samples[0],
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }

    /// The line a latency measurement prints for one run (numbered from 1) of these samples,
    /// with the run's mean half round trip.
    pub(super) fn run_line(&self, run: u64, mean_ns: f64) -> String {
        format!(
            "  run {run}: median {} us  p99 {} us  mean {} us",
            us(self.p50),
            us(self.p99),
            us(mean_ns)
        )
    }
}

/// The most measured iterations a run keeps (`-n` x `-r`): every one is kept, as 8 bytes, for
/// the percentiles, so this bounds that memory at 1 GiB.
pub(super) const MAX_SAMPLES: u64 = 1 << 27;

/// `-n ITERS` x `-r RUNS` measured iterations plus `-w WARMUP`: the total, or a usage error
/// naming the options when the samples would not fit [`MAX_SAMPLES`] or the sum overflows.
pub(super) fn iterations(iters: u64, runs: u64, warmup: u64) -> Result<u64, CliError> {
    let measured = iters.checked_mul(runs).filter(|&n| n <= MAX_SAMPLES).ok_or_else(|| {
        CliError::usage(format!(
            "-n {iters} x -r {runs}: more than {MAX_SAMPLES} measured iterations, each of which \
             is kept for the percentiles"
        ))
    })?;
    measured.checked_add(warmup).ok_or_else(|| {
        CliError::usage(format!("-w {warmup}: too many warm-up iterations to count"))
    })
}

pub(super) fn median(v: &[f64]) -> f64 {
    Dist::of(&mut v.to_vec()).p50
}

pub(super) fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1e3)
}

/// Parse `key=value` pairs of the last `RESULT <name>` line of `text`.
pub(super) fn parse_result(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let line = text.lines().rev().find(|l| l.starts_with(&format!("RESULT {name} ")))?;
    Some(
        line.split_whitespace()
            .skip(2)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

pub(super) fn field(kv: &[(String, String)], key: &str) -> Option<f64> {
    kv.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_set() {
        let mut v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let d = Dist::of(&mut v);
        assert_eq!(d.min, 1.0);
        assert_eq!(d.max, 1000.0);
        assert!((d.p50 - 500.0).abs() <= 1.0);
        assert!((d.p99 - 990.0).abs() <= 1.0);
    }

    #[test]
    fn result_lines_parse() {
        let t = "noise\nRESULT lat size=8 median_us=1.250 p99_us=3.000\n";
        let kv = parse_result(t, "lat").expect("a RESULT line");
        assert_eq!(field(&kv, "median_us"), Some(1.25));
        assert_eq!(field(&kv, "p99_us"), Some(3.0));
        assert!(parse_result(t, "bw").is_none());
    }
}
