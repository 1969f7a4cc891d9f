//! The statistics behind the reports and the gate live in `pocketperf-stats`, shared with
//! the MMLU scorer; this module re-exports them beside the result file's percentile summary
//! ([`Percentiles`], built by [`Percentiles::from_samples`]).

pub use crate::schema::Percentiles;
pub use pocketperf_stats::*;
