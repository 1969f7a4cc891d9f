//! Test settings and the LoadGen config-file loader.
//!
//! Implements the semantics of MLPerf LoadGen's `TestSettings` (test_settings.h) and of
//! `TestSettings::FromConfig` (test_settings_internal.cc): lines `model.scenario.key = value`,
//! `#` comments, `*` wildcards, lookup precedence exact > `*.scenario` > `model.*` > `*.*`,
//! scenario-specific keys read under their own scenario, files applied in order
//! (mlperf.conf, then user.conf). Every key of LoadGen's shipped mlperf.conf is accepted. Units follow LoadGen: durations and
//! latencies in milliseconds, percentiles and probabilities in percent. Unlike LoadGen, which
//! ignores typos, every unknown key, malformed line or bad value is an [`Error::Config`].
//!
//! Size: over 800 lines because LoadGen's key table, its lookup precedence and the
//! per-key validation are one unit; splitting the table from its rules would scatter one spec.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The scenarios PocketPerf runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scenario {
    /// One query at a time; the next is issued when the previous completes.
    SingleStream,
    /// Every sample issued at once in one batch.
    Offline,
    /// Poisson arrivals at a target rate.
    Server,
}

impl Scenario {
    /// LoadGen's spelling (`SingleStream`, `Offline`, `Server`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::SingleStream => "SingleStream",
            Scenario::Offline => "Offline",
            Scenario::Server => "Server",
        }
    }

    /// Parses LoadGen's spelling (case-sensitive, as in config keys).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "SingleStream" => Some(Scenario::SingleStream),
            "Offline" => Some(Scenario::Offline),
            "Server" => Some(Scenario::Server),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TestMode {
    /// Timing only.
    PerformanceOnly,
    /// Every QSL sample once, outputs logged for scoring.
    AccuracyOnly,
    /// Accuracy pass, then performance pass (LoadGen's `SubmissionRun`).
    Submission,
}

impl TestMode {
    /// LoadGen's spelling in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            TestMode::PerformanceOnly => "PerformanceOnly",
            TestMode::AccuracyOnly => "AccuracyOnly",
            TestMode::Submission => "SubmissionRun",
        }
    }
    /// Whether this mode runs the timed pass.
    pub fn runs_performance(self) -> bool {
        !matches!(self, TestMode::AccuracyOnly)
    }
    /// Whether this mode runs the accuracy pass.
    pub fn runs_accuracy(self) -> bool {
        !matches!(self, TestMode::PerformanceOnly)
    }
}

/// LoadGen's test settings that matter for PocketPerf, with LoadGen's defaults.
///
/// Durations are stored in milliseconds and latencies in nanoseconds as in LoadGen's
/// `TestSettings`; percentiles as fractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSettings {
    /// Scenario to run.
    pub scenario: Scenario,
    /// Performance, accuracy or both.
    pub mode: TestMode,
    /// SingleStream: expected latency, ns (config `target_latency`, ms). Informational.
    pub single_stream_expected_latency_ns: u64,
    /// SingleStream: percentile reported and early-stopped (config `target_latency_percentile`, %).
    pub target_latency_percentile: f64,
    /// Server: scheduled queries per second (config `Server.target_qps`).
    pub server_target_qps: f64,
    /// Server: latency bound, ns (config `Server.target_latency`, ms).
    pub server_target_latency_ns: u64,
    /// Server: percentile that must meet the bound (config `Server.target_latency_percentile`, %).
    pub server_target_latency_percentile: f64,
    /// Server, token mode: time-to-first-token bound, ns (config `ttft_latency`, ms).
    pub server_ttft_latency_ns: u64,
    /// Server, token mode: time-per-output-token bound, ns (config `tpot_latency`, ms).
    pub server_tpot_latency_ns: u64,
    /// Offline: expected samples per second, sizes the batch (config `Offline.target_qps`).
    pub offline_expected_qps: f64,
    /// Minimum test duration, ms (config `min_duration`).
    pub min_duration_ms: u64,
    /// Maximum test duration, ms; 0 = none (config `max_duration`).
    pub max_duration_ms: u64,
    /// Minimum query count (config `min_query_count`).
    pub min_query_count: u64,
    /// Maximum query count; 0 = none (config `max_query_count`).
    pub max_query_count: u64,
    /// Overrides the QSL's performance sample count when non-zero.
    pub performance_sample_count_override: u64,
    /// Limits the accuracy pass to the first N QSL samples when non-zero
    /// (config `accuracy_sample_count_override`).
    pub accuracy_sample_count_override: u64,
    /// Seed choosing the loaded (performance) sample set.
    pub qsl_rng_seed: u64,
    /// Seed choosing which loaded sample each query uses.
    pub sample_index_rng_seed: u64,
    /// Seed of the Server arrival schedule.
    pub schedule_rng_seed: u64,
    /// Seed of accuracy-log sampling in performance mode.
    pub accuracy_log_rng_seed: u64,
    /// Probability of logging a performance-mode response (config value in %).
    pub accuracy_log_probability: f64,
    /// Target number of performance-mode responses to log.
    pub accuracy_log_sampling_target: u64,
    /// Token mode: TTFT, TPOT and token throughput are measured and judged.
    pub use_token_latencies: bool,
    /// Equal issue: concatenated permutations of the loaded set, query count rounded up
    /// to a whole number of permutations (config `sample_concatenate_permutation`).
    pub sample_concatenate_permutation: bool,
    /// PocketPerf extension: a query outstanding longer than this ends the run as INVALID;
    /// 0 = wait forever (config `query_timeout`, ms).
    pub query_timeout_ms: u64,
    /// PocketPerf extension: Server is INVALID when completed QPS falls below scheduled QPS
    /// by more than this fraction (config `server_qps_tolerance`, %).
    pub server_qps_tolerance: f64,
}

