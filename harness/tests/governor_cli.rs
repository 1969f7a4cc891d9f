//! Acceptance: the governor wherever it is offered. `run --scenario dialogue --device
//! sim:PROFILE --governor pid` closes the loop of the real runtime and the simulated handset:
//! the governor reads the simulated phone's skin and its duty cycle throttles the real decode
//! once the phone is hot, or its caps lower the phone's OPP and the real decode follows;
//! a governor flag that cannot apply is refused by name (exit 2); the
//! commands without a governor (`mmlu run`, `serve`, `soak`) have no `--governor` flag.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn model_path() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

fn pocketperf(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocketperf"));
    c.args(args);
    c
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

/// Runs `args`, which must exit 2 with `needle` on stderr.
#[track_caller]
fn refused(args: &[&str], needle: &str) {
    let o = pocketperf(args).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(needle),
        "{args:?}: {}",
        text(&o)
    );
}

/// `tokens.csv` without its `#` provenance lines: header and rows.
fn tokens_csv(dir: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let raw = std::fs::read_to_string(dir.join("tokens.csv")).unwrap();
    let body: String = raw
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut r = csv::Reader::from_reader(body.as_bytes());
    let header = r.headers().unwrap().iter().map(str::to_string).collect();
    let rows = r
        .records()
        .map(|rec| rec.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// One short dialogue (40 tokens a turn) on a simulated Snapdragon handset 300 times lighter
/// than its profile, under the PID governor targeting 30 °C (20 ms period, 1 thread), with
/// `extra` flags; it must succeed. Returns its output.
fn governed_dialogue(dir: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--scenario",
        "dialogue",
        "--device",
        "sim:snapdragon-8gen3,thermal-speedup=300",
        "--governor",
        "pid",
        "--target-temp",
        "30",
        "--governor-period-ms",
        "20",
        "--threads",
        "1",
    ];
    args.extend_from_slice(extra);
    let o = pocketperf(&args)
        .arg("--model")
        .arg(model_path())
        .arg("--out")
        .arg(dir)
        .env("POCKETPERF_DIALOGUES", "1")
        .env("POCKETPERF_IDLE_S", "0")
        .env("POCKETPERF_TURN_TOKENS", "40")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    o
}

fn column(header: &[String], rows: &[Vec<String>], name: &str) -> Vec<String> {
    let i = header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    rows.iter().map(|r| r[i].clone()).collect()
}

#[test]
fn dialogue_pid_on_a_simulated_handset_throttles_the_real_decode_when_the_phone_is_hot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("res");
    // A handset 300 times lighter than the snapdragon profile (skin time constant 2.6 s) and
    // a target of 30 °C, which its idle power alone (28.2 °C) does not reach but a few
    // seconds of decoding does, even on a loaded host: the governor must throttle.
    governed_dialogue(&dir, &[]);

    let (header, rows) = tokens_csv(&dir);
    assert!(rows.len() >= 40, "{} token rows", rows.len());
    let busy: Vec<f64> = column(&header, &rows, "gov_busy")
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let temps: Vec<f64> = column(&header, &rows, "gov_temp_c")
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| c.parse().unwrap())
        .collect();
    let pauses: Vec<f64> = column(&header, &rows, "gov_pause_ms")
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    // The actuator starts unthrottled and moves once the simulated skin nears the target.
    assert_eq!(busy[0], 1.0, "{busy:?}");
    let least = busy.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(least < 0.9, "duty never moved: {busy:?}\n{temps:?}");
    assert!(pauses.iter().sum::<f64>() > 0.0, "no idle was inserted");
    // The sensor is the simulated phone's skin (ambient 25 °C, heated by the real work), not
    // the host's: the phone starts at the ambient, and every reading the governor logged with
    // a token is the skin the simulated tree's telemetry recorded at that moment (linear
    // between its 100 ms samples). How warm the first token finds it depends on how long
    // this host takes for the first prompt, so no fixed band is asserted for it.
    let hottest = temps.iter().copied().fold(f64::MIN, f64::max);
    assert!(hottest > 29.0 && hottest < 60.0, "{temps:?}");
    let tel = pocketperf_reports::datafiles::read_telemetry(dir.join("telemetry.csv")).unwrap();
    let skin_pts = tel.points(tel.column("temp.skin.c").expect("skin column"));
    assert!(
        skin_pts[0].0 < 0.01 && (skin_pts[0].1 - 25.0).abs() < 0.1,
        "the phone starts at the ambient: {:?}",
        &skin_pts[..2]
    );
    let t_ms: Vec<f64> = column(&header, &rows, "t_ms")
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let logged = column(&header, &rows, "gov_temp_c");
    let mut compared = 0;
    for (t, c) in t_ms.iter().zip(&logged) {
        let (Ok(g), Some(i)) = (
            c.parse::<f64>(),
            skin_pts.iter().position(|p| p.0 * 1e3 > *t),
        ) else {
            continue;
        };
        if i == 0 {
            continue;
        }
        let ((t0, s0), (t1, s1)) = (skin_pts[i - 1], skin_pts[i]);
        let at = s0 + (s1 - s0) * (t / 1e3 - t0) / (t1 - t0);
        assert!(
            (g - at).abs() < 1.5,
            "token at {t} ms: governor read {g} °C, the simulated skin was {at:.3} °C"
        );
        compared += 1;
    }
    assert!(
        compared * 2 > rows.len(),
        "{compared} of {} tokens",
        rows.len()
    );

    let file = pocketperf_reports::schema::load_result(&dir).unwrap();
    assert_eq!(
        file.meta.device.id,
        "sim:snapdragon-8gen3,thermal-speedup=300"
    );
    let g = file.governor.expect("governor section");
    assert_eq!(g["policy"], "pid");
    let zones: Vec<&str> = g["sensor_zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["name"].as_str().unwrap())
        .collect();
    assert!(zones.contains(&"skin-msm-therm"), "{zones:?}");
    assert!(g["level_changes"].as_u64().unwrap() >= 1, "{g}");
    assert!(g["idle_inserted_s"].as_f64().unwrap() > 0.0, "{g}");
    // The simulated phone saw the throttled work: the telemetry of its tree carries the
    // governor's gauge, and the skin it recorded is the one the governor read.
    let t = &tel;
    let skin = t.column("temp.skin.c").expect("skin column");
    let peak = skin.iter().flatten().copied().fold(f64::MIN, f64::max);
    assert!(
        (peak - hottest).abs() < 3.0,
        "telemetry {peak}, governor {hottest}"
    );
    assert!(t.column("governor.busy").is_some());
    assert!(t.column("governor.busy_share").is_some());

    // The PID's table is the handset's duty ladder, calibrated to the busy share the decode
    // gets once 2 s of its work are measured: every calibrated table is idle + share·(model
    // − idle), and tokens.csv carries the share in force from then on.
    let p = pocketperf::sim::model::profile("snapdragon-8gen3").unwrap();
    let cal = &g["calibration"];
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let model = floats(&cal["model_level_outputs"]);
    let ladder: Vec<f64> =
        pocketperf::sim::governor::ladder(&p, pocketperf::sim::governor::SimActuator::Duty)
            .iter()
            .map(|o| o.power_w)
            .collect();
    assert_eq!(model.len(), ladder.len());
    for (m, l) in model.iter().zip(&ladder) {
        assert!((m - l).abs() < 1e-9, "{model:?} vs {ladder:?}");
    }
    let measured = cal["measured_s"].as_f64().unwrap();
    let events = cal["events"].as_array().unwrap();
    assert_eq!(events.is_empty(), measured < 2.0, "{cal}");
    for ev in events {
        let scale = ev["scale"].as_f64().unwrap();
        assert!((0.05..=1.0).contains(&scale), "{ev}");
        for (got, m) in floats(&ev["level_outputs"]).iter().zip(&model) {
            let expect = p.idle_w + scale * (m - p.idle_w);
            assert!((got - expect).abs() < 1e-9, "{got} vs {expect}");
        }
    }
    let shares = column(&header, &rows, "gov_busy_share");
    if let Some(last) = events.last() {
        let scale = last["scale"].as_f64().unwrap();
        let end: f64 = shares.last().unwrap().parse().unwrap();
        assert!((end - scale).abs() < 1e-4, "{end} vs {scale}");
        assert!(shares[0].is_empty(), "{shares:?}");
    } else {
        assert!(shares.iter().all(String::is_empty), "{shares:?}");
    }
}

