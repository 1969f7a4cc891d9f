//! A short soak of the reference model (SmolLM2-135M-Instruct Q4_1), the CI-sized version of
//! the 72-hour run: dialogues, three probe rounds (a greedy prompt and an MMLU-576 question
//! scored by log-probability, from `POCKETPERF_MMLU_DIR` or `../shared/datasets/mmlu`), memory
//! sampling and the report. Its outputs must stay bit-identical across rounds, no server may
//! crash or stall. Sized to finish well under two minutes on a loaded 2-core machine.

mod soak_util;

use serde_json::Value;
use soak_util::{
    check, holds_the_model, journal, mmlu_dir, of_type, reference_model, robustness, run,
};

#[test]
fn a_short_soak_of_the_reference_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let (model, out_s, mmlu) = (
        reference_model().display().to_string(),
        out.display().to_string(),
        mmlu_dir().display().to_string(),
    );
    let o = run(
        &[
            "soak",
            "--out",
            &out_s,
            "--model",
            &model,
            "--threads",
            "1",
            "--duration",
            "20s",
            "--dialogues",
            "2",
            "--max-turn-tokens",
            "4",
            "--probe-prompts",
            "1",
            "--probe-tokens",
            "4",
            "--probe-mmlu",
            "1",
            "--mmlu-dir",
            &mmlu,
            "--probe-every",
            "10s",
            "--rss-every",
            "0s",
            "--checkpoint-every",
            "10s",
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{stdout}\n{stderr}");
    let doc = robustness(&out);
    assert_eq!(doc["status"], "completed", "{stdout}");
    for name in ["crashes", "timeouts", "output_drift"] {
        assert_eq!(
            check(&doc, name)["verdict"],
            "pass",
            "{name}: {}",
            check(&doc, name)
        );
    }
    let j = journal(&out);
    assert_eq!(of_type(&j, "sut_start").len(), 1);
    assert!(of_type(&j, "probe_round").len() >= 2);
    assert!(!of_type(&j, "query").is_empty());
    for q in of_type(&j, "query") {
        assert_eq!(q["generated"], 4);
        assert!(q["ttft_ms"].as_f64().unwrap() > 0.0 && q["tpot_ms"].as_f64().unwrap() > 0.0);
    }
    let mmlu: Vec<&Value> = of_type(&j, "probe")
        .into_iter()
        .filter(|p| p["kind"] == "mmlu")
        .collect();
    assert!(mmlu.len() >= 2);
    for p in &mmlu {
        let lps = p["logprobs"].as_array().unwrap();
        assert_eq!(lps.len(), 4);
        // Log-probabilities of four of the 49152 tokens: finite, negative, a mass of at most
        // one (0-shot, this small model puts about 1% on the letters), and the choice is the
        // most probable letter.
        let lps: Vec<f64> = lps.iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(lps.iter().all(|l| l.is_finite() && *l < 0.0), "{p}");
        let total: f64 = lps.iter().map(|l| l.exp()).sum();
        assert!(total > 0.0 && total <= 1.0, "{p}");
        let best = (0..4).fold(0, |b, i| if lps[i] > lps[b] { i } else { b });
        assert_eq!(p["choice"], ["A", "B", "C", "D"][best], "{p}");
    }
    // The model is resident in the server.
    let rss = of_type(&j, "rss");
    assert!(!rss.is_empty());
    assert!(rss.iter().all(|r| holds_the_model(r)), "{:?}", rss[0]);
    let html = std::fs::read_to_string(out.join("robustness.html")).unwrap();
    assert!(html.contains("<svg"));
}
