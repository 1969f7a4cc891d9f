//! The self-contained HTML report of one run: provenance, headline table with intervals,
//! inline SVG plots (the run timeline of tokens/s, temperatures and frequencies on one time
//! axis, step CDFs of latency/TTFT/TPOT with p50/p90/p99 markers, TTFT/TPOT histograms,
//! tokens/s over time, temperatures, frequencies, power and cumulative energy, RSS),
//! accuracy per category and subject, energy per dialogue, warnings. Every string that comes
//! from a file is escaped; the page loads nothing from the network.

use std::fmt::Write as _;

use super::labels::{column_label, value_text};
use super::settings::{parse as parse_settings, settings_pairs};
use super::timeline::{timeline_panels, token_offset_s};
use super::{Provenance, RenderContext, RunData, escape_html, interval_text, metric_rows, num};
use crate::datafiles::{Telemetry, TokenLog};
use crate::error::Result;
use crate::plots::{self, Marker, Series};
use crate::stats;

/// Inline stylesheet shared by the run, compare and gate pages.
pub(crate) const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
.bad{color:#b00020;font-weight:bold}.good{color:#1b5e20;font-weight:bold}\
figure{margin:1em 0}figcaption{font-weight:bold}pre{white-space:pre-wrap;word-break:break-all}\
td{overflow-wrap:anywhere}svg{max-width:100%;height:auto}";

/// Page head with a title (escaped here), in the reports' style.
pub fn page_start(title: &str) -> String {
    page_start_styled(title, STYLE)
}

/// Page head with a title (escaped here) and a style sheet of the caller's: every page the
/// project writes (run report, comparison, soak robustness, governor simulation) opens here,
/// self-contained, loading nothing from the network.
pub fn page_start_styled(title: &str, style: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <title>{}</title>\n<style>{style}</style>\n</head>\n<body>\n",
        escape_html(title)
    )
}

/// The end of a page opened with [`page_start`].
pub fn page_end() -> &'static str {
    "</body>\n</html>\n"
}

/// Provenance as an HTML table, the settings in a collapsed block under it.
pub(crate) fn provenance_table(p: &Provenance) -> String {
    let mut s = String::from("<table class=\"provenance\">\n");
    for (k, v) in p.pairs().into_iter().filter(|(k, _)| *k != "settings") {
        let _ = writeln!(s, "<tr><th>{k}</th><td>{}</td></tr>", escape_html(&v));
    }
    s.push_str("</table>\n");
    s += &settings_html(&p.settings);
    s
}

/// The collapsed settings block of a provenance's compact settings JSON: one table row per
/// setting.
pub(crate) fn settings_html(settings_json: &str) -> String {
    let mut s = String::from(
        "<details class=\"settings\"><summary>Settings</summary>\n<table class=\"settings\">\n",
    );
    for (k, v) in settings_pairs(&parse_settings(settings_json)) {
        let _ = writeln!(
            s,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape_html(&k),
            escape_html(&v)
        );
    }
    s.push_str("</table>\n</details>\n");
    s
}

/// A figure with an HTML caption around an SVG (or a note when there was nothing to plot).
pub fn figure(caption: &str, svg: Option<String>) -> String {
    match svg {
        Some(svg) => format!(
            "<figure><figcaption>{}</figcaption>\n{svg}\n</figure>\n",
            escape_html(caption)
        ),
        None => String::new(),
    }
}

/// Tokens generated per second over time, in windows of `window_s` seconds.
pub fn tokens_per_s_over_time(tokens: &TokenLog, window_s: f64) -> Vec<(f64, f64)> {
    if tokens.events.is_empty() || window_s.is_nan() || window_s <= 0.0 {
        return Vec::new();
    }
    let end_s = tokens.events.iter().map(|e| e.t_ms).fold(0.0f64, f64::max) / 1000.0;
    let windows = ((end_s / window_s).floor() as usize + 1).min(100_000);
    let mut counts = vec![0u64; windows];
    for e in &tokens.events {
        if e.t_ms.is_finite() && e.t_ms >= 0.0 {
            let i = ((e.t_ms / 1000.0 / window_s).floor() as usize).min(windows - 1);
            counts[i] += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| ((i as f64 + 0.5) * window_s, c as f64 / window_s))
        .collect()
}

/// Cumulative energy in joules from a power column (mW), trapezoidal rule.
pub fn cumulative_energy_j(t_s: &[f64], power_mw: &[Option<f64>]) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> = t_s
        .iter()
        .zip(power_mw)
        .filter_map(|(&t, p)| p.map(|p| (t, p)))
        .collect();
    let mut out = Vec::with_capacity(pts.len());
    let mut e = 0.0;
    for (i, &(t, p)) in pts.iter().enumerate() {
        if i > 0 {
            let (t0, p0) = pts[i - 1];
            e += (t - t0) * (p + p0) / 2.0 / 1000.0;
        }
        out.push((t, e));
    }
    out
}

