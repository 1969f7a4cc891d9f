//! The dialogue scenario (`pocketperf run --scenario dialogue`): the scripted multi-turn chats
//! of `datasets::dialogue` (`docs/DATASETS.md`) run through the model's chat template with
//! the KV cache kept across turns (only each new turn is prefilled), while telemetry samples
//! the device; the result is energy per dialogue (gross and net of the idle baseline, with a
//! 95 % interval over dialogues), J per token and tokens per J, beside per-turn latencies.
//!
//! The loop ([`run_dialogues`]) is generic over a [`DialogueSut`]: the in-process runtime
//! ([`RuntimeSut`]) on the real path, an OpenAI-compatible server ([`HttpDialogueSut`],
//! `--sut http://HOST:PORT`), or [`SimulatedSut`], a decoder whose speed is the
//! simulated handset's own, in virtual time (tests, fast checks). Telemetry rules are in
//! `docs/TELEMETRY.md`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use pocketperf_datasets::dialogue::{Dialogue, dialogues};
use pocketperf_reports::schema::ResultFile;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, Session};
use pocketperf_runtime::tokenizer::ChatMessage;
use pocketperf_scenarios::{Clock, RealClock};

use crate::cmd::run::{PresetArg, RunArgs};
use crate::governor_hook::{GovernorHook, SharedGovernor};
use crate::meta;
use crate::outputs::run_meta;
use crate::progress::{RunPlan, RunProgress};
use crate::sim::pace::Pacer;
use crate::sut::prompts::{encode_rendered, render_chat};
use crate::telemetry::faults::{SutPid, fault_gauges};
use crate::telemetry::recorder::{LabeledInterval, RunTelemetry, energy_section, energy_warnings};
use crate::telemetry::{DialogueSpan, MonotonicClock};
use crate::trace::{TraceInput, TraceQuery};
use pocketperf_scenarios::{Phase, Progress};

mod http;
mod outputs;
mod simulated;

pub use http::HttpDialogueSut;
pub use outputs::{intervals, performance_section, summary_line, write_tokens_csv};
pub use simulated::SimulatedSut;

/// Environment variable limiting the number of dialogues (quick checks, tests).
pub const ENV_DIALOGUES: &str = "POCKETPERF_DIALOGUES";
/// Environment variable setting the idle baseline length in seconds.
pub const ENV_IDLE_S: &str = "POCKETPERF_IDLE_S";
/// Environment variable capping every turn's token budget (quick checks on slow machines;
/// the figures are then not comparable with full-budget runs, and a warning says so).
pub const ENV_TURN_TOKENS: &str = "POCKETPERF_TURN_TOKENS";

/// One turn's outcome as the SUT reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutput {
    /// Tokens prefilled for this turn (the new part of the conversation).
    pub prefilled: usize,
    /// Tokens already in the KV cache and reused.
    pub reused: usize,
    /// Tokens generated.
    pub generated: usize,
    /// The reply text (appended to the conversation as the assistant message).
    pub reply: String,
}

/// A system under test for dialogues.
pub trait DialogueSut {
    /// Name for reports.
    fn name(&self) -> &str;
    /// Whether the KV cache is kept across turns.
    fn kv_reuse(&self) -> bool;
    /// Starts a new conversation (clears the KV cache).
    fn begin(&mut self) -> Result<()>;
    /// Answers the last (user) message of `history` with exactly `max_new_tokens` tokens,
    /// calling `on_token` as each token is produced.
    fn turn(
        &mut self,
        history: &[ChatMessage],
        max_new_tokens: u32,
        on_token: &mut dyn FnMut(),
    ) -> Result<TurnOutput>;
}

