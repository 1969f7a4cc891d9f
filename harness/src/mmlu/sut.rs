//! The MMLU system under test: the runtime in this process in the scenario engine's accuracy
//! mode, with KV prefix reuse between consecutive prompts, and the decoding of its responses
//! from `mlperf_log_accuracy.json`.

#[allow(unused_imports)]
use super::*;
use crate::cmd::mmlu::ScoreMode;
use crate::sut::prompts::reusable_prefix;
use anyhow::{Result, bail};
use indicatif::ProgressBar;
use pocketperf_datasets::score::{self, Response};
use pocketperf_runtime::session::{Engine, Session, argmax};
use pocketperf_scenarios::{QslError, Query, QuerySampleLibrary, Responder, SystemUnderTest};
use serde::Serialize;
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// The system under test and its sample library
// ---------------------------------------------------------------------------------------------

/// The prepared questions as the scenario engine's sample library. Prompts are tokenized
/// before the run (the context fit needs the tokenizer), so loading checks indices only.
pub(crate) struct MmluQsl {
    pub(crate) n: u64,
}

impl QuerySampleLibrary for MmluQsl {
    fn name(&self) -> &str {
        "mmlu-576"
    }
    fn total_sample_count(&self) -> u64 {
        self.n
    }
    fn performance_sample_count(&self) -> u64 {
        self.n
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        match indices.iter().find(|&&i| i >= self.n) {
            Some(i) => Err(format!("sample {i} is outside the {} questions", self.n).into()),
            None => Ok(()),
        }
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

/// What one question cost.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QuestionCost {
    /// Tokens of the full prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was reused from the previous question.
    pub reused_tokens: usize,
    /// Tokens generated (generate mode).
    pub generated_tokens: usize,
    /// Wall time of the question, milliseconds.
    pub ms: f64,
}

/// The in-process runtime answering MMLU questions. Output bytes per query (the accuracy
/// log's `data`): logprob mode, the four log-probabilities as little-endian f32; generate
/// mode, the generated token ids as little-endian u32.
pub(crate) struct MmluSut<'e, 'i> {
    pub(crate) session: Session<'e>,
    pub(crate) items: &'i [Item],
    pub(crate) mode: ScoreMode,
    pub(crate) letters: [u32; 4],
    pub(crate) reuse: bool,
    /// Tokens the KV cache holds, in order.
    pub(crate) cached: Vec<u32>,
    pub(crate) costs: Vec<Option<QuestionCost>>,
    pub(crate) errors: Vec<String>,
    pub(crate) progress: ProgressBar,
}

/// Log-probabilities of `ids` in one row of logits: the log-softmax in f64 (as
/// [`pocketperf_runtime::session::log_prob`] computes it, same summation order), with the
/// normalizer computed once for the four tokens; rounded to f32.
pub fn letter_logprobs(logits: &[f32], ids: [u32; 4]) -> [f32; 4] {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&l| (l as f64 - mx).exp())
        .sum::<f64>()
        .ln()
        + mx;
    ids.map(|id| {
        logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32)
    })
}

/// Prompt tokens the SUT can take from its cache for each question, in order, when each
/// prompt follows the previous one: their longest common prefix, leaving at least one token to
/// run. (In generate mode the cache also holds the previous answer's tokens, which can only
/// lengthen the common prefix if the next prompt repeats them; the SUT measures what it
/// actually reuses.)
pub fn reuse_plan(items: &[Item]) -> Vec<usize> {
    let mut prev: &[u32] = &[];
    items
        .iter()
        .map(|i| {
            let keep = reusable_prefix(prev, &i.tokens);
            prev = &i.tokens;
            keep
        })
        .collect()
}

