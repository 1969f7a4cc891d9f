//! `pocketperf farm history` ([`pocketperf::farm::history`]) over recorded nights: the real
//! SingleStream fixture with its timings scaled per night, written as a farm results root with
//! each night's `farm.json` (one night failing its gate, one drifting, one unreadable). The
//! CSV must carry each night's value, interval, verdict and baseline night; the page a chart
//! per device, step and metric and the failure marks.

use std::path::Path;
use std::process::Command;

use pocketperf_reports::schema::{ResultFile, load_result, write_result};

const DEVICE: &str = "pixel";
const STEP: &str = "single-stream";

fn fixture() -> ResultFile {
    load_result(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/real-singlestream-a"),
    )
    .unwrap()
}

/// The fixture with every timing (per query and its summaries) scaled by `f`.
fn scaled(f: f64) -> ResultFile {
    let mut r = fixture();
    let p = r.performance.as_mut().unwrap();
    for q in &mut p.per_query {
        q.latency_ms *= f;
        q.ttft_ms = q.ttft_ms.map(|t| t * f);
        q.tpot_ms = q.tpot_ms.map(|t| t * f);
    }
    for pc in [
        Some(&mut p.latency_ms),
        p.ttft_ms.as_mut(),
        p.tpot_ms.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        for v in [
            &mut pc.mean,
            &mut pc.min,
            &mut pc.max,
            &mut pc.p50,
            &mut pc.p90,
            &mut pc.p95,
            &mut pc.p97,
            &mut pc.p99,
            &mut pc.p999,
        ] {
            *v *= f;
        }
    }
    r
}

/// Night `name` as the farm writes it: the step's result and `farm.json` with the gate's
/// status, its baseline night and the tpot drift check's status.
fn write_night(out: &Path, name: &str, f: f64, gate: &str, baseline: Option<&str>, drift: &str) {
    write_result(out.join(name).join(DEVICE).join(STEP), &scaled(f)).unwrap();
    let farm = serde_json::json!({
        "run": name,
        "devices": [
            {"name": DEVICE, "steps": [{"name": STEP, "status": "ok", "dir": format!("{DEVICE}/{STEP}")}]},
            {"name": "moto", "steps": [{"name": STEP, "status": "failed", "dir": null}]},
        ],
        "gates": [{
            "device": DEVICE, "step": STEP, "status": gate,
            "baseline": baseline.map(|b| format!("../{b}/{DEVICE}/{STEP}")),
            "drift": [
                {"metric": "performance.tpot_ms", "status": drift},
                {"metric": "performance.ttft_ms", "status": "pass"},
            ],
        }],
    });
    std::fs::write(out.join(name).join("farm.json"), farm.to_string()).unwrap();
}

const N1: &str = "2026-11-01T020000Z";
const N2: &str = "2026-11-02T020000Z";
const N3: &str = "2026-11-03T020000Z";
const N4: &str = "2026-11-04T020000Z";
const N5: &str = "2026-11-05T020000Z";

fn results() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    write_night(out, N1, 1.0, "skipped", None, "skipped");
    write_night(out, N2, 1.01, "pass", Some(N1), "skipped");
    write_night(out, N3, 1.30, "regression", Some(N2), "regression");
    // The latest passing night is N2: N3 failed and is never a baseline.
    write_night(out, N4, 1.02, "pass", Some(N2), "regression");
    std::fs::create_dir_all(out.join(N5)).unwrap();
    std::fs::write(out.join(N5).join("farm.json"), "{ cut off").unwrap();
    tmp
}

fn pocketperf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .output()
        .unwrap()
}

/// The CSV's records (after the `#` header lines) as maps of column to cell.
fn records(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut r = csv::Reader::from_reader(body.as_bytes());
    let cols: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            cols.iter()
                .cloned()
                .zip(rec.iter().map(String::from))
                .collect()
        })
        .collect()
}