impl Default for TestSettings {
    fn default() -> Self {
        TestSettings {
            scenario: Scenario::SingleStream,
            mode: TestMode::PerformanceOnly,
            single_stream_expected_latency_ns: 1_000_000,
            target_latency_percentile: 0.90,
            server_target_qps: 1.0,
            server_target_latency_ns: 100_000_000,
            server_target_latency_percentile: 0.99,
            server_ttft_latency_ns: 100_000_000,
            server_tpot_latency_ns: 100_000_000,
            offline_expected_qps: 1.0,
            min_duration_ms: 10_000,
            max_duration_ms: 0,
            min_query_count: 100,
            max_query_count: 0,
            performance_sample_count_override: 0,
            accuracy_sample_count_override: 0,
            qsl_rng_seed: 0,
            sample_index_rng_seed: 0,
            schedule_rng_seed: 0,
            accuracy_log_rng_seed: 0,
            accuracy_log_probability: 0.0,
            accuracy_log_sampling_target: 0,
            use_token_latencies: false,
            sample_concatenate_permutation: false,
            query_timeout_ms: 0,
            server_qps_tolerance: 0.05,
        }
    }
}

impl TestSettings {
    /// Offline queries the expected QPS asks for over the minimum duration, with LoadGen's
    /// slack of 1.1 (the sample count before the minimum query count and the cap apply).
    pub fn offline_expected_count(&self) -> u64 {
        // LoadGen's order of operations: kSlack · DurationToSeconds(min_duration) · qps.
        (OFFLINE_SLACK * (self.min_duration_ms as f64 / 1000.0) * self.offline_expected_qps) as u64
    }

    /// Defaults for `scenario`.
    pub fn new(scenario: Scenario) -> Self {
        TestSettings {
            scenario,
            ..TestSettings::default()
        }
    }

    /// The percentile the scenario reports and judges (SingleStream's or Server's).
    pub fn effective_percentile(&self) -> f64 {
        match self.scenario {
            Scenario::Server => self.server_target_latency_percentile,
            _ => self.target_latency_percentile,
        }
    }

