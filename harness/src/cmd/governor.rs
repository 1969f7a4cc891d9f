//! `pocketperf governor sim` (the closed loop on a simulated handset, in virtual time:
//! [`crate::sim::governor`]) and [`GovernorArgs`] (`--governor off|pid|step`,
//! `--target-temp C`, sensor, actuator), flattened into `generate` and `run` and read by the
//! per-token hook, [`crate::governor_hook::GovernorHook`].

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use crate::sim::governor::{Comparison, SimActuator, SimSensor, SimSpec, SimSummary};
use crate::sim::model::{HandsetProfile, profile, profile_names};

/// `pocketperf governor …`
#[derive(Subcommand, Debug)]
pub enum GovernorCmd {
    /// Run the governors in closed loop on a simulated handset, in virtual time.
    Sim(SimArgs),
}

/// Which governor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GovernorKind {
    /// No governor: only the vendor's own throttling.
    Off,
    /// The PID governor.
    Pid,
    /// The step_wise-like baseline.
    Step,
    /// No control: the actuator held at --governor-level for the whole run, no sensor read
    /// (a fixed, known slowdown; `run` and `generate` only).
    Fixed,
}

impl GovernorKind {
    pub fn name(self) -> &'static str {
        match self {
            GovernorKind::Off => "off",
            GovernorKind::Pid => "pid",
            GovernorKind::Step => "step",
            GovernorKind::Fixed => "fixed",
        }
    }
}

