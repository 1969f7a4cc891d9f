//! SentencePiece-style vocabularies (GGUF `tokenizer.ggml.model = llama`), encoded the way
//! llama.cpp's SPM tokenizer (`llm_tokenizer_spm` in `src/llama-vocab.cpp`) does.
//!
//! Each fragment of plain text (the text between special tokens) is encoded on its own:
//! 1. with `tokenizer.ggml.add_space_prefix`, a space is put in front of a fragment that opens
//!    the text or follows a special token;
//! 2. every space becomes `▁` (U+2581); other whitespace stays as it is;
//! 3. the text is split into its UTF-8 characters, and adjacent symbols are merged while some
//!    adjacent pair spells a piece of the vocabulary: always the pair whose piece has the
//!    highest score (`tokenizer.ggml.scores`), the leftmost one on ties;
//! 4. each final symbol becomes its piece's id; a symbol with no piece (a character the
//!    vocabulary lacks) becomes one `<0xNN>` byte-fallback token per UTF-8 byte.
//!
//! Decoding turns `▁` back into a space and a `<0xNN>` piece into its byte.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::fast_hash::PieceIds;
use crate::error::{Error, Result};
use crate::gguf::StrList;

/// The space marker of SentencePiece pieces.
pub(crate) const SPACE_MARK: char = '\u{2581}';

/// Scores and byte-fallback ids of a SentencePiece vocabulary.
pub(crate) struct SpmModel {
    scores: Vec<f32>,
    /// The token of each byte: `<0xNN>`, else the byte as a one-character piece, else the
    /// unknown token.
    byte_tok: Vec<Option<u32>>,
    pub(crate) add_space_prefix: bool,
}

/// A candidate merge of two adjacent symbols, ordered so that a max-heap pops the highest
/// score first and, among equal scores, the leftmost pair.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Byte length of the merged text when the candidate was made (stale entries differ).
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// A symbol: a byte range of the escaped text, linked to its neighbours.
#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

impl SpmModel {
    /// Builds the model from the vocabulary and `tokenizer.ggml.scores` (one per token).
    pub(crate) fn new(
        tokens: &StrList,
        ids: &PieceIds,
        scores: &[f32],
        unk: Option<u32>,
        add_space_prefix: bool,
    ) -> Result<SpmModel> {
        if scores.len() != tokens.len() {
            return Err(Error::Tokenizer(format!(
                "tokenizer.ggml.scores has {} entries for {} tokens",
                scores.len(),
                tokens.len()
            )));
        }
        let mut byte_tok = vec![None; 256];
        for (b, slot) in byte_tok.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = ids.get(&hex).copied().or_else(|| {
                // A byte outside ASCII alone is not UTF-8, so no piece can spell it.
                let c = char::from_u32(b as u32).filter(|_| b < 0x80)?;
                let mut buf = [0u8; 4];
                let s: &str = c.encode_utf8(&mut buf);
                ids.get(s).copied()
            });
            if slot.is_none() {
                *slot = unk;
            }
        }
        Ok(SpmModel {
            scores: scores.to_vec(),
            byte_tok,
            add_space_prefix,
        })
    }

    /// Appends the ids of one fragment of plain text. `after_special` says whether the
    /// fragment opens the text or follows a special token (where the space prefix goes).
    pub(crate) fn encode_fragment(
        &self,
        raw: &str,
        after_special: bool,
        ids: &PieceIds,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut text = String::with_capacity(raw.len() + 4);
        if self.add_space_prefix && after_special {
            text.push(SPACE_MARK);
        }
        for c in raw.chars() {
            text.push(if c == ' ' { SPACE_MARK } else { c });
        }
        if text.is_empty() {
            return Ok(());
        }
        let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let len = c.len_utf8();
            syms.push(Sym {
                start,
                len,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if start + len == text.len() {
                    NONE
                } else {
                    i + 1
                },
            });
        }
        let mut heap = BinaryHeap::with_capacity(syms.len());
        let candidate = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (syms[left], syms[right]);
            let merged = &text[l.start..r.start + r.len];
            if let Some(&id) = ids.get(merged)
                && let Some(&score) = self.scores.get(id as usize)
            {
                heap.push(Bigram {
                    score,
                    left,
                    right,
                    len: merged.len(),
                });
            }
        };
        for i in 1..syms.len() {
            candidate(&mut heap, &syms, i - 1, i);
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (syms[b.left], syms[b.right]);
            // Stale: one side was merged away or grew since the candidate was made.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right {
                continue;
            }
            syms[b.left].len += r.len;
            syms[b.right].len = 0;
            syms[b.left].next = r.next;
            if r.next != NONE {
                syms[r.next].prev = b.left;
            }
            let (prev, next) = (syms[b.left].prev, syms[b.left].next);
            candidate(&mut heap, &syms, prev, b.left);
            candidate(&mut heap, &syms, b.left, next);
        }
        let mut i = 0;
        while i != NONE {
            let s = syms[i];
            let piece = &text[s.start..s.start + s.len];
            match ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for b in piece.bytes() {
                        match self.byte_tok[b as usize] {
                            Some(id) => out.push(id),
                            None => {
                                return Err(Error::Tokenizer(format!(
                                    "the character {piece:?} has no piece, and the vocabulary \
                                     has neither a byte-fallback token <0x{b:02X}> nor an \
                                     unknown token"
                                )));
                            }
                        }
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }
}

