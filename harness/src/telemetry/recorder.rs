//! Telemetry for a benchmark run on a device: resolves `--device` (`local` → `/sys`,
//! `sim:<profile>` → a simulated handset whose model a driver thread steps in real time from
//! the runtime's measured CPU use), starts the sampler on the scenario engine's clock with
//! `telemetry.csv` in the result directory, measures the idle baseline, and at the end turns
//! the recording into the `thermal` and `energy` figures of `result.json` plus
//! `telemetry.json` (probe, sampler cost, sensor events, per-query attribution and, on a
//! simulated handset, the model's ground truth beside the measured figures).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use pocketperf_reports::schema::{DialogueEnergy, Energy, MeanCi, Thermal};
use serde::Serialize;

use super::attribution::{DialogueSpan, DialogueSummary, IntervalEnergy, MWH_PER_J, MeanInterval};
use super::probe::MeterKind;
use super::sampler::{MonotonicClock, SamplerConfig};
use super::{LOCAL_SYSFS_ROOT, SessionConfig, TelemetryError, TelemetryReport, TelemetrySession};
use crate::sim::model::HandsetProfile;
use crate::sim::pace::SimPace;
use crate::sim::{ActivitySource, DriverClock, SimDevice, SimDriver, TruthPoint, truth_energy_at};

/// File name of the telemetry side file in a result directory.
pub const TELEMETRY_JSON: &str = "telemetry.json";
/// Schema version of `telemetry.json`.
pub const TELEMETRY_JSON_VERSION: u32 = 1;
/// Period at which a simulated handset's model is stepped in real time.
pub const SIM_STEP_PERIOD: Duration = Duration::from_millis(10);

/// Which device a run measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// This machine: sysfs at `/sys`.
    Local,
    /// A simulated handset profile.
    Sim {
        /// Profile name (`snapdragon-8gen3`, `pixel-8-pro`).
        profile: String,
        /// Thermal time constants divided by this (1: the profile as built;
        /// [`HandsetProfile::with_thermal_speedup`]).
        thermal_speedup: u32,
    },
}

/// Largest `thermal-speedup` a simulated device accepts.
pub const MAX_THERMAL_SPEEDUP: u32 = 1000;

impl DeviceSpec {
    /// Parses `local`, `sim:<profile>` or `sim:<profile>,thermal-speedup=<K>`, checking the
    /// profile exists and K is a whole number in 1..=1000.
    pub fn parse(device: &str) -> Result<Self, TelemetryError> {
        if device == "local" {
            return Ok(Self::Local);
        }
        if let Some(rest) = device.strip_prefix("sim:") {
            let (p, option) = match rest.split_once(',') {
                Some((p, o)) => (p, Some(o)),
                None => (rest, None),
            };
            if crate::sim::model::profile(p).is_none() {
                return Err(crate::sim::SimError::UnknownProfile {
                    name: p.to_string(),
                    known: crate::sim::model::profile_names().join(", "),
                }
                .into());
            }
            let thermal_speedup = match option {
                None => 1,
                Some(o) => o
                    .strip_prefix("thermal-speedup=")
                    .and_then(|k| k.parse::<u32>().ok())
                    .filter(|k| (1..=MAX_THERMAL_SPEEDUP).contains(k))
                    .ok_or_else(|| TelemetryError::Config {
                        field: "device",
                        value: device.to_string(),
                        reason: "the only option of a simulated device is \
                                 `thermal-speedup=K`, K a whole number in 1..=1000",
                    })?,
            };
            return Ok(Self::Sim {
                profile: p.to_string(),
                thermal_speedup,
            });
        }
        Err(TelemetryError::Config {
            field: "device",
            value: device.to_string(),
            reason: "expected `local` or `sim:<profile>[,thermal-speedup=K]` \
                     (sim:snapdragon-8gen3, sim:pixel-8-pro)",
        })
    }

