//! The MMLU-576 subset: its selection rule, the committed manifest, verification of a local
//! MMLU copy against it, and loading the 576 questions.
//!
//! Rule (specified in `docs/MMLU576.md`):
//! 1. Quota per subject, proportional to its test rows by largest remainder: every subject
//!    gets `floor(576 · n_s / 14042)`; the slots left go one each to the subjects with the
//!    largest remainders `(576 · n_s) mod 14042` (ties: subject name ascending). Integer
//!    arithmetic throughout. The test split must hold exactly 14042 rows.
//! 2. Within a subject, the `quota` rows with the smallest row digest (lowercase hex order;
//!    ties, which only exact duplicate rows can produce, by row ascending). The row digest is
//!    the SHA-256 of the UTF-8 bytes of subject, question, A, B, C, D, answer joined by `\n`.
//! 3. The manifest lists `subject,row,sha256`, sorted by subject then row.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::mmlu::{self, Question, Split};

/// Number of questions in the subset.
pub const SUBSET_SIZE: u64 = 576;
/// Rows in the test split of the canonical MMLU release.
pub const CANONICAL_TEST_ROWS: u64 = 14042;

const MANIFEST_CSV: &str = include_str!("../mmlu/subset-576.csv");
/// Digests of every dev row (the few-shot examples), in the manifest format.
const DEV_MANIFEST_CSV: &str = include_str!("../mmlu/dev-shots.csv");
const MANIFEST_HEADER: &str = "subject,row,sha256";

/// One row of the subset manifest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SubsetEntry {
    /// Subject (file-name stem without `_test`).
    pub subject: String,
    /// 0-based index of the row in `<subject>_test.csv`.
    pub row: u64,
    /// Row digest, 64 lowercase hex digits (see [`row_digest`]).
    pub sha256: String,
}

