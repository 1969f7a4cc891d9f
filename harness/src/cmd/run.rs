//! `pocketperf run`: an MLPerf-style scenario (SingleStream, Offline, Server) over the
//! performance prompt set, with the runtime as the system under test, writing the result
//! directory: `result.json`, the MLPerf logs and `tokens.csv`.
//!
//! The command is a pipeline of small steps: [`resolve_settings`] (preset, then `--config`,
//! then flags), the system under test (the in-process runtime, or `pocketperf serve` as a
//! child process with `--sut process`), [`run_scenario`] (the scenario engine on a shared
//! clock: telemetry samplers and a governor use the same origin), and [`write_outputs`]. The
//! in-process SUT delegates decoding to a [`Decoder`] ([`make_decoder`]): SingleStream and
//! Server decode each query as it arrives ([`SequentialDecoder`]); Offline hands the whole
//! batch over at flush to the [`BatchedDecoder`], which keeps [`OFFLINE_BATCH`] sequences in
//! flight through the runtime's batched decode.

use crate::cmd::governor::{GovernorArgs, GovernorHook};
use crate::cmd::runtime::{EngineArgs, prompt_tokens};
use crate::meta;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use pocketperf_datasets::perf::{PerfPrompt, Preset, perf_prompts};
use pocketperf_reports::schema::{
    DeviceInfo, ModelInfo, Percentiles, Performance, QuerySample, ResultFile, RunMeta,
};
use pocketperf_runtime::backend::DeviceCounters;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{
    BatchDecoder, Engine, GenerateOptions, SamplingParams, Session, argmax,
};
use pocketperf_scenarios::{
    Clock, LatencyStats, LogMeta, QslError, Query, QuerySampleLibrary, RealClock, Responder,
    Scenario, SystemUnderTest, TestMode, TestResult, TestSettings, run_test,
};
use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The model name `--config` lines are matched against (`llm.*.key`, `*.*.key`).
pub const CONFIG_MODEL: &str = "llm";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum ScenarioArg {
    SingleStream,
    Offline,
    Server,
    /// Scripted multi-turn chats with energy per dialogue (`cmd::dialogue`).
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

/// Where the system under test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum SutArg {
    /// The runtime in this process.
    InProcess,
    /// `pocketperf serve` as a child process (crash-isolated; timestamps from its clock).
    Process,
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
    /// Result directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Server scenario: target queries per second (overrides the preset and `--config`).
    #[arg(long)]
    pub server_qps: Option<f64>,
    /// Device: `local` (sysfs at /sys) or `sim:snapdragon-8gen3` / `sim:pixel-8-pro` (a
    /// simulated handset driven by the runtime's CPU use; see docs/TELEMETRY.md).
    #[arg(long, default_value = "local")]
    pub device: String,
    #[command(flatten)]
    pub governor: GovernorArgs,
    /// System under test: the runtime in this process, or `pocketperf serve` as a child
    /// process (docs/PROTOCOL.md); a crashed child is recorded and restarted.
    #[arg(long, value_enum, default_value = "in-process")]
    pub sut: SutArg,
}

