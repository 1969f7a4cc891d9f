//! Attention of a few query heads over one KV head of a ring, in fixed blocks of slots with
//! an online softmax, and the split of a long KV range into chunks whose partial results are
//! merged in a fixed order (so that several workers can share one sequence's attention).
//!
//! Spec: scaled dot-product attention (Vaswani et al. 2017) with a causal mask by absolute
//! position and, for sliding-window layers, a window mask; the online softmax with a running
//! maximum and sum (Milakov & Gimelshein 2018) and the merge of partial softmax states over
//! a split KV range (the split-KV form of FlashAttention decoding).
//!
//! The tree of operations is fixed by slot indices alone:
//! - a *block* is [`BLOCK`] consecutive slots starting at a multiple of `BLOCK`. For each
//!   query head its scores (masked slots −∞) give a block maximum `m_b`; if the head sees
//!   any slot of the block, its state — running maximum `m`, sum of weights `l` and the
//!   output `o` normalized by `l` — becomes `m' = max(m, m_b)`,
//!   `l' = l · exp(m − m') + Σ exp(s − m')` (the sum in slot order on the scalar and AVX2
//!   tiers, in lanes keyed by slot index mod 16 on AVX-512),
//!   `o' = o · (l · exp(m − m') / l') + Σ (exp(s − m') / l') · v` (one FMA chain over the
//!   slots in order per output value);
//! - a *chunk* is [`CHUNK`] consecutive slots starting at a multiple of `CHUNK`; its blocks
//!   fold in order into a fresh state, the chunk's partial result;
//! - a row's chunk states merge in chunk order ([`merge`]: `m = max`, each `o` weighted by its
//!   share of the merged sum); the merged `o` is the output.
//!
//! A row that sees a single block gets exactly the classic softmax: `p = exp(s − max) ·
//! (1 / Σ)`, then `Σ p · v` from zero — the operations (and bits) of a full-row softmax over
//! the same slots, so short contexts (a 128-token perplexity window, a short prompt) keep the
//! numbers attention had before blocking.
//!
//! A block or chunk a query head sees nothing of leaves its state as it was (a block no row
//! sees is not computed at all), and masked slots add exact zeros, so a query's result
//! depends only on which slots it sees: not on how many other slots, rows or heads share its
//! task, not on which worker computes which chunk, and not on the thread count. Hence a
//! prefill chunk, token-by-token decode and batched decode agree bit for bit, whether or not
//! the chunks of a row were shared out.
//!
//! Scores and sums are f32 (kernels in [`crate::quant::attn`]); the rescaling factors use
//! the project's own [`attn::exp`] on every tier (the scalar tier's exponentials too, so the
//! OpenCL kernels can reproduce them bit for bit). Nothing here allocates.

use crate::kv::KvHead;
use crate::quant::{self, Isa, attn};
use std::ops::Range;

/// Slots per block: the unit of the online softmax. A block's keys (`BLOCK × head_dim` f16,
/// 16 KiB at head size 64) and its scores stay in L1/L2 between the three passes over them.
pub const BLOCK: usize = 128;

/// Slots per chunk: the unit of the KV split across workers (a multiple of [`BLOCK`]).
pub const CHUNK: usize = 512;

/// Head sizes above this (the 64 columns one pass of the value sums covers) get their value
/// rows prefetched tile by tile (see [`chunk_state`]).
const PREFETCH_HD: usize = 64;

/// One KV head of a ring: keys (whole key tiles, see [`crate::quant::attn::key_index`]) and
/// values (`slots × head_dim`) as the cache stores them (f16 or Q8_0), and the absolute
/// position held by each used slot (`positions.len()` = used slots).
#[derive(Clone, Copy, Debug)]
pub struct HeadKv<'a> {
    pub cache: KvHead<'a>,
    pub positions: &'a [u32],
}

