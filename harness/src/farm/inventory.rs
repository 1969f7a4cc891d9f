//! The device inventory (`devices.toml`, see `ci/devices.example.toml`): which handsets the
//! farm drives, over which transport, with which retry policy and remote directory.
//!
//! Relative paths in the file (a per-device `binary`) are resolved against the file's own
//! directory. Unknown keys are errors, so a typo cannot silently change a policy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::FarmError;
pub use super::cooldown::CooldownSpec;
pub use super::names::{BUILTIN_PLACEHOLDERS, valid_name};

/// How the farm reaches a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportSpec {
    /// This host: the suite runs in a scratch directory here.
    Local,
    /// An Android device through the `adb` client, by serial number.
    Adb {
        /// The serial as `adb devices` prints it (any characters but NUL).
        serial: String,
    },
    /// A simulated handset run on this host (`--device sim:<profile>[,thermal-speedup=K]`).
    Sim {
        /// Profile name, one of `sim::model::profile_names()`, with the options `--device`
        /// takes after it (`pixel-8-pro,thermal-speedup=100`).
        profile: String,
    },
}

impl TransportSpec {
    /// The value of the `{device}` placeholder: what the binary on the device is told.
    /// On an adb device the binary runs on the handset itself, so it is `local` there.
    pub fn device_arg(&self) -> String {
        match self {
            TransportSpec::Local | TransportSpec::Adb { .. } => "local".into(),
            TransportSpec::Sim { profile } => format!("sim:{profile}"),
        }
    }
}

impl std::fmt::Display for TransportSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportSpec::Local => write!(f, "local"),
            TransportSpec::Adb { serial } => write!(f, "adb:{serial}"),
            TransportSpec::Sim { profile } => write!(f, "sim:{profile}"),
        }
    }
}

