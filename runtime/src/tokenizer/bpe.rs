//! Byte-level BPE (GGUF `tokenizer.ggml.model = gpt2`): GPT-2's byte↔unicode mapping, the
//! regex pre-tokenizers named by `tokenizer.ggml.pre`, and rank-ordered merging.
//!
//! Pre-tokenizer patterns follow the ones llama.cpp (`src/llama-vocab.cpp`) uses for each
//! `tokenizer.ggml.pre` value: several patterns apply in sequence, each one splitting the
//! pieces left by the previous one, with unmatched gaps kept as pieces of their own. Merging
//! follows GPT-2: repeatedly merge the adjacent pair with the lowest merge rank (leftmost
//! first on ties) until no pair has a rank.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;

use fancy_regex::Regex;

use super::fast_hash::{FxBuild, PieceIds, TextIds};
use crate::error::{Error, Result};
use crate::gguf::StrList;

/// The GPT-2 split pattern (contractions, letters, numbers, other, trailing whitespace).
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern: case-insensitive contractions, numbers in groups of up to three.
const LLAMA3_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's pattern: like Llama 3 but every digit alone.
const QWEN2_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A pre-tokenizer: the patterns applied in sequence, and whether a piece that is itself a
/// token skips merging (Llama 3).
pub(crate) struct PreTokenizer {
    pub(crate) name: String,
    regexes: Vec<Regex>,
    pub(crate) ignore_merges: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value.
    pub(crate) fn for_name(pre: &str) -> Result<PreTokenizer> {
        let (patterns, ignore_merges): (&[&str], bool) = match pre {
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" => {
                (&[r"\p{N}", GPT2_PATTERN], false)
            }
            "gpt2" | "gpt-2" | "mpt" | "olmo" | "jais" => (&[GPT2_PATTERN], false),
            "llama-bpe" | "llama3" | "llama-v3" | "falcon3" | "dbrx" | "smaug-bpe" => {
                (&[LLAMA3_PATTERN], true)
            }
            "qwen2" | "stablelm2" | "deepseek-r1-qwen" => (&[QWEN2_PATTERN], false),
            "default" => (
                &[
                    r"[\p{P}\$\+<=>\^~\|]+",
                    GPT2_PATTERN,
                    r"\p{N}+",
                    "[0-9][0-9][0-9]",
                ],
                false,
            ),
            other => {
                return Err(Error::Tokenizer(format!(
                    "unknown pre-tokenizer `tokenizer.ggml.pre = {other}` (supported: smollm, \
                     gpt2, llama-bpe, qwen2, default and their aliases)"
                )));
            }
        };
        let regexes = patterns
            .iter()
            .map(|p| {
                Regex::new(p).map_err(|e| {
                    Error::Tokenizer(format!("pre-tokenizer `{pre}`: pattern {p:?}: {e}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer {
            name: pre.to_string(),
            regexes,
            ignore_merges,
        })
    }

    /// Splits `text` into pre-tokens (byte ranges of `text`, in order, covering it exactly).
    pub(crate) fn split(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let mut pieces = vec![(0, text.len())];
        let mut next = Vec::new();
        for re in &self.regexes {
            next.clear();
            for &(start, end) in &pieces {
                let chunk = &text[start..end];
                let mut last = 0;
                for m in re.find_iter(chunk) {
                    let m = m.map_err(|e| {
                        Error::Tokenizer(format!(
                            "pre-tokenizer `{}` failed on the text at bytes {start}..{end}: {e}",
                            self.name
                        ))
                    })?;
                    if m.start() == m.end() {
                        continue;
                    }
                    if m.start() > last {
                        next.push((start + last, start + m.start()));
                    }
                    next.push((start + m.start(), start + m.end()));
                    last = m.end();
                }
                if last < chunk.len() {
                    next.push((start + last, end));
                }
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        Ok(pieces)
    }
}

/// GPT-2's reversible map from bytes to printable unicode characters: printable Latin-1
/// bytes map to themselves, the other 68 bytes to U+0100 onwards in byte order.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        let cp = if printable {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        // Every value here is below U+0200, a valid scalar value.
        *slot = char::from_u32(cp).unwrap_or('\u{fffd}');
    }
    table
}

/// The inverse of [`byte_to_char_table`] as a lookup from char to byte.
pub(crate) fn char_to_byte_map() -> HashMap<char, u8> {
    byte_to_char_table()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// Merge rules and the per-word cache. Symbols are token ids; strings that arise from merges
/// but are not tokens get ids from `n_vocab` upwards.
pub(crate) struct BpeModel {
    pub(crate) pre: PreTokenizer,
    n_vocab: u32,
    /// (left, right) → (rank, merged symbol).
    merges: HashMap<(u32, u32), (u32, u32), FxBuild>,
    /// Symbol of each byte's GPT-2 character.
    byte_sym: [u32; 256],
    /// Text (GPT-2 characters) of the symbols that are not tokens, by id − n_vocab.
    extra: Vec<String>,
    cache: Mutex<HashMap<Box<str>, Box<[u32]>>>,
}

const CACHE_CAP: usize = 1 << 18;

impl BpeModel {
    pub(crate) fn new(
        pre: PreTokenizer,
        tokens: &StrList,
        token_ids: &PieceIds,
        merges: &StrList,
    ) -> Result<BpeModel> {
        let n_vocab = tokens.len() as u32;
        let mut extra: Vec<String> = Vec::new();
        let mut extra_ids = TextIds::default();
        let mut sym = |s: &str| -> u32 {
            if let Some(&id) = token_ids.get(s) {
                return id;
            }
            if let Some(&id) = extra_ids.get(s) {
                return id;
            }
            let id = n_vocab + extra.len() as u32;
            extra.push(s.to_string());
            extra_ids.insert(s.to_string(), id);
            id
        };
        let table = byte_to_char_table();
        let mut byte_sym = [0u32; 256];
        let mut buf = [0u8; 4];
        for (b, s) in byte_sym.iter_mut().enumerate() {
            *s = sym(table[b].encode_utf8(&mut buf));
        }
        let mut map = HashMap::with_capacity_and_hasher(merges.len(), FxBuild::default());
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            // A merge is "left right"; the left part never contains a space (spaces are
            // mapped to 'Ġ'), so split at the first one.
            let Some((l, r)) = m.split_once(' ') else {
                return Err(Error::Tokenizer(format!(
                    "tokenizer.ggml.merges[{rank}] = {m:?} is not two pieces separated by a space"
                )));
            };
            joined.clear();
            joined.push_str(l);
            joined.push_str(r);
            let (li, ri, ji) = (sym(l), sym(r), sym(&joined));
            map.entry((li, ri)).or_insert((rank as u32, ji));
        }
        Ok(BpeModel {
            pre,
            n_vocab,
            merges: map,
            byte_sym,
            extra,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Appends the tokens of one pre-token (raw text) to `out`.
    pub(crate) fn encode_word(&self, word: &str, token_ids: &PieceIds, out: &mut Vec<u32>) {
        if let Ok(cache) = self.cache.lock()
            && let Some(ids) = cache.get(word)
        {
            out.extend_from_slice(ids);
            return;
        }
        let start = out.len();
        self.merge_word(word, token_ids, out);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_CAP {
                cache.clear();
            }
            cache.insert(word.into(), out[start..].into());
        }
    }

    fn merge_word(&self, word: &str, token_ids: &PieceIds, out: &mut Vec<u32>) {
        if self.pre.ignore_merges {
            let table = byte_to_char_table();
            let mapped: String = word.bytes().map(|b| table[b as usize]).collect();
            if let Some(&id) = token_ids.get(&mapped) {
                out.push(id);
                return;
            }
        }
        struct Sym {
            id: u32,
            prev: usize,
            next: usize,
        }
        const NONE: usize = usize::MAX;
        let n = word.len();
        let mut syms: Vec<Sym> = word
            .bytes()
            .enumerate()
            .map(|(i, b)| Sym {
                id: self.byte_sym[b as usize],
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
            })
            .collect();
        // Min-heap on (rank, left position); entries are validated when popped.
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>> = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], left: usize| {
            if left == NONE {
                return;
            }
            let right = syms[left].next;
            if right == NONE {
                return;
            }
            let (l, r) = (syms[left].id, syms[right].id);
            if let Some(&(rank, _)) = self.merges.get(&(l, r)) {
                heap.push(Reverse((rank, left, l, r)));
            }
        };
        for i in 0..n.saturating_sub(1) {
            push(&mut heap, &syms, i);
        }
        let mut alive = vec![true; n];
        while let Some(Reverse((_, left, l, r))) = heap.pop() {
            let right = syms[left].next;
            if !alive[left] || right == NONE || syms[left].id != l || syms[right].id != r {
                continue; // stale entry
            }
            let Some(&(_, merged)) = self.merges.get(&(l, r)) else {
                continue;
            };
            syms[left].id = merged;
            let after = syms[right].next;
            syms[left].next = after;
            if after != NONE {
                syms[after].prev = left;
            }
            alive[right] = false;
            let prev = syms[left].prev;
            push(&mut heap, &syms, prev);
            push(&mut heap, &syms, left);
        }
        let mut i = if n == 0 { NONE } else { 0 };
        while i != NONE {
            let id = syms[i].id;
            if id < self.n_vocab {
                out.push(id);
            } else {
                // Not a token: fall back to single-byte tokens, as llama.cpp does.
                let text = &self.extra[(id - self.n_vocab) as usize];
                for b in text.bytes().filter(u8::is_ascii) {
                    let s = [b];
                    if let Some(&t) = std::str::from_utf8(&s).ok().and_then(|s| token_ids.get(s)) {
                        out.push(t);
                    }
                }
            }
            i = syms[i].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'\t' as usize], 'ĉ');
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[0], 'Ā');
        // 0x00..=0x20 (33) and 0x7f..=0xa0 (34) come first: 0xad is the 68th, U+0100 + 67.
        assert_eq!(t[0xad], 'Ń');
        assert_eq!(t[0x7f], 'ġ');
        let inv = char_to_byte_map();
        assert_eq!(inv.len(), 256);
        for b in 0..=255u8 {
            assert_eq!(inv[&t[b as usize]], b);
        }
    }

    #[test]
    fn smollm_splits_digits_then_gpt2() {
        let p = PreTokenizer::for_name("smollm").unwrap();
        let text = "In 2024, a  b's\n";
        let got: Vec<&str> = p
            .split(text)
            .unwrap()
            .iter()
            .map(|&(s, e)| &text[s..e])
            .collect();
        assert_eq!(
            got,
            [
                "In", " ", "2", "0", "2", "4", ",", " a", " ", " b", "'s", "\n"
            ]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three() {
        let p = PreTokenizer::for_name("llama-bpe").unwrap();
        let text = "x 1234567 I'M\n\n";
        let got: Vec<&str> = p
            .split(text)
            .unwrap()
            .iter()
            .map(|&(s, e)| &text[s..e])
            .collect();
        assert_eq!(got, ["x", " ", "123", "456", "7", " I", "'M", "\n\n"]);
    }

    #[test]
    fn unknown_pre_is_a_clear_error() {
        let e = PreTokenizer::for_name("klingon").err().unwrap().to_string();
        assert!(e.contains("klingon") && e.contains("smollm"), "{e}");
    }
}
