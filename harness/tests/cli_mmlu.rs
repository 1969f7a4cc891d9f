//! `pocketperf mmlu` end to end with the reference model on a small slice of MMLU-576:
//! subset verification (and refusal of an altered copy), a logprob run with prefix reuse on
//! and off (results must agree), a generate run whose prompt must drop a shot to fit, the
//! result files' structure, the accuracy log, and the paired comparison.
//!
//! The slice is kept small (1-shot prompts, 2 questions of 2 subjects) so the file runs in
//! seconds on two cores.

use pocketperf_datasets::mmlu::{self, Letter, Split};
use pocketperf_datasets::score::{WILSON_Z, parse_generated};
use pocketperf_datasets::subset;
use pocketperf_reports::schema::{ResultFile, load_result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Largest difference tolerated between a log-probability computed with prefix reuse and the
/// same one computed from an empty cache, in nats. Reuse changes only how the prompt is cut
/// into forward calls (the suffix is one batch after the cached prefix instead of part of one
/// long prefill), so the two agree exactly while every matrix-product row and every attention
/// row is computed by the same kernel whatever the batch (true of the current runtime, where
/// they come out bit-identical). A batched kernel that sums in a batch-dependent order would
/// perturb each product in the last f32 bits; through 30 layers and the f16 rounding of the
/// KV cache that stays below 1e-3 nats, while a reuse bug (a stale or misplaced KV entry)
/// moves log-probabilities by tenths.
const REUSE_TOL: f64 = 2e-3;

use pocketperf_testkit::shared_dir;

fn mmlu_dir() -> PathBuf {
    let d = shared_dir().join("datasets/mmlu");
    assert!(
        d.join("data/test").is_dir(),
        "MMLU not found at {} (set POCKETPERF_SHARED)",
        d.display()
    );
    d
}

fn pocketperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .env_remove("POCKETPERF_MMLU_DIR")
        .output()
        .expect("run pocketperf")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pocketperf failed ({:?})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

struct Runs {
    _tmp: tempfile::TempDir,
    on: PathBuf,
    off: PathBuf,
    generate: PathBuf,
}

const SUBJECTS: &str = "abstract_algebra,anatomy";

/// The three runs, made once and shared by the tests of this file.
fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let mmlu = mmlu_dir();
        let mmlu = mmlu.to_str().unwrap();
        let on = tmp.path().join("on");
        let off = tmp.path().join("off");
        let generate = tmp.path().join("generate");
        let common = [
            "mmlu",
            "run",
            "--mmlu-dir",
            mmlu,
            "--subjects",
            SUBJECTS,
            "--limit",
            "2",
            "--shots",
            "1",
            "--threads",
            "2",
        ];
        for (dir, reuse) in [(&on, "on"), (&off, "off")] {
            let mut args = common.to_vec();
            args.extend(["--prefix-reuse", reuse, "--out", dir.to_str().unwrap()]);
            ok(&pocketperf(&args));
        }
        // A context one token short of the 1-shot prompt of anatomy's first question: that
        // prompt must fall back to 0 shots.
        let m = read_json(&on.join("mmlu.json"));
        let first_anatomy = m["per_question"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["subject"] == "anatomy")
            .unwrap();
        let ctx = (first_anatomy["prompt_tokens"].as_u64().unwrap() - 1).to_string();
        ok(&pocketperf(&[
            "mmlu",
            "run",
            "--mmlu-dir",
            mmlu,
            "--subjects",
            "anatomy",
            "--limit",
            "1",
            "--shots",
            "1",
            "--mode",
            "generate",
            "--ctx",
            &ctx,
            "--threads",
            "2",
            "--out",
            generate.to_str().unwrap(),
        ]));
        Runs {
            _tmp: tmp,
            on,
            off,
            generate,
        }
    })
}

