//! The thermal governor in closed loop on the simulated handsets, in virtual time: the issue's
//! acceptance (skin target 42 °C, ambient 25 °C, 30 simulated minutes) on both profiles, the
//! closed-form sustainable throughput against an independent brute force, sensor dropout,
//! a model/handset mismatch, a decode that gets a fifth of the capacity the model assumes
//! (with and without calibration to that busy share), and the `pocketperf governor sim`
//! command.

use pocketperf::sim::governor::{
    self as governor_sim, SimActuator, SimPolicy, SimSensor, SimSpec, compare, ladder, simulate,
    sustainable, time_constants,
};
use pocketperf::sim::model::{Activity, HandsetModel, HandsetProfile, profile, profile_names};
use pocketperf_runtime::governor::{ScheduleConfig, StepStatus};

fn prof(name: &str) -> HandsetProfile {
    profile(name).expect("built-in profile")
}

#[test]
fn sustainable_closed_form_equals_the_brute_force_optimum() {
    for name in profile_names() {
        let p = prof(name);
        for k in 0..=80 {
            let t = 26.0 + 0.5 * k as f64;
            let hull = sustainable(&p, t).tokens_per_s;
            let brute = p.sustainable_tokens_per_s(t);
            assert!(
                (hull - brute).abs() < 1e-9,
                "{name} at {t} °C: {hull} vs {brute}"
            );
        }
    }
    // By hand on the snapdragon at 42 °C: P* = (42 − 25) / 4 = 4.25 W lies between OPP 5
    // (3.796 W, 14.58 tok/s) and OPP 6 (4.849 W, 16.88 tok/s); mixing them in the ratio that
    // averages 4.25 W gives the optimum.
    let p = prof("snapdragon-8gen3");
    let s = sustainable(&p, 42.0);
    assert!((s.power_w - 4.25).abs() < 1e-12);
    assert_eq!((s.lower_opp, s.upper_opp), (Some(5), Some(6)));
    let (p5, p6) = (p.power_w(5, 1.0), p.power_w(6, 1.0));
    let x = (4.25 - p5) / (p6 - p5);
    let expect = (1.0 - x) * p.tokens_per_s(5, 1.0) + x * p.tokens_per_s(6, 1.0);
    assert!((s.tokens_per_s - expect).abs() < 1e-12);
    assert!(
        (s.tokens_per_s - 15.5747).abs() < 1e-3,
        "{}",
        s.tokens_per_s
    );
    // The die stays below the vendor's first trip (85 °C) even at the hotter vertex.
    assert!(s.die_c_at_upper < 85.0, "{}", s.die_c_at_upper);
}

#[test]
fn time_constants_are_the_rc_eigenvalues() {
    let p = prof("snapdragon-8gen3");
    let (slow, fast) = time_constants(&p);
    // Product and sum of the eigenvalues are det(A) and tr(A) of the RC network.
    let a = 1.0 / (3.0 * 6.0);
    let b = 1.0 / (190.0 * 6.0);
    let c = 1.0 / (190.0 * 4.0);
    let (l1, l2) = (-1.0 / slow, -1.0 / fast);
    assert!((l1 * l2 - a * c).abs() < 1e-15);
    assert!((l1 + l2 + (a + b + c)).abs() < 1e-12);
    assert!(
        slow > 700.0 && slow < 800.0 && fast > 15.0 && fast < 20.0,
        "{slow} {fast}"
    );
}

