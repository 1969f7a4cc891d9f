//! The farm over nights as one page: `pocketperf farm history RESULTS/` reads every dated
//! night directory of a results root and writes `history.csv` and a self-contained
//! `history.html`: per device, step and metric, each night's value with its 95% interval,
//! the verdict of that night and the baseline night it was gated against.
//!
//! Values and intervals come from each step's `result.json` through the reports' own figures
//! ([`pocketperf_reports::render::metric_rows`]: bootstrap intervals of the medians); verdicts
//! and baselines from the night's `farm.json` (its `gates`, their `drift` checks and the
//! steps' statuses). A night without a readable `farm.json` is listed with its path and the
//! reason, never fatal; a results root without any night directory is an error.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pocketperf_reports::plots::{IntervalPoint, interval_chart};
use pocketperf_reports::render::html_helpers::{figure, page_end, page_start};
use pocketperf_reports::render::{csv_after_comments, escape_html, metric_rows, num};
use pocketperf_reports::schema;
use serde::Deserialize;

use super::FARM_FILE;

/// Version of the `history.csv` layout.
pub const HISTORY_SCHEMA_VERSION: u32 = 1;
/// The CSV written into the output directory.
pub const HISTORY_CSV: &str = "history.csv";
/// The page written into the output directory.
pub const HISTORY_HTML: &str = "history.html";

/// Metrics of the history when none are named: the figures that carry an interval and that
/// the nightly gate and drift check judge, plus energy per token when a meter was present.
pub const DEFAULT_METRICS: &[&str] = &[
    "tpot_p50",
    "ttft_p50",
    "latency_p50",
    "query_tokens_per_s_median",
    "j_per_token",
];

/// Verdicts that mark a night's figure as failing.
const FAILING: &[&str] = &["regression", "drift", "error", "invalid", "failed"];

/// One night's figure for one device, step and metric.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    /// Night (dated directory name).
    pub night: String,
    /// Device.
    pub device: String,
    /// Step.
    pub step: String,
    /// Metric, as the reports name it (`tpot_p50`, …).
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// Value.
    pub value: f64,
    /// 95% interval, when the figure has one.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    /// `pass`, `regression`, `drift` (this metric beyond the rolling window), `error`,
    /// `skipped` (nothing to gate against), `invalid` or `failed` (the step's own outcome).
    pub verdict: String,
    /// The night the gate used as baseline, when there was one.
    pub baseline: Option<String>,
}

impl HistoryRow {
    /// Whether the verdict marks a failure.
    pub fn failing(&self) -> bool {
        FAILING.contains(&self.verdict.as_str())
    }
}

/// A night, or a step of one, that gave no figures, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// The directory or file concerned.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// Everything read from a results root.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Night directories found, in order.
    pub nights: Vec<String>,
    /// Figures, by night, then device, step and metric order.
    pub rows: Vec<HistoryRow>,
    /// Nights and steps without figures.
    pub unreadable: Vec<Unreadable>,
    /// Metrics asked for.
    pub metrics: Vec<String>,
}

#[derive(Deserialize)]
struct FarmFile {
    #[serde(default)]
    devices: Vec<FarmDevice>,
    #[serde(default)]
    gates: Vec<FarmGate>,
}

#[derive(Deserialize)]
struct FarmDevice {
    name: String,
    #[serde(default)]
    steps: Vec<FarmStep>,
}

#[derive(Deserialize)]
struct FarmStep {
    name: String,
    status: String,
    dir: Option<String>,
}

#[derive(Deserialize)]
struct FarmGate {
    device: String,
    step: String,
    status: String,
    baseline: Option<String>,
    #[serde(default)]
    drift: Vec<FarmDrift>,
}

#[derive(Deserialize)]
struct FarmDrift {
    metric: String,
    status: String,
}

/// The figure of [`metric_rows`] that a drift check of the farm ([`super::nights`]) judges.
fn drift_figure(drift_metric: &str) -> Option<&'static str> {
    match drift_metric {
        "performance.latency_ms" => Some("latency_p50"),
        "performance.ttft_ms" => Some("ttft_p50"),
        "performance.tpot_ms" => Some("tpot_p50"),
        "performance.tokens_per_s" => Some("query_tokens_per_s_median"),
        _ => None,
    }
}

/// The night of a gate's baseline path (`../<night>/<device>/<step>`).
fn baseline_night(path: &str) -> Option<String> {
    path.split('/')
        .find(|c| !c.is_empty() && *c != "..")
        .map(str::to_string)
}

