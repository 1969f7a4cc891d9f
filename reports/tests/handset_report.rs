//! The report a handset engineer reads: one time axis for tokens/s, temperatures and
//! frequencies with readable legend names, step CDFs with percentile markers, integers and
//! flags printed as such, and the settings in a collapsed block.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use pocketperf_reports::datafiles::{Telemetry, TokenEvent, TokenLog};
use pocketperf_reports::plots::{Marker, ecdf_steps, step_cdf_chart};
use pocketperf_reports::render::labels::{bool_text, column_label, int_text, value_text};
use pocketperf_reports::render::settings::{settings_markdown, settings_pairs};
use pocketperf_reports::render::timeline::token_offset_s;
use pocketperf_reports::render::{Format, RunData, exporter};

/// `(stroke colour, points)` of every `<polyline>` in an SVG, points in pixels.
fn polylines(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = tag[start..].find('"')?;
        Some(tag[start..start + len].to_string())
    };
    svg.split("<polyline")
        .skip(1)
        .map(|rest| {
            let tag = &rest[..rest.find("/>").unwrap()];
            let points = attr(tag, "points")
                .unwrap()
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            (attr(tag, "stroke").unwrap(), points)
        })
        .collect()
}

/// The inline SVG of the figure captioned `caption` in a page.
fn figure_svg<'a>(html: &'a str, caption: &str) -> &'a str {
    let at = html
        .find(&format!("<figcaption>{caption}</figcaption>"))
        .unwrap_or_else(|| panic!("no figure `{caption}`"));
    let rest = &html[at..];
    &rest[rest.find("<svg").unwrap()..rest.find("</svg>").unwrap()]
}

fn telemetry(started_utc: &str) -> Telemetry {
    let t_s: Vec<f64> = (0..6).map(f64::from).collect();
    let col = |f: fn(f64) -> f64| t_s.iter().map(|&t| Some(f(t))).collect::<Vec<_>>();
    Telemetry {
        meta: BTreeMap::from([("started_utc".to_string(), started_utc.to_string())]),
        columns: vec![
            ("temp.cpu-0-0-0.c".into(), col(|t| 50.0 + t)),
            ("temp.soc.c".into(), col(|t| 52.0 + t)),
            ("temp.skin.c".into(), col(|t| 30.0 + t / 10.0)),
            ("cpufreq.policy0.khz".into(), col(|_| 2_016_000.0)),
            ("cpufreq.policy7.khz".into(), col(|t| 3_302_400.0 - t * 1e5)),
            ("gpufreq.khz".into(), col(|_| 903_000.0)),
            ("power.total.mw".into(), col(|t| 4000.0 + t)),
        ],
        t_s,
    }
}

fn tokens(started_utc: &str) -> TokenLog {
    TokenLog {
        meta: BTreeMap::from([("started_utc".to_string(), started_utc.to_string())]),
        events: (0..40)
            .map(|i| TokenEvent {
                query: i / 10,
                token: (i % 10) as u32,
                t_ms: f64::from(i as u32) * 100.0,
            })
            .collect(),
    }
}

fn handset_run() -> RunData {
    RunData {
        result: common::hand_result(),
        tokens: Some(tokens("2026-01-01T10:00:02Z")),
        telemetry: Some(telemetry("2026-01-01T10:00:00Z")),
    }
}

fn html(run: &RunData) -> String {
    exporter(Format::Html)
        .render(run, &common::fixed_ctx())
        .unwrap()
}

#[test]
fn telemetry_columns_get_readable_names() {
    for (column, label) in [
        ("temp.soc.c", "SoC temperature (°C)"),
        ("temp.skin.c", "skin temperature (°C)"),
        ("temp.cpu-0-0-0.c", "cpu-0-0-0 temperature (°C)"),
        ("cpufreq.policy0.khz", "CPU0 cluster frequency (MHz)"),
        ("cpumax.policy7.khz", "CPU7 cluster frequency cap (MHz)"),
        ("gpufreq.khz", "GPU frequency (MHz)"),
        ("power.total.mw", "total power (mW)"),
        ("power.vdd_cpu.mw", "vdd_cpu power (mW)"),
        ("rss.kib", "resident memory (MiB)"),
        ("supply.usb.online", "supply.usb.online"),
    ] {
        assert_eq!(column_label(column), label, "{column}");
    }
}