    /// Checks ranges a run depends on.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, value: String, reason: &str| {
            Err(Error::Settings {
                field,
                value,
                reason: reason.to_string(),
            })
        };
        for (field, p) in [
            ("target_latency_percentile", self.target_latency_percentile),
            (
                "server_target_latency_percentile",
                self.server_target_latency_percentile,
            ),
        ] {
            if !(p > 0.0 && p < 1.0) {
                return bad(field, p.to_string(), "must be a fraction in (0, 1)");
            }
        }
        if self.scenario == Scenario::Server
            && let Err(e) = qps_in_range(self.server_target_qps)
        {
            return bad("server_target_qps", self.server_target_qps.to_string(), &e);
        }
        if self.scenario == Scenario::Offline {
            if let Err(e) = qps_in_range(self.offline_expected_qps) {
                return bad(
                    "offline_expected_qps",
                    self.offline_expected_qps.to_string(),
                    &e,
                );
            }
            let mut planned = self
                .min_query_count
                .max(self.offline_expected_count())
                .max(1);
            if self.max_query_count > 0 {
                planned = planned.min(self.max_query_count);
            }
            if planned > MAX_QUERIES {
                return bad(
                    "offline_expected_qps",
                    self.offline_expected_qps.to_string(),
                    &format!(
                        "with min_duration {} ms it sizes the batch at {planned} queries, \
                         more than {MAX_QUERIES}",
                        self.min_duration_ms
                    ),
                );
            }
        }
        if self.min_query_count > MAX_QUERIES {
            return bad(
                "min_query_count",
                self.min_query_count.to_string(),
                &format!("must be at most {MAX_QUERIES}"),
            );
        }
        if !(0.0..=1.0).contains(&self.accuracy_log_probability) {
            return bad(
                "accuracy_log_probability",
                self.accuracy_log_probability.to_string(),
                "must be a fraction in [0, 1]",
            );
        }
        if !(0.0..1.0).contains(&self.server_qps_tolerance) {
            return bad(
                "server_qps_tolerance",
                self.server_qps_tolerance.to_string(),
                "must be a fraction in [0, 1)",
            );
        }
        // max_duration below min_duration is allowed, as in LoadGen: the run is INVALID.
        Ok(())
    }

    /// Loads settings for `model` and `scenario` from LoadGen config files applied in
    /// order (typically mlperf.conf, then user.conf), starting from the scenario defaults.
    pub fn from_config_files(paths: &[&Path], model: &str, scenario: Scenario) -> Result<Self> {
        let mut s = TestSettings::new(scenario);
        for p in paths {
            let text = std::fs::read_to_string(p).map_err(|source| Error::ConfigIo {
                file: p.display().to_string(),
                source,
            })?;
            s.apply_config_str(&text, &p.display().to_string(), model)?;
        }
        Ok(s)
    }

    /// Applies one config text (named `file` in errors) on top of `self` for `model` and
    /// `self.scenario`, with LoadGen's lookup rules: within one file a later line for the
    /// same `model.scenario.key` replaces an earlier one; a key resolves to the most
    /// specific line, exact > `*.scenario` > `model.*` > `*.*`; keys that belong to one
    /// scenario (`target_latency`, `target_latency_percentile`, `target_qps`, `ttft_latency`,
    /// `tpot_latency`) are looked up under that scenario's name whatever the run's scenario,
    /// every other key under the run's scenario. Every line is checked, including lines for
    /// other models and scenarios.
    pub fn apply_config_str(&mut self, text: &str, file: &str, model: &str) -> Result<()> {
        let lines = parse_config(text, file)?;
        let mut kv: HashMap<(&str, &str, &'static str), usize> = HashMap::new();
        for (i, l) in lines.iter().enumerate() {
            kv.insert((l.model.as_str(), l.scenario.as_str(), l.key.name), i);
        }
        let lookup = |scenario: &str, key: &'static str| -> Option<&ConfigLine> {
            [(model, scenario), ("*", scenario), (model, "*"), ("*", "*")]
                .iter()
                .find_map(|&(m, s)| kv.get(&(m, s, key)))
                .map(|&i| &lines[i])
        };
        let run = self.scenario.as_str();
        for &(name, scope) in APPLIED {
            let under = match scope {
                Scope::Run => run,
                Scope::Fixed(s) => s.as_str(),
            };
            if let Some(l) = lookup(under, name) {
                self.apply_value(l, scope, file)?;
            }
        }
        Ok(())
    }

    fn apply_value(&mut self, l: &ConfigLine, scope: Scope, file: &str) -> Result<()> {
        let err = |reason: String| Error::Config {
            file: file.to_string(),
            line: l.line,
            key: l.raw_key.clone(),
            reason,
        };
        let v = &l.value;
        match (l.key.name, scope) {
            ("mode", _) => {
                self.mode = match v.as_u64() {
                    0 => TestMode::Submission,
                    1 => TestMode::AccuracyOnly,
                    2 => TestMode::PerformanceOnly,
                    _ => {
                        return Err(err(
                            "mode must be 0 (submission), 1 (accuracy) or 2 (performance); \
                             3 (find peak performance) is not supported"
                                .into(),
                        ));
                    }
                }
            }
            ("min_duration", _) => self.min_duration_ms = v.as_u64(),
            ("max_duration", _) => self.max_duration_ms = v.as_u64(),
            ("min_query_count", _) => self.min_query_count = v.as_u64(),
            ("max_query_count", _) => self.max_query_count = v.as_u64(),
            ("qsl_rng_seed", _) => self.qsl_rng_seed = v.as_u64(),
            ("sample_index_rng_seed", _) => self.sample_index_rng_seed = v.as_u64(),
            ("schedule_rng_seed", _) => self.schedule_rng_seed = v.as_u64(),
            ("accuracy_log_rng_seed", _) => self.accuracy_log_rng_seed = v.as_u64(),
            ("accuracy_log_probability", _) => self.accuracy_log_probability = v.as_f64() * 0.01,
            ("accuracy_log_sampling_target", _) => self.accuracy_log_sampling_target = v.as_u64(),
            ("performance_sample_count_override", _) => {
                self.performance_sample_count_override = v.as_u64()
            }
            ("accuracy_sample_count_override", _) => {
                self.accuracy_sample_count_override = v.as_u64()
            }
            ("sample_concatenate_permutation", _) => {
                self.sample_concatenate_permutation = v.as_bool()
            }
            ("use_token_latencies", _) => self.use_token_latencies = v.as_bool(),
            ("ttft_latency", _) => self.server_ttft_latency_ns = ms_to_ns(v, &err)?,
            ("tpot_latency", _) => self.server_tpot_latency_ns = ms_to_ns(v, &err)?,
            ("target_latency", Scope::Fixed(Scenario::SingleStream)) => {
                self.single_stream_expected_latency_ns = ms_to_ns(v, &err)?
            }
            ("target_latency", Scope::Fixed(Scenario::Server)) => {
                self.server_target_latency_ns = ms_to_ns(v, &err)?
            }
            ("target_latency_percentile", Scope::Fixed(Scenario::SingleStream)) => {
                self.target_latency_percentile = v.as_f64() * 0.01
            }
            ("target_latency_percentile", Scope::Fixed(Scenario::Server)) => {
                self.server_target_latency_percentile = v.as_f64() * 0.01
            }
            ("target_qps", Scope::Fixed(Scenario::Server)) => {
                self.server_target_qps = qps_in_range(v.as_f64()).map_err(err)?
            }
            ("target_qps", Scope::Fixed(Scenario::Offline)) => {
                self.offline_expected_qps = qps_in_range(v.as_f64()).map_err(err)?
            }
            ("query_timeout", _) => self.query_timeout_ms = v.as_u64(),
            ("server_qps_tolerance", _) => self.server_qps_tolerance = v.as_f64() * 0.01,
            // Known LoadGen keys with no effect on the scenarios PocketPerf runs.
            _ => {}
        }
        Ok(())
    }
}

