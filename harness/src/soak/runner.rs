//! The soak loop: cycles of the scripted dialogues and, every probe period, a round of the
//! fixed probes, all through a `pocketperf serve` child process. A server that crashes or
//! stalls is recorded (request in flight, exit status, stderr tail), replaced, and the request
//! retried once on the new server; a request that fails on two servers in a row is skipped.
//! Every completed request is journaled before the next one starts, so the schedule position
//! is a pure function of the journal ([`Position::apply`]): a resumed soak continues exactly
//! after the last completed request.
//!
//! Size: over 800 lines with its tests: the loop, crash and stall recovery and the resume
//! position are one state machine over the journal; the tests exercise it end to end.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use pocketperf_datasets::Dialogue;
use pocketperf_datasets::mmlu::Letter;
use pocketperf_datasets::score::choose_by_logprob;

pub use super::clock::SoakClock;
use super::config::{SoakConfig, format_duration};
use super::journal::{
    EndReason, Entry, FailureRecord, ItemKey, Journal, ProbeKind, ProbeRecord, QueryRecord, Record,
    RssRecord,
};
use super::probes::{ANSWER_CONTINUATIONS, Probe};
use super::sut::{HttpSoakSut, SoakSut};
use super::telemetry::SoakTelemetry;
use crate::serve::FAULT_ENV;
use crate::serve::client::{
    LoadedInfo, QueryOutcome, ScoreOutcome, ServeClient, ServeCommand, SutError,
};
use crate::serve::protocol::{LoadRequest, Message, PromptSpec, QueryRequest, ScoreRequest};

/// Server failures in a row after which the soak gives up (the SUT cannot be kept running).
pub const MAX_CONSECUTIVE_FAILURES: u32 = 6;
/// Tries to start a server before giving up.
pub const START_TRIES: u32 = 3;
/// Longest wait for a server's `hello` and `load`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// Where the schedule stands, rebuilt from journal records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Position {
    pub cycle: u64,
    pub dialogue: usize,
    pub turn: usize,
    /// The current dialogue so far (user and assistant turns).
    pub conversation: Vec<Message>,
    /// The round in progress, or the next one to start.
    pub round: u32,
    /// `(next item, items)` while a round is in progress.
    pub round_items: Option<(usize, usize)>,
    pub last_round_start_s: Option<f64>,
    /// Highest server incarnation started.
    pub incarnation: u32,
    /// Dialogues finished (or given up) since the last probe round began: a round is due only
    /// after at least one, so slow rounds cannot starve the dialogues.
    pub dialogues_since_round: u64,
}

impl Position {
    fn next_dialogue(&mut self, n_dialogues: usize) {
        self.dialogues_since_round += 1;
        self.conversation.clear();
        self.turn = 0;
        self.dialogue += 1;
        if self.dialogue >= n_dialogues {
            self.dialogue = 0;
            self.cycle += 1;
        }
    }

    fn probe_done(&mut self, round: u32, index: usize) {
        if let Some((_, items)) = self.round_items {
            if index + 1 >= items {
                self.round_items = None;
                self.round = round + 1;
            } else {
                self.round_items = Some((index + 1, items));
            }
        }
    }

    /// Advances over one journal record.
    pub fn apply(&mut self, e: &Entry, dialogues: &[Dialogue]) {
        let n = dialogues.len().max(1);
        match &e.record {
            Record::Query(q) => {
                if q.turn == 0 {
                    self.conversation.clear();
                }
                self.cycle = q.cycle;
                self.dialogue = q.dialogue;
                if let Some(t) = dialogues.get(q.dialogue).and_then(|d| d.turns.get(q.turn)) {
                    self.conversation.push(Message {
                        role: "user".into(),
                        content: t.user.clone(),
                    });
                    self.conversation.push(Message {
                        role: "assistant".into(),
                        content: q.text.clone(),
                    });
                }
                self.turn = q.turn + 1;
                let turns = dialogues.get(q.dialogue).map_or(0, |d| d.turns.len());
                if self.turn >= turns {
                    self.next_dialogue(n);
                }
            }
            Record::Skipped { item, .. } | Record::Refused { item, .. } => match item {
                ItemKey::Turn {
                    cycle, dialogue, ..
                } => {
                    self.cycle = *cycle;
                    self.dialogue = *dialogue;
                    self.next_dialogue(n);
                }
                ItemKey::Probe { round, index } => self.probe_done(*round, *index),
                ItemKey::Stats => {}
            },
            Record::ProbeRound { round, items } => {
                self.round = *round;
                self.round_items = (*items > 0).then_some((0, *items));
                self.last_round_start_s = Some(e.t_s);
                self.dialogues_since_round = 0;
                if *items == 0 {
                    self.round = round + 1;
                }
            }
            Record::Probe(p) => self.probe_done(p.round, p.index),
            Record::SutStart { incarnation, .. } => {
                self.incarnation = self.incarnation.max(*incarnation)
            }
            _ => {}
        }
    }
}

