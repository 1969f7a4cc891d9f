//! Datasets for PocketPerf: the MMLU reader, the MMLU-576 subset and its manifest, MMLU
//! prompts and scoring, scripted dialogues and the performance prompt set.
//!
//! The crate knows nothing of tokenizers or models: it produces prompt strings (or chat
//! messages) and scores answers from numbers the caller supplies. Specifications live in
//! `docs/MMLU576.md` and `docs/DATASETS.md`.
//!
//! Map: [`mmlu`] (the CSV reader) → [`subset`] (MMLU-576 and its manifest) → [`prompt`]
//! (5-shot, 0-shot, chat) → [`score`] (answer choice, accuracy, McNemar; the statistics are
//! `pocketperf-stats`'); [`dialogue`] (scripted chats); [`perf`] (the performance prompt
//! set); [`error`].

pub mod dialogue;
pub mod error;
pub mod mmlu;
pub mod perf;
pub mod prompt;
pub mod score;
pub mod subset;

pub use dialogue::{DIALOGUE_NEW_TOKENS, Dialogue, Turn, dialogues};
pub use error::{Error, Result};
pub use mmlu::{
    Category, Letter, Question, Split, SubjectInfo, categories, category_of, load_split,
    resolve_mmlu_dir, subjects,
};
pub use perf::{PerfPrompt, Preset, perf_prompts};
pub use prompt::{ChatMessage, ChatPrompt, Prompt, Role, build_chat, build_prompt, zero_shot};
pub use score::{
    Accuracy, McNemar, Record, Response, Summary, compare_runs, mcnemar_exact,
    parse_generated_settled, summarize,
};
pub use subset::load_dev_shots;
pub use subset::{
    Difference, SubsetEntry, VerifyReport, compute_subset, load_subset, manifest, verify,
};