/// The query heads of one task: `pos.len()` rows of `group` heads of `hd` values each.
#[derive(Clone, Copy, Debug)]
pub struct Queries<'a> {
    /// `pos.len() × group × hd` values, the heads of a row adjacent.
    pub q: &'a [f32],
    /// Absolute position of each row.
    pub pos: &'a [u32],
    pub group: usize,
    pub hd: usize,
    pub scale: f32,
    /// A row at position `p` sees the slots at `p − window + 1 ..= p` (`u32::MAX`: all
    /// earlier ones).
    pub window: u32,
    /// The same heads quantized ([`attn::QueryQ8Buf::quantize`]), which a Q8_0 cache's
    /// scores read instead of `q`; `None` for an f16 cache.
    pub q8: Option<attn::QueryQ8<'a>>,
}

impl Queries<'_> {
    /// Query heads in the task.
    pub fn nq(&self) -> usize {
        self.pos.len() * self.group
    }

    fn sees(&self, row: u32, slot: u32) -> bool {
        slot <= row && row - slot < self.window
    }
}

/// Floats of one softmax state of `nq` heads: maxima, sums of weights, then `nq × hd`
/// outputs (normalized by the sums).
pub fn state_len(nq: usize, hd: usize) -> usize {
    nq * (hd + 2)
}

/// Floats of scratch [`attend`] needs for `nq` heads: a block of scores and two states.
pub fn scratch_len(nq: usize, hd: usize) -> usize {
    nq * BLOCK + 2 * state_len(nq, hd)
}

fn clear(st: &mut [f32], nq: usize, hd: usize) {
    st[..nq].fill(f32::NEG_INFINITY);
    st[nq..state_len(nq, hd)].fill(0.0);
}

/// The slots `lo..hi` outside which no row of `qs` sees anything. With `ordered` slots
/// (positions increasing with the slot index, as before a ring wraps) found by bisection:
/// the causal bound and the window's lower bound; otherwise every used slot.
pub fn visible(kv: &HeadKv<'_>, qs: &Queries<'_>, ordered: bool) -> (usize, usize) {
    let pos = kv.positions;
    let (Some(&pmin), Some(&pmax)) = (qs.pos.iter().min(), qs.pos.iter().max()) else {
        return (0, 0);
    };
    if !ordered {
        return (0, pos.len());
    }
    let hi = pos.partition_point(|&p| p <= pmax);
    let lo = pos.partition_point(|&p| p < pmin && pmin - p >= qs.window);
    (lo.min(hi), hi)
}

/// The chunks that hold slots `lo..hi`.
pub fn chunks(lo: usize, hi: usize) -> Range<usize> {
    if hi <= lo {
        0..0
    } else {
        lo / CHUNK..hi.div_ceil(CHUNK)
    }
}

