//! What a run leaves in its result directory, assembled once for every command that writes
//! one (`run`, `run --scenario dialogue`, `mmlu run`, `scenario-bench`): the result file's
//! provenance ([`run_meta`]) and `performance` section ([`performance_section`]), percentiles
//! in the result file's form ([`percentiles_ms`]), the MLPerf log header ([`log_meta`]),
//! `tokens.csv` with its `# key=value` provenance lines ([`file_header`]), the OpenCL
//! counters section that result files and `bench` rows carry ([`backend_counters`]), and the
//! summary line printed at the end (`docs/RESULTS.md`).

use crate::cmd::runtime::ResidencyArgs;
use crate::governor_hook::GovernorHook;
use crate::meta;
use crate::sut::faults::FaultLog;
use anyhow::{Context, Result};
use pocketperf_reports::schema::{
    DeviceInfo, Memory, ModelInfo, Percentiles, Performance, QuerySample, ResultFile, RunMeta,
    Warmup,
};
use pocketperf_runtime::session::Engine;
use pocketperf_scenarios::{LatencyStats, LogMeta, Scenario, TestResult};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A latency series in the result file's form (milliseconds, LoadGen percentiles).
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

/// Per-series percentiles of raw nanosecond samples ([`percentiles_ms`] of their LoadGen
/// statistics), or `None` for no samples.
pub fn percentiles_of_ns(mut v: Vec<u64>) -> Option<Percentiles> {
    v.sort_unstable();
    let s = LatencyStats::from_sorted(&v)?;
    Some(percentiles_ms(&s))
}

/// The MLPerf log header of a run that started and finished at these times.
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
                minor_faults: None,
                major_faults: None,
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
        warmup: warmup_section(r),
    })
}

/// The warm-up queries of a run (`--warmup`), times relative to the first warm-up issue.
fn warmup_section(r: &TestResult) -> Option<Warmup> {
    let origin = r.warmup.first()?.issue_ns;
    let per_query = r
        .warmup
        .iter()
        .filter_map(|w| {
            let lat = w.latency_ns()?;
            let ttft = w.ttft_ns();
            Some(QuerySample {
                id: w.id,
                sample_index: w.sample_index,
                start_s: w.issue_ns.saturating_sub(origin) as f64 / 1e9,
                latency_ms: ms(lat),
                ttft_ms: ttft.map(ms),
                tokens: w.tokens.min(u32::MAX as u64) as u32,
                tpot_ms: ttft.and_then(|t| pocketperf_scenarios::tpot_ns(lat, t, w.tokens).map(ms)),
                minor_faults: None,
                major_faults: None,
            })
        })
        .collect();
    Some(Warmup {
        queries: r.warmup.len() as u64,
        per_query,
    })
}

/// Puts each query's page faults ([`FaultLog::per_query`]: warm-up first, then the timed
/// queries by id) into the performance section.
pub fn attach_faults(p: &mut Performance, log: &FaultLog) {
    let warm = p.warmup.as_ref().map_or(0, |w| w.queries as usize);
    let put = |q: &mut QuerySample, i: usize| {
        if let Some(Some(f)) = log.per_query.get(i) {
            q.minor_faults = Some(f.minor);
            q.major_faults = Some(f.major);
        }
    };
    if let Some(w) = p.warmup.as_mut() {
        for q in &mut w.per_query {
            put(q, q.id as usize);
        }
    }
    for q in &mut p.per_query {
        put(q, warm + q.id as usize);
    }
}

/// The memory section of a run over a model loaded with `r`'s options (faults and cold
/// start are added by the runs that measure them).
pub fn memory_section(r: &ResidencyArgs) -> Memory {
    Memory {
        mlock: r.mlock,
        prefault: r.prefault,
        page_faults: None,
        cold_start: None,
    }
}

/// `mlperf_log_detail.txt` gets one `pocketperf_query_faults` line per query with faults
/// of its own (warm-up queries flagged), after the scenario engine's lines.
pub fn append_fault_lines(out: &Path, p: &Performance) -> Result<()> {
    let path = out.join("mlperf_log_detail.txt");
    let mut text = String::new();
    let warm = p
        .warmup
        .iter()
        .flat_map(|w| w.per_query.iter().map(|q| (true, q)));
    for (warmup, q) in warm.chain(p.per_query.iter().map(|q| (false, q))) {
        if let (Some(minor), Some(major)) = (q.minor_faults, q.major_faults) {
            let v = serde_json::json!({
                "id": q.id, "warmup": warmup, "minor_faults": minor, "major_faults": major,
            });
            text.push_str(&format!(
                ":::MLLOG {{\"key\": \"pocketperf_query_faults\", \"value\": {v}, \"time_ms\": 0.000000, \"namespace\": \"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {{\"is_error\": false, \"is_warning\": false, \"file\": \"pocketperf\", \"line_no\": 0, \"pid\": {pid}, \"tid\": {pid}}}}}\n",
                pid = std::process::id()
            ));
        }
    }
    if text.is_empty() {
        return Ok(());
    }
    // The log with its new lines replaces the old one whole (temporary + rename).
    let mut whole =
        std::fs::read(&path).with_context(|| format!("{}: cannot read", path.display()))?;
    whole.extend_from_slice(text.as_bytes());
    pocketperf_reports::files::replace_file(&path, &whole)
        .map_err(|(p, e)| anyhow::Error::new(e).context(format!("{}: cannot write", p.display())))
}