#[test]
fn timeline_puts_tokens_temperatures_and_frequencies_on_one_axis() {
    let page = html(&handset_run());
    let svg = figure_svg(
        &page,
        "Tokens/s, temperatures and frequencies over run time",
    );
    for name in [
        "tokens/s (1 s windows)",
        "SoC temperature (°C)",
        "skin temperature (°C)",
        "CPU0 cluster frequency (MHz)",
        "CPU7 cluster frequency (MHz)",
        "GPU frequency (MHz)",
    ] {
        assert!(svg.contains(name), "timeline legend lacks `{name}`");
    }
    // Named, not keyed; SoC and skin chosen over the per-zone columns.
    assert!(!svg.contains("temp.soc.c") && !svg.contains("cpufreq."));
    assert!(!svg.contains("cpu-0-0-0"));
    // Six series, six colours: the data polylines are the 2-px ones (the legend swatches 3 px).
    let strokes: Vec<String> = svg
        .split("<polyline")
        .skip(1)
        .filter(|t| t[..t.find("/>").unwrap()].contains("stroke-width=\"2\""))
        .map(|t| {
            let s = t.find("stroke=\"").unwrap() + 8;
            t[s..s + t[s..].find('"').unwrap()].to_string()
        })
        .collect();
    assert_eq!(strokes.len(), 6, "{strokes:?}");
    assert_eq!(
        strokes.iter().collect::<BTreeSet<_>>().len(),
        6,
        "{strokes:?}"
    );
    // The per-sensor charts name their lines the same way.
    assert!(figure_svg(&page, "Temperatures (°C)").contains("SoC temperature (°C)"));
}

#[test]
fn token_times_are_moved_onto_the_telemetry_clock() {
    let (tok, tel) = (
        tokens("2026-01-01T10:00:02.5Z"),
        telemetry("2026-01-01T10:00:00Z"),
    );
    assert_eq!(token_offset_s(&tok, &tel), Some(2.5));
    assert_eq!(token_offset_s(&tok, &telemetry("not a time")), None);
    // With a 2 s offset the tokens/s line (windows centred at 0.5 … 3.5 s) starts at 2.5 s:
    // in the shared x axis it begins right of the telemetry lines, which start at 0 s.
    let page = html(&handset_run());
    let svg = figure_svg(
        &page,
        "Tokens/s, temperatures and frequencies over run time",
    );
    let lines: Vec<_> = polylines(svg)
        .into_iter()
        .filter(|(_, p)| p.len() > 2)
        .collect();
    let first_x = |i: usize| lines[i].1[0].0;
    // Series order: tokens/s, then the telemetry lines, all spanning one x scale.
    let tel_start = first_x(1);
    let tel_end = lines[1].1.last().unwrap().0;
    let px_per_s = (tel_end - tel_start) / 5.0;
    let tok_start = first_x(0);
    assert!(
        ((tok_start - tel_start) / px_per_s - 2.5).abs() < 0.05,
        "tokens start {tok_start}, telemetry {tel_start}, {px_per_s} px/s"
    );
}

#[test]
fn ecdf_is_drawn_as_steps() {
    // Sorted 1, 2, 2, 3: F jumps 0 → ¼ at 1, ¼ → ¾ at 2 (a tie), ¾ → 1 at 3.
    assert_eq!(
        ecdf_steps(&[3.0, 2.0, 1.0, 2.0, f64::NAN]),
        vec![
            (1.0, 0.0),
            (1.0, 0.25),
            (2.0, 0.25),
            (2.0, 0.75),
            (3.0, 0.75),
            (3.0, 1.0)
        ]
    );
    assert!(ecdf_steps(&[f64::NAN]).is_empty());
}

#[test]
fn cdf_chart_is_a_step_function_with_three_percentile_markers() {
    let values: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i * i)).collect();
    let markers: Vec<Marker> = [("p50", 200.0), ("p90", 424.0), ("p99", 461.0)]
        .into_iter()
        .map(|(l, x)| Marker {
            label: format!("{l} {x:.1} ms"),
            x,
        })
        .collect();
    let svg = step_cdf_chart("CDF", "ms", &values, &markers)
        .unwrap()
        .unwrap();
    let lines = polylines(&svg);
    // The curve: 2 vertices per distinct value, every segment vertical or horizontal.
    let curve = &lines.iter().find(|(_, p)| p.len() == 40).expect("curve").1;
    let (mut rises, mut treads) = (0, 0);
    for w in curve.windows(2) {
        let (dx, dy) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
        assert!(dx == 0.0 || dy == 0.0, "sloped segment {w:?}");
        assert!(dx >= 0.0 && dy <= 0.0, "not monotone {w:?}");
        rises += usize::from(dx == 0.0 && dy != 0.0);
        treads += usize::from(dy == 0.0 && dx != 0.0);
    }
    assert_eq!((rises, treads), (20, 19));
    // Three vertical two-point markers, left to right as p50 < p90 < p99, spanning F = 0 … 1
    // (the curve's own bottom and top).
    // (Axis lines and ticks are polylines too; a marker is one spanning the curve's height.)
    let (bottom, top) = (curve[0].1, curve.last().unwrap().1);
    let marks: Vec<&Vec<(f64, f64)>> = lines
        .iter()
        .map(|(_, p)| p)
        .filter(|p| p.len() == 2 && p[0].0 == p[1].0 && (p[0].1, p[1].1) == (bottom, top))
        .collect();
    assert_eq!(marks.len(), 3, "{marks:?}");
    assert!(marks[0][0].0 < marks[1][0].0 && marks[1][0].0 < marks[2][0].0);
    // The p50 marker sits on the curve's rise at 200 ms (value index 10).
    assert_eq!(marks[0][0].0, curve[20].0);
    for label in ["p50 200.0 ms", "p90 424.0 ms", "p99 461.0 ms"] {
        assert!(svg.contains(label), "{label}");
    }
}

