//! The vocabulary's lookup tables: a fast, non-cryptographic hasher (the multiply-rotate
//! scheme of Firefox's and rustc's "Fx" hash) and [`PieceIds`], the piece → id table.
//! Vocabularies reach 262,144 pieces; a map of owned strings with SipHash made building this
//! table the larger part of loading a tokenizer. `PieceIds` owns the pieces once and keeps
//! only ids in an open-addressing table (linear probing, at most half full), comparing a
//! probe against the piece it points to. The keys come from the model file, so flooding
//! resistance buys nothing here.

use crate::gguf::StrList;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fx hashing state.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FxHasher`]s.
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

/// Text → id for strings that are not pieces (merge results of byte-level BPE).
pub(crate) type TextIds = HashMap<String, u32, FxBuild>;

const EMPTY: u32 = u32::MAX;

fn hash_of(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    // Fold the high bits, which the multiply mixes best, into the slot index.
    h.finish() ^ (h.finish() >> 29)
}

/// The pieces of a vocabulary and the id of each piece text; on duplicates the first id
/// wins.
pub(crate) struct PieceIds {
    tokens: StrList,
    slots: Vec<u32>,
    mask: usize,
}

impl PieceIds {
    pub(crate) fn new(tokens: StrList) -> PieceIds {
        let size = (tokens.len() * 2).next_power_of_two().max(16);
        let mask = size - 1;
        let mut slots = vec![EMPTY; size];
        for (id, t) in tokens.iter().enumerate() {
            let mut i = hash_of(t) as usize & mask;
            loop {
                let s = slots[i];
                if s == EMPTY {
                    slots[i] = id as u32;
                    break;
                }
                if &tokens[s as usize] == t {
                    break; // a duplicate: the first id stays
                }
                i = (i + 1) & mask;
            }
        }
        PieceIds {
            tokens,
            slots,
            mask,
        }
    }

    /// The id of `piece`.
    pub(crate) fn get(&self, piece: &str) -> Option<&u32> {
        let mut i = hash_of(piece) as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if *s == EMPTY {
                return None;
            }
            if &self.tokens[*s as usize] == piece {
                return Some(s);
            }
            i = (i + 1) & self.mask;
        }
    }

    pub(crate) fn contains_key(&self, piece: &str) -> bool {
        self.get(piece).is_some()
    }

    /// Every piece, by id.
    pub(crate) fn tokens(&self) -> &StrList {
        &self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_piece_and_nothing_else() {
        let tokens: Vec<String> = (0..5000)
            .map(|i| format!("p{i}"))
            .chain(["p7".into()])
            .collect();
        let ids = PieceIds::new(tokens.into());
        for i in 0..5000u32 {
            assert_eq!(ids.get(&format!("p{i}")), Some(&i));
        }
        // The duplicate "p7" at 5000 resolves to the first id.
        assert_eq!(ids.get("p7"), Some(&7));
        assert_eq!(ids.get("q1"), None);
        assert_eq!(ids.get(""), None);
        assert_eq!(ids.tokens().len(), 5001);
    }
}
