//! The governor inside real decode loops: [`GovernorHook`], which the decode loop calls after
//! every token (configured by `--governor off|pid|step`, `--target-temp C`, sensor, actuator:
//! [`crate::cmd::governor::GovernorArgs`]). It ticks the runtime's [`Governor`] at its
//! period, applies the actuator (idles between decode steps for the duty cycle, changes the
//! kernels' thread count, writes sysfs frequency caps when explicitly allowed), and records
//! the governor state per token for `tokens.csv`, for telemetry gauges and for
//! `result.json`. Frequency caps are written back on exit, on error (drop) and on Ctrl-C /
//! SIGTERM ([`CapsSignalGuard`]). On a simulated handset a PID on the handset's power table
//! is calibrated to the busy share the decode really gets ([`GainSchedule`]: CPU time over
//! wall time of each token's work, as the handset's driver counts it).

mod args;
mod caps_signal;
mod setup;

pub use args::{DEFAULT_SYSFS_ROOT, check_args};
pub use caps_signal::CapsSignalGuard;

use args::{check_fixed, check_sensor_choice};
use setup::{describe, describe_fixed, level_table, sensor_zones};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use pocketperf_runtime::governor::{
    Actuator, ActuatorState, Chain, DutyCycle, DutyCycleHandle, GainSchedule, Governor,
    GovernorRecord, PidConfig, Policy, ScheduleConfig, StepStatus, StepWiseConfig, SysfsFreqCap,
    ThreadCount, TuningGoal, ZoneSensor,
};
use pocketperf_runtime::session::Engine;
use serde::Serialize;

use crate::cmd::governor::sim_profile;
use crate::cmd::governor::{ActuatorArg, GovernorArgs, GovernorKind};
use crate::sim::governor::status_name;
use crate::sim::pace::{SimFreqCap, SimPace};
use crate::telemetry::{DeviceSpec, Gauge};

/// The run's governor hook, shared between the decoder and the code that writes the outputs.
pub type SharedGovernor = std::rc::Rc<std::cell::RefCell<GovernorHook>>;

/// Duty levels of the real duty actuator (busy 1 → 0.2 in 0.05 steps).
const DUTY_LEVELS: usize = 17;
/// Duty levels appended after threads or caps (busy 1, 0.8, 0.6, 0.4, 0.2).
const CHAINED_DUTY_LEVELS: usize = 5;
const MIN_BUSY: f64 = 0.2;
/// Frequency-cap levels when no model is given.
const CAP_LEVELS: usize = 10;

/// Lets the hook change the kernels' thread count (the engine, or a test double).
pub trait ThreadControl {
    fn set_threads(&self, n: usize) -> usize;
}

impl ThreadControl for Engine {
    fn set_threads(&self, n: usize) -> usize {
        self.set_active_threads(n)
    }
}

/// Governor state at one token (a row of `tokens.csv`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenGov {
    pub query: u64,
    pub token: usize,
    /// Last valid reading, °C.
    pub temp_c: Option<f64>,
    pub level: usize,
    pub output: f64,
    pub status: StepStatus,
    pub busy: Option<f64>,
    pub threads: Option<usize>,
    pub caps: Vec<u64>,
    /// Idle inserted after this token, ms.
    pub pause_ms: f64,
    /// The busy share the PID's table is calibrated to, once calibrated.
    pub busy_share: Option<f64>,
}

/// Latest governor state for telemetry gauges (lock-free).
#[derive(Debug, Default)]
struct Shared {
    temp: AtomicU64,
    level: AtomicU64,
    output: AtomicU64,
    busy: AtomicU64,
    threads: AtomicU64,
    cap0: AtomicU64,
    share: AtomicU64,
}

const NONE_BITS: u64 = u64::MAX;

fn store(a: &AtomicU64, v: Option<f64>) {
    a.store(v.map_or(NONE_BITS, f64::to_bits), Ordering::Relaxed);
}

fn load(a: &AtomicU64) -> Option<f64> {
    let b = a.load(Ordering::Relaxed);
    (b != NONE_BITS).then(|| f64::from_bits(b))
}

