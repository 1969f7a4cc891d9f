//! Farm hygiene before each step: the cool-down and the recorded start state
//! (`farm/cooldown.rs`). Simulated handsets with a thermal speed-up heat during a step (a
//! stand-in binary that takes 0.6 s) and cool between steps as the farm's model of them says;
//! local devices read captured sysfs trees (battery charge, charger state, static
//! temperatures). Inventory keys are checked with errors naming the key.

mod farm_util;

use std::path::Path;

use farm_util::farm_night;
use pocketperf::farm::inventory::Inventory;
use pocketperf_testkit::fixtures::{Links, copy_tree_as};

/// Runs a two-step farm over `devices` (the `[[device]]` tables and any `[defaults]`) and
/// returns `farm.json`.
fn farm(root: &Path, devices: &str) -> serde_json::Value {
    let suite = "name = \"t\"\n[[step]]\nname = \"one\"\nargs = [\"run\", \"--out\", \"{out}\"]\n\
                 [[step]]\nname = \"two\"\nargs = [\"run\", \"--out\", \"{out}\"]\n";
    let (_, night, report) = farm_night(root, devices, suite, 0.6);
    let md = std::fs::read_to_string(night.join("farm.md")).unwrap();
    assert!(md.contains("## Device at the start of each step"), "{md}");
    report
}

/// The `start` record of `device`'s `step`.
fn start<'a>(report: &'a serde_json::Value, device: &str, step: &str) -> &'a serde_json::Value {
    let d = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == device)
        .unwrap_or_else(|| panic!("no device {device}: {report}"));
    assert_eq!(d["status"], "ok", "{d}");
    let s = d["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == step)
        .unwrap();
    &s["start"]
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_hot_simulated_handset_waits_before_its_step_and_a_cool_one_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    // thermal-speedup=1000: the skin's 772 s time constant becomes 0.77 s, so a 0.6 s step at
    // full load leaves it hot (about 15 °C above idle); at 1 the same step barely warms it.
    let report = farm(
        tmp.path(),
        "[defaults]\ncooldown_margin_c = 0.5\ncooldown_poll_s = 0.05\ncooldown_timeout_s = 60\n\n\
         [[device]]\nname = \"hot\"\ntransport = \"sim:pixel-8-pro,thermal-speedup=1000\"\n\n\
         [[device]]\nname = \"hot-timeout\"\ntransport = \"sim:snapdragon-8gen3,thermal-speedup=1000\"\n\
         cooldown_timeout_s = 0.1\n\n\
         [[device]]\nname = \"cool\"\ntransport = \"sim:pixel-8-pro\"\ncooldown_margin_c = 5.0\n",
    );
    // The first step of each starts at the idle level it defines.
    for d in ["hot", "hot-timeout", "cool"] {
        let s = start(&report, d, "one");
        assert_eq!(s["cooldown"], "cool", "{d}: {s}");
        assert_eq!(f(&s["waited_s"]), 0.0, "{d}: {s}");
        assert_eq!(s["idle"]["skin_c"], s["before"]["skin_c"], "{d}: {s}");
    }
    // Hot: the skin starts the second step above idle + margin, and the farm waits until it
    // is back within the margin.
    let s = start(&report, "hot", "two");
    assert_eq!(s["cooldown"], "cooled", "{s}");
    let idle_skin = f(&s["idle"]["skin_c"]);
    assert!(f(&s["before"]["skin_c"]) > idle_skin + 0.5, "{s}");
    assert!(f(&s["start"]["skin_c"]) <= idle_skin + 0.5, "{s}");
    assert!(
        f(&s["start"]["soc_c"]) <= f(&s["idle"]["soc_c"]) + 0.5,
        "{s}"
    );
    assert!(f(&s["waited_s"]) > 0.0, "{s}");
    // The battery as the simulated handset reports it: charge drawn by the first step, on
    // no charger.
    let pct = s["start"]["battery_pct"].as_i64().unwrap();
    assert!((1..=100).contains(&pct), "{s}");
    assert_eq!(s["start"]["battery_status"], "Discharging", "{s}");
    assert_eq!(s["start"]["chargers_online"], serde_json::json!([]), "{s}");
    // Past the timeout the step runs anyway, still hot, and the timeout is recorded.
    let s = start(&report, "hot-timeout", "two");
    assert_eq!(s["cooldown"], "timeout", "{s}");
    assert!(f(&s["waited_s"]) >= 0.1, "{s}");
    assert!(
        f(&s["start"]["skin_c"]) > f(&s["idle"]["skin_c"]) + 0.5,
        "{s}"
    );
    // Without the speed-up a 0.6 s step warms the handset's die by a few tenths of a degree to
    // two, inside a 5 °C margin: no wait.
    let s = start(&report, "cool", "two");
    assert_eq!(s["cooldown"], "cool", "{s}");
    assert_eq!(f(&s["waited_s"]), 0.0, "{s}");
}

