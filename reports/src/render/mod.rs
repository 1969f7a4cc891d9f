//! Renderers for one run, behind the [`Exporter`] trait: text, JSON, CSV, Markdown and the
//! self-contained HTML report. Every output carries the run's provenance (schema version,
//! tool version, commit, device, model hash, settings, run time) and the render time, which
//! is injected through [`RenderContext`] so outputs can be reproduced byte for byte.

mod html;
pub(crate) mod html_parts;
pub mod labels;
pub mod settings;
pub mod timeline;

use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::datafiles::{self, Telemetry, TokenLog};
use crate::error::{ReportError, Result};
use crate::schema::{self, ResultFile, RunMeta};
use crate::stats::{self, Statistic, TukeyFences};

pub use html::render_html;
pub use labels::num;

pub mod html_helpers;

/// Seed of every bootstrap interval the reports print, so reruns print the same figures.
pub const BOOTSTRAP_SEED: u64 = 0x5EED_2026;
/// Bootstrap resamples for report intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Things that vary between renders of the same data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderContext {
    /// When the output was rendered (UTC).
    pub rendered_utc: DateTime<Utc>,
}

impl RenderContext {
    /// A context stamped with the current time.
    pub fn now() -> Self {
        Self {
            rendered_utc: Utc::now(),
        }
    }

    /// A context stamped with a fixed time (tests, reproducible builds).
    pub fn at(rendered_utc: DateTime<Utc>) -> Self {
        Self { rendered_utc }
    }
}

/// Where an output came from: printed at the top of every rendered file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    /// `result.json` schema version.
    pub schema_version: u32,
    /// Producing tool.
    pub tool: String,
    /// Tool version.
    pub tool_version: String,
    /// Git commit of the tool.
    pub git_commit: String,
    /// Device id.
    pub device: String,
    /// Device name.
    pub device_name: String,
    /// Model name.
    pub model: String,
    /// SHA-256 of the model file.
    pub model_sha256: String,
    /// Backend and ISA tier.
    pub backend: String,
    /// Threads.
    pub threads: u32,
    /// Every CLI setting, compact JSON.
    pub settings: String,
    /// Run start (UTC, RFC 3339).
    pub run_started_utc: String,
    /// Render time (UTC, RFC 3339).
    pub rendered_utc: String,
}

/// RFC 3339 UTC timestamp with second precision.
pub fn utc(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Provenance {
    /// Provenance of a run's meta block, rendered at `ctx.rendered_utc`.
    pub fn new(meta: &RunMeta, ctx: &RenderContext) -> Self {
        Self {
            schema_version: schema::SCHEMA_VERSION,
            tool: meta.tool.clone(),
            tool_version: meta.tool_version.clone(),
            git_commit: meta.git_commit.clone(),
            device: meta.device.id.clone(),
            device_name: meta.device.name.clone(),
            model: meta.model.name.clone(),
            model_sha256: meta.model.sha256.clone(),
            backend: format!("{} / {}", meta.backend, meta.isa),
            threads: meta.threads,
            settings: serde_json::to_string(&meta.settings).unwrap_or_default(),
            run_started_utc: utc(&meta.started_utc),
            rendered_utc: utc(&ctx.rendered_utc),
        }
    }

    /// `(key, value)` pairs in display order.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("schema_version", self.schema_version.to_string()),
            ("tool", self.tool.clone()),
            ("tool_version", self.tool_version.clone()),
            ("git_commit", self.git_commit.clone()),
            ("device", self.device.clone()),
            ("device_name", self.device_name.clone()),
            ("model", self.model.clone()),
            ("model_sha256", self.model_sha256.clone()),
            ("backend", self.backend.clone()),
            ("threads", self.threads.to_string()),
            ("settings", self.settings.clone()),
            ("run_started_utc", self.run_started_utc.clone()),
            ("rendered_utc", self.rendered_utc.clone()),
        ]
    }

    /// The pairs as `# key=value` comment lines (CSV and text headers).
    pub fn comment_lines(&self) -> String {
        let mut s = String::new();
        for (k, v) in self.pairs() {
            let _ = writeln!(s, "# {k}={}", one_line(&v));
        }
        s
    }
}