/// Settings shared by every scenario of a preset: token mode, performance only, a query
/// timeout, the preset's query count and duration window, and LoadGen's seeds.
fn common_settings(scenario: Scenario, preset: PresetArg) -> TestSettings {
    let mut s = TestSettings::new(scenario);
    s.use_token_latencies = true;
    s.mode = TestMode::PerformanceOnly;
    s.query_timeout_ms = 120_000;
    // The seeds of LoadGen's mlperf.conf, so sample choice matches an MLPerf run.
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

/// The preset, then `--config`, then `--server-qps`; validated.
pub fn resolve_settings(a: &RunArgs) -> Result<TestSettings> {
    let Some(scenario) = a.scenario.scenario() else {
        bail!("--scenario dialogue has no LoadGen settings (it runs its own loop)");
    };
    let mut settings = preset_settings(scenario, a.preset);
    if let Some(cfg) = &a.config {
        let text = std::fs::read_to_string(cfg)
            .with_context(|| format!("{}: cannot read", cfg.display()))?;
        settings.apply_config_str(&text, &cfg.display().to_string(), CONFIG_MODEL)?;
    }
    if let Some(q) = a.server_qps {
        if !(q.is_finite() && q > 0.0) {
            bail!("--server-qps {q}: must be a positive number");
        }
        settings.server_target_qps = q;
    }
    settings.validate()?;
    Ok(settings)
}

/// The performance prompt set, tokenized once up front (ChatML, as a chat app would send).
pub struct PromptLibrary {
    prompts: Vec<PerfPrompt>,
    tokens: Vec<Vec<u32>>,
}

impl PromptLibrary {
    pub fn tokenize(engine: &Engine, prompts: Vec<PerfPrompt>) -> Result<Self> {
        let tokens = prompts
            .iter()
            .map(|p| {
                prompt_tokens(engine, &p.text, true)
                    .with_context(|| format!("tokenizing performance prompt {}", p.id))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PromptLibrary { prompts, tokens })
    }

    /// A library from prompts and their token ids (same order, same length).
    pub fn from_parts(prompts: Vec<PerfPrompt>, tokens: Vec<Vec<u32>>) -> Result<Self> {
        if prompts.len() != tokens.len() {
            bail!(
                "{} prompts but {} tokenized prompts",
                prompts.len(),
                tokens.len()
            );
        }
        Ok(PromptLibrary { prompts, tokens })
    }

    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    /// Longest prompt plus its forced output, in tokens.
    pub fn longest_sequence(&self) -> usize {
        self.tokens
            .iter()
            .zip(&self.prompts)
            .map(|(t, p)| t.len() + p.max_new_tokens as usize)
            .max()
            .unwrap_or(0)
    }

    /// The job for `query`, or why there is none.
    pub fn job(&self, query: Query) -> std::result::Result<Job<'_>, String> {
        let i = query.sample_index as usize;
        match (self.tokens.get(i), self.prompts.get(i)) {
            (Some(prompt), Some(p)) => Ok(Job {
                query,
                prompt,
                max_new_tokens: p.max_new_tokens as usize,
            }),
            _ => Err(format!(
                "sample {i} is outside the prompt set of {}",
                self.len()
            )),
        }
    }
}

/// The engine's view of the prompt library: samples are tokenized up front, so loading is
/// a bounds check.
pub struct PromptQsl {
    total: u64,
}

impl PromptQsl {
    pub fn new(library: &PromptLibrary) -> Self {
        PromptQsl {
            total: library.len() as u64,
        }
    }
}

impl QuerySampleLibrary for PromptQsl {
    fn name(&self) -> &str {
        "pocketperf-perf-prompts"
    }
    fn total_sample_count(&self) -> u64 {
        self.total
    }
    fn performance_sample_count(&self) -> u64 {
        self.total
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        match indices.iter().find(|&&i| i >= self.total) {
            Some(i) => {
                Err(format!("sample {i} is outside the prompt set of {}", self.total).into())
            }
            None => Ok(()),
        }
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

/// One query to decode: its prompt tokens and forced output length.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    pub query: Query,
    pub prompt: &'a [u32],
    pub max_new_tokens: usize,
}

/// How the in-process SUT turns jobs into tokens. It reports every token (including the
/// first) with [`Responder::token`] and then [`Responder::complete`], or
/// [`Responder::fail`] for a job it cannot run.
pub trait Decoder {
    /// Name for logs (`sequential`, `batched`).
    fn name(&self) -> &str;
    /// Decodes `jobs`; a batched implementation may interleave them.
    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>);
    /// The accelerator's counters since the decoder was made (`None` on the CPU backend).
    fn device_counters(&self) -> Option<DeviceCounters> {
        None
    }
}

/// One sequence at a time: reset, prefill, then exactly `max_new_tokens` greedy tokens
/// (EOS ignored, as MLPerf's performance mode forces the output length).
pub struct SequentialDecoder<'e> {
    session: Session<'e>,
    /// Thermal governor called after every token (`--governor`); shared so the caller reads
    /// its record after the run.
    governor: Option<SharedGovernor>,
}

/// The run's governor hook, shared between the decoder and the code that writes the outputs.
pub type SharedGovernor = Rc<RefCell<GovernorHook>>;

