//! Acceptance: `pocketperf run --device sim:snapdragon-8gen3 --scenario dialogue` writes
//! `telemetry.csv` and energy figures into `result.json`, and the energy it measured from the
//! simulated tree agrees with the handset model's ground truth within the meter's own error
//! bound. One dialogue (three turns capped at 24 tokens each, to stay fast on a busy 2-core
//! machine) with the reference model; a 1 s idle baseline.
//!
//! The bound is closed-form, from the run's own samples: energy between two instants is the
//! charge counter interpolated linearly between the 100 ms samples that bracket each end, so
//! at an end `t` inside the gap `[a, b]` the interpolation is off by at most
//! `(P_max − P_min)·(t − a)(b − t)/(b − a)` (the power anywhere between the handset's idle
//! power and its full-load power), plus one counter step (1 µAh at the highest voltage seen)
//! of quantization. And the counter a sample reads is as old as the simulated handset's last
//! step (`SIM_STEP_PERIOD`, 10 ms, later when its thread is scheduled late): both ends read
//! energy that old, which shifts the difference by at most `P_max` times that age; two step
//! periods are allowed. A dialogue of a second or two spans only a dozen samples, so this
//! bound, not a fixed percentage, is what the measurement can promise (a fixed 2 % failed a
//! CI run on a 0.36 s dialogue; the interpolation-only bound failed one at 0.70 % against a
//! measured 1.26 %, the counter's age unaccounted for).

use std::path::PathBuf;
use std::process::Command;

/// The cached reference model (`$POCKETPERF_MODEL` first).
fn model_path() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

#[test]
fn dialogue_run_on_a_simulated_handset_writes_telemetry_and_energy() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("res");
    let run = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args([
            "run",
            "--scenario",
            "dialogue",
            "--device",
            "sim:snapdragon-8gen3",
        ])
        .arg("--model")
        .arg(model_path())
        .arg("--out")
        .arg(&dir)
        .env("POCKETPERF_DIALOGUES", "1")
        .env("POCKETPERF_IDLE_S", "1")
        .env("POCKETPERF_TURN_TOKENS", "24")
        .output()
        .expect("run pocketperf");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("mWh/dialogue"), "{stdout}");

    // telemetry.csv: provenance, the simulated tree's columns, rows on the run clock.
    let t = pocketperf_reports::datafiles::read_telemetry(dir.join("telemetry.csv")).unwrap();
    assert_eq!(
        t.meta.get("device").map(String::as_str),
        Some("sim:snapdragon-8gen3")
    );
    assert_eq!(
        t.meta.get("meter").map(String::as_str),
        Some("ChargeCounter")
    );
    assert!(t.meta.contains_key("model_sha256") && t.meta.contains_key("git_commit"));
    assert!(t.t_s.len() >= 10, "{} samples", t.t_s.len());
    for c in [
        "temp.soc.c",
        "temp.skin.c",
        "energy.total.mj",
        "cpufreq.policy7.khz",
    ] {
        assert!(t.column(c).is_some(), "column {c}");
    }

    // result.json: energy per dialogue, thermal, the turns as queries.
    let r = pocketperf_reports::schema::load_result(&dir).unwrap();
    let e = r.energy.as_ref().expect("energy section");
    assert_eq!(e.meter, "battery-charge-counter");
    assert!(e.reliable);
    assert_eq!(e.dialogues, 1);
    assert!(
        e.idle_power_mw > 700.0 && e.idle_power_mw < 1000.0,
        "{}",
        e.idle_power_mw
    );
    let (g, n) = (e.mwh_per_dialogue_gross.mean, e.mwh_per_dialogue_net.mean);
    assert!(g > n && n > 0.0, "gross {g} net {n}");
    assert_eq!(e.per_dialogue.len(), 1);
    assert_eq!(e.per_dialogue[0].tokens, 72);
    assert!((e.j_per_token * 72.0 / 3.6 - n).abs() < 1e-6 * n.max(1.0));
    assert!(r.thermal.is_some());
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.scenario, "Dialogue");
    assert_eq!(p.queries, 3);
    assert!(p.per_query.iter().all(|q| q.ttft_ms.is_some()));
    assert_eq!(r.meta.device.id, "sim:snapdragon-8gen3");

    // telemetry.json: the measured energy against the handset model's ground truth.
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("telemetry.json")).unwrap())
            .unwrap();
    let err = j["truth_check"]["max_rel_error_gross"].as_f64().unwrap();
    let turns = j["intervals"].as_array().unwrap();
    let dialogue = turns
        .iter()
        .find(|t| !t["label"].as_str().unwrap().contains("/turn"))
        .expect("the dialogue's interval");
    let truth_j = dialogue["truth_j"].as_f64().unwrap();
    // Rows lie at t0_ns + t_s on the run clock the intervals are given in.
    let t0_ns: u64 = t.meta["t0_ns"].parse().unwrap();
    let (start, end) = (
        (dialogue["energy"]["start_ns"].as_u64().unwrap() - t0_ns) as f64 / 1e9,
        (dialogue["energy"]["end_ns"].as_u64().unwrap() - t0_ns) as f64 / 1e9,
    );
    let resolution_j = j["summary"]["meter"]["resolution_mj"].as_f64().unwrap() / 1000.0;
    let bound = meter_error_bound_j(&t, &[start, end], resolution_j) / truth_j;
    eprintln!("measured vs ground truth: {err:.5} (the meter's bound {bound:.5})");
    assert!(
        err <= bound,
        "measured vs ground truth: {err} over the meter's bound {bound}"
    );
    // With 72 tokens the dialogue spans enough samples for the bound to mean something.
    assert!(bound < 0.1, "bound {bound}");
    let cost = &j["summary"]["sampler_cost"];
    assert!(cost["samples"].as_u64().unwrap() >= 10);
    assert!(cost["cpu_pct_of_core"].as_f64().unwrap() > 0.0);
    // Every turn is attributed, each with its ground truth.
    assert_eq!(turns.len(), 4, "three turns and the dialogue");
    assert!(
        turns
            .iter()
            .all(|t| t["energy"]["gross_j"].as_f64().unwrap() > 0.0)
    );
    assert!(turns.iter().all(|t| t["truth_j"].as_f64().is_some()));
    // tokens.csv: one row per generated token.
    let tok = pocketperf_reports::datafiles::read_tokens(dir.join("tokens.csv")).unwrap();
    assert_eq!(tok.events.len(), 72);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("POCKETPERF_TURN_TOKENS"))
    );
}

