//! Unit behaviour of the thermal governor's pieces, each checked against hand-worked numbers.

use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pocketperf_runtime::governor::{
    Actuator, Chain, DutyCycle, Governor, GovernorRecord, Pid, PidConfig, PlantModel, Policy,
    StepStatus, StepWise, StepWiseConfig, SysfsFreqCap, ThermalSensor, ThreadCount, TuningGoal,
    ZoneSensor, ZoneSpec, level_for_output, level_for_output_table,
};
use pocketperf_runtime::pool::ThreadPool;

/// A plain configuration whose numbers are easy to follow by hand.
fn cfg() -> PidConfig {
    PidConfig {
        target_c: 40.0,
        k_po: 0.2,
        k_pu: 0.1,
        k_i: 0.01,
        k_d: 0.0,
        integral_cutoff_c: 5.0,
        integral_limit: 0.5,
        d_filter_tau_s: 4.0,
        output_min: 0.0,
        output_max: 1.0,
        rate_limit_per_s: 1.0,
        sustainable_output: 0.5,
        level_hysteresis: 0.2,
        max_dt_s: 10.0,
        dropout_failsafe_s: 30.0,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn bumpless_start_keeps_the_current_output() {
    let mut pid = Pid::new(cfg(), 11).unwrap();
    pid.set_current_level(3); // output 1 − 3/10 = 0.7
    let r = pid.update(0.0, Some(41.0));
    assert_eq!(r.status, StepStatus::Started);
    assert!(close(r.output, 0.7) && r.level == 3);
    // Integral absorbs the difference: I = 0.7 − ff − P = 0.7 − 0.5 − (0.2·−1) = 0.4.
    assert!(close(r.i, 0.4), "{}", r.i);
    // Next second at the same temperature: the only change is k_i·e·dt = 0.01·(−1)·1.
    let r = pid.update(1.0, Some(41.0));
    assert!(close(r.output, 0.69), "{}", r.output);
    assert_eq!(r.level, 3);
}

#[test]
fn anti_windup_freezes_the_integral_while_pinned() {
    let mut pid = Pid::new(cfg(), 11).unwrap();
    // Start hot: I = clamp(1 − 0.5 − 0.2·(−4)) = clamp(1.3) = 0.5.
    pid.update(0.0, Some(44.0));
    assert!(close(pid.integral(), 0.5));
    // 4 °C above target (inside the 5 °C cutoff) the integral falls 0.04/s until the output
    // pins at its minimum, then must freeze.
    let mut t = 1.0;
    for _ in 0..400 {
        pid.update(t, Some(44.0));
        t += 1.0;
    }
    // Output pinned at 0: ff + P + I = 0.5 − 0.8 + I < 0 once I < 0.3; the integral must stop
    // at the value where the output first pinned instead of running to −0.5.
    let i_pinned = pid.integral();
    assert!(close(pid.output(), 0.0));
    assert!(i_pinned > 0.29 && i_pinned <= 0.31, "{i_pinned}");
    // Recovery is immediate: one second below target lifts the output by the P change alone.
    let r = pid.update(t, Some(39.0));
    // ff + P + I = 0.5 + 0.1 + (i_pinned + 0.01) ≈ 0.9 → limited by rate 1.0/s from 0 → 0.9.
    assert!(close(r.output, 0.5 + 0.1 + i_pinned + 0.01), "{}", r.output);
}

#[test]
fn integral_accumulates_exactly_when_unsaturated() {
    let mut c = cfg();
    c.output_min = -10.0;
    c.output_max = 10.0;
    c.rate_limit_per_s = 1000.0;
    let mut pid = Pid::new(c, 3).unwrap();
    pid.update(0.0, Some(41.0));
    let i0 = pid.integral();
    for k in 1..=20 {
        pid.update(k as f64, Some(41.0));
    }
    assert!(close(pid.integral() - i0, -(20.0 * 0.01)));
}

#[test]
fn integral_hard_clamp_holds() {
    let mut c = cfg();
    c.k_i = 1.0;
    c.output_min = -100.0;
    c.output_max = 100.0;
    c.rate_limit_per_s = 1000.0;
    let mut pid = Pid::new(c, 3).unwrap();
    pid.set_current_level(2); // output −100: the bumpless start sets I to its lower clamp
    let r = pid.update(0.0, Some(38.0));
    assert!(close(r.i, -0.5));
    for k in 1..50 {
        pid.update(k as f64, Some(38.0));
    }
    assert!(close(pid.integral(), 0.5));
}

#[test]
fn rate_limit_bounds_each_step() {
    let mut c = cfg();
    c.rate_limit_per_s = 0.05;
    let mut pid = Pid::new(c, 21).unwrap();
    pid.update(0.0, Some(30.0)); // unthrottled, output 1
    // Jump to 60 °C: the unlimited output is 0, but it may fall only 0.05 per second.
    let mut prev = 1.0;
    for k in 1..=10 {
        let r = pid.update(k as f64, Some(60.0));
        assert!(
            close(prev - r.output, 0.05),
            "step {k}: {prev} → {}",
            r.output
        );
        assert_eq!(r.status, StepStatus::Saturated);
        prev = r.output;
    }
    // Half a second allows half the change.
    let r = pid.update(10.5, Some(60.0));
    assert!(close(prev - r.output, 0.025));
}

#[test]
fn missed_sample_doubles_dt_and_the_increment() {
    let mut c = cfg();
    c.output_min = -10.0;
    c.output_max = 10.0;
    c.rate_limit_per_s = 1000.0;
    let mut every = Pid::new(c.clone(), 3).unwrap();
    let mut skip = Pid::new(c, 3).unwrap();
    every.update(0.0, Some(42.0));
    skip.update(0.0, Some(42.0));
    every.update(1.0, Some(42.0));
    let a = every.update(2.0, Some(42.0));
    let b = skip.update(2.0, Some(42.0)); // the 1 s sample was lost
    assert!(close(b.dt_s, 2.0));
    assert!(close(a.i, b.i), "{} vs {}", a.i, b.i);
    assert!(close(a.output, b.output));
}

#[test]
fn nonmonotonic_or_long_gaps_are_handled() {
    let mut pid = Pid::new(cfg(), 11).unwrap();
    pid.update(5.0, Some(41.0));
    let before = (pid.output(), pid.integral());
    let r = pid.update(5.0, Some(50.0));
    assert_eq!(r.status, StepStatus::ClockStalled);
    let r2 = pid.update(4.0, Some(50.0));
    assert_eq!(r2.status, StepStatus::ClockStalled);
    assert_eq!(before, (pid.output(), pid.integral()));
    // A gap of 100 s (> max_dt 10 s) restarts bumplessly: same output, no giant integral step.
    let r = pid.update(105.0, Some(41.0));
    assert_eq!(r.status, StepStatus::Resumed);
    assert!(close(r.output, before.0));
}

#[test]
fn derivative_uses_the_filtered_measurement() {
    let mut c = cfg();
    c.k_d = 2.0;
    c.output_min = -100.0;
    c.output_max = 100.0;
    c.rate_limit_per_s = 1e6;
    c.k_i = 0.0;
    let mut pid = Pid::new(c, 3).unwrap();
    pid.update(0.0, Some(40.0));
    // A single 8 °C spike, dt = 1, tau = 4: α = 1/5, the filter moves 1.6 °C, D = −2·1.6 = −3.2
    // (an unfiltered derivative would give −16).
    let r = pid.update(1.0, Some(48.0));
    assert!(close(r.d, -3.2), "{}", r.d);
    // The filtered value decays back afterwards: D positive, and filtered = 41.6 − 0.2·1.6.
    let r = pid.update(2.0, Some(40.0));
    assert!(close(r.filtered_c.unwrap(), 41.6 - 0.32));
    assert!(close(r.d, 0.64));
    // A steady ramp of 0.5 °C/s: the filtered slope converges to 0.5, D → −1.
    let mut t = 2.0;
    let mut d = 0.0;
    for _ in 0..200 {
        t += 1.0;
        d = pid.update(t, Some(40.0 + 0.5 * (t - 2.0))).d;
    }
    assert!((d + 1.0).abs() < 1e-6, "{d}");
}

#[test]
fn level_hysteresis_prevents_dither() {
    // 11 levels over [0, 1]: level k ↔ output 1 − k/10. From level 3 (0.7) the level may
    // change only once the continuous level is more than 0.7 away: output < 0.63 or > 0.77.
    assert_eq!(level_for_output(0.66, 3, 11, 0.0, 1.0, 0.2), 3);
    assert_eq!(level_for_output(0.64, 3, 11, 0.0, 1.0, 0.2), 3);
    assert_eq!(level_for_output(0.62, 3, 11, 0.0, 1.0, 0.2), 4);
    assert_eq!(level_for_output(0.76, 3, 11, 0.0, 1.0, 0.2), 3);
    assert_eq!(level_for_output(0.78, 3, 11, 0.0, 1.0, 0.2), 2);
    assert_eq!(level_for_output(-5.0, 3, 11, 0.0, 1.0, 0.2), 10);
    assert_eq!(level_for_output(f64::NAN, 3, 11, 0.0, 1.0, 0.2), 3);
    // Without hysteresis 0.64 (continuous 3.6) rounds to 4.
    assert_eq!(level_for_output(0.64, 3, 11, 0.0, 1.0, 0.0), 4);
    // An output wobbling ±0.015 around the 3/4 midpoint (continuous level 3.35 … 3.65) never
    // moves the level with hysteresis 0.2; without hysteresis it flips on every update.
    let mut lvl = 3;
    let mut plain = 3;
    let mut flips = 0;
    for k in 0..100 {
        let out = 0.65 + if k % 2 == 0 { 0.015 } else { -0.015 };
        lvl = level_for_output(out, lvl, 11, 0.0, 1.0, 0.2);
        assert_eq!(lvl, 3);
        let next = level_for_output(out, plain, 11, 0.0, 1.0, 0.0);
        flips += usize::from(next != plain);
        plain = next;
    }
    assert_eq!(flips, 99); // the first update (3.35) is within ±0.5 of level 3
}

struct Script(Vec<Option<f64>>);
impl ThermalSensor for Script {
    fn read(&mut self) -> Option<f64> {
        if self.0.is_empty() {
            None
        } else {
            self.0.remove(0)
        }
    }
}

#[derive(Default)]
struct Recorder {
    applied: Vec<usize>,
}
impl Actuator for Recorder {
    fn levels(&self) -> usize {
        11
    }
    fn apply(&mut self, level: usize) -> pocketperf_runtime::Result<()> {
        self.applied.push(level);
        Ok(())
    }
}

#[test]
fn sensor_dropout_holds_then_fails_safe() {
    let mut gov = Governor::new(Policy::Pid(cfg()), 11).unwrap();
    let mut act = Recorder::default();
    let mut sensor = Script(vec![
        Some(39.0),
        Some(41.0),
        None,
        Some(f64::NAN),
        Some(-273.0),
    ]);
    let mut recs: Vec<GovernorRecord> = Vec::new();
    for t in 0..5 {
        recs.push(gov.tick(t as f64, &mut sensor, &mut act).unwrap());
    }
    for r in &recs[2..] {
        assert_eq!(r.status, StepStatus::SensorDropout);
        assert_eq!(r.output, recs[1].output);
        assert_eq!(r.level, recs[1].level);
        assert!(!r.applied);
    }
    // Silent for 30 s after the last valid reading at t = 1: failsafe = most throttled.
    let r = gov.tick(31.0, &mut sensor, &mut act).unwrap();
    assert_eq!(r.status, StepStatus::Failsafe);
    assert_eq!(r.level, 10);
    assert_eq!(act.applied.last(), Some(&10));
    // The record serializes.
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"status\":\"failsafe\""));
}

