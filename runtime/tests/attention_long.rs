//! Blocked attention with an online softmax and a chunked KV split
//! (`pocketperf_runtime::model::attention`) at long context (4,500 slots, nine chunks),
//! against exact f64 attention over the same f16 keys and values; the bit-identity of one
//! query's result whatever shares its task (a prefill tile, a lone decode row, chunks
//! computed out of order and merged), with and without a sliding window, on a wrapped
//! (unordered) ring; and, on the reference model, decode at a depth of three chunks giving
//! the same bits on one and two threads, with an f16 and with a Q8_0 cache; and the same
//! bound of exact math over a Q8_0 cache.

mod common;

use half::f16;
use pocketperf_runtime::kv::{KvCache, KvHead, KvPolicy, KvShape, KvType};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::model::attention::{
    self, BLOCK, CHUNK, HeadKv, Queries, chunk_state, chunks, merge, scratch_len, state_len,
};
use pocketperf_runtime::perplexity::text_tokens;
use pocketperf_runtime::quant::attn::{Q8_GROUP, Q8_RUN, QueryQ8Buf};
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::session::Engine;

const HD: usize = 64;
const GROUP: usize = 3;
const SLOTS: usize = 4500;

struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

struct Data {
    /// Head size and query heads per KV head.
    hd: usize,
    group: usize,
    keys: Vec<f16>,
    values: Vec<f16>,
    /// Instead of `keys` and `values`: the same kind of data in a Q8_0 cache (one layer,
    /// one head).
    q8: Option<KvCache>,
    positions: Vec<u32>,
    /// Queries of rows at every position (`SLOTS × GROUP × hd`), large enough that the
    /// softmax is far from uniform (scores spread over about ±8).
    q: Vec<f32>,
}

fn data(seed: u64) -> Data {
    data_hd(seed, HD, GROUP)
}

fn data_hd(seed: u64, hd: usize, group: usize) -> Data {
    let mut r = Rng(seed);
    // Keys in whole tiles of 16 slots, as the cache stores them.
    let keys = (0..SLOTS.next_multiple_of(16) * hd)
        .map(|_| f16::from_f32(r.unit()))
        .collect();
    let values = (0..SLOTS * hd)
        .map(|_| f16::from_f32(r.unit() * 2.0))
        .collect();
    // Scores of wider heads sum more terms: scale the queries so that they spread as much.
    let qs = 3.0 * (HD as f32 / hd as f32).sqrt();
    let q = (0..SLOTS * group * hd).map(|_| r.unit() * qs).collect();
    Data {
        hd,
        group,
        keys,
        values,
        q8: None,
        positions: (0..SLOTS as u32).collect(),
        q,
    }
}

/// Keys and values drawn as in [`data_hd`], written into a Q8_0 cache.
fn data_q8(seed: u64, hd: usize, group: usize) -> Data {
    let mut r = Rng(seed);
    let shape = KvShape {
        n_layers: 1,
        n_kv_heads: 1,
        head_dim: hd,
        capacity: SLOTS,
        ty: KvType::Q8_0,
    };
    let mut kv = KvCache::new(shape, KvPolicy::Error).unwrap();
    for s in 0..SLOTS {
        let k: Vec<f32> = (0..hd).map(|_| r.unit()).collect();
        let v: Vec<f32> = (0..hd).map(|_| r.unit() * 2.0).collect();
        assert_eq!(kv.claim(s as u32).unwrap(), s);
        kv.write(0, s, &k, &v);
    }
    let qs = 3.0 * (HD as f32 / hd as f32).sqrt();
    let q = (0..SLOTS * group * hd).map(|_| r.unit() * qs).collect();
    Data {
        hd,
        group,
        keys: Vec::new(),
        values: Vec::new(),
        q8: Some(kv),
        positions: (0..SLOTS as u32).collect(),
        q,
    }
}

const SCALE: f32 = 0.125;

