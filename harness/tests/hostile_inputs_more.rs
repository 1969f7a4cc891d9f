//! Hostile inputs, continued from `hostile_inputs.rs`: a second writer on a result directory,
//! inputs that once hung a command, runs that measured nothing, and control characters and
//! tampered rows read from files. Each test is named after what it guards
//! (`docs/RELIABILITY.md` lists them); everything runs on the tiny synthetic model in seconds.

mod soak_util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use soak_util::{bin, journal, of_type, run, tiny_model};

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill with a valid pid (our child, not yet reaped) and a valid signal number.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0);
}

/// Waits for `child` to exit, at most `limit`; kills it and panics past that.
fn wait_at_most(mut child: Child, limit: Duration, what: &str) -> Output {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what}: still running after {limit:?}\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Soak flags for a short soak of the tiny model writing to `out`.
fn soak_args(model: &Path, out: &Path, duration: &str) -> Vec<String> {
    [
        "soak",
        "--out",
        &out.display().to_string(),
        "--model",
        &model.display().to_string(),
        "--threads",
        "1",
        "--duration",
        duration,
        "--dialogues",
        "1",
        "--max-turn-tokens",
        "2",
        "--probe-prompts",
        "1",
        "--probe-tokens",
        "2",
        "--probe-mmlu",
        "0",
        "--probe-every",
        "1s",
        "--rss-every",
        "0s",
        "--checkpoint-every",
        "1s",
        "--warmup",
        "0s",
    ]
    .map(String::from)
    .to_vec()
}

fn spawn(args: &[String]) -> Child {
    Command::new(bin())
        .args(args)
        .env_remove("POCKETPERF_FAULT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

// ---- 1. One writer per result directory ----

#[test]
fn a_soak_resume_while_the_soak_runs_is_refused_and_the_journal_stays_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let soak = dir.path().join("soak");
    let child = spawn(&soak_args(&model, &soak, "60s"));
    let path = soak.join("journal.jsonl");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&path).is_ok_and(|j| j.contains("\"type\":\"query\"")) {
        assert!(t0.elapsed().as_secs() < 30, "no dialogue turn within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let soak_s = soak.display().to_string();
    for attempt in [
        vec!["soak", "--resume", &soak_s, "--duration", "90s"],
        // A second new soak into the same directory is refused by the lock too.
        soak_args(&model, &soak, "5s")
            .iter()
            .map(String::as_str)
            .collect(),
    ] {
        let o = run(&attempt, &[]);
        assert_eq!(o.status.code(), Some(2), "{attempt:?}\n{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&soak_s) && err.contains(&format!("pid {}", child.id())),
            "{err}"
        );
        assert!(err.contains("another pocketperf process"), "{err}");
    }
    signal(&child, libc::SIGINT);
    let o = wait_at_most(child, Duration::from_secs(30), "soak after SIGINT");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let j = journal(&soak);
    // Only the first soak's records: one segment, consecutive sequence numbers.
    assert_eq!(of_type(&j, "segment").len(), 1);
    for (i, e) in j.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64), "{e}");
    }
    assert!(!soak.join(".pocketperf.lock").exists());
    // Still resumable: to a few seconds past where it stopped.
    let t_last = j.last().unwrap()["t_s"].as_f64().unwrap();
    let total = format!("{}ms", ((t_last + 1.5) * 1000.0) as u64);
    let o = run(&["soak", "--resume", &soak_s, "--duration", &total], &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let j = journal(&soak);
    assert_eq!(of_type(&j, "segment").len(), 2);
    for (i, e) in j.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64), "{e}");
    }
}

