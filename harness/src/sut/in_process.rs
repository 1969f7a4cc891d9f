//! The runtime in this process as the scenario engine's system under test. The SUT
//! ([`InProcessSut`]) turns queries into [`Job`]s from the prompt library and delegates the
//! decoding to a [`Decoder`] ([`make_decoder`]): SingleStream and Server decode each query as
//! it arrives ([`SequentialDecoder`], with the per-token governor hook when one is set);
//! Offline hands the whole batch over at flush to the [`BatchedDecoder`], which keeps
//! `--offline-batch` sequences (default [`OFFLINE_BATCH`]) in flight through the runtime's
//! mixed batched passes (continuous batching with chunked prefill). With `--prefix-reuse on`
//! every session keeps the prefix a prompt shares with its previous one ([`PrefixReuse`]).

use anyhow::Result;
use pocketperf_runtime::backend::DeviceCounters;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{
    BatchDecoder, Engine, GenerateOptions, SamplingParams, Session, argmax, select_mut,
};
use pocketperf_scenarios::{Query, Responder, Scenario, SystemUnderTest};

pub use super::prompts::Job;
use super::prompts::{PrefixReuse, PromptLibrary};
use crate::governor_hook::SharedGovernor;

/// How the in-process SUT turns jobs into tokens. It reports every token (including the
/// first) with [`Responder::token`] and then [`Responder::complete`], or
/// [`Responder::fail`] for a job it cannot run.
pub trait Decoder {
    /// Name for logs (`sequential`, `batched`).
    fn name(&self) -> &str;
    /// Decodes `jobs`; a batched implementation may interleave them.
    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>);
    /// The accelerator's counters since the decoder was made (`None` on the CPU backend).
    fn device_counters(&self) -> Option<DeviceCounters> {
        None
    }
    /// How it decodes, for result.json (`meta.settings.sut.decoder`).
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "kind": self.name() })
    }
}

/// One sequence at a time: reset (or, with prefix reuse, rewind to the prefix shared with
/// the previous prompt), prefill, then exactly `max_new_tokens` greedy tokens (EOS ignored,
/// as MLPerf's performance mode forces the output length).
pub struct SequentialDecoder<'e> {
    session: Session<'e>,
    prefix: PrefixReuse,
    /// Thermal governor called after every token (`--governor`); shared so the caller reads
    /// its record after the run.
    governor: Option<SharedGovernor>,
}

impl<'e> SequentialDecoder<'e> {
    pub fn new(session: Session<'e>, prefix_reuse: bool) -> Self {
        SequentialDecoder {
            session,
            prefix: PrefixReuse::new(prefix_reuse),
            governor: None,
        }
    }

    /// Applies `governor` after every decoded token.
    pub fn with_governor(mut self, governor: Option<SharedGovernor>) -> Self {
        self.governor = governor;
        self
    }
}

impl Decoder for SequentialDecoder<'_> {
    fn name(&self) -> &str {
        "sequential"
    }

    fn device_counters(&self) -> Option<DeviceCounters> {
        self.session.device_counters()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "sequential",
            "prefix_reuse": prefix_json(std::slice::from_ref(&self.prefix)),
        })
    }

    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>) {
        for job in jobs {
            let id = job.query.id;
            let kept = self.prefix.prepare(&mut self.session, job.prompt);
            let opts = GenerateOptions {
                max_new_tokens: job.max_new_tokens,
                stop_at_eog: false,
                sampling: SamplingParams::default(),
            };
            let engine = self.session.engine();
            let mut gov = self.governor.as_ref().map(|g| g.borrow_mut());
            if let Some(g) = gov.as_mut() {
                g.begin();
            }
            let res = self.session.generate(&job.prompt[kept..], &opts, |k, _| {
                responder.token(id);
                if let Some(g) = gov.as_mut() {
                    g.on_token(id, k, engine);
                }
            });
            drop(gov);
            match res {
                Ok(stats) => responder.complete(id, stats.generated as u64, None),
                Err(e) => {
                    self.prefix.forget();
                    responder.fail(id, &format!("sample {}: {e}", job.query.sample_index));
                }
            }
        }
    }
}

