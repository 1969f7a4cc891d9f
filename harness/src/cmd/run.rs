//! `pocketperf run`: its flags ([`RunArgs`]) and their resolution into LoadGen test settings
//! ([`resolve_settings`]: the preset, then `--config`, then flags). `main` hands the resolved
//! command to [`crate::run::perf`] (SingleStream, Offline, Server) or, for
//! `--scenario dialogue`, to [`crate::run::dialogue`].

use crate::cmd::governor::GovernorArgs;
use crate::cmd::runtime::EngineArgs;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use pocketperf_datasets::perf::Preset;
use pocketperf_scenarios::{Scenario, TestMode, TestSettings};
use std::path::PathBuf;

/// The model name `--config` lines are matched against (`llm.*.key`, `*.*.key`).
pub const CONFIG_MODEL: &str = "llm";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum ScenarioArg {
    SingleStream,
    Offline,
    Server,
    /// Scripted multi-turn chats with energy per dialogue (`run::dialogue`).
    Dialogue,
}

impl ScenarioArg {
    /// The LoadGen scenario, or `None` for the dialogue scenario (its own loop, not LoadGen's).
    pub fn scenario(self) -> Option<Scenario> {
        match self {
            ScenarioArg::SingleStream => Some(Scenario::SingleStream),
            ScenarioArg::Offline => Some(Scenario::Offline),
            ScenarioArg::Server => Some(Scenario::Server),
            ScenarioArg::Dialogue => None,
        }
    }
}

/// Where the system under test runs (`--sut`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SutArg {
    /// The runtime in this process.
    InProcess,
    /// `pocketperf serve` as a child process (crash-isolated; timestamps from its clock).
    Process,
    /// An OpenAI-compatible server at this base URL (`http://HOST:PORT`, docs/HTTP.md).
    Http(String),
}

impl SutArg {
    /// `in-process`, `process` or `http`: the kind result.json records under `cli.sut`
    /// (the endpoint goes to `sut.endpoint`).
    pub fn kind(&self) -> &'static str {
        match self {
            SutArg::InProcess => "in-process",
            SutArg::Process => "process",
            SutArg::Http(_) => "http",
        }
    }
}

impl std::str::FromStr for SutArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "in-process" => Ok(SutArg::InProcess),
            "process" => Ok(SutArg::Process),
            u if u.starts_with("http://") || u.starts_with("https://") => {
                crate::http::client::normalize_base(u).map(SutArg::Http)
            }
            other => Err(format!(
                "{other:?}: expected in-process, process or http://HOST:PORT"
            )),
        }
    }
}

impl serde::Serialize for SutArg {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.kind())
    }
}

/// Flags of the HTTP system under test (`--sut http://…`). Each is an error with any other
/// SUT ([`HttpSutArgs::given`]), so none is accepted and ignored.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct HttpSutArgs {
    /// With --sut http://…: the request shape (completions sends the prompt's token ids in
    /// the local model's chat template to /v1/completions; chat sends it as one user message;
    /// native sends the token ids to llama.cpp's /completion, which streams token ids)
    /// [default: completions].
    #[arg(long, value_enum)]
    pub api: Option<crate::http::client::ApiKind>,
    /// With --sut http://…: requests in flight at most (Offline and Server) [default: 8].
    #[arg(long)]
    pub http_concurrency: Option<usize>,
    /// With --sut http://…: seconds one request may take in all [default: 120].
    #[arg(long)]
    pub http_timeout_s: Option<u64>,
    /// With --sut http://…: seconds a response may go without a byte [default: 30].
    #[arg(long)]
    pub http_stall_s: Option<u64>,
    /// With --sut http://…: retries of a request refused before its first token
    /// (connection refused, HTTP 500/502/503/504) [default: 2].
    #[arg(long)]
    pub http_retries: Option<u32>,
}

impl HttpSutArgs {
    pub fn config(&self, base_url: &str) -> crate::sut::http::HttpSutConfig {
        crate::sut::http::HttpSutConfig {
            base_url: base_url.to_string(),
            api: self
                .api
                .unwrap_or(crate::http::client::ApiKind::Completions),
            concurrency: self.http_concurrency.unwrap_or(8).max(1),
            request_timeout: std::time::Duration::from_secs(
                self.http_timeout_s.unwrap_or(120).max(1),
            ),
            stall_timeout: std::time::Duration::from_secs(self.http_stall_s.unwrap_or(30).max(1)),
            retries: self.http_retries.unwrap_or(2),
        }
    }