    /// The id written into result files (the speed-up included, when not 1: a run on a
    /// lighter handset is not the same workload).
    pub fn id(&self) -> String {
        match self {
            Self::Local => "local".into(),
            Self::Sim {
                profile,
                thermal_speedup: 1,
            } => format!("sim:{profile}"),
            Self::Sim {
                profile,
                thermal_speedup,
            } => format!("sim:{profile},thermal-speedup={thermal_speedup}"),
        }
    }

    /// The simulated handset's parameters (speed-up applied); None for `local`.
    pub fn handset(&self) -> Option<HandsetProfile> {
        match self {
            Self::Local => None,
            Self::Sim {
                profile,
                thermal_speedup,
            } => crate::sim::model::profile(profile)
                .map(|p| p.with_thermal_speedup(f64::from(*thermal_speedup))),
        }
    }
}

/// A telemetry recording running beside a benchmark.
pub struct RunTelemetry {
    device: DeviceSpec,
    session: TelemetrySession,
    sim: Option<SimDriver>,
    freq_level: Option<Arc<AtomicUsize>>,
    pace: Option<Arc<SimPace>>,
    clock: MonotonicClock,
    out_dir: PathBuf,
    provenance: Vec<(String, String)>,
}

/// Ground truth of a simulated handset over a run.
#[derive(Debug, Clone, Serialize)]
pub struct SimTruth {
    /// Profile name.
    pub profile: String,
    /// Model energy over the recording, J.
    pub energy_j: f64,
    /// Model steps recorded.
    pub points: usize,
    #[serde(skip)]
    trace: Vec<TruthPoint>,
}

impl SimTruth {
    /// Exact model energy between two instants of the run clock, J.
    pub fn energy_between_j(&self, t0: u64, t1: u64) -> Option<f64> {
        Some(truth_energy_at(&self.trace, t1)? - truth_energy_at(&self.trace, t0)?)
    }

    /// From a recorded trace (virtual-time rigs build one too).
    pub fn from_trace(profile: &str, trace: Vec<TruthPoint>) -> Self {
        let energy_j = match (trace.first(), trace.last()) {
            (Some(a), Some(b)) => b.energy_j - a.energy_j,
            _ => 0.0,
        };
        Self {
            profile: profile.to_string(),
            energy_j,
            points: trace.len(),
            trace,
        }
    }
}

/// A finished recording.
pub struct RunRecording {
    /// Device measured.
    pub device: DeviceSpec,
    /// The report.
    pub report: TelemetryReport,
    /// On a simulated handset, the model's ground truth.
    pub truth: Option<SimTruth>,
    out_dir: PathBuf,
    provenance: Vec<(String, String)>,
}

impl RunTelemetry {
    /// Starts recording for `device` into `out_dir/telemetry.csv` on `clock`. `threads` is
    /// the runtime's worker count (a simulated handset reads the process's CPU time over that
    /// many cores as its busy fraction); `provenance` goes into the CSV's `#` header.
    pub fn start(
        device: &str,
        out_dir: &Path,
        clock: MonotonicClock,
        threads: usize,
        provenance: Vec<(String, String)>,
        gauges: Vec<(String, super::Gauge)>,
    ) -> Result<Self, TelemetryError> {
        let spec = DeviceSpec::parse(device)?;
        std::fs::create_dir_all(out_dir).map_err(|source| TelemetryError::Write {
            path: out_dir.to_path_buf(),
            source,
        })?;
        let (root, sim, pace) = match &spec {
            DeviceSpec::Local => (PathBuf::from(LOCAL_SYSFS_ROOT), None, None),
            DeviceSpec::Sim { profile, .. } => {
                let prof = spec
                    .handset()
                    .ok_or_else(|| crate::sim::SimError::UnknownProfile {
                        name: profile.clone(),
                        known: crate::sim::model::profile_names().join(", "),
                    })?;
                let pace = SimPace::new(&prof);
                let dev = SimDevice::with_profile(prof)?;
                let root = dev.root().to_path_buf();
                let c = clock.clone();
                let driver_clock: DriverClock = Arc::new(move || c());
                let driver = SimDriver::spawn_clocked(
                    dev,
                    ActivitySource::ProcessCpu {
                        threads: threads.max(1),
                        freq_level: Some(pace.requested()),
                        paced: Some(pace.clone()),
                    },
                    SIM_STEP_PERIOD,
                    Some(driver_clock),
                )?;
                (root, Some(driver), Some(pace))
            }
        };
        let freq_level = pace.as_ref().map(|p| p.requested());
        let mut config = SessionConfig::new(root);
        config.sampler = SamplerConfig {
            metadata: provenance.clone(),
            csv_path: Some(out_dir.join(pocketperf_reports::schema::TELEMETRY_FILE)),
            ..SamplerConfig::default()
        };
        let session = TelemetrySession::start(config, clock.clone(), gauges)?;
        // What the device cannot measure is said now, not only in the result's warnings.
        for w in &session.probe().warnings {
            eprintln!("telemetry: warning: {w}");
        }
        Ok(Self {
            device: spec,
            session,
            sim,
            freq_level,
            pace,
            clock,
            out_dir: out_dir.to_path_buf(),
            provenance,
        })
    }

