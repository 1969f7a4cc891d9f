//! The device farm end to end, with a fake `adb` on `PATH` emulating two phones (storage in
//! directories of this host, `adb shell` through a real `sh`), plus a simulated handset over
//! the local transport (the fake `adb` and the stand-in are `adb_util`'s). The binary pushed is
//! a stand-in that checks what the farm pushed and writes a recorded real run
//! (`reports/tests/fixtures/`) as the step's result.
//! Also: the remote quoting round-trips through every POSIX shell installed here.

mod adb_util;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use adb_util::{FAKE_POCKETPERF, fixture, write_exe};
use pocketperf::farm::shell;

const BIN: &str = env!("CARGO_BIN_EXE_pocketperf");

/// Serials and remote paths chosen to break naive quoting, on the host or on the device.
const SERIAL_A: &str = "A 'one' \"1\"";
const SERIAL_B: &str = "B;touch pwned-host";

struct Farm {
    tmp: tempfile::TempDir,
    state: PathBuf,
    /// `PATH` with the fake `adb` first.
    path: String,
}

impl Farm {
    fn new(retries_b: u32) -> Farm {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let state = root.join("adb-state");
        let path = adb_util::install_adb(&root.join("bin"));
        write_exe(&root.join("fake-pocketperf"), FAKE_POCKETPERF);
        std::fs::write(root.join("fake model.gguf"), "fake gguf\n").unwrap();
        for (serial, fix) in [
            (SERIAL_A, "real-singlestream-a"),
            (SERIAL_B, "real-singlestream-b"),
        ] {
            let d = state.join("devices").join(serial);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("fixture"), fixture(fix).to_str().unwrap()).unwrap();
        }
        let dev_a = root
            .join("storage A")
            .join("it's \"$(touch pwned-device)\" here");
        let dev_b = root
            .join("storage B")
            .join("pocket`touch pwned-backtick`perf");
        let toml_str = |p: &Path| toml::Value::String(p.to_str().unwrap().to_string()).to_string();
        std::fs::write(
            root.join("devices.toml"),
            format!(
                r#"
[defaults]
retries = 1
retry_delay_s = 0
step_timeout_s = 60
transfer_timeout_s = 30

[[device]]
name = "phone-a"
transport = {}
remote_dir = {}

[[device]]
name = "phone-b"
transport = {}
remote_dir = {}
retries = {retries_b}

[[device]]
name = "sim-8gen3"
transport = "sim:snapdragon-8gen3"
"#,
                toml::Value::String(format!("adb:{SERIAL_A}")),
                toml_str(&dev_a),
                toml::Value::String(format!("adb:{SERIAL_B}")),
                toml_str(&dev_b),
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("tiny.cfg"),
            "*.SingleStream.min_query_count = 8\n",
        )
        .unwrap();
        std::fs::write(
            root.join("suite.toml"),
            r#"
name = "nightly-test"
files = ["tiny.cfg"]
[[step]]
name = "single-stream"
args = ["run", "--scenario", "single-stream", "--config", "{suite}/tiny.cfg",
        "--model", "{model}", "--device", "{device}", "--out", "{out}"]
[[step]]
name = "offline"
args = ["run", "--scenario", "offline", "--model", "{model}", "--device", "{device}",
        "--out", "{out}"]
"#,
        )
        .unwrap();
        // A host file an injected `rm`/`touch` would hit.
        std::fs::write(root.join("canary"), "still here").unwrap();
        Farm { tmp, state, path }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    fn device_file(&self, serial: &str, name: &str, text: &str) {
        std::fs::write(self.state.join("devices").join(serial).join(name), text).unwrap();
    }

    /// The `farm run` command line of this farm (results into `results/`).
    fn command(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(self.root())
            .env("PATH", &self.path)
            .env("FAKE_ADB_STATE", &self.state)
            .env("FAKE_FIXTURE", fixture("real-singlestream-a"))
            .args([
                "farm",
                "run",
                "--devices",
                "devices.toml",
                "--suite",
                "suite.toml",
            ])
            .args(["--out", "results", "--binary", "fake-pocketperf"])
            .args(["--model", "fake model.gguf"]);
        cmd
    }

    fn run(&self) -> (Output, PathBuf, serde_json::Value) {
        let out = self.command().output().unwrap();
        let results = self.root().join("results");
        let latest = std::fs::read_dir(&results)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.join("farm.json").is_file())
            .max()
            .unwrap_or_else(|| panic!("no farm.json: {}", text(&out)));
        let report =
            serde_json::from_str(&std::fs::read_to_string(latest.join("farm.json")).unwrap())
                .unwrap();
        (out, latest, report)
    }

    fn assert_nothing_injected(&self) {
        assert_eq!(
            std::fs::read_to_string(self.root().join("canary")).unwrap(),
            "still here"
        );
        let mut found = Vec::new();
        let mut stack = vec![self.root().to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()) {
                let p = e.path();
                if e.file_name().to_string_lossy().starts_with("pwned") {
                    found.push(p.clone());
                }
                if p.is_dir() {
                    stack.push(p);
                }
            }
        }
        assert!(found.is_empty(), "injected commands ran: {found:?}");
    }

    /// Every adb invocation's argv, as the fake adb recorded it.
    fn adb_calls(&self) -> Vec<Vec<String>> {
        adb_util::adb_calls(&self.state)
    }
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn device<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap()
}

