//! The model side of `serve --http`: one thread owns the engine and decodes every request in
//! flight together (continuous batching). A request waits in a bounded queue; a free slot
//! takes it, prefills its prompt alone and emits its first token; then every step advances all
//! sequences in flight by one token through the runtime's batched decode (each weight read
//! once per step, each sequence in its own KV ring), on the CPU and OpenCL backends alike. A sequence leaves its slot when it is
//! finished, past its deadline, or its client is gone (its event channel closed): the slot is
//! free for the next request at the next step.
//!
//! Results go back to the HTTP side as [`GenEvent`]s on an unbounded channel per request; a
//! closed channel is how a disconnected client is noticed.
//!
//! Prompt cache (`--prefix-reuse on`, the default, as llama-server's `cache_prompt`): a slot
//! keeps its sequence's KV after the request ends, with the token ids it holds. A new request
//! goes to the free slot whose cached tokens share the longest prefix with its prompt when
//! that prefix is at least half the prompt, else to the free slot used least recently (an
//! unused one first), so an unrelated prompt does not overwrite a conversation's cache; the
//! cache is rewound to the shared prefix (at most all but the prompt's last token, whose
//! logits start the reply) and only the rest is prefilled. `Finish::cached_tokens` reports how many were reused (`timings.cache_n`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use pocketperf_runtime::backend::Backend;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{BatchDecoder, Engine, SamplingParams, Session, select_mut};
use pocketperf_runtime::tokenizer::{ChatMessage, StreamDecoder};
use tokio::sync::mpsc::UnboundedSender;

use crate::sut::prompts::{PromptText, common_prefix, encode_prompt, reusable_prefix};

/// What a request asks the model for.
#[derive(Debug, Clone)]
pub enum PromptInput {
    /// Raw text; control-token text inside it (`<|im_start|>`) is parsed, so a prompt already
    /// rendered in the chat template is understood as `generate` understands it.
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
    /// Messages rendered in the model's chat template, ending with the reply's header.
    Chat(Vec<ChatMessage>),
}

/// One generation request, queued for the worker.
#[derive(Debug)]
pub struct GenRequest {
    pub prompt: PromptInput,
    pub max_tokens: usize,
    /// Keep generating past an end-of-generation token (a benchmark's fixed output length).
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    /// `Some(k)`: each token's log-probability and the `k` most likely alternatives.
    pub top_logprobs: Option<usize>,
    /// With `top_logprobs`: these tokens' log-probabilities too, wherever they rank.
    pub logprob_ids: Vec<u32>,
    pub deadline: Instant,
    pub events: UnboundedSender<GenEvent>,
}

/// A token's log-probability and the most likely alternatives at its position.
#[derive(Debug, Clone)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// `(piece, bytes, logprob)`, most likely first.
    pub top: Vec<(String, Vec<u8>, f32)>,
    /// `(id, logprob)` of the tokens the request named (`logprob_token_ids`).
    pub requested: Vec<(u32, f32)>,
}

/// One generated token.
#[derive(Debug, Clone)]
pub struct TokenOut {
    pub id: u32,
    /// Its piece as text (the token alone).
    pub piece: String,
    pub bytes: Vec<u8>,
    /// Text completed by it (UTF-8 split across tokens comes out whole, with the last one).
    pub text: String,
    pub logprobs: Option<TokenLogprobs>,
}

/// How and when a request ended.
#[derive(Debug, Clone, Copy)]
pub struct Finish {
    /// `length` (max_tokens reached) or `stop` (end of generation).
    pub reason: &'static str,
    pub prompt_tokens: usize,
    /// Prompt tokens taken from the slot's cache (not prefilled).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// Queue wait plus prefill, up to the first token, milliseconds.
    pub ttft_ms: f64,
    pub prompt_ms: f64,
    /// From the first token to the last.
    pub predicted_ms: f64,
}

/// What the worker tells a request's handler, in order: `Token`s then `Done`, or `Failed`.
#[derive(Debug, Clone)]
pub enum GenEvent {
    Token(TokenOut),
    Done(Finish),
    /// HTTP status and message (before any token: the request's status; after: an error
    /// event in the stream).
    Failed {
        status: u16,
        message: String,
    },
}