/// Sequences an Offline run decodes together ([`BatchedDecoder`]) unless `--offline-batch`
/// says otherwise: the batch size at which the runtime's batched decode reaches several
/// times single-sequence throughput on a phone-class CPU (docs/PERFORMANCE.md).
pub const OFFLINE_BATCH: usize = 8;

/// Prompt tokens one batched pass of Offline carries at most by default (`--prefill-chunk`):
/// a bound on what a new prompt adds to the passes of the sequences in flight (on the
/// reference model a pass with a full chunk took about 2.7× one with few prompt rows, where
/// a whole prompt used to stall them up to 20× the median gap: docs/PERFORMANCE.md,
/// "Offline with chunked prefill").
pub const DEFAULT_PREFILL_CHUNK: usize = 32;

/// Offline's decoder: up to `slots` sequences in flight, continuous batching with chunked
/// prefill. A free slot takes the next job at once; every pass then carries one decode
/// token of each sequence past its prompt and up to `prefill_chunk` prompt tokens of the
/// sequences still reading theirs (in slot order, a chunk each), in one batched forward
/// pass of the runtime (each weight read once for the whole pass, each sequence in its own
/// KV ring). No sequence waits for another's whole prompt: a new prompt costs the others at
/// most `prefill_chunk` extra rows per pass. Greedy, exactly `max_new_tokens` tokens per job
/// (EOS ignored). With `--governor` the per-token hook runs once per pass
/// ([`crate::governor_hook::GovernorHook::on_pass`]).
pub struct BatchedDecoder<'e> {
    batch: BatchDecoder<'e>,
    sessions: Vec<Session<'e>>,
    /// Each slot's prefix reuse (`--prefix-reuse`): a new job keeps what it shares with the
    /// slot's previous prompt.
    prefix: Vec<PrefixReuse>,
    prefill_chunk: usize,
    max_seq_len: usize,
    governor: Option<SharedGovernor>,
}

/// A sequence in flight in a [`BatchedDecoder`] slot.
#[derive(Clone, Copy)]
struct InFlight<'j> {
    id: u64,
    sample: u64,
    prompt: &'j [u32],
    /// Prompt tokens already run.
    fed: usize,
    last: u32,
    generated: usize,
    target: usize,
}

