//! The telemetry sampler: reads every sensor the probe found at a fixed period, keeps the
//! rows in memory, streams them to `telemetry.csv`, and records sensors that vanish or return
//! garbage as events (never fatal).
//!
//! CSV layout (schema version 1, agreed with the reports crate): leading `# key=value`
//! comment lines (schema, tool version, sampler settings, caller metadata), a header whose
//! first column is `t_s` (seconds since the first sample), then one row per sample; an empty
//! cell is a missing reading. Column names carry their unit: `temp.<zone>.c`,
//! `cpufreq.<policy>.khz`, `gpufreq.khz`, `gpu.busy.pct`, `power.<rail>.mw`,
//! `battery.voltage.mv`, `battery.current.ma` (discharge positive), `power.total.mw`,
//! `energy.total.mj`, `rss.kib`, `raw.battery.<attribute>`, then caller gauges.
//! Timestamps come from the caller's monotonic clock (the scenario engine's), in ns.
//!
//! Size: over 800 lines: column discovery, reading, the event log (vanished sensors,
//! garbage values) and the streaming CSV share one row model; the CSV writer is the seam.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::TelemetryError;
use super::energy::{EnergyAccumulator, MeterReading};
use super::probe::{
    CurrentUnit, DischargeSign, GpuKind, MeterKind, OdpmSnapshot, Probe, TEMP_RANGE_C, TempUnit,
    VoltageUnit, ZoneRole, parse_energy_value, parse_percent,
};
use super::sysfs::{clip, read_i64, read_trimmed};

/// CSV schema version written in the `#` header.
pub const SCHEMA_VERSION: u32 = 1;

/// A monotonic clock in nanoseconds shared with the scenario engine.
pub type MonotonicClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// An extra column the caller pushes (e.g. a governor's temperature estimate).
pub type Gauge = Box<dyn FnMut() -> Option<f64> + Send>;

/// Sampler settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Sampling period (default 100 ms).
    pub period: Duration,
    /// `key=value` metadata written as `#` lines (commit, device, model hash, settings, UTC
    /// start...).
    pub metadata: Vec<(String, String)>,
    /// Where to stream the CSV; `None` keeps rows in memory only.
    pub csv_path: Option<PathBuf>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_millis(100),
            metadata: Vec::new(),
            csv_path: None,
        }
    }
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Caller clock, ns.
    pub t_ns: u64,
    /// One cell per column (after `t_s`); `None` = missing.
    pub values: Vec<Option<f64>>,
}

/// What happened to a sensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventKind {
    /// The file disappeared (ENOENT).
    Vanished,
    /// The read failed (EIO, EINVAL, EISDIR...).
    Unreadable,
    /// It returned text that does not parse or an implausible value.
    Garbage,
    /// A failing sensor reads again.
    Recovered,
}

/// A sensor state change during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SensorEvent {
    /// Seconds since the first sample.
    pub t_s: f64,
    /// Column concerned.
    pub column: String,
    /// What happened.
    pub kind: EventKind,
    /// Error text.
    pub detail: String,
}

/// The sampler's own cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SamplerCost {
    /// Samples taken.
    pub samples: u64,
    /// CPU time spent inside `sample`, s (thread CPU clock).
    pub cpu_s: f64,
    /// CPU time of the whole sampling thread (samples, wake-ups, CSV writes), s; equals
    /// `cpu_s` when driven by hand.
    pub thread_cpu_s: f64,
    /// Wall time of the sampling thread, s (0 when driven by hand).
    pub wall_s: f64,
    /// Thread CPU time / wall time × 100: percent of one core.
    pub cpu_pct_of_core: f64,
    /// Mean CPU time per sample, µs.
    pub mean_sample_cpu_us: f64,
}

enum Source {
    Zone {
        path: PathBuf,
        unit: TempUnit,
    },
    CpuFreq(PathBuf),
    /// `scaling_max_freq`: the effective cap (thermal throttling lowers it).
    CpuMax(PathBuf),
    /// A charger input's `online` (0/1).
    Online(PathBuf),
    GpuFreq(GpuKind, PathBuf),
    GpuBusy(GpuKind, PathBuf),
    Rss,
    Gauge(Gauge),
}

struct Chan {
    column: usize,
    source: Source,
}

struct OdpmDev {
    dir: PathBuf,
    /// (channel, rail, column of power.<rail>.mw)
    rails: Vec<(u32, String, usize)>,
    prev: Option<OdpmSnapshot>,
}