#[test]
fn governor_writes_the_actuator_only_on_change() {
    let sw = StepWiseConfig {
        trip_c: 40.0,
        hyst_c: 1.0,
    };
    let mut gov = Governor::new(Policy::Step(sw), 11).unwrap();
    let mut act = Recorder::default();
    let temps = [38.0, 38.0, 41.0, 41.0, 39.5, 39.5, 38.5, 38.5];
    let mut sensor = Script(temps.iter().map(|t| Some(*t)).collect());
    let levels: Vec<usize> = (0..temps.len())
        .map(|t| gov.tick(t as f64, &mut sensor, &mut act).unwrap().level)
        .collect();
    // Up one per period at/above the trip, hold inside [39, 40), down one per period below 39.
    assert_eq!(levels, vec![0, 0, 1, 2, 2, 2, 1, 0]);
    assert_eq!(act.applied, vec![0, 1, 2, 1, 0]);
}

#[test]
fn step_wise_saturates_and_holds_on_dropout() {
    let mut s = StepWise::new(
        StepWiseConfig {
            trip_c: 40.0,
            hyst_c: 2.0,
        },
        3,
    )
    .unwrap();
    for t in 0..5 {
        s.update(t as f64, Some(45.0));
    }
    assert_eq!(s.level(), 2);
    assert_eq!(s.update(5.0, None).status, StepStatus::SensorDropout);
    assert_eq!(s.level(), 2);
}

