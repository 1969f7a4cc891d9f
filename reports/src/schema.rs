//! The result-directory contract: the `result.json` schema (version [`SCHEMA_VERSION`]),
//! loading with migration of older versions, and writing. The layout is documented in
//! `docs/RESULTS.md`; change both together and bump the version on any breaking change.

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ReportError, Result};

/// Newest `result.json` schema version this crate reads and the one it writes.
pub const SCHEMA_VERSION: u32 = 1;
/// File name of the run summary inside a result directory.
pub const RESULT_FILE: &str = "result.json";
/// File name of the per-token timestamps inside a result directory.
pub const TOKENS_FILE: &str = "tokens.csv";
/// File name of the sensor samples inside a result directory.
pub const TELEMETRY_FILE: &str = "telemetry.csv";
/// File name of the self-contained HTML report.
pub const REPORT_HTML: &str = "report.html";
/// File name of the Markdown report.
pub const REPORT_MD: &str = "report.md";

/// Everything one run reports; sections a run did not measure are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Always [`SCHEMA_VERSION`] once loaded (older files are migrated).
    pub schema_version: u32,
    /// Who ran what, where, with which settings.
    pub meta: RunMeta,
    /// Scenario timing results.
    #[serde(default)]
    pub performance: Option<Performance>,
    /// Accuracy (MMLU) results.
    #[serde(default)]
    pub accuracy: Option<Accuracy>,
    /// Energy per dialogue.
    #[serde(default)]
    pub energy: Option<Energy>,
    /// Thermal summary.
    #[serde(default)]
    pub thermal: Option<Thermal>,
    /// Thermal governor state and trace summary (free-form, owned by the runtime).
    #[serde(default)]
    pub governor: Option<Value>,
    /// Soak/robustness counters (free-form; the gate reads `crashes` and `drift`).
    #[serde(default)]
    pub robustness: Option<Value>,
    /// Human-readable warnings raised during the run or the migration.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Model residency options, page faults and the cold first query (runs that record them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
}

/// How the model was held in memory and what the run cost in page faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// The model's mapping was locked (`--mlock`).
    pub mlock: bool,
    /// The model was read in at load (`--prefault`).
    pub prefault: bool,
    /// Faults of the process that ran the model over warm-up and timed pass.
    #[serde(default)]
    pub page_faults: Option<PageFaults>,
    /// The first query after evicting the model from the page cache (`run --cold-start`).
    #[serde(default)]
    pub cold_start: Option<ColdStart>,
}

/// Page faults of the system-under-test process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageFaults {
    /// `self` (the in-process runtime) or `child` (`--sut process`).
    pub process: String,
    /// Its pid.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Minor faults (served from memory).
    pub minor: u64,
    /// Major faults (read from storage).
    pub major: u64,
}

/// Residency (fraction of the model file's pages in memory, 0..1) around a cold first query:
/// before the eviction (the model loaded and the run set up), after it, after the first
/// query and at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdStart {
    pub resident_before_eviction: f64,
    pub resident_after_eviction: f64,
    /// Right after the first query's work.
    #[serde(default)]
    pub resident_after_first_query: Option<f64>,
    pub resident_at_end: f64,
    /// The first query's latency and TTFT, milliseconds (a warm-up query when there is one).
    #[serde(default)]
    pub first_query_latency_ms: Option<f64>,
    #[serde(default)]
    pub first_query_ttft_ms: Option<f64>,
    /// Its major faults, when it was measured alone.
    #[serde(default)]
    pub first_query_major_faults: Option<u64>,
}

/// Warm-up queries run before the timed pass, never counted in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warmup {
    pub queries: u64,
    #[serde(default)]
    pub per_query: Vec<QuerySample>,
}

/// Provenance of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// Producing tool, `"pocketperf"`.
    pub tool: String,
    /// Version of the tool.
    pub tool_version: String,
    /// Git commit the tool was built from.
    pub git_commit: String,
    /// Device the run happened on.
    pub device: DeviceInfo,
    /// Model measured.
    pub model: ModelInfo,
    /// Runtime backend (`cpu`, `opencl`, `http`, ...).
    pub backend: String,
    /// Kernel ISA tier in use (`scalar`, `avx2`, `neon`, ...).
    pub isa: String,
    /// Worker threads.
    pub threads: u32,
    /// Every CLI setting as given, for reproduction.
    #[serde(default)]
    pub settings: Value,
    /// Run start (UTC).
    pub started_utc: DateTime<Utc>,
    /// Run end (UTC).
    pub finished_utc: DateTime<Utc>,
}