/// The governor inside a decode loop. Build with [`GovernorHook::new`]; call
/// [`GovernorHook::begin`] before each generation and [`GovernorHook::on_token`] after each
/// token.
pub struct GovernorHook {
    kind: GovernorKind,
    gov: Governor,
    /// None until [`GovernorHook::attach_sim`] on a simulated handset.
    sensor: Option<ZoneSensor>,
    /// `--governor-sensor`, kept for binding the sensor later on a simulated handset.
    sensor_choice: String,
    /// On a simulated handset with a caps actuator: the OPP the actuator wants, handed to
    /// the handset ([`SimPace::request`]) after every tick.
    sim_cap: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// The simulated handset's OPP link, once attached.
    pace: Option<Arc<SimPace>>,
    /// On a simulated handset with a PID on the handset's power table: the calibration to
    /// the busy share the decode gets.
    schedule: Option<GainSchedule>,
    /// Where the handset's count of the workload's CPU time is read (its driver's link).
    cpu_link: Option<Arc<SimPace>>,
    /// The workload's CPU time at the mark, ns.
    mark_cpu_ns: u64,
    /// The runtime's threads: the capacity a busy share of 1 means.
    capacity_threads: usize,
    actuator: Box<dyn Actuator>,
    duty: Option<DutyCycleHandle>,
    threads_wanted: bool,
    _signals: Option<CapsSignalGuard>,
    period: Duration,
    start: Instant,
    last_tick: Option<Instant>,
    mark: Instant,
    last: Option<GovernorRecord>,
    last_temp: Option<f64>,
    tokens: Vec<TokenGov>,
    ticks: Vec<GovernorRecord>,
    warnings: Vec<String>,
    warned_zones: Vec<String>,
    in_dropout: bool,
    shared: Arc<Shared>,
    describe: String,
    failed: bool,
    /// `--governor fixed`: the level held for the whole run (no sensor, no ticks).
    fixed: Option<usize>,
    /// With `fixed` and a thread actuator: whether the held thread count is applied yet.
    fixed_threads_applied: bool,
}

impl std::fmt::Debug for GovernorHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GovernorHook")
            .field("kind", &self.kind)
            .field("describe", &self.describe)
            .finish()
    }
}

impl GovernorHook {
    /// Builds the hook, or `None` for `--governor off`. `max_threads` is the engine's pool
    /// size (the thread actuator's top level).
    pub fn new(a: &GovernorArgs, max_threads: usize) -> Result<Option<Self>> {
        Self::new_on(a, max_threads, &DeviceSpec::Local)
    }

