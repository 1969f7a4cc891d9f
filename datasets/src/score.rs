//! MMLU scoring: choosing an answer from log-probabilities (`logprob` mode) or from generated
//! text (`generate` mode), per-question records, accuracy with Wilson 95% intervals per
//! subject and per category, and the exact McNemar test between two runs.
//!
//! Rules (specified in `docs/MMLU576.md`):
//! - `logprob`: the caller gives the next-token log-probabilities of `" A"`, `" B"`, `" C"`,
//!   `" D"` after the prompt; the choice is the argmax, ties to the earliest letter (the
//!   original `np.argmax`). NaN never wins; four NaNs give no choice.
//! - `generate`: the choice is the first upper-case `A`–`D` in the generated text whose
//!   neighbours (if any) are not word characters (Unicode letters, digits, `_`), i.e. the first
//!   match of the regex `\b[ABCD]\b`. No match: wrong, and counted as unparsed.
//! - Wilson score interval, closed form, z = 1.959964.
//! - McNemar exact: p = min(1, 2·P(X ≤ min(b, c))), X ~ Binomial(b + c, 1/2).
//!
//! Both come from `pocketperf-stats`, the one home of the project's statistics (the reports
//! and the gate use the same functions).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mmlu::{Category, Letter, Question, category_of};
pub use pocketperf_stats::{mcnemar_exact, wilson_interval};

/// The normal quantile for a two-sided 95% interval.
pub const WILSON_Z: f64 = 1.959964;

/// Argmax of the log-probabilities of A, B, C, D; ties go to the earliest letter, NaN never
/// wins; `None` only when all four are NaN.
pub fn choose_by_logprob(logprobs: &[f32; 4]) -> Option<Letter> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &lp) in logprobs.iter().enumerate() {
        if lp.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| lp > b) {
            best = Some((i, lp));
        }
    }
    best.and_then(|(i, _)| Letter::from_index(i))
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The first standalone answer letter in generated text: an upper-case `A`–`D` whose
/// previous and next characters (where present) are not letters, digits or `_`.
pub fn parse_generated(text: &str) -> Option<Letter> {
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(letter) = Letter::from_char(c) {
            let next = chars.peek().copied();
            if !prev.is_some_and(is_word_char) && !next.is_some_and(is_word_char) {
                return Some(letter);
            }
        }
        prev = Some(c);
    }
    None
}

/// The choice [`parse_generated`] makes on `text`, returned only once no continuation of
/// `text` can change it: the first standalone letter is followed by a character (so its
/// right neighbour is known) and every earlier candidate letter is already ruled out. A
/// generator may stop as soon as this returns `Some`; scoring the longer text gives the same
/// letter.
pub fn parse_generated_settled(text: &str) -> Option<Letter> {
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        if let Some(letter) = Letter::from_char(c)
            && !prev.is_some_and(is_word_char)
        {
            match next {
                // The last character: whether it stands alone depends on what comes next.
                None => return None,
                Some(n) if !is_word_char(n) => return Some(letter),
                Some(_) => {}
            }
        }
        prev = Some(c);
    }
    None
}

/// What the model produced for one question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Response {
    /// Next-token log-probabilities of `" A"`, `" B"`, `" C"`, `" D"`.
    Logprob { logprobs: [f32; 4] },
    /// The generated text (at most a few tokens).
    Generate { text: String },
}

/// The scored outcome of one question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub subject: String,
    /// 0-based row in the subject's test CSV.
    pub row: u64,
    pub category: Category,
    /// The correct answer.
    pub answer: Letter,
    /// The model's choice; `None` when no letter could be read from the response.
    pub choice: Option<Letter>,
    pub response: Response,
    pub correct: bool,
}

impl Record {
    /// Scores `q` from the log-probabilities of `" A"` … `" D"`.
    pub fn from_logprobs(q: &Question, logprobs: [f32; 4]) -> Result<Record> {
        Record::new(
            q,
            choose_by_logprob(&logprobs),
            Response::Logprob { logprobs },
        )
    }

    /// Scores `q` from generated text.
    pub fn from_generated(q: &Question, text: &str) -> Result<Record> {
        Record::new(
            q,
            parse_generated(text),
            Response::Generate {
                text: text.to_string(),
            },
        )
    }