    /// The device.
    pub fn device(&self) -> &DeviceSpec {
        &self.device
    }

    /// The sysfs root of the simulated handset (None on a real device): what a governor in
    /// the decode loop reads when the device is simulated.
    pub fn sim_root(&self) -> Option<&Path> {
        self.sim.as_ref().map(SimDriver::root)
    }

    /// The run clock.
    pub fn clock(&self) -> &MonotonicClock {
        &self.clock
    }

    /// The probe at start.
    pub fn probe(&self) -> &super::Probe {
        self.session.probe()
    }

    /// On a simulated handset, the OPP level the workload requests (a governor may lower it;
    /// the vendor cap applies on top). None on a real device.
    pub fn freq_level(&self) -> Option<Arc<AtomicUsize>> {
        self.freq_level.clone()
    }

    /// On a simulated handset, the OPP link a decode loop paces itself by
    /// ([`crate::sim::pace::Pacer`]) and asks its frequency caps through.
    pub fn sim_pace(&self) -> Option<Arc<SimPace>> {
        self.pace.clone()
    }

    /// Whether an energy meter exists (an idle baseline is worth measuring).
    pub fn has_meter(&self) -> bool {
        self.session.probe().meter.is_some()
    }

    /// Sleeps `window` with the workload idle; the window becomes the idle baseline.
    pub fn measure_idle(&mut self, window: Duration) -> (u64, u64) {
        self.session.measure_idle(window)
    }

    /// Stops sampling (and the simulated handset) and returns the recording.
    pub fn stop(self) -> Result<RunRecording, TelemetryError> {
        let report = self.session.stop()?;
        let truth = match (self.sim, &self.device) {
            (Some(driver), DeviceSpec::Sim { profile, .. }) => {
                let (_dev, trace) = driver.stop_with_trace()?;
                Some(SimTruth::from_trace(profile, trace))
            }
            _ => None,
        };
        Ok(RunRecording {
            device: self.device,
            report,
            truth,
            out_dir: self.out_dir,
            provenance: self.provenance,
        })
    }
}

/// One attributed interval with its label, for `telemetry.json`.
#[derive(Debug, Clone, Serialize)]
pub struct LabeledInterval {
    /// Query id, turn label or dialogue id.
    pub label: String,
    /// Tokens generated in it.
    pub tokens: u64,
    /// Attribution (None when outside the metered range).
    pub energy: Option<IntervalEnergy>,
    /// On a simulated handset: the model's exact energy over the interval, J.
    pub truth_j: Option<f64>,
}

/// Measured vs ground truth per dialogue on a simulated handset.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TruthCheck {
    /// Mean measured gross mWh per dialogue.
    pub measured_gross_mwh: f64,
    /// Mean ground-truth gross mWh per dialogue.
    pub truth_gross_mwh: f64,
    /// Largest relative error of one dialogue's gross energy.
    pub max_rel_error_gross: f64,
    /// Relative error of the mean gross figure.
    pub rel_error_mean_gross: f64,
}

