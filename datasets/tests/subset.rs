//! The MMLU-576 rule: quotas by hand, the committed manifest recomputed from the shared
//! release, and refusal of altered copies.

mod common;

use std::path::Path;

use pocketperf_datasets::mmlu::{Letter, Question};
use pocketperf_datasets::subset::{
    self, CANONICAL_TEST_ROWS, Difference, SUBSET_SIZE, quotas, row_digest,
};
use pocketperf_datasets::{Error, categories, compute_subset, load_subset, manifest, verify};

#[test]
fn largest_remainder_by_hand() {
    // 5 of 10: floors 2, 1, 1 (sum 4); remainders 25 mod 10 = 5, 15 mod 10 = 5, 10 mod 10 = 0;
    // the tie between a and b goes to the name that sorts first.
    let counts = [
        ("b".to_string(), 3),
        ("a".to_string(), 5),
        ("c".to_string(), 2),
    ];
    assert_eq!(quotas(&counts, 5, 10), vec![1, 3, 1]);
    // 3 of 7 over 7 subjects of 1 row: floors 0, three slots to the first names.
    let ones: Vec<(String, u64)> = "gfedcba".chars().map(|c| (c.to_string(), 1)).collect();
    assert_eq!(quotas(&ones, 3, 7), vec![0, 0, 0, 0, 1, 1, 1]);
}

#[test]
fn quotas_of_the_release() {
    let counts: Vec<(String, u64)> = categories()
        .iter()
        .map(|s| (s.subject.clone(), s.test_rows))
        .collect();
    let total: u64 = counts.iter().map(|c| c.1).sum();
    assert_eq!(total, CANONICAL_TEST_ROWS);
    let q = quotas(&counts, SUBSET_SIZE, total);
    assert_eq!(q.iter().sum::<u64>(), 576);
    let quota = |name: &str| q[counts.iter().position(|c| c.0 == name).unwrap()];
    // professional_law: 576 * 1534 / 14042 = 62.93 -> floor 62 + 1 remainder slot.
    assert_eq!(quota("professional_law"), 63);
    // The smallest subjects (100 rows): 576 * 100 / 14042 = 4.10 -> 4, remainder too small.
    let min_rows = counts.iter().map(|c| c.1).min().unwrap();
    assert_eq!(min_rows, 100);
    for (i, c) in counts.iter().enumerate() {
        if c.1 == min_rows {
            assert_eq!(q[i], 4, "{}", c.0);
        }
        // Every quota is the floor or the floor plus one.
        let floor = 576 * c.1 / total;
        assert!(q[i] == floor || q[i] == floor + 1, "{}", c.0);
    }
}

#[test]
fn row_digest_of_a_hand_made_row() {
    let q = Question {
        subject: "toy".into(),
        row: 0,
        question: "Q".into(),
        choices: ["a".into(), "b".into(), "c".into(), "d".into()],
        answer: Letter::C,
    };
    // sha256 of the 15 bytes "toy\nQ\na\nb\nc\nd\nC" (computed independently with sha256sum).
    assert_eq!(
        row_digest(&q),
        "8989fb33f09d0b46f0ce2974fd4dc564965c443d94ee871c4fc28173306fed5b"
    );
}

#[test]
fn committed_manifest_is_the_rule_applied_to_the_release() {
    let dir = common::mmlu_dir();
    let computed = compute_subset(&dir).unwrap();
    assert_eq!(computed.len(), 576);
    assert_eq!(computed.as_slice(), manifest());
    let report = verify(&dir).unwrap();
    assert!(report.is_match(), "{:?}", report.differences);
    assert_eq!(report.test_rows, 14042);
    assert_eq!(report.manifest_entries, 576);
    // The manifest text round-trips through the writer.
    assert_eq!(
        subset::parse_manifest(&subset::manifest_csv(manifest()), "round trip").unwrap(),
        manifest()
    );

    // Per subject: the quota, and the rows are those with the smallest digests.
    let tests = subset::load_test_split(&dir).unwrap();
    for info in categories() {
        let picked: Vec<_> = manifest()
            .iter()
            .filter(|e| e.subject == info.subject)
            .collect();
        let mut all: Vec<String> = tests[&info.subject].iter().map(row_digest).collect();
        all.sort();
        let max_picked = picked.iter().map(|e| e.sha256.clone()).max().unwrap();
        assert_eq!(all[picked.len() - 1], max_picked, "{}", info.subject);
    }

    let questions = load_subset(&dir).unwrap();
    assert_eq!(questions.len(), 576);
    for (q, e) in questions.iter().zip(manifest()) {
        assert_eq!((&q.subject, q.row), (&e.subject, e.row));
        assert_eq!(row_digest(q), e.sha256);
    }
}

