//! Every command on the two catalog models beyond the reference one, through the binary:
//! `gemma3-270m` (Gemma 3, K-quant mix, SentencePiece vocabulary, sliding-window layers) and
//! `qwen2.5-coder-0.5b` (Qwen2.5, Q4_K_M, byte-level BPE). Each is named by its catalog name,
//! as a user would (the set-up step fetched both). Checked against independent expectations:
//! llama.cpp's top-1 token and running perplexity from `../shared/reference/<model>/`, the
//! catalog's pinned SHA-256 and the file's own `general.name` in every output's provenance.
//!
//! Sized for CI: one query per scenario, four-token turns, two MMLU questions, an eight-second
//! soak, a two-chunk perplexity. The two models run in parallel (one worker thread each).

use std::path::Path;
use std::process::{Command, Output};

use pocketperf::model_store;
use pocketperf_testkit::shared_dir;
use serde_json::Value;

fn pocketperf(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocketperf"));
    c.args(args).env_remove("POCKETPERF_FAULT");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("pocketperf runs")
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn ok(o: &Output, codes: &[i32], what: &str) {
    let code = o.status.code().unwrap_or(-1);
    assert!(codes.contains(&code), "{what}: {}", text(o));
}

fn read_json(p: &Path) -> Value {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// llama.cpp's reference material for `model` (a catalog name).
fn reference(model: &str, file: &str) -> Value {
    read_json(&shared_dir().join("reference").join(model).join(file))
}

/// One query per scenario, no minimum duration (the run is INVALID for LoadGen: too few).
const ONE_QUERY: &str = "\
llm.*.min_query_count = 1
llm.*.max_query_count = 1
*.*.min_duration = 0
";

/// Everything a device-farm engineer would run on `model`, checked as it goes.
fn every_command_on(model: &str) {
    // The model's own name as llama.cpp's GGUF reader dumped it.
    let info = reference(model, "gguf_info.json");
    let general_name = info["metadata"]["general.name"].as_str().unwrap();
    let entry = model_store::catalog_model(model).expect("catalog model");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let m = ["--model", model, "--threads", "1"];
    let with = |head: &[&str], tail: &[&str]| -> Vec<String> {
        head.iter()
            .chain(m.iter())
            .chain(tail)
            .map(|s| s.to_string())
            .collect()
    };
    let run = |head: &[&str], tail: &[&str], env: &[(&str, &str)]| -> Output {
        let args = with(head, tail);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pocketperf(&args, env)
    };
    let provenance = |what: &str, name: &Value, sha: &Value| {
        assert_eq!(
            name.as_str(),
            Some(general_name),
            "{model} {what}: model name"
        );
        assert_eq!(
            sha.as_str(),
            Some(entry.sha256),
            "{model} {what}: model sha256"
        );
    };

    // logits: top-1 at the last prompt position of every reference case where llama.cpp's
    // margin exceeds 0.25, through the command line.
    let cases = reference(model, "greedy_and_logits.json");
    let mut checked = 0;
    for case in cases["cases"].as_array().unwrap() {
        let margin = case["top1_top2_margin"].as_f64().unwrap();
        if margin <= 0.25 || case["chat"].as_bool() == Some(true) {
            continue;
        }
        let ids: Vec<String> = case["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap().to_string())
            .collect();
        let o = run(
            &["logits"],
            &["--prompt-ids", &ids.join(","), "--top-k", "1", "--json"],
            &[],
        );
        ok(&o, &[0], "logits");
        let got: Value = serde_json::from_slice(&o.stdout).unwrap();
        let want = &case["top_logits_last_prompt_pos"][0]["id"];
        assert_eq!(&got["top"][0]["id"], want, "{model} {}", case["name"]);
        checked += 1;
    }
    assert!(
        checked >= 2,
        "{model}: only {checked} reference cases checked"
    );

    // generate: a chat prompt through the model's own template.
    let o = run(
        &["generate"],
        &["--chat", "--prompt", "Name a colour.", "--max-tokens", "6"],
        &[],
    );
    ok(&o, &[0], "generate");
    assert!(text(&o).contains("TTFT"), "{}", text(&o));

    // perplexity: the first two chunks of the shared text under llama-perplexity's protocol
    // agree with llama.cpp's running perplexity after its second chunk within 2% (126
    // predictions: one token moves the mean by tenths of a percent; the whole text's 1% is
    // `runtime/tests/arch_reference.rs`'s).
    let ppl_ref = reference(model, "perplexity.json");
    let full =
        std::fs::read_to_string(shared_dir().join("reference/smollm2-135m/ppl_text.txt")).unwrap();
    // About 330 tokens of either vocabulary: two whole chunks of 128, the cut far from them.
    let cut = full.char_indices().nth(1400).map(|(i, _)| i).unwrap();
    let part = dir.join("ppl_part.txt");
    std::fs::write(&part, &full[..cut]).unwrap();
    let o = run(
        &["perplexity"],
        &["--file", part.to_str().unwrap(), "--ctx", "128", "--json"],
        &[],
    );
    ok(&o, &[0], "perplexity");
    let got: Value = serde_json::from_slice(&o.stdout).unwrap();
    let running = got["running_ppl"].as_array().unwrap();
    assert_eq!(running.len(), 2, "{model}: {got}");
    let ours = running[1].as_f64().unwrap();
    let theirs = ppl_ref["running_ppl_per_chunk"][1].as_f64().unwrap();
    assert!(
        (ours / theirs - 1.0).abs() < 0.02,
        "{model}: running perplexity after 2 chunks {ours} vs llama.cpp {theirs}"
    );

    // bench: a tiny pp/tg/batched sweep with its JSON file and provenance.
    let bench = dir.join("bench.json");
    let o = run(
        &["bench"],
        &[
            "--pp",
            "16",
            "--tg",
            "4",
            "--reps",
            "1",
            "--batch",
            "2",
            "--probe-mib",
            "0",
            "--output",
            "json",
            "--out",
            bench.to_str().unwrap(),
        ],
        &[],
    );
    ok(&o, &[0], "bench");
    let b = read_json(&bench);
    provenance(
        "bench",
        &b["header"]["model_name"],
        &b["header"]["model_sha256"],
    );

    // The three MLPerf scenarios and the dialogue scenario, one query each.
    let conf = dir.join("one.conf");
    std::fs::write(&conf, ONE_QUERY).unwrap();
    for scenario in ["single-stream", "offline", "server", "dialogue"] {
        let out = dir.join(scenario);
        let mut tail = vec!["--out", out.to_str().unwrap()];
        // The dialogue scenario has no LoadGen settings; its size comes from the environment.
        if scenario != "dialogue" {
            tail.extend(["--config", conf.to_str().unwrap()]);
        }
        let o = run(
            &["run", "--scenario", scenario, "--preset", "quick"],
            &tail,
            &[
                ("POCKETPERF_DIALOGUES", "1"),
                ("POCKETPERF_TURN_TOKENS", "4"),
            ],
        );
        // One query is too few for a VALID run (exit 1); an error would be 2.
        ok(&o, &[0, 1], scenario);
        let r = read_json(&out.join("result.json"));
        provenance(
            scenario,
            &r["meta"]["model"]["name"],
            &r["meta"]["model"]["sha256"],
        );
        let tokens = std::fs::read_to_string(out.join("tokens.csv")).unwrap();
        assert!(tokens.lines().count() > 2, "{model} {scenario}: {tokens}");
        for csv in ["telemetry.csv", "tokens.csv"] {
            let text = std::fs::read_to_string(out.join(csv)).unwrap();
            assert!(
                text.lines()
                    .any(|l| l == format!("# model_name={general_name}")),
                "{model} {scenario}: {csv} does not name the model"
            );
        }
    }

    // mmlu: two questions, 1-shot, log-probability scoring.
    let mm = dir.join("mmlu");
    let mmlu_dir = shared_dir().join("datasets/mmlu");
    let o = run(
        &["mmlu", "run"],
        &[
            "--mmlu-dir",
            mmlu_dir.to_str().unwrap(),
            "--subjects",
            "anatomy",
            "--limit",
            "2",
            "--shots",
            "1",
            "--out",
            mm.to_str().unwrap(),
        ],
        &[],
    );
    ok(&o, &[0], "mmlu");
    let j = read_json(&mm.join("mmlu.json"));
    provenance(
        "mmlu",
        &j["header"]["model_name"],
        &j["header"]["model_sha256"],
    );

    // soak: dialogues and probes through the child-process SUT (`pocketperf serve`).
    let soak = dir.join("soak");
    let o = run(
        &["soak"],
        &[
            "--out",
            soak.to_str().unwrap(),
            "--duration",
            "8s",
            "--dialogues",
            "1",
            "--max-turn-tokens",
            "4",
            "--probe-prompts",
            "1",
            "--probe-tokens",
            "4",
            "--probe-mmlu",
            "1",
            "--mmlu-dir",
            mmlu_dir.to_str().unwrap(),
            "--probe-every",
            "4s",
            "--rss-every",
            "0s",
            "--checkpoint-every",
            "4s",
        ],
        &[],
    );
    ok(&o, &[0, 1], "soak");
    let doc = read_json(&soak.join("robustness.json"));
    assert_eq!(doc["status"], "completed", "{model} soak: {doc}");
    let checks = doc["checks"].as_array().unwrap();
    for name in ["crashes", "timeouts", "output_drift"] {
        let c = checks.iter().find(|c| c["name"] == name).unwrap();
        assert_eq!(c["verdict"], "pass", "{model} soak {name}: {c}");
    }
    let h = &doc["provenance"];
    provenance("soak", &h["model_name"], &h["model_sha256"]);
}

#[test]
fn gemma3_270m_runs_every_command() {
    every_command_on("gemma3-270m");
}

#[test]
fn qwen2_5_coder_0_5b_runs_every_command() {
    every_command_on("qwen2.5-coder-0.5b");
}

/// A fake `adb` for one phone whose storage is this host's filesystem: `push`/`pull` copy,
/// `shell` runs the command line through `sh`, so the real binary runs the real model there.
const FAKE_ADB: &str = r#"#!/bin/sh
[ "$1" = "-s" ] || { echo "fake adb: expected -s SERIAL first" >&2; exit 1; }
shift 2
cmd="$1"; shift
case "$cmd" in
  get-state) echo device ;;
  push) cp "$1" "$2" && echo "$1: 1 file pushed." ;;
  pull) cp -R "$1" "$2" && echo "$1: 1 file pulled." ;;
  shell) sh -c "$1" ;;
  *) echo "fake adb: unsupported command $cmd" >&2; exit 1 ;;
