//! The governor inside a real decode loop ([`GovernorHook`]), on a simulated handset's sysfs
//! tree: the duty cycle really idles, the thread count reaches the kernels, sensor dropouts
//! hold the level and are reported, frequency caps need the opt-in and are written back on
//! drop and on Ctrl-C, the state reaches tokens.csv cells and telemetry gauges, and on a
//! simulated handset a PID's power table is calibrated to the measured busy share.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pocketperf::cmd::governor::{ActuatorArg, GovernorArgs, GovernorKind};
use pocketperf::governor_hook::{DEFAULT_SYSFS_ROOT, GovernorHook, ThreadControl};
use pocketperf::sim::SimDevice;
use pocketperf::sim::model::Activity;
use pocketperf::telemetry::{DeviceSpec, SamplerConfig, SamplerCore, probe};

/// Records the thread counts the hook asks for.
#[derive(Default)]
struct FakeThreads(Mutex<Vec<usize>>);

impl ThreadControl for FakeThreads {
    fn set_threads(&self, n: usize) -> usize {
        self.0.lock().unwrap().push(n);
        n
    }
}

fn args(root: &Path, kind: GovernorKind, actuator: ActuatorArg, target: f64) -> GovernorArgs {
    GovernorArgs {
        governor: kind,
        target_temp: target,
        governor_sensor: "skin".into(),
        governor_actuator: actuator,
        allow_sysfs_caps: false,
        governor_period_ms: 10,
        governor_sysfs_root: root.to_path_buf(),
        governor_model: None,
        governor_level: None,
    }
}

/// A snapdragon handset after 15 minutes flat out: skin well above 38 °C.
fn hot_device() -> SimDevice {
    let mut dev = SimDevice::new("sim:snapdragon-8gen3").unwrap();
    dev.step(
        900.0,
        Activity {
            busy: 1.0,
            freq_level: 9,
        },
    )
    .unwrap();
    assert!(dev.model().skin_c() > 40.0, "{}", dev.model().skin_c());
    dev
}

/// `n` decode steps of `compute` each, through the hook; returns the wall time.
fn decode(
    hook: &mut GovernorHook,
    n: usize,
    compute: Duration,
    th: &dyn ThreadControl,
) -> Duration {
    decode_query(hook, 7, n, compute, th)
}

fn decode_query(
    hook: &mut GovernorHook,
    query: u64,
    n: usize,
    compute: Duration,
    th: &dyn ThreadControl,
) -> Duration {
    let t0 = Instant::now();
    hook.begin();
    for k in 0..n {
        std::thread::sleep(compute);
        hook.on_token(query, k, th);
    }
    t0.elapsed()
}

#[test]
fn duty_cycle_idles_between_decode_steps_when_hot() {
    let dev = hot_device();
    let a = args(dev.root(), GovernorKind::Step, ActuatorArg::Duty, 38.0);
    let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
    let th = FakeThreads::default();
    let compute = Duration::from_millis(15);
    let wall = decode(&mut hook, 8, compute, &th);
    let rows = hook.tokens();
    assert_eq!(rows.len(), 8);
    // step_wise: one level more per governor period while at or above the trip.
    let levels: Vec<usize> = rows.iter().map(|r| r.level).collect();
    assert_eq!(levels, (1..=8).collect::<Vec<_>>());
    let skin = dev.model().skin_c();
    let mut idle = 0.0;
    for r in rows {
        assert!((r.temp_c.unwrap() - skin).abs() < 0.002, "{r:?} vs {skin}");
        // 17 duty levels: busy 1 − 0.05·level; pause = compute·(1 − b)/b.
        let b = 1.0 - 0.05 * r.level as f64;
        assert!((r.busy.unwrap() - b).abs() < 1e-12);
        let min_pause = 15.0 * (1.0 - b) / b;
        assert!(r.pause_ms >= min_pause * 0.99, "{r:?}");
        idle += r.pause_ms;
    }
    // The idle time really passed.
    let busy_ms = 8.0 * 15.0;
    assert!(
        wall.as_secs_f64() * 1e3 >= busy_ms + idle * 0.99,
        "{wall:?} {idle}"
    );
    assert!(
        th.0.lock().unwrap().is_empty(),
        "duty never touches threads"
    );
    let idx = hook.token_index();
    // The row as it lands in tokens.csv after the scenario columns.
    let cells = format!(",{}", hook.csv_cells(&idx, 7, 3).join(","));
    assert!(
        cells.contains(",4,") && cells.contains(",ok,0.800,"),
        "{cells}"
    );
    assert!(hook.csv_cells(&idx, 99, 0).iter().all(String::is_empty));
    let j = hook.summary_json();
    assert_eq!(j["policy"], "step");
    assert_eq!(j["final_level"], 8);
    assert!(j["idle_inserted_s"].as_f64().unwrap() > 0.0);
}

