//! A simulated handset's sysfs tree: the files the telemetry probe and sampler read, laid out
//! like the shared fixture snapshot of the same handset, rewritten atomically (write to a
//! staging file, then rename) every time the model advances.
//!
//! Ground truth: the model integrates exact energy (`HandsetModel::energy_j`). The counters in
//! the tree are consistent with it and quantised like real ones: the battery `charge_counter`
//! in whole µAh (remaining charge), Pixel ODPM rails in whole µW·s, whose sum over rails is
//! the model's energy (the model's power is split over rails by fixed shares of its idle,
//! CPU-dynamic and memory components). Temperatures of on-die zones follow the die node,
//! board NTCs the skin node, each scaled about the ambient by a fixed factor; the hottest SoC
//! zone is the die node and the hottest skin zone is the skin node exactly.
//!
//! Size: over 800 lines: the whole simulated tree of both handsets (thermal, power_supply,
//! cpufreq, GPU, ODPM) must mirror the fixtures file for file, and it is read as one layout.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::SimError;
use super::model::{Activity, HandsetModel, StepOutput, profile, profile_names};

#[derive(Clone, Copy)]
enum Node {
    Die(f64),
    Skin(f64),
    /// A zone that is not a temperature (BCL level): constant raw value.
    Const(i64),
}

#[derive(Clone, Copy)]
enum Share {
    Idle(f64),
    Dyn(f64),
    Mem(f64),
}

struct Rail {
    ch: u32,
    rail: &'static str,
    subsystem: &'static str,
    share: Share,
}

struct Pmic {
    name: &'static str,
    iio_index: u32,
    rails: &'static [Rail],
}

#[derive(Clone, Copy, PartialEq)]
enum GpuLayout {
    Adreno,
    Mali,
}

struct Layout {
    zones: &'static [(&'static str, Node)],
    /// (policy index, related cpus, hardware max kHz); the last is the prime cluster whose
    /// table is the model's OPP table itself.
    policies: &'static [(u32, &'static [u32], u32)],
    governor: &'static str,
    driver: &'static str,
    gpu: GpuLayout,
    pmics: &'static [Pmic],
    battery_power_now: bool,
    battery_current_avg: bool,
    tz_by_name: bool,
}

const SNAPDRAGON: Layout = Layout {
    zones: &[
        ("aoss-0", Node::Die(0.55)),
        ("cpuss-0", Node::Die(0.85)),
        ("cpu-2-0-0", Node::Die(0.97)),
        ("cpu-1-0-0", Node::Die(0.95)),
        ("cpu-1-2-0", Node::Die(1.0)),
        ("cpu-0-0-0", Node::Die(0.75)),
        ("gpuss-0", Node::Die(0.7)),
        ("gpuss-1", Node::Die(0.68)),
        ("nsphmx-0", Node::Die(0.6)),
        ("ddr", Node::Die(0.65)),
        ("skin-msm-therm", Node::Skin(1.0)),
        ("xo-therm", Node::Skin(0.95)),
        ("quiet-therm", Node::Skin(0.85)),
        ("battery", Node::Skin(0.7)),
        ("pm8550b-ibat-lvl0", Node::Const(0)),
    ],
    policies: &[
        (0, &[0, 1], 2_265_600),
        (2, &[2, 3, 4], 3_148_800),
        (5, &[5, 6], 2_956_800),
        (7, &[7], 0),
    ],
    governor: "walt",
    driver: "qcom-cpufreq-hw",
    gpu: GpuLayout::Adreno,
    pmics: &[],
    battery_power_now: true,
    battery_current_avg: false,
    tz_by_name: false,
};

