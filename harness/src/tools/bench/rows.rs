//! What one `bench` run produced, as every exporter (`tools::bench_out`) reads it: the rows
//! (one per model × thread count × test), the roofline, memory, start-up and cold-start
//! sections, under the output header.

use super::model_info::ModelColumns;
use crate::meta::OutputHeader;
use crate::outputs::BackendCounters;
use crate::tools::cold_start::ColdBench;
use crate::tools::roofline::ReadProbe;
use pocketperf_reports::stats;

/// Schema of the bench output (3: rows carry the model columns, mean ± stddev, `n_prompt`,
/// `n_gen`, `n_depth`; tests are named `pp512@d4096`, `tg128×8`; the roofline is per model).
pub const SCHEMA_VERSION: u32 = 3;

/// The whole output of one `bench` run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub header: OutputHeader,
    pub rows: Vec<BenchRow>,
    pub roofline: Option<Roofline>,
    pub memory: MemoryReport,
    pub startup: Option<Startup>,
    pub cold_start: Option<ColdBench>,
}

/// One measured test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    #[serde(flatten)]
    pub model: ModelColumns,
    pub isa: String,
    /// `cpu` or `opencl`.
    pub backend: String,
    pub threads: usize,
    /// `pp512`, `tg128`, `pp512@d4096`, `tg128@d4096`, `tg128×8` (eight sequences decoded
    /// together).
    pub test: String,
    /// Prompt tokens processed by the test (pp), 0 for tg.
    pub n_prompt: usize,
    /// Tokens generated per sequence (tg), 0 for pp.
    pub n_gen: usize,
    /// Tokens already in the KV cache when the test starts.
    pub n_depth: usize,
    /// Tokens timed per sequence (`n_prompt` or `n_gen`).
    pub n_tokens: usize,
    /// Sequences decoded at once (1 except in the batched test, whose tokens/s is the
    /// aggregate over all sequences).
    pub batch: usize,
    pub reps: usize,
    /// Mean over the repetitions.
    pub tokens_per_s_mean: f64,
    /// Sample standard deviation over the repetitions (n − 1; 0 with one repetition).
    pub tokens_per_s_stddev: f64,
    pub tokens_per_s_median: f64,
    pub tokens_per_s_min: f64,
    pub tokens_per_s_max: f64,
    pub samples: Vec<f64>,
    pub weight_bytes_per_token: u64,
    /// KV-cache bytes read per token, averaged over the test (decode tests).
    pub kv_bytes_per_token: u64,
    /// (weights + KV) bytes per token × tokens/s (decode tests).
    pub gb_per_s_median: f64,
    /// Launches, host↔device bytes and kernel time per token over the repetitions (OpenCL).
    pub counters: Option<BackendCounters>,
}

/// The test kinds, in the order their rows are printed for one model and thread count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TestKind {
    Prompt,
    Generate,
    /// Several sequences decoded together, this many.
    Batched(usize),
}

/// A test's name: `pp512`, `tg128`, `tg128×8`, and on top of a filled KV `pp512@d4096`.
pub fn test_name(kind: TestKind, n: usize, depth: usize) -> String {
    let base = match kind {
        TestKind::Prompt => format!("pp{n}"),
        TestKind::Generate => format!("tg{n}"),
        TestKind::Batched(b) => format!("tg{n}×{b}"),
    };
    if depth == 0 {
        base
    } else {
        format!("{base}@d{depth}")
    }
}