fn acceptance(name: &str) {
    let spec = SimSpec::new(prof(name), 42.0, 30.0);
    assert_eq!(spec.handset.ambient_c, 25.0);
    let cmp = compare(&spec).unwrap();
    let (off, step, pid) = (&cmp.off.summary, &cmp.step.summary, &cmp.pid.summary);
    let ctx = format!("{name}: off {off:?}\nstep {step:?}\npid {pid:?}");
    // pid: settles into ±0.5 °C and holds it; overshoot ≤ 1 °C; no sustained oscillation.
    let settle = pid.settling_time_s.expect("pid settles");
    assert!(settle < 1200.0, "{ctx}");
    assert!(pid.final_error_c <= 0.5, "{ctx}");
    assert!(pid.overshoot_c <= 1.0, "{ctx}");
    assert!(pid.oscillation_pp_c <= 0.5, "{ctx}");
    let after: Vec<f64> = cmp
        .pid
        .trace
        .iter()
        .filter(|p| p.t_s >= settle)
        .map(|p| p.skin_c)
        .collect();
    assert!(after.iter().all(|t| (t - 42.0).abs() <= 0.5), "{ctx}");
    // Same maximum skin for step (its trip was tuned for it), and pid makes ≥ 1.10× tokens.
    assert!((step.skin_max_c - pid.skin_max_c).abs() <= 0.02, "{ctx}");
    assert!(pid.tokens >= 1.10 * step.tokens, "{ctx}");
    // pid's steady throughput is within 10 % of the closed-form sustainable maximum (and,
    // being an optimum, not above it by more than the residual drift of the final window).
    let sus = cmp.sustainable.tokens_per_s;
    assert!(
        pid.steady_tokens_per_s >= 0.9 * sus,
        "{ctx}\nsustainable {sus}"
    );
    assert!(
        pid.steady_tokens_per_s <= 1.02 * sus,
        "{ctx}\nsustainable {sus}"
    );
    // Physics: over the final window the mean power holds the skin where it is, within the
    // drift the window allows: P̄ ≈ (T̄ − T_amb) / R_sa.
    let w: Vec<_> = cmp.pid.trace.iter().filter(|p| p.t_s > 1200.0).collect();
    let p_mean = w.iter().map(|p| p.power_w).sum::<f64>() / w.len() as f64;
    let t_mean = w.iter().map(|p| p.skin_c).sum::<f64>() / w.len() as f64;
    let p_hold = (t_mean - spec.handset.ambient_c) / spec.handset.r_skin_amb_k_per_w;
    assert!(
        (p_mean - p_hold).abs() / p_hold < 0.03,
        "{p_mean} vs {p_hold}"
    );
    // off: the vendor's trip points throttle, and that costs throughput: tokens lost to the
    // caps, a steady rate below pid's, and a skin far above the target.
    assert!(off.vendor_throttling_s > 600.0, "{ctx}");
    assert!(
        off.vendor_lost_tokens > 0.1 * off.unthrottled_tokens,
        "{ctx}"
    );
    assert!(off.steady_tokens_per_s < pid.steady_tokens_per_s, "{ctx}");
    assert!(off.skin_max_c > 42.0 + 1.5, "{ctx}");
    let top = spec.handset.max_level();
    assert!(
        cmp.off
            .trace
            .iter()
            .any(|p| p.freq_level < top && p.vendor_throttling)
    );
    // The report's checks agree.
    for c in cmp.checks() {
        assert!(c.pass, "{name}: {c:?}");
    }
}

#[test]
fn acceptance_snapdragon_8gen3() {
    acceptance("snapdragon-8gen3");
}

#[test]
fn acceptance_pixel_8_pro() {
    acceptance("pixel-8-pro");
}

#[test]
fn off_is_the_handset_model_at_full_speed() {
    // Independent of the loop: the model stepped by hand at the top OPP, 100 % busy.
    let p = prof("pixel-8-pro");
    let spec = SimSpec::new(p.clone(), 42.0, 10.0);
    let run = simulate(&spec, &SimPolicy::Off).unwrap();
    let mut m = HandsetModel::new(p.clone());
    for _ in 0..600 {
        m.step(
            1.0,
            Activity {
                busy: 1.0,
                freq_level: p.max_level(),
            },
        );
    }
    assert!((run.summary.tokens - m.tokens()).abs() < 1e-9);
    assert!((run.summary.energy_j - m.energy_j()).abs() < 1e-9);
    assert!(
        run.trace
            .iter()
            .all(|t| t.level == 0 && t.status == StepStatus::Off)
    );
}

#[test]
fn sensor_dropout_holds_the_level_then_fails_safe() {
    let p = prof("snapdragon-8gen3");
    let lad = ladder(&p, SimActuator::CapsDuty);
    let cfg = governor_sim::pid_config(&p, SimSensor::Skin, 42.0, &lad).unwrap();
    // 30 s of silence at t = 900 s: the level in force at 899 s is held throughout.
    let mut spec = SimSpec::new(p.clone(), 42.0, 20.0);
    spec.dropout = Some((900.0, 930.0));
    let run = simulate(&spec, &SimPolicy::Pid(cfg.clone())).unwrap();
    let at = |t: f64| {
        run.trace
            .iter()
            .position(|x| (x.t_s - (t + 1.0)).abs() < 1e-6)
            .unwrap()
    };
    let held = run.trace[at(899.0)].level;
    for k in at(900.0)..at(930.0) {
        assert_eq!(run.trace[k].status, StepStatus::SensorDropout);
        assert_eq!(run.trace[k].level, held);
    }
    assert_eq!(run.summary.sensor_dropouts, 30);
    assert_eq!(run.summary.failsafe_steps, 0);
    assert_ne!(run.trace[at(930.0)].status, StepStatus::SensorDropout);
    // Past the 60 s failsafe delay the governor goes to its most throttled level.
    spec.dropout = Some((900.0, 1000.0));
    spec.minutes = 30.0;
    let run = simulate(&spec, &SimPolicy::Pid(cfg)).unwrap();
    let most = lad.len() - 1;
    let fs: Vec<_> = run
        .trace
        .iter()
        .filter(|x| x.status == StepStatus::Failsafe)
        .collect();
    // Silent ≥ 60 s since the last reading (t = 899 s): the ticks at 959 … 999 s.
    assert_eq!(fs.len(), 41);
    assert!(fs.iter().all(|x| x.level == most));
    // And recovers: the skin is back inside the band ten minutes later.
    let last = run.trace.last().unwrap();
    assert!((last.skin_c - 42.0).abs() < 0.5, "{}", last.skin_c);
}