/// The questions of the slice, read independently from the MMLU copy and the manifest.
fn expected_questions() -> Vec<(String, u64, Letter)> {
    let dir = mmlu_dir();
    let mut out = Vec::new();
    for subject in SUBJECTS.split(',') {
        let rows = mmlu::load_split(&dir, Split::Test, subject).unwrap();
        let picked = subset::manifest()
            .iter()
            .filter(|e| e.subject == subject)
            .take(2);
        for e in picked {
            out.push((subject.to_string(), e.row, rows[e.row as usize].answer));
        }
    }
    out
}

fn wilson(c: f64, n: f64) -> (f64, f64) {
    let z = WILSON_Z;
    let p = c / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[test]
fn logprob_result_files_hold_every_question_with_its_scores() {
    let r = runs();
    let res: ResultFile = load_result(&r.on).unwrap();
    let acc = res.accuracy.as_ref().expect("accuracy section");
    assert_eq!(acc.dataset, "mmlu-576-slice");
    assert_eq!((acc.mode.as_str(), acc.shots, acc.n), ("logprob", 1, 4));
    assert!(res.performance.is_none());
    assert_eq!(res.meta.threads, 2);
    assert_eq!(res.meta.model.sha256.len(), 64);

    let want = expected_questions();
    assert_eq!(acc.per_question.len(), want.len());
    let mut correct = 0;
    for (q, (subject, row, answer)) in acc.per_question.iter().zip(&want) {
        assert_eq!(
            (&q.subject, q.row, q.answer),
            (subject, *row, answer.as_char())
        );
        let lp = q.logprobs.expect("four log-probabilities");
        // Log-probabilities of four distinct tokens: each ≤ 0, together at most probability 1.
        assert!(lp.iter().all(|x| x.is_finite() && *x <= 0.0), "{lp:?}");
        assert!(lp.iter().map(|x| x.exp()).sum::<f64>() <= 1.0 + 1e-6);
        let best = (0..4).fold(0, |b, i| if lp[i] > lp[b] { i } else { b });
        assert_eq!(q.choice, Some(Letter::ALL[best].as_char()));
        assert_eq!(q.correct, q.choice == Some(q.answer));
        correct += u64::from(q.correct);
    }
    assert_eq!(acc.correct, correct);
    let (lo, hi) = wilson(correct as f64, 4.0);
    assert!((acc.ci95[0] - lo).abs() < 1e-9 && (acc.ci95[1] - hi).abs() < 1e-9);
    let names: Vec<&str> = acc.per_subject.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["abstract_algebra", "anatomy"]);
    assert!(acc.per_subject.iter().all(|g| g.n == 2));
    let cats: Vec<(&str, u64)> = acc
        .per_category
        .iter()
        .map(|g| (g.name.as_str(), g.n))
        .collect();
    assert_eq!(cats, [("STEM", 2), ("other (business, health, misc.)", 2)]);

    // mmlu.json: provenance, intervals per group, costs, reuse.
    let m = read_json(&r.on.join("mmlu.json"));
    let h = &m["header"];
    for key in [
        "schema_version",
        "tool_version",
        "git_commit",
        "timestamp_utc",
    ] {
        assert!(!h[key].is_null(), "header.{key} missing");
    }
    assert_eq!(h["model_sha256"].as_str().unwrap(), res.meta.model.sha256);
    assert_eq!(
        m["letter_pieces"],
        serde_json::json!([" A", " B", " C", " D"])
    );
    for g in m["by_subject"].as_array().unwrap() {
        let (c, n) = (g["correct"].as_f64().unwrap(), g["total"].as_f64().unwrap());
        let (lo, hi) = wilson(c, n);
        assert!((g["ci95_low"].as_f64().unwrap() - lo).abs() < 1e-9);
        assert!((g["ci95_high"].as_f64().unwrap() - hi).abs() < 1e-9);
    }
    let pq = m["per_question"].as_array().unwrap();
    assert!(pq.iter().all(|q| q["shots_used"] == 1));
    assert!(
        pq.iter()
            .all(|q| q["prompt_tokens"].as_u64().unwrap() <= 2048)
    );
    // The second question of each subject reuses at least the subject's header and shot.
    assert!(pq[1]["reused_tokens"].as_u64().unwrap() > 40);
    assert!(pq[3]["reused_tokens"].as_u64().unwrap() > 40);
    let reuse = &m["reuse"];
    let (prompt, reused, prefilled) = (
        reuse["prompt_tokens"].as_u64().unwrap(),
        reuse["reused_tokens"].as_u64().unwrap(),
        reuse["prefilled_tokens"].as_u64().unwrap(),
    );
    assert_eq!(
        prompt,
        pq.iter()
            .map(|q| q["prompt_tokens"].as_u64().unwrap())
            .sum::<u64>()
    );
    assert_eq!(prompt, reused + prefilled);

    // The accuracy log: every sample once; its bytes are the four f32 log-probabilities of
    // the question mmlu.json names for that sample.
    let log = read_json(&r.on.join("mlperf_log_accuracy.json"));
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 4);
    let mut samples: Vec<u64> = log.iter().map(|e| e["qsl_idx"].as_u64().unwrap()).collect();
    samples.sort();
    assert_eq!(samples, [0, 1, 2, 3]);
    for e in log {
        let q = pq.iter().find(|q| q["qsl_idx"] == e["qsl_idx"]).unwrap();
        let rec = acc
            .per_question
            .iter()
            .find(|r| q["subject"] == r.subject.as_str() && q["row"] == r.row)
            .unwrap();
        let hex = e["data"].as_str().unwrap();
        assert_eq!(hex.len(), 32);
        let bytes: Vec<u8> = (0..16)
            .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).unwrap())
            .collect();
        let lp = rec.logprobs.unwrap();
        for k in 0..4 {
            let x = f32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap());
            // result.json holds the f32 widened to f64; a JSON reader may be off in the last
            // f64 bit, which narrowing back to f32 removes.
            assert_eq!(x, lp[k] as f32);
        }
    }
    let detail = std::fs::read_to_string(r.on.join("mlperf_log_detail.txt")).unwrap();
    assert!(
        detail.contains(r#""key": "effective_test_mode", "value": "AccuracyOnly""#),
        "{detail}"
    );
    assert!(r.on.join("mlperf_log_summary.txt").is_file());
}