/// `--governor fixed --governor-level 3`: busy 0.85 from the first token to the last, on a
/// hot handset as on a host with no thermal zone at all (no sensor is read).
#[test]
fn fixed_level_holds_the_duty_cycle_without_a_sensor() {
    let dev = hot_device();
    let no_zones = tempfile::tempdir().unwrap();
    for root in [dev.root(), no_zones.path()] {
        let mut a = args(root, GovernorKind::Fixed, ActuatorArg::Duty, 42.0);
        a.governor_period_ms = 1000;
        a.governor_level = Some(3);
        let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
        let th = FakeThreads::default();
        let wall = decode(&mut hook, 6, Duration::from_millis(15), &th);
        let rows = hook.tokens();
        assert_eq!(rows.len(), 6);
        let mut idle = 0.0;
        for r in rows {
            assert_eq!((r.level, r.temp_c), (3, None), "{r:?}");
            assert!((r.busy.unwrap() - 0.85).abs() < 1e-12, "{r:?}");
            // pause = compute·(1 − b)/b with compute ≥ 15 ms.
            assert!(r.pause_ms >= 15.0 * 0.15 / 0.85 * 0.99, "{r:?}");
            idle += r.pause_ms;
        }
        assert!(wall.as_secs_f64() * 1e3 >= 6.0 * 15.0 + idle * 0.99);
        assert!(hook.ticks().is_empty());
        assert!(th.0.lock().unwrap().is_empty());
        let j = hook.summary_json();
        assert_eq!(j["policy"], "fixed");
        assert_eq!(j["fixed_level"], 3);
        assert_eq!(j["final_level"], 3);
        assert!(hook.describe().contains("busy 0.85"), "{}", hook.describe());
    }
}

#[test]
fn fixed_thread_level_reaches_the_kernels_once() {
    let no_zones = tempfile::tempdir().unwrap();
    let mut a = args(
        no_zones.path(),
        GovernorKind::Fixed,
        ActuatorArg::Threads,
        42.0,
    );
    a.governor_period_ms = 1000;
    a.governor_level = Some(2);
    let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
    let th = FakeThreads::default();
    decode(&mut hook, 4, Duration::from_millis(5), &th);
    assert_eq!(*th.0.lock().unwrap(), vec![2]);
    assert!(
        hook.tokens()
            .iter()
            .all(|r| r.threads == Some(2) && r.level == 2)
    );
}

#[test]
fn fixed_level_flags_are_checked() {
    let no_zones = tempfile::tempdir().unwrap();
    let err = |a: &GovernorArgs| GovernorHook::new(a, 4).unwrap_err().to_string();
    let mut a = args(
        no_zones.path(),
        GovernorKind::Fixed,
        ActuatorArg::Duty,
        42.0,
    );
    a.governor_period_ms = 1000;
    assert!(
        err(&a).contains("--governor fixed needs --governor-level"),
        "{}",
        err(&a)
    );
    a.governor_level = Some(17);
    assert!(err(&a).contains("levels 0 to 16"), "{}", err(&a));
    a.governor_level = Some(1);
    a.target_temp = 40.0;
    assert!(
        err(&a).contains("--target-temp not used with --governor fixed"),
        "{}",
        err(&a)
    );
    let mut b = args(no_zones.path(), GovernorKind::Off, ActuatorArg::Duty, 42.0);
    b.governor_level = Some(1);
    let e =
        pocketperf::governor_hook::check_args(&b, &pocketperf::telemetry::DeviceSpec::Local, false)
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("--governor-level applies to --governor fixed only"),
        "{e}"
    );
}