/// Counters the HTTP side reads for `/health` (and tests for leaked sequences).
#[derive(Debug, Default)]
pub struct WorkerState {
    pub slots_total: AtomicUsize,
    pub slots_busy: AtomicUsize,
    pub queued: AtomicUsize,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub timed_out: AtomicU64,
    /// Stop taking requests; finish or cancel those in flight by the drain deadline.
    pub stopping: AtomicBool,
}

/// Settings of the worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    pub slots: usize,
    /// Token slots of each sequence's KV ring: prompt plus max_tokens must fit.
    pub ctx: usize,
    /// How long in-flight requests may run on after shutdown begins.
    pub drain: Duration,
    /// Keep each slot's KV between requests and reuse the longest common prompt prefix.
    pub prefix_reuse: bool,
}

struct Active {
    events: UnboundedSender<GenEvent>,
    last: u32,
    generated: usize,
    max_tokens: usize,
    ignore_eos: bool,
    sampling: SamplingParams,
    top_logprobs: Option<usize>,
    logprob_ids: Vec<u32>,
    deadline: Instant,
    stream: StreamDecoder,
    prompt_tokens: usize,
    cached_tokens: usize,
    t_queued: Instant,
    t_first: Instant,
    prompt_ms: f64,
}

/// Log-probability of `chosen`, of the `k` most likely tokens and of each id in `ids`, in
/// one logit row: log-softmax with the normalizer in f64 (the runtime's `log_prob` and
/// MMLU's letter scoring compute it the same way), rounded to f32.
pub fn row_logprobs(logits: &[f32], chosen: u32, k: usize, ids: &[u32]) -> RowLogprobs {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&l| (l as f64 - mx).exp())
        .sum::<f64>()
        .ln()
        + mx;
    let lp = |id: u32| {
        logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32)
    };
    // The k largest, kept sorted (k is at most a few dozen).
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() == k && l <= top[k - 1].1 {
                continue;
            }
            let at = top.partition_point(|&(_, x)| x >= l);
            top.insert(at, (i as u32, l));
            top.truncate(k);
        }
    }
    (
        lp(chosen),
        top.into_iter().map(|(i, _)| (i, lp(i))).collect(),
        ids.iter().map(|&i| (i, lp(i))).collect(),
    )
}

/// What [`row_logprobs`] returns: the chosen token's, the top k's and the named ids'.
pub type RowLogprobs = (f32, Vec<(u32, f32)>, Vec<(u32, f32)>);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Worker<'e> {
    engine: &'e Engine,
    cfg: WorkerConfig,
    state: Arc<WorkerState>,
    /// Advances the sequences in flight together (each weight read once per step); the
    /// sessions are its own ([`BatchDecoder::session`]).
    batch: BatchDecoder<'e>,
    sessions: Vec<Session<'e>>,
    slots: Vec<Option<Active>>,
    /// The token ids each slot's KV holds, in order (what a later prompt may reuse).
    cached: Vec<Vec<u32>>,
    /// When each slot last took a request (admissions so far; 0: never).
    last_used: Vec<u64>,
    admitted: u64,
}

impl<'e> Worker<'e> {
    fn token_out(&self, a: &mut Active, id: u32, logits: &[f32]) -> TokenOut {
        let tok = &self.engine.tokenizer;
        let logprobs = a.top_logprobs.map(|k| {
            let (logprob, top, requested) = row_logprobs(logits, id, k, &a.logprob_ids);
            TokenLogprobs {
                logprob,
                requested,
                top: top
                    .into_iter()
                    .map(|(t, lp)| (tok.decode(&[t]), tok.token_bytes(t), lp))
                    .collect(),
            }
        });
        TokenOut {
            id,
            piece: tok.decode(&[id]),
            bytes: tok.token_bytes(id),
            text: a.stream.push(tok, id),
            logprobs,
        }
    }

