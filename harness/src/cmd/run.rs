//! `pocketperf run`: the in-process runtime as the system under test, driven by the scenario
//! engine (SingleStream, Offline, Server) over the performance prompt set, writing the result
//! directory: `result.json`, MLPerf logs and `tokens.csv`.

use crate::cmd::runtime::{EngineArgs, prompt_tokens};
use crate::meta;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use pocketperf_datasets::perf::{PerfPrompt, Preset, perf_prompts};
use pocketperf_reports::schema::{
    DeviceInfo, ModelInfo, Percentiles, Performance, QuerySample, ResultFile, RunMeta,
};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, Session};
use pocketperf_scenarios::{
    LatencyStats, LogMeta, QslError, Query, QuerySampleLibrary, RealClock, Responder, Scenario,
    SystemUnderTest, TestMode, TestResult, TestSettings, run_test,
};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize)]
pub enum ScenarioArg {
    SingleStream,
    Offline,
    Server,
}

#[derive(Clone, Copy, Debug, ValueEnum, serde::Serialize)]
pub enum PresetArg {
    /// CI-sized: VALID SingleStream/Offline in minutes on a 2-core machine.
    Quick,
    /// MLPerf Mobile LLM rules: at least 100 queries and 60 s, at most 300 s.
    Full,
}

#[derive(Args, Debug, serde::Serialize)]
pub struct RunArgs {
    #[arg(long, value_enum, default_value = "single-stream")]
    pub scenario: ScenarioArg,
    /// LoadGen-format config (`model.scenario.key = value`) applied over the preset.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "quick")]
    pub preset: PresetArg,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Result directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Server scenario: target queries per second.
    #[arg(long)]
    pub server_qps: Option<f64>,
    /// Device the run is attributed to (`local` here).
    #[arg(long, default_value = "local")]
    pub device: String,
}

/// Settings of a preset for a scenario (before any `--config`).
pub fn preset_settings(scenario: Scenario, preset: PresetArg) -> TestSettings {
    let mut s = TestSettings::new(scenario);
    s.use_token_latencies = true;
    s.mode = TestMode::PerformanceOnly;
    s.query_timeout_ms = 120_000;
    match preset {
        PresetArg::Quick => {
            s.min_query_count = 64;
            s.min_duration_ms = 5_000;
            s.max_duration_ms = 150_000;
            s.offline_expected_qps = 1.0;
            s.server_target_qps = 0.5;
            s.server_target_latency_ns = 20_000_000_000;
            s.server_ttft_latency_ns = 10_000_000_000;
            s.server_tpot_latency_ns = 1_000_000_000;
        }
        PresetArg::Full => {
            s.min_query_count = 100;
            s.min_duration_ms = 60_000;
            s.max_duration_ms = 300_000;
            s.offline_expected_qps = 1.0;
            s.server_target_qps = 0.5;
            s.server_target_latency_ns = 20_000_000_000;
            s.server_ttft_latency_ns = 10_000_000_000;
            s.server_tpot_latency_ns = 1_000_000_000;
        }
    }
    s
}

/// The performance prompt set, pre-tokenized when samples are loaded.
pub struct PromptLibrary<'e> {
    engine: &'e Engine,
    prompts: Vec<PerfPrompt>,
    tokens: Vec<Option<Vec<u32>>>,
}

impl<'e> PromptLibrary<'e> {
    pub fn new(engine: &'e Engine, prompts: Vec<PerfPrompt>) -> Self {
        let n = prompts.len();
        PromptLibrary {
            engine,
            prompts,
            tokens: vec![None; n],
        }
    }
}

impl QuerySampleLibrary for PromptLibrary<'_> {
    fn name(&self) -> &str {
        "pocketperf-perf-prompts"
    }
    fn total_sample_count(&self) -> u64 {
        self.prompts.len() as u64
    }
    fn performance_sample_count(&self) -> u64 {
        self.prompts.len() as u64
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        for &i in indices {
            let p = self
                .prompts
                .get(i as usize)
                .ok_or_else(|| format!("sample {i} is outside the prompt set"))?;
            let ids = prompt_tokens(self.engine, &p.text, true).map_err(|e| e.to_string())?;
            self.tokens[i as usize] = Some(ids);
        }
        Ok(())
    }
    fn unload_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        for &i in indices {
            if let Some(t) = self.tokens.get_mut(i as usize) {
                *t = None;
            }
        }
        Ok(())
    }
}