#[test]
fn a_loadgen_scenario_on_a_simulated_handset_governs_by_the_handsets_skin() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("user.conf");
    std::fs::write(
        &cfg,
        "llm.*.min_query_count = 3\nllm.*.max_query_count = 3\n*.*.min_duration = 0\n",
    )
    .unwrap();
    let dir = tmp.path().join("res");
    let o = pocketperf(&[
        "run",
        "--scenario",
        "single-stream",
        "--device",
        "sim:snapdragon-8gen3,thermal-speedup=300",
        "--governor",
        "pid",
        "--target-temp",
        "36",
        "--governor-period-ms",
        "20",
        "--threads",
        "1",
        "--warmup",
        "0",
    ])
    .arg("--config")
    .arg(&cfg)
    .arg("--model")
    .arg(model_path())
    .arg("--out")
    .arg(&dir)
    .output()
    .unwrap();
    // Three queries cannot satisfy early stopping: the verdict may be INVALID (exit 1); the
    // run itself must complete.
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let g = pocketperf_reports::schema::load_result(&dir)
        .unwrap()
        .governor
        .expect("governor section");
    let zones: Vec<&str> = g["sensor_zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["name"].as_str().unwrap())
        .collect();
    assert!(zones.contains(&"skin-msm-therm"), "{zones:?}");
    let (header, rows) = tokens_csv(&dir);
    let temps: Vec<f64> = column(&header, &rows, "gov_temp_c")
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| c.parse().unwrap())
        .collect();
    assert!(!temps.is_empty());
    // The simulated phone's skin: from its 25 °C ambient up, never a host reading.
    assert!(temps.iter().all(|t| (24.9..60.0).contains(t)), "{temps:?}");
}

