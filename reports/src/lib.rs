//! Result schema, statistics, renderers, comparison and the release gate.
//!
//! `pocketperf-reports` reads result directories (see `docs/RESULTS.md`) and never runs
//! anything. Entry points: [`load_result`] / [`write_result`], [`write_report`],
//! [`compare()`], [`GateRules::from_toml_file`] and [`gate()`].

pub mod compare;
pub mod datafiles;
pub mod error;
pub mod gate;
pub mod plots;
pub mod render;
pub mod report;
pub mod schema;
pub mod stats;

pub use compare::{Comparison, compare};
pub use error::{ReportError, Result};
pub use gate::{GateOutcome, GateRules, GateStatus, gate};
pub use render::{Exporter, Format, RenderContext, RunData, exporter};
pub use report::{render_report, write_report, write_report_at};
pub use schema::{ResultFile, SCHEMA_VERSION, load_result, write_result};