const PIXEL_MAIN: &[Rail] = &[
    Rail {
        ch: 0,
        rail: "S2M_VDD_CPUCL2",
        subsystem: "CPU(BIG)",
        share: Share::Dyn(0.55),
    },
    Rail {
        ch: 1,
        rail: "S3M_VDD_CPUCL1",
        subsystem: "CPU(MID)",
        share: Share::Dyn(0.35),
    },
    Rail {
        ch: 2,
        rail: "S4M_VDD_CPUCL0",
        subsystem: "CPU(LITTLE)",
        share: Share::Dyn(0.10),
    },
    Rail {
        ch: 3,
        rail: "S5M_VDD_INT",
        subsystem: "INT",
        share: Share::Idle(0.15),
    },
    Rail {
        ch: 4,
        rail: "S1M_VDD_MIF",
        subsystem: "MIF",
        share: Share::Mem(0.4),
    },
    Rail {
        ch: 5,
        rail: "S7M_VDD_TPU",
        subsystem: "TPU",
        share: Share::Idle(0.03),
    },
    Rail {
        ch: 6,
        rail: "S8M_LLDO2",
        subsystem: "LDO",
        share: Share::Idle(0.04),
    },
    Rail {
        ch: 7,
        rail: "VSYS_PWR_MODEM",
        subsystem: "Modem",
        share: Share::Idle(0.10),
    },
];

const PIXEL_SUB: &[Rail] = &[
    Rail {
        ch: 0,
        rail: "S2S_VDD_G3D",
        subsystem: "GPU",
        share: Share::Idle(0.05),
    },
    Rail {
        ch: 1,
        rail: "S4S_VDD2H_MEM",
        subsystem: "DDR",
        share: Share::Mem(0.4),
    },
    Rail {
        ch: 2,
        rail: "S5S_VDDQ_MEM",
        subsystem: "DDR",
        share: Share::Mem(0.2),
    },
    Rail {
        ch: 3,
        rail: "S8S_VDD_G3D_L2",
        subsystem: "GPU",
        share: Share::Idle(0.02),
    },
    Rail {
        ch: 4,
        rail: "S9S_VDD_AOC",
        subsystem: "AOC",
        share: Share::Idle(0.08),
    },
    Rail {
        ch: 5,
        rail: "L2S_VDD_AOC_RET",
        subsystem: "AOC",
        share: Share::Idle(0.01),
    },
    Rail {
        ch: 6,
        rail: "VSYS_PWR_DISPLAY",
        subsystem: "Display",
        share: Share::Idle(0.42),
    },
    Rail {
        ch: 7,
        rail: "VSYS_PWR_WLAN_BT",
        subsystem: "WLAN-BT",
        share: Share::Idle(0.10),
    },
];

const PIXEL: Layout = Layout {
    zones: &[
        ("BIG", Node::Die(1.0)),
        ("MID", Node::Die(0.9)),
        ("LITTLE", Node::Die(0.75)),
        ("G3D", Node::Die(0.7)),
        ("TPU", Node::Die(0.6)),
        ("ISP", Node::Die(0.55)),
        ("soc_therm", Node::Skin(1.1)),
        ("north_therm", Node::Skin(0.95)),
        ("cam_therm", Node::Skin(0.9)),
        ("charge_therm", Node::Skin(0.85)),
        ("disp_therm", Node::Skin(0.9)),
        ("quiet_therm", Node::Skin(1.0)),
        ("usb_pwr_therm", Node::Skin(0.8)),
        ("neutral_therm", Node::Skin(0.9)),
        ("battery", Node::Skin(0.7)),
    ],
    policies: &[
        (0, &[0, 1, 2, 3], 1_704_000),
        (4, &[4, 5, 6, 7], 2_367_000),
        (8, &[8], 0),
    ],
    governor: "sched_pixel",
    driver: "exynos_acme",
    gpu: GpuLayout::Mali,
    // Index order as on the snapshot: device0 is the sub PMIC.
    pmics: &[
        Pmic {
            name: "s2mpg15",
            iio_index: 0,
            rails: PIXEL_SUB,
        },
        Pmic {
            name: "s2mpg14",
            iio_index: 1,
            rails: PIXEL_MAIN,
        },
    ],
    battery_power_now: false,
    battery_current_avg: true,
    tz_by_name: true,
};