/// Replaces line breaks so a value stays on one line.
pub fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for a Markdown table cell on one line, with CommonMark backslash escapes
/// rather than HTML entities, so the file reads as typed in a terminal and renders the same
/// text: `\\`, `|` (cell separator), `` ` `` (code span), `<` and `>` (inline HTML, which
/// GitHub renders), `&` (entity references), `*` (emphasis), `[` (links), and `_` except
/// between two letters or digits (`tpot_ms`), where CommonMark never reads it as emphasis.
pub fn escape_md(s: &str) -> String {
    let chars: Vec<char> = one_line(s).chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let inside_word = || {
            let alnum = |j: Option<usize>| {
                j.and_then(|j| chars.get(j))
                    .is_some_and(|c| c.is_alphanumeric())
            };
            alnum(i.checked_sub(1)) && alnum(Some(i + 1))
        };
        if matches!(c, '\\' | '|' | '`' | '<' | '>' | '&' | '*' | '[')
            || (c == '_' && !inside_word())
        {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `comments` (whole `# …` lines), then the records `rows` writes through `csv::Writer`
/// (fields quoted only when they hold a comma, a quote or a line break; quotes doubled).
pub fn csv_after_comments(
    comments: String,
    rows: impl FnOnce(&mut csv::Writer<Vec<u8>>) -> csv::Result<()>,
) -> String {
    let mut w = csv::Writer::from_writer(comments.into_bytes());
    // Writing into memory fails only on records of unequal length, which the callers'
    // fixed columns rule out.
    let _ = rows(&mut w);
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A run's result plus the optional CSV members of its directory.
#[derive(Debug, Clone, PartialEq)]
pub struct RunData {
    /// `result.json`.
    pub result: ResultFile,
    /// `tokens.csv`, when present.
    pub tokens: Option<TokenLog>,
    /// `telemetry.csv`, when present.
    pub telemetry: Option<Telemetry>,
}

impl RunData {
    /// A run with no CSV members.
    pub fn from_result(result: ResultFile) -> Self {
        Self {
            result,
            tokens: None,
            telemetry: None,
        }
    }

    /// Loads a result directory; absent CSV files are `None`, corrupt ones are errors.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let result = schema::load_result(dir)?;
        let tokens_path = dir.join(schema::TOKENS_FILE);
        let tokens = if tokens_path.exists() {
            Some(datafiles::read_tokens(&tokens_path)?)
        } else {
            None
        };
        let tel_path = dir.join(schema::TELEMETRY_FILE);
        let telemetry = if tel_path.exists() {
            Some(datafiles::read_telemetry(&tel_path)?)
        } else {
            None
        };
        Ok(Self {
            result,
            tokens,
            telemetry,
        })
    }
}

/// One figure of a run, as tables print it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricRow {
    /// `performance`, `accuracy`, `energy`, `thermal`.
    pub section: &'static str,
    /// Metric name, e.g. `latency_p50`.
    pub metric: String,
    /// Unit, e.g. `ms`.
    pub unit: &'static str,
    /// Value.
    pub value: f64,
    /// Lower bound of the 95% interval, when known.
    pub lo: Option<f64>,
    /// Upper bound of the 95% interval, when known.
    pub hi: Option<f64>,
    /// Sample size behind the figure, when known.
    pub n: Option<u64>,
}

fn row(
    section: &'static str,
    metric: impl Into<String>,
    unit: &'static str,
    value: f64,
    n: Option<u64>,
) -> MetricRow {
    MetricRow {
        section,
        metric: metric.into(),
        unit,
        value,
        lo: None,
        hi: None,
        n,
    }
}

fn with_ci(mut r: MetricRow, lo: f64, hi: f64) -> MetricRow {
    r.lo = Some(lo);
    r.hi = Some(hi);
    r
}

fn percentile_rows(
    out: &mut Vec<MetricRow>,
    name: &str,
    p: &stats::Percentiles,
    per_query: &[f64],
) {
    let median = match stats::bootstrap_ci(
        per_query,
        Statistic::Median,
        0.95,
        BOOTSTRAP_RESAMPLES,
        BOOTSTRAP_SEED,
    ) {
        Ok(ci) => with_ci(
            row("performance", format!("{name}_p50"), "ms", p.p50, Some(p.n)),
            ci.lo,
            ci.hi,
        ),
        Err(_) => row("performance", format!("{name}_p50"), "ms", p.p50, Some(p.n)),
    };
    out.push(row(
        "performance",
        format!("{name}_mean"),
        "ms",
        p.mean,
        Some(p.n),
    ));
    out.push(median);
    out.push(row(
        "performance",
        format!("{name}_p90"),
        "ms",
        p.p90,
        Some(p.n),
    ));
    out.push(row(
        "performance",
        format!("{name}_p99"),
        "ms",
        p.p99,
        Some(p.n),
    ));
    out.push(row(
        "performance",
        format!("{name}_max"),
        "ms",
        p.max,
        Some(p.n),
    ));
}

/// The headline figures of a run with their intervals and sample sizes.
pub fn metric_rows(r: &ResultFile) -> Vec<MetricRow> {
    let mut out = Vec::new();
    if let Some(p) = &r.performance {
        let n = Some(p.queries);
        out.push(row(
            "performance",
            "valid",
            "bool",
            if p.valid { 1.0 } else { 0.0 },
            None,
        ));
        out.push(row(
            "performance",
            "queries",
            "count",
            p.queries as f64,
            None,
        ));
        out.push(row("performance", "duration", "s", p.duration_s, None));
        out.push(row("performance", "qps", "1/s", p.qps, n));
        let tps: Vec<f64> = per_query_tokens_per_s(p);
        out.push(row("performance", "tokens_per_s", "1/s", p.tokens_per_s, n));
        if let Ok(ci) = stats::bootstrap_ci(
            &tps,
            Statistic::Median,
            0.95,
            BOOTSTRAP_RESAMPLES,
            BOOTSTRAP_SEED,
        ) {
            let r = row(
                "performance",
                "query_tokens_per_s_median",
                "1/s",
                ci.estimate,
                Some(ci.n),
            );
            out.push(with_ci(r, ci.lo, ci.hi));
        }
        let lat: Vec<f64> = p.per_query.iter().map(|q| q.latency_ms).collect();
        percentile_rows(&mut out, "latency", &p.latency_ms, &lat);
        if let Some(f) = TukeyFences::classify(&lat) {
            out.push(row(
                "performance",
                "latency_outliers",
                "count",
                f.outliers() as f64,
                Some(lat.len() as u64),
            ));
        }
        if let Some(t) = &p.ttft_ms {
            let v: Vec<f64> = p.per_query.iter().filter_map(|q| q.ttft_ms).collect();
            percentile_rows(&mut out, "ttft", t, &v);
        }
        if let Some(t) = &p.tpot_ms {
            let v: Vec<f64> = p.per_query.iter().filter_map(|q| q.tpot_ms).collect();
            percentile_rows(&mut out, "tpot", t, &v);
        }
        if let Some(t) = &p.itl_ms {
            out.push(row("performance", "itl_p50", "ms", t.p50, Some(t.n)));
            out.push(row("performance", "itl_p99", "ms", t.p99, Some(t.n)));
        }
    }
    if let Some(a) = &r.accuracy {
        out.push(with_ci(
            row("accuracy", "accuracy", "ratio", a.accuracy, Some(a.n)),
            a.ci95[0],
            a.ci95[1],
        ));
        for g in &a.per_category {
            let (lo, hi) = stats::wilson_interval(g.correct, g.n, stats::Z95);
            out.push(with_ci(
                row(
                    "accuracy",
                    format!("category:{}", g.name),
                    "ratio",
                    g.accuracy,
                    Some(g.n),
                ),
                lo,
                hi,
            ));
        }
    }
    if let Some(e) = &r.energy {
        let m = &e.mwh_per_dialogue_net;
        out.push(with_ci(
            row("energy", "mwh_per_dialogue_net", "mWh", m.mean, Some(m.n)),
            m.lo,
            m.hi,
        ));
        let g = &e.mwh_per_dialogue_gross;
        out.push(with_ci(
            row("energy", "mwh_per_dialogue_gross", "mWh", g.mean, Some(g.n)),
            g.lo,
            g.hi,
        ));
        out.push(row(
            "energy",
            "j_per_token",
            "J",
            e.j_per_token,
            Some(e.dialogues),
        ));
        out.push(row(
            "energy",
            "tokens_per_j",
            "1/J",
            e.tokens_per_j,
            Some(e.dialogues),
        ));
        out.push(row("energy", "idle_power", "mW", e.idle_power_mw, None));
    }
    if let Some(p) = r.performance.as_ref().and_then(|p| p.warmup.as_ref()) {
        out.push(row("warmup", "queries", "count", p.queries as f64, None));
        let lat: Vec<f64> = p.per_query.iter().map(|q| q.latency_ms).collect();
        if let Some(first) = lat.first() {
            out.push(row("warmup", "first_latency", "ms", *first, None));
        }
        if let Some(max) = lat.iter().copied().reduce(f64::max) {
            out.push(row(
                "warmup",
                "max_latency",
                "ms",
                max,
                Some(lat.len() as u64),
            ));
        }
    }
    if let Some(m) = &r.memory {
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        out.push(row("memory", "mlock", "bool", flag(m.mlock), None));
        out.push(row("memory", "prefault", "bool", flag(m.prefault), None));
        if let Some(f) = &m.page_faults {
            out.push(row("memory", "major_faults", "count", f.major as f64, None));
            out.push(row("memory", "minor_faults", "count", f.minor as f64, None));
        }
        if let Some(c) = &m.cold_start {
            let mut res = |name: &str, v: f64| {
                out.push(row("memory", format!("resident_{name}"), "ratio", v, None));
            };
            res("after_eviction", c.resident_after_eviction);
            if let Some(v) = c.resident_after_first_query {
                res("after_first_query", v);
            }
            res("at_end", c.resident_at_end);
            if let Some(v) = c.first_query_ttft_ms {
                out.push(row("memory", "cold_first_query_ttft", "ms", v, None));
            }
            if let Some(v) = c.first_query_latency_ms {
                out.push(row("memory", "cold_first_query_latency", "ms", v, None));
            }
        }
    }
    if let Some(t) = &r.thermal {
        out.push(row("thermal", "max_soc", "C", t.max_soc_c, None));
        out.push(row("thermal", "max_skin", "C", t.max_skin_c, None));
        out.push(row("thermal", "mean_skin", "C", t.mean_skin_c, None));
        out.push(row("thermal", "throttled", "s", t.throttled_s, None));
    }
    out
}

/// Tokens per second of each query (`tokens / latency`), skipping zero-latency queries.
pub fn per_query_tokens_per_s(p: &schema::Performance) -> Vec<f64> {
    p.per_query
        .iter()
        .filter(|q| q.latency_ms > 0.0)
        .map(|q| f64::from(q.tokens) / (q.latency_ms / 1000.0))
        .collect()
}

fn interval_text(r: &MetricRow) -> String {
    match (r.lo, r.hi) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
        _ => String::new(),
    }
}

