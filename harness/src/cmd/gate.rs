//! `pocketperf gate --baseline DIR… --candidate DIR… [--rules ci/gate.toml]`: the release
//! gate. Each side is one or more result directories, each a run or a directory of replicates
//! (`run --repeat`); `--interleave` first makes the replicates by running two binaries
//! alternately ([`crate::interleave`]). Exit 0 pass, 1 regression, 2 error (unreadable run or
//! rules, missing section, runs not comparable). Writes JUnit XML and Markdown for CI when
//! asked; the verdict table goes to standard output.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use pocketperf_reports::gate::{GateOutcome, GateRules, gate_dirs};
use pocketperf_reports::render::RenderContext;

use crate::interleave::Interleave;
use crate::meta;

#[derive(Args, Debug)]
pub struct GateArgs {
    /// Result directories of the baseline (the build that ships today), repeatable or
    /// comma-separated; a directory of replicates (run-1 …) counts as its runs.
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "interleave",
        conflicts_with = "interleave"
    )]
    pub baseline: Vec<PathBuf>,
    /// Result directories of the candidate build, like --baseline.
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "interleave",
        conflicts_with = "interleave"
    )]
    pub candidate: Vec<PathBuf>,
    /// Make the runs first: the baseline and candidate binaries run the `pocketperf run`
    /// arguments given after `--` alternately (A B A B …), --repeat times each, into
    /// WORK/baseline/run-i and WORK/candidate/run-i; the gate then pairs run i with run i.
    #[arg(long, requires_all = ["baseline_bin", "candidate_bin", "work"])]
    pub interleave: bool,
    /// With --interleave: the baseline's `pocketperf` executable.
    #[arg(long, requires = "interleave")]
    pub baseline_bin: Option<PathBuf>,
    /// With --interleave: the candidate's `pocketperf` executable.
    #[arg(long, requires = "interleave")]
    pub candidate_bin: Option<PathBuf>,
    /// With --interleave: runs per side (the default replicate count of the gate).
    #[arg(long, default_value_t = 5, requires = "interleave",
          value_parser = clap::value_parser!(u32).range(2..=100))]
    pub repeat: u32,
    /// With --interleave: a new directory for the runs.
    #[arg(long, requires = "interleave")]
    pub work: Option<PathBuf>,
    /// With --interleave: the `pocketperf run` arguments (after `--`), without --out.
    #[arg(last = true, requires = "interleave")]
    pub run_args: Vec<String>,
    /// Gate rules (TOML); default: the built-in rules, identical to `ci/gate.toml`.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Write the verdict as JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the verdict as Markdown here (e.g. for a CI step summary).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write the verdict as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Accept a difference between the runs in this field (repeatable or comma-separated:
    /// model, scenario, settings[.KEY], cli[.KEY], threads, backend, isa, device[.id|name|cpu|os],
    /// sut); added to the rules' `comparability.allow_diff`. Any other difference is an error.
    #[arg(long, value_delimiter = ',')]
    pub allow_diff: Vec<String>,
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("{}: cannot create", parent.display()))?;
    }
    pocketperf_reports::files::replace_file(path, text.as_bytes())
        .map_err(|(p, e)| anyhow::Error::new(e).context(format!("{}: cannot write", p.display())))
}

pub fn run_gate(a: &GateArgs) -> Result<i32> {
    let rules = match a.rules.as_ref().map(GateRules::from_toml_file) {
        None => Ok(GateRules::default()),
        Some(r) => r,
    }
    .and_then(|mut r| {
        r.comparability
            .allow_diff
            .extend(a.allow_diff.iter().cloned());
        r.validate().map(|()| r)
    });
    let (baseline, candidate) = match (&a.baseline_bin, &a.candidate_bin, &a.work) {
        (Some(b), Some(c), Some(work)) if a.interleave => {
            let (bd, cd) = Interleave {
                baseline_bin: b,
                candidate_bin: c,
                run_args: &a.run_args,
                repeat: a.repeat,
                work,
            }
            .run()?;
            (vec![bd], vec![cd])
        }
        _ => (a.baseline.clone(), a.candidate.clone()),
    };
    let label = |d: &[PathBuf]| {
        let names: Vec<String> = d.iter().map(|p| p.display().to_string()).collect();
        names.join(",")
    };
    let soak = baseline
        .iter()
        .chain(&candidate)
        .find(|d| crate::soak::is_soak_dir(d));
    let outcome = match (rules, soak) {
        (_, Some(d)) => GateOutcome::failed(
            label(&baseline),
            label(&candidate),
            format!(
                "{} is a soak directory (a journal, no result.json): the gate compares two run results; a soak is judged by its own checks in robustness.json (`pocketperf report {}` rewrites them)",
                d.display(),
                d.display()
            ),
        ),
        (Ok(rules), None) => gate_dirs(&baseline, &candidate, &rules),
        (Err(e), None) => GateOutcome::failed(label(&baseline), label(&candidate), e.to_string()),
    };
    let ctx = RenderContext::now();
    if let Some(p) = &a.junit {
        write(p, &outcome.to_junit(&ctx))?;
    }
    if let Some(p) = &a.markdown {
        write(p, &outcome.to_markdown(&ctx))?;
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({
            "tool": meta::TOOL,
            "tool_version": meta::TOOL_VERSION,
            "git_commit": meta::GIT_COMMIT,
            "rendered_utc": pocketperf_reports::render::utc(&ctx.rendered_utc),
            "rules": a.rules.as_ref().map(|r| r.display().to_string()),
            "outcome": outcome,
        });
        write(p, &(serde_json::to_string_pretty(&v)? + "\n"))?;
    }
    print!("{}", outcome.to_text());
    Ok(outcome.exit_code())
}