/// ODPM measurement starts this long after boot (as on the snapshot), ms.
const ODPM_START_MS: u64 = 15_004;
/// The simulated handset was booted this long before the model's t = 0, ms.
const BOOT_OFFSET_MS: f64 = 20_000.0;

/// A simulated handset: model plus sysfs tree in a temporary directory (removed on drop).
pub struct SimDevice {
    _dir: tempfile::TempDir,
    root: PathBuf,
    staging: PathBuf,
    layout: &'static Layout,
    model: HandsetModel,
    /// Accumulated µJ per PMIC per rail (exact; the files hold the floor).
    rail_uj: Vec<Vec<f64>>,
    last_energy_j: f64,
    written: HashMap<PathBuf, String>,
    staged: u64,
}

impl SimDevice {
    /// Builds the tree for `profile` (`snapdragon-8gen3`, `pixel-8-pro`, with or without a
    /// `sim:` prefix), idle and at ambient temperature.
    pub fn new(name: &str) -> Result<Self, SimError> {
        let name = name.strip_prefix("sim:").unwrap_or(name);
        let prof = profile(name).ok_or_else(|| SimError::UnknownProfile {
            name: name.to_string(),
            known: profile_names().join(", "),
        })?;
        Self::with_profile(prof)
    }

    /// Builds the tree of the handset `prof` describes (a built-in profile, perhaps changed:
    /// [`super::model::HandsetProfile::with_thermal_speedup`]); its name picks the layout.
    pub fn with_profile(prof: super::model::HandsetProfile) -> Result<Self, SimError> {
        let name = prof.name;
        let unknown = || SimError::UnknownProfile {
            name: name.to_string(),
            known: profile_names().join(", "),
        };
        let layout: &'static Layout = match name {
            "snapdragon-8gen3" => &SNAPDRAGON,
            "pixel-8-pro" => &PIXEL,
            _ => return Err(unknown()),
        };
        // Memory-backed like a real sysfs where a tmpfs exists (the tree is rewritten every
        // step); the temp dir otherwise.
        let shm = Path::new("/dev/shm");
        let builder = || {
            let mut b = tempfile::Builder::new();
            b.prefix("pocketperf-sim-");
            b
        };
        let dir = match shm.is_dir().then(|| builder().tempdir_in(shm)) {
            Some(Ok(d)) => d,
            _ => builder().tempdir().map_err(|source| SimError::Write {
                path: std::env::temp_dir(),
                source,
            })?,
        };
        let root = dir.path().join("sys");
        let staging = dir.path().join("staging");
        for d in [&root, &staging] {
            fs::create_dir_all(d).map_err(|source| SimError::Write {
                path: d.clone(),
                source,
            })?;
        }
        let mut dev = Self {
            _dir: dir,
            root,
            staging,
            layout,
            rail_uj: layout
                .pmics
                .iter()
                .map(|p| vec![0.0; p.rails.len()])
                .collect(),
            model: HandsetModel::new(prof),
            last_energy_j: 0.0,
            written: HashMap::new(),
            staged: 0,
        };
        dev.write_static()?;
        dev.write_dynamic()?;
        Ok(dev)
    }

    /// The sysfs root to probe and sample.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The model (ground truth).
    pub fn model(&self) -> &HandsetModel {
        &self.model
    }

    /// Ground-truth energy since power-on, J.
    pub fn energy_j(&self) -> f64 {
        self.model.energy_j()
    }

    /// Simulated time since power-on, s.
    pub fn time_s(&self) -> f64 {
        self.model.time_s()
    }

    /// Advances the model by `dt_s` with `activity` held constant and rewrites the tree.
    pub fn step(&mut self, dt_s: f64, activity: Activity) -> Result<StepOutput, SimError> {
        let out = self.model.step(dt_s, activity);
        let de_j = (out.energy_j - self.last_energy_j).max(0.0);
        self.last_energy_j = out.energy_j;
        if !self.layout.pmics.is_empty() && de_j > 0.0 {
            let p = self.model.profile();
            let level = out.freq_level;
            let busy = out.busy;
            let mem = busy * p.mem_w_at_max * p.freq_ratio(level);
            let dynamic = busy * p.active_w(level) - mem;
            let idle = p.idle_w;
            let total = idle + dynamic + mem;
            if total > 0.0 {
                let uj = de_j * 1e6;
                for (pi, pmic) in self.layout.pmics.iter().enumerate() {
                    for (ri, rail) in pmic.rails.iter().enumerate() {
                        let frac = match rail.share {
                            Share::Idle(s) => s * idle / total,
                            Share::Dyn(s) => s * dynamic / total,
                            Share::Mem(s) => s * mem / total,
                        };
                        self.rail_uj[pi][ri] += uj * frac;
                    }
                }
            }
        }
        self.write_dynamic()?;
        Ok(out)
    }

    fn put(&mut self, rel: &str, content: String) -> Result<(), SimError> {
        let path = self.root.join(rel);
        if self.written.get(&path) == Some(&content) {
            return Ok(());
        }
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SimError::Write { path, source }
        };
        // A file written before has its directory already.
        if !self.written.contains_key(&path)
            && let Some(parent) = path.parent()
        {
            fs::create_dir_all(parent).map_err(err(parent))?;
        }
        self.staged += 1;
        let tmp = self.staging.join(self.staged.to_string());
        fs::write(&tmp, &content).map_err(err(&tmp))?;
        fs::rename(&tmp, &path).map_err(err(&path))?;
        self.written.insert(path, content);
        Ok(())
    }

    fn link(&self, rel: &str, target: &str) -> Result<(), SimError> {
        let path = self.root.join(rel);
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SimError::Write { path, source }
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(err(parent))?;
        }
        std::os::unix::fs::symlink(target, &path).map_err(err(&path))
    }

    fn policy_table(&self, hw_max_khz: u32) -> Vec<u32> {
        let opps = &self.model.profile().opps;
        let top = opps.last().map_or(1, |o| o.freq_khz).max(1);
        if hw_max_khz == 0 {
            return opps.iter().map(|o| o.freq_khz).collect();
        }
        opps.iter()
            .map(|o| {
                let f = u64::from(o.freq_khz) * u64::from(hw_max_khz) / u64::from(top);
                // Round to the 100 kHz grid real tables sit on.
                ((f + 50) / 100 * 100) as u32
            })
            .collect()
    }

    fn write_static(&mut self) -> Result<(), SimError> {
        let l = self.layout;
        for (i, (name, _)) in l.zones.iter().enumerate() {
            let z = format!("class/thermal/thermal_zone{i}");
            self.put(&format!("{z}/type"), format!("{name}\n"))?;
            self.put(&format!("{z}/mode"), "enabled\n".into())?;
            self.put(&format!("{z}/policy"), "step_wise\n".into())?;
            if l.tz_by_name {
                self.link(
                    &format!("dev/thermal/tz-by-name/{name}"),
                    &format!("../../../class/thermal/thermal_zone{i}"),
                )?;
            }
        }
        for &(idx, cpus, hw_max) in l.policies {
            let p = format!("devices/system/cpu/cpufreq/policy{idx}");
            let table = self.policy_table(hw_max);
            let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
            let freqs: String = table.iter().map(|f| format!("{f} ")).collect();
            self.put(
                &format!("{p}/related_cpus"),
                format!("{}\n", list.join(" ")),
            )?;
            self.put(
                &format!("{p}/affected_cpus"),
                format!("{}\n", list.join(" ")),
            )?;
            self.put(
                &format!("{p}/scaling_available_frequencies"),
                format!("{freqs}\n"),
            )?;
            let (lo, hi) = (table.first().copied(), table.last().copied());
            self.put(
                &format!("{p}/cpuinfo_min_freq"),
                format!("{}\n", lo.unwrap_or(0)),
            )?;
            self.put(
                &format!("{p}/cpuinfo_max_freq"),
                format!("{}\n", hi.unwrap_or(0)),
            )?;
            self.put(
                &format!("{p}/scaling_min_freq"),
                format!("{}\n", lo.unwrap_or(0)),
            )?;
            self.put(
                &format!("{p}/scaling_governor"),
                format!("{}\n", l.governor),
            )?;
            self.put(&format!("{p}/scaling_driver"), format!("{}\n", l.driver))?;
            for c in cpus {
                self.link(
                    &format!("devices/system/cpu/cpu{c}/cpufreq"),
                    &format!("../cpufreq/policy{idx}"),
                )?;
            }
        }
        match l.gpu {
            GpuLayout::Adreno => {
                let g = "class/kgsl/kgsl-3d0";
                self.put(&format!("{g}/gpu_model"), "Adreno750v2\n".into())?;
                self.put(&format!("{g}/gpuclk"), "231000000\n".into())?;
                self.put(&format!("{g}/devfreq/cur_freq"), "231000000\n".into())?;
                self.put(&format!("{g}/max_gpuclk"), "903000000\n".into())?;
                self.put(&format!("{g}/gpu_busy_percentage"), "0 %\n".into())?;
                self.put(
                    &format!("{g}/gpu_available_frequencies"),
                    "903000000 680000000 231000000 \n".into(),
                )?;
            }
            GpuLayout::Mali => {
                let g = "devices/platform/1f000000.mali";
                self.put(&format!("{g}/cur_freq"), "150000\n".into())?;
                self.put(&format!("{g}/max_freq"), "890000\n".into())?;
                self.put(&format!("{g}/min_freq"), "150000\n".into())?;
                self.put(&format!("{g}/scaling_max_freq"), "890000\n".into())?;
                self.put(
                    &format!("{g}/available_frequencies"),
                    "150000 471000 890000\n".into(),
                )?;
                self.put(&format!("{g}/utilization"), "0\n".into())?;
                self.link(
                    "class/misc/mali0/device",
                    "../../../devices/platform/1f000000.mali",
                )?;
            }
        }
        for pmic in l.pmics {
            let d = odpm_dir(pmic);
            self.put(&format!("{d}/name"), format!("{}-odpm\n", pmic.name))?;
            self.put(&format!("{d}/sampling_rate"), "1000.000000\n".into())?;
            let rails: String = pmic
                .rails
                .iter()
                .map(|r| format!("CH{}[{}]:{}\n", r.ch, r.rail, r.subsystem))
                .collect();
            self.put(&format!("{d}/enabled_rails"), rails)?;
            let start: String = pmic
                .rails
                .iter()
                .map(|r| format!("CH{}[{}], {ODPM_START_MS}\n", r.ch, r.rail))
                .collect();
            self.put(&format!("{d}/measurement_start"), start)?;
            self.link(
                &format!("bus/iio/devices/iio:device{}", pmic.iio_index),
                &format!("../../../{d}"),
            )?;
        }
        let b = "class/power_supply/battery";
        let mah = self.model.profile().battery_mah;
        self.put(&format!("{b}/type"), "Battery\n".into())?;
        self.put(&format!("{b}/present"), "1\n".into())?;
        self.put(&format!("{b}/technology"), "Li-ion\n".into())?;
        self.put(&format!("{b}/health"), "Good\n".into())?;
        self.put(&format!("{b}/status"), "Discharging\n".into())?;
        self.put(
            &format!("{b}/charge_full"),
            format!("{}\n", (mah * 1000.0).round() as i64),
        )?;
        let u = "class/power_supply/usb";
        self.put(&format!("{u}/type"), "USB\n".into())?;
        self.put(&format!("{u}/online"), "0\n".into())?;
        self.put(&format!("{u}/present"), "0\n".into())?;
        Ok(())
    }

    fn write_dynamic(&mut self) -> Result<(), SimError> {
        let l = self.layout;
        let amb = self.model.profile().ambient_c;
        let die = self.model.die_c();
        let skin = self.model.skin_c();
        let mut battery_c = skin;
        for (i, (name, node)) in l.zones.iter().enumerate() {
            let raw = match *node {
                Node::Die(k) => ((amb + k * (die - amb)) * 1000.0).round() as i64,
                Node::Skin(k) => ((amb + k * (skin - amb)) * 1000.0).round() as i64,
                Node::Const(v) => v,
            };
            if *name == "battery" {
                battery_c = raw as f64 / 1000.0;
            }
            self.put(
                &format!("class/thermal/thermal_zone{i}/temp"),
                format!("{raw}\n"),
            )?;
        }
        let level = self.model.freq_level();
        let cap = self.model.vendor_cap_level();
        for &(idx, _, hw_max) in l.policies {
            let table = self.policy_table(hw_max);
            let p = format!("devices/system/cpu/cpufreq/policy{idx}");
            let at = |lv: usize| table.get(lv.min(table.len().saturating_sub(1))).copied();
            self.put(
                &format!("{p}/scaling_cur_freq"),
                format!("{}\n", at(level).unwrap_or(0)),
            )?;
            self.put(
                &format!("{p}/scaling_max_freq"),
                format!("{}\n", at(cap).unwrap_or(0)),
            )?;
        }
        // Battery, ABI conventions as on both snapshots: µV, µA negative on discharge, µAh.
        let m = &self.model;
        let v_uv = (m.battery_v() * 1e6).round() as i64;
        let i_ua = -(m.battery_a() * 1e6).round() as i64;
        let full_uah = m.profile().battery_soc0 * m.profile().battery_mah * 1000.0;
        let counter_uah = (full_uah - m.charge_drawn_c() / 3.6e-3).floor() as i64;
        let capacity = (m.battery_soc() * 100.0).round() as i64;
        let power_uw = -(m.battery_v() * m.battery_a() * 1e6).round() as i64;
        let b = "class/power_supply/battery";
        self.put(&format!("{b}/voltage_now"), format!("{v_uv}\n"))?;
        self.put(&format!("{b}/current_now"), format!("{i_ua}\n"))?;
        self.put(&format!("{b}/charge_counter"), format!("{counter_uah}\n"))?;
        self.put(&format!("{b}/capacity"), format!("{capacity}\n"))?;
        self.put(
            &format!("{b}/temp"),
            format!("{}\n", (battery_c * 10.0).round() as i64),
        )?;
        if l.battery_power_now {
            self.put(&format!("{b}/power_now"), format!("{power_uw}\n"))?;
        }
        if l.battery_current_avg {
            self.put(&format!("{b}/current_avg"), format!("{i_ua}\n"))?;
        }
        let now_ms = (BOOT_OFFSET_MS + self.model.time_s() * 1000.0).round() as u64;
        for (pi, pmic) in l.pmics.iter().enumerate() {
            let mut text = format!("t={now_ms}\n");
            for (ri, r) in pmic.rails.iter().enumerate() {
                let uws = self.rail_uj[pi][ri].floor() as u64;
                text.push_str(&format!(
                    "CH{}(T={})[{}], {uws}\n",
                    r.ch,
                    now_ms.saturating_sub(ODPM_START_MS),
                    r.rail
                ));
            }
            self.put(&format!("{}/energy_value", odpm_dir(pmic)), text)?;
        }
        Ok(())
    }
}

