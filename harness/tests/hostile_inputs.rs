//! Hostile inputs, each a reproduction of a finding that once destroyed a model, filled a
//! disk, panicked, hung or reported PASS for a run in which nothing ran; each test is named
//! after what it guards (`docs/RELIABILITY.md` lists them). Everything runs on the tiny
//! synthetic model in seconds.

mod soak_util;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};
use soak_util::{TinyLlama, bin, check, robustness, run, tiny_llama, tiny_model};

fn sha256(p: &Path) -> String {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    format!("{:x}", Sha256::digest(bytes))
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

/// Runs `args`, which must fail with exit code 2 and one stderr line, `error: …`, holding
/// every one of `needles`; returns that line.
#[track_caller]
fn refused(args: &[&str], env: &[(&str, &str)], needles: &[&str]) -> String {
    let o = run(args, env);
    assert_eq!(o.status.code(), Some(2), "{args:?}\n{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
    assert!(
        err.starts_with("error: ") && !err.contains('\n'),
        "{args:?}: not one error line: {err:?}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

/// The tiny model (context 256) written to `dir/a/m.gguf`.
fn model_in_a(dir: &Path) -> PathBuf {
    let a = dir.join("a");
    std::fs::create_dir_all(&a).unwrap();
    let m = a.join("m.gguf");
    std::fs::write(&m, tiny_llama(TinyLlama::default())).unwrap();
    m
}

/// Files in `dir` whose name marks them as a rewrite's temporary.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

// ---- 1. Rewrites never touch their input ----

#[test]
fn model_align_refuses_its_input_by_another_path_and_the_input_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in_a(dir.path());
    let digest = sha256(&m);
    let dotdot = dir.path().join("a/../a/m.gguf");
    let symlink = dir.path().join("link.gguf");
    std::os::unix::fs::symlink(&m, &symlink).unwrap();
    let hard = dir.path().join("hard.gguf");
    std::fs::hard_link(&m, &hard).unwrap();
    for out in [&dotdot, &symlink, &hard] {
        let (m_s, out_s) = (m.display().to_string(), out.display().to_string());
        refused(
            &["model", "align", "--to", "4096", &m_s, &out_s],
            &[],
            &["is the source file", "same device and inode"],
        );
        assert_eq!(sha256(&m), digest, "{out_s}: the input changed");
        assert!(
            std::fs::symlink_metadata(&symlink)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    assert_eq!(sha256(&hard), digest);
    assert!(temporaries(&dir.path().join("a")).is_empty());
    assert!(temporaries(dir.path()).is_empty());
}

#[test]
fn model_align_replaces_a_symlinked_output_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in_a(dir.path());
    let victim = dir.path().join("notes.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let out = dir.path().join("aligned.gguf");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    let (m_s, out_s) = (m.display().to_string(), out.display().to_string());
    let o = run(&["model", "align", "--to", "4096", &m_s, &out_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let meta = std::fs::symlink_metadata(&out).unwrap();
    assert!(meta.file_type().is_file(), "the symlink was followed");
    // The rewrite is a valid GGUF with every tensor on a 4096-byte boundary.
    let g = pocketperf_runtime::gguf::GgufFile::open(&out).unwrap();
    assert!(
        g.tensors()
            .iter()
            .all(|t| g.tensor_file_offset(t).is_multiple_of(4096))
    );
    assert!(temporaries(dir.path()).is_empty());
}

#[test]
fn logits_raw_out_replaces_a_symlinked_output_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in_a(dir.path());
    let m_s = m.display().to_string();
    let raw = |out: &Path| {
        let out_s = out.display().to_string();
        let args = ["logits", "--model", &m_s, "--prompt-ids", "72,105"];
        let o = run(&[&args[..], &["--raw-out", &out_s]].concat(), &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    };
    // The same logits written to a plain new file: what the symlinked output must hold.
    let plain = dir.path().join("plain.f32");
    raw(&plain);
    let expected = std::fs::read(&plain).unwrap();
    assert!(!expected.is_empty() && expected.len().is_multiple_of(4));

    let victim = dir.path().join("notes.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let out = dir.path().join("logits.f32");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    raw(&out);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let meta = std::fs::symlink_metadata(&out).unwrap();
    assert!(meta.file_type().is_file(), "the symlink was followed");
    assert_eq!(std::fs::read(&out).unwrap(), expected);
    assert!(temporaries(dir.path()).is_empty());
}

#[test]
fn logits_raw_out_refuses_the_model_file_by_another_path_and_the_model_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in_a(dir.path());
    let before = sha256(&m);
    let m_s = m.display().to_string();
    let by_dots = dir.path().join("a/../a/m.gguf").display().to_string();
    let link = dir.path().join("link.gguf");
    std::os::unix::fs::symlink(&m, &link).unwrap();
    let link_s = link.display().to_string();
    for out in [&by_dots, &link_s] {
        refused(
            &[
                "logits",
                "--model",
                &m_s,
                "--prompt-ids",
                "72",
                "--raw-out",
                out,
            ],
            &[],
            &["--raw-out", "is the model file", "same device and inode"],
        );
        assert_eq!(sha256(&m), before, "--raw-out {out}: the model changed");
    }
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(temporaries(&dir.path().join("a")).is_empty());
}

#[test]
fn governor_sim_replaces_symlinked_outputs_instead_of_writing_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gov");
    std::fs::create_dir_all(&out).unwrap();
    let mut victims = Vec::new();
    for name in [
        "governor_sim.json",
        "governor_trace.csv",
        "governor_sim.html",
    ] {
        let victim = dir.path().join(format!("victim-{name}"));
        std::fs::write(&victim, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        victims.push((name, victim));
    }
    let out_s = out.display().to_string();
    let o = run(
        &[
            "governor",
            "sim",
            "--device",
            "sim:pixel-8-pro",
            "--minutes",
            "30",
            "--out",
            &out_s,
        ],
        &[],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    for (name, victim) in &victims {
        assert_eq!(
            std::fs::read_to_string(victim).unwrap(),
            "keep me\n",
            "{name}"
        );
        let p = out.join(name);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{name}: the symlink was followed"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("governor_sim.json")).unwrap()).unwrap();
    assert_eq!(json["device"], "sim:pixel-8-pro");
    let csv = std::fs::read_to_string(out.join("governor_trace.csv")).unwrap();
    assert!(csv.starts_with("# schema_version="), "{csv:.200}");
    assert!(csv.contains("\ngovernor,t_s,skin_c,"), "no column header");
    assert!(temporaries(&out).is_empty());
}

// ---- 2. Alignment is bounded ----

#[test]
fn model_align_refuses_an_alignment_beyond_64_kib_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let m = model_in_a(dir.path());
    let out = dir.path().join("o.gguf");
    let (m_s, out_s) = (m.display().to_string(), out.display().to_string());
    // 128 KiB: just over the bound; 1 GiB: the value that once filled a disk; 3000: not a
    // power of two.
    for to in ["131072", "1073741824", "3000", "0"] {
        refused(
            &["model", "align", "--to", to, &m_s, &out_s],
            &[],
            &["--to", "65536", "power of two"],
        );
        assert!(!out.exists(), "--to {to}: an output was written");
    }
    assert!(temporaries(dir.path()).is_empty());
}

// ---- 3. No panic on absurd numbers in a config file or a fault spec ----

#[test]
fn an_offline_target_qps_of_1e300_is_refused_naming_the_key_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let conf = dir.path().join("user.conf");
    std::fs::write(&conf, "*.Offline.target_qps = 1e300\n").unwrap();
    let out = dir.path().join("run");
    let (model_s, conf_s, out_s) = (
        model.display().to_string(),
        conf.display().to_string(),
        out.display().to_string(),
    );
    refused(
        &[
            "run",
            "--scenario",
            "offline",
            "--model",
            &model_s,
            "--config",
            &conf_s,
            "--out",
            &out_s,
        ],
        &[],
        &["user.conf", "target_qps", "0.01", "1e6"],
    );
    assert!(!out.exists(), "a result directory was created");
}

#[test]
fn a_fault_leak_of_u64_max_kib_is_refused_at_server_start() {
    let err = refused(
        &["serve"],
        &[("POCKETPERF_FAULT", "leak_kib=18446744073709551615")],
        &["leak_kib", "out of range", "0 to 1048576"],
    );
    assert!(!err.contains("capacity overflow"), "{err}");
}

// ---- 4. Limits checked before allocating ----

#[test]
fn perplexity_refuses_a_ctx_beyond_the_model_context_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let file = dir.path().join("text.txt");
    std::fs::write(
        &file,
        "the quick brown fox jumps over the lazy dog\n".repeat(50),
    )
    .unwrap();
    let (model_s, file_s) = (model.display().to_string(), file.display().to_string());
    refused(
        &[
            "perplexity",
            "--model",
            &model_s,
            "--file",
            &file_s,
            "--ctx",
            "100000",
        ],
        &[],
        &["--ctx 100000", "context length 4096"],
    );
}

#[test]
fn generate_refuses_max_tokens_of_u64_max_with_a_small_ctx() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let model_s = model.display().to_string();
    refused(
        &[
            "generate",
            "--model",
            &model_s,
            "--prompt",
            "hello",
            "--max-tokens",
            "18446744073709551615",
            "--ctx",
            "16",
        ],
        &[],
        &["--max-tokens 18446744073709551615", "--ctx 16"],
    );
}

// ---- 5. Numbers that once hung a command are range-checked ----

#[test]
fn early_stopping_refuses_u64_max_queries_instead_of_hanging() {
    refused(
        &[
            "early-stopping",
            "--percentile",
            "90",
            "--queries",
            "18446744073709551615",
        ],
        &[],
        &["--queries", "1000000"],
    );
}

#[test]
fn early_stopping_refuses_a_percentile_beyond_99_99_instead_of_overflowing() {
    let err = refused(
        &[
            "early-stopping",
            "--percentile",
            "99.99999999999",
            "--over-bound",
            "1000000",
        ],
        &[],
        &["--"],
    );
    assert!(!err.contains("9223372036854775807"), "{err}");
    refused(
        &[
            "early-stopping",
            "--percentile",
            "99.99999999999",
            "--over-bound",
            "10",
        ],
        &[],
        &["--percentile", "99.99"],
    );
    refused(
        &[
            "early-stopping",
            "--percentile",
            "99",
            "--over-bound",
            "1000000",
        ],
        &[],
        &["--over-bound", "100000"],
    );
    // The bound itself is planned.
    let o = run(
        &[
            "early-stopping",
            "--percentile",
            "99.99",
            "--over-bound",
            "10",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn run_refuses_a_server_qps_of_1e_300_instead_of_waiting_forever() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = dir.path().join("run");
    let (model_s, out_s) = (model.display().to_string(), out.display().to_string());
    refused(
        &[
            "run",
            "--scenario",
            "server",
            "--model",
            &model_s,
            "--out",
            &out_s,
            "--server-qps=1e-300",
        ],
        &[],
        &["--server-qps", "0.01", "1e6"],
    );
    assert!(!out.exists(), "a result directory was created");
}

// ---- 6. Serve protocol: a key given twice is an error ----

#[test]
fn a_serve_request_with_a_duplicate_op_is_refused_not_obeyed() {
    let mut child = Command::new(bin())
        .arg("serve")
        .env_remove("POCKETPERF_FAULT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        serde_json::from_str::<serde_json::Value>(&l).unwrap_or_else(|e| panic!("{e}: {l:?}"))
    };
    assert_eq!(next()["event"], "hello");
    for line in [
        r#"{"id":1,"op":"hello","op":"shutdown"}"#,
        r#"{"id":2,"op":"stats","id":3}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let ev = next();
        assert_eq!(ev["event"], "error", "{line}: {ev}");
        let msg = ev["message"].as_str().unwrap();
        assert!(msg.contains("duplicate key"), "{line}: {msg}");
    }
    // The server did not shut down: it still answers.
    writeln!(stdin, r#"{{"id":4,"op":"hello"}}"#).unwrap();
    stdin.flush().unwrap();
    let ev = next();
    assert_eq!(
        (ev["event"].as_str(), ev["id"].as_u64()),
        (Some("hello"), Some(4))
    );
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

// ---- 7. A soak verdict needs evidence ----

/// Runs a 3-second soak of the tiny model with `extra` flags; returns the output and the
/// soak directory.
fn short_soak(dir: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let model = tiny_model(dir);
    let out = dir.join("soak");
    let (model_s, out_s) = (model.display().to_string(), out.display().to_string());
    let mut args = vec![
        "soak",
        "--out",
        &out_s,
        "--model",
        &model_s,
        "--threads",
        "1",
        "--duration",
        "3s",
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
        "2s",
        "--warmup",
        "0s",
    ];
    args.extend_from_slice(extra);
    (run(&args, &[]), out)
}

#[test]
fn a_soak_whose_server_never_starts_is_invalid_not_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = short_soak(dir.path(), &["--serve-cmd", "/nonexistent/bin"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INVALID"), "{stdout}");
    assert!(!stdout.contains("— PASS"), "{stdout}");
    let doc = robustness(&out);
    assert_eq!(doc["passed"], false);
    let ev = check(&doc, "evidence");
    assert_eq!(ev["verdict"], "fail", "{ev}");
    assert!(
        ev["detail"].as_str().unwrap().contains("never started"),
        "{ev}"
    );
}

#[test]
fn a_soak_in_which_every_request_is_refused_is_invalid_not_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = short_soak(dir.path(), &["--ctx", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INVALID"), "{stdout}");
    let doc = robustness(&out);
    assert_eq!(doc["passed"], false);
    let ev = check(&doc, "evidence");
    assert_eq!(ev["verdict"], "fail", "{ev}");
    assert!(
        ev["detail"]
            .as_str()
            .unwrap()
            .contains("no dialogue turn succeeded"),
        "{ev}"
    );
}

#[test]
fn a_short_clean_soak_has_evidence_and_passes_that_check() {
    let dir = tempfile::tempdir().unwrap();
    let (o, out) = short_soak(dir.path(), &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let doc = robustness(&out);
    let ev = check(&doc, "evidence");
    assert_eq!(ev["verdict"], "pass", "{ev}");
    assert!(ev["value"].as_f64().unwrap() >= 1.0, "{ev}");
}

#[test]
fn an_interrupted_soak_is_incomplete_not_pass() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = dir.path().join("soak");
    let (model_s, out_s) = (model.display().to_string(), out.display().to_string());
    let child = Command::new(bin())
        .args([
            "soak",
            "--out",
            &out_s,
            "--model",
            &model_s,
            "--threads",
            "1",
            "--duration",
            "60s",
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
            "--rss-every",
            "0s",
            "--warmup",
            "0s",
        ])
        .env_remove("POCKETPERF_FAULT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once a dialogue turn is on record (well before the planned minute).
    let journal = out.join("journal.jsonl");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"type\":\"query\"")) {
        assert!(t0.elapsed().as_secs() < 30, "no dialogue turn within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill with a valid pid (our child, not yet reaped) and a valid signal number.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INCOMPLETE"), "{stdout}");
    let ev = check(&robustness(&out), "evidence").clone();
    assert_eq!(ev["verdict"], "fail", "{ev}");
    assert!(
        ev["detail"].as_str().unwrap().contains("interrupted"),
        "{ev}"
    );
}

// ---- 8. Outputs replace symlinks instead of following them ----

#[test]
fn report_replaces_a_report_md_symlink_instead_of_writing_through_it() {
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
    let _ = std::fs::remove_file(run_dir.join("report.md"));
    let victim = dir.path().join("notes.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&victim, run_dir.join("report.md")).unwrap();
    let run_s = run_dir.display().to_string();
    let o = run(&["report", &run_s, "--print", "none"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let md = run_dir.join("report.md");
    assert!(
        std::fs::symlink_metadata(&md)
            .unwrap()
            .file_type()
            .is_file()
    );
    assert!(std::fs::read_to_string(&md).unwrap().starts_with('#'));
    assert!(temporaries(&run_dir).is_empty());
}