    /// Builds the hook for a run on `device`. On a simulated handset (`sim:PROFILE`) the
    /// governor is that handset's: its gains and level table come from the handset's model
    /// (thermal speed-up included), and its sensor is the handset's own sysfs tree, bound by
    /// [`GovernorHook::attach_sim`] once the handset runs (until then no tick reads
    /// anything). Flags that address the host's sysfs are refused by name there: the
    /// simulated handset has no frequency caps the real runtime's speed could follow.
    pub fn new_on(
        a: &GovernorArgs,
        max_threads: usize,
        device: &DeviceSpec,
    ) -> Result<Option<Self>> {
        let handset = device.handset();
        check_fixed(a)?;
        if a.governor == GovernorKind::Off {
            return Ok(None);
        }
        check_args(a, device, true)?;
        let model = match handset {
            Some(h) => Some(h),
            None => a.governor_model.as_deref().map(sim_profile).transpose()?,
        };
        let root = &a.governor_sysfs_root;
        let fixed = match a.governor {
            GovernorKind::Fixed => a.governor_level,
            _ => None,
        };
        let sensor = if fixed.is_some() {
            None
        } else if device.handset().is_some() {
            check_sensor_choice(&a.governor_sensor)?;
            None
        } else {
            Some(ZoneSensor::new(sensor_zones(root, &a.governor_sensor)?)?)
        };
        let uses_caps = matches!(
            a.governor_actuator,
            ActuatorArg::Caps | ActuatorArg::CapsDuty
        );
        let on_sim = device.handset().is_some();
        if uses_caps && !a.allow_sysfs_caps && !on_sim {
            bail!(
                "--governor-actuator {:?} writes frequency caps: pass --allow-sysfs-caps to allow it (needs root), or use duty / threads",
                a.governor_actuator
            );
        }
        let cap_levels = model.as_ref().map_or(CAP_LEVELS, |m| m.opps.len());
        let mut signals = None;
        let mut duty_handle = None;
        let mut parts: Vec<Box<dyn Actuator>> = Vec::new();
        let threads_wanted = matches!(
            a.governor_actuator,
            ActuatorArg::Threads | ActuatorArg::ThreadsDuty
        );
        if threads_wanted {
            parts.push(Box::new(ThreadCount::new(max_threads.max(1))?));
        }
        let mut sim_cap = None;
        match (&model, uses_caps && on_sim) {
            (Some(m), true) => {
                let caps = SimFreqCap::new(m);
                sim_cap = Some(caps.wanted());
                parts.push(Box::new(caps));
            }
            _ if uses_caps => {
                let caps = SysfsFreqCap::discover(root, true, cap_levels)?;
                signals = Some(CapsSignalGuard::install(&caps.restore_plan())?);
                parts.push(Box::new(caps));
            }
            _ => {}
        }
        let duty_levels = match a.governor_actuator {
            ActuatorArg::Duty => Some(DUTY_LEVELS),
            ActuatorArg::ThreadsDuty | ActuatorArg::CapsDuty => Some(CHAINED_DUTY_LEVELS),
            _ => None,
        };
        if let Some(n) = duty_levels {
            let d = DutyCycle::new(n, MIN_BUSY)?;
            duty_handle = Some(d.handle());
            parts.push(Box::new(d));
        }
        let actuator: Box<dyn Actuator> = if parts.len() == 1 {
            parts.remove(0)
        } else {
            Box::new(Chain::new(parts)?)
        };
        let mut actuator = actuator;
        let levels = actuator.levels();
        if let Some(level) = fixed {
            if level >= levels {
                bail!(
                    "--governor-level {level}: the {} actuator has levels 0 to {}",
                    a.governor_actuator.name(),
                    levels - 1
                );
            }
            actuator.apply(level)?;
        }
        let (table, plant, floor) =
            level_table(a.governor_actuator, levels, model.as_ref(), a.target_temp);
        let schedule = match (a.governor, floor) {
            (GovernorKind::Pid, Some(floor)) if on_sim => Some(GainSchedule::new(
                ScheduleConfig::default(),
                table.clone(),
                floor,
                plant,
                TuningGoal::default(),
                a.target_temp,
            )?),
            _ => None,
        };
        let policy = match a.governor {
            GovernorKind::Pid => Policy::Pid(PidConfig::tuned(
                a.target_temp,
                &plant,
                &table,
                &TuningGoal::default(),
            )?),
            GovernorKind::Step => Policy::Step(StepWiseConfig {
                trip_c: a.target_temp,
                hyst_c: crate::sim::governor::STEP_HYST_C,
            }),
            GovernorKind::Off | GovernorKind::Fixed => Policy::Off,
        };
        let gov = Governor::with_level_outputs(policy, table)?;
        let describe = match fixed {
            Some(level) => describe_fixed(a, level, levels, &actuator.state(), device),
            None => describe(a, sensor.as_ref(), levels, device),
        };
        let shared = Arc::new(Shared::default());
        for g in [
            &shared.temp,
            &shared.output,
            &shared.busy,
            &shared.threads,
            &shared.cap0,
            &shared.share,
        ] {
            store(g, None);
        }
        if let Some(level) = fixed {
            let st = actuator.state();
            shared.level.store(level as u64, Ordering::Relaxed);
            store(&shared.busy, st.busy);
            store(&shared.threads, st.threads.map(|n| n as f64));
            store(&shared.cap0, st.caps.first().map(|c| *c as f64));
        }
        let now = Instant::now();
        Ok(Some(Self {
            kind: a.governor,
            gov,
            sensor,
            sensor_choice: a.governor_sensor.clone(),
            sim_cap,
            pace: None,
            schedule,
            cpu_link: None,
            mark_cpu_ns: 0,
            capacity_threads: max_threads.max(1),
            actuator,
            duty: duty_handle,
            threads_wanted,
            _signals: signals,
            period: Duration::from_millis(a.governor_period_ms),
            start: now,
            last_tick: None,
            mark: now,
            last: None,
            last_temp: None,
            tokens: Vec::new(),
            ticks: Vec::new(),
            warnings: Vec::new(),
            warned_zones: Vec::new(),
            in_dropout: false,
            shared,
            describe,
            failed: false,
            fixed,
            fixed_threads_applied: false,
        }))
    }

