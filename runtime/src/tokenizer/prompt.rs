//! One route from text to tokens: a [`Prompt`] says what the caller has (plain text, or chat
//! messages), whether it is a chat, whether control-token text in it is parsed, and whether it
//! opens a context (BOS per the model) or continues one already in the KV cache.
//! [`Tokenizer::encode_prompt`](super::Tokenizer::encode_prompt) (and `Engine::encode_prompt`)
//! turns it into ids; [`Tokenizer::render_prompt`](super::Tokenizer::render_prompt) gives the
//! text that is tokenized, for callers that compare rendered conversations (KV reuse across
//! dialogue turns).
//!
//! | caller needs                                  | prompt                                    |
//! |-----------------------------------------------|-------------------------------------------|
//! | raw text, BOS as the model wants              | `Prompt::text(t)`                         |
//! | raw text with `<|im_start|>`… parsed          | `Prompt::text(t).parse_special(true)`     |
//! | `--chat`: the text as one user turn           | `Prompt::text(t).chat(true)`              |
//! | a conversation, ending in the reply header    | `Prompt::messages(&msgs)`                 |
//! | text that follows tokens already in the cache | `….continuation()` (never a BOS)          |
//!
//! Chat prompts are rendered in the model's template ([`ChatTemplate`](super::ChatTemplate))
//! and always parse control-token text (the template's markers are control tokens; message
//! contents are parsed too, as llama.cpp does). BOS goes first when the model adds one
//! (`tokenizer.ggml.add_bos_token`) and the prompt is not a continuation: Gemma's chat prompt
//! starts `<bos><start_of_turn>user`, ChatML models add none.
//!
//! KV-prefix reuse: encode each whole prompt and keep the longest common *token* prefix with
//! what the cache holds (as the MMLU runner does for prompts sharing a few-shot prefix).
//! Encoding a prompt in two parts (a prefix, then the rest as a `continuation()`) gives the
//! ids of the whole only when the cut falls where the tokenizer splits anyway: right after a
//! special token (a chat turn's `<|im_end|>` or `<end_of_turn>`, which is why dialogue turns
//! can be appended), or at a pre-token boundary of byte-level BPE. Whitespace runs are not
//! such a boundary (GPT-2's pattern keeps the last space or newline for the next word, and
//! Gemma's newline runs are single pieces), so a prefix that ends in `"\n\n"` does not
//! encode alone as it does inside the whole.

use super::chat::ChatMessage;

/// What a prompt is made of.
#[derive(Clone, Copy, Debug)]
pub enum PromptInput<'a> {
    Text(&'a str),
    Messages(&'a [ChatMessage]),
}

/// A prompt to encode; see the module header for the cases.
#[derive(Clone, Copy, Debug)]
pub struct Prompt<'a> {
    pub input: PromptInput<'a>,
    /// Render as a chat (text becomes one user turn). Always true for messages.
    pub chat: bool,
    /// Parse control-token text in plain text (chat prompts always parse it).
    pub parse_special: bool,
    /// Put BOS first when the model adds one; false for a continuation.
    pub open: bool,
    /// End a chat prompt with the header of the model's reply.
    pub generation_prompt: bool,
}

impl<'a> Prompt<'a> {
    /// Plain text: BOS per the model, control-token text left as text.
    pub fn text(text: &'a str) -> Self {
        Prompt {
            input: PromptInput::Text(text),
            chat: false,
            parse_special: false,
            open: true,
            generation_prompt: true,
        }
    }

    /// A conversation in the model's chat template, ending with the reply header.
    pub fn messages(messages: &'a [ChatMessage]) -> Self {
        Prompt {
            input: PromptInput::Messages(messages),
            chat: true,
            parse_special: true,
            open: true,
            generation_prompt: true,
        }
    }

    /// Renders plain text as one user turn of the chat template (`--chat`) when `chat` is
    /// true; messages are a chat either way.
    pub fn chat(mut self, chat: bool) -> Self {
        self.chat = chat || matches!(self.input, PromptInput::Messages(_));
        self
    }

    /// Whether control-token text in plain text becomes control tokens.
    pub fn parse_special(mut self, yes: bool) -> Self {
        self.parse_special = yes;
        self
    }

    /// The text continues a context already in the cache: no BOS.
    pub fn continuation(mut self) -> Self {
        self.open = false;
        self
    }

    /// Whether a chat prompt ends with the reply header (default: yes).
    pub fn generation_prompt(mut self, yes: bool) -> Self {
        self.generation_prompt = yes;
        self
    }
}