#[test]
fn a_run_into_a_directory_another_writer_holds_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = dir.path().join("run");
    std::fs::create_dir_all(&out).unwrap();
    // The holder: a process of ours holding the lock the way every writer takes it.
    let lock = pocketperf::dir_lock::DirLock::acquire(&out).unwrap();
    let (model_s, out_s) = (model.display().to_string(), out.display().to_string());
    let mmlu_dir = soak_util::mmlu_dir().display().to_string();
    for args in [
        vec![
            "run",
            "--scenario",
            "single-stream",
            "--model",
            &model_s,
            "--out",
            &out_s,
        ],
        vec![
            "run",
            "--scenario",
            "dialogue",
            "--model",
            &model_s,
            "--out",
            &out_s,
        ],
        vec![
            "mmlu",
            "run",
            "--model",
            &model_s,
            "--mmlu-dir",
            &mmlu_dir,
            "--limit",
            "1",
            "--out",
            &out_s,
        ],
    ] {
        let o = run(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}\n{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&out_s) && err.contains(&format!("pid {}", std::process::id())),
            "{args:?}: {err}"
        );
        let names: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p != lock.path())
            .collect();
        assert!(names.is_empty(), "{args:?} wrote {names:?}");
    }
    drop(lock);
}

// ---- 2. Inputs that once hung a command end it ----