/// Lowest query rate a run accepts (Server's schedule, Offline's expected rate): one query
/// per 100 s on average. Below it a Server run would wait hours between arrivals.
pub const MIN_QPS: f64 = 0.01;
/// Highest query rate a run accepts: far above any on-device model (and the null SUT's
/// engine overhead benchmark), low enough that an Offline batch sized from it stays small.
pub const MAX_QPS: f64 = 1e6;
/// Most queries a run may plan (an Offline batch, or a minimum query count): their records
/// are held in memory.
/// LoadGen's Offline slack on the expected sample count.
const OFFLINE_SLACK: f64 = 1.1;

pub const MAX_QUERIES: u64 = 100_000_000;

/// The allowed range of a query rate, as error messages state it.
pub fn qps_range() -> String {
    format!("a rate from {MIN_QPS} to {MAX_QPS:e} queries/s")
}

/// `q` if it is within [`MIN_QPS`, `MAX_QPS`], else why not.
pub fn qps_in_range(q: f64) -> std::result::Result<f64, String> {
    if q.is_finite() && (MIN_QPS..=MAX_QPS).contains(&q) {
        Ok(q)
    } else {
        // Far-off values in exponent form (1e-300, not 300 digits).
        let shown = if q.is_finite() && q != 0.0 && !(1e-4..1e9).contains(&q.abs()) {
            format!("{q:e}")
        } else {
            q.to_string()
        };
        Err(format!(
            "{shown} queries/s is out of range: expected {}",
            qps_range()
        ))
    }
}

fn ms_to_ns(v: &Value, err: &dyn Fn(String) -> Error) -> Result<u64> {
    v.as_u64()
        .checked_mul(1_000_000)
        .ok_or_else(|| err(format!("{} ms overflows nanoseconds", v.as_u64())))
}

