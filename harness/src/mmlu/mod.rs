//! `pocketperf mmlu`: the MMLU-576 accuracy mode (specified in `docs/MMLU576.md`).
//!
//! - `mmlu subset [--verify]` recomputes the subset from a copy of MMLU and, with `--verify`,
//!   lists every difference from the committed manifest (exit 1 when there is one).
//! - `mmlu run` builds the prompts (5-shot original format, 0-shot, or chat), runs every
//!   selected question exactly once through the scenario engine's accuracy mode
//!   (`TestMode::AccuracyOnly`) with the in-process runtime as the system under test, scores
//!   the responses read back from the accuracy log, and writes `result.json` (reports schema),
//!   `mmlu.json` (every detail, with provenance) and the MLPerf logs, among them
//!   `mlperf_log_accuracy.json`.
//! - `mmlu compare A B` pairs two runs by question and applies the exact McNemar test.
//!
//! Prefix reuse: the SUT keeps the tokens its KV cache holds and, for the next prompt, rewinds
//! the cache to the longest common token prefix instead of starting over. Questions are issued
//! in manifest order (by subject), so the header and shots of a subject are prefilled once and
//! every further question of the subject prefills only its own text. The prompt is always
//! tokenized whole, so reuse changes which tokens are recomputed, never which tokens the model
//! sees; `--prefix-reuse off` recomputes every prompt from an empty cache.

//!
//! Files: [`prompts`] (questions to token ids), [`sut`] (the accuracy-mode SUT with prefix
//! reuse, response decoding), [`http`] (the same questions through an OpenAI-compatible
//! server, `--sut http://…`), [`run`] (`mmlu run` and its outputs), [`compare`] (`mmlu
//! compare`); the flags are in [`crate::cmd::mmlu`].

pub mod compare;
pub mod http;
pub mod prompts;
pub mod run;
pub mod sut;

pub use compare::*;
pub use prompts::*;
pub use run::*;
pub use sut::*;

use crate::cmd::mmlu::{MmluCmd, SubsetArgs};
use crate::meta;
use anyhow::Result;
use pocketperf_datasets::mmlu::{self as ds_mmlu};
use pocketperf_datasets::subset;

/// Schema version of `mmlu.json`.
pub const MMLU_JSON_SCHEMA: u32 = 1;
/// File name of the detailed accuracy file inside a result directory.
pub const MMLU_JSON: &str = "mmlu.json";
/// Largest number of tokens generated per question in `generate` mode (MLPerf Mobile's rule).
pub const GENERATE_MAX_TOKENS: usize = 4;

pub fn mmlu_cmd(cmd: &MmluCmd) -> Result<i32> {
    match cmd {
        MmluCmd::Subset(a) => subset_cmd(a),
        MmluCmd::Run(a) => run(a),
        MmluCmd::Compare(a) => compare(a),
    }
}

// ---------------------------------------------------------------------------------------------
// mmlu subset
// ---------------------------------------------------------------------------------------------