#[test]
fn integral_absorbs_an_ambient_the_gains_were_not_derived_for() {
    for name in profile_names() {
        let model = prof(name);
        let mut hot = model.clone();
        hot.ambient_c = 30.0;
        let mut spec = SimSpec::new(hot, 42.0, 30.0);
        spec.model = model;
        let lad = ladder(&spec.model, spec.actuator);
        let cfg = governor_sim::pid_config(&spec.model, SimSensor::Skin, 42.0, &lad).unwrap();
        let run = simulate(&spec, &SimPolicy::Pid(cfg)).unwrap();
        let s = &run.summary;
        assert!(s.settling_time_s.is_some(), "{name}: {s:?}");
        assert!(
            s.final_error_c <= 0.5 && s.overshoot_c <= 1.0,
            "{name}: {s:?}"
        );
        // The sustainable maximum at the real ambient is what it can reach.
        let sus = sustainable(&spec.handset, 42.0).tokens_per_s;
        assert!(s.steady_tokens_per_s >= 0.9 * sus, "{name}: {s:?} vs {sus}");
    }
}

#[test]
fn duty_only_reaches_its_own_closed_form() {
    // With only the duty cycle at the top OPP, throughput is linear in power:
    // tps = base · (P* − idle) / active(top), the best this actuator can sustain.
    let p = prof("snapdragon-8gen3");
    let mut spec = SimSpec::new(p.clone(), 42.0, 30.0);
    spec.actuator = SimActuator::Duty;
    let lad = ladder(&p, SimActuator::Duty);
    let cfg = governor_sim::pid_config(&p, SimSensor::Skin, 42.0, &lad).unwrap();
    let run = simulate(&spec, &SimPolicy::Pid(cfg)).unwrap();
    let expect = 22.0 * (4.25 - 0.8) / p.active_w(p.max_level());
    let got = run.summary.steady_tokens_per_s;
    assert!((got / expect - 1.0).abs() < 0.05, "{got} vs {expect}");
    assert!(run.summary.final_error_c <= 0.5, "{:?}", run.summary);
    // It is well below the caps+duty optimum: the lower OPPs are what makes pid efficient.
    assert!(got < 0.75 * sustainable(&p, 42.0).tokens_per_s);
}

/// A duty-only PID on the snapdragon at 32 °C (P* = 7/4 = 1.75 W) whose decode gets
/// `share` of the capacity the ladder assumes, calibrated or not.
fn at_share(share: f64, calibrate: bool) -> governor_sim::SimRun {
    let p = prof("snapdragon-8gen3");
    let mut spec = SimSpec::new(p.clone(), 32.0, 40.0);
    spec.actuator = SimActuator::Duty;
    spec.busy_share = share;
    spec.calibrate = calibrate.then(ScheduleConfig::default);
    let lad = ladder(&p, SimActuator::Duty);
    let cfg = governor_sim::pid_config(&p, SimSensor::Skin, 32.0, &lad).unwrap();
    simulate(&spec, &SimPolicy::Pid(cfg)).unwrap()
}

#[test]
fn a_pid_calibrated_to_a_busy_share_of_a_fifth_holds_the_target_and_the_model_tuned_one_does_not() {
    let p = prof("snapdragon-8gen3");
    let run = at_share(0.2, true);
    // Calibrated once, after the 2 s warm-up, to 0.2: the table is the model's power at a
    // fifth of each level's busy fraction, idle + 0.2·b·active(top).
    assert_eq!(run.calibration.len(), 1, "{:?}", run.calibration);
    let ev = &run.calibration[0];
    assert!(ev.retuned && (ev.scale - 0.2).abs() < 1e-12, "{ev:?}");
    assert!((ev.t_s - 2.0).abs() < 1e-9, "{ev:?}");
    let lad = ladder(&p, SimActuator::Duty);
    assert_eq!(ev.level_outputs.len(), lad.len());
    for (got, o) in ev.level_outputs.iter().zip(&lad) {
        let expect = p.idle_w + 0.2 * o.busy * p.active_w(p.max_level());
        assert!((got - expect).abs() < 1e-12, "{got} vs {expect}");
    }
    let s = &run.summary;
    assert!(s.settling_time_s.is_some(), "{s:?}");
    assert!(s.final_error_c <= 0.5, "{s:?}");
    // Model-tuned: the PID believes each duty level draws five times what it does; its
    // proportional term has to hold the skin well below the target to ask for enough power.
    let raw = at_share(0.2, false);
    assert!(raw.calibration.is_empty());
    let r = &raw.summary;
    assert!(
        r.settling_time_s.is_none() && r.final_error_c > 0.5,
        "{r:?}"
    );
    let last = raw.trace.last().unwrap();
    assert!(last.skin_c < 32.0 - 0.5, "{last:?}");
}