/// Exact attention of the `GROUP` heads of the row at `pos` (queries `q`), in f64 over the
/// f16 values as stored. Also returns the largest `scale · Σ_d |q_d k_d|` over the slots seen
/// (the score magnitude the error bound below needs).
fn exact(d: &Data, q: &[f32], pos: u32, window: u32) -> (Vec<f64>, f64) {
    let (hd, group) = (d.hd, d.group);
    let mut out = vec![0.0f64; group * hd];
    let mut smax = 0.0f64;
    for h in 0..group {
        let qh = &q[h * hd..(h + 1) * hd];
        let seen: Vec<usize> = (0..d.positions.len())
            .filter(|&s| {
                let p = d.positions[s];
                p <= pos && pos - p < window
            })
            .collect();
        let scores: Vec<f64> = seen
            .iter()
            .map(|&s| {
                let (mut dot, mut abs) = (0.0f64, 0.0f64);
                for (i, a) in qh.iter().enumerate() {
                    let b = f64::from(head(d).cache.key(hd, s, i));
                    dot += *a as f64 * b;
                    abs += (*a as f64 * b).abs();
                }
                smax = smax.max(abs * SCALE as f64);
                dot * SCALE as f64
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let l: f64 = w.iter().sum();
        for (&s, &ws) in seen.iter().zip(&w) {
            for i in 0..hd {
                out[h * hd + i] += ws / l * f64::from(head(d).cache.value(hd, s, i));
            }
        }
    }
    (out, smax)
}

/// A first-order bound on |ours − exact| for f32 arithmetic (unit roundoff u = 2^-24): each
/// score is an `hd`-term dot product (64 here), off by at most γ_hd · S (S = the largest
/// `scale · Σ|q_d k_d|`), which moves the normalized weights by a factor within
/// exp(±2 γ_hd S). Each output value is a chain of at most 512 FMAs (one chunk's slots), 4
/// block rescalings, 3 operations per merge of the 9 chunks, and each weight carries its
/// exponential (within 2 ulp), its normalization and the sums of weights (chains of ≤ 560
/// additions and rescalings): under 560 + 2 · 560 + 8 roundings relative to Σ w|v|. As the
/// output is a convex combination of values, the error is at most
/// (3 · 560 u + 8 u + 2 · hd · u · S · 1.01) · max|v|.
fn bound(smax: f64, vmax: f64) -> f64 {
    bound_hd(smax, vmax, HD)
}

fn bound_hd(smax: f64, vmax: f64, hd: usize) -> f64 {
    let u = (2.0f64).powi(-24);
    (3.0 * 560.0 * u + 8.0 * u + 2.0 * hd as f64 * u * smax * 1.01) * vmax
}

fn queries<'a>(q: &'a [f32], pos: &'a [u32], window: u32) -> Queries<'a> {
    queries_of(q, pos, window, HD, GROUP)
}

fn queries_of<'a>(
    q: &'a [f32],
    pos: &'a [u32],
    window: u32,
    hd: usize,
    group: usize,
) -> Queries<'a> {
    Queries {
        q,
        pos,
        group,
        hd,
        scale: SCALE,
        window,
        q8: None,
    }
}

fn head(d: &Data) -> HeadKv<'_> {
    let cache = match &d.q8 {
        Some(kv) => kv.head(0, 0),
        None => KvHead::F16 {
            keys: &d.keys,
            values: &d.values,
        },
    };
    HeadKv {
        cache,
        positions: &d.positions,
    }
}

/// One task's output (`nq × hd`) through `attend`.
fn attend(isa: Isa, d: &Data, qs: &Queries<'_>, ordered: bool) -> Vec<f32> {
    let kv = head(d);
    let (lo, hi) = attention::visible(&kv, qs, ordered);
    let mut scratch = vec![0.0f32; scratch_len(qs.nq(), qs.hd)];
    let mut out = vec![0.0f32; qs.nq() * qs.hd];
    attention::attend(isa, &kv, qs, lo, hi, &mut scratch, &mut out);
    out
}