/// How a key's value must be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Unsigned integer (decimal or 0x hex, as LoadGen's strtoull).
    U64,
    /// 0 or 1.
    Bool,
    /// Finite non-negative number.
    F64,
    /// Percent in [1, 100) (below 1 is taken for a fraction written by mistake).
    Percentile,
    /// Percent in [0, 100].
    Percent,
}

/// Which scenario name a key is looked up under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The run's scenario (keys that apply to every scenario).
    Run,
    /// Always this scenario (LoadGen reads `*.Server.target_qps` even in an Offline run,
    /// and `*.Offline.target_qps` even in a Server run, into different fields).
    Fixed(Scenario),
}

/// Keys that change a setting, in the order LoadGen's `FromConfig` reads them, with the
/// scenario each is looked up under. Every other key in [`KEYS`] is accepted and ignored.
const APPLIED: &[(&str, Scope)] = &[
    ("mode", Scope::Run),
    ("min_duration", Scope::Run),
    ("max_duration", Scope::Run),
    ("min_query_count", Scope::Run),
    ("max_query_count", Scope::Run),
    ("qsl_rng_seed", Scope::Run),
    ("sample_index_rng_seed", Scope::Run),
    ("schedule_rng_seed", Scope::Run),
    ("accuracy_log_rng_seed", Scope::Run),
    ("accuracy_log_probability", Scope::Run),
    ("accuracy_log_sampling_target", Scope::Run),
    ("performance_sample_count_override", Scope::Run),
    ("accuracy_sample_count_override", Scope::Run),
    ("sample_concatenate_permutation", Scope::Run),
    ("use_token_latencies", Scope::Run),
    ("query_timeout", Scope::Run),
    ("server_qps_tolerance", Scope::Run),
    (
        "target_latency_percentile",
        Scope::Fixed(Scenario::SingleStream),
    ),
    ("target_latency", Scope::Fixed(Scenario::SingleStream)),
    ("target_latency_percentile", Scope::Fixed(Scenario::Server)),
    ("target_latency", Scope::Fixed(Scenario::Server)),
    ("target_qps", Scope::Fixed(Scenario::Server)),
    ("ttft_latency", Scope::Fixed(Scenario::Server)),
    ("tpot_latency", Scope::Fixed(Scenario::Server)),
    ("target_qps", Scope::Fixed(Scenario::Offline)),
];

#[derive(Debug, Clone, Copy)]
struct KeySpec {
    name: &'static str,
    kind: Kind,
    unit: &'static str,
}

const KEYS: &[KeySpec] = &[
    KeySpec {
        name: "mode",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "min_duration",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "max_duration",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "min_query_count",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "max_query_count",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "qsl_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "sample_index_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "schedule_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "accuracy_log_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "accuracy_log_probability",
        kind: Kind::Percent,
        unit: "%",
    },
    KeySpec {
        name: "accuracy_log_sampling_target",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "print_timestamps",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "performance_issue_unique",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "performance_issue_same",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "performance_issue_same_index",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "performance_sample_count_override",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "accuracy_sample_count_override",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "target_duration",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "sample_concatenate_permutation",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "use_token_latencies",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "infer_token_latencies",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "token_latency_scaling_factor",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "ttft_latency",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "tpot_latency",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "target_latency",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "target_latency_percentile",
        kind: Kind::Percentile,
        unit: "%",
    },
    KeySpec {
        name: "target_qps",
        kind: Kind::F64,
        unit: "queries/s",
    },
    KeySpec {
        name: "samples_per_query",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "max_async_queries",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "coalesce_queries",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "enforce_max_duration",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "test05",
        kind: Kind::Bool,
        unit: "",
    },
    KeySpec {
        name: "test05_qsl_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "test05_sample_index_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "test05_schedule_rng_seed",
        kind: Kind::U64,
        unit: "",
    },
    KeySpec {
        name: "query_timeout",
        kind: Kind::U64,
        unit: "ms",
    },
    KeySpec {
        name: "server_qps_tolerance",
        kind: Kind::Percent,
        unit: "%",
    },
];

const SCENARIOS_IN_CONFIG: &[&str] = &["*", "SingleStream", "MultiStream", "Server", "Offline"];

#[derive(Debug, Clone, Copy)]
enum Value {
    U(u64),
    F(f64),
}