impl<'e> BatchedDecoder<'e> {
    /// `slots` sessions of `max_seq_len` tokens each, on `engine` (CPU or OpenCL backend),
    /// with up to `prefill_chunk` prompt tokens per pass.
    pub fn new(
        engine: &'e Engine,
        slots: usize,
        max_seq_len: usize,
        prefill_chunk: usize,
        prefix_reuse: bool,
    ) -> Result<Self> {
        let slots = slots.max(1);
        let prefill_chunk = prefill_chunk.max(1);
        let batch = engine.batch_decoder_rows(slots, slots + prefill_chunk, max_seq_len)?;
        let sessions = (0..slots)
            .map(|_| {
                batch.session(SessionOptions {
                    max_seq_len,
                    max_batch: prefill_chunk,
                    ..Default::default()
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(BatchedDecoder {
            batch,
            prefix: (0..sessions.len())
                .map(|_| PrefixReuse::new(prefix_reuse))
                .collect(),
            sessions,
            prefill_chunk,
            max_seq_len,
            governor: None,
        })
    }

    /// Applies `governor` once per batched pass.
    pub fn with_governor(mut self, governor: Option<SharedGovernor>) -> Self {
        self.governor = governor;
        self
    }

    /// Readies slot `k`'s session for `job` (reset, or rewound to the prefix it shares with
    /// the slot's previous prompt); `None` when the job needs no pass (no tokens asked) or
    /// cannot run (empty prompt, longer than the sessions hold).
    fn start<'j>(
        &mut self,
        k: usize,
        job: &Job<'j>,
        responder: &mut Responder<'_>,
    ) -> Option<InFlight<'j>> {
        let id = job.query.id;
        if job.max_new_tokens == 0 {
            responder.complete(id, 0, None);
            return None;
        }
        let need = job.prompt.len() + job.max_new_tokens - 1;
        if job.prompt.is_empty() || need > self.max_seq_len {
            let why = if job.prompt.is_empty() {
                "empty prompt".to_string()
            } else {
                format!("{need} tokens do not fit the {} slots", self.max_seq_len)
            };
            responder.fail(id, &format!("sample {}: {why}", job.query.sample_index));
            return None;
        }
        let fed = self.prefix[k].prepare(&mut self.sessions[k], job.prompt);
        Some(InFlight {
            id,
            sample: job.query.sample_index,
            prompt: job.prompt,
            fed,
            last: 0,
            generated: 0,
            target: job.max_new_tokens,
        })
    }
}

impl Decoder for BatchedDecoder<'_> {
    fn name(&self) -> &str {
        "batched"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "batched",
            "slots": self.sessions.len(),
            "prefill_chunk": self.prefill_chunk,
            "prefix_reuse": prefix_json(&self.prefix),
            "governor_per_pass": self.governor.is_some(),
        })
    }

    fn decode(&mut self, jobs: &[Job<'_>], responder: &mut Responder<'_>) {
        let mut queue = jobs.iter();
        let n = self.sessions.len();
        let mut slots: Vec<Option<InFlight<'_>>> = vec![None; n];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut counts: Vec<usize> = Vec::with_capacity(n);
        let mut tokens: Vec<u32> = Vec::with_capacity(n + self.prefill_chunk);
        let mut emitted: Vec<(u64, usize)> = Vec::with_capacity(n);
        let engine = self.sessions[0].engine();
        let vocab = engine.model.config().vocab_size;
        if let Some(g) = &self.governor {
            g.borrow_mut().begin();
        }
        loop {
            for (k, slot) in slots.iter_mut().enumerate() {
                while slot.is_none() {
                    let Some(job) = queue.next() else { break };
                    *slot = self.start(k, job, responder);
                }
            }
            // This pass: a decode token of each sequence past its prompt, prompt chunks
            // within the budget.
            order.clear();
            counts.clear();
            tokens.clear();
            let mut budget = self.prefill_chunk;
            for (k, f) in slots.iter().enumerate() {
                let Some(f) = f else { continue };
                let rest = f.prompt.len() - f.fed;
                let take = if rest == 0 {
                    tokens.push(f.last);
                    1
                } else if budget > 0 {
                    let take = rest.min(budget);
                    budget -= take;
                    tokens.extend_from_slice(&f.prompt[f.fed..f.fed + take]);
                    take
                } else {
                    continue;
                };
                order.push(k);
                counts.push(take);
            }
            if order.is_empty() {
                return;
            }
            let mut refs: Vec<&mut Session<'_>> = select_mut(&mut self.sessions, &order);
            let step = self.batch.step(&mut refs, &tokens, &counts);
            drop(refs);
            emitted.clear();
            match step {
                Ok(logits) => {
                    for (row, &k) in order.iter().enumerate() {
                        let Some(f) = slots[k].as_mut() else { continue };
                        if f.fed < f.prompt.len() {
                            f.fed += counts[row];
                            if f.fed < f.prompt.len() {
                                continue;
                            }
                        }
                        f.last = argmax(&logits[row * vocab..(row + 1) * vocab]);
                        emitted.push((f.id, f.generated));
                        f.generated += 1;
                        responder.token(f.id);
                        if f.generated == f.target {
                            responder.complete(f.id, f.generated as u64, None);
                            slots[k] = None;
                        }
                    }
                }
                Err(e) => {
                    // A pass failed for the whole batch: fail every sequence in it.
                    for &k in &order {
                        self.prefix[k].forget();
                        if let Some(f) = slots[k].take() {
                            responder
                                .fail(f.id, &format!("sample {}: batched pass: {e}", f.sample));
                        }
                    }
                }
            }
            if let Some(g) = &self.governor {
                g.borrow_mut().on_pass(&emitted, engine);
            }
        }
    }
}

