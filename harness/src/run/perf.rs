//! One LoadGen scenario run (`pocketperf run --scenario single-stream|offline|server`), step
//! by step: the settings ([`crate::cmd::run::resolve_settings`]), the model and the prompt
//! library tokenized once ([`crate::sut::prompts`]), the governor hook, the system under test
//! ([`crate::sut::in_process`]; with `--sut process`, [`crate::sut::process`]; with
//! `--sut http://…`, [`crate::sut::http`]), telemetry
//! on the run's clock, [`run_scenario`] (the scenario engine), then the result directory
//! ([`crate::outputs`]).

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use pocketperf_datasets::perf::perf_prompts;
use pocketperf_reports::schema::ResultFile;
use pocketperf_scenarios::{
    Clock, InvalidCause, QuerySampleLibrary, RealClock, Responder, Scenario, SystemUnderTest,
    TestResult, TestSettings, run_test_observed,
};

use crate::cmd::OnOff;
use crate::cmd::governor::GovernorKind;
use crate::cmd::run::{CONFIG_MODEL, RunArgs, ScenarioArg, SutArg, resolve_settings};
use crate::governor_hook::GovernorHook;
use crate::outputs::{performance_section, run_meta, summary_line, write_outputs_with};
use crate::sut::faults::{FaultMeter, FaultSource};
use crate::sut::http::{HttpPrompt, HttpSut};
use crate::sut::in_process::{
    DEFAULT_PREFILL_CHUNK, InProcessSut, OFFLINE_BATCH, OfflineBatching, make_decoder,
};
use crate::sut::process::{ProcessSut, ProcessSutConfig, SutPrompt};
use crate::sut::prompts::{PromptLibrary, PromptQsl};
use crate::telemetry::faults::{FaultCounts, SutPid, fault_gauges, process_faults, self_faults};
use crate::tools::cold_start;
use pocketperf_reports::schema::{ColdStart, PageFaults};
use pocketperf_scenarios::Query;

/// Runs the scenario engine after `warmup` untimed queries, showing its progress
/// ([`crate::progress::RunProgress`]: a bar on a terminal, heartbeat lines elsewhere).
pub fn run_scenario(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    clock: &dyn Clock,
    warmup: u64,
) -> Result<TestResult> {
    let ms = |ms: u64| std::time::Duration::from_millis(ms);
    let progress = crate::progress::RunProgress::start(crate::progress::RunPlan {
        label: settings.scenario.as_str().to_string(),
        unit: "queries",
        min_count: settings.min_query_count,
        min_duration: ms(settings.min_duration_ms),
        max_duration: (settings.max_duration_ms > 0).then(|| ms(settings.max_duration_ms)),
    })?;
    let result = run_test_observed(sut, qsl, settings, clock, warmup, &progress);
    progress.finish();
    Ok(result?)
}

/// The run's system under test, kept concrete so its own record (accelerator counters,
/// server failures) is read after the run.
enum RunSut<'e, 'l> {
    InProcess(Box<InProcessSut<'e, 'l>>),
    Process(Box<ProcessSut>),
    Http(Box<HttpSut>),
}

impl RunSut<'_, '_> {
    fn as_dyn(&mut self) -> &mut dyn SystemUnderTest {
        match self {
            RunSut::InProcess(s) => s.as_mut(),
            RunSut::Process(s) => s.as_mut(),
            RunSut::Http(s) => s.as_mut(),
        }
    }

    /// `self` or `child`, as result.json names the process whose faults are counted.
    fn process(&self) -> &'static str {
        match self {
            RunSut::InProcess(_) => "self",
            RunSut::Process(_) => "child",
            RunSut::Http(_) => "server",
        }
    }
}