#[test]
fn history_lists_every_night_with_values_verdicts_and_baselines() {
    let tmp = results();
    let root = tmp.path();
    let dest = tempfile::tempdir().unwrap();
    let o = pocketperf(&[
        "farm",
        "history",
        root.to_str().unwrap(),
        "--out",
        dest.path().to_str().unwrap(),
        "--metric",
        "tpot_p50,ttft_p50",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&root.join(N5).join("farm.json").display().to_string()),
        "{stdout}"
    );

    let csv = std::fs::read_to_string(dest.path().join("history.csv")).unwrap();
    for key in [
        "# schema_version=1",
        "# tool=pocketperf ",
        "# git_commit=",
        "# timestamp_utc=",
    ] {
        assert!(csv.contains(key), "{key} missing:\n{csv}");
    }
    assert!(
        csv.lines()
            .any(|l| l.starts_with("# unreadable=") && l.contains(N5) && l.contains("farm.json")),
        "{csv}"
    );
    let rows = records(&csv);
    // Four readable nights × one device with results × two metrics.
    assert_eq!(rows.len(), 8, "{csv}");
    let base = fixture();
    let bp = base.performance.as_ref().unwrap();
    let tpot = bp.tpot_ms.unwrap().p50;
    let ttft = bp.ttft_ms.unwrap().p50;
    let expect = [
        (N1, 1.0, "skipped", "skipped", ""),
        (N2, 1.01, "pass", "pass", N1),
        (N3, 1.30, "drift", "regression", N2),
        (N4, 1.02, "drift", "pass", N2),
    ];
    for (night, f, tpot_verdict, ttft_verdict, baseline) in expect {
        for (metric, v0, verdict) in [
            ("tpot_p50", tpot, tpot_verdict),
            ("ttft_p50", ttft, ttft_verdict),
        ] {
            let r = rows
                .iter()
                .find(|r| r["night"] == night && r["metric"] == metric)
                .unwrap_or_else(|| panic!("{night} {metric} missing:\n{csv}"));
            assert_eq!(r["device"], DEVICE);
            assert_eq!(r["step"], STEP);
            let value: f64 = r["value"].parse().unwrap();
            assert!(
                (value - v0 * f).abs() <= 1e-9 * v0 * f,
                "{night} {metric}: {value} vs {}",
                v0 * f
            );
            let lo: f64 = r["lo"].parse().unwrap();
            let hi: f64 = r["hi"].parse().unwrap();
            assert!(
                lo <= value && value <= hi && lo < hi,
                "{night} {metric}: [{lo}, {hi}] around {value}"
            );
            assert_eq!(r["verdict"], verdict, "{night} {metric}");
            assert_eq!(r["baseline"], baseline, "{night} {metric}");
        }
    }

    let html = std::fs::read_to_string(dest.path().join("history.html")).unwrap();
    for metric in ["tpot_p50", "ttft_p50"] {
        let title = format!("{DEVICE} / {STEP} / {metric}");
        assert_eq!(
            html.matches(&format!("<figcaption>{title}</figcaption>"))
                .count(),
            1,
            "{title}"
        );
    }
    assert_eq!(html.matches("<svg").count(), 2);
    // N3's ttft regression and the drifting tpot of N3 and N4.
    assert_eq!(html.matches("FAIL regression").count(), 1);
    assert_eq!(html.matches("FAIL drift").count(), 2);
    // The intervals are error bars on each night, not two more lines with a legend; each of
    // the three failing nights is a red cross (two strokes) on its chart.
    assert!(!html.contains("95% low") && !html.contains("95% high"));
    let red_strokes = html
        .lines()
        .filter(|l| l.starts_with("<line") && l.contains("stroke=\"#FF0000\""))
        .count();
    assert_eq!(red_strokes, 3 * 2);
    assert!(html.contains("unreadable: "));
    assert!(
        html.contains(
            &root
                .join("2026-11-01T020000Z")
                .join("moto")
                .display()
                .to_string()
        )
    );
    assert!(!html.contains("<script") && !html.contains("src=\"http"));
    // Nothing written into the results root when --out names another directory.
    assert!(!root.join("history.html").exists());
}

