//! Scripted multi-turn dialogues for energy-per-dialogue measurement (`docs/DATASETS.md`).
//!
//! Eight dialogues of three user turns each, original text committed in
//! `datasets/data/dialogues.json`. Every turn carries a max-new-tokens budget; the budgets of
//! a dialogue sum to [`DIALOGUE_NEW_TOKENS`], and the SUT generates exactly that many tokens
//! per turn (EOS ignored, as in performance mode) so that every dialogue does the same work.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Generated tokens per dialogue (sum of its turn budgets).
pub const DIALOGUE_NEW_TOKENS: u32 = 200;

const DIALOGUES_JSON: &str = include_str!("../data/dialogues.json");

/// One user turn and the number of tokens the model generates in reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub user: String,
    pub max_new_tokens: u32,
}

/// A scripted dialogue: the user turns in order. The model's replies are appended to the
/// conversation between turns by the harness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dialogue {
    /// Stable id, e.g. `d01-trip`.
    pub id: String,
    pub topic: String,
    pub turns: Vec<Turn>,
}

impl Dialogue {
    /// Tokens generated over the whole dialogue.
    pub fn total_new_tokens(&self) -> u32 {
        self.turns.iter().map(|t| t.max_new_tokens).sum()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DialogueFile {
    version: u32,
    dialogues: Vec<Dialogue>,
}

/// Parses a dialogue file (`{"version": 1, "dialogues": [...]}`) and checks that every
/// dialogue has turns, non-empty user text and positive budgets; `what` names the source.
pub fn parse_dialogues(json: &str, what: &str) -> Result<Vec<Dialogue>> {
    let err = |line: usize, reason: String| Error::Table {
        what: what.to_string(),
        line: line as u64,
        reason,
    };
    let file: DialogueFile =
        serde_json::from_str(json).map_err(|e| err(e.line(), e.to_string()))?;
    if file.version != 1 {
        return Err(err(0, format!("version {}, expected 1", file.version)));
    }
    for d in &file.dialogues {
        if d.turns.is_empty() {
            return Err(err(0, format!("dialogue {} has no turns", d.id)));
        }
        for (i, t) in d.turns.iter().enumerate() {
            if t.user.trim().is_empty() || t.max_new_tokens == 0 {
                return Err(err(
                    0,
                    format!("dialogue {} turn {i}: empty text or zero budget", d.id),
                ));
            }
        }
    }
    Ok(file.dialogues)
}

/// The committed dialogues.
pub fn dialogues() -> &'static [Dialogue] {
    static SET: OnceLock<Vec<Dialogue>> = OnceLock::new();
    SET.get_or_init(|| {
        // Invariant: the file is compiled in and `committed_dialogues` tests it.
        parse_dialogues(DIALOGUES_JSON, "embedded dialogues.json")
            .expect("embedded dialogues are valid")
    })
}