/// Copies the test split of the shared release to a temp dir, rewriting `subject`'s file
/// with `edit` applied to its records.
fn altered_copy(
    subject: &str,
    edit: impl FnOnce(&mut Vec<csv::StringRecord>),
) -> tempfile::TempDir {
    let src = common::mmlu_dir().join("data").join("test");
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("test");
    std::fs::create_dir(&dst).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
    let path = dst.join(format!("{subject}_test.csv"));
    let mut rows: Vec<csv::StringRecord> = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_path(&path)
        .unwrap()
        .records()
        .map(Result::unwrap)
        .collect();
    edit(&mut rows);
    let mut w = csv::Writer::from_path(&path).unwrap();
    for r in &rows {
        w.write_record(r).unwrap();
    }
    w.flush().unwrap();
    tmp
}

#[test]
fn a_copy_with_one_question_changed_is_refused() {
    let target = manifest()
        .iter()
        .find(|e| e.subject == "high_school_biology")
        .unwrap()
        .clone();
    let tmp = altered_copy(&target.subject, |rows| {
        let r = &mut rows[target.row as usize];
        let changed: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i == 0 {
                    format!("{f} (edited)")
                } else {
                    f.to_string()
                }
            })
            .collect();
        *r = csv::StringRecord::from(changed);
    });

    let err = load_subset(tmp.path()).unwrap_err();
    match &err {
        Error::SubsetMismatch {
            subject,
            row,
            reason,
        } => {
            assert_eq!(subject, &target.subject);
            assert_eq!(*row, target.row);
            assert!(reason.contains("differs"), "{reason}");
        }
        other => panic!("expected SubsetMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("high_school_biology") && msg.contains(&format!("row {}", target.row)));

    let report = verify(tmp.path()).unwrap();
    assert!(!report.is_match());
    assert!(report.differences.iter().any(|d| matches!(
        d,
        Difference::HashMismatch { subject, row, expected, .. }
            if subject == &target.subject && *row == target.row && *expected == target.sha256
    )));
    // Nothing outside that subject is reported.
    for d in &report.differences {
        let s = match d {
            Difference::HashMismatch { subject, .. }
            | Difference::NotSelected { subject, .. }
            | Difference::Unexpected { subject, .. }
            | Difference::MissingRow { subject, .. }
            | Difference::MissingSubject { subject } => subject.as_str(),
            Difference::TestTotal { .. } => "",
        };
        assert_eq!(s, target.subject, "{d}");
    }
}

#[test]
fn a_copy_with_a_row_removed_is_refused() {
    // Drop the last row of anatomy: the total is no longer 14042.
    let tmp = altered_copy("anatomy", |rows| {
        rows.pop();
    });
    let err = compute_subset(tmp.path()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TestTotal {
                found: 14041,
                expected: 14042,
                ..
            }
        ),
        "{err:?}"
    );
    let report = verify(tmp.path()).unwrap();
    assert!(report.differences.contains(&Difference::TestTotal {
        found: 14041,
        expected: 14042
    }));
    let last = (report.test_rows, report.subjects);
    assert_eq!(last, (14041, 57));
    // If the dropped row was in the subset, loading names it; otherwise loading still
    // succeeds because every listed row matches.
    let listed_last = manifest()
        .iter()
        .any(|e| e.subject == "anatomy" && e.row == 134);
    assert_eq!(load_subset(tmp.path()).is_err(), listed_last);
}

#[test]
fn missing_copy_is_an_error_not_a_panic() {
    assert!(load_subset(Path::new("definitely/not/here")).is_err());
    assert!(verify(Path::new("definitely/not/here")).is_err());
}

#[test]
fn the_dev_manifest_matches_every_dev_row_of_the_release_and_refuses_a_changed_one() {
    let dir = common::mmlu_dir();
    let dev = subset::dev_manifest();
    assert_eq!(dev.len(), 285);
    for info in categories() {
        let rows = pocketperf_datasets::mmlu::load_split(
            &dir,
            pocketperf_datasets::Split::Dev,
            &info.subject,
        )
        .unwrap();
        assert_eq!(rows.len(), 5, "{}", info.subject);
        subset::verify_dev_rows(&info.subject, &rows).unwrap();
        // Any change to a shot, even one choice, is refused naming the subject and the row.
        let mut changed = rows.clone();
        changed[3].choices[1].push('.');
        match subset::verify_dev_rows(&info.subject, &changed) {
            Err(Error::DevMismatch { subject, row, .. }) => {
                assert_eq!((subject.as_str(), row), (info.subject.as_str(), 3));
            }
            other => panic!("{}: {other:?}", info.subject),
        }
        assert!(subset::verify_dev_rows(&info.subject, &rows[..4]).is_err());
    }
    assert!(subset::verify_dev_rows("not_a_subject", &[]).is_err());
}