/// The device a run happened on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// `local`, `sim:<profile>` or `adb:<serial>`.
    pub id: String,
    /// Marketing or host name.
    pub name: String,
    /// CPU description.
    pub cpu: String,
    /// OS / build description.
    pub os: String,
}

/// The model a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Model name from metadata.
    pub name: String,
    /// Path as given on the command line.
    pub path: String,
    /// SHA-256 of the model file, lowercase hex.
    pub sha256: String,
    /// Weight format (`Q4_0`, `F16`, ...).
    pub file_type: String,
}

/// Summary statistics of a sample. Percentiles follow LoadGen: `sorted[floor(n·p)]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Number of samples.
    pub n: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// 50th percentile.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 97th percentile.
    pub p97: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl Percentiles {
    /// Summary of the finite values in `samples`; `None` when there are none.
    pub fn from_samples(samples: &[f64]) -> Option<Percentiles> {
        let s = pocketperf_stats::finite_sorted(samples);
        let pct = |p| pocketperf_stats::loadgen_percentile(&s, p);
        Some(Percentiles {
            n: s.len() as u64,
            mean: pocketperf_stats::mean(&s)?,
            min: *s.first()?,
            max: *s.last()?,
            p50: pct(0.50)?,
            p90: pct(0.90)?,
            p95: pct(0.95)?,
            p97: pct(0.97)?,
            p99: pct(0.99)?,
            p999: pct(0.999)?,
        })
    }
}

/// One scenario's timing results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Performance {
    /// `SingleStream`, `Offline` or `Server`.
    pub scenario: String,
    /// `PerformanceOnly`, `AccuracyOnly`, ...
    pub mode: String,
    /// Whether the run met the scenario's validity rules.
    pub valid: bool,
    /// Why it did not, when it did not.
    #[serde(default)]
    pub invalid_reasons: Vec<String>,
    /// Queries completed.
    pub queries: u64,
    /// Measured duration in seconds.
    pub duration_s: f64,
    /// Queries per second.
    pub qps: f64,
    /// Generated tokens per second.
    pub tokens_per_s: f64,
    /// Query latency, milliseconds.
    pub latency_ms: Percentiles,
    /// Time to first token, milliseconds.
    #[serde(default)]
    pub ttft_ms: Option<Percentiles>,
    /// Time per output token after the first, milliseconds.
    #[serde(default)]
    pub tpot_ms: Option<Percentiles>,
    /// Inter-token latency, milliseconds; its p99 is the headline "P99 latency per token".
    #[serde(default)]
    pub itl_ms: Option<Percentiles>,
    /// Early-stopping estimate as computed by the scenario engine.
    #[serde(default)]
    pub early_stopping: Option<Value>,
    /// Every query, for distribution tests.
    #[serde(default)]
    pub per_query: Vec<QuerySample>,
    /// Per-token counters of the runtime backend (OpenCL: kernel launches, bytes moved
    /// host↔device, kernel time), free-form, owned by the runtime (docs/OPENCL.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_counters: Option<Value>,
    /// Warm-up queries before the timed pass (`--warmup`), with their own latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Warmup>,
}

/// One query's measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuerySample {
    /// Query id (issue order).
    pub id: u64,
    /// Index of the sample in the prompt set.
    pub sample_index: u64,
    /// Issue time relative to run start, seconds.
    pub start_s: f64,
    /// End-to-end latency, milliseconds.
    pub latency_ms: f64,
    /// Time to first token, milliseconds.
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Tokens generated.
    pub tokens: u32,
    /// Time per output token after the first, milliseconds.
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    /// Minor page faults of the SUT process during this query (when it ran alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_faults: Option<u64>,
    /// Major page faults of the SUT process during this query (when it ran alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_faults: Option<u64>,
}

/// Accuracy results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Dataset name (`mmlu-576`, ...).
    pub dataset: String,
    /// `logprob` or `generate`.
    pub mode: String,
    /// Few-shot examples per prompt.
    pub shots: u32,
    /// Questions scored.
    pub n: u64,
    /// Questions answered correctly.
    pub correct: u64,
    /// `correct / n`.
    pub accuracy: f64,
    /// 95% Wilson interval of the accuracy.
    pub ci95: [f64; 2],
    /// Accuracy per subject.
    #[serde(default)]
    pub per_subject: Vec<GroupAccuracy>,
    /// Accuracy per category (STEM, humanities, ...).
    #[serde(default)]
    pub per_category: Vec<GroupAccuracy>,
    /// Every question, for paired comparisons.
    #[serde(default)]
    pub per_question: Vec<QuestionRecord>,
    /// Wall time of the accuracy pass, seconds.
    pub wall_s: f64,
}