/// SHA-256, as lowercase hex, of the UTF-8 bytes of subject, question, A, B, C, D and the
/// answer letter joined by single `\n` (no trailing newline).
pub fn row_digest(q: &Question) -> String {
    let mut h = Sha256::new();
    h.update(q.subject.as_bytes());
    h.update(b"\n");
    h.update(q.question.as_bytes());
    for c in &q.choices {
        h.update(b"\n");
        h.update(c.as_bytes());
    }
    h.update(b"\n");
    h.update([q.answer.as_char() as u8]);
    let mut hex = String::with_capacity(64);
    for b in h.finalize() {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Largest-remainder quotas: for `(subject, rows)` pairs, the number of rows each subject
/// contributes to a subset of `size` out of `total` rows. Returned in the input order.
///
/// `total` must be the sum of the rows and at least `size` for the result to sum to `size`;
/// [`compute_subset`] checks both.
pub fn quotas(counts: &[(String, u64)], size: u64, total: u64) -> Vec<u64> {
    if total == 0 {
        return vec![0; counts.len()];
    }
    let mut out: Vec<u64> = counts.iter().map(|(_, n)| size * n / total).collect();
    let given: u64 = out.iter().sum();
    let mut order: Vec<usize> = (0..counts.len()).collect();
    // Largest remainder first; ties by subject name ascending.
    order.sort_by(|&a, &b| {
        let ra = size * counts[a].1 % total;
        let rb = size * counts[b].1 % total;
        rb.cmp(&ra).then_with(|| counts[a].0.cmp(&counts[b].0))
    });
    for &i in order.iter().take(size.saturating_sub(given) as usize) {
        out[i] += 1;
    }
    out
}

/// All test rows of a copy, by subject.
pub type TestSplit = BTreeMap<String, Vec<Question>>;

/// Reads the whole test split of the MMLU copy at `dir`.
pub fn load_test_split(dir: &Path) -> Result<TestSplit> {
    let mut out = BTreeMap::new();
    for subject in mmlu::subjects(dir)? {
        let rows = mmlu::load_split(dir, Split::Test, &subject)?;
        out.insert(subject, rows);
    }
    Ok(out)
}

/// Applies the subset rule to an already loaded test split. `dir` only names the copy in
/// errors.
pub fn select(tests: &TestSplit, dir: &Path) -> Result<Vec<SubsetEntry>> {
    let counts: Vec<(String, u64)> = tests
        .iter()
        .map(|(s, rows)| (s.clone(), rows.len() as u64))
        .collect();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    if total != CANONICAL_TEST_ROWS {
        return Err(Error::TestTotal {
            dir: dir.to_path_buf(),
            found: total,
            expected: CANONICAL_TEST_ROWS,
            subjects: counts.len(),
        });
    }
    let q = quotas(&counts, SUBSET_SIZE, total);
    let mut out = Vec::with_capacity(SUBSET_SIZE as usize);
    for ((subject, rows), quota) in tests.iter().zip(q) {
        let mut hashed: Vec<(String, u64)> = rows.iter().map(|r| (row_digest(r), r.row)).collect();
        hashed.sort();
        let mut picked: Vec<SubsetEntry> = hashed
            .into_iter()
            .take(quota as usize)
            .map(|(sha256, row)| SubsetEntry {
                subject: subject.clone(),
                row,
                sha256,
            })
            .collect();
        picked.sort_by_key(|e| e.row);
        out.extend(picked);
    }
    Ok(out)
}

/// Recomputes the subset from the MMLU copy at `dir`.
pub fn compute_subset(dir: &Path) -> Result<Vec<SubsetEntry>> {
    let tests = load_test_split(dir)?;
    select(&tests, dir)
}

/// Renders entries as manifest CSV (header `subject,row,sha256`, LF line ends).
pub fn manifest_csv(entries: &[SubsetEntry]) -> String {
    let mut out = String::with_capacity(entries.len() * 100);
    out.push_str(MANIFEST_HEADER);
    out.push('\n');
    for e in entries {
        out.push_str(&format!("{},{},{}\n", e.subject, e.row, e.sha256));
    }
    out
}

/// Parses manifest CSV as written by [`manifest_csv`]; `what` names the source in errors.
pub fn parse_manifest(text: &str, what: &str) -> Result<Vec<SubsetEntry>> {
    let err = |line: usize, reason: String| Error::Table {
        what: what.to_string(),
        line: line as u64 + 1,
        reason,
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, MANIFEST_HEADER)) => {}
        Some((i, h)) => {
            return Err(err(
                i,
                format!("header {h:?}, expected {MANIFEST_HEADER:?}"),
            ));
        }
        None => return Err(err(0, "empty manifest".to_string())),
    }
    let mut out: Vec<SubsetEntry> = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 3 {
            return Err(err(i, format!("{} fields, expected 3", f.len())));
        }
        let row = f[1]
            .parse::<u64>()
            .map_err(|_| err(i, format!("row {:?} is not a number", f[1])))?;
        let hex_ok = f[2].len() == 64
            && f[2]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex_ok {
            return Err(err(
                i,
                format!("sha256 {:?} is not 64 lowercase hex digits", f[2]),
            ));
        }
        let entry = SubsetEntry {
            subject: f[0].to_string(),
            row,
            sha256: f[2].to_string(),
        };
        if let Some(prev) = out.last()
            && (prev.subject.as_str(), prev.row) >= (entry.subject.as_str(), entry.row)
        {
            return Err(err(i, "entries not sorted by subject then row".to_string()));
        }
        out.push(entry);
    }
    Ok(out)
}

/// The committed MMLU-576 manifest (`datasets/mmlu/subset-576.csv`), parsed.
pub fn manifest() -> &'static [SubsetEntry] {
    static MANIFEST: OnceLock<Vec<SubsetEntry>> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        // Invariant: the manifest is compiled in and the tests parse and recompute it.
        parse_manifest(MANIFEST_CSV, "embedded subset-576.csv").expect("embedded manifest is valid")
    })
}

