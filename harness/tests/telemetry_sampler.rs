//! The sampler thread on the shared clock: `telemetry.csv` layout and provenance, a sensor
//! vanishing mid-run, its own CPU cost recorded; the simulated handset driven in real time
//! by the process's measured CPU use.

mod telemetry_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pocketperf::sim::{ActivitySource, SimDevice, SimDriver};
use pocketperf::telemetry::sampler::{EventKind, MonotonicClock, SamplerConfig, read_csv};
use pocketperf::telemetry::{SessionConfig, TelemetrySession};
use telemetry_common::*;

/// The simulated handset reads the whole process's CPU time: tests in this file run one at a
/// time so one test's threads are not another's workload.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn sampler_thread_writes_csv_and_survives_a_vanishing_sensor() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_g, root) = copy_fixture("snapdragon-8gen3");
    let out = tempfile::tempdir().unwrap();
    let csv = out.path().join("telemetry.csv");
    let origin = Instant::now();
    let clock: MonotonicClock = Arc::new(move || origin.elapsed().as_nanos() as u64);
    let mut cfg = SessionConfig::new(&root);
    cfg.sampler = SamplerConfig {
        period: Duration::from_millis(20),
        metadata: vec![("device".into(), "fixture".into())],
        csv_path: Some(csv.clone()),
    };
    let gauge_calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let g = gauge_calls.clone();
    let session = TelemetrySession::start(
        cfg,
        clock.clone(),
        vec![(
            "gauge.test".into(),
            Box::new(move || Some(g.fetch_add(1, std::sync::atomic::Ordering::SeqCst) as f64)),
        )],
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let zone = indexed(&root.join("class/thermal"), "thermal_zone")
        .into_iter()
        .find(|(_, d)| read(&d.join("type")) == "cpu-2-0-0")
        .unwrap()
        .1;
    std::fs::remove_file(zone.join("temp")).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let report = session.stop().unwrap();
    let o = &report.output;
    assert!(o.rows.len() >= 5, "{} rows", o.rows.len());
    // Timestamps on the caller's clock, increasing, about one period apart.
    assert!(o.rows.windows(2).all(|w| w[1].t_ns > w[0].t_ns));
    assert!(o.rows.last().unwrap().t_ns <= clock());
    let ev = o
        .events
        .iter()
        .find(|e| e.column == "temp.cpu-2-0-0.c")
        .unwrap();
    assert_eq!(ev.kind, EventKind::Vanished);
    // The CSV holds the same rows and columns, with provenance in `#` lines.
    let t = read_csv(&csv).unwrap();
    assert_eq!(t.columns, o.columns);
    assert_eq!(t.rows.len(), o.rows.len());
    let meta = |k: &str| {
        t.metadata
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(meta("schema_version").as_deref(), Some("1"));
    assert_eq!(meta("period_ms").as_deref(), Some("20"));
    assert_eq!(meta("device").as_deref(), Some("fixture"));
    assert_eq!(meta("meter").as_deref(), Some("ChargeCounter"));
    assert!(meta("tool_version").is_some());
    // The reports crate reads the same file.
    let r = pocketperf_reports::datafiles::read_telemetry(&csv).unwrap();
    assert_eq!(r.t_s.len(), o.rows.len());
    assert!(r.column("temp.soc.c").is_some() && r.column("gauge.test").is_some());
    // Its own cost was measured.
    let c = report.summary.sampler_cost;
    assert_eq!(c.samples as usize, o.rows.len());
    assert!(c.cpu_s > 0.0 && c.thread_cpu_s >= c.cpu_s && c.wall_s > 0.25);
    assert!(c.cpu_pct_of_core > 0.0);
}

#[test]
fn simulated_handset_follows_the_process_cpu_use() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dev = SimDevice::new("sim:pixel-8-pro").unwrap();
    let idle_w = dev.model().profile().idle_w;
    let origin = Instant::now();
    let clock: pocketperf::sim::DriverClock = Arc::new(move || origin.elapsed().as_nanos() as u64);
    let drv = SimDriver::spawn_clocked(
        dev,
        ActivitySource::ProcessCpu {
            threads: 1,
            freq_level: None,
            paced: None,
        },
        Duration::from_millis(10),
        Some(clock.clone()),
    )
    .unwrap();
    // Idle, then one thread spinning.
    std::thread::sleep(Duration::from_millis(200));
    let t_mid = clock();
    let spin_until = Instant::now() + Duration::from_millis(300);
    let mut x = 0u64;
    while Instant::now() < spin_until {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    std::hint::black_box(x);
    let t_end = clock();
    let (dev, trace) = drv.stop_with_trace().unwrap();
    assert!(
        trace
            .windows(2)
            .all(|w| w[1].t_ns >= w[0].t_ns && w[1].energy_j >= w[0].energy_j)
    );
    let e = |t| pocketperf::sim::truth_energy_at(&trace, t).unwrap();
    let t0 = trace[0].t_ns;
    let idle_p = (e(t_mid) - e(t0)) / ((t_mid - t0) as f64 / 1e9);
    let busy_p = (e(t_end) - e(t_mid)) / ((t_end - t_mid) as f64 / 1e9);
    assert!(idle_p < idle_w * 1.2, "idle draw {idle_p} W");
    assert!(busy_p > idle_w * 1.5, "busy draw {busy_p} W");
    // The tree's battery counter moved with the model.
    let cc = read_i64(&dev.root().join("class/power_supply/battery/charge_counter"));
    let full = dev.model().profile().battery_soc0 * dev.model().profile().battery_mah * 1000.0;
    let drawn_uah = dev.model().charge_drawn_c() / 3.6e-3;
    assert!(
        (full - drawn_uah - cc as f64).abs() <= 1.0,
        "{full} {drawn_uah} {cc}"
    );
}