impl RunRecording {
    /// Attributes `(label, start_ns, end_ns, tokens)` intervals (queries, turns, dialogues).
    pub fn attribute(&self, intervals: &[(String, u64, u64, u64)]) -> Vec<LabeledInterval> {
        let spans: Vec<(u64, u64)> = intervals.iter().map(|i| (i.1, i.2)).collect();
        self.report
            .attribute(&spans)
            .into_iter()
            .zip(intervals)
            .map(|(energy, (label, t0, t1, tokens))| LabeledInterval {
                label: label.clone(),
                tokens: *tokens,
                energy,
                truth_j: self
                    .truth
                    .as_ref()
                    .and_then(|t| t.energy_between_j(*t0, *t1)),
            })
            .collect()
    }

    /// The `thermal` section of `result.json` (None without SoC or skin zones).
    pub fn thermal(&self) -> Option<Thermal> {
        thermal_section(&self.report)
    }

    /// Measured vs model energy per dialogue (simulated handsets only).
    pub fn truth_check(&self, dialogues: &[DialogueSpan]) -> Option<TruthCheck> {
        let truth = self.truth.as_ref()?;
        let spans: Vec<(u64, u64)> = dialogues.iter().map(|d| (d.start_ns, d.end_ns)).collect();
        let measured = self.report.attribute(&spans);
        truth_check(&measured, &spans, |a, b| truth.energy_between_j(a, b))
    }

    /// Writes `telemetry.json`: provenance, probe, summary (sampler cost included), sensor
    /// events, the attributed intervals given, dialogue summary and ground truth.
    pub fn write_json(
        &self,
        intervals: &[LabeledInterval],
        dialogues: Option<&DialogueSummary>,
        truth_check: Option<&TruthCheck>,
    ) -> Result<PathBuf, TelemetryError> {
        let path = self.out_dir.join(TELEMETRY_JSON);
        let header: serde_json::Map<String, serde_json::Value> = self
            .provenance
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let doc = serde_json::json!({
            "schema": format!("pocketperf-telemetry-json/{TELEMETRY_JSON_VERSION}"),
            "schema_version": TELEMETRY_JSON_VERSION,
            "tool_version": crate::meta::TOOL_VERSION,
            "git_commit": crate::meta::GIT_COMMIT,
            "device": self.device.id(),
            "written_utc": crate::meta::now_utc(),
            "provenance": header,
            "summary": &self.report.summary,
            "idle_window_ns": self.report.idle_window,
            "probe": &self.report.probe,
            "events": &self.report.output.events,
            "columns": &self.report.output.columns,
            "intervals": intervals,
            "dialogues": dialogues,
            "sim_truth": &self.truth,
            "truth_check": truth_check,
        });
        let text = serde_json::to_string_pretty(&doc)?;
        pocketperf_reports::files::replace_file(&path, (text + "\n").as_bytes())
            .map_err(|(path, source)| TelemetryError::Write { path, source })?;
        Ok(path)
    }
}

/// Measured vs truth over `spans` (measured: the harness's attribution of the same spans).
pub fn truth_check(
    measured: &[Option<IntervalEnergy>],
    spans: &[(u64, u64)],
    truth: impl Fn(u64, u64) -> Option<f64>,
) -> Option<TruthCheck> {
    let mut m = Vec::new();
    let mut t = Vec::new();
    for (a, &(t0, t1)) in measured.iter().zip(spans) {
        if let (Some(a), Some(tj)) = (a, truth(t0, t1)) {
            m.push(a.gross_j);
            t.push(tj);
        }
    }
    if m.is_empty() {
        return None;
    }
    let max_rel = m
        .iter()
        .zip(&t)
        .map(|(m, t)| if *t > 0.0 { (m - t).abs() / t } else { 0.0 })
        .fold(0.0, f64::max);
    let mm = m.iter().sum::<f64>() / m.len() as f64;
    let tm = t.iter().sum::<f64>() / t.len() as f64;
    Some(TruthCheck {
        measured_gross_mwh: mm * MWH_PER_J,
        truth_gross_mwh: tm * MWH_PER_J,
        max_rel_error_gross: max_rel,
        rel_error_mean_gross: if tm > 0.0 { (mm - tm).abs() / tm } else { 0.0 },
    })
}

