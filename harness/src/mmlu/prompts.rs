//! MMLU prompts as token ids: the questions selected, their prompts built to fit the
//! context, the answer-letter tokens, and the issue order that lets prefix reuse work.

#[allow(unused_imports)]
use super::*;
use crate::sut::prompts::{PromptText, encode_prompt};
use anyhow::{Context, Result, anyhow, bail};
use pocketperf_datasets::mmlu::{self as ds_mmlu, Category, Letter, Question};
use pocketperf_datasets::prompt::{self, ChatMessage as DsMessage, Role};
use pocketperf_runtime::session::Engine;
use pocketperf_runtime::tokenizer::ChatMessage;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------------------------

/// One question ready to run: its prompt as token ids.
#[derive(Debug, Clone)]
pub struct Item {
    pub question: Question,
    pub category: Category,
    pub tokens: Vec<u32>,
    /// Shots in the prompt (fewer than asked when the prompt had to fit the context).
    pub shots_used: usize,
}

/// Token ids of a plain-text prompt (BOS first when the model wants one). Question text is
/// never parsed for control tokens.
pub fn encode_text(engine: &Engine, text: &str) -> Result<Vec<u32>> {
    Ok(encode_prompt(
        &engine.tokenizer,
        PromptText::Raw {
            text,
            special: false,
        },
    )?)
}

/// Token ids of chat messages rendered with the model's template (its default system prompt
/// included), ending with the assistant header.
pub fn encode_chat(engine: &Engine, messages: &[DsMessage]) -> Result<Vec<u32>> {
    let msgs: Vec<ChatMessage> = messages
        .iter()
        .map(|m| ChatMessage {
            role: match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            }
            .to_string(),
            content: m.content.clone(),
        })
        .collect();
    Ok(encode_prompt(
        &engine.tokenizer,
        PromptText::Chat { messages: &msgs },
    )?)
}

/// The token of each answer letter: `" A"` … `" D"` after a text prompt (which ends with
/// `Answer:`), `"A"` … `"D"` after the assistant header of a chat prompt. Each must be a
/// single token of the vocabulary.
pub fn letter_tokens(engine: &Engine, chat: bool) -> Result<[u32; 4]> {
    let mut out = [0u32; 4];
    for (slot, l) in out.iter_mut().zip(Letter::ALL) {
        let piece = if chat {
            l.as_char().to_string()
        } else {
            format!(" {}", l.as_char())
        };
        let ids = engine.tokenizer.encode(&piece, false)?;
        match ids.as_slice() {
            [id] => *slot = *id,
            _ => bail!(
                "the tokenizer encodes the answer {piece:?} as {} tokens {ids:?}; logprob \
                 scoring needs one token per answer letter",
                ids.len()
            ),
        }
    }
    Ok(out)
}

/// Builds the prompt of every question: `shots` first dev rows of its subject, whole shots
/// dropped from the front until the prompt plus `reserve` tokens fits `ctx`.
pub fn prepare_items(
    engine: &Engine,
    questions: &[Question],
    dev: &BTreeMap<String, Vec<Question>>,
    shots: usize,
    chat: bool,
    ctx: usize,
    reserve: usize,
) -> Result<Vec<Item>> {
    let mut items = Vec::with_capacity(questions.len());
    for q in questions {
        let all_shots = dev
            .get(&q.subject)
            .ok_or_else(|| anyhow!("no dev split loaded for subject {}", q.subject))?;
        if all_shots.len() < shots {
            bail!(
                "subject {}: --shots {shots} but its dev split has {} rows",
                q.subject,
                all_shots.len()
            );
        }
        let offered = &all_shots[..shots];
        // `fits` keeps the tokens of the last prompt it saw, so each accepted prompt is
        // tokenized once; a tokenizer error is kept and reported after the search.
        let last: RefCell<Option<Result<Vec<u32>>>> = RefCell::new(None);
        let fits = |ids: Result<Vec<u32>>| -> bool {
            let ok = match &ids {
                Ok(v) => v.len() + reserve <= ctx,
                Err(_) => true,
            };
            *last.borrow_mut() = Some(ids);
            ok
        };
        let shots_used = if chat {
            prompt::build_chat(q, offered, |m| fits(encode_chat(engine, m)))?.shots_used
        } else {
            prompt::build_prompt(q, offered, |t| fits(encode_text(engine, t)))?.shots_used
        };
        let tokens = last
            .into_inner()
            .ok_or_else(|| anyhow!("{} row {}: no prompt was built", q.subject, q.row))?
            .with_context(|| format!("tokenizing the prompt of {} row {}", q.subject, q.row))?;
        items.push(Item {
            category: ds_mmlu::category_of(&q.subject)?,
            question: q.clone(),
            tokens,
            shots_used,
        });
    }
    Ok(items)
}

/// The order questions are issued in (the QSL order): by subject, and within a subject the
/// prompts with the most shots first, then by row. Prompts that share a subject and a shot
/// count share their whole few-shot prefix, so each such group prefills it once; a prompt that
/// had to drop shots no longer interrupts the 5-shot prompts around it.
pub fn issue_order(items: &mut [Item]) {
    items.sort_by(|a, b| {
        a.question
            .subject
            .cmp(&b.question.subject)
            .then(b.shots_used.cmp(&a.shots_used))
            .then(a.question.row.cmp(&b.question.row))
    });
}

/// The questions a run asks: the manifest's, filtered by subject and capped per subject.
pub fn select_questions(
    all: Vec<Question>,
    subjects: &[String],
    limit: Option<usize>,
) -> Result<Vec<Question>> {
    let known: BTreeSet<&str> = all.iter().map(|q| q.subject.as_str()).collect();
    let wanted: BTreeSet<&str> = subjects.iter().map(|s| s.trim()).collect();
    if let Some(bad) = wanted.iter().find(|s| !known.contains(**s)) {
        bail!(
            "--subjects: {bad:?} is not an MMLU subject (known: {})",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        );
    }
    let mut per_subject: BTreeMap<String, usize> = BTreeMap::new();
    let out: Vec<Question> = all
        .into_iter()
        .filter(|q| wanted.is_empty() || wanted.contains(q.subject.as_str()))
        .filter(|q| {
            let n = per_subject.entry(q.subject.clone()).or_default();
            *n += 1;
            limit.is_none_or(|l| *n <= l)
        })
        .collect();
    if out.is_empty() {
        bail!("no questions selected (check --subjects and --limit)");
    }
    Ok(out)
}