/// One measured turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TurnRecord {
    /// Turn index within its dialogue.
    pub turn: usize,
    /// Clock at the start of the turn (before prefill), ns.
    pub start_ns: u64,
    /// Clock at the first generated token, ns.
    pub first_token_ns: Option<u64>,
    /// Clock at the end of the turn, ns.
    pub end_ns: u64,
    /// Clock at every generated token, ns.
    #[serde(skip)]
    pub token_ns: Vec<u64>,
    /// Tokens prefilled.
    pub prefilled: usize,
    /// Tokens reused from the KV cache.
    pub reused: usize,
    /// Tokens generated.
    pub generated: usize,
}

/// One measured dialogue.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DialogueRecord {
    /// Position in the run.
    pub index: usize,
    /// Dialogue id from the dataset.
    pub id: String,
    /// Start of the first turn, ns.
    pub start_ns: u64,
    /// End of the last turn, ns.
    pub end_ns: u64,
    /// Tokens generated over all turns.
    pub tokens: u64,
    /// Turns, in order.
    pub turns: Vec<TurnRecord>,
    /// Whether every turn completed.
    pub complete: bool,
}

impl DialogueRecord {
    /// The span telemetry attributes energy to.
    pub fn span(&self) -> DialogueSpan {
        DialogueSpan {
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            tokens: self.tokens,
        }
    }
}

/// Runs `set` in order through `sut`, timestamping on `clock` (a dialogue starts after
/// `sut.begin()`); `between` runs after each dialogue with its record (progress). A failing
/// turn ends its dialogue (recorded as incomplete, with the error in the returned list); the
/// others still run.
pub fn run_dialogues(
    sut: &mut dyn DialogueSut,
    set: &[Dialogue],
    clock: &dyn Fn() -> u64,
    mut between: impl FnMut(&DialogueRecord),
) -> (Vec<DialogueRecord>, Vec<String>) {
    let mut records = Vec::with_capacity(set.len());
    let mut errors = Vec::new();
    for (index, d) in set.iter().enumerate() {
        let mut history: Vec<ChatMessage> = Vec::new();
        let mut turns = Vec::with_capacity(d.turns.len());
        let mut complete = true;
        if let Err(e) = sut.begin() {
            errors.push(format!("dialogue {} ({}): {e:#}", index, d.id));
            complete = false;
        }
        let start_ns = clock();
        for (ti, t) in d.turns.iter().enumerate() {
            if !complete {
                break;
            }
            history.push(ChatMessage::new("user", &t.user));
            let t0 = clock();
            let mut token_ns = Vec::with_capacity(t.max_new_tokens as usize);
            let res = sut.turn(&history, t.max_new_tokens, &mut || token_ns.push(clock()));
            let t1 = clock();
            match res {
                Ok(out) => {
                    history.push(ChatMessage::new("assistant", &out.reply));
                    turns.push(TurnRecord {
                        turn: ti,
                        start_ns: t0,
                        first_token_ns: token_ns.first().copied(),
                        end_ns: t1,
                        token_ns,
                        prefilled: out.prefilled,
                        reused: out.reused,
                        generated: out.generated,
                    });
                }
                Err(e) => {
                    errors.push(format!("dialogue {} ({}) turn {ti}: {e:#}", index, d.id));
                    complete = false;
                }
            }
        }
        let end_ns = turns.last().map_or(start_ns, |t| t.end_ns);
        records.push(DialogueRecord {
            index,
            id: d.id.clone(),
            start_ns,
            end_ns,
            tokens: turns.iter().map(|t| t.generated as u64).sum(),
            turns,
            complete,
        });
        if let Some(r) = records.last() {
            between(r);
        }
    }
    (records, errors)
}

