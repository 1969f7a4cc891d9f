//! Farm hygiene before each step: the device's state at the start, and a cool-down.
//!
//! A step that starts on a hot handset measures the thermal throttling left by the step
//! before; one that starts on a charger or at 5% battery measures another power state. So
//! before each step the farm reads the device (the telemetry probe's readers: thermal zones
//! by role, `class/power_supply`), waits until the hottest SoC zone and the hottest skin zone
//! are each within `cooldown_margin_c` of their idle level or `cooldown_timeout_s` has
//! passed, and records in the step's entry of `farm.json` what it found: the temperatures
//! before the wait and at the start, the seconds waited, how the wait ended, the battery's
//! charge and status and which chargers were online.
//!
//! The idle level is the inventory's (`cooldown_idle_soc_c`, `cooldown_idle_skin_c`), else
//! the device's first reading of the farm run, taken before its first step.
//!
//! Where the readings come from ([`Sensors`]): a `local` device probes its sysfs mount
//! in this process; a phone runs the pushed binary's `probe --json` over adb; a simulated
//! handset is the farm's own model of that handset between steps ([`SimBench`]): it starts at
//! its idle level, each step heats it as a full-load run of the step's wall time, time between
//! steps cools it idle, and its sysfs tree is read by the same probe.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::transport::AdbTransport;
use crate::sim::SimDevice;
use crate::sim::model::Activity;

/// The cool-down settings of one device (inventory keys `cooldown*`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CooldownSpec {
    /// `cooldown` (default true): wait before each step. Off, the start state is still
    /// recorded.
    pub enabled: bool,
    /// `cooldown_margin_c` (default 2 °C): how far above its idle level a zone may start.
    pub margin_c: f64,
    /// `cooldown_timeout_s` (default 600 s): the longest wait; the step then runs anyway and
    /// the timeout is recorded.
    pub timeout: Duration,
    /// `cooldown_poll_s` (default 5 s): time between readings while waiting.
    pub poll: Duration,
    /// `cooldown_idle_soc_c`: the SoC's idle level; default: the first reading.
    pub idle_soc_c: Option<f64>,
    /// `cooldown_idle_skin_c`: the skin's idle level; default: the first reading.
    pub idle_skin_c: Option<f64>,
}

impl Default for CooldownSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            margin_c: 2.0,
            timeout: Duration::from_secs(600),
            poll: Duration::from_secs(5),
            idle_soc_c: None,
            idle_skin_c: None,
        }
    }
}

/// One reading of a device.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reading {
    /// Hottest zone the probe classifies as SoC, °C.
    pub soc_c: Option<f64>,
    /// Hottest zone the probe classifies as skin, °C.
    pub skin_c: Option<f64>,
    /// Battery `capacity`, %.
    pub battery_pct: Option<i64>,
    /// Battery `status` (`Charging`, `Discharging`, `Full`, `Not charging`).
    pub battery_status: Option<String>,
    /// Non-battery supplies whose `online` is 1 (a charger plugged in), by name.
    pub chargers_online: Vec<String>,
}