#[test]
fn duty_cycle_pause_matches_the_busy_fraction() {
    let mut d = DutyCycle::new(5, 0.2).unwrap();
    let h = d.handle();
    assert_eq!(
        h.pause_after_token(Duration::from_millis(50)),
        Duration::ZERO
    );
    d.apply(2).unwrap(); // busy 0.6 → pause = 50 ms · 0.4 / 0.6
    let p = h.pause_after_token(Duration::from_millis(60));
    assert!((p.as_secs_f64() - 0.04).abs() < 1e-9, "{p:?}");
    d.apply(4).unwrap(); // busy 0.2 → pause = 4 × the token time
    assert!((d.pause_after_token(Duration::from_millis(10)).as_secs_f64() - 0.04).abs() < 1e-9);
    assert!(d.apply(5).is_err());
    assert!(DutyCycle::new(3, 0.0).is_err());
}

#[test]
fn thread_count_levels() {
    let mut t = ThreadCount::new(4).unwrap();
    let shared = t.shared();
    t.apply(3).unwrap();
    assert_eq!(shared.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(t.apply(4).is_err());
}

fn sysfs_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("devices/system/cpu/cpufreq/policy0");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("cpuinfo_min_freq"), "300000\n").unwrap();
    std::fs::write(p.join("cpuinfo_max_freq"), "3000000\n").unwrap();
    std::fs::write(p.join("scaling_max_freq"), "3000000\n").unwrap();
    std::fs::write(
        p.join("scaling_available_frequencies"),
        "300000 1000000 2000000 3000000\n",
    )
    .unwrap();
    let g = dir.path().join("class/kgsl/kgsl-3d0");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::write(g.join("max_gpuclk"), "900000000\n").unwrap();
    std::fs::write(
        g.join("gpu_available_frequencies"),
        "900000000 600000000 300000000\n",
    )
    .unwrap();
    dir
}