    fn finish(&self, a: &Active, reason: &'static str) {
        let now = Instant::now();
        let _ = a.events.send(GenEvent::Done(Finish {
            reason,
            prompt_tokens: a.prompt_tokens,
            cached_tokens: a.cached_tokens,
            completion_tokens: a.generated,
            ttft_ms: ms(a.t_first - a.t_queued),
            prompt_ms: a.prompt_ms,
            predicted_ms: ms(now - a.t_first),
        }));
        self.state.completed.fetch_add(1, Ordering::Relaxed);
    }

    fn fail(events: &UnboundedSender<GenEvent>, status: u16, message: String) {
        let _ = events.send(GenEvent::Failed { status, message });
    }

    /// The free slot for `tokens`: with prefix reuse, the one whose cache shares the longest
    /// prefix with them when it is at least half of them; else the least recently used free
    /// slot (the first on a tie).
    fn pick_slot(&self, tokens: &[u32]) -> Option<usize> {
        let free: Vec<usize> = (0..self.slots.len())
            .filter(|&k| self.slots[k].is_none())
            .collect();
        if self.cfg.prefix_reuse {
            let best = free
                .iter()
                .map(|&k| (common_prefix(&self.cached[k], tokens), k))
                .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            if let Some((n, k)) = best
                && n > 0
                && 2 * n >= tokens.len()
            {
                return Some(k);
            }
        }
        free.into_iter().min_by_key(|&k| (self.last_used[k], k))
    }