fn telemetry_series(t: &Telemetry, prefix: &str, suffix: &str, scale: f64) -> Vec<Series> {
    t.columns_matching(prefix, suffix)
        .map(|(name, col)| Series {
            name: column_label(name),
            points: t
                .points(col)
                .into_iter()
                .map(|(x, y)| (x, y * scale))
                .collect(),
        })
        .collect()
}

fn telemetry_plots(t: &Telemetry) -> Result<String> {
    let mut s = String::new();
    let mut temps = telemetry_series(t, "temp.", ".c", 1.0);
    temps.extend(telemetry_series(t, "gov.temp.c", "", 1.0));
    s += &figure(
        "Temperatures (°C)",
        plots::line_chart("Temperatures", "time (s)", "°C", &temps)?,
    );
    let mut freqs = telemetry_series(t, "cpufreq.", ".khz", 1e-3);
    freqs.extend(telemetry_series(t, "gpufreq.khz", "", 1e-3));
    s += &figure(
        "Frequencies (MHz)",
        plots::line_chart("Frequencies", "time (s)", "MHz", &freqs)?,
    );
    let power = telemetry_series(t, "power.", ".mw", 1.0);
    s += &figure(
        "Power (mW)",
        plots::line_chart("Power", "time (s)", "mW", &power)?,
    );
    let energy = match (t.column("energy.total.mj"), t.column("power.total.mw")) {
        (Some(e), _) => {
            let pts = t.points(e);
            let base = pts.first().map_or(0.0, |p| p.1);
            pts.into_iter()
                .map(|(x, y)| (x, (y - base) / 1000.0))
                .collect()
        }
        (None, Some(p)) => cumulative_energy_j(&t.t_s, p),
        (None, None) => Vec::new(),
    };
    let energy = vec![Series {
        name: String::new(),
        points: energy,
    }];
    s += &figure(
        "Cumulative energy (J)",
        plots::line_chart("Cumulative energy", "time (s)", "J", &energy)?,
    );
    let rss = telemetry_series(t, "rss.kib", "", 1.0 / 1024.0);
    s += &figure(
        "Resident memory (MiB)",
        plots::line_chart("RSS", "time (s)", "MiB", &rss)?,
    );
    Ok(s)
}

/// Markers at the p50, p90 and p99 of a percentile summary (LoadGen's definition, the
/// figures of the summary table), labelled `p50 364.0 ms`.
pub(crate) fn percentile_markers(p: Option<&stats::Percentiles>) -> Vec<Marker> {
    let Some(p) = p else {
        return Vec::new();
    };
    [("p50", p.p50), ("p90", p.p90), ("p99", p.p99)]
        .into_iter()
        .map(|(name, x)| Marker {
            label: format!("{name} {x:.1} ms"),
            x,
        })
        .collect()
}

/// The tokens/s line chart and the combined timeline (tokens/s, temperatures, frequencies on
/// one time axis).
fn run_timeline(run: &RunData) -> Result<String> {
    let mut s = String::new();
    let (mut tps, mut window_s, mut offset_s) = (Vec::new(), 1.0, 0.0);
    if let Some(tokens) = &run.tokens {
        // About a hundred windows over the run, none shorter than a second.
        let end_s = tokens.events.iter().map(|e| e.t_ms).fold(0.0f64, f64::max) / 1000.0;
        window_s = (end_s / 100.0).max(1.0).round();
        tps = tokens_per_s_over_time(tokens, window_s);
        let series = vec![Series {
            name: String::new(),
            points: tps.clone(),
        }];
        s += &figure(
            &format!("Tokens per second over time ({window_s} s windows)"),
            plots::line_chart("Tokens/s", "time (s)", "tokens/s", &series)?,
        );
        if let Some(t) = &run.telemetry {
            offset_s = token_offset_s(tokens, t).unwrap_or(0.0);
        }
    }
    let panels = timeline_panels(&tps, window_s, offset_s, run.telemetry.as_ref());
    // One panel alone is the chart above or below; the timeline is for seeing them together.
    if panels.len() > 1 {
        let timeline = figure(
            "Tokens/s, temperatures and frequencies over run time",
            plots::timeline_chart("Run timeline", "run time (s)", &panels)?,
        );
        s = format!("<h2>Run timeline</h2>\n{timeline}{s}");
    }
    Ok(s)
}