/// The in-process runtime as a dialogue SUT: greedy, exactly `max_new_tokens` per turn (EOS
/// ignored), KV cache kept across the turns of a dialogue.
pub struct RuntimeSut<'e> {
    engine: &'e Engine,
    session: Session<'e>,
    /// The thermal governor called after every token (`--governor`).
    governor: Option<SharedGovernor>,
    /// On a simulated handset: each token stretched to the handset's OPP in force.
    pacer: Option<Pacer>,
    /// Turns completed so far: the `query` number of the next turn's tokens (as in
    /// `tokens.csv` and `performance.per_query`).
    turns_done: u64,
    /// The conversation text whose tokens the KV cache holds.
    rendered: String,
    /// The token ids the KV cache holds, in order.
    context: Vec<u32>,
    /// The last turn's generated ids. Its final token was sampled but never fed through the
    /// model, so the next turn prefills it first.
    last_reply: Vec<u32>,
}

impl<'e> RuntimeSut<'e> {
    /// A SUT over a session of `engine`.
    pub fn new(engine: &'e Engine, session: Session<'e>) -> Self {
        Self {
            engine,
            session,
            governor: None,
            pacer: None,
            turns_done: 0,
            rendered: String::new(),
            context: Vec::new(),
            last_reply: Vec::new(),
        }
    }

    /// Applies `governor` after every generated token: it ticks at its period, sets the
    /// kernels' thread count and sleeps the duty-cycle pause between tokens; its per-token
    /// state is keyed by (turn number over the run, token).
    pub fn with_governor(mut self, governor: Option<SharedGovernor>) -> Self {
        self.governor = governor;
        self
    }

    /// Paces every token to a simulated handset's OPP (`None`: full speed).
    pub fn set_pacer(&mut self, pacer: Option<Pacer>) {
        self.pacer = pacer;
    }

    /// Time the pacer stretched the decode by so far.
    pub fn stretched(&self) -> Duration {
        self.pacer.as_ref().map_or(Duration::ZERO, Pacer::stretched)
    }

    /// The token ids in the KV cache (prompts and replies of this dialogue so far; the last
    /// reply without its final token, which the next turn prefills).
    pub fn context(&self) -> &[u32] {
        &self.context
    }

    /// The ids the last turn generated.
    pub fn last_reply(&self) -> &[u32] {
        &self.last_reply
    }

    /// KV slots a dialogue needs: its fully rendered conversation plus every reply budget.
    pub fn tokens_needed(engine: &Engine, d: &Dialogue) -> Result<usize> {
        let mut msgs = Vec::new();
        for t in &d.turns {
            msgs.push(ChatMessage::new("user", &t.user));
            msgs.push(ChatMessage::new("assistant", ""));
        }
        let text = render_chat(&engine.tokenizer, &msgs);
        let n = encode_rendered(&engine.tokenizer, &text, true)?.len();
        Ok(n + d.total_new_tokens() as usize)
    }
}