    /// Binds the sensor to a simulated handset's sysfs tree (`root`: the running handset's,
    /// [`crate::telemetry::RunTelemetry::sim_root`]) and restarts the governor's clock.
    /// `pace` is the handset's OPP link ([`crate::telemetry::RunTelemetry::sim_pace`]): a caps
    /// actuator asks its OPP through it; a caps actuator without one is an error (the decode
    /// loop would not follow the cap).
    pub fn attach_sim(&mut self, root: &std::path::Path, pace: Option<Arc<SimPace>>) -> Result<()> {
        if self.sim_cap.is_some() && pace.is_none() {
            bail!("the simulated caps actuator needs the handset's OPP link");
        }
        if let Some(p) = &pace {
            self.cpu_link = Some(p.clone());
        }
        self.pace = pace;
        if self.fixed.is_some() {
            // A held level reads no sensor; a simulated caps actuator asks its OPP once.
            if let (Some(w), Some(p)) = (&self.sim_cap, &self.pace) {
                p.request(w.load(Ordering::Relaxed));
            }
            return Ok(());
        }
        let zones = sensor_zones(root, &self.sensor_choice)?;
        let names: Vec<&str> = zones.iter().map(|z| z.name.as_str()).collect();
        self.describe = format!(
            "{} (simulated handset zones {})",
            self.describe,
            names.join("+")
        );
        self.sensor = Some(ZoneSensor::new(zones)?);
        self.start = Instant::now();
        self.last_tick = None;
        Ok(())
    }

    /// Reads the workload's CPU time, for the busy-share calibration, as the simulated
    /// handset's driver counts it (`pace`: its link; [`SimPace::counted_cpu_ns`]). Without
    /// it the process's CPU time is read.
    pub fn count_cpu_with(&mut self, pace: Arc<SimPace>) {
        self.cpu_link = Some(pace);
    }

    fn cpu_ns(&self) -> u64 {
        match &self.cpu_link {
            Some(p) => p.counted_cpu_ns(),
            None => crate::sim::cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
        }
    }

    /// Adds one piece of the decode's work to the busy-share measurement: `cpu_ns` of CPU
    /// time over `wall` of the work's wall time, on the runtime's threads.
    pub fn observe_work(&mut self, cpu_ns: u64, wall: Duration) {
        let cap = self.capacity_threads as f64;
        if let Some(s) = self.schedule.as_mut() {
            s.observe(cpu_ns as f64 / 1e9 / cap, wall.as_secs_f64());
        }
    }

    /// The busy-share calibration, with a PID on a simulated handset's power table.
    pub fn schedule(&self) -> Option<&GainSchedule> {
        self.schedule.as_ref()
    }

    fn share_in_force(&self) -> Option<f64> {
        self.schedule
            .as_ref()
            .filter(|s| !s.events().is_empty())
            .map(GainSchedule::scale)
    }

    /// One line saying what runs.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Marks the start of a generation: the first token's compute time counts from here.
    pub fn begin(&mut self) {
        self.mark = Instant::now();
        if self.schedule.is_some() {
            self.mark_cpu_ns = self.cpu_ns();
        }
    }

