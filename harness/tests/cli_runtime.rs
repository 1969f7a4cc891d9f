//! The runtime commands as a user runs them: the built `pocketperf` binary on bad inputs (a
//! one-line error naming the cause, exit code 2) and on good ones (checked against
//! llama.cpp's reference outputs in `../shared/reference/smollm2-135m`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::tokenizer::Tokenizer;
use pocketperf_testkit::{TinyLlama, tiny_llama};
use serde_json::Value as Json;

use pocketperf_testkit::shared_dir;

fn reference(file: &str) -> Json {
    let p = shared_dir().join("reference/smollm2-135m").join(file);
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (set POCKETPERF_SHARED)", p.display()));
    serde_json::from_str(&text).expect("reference JSON")
}

/// The cached reference model (`$POCKETPERF_MODEL` first).
fn model_path() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

fn pocketperf(args: &[&str]) -> Output {
    pocketperf_env(args, &[])
}

/// `pocketperf` with the tuning variables unset, then `env` set.
fn pocketperf_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pocketperf"));
    cmd.args(args);
    for var in ["POCKETPERF_ISA", "POCKETPERF_PREFETCH", "POCKETPERF_REPACK"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run pocketperf")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must fail: exit code 2 and exactly one stderr line, `error: …`,
/// containing every one of `needles`. Returns that line.
#[track_caller]
fn fails(args: &[&str], needles: &[&str]) -> String {
    fails_env(args, &[], needles)
}

/// [`fails`] with `env` set.
#[track_caller]
fn fails_env(args: &[&str], env: &[(&str, &str)], needles: &[&str]) -> String {
    let o = pocketperf_env(args, env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line: {err:?}");
    let line = lines[0];
    assert!(line.starts_with("error: "), "{line}");
    for n in needles {
        assert!(line.contains(n), "{args:?}: {line:?} lacks {n:?}");
    }
    line.to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

#[test]
fn missing_file_is_named_once() {
    let line = fails(
        &["model", "info", "/nonexistent/model.gguf"],
        &["/nonexistent/model.gguf", "No such file or directory"],
    );
    assert_eq!(line.matches("No such file").count(), 1, "{line}");
    assert_eq!(line.matches("os error 2").count(), 1, "{line}");
    fails(
        &["tokenize", "--model", "/nonexistent.gguf", "--text", "hi"],
        &["/nonexistent.gguf", "not found"],
    );
    fails(
        &["generate", "--model", "/nonexistent.gguf", "--prompt", "hi"],
        &["/nonexistent.gguf", "not found"],
    );
    let dir = tempfile::tempdir().unwrap();
    fails(
        &["model", "info", s(dir.path())],
        &[s(dir.path()), "not a regular file"],
    );
}

#[test]
fn not_gguf_and_truncated_files() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text\n").unwrap();
    fails(
        &["model", "info", s(&text)],
        &[s(&text), "header.magic at offset 0", "not a GGUF file"],
    );
    fails(
        &["logits", "--model", s(&text), "--prompt-ids", "1,2"],
        &[s(&text), "not a GGUF file"],
    );
    // The real model cut inside its vocabulary.
    let real = std::fs::read(model_path()).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &real[..300_000]).unwrap();
    fails(
        &["model", "info", s(&cut)],
        &[
            s(&cut),
            "invalid GGUF",
            "key tokenizer.ggml.tokens",
            "cannot fit",
        ],
    );
    // Cut inside the tensor data: the header parses, the data does not fit.
    std::fs::write(&cut, &real[..real.len() - 1000]).unwrap();
    fails(
        &["generate", "--model", s(&cut), "--prompt", "hi"],
        &[
            s(&cut),
            "invalid GGUF",
            "tensor_infos[",
            "runs past the end",
        ],
    );
}

/// The tiny model (F32 matrices) as written, then edited by `edit`.
fn patched_tiny(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut b = tiny_llama(TinyLlama {
        matrix_type: GgmlType::F32,
        ..TinyLlama::default()
    });
    edit(&mut b);
    let p = dir.join(name);
    std::fs::write(&p, b).unwrap();
    p
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle in file")
}

#[test]
fn unknown_and_unsupported_types_and_architectures() {
    let dir = tempfile::tempdir().unwrap();
    // The tiny model as written loads and generates.
    let ok = patched_tiny(dir.path(), "ok.gguf", |_| {});
    let o = pocketperf(&[
        "generate",
        "--model",
        s(&ok),
        "--prompt",
        "the",
        "--max-tokens",
        "3",
        "--ctx",
        "64",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A tensor type id that ggml does not define.
    let bad_type = |b: &mut Vec<u8>, id: u32| {
        let g = GgufFile::from_bytes("tiny", b.clone()).unwrap();
        let name = b"blk.0.attn_q.weight";
        let at = find(b, name) + name.len() + 4 + 2 * 8; // n_dims, two dims
        let t = g.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!(
            t.ty.id(),
            u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
        );
        b[at..at + 4].copy_from_slice(&id.to_le_bytes());
    };
    let unknown = patched_tiny(dir.path(), "unknown.gguf", |b| bad_type(b, 99));
    fails(
        &["model", "info", s(&unknown)],
        &["unknown ggml tensor type id 99", "blk.0.attn_q.weight"],
    );
    // A type ggml knows and this runtime cannot execute (I32 has F32's size).
    let i32t = patched_tiny(dir.path(), "i32.gguf", |b| bad_type(b, 26));
    fails(
        &["generate", "--model", s(&i32t), "--prompt", "the"],
        &[
            s(&i32t),
            "blk.0.attn_q.weight",
            "unsupported tensor type I32",
        ],
    );
    let o = pocketperf(&["model", "info", s(&i32t)]);
    assert!(
        o.status.success(),
        "info lists any known type: {}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("I32"));
    // An architecture this runtime does not implement.
    let mamba = patched_tiny(dir.path(), "mamba.gguf", |b| {
        let at = find(b, b"general.architecture") + 20 + 4 + 8;
        assert_eq!(&b[at..at + 5], b"llama");
        b[at..at + 5].copy_from_slice(b"mamba");
    });
    fails(
        &["logits", "--model", s(&mamba), "--prompt-ids", "1"],
        &[s(&mamba), "unsupported architecture `mamba`"],
    );
}

/// The tuning variables: a value the runtime does not take is refused before any work, naming
/// the variable and the value; the values it takes give the default's tokens (the same bits
/// with and without the prefetch or the copies).
#[test]
fn tuning_variables_are_checked_and_keep_the_bits() {
    let dir = tempfile::tempdir().unwrap();
    // Q8_0 matrices: the ones the one-row decode prefetches, and the copies are made of.
    let tiny = dir.path().join("tiny.gguf");
    std::fs::write(&tiny, tiny_llama(TinyLlama::default())).unwrap();
    let args = [
        "generate",
        "--model",
        s(&tiny),
        "--prompt",
        "the",
        "--max-tokens",
        "4",
        "--ctx",
        "64",
    ];
    for (var, value, why) in [
        ("POCKETPERF_PREFETCH", "4k", "distance in bytes"),
        ("POCKETPERF_PREFETCH", "-1", "distance in bytes"),
        ("POCKETPERF_PREFETCH", "99999999", "at most 1048576 bytes"),
        ("POCKETPERF_REPACK", "yes", "expected 0"),
        ("POCKETPERF_REPACK", "2", "expected 0"),
    ] {
        fails_env(&args, &[(var, value)], &[&format!("{var}={value}: "), why]);
    }
    let default = pocketperf(&args);
    assert!(default.status.success(), "{}", stderr(&default));
    for env in [
        [("POCKETPERF_PREFETCH", "0"), ("POCKETPERF_REPACK", "0")],
        [
            ("POCKETPERF_PREFETCH", " 8192 "),
            ("POCKETPERF_REPACK", "1"),
        ],
        [("POCKETPERF_PREFETCH", ""), ("POCKETPERF_REPACK", "")],
    ] {
        let o = pocketperf_env(&args, &env);
        assert!(o.status.success(), "{env:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&default), "{env:?}");
    }
}

#[test]
fn prompts_too_long_empty_or_not_utf8() {
    let model = model_path();
    let m = s(&model);
    let long = "word ".repeat(40);
    fails(
        &[
            "generate",
            "--model",
            m,
            "--prompt",
            &long,
            "--ctx",
            "32",
            "--max-tokens",
            "4",
        ],
        &["prompt of 4", "does not fit --ctx 32"],
    );
    fails(
        &[
            "generate", "--model", m, "--prompt", "hi", "--ctx", "100000",
        ],
        &["--ctx 100000", "context length 8192"],
    );
    fails(
        &["generate", "--model", m, "--prompt", ""],
        &["the prompt is empty"],
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("prompt.txt");
    std::fs::write(&bad, b"abc\xff\xfedef").unwrap();
    for args in [
        vec!["generate", "--model", m, "--prompt-file", s(&bad)],
        vec!["tokenize", "--model", m, "--file", s(&bad)],
        vec!["perplexity", "--model", m, "--file", s(&bad)],
    ] {
        fails(&args, &[s(&bad), "invalid UTF-8 at byte offset 3"]);
    }
    fails(
        &[
            "tokenize",
            "--model",
            m,
            "--file",
            "/nonexistent/prompt.txt",
        ],
        &["/nonexistent/prompt.txt", "No such file"],
    );
    fails(
        &["logits", "--model", m, "--prompt-ids", "1,x,3"],
        &["`x` is not a token id"],
    );
    fails(
        &["logits", "--model", m, "--prompt-ids", "1,49152"],
        &["49152 is outside the vocabulary of 49152"],
    );
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Too short.").unwrap();
    fails(
        &["perplexity", "--model", m, "--file", s(&short)],
        &["fewer than one chunk of 128"],
    );
}

#[test]
fn tokenize_json_matches_llama_cpp() {
    let model = model_path();
    let cases = reference("tokenize_cases.json");
    let cases = cases["cases"].as_array().unwrap();
    // Multi-byte text, whitespace runs, and a chat prompt with and without special tokens.
    let names = [
        "chinese",
        "whitespace_runs",
        "chat_template_user_msg",
        "chat_template_user_msg_no_parse_special",
    ];
    let mut picked = 0;
    for c in cases
        .iter()
        .filter(|c| names.contains(&c["name"].as_str().unwrap()))
    {
        picked += 1;
        let text = c["text"].as_str().unwrap();
        let mut args = vec!["tokenize", "--model", s(&model), "--text", text, "--json"];
        if c["parse_special"].as_bool().unwrap() {
            args.push("--special");
        }
        let o = pocketperf(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: Json = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(j["ids"], c["ids"], "case {}", c["name"]);
        assert_eq!(j["pieces"], c["pieces"], "case {}", c["name"]);
        assert_eq!(j["n_tokens"], c["n_tokens"], "case {}", c["name"]);
    }
    assert_eq!(picked, names.len(), "reference cases present");
}

fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn logits_from_prompt_ids_agree_with_llama_cpp() {
    let model = model_path();
    let r = reference("greedy_and_logits.json");
    let case = &r["cases"][0];
    assert_eq!(case["name"], "capital_france");
    let ids: Vec<String> = case["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("logits.f32");
    let o = pocketperf(&[
        "logits",
        "--model",
        s(&model),
        "--prompt-ids",
        &ids.join(","),
        "--top-k",
        "5",
        "--raw-out",
        s(&raw),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Json = serde_json::from_str(&stdout(&o)).unwrap();
    let top = &case["top_logits_last_prompt_pos"];
    let margin = top[0]["logit"].as_f64().unwrap() - top[1]["logit"].as_f64().unwrap();
    assert!(margin > 0.25);
    assert_eq!(
        j["top"][0]["id"], top[0]["id"],
        "top-1 ({margin:.2} margin)"
    );
    assert_eq!(j["top"].as_array().unwrap().len(), 5);
    // The raw file holds every logit; its RMS distance from llama.cpp's is the acceptance
    // figure of the runtime (≤ 0.5).
    let ours = read_f32(&raw);
    let theirs = read_f32(
        &shared_dir()
            .join("reference/smollm2-135m")
            .join(case["raw_logits_file"].as_str().unwrap()),
    );
    assert_eq!(ours.len(), 49152);
    let rms = (ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        / ours.len() as f64)
        .sqrt();
    assert!(rms <= 0.5, "RMS {rms}");
}

#[test]
fn greedy_generation_repeats_llama_cpp_where_its_margins_are_large() {
    let model = model_path();
    let r = reference("greedy_and_logits.json");
    let case = &r["cases"][0];
    let greedy: Vec<u32> = case["greedy_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    // Step 0 is decided at the last prompt position, step i at top5_per_generated_step[i-1].
    let margin = |t: &Json| t[0]["logit"].as_f64().unwrap() - t[1]["logit"].as_f64().unwrap();
    let mut k = usize::from(margin(&case["top_logits_last_prompt_pos"]) > 1.0);
    let steps = case["top5_per_generated_step"].as_array().unwrap();
    while k > 0 && k < greedy.len() && margin(&steps[k - 1]) > 1.0 {
        k += 1;
    }
    assert!(k >= 4, "{k} confident steps");
    let g = GgufFile::open(&model).unwrap();
    let want = Tokenizer::from_gguf(&g).unwrap().decode(&greedy[..k]);
    let o = pocketperf(&[
        "generate",
        "--model",
        s(&model),
        "--prompt",
        case["prompt"].as_str().unwrap(),
        "--max-tokens",
        &k.to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{want}\n"));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("generated {k} tokens")) && err.contains("TTFT"),
        "{err}"
    );
}

#[test]
fn perplexity_of_a_few_chunks_matches_llama_cpp() {
    let model = model_path();
    let p = reference("perplexity.json");
    let text =
        std::fs::read_to_string(shared_dir().join("reference/smollm2-135m/ppl_text.txt")).unwrap();
    // A prefix of the text long enough for two or three chunks of 128 tokens, cut at a
    // paragraph, so that its whole chunks are the reference's first tokens.
    let cut = text
        .match_indices("\n\n")
        .map(|(i, _)| i)
        .find(|&i| i > 1300)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("slice.txt");
    std::fs::write(&f, &text[..cut]).unwrap();
    let g = GgufFile::open(&model).unwrap();
    let ids = Tokenizer::from_gguf(&g)
        .unwrap()
        .encode(&text[..cut], false)
        .unwrap();
    let chunks = ids.len() / 128;
    assert!((2..=3).contains(&chunks), "{} tokens", ids.len());
    let want_ids: Vec<u32> = p["token_ids"].as_array().unwrap()[..chunks * 128]
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(&ids[..chunks * 128], &want_ids[..]);
    let o = pocketperf(&[
        "perplexity",
        "--model",
        s(&model),
        "--file",
        s(&f),
        "--ctx",
        "128",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Json = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["chunks"], chunks);
    assert_eq!(j["scored"], 63 * chunks);
    let want = p["llama_cpp"]["running_ppl_per_chunk"][chunks - 1]
        .as_f64()
        .unwrap();
    let got = j["ppl"].as_f64().unwrap();
    assert!(
        (got - want).abs() / want < 0.01,
        "perplexity {got} vs llama.cpp {want}"
    );
}

#[test]
fn aligned_model_reads_back_in_llama_cpps_gguf_py() {
    // Runs only where python3 has llama.cpp's reader (`pip install gguf==0.19.0`).
    let have = Command::new("python3")
        .args(["-c", "import gguf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("skipped: python3 package gguf not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("aligned.gguf");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check-align.sh");
    let model = model_path();
    let o = Command::new("bash")
        .arg(&script)
        .arg(&model)
        .arg(&out)
        .env("POCKETPERF_BIN", env!("CARGO_BIN_EXE_pocketperf"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("every tensor 4096-aligned and byte-identical"),
        "{}",
        stdout(&o)
    );
    // A rewrite to a non-power-of-two alignment is refused with the value named.
    fails(
        &["model", "align", "--to", "3000", s(&model), s(&out)],
        &["alignment", "3000 is not a power of two"],
    );
}