fn row_q(d: &Data, pos: u32) -> &[f32] {
    let p = pos as usize;
    let w = d.group * d.hd;
    &d.q[p * w..(p + 1) * w]
}

fn tiers() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    let best = quant::detect_best();
    if best != Isa::Scalar {
        v.push(best);
    }
    v
}

#[test]
fn long_context_attention_is_within_the_f32_bound_of_exact_math() {
    let d = data(7);
    let vmax = vmax(&d);
    for isa in tiers() {
        for window in [u32::MAX, 1000] {
            // The last row sees all 4,500 slots (nine chunks); the others cut chunks and
            // blocks in the middle.
            for pos in [4499u32, 4100, 2049, 511, 130] {
                let q = row_q(&d, pos);
                let ours = attend(isa, &d, &queries(q, &[pos], window), false);
                let (want, smax) = exact(&d, q, pos, window);
                let tol = bound(smax, vmax);
                let err = max_err(&ours, &want);
                eprintln!("{isa:?} window {window} pos {pos}: error {err:.2e}, bound {tol:.2e}");
                assert!(
                    err <= tol,
                    "{isa:?} window {window} pos {pos}: max error {err:.3e} > bound {tol:.3e}"
                );
            }
        }
    }
}

/// The same bound over a Q8_0 cache, at head sizes 64 and 256: the exact reference reads
/// the dequantized keys and values (`f32(d) · q`) and the dequantized query (scores against
/// a Q8_0 cache take the query quantized); the value sums' 16-bit weights add their own
/// closed-form bound to that of the blocked, chunked f32 arithmetic.
#[test]
fn long_context_attention_over_a_q8_0_cache_is_within_the_f32_bound_of_exact_math() {
    for (hd, group) in [(HD, GROUP), (256, 4)] {
        let d = data_q8(17, hd, group);
        let vmax = vmax(&d);
        for isa in tiers() {
            for window in [u32::MAX, 1000] {
                for pos in [4499u32, 2049, 130] {
                    let q = row_q(&d, pos);
                    let at = [pos];
                    let mut buf = QueryQ8Buf::with_capacity(q.len());
                    let q8 = buf.quantize(isa, q);
                    let deq: Vec<f32> = (0..q.len())
                        .map(|i| f32::from(q8.quants[i]) * q8.scales[i / Q8_GROUP])
                        .collect();
                    let qs = Queries {
                        q8: Some(q8),
                        ..queries_of(q, &at, window, hd, group)
                    };
                    let ours = attend(isa, &d, &qs, false);
                    let (want, smax) = exact(&d, &deq, pos, window);
                    // Plus the value sums' 16-bit weights: at most Q8_RUN / 65534 of the
                    // largest value (`quant::attn::accum_q8_0`).
                    let tol = bound_hd(smax, vmax, hd) + Q8_RUN as f64 / 65534.0 * vmax;
                    let err = max_err(&ours, &want);
                    eprintln!(
                        "q8_0 hd {hd} {isa:?} window {window} pos {pos}: error {err:.2e}, bound {tol:.2e}"
                    );
                    assert!(
                        err <= tol,
                        "q8_0 hd {hd} {isa:?} window {window} pos {pos}: {err:.3e} > {tol:.3e}"
                    );
                }
            }
        }
    }
}