impl Reading {
    /// The fields of a probe, as `pocketperf probe --json` prints it.
    pub fn from_probe_json(v: &serde_json::Value) -> Self {
        let hottest = |role: &str| {
            v["thermal_zones"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|z| z["role"] == role)
                .filter_map(|z| z["temp_c"].as_f64())
                .reduce(f64::max)
        };
        let battery = &v["battery"];
        Self {
            soc_c: hottest("Soc"),
            skin_c: hottest("Skin"),
            battery_pct: battery["capacity_pct"].as_i64(),
            battery_status: battery["status"].as_str().map(str::to_string),
            chargers_online: v["supplies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["online"] == true)
                .filter_map(|s| s["name"].as_str().map(str::to_string))
                .collect(),
        }
    }

    /// Probes a sysfs mount in this process.
    pub fn from_sysfs(root: &Path) -> Result<Self, String> {
        let p = crate::telemetry::probe::probe(root);
        let v =
            serde_json::to_value(&p).map_err(|e| format!("probe of {}: {e}", root.display()))?;
        Ok(Self::from_probe_json(&v))
    }
}

/// Where a device's readings come from.
pub trait Sensors {
    /// Reads the device now.
    fn read(&mut self) -> Result<Reading, String>;
    /// Lets `d` pass (the device idles meanwhile).
    fn wait(&mut self, d: Duration) {
        std::thread::sleep(d);
    }
    /// A step has just ended (the time since the last reading was that step's work).
    fn step_ran(&mut self) {}
}

/// A `local` device: its sysfs mount, probed here.
pub struct SysfsSensors(pub PathBuf);

impl Sensors for SysfsSensors {
    fn read(&mut self) -> Result<Reading, String> {
        Reading::from_sysfs(&self.0)
    }
}

/// A phone: the pushed binary's `probe --json`, over adb.
pub struct AdbSensors {
    /// The phone.
    pub adb: AdbTransport,
    /// The pushed `pocketperf` on it.
    pub binary: String,
    /// Longest one reading may take.
    pub timeout: Duration,
}

impl Sensors for AdbSensors {
    fn read(&mut self) -> Result<Reading, String> {
        let bin = super::shell::quote(&self.binary).map_err(|e| e.to_string())?;
        let (code, out) = self
            .adb
            .shell_status(
                &format!("{bin} probe --json 2>/dev/null"),
                "reading temperatures and battery",
                self.timeout,
            )
            .map_err(|e| e.to_string())?;
        if code != 0 {
            return Err(format!("`pocketperf probe --json` exited with {code}"));
        }
        let json: String = out
            .stdout
            .lines()
            .filter(|l| !l.trim().starts_with(super::transport::EXIT_MARKER))
            .collect::<Vec<_>>()
            .join("\n");
        let v: serde_json::Value = serde_json::from_str(&json)
            .map_err(|e| format!("`pocketperf probe --json` printed no JSON: {e}"))?;
        Ok(Reading::from_probe_json(&v))
    }
}

/// A device whose readings cannot be had (its simulated handset could not be built): every
/// step records the reason as an `error` cool-down.
pub struct Unreadable(pub String);

impl Sensors for Unreadable {
    fn read(&mut self) -> Result<Reading, String> {
        Err(self.0.clone())
    }
}

/// The farm's model of a simulated handset between steps: the handset's RC thermal network
/// and battery ([`SimDevice`], the same model `--device sim:…` runs), advanced in real time,
/// at full load for the span of each step and idle otherwise; read through its sysfs tree.
pub struct SimBench {
    dev: SimDevice,
    max_level: usize,
    since: Instant,
}

impl SimBench {
    /// The handset of a `--device sim:PROFILE[,thermal-speedup=K]` string, at its idle level.
    pub fn new(device: &str) -> Result<Self, String> {
        let spec = crate::telemetry::DeviceSpec::parse(device).map_err(|e| e.to_string())?;
        let profile = spec
            .handset()
            .ok_or_else(|| format!("{device}: not a simulated handset"))?;
        let max_level = profile.max_level();
        let (tau_slow_s, _) = crate::sim::governor::time_constants(&profile);
        let mut dev = SimDevice::with_profile(profile).map_err(|e| e.to_string())?;
        // A handset starts at the ambient temperature, below where its idle power holds it:
        // ten slow time constants idle put it at its idle level, as a phone that has lain on
        // the bench.
        dev.step(
            10.0 * tau_slow_s,
            Activity {
                busy: 0.0,
                freq_level: 0,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(Self {
            dev,
            max_level,
            since: Instant::now(),
        })
    }

    fn advance(&mut self, busy: bool) -> Result<(), String> {
        let dt = self.since.elapsed().as_secs_f64();
        self.since = Instant::now();
        let activity = if busy {
            Activity {
                busy: 1.0,
                freq_level: self.max_level,
            }
        } else {
            Activity {
                busy: 0.0,
                freq_level: 0,
            }
        };
        self.dev
            .step(dt, activity)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

impl Sensors for SimBench {
    fn read(&mut self) -> Result<Reading, String> {
        self.advance(false)?;
        Reading::from_sysfs(self.dev.root())
    }

    fn step_ran(&mut self) {
        // A failed step of the model leaves the handset where it was; the next reading says
        // so if the tree cannot be written.
        let _ = self.advance(true);
    }
}

/// The idle levels a device's zones are held to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Idle {
    /// SoC, °C.
    pub soc_c: Option<f64>,
    /// Skin, °C.
    pub skin_c: Option<f64>,
}

/// What the farm found and did before a step (`start` of the step in `farm.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepStart {
    /// How the cool-down ended: `cool` (within the margin at once), `cooled` (within it after
    /// waiting), `timeout` (still above it when the timeout passed; the step ran anyway),
    /// `no_sensor` (neither a SoC nor a skin zone reads), `off` (`cooldown = false`) or
    /// `error` (the device could not be read).
    pub cooldown: &'static str,
    /// Seconds waited.
    pub waited_s: f64,
    /// The idle levels used.
    pub idle: Option<Idle>,
    /// The margin, °C.
    pub margin_c: f64,
    /// The first reading, before any wait.
    pub before: Option<Reading>,
    /// The reading the step started at: its temperatures, battery charge and chargers.
    pub start: Option<Reading>,
    /// Why the device could not be read (`error`).
    pub detail: Option<String>,
}

fn within(r: &Reading, idle: &Idle, margin: f64) -> bool {
    let ok = |now: Option<f64>, idle: Option<f64>| match (now, idle) {
        (Some(t), Some(i)) => t <= i + margin,
        _ => true,
    };
    ok(r.soc_c, idle.soc_c) && ok(r.skin_c, idle.skin_c)
}

/// Reads the device and, when the cool-down is on, waits until its zones are within the
/// margin of `idle` (filled from the spec, else from this first reading, on the device's
/// first step) or the timeout passes. `progress` is told when a wait begins.
pub fn cool_down(
    spec: &CooldownSpec,
    sensors: &mut dyn Sensors,
    idle: &mut Option<Idle>,
    progress: &dyn Fn(&str),
) -> StepStart {
    let mut out = StepStart {
        cooldown: "error",
        waited_s: 0.0,
        idle: *idle,
        margin_c: spec.margin_c,
        before: None,
        start: None,
        detail: None,
    };
    let first = match sensors.read() {
        Ok(r) => r,
        Err(e) => {
            out.detail = Some(e);
            return out;
        }
    };
    let reference = *idle.get_or_insert(Idle {
        soc_c: spec.idle_soc_c.or(first.soc_c),
        skin_c: spec.idle_skin_c.or(first.skin_c),
    });
    out.idle = Some(reference);
    out.before = Some(first.clone());
    if !spec.enabled {
        out.cooldown = "off";
        out.start = Some(first);
        return out;
    }
    if first.soc_c.is_none() && first.skin_c.is_none() {
        out.cooldown = "no_sensor";
        out.start = Some(first);
        return out;
    }
    let t0 = Instant::now();
    let mut now = first;
    let mut told = false;
    loop {
        if within(&now, &reference, spec.margin_c) {
            out.cooldown = if told { "cooled" } else { "cool" };
            break;
        }
        let elapsed = t0.elapsed();
        if elapsed >= spec.timeout {
            out.cooldown = "timeout";
            break;
        }
        if !told {
            progress(&format!(
                "cooling down: SoC {} / skin {} °C, idle {} / {} + {} °C (at most {:.0} s)",
                show(now.soc_c),
                show(now.skin_c),
                show(reference.soc_c),
                show(reference.skin_c),
                spec.margin_c,
                spec.timeout.as_secs_f64()
            ));
            told = true;
        }
        sensors.wait(spec.poll.min(spec.timeout - elapsed));
        match sensors.read() {
            Ok(r) => now = r,
            Err(e) => {
                out.cooldown = "error";
                out.detail = Some(e);
                break;
            }
        }
    }
    // No wait began when the first reading was within the margin: zero, not the instant the
    // check took.
    out.waited_s = if told {
        t0.elapsed().as_secs_f64()
    } else {
        0.0
    };
    out.start = Some(now);
    out
}

fn show(t: Option<f64>) -> String {
    t.map_or("-".into(), |t| format!("{t:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Temperatures that fall by a fixed step per wait.
    struct Falling {
        soc: f64,
        skin: f64,
        step: f64,
        reads: usize,
    }

    impl Sensors for Falling {
        fn read(&mut self) -> Result<Reading, String> {
            self.reads += 1;
            Ok(Reading {
                soc_c: Some(self.soc),
                skin_c: Some(self.skin),
                ..Reading::default()
            })
        }
        fn wait(&mut self, _: Duration) {
            self.soc -= self.step;
            self.skin -= self.step;
        }
    }

    fn spec() -> CooldownSpec {
        CooldownSpec {
            poll: Duration::from_millis(1),
            ..CooldownSpec::default()
        }
    }

    #[test]
    fn waits_until_both_zones_are_within_the_margin() {
        let mut s = Falling {
            soc: 50.0,
            skin: 40.0,
            step: 1.0,
            reads: 0,
        };
        let mut idle = Some(Idle {
            soc_c: Some(40.0),
            skin_c: Some(30.0),
        });
        let r = cool_down(&spec(), &mut s, &mut idle, &|_| {});
        assert_eq!(r.cooldown, "cooled");
        // 50 → 42 takes 8 waits: 9 readings.
        assert_eq!(s.reads, 9);
        assert_eq!(r.start.unwrap().soc_c, Some(42.0));
        assert_eq!(r.before.unwrap().soc_c, Some(50.0));
    }

    #[test]
    fn the_first_reading_is_the_idle_level_unless_given() {
        let mut s = Falling {
            soc: 50.0,
            skin: 40.0,
            step: 1.0,
            reads: 0,
        };
        let mut idle = None;
        let r = cool_down(&spec(), &mut s, &mut idle, &|_| {});
        assert_eq!((r.cooldown, s.reads), ("cool", 1));
        assert_eq!(
            idle,
            Some(Idle {
                soc_c: Some(50.0),
                skin_c: Some(40.0)
            })
        );
        let given = CooldownSpec {
            idle_skin_c: Some(35.0),
            ..spec()
        };
        let mut idle = None;
        let mut s = Falling {
            soc: 50.0,
            skin: 40.0,
            step: 1.0,
            reads: 0,
        };
        let r = cool_down(&given, &mut s, &mut idle, &|_| {});
        // The skin must reach 37; the SoC's idle level is its first reading.
        assert_eq!((r.cooldown, s.reads), ("cooled", 4));
    }

    #[test]
    fn no_zone_means_no_wait_and_says_so() {
        struct Blind;
        impl Sensors for Blind {
            fn read(&mut self) -> Result<Reading, String> {
                Ok(Reading {
                    battery_pct: Some(80),
                    ..Reading::default()
                })
            }
        }
        let r = cool_down(&spec(), &mut Blind, &mut None, &|_| {});
        assert_eq!(r.cooldown, "no_sensor");
        assert_eq!(r.start.unwrap().battery_pct, Some(80));
    }
}