#[test]
fn sysfs_caps_require_opt_in_write_and_restore() {
    let dir = sysfs_tree();
    assert!(SysfsFreqCap::discover(dir.path(), false, 4).is_err());
    let cpu = dir
        .path()
        .join("devices/system/cpu/cpufreq/policy0/scaling_max_freq");
    let gpu = dir.path().join("class/kgsl/kgsl-3d0/max_gpuclk");
    {
        let mut cap = SysfsFreqCap::discover(dir.path(), true, 4).unwrap();
        assert_eq!(cap.paths().len(), 2);
        // CPU caps 3000, 2100, 1200, 300 MHz snap to 3000, 2000, 1000, 300 MHz.
        cap.apply(1).unwrap();
        assert_eq!(std::fs::read_to_string(&cpu).unwrap(), "2000000");
        // GPU: 900, 700, 500, 300 MHz snap to 900, 600, 300, 300.
        assert_eq!(std::fs::read_to_string(&gpu).unwrap(), "600000000");
        cap.apply(3).unwrap();
        cap.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&cpu).unwrap(), "3000000");
        cap.apply(2).unwrap();
        assert_eq!(std::fs::read_to_string(&cpu).unwrap(), "1000000");
        // Dropped without restore(): Drop restores.
    }
    assert_eq!(std::fs::read_to_string(&cpu).unwrap(), "3000000");
    assert_eq!(std::fs::read_to_string(&gpu).unwrap(), "900000000");
}

#[test]
fn sysfs_caps_error_when_nothing_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let e = SysfsFreqCap::discover(dir.path(), true, 4).unwrap_err();
    assert!(e.to_string().contains("no writable"));
}

#[test]
fn invalid_configs_are_rejected() {
    let mut c = cfg();
    c.output_max = c.output_min;
    assert!(Pid::new(c, 5).is_err());
    let mut c = cfg();
    c.k_i = f64::NAN;
    assert!(Pid::new(c, 5).is_err());
    assert!(Pid::new(cfg(), 0).is_err());
}

/// Level k of this table delivers TABLE[k] (e.g. watts per OPP); deliberately uneven.
const TABLE: [f64; 5] = [8.0, 6.0, 5.0, 3.0, 1.0];