#[test]
fn one_query_gets_the_same_bits_whatever_shares_its_task() {
    let d = data(11);
    for isa in tiers() {
        for window in [u32::MAX, 700] {
            let pos = 4301u32;
            // A lone decode row over every used slot (later slots masked).
            let alone = attend(isa, &d, &queries(row_q(&d, pos), &[pos], window), false);
            // The same row third in a prefill tile of four rows, bounds found by bisection.
            let tile_pos = [pos - 2, pos - 1, pos, pos + 1];
            let tile_q: Vec<f32> = tile_pos
                .iter()
                .flat_map(|&p| row_q(&d, p).iter().copied())
                .collect();
            let tile = attend(isa, &d, &queries(&tile_q, &tile_pos, window), true);
            let third = &tile[2 * GROUP * HD..3 * GROUP * HD];
            assert!(
                alone
                    .iter()
                    .zip(third)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa:?} window {window}: decode row and prefill tile differ"
            );
            // Its chunks computed in reverse order (as workers may finish them), then merged
            // in chunk order.
            let qs = queries(row_q(&d, pos), std::slice::from_ref(&pos), window);
            let kv = head(&d);
            let (lo, hi) = attention::visible(&kv, &qs, false);
            let cr = chunks(lo, hi);
            assert_eq!(cr.len(), SLOTS.div_ceil(CHUNK));
            let sl = state_len(GROUP, HD);
            let mut parts = vec![0.0f32; cr.len() * sl];
            let mut sc = vec![0.0f32; GROUP * BLOCK];
            for (k, c) in cr.clone().enumerate().rev() {
                chunk_state(
                    isa,
                    &kv,
                    &qs,
                    c,
                    lo,
                    hi,
                    &mut sc,
                    &mut parts[k * sl..(k + 1) * sl],
                );
            }
            let mut acc = vec![0.0f32; sl];
            acc[..GROUP].fill(f32::NEG_INFINITY);
            for p in parts.chunks_exact(sl) {
                merge(GROUP, HD, &mut acc, p);
            }
            let mut split = vec![0.0f32; GROUP * HD];
            attention::finish(GROUP, HD, &acc, &mut split);
            assert!(
                alone
                    .iter()
                    .zip(&split)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa:?} window {window}: split chunks differ"
            );
        }
    }
}

/// The slots of a ring that wrapped: positions rotated by 1,234 slots.
fn wrapped(mut d: Data) -> Data {
    let n = SLOTS as u32;
    d.positions = (0..n).map(|s| (s + n - 1234) % n).collect();
    d
}

/// The largest |value| in the cache.
fn vmax(d: &Data) -> f64 {
    let h = head(d);
    (0..SLOTS * d.hd)
        .map(|i| f64::from(h.cache.value(d.hd, i / d.hd, i % d.hd)).abs())
        .fold(0.0, f64::max)
}

/// The largest |ours − exact|.
fn max_err(ours: &[f32], want: &[f64]) -> f64 {
    ours.iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn a_wrapped_ring_is_attended_by_position() {
    let d = wrapped(data(5));
    let vmax = vmax(&d);
    for isa in tiers() {
        for window in [u32::MAX, 900] {
            let pos = 4000u32;
            let q = row_q(&d, pos);
            let ours = attend(isa, &d, &queries(q, &[pos], window), false);
            let (want, smax) = exact(&d, q, pos, window);
            let err = max_err(&ours, &want);
            assert!(
                err <= bound(smax, vmax),
                "{isa:?} window {window}: {err:.3e}"
            );
        }
    }
}

/// Wide heads (size 256, four query heads per KV head: Gemma 3's shape), whose scores run a
/// key tile at a time with the value rows prefetched: within the f32 bound of exact math on
/// a wrapped ring, with and without a window (most blocks of the windowed row are seen by
/// nobody and skipped), and the same bits for a row alone as inside a prefill tile.
#[test]
fn wide_heads_on_a_wrapped_ring_agree_with_exact_math() {
    let (hd, group) = (256, 4);
    let d = wrapped(data_hd(7, hd, group));
    let vmax = vmax(&d);
    for isa in tiers() {
        for window in [u32::MAX, 900, 100] {
            let pos = 4000u32;
            let q = row_q(&d, pos);
            let ours = attend(isa, &d, &queries_of(q, &[pos], window, hd, group), false);
            let (want, smax) = exact(&d, q, pos, window);
            let err = max_err(&ours, &want);
            assert!(
                err <= bound_hd(smax, vmax, hd),
                "{isa:?} window {window}: {err:.3e} > {:.3e}",
                bound_hd(smax, vmax, hd)
            );
            // The same row third in a tile of rows at 3998..=4001.
            let tile_pos = [3998u32, 3999, 4000, 4001];
            let w = group * hd;
            let tile_q: Vec<f32> = tile_pos
                .iter()
                .flat_map(|&p| row_q(&d, p))
                .copied()
                .collect();
            let tile = attend(
                isa,
                &d,
                &queries_of(&tile_q, &tile_pos, window, hd, group),
                false,
            );
            assert!(
                tile[2 * w..3 * w]
                    .iter()
                    .zip(&ours)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa:?} window {window}: decode row and prefill tile differ"
            );
        }
    }
}