/// The `thermal` section from a report: needs both a SoC and a skin zone (the schema has no
/// way to say "not measured" for either), else None and the figures stay in
/// `telemetry.json`.
pub fn thermal_section(r: &TelemetryReport) -> Option<Thermal> {
    let s = &r.summary;
    Some(Thermal {
        max_soc_c: s.soc_peak_c?,
        max_skin_c: s.skin_peak_c?,
        mean_skin_c: s.skin_mean_c?,
        throttled_s: s.throttled_s.unwrap_or(0.0),
    })
}

/// Name of a meter in `result.json`.
pub fn meter_name(kind: MeterKind) -> &'static str {
    match kind {
        MeterKind::Odpm => "odpm",
        MeterKind::Powercap => "rapl",
        MeterKind::BatteryEnergyCounter => "battery-energy-counter",
        MeterKind::ChargeCounter => "battery-charge-counter",
        MeterKind::IntegratedVi => "battery-vi",
    }
}

fn mean_ci(m: &MeanInterval) -> MeanCi {
    let (lo, hi) = m.ci95.unwrap_or((m.mean, m.mean));
    MeanCi {
        mean: m.mean,
        lo,
        hi,
        n: m.n as u64,
    }
}

/// The `energy` section of `result.json` from a dialogue summary of `spans` (None without a
/// meter or without any dialogue inside the metered range). Dialogue ids are positions in
/// `spans`. Without an idle baseline the net figures equal the gross ones (idle 0 mW). A
/// temperature the device does not expose is written as 0 °C (the schema has no "not
/// measured"); [`energy_warnings`] says so.
pub fn energy_section(
    r: &TelemetryReport,
    d: &DialogueSummary,
    spans: &[DialogueSpan],
) -> Option<Energy> {
    let meter = r.probe.meter.as_ref()?;
    let gross = d.gross_mwh.as_ref()?;
    let net = d.net_mwh.as_ref().unwrap_or(gross);
    let per_dialogue = d
        .per_dialogue
        .iter()
        .zip(spans)
        .enumerate()
        .filter_map(|(i, (a, span))| {
            let a = a.as_ref()?;
            Some(DialogueEnergy {
                id: i as u64,
                tokens: span.tokens,
                duration_s: a.duration_s,
                gross_mwh: a.gross_mwh,
                net_mwh: a.net_mwh.unwrap_or(a.gross_mwh),
                mean_skin_c: a.skin_mean_c.unwrap_or(0.0),
                peak_soc_c: a.soc_peak_c.unwrap_or(0.0),
            })
        })
        .collect();
    Some(Energy {
        meter: meter_name(meter.kind).into(),
        reliable: r.summary.energy_reliable,
        idle_power_mw: r.idle_power_w().unwrap_or(0.0) * 1000.0,
        dialogues: d.n as u64,
        mwh_per_dialogue_gross: mean_ci(gross),
        mwh_per_dialogue_net: mean_ci(net),
        j_per_token: d
            .j_per_token_net
            .or(d.j_per_token_gross)
            .unwrap_or(f64::NAN),
        tokens_per_j: d
            .tokens_per_j_net
            .or(d.tokens_per_j_gross)
            .unwrap_or(f64::NAN),
        per_dialogue,
        basis: "dialogues".into(),
        per_query: Vec::new(),
    })
}