#[derive(Args, Debug, Serialize)]
pub struct SimArgs {
    /// Simulated handset: sim:snapdragon-8gen3 or sim:pixel-8-pro.
    #[arg(long)]
    pub device: String,
    /// Simulated minutes.
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Skin target (pid) in °C; step's trip is tuned so its maximum skin equals pid's.
    #[arg(long, default_value_t = 42.0)]
    pub target: f64,
    /// The governor whose figures are printed (all three always run for the comparison).
    #[arg(long, value_enum, default_value = "pid")]
    pub governor: GovernorKind,
    /// Ambient temperature of the simulated handset, °C (default: the profile's, 25 °C).
    /// The governor's gains stay derived for the profile's ambient.
    #[arg(long)]
    pub ambient: Option<f64>,
    /// What the governor turns.
    #[arg(long, value_enum, default_value = "caps-duty")]
    pub actuator: SimActuator,
    /// What the governor reads.
    #[arg(long, value_enum, default_value = "skin")]
    pub sensor: SimSensor,
    /// Governor period, s.
    #[arg(long, default_value_t = 1.0)]
    pub period: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write governor_sim.json, governor_trace.csv, SVG plots and governor_sim.html here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A warning when `minutes` leave the acceptance checks too little time: they look for
/// settling before a final window of `final_window_s` and judge that window, so a run
/// shorter than two windows halves the window and may fail for lack of time alone.
pub fn short_run_warning(minutes: f64, final_window_s: f64) -> Option<String> {
    let need_min = 2.0 * final_window_s / 60.0;
    (minutes < need_min).then(|| {
        format!(
            "warning: --minutes {minutes} is too few for the checks: they need {need_min:.0} \
             simulated minutes (settling, then a {:.0}-minute final window); the final window \
             shrinks to {:.1} minutes and checks may fail only because the run is short",
            final_window_s / 60.0,
            minutes / 2.0
        )
    })
}

/// A built-in profile from `sim:NAME` (or `NAME`).
pub fn sim_profile(device: &str) -> Result<HandsetProfile> {
    let name = device.strip_prefix("sim:").unwrap_or(device);
    profile(name).with_context(|| {
        format!(
            "--device {device}: unknown simulated handset; known: {}",
            profile_names()
                .iter()
                .map(|n| format!("sim:{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

pub fn governor_cmd(cmd: &GovernorCmd) -> Result<i32> {
    match cmd {
        GovernorCmd::Sim(a) => sim(a),
    }
}

fn sim(a: &SimArgs) -> Result<i32> {
    if a.governor == GovernorKind::Fixed {
        bail!(
            "governor sim --governor fixed: the simulation compares off, step and pid; a fixed level is a `run` or `generate` setting (--governor fixed --governor-level N)"
        );
    }
    let model = sim_profile(&a.device)?;
    let mut handset = model.clone();
    if let Some(t) = a.ambient {
        handset.ambient_c = t;
    }
    let mut spec = SimSpec::new(handset, a.target, a.minutes);
    spec.model = model;
    spec.period_s = a.period;
    spec.actuator = a.actuator;
    spec.sensor = a.sensor;
    if let Some(w) = short_run_warning(a.minutes, spec.final_window_s) {
        eprintln!("{w}");
    }
    let progress = crate::progress::spinner("governor sim");
    let cmp = crate::sim::governor::compare(&spec)?;
    progress.finish_and_clear();
    let settings = serde_json::json!({ "cli": a });
    let report = cmp.report(a.governor.name(), settings);
    if let Some(dir) = &a.out {
        let files = cmp.write(dir, &report)?;
        if !a.json {
            for f in files {
                eprintln!("wrote {}", f.display());
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", sim_text(&cmp, a.governor));
    }
    // Exit status: 0 every check passed, 1 a check failed (errors return 2 from main).
    let failed = report.checks.iter().filter(|c| !c.pass).count();
    if failed > 0 {
        eprintln!(
            "governor sim: {failed} of {} checks failed",
            report.checks.len()
        );
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

fn summary_of(cmp: &Comparison, g: GovernorKind) -> &SimSummary {
    match g {
        // `sim` refuses `fixed` before anything runs.
        GovernorKind::Off | GovernorKind::Fixed => &cmp.off.summary,
        GovernorKind::Step => &cmp.step.summary,
        GovernorKind::Pid => &cmp.pid.summary,
    }
}

/// The text report of `governor sim`.
pub fn sim_text(cmp: &Comparison, selected: GovernorKind) -> String {
    let sp = &cmp.spec;
    let mut s = format!(
        "sim:{} target {:.1} °C, ambient {:.1} °C, {:.0} min, period {:.1} s, actuator {:?}, sensor {:?}\n",
        sp.handset.name,
        sp.target_c,
        sp.handset.ambient_c,
        sp.minutes,
        sp.period_s,
        sp.actuator,
        sp.sensor
    );
    let su = &cmp.sustainable;
    s += &format!(
        "sustainable maximum (closed form): {:.2} tokens/s at {:.2} W\n",
        su.tokens_per_s, su.power_w
    );
    s += &format!(
        "step trip tuned to {:.2} °C (hysteresis {:.1} °C) in {} runs\n\n",
        cmp.step_config.trip_c, cmp.step_config.hyst_c, cmp.step_tuning_iterations
    );
    s += &format!(
        "{:<5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9}\n",
        "gov",
        "tokens",
        "tok/s",
        "steady",
        "skin max",
        "die max",
        "settling",
        "oversh.",
        "p-p",
        "vendor s",
        "vend.lost"
    );
    for g in [GovernorKind::Off, GovernorKind::Step, GovernorKind::Pid] {
        let r = summary_of(cmp, g);
        s += &format!(
            "{:<5} {:>9.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9} {:>8.2} {:>8.2} {:>9.0} {:>9.0}{}\n",
            g.name(),
            r.tokens,
            r.mean_tokens_per_s,
            r.steady_tokens_per_s,
            r.skin_max_c,
            r.die_max_c,
            r.settling_time_s
                .map_or("-".to_string(), |t| format!("{t:.0} s")),
            r.overshoot_c,
            r.oscillation_pp_c,
            r.vendor_throttling_s,
            r.vendor_lost_tokens,
            if g == selected { "  <" } else { "" }
        );
    }
    s += &format!(
        "\npid/step tokens {:.3}; pid steady / sustainable {:.3}\n",
        cmp.pid_over_step(),
        cmp.pid_over_sustainable()
    );
    for c in cmp.checks() {
        s += &format!(
            "  [{}] {}: {:.3} (limit {:.3})\n",
            if c.pass { "pass" } else { "FAIL" },
            c.name,
            c.value,
            c.limit
        );
    }
    s
}

/// Governor flags of `generate` and `run`.
#[derive(Args, Debug, Clone, Serialize)]
pub struct GovernorArgs {
    /// Thermal governor in the decode loop.
    #[arg(long, value_enum, default_value = "off")]
    pub governor: GovernorKind,
    /// Temperature the pid holds, or step's trip, °C.
    #[arg(long, default_value_t = 42.0)]
    pub target_temp: f64,
    /// Sensor: `skin` (max over skin zones), `soc` (max over SoC zones) or `zone:NAME`.
    #[arg(long, default_value = "skin")]
    pub governor_sensor: String,
    /// What the governor turns. `caps` and `caps-duty` write cpufreq/kgsl caps and need
    /// `--allow-sysfs-caps` and writable files (root).
    #[arg(long, value_enum, default_value = "duty")]
    pub governor_actuator: ActuatorArg,
    /// Allow the governor to write `scaling_max_freq` / `max_gpuclk` (restored afterwards).
    #[arg(long)]
    pub allow_sysfs_caps: bool,
    /// Governor period, ms.
    #[arg(long, default_value_t = 1000)]
    pub governor_period_ms: u64,
    /// Sysfs mount the governor reads (and writes caps under).
    #[arg(long, default_value = "/sys")]
    pub governor_sysfs_root: PathBuf,
    /// Derive the pid gains and level powers from this handset model (`sim:PROFILE`);
    /// default: a generic plant on a normalized output (see docs/GOVERNOR.md).
    #[arg(long)]
    pub governor_model: Option<String>,
    /// With --governor fixed (and only then): the actuator level held for the whole run, 0 =
    /// unthrottled; with the duty actuator level k keeps the decode busy 1 − 0.05·k of the
    /// time (0 to 16).
    #[arg(long)]
    pub governor_level: Option<usize>,
}

/// Actuators of a real decode loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActuatorArg {
    /// Idle time between decode steps.
    Duty,
    /// Fewer kernel threads.
    Threads,
    /// Threads first, then duty cycle.
    ThreadsDuty,
    /// sysfs frequency caps (opt-in, root).
    Caps,
    /// sysfs frequency caps, then duty cycle at the lowest cap (opt-in, root).
    CapsDuty,
}

impl ActuatorArg {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ActuatorArg::Duty => "duty",
            ActuatorArg::Threads => "threads",
            ActuatorArg::ThreadsDuty => "threads-duty",
            ActuatorArg::Caps => "caps",
            ActuatorArg::CapsDuty => "caps-duty",
        }
    }
}