#[test]
fn table_quantizer_interpolates_inside_the_step() {
    // From level 2 (5.0) with hysteresis 0.2 the level moves only once the continuous level
    // is more than 0.7 away. 4.0 lies half way down the 5 → 3 step: x = 2.5, hold.
    assert_eq!(level_for_output_table(4.0, 2, &TABLE, 0.2), 2);
    // 3.5: x = 2 + 1.5/2 = 2.75 → level 3.
    assert_eq!(level_for_output_table(3.5, 2, &TABLE, 0.2), 3);
    // 5.3 lies in the 6 → 5 step (width 1): x = 1.7, hold.
    assert_eq!(level_for_output_table(5.3, 2, &TABLE, 0.2), 2);
    // 6.5 in the 8 → 6 step (width 2): x = 0.75 → level 1.
    assert_eq!(level_for_output_table(6.5, 2, &TABLE, 0.2), 1);
    assert_eq!(level_for_output_table(100.0, 2, &TABLE, 0.2), 0);
    assert_eq!(level_for_output_table(-5.0, 2, &TABLE, 0.2), 4);
    assert_eq!(level_for_output_table(f64::NAN, 2, &TABLE, 0.2), 2);
    // A uniform table agrees with the uniform quantizer.
    let uniform: Vec<f64> = (0..11).map(|k| 1.0 - k as f64 / 10.0).collect();
    for i in 0..=200 {
        let out = -0.5 + 2.0 * i as f64 / 200.0 + 0.0013; // off the .5 ties
        for cur in [0, 3, 10] {
            assert_eq!(
                level_for_output_table(out, cur, &uniform, 0.2),
                level_for_output(out, cur, 11, 0.0, 1.0, 0.2),
                "out {out} from {cur}"
            );
        }
    }
}

fn plant() -> PlantModel {
    PlantModel {
        sustainable_output: 4.0,
        tau_slow_s: 800.0,
        tau_fast_s: 20.0,
    }
}

#[test]
fn tuning_rule_by_hand() {
    let c = PidConfig::tuned(42.0, &plant(), &TABLE, &TuningGoal::default()).unwrap();
    // 4.0 lies in the 5 → 3 step: g = 2; band = 2·0.2·2 = 0.8 W; k_po = 0.8 / 0.25 = 3.2.
    assert!(close(c.k_po, 3.2), "{}", c.k_po);
    assert!(close(c.k_pu, 6.4));
    assert!(close(c.k_i, 3.2 / 800.0));
    assert!(close(c.k_d, 64.0));
    assert!(close(c.d_filter_tau_s, 20.0));
    // Switch-on band (IPA's control − switch_on temperature): 4.0 / 3.2 = 1.25 °C.
    assert!(close(c.integral_cutoff_c, 1.25));
    assert!(close(c.integral_limit, 2.0));
    assert!(close(c.rate_limit_per_s, 7.0 / 20.0));
    assert!(close(c.sustainable_output, 4.0));
    assert_eq!((c.output_max, c.output_min), (8.0, 1.0));
    // Nonsense plants and goals are refused.
    let mut bad = plant();
    bad.tau_slow_s = 0.0;
    assert!(PidConfig::tuned(42.0, &bad, &TABLE, &TuningGoal::default()).is_err());
    assert!(PidConfig::tuned(42.0, &plant(), &[1.0, 2.0], &TuningGoal::default()).is_err());
    let goal = TuningGoal {
        ripple_c: 0.25,
        hysteresis: 0.6,
    };
    assert!(PidConfig::tuned(42.0, &plant(), &TABLE, &goal).is_err());
}

#[test]
fn cold_start_does_not_wind_the_integral_against_the_clamp() {
    let c = PidConfig::tuned(42.0, &plant(), &TABLE, &TuningGoal::default()).unwrap();
    let mut pid = Pid::with_level_outputs(c, TABLE.to_vec()).unwrap();
    // 17 °C below target, unthrottled: P alone (6.4·17) saturates the output at 8 W, so the
    // start keeps the output with a zero integral (not −2 W of wind-up).
    let r = pid.update(0.0, Some(25.0));
    assert_eq!(r.status, StepStatus::Started);
    assert_eq!((r.i, r.output, r.level), (0.0, 8.0, 0));
    // Near the target, once the derivative of the 25 → 41.9 step has died out (filter
    // τ = 20 s), the output is ff + P + I = 4 + 6.4·0.1 + I, with I grown by k_i·e per second
    // (at most 0.004·0.1·400 = 0.16 W) and the cold start having left nothing behind.
    let mut t = 0.0;
    let mut last = r;
    for _ in 0..400 {
        t += 1.0;
        last = pid.update(t, Some(41.9));
    }
    assert!(last.d.abs() < 1e-6, "derivative {}", last.d);
    assert!(
        (last.output - (4.64 + last.i + last.d)).abs() < 1e-9,
        "{last:?}"
    );
    assert!(
        last.i > 0.0 && last.i <= 0.16 + 1e-12,
        "integral {}",
        last.i
    );
    // ≈ 4.7–4.8 W: continuous level 2.2–2.3 on the table, so level 2.
    assert_eq!(last.level, 2);
}