/// The `energy` section of a scenario run (SingleStream, Offline, Server) from its queries'
/// `(label, issue_ns, complete_ns, tokens)` intervals: joules per token over the span from the
/// first issue to the last completion, and the 200-token dialogue equivalent. When no two
/// queries overlap (SingleStream, a slow Server), each query is attributed on its own
/// (`per_query`, and the equivalent's mean and interval over queries); when they overlap
/// (Offline's batch) only the whole span is, since the meter cannot split shared time. None
/// without a meter, without generated tokens, or when the span lies outside the metered range.
pub fn scenario_energy(
    recording: &RunRecording,
    queries: &[(String, u64, u64, u64)],
    labeled: &[LabeledInterval],
) -> Option<Energy> {
    use pocketperf_reports::schema::{DIALOGUE_EQUIVALENT_TOKENS, QueryEnergy};
    let r = &recording.report;
    let meter = r.probe.meter.as_ref()?;
    let first = queries.iter().map(|q| q.1).min()?;
    let last = queries.iter().map(|q| q.2).max()?;
    let tokens: u64 = queries.iter().map(|q| q.3).sum();
    if tokens == 0 {
        return None;
    }
    let span = recording
        .report
        .attribute(&[(first, last)])
        .pop()
        .flatten()?;
    let net_j = span.net_j.unwrap_or(span.gross_j);
    let per_token_mwh = |mwh: f64, tokens: u64| mwh / tokens as f64 * DIALOGUE_EQUIVALENT_TOKENS;
    let mut order: Vec<(u64, u64)> = queries.iter().map(|q| (q.1, q.2)).collect();
    order.sort();
    let overlap = order.windows(2).any(|w| w[1].0 < w[0].1);
    let per_query: Vec<QueryEnergy> = if overlap {
        Vec::new()
    } else {
        labeled
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let e = l.energy.as_ref()?;
                (l.tokens > 0).then(|| QueryEnergy {
                    id: l
                        .label
                        .trim_start_matches("query")
                        .parse()
                        .unwrap_or(i as u64),
                    tokens: l.tokens,
                    duration_s: e.duration_s,
                    gross_mwh: e.gross_mwh,
                    net_mwh: e.net_mwh.unwrap_or(e.gross_mwh),
                })
            })
            .collect()
    };
    let equivalent = |f: fn(&QueryEnergy) -> f64, whole: f64| -> MeanCi {
        let xs: Vec<f64> = per_query
            .iter()
            .map(|q| per_token_mwh(f(q), q.tokens))
            .collect();
        match MeanInterval::of(&xs) {
            Some(m) => mean_ci(&m),
            None => MeanCi {
                mean: per_token_mwh(whole, tokens),
                lo: per_token_mwh(whole, tokens),
                hi: per_token_mwh(whole, tokens),
                n: 1,
            },
        }
    };
    Some(Energy {
        meter: meter_name(meter.kind).into(),
        reliable: r.summary.energy_reliable,
        idle_power_mw: r.idle_power_w().unwrap_or(0.0) * 1000.0,
        dialogues: 0,
        mwh_per_dialogue_gross: equivalent(|q| q.gross_mwh, span.gross_mwh),
        mwh_per_dialogue_net: equivalent(|q| q.net_mwh, span.net_mwh.unwrap_or(span.gross_mwh)),
        j_per_token: net_j / tokens as f64,
        tokens_per_j: if net_j > 0.0 {
            tokens as f64 / net_j
        } else {
            f64::NAN
        },
        per_dialogue: Vec::new(),
        basis: "queries".into(),
        per_query,
    })
}

/// Warnings that go with [`energy_section`]'s figures.
pub fn energy_warnings(r: &TelemetryReport, d: &DialogueSummary) -> Vec<String> {
    let mut w = Vec::new();
    if r.probe.meter.is_none() {
        w.push("no energy meter on this device: no energy figures".into());
        return w;
    }
    if d.net_mwh.is_none() {
        w.push("no idle baseline: net energy figures equal the gross ones".into());
    }
    if r.output.col_skin.is_none() {
        w.push("no skin thermal zone: per-dialogue mean skin temperature written as 0".into());
    }
    if r.output.col_soc.is_none() {
        w.push("no SoC thermal zone: per-dialogue peak SoC temperature written as 0".into());
    }
    if !r.summary.energy_reliable {
        w.push("energy figures are marked unreliable (charger online or meter untrusted)".into());
    }
    if d.skipped > 0 {
        w.push(format!(
            "{} dialogue(s) fell outside the metered range and have no energy",
            d.skipped
        ));
    }
    w
}

