//! Telemetry sampler cost: one `SamplerCore::sample()` (every sensor read once, energy meter
//! updated, row kept) on both shared sysfs fixtures and on both simulated handsets' trees.
//! At the default 10 Hz, the CPU share of one core is `time per sample × 10 / s`; the target
//! is under 1 % (under 1 ms per sample). Figures go to `docs/PERFORMANCE.md` ("Telemetry cost
//! and energy"). Run: `cargo bench -p pocketperf --bench telemetry`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use pocketperf::sim::SimDevice;
use pocketperf::telemetry::probe;
use pocketperf::telemetry::sampler::{MonotonicClock, SamplerConfig, SamplerCore};

use pocketperf_testkit::shared_dir;

fn bench_root(c: &mut Criterion, label: &str, root: &Path) {
    let p = probe(root);
    let make = || {
        let t = Arc::new(AtomicU64::new(0));
        let clock: MonotonicClock = Arc::new(move || t.fetch_add(100_000_000, Ordering::Relaxed));
        SamplerCore::new(&p, clock, SamplerConfig::default())
    };
    if let Err(e) = make() {
        eprintln!("{label}: cannot build a sampler ({e}), skipped");
        return;
    }
    c.bench_function(&format!("sample/{label}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut core = None;
            for i in 0..iters {
                // A fresh core every 10 000 samples keeps the in-memory rows bounded.
                if i % 10_000 == 0 {
                    core = make().ok();
                    if let Some(c) = core.as_mut() {
                        c.sample();
                    }
                }
                let Some(c) = core.as_mut() else { break };
                let t0 = Instant::now();
                c.sample();
                total += t0.elapsed();
            }
            total
        })
    });
}

fn benches(c: &mut Criterion) {
    for f in ["snapdragon-8gen3", "pixel-8-pro"] {
        let root = shared_dir().join("fixtures/sysfs").join(f);
        if root.is_dir() {
            bench_root(c, &format!("fixture-{f}"), &root);
        } else {
            eprintln!("{}: fixture not found, skipped", root.display());
        }
        match SimDevice::new(f) {
            Ok(sim) => bench_root(c, &format!("sim-{f}"), sim.root()),
            Err(e) => eprintln!("sim {f}: {e}"),
        }
    }
}

criterion_group!(telemetry, benches);
criterion_main!(telemetry);
