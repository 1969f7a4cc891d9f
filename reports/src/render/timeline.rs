//! The run timeline of the HTML report: tokens/s, SoC and skin temperature and CPU/GPU
//! frequencies as stacked panels of one chart sharing the x axis (seconds since the first
//! telemetry sample), with readable legend names ([`column_label`]).
//!
//! `tokens.csv` counts from the first query's issue and `telemetry.csv` from the first
//! sample; both files carry a `started_utc` comment, and when both parse, token times are
//! shifted by their difference so the panels line up in time. Without both, token times are
//! plotted as recorded.

use chrono::DateTime;

use super::labels::column_label;
use crate::datafiles::{Telemetry, TokenLog};
use crate::plots::{Panel, Series};

/// Seconds from the telemetry's start to the token log's start, from their `started_utc`
/// comments; `None` unless both are RFC 3339 times.
pub fn token_offset_s(tokens: &TokenLog, telemetry: &Telemetry) -> Option<f64> {
    let at = |meta: &std::collections::BTreeMap<String, String>| {
        DateTime::parse_from_rfc3339(meta.get("started_utc")?).ok()
    };
    let (tok, tel) = (at(&tokens.meta)?, at(&telemetry.meta)?);
    let ns = (tok - tel).num_nanoseconds()?;
    Some(ns as f64 / 1e9)
}

fn columns(t: &Telemetry, names: &[&str], scale: f64) -> Vec<Series> {
    names
        .iter()
        .filter_map(|&name| {
            let col = t.column(name)?;
            Some(Series {
                name: column_label(name),
                points: t
                    .points(col)
                    .into_iter()
                    .map(|(x, y)| (x, y * scale))
                    .collect(),
            })
        })
        .collect()
}

fn matching(t: &Telemetry, prefix: &str, suffix: &str) -> Vec<String> {
    t.columns_matching(prefix, suffix)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The timeline's panels: tokens/s (`tokens_per_s` points, x in seconds since the token log's
/// start, moved by `offset_s`), temperatures (`temp.soc.c`, `temp.skin.c`, `gov.temp.c`; every
/// `temp.*.c` zone when none of those exists) and frequencies in MHz (`cpufreq.*.khz`,
/// `gpufreq.khz`). Panels without data are left out.
pub fn timeline_panels(
    tokens_per_s: &[(f64, f64)],
    window_s: f64,
    offset_s: f64,
    telemetry: Option<&Telemetry>,
) -> Vec<Panel> {
    let mut panels = Vec::new();
    if !tokens_per_s.is_empty() {
        panels.push(Panel {
            y_label: "tokens/s".into(),
            series: vec![Series {
                name: format!("tokens/s ({window_s} s windows)"),
                points: tokens_per_s
                    .iter()
                    .map(|&(x, y)| (x + offset_s, y))
                    .collect(),
            }],
        });
    }
    let Some(t) = telemetry else {
        return panels;
    };
    let mut temps = columns(t, &["temp.soc.c", "temp.skin.c", "gov.temp.c"], 1.0);
    if temps.is_empty() {
        let zones = matching(t, "temp.", ".c");
        let zones: Vec<&str> = zones.iter().map(String::as_str).collect();
        temps = columns(t, &zones, 1.0);
    }
    panels.push(Panel {
        y_label: "°C".into(),
        series: temps,
    });
    let mut freqs = matching(t, "cpufreq.", ".khz");
    freqs.push("gpufreq.khz".into());
    let freqs: Vec<&str> = freqs.iter().map(String::as_str).collect();
    panels.push(Panel {
        y_label: "MHz".into(),
        series: columns(t, &freqs, 1e-3),
    });
    panels.retain(|p| p.series.iter().any(|s| !s.points.is_empty()));
    panels
}
