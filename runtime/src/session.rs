//! Prefill/decode API over a loaded model: an [`Engine`] owns the model, tokenizer and thread
//! pool; a [`Session`] owns one sequence's KV ring and scratch. Generation reports every token
//! to a callback so the caller can timestamp it on its own clock; sampling is greedy or
//! temperature/top-p with a seeded generator. After the first token nothing on the decode
//! path allocates (proven by a counting-allocator test).

use crate::backend::opencl::{ClCore, ClLane, ClSeq, ClSeqs};
use crate::backend::{Backend, BackendChoice, DeviceCounters, Exec};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::model::{BatchForward, Counters, Forward, Model, SeqSet, SessionOptions};
use crate::pool::ThreadPool;
use crate::quant::{self, Isa};
use crate::residency::LoadOptions;
use crate::tokenizer::{Prompt, Tokenizer};
use std::path::Path;
use std::sync::{Arc, Mutex};

const REPACK_ENV: &str = "POCKETPERF_REPACK";

/// Whether engines repack (or copy) the matrices their CPU tier reads faster in another layout
/// or place ([`Model::repack_for`]): yes unless `POCKETPERF_REPACK=0` (the same bits either way; the
/// switch exists to measure the difference, docs/PERFORMANCE.md). A value other than 0 or 1
/// is an error naming it.
fn repack_from_env() -> Result<bool> {
    match quant::env_setting(REPACK_ENV)?.as_deref() {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(v) => Err(Error::Env {
            var: REPACK_ENV,
            value: v.to_string(),
            reason: "expected 0 (no copies) or 1 (the default)".into(),
        }),
    }
}

/// A loaded model with its tokenizer and worker threads.
pub struct Engine {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pool: Arc<ThreadPool>,
    isa: Isa,
    backend: Backend,
}

impl Engine {
    /// Loads a GGUF model. `threads = 0` uses every available core.
    pub fn load(path: &Path, threads: usize, isa: Isa) -> Result<Self> {
        Self::load_with(path, threads, isa, &LoadOptions::default())
    }

    /// [`Engine::load`] with the mapping made resident as `opts` asks (`--mlock`,
    /// `--prefault`; see [`crate::residency`]). With `mlock` nothing is repacked: the locked
    /// mapping is what the kernels read (a copy would be memory the lock does not cover).
    pub fn load_with(path: &Path, threads: usize, isa: Isa, opts: &LoadOptions) -> Result<Self> {
        let gguf = Arc::new(GgufFile::open_with(path, opts)?);
        Self::build(gguf, threads, isa, !opts.mlock)
    }

    /// An engine over an opened file; the matrices the tier reads faster in another layout
    /// are repacked ([`Model::repack_for`]) when its first CPU session or batch decoder is
    /// made, unless `POCKETPERF_REPACK=0`.
    pub fn from_gguf(gguf: Arc<GgufFile>, threads: usize, isa: Isa) -> Result<Self> {
        Self::build(gguf, threads, isa, true)
    }

    fn build(gguf: Arc<GgufFile>, threads: usize, isa: Isa, repack: bool) -> Result<Self> {
        if !quant::supported(isa) {
            return Err(Error::Isa {
                requested: format!("{isa:?}"),
                reason: "not supported by this CPU".into(),
            });
        }
        // The tuning variables are read before any work, so a mistyped value is reported
        // instead of measured as the default.
        quant::prefetch_from_env()?;
        let repack = repack && repack_from_env()?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let mut model = Model::from_gguf(gguf)?;
        if repack {
            model.repack_for(isa);
        }
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        Ok(Engine {
            model,
            tokenizer,
            pool: Arc::new(ThreadPool::new(threads)),
            isa,
            backend: Backend::Cpu,
        })
    }