fn odpm_dir(p: &Pmic) -> String {
    format!(
        "devices/platform/acpm_mfd_bus/{0}-meter/{0}-odpm/iio:device{1}",
        p.name, p.iio_index
    )
}

/// Where the driver thread learns what the workload is doing.
pub enum ActivitySource {
    /// A busy-nanoseconds counter the runtime increments while it computes, and optionally
    /// the frequency level it asks for (else the fastest).
    BusyCounter {
        /// Cumulative busy ns.
        busy_ns: Arc<AtomicU64>,
        /// Requested OPP level.
        freq_level: Option<Arc<AtomicUsize>>,
    },
    /// The whole process's CPU time (less the driver thread's own) over `threads` cores: the
    /// fraction of the runtime's thread capacity in use, which is what draws power on a
    /// phone, whatever the scenario. `freq_level` as above.
    ProcessCpu {
        /// Worker threads of the runtime (the capacity a busy fraction of 1 means).
        threads: usize,
        /// Requested OPP level.
        freq_level: Option<Arc<AtomicUsize>>,
        /// The link to a decode loop paced to the handset's OPP: its stretches count as busy
        /// CPU time, and the OPP in force is published to it after every step.
        paced: Option<Arc<super::pace::SimPace>>,
    },
    /// A closure called each tick with the elapsed seconds.
    Closure(Box<dyn FnMut(f64) -> Activity + Send>),
}

