//! The cool-down before each step on phones over adb (`farm/cooldown.rs`, `AdbSensors`). The
//! fake `adb` of `adb_util` emulates two phones whose sensors are small sysfs trees on this
//! host; the pushed stand-in answers `probe --json` with this build's real probe of its
//! phone's tree, after setting the zones to the next of a scripted series of readings, so the
//! farm parses what a phone's `pocketperf probe --json` prints and every reading it took is
//! counted.

mod adb_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use adb_util::{FAKE_POCKETPERF, fixture, write_exe};

const BIN: &str = env!("CARGO_BIN_EXE_pocketperf");

/// A phone's sysfs: zone 0 a CPU cluster and zone 1 the GPU (SoC), zone 2 the skin NTC, zone 3
/// the battery NTC and zone 4 a board NTC (neither SoC nor skin, and hotter than both); the
/// battery at `capacity` % with `status`; a USB and a wireless charger, USB `online` as given.
fn phone_sysfs(dev: &Path, capacity: i64, status: &str, usb_online: bool) {
    let thermal = dev.join("sys/class/thermal");
    for (i, (kind, mc)) in [
        ("cpu-big-0", 30000),
        ("gpu0", 39000),
        ("skin-therm", 30000),
        ("battery", 45000),
        ("pa-therm", 70000),
    ]
    .into_iter()
    .enumerate()
    {
        let z = thermal.join(format!("thermal_zone{i}"));
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(z.join("temp"), format!("{mc}\n")).unwrap();
    }
    let supply = dev.join("sys/class/power_supply");
    for (name, files) in [
        (
            "battery",
            vec![
                ("type", "Battery".to_string()),
                ("capacity", capacity.to_string()),
                ("status", status.to_string()),
            ],
        ),
        (
            "usb",
            vec![
                ("type", "USB".to_string()),
                ("online", u8::from(usb_online).to_string()),
            ],
        ),
        (
            "wireless",
            vec![
                ("type", "Wireless".to_string()),
                ("online", "0".to_string()),
            ],
        ),
    ] {
        let d = supply.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in files {
            std::fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
    }
}

/// Readings as the stand-in's `readings` file takes them: (CPU, skin) in °C per line.
fn readings(dev: &Path, series: &[(f64, f64)]) {
    let text: String = series
        .iter()
        .map(|(cpu, skin)| {
            format!(
                "thermal_zone0={} thermal_zone2={}\n",
                (cpu * 1000.0).round() as i64,
                (skin * 1000.0).round() as i64
            )
        })
        .collect();
    std::fs::write(dev.join("readings"), text).unwrap();
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A farm of fake phones in a temporary directory.
struct Phones {
    tmp: tempfile::TempDir,
    state: PathBuf,
    path: String,
}

/// What one `farm run` over the phones left.
struct Night {
    dir: PathBuf,
    report: serde_json::Value,
    /// Every `adb` call's argv.
    calls: Vec<Vec<String>>,
}

impl Phones {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let path = adb_util::install_adb(&root.join("bin"));
        write_exe(&root.join("phone-pocketperf"), FAKE_POCKETPERF);
        std::fs::write(root.join("m.gguf"), "fake gguf\n").unwrap();
        Phones {
            state: root.join("adb-state"),
            tmp,
            path,
        }
    }

    /// Adds the phone `serial` (see [`phone_sysfs`], [`readings`]) and returns its directory.
    fn phone(
        &self,
        serial: &str,
        battery: (i64, &str),
        usb_online: bool,
        series: &[(f64, f64)],
    ) -> PathBuf {
        let d = self.state.join("devices").join(serial);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("fixture"),
            fixture("real-singlestream-a").to_str().unwrap(),
        )
        .unwrap();
        phone_sysfs(&d, battery.0, battery.1, usb_online);
        readings(&d, series);
        d
    }

    /// Runs a two-step suite (`one`, `two`) over `[defaults]` and one `[[device]]` per
    /// `(name, serial, extra keys)`, each with a remote directory of its own whose name a
    /// naively quoted `probe` command line would run (`pwned-*`); expects exit 0 and that
    /// nothing ran.
    fn run(&self, defaults: &str, devices: &[(&str, &str, &str)]) -> Night {
        let root = self.tmp.path();
        let mut toml = format!("[defaults]\n{defaults}\n");
        for (name, serial, extra) in devices {
            toml.push_str(&format!(
                "\n[[device]]\nname = \"{name}\"\ntransport = \"adb:{serial}\"\nremote_dir = {}\n{extra}\n",
                toml::Value::String(
                    root.join(format!("on {name} 'it''s' \"$(touch pwned-{name})\" `touch pwned`"))
                        .to_str()
                        .unwrap()
                        .into()
                ),
            ));
        }
        std::fs::write(root.join("devices.toml"), toml).unwrap();
        std::fs::write(
            root.join("suite.toml"),
            "name = \"t\"\n\
             [[step]]\nname = \"one\"\nargs = [\"run\", \"--model\", \"{model}\", \"--out\", \"{out}\"]\n\
             [[step]]\nname = \"two\"\nargs = [\"run\", \"--model\", \"{model}\", \"--out\", \"{out}\"]\n",
        )
        .unwrap();
        let o = Command::new(BIN)
            .current_dir(root)
            .env("PATH", &self.path)
            .env("FAKE_ADB_STATE", &self.state)
            .env("FAKE_PROBE_BIN", BIN)
            .args(["farm", "run", "--devices", "devices.toml"])
            .args(["--suite", "suite.toml", "--out", "results"])
            .args(["--binary", "phone-pocketperf", "--model", "m.gguf"])
            .output()
            .unwrap();
        let out = pocketperf_testkit::output_text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        let dir = std::fs::read_dir(root.join("results"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.join("farm.json").is_file())
            .unwrap_or_else(|| panic!("no farm.json: {out}"));
        let report =
            serde_json::from_str(&std::fs::read_to_string(dir.join("farm.json")).unwrap()).unwrap();
        Night {
            dir,
            report,
            calls: adb_util::adb_calls(&self.state),
        }
    }
}

impl Night {
    /// `device`'s `step` in `farm.json`, which ran and landed its result.
    fn step(&self, device: &str, step: &str) -> &serde_json::Value {
        let s = self.report["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == device)
            .unwrap_or_else(|| panic!("no device {device}: {}", self.report))["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == step)
            .unwrap_or_else(|| panic!("no step {step}: {}", self.report));
        assert_eq!(s["status"], "ok", "{s}");
        assert!(
            self.dir
                .join(device)
                .join(step)
                .join("result.json")
                .is_file()
        );
        s
    }

    /// The `adb shell` calls that ran the pushed binary's `probe --json` on `serial`.
    fn probe_calls(&self, serial: &str) -> usize {
        self.calls
            .iter()
            .filter(|c| c[1] == serial && c[2] == "shell" && c[3].contains(" probe --json"))
            .count()
    }

    fn md(&self) -> String {
        std::fs::read_to_string(self.dir.join("farm.md")).unwrap()
    }
}

/// How many times the phone in `dev` was probed.
fn probes(dev: &Path) -> usize {
    std::fs::read_to_string(dev.join("probes"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Idle 40 °C SoC, 30 °C skin, margin 2: a step may start at 42 / 32 at most.
const DEFAULTS: &str = "cooldown_idle_soc_c = 40.0\ncooldown_idle_skin_c = 30.0\n\
                        cooldown_margin_c = 2.0\ncooldown_poll_s = 0.05\ncooldown_timeout_s = 60";

#[test]
fn a_hot_phone_waits_over_adb_until_it_cools_and_the_wait_is_recorded() {
    let phones = Phones::new();
    // It starts hot; its SoC is back within the margin at the third reading but its skin only
    // at the fourth, where the CPU (38.5) is below the GPU (39.0): the SoC is the hotter.
    // Before the second step it reads within the margin at once.
    let cooling = phones.phone(
        "cooling-1",
        (63, "Discharging"),
        false,
        &[
            (55.0, 38.0),
            (49.0, 35.5),
            (41.5, 33.0),
            (38.5, 31.5),
            (41.0, 31.0),
        ],
    );
    let night = phones.run(DEFAULTS, &[("cooling", "cooling-1", "")]);
    // Four readings before the first step (three waits), one before the second, every one
    // over adb; each step ran after its readings (the stand-in logs how many it had seen).
    assert_eq!(probes(&cooling), 5);
    assert_eq!(night.probe_calls("cooling-1"), 5);
    for (name, seen) in [("one", 4), ("two", 5)] {
        night.step("cooling", name);
        let log = std::fs::read_to_string(night.dir.join(format!("cooling/{name}.log"))).unwrap();
        assert!(
            log.contains(&format!("probes before this step: {seen}\n")),
            "{log}"
        );
    }
    let s = &night.step("cooling", "one")["start"];
    assert_eq!(s["cooldown"], "cooled", "{s}");
    assert_eq!(
        (f(&s["idle"]["soc_c"]), f(&s["idle"]["skin_c"])),
        (40.0, 30.0)
    );
    assert_eq!(f(&s["margin_c"]), 2.0);
    assert_eq!(
        (f(&s["before"]["soc_c"]), f(&s["before"]["skin_c"])),
        (55.0, 38.0),
        "{s}"
    );
    assert_eq!(
        (f(&s["start"]["soc_c"]), f(&s["start"]["skin_c"])),
        (39.0, 31.5),
        "{s}"
    );
    // Three polls of 0.05 s at least.
    assert!(f(&s["waited_s"]) >= 0.15, "{s}");
    for r in ["before", "start"] {
        assert_eq!(s[r]["battery_pct"], 63, "{s}");
        assert_eq!(s[r]["battery_status"], "Discharging", "{s}");
        assert_eq!(s[r]["chargers_online"], serde_json::json!([]), "{s}");
    }
    let s = &night.step("cooling", "two")["start"];
    assert_eq!(s["cooldown"], "cool", "{s}");
    assert_eq!(f(&s["waited_s"]), 0.0, "{s}");
    assert_eq!(s["before"], s["start"], "{s}");
    assert_eq!(
        (f(&s["start"]["soc_c"]), f(&s["start"]["skin_c"])),
        (41.0, 31.0),
        "{s}"
    );
    let md = night.md();
    assert!(
        md.contains("| cooling | one | cooled |")
            && md.contains("| 55.0 → 39.0 | 38.0 → 31.5 | 63% Discharging | none |"),
        "{md}"
    );
}

#[test]
fn a_phone_that_never_cools_times_out_over_adb_and_its_steps_still_run() {
    let phones = Phones::new();
    // Hot at every reading, on its USB charger.
    let hot = phones.phone("hot-2", (88, "Charging"), true, &[(60.0, 45.0)]);
    let night = phones.run(DEFAULTS, &[("hot", "hot-2", "cooldown_timeout_s = 0.3")]);
    for name in ["one", "two"] {
        let s = &night.step("hot", name)["start"];
        assert_eq!(s["cooldown"], "timeout", "{s}");
        assert!(f(&s["waited_s"]) >= 0.3, "{s}");
        for r in ["before", "start"] {
            assert_eq!((f(&s[r]["soc_c"]), f(&s[r]["skin_c"])), (60.0, 45.0), "{s}");
            assert_eq!(s[r]["battery_pct"], 88, "{s}");
            assert_eq!(s[r]["battery_status"], "Charging", "{s}");
            assert_eq!(s[r]["chargers_online"], serde_json::json!(["usb"]), "{s}");
        }
    }
    // A first reading and at least one after a poll, per step; all over adb.
    let n = probes(&hot);
    assert!(n >= 4, "{n}");
    assert_eq!(night.probe_calls("hot-2"), n);
    let md = night.md();
    assert!(
        md.contains("| hot | two | timeout |")
            && md.contains("| 60.0 → 60.0 | 45.0 → 45.0 | 88% Charging | usb |"),
        "{md}"
    );
}
