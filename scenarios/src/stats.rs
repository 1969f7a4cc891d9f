//! Latency statistics with LoadGen's conventions (results.cc): percentile = `sorted[floor(n·p)]`
//! over ascending values, integer mean (sum / n, truncated), and the fixed percentile list
//! 50, 90, 95, 97, 99, 99.9 that every summary prints. Large series (an Offline run of ten
//! million samples) are summarized without a sorted copy by exact radix selection.

use serde::Serialize;

/// Percentiles every summary reports.
pub const REPORTED_PERCENTILES: [f64; 6] = [0.50, 0.90, 0.95, 0.97, 0.99, 0.999];

/// LoadGen's percentile of ascending `sorted`: `sorted[floor(n·p)]` (clamped to the last
/// element). `None` when empty.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[percentile_index(sorted.len() as u64, p) as usize])
}

/// Index LoadGen reads for percentile `p` of `n` values: `floor(n·p)`, clamped to `n − 1`.
pub fn percentile_index(n: u64, p: f64) -> u64 {
    (((n as f64) * p) as u64).min(n.saturating_sub(1))
}

/// The exact `k`-th smallest (0-based) of the values `values()` yields, without storing
/// them: radix selection over 16-bit digits, most significant first — four passes over the
/// data and one 65 536-bucket histogram. `k` must be below the number of values; otherwise
/// the largest value is returned.
pub fn select_kth<I, F>(values: F, k: u64) -> u64
where
    F: Fn() -> I,
    I: Iterator<Item = u64>,
{
    let mut hist = vec![0u64; 1 << 16];
    let mut prefix = 0u64;
    let mut k = k;
    for shift in [48u32, 32, 16, 0] {
        hist.fill(0);
        // Bits above this digit must equal the prefix chosen so far.
        let high = if shift == 48 {
            0
        } else {
            !0u64 << (shift + 16)
        };
        for v in values() {
            if v & high == prefix {
                hist[((v >> shift) & 0xFFFF) as usize] += 1;
            }
        }
        let mut below = 0u64;
        let mut digit = None;
        for (d, &c) in hist.iter().enumerate() {
            if below + c > k {
                digit = Some(d as u64);
                break;
            }
            below += c;
        }
        let d = match digit {
            Some(d) => d,
            // k past the end: take the largest digit present.
            None => {
                k = u64::MAX;
                hist.iter().rposition(|&c| c > 0).unwrap_or(0) as u64
            }
        };
        if k != u64::MAX {
            k -= below;
        }
        prefix |= d << shift;
    }
    prefix
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

    /// Stats of the `n` values `values()` yields, in any order, without storing them (see
    /// [`select_kth`]); identical to sorting and calling [`LatencyStats::from_sorted`].
    /// `None` when `n` is 0.
    pub fn from_unsorted<I, F>(values: F, n: u64) -> Option<Self>
    where
        F: Fn() -> I,
        I: Iterator<Item = u64>,
    {
        if n == 0 {
            return None;
        }
        let (mut min, mut max, mut sum) = (u64::MAX, 0u64, 0u128);
        for v in values() {
            min = min.min(v);
            max = max.max(v);
            sum += v as u128;
        }
        let percentiles = REPORTED_PERCENTILES
            .iter()
            .map(|&p| (p, select_kth(&values, percentile_index(n, p))))
            .collect();
        Some(LatencyStats {
            count: n,
            min,
            max,
            mean: (sum / n as u128) as u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_selection_equals_sorting() {
        // Values spread over every 16-bit digit, with duplicates and extremes.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut v: Vec<u64> = (0..5000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match i % 5 {
                    0 => x,
                    1 => x >> 40,
                    2 => 12345,
                    3 => x % 1_000_000_000,
                    _ => u64::MAX - (x & 0xFF),
                }
            })
            .collect();
        v.push(0);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        for k in [0, 1, 2, 999, 2500, 4000, 4999, 5000] {
            assert_eq!(
                select_kth(|| v.iter().copied(), k),
                sorted[k as usize],
                "k={k}"
            );
        }
        assert_eq!(
            select_kth(|| v.iter().copied(), 10_000),
            *sorted.last().unwrap(),
            "past the end: the maximum"
        );
        let a = LatencyStats::from_unsorted(|| v.iter().copied(), v.len() as u64).unwrap();
        let b = LatencyStats::from_sorted(&sorted).unwrap();
        assert_eq!(a, b);
        assert!(LatencyStats::from_unsorted(std::iter::empty, 0).is_none());
    }

    #[test]
    fn loadgen_percentile_index() {
        // 100 values: p90 is sorted[90], p99.9 is sorted[99] (floor(99.9)).
        assert_eq!(percentile_index(100, 0.9), 90);
        assert_eq!(percentile_index(100, 0.999), 99);
        assert_eq!(percentile_index(10, 0.5), 5);
        assert_eq!(percentile_index(1, 0.999), 0);
    }
}
