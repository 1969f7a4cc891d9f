//! One forward pass over every layer for a set of rows already embedded and given KV
//! slots: the schedule described in the module above, with each family's switches
//! (biases, Q/K norms, post-norms, gated activation, sliding-window layers) read from the
//! configuration.

use super::attention;
use super::config::ModelConfig;
use super::layers::{
    Shared, gated_act, lcm, matmul_job, norm_add, norm_quantize, quantize_rows, rms_norm_inplace,
    rope,
};
use super::pass_io::{Counters, KvAccess};
use super::weights::{LayerWeights, Model};
use super::workspace::{Block, RowInfo, TILE_QUERIES, Workspace};
use crate::kv::KvHead;
use crate::pool::ThreadPool;
use crate::quant::{self, Isa};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Activation rows per block of the feed-forward gate ([`Pass::gate_up`]): a block's gate
/// and up outputs over one worker's columns stay in the L2 cache until the gate reads them.
const GATE_BLOCK: usize = 64;

/// Adds the bias, applies the per-head RMSNorm and RoPE to rows `0..n`, columns `r0..r1` of
/// a Q or K output (`width` wide, heads of `hd`); `r0`/`r1` fall on head boundaries when
/// `rope` is set.
#[allow(clippy::too_many_arguments)]
fn bias_rope(
    buf: Shared,
    n: usize,
    width: usize,
    r0: usize,
    r1: usize,
    bias: Option<&[f32]>,
    norm: Option<&[f32]>,
    rope_on: bool,
    c: &ModelConfig,
    cos: &[f32],
    sin: &[f32],
) {
    let half = c.rope_dims / 2;
    let hd = c.head_dim;
    for a in 0..n {
        // SAFETY: columns r0..r1 of every row belong to the calling worker alone.
        let row = unsafe { buf.slice(a * width + r0, r1 - r0) };
        if let Some(b) = bias {
            for (v, bb) in row.iter_mut().zip(&b[r0..r1]) {
                *v += bb;
            }
        }
        if rope_on {
            let (cs, sn) = (
                &cos[a * half..(a + 1) * half],
                &sin[a * half..(a + 1) * half],
            );
            for head in row.chunks_exact_mut(hd) {
                if let Some(w) = norm {
                    rms_norm_inplace(head, w, c.rms_eps);
                }
                rope(head, cs, sn, c.rope_layout);
            }
        }
    }
}

/// Splits `rows` into attention blocks in `out` and returns how many: a row not flagged
/// `tile` for this ring (`local`) is a block of its own; flagged rows of one sequence form
/// blocks of up to `tb` consecutive rows (a new block at each change of sequence).
fn blocks(out: &mut [Block], rows: &[RowInfo], local: bool, tb: usize) -> usize {
    let flag = |i: usize| {
        if local {
            rows[i].tile.1
        } else {
            rows[i].tile.0
        }
    };
    let (mut nblk, mut i) = (0, 0);
    while i < rows.len() {
        let tiled = flag(i);
        let mut j = i + 1;
        if tiled {
            while j < rows.len() && j - i < tb && rows[j].seq == rows[i].seq && flag(j) {
                j += 1;
            }
        }
        out[nblk] = Block {
            start: i,
            end: j,
            tiled,
        };
        nblk += 1;
        i = j;
    }
    nblk
}

/// The parts of a layer's forward pass that need the scratch, the pool and the KV set.
pub(super) struct Pass<'a> {
    pub(super) model: &'a Model,
    pub(super) pool: &'a ThreadPool,
    pub(super) isa: Isa,
}