/// Median, mean, sample standard deviation, minimum and maximum of tokens/s samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub stddev: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `samples` (zeros for none; a standard deviation of 0 for one).
    pub fn of(samples: &[f64]) -> Spread {
        let sorted = stats::finite_sorted(samples);
        Spread {
            mean: stats::mean(samples).unwrap_or(0.0),
            stddev: stats::sample_stddev(samples).unwrap_or(0.0),
            median: stats::median(samples).unwrap_or(0.0),
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

/// What a measured test is, before the engine's columns are added.
pub struct Measured {
    pub kind: TestKind,
    pub n: usize,
    pub depth: usize,
    pub samples: Vec<f64>,
    /// Weight and KV bytes read per token.
    pub bytes: (u64, u64),
}

impl BenchRow {
    /// A row of `model` on `isa`, `backend` and `threads` (counters left to the caller).
    pub fn new(
        model: &ModelColumns,
        isa: &str,
        backend: &str,
        threads: usize,
        m: Measured,
    ) -> BenchRow {
        let s = Spread::of(&m.samples);
        let decode = m.kind != TestKind::Prompt;
        let batch = match m.kind {
            TestKind::Batched(b) => b,
            _ => 1,
        };
        BenchRow {
            model: model.clone(),
            isa: isa.to_string(),
            backend: backend.to_string(),
            threads,
            test: test_name(m.kind, m.n, m.depth),
            n_prompt: if decode { 0 } else { m.n },
            n_gen: if decode { m.n } else { 0 },
            n_depth: m.depth,
            n_tokens: m.n,
            batch,
            reps: m.samples.len(),
            tokens_per_s_mean: s.mean,
            tokens_per_s_stddev: s.stddev,
            tokens_per_s_median: s.median,
            tokens_per_s_min: s.min,
            tokens_per_s_max: s.max,
            samples: m.samples,
            weight_bytes_per_token: m.bytes.0,
            kv_bytes_per_token: if decode { m.bytes.1 } else { 0 },
            gb_per_s_median: if decode {
                s.median * (m.bytes.0 + m.bytes.1) as f64 / 1e9
            } else {
                0.0
            },
            counters: None,
        }
    }

    /// Whether this is a single-sequence decode row (`tg`, any depth).
    pub fn is_single_decode(&self) -> bool {
        self.n_gen > 0 && self.batch == 1
    }
}

/// The roofline section: read bandwidth against decode's bytes per token.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Roofline {
    pub llc_bytes: Option<u64>,
    /// Read bandwidth over a buffer far larger than the LLC (DRAM), per thread count.
    pub dram: Vec<ReadProbe>,
    pub models: Vec<ModelRoofline>,
}

/// The roofline of one model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelRoofline {
    pub model: String,
    pub model_file_bytes: u64,
    /// Whether the model file is no larger than the last-level cache.
    pub model_fits_llc: Option<bool>,
    /// Read bandwidth over a buffer the size of the model file.
    pub model_sized: Vec<ReadProbe>,
    /// Per thread count: decode GB/s (the first single-sequence tg row, at depth 0 when
    /// there is one) as a fraction of the DRAM probe's best.
    pub decode_fraction_of_dram: Vec<(usize, f64)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MemoryReport {
    pub peak_rss_bytes: Option<u64>,
    /// The largest model file of the run.
    pub model_file_bytes: u64,
    /// Largest KV mapping of one benchmark session (the batched test's rings summed).
    pub kv_bytes: u64,
    /// Largest (model file + KV) of one model + 64 MiB.
    pub budget_bytes: u64,
    pub within_budget: Option<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Startup {
    pub command: String,
    pub prompt_tokens: usize,
    pub runs: usize,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub samples_ms: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_are_named_as_the_sweep_describes_them() {
        assert_eq!(test_name(TestKind::Generate, 128, 0), "tg128");
        assert_eq!(test_name(TestKind::Prompt, 512, 4096), "pp512@d4096");
        assert_eq!(test_name(TestKind::Generate, 128, 4096), "tg128@d4096");
        assert_eq!(test_name(TestKind::Batched(8), 128, 0), "tg128×8");
        assert_eq!(test_name(TestKind::Batched(2), 16, 64), "tg16×2@d64");
    }

    #[test]
    fn spread_matches_hand_computed_figures() {
        // 10 20 30 60: mean 30, deviations −20 −10 0 30 → 1400 / 3 under the root.
        let s = Spread::of(&[60.0, 10.0, 30.0, 20.0]);
        assert_eq!(s.mean, 30.0);
        assert_eq!(s.median, 25.0);
        assert_eq!((s.min, s.max), (10.0, 60.0));
        assert!((s.stddev - (1400.0f64 / 3.0).sqrt()).abs() < 1e-12, "{s:?}");
        assert_eq!(Spread::of(&[7.0]).stddev, 0.0);
    }
}