/// Output formats of a single run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain text for terminals.
    Text,
    /// JSON: provenance plus the result.
    Json,
    /// CSV, one row per figure.
    Csv,
    /// Markdown (CI step summary).
    Markdown,
    /// Self-contained HTML with inline SVG plots.
    Html,
}

/// Renders one run into one format.
pub trait Exporter {
    /// File extension of the output, without the dot.
    fn extension(&self) -> &'static str;
    /// Renders the run.
    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String>;
}

/// The exporter for a format.
pub fn exporter(format: Format) -> Box<dyn Exporter> {
    match format {
        Format::Text => Box::new(TextExporter),
        Format::Json => Box::new(JsonExporter),
        Format::Csv => Box::new(CsvExporter),
        Format::Markdown => Box::new(MarkdownExporter),
        Format::Html => Box::new(HtmlExporter),
    }
}

/// Plain text.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextExporter;
/// JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonExporter;
/// CSV.
#[derive(Debug, Clone, Copy, Default)]
pub struct CsvExporter;
/// Markdown.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkdownExporter;
/// HTML.
#[derive(Debug, Clone, Copy, Default)]
pub struct HtmlExporter;

impl Exporter for TextExporter {
    fn extension(&self) -> &'static str {
        "txt"
    }

    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String> {
        let r = &run.result;
        let mut s = Provenance::new(&r.meta, ctx).comment_lines();
        let rows = metric_rows(r);
        let width = rows.iter().map(|r| r.metric.len()).max().unwrap_or(0);
        let mut section = "";
        for m in &rows {
            if m.section != section {
                section = m.section;
                let _ = writeln!(s, "\n{section}");
            }
            let n = m.n.map(|n| format!("n={n}")).unwrap_or_default();
            let line = format!(
                "  {:<width$}  {:>12} {:<5} {} {}",
                one_line(&m.metric),
                labels::value_text(m.unit, m.value),
                m.unit,
                interval_text(m),
                n
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
        if let Some(p) = &r.performance
            && !p.valid
        {
            let _ = writeln!(s, "\nINVALID: {}", one_line(&p.invalid_reasons.join("; ")));
        }
        for w in &r.warnings {
            let _ = writeln!(s, "warning: {}", one_line(w));
        }
        Ok(s)
    }
}

impl Exporter for JsonExporter {
    fn extension(&self) -> &'static str {
        "json"
    }

    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String> {
        #[derive(Serialize)]
        struct Out<'a> {
            provenance: Provenance,
            metrics: Vec<MetricRow>,
            result: &'a ResultFile,
        }
        let out = Out {
            provenance: Provenance::new(&run.result.meta, ctx),
            metrics: metric_rows(&run.result),
            result: &run.result,
        };
        serde_json::to_string_pretty(&out)
            .map(|s| s + "\n")
            .map_err(|source| ReportError::Json {
                path: "(rendered json)".into(),
                source,
            })
    }
}

