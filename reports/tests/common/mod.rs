//! Hand-made result files and sample generators shared by the integration tests.
#![allow(dead_code)]

use chrono::{TimeZone, Utc};
use pocketperf_reports::render::RenderContext;
use pocketperf_reports::schema::*;
use pocketperf_reports::stats::Percentiles;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, LogNormal};

pub fn fixed_ctx() -> RenderContext {
    RenderContext::at(Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap())
}

pub fn meta(device_id: &str, device_name: &str) -> RunMeta {
    RunMeta {
        tool: "pocketperf".into(),
        tool_version: "0.1.0".into(),
        git_commit: "0123abcd".into(),
        device: DeviceInfo {
            id: device_id.into(),
            name: device_name.into(),
            cpu: "8x Cortex-X4/A720/A520".into(),
            os: "Android 14".into(),
        },
        model: ModelInfo {
            name: "tinyllama-1.1b".into(),
            path: "models/tinyllama.Q4_0.gguf".into(),
            sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            file_type: "Q4_0".into(),
        },
        backend: "cpu".into(),
        isa: "neon".into(),
        threads: 4,
        // Keys in sorted order so the output is the same whether or not serde_json preserves order.
        settings: serde_json::json!({"scenario": "SingleStream", "seed": 7, "suite": "quick"}),
        started_utc: Utc.with_ymd_and_hms(2026, 1, 1, 10, 0, 0).unwrap(),
        finished_utc: Utc.with_ymd_and_hms(2026, 1, 1, 10, 5, 0).unwrap(),
    }
}

/// Twelve queries with hand-picked timings: 10 tokens each, TTFT 100..155 ms, TPOT 20..31 ms.
pub fn hand_queries() -> Vec<QuerySample> {
    (0..12u32)
        .map(|i| {
            let ttft = 100.0 + 5.0 * f64::from(i);
            let tpot = 20.0 + f64::from(i);
            QuerySample {
                id: u64::from(i),
                sample_index: u64::from(i) * 3,
                start_s: f64::from(i),
                latency_ms: ttft + 9.0 * tpot,
                ttft_ms: Some(ttft),
                tokens: 10,
                tpot_ms: Some(tpot),
                minor_faults: None,
                major_faults: None,
            }
        })
        .collect()
}

pub fn performance_from(per_query: Vec<QuerySample>) -> Performance {
    let lat: Vec<f64> = per_query.iter().map(|q| q.latency_ms).collect();
    let ttft: Vec<f64> = per_query.iter().filter_map(|q| q.ttft_ms).collect();
    let tpot: Vec<f64> = per_query.iter().filter_map(|q| q.tpot_ms).collect();
    let total_s: f64 = lat.iter().sum::<f64>() / 1000.0;
    let tokens: u32 = per_query.iter().map(|q| q.tokens).sum();
    Performance {
        scenario: "SingleStream".into(),
        mode: "PerformanceOnly".into(),
        valid: true,
        invalid_reasons: vec![],
        queries: per_query.len() as u64,
        duration_s: total_s,
        qps: per_query.len() as f64 / total_s,
        tokens_per_s: f64::from(tokens) / total_s,
        latency_ms: Percentiles::from_samples(&lat).unwrap(),
        ttft_ms: Percentiles::from_samples(&ttft),
        tpot_ms: Percentiles::from_samples(&tpot),
        itl_ms: Percentiles::from_samples(&tpot),
        early_stopping: None,
        per_query,
        backend_counters: None,
        warmup: None,
    }
}

pub fn question(subject: &str, row: u64, correct: bool, generated: &str) -> QuestionRecord {
    QuestionRecord {
        subject: subject.into(),
        row,
        answer: 'B',
        choice: Some(if correct { 'B' } else { 'C' }),
        logprobs: None,
        generated: Some(generated.into()),
        correct,
    }
}

