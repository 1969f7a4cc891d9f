//! The crate's single error type: every failure names the file, line, key, field or
//! query it concerns and says what to do next.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while loading settings, running a test or writing logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A LoadGen-format config line was refused.
    #[error("{file}:{line}: key `{key}`: {reason}")]
    Config {
        /// Config file name as given by the caller.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written (or the whole line when no key could be read).
        key: String,
        /// What is wrong and what is expected instead.
        reason: String,
    },
    /// A config file could not be read.
    #[error("cannot read config file {file}: {source}")]
    ConfigIo {
        /// Path of the file.
        file: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A settings value is out of range (checked before a run starts).
    #[error("invalid setting {field} = {value}: {reason}")]
    Settings {
        /// Field name in `TestSettings`.
        field: &'static str,
        /// Offending value.
        value: String,
        /// What is allowed.
        reason: String,
    },
    /// The query sample library cannot supply what the settings ask for.
    #[error(
        "query sample library `{qsl}` has {total} samples but {needed} performance samples are \
         needed: lower performance_sample_count_override or use a larger data set"
    )]
    QslTooSmall {
        /// QSL name.
        qsl: String,
        /// Samples the QSL holds.
        total: u64,
        /// Performance samples needed.
        needed: u64,
    },
    /// An early-stopping question that has no answer (percentile outside (0, 1), ...).
    #[error("early stopping: percentile {percentile}: {reason}")]
    EarlyStopping {
        /// Percentile asked for, as a fraction.
        percentile: f64,
        /// Why it cannot be answered.
        reason: String,
    },
    /// A warm-up query was not answered within the query timeout.
    #[error("warm-up query {query_id} (sample {sample_index}) timed out after {timeout_ms} ms")]
    WarmupTimeout {
        /// Warm-up id of the query.
        query_id: u64,
        /// Its sample.
        sample_index: u64,
        /// The run's query timeout.
        timeout_ms: u64,
    },
    /// Writing a log file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// File that was being written.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
}