#[test]
fn battery_and_charger_come_from_the_devices_sysfs_with_either_link_form() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = pocketperf_testkit::shared_dir().join("fixtures/sysfs");
    // The Snapdragon tree with its links as captured; the Pixel tree with real symlinks and
    // its USB charger plugged in.
    copy_tree_as(
        &shared.join("snapdragon-8gen3"),
        &tmp.path().join("sd"),
        Links::AsFound,
    );
    copy_tree_as(
        &shared.join("pixel-8-pro"),
        &tmp.path().join("px"),
        Links::Real,
    );
    let usb =
        pocketperf_testkit::fixtures::follow_link(&tmp.path().join("px/class/power_supply/usb"));
    std::fs::write(usb.join("online"), "1\n").unwrap();
    let capacity = |tree: &str| -> i64 {
        let dir = pocketperf_testkit::fixtures::follow_link(
            &tmp.path().join(tree).join("class/power_supply/battery"),
        );
        std::fs::read_to_string(dir.join("capacity"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let report = farm(
        tmp.path(),
        "[[device]]\nname = \"sd\"\ntransport = \"local\"\nsysfs_root = \"sd\"\n\n\
         [[device]]\nname = \"px\"\ntransport = \"local\"\nsysfs_root = \"px\"\n\
         cooldown_idle_skin_c = 20.0\ncooldown_timeout_s = 0.2\ncooldown_poll_s = 0.05\n",
    );
    let sd = start(&report, "sd", "one");
    assert_eq!(
        sd["start"]["battery_pct"].as_i64(),
        Some(capacity("sd")),
        "{sd}"
    );
    assert_eq!(sd["start"]["battery_status"], "Discharging", "{sd}");
    assert_eq!(
        sd["start"]["chargers_online"],
        serde_json::json!([]),
        "{sd}"
    );
    // The captured tree's hottest SoC zone (Cortex-X4 hotspot 63.9 °C is below the GPU's
    // 66.2 °C) and skin zone, both static: the first reading is the idle level, no wait.
    assert_eq!(f(&sd["start"]["soc_c"]), 66.2, "{sd}");
    assert_eq!(sd["cooldown"], "cool", "{sd}");
    for step in ["one", "two"] {
        let px = start(&report, "px", step);
        assert_eq!(
            px["start"]["battery_pct"].as_i64(),
            Some(capacity("px")),
            "{px}"
        );
        assert_eq!(
            px["start"]["chargers_online"],
            serde_json::json!(["usb"]),
            "{px}"
        );
        // A skin idle level of 20 °C that the static tree never reaches: the timeout.
        assert_eq!(px["cooldown"], "timeout", "{px}");
        assert_eq!(f(&px["idle"]["skin_c"]), 20.0, "{px}");
        assert!(f(&px["waited_s"]) >= 0.2, "{px}");
    }
}

#[test]
fn cooldown_keys_are_validated_with_the_key_named() {
    let dev = "[[device]]\nname = \"a\"\ntransport = \"local\"\n";
    for (toml, needle) in [
        (
            format!("[defaults]\ncooldown_margin_c = -1.0\n{dev}"),
            "[defaults]: `cooldown_margin_c` = -1: must be 0 to 50",
        ),
        (
            format!("{dev}cooldown_timeout_s = -5.0\n"),
            "`cooldown_timeout_s` = -5: must be a number of seconds",
        ),
        (
            format!("{dev}cooldown_poll_s = 0.0\n"),
            "`cooldown_poll_s` = 0: must be a number of seconds from 0.01",
        ),
        (
            format!("{dev}cooldown_idle_soc_c = 400.0\n"),
            "`cooldown_idle_soc_c` = 400: must be a temperature",
        ),
        (format!("{dev}cooldown_margins = 1.0\n"), "cooldown_margins"),
        (
            "[[device]]\nname = \"s\"\ntransport = \"sim:pixel-8-pro\"\nsysfs_root = \"x\"\n"
                .to_string(),
            "`sysfs_root` applies to `local` devices only",
        ),
        (
            "[[device]]\nname = \"s\"\ntransport = \"sim:pixel-8-pro,thermal-speedup=0\"\n"
                .to_string(),
            "thermal-speedup",
        ),
    ] {
        let e = Inventory::from_toml_str(&toml, Path::new("devices.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{toml}\n→ {e}");
    }
    let inv = Inventory::from_toml_str(
        &format!("[defaults]\ncooldown_margin_c = 3.0\n{dev}cooldown = false\n"),
        Path::new("devices.toml"),
    )
    .unwrap();
    let c = &inv.devices[0].cooldown;
    assert!(!c.enabled);
    assert_eq!(c.margin_c, 3.0);
    assert_eq!(c.timeout.as_secs(), 600);
    assert_eq!(c.poll.as_secs(), 5);
}
