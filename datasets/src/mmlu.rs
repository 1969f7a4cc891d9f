//! MMLU reader: locating a copy, the canonical per-subject CSV layout, and the subject →
//! category table.
//!
//! Implements the layout of the MMLU release (Hendrycks et al., ICLR 2021, `data.tar`):
//! `{dev,val,test}/<subject>_<split>.csv`, no header row, six columns
//! `question,A,B,C,D,answer`, RFC 4180 quoting (`""` escapes a quote, quoted fields may hold
//! line breaks), CRLF or LF line ends, possibly no newline after the last row. Fields are kept
//! byte for byte (no trimming) except that a CRLF inside a quoted field becomes LF, so that a
//! row reads the same whichever line ends its file uses.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Environment variable naming the MMLU directory when `--mmlu-dir` is not given.
pub const MMLU_DIR_ENV: &str = "POCKETPERF_MMLU_DIR";

/// One of the four answer letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Letter {
    A,
    B,
    C,
    D,
}

impl Letter {
    /// The four letters in order.
    pub const ALL: [Letter; 4] = [Letter::A, Letter::B, Letter::C, Letter::D];

    /// 0 for A … 3 for D.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The letter at `i` (0 → A … 3 → D), if any.
    pub fn from_index(i: usize) -> Option<Letter> {
        Letter::ALL.get(i).copied()
    }

    /// `'A'` … `'D'`.
    pub fn as_char(self) -> char {
        match self {
            Letter::A => 'A',
            Letter::B => 'B',
            Letter::C => 'C',
            Letter::D => 'D',
        }
    }

    /// The letter for `'A'` … `'D'` (upper case only).
    pub fn from_char(c: char) -> Option<Letter> {
        match c {
            'A' => Some(Letter::A),
            'B' => Some(Letter::B),
            'C' => Some(Letter::C),
            'D' => Some(Letter::D),
            _ => None,
        }
    }

    /// The letter for a field that is exactly `"A"` … `"D"` (no spaces, upper case).
    pub fn parse_exact(s: &str) -> Option<Letter> {
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Letter::from_char(c),
            _ => None,
        }
    }
}

impl fmt::Display for Letter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_char())
    }
}

/// The three splits of the release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// 5 rows per subject: the few-shot examples.
    Dev,
    /// Validation rows.
    Val,
    /// Test rows: the questions that are scored.
    Test,
}

impl Split {
    /// Directory and file-name suffix of the split (`dev`, `val`, `test`).
    pub fn name(self) -> &'static str {
        match self {
            Split::Dev => "dev",
            Split::Val => "val",
            Split::Test => "test",
        }
    }
}

/// One MMLU row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// File-name stem without the split suffix, e.g. `abstract_algebra`.
    pub subject: String,
    /// 0-based index of the row in its CSV file.
    pub row: u64,
    /// The question text as read (CRLF inside the field normalized to LF).
    pub question: String,
    /// Choices A, B, C, D as read.
    pub choices: [String; 4],
    /// The correct answer.
    pub answer: Letter,
}

/// The MMLU directory: `cli` if given, else `$POCKETPERF_MMLU_DIR`, else an error telling
/// the user how to provide it. The directory must exist.
pub fn resolve_mmlu_dir(cli: Option<&Path>) -> Result<PathBuf> {
    resolve_mmlu_dir_with(cli, std::env::var_os(MMLU_DIR_ENV))
}

/// [`resolve_mmlu_dir`] with the environment value passed in (for callers and tests that
/// must not depend on the process environment).
pub fn resolve_mmlu_dir_with(cli: Option<&Path>, env: Option<OsString>) -> Result<PathBuf> {
    let dir = match (cli, env) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(v)) if !v.is_empty() => PathBuf::from(v),
        _ => return Err(Error::NoMmluDir),
    };
    if !dir.is_dir() {
        return Err(Error::MissingDir {
            path: dir,
            what: "MMLU directory",
        });
    }
    Ok(dir)
}

/// The directory that holds `dev/`, `val/` and `test/`: `dir/data` when `dir/data/test`
/// exists (the layout of a checkout with the release unpacked under `data/`), else `dir`
/// itself when `dir/test` exists.
pub fn data_root(dir: &Path) -> Result<PathBuf> {
    let nested = dir.join("data");
    if nested.join("test").is_dir() {
        return Ok(nested);
    }
    if dir.join("test").is_dir() {
        return Ok(dir.to_path_buf());
    }
    if !dir.is_dir() {
        return Err(Error::MissingDir {
            path: dir.to_path_buf(),
            what: "MMLU directory",
        });
    }
    Err(Error::MissingDir {
        path: dir.join("test"),
        what: "MMLU test split (expected test/ or data/test/ with <subject>_test.csv files)",
    })
}

/// The path of `<subject>_<split>.csv` under `dir` (either layout of [`data_root`]).
pub fn split_path(dir: &Path, split: Split, subject: &str) -> Result<PathBuf> {
    let root = data_root(dir)?;
    Ok(root
        .join(split.name())
        .join(format!("{subject}_{}.csv", split.name())))
}