#[test]
fn thread_actuator_reaches_the_kernels() {
    let dev = hot_device();
    let a = args(dev.root(), GovernorKind::Step, ActuatorArg::Threads, 38.0);
    let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
    let th = FakeThreads::default();
    decode(&mut hook, 5, Duration::from_millis(12), &th);
    // 4 threads → 3 → 2 → 1, then held at the floor.
    assert_eq!(*th.0.lock().unwrap(), vec![3, 2, 1, 1, 1]);
    assert_eq!(hook.tokens().last().unwrap().threads, Some(1));
    assert!(hook.tokens().iter().all(|r| r.pause_ms == 0.0));
}

#[test]
fn cold_handset_stays_unthrottled_under_pid() {
    let dev = SimDevice::new("sim:pixel-8-pro").unwrap();
    let a = args(
        dev.root(),
        GovernorKind::Pid,
        ActuatorArg::ThreadsDuty,
        42.0,
    );
    let mut hook = GovernorHook::new(&a, 2).unwrap().unwrap();
    let th = FakeThreads::default();
    decode(&mut hook, 4, Duration::from_millis(12), &th);
    assert!(
        hook.tokens()
            .iter()
            .all(|r| r.level == 0 && r.pause_ms == 0.0)
    );
    assert!(
        hook.tokens()
            .iter()
            .all(|r| r.threads == Some(2) && r.busy == Some(1.0))
    );
    assert!(hook.warnings().is_empty(), "{:?}", hook.warnings());
}

#[test]
fn sensor_dropout_holds_the_level_and_says_so() {
    let dev = hot_device();
    let a = args(dev.root(), GovernorKind::Step, ActuatorArg::Duty, 38.0);
    let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
    let th = FakeThreads::default();
    decode(&mut hook, 3, Duration::from_millis(12), &th);
    let held = hook.tokens().last().unwrap().level;
    assert_eq!(held, 3);
    // Every thermal zone vanishes (the tree is not rewritten: the device is not stepped).
    let tz = dev.root().join("class/thermal");
    for e in std::fs::read_dir(&tz).unwrap() {
        let _ = std::fs::remove_file(e.unwrap().path().join("temp"));
    }
    decode_query(&mut hook, 8, 3, Duration::from_millis(12), &th);
    let rows = &hook.tokens()[3..];
    assert!(rows.iter().all(|r| r.level == held));
    assert!(
        rows.iter()
            .all(|r| r.status == pocketperf_runtime::governor::StepStatus::SensorDropout)
    );
    let w = hook.warnings().join("\n");
    assert!(
        w.contains("sensor dropout") && w.contains("holding level 3"),
        "{w}"
    );
    assert!(w.contains("skin-msm-therm"), "{w}");
    let idx = hook.token_index();
    assert_eq!(hook.csv_cells(&idx, 8, 1)[3], "sensor_dropout");
    assert_eq!(hook.csv_cells(&idx, 7, 1)[3], "ok");
}