    /// Takes `r` into a free slot ([`Worker::pick_slot`]): prefill and first token. Leaves
    /// the slot empty when the request ends there (one token, end of generation, failure,
    /// client gone).
    fn admit(&mut self, r: GenRequest) {
        let t_queued = Instant::now();
        if self.state.stopping.load(Ordering::Relaxed) {
            Self::fail(&r.events, 503, "the server is shutting down".into());
            return;
        }
        if Instant::now() >= r.deadline {
            self.state.timed_out.fetch_add(1, Ordering::Relaxed);
            Self::fail(&r.events, 504, "request timed out in the queue".into());
            return;
        }
        if r.events.is_closed() {
            self.state.cancelled.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let tok = &self.engine.tokenizer;
        let tokens = match &r.prompt {
            PromptInput::Tokens(t) => match t.iter().find(|&&id| id as usize >= tok.vocab_size()) {
                Some(id) => Err(format!(
                    "token id {id} is outside the vocabulary of {}",
                    tok.vocab_size()
                )),
                None => Ok(t.clone()),
            },
            PromptInput::Text(text) => encode_prompt(
                tok,
                PromptText::Raw {
                    text,
                    special: true,
                },
            )
            .map_err(|e| e.to_string()),
            PromptInput::Chat(m) => {
                encode_prompt(tok, PromptText::Chat { messages: m }).map_err(|e| e.to_string())
            }
        };
        let tokens = match tokens {
            Ok(t) if t.is_empty() => Err("the prompt is empty".to_string()),
            other => other,
        };
        let tokens = match tokens {
            Ok(t) => t,
            Err(e) => return Self::fail(&r.events, 400, e),
        };
        if tokens.len() + r.max_tokens > self.cfg.ctx {
            return Self::fail(
                &r.events,
                400,
                format!(
                    "prompt of {} tokens plus max_tokens {} exceeds the context of {} tokens",
                    tokens.len(),
                    r.max_tokens,
                    self.cfg.ctx
                ),
            );
        }
        let Some(k) = self.pick_slot(&tokens) else {
            return Self::fail(&r.events, 503, "no free slot".into());
        };
        self.admitted += 1;
        self.last_used[k] = self.admitted;
        let s = &mut self.sessions[k];
        // The cached prefix, short of the prompt's last token (its logits start the reply).
        let keep = if self.cfg.prefix_reuse {
            reusable_prefix(&self.cached[k], &tokens)
        } else {
            0
        };
        let keep = if keep > 0 && s.truncate(keep).is_ok() {
            keep
        } else {
            s.reset();
            0
        };
        self.cached[k].truncate(keep);
        s.reseed(r.sampling.seed);
        let t0 = Instant::now();
        let logits = match s.prefill(&tokens[keep..]) {
            Ok(logits) => logits.to_vec(),
            Err(e) => {
                s.reset();
                self.cached[k].clear();
                return Self::fail(&r.events, 500, format!("prefill: {e}"));
            }
        };
        self.cached[k].extend_from_slice(&tokens[keep..]);
        let first = (s.sample(&logits, &r.sampling), logits);
        let t_first = Instant::now();
        let mut a = Active {
            events: r.events,
            last: first.0,
            generated: 0,
            max_tokens: r.max_tokens,
            ignore_eos: r.ignore_eos,
            sampling: r.sampling,
            top_logprobs: r.top_logprobs,
            logprob_ids: r.logprob_ids,
            deadline: r.deadline,
            stream: StreamDecoder::new(),
            prompt_tokens: tokens.len(),
            cached_tokens: keep,
            t_queued,
            t_first,
            prompt_ms: ms(t_first - t0),
        };
        if self.step_one(&mut a, first.0, &first.1) {
            self.slots[k] = Some(a);
        }
    }

    /// Emits token `id` chosen from `logits` for `a`; false when `a` has ended.
    fn step_one(&self, a: &mut Active, id: u32, logits: &[f32]) -> bool {
        if a.max_tokens == 0 {
            self.finish(a, "length");
            return false;
        }
        if !a.ignore_eos && self.engine.tokenizer.is_eog(id) {
            self.finish(a, "stop");
            return false;
        }
        let out = self.token_out(a, id, logits);
        if a.events.send(GenEvent::Token(out)).is_err() {
            self.state.cancelled.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        a.generated += 1;
        a.last = id;
        if a.generated >= a.max_tokens {
            self.finish(a, "length");
            return false;
        }
        if Instant::now() >= a.deadline {
            self.state.timed_out.fetch_add(1, Ordering::Relaxed);
            Self::fail(&a.events, 504, "request timed out".into());
            return false;
        }
        true
    }

    fn busy(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn publish(&self) {
        self.state.slots_busy.store(self.busy(), Ordering::Relaxed);
    }

    fn run(&mut self, rx: &Receiver<GenRequest>) {
        let mut drain_until: Option<Instant> = None;
        loop {
            if self.state.stopping.load(Ordering::Relaxed) && drain_until.is_none() {
                drain_until = Some(Instant::now() + self.cfg.drain);
            }
            if let Some(d) = drain_until
                && Instant::now() >= d
            {
                for a in self.slots.iter_mut().filter_map(Option::take) {
                    Self::fail(&a.events, 503, "cancelled: the server shut down".into());
                    self.state.cancelled.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Admit queued requests into free slots (blocking only when idle).
            while self.busy() < self.slots.len() {
                let next = if self.busy() == 0 {
                    match rx.recv_timeout(Duration::from_millis(50)) {
                        Ok(r) => Some(r),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                } else {
                    match rx.try_recv() {
                        Ok(r) => Some(r),
                        Err(TryRecvError::Empty) => None,
                        Err(TryRecvError::Disconnected) => {
                            if self.busy() == 0 {
                                return;
                            }
                            None
                        }
                    }
                };
                let Some(r) = next else { break };
                self.state.queued.fetch_sub(1, Ordering::Relaxed);
                self.admit(r);
                self.publish();
            }
            if self.busy() == 0 {
                if drain_until.is_some() && self.state.queued.load(Ordering::Relaxed) == 0 {
                    return;
                }
                continue;
            }
            self.decode_step();
            self.publish();
        }
    }

    /// Advances every sequence in flight by one token.
    fn decode_step(&mut self) {
        // A client gone since the last token frees its slot before the step.
        for slot in self.slots.iter_mut() {
            if slot.as_ref().is_some_and(|a| a.events.is_closed()) {
                *slot = None;
                self.state.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        let order: Vec<usize> = (0..self.slots.len())
            .filter(|&k| self.slots[k].is_some())
            .collect();
        if order.is_empty() {
            return;
        }
        let tokens: Vec<u32> = order
            .iter()
            .filter_map(|&k| self.slots[k].as_ref().map(|a| a.last))
            .collect();
        // What the step feeds becomes part of each slot's cache (undone below on failure).
        for (&k, &t) in order.iter().zip(&tokens) {
            self.cached[k].push(t);
        }
        let vocab = self.engine.model.config().vocab_size;
        let logits: Result<Vec<f32>, String> = {
            let mut refs: Vec<&mut Session<'e>> = select_mut(&mut self.sessions, &order);
            self.batch
                .decode(&mut refs, &tokens)
                .map(<[f32]>::to_vec)
                .map_err(|e| e.to_string())
        };
        match logits {
            Ok(logits) => {
                for (row, &k) in order.iter().enumerate() {
                    let Some(mut a) = self.slots[k].take() else {
                        continue;
                    };
                    let l = &logits[row * vocab..(row + 1) * vocab];
                    let id = self.sessions[k].sample(l, &a.sampling);
                    if self.step_one(&mut a, id, l) {
                        self.slots[k] = Some(a);
                    }
                }
            }
            Err(e) => {
                for &k in &order {
                    self.sessions[k].reset();
                    self.cached[k].clear();
                    if let Some(a) = self.slots[k].take() {
                        Self::fail(&a.events, 500, format!("decode: {e}"));
                    }
                }
            }
        }
    }
}

/// Prompt tokens one forward call of a slot's prefill carries at most.
const PREFILL_CHUNK: usize = 128;

/// Runs the worker on `engine` until the request channel closes (or, once
/// [`WorkerState::stopping`] is set, until the requests in flight are done or cancelled).
pub fn run_worker(
    engine: &Engine,
    cfg: WorkerConfig,
    state: Arc<WorkerState>,
    rx: Receiver<GenRequest>,
) -> pocketperf_runtime::Result<()> {
    let slots = cfg.slots.max(1);
    // Prompts are prefilled a session at a time in chunks of up to PREFILL_CHUNK tokens; on
    // OpenCL those run in the batch's device buffers, which must hold a whole chunk.
    let cpu = matches!(engine.backend(), Backend::Cpu);
    let rows = if cpu { slots } else { slots.max(PREFILL_CHUNK) };
    let batch = engine.batch_decoder_rows(slots, rows, cfg.ctx)?;
    let sessions = (0..slots)
        .map(|_| {
            batch.session(SessionOptions {
                max_seq_len: cfg.ctx,
                max_batch: PREFILL_CHUNK,
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    state.slots_total.store(slots, Ordering::Relaxed);
    let mut w = Worker {
        engine,
        cfg: WorkerConfig { slots, ..cfg },
        state,
        batch,
        sessions,
        slots: (0..slots).map(|_| None).collect(),
        cached: vec![Vec::new(); slots],
        last_used: vec![0; slots],
        admitted: 0,
    };
    w.run(&rx);
    for a in w.slots.iter_mut().filter_map(Option::take) {
        Worker::fail(&a.events, 503, "cancelled: the server shut down".into());
    }
    w.publish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_logprobs_match_log_softmax_and_order() {
        let logits = [1.0f32, 3.0, 2.0, -1.0, 3.0];
        let (lp, top, named) = row_logprobs(&logits, 2, 3, &[3, 0]);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        let expect = |i: usize| ((logits[i] as f64).exp() / z).ln() as f32;
        assert!((lp - expect(2)).abs() < 1e-6);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        // Ties keep the lower id first; then the next largest.
        assert_eq!(ids, vec![1, 4, 2]);
        for (id, l) in top {
            assert!((l - expect(id as usize)).abs() < 1e-6);
        }
        assert_eq!(named.len(), 2);
        for (id, l) in named {
            assert!((l - expect(id as usize)).abs() < 1e-6);
        }
        assert!(row_logprobs(&logits, 0, 0, &[]).1.is_empty());
        assert_eq!(row_logprobs(&logits, 9, 1, &[]).0, f32::NEG_INFINITY);
    }
}
