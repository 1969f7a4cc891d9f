//! Text ↔ token ids from GGUF tokenizer metadata (`tokenizer.ggml.*` keys of ggml's
//! `docs/gguf.md`), behaving like llama.cpp's `llama-vocab.cpp`: special-token partitioning,
//! the model's pre-tokenizer, byte-level BPE merges, decoding and streaming decoding.
//!
//! Supported kinds: byte-level BPE (`tokenizer.ggml.model = gpt2`, see `bpe.rs`) and
//! SentencePiece-style scored pieces (`llama`, see `spm.rs`). The algorithm-specific part is
//! the private `Kind` enum (plain-text encoding and piece bytes); everything else is shared.
//!
//! Special tokens: control, user-defined and unknown pieces are cut out of the text before the
//! algorithm runs, longest piece first (llama.cpp's `tokenizer_st_partition`); user-defined
//! pieces always, control and unknown pieces only with `parse_special`. For speed, a scan
//! first finds which special texts occur at all (a hash set probed by first byte and length),
//! so only those are partitioned on; the result is the same.
//!
//! # From text to tokens: one route
//! Callers build a [`Prompt`] (plain text or chat messages; chat on or off; BOS per the model
//! or a continuation) and call [`Tokenizer::encode_prompt`] (or `Engine::encode_prompt`);
//! the chat template of the model's family ([`ChatTemplate`], see `chat.rs`) is chosen at
//! load. [`Tokenizer::render_prompt`] gives the text that is tokenized. The cases are tabled
//! in `prompt.rs`. [`Tokenizer::encode`] remains the primitive: text to ids, never a BOS.

mod bpe;
mod chat;
mod fast_hash;
mod prompt;
mod spm;

pub use chat::{ChatMessage, ChatTemplate, chat_prompt, default_system_prompt, gemma_prompt};
pub use prompt::{Prompt, PromptInput};

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, StrList};
use fast_hash::PieceIds;

