//! Sequences on the OpenCL device: the device-side KV rings, activation buffers, the kernel
//! objects of every layer (static arguments set once) and the launch sequence of a forward
//! pass.
//!
//! A [`ClCore`] holds the rings of `lanes` sequences side by side and runs passes whose rows
//! (tokens) may come from several of them: one sequence's prompt chunk, or one decode token
//! of each of several sequences (batched decode), every weight read once per pass. A
//! [`ClSeq`] is one sequence's place in a core: its lane and its ring's bookkeeping (slot
//! claims, `error`/`sliding` policy, truncate), the CPU's [`KvCache`] with a 1×1×1 geometry,
//! so the same code decides every slot, while K and V live in device buffers laid out
//! `[layer][kv_head][lane × capacity + slot][head_dim]` in f16 like the CPU ring.
//! [`ClForward`] is a session of its own: a one-lane core and its sequence.
//!
//! This file holds the core and its passes; `forward/setup.rs` builds a core (buffers,
//! kernels, static arguments) and `forward/lane.rs` holds the sequence and the two sessions.

use super::canary::DevBuf;
use super::program::{NSPLIT_MAX, SPLIT_MIN_SLOTS, WG};
use super::{ClAttention, Inner};
use crate::backend::{DeviceCounters, PhaseCounters};
use crate::error::{Error, Result};
use crate::kv::{KvCache, KvShape};
use crate::model::{Counters, SessionOptions};
use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl3::memory::ClMem;
use opencl3::types::{CL_BLOCKING, cl_int, cl_mem};
use std::ptr;
use std::sync::{Arc, Mutex};

mod lane;
mod setup;

pub use lane::{ClForward, ClLane, ClSeq, ClSeqs};
use setup::Bufs;

const K_QKV: usize = 0;
const K_ATT: usize = 1;
const K_OUT: usize = 2;
const K_FFN: usize = 3;
const K_DOWN: usize = 4;
const LAYER_KERNELS: [&str; 5] = [
    "attn_qkv",
    "attention",
    "attn_out",
    "ffn_gate_up",
    "ffn_down",
];

/// Index of the dynamic arguments of each kernel (see layer.cl / attention.cl).
mod arg {
    pub const EMBED_N: u32 = 4;
    pub const QKV_N: u32 = 20;
    pub const ATT_NSPLIT: u32 = 9;
    pub const ATT_CHUNK: u32 = 10;
    pub const OUT_NSPLIT: u32 = 1;
    pub const OUT_N: u32 = 5;
    pub const FFN_N: u32 = 7;
    pub const DOWN_N: u32 = 4;
    pub const HEAD_FIRST: u32 = 6;
    pub const HEAD_ROWS: u32 = 7;
}

