//! The performance prompt set for `pocketperf run` (SingleStream, Offline), specified in
//! `docs/DATASETS.md`.
//!
//! 64 original short instructions and questions (about 15 to 170 tokens with common
//! tokenizers), committed in `datasets/data/perf_prompts.json`. Each prompt gets a fixed
//! output length from a deterministic distribution: prompt `i` takes entry `(5·i + 3) mod 8`
//! of the preset's table, so each of the eight lengths is used by exactly 8 prompts and the
//! lengths are spread across short and long prompts. The SUT generates exactly
//! `max_new_tokens` tokens (EOS ignored in performance mode).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const PERF_PROMPTS_JSON: &str = include_str!("../data/perf_prompts.json");

/// Output lengths of the `quick` preset (mean 32).
pub const QUICK_OUTPUT_LENS: [u32; 8] = [16, 20, 24, 28, 36, 40, 44, 48];
/// Output lengths of the `full` preset (mean 128): the quick table times four.
pub const FULL_OUTPUT_LENS: [u32; 8] = [64, 80, 96, 112, 144, 160, 176, 192];

/// Output-length preset of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Mean 32 new tokens: CI and quick checks.
    Quick,
    /// Mean 128 new tokens: the full benchmark.
    Full,
}

impl Preset {
    /// The preset's table of output lengths.
    pub fn output_lens(self) -> &'static [u32; 8] {
        match self {
            Preset::Quick => &QUICK_OUTPUT_LENS,
            Preset::Full => &FULL_OUTPUT_LENS,
        }
    }

    /// The output length of prompt `index`: entry `(5·index + 3) mod 8` of the table.
    pub fn output_len(self, index: usize) -> u32 {
        self.output_lens()[(5 * (index % 8) + 3) % 8]
    }
}

impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Preset> {
        match s {
            "quick" => Ok(Preset::Quick),
            "full" => Ok(Preset::Full),
            _ => Err(Error::InvalidValue {
                what: "prompt preset",
                value: s.to_string(),
                expected: "quick, full",
            }),
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Preset::Quick => "quick",
            Preset::Full => "full",
        })
    }
}

/// One performance prompt with its forced output length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerfPrompt {
    /// Stable id, `p00` … `p63`.
    pub id: String,
    pub text: String,
    pub max_new_tokens: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptText {
    id: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptFile {
    version: u32,
    prompts: Vec<PromptText>,
}

/// Checks a prompt file (`{"version": 1, "prompts": [{"id", "text"}, ...]}`): version 1,
/// non-empty text, unique ids. Returns `(id, text)` pairs in file order; `what` names the
/// source in errors.
pub fn parse_perf_prompts(json: &str, what: &str) -> Result<Vec<(String, String)>> {
    let err = |line: usize, reason: String| Error::Table {
        what: what.to_string(),
        line: line as u64,
        reason,
    };
    let file: PromptFile = serde_json::from_str(json).map_err(|e| err(e.line(), e.to_string()))?;
    if file.version != 1 {
        return Err(err(0, format!("version {}, expected 1", file.version)));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(file.prompts.len());
    for p in file.prompts {
        if p.text.trim().is_empty() {
            return Err(err(0, format!("prompt {} has no text", p.id)));
        }
        if !seen.insert(p.id.clone()) {
            return Err(err(0, format!("prompt id {} appears twice", p.id)));
        }
        out.push((p.id, p.text));
    }
    Ok(out)
}

fn texts() -> &'static [(String, String)] {
    static SET: OnceLock<Vec<(String, String)>> = OnceLock::new();
    SET.get_or_init(|| {
        // Invariant: the file is compiled in and `committed_perf_prompts` tests it.
        parse_perf_prompts(PERF_PROMPTS_JSON, "embedded perf_prompts.json")
            .expect("embedded perf_prompts.json is valid")
    })
}

/// The performance prompt set with the output lengths of `preset`, in id order.
pub fn perf_prompts(preset: Preset) -> Vec<PerfPrompt> {
    texts()
        .iter()
        .enumerate()
        .map(|(i, (id, text))| PerfPrompt {
            id: id.clone(),
            text: text.clone(),
            max_new_tokens: preset.output_len(i),
        })
        .collect()
}
