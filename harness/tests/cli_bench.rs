//! `pocketperf bench` sweeps as a user runs them, on the synthetic tiny model (context length
//! 256): every combination of model, thread count, pp, tg, depth and batch size becomes one
//! row, in the same order and with the same columns in every output format; bad list items
//! and sweeps that do not fit the model are refused naming the flag.

use pocketperf_runtime::GgmlType;
use pocketperf_testkit::{TinyLlama, tiny_llama};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pocketperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .env_remove("POCKETPERF_ISA")
        .output()
        .expect("run pocketperf")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The lines of a successful `--output jsonl` run, parsed.
fn jsonl(o: Output) -> Vec<Value> {
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn tiny(dir: &Path, name: &str, matrix_type: GgmlType) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        tiny_llama(TinyLlama {
            matrix_type,
            ..TinyLlama::default()
        }),
    )
    .unwrap();
    p
}

/// The tests one model and thread count get from `--pp 8,16 --tg 4 --depth 0,32 --batch
/// 0,2`, in the order the rows come: pp tests, tg tests, batched tests, each by list order
/// and then depth.
const TESTS: [&str; 8] = [
    "pp8",
    "pp8@d32",
    "pp16",
    "pp16@d32",
    "tg4",
    "tg4@d32",
    "tg4×2",
    "tg4×2@d32",
];

/// (n_prompt, n_gen, n_depth, batch) a test name stands for.
fn decode_name(t: &str) -> (u64, u64, u64, u64) {
    let (base, depth) = match t.split_once("@d") {
        Some((b, d)) => (b, d.parse().unwrap()),
        None => (t, 0),
    };
    let (base, batch) = match base.split_once('×') {
        Some((b, n)) => (b, n.parse().unwrap()),
        None => (base, 1),
    };
    if let Some(n) = base.strip_prefix("pp") {
        (n.parse().unwrap(), 0, depth, batch)
    } else {
        (
            0,
            base.strip_prefix("tg").unwrap().parse().unwrap(),
            depth,
            batch,
        )
    }
}

fn sweep_args<'a>(models: &'a str, output: &'a str) -> Vec<&'a str> {
    vec![
        "bench",
        "--model",
        models,
        "--threads",
        "1,2",
        "--pp",
        "8,16",
        "--tg",
        "4",
        "--depth",
        "0,32",
        "--batch",
        "0,2",
        "--reps",
        "2",
        "--probe-mib",
        "0",
        "--output",
        output,
    ]
}

