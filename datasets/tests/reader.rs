//! The MMLU CSV reader on hand-made files with every quirk of the release, its errors, and
//! the real release in the shared material (row counts against `categories.tsv`).

mod common;

use std::path::Path;

use pocketperf_datasets::mmlu::{self, Category, Letter, Split, parse_categories, parse_csv};
use pocketperf_datasets::{Error, categories, category_of};

#[test]
fn quirks_of_the_release_are_read_verbatim() {
    // CRLF line ends, a quoted field with a CRLF line break and an escaped quote, leading
    // spaces kept, a comma inside quotes, no newline after the last row.
    let text = b"What is 2+2?,3,4,5,6,B\r\n\
\" Leading space kept\",\"two\r\nlines\",\"say \"\"hi\"\"\",\"a, b\", x ,D\r\n\
Last,1,2,3,4,A";
    let rows = parse_csv(text, Path::new("mem.csv"), "toy").unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].question, "What is 2+2?");
    assert_eq!(rows[0].choices, ["3", "4", "5", "6"].map(String::from));
    assert_eq!(rows[0].answer, Letter::B);
    assert_eq!(rows[0].row, 0);
    assert_eq!(rows[1].question, " Leading space kept");
    assert_eq!(rows[1].choices[0], "two\nlines");
    assert_eq!(rows[1].choices[1], "say \"hi\"");
    assert_eq!(rows[1].choices[2], "a, b");
    assert_eq!(rows[1].choices[3], " x ");
    assert_eq!(rows[1].answer, Letter::D);
    assert_eq!(rows[2].row, 2);
    assert_eq!(rows[2].answer, Letter::A);
    assert!(rows.iter().all(|r| r.subject == "toy"));
}

#[test]
fn lf_and_crlf_copies_read_the_same() {
    let lf = b"q,\"x\ny\",b,c,d,C\nq2,a,b,c,d,A\n";
    let crlf = b"q,\"x\r\ny\",b,c,d,C\r\nq2,a,b,c,d,A\r\n";
    let a = parse_csv(lf, Path::new("lf.csv"), "s").unwrap();
    let b = parse_csv(crlf, Path::new("crlf.csv"), "s").unwrap();
    assert_eq!(a, b);
}