struct BatterySrc {
    dir: PathBuf,
    current_unit: Option<CurrentUnit>,
    sign: DischargeSign,
    voltage_unit: Option<VoltageUnit>,
    col_v: Option<usize>,
    col_i: Option<usize>,
    /// (attribute, column)
    raw: Vec<(&'static str, usize)>,
}

/// The synchronous part of the sampler: `sample()` reads every sensor once. The thread in
/// [`Sampler`] calls it periodically; tests drive it by hand in virtual time.
pub struct SamplerCore {
    clock: MonotonicClock,
    columns: Vec<String>,
    chans: Vec<Chan>,
    soc_cols: Vec<usize>,
    skin_cols: Vec<usize>,
    col_soc: Option<usize>,
    col_skin: Option<usize>,
    odpm: Vec<OdpmDev>,
    powercap: Vec<(PathBuf, Option<u64>)>,
    battery: Option<BatterySrc>,
    meter: Option<MeterKind>,
    acc: EnergyAccumulator,
    last_meter: Option<(u64, f64)>,
    col_power: usize,
    col_energy: usize,
    rows: Vec<Row>,
    events: Vec<SensorEvent>,
    failing: HashMap<usize, ()>,
    missing_cells: u64,
    start_ns: Option<u64>,
    cost: SamplerCost,
    csv: Option<(PathBuf, CsvOut)>,
    csv_error: Option<TelemetryError>,
    header_written: bool,
    metadata: Vec<(String, String)>,
    period: Duration,
}

/// Makes a sensor name safe for a column name: `[A-Za-z0-9_+-]`, anything else → `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '+' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl SamplerCore {
    /// Builds the column set from a probe.
    pub fn new(
        probe: &Probe,
        clock: MonotonicClock,
        config: SamplerConfig,
    ) -> Result<Self, TelemetryError> {
        let mut columns: Vec<String> = Vec::new();
        let mut chans = Vec::new();
        let push = |columns: &mut Vec<String>, name: String| {
            columns.push(name);
            columns.len() - 1
        };
        let mut soc_cols = Vec::new();
        let mut skin_cols = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for z in &probe.thermal_zones {
            let base = sanitize(&z.name);
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            let label = if *n > 1 {
                format!("{base}_{}", z.index)
            } else {
                base
            };
            let column = push(&mut columns, format!("temp.{label}.c"));
            match z.role {
                ZoneRole::Soc => soc_cols.push(column),
                ZoneRole::Skin => skin_cols.push(column),
                _ => {}
            }
            chans.push(Chan {
                column,
                source: Source::Zone {
                    path: z.dir.join("temp"),
                    unit: z.unit,
                },
            });
        }
        let col_soc = (!soc_cols.is_empty()).then(|| push(&mut columns, "temp.soc.c".to_string()));
        let col_skin =
            (!skin_cols.is_empty()).then(|| push(&mut columns, "temp.skin.c".to_string()));
        for p in &probe.cpu_policies {
            let column = push(&mut columns, format!("cpufreq.{}.khz", sanitize(&p.name)));
            chans.push(Chan {
                column,
                source: Source::CpuFreq(p.dir.join("scaling_cur_freq")),
            });
        }
        for p in &probe.cpu_policies {
            let column = push(&mut columns, format!("cpumax.{}.khz", sanitize(&p.name)));
            chans.push(Chan {
                column,
                source: Source::CpuMax(p.dir.join("scaling_max_freq")),
            });
        }
        for sup in probe.supplies.iter().filter(|s| s.online.is_some()) {
            let column = push(
                &mut columns,
                format!("supply.{}.online", sanitize(&sup.name)),
            );
            chans.push(Chan {
                column,
                source: Source::Online(sup.dir.join("online")),
            });
        }
        if let Some(g) = &probe.gpu {
            let column = push(&mut columns, "gpufreq.khz".into());
            chans.push(Chan {
                column,
                source: Source::GpuFreq(g.kind, g.dir.clone()),
            });
            let column = push(&mut columns, "gpu.busy.pct".into());
            chans.push(Chan {
                column,
                source: Source::GpuBusy(g.kind, g.dir.clone()),
            });
        }
        let mut odpm = Vec::new();
        for d in &probe.odpm {
            let rails = d
                .rails
                .iter()
                .map(|r| {
                    let col = push(&mut columns, format!("power.{}.mw", sanitize(&r.rail)));
                    (r.channel, r.rail.clone(), col)
                })
                .collect();
            odpm.push(OdpmDev {
                dir: d.dir.clone(),
                rails,
                prev: None,
            });
        }
        let battery = probe.battery.as_ref().map(|b| {
            let col_v = b
                .voltage_unit
                .map(|_| push(&mut columns, "battery.voltage.mv".into()));
            let col_i = b
                .current_unit
                .as_ref()
                .map(|_| push(&mut columns, "battery.current.ma".into()));
            BatterySrc {
                dir: b.dir.clone(),
                current_unit: b.current_unit.as_ref().map(|(u, _)| *u),
                sign: b
                    .discharge_sign
                    .as_ref()
                    .map_or(DischargeSign::Negative, |(s, _)| *s),
                voltage_unit: b.voltage_unit,
                col_v,
                col_i,
                raw: Vec::new(),
            }
        });
        let col_power = push(&mut columns, "power.total.mw".into());
        let col_energy = push(&mut columns, "energy.total.mj".into());
        let column = push(&mut columns, "rss.kib".into());
        chans.push(Chan {
            column,
            source: Source::Rss,
        });
        let mut battery = battery;
        if let (Some(bs), Some(b)) = (&mut battery, &probe.battery) {
            for attr in [
                "current_now",
                "voltage_now",
                "charge_counter",
                "energy_counter",
                "energy_now",
                "power_now",
            ] {
                if b.attributes.iter().any(|a| a == attr) {
                    let col = push(&mut columns, format!("raw.battery.{attr}"));
                    bs.raw.push((attr, col));
                }
            }
        }
        let powercap = {
            let top: Vec<_> = probe.powercap.iter().filter(|z| z.top_level).collect();
            // `psys` is the whole platform; package zones are inside it. Use it alone if present.
            let chosen: Vec<_> = match top.iter().find(|z| z.label == "psys") {
                Some(p) => vec![*p],
                None => top,
            };
            chosen
                .into_iter()
                .filter(|z| z.energy_uj.is_some())
                .map(|z| (z.dir.join("energy_uj"), z.max_energy_range_uj))
                .collect()
        };
        let csv = match &config.csv_path {
            Some(p) => {
                let f = File::create(p).map_err(|source| TelemetryError::Write {
                    path: p.clone(),
                    source,
                })?;
                Some((p.clone(), CsvOut::Before(f)))
            }
            None => None,
        };
        let mut metadata = vec![
            (
                "schema".to_string(),
                format!("pocketperf-telemetry/{SCHEMA_VERSION}"),
            ),
            ("schema_version".into(), SCHEMA_VERSION.to_string()),
            ("tool_version".into(), env!("CARGO_PKG_VERSION").into()),
            (
                "period_ms".into(),
                format!("{}", config.period.as_secs_f64() * 1000.0),
            ),
            (
                "meter".into(),
                probe
                    .meter
                    .as_ref()
                    .map_or("none".into(), |m| format!("{:?}", m.kind)),
            ),
            (
                "meter_reliable".into(),
                probe
                    .meter
                    .as_ref()
                    .map_or("false".into(), |m| m.reliable.to_string()),
            ),
        ];
        metadata.extend(config.metadata.iter().cloned());
        Ok(Self {
            clock,
            columns,
            chans,
            soc_cols,
            skin_cols,
            col_soc,
            col_skin,
            odpm,
            powercap,
            battery,
            meter: probe.meter.as_ref().map(|m| m.kind),
            acc: EnergyAccumulator::new(),
            last_meter: None,
            col_power,
            col_energy,
            rows: Vec::new(),
            events: Vec::new(),
            failing: HashMap::new(),
            missing_cells: 0,
            start_ns: None,
            cost: SamplerCost::default(),
            csv,
            csv_error: None,
            header_written: false,
            metadata,
            period: config.period,
        })
    }