pub(crate) fn subset_cmd(a: &SubsetArgs) -> Result<i32> {
    let dir = ds_mmlu::resolve_mmlu_dir(a.mmlu_dir.as_deref())?;
    if !a.verify {
        let entries = subset::compute_subset(&dir)?;
        print!("{}", subset::manifest_csv(&entries));
        return Ok(0);
    }
    let report = subset::verify(&dir)?;
    if a.json {
        let header = serde_json::json!({
            "schema_version": 1, "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION,
            "git_commit": meta::GIT_COMMIT, "device": meta::local_host(),
            "timestamp_utc": meta::now_utc(),
            "settings": { "mmlu_dir": dir.display().to_string() },
        });
        let doc = serde_json::json!({
            "header": header,
            "match": report.is_match(),
            "report": report,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if report.is_match() {
        println!(
            "{}: matches the MMLU-576 manifest ({} entries; {} test rows in {} subjects)",
            dir.display(),
            report.manifest_entries,
            report.test_rows,
            report.subjects
        );
    } else {
        println!(
            "{}: {} difference(s) from the MMLU-576 manifest ({} test rows in {} subjects):",
            dir.display(),
            report.differences.len(),
            report.test_rows,
            report.subjects
        );
        for d in &report.differences {
            println!("  {d}");
        }
    }
    Ok(if report.is_match() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocketperf_datasets::mmlu::{Category, Letter, Question};
    use pocketperf_runtime::session::log_prob;

    fn item(subject: &str, row: u64, shots_used: usize, tokens: &[u32]) -> Item {
        Item {
            question: Question {
                subject: subject.into(),
                row,
                question: String::new(),
                choices: Default::default(),
                answer: Letter::A,
            },
            category: Category::Stem,
            tokens: tokens.to_vec(),
            shots_used,
        }
    }

    #[test]
    fn letter_logprobs_equal_the_runtime_log_softmax() {
        let mut x = 0x9E37_79B9u32;
        let logits: Vec<f32> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect();
        let ids = [3u32, 4999, 17, 2500];
        let got = letter_logprobs(&logits, ids);
        for (g, id) in got.iter().zip(ids) {
            assert_eq!(*g, log_prob(&logits, id) as f32);
        }
        // Outside the vocabulary: impossible, not a panic.
        assert_eq!(
            letter_logprobs(&logits, [0, 1, 2, 9999])[3],
            f32::NEG_INFINITY
        );
    }

    #[test]
    fn reuse_plan_keeps_the_common_prefix_and_one_token_to_run() {
        let items = [
            item("a", 0, 5, &[1, 2, 3, 4, 5]),
            item("a", 1, 5, &[1, 2, 3, 9]),
            item("a", 2, 5, &[1, 2, 3, 9]),
            item("b", 0, 5, &[1, 7, 8]),
            item("b", 1, 5, &[6]),
        ];
        // 0 for the first; 3 shared; identical prompt keeps all but its last token; 1; 0.
        assert_eq!(reuse_plan(&items), [0, 3, 3, 1, 0]);
    }

    #[test]
    fn issue_order_groups_by_subject_then_shot_count() {
        let mut items = vec![
            item("b", 0, 5, &[1]),
            item("a", 3, 4, &[1]),
            item("a", 1, 5, &[1]),
            item("a", 0, 3, &[1]),
            item("a", 2, 5, &[1]),
        ];
        issue_order(&mut items);
        let order: Vec<(&str, u64)> = items
            .iter()
            .map(|i| (i.question.subject.as_str(), i.question.row))
            .collect();
        assert_eq!(order, [("a", 1), ("a", 2), ("a", 3), ("a", 0), ("b", 0)]);
    }

    #[test]
    fn accuracy_log_entries_decode_or_name_their_size() {
        let lp = [-0.5f32, -1.25, -3.0, f32::NEG_INFINITY];
        let bytes: Vec<u8> = lp.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_logprobs(&bytes).unwrap(), lp);
        assert!(decode_logprobs(&[]).unwrap().iter().all(|x| x.is_nan()));
        let err = decode_logprobs(&bytes[..12]).unwrap_err().to_string();
        assert!(err.contains("12 bytes"), "{err}");
        assert_eq!(decode_ids(&[1, 0, 0, 0, 0, 1, 0, 0]).unwrap(), [1u32, 256]);
        assert!(decode_ids(&[1, 2, 3]).is_err());
    }

    #[test]
    fn selection_filters_subjects_and_caps_each() {
        let qs: Vec<Question> = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 5), ("c", 6)]
            .iter()
            .map(|&(s, r)| item(s, r, 0, &[]).question)
            .collect();
        let picked = select_questions(qs.clone(), &["c".into(), "a".into()], Some(2)).unwrap();
        let rows: Vec<(&str, u64)> = picked.iter().map(|q| (q.subject.as_str(), q.row)).collect();
        assert_eq!(rows, [("a", 0), ("a", 1), ("c", 5), ("c", 6)]);
        let err = select_questions(qs, &["astrology".into()], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"astrology\" is not an MMLU subject"),
            "{err}"
        );
    }
}