impl DialogueSut for RuntimeSut<'_> {
    fn name(&self) -> &str {
        "pocketperf-runtime (in-process)"
    }

    fn kv_reuse(&self) -> bool {
        true
    }

    fn begin(&mut self) -> Result<()> {
        self.session.reset();
        self.rendered.clear();
        self.context.clear();
        self.last_reply.clear();
        Ok(())
    }

    fn turn(
        &mut self,
        history: &[ChatMessage],
        max_new_tokens: u32,
        on_token: &mut dyn FnMut(),
    ) -> Result<TurnOutput> {
        let full = render_chat(&self.engine.tokenizer, history);
        // Chat templates are append-only: the new turn's text follows what the cache already holds.
        let reuse = self.session.n_past() > 0 && full.starts_with(&self.rendered);
        let (suffix, reused) = if reuse {
            (&full[self.rendered.len()..], self.session.n_past())
        } else {
            self.session.reset();
            self.context.clear();
            (full.as_str(), 0)
        };
        let mut ids: Vec<u32> = Vec::new();
        if reuse {
            ids.extend(self.last_reply.last().copied());
        }
        ids.extend(encode_rendered(&self.engine.tokenizer, suffix, !reuse)?);
        let opts = GenerateOptions {
            max_new_tokens: max_new_tokens as usize,
            stop_at_eog: false,
            sampling: SamplingParams::default(),
        };
        let mut out_ids = Vec::with_capacity(max_new_tokens as usize);
        let engine = self.engine;
        let query = self.turns_done;
        let mut gov = self.governor.as_ref().map(|g| g.borrow_mut());
        if let Some(g) = gov.as_mut() {
            g.begin();
        }
        let pacer = &mut self.pacer;
        if let Some(p) = pacer.as_mut() {
            p.mark();
        }
        let stats = self.session.generate(&ids, &opts, |k, id| {
            // The stretch belongs to the token's work (its time, the governor's compute).
            if let Some(p) = pacer.as_mut() {
                p.after_token();
            }
            out_ids.push(id);
            on_token();
            if let Some(g) = gov.as_mut() {
                g.on_token(query, k, engine);
            }
            if let Some(p) = pacer.as_mut() {
                p.mark();
            }
        });
        drop(gov);
        let stats = stats?;
        self.turns_done += 1;
        let reply = self.engine.tokenizer.decode(&out_ids);
        self.rendered = full.clone();
        self.rendered.push_str(&reply);
        self.context.extend_from_slice(&ids);
        self.context
            .extend_from_slice(&out_ids[..out_ids.len().saturating_sub(1)]);
        debug_assert_eq!(self.context.len(), self.session.n_past());
        self.last_reply = out_ids;
        Ok(TurnOutput {
            prefilled: ids.len(),
            reused,
            generated: stats.generated,
            reply,
        })
    }
}

/// The dialogue set a preset runs: `quick` every dialogue once, `full` three rounds; an
/// optional limit (`POCKETPERF_DIALOGUES`) keeps the first `n`, an optional cap
/// (`POCKETPERF_TURN_TOKENS`) lowers every turn's budget to at most `cap` tokens.
pub fn dialogue_set(preset: PresetArg, limit: Option<usize>, cap: Option<u32>) -> Vec<Dialogue> {
    let rounds = match preset {
        PresetArg::Quick => 1,
        PresetArg::Full => 3,
    };
    let mut set: Vec<Dialogue> = (0..rounds).flat_map(|_| dialogues().to_vec()).collect();
    if let Some(n) = limit {
        set.truncate(n.max(1));
    }
    if let Some(cap) = cap {
        for t in set.iter_mut().flat_map(|d| d.turns.iter_mut()) {
            t.max_new_tokens = t.max_new_tokens.min(cap.max(1));
        }
    }
    set
}

/// Idle baseline length of a preset (`POCKETPERF_IDLE_S` overrides).
pub fn idle_window(preset: PresetArg) -> Duration {
    match preset {
        PresetArg::Quick => Duration::from_secs(5),
        PresetArg::Full => Duration::from_secs(30),
    }
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse::<T>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => bail!("{name}={v}: not a number"),
        },
        Err(_) => Ok(None),
    }
}

/// Flags of `run` the dialogue loop does not implement: an error naming each, so none is
/// accepted and then ignored. Over HTTP, what acts on this process's runtime (the governor,
/// a simulated handset's pacing of the decode) cannot reach the server and is refused too.
fn refuse_unsupported(a: &RunArgs, device: &crate::telemetry::DeviceSpec) -> Result<()> {
    let mut given = Vec::new();
    match a.sut {
        crate::cmd::run::SutArg::InProcess => given.extend(a.http.given()),
        crate::cmd::run::SutArg::Process => given.push("--sut process"),
        crate::cmd::run::SutArg::Http(_) => {
            if a.http.http_concurrency.is_some() {
                given.push("--http-concurrency");
            }
        }
    }
    if a.warmup.is_some() {
        given.push("--warmup");
    }
    if a.cold_start {
        given.push("--cold-start");
    }
    if !given.is_empty() {
        bail!(
            "{} not supported by the dialogue scenario (it runs in process or through one \
             HTTP connection, without warm-up or cold start)",
            given.join(", ")
        );
    }
    if let crate::cmd::run::SutArg::Http(url) = &a.sut {
        if a.governor.governor != crate::cmd::governor::GovernorKind::Off {
            bail!(
                "--governor with --sut {url}: the governor acts on this process's runtime, \
                 not on a server's"
            );
        }
        if device.handset().is_some() {
            bail!(
                "--device {} with --sut {url}: a simulated handset paces and meters this \
                 process's decode, not a server's (use --device local on the device that \
                 runs the server)",
                device.id()
            );
        }
    }
    Ok(())
}

