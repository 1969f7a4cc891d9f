//! Scoring against hand-worked numbers: answer choice from log-probabilities and text, the
//! Wilson interval, the exact McNemar test, and aggregation.

mod common;

use approx::assert_abs_diff_eq;
use pocketperf_datasets::mmlu::{Category, Letter, Question};
use pocketperf_datasets::score::{
    WILSON_Z, choose_by_logprob, parse_generated, parse_generated_settled, wilson_interval,
};
use pocketperf_datasets::{Accuracy, Error, Record, compare_runs, mcnemar_exact, summarize};

fn q(subject: &str, row: u64, answer: Letter) -> Question {
    Question {
        subject: subject.into(),
        row,
        question: "q".into(),
        choices: ["a", "b", "c", "d"].map(String::from),
        answer,
    }
}

#[test]
fn logprob_choice_is_the_argmax_with_ties_to_the_first() {
    assert_eq!(
        choose_by_logprob(&[-3.0, -0.5, -1.0, -2.0]),
        Some(Letter::B)
    );
    assert_eq!(
        choose_by_logprob(&[-9.0, -8.0, -7.0, -0.1]),
        Some(Letter::D)
    );
    assert_eq!(
        choose_by_logprob(&[-1.0, -0.5, -0.5, -0.5]),
        Some(Letter::B)
    );
    assert_eq!(choose_by_logprob(&[-0.7; 4]), Some(Letter::A));
    assert_eq!(
        choose_by_logprob(&[f32::NAN, -2.0, f32::NAN, -1.0]),
        Some(Letter::D)
    );
    assert_eq!(choose_by_logprob(&[f32::NEG_INFINITY; 4]), Some(Letter::A));
    assert_eq!(choose_by_logprob(&[f32::NAN; 4]), None);
}

#[test]
fn generated_text_yields_the_first_standalone_letter() {
    let cases: &[(&str, Option<Letter>)] = &[
        ("A", Some(Letter::A)),
        (" B.", Some(Letter::B)),
        ("The answer is C", Some(Letter::C)),
        ("ABC", None),
        ("(D)", Some(Letter::D)),
        ("C) because", Some(Letter::C)),
        ("Answer: B", Some(Letter::B)),
        ("\nD\n", Some(Letter::D)),
        ("B2", None),
        ("_A", None),
        ("a", None),
        ("I think", None),
        ("", None),
        ("Cats", None),
        ("ÄB C", Some(Letter::C)),
        ("D-glucose is A", Some(Letter::D)),
        ("A or B", Some(Letter::A)),
    ];
    for &(text, want) in cases {
        assert_eq!(parse_generated(text), want, "{text:?}");
    }
}

#[test]
fn a_settled_generated_choice_never_changes_with_more_text() {
    // Settles once the first standalone letter's right neighbour is known.
    let cases: &[(&str, Option<Letter>)] = &[
        (" B", None),
        (" B.", Some(Letter::B)),
        ("B2", None),
        ("ABC", None),
        ("ABC D", None),
        ("ABC D ", Some(Letter::D)),
        ("(D)", Some(Letter::D)),
        ("The answer is C\n", Some(Letter::C)),
        ("Answer: B", None),
        ("Answer: B.", Some(Letter::B)),
        ("A or B", Some(Letter::A)),
        ("I think", None),
        ("", None),
    ];
    for &(text, want) in cases {
        assert_eq!(parse_generated_settled(text), want, "{text:?}");
    }
    // Whatever follows a settled prefix, the full text scores the same letter; and a text
    // that never settles scores what parse_generated says of it.
    let texts = [
        " B.",
        "The answer is C\n",
        "(D)",
        "ABC D ",
        "B2 A!",
        "Answer: B.",
        "_A C,",
        "a B c",
    ];
    let tails = ["", "x", "BC", " A", "1", ".", "_", "\u{e9}"];
    let mut settled = 0;
    for t in texts {
        for (i, _) in t.char_indices().chain(std::iter::once((t.len(), ' '))) {
            let prefix = &t[..i];
            if let Some(l) = parse_generated_settled(prefix) {
                settled += 1;
                for tail in tails {
                    assert_eq!(
                        parse_generated(&format!("{prefix}{tail}")),
                        Some(l),
                        "{prefix:?} + {tail:?}"
                    );
                }
            }
        }
    }
    assert!(settled >= texts.len(), "only {settled} settled prefixes");
}

