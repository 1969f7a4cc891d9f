//! `pocketperf soak`: a robustness run through a child-process SUT, journaled and resumable
//! (`docs/SOAK.md`). Exit code 0 when every check passes, 1 when one fails, 2 on an error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cmd::runtime::EngineArgs;
use crate::dir_lock::DirLock;
use crate::meta;
use crate::model_store;
use crate::soak::analysis::RunStatus;
use crate::soak::config::{SoakConfig, Thresholds, Windows, format_duration, parse_duration};
use crate::soak::journal::{
    EndReason, JOURNAL_FILE, JOURNAL_SCHEMA, JOURNAL_SCHEMA_VERSION, Journal, Record, read_journal,
};
use crate::soak::probes::probe_set;
use crate::soak::report::{ROBUSTNESS_SCHEMA_VERSION, write_reports};
use crate::soak::runner::{Ending, Runner, RunnerParts};
use crate::soak::telemetry::{SoakTelemetry, TelemetrySetup};
use crate::soak::{Analysis, Verdict, signal};

#[derive(Args, Debug, serde::Serialize)]
pub struct SoakArgs {
    /// Soak time, e.g. 72h, 30m, 90s (default 72h). Time the harness is not running does not
    /// count. With --resume: a new planned total (to extend a finished soak).
    #[arg(long)]
    pub duration: Option<String>,
    /// Checkpoint period: a journal record and a fresh interim report.
    #[arg(long, default_value = "10m")]
    pub checkpoint_every: String,
    /// Probe-round period (a bare number is minutes).
    #[arg(long, default_value = "10m")]
    pub probe_every: String,
    /// Soak directory (created). One that holds anything is refused unless --force; to
    /// continue a soak, give --resume.
    #[arg(long, required_unless_present = "resume")]
    pub out: Option<PathBuf>,
    /// Replace the contents of a non-empty --out (an earlier pocketperf result or soak: every
    /// file in it, journal included, is removed first).
    #[arg(long, requires = "out", conflicts_with = "resume")]
    pub force: bool,
    /// Continue the soak in this directory after the harness was stopped or killed; the
    /// settings come from its journal.
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Kernel tier of the server (scalar, avx2, avx512, neon; default: its best).
    #[arg(long)]
    pub isa: Option<String>,
    /// KV ring size of the server, tokens [default: 2048].
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub kv: crate::cmd::runtime::KvPolicyArgs,
    /// `local` (sysfs of this machine) or `sim:<profile>` (simulated handset telemetry).
    #[arg(long, default_value = "local")]
    pub device: String,
    /// Sysfs root read by the telemetry sampler on `local`.
    #[arg(long, default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Dialogues per cycle (the first N of the scripted set).
    #[arg(long, default_value_t = 8)]
    pub dialogues: usize,
    /// Cap on the tokens generated per dialogue turn (default: the dataset's budgets).
    #[arg(long)]
    pub max_turn_tokens: Option<u32>,
    /// Greedy probe prompts per round.
    #[arg(long, default_value_t = 4)]
    pub probe_prompts: usize,
    /// Tokens generated per greedy probe.
    #[arg(long, default_value_t = 32)]
    pub probe_tokens: usize,
    /// MMLU-576 questions scored per round (0: none, no MMLU copy needed).
    #[arg(long, default_value_t = 16)]
    pub probe_mmlu: usize,
    /// MMLU copy (default: $POCKETPERF_MMLU_DIR).
    #[arg(long)]
    pub mmlu_dir: Option<PathBuf>,
    /// Server memory sampling period (0s: after every request).
    #[arg(long, default_value = "60s")]
    pub rss_every: String,
    /// Telemetry sampling period.
    #[arg(long, default_value = "10s")]
    pub telemetry_every: String,
    /// Longest silence of the server inside a request before it counts as stalled.
    #[arg(long, default_value = "120s")]
    pub query_timeout: String,
    /// Warm-up left out of the RSS fit, latency drift and stability (default: one latency window).
    #[arg(long)]
    pub warmup: Option<String>,
    /// Latency-drift window (default: 1h, or a sixth of the soak when shorter).
    #[arg(long)]
    pub latency_window: Option<String>,
    /// Stability window (default: 5m, or a twelfth of the soak when shorter).
    #[arg(long)]
    pub stability_window: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub max_crashes: u64,
    #[arg(long, default_value_t = 0)]
    pub max_timeouts: u64,
    /// RSS growth limit, MiB/hour.
    #[arg(long, default_value_t = 1.0)]
    pub max_rss_growth: f64,
    /// Major page faults of the server per hour after the warm-up, at most.
    #[arg(long, default_value_t = 1000.0)]
    pub max_major_faults: f64,
    #[arg(long, default_value_t = 0)]
    pub max_output_drift: u64,
    /// P99 TPOT growth limit, last window over the first steady one (0.10 = +10%).
    #[arg(long, default_value_t = 0.10)]
    pub max_tpot_drift: f64,
    /// Worst-window over best-window throughput, at least.
    #[arg(long, default_value_t = 0.95)]
    pub min_stability: f64,
    #[arg(long, default_value_t = 95.0)]
    pub soc_limit_c: f64,
    #[arg(long, default_value_t = 43.0)]
    pub skin_limit_c: f64,
    /// Time above a temperature limit tolerated.
    #[arg(long, default_value = "0s")]
    pub max_time_above_limit: String,
    /// Command line that starts the server (default: this binary's `serve`), e.g.
    /// `adb -s SERIAL shell /data/local/tmp/pocketperf serve`.
    #[arg(long)]
    pub serve_cmd: Option<String>,
    /// An OpenAI-compatible server to soak instead of a `pocketperf serve` child
    /// (`http://HOST:PORT`, docs/HTTP.md). The harness cannot start or restart it, so the
    /// server's own flags (--serve-cmd, --isa, --ctx, --kv-policy, --mlock, --prefault,
    /// --backend, --threads) are refused with it; --model names the local copy of the
    /// served model, whose tokenizer names the MMLU probes' letters.
    #[arg(long, conflicts_with = "resume", value_parser = crate::http::client::normalize_base)]
    pub sut: Option<String>,
    /// Fault injection for the server (tests; see docs/SOAK.md).
    #[arg(long, hide = true)]
    pub fault: Option<String>,
}