/// The run's dialogue SUT: the runtime in this process, or a server over HTTP.
enum AnySut<'e> {
    Runtime(Box<RuntimeSut<'e>>),
    Http(Box<HttpDialogueSut<'e>>),
}

impl<'e> AnySut<'e> {
    fn as_dyn(&mut self) -> &mut (dyn DialogueSut + 'e) {
        match self {
            AnySut::Runtime(s) => s.as_mut(),
            AnySut::Http(h) => h.as_mut(),
        }
    }
}

/// `pocketperf run --scenario dialogue`.
pub fn run(a: &RunArgs) -> Result<i32> {
    let device = crate::telemetry::DeviceSpec::parse(&a.device)?;
    if a.config.is_some()
        || a.server_qps.is_some()
        || a.offline_qps.is_some()
        || a.prefill_chunk.is_some()
        || a.offline_batch.is_some()
        || a.prefix_reuse == crate::cmd::OnOff::On
    {
        bail!(
            "--config, --server-qps, --offline-qps, --prefill-chunk, --offline-batch and \
             --prefix-reuse do not apply to the dialogue scenario (it keeps each conversation's \
             KV from turn to turn)"
        );
    }
    refuse_unsupported(a, &device)?;
    crate::governor_hook::check_args(&a.governor, &device, true)?;
    let limit: Option<usize> = env_number(ENV_DIALOGUES)?;
    if limit == Some(0) {
        bail!("{ENV_DIALOGUES}=0: must be at least 1 (a run of no dialogue measures nothing)");
    }
    let idle = match env_number::<f64>(ENV_IDLE_S)? {
        Some(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s),
        Some(s) => bail!("{ENV_IDLE_S}={s}: must be a non-negative number of seconds"),
        None => idle_window(a.preset),
    };
    let cap: Option<u32> = env_number(ENV_TURN_TOKENS)?;
    let set = dialogue_set(a.preset, limit, cap);
    crate::progress::heartbeat_interval()?;
    let _lock = crate::dir_lock::DirLock::claim(&a.out, a.force)?;

    let (engine, model_path) = a.engine.load()?;
    let model_sha = meta::model_sha256(&model_path);
    let governor = GovernorHook::new_on(&a.governor, engine.threads(), &device)?;
    let mut gauges = governor
        .as_ref()
        .map(GovernorHook::gauges)
        .unwrap_or_default();
    let governor: Option<SharedGovernor> = governor.map(|g| Rc::new(RefCell::new(g)));
    let mut sut = match &a.sut {
        crate::cmd::run::SutArg::Http(url) => {
            let h = HttpDialogueSut::connect(a.http.config(url), &engine.tokenizer)
                .with_context(|| format!("--sut {url}: the server does not answer"))?;
            eprintln!("system under test: {}", h.name());
            AnySut::Http(Box::new(h))
        }
        _ => {
            let mut needed = 0;
            for d in &set {
                needed = needed.max(RuntimeSut::tokens_needed(&engine, d)?);
            }
            let session = engine.session(SessionOptions {
                max_seq_len: needed + 16,
                ..Default::default()
            })?;
            // This process's page faults are the SUT's only when it runs the model.
            gauges.extend(fault_gauges(&SutPid::new(std::process::id())));
            AnySut::Runtime(Box::new(
                RuntimeSut::new(&engine, session).with_governor(governor.clone()),
            ))
        }
    };

    let started = chrono::Utc::now();
    let mut settings = serde_json::json!({
        "cli": a,
        "dialogues": set.len(),
        "turn_token_cap": cap,
        "idle_baseline_s": idle.as_secs_f64(),
        "kv_reuse": sut.as_dyn().kv_reuse(),
        "chat_template": "chatml",
        "telemetry_period_ms": 100,
        "decode_paced_to_simulated_opp": device.handset().is_some(),
    });
    let clock = RealClock::new();
    let mono: MonotonicClock = Arc::new(move || clock.now_ns());
    let provenance = vec![
        (
            "tool".to_string(),
            format!("{} {}", meta::TOOL, meta::TOOL_VERSION),
        ),
        ("git_commit".into(), meta::GIT_COMMIT.into()),
        ("device".into(), device.id()),
        (
            "model_name".into(),
            meta::model_name_in(engine.model.gguf()),
        ),
        ("model_sha256".into(), model_sha.clone()),
        ("settings".into(), settings.to_string()),
        ("started_utc".into(), started.to_rfc3339()),
    ];
    let mut telemetry = RunTelemetry::start(
        &a.device,
        &a.out,
        mono.clone(),
        engine.threads(),
        provenance,
        gauges,
    )?;
    if let Some(g) = &governor {
        if let Some(root) = telemetry.sim_root() {
            g.borrow_mut().attach_sim(root, telemetry.sim_pace())?;
        }
        eprintln!("governor: {}", g.borrow().describe());
    }
    // On a simulated handset the decode follows the handset's clock: slower at a capped OPP.
    if let AnySut::Runtime(s) = &mut sut {
        s.set_pacer(telemetry.sim_pace().map(Pacer::new));
    }
    let idle_ns = if idle.is_zero() {
        None
    } else {
        let spinner = crate::progress::spinner("idle baseline");
        let w = telemetry.measure_idle(idle);
        spinner.finish_and_clear();
        Some(w)
    };
    let progress = RunProgress::start(RunPlan {
        label: "dialogue".into(),
        unit: "dialogues",
        min_count: set.len() as u64,
        min_duration: Duration::ZERO,
        max_duration: None,
    })?;
    progress.pass_started(Phase::Timed, Some(set.len() as u64), mono());
    let done = |r: &DialogueRecord| progress.query_done(r.tokens, 0);
    let (records, errors) = run_dialogues(sut.as_dyn(), &set, &|| mono(), done);
    progress.finish();
    let stretched = match &sut {
        AnySut::Runtime(s) => s.stretched(),
        AnySut::Http(_) => Duration::ZERO,
    };
    let mut sut_warnings = Vec::new();
    if let AnySut::Http(h) = &sut {
        let rec = h.record();
        settings["sut"] = crate::sut::http::sut_json(&h.config, &h.model, &rec);
        settings["kv_reuse"] = "up to the server".into();
        sut_warnings = rec.warnings();
    }
    let rec = telemetry.stop()?;
    let finished = chrono::Utc::now();

    let spans: Vec<DialogueSpan> = records
        .iter()
        .filter(|r| r.complete)
        .map(DialogueRecord::span)
        .collect();
    let summary = rec.report.dialogue_summary(&spans);
    let energy = energy_section(&rec.report, &summary, &spans);
    let labeled: Vec<LabeledInterval> = rec.attribute(&intervals(&records));
    let truth = rec.truth_check(&spans);
    rec.write_json(&labeled, Some(&summary), truth.as_ref())?;

    let mut meta = run_meta(&engine, &model_path, &device.id(), settings, started);
    meta.finished_utc = finished;
    if let crate::telemetry::DeviceSpec::Sim { .. } = &device {
        meta.device.name = format!("simulated {} (host {})", device.id(), meta.device.name);
    }
    let governor = governor.as_ref().map(|g| g.borrow());
    let mut warnings: Vec<String> = errors.iter().take(20).cloned().collect();
    warnings.extend(sut_warnings);
    warnings.extend(governor.iter().flat_map(|g| g.warnings().iter().cloned()));
    warnings.extend(rec.report.summary.warnings.iter().cloned());
    warnings.extend(energy_warnings(&rec.report, &summary));
    if idle_ns.is_none() {
        warnings.push("idle baseline skipped (0 s)".into());
    }
    if let Some(c) = cap {
        warnings.push(format!(
            "{ENV_TURN_TOKENS}={c}: turn budgets capped, figures not comparable with full runs"
        ));
    }
    let file = ResultFile {
        schema_version: pocketperf_reports::schema::SCHEMA_VERSION,
        meta,
        performance: performance_section(&records, &errors),
        accuracy: None,
        energy,
        thermal: rec.thermal(),
        governor: governor.as_deref().map(GovernorHook::summary_json),
        robustness: None,
        warnings,
        memory: Some(crate::outputs::memory_section(&a.engine.residency)),
    };
    pocketperf_reports::schema::write_result(&a.out, &file)?;
    write_tokens_csv(&a.out, &records, &file, governor.as_deref())?;
    let turns = records
        .iter()
        .flat_map(|d| d.turns.iter().map(move |t| (d, t)));
    let queries = turns.enumerate().map(|(i, (d, t))| TraceQuery {
        id: i as u64,
        issue_ns: t.start_ns,
        first_token_ns: t.first_token_ns,
        complete_ns: Some(t.end_ns),
        tokens: t.generated as u64,
        token_ns: &t.token_ns,
        args: serde_json::json!({ "dialogue": d.index, "dialogue_id": d.id, "turn": t.turn,
            "prefilled": t.prefilled, "reused": t.reused })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    });
    // The governor's record names turns by their index over all dialogues, as above.
    let turn_ns: Vec<&[u64]> = records
        .iter()
        .flat_map(|d| d.turns.iter().map(|t| t.token_ns.as_slice()))
        .collect();
    let actions = governor.as_deref().map_or_else(Vec::new, |g| {
        crate::trace::governor_actions(g.tokens(), 0, |q, k| {
            turn_ns.get(q as usize).and_then(|t| t.get(k)).copied()
        })
    });
    let trace = TraceInput {
        provenance: serde_json::to_value(&file.meta)?,
        query_label: "turn",
        queries: queries.collect(),
        telemetry: Some(&rec.report.output),
        actions,
        ..TraceInput::default()
    };
    crate::trace::write(&a.out, &trace)?;
    println!("{}", summary_line(&file));
    if let Some(g) = &governor {
        println!("governor: {}", g.summary_line());
    }
    if device.handset().is_some() {
        println!(
            "simulated handset clock: decode stretched by {:.2} s in all (OPP below the top)",
            stretched.as_secs_f64()
        );
    }
    if let Some(t) = truth {
        println!(
            "simulated handset ground truth: {:.3} mWh per dialogue gross, measured {:.3} \
             (mean error {:.2} %, worst dialogue {:.2} %)",
            t.truth_gross_mwh,
            t.measured_gross_mwh,
            t.rel_error_mean_gross * 100.0,
            t.max_rel_error_gross * 100.0
        );
    }
    let c = rec.report.summary.sampler_cost;
    println!(
        "telemetry: {} samples, sampler {:.3} % of a core ({:.0} µs CPU per sample)",
        c.samples, c.cpu_pct_of_core, c.mean_sample_cpu_us
    );
    println!("results in {}", a.out.display());
    // A verdict needs evidence: a run in which no turn completed is INVALID, not a pass.
    let turns = file.performance.as_ref().map_or(0, |p| p.queries);
    if turns == 0 {
        println!("INVALID: no dialogue turn completed");
        return Ok(1);
    }
    Ok(if errors.is_empty() { 0 } else { 1 })
}