/// Device state of `lanes` sequences: their KV rings, the activations of a pass of up to
/// `max_batch` rows, the kernels.
pub struct ClCore {
    inner: Arc<Inner>,
    /// `max_seq_len`: each ring's capacity; `max_batch`: rows one pass carries.
    opts: SessionOptions,
    lanes: usize,
    /// Lanes handed to a sequence ([`ClCore::take_lane`]).
    taken: Vec<bool>,
    /// Whether the logits buffer holds a row per batch token (created with `logits_all`).
    all_rows: bool,
    counters: Counters,
    dev: DeviceCounters,
    bufs: Bufs,
    embed: Kernel,
    layers: Vec<[Kernel; 5]>,
    head: Kernel,
    step_host: Vec<u32>,
    rows_host: Vec<u32>,
    /// cos/sin per token and frequency, one table per RoPE base (global, sliding-window).
    rope_host: Vec<f32>,
    logits: Vec<f32>,
    events: Vec<(Event, &'static str)>,
}

/// Sets argument `i` of `k`. `T` must be the exact C type of the parameter.
fn set<T>(k: &Kernel, name: &str, i: u32, v: &T) -> Result<()> {
    // SAFETY: the caller passes the value whose size and type match parameter `i` of the
    // kernel (the indices follow the .cl signatures; a mismatch in size is reported by the
    // driver as CL_INVALID_ARG_SIZE, which becomes an error here).
    unsafe { k.set_arg(i, v) }
        .map_err(|e| Error::OpenCl(format!("kernel `{name}` argument {i}: {e}")))
}

fn mem(b: &DevBuf) -> cl_mem {
    b.buffer().get()
}

fn int(v: usize, what: &str) -> Result<cl_int> {
    cl_int::try_from(v).map_err(|_| Error::InvalidArgument {
        what: what.into(),
        reason: format!("{v} does not fit a 32-bit kernel argument"),
    })
}

fn ceil_div(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

impl ClCore {
    /// Rows one pass carries at most.
    pub fn max_rows(&self) -> usize {
        self.opts.max_batch
    }

    pub fn lanes(&self) -> usize {
        self.lanes
    }

    pub fn options(&self) -> &SessionOptions {
        &self.opts
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn device_counters(&self) -> DeviceCounters {
        self.dev
    }

    /// A free lane's sequence, with `opts.kv_policy` for its ring and forward calls of up to
    /// `opts.max_batch` tokens (0: the core's rows); an error when every lane is taken or
    /// `opts` asks for what the core does not have (another ring capacity, more rows,
    /// logits of every token).
    pub fn take_lane(&mut self, opts: &SessionOptions) -> Result<ClSeq> {
        let bad = |what: &str, reason: String| {
            Err(Error::InvalidArgument {
                what: what.into(),
                reason,
            })
        };
        if opts.kv_type != crate::kv::KvType::F16 {
            return bad(
                "kv-type",
                format!(
                    "{}: the OpenCL backend keeps K and V in f16 (q8_0 runs on the CPU backend)",
                    opts.kv_type
                ),
            );
        }
        if opts.max_seq_len != 0 && opts.max_seq_len != self.opts.max_seq_len {
            return bad(
                "max_seq_len",
                format!(
                    "{}: the batch's rings hold {} tokens each",
                    opts.max_seq_len, self.opts.max_seq_len
                ),
            );
        }
        if opts.max_batch > self.opts.max_batch {
            return bad(
                "max_batch",
                format!(
                    "{}: the batch's passes carry {} tokens at most",
                    opts.max_batch, self.opts.max_batch
                ),
            );
        }
        if opts.logits_all && !self.opts.logits_all {
            return bad(
                "logits_all",
                "a batch's sessions keep the logits of their last token only".into(),
            );
        }
        let Some(lane) = self.taken.iter().position(|t| !t) else {
            return Err(Error::InvalidArgument {
                what: "batched session".into(),
                reason: format!(
                    "all {} sequences of the batch are in use; drop one or build a larger batch",
                    self.lanes
                ),
            });
        };
        let chunk = if opts.max_batch == 0 {
            self.opts.max_batch
        } else {
            opts.max_batch
        };
        let seq = ClSeq::new(lane, self.opts.max_seq_len, opts.kv_policy, chunk)?;
        self.taken[lane] = true;
        Ok(seq)
    }

    /// Gives a sequence's lane back (its session was dropped).
    pub fn release_lane(&mut self, seq: &ClSeq) {
        if let Some(t) = self.taken.get_mut(seq.lane) {
            *t = false;
        }
    }

    /// Logits of the last pass: one row of `vocab` per sequence of the pass, in the pass's
    /// order (or one per token with `logits_all`).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Same contract as [`crate::model::Forward::set_logits_all`].
    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        crate::model::set_logits_all(&mut self.opts, self.all_rows, on)
    }

    /// Runs `tokens` through one sequence in chunks of `max_batch`; same contract as
    /// [`crate::model::Forward::forward`].
    pub fn forward(&mut self, seq: &mut ClSeq, tokens: &[u32]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument {
                what: "tokens".into(),
                reason: "empty input".into(),
            });
        }
        if !seq.kv.can_take(tokens.len()) {
            return Err(Error::ContextOverflow {
                tokens: seq.kv.used() + tokens.len(),
                ctx: seq.kv.shape().capacity,
            });
        }
        if seq.lane >= self.lanes || !self.taken[seq.lane] {
            return Err(Error::InvalidArgument {
                what: "sequence".into(),
                reason: format!("lane {} is not one of this core's sequences", seq.lane),
            });
        }
        self.check_ids(tokens)?;
        let mb = seq.chunk;
        for chunk in tokens.chunks(mb) {
            let mut one = [&mut *seq];
            self.run_pass(&mut one[..], chunk, &[chunk.len()])?;
        }
        let v = self.inner.config.vocab_size;
        Ok(if self.opts.logits_all {
            let n = ((tokens.len() - 1) % mb) + 1;
            &self.logits[(n - 1) * v..n * v]
        } else {
            &self.logits[..v]
        })
    }

