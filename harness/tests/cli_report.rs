//! `pocketperf report`, `compare` and `gate` on real result directories.
//!
//! The inputs are two runs recorded by the real runtime (`reports/tests/fixtures/`, see its
//! README): run b is a no-change rerun of run a. Regressed candidates are built from those
//! real per-query samples by making each query's TPOT 10% slower. Simulated-handset result
//! directories replay a recorded run's activity (busy while a query runs, idle between) on
//! the simulated handsets of `harness/src/sim`, sampled by the real telemetry sampler on a
//! virtual clock, so their `telemetry.csv` is what the sampler writes on those handsets.
//!
//! Size: over 800 lines: one fixture pair serves the report, compare and gate command tests;
//! the gate's tests are the seam for a split.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pocketperf::sim::SimDevice;
use pocketperf::sim::model::Activity;
use pocketperf::telemetry::{SamplerConfig, SamplerCore};
use pocketperf_reports::schema::{
    Percentiles, QuestionRecord, ResultFile, Thermal, load_result, write_result,
};

const BIN: &str = env!("CARGO_BIN_EXE_pocketperf");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reports/tests/fixtures")
        .join(name)
}

fn run_a() -> PathBuf {
    fixture("real-singlestream-a")
}

fn run_b() -> PathBuf {
    fixture("real-singlestream-b")
}