/// How the loop ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub reason: EndReason,
    pub detail: String,
}

enum Op {
    Query(QueryRequest),
    Score(ScoreRequest),
}

enum OpOut {
    Query(QueryOutcome),
    Score(ScoreOutcome),
}

enum Attempt {
    Done(OpOut, f64),
    GaveUp,
    Stop(Ending),
}

/// Live counters for progress and checkpoints.
#[derive(Clone, Copy, Debug, Default)]
struct Live {
    queries: u64,
    probes: u64,
    crashes: u64,
    timeouts: u64,
}

/// A soak in progress.
pub struct Runner {
    cfg: SoakConfig,
    dir: PathBuf,
    journal: Arc<Mutex<Journal>>,
    clock: SoakClock,
    dialogues: Vec<Dialogue>,
    probes: Vec<Probe>,
    command: ServeCommand,
    /// `Some(url)`: the SUT is an OpenAI-compatible server there, not a child.
    http: Option<String>,
    client: Option<SoakSut>,
    pos: Position,
    signals: Arc<dyn Fn() -> usize + Send + Sync>,
    stderr_log: Arc<Mutex<File>>,
    in_flight: Arc<AtomicBool>,
    telemetry: Option<SoakTelemetry>,
    consecutive_failures: u32,
    last_rss_s: f64,
    last_checkpoint_s: f64,
    live: Live,
    progress: indicatif::ProgressBar,
    /// Called at each checkpoint (writes the interim report).
    on_checkpoint: Box<dyn FnMut(&Path)>,
}

/// What [`Runner::new`] needs.
pub struct RunnerParts {
    pub cfg: SoakConfig,
    pub dir: PathBuf,
    pub journal: Journal,
    /// Records already in the journal (replayed for the position).
    pub previous: Vec<Entry>,
    pub dialogues: Vec<Dialogue>,
    pub probes: Vec<Probe>,
    /// Signals received (SIGINT/SIGTERM); the first stops after the request in flight, the
    /// second abandons it.
    pub signals: Arc<dyn Fn() -> usize + Send + Sync>,
    pub on_checkpoint: Box<dyn FnMut(&Path)>,
    /// An OpenAI-compatible server's base URL to soak instead of a `pocketperf serve` child.
    pub http: Option<String>,
}