#[test]
fn level_table_must_be_decreasing_and_inside_the_range() {
    let c = PidConfig::tuned(42.0, &plant(), &TABLE, &TuningGoal::default()).unwrap();
    assert!(Pid::with_level_outputs(c.clone(), vec![8.0, 8.0, 1.0]).is_err());
    assert!(Pid::with_level_outputs(c.clone(), vec![9.0, 4.0, 1.0]).is_err());
    assert!(Pid::with_level_outputs(c.clone(), vec![8.0, f64::NAN, 1.0]).is_err());
    assert!(Governor::with_level_outputs(Policy::Pid(c), vec![]).is_err());
}

#[test]
fn step_reports_the_table_output_of_its_level() {
    let sw = StepWiseConfig {
        trip_c: 40.0,
        hyst_c: 1.0,
    };
    let mut gov = Governor::with_level_outputs(Policy::Step(sw), TABLE.to_vec()).unwrap();
    let mut act = Recorder5::default();
    let mut sensor = Script(vec![Some(41.0), Some(41.0)]);
    let a = gov.tick(0.0, &mut sensor, &mut act).unwrap();
    let b = gov.tick(1.0, &mut sensor, &mut act).unwrap();
    assert_eq!((a.level, a.output), (1, 6.0));
    assert_eq!((b.level, b.output), (2, 5.0));
}

#[derive(Default)]
struct Recorder5 {
    applied: Vec<usize>,
}
impl Actuator for Recorder5 {
    fn levels(&self) -> usize {
        5
    }
    fn apply(&mut self, level: usize) -> pocketperf_runtime::Result<()> {
        self.applied.push(level);
        Ok(())
    }
}

#[test]
fn chain_throttles_the_first_actuator_then_the_next() {
    let duty = DutyCycle::new(3, 0.5).unwrap(); // busy 1, 0.75, 0.5
    let threads = ThreadCount::new(4).unwrap(); // 4, 3, 2, 1 threads
    let h = duty.handle();
    let shared = threads.shared();
    let mut chain = Chain::new(vec![Box::new(duty), Box::new(threads)]).unwrap();
    assert_eq!(chain.levels(), 1 + 2 + 3);
    assert_eq!(chain.split(0), vec![0, 0]);
    assert_eq!(chain.split(2), vec![2, 0]);
    assert_eq!(chain.split(4), vec![2, 2]);
    assert_eq!(chain.split(5), vec![2, 3]);
    chain.apply(1).unwrap();
    assert_eq!((h.busy(), shared.load(Ordering::Relaxed)), (0.75, 4));
    chain.apply(4).unwrap();
    assert_eq!((h.busy(), shared.load(Ordering::Relaxed)), (0.5, 2));
    let st = chain.state();
    assert_eq!((st.busy, st.threads), (Some(0.5), Some(2)));
    chain.apply(0).unwrap();
    assert_eq!((h.busy(), shared.load(Ordering::Relaxed)), (1.0, 4));
    assert!(chain.apply(6).is_err());
    assert!(Chain::new(vec![]).is_err());
}

#[test]
fn thread_count_sink_sees_every_apply() {
    let got = Arc::new(AtomicUsize::new(0));
    let g = Arc::clone(&got);
    let mut t = ThreadCount::with_sink(4, Arc::new(move |n| g.store(n, Ordering::SeqCst))).unwrap();
    t.apply(1).unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 3);
    t.apply(3).unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 1);
    assert_eq!(t.state().threads, Some(1));
}

