//! The governor's sysfs side: the thermal-zone sensor ([`ZoneSensor`], one zone or the max
//! over several) and the opt-in frequency-cap actuator ([`SysfsFreqCap`], cpufreq
//! `scaling_max_freq` / kgsl `max_gpuclk`, restored on drop).

use super::*;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One thermal zone a [`ZoneSensor`] reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoneSpec {
    /// The zone's `type`.
    pub name: String,
    /// Its `temp` file.
    pub path: PathBuf,
    /// °C per raw unit: 0.001 for the ABI's millidegrees, 1 for drivers that report degrees.
    pub scale: f64,
}

/// A sysfs thermal sensor: one zone, or the maximum over several (e.g. every SoC zone, or
/// every skin zone). Zones that fail to read or read implausibly are left out of the
/// maximum and listed by [`ZoneSensor::failed`]; when none reads, the sensor reports a
/// dropout (`None`) and the governor holds its output.
#[derive(Debug, Clone)]
pub struct ZoneSensor {
    zones: Vec<ZoneSpec>,
    failed: Vec<String>,
}

impl ZoneSensor {
    /// Errors when `zones` is empty or a scale is not a positive number.
    pub fn new(zones: Vec<ZoneSpec>) -> Result<Self> {
        if zones.is_empty() {
            return Err(Error::Governor(
                "no thermal zone selected for the governor's sensor".into(),
            ));
        }
        if let Some(z) = zones
            .iter()
            .find(|z| !(z.scale.is_finite() && z.scale > 0.0))
        {
            return Err(Error::InvalidArgument {
                what: format!("zone {} scale", z.name),
                reason: format!("must be a positive number (got {})", z.scale),
            });
        }
        Ok(Self {
            zones,
            failed: Vec::new(),
        })
    }

    pub fn zones(&self) -> &[ZoneSpec] {
        &self.zones
    }

    /// Zones that did not give a plausible reading at the last read.
    pub fn failed(&self) -> &[String] {
        &self.failed
    }

    fn read_zone(z: &ZoneSpec) -> Option<f64> {
        let text = fs::read_to_string(&z.path).ok()?;
        let raw: i64 = text.trim().parse().ok()?;
        plausible(Some(raw as f64 * z.scale))
    }
}

impl ThermalSensor for ZoneSensor {
    fn read(&mut self) -> Option<f64> {
        self.failed.clear();
        let mut best: Option<f64> = None;
        for z in &self.zones {
            match Self::read_zone(z) {
                Some(t) => best = Some(best.map_or(t, |b: f64| b.max(t))),
                None => self.failed.push(z.name.clone()),
            }
        }
        best
    }
}

/// One sysfs frequency-cap file and what it held before we touched it.
#[derive(Debug, Clone)]
struct CapFile {
    path: PathBuf,
    original: String,
    /// Allowed caps, highest first; `steps[k]` is written at level k.
    steps: Vec<u64>,
}

/// Frequency-cap actuator over sysfs (`cpufreq/policy*/scaling_max_freq`, in kHz, and
/// `kgsl-3d0/max_gpuclk`, in Hz). Used only when explicitly enabled and the files are
/// writable; restores the original values on [`SysfsFreqCap::restore`] and on drop.
#[derive(Debug)]
pub struct SysfsFreqCap {
    files: Vec<CapFile>,
    levels: usize,
    dirty: bool,
    current: Option<usize>,
}

fn read_trim(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
}

fn read_u64(path: &Path) -> Result<u64> {
    let s = read_trim(path)?;
    s.parse()
        .map_err(|_| Error::Governor(format!("{}: not an integer: `{s}`", path.display())))
}

fn read_list(path: &Path) -> Option<Vec<u64>> {
    let s = fs::read_to_string(path).ok()?;
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (!v.is_empty()).then_some(v)
}

fn writable(path: &Path) -> bool {
    fs::OpenOptions::new().write(true).open(path).is_ok()
}

/// `levels` caps from `max` down to `min`: the available frequencies themselves (highest
/// first) when there are exactly `levels` of them, else evenly spaced, each snapped down to an
/// available frequency when the list is known.
pub(super) fn cap_steps(min: u64, max: u64, available: Option<&[u64]>, levels: usize) -> Vec<u64> {
    if let Some(list) = available
        && list.len() == levels
    {
        let mut v = list.to_vec();
        v.sort_unstable_by(|a, b| b.cmp(a));
        return v;
    }
    (0..levels)
        .map(|k| {
            let frac = if levels > 1 {
                k as f64 / (levels - 1) as f64
            } else {
                0.0
            };
            let raw = max as f64 - frac * (max.saturating_sub(min)) as f64;
            let raw = raw.round() as u64;
            match available {
                Some(list) => list
                    .iter()
                    .copied()
                    .filter(|f| *f <= raw)
                    .max()
                    .unwrap_or(min),
                None => raw,
            }
        })
        .collect()
}

