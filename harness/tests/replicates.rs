//! Replicates from the command line: `run --repeat N` writes run-1 … run-N, `gate` reads a
//! directory of them as one side, and `gate --interleave` alternates two binaries' runs
//! (A B A B) so that the gate pairs them. On the tiny synthetic model, seconds in all.

mod soak_util;

use std::path::Path;

use serde_json::Value;
use soak_util::{run, tiny_model};

const QUERIES: &str = "\
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

fn text(o: &std::process::Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn started(dir: &Path) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    v["meta"]["started_utc"].as_str().unwrap().to_string()
}

#[test]
fn run_repeat_writes_replicates_that_the_gate_reads_as_one_side() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let cfg = tmp.path().join("user.conf");
    std::fs::write(&cfg, QUERIES).unwrap();
    let out = tmp.path().join("reps");
    let args = [
        "run",
        "--model",
        model.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--threads",
        "1",
        "--repeat",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = run(&args, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    for i in 1..=2 {
        assert!(
            out.join(format!("run-{i}/result.json")).is_file(),
            "{}",
            text(&o)
        );
    }
    assert!(!out.join("result.json").exists());
    assert!(started(&out.join("run-1")) <= started(&out.join("run-2")));
    // The directory is two runs of one side: too few queries per run for run-level
    // statistics (8 by default), which the gate says naming both runs' counts.
    let o = run(
        &[
            "gate",
            "--baseline",
            out.to_str().unwrap(),
            "--candidate",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("baseline runs [3, 3], candidate runs [3, 3]"),
        "{}",
        text(&o)
    );
}

#[test]
fn gate_interleave_alternates_the_two_binaries_and_pairs_their_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let cfg = tmp.path().join("user.conf");
    std::fs::write(&cfg, QUERIES).unwrap();
    let work = tmp.path().join("work");
    let bin = soak_util::bin();
    let rules = tmp.path().join("rules.toml");
    // Three queries per run: let the timing checks run on them.
    std::fs::write(&rules, "[performance]\nmin_samples = 3\n").unwrap();
    let args = [
        "gate",
        "--interleave",
        "--baseline-bin",
        bin,
        "--candidate-bin",
        bin,
        "--repeat",
        "2",
        "--work",
        work.to_str().unwrap(),
        "--rules",
        rules.to_str().unwrap(),
        "--",
        "--model",
        model.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--threads",
        "1",
    ];
    let o = run(&args, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let t = |side: &str, i: u32| started(&work.join(side).join(format!("run-{i}")));
    // A B A B in time.
    assert!(t("baseline", 1) <= t("candidate", 1), "{}", text(&o));
    assert!(t("candidate", 1) <= t("baseline", 2), "{}", text(&o));
    assert!(t("baseline", 2) <= t("candidate", 2), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("paired t on per-pair log ratios"),
        "{}",
        text(&o)
    );
    assert!(s.contains("runs 2 / 2"), "{}", text(&o));

    // The gate sets --out and --repeat itself; a second gate into the same WORK is refused.
    let mut bad = args.to_vec();
    bad.extend(["--out", "elsewhere"]);
    let o = run(&bad, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("`--out` is set by the gate"),
        "{}",
        text(&o)
    );
    let o = run(&args, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("already exists"), "{}", text(&o));
}