#[test]
fn zone_sensor_takes_the_max_of_what_reads() {
    let dir = tempfile::tempdir().unwrap();
    let zone = |name: &str, text: &str, scale: f64| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        ZoneSpec {
            name: name.into(),
            path: p,
            scale,
        }
    };
    let zones = vec![
        zone("cpu-0", "41500\n", 0.001),
        zone("cpu-1", "garbage\n", 0.001),
        zone("cpu-2", "43200\n", 0.001),
        zone("board", "39\n", 1.0),
        zone("dead", "-273000\n", 0.001),
    ];
    let mut s = ZoneSensor::new(zones.clone()).unwrap();
    assert_eq!(s.read(), Some(43.2));
    assert_eq!(s.failed(), ["cpu-1".to_string(), "dead".to_string()]);
    std::fs::remove_file(&zones[2].path).unwrap();
    assert_eq!(s.read(), Some(41.5));
    assert!(s.failed().contains(&"cpu-2".to_string()));
    // Nothing readable: a dropout the governor holds through, and says so.
    for z in &zones {
        let _ = std::fs::remove_file(&z.path);
    }
    assert_eq!(s.read(), None);
    assert_eq!(s.failed().len(), 5);
    let mut gov = Governor::new(Policy::Pid(cfg()), 11).unwrap();
    let mut act = Recorder::default();
    std::fs::write(&zones[0].path, "41000").unwrap();
    let a = gov.tick(0.0, &mut s, &mut act).unwrap();
    std::fs::remove_file(&zones[0].path).unwrap();
    let b = gov.tick(1.0, &mut s, &mut act).unwrap();
    assert_eq!(b.status, StepStatus::SensorDropout);
    assert_eq!((b.output, b.level), (a.output, a.level));
    assert!(ZoneSensor::new(vec![]).is_err());
    let mut z = zones[0].clone();
    z.scale = 0.0;
    assert!(ZoneSensor::new(vec![z]).is_err());
}

#[test]
fn sysfs_caps_report_state_and_restore_plan() {
    let dir = sysfs_tree();
    let mut cap = SysfsFreqCap::discover(dir.path(), true, 4).unwrap();
    let plan = cap.restore_plan();
    assert_eq!(plan.len(), 2);
    assert_eq!(plan[0].1, "3000000");
    assert_eq!(plan[1].1, "900000000");
    assert!(cap.state().caps.is_empty());
    cap.apply(2).unwrap();
    assert_eq!(cap.state().caps, vec![1_000_000, 300_000_000]);
    cap.restore().unwrap();
    assert!(cap.state().caps.is_empty());
}

#[test]
fn pool_runs_on_the_active_threads_only() {
    let pool = ThreadPool::new(4);
    let calls = |pool: &ThreadPool| {
        let seen = Mutex::new(Vec::new());
        pool.run(|w, nw| seen.lock().unwrap().push((w, nw)));
        let mut v = seen.into_inner().unwrap();
        v.sort_unstable();
        v
    };
    assert_eq!(calls(&pool), vec![(0, 4), (1, 4), (2, 4), (3, 4)]);
    assert_eq!(pool.set_active_threads(2), 2);
    assert_eq!(pool.active_threads(), 2);
    assert_eq!(calls(&pool), vec![(0, 2), (1, 2)]);
    assert_eq!(pool.set_active_threads(0), 1);
    assert_eq!(calls(&pool), vec![(0, 1)]);
    assert_eq!(pool.set_active_threads(99), 4);
    assert_eq!(calls(&pool), vec![(0, 4), (1, 4), (2, 4), (3, 4)]);
}

#[test]
fn pool_survives_the_count_changing_under_it() {
    let pool = Arc::new(ThreadPool::new(4));
    let p2 = Arc::clone(&pool);
    let toggler = std::thread::spawn(move || {
        for i in 0..3000 {
            p2.set_active_threads(1 + i % 4);
            std::thread::yield_now();
        }
    });
    for _ in 0..3000 {
        let calls = AtomicUsize::new(0);
        let nws = Mutex::new(Vec::new());
        pool.run(|w, nw| {
            assert!(w < nw);
            calls.fetch_add(1, Ordering::SeqCst);
            nws.lock().unwrap().push(nw);
        });
        let nws = nws.into_inner().unwrap();
        // Every participant of one run sees the same count, and exactly that many ran.
        assert!(nws.iter().all(|&n| n == nws[0]));
        assert_eq!(calls.load(Ordering::SeqCst), nws[0]);
    }
    toggler.join().unwrap();
}