impl SysfsFreqCap {
    /// Find writable cap files under the sysfs mount `root` (`/sys` on a device; a fixture or
    /// simulated tree in tests), as the telemetry probe does.
    /// `enabled` must be true (an explicit user opt-in); errors if nothing writable is found.
    pub fn discover(root: &Path, enabled: bool, levels: usize) -> Result<Self> {
        if !enabled {
            return Err(Error::Governor(
                "sysfs frequency caps are disabled; enable them explicitly to let the governor write scaling_max_freq".into(),
            ));
        }
        if levels == 0 {
            return Err(Error::Governor("frequency cap needs ≥ 1 level".into()));
        }
        let mut files = Vec::new();
        let cpufreq = root.join("devices/system/cpu/cpufreq");
        if let Ok(rd) = fs::read_dir(&cpufreq) {
            let mut dirs: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("policy"))
                })
                .collect();
            dirs.sort();
            for d in dirs {
                let cap = d.join("scaling_max_freq");
                if !writable(&cap) {
                    continue;
                }
                let (Ok(min), Ok(max), Ok(original)) = (
                    read_u64(&d.join("cpuinfo_min_freq")),
                    read_u64(&d.join("cpuinfo_max_freq")),
                    read_trim(&cap),
                ) else {
                    continue;
                };
                let avail = read_list(&d.join("scaling_available_frequencies"));
                files.push(CapFile {
                    path: cap,
                    original,
                    steps: cap_steps(min, max, avail.as_deref(), levels),
                });
            }
        }
        let kgsl = root.join("class/kgsl/kgsl-3d0");
        let gpu_cap = kgsl.join("max_gpuclk");
        if writable(&gpu_cap)
            && let (Some(avail), Ok(original)) = (
                read_list(&kgsl.join("gpu_available_frequencies")),
                read_trim(&gpu_cap),
            )
        {
            let min = avail.iter().copied().min().unwrap_or(0);
            let max = avail.iter().copied().max().unwrap_or(0);
            files.push(CapFile {
                path: gpu_cap,
                original,
                steps: cap_steps(min, max, Some(&avail), levels),
            });
        }
        if files.is_empty() {
            return Err(Error::Governor(format!(
                "no writable scaling_max_freq or max_gpuclk under {} (needs root); use the duty-cycle actuator",
                root.display()
            )));
        }
        Ok(Self {
            files,
            levels,
            dirty: false,
            current: None,
        })
    }

    /// (file, value found at discovery) for every cap file: what a signal handler must write
    /// back if the process is interrupted.
    pub fn restore_plan(&self) -> Vec<(PathBuf, String)> {
        self.files
            .iter()
            .map(|f| (f.path.clone(), f.original.clone()))
            .collect()
    }

    /// Paths this actuator writes.
    pub fn paths(&self) -> Vec<&Path> {
        self.files.iter().map(|f| f.path.as_path()).collect()
    }

    /// The cap written to each file at `level`.
    pub fn caps_at(&self, level: usize) -> Vec<u64> {
        self.files
            .iter()
            .map(|f| f.steps[level.min(self.levels - 1)])
            .collect()
    }

    /// Write back the values found at discovery. Call from a Ctrl-C handler; also runs on drop.
    pub fn restore(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let mut first_err = None;
        for f in &self.files {
            if let Err(source) = fs::write(&f.path, &f.original) {
                first_err.get_or_insert(Error::Io {
                    path: f.path.clone(),
                    source,
                });
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => {
                self.dirty = false;
                self.current = None;
                Ok(())
            }
        }
    }
}

impl Actuator for SysfsFreqCap {
    fn levels(&self) -> usize {
        self.levels
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels {
            return Err(Error::Governor(format!(
                "cap level {level} ≥ {} levels",
                self.levels
            )));
        }
        self.dirty = true;
        for f in &self.files {
            fs::write(&f.path, f.steps[level].to_string()).map_err(|source| Error::Io {
                path: f.path.clone(),
                source,
            })?;
        }
        self.current = Some(level);
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            caps: self.current.map(|l| self.caps_at(l)).unwrap_or_default(),
            ..Default::default()
        }
    }
}

impl Drop for SysfsFreqCap {
    fn drop(&mut self) {
        // Best effort: a failure here cannot be reported; `restore()` reports it.
        let _ = self.restore();
    }
}