/// The subjects present in the test split, sorted by name (byte order).
pub fn subjects(dir: &Path) -> Result<Vec<String>> {
    let test = data_root(dir)?.join(Split::Test.name());
    let entries = std::fs::read_dir(&test).map_err(|source| Error::Io {
        path: test.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: test.clone(),
            source,
        })?;
        let name = entry.file_name();
        if let Some(stem) = name.to_str().and_then(|n| n.strip_suffix("_test.csv")) {
            out.push(stem.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// Reads `<subject>_<split>.csv` from `dir` (either layout of [`data_root`]).
pub fn load_split(dir: &Path, split: Split, subject: &str) -> Result<Vec<Question>> {
    let path = split_path(dir, split, subject)?;
    if !path.is_file() {
        let what = match split {
            Split::Dev => "MMLU dev split file",
            Split::Val => "MMLU val split file",
            Split::Test => "MMLU test split file",
        };
        return Err(Error::MissingFile { path, what });
    }
    read_csv_file(&path, subject)
}

/// Reads one MMLU CSV file; `subject` is recorded in every [`Question`].
pub fn read_csv_file(path: &Path, subject: &str) -> Result<Vec<Question>> {
    let mut file = File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_csv(&bytes, path, subject)
}

/// Parses MMLU CSV bytes; `path` only names the source in errors.
pub fn parse_csv(bytes: &[u8], path: &Path, subject: &str) -> Result<Vec<Question>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(false)
        .trim(csv::Trim::None)
        .from_reader(bytes);
    let mut out = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let row = out.len() as u64;
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(csv_error(e, path, row)),
        }
        let line = record.position().map_or(0, |p| p.line());
        if record.len() != 6 {
            return Err(Error::FieldCount {
                path: path.to_path_buf(),
                row,
                line,
                found: record.len(),
            });
        }
        let answer = Letter::parse_exact(&record[5]).ok_or_else(|| Error::BadAnswer {
            path: path.to_path_buf(),
            row,
            line,
            value: record[5].to_string(),
        })?;
        out.push(Question {
            subject: subject.to_string(),
            row,
            question: normalize(&record[0]),
            choices: [
                normalize(&record[1]),
                normalize(&record[2]),
                normalize(&record[3]),
                normalize(&record[4]),
            ],
            answer,
        });
    }
    Ok(out)
}

fn normalize(field: &str) -> String {
    field.replace("\r\n", "\n")
}

fn csv_error(e: csv::Error, path: &Path, row: u64) -> Error {
    let line = e.position().map_or(0, |p| p.line());
    match e.kind() {
        csv::ErrorKind::UnequalLengths { len, .. } => Error::FieldCount {
            path: path.to_path_buf(),
            row,
            line,
            found: *len as usize,
        },
        csv::ErrorKind::Utf8 { err, .. } => Error::Csv {
            path: path.to_path_buf(),
            row,
            line,
            reason: format!("invalid UTF-8 in field {}", err.field() + 1),
        },
        _ => Error::Csv {
            path: path.to_path_buf(),
            row,
            line,
            reason: e.to_string(),
        },
    }
}

/// The four MMLU categories of `categories.py` in `hendrycks/test`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Stem,
    Humanities,
    SocialSciences,
    Other,
}

impl Category {
    /// All four, in report order.
    pub const ALL: [Category; 4] = [
        Category::Stem,
        Category::Humanities,
        Category::SocialSciences,
        Category::Other,
    ];

    /// The name used in the category table (`STEM`, `humanities`, `social sciences`,
    /// `other (business, health, misc.)`).
    pub fn table_name(self) -> &'static str {
        match self {
            Category::Stem => "STEM",
            Category::Humanities => "humanities",
            Category::SocialSciences => "social sciences",
            Category::Other => "other (business, health, misc.)",
        }
    }

    fn from_table_name(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.table_name() == s)
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.table_name())
    }
}

/// One line of the category table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectInfo {
    pub subject: String,
    pub subcategory: String,
    pub category: Category,
    /// Rows in the test, dev and val splits of the canonical release.
    pub test_rows: u64,
    pub dev_rows: u64,
    pub val_rows: u64,
}

const CATEGORIES_TSV: &str = include_str!("../mmlu/categories.tsv");

/// Parses a category table: a header line `subject subcategory category test dev val`, then
/// one tab-separated line per subject. `what` names the source in errors.
pub fn parse_categories(text: &str, what: &str) -> Result<Vec<SubjectInfo>> {
    const HEADER: [&str; 6] = ["subject", "subcategory", "category", "test", "dev", "val"];
    let table_err = |line: usize, reason: String| Error::Table {
        what: what.to_string(),
        line: line as u64 + 1,
        reason,
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.split('\t').eq(HEADER) => {}
        Some((i, h)) => {
            return Err(table_err(
                i,
                format!("header {h:?}, expected {:?}", HEADER.join("\t")),
            ));
        }
        None => return Err(table_err(0, "empty table".to_string())),
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 6 {
            return Err(table_err(i, format!("{} fields, expected 6", f.len())));
        }
        let category = Category::from_table_name(f[2])
            .ok_or_else(|| table_err(i, format!("unknown category {:?}", f[2])))?;
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| table_err(i, format!("row count {s:?} is not a number")))
        };
        out.push(SubjectInfo {
            subject: f[0].to_string(),
            subcategory: f[1].to_string(),
            category,
            test_rows: num(f[3])?,
            dev_rows: num(f[4])?,
            val_rows: num(f[5])?,
        });
    }
    Ok(out)
}

/// The embedded category table (57 subjects; from `categories.py` of `hendrycks/test`).
pub fn categories() -> &'static [SubjectInfo] {
    static TABLE: OnceLock<Vec<SubjectInfo>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Invariant: the table is compiled in and `categories_table_parses` tests it.
        parse_categories(CATEGORIES_TSV, "embedded categories.tsv")
            .expect("embedded category table is valid")
    })
}

/// The category of `subject`.
pub fn category_of(subject: &str) -> Result<Category> {
    categories()
        .iter()
        .find(|s| s.subject == subject)
        .map(|s| s.category)
        .ok_or_else(|| Error::UnknownSubject {
            subject: subject.to_string(),
        })
}
