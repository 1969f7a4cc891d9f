//! `pocketperf`: the benchmarking and conformance harness CLI.
//!
//! Exit codes: 0 success, 1 a gate or validity failure, 2 an error.

use clap::{Parser, Subcommand};
use pocketperf::cmd::mmlu;
use pocketperf::cmd::run as runcmd;
use pocketperf::cmd::runtime as rt;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "pocketperf",
    version,
    about = "Benchmark and conformance harness for on-device LLM inference"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Fetch, inspect or rewrite model files.
    Model {
        #[command(subcommand)]
        cmd: rt::ModelCmd,
    },
    /// Print the token ids and pieces of a text.
    Tokenize(rt::TokenizeArgs),
    /// Generate text, then print TTFT and tokens/s.
    Generate(rt::GenerateArgs),
    /// Print the top-k logits at the last prompt position.
    Logits(rt::LogitsArgs),
    /// Perplexity of a text file with llama-perplexity's protocol.
    Perplexity(rt::PerplexityArgs),
    /// Prompt-processing and text-generation speed (pp/tg tokens per second).
    Bench(rt::BenchArgs),
    /// Run an MLPerf-style scenario with the in-process runtime as the system under test.
    Run(runcmd::RunArgs),
    /// MMLU-576 accuracy: check the subset, score a model, compare two runs.
    Mmlu {
        #[command(subcommand)]
        cmd: mmlu::MmluCmd,
    },
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Model { cmd } => rt::model_cmd(&cmd),
        Cmd::Tokenize(a) => rt::tokenize(&a),
        Cmd::Generate(a) => rt::generate(&a),
        Cmd::Logits(a) => rt::logits(&a),
        Cmd::Perplexity(a) => rt::perplexity(&a),
        Cmd::Bench(a) => rt::bench(&a),
        Cmd::Run(a) => runcmd::run(&a),
        Cmd::Mmlu { cmd } => mmlu::mmlu_cmd(&cmd),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
