//! `pocketperf probe` on both shared sysfs fixtures: every zone, rail, policy, the battery,
//! the GPU and the meter checked against the fixture's own files (read here by the READMEs'
//! rules), through the library and through the binary's `--json` output.

mod telemetry_common;

use std::path::Path;
use std::process::Command;

use pocketperf::telemetry::probe::{
    CurrentUnit, DischargeSign, GpuKind, MeterKind, SignBasis, ZoneRole, probe,
};
use pocketperf::telemetry::sampler::{SamplerConfig, SamplerCore};
use telemetry_common::*;

const FIXTURES: [&str; 2] = ["snapdragon-8gen3", "pixel-8-pro"];

fn canon(p: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Roles the READMEs state: SoC die sensors (`cpu-*`, `cpuss-*`, `gpuss-*`, `nsp*`; Exynos TMU
/// `BIG`, `MID`, `LITTLE`, `G3D`, `TPU`, `ISP`), skin proxies (`skin-msm-therm`,
/// `quiet-therm`), the battery NTC (`battery`). None: the README says nothing definite.
fn readme_role(name: &str) -> Option<ZoneRole> {
    const TMU: [&str; 6] = ["BIG", "MID", "LITTLE", "G3D", "TPU", "ISP"];
    if ["cpu-", "cpuss-", "gpuss-", "nsp"]
        .iter()
        .any(|p| name.starts_with(p))
        || TMU.contains(&name)
    {
        return Some(ZoneRole::Soc);
    }
    match name {
        "skin-msm-therm" | "quiet-therm" => Some(ZoneRole::Skin),
        "battery" => Some(ZoneRole::Battery),
        _ => None,
    }
}

fn check_zones(root: &Path) {
    let p = probe(root);
    let zones = indexed(&root.join("class/thermal"), "thermal_zone");
    assert!(!zones.is_empty());
    assert_eq!(
        p.thermal_zones.len() + p.skipped_zones.len(),
        zones.len(),
        "every zone is listed or skipped"
    );
    for (idx, dir) in &zones {
        let name = read(&dir.join("type"));
        let raw = read_i64(&dir.join("temp"));
        if readme_not_a_temperature(&name) {
            let s = p
                .skipped_zones
                .iter()
                .find(|s| s.index == *idx)
                .unwrap_or_else(|| panic!("zone {idx} `{name}` must be skipped"));
            assert_eq!(s.name.as_deref(), Some(name.as_str()));
            assert!(s.reason.contains("not a temperature"), "{}", s.reason);
            continue;
        }
        let z = p
            .thermal_zones
            .iter()
            .find(|z| z.index == *idx)
            .unwrap_or_else(|| panic!("zone {idx} `{name}` missing"));
        assert_eq!(z.name, name);
        // README: `temp` is millidegree Celsius.
        assert!(
            (z.temp_c - raw as f64 / 1000.0).abs() < 1e-9,
            "{name}: {}",
            z.temp_c
        );
        match readme_role(&name) {
            Some(role) => assert_eq!(z.role, role, "role of {name}"),
            // Board NTCs are board or skin proxies, never SoC or battery.
            None if name.ends_with("therm") => {
                assert!(matches!(z.role, ZoneRole::Board | ZoneRole::Skin), "{name}")
            }
            None => assert!(
                !matches!(z.role, ZoneRole::Skin | ZoneRole::Battery),
                "{name}"
            ),
        }
    }
}

fn check_policies(root: &Path) {
    let p = probe(root);
    let base = root.join("devices/system/cpu/cpufreq");
    let pols = indexed(&base, "policy");
    assert_eq!(p.cpu_policies.len(), pols.len());
    for ((idx, dir), got) in pols.iter().zip(&p.cpu_policies) {
        assert_eq!(got.index, *idx);
        assert_eq!(
            got.related_cpus,
            ints(&read(&dir.join("related_cpus")))
                .into_iter()
                .map(|c| c as u32)
                .collect::<Vec<_>>()
        );
        let khz = |f: &str| Some(read_i64(&dir.join(f)) as u64);
        assert_eq!(got.cur_khz, khz("scaling_cur_freq"));
        assert_eq!(got.min_khz, khz("scaling_min_freq"));
        assert_eq!(got.max_khz, khz("scaling_max_freq"));
        assert_eq!(got.cpuinfo_max_khz, khz("cpuinfo_max_freq"));
        let mut avail = ints(&read(&dir.join("scaling_available_frequencies")));
        avail.sort_unstable();
        assert_eq!(got.available_khz, avail);
        assert_eq!(
            got.governor.as_deref(),
            Some(read(&dir.join("scaling_governor")).as_str())
        );
    }
    // Every cpuN/cpufreq stand-in points at the policy that lists N.
    for (cpu, entry) in indexed(&root.join("devices/system/cpu"), "cpu") {
        let link = entry.join("cpufreq");
        if !link.exists() {
            continue;
        }
        let target = follow(&link);
        let pol = p
            .cpu_policies
            .iter()
            .find(|x| canon(&x.dir) == canon(&target))
            .unwrap_or_else(|| panic!("cpu{cpu}: {} is no policy", target.display()));
        assert!(pol.related_cpus.contains(&cpu));
    }
}

fn check_battery_and_meter(root: &Path) {
    let p = probe(root);
    let dir = root.join("class/power_supply/battery");
    let b = p.battery.as_ref().expect("battery");
    let mut attrs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .collect();
    attrs.sort();
    assert_eq!(b.attributes, attrs);
    // Both READMEs: µA, µV, ABI sign (negative = discharging) with status Discharging.
    let raw = read_i64(&dir.join("current_now"));
    assert_eq!(read(&dir.join("status")), "Discharging");
    assert!(raw < 0);
    assert_eq!(b.current_unit.as_ref().unwrap().0, CurrentUnit::MicroAmp);
    assert_eq!(
        b.discharge_sign.as_ref().unwrap().0,
        DischargeSign::Negative
    );
    assert_eq!(b.sign_basis, Some(SignBasis::Status));
    assert!((b.current_ma.unwrap() - (-raw as f64 / 1000.0)).abs() < 1e-9);
    let uv = read_i64(&dir.join("voltage_now"));
    assert!((b.voltage_mv.unwrap() - uv as f64 / 1000.0).abs() < 1e-9);
    assert_eq!(
        b.charge_counter_uah,
        Some(read_i64(&dir.join("charge_counter")))
    );
    // Battery `temp` is tenths of °C.
    assert!((b.temp_c.unwrap() - read_i64(&dir.join("temp")) as f64 / 10.0).abs() < 1e-9);
    // Every charger input is offline: the meter is trusted, no charger warning.
    assert!(p.supplies_online.is_empty());
    assert!(!p.supplies.is_empty());
    let m = p.meter.as_ref().expect("meter");
    assert!(m.reliable);
    let has_odpm = root.join("bus/iio/devices").is_dir();
    if has_odpm {
        // ODPM first in the preference order.
        assert_eq!(m.kind, MeterKind::Odpm);
        assert_eq!(m.resolution_mj, Some(0.001));
    } else {
        // No ODPM, no powercap, no energy_counter: charge_counter × voltage; one µAh at the
        // fixture's voltage is 3.6 mC × V.
        assert!(!dir.join("energy_counter").exists() && !root.join("class/powercap").exists());
        assert_eq!(m.kind, MeterKind::ChargeCounter);
        let step = 3.6 * uv as f64 / 1e6;
        assert!((m.resolution_mj.unwrap() - step).abs() < 1e-9);
    }
}

fn check_gpu(root: &Path) {
    let p = probe(root);
    let g = p.gpu.as_ref().expect("gpu");
    let kgsl = root.join("class/kgsl/kgsl-3d0");
    if kgsl.is_dir() {
        // kgsl: Hz, busy as "<n> %", available frequencies descending in Hz.
        assert_eq!(g.kind, GpuKind::Adreno);
        assert_eq!(
            g.cur_khz,
            Some(read_i64(&kgsl.join("gpuclk")) as u64 / 1000)
        );
        assert_eq!(
            g.max_khz,
            Some(read_i64(&kgsl.join("max_gpuclk")) as u64 / 1000)
        );
        let busy = read(&kgsl.join("gpu_busy_percentage"));
        let busy: f64 = busy.trim_end_matches('%').trim().parse().unwrap();
        assert_eq!(g.busy_pct, Some(busy));
        let mut avail: Vec<u64> = ints(&read(&kgsl.join("gpu_available_frequencies")))
            .into_iter()
            .map(|h| h / 1000)
            .collect();
        avail.sort_unstable();
        assert_eq!(g.available_khz, avail);
        assert_eq!(
            g.model.as_deref(),
            Some(read(&kgsl.join("gpu_model")).as_str())
        );
    } else {
        // Mali platform device: kHz, utilization in %.
        let dir = follow(&root.join("class/misc/mali0/device"));
        assert_eq!(g.kind, GpuKind::Mali);
        assert_eq!(canon(&g.dir), canon(&dir));
        assert_eq!(g.cur_khz, Some(read_i64(&dir.join("cur_freq")) as u64));
        assert_eq!(
            g.max_khz,
            Some(read_i64(&dir.join("scaling_max_freq")) as u64)
        );
        assert_eq!(g.busy_pct, Some(read_i64(&dir.join("utilization")) as f64));
    }
}

fn check_odpm(root: &Path) {
    let p = probe(root);
    if !root.join("bus/iio/devices").is_dir() {
        assert!(p.odpm.is_empty());
        return;
    }
    let want = odpm_fixtures(root);
    assert_eq!(p.odpm.len(), want.len());
    for (got, want) in p.odpm.iter().zip(&want) {
        assert_eq!(got.name, want.name);
        let got_rails: Vec<(u32, String, String, u64)> = got
            .rails
            .iter()
            .map(|r| {
                (
                    r.channel,
                    r.rail.clone(),
                    r.subsystem.clone().unwrap_or_default(),
                    r.energy_uws.expect("energy"),
                )
            })
            .collect();
        assert_eq!(got_rails, want.rails, "{}", got.name);
    }
}

#[test]
fn probe_lists_every_zone_with_value_and_role() {
    for f in FIXTURES {
        check_zones(&fixture(f));
    }
}

#[test]
fn probe_discovers_every_cpufreq_policy_by_listing() {
    for f in FIXTURES {
        check_policies(&fixture(f));
    }
}

#[test]
fn probe_reads_battery_units_sign_and_picks_the_meter() {
    for f in FIXTURES {
        check_battery_and_meter(&fixture(f));
    }
}

#[test]
fn probe_recognises_adreno_and_mali() {
    for f in FIXTURES {
        check_gpu(&fixture(f));
    }
}

#[test]
fn probe_matches_odpm_devices_by_name_with_every_rail() {
    for f in FIXTURES {
        check_odpm(&fixture(f));
    }
}

#[test]
fn first_sample_soc_and_skin_follow_the_readme_definitions() {
    // Snapdragon README: SoC = max over cpu-*, gpuss-*, nsp*, cpuss-*; skin = skin-msm-therm /
    // quiet-therm.
    let root = fixture("snapdragon-8gen3");
    let mut soc = f64::MIN;
    let mut skin = f64::MIN;
    for (_, dir) in indexed(&root.join("class/thermal"), "thermal_zone") {
        let name = read(&dir.join("type"));
        let c = read_i64(&dir.join("temp")) as f64 / 1000.0;
        match readme_role(&name) {
            Some(ZoneRole::Soc) => soc = soc.max(c),
            Some(ZoneRole::Skin) => skin = skin.max(c),
            _ => {}
        }
    }
    let p = probe(&root);
    let clock = std::sync::Arc::new(|| 1_000u64);
    let mut core = SamplerCore::new(&p, clock, SamplerConfig::default()).unwrap();
    let row = core.sample().clone();
    let col = |n: &str| core.columns().iter().position(|c| c == n).unwrap();
    assert_eq!(row.values[col("temp.soc.c")], Some(soc));
    assert_eq!(row.values[col("temp.skin.c")], Some(skin));
    // Raw battery values are kept as read.
    let cur = read_i64(&root.join("class/power_supply/battery/current_now"));
    assert_eq!(row.values[col("raw.battery.current_now")], Some(cur as f64));
}

#[test]
fn probe_command_json_and_text_list_everything() {
    let exe = env!("CARGO_BIN_EXE_pocketperf");
    for f in FIXTURES {
        let root = fixture(f);
        let lib = probe(&root);
        let out = Command::new(exe)
            .args(["probe", "--json", "--sysfs-root"])
            .arg(&root)
            .output()
            .expect("run pocketperf probe");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let names = |key: &str, field: &str| -> Vec<String> {
            v[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|z| z[field].as_str().unwrap_or("").to_string())
                .collect()
        };
        let lib_zones: Vec<String> = lib.thermal_zones.iter().map(|z| z.name.clone()).collect();
        assert_eq!(names("thermal_zones", "name"), lib_zones);
        assert_eq!(
            v["skipped_zones"].as_array().unwrap().len(),
            lib.skipped_zones.len()
        );
        let lib_pols: Vec<String> = lib.cpu_policies.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names("cpu_policies", "name"), lib_pols);
        let rails: usize = v["odpm"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["rails"].as_array().unwrap().len())
            .sum();
        assert_eq!(rails, lib.odpm.iter().map(|d| d.rails.len()).sum::<usize>());
        assert_eq!(
            v["meter"]["kind"],
            serde_json::json!(format!("{:?}", lib.meter.as_ref().unwrap().kind))
        );

        let text = Command::new(exe)
            .args(["probe", "--sysfs-root"])
            .arg(&root)
            .output()
            .expect("run pocketperf probe");
        assert!(text.status.success());
        let text = String::from_utf8(text.stdout).unwrap();
        for z in &lib.thermal_zones {
            assert!(text.contains(&z.name), "{}", z.name);
        }
        for z in &lib.skipped_zones {
            assert!(text.contains("skipped"), "{:?}", z.name);
        }
        for d in &lib.odpm {
            for r in &d.rails {
                assert!(text.contains(&r.rail), "{}", r.rail);
            }
        }
        assert!(text.contains("energy meter:"));
    }
}

#[test]
fn probe_command_rejects_an_unknown_device_or_root() {
    let out = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["probe", "--device", "adb:nonsense"])
        .output()
        .expect("run pocketperf probe");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("device"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["probe", "--sysfs-root", "/nonexistent/sysfs"])
        .output()
        .expect("run pocketperf probe");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/sysfs"), "{err}");
}