impl Exporter for CsvExporter {
    fn extension(&self) -> &'static str {
        "csv"
    }

    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String> {
        let prov = Provenance::new(&run.result.meta, ctx);
        let s = prov.comment_lines();
        Ok(csv_after_comments(s, |w| {
            w.write_record([
                "device",
                "model_sha256",
                "git_commit",
                "section",
                "metric",
                "unit",
                "value",
                "lo",
                "hi",
                "n",
            ])?;
            let opt = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
            for m in metric_rows(&run.result) {
                w.write_record([
                    prov.device.clone(),
                    prov.model_sha256.clone(),
                    prov.git_commit.clone(),
                    m.section.to_string(),
                    m.metric.to_string(),
                    m.unit.to_string(),
                    m.value.to_string(),
                    opt(m.lo),
                    opt(m.hi),
                    m.n.map(|n| n.to_string()).unwrap_or_default(),
                ])?;
            }
            Ok(())
        }))
    }
}

/// Markdown table of provenance pairs, the settings in a collapsed block under it.
pub fn provenance_markdown(p: &Provenance) -> String {
    let mut s = String::from("| | |\n|---|---|\n");
    for (k, v) in p.pairs().into_iter().filter(|(k, _)| *k != "settings") {
        let _ = writeln!(s, "| {k} | {} |", escape_md(&v));
    }
    s.push('\n');
    s += &settings::settings_markdown(&p.settings);
    s
}

