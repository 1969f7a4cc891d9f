//! Per-device / per-run comparison: one column per result directory, each figure with its
//! interval and its ratio to a chosen baseline column; rendered as HTML (with a latency CDF
//! overlay and a throughput chart), CSV and Markdown.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{ReportError, Result};
use crate::plots::{self, Bar, Series};
use crate::render::html_parts::{figure, page_start, provenance_table};
use crate::render::{
    BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, Provenance, RenderContext, escape_html, escape_md,
    metric_rows, num, per_query_tokens_per_s,
};
use crate::schema::{self, ResultFile};
use crate::stats::{self, Better, Statistic};

/// One run in a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct ComparedRun {
    /// Column label (device id and name).
    pub label: String,
    /// Directory it was read from.
    pub dir: PathBuf,
    /// The run.
    pub result: ResultFile,
}

/// One figure of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cell {
    /// Value.
    pub value: f64,
    /// Lower bound of the 95% interval.
    pub lo: Option<f64>,
    /// Upper bound of the 95% interval.
    pub hi: Option<f64>,
    /// `value / baseline value`; `None` in the baseline column or when undefined.
    pub ratio: Option<f64>,
    /// Lower bound of the 95% bootstrap interval of the ratio, for figures backed by
    /// per-query or per-dialogue samples in both runs.
    pub ratio_lo: Option<f64>,
    /// Upper bound of that interval.
    pub ratio_hi: Option<f64>,
}

/// One figure across all runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    /// Section (`performance`, ...).
    pub section: &'static str,
    /// Metric name.
    pub metric: String,
    /// Unit.
    pub unit: &'static str,
    /// Which direction is better, when it has one.
    pub better: Option<Better>,
    /// One cell per run, `None` where the run lacks the figure.
    pub cells: Vec<Option<Cell>>,
}

/// A comparison of several runs against one of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The runs, in the order given.
    pub runs: Vec<ComparedRun>,
    /// Index of the baseline run.
    pub baseline_index: usize,
    /// Figures, in first-seen order.
    pub rows: Vec<CompareRow>,
}

fn better_of(metric: &str, unit: &str) -> Option<Better> {
    if metric == "valid"
        || metric == "queries"
        || metric == "duration"
        || metric.ends_with("outliers")
        || metric == "idle_power"
    {
        return None;
    }
    match unit {
        "ms" | "mWh" | "J" | "C" | "s" => Some(Better::Lower),
        "1/s" | "ratio" | "1/J" => Some(Better::Higher),
        _ => None,
    }
}

/// Loads each directory and compares them against `dirs[baseline_index]`.
pub fn compare<P: AsRef<Path>>(dirs: &[P], baseline_index: usize) -> Result<Comparison> {
    let mut runs = Vec::with_capacity(dirs.len());
    for d in dirs {
        let result = schema::load_result(d)?;
        runs.push(ComparedRun {
            label: result.label(),
            dir: d.as_ref().to_path_buf(),
            result,
        });
    }
    compare_results(runs, baseline_index)
}

/// Compares already loaded runs against `runs[baseline_index]`.
pub fn compare_results(runs: Vec<ComparedRun>, baseline_index: usize) -> Result<Comparison> {
    if runs.is_empty() {
        return Err(ReportError::Compare("no result directories given".into()));
    }
    if baseline_index >= runs.len() {
        return Err(ReportError::Compare(format!(
            "baseline index {baseline_index} is out of range for {} runs",
            runs.len()
        )));
    }
    let mut runs = runs;
    disambiguate_labels(&mut runs);
    let mut rows: Vec<CompareRow> = Vec::new();
    let k = runs.len();
    for (i, run) in runs.iter().enumerate() {
        for m in metric_rows(&run.result) {
            let idx = match rows
                .iter()
                .position(|r| r.section == m.section && r.metric == m.metric)
            {
                Some(idx) => idx,
                None => {
                    rows.push(CompareRow {
                        section: m.section,
                        better: better_of(&m.metric, m.unit),
                        metric: m.metric.clone(),
                        unit: m.unit,
                        cells: vec![None; k],
                    });
                    rows.len() - 1
                }
            };
            rows[idx].cells[i] = Some(Cell {
                value: m.value,
                lo: m.lo,
                hi: m.hi,
                ratio: None,
                ratio_lo: None,
                ratio_hi: None,
            });
        }
    }
    for r in &mut rows {
        let base = r.cells[baseline_index].map(|c| c.value);
        for (i, c) in r.cells.iter_mut().enumerate() {
            if let (Some(c), Some(b)) = (c.as_mut(), base)
                && i != baseline_index
                && b != 0.0
                && b.is_finite()
            {
                c.ratio = Some(c.value / b);
            }
        }
        let Some((statistic, get)) = samples_of(&r.metric) else {
            continue;
        };
        let base_samples = get(&runs[baseline_index].result);
        for (i, c) in r.cells.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            if i == baseline_index || c.ratio.is_none() {
                continue;
            }
            if let Ok(ci) = stats::bootstrap_ratio_ci(
                &base_samples,
                &get(&runs[i].result),
                statistic,
                0.95,
                BOOTSTRAP_RESAMPLES,
                BOOTSTRAP_SEED,
            ) {
                c.ratio_lo = Some(ci.lo);
                c.ratio_hi = Some(ci.hi);
            }
        }
    }
    Ok(Comparison {
        runs,
        baseline_index,
        rows,
    })
}