    /// Registers an extra column fed by a closure. Must be called before the first sample.
    pub fn add_gauge(&mut self, name: &str, gauge: Gauge) -> Result<(), TelemetryError> {
        if !self.rows.is_empty() {
            return Err(TelemetryError::Config {
                field: "gauge",
                value: name.to_string(),
                reason: "gauges must be registered before the first sample",
            });
        }
        if self.columns.iter().any(|c| c == name) || name == "t_s" || name.contains(',') {
            return Err(TelemetryError::Config {
                field: "gauge",
                value: name.to_string(),
                reason: "duplicate column name or a comma in it",
            });
        }
        self.columns.push(name.to_string());
        self.chans.push(Chan {
            column: self.columns.len() - 1,
            source: Source::Gauge(gauge),
        });
        Ok(())
    }

    /// Column names after `t_s`.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Rows so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Sensor events so far.
    pub fn events(&self) -> &[SensorEvent] {
        &self.events
    }

    /// Sampling period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Takes one sample now (caller clock) and returns it.
    pub fn sample(&mut self) -> &Row {
        let cpu0 = thread_cpu_ns();
        let t_ns = (self.clock)();
        let start = *self.start_ns.get_or_insert(t_ns);
        let t_s = t_ns.saturating_sub(start) as f64 / 1e9;
        let mut values: Vec<Option<f64>> = vec![None; self.columns.len()];
        let mut outcomes: Vec<(usize, ChannelOutcome)> = Vec::new();

        for chan in &mut self.chans {
            let r = read_source(&mut chan.source);
            match r {
                Ok(Some(v)) => {
                    values[chan.column] = Some(v);
                    outcomes.push((chan.column, Ok(())));
                }
                Ok(None) => {}
                Err(e) => outcomes.push((chan.column, Err(e))),
            }
        }
        let max_of = |cols: &[usize], values: &[Option<f64>]| {
            cols.iter()
                .filter_map(|&c| values[c])
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        };
        if let Some(c) = self.col_soc {
            values[c] = max_of(&self.soc_cols, &values);
        }
        if let Some(c) = self.col_skin {
            values[c] = max_of(&self.skin_cols, &values);
        }

        // ODPM: per-rail power from counter deltas over the driver's own refresh time.
        let mut odpm_reading: HashMap<(usize, u32), u64> = HashMap::new();
        let mut odpm_ok = !self.odpm.is_empty();
        let mut odpm_power_mw = 0.0;
        let mut odpm_power_ok = !self.odpm.is_empty();
        for (di, dev) in self.odpm.iter_mut().enumerate() {
            let path = dev.dir.join("energy_value");
            let snap = match read_trimmed(&path) {
                Ok(text) => match parse_energy_value(&text) {
                    Some(s) => Ok(s),
                    None => Err((
                        EventKind::Garbage,
                        format!("{}: unparsable", path.display()),
                    )),
                },
                Err(e) => Err(classify(&e)),
            };
            match snap {
                Ok(snap) => {
                    for &(ch, ref rail, col) in &dev.rails {
                        let now = snap
                            .channels
                            .iter()
                            .find(|(c, r, _)| *c == ch && r == rail)
                            .map(|(_, _, e)| *e);
                        let Some(now) = now else {
                            outcomes.push((
                                col,
                                Err((EventKind::Vanished, format!("rail {rail} not listed"))),
                            ));
                            odpm_ok = false;
                            odpm_power_ok = false;
                            continue;
                        };
                        outcomes.push((col, Ok(())));
                        odpm_reading.insert((di, ch), now);
                        let prev = dev.prev.as_ref().and_then(|p| {
                            p.channels
                                .iter()
                                .find(|(c, r, _)| *c == ch && r == rail)
                                .map(|(_, _, e)| (p.t_ms, *e))
                        });
                        match prev {
                            Some((pt, pe)) if snap.t_ms > pt && now >= pe => {
                                let mw = (now - pe) as f64 / (snap.t_ms - pt) as f64;
                                values[col] = Some(mw);
                                odpm_power_mw += mw;
                            }
                            _ => odpm_power_ok = false,
                        }
                    }
                    dev.prev = Some(snap);
                }
                Err(err) => {
                    odpm_ok = false;
                    odpm_power_ok = false;
                    for &(_, _, col) in &dev.rails {
                        outcomes.push((col, Err(err.clone())));
                    }
                }
            }
        }

        // Battery.
        let mut v_mv = None;
        let mut i_ma = None;
        let mut charge_uah = None;
        let mut energy_uwh = None;
        if let Some(b) = &self.battery {
            for &(attr, col) in &b.raw {
                match read_i64(&b.dir.join(attr)) {
                    Ok(v) => {
                        values[col] = Some(v as f64);
                        outcomes.push((col, Ok(())));
                        match attr {
                            "current_now" => {
                                if let Some(u) = b.current_unit {
                                    i_ma = Some(v as f64 * u.to_ma() * b.sign.factor());
                                }
                            }
                            "voltage_now" => {
                                if let Some(u) = b.voltage_unit {
                                    v_mv = Some(v as f64 * u.to_mv());
                                }
                            }
                            "charge_counter" => charge_uah = Some(v),
                            "energy_counter" => energy_uwh = Some(v),
                            "energy_now" => energy_uwh = energy_uwh.or(Some(v)),
                            _ => {}
                        }
                    }
                    Err(e) => outcomes.push((col, Err(classify(&e)))),
                }
            }
            if let Some(c) = b.col_v {
                values[c] = v_mv;
            }
            if let Some(c) = b.col_i {
                values[c] = i_ma;
            }
        }
        let battery_mw = v_mv.zip(i_ma).map(|(v, i)| v * i / 1000.0);

        // Energy meter.
        let reading = match self.meter {
            Some(MeterKind::Odpm) if odpm_ok => Some(MeterReading::Odpm(odpm_reading)),
            Some(MeterKind::Powercap) => {
                let mut zones = Vec::new();
                let mut ok = true;
                for (i, (path, range)) in self.powercap.iter().enumerate() {
                    match read_i64(path).and_then(|v| {
                        u64::try_from(v).map_err(|_| TelemetryError::Parse {
                            path: path.clone(),
                            value: v.to_string(),
                            expected: "a non-negative counter",
                        })
                    }) {
                        Ok(v) => zones.push((v, *range)),
                        Err(e) => {
                            ok = false;
                            outcomes.push((usize::MAX - i, Err(classify(&e))));
                        }
                    }
                }
                ok.then_some(MeterReading::Powercap(zones))
            }
            Some(MeterKind::BatteryEnergyCounter) => energy_uwh.map(MeterReading::EnergyCounter),
            Some(MeterKind::ChargeCounter) => charge_uah
                .zip(v_mv)
                .map(|(uah, mv)| MeterReading::ChargeCounter { uah, mv }),
            Some(MeterKind::IntegratedVi) => battery_mw.map(|mw| MeterReading::Power { t_s, mw }),
            _ => None,
        };
        let mut meter_power_mw = None;
        if let Some(r) = reading {
            let total = self.acc.push(r);
            values[self.col_energy] = Some(total);
            if let Some((lt, le)) = self.last_meter
                && t_ns > lt
            {
                // mJ / s = mW.
                meter_power_mw = Some((total - le) / (t_ns - lt) as f64 * 1e9);
            }
            self.last_meter = Some((t_ns, total));
        }
        values[self.col_power] = match self.meter {
            Some(MeterKind::Odpm) => odpm_power_ok.then_some(odpm_power_mw),
            Some(MeterKind::Powercap) => meter_power_mw,
            _ => battery_mw,
        };

        // Event bookkeeping: report transitions only, so a dead sensor does not flood.
        for (col, outcome) in outcomes {
            let name = self
                .columns
                .get(col)
                .cloned()
                .unwrap_or_else(|| "powercap".to_string());
            match outcome {
                Ok(()) => {
                    if self.failing.remove(&col).is_some() {
                        self.events.push(SensorEvent {
                            t_s,
                            column: name,
                            kind: EventKind::Recovered,
                            detail: String::new(),
                        });
                    }
                }
                Err((kind, detail)) => {
                    if self.failing.insert(col, ()).is_none() {
                        self.events.push(SensorEvent {
                            t_s,
                            column: name,
                            kind,
                            detail,
                        });
                    }
                }
            }
        }
        self.missing_cells += values.iter().filter(|v| v.is_none()).count() as u64;
        let row = Row { t_ns, values };
        self.write_csv_row(t_s, &row);
        self.rows.push(row);
        self.cost.samples += 1;
        self.cost.cpu_s += thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
        // Invariant: a row was pushed just above.
        &self.rows[self.rows.len() - 1]
    }