    /// One pass over several sequences: `seqs[i]` takes the next `counts[i]` tokens of
    /// `tokens` (a prompt chunk, or one decode token), and row `i` of the result holds its
    /// logits after the last of them. Rows of one sequence are its tokens in order; the
    /// sequences are distinct lanes of this core. Checked before anything runs: nothing is
    /// claimed when the pass is refused.
    pub fn pass<S: ClSeqs + ?Sized>(
        &mut self,
        seqs: &mut S,
        tokens: &[u32],
        counts: &[usize],
    ) -> Result<&[f32]> {
        let n_seq = seqs.len();
        if n_seq == 0 || counts.len() != n_seq {
            return Err(Error::InvalidArgument {
                what: "batched pass".into(),
                reason: format!("{n_seq} sequences and {} token counts", counts.len()),
            });
        }
        if self.opts.logits_all && n_seq > 1 {
            return Err(Error::InvalidArgument {
                what: "batched pass".into(),
                reason: "logits of every token are kept for one sequence only".into(),
            });
        }
        let total: usize = counts.iter().sum();
        if total != tokens.len() || counts.contains(&0) || total > self.opts.max_batch {
            return Err(Error::InvalidArgument {
                what: "batched pass".into(),
                reason: format!(
                    "token counts {counts:?} for {} tokens (each at least 1, at most {} in all)",
                    tokens.len(),
                    self.opts.max_batch
                ),
            });
        }
        for (i, &cnt) in counts.iter().enumerate() {
            let s = seqs.seq(i);
            if s.lane >= self.lanes || !self.taken[s.lane] {
                return Err(Error::InvalidArgument {
                    what: format!("batched pass sequence {i}"),
                    reason: format!("lane {} is not one of this batch's sequences", s.lane),
                });
            }
            if (0..i).any(|j| seqs.seq(j).lane == s.lane) {
                return Err(Error::InvalidArgument {
                    what: format!("batched pass sequence {i}"),
                    reason: "appears twice in one pass".into(),
                });
            }
            if !s.kv.can_take(cnt) {
                return Err(Error::ContextOverflow {
                    tokens: s.kv.used() + cnt,
                    ctx: s.kv.shape().capacity,
                });
            }
        }
        self.check_ids(tokens)?;
        self.run_pass(seqs, tokens, counts)?;
        Ok(&self.logits[..n_seq * self.inner.config.vocab_size])
    }