/// The night directories of `results`: its subdirectories whose name is a valid directory
/// component of the farm (hidden entries are not nights), sorted by name (= by time).
fn night_dirs(results: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(results)
        .with_context(|| format!("{}: cannot read the results directory", results.display()))?;
    let mut nights: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| super::names::valid_name(n))
        .collect();
    nights.sort();
    Ok(nights)
}

/// Reads every night of `results`. `metrics` names figures of the run reports (`tpot_p50`,
/// `j_per_token`, …); `None` is [`DEFAULT_METRICS`], of which those no night has are left
/// out. A named metric that no night has is an error, as is a root with no night.
pub fn collect(results: &Path, metrics: Option<&[String]>) -> Result<History> {
    let named = metrics.is_some();
    let metrics: Vec<String> = match metrics {
        Some(m) => m.to_vec(),
        None => DEFAULT_METRICS.iter().map(|m| m.to_string()).collect(),
    };
    let metrics = metrics.as_slice();
    let nights = night_dirs(results)?;
    if nights.is_empty() {
        bail!(
            "{}: no night directories (a farm results root holds one dated directory per run)",
            results.display()
        );
    }
    let mut h = History {
        nights: nights.clone(),
        metrics: metrics.to_vec(),
        ..History::default()
    };
    for night in &nights {
        read_night(results, night, metrics, &mut h);
    }
    if !named {
        h.metrics.retain(|m| h.rows.iter().any(|r| &r.metric == m));
    }
    for m in metrics.iter().filter(|_| named) {
        if !h.rows.iter().any(|r| &r.metric == m) {
            bail!(
                "metric `{m}`: no step of any night in {} has it",
                results.display()
            );
        }
    }
    Ok(h)
}

