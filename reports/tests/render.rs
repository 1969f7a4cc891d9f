//! Renderer snapshots on a fixed hand-made run, HTML escaping of hostile text, and the
//! self-contained report written into a result directory.

mod common;

use pocketperf_reports::datafiles::{Telemetry, TokenEvent, TokenLog};
use pocketperf_reports::render::{Format, RunData, exporter};
use pocketperf_reports::{write_report_at, write_result};

fn render(format: Format) -> String {
    let run = RunData::from_result(common::hand_result());
    exporter(format).render(&run, &common::fixed_ctx()).unwrap()
}

#[test]
fn text_snapshot() {
    insta::assert_snapshot!(render(Format::Text));
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(render(Format::Markdown));
}

#[test]
fn csv_snapshot() {
    let csv = render(Format::Csv);
    insta::assert_snapshot!(csv);
}

#[test]
fn hand_figures_appear_in_every_format() {
    // Latencies are ttft + 9·tpot = 280 + 14·i for i = 0..12 (280 ... 434 ms).
    // LoadGen p50 = sorted[6] = 364; p90 = sorted[10] = 420; mean = 357.
    for f in [Format::Text, Format::Markdown, Format::Csv, Format::Html] {
        let out = render(f);
        assert!(out.contains("364"), "{f:?}: p50");
        assert!(out.contains("420"), "{f:?}: p90");
        assert!(out.contains("357"), "{f:?}: mean");
        for needle in [
            "0123abcd",
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "2026-01-02T03:04:05Z",
            "sim:snapdragon-8gen3",
            "schema_version",
            "seed",
        ] {
            assert!(out.contains(needle), "{f:?} lacks provenance `{needle}`");
        }
    }
    let json: serde_json::Value = serde_json::from_str(&render(Format::Json)).unwrap();
    assert_eq!(json["provenance"]["rendered_utc"], "2026-01-02T03:04:05Z");
    assert_eq!(json["result"]["performance"]["latency_ms"]["p50"], 364.0);
}

fn hostile_run() -> RunData {
    let mut r = common::hand_result();
    r.meta.device.name = "<script>alert(1)</script>".into();
    r.meta.model.name = "m\"><img src=x onerror=alert(2)>".into();
    r.warnings.push("<SCRIPT>alert(3)</SCRIPT>".into());
    let acc = r.accuracy.as_mut().unwrap();
    acc.per_question[1].generated = Some("C <script>alert(\"gen\")</script> & more".into());
    acc.per_category[0].name = "<b>STEM</b>".into();
    let telemetry = Telemetry {
        t_s: vec![0.0, 1.0, 2.0],
        columns: vec![
            (
                "temp.<script>x</script>.c".into(),
                vec![Some(40.0), Some(41.0), Some(43.0)],
            ),
            (
                "power.total.mw".into(),
                vec![Some(1000.0), None, Some(3000.0)],
            ),
        ],
        ..Default::default()
    };
    RunData {
        result: r,
        tokens: None,
        telemetry: Some(telemetry),
    }
}

