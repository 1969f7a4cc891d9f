//! `bench`: llama-bench-style throughput sweeps — every combination of model, thread count,
//! prompt-processing length (`pp`), generation length (`tg`), KV depth and batch size, each
//! row with mean ± stddev, median and min–max over the repetitions — plus the roofline (read
//! bandwidth from [`super::roofline`] against decode's bytes per token), peak memory against
//! its budget, and optionally the start-up time of `generate` and cold starts; rendered by
//! [`super::bench_out`] as Markdown, CSV, JSON, JSON lines or SQL under the output header.
//!
//! - [`sweep`] — the test lists and their checks against a model's context;
//! - [`measure`] — the timed tests of one model;
//! - [`model_info`] — the model columns (size, parameters, type mix);
//! - [`rows`] — the rows and sections every exporter reads;
//! - [`startup`] — `--startup-runs`.
//!
//! Timings are measurements, never pass/fail: the rows report what this machine did.

pub mod measure;
pub mod model_info;
pub mod rows;
pub mod startup;
pub mod sweep;

use super::bench_out::{self, OutputFormat};
use super::roofline;
use crate::cmd::backend::BackendArgs;
use crate::meta::{self, OutputHeader};
use anyhow::{Context, Result, bail};
use measure::MeasureSpec;
use model_info::ModelColumns;
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::model::ModelConfig;
use pocketperf_runtime::quant;
use pocketperf_runtime::residency::LoadOptions;
use pocketperf_runtime::session::Engine;
use rows::{BenchReport, BenchRow, MemoryReport, ModelRoofline, Roofline};
use std::path::{Path, PathBuf};
use sweep::Sweep;

/// A bench run, from `bench`'s flags (the models resolved, the lists parsed).
pub struct BenchSpec<'a> {
    /// Model files, in the order their rows are printed.
    pub models: &'a [PathBuf],
    /// Thread counts to measure (each at least 1).
    pub threads: &'a [usize],
    pub sweep: &'a Sweep,
    pub reps: usize,
    /// Run each test once, untimed, before its repetitions ([`measure::MeasureSpec::warmup`]).
    pub warmup: bool,
    /// Size of the read-bandwidth probe buffer in MiB (0 to skip the roofline probe).
    pub probe_mib: usize,
    /// Runs of the start-up timing after one warm-up run (0 to skip it; one model only).
    pub startup_runs: usize,
    /// Time cold starts too (`startup_runs` of them, at least one; see
    /// [`super::cold_start`]; one model only).
    pub cold: bool,
    /// How the model is made resident (`--mlock`, `--prefault`).
    pub load: LoadOptions,
    /// How every session's KV cache stores keys and values.
    pub kv_type: KvType,
    pub output: OutputFormat,
    /// Also write the output here.
    pub out: Option<&'a Path>,
    pub backend: &'a BackendArgs,
}

/// The output header of a run over `models`: one model's name, path and hash, or each of
/// them joined by `, ` in the order of the rows.
fn header(models: &[PathBuf], settings: serde_json::Value) -> OutputHeader {
    let first = models.first().map_or(Path::new(""), |p| p.as_path());
    let mut h = OutputHeader::new(
        rows::SCHEMA_VERSION,
        first,
        &meta::model_sha256(first),
        settings,
    );
    if models.len() > 1 {
        h.model_path = joined(models, |p| p.display().to_string());
        h.model_name = joined(models, meta::model_name);
        h.model_sha256 = joined(models, meta::model_sha256);
    }
    h
}

/// `f` of each model, joined by `, `.
fn joined(models: &[PathBuf], f: impl Fn(&Path) -> String) -> String {
    models.iter().map(|p| f(p)).collect::<Vec<_>>().join(", ")
}

/// Refuses, before anything is timed, what cannot run: start-up and cold-start timing over
/// several models, a sweep deeper than a model's context.
fn check(a: &BenchSpec) -> Result<()> {
    a.sweep.check()?;
    if a.models.len() > 1 && (a.startup_runs > 0 || a.cold) {
        bail!("--startup-runs and --cold time one model: give one --model");
    }
    if a.cold && a.kv_type != KvType::F16 {
        bail!(
            "--kv-type {} with --cold: the cold start times the default f16 cache; measure it in a run without --kv-type",
            a.kv_type
        );
    }
    for p in a.models {
        let g = GgufFile::open(p).with_context(|| format!("{}", p.display()))?;
        let cfg = ModelConfig::from_gguf(&g).with_context(|| format!("{}", p.display()))?;
        a.sweep
            .check_context(&meta::model_name_in(&g), cfg.context_length)?;
    }
    Ok(())
}