esac
"#;

/// The farm pushes the binary and the Gemma 3 file to a phone, runs a SingleStream step there
/// with the real runtime, pulls the result back and reports it with the model's provenance.
#[test]
fn the_farm_runs_gemma3_270m_on_a_phone() {
    use std::os::unix::fs::PermissionsExt;
    let model = "gemma3-270m";
    let entry = model_store::catalog_model(model).unwrap();
    let path = model_store::cached_path(entry).unwrap();
    let name = reference(model, "gguf_info.json")["metadata"]["general.name"].clone();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let bin_dir = root.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let adb = bin_dir.join("adb");
    std::fs::write(&adb, FAKE_ADB).unwrap();
    std::fs::set_permissions(&adb, std::fs::Permissions::from_mode(0o755)).unwrap();
    let phone = root.join("phone");
    std::fs::write(
        root.join("devices.toml"),
        format!(
            "[defaults]\nretries = 0\nstep_timeout_s = 300\ntransfer_timeout_s = 120\n\n\
             [[device]]\nname = \"phone\"\ntransport = \"adb:FAKE1\"\nremote_dir = {}\n",
            toml::Value::String(phone.display().to_string())
        ),
    )
    .unwrap();
    std::fs::write(root.join("one.cfg"), ONE_QUERY).unwrap();
    std::fs::write(
        root.join("suite.toml"),
        r#"name = "real-model"
files = ["one.cfg"]
[[step]]
name = "single-stream"
args = ["run", "--scenario", "single-stream", "--preset", "quick", "--config", "{suite}/one.cfg",
        "--threads", "1", "--model", "{model}", "--device", "{device}", "--out", "{out}"]
"#,
    )
    .unwrap();
    let search = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .current_dir(root)
        .env("PATH", search)
        .args([
            "farm",
            "run",
            "--devices",
            "devices.toml",
            "--suite",
            "suite.toml",
        ])
        .args([
            "--out",
            "results",
            "--binary",
            env!("CARGO_BIN_EXE_pocketperf"),
        ])
        .arg("--model")
        .arg(&path)
        .output()
        .unwrap();
    // One query is too few for a VALID SingleStream run: the step's own exit is 1, which the
    // farm reports; anything else (a transfer or a crash) is an error.
    let night = std::fs::read_dir(root.join("results"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.join("farm.json").is_file())
        .unwrap_or_else(|| panic!("no farm.json: {}", text(&o)));
    let report = read_json(&night.join("farm.json"));
    assert_eq!(report["model"]["sha256"], entry.sha256, "{}", text(&o));
    assert_eq!(report["model"]["name"], name);
    let r = read_json(&night.join("phone/single-stream/result.json"));
    assert_eq!(r["meta"]["model"]["sha256"], entry.sha256, "{}", text(&o));
    assert_eq!(r["meta"]["model"]["name"], name);
    assert_eq!(r["meta"]["device"]["id"], "local");
    let tokens = std::fs::read_to_string(night.join("phone/single-stream/tokens.csv")).unwrap();
    assert!(tokens.lines().count() > 2, "{tokens}");
}

/// `bench --depth` past Gemma 3's 512-token sliding window: the local layers' ring has
/// wrapped, so the cache cannot be cut back to the depth between repetitions; each repetition
/// must still start from the same depth (refilled) and be measured, not end in an error.
#[test]
fn gemma3_bench_at_a_depth_past_its_sliding_window_measures_every_repetition() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.json");
    let o = pocketperf(
        &[
            "bench",
            "--model",
            "gemma3-270m",
            "--threads",
            "1",
            "--pp",
            "8",
            "--tg",
            "4",
            "--depth",
            "600",
            "--reps",
            "2",
            "--batch",
            "0",
            "--probe-mib",
            "0",
            "--output",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    ok(&o, &[0], "bench --depth 600 on gemma3-270m");
    let b = read_json(&out);
    let rows = b["rows"].as_array().expect("rows");
    let tests: Vec<&str> = rows.iter().filter_map(|r| r["test"].as_str()).collect();
    assert_eq!(tests, ["pp8@d600", "tg4@d600"], "{b}");
    for r in rows {
        assert_eq!(r["reps"].as_u64(), Some(2), "{r}");
        let t = r["tokens_per_s_median"].as_f64().unwrap_or(0.0);
        assert!(t.is_finite() && t > 0.0, "{r}");
    }
    // The memory budget counts the KV of every layer, the 15 sliding-window layers' ring too:
    // the session holds 600 + 8 + 1 = 609 positions, within the window plus the prefill
    // batch, so each of the 18 layers keeps at least 609 slots of K and V (one KV head of 256
    // f16 values each: 1 KiB per slot and layer), at most one 16-slot tile and a page more.
    let m = &b["memory"];
    let kv = m["kv_bytes"].as_u64().expect("kv_bytes");
    let (lo, hi) = (18 * 609 * 1024, 18 * (609 + 16) * 1024 + 2 * 4096);
    assert!(
        (lo..=hi).contains(&kv),
        "KV {kv} bytes outside {lo}..={hi}: {m}"
    );
    assert_eq!(
        m["budget_bytes"].as_u64(),
        Some(m["model_file_bytes"].as_u64().unwrap() + kv + (64 << 20)),
        "{m}"
    );
}