impl SystemUnderTest for RunSut<'_, '_> {
    fn name(&self) -> &str {
        match self {
            RunSut::InProcess(s) => s.name(),
            RunSut::Process(s) => s.name(),
            RunSut::Http(s) => s.name(),
        }
    }
    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        self.as_dyn().issue_queries(queries, responder);
    }
    fn flush_queries(&mut self, responder: &mut Responder<'_>) {
        self.as_dyn().flush_queries(responder);
    }
    fn poll(&mut self, responder: &mut Responder<'_>) {
        self.as_dyn().poll(responder);
    }
}

impl FaultSource for RunSut<'_, '_> {
    fn faults_now(&mut self) -> Option<(u32, FaultCounts)> {
        match self {
            RunSut::InProcess(_) => Some((std::process::id(), self_faults()?)),
            RunSut::Process(p) => {
                let pid = p.client()?.pid();
                Some((pid, process_faults(pid)?))
            }
            // Another process, perhaps on another machine: not ours to count.
            RunSut::Http(_) => None,
        }
    }
}

/// `--prefill-chunk` and `--offline-batch` apply to Offline's batched decoder only: the
/// in-process SUT (on either backend); `--prefix-reuse on` to the in-process SUT.
fn check_decoder_flags(a: &RunArgs) -> Result<()> {
    for (flag, given) in [
        ("--prefill-chunk", a.prefill_chunk.is_some()),
        ("--offline-batch", a.offline_batch.is_some()),
    ] {
        if !given {
            continue;
        }
        if a.scenario != ScenarioArg::Offline {
            bail!("{flag} applies to --scenario offline (its batched decoder) only");
        }
        if a.sut != SutArg::InProcess {
            bail!("{flag} needs --sut in-process (the batched decoder runs in this process)");
        }
    }
    if a.prefix_reuse == OnOff::On && a.sut != SutArg::InProcess {
        bail!(
            "--prefix-reuse on needs --sut in-process (a server keeps its own prompt cache: \
             serve --http --prefix-reuse)"
        );
    }
    Ok(())
}