/// Accuracy within one subject or category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAccuracy {
    /// Subject or category name.
    pub name: String,
    /// Questions.
    pub n: u64,
    /// Correct answers.
    pub correct: u64,
    /// `correct / n`.
    pub accuracy: f64,
}

/// One scored question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRecord {
    /// MMLU subject.
    pub subject: String,
    /// Row in the subject's test CSV.
    pub row: u64,
    /// Correct letter.
    pub answer: char,
    /// Letter chosen by the model, if any.
    #[serde(default)]
    pub choice: Option<char>,
    /// Log-probabilities of A–D (logprob mode).
    #[serde(default)]
    pub logprobs: Option<[f64; 4]>,
    /// Generated text (generate mode).
    #[serde(default)]
    pub generated: Option<String>,
    /// Whether the choice was correct.
    pub correct: bool,
}

/// A mean with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanCi {
    /// Mean.
    pub mean: f64,
    /// Lower bound (95%).
    pub lo: f64,
    /// Upper bound (95%).
    pub hi: f64,
    /// Samples.
    pub n: u64,
}

/// Energy of a run: per dialogue in a dialogue run; in a scenario run (SingleStream,
/// Offline, Server; `dialogues` 0, `basis` `queries`) the per-dialogue figures are those of a
/// 200-token dialogue equivalent (energy per generated token × 200), with the queries'
/// own figures in `per_query` when no two queries overlapped in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Meter used (`odpm`, `rapl`, `battery-vi`, `sim`).
    pub meter: String,
    /// Whether the meter is trustworthy for this device.
    pub reliable: bool,
    /// Idle power subtracted for the net figures, milliwatts.
    pub idle_power_mw: f64,
    /// Dialogues measured.
    pub dialogues: u64,
    /// Energy per dialogue including idle, mWh.
    pub mwh_per_dialogue_gross: MeanCi,
    /// Energy per dialogue above idle, mWh.
    pub mwh_per_dialogue_net: MeanCi,
    /// Net joules per generated token.
    pub j_per_token: f64,
    /// Generated tokens per net joule.
    pub tokens_per_j: f64,
    /// Every dialogue.
    #[serde(default)]
    pub per_dialogue: Vec<DialogueEnergy>,
    /// What the per-dialogue figures stand for: `dialogues` (measured dialogues) or
    /// `queries` (a 200-token dialogue equivalent from a scenario run's queries).
    #[serde(default = "dialogues_basis")]
    pub basis: String,
    /// A scenario run's queries, when they ran one at a time (empty otherwise).
    #[serde(default)]
    pub per_query: Vec<QueryEnergy>,
}

fn dialogues_basis() -> String {
    "dialogues".into()
}

/// Tokens of the dialogue a scenario run's energy per token is scaled to.
pub const DIALOGUE_EQUIVALENT_TOKENS: f64 = 200.0;

/// One query's energy in a scenario run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryEnergy {
    /// Query id (LoadGen's order of issue).
    pub id: u64,
    /// Tokens generated.
    pub tokens: u64,
    /// Duration, seconds.
    pub duration_s: f64,
    /// Energy including idle, mWh.
    pub gross_mwh: f64,
    /// Energy above idle, mWh.
    pub net_mwh: f64,
}

/// One dialogue's energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialogueEnergy {
    /// Dialogue id.
    pub id: u64,
    /// Tokens generated.
    pub tokens: u64,
    /// Duration, seconds.
    pub duration_s: f64,
    /// Energy including idle, mWh.
    pub gross_mwh: f64,
    /// Energy above idle, mWh.
    pub net_mwh: f64,
    /// Mean skin temperature, °C.
    pub mean_skin_c: f64,
    /// Peak SoC temperature, °C.
    pub peak_soc_c: f64,
}

/// Thermal summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thermal {
    /// Hottest SoC reading, °C.
    pub max_soc_c: f64,
    /// Hottest skin reading, °C.
    pub max_skin_c: f64,
    /// Mean skin reading, °C.
    pub mean_skin_c: f64,
    /// Seconds spent throttled.
    pub throttled_s: f64,
}

