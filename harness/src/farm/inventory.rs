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
    /// A simulated handset run on this host (`--device sim:<profile>`).
    Sim {
        /// Profile name, one of `sim::model::profile_names()`.
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
            if !known.contains(&profile) {
                return Err(format!(
                    "`{s}`: unknown simulated handset (known: {})",
                    known.join(", ")
                ));
            }
            return Ok(TransportSpec::Sim {
                profile: profile.to_string(),
            });
        }
        Err(format!(
            "`{s}`: expected `local`, `adb:<serial>` or `sim:<profile>`"
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
    #[serde(default)]
    vars: BTreeMap<String, String>,
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
            vars: BTreeMap::new(),
        });
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
            });
        }
        Ok(Inventory {
            path: path.into(),
            devices,
            max_parallel_host,
        })
    }
}