    fn check_ids(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.inner.config.vocab_size as u32;
        if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(Error::InvalidArgument {
                what: "token id".into(),
                reason: format!("{bad} is outside the vocabulary of {vocab}"),
            });
        }
        Ok(())
    }

    /// Enqueues one kernel; in canary mode waits for it and checks every guard.
    fn launch(
        &mut self,
        which: Launch,
        name: &'static str,
        global: &[usize],
        local: Option<&[usize]>,
        phase: &mut PhaseCounters,
    ) -> Result<()> {
        let k = match which {
            Launch::Embed => &self.embed,
            Launch::Head => &self.head,
            Launch::Layer(l, i) => &self.layers[l][i],
        };
        // SAFETY: every argument of `k` was set (static ones at creation, dynamic ones just
        // before); the global sizes cover exactly the index space the kernel guards against,
        // and the local sizes are those the kernel requires (reqd_work_group_size).
        let ev = unsafe {
            self.inner.queue.enqueue_nd_range_kernel(
                k.get(),
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local.map_or(ptr::null(), |l| l.as_ptr()),
                &[],
            )
        }
        .map_err(|e| Error::OpenCl(format!("launching `{name}`: {e}")))?;
        phase.launches += 1;
        if self.inner.profiling {
            self.events.push((ev, name));
        }
        if self.inner.canaries {
            let q = &self.inner.queue;
            q.finish()
                .map_err(|e| Error::OpenCl(format!("running `{name}`: {e}")))?;
            for b in self.bufs.all_mut() {
                b.check(q, name)?;
            }
        }
        Ok(())
    }

    /// One pass, its input checked by the caller. Row layout: with `logits_all` (one
    /// sequence) the tokens in order; otherwise row `i` is the last token of sequence `i`
    /// (so the head reads the first `n_seq` rows) and the other tokens follow, sequence by
    /// sequence in order. Rows are independent but for attention, which each row runs over
    /// its own lane's ring after the pass's K/V are written, masked by position: the order of
    /// rows changes no result.
    fn run_pass<S: ClSeqs + ?Sized>(
        &mut self,
        seqs: &mut S,
        tokens: &[u32],
        counts: &[usize],
    ) -> Result<()> {
        let inner = self.inner.clone();
        let c = &inner.config;
        let n = tokens.len();
        let n_seq = counts.len();
        let tt = inner.plan.tt;
        let cap = self.opts.max_seq_len;
        // events of a call that failed half-way are not this call's
        self.events.clear();
        let mut phase = PhaseCounters {
            calls: 1,
            tokens: n as u64,
            ..Default::default()
        };

        // row of token `i` of sequence `si` whose tokens start at `first` of `tokens`
        let all = self.opts.logits_all;
        let row_of = |si: usize, first: usize, i: usize, cnt: usize| {
            if all {
                first + i
            } else if i + 1 == cnt {
                si
            } else {
                // after the n_seq last rows, the earlier sequences' other tokens
                n_seq + (first - si) + i
            }
        };
        let mut first = 0usize;
        let mut max_used = 0;
        for (si, &cnt) in counts.iter().enumerate() {
            let seq = seqs.seq_mut(si);
            for i in 0..cnt {
                let row = row_of(si, first, i, cnt);
                let t = tokens[first + i];
                let pos = seq.n_past + i as u32;
                let slot = seq.kv.claim(pos)?;
                let global = (seq.lane * cap + slot) as u32;
                self.step_host[3 * row..3 * row + 3].copy_from_slice(&[t, pos, global]);
                // cos/sin exactly as the CPU forward pass computes them (f32 product, f32
                // trig), the sliding-window layers' table `max_batch` rows after the first
                let tabs = [Some(&inner.inv_freq), inner.inv_freq_swa.as_ref()];
                for (ti, freqs) in tabs.into_iter().enumerate() {
                    let Some(freqs) = freqs else { continue };
                    let half = freqs.len();
                    let base = ti * self.opts.max_batch * half * 2;
                    for (j, f) in freqs.iter().enumerate() {
                        let theta = pos as f32 * f;
                        self.rope_host[base + 2 * (row * half + j)] = theta.cos();
                        self.rope_host[base + 2 * (row * half + j) + 1] = theta.sin();
                    }
                }
            }
            // every row of the sequence attends over its lane's ring as the pass leaves it
            let used = seq.kv.used();
            max_used = max_used.max(used);
            for i in 0..cnt {
                let row = row_of(si, first, i, cnt);
                self.rows_host[2 * row] = (seq.lane * cap) as u32;
                self.rows_host[2 * row + 1] = used as u32;
            }
            first += cnt;
        }
        let rows_host = &self.rows_host[..2 * n];
        // SAFETY: blocking write of `2n` u32 from a live host slice into the rows buffer of
        // `2 * max_batch` u32 (n <= max_batch).
        unsafe {
            self.inner.queue.enqueue_write_buffer(
                self.bufs.rows.buffer_mut(),
                CL_BLOCKING,
                0,
                bytemuck::cast_slice(rows_host),
                &[],
            )
        }
        .map_err(|e| Error::OpenCl(format!("writing the row table: {e}")))?;
        phase.h2d_bytes += (rows_host.len() * 4) as u64;
        let half = inner.inv_freq.len();
        let tables = 1 + usize::from(inner.inv_freq_swa.is_some());
        for ti in 0..tables {
            let base = ti * self.opts.max_batch * half * 2;
            let rope = &self.rope_host[base..base + 2 * n * half];
            if rope.is_empty() {
                continue;
            }
            // SAFETY: blocking write of `2 n half` f32 from a live host slice into table `ti`
            // of the rope buffer (`tables` tables of `2 max_batch half` f32; n <= max_batch).
            unsafe {
                self.inner.queue.enqueue_write_buffer(
                    self.bufs.rope.buffer_mut(),
                    CL_BLOCKING,
                    base * 4,
                    bytemuck::cast_slice(rope),
                    &[],
                )
            }
            .map_err(|e| Error::OpenCl(format!("writing the rotary table: {e}")))?;
            phase.h2d_bytes += (rope.len() * 4) as u64;
        }
        let step = &self.step_host[..3 * n];
        // SAFETY: blocking write of `3n` u32 from a live host slice into the step buffer of
        // `3 * max_batch` u32 (n <= max_batch).
        unsafe {
            self.inner.queue.enqueue_write_buffer(
                self.bufs.step.buffer_mut(),
                CL_BLOCKING,
                0,
                bytemuck::cast_slice(step),
                &[],
            )
        }
        .map_err(|e| Error::OpenCl(format!("writing the step buffer: {e}")))?;
        phase.h2d_bytes += (step.len() * 4) as u64;

        let exact = inner.attention == ClAttention::Exact;
        let nsplit = ceil_div(max_used, SPLIT_MIN_SLOTS).clamp(1, NSPLIT_MAX);
        let chunk = ceil_div(max_used, nsplit);
        let ni = int(n, "tokens")?;
        let tiles = ceil_div(n, tt);
        let hd = c.head_dim;

        set(&self.embed, "embed", arg::EMBED_N, &ni)?;
        self.launch(Launch::Embed, "embed", &[c.n_embd, n], None, &mut phase)?;
        for l in 0..c.n_layers {
            let ks = &self.layers[l];
            set(&ks[K_QKV], "attn_qkv", arg::QKV_N, &ni)?;
            if !exact {
                set(
                    &ks[K_ATT],
                    "attention",
                    arg::ATT_NSPLIT,
                    &int(nsplit, "nsplit")?,
                )?;
                set(
                    &ks[K_ATT],
                    "attention",
                    arg::ATT_CHUNK,
                    &int(chunk, "chunk")?,
                )?;
            }
            let merge = if exact { 0 } else { nsplit };
            set(
                &ks[K_OUT],
                "attn_out",
                arg::OUT_NSPLIT,
                &int(merge, "nsplit")?,
            )?;
            set(&ks[K_OUT], "attn_out", arg::OUT_N, &ni)?;
            set(&ks[K_FFN], "ffn_gate_up", arg::FFN_N, &ni)?;
            set(&ks[K_DOWN], "ffn_down", arg::DOWN_N, &ni)?;
            let groups = c.n_heads + 2 * c.n_kv_heads;
            self.launch(
                Launch::Layer(l, K_QKV),
                "attn_qkv",
                &[hd * groups, tiles],
                Some(&[hd, 1]),
                &mut phase,
            )?;
            let att_groups = if exact { 1 } else { nsplit };
            self.launch(
                Launch::Layer(l, K_ATT),
                "attention",
                &[hd * att_groups, c.n_heads, n],
                Some(&[hd, 1, 1]),
                &mut phase,
            )?;
            let rows_e = ceil_div(c.n_embd, WG) * WG;
            self.launch(
                Launch::Layer(l, K_OUT),
                "attn_out",
                &[rows_e, tiles],
                Some(&[WG, 1]),
                &mut phase,
            )?;
            self.launch(
                Launch::Layer(l, K_FFN),
                "ffn_gate_up",
                &[ceil_div(c.n_ff, WG) * WG, tiles],
                Some(&[WG, 1]),
                &mut phase,
            )?;
            self.launch(
                Launch::Layer(l, K_DOWN),
                "ffn_down",
                &[rows_e, tiles],
                Some(&[WG, 1]),
                &mut phase,
            )?;
        }
        // the last token of each sequence is in the first `n_seq` rows
        let (first, rows) = if self.opts.logits_all {
            (0, n)
        } else {
            (0, n_seq)
        };
        set(&self.head, "head", arg::HEAD_FIRST, &int(first, "first")?)?;
        set(&self.head, "head", arg::HEAD_ROWS, &int(rows, "rows")?)?;
        self.launch(
            Launch::Head,
            "head",
            &[ceil_div(c.vocab_size, WG) * WG, ceil_div(rows, tt)],
            Some(&[WG, 1]),
            &mut phase,
        )?;
        let out = &mut self.logits[..rows * c.vocab_size];
        // SAFETY: blocking read of `rows * vocab` f32 into a host slice of that length; the
        // logits buffer holds at least that many.
        unsafe {
            self.inner.queue.enqueue_read_buffer(
                self.bufs.logits.buffer(),
                CL_BLOCKING,
                0,
                bytemuck::cast_slice_mut(out),
                &[],
            )
        }
        .map_err(|e| Error::OpenCl(format!("reading the logits: {e}")))?;
        phase.d2h_bytes += (out.len() * 4) as u64;
        if let Some((_, bad)) = self
            .events
            .iter()
            .find(|(e, _)| e.command_execution_status().is_ok_and(|s| s.0 < 0))
        {
            return Err(Error::OpenCl(format!(
                "kernel `{bad}` failed on the device"
            )));
        }
        for (e, name) in self.events.drain(..) {
            // A launch without profiling data leaves `kernel_ms` unreported (not an error).
            if let (Ok(s), Ok(t)) = (e.profiling_command_start(), e.profiling_command_end())
                && t >= s
            {
                phase.kernel_ns += t - s;
                phase.profiled_launches += 1;
                phase.per_kernel_ns.add(name, t - s);
            }
        }

        // CPU-side counters, as the CPU backend keeps them.
        let per_layer = 7u64;
        self.counters.matmuls += per_layer * c.n_layers as u64 + 1;
        self.counters.weight_bytes_read += inner.weights.bytes;
        self.counters.forward_calls += 1;
        for (si, &cnt) in counts.iter().enumerate() {
            let seq = seqs.seq_mut(si);
            seq.n_past += cnt as u32;
            seq.counters.forward_calls += 1;
            if cnt == 1 {
                seq.counters.tokens_decoded += 1;
                self.counters.tokens_decoded += 1;
            } else {
                seq.counters.tokens_prefilled += cnt as u64;
                self.counters.tokens_prefilled += cnt as u64;
            }
        }
        // a pass of decode tokens only is a decode call; one with a prompt chunk, prefill
        if n == n_seq {
            self.dev.decode.add(&phase);
        } else {
            self.dev.prefill.add(&phase);
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Launch {
    Embed,
    Head,
    Layer(usize, usize),
}