fn pocketperf(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Replays the recorded run in `dir` on a simulated handset: the handset is busy at its top
/// frequency level while a query runs and idle between queries; the sampler reads the
/// handset's sysfs tree every 500 ms of virtual time into `dir/telemetry.csv`, and the
/// thermal section and device meta are filled from it.
fn replay_on_sim(dir: &Path, profile: &str) {
    let mut r = load_result(dir).unwrap();
    let p = r.performance.clone().unwrap();
    let spans: Vec<(f64, f64)> = p
        .per_query
        .iter()
        .map(|q| (q.start_s, q.start_s + q.latency_ms / 1000.0))
        .collect();
    let end_s = spans.iter().map(|s| s.1).fold(0.0, f64::max) + 1.0;

    let mut sim = SimDevice::new(profile).unwrap();
    let top = sim.model().profile().max_level();
    let now_ns = Arc::new(AtomicU64::new(0));
    let clock_ns = now_ns.clone();
    let clock: pocketperf::telemetry::MonotonicClock =
        Arc::new(move || clock_ns.load(Ordering::SeqCst));
    let probe = pocketperf::telemetry::probe(sim.root());
    let mut core = SamplerCore::new(
        &probe,
        clock,
        SamplerConfig {
            period: Duration::from_millis(500),
            metadata: vec![
                ("schema_version".into(), "1".into()),
                ("device".into(), format!("sim:{profile}")),
                (
                    "replay".into(),
                    "recorded run activity on the simulated handset".into(),
                ),
            ],
            csv_path: Some(dir.join("telemetry.csv")),
        },
    )
    .unwrap();
    let dt = 0.5;
    let mut t = 0.0;
    core.sample();
    while t < end_s {
        let busy: f64 = spans
            .iter()
            .map(|&(a, b)| (b.min(t + dt) - a.max(t)).max(0.0))
            .sum::<f64>()
            / dt;
        sim.step(
            dt,
            Activity {
                busy: busy.min(1.0),
                freq_level: top,
            },
        )
        .unwrap();
        t += dt;
        now_ns.store((t * 1e9).round() as u64, Ordering::SeqCst);
        core.sample();
    }
    let out = core.finish(end_s).unwrap();
    let series = |name: &str| -> Vec<f64> {
        let Some(c) = out.column(name) else {
            return Vec::new();
        };
        out.series(c).into_iter().map(|(_, v)| v).collect()
    };
    let soc = series("temp.soc.c");
    let skin = series("temp.skin.c");
    assert!(!soc.is_empty() && !skin.is_empty(), "{:?}", out.columns);
    r.thermal = Some(Thermal {
        max_soc_c: soc.iter().copied().fold(f64::MIN, f64::max),
        max_skin_c: skin.iter().copied().fold(f64::MIN, f64::max),
        mean_skin_c: skin.iter().sum::<f64>() / skin.len() as f64,
        throttled_s: 0.0,
    });
    r.meta.device.id = format!("sim:{profile}");
    r.meta.device.name = format!("simulated {profile}");
    write_result(dir, &r).unwrap();
}

/// A copy of `from` in which every query's TPOT is `factor` times the recorded one
/// (latency = TTFT + TPOT·(tokens − 1) recomputed; summaries recomputed from the samples).
fn scaled_tpot(from: &Path, to: &Path, factor: f64) {
    let mut r = load_result(from).unwrap();
    let p = r.performance.as_mut().unwrap();
    for q in &mut p.per_query {
        if let (Some(tpot), Some(ttft)) = (q.tpot_ms, q.ttft_ms) {
            q.tpot_ms = Some(tpot * factor);
            q.latency_ms = ttft + tpot * factor * f64::from(q.tokens - 1);
        }
    }
    let lat: Vec<f64> = p.per_query.iter().map(|q| q.latency_ms).collect();
    let tpot: Vec<f64> = p.per_query.iter().filter_map(|q| q.tpot_ms).collect();
    p.latency_ms = Percentiles::from_samples(&lat).unwrap();
    p.tpot_ms = Percentiles::from_samples(&tpot);
    let tokens: u32 = p.per_query.iter().map(|q| q.tokens).sum();
    p.tokens_per_s = f64::from(tokens) / (lat.iter().sum::<f64>() / 1000.0);
    r.warnings
        .push(format!("test candidate: recorded TPOT scaled by {factor}"));
    write_result(to, &r).unwrap();
}

fn report(dir: &Path) -> (String, String) {
    let o = pocketperf(&[os("report"), dir.as_os_str(), os("--print"), os("none")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    (
        std::fs::read_to_string(dir.join("report.html")).unwrap(),
        std::fs::read_to_string(dir.join("report.md")).unwrap(),
    )
}

#[test]
fn report_of_a_real_run_plots_exactly_the_data_it_has() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    copy_dir(&run_a(), &dir);
    let (html, md) = report(&dir);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("default-src 'none'"));
    for present in [
        "Query latency CDF",
        "Time to first token",
        "Time per output token",
        "Tokens per second over time",
    ] {
        assert!(html.contains(present), "missing {present}");
    }
    // No telemetry.csv: no sensor plots, no empty Telemetry section.
    for absent in [
        "<h2>Telemetry</h2>",
        "Temperatures (°C)",
        "Frequencies (MHz)",
        "Power (mW)",
        "Cumulative energy",
        "Resident memory",
        "<h2>Energy</h2>",
        "<h2>Accuracy</h2>",
    ] {
        assert!(!html.contains(absent), "unexpected {absent}");
    }
    // Three step CDFs (latency, TTFT, TPOT), two histograms, tokens/s; no run timeline
    // without telemetry to put beside tokens/s.
    assert!(!html.contains("Run timeline"));
    assert_eq!(html.matches("<svg").count(), 6);
    // The table carries intervals and the recorded provenance.
    let r = load_result(&dir).unwrap();
    let p50 = r.performance.as_ref().unwrap().latency_ms.p50;
    assert!(html.contains(&format!("{p50:.3}")) && md.contains(&format!("{p50:.3}")));
    assert!(md.contains("| performance | tpot_p50 |") && md.contains("fb15e62f5a41"));
    assert!(md.contains("95% interval"));

    // Without tokens.csv the tokens/s-over-time plot goes too.
    std::fs::remove_file(dir.join("tokens.csv")).unwrap();
    let (html, _) = report(&dir);
    assert!(!html.contains("Tokens per second over time"));
    assert_eq!(html.matches("<svg").count(), 5);

    // With a simulated handset's telemetry the sensor plots appear.
    copy_dir(&run_a(), &dir);
    replay_on_sim(&dir, "snapdragon-8gen3");
    let (html, _) = report(&dir);
    for present in [
        "<h2>Telemetry</h2>",
        "Temperatures (°C)",
        "Frequencies (MHz)",
        "Power (mW)",
        "Cumulative energy (J)",
        "Resident memory (MiB)",
        "max_soc",
        "Run timeline",
        "SoC temperature (°C)",
    ] {
        assert!(html.contains(present), "missing {present}");
    }
    // Five sensor charts and the run timeline join the six above.
    assert_eq!(html.matches("<svg").count(), 12);

    // --out writes elsewhere and leaves the result directory alone.
    let elsewhere = tmp.path().join("rendered");
    let o = pocketperf(&[
        os("report"),
        dir.as_os_str(),
        os("--out"),
        elsewhere.as_os_str(),
        os("--print"),
        os("text"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(elsewhere.join("report.html").is_file() && elsewhere.join("report.md").is_file());
    assert!(String::from_utf8_lossy(&o.stdout).contains("latency_p50"));
}

fn hostile(dir: &Path) {
    let mut r = load_result(dir).unwrap();
    r.meta.model.name = "<script>alert('model')</script>".into();
    r.meta.device.id = "adb:R5\"><img src=x onerror=alert(1)>".into();
    r.meta.device.name = "Pixel <b>8</b> | & ' \"".into();
    r.meta.settings = serde_json::json!({"prompt": "</pre><script>alert(2)</script>"});
    r.warnings
        .push("<iframe src=javascript:alert(3)></iframe>".into());
    let p = r.performance.as_mut().unwrap();
    p.valid = false;
    p.invalid_reasons = vec!["<svg onload=alert(4)>".into()];
    r.accuracy = Some(pocketperf_reports::schema::Accuracy {
        dataset: "mmlu<script>".into(),
        mode: "generate".into(),
        shots: 0,
        n: 2,
        correct: 1,
        accuracy: 0.5,
        ci95: [0.09, 0.91],
        per_subject: vec![pocketperf_reports::schema::GroupAccuracy {
            name: "<style>p{display:none}</style>".into(),
            n: 2,
            correct: 1,
            accuracy: 0.5,
        }],
        per_category: Vec::new(),
        per_question: vec![QuestionRecord {
            subject: "a<script>".into(),
            row: 1,
            answer: 'A',
            choice: Some('B'),
            logprobs: None,
            generated: Some("B</pre><script>alert(5)</script>".into()),
            correct: false,
        }],
        wall_s: 1.0,
    });
    r.robustness = Some(serde_json::json!({"crashes": 0, "note": "<script>alert(6)</script>"}));
    write_result(dir, &r).unwrap();
    std::fs::write(
        dir.join("telemetry.csv"),
        "# device=<script>alert(7)</script>\nt_s,temp.<script>alert(8)</script>.c,power.<img src=x>.mw\n0,40,1000\n1,41,1200\n2,42,900\n",
    )
    .unwrap();
}

fn assert_no_markup(what: &str, s: &str) {
    let lower = s.to_lowercase();
    for bad in [
        "<script",
        "<img",
        "<iframe",
        "<svg onload",
        "<style>p",
        "<b>8",
    ] {
        assert!(!lower.contains(bad), "{what}: unescaped `{bad}`");
    }
}

/// Markdown, as a CommonMark renderer with GitHub's tables turns it into HTML, holds no tag
/// from the files, and the Markdown itself no HTML entity (it is read in terminals too).
fn assert_no_markup_md(what: &str, md: &str) {
    let mut html = String::new();
    pulldown_cmark::html::push_html(
        &mut html,
        pulldown_cmark::Parser::new_ext(md, pulldown_cmark::Options::ENABLE_TABLES),
    );
    assert_no_markup(&format!("{what} rendered"), &html);
    for entity in ["&#39;", "&quot;", "&lt;", "&amp;"] {
        assert!(!md.contains(entity), "{what}: HTML entity {entity} in {md}");
    }
}

#[test]
fn every_string_from_files_is_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hostile");
    copy_dir(&run_a(), &dir);
    hostile(&dir);
    let (html, md) = report(&dir);
    assert_no_markup("report.html", &html);
    assert_no_markup_md("report.md", &md);
    assert!(html.contains("&lt;script&gt;alert(&#39;model&#39;)&lt;/script&gt;"));
    assert!(html.contains("&lt;svg onload=alert(4)&gt;"));
    // Legend text from the hostile telemetry column is escaped by the SVG writer.
    // (Legend names past 30 characters end in an ellipsis.)
    assert!(html.contains("&lt;script&gt;alert(8)&lt;/script&gt; temp…"));
    assert!(md.contains("Pixel \\<b\\>8\\</b\\> \\| \\&"), "{md}");

    let other = tmp.path().join("plain");
    copy_dir(&run_b(), &other);
    let out = tmp.path().join("cmp");
    let o = pocketperf(&[
        os("compare"),
        dir.as_os_str(),
        other.as_os_str(),
        os("--label"),
        os("<script>alert(9)</script>"),
        os("--label"),
        os("plain"),
        os("--out"),
        out.as_os_str(),
        os("--allow-diff"),
        os("model,device,cli,settings,threads,backend,isa,sut,scenario"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_no_markup(
        "compare.html",
        &std::fs::read_to_string(out.join("compare.html")).unwrap(),
    );
    assert_no_markup_md(
        "compare.md",
        &std::fs::read_to_string(out.join("compare.md")).unwrap(),
    );

    let junit = tmp.path().join("gate.xml");
    let gmd = tmp.path().join("gate.md");
    let o = pocketperf(&[
        os("gate"),
        os("--baseline"),
        other.as_os_str(),
        os("--candidate"),
        dir.as_os_str(),
        os("--junit"),
        junit.as_os_str(),
        os("--markdown"),
        gmd.as_os_str(),
        os("--allow-diff"),
        os("model,device,cli,settings,threads,backend,isa,sut,scenario"),
    ]);
    // The hostile run is INVALID and lacks nothing the baseline has: a regression.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_no_markup("gate junit", &std::fs::read_to_string(&junit).unwrap());
    assert_no_markup_md("gate markdown", &std::fs::read_to_string(&gmd).unwrap());
}

#[test]
fn version_0_result_is_read_and_says_it_was_migrated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v0");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("result.json"),
        r#"{ "tool_version": "0.0.3", "git_commit": "deadbeef", "device": "sim:pixel-8-pro",
  "device_name": "Sim Pixel", "model": "models/tiny.Q4_0.gguf", "model_sha256": "abc",
  "backend": "cpu", "threads": 4, "started_utc": "2025-06-01T12:00:00Z",
  "scenario": "SingleStream", "valid": true, "queries": 3, "duration_s": 1.5, "qps": 2.0,
  "tokens_per_s": 40.0, "latency_mean_ms": 500.0, "latency_min_ms": 400.0,
  "latency_max_ms": 600.0, "latency_p50_ms": 500.0, "latency_p90_ms": 600.0,
  "latency_p99_ms": 600.0,
  "samples": [ {"latency_ms": 400.0, "ttft_ms": 100.0, "tokens": 11},
               {"latency_ms": 500.0, "ttft_ms": 120.0, "tokens": 20},
               {"latency_ms": 600.0, "ttft_ms": 140.0, "tokens": 1} ] }"#,
    )
    .unwrap();
    let (html, md) = report(&dir);
    assert!(html.contains("migrated from schema v0"));
    assert!(md.contains("sim:pixel-8-pro") && md.contains("| performance | latency_p50 |"));
    // TPOT was recomputed from the v0 samples: (400 - 100) / 10 = 30 and (500 - 120) / 19 = 20.
    assert!(md.contains("| performance | tpot_mean | 25.000 |"), "{md}");
}

#[test]
fn unreadable_input_exits_2_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    let o = pocketperf(&[os("report"), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing-here/result.json"));

    let dir = tmp.path().join("bad-tokens");
    copy_dir(&run_a(), &dir);
    std::fs::write(
        dir.join("tokens.csv"),
        "# x=1\nquery,token,t_ms\n0,0,1.0\n0,one,2.0\n",
    )
    .unwrap();
    let o = pocketperf(&[os("report"), dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tokens.csv: line 4") && err.contains("`one`"),
        "{err}"
    );

    let dir = tmp.path().join("newer");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("result.json"),
        r#"{"schema_version": 99, "meta": {}}"#,
    )
    .unwrap();
    let o = pocketperf(&[os("report"), dir.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("upgrade pocketperf"));
}

#[test]
fn compare_renders_two_simulated_handsets() {
    let tmp = tempfile::tempdir().unwrap();
    let (h1, h2) = (tmp.path().join("sd8g3"), tmp.path().join("pixel"));
    copy_dir(&run_a(), &h1);
    copy_dir(&run_b(), &h2);
    replay_on_sim(&h1, "snapdragon-8gen3");
    replay_on_sim(&h2, "pixel-8-pro");
    let out = tmp.path().join("cmp");
    // Two handsets differ in their device: an error naming it unless that is what is compared.
    let o = pocketperf(&[
        os("compare"),
        h1.as_os_str(),
        h2.as_os_str(),
        os("--out"),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not comparable") && err.contains("device.id") && err.contains("--allow-diff"),
        "{err}"
    );
    assert!(!out.join("compare.html").exists());
    let o = pocketperf(&[
        os("compare"),
        h1.as_os_str(),
        h2.as_os_str(),
        os("--out"),
        out.as_os_str(),
        os("--allow-diff"),
        os("device"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let html = std::fs::read_to_string(out.join("compare.html")).unwrap();
    let csv = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    for label in [
        "sim:snapdragon-8gen3 (simulated snapdragon-8gen3)",
        "sim:pixel-8-pro (simulated pixel-8-pro)",
    ] {
        assert!(
            html.contains(label) && md.contains(label),
            "missing column {label}"
        );
    }
    assert!(html.contains("(baseline)"));
    for chart in [
        "Query latency CDF per run",
        "Time per output token CDF per run",
        "Median tokens per second per query",
        "Median time per output token",
    ] {
        assert!(html.contains(chart), "missing chart {chart}");
    }
    assert!(html.matches("<svg").count() >= 6);

    // The TPOT ratio is the ratio of the recorded p50s (LoadGen's sorted[floor(n/2)]), and
    // the bootstrap interval of the ratio of medians brackets it.
    let p50 = |d: &Path| {
        load_result(d)
            .unwrap()
            .performance
            .unwrap()
            .tpot_ms
            .unwrap()
            .p50
    };
    let tpot = |d: &Path| -> Vec<f64> {
        load_result(d)
            .unwrap()
            .performance
            .unwrap()
            .per_query
            .iter()
            .filter_map(|q| q.tpot_ms)
            .collect()
    };
    let expected = p50(&h2) / p50(&h1);
    let of_medians = median(&tpot(&h2)) / median(&tpot(&h1));
    assert!(
        (expected / of_medians - 1.0).abs() < 0.05,
        "{expected} vs {of_medians}"
    );
    let mut rdr = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(csv.as_bytes());
    let header = rdr.headers().unwrap().clone();
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let get = |r: &csv::StringRecord, name: &str| r[col(name)].to_string();
    let num = |r: &csv::StringRecord, name: &str| get(r, name).parse::<f64>().unwrap();
    let row = rows
        .iter()
        .find(|r| get(r, "run") == "1" && get(r, "metric") == "tpot_p50")
        .unwrap();
    assert_eq!(get(row, "label"), "sim:pixel-8-pro (simulated pixel-8-pro)");
    assert!((num(row, "ratio_to_baseline") - expected).abs() < 1e-9);
    assert!(num(row, "ratio_lo") < expected && expected < num(row, "ratio_hi"));
    // Each handset's thermal figures come from its own simulated sensors.
    let max_soc: Vec<f64> = rows
        .iter()
        .filter(|r| get(r, "section") == "thermal" && get(r, "metric") == "max_soc")
        .map(|r| num(r, "value"))
        .collect();
    assert_eq!(max_soc.len(), 2);
    assert!(max_soc.iter().all(|&t| (25.0..110.0).contains(&t)) && max_soc[0] != max_soc[1]);

    // --baseline picks the column; a label count that does not match is an error.
    let o = pocketperf(&[
        os("compare"),
        h1.as_os_str(),
        h2.as_os_str(),
        os("--baseline"),
        h2.as_os_str(),
        os("--out"),
        out.as_os_str(),
        os("--allow-diff"),
        os("device"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert!(md.starts_with("# PocketPerf comparison (baseline: sim:pixel-8-pro"));
    let o = pocketperf(&[
        os("compare"),
        h1.as_os_str(),
        h2.as_os_str(),
        os("--label"),
        os("only-one"),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

fn gate(base: &Path, cand: &Path, extra: &[&std::ffi::OsStr]) -> (Output, serde_json::Value) {
    let json = cand.with_extension("gate.json");
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/gate.toml");
    let mut args = vec![
        os("gate"),
        os("--baseline"),
        base.as_os_str(),
        os("--candidate"),
        cand.as_os_str(),
        os("--rules"),
        rules.as_os_str(),
        os("--json"),
        json.as_os_str(),
    ];
    args.extend_from_slice(extra);
    let o = pocketperf(&args);
    let v = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (o, v)
}

fn check<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["outcome"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

#[test]
fn gate_passes_a_no_change_rerun_of_the_same_build() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    copy_dir(&run_a(), &a);
    copy_dir(&run_b(), &b);
    let junit = tmp.path().join("out/gate.xml");
    let md = tmp.path().join("out/gate.md");
    let (o, v) = gate(
        &a,
        &b,
        &[
            os("--junit"),
            junit.as_os_str(),
            os("--markdown"),
            md.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(v["outcome"]["status"], "pass");
    for name in [
        "performance.valid",
        "performance.latency_ms",
        "performance.ttft_ms",
        "performance.tpot_ms",
        "performance.tokens_per_s",
    ] {
        assert_eq!(
            check(&v, name)["status"],
            "pass",
            "{name}: {}",
            check(&v, name)
        );
    }
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(junit.contains("failures=\"0\" errors=\"0\""), "{junit}");
    assert!(junit.contains("name=\"performance.tpot_ms\""));
    assert!(
        std::fs::read_to_string(&md)
            .unwrap()
            .starts_with("# PocketPerf gate: PASS")
    );
}

#[test]
fn gate_flags_a_ten_percent_tpot_regression_built_from_real_samples() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, base) in [("a", run_a()), ("b", run_b())] {
        let cand = tmp.path().join(format!("{name}-tpot+10%"));
        scaled_tpot(&base, &cand, 1.10);
        let junit = tmp.path().join(format!("{name}.xml"));
        let (o, v) = gate(&base, &cand, &[os("--junit"), junit.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert_eq!(v["outcome"]["status"], "regression");
        let c = check(&v, "performance.tpot_ms");
        assert_eq!(c["status"], "regression", "{c}");
        // Every TPOT was scaled by 1.1, so the median moved by exactly +10%.
        assert!((c["change"].as_f64().unwrap() - 0.10).abs() < 1e-9, "{c}");
        assert!(c["p_value"].as_f64().unwrap() < 0.01);
        let junit = std::fs::read_to_string(&junit).unwrap();
        assert!(
            junit.contains("name=\"performance.tpot_ms\">\n      <failure"),
            "{junit}"
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("REGRESSION"));
    }
    // The same 10% inside a 15% noise threshold is not called.
    let rules = tmp.path().join("loose.toml");
    std::fs::write(&rules, "[performance]\nnoise_threshold = 0.15\n").unwrap();
    let cand = tmp.path().join("b-tpot+10%");
    let o = pocketperf(&[
        os("gate"),
        os("--baseline"),
        run_b().as_os_str(),
        os("--candidate"),
        cand.as_os_str(),
        os("--rules"),
        rules.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn gate_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let junit = tmp.path().join("gate.xml");
    let o = pocketperf(&[
        os("gate"),
        os("--baseline"),
        run_a().as_os_str(),
        os("--candidate"),
        missing.as_os_str(),
        os("--junit"),
        junit.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("errors=\"1\"") && xml.contains("missing/result.json"),
        "{xml}"
    );

    let rules = tmp.path().join("typo.toml");
    std::fs::write(&rules, "[performance]\nnoise_treshold = 0.05\n").unwrap();
    let o = pocketperf(&[
        os("gate"),
        os("--baseline"),
        run_a().as_os_str(),
        os("--candidate"),
        run_b().as_os_str(),
        os("--rules"),
        rules.as_os_str(),
        os("--junit"),
        junit.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("noise_treshold")
    );

    // A candidate without the performance section the baseline has is an error, not a pass.
    let cand = tmp.path().join("no-perf");
    let mut r: ResultFile = load_result(run_b()).unwrap();
    r.performance = None;
    write_result(&cand, &r).unwrap();
    let o = pocketperf(&[
        os("gate"),
        os("--baseline"),
        run_a().as_os_str(),
        os("--candidate"),
        cand.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Runs `scripts/check-report-html.sh` on `pages`; `None` when Chromium is not installed.
fn chromium_check(pages: &[&Path], shots: &Path) -> Option<Output> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check-report-html.sh");
    let o = Command::new("bash")
        .arg(script)
        .arg("--screenshot-dir")
        .arg(shots)
        .args(pages)
        .env("POCKETPERF", BIN)
        .output()
        .unwrap();
    if o.status.code() == Some(77) {
        eprintln!("skipped: Chromium is not installed (Debian: apt-get install chromium)");
        return None;
    }
    Some(o)
}

#[test]
fn reports_open_in_headless_chromium_without_console_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("real-run-on-sim");
    copy_dir(&run_a(), &run);
    replay_on_sim(&run, "pixel-8-pro");
    let hostile_dir = tmp.path().join("hostile");
    copy_dir(&run_b(), &hostile_dir);
    hostile(&hostile_dir);
    // POCKETPERF_SCREENSHOT_DIR keeps the screenshots for a person to look at.
    let shots = std::env::var_os("POCKETPERF_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("shots"));
    // The script renders report.html itself for directories that lack one.
    let Some(o) = chromium_check(&[&run, &hostile_dir], &shots) else {
        return;
    };
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for name in ["real-run-on-sim-report.png", "hostile-report.png"] {
        let png = std::fs::read(shots.join(name)).unwrap();
        assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"), "{name}");
    }
    // The check can fail: an unescaped script in a page is caught.
    let bad = tmp.path().join("bad.html");
    std::fs::write(
        &bad,
        std::fs::read_to_string(run.join("report.html"))
            .unwrap()
            .replace(
                "</body>",
                "<p onclick=\"x()\">x</p><img src=\"https://example.invalid/p.png\"></body>",
            ),
    )
    .unwrap();
    let o = chromium_check(&[&bad], &shots).unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn compare_out_replaces_symlinked_outputs_instead_of_writing_through_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cmp");
    std::fs::create_dir_all(&out).unwrap();
    let mut victims = Vec::new();
    for name in ["compare.html", "compare.csv", "compare.md"] {
        let victim = tmp.path().join(format!("victim-{name}"));
        std::fs::write(&victim, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        victims.push((name, victim));
    }
    let o = pocketperf(&[
        os("compare"),
        run_a().as_os_str(),
        run_b().as_os_str(),
        os("--out"),
        out.as_os_str(),
        os("--allow-diff"),
        os("model,device,cli,settings,threads,backend,isa,sut,scenario"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for (name, victim) in &victims {
        assert_eq!(
            std::fs::read_to_string(victim).unwrap(),
            "keep me\n",
            "{name}"
        );
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{name}: the symlink was followed"
        );
    }
    // The Markdown written is the table the command printed.
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert_eq!(md, String::from_utf8_lossy(&o.stdout));
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