/// Decode at a depth of 1,100 tokens (three chunks, split across the workers) gives the
/// same logits on one thread and on two, on the active tier.
#[test]
fn decode_at_depth_gives_the_same_bits_on_one_and_two_threads() {
    let isa = quant::isa_from_env().expect("POCKETPERF_ISA");
    let text_path = common::reference_dir_for("smollm2-135m").join("ppl_text.txt");
    let text = std::fs::read_to_string(&text_path).expect("read the perplexity text");
    let run = |threads: usize, kv_type: KvType| {
        let engine = Engine::load(&common::model_path(), threads, isa).expect("load model");
        let mut ids = text_tokens(&engine, &text).expect("tokenize");
        while ids.len() < 1104 {
            ids.extend_from_within(..);
        }
        let mut s = engine
            .session(SessionOptions {
                max_seq_len: 1200,
                max_batch: 64,
                kv_type,
                ..Default::default()
            })
            .expect("session");
        s.prefill(&ids[..1100]).expect("prefill");
        let mut out = Vec::new();
        for &t in &ids[1100..1104] {
            out.extend_from_slice(s.decode(t).expect("decode"));
        }
        out
    };
    let mut by_type = Vec::new();
    for kv_type in [KvType::F16, KvType::Q8_0] {
        let (one, two) = (run(1, kv_type), run(2, kv_type));
        assert!(
            one.iter()
                .zip(&two)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{kv_type} cache: logits differ between one and two threads"
        );
        by_type.push(one);
    }
    // The Q8_0 cache is read: its logits are not the f16 cache's.
    assert!(by_type[0] != by_type[1], "q8_0 logits equal f16's");
}

/// Short contexts (1 to 40 slots, partial tiles and blocks) through prefill tiles and single
/// rows: the SIMD tier within the f32 bound of exact math, as the scalar tier.
#[test]
fn short_contexts_and_partial_tiles_agree_with_exact_math() {
    let d = data(3);
    let vmax = vmax(&d);
    for isa in tiers() {
        for n in 1..=40u32 {
            for rows in 1..=4u32.min(n) {
                let pos: Vec<u32> = (n - rows..n).collect();
                let q: Vec<f32> = pos
                    .iter()
                    .flat_map(|&p| row_q(&d, p).iter().copied())
                    .collect();
                let short = Data {
                    hd: HD,
                    group: GROUP,
                    keys: d.keys.clone(),
                    values: d.values.clone(),
                    q8: None,
                    positions: (0..n).collect(),
                    q: Vec::new(),
                };
                let ours = attend(isa, &short, &queries(&q, &pos, u32::MAX), true);
                for (r, &p) in pos.iter().enumerate() {
                    let (want, smax) = exact(&short, row_q(&d, p), p, u32::MAX);
                    let got = &ours[r * GROUP * HD..(r + 1) * GROUP * HD];
                    let err = max_err(got, &want);
                    assert!(
                        err <= bound(smax, vmax),
                        "{isa:?} {n} slots, row {r} of {rows}: error {err:.3e}"
                    );
                }
            }
        }
    }
}