    /// Runs this engine's sessions on `choice` (the CPU by default).
    pub fn with_backend(mut self, choice: &BackendChoice) -> Result<Self> {
        self.backend = Backend::open(&self.model, choice)?;
        if !matches!(self.backend, Backend::Cpu) {
            // The device reads the weights from the mapping: no copies are made.
            self.model.drop_repacked();
        }
        Ok(self)
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// This engine with the request for copies withdrawn ([`Model::drop_repacked`]): its CPU
    /// sessions read every matrix from the mapping, in the file's layout (the same bits). For
    /// a cold start whose first query must read the weights from the file: copies made when
    /// the first session is built would read them before the file is evicted.
    pub fn without_copies(mut self) -> Self {
        self.model.drop_repacked();
        self
    }

    /// Token ids of a prompt (plain text or chat messages, BOS as the model wants): the one
    /// route from text to tokens; see [`Prompt`].
    pub fn encode_prompt(&self, prompt: &Prompt<'_>) -> Result<Vec<u32>> {
        self.tokenizer.encode_prompt(prompt)
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Threads the kernels use now (≤ [`Engine::threads`]).
    pub fn active_threads(&self) -> usize {
        self.pool.active_threads()
    }

    /// Lets the kernels use only `n` of the pool's threads (clamped to `1..=threads`), e.g.
    /// for the thermal governor's thread-count actuator; returns the count in effect.
    pub fn set_active_threads(&self, n: usize) -> usize {
        self.pool.set_active_threads(n)
    }

    pub fn session(&self, opts: SessionOptions) -> Result<Session<'_>> {
        let fwd = match &self.backend {
            Backend::Cpu => Exec::Cpu(Forward::new(
                &self.model,
                opts,
                self.pool.clone(),
                self.isa,
            )?),
            Backend::OpenCl(cl) => Exec::OpenCl(Box::new(cl.session(opts)?)),
        };
        Ok(Session {
            engine: self,
            fwd,
            sampler: Sampler::new(self.model.config().vocab_size),
        })
    }

    /// A decoder that advances up to `max_batch` sessions of this engine by one token each
    /// per call, reading every weight once for the whole batch (Offline scenario). Sessions
    /// must have KV rings of at most `max_seq_len` slots; create them with
    /// [`BatchDecoder::session`].
    pub fn batch_decoder(&self, max_batch: usize, max_seq_len: usize) -> Result<BatchDecoder<'_>> {
        self.batch_decoder_rows(max_batch, max_batch, max_seq_len)
    }

    /// A batch decoder whose passes carry up to `max_rows` tokens over at most `max_batch`
    /// sessions ([`BatchDecoder::step`]: a prompt chunk of some beside a decode token of
    /// the others; `max_rows >= max_batch`). On the CPU backend the sessions keep their own
    /// rings; on OpenCL the decoder holds the device rings of all `max_batch` sequences, and
    /// its sessions ([`BatchDecoder::session`]) are sequences in them.
    pub fn batch_decoder_rows(
        &self,
        max_batch: usize,
        max_rows: usize,
        max_seq_len: usize,
    ) -> Result<BatchDecoder<'_>> {
        let fwd = match &self.backend {
            Backend::Cpu => BatchExec::Cpu(BatchForward::with_rows(
                &self.model,
                max_batch,
                max_rows,
                max_seq_len,
                self.pool.clone(),
                self.isa,
            )?),
            Backend::OpenCl(cl) => {
                if max_rows < max_batch {
                    return Err(Error::InvalidArgument {
                        what: "batched decode".into(),
                        reason: format!(
                            "{max_rows} tokens per pass cannot carry one token of each of \
                             {max_batch} sequences"
                        ),
                    });
                }
                BatchExec::OpenCl(Arc::new(Mutex::new(cl.batch(
                    max_batch,
                    max_rows,
                    max_seq_len,
                )?)))
            }
        };
        Ok(BatchDecoder {
            engine: self,
            fwd,
            ones: vec![1; max_batch],
            out: Vec::new(),
        })
    }
}

// One per batch decoder, never moved in a hot loop: keeping the CPU state inline costs nothing.
#[allow(clippy::large_enum_variant)]
enum BatchExec {
    Cpu(BatchForward),
    /// The device rings and kernels the batch's sessions share.
    OpenCl(Arc<Mutex<ClCore>>),
}

