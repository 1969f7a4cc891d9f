//! `pocketperf`: the benchmarking and conformance harness CLI.
//!
//! Exit codes: 0 success, 1 a gate or validity failure, 2 an error.

use clap::{Parser, Subcommand};
use pocketperf::cmd::compare as comparecmd;
use pocketperf::cmd::early_stopping as escmd;
use pocketperf::cmd::farm as farmcmd;
use pocketperf::cmd::gate as gatecmd;
use pocketperf::cmd::governor as govcmd;
use pocketperf::cmd::mmlu;
use pocketperf::cmd::probe as probecmd;
use pocketperf::cmd::report as reportcmd;
use pocketperf::cmd::run as runcmd;
use pocketperf::cmd::runtime as rt;
use pocketperf::cmd::scenario_bench as sbcmd;
use pocketperf::cmd::serve as servecmd;
use pocketperf::cmd::soak as soakcmd;
use pocketperf::run as runs;
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
    /// Thermal governor tools (closed-loop simulation).
    Governor {
        #[command(subcommand)]
        cmd: govcmd::GovernorCmd,
    },
    /// List the thermal, power, frequency and energy sensors a device exposes.
    Probe(probecmd::ProbeArgs),
    /// Render a result directory into report.html (self-contained) and report.md.
    Report(reportcmd::ReportArgs),
    /// Compare result directories (one column per device or run) against a baseline.
    Compare(comparecmd::CompareArgs),
    /// Release gate: a candidate run against a baseline (exit 0 pass, 1 regression, 2 error).
    Gate(gatecmd::GateArgs),
    /// Device farm: run a suite on many devices in parallel, then compare and gate.
    Farm {
        #[command(subcommand)]
        cmd: farmcmd::FarmCmd,
    },
    /// LoadGen early-stopping planner: the rank reported for N queries, or the queries
    /// needed with T over the latency bound.
    EarlyStopping(escmd::EarlyStoppingArgs),
    /// Scenario-engine overhead with a null SUT (queries/s, added latency, peak memory).
    ScenarioBench(sbcmd::ScenarioBenchArgs),
    /// MMLU-576 accuracy: check the subset, score a model, compare two runs.
    Mmlu {
        #[command(subcommand)]
        cmd: mmlu::MmluCmd,
    },
    /// Serve the runtime over stdin/stdout (newline-delimited JSON, docs/PROTOCOL.md).
    Serve(servecmd::ServeArgs),
    /// Robustness run: dialogues and probes through a child-process SUT for hours, resumable.
    Soak(Box<soakcmd::SoakArgs>),
    /// One timed start for `bench --cold` (prints its steps as JSON on stdout).
    #[command(hide = true)]
    ColdProbe(rt::ColdProbeArgs),
}

fn run(cli: Cli, t_main_ns: u64) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Model { cmd } => rt::model_cmd(&cmd),
        Cmd::Tokenize(a) => rt::tokenize(&a),
        Cmd::Generate(a) => rt::generate(&a),
        Cmd::Logits(a) => rt::logits(&a),
        Cmd::Perplexity(a) => rt::perplexity(&a),
        Cmd::Bench(a) => rt::bench(&a),
        Cmd::Run(mut a) => runs::run(&mut a),
        Cmd::Governor { cmd } => govcmd::governor_cmd(&cmd),
        Cmd::Probe(a) => probecmd::probe(&a),
        Cmd::Report(a) => reportcmd::report(&a),
        Cmd::Compare(a) => comparecmd::compare(&a),
        Cmd::Gate(a) => gatecmd::run_gate(&a),
        Cmd::Farm { cmd } => farmcmd::farm_cmd(&cmd),
        Cmd::EarlyStopping(a) => escmd::run(&a),
        Cmd::ScenarioBench(a) => sbcmd::run(&a),
        Cmd::Mmlu { cmd } => pocketperf::mmlu::mmlu_cmd(&cmd),
        Cmd::Serve(a) => servecmd::serve(&a),
        Cmd::Soak(a) => soakcmd::soak(&a),
        Cmd::ColdProbe(a) => rt::cold_probe(&a, t_main_ns),
    }
}

/// The error and its causes on one line, outermost first. A cause whose text the line already
/// holds is left out: many errors print their source inside their own message (`path: os
/// error`) and also report it as their source, which would otherwise print it twice.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    // One line, whatever the messages hold.
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn main() -> ExitCode {
    // The start of `main` on the machine-wide monotonic clock, for `bench --cold`'s probe.
    let t_main_ns = pocketperf::tools::cold_start::monotonic_ns();
    let cli = Cli::parse();
    match run(cli, t_main_ns) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::error_line;
    use anyhow::Context;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(pocketperf_runtime::Error::Io {
            path: "/nonexistent".into(),
            source: io,
        });
        assert_eq!(error_line(&e), "/nonexistent: entity not found");
        let e = e.context("loading the model");
        assert_eq!(
            error_line(&e),
            "loading the model: /nonexistent: entity not found"
        );
    }

    #[test]
    fn distinct_causes_are_chained_on_one_line() {
        let r: Result<(), std::io::Error> = Err(std::io::Error::other("disk\nfull"));
        let e = r.context("writing out.json").unwrap_err();
        assert_eq!(error_line(&e), "writing out.json: disk full");
    }
}