/// The partial state of chunk `c` over slots `lo..hi` into `st` ([`state_len`] floats);
/// `sc` holds `nq × BLOCK` scores.
///
/// # Panics
/// If a slice is too short for the slots or heads asked for.
#[allow(clippy::too_many_arguments)]
pub fn chunk_state(
    isa: Isa,
    kv: &HeadKv<'_>,
    qs: &Queries<'_>,
    c: usize,
    lo: usize,
    hi: usize,
    sc: &mut [f32],
    st: &mut [f32],
) {
    let (nq, hd, g) = (qs.nq(), qs.hd, qs.group);
    // Wide heads: the value sums read each value row a pass of columns at a time, a pattern
    // the hardware prefetchers miss (see the scores loop below).
    let wide = hd > PREFETCH_HD;
    clear(st, nq, hd);
    let (m, rest) = st.split_at_mut(nq);
    let (l, o) = rest.split_at_mut(nq);
    let o = &mut o[..nq * hd];
    let (s0, s1) = ((c * CHUNK).max(lo), ((c + 1) * CHUNK).min(hi));
    // The rows' extreme positions: a block whose slots every row sees needs no mask.
    let (pmin, pmax) = qs
        .pos
        .iter()
        .fold((u32::MAX, 0), |(a, b), &p| (a.min(p), b.max(p)));
    let mut b0 = s0 / BLOCK * BLOCK;
    while b0 < s1 {
        // From a multiple of 16 so that the lanes of the sums follow the slot index; any
        // slot before `s0` is masked for every row.
        let a = b0.max(s0) & !15;
        let e = (b0 + BLOCK).min(s1);
        let n = e - a;
        let (smin, smax) = attn::min_max_u32(isa, &kv.positions[a..e]);
        // No row sees any slot of the block (every slot after the last row, or out of every
        // row's window: most of a wrapped sliding-window ring longer than its window): the
        // block would leave every state as it is, so it is not computed.
        if smin > pmax || (smax <= pmin && pmin - smax >= qs.window) {
            b0 += BLOCK;
            continue;
        }
        // Wide heads' scores run a key tile at a time, each tile's value rows asked for just
        // before, so they arrive while the scores are computed. The scores are the same bits
        // in tiles as in one call (one chain per score).
        let step = if wide { attn::KEY_TILE } else { n };
        let mut t = a;
        while t < e {
            let te = (t + step).min(e);
            if wide {
                prefetch_values(&kv.cache, t * hd..te * hd);
            }
            tile_scores(isa, &kv.cache, qs, nq, t, te, &mut sc[t - a..]);
            t = te;
        }
        // Every row sees every slot of the block (the bulk of a long causal prefix): the mask
        // would change nothing.
        let all_seen = smax <= pmin && pmax.checked_sub(smin).is_some_and(|d| d < qs.window);
        let masked_rows = if all_seen { 0 } else { qs.pos.len() };
        for (r, &rp) in qs.pos[..masked_rows].iter().enumerate() {
            for (i, &p) in kv.positions[a..e].iter().enumerate() {
                if !qs.sees(rp, p) {
                    for h in 0..g {
                        sc[(r * g + h) * BLOCK + i] = f32::NEG_INFINITY;
                    }
                }
            }
        }
        let mut any = false;
        for j in 0..nq {
            let row = &mut sc[j * BLOCK..j * BLOCK + n];
            let mb = attn::max_f32(isa, row);
            if mb == f32::NEG_INFINITY {
                // Nothing seen: exact zeros leave the value sums as they are.
                row.fill(0.0);
                continue;
            }
            any = true;
            let mn = mb.max(m[j]);
            // The earlier blocks' weight on the new maximum's scale (0 before any).
            let prev = if m[j] == f32::NEG_INFINITY {
                0.0
            } else if mn == m[j] {
                l[j]
            } else {
                l[j] * attn::exp(m[j] - mn)
            };
            let lnew = prev + attn::exp_shifted(isa, row, mn);
            let inv = 1.0 / lnew;
            attn::scale_f32(isa, row, inv);
            if prev != 0.0 {
                attn::scale_f32(isa, &mut o[j * hd..(j + 1) * hd], prev * inv);
            }
            m[j] = mn;
            l[j] = lnew;
        }
        if any {
            value_sums(isa, &kv.cache, sc, nq, hd, a, e, o);
        }
        b0 += BLOCK;
    }
}

/// Asks the caches for value rows `rows` (values, not bytes) of a head.
fn prefetch_values(cache: &KvHead<'_>, rows: Range<usize>) {
    match *cache {
        KvHead::F16 { values, .. } => quant::prefetch(&values[rows]),
        KvHead::Q8_0 { values, .. } => quant::prefetch(&values[rows]),
    }
}

/// Scores of the `nq` heads of `qs` against slots `t..te` (`t` a multiple of 16) into `out`
/// (rows [`BLOCK`] apart), by the cache's type.
fn tile_scores(
    isa: Isa,
    cache: &KvHead<'_>,
    qs: &Queries<'_>,
    nq: usize,
    t: usize,
    te: usize,
    out: &mut [f32],
) {
    let hd = qs.hd;
    let tiles = t * hd..te.next_multiple_of(attn::KEY_TILE) * hd;
    let (q, n, scale) = (qs.q, te - t, qs.scale);
    match *cache {
        KvHead::F16 { keys, .. } => {
            attn::scores_f16(isa, q, nq, hd, &keys[tiles], n, scale, out, BLOCK);
        }
        KvHead::Q8_0 {
            keys, key_scales, ..
        } => {
            let g = attn::Q8_GROUP;
            let scales = &key_scales[tiles.start / g..tiles.end / g];
            // An internal contract: whoever builds the queries of a Q8_0 head quantizes them.
            let q8 = qs
                .q8
                .as_ref()
                .expect("queries of a Q8_0 cache come quantized");
            attn::scores_q8_0(isa, q8, nq, hd, &keys[tiles], scales, n, scale, out, BLOCK);
        }
    }
}