/// The largest error the meter's attribution can make over an interval whose ends are `ends`
/// (s on the rows' clock): per end, linear interpolation across the bracketing sample gap with
/// the power anywhere between the handset's idle and full-load power, plus one counter step
/// (`resolution_j`, the meter's own statement; checked against 1 µAh at the highest voltage
/// sampled); and the counter's age at a read, two simulation steps at full-load power.
fn meter_error_bound_j(
    t: &pocketperf_reports::datafiles::Telemetry,
    ends: &[f64],
    resolution_j: f64,
) -> f64 {
    let profile = pocketperf::sim::model::profile("snapdragon-8gen3").unwrap();
    let sampled_w: Vec<f64> = t
        .column("power.total.mw")
        .unwrap()
        .iter()
        .flatten()
        .map(|mw| mw / 1000.0)
        .collect();
    let p_max = sampled_w
        .iter()
        .copied()
        .fold(profile.max_power_w(), f64::max);
    let p_min = sampled_w.iter().copied().fold(profile.idle_w, f64::min);
    let v_max = t
        .column("battery.voltage.mv")
        .unwrap()
        .iter()
        .flatten()
        .fold(0.0f64, |a, &mv| a.max(mv / 1000.0));
    let counter_step_j = 3.6e-3 * v_max; // 1 µAh = 3.6 mC
    assert!(
        resolution_j >= counter_step_j * 0.99,
        "meter resolution {resolution_j} J below one 1 µAh count at {v_max} V"
    );
    let interpolation: f64 = ends
        .iter()
        .map(|&x| {
            let i = t.t_s.partition_point(|&s| s < x);
            assert!(i > 0 && i < t.t_s.len(), "end {x} s outside the samples");
            let (a, b) = (t.t_s[i - 1], t.t_s[i]);
            (p_max - p_min) * (x - a) * (b - x) / (b - a) + resolution_j
        })
        .sum();
    let age_s = 2.0 * pocketperf::telemetry::recorder::SIM_STEP_PERIOD.as_secs_f64();
    interpolation + p_max * age_s
}

#[test]
fn kv_reuse_across_turns_equals_recomputing_the_conversation() {
    use pocketperf::cmd::run::PresetArg;
    use pocketperf::run::dialogue::{DialogueSut, RuntimeSut, dialogue_set, run_dialogues};
    use pocketperf_runtime::model::SessionOptions;
    use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams};

    let isa = pocketperf_runtime::quant::isa_from_env().unwrap();
    let engine = Engine::load(&model_path(), 1, isa).unwrap();
    let opts = || SessionOptions {
        max_seq_len: 1024,
        ..Default::default()
    };
    let set = dialogue_set(PresetArg::Quick, Some(1), Some(6));
    let mut sut = RuntimeSut::new(&engine, engine.session(opts()).unwrap());
    assert!(sut.kv_reuse());
    let t0 = std::time::Instant::now();
    let clock = move || t0.elapsed().as_nanos() as u64;
    let (records, errors) = run_dialogues(&mut sut, &set, &clock, |_| {});
    assert!(errors.is_empty(), "{errors:?}");
    let turns = &records[0].turns;
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[0].reused, 0);
    // Later turns prefill only what is new: the previous reply's last token, the end of the
    // assistant message, the user turn and the assistant header.
    let mut held = 0;
    for t in turns {
        assert_eq!(t.reused, held);
        assert_eq!(t.generated, 6);
        held += t.prefilled + t.generated - 1;
    }
    assert!(turns[1].prefilled < turns[0].prefilled + 6);
    assert_eq!(sut.context().len(), held);
    // A fresh session fed the same ids from scratch generates the same last reply.
    let ctx = sut.context().to_vec();
    let reply = sut.last_reply().to_vec();
    let prompt = &ctx[..ctx.len() - (reply.len() - 1)];
    let mut fresh = engine.session(opts()).unwrap();
    let mut got = Vec::new();
    fresh
        .generate(
            prompt,
            &GenerateOptions {
                max_new_tokens: reply.len(),
                stop_at_eog: false,
                sampling: SamplingParams::default(),
            },
            |_, id| got.push(id),
        )
        .unwrap();
    assert_eq!(got, reply);
}