/// Renders the HTML report of one run.
pub fn render_html(run: &RunData, ctx: &RenderContext) -> Result<String> {
    let r = &run.result;
    let prov = Provenance::new(&r.meta, ctx);
    let mut s = page_start(&format!(
        "PocketPerf: {} on {}",
        r.meta.model.name,
        r.label()
    ));
    let _ = writeln!(
        s,
        "<h1>PocketPerf run: {} on {}</h1>",
        escape_html(&r.meta.model.name),
        escape_html(&r.label())
    );
    if let Some(p) = &r.performance {
        let (class, verdict) = if p.valid {
            ("good", "VALID")
        } else {
            ("bad", "INVALID")
        };
        let _ = writeln!(
            s,
            "<p>{} / {}: <span class=\"{class}\">{verdict}</span></p>",
            escape_html(&p.scenario),
            escape_html(&p.mode)
        );
        if !p.invalid_reasons.is_empty() {
            s.push_str("<ul>");
            for reason in &p.invalid_reasons {
                let _ = write!(s, "<li>{}</li>", escape_html(reason));
            }
            s.push_str("</ul>\n");
        }
    }
    if !r.warnings.is_empty() {
        s.push_str("<h2>Warnings</h2>\n<ul>\n");
        for w in &r.warnings {
            let _ = writeln!(s, "<li>{}</li>", escape_html(w));
        }
        s.push_str("</ul>\n");
    }

    s.push_str("<h2>Summary</h2>\n<table>\n<tr><th>section</th><th>metric</th><th>value</th><th>unit</th><th>95% interval</th><th>n</th></tr>\n");
    for m in metric_rows(r) {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            m.section,
            escape_html(&m.metric),
            value_text(m.unit, m.value),
            m.unit,
            interval_text(&m),
            m.n.map(|n| n.to_string()).unwrap_or_default()
        );
    }
    s.push_str("</table>\n<p>Percentiles follow LoadGen (sorted[floor(n·p)]); intervals of medians are seeded percentile bootstraps; accuracy intervals are Wilson score intervals. Outliers (Tukey fences) are counted, never removed.</p>\n");

    s += &run_timeline(run)?;
    if let Some(p) = r.performance.as_ref().filter(|p| !p.per_query.is_empty()) {
        s.push_str("<h2>Latency</h2>\n");
        let lat: Vec<f64> = p.per_query.iter().map(|q| q.latency_ms).collect();
        let ttft: Vec<f64> = p.per_query.iter().filter_map(|q| q.ttft_ms).collect();
        let tpot: Vec<f64> = p.per_query.iter().filter_map(|q| q.tpot_ms).collect();
        for (caption, title, axis, values, pct) in [
            (
                "Query latency CDF",
                "Latency CDF",
                "latency (ms)",
                &lat,
                Some(&p.latency_ms),
            ),
            (
                "Time to first token CDF",
                "TTFT CDF",
                "TTFT (ms)",
                &ttft,
                p.ttft_ms.as_ref(),
            ),
            (
                "Time per output token CDF",
                "TPOT CDF",
                "TPOT (ms)",
                &tpot,
                p.tpot_ms.as_ref(),
            ),
        ] {
            s += &figure(
                caption,
                plots::step_cdf_chart(title, axis, values, &percentile_markers(pct))?,
            );
        }
        s += &figure(
            "Time to first token",
            plots::histogram("TTFT", "TTFT (ms)", &ttft, 30)?,
        );
        s += &figure(
            "Time per output token",
            plots::histogram("TPOT", "TPOT (ms)", &tpot, 30)?,
        );
        if let Some(f) = stats::TukeyFences::classify(&lat) {
            let _ = writeln!(
                s,
                "<p>Latency outliers (Tukey): {} low severe, {} low mild, {} high mild, {} high severe of {} (fences {} / {} / {} / {} ms).</p>",
                f.n_low_severe,
                f.n_low_mild,
                f.n_high_mild,
                f.n_high_severe,
                lat.len(),
                num(f.low_severe),
                num(f.low_mild),
                num(f.high_mild),
                num(f.high_severe)
            );
        }
    }
    if let Some(t) = &run.telemetry {
        let plots = telemetry_plots(t)?;
        if !plots.is_empty() {
            s.push_str("<h2>Telemetry</h2>\n");
            s += &plots;
        }
    }

    if let Some(a) = &r.accuracy {
        let _ = writeln!(
            s,
            "<h2>Accuracy</h2>\n<p>{} ({}, {}-shot): {} of {} = {} [{}, {}]</p>",
            escape_html(&a.dataset),
            escape_html(&a.mode),
            a.shots,
            a.correct,
            a.n,
            num(a.accuracy),
            num(a.ci95[0]),
            num(a.ci95[1])
        );
        for (title, groups) in [
            ("Per category", &a.per_category),
            ("Per subject", &a.per_subject),
        ] {
            if groups.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "<h3>{title}</h3>\n<table><tr><th>group</th><th>correct</th><th>n</th><th>accuracy</th><th>95% Wilson</th></tr>"
            );
            for g in groups.iter() {
                let (lo, hi) = stats::wilson_interval(g.correct, g.n, stats::Z95);
                let _ = writeln!(
                    s,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>[{}, {}]</td></tr>",
                    escape_html(&g.name),
                    g.correct,
                    g.n,
                    num(g.accuracy),
                    num(lo),
                    num(hi)
                );
            }
            s.push_str("</table>\n");
        }
        let wrong: Vec<_> = a
            .per_question
            .iter()
            .filter(|q| !q.correct)
            .take(20)
            .collect();
        if !wrong.is_empty() {
            s.push_str("<h3>First incorrect answers</h3>\n<table><tr><th>subject</th><th>row</th><th>answer</th><th>choice</th><th>generated</th></tr>\n");
            for q in wrong {
                let _ = writeln!(
                    s,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
                    escape_html(&q.subject),
                    q.row,
                    escape_html(&q.answer.to_string()),
                    escape_html(&q.choice.map(String::from).unwrap_or_default()),
                    escape_html(q.generated.as_deref().unwrap_or(""))
                );
            }
            s.push_str("</table>\n");
        }
    }
    if let Some(e) = &r.energy {
        let what = if e.basis == "queries" {
            format!(
                "{} J per token; a 200-token dialogue equivalent {} mWh net ({} queries metered one by one)",
                num(e.j_per_token),
                num(e.mwh_per_dialogue_net.mean),
                e.per_query.len()
            )
        } else {
            format!("{} dialogues", e.dialogues)
        };
        let _ = writeln!(
            s,
            "<h2>Energy</h2>\n<p>Meter {} ({}), idle {} mW, {}.</p>",
            escape_html(&e.meter),
            if e.reliable {
                "reliable"
            } else {
                "<span class=\"bad\">unreliable</span>"
            },
            num(e.idle_power_mw),
            what
        );
        let net: Vec<f64> = e.per_dialogue.iter().map(|d| d.net_mwh).collect();
        if !net.is_empty() {
            s += &figure(
                "Net energy per dialogue (mWh)",
                plots::histogram("Energy per dialogue", "net mWh", &net, 20)?,
            );
        }
    }
    if let Some(g) = &r.governor {
        let _ = writeln!(
            s,
            "<h2>Governor</h2>\n<pre>{}</pre>",
            escape_html(&serde_json::to_string_pretty(g).unwrap_or_default())
        );
    }
    if let Some(rb) = &r.robustness {
        let _ = writeln!(
            s,
            "<h2>Robustness</h2>\n<pre>{}</pre>",
            escape_html(&serde_json::to_string_pretty(rb).unwrap_or_default())
        );
    }
    s.push_str("<h2>Provenance</h2>\n");
    s += &provenance_table(&prov);
    s.push_str(page_end());
    Ok(s)
}