#[test]
fn unknown_sensor_and_caps_without_opt_in_are_refused() {
    let dev = SimDevice::new("sim:snapdragon-8gen3").unwrap();
    let mut a = args(dev.root(), GovernorKind::Pid, ActuatorArg::Caps, 42.0);
    let e = GovernorHook::new(&a, 4).unwrap_err().to_string();
    assert!(e.contains("--allow-sysfs-caps"), "{e}");
    a.governor_actuator = ActuatorArg::Duty;
    a.governor_sensor = "zone:nonexistent".into();
    let e = GovernorHook::new(&a, 4).unwrap_err().to_string();
    assert!(
        e.contains("no matching") && e.contains("skin-msm-therm"),
        "{e}"
    );
    a.governor_sensor = "cpu".into();
    assert!(GovernorHook::new(&a, 4).is_err());
    a.governor_sensor = "zone:cpu-1-2-0".into();
    assert!(GovernorHook::new(&a, 4).unwrap().is_some());
    a.governor = GovernorKind::Off;
    assert!(GovernorHook::new(&a, 4).unwrap().is_none());
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

#[test]
fn caps_are_written_when_allowed_and_restored_on_drop() {
    let dev = hot_device();
    let cap = dev
        .root()
        .join("devices/system/cpu/cpufreq/policy7/scaling_max_freq");
    let gpu = dev.root().join("class/kgsl/kgsl-3d0/max_gpuclk");
    let (cap0, gpu0) = (read(&cap), read(&gpu));
    let mut a = args(dev.root(), GovernorKind::Step, ActuatorArg::CapsDuty, 38.0);
    a.allow_sysfs_caps = true;
    a.governor_model = Some("sim:snapdragon-8gen3".into());
    {
        let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
        let th = FakeThreads::default();
        decode(&mut hook, 3, Duration::from_millis(12), &th);
        // Level 3 of the model's 10 OPPs: the prime cluster's table is the model's own.
        assert_eq!(read(&cap), "2534400");
        assert_ne!(read(&gpu), gpu0);
        let caps = &hook.tokens()[2].caps;
        assert_eq!(caps.len(), 5, "four cpufreq policies and the GPU: {caps:?}");
        // With the model, the pid table is the model's power per level (W).
        let j = hook.summary_json();
        assert!(j["level_outputs"].is_null(), "step has no pid table");
    }
    assert_eq!(read(&cap), cap0);
    assert_eq!(read(&gpu), gpu0);
}

const CHILD_ENV: &str = "POCKETPERF_GOVERNOR_SIGINT_CHILD";

fn tiny_tree(dir: &Path) {
    let z = dir.join("class/thermal/thermal_zone0");
    std::fs::create_dir_all(&z).unwrap();
    std::fs::write(z.join("type"), "skin-therm\n").unwrap();
    std::fs::write(z.join("temp"), "50000\n").unwrap();
    let p = dir.join("devices/system/cpu/cpufreq/policy0");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("cpuinfo_min_freq"), "300000\n").unwrap();
    std::fs::write(p.join("cpuinfo_max_freq"), "3000000\n").unwrap();
    std::fs::write(p.join("scaling_max_freq"), "3000000\n").unwrap();
    std::fs::write(p.join("related_cpus"), "0\n").unwrap();
    std::fs::write(p.join("scaling_cur_freq"), "3000000\n").unwrap();
}

#[test]
fn ctrl_c_restores_the_caps() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        // Child: throttle, then get interrupted.
        let root = Path::new(&dir);
        let mut a = args(root, GovernorKind::Step, ActuatorArg::Caps, 38.0);
        a.allow_sysfs_caps = true;
        let mut hook = GovernorHook::new(&a, 1).unwrap().unwrap();
        decode(
            &mut hook,
            4,
            Duration::from_millis(12),
            &FakeThreads::default(),
        );
        let cap = root.join("devices/system/cpu/cpufreq/policy0/scaling_max_freq");
        std::fs::write(root.join("throttled"), read(&cap)).unwrap();
        // SAFETY: raising a signal in the current process; the handler under test runs.
        unsafe {
            libc::raise(libc::SIGINT);
        }
        std::thread::sleep(Duration::from_secs(5));
        unreachable!("SIGINT must end the process");
    }
    let dir = tempfile::tempdir().unwrap();
    tiny_tree(dir.path());
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "ctrl_c_restores_the_caps",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    // The child had throttled (10 evenly spaced caps: level 4 → 1.8 GHz)...
    assert_eq!(read(&dir.path().join("throttled")), "1800000");
    // ...and the handler wrote the original cap back before dying.
    let cap = dir
        .path()
        .join("devices/system/cpu/cpufreq/policy0/scaling_max_freq");
    assert_eq!(read(&cap), "3000000");
}

