//! `pocketperf gate --baseline DIR --candidate DIR [--rules ci/gate.toml]`: the release gate.
//! Exit 0 pass, 1 regression, 2 error (unreadable run or rules, missing section). Writes
//! JUnit XML and Markdown for CI when asked; the verdict table goes to standard output.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use pocketperf_reports::gate::{GateOutcome, GateRules, gate};
use pocketperf_reports::render::RenderContext;

use crate::meta;

#[derive(Args, Debug)]
pub struct GateArgs {
    /// Result directory of the baseline (the build that ships today).
    #[arg(long)]
    pub baseline: PathBuf,
    /// Result directory of the candidate build.
    #[arg(long)]
    pub candidate: PathBuf,
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
    let soak = [&a.baseline, &a.candidate]
        .into_iter()
        .find(|d| crate::soak::is_soak_dir(d));
    let outcome = match (rules, soak) {
        (_, Some(d)) => GateOutcome::failed(
            &a.baseline,
            &a.candidate,
            format!(
                "{} is a soak directory (a journal, no result.json): the gate compares two run results; a soak is judged by its own checks in robustness.json (`pocketperf report {}` rewrites them)",
                d.display(),
                d.display()
            ),
        ),
        (Ok(rules), None) => gate(&a.baseline, &a.candidate, &rules),
        (Err(e), None) => GateOutcome::failed(&a.baseline, &a.candidate, e.to_string()),
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