/// Extracts the samples behind a figure.
type SampleFn = fn(&ResultFile) -> Vec<f64>;

/// The statistic and samples behind a figure, for figures whose ratio gets an interval.
fn samples_of(metric: &str) -> Option<(Statistic, SampleFn)> {
    fn perf(r: &ResultFile, f: fn(&schema::QuerySample) -> Option<f64>) -> Vec<f64> {
        r.performance
            .as_ref()
            .map(|p| p.per_query.iter().filter_map(f).collect())
            .unwrap_or_default()
    }
    let f: (Statistic, SampleFn) = match metric {
        "latency_p50" => (Statistic::Median, |r| perf(r, |q| Some(q.latency_ms))),
        "ttft_p50" => (Statistic::Median, |r| perf(r, |q| q.ttft_ms)),
        "tpot_p50" => (Statistic::Median, |r| perf(r, |q| q.tpot_ms)),
        "query_tokens_per_s_median" => (Statistic::Median, |r| {
            r.performance
                .as_ref()
                .map(per_query_tokens_per_s)
                .unwrap_or_default()
        }),
        "mwh_per_dialogue_net" => (Statistic::Mean, |r| {
            r.energy
                .as_ref()
                .map(|e| e.per_dialogue.iter().map(|d| d.net_mwh).collect())
                .unwrap_or_default()
        }),
        "mwh_per_dialogue_gross" => (Statistic::Mean, |r| {
            r.energy
                .as_ref()
                .map(|e| e.per_dialogue.iter().map(|d| d.gross_mwh).collect())
                .unwrap_or_default()
        }),
        _ => return None,
    };
    Some(f)
}

/// Makes column labels unique: runs that share a label get their directory name appended.
fn disambiguate_labels(runs: &mut [ComparedRun]) {
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, run) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
            let dir = run
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| run.dir.display().to_string());
            run.label = format!("{} [{dir}] #{}", labels[i], i + 1);
        }
    }
}

fn ratio_text(c: &Cell) -> String {
    match (c.ratio, c.ratio_lo, c.ratio_hi) {
        (Some(r), Some(lo), Some(hi)) => format!("×{r:.3} [{lo:.3}, {hi:.3}]"),
        (Some(r), _, _) => format!("×{r:.3}"),
        _ => String::new(),
    }
}

fn interval(c: &Cell) -> String {
    match (c.lo, c.hi) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
        _ => String::new(),
    }
}

impl Comparison {
    fn baseline(&self) -> &ComparedRun {
        &self.runs[self.baseline_index]
    }