impl MmluSut<'_, '_> {
    fn answer(&mut self, item: &Item) -> Result<(Vec<u8>, QuestionCost)> {
        let t0 = Instant::now();
        let engine = self.session.engine();
        let toks = &item.tokens;
        if toks.is_empty() {
            bail!("empty prompt");
        }
        // Keep at least one prompt token to run: its logits are the answer.
        let keep = if self.reuse {
            reusable_prefix(&self.cached, toks)
        } else {
            0
        };
        if keep == 0 {
            self.session.reset();
        } else {
            self.session.truncate(keep)?;
        }
        self.cached.truncate(keep);
        let mut cost = QuestionCost {
            prompt_tokens: toks.len(),
            reused_tokens: keep,
            ..QuestionCost::default()
        };
        // Should prefill fail midway, the cache no longer mirrors `cached`: start over.
        let logits = match self.session.prefill(&toks[keep..]) {
            Ok(l) => l,
            Err(e) => {
                self.cached.clear();
                return Err(e.into());
            }
        };
        self.cached.extend_from_slice(&toks[keep..]);
        let bytes = match self.mode {
            ScoreMode::Logprob => {
                let lp = letter_logprobs(logits, self.letters);
                lp.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
            ScoreMode::Generate => {
                let mut generated: Vec<u32> = Vec::with_capacity(GENERATE_MAX_TOKENS);
                let mut tok = argmax(logits);
                loop {
                    generated.push(tok);
                    if engine.tokenizer.is_eog(tok) || generated.len() >= GENERATE_MAX_TOKENS {
                        break;
                    }
                    // Stop once the choice can no longer change (docs/MMLU576.md).
                    if score::parse_generated_settled(&engine.tokenizer.decode(&generated))
                        .is_some()
                    {
                        break;
                    }
                    let next = match self.session.decode(tok) {
                        Ok(l) => argmax(l),
                        Err(e) => {
                            self.cached.clear();
                            return Err(e.into());
                        }
                    };
                    self.cached.push(tok);
                    tok = next;
                }
                cost.generated_tokens = generated.len();
                generated.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        cost.ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok((bytes, cost))
    }
}

impl SystemUnderTest for MmluSut<'_, '_> {
    fn name(&self) -> &str {
        "pocketperf-runtime (in-process, MMLU)"
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        let (items, progress) = (self.items, self.progress.clone());
        let done = answer_in_sample_order(items, queries, responder, &progress, |item| {
            self.answer(item)
        });
        record_answers(done, &mut self.costs, &mut self.errors);
    }
}

/// What became of one question: its sample index and its cost, or the error to report.
pub(crate) type Answered = (usize, std::result::Result<QuestionCost, String>);

/// Answers an MMLU batch through `answer` (the in-process or the HTTP SUT), in sample order:
/// the engine hands the batch over in LoadGen's shuffled order, an Offline SUT may answer in
/// any order, and sample order keeps a subject's questions adjacent so each reuses the cached
/// header and shots of the one before. A question that fails is completed anyway, with no
/// answer: it is scored as unanswered and the run goes on; the error is reported and fails
/// the command.
pub(crate) fn answer_in_sample_order(
    items: &[Item],
    queries: &[Query],
    responder: &mut Responder<'_>,
    progress: &ProgressBar,
    mut answer: impl FnMut(&Item) -> Result<(Vec<u8>, QuestionCost)>,
) -> Vec<Answered> {
    let mut order: Vec<&Query> = queries.iter().collect();
    order.sort_by_key(|q| q.sample_index);
    let mut done = Vec::with_capacity(order.len());
    for q in order {
        let i = q.sample_index as usize;
        let Some(item) = items.get(i) else {
            done.push((i, Err(format!("query {}: sample {i} does not exist", q.id))));
            responder.complete(q.id, 0, Some(&[]));
            continue;
        };
        match answer(item) {
            Ok((bytes, cost)) => {
                responder.complete(q.id, cost.generated_tokens as u64, Some(&bytes));
                done.push((i, Ok(cost)));
            }
            Err(e) => {
                done.push((
                    i,
                    Err(format!(
                        "{} row {} (sample {i}): {e:#}",
                        item.question.subject, item.question.row
                    )),
                ));
                responder.complete(q.id, 0, Some(&[]));
            }
        }
        progress.inc(1);
    }
    done
}

/// Stores each answered question's cost and each error of [`answer_in_sample_order`].
pub(crate) fn record_answers(
    done: Vec<Answered>,
    costs: &mut [Option<QuestionCost>],
    errors: &mut Vec<String>,
) {
    for (i, outcome) in done {
        match outcome {
            Ok(cost) => {
                if let Some(slot) = costs.get_mut(i) {
                    *slot = Some(cost);
                }
            }
            Err(e) => errors.push(e),
        }
    }
}

/// The four log-probabilities of a logprob-mode accuracy-log entry (16 bytes, little-endian
/// f32); an empty entry (a question the SUT failed on) reads as four NaNs: no answer.
pub fn decode_logprobs(data: &[u8]) -> Result<[f32; 4]> {
    match data.len() {
        0 => Ok([f32::NAN; 4]),
        16 => {
            let mut lp = [0f32; 4];
            for (x, c) in lp.iter_mut().zip(data.chunks_exact(4)) {
                *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            Ok(lp)
        }
        n => bail!("accuracy log entry of {n} bytes; logprob entries hold 16 (4 × f32)"),
    }
}

/// The token ids of a generate-mode accuracy-log entry (little-endian u32).
pub fn decode_ids(data: &[u8]) -> Result<Vec<u32>> {
    if !data.len().is_multiple_of(4) {
        bail!(
            "accuracy log entry of {} bytes; generate entries hold u32 token ids",
            data.len()
        );
    }
    Ok(data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Reads one accuracy-log entry back into a response (and, in generate mode, the token ids).
pub fn decode_response(
    mode: ScoreMode,
    data: &[u8],
    engine: &Engine,
) -> Result<(Response, Vec<u32>)> {
    match mode {
        ScoreMode::Logprob => Ok((
            Response::Logprob {
                logprobs: decode_logprobs(data)?,
            },
            Vec::new(),
        )),
        ScoreMode::Generate => {
            let ids = decode_ids(data)?;
            let visible: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&t| !engine.tokenizer.is_eog(t))
                .collect();
            let text = engine.tokenizer.decode(&visible);
            Ok((Response::Generate { text }, ids))
        }
    }
}