#[test]
fn single_stream_on_a_simulated_handset_writes_energy_per_token_and_per_query() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("res");
    let cfg = out.path().join("user.conf");
    std::fs::write(
        &cfg,
        "llm.*.min_query_count = 3\nllm.*.max_query_count = 3\n*.*.min_duration = 0\n",
    )
    .unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args([
            "run",
            "--scenario",
            "single-stream",
            "--device",
            "sim:snapdragon-8gen3",
        ])
        .args(["--threads", "1", "--warmup", "0"])
        .arg("--config")
        .arg(&cfg)
        .arg("--model")
        .arg(model_path())
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("run pocketperf");
    assert!(
        matches!(run.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let r = pocketperf_reports::schema::load_result(&dir).unwrap();
    let e = r
        .energy
        .as_ref()
        .expect("energy section in a SingleStream run");
    assert_eq!((e.basis.as_str(), e.dialogues), ("queries", 0));
    let p = r.performance.as_ref().unwrap();
    assert_eq!(e.per_query.len(), 3, "one query at a time: each metered");
    let tokens: u64 = p.per_query.iter().map(|q| u64::from(q.tokens)).sum();
    assert_eq!(e.per_query.iter().map(|q| q.tokens).sum::<u64>(), tokens);
    // The 200-token dialogue equivalent is the mean of each query's energy per token × 200.
    let eq: Vec<f64> = e
        .per_query
        .iter()
        .map(|q| q.net_mwh / q.tokens as f64 * 200.0)
        .collect();
    let mean = eq.iter().sum::<f64>() / eq.len() as f64;
    assert!((e.mwh_per_dialogue_net.mean - mean).abs() < 1e-9 * mean.abs().max(1.0));
    assert!(
        e.j_per_token > 0.0 && e.j_per_token.is_finite(),
        "{}",
        e.j_per_token
    );
    // Each query's measured gross energy against the handset model's ground truth, within the
    // meter's closed-form bound over that query's own ends (a fixed 2 % failed a CI run: a query
    // of about a second spans only ten samples).
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("telemetry.json")).unwrap())
            .unwrap();
    let tel = pocketperf_reports::datafiles::read_telemetry(dir.join("telemetry.csv")).unwrap();
    let t0_ns: u64 = tel.meta["t0_ns"].parse().unwrap();
    let resolution_j = j["summary"]["meter"]["resolution_mj"].as_f64().unwrap() / 1000.0;
    let intervals = j["intervals"].as_array().unwrap();
    for q in &e.per_query {
        let t = intervals
            .iter()
            .find(|i| i["label"] == format!("query{}", q.id))
            .unwrap_or_else(|| panic!("query{} in telemetry.json", q.id));
        let truth_j = t["truth_j"].as_f64().unwrap();
        let (start, end) = (
            (t["energy"]["start_ns"].as_u64().unwrap() - t0_ns) as f64 / 1e9,
            (t["energy"]["end_ns"].as_u64().unwrap() - t0_ns) as f64 / 1e9,
        );
        let bound_j = meter_error_bound_j(&tel, &[start, end], resolution_j);
        let err_j = (q.gross_mwh * 3.6 - truth_j).abs();
        assert!(
            err_j <= bound_j,
            "query {}: {} mWh vs truth {} mWh, off by {err_j} J over the meter's bound {bound_j} J",
            q.id,
            q.gross_mwh,
            truth_j / 3.6
        );
        eprintln!(
            "query {}: off by {err_j:.4} J, bound {bound_j:.4} J, truth {truth_j:.4} J",
            q.id
        );
        // Still a bound that means something: under half the query's energy.
        assert!(bound_j < 0.5 * truth_j, "bound {bound_j} J of {truth_j} J");
    }
    // The gate reads it as energy per token.
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["gate", "--baseline"])
        .arg(&dir)
        .arg("--candidate")
        .arg(&dir)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("energy.net_j_per_token"), "{s}");
}
