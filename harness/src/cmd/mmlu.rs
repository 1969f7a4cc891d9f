//! `pocketperf mmlu`: the MMLU-576 accuracy mode (specified in `docs/MMLU576.md`).
//!
//! - `mmlu subset [--verify]` recomputes the subset from a copy of MMLU and, with `--verify`,
//!   lists every difference from the committed manifest (exit 1 when there is one).
//! - `mmlu run` builds the prompts (5-shot original format, 0-shot, or chat), runs every
//!   selected question exactly once through the scenario engine's accuracy mode
//!   (`TestMode::AccuracyOnly`) with the in-process runtime as the system under test, scores
//!   the responses read back from the accuracy log, and writes `result.json` (reports schema),
//!   `mmlu.json` (every detail, with provenance) and the MLPerf logs, among them
//!   `mlperf_log_accuracy.json`.
//! - `mmlu compare A B` pairs two runs by question and applies the exact McNemar test.
//!
//! Prefix reuse: the SUT keeps the tokens its KV cache holds and, for the next prompt, rewinds
//! the cache to the longest common token prefix instead of starting over. Questions are issued
//! in manifest order (by subject), so the header and shots of a subject are prefilled once and
//! every further question of the subject prefills only its own text. The prompt is always
//! tokenized whole, so reuse changes which tokens are recomputed, never which tokens the model
//! sees; `--prefix-reuse off` recomputes every prompt from an empty cache.

use crate::outputs::{log_meta, run_meta};
use crate::cmd::runtime::EngineArgs;
use crate::meta::{self, OutputHeader};
use crate::sut::prompts::{PromptText, default_system, encode_prompt};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::ProgressBar;
use pocketperf_datasets::mmlu::{self as ds_mmlu, Category, Letter, Question};
use pocketperf_datasets::prompt::{self, ChatMessage as DsMessage, Role};
use pocketperf_datasets::score::{self, Accuracy, Record, Response, Summary};
use pocketperf_datasets::subset;
use pocketperf_reports::schema::{self, GroupAccuracy, QuestionRecord, ResultFile};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, Session, argmax};
use pocketperf_runtime::tokenizer::ChatMessage;
use pocketperf_scenarios::{
    AccuracyEntry, QslError, Query, QuerySampleLibrary, RealClock, Responder, Scenario,
    SystemUnderTest, TestMode, TestSettings, run_test,
};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Schema version of `mmlu.json`.
pub const MMLU_JSON_SCHEMA: u32 = 1;
/// File name of the detailed accuracy file inside a result directory.
pub const MMLU_JSON: &str = "mmlu.json";
/// Largest number of tokens generated per question in `generate` mode (MLPerf Mobile's rule).
pub const GENERATE_MAX_TOKENS: usize = 4;

#[derive(Subcommand, Debug)]
pub enum MmluCmd {
    /// Recompute the MMLU-576 subset from a copy of MMLU (prints the manifest); with
    /// --verify, compare it with the committed manifest and exit 1 on any difference.
    Subset(SubsetArgs),
    /// Score the model on MMLU-576 (or a slice of it) through the scenario engine's
    /// accuracy mode.
    Run(MmluRunArgs),
    /// Paired comparison of two runs (exact McNemar test on the discordant questions).
    Compare(CompareArgs),
}

#[derive(Args, Debug)]
pub struct SubsetArgs {
    /// Compare the subset recomputed from the copy with the committed manifest.
    #[arg(long)]
    pub verify: bool,
    /// MMLU directory (default: $POCKETPERF_MMLU_DIR).
    #[arg(long)]
    pub mmlu_dir: Option<PathBuf>,
    /// Print the verification report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How an answer is read from the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoreMode {
    /// Next-token log-probabilities of the four answer letters (the original MMLU method).
    Logprob,
    /// Greedy generation of at most 4 tokens; the first standalone A–D (MLPerf Mobile).
    Generate,
}

impl ScoreMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ScoreMode::Logprob => "logprob",
            ScoreMode::Generate => "generate",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