/// Offline under a governor keeps its batched decoder: the governor acts once per batched
/// pass, and every token of the batch records the governor's state.
#[test]
fn offline_under_a_governor_stays_batched_and_governs_every_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("user.conf");
    std::fs::write(
        &cfg,
        "llm.*.min_query_count = 4\nllm.*.max_query_count = 4\n*.*.min_duration = 0\n",
    )
    .unwrap();
    let dir = tmp.path().join("res");
    let o = pocketperf(&[
        "run",
        "--scenario",
        "offline",
        "--device",
        "sim:snapdragon-8gen3,thermal-speedup=300",
        "--governor",
        "pid",
        "--target-temp",
        "36",
        "--governor-period-ms",
        "20",
        "--threads",
        "1",
        "--warmup",
        "0",
        "--prefill-chunk",
        "16",
    ])
    .arg("--config")
    .arg(&cfg)
    .arg("--model")
    .arg(model_path())
    .arg("--out")
    .arg(&dir)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let summary = std::fs::read_to_string(dir.join("mlperf_log_summary.txt")).unwrap();
    assert!(
        summary.contains("SUT name : pocketperf-runtime (in-process, batched decode)"),
        "{summary}"
    );
    let r = pocketperf_reports::schema::load_result(&dir).unwrap();
    let d = &r.meta.settings["sut"]["decoder"];
    assert_eq!(d["kind"], "batched", "{d}");
    assert_eq!(d["governor_per_pass"], true, "{d}");
    let g = r.governor.expect("governor section");
    assert!(g["ticks"].as_u64().is_some_and(|t| t > 0), "{g}");
    let (header, rows) = tokens_csv(&dir);
    let total: u64 = r
        .performance
        .unwrap()
        .per_query
        .iter()
        .map(|q| u64::from(q.tokens))
        .sum();
    assert_eq!(rows.len() as u64, total);
    assert_eq!(
        g["tokens"].as_u64(),
        Some(total),
        "one governor record per token"
    );
    // Every token of the batch carries the governor's state.
    let levels = column(&header, &rows, "gov_level");
    assert!(levels.iter().all(|c| !c.is_empty()), "{levels:?}");
}