#[test]
fn wrong_field_count_names_file_and_row() {
    let text = b"q,a,b,c,d,A\nq,a,b,c,A\n";
    let err = parse_csv(text, Path::new("bad_test.csv"), "bad").unwrap_err();
    match &err {
        Error::FieldCount { row, found, .. } => {
            assert_eq!((*row, *found), (1, 5));
        }
        other => panic!("expected FieldCount, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("bad_test.csv") && msg.contains("row 1"),
        "{msg}"
    );

    // A bad first row is caught too (the CSV reader alone only compares rows).
    let err = parse_csv(b"q,a,b,c,d,A,extra\n", Path::new("f.csv"), "s").unwrap_err();
    assert!(
        matches!(
            err,
            Error::FieldCount {
                row: 0,
                found: 7,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn answer_outside_a_to_d_names_row_and_value() {
    for bad in ["E", "a", " A", "AB", ""] {
        let text = format!("q,a,b,c,d,A\nq,a,b,c,d,B\nq,a,b,c,d,\"{bad}\"\n");
        let err = parse_csv(text.as_bytes(), Path::new("x_test.csv"), "x").unwrap_err();
        match &err {
            Error::BadAnswer { row, value, .. } => {
                assert_eq!(*row, 2);
                assert_eq!(value, bad);
            }
            other => panic!("expected BadAnswer for {bad:?}, got {other:?}"),
        }
        assert!(err.to_string().contains("x_test.csv"));
    }
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let err = parse_csv(b"q,a,b,c,d,A\nq\xff,a,b,c,d,A\n", Path::new("u.csv"), "u").unwrap_err();
    assert!(matches!(err, Error::Csv { row: 1, .. }), "{err:?}");
}

#[test]
fn missing_directory_and_file_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let gone = tmp.path().join("nope");
    let err = mmlu::resolve_mmlu_dir_with(Some(&gone), None).unwrap_err();
    assert!(matches!(err, Error::MissingDir { .. }));
    assert!(err.to_string().contains("nope"));

    assert!(matches!(
        mmlu::resolve_mmlu_dir_with(None, None),
        Err(Error::NoMmluDir)
    ));
    let from_env = mmlu::resolve_mmlu_dir_with(None, Some(tmp.path().as_os_str().into())).unwrap();
    assert_eq!(from_env, tmp.path());
    // The command line wins over the environment.
    let err =
        mmlu::resolve_mmlu_dir_with(Some(&gone), Some(tmp.path().as_os_str().into())).unwrap_err();
    assert!(matches!(err, Error::MissingDir { .. }));

    // A directory without test/ is refused by name.
    let err = mmlu::subjects(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("test"), "{err}");

    std::fs::create_dir(tmp.path().join("test")).unwrap();
    let err = mmlu::load_split(tmp.path(), Split::Test, "anatomy").unwrap_err();
    match &err {
        Error::MissingFile { path, .. } => assert!(path.ends_with("test/anatomy_test.csv")),
        other => panic!("expected MissingFile, got {other:?}"),
    }
}

#[test]
fn embedded_categories_equal_the_shared_table() {
    let shared = std::fs::read_to_string(common::mmlu_dir().join("categories.tsv")).unwrap();
    let parsed = parse_categories(&shared, "shared categories.tsv").unwrap();
    assert_eq!(parsed, categories());
    assert_eq!(categories().len(), 57);
    let count = |c: Category| categories().iter().filter(|s| s.category == c).count();
    assert_eq!(count(Category::Stem), 18);
    assert_eq!(count(Category::Humanities), 13);
    assert_eq!(count(Category::SocialSciences), 12);
    assert_eq!(count(Category::Other), 14);
    assert_eq!(category_of("abstract_algebra").unwrap(), Category::Stem);
    assert_eq!(
        category_of("world_religions").unwrap(),
        Category::Humanities
    );
    assert_eq!(
        category_of("econometrics").unwrap(),
        Category::SocialSciences
    );
    assert_eq!(category_of("virology").unwrap(), Category::Other);
    assert!(matches!(
        category_of("astrology"),
        Err(Error::UnknownSubject { .. })
    ));
}

#[test]
fn the_release_reads_with_the_documented_row_counts() {
    let dir = common::mmlu_dir();
    let subjects = mmlu::subjects(&dir).unwrap();
    assert_eq!(subjects.len(), 57);
    let mut totals = [0u64; 3];
    for info in categories() {
        assert!(subjects.contains(&info.subject), "{}", info.subject);
        for (i, (split, want)) in [
            (Split::Test, info.test_rows),
            (Split::Dev, info.dev_rows),
            (Split::Val, info.val_rows),
        ]
        .into_iter()
        .enumerate()
        {
            let rows = mmlu::load_split(&dir, split, &info.subject).unwrap();
            assert_eq!(rows.len() as u64, want, "{} {}", info.subject, split.name());
            assert!(rows.iter().enumerate().all(|(k, r)| r.row == k as u64));
            totals[i] += want;
        }
    }
    // The totals SOURCE.md states for the canonical release.
    assert_eq!(totals, [14042, 285, 1531]);

    // Leading spaces are kept: the first test question of world_religions starts with one.
    let wr = mmlu::load_split(&dir, Split::Test, "world_religions").unwrap();
    assert!(wr[0].question.starts_with(' '), "{:?}", wr[0].question);
    // The data root can also be given directly (the layout of an unpacked data.tar).
    let direct = mmlu::load_split(&dir.join("data"), Split::Test, "world_religions").unwrap();
    assert_eq!(direct, wr);
}