#[test]
fn prefix_reuse_on_and_off_agree() {
    let r = runs();
    let on = load_result(&r.on).unwrap().accuracy.unwrap();
    let off = load_result(&r.off).unwrap().accuracy.unwrap();
    let mut max_diff = 0f64;
    for (a, b) in on.per_question.iter().zip(&off.per_question) {
        assert_eq!((&a.subject, a.row), (&b.subject, b.row));
        let (la, lb) = (a.logprobs.unwrap(), b.logprobs.unwrap());
        for k in 0..4 {
            max_diff = max_diff.max((la[k] - lb[k]).abs());
        }
        let mut sorted = la;
        sorted.sort_by(|x, y| y.total_cmp(x));
        if sorted[0] - sorted[1] > 2.0 * REUSE_TOL {
            assert_eq!(a.choice, b.choice, "{} row {}", a.subject, a.row);
        }
    }
    assert!(max_diff <= REUSE_TOL, "max |Δ logprob| = {max_diff}");
    eprintln!("prefix reuse on vs off: max |Δ logprob| = {max_diff:e}");

    let m_on = read_json(&r.on.join("mmlu.json"));
    let m_off = read_json(&r.off.join("mmlu.json"));
    assert_eq!(m_off["reuse"]["reused_tokens"], 0);
    assert_eq!(
        m_on["reuse"]["prompt_tokens"], m_off["reuse"]["prompt_tokens"],
        "reuse must not change the prompts"
    );
    assert!(
        m_on["reuse"]["prefilled_tokens"].as_u64() < m_off["reuse"]["prefilled_tokens"].as_u64()
    );

    // The paired comparison counts the discordant questions.
    let out = ok(&pocketperf(&[
        "mmlu",
        "compare",
        r.on.to_str().unwrap(),
        r.off.to_str().unwrap(),
        "--json",
    ]));
    let v: Value = serde_json::from_str(&out).unwrap();
    let b = on
        .per_question
        .iter()
        .zip(&off.per_question)
        .filter(|(x, y)| x.correct && !y.correct)
        .count();
    let c = on
        .per_question
        .iter()
        .zip(&off.per_question)
        .filter(|(x, y)| !x.correct && y.correct)
        .count();
    assert_eq!(v["mcnemar"]["pairs"], 4);
    assert_eq!(v["mcnemar"]["b"].as_u64(), Some(b as u64));
    assert_eq!(v["mcnemar"]["c"].as_u64(), Some(c as u64));
    if b + c == 0 {
        assert_eq!(v["mcnemar"]["p_value"], 1.0);
    }
}