#[test]
fn calibration_at_a_busy_share_of_one_changes_nothing() {
    let plain = at_share(1.0, false);
    let cal = at_share(1.0, true);
    assert_eq!(cal.calibration.len(), 1);
    let ev = &cal.calibration[0];
    assert!(!ev.retuned && ev.scale == 1.0 && (ev.measured_share - 1.0).abs() < 1e-12);
    assert_eq!(plain.summary, cal.summary);
    assert_eq!(plain.trace, cal.trace);
}

#[test]
fn bad_settings_are_refused() {
    let p = prof("snapdragon-8gen3");
    let mut spec = SimSpec::new(p.clone(), 20.0, 30.0);
    assert!(
        simulate(&spec, &SimPolicy::Off).is_err(),
        "target below ambient"
    );
    spec.target_c = 42.0;
    spec.minutes = f64::NAN;
    assert!(simulate(&spec, &SimPolicy::Off).is_err());
    spec.minutes = 30.0;
    spec.period_s = 0.0;
    assert!(simulate(&spec, &SimPolicy::Off).is_err());
    spec.period_s = 1.0;
    spec.busy_share = 0.0;
    assert!(simulate(&spec, &SimPolicy::Off).is_err());
}

fn run_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .output()
        .expect("run pocketperf")
}

#[test]
fn governor_sim_command_writes_report_trace_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gov");
    let o = run_cli(&[
        "governor",
        "sim",
        "--device",
        "sim:pixel-8-pro",
        "--minutes",
        "30",
        "--target",
        "42",
        "--governor",
        "pid",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device"], "sim:pixel-8-pro");
    assert_eq!(v["header"]["device"]["id"], "sim:pixel-8-pro");
    assert_eq!(v["header"]["schema_version"], 1);
    assert!(v["header"]["git_commit"].is_string() && v["header"]["timestamp_utc"].is_string());
    assert_eq!(v["header"]["settings"]["cli"]["minutes"], 30.0);
    assert!(v["results"]["pid"]["tokens"].as_f64().unwrap() > 0.0);
    assert!(
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["pass"] == true)
    );
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("governor_sim.json")).unwrap()).unwrap();
    assert_eq!(on_disk["results"], v["results"]);
    let csv = std::fs::read_to_string(out.join("governor_trace.csv")).unwrap();
    assert!(csv.starts_with("# schema_version=1\n"));
    assert!(csv.contains("\ngovernor,t_s,skin_c,"));
    for g in ["off", "step", "pid"] {
        assert_eq!(
            csv.lines()
                .filter(|l| l.starts_with(&format!("{g},")))
                .count(),
            1800
        );
    }
    for f in [
        "governor_skin.svg",
        "governor_level.svg",
        "governor_speed.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("pid"), "{f}");
    }
    let html = std::fs::read_to_string(out.join("governor_sim.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    // Text mode names every governor (5 minutes are too few for the checks: exit 1);
    // an unknown handset is an error (exit 2).
    let o = run_cli(&[
        "governor",
        "sim",
        "--device",
        "sim:snapdragon-8gen3",
        "--minutes",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\noff ") && text.contains("\nstep ") && text.contains("\npid "));
    let o = run_cli(&["governor", "sim", "--device", "sim:nokia-3310"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sim:snapdragon-8gen3"));
}

#[test]
fn governor_sim_exits_1_on_a_failed_check_and_warns_when_the_run_is_short() {
    // 10 simulated minutes: the checks' final window halves to 5 minutes and pid has not
    // settled before it, so checks fail; the command says why before it starts.
    let o = run_cli(&[
        "governor",
        "sim",
        "--device",
        "sim:snapdragon-8gen3",
        "--minutes",
        "10",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let fails = stdout.matches("[FAIL]").count();
    assert!(fails > 0, "expected failed checks:\n{stdout}");
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("warning: --minutes 10 is too few for the checks: they need 20"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("governor sim: {fails} of ")),
        "{stderr}"
    );
    // An error (unknown handset) is exit status 2, distinct from a failed check.
    let o = run_cli(&["governor", "sim", "--device", "sim:no-such-phone"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn governor_sim_warns_only_below_two_final_windows() {
    use pocketperf::cmd::governor::short_run_warning;
    assert!(short_run_warning(19.9, 600.0).is_some());
    assert!(short_run_warning(20.0, 600.0).is_none());
    assert!(short_run_warning(30.0, 600.0).is_none());
}