impl Value {
    fn as_u64(&self) -> u64 {
        match *self {
            Value::U(u) => u,
            // Only Kind::F64/Percent/Percentile produce F, read through as_f64.
            Value::F(f) => f as u64,
        }
    }
    fn as_f64(&self) -> f64 {
        match *self {
            Value::U(u) => u as f64,
            Value::F(f) => f,
        }
    }
    fn as_bool(&self) -> bool {
        self.as_u64() != 0
    }
}

#[derive(Debug, Clone)]
struct ConfigLine {
    line: usize,
    raw_key: String,
    model: String,
    scenario: String,
    key: KeySpec,
    value: Value,
}

fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
        s.parse().ok()
    } else {
        None
    }
}

fn parse_config(text: &str, file: &str) -> Result<Vec<ConfigLine>> {
    let mut out = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = idx + 1;
        let content = match raw.find('#') {
            Some(p) => &raw[..p],
            None => raw,
        };
        let content = content.trim();
        if content.is_empty() {
            continue;
        }
        let err = |key: &str, reason: String| Error::Config {
            file: file.to_string(),
            line,
            key: key.to_string(),
            reason,
        };
        let Some((k, v)) = content.split_once('=') else {
            return Err(err(content, "expected `model.scenario.key = value`".into()));
        };
        let k = k.trim();
        let v = v.trim();
        let parts: Vec<&str> = k.rsplitn(3, '.').collect();
        if parts.len() != 3
            || parts
                .iter()
                .any(|p| p.is_empty() || p.contains(char::is_whitespace))
        {
            return Err(err(
                k,
                "key must be `model.scenario.key` (use `*` for any model or scenario)".into(),
            ));
        }
        let (name, scenario, model) = (parts[0], parts[1], parts[2]);
        if !SCENARIOS_IN_CONFIG.contains(&scenario) {
            return Err(err(
                k,
                format!(
                    "unknown scenario `{scenario}`: expected one of SingleStream, MultiStream, \
                     Server, Offline or *"
                ),
            ));
        }
        let Some(spec) = KEYS.iter().find(|s| s.name == name) else {
            return Err(err(
                k,
                format!("unknown key `{name}` (LoadGen would silently ignore it)"),
            ));
        };
        if v.is_empty() {
            return Err(err(k, "missing value".into()));
        }
        if v.contains(char::is_whitespace) {
            return Err(err(k, format!("value `{v}` must be a single number")));
        }
        let unit_hint = if spec.unit.is_empty() {
            String::new()
        } else {
            format!(" in {} (write the bare number)", spec.unit)
        };
        let value = match spec.kind {
            Kind::U64 => match parse_u64(v) {
                Some(u) => Value::U(u),
                None => {
                    return Err(err(
                        k,
                        format!("value `{v}` must be a non-negative integer{unit_hint}"),
                    ));
                }
            },
            Kind::Bool => match parse_u64(v) {
                Some(u @ (0 | 1)) => Value::U(u),
                _ => return Err(err(k, format!("value `{v}` must be 0 or 1"))),
            },
            Kind::F64 | Kind::Percent | Kind::Percentile => {
                let f: f64 = match v.parse() {
                    Ok(f) => f,
                    Err(_) => {
                        return Err(err(k, format!("value `{v}` must be a number{unit_hint}")));
                    }
                };
                let ok = match spec.kind {
                    Kind::F64 => f.is_finite() && f >= 0.0,
                    Kind::Percent => (0.0..=100.0).contains(&f),
                    _ => (1.0..100.0).contains(&f),
                };
                if !ok {
                    let range = match spec.kind {
                        Kind::F64 => "a finite non-negative number",
                        Kind::Percent => "a percentage in [0, 100]",
                        _ => {
                            "a percentage in [1, 100): write 90 for the 90th percentile \
                             (LoadGen reads percent, not a fraction)"
                        }
                    };
                    return Err(err(k, format!("value `{v}` must be {range}")));
                }
                Value::F(f)
            }
        };
        out.push(ConfigLine {
            line,
            raw_key: k.to_string(),
            model: model.to_string(),
            scenario: scenario.to_string(),
            key: *spec,
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_parsing_accepts_decimal_and_hex_only() {
        assert_eq!(parse_u64("42"), Some(42));
        assert_eq!(parse_u64("0x10"), Some(16));
        assert_eq!(parse_u64("-1"), None);
        assert_eq!(parse_u64("1.5"), None);
        assert_eq!(parse_u64("10ms"), None);
    }
}