#[test]
fn report_with_a_telemetry_column_of_plus_and_minus_1e308_ends_instead_of_looping() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/real-singlestream-a");
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), run_dir.join(e.file_name())).unwrap();
        }
    }
    std::fs::write(
        run_dir.join("telemetry.csv"),
        "t_s,temp.soc.c,power.mw\n0,1e308,100\n1,-1e308,200\n2,40,300\n3,41,250\n",
    )
    .unwrap();
    let child = Command::new(bin())
        .args(["report", run_dir.to_str().unwrap(), "--print", "none"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_at_most(child, Duration::from_secs(30), "report");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    // The plottable points are still drawn (the absurd ones are left out of the axes).
    assert!(html.contains("<svg"), "no plot");
}

/// A sysfs tree with two thermal zones: zone 0's `type` holds terminal escape sequences and
/// its `temp` is made by `make_temp`; zone 1 is a link stand-in (a captured tree's symlink,
/// a file holding `../../devices/virtual/thermal/thermal_zone1`) to a plain skin sensor.
fn hostile_sysfs(root: &Path, make_temp: impl FnOnce(&Path)) {
    let zone = root.join("class/thermal/thermal_zone0");
    std::fs::create_dir_all(&zone).unwrap();
    std::fs::write(zone.join("type"), "soc\x1b]0;owned\x07\x1b[31mRED\x1b[0m\n").unwrap();
    make_temp(&zone.join("temp"));
    let real = root.join("devices/virtual/thermal/thermal_zone1");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("type"), "skin\n").unwrap();
    std::fs::write(real.join("temp"), "36500\n").unwrap();
    std::fs::write(
        root.join("class/thermal/thermal_zone1"),
        "../../devices/virtual/thermal/thermal_zone1\n",
    )
    .unwrap();
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path and mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn probe_on_a_tree_whose_temp_is_a_fifo_ends_and_reports_the_other_sensors() {
    let dir = tempfile::tempdir().unwrap();
    hostile_sysfs(dir.path(), mkfifo);
    let child = Command::new(bin())
        .args(["probe", "--sysfs-root", dir.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_at_most(child, Duration::from_secs(20), "probe");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // The other zone, behind a link stand-in, is still read.
    assert!(out.contains("skin") && out.contains("36.5"), "{out}");
}

#[test]
fn probe_escapes_control_characters_read_from_sysfs_type_files() {
    let dir = tempfile::tempdir().unwrap();
    hostile_sysfs(dir.path(), |p| std::fs::write(p, "45000\n").unwrap());
    let o = run(
        &["probe", "--sysfs-root", dir.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("soc\\u{1b}]0;owned\\u{7}"), "{out}");
    let o = run(
        &[
            "probe",
            "--json",
            "--sysfs-root",
            dir.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!o.stdout.contains(&0x1b) && !o.stdout.contains(&0x07));
}

#[test]
fn a_soak_whose_server_never_greets_ends_on_sigterm_not_after_the_startup_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let soak = dir.path().join("soak");
    let mut args = soak_args(&model, &soak, "60s");
    args.extend(["--serve-cmd".to_string(), "cat".to_string()]);
    let child = spawn(&args);
    let path = soak.join("journal.jsonl");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&path).is_ok_and(|j| j.contains("\"type\":\"segment\"")) {
        assert!(t0.elapsed().as_secs() < 30, "no journal within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Well inside the server's start-up wait (`cat` never says hello).
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGTERM);
    let t_sig = Instant::now();
    let o = wait_at_most(child, Duration::from_secs(30), "soak after SIGTERM");
    assert!(
        t_sig.elapsed() < Duration::from_secs(15),
        "{:?}",
        t_sig.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INCOMPLETE"), "{stdout}");
    let j = journal(&soak);
    let end = j.last().unwrap();
    assert_eq!(end["reason"], "interrupted", "{end}");
}

// ---- 3. A verdict needs evidence ----

#[test]
fn a_dialogue_run_of_no_dialogue_is_refused_instead_of_passing() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = dir.path().join("run");
    let (model_s, out_s) = (model.display().to_string(), out.display().to_string());
    let o = run(
        &[
            "run",
            "--scenario",
            "dialogue",
            "--model",
            &model_s,
            "--out",
            &out_s,
        ],
        &[("POCKETPERF_DIALOGUES", "0"), ("POCKETPERF_IDLE_S", "0")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("POCKETPERF_DIALOGUES=0"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "a result directory was created");
}

#[test]
fn a_run_in_which_every_query_fails_is_invalid_not_valid() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = dir.path().join("run");
    let conf = dir.path().join("user.conf");
    std::fs::write(
        &conf,
        "*.SingleStream.min_query_count = 3\n*.SingleStream.min_duration = 0\n",
    )
    .unwrap();
    let (model_s, out_s, conf_s) = (
        model.display().to_string(),
        out.display().to_string(),
        conf.display().to_string(),
    );
    // Every request crashes the server (it aborts before answering).
    let o = run(
        &[
            "run",
            "--scenario",
            "single-stream",
            "--sut",
            "process",
            "--model",
            &model_s,
            "--config",
            &conf_s,
            "--out",
            &out_s,
        ],
        &[("POCKETPERF_FAULT", "crash_after=0")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INVALID"), "{stdout}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(doc["performance"]["valid"], false, "{}", doc["performance"]);
}

// ---- 4. Tampered rows, soak directories ----

#[test]
fn a_tampered_mmlu_dev_row_is_refused_naming_subject_and_row() {
    let tmp = tempfile::tempdir().unwrap();
    let src = soak_util::mmlu_dir().join("data");
    for split in ["test", "dev"] {
        let dst = tmp.path().join(split);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(src.join(split)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
    }
    let subject = "anatomy";
    let dev = tmp.path().join(format!("dev/{subject}_dev.csv"));
    let before = std::fs::read_to_string(&dev).unwrap();
    // One word of the third shot's question changed (the CSV stays well-formed).
    let lines: Vec<&str> = before.lines().collect();
    let changed = lines[2].replacen(' ', "  ", 1);
    assert_ne!(changed, lines[2]);
    let after = before.replacen(lines[2], &changed, 1);
    std::fs::write(&dev, after).unwrap();
    let model = tiny_model(tmp.path());
    let out = tmp.path().join("run");
    let o = run(
        &[
            "mmlu",
            "run",
            "--model",
            model.to_str().unwrap(),
            "--mmlu-dir",
            tmp.path().to_str().unwrap(),
            "--subjects",
            subject,
            "--limit",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("dev-shot manifest") && err.contains("subject anatomy, dev row 2"),
        "{err}"
    );
    assert!(!out.join("result.json").exists());
}

#[test]
fn report_on_a_soak_directory_rewrites_its_report_and_gate_refuses_it_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let soak = dir.path().join("soak");
    let o = run(
        &soak_args(&model, &soak, "2s")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    std::fs::remove_file(soak.join("robustness.json")).unwrap();
    let soak_s = soak.display().to_string();
    let o = run(&["report", &soak_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(soak.join("robustness.json").is_file());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("evidence"), "{stdout}");
    let o = run(
        &["gate", "--baseline", &soak_s, "--candidate", &soak_s],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let all = text(&o);
    assert!(all.contains("is a soak directory"), "{all}");
}
