//! `pocketperf mmlu compare`: two runs paired by question, exact McNemar.

#[allow(unused_imports)]
use super::*;
use crate::cmd::mmlu::CompareArgs;
use crate::meta;
use anyhow::{Context, Result, anyhow, bail};
use pocketperf_datasets::mmlu::{self as ds_mmlu, Letter};
use pocketperf_datasets::score::{self, Record, Response};
use pocketperf_reports::schema::{self, QuestionRecord, ResultFile};
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// mmlu compare
// ---------------------------------------------------------------------------------------------

pub(crate) fn load_run(p: &Path) -> Result<ResultFile> {
    let dir = if p.is_dir() {
        p.to_path_buf()
    } else if p.file_name().is_some_and(|n| n == schema::RESULT_FILE) {
        p.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        bail!(
            "{}: not a result directory or a {}",
            p.display(),
            schema::RESULT_FILE
        );
    };
    Ok(schema::load_result(&dir)?)
}

/// The scored questions of a result file, as records.
pub fn records_of(r: &ResultFile, what: &Path) -> Result<(schema::Accuracy, Vec<Record>)> {
    let acc = r
        .accuracy
        .clone()
        .ok_or_else(|| anyhow!("{}: the run has no accuracy section", what.display()))?;
    if acc.per_question.is_empty() {
        bail!(
            "{}: the accuracy section lists no questions",
            what.display()
        );
    }
    let letter = |c: char, field: &str, q: &QuestionRecord| -> Result<Letter> {
        Letter::from_char(c).ok_or_else(|| {
            anyhow!(
                "{}: {} row {}: {field} {c:?} is not A-D",
                what.display(),
                q.subject,
                q.row
            )
        })
    };
    let mut out = Vec::with_capacity(acc.per_question.len());
    for q in &acc.per_question {
        let response = match (&q.logprobs, &q.generated) {
            (Some(lp), _) => Response::Logprob {
                logprobs: lp.map(|x| x as f32),
            },
            (None, Some(t)) => Response::Generate { text: t.clone() },
            (None, None) => Response::Generate {
                text: String::new(),
            },
        };
        out.push(Record {
            subject: q.subject.clone(),
            row: q.row,
            category: ds_mmlu::category_of(&q.subject)
                .with_context(|| format!("{}", what.display()))?,
            answer: letter(q.answer, "answer", q)?,
            choice: q.choice.map(|c| letter(c, "choice", q)).transpose()?,
            response,
            correct: q.correct,
        });
    }
    Ok((acc, out))
}

pub(crate) fn compare(a: &CompareArgs) -> Result<i32> {
    let ra = load_run(&a.run_a)?;
    let rb = load_run(&a.run_b)?;
    let (acc_a, rec_a) = records_of(&ra, &a.run_a)?;
    let (acc_b, rec_b) = records_of(&rb, &a.run_b)?;
    let m = score::compare_runs(&rec_a, &rec_b)
        .with_context(|| format!("{} vs {}", a.run_a.display(), a.run_b.display()))?;
    let sa = score::summarize(&rec_a).overall;
    let sb = score::summarize(&rec_b).overall;
    let label = |acc: &schema::Accuracy| format!("{} {} {}-shot", acc.dataset, acc.mode, acc.shots);
    if a.json {
        let doc = serde_json::json!({
            "schema_version": 1, "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION,
            "git_commit": meta::GIT_COMMIT, "timestamp_utc": meta::now_utc(),
            "baseline": { "path": a.run_a.display().to_string(), "run": label(&acc_a),
                "git_commit": ra.meta.git_commit, "model_sha256": ra.meta.model.sha256,
                "accuracy": sa },
            "candidate": { "path": a.run_b.display().to_string(), "run": label(&acc_b),
                "git_commit": rb.meta.git_commit, "model_sha256": rb.meta.model.sha256,
                "accuracy": sb },
            "mcnemar": m,
            "difference": sb.accuracy - sa.accuracy,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("baseline  {}: {}", label(&acc_a), pct(&sa));
        println!("candidate {}: {}", label(&acc_b), pct(&sb));
        println!(
            "paired over {} questions: {} right only in the baseline (b), {} right only in the \
             candidate (c); difference {:+.1} points; exact McNemar p = {:.4}",
            m.pairs,
            m.b,
            m.c,
            100.0 * (sb.accuracy - sa.accuracy),
            m.p_value
        );
    }
    Ok(0)
}