/// One ground-truth point of a driven handset: the shared clock (ns) at the end of a step and
/// the model's exact energy since power-on (J).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruthPoint {
    /// Caller clock, ns.
    pub t_ns: u64,
    /// Exact energy since power-on, J.
    pub energy_j: f64,
}

/// The most ground-truth points a driver keeps; past it the trace is thinned by half (a
/// 72-hour soak stays bounded while a benchmark run keeps every step).
pub const MAX_TRUTH_POINTS: usize = 1 << 20;

/// CPU time of a clock (`CLOCK_PROCESS_CPUTIME_ID`, `CLOCK_THREAD_CPUTIME_ID`), ns; 0 if the
/// clock is unsupported.
pub fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; an unsupported
    // clock id makes the call fail with a return code, which is checked.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Ground-truth energy at `t_ns`, linearly interpolated between trace points (power is
/// constant within a driver step, so this is exact up to the step's own split); `None`
/// outside the trace.
pub fn truth_energy_at(trace: &[TruthPoint], t_ns: u64) -> Option<f64> {
    let first = trace.first()?;
    let last = trace.last()?;
    if t_ns < first.t_ns || t_ns > last.t_ns {
        return None;
    }
    let i = trace.partition_point(|p| p.t_ns < t_ns);
    let b = trace[i];
    if b.t_ns == t_ns || i == 0 {
        return Some(b.energy_j);
    }
    let a = trace[i - 1];
    let x = (t_ns - a.t_ns) as f64 / (b.t_ns - a.t_ns) as f64;
    Some(a.energy_j + x * (b.energy_j - a.energy_j))
}

