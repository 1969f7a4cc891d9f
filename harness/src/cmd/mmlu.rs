//! `pocketperf mmlu` flags: `subset`, `run` and `compare` (the commands are in
//! [`crate::mmlu`], `docs/MMLU576.md`).

use crate::cmd::OnOff;
use crate::cmd::runtime::EngineArgs;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum MmluCmd {
    /// Recompute the MMLU-576 subset from a copy of MMLU (prints the manifest); with
    /// --verify, compare it with the committed manifest and exit 1 on any difference.
    Subset(SubsetArgs),
    /// Score the model on MMLU-576 (or a slice of it) through the scenario engine's
    /// accuracy mode.
    Run(MmluRunArgs),
    /// Paired comparison of two runs (exact McNemar test on the discordant questions).
    Compare(CompareArgs),
}

#[derive(Args, Debug)]
pub struct SubsetArgs {
    /// Compare the subset recomputed from the copy with the committed manifest.
    #[arg(long)]
    pub verify: bool,
    /// MMLU directory (default: $POCKETPERF_MMLU_DIR).
    #[arg(long)]
    pub mmlu_dir: Option<PathBuf>,
    /// Print the verification report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How an answer is read from the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoreMode {
    /// Next-token log-probabilities of the four answer letters (the original MMLU method).
    Logprob,
    /// Greedy generation of at most 4 tokens; the first standalone A–D (MLPerf Mobile).
    Generate,
}

impl ScoreMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ScoreMode::Logprob => "logprob",
            ScoreMode::Generate => "generate",
        }
    }
}

#[derive(Args, Debug, Serialize)]
pub struct MmluRunArgs {
    #[arg(long, value_enum, default_value = "logprob")]
    pub mode: ScoreMode,
    /// Few-shot examples per prompt: the first N dev rows of the subject (0 to 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=5))]
    pub shots: u32,
    /// Ask in the model's chat template (instruct models) instead of the plain text format.
    #[arg(long)]
    pub chat: bool,
    /// Only these subjects (comma-separated), e.g. abstract_algebra,anatomy.
    #[arg(long, value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// At most N questions from each subject (the first N of the manifest).
    #[arg(long)]
    pub limit: Option<usize>,
    /// MMLU directory (default: $POCKETPERF_MMLU_DIR).
    #[arg(long)]
    pub mmlu_dir: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// System under test: `in-process`, or `http://HOST:PORT` (an OpenAI-compatible server
    /// given the questions' token ids; logprob mode when it returns the four letters'
    /// log-probabilities, else generate mode; docs/HTTP.md). The local model still builds
    /// and tokenizes the prompts.
    #[arg(long, default_value = "in-process")]
    pub sut: crate::cmd::run::SutArg,
    /// With --sut http://…: `completions` (`/v1/completions`, the default) or `native`
    /// (llama.cpp's `/completion`: the letters read by token id from its `n_probs`
    /// alternatives).
    #[arg(long, value_enum)]
    pub api: Option<crate::http::client::ApiKind>,
    /// Context in tokens; a prompt that does not fit drops whole shots from the front.
    #[arg(long, default_value_t = 2048)]
    pub ctx: usize,
    /// Largest prefill batch (tokens per forward call).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Reuse the KV cache of the common prompt prefix (the header and shots of a subject).
    #[arg(long, value_enum, default_value = "on")]
    pub prefix_reuse: OnOff,
    /// Build and tokenize every prompt, print the prefill work with and without prefix
    /// reuse, and stop (no model run, no files).
    #[arg(long)]
    pub dry_run: bool,
    /// Result directory (created). One that holds anything is refused unless --force.
    #[arg(long, required_unless_present = "dry_run")]
    pub out: Option<PathBuf>,
    /// Replace the contents of a non-empty --out (an earlier pocketperf result: every file in
    /// it is removed first).
    #[arg(long, requires = "out", conflicts_with = "dry_run")]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Baseline: a result directory, or its result.json.
    pub run_a: PathBuf,
    /// Candidate: a result directory, or its result.json.
    pub run_b: PathBuf,
    #[arg(long)]
    pub json: bool,
}