    fn write_csv_row(&mut self, t_s: f64, row: &Row) {
        let Some((path, w)) = &mut self.csv else {
            return;
        };
        let mut write = || -> csv::Result<()> {
            if !self.header_written {
                self.header_written = true;
                // Where `t_s = 0` lies on the caller's clock, so that readers can place the
                // intervals of result.json and telemetry.json (caller-clock ns) on the rows.
                if let Some(t0) = self.start_ns {
                    self.metadata.push((T0_NS_KEY.to_string(), t0.to_string()));
                }
                start_rows(w, &self.metadata, &self.columns)?;
            }
            let CsvOut::Rows(w) = w else {
                return Ok(()); // the header failed; that error is already kept
            };
            w.write_field(format!("{t_s:.4}"))?;
            for v in &row.values {
                w.write_field(v.map(fmt_value).unwrap_or_default())?;
            }
            w.write_record(None::<&[u8]>)
        };
        if let Err(e) = write()
            && self.csv_error.is_none()
        {
            self.csv_error = Some(TelemetryError::Write {
                path: path.clone(),
                source: e.into(),
            });
        }
    }

    /// Flushes the CSV and returns everything recorded (`wall_s`: how long the sampling
    /// thread ran, 0 when driven by hand).
    pub fn finish(self, wall_s: f64) -> Result<SamplerOutput, TelemetryError> {
        let cpu = self.cost.cpu_s;
        self.finish_with_thread_cpu(wall_s, cpu)
    }

