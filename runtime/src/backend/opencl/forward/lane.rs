//! A sequence's place in a [`ClCore`] ([`ClSeq`]), the sets of sequences a pass runs
//! ([`ClSeqs`]), and the two sessions built on them: [`ClLane`], one sequence of a batch's
//! shared core, and [`ClForward`], a one-lane core of its own.

use super::*;

/// One sequence's place in a [`ClCore`]: its lane (ring) and the ring's bookkeeping.
pub struct ClSeq {
    pub(super) lane: usize,
    pub(super) kv: KvCache,
    pub(super) n_past: u32,
    /// Tokens one of its own forward calls carries at most (its `max_batch`).
    pub(super) chunk: usize,
    /// This sequence's calls and tokens (weight reads are the core's, once per pass).
    pub(super) counters: Counters,
}

impl ClSeq {
    pub(super) fn new(
        lane: usize,
        capacity: usize,
        policy: crate::kv::KvPolicy,
        chunk: usize,
    ) -> Result<Self> {
        Ok(ClSeq {
            lane,
            chunk,
            kv: KvCache::new(
                KvShape {
                    n_layers: 1,
                    n_kv_heads: 1,
                    head_dim: 1,
                    capacity,
                    // Slot bookkeeping only: the device buffers hold K and V.
                    ty: crate::kv::KvType::F16,
                },
                policy,
            )?,
            n_past: 0,
            counters: Counters::default(),
        })
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn lane(&self) -> usize {
        self.lane
    }

    pub fn n_past(&self) -> usize {
        self.n_past as usize
    }

    /// Slot bookkeeping of the ring (its capacity and policy are the session's).
    pub fn kv(&self) -> &KvCache {
        &self.kv
    }

    pub fn reset(&mut self) {
        self.kv.reset();
        self.n_past = 0;
    }

    /// Rewinds to the first `n` tokens (their K/V stay on the device).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.kv.truncate(n)?;
        self.n_past = n as u32;
        Ok(())
    }
}

/// The sequences of one pass ([`ClCore::pass`]), each at most once.
pub trait ClSeqs {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn seq(&self, i: usize) -> &ClSeq;
    fn seq_mut(&mut self, i: usize) -> &mut ClSeq;
}

impl ClSeqs for [&mut ClSeq] {
    fn len(&self) -> usize {
        <[&mut ClSeq]>::len(self)
    }
    fn seq(&self, i: usize) -> &ClSeq {
        self[i]
    }
    fn seq_mut(&mut self, i: usize) -> &mut ClSeq {
        self[i]
    }
}

/// A session in a batch ([`crate::session::BatchDecoder::session`]): its sequence in the
/// batch's shared core, which runs its own forward calls as passes of one sequence and the
/// batch's passes over all of them. Its lane goes back to the core when it is dropped.
pub struct ClLane {
    core: Arc<Mutex<ClCore>>,
    seq: ClSeq,
    /// Its own last logits (the core's buffer is the next pass's).
    logits: Vec<f32>,
}

fn lock(core: &Mutex<ClCore>) -> std::sync::MutexGuard<'_, ClCore> {
    // A pass that panicked left no half-claimed state the next pass trusts: slot claims are
    // redone from each sequence's own bookkeeping, so a poisoned lock is still usable.
    core.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ClLane {
    pub(crate) fn new(core: Arc<Mutex<ClCore>>, opts: &SessionOptions) -> Result<Self> {
        let (seq, vocab) = {
            let mut c = lock(&core);
            (c.take_lane(opts)?, c.inner.config.vocab_size)
        };
        Ok(ClLane {
            core,
            seq,
            logits: vec![0.0; vocab],
        })
    }

    /// Whether this session's sequence lives in `core`.
    pub fn is_in(&self, core: &Mutex<ClCore>) -> bool {
        std::ptr::eq(&*self.core, core)
    }

    pub fn seq(&self) -> &ClSeq {
        &self.seq
    }

    pub fn seq_mut(&mut self) -> &mut ClSeq {
        &mut self.seq
    }

    pub fn n_past(&self) -> usize {
        self.seq.n_past()
    }

    pub fn kv(&self) -> &KvCache {
        self.seq.kv()
    }

    /// This sequence's calls and tokens; the weight bytes of the batch's passes are the
    /// batch decoder's ([`crate::session::BatchDecoder::counters`]).
    pub fn counters(&self) -> Counters {
        self.seq.counters()
    }

    /// The device counters of every pass of the batch, this sequence's included.
    pub fn device_counters(&self) -> DeviceCounters {
        lock(&self.core).device_counters()
    }

    pub fn reset(&mut self) {
        self.seq.reset();
    }

    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.seq.truncate(n)
    }

    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// A batch's sessions keep only their last token's logits: `on` is refused.
    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        if on {
            return Err(Error::InvalidArgument {
                what: "logits_all".into(),
                reason: "a batch's sessions keep the logits of their last token only".into(),
            });
        }
        Ok(())
    }

    pub fn forward(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        let mut c = lock(&self.core);
        let out = c.forward(&mut self.seq, tokens)?;
        self.logits.copy_from_slice(out);
        Ok(&self.logits)
    }
}

impl Drop for ClLane {
    fn drop(&mut self) {
        lock(&self.core).release_lane(&self.seq);
    }
}

/// A session of its own on the device: a one-lane [`ClCore`] and its sequence.
pub struct ClForward {
    core: ClCore,
    seq: ClSeq,
}

impl ClForward {
    pub(crate) fn new(inner: Arc<Inner>, opts: SessionOptions) -> Result<Self> {
        let mut core = ClCore::new(inner, opts.clone(), 1)?;
        let seq = core.take_lane(&opts)?;
        Ok(ClForward { core, seq })
    }

    pub fn n_past(&self) -> usize {
        self.seq.n_past()
    }

    /// Slot bookkeeping of the ring (its capacity and policy are the session's).
    pub fn kv(&self) -> &KvCache {
        self.seq.kv()
    }

    pub fn options(&self) -> &SessionOptions {
        self.core.options()
    }

    pub fn counters(&self) -> Counters {
        self.core.counters()
    }

    pub fn device_counters(&self) -> DeviceCounters {
        self.core.device_counters()
    }

    pub fn reset(&mut self) {
        self.seq.reset();
    }

    /// Rewinds to the first `n` tokens (their K/V stay on the device).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.seq.truncate(n)
    }

    /// Logits of the last forward call: one row of `vocab` (or one per token with `logits_all`).
    pub fn logits(&self) -> &[f32] {
        self.core.logits()
    }

    /// Same contract as [`crate::model::Forward::set_logits_all`].
    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        self.core.set_logits_all(on)
    }

    /// Runs `tokens` through the model in chunks of `max_batch`; same contract as
    /// [`crate::model::Forward::forward`].
    pub fn forward(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.core.forward(&mut self.seq, tokens)
    }
}
