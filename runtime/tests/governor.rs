//! Unit behaviour of the thermal governor's pieces, each checked against hand-worked numbers.

use std::time::Duration;

use pocketperf_runtime::governor::{
    Actuator, DutyCycle, Governor, GovernorRecord, Pid, PidConfig, Policy, StepStatus, StepWise,
    StepWiseConfig, SysfsFreqCap, ThermalSensor, ThreadCount, level_for_output,
};

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
    let p = dir.path().join("sys/devices/system/cpu/cpufreq/policy0");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("cpuinfo_min_freq"), "300000\n").unwrap();
    std::fs::write(p.join("cpuinfo_max_freq"), "3000000\n").unwrap();
    std::fs::write(p.join("scaling_max_freq"), "3000000\n").unwrap();
    std::fs::write(
        p.join("scaling_available_frequencies"),
        "300000 1000000 2000000 3000000\n",
    )
    .unwrap();
    let g = dir.path().join("sys/class/kgsl/kgsl-3d0");
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
        .join("sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq");
    let gpu = dir.path().join("sys/class/kgsl/kgsl-3d0/max_gpuclk");
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