/// Writes `tokens.csv`: one row per generated token (index 0 is the first token), times on
/// the run clock relative to the run start, in milliseconds and nanoseconds.
pub fn write_tokens_csv(dir: &Path, r: &TestResult, header: &[(String, String)]) -> Result<()> {
    write_tokens_csv_with(dir, r, header, None)
}

/// The temporary a streamed file is written to before [`finish_csv`] renames it to `path`.
fn streaming_temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Opens `tokens.csv` in `dir` (a temporary beside it until [`finish_csv`] renames it into
/// place) with its `# key=value` provenance lines already written; the caller writes the
/// column header and the rows, then [`finish_csv`].
pub fn tokens_csv(
    dir: &Path,
    header: &[(String, String)],
) -> Result<(PathBuf, csv::Writer<BufWriter<File>>)> {
    let path = dir.join(pocketperf_reports::schema::TOKENS_FILE);
    let tmp = streaming_temporary(&path);
    let mut f = BufWriter::new(
        File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?,
    );
    for (k, v) in header {
        writeln!(f, "# {k}={}", v.replace('\n', " "))
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok((path, csv::Writer::from_writer(f)))
}

/// Flushes a CSV file written through [`tokens_csv`] and renames it into place at `path`.
pub fn finish_csv(path: &Path, w: csv::Writer<BufWriter<File>>) -> Result<()> {
    let tmp = streaming_temporary(path);
    let done = w
        .into_inner()
        .map_err(|e| anyhow::anyhow!("{}: cannot write: {}", tmp.display(), e.error()))
        .and_then(|f| {
            f.into_inner()
                .map_err(|e| anyhow::anyhow!("{}: cannot write: {}", tmp.display(), e.error()))
        })
        .and_then(|f| {
            f.sync_all()
                .with_context(|| format!("{}: cannot write", tmp.display()))
        })
        .and_then(|()| {
            std::fs::rename(&tmp, path).with_context(|| format!("{}: cannot write", path.display()))
        });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// [`write_tokens_csv`] with the governor state of each token appended (`gov_*` columns).
pub fn write_tokens_csv_with(
    dir: &Path,
    r: &TestResult,
    header: &[(String, String)],
    governor: Option<&GovernorHook>,
) -> Result<()> {
    let index = governor.map(|g| g.token_index()).unwrap_or_default();
    let (path, mut w) = tokens_csv(dir, header)?;
    let mut columns = vec!["query", "sample", "token", "t_ms", "t_ns"];
    if let Some(g) = governor {
        columns.extend(g.csv_columns());
    }
    let cant = || format!("{}: cannot write", path.display());
    w.write_record(&columns).with_context(cant)?;
    let start = r.performance.as_ref().map_or(0, |p| p.start_ns);
    for q in r.query_records() {
        let mut row = |k: usize, t: u64| {
            let rel = t.saturating_sub(start);
            let mut cells = vec![
                q.id.to_string(),
                q.sample_index.to_string(),
                k.to_string(),
                format!("{:.3}", ms(rel)),
                rel.to_string(),
            ];
            if let Some(g) = governor {
                cells.extend(g.csv_cells(&index, q.id, k));
            }
            w.write_record(&cells).with_context(cant)
        };
        if q.token_ns.is_empty() {
            if let Some(ft) = q.first_token_ns {
                row(0, ft)?;
            }
        } else {
            for (k, &t) in q.token_ns.iter().enumerate() {
                row(k, t)?;
            }
        }
    }
    finish_csv(&path, w)
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
        ("model_name".into(), r.meta.model.name.clone()),
        ("model_sha256".into(), r.meta.model.sha256.clone()),
        ("settings".into(), r.meta.settings.to_string()),
        ("started_utc".into(), r.meta.started_utc.to_rfc3339()),
    ]
    .into_iter()
    .chain(r.memory.iter().flat_map(|m| {
        [
            ("mlock".to_string(), m.mlock.to_string()),
            ("prefault".to_string(), m.prefault.to_string()),
        ]
    }))
    .collect()
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
            name: meta::model_name_in(engine.model.gguf()),
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

/// The line `run` prints for a LoadGen scenario.
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

/// Per-token device counters of a run, as bench rows and result files carry them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendCounters {
    pub backend: String,
    pub device: String,
    pub weights_import: String,
    pub attention: String,
    /// Averages over decode calls (one token each).
    pub decode: Option<pocketperf_runtime::backend::PerToken>,
    /// Averages over prefill calls (per prompt token).
    pub prefill: Option<pocketperf_runtime::backend::PerToken>,
    pub totals: pocketperf_runtime::backend::DeviceCounters,
}

/// The counters section of an OpenCL engine's run (`None` on the CPU backend).
pub fn backend_counters(
    engine: &Engine,
    c: &pocketperf_runtime::backend::DeviceCounters,
) -> Option<BackendCounters> {
    let cl = engine.backend().opencl()?;
    let s = cl.summary();
    Some(BackendCounters {
        backend: engine.backend().name().into(),
        device: s.device,
        weights_import: s.weights_import.name().into(),
        attention: s.attention.name().into(),
        decode: c.decode.per_token(),
        prefill: c.prefill.per_token(),
        totals: *c,
    })
}
