//! The probe and the sampler on mutated copies of the shared fixtures: missing files,
//! garbage, EINVAL zones, mA units, the positive-discharge convention, counter wrap, sensors
//! vanishing or returning garbage mid-run, ODPM devices in a different order, a charger.

mod telemetry_common;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pocketperf::telemetry::TelemetryReport;
use pocketperf::telemetry::probe::{CurrentUnit, DischargeSign, MeterKind, SignBasis, probe};
use pocketperf::telemetry::sampler::{EventKind, MonotonicClock, SamplerConfig, SamplerCore};
use telemetry_common::*;

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn zone_dir(root: &Path, name: &str) -> std::path::PathBuf {
    indexed(&root.join("class/thermal"), "thermal_zone")
        .into_iter()
        .find(|(_, d)| read(&d.join("type")) == name)
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("zone {name}"))
}

fn zone_index(root: &Path, name: &str) -> u32 {
    indexed(&root.join("class/thermal"), "thermal_zone")
        .into_iter()
        .find(|(_, d)| read(&d.join("type")) == name)
        .map(|(i, _)| i)
        .unwrap()
}

/// A hand-driven sampler on a settable clock.
fn sampler(root: &Path) -> (SamplerCore, Arc<AtomicU64>) {
    let t = Arc::new(AtomicU64::new(0));
    let c = t.clone();
    let clock: MonotonicClock = Arc::new(move || c.load(Ordering::SeqCst));
    let core = SamplerCore::new(&probe(root), clock, SamplerConfig::default()).unwrap();
    (core, t)
}

fn col(core: &SamplerCore, name: &str) -> usize {
    core.columns()
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("column {name} in {:?}", core.columns()))
}

#[test]
fn missing_files_are_skipped_or_left_empty() {
    let (_g, root) = copy_fixture("snapdragon-8gen3");
    let z = zone_dir(&root, "cpu-1-0-0");
    fs::remove_file(z.join("temp")).unwrap();
    let pol = root.join("devices/system/cpu/cpufreq/policy2");
    fs::remove_file(pol.join("scaling_cur_freq")).unwrap();
    let bat = root.join("class/power_supply/battery");
    fs::remove_file(bat.join("current_now")).unwrap();
    let p = probe(&root);
    let idx = zone_index(&root, "cpu-1-0-0");
    let s = p.skipped_zones.iter().find(|s| s.index == idx).unwrap();
    assert!(s.reason.contains("unreadable"), "{}", s.reason);
    assert!(p.thermal_zones.iter().all(|z| z.index != idx));
    let pol2 = p.cpu_policies.iter().find(|p| p.name == "policy2").unwrap();
    assert_eq!(pol2.cur_khz, None);
    assert!(pol2.max_khz.is_some());
    let b = p.battery.as_ref().unwrap();
    assert!(b.current_ma.is_none() && b.current_unit.is_none());
    assert!(!b.attributes.iter().any(|a| a == "current_now"));
    // charge_counter × voltage still meters energy.
    assert_eq!(p.meter.as_ref().unwrap().kind, MeterKind::ChargeCounter);
    // A tree with nothing at all: empty probe, warnings, no panic.
    let empty = tempfile::tempdir().unwrap();
    let e = probe(empty.path());
    assert!(e.thermal_zones.is_empty() && e.battery.is_none() && e.meter.is_none());
    assert!(e.warnings.iter().any(|w| w.contains("no energy meter")));
}