impl<'e> SequentialDecoder<'e> {
    pub fn new(session: Session<'e>) -> Self {
        SequentialDecoder {
            session,
            governor: None,
        }
    }

    /// Applies `governor` after every decoded token.
    pub fn with_governor(mut self, governor: Option<SharedGovernor>) -> Self {
        self.governor = governor;
        self
    }
}

impl Decoder for SequentialDecoder<'_> {
    fn name(&self) -> &str {
        "sequential"
    }

    fn device_counters(&self) -> Option<DeviceCounters> {
        self.session.device_counters()
    }

    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>) {
        for job in jobs {
            let id = job.query.id;
            self.session.reset();
            let opts = GenerateOptions {
                max_new_tokens: job.max_new_tokens,
                stop_at_eog: false,
                sampling: SamplingParams::default(),
            };
            let engine = self.session.engine();
            let mut gov = self.governor.as_ref().map(|g| g.borrow_mut());
            if let Some(g) = gov.as_mut() {
                g.begin();
            }
            let res = self.session.generate(job.prompt, &opts, |k, _| {
                responder.token(id);
                if let Some(g) = gov.as_mut() {
                    g.on_token(id, k, engine);
                }
            });
            drop(gov);
            match res {
                Ok(stats) => responder.complete(id, stats.generated as u64, None),
                Err(e) => responder.fail(id, &format!("sample {}: {e}", job.query.sample_index)),
            }
        }
    }
}

/// Sequences an Offline run decodes together ([`BatchedDecoder`]): the batch size at which
/// the runtime's batched decode reaches several times single-sequence throughput on a
/// phone-class CPU (docs/PERFORMANCE.md).
pub const OFFLINE_BATCH: usize = 8;

/// Offline's decoder: up to `slots` sequences in flight. A free slot takes the next job,
/// prefills its prompt alone and emits its first token; then every step advances all
/// sequences in flight by one token in one batched forward pass (each weight read once for
/// the whole batch, each sequence in its own KV ring), greedy, exactly `max_new_tokens`
/// tokens per job (EOS ignored). A finished sequence frees its slot for the next job
/// (continuous batching), so the batch stays full until the queue runs dry.
pub struct BatchedDecoder<'e> {
    batch: BatchDecoder<'e>,
    sessions: Vec<Session<'e>>,
}

/// A sequence in flight in a [`BatchedDecoder`] slot.
#[derive(Clone, Copy)]
struct InFlight {
    id: u64,
    sample: u64,
    last: u32,
    generated: usize,
    target: usize,
}