/// Token types as stored in `tokenizer.ggml.token_type` (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_i32(v: i32) -> Option<TokenType> {
        Some(match v {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// The vocabulary's algorithm: how plain text (between special tokens) becomes ids, and how a
/// token's piece becomes bytes. Everything else (vocabulary, token types, special-token
/// partitioning, BOS/EOS/EOG, decoding and streaming) is shared by every kind.
///
enum Kind {
    /// Byte-level BPE (`gpt2`).
    Bpe(Box<bpe::BpeModel>),
    /// SentencePiece-style scored pieces (`llama`).
    Spm(spm::SpmModel),
}

impl Kind {
    /// Appends the ids of `text`, which contains no special-token text. `after_special`:
    /// the text opens the input or follows a special token.
    fn encode_plain(
        &self,
        text: &str,
        after_special: bool,
        ids: &PieceIds,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        match self {
            Kind::Bpe(m) => {
                for (s, e) in m.pre.split(text)? {
                    m.encode_word(&text[s..e], ids, out);
                }
            }
            Kind::Spm(m) => m.encode_fragment(text, after_special, ids, out)?,
        }
        Ok(())
    }

    /// Appends the bytes that the piece of a token of type `ty` stands for.
    fn piece_bytes(&self, piece: &str, ty: TokenType, inv: &HashMap<char, u8>, out: &mut Vec<u8>) {
        match self {
            Kind::Bpe(_) => match ty {
                // Byte-level pieces: each character stands for one byte (GPT-2's map).
                TokenType::Normal | TokenType::Byte | TokenType::Undefined | TokenType::Unused => {
                    let mut buf = [0u8; 4];
                    for c in piece.chars() {
                        match inv.get(&c) {
                            Some(&b) => out.push(b),
                            None => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
                        }
                    }
                }
                // Control and user-defined tokens are their text.
                _ => out.extend_from_slice(piece.as_bytes()),
            },
            Kind::Spm(_) => match ty {
                TokenType::Byte => match spm::byte_of_piece(piece) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(piece.as_bytes()),
                },
                TokenType::Normal | TokenType::Undefined | TokenType::Unused => {
                    let mut buf = [0u8; 4];
                    for c in piece.chars() {
                        let c = if c == spm::SPACE_MARK { ' ' } else { c };
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
                _ => out.extend_from_slice(piece.as_bytes()),
            },
        }
    }
}

/// Texts of control tokens that end a turn in the model families we know.
const EOG_TEXTS: &[&str] = &[
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<EOT>",
    "<|return|>",
    "<|call|>",
];

/// A tokenizer built from a GGUF file's metadata. `Send + Sync`; encoding takes `&self`.
pub struct Tokenizer {
    kind: Kind,
    types: Vec<TokenType>,
    /// The pieces by id, and the id of each piece.
    ids: PieceIds,
    /// Tokens matched as whole units before pre-tokenization, longest text first.
    specials: Vec<u32>,
    /// The texts of `specials`, and for each first byte the lengths they come in.
    special_texts: HashSet<Box<[u8]>>,
    special_lens: Vec<Vec<usize>>,
    chat: ChatTemplate,
    /// Decoded bytes of every token, concatenated; token i is `bytes[off[i]..off[i + 1]]`.
    bytes: Vec<u8>,
    off: Vec<usize>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Bpe(b) => format!("bpe/{}", b.pre.name),
            Kind::Spm(s) => format!("spm/space_prefix={}", s.add_space_prefix),
        };
        f.debug_struct("Tokenizer")
            .field("kind", &kind)
            .field("vocab", &self.ids.tokens().len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eog", &self.eog)
            .field("chat", &self.chat.name())
            .finish()
    }
}

fn tok_err(msg: String) -> Error {
    Error::Tokenizer(msg)
}

impl Tokenizer {
    /// Builds the tokenizer described by `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        let tokens: StrList = g.get_str_list("tokenizer.ggml.tokens")?.clone();
        if tokens.is_empty() || tokens.len() > u32::MAX as usize / 2 {
            return Err(tok_err(format!(
                "tokenizer.ggml.tokens has {} entries",
                tokens.len()
            )));
        }
        let n = tokens.len();
        let types: Vec<TokenType> = match g.get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(_) => {
                let raw = g.get_i32_array("tokenizer.ggml.token_type")?;
                if raw.len() != n {
                    return Err(tok_err(format!(
                        "tokenizer.ggml.token_type has {} entries for {n} tokens",
                        raw.len()
                    )));
                }
                raw.iter()
                    .enumerate()
                    .map(|(i, &t)| {
                        TokenType::from_i32(t).ok_or_else(|| {
                            tok_err(format!(
                                "tokenizer.ggml.token_type[{i}] = {t} is not a token type"
                            ))
                        })
                    })
                    .collect::<Result<_>>()?
            }
        };
        // Duplicates: the first id wins, as in llama.cpp's token_to_id map.
        let ids = PieceIds::new(tokens);
        let tokens = ids.tokens();
        // Special ids: an absent key, a negative id (-1) or one outside the vocabulary means
        // "none", as in llama.cpp.
        let special_id = |key: &str| -> Option<u32> {
            let v = g.get(key)?.as_integer()?;
            u32::try_from(v).ok().filter(|&id| (id as usize) < n)
        };
        let bos = special_id("tokenizer.ggml.bos_token_id");
        let eos = special_id("tokenizer.ggml.eos_token_id");
        let eot = special_id("tokenizer.ggml.eot_token_id");
        let eom = special_id("tokenizer.ggml.eom_token_id");
        let unk = special_id("tokenizer.ggml.unknown_token_id");
        let flag = |key: &str, default: bool| -> Result<bool> {
            match g.get(key) {
                Some(_) => g.get_bool(key),
                None => Ok(default),
            }
        };

        let (kind, default_add_bos) = match model {
            "gpt2" => {
                let pre_name = match g.get("tokenizer.ggml.pre") {
                    Some(_) => g.get_str("tokenizer.ggml.pre")?,
                    None => "default",
                };
                let pre = bpe::PreTokenizer::for_name(pre_name)?;
                let merges = g.get_str_list("tokenizer.ggml.merges")?;
                let llama3 = pre.ignore_merges;
                (
                    Kind::Bpe(Box::new(bpe::BpeModel::new(pre, tokens, &ids, merges)?)),
                    llama3,
                )
            }
            "llama" => {
                // llama.cpp's defaults for this kind: BOS added, a space in front.
                let scores = g.get_f32_array("tokenizer.ggml.scores")?;
                let prefix = flag("tokenizer.ggml.add_space_prefix", true)?;
                let unk = unk.or_else(|| ids.get("<unk>").copied());
                (
                    Kind::Spm(spm::SpmModel::new(tokens, &ids, scores, unk, prefix)?),
                    true,
                )
            }
            other => {
                return Err(tok_err(format!(
                    "unknown tokenizer model `tokenizer.ggml.model = {other}` (supported: gpt2, \
                     llama)"
                )));
            }
        };
        let add_bos = flag("tokenizer.ggml.add_bos_token", default_add_bos)?;

        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                matches!(
                    types[i as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                ) && !tokens[i as usize].is_empty()
            })
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(tokens[i as usize].len()));
        let mut special_lens: Vec<Vec<usize>> = vec![Vec::new(); 256];
        let mut special_texts: HashSet<Box<[u8]>> = HashSet::with_capacity(specials.len());
        for &i in &specials {
            let t = tokens[i as usize].as_bytes();
            let lens = &mut special_lens[t[0] as usize];
            if !lens.contains(&t.len()) {
                lens.push(t.len());
            }
            special_texts.insert(t.into());
        }
        let chat = ChatTemplate::from_gguf(g, |p| ids.contains_key(p));

        let mut eog: Vec<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for (i, t) in tokens.iter().enumerate() {
            if matches!(types[i], TokenType::Control | TokenType::UserDefined)
                && EOG_TEXTS.contains(&t)
            {
                eog.push(i as u32);
            }
        }
        eog.sort_unstable();
        eog.dedup();

        // Decoded bytes per token.
        let inv = bpe::char_to_byte_map();
        let mut bytes = Vec::with_capacity(n * 6);
        let mut off = Vec::with_capacity(n + 1);
        off.push(0);
        for (t, &ty) in tokens.iter().zip(&types) {
            kind.piece_bytes(t, ty, &inv, &mut bytes);
            off.push(bytes.len());
        }

        Ok(Tokenizer {
            kind,
            types,
            ids,
            specials,
            special_texts,
            special_lens,
            chat,
            bytes,
            off,
            bos,
            eos,
            add_bos,
            eog,
        })
    }

    /// Token ids of `text`. No BOS is added. With `parse_special`, the text of control tokens
    /// (e.g. `<|im_start|>`) becomes those tokens; user-defined tokens are always matched.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, parse_special, &mut out)?;
        Ok(out)
    }

    fn encode_into(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) -> Result<()> {
        let mut after_special = true;
        for frag in self.partition(text, parse_special) {
            match frag {
                Frag::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Frag::Text(s, e) => {
                    self.kind
                        .encode_plain(&text[s..e], after_special, &self.ids, out)?;
                    after_special = false;
                }
            }
        }
        Ok(())
    }

    /// The model's chat template family.
    pub fn chat_template(&self) -> &ChatTemplate {
        &self.chat
    }

    /// The text that [`encode_prompt`](Self::encode_prompt) tokenizes (BOS not included):
    /// chat prompts rendered in the model's template, plain text as it is.
    pub fn render_prompt(&self, p: &Prompt<'_>) -> String {
        match p.input {
            PromptInput::Text(t) if !p.chat => t.to_string(),
            PromptInput::Text(t) => self
                .chat
                .render(&[ChatMessage::new("user", t)], p.generation_prompt),
            PromptInput::Messages(m) => self.chat.render(m, p.generation_prompt),
        }
    }

    /// Token ids of a prompt: BOS first when the model adds one and the prompt opens a
    /// context, then the rendered text (see [`Prompt`]).
    pub fn encode_prompt(&self, p: &Prompt<'_>) -> Result<Vec<u32>> {
        let chat = p.chat || matches!(p.input, PromptInput::Messages(_));
        let mut out = Vec::new();
        if p.open && self.add_bos {
            out.extend(self.bos);
        }
        match p.input {
            PromptInput::Text(t) if !chat => self.encode_into(t, p.parse_special, &mut out)?,
            _ => {
                let text = self.render_prompt(&Prompt { chat, ..*p });
                self.encode_into(&text, true, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Ids of the special tokens whose text occurs in `text`, longest first.
    fn specials_in(&self, text: &str) -> Vec<u32> {
        let b = text.as_bytes();
        let mut found: HashSet<&[u8]> = HashSet::new();
        for (i, &first) in b.iter().enumerate() {
            for &len in &self.special_lens[first as usize] {
                if let Some(s) = b.get(i..i + len)
                    && self.special_texts.contains(s)
                {
                    found.insert(s);
                }
            }
        }
        if found.is_empty() {
            return Vec::new();
        }
        self.specials
            .iter()
            .copied()
            .filter(|&id| found.contains(self.ids.tokens()[id as usize].as_bytes()))
            .collect()
    }

    /// Splits `text` at occurrences of special tokens, longest token first (llama.cpp's
    /// `tokenizer_st_partition`).
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Frag> {
        let mut frags = vec![Frag::Text(0, text.len())];
        if text.is_empty() {
            return Vec::new();
        }
        let mut next = Vec::new();
        for id in self.specials_in(text) {
            let ty = self.types[id as usize];
            if !parse_special && matches!(ty, TokenType::Control | TokenType::Unknown) {
                continue;
            }
            let pat = &self.ids.tokens()[id as usize];
            next.clear();
            let mut changed = false;
            for f in &frags {
                let Frag::Text(s, e) = *f else {
                    next.push(*f);
                    continue;
                };
                let mut pos = s;
                while let Some(k) = text[pos..e].find(pat) {
                    changed = true;
                    if k > 0 {
                        next.push(Frag::Text(pos, pos + k));
                    }
                    next.push(Frag::Token(id));
                    pos += k + pat.len();
                }
                if pos < e {
                    next.push(Frag::Text(pos, e));
                }
            }
            if changed {
                std::mem::swap(&mut frags, &mut next);
            }
        }
        frags
    }

    /// Whether the model expects a BOS token before a prompt (`tokenizer.ggml.add_bos_token`).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `id` ends generation (EOS, EOT, EOM and the known end-of-turn control tokens).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn vocab_size(&self) -> usize {
        self.ids.tokens().len()
    }

    /// The token's text as stored in the vocabulary (byte-level form, e.g. `Ġworld`).
    pub fn token_piece(&self, id: u32) -> Option<&str> {
        self.ids.tokens().get(id as usize)
    }

    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    fn bytes_of(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i + 1 < self.off.len() {
            &self.bytes[self.off[i]..self.off[i + 1]]
        } else {
            &[]
        }
    }

    /// The bytes a token stands for (control tokens: their text; unknown ids: nothing).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.bytes_of(id).to_vec()
    }

    /// Text of `ids`, invalid UTF-8 replaced by U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut buf = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            buf.extend_from_slice(self.bytes_of(id));
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

#[derive(Clone, Copy, Debug)]
enum Frag {
    Token(u32),
    Text(usize, usize),
}

/// Incremental decoder for generated tokens: returns only complete UTF-8, holding back the
/// bytes of a character split across tokens until it is complete.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token; returns the text that became complete.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        self.pending.extend_from_slice(tok.bytes_of(id));
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // The prefix is valid UTF-8 by the error's contract.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        None => {
                            // An incomplete character at the end: keep it for later.
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// Flushes whatever is left (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }
}
