//! MMLU through an OpenAI-compatible server (`mmlu run --sut http://HOST:PORT`,
//! `docs/HTTP.md`): every question is one `/v1/completions` request (or, with `--api
//! native`, one request to llama.cpp's `/completion`, whose `n_probs` alternatives carry
//! token ids) whose prompt is the question's token ids (the same tokens the in-process SUT
//! runs), greedy.
//!
//! Logprob mode asks for one token with the 20 most likely alternatives and, through our
//! extension `logprob_token_ids` (which other servers ignore), for the four answer letters'
//! log-probabilities wherever they rank; `pocketperf serve --http` answers the latter, and
//! the letters are read from there, else from the 20 alternatives (a letter outside them
//! counts as −∞ and is recorded). It is used when the server returns log-probabilities holding all four letters
//! for the first question ([`probe_mode`]); otherwise the run falls back to generate mode
//! (at most [`GENERATE_MAX_TOKENS`] tokens, end of generation honoured), and the result says
//! which mode was used and why.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use indicatif::ProgressBar;
use pocketperf_runtime::session::Engine;
use pocketperf_scenarios::{Query, Responder, SystemUnderTest};
use serde_json::{Value, json};

use super::GENERATE_MAX_TOKENS;
use super::prompts::Item;
use super::sut::{QuestionCost, answer_in_sample_order, record_answers};
use crate::cmd::mmlu::ScoreMode;
use crate::http::client::{ApiKind, HttpClient, ServerModel};

/// Alternatives asked for per position in logprob mode.
pub const TOP_K: usize = 20;

/// The server as MMLU's system under test.
pub(crate) struct MmluHttpSut<'e, 'i> {
    pub(crate) client: HttpClient,
    /// `Completions` (`/v1/completions`) or `Native` (llama.cpp's `/completion`).
    pub(crate) api: ApiKind,
    pub(crate) model: ServerModel,
    pub(crate) engine: &'e Engine,
    pub(crate) items: &'i [Item],
    pub(crate) mode: ScoreMode,
    /// The answer letters' pieces as the server names tokens (`" A"` or `"A"`).
    pub(crate) letter_pieces: [String; 4],
    pub(crate) letter_ids: [u32; 4],
    pub(crate) costs: Vec<Option<QuestionCost>>,
    pub(crate) errors: Vec<String>,
    /// Questions whose top alternatives lacked a letter (scored −∞ for it).
    pub(crate) letters_missing: Vec<String>,
    pub(crate) progress: ProgressBar,
}

/// Connects to `url` and reads the model it serves (fails fast when nothing listens).
pub fn connect(url: &str) -> Result<(HttpClient, ServerModel)> {
    let client = HttpClient::new(url, 1, Duration::from_secs(300), Duration::from_secs(60))
        .map_err(|e| anyhow!(e))?;
    let model = client
        .model()
        .with_context(|| format!("--sut {url}: the server does not answer"))?;
    Ok((client, model))
}

fn request(api: ApiKind, model: &str, item: &Item, mode: ScoreMode, letters: [u32; 4]) -> Value {
    if api == ApiKind::Native {
        // llama.cpp's names; `n_probs` alternatives come with their token ids.
        return match mode {
            ScoreMode::Logprob => json!({
                "prompt": item.tokens, "n_predict": 1, "temperature": 0, "n_probs": TOP_K,
                "ignore_eos": true,
            }),
            ScoreMode::Generate => json!({
                "prompt": item.tokens, "n_predict": GENERATE_MAX_TOKENS, "temperature": 0,
            }),
        };
    }
    match mode {
        // End of generation may well be the most likely next token; the letters'
        // log-probabilities at this position are what is asked, so it must not end the reply
        // before the position is reported.
        ScoreMode::Logprob => json!({
            "model": model, "prompt": item.tokens, "max_tokens": 1, "temperature": 0,
            "logprobs": TOP_K, "ignore_eos": true, "logprob_token_ids": letters,
        }),
        ScoreMode::Generate => json!({
            "model": model, "prompt": item.tokens, "max_tokens": GENERATE_MAX_TOKENS,
            "temperature": 0,
        }),
    }
}

/// The four letters' log-probabilities from a completions response: from
/// `requested_logprobs` (by id) when the server answers our extension, else from the top
/// alternatives (by piece; −∞ for a letter not among them); from a native `/completion`
/// response, from its first position's `n_probs` alternatives (by id); and how many were
/// missing. `None` when it has none of these.
pub fn letters_from(
    resp: &Value,
    pieces: &[String; 4],
    ids: [u32; 4],
) -> Option<([f32; 4], usize)> {
    if let Some(top) = resp
        .pointer("/completion_probabilities/0/top_logprobs")
        .and_then(Value::as_array)
    {
        let mut missing = 0;
        let lp = std::array::from_fn(|i| {
            let hit = top
                .iter()
                .find(|t| t.get("id").and_then(Value::as_u64) == Some(u64::from(ids[i])));
            match hit.and_then(|t| t.get("logprob")).and_then(Value::as_f64) {
                Some(x) => x as f32,
                None => {
                    missing += 1;
                    f32::NEG_INFINITY
                }
            }
        });
        return Some((lp, missing));
    }
    if let Some(named) = resp
        .pointer("/choices/0/logprobs/requested_logprobs/0")
        .and_then(Value::as_object)
    {
        let lp: Option<Vec<f32>> = ids
            .iter()
            .map(|id| {
                named
                    .get(&id.to_string())
                    .and_then(Value::as_f64)
                    .map(|x| x as f32)
            })
            .collect();
        if let Some(lp) = lp {
            return Some(([lp[0], lp[1], lp[2], lp[3]], 0));
        }
    }
    let top = resp
        .pointer("/choices/0/logprobs/top_logprobs/0")?
        .as_object()?;
    let mut missing = 0;
    let lp = std::array::from_fn(|i| match top.get(&pieces[i]).and_then(Value::as_f64) {
        Some(x) => x as f32,
        None => {
            missing += 1;
            f32::NEG_INFINITY
        }
    });
    Some((lp, missing))
}