/// Idle baseline measured before a scenario run when the device has an energy meter.
pub const SCENARIO_IDLE_BASELINE: Duration = Duration::from_secs(2);

/// Telemetry around one scenario-engine run (SingleStream, Offline, Server): the small hook
/// `pocketperf run` calls. Starts before the run (with an idle baseline when a meter
/// exists), and after it attributes energy and temperatures to every query.
pub struct ScenarioTelemetry {
    inner: RunTelemetry,
}

/// What a scenario run gets back from telemetry.
pub struct ScenarioTelemetryEnd {
    /// The `thermal` section.
    pub thermal: Option<Thermal>,
    /// Warnings for `result.json`.
    pub warnings: Vec<String>,
    /// The `energy` section ([`scenario_energy`]; None without a meter).
    pub energy: Option<Energy>,
    /// The recording.
    pub recording: RunRecording,
}

impl ScenarioTelemetry {
    /// Starts telemetry for `device` on the scenario engine's clock; `model_path` and
    /// `settings` are written into the CSV header.
    pub fn start(
        device: &str,
        out_dir: &Path,
        clock: &pocketperf_scenarios::RealClock,
        threads: usize,
        model_path: &Path,
        settings: serde_json::Value,
        gauges: Vec<(String, super::Gauge)>,
    ) -> Result<Self, TelemetryError> {
        use pocketperf_scenarios::Clock;
        let c = *clock;
        let mono: MonotonicClock = Arc::new(move || c.now_ns());
        let provenance = vec![
            (
                "tool".to_string(),
                format!("{} {}", crate::meta::TOOL, crate::meta::TOOL_VERSION),
            ),
            ("git_commit".into(), crate::meta::GIT_COMMIT.into()),
            ("device".into(), device.to_string()),
            ("model_name".into(), crate::meta::model_name(model_path)),
            ("model_sha256".into(), crate::meta::model_sha256(model_path)),
            ("settings".into(), settings.to_string()),
            ("started_utc".into(), crate::meta::now_utc()),
        ];
        let mut inner = RunTelemetry::start(device, out_dir, mono, threads, provenance, gauges)?;
        if inner.has_meter() {
            inner.measure_idle(SCENARIO_IDLE_BASELINE);
        }
        Ok(Self { inner })
    }

    /// The simulated handset's sysfs root (None on a real device).
    pub fn sim_root(&self) -> Option<&Path> {
        self.inner.sim_root()
    }

    /// The simulated handset's OPP and CPU-time link, on a simulated handset.
    pub fn sim_pace(&self) -> Option<Arc<SimPace>> {
        self.inner.sim_pace()
    }

    /// Stops, attributes every completed query, writes `telemetry.json`.
    pub fn finish(
        self,
        result: &pocketperf_scenarios::TestResult,
    ) -> Result<ScenarioTelemetryEnd, TelemetryError> {
        let recording = self.inner.stop()?;
        let queries: Vec<(String, u64, u64, u64)> = result
            .query_records()
            .filter_map(|q| {
                Some((
                    format!("query{}", q.id),
                    q.issue_ns,
                    q.complete_ns?,
                    q.tokens,
                ))
            })
            .collect();
        let labeled = recording.attribute(&queries);
        recording.write_json(&labeled, None, None)?;
        let energy = scenario_energy(&recording, &queries, &labeled);
        let mut warnings = recording.report.summary.warnings.clone();
        if recording.report.probe.meter.is_some() && !recording.report.summary.energy_reliable {
            warnings.push("energy figures in telemetry.json are marked unreliable".into());
        }
        if recording.report.probe.meter.is_none() {
            warnings.push("no energy meter on this device: no energy figures".into());
        } else if energy.is_none() {
            warnings.push("no energy figures: no generated token inside the metered range".into());
        }
        Ok(ScenarioTelemetryEnd {
            thermal: recording.thermal(),
            energy,
            warnings,
            recording,
        })
    }
}