impl FromStr for TransportSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "local" {
            return Ok(TransportSpec::Local);
        }
        if let Some(serial) = s.strip_prefix("adb:") {
            if serial.is_empty() || serial.contains('\0') {
                return Err(format!(
                    "`{s}`: an adb serial must be non-empty and contain no NUL byte"
                ));
            }
            return Ok(TransportSpec::Adb {
                serial: serial.to_string(),
            });
        }
        if let Some(profile) = s.strip_prefix("sim:") {
            let known = crate::sim::model::profile_names();
            let name = profile.split(',').next().unwrap_or_default();
            if !known.contains(&name) {
                return Err(format!(
                    "`{s}`: unknown simulated handset (known: {})",
                    known.join(", ")
                ));
            }
            crate::telemetry::DeviceSpec::parse(s).map_err(|e| format!("`{s}`: {e}"))?;
            return Ok(TransportSpec::Sim {
                profile: profile.to_string(),
            });
        }
        Err(format!(
            "`{s}`: expected `local`, `adb:<serial>` or `sim:<profile>[,thermal-speedup=K]`"
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    retries: Option<u32>,
    retry_delay_s: Option<f64>,
    step_timeout_s: Option<f64>,
    transfer_timeout_s: Option<f64>,
    remote_dir: Option<String>,
    adb: Option<String>,
    max_parallel_host: Option<usize>,
    cooldown: Option<bool>,
    cooldown_margin_c: Option<f64>,
    cooldown_timeout_s: Option<f64>,
    cooldown_poll_s: Option<f64>,
    cooldown_idle_soc_c: Option<f64>,
    cooldown_idle_skin_c: Option<f64>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
}

/// The cool-down keys, as `[defaults]` or a `[[device]]` gives them (the same six in both:
/// serde cannot refuse unknown keys across a flattened struct).
#[derive(Debug, Default)]
struct RawCooldown {
    cooldown: Option<bool>,
    cooldown_margin_c: Option<f64>,
    cooldown_timeout_s: Option<f64>,
    cooldown_poll_s: Option<f64>,
    cooldown_idle_soc_c: Option<f64>,
    cooldown_idle_skin_c: Option<f64>,
}

impl RawCooldown {
    /// This device's keys over the defaults'.
    fn over(&self, d: &RawCooldown) -> RawCooldown {
        RawCooldown {
            cooldown: self.cooldown.or(d.cooldown),
            cooldown_margin_c: self.cooldown_margin_c.or(d.cooldown_margin_c),
            cooldown_timeout_s: self.cooldown_timeout_s.or(d.cooldown_timeout_s),
            cooldown_poll_s: self.cooldown_poll_s.or(d.cooldown_poll_s),
            cooldown_idle_soc_c: self.cooldown_idle_soc_c.or(d.cooldown_idle_soc_c),
            cooldown_idle_skin_c: self.cooldown_idle_skin_c.or(d.cooldown_idle_skin_c),
        }
    }

    /// Validated settings; an error names the key.
    fn resolve(&self) -> Result<CooldownSpec, String> {
        let d = CooldownSpec::default();
        let margin_c = self.cooldown_margin_c.unwrap_or(d.margin_c);
        if !(margin_c.is_finite() && (0.0..=50.0).contains(&margin_c)) {
            return Err(format!(
                "`cooldown_margin_c` = {margin_c}: must be 0 to 50 (°C above the idle level)"
            ));
        }
        let secs = |key: &str, v: Option<f64>, default: Duration, min: f64| {
            let s = v.map_or(default.as_secs_f64(), |s| s);
            if !(s.is_finite() && s >= min && s <= 86_400.0) {
                return Err(format!(
                    "`{key}` = {s}: must be a number of seconds from {min} to 86400"
                ));
            }
            Ok(Duration::from_secs_f64(s))
        };
        let timeout = secs(
            "cooldown_timeout_s",
            self.cooldown_timeout_s,
            d.timeout,
            0.0,
        )?;
        let poll = secs("cooldown_poll_s", self.cooldown_poll_s, d.poll, 0.01)?;
        let temp = |key: &str, v: Option<f64>| match v {
            Some(t) if !(t.is_finite() && (-40.0..=150.0).contains(&t)) => Err(format!(
                "`{key}` = {t}: must be a temperature from -40 to 150 °C"
            )),
            _ => Ok(v),
        };
        Ok(CooldownSpec {
            enabled: self.cooldown.unwrap_or(d.enabled),
            margin_c,
            timeout,
            poll,
            idle_soc_c: temp("cooldown_idle_soc_c", self.cooldown_idle_soc_c)?,
            idle_skin_c: temp("cooldown_idle_skin_c", self.cooldown_idle_skin_c)?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: String,
    transport: String,
    binary: Option<PathBuf>,
    remote_dir: Option<String>,
    retries: Option<u32>,
    retry_delay_s: Option<f64>,
    step_timeout_s: Option<f64>,
    transfer_timeout_s: Option<f64>,
    sysfs_root: Option<PathBuf>,
    cooldown: Option<bool>,
    cooldown_margin_c: Option<f64>,
    cooldown_timeout_s: Option<f64>,
    cooldown_poll_s: Option<f64>,
    cooldown_idle_soc_c: Option<f64>,
    cooldown_idle_skin_c: Option<f64>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInventory {
    defaults: Option<RawDefaults>,
    #[serde(default)]
    device: Vec<RawDevice>,
}

/// One device of the inventory, with the defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSpec {
    /// Unique name; also the device's directory name in the results.
    pub name: String,
    /// How to reach it.
    pub transport: TransportSpec,
    /// Binary to push (default: the farm's `--binary`).
    pub binary: Option<PathBuf>,
    /// Working directory on the device; `None` on local/sim devices means a fresh scratch
    /// directory per run.
    pub remote_dir: Option<String>,
    /// Extra attempts after a failed one.
    pub retries: u32,
    /// Pause before each retry.
    pub retry_delay: Duration,
    /// Longest a single suite step may run.
    pub step_timeout: Duration,
    /// Longest a single push, pull or housekeeping command may take.
    pub transfer_timeout: Duration,
    /// The `adb` client to run (a name looked up on `PATH`, or a path).
    pub adb: String,
    /// Extra placeholders for the suite's step arguments (`{threads}`, ...).
    pub vars: BTreeMap<String, String>,
    /// The cool-down before each step ([`super::cooldown`]).
    pub cooldown: CooldownSpec,
    /// A `local` device's sysfs mount for its temperatures, battery and charger (default
    /// `/sys`).
    pub sysfs_root: Option<PathBuf>,
}

/// The parsed inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// File it was read from.
    pub path: PathBuf,
    /// Devices in file order.
    pub devices: Vec<DeviceSpec>,
    /// Host-side devices (`local`, `sim:*`) that may run at once (`[defaults]
    /// max_parallel_host`, default 1): they share this host's cores, so two at once slow each
    /// other (23.7 tok/s in the farm against 44 alone, as the gate issue measured). Phones
    /// over adb run on their own cores and always run in parallel.
    pub max_parallel_host: usize,
}

impl TransportSpec {
    /// Whether the device's work runs on this host's cores.
    pub fn host_side(&self) -> bool {
        matches!(self, TransportSpec::Local | TransportSpec::Sim { .. })
    }
}

/// Default remote directory on adb devices (writable by the shell user without root).
pub const DEFAULT_ADB_DIR: &str = "/data/local/tmp/pocketperf";

fn duration(path: &Path, field: &str, v: Option<f64>, default: f64) -> Result<Duration, FarmError> {
    let s = v.unwrap_or(default);
    if !(0.0..1e9).contains(&s) {
        return Err(FarmError::Inventory {
            path: path.into(),
            problem: format!("`{field}` = {s}: must be a number of seconds ≥ 0"),
        });
    }
    Ok(Duration::from_secs_f64(s))
}

impl Inventory {
    /// Reads and validates a `devices.toml`.
    pub fn from_file(path: &Path) -> Result<Self, FarmError> {
        let text = std::fs::read_to_string(path).map_err(|source| FarmError::Io {
            action: "reading",
            path: path.into(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses inventory text; `path` names the file in errors and anchors relative paths.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self, FarmError> {
        let raw: RawInventory = toml::from_str(text).map_err(|e| FarmError::Inventory {
            path: path.into(),
            problem: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let d = raw.defaults.unwrap_or(RawDefaults {
            retries: None,
            retry_delay_s: None,
            step_timeout_s: None,
            transfer_timeout_s: None,
            remote_dir: None,
            adb: None,
            max_parallel_host: None,
            cooldown: None,
            cooldown_margin_c: None,
            cooldown_timeout_s: None,
            cooldown_poll_s: None,
            cooldown_idle_soc_c: None,
            cooldown_idle_skin_c: None,
            vars: BTreeMap::new(),
        });
        let d_cool = RawCooldown {
            cooldown: d.cooldown,
            cooldown_margin_c: d.cooldown_margin_c,
            cooldown_timeout_s: d.cooldown_timeout_s,
            cooldown_poll_s: d.cooldown_poll_s,
            cooldown_idle_soc_c: d.cooldown_idle_soc_c,
            cooldown_idle_skin_c: d.cooldown_idle_skin_c,
        };
        // The defaults' own values are checked even when every device overrides them.
        d_cool.resolve().map_err(|problem| FarmError::Inventory {
            path: path.into(),
            problem: format!("[defaults]: {problem}"),
        })?;
        let max_parallel_host = d.max_parallel_host.unwrap_or(1);
        if !(1..=256).contains(&max_parallel_host) {
            return Err(FarmError::Inventory {
                path: path.into(),
                problem: format!("`max_parallel_host` = {max_parallel_host}: must be 1 to 256"),
            });
        }
        if raw.device.is_empty() {
            return Err(FarmError::Inventory {
                path: path.into(),
                problem: "no [[device]] entries".into(),
            });
        }
        let mut devices: Vec<DeviceSpec> = Vec::with_capacity(raw.device.len());
        for (i, r) in raw.device.into_iter().enumerate() {
            let bad = |problem: String| FarmError::Inventory {
                path: path.into(),
                problem: format!("device #{} (`{}`): {problem}", i + 1, r.name),
            };
            if !valid_name(&r.name) {
                return Err(bad(
                    "name must match [A-Za-z0-9][A-Za-z0-9._-]* (it becomes a directory name)"
                        .into(),
                ));
            }
            if devices.iter().any(|x| x.name == r.name) {
                return Err(bad("duplicate device name".into()));
            }
            let transport: TransportSpec = r
                .transport
                .parse()
                .map_err(|e| bad(format!("transport {e}")))?;
            let remote_dir = r.remote_dir.or_else(|| d.remote_dir.clone());
            if let Some(dir) = &remote_dir
                && (dir.is_empty() || dir.contains('\0'))
            {
                return Err(bad(
                    "remote_dir must be non-empty and contain no NUL byte".into()
                ));
            }
            let remote_dir = match (&transport, remote_dir) {
                (TransportSpec::Adb { .. }, None) => Some(DEFAULT_ADB_DIR.to_string()),
                (_, dir) => dir,
            };
            let mut vars = d.vars.clone();
            vars.extend(r.vars);
            for k in vars.keys() {
                if BUILTIN_PLACEHOLDERS.contains(&k.as_str()) {
                    return Err(bad(format!("vars.{k} would shadow a built-in placeholder")));
                }
            }
            let cooldown = RawCooldown {
                cooldown: r.cooldown,
                cooldown_margin_c: r.cooldown_margin_c,
                cooldown_timeout_s: r.cooldown_timeout_s,
                cooldown_poll_s: r.cooldown_poll_s,
                cooldown_idle_soc_c: r.cooldown_idle_soc_c,
                cooldown_idle_skin_c: r.cooldown_idle_skin_c,
            }
            .over(&d_cool)
            .resolve()
            .map_err(bad)?;
            let sysfs_root = match (&transport, r.sysfs_root) {
                (TransportSpec::Local, Some(p)) => {
                    Some(if p.is_relative() { base.join(p) } else { p })
                }
                (_, Some(_)) => {
                    return Err(bad(
                        "`sysfs_root` applies to `local` devices only (a phone is read through adb, a simulated handset from its own tree)".into(),
                    ));
                }
                (_, None) => None,
            };
            let name = r.name.clone();
            devices.push(DeviceSpec {
                name,
                transport,
                binary: r
                    .binary
                    .map(|b| if b.is_relative() { base.join(b) } else { b }),
                remote_dir,
                retries: r.retries.or(d.retries).unwrap_or(1),
                retry_delay: duration(
                    path,
                    "retry_delay_s",
                    r.retry_delay_s.or(d.retry_delay_s),
                    10.0,
                )?,
                step_timeout: duration(
                    path,
                    "step_timeout_s",
                    r.step_timeout_s.or(d.step_timeout_s),
                    3600.0,
                )?,
                transfer_timeout: duration(
                    path,
                    "transfer_timeout_s",
                    r.transfer_timeout_s.or(d.transfer_timeout_s),
                    600.0,
                )?,
                adb: d.adb.clone().unwrap_or_else(|| "adb".into()),
                vars,
                cooldown,
                sysfs_root,
            });
        }
        Ok(Inventory {
            path: path.into(),
            devices,
            max_parallel_host,
        })
    }
}