    /// Long-format CSV: one line per (metric, run), with provenance columns.
    pub fn to_csv(&self, ctx: &RenderContext) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# schema_version={}", schema::SCHEMA_VERSION);
        let _ = writeln!(
            s,
            "# rendered_utc={}",
            crate::render::utc(&ctx.rendered_utc)
        );
        let _ = writeln!(
            s,
            "# baseline={}",
            crate::render::one_line(&self.baseline().label)
        );
        crate::render::csv_after_comments(s, |w| {
            w.write_record([
                "run",
                "label",
                "device",
                "device_name",
                "model",
                "model_sha256",
                "tool_version",
                "git_commit",
                "run_started_utc",
                "settings",
                "section",
                "metric",
                "unit",
                "value",
                "lo",
                "hi",
                "ratio_to_baseline",
                "ratio_lo",
                "ratio_hi",
            ])?;
            let opt = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
            for r in &self.rows {
                for (i, c) in r.cells.iter().enumerate() {
                    let Some(c) = c else { continue };
                    let p = Provenance::new(&self.runs[i].result.meta, ctx);
                    w.write_record([
                        i.to_string(),
                        self.runs[i].label.clone(),
                        p.device,
                        p.device_name,
                        p.model,
                        p.model_sha256,
                        p.tool_version,
                        p.git_commit,
                        p.run_started_utc.to_string(),
                        p.settings,
                        r.section.to_string(),
                        r.metric.clone(),
                        r.unit.to_string(),
                        c.value.to_string(),
                        opt(c.lo),
                        opt(c.hi),
                        opt(c.ratio),
                        opt(c.ratio_lo),
                        opt(c.ratio_hi),
                    ])?;
                }
            }
            Ok(())
        })
    }

    /// Markdown table, one column per run.
    pub fn to_markdown(&self, ctx: &RenderContext) -> String {
        let mut s = format!(
            "# PocketPerf comparison (baseline: {})\n\nschema_version {} · rendered {}\n\n| metric | unit |",
            escape_md(&self.baseline().label),
            schema::SCHEMA_VERSION,
            crate::render::utc(&ctx.rendered_utc)
        );
        for run in &self.runs {
            let _ = write!(s, " {} |", escape_md(&run.label));
        }
        s.push_str("\n|---|---|");
        s.push_str(&"---:|".repeat(self.runs.len()));
        s.push('\n');
        for r in &self.rows {
            let _ = write!(s, "| {} | {} |", escape_md(&r.metric), r.unit);
            for c in &r.cells {
                match c {
                    Some(c) => {
                        let _ = write!(s, " {} {} {} |", num(c.value), interval(c), ratio_text(c));
                    }
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        s.push_str("\n| run | tool | commit | model sha256 | started |\n|---|---|---|---|---|\n");
        for run in &self.runs {
            let m = &run.result.meta;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                escape_md(&run.label),
                escape_md(&m.tool_version),
                escape_md(&m.git_commit),
                escape_md(&m.model.sha256),
                crate::render::utc(&m.started_utc)
            );
        }
        s
    }

    /// Self-contained HTML: table with intervals and ratios, coloured by direction, plus
    /// a latency CDF overlay and a throughput chart.
    pub fn to_html(&self, ctx: &RenderContext) -> Result<String> {
        let mut s = page_start("PocketPerf comparison");
        let _ = writeln!(
            s,
            "<h1>PocketPerf comparison</h1>\n<p>Baseline: {}. Ratios are value / baseline; green is better, red is worse. Rendered {} (schema_version {}).</p>",
            escape_html(&self.baseline().label),
            crate::render::utc(&ctx.rendered_utc),
            schema::SCHEMA_VERSION
        );
        s.push_str("<table>\n<tr><th>metric</th><th>unit</th>");
        for (i, run) in self.runs.iter().enumerate() {
            let mark = if i == self.baseline_index {
                " (baseline)"
            } else {
                ""
            };
            let _ = write!(s, "<th>{}{mark}</th>", escape_html(&run.label));
        }
        s.push_str("</tr>\n");
        for r in &self.rows {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td>",
                escape_html(&r.metric),
                r.unit
            );
            for c in &r.cells {
                match c {
                    Some(c) => {
                        let class = match (r.better, c.ratio) {
                            (Some(Better::Lower), Some(x)) if x < 1.0 => "good",
                            (Some(Better::Lower), Some(x)) if x > 1.0 => "bad",
                            (Some(Better::Higher), Some(x)) if x > 1.0 => "good",
                            (Some(Better::Higher), Some(x)) if x < 1.0 => "bad",
                            _ => "",
                        };
                        let _ = write!(
                            s,
                            "<td class=\"n\">{} {} <span class=\"{class}\">{}</span></td>",
                            num(c.value),
                            interval(c),
                            ratio_text(c)
                        );
                    }
                    None => s.push_str("<td>–</td>"),
                }
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");

        type Getter = fn(&schema::QuerySample) -> Option<f64>;
        let cdf_plots: [(&str, &str, &str, Getter); 2] = [
            (
                "Query latency CDF per run",
                "Latency CDF",
                "latency (ms)",
                |q| Some(q.latency_ms),
            ),
            (
                "Time per output token CDF per run",
                "TPOT CDF",
                "TPOT (ms)",
                |q| q.tpot_ms,
            ),
        ];
        for (caption, title, x_label, get) in cdf_plots {
            let cdfs: Vec<Series> = self
                .runs
                .iter()
                .filter_map(|run| {
                    let p = run.result.performance.as_ref()?;
                    let v: Vec<f64> = p.per_query.iter().filter_map(get).collect();
                    Some(Series {
                        name: run.label.clone(),
                        points: plots::ecdf(&v),
                    })
                })
                .collect();
            s += &figure(
                caption,
                plots::line_chart(title, x_label, "fraction ≤ x", &cdfs)?,
            );
        }
        for (metric, title, unit) in [
            (
                "query_tokens_per_s_median",
                "Median tokens per second per query",
                "tokens/s",
            ),
            ("ttft_p50", "Median time to first token", "ms"),
            ("tpot_p50", "Median time per output token", "ms"),
            ("latency_p50", "Median query latency", "ms"),
            ("mwh_per_dialogue_net", "Net energy per dialogue", "mWh"),
            ("accuracy", "Accuracy", "ratio"),
        ] {
            let Some(row) = self.rows.iter().find(|r| r.metric == metric) else {
                continue;
            };
            let bars: Vec<Bar> = row
                .cells
                .iter()
                .zip(&self.runs)
                .filter_map(|(c, run)| {
                    let c = (*c)?;
                    Some(Bar {
                        label: run.label.clone(),
                        value: c.value,
                        interval: c.lo.zip(c.hi),
                    })
                })
                .collect();
            s += &figure(
                &format!("{title} ({unit}), 95% intervals"),
                plots::bar_chart(title, unit, &bars)?,
            );
        }

        s.push_str("<h2>Runs</h2>\n");
        for run in &self.runs {
            let _ = writeln!(s, "<h3>{}</h3>", escape_html(&run.label));
            s += &provenance_table(&Provenance::new(&run.result.meta, ctx));
        }
        s.push_str("</body>\n</html>\n");
        Ok(s)
    }
}