#[test]
fn garbage_values_are_rejected_with_the_file_named() {
    let (_g, root) = copy_fixture("pixel-8-pro");
    write(&zone_dir(&root, "MID").join("temp"), "hot\n");
    write(&zone_dir(&root, "TPU").join("temp"), "-999999\n");
    let dev0 = follow(&root.join("bus/iio/devices/iio:device0"));
    let dev1 = follow(&root.join("bus/iio/devices/iio:device1"));
    write(&dev0.join("energy_value"), "garbage\n");
    write(&dev1.join("energy_value"), "t=12\nCH0 nonsense\n");
    let bat = root.join("class/power_supply/battery");
    write(&bat.join("charge_counter"), "lots\n");
    let p = probe(&root);
    let mid = p
        .skipped_zones
        .iter()
        .find(|s| s.name.as_deref() == Some("MID"))
        .unwrap();
    assert!(
        mid.reason.contains("hot") && mid.reason.contains("temp"),
        "{}",
        mid.reason
    );
    let tpu = p
        .skipped_zones
        .iter()
        .find(|s| s.name.as_deref() == Some("TPU"))
        .unwrap();
    assert!(tpu.reason.contains("implausible"), "{}", tpu.reason);
    // Rails are still listed from enabled_rails, without energy; no counter → no ODPM meter.
    assert_eq!(p.odpm.len(), 2);
    assert!(
        p.odpm
            .iter()
            .all(|d| d.rails.iter().all(|r| r.energy_uws.is_none()))
    );
    let b = p.battery.as_ref().unwrap();
    assert_eq!(b.charge_counter_uah, None);
    // Next in the preference order with what is left: integrated V·I.
    assert_eq!(p.meter.as_ref().unwrap().kind, MeterKind::IntegratedVi);
}