#[test]
fn probe_of_a_simulated_handset_reads_like_its_fixture() {
    // The simulated trees mirror their fixtures' layout: same zone names, policies, rails.
    for f in FIXTURES {
        let fx = probe(&fixture(f));
        let sim = pocketperf::sim::SimDevice::new(f).unwrap();
        let sp = probe(sim.root());
        let names = |p: &pocketperf::telemetry::Probe| -> Vec<String> {
            p.thermal_zones.iter().map(|z| z.name.clone()).collect()
        };
        assert_eq!(names(&sp), names(&fx), "{f}");
        let pols = |p: &pocketperf::telemetry::Probe| -> Vec<String> {
            p.cpu_policies.iter().map(|z| z.name.clone()).collect()
        };
        assert_eq!(pols(&sp), pols(&fx), "{f}");
        let rails = |p: &pocketperf::telemetry::Probe| -> Vec<String> {
            p.odpm
                .iter()
                .flat_map(|d| d.rails.iter().map(|r| r.rail.clone()))
                .collect()
        };
        assert_eq!(rails(&sp), rails(&fx), "{f}");
        assert_eq!(
            sp.meter.as_ref().map(|m| m.kind),
            fx.meter.as_ref().map(|m| m.kind),
            "{f}"
        );
        assert_eq!(
            sp.gpu.as_ref().map(|g| g.kind),
            fx.gpu.as_ref().map(|g| g.kind)
        );
    }
}