/// Steps a [`SimDevice`] in real time on its own thread.
pub struct SimDriver {
    root: PathBuf,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<DriverEnd>,
}

type DriverEnd = (SimDevice, Option<SimError>, Vec<TruthPoint>);

/// Clock the driver stamps its ground-truth trace with (ns).
pub type DriverClock = Arc<dyn Fn() -> u64 + Send + Sync>;

impl SimDriver {
    /// Starts stepping `device` every `period` of wall time.
    pub fn spawn(
        device: SimDevice,
        source: ActivitySource,
        period: Duration,
    ) -> Result<Self, SimError> {
        Self::spawn_clocked(device, source, period, None)
    }

    /// Like [`SimDriver::spawn`], and records a ground-truth energy trace stamped with `clock`
    /// (the scenario engine's clock), returned by [`SimDriver::stop_with_trace`].
    pub fn spawn_clocked(
        device: SimDevice,
        mut source: ActivitySource,
        period: Duration,
        clock: Option<DriverClock>,
    ) -> Result<Self, SimError> {
        let root = device.root().to_path_buf();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let period = period.max(Duration::from_millis(1));
        let handle = std::thread::Builder::new()
            .name("pocketperf-sim".into())
            .spawn(move || {
                let mut device = device;
                let mut error = None;
                let mut trace = Vec::new();
                let top = device.model().profile().max_level();
                let mut last = Instant::now();
                let pace = match &source {
                    ActivitySource::ProcessCpu { paced, .. } => paced.clone(),
                    _ => None,
                };
                let busy_cpu_ns = || {
                    process_cpu_less_this_thread()
                        .saturating_add(pace.as_ref().map_or(0, |p| p.stretched_cpu_ns()))
                };
                let mut last_busy = match &source {
                    ActivitySource::BusyCounter { busy_ns, .. } => busy_ns.load(Ordering::Relaxed),
                    ActivitySource::ProcessCpu { .. } => busy_cpu_ns(),
                    ActivitySource::Closure(_) => 0,
                };
                if let Some(c) = &clock {
                    trace.push(TruthPoint {
                        t_ns: c(),
                        energy_j: device.energy_j(),
                    });
                }
                while !flag.load(Ordering::SeqCst) {
                    std::thread::park_timeout(period);
                    let now = Instant::now();
                    let dt = now.duration_since(last);
                    last = now;
                    let dt_s = dt.as_secs_f64();
                    let dt_ns = dt.as_nanos().max(1) as f64;
                    let level_of = |l: &Option<Arc<AtomicUsize>>| {
                        l.as_ref().map_or(top, |l| l.load(Ordering::Relaxed))
                    };
                    let activity = match &mut source {
                        ActivitySource::BusyCounter {
                            busy_ns,
                            freq_level,
                        } => {
                            let b = busy_ns.load(Ordering::Relaxed);
                            let delta = b.saturating_sub(last_busy);
                            last_busy = b;
                            Activity {
                                busy: (delta as f64 / dt_ns).clamp(0.0, 1.0),
                                freq_level: level_of(freq_level),
                            }
                        }
                        ActivitySource::ProcessCpu {
                            threads,
                            freq_level,
                            ..
                        } => {
                            let b = busy_cpu_ns();
                            let delta = b.saturating_sub(last_busy);
                            last_busy = b;
                            let cap = (*threads).max(1) as f64;
                            Activity {
                                busy: (delta as f64 / (dt_ns * cap)).clamp(0.0, 1.0),
                                freq_level: level_of(freq_level),
                            }
                        }
                        ActivitySource::Closure(f) => f(dt_s),
                    };
                    if let Err(e) = device.step(dt_s, activity)
                        && error.is_none()
                    {
                        error = Some(e);
                    }
                    if let Some(p) = &pace {
                        let m = device.model();
                        p.set_in_force(m.freq_level().min(m.vendor_cap_level()));
                        p.set_driver_cpu_ns(cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
                    }
                    if let Some(c) = &clock {
                        trace.push(TruthPoint {
                            t_ns: c(),
                            energy_j: device.energy_j(),
                        });
                        if trace.len() > MAX_TRUTH_POINTS {
                            let mut k = 0;
                            trace.retain(|_| {
                                k += 1;
                                k % 2 == 1
                            });
                        }
                    }
                }
                (device, error, trace)
            })
            .map_err(|source| SimError::Thread { source })?;
        Ok(Self { root, stop, handle })
    }

    /// The sysfs root of the driven device.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stops the thread and hands the device back (with the first write error, if any).
    pub fn stop(self) -> Result<SimDevice, SimError> {
        self.stop_with_trace().map(|(d, _)| d)
    }

    /// Stops the thread and hands back the device and the ground-truth trace (empty unless
    /// started with [`SimDriver::spawn_clocked`] and a clock).
    pub fn stop_with_trace(self) -> Result<(SimDevice, Vec<TruthPoint>), SimError> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.thread().unpark();
        let (device, error, trace) = self.handle.join().map_err(|_| SimError::ThreadPanicked)?;
        match error {
            Some(e) => Err(e),
            None => Ok((device, trace)),
        }
    }
}

/// CPU time of the whole process less the calling thread's own, ns.
fn process_cpu_less_this_thread() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
        .saturating_sub(cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
}