    fn finish_with_thread_cpu(
        mut self,
        wall_s: f64,
        thread_cpu_s: f64,
    ) -> Result<SamplerOutput, TelemetryError> {
        if let Some((path, w)) = &mut self.csv {
            // No sample taken: still leave a valid file with header.
            let header = if self.header_written {
                Ok(())
            } else {
                start_rows(w, &self.metadata, &self.columns)
            };
            let flushed = header.and_then(|()| match w {
                CsvOut::Rows(w) => w.flush().map_err(csv::Error::from),
                _ => Ok(()),
            });
            if let Err(e) = flushed {
                return Err(TelemetryError::Write {
                    path: path.clone(),
                    source: e.into(),
                });
            }
        }
        if let Some(e) = self.csv_error {
            return Err(e);
        }
        let mut cost = self.cost;
        cost.wall_s = wall_s;
        cost.thread_cpu_s = thread_cpu_s.max(cost.cpu_s);
        cost.cpu_pct_of_core = if wall_s > 0.0 {
            cost.thread_cpu_s / wall_s * 100.0
        } else {
            0.0
        };
        cost.mean_sample_cpu_us = if cost.samples > 0 {
            cost.cpu_s / cost.samples as f64 * 1e6
        } else {
            0.0
        };
        let col = |name: &str| self.columns.iter().position(|c| c == name);
        Ok(SamplerOutput {
            col_soc: col("temp.soc.c"),
            col_skin: col("temp.skin.c"),
            col_energy: self.col_energy,
            col_power: self.col_power,
            columns: self.columns,
            rows: self.rows,
            events: self.events,
            missing_cells: self.missing_cells,
            cost,
            csv_path: self.csv.map(|(p, _)| p),
        })
    }
}