/// Logprob mode when the server returns the four letters among the first question's
/// alternatives, else generate mode; with the reason.
pub fn probe_mode(
    client: &HttpClient,
    api: ApiKind,
    model: &str,
    first: &Item,
    pieces: &[String; 4],
    ids: [u32; 4],
) -> Result<(ScoreMode, String)> {
    let resp = client
        .complete(api, &request(api, model, first, ScoreMode::Logprob, ids))
        .context("probing the server's log-probabilities")?;
    Ok(match letters_from(&resp, pieces, ids) {
        Some((_, 0)) => (
            ScoreMode::Logprob,
            "the server returns the four letters' log-probabilities".to_string(),
        ),
        Some((_, n)) => (
            ScoreMode::Generate,
            format!("{n} of the four letters missing from the server's top-{TOP_K} alternatives"),
        ),
        None => (
            ScoreMode::Generate,
            "the server returns no log-probabilities".to_string(),
        ),
    })
}

impl MmluHttpSut<'_, '_> {
    fn answer(&mut self, item: &Item) -> Result<(Vec<u8>, QuestionCost)> {
        let t0 = Instant::now();
        let resp = self.client.complete(
            self.api,
            &request(self.api, &self.model.id, item, self.mode, self.letter_ids),
        )?;
        let mut cost = QuestionCost {
            prompt_tokens: item.tokens.len(),
            ..QuestionCost::default()
        };
        let bytes = match self.mode {
            ScoreMode::Logprob => {
                let (lp, missing) = letters_from(&resp, &self.letter_pieces, self.letter_ids)
                    .ok_or_else(|| anyhow!("the response has no log-probabilities"))?;
                if missing > 0 {
                    self.letters_missing.push(format!(
                        "{} row {}: {missing} letters outside the top {TOP_K}",
                        item.question.subject, item.question.row
                    ));
                }
                lp.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
            ScoreMode::Generate => {
                let text = resp
                    .pointer("/choices/0/text")
                    .or_else(|| resp.get("content"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("the response has no choices[0].text or content"))?;
                // Token ids of the text in the local tokenizer (the accuracy log's format).
                let ids = self.engine.tokenizer.encode(text, false)?;
                cost.generated_tokens = resp
                    .pointer("/usage/completion_tokens")
                    .or_else(|| resp.get("tokens_predicted"))
                    .and_then(Value::as_u64)
                    .map_or(ids.len(), |n| n as usize);
                ids.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        cost.ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok((bytes, cost))
    }
}

impl SystemUnderTest for MmluHttpSut<'_, '_> {
    fn name(&self) -> &str {
        "OpenAI-compatible server over HTTP (MMLU)"
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        let (items, progress) = (self.items, self.progress.clone());
        let done = answer_in_sample_order(items, queries, responder, &progress, |item| {
            self.answer(item)
        });
        record_answers(done, &mut self.costs, &mut self.errors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_are_read_from_the_first_positions_alternatives() {
        let pieces = [" A", " B", " C", " D"].map(String::from);
        let ids = [10, 11, 12, 13];
        let resp = json!({"choices": [{"logprobs": {"top_logprobs": [
            {" A": -1.5, " B": -0.5, " C": -2.0, " D": -3.25, "x": -0.1}
        ]}}]});
        assert_eq!(
            letters_from(&resp, &pieces, ids),
            Some(([-1.5, -0.5, -2.0, -3.25], 0))
        );
        let resp = json!({"choices": [{"logprobs": {"top_logprobs": [{" A": -1.0}]}}]});
        let (lp, missing) = letters_from(&resp, &pieces, ids).unwrap();
        assert_eq!(missing, 3);
        assert_eq!(lp[1], f32::NEG_INFINITY);
        let text_only = json!({"choices": [{"text": "A"}]});
        assert_eq!(letters_from(&text_only, &pieces, ids), None);
        // The named ids win over the alternatives when the server answers them all.
        let resp = json!({"choices": [{"logprobs": {"top_logprobs": [{" A": -1.0}],
            "requested_logprobs": [{"10": -1.0, "11": -9.5, "12": -20.0, "13": -7.25}]}}]});
        assert_eq!(
            letters_from(&resp, &pieces, ids),
            Some(([-1.0, -9.5, -20.0, -7.25], 0))
        );
    }
}