/// Batched decode over several [`Session`]s (see [`Engine::batch_decoder`]).
pub struct BatchDecoder<'e> {
    engine: &'e Engine,
    fwd: BatchExec,
    /// `decode`'s token counts (one per sequence).
    ones: Vec<usize>,
    /// OpenCL: the logits of the last pass, copied out of the shared core.
    out: Vec<f32>,
}

fn lock(core: &Mutex<ClCore>) -> std::sync::MutexGuard<'_, ClCore> {
    // see ClLane: slot claims live in each sequence, a poisoned lock is still consistent
    core.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<'e> BatchDecoder<'e> {
    pub fn max_batch(&self) -> usize {
        match &self.fwd {
            BatchExec::Cpu(f) => f.max_batch(),
            BatchExec::OpenCl(c) => lock(c).lanes(),
        }
    }

    /// A session this decoder can advance: on the CPU backend any session of the engine
    /// (this is [`Engine::session`]); on OpenCL a sequence in the decoder's device rings, of
    /// their capacity (`opts.max_seq_len` 0 or equal to it), at most `max_batch` of them at a
    /// time (a dropped session frees its place).
    pub fn session(&self, opts: SessionOptions) -> Result<Session<'e>> {
        match &self.fwd {
            BatchExec::Cpu(_) => self.engine.session(opts),
            BatchExec::OpenCl(core) => Ok(Session {
                engine: self.engine,
                fwd: Exec::ClLane(Box::new(ClLane::new(core.clone(), &opts)?)),
                sampler: Sampler::new(self.engine.model.config().vocab_size),
            }),
        }
    }

    /// Counters of the batch decoder itself (weights read once per call).
    pub fn counters(&self) -> Counters {
        match &self.fwd {
            BatchExec::Cpu(f) => f.counters,
            BatchExec::OpenCl(c) => lock(c).counters(),
        }
    }

    /// Device counters of the batch's passes (OpenCL only).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        match &self.fwd {
            BatchExec::Cpu(_) => None,
            BatchExec::OpenCl(c) => Some(lock(c).device_counters()),
        }
    }

    /// Appends `tokens[i]` to `sessions[i]` and returns every session's next-token logits
    /// (`tokens.len() × vocab`, row `i` for session `i`), identical to what
    /// [`Session::decode`] gives each session alone. Sample each row with
    /// [`Session::sample`].
    pub fn decode(&mut self, sessions: &mut [&mut Session<'e>], tokens: &[u32]) -> Result<&[f32]> {
        match &mut self.fwd {
            BatchExec::Cpu(f) => {
                let mut seqs = CpuSessions::new(sessions)?;
                f.decode(&self.engine.model, &mut seqs, tokens)
            }
            BatchExec::OpenCl(core) => {
                if tokens.len() != sessions.len() || tokens.len() > self.ones.len() {
                    return Err(Error::InvalidArgument {
                        what: "batched decode".into(),
                        reason: format!(
                            "{} tokens for {} sessions (at most {})",
                            tokens.len(),
                            sessions.len(),
                            self.ones.len()
                        ),
                    });
                }
                let counts = &self.ones[..tokens.len()];
                cl_pass(core, &mut self.out, sessions, tokens, counts)
            }
        }
    }

    /// Tokens one [`BatchDecoder::step`] carries at most.
    pub fn max_rows(&self) -> usize {
        match &self.fwd {
            BatchExec::Cpu(f) => f.max_rows(),
            BatchExec::OpenCl(c) => lock(c).max_rows(),
        }
    }

    /// One mixed pass (see [`BatchForward::step`]): `sessions[i]` takes the next
    /// `counts[i]` tokens of `tokens` (a prompt chunk, or one decode token) and row `i` of
    /// the result holds its logits after the last of them, identical to what
    /// [`Session::prefill`] / [`Session::decode`] give each session alone.
    pub fn step(
        &mut self,
        sessions: &mut [&mut Session<'e>],
        tokens: &[u32],
        counts: &[usize],
    ) -> Result<&[f32]> {
        match &mut self.fwd {
            BatchExec::Cpu(f) => {
                let mut seqs = CpuSessions::new(sessions)?;
                f.step(&self.engine.model, &mut seqs, tokens, counts)
            }
            BatchExec::OpenCl(core) => cl_pass(core, &mut self.out, sessions, tokens, counts),
        }
    }
}

/// One pass of an OpenCL batch over `sessions` (each a sequence of `core`), its logits
/// copied to `out`.
fn cl_pass<'o>(
    core: &Mutex<ClCore>,
    out: &'o mut Vec<f32>,
    sessions: &mut [&mut Session<'_>],
    tokens: &[u32],
    counts: &[usize],
) -> Result<&'o [f32]> {
    let mut c = lock(core);
    let mut seqs = LaneSessions::new(sessions, core)?;
    let logits = c.pass(&mut seqs, tokens, counts)?;
    out.clear();
    out.extend_from_slice(logits);
    Ok(out)
}

