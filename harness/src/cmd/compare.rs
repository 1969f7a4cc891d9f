//! `pocketperf compare DIR... [--baseline DIR]`: a per-handset (or per-run) comparison, one
//! column per result directory, every figure with its interval and its ratio to the baseline
//! (with a bootstrap interval where per-query samples back it); written as `compare.html`
//! (tables and charts, self-contained), `compare.csv` and `compare.md`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use pocketperf_reports::comparability;
use pocketperf_reports::compare::{ComparedRun, compare_results};
use pocketperf_reports::render::RenderContext;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Result directories, one column each, in this order.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The baseline run (default: the first DIR); added as the first column when it is not
    /// one of DIRs.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Column label, once per column in order (default: the device id and name of each run).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Directory for compare.html, compare.csv and compare.md (created).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Accept differences from the baseline in this field (repeatable or comma-separated:
    /// model, scenario, settings[.KEY], cli[.KEY], threads, backend, isa,
    /// device[.id|name|cpu|os], sut). Comparing handsets side by side: `--allow-diff device`.
    /// Any other difference is an error.
    #[arg(long, value_delimiter = ',')]
    pub allow_diff: Vec<String>,
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

pub fn compare(a: &CompareArgs) -> Result<i32> {
    let mut dirs = a.dirs.clone();
    let baseline_index = match &a.baseline {
        None => 0,
        Some(b) => match dirs.iter().position(|d| same_dir(d, b)) {
            Some(i) => i,
            None => {
                dirs.insert(0, b.clone());
                0
            }
        },
    };
    if !a.labels.is_empty() && a.labels.len() != dirs.len() {
        bail!(
            "--label given {} times for {} columns (the baseline counts when it is not among DIRs)",
            a.labels.len(),
            dirs.len()
        );
    }
    let mut runs = Vec::with_capacity(dirs.len());
    for (i, d) in dirs.iter().enumerate() {
        let result = pocketperf_reports::load_result(d)?;
        runs.push(ComparedRun {
            label: a.labels.get(i).cloned().unwrap_or_else(|| result.label()),
            dir: d.clone(),
            result,
        });
    }
    let labelled: Vec<(&str, &pocketperf_reports::ResultFile)> =
        runs.iter().map(|r| (r.label.as_str(), &r.result)).collect();
    comparability::check_all(&labelled, baseline_index, &a.allow_diff)?;
    let c = compare_results(runs, baseline_index)?;
    let ctx = RenderContext::now();
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: cannot create", a.out.display()))?;
    let md = c.to_markdown(&ctx);
    for (name, text) in [
        ("compare.html", c.to_html(&ctx)?),
        ("compare.csv", c.to_csv(&ctx)),
        ("compare.md", md.clone()),
    ] {
        let p = a.out.join(name);
        pocketperf_reports::files::replace_file(&p, text.as_bytes())
            .map_err(|(f, e)| anyhow::anyhow!("{}: cannot write: {e}", f.display()))?;
        eprintln!("wrote {}", p.display());
    }
    print!("{md}");
    Ok(0)
}