impl<'e> BatchedDecoder<'e> {
    /// `slots` sessions of `max_seq_len` tokens each, on `engine` (CPU backend).
    pub fn new(engine: &'e Engine, slots: usize, max_seq_len: usize) -> Result<Self> {
        let slots = slots.max(1);
        let batch = engine.batch_decoder(slots, max_seq_len)?;
        let sessions = (0..slots)
            .map(|_| {
                engine.session(SessionOptions {
                    max_seq_len,
                    max_batch: 128,
                    ..Default::default()
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(BatchedDecoder { batch, sessions })
    }

    /// Resets slot `k`'s session, prefills `job` and emits its first token; `None` when the
    /// job is already complete (one token) or failed.
    fn start(
        &mut self,
        k: usize,
        job: &Job<'_>,
        responder: &mut Responder<'_>,
    ) -> Option<InFlight> {
        let id = job.query.id;
        let s = &mut self.sessions[k];
        s.reset();
        if job.max_new_tokens == 0 {
            responder.complete(id, 0, None);
            return None;
        }
        match s.prefill(job.prompt) {
            Ok(logits) => {
                let first = argmax(logits);
                responder.token(id);
                if job.max_new_tokens == 1 {
                    responder.complete(id, 1, None);
                    return None;
                }
                Some(InFlight {
                    id,
                    sample: job.query.sample_index,
                    last: first,
                    generated: 1,
                    target: job.max_new_tokens,
                })
            }
            Err(e) => {
                responder.fail(id, &format!("sample {}: {e}", job.query.sample_index));
                None
            }
        }
    }
}

impl Decoder for BatchedDecoder<'_> {
    fn name(&self) -> &str {
        "batched"
    }

    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>) {
        let mut queue = jobs.iter();
        let mut slots: Vec<Option<InFlight>> = vec![None; self.sessions.len()];
        let mut order: Vec<usize> = Vec::with_capacity(slots.len());
        let mut tokens: Vec<u32> = Vec::with_capacity(slots.len());
        loop {
            // Fill free slots from the queue.
            for (k, slot) in slots.iter_mut().enumerate() {
                while slot.is_none() {
                    let Some(job) = queue.next() else { break };
                    *slot = self.start(k, job, responder);
                }
            }
            order.clear();
            tokens.clear();
            for (k, f) in slots.iter().enumerate() {
                if let Some(f) = f {
                    order.push(k);
                    tokens.push(f.last);
                }
            }
            if order.is_empty() {
                return;
            }
            // The sessions in flight, in slot order (a subset of the slots when the queue ran
            // dry).
            let mut refs: Vec<&mut Session<'_>> = self
                .sessions
                .iter_mut()
                .enumerate()
                .filter(|(k, _)| slots[*k].is_some())
                .map(|(_, s)| s)
                .collect();
            let step = self.batch.decode(&mut refs, &tokens);
            drop(refs);
            let vocab = self.sessions[0].engine().model.config().vocab_size;
            match step {
                Ok(logits) => {
                    for (row, &k) in order.iter().enumerate() {
                        let Some(f) = slots[k].as_mut() else { continue };
                        f.last = argmax(&logits[row * vocab..(row + 1) * vocab]);
                        f.generated += 1;
                        responder.token(f.id);
                        if f.generated == f.target {
                            responder.complete(f.id, f.generated as u64, None);
                            slots[k] = None;
                        }
                    }
                }
                Err(e) => {
                    // A step failed for the whole batch: fail every sequence in it.
                    for &k in &order {
                        if let Some(f) = slots[k].take() {
                            responder
                                .fail(f.id, &format!("sample {}: batched decode: {e}", f.sample));
                        }
                    }
                }
            }
        }
    }
}

/// The decoder for a scenario: Offline decodes its batch [`OFFLINE_BATCH`] sequences at a
/// time with the runtime's batched decode (CPU backend, no governor); everything else, and
/// Offline under a governor or on OpenCL, one sequence at a time.
pub fn make_decoder<'e>(
    engine: &'e Engine,
    scenario: Scenario,
    library: &PromptLibrary,
    governor: Option<SharedGovernor>,
) -> Result<Box<dyn Decoder + 'e>> {
    let max_seq_len = library.longest_sequence().max(1);
    let batched = scenario == Scenario::Offline
        && governor.is_none()
        && matches!(engine.backend(), pocketperf_runtime::backend::Backend::Cpu);
    if batched {
        return Ok(Box::new(BatchedDecoder::new(
            engine,
            OFFLINE_BATCH.min(library.len().max(1)),
            max_seq_len,
        )?));
    }
    let session = engine.session(SessionOptions {
        max_seq_len,
        max_batch: 128,
        ..Default::default()
    })?;
    Ok(Box::new(
        SequentialDecoder::new(session).with_governor(governor),
    ))
}

/// The runtime in this process as the SUT. SingleStream and Server decode each query on the
/// engine's thread as it is issued (a Server query that arrives while another decodes waits,
/// and its latency counts from its scheduled arrival); Offline queues the batch and decodes
/// it at flush through one [`Decoder::decode`] call.
pub struct InProcessSut<'e, 'l> {
    decoder: Box<dyn Decoder + 'e>,
    library: &'l PromptLibrary,
    batch_at_flush: bool,
    pending: Vec<Query>,
    name: String,
}

impl<'e, 'l> InProcessSut<'e, 'l> {
    pub fn new(
        decoder: Box<dyn Decoder + 'e>,
        library: &'l PromptLibrary,
        scenario: Scenario,
    ) -> Self {
        let name = format!("pocketperf-runtime (in-process, {} decode)", decoder.name());
        InProcessSut {
            decoder,
            library,
            batch_at_flush: scenario == Scenario::Offline,
            pending: Vec::new(),
            name,
        }
    }