/// Everything a finished sampler recorded.
#[derive(Debug, Clone, Serialize)]
pub struct SamplerOutput {
    /// Column names after `t_s`.
    pub columns: Vec<String>,
    /// Rows.
    pub rows: Vec<Row>,
    /// Sensor events.
    pub events: Vec<SensorEvent>,
    /// Empty cells over the run.
    pub missing_cells: u64,
    /// Sampler cost.
    pub cost: SamplerCost,
    /// The CSV written, if any.
    pub csv_path: Option<PathBuf>,
    /// Index of `temp.soc.c`.
    pub col_soc: Option<usize>,
    /// Index of `temp.skin.c`.
    pub col_skin: Option<usize>,
    /// Index of `energy.total.mj`.
    pub col_energy: usize,
    /// Index of `power.total.mw`.
    pub col_power: usize,
}

impl SamplerOutput {
    /// Index of a column by name.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// (t_ns, value) points of one column, missing cells left out.
    pub fn series(&self, col: usize) -> Vec<(u64, f64)> {
        self.rows
            .iter()
            .filter_map(|r| r.values.get(col).copied().flatten().map(|v| (r.t_ns, v)))
            .collect()
    }
}

/// `telemetry.csv`: the bare file until its header is written, then the CSV writer over it.
enum CsvOut {
    Before(File),
    Rows(Box<csv::Writer<File>>),
    /// Writing the header failed (the error is kept by the sampler).
    Failed,
}