/// `result.json`'s account of prefix reuse over a decoder's sessions: on or off, the prompt
/// tokens asked for and those taken from the cache.
fn prefix_json(prefix: &[PrefixReuse]) -> serde_json::Value {
    serde_json::json!({
        "on": prefix.first().is_some_and(PrefixReuse::on),
        "prompt_tokens": prefix.iter().map(PrefixReuse::prompt_tokens).sum::<u64>(),
        "reused_tokens": prefix.iter().map(PrefixReuse::reused).sum::<u64>(),
    })
}

/// How Offline's batched decoder is sized (`--offline-batch`, `--prefill-chunk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfflineBatching {
    /// Sequences in flight (default [`OFFLINE_BATCH`]).
    pub slots: usize,
    /// Prompt tokens one pass carries at most (default [`DEFAULT_PREFILL_CHUNK`]).
    pub prefill_chunk: usize,
}

/// The decoder for a scenario: Offline decodes `offline.slots` sequences at a time (no more
/// than the prompt set holds) with continuous batching and chunked prefill
/// (`offline.prefill_chunk` prompt tokens per pass at most; the governor, when set, once per
/// pass) on either backend; everything else one sequence at a time. With `prefix_reuse`
/// each session keeps the KV of the prefix a new prompt shares with its previous one.
pub fn make_decoder<'e>(
    engine: &'e Engine,
    scenario: Scenario,
    library: &PromptLibrary,
    governor: Option<SharedGovernor>,
    offline: OfflineBatching,
    prefix_reuse: bool,
) -> Result<Box<dyn Decoder + 'e>> {
    let max_seq_len = library.longest_sequence().max(1);
    if scenario == Scenario::Offline {
        return Ok(Box::new(
            BatchedDecoder::new(
                engine,
                offline.slots.min(library.len().max(1)),
                max_seq_len,
                offline.prefill_chunk,
                prefix_reuse,
            )?
            .with_governor(governor),
        ));
    }
    let session = engine.session(SessionOptions {
        max_seq_len,
        max_batch: 128,
        ..Default::default()
    })?;
    Ok(Box::new(
        SequentialDecoder::new(session, prefix_reuse).with_governor(governor),
    ))
}

/// The runtime in this process as the SUT. SingleStream and Server decode each query on the
/// engine's thread as it is issued (a Server query that arrives while another decodes waits,
/// and its latency counts from its scheduled arrival); Offline queues the batch and decodes
/// it at flush through one [`Decoder::decode`] call.
pub struct InProcessSut<'e, 'l> {
    decoder: Box<dyn Decoder + 'e>,
    library: &'l PromptLibrary,
    batch_at_flush: bool,
    pending: Vec<Query>,
    name: String,
}

impl<'e, 'l> InProcessSut<'e, 'l> {
    pub fn new(
        decoder: Box<dyn Decoder + 'e>,
        library: &'l PromptLibrary,
        scenario: Scenario,
    ) -> Self {
        let name = format!("pocketperf-runtime (in-process, {} decode)", decoder.name());
        InProcessSut {
            decoder,
            library,
            batch_at_flush: scenario == Scenario::Offline,
            pending: Vec::new(),
            name,
        }
    }

    /// The decoder's accelerator counters (`None` on the CPU backend).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        self.decoder.device_counters()
    }

    /// How the decoder works (result.json `meta.settings.sut.decoder`).
    pub fn decoder_json(&self) -> serde_json::Value {
        self.decoder.describe()
    }

    fn decode(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        let mut jobs = Vec::with_capacity(queries.len());
        for &q in queries {
            match self.library.job(q) {
                Ok(j) => jobs.push(j),
                Err(e) => responder.fail(q.id, &e),
            }
        }
        self.decoder.decode(&jobs, responder);
    }
}