    /// The decoder's accelerator counters (`None` on the CPU backend).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        self.decoder.device_counters()
    }

    fn decode(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        let mut jobs = Vec::with_capacity(queries.len());
        for &q in queries {
            match self.library.job(q) {
                Ok(j) => jobs.push(j),
                Err(e) => responder.fail(q.id, &e),
            }
        }
        self.decoder.decode(&jobs, responder);
    }
}

impl SystemUnderTest for InProcessSut<'_, '_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        if self.batch_at_flush {
            self.pending.extend_from_slice(queries);
        } else {
            self.decode(queries, responder);
        }
    }

    fn flush_queries(&mut self, responder: &mut Responder<'_>) {
        let batch = std::mem::take(&mut self.pending);
        if !batch.is_empty() {
            self.decode(&batch, responder);
        }
    }
}

/// The system under test for this run (the in-process runtime; other SUT kinds plug in
/// here).
pub fn make_sut<'e, 'l>(
    engine: &'e Engine,
    library: &'l PromptLibrary,
    settings: &TestSettings,
    governor: Option<SharedGovernor>,
) -> Result<Box<dyn SystemUnderTest + 'l>>
where
    'e: 'l,
{
    let decoder = make_decoder(engine, settings.scenario, library, governor)?;
    Ok(Box::new(InProcessSut::new(
        decoder,
        library,
        settings.scenario,
    )))
}

/// Runs the scenario engine, with a spinner on a TTY.
pub fn run_scenario(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    clock: &dyn Clock,
) -> Result<TestResult> {
    let progress = crate::progress::spinner(&format!("{} run", settings.scenario.as_str()));
    let result = run_test(sut, qsl, settings, clock);
    progress.finish_and_clear();
    Ok(result?)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn percentiles_ms(s: &LatencyStats) -> Percentiles {
    let at = |p: f64| s.at(p).map_or(f64::NAN, ms);
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
            let tpot = ttft.and_then(|t| pocketperf_scenarios::tpot_ns(lat, t, q.tokens).map(ms));
            Some(QuerySample {
                id: q.id,
                sample_index: q.sample_index,
                start_s: q.issue_ns.saturating_sub(p.start_ns) as f64 / 1e9,
                latency_ms: ms(lat),
                ttft_ms: ttft.map(ms),
                tokens: q.tokens.min(u32::MAX as u64) as u32,
                tpot_ms: tpot,
            })
        })
        .collect();
    let duration_s = p.final_query_done_ns as f64 / 1e9;
    let none = LatencyStats {
        count: 0,
        min: 0,
        max: 0,
        mean: 0,
        percentiles: Vec::new(),
    };
    Some(Performance {
        scenario: r.settings.scenario.as_str().to_string(),
        mode: r.settings.mode.as_str().to_string(),
        valid: r.is_valid(),
        invalid_reasons: r.invalid_causes.iter().map(|c| c.to_string()).collect(),
        queries: p.queries_completed,
        duration_s,
        qps: match r.settings.scenario {
            Scenario::SingleStream => p.qps_without_overhead,
            Scenario::Offline => p.samples_per_second,
            Scenario::Server => p.completed_qps,
        },
        tokens_per_s: p.tokens_per_second,
        latency_ms: percentiles_ms(p.latency.as_ref().unwrap_or(&none)),
        ttft_ms: p.ttft.as_ref().map(percentiles_ms),
        tpot_ms: p.tpot.as_ref().map(percentiles_ms),
        itl_ms: p.inter_token.as_ref().map(percentiles_ms),
        early_stopping: Some(serde_json::json!({
            "latency": p.early_stopping,
            "ttft": p.early_stopping_ttft,
            "tpot": p.early_stopping_tpot,
        })),
        per_query,
        backend_counters: None,
    })
}

/// Writes `tokens.csv`: one row per generated token (index 0 is the first token), times on
/// the run clock relative to the run start, in milliseconds and nanoseconds.
pub fn write_tokens_csv(dir: &Path, r: &TestResult, header: &[(String, String)]) -> Result<()> {
    write_tokens_csv_with(dir, r, header, None)
}