#[test]
fn dialogue_caps_on_a_simulated_handset_lower_its_opp_and_slow_the_real_decode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("res");
    let o = governed_dialogue(&dir, &["--governor-actuator", "caps"]);
    let (header, rows) = tokens_csv(&dir);
    let caps: Vec<u64> = column(&header, &rows, "gov_caps")
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    // The profile's OPP table runs from 441.6 MHz to 3.3024 GHz: the cap starts at the top
    // and the governor lowers it once the simulated skin nears the target.
    assert_eq!(caps[0], 3_302_400, "{caps:?}");
    let lowest = *caps.iter().min().unwrap();
    assert!((441_600..3_302_400).contains(&lowest), "{caps:?}");
    // The real decode followed the simulated OPP: it was stretched.
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("simulated handset clock: decode stretched by"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let s: f64 = line
        .trim_start_matches("simulated handset clock: decode stretched by ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(s > 0.0, "{line}");
    // No duty cycle in this actuator: no idle inserted by the governor.
    let g = pocketperf_reports::schema::load_result(&dir)
        .unwrap()
        .governor
        .unwrap();
    assert_eq!(g["idle_inserted_s"].as_f64(), Some(0.0), "{g}");
}

#[test]
fn governor_flags_that_cannot_apply_on_a_simulated_handset_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // The LoadGen scenarios do not pace their decode to the handset's OPP: no caps there.
    // Neither scenario writes the host's caps or reads another tree on a simulated handset.
    for (scenario, extra, named) in [
        (
            "single-stream",
            &["--governor-actuator", "caps-duty", "--allow-sysfs-caps"][..],
            "--governor-actuator caps-duty, --allow-sysfs-caps not supported with \
             --device sim:snapdragon-8gen3",
        ),
        (
            "dialogue",
            &["--allow-sysfs-caps", "--governor-sysfs-root", "/tmp"],
            "--allow-sysfs-caps, --governor-sysfs-root not supported with \
             --device sim:snapdragon-8gen3",
        ),
    ] {
        let mut args = vec![
            "run",
            "--scenario",
            scenario,
            "--device",
            "sim:snapdragon-8gen3",
            "--governor",
            "pid",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        refused(&args, named);
        assert!(!out.exists(), "nothing is written before the refusal");
    }
    // The dialogue scenario runs in process: a governor cannot act on another process.
    refused(
        &[
            "run",
            "--scenario",
            "dialogue",
            "--sut",
            "process",
            "--governor",
            "pid",
            "--out",
            out.to_str().unwrap(),
        ],
        "--sut process not supported by the dialogue scenario",
    );
    // A malformed simulated-device option is an error naming the option.
    refused(
        &[
            "run",
            "--scenario",
            "dialogue",
            "--device",
            "sim:snapdragon-8gen3,thermal-speedup=0",
            "--out",
            out.to_str().unwrap(),
        ],
        "thermal-speedup=K",
    );
    assert!(!out.exists());
}

#[test]
fn commands_without_a_governor_have_no_governor_flag() {
    for args in [
        &["mmlu", "run", "--governor", "pid"][..],
        &["serve", "--governor", "pid"],
        &["serve", "--http", "127.0.0.1:0", "--governor", "pid"],
        &["soak", "--governor", "pid"],
    ] {
        let o = pocketperf(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("unexpected argument '--governor'"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn a_thermal_speedup_shortens_the_handsets_time_constants_and_keeps_its_steady_state() {
    use pocketperf::sim::model::{Activity, HandsetModel, profile};
    use pocketperf::telemetry::DeviceSpec;

    let spec = DeviceSpec::parse("sim:snapdragon-8gen3,thermal-speedup=20").unwrap();
    assert_eq!(spec.id(), "sim:snapdragon-8gen3,thermal-speedup=20");
    assert_eq!(
        DeviceSpec::parse("sim:snapdragon-8gen3").unwrap().id(),
        "sim:snapdragon-8gen3"
    );
    for bad in [
        "sim:snapdragon-8gen3,thermal-speedup=1001",
        "sim:snapdragon-8gen3,thermal-speedup=2.5",
        "sim:snapdragon-8gen3,speedup=2",
    ] {
        assert!(DeviceSpec::parse(bad).is_err(), "{bad}");
    }
    let base = profile("snapdragon-8gen3").unwrap();
    let fast = spec.handset().unwrap();
    // The eigenvalues of the RC network scale with 1/C: both time constants divide by K.
    let (s0, f0) = pocketperf::sim::governor::time_constants(&base);
    let (s1, f1) = pocketperf::sim::governor::time_constants(&fast);
    assert!((s0 / s1 - 20.0).abs() < 1e-9 && (f0 / f1 - 20.0).abs() < 1e-9);
    // Same power for K times shorter: the same temperatures at the same scaled instants, and
    // the same steady skin T_a + R_sa·P; energy per second of wall time is unchanged.
    let act = Activity {
        busy: 0.5,
        freq_level: 9,
    };
    let (mut a, mut b) = (HandsetModel::new(base.clone()), HandsetModel::new(fast));
    for _ in 0..200 {
        a.step(20.0, act);
        b.step(1.0, act);
    }
    assert!(
        (a.skin_c() - b.skin_c()).abs() < 1e-6,
        "{} {}",
        a.skin_c(),
        b.skin_c()
    );
    let steady = base.ambient_c + base.r_skin_amb_k_per_w * base.power_w(9, 0.5);
    let mut c = HandsetModel::new(spec.handset().unwrap());
    c.step(20.0 * s1, act);
    assert!(
        (c.skin_c() - steady).abs() < 0.01,
        "{} {steady}",
        c.skin_c()
    );
    assert!((b.energy_j() * 20.0 - a.energy_j()).abs() < 1e-6 * a.energy_j());
}

#[test]
fn the_pace_of_a_simulated_handset_is_its_frequency_ratio() {
    use pocketperf::sim::model::profile;
    use pocketperf::sim::pace::SimPace;

    let p = profile("snapdragon-8gen3").unwrap();
    let pace = SimPace::new(&p);
    assert_eq!(pace.slowdown(), 1.0);
    pace.set_in_force(0);
    let top = f64::from(p.opps[p.max_level()].freq_khz);
    let low = f64::from(p.opps[0].freq_khz);
    assert!((pace.slowdown() - top / low).abs() < 1e-12);
    pace.request(99);
    assert_eq!(
        pace.requested().load(std::sync::atomic::Ordering::Relaxed),
        p.max_level()
    );
}

#[test]
fn a_fixed_level_goes_with_governor_fixed_only() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    refused(
        &["run", "--governor-level", "3", "--out", out_s],
        "--governor-level applies to --governor fixed only (not off)",
    );
    refused(
        &["run", "--governor", "fixed", "--out", out_s],
        "--governor fixed needs --governor-level N",
    );
    refused(
        &[
            "run",
            "--governor",
            "fixed",
            "--governor-level",
            "2",
            "--governor-period-ms",
            "500",
            "--out",
            out_s,
        ],
        "--governor-period-ms not used with --governor fixed",
    );
    assert!(!out.exists(), "nothing is written before the refusal");
    refused(
        &[
            "governor",
            "sim",
            "--device",
            "sim:pixel-8-pro",
            "--governor",
            "fixed",
        ],
        "the simulation compares off, step and pid",
    );
}