impl SystemUnderTest for InProcessSut<'_, '_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        if self.batch_at_flush {
            self.pending.extend_from_slice(queries);
        } else {
            self.decode(queries, responder);
        }
    }

    fn flush_queries(&mut self, responder: &mut Responder<'_>) {
        let batch = std::mem::take(&mut self.pending);
        if !batch.is_empty() {
            self.decode(&batch, responder);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::run::{PresetArg, preset_settings};
    use crate::sut::prompts::PromptQsl;
    use pocketperf_datasets::perf::PerfPrompt;
    use pocketperf_scenarios::{TestResult, VirtualClock, run_test};
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Stamps `max_new_tokens` tokens 1 ms apart after a 10 ms prefill, on virtual time,
    /// and records the size of every batch it is handed.
    struct Recording {
        batches: Rc<RefCell<Vec<usize>>>,
        busy_until: u64,
    }

    impl Decoder for Recording {
        fn name(&self) -> &str {
            "recording"
        }
        fn decode(&mut self, jobs: &[Job<'_>], r: &mut Responder<'_>) {
            self.batches.borrow_mut().push(jobs.len());
            for j in jobs {
                let mut t = r.now_ns().max(self.busy_until) + 10_000_000;
                for _ in 0..j.max_new_tokens {
                    r.token_at(j.query.id, t);
                    t += 1_000_000;
                }
                let done = t - 1_000_000;
                r.complete_at(j.query.id, done, j.max_new_tokens as u64, None);
                self.busy_until = done;
            }
        }
    }

    fn library() -> PromptLibrary {
        let prompts: Vec<PerfPrompt> = (0..8)
            .map(|i| PerfPrompt {
                id: format!("p{i:02}"),
                text: "x".into(),
                max_new_tokens: 4 + i,
            })
            .collect();
        let tokens = (0..8).map(|i| vec![1; 3 + i]).collect();
        PromptLibrary::from_parts(prompts, tokens).unwrap()
    }

    fn run_with(scenario: Scenario) -> (Vec<usize>, TestResult) {
        let lib = library();
        let batches = Rc::new(RefCell::new(Vec::new()));
        let decoder = Box::new(Recording {
            batches: batches.clone(),
            busy_until: 0,
        });
        let mut sut = InProcessSut::new(decoder, &lib, scenario);
        let mut s = preset_settings(scenario, PresetArg::Quick);
        s.min_query_count = 12;
        s.max_query_count = 12;
        s.min_duration_ms = 0;
        let clock = VirtualClock::new();
        let r = run_test(&mut sut, &mut PromptQsl::new(&lib), &s, &clock).unwrap();
        let b = batches.borrow().clone();
        (b, r)
    }

    #[test]
    fn offline_hands_the_whole_batch_to_the_decoder_in_one_call() {
        let (batches, r) = run_with(Scenario::Offline);
        assert_eq!(batches, vec![12], "one decode call with every sample");
        let p = r.performance.as_ref().unwrap();
        assert_eq!(p.queries_completed, 12);
        // Every token stamped: the inter-token gaps are all 1 ms.
        let itl = p.inter_token.as_ref().unwrap();
        assert_eq!((itl.min, itl.max), (1_000_000, 1_000_000));
        assert_eq!(itl.count, p.total_tokens - 12);
    }

    #[test]
    fn single_stream_and_server_decode_each_query_as_it_arrives() {
        for scenario in [Scenario::SingleStream, Scenario::Server] {
            let (batches, r) = run_with(scenario);
            assert_eq!(batches, vec![1; 12], "{scenario}");
            assert_eq!(r.performance.as_ref().unwrap().queries_completed, 12);
        }
    }

    #[test]
    fn a_sample_outside_the_library_fails_its_query() {
        let lib = library();
        let batches = Rc::new(RefCell::new(Vec::new()));
        let mut sut = InProcessSut::new(
            Box::new(Recording {
                batches,
                busy_until: 0,
            }),
            &lib,
            Scenario::SingleStream,
        );
        let clock = VirtualClock::new();
        let mut s = preset_settings(Scenario::SingleStream, PresetArg::Quick);
        s.min_query_count = 3;
        s.max_query_count = 3;
        s.min_duration_ms = 0;
        // A QSL that claims more samples than the library holds.
        let mut qsl = PromptQsl { total: 100 };
        let r = run_test(&mut sut, &mut qsl, &s, &clock).unwrap();
        let p = r.performance.as_ref().unwrap();
        assert_eq!(p.num_failed + p.queries_completed, 3);
        assert!(
            p.num_failed > 0,
            "the seeded draws from 100 samples hit one past 8"
        );
        assert!(
            p.failures[0].contains("outside the prompt set of 8"),
            "{:?}",
            p.failures
        );
    }
}