/// The sessions of one OpenCL batched pass, checked to be sequences of its core.
struct LaneSessions<'a, 'b, 'e>(&'a mut [&'b mut Session<'e>]);

impl<'a, 'b, 'e> LaneSessions<'a, 'b, 'e> {
    fn new(sessions: &'a mut [&'b mut Session<'e>], core: &Mutex<ClCore>) -> Result<Self> {
        for (i, s) in sessions.iter().enumerate() {
            let ok = matches!(&s.fwd, Exec::ClLane(l) if l.is_in(core));
            if !ok {
                return Err(Error::InvalidArgument {
                    what: format!("batched decode session {i}"),
                    reason: "is not a session of this batch decoder (create it with \
                             BatchDecoder::session)"
                        .into(),
                });
            }
        }
        Ok(LaneSessions(sessions))
    }
}

impl ClSeqs for LaneSessions<'_, '_, '_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn seq(&self, i: usize) -> &ClSeq {
        match &self.0[i].fwd {
            Exec::ClLane(l) => l.seq(),
            _ => unreachable!("LaneSessions::new checked every session"),
        }
    }
    fn seq_mut(&mut self, i: usize) -> &mut ClSeq {
        match &mut self.0[i].fwd {
            Exec::ClLane(l) => l.seq_mut(),
            _ => unreachable!("LaneSessions::new checked every session"),
        }
    }
}

/// The sessions of one batched decode call, checked to run on the CPU backend (the batched
/// forward pass works on CPU states only).
struct CpuSessions<'a, 'b, 'e>(&'a mut [&'b mut Session<'e>]);

impl<'a, 'b, 'e> CpuSessions<'a, 'b, 'e> {
    fn new(sessions: &'a mut [&'b mut Session<'e>]) -> Result<Self> {
        if let Some(i) = sessions.iter().position(|s| s.fwd.cpu().is_none()) {
            return Err(Error::InvalidArgument {
                what: format!("batched decode session {i}"),
                reason: "runs on the OpenCL backend; this batch decoder runs CPU sessions".into(),
            });
        }
        Ok(CpuSessions(sessions))
    }
}

// SAFETY: built only by `CpuSessions::new`, which checks that every session's executor is
// `Exec::Cpu`; the `SeqSet` methods below hand out only that `Forward` (itself `Sync`), so
// no thread ever reaches an OpenCL executor through a shared reference.
unsafe impl Sync for CpuSessions<'_, '_, '_> {}

impl SeqSet for CpuSessions<'_, '_, '_> {
    fn n_seqs(&self) -> usize {
        self.0.len()
    }
    fn seq(&self, i: usize) -> &Forward {
        match &self.0[i].fwd {
            Exec::Cpu(f) => f,
            _ => unreachable!("CpuSessions::new checked every session"),
        }
    }
    fn seq_mut(&mut self, i: usize) -> &mut Forward {
        match &mut self.0[i].fwd {
            Exec::Cpu(f) => f,
            _ => unreachable!("CpuSessions::new checked every session"),
        }
    }
}

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// Seeded sampler with a preallocated candidate buffer.
pub struct Sampler {
    idx: Vec<u32>,
    probs: Vec<f32>,
    state: u64,
}

impl Sampler {
    pub fn new(vocab: usize) -> Self {
        Sampler {
            idx: Vec::with_capacity(vocab),
            probs: vec![0.0; vocab],
            state: 0,
        }
    }