/// The runtime in this process as an SUT: each query is a fresh sequence of the prompt
/// followed by exactly `max_new_tokens` greedy tokens (EOS ignored, as MLPerf's
/// performance mode forces output length).
pub struct InProcessSut<'e, 'q> {
    pub session: Session<'e>,
    pub library: &'q PromptLibrary<'e>,
    pub errors: Vec<String>,
}

impl SystemUnderTest for InProcessSut<'_, '_> {
    fn name(&self) -> &str {
        "pocketperf-runtime (in-process)"
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        for q in queries {
            let i = q.sample_index as usize;
            let (Some(Some(prompt)), Some(meta)) =
                (self.library.tokens.get(i), self.library.prompts.get(i))
            else {
                self.errors
                    .push(format!("query {}: sample {i} not loaded", q.id));
                continue;
            };
            self.session.reset();
            let opts = GenerateOptions {
                max_new_tokens: meta.max_new_tokens as usize,
                stop_at_eog: false,
                sampling: SamplingParams::default(),
            };
            let res = self.session.generate(prompt, &opts, |k, _| {
                if k == 0 {
                    responder.first_token(q.id);
                } else {
                    responder.token(q.id);
                }
            });
            match res {
                Ok(stats) => responder.complete(q.id, stats.generated as u64, None),
                Err(e) => self
                    .errors
                    .push(format!("query {} (sample {i}): {e}", q.id)),
            }
        }
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn percentiles_ms(s: &LatencyStats) -> Percentiles {
    let at = |p: f64| {
        s.percentiles
            .iter()
            .find(|(q, _)| (*q - p).abs() < 1e-9)
            .map_or(f64::NAN, |(_, v)| ms(*v))
    };
    Percentiles {
        n: s.count,
        mean: ms(s.mean),
        min: ms(s.min),
        max: ms(s.max),
        p50: at(0.5),
        p90: at(0.9),
        p95: at(0.95),
        p97: at(0.97),
        p99: at(0.99),
        p999: at(0.999),
    }
}

pub fn log_meta(
    started: &chrono::DateTime<chrono::Utc>,
    finished: &chrono::DateTime<chrono::Utc>,
) -> LogMeta {
    let power = |t: &chrono::DateTime<chrono::Utc>| t.format("%m-%d-%Y %H:%M:%S%.3f").to_string();
    LogMeta {
        tool_version: format!("{} {}", meta::TOOL, meta::TOOL_VERSION),
        commit: meta::GIT_COMMIT.to_string(),
        commit_date_utc: String::new(),
        build_date_utc: String::new(),
        test_datetime_utc: started.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        power_begin: power(started),
        power_end: power(finished),
    }
}

/// Converts the scenario engine's result into the result-file section.
pub fn performance_section(r: &TestResult) -> Option<Performance> {
    let p = r.performance.as_ref()?;
    let per_query: Vec<QuerySample> = r
        .query_records()
        .filter_map(|q| {
            let done = q.complete_ns?;
            let lat = done.saturating_sub(q.issue_ns);
            let ttft = q.first_token_ns.map(|f| f.saturating_sub(q.issue_ns));
            let tpot = match (ttft, q.tokens) {
                (Some(t), n) if n >= 2 => Some(ms(lat.saturating_sub(t)) / (n - 1) as f64),
                _ => None,
            };
            Some(QuerySample {
                id: q.id,
                sample_index: q.sample_index,
                start_s: q.issue_ns.saturating_sub(p.start_ns) as f64 / 1e9,
                latency_ms: ms(lat),
                ttft_ms: ttft.map(ms),
                tokens: q.tokens as u32,
                tpot_ms: tpot,
            })
        })
        .collect();
    let duration_s = p.final_query_done_ns as f64 / 1e9;
    Some(Performance {
        scenario: r.settings.scenario.as_str().to_string(),
        mode: r.settings.mode.as_str().to_string(),
        valid: r.is_valid(),
        invalid_reasons: r.invalid_causes.iter().map(|c| c.to_string()).collect(),
        queries: p.queries_completed,
        duration_s,
        qps: if duration_s > 0.0 {
            p.queries_completed as f64 / duration_s
        } else {
            0.0
        },
        tokens_per_s: p.tokens_per_second,
        latency_ms: p.latency.as_ref().map(percentiles_ms).unwrap_or_else(|| {
            percentiles_ms(&LatencyStats::from_sorted(&[0]).unwrap_or_else(empty_stats))
        }),
        ttft_ms: p.ttft.as_ref().map(percentiles_ms),
        tpot_ms: p.tpot.as_ref().map(percentiles_ms),
        itl_ms: p.inter_token.as_ref().map(percentiles_ms),
        early_stopping: serde_json::to_value(&p.early_stopping).ok(),
        per_query,
        backend_counters: None,
    })
}

fn empty_stats() -> LatencyStats {
    LatencyStats {
        count: 0,
        min: 0,
        max: 0,
        mean: 0,
        percentiles: Vec::new(),
    }
}

/// Writes `tokens.csv`: one row per generated token, times relative to the run start.
pub fn write_tokens_csv(dir: &Path, r: &TestResult, header: &[(String, String)]) -> Result<()> {
    let path = dir.join("tokens.csv");
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path)
            .with_context(|| format!("{}: cannot create", path.display()))?,
    );
    for (k, v) in header {
        writeln!(f, "# {k}={v}")?;
    }
    writeln!(f, "query,token,t_ms")?;
    let start = r.performance.as_ref().map_or(0, |p| p.start_ns);
    for q in r.query_records() {
        if let Some(ft) = q.first_token_ns {
            writeln!(f, "{},0,{:.3}", q.id, ms(ft.saturating_sub(start)))?;
        }
        for (k, t) in q.token_ns.iter().enumerate() {
            writeln!(f, "{},{},{:.3}", q.id, k + 1, ms(t.saturating_sub(start)))?;
        }
    }
    f.flush()?;
    Ok(())
}