    /// Called by the decode loop after token `token` of query `query`: ticks the governor when
    /// its period has passed, applies the thread count, records the state and idles for the
    /// duty cycle. Never fails: a broken actuator stops the governor (caps restored) and is
    /// reported in [`GovernorHook::warnings`].
    pub fn on_token(&mut self, query: u64, token: usize, threads: &dyn ThreadControl) {
        self.on_pass(&[(query, token)], threads);
    }

    /// Called by a batched decode loop after one pass that produced `tokens` (query, token
    /// index), several sequences at once: the hook of [`GovernorHook::on_token`] applied
    /// once per pass. The compute time since the last call (earlier passes that produced no
    /// token included) sets the duty cycle's idle time, inserted once and recorded on the
    /// pass's first token (its other tokens record 0, so the idle total stays true); every
    /// token records the governor state. Nothing happens for a pass without tokens: its
    /// time counts toward the next one's.
    pub fn on_pass(&mut self, tokens: &[(u64, usize)], threads: &dyn ThreadControl) {
        if tokens.is_empty() {
            return;
        }
        let now = Instant::now();
        let compute = now.saturating_duration_since(self.mark);
        if self.schedule.is_some() {
            let cpu = self.cpu_ns().saturating_sub(self.mark_cpu_ns);
            self.observe_work(cpu, compute);
        }
        let due = self
            .last_tick
            .is_none_or(|t| now.saturating_duration_since(t) >= self.period);
        if self.fixed.is_some() {
            if self.threads_wanted && !self.fixed_threads_applied {
                if let Some(n) = self.actuator.state().threads {
                    threads.set_threads(n);
                }
                self.fixed_threads_applied = true;
            }
        } else if due && !self.failed {
            self.last_tick = Some(now);
            self.tick(now, threads);
        }
        let st = self.actuator.state();
        let rec = self.last.as_ref();
        let pause = match (&self.duty, self.failed) {
            (Some(d), false) => d.pause_after_token(compute),
            _ => Duration::ZERO,
        };
        let share = self.share_in_force();
        for (i, &(query, token)) in tokens.iter().enumerate() {
            self.tokens.push(TokenGov {
                query,
                token,
                temp_c: self.last_temp,
                level: rec.map_or(self.fixed.unwrap_or(0), |r| r.level),
                output: rec.map_or(f64::NAN, |r| r.output),
                status: rec.map_or(StepStatus::Started, |r| r.status),
                busy: st.busy,
                threads: st.threads,
                caps: st.caps.clone(),
                pause_ms: if i == 0 {
                    pause.as_secs_f64() * 1e3
                } else {
                    0.0
                },
                busy_share: share,
            });
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        self.mark = Instant::now();
        if self.schedule.is_some() {
            self.mark_cpu_ns = self.cpu_ns();
        }
    }

    fn tick(&mut self, now: Instant, threads: &dyn ThreadControl) {
        let t_s = now.saturating_duration_since(self.start).as_secs_f64();
        let Some(sensor) = self.sensor.as_mut() else {
            const MSG: &str = "governor sensor not bound to the simulated handset yet: no tick";
            if !self.warnings.iter().any(|w| w == MSG) {
                self.warnings.push(MSG.into());
            }
            return;
        };
        if let Some(s) = self.schedule.as_mut()
            && let Err(e) = s.update(t_s, &mut self.gov)
        {
            self.warnings.push(format!(
                "governor calibration to the busy share failed at t = {t_s:.1} s: {e}; the table in force is kept"
            ));
            self.schedule = None;
        }
        match self.gov.tick(t_s, sensor, &mut *self.actuator) {
            Ok(rec) => {
                self.note_sensor(&rec);
                if let Some(t) = rec.temp_c {
                    self.last_temp = Some(t);
                }
                if let (Some(w), Some(p)) = (&self.sim_cap, &self.pace) {
                    p.request(w.load(Ordering::Relaxed));
                }
                let st = self.actuator.state();
                if self.threads_wanted
                    && let Some(n) = st.threads
                {
                    threads.set_threads(n);
                }
                self.publish(&rec, &st);
                self.ticks.push(rec.clone());
                self.last = Some(rec);
            }
            Err(e) => {
                self.failed = true;
                let restored = self.actuator.apply(0);
                if self.threads_wanted {
                    threads.set_threads(usize::MAX);
                }
                self.warnings.push(format!(
                    "governor stopped at t = {t_s:.1} s: {e}; actuator reset to unthrottled{}",
                    match restored {
                        Ok(()) => String::new(),
                        Err(e) => format!(" failed too: {e}"),
                    }
                ));
            }
        }
    }

    fn note_sensor(&mut self, rec: &GovernorRecord) {
        let failed: Vec<String> = self
            .sensor
            .as_ref()
            .map(|s| s.failed().to_vec())
            .unwrap_or_default();
        for z in &failed {
            if !self.warned_zones.contains(z) {
                self.warned_zones.push(z.clone());
                self.warnings.push(format!(
                    "governor sensor zone `{z}` did not read at t = {:.1} s (left out of the maximum)",
                    rec.t_s
                ));
            }
        }
        let dropout = matches!(rec.status, StepStatus::SensorDropout | StepStatus::Failsafe);
        if dropout && !self.in_dropout {
            self.warnings.push(format!(
                "governor sensor dropout at t = {:.1} s: holding level {} (output {:.3}); most throttled after {:.0} s of silence",
                rec.t_s,
                rec.level,
                rec.output,
                self.gov.pid().map_or(0.0, |p| p.config().dropout_failsafe_s)
            ));
        }
        if rec.status == StepStatus::Failsafe && self.in_dropout {
            let msg = "governor sensor silent past the failsafe delay: most throttled level";
            if !self.warnings.iter().any(|w| w == msg) {
                self.warnings.push(msg.into());
            }
        }
        if !dropout && self.in_dropout {
            self.warnings
                .push(format!("governor sensor back at t = {:.1} s", rec.t_s));
        }
        self.in_dropout = dropout;
    }

    fn publish(&self, rec: &GovernorRecord, st: &ActuatorState) {
        let s = &self.shared;
        store(&s.temp, self.last_temp);
        s.level.store(rec.level as u64, Ordering::Relaxed);
        store(&s.output, Some(rec.output));
        store(&s.busy, st.busy);
        store(&s.threads, st.threads.map(|n| n as f64));
        store(&s.cap0, st.caps.first().map(|c| *c as f64));
        store(&s.share, self.share_in_force());
    }

    /// Telemetry gauges with the latest governor state (register them with the sampler).
    pub fn gauges(&self) -> Vec<(String, Gauge)> {
        let g = |f: fn(&Shared) -> Option<f64>, s: &Arc<Shared>| -> Gauge {
            let s = Arc::clone(s);
            Box::new(move || f(&s))
        };
        let sh = &self.shared;
        vec![
            ("governor.temp.c".into(), g(|s| load(&s.temp), sh)),
            (
                "governor.level".into(),
                g(|s| Some(s.level.load(Ordering::Relaxed) as f64), sh),
            ),
            ("governor.output".into(), g(|s| load(&s.output), sh)),
            ("governor.busy".into(), g(|s| load(&s.busy), sh)),
            ("governor.threads".into(), g(|s| load(&s.threads), sh)),
            ("governor.cap0".into(), g(|s| load(&s.cap0), sh)),
            ("governor.busy_share".into(), g(|s| load(&s.share), sh)),
        ]
    }

    /// Per-token state, in call order.
    pub fn tokens(&self) -> &[TokenGov] {
        &self.tokens
    }

    /// Every governor step.
    pub fn ticks(&self) -> &[GovernorRecord] {
        &self.ticks
    }

    /// Things the user should know (sensor dropouts, a stopped governor).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Columns appended to `tokens.csv`.
    pub fn csv_columns(&self) -> [&'static str; 9] {
        [
            "gov_temp_c",
            "gov_level",
            "gov_output",
            "gov_status",
            "gov_busy",
            "gov_threads",
            "gov_caps",
            "gov_pause_ms",
            "gov_busy_share",
        ]
    }

    /// Index of the per-token rows by (query, token).
    pub fn token_index(&self) -> HashMap<(u64, usize), usize> {
        self.tokens
            .iter()
            .enumerate()
            .map(|(i, t)| ((t.query, t.token), i))
            .collect()
    }

    /// The cells for one token, one per [`Self::csv_columns`] (empty cells when not
    /// recorded).
    pub fn csv_cells(
        &self,
        index: &HashMap<(u64, usize), usize>,
        query: u64,
        token: usize,
    ) -> [String; 9] {
        let Some(t) = index.get(&(query, token)).map(|&i| &self.tokens[i]) else {
            return Default::default();
        };
        let opt = |v: Option<f64>, prec: usize| v.map_or(String::new(), |v| format!("{v:.prec$}"));
        [
            opt(t.temp_c, 3),
            t.level.to_string(),
            opt(t.output.is_finite().then_some(t.output), 4),
            status_name(t.status).to_string(),
            opt(t.busy, 3),
            t.threads.map_or(String::new(), |n| n.to_string()),
            t.caps
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(";"),
            format!("{:.3}", t.pause_ms),
            opt(t.busy_share, 4),
        ]
    }

    /// One line for the terminal after a generation.
    pub fn summary_line(&self) -> String {
        let max_t = self.ticks.iter().filter_map(|r| r.temp_c).reduce(f64::max);
        let idle: f64 = self.tokens.iter().map(|t| t.pause_ms).sum::<f64>() / 1e3;
        format!(
            "{}: {} ticks, final level {}/{}, max temperature {}, {:.2} s idle inserted, {} sensor dropout ticks",
            self.kind.name(),
            self.ticks.len(),
            self.last
                .as_ref()
                .map_or(self.fixed.unwrap_or(0), |r| r.level),
            self.gov.levels().saturating_sub(1),
            max_t.map_or("-".into(), |t| format!("{t:.2} °C")),
            idle,
            self.ticks
                .iter()
                .filter(|r| matches!(r.status, StepStatus::SensorDropout | StepStatus::Failsafe))
                .count()
        )
    }

    /// The `governor` section of `result.json`.
    pub fn summary_json(&self) -> serde_json::Value {
        let temps: Vec<f64> = self.ticks.iter().filter_map(|r| r.temp_c).collect();
        let max_temp = temps.iter().copied().reduce(f64::max);
        let mean_temp = (!temps.is_empty()).then(|| temps.iter().sum::<f64>() / temps.len() as f64);
        let pauses: f64 = self.tokens.iter().map(|t| t.pause_ms).sum();
        let changes = self
            .ticks
            .windows(2)
            .filter(|w| w[0].level != w[1].level)
            .count();
        let dropouts = self
            .ticks
            .iter()
            .filter(|r| matches!(r.status, StepStatus::SensorDropout | StepStatus::Failsafe))
            .count();
        serde_json::json!({
            "policy": self.kind.name(),
            "describe": self.describe,
            "config": self.gov.pid().map(|p| p.config().clone()),
            "level_outputs": self.gov.pid().map(|p| p.level_outputs().to_vec()),
            "levels": self.gov.levels(),
            "sensor_zones": self.sensor.as_ref().map(ZoneSensor::zones),
            "ticks": self.ticks.len(),
            "tokens": self.tokens.len(),
            "max_temp_c": max_temp,
            "mean_temp_c": mean_temp,
            "final_level": self.last.as_ref().map(|r| r.level).or(self.fixed),
            "fixed_level": self.fixed,
            "level_changes": changes,
            "sensor_dropout_ticks": dropouts,
            "idle_inserted_s": pauses / 1e3,
            "stopped": self.failed,
            "warnings": self.warnings,
            "calibration": self.schedule.as_ref().map(|s| serde_json::json!({
                "measured_s": s.measured_s(),
                "busy_share_estimate": s.estimate(),
                "scale": self.share_in_force(),
                "settings": s.config(),
                "model_level_outputs": s.model_table(),
                "events": s.events(),
            })),
        })
    }
}