/// The roofline section: the DRAM probe per thread count, and per model a probe over a
/// buffer of the model file's size and decode's share of the DRAM bandwidth.
fn roofline_section(
    a: &BenchSpec,
    models: &[ModelColumns],
    rows: &[BenchRow],
    progress: &dyn Fn(&str),
) -> Roofline {
    progress("read-bandwidth probe");
    let big = roofline::probe_buffer(a.probe_mib << 20);
    let dram: Vec<_> = a
        .threads
        .iter()
        .map(|&t| roofline::read_bandwidth(&big, t, 5))
        .collect();
    drop(big);
    let llc = roofline::llc_bytes();
    let per_model = models
        .iter()
        .map(|m| {
            let small = roofline::probe_buffer(m.model_size_bytes as usize);
            let model_sized = a
                .threads
                .iter()
                .map(|&t| roofline::read_bandwidth(&small, t, 10))
                .collect();
            let decode = |t: usize| {
                let mine = || {
                    rows.iter().filter(move |r| {
                        r.threads == t && r.is_single_decode() && r.model.model_path == m.model_path
                    })
                };
                mine().find(|r| r.n_depth == 0).or_else(|| mine().next())
            };
            let frac = dram
                .iter()
                .filter_map(|p| {
                    decode(p.threads)
                        .map(|r| (p.threads, r.gb_per_s_median / p.gb_per_s_best.max(1e-9)))
                })
                .collect();
            ModelRoofline {
                model: m.model.clone(),
                model_file_bytes: m.model_size_bytes,
                model_fits_llc: llc.map(|l| m.model_size_bytes <= l),
                model_sized,
                decode_fraction_of_dram: frac,
            }
        })
        .collect();
    Roofline {
        llc_bytes: llc,
        dram,
        models: per_model,
    }
}

/// Measures, renders and prints one bench run (and writes it to `--out`).
pub fn bench(a: &BenchSpec) -> Result<()> {
    check(a)?;
    let threads = a.threads;
    let isa = quant::isa_from_env()?;
    let bar = crate::progress::spinner("bench");
    let progress = |m: &str| bar.set_message(m.to_string());
    let mut rows = Vec::new();
    let mut models = Vec::new();
    let mut budget = 0u64;
    let mut kv_bytes = 0u64;
    for path in a.models {
        let cols = ModelColumns::read(path)?;
        let (r, kv) = measure::model_rows(
            &MeasureSpec {
                path,
                model: &cols,
                threads,
                sweep: a.sweep,
                reps: a.reps,
                warmup: a.warmup,
                isa,
                backend: a.backend,
                load: &a.load,
                kv_type: a.kv_type,
            },
            &progress,
        )?;
        rows.extend(r);
        kv_bytes = kv_bytes.max(kv);
        budget = budget.max(cols.model_size_bytes + kv);
        models.push(cols);
    }
    let peak = roofline::peak_rss_bytes();
    let budget = budget + (64 << 20);
    let memory = MemoryReport {
        peak_rss_bytes: peak,
        model_file_bytes: models.iter().map(|m| m.model_size_bytes).max().unwrap_or(0),
        kv_bytes,
        budget_bytes: budget,
        within_budget: peak.map(|p| p <= budget),
    };
    let roof = (a.probe_mib > 0).then(|| roofline_section(a, &models, &rows, &progress));
    // Start-up and cold start time the one model (checked above).
    let first = a.models.first().map(PathBuf::as_path);
    let start = match first {
        Some(path) if a.startup_runs > 0 => {
            progress("start-up");
            let engine = Engine::load(path, threads.first().copied().unwrap_or(1), isa)?;
            Some(startup::startup(
                path,
                threads.last().copied().unwrap_or(1),
                a.startup_runs,
                &engine,
                a.kv_type,
            )?)
        }
        _ => None,
    };
    let cold = match first {
        Some(path) if a.cold => {
            progress("cold start");
            Some(super::cold_start::cold_bench(
                path,
                threads.last().copied().unwrap_or(1),
                a.startup_runs.max(1),
                &a.load,
            )?)
        }
        _ => None,
    };
    bar.finish_and_clear();
    let settings = serde_json::json!({
        "threads": threads, "pp": a.sweep.pp, "tg": a.sweep.tg, "depth": a.sweep.depth,
        "batch": a.sweep.batch, "reps": a.reps, "warmup": a.warmup, "probe_mib": a.probe_mib,
        "startup_runs": a.startup_runs, "cold": a.cold, "mlock": a.load.mlock,
        "prefault": a.load.prefault, "kv_type": a.kv_type, "isa": isa.name(), "vnni": quant::has_vnni(),
        "vbmi": quant::has_vbmi(), "backend": &a.backend, "output": a.output.name(),
        "sut": "in-process",
    });
    let report = BenchReport {
        header: header(a.models, settings),
        rows,
        roofline: roof,
        memory,
        startup: start,
        cold_start: cold,
    };
    let text = bench_out::render(&report, a.output)?;
    if let Some(p) = a.out {
        pocketperf_reports::files::replace_file(p, text.as_bytes()).map_err(|(f, e)| {
            anyhow::Error::new(e).context(format!("{}: cannot write", f.display()))
        })?;
    }
    print!("{text}");
    Ok(())
}