#[test]
fn report_marks_the_recorded_percentiles_on_each_cdf() {
    let page = html(&handset_run());
    // Hand run: latency p50/p90/p99 = 364/420/434, TTFT 130/150/155, TPOT 26/30/31 ms.
    for (caption, labels) in [
        (
            "Query latency CDF",
            ["p50 364.0 ms", "p90 420.0 ms", "p99 434.0 ms"],
        ),
        (
            "Time to first token CDF",
            ["p50 130.0 ms", "p90 150.0 ms", "p99 155.0 ms"],
        ),
        (
            "Time per output token CDF",
            ["p50 26.0 ms", "p90 30.0 ms", "p99 31.0 ms"],
        ),
    ] {
        let svg = figure_svg(&page, caption);
        for l in labels {
            assert!(svg.contains(l), "{caption}: {l}");
        }
    }
}

#[test]
fn integers_and_flags_print_as_such() {
    assert_eq!(int_text(64.0), "64");
    assert_eq!(int_text(0.0), "0");
    assert_eq!(int_text(2.5), "2.500");
    assert_eq!(int_text(f64::NAN), "-");
    assert_eq!(bool_text(1.0), "true");
    assert_eq!(bool_text(0.0), "false");
    assert_eq!(bool_text(f64::INFINITY), "-");
    assert_eq!(value_text("count", 12.0), "12");
    assert_eq!(value_text("bool", 1.0), "true");
    assert_eq!(value_text("ms", 12.0), "12.000");
    let md = exporter(Format::Markdown)
        .render(&handset_run(), &common::fixed_ctx())
        .unwrap();
    assert!(md.contains("| performance | valid | true | bool |"), "{md}");
    assert!(
        md.contains("| performance | queries | 12 | count |"),
        "{md}"
    );
    assert!(
        md.contains("| performance | latency_outliers | 0 | count |"),
        "{md}"
    );
    let page = html(&handset_run());
    assert!(page.contains("<td>valid</td><td class=\"n\">true</td>"));
    assert!(page.contains("<td>queries</td><td class=\"n\">12</td>"));
}

#[test]
fn settings_are_a_collapsed_table_not_a_line() {
    let page = html(&handset_run());
    let open = "<details class=\"settings\"><summary>Settings</summary>";
    let start = page.find(open).expect("settings block");
    let block = &page[start..start + page[start..].find("</details>").unwrap()];
    for row in [
        "<tr><th>scenario</th><td>SingleStream</td></tr>",
        "<tr><th>seed</th><td>7</td></tr>",
        "<tr><th>suite</th><td>quick</td></tr>",
    ] {
        assert!(block.contains(row), "{row}");
    }
    // The provenance table no longer carries the one-line JSON.
    assert!(!page.contains("<th>settings</th>"));
    assert!(!page.contains("{&quot;scenario&quot;"));

    let md = exporter(Format::Markdown)
        .render(&handset_run(), &common::fixed_ctx())
        .unwrap();
    let start = md.find("<details><summary>Settings</summary>").unwrap();
    let block = &md[start..];
    let json = &block[block.find("```json\n").unwrap() + 8..block.find("\n```\n").unwrap()];
    let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(parsed, common::hand_result().meta.settings);
    assert!(json.lines().count() > 3, "not pretty-printed: {json}");
    assert!(!md.contains("| settings |"));
}

#[test]
fn settings_flatten_to_dotted_keys_and_fences_hold() {
    let v = serde_json::json!({
        "cli": {"engine": {"threads": 0, "backend": "cpu"}, "out": null},
        "list": [1, 2],
        "flag": true
    });
    let got: BTreeSet<(String, String)> = settings_pairs(&v).into_iter().collect();
    let want: BTreeSet<(String, String)> = [
        ("cli.engine.threads", "0"),
        ("cli.engine.backend", "cpu"),
        ("cli.out", "null"),
        ("list", "[1,2]"),
        ("flag", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);
    // A setting holding a fence cannot end the code block early.
    let md = settings_markdown(r#"{"prompt":"a ``` b ```` c"}"#);
    let mut blocks = Vec::new();
    let mut in_code = false;
    for ev in pulldown_cmark::Parser::new(&md) {
        match ev {
            pulldown_cmark::Event::Start(pulldown_cmark::Tag::CodeBlock(_)) => in_code = true,
            pulldown_cmark::Event::End(_) if in_code => in_code = false,
            pulldown_cmark::Event::Text(t) if in_code => blocks.push(t.to_string()),
            _ => {}
        }
    }
    assert_eq!(blocks.concat(), "{\n  \"prompt\": \"a ``` b ```` c\"\n}\n");
}
