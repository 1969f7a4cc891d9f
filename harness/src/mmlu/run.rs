//! `pocketperf mmlu run`: the run itself, `mmlu.json`, the accuracy section of `result.json`
//! and the terminal summary.

#[allow(unused_imports)]
use super::*;
use crate::cmd::OnOff;
use crate::cmd::mmlu::{MmluRunArgs, ScoreMode};
use crate::cmd::run::SutArg;
use crate::http::client::ApiKind;
use crate::meta::{self, OutputHeader};
use crate::outputs::{log_meta, run_meta};
use anyhow::{Context, Result, anyhow, bail};
use pocketperf_datasets::mmlu::{self as ds_mmlu, Letter};
use pocketperf_datasets::score::{self, Accuracy, Record, Response, Summary};
use pocketperf_datasets::subset;
use pocketperf_reports::schema::{self, GroupAccuracy, QuestionRecord, ResultFile};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_scenarios::{AccuracyEntry, RealClock, Scenario, TestMode, TestSettings, run_test};
use serde::Serialize;
use std::time::Instant;

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

pub(crate) fn group_out(name: String, a: &Accuracy) -> GroupOut {
    GroupOut { name, accuracy: *a }
}

pub(crate) fn group_schema(name: String, a: &Accuracy) -> GroupAccuracy {
    GroupAccuracy {
        name,
        n: a.total,
        correct: a.correct,
        accuracy: a.accuracy,
    }
}