impl ResultFile {
    /// Label for tables: the device id, plus the name where it adds information.
    pub fn label(&self) -> String {
        let d = &self.meta.device;
        if d.name.is_empty() || d.name == d.id {
            d.id.clone()
        } else {
            format!("{} ({})", d.id, d.name)
        }
    }
}

/// Reads `dir/result.json`, migrating older schema versions to the current one.
///
/// A file written by a newer tool is rejected with [`ReportError::NewerSchema`].
pub fn load_result(dir: impl AsRef<Path>) -> Result<ResultFile> {
    let path = dir.as_ref().join(RESULT_FILE);
    let text = fs::read_to_string(&path).map_err(|e| ReportError::io("reading", &path, e))?;
    parse_result(&text, &path)
}

/// Parses the text of a `result.json`; `path` is used in error messages only.
pub fn parse_result(text: &str, path: &Path) -> Result<ResultFile> {
    let value: Value = serde_json::from_str(text).map_err(|source| ReportError::Json {
        path: path.into(),
        source,
    })?;
    let Value::Object(ref obj) = value else {
        return Err(field_err(path, "(root)", "must be a JSON object"));
    };
    let version = match obj.get("schema_version") {
        None => 0,
        Some(v) => v.as_u64().ok_or_else(|| {
            field_err(
                path,
                "schema_version",
                format!("must be an unsigned integer, found {v}"),
            )
        })?,
    };
    let current = match version {
        0 => migrate_v0(value, path)?,
        1 => value,
        found => {
            return Err(ReportError::NewerSchema {
                path: path.into(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
    };
    serde_json::from_value(current).map_err(|source| ReportError::Json {
        path: path.into(),
        source,
    })
}

/// Writes `dir/result.json` (creating `dir`), pretty-printed, always at [`SCHEMA_VERSION`].
pub fn write_result(dir: impl AsRef<Path>, result: &ResultFile) -> Result<PathBuf> {
    let dir = dir.as_ref();
    fs::create_dir_all(dir).map_err(|e| ReportError::io("creating directory", dir, e))?;
    let path = dir.join(RESULT_FILE);
    let mut out = result.clone();
    out.schema_version = SCHEMA_VERSION;
    let text = serde_json::to_string_pretty(&out).map_err(|source| ReportError::Json {
        path: path.clone(),
        source,
    })?;
    crate::files::replace_file(&path, (text + "\n").as_bytes())
        .map_err(|(p, e)| ReportError::io("writing", &p, e))?;
    Ok(path)
}

fn field_err(path: &Path, field: &str, problem: impl Into<String>) -> ReportError {
    ReportError::Field {
        path: path.into(),
        field: field.into(),
        problem: problem.into(),
    }
}

/// Schema v0 (before `schema_version` existed) was flat:
///
/// ```json
/// { "tool_version": "0.0.3", "git_commit": "abc", "device": "sim:x", "device_name": "X",
///   "model": "m.gguf", "model_sha256": "..", "backend": "cpu", "threads": 4,
///   "started_utc": "..", "finished_utc": "..", "scenario": "SingleStream", "valid": true,
///   "queries": 3, "duration_s": 1.5, "qps": 2.0, "tokens_per_s": 40.0,
///   "latency_mean_ms": .., "latency_min_ms": .., "latency_max_ms": ..,
///   "latency_p50_ms": .., "latency_p90_ms": .., "latency_p99_ms": ..,
///   "ttft_p50_ms": .., "ttft_p99_ms": .., (optional)
///   "samples": [ { "latency_ms": .., "ttft_ms": .., "tokens": .. } ],
///   "accuracy": 0.61, "accuracy_n": 576 (optional) }
/// ```
///
/// v0 did not record p95, p97 or p99.9; the migration fills them conservatively (p95 and p97
/// with p99, p99.9 with the maximum) and says so in `warnings`. TTFT percentiles are
/// recomputed from the samples when present, since v0 kept only two of them; TPOT (per query
/// and its percentiles) is derived from each sample's latency, TTFT and token count.
fn migrate_v0(v0: Value, path: &Path) -> Result<Value> {
    let num = |key: &str| -> Result<f64> {
        v0.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| field_err(path, key, "is missing or not a number (schema v0)"))
    };
    let text = |key: &str| -> String {
        v0.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut warnings: Vec<Value> = v0
        .get("warnings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    warnings.push(Value::from(
        "migrated from schema v0: latency p95/p97 set to p99 and p99.9 to max (not recorded in v0)",
    ));

    let started = v0
        .get("started_utc")
        .cloned()
        .ok_or_else(|| field_err(path, "started_utc", "is missing (schema v0)"))?;
    let finished = v0
        .get("finished_utc")
        .cloned()
        .unwrap_or_else(|| started.clone());
    let device_id = text("device");
    let device_name = v0
        .get("device_name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| device_id.clone());
    let model_path = text("model");
    let model_name = Path::new(&model_path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let meta = serde_json::json!({
        "tool": "pocketperf",
        "tool_version": text("tool_version"),
        "git_commit": text("git_commit"),
        "device": { "id": device_id, "name": device_name, "cpu": "", "os": "" },
        "model": { "name": model_name, "path": model_path, "sha256": text("model_sha256"), "file_type": "" },
        "backend": text("backend"),
        "isa": "",
        "threads": v0.get("threads").and_then(Value::as_u64).unwrap_or(0),
        "settings": v0.get("settings").cloned().unwrap_or(Value::Null),
        "started_utc": started,
        "finished_utc": finished,
    });

    let performance = if v0.get("scenario").is_some() {
        let samples = v0
            .get("samples")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut per_query = Vec::with_capacity(samples.len());
        let mut ttfts = Vec::new();
        let mut tpots = Vec::new();
        for (i, s) in samples.iter().enumerate() {
            let latency = s.get("latency_ms").and_then(Value::as_f64).ok_or_else(|| {
                field_err(
                    path,
                    &format!("samples[{i}].latency_ms"),
                    "is missing or not a number",
                )
            })?;
            let ttft = s.get("ttft_ms").and_then(Value::as_f64);
            let tokens = s.get("tokens").and_then(Value::as_u64).unwrap_or(0);
            let tpot = match (ttft, tokens) {
                (Some(t), n) if n > 1 => Some((latency - t) / (n - 1) as f64),
                _ => None,
            };
            ttfts.extend(ttft);
            tpots.extend(tpot);
            per_query.push(serde_json::json!({
                "id": i, "sample_index": i, "start_s": 0.0, "latency_ms": latency,
                "ttft_ms": ttft, "tokens": tokens, "tpot_ms": tpot,
            }));
        }
        let p99 = num("latency_p99_ms")?;
        let max = num("latency_max_ms")?;
        let latency = serde_json::json!({
            "n": v0.get("queries").and_then(Value::as_u64).unwrap_or(samples.len() as u64),
            "mean": num("latency_mean_ms")?, "min": num("latency_min_ms")?, "max": max,
            "p50": num("latency_p50_ms")?, "p90": num("latency_p90_ms")?,
            "p95": p99, "p97": p99, "p99": p99, "p999": max,
        });
        let summary = |v: &[f64]| {
            Percentiles::from_samples(v)
                .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
                .unwrap_or(Value::Null)
        };
        let (ttft, tpot) = (summary(&ttfts), summary(&tpots));
        Some(serde_json::json!({
            "scenario": text("scenario"),
            "mode": "PerformanceOnly",
            "valid": v0.get("valid").and_then(Value::as_bool).unwrap_or(false),
            "invalid_reasons": [],
            "queries": v0.get("queries").and_then(Value::as_u64).unwrap_or(samples.len() as u64),
            "duration_s": num("duration_s")?,
            "qps": num("qps")?,
            "tokens_per_s": num("tokens_per_s")?,
            "latency_ms": latency,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "per_query": per_query,
        }))
    } else {
        None
    };

    let accuracy = match v0.get("accuracy").and_then(Value::as_f64) {
        Some(acc) => {
            let n = v0.get("accuracy_n").and_then(Value::as_u64).unwrap_or(0);
            let correct = (acc * n as f64).round() as u64;
            let (lo, hi) = pocketperf_stats::wilson_interval(correct, n, pocketperf_stats::Z95);
            Some(serde_json::json!({
                "dataset": "mmlu", "mode": "generate", "shots": 0, "n": n, "correct": correct,
                "accuracy": acc, "ci95": [lo, hi], "wall_s": 0.0,
            }))
        }
        None => None,
    };

    Ok(serde_json::json!({
        "schema_version": 1,
        "meta": meta,
        "performance": performance,
        "accuracy": accuracy,
        "warnings": warnings,
    }))
}
