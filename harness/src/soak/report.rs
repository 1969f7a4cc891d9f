//! The soak report: `robustness.json` (versioned, with the run's provenance) and
//! `robustness.html` (verdict per check, RSS, TPOT, throughput and temperatures over time as
//! inline SVG drawn with the reports crate's plots), both rebuilt from the journal at every
//! checkpoint and at the end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pocketperf_reports::plots::{Series, line_chart};
use pocketperf_reports::render::escape_html;
use pocketperf_reports::render::html_helpers::{page_end, page_start_styled};
use serde_json::{Value, json};

use super::analysis::{Analysis, ThermalPoint, Verdict, analyze};
use super::config::{SoakConfig, format_duration};
use super::journal::{JOURNAL_FILE, JournalContents, Record, read_journal};
use crate::meta;

pub const ROBUSTNESS_JSON: &str = "robustness.json";
pub const ROBUSTNESS_HTML: &str = "robustness.html";
pub const ROBUSTNESS_SCHEMA: &str = "pocketperf-robustness";
pub const ROBUSTNESS_SCHEMA_VERSION: u32 = 1;

/// Requests a server must have completed before its memory counts in the RSS fit: one cycle
/// of dialogue turns and one probe round.
pub fn warm_served(cfg: &SoakConfig) -> u64 {
    let turns: usize = pocketperf_datasets::dialogues()
        .iter()
        .take(cfg.dialogues)
        .map(|d| d.turns.len())
        .sum();
    (turns + cfg.probe_prompts + cfg.probe_mmlu) as u64
}

/// Reads the journal of `dir`, analyses it and writes both report files. Returns the
/// analysis and the paths written.
pub fn write_reports(dir: &Path) -> Result<(Analysis, PathBuf, PathBuf)> {
    let contents = read_journal(&dir.join(JOURNAL_FILE))?;
    let cfg = contents.config().context("the journal has no header")?;
    let analysis = analyze(&contents.entries, &cfg, warm_served(&cfg));
    let json_path = dir.join(ROBUSTNESS_JSON);
    let html_path = dir.join(ROBUSTNESS_HTML);
    let doc = robustness_json(&contents, &cfg, &analysis);
    write_atomic(&json_path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    write_atomic(
        &html_path,
        robustness_html(&contents, &cfg, &analysis)?.as_bytes(),
    )?;
    Ok((analysis, json_path, html_path))
}

/// Writes through a temporary file and a rename ([`pocketperf_reports::files::replace_file`]),
/// so a reader never sees half a report.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    pocketperf_reports::files::replace_file(path, bytes)
        .map_err(|(p, e)| anyhow::Error::new(e).context(format!("{}: cannot write", p.display())))
}

