//! Farm hygiene: host-side devices (`local`, `sim:*`) share this host's cores, so by default
//! they run one at a time (`[defaults] max_parallel_host = 1`); raised, they overlap. Two local
//! devices and a simulated handset with a stand-in binary that takes a measurable time per
//! step and writes a recorded run.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_pocketperf");

const SLOW_STAND_IN: &str = r#"#!/bin/sh
out=
while [ $# -gt 0 ]; do
  case "$1" in --out) out="$2"; shift ;; esac
  shift
done
sleep 0.4
mkdir -p "$out" && cp "$FAKE_FIXTURE/result.json" "$out/"
"#;

fn farm(max_parallel: Option<usize>) -> serde_json::Value {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let exe = root.join("stand-in");
    std::fs::write(&exe, SLOW_STAND_IN).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("m.gguf"), "model\n").unwrap();
    let defaults = max_parallel
        .map(|n| format!("[defaults]\nmax_parallel_host = {n}\n"))
        .unwrap_or_default();
    std::fs::write(
        root.join("devices.toml"),
        format!(
            "{defaults}\n[[device]]\nname = \"host-a\"\ntransport = \"local\"\n\n\
             [[device]]\nname = \"host-b\"\ntransport = \"local\"\n\n\
             [[device]]\nname = \"sim\"\ntransport = \"sim:pixel-8-pro\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("suite.toml"),
        "name = \"t\"\n[[step]]\nname = \"s\"\nargs = [\"run\", \"--out\", \"{out}\"]\n",
    )
    .unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/real-singlestream-a");
    let o = Command::new(BIN)
        .current_dir(root)
        .env("FAKE_FIXTURE", fixture)
        .args([
            "farm",
            "run",
            "--devices",
            "devices.toml",
            "--suite",
            "suite.toml",
        ])
        .args([
            "--out", "results", "--binary", "stand-in", "--model", "m.gguf",
        ])
        .output()
        .unwrap();
    let night = std::fs::read_dir(root.join("results"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.join("farm.json").is_file())
        .unwrap_or_else(|| panic!("{}", pocketperf_testkit::output_text(&o)));
    serde_json::from_str(&std::fs::read_to_string(night.join("farm.json")).unwrap()).unwrap()
}

/// Each device's `(began_s, ended_s)`, sorted by start.
fn spans(report: &serde_json::Value) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["status"], "ok", "{d}");
            (
                d["began_s"].as_f64().unwrap(),
                d["ended_s"].as_f64().unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

#[test]
fn host_side_devices_run_one_at_a_time_unless_allowed_more() {
    let serial = spans(&farm(None));
    assert_eq!(serial.len(), 3);
    for w in serial.windows(2) {
        assert!(w[1].0 >= w[0].1, "host-side devices overlapped: {serial:?}");
    }
    let parallel = spans(&farm(Some(3)));
    assert!(
        parallel.windows(2).any(|w| w[1].0 < w[0].1),
        "with max_parallel_host = 3 they should overlap: {parallel:?}"
    );
}
