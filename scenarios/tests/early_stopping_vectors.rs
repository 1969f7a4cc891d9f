//! Early stopping reproduces every row of LoadGen's reference vectors exactly.

mod common;

use pocketperf_scenarios::{EsRank, min_passing_queries, single_stream_rank};

#[test]
fn h_table_matches_loadgen_exactly() {
    let v: serde_json::Value = serde_json::from_str(&common::read_shared(
        "reference/loadgen/early_stopping_vectors.json",
    ))
    .expect("vectors parse");
    assert_eq!(v["confidence"].as_f64(), Some(0.99));
    assert_eq!(v["tolerance"].as_f64(), Some(0.0));
    let rows = v["h"].as_array().expect("h rows");
    assert!(
        rows.len() > 1000,
        "expected the full table, got {}",
        rows.len()
    );
    let mut bad = Vec::new();
    for r in rows {
        let p = r["p"].as_f64().unwrap();
        let t = r["t"].as_u64().unwrap();
        let h = r["h"].as_u64().unwrap();
        let got = min_passing_queries(p, t).unwrap();
        if got != h {
            bad.push(format!("p={p} t={t}: want {h}, got {got}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
}

#[test]
fn single_stream_table_matches_loadgen_exactly() {
    let v: serde_json::Value = serde_json::from_str(&common::read_shared(
        "reference/loadgen/early_stopping_vectors.json",
    ))
    .expect("vectors parse");
    let rows = v["single_stream"].as_array().expect("single_stream rows");
    assert!(!rows.is_empty());
    let mut bad = Vec::new();
    for r in rows {
        let p = r["p"].as_f64().unwrap();
        let n = r["n"].as_u64().unwrap();
        let t = r["t"].as_i64().unwrap();
        let got = match single_stream_rank(p, n).unwrap() {
            EsRank::NotEnough { .. } => -1,
            EsRank::Estimate { t, index, .. } => {
                assert_eq!(index, n - t, "index is n - t");
                t as i64
            }
        };
        if got != t {
            bad.push(format!("p={p} n={n}: want {t}, got {got}"));
        }
    }
    assert!(bad.is_empty(), "{} mismatches: {:?}", bad.len(), bad);
}