impl Runner {
    pub fn new(p: RunnerParts) -> Result<Self> {
        let mut pos = Position::default();
        for e in &p.previous {
            pos.apply(e, &p.dialogues);
        }
        let offset = p.previous.last().map_or(0.0, |e| e.t_s);
        let mut command = match &p.cfg.serve_cmd {
            Some(line) => ServeCommand::from_command_line(line)
                .ok_or_else(|| anyhow!("--serve-cmd: empty command line"))?,
            None => ServeCommand::this_binary().context("locating this executable")?,
        };
        if let Some(f) = &p.cfg.fault {
            command.env.push((FAULT_ENV.into(), f.clone()));
        }
        let log_path = p.dir.join("sut-stderr.log");
        let stderr_log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("{}: cannot open", log_path.display()))?;
        Ok(Runner {
            dir: p.dir,
            journal: Arc::new(Mutex::new(p.journal)),
            clock: SoakClock::new(offset),
            dialogues: p.dialogues,
            probes: p.probes,
            command,
            http: p.http,
            client: None,
            pos,
            signals: p.signals,
            stderr_log: Arc::new(Mutex::new(stderr_log)),
            in_flight: Arc::new(AtomicBool::new(false)),
            telemetry: None,
            consecutive_failures: 0,
            last_rss_s: f64::NEG_INFINITY,
            last_checkpoint_s: offset,
            live: Live::default(),
            progress: crate::progress::spinner("soak"),
            on_checkpoint: p.on_checkpoint,
            cfg: p.cfg,
        })
    }

    /// The soak clock (shared with telemetry).
    pub fn clock(&self) -> SoakClock {
        self.clock
    }

    /// The journal (shared with telemetry).
    pub fn journal(&self) -> Arc<Mutex<Journal>> {
        self.journal.clone()
    }

    /// Set while a request is in flight (drives a simulated handset's activity).
    pub fn in_flight(&self) -> Arc<AtomicBool> {
        self.in_flight.clone()
    }

    /// Hands over the telemetry thread; it is stopped before the end record.
    pub fn set_telemetry(&mut self, t: Option<SoakTelemetry>) {
        self.telemetry = t;
    }

    /// The schedule position.
    pub fn position(&self) -> &Position {
        &self.pos
    }

    /// Appends a record (soak time now) and advances the position over it.
    pub fn log(&mut self, record: Record) -> Result<()> {
        let t_s = self.clock.now_s();
        let seq = {
            let mut j = self
                .journal
                .lock()
                .map_err(|_| anyhow!("the journal lock was poisoned"))?;
            j.append(t_s, record.clone())?
        };
        let e = Entry { seq, t_s, record };
        self.pos.apply(&e, &self.dialogues);
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        (self.signals)() > 0
    }

    /// Runs until the duration is reached (then one last probe round), a signal, or a server
    /// that cannot be kept running.
    pub fn run(&mut self) -> Result<Ending> {
        loop {
            if self.stop_requested() {
                return Ok(Ending {
                    reason: EndReason::Interrupted,
                    detail: format!("signal received at {}", format_duration(self.clock.now_s())),
                });
            }
            let t = self.clock.now_s();
            let step = if let Some((next, _)) = self.pos.round_items {
                self.probe_item(next)?
            } else if t >= self.cfg.duration_s {
                let final_done = self
                    .pos
                    .last_round_start_s
                    .is_some_and(|s| s >= self.cfg.duration_s);
                if self.probes.is_empty() || final_done {
                    return Ok(Ending {
                        reason: EndReason::Completed,
                        detail: format!(
                            "duration {} reached",
                            format_duration(self.cfg.duration_s)
                        ),
                    });
                }
                self.start_round()?;
                None
            } else if self.pos.turn == 0 && !self.probes.is_empty() && self.probe_due(t) {
                self.start_round()?;
                None
            } else {
                self.turn()?
            };
            if let Some(end) = step {
                return Ok(end);
            }
            if let Some(end) = self.housekeeping()? {
                return Ok(end);
            }
        }
    }

    fn probe_due(&self, t: f64) -> bool {
        self.pos
            .last_round_start_s
            .is_none_or(|s| t - s >= self.cfg.probe_every_s && self.pos.dialogues_since_round > 0)
    }

    fn start_round(&mut self) -> Result<()> {
        let round = self.pos.round;
        let items = self.probes.len();
        self.log(Record::ProbeRound { round, items })
    }

    fn turn(&mut self) -> Result<Option<Ending>> {
        let (cycle, di, ti) = (self.pos.cycle, self.pos.dialogue, self.pos.turn);
        let Some(d) = self.dialogues.get(di) else {
            return Err(anyhow!(
                "dialogue {di} is outside the set of {}",
                self.dialogues.len()
            ));
        };
        let Some(t) = d.turns.get(ti) else {
            return Err(anyhow!("dialogue {} has no turn {ti}", d.id));
        };
        let dialogue_id = d.id.clone();
        let budget = self
            .cfg
            .max_turn_tokens
            .map_or(t.max_new_tokens, |m| m.min(t.max_new_tokens))
            .max(1) as usize;
        let mut messages = self.pos.conversation.clone();
        messages.push(Message {
            role: "user".into(),
            content: t.user.clone(),
        });
        let mut req = QueryRequest::new(PromptSpec::messages(messages), budget);
        req.stop_at_eog = false;
        req.cache = true;
        let item = ItemKey::Turn {
            cycle,
            dialogue: di,
            turn: ti,
        };
        let desc = format!("dialogue {dialogue_id} turn {ti} of cycle {cycle}");
        match self.attempt(&item, &desc, &Op::Query(req))? {
            Attempt::Stop(e) => Ok(Some(e)),
            Attempt::GaveUp => Ok(None),
            Attempt::Done(OpOut::Query(o), t_start) => {
                let at = |ns: u64| t_start + ns.saturating_sub(o.t_recv_ns) as f64 / 1e9;
                let rec = QueryRecord {
                    cycle,
                    dialogue: di,
                    dialogue_id,
                    turn: ti,
                    incarnation: self.pos.incarnation,
                    prompt_tokens: o.prompt_tokens,
                    reused_tokens: o.reused_tokens,
                    generated: o.generated,
                    ttft_ms: o.ttft_ns().map(|v| v as f64 / 1e6),
                    tpot_ms: o.tpot_ns().map(|v| v / 1e6),
                    latency_ms: o.latency_ns() as f64 / 1e6,
                    t_start_s: t_start,
                    t_first_s: o.t_first_ns.map(at),
                    t_end_s: at(o.t_end_ns),
                    text: o.text,
                };
                self.live.queries += 1;
                self.log(Record::Query(rec))?;
                Ok(None)
            }
            Attempt::Done(OpOut::Score(_), _) => Err(anyhow!("a score answer to a query")),
        }
    }

    fn probe_item(&mut self, index: usize) -> Result<Option<Ending>> {
        let round = self.pos.round;
        let Some(probe) = self.probes.get(index).cloned() else {
            // The probe set shrank since the round began: close it.
            return self
                .log(Record::Skipped {
                    item: ItemKey::Probe { round, index },
                    reason: "no such probe in this build's probe set".into(),
                })
                .map(|_| None);
        };
        let item = ItemKey::Probe { round, index };
        let desc = format!("probe {} of round {round}", probe.id());
        let op = match &probe {
            Probe::Greedy { prompt, .. } => {
                let mut q =
                    QueryRequest::new(PromptSpec::chat(prompt), self.cfg.probe_tokens.max(1));
                q.cache = false;
                Op::Query(q)
            }
            Probe::Mmlu { prompt, .. } => Op::Score(ScoreRequest::new(
                PromptSpec::text(prompt),
                ANSWER_CONTINUATIONS.iter().map(|s| s.to_string()).collect(),
            )),
        };
        let (out, t_start) = match self.attempt(&item, &desc, &op)? {
            Attempt::Stop(e) => return Ok(Some(e)),
            Attempt::GaveUp => return Ok(None),
            Attempt::Done(out, t) => (out, t),
        };
        let latency_ms = (self.clock.now_s() - t_start) * 1e3;
        let base = ProbeRecord {
            round,
            index,
            probe_id: probe.id().to_string(),
            kind: ProbeKind::Greedy,
            incarnation: self.pos.incarnation,
            tokens: None,
            text: None,
            logprobs: None,
            logprob_bits: None,
            answer: None,
            choice: None,
            latency_ms,
        };
        let rec = match (out, &probe) {
            (OpOut::Query(o), Probe::Greedy { .. }) => ProbeRecord {
                latency_ms: o.latency_ns() as f64 / 1e6,
                tokens: Some(o.tokens),
                text: Some(o.text),
                ..base
            },
            (OpOut::Score(s), Probe::Mmlu { answer, .. }) => {
                let lps: Vec<f64> = s.continuations.iter().map(|c| c.logprob).collect();
                let mut four = [f32::NAN; 4];
                for (slot, v) in four.iter_mut().zip(&lps) {
                    *slot = *v as f32;
                }
                ProbeRecord {
                    kind: ProbeKind::Mmlu,
                    latency_ms: s.t_end_ns.saturating_sub(s.t_recv_ns) as f64 / 1e6,
                    logprob_bits: Some(
                        s.continuations
                            .iter()
                            .map(|c| c.logprob_bits.clone())
                            .collect(),
                    ),
                    logprobs: Some(lps),
                    answer: Some(answer.as_char().to_string()),
                    choice: choose_by_logprob(&four).map(|l: Letter| l.as_char().to_string()),
                    ..base
                }
            }
            _ => {
                return Err(anyhow!(
                    "the SUT answered {desc} with the wrong kind of result"
                ));
            }
        };
        self.live.probes += 1;
        self.log(Record::Probe(rec))?;
        Ok(None)
    }

    fn attempt(&mut self, item: &ItemKey, desc: &str, op: &Op) -> Result<Attempt> {
        let timeout = Duration::from_secs_f64(self.cfg.query_timeout_s.max(0.001));
        for _ in 0..2 {
            if let Some(end) = self.ensure_sut()? {
                return Ok(Attempt::Stop(end));
            }
            let Some(client) = self.client.as_mut() else {
                continue;
            };
            let t_start = self.clock.now_s();
            self.in_flight.store(true, Ordering::Relaxed);
            let r = match op {
                Op::Query(q) => client.query(q, timeout).map(OpOut::Query),
                Op::Score(s) => client.score(s, timeout).map(OpOut::Score),
            };
            self.in_flight.store(false, Ordering::Relaxed);
            match r {
                Ok(out) => {
                    self.consecutive_failures = 0;
                    return Ok(Attempt::Done(out, t_start));
                }
                Err(SutError::Remote { code, message, .. }) => {
                    self.log(Record::Refused {
                        item: item.clone(),
                        code: serde_json::to_value(code)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        message,
                    })?;
                    return Ok(Attempt::GaveUp);
                }
                Err(SutError::Interrupted { .. }) => {
                    if let Some(mut c) = self.client.take() {
                        let _ = c.kill();
                    }
                    return Ok(Attempt::Stop(Ending {
                        reason: EndReason::Interrupted,
                        detail: format!("second signal: {desc} abandoned in flight"),
                    }));
                }
                Err(e) => {
                    self.record_failure(item, desc, e)?;
                    if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES {
                        return Ok(Attempt::Stop(Ending {
                            reason: EndReason::Aborted,
                            detail: format!(
                                "{MAX_CONSECUTIVE_FAILURES} server failures in a row; the last during {desc}"
                            ),
                        }));
                    }
                }
            }
        }
        self.log(Record::Skipped {
            item: item.clone(),
            reason: "failed on two servers in a row".into(),
        })?;
        Ok(Attempt::GaveUp)
    }

    fn record_failure(&mut self, item: &ItemKey, desc: &str, e: SutError) -> Result<()> {
        self.consecutive_failures += 1;
        let mut client = self.client.take();
        let pid = client.as_ref().map_or(0, |c| c.pid());
        let incarnation = self.pos.incarnation;
        let record = match e {
            SutError::Timeout { waited_s, .. } => {
                let exit = client.as_mut().and_then(|c| c.kill());
                self.live.timeouts += 1;
                let action = match exit {
                    Some(_) => "the harness killed the server",
                    None => "the request was abandoned (a server over HTTP is not restarted)",
                };
                Record::Timeout(FailureRecord {
                    incarnation,
                    pid,
                    item: item.clone(),
                    last_query: desc.to_string(),
                    error: format!("no answer for {waited_s:.1} s; {action}"),
                    exit,
                    stderr_tail: client.as_ref().map(|c| c.stderr_tail()).unwrap_or_default(),
                    waited_s: Some(waited_s),
                })
            }
            SutError::Exited {
                ref exit,
                ref stderr_tail,
                ..
            } => {
                self.live.crashes += 1;
                Record::Crash(FailureRecord {
                    incarnation,
                    pid,
                    item: item.clone(),
                    last_query: desc.to_string(),
                    error: e.to_string(),
                    exit: Some(exit.clone()),
                    stderr_tail: stderr_tail.clone(),
                    waited_s: None,
                })
            }
            other => {
                let exit = client.as_mut().and_then(|c| c.kill());
                self.live.crashes += 1;
                Record::Crash(FailureRecord {
                    incarnation,
                    pid,
                    item: item.clone(),
                    last_query: desc.to_string(),
                    error: other.to_string(),
                    exit,
                    stderr_tail: client.as_ref().map(|c| c.stderr_tail()).unwrap_or_default(),
                    waited_s: None,
                })
            }
        };
        drop(client);
        self.log(record)
    }

    fn ensure_sut(&mut self) -> Result<Option<Ending>> {
        if self.client.is_some() {
            return Ok(None);
        }
        let mut last = String::new();
        for attempt in 0..START_TRIES {
            if self.stop_requested() {
                return Ok(Some(Ending {
                    reason: EndReason::Interrupted,
                    detail: "signal received while starting the server".into(),
                }));
            }
            let incarnation = self.pos.incarnation + 1;
            if let Ok(mut f) = self.stderr_log.lock() {
                let _ = writeln!(
                    f,
                    "--- server {incarnation} starting at soak time {:.3} s ---",
                    self.clock.now_s()
                );
            }
            let t0 = Instant::now();
            match self.start_sut() {
                Ok((client, loaded)) => {
                    let rec = Record::SutStart {
                        incarnation,
                        pid: client.pid(),
                        hello: client.hello().clone(),
                        loaded,
                        startup_s: t0.elapsed().as_secs_f64(),
                    };
                    self.client = Some(client);
                    self.log(rec)?;
                    return Ok(None);
                }
                Err((error, stderr_tail)) => {
                    last = error.clone();
                    self.log(Record::SutStartFailed { error, stderr_tail })?;
                    std::thread::sleep(Duration::from_secs(u64::from(attempt) + 1));
                }
            }
        }
        Ok(Some(Ending {
            reason: EndReason::Aborted,
            detail: format!("the server could not be started {START_TRIES} times in a row: {last}"),
        }))
    }

    fn start_sut(&mut self) -> std::result::Result<(SoakSut, LoadedInfo), (String, Vec<String>)> {
        if let Some(url) = &self.http {
            // The tokenizer names the MMLU probes' letters; the server runs the model.
            let tokenizer = pocketperf_runtime::gguf::GgufFile::open(&self.cfg.model)
                .and_then(|g| pocketperf_runtime::tokenizer::Tokenizer::from_gguf(&g))
                .map_err(|e| (format!("{}: {e}", self.cfg.model.display()), Vec::new()))?;
            let t = Duration::from_secs_f64(self.cfg.query_timeout_s.max(0.001));
            let (h, loaded) =
                HttpSoakSut::connect(url, tokenizer, t.max(Duration::from_secs(3600)), t)
                    .map_err(|e| (e, Vec::new()))?;
            return Ok((SoakSut::Http(Box::new(h)), loaded));
        }
        // While the server starts, the first SIGINT/SIGTERM ends the wait (there is no
        // request to finish); once it serves, the first lets the request in flight finish and
        // the second aborts it.
        let signals = self.signals.clone();
        let mut c = ServeClient::spawn_abortable(
            &self.command,
            STARTUP_TIMEOUT,
            Some(self.stderr_log.clone()),
            Some(Arc::new(move || signals() >= 1)),
        )
        .map_err(|e| (e.to_string(), Vec::new()))?;
        let req = LoadRequest {
            model: self.cfg.model.display().to_string(),
            threads: self.cfg.threads,
            isa: self.cfg.isa.clone(),
            ctx: self.cfg.ctx,
            max_batch: 128,
            mlock: self.cfg.mlock,
            prefault: self.cfg.prefault,
            copies: true,
            kv_policy: self.cfg.kv_policy.clone(),
        };
        match c.load(&req, STARTUP_TIMEOUT) {
            Ok(l) => {
                let signals = self.signals.clone();
                c.set_abort(Arc::new(move || signals() >= 2));
                Ok((SoakSut::Child(Box::new(c)), l))
            }
            Err(e) => {
                let tail = match &e {
                    SutError::Exited { stderr_tail, .. } => stderr_tail.clone(),
                    _ => c.stderr_tail(),
                };
                let _ = c.kill();
                Err((e.to_string(), tail))
            }
        }
    }

    /// Memory samples, checkpoints and progress between requests.
    fn housekeeping(&mut self) -> Result<Option<Ending>> {
        let t = self.clock.now_s();
        if (self.cfg.rss_every_s <= 0.0 || t - self.last_rss_s >= self.cfg.rss_every_s)
            && let Some(client) = self.client.as_mut()
        {
            self.last_rss_s = t;
            let timeout = Duration::from_secs_f64(self.cfg.query_timeout_s.max(0.001));
            match client.stats(timeout) {
                Ok(s) => {
                    let rec = RssRecord {
                        incarnation: self.pos.incarnation,
                        pid: s.pid,
                        served: s.queries,
                        rss_kib: s.memory.rss_kib,
                        rss_anon_kib: s.memory.rss_anon_kib,
                        rss_file_kib: s.memory.rss_file_kib,
                        vm_hwm_kib: s.memory.vm_hwm_kib,
                        major_faults: Some(s.memory.major_faults),
                    };
                    self.log(Record::Rss(rec))?;
                }
                Err(SutError::Interrupted { .. }) => {}
                // A refused sample is journaled: sampling was planned and gave no figure.
                Err(SutError::Remote { code, message, .. }) => {
                    self.log(Record::Refused {
                        item: ItemKey::Stats,
                        code: serde_json::to_value(code)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        message,
                    })?;
                }
                Err(e) => {
                    self.record_failure(&ItemKey::Stats, "stats", e)?;
                    if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES {
                        return Ok(Some(Ending {
                            reason: EndReason::Aborted,
                            detail: format!("{MAX_CONSECUTIVE_FAILURES} server failures in a row"),
                        }));
                    }
                }
            }
        }
        if t - self.last_checkpoint_s >= self.cfg.checkpoint_every_s {
            self.last_checkpoint_s = t;
            let rec = Record::Checkpoint {
                queries: self.live.queries,
                probes: self.live.probes,
                crashes: self.live.crashes,
                timeouts: self.live.timeouts,
            };
            self.log(rec)?;
            (self.on_checkpoint)(&self.dir);
        }
        self.progress.set_message(format!(
            "soak {}/{}: cycle {}, {} turns, {} probes, {} crashes, {} timeouts (this session)",
            format_duration(t),
            format_duration(self.cfg.duration_s),
            self.pos.cycle,
            self.live.queries,
            self.live.probes,
            self.live.crashes,
            self.live.timeouts
        ));
        Ok(None)
    }

    /// Stops telemetry, writes the end record and shuts the server down.
    pub fn end(&mut self, ending: &Ending) -> Result<()> {
        if let Some(t) = self.telemetry.take() {
            t.stop();
        }
        self.progress.finish_and_clear();
        self.log(Record::End {
            reason: ending.reason,
            detail: ending.detail.clone(),
        })?;
        if let Some(c) = self.client.take() {
            c.shutdown(Duration::from_secs(10));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(cycle: u64, dialogue: usize, turn: usize, text: &str) -> Entry {
        Entry {
            seq: 0,
            t_s: 1.0,
            record: Record::Query(QueryRecord {
                cycle,
                dialogue,
                dialogue_id: String::new(),
                turn,
                incarnation: 1,
                prompt_tokens: 1,
                reused_tokens: 0,
                generated: 1,
                text: text.into(),
                ttft_ms: None,
                tpot_ms: None,
                latency_ms: 1.0,
                t_start_s: 0.0,
                t_first_s: None,
                t_end_s: 1.0,
            }),
        }
    }

    #[test]
    fn position_follows_turns_dialogues_cycles_and_rounds() {
        let d: Vec<Dialogue> = pocketperf_datasets::dialogues()[..2].to_vec();
        let mut p = Position::default();
        p.apply(&q(0, 0, 0, "r0"), &d);
        p.apply(&q(0, 0, 1, "r1"), &d);
        assert_eq!((p.cycle, p.dialogue, p.turn), (0, 0, 2));
        // The conversation so far: user, reply, user, reply.
        assert_eq!(p.conversation.len(), 4);
        assert_eq!(p.conversation[0].content, d[0].turns[0].user);
        assert_eq!(p.conversation[3].content, "r1");
        p.apply(&q(0, 0, 2, "r2"), &d);
        assert_eq!(
            (p.cycle, p.dialogue, p.turn, p.conversation.len()),
            (0, 1, 0, 0)
        );
        assert_eq!(p.dialogues_since_round, 1);
        // A skipped turn gives up the rest of its dialogue; the cycle wraps.
        p.apply(
            &Entry {
                seq: 0,
                t_s: 2.0,
                record: Record::Skipped {
                    item: ItemKey::Turn {
                        cycle: 0,
                        dialogue: 1,
                        turn: 0,
                    },
                    reason: String::new(),
                },
            },
            &d,
        );
        assert_eq!((p.cycle, p.dialogue, p.turn), (1, 0, 0));
        let round = |round, items| Entry {
            seq: 0,
            t_s: 5.0,
            record: Record::ProbeRound { round, items },
        };
        p.apply(&round(0, 2), &d);
        assert_eq!(
            (p.round, p.round_items, p.last_round_start_s),
            (0, Some((0, 2)), Some(5.0))
        );
        assert_eq!(p.dialogues_since_round, 0);
        let probe_skip = Entry {
            seq: 0,
            t_s: 6.0,
            record: Record::Skipped {
                item: ItemKey::Probe { round: 0, index: 0 },
                reason: String::new(),
            },
        };
        p.apply(&probe_skip, &d);
        assert_eq!(p.round_items, Some((1, 2)));
        let probe_skip = Entry {
            record: Record::Skipped {
                item: ItemKey::Probe { round: 0, index: 1 },
                reason: String::new(),
            },
            ..probe_skip
        };
        p.apply(&probe_skip, &d);
        assert_eq!((p.round, p.round_items), (1, None));
    }
}