#[test]
fn wilson_interval_against_hand_computed_values() {
    // 5/10: centre 0.5, half-width z/(1+z²/n)·sqrt(0.025 + z²/400) = 0.263407.
    let (lo, hi) = wilson_interval(5, 10, WILSON_Z);
    assert_abs_diff_eq!(lo, 0.236593, epsilon = 1e-6);
    assert_abs_diff_eq!(hi, 0.763407, epsilon = 1e-6);
    // 0/10: upper = (z²/n)/(1 + z²/n) = 0.3841459/1.3841459.
    let (lo, hi) = wilson_interval(0, 10, WILSON_Z);
    assert_abs_diff_eq!(lo, 0.0, epsilon = 1e-12);
    assert_abs_diff_eq!(hi, 0.277533, epsilon = 1e-6);
    let (lo, hi) = wilson_interval(10, 10, WILSON_Z);
    assert_abs_diff_eq!(lo, 1.0 - 0.277533, epsilon = 1e-6);
    assert_abs_diff_eq!(hi, 1.0, epsilon = 1e-12);
    // 400/576, the scale of the subset.
    let (lo, hi) = wilson_interval(400, 576, WILSON_Z);
    assert_abs_diff_eq!(lo, 0.655641, epsilon = 1e-6);
    assert_abs_diff_eq!(hi, 0.730672, epsilon = 1e-6);
    assert_eq!(wilson_interval(0, 0, WILSON_Z), (0.0, 1.0));
}

#[test]
fn mcnemar_against_hand_computed_binomial_tails() {
    // n = 12, P(X ≤ 2) = (1 + 12 + 66) / 4096.
    assert_abs_diff_eq!(mcnemar_exact(10, 2), 2.0 * 79.0 / 4096.0, epsilon = 1e-12);
    assert_abs_diff_eq!(mcnemar_exact(2, 10), 0.038574, epsilon = 1e-6);
    // n = 6, P(X ≤ 0) = 1/64.
    assert_abs_diff_eq!(mcnemar_exact(0, 6), 2.0 / 64.0, epsilon = 1e-12);
    // n = 15, P(X ≤ 3) = (1 + 15 + 105 + 455) / 32768.
    assert_abs_diff_eq!(mcnemar_exact(3, 12), 2.0 * 576.0 / 32768.0, epsilon = 1e-12);
    // Balanced: the doubled tail exceeds one and is capped.
    assert_eq!(mcnemar_exact(5, 5), 1.0);
    assert_eq!(mcnemar_exact(0, 0), 1.0);
    // n = 1: P(X ≤ 0) = 1/2, doubled to 1.
    assert_eq!(mcnemar_exact(1, 0), 1.0);
    // Large n stays finite and ordered: 100 vs 140 is more significant than 100 vs 120.
    let (p1, p2) = (mcnemar_exact(100, 140), mcnemar_exact(100, 120));
    assert!(p1 > 0.0 && p1 < p2 && p2 < 1.0, "{p1} {p2}");
    // Normal approximation with continuity correction for 100 vs 140: z = 39/sqrt(240) = 2.5174,
    // two-sided 0.01182; the exact value lies close by.
    assert_abs_diff_eq!(p1, 0.0118, epsilon = 0.001);
}

#[test]
fn records_summary_and_paired_comparison() {
    let qs = [
        q("abstract_algebra", 0, Letter::A),
        q("abstract_algebra", 1, Letter::B),
        q("world_religions", 0, Letter::C),
        q("virology", 5, Letter::D),
    ];
    // Baseline by log-probabilities: right, right, wrong, right.
    let base = vec![
        Record::from_logprobs(&qs[0], [-0.1, -2.0, -3.0, -4.0]).unwrap(),
        Record::from_logprobs(&qs[1], [-2.0, -0.1, -3.0, -4.0]).unwrap(),
        Record::from_logprobs(&qs[2], [-0.1, -2.0, -3.0, -4.0]).unwrap(),
        Record::from_logprobs(&qs[3], [-5.0, -2.0, -3.0, -0.4]).unwrap(),
    ];
    // Candidate by generation: wrong, unparsed, right, right.
    let cand = vec![
        Record::from_generated(&qs[0], " B.").unwrap(),
        Record::from_generated(&qs[1], "ABC").unwrap(),
        Record::from_generated(&qs[2], "The answer is C").unwrap(),
        Record::from_generated(&qs[3], "D").unwrap(),
    ];
    assert_eq!(
        base.iter().map(|r| r.correct).collect::<Vec<_>>(),
        [true, true, false, true]
    );
    assert_eq!(
        cand.iter().map(|r| r.correct).collect::<Vec<_>>(),
        [false, false, true, true]
    );
    assert!(cand[1].unparsed() && cand[1].choice.is_none());
    assert_eq!(cand[0].choice, Some(Letter::B));

    let s = summarize(&cand);
    assert_eq!(s.overall, Accuracy::new(2, 4));
    assert_eq!(s.unparsed, 1);
    assert_eq!(s.by_category[&Category::Stem], Accuracy::new(0, 2));
    assert_eq!(s.by_category[&Category::Humanities], Accuracy::new(1, 1));
    assert_eq!(s.by_category[&Category::Other], Accuracy::new(1, 1));
    assert!(!s.by_category.contains_key(&Category::SocialSciences));
    assert_eq!(s.by_subject["virology"].correct, 1);
    assert_abs_diff_eq!(s.overall.accuracy, 0.5);

    // b = right→wrong = 2 (rows 0 and 1 of abstract_algebra), c = wrong→right = 1.
    let m = compare_runs(&base, &cand).unwrap();
    assert_eq!((m.pairs, m.b, m.c), (4, 2, 1));
    // n = 3, P(X ≤ 1) = 4/8, doubled: 1.
    assert_eq!(m.p_value, 1.0);

    let err = compare_runs(&base, &cand[..3]).unwrap_err();
    assert!(matches!(err, Error::Unpaired { .. }));
    assert!(err.to_string().contains("virology row 5"), "{err}");
    let mut dup = cand.clone();
    dup[3] = dup[2].clone();
    assert!(compare_runs(&base, &dup).is_err());

    // Unknown subjects are refused, not filed under a guessed category.
    assert!(matches!(
        Record::from_generated(&q("astrology", 0, Letter::A), "A"),
        Err(Error::UnknownSubject { .. })
    ));
}