fn dur(flag: &str, v: &str) -> Result<f64> {
    Ok(parse_duration(flag, v, None)?)
}

fn opt_dur(flag: &str, v: &Option<String>) -> Result<Option<f64>> {
    v.as_deref().map(|s| dur(flag, s)).transpose()
}

fn positive(flag: &str, v: f64) -> Result<f64> {
    if v > 0.0 {
        Ok(v)
    } else {
        bail!("{flag}: must be longer than 0")
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The server's KV ring size when `--ctx` is not given, tokens.
const DEFAULT_CTX: usize = 2048;

/// The server's own flags, which cannot reach a server over HTTP: an error naming each given.
fn refuse_with_http(a: &SoakArgs) -> Result<()> {
    let mut given = Vec::new();
    for (set, flag) in [
        (a.serve_cmd.is_some(), "--serve-cmd"),
        (a.fault.is_some(), "--fault"),
        (a.isa.is_some(), "--isa"),
        (a.ctx.is_some(), "--ctx"),
        (a.kv.kv_policy.to_string() != "error", "--kv-policy"),
        (a.engine.residency.mlock, "--mlock"),
        (a.engine.residency.prefault, "--prefault"),
        (a.engine.threads != 0, "--threads"),
        (
            a.engine.backend.backend != pocketperf_runtime::backend::BackendKind::Cpu,
            "--backend",
        ),
    ] {
        if set {
            given.push(flag);
        }
    }
    if !given.is_empty() {
        bail!(
            "{} not supported with --sut http://…: they configure a server the harness \
             starts, and a server over HTTP runs with its own settings",
            given.join(", ")
        );
    }
    Ok(())
}

/// Builds and checks the settings of a new soak.
fn new_config(a: &SoakArgs) -> Result<SoakConfig> {
    let duration_s = positive(
        "--duration",
        dur("--duration", a.duration.as_deref().unwrap_or("72h"))?,
    )?;
    let n_dialogues = pocketperf_datasets::dialogues().len();
    if a.dialogues == 0 || a.dialogues > n_dialogues {
        bail!("--dialogues {}: must be 1 to {n_dialogues}", a.dialogues);
    }
    if a.probe_tokens == 0 {
        bail!("--probe-tokens: must be at least 1");
    }
    if a.max_turn_tokens == Some(0) {
        bail!("--max-turn-tokens: must be at least 1");
    }
    let ctx = a.ctx.unwrap_or(DEFAULT_CTX);
    if ctx == 0 {
        bail!("--ctx: must be at least 1");
    }
    if a.device != "local" && !a.device.starts_with("sim:") {
        bail!("--device {}: expected `local` or `sim:<profile>`", a.device);
    }
    for (flag, v) in [
        ("--max-rss-growth", a.max_rss_growth),
        ("--max-major-faults", a.max_major_faults),
        ("--max-tpot-drift", a.max_tpot_drift),
        ("--min-stability", a.min_stability),
        ("--soc-limit-c", a.soc_limit_c),
        ("--skin-limit-c", a.skin_limit_c),
    ] {
        if !v.is_finite() {
            bail!("{flag} {v}: must be a finite number");
        }
    }
    if a.sut.is_some() {
        refuse_with_http(a)?;
    }
    let model = match (&a.serve_cmd, &a.engine.model) {
        // A remote server opens the model on its side: the path is taken as given.
        (Some(_), Some(m)) => m.clone(),
        (Some(_), None) => bail!("--serve-cmd needs --model: the model's path on the serving side"),
        (None, m) => absolute(&model_store::resolve_model(m.as_deref())?),
    };
    let mmlu_dir = if a.probe_mmlu > 0 {
        let d = pocketperf_datasets::resolve_mmlu_dir(a.mmlu_dir.as_deref())
            .context("MMLU probes (or pass --probe-mmlu 0)")?;
        Some(absolute(&d))
    } else {
        None
    };
    if let Some(f) = &a.fault {
        crate::serve::FaultSpec::parse(f).context("--fault")?;
    }
    let telemetry_every_s = dur("--telemetry-every", &a.telemetry_every)?;
    // The sampler keeps its rows in memory: at most 100 000 per soak.
    if telemetry_every_s < (duration_s / 100_000.0).max(0.05) {
        bail!(
            "--telemetry-every {}: at least {} for this duration",
            a.telemetry_every,
            format_duration((duration_s / 100_000.0).max(0.05))
        );
    }
    Ok(SoakConfig {
        duration_s,
        checkpoint_every_s: positive(
            "--checkpoint-every",
            dur("--checkpoint-every", &a.checkpoint_every)?,
        )?,
        probe_every_s: positive(
            "--probe-every",
            parse_duration("--probe-every", &a.probe_every, Some(60.0))?,
        )?,
        rss_every_s: dur("--rss-every", &a.rss_every)?,
        telemetry_every_s,
        query_timeout_s: positive("--query-timeout", dur("--query-timeout", &a.query_timeout)?)?,
        model,
        threads: a.engine.threads,
        mlock: a.engine.residency.mlock,
        prefault: a.engine.residency.prefault,
        isa: a.isa.clone(),
        ctx,
        kv_policy: Some(a.kv.kv_policy.to_string()),
        dialogues: a.dialogues,
        max_turn_tokens: a.max_turn_tokens,
        probe_prompts: a.probe_prompts,
        probe_tokens: a.probe_tokens,
        probe_mmlu: a.probe_mmlu,
        mmlu_dir,
        device: a.device.clone(),
        sysfs_root: a.sysfs_root.clone(),
        serve_cmd: a.serve_cmd.clone(),
        fault: a.fault.clone(),
        thresholds: Thresholds {
            max_crashes: a.max_crashes,
            max_timeouts: a.max_timeouts,
            max_rss_growth_mib_per_h: a.max_rss_growth,
            max_major_faults_per_h: a.max_major_faults,
            max_output_drift: a.max_output_drift,
            max_tpot_drift: a.max_tpot_drift,
            min_stability: a.min_stability,
            soc_limit_c: a.soc_limit_c,
            skin_limit_c: a.skin_limit_c,
            max_time_above_limit_s: dur("--max-time-above-limit", &a.max_time_above_limit)?,
        },
        windows: Windows {
            latency_s: opt_dur("--latency-window", &a.latency_window)?,
            warmup_s: opt_dur("--warmup", &a.warmup)?,
            stability_s: opt_dur("--stability-window", &a.stability_window)?,
        },
    })
}

/// Prints a soak's verdict line, its checks and where its files are.
pub(crate) fn print_summary(dir: &Path, a: &Analysis, json: &Path, html: &Path) {
    // Without evidence (no server start, no successful turn, an incomplete run) the result
    // is not a measurement at all: INVALID, or INCOMPLETE for an interrupted run.
    let invalid = a
        .checks
        .iter()
        .any(|c| c.name == "evidence" && c.verdict == Verdict::Fail);
    println!(
        "soak {:?}: {} of {}, {} dialogue turns, {} probes in {} rounds, {} server starts, {} crashes, {} timeouts — {}",
        a.status,
        format_duration(a.soak_time_s),
        format_duration(a.planned_s),
        a.counts.queries,
        a.counts.probes,
        a.counts.probe_rounds,
        a.counts.sut_starts,
        a.counts.crashes,
        a.counts.timeouts,
        match (invalid, a.status, a.passed) {
            (true, RunStatus::Interrupted, _) => "INCOMPLETE",
            (true, _, _) => "INVALID",
            (false, _, true) => "PASS",
            (false, _, false) => "FAIL",
        }
    );
    for c in &a.checks {
        let v = match c.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skipped => "skip",
        };
        println!("  {:<14} {v}  {}", c.name, c.detail);
    }
    println!("journal {}", dir.join(JOURNAL_FILE).display());
    println!("report  {} {}", json.display(), html.display());
}

pub fn soak(a: &SoakArgs) -> Result<i32> {
    signal::install().context("installing the SIGINT/SIGTERM handler")?;
    // `_lock` is held until the soak's last report is written: one writer per soak directory.
    let (dir, cfg, journal, previous, segment, _lock, http) = match (&a.resume, &a.out) {
        (Some(dir), _) => {
            let path = dir.join(JOURNAL_FILE);
            if !path.is_file() {
                bail!("--resume {}: no {JOURNAL_FILE} there", dir.display());
            }
            // Before the journal is read: a soak still running there is refused untouched.
            let lock =
                DirLock::acquire(dir).with_context(|| format!("--resume {}", dir.display()))?;
            let contents = read_journal(&path)?;
            let mut cfg = contents.config().context("the journal has no header")?;
            let new_duration = opt_dur("--duration", &a.duration)?;
            if let Some(d) = new_duration {
                cfg.duration_s = positive("--duration", d)?;
            }
            if matches!(
                contents.last(),
                Some(Record::End {
                    reason: EndReason::Completed,
                    ..
                })
            ) && contents.last_t_s() >= cfg.duration_s
            {
                eprintln!(
                    "the soak in {} is complete; rewriting its report (give a longer --duration to extend it)",
                    dir.display()
                );
                let (analysis, json, html) = write_reports(dir)?;
                print_summary(dir, &analysis, &json, &html);
                return Ok(if analysis.passed { 0 } else { 1 });
            }
            let recorded = contents
                .provenance()
                .and_then(|p| p.get("model_sha256"))
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string();
            let now = meta::model_sha256(&cfg.model);
            if recorded != now {
                bail!(
                    "--resume {}: the model {} has changed since the soak started (sha256 {now}, journal {recorded})",
                    dir.display(),
                    cfg.model.display()
                );
            }
            let segment = contents
                .entries
                .iter()
                .filter(|e| matches!(e.record, Record::Segment { .. }))
                .count() as u32;
            let mut journal = Journal::reopen(dir, &contents)?;
            journal.append(
                contents.last_t_s(),
                Record::Segment {
                    segment,
                    resumed: true,
                    utc: meta::now_utc(),
                    harness_pid: std::process::id(),
                    dropped_tail_bytes: contents.torn_tail_bytes,
                    duration_s: new_duration.map(|_| cfg.duration_s),
                },
            )?;
            let read_back = read_journal(&path)?;
            eprintln!(
                "resuming the soak in {} at {} of {} ({} records{})",
                dir.display(),
                format_duration(contents.last_t_s()),
                format_duration(cfg.duration_s),
                read_back.entries.len(),
                if contents.torn_tail_bytes > 0 {
                    format!(
                        ", a torn last record of {} bytes dropped",
                        contents.torn_tail_bytes
                    )
                } else {
                    String::new()
                }
            );
            // A soak of a server over HTTP stays one (its endpoint is in the header).
            let http = contents
                .provenance()
                .and_then(|p| p.pointer("/settings/sut/endpoint"))
                .and_then(|v| v.as_str())
                .map(str::to_string);
            (
                dir.clone(),
                cfg,
                journal,
                read_back.entries,
                segment,
                lock,
                http,
            )
        }
        (None, Some(dir)) => {
            let cfg = new_config(a)?;
            // Fail on a bad probe set before anything is written.
            probe_set(cfg.probe_prompts, cfg.probe_mmlu, cfg.mmlu_dir.as_deref())?;
            let lock = DirLock::claim(dir, a.force)
                .context("a new soak needs a fresh --out (continue a soak with --resume DIR)")?;
            let mut journal = Journal::create(dir)?;
            let sha = meta::model_sha256(&cfg.model);
            let mut settings = serde_json::to_value(&cfg)?;
            if let Some(url) = &a.sut {
                settings["sut"] = serde_json::json!({"kind": "http", "endpoint": url});
            }
            let mut header =
                meta::OutputHeader::new(ROBUSTNESS_SCHEMA_VERSION, &cfg.model, &sha, settings);
            header.device.id = cfg.device.clone();
            journal.append(
                0.0,
                Record::Header {
                    schema: JOURNAL_SCHEMA.into(),
                    schema_version: JOURNAL_SCHEMA_VERSION,
                    provenance: serde_json::to_value(&header)?,
                    config: Box::new(cfg.clone()),
                },
            )?;
            journal.append(
                0.0,
                Record::Segment {
                    segment: 0,
                    resumed: false,
                    utc: meta::now_utc(),
                    harness_pid: std::process::id(),
                    dropped_tail_bytes: 0,
                    duration_s: None,
                },
            )?;
            let previous = read_journal(&dir.join(JOURNAL_FILE))?.entries;
            (dir.clone(), cfg, journal, previous, 0, lock, a.sut.clone())
        }
        (None, None) => bail!("give --out DIR for a new soak or --resume DIR to continue one"),
    };
    let probes = probe_set(cfg.probe_prompts, cfg.probe_mmlu, cfg.mmlu_dir.as_deref())?;
    let dialogues = pocketperf_datasets::dialogues()
        .iter()
        .take(cfg.dialogues)
        .cloned()
        .collect();
    let mut runner = Runner::new(RunnerParts {
        cfg: cfg.clone(),
        dir: dir.clone(),
        journal,
        previous,
        dialogues,
        probes,
        signals: Arc::new(signal::count),
        on_checkpoint: Box::new(|d: &Path| {
            if let Err(e) = write_reports(d) {
                eprintln!("warning: interim report in {}: {e:#}", d.display());
            }
        }),
        http,
    })?;
    let meta_lines = vec![
        ("soak_segment".to_string(), segment.to_string()),
        ("git_commit".into(), meta::GIT_COMMIT.into()),
        ("device".into(), cfg.device.clone()),
        ("model".into(), cfg.model.display().to_string()),
        ("started_utc".into(), meta::now_utc()),
    ];
    let telemetry = SoakTelemetry::start(TelemetrySetup {
        device: cfg.device.clone(),
        sysfs_root: cfg.sysfs_root.clone(),
        period: std::time::Duration::from_secs_f64(cfg.telemetry_every_s),
        csv: dir.join(format!("telemetry-{segment}.csv")),
        metadata: meta_lines,
        journal: runner.journal(),
        clock: runner.clock(),
        in_flight: runner.in_flight(),
    })?;
    match &telemetry {
        Some(t) => eprintln!("{}", t.summary),
        None => eprintln!(
            "telemetry: no temperature sensor or energy meter on {} (the thermal check is skipped)",
            cfg.device
        ),
    }
    runner.set_telemetry(telemetry);
    let ending = match runner.run() {
        Ok(e) => e,
        Err(e) => {
            let _ = runner.end(&Ending {
                reason: EndReason::Aborted,
                detail: format!("{e:#}"),
            });
            let _ = write_reports(&dir);
            return Err(e);
        }
    };
    runner.end(&ending)?;
    let (analysis, json, html) = write_reports(&dir)?;
    print_summary(&dir, &analysis, &json, &html);
    if ending.reason == EndReason::Aborted {
        eprintln!("soak aborted: {}", ending.detail);
    }
    Ok(if analysis.passed { 0 } else { 1 })
}
