//! The committed dialogues and performance prompt set: their shape, budgets and the
//! documented output-length distribution.

use std::collections::{BTreeMap, HashSet};

use pocketperf_datasets::dialogue::parse_dialogues;
use pocketperf_datasets::perf::{FULL_OUTPUT_LENS, QUICK_OUTPUT_LENS, parse_perf_prompts};
use pocketperf_datasets::{DIALOGUE_NEW_TOKENS, Error, Preset, dialogues, perf_prompts};

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

#[test]
fn committed_dialogues() {
    let set = dialogues();
    assert_eq!(set.len(), 8);
    let ids: HashSet<_> = set.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids.len(), 8);
    let topics: HashSet<_> = set.iter().map(|d| d.topic.as_str()).collect();
    assert_eq!(topics.len(), 8, "topics must vary");
    for d in set {
        assert_eq!(d.turns.len(), 3, "{}", d.id);
        assert_eq!(d.total_new_tokens(), DIALOGUE_NEW_TOKENS, "{}", d.id);
        for t in &d.turns {
            let n = words(&t.user);
            assert!((8..=60).contains(&n), "{}: {n} words", d.id);
            assert!((32..=128).contains(&t.max_new_tokens), "{}", d.id);
        }
    }
}

#[test]
fn dialogue_files_are_validated() {
    let ok = r#"{"version":1,"dialogues":[{"id":"x","topic":"t","turns":[{"user":"hi","max_new_tokens":5}]}]}"#;
    assert_eq!(parse_dialogues(ok, "ok").unwrap()[0].total_new_tokens(), 5);
    for bad in [
        r#"{"version":2,"dialogues":[]}"#,
        r#"{"version":1,"dialogues":[{"id":"x","topic":"t","turns":[]}]}"#,
        r#"{"version":1,"dialogues":[{"id":"x","topic":"t","turns":[{"user":" ","max_new_tokens":5}]}]}"#,
        r#"{"version":1,"dialogues":[{"id":"x","topic":"t","turns":[{"user":"a","max_new_tokens":0}]}]}"#,
        r#"{"version":1,"dialogues":[{"id":"x","topic":"t","turns":[{"user":"a","max_new_tokens":4,"extra":1}]}]}"#,
        "not json",
    ] {
        assert!(
            matches!(parse_dialogues(bad, "bad"), Err(Error::Table { .. })),
            "{bad}"
        );
    }
}

#[test]
fn committed_perf_prompts() {
    let quick = perf_prompts(Preset::Quick);
    let full = perf_prompts(Preset::Full);
    assert_eq!(quick.len(), 64);
    for (i, (q, f)) in quick.iter().zip(&full).enumerate() {
        assert_eq!(q.id, format!("p{i:02}"));
        assert_eq!((&q.id, &q.text), (&f.id, &f.text));
        assert_eq!(f.max_new_tokens, 4 * q.max_new_tokens);
        let n = words(&q.text);
        assert!((10..=150).contains(&n), "{}: {n} words", q.id);
    }
    // Lengths vary: short, medium and long prompts are all present.
    let wc: Vec<usize> = quick.iter().map(|p| words(&p.text)).collect();
    assert!(wc.iter().filter(|&&n| n < 20).count() >= 16);
    assert!(wc.iter().filter(|&&n| (30..90).contains(&n)).count() >= 16);
    assert!(wc.iter().filter(|&&n| n >= 90).count() >= 12);
    let texts: HashSet<_> = quick.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts.len(), 64);

    // The documented distribution: every table entry used by exactly 8 prompts; means 32 / 128.
    for (set, table, mean) in [
        (&quick, QUICK_OUTPUT_LENS, 32),
        (&full, FULL_OUTPUT_LENS, 128),
    ] {
        let mut hist: BTreeMap<u32, usize> = BTreeMap::new();
        for p in set.iter() {
            *hist.entry(p.max_new_tokens).or_default() += 1;
        }
        assert_eq!(hist.keys().copied().collect::<Vec<_>>(), table.to_vec());
        assert!(hist.values().all(|&c| c == 8));
        let total: u32 = set.iter().map(|p| p.max_new_tokens).sum();
        assert_eq!(total, mean * 64);
    }
    // Prompt i takes entry (5i + 3) mod 8 of [16, 20, 24, 28, 36, 40, 44, 48]:
    // indices 3, 0, 5, 2, 7, 4, 1, 6 for p00..p07.
    let lens: Vec<u32> = quick.iter().map(|p| p.max_new_tokens).collect();
    assert_eq!(&lens[..8], &[28, 16, 40, 24, 48, 36, 20, 44]);
    assert_eq!(lens[8..16], lens[..8]);
    // Deterministic.
    assert_eq!(perf_prompts(Preset::Quick), quick);
}

#[test]
fn presets_parse_and_print() {
    assert_eq!("quick".parse::<Preset>().unwrap(), Preset::Quick);
    assert_eq!("full".parse::<Preset>().unwrap(), Preset::Full);
    assert_eq!(Preset::Full.to_string(), "full");
    let err = "fast".parse::<Preset>().unwrap_err();
    assert!(err.to_string().contains("quick, full"), "{err}");
}

#[test]
fn prompt_files_are_validated() {
    let ok = r#"{"version":1,"prompts":[{"id":"a","text":"t"}]}"#;
    assert_eq!(parse_perf_prompts(ok, "ok").unwrap().len(), 1);
    for bad in [
        r#"{"version":1,"prompts":[{"id":"a","text":"t"},{"id":"a","text":"u"}]}"#,
        r#"{"version":1,"prompts":[{"id":"a","text":""}]}"#,
        r#"{"version":3,"prompts":[]}"#,
    ] {
        assert!(parse_perf_prompts(bad, "bad").is_err(), "{bad}");
    }
}