/// Metadata key of the first sample's instant on the caller's clock, ns: row `t_s` was taken
/// at `t0_ns + t_s·10⁹` on that clock.
pub const T0_NS_KEY: &str = "t0_ns";

/// Writes the `# key=value` comment lines (line breaks in values become spaces) straight to
/// the file, then hands it to a `csv::Writer` that writes the header record `t_s,<columns>`
/// and, later, the rows. Does nothing once the rows have started.
fn start_rows(
    out: &mut CsvOut,
    metadata: &[(String, String)],
    columns: &[String],
) -> csv::Result<()> {
    let mut f = match std::mem::replace(out, CsvOut::Failed) {
        CsvOut::Before(f) => f,
        other => {
            *out = other;
            return Ok(());
        }
    };
    let mut head = String::new();
    for (k, v) in metadata {
        let v = v.replace(['\n', '\r'], " ");
        head.push_str(&format!("# {k}={v}\n"));
    }
    f.write_all(head.as_bytes())?;
    let mut w = csv::Writer::from_writer(f);
    w.write_record(std::iter::once("t_s").chain(columns.iter().map(String::as_str)))?;
    *out = CsvOut::Rows(Box::new(w));
    Ok(())
}

fn fmt_value(v: f64) -> String {
    let r = (v * 1000.0).round() / 1000.0;
    if r == 0.0 { "0".into() } else { format!("{r}") }
}

fn classify(e: &TelemetryError) -> (EventKind, String) {
    match e {
        TelemetryError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            (EventKind::Vanished, e.to_string())
        }
        TelemetryError::Read { .. } => (EventKind::Unreadable, e.to_string()),
        _ => (EventKind::Garbage, e.to_string()),
    }
}

type ReadOutcome = Result<Option<f64>, (EventKind, String)>;

/// How one channel's read went in a sample: `Err` carries the event kind and its detail.
type ChannelOutcome = Result<(), (EventKind, String)>;

fn read_source(source: &mut Source) -> ReadOutcome {
    match source {
        Source::Zone { path, unit } => {
            let raw = read_i64(path).map_err(|e| classify(&e))?;
            let c = unit.to_celsius(raw);
            if (TEMP_RANGE_C.0..=TEMP_RANGE_C.1).contains(&c) {
                Ok(Some(c))
            } else {
                Err((
                    EventKind::Garbage,
                    format!("{}: implausible {c} °C", path.display()),
                ))
            }
        }
        Source::CpuFreq(path) | Source::CpuMax(path) => read_i64(path)
            .map(|v| Some(v as f64))
            .map_err(|e| classify(&e)),
        // ABI: 0 offline, 1 online (fixed), 2 online (programmable); recorded as 0/1.
        Source::Online(path) => match read_i64(path) {
            Ok(0) => Ok(Some(0.0)),
            Ok(1 | 2) => Ok(Some(1.0)),
            Ok(v) => Err((
                EventKind::Garbage,
                format!("{}: `{v}` is not 0, 1 or 2", path.display()),
            )),
            Err(e) => Err(classify(&e)),
        },
        Source::GpuFreq(kind, dir) => {
            // Adreno: `gpuclk` in Hz, else devfreq's `cur_freq` in Hz; Mali: `cur_freq` in kHz.
            let v = match kind {
                GpuKind::Adreno => read_i64(&dir.join("gpuclk"))
                    .or_else(|_| read_i64(&dir.join("devfreq/cur_freq")))
                    .map(|hz| hz as f64 / 1000.0),
                GpuKind::Mali => read_i64(&dir.join("cur_freq")).map(|khz| khz as f64),
            };
            v.map(Some).map_err(|e| classify(&e))
        }
        Source::GpuBusy(kind, dir) => {
            let file = match kind {
                GpuKind::Adreno => dir.join("gpu_busy_percentage"),
                GpuKind::Mali => dir.join("utilization"),
            };
            let text = read_trimmed(&file).map_err(|e| classify(&e))?;
            parse_percent(&text).map(Some).ok_or((
                EventKind::Garbage,
                format!("{}: `{}` is not a percentage", file.display(), clip(&text)),
            ))
        }
        Source::Rss => Ok(read_rss_kib()),
        Source::Gauge(g) => Ok(g().filter(|v| v.is_finite())),
    }
}

/// Resident set size of this process, KiB (`VmRSS` of `/proc/self/status`).
pub fn read_rss_kib() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse::<f64>().ok()
}