impl Pass<'_> {
    /// Runs every layer over the `n` rows whose embeddings are in `ws.x` and whose slots are
    /// in `ws.rows` (already claimed). A row's `tile` flags allow the shared-key attention of
    /// a prefill chunk (consecutive rows of one sequence whose ring holds increasing
    /// positions), per ring: full-context, sliding-window. The rows of one sequence are
    /// adjacent and in position order; several sequences may share the pass.
    pub(super) fn layers(
        &self,
        ws: &mut Workspace,
        n: usize,
        kvs: &mut dyn KvAccess,
        counters: &mut Counters,
    ) {
        let c = &self.model.config();
        let (e, qd, kvd) = (c.n_embd, c.q_dim(), c.kv_dim());
        let half = c.rope_dims / 2;
        let has_swa = c.n_swa_layers() > 0;
        for i in 0..n {
            let pos = ws.rows[i].pos;
            for (j, f) in self.model.rope_inv_freq().iter().enumerate() {
                let theta = pos as f32 * f;
                ws.cos[i * half + j] = theta.cos();
                ws.sin[i * half + j] = theta.sin();
            }
            if has_swa {
                let swa_layer = c.swa_layers.iter().position(|&s| s).unwrap_or(0);
                for (j, f) in self.model.rope_inv_freq_for(swa_layer).iter().enumerate() {
                    let theta = pos as f32 * f;
                    ws.cos_swa[i * half + j] = theta.cos();
                    ws.sin_swa[i * half + j] = theta.sin();
                }
            }
        }
        let (mut n_local, mut n_global) = (0, 0);
        for li in 0..self.model.layers.len() {
            let Some(lw) = self.model.layer(li) else {
                unreachable!("layer {li} exists")
            };
            let local = c.is_swa(li);
            // This layer's index within its ring.
            let ring_layer = if local { n_local } else { n_global };
            if local {
                n_local += 1;
            } else {
                n_global += 1;
            }
            // 1-2: attention norm, Q/K/V.
            norm_quantize(
                self.pool,
                self.isa,
                &ws.x,
                n,
                e,
                lw.attn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.wq.ty,
            );
            self.qkv(ws, &lw, n, local, counters);
            for i in 0..n {
                let r = ws.rows[i];
                let slot = if local { r.slot_swa } else { r.slot };
                kvs.kv_mut(r.seq, local).write(
                    ring_layer,
                    slot,
                    &ws.k[i * kvd..(i + 1) * kvd],
                    &ws.v[i * kvd..(i + 1) * kvd],
                );
            }
            // 3: attention.
            self.attention(ws, ring_layer, local, n, &*kvs);
            // 4: output projection into the residual stream.
            quantize_rows(self.pool, self.isa, &ws.attn, n, qd, &mut ws.acts, lw.wo.ty);
            self.residual(ws, &lw.wo, lw.post_attn_norm, n, counters);
            // 5-6: feed-forward.
            norm_quantize(
                self.pool,
                self.isa,
                &ws.x,
                n,
                e,
                lw.ffn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.w_gate.ty,
            );
            self.gate_up(ws, &lw, n, counters);
            std::mem::swap(&mut ws.acts, &mut ws.acts2);
            self.residual(ws, &lw.w_down, lw.post_ffn_norm, n, counters);
            std::mem::swap(&mut ws.acts, &mut ws.acts2);
        }
    }

    /// `x += w · acts`, or with a post-norm `x += rmsnorm(w · acts) · g`.
    fn residual(
        &self,
        ws: &mut Workspace,
        w: &quant::WeightMatrix<'_>,
        post_norm: Option<&[f32]>,
        n: usize,
        counters: &mut Counters,
    ) {
        let c = &self.model.config();
        let e = c.n_embd;
        match post_norm {
            None => {
                let xo = Shared::new(&mut ws.x).out(n, e, e, true);
                matmul_job(self.pool, self.isa, w, &ws.acts, n, xo, counters);
            }
            Some(g) => {
                let po = Shared::new(&mut ws.post).out(n, e, e, false);
                matmul_job(self.pool, self.isa, w, &ws.acts, n, po, counters);
                norm_add(self.pool, &mut ws.x, &mut ws.post, n, e, g, c.rms_eps);
            }
        }
    }

    /// Q, K and V from `ws.acts` (quantized for `wq`), with bias and RoPE.
    fn qkv(
        &self,
        ws: &mut Workspace,
        lw: &LayerWeights<'_>,
        n: usize,
        local: bool,
        counters: &mut Counters,
    ) {
        let c = &self.model.config();
        let (e, qd, kvd, hd) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim);
        let (q, k, v) = (
            Shared::new(&mut ws.q),
            Shared::new(&mut ws.k),
            Shared::new(&mut ws.v),
        );
        let segs = [
            (lw.wq, q, qd, lw.bq, lw.q_norm, true),
            (lw.wk, k, kvd, lw.bk, lw.k_norm, true),
            (lw.wv, v, kvd, lw.bv, None, false),
        ];
        let (cos, sin) = if local {
            (&ws.cos_swa[..], &ws.sin_swa[..])
        } else {
            (&ws.cos[..], &ws.sin[..])
        };
        let one_layout = segs
            .iter()
            .all(|s| quant::act_layout(self.isa, s.0.ty) == quant::act_layout(self.isa, lw.wq.ty));
        if one_layout {
            let total = qd + 2 * kvd;
            let chunk = quant::chunk_size(total, self.pool.n_threads(), lcm(hd, 4));
            let acts = &ws.acts;
            self.pool.run_chunks(total, chunk, |lo, hi| {
                let mut base = 0;
                for (w, buf, width, bias, norm, rope_on) in &segs {
                    let (s0, s1) = (lo.max(base), hi.min(base + width));
                    if s0 < s1 {
                        let (r0, r1) = (s0 - base, s1 - base);
                        let out = buf.out(n, *width, *width, false);
                        // SAFETY: chunks are disjoint row ranges of Q|K|V.
                        unsafe { quant::matmul_rows(self.isa, w, acts, n, r0, r1, out) };
                        bias_rope(*buf, n, *width, r0, r1, *bias, *norm, *rope_on, c, cos, sin);
                    }
                    base += width;
                }
            });
            for (w, ..) in &segs {
                counters.matmuls += 1;
                counters.weight_bytes_read += w.bytes_read() as u64;
            }
        } else {
            // Mixed weight formats: one quantization and product per matrix. `ws.acts` holds
            // the normalized row for `wq`; re-derive it for the others from its source.
            for (i, (w, buf, width, bias, norm, rope_on)) in segs.iter().enumerate() {
                if i > 0 {
                    let eps = c.rms_eps;
                    norm_quantize(
                        self.pool,
                        self.isa,
                        &ws.x,
                        n,
                        e,
                        lw.attn_norm,
                        eps,
                        &mut ws.acts,
                        w.ty,
                    );
                }
                matmul_job(
                    self.pool,
                    self.isa,
                    w,
                    &ws.acts,
                    n,
                    buf.out(n, *width, *width, false),
                    counters,
                );
                bias_rope(
                    *buf, n, *width, 0, *width, *bias, *norm, *rope_on, c, cos, sin,
                );
            }
        }
    }

    /// Gate and up from `ws.acts`, the gated activation, and its quantization into `ws.acts2` for `w_down`.
    fn gate_up(
        &self,
        ws: &mut Workspace,
        lw: &LayerWeights<'_>,
        n: usize,
        counters: &mut Counters,
    ) {
        let c = &self.model.config();
        let ff = c.n_ff;
        let act = c.ffn_act;
        let isa = self.isa;
        let (gate, up) = (Shared::new(&mut ws.gate), Shared::new(&mut ws.up));
        if quant::act_layout(isa, lw.w_gate.ty) == quant::act_layout(isa, lw.w_up.ty) {
            let w2 = ws.acts2.prepare(isa, lw.w_down.ty, n, ff);
            let chunk = quant::chunk_size(ff, self.pool.n_threads(), lcm(w2.layout().align(), 4));
            let acts = &ws.acts;
            let (og, ou) = (gate.out(n, ff, ff, false), up.out(n, ff, ff, false));
            self.pool.run_chunks(ff, chunk, |r0, r1| {
                // Activation rows in blocks, so that the gate and up values of a block are
                // still in cache when the gate reads them.
                for a0 in (0..n).step_by(GATE_BLOCK) {
                    let a1 = (a0 + GATE_BLOCK).min(n);
                    // SAFETY: chunks are disjoint row ranges of gate/up, and each worker
                    // reads, rewrites and quantizes only its own columns r0..r1 of every row.
                    unsafe {
                        quant::matmul_span(isa, &lw.w_gate, acts, a0, a1, r0, r1, og);
                        quant::matmul_span(isa, &lw.w_up, acts, a0, a1, r0, r1, ou);
                        for a in a0..a1 {
                            let g = gate.slice(a * ff + r0, r1 - r0);
                            gated_act(isa, act, g, up.slice(a * ff + r0, r1 - r0));
                            w2.write_cols(a, r0, g, None);
                        }
                    }
                }
            });
            for w in [&lw.w_gate, &lw.w_up] {
                counters.matmuls += 1;
                counters.weight_bytes_read += w.bytes_read() as u64;
            }
        } else {
            let e = c.n_embd;
            matmul_job(
                self.pool,
                isa,
                &lw.w_gate,
                &ws.acts,
                n,
                gate.out(n, ff, ff, false),
                counters,
            );
            norm_quantize(
                self.pool,
                isa,
                &ws.x,
                n,
                e,
                lw.ffn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.w_up.ty,
            );
            matmul_job(
                self.pool,
                isa,
                &lw.w_up,
                &ws.acts,
                n,
                up.out(n, ff, ff, false),
                counters,
            );
            gated_act(isa, act, &mut ws.gate[..n * ff], &ws.up[..n * ff]);
            quantize_rows(self.pool, isa, &ws.gate, n, ff, &mut ws.acts2, lw.w_down.ty);
        }
    }

    /// Causal attention of the `n` rows' queries (`ws.q`) into `ws.attn`, in the fixed
    /// tree of blocks and chunks of [`super::attention`].
    ///
    /// A unit of work is one KV head and a block of rows: a single row, or for rows flagged
    /// `tile` (a prefill chunk of one sequence, slots in position order) up to
    /// [`TILE_QUERIES`] / group consecutive rows of that sequence that then share every key
    /// and value row they read. A pass may mix blocks of several sequences (chunked prefill
    /// of one beside decode rows of others); a block never spans two. With few rows
    /// (decode, batched decode of a few sequences) each unit's KV range is split further
    /// into chunks shared out to the workers; the worker that finishes a unit's last chunk
    /// merges the unit's partial states in chunk order. Otherwise a worker takes whole units
    /// and merges as it goes, in the same order. Each score, block update and merge is the
    /// same chain of operations in every case (masked slots contribute exact zeros), so a
    /// prefill chunk, token-by-token decode and batched decode agree bit for bit, at any
    /// thread count.
    fn attention(
        &self,
        ws: &mut Workspace,
        layer: usize,
        local: bool,
        n: usize,
        kvs: &dyn KvAccess,
    ) {
        let c = &self.model.config();
        let (hd, qd) = (c.head_dim, c.q_dim());
        let group = c.n_heads / c.n_kv_heads;
        let scale = c.attn_scale;
        // A local layer's query at position p sees keys at p - window + 1 ..= p.
        let window = if local && c.sliding_window > 0 {
            c.sliding_window as u32
        } else {
            u32::MAX
        };
        let isa = self.isa;
        let stride = ws.scratch_stride;
        let sc_rows = ws.sc_rows;
        let tb = (TILE_QUERIES / group).max(1);
        let nblk = blocks(&mut ws.blocks, &ws.rows[..n], local, tb);
        let any_tiled = ws.blocks[..nblk].iter().any(|b| b.tiled);
        let units = c.n_kv_heads * nblk;
        // Split the KV range of single rows into chunks when there are few rows.
        let split = !any_tiled && n <= ws.split_rows;
        // Tasks per unit: the chunks of the longest ring among the rows (rings hold at most
        // the workspace's capacity, so at most `max_chunks`).
        let per_unit = if split {
            ws.rows[..n]
                .iter()
                .map(|r| kvs.kv(r.seq, local).used().div_ceil(attention::CHUNK))
                .max()
                .unwrap_or(1)
                .max(1)
        } else {
            1
        };
        debug_assert!(per_unit <= ws.max_chunks, "ring longer than the workspace");
        let tasks = units * per_unit;
        let sl = attention::state_len(group, hd);
        if split {
            for d in &ws.done[..units] {
                d.store(0, Ordering::Relaxed);
            }
        }
        let done = &ws.done[..];
        let partials = Shared::new(&mut ws.partials);
        let scratch = Shared::new(&mut ws.scratch);
        let out = Shared::new(&mut ws.attn);
        let q = &ws.q[..];
        let rows = &ws.rows[..n];
        let blocks = &ws.blocks[..nblk];
        let query_q8 = &ws.query_q8[..];
        let next = AtomicUsize::new(0);
        let job = |w: usize, _nw: usize| {
            // SAFETY: each worker owns scratch block `w`.
            let sc = unsafe { scratch.slice(w * stride, stride) };
            // Worker `w`'s own buffer: never contended (a poisoned lock only means another
            // job panicked; the buffer is rewritten before each use).
            let mut qq = query_q8[w].lock().unwrap_or_else(|e| e.into_inner());
            let (work, rest) = sc.split_at_mut(attention::scratch_len(sc_rows, hd));
            let (qbuf, rest) = rest.split_at_mut(sc_rows * hd);
            let obuf = &mut rest[..sc_rows * hd];
            let mut pos = [0u32; TILE_QUERIES];
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= tasks {
                    break;
                }
                let (unit, ci) = (t / per_unit, t % per_unit);
                let (g, blk) = (unit / nblk, unit % nblk);
                let Block {
                    start: t0,
                    end: t1,
                    tiled,
                } = blocks[blk];
                let kv = kvs.kv(rows[t0].seq, local);
                let head = attention::HeadKv {
                    cache: kv.head(layer, g),
                    positions: kv.positions(),
                };
                let nq = (t1 - t0) * group;
                for (b, ti) in (t0..t1).enumerate() {
                    let src = ti * qd + g * group * hd;
                    qbuf[b * group * hd..(b + 1) * group * hd]
                        .copy_from_slice(&q[src..src + group * hd]);
                    pos[b] = rows[ti].pos;
                }
                let q8 = match head.cache {
                    KvHead::Q8_0 { .. } => Some(qq.quantize(isa, &qbuf[..nq * hd])),
                    KvHead::F16 { .. } => None,
                };
                let qs = attention::Queries {
                    q: &qbuf[..nq * hd],
                    pos: &pos[..t1 - t0],
                    group,
                    hd,
                    scale,
                    window,
                    q8,
                };
                let (lo, hi) = attention::visible(&head, &qs, tiled);
                if split {
                    let cr = attention::chunks(lo, hi);
                    if cr.is_empty() && ci == 0 {
                        // Nothing visible (cannot happen for a row that sees its own slot).
                        // SAFETY: (row t0, KV group g) is this unit's output range.
                        unsafe { out.slice(t0 * qd + g * group * hd, group * hd) }.fill(0.0);
                    }
                    if ci >= cr.len() {
                        continue;
                    }
                    let base = unit * per_unit * sl;
                    {
                        // SAFETY: (unit, chunk ci) is this task's own partial state.
                        let part = unsafe { partials.slice(base + ci * sl, sl) };
                        let (scores, _) = work.split_at_mut(nq * attention::BLOCK);
                        attention::chunk_state(
                            isa,
                            &head,
                            &qs,
                            cr.start + ci,
                            lo,
                            hi,
                            scores,
                            part,
                        );
                    }
                    // The last chunk of the unit to finish merges them all; AcqRel makes the
                    // other chunks' states visible to it.
                    if done[unit].fetch_add(1, Ordering::AcqRel) + 1 < cr.len() {
                        continue;
                    }
                    let acc = &mut work[..sl];
                    acc[..nq].fill(f32::NEG_INFINITY);
                    acc[nq..].fill(0.0);
                    for k in 0..cr.len() {
                        // SAFETY: every chunk of the unit is finished (counter above) and no
                        // other task touches the unit's states any more.
                        let part = unsafe { partials.slice(base + k * sl, sl) };
                        attention::merge(nq, hd, acc, part);
                    }
                    attention::finish(nq, hd, acc, &mut obuf[..nq * hd]);
                } else {
                    attention::attend(isa, &head, &qs, lo, hi, work, &mut obuf[..nq * hd]);
                }
                for (b, ti) in (t0..t1).enumerate() {
                    // SAFETY: (row ti, KV group g) is one unit's disjoint output range.
                    let o = unsafe { out.slice(ti * qd + g * group * hd, group * hd) };
                    o.copy_from_slice(&obuf[b * group * hd..(b + 1) * group * hd]);
                }
            }
        };
        if tasks == 1 || self.pool.n_threads() == 1 {
            job(0, 1);
        } else {
            self.pool.run_dynamic(job);
        }
    }

    /// Final norm and output projection of rows `first..first + rows` of the residual
    /// stream, into logits rows `out_row..out_row + rows`.
    pub(super) fn head(
        &self,
        ws: &mut Workspace,
        first: usize,
        rows: usize,
        out_row: usize,
        counters: &mut Counters,
    ) {
        let c = &self.model.config();
        let e = c.n_embd;
        let w = self.model.output();
        norm_quantize(
            self.pool,
            self.isa,
            &ws.x[first * e..(first + rows) * e],
            rows,
            e,
            self.model.output_norm(),
            c.rms_eps,
            &mut ws.acts,
            w.ty,
        );
        let v = c.vocab_size;
        let logits = &mut ws.logits[out_row * v..(out_row + rows) * v];
        let out = Shared::new(logits).out(rows, v, v, false);
        matmul_job(self.pool, self.isa, &w, &ws.acts, rows, out, counters);
    }

    /// Embedding rows of `tokens` into `ws.x`.
    pub(super) fn embed(&self, ws: &mut Workspace, tokens: &[u32]) {
        let e = self.model.config().n_embd;
        let embd = self.model.token_embd();
        for (i, &t) in tokens.iter().enumerate() {
            let row = &mut ws.x[i * e..(i + 1) * e];
            embd.row_dequant(t as usize, row);
            if let Some(s) = self.model.config().embd_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
    }
}