    fn new(q: &Question, choice: Option<Letter>, response: Response) -> Result<Record> {
        Ok(Record {
            subject: q.subject.clone(),
            row: q.row,
            category: category_of(&q.subject)?,
            answer: q.answer,
            choice,
            response,
            correct: choice == Some(q.answer),
        })
    }

    /// True when no answer letter could be read from the response.
    pub fn unparsed(&self) -> bool {
        self.choice.is_none()
    }
}

/// Accuracy with its Wilson 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub correct: u64,
    pub total: u64,
    /// `correct / total`; 0 when `total` is 0.
    pub accuracy: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
}

impl Accuracy {
    /// The accuracy of `correct` out of `total` with its Wilson interval (z = 1.959964).
    pub fn new(correct: u64, total: u64) -> Accuracy {
        let (ci95_low, ci95_high) = wilson_interval(correct, total, WILSON_Z);
        Accuracy {
            correct,
            total,
            accuracy: if total == 0 {
                0.0
            } else {
                correct as f64 / total as f64
            },
            ci95_low,
            ci95_high,
        }
    }
}

/// Accuracy overall, per category and per subject.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub overall: Accuracy,
    /// Questions whose response held no readable answer letter (all counted wrong).
    pub unparsed: u64,
    pub by_category: BTreeMap<Category, Accuracy>,
    pub by_subject: BTreeMap<String, Accuracy>,
}

/// Aggregates records (each question counted once per record given).
pub fn summarize(records: &[Record]) -> Summary {
    let mut cat: BTreeMap<Category, (u64, u64)> = BTreeMap::new();
    let mut subj: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut all = (0u64, 0u64);
    let mut unparsed = 0;
    for r in records {
        let hit = u64::from(r.correct);
        for slot in [
            &mut all,
            cat.entry(r.category).or_default(),
            subj.entry(r.subject.clone()).or_default(),
        ] {
            slot.0 += hit;
            slot.1 += 1;
        }
        unparsed += u64::from(r.unparsed());
    }
    Summary {
        overall: Accuracy::new(all.0, all.1),
        unparsed,
        by_category: cat
            .into_iter()
            .map(|(k, (c, t))| (k, Accuracy::new(c, t)))
            .collect(),
        by_subject: subj
            .into_iter()
            .map(|(k, (c, t))| (k, Accuracy::new(c, t)))
            .collect(),
    }
}

/// A paired comparison of two runs over the same questions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Questions in both runs.
    pub pairs: u64,
    /// Right in the baseline, wrong in the candidate.
    pub b: u64,
    /// Wrong in the baseline, right in the candidate.
    pub c: u64,
    /// Exact two-sided p-value ([`mcnemar_exact`]).
    pub p_value: f64,
}

/// Pairs two runs by (subject, row) and applies the exact McNemar test. Both runs must hold
/// the same questions, each once.
pub fn compare_runs(baseline: &[Record], candidate: &[Record]) -> Result<McNemar> {
    let index = |run: &[Record], name: &str| -> Result<HashMap<(String, u64), bool>> {
        let mut m = HashMap::with_capacity(run.len());
        for r in run {
            if m.insert((r.subject.clone(), r.row), r.correct).is_some() {
                return Err(Error::Unpaired {
                    reason: format!("{name} holds {} row {} twice", r.subject, r.row),
                });
            }
        }
        Ok(m)
    };
    let base = index(baseline, "baseline")?;
    let cand = index(candidate, "candidate")?;
    let (mut b, mut c) = (0, 0);
    for ((subject, row), &ok_base) in &base {
        let Some(&ok_cand) = cand.get(&(subject.clone(), *row)) else {
            return Err(Error::Unpaired {
                reason: format!("{subject} row {row} is in the baseline but not the candidate"),
            });
        };
        match (ok_base, ok_cand) {
            (true, false) => b += 1,
            (false, true) => c += 1,
            _ => {}
        }
    }
    if cand.len() != base.len() {
        let extra = cand.keys().find(|k| !base.contains_key(*k));
        if let Some((subject, row)) = extra {
            return Err(Error::Unpaired {
                reason: format!("{subject} row {row} is in the candidate but not the baseline"),
            });
        }
    }
    Ok(McNemar {
        pairs: base.len() as u64,
        b,
        c,
        p_value: mcnemar_exact(b, c),
    })
}