/// [`write_tokens_csv`] with the governor state of each token appended (`gov_*` columns).
pub fn write_tokens_csv_with(
    dir: &Path,
    r: &TestResult,
    header: &[(String, String)],
    governor: Option<&GovernorHook>,
) -> Result<()> {
    let index = governor.map(|g| g.token_index()).unwrap_or_default();
    let cells = |q: u64, k: usize| governor.map_or(String::new(), |g| g.csv_cells(&index, q, k));
    let path = dir.join(pocketperf_reports::schema::TOKENS_FILE);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path)
            .with_context(|| format!("{}: cannot create", path.display()))?,
    );
    for (k, v) in header {
        writeln!(f, "# {k}={}", v.replace('\n', " "))?;
    }
    writeln!(
        f,
        "query,sample,token,t_ms,t_ns{}",
        governor.map_or("", |g| g.csv_header())
    )?;
    let start = r.performance.as_ref().map_or(0, |p| p.start_ns);
    for q in r.query_records() {
        let first_only = q.token_ns.is_empty();
        let row = |f: &mut std::io::BufWriter<std::fs::File>, k: usize, t: u64| {
            let rel = t.saturating_sub(start);
            let c = cells(q.id, k);
            writeln!(f, "{},{},{k},{:.3},{rel}{c}", q.id, q.sample_index, ms(rel))
        };
        if first_only {
            if let Some(ft) = q.first_token_ns {
                row(&mut f, 0, ft)?;
            }
        } else {
            for (k, &t) in q.token_ns.iter().enumerate() {
                row(&mut f, k, t)?;
            }
        }
    }
    f.flush()
        .with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}

/// `# key=value` provenance lines for CSV outputs.
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

/// Writes `result.json`, the MLPerf logs and `tokens.csv` into `out`.
pub fn write_outputs(out: &Path, file: &ResultFile, result: &TestResult) -> Result<()> {
    write_outputs_with(out, file, result, None)
}

/// [`write_outputs`] with the governor's per-token state in `tokens.csv`.
pub fn write_outputs_with(
    out: &Path,
    file: &ResultFile,
    result: &TestResult,
    governor: Option<&GovernorHook>,
) -> Result<()> {
    pocketperf_reports::schema::write_result(out, file)?;
    result.write_logs(
        out,
        &log_meta(&file.meta.started_utc, &file.meta.finished_utc),
    )?;
    write_tokens_csv_with(out, result, &file_header(file), governor)?;
    Ok(())
}

/// The run's system under test, kept concrete so its own record (accelerator counters,
/// server failures) is read after the run.
enum RunSut<'e, 'l> {
    InProcess(Box<InProcessSut<'e, 'l>>),
    Process(Box<crate::sut_process::ProcessSut>),
}

impl RunSut<'_, '_> {
    fn as_dyn(&mut self) -> &mut dyn SystemUnderTest {
        match self {
            RunSut::InProcess(s) => s.as_mut(),
            RunSut::Process(s) => s.as_mut(),
        }
    }
}