#[test]
fn einval_and_eisdir_zones_are_skipped_with_the_os_error() {
    let (_g, root) = copy_fixture("snapdragon-8gen3");
    // A procfs attribute without a read method fails read(2) with EINVAL (as root; EACCES
    // otherwise), like the `pa*`/`sdr*`/`mmw*` zones the README describes.
    let z = zone_dir(&root, "nsphmx-0");
    fs::remove_file(z.join("temp")).unwrap();
    std::os::unix::fs::symlink("/proc/self/clear_refs", z.join("temp")).unwrap();
    let d = zone_dir(&root, "ddr");
    fs::remove_file(d.join("temp")).unwrap();
    fs::create_dir(d.join("temp")).unwrap();
    let p = probe(&root);
    let s = p
        .skipped_zones
        .iter()
        .find(|s| s.name.as_deref() == Some("nsphmx-0"))
        .unwrap();
    let root_user = is_root();
    if root_user {
        assert!(s.reason.contains("Invalid argument"), "{}", s.reason);
    } else {
        assert!(s.reason.contains("unreadable"), "{}", s.reason);
    }
    let s = p
        .skipped_zones
        .iter()
        .find(|s| s.name.as_deref() == Some("ddr"))
        .unwrap();
    assert!(s.reason.contains("directory"), "{}", s.reason);
    // Every other zone is still read.
    let zones = indexed(&root.join("class/thermal"), "thermal_zone").len();
    assert_eq!(p.thermal_zones.len() + p.skipped_zones.len(), zones);
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

#[test]
fn milliamp_current_is_recognised_with_and_without_power_now() {
    let (_g, root) = copy_fixture("snapdragon-8gen3");
    let bat = root.join("class/power_supply/battery");
    let ua = read_i64(&bat.join("current_now"));
    let ma = ua / 1000;
    write(&bat.join("current_now"), &format!("{ma}\n"));
    let p = probe(&root);
    let b = p.battery.as_ref().unwrap();
    let (unit, rule) = b.current_unit.clone().unwrap();
    assert_eq!(unit, CurrentUnit::MilliAmp);
    // The fixture has power_now: V·I in mA matches it.
    assert!(rule.contains("power_now"), "{rule}");
    assert!((b.current_ma.unwrap() - (-ma) as f64).abs() < 1e-9);
    // Without power_now the magnitude rule decides the same.
    fs::remove_file(bat.join("power_now")).unwrap();
    let b = probe(&root).battery.unwrap();
    assert_eq!(b.current_unit.unwrap().0, CurrentUnit::MilliAmp);
}

#[test]
fn positive_discharge_convention_is_detected_from_status() {
    let (_g, root) = copy_fixture("pixel-8-pro");
    let bat = root.join("class/power_supply/battery");
    let ua = read_i64(&bat.join("current_now"));
    write(&bat.join("current_now"), &format!("{}\n", -ua));
    let b = probe(&root).battery.unwrap();
    assert_eq!(
        b.discharge_sign.as_ref().unwrap().0,
        DischargeSign::Positive
    );
    assert_eq!(b.sign_basis, Some(SignBasis::Status));
    // Discharge current reported positive in mA either way.
    assert!((b.current_ma.unwrap() - (-ua) as f64 / 1000.0).abs() < 1e-9);
}

#[test]
fn undecided_status_takes_the_sign_from_the_charge_counter_trend() {
    let (_g, root) = copy_fixture("pixel-8-pro");
    let bat = root.join("class/power_supply/battery");
    write(&bat.join("status"), "Unknown\n");
    // This build reports discharge as positive current.
    let ua = read_i64(&bat.join("current_now")).abs();
    write(&bat.join("current_now"), &format!("{ua}\n"));
    let p = probe(&root);
    let b = p.battery.as_ref().unwrap();
    assert_eq!(b.sign_basis, Some(SignBasis::Default));
    assert_eq!(
        b.discharge_sign.as_ref().unwrap().0,
        DischargeSign::Negative
    );
    let (mut core, t) = sampler(&root);
    let cc0 = read_i64(&bat.join("charge_counter"));
    for k in 0..5 {
        t.store(k * 100_000_000, Ordering::SeqCst);
        // Falling charge counter: discharging.
        write(
            &bat.join("charge_counter"),
            &format!("{}\n", cc0 - 40 * k as i64),
        );
        core.sample();
    }
    let out = core.finish(0.0).unwrap();
    let cur_col = out.column("battery.current.ma").unwrap();
    assert!(
        out.rows[0].values[cur_col].unwrap() < 0.0,
        "assumed sign makes it negative"
    );
    let r = TelemetryReport::new(p, out, None);
    assert!(r.summary.sign_corrected);
    assert!(r.summary.warnings.iter().any(|w| w.contains("trend")));
    let fixed = r.output.series(cur_col);
    assert!(
        fixed
            .iter()
            .all(|p| (p.1 - ua as f64 / 1000.0).abs() < 1e-9),
        "{fixed:?}"
    );
    // The raw column is kept as read.
    let raw = r
        .output
        .series(r.output.column("raw.battery.current_now").unwrap());
    assert!(raw.iter().all(|p| p.1 == ua as f64));
}

#[test]
fn powercap_counter_wrap_is_unwrapped() {
    let dir = tempfile::tempdir().unwrap();
    let z = dir.path().join("class/powercap/intel-rapl:0");
    fs::create_dir_all(&z).unwrap();
    let range: u64 = 262_143_328_850;
    write(&z.join("name"), "package-0\n");
    write(&z.join("max_energy_range_uj"), &format!("{range}\n"));
    write(&z.join("energy_uj"), &format!("{}\n", range - 3_000_000));
    let sub = dir.path().join("class/powercap/intel-rapl:0:0");
    fs::create_dir_all(&sub).unwrap();
    write(&sub.join("name"), "core\n");
    write(&sub.join("energy_uj"), "5\n");
    let p = probe(dir.path());
    assert_eq!(p.meter.as_ref().unwrap().kind, MeterKind::Powercap);
    assert_eq!(p.powercap.len(), 2);
    let (mut core, t) = sampler(dir.path());
    core.sample();
    // 1 s later: 2 J before the wrap... then 1 s later 4 J more, across the wrap.
    t.store(1_000_000_000, Ordering::SeqCst);
    write(&z.join("energy_uj"), &format!("{}\n", range - 1_000_000));
    core.sample();
    t.store(2_000_000_000, Ordering::SeqCst);
    write(&z.join("energy_uj"), "3000000\n");
    core.sample();
    let e = col(&core, "energy.total.mj");
    let pw = col(&core, "power.total.mw");
    let rows = core.rows();
    assert_eq!(rows[1].values[e], Some(2000.0));
    assert_eq!(rows[2].values[e], Some(6000.0));
    assert_eq!(rows[2].values[pw], Some(4000.0));
}

#[test]
fn odpm_counters_give_rail_power_and_a_channel_restart_loses_nothing_measured() {
    let (_g, root) = copy_fixture("pixel-8-pro");
    let want = odpm_fixtures(&root);
    let (mut core, t) = sampler(&root);
    core.sample();
    // 100 ms later every rail of both PMICs advanced by (channel + 1) × 10 000 µW·s, i.e.
    // (channel + 1) × 100 mW; then channel 3 of the main PMIC restarts from 0.
    let bump = |root: &Path, step: u64, restart: bool| {
        for e in fs::read_dir(root.join("bus/iio/devices")).unwrap() {
            let dir = follow(&e.unwrap().path());
            let name = read(&dir.join("name"));
            let f = want.iter().find(|w| w.name == name).unwrap();
            let mut text = format!("t={}\n", f.t_ms + 100 * step);
            for (ch, rail, _, v) in &f.rails {
                let mut now = v + (*ch as u64 + 1) * 10_000 * step;
                if restart && name == "s2mpg14-odpm" && *ch == 3 {
                    now = 20_000;
                }
                text.push_str(&format!("CH{ch}(T=1)[{rail}], {now}\n"));
            }
            write(&dir.join("energy_value"), &text);
        }
    };
    t.store(100_000_000, Ordering::SeqCst);
    bump(&root, 1, false);
    core.sample();
    let rail_col = col(&core, "power.S5M_VDD_INT.mw");
    assert_eq!(core.rows()[1].values[rail_col], Some(400.0));
    let total: f64 = (0..8).map(|c| (c as f64 + 1.0) * 100.0).sum::<f64>() * 2.0;
    let pw = col(&core, "power.total.mw");
    assert!((core.rows()[1].values[pw].unwrap() - total).abs() < 1e-9);
    let e = col(&core, "energy.total.mj");
    assert!((core.rows()[1].values[e].unwrap() - total * 0.1).abs() < 1e-9);
    t.store(200_000_000, Ordering::SeqCst);
    bump(&root, 2, true);
    core.sample();
    // The restarted channel counts what it accumulated since the restart (20 000 µW·s).
    let e2 = core.rows()[2].values[e].unwrap();
    let expect = total * 0.1 + (total * 0.1 - 40.0) + 20.0;
    assert!((e2 - expect).abs() < 1e-9, "{e2} vs {expect}");
}

#[test]
fn sensors_vanishing_or_turning_to_garbage_mid_run_are_events_not_errors() {
    let (_g, root) = copy_fixture("pixel-8-pro");
    let (mut core, t) = sampler(&root);
    core.sample();
    let big = zone_dir(&root, "BIG");
    let dev0 = follow(&root.join("bus/iio/devices/iio:device0"));
    let saved = read(&dev0.join("energy_value"));
    fs::remove_file(big.join("temp")).unwrap();
    fs::remove_file(dev0.join("energy_value")).unwrap();
    write(&zone_dir(&root, "G3D").join("temp"), "NaN\n");
    let policy = root.join("devices/system/cpu/cpufreq/policy4");
    fs::remove_dir_all(&policy).unwrap();
    for k in 1..4 {
        t.store(k * 100_000_000, Ordering::SeqCst);
        core.sample();
    }
    let c_big = col(&core, "temp.BIG.c");
    let c_g3d = col(&core, "temp.G3D.c");
    let c_pol = col(&core, "cpufreq.policy4.khz");
    assert!(core.rows()[0].values[c_big].is_some());
    for r in &core.rows()[1..] {
        assert_eq!(r.values[c_big], None);
        assert_eq!(r.values[c_g3d], None);
        assert_eq!(r.values[c_pol], None);
    }
    // The SoC aggregate is still there from the other die sensors.
    let soc = col(&core, "temp.soc.c");
    assert!(core.rows()[3].values[soc].is_some());
    let ev = core.events().to_vec();
    let kind_of = |c: &str| ev.iter().find(|e| e.column == c).map(|e| e.kind);
    assert_eq!(kind_of("temp.BIG.c"), Some(EventKind::Vanished));
    assert_eq!(kind_of("temp.G3D.c"), Some(EventKind::Garbage));
    assert_eq!(kind_of("cpufreq.policy4.khz"), Some(EventKind::Vanished));
    assert_eq!(kind_of("power.S2S_VDD_G3D.mw"), Some(EventKind::Vanished));
    // One event per transition, not one per sample.
    assert_eq!(ev.iter().filter(|e| e.column == "temp.BIG.c").count(), 1);
    // Restore: recovered events, values back.
    write(&big.join("temp"), "50000\n");
    write(&dev0.join("energy_value"), &saved);
    t.store(400_000_000, Ordering::SeqCst);
    core.sample();
    assert_eq!(core.rows()[4].values[c_big], Some(50.0));
    let ev = core.events();
    assert!(
        ev.iter()
            .any(|e| e.column == "temp.BIG.c" && e.kind == EventKind::Recovered)
    );
    let out = core.finish(0.0).unwrap();
    assert!(out.missing_cells > 0);
}

/// (channel, rail, µW·s).
type Channel = (u32, String, Option<u64>);

#[test]
fn odpm_devices_in_the_other_order_read_the_same() {
    odpm_swap_reads_the_same(Links::AsFound);
}

/// The same with the fixture's links as real symbolic links, whatever form the checkout holds
/// them in (swapping them must re-point the links, not overwrite what they lead to).
#[test]
fn odpm_devices_in_the_other_order_read_the_same_with_real_links() {
    odpm_swap_reads_the_same(Links::Real);
}

fn odpm_swap_reads_the_same(links: Links) {
    let (_g, a) = copy_fixture_as("pixel-8-pro", links);
    let (_h, b) = copy_fixture_as("pixel-8-pro", links);
    let l0 = b.join("bus/iio/devices/iio:device0");
    let l1 = b.join("bus/iio/devices/iio:device1");
    if links == Links::Real {
        let kind = fs::symlink_metadata(&l0).expect("iio:device0").file_type();
        assert!(kind.is_symlink(), "{} is not a symbolic link", l0.display());
    }
    let t0 = link_target(&l0).expect("iio:device0 is a link");
    let t1 = link_target(&l1).expect("iio:device1 is a link");
    set_link_target(&l0, &t1);
    set_link_target(&l1, &t0);
    let name0 = |root: &Path| read(&follow(&root.join("bus/iio/devices/iio:device0")).join("name"));
    assert_ne!(
        name0(&a),
        name0(&b),
        "the swap changed which PMIC is device0"
    );
    let pa = probe(&a);
    let pb = probe(&b);
    let rails = |p: &pocketperf::telemetry::Probe| -> Vec<(String, Vec<Channel>)> {
        p.odpm
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    d.rails
                        .iter()
                        .map(|r| (r.channel, r.rail.clone(), r.energy_uws))
                        .collect(),
                )
            })
            .collect()
    };
    assert_eq!(rails(&pa), rails(&pb));
    let (mut ca, _) = sampler(&a);
    let (mut cb, _) = sampler(&b);
    assert_eq!(ca.columns(), cb.columns());
    // Everything but this process's RSS reads the same.
    let rss = col(&ca, "rss.kib");
    let mut va = ca.sample().values.clone();
    let mut vb = cb.sample().values.clone();
    va[rss] = None;
    vb[rss] = None;
    assert_eq!(va, vb);
}

#[test]
fn a_charger_online_marks_energy_unreliable_at_probe_time_and_mid_run() {
    let (_g, root) = copy_fixture("snapdragon-8gen3");
    let usb = root.join("class/power_supply/usb/online");
    write(&usb, "1\n");
    let p = probe(&root);
    assert_eq!(p.supplies_online, vec!["usb".to_string()]);
    assert!(!p.meter.as_ref().unwrap().reliable);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("usb") && w.contains("online"))
    );
    // Offline at probe time, plugged in mid-run.
    write(&usb, "0\n");
    let p = probe(&root);
    assert!(p.meter.as_ref().unwrap().reliable);
    let (mut core, t) = sampler(&root);
    core.sample();
    write(&usb, "1\n");
    t.store(100_000_000, Ordering::SeqCst);
    core.sample();
    let out = core.finish(0.0).unwrap();
    let r = TelemetryReport::new(p, out, None);
    assert!(r.summary.charger_seen);
    assert!(!r.summary.energy_reliable);
    assert!(r.summary.warnings.iter().any(|w| w.contains("charger")));
}