fn read_night(results: &Path, night: &str, metrics: &[String], h: &mut History) {
    let dir = results.join(night);
    let path = dir.join(FARM_FILE);
    let farm: FarmFile = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(f) => f,
        Err(reason) => {
            h.unreadable.push(Unreadable { path, reason });
            return;
        }
    };
    for device in &farm.devices {
        for step in &device.steps {
            let gate = farm
                .gates
                .iter()
                .find(|g| g.device == device.name && g.step == step.name);
            let Some(rel) = &step.dir else {
                h.unreadable.push(Unreadable {
                    path: dir.join(&device.name).join(&step.name),
                    reason: format!("no result (step {})", step.status),
                });
                continue;
            };
            let result = match schema::load_result(dir.join(rel)) {
                Ok(r) => r,
                Err(e) => {
                    h.unreadable.push(Unreadable {
                        path: dir.join(rel),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            let figures = metric_rows(&result);
            for m in metrics {
                let Some(f) = figures.iter().find(|f| &f.metric == m) else {
                    continue;
                };
                let drifted = gate.is_some_and(|g| {
                    g.drift.iter().any(|d| {
                        d.status == "regression" && drift_figure(&d.metric) == Some(m.as_str())
                    })
                });
                let verdict = match (step.status.as_str(), gate) {
                    ("ok", _) if drifted => "drift".to_string(),
                    ("ok", Some(g)) => g.status.clone(),
                    ("ok", None) => "skipped".to_string(),
                    (other, _) => other.to_string(),
                };
                h.rows.push(HistoryRow {
                    night: night.to_string(),
                    device: device.name.clone(),
                    step: step.name.clone(),
                    metric: m.clone(),
                    unit: f.unit.to_string(),
                    value: f.value,
                    lo: f.lo,
                    hi: f.hi,
                    verdict,
                    baseline: gate.and_then(|g| g.baseline.as_deref().and_then(baseline_night)),
                });
            }
        }
    }
}

/// The `# key=value` lines that open `history.csv` (the header every output carries; the
/// history spans many runs, so it names the results root and its nights instead of one
/// run's device and model).
fn header(h: &History, results: &Path) -> Vec<(String, String)> {
    vec![
        ("schema_version".into(), HISTORY_SCHEMA_VERSION.to_string()),
        (
            "tool".into(),
            format!("{} {}", crate::meta::TOOL, crate::meta::TOOL_VERSION),
        ),
        ("git_commit".into(), crate::meta::GIT_COMMIT.to_string()),
        ("results".into(), results.display().to_string()),
        ("nights".into(), h.nights.len().to_string()),
        ("metrics".into(), h.metrics.join(",")),
        ("timestamp_utc".into(), crate::meta::now_utc()),
    ]
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// `history.csv`: the header lines (and one `# unreadable=<path>: <why>` line per night or
/// step without figures), then one record per row.
pub fn to_csv(h: &History, results: &Path) -> String {
    let unreadable = h.unreadable.iter().map(|u| {
        (
            "unreadable".to_string(),
            format!("{}: {}", u.path.display(), u.reason),
        )
    });
    let comments: String = header(h, results)
        .into_iter()
        .chain(unreadable)
        .map(|(k, v)| format!("# {k}={}\n", v.replace('\n', " ")))
        .collect();
    csv_after_comments(comments, |w| {
        w.write_record([
            "night", "device", "step", "metric", "unit", "value", "lo", "hi", "verdict", "baseline",
        ])?;
        for r in &h.rows {
            w.write_record([
                r.night.as_str(),
                &r.device,
                &r.step,
                &r.metric,
                &r.unit,
                &r.value.to_string(),
                &opt(r.lo),
                &opt(r.hi),
                &r.verdict,
                r.baseline.as_deref().unwrap_or(""),
            ])?;
        }
        Ok(())
    })
}

/// `history.html`: the header table, then per device, step and metric a chart of the nights
/// (each night's value against its index, its 95% interval as an error bar, a failing verdict
/// as a red cross) and its table with the verdicts
/// (failing ones marked `FAIL`) and baselines; then the nights that could not be read.
pub fn to_html(h: &History, results: &Path) -> String {
    let mut s = page_start("PocketPerf farm history");
    s.push_str("<h1>Farm history</h1>\n<table class=\"provenance\">\n");
    for (k, v) in header(h, results) {
        let _ = writeln!(
            s,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape_html(&k),
            escape_html(&v)
        );
    }
    s.push_str("</table>\n");
    let index: BTreeMap<&str, usize> = h
        .nights
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i + 1))
        .collect();
    let mut groups: BTreeMap<(&str, &str, &str), Vec<&HistoryRow>> = BTreeMap::new();
    for r in &h.rows {
        groups
            .entry((r.device.as_str(), r.step.as_str(), r.metric.as_str()))
            .or_default()
            .push(r);
    }
    for ((device, step, metric), rows) in &groups {
        let title = format!("{device} / {step} / {metric}");
        let _ = writeln!(s, "<h2>{}</h2>", escape_html(&title));
        let x = |r: &HistoryRow| index.get(r.night.as_str()).copied().unwrap_or(0) as f64;
        let points: Vec<IntervalPoint> = rows
            .iter()
            .map(|r| IntervalPoint {
                x: x(r),
                value: r.value,
                interval: r.lo.zip(r.hi),
                failed: r.failing(),
            })
            .collect();
        let unit = rows.first().map(|r| r.unit.as_str()).unwrap_or("");
        match interval_chart(&title, "night (see table)", unit, &points) {
            Ok(svg) => s += &figure(&title, svg),
            Err(e) => {
                let _ = writeln!(s, "<p>chart not drawn: {}</p>", escape_html(&e.to_string()));
            }
        }
        s.push_str(
            "<table>\n<tr><th>#</th><th>night</th><th>value</th><th>95% interval</th>\
             <th>verdict</th><th>baseline night</th></tr>\n",
        );
        for r in rows {
            let interval = match (r.lo, r.hi) {
                (Some(lo), Some(hi)) => format!("{} – {}", num(lo), num(hi)),
                _ => String::new(),
            };
            let mark = if r.failing() {
                format!(
                    "<span class=\"bad\">FAIL {}</span>",
                    escape_html(&r.verdict)
                )
            } else {
                format!("<span class=\"good\">{}</span>", escape_html(&r.verdict))
            };
            let _ = writeln!(
                s,
                "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{mark}</td><td>{}</td></tr>",
                x(r),
                escape_html(&r.night),
                escape_html(&num(r.value)),
                escape_html(&interval),
                escape_html(r.baseline.as_deref().unwrap_or("—")),
            );
        }
        s.push_str("</table>\n");
    }
    if !h.unreadable.is_empty() {
        s.push_str("<h2>Not read</h2>\n<table>\n<tr><th>path</th><th>why</th></tr>\n");
        for u in &h.unreadable {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td class=\"bad\">unreadable: {}</td></tr>",
                escape_html(&u.path.display().to_string()),
                escape_html(&u.reason)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str(page_end());
    s
}

/// Writes `history.csv` and `history.html` into `out` (created if missing); returns their
/// paths.
pub fn write(h: &History, results: &Path, out: &Path) -> Result<[PathBuf; 2]> {
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let csv = out.join(HISTORY_CSV);
    let html = out.join(HISTORY_HTML);
    for (path, text) in [(&csv, to_csv(h, results)), (&html, to_html(h, results))] {
        pocketperf_reports::files::replace_file(path, text.as_bytes()).map_err(|(p, e)| {
            anyhow::Error::new(e).context(format!("{}: cannot write", p.display()))
        })?;
    }
    Ok([csv, html])
}
