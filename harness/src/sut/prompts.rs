//! The prompt side of every system under test: the one route from text to tokens
//! ([`encode_prompt`]: raw text or chat messages in the model's template), and the sample
//! libraries the scenario engine draws from ([`PromptLibrary`], the performance prompt set
//! tokenized once up front, and its query-sample library [`PromptQsl`]).
//!
//! Every harness caller that turns text into prompt tokens (`generate`, `logits`, `bench`,
//! `run`, the dialogue scenario, MMLU, `serve`) goes through [`encode_prompt`] (or, for text
//! already rendered in the template, [`encode_rendered`]), so a template or BOS rule changes
//! in one place.

use anyhow::{Context, Result, bail};
use pocketperf_datasets::perf::PerfPrompt;
use pocketperf_runtime::session::{Engine, Session};
use pocketperf_runtime::tokenizer::{ChatMessage, Prompt, Tokenizer};
use pocketperf_scenarios::{QslError, Query, QuerySampleLibrary};

/// What a prompt is before it becomes tokens.
#[derive(Clone, Copy, Debug)]
pub enum PromptText<'a> {
    /// Raw text: the model's BOS first (when it adds one), then the text. `special` says
    /// whether control-token text inside it (`<|im_start|>`) is parsed as control tokens;
    /// dataset text (MMLU questions) is never parsed.
    Raw { text: &'a str, special: bool },
    /// Messages rendered in the model's chat template (with the template's default system
    /// prompt unless the messages bring their own), ending with the header of the reply.
    Chat { messages: &'a [ChatMessage] },
}

/// Chat messages rendered in the model's template, ending with the header of the reply.
pub fn render_chat(tok: &Tokenizer, messages: &[ChatMessage]) -> String {
    tok.render_prompt(&Prompt::messages(messages))
}

/// Token ids of text already rendered in the chat template: control tokens parsed; BOS first
/// (when the model adds one) if `open`, none for a continuation of what the cache holds (a new
/// turn appended to a cached conversation).
pub fn encode_rendered(
    tok: &Tokenizer,
    rendered: &str,
    open: bool,
) -> pocketperf_runtime::Result<Vec<u32>> {
    let p = Prompt::text(rendered).parse_special(true);
    tok.encode_prompt(&if open { p } else { p.continuation() })
}

/// Token ids of a prompt, through the runtime's one route ([`Tokenizer::encode_prompt`]).
pub fn encode_prompt(tok: &Tokenizer, p: PromptText<'_>) -> pocketperf_runtime::Result<Vec<u32>> {
    match p {
        PromptText::Raw { text, special } => {
            tok.encode_prompt(&Prompt::text(text).parse_special(special))
        }
        PromptText::Chat { messages } => tok.encode_prompt(&Prompt::messages(messages)),
    }
}

/// Builds the token sequence of a prompt, optionally wrapped in the chat template as one user
/// turn with the model's default system prompt (`generate --chat`, `run`); raw text has its
/// control tokens parsed, as `generate` always did.
pub fn prompt_tokens(engine: &Engine, text: &str, chat: bool) -> Result<Vec<u32>> {
    if chat {
        let messages = [ChatMessage {
            role: "user".into(),
            content: text.into(),
        }];
        Ok(encode_prompt(
            &engine.tokenizer,
            PromptText::Chat {
                messages: &messages,
            },
        )?)
    } else {
        Ok(encode_prompt(
            &engine.tokenizer,
            PromptText::Raw {
                text,
                special: true,
            },
        )?)
    }
}

/// The performance prompt set, tokenized once up front (ChatML, as a chat app would send).
pub struct PromptLibrary {
    prompts: Vec<PerfPrompt>,
    tokens: Vec<Vec<u32>>,
}

impl PromptLibrary {
    pub fn tokenize(engine: &Engine, prompts: Vec<PerfPrompt>) -> Result<Self> {
        let tokens = prompts
            .iter()
            .map(|p| {
                prompt_tokens(engine, &p.text, true)
                    .with_context(|| format!("tokenizing performance prompt {}", p.id))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PromptLibrary { prompts, tokens })
    }

    /// A library from prompts and their token ids (same order, same length).
    pub fn from_parts(prompts: Vec<PerfPrompt>, tokens: Vec<Vec<u32>>) -> Result<Self> {
        if prompts.len() != tokens.len() {
            bail!(
                "{} prompts but {} tokenized prompts",
                prompts.len(),
                tokens.len()
            );
        }
        Ok(PromptLibrary { prompts, tokens })
    }

    /// The prompts' token ids, in sample-index order.
    pub fn tokens(&self) -> &[Vec<u32>] {
        &self.tokens
    }

    /// The prompts, in sample-index order.
    pub fn prompts(&self) -> &[PerfPrompt] {
        &self.prompts
    }

    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    /// Longest prompt plus its forced output, in tokens.
    pub fn longest_sequence(&self) -> usize {
        self.tokens
            .iter()
            .zip(&self.prompts)
            .map(|(t, p)| t.len() + p.max_new_tokens as usize)
            .max()
            .unwrap_or(0)
    }

    /// The job for `query`, or why there is none.
    pub fn job(&self, query: Query) -> std::result::Result<Job<'_>, String> {
        let i = query.sample_index as usize;
        match (self.tokens.get(i), self.prompts.get(i)) {
            (Some(prompt), Some(p)) => Ok(Job {
                query,
                prompt,
                max_new_tokens: p.max_new_tokens as usize,
            }),
            _ => Err(format!(
                "sample {i} is outside the prompt set of {}",
                self.len()
            )),
        }
    }
}

/// The engine's view of the prompt library: samples are tokenized up front, so loading is
/// a bounds check.
pub struct PromptQsl {
    pub(crate) total: u64,
}

impl PromptQsl {
    pub fn new(library: &PromptLibrary) -> Self {
        PromptQsl {
            total: library.len() as u64,
        }
    }
}

impl QuerySampleLibrary for PromptQsl {
    fn name(&self) -> &str {
        "pocketperf-perf-prompts"
    }
    fn total_sample_count(&self) -> u64 {
        self.total
    }
    fn performance_sample_count(&self) -> u64 {
        self.total
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        match indices.iter().find(|&&i| i >= self.total) {
            Some(i) => {
                Err(format!("sample {i} is outside the prompt set of {}", self.total).into())
            }
            None => Ok(()),
        }
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

/// One query to decode: its prompt tokens and forced output length.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    pub query: Query,
    pub prompt: &'a [u32],
    pub max_new_tokens: usize,
}

/// Length of the common prefix of two token sequences.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How much of `prompt` a cache holding `held` first can keep: their common prefix, short of
/// the prompt's last token (it must run: its logits give the next token).
pub fn reusable_prefix(held: &[u32], prompt: &[u32]) -> usize {
    common_prefix(held, prompt).min(prompt.len().saturating_sub(1))
}

/// What one session's KV cache keeps from one prompt to the next (`run --prefix-reuse`).
/// With reuse on, the next prompt's longest common prefix with the previous one stays in the
/// cache and only the rest is run (at least one prompt token always runs: its logits give
/// the first output token); with it off, or when nothing is shared, the session starts empty.
/// Counts the prompt tokens asked for and the ones kept.
#[derive(Debug, Default)]
pub struct PrefixReuse {
    on: bool,
    /// The prompt whose KV the session holds first (empty: nothing known).
    held: Vec<u32>,
    prompt_tokens: u64,
    reused: u64,
}

impl PrefixReuse {
    pub fn new(on: bool) -> Self {
        PrefixReuse {
            on,
            ..Default::default()
        }
    }

    /// Readies `session` for `prompt` (reset, or rewound to the shared prefix); returns how
    /// many of the prompt's tokens the cache already holds, so the caller runs
    /// `prompt[kept..]`.
    pub fn prepare(&mut self, session: &mut Session<'_>, prompt: &[u32]) -> usize {
        let mut keep = if self.on {
            reusable_prefix(&self.held, prompt)
        } else {
            0
        };
        // The rewind refuses what the cache does not hold (or has overwritten).
        if keep == 0 || session.truncate(keep).is_err() {
            session.reset();
            keep = 0;
        }
        self.held.clear();
        if self.on {
            self.held.extend_from_slice(prompt);
        }
        self.prompt_tokens += prompt.len() as u64;
        self.reused += keep as u64;
        keep
    }

    /// The session's cache no longer holds the last prompt (a failed run).
    pub fn forget(&mut self) {
        self.held.clear();
    }

    pub fn on(&self) -> bool {
        self.on
    }

    /// Prompt tokens asked for so far.
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens
    }

    /// Prompt tokens taken from the cache so far.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}