    pub fn reseed(&mut self, seed: u64) {
        self.state = seed;
    }

    fn next_f32(&mut self) -> f32 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }

    pub fn sample(&mut self, logits: &[f32], p: &SamplingParams) -> u32 {
        if p.temperature <= 0.0 {
            return argmax(logits);
        }
        let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for (q, &l) in self.probs.iter_mut().zip(logits) {
            *q = ((l - mx) / p.temperature).exp();
            sum += *q;
        }
        self.idx.clear();
        self.idx.extend(0..logits.len() as u32);
        let probs = &self.probs;
        self.idx
            .sort_unstable_by(|&a, &b| probs[b as usize].total_cmp(&probs[a as usize]));
        let mut keep = self.idx.len();
        let mut acc = 0.0f32;
        for (i, &t) in self.idx.iter().enumerate() {
            acc += probs[t as usize] / sum;
            if acc >= p.top_p {
                keep = i + 1;
                break;
            }
        }
        let total: f32 = self.idx[..keep].iter().map(|&t| probs[t as usize]).sum();
        let r = self.next_f32() * total;
        let mut acc = 0.0f32;
        for &t in &self.idx[..keep] {
            acc += self.probs[t as usize];
            if acc >= r {
                return t;
            }
        }
        self.idx[keep - 1]
    }
}

/// The sessions of a batched pass: the elements of `all` whose indices are in `which`, in
/// index order (the order [`BatchDecoder::decode`] and [`BatchDecoder::step`] pair with their
/// tokens).
pub fn select_mut<'a, T>(all: &'a mut [T], which: &[usize]) -> Vec<&'a mut T> {
    all.iter_mut()
        .enumerate()
        .filter(|(k, _)| which.contains(k))
        .map(|(_, s)| s)
        .collect()
}

/// Index of the largest logit (first on ties).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Log-softmax of one logit row at `id`, computed in f64.
pub fn log_prob(logits: &[f32], id: u32) -> f64 {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&l| (l as f64 - mx).exp())
        .sum::<f64>()
        .ln()
        + mx;
    logits
        .get(id as usize)
        .map_or(f64::NEG_INFINITY, |&l| l as f64 - lse)
}

/// Limits of one generation.
#[derive(Clone, Copy, Debug)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// Stop at an end-of-generation token (performance runs force a fixed length instead).
    pub stop_at_eog: bool,
    pub sampling: SamplingParams,
}

/// What a generation did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub generated: usize,
    pub stopped_at_eog: bool,
}

/// One sequence: KV ring, scratch, sampler.
pub struct Session<'e> {
    engine: &'e Engine,
    fwd: Exec,
    sampler: Sampler,
}

impl<'e> Session<'e> {
    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    pub fn n_past(&self) -> usize {
        self.fwd.n_past()
    }

    pub fn counters(&self) -> Counters {
        self.fwd.counters()
    }