    /// The flags given on the command line (for the error when the SUT is not HTTP).
    pub fn given(&self) -> Vec<&'static str> {
        [
            (self.api.is_some(), "--api"),
            (self.http_concurrency.is_some(), "--http-concurrency"),
            (self.http_timeout_s.is_some(), "--http-timeout-s"),
            (self.http_stall_s.is_some(), "--http-stall-s"),
            (self.http_retries.is_some(), "--http-retries"),
        ]
        .into_iter()
        .filter_map(|(given, name)| given.then_some(name))
        .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum PresetArg {
    /// CI-sized: 64 queries, 5 s minimum, short outputs (mean 32 tokens); VALID SingleStream
    /// and Offline within minutes on a 2-core machine.
    Quick,
    /// MLPerf Mobile LLM rules: at least 100 queries and 60 s, at most 300 s; outputs of
    /// mean 128 tokens.
    Full,
}

impl PresetArg {
    /// Warm-up queries run before the timed pass when `--warmup` is not given: one for
    /// `quick` (the first query's page faults and cache fills stay out of a short run), three
    /// for `full`.
    pub fn warmup_queries(self) -> u64 {
        match self {
            PresetArg::Quick => 1,
            PresetArg::Full => 3,
        }
    }

    pub fn prompt_preset(self) -> Preset {
        match self {
            PresetArg::Quick => Preset::Quick,
            PresetArg::Full => Preset::Full,
        }
    }
}

#[derive(Args, Debug, serde::Serialize)]
pub struct RunArgs {
    #[arg(long, value_enum, default_value = "single-stream")]
    pub scenario: ScenarioArg,
    /// LoadGen-format config (`model.scenario.key = value`, model name `llm`) applied over
    /// the preset; typos, bad values and wrong units are errors with file and line.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "quick")]
    pub preset: PresetArg,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Result directory (created). One that holds anything is refused unless --force.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the contents of a non-empty --out (an earlier pocketperf result: every file in
    /// it is removed first, so none of the earlier run stays beside the new one).
    #[arg(long)]
    pub force: bool,
    /// Server scenario: target queries per second (overrides the preset and `--config`).
    #[arg(long)]
    pub server_qps: Option<f64>,
    /// Offline scenario: expected queries per second (overrides the preset's 1 and
    /// `--config`). It sizes the one query at max(min_query_count, 1.1 × QPS × min_duration)
    /// samples, so a machine that finishes the preset's queries inside the minimum duration
    /// (INVALID: "min duration not met") gets a batch large enough to fill it.
    #[arg(long)]
    pub offline_qps: Option<f64>,
    /// Offline scenario: prompt tokens one batched pass carries at most beside the decode
    /// tokens of the sequences in flight (chunked prefill; default 32). In-process SUT, on
    /// either backend.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub prefill_chunk: Option<u64>,
    /// Offline scenario: sequences the batched decoder keeps in flight (continuous batching;
    /// default 8). In-process SUT, on either backend.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub offline_batch: Option<u64>,
    /// Keep in each session's KV cache the prefix a prompt shares with the session's previous
    /// one (the chat template's system prompt and headers) and run only the rest, as a
    /// server's prompt cache does. In-process SUT; SingleStream, Offline and Server.
    #[arg(long, value_enum, default_value = "off")]
    pub prefix_reuse: crate::cmd::OnOff,
    /// Device: `local` (sysfs at /sys) or `sim:snapdragon-8gen3` / `sim:pixel-8-pro` (a
    /// simulated handset driven by the runtime's CPU use; see docs/TELEMETRY.md), optionally
    /// `sim:PROFILE,thermal-speedup=K` (thermal time constants K times shorter).
    #[arg(long, default_value = "local")]
    pub device: String,
    #[command(flatten)]
    pub governor: GovernorArgs,
    /// System under test: `in-process` (the runtime in this process), `process`
    /// (`pocketperf serve` as a child, docs/PROTOCOL.md; a crashed child is recorded and
    /// restarted) or `http://HOST:PORT` (an OpenAI-compatible server, docs/HTTP.md).
    #[arg(long, default_value = "in-process")]
    pub sut: SutArg,
    /// Recorded under `sut` (result.json `meta.settings.sut`) for HTTP runs only, so runs of
    /// the other SUTs keep the `cli` they always had.
    #[command(flatten)]
    #[serde(skip)]
    pub http: HttpSutArgs,
    /// Untimed warm-up queries before the timed pass, never counted in its results
    /// (default: the preset's, 1 for quick and 3 for full; 0 for none).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Evict the model file from the page cache just before the first query (after load and
    /// set-up) and record that query's latency with the file's residency before and after
    /// (result.json `memory.cold_start`). Mapped pages stay: with --prefault or --mlock, all.
    /// The matrices are then read from the file's mapping, not repacked or copied
    /// (docs/RUNTIME.md), so that the first query reads the weights: in process, and in the
    /// `--sut process` child (its `load` request's `copies: false`).
    #[arg(long)]
    pub cold_start: bool,
    /// Replicates: run the scenario N times, into OUT/run-1 … OUT/run-N (each a complete
    /// result directory; `gate` reads such a directory as N runs of one side). 1: one run,
    /// into OUT itself.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
}

impl RunArgs {
    /// Warm-up queries in effect.
    pub fn warmup_queries(&self) -> u64 {
        self.warmup.unwrap_or_else(|| self.preset.warmup_queries())
    }
}

/// Settings shared by every scenario of a preset: token mode, performance only, a query
/// timeout, the preset's query count and duration window, and LoadGen's seeds.
fn common_settings(scenario: Scenario, preset: PresetArg) -> TestSettings {
    let mut s = TestSettings::new(scenario);
    s.use_token_latencies = true;
    s.mode = TestMode::PerformanceOnly;
    s.query_timeout_ms = 120_000;
    // The seeds of LoadGen's mlperf.conf: with them the loaded set, each query's sample and
    // the Server arrivals are those of an MLPerf LoadGen run (docs/SCENARIOS.md).
    s.qsl_rng_seed = 2_085_463_073_848_966_840;
    s.sample_index_rng_seed = 2_747_215_439_041_700_203;
    s.schedule_rng_seed = 16_159_082_839_903_944_936;
    match preset {
        PresetArg::Quick => {
            s.min_query_count = 64;
            s.min_duration_ms = 5_000;
            s.max_duration_ms = 150_000;
        }
        PresetArg::Full => {
            s.min_query_count = 100;
            s.min_duration_ms = 60_000;
            s.max_duration_ms = 300_000;
        }
    }
    s
}

/// SingleStream: one query at a time; early stopping at the 90th percentile (64 queries
/// suffice for an estimate).
pub fn single_stream_settings(preset: PresetArg) -> TestSettings {
    let mut s = common_settings(Scenario::SingleStream, preset);
    s.target_latency_percentile = 0.90;
    s
}

/// Offline: every sample at once. The expected rate sizes the batch
/// (`max(min_query_count, 1.1 × qps × min_duration)`); one sample per second keeps it at the
/// preset's query count on a phone-class CPU.
pub fn offline_settings(preset: PresetArg) -> TestSettings {
    let mut s = common_settings(Scenario::Offline, preset);
    s.offline_expected_qps = 1.0;
    s
}

/// Server: Poisson arrivals at 0.5 queries/s, TTFT within 10 s and TPOT within 1 s at the
/// 90th percentile (the 99th would need 459 queries with none over the bound).
pub fn server_settings(preset: PresetArg) -> TestSettings {
    let mut s = common_settings(Scenario::Server, preset);
    s.server_target_qps = 0.5;
    s.server_target_latency_percentile = 0.90;
    s.server_target_latency_ns = 20_000_000_000;
    s.server_ttft_latency_ns = 10_000_000_000;
    s.server_tpot_latency_ns = 1_000_000_000;
    s
}

/// Settings of a preset for a scenario (before any `--config`).
pub fn preset_settings(scenario: Scenario, preset: PresetArg) -> TestSettings {
    match scenario {
        Scenario::SingleStream => single_stream_settings(preset),
        Scenario::Offline => offline_settings(preset),
        Scenario::Server => server_settings(preset),
    }
}

/// The preset, then `--config`, then `--server-qps` or `--offline-qps` (each refused outside
/// its scenario); validated.
pub fn resolve_settings(a: &RunArgs) -> Result<TestSettings> {
    let Some(scenario) = a.scenario.scenario() else {
        bail!("--scenario dialogue has no LoadGen settings (it runs its own loop)");
    };
    if a.server_qps.is_some() && scenario != Scenario::Server {
        bail!("--server-qps applies to --scenario server only");
    }
    if a.offline_qps.is_some() && scenario != Scenario::Offline {
        bail!("--offline-qps applies to --scenario offline only");
    }
    let mut settings = preset_settings(scenario, a.preset);
    if let Some(cfg) = &a.config {
        let text = std::fs::read_to_string(cfg)
            .with_context(|| format!("{}: cannot read", cfg.display()))?;
        settings.apply_config_str(&text, &cfg.display().to_string(), CONFIG_MODEL)?;
    }
    if let Some(q) = a.server_qps {
        settings.server_target_qps = pocketperf_scenarios::settings::qps_in_range(q)
            .map_err(|e| anyhow::anyhow!("--server-qps {e}"))?;
    }
    if let Some(q) = a.offline_qps {
        settings.offline_expected_qps = pocketperf_scenarios::settings::qps_in_range(q)
            .map_err(|e| anyhow::anyhow!("--offline-qps {e}"))?;
    }
    settings.validate()?;
    Ok(settings)
}