/// `o += Σ p · v` over slots `a..e` (`a` a multiple of 16; probabilities `p` in rows
/// [`BLOCK`] apart), by the cache's type.
#[allow(clippy::too_many_arguments)]
fn value_sums(
    isa: Isa,
    cache: &KvHead<'_>,
    p: &[f32],
    nq: usize,
    hd: usize,
    a: usize,
    e: usize,
    o: &mut [f32],
) {
    let n = e - a;
    match *cache {
        KvHead::F16 { values, .. } => {
            attn::accum_f16(isa, p, BLOCK, nq, hd, &values[a * hd..e * hd], n, o);
        }
        KvHead::Q8_0 {
            values,
            value_scales,
            ..
        } => {
            // The slot pairs and the scales of whole tiles (the ring is padded to them).
            let g = attn::Q8_GROUP;
            let e16 = e.next_multiple_of(attn::KEY_TILE);
            let (v, d) = (
                &values[a * hd..e16 * hd],
                &value_scales[a * hd / g..e16 * hd / g],
            );
            attn::accum_q8_0(isa, p, BLOCK, nq, hd, v, d, n, o);
        }
    }
}

/// Folds the state `part` into `acc` (both of `nq` heads): the merge of two softmax states,
/// `acc` first, each output weighted by its share `l · exp(m − max)` of the merged sum. A
/// head `part` saw nothing of leaves `acc` unchanged; into an empty `acc` the state is
/// copied.
pub fn merge(nq: usize, hd: usize, acc: &mut [f32], part: &[f32]) {
    let (am, rest) = acc.split_at_mut(nq);
    let (al, ao) = rest.split_at_mut(nq);
    let (pm, rest) = part.split_at(nq);
    let (pl, po) = rest.split_at(nq);
    for j in 0..nq {
        if pm[j] == f32::NEG_INFINITY {
            continue;
        }
        let (ro, src) = (&mut ao[j * hd..(j + 1) * hd], &po[j * hd..(j + 1) * hd]);
        if am[j] == f32::NEG_INFINITY {
            am[j] = pm[j];
            al[j] = pl[j];
            ro.copy_from_slice(src);
            continue;
        }
        let mn = am[j].max(pm[j]);
        let (wa, wb) = (al[j] * attn::exp(am[j] - mn), pl[j] * attn::exp(pm[j] - mn));
        let lnew = wa + wb;
        let (fa, fb) = (wa / lnew, wb / lnew);
        for (x, &y) in ro.iter_mut().zip(src) {
            *x = *x * fa + y * fb;
        }
        am[j] = mn;
        al[j] = lnew;
    }
}

/// The outputs of a merged state (`out`: `nq × hd`; zeros for a head that saw nothing).
pub fn finish(nq: usize, hd: usize, st: &[f32], out: &mut [f32]) {
    out[..nq * hd].copy_from_slice(&st[2 * nq..2 * nq + nq * hd]);
}

/// Attention of the heads of `qs` over slots `lo..hi` of `kv` on one thread: every chunk's
/// state, merged in order, into `out` (`nq × hd`). `scratch` holds [`scratch_len`] floats.
///
/// # Panics
/// If a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    isa: Isa,
    kv: &HeadKv<'_>,
    qs: &Queries<'_>,
    lo: usize,
    hi: usize,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (nq, hd) = (qs.nq(), qs.hd);
    let sl = state_len(nq, hd);
    let (sc, rest) = scratch.split_at_mut(nq * BLOCK);
    let (acc, rest) = rest.split_at_mut(sl);
    let part = &mut rest[..sl];
    clear(acc, nq, hd);
    for c in chunks(lo, hi) {
        chunk_state(isa, kv, qs, c, lo, hi, sc, part);
        merge(nq, hd, acc, part);
    }
    finish(nq, hd, acc, out);
}