#[derive(Args, Debug, Serialize)]
pub struct MmluRunArgs {
    #[arg(long, value_enum, default_value = "logprob")]
    pub mode: ScoreMode,
    /// Few-shot examples per prompt: the first N dev rows of the subject (0 to 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=5))]
    pub shots: u32,
    /// Ask in the model's chat template (instruct models) instead of the plain text format.
    #[arg(long)]
    pub chat: bool,
    /// Only these subjects (comma-separated), e.g. abstract_algebra,anatomy.
    #[arg(long, value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// At most N questions from each subject (the first N of the manifest).
    #[arg(long)]
    pub limit: Option<usize>,
    /// MMLU directory (default: $POCKETPERF_MMLU_DIR).
    #[arg(long)]
    pub mmlu_dir: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Context in tokens; a prompt that does not fit drops whole shots from the front.
    #[arg(long, default_value_t = 2048)]
    pub ctx: usize,
    /// Largest prefill batch (tokens per forward call).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Reuse the KV cache of the common prompt prefix (the header and shots of a subject).
    #[arg(long, value_enum, default_value = "on")]
    pub prefix_reuse: OnOff,
    /// Build and tokenize every prompt, print the prefill work with and without prefix
    /// reuse, and stop (no model run, no files).
    #[arg(long)]
    pub dry_run: bool,
    /// Result directory (created).
    #[arg(long, required_unless_present = "dry_run")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Baseline: a result directory, or its result.json.
    pub run_a: PathBuf,
    /// Candidate: a result directory, or its result.json.
    pub run_b: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn mmlu_cmd(cmd: &MmluCmd) -> Result<i32> {
    match cmd {
        MmluCmd::Subset(a) => subset_cmd(a),
        MmluCmd::Run(a) => run(a),
        MmluCmd::Compare(a) => compare(a),
    }
}

// ---------------------------------------------------------------------------------------------
// mmlu subset
// ---------------------------------------------------------------------------------------------

fn subset_cmd(a: &SubsetArgs) -> Result<i32> {
    let dir = ds_mmlu::resolve_mmlu_dir(a.mmlu_dir.as_deref())?;
    if !a.verify {
        let entries = subset::compute_subset(&dir)?;
        print!("{}", subset::manifest_csv(&entries));
        return Ok(0);
    }
    let report = subset::verify(&dir)?;
    if a.json {
        let header = serde_json::json!({
            "schema_version": 1, "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION,
            "git_commit": meta::GIT_COMMIT, "device": meta::local_host(),
            "timestamp_utc": meta::now_utc(),
            "settings": { "mmlu_dir": dir.display().to_string() },
        });
        let doc = serde_json::json!({
            "header": header,
            "match": report.is_match(),
            "report": report,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if report.is_match() {
        println!(
            "{}: matches the MMLU-576 manifest ({} entries; {} test rows in {} subjects)",
            dir.display(),
            report.manifest_entries,
            report.test_rows,
            report.subjects
        );
    } else {
        println!(
            "{}: {} difference(s) from the MMLU-576 manifest ({} test rows in {} subjects):",
            dir.display(),
            report.differences.len(),
            report.test_rows,
            report.subjects
        );
        for d in &report.differences {
            println!("  {d}");
        }
    }
    Ok(if report.is_match() { 0 } else { 1 })
}

// ---------------------------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------------------------

/// One question ready to run: its prompt as token ids.
#[derive(Debug, Clone)]
pub struct Item {
    pub question: Question,
    pub category: Category,
    pub tokens: Vec<u32>,
    /// Shots in the prompt (fewer than asked when the prompt had to fit the context).
    pub shots_used: usize,
}

/// Token ids of a plain-text prompt (BOS first when the model wants one). Question text is
/// never parsed for control tokens.
pub fn encode_text(engine: &Engine, text: &str) -> Result<Vec<u32>> {
    Ok(encode_prompt(
        &engine.tokenizer,
        PromptText::Raw {
            text,
            special: false,
        },
    )?)
}

/// Token ids of chat messages rendered with the model's template (its default system prompt
/// included), ending with the assistant header.
pub fn encode_chat(engine: &Engine, messages: &[DsMessage]) -> Result<Vec<u32>> {
    let msgs: Vec<ChatMessage> = messages
        .iter()
        .map(|m| ChatMessage {
            role: match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            }
            .to_string(),
            content: m.content.clone(),
        })
        .collect();
    let system = default_system(engine);
    Ok(encode_prompt(
        &engine.tokenizer,
        PromptText::Chat {
            messages: &msgs,
            system: system.as_deref(),
        },
    )?)
}

/// The token of each answer letter: `" A"` … `" D"` after a text prompt (which ends with
/// `Answer:`), `"A"` … `"D"` after the assistant header of a chat prompt. Each must be a
/// single token of the vocabulary.
pub fn letter_tokens(engine: &Engine, chat: bool) -> Result<[u32; 4]> {
    let mut out = [0u32; 4];
    for (slot, l) in out.iter_mut().zip(Letter::ALL) {
        let piece = if chat {
            l.as_char().to_string()
        } else {
            format!(" {}", l.as_char())
        };
        let ids = engine.tokenizer.encode(&piece, false)?;
        match ids.as_slice() {
            [id] => *slot = *id,
            _ => bail!(
                "the tokenizer encodes the answer {piece:?} as {} tokens {ids:?}; logprob \
                 scoring needs one token per answer letter",
                ids.len()
            ),
        }
    }
    Ok(out)
}

/// Builds the prompt of every question: `shots` first dev rows of its subject, whole shots
/// dropped from the front until the prompt plus `reserve` tokens fits `ctx`.
pub fn prepare_items(
    engine: &Engine,
    questions: &[Question],
    dev: &BTreeMap<String, Vec<Question>>,
    shots: usize,
    chat: bool,
    ctx: usize,
    reserve: usize,
) -> Result<Vec<Item>> {
    let mut items = Vec::with_capacity(questions.len());
    for q in questions {
        let all_shots = dev
            .get(&q.subject)
            .ok_or_else(|| anyhow!("no dev split loaded for subject {}", q.subject))?;
        if all_shots.len() < shots {
            bail!(
                "subject {}: --shots {shots} but its dev split has {} rows",
                q.subject,
                all_shots.len()
            );
        }
        let offered = &all_shots[..shots];
        // `fits` keeps the tokens of the last prompt it saw, so each accepted prompt is
        // tokenized once; a tokenizer error is kept and reported after the search.
        let last: RefCell<Option<Result<Vec<u32>>>> = RefCell::new(None);
        let fits = |ids: Result<Vec<u32>>| -> bool {
            let ok = match &ids {
                Ok(v) => v.len() + reserve <= ctx,
                Err(_) => true,
            };
            *last.borrow_mut() = Some(ids);
            ok
        };
        let shots_used = if chat {
            prompt::build_chat(q, offered, |m| fits(encode_chat(engine, m)))?.shots_used
        } else {
            prompt::build_prompt(q, offered, |t| fits(encode_text(engine, t)))?.shots_used
        };
        let tokens = last
            .into_inner()
            .ok_or_else(|| anyhow!("{} row {}: no prompt was built", q.subject, q.row))?
            .with_context(|| format!("tokenizing the prompt of {} row {}", q.subject, q.row))?;
        items.push(Item {
            category: ds_mmlu::category_of(&q.subject)?,
            question: q.clone(),
            tokens,
            shots_used,
        });
    }
    Ok(items)
}

/// The order questions are issued in (the QSL order): by subject, and within a subject the
/// prompts with the most shots first, then by row. Prompts that share a subject and a shot
/// count share their whole few-shot prefix, so each such group prefills it once; a prompt that
/// had to drop shots no longer interrupts the 5-shot prompts around it.
pub fn issue_order(items: &mut [Item]) {
    items.sort_by(|a, b| {
        a.question
            .subject
            .cmp(&b.question.subject)
            .then(b.shots_used.cmp(&a.shots_used))
            .then(a.question.row.cmp(&b.question.row))
    });
}

/// The questions a run asks: the manifest's, filtered by subject and capped per subject.
pub fn select_questions(
    all: Vec<Question>,
    subjects: &[String],
    limit: Option<usize>,
) -> Result<Vec<Question>> {
    let known: BTreeSet<&str> = all.iter().map(|q| q.subject.as_str()).collect();
    let wanted: BTreeSet<&str> = subjects.iter().map(|s| s.trim()).collect();
    if let Some(bad) = wanted.iter().find(|s| !known.contains(**s)) {
        bail!(
            "--subjects: {bad:?} is not an MMLU subject (known: {})",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        );
    }
    let mut per_subject: BTreeMap<String, usize> = BTreeMap::new();
    let out: Vec<Question> = all
        .into_iter()
        .filter(|q| wanted.is_empty() || wanted.contains(q.subject.as_str()))
        .filter(|q| {
            let n = per_subject.entry(q.subject.clone()).or_default();
            *n += 1;
            limit.is_none_or(|l| *n <= l)
        })
        .collect();
    if out.is_empty() {
        bail!("no questions selected (check --subjects and --limit)");
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The system under test and its sample library
// ---------------------------------------------------------------------------------------------

/// The prepared questions as the scenario engine's sample library. Prompts are tokenized
/// before the run (the context fit needs the tokenizer), so loading checks indices only.
struct MmluQsl {
    n: u64,
}

impl QuerySampleLibrary for MmluQsl {
    fn name(&self) -> &str {
        "mmlu-576"
    }
    fn total_sample_count(&self) -> u64 {
        self.n
    }
    fn performance_sample_count(&self) -> u64 {
        self.n
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        match indices.iter().find(|&&i| i >= self.n) {
            Some(i) => Err(format!("sample {i} is outside the {} questions", self.n).into()),
            None => Ok(()),
        }
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

/// What one question cost.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QuestionCost {
    /// Tokens of the full prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was reused from the previous question.
    pub reused_tokens: usize,
    /// Tokens generated (generate mode).
    pub generated_tokens: usize,
    /// Wall time of the question, milliseconds.
    pub ms: f64,
}

/// The in-process runtime answering MMLU questions. Output bytes per query (the accuracy
/// log's `data`): logprob mode, the four log-probabilities as little-endian f32; generate
/// mode, the generated token ids as little-endian u32.
struct MmluSut<'e, 'i> {
    session: Session<'e>,
    items: &'i [Item],
    mode: ScoreMode,
    letters: [u32; 4],
    reuse: bool,
    /// Tokens the KV cache holds, in order.
    cached: Vec<u32>,
    costs: Vec<Option<QuestionCost>>,
    errors: Vec<String>,
    progress: ProgressBar,
}

/// Log-probabilities of `ids` in one row of logits: the log-softmax in f64 (as
/// [`pocketperf_runtime::session::log_prob`] computes it, same summation order), with the
/// normalizer computed once for the four tokens; rounded to f32.
pub fn letter_logprobs(logits: &[f32], ids: [u32; 4]) -> [f32; 4] {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&l| (l as f64 - mx).exp())
        .sum::<f64>()
        .ln()
        + mx;
    ids.map(|id| {
        logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32)
    })
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Prompt tokens the SUT can take from its cache for each question, in order, when each
/// prompt follows the previous one: their longest common prefix, leaving at least one token to
/// run. (In generate mode the cache also holds the previous answer's tokens, which can only
/// lengthen the common prefix if the next prompt repeats them; the SUT measures what it
/// actually reuses.)
pub fn reuse_plan(items: &[Item]) -> Vec<usize> {
    let mut prev: &[u32] = &[];
    items
        .iter()
        .map(|i| {
            let keep = common_prefix(prev, &i.tokens).min(i.tokens.len().saturating_sub(1));
            prev = &i.tokens;
            keep
        })
        .collect()
}

impl MmluSut<'_, '_> {
    fn answer(&mut self, item: &Item) -> Result<(Vec<u8>, QuestionCost)> {
        let t0 = Instant::now();
        let engine = self.session.engine();
        let toks = &item.tokens;
        if toks.is_empty() {
            bail!("empty prompt");
        }
        // Keep at least one prompt token to run: its logits are the answer.
        let keep = if self.reuse {
            common_prefix(&self.cached, toks).min(toks.len() - 1)
        } else {
            0
        };
        if keep == 0 {
            self.session.reset();
        } else {
            self.session.truncate(keep)?;
        }
        self.cached.truncate(keep);
        let mut cost = QuestionCost {
            prompt_tokens: toks.len(),
            reused_tokens: keep,
            ..QuestionCost::default()
        };
        // Should prefill fail midway, the cache no longer mirrors `cached`: start over.
        let logits = match self.session.prefill(&toks[keep..]) {
            Ok(l) => l,
            Err(e) => {
                self.cached.clear();
                return Err(e.into());
            }
        };
        self.cached.extend_from_slice(&toks[keep..]);
        let bytes = match self.mode {
            ScoreMode::Logprob => {
                let lp = letter_logprobs(logits, self.letters);
                lp.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
            ScoreMode::Generate => {
                let mut generated: Vec<u32> = Vec::with_capacity(GENERATE_MAX_TOKENS);
                let mut tok = argmax(logits);
                loop {
                    generated.push(tok);
                    if engine.tokenizer.is_eog(tok) || generated.len() >= GENERATE_MAX_TOKENS {
                        break;
                    }
                    // Stop once the choice can no longer change (docs/MMLU576.md).
                    if score::parse_generated_settled(&engine.tokenizer.decode(&generated))
                        .is_some()
                    {
                        break;
                    }
                    let next = match self.session.decode(tok) {
                        Ok(l) => argmax(l),
                        Err(e) => {
                            self.cached.clear();
                            return Err(e.into());
                        }
                    };
                    self.cached.push(tok);
                    tok = next;
                }
                cost.generated_tokens = generated.len();
                generated.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        cost.ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok((bytes, cost))
    }
}

impl SystemUnderTest for MmluSut<'_, '_> {
    fn name(&self) -> &str {
        "pocketperf-runtime (in-process, MMLU)"
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        for q in queries {
            let i = q.sample_index as usize;
            let Some(item) = self.items.get(i) else {
                self.errors
                    .push(format!("query {}: sample {i} does not exist", q.id));
                responder.complete(q.id, 0, Some(&[]));
                continue;
            };
            match self.answer(item) {
                Ok((bytes, cost)) => {
                    if let Some(slot) = self.costs.get_mut(i) {
                        *slot = Some(cost);
                    }
                    responder.complete(q.id, cost.generated_tokens as u64, Some(&bytes));
                }
                Err(e) => {
                    self.errors.push(format!(
                        "{} row {} (sample {i}): {e:#}",
                        item.question.subject, item.question.row
                    ));
                    // Complete it anyway: the question is scored as unanswered and the run
                    // goes on; the error is reported and fails the command.
                    responder.complete(q.id, 0, Some(&[]));
                }
            }
            self.progress.inc(1);
        }
    }
}

/// The four log-probabilities of a logprob-mode accuracy-log entry (16 bytes, little-endian
/// f32); an empty entry (a question the SUT failed on) reads as four NaNs: no answer.
pub fn decode_logprobs(data: &[u8]) -> Result<[f32; 4]> {
    match data.len() {
        0 => Ok([f32::NAN; 4]),
        16 => {
            let mut lp = [0f32; 4];
            for (x, c) in lp.iter_mut().zip(data.chunks_exact(4)) {
                *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            Ok(lp)
        }
        n => bail!("accuracy log entry of {n} bytes; logprob entries hold 16 (4 × f32)"),
    }
}

/// The token ids of a generate-mode accuracy-log entry (little-endian u32).
pub fn decode_ids(data: &[u8]) -> Result<Vec<u32>> {
    if !data.len().is_multiple_of(4) {
        bail!(
            "accuracy log entry of {} bytes; generate entries hold u32 token ids",
            data.len()
        );
    }
    Ok(data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Reads one accuracy-log entry back into a response (and, in generate mode, the token ids).
pub fn decode_response(
    mode: ScoreMode,
    data: &[u8],
    engine: &Engine,
) -> Result<(Response, Vec<u32>)> {
    match mode {
        ScoreMode::Logprob => Ok((
            Response::Logprob {
                logprobs: decode_logprobs(data)?,
            },
            Vec::new(),
        )),
        ScoreMode::Generate => {
            let ids = decode_ids(data)?;
            let visible: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&t| !engine.tokenizer.is_eog(t))
                .collect();
            let text = engine.tokenizer.decode(&visible);
            Ok((Response::Generate { text }, ids))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mmlu run
// ---------------------------------------------------------------------------------------------

/// One question in `mmlu.json`.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionOut {
    /// QSL sample index (the accuracy log's `qsl_idx`).
    pub qsl_idx: u64,
    #[serde(flatten)]
    pub record: Record,
    pub shots_used: usize,
    /// Generated token ids (generate mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub generated_ids: Vec<u32>,
    #[serde(flatten)]
    pub cost: QuestionCost,
}

/// Prefill work with and without prefix reuse.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReuseStats {
    pub enabled: bool,
    /// Sum of the full prompt lengths.
    pub prompt_tokens: u64,
    /// Prompt tokens taken from the cache.
    pub reused_tokens: u64,
    /// Prompt tokens actually prefilled.
    pub prefilled_tokens: u64,
    /// `prompt_tokens / prefilled_tokens`: how much less prefill work reuse does.
    pub work_ratio: f64,
}

/// Accuracy of one group with its interval, for `mmlu.json`.
#[derive(Debug, Clone, Serialize)]
pub struct GroupOut {
    pub name: String,
    #[serde(flatten)]
    pub accuracy: Accuracy,
}

/// `mmlu.json`: everything `mmlu run` measured.
#[derive(Debug, Clone, Serialize)]
pub struct MmluFile {
    pub header: OutputHeader,
    pub dataset: String,
    pub mode: ScoreMode,
    pub shots: u32,
    pub chat: bool,
    pub ctx: usize,
    pub batch: usize,
    pub isa: String,
    pub threads: usize,
    /// Token ids scored for A, B, C, D (logprob mode) with their text.
    pub letter_tokens: [u32; 4],
    pub letter_pieces: [String; 4],
    pub questions: usize,
    /// Questions whose prompt dropped shots to fit the context, and the shots dropped.
    pub prompts_with_dropped_shots: usize,
    pub shots_dropped: usize,
    pub overall: Accuracy,
    pub unparsed: u64,
    pub by_category: Vec<GroupOut>,
    pub by_subject: Vec<GroupOut>,
    pub reuse: ReuseStats,
    /// Tokenizing and fitting the prompts, seconds.
    pub prepare_s: f64,
    /// The accuracy pass through the scenario engine, seconds.
    pub wall_s: f64,
    pub errors: Vec<String>,
    pub per_question: Vec<QuestionOut>,
}

fn group_out(name: String, a: &Accuracy) -> GroupOut {
    GroupOut { name, accuracy: *a }
}

fn group_schema(name: String, a: &Accuracy) -> GroupAccuracy {
    GroupAccuracy {
        name,
        n: a.total,
        correct: a.correct,
        accuracy: a.accuracy,
    }
}

pub fn run(a: &MmluRunArgs) -> Result<i32> {
    if a.ctx < 16 {
        bail!("--ctx {}: too small (at least 16)", a.ctx);
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if a.limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    let dir = ds_mmlu::resolve_mmlu_dir(a.mmlu_dir.as_deref())?;
    // Refuses a copy that does not match the manifest, naming subject, row and reason.
    let all = subset::load_subset(&dir)?;
    let questions = select_questions(all, &a.subjects, a.limit)?;
    let dev = ds_mmlu::load_dev_shots(&dir, questions.iter().map(|q| q.subject.as_str()))?;
    let (engine, model_path) = a.engine.load()?;
    let letters = letter_tokens(&engine, a.chat)?;
    let reserve = match a.mode {
        ScoreMode::Logprob => 0,
        // The last generated token is never fed back.
        ScoreMode::Generate => GENERATE_MAX_TOKENS - 1,
    };
    let t_prep = Instant::now();
    let mut items = prepare_items(
        &engine,
        &questions,
        &dev,
        a.shots as usize,
        a.chat,
        a.ctx,
        reserve,
    )?;
    issue_order(&mut items);
    let prepare_s = t_prep.elapsed().as_secs_f64();
    if a.dry_run {
        print_plan(&items, a, prepare_s);
        return Ok(0);
    }
    let Some(out_dir) = a.out.as_deref() else {
        bail!("--out DIR is required (unless --dry-run)");
    };
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("{}: cannot create", out_dir.display()))?;

    let mut settings = TestSettings::new(Scenario::Offline);
    settings.mode = TestMode::AccuracyOnly;
    settings.performance_sample_count_override = items.len() as u64;
    settings.query_timeout_ms = 0;

    let session = engine.session(SessionOptions {
        max_seq_len: a.ctx,
        max_batch: a.batch,
        ..Default::default()
    })?;
    let progress = crate::progress::bar(
        items.len() as u64,
        &format!("MMLU {} {}-shot", a.mode.as_str(), a.shots),
    );
    let mut sut = MmluSut {
        session,
        items: &items,
        mode: a.mode,
        letters,
        reuse: a.prefix_reuse == OnOff::On,
        cached: Vec::new(),
        costs: vec![None; items.len()],
        errors: Vec::new(),
        progress,
    };
    let mut qsl = MmluQsl {
        n: items.len() as u64,
    };
    let started = chrono::Utc::now();
    let clock = RealClock::new();
    let t_run = Instant::now();
    let result = run_test(&mut sut, &mut qsl, &settings, &clock)?;
    let wall_s = t_run.elapsed().as_secs_f64();
    sut.progress.finish_and_clear();
    let finished = chrono::Utc::now();
    let errors = std::mem::take(&mut sut.errors);
    let costs = std::mem::take(&mut sut.costs);
    drop(sut);

    let entries: &[AccuracyEntry] = result.accuracy.as_deref().unwrap_or(&[]);
    let mut seen = vec![false; items.len()];
    let mut records = Vec::with_capacity(items.len());
    let mut per_question = Vec::with_capacity(items.len());
    for e in entries {
        let idx = e.qsl_idx as usize;
        let item = items
            .get(idx)
            .ok_or_else(|| anyhow!("accuracy log names sample {idx}, outside the run"))?;
        if std::mem::replace(&mut seen[idx], true) {
            bail!("accuracy log holds sample {idx} twice");
        }
        let (response, generated_ids) = decode_response(a.mode, &e.data, &engine)
            .with_context(|| format!("accuracy log entry {} (sample {idx})", e.seq_id))?;
        let record = match response {
            Response::Logprob { logprobs } => Record::from_logprobs(&item.question, logprobs)?,
            Response::Generate { text } => Record::from_generated(&item.question, &text)?,
        };
        records.push(record.clone());
        per_question.push(QuestionOut {
            qsl_idx: e.qsl_idx,
            record,
            shots_used: item.shots_used,
            generated_ids,
            cost: costs.get(idx).copied().flatten().unwrap_or_default(),
        });
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        bail!(
            "the accuracy pass did not answer sample {missing} ({} row {}); {} of {} answered",
            items[missing].question.subject,
            items[missing].question.row,
            entries.len(),
            items.len()
        );
    }
    // Report in manifest order (subject, row), whatever order the questions ran in.
    per_question.sort_by(|x, y| {
        (x.record.subject.as_str(), x.record.row).cmp(&(y.record.subject.as_str(), y.record.row))
    });
    let summary = score::summarize(&records);

    let prompt_tokens: u64 = items.iter().map(|i| i.tokens.len() as u64).sum();
    let reused_tokens: u64 = per_question
        .iter()
        .map(|q| q.cost.reused_tokens as u64)
        .sum();
    let prefilled = prompt_tokens - reused_tokens.min(prompt_tokens);
    let reuse = ReuseStats {
        enabled: a.prefix_reuse == OnOff::On,
        prompt_tokens,
        reused_tokens,
        prefilled_tokens: prefilled,
        work_ratio: if prefilled > 0 {
            prompt_tokens as f64 / prefilled as f64
        } else {
            0.0
        },
    };
    let full_subset = a.subjects.is_empty() && a.limit.is_none();
    let dataset = if full_subset {
        "mmlu-576".to_string()
    } else {
        "mmlu-576-slice".to_string()
    };
    let shots_dropped: usize = items.iter().map(|i| a.shots as usize - i.shots_used).sum();
    let with_dropped = items
        .iter()
        .filter(|i| i.shots_used < a.shots as usize)
        .count();

    let settings_json = serde_json::json!({
        "cli": a,
        "mmlu_dir": dir.display().to_string(),
        "manifest": "datasets/mmlu/subset-576.csv",
        "test_settings": &settings,
    });
    let model_sha = meta::model_sha256(&model_path);
    let mut warnings: Vec<String> = errors.iter().take(20).cloned().collect();
    if errors.len() > 20 {
        warnings.push(format!("{} more SUT errors", errors.len() - 20));
    }
    if with_dropped > 0 {
        warnings.push(format!(
            "{with_dropped} prompt(s) dropped {shots_dropped} shot(s) in all to fit --ctx {}",
            a.ctx
        ));
    }

    let mmlu_file = MmluFile {
        header: OutputHeader::new(
            MMLU_JSON_SCHEMA,
            &model_path,
            &model_sha,
            settings_json.clone(),
        ),
        dataset: dataset.clone(),
        mode: a.mode,
        shots: a.shots,
        chat: a.chat,
        ctx: a.ctx,
        batch: a.batch,
        isa: engine.isa().name().to_string(),
        threads: engine.threads(),
        letter_tokens: letters,
        letter_pieces: letters.map(|t| engine.tokenizer.decode(&[t])),
        questions: items.len(),
        prompts_with_dropped_shots: with_dropped,
        shots_dropped,
        overall: summary.overall,
        unparsed: summary.unparsed,
        by_category: summary
            .by_category
            .iter()
            .map(|(c, acc)| group_out(c.to_string(), acc))
            .collect(),
        by_subject: summary
            .by_subject
            .iter()
            .map(|(s, acc)| group_out(s.clone(), acc))
            .collect(),
        reuse,
        prepare_s,
        wall_s,
        errors: errors.clone(),
        per_question: per_question.clone(),
    };
    let path = out_dir.join(MMLU_JSON);
    std::fs::write(&path, serde_json::to_string_pretty(&mmlu_file)? + "\n")
        .with_context(|| format!("{}: cannot write", path.display()))?;

    let mut run_meta = run_meta(&engine, &model_path, "local", settings_json, started);
    run_meta.model.sha256 = model_sha;
    run_meta.finished_utc = finished;
    let file = ResultFile {
        schema_version: schema::SCHEMA_VERSION,
        meta: run_meta,
        performance: None,
        accuracy: Some(accuracy_section(
            &dataset,
            a.mode,
            a.shots,
            &summary,
            &per_question,
            wall_s,
        )),
        energy: None,
        thermal: None,
        governor: None,
        robustness: None,
        warnings,
    };
    schema::write_result(out_dir, &file)?;
    result.write_logs(out_dir, &log_meta(&started, &finished))?;

    print_summary(&mmlu_file);
    println!("results in {}", out_dir.display());
    if !errors.is_empty() {
        bail!(
            "{} of {} questions failed in the runtime (scored as unanswered; first: {})",
            errors.len(),
            items.len(),
            errors[0]
        );
    }
    Ok(0)
}

fn print_plan(items: &[Item], a: &MmluRunArgs, prepare_s: f64) {
    let prompt: usize = items.iter().map(|i| i.tokens.len()).sum();
    let reused: usize = reuse_plan(items).iter().sum();
    let longest = items.iter().map(|i| i.tokens.len()).max().unwrap_or(0);
    let dropped = items
        .iter()
        .filter(|i| i.shots_used < a.shots as usize)
        .count();
    println!(
        "{} questions, {}-shot{}, --ctx {}: {prompt} prompt tokens (mean {:.0}, longest {longest}); \
         {dropped} prompt(s) dropped shots; prepared in {prepare_s:.1} s",
        items.len(),
        a.shots,
        if a.chat { " chat" } else { "" },
        a.ctx,
        prompt as f64 / items.len().max(1) as f64,
    );
    println!(
        "prefill with prefix reuse: {} tokens ({reused} reused, {:.2}x less than the {prompt} without)",
        prompt - reused,
        prompt as f64 / (prompt - reused).max(1) as f64
    );
    for i in items.iter().filter(|i| i.shots_used < a.shots as usize) {
        println!(
            "  {} row {}: {} of {} shots ({} tokens)",
            i.question.subject,
            i.question.row,
            i.shots_used,
            a.shots,
            i.tokens.len()
        );
    }
}

fn accuracy_section(
    dataset: &str,
    mode: ScoreMode,
    shots: u32,
    summary: &Summary,
    per_question: &[QuestionOut],
    wall_s: f64,
) -> schema::Accuracy {
    let o = &summary.overall;
    schema::Accuracy {
        dataset: dataset.to_string(),
        mode: mode.as_str().to_string(),
        shots,
        n: o.total,
        correct: o.correct,
        accuracy: o.accuracy,
        ci95: [o.ci95_low, o.ci95_high],
        per_subject: summary
            .by_subject
            .iter()
            .map(|(s, acc)| group_schema(s.clone(), acc))
            .collect(),
        per_category: summary
            .by_category
            .iter()
            .map(|(c, acc)| group_schema(c.to_string(), acc))
            .collect(),
        per_question: per_question
            .iter()
            .map(|q| {
                let r = &q.record;
                let (logprobs, generated) = match &r.response {
                    Response::Logprob { logprobs } => (Some(logprobs.map(f64::from)), None),
                    Response::Generate { text } => (None, Some(text.clone())),
                };
                QuestionRecord {
                    subject: r.subject.clone(),
                    row: r.row,
                    answer: r.answer.as_char(),
                    choice: r.choice.map(Letter::as_char),
                    logprobs,
                    generated,
                    correct: r.correct,
                }
            })
            .collect(),
        wall_s,
    }
}

fn pct(a: &Accuracy) -> String {
    format!(
        "{:.1}% [{:.1}, {:.1}] ({}/{})",
        100.0 * a.accuracy,
        100.0 * a.ci95_low,
        100.0 * a.ci95_high,
        a.correct,
        a.total
    )
}

fn print_summary(f: &MmluFile) {
    println!(
        "{} {} {}-shot{}: accuracy {} (Wilson 95%), {} unparsed",
        f.dataset,
        f.mode.as_str(),
        f.shots,
        if f.chat { " chat" } else { "" },
        pct(&f.overall),
        f.unparsed
    );
    for g in &f.by_category {
        println!("  {:<34} {}", g.name, pct(&g.accuracy));
    }
    println!(
        "wall {:.1} s for {} questions at {} threads ({}); prefilled {} of {} prompt tokens{}",
        f.wall_s,
        f.questions,
        f.threads,
        f.isa,
        f.reuse.prefilled_tokens,
        f.reuse.prompt_tokens,
        if f.reuse.enabled {
            format!(" (prefix reuse: {:.2}x less prefill)", f.reuse.work_ratio)
        } else {
            " (prefix reuse off)".to_string()
        }
    );
    if f.prompts_with_dropped_shots > 0 {
        println!(
            "{} prompt(s) dropped {} shot(s) to fit --ctx {}",
            f.prompts_with_dropped_shots, f.shots_dropped, f.ctx
        );
    }
}

// ---------------------------------------------------------------------------------------------
// mmlu compare
// ---------------------------------------------------------------------------------------------

fn load_run(p: &Path) -> Result<ResultFile> {
    let dir = if p.is_dir() {
        p.to_path_buf()
    } else if p.file_name().is_some_and(|n| n == schema::RESULT_FILE) {
        p.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        bail!(
            "{}: not a result directory or a {}",
            p.display(),
            schema::RESULT_FILE
        );
    };
    Ok(schema::load_result(&dir)?)
}

/// The scored questions of a result file, as records.
pub fn records_of(r: &ResultFile, what: &Path) -> Result<(schema::Accuracy, Vec<Record>)> {
    let acc = r
        .accuracy
        .clone()
        .ok_or_else(|| anyhow!("{}: the run has no accuracy section", what.display()))?;
    if acc.per_question.is_empty() {
        bail!(
            "{}: the accuracy section lists no questions",
            what.display()
        );
    }
    let letter = |c: char, field: &str, q: &QuestionRecord| -> Result<Letter> {
        Letter::from_char(c).ok_or_else(|| {
            anyhow!(
                "{}: {} row {}: {field} {c:?} is not A-D",
                what.display(),
                q.subject,
                q.row
            )
        })
    };
    let mut out = Vec::with_capacity(acc.per_question.len());
    for q in &acc.per_question {
        let response = match (&q.logprobs, &q.generated) {
            (Some(lp), _) => Response::Logprob {
                logprobs: lp.map(|x| x as f32),
            },
            (None, Some(t)) => Response::Generate { text: t.clone() },
            (None, None) => Response::Generate {
                text: String::new(),
            },
        };
        out.push(Record {
            subject: q.subject.clone(),
            row: q.row,
            category: ds_mmlu::category_of(&q.subject)
                .with_context(|| format!("{}", what.display()))?,
            answer: letter(q.answer, "answer", q)?,
            choice: q.choice.map(|c| letter(c, "choice", q)).transpose()?,
            response,
            correct: q.correct,
        });
    }
    Ok((acc, out))
}

fn compare(a: &CompareArgs) -> Result<i32> {
    let ra = load_run(&a.run_a)?;
    let rb = load_run(&a.run_b)?;
    let (acc_a, rec_a) = records_of(&ra, &a.run_a)?;
    let (acc_b, rec_b) = records_of(&rb, &a.run_b)?;
    let m = score::compare_runs(&rec_a, &rec_b)
        .with_context(|| format!("{} vs {}", a.run_a.display(), a.run_b.display()))?;
    let sa = score::summarize(&rec_a).overall;
    let sb = score::summarize(&rec_b).overall;
    let label = |acc: &schema::Accuracy| format!("{} {} {}-shot", acc.dataset, acc.mode, acc.shots);
    if a.json {
        let doc = serde_json::json!({
            "schema_version": 1, "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION,
            "git_commit": meta::GIT_COMMIT, "timestamp_utc": meta::now_utc(),
            "baseline": { "path": a.run_a.display().to_string(), "run": label(&acc_a),
                "git_commit": ra.meta.git_commit, "model_sha256": ra.meta.model.sha256,
                "accuracy": sa },
            "candidate": { "path": a.run_b.display().to_string(), "run": label(&acc_b),
                "git_commit": rb.meta.git_commit, "model_sha256": rb.meta.model.sha256,
                "accuracy": sb },
            "mcnemar": m,
            "difference": sb.accuracy - sa.accuracy,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("baseline  {}: {}", label(&acc_a), pct(&sa));
        println!("candidate {}: {}", label(&acc_b), pct(&sb));
        println!(
            "paired over {} questions: {} right only in the baseline (b), {} right only in the \
             candidate (c); difference {:+.1} points; exact McNemar p = {:.4}",
            m.pairs,
            m.b,
            m.c,
            100.0 * (sb.accuracy - sa.accuracy),
            m.p_value
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocketperf_runtime::session::log_prob;

    fn item(subject: &str, row: u64, shots_used: usize, tokens: &[u32]) -> Item {
        Item {
            question: Question {
                subject: subject.into(),
                row,
                question: String::new(),
                choices: Default::default(),
                answer: Letter::A,
            },
            category: Category::Stem,
            tokens: tokens.to_vec(),
            shots_used,
        }
    }

    #[test]
    fn letter_logprobs_equal_the_runtime_log_softmax() {
        let mut x = 0x9E37_79B9u32;
        let logits: Vec<f32> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect();
        let ids = [3u32, 4999, 17, 2500];
        let got = letter_logprobs(&logits, ids);
        for (g, id) in got.iter().zip(ids) {
            assert_eq!(*g, log_prob(&logits, id) as f32);
        }
        // Outside the vocabulary: impossible, not a panic.
        assert_eq!(
            letter_logprobs(&logits, [0, 1, 2, 9999])[3],
            f32::NEG_INFINITY
        );
    }

    #[test]
    fn reuse_plan_keeps_the_common_prefix_and_one_token_to_run() {
        let items = [
            item("a", 0, 5, &[1, 2, 3, 4, 5]),
            item("a", 1, 5, &[1, 2, 3, 9]),
            item("a", 2, 5, &[1, 2, 3, 9]),
            item("b", 0, 5, &[1, 7, 8]),
            item("b", 1, 5, &[6]),
        ];
        // 0 for the first; 3 shared; identical prompt keeps all but its last token; 1; 0.
        assert_eq!(reuse_plan(&items), [0, 3, 3, 1, 0]);
    }

    #[test]
    fn issue_order_groups_by_subject_then_shot_count() {
        let mut items = vec![
            item("b", 0, 5, &[1]),
            item("a", 3, 4, &[1]),
            item("a", 1, 5, &[1]),
            item("a", 0, 3, &[1]),
            item("a", 2, 5, &[1]),
        ];
        issue_order(&mut items);
        let order: Vec<(&str, u64)> = items
            .iter()
            .map(|i| (i.question.subject.as_str(), i.question.row))
            .collect();
        assert_eq!(order, [("a", 1), ("a", 2), ("a", 3), ("a", 0), ("b", 0)]);
    }

    #[test]
    fn accuracy_log_entries_decode_or_name_their_size() {
        let lp = [-0.5f32, -1.25, -3.0, f32::NEG_INFINITY];
        let bytes: Vec<u8> = lp.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_logprobs(&bytes).unwrap(), lp);
        assert!(decode_logprobs(&[]).unwrap().iter().all(|x| x.is_nan()));
        let err = decode_logprobs(&bytes[..12]).unwrap_err().to_string();
        assert!(err.contains("12 bytes"), "{err}");
        assert_eq!(decode_ids(&[1, 0, 0, 0, 0, 1, 0, 0]).unwrap(), [1u32, 256]);
        assert!(decode_ids(&[1, 2, 3]).is_err());
    }

    #[test]
    fn selection_filters_subjects_and_caps_each() {
        let qs: Vec<Question> = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 5), ("c", 6)]
            .iter()
            .map(|&(s, r)| item(s, r, 0, &[]).question)
            .collect();
        let picked = select_questions(qs.clone(), &["c".into(), "a".into()], Some(2)).unwrap();
        let rows: Vec<(&str, u64)> = picked.iter().map(|q| (q.subject.as_str(), q.row)).collect();
        assert_eq!(rows, [("a", 0), ("a", 1), ("c", 5), ("c", 6)]);
        let err = select_questions(qs, &["astrology".into()], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"astrology\" is not an MMLU subject"),
            "{err}"
        );
    }
}