/// CPU time consumed by the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is supported by every Linux/Android kernel we run on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// A sampler running on its own thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(SamplerCore, f64, f64)>,
}

impl Sampler {
    /// Starts sampling at `core.period()`. Returns once the first sample is taken, so any
    /// interval that starts after `spawn` returns lies inside the recording.
    pub fn spawn(core: SamplerCore) -> Result<Self, TelemetryError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (first_tx, first_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let handle = std::thread::Builder::new()
            .name("pocketperf-telemetry".into())
            .spawn(move || run_loop(core, &flag, first_tx))
            .map_err(|source| TelemetryError::Thread { source })?;
        // An error means the thread ended before its first sample: `stop` reports why.
        let _ = first_rx.recv();
        Ok(Self { stop, handle })
    }

    /// Stops the thread and returns the recording. The thread takes one last sample after
    /// the stop request, so any interval that ended before `stop` was called lies inside the
    /// recording.
    pub fn stop(self) -> Result<SamplerOutput, TelemetryError> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.thread().unpark();
        let (core, wall_s, thread_cpu_s) = self
            .handle
            .join()
            .map_err(|_| TelemetryError::ThreadPanicked)?;
        core.finish_with_thread_cpu(wall_s, thread_cpu_s)
    }
}

fn run_loop(
    mut core: SamplerCore,
    stop: &AtomicBool,
    first: std::sync::mpsc::SyncSender<()>,
) -> (SamplerCore, f64, f64) {
    let period = core.period().max(Duration::from_millis(1));
    let started = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut next = started;
    let mut first = Some(first);
    while !stop.load(Ordering::SeqCst) {
        core.sample();
        if let Some(tx) = first.take() {
            // The receiver waits in `spawn`; if it is gone nobody needs the signal.
            let _ = tx.send(());
        }
        next += period;
        let now = Instant::now();
        if next < now {
            // Fell behind (suspend, overload): skip missed ticks rather than bursting.
            next = now + period;
        }
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::park_timeout(next - now);
        }
    }
    // The closing sample: the recording covers everything up to the stop request.
    core.sample();
    drop(first);
    let thread_cpu_s = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    (core, started.elapsed().as_secs_f64(), thread_cpu_s)
}

/// Reads a telemetry CSV back: (metadata, columns after `t_s`, rows of (t_s, cells)).
pub fn read_csv(path: &Path) -> Result<CsvTable, TelemetryError> {
    let text = std::fs::read_to_string(path).map_err(|source| TelemetryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut metadata = Vec::new();
    let mut lines = text.lines();
    let header = loop {
        let Some(line) = lines.next() else {
            return Err(TelemetryError::Parse {
                path: path.to_path_buf(),
                value: String::new(),
                expected: "a header line starting with t_s",
            });
        };
        if let Some(meta) = line.strip_prefix('#') {
            if let Some((k, v)) = meta.trim().split_once('=') {
                metadata.push((k.to_string(), v.to_string()));
            }
            continue;
        }
        break line;
    };
    let mut cols = header.split(',');
    if cols.next() != Some("t_s") {
        return Err(TelemetryError::Parse {
            path: path.to_path_buf(),
            value: super::sysfs::clip(header),
            expected: "a header line starting with t_s",
        });
    }
    let columns: Vec<String> = cols.map(str::to_string).collect();
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let mut cells = line.split(',');
        let t = cells
            .next()
            .and_then(|t| t.parse::<f64>().ok())
            .ok_or_else(|| TelemetryError::Parse {
                path: path.to_path_buf(),
                value: super::sysfs::clip(line),
                expected: "a row starting with t_s",
            })?;
        let vals: Vec<Option<f64>> = cells.map(|c| c.parse::<f64>().ok()).collect();
        if vals.len() != columns.len() {
            return Err(TelemetryError::Parse {
                path: path.to_path_buf(),
                value: super::sysfs::clip(line),
                expected: "as many cells as header columns",
            });
        }
        rows.push((t, vals));
    }
    Ok(CsvTable {
        metadata,
        columns,
        rows,
    })
}

/// A parsed telemetry CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvTable {
    /// `#` metadata pairs in file order.
    pub metadata: Vec<(String, String)>,
    /// Columns after `t_s`.
    pub columns: Vec<String>,
    /// (t_s, cells).
    pub rows: Vec<(f64, Vec<Option<f64>>)>,
}