pub fn run(a: &RunArgs) -> Result<i32> {
    crate::telemetry::DeviceSpec::parse(&a.device)?;
    if a.scenario == ScenarioArg::Dialogue {
        return crate::cmd::dialogue::run(a);
    }
    if a.sut == SutArg::Process && a.governor.governor != crate::cmd::governor::GovernorKind::Off {
        bail!("--governor needs --sut in-process (the governor acts on this process)");
    }
    let settings = resolve_settings(a)?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: cannot create", a.out.display()))?;

    let (engine, model_path) = a.engine.load()?;
    let library = PromptLibrary::tokenize(&engine, perf_prompts(a.preset.prompt_preset()))?;
    let mut qsl = PromptQsl::new(&library);
    let governor = GovernorHook::new(&a.governor, engine.threads())?;
    if let Some(g) = &governor {
        eprintln!("governor: {}", g.describe());
    }
    let gauges = governor
        .as_ref()
        .map(GovernorHook::gauges)
        .unwrap_or_default();
    let governor = governor.map(|g| Rc::new(RefCell::new(g)));
    let mut sut = match a.sut {
        SutArg::InProcess => RunSut::InProcess(Box::new(InProcessSut::new(
            make_decoder(&engine, settings.scenario, &library, governor.clone())?,
            &library,
            settings.scenario,
        ))),
        SutArg::Process => {
            if a.engine.backend.backend != pocketperf_runtime::backend::BackendKind::Cpu {
                bail!(
                    "--backend {}: --sut process serves the CPU backend only",
                    a.engine.backend.backend.name()
                );
            }
            let prompts = library
                .prompts
                .iter()
                .map(|p| crate::sut_process::SutPrompt {
                    text: p.text.clone(),
                    chat: true,
                    max_new_tokens: p.max_new_tokens as usize,
                })
                .collect();
            let mut cfg =
                crate::sut_process::ProcessSutConfig::for_model(&model_path, a.engine.threads)
                    .context("--sut process: locating this executable")?;
            cfg.load.ctx = library.longest_sequence().max(1);
            let p = crate::sut_process::ProcessSut::start(cfg, prompts)
                .context("--sut process: starting pocketperf serve")?;
            eprintln!("system under test: {}", p.name());
            RunSut::Process(Box::new(p))
        }
    };
    let clock = RealClock::new();
    let telemetry = crate::telemetry::recorder::ScenarioTelemetry::start(
        &a.device,
        &a.out,
        &clock,
        engine.threads(),
        &model_path,
        serde_json::json!({ "cli": a }),
        gauges,
    )?;
    let started = chrono::Utc::now();
    let result = run_scenario(sut.as_dyn(), &mut qsl, &settings, &clock)?;
    let finished = chrono::Utc::now();
    let counters = match &sut {
        RunSut::InProcess(s) => s.device_counters(),
        RunSut::Process(_) => None,
    };
    let sut_warnings = match &mut sut {
        RunSut::InProcess(_) => Vec::new(),
        RunSut::Process(p) => {
            p.shutdown();
            let mut w: Vec<String> = p.errors.iter().take(20).cloned().collect();
            if p.errors.len() > 20 {
                w.push(format!("{} more SUT errors", p.errors.len() - 20));
            }
            w.extend(p.failures.iter().map(|f| {
                format!(
                    "server failure at query {}: {}{}",
                    f.query_id,
                    f.error,
                    f.stderr_tail
                        .last()
                        .map(|l| format!(" (stderr: {l})"))
                        .unwrap_or_default()
                )
            }));
            if p.starts > 1 {
                w.push(format!("the server was restarted {} times", p.starts - 1));
            }
            w
        }
    };
    drop(sut);
    let telemetry = telemetry.finish(&result)?;
    let governor = governor.as_ref().map(|g| g.borrow());

    let settings_json = serde_json::json!({
        "cli": a,
        "config_model": CONFIG_MODEL,
        "test_settings": &settings,
    });
    let mut meta = run_meta(&engine, &model_path, &a.device, settings_json, started);
    let mut performance = performance_section(&result);
    if let (Some(p), Some(c)) = (performance.as_mut(), counters) {
        p.backend_counters = crate::cmd::backend::backend_counters(&engine, &c)
            .and_then(|c| serde_json::to_value(c).ok());
    }
    meta.finished_utc = finished;
    let file = ResultFile {
        schema_version: pocketperf_reports::schema::SCHEMA_VERSION,
        meta,
        performance,
        accuracy: None,
        energy: None,
        thermal: telemetry.thermal,
        governor: governor.as_deref().map(GovernorHook::summary_json),
        robustness: None,
        // The SUT's own reports (failed queries, refused reports), verbatim, then the
        // governor's and the telemetry's.
        warnings: result
            .performance
            .iter()
            .flat_map(|p| p.failures.iter().chain(&p.errors).cloned())
            .chain(sut_warnings)
            .chain(governor.iter().flat_map(|g| g.warnings().iter().cloned()))
            .chain(telemetry.warnings)
            .collect(),
    };
    write_outputs_with(&a.out, &file, &result, governor.as_deref())?;
    println!("{}", summary_line(&file));
    println!("results in {}", a.out.display());
    Ok(if result.is_valid() { 0 } else { 1 })
}