/// One way a local MMLU copy differs from the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Difference {
    /// The test split does not hold the canonical row count, so the rule cannot be applied.
    TestTotal { found: u64, expected: u64 },
    /// A manifest subject has no test file.
    MissingSubject { subject: String },
    /// A manifest row lies beyond the end of its subject's file.
    MissingRow {
        subject: String,
        row: u64,
        rows_in_file: u64,
    },
    /// A manifest row whose content differs.
    HashMismatch {
        subject: String,
        row: u64,
        expected: String,
        found: String,
    },
    /// The rule, applied to this copy, does not select a manifest row.
    NotSelected { subject: String, row: u64 },
    /// The rule, applied to this copy, selects a row the manifest does not list.
    Unexpected {
        subject: String,
        row: u64,
        sha256: String,
    },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::TestTotal { found, expected } => write!(
                f,
                "test split holds {found} rows, the canonical release {expected}; not the same MMLU release"
            ),
            Difference::MissingSubject { subject } => {
                write!(f, "{subject}: no test file")
            }
            Difference::MissingRow {
                subject,
                row,
                rows_in_file,
            } => write!(
                f,
                "{subject}, row {row}: missing (the file has {rows_in_file} rows)"
            ),
            Difference::HashMismatch {
                subject,
                row,
                expected,
                found,
            } => write!(
                f,
                "{subject}, row {row}: content differs (sha256 {found}, manifest {expected})"
            ),
            Difference::NotSelected { subject, row } => write!(
                f,
                "{subject}, row {row}: in the manifest but not selected by the rule on this copy"
            ),
            Difference::Unexpected {
                subject,
                row,
                sha256,
            } => write!(
                f,
                "{subject}, row {row}: selected by the rule on this copy but not in the manifest (sha256 {sha256})"
            ),
        }
    }
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Entries in the manifest checked against.
    pub manifest_entries: usize,
    /// Rows found in the copy's test split.
    pub test_rows: u64,
    /// Subjects found in the copy's test split.
    pub subjects: usize,
    /// Every difference found; empty when the copy matches.
    pub differences: Vec<Difference>,
}

impl VerifyReport {
    /// True when the copy matches the manifest exactly.
    pub fn is_match(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Compares the MMLU copy at `dir` with the committed manifest and lists every difference.
/// Errors only when the copy cannot be read at all (missing directory, malformed CSV).
pub fn verify(dir: &Path) -> Result<VerifyReport> {
    verify_against(dir, manifest())
}

/// [`verify`] against any manifest.
pub fn verify_against(dir: &Path, manifest: &[SubsetEntry]) -> Result<VerifyReport> {
    let tests = load_test_split(dir)?;
    let test_rows: u64 = tests.values().map(|r| r.len() as u64).sum();
    let mut differences = Vec::new();
    let mut reported: BTreeSet<(&str, u64)> = BTreeSet::new();
    let mut missing_subjects: BTreeSet<&str> = BTreeSet::new();
    for e in manifest {
        let Some(rows) = tests.get(&e.subject) else {
            if missing_subjects.insert(&e.subject) {
                differences.push(Difference::MissingSubject {
                    subject: e.subject.clone(),
                });
            }
            reported.insert((&e.subject, e.row));
            continue;
        };
        match rows.get(e.row as usize) {
            None => {
                differences.push(Difference::MissingRow {
                    subject: e.subject.clone(),
                    row: e.row,
                    rows_in_file: rows.len() as u64,
                });
                reported.insert((&e.subject, e.row));
            }
            Some(q) => {
                let found = row_digest(q);
                if found != e.sha256 {
                    differences.push(Difference::HashMismatch {
                        subject: e.subject.clone(),
                        row: e.row,
                        expected: e.sha256.clone(),
                        found,
                    });
                    reported.insert((&e.subject, e.row));
                }
            }
        }
    }
    match select(&tests, dir) {
        Ok(computed) => {
            let listed: BTreeSet<(&str, u64, &str)> = manifest
                .iter()
                .map(|e| (e.subject.as_str(), e.row, e.sha256.as_str()))
                .collect();
            let chosen: BTreeSet<(&str, u64, &str)> = computed
                .iter()
                .map(|e| (e.subject.as_str(), e.row, e.sha256.as_str()))
                .collect();
            for &(subject, row, _) in listed.difference(&chosen) {
                if !reported.contains(&(subject, row)) {
                    differences.push(Difference::NotSelected {
                        subject: subject.to_string(),
                        row,
                    });
                }
            }
            for &(subject, row, sha256) in chosen.difference(&listed) {
                differences.push(Difference::Unexpected {
                    subject: subject.to_string(),
                    row,
                    sha256: sha256.to_string(),
                });
            }
        }
        Err(Error::TestTotal {
            found, expected, ..
        }) => differences.push(Difference::TestTotal { found, expected }),
        Err(e) => return Err(e),
    }
    Ok(VerifyReport {
        manifest_entries: manifest.len(),
        test_rows,
        subjects: tests.len(),
        differences,
    })
}

/// The committed digests of the 285 dev rows, the few-shot examples of every prompt
/// (`datasets/mmlu/dev-shots.csv`: `subject,row,sha256`, the [`row_digest`] of each row of
/// `<subject>_dev.csv`), parsed.
pub fn dev_manifest() -> &'static [SubsetEntry] {
    static MANIFEST: OnceLock<Vec<SubsetEntry>> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        // Invariant: the manifest is compiled in and the tests check it against the copy.
        parse_manifest(DEV_MANIFEST_CSV, "embedded dev-shots.csv")
            .expect("embedded dev manifest is valid")
    })
}