/// A complete run with every section.
pub fn hand_result() -> ResultFile {
    let per_question = vec![
        question("anatomy", 1, true, "B"),
        question("anatomy", 2, false, "C because"),
        question("astronomy", 5, true, "B"),
        question("astronomy", 9, true, "The answer is B"),
    ];
    ResultFile {
        schema_version: SCHEMA_VERSION,
        meta: meta("sim:snapdragon-8gen3", "Simulated SD 8 Gen 3"),
        performance: Some(performance_from(hand_queries())),
        accuracy: Some(Accuracy {
            dataset: "mmlu-576".into(),
            mode: "generate".into(),
            shots: 0,
            n: 4,
            correct: 3,
            accuracy: 0.75,
            ci95: [0.3006, 0.9544],
            per_subject: vec![
                GroupAccuracy {
                    name: "anatomy".into(),
                    n: 2,
                    correct: 1,
                    accuracy: 0.5,
                },
                GroupAccuracy {
                    name: "astronomy".into(),
                    n: 2,
                    correct: 2,
                    accuracy: 1.0,
                },
            ],
            per_category: vec![GroupAccuracy {
                name: "STEM".into(),
                n: 4,
                correct: 3,
                accuracy: 0.75,
            }],
            per_question,
            wall_s: 12.5,
        }),
        energy: Some(Energy {
            meter: "sim".into(),
            reliable: true,
            idle_power_mw: 250.0,
            dialogues: 2,
            mwh_per_dialogue_gross: MeanCi {
                mean: 5.0,
                lo: 4.0,
                hi: 6.0,
                n: 2,
            },
            mwh_per_dialogue_net: MeanCi {
                mean: 3.0,
                lo: 2.5,
                hi: 3.5,
                n: 2,
            },
            j_per_token: 0.054,
            tokens_per_j: 18.5,
            per_dialogue: vec![
                DialogueEnergy {
                    id: 0,
                    tokens: 200,
                    duration_s: 10.0,
                    gross_mwh: 4.5,
                    net_mwh: 2.8,
                    mean_skin_c: 31.0,
                    peak_soc_c: 55.0,
                },
                DialogueEnergy {
                    id: 1,
                    tokens: 200,
                    duration_s: 10.5,
                    gross_mwh: 5.5,
                    net_mwh: 3.2,
                    mean_skin_c: 32.0,
                    peak_soc_c: 58.0,
                },
            ],
            basis: "dialogues".into(),
            per_query: vec![],
        }),
        thermal: Some(Thermal {
            max_soc_c: 58.0,
            max_skin_c: 33.5,
            mean_skin_c: 31.5,
            throttled_s: 0.0,
        }),
        governor: None,
        robustness: Some(serde_json::json!({"crashes": 0, "drift": 0})),
        warnings: vec!["battery current sign inferred from discharge".into()],
        memory: None,
    }
}

/// `n` queries of `tokens` tokens with lognormal TTFT and TPOT (medians in ms), seeded.
pub fn lognormal_queries(
    n: usize,
    seed: u64,
    ttft_median: f64,
    tpot_median: f64,
) -> Vec<QuerySample> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ttft_d = LogNormal::new(ttft_median.ln(), 0.20).unwrap();
    let tpot_d = LogNormal::new(tpot_median.ln(), 0.15).unwrap();
    let tokens = 64u32;
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            let ttft = ttft_d.sample(&mut rng);
            let tpot = tpot_d.sample(&mut rng);
            let latency = ttft + tpot * f64::from(tokens - 1);
            let q = QuerySample {
                id: i as u64,
                sample_index: i as u64,
                start_s: t,
                latency_ms: latency,
                ttft_ms: Some(ttft),
                tokens,
                tpot_ms: Some(tpot),
                minor_faults: None,
                major_faults: None,
            };
            t += latency / 1000.0;
            q
        })
        .collect()
}

/// A performance-only run built from lognormal samples.
pub fn lognormal_result(seed: u64, tpot_median: f64) -> ResultFile {
    ResultFile {
        schema_version: SCHEMA_VERSION,
        meta: meta("adb:R5CW123", "Pixel 8"),
        performance: Some(performance_from(lognormal_queries(
            200,
            seed,
            150.0,
            tpot_median,
        ))),
        accuracy: None,
        energy: None,
        thermal: None,
        governor: None,
        robustness: None,
        warnings: vec![],
        memory: None,
    }
}