    /// Kernel launches, host↔device bytes and kernel time (OpenCL sessions only).
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        self.fwd.device_counters()
    }

    /// The CPU forward state (`None` on other backends).
    pub fn forward_state(&self) -> Option<&Forward> {
        self.fwd.cpu()
    }

    pub fn reset(&mut self) {
        self.fwd.reset();
    }

    /// Rewinds the cache to its first `n` tokens (shared-prefix reuse).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.fwd.truncate(n)
    }

    /// Appends tokens and returns the logits after the last one.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.fwd.forward(&self.engine.model, tokens)
    }

    /// Appends one token and returns the next-token logits.
    pub fn decode(&mut self, token: u32) -> Result<&[f32]> {
        self.fwd
            .forward(&self.engine.model, std::slice::from_ref(&token))
    }

    /// Chooses a token from `logits` with this session's sampler (greedy, or seeded
    /// temperature/top-p); for rows of a [`BatchDecoder`] result. Call
    /// [`Session::reseed`] first for a reproducible sequence.
    pub fn sample(&mut self, logits: &[f32], params: &SamplingParams) -> u32 {
        self.sampler.sample(logits, params)
    }

    /// Restarts this session's sampler from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.sampler.reseed(seed);
    }

    /// Turns `logits_all` off or back on for the following calls (see
    /// [`crate::model::Forward::set_logits_all`]).
    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        self.fwd.set_logits_all(on)
    }

    /// Logits of every position of the last forward call (sessions with `logits_all`).
    pub fn all_logits(&self) -> &[f32] {
        self.fwd.logits()
    }

    /// Prefills `prompt` and generates up to `max_new_tokens`, calling `on_token(index, id)`
    /// as soon as each token is chosen (index 0 is the first generated token).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        mut on_token: impl FnMut(usize, u32),
    ) -> Result<GenerationStats> {
        let cap = self.fwd.kv().shape().capacity;
        if self.n_past() + prompt.len() > cap
            && matches!(self.fwd.kv().policy(), crate::kv::KvPolicy::Error)
        {
            return Err(Error::ContextOverflow {
                tokens: self.n_past() + prompt.len(),
                ctx: cap,
            });
        }
        self.sampler.reseed(opts.sampling.seed);
        let mut stats = GenerationStats {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        if opts.max_new_tokens == 0 {
            self.prefill(prompt)?;
            return Ok(stats);
        }
        let logits = self.fwd.forward(&self.engine.model, prompt)?;
        let mut tok = self.sampler.sample(logits, &opts.sampling);
        loop {
            on_token(stats.generated, tok);
            stats.generated += 1;
            if opts.stop_at_eog && self.engine.tokenizer.is_eog(tok) {
                stats.stopped_at_eog = true;
                break;
            }
            if stats.generated >= opts.max_new_tokens {
                break;
            }
            let logits = self
                .fwd
                .forward(&self.engine.model, std::slice::from_ref(&tok))?;
            tok = self.sampler.sample(logits, &opts.sampling);
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_mut_keeps_the_named_indices_in_index_order() {
        let mut all = [10, 11, 12, 13, 14];
        let picked = select_mut(&mut all, &[3, 0, 4]);
        assert_eq!(picked.iter().map(|x| **x).collect::<Vec<_>>(), [10, 13, 14]);
        for x in picked {
            *x += 100;
        }
        assert_eq!(all, [110, 11, 12, 113, 114]);
        assert!(select_mut(&mut all, &[]).is_empty());
    }

    #[test]
    fn greedy_is_argmax_and_log_prob_normalizes() {
        let l = [0.5f32, 2.0, -1.0, 2.0];
        let mut s = Sampler::new(4);
        assert_eq!(s.sample(&l, &SamplingParams::default()), 1);
        let total: f64 = (0..4).map(|i| log_prob(&l, i).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        // closed form: log(e^2 / (e^.5 + 2e^2 + e^-1))
        let expect = 2.0 - (0.5f64.exp() + 2.0 * 2.0f64.exp() + (-1.0f64).exp()).ln();
        assert!((log_prob(&l, 1) - expect).abs() < 1e-6);
    }

    #[test]
    fn top_p_restricts_to_nucleus_and_seed_repeats() {
        // probabilities ~ [0.665, 0.245, 0.090]: top_p 0.5 keeps only the first
        let l = [2.0f32, 1.0, 0.0];
        let p = SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            seed: 7,
        };
        let mut s = Sampler::new(3);
        for _ in 0..50 {
            assert_eq!(s.sample(&l, &p), 0);
        }
        let p = SamplingParams { top_p: 1.0, ..p };
        let mut a = Sampler::new(3);
        let mut b = Sampler::new(3);
        a.reseed(3);
        b.reseed(3);
        let xa: Vec<u32> = (0..64).map(|_| a.sample(&l, &p)).collect();
        let xb: Vec<u32> = (0..64).map(|_| b.sample(&l, &p)).collect();
        assert_eq!(xa, xb);
        // all three tokens appear in 64 draws with these probabilities (chance of missing the
        // 0.09 one is 0.91^64 ≈ 0.2%: the fixed seed makes this deterministic)
        assert!((0..3).all(|t| xa.contains(&t)));
    }
}
