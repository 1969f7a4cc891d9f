//! `pocketperf report DIR`: renders a result directory (see `docs/RESULTS.md`) into
//! `report.html` (one self-contained page: inline SVG plots, no network) and `report.md`,
//! and prints a summary.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use pocketperf_reports::render::{Format, RenderContext, RunData, exporter};

/// What `report` prints on standard output.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PrintFormat {
    /// The headline table as plain text.
    Text,
    /// The Markdown summary.
    Markdown,
    /// Provenance, figures and the result as JSON.
    Json,
    /// One CSV row per figure.
    Csv,
    /// Only the paths written.
    None,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Result directory (holds result.json; tokens.csv and telemetry.csv are used when
    /// present), or a soak directory (its robustness.json/.html are rewritten from the journal).
    pub dir: PathBuf,
    /// Write report.html and report.md here instead of into DIR.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// What to print on standard output.
    #[arg(long, value_enum, default_value = "text")]
    pub print: PrintFormat,
}

pub fn report(a: &ReportArgs) -> Result<i32> {
    if crate::soak::is_soak_dir(&a.dir) {
        return soak_report(a);
    }
    let ctx = RenderContext::now();
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    let (html, md) = pocketperf_reports::report::write_report_to(&a.dir, &out, &ctx)?;
    let format = match a.print {
        PrintFormat::Text => Some(Format::Text),
        PrintFormat::Markdown => Some(Format::Markdown),
        PrintFormat::Json => Some(Format::Json),
        PrintFormat::Csv => Some(Format::Csv),
        PrintFormat::None => None,
    };
    if let Some(f) = format {
        let run = RunData::load(&a.dir)?;
        print!("{}", exporter(f).render(&run, &ctx)?);
    }
    eprintln!("wrote {} and {}", html.display(), md.display());
    Ok(0)
}

/// `report` on a soak directory: rewrites `robustness.json` and `robustness.html` from the
/// journal (as a checkpoint does) and prints the soak's summary. Refused while the soak runs
/// (one writer per directory: it rewrites them itself at every checkpoint).
fn soak_report(a: &ReportArgs) -> Result<i32> {
    if a.out.is_some() {
        anyhow::bail!(
            "{}: a soak directory's report is written beside its journal; --out is for result directories",
            a.dir.display()
        );
    }
    let _lock = crate::dir_lock::DirLock::acquire(&a.dir)?;
    let (analysis, json, html) = crate::soak::report::write_reports(&a.dir)?;
    if !matches!(a.print, PrintFormat::None) {
        crate::cmd::soak::print_summary(&a.dir, &analysis, &json, &html);
    }
    eprintln!("wrote {} and {}", json.display(), html.display());
    Ok(0)
}