pub fn file_header(r: &ResultFile) -> Vec<(String, String)> {
    vec![
        ("schema_version".into(), r.schema_version.to_string()),
        (
            "tool".into(),
            format!("{} {}", r.meta.tool, r.meta.tool_version),
        ),
        ("git_commit".into(), r.meta.git_commit.clone()),
        ("device".into(), r.meta.device.id.clone()),
        ("model_sha256".into(), r.meta.model.sha256.clone()),
        ("settings".into(), r.meta.settings.to_string()),
        ("started_utc".into(), r.meta.started_utc.to_rfc3339()),
    ]
}

/// Metadata of a run over a loaded engine.
pub fn run_meta(
    engine: &Engine,
    model_path: &Path,
    device: &str,
    settings: serde_json::Value,
    started: chrono::DateTime<chrono::Utc>,
) -> RunMeta {
    let host = meta::local_host();
    RunMeta {
        tool: meta::TOOL.into(),
        tool_version: meta::TOOL_VERSION.into(),
        git_commit: meta::GIT_COMMIT.into(),
        device: DeviceInfo {
            id: device.into(),
            name: host.name,
            cpu: host.cpu,
            os: host.os,
        },
        model: ModelInfo {
            name: engine
                .model
                .gguf()
                .get_str("general.name")
                .unwrap_or("unknown")
                .to_string(),
            path: model_path.display().to_string(),
            sha256: meta::model_sha256(model_path),
            file_type: engine
                .model
                .gguf()
                .get_u32("general.file_type")
                .map(|t| t.to_string())
                .unwrap_or_default(),
        },
        backend: engine.backend().name().into(),
        isa: engine.isa().name().into(),
        threads: engine.threads() as u32,
        settings,
        started_utc: started,
        finished_utc: started,
    }
}

