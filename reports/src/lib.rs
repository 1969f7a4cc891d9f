//! Result schema, statistics, renderers, comparison and the release gate.
//!
//! `pocketperf-reports` reads result directories (see `docs/RESULTS.md`) and never runs
//! anything. Entry points: [`load_result`] / [`write_result`], [`write_report`],
//! [`compare()`], [`GateRules::from_toml_file`] and [`gate()`].
//!
//! Map: [`comparability`] (which differences between two runs make them incomparable), [`schema`] (result.json v1, migration of v0) and [`datafiles`] (tokens.csv,
//! telemetry.csv) are read; [`stats`] (re-exports `pocketperf-stats`) computes; [`plots`]
//! (SVG) and [`render`] (text, JSON, CSV, Markdown, the HTML page skeleton every page shares)
//! format; [`report`], [`compare`] and [`gate`] are the three products; [`files`] writes every
//! result file (temporary + rename); [`error`]. CSV goes
//! through `csv::Writer`, the gate's JUnit XML through `quick_xml`'s writer.

pub mod comparability;
pub mod compare;
pub mod datafiles;
pub mod error;
pub mod files;
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