#[test]
fn a_sweep_is_the_cross_product_in_csv_and_jsonl_with_the_same_columns() {
    let dir = tempfile::tempdir().unwrap();
    let q8 = tiny(dir.path(), "q8.gguf", GgmlType::Q8_0);
    let f32 = tiny(dir.path(), "f32.gguf", GgmlType::F32);
    let models = format!("{},{}", q8.display(), f32.display());
    let out = dir.path().join("bench.csv");
    let mut args = sweep_args(&models, "csv");
    let out_s = out.to_str().unwrap();
    args.extend(["--out", out_s]);
    let o = pocketperf(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let csv_text = String::from_utf8(o.stdout.clone()).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), csv_text);

    // The header as `#` lines before the table.
    let comments: Vec<&str> = csv_text.lines().filter(|l| l.starts_with('#')).collect();
    assert!(comments.contains(&"# schema_version=3"), "{comments:?}");
    assert!(
        comments.contains(&"# model_name=tiny-llama, tiny-llama"),
        "{comments:?}"
    );
    assert!(comments.iter().any(|l| l.starts_with("# git_commit=")));
    assert!(comments.iter().any(|l| l.starts_with("# timestamp_utc=")));

    let mut rd = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(csv_text.as_bytes());
    let head: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let recs: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    // 2 models × 2 thread counts × 8 tests, ordered model → threads → test.
    assert_eq!(recs.len(), 32);
    let mut i = 0;
    for model in [&q8, &f32] {
        let size = std::fs::metadata(model).unwrap().len().to_string();
        for threads in ["1", "2"] {
            for test in TESTS {
                let r = &recs[i];
                i += 1;
                assert_eq!(&r[col("model_path")], model.to_str().unwrap());
                assert_eq!(&r[col("model")], "tiny-llama");
                assert_eq!(&r[col("model_size_bytes")], size);
                assert_eq!(&r[col("threads")], threads);
                assert_eq!(&r[col("test")], test);
                let (p, g, d, b) = decode_name(test);
                let n = |c: &str| r[col(c)].parse::<u64>().unwrap();
                assert_eq!(
                    (n("n_prompt"), n("n_gen"), n("n_depth"), n("batch")),
                    (p, g, d, b),
                    "{r:?}"
                );
                assert_eq!(n("reps"), 2);
                let f = |c: &str| r[col(c)].parse::<f64>().unwrap();
                assert!(f("tokens_per_s_min") > 0.0, "{r:?}");
                assert!(f("tokens_per_s_min") <= f("tokens_per_s_median"));
                assert!(f("tokens_per_s_median") <= f("tokens_per_s_max"));
                assert!(f("tokens_per_s_min") <= f("tokens_per_s_mean"));
                assert!(f("tokens_per_s_mean") <= f("tokens_per_s_max"));
                // Two samples: the mean is the median, the stddev their gap over √2.
                assert!((f("tokens_per_s_mean") - f("tokens_per_s_median")).abs() < 1e-6);
                let gap = f("tokens_per_s_max") - f("tokens_per_s_min");
                assert!(
                    (f("tokens_per_s_stddev") - gap / 2f64.sqrt()).abs() < 1e-6 * gap.max(1.0),
                    "{r:?}"
                );
            }
        }
    }
    // Same shapes, different matrix types: equal parameter counts, different type mixes.
    let params: BTreeSet<&str> = recs.iter().map(|r| &r[col("model_params")]).collect();
    assert_eq!(params.len(), 1);
    assert!(
        recs[0][col("type_mix")].starts_with("Q8_0 "),
        "{:?}",
        recs[0]
    );
    assert!(
        recs[16][col("type_mix")].starts_with("F32 "),
        "{:?}",
        recs[16]
    );

    // The same sweep as JSON lines: a header line, then the same rows with the same columns.
    let o = pocketperf(&sweep_args(&models, "jsonl"));
    let lines = jsonl(o);
    assert_eq!(lines[0]["header"]["schema_version"], 3);
    assert_eq!(
        lines[0]["header"]["settings"]["depth"],
        serde_json::json!([0, 32])
    );
    // Each test warmed up once untimed by default (llama-bench's warm-up).
    assert_eq!(lines[0]["header"]["settings"]["warmup"], true);
    let rows = &lines[1..];
    assert_eq!(rows.len(), recs.len());
    let keys: BTreeSet<String> = rows[0].as_object().unwrap().keys().cloned().collect();
    for (r, c) in rows.iter().zip(&recs) {
        let k: BTreeSet<String> = r.as_object().unwrap().keys().cloned().collect();
        assert_eq!(k, keys);
        for h in &head {
            assert!(keys.contains(h), "CSV column {h} is not a JSON field");
        }
        assert_eq!(r["test"], c[col("test")]);
        assert_eq!(r["model_path"], c[col("model_path")]);
        assert_eq!(r["threads"].to_string(), c[col("threads")]);
        assert_eq!(r["samples"].as_array().unwrap().len(), 2);
    }

    // `--no-warmup`: the same tests, timed without the untimed run first, and said so.
    let mut args = vec!["bench", "--model", q8.to_str().unwrap()];
    args.extend("--threads 1 --pp 8 --tg 4 --batch 2 --reps 1 --probe-mib 0".split(' '));
    args.extend(["--no-warmup", "--output", "jsonl"]);
    let lines = jsonl(pocketperf(&args));
    assert_eq!(lines[0]["header"]["settings"]["warmup"], false);
    let tests: Vec<&str> = lines[1..]
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["pp8", "tg4", "tg4×2"]);
}

#[test]
fn bad_list_items_and_sweeps_that_do_not_fit_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny(dir.path(), "m.gguf", GgmlType::Q8_0);
    let m = m.to_str().unwrap();
    let base = ["bench", "--model", m, "--probe-mib", "0", "--reps", "1"];
    let cases: [(&[&str], &[&str]); 9] = [
        (&["--pp", "8,x"], &["--pp", "`x`"]),
        (&["--tg", "4,2.5"], &["--tg", "`2.5`"]),
        (&["--depth", "8,,16"], &["--depth", "empty item"]),
        (&["--batch=2,-1"], &["--batch", "`-1`"]),
        (&["--threads", "1,0"], &["--threads", "`0`"]),
        // The tiny model's context is 256 tokens.
        (
            &["--pp", "8", "--tg", "4", "--depth", "0,250"],
            &["--depth 250 + --pp 8 = 258", "256"],
        ),
        (
            &["--pp", "0", "--tg", "16", "--depth", "248", "--batch", "0"],
            &["--depth 248 + --tg 16 = 264", "256"],
        ),
        (
            &["--pp", "8", "--tg", "0", "--batch", "2"],
            &["--batch 2", "--tg"],
        ),
        (
            &["--backend", "opencl", "--batch", "0", "--threads", "1,2"],
            &["--threads 1,2", "OpenCL", "one count"],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = base.to_vec();
        args.extend(extra);
        let o = pocketperf(&args);
        let err = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing measured or printed");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        for n in needles {
            assert!(lines[0].contains(n), "{args:?}: {err} lacks {n}");
        }
    }
    // Start-up and cold-start timing take one model.
    let two = format!("{m},{m}");
    let o = pocketperf(&[
        "bench",
        "--model",
        &two,
        "--cold",
        "--pp",
        "0",
        "--tg",
        "0",
        "--batch",
        "0",
        "--probe-mib",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("one --model"), "{}", text(&o));
    // An unknown format is refused by the flag parser.
    let o = pocketperf(&["bench", "--model", m, "--output", "xml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--output"), "{}", text(&o));
}