pub fn summary_line(f: &ResultFile) -> String {
    match &f.performance {
        Some(p) => format!(
            "{} {}: {} queries, {:.2} tokens/s, latency p90 {:.1} ms, TTFT p90 {}, TPOT p90 {}, \
             P99 latency per token {} — {}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use pocketperf_scenarios::VirtualClock;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Stamps `max_new_tokens` tokens 1 ms apart after a 10 ms prefill, on virtual time,
    /// and records the size of every batch it is handed.
    struct Recording {
        batches: Rc<RefCell<Vec<usize>>>,
        busy_until: u64,
    }

    impl Decoder for Recording {
        fn name(&self) -> &str {
            "recording"
        }
        fn decode(&mut self, jobs: &[Job<'_>], r: &mut Responder<'_>) {
            self.batches.borrow_mut().push(jobs.len());
            for j in jobs {
                let mut t = r.now_ns().max(self.busy_until) + 10_000_000;
                for _ in 0..j.max_new_tokens {
                    r.token_at(j.query.id, t);
                    t += 1_000_000;
                }
                let done = t - 1_000_000;
                r.complete_at(j.query.id, done, j.max_new_tokens as u64, None);
                self.busy_until = done;
            }
        }
    }

    fn library() -> PromptLibrary {
        let prompts: Vec<PerfPrompt> = (0..8)
            .map(|i| PerfPrompt {
                id: format!("p{i:02}"),
                text: "x".into(),
                max_new_tokens: 4 + i,
            })
            .collect();
        let tokens = (0..8).map(|i| vec![1; 3 + i]).collect();
        PromptLibrary::from_parts(prompts, tokens).unwrap()
    }

    fn run_with(scenario: Scenario) -> (Vec<usize>, TestResult) {
        let lib = library();
        let batches = Rc::new(RefCell::new(Vec::new()));
        let decoder = Box::new(Recording {
            batches: batches.clone(),
            busy_until: 0,
        });
        let mut sut = InProcessSut::new(decoder, &lib, scenario);
        let mut s = preset_settings(scenario, PresetArg::Quick);
        s.min_query_count = 12;
        s.max_query_count = 12;
        s.min_duration_ms = 0;
        let clock = VirtualClock::new();
        let r = run_test(&mut sut, &mut PromptQsl::new(&lib), &s, &clock).unwrap();
        let b = batches.borrow().clone();
        (b, r)
    }

    #[test]
    fn offline_hands_the_whole_batch_to_the_decoder_in_one_call() {
        let (batches, r) = run_with(Scenario::Offline);
        assert_eq!(batches, vec![12], "one decode call with every sample");
        let p = r.performance.as_ref().unwrap();
        assert_eq!(p.queries_completed, 12);
        // Every token stamped: the inter-token gaps are all 1 ms.
        let itl = p.inter_token.as_ref().unwrap();
        assert_eq!((itl.min, itl.max), (1_000_000, 1_000_000));
        assert_eq!(itl.count, p.total_tokens - 12);
    }

    #[test]
    fn single_stream_and_server_decode_each_query_as_it_arrives() {
        for scenario in [Scenario::SingleStream, Scenario::Server] {
            let (batches, r) = run_with(scenario);
            assert_eq!(batches, vec![1; 12], "{scenario}");
            assert_eq!(r.performance.as_ref().unwrap().queries_completed, 12);
        }
    }

    #[test]
    fn a_sample_outside_the_library_fails_its_query() {
        let lib = library();
        let batches = Rc::new(RefCell::new(Vec::new()));
        let mut sut = InProcessSut::new(
            Box::new(Recording {
                batches,
                busy_until: 0,
            }),
            &lib,
            Scenario::SingleStream,
        );
        let clock = VirtualClock::new();
        let mut s = preset_settings(Scenario::SingleStream, PresetArg::Quick);
        s.min_query_count = 3;
        s.max_query_count = 3;
        s.min_duration_ms = 0;
        // A QSL that claims more samples than the library holds.
        let mut qsl = PromptQsl { total: 100 };
        let r = run_test(&mut sut, &mut qsl, &s, &clock).unwrap();
        let p = r.performance.as_ref().unwrap();
        assert_eq!(p.num_failed + p.queries_completed, 3);
        assert!(
            p.num_failed > 0,
            "the seeded draws from 100 samples hit one past 8"
        );
        assert!(
            p.failures[0].contains("outside the prompt set of 8"),
            "{:?}",
            p.failures
        );
    }
}
