//! The crate's one error type. Every variant names what a user needs to act on: the file,
//! the 0-based data row, the subject, the key or the offending value.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading MMLU, checking the subset or building prompts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No MMLU location was given on the command line or in the environment.
    #[error(
        "no MMLU directory: pass --mmlu-dir <DIR> or set POCKETPERF_MMLU_DIR \
         (a directory holding test/ and dev/, or data/test/ and data/dev/)"
    )]
    NoMmluDir,
    /// A directory that must exist does not.
    #[error("{}: directory not found ({what})", path.display())]
    MissingDir { path: PathBuf, what: &'static str },
    /// A file that must exist does not.
    #[error("{}: file not found ({what})", path.display())]
    MissingFile { path: PathBuf, what: &'static str },
    /// Reading a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A CSV syntax error or invalid UTF-8 in a data file.
    #[error("{}: row {row} (line {line}): {reason}", path.display())]
    Csv {
        path: PathBuf,
        row: u64,
        line: u64,
        reason: String,
    },
    /// A data row with other than 6 fields (`question,A,B,C,D,answer`).
    #[error("{}: row {row} (line {line}): expected 6 fields (question,A,B,C,D,answer), found {found}", path.display())]
    FieldCount {
        path: PathBuf,
        row: u64,
        line: u64,
        found: usize,
    },
    /// A data row whose answer column is not exactly one of `A`, `B`, `C`, `D`.
    #[error("{}: row {row} (line {line}): answer {value:?} is not one of A, B, C, D", path.display())]
    BadAnswer {
        path: PathBuf,
        row: u64,
        line: u64,
        value: String,
    },
    /// The test split does not hold the canonical number of rows.
    #[error(
        "{}: the test split holds {found} rows in {subjects} subjects; the MMLU-576 rule needs the canonical release with {expected} rows",
        dir.display()
    )]
    TestTotal {
        dir: PathBuf,
        found: u64,
        expected: u64,
        subjects: usize,
    },
    /// The local MMLU copy does not match the committed subset manifest.
    #[error(
        "MMLU copy does not match the MMLU-576 manifest: subject {subject}, row {row}: {reason} \
         (run `pocketperf mmlu subset --verify` for every difference)"
    )]
    SubsetMismatch {
        subject: String,
        row: u64,
        reason: String,
    },
    /// A dev row (a few-shot example) of the local MMLU copy does not match its committed
    /// digest.
    #[error(
        "MMLU copy does not match the dev-shot manifest (datasets/mmlu/dev-shots.csv): subject {subject}, dev row {row}: {reason}"
    )]
    DevMismatch {
        subject: String,
        row: u64,
        reason: String,
    },
    /// A malformed line in an embedded or user-supplied table (manifest, categories).
    #[error("{what}: line {line}: {reason}")]
    Table {
        what: String,
        line: u64,
        reason: String,
    },
    /// A subject that the category table does not know.
    #[error("subject {subject:?} is not in the MMLU category table")]
    UnknownSubject { subject: String },
    /// Even the 0-shot prompt does not fit the caller's context.
    #[error(
        "subject {subject}, row {row}: even the 0-shot prompt ({bytes} bytes) does not fit the context"
    )]
    PromptTooLong {
        subject: String,
        row: u64,
        bytes: usize,
    },
    /// Two runs to compare do not hold the same questions.
    #[error("paired comparison: {reason}")]
    Unpaired { reason: String },
    /// An unknown preset or enum value given by a user.
    #[error("invalid {what} {value:?}: expected one of {expected}")]
    InvalidValue {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
}