/// The byte a `<0xNN>` piece stands for.
pub(crate) fn byte_of_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(pieces: &[(&str, f32)]) -> (StrList, PieceIds, SpmModel) {
        let mut tokens: Vec<String> = pieces.iter().map(|p| p.0.to_string()).collect();
        let mut scores: Vec<f32> = pieces.iter().map(|p| p.1).collect();
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            scores.push(0.0);
        }
        let tokens: StrList = tokens.into();
        let ids = PieceIds::new(tokens.clone());
        let m = SpmModel::new(&tokens, &ids, &scores, None, false).unwrap();
        (tokens, ids, m)
    }

    fn enc(m: &SpmModel, ids: &PieceIds, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        m.encode_fragment(text, true, ids, &mut out).unwrap();
        out
    }

    #[test]
    fn the_best_scored_pair_merges_first() {
        // "abc": "ab" (-1) beats "bc" (-2), so "ab" + "c", although "bc" and "a" exist.
        let (_, ids, m) = model(&[
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("bc", -2.0),
        ]);
        assert_eq!(enc(&m, &ids, "abc"), [3, 2]);
        // With the scores swapped, "a" + "bc".
        let (_, ids, m) = model(&[
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -2.0),
            ("bc", -1.0),
        ]);
        assert_eq!(enc(&m, &ids, "abc"), [0, 4]);
    }

    #[test]
    fn equal_scores_merge_the_leftmost_pair() {
        let (_, ids, m) = model(&[("a", -5.0), ("aa", -1.0)]);
        // "aaa": the left pair merges first, leaving "aa" + "a".
        assert_eq!(enc(&m, &ids, "aaa"), [1, 0]);
    }

    #[test]
    fn spaces_become_the_marker_and_missing_characters_fall_back_to_bytes() {
        let (_, ids, m) = model(&[
            ("▁", -3.0),
            ("h", -3.0),
            ("i", -3.0),
            ("▁hi", -1.0),
            ("hi", -2.0),
        ]);
        assert_eq!(enc(&m, &ids, " hi"), [3]);
        // "é" (C3 A9) has no piece: two byte tokens, after the five pieces.
        assert_eq!(enc(&m, &ids, "hé"), [1, 5 + 0xC3, 5 + 0xA9]);
        // A tab is not a space: no marker.
        assert_eq!(enc(&m, &ids, "\t"), [5 + 0x09]);
    }

    #[test]
    fn space_prefix_only_where_asked() {
        let (tokens, ids, _) = model(&[("▁", -3.0), ("h", -3.0), ("▁h", -1.0)]);
        let scores = vec![-3.0, -3.0, -1.0]
            .into_iter()
            .chain(std::iter::repeat_n(0.0, 256))
            .collect::<Vec<f32>>();
        let m = SpmModel::new(&tokens, &ids, &scores, None, true).unwrap();
        let mut out = Vec::new();
        m.encode_fragment("h", true, &ids, &mut out).unwrap();
        assert_eq!(out, [2]);
        out.clear();
        m.encode_fragment("h", false, &ids, &mut out).unwrap();
        assert_eq!(out, [1]);
    }

    #[test]
    fn byte_pieces_parse() {
        assert_eq!(byte_of_piece("<0x0A>"), Some(10));
        assert_eq!(byte_of_piece("<0xFF>"), Some(255));
        assert_eq!(byte_of_piece("<0x0>"), None);
        assert_eq!(byte_of_piece("0x0A"), None);
    }
}