/// The dev rows (the few-shot examples, in file order) of each of `subjects`, by subject,
/// each subject's rows checked against their committed digests
/// ([`verify_dev_rows`]).
pub fn load_dev_shots<'a>(
    dir: &Path,
    subjects: impl IntoIterator<Item = &'a str>,
) -> Result<std::collections::BTreeMap<String, Vec<Question>>> {
    let mut out = std::collections::BTreeMap::new();
    for subject in subjects {
        if !out.contains_key(subject) {
            let rows = mmlu::load_split(dir, Split::Dev, subject)?;
            verify_dev_rows(subject, &rows)?;
            out.insert(subject.to_string(), rows);
        }
    }
    Ok(out)
}

/// Checks the dev rows of `subject` against [`dev_manifest`]: the same number of rows, each
/// with its committed digest. A tampered few-shot example changes every prompt of its subject,
/// so it is refused like a tampered test row.
pub fn verify_dev_rows(subject: &str, rows: &[Question]) -> Result<()> {
    let listed: Vec<&SubsetEntry> = dev_manifest()
        .iter()
        .filter(|e| e.subject == subject)
        .collect();
    let err = |row: u64, reason: String| Error::DevMismatch {
        subject: subject.to_string(),
        row,
        reason,
    };
    if listed.is_empty() {
        return Err(err(0, "subject not in the dev manifest".into()));
    }
    if listed.len() != rows.len() {
        return Err(err(
            rows.len().min(listed.len()) as u64,
            format!(
                "the dev file has {} rows, the manifest {}",
                rows.len(),
                listed.len()
            ),
        ));
    }
    for (e, q) in listed.iter().zip(rows) {
        let found = row_digest(q);
        if e.row != q.row || found != e.sha256 {
            return Err(err(
                q.row,
                format!("row content differs: sha256 {found}, manifest {}", e.sha256),
            ));
        }
    }
    Ok(())
}

/// Loads the 576 questions listed in the committed manifest from the copy at `dir`, in
/// manifest order. Refuses a copy whose rows do not match, naming the subject, the row and
/// the reason.
pub fn load_subset(dir: &Path) -> Result<Vec<Question>> {
    load_subset_from(dir, manifest())
}

/// [`load_subset`] for any manifest.
pub fn load_subset_from(dir: &Path, manifest: &[SubsetEntry]) -> Result<Vec<Question>> {
    let mut out = Vec::with_capacity(manifest.len());
    let mut cache: Option<(&str, Vec<Question>)> = None;
    for e in manifest {
        let rows = match &mut cache {
            Some((s, rows)) if *s == e.subject => rows,
            slot => {
                let rows = match mmlu::load_split(dir, Split::Test, &e.subject) {
                    Ok(rows) => rows,
                    Err(Error::MissingFile { path, .. }) => {
                        return Err(Error::SubsetMismatch {
                            subject: e.subject.clone(),
                            row: e.row,
                            reason: format!("test file {} not found", path.display()),
                        });
                    }
                    Err(other) => return Err(other),
                };
                &mut slot.insert((&e.subject, rows)).1
            }
        };
        let Some(q) = rows.get(e.row as usize) else {
            return Err(Error::SubsetMismatch {
                subject: e.subject.clone(),
                row: e.row,
                reason: format!("row missing: the test file has {} rows", rows.len()),
            });
        };
        let found = row_digest(q);
        if found != e.sha256 {
            return Err(Error::SubsetMismatch {
                subject: e.subject.clone(),
                row: e.row,
                reason: format!("row content differs: sha256 {found}, manifest {}", e.sha256),
            });
        }
        out.push(q.clone());
    }
    Ok(out)
}
