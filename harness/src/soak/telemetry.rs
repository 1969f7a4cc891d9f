//! Telemetry during a soak: the telemetry library's sampler over the device's sysfs root (or a
//! simulated handset driven by whether a request is in flight), on its own thread at the
//! soak's telemetry period. Every sample goes to `telemetry-<segment>.csv` and, reduced to
//! SoC/skin/hottest-zone temperatures and total power, into the journal, so a resumed soak
//! keeps the whole thermal history.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::clock::SoakClock;
use super::journal::{Journal, Record, ThermalRecord};
use crate::sim::model::Activity;
use crate::sim::{ActivitySource, SimDevice, SimDriver};
use crate::telemetry::{MonotonicClock, SamplerConfig, SamplerCore, probe};

/// A running telemetry thread (and the simulated handset, if any).
pub struct SoakTelemetry {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    sim: Option<SimDriver>,
    /// What the probe found, for the log.
    pub summary: String,
}

/// Reduces one sampler row to the journal's thermal record.
pub fn thermal_record(columns: &[String], values: &[Option<f64>]) -> ThermalRecord {
    let get = |name: &str| {
        columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| values.get(i).copied().flatten())
    };
    let mut rec = ThermalRecord {
        soc_c: get("temp.soc.c"),
        skin_c: get("temp.skin.c"),
        power_mw: get("power.total.mw"),
        ..Default::default()
    };
    for (c, v) in columns.iter().zip(values) {
        let (Some(zone), Some(v)) = (
            c.strip_prefix("temp.").and_then(|z| z.strip_suffix(".c")),
            *v,
        ) else {
            continue;
        };
        if zone == "soc" || zone == "skin" {
            continue;
        }
        if rec.max_c.is_none_or(|m| v > m) {
            rec.max_c = Some(v);
            rec.max_zone = Some(zone.to_string());
        }
    }
    rec
}

/// What the telemetry thread needs.
pub struct TelemetrySetup {
    /// `local` or `sim:<profile>`.
    pub device: String,
    /// Sysfs root read on `local`.
    pub sysfs_root: PathBuf,
    pub period: Duration,
    /// Where the sampler streams its CSV.
    pub csv: PathBuf,
    /// `# key=value` lines of the CSV.
    pub metadata: Vec<(String, String)>,
    pub journal: Arc<Mutex<Journal>>,
    pub clock: SoakClock,
    /// Set while a request is in flight (a simulated handset's activity).
    pub in_flight: Arc<AtomicBool>,
}

impl SoakTelemetry {
    /// Starts sampling the device (`local` reads the sysfs root; `sim:<profile>` simulates a
    /// handset). `None` when the device exposes no temperature sensor and no energy meter.
    pub fn start(setup: TelemetrySetup) -> Result<Option<Self>> {
        let TelemetrySetup {
            device,
            sysfs_root,
            period,
            csv,
            metadata,
            journal,
            clock,
            in_flight,
        } = setup;
        let device = device.as_str();
        let (root, sim) = if device == "local" {
            (sysfs_root, None)
        } else if device.starts_with("sim:") {
            let dev = SimDevice::new(device)?;
            let top = dev.model().profile().max_level();
            let root = dev.root().to_path_buf();
            let flag = in_flight.clone();
            let driver = SimDriver::spawn(
                dev,
                ActivitySource::Closure(Box::new(move |_dt| Activity {
                    busy: if flag.load(Ordering::Relaxed) {
                        1.0
                    } else {
                        0.0
                    },
                    freq_level: top,
                })),
                Duration::from_millis(50),
            )?;
            (root, Some(driver))
        } else {
            anyhow::bail!("--device {device}: expected `local` or `sim:<profile>`");
        };
        let p = probe(&root);
        let sensors = Record::Sensors {
            thermal_zones: p.thermal_zones.len(),
            energy_meter: p.meter.is_some(),
        };
        journal
            .lock()
            .map_err(|_| anyhow::anyhow!("the soak journal's lock is poisoned"))?
            .append(clock.now_s(), sensors)
            .context("journaling the device's sensors")?;
        if p.thermal_zones.is_empty() && p.meter.is_none() {
            if let Some(s) = sim {
                let _ = s.stop();
            }
            return Ok(None);
        }
        let summary = format!(
            "telemetry: {} thermal zone(s), meter {}",
            p.thermal_zones.len(),
            p.meter
                .as_ref()
                .map_or("none".to_string(), |m| format!("{:?}", m.kind))
        );
        let t0 = Instant::now();
        let mono: MonotonicClock = Arc::new(move || t0.elapsed().as_nanos() as u64);
        let mut core = SamplerCore::new(
            &p,
            mono,
            SamplerConfig {
                period,
                metadata,
                csv_path: Some(csv),
            },
        )
        .with_context(|| format!("starting the telemetry sampler on {}", root.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("pocketperf-soak-telemetry".into())
            .spawn(move || {
                let started = Instant::now();
                let mut next = Instant::now();
                while !flag.load(Ordering::SeqCst) {
                    let row = core.sample().values.clone();
                    let rec = thermal_record(core.columns(), &row);
                    let any = rec.soc_c.is_some()
                        || rec.skin_c.is_some()
                        || rec.max_c.is_some()
                        || rec.power_mw.is_some();
                    if any && let Ok(mut j) = journal.lock() {
                        // A journal write error surfaces on the main thread's next append.
                        let _ = j.append(clock.now_s(), Record::Thermal(rec));
                    }
                    next += period;
                    loop {
                        let now = Instant::now();
                        if flag.load(Ordering::SeqCst) || now >= next {
                            break;
                        }
                        std::thread::park_timeout(next - now);
                    }
                    if next < Instant::now() {
                        next = Instant::now();
                    }
                }
                let _ = core.finish(started.elapsed().as_secs_f64());
            })
            .context("starting the telemetry thread")?;
        Ok(Some(SoakTelemetry {
            stop,
            handle: Some(handle),
            sim,
            summary,
        }))
    }

    /// Stops sampling (flushing the CSV) and the simulated handset.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        if let Some(s) = self.sim.take() {
            let _ = s.stop();
        }
    }
}

impl Drop for SoakTelemetry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_reduce_to_soc_skin_and_the_hottest_zone() {
        let cols: Vec<String> = [
            "temp.cpu0.c",
            "temp.gpu.c",
            "temp.soc.c",
            "temp.skin.c",
            "power.total.mw",
            "rss.kib",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = thermal_record(
            &cols,
            &[
                Some(41.0),
                Some(47.5),
                Some(47.5),
                Some(33.0),
                Some(2500.0),
                Some(1.0),
            ],
        );
        assert_eq!(r.soc_c, Some(47.5));
        assert_eq!(r.skin_c, Some(33.0));
        assert_eq!((r.max_c, r.max_zone.as_deref()), (Some(47.5), Some("gpu")));
        assert_eq!(r.power_mw, Some(2500.0));
        let r = thermal_record(&cols, &[None; 6]);
        assert_eq!(r, ThermalRecord::default());
    }
}