#[test]
fn records_serialize_with_their_response() {
    let r = Record::from_generated(&q("anatomy", 12, Letter::C), " C.").unwrap();
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(v["subject"], "anatomy");
    assert_eq!(v["row"], 12);
    assert_eq!(v["category"], "other");
    assert_eq!(v["answer"], "C");
    assert_eq!(v["choice"], "C");
    assert_eq!(v["correct"], true);
    assert_eq!(v["response"]["mode"], "generate");
    assert_eq!(v["response"]["text"], " C.");
    let back: Record = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);

    let r = Record::from_logprobs(&q("anatomy", 1, Letter::A), [-0.25, -1.5, -2.0, -3.0]).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["response"]["mode"], "logprob");
    assert_eq!(v["response"]["logprobs"][1], -1.5);
    let s = serde_json::to_value(summarize(&[r])).unwrap();
    assert_eq!(s["by_category"]["other"]["correct"], 1);
    assert_eq!(s["overall"]["total"], 1);
}

#[test]
fn argmax_rule_agrees_with_the_reference_multiple_choice_scores() {
    // Four hand-made questions scored by llama.cpp and by an exact-math forward pass of
    // SmolLM2-135M; the reference records each pick and llama.cpp's running accuracy.
    let mc = common::shared_dir()
        .join("reference")
        .join("smollm2-135m")
        .join("mc");
    let scores: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(mc.join("mini_mc_scores.json"))
            .expect("reference/smollm2-135m/mc/mini_mc_scores.json is missing"),
    )
    .unwrap();
    let stdout = std::fs::read_to_string(mc.join("mini_mc.noamx.stdout"))
        .expect("reference/smollm2-135m/mc/mini_mc.noamx.stdout is missing");
    // llama.cpp prints "task<TAB>acc_norm" and then "<n><TAB><running accuracy in %>".
    let running: Vec<f64> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("task\tacc_norm"))
        .skip(1)
        .filter_map(|l| l.split('\t').nth(1)?.trim().parse().ok())
        .collect();
    let items = scores.as_array().unwrap();
    assert_eq!(running.len(), items.len());
    let mut correct = 0;
    for (i, item) in items.iter().enumerate() {
        let lp = |key: &str| -> [f32; 4] {
            let v: Vec<f32> = item[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            v.try_into().unwrap()
        };
        for (key, pick) in [
            ("numpy_exact_mean_logprob", "numpy_exact_pick"),
            ("numpy_emul_mean_logprob", "numpy_emul_pick"),
        ] {
            let chosen = choose_by_logprob(&lp(key)).unwrap();
            assert_eq!(
                chosen.index() as u64,
                item[pick].as_u64().unwrap(),
                "item {i} {key}"
            );
        }
        let chosen = choose_by_logprob(&lp("numpy_exact_mean_logprob")).unwrap();
        correct += u64::from(chosen.index() as u64 == item["correct"].as_u64().unwrap());
        let acc = Accuracy::new(correct, i as u64 + 1);
        assert_abs_diff_eq!(100.0 * acc.accuracy, running[i], epsilon = 1e-6);
    }
}
