//! MMLU prompts: the original few-shot text format, its 0-shot form, the chat-message form
//! for instruct models, and fitting a prompt into a context by dropping whole shots.
//!
//! The text format is that of `format_example` / `gen_prompt` in `evaluate.py` of
//! `hendrycks/test` (the original MMLU evaluation), character for character:
//!
//! ```text
//! The following are multiple choice questions (with answers) about  {subject words}.\n\n
//! {question}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer: {X}\n\n      (once per shot)
//! {question}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer:
//! ```
//!
//! The subject is written with each `_`-separated word preceded by one space, so the header
//! has two spaces after "about" (the original's `format_subject` quirk, kept so that scores
//! compare with published numbers). The prompt ends with `Answer:` and no space: the answer
//! is the next token, `" A"` … `" D"`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mmlu::{Letter, Question};

/// The subject as the original writes it: `abstract_algebra` → `" abstract algebra"` (each
/// word preceded by a space).
pub fn format_subject(subject: &str) -> String {
    subject.split('_').fold(String::new(), |mut s, w| {
        s.push(' ');
        s.push_str(w);
        s
    })
}

/// The first line of every MMLU prompt, with its blank line.
pub fn header(subject: &str) -> String {
    format!(
        "The following are multiple choice questions (with answers) about {}.\n\n",
        format_subject(subject)
    )
}

/// One question: `{question}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer:`, followed by
/// ` {X}\n\n` when `with_answer`.
pub fn format_question(q: &Question, with_answer: bool) -> String {
    let mut s = String::with_capacity(
        q.question.len() + q.choices.iter().map(String::len).sum::<usize>() + 32,
    );
    s.push_str(&q.question);
    for (letter, choice) in Letter::ALL.iter().zip(&q.choices) {
        s.push('\n');
        s.push(letter.as_char());
        s.push_str(". ");
        s.push_str(choice);
    }
    s.push_str("\nAnswer:");
    if with_answer {
        s.push(' ');
        s.push(q.answer.as_char());
        s.push_str("\n\n");
    }
    s
}

/// The few-shot prefix: the header of `subject` and every shot with its answer. Identical for
/// all questions of a subject, so a runtime can prefill it once and reuse its KV.
pub fn few_shot_prefix(subject: &str, shots: &[Question]) -> String {
    let mut s = header(subject);
    for shot in shots {
        s.push_str(&format_question(shot, true));
    }
    s
}

/// A text prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// The full prompt.
    pub text: String,
    /// Shots included (the last `shots_used` of those offered).
    pub shots_used: usize,
    /// Length in bytes of the few-shot prefix (header and shots): `text[..prefix_len_bytes]`
    /// is [`few_shot_prefix`] of the shots used, and the rest is the test question.
    pub prefix_len_bytes: usize,
}

impl Prompt {
    /// The few-shot prefix (everything before the test question).
    pub fn prefix(&self) -> &str {
        &self.text[..self.prefix_len_bytes]
    }
}

/// The k-shot prompt for `q` from `shots` (the subject's dev rows, in file order), with as
/// many shots as `fits` accepts: it is asked about the prompt with all shots first, then
/// with whole shots dropped from the front (the earliest dev rows go first) until it returns
/// true. Errors when even the 0-shot prompt does not fit.
pub fn build_prompt(
    q: &Question,
    shots: &[Question],
    fits: impl Fn(&str) -> bool,
) -> Result<Prompt> {
    let tail = format_question(q, false);
    for k in (0..=shots.len()).rev() {
        let prefix = few_shot_prefix(&q.subject, &shots[shots.len() - k..]);
        let prefix_len_bytes = prefix.len();
        let mut text = prefix;
        text.push_str(&tail);
        if fits(&text) {
            return Ok(Prompt {
                text,
                shots_used: k,
                prefix_len_bytes,
            });
        }
    }
    Err(Error::PromptTooLong {
        subject: q.subject.clone(),
        row: q.row,
        bytes: header(&q.subject).len() + tail.len(),
    })
}

/// The 0-shot prompt: the header and the test question.
pub fn zero_shot(q: &Question) -> Prompt {
    let prefix = header(&q.subject);
    let prefix_len_bytes = prefix.len();
    Prompt {
        text: prefix + &format_question(q, false),
        shots_used: 0,
        prefix_len_bytes,
    }
}

/// Speaker of a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message; the harness renders a list of them with the model's chat template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// A chat prompt for instruct models.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatPrompt {
    /// The messages, ending with the user message that asks the test question.
    pub messages: Vec<ChatMessage>,
    /// Shots included (the last `shots_used` of those offered).
    pub shots_used: usize,
    /// Messages before the test question (`2 · shots_used`): the shared prefix.
    pub prefix_messages: usize,
}

/// The chat form of the k-shot prompt: each shot is a user turn (the question ending
/// `Answer:`, the header prepended to the first turn) and an assistant turn holding the answer
/// letter alone; the test question is the last user turn. With no shots, a single user turn
/// holds the header and the question, exactly the 0-shot text prompt. Shots are dropped from
/// the front, as in [`build_prompt`], until `fits` accepts the messages.
pub fn build_chat(
    q: &Question,
    shots: &[Question],
    fits: impl Fn(&[ChatMessage]) -> bool,
) -> Result<ChatPrompt> {
    for k in (0..=shots.len()).rev() {
        let used = &shots[shots.len() - k..];
        let mut messages = Vec::with_capacity(2 * k + 1);
        let mut pending_header = Some(header(&q.subject));
        for shot in used.iter().map(Some).chain(std::iter::once(None)) {
            let mut content = pending_header.take().unwrap_or_default();
            content.push_str(&format_question(shot.unwrap_or(q), false));
            messages.push(ChatMessage {
                role: Role::User,
                content,
            });
            if let Some(shot) = shot {
                messages.push(ChatMessage {
                    role: Role::Assistant,
                    content: shot.answer.as_char().to_string(),
                });
            }
        }
        if fits(&messages) {
            return Ok(ChatPrompt {
                messages,
                shots_used: k,
                prefix_messages: 2 * k,
            });
        }
    }
    Err(Error::PromptTooLong {
        subject: q.subject.clone(),
        row: q.row,
        bytes: header(&q.subject).len() + format_question(q, false).len(),
    })
}
