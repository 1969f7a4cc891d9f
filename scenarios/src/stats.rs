//! Latency statistics with LoadGen's conventions (results.cc): percentile = `sorted[floor(n·p)]`
//! over ascending values, integer mean (sum / n, truncated), and the fixed percentile list
//! 50, 90, 95, 97, 99, 99.9 that every summary prints.

use serde::Serialize;

/// Percentiles every summary reports.
pub const REPORTED_PERCENTILES: [f64; 6] = [0.50, 0.90, 0.95, 0.97, 0.99, 0.999];

/// LoadGen's percentile of ascending `sorted`: `sorted[floor(n·p)]` (clamped to the last
/// element). `None` when empty.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64) * p) as usize;
    Some(sorted[idx.min(sorted.len() - 1)])
}

/// Summary of one latency series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyStats {
    /// Number of values.
    pub count: u64,
    /// Minimum.
    pub min: u64,
    /// Maximum.
    pub max: u64,
    /// Truncated integer mean.
    pub mean: u64,
    /// (percentile, value) for [`REPORTED_PERCENTILES`].
    pub percentiles: Vec<(f64, u64)>,
}

impl LatencyStats {
    /// Stats of ascending `sorted`; `None` when empty.
    pub fn from_sorted(sorted: &[u64]) -> Option<Self> {
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let sum: u128 = sorted.iter().map(|&v| v as u128).sum();
        let mean = (sum / sorted.len() as u128) as u64;
        let percentiles = REPORTED_PERCENTILES
            .iter()
            .map(|&p| (p, percentile(sorted, p).unwrap_or(max)))
            .collect();
        Some(LatencyStats {
            count: sorted.len() as u64,
            min,
            max,
            mean,
            percentiles,
        })
    }

    /// Value at one of the reported percentiles (exact match on the fraction).
    pub fn at(&self, p: f64) -> Option<u64> {
        self.percentiles
            .iter()
            .find(|(q, _)| (*q - p).abs() < 1e-12)
            .map(|&(_, v)| v)
    }
}

/// Time per output token of one query: `(latency − ttft) / (tokens − 1)`, integer ns.
/// Undefined (`None`) for fewer than two tokens or a first token after completion.
pub fn tpot_ns(latency_ns: u64, ttft_ns: u64, tokens: u64) -> Option<u64> {
    if tokens < 2 || ttft_ns > latency_ns {
        return None;
    }
    Some((latency_ns - ttft_ns) / (tokens - 1))
}
