//! The exporters of `bench` (`--output`): one module per format, each rendering a whole
//! [`BenchReport`] to text under the output header.
//!
//! - [`md`] — the Markdown table (llama-bench's columns plus ISA, type mix, median and
//!   min–max), the header as a table above it, the summary lines below;
//! - [`csv`] — one record per row through `csv::Writer`, after `# key=value` header lines and
//!   `# ` summary lines;
//! - [`json`] — the whole report as one JSON document;
//! - [`jsonl`] — the header and sections on the first line, then one row per line;
//! - [`sql`] — `CREATE TABLE` and one `INSERT` per row after `-- ` header lines;
//! - [`summary`] — the lines after the table (batched ratio, roofline, memory, start-up,
//!   cold start) that the text formats share.

pub mod csv;
pub mod json;
pub mod jsonl;
pub mod md;
pub mod sql;
pub mod summary;

#[cfg(test)]
mod fixture;

use super::bench::rows::BenchReport;
use anyhow::Result;

/// `--output`: the format of the printed output and of `--out`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Md,
    Csv,
    Json,
    Jsonl,
    Sql,
}

impl OutputFormat {
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Md => "md",
            OutputFormat::Csv => "csv",
            OutputFormat::Json => "json",
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::Sql => "sql",
        }
    }
}

/// The report in `format`, ending with a newline.
pub fn render(r: &BenchReport, format: OutputFormat) -> Result<String> {
    Ok(match format {
        OutputFormat::Md => md::render(r),
        OutputFormat::Csv => csv::render(r),
        OutputFormat::Json => json::render(r)?,
        OutputFormat::Jsonl => jsonl::render(r)?,
        OutputFormat::Sql => sql::render(r),
    })
}

/// The columns of the row exports (CSV, SQL), in order: the JSON field names of a row.
pub const COLUMNS: [&str; 20] = [
    "model",
    "model_path",
    "model_size_bytes",
    "model_params",
    "type_mix",
    "isa",
    "backend",
    "threads",
    "test",
    "n_prompt",
    "n_gen",
    "n_depth",
    "batch",
    "reps",
    "tokens_per_s_mean",
    "tokens_per_s_stddev",
    "tokens_per_s_median",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "gb_per_s_median",
];

/// A value of a row export: text or a number.
pub enum Cell {
    Text(String),
    Int(u64),
    Real(f64),
}

/// A row's values in [`COLUMNS`] order.
pub fn cells(r: &super::bench::rows::BenchRow) -> [Cell; 20] {
    use Cell::*;
    [
        Text(r.model.model.clone()),
        Text(r.model.model_path.clone()),
        Int(r.model.model_size_bytes),
        Int(r.model.model_params),
        Text(r.model.type_mix.clone()),
        Text(r.isa.clone()),
        Text(r.backend.clone()),
        Int(r.threads as u64),
        Text(r.test.clone()),
        Int(r.n_prompt as u64),
        Int(r.n_gen as u64),
        Int(r.n_depth as u64),
        Int(r.batch as u64),
        Int(r.reps as u64),
        Real(r.tokens_per_s_mean),
        Real(r.tokens_per_s_stddev),
        Real(r.tokens_per_s_median),
        Real(r.tokens_per_s_min),
        Real(r.tokens_per_s_max),
        Real(r.gb_per_s_median),
    ]
}