impl Exporter for MarkdownExporter {
    fn extension(&self) -> &'static str {
        "md"
    }

    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String> {
        let r = &run.result;
        let prov = Provenance::new(&r.meta, ctx);
        let mut s = format!(
            "# PocketPerf run: {} on {}\n\n",
            escape_md(&r.meta.model.name),
            escape_md(&r.label())
        );
        if let Some(p) = &r.performance {
            let verdict = if p.valid {
                "VALID".to_string()
            } else {
                format!("INVALID ({})", escape_md(&p.invalid_reasons.join("; ")))
            };
            let _ = writeln!(
                s,
                "**{}** {} — {}\n",
                escape_md(&p.scenario),
                escape_md(&p.mode),
                verdict
            );
        }
        s.push_str(
            "| section | metric | value | unit | 95% interval | n |\n|---|---|---:|---|---|---:|\n",
        );
        for m in metric_rows(r) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                m.section,
                escape_md(&m.metric),
                labels::value_text(m.unit, m.value),
                m.unit,
                interval_text(&m),
                m.n.map(|n| n.to_string()).unwrap_or_default()
            );
        }
        if !r.warnings.is_empty() {
            s.push_str("\n**Warnings**\n\n");
            for w in &r.warnings {
                let _ = writeln!(s, "- {}", escape_md(w));
            }
        }
        s.push_str("\n<details><summary>Provenance</summary>\n\n");
        s.push_str(&provenance_markdown(&prov));
        s.push_str("\n</details>\n");
        Ok(s)
    }
}

impl Exporter for HtmlExporter {
    fn extension(&self) -> &'static str {
        "html"
    }

    fn render(&self, run: &RunData, ctx: &RenderContext) -> Result<String> {
        render_html(run, ctx)
    }
}