#[test]
fn generate_run_drops_a_shot_to_fit_and_scores_the_generated_text() {
    let r = runs();
    let acc = load_result(&r.generate).unwrap().accuracy.unwrap();
    assert_eq!((acc.mode.as_str(), acc.n), ("generate", 1));
    let q = &acc.per_question[0];
    let text = q.generated.as_deref().expect("generated text");
    assert!(q.logprobs.is_none());
    assert_eq!(q.choice, parse_generated(text).map(Letter::as_char));
    assert_eq!(q.correct, q.choice == Some(q.answer));

    let m = read_json(&r.generate.join("mmlu.json"));
    let pq = &m["per_question"][0];
    assert_eq!(pq["shots_used"], 0, "the 1-shot prompt does not fit");
    assert_eq!(m["prompts_with_dropped_shots"], 1);
    assert_eq!(m["shots_dropped"], 1);
    let ctx = m["ctx"].as_u64().unwrap();
    let generated = pq["generated_tokens"].as_u64().unwrap();
    assert!((1..=4).contains(&generated));
    assert!(pq["prompt_tokens"].as_u64().unwrap() + 3 <= ctx);
    assert_eq!(
        pq["generated_ids"].as_array().unwrap().len() as u64,
        generated
    );
    let res = load_result(&r.generate).unwrap();
    assert!(res.warnings.iter().any(|w| w.contains("dropped 1 shot")));

    // Runs over different questions are not paired.
    let out = pocketperf(&[
        "mmlu",
        "compare",
        r.on.to_str().unwrap(),
        r.generate.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not the candidate"));
}

#[test]
fn subset_verify_accepts_the_release_and_reports_an_altered_copy() {
    let mmlu = mmlu_dir();
    let out = ok(&pocketperf(&[
        "mmlu",
        "subset",
        "--verify",
        "--mmlu-dir",
        mmlu.to_str().unwrap(),
    ]));
    assert!(
        out.contains("matches the MMLU-576 manifest (576 entries"),
        "{out}"
    );

    // A copy with one listed question changed by one character.
    let tmp = tempfile::tempdir().unwrap();
    for split in ["test", "dev"] {
        let src = mmlu.join("data").join(split);
        let dst = tmp.path().join(split);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(&src).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
    }
    let entry = &subset::manifest()[0];
    let path = tmp
        .path()
        .join("test")
        .join(format!("{}_test.csv", entry.subject));
    let rows = mmlu::load_split(tmp.path(), Split::Test, &entry.subject).unwrap();
    let question = &rows[entry.row as usize].question;
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches(question.as_str()).count(), 1);
    std::fs::write(
        &path,
        text.replace(question.as_str(), &format!("{question}?")),
    )
    .unwrap();

    let dir = tmp.path().to_str().unwrap();
    let out = pocketperf(&["mmlu", "subset", "--verify", "--mmlu-dir", dir]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("{}, row {}: content differs", entry.subject, entry.row);
    assert!(stdout.contains(&want), "{stdout}");

    // A run on that copy is refused before any model work, naming the question.
    let out = pocketperf(&[
        "mmlu",
        "run",
        "--mmlu-dir",
        dir,
        "--out",
        tmp.path().join("run").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "subject {}, row {}: row content differs",
            entry.subject, entry.row
        )),
        "{stderr}"
    );
}
