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
    /// Result directory (holds result.json; tokens.csv and telemetry.csv are used when present).
    pub dir: PathBuf,
    /// Write report.html and report.md here instead of into DIR.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// What to print on standard output.
    #[arg(long, value_enum, default_value = "text")]
    pub print: PrintFormat,
}

pub fn report(a: &ReportArgs) -> Result<i32> {
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
