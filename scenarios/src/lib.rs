//! LoadGen-equivalent scenario engine (SingleStream, Offline, Server), LLM-agnostic.
//!
//! Implements MLPerf LoadGen's test semantics (test_settings.h, loadgen.cc, results.cc,
//! early_stopping.cc) and log layout (logging.cc): it issues queries to any
//! [`SystemUnderTest`], times queries and the tokens the SUT reports, judges the run
//! VALID/INVALID with every cause listed, and writes `mlperf_log_summary.txt`,
//! `mlperf_log_detail.txt` and `mlperf_log_accuracy.json`. See docs/SCENARIOS.md.
//!
//! Map: [`settings`] (TestSettings, config files) → [`engine`] (issue loops, stop rules) over
//! a [`sut`] on a [`clock`], drawing samples from [`sampling`] → [`results`] (records,
//! statistics from [`stats`], validity, [`early_stopping`]) → [`logs`]; [`warmup`] runs
//! untimed queries before the timed pass; [`progress`] lets a caller watch a run; [`null`] is the
//! engine's own overhead; [`error`]. `results` never reaches back into `engine`.

pub mod clock;
pub mod early_stopping;
pub mod engine;
pub mod error;
pub mod logs;
pub mod null;
pub mod progress;
pub mod results;
pub mod sampling;
pub mod settings;
pub mod stats;
pub mod sut;
pub mod warmup;

pub use clock::{Clock, RealClock, VirtualClock};
pub use early_stopping::{
    EarlyStoppingOutcome, EarlyStoppingPlan, EsRank, MinPassingFinder, min_passing_queries,
    min_queries_for_over_bound, min_queries_for_percentile, single_stream_rank,
};
pub use engine::{OFFLINE_ISSUE_CHUNK, run_test, run_test_observed, run_test_with_warmup};
pub use error::{Error, Result};
pub use logs::{LogMeta, parse_summary};
pub use null::{NullQsl, NullSut};
pub use progress::{NoProgress, Phase, Progress};
pub use results::{
    AccuracyEntry, EndReason, InvalidCause, PerformanceResult, QueryRecord, TestResult,
};
pub use sampling::offline_sample_count;
pub use settings::{Scenario, TestMode, TestSettings};
pub use stats::{
    LatencyStats, REPORTED_PERCENTILES, percentile, percentile_index, select_kth, tpot_ns,
};
pub use sut::{QslError, Query, QuerySampleLibrary, Responder, SystemUnderTest};
pub use warmup::WarmupQuery;