/// `pocketperf run --scenario single-stream|offline|server`.
pub fn run(a: &RunArgs) -> Result<i32> {
    let device = crate::telemetry::DeviceSpec::parse(&a.device)?;
    if a.scenario == ScenarioArg::Dialogue {
        bail!("--scenario dialogue runs through crate::run::dialogue");
    }
    if a.sut != SutArg::InProcess && a.governor.governor != GovernorKind::Off {
        bail!("--governor needs --sut in-process (the governor acts on this process)");
    }
    let http_flags = a.http.given();
    if !matches!(a.sut, SutArg::Http(_)) && !http_flags.is_empty() {
        bail!("{} need --sut http://HOST:PORT", http_flags.join(", "));
    }
    let settings = resolve_settings(a)?;
    check_decoder_flags(a)?;
    crate::progress::heartbeat_interval()?;
    crate::governor_hook::check_args(&a.governor, &device, false)?;
    let _lock = crate::dir_lock::DirLock::claim(&a.out, a.force)?;

    let (engine, model_path) = a.engine.load()?;
    // `--cold-start`: the first query reads the weights from the file, so no SUT copies them
    // out of it when its decoder is built (that would read them before the eviction).
    let copies = !a.cold_start;
    let engine = if copies {
        engine
    } else {
        engine.without_copies()
    };
    let library = PromptLibrary::tokenize(&engine, perf_prompts(a.preset.prompt_preset()))?;
    let mut qsl = PromptQsl::new(&library);
    let governor = GovernorHook::new_on(&a.governor, engine.threads(), &device)?;
    let gauges = governor
        .as_ref()
        .map(GovernorHook::gauges)
        .unwrap_or_default();
    let governor = governor.map(|g| Rc::new(RefCell::new(g)));
    let mut sut = match &a.sut {
        SutArg::InProcess => RunSut::InProcess(Box::new(InProcessSut::new(
            make_decoder(
                &engine,
                settings.scenario,
                &library,
                governor.clone(),
                OfflineBatching {
                    slots: a.offline_batch.map_or(OFFLINE_BATCH, |n| n as usize),
                    prefill_chunk: a
                        .prefill_chunk
                        .map_or(DEFAULT_PREFILL_CHUNK, |c| c as usize),
                },
                a.prefix_reuse == OnOff::On,
            )?,
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
                .prompts()
                .iter()
                .map(|p| SutPrompt {
                    text: p.text.clone(),
                    chat: true,
                    max_new_tokens: p.max_new_tokens as usize,
                })
                .collect();
            let mut cfg = ProcessSutConfig::for_model(&model_path, a.engine.threads)
                .context("--sut process: locating this executable")?;
            cfg.load.ctx = library.longest_sequence().max(1);
            cfg.load.mlock = a.engine.residency.mlock;
            cfg.load.prefault = a.engine.residency.prefault;
            cfg.load.copies = copies;
            let p = ProcessSut::start(cfg, prompts)
                .context("--sut process: starting pocketperf serve")?;
            eprintln!("system under test: {}", p.name());
            RunSut::Process(Box::new(p))
        }
        SutArg::Http(url) => {
            let prompts = library
                .prompts()
                .iter()
                .zip(library.tokens())
                .map(|(p, t)| HttpPrompt {
                    text: p.text.clone(),
                    tokens: t.clone(),
                    max_new_tokens: p.max_new_tokens as usize,
                })
                .collect();
            let h = HttpSut::start(a.http.config(url), settings.scenario, prompts)
                .with_context(|| format!("--sut {url}: the server does not answer"))?;
            eprintln!("system under test: {}", h.name());
            RunSut::Http(Box::new(h))
        }
    };
    // The SUT's page faults as telemetry columns (`faults.*`), following its process.
    let sut_pid = SutPid::default();
    let mut gauges = gauges;
    if let Some((pid, _)) = sut.faults_now() {
        sut_pid.set(pid);
        gauges.extend(fault_gauges(&sut_pid));
    }
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
    if let Some(g) = &governor {
        if let Some(root) = telemetry.sim_root() {
            let mut g = g.borrow_mut();
            g.attach_sim(root, None)?;
            // Not paced (no caps here), but the busy share is measured on the handset's terms.
            if let Some(p) = telemetry.sim_pace() {
                g.count_cpu_with(p);
            }
        }
        eprintln!("governor: {}", g.borrow().describe());
    }
    // `--cold-start`: the file leaves the page cache once everything before the first query
    // (load, tokenizing, the model's checksum) is done. Pages the SUT has mapped stay: all
    // of them after --prefault or --mlock, which is what those options are for.
    let eviction = if a.cold_start {
        Some(cold_start::evict(&model_path)?)
    } else {
        None
    };
    let after_first = std::cell::Cell::new(None);
    let started = chrono::Utc::now();
    let process = sut.process();
    let mut meter = FaultMeter::new(&mut sut).publish_pid(sut_pid);
    if eviction.is_some() {
        meter = meter.after_first_query(|| {
            after_first.set(cold_start::file_fraction(&model_path).ok());
        });
    }
    let result = run_scenario(&mut meter, &mut qsl, &settings, &clock, a.warmup_queries())?;
    let faults = meter.finish();
    let finished = chrono::Utc::now();
    let counters = match &sut {
        RunSut::InProcess(s) => s.device_counters(),
        RunSut::Process(_) | RunSut::Http(_) => None,
    };
    let mut sut_json = serde_json::json!({ "kind": a.sut.kind() });
    let sut_warnings = match &mut sut {
        RunSut::InProcess(s) => {
            sut_json["decoder"] = s.decoder_json();
            Vec::new()
        }
        RunSut::Http(h) => {
            h.shutdown();
            let rec = h.record();
            sut_json = crate::sut::http::sut_json(&h.config, &h.model, &rec);
            rec.warnings()
        }
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
        "sut": sut_json,
    });
    let mut meta = run_meta(&engine, &model_path, &a.device, settings_json, started);
    let mut performance = performance_section(&result);
    if let (Some(p), Some(c)) = (performance.as_mut(), counters) {
        p.backend_counters = crate::outputs::backend_counters(&engine, &c)
            .and_then(|c| serde_json::to_value(c).ok());
    }
    if let Some(p) = performance.as_mut() {
        crate::outputs::attach_faults(p, &faults);
    }
    let mut memory = crate::outputs::memory_section(&a.engine.residency);
    memory.page_faults = faults.total.map(|t| PageFaults {
        process: process.to_string(),
        pid: faults.pid,
        minor: t.minor,
        major: t.major,
    });
    if let Some(e) = eviction {
        // The first query the SUT ran: the first warm-up query, or the first timed one.
        let first = performance.as_ref().and_then(|p| {
            p.warmup
                .as_ref()
                .and_then(|w| w.per_query.first())
                .or(p.per_query.iter().find(|q| q.id == 0))
        });
        memory.cold_start = Some(ColdStart {
            resident_before_eviction: e.before,
            resident_after_eviction: e.after,
            resident_after_first_query: after_first.get(),
            resident_at_end: cold_start::file_fraction(&model_path)?,
            first_query_latency_ms: first.map(|q| q.latency_ms),
            first_query_ttft_ms: first.and_then(|q| q.ttft_ms),
            first_query_major_faults: first.and_then(|q| q.major_faults),
        });
    }
    meta.finished_utc = finished;
    let file = ResultFile {
        schema_version: pocketperf_reports::schema::SCHEMA_VERSION,
        meta,
        performance,
        accuracy: None,
        energy: telemetry.energy,
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
        memory: Some(memory),
    };
    write_outputs_with(&a.out, &file, &result, governor.as_deref())?;
    if let Some(p) = &file.performance {
        crate::outputs::append_fault_lines(&a.out, p)?;
    }
    let trace = crate::trace::scenario_input(
        &result,
        &faults,
        Some(&telemetry.recording.report.output),
        governor.as_deref(),
        serde_json::to_value(&file.meta)?,
    );
    crate::trace::write(&a.out, &trace)?;
    println!("{}", summary_line(&file));
    let completed = file.performance.as_ref().map_or(0, |p| p.queries);
    if let Some(hint) = offline_qps_hint(&settings, &result.invalid_causes, completed) {
        println!("{hint}");
    }
    println!("results in {}", a.out.display());
    // A verdict needs evidence: whatever the scenario's own rules say, a run in which no
    // query completed is INVALID (failed queries make it INVALID through the engine).
    if completed == 0 {
        println!("INVALID: no query completed");
        return Ok(1);
    }
    Ok(if result.is_valid() { 0 } else { 1 })
}

/// For an Offline run INVALID because its one query ended inside the minimum duration: the
/// `--offline-qps` that sizes a batch filling it. `queries` samples took `actual` seconds, so
/// at that rate `1.1 × ceil(rate) × min_duration` samples last about 1.1 × the minimum.
fn offline_qps_hint(
    settings: &TestSettings,
    causes: &[InvalidCause],
    queries: u64,
) -> Option<String> {
    if settings.scenario != Scenario::Offline || queries == 0 {
        return None;
    }
    causes.iter().find_map(|c| match c {
        InvalidCause::MinDurationNotMet {
            required_ns,
            actual_ns,
        } if *actual_ns > 0 => {
            let rate = queries as f64 / (*actual_ns as f64 / 1e9);
            let qps = if rate >= 1.0 {
                rate.ceil()
            } else {
                (rate * 100.0).ceil() / 100.0
            };
            Some(format!(
                "hint: the {queries} Offline samples took {:.2} s, under the minimum of {:.2} s; \
                 --offline-qps {qps} sizes a batch that fills it",
                *actual_ns as f64 / 1e9,
                *required_ns as f64 / 1e9,
            ))
        }
        _ => None,
    })
}