#[test]
fn html_escapes_all_file_text() {
    let html = exporter(Format::Html)
        .render(&hostile_run(), &common::fixed_ctx())
        .unwrap();
    let lower = html.to_lowercase();
    assert!(!lower.contains("<script"), "unescaped script tag");
    assert!(!lower.contains("<img"), "unescaped img tag");
    assert!(!lower.contains("<b>stem"), "unescaped category");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("C &lt;script&gt;alert(&quot;gen&quot;)&lt;/script&gt; &amp; more"));
    assert!(html.contains("m&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
    // Markdown (rendered as HTML by CI summaries) escapes too: rendered by a CommonMark
    // renderer with GitHub's tables, it holds no tag from the file's text.
    let md = exporter(Format::Markdown)
        .render(&hostile_run(), &common::fixed_ctx())
        .unwrap();
    let mut rendered = String::new();
    pulldown_cmark::html::push_html(
        &mut rendered,
        pulldown_cmark::Parser::new_ext(&md, pulldown_cmark::Options::ENABLE_TABLES),
    );
    let rendered = rendered.to_lowercase();
    assert!(
        !rendered.contains("<script") && !rendered.contains("<img"),
        "{rendered}"
    );
    assert!(
        rendered.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{rendered}"
    );
}

#[test]
fn html_is_self_contained_with_labelled_svg_plots() {
    let mut run = hostile_run();
    run.tokens = Some(TokenLog {
        events: (0..50)
            .map(|i| TokenEvent {
                query: i / 10,
                token: (i % 10) as u32,
                t_ms: f64::from(i as u32) * 40.0,
            })
            .collect(),
        ..Default::default()
    });
    let html = exporter(Format::Html)
        .render(&run, &common::fixed_ctx())
        .unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for needle in [
        "Latency CDF",
        "TTFT",
        "TPOT",
        "Tokens/s",
        "Temperatures",
        "Cumulative energy",
    ] {
        assert!(html.contains(needle), "missing plot {needle}");
    }
    // Every plot is inline SVG with its text drawn by the SVG backend (no font files).
    assert!(
        html.matches("<svg").count() >= 6,
        "{}",
        html.matches("<svg").count()
    );
    assert!(html.contains("<text"));
    let lower = html.to_lowercase();
    assert!(
        !lower.contains("src=\"http")
            && !lower.contains("href=")
            && !lower.contains("<link")
            && !lower.contains("@import")
    );
}

#[test]
fn write_report_writes_html_and_markdown_into_the_dir() {
    let dir = tempfile::tempdir().unwrap();
    write_result(dir.path(), &common::hand_result()).unwrap();
    std::fs::write(
        dir.path().join("tokens.csv"),
        "# run=1\nquery,token,t_ms\n0,0,100\n0,1,150\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("telemetry.csv"),
        "# period_ms=1000\nt_s,temp.soc.c,rss.kib\n0,40,2048\n1,41,\n2,42,4096\n",
    )
    .unwrap();
    let (html, md) = write_report_at(dir.path(), &common::fixed_ctx()).unwrap();
    let html = std::fs::read_to_string(html).unwrap();
    let md = std::fs::read_to_string(md).unwrap();
    assert!(html.contains("RSS") && html.contains("Tokens/s"));
    assert_eq!(md, render(Format::Markdown));
    // A corrupt telemetry file is an error naming it, not a silently partial report.
    std::fs::write(dir.path().join("telemetry.csv"), "t_s,temp.soc.c\nzero,1\n").unwrap();
    let e = write_report_at(dir.path(), &common::fixed_ctx()).unwrap_err();
    assert!(e.to_string().contains("telemetry.csv"), "{e}");
}

#[test]
fn warm_up_residency_and_page_faults_are_rows_of_the_report() {
    use pocketperf_reports::schema::{ColdStart, Memory, PageFaults, Warmup};
    let mut r = common::hand_result();
    let timed = r.performance.as_ref().unwrap().per_query.clone();
    let mut warm = timed[..2].to_vec();
    warm[0].latency_ms = 900.0;
    warm[1].latency_ms = 450.0;
    r.performance.as_mut().unwrap().warmup = Some(Warmup {
        queries: 2,
        per_query: warm,
    });
    r.memory = Some(Memory {
        mlock: true,
        prefault: false,
        page_faults: Some(PageFaults {
            process: "child".into(),
            pid: Some(4242),
            minor: 12345,
            major: 678,
        }),
        cold_start: Some(ColdStart {
            resident_before_eviction: 1.0,
            resident_after_eviction: 0.03,
            resident_after_first_query: Some(0.97),
            resident_at_end: 0.98,
            first_query_latency_ms: Some(900.0),
            first_query_ttft_ms: Some(812.5),
            first_query_major_faults: Some(61),
        }),
    });
    let run = RunData::from_result(r);
    let csv = exporter(Format::Csv)
        .render(&run, &common::fixed_ctx())
        .unwrap();
    for row in [
        "warmup,queries,count,2,",
        "warmup,first_latency,ms,900,",
        "warmup,max_latency,ms,900,,,2",
        "memory,mlock,bool,1,",
        "memory,prefault,bool,0,",
        "memory,major_faults,count,678,",
        "memory,minor_faults,count,12345,",
        "memory,resident_after_eviction,ratio,0.03,",
        "memory,resident_after_first_query,ratio,0.97,",
        "memory,cold_first_query_ttft,ms,812.5,",
    ] {
        assert!(csv.contains(row), "missing `{row}` in\n{csv}");
    }
    // The timed figures are the hand run's, untouched by the warm-up's 900 ms.
    assert!(csv.contains("performance,latency_max,ms,434,"));
    let md = exporter(Format::Markdown)
        .render(&run, &common::fixed_ctx())
        .unwrap();
    assert!(md.contains("major_faults") && md.contains("678"));
}

/// Markdown cells escape with backslashes, not HTML entities: the file reads as typed in a
/// terminal, and a CommonMark renderer (pulldown-cmark, with GitHub's tables) gives back
/// exactly the original text in the cell — no tag, link, emphasis or entity of its own.
#[test]
fn markdown_cells_render_back_to_their_text_without_entities() {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let hostile = [
        "Pixel <b>8</b> | & 'quoted' \"twice\"",
        "<script>alert(1)</script>",
        "[click](javascript:alert(2)) *bold* `code` \\ back",
        "&amp; &#39; tpot_ms _x_",
        "line one\nline two",
    ];
    for text in hostile {
        let cell = pocketperf_reports::render::escape_md(text);
        // No entity of its own: every `&` in the cell is one of the text's.
        assert_eq!(
            cell.matches('&').count(),
            text.matches('&').count(),
            "{cell}"
        );
        let md = format!("| a | b |\n|---|---|\n| {cell} | x |\n");
        let mut in_cell = 0;
        let mut got = String::new();
        for ev in Parser::new_ext(&md, Options::ENABLE_TABLES) {
            match ev {
                Event::Start(Tag::TableCell) => in_cell += 1,
                Event::End(TagEnd::TableCell) => {}
                Event::Text(t) if in_cell == 3 => got.push_str(&t),
                Event::Text(_) => {}
                other if in_cell == 3 => panic!("{text:?} renders as {other:?} in {md}"),
                _ => {}
            }
        }
        assert_eq!(got, text.replace('\n', " "), "{md}");
    }
}
