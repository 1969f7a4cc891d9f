//! The crate's single error type: every failure names the file, field or value involved
//! and, where it helps, what to do next.

use std::path::PathBuf;

/// Errors raised while reading result directories, computing statistics or rendering.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being attempted ("reading", "writing", "creating directory").
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file did not parse or did not match the schema.
    #[error("{path}: invalid JSON ({source}); regenerate the file with `pocketperf run`")]
    Json {
        /// The file concerned.
        path: PathBuf,
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The result file was written by a newer tool than this one.
    #[error(
        "{path}: schema_version {found} is newer than the newest this build reads ({supported}); \
         upgrade pocketperf"
    )]
    NewerSchema {
        /// The file concerned.
        path: PathBuf,
        /// Version found in the file.
        found: u64,
        /// Newest version this build understands.
        supported: u32,
    },
    /// A field has a value the schema does not allow.
    #[error("{path}: field `{field}` {problem}")]
    Field {
        /// The file concerned.
        path: PathBuf,
        /// Dotted name of the field.
        field: String,
        /// What is wrong with it, including the offending value.
        problem: String,
    },
    /// A CSV file did not parse.
    #[error("{path}: line {line}: {problem}")]
    Csv {
        /// The file concerned.
        path: PathBuf,
        /// 1-based line number in the file.
        line: u64,
        /// What is wrong.
        problem: String,
    },
    /// A TOML rules file did not parse.
    #[error("{path}: invalid gate rules: {source}")]
    Toml {
        /// The file concerned.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: toml::de::Error,
    },
    /// A rule has a value outside its allowed range.
    #[error("gate rule `{rule}` = {value}: {problem}")]
    Rule {
        /// Dotted rule name.
        rule: String,
        /// The offending value.
        value: String,
        /// The allowed range.
        problem: String,
    },
    /// A statistic was asked of inputs that cannot support it.
    #[error("statistics: {0}")]
    Stats(String),
    /// A plot could not be drawn.
    #[error("plot `{plot}`: {problem}")]
    Plot {
        /// Which plot.
        plot: String,
        /// What went wrong.
        problem: String,
    },
    /// A comparison was asked for with an impossible argument.
    #[error("compare: {0}")]
    Compare(String),
}

/// Shorthand for results in this crate.
pub type Result<T, E = ReportError> = std::result::Result<T, E>;

impl ReportError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

impl From<pocketperf_stats::Error> for ReportError {
    fn from(e: pocketperf_stats::Error) -> Self {
        ReportError::Stats(e.to_string())
    }
}