fn step_status(report: &serde_json::Value, dev: &str, step: &str) -> String {
    device(report, dev)["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == step)
        .unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_phone_that_drops_mid_run_is_retried_and_reported_while_the_others_land() {
    let farm = Farm::new(2);

    // Night 1: every device online.
    let (o, night1, r1) = farm.run();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for dev in ["phone-a", "phone-b", "sim-8gen3"] {
        assert_eq!(device(&r1, dev)["status"], "ok", "{dev}: {}", text(&o));
        for step in ["single-stream", "offline"] {
            let d = night1.join(dev).join(step);
            assert!(d.join("result.json").is_file() && d.join("report.html").is_file());
            assert!(night1.join(dev).join(format!("{step}.log")).is_file());
        }
    }
    let log =
        |n: &Path, dev: &str| std::fs::read_to_string(n.join(dev).join("offline.log")).unwrap();
    assert!(log(&night1, "phone-a").contains("device=local"));
    assert!(log(&night1, "sim-8gen3").contains("device=sim:snapdragon-8gen3"));
    assert!(r1["previous"].is_null());
    assert!(
        r1["gates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["status"] == "skipped")
    );
    let cmp = std::fs::read_to_string(night1.join("compare/single-stream.csv")).unwrap();
    for dev in ["phone-a", "phone-b", "sim-8gen3"] {
        assert!(cmp.contains(dev), "compare lacks {dev}");
    }
    assert!(night1.join("compare/offline.html").is_file());
    let name1 = night1.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        chrono::NaiveDateTime::parse_from_str(&name1[..17], "%Y-%m-%dT%H%M%S").is_ok()
            && name1.as_bytes()[17] == b'Z',
        "{name1}"
    );

    // Night 2: phone-b drops off USB during its second step and stays away.
    farm.device_file(SERIAL_B, "runs", "0");
    farm.device_file(SERIAL_B, "drop_at_run", "2");
    let (o, night2, r2) = farm.run();
    assert_ne!(night1, night2);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(r2["previous"], name1);
    // The others completed and were gated against night 1 (same data: pass).
    for dev in ["phone-a", "sim-8gen3"] {
        assert_eq!(device(&r2, dev)["status"], "ok");
        assert_eq!(device(&r2, dev)["attempts"], 1);
        for step in ["single-stream", "offline"] {
            assert!(night2.join(dev).join(step).join("result.json").is_file());
            let g = r2["gates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["device"] == dev && g["step"] == step)
                .unwrap();
            assert_eq!(g["status"], "pass", "{g}");
            assert!(
                night2
                    .join(format!("gate/{dev}/{step}.junit.xml"))
                    .is_file()
            );
        }
    }
    // phone-b: its first step landed, the second failed on every attempt; all reported.
    let b = device(&r2, "phone-b");
    assert_eq!(b["status"], "failed");
    assert_eq!(b["attempts"], 3);
    assert_eq!(step_status(&r2, "phone-b", "single-stream"), "ok");
    assert!(night2.join("phone-b/single-stream/result.json").is_file());
    assert_eq!(step_status(&r2, "phone-b", "offline"), "failed");
    assert!(!night2.join("phone-b/offline").exists());
    let errors = b["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors[0]["step"], "offline");
    assert!(
        errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("error: closed")
    );
    for e in &errors[1..] {
        assert!(e["error"].as_str().unwrap().contains("not found"), "{e}");
    }
    let md = std::fs::read_to_string(night2.join("farm.md")).unwrap();
    assert!(md.contains("| phone-b |") && md.contains("**FAILED**") && md.contains("## Failures"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("**FAILED**"));
    let cmp = std::fs::read_to_string(night2.join("compare/single-stream.csv")).unwrap();
    assert!(cmp.contains("phone-b"));
    let cmp = std::fs::read_to_string(night2.join("compare/offline.csv")).unwrap();
    assert!(cmp.contains("phone-a") && !cmp.contains("phone-b"));

    // The serials reached adb as single arguments, and each shell command line is one
    // argument built by the quoting; nothing on the host or the device was injected.
    let calls = farm.adb_calls();
    let serials: BTreeSet<&str> = calls.iter().map(|c| c[1].as_str()).collect();
    assert_eq!(serials, BTreeSet::from([SERIAL_A, SERIAL_B]));
    assert!(calls.iter().all(|c| c[0] == "-s"));
    let shell_lines: Vec<&Vec<String>> = calls.iter().filter(|c| c[2] == "shell").collect();
    assert!(shell_lines.iter().all(|c| c.len() == 4));
    assert!(shell_lines.iter().any(|c| {
        c[3].contains(
            &shell::quote(&format!(
                "{}/storage A/it's \"$(touch pwned-device)\" here/out/offline.log",
                farm.root().display()
            ))
            .unwrap(),
        )
    }));
    farm.assert_nothing_injected();
}

#[test]
fn a_phone_that_reconnects_is_retried_to_completion() {
    let farm = Farm::new(2);
    farm.device_file(SERIAL_B, "drop_at_run", "1");
    farm.device_file(SERIAL_B, "back_after", "1");
    let (o, dir, r) = farm.run();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = device(&r, "phone-b");
    assert_eq!(b["status"], "ok");
    assert_eq!(b["attempts"], 3, "{b}");
    assert_eq!(b["errors"].as_array().unwrap().len(), 2);
    for step in ["single-stream", "offline"] {
        assert!(dir.join("phone-b").join(step).join("result.json").is_file());
    }
    // Retried steps restart cleanly: the first step ran twice (dropped once), the second once.
    let steps = b["steps"].as_array().unwrap();
    assert_eq!(
        (steps[0]["attempts"].as_u64(), steps[1]["attempts"].as_u64()),
        (Some(2), Some(1))
    );
    farm.assert_nothing_injected();
}

#[test]
fn bad_inventory_and_suite_exit_2_before_touching_devices() {
    let farm = Farm::new(1);
    let root = farm.root();
    std::fs::write(
        root.join("bad.toml"),
        "[[device]]\nname = \"x\"\ntransport = \"usb:1\"\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .current_dir(root)
        .args([
            "farm",
            "run",
            "--devices",
            "bad.toml",
            "--suite",
            "suite.toml",
        ])
        .args(["--binary", "fake-pocketperf", "--model", "fake model.gguf"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("expected `local`, `adb:<serial>` or `sim:<profile>[,thermal-speedup=K]`")
    );
    std::fs::write(
        root.join("bad-suite.toml"),
        "name = \"s\"\n[[step]]\nname = \"a\"\nargs = [\"run\", \"--out\", \"{out}\", \"{threads}\"]\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .current_dir(root)
        .args([
            "farm",
            "run",
            "--devices",
            "devices.toml",
            "--suite",
            "bad-suite.toml",
        ])
        .args(["--binary", "fake-pocketperf", "--model", "fake model.gguf"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("`{threads}` is not defined"),
        "{}",
        text(&o)
    );
    assert!(!root.join("results").exists() && !farm.state.join("argv").exists());
}

/// Words that break naive quoting.
fn hostile_words() -> Vec<String> {
    let mut words: Vec<String> = [
        "",
        " ",
        "plain",
        "two words",
        "it's",
        "'",
        "''",
        "\"",
        "\"'\"",
        "$HOME",
        "${x:-y}",
        "$(reboot)",
        "`reboot`",
        "a;b",
        "a|b",
        "a&b",
        "a>b",
        "<",
        "*",
        "?",
        "[a]",
        "~",
        "~root",
        "a=b",
        "-n",
        "--out",
        "\\",
        "\\'",
        "tab\there",
        "new\nline",
        "\r",
        "#comment",
        "!",
        "{a,b}",
        "日本語 ü",
        "%s",
        "\u{7f}",
        "\x01\x02",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Deterministic pseudo-random words over a nasty alphabet.
    let alphabet: Vec<char> = " '\"\\$`;|&<>*?[]{}~#!=\t\nab-./:é".chars().collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for len in 0..200 {
        let mut w = String::new();
        for _ in 0..(len % 23) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.push(alphabet[(x % alphabet.len() as u64) as usize]);
        }
        words.push(w);
    }
    words
}

#[test]
fn quoting_round_trips_through_every_installed_posix_shell() {
    let words = hostile_words();
    let mut tried = Vec::new();
    for sh in ["sh", "dash", "bash", "mksh", "busybox"] {
        let mut cmd = Command::new(sh);
        if sh == "busybox" {
            cmd.arg("sh");
        }
        let line = format!("printf '%s\\000' {}", shell::join(&words).unwrap());
        let Ok(out) = cmd.arg("-c").arg(&line).output() else {
            continue;
        };
        tried.push(sh);
        assert!(
            out.status.success(),
            "{sh}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Vec<String> = out
            .stdout
            .split(|&b| b == 0)
            .map(|w| String::from_utf8(w.to_vec()).unwrap())
            .collect();
        // printf leaves a trailing empty field after the last NUL.
        assert_eq!(&got[..got.len() - 1], &words[..], "{sh}");
    }
    assert!(tried.contains(&"sh"), "no POSIX sh found");
    assert!(shell::quote("nul\0byte").is_err());
}

#[test]
fn a_farm_run_into_a_results_directory_another_writer_holds_is_refused() {
    let farm = Farm::new(1);
    let results = farm.root().join("results");
    std::fs::create_dir_all(&results).unwrap();
    let lock = pocketperf::dir_lock::DirLock::acquire(&results).unwrap();
    let o = farm.command().output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("results") && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    let written: Vec<PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != lock.path())
        .collect();
    assert!(written.is_empty(), "{written:?}");
    drop(lock);
    // Once the holder is gone, the same farm runs.
    let (o, _, _) = farm.run();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
}