/// The `robustness.json` document. Top-level `crashes` and `drift` carry the names the release
/// gate reads in a result's `robustness` section (a soak directory itself is not a gate input).
pub fn robustness_json(contents: &JournalContents, cfg: &SoakConfig, a: &Analysis) -> Value {
    let mut segments = Vec::new();
    let mut starts = Vec::new();
    let mut faults: Vec<String> = Vec::new();
    for e in &contents.entries {
        match &e.record {
            Record::Segment {
                segment,
                resumed,
                utc,
                dropped_tail_bytes,
                ..
            } => segments.push(json!({
                "segment": segment, "resumed": resumed, "utc": utc, "t_s": e.t_s,
                "dropped_tail_bytes": dropped_tail_bytes,
            })),
            Record::SutStart {
                incarnation,
                pid,
                hello,
                loaded,
                startup_s,
            } => {
                if let Some(f) = &hello.fault
                    && !faults.contains(f)
                {
                    faults.push(f.clone());
                }
                starts.push(json!({
                    "incarnation": incarnation, "pid": pid, "t_s": e.t_s, "startup_s": startup_s,
                    "threads": loaded.threads, "isa": loaded.isa, "fault": hello.fault,
                }))
            }
            _ => {}
        }
    }
    json!({
        "schema": ROBUSTNESS_SCHEMA,
        "schema_version": ROBUSTNESS_SCHEMA_VERSION,
        "tool": meta::TOOL,
        "tool_version": meta::TOOL_VERSION,
        "git_commit": meta::GIT_COMMIT,
        "provenance": contents.provenance(),
        "report_utc": meta::now_utc(),
        "settings": cfg,
        "status": a.status,
        "passed": a.passed,
        "verdict": if a.passed { "pass" } else { "fail" },
        "planned_duration_s": a.planned_s,
        "soak_time_s": a.soak_time_s,
        "windows": a.windows,
        "crashes": a.counts.crashes,
        "timeouts": a.counts.timeouts,
        "drift": a.counts.output_drift,
        "counts": a.counts,
        "checks": a.checks,
        "rss": a.rss,
        "latency": a.latency,
        "stability": a.stability,
        "thermal": a.thermal,
        "mmlu_per_round": a.mmlu,
        "crash_events": a.crashes,
        "timeout_events": a.timeouts,
        "drift_events": a.drift.iter().take(100).collect::<Vec<_>>(),
        "segments": segments,
        "sut_starts": starts,
        "faults_injected": faults,
    })
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.pass{color:#1b5e20;font-weight:bold}.fail{color:#b00020;font-weight:bold}\
.skipped{color:#666}figure{margin:1em 0}figcaption{font-weight:bold}pre{white-space:pre-wrap;word-break:break-all;background:#f8f8f8;padding:4px}";

fn verdict_class(v: Verdict) -> (&'static str, &'static str) {
    match v {
        Verdict::Pass => ("pass", "PASS"),
        Verdict::Fail => ("fail", "FAIL"),
        Verdict::Skipped => ("skipped", "skipped"),
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.abs() >= 100.0 || x == 0.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.4}"),
    }
}

fn figure(caption: &str, svg: Option<String>) -> String {
    match svg {
        Some(svg) => format!(
            "<figure><figcaption>{}</figcaption>\n{svg}\n</figure>\n",
            escape_html(caption)
        ),
        None => format!(
            "<p class=\"skipped\">{}: no data.</p>\n",
            escape_html(caption)
        ),
    }
}

/// The `robustness.html` page: self-contained (inline CSS and SVG, nothing loaded).
pub fn robustness_html(
    contents: &JournalContents,
    cfg: &SoakConfig,
    a: &Analysis,
) -> Result<String> {
    let (scale, unit) = if a.soak_time_s.max(a.planned_s) >= 3.0 * 3600.0 {
        (3600.0, "h")
    } else {
        (60.0, "min")
    };
    let x_label = format!("soak time ({unit})");
    let mut s = String::new();
    let title = format!(
        "Soak robustness: {} ({:?})",
        if a.passed { "PASS" } else { "FAIL" },
        a.status
    );
    s.push_str(&page_start_styled(&title, STYLE));
    let _ = writeln!(s, "<h1>{}</h1>", escape_html(&title));
    s.push_str("<h2>Provenance</h2>\n<table>\n");
    let prov = contents.provenance().cloned().unwrap_or(Value::Null);
    let field = |k: &str| -> String {
        match prov.get(k) {
            Some(Value::String(v)) => v.clone(),
            Some(Value::Null) | None => "-".into(),
            Some(v) => v.to_string(),
        }
    };
    let device = prov
        .get("device")
        .map(|d| {
            format!(
                "{} ({}, {}, {})",
                d.get("id").and_then(Value::as_str).unwrap_or("-"),
                d.get("name").and_then(Value::as_str).unwrap_or("-"),
                d.get("cpu").and_then(Value::as_str).unwrap_or("-"),
                d.get("os").and_then(Value::as_str).unwrap_or("-")
            )
        })
        .unwrap_or_default();
    for (k, v) in [
        (
            "tool",
            format!("{} {}", field("tool"), field("tool_version")),
        ),
        ("git commit", field("git_commit")),
        ("device", device),
        ("soak device", cfg.device.clone()),
        ("model", field("model_name")),
        ("model file", field("model_path")),
        ("model sha256", field("model_sha256")),
        ("started (UTC)", field("timestamp_utc")),
        ("report (UTC)", meta::now_utc()),
        (
            "settings",
            format!(
                "threads {}, ctx {}, {} dialogues, turn cap {}, probes {} greedy × {} tokens + {} MMLU every {}, memory every {}, telemetry every {}, timeout {} s",
                cfg.threads,
                cfg.ctx,
                cfg.dialogues,
                cfg.max_turn_tokens.map_or("none".into(), |m| m.to_string()),
                cfg.probe_prompts,
                cfg.probe_tokens,
                cfg.probe_mmlu,
                format_duration(cfg.probe_every_s),
                format_duration(cfg.rss_every_s),
                format_duration(cfg.telemetry_every_s),
                cfg.query_timeout_s
            ),
        ),
    ] {
        let _ = writeln!(s, "<tr><th>{k}</th><td>{}</td></tr>", escape_html(&v));
    }
    s.push_str("</table>\n<h2>Summary</h2>\n<table>\n");
    let c = &a.counts;
    for (k, v) in [
        ("status", format!("{:?}", a.status)),
        (
            "soak time",
            format!(
                "{} of {} planned",
                format_duration(a.soak_time_s),
                format_duration(a.planned_s)
            ),
        ),
        (
            "harness sessions",
            format!("{} (resumes: {})", c.segments, c.segments.saturating_sub(1)),
        ),
        (
            "dialogue turns",
            format!("{} ({} tokens)", c.queries, c.tokens),
        ),
        (
            "probes",
            format!("{} in {} rounds", c.probes, c.probe_rounds),
        ),
        ("server starts", c.sut_starts.to_string()),
        (
            "crashes / timeouts",
            format!("{} / {}", c.crashes, c.timeouts),
        ),
        (
            "refused / skipped requests",
            format!("{} / {}", c.refused, c.skipped),
        ),
        (
            "windows",
            format!(
                "warm-up {}, latency {}, stability {}",
                format_duration(a.windows.warmup_s),
                format_duration(a.windows.latency_s),
                format_duration(a.windows.stability_s)
            ),
        ),
    ] {
        let _ = writeln!(s, "<tr><th>{k}</th><td>{}</td></tr>", escape_html(&v));
    }
    s.push_str("</table>\n<h2>Checks</h2>\n<table>\n<tr><th>check</th><th>verdict</th><th>value</th><th>threshold</th><th>95% interval</th><th>detail</th></tr>\n");
    for ch in &a.checks {
        let (class, word) = verdict_class(ch.verdict);
        let limit = match ch.name {
            "stability" => format!("≥ {}", num(ch.threshold)),
            _ => format!("≤ {}", num(ch.threshold)),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"{class}\">{word}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ch.name,
            num(ch.value),
            escape_html(ch.unit),
            escape_html(&limit),
            ch.interval.map_or("-".into(), |[lo, hi]| format!(
                "{} … {}",
                num(Some(lo)),
                num(Some(hi))
            )),
            escape_html(&ch.detail)
        );
    }
    s.push_str("</table>\n<h2>Over time</h2>\n");

    // RSS by server incarnation, with the fitted line over the points it used.
    let mut by_inc: std::collections::BTreeMap<u32, Vec<(f64, f64)>> = Default::default();
    for &(t, inc, mib, _) in &a.rss.series {
        by_inc.entry(inc).or_default().push((t / scale, mib));
    }
    let mut rss_series: Vec<Series> = by_inc
        .into_iter()
        .map(|(inc, points)| Series {
            name: format!("server {inc}"),
            points,
        })
        .collect();
    if rss_series.len() > 6 {
        // Many restarts: one series keeps the legend readable.
        let points = rss_series.drain(..).flat_map(|s| s.points).collect();
        rss_series.push(Series {
            name: "RSS".into(),
            points,
        });
    }
    if let Some(f) = &a.rss.fit {
        let xs: Vec<f64> = a
            .rss
            .series
            .iter()
            .filter(|p| p.3)
            .map(|p| p.0 / 3600.0)
            .collect();
        if let (Some(x0), Some(x1)) = (
            xs.iter().copied().reduce(f64::min),
            xs.iter().copied().reduce(f64::max),
        ) {
            rss_series.push(Series {
                name: format!("Theil–Sen fit {:+.3} MiB/h", f.slope),
                points: [x0, x1]
                    .iter()
                    .map(|&h| (h * 3600.0 / scale, f.intercept + f.slope * h))
                    .collect(),
            });
        }
    }
    s.push_str(&figure(
        "Server resident memory",
        line_chart("RSS", &x_label, "MiB", &rss_series)?,
    ));
    s.push_str(&figure(
        "Time per output token of each dialogue turn (server side)",
        line_chart(
            "TPOT",
            &x_label,
            "ms",
            &[Series {
                name: String::new(),
                points: a
                    .latency
                    .tpot_series
                    .iter()
                    .map(|&(t, v)| (t / scale, v))
                    .collect(),
            }],
        )?,
    ));
    s.push_str(&figure(
        "Decode throughput per stability window (tokens/s while decoding)",
        line_chart(
            "Throughput",
            &x_label,
            "tokens/s",
            &[Series {
                name: String::new(),
                points: a
                    .stability
                    .windows
                    .iter()
                    .map(|w| ((w.start_s + w.end_s) / 2.0 / scale, w.tokens_per_s))
                    .collect(),
            }],
        )?,
    ));
    let pick = |f: fn(&ThermalPoint) -> Option<f64>| -> Vec<(f64, f64)> {
        a.thermal
            .series
            .iter()
            .filter_map(|p| f(p).map(|v| (p.t_s / scale, v)))
            .collect()
    };
    s.push_str(&figure(
        "Temperatures",
        line_chart(
            "Temperatures",
            &x_label,
            "°C",
            &[
                Series {
                    name: "SoC".into(),
                    points: pick(|p| p.soc_c),
                },
                Series {
                    name: "skin".into(),
                    points: pick(|p| p.skin_c),
                },
                Series {
                    name: "hottest zone".into(),
                    points: pick(|p| p.max_c),
                },
            ],
        )?,
    ));
    if !a.mmlu.is_empty() {
        s.push_str(
            "<h2>MMLU probes per round</h2>\n<table><tr><th>round</th><th>correct</th></tr>\n",
        );
        for r in &a.mmlu {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{} / {}</td></tr>",
                r.round, r.correct, r.total
            );
        }
        s.push_str("</table>\n");
    }
    for (title, list) in [("Crashes", &a.crashes), ("Timeouts", &a.timeouts)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(s, "<h2>{title}</h2>");
        for f in list.iter().take(50) {
            let _ = writeln!(
                s,
                "<p>at {} — server {} (pid {}) during {}: {}; {}</p>\n<pre>{}</pre>",
                escape_html(&format_duration(f.t_s)),
                f.failure.incarnation,
                f.failure.pid,
                escape_html(&f.failure.last_query),
                escape_html(&f.failure.error),
                escape_html(
                    f.failure
                        .exit
                        .as_ref()
                        .map_or("-", |x| x.description.as_str())
                ),
                escape_html(&f.failure.stderr_tail.join("\n"))
            );
        }
    }
    if !a.drift.is_empty() {
        s.push_str("<h2>Output drift</h2>\n<table><tr><th>round</th><th>probe</th><th>time</th><th>expected (round)</th><th>got</th></tr>\n");
        for d in a.drift.iter().take(50) {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td><td>{}</td></tr>",
                d.round,
                escape_html(&d.probe_id),
                escape_html(&format_duration(d.t_s)),
                escape_html(&d.expected),
                d.reference_round,
                escape_html(&d.got)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str(page_end());
    Ok(s)
}
