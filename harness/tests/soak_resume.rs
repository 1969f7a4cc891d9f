//! The harness dies, the soak does not: SIGKILL of `pocketperf soak` mid-run (with a torn
//! journal line left behind), then `--resume`: no completed request is lost or repeated, the
//! schedule continues exactly where it stopped, and the killed harness's server did not
//! outlive it. SIGINT ends a soak cleanly with a report, and `--resume` continues it.

mod soak_util;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use soak_util::{bin, journal, mmlu_dir, of_type, robustness, run, tiny_model};

fn start(dir: &Path, duration: &str) -> Child {
    let model = tiny_model(dir);
    Command::new(bin())
        .args(["soak", "--out"])
        .arg(dir.join("soak"))
        .arg("--model")
        .arg(&model)
        .args(["--threads", "1", "--duration", duration, "--dialogues", "2"])
        .args([
            "--max-turn-tokens",
            "3",
            "--probe-prompts",
            "2",
            "--probe-tokens",
            "3",
        ])
        .args(["--probe-mmlu", "1", "--mmlu-dir"])
        .arg(mmlu_dir())
        .args([
            "--probe-every",
            "1s",
            "--rss-every",
            "0s",
            "--checkpoint-every",
            "1s",
        ])
        .env_remove("POCKETPERF_FAULT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start soak")
}

/// Waits until the journal holds at least `n` query records.
fn wait_for_queries(dir: &Path, n: usize, child: &mut Child) {
    let path = dir.join("soak/journal.jsonl");
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.matches(r#""type":"query""#).count() >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the soak ended early: {status:?}");
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u64) -> bool {
    // Signal 0 only checks that the process exists.
    // SAFETY: kill with signal 0 sends nothing.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn wait_gone(pid: u64) {
    let t0 = Instant::now();
    while alive(pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "server {pid} outlived its harness"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

type Key = (u64, u64, u64);

/// The dialogue turn after `k` in a cycle of the first `n` dialogues.
fn successor(k: Key, n: u64) -> Key {
    let turns = pocketperf_datasets::dialogues()[k.1 as usize].turns.len() as u64;
    if k.2 + 1 < turns {
        (k.0, k.1, k.2 + 1)
    } else if k.1 + 1 < n {
        (k.0, k.1 + 1, 0)
    } else {
        (k.0 + 1, 0, 0)
    }
}

/// Every dialogue turn in the journal follows its predecessor with no gap and no repeat, and
/// every probe round holds each of its items once, in order.
fn assert_schedule_unbroken(j: &[Value]) -> usize {
    let turns: Vec<Key> = of_type(j, "query")
        .iter()
        .map(|q| {
            (
                q["cycle"].as_u64().unwrap(),
                q["dialogue"].as_u64().unwrap(),
                q["turn"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(turns.first(), Some(&(0, 0, 0)));
    for w in turns.windows(2) {
        assert_eq!(w[1], successor(w[0], 2), "turn after {:?}", w[0]);
    }
    let mut round_items: Option<(u64, u64, u64)> = None; // (round, items, next)
    for e in j {
        match e["type"].as_str().unwrap() {
            "probe_round" => {
                if let Some((r, items, next)) = round_items {
                    assert_eq!(next, items, "round {r} left unfinished");
                }
                round_items = Some((
                    e["round"].as_u64().unwrap(),
                    e["items"].as_u64().unwrap(),
                    0,
                ));
            }
            "probe" => {
                let (r, items, next) = round_items.expect("probe outside a round");
                assert_eq!(
                    (e["round"].as_u64().unwrap(), e["index"].as_u64().unwrap()),
                    (r, next)
                );
                round_items = Some((r, items, next + 1));
            }
            _ => {}
        }
    }
    turns.len()
}

#[test]
fn sigkill_then_resume_loses_no_completed_request() {
    let dir = tempfile::tempdir().unwrap();
    let soak = dir.path().join("soak");
    let mut child = start(dir.path(), "10m");
    wait_for_queries(dir.path(), 12, &mut child);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before_bytes = std::fs::read(soak.join("journal.jsonl")).unwrap();
    let whole = before_bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let before: Vec<Value> = std::str::from_utf8(&before_bytes[..whole])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n_before = of_type(&before, "query").len();
    assert!(n_before >= 12);
    // The server of the killed harness dies with it.
    for s in of_type(&before, "sut_start") {
        wait_gone(s["pid"].as_u64().unwrap());
    }
    // A record torn by the kill (written here, so the test does not depend on timing).
    let torn = br#"{"seq":99999,"t_s":1.0,"type":"que"#;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(soak.join("journal.jsonl"))
        .unwrap();
    f.write_all(&before_bytes[whole..]).unwrap();
    f.write_all(torn).unwrap();
    drop(f);
    let torn_len = (before_bytes.len() - whole + torn.len()) as u64;

    let t_last = before.last().unwrap()["t_s"].as_f64().unwrap();
    let total = format!("{}ms", ((t_last + 2.0) * 1000.0) as u64);
    let o = run(
        &[
            "soak",
            "--resume",
            soak.to_str().unwrap(),
            "--duration",
            &total,
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    assert!(
        err.contains("resuming the soak") && err.contains("torn"),
        "{err}"
    );

    let after_bytes = std::fs::read(soak.join("journal.jsonl")).unwrap();
    assert_eq!(
        &after_bytes[..whole],
        &before_bytes[..whole],
        "journal rewritten"
    );
    let j = journal(&soak);
    let seg = &j[before.len()];
    assert_eq!(
        (seg["type"].as_str(), seg["resumed"].as_bool()),
        (Some("segment"), Some(true))
    );
    assert_eq!(seg["dropped_tail_bytes"].as_u64(), Some(torn_len));
    for (i, e) in j.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64));
    }
    let n_after = assert_schedule_unbroken(&j);
    assert!(n_after > n_before, "the resumed soak did no work");
    let doc = robustness(&soak);
    assert_eq!(doc["status"], "completed");
    assert_eq!(doc["counts"]["segments"], 2);
    assert_eq!(doc["segments"][1]["resumed"], true);
    assert_eq!(doc["crashes"], 0);
    assert!(doc["soak_time_s"].as_f64().unwrap() >= t_last + 2.0);
}

#[test]
fn sigint_ends_cleanly_with_a_report_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let soak = dir.path().join("soak");
    let mut child = start(dir.path(), "10m");
    wait_for_queries(dir.path(), 5, &mut child);
    // SAFETY: sends SIGINT to the child we started.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no exit after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(status.code(), Some(0 | 1)), "{status:?}");
    assert!(stdout.contains("soak Interrupted"), "{stdout}");
    let j = journal(&soak);
    let end = j.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["reason"].as_str()),
        (Some("end"), Some("interrupted"))
    );
    let doc = robustness(&soak);
    assert_eq!(doc["status"], "interrupted");
    for s in of_type(&j, "sut_start") {
        wait_gone(s["pid"].as_u64().unwrap());
    }
    let t_last = end["t_s"].as_f64().unwrap();
    let total = format!("{}ms", ((t_last + 1.0) * 1000.0) as u64);
    let o = run(
        &[
            "soak",
            "--resume",
            soak.to_str().unwrap(),
            "--duration",
            &total,
        ],
        &[],
    );
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j = journal(&soak);
    assert_schedule_unbroken(&j);
    assert_eq!(robustness(&soak)["status"], "completed");
}
