//! `pocketperf early-stopping` through the binary agrees with LoadGen's reference vectors:
//! the SingleStream rank for N queries, and the queries needed with T over the bound.

use std::process::Command;

use pocketperf_testkit::shared_dir;

fn vectors() -> serde_json::Value {
    let p = shared_dir().join("reference/loadgen/early_stopping_vectors.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (set POCKETPERF_SHARED)", p.display()));
    serde_json::from_str(&text).expect("vectors parse")
}

fn plan(args: &[String]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .arg("early-stopping")
        .args(args)
        .arg("--json")
        .output()
        .expect("pocketperf runs");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON plan")
}

/// Percent as the CLI takes it, e.g. 0.999 -> "99.9".
fn percent(p: f64) -> String {
    format!("{}", (p * 1000.0).round() / 10.0)
}

#[test]
fn single_stream_rank_matches_every_vector_row() {
    let v = vectors();
    for row in v["single_stream"].as_array().unwrap() {
        let p = row["p"].as_f64().unwrap();
        let n = row["n"].as_u64().unwrap();
        let t = row["t"].as_i64().unwrap();
        let got = plan(&[
            "--percentile".into(),
            percent(p),
            "--queries".into(),
            n.to_string(),
        ]);
        let q = &got["queries"];
        if t < 0 {
            assert!(q["rank"].is_null(), "p={p} n={n}: {got}");
        } else {
            assert_eq!(q["rank"].as_i64(), Some(t), "p={p} n={n}: {got}");
            assert_eq!(q["index"].as_i64(), Some(n as i64 - t), "p={p} n={n}");
        }
        assert!((got["percentile"].as_f64().unwrap() - p).abs() < 1e-12);
    }
}

#[test]
fn over_bound_answers_match_the_h_table() {
    let v = vectors();
    let rows = v["h"].as_array().unwrap();
    // Every 20th row keeps the test in seconds while covering each percentile and t range.
    for row in rows.iter().step_by(20) {
        let p = row["p"].as_f64().unwrap();
        let t = row["t"].as_u64().unwrap();
        let h = row["h"].as_u64().unwrap();
        let got = plan(&[
            "--percentile".into(),
            percent(p),
            "--over-bound".into(),
            t.to_string(),
        ]);
        let o = &got["over_bound"];
        assert_eq!(o["min_passing"].as_u64(), Some(h), "p={p} t={t}: {got}");
        assert_eq!(o["min_queries"].as_u64(), Some(h + t), "p={p} t={t}");
        // With exactly h + t queries a Server run passes with t over the bound, and with
        // one query fewer it does not.
        let n = h + t;
        let at = plan(&[
            "--percentile".into(),
            percent(p),
            "--queries".into(),
            n.to_string(),
        ]);
        let allowed = at["queries"]["server_max_over_bound"].as_u64();
        assert!(allowed >= Some(t), "p={p} n={n}: {at}");
        let fewer = plan(&[
            "--percentile".into(),
            percent(p),
            "--queries".into(),
            (n - 1).to_string(),
        ]);
        let allowed = fewer["queries"]["server_max_over_bound"].as_u64();
        assert!(allowed.is_none_or(|a| a < t), "p={p} n={}: {fewer}", n - 1);
    }
}

#[test]
fn text_output_states_minimums_and_refuses_bad_percentiles() {
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["early-stopping", "--percentile", "90", "--queries", "100"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    // LoadGen's reference SingleStream run: 100 queries at p90 discard the 2 highest.
    assert!(
        out.contains("Minimum queries for a SingleStream estimate: 64\n"),
        "{out}"
    );
    assert!(
        out.contains("With 100 queries: SingleStream reports the 3rd largest latency"),
        "{out}"
    );
    assert!(out.contains("discards the 2 highest"), "{out}");
    // Fraction and percent spellings agree.
    assert_eq!(
        plan(&[
            "--percentile".into(),
            "0.9".into(),
            "--queries".into(),
            "100".into()
        ]),
        plan(&[
            "--percentile".into(),
            "90".into(),
            "--queries".into(),
            "100".into()
        ])
    );
    for bad in ["0", "100", "-5", "nan"] {
        let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
            .args(["early-stopping", "--percentile", bad, "--over-bound", "3"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "--percentile {bad}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--percentile"));
    }
    // One of the two questions is required.
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["early-stopping", "--percentile", "90"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