#[test]
fn default_metrics_are_those_the_nights_have_and_files_land_in_the_results_root() {
    let tmp = results();
    let root = tmp.path();
    let o = pocketperf(&["farm", "history", root.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let csv = std::fs::read_to_string(root.join("history.csv")).unwrap();
    let rows = records(&csv);
    let has_energy = fixture().energy.is_some();
    let mut metrics: Vec<String> = rows.iter().map(|r| r["metric"].clone()).collect();
    metrics.sort();
    metrics.dedup();
    let mut want = vec![
        "latency_p50",
        "query_tokens_per_s_median",
        "tpot_p50",
        "ttft_p50",
    ];
    if has_energy {
        want.push("j_per_token");
        want.sort();
    }
    assert_eq!(metrics, want);
    assert!(root.join("history.html").is_file());
}

#[test]
fn an_empty_results_root_or_an_unknown_metric_is_an_error() {
    let empty = tempfile::tempdir().unwrap();
    let o = pocketperf(&["farm", "history", empty.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no night directories"));
    assert!(!empty.path().join("history.csv").exists());

    let tmp = results();
    let o = pocketperf(&[
        "farm",
        "history",
        tmp.path().to_str().unwrap(),
        "--metric",
        "tpot_p77",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tpot_p77"));
    assert!(!tmp.path().join("history.csv").exists());
}

const STAND_IN: &str = r#"#!/bin/sh
out=
while [ $# -gt 0 ]; do
  case "$1" in --out) out="$2"; shift ;; esac
  shift
done
mkdir -p "$out" && cp "$FAKE_FIXTURE/result.json" "$out/"
"#;

/// Two real `farm run` nights (a stand-in binary on a `local` device that writes a recorded
/// run: fixture a, then fixture b), then `farm history` over them: the rows name the nights
/// the farm created, the second night's baseline is the first, its verdict is the one its
/// `farm.json` gives, and the values are those of the recorded runs.
#[test]
fn history_reads_the_nights_a_farm_run_wrote() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let exe = root.join("stand-in");
    std::fs::write(&exe, STAND_IN).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("m.gguf"), "model\n").unwrap();
    std::fs::write(
        root.join("devices.toml"),
        "[[device]]\nname = \"host\"\ntransport = \"local\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("suite.toml"),
        "name = \"t\"\n[[step]]\nname = \"s\"\nargs = [\"run\", \"--out\", \"{out}\"]\n",
    )
    .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures");
    for f in ["real-singlestream-a", "real-singlestream-b"] {
        let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
            .current_dir(root)
            .env("FAKE_FIXTURE", fixtures.join(f))
            .args([
                "farm",
                "run",
                "--devices",
                "devices.toml",
                "--suite",
                "suite.toml",
            ])
            .args([
                "--out", "results", "--binary", "stand-in", "--model", "m.gguf",
            ])
            .output()
            .unwrap();
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{}",
            pocketperf_testkit::output_text(&o)
        );
    }
    let results = root.join("results");
    let mut nights: Vec<String> = std::fs::read_dir(&results)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("farm.json").is_file())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    nights.sort();
    assert_eq!(nights.len(), 2);
    let farm2: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(results.join(&nights[1]).join("farm.json")).unwrap(),
    )
    .unwrap();
    let gate2 = farm2["gates"][0]["status"].as_str().unwrap().to_string();

    let o = pocketperf(&[
        "farm",
        "history",
        results.to_str().unwrap(),
        "--metric",
        "tpot_p50",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows = records(&std::fs::read_to_string(results.join("history.csv")).unwrap());
    assert_eq!(rows.len(), 2);
    for (i, (night, f)) in nights
        .iter()
        .zip(["real-singlestream-a", "real-singlestream-b"])
        .enumerate()
    {
        let r = &rows[i];
        assert_eq!(&r["night"], night);
        assert_eq!(r["device"], "host");
        assert_eq!(r["step"], "s");
        let want = load_result(fixtures.join(f))
            .unwrap()
            .performance
            .unwrap()
            .tpot_ms
            .unwrap()
            .p50;
        assert_eq!(r["value"].parse::<f64>().unwrap(), want);
    }
    assert_eq!(rows[0]["verdict"], "skipped");
    assert_eq!(rows[0]["baseline"], "");
    assert_eq!(rows[1]["verdict"], gate2);
    assert_eq!(rows[1]["baseline"], nights[0]);
}