#[test]
fn governor_state_reaches_telemetry_gauges() {
    let dev = hot_device();
    let a = args(dev.root(), GovernorKind::Step, ActuatorArg::Duty, 38.0);
    let mut hook = GovernorHook::new(&a, 4).unwrap().unwrap();
    let p = probe(dev.root());
    let clock: pocketperf::telemetry::MonotonicClock = {
        let t0 = Instant::now();
        std::sync::Arc::new(move || t0.elapsed().as_nanos() as u64)
    };
    let mut core = SamplerCore::new(&p, clock, SamplerConfig::default()).unwrap();
    for (name, g) in hook.gauges() {
        core.add_gauge(&name, g).unwrap();
    }
    decode(
        &mut hook,
        2,
        Duration::from_millis(12),
        &FakeThreads::default(),
    );
    let cols = core.columns().to_vec();
    let row = core.sample().clone();
    let at = |name: &str| row.values[cols.iter().position(|c| c == name).unwrap()];
    assert_eq!(at("governor.level"), Some(2.0));
    assert_eq!(at("governor.busy"), Some(0.9));
    assert!((at("governor.temp.c").unwrap() - dev.model().skin_c()).abs() < 0.002);
    assert_eq!(at("governor.threads"), None);
}

#[test]
fn on_a_simulated_handset_the_pid_table_is_calibrated_to_the_measured_busy_share() {
    let dev = hot_device();
    let sim = DeviceSpec::Sim {
        profile: "snapdragon-8gen3".into(),
        thermal_speedup: 1,
    };
    let sys = Path::new(DEFAULT_SYSFS_ROOT);
    let a = args(sys, GovernorKind::Pid, ActuatorArg::Duty, 38.0);
    let mut hook = GovernorHook::new_on(&a, 1, &sim).unwrap().unwrap();
    hook.attach_sim(dev.root(), None).unwrap();
    // 2 s of the decode's work at 0.3 of its one thread: the warm-up is complete.
    hook.observe_work(600_000_000, Duration::from_secs(2));
    decode(
        &mut hook,
        1,
        Duration::from_millis(1),
        &FakeThreads::default(),
    );
    let g = hook.summary_json();
    let ev = &g["calibration"]["events"][0];
    assert_eq!(ev["retuned"], true, "{g}");
    // The one real token moved the estimate by at most 1 ms / 20 s of the way.
    let scale = ev["scale"].as_f64().unwrap();
    assert!((scale - 0.3).abs() < 1e-3, "{ev}");
    // Level k of the duty ladder (busy 1 − 0.05·k at the top OPP) draws idle + share·b·active.
    let p = pocketperf::sim::model::profile("snapdragon-8gen3").unwrap();
    let table = ev["level_outputs"].as_array().unwrap();
    assert_eq!(table.len(), 17);
    for (k, v) in table.iter().enumerate() {
        let b = 1.0 - 0.05 * k as f64;
        let expect = p.idle_w + scale * b * p.active_w(p.max_level());
        assert!(
            (v.as_f64().unwrap() - expect).abs() < 1e-9,
            "level {k}: {v}"
        );
    }
    assert_eq!(g["level_outputs"], ev["level_outputs"]);
    assert_eq!(hook.tokens()[0].busy_share, Some(scale));
    // step has no gains to calibrate.
    let s = args(sys, GovernorKind::Step, ActuatorArg::Duty, 38.0);
    let step = GovernorHook::new_on(&s, 1, &sim).unwrap().unwrap();
    assert!(step.summary_json()["calibration"].is_null());
}