pub fn run(a: &RunArgs) -> Result<i32> {
    if a.device != "local" {
        bail!(
            "--device {}: only `local` runs the performance scenarios in this build",
            a.device
        );
    }
    let scenario = match a.scenario {
        ScenarioArg::SingleStream => Scenario::SingleStream,
        ScenarioArg::Offline => Scenario::Offline,
        ScenarioArg::Server => Scenario::Server,
    };
    let mut settings = preset_settings(scenario, a.preset);
    if let Some(q) = a.server_qps {
        if !(q.is_finite() && q > 0.0) {
            bail!("--server-qps {q}: must be a positive number");
        }
        settings.server_target_qps = q;
    }
    if let Some(cfg) = &a.config {
        let text = std::fs::read_to_string(cfg)
            .with_context(|| format!("{}: cannot read", cfg.display()))?;
        settings.apply_config_str(&text, &cfg.display().to_string(), "llm")?;
    }
    settings.validate()?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: cannot create", a.out.display()))?;

    let (engine, model_path) = a.engine.load()?;
    let preset = match a.preset {
        PresetArg::Quick => Preset::Quick,
        PresetArg::Full => Preset::Full,
    };
    let mut library = PromptLibrary::new(&engine, perf_prompts(preset));
    let longest = library
        .prompts
        .iter()
        .map(|p| p.max_new_tokens as usize)
        .max()
        .unwrap_or(0);
    let started = chrono::Utc::now();
    let clock = RealClock::new();
    // Pre-tokenize everything once, so the SUT can borrow the library immutably.
    let all: Vec<u64> = (0..library.total_sample_count()).collect();
    library
        .load_samples(&all)
        .map_err(|e| anyhow::anyhow!("loading prompts: {e}"))?;
    let session = engine.session(SessionOptions {
        max_seq_len: 512 + longest,
        max_batch: 128,
        ..Default::default()
    })?;
    let mut sut = InProcessSut {
        session,
        library: &library,
        errors: Vec::new(),
    };
    let mut qsl = PreloadedQsl {
        n: all.len() as u64,
    };
    let progress = crate::progress::spinner(&format!("{} run", settings.scenario.as_str()));
    let result = run_test(&mut sut, &mut qsl, &settings, &clock)?;
    progress.finish_and_clear();
    let finished = chrono::Utc::now();

    let settings_json = serde_json::json!({ "cli": a, "test_settings": &settings });
    let mut meta = run_meta(&engine, &model_path, &a.device, settings_json, started);
    let mut performance = performance_section(&result);
    if let (Some(p), Some(c)) = (performance.as_mut(), sut.session.device_counters()) {
        p.backend_counters = crate::cmd::backend::backend_counters(&engine, &c)
            .and_then(|c| serde_json::to_value(c).ok());
    }
    meta.finished_utc = finished;
    let mut warnings: Vec<String> = sut.errors.iter().take(20).cloned().collect();
    if sut.errors.len() > 20 {
        warnings.push(format!("{} more SUT errors", sut.errors.len() - 20));
    }
    let file = ResultFile {
        schema_version: pocketperf_reports::schema::SCHEMA_VERSION,
        meta,
        performance,
        accuracy: None,
        energy: None,
        thermal: None,
        governor: None,
        robustness: None,
        warnings,
    };
    pocketperf_reports::schema::write_result(&a.out, &file)?;
    result.write_logs(&a.out, &log_meta(&started, &finished))?;
    write_tokens_csv(&a.out, &result, &file_header(&file))?;
    println!("{}", summary_line(&file));
    println!("results in {}", a.out.display());
    Ok(if result.is_valid() { 0 } else { 1 })
}

/// Samples are tokenized up front by [`PromptLibrary`]; the engine's load/unload calls are
/// then bookkeeping only.
struct PreloadedQsl {
    n: u64,
}

impl QuerySampleLibrary for PreloadedQsl {
    fn name(&self) -> &str {
        "pocketperf-perf-prompts"
    }
    fn total_sample_count(&self) -> u64 {
        self.n
    }
    fn performance_sample_count(&self) -> u64 {
        self.n
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        match indices.iter().find(|&&i| i >= self.n) {
            Some(i) => Err(format!("sample {i} is outside the prompt set of {}", self.n).into()),
            None => Ok(()),
        }
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

pub fn summary_line(f: &ResultFile) -> String {
    match &f.performance {
        Some(p) => format!(
            "{} {}: {} queries, {:.2} tokens/s, latency p90 {:.1} ms, TTFT p90 {}, TPOT p90 {}, P99 per-token {} — {}",
            p.scenario,
            p.mode,
            p.queries,
            p.tokens_per_s,
            p.latency_ms.p90,
            p.ttft_ms
                .as_ref()
                .map_or("-".into(), |t| format!("{:.1} ms", t.p90)),
            p.tpot_ms
                .as_ref()
                .map_or("-".into(), |t| format!("{:.1} ms", t.p90)),
            p.itl_ms
                .as_ref()
                .map_or("-".into(), |t| format!("{:.1} ms", t.p99)),
            if p.valid {
                "VALID".to_string()
            } else {
                format!("INVALID ({})", p.invalid_reasons.join("; "))
            }
        ),
        None => "no performance result".into(),
    }
}
