//! A farm night over host-side devices with a stand-in binary: the script takes `sleep_s`
//! seconds per step and writes a recorded run (`reports/tests/fixtures/real-singlestream-a`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pocketperf");

/// Writes the stand-in binary, the model stand-in, `devices.toml` and `suite.toml` into
/// `root`, runs `farm run` there and returns its output, the night's directory and its
/// parsed `farm.json`.
pub fn farm_night(
    root: &Path,
    devices: &str,
    suite: &str,
    sleep_s: f64,
) -> (Output, PathBuf, serde_json::Value) {
    use std::os::unix::fs::PermissionsExt;
    let exe = root.join("stand-in");
    let script = format!(
        "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in --out) out=\"$2\"; shift ;; esac\n  \
         shift\ndone\nsleep {sleep_s}\nmkdir -p \"$out\" && cp \"$FAKE_FIXTURE/result.json\" \"$out/\"\n"
    );
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("m.gguf"), "model\n").unwrap();
    std::fs::write(root.join("devices.toml"), devices).unwrap();
    std::fs::write(root.join("suite.toml"), suite).unwrap();
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
    let report =
        serde_json::from_str(&std::fs::read_to_string(night.join("farm.json")).unwrap()).unwrap();
    (o, night, report)
}