pub fn run(a: &MmluRunArgs) -> Result<i32> {
    let api = match (&a.sut, a.api) {
        (SutArg::Http(_), None) => ApiKind::Completions,
        (SutArg::Http(_), Some(ApiKind::Chat)) => {
            bail!("--api chat: mmlu run scores token ids (completions or native)")
        }
        (SutArg::Http(_), Some(api)) => api,
        (_, Some(_)) => bail!("--api needs --sut http://HOST:PORT"),
        (_, None) => ApiKind::Completions,
    };
    if a.ctx < 16 {
        bail!("--ctx {}: too small (at least 16)", a.ctx);
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if a.limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    // One writer per result directory, before anything is read or written.
    let _lock = match (&a.out, a.dry_run) {
        (Some(d), false) => Some(crate::dir_lock::DirLock::claim(d, a.force)?),
        _ => None,
    };
    let dir = ds_mmlu::resolve_mmlu_dir(a.mmlu_dir.as_deref())?;
    // Refuses a copy that does not match the manifest, naming subject, row and reason.
    let all = subset::load_subset(&dir)?;
    let questions = select_questions(all, &a.subjects, a.limit)?;
    let dev =
        pocketperf_datasets::load_dev_shots(&dir, questions.iter().map(|q| q.subject.as_str()))?;
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

    let mut settings = TestSettings::new(Scenario::Offline);
    settings.mode = TestMode::AccuracyOnly;
    settings.performance_sample_count_override = items.len() as u64;
    settings.query_timeout_ms = 0;

    // Over HTTP: the server's model, and the mode its responses allow (logprob needs the four
    // letters among its log-probabilities).
    let http = match &a.sut {
        SutArg::InProcess => None,
        SutArg::Process => bail!("mmlu run takes --sut in-process or --sut http://HOST:PORT"),
        SutArg::Http(url) => {
            let (client, model) = super::http::connect(url)?;
            let pieces = letters.map(|t| engine.tokenizer.decode(&[t]));
            let (mode, why) = match (a.mode, items.first()) {
                (ScoreMode::Logprob, Some(first)) => {
                    super::http::probe_mode(&client, api, &model.id, first, &pieces, letters)?
                }
                (m, _) => (m, "as asked (--mode)".to_string()),
            };
            eprintln!(
                "system under test: {} at {url}; {} mode: {why}",
                model.id,
                mode.as_str()
            );
            Some((client, model, pieces, mode, why, url.clone()))
        }
    };
    let mode = http.as_ref().map_or(a.mode, |h| h.3);
    let progress = crate::progress::bar(
        items.len() as u64,
        &format!("MMLU {} {}-shot", mode.as_str(), a.shots),
    );
    let mut qsl = MmluQsl {
        n: items.len() as u64,
    };
    let started = chrono::Utc::now();
    let clock = RealClock::new();
    let t_run = Instant::now();
    let mut sut_json = serde_json::json!({ "kind": a.sut.kind() });
    let mut sut_warnings = Vec::new();
    let (result, errors, costs) = match http {
        None => {
            let session = engine.session(SessionOptions {
                max_seq_len: a.ctx,
                max_batch: a.batch,
                ..Default::default()
            })?;
            let mut sut = MmluSut {
                session,
                items: &items,
                mode,
                letters,
                reuse: a.prefix_reuse == OnOff::On,
                cached: Vec::new(),
                costs: vec![None; items.len()],
                errors: Vec::new(),
                progress,
            };
            let result = run_test(&mut sut, &mut qsl, &settings, &clock)?;
            sut.progress.finish_and_clear();
            (result, sut.errors, sut.costs)
        }
        Some((client, model, letter_pieces, mode, why, url)) => {
            let mut sut = super::http::MmluHttpSut {
                client,
                api,
                model,
                engine: &engine,
                items: &items,
                mode,
                letter_pieces,
                letter_ids: letters,
                costs: vec![None; items.len()],
                errors: Vec::new(),
                letters_missing: Vec::new(),
                progress,
            };
            let result = run_test(&mut sut, &mut qsl, &settings, &clock)?;
            sut.progress.finish_and_clear();
            sut_json = serde_json::json!({
                "kind": "http",
                "endpoint": url,
                "api": api,
                "model_id": sut.model.id,
                "model_sha256": sut.model.sha256,
                "server": sut.model.server.clone().or(sut.model.owned_by.clone()),
                "system": format!(
                    "http {} {}",
                    sut.model.server.clone().or(sut.model.owned_by.clone())
                        .unwrap_or_else(|| "unknown".into()),
                    sut.model.id
                ),
                "score_mode": {"asked": a.mode, "used": mode, "why": why},
                "letters_outside_top_k": sut.letters_missing.len(),
            });
            if mode != a.mode {
                sut_warnings.push(format!(
                    "--mode {} asked; {} mode used: {why}",
                    a.mode.as_str(),
                    mode.as_str()
                ));
            }
            sut_warnings.extend(sut.letters_missing.iter().take(20).cloned());
            (result, sut.errors, sut.costs)
        }
    };
    let wall_s = t_run.elapsed().as_secs_f64();
    let finished = chrono::Utc::now();

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
        let (response, generated_ids) = decode_response(mode, &e.data, &engine)
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
        "sut": sut_json,
    });
    let model_sha = meta::model_sha256(&model_path);
    let mut warnings: Vec<String> = errors.iter().take(20).cloned().collect();
    if errors.len() > 20 {
        warnings.push(format!("{} more SUT errors", errors.len() - 20));
    }
    warnings.extend(sut_warnings);
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
        mode,
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
    pocketperf_reports::files::replace_file(
        &path,
        (serde_json::to_string_pretty(&mmlu_file)? + "\n").as_bytes(),
    )
    .map_err(|(p, e)| anyhow::Error::new(e).context(format!("{}: cannot write", p.display())))?;

    let mut run_meta = run_meta(&engine, &model_path, "local", settings_json, started);
    run_meta.model.sha256 = model_sha;
    run_meta.finished_utc = finished;
    let file = ResultFile {
        schema_version: schema::SCHEMA_VERSION,
        meta: run_meta,
        performance: None,
        accuracy: Some(accuracy_section(
            &dataset,
            mode,
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
        memory: Some(crate::outputs::memory_section(&a.engine.residency)),
    };
    schema::write_result(out_dir, &file)?;
    result.write_logs(out_dir, &log_meta(&started, &finished))?;

    print_summary(&mmlu_file);
    println!("results in {}", out_dir.display());
    // A verdict needs evidence: a question the runtime failed on was not measured, so a run
    // with any (and in particular one with no answered question) is INVALID, exit 1.
    if let Some(first) = errors.first() {
        println!(
            "INVALID: {} of {} questions failed in the runtime (scored as unanswered; first: {first})",
            errors.len(),
            items.len(),
        );
        return Ok(1);
    }
    Ok(0)
}

pub(crate) fn print_plan(items: &[Item], a: &MmluRunArgs, prepare_s: f64) {
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

pub(crate) fn accuracy_section(
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

pub(crate) fn pct(a: &Accuracy) -> String {
    format!(
        "{:.1}% [{:.1}, {:.1}] ({}/{})",
        100.0 * a.accuracy,
        100.0 * a.ci95_low,
        100.0 * a.ci95_high,
        a.correct,
        a.total
    )
}

pub(crate) fn print_summary(f: &MmluFile) {
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
