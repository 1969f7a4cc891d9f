//! AVX2 forms of the attention kernels of [`super`]: the f16 scores and value sums for the
//! AVX2 tier, the Q8_0 ones for it and for the AVX-512 tier without VNNI. Each is the scalar
//! tier's chain in vector registers (a multiply and an add where the scalar code has them,
//! the same order, exact integer sums), so it returns the scalar tier's bits.

use std::arch::x86_64::*;

use half::f16;

use super::{KEY_TILE, Q8_GROUP, Q8_RUN, QueryQ8, W16};

/// The first `k` of 8 lanes as a store mask (all for `k` ≥ 8).
#[inline]
fn mask8(k: usize) -> __m256i {
    let k = k.min(8) as i32;
    // SAFETY: AVX2 is enabled in every caller; `setr` and `cmpgt` touch no memory.
    unsafe {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lanes)
    }
}

/// Integer dot products of one query quad (4 bytes, `q4` broadcast to every 32-bit lane)
/// with 8 slots' 4 key bytes: `|q| · (k · sign q)` summed by pairs (at most 2 · 127 · 127,
/// no saturation: Q8_0 quants lie in −127..=127), then the pairs summed into 32 bits.
#[target_feature(enable = "avx2")]
#[inline]
fn dot4(q4: __m256i, qa: __m256i, k: __m256i, ones: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(k, q4)), ones)
}

/// [`super::scores_q8_0`] on AVX2: per key tile, head and group the exact integer dot
/// products of 16 slots (two registers of 8), then `acc + (d_key · d_query) · part` (a
/// multiply and an add), times `scale` at the end.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_q8(
    q: &QueryQ8<'_>,
    nq: usize,
    hd: usize,
    keys: &[i8],
    scales: &[f16],
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    let groups = hd / Q8_GROUP;
    let ones = _mm256_set1_epi16(1);
    let sc = _mm256_set1_ps(scale);
    let (kp, dp, op) = (keys.as_ptr(), scales.as_ptr(), out.as_mut_ptr());
    // SAFETY: q holds nq heads, keys and scales the whole tiles of n slots, out
    // (nq-1)·ld + n floats (caller); stores past n are masked off.
    unsafe {
        for t in (0..n).step_by(KEY_TILE) {
            let (tk, td) = (kp.add(t * hd), dp.add(t * groups));
            let (m0, m1) = (mask8(n - t), mask8((n - t).saturating_sub(8)));
            for h in 0..nq {
                let mut acc = [_mm256_setzero_ps(); 2];
                for g in 0..groups {
                    let mut part = [_mm256_setzero_si256(); 2];
                    for quad in 0..Q8_GROUP / 4 {
                        let qo = h * hd + g * Q8_GROUP + quad * 4;
                        let w = (q.quants.as_ptr().add(qo) as *const i32).read_unaligned();
                        let q4 = _mm256_set1_epi32(w);
                        let qa = _mm256_abs_epi8(q4);
                        let row = tk.add((g * Q8_GROUP / 4 + quad) * 4 * KEY_TILE);
                        for (i, p) in part.iter_mut().enumerate() {
                            let k = _mm256_loadu_si256(row.add(32 * i) as *const __m256i);
                            *p = _mm256_add_epi32(*p, dot4(q4, qa, k, ones));
                        }
                    }
                    let dq = _mm256_set1_ps(*q.scales.as_ptr().add(h * groups + g));
                    for (i, (a, p)) in acc.iter_mut().zip(&part).enumerate() {
                        let dk = _mm_loadu_si128(td.add(g * KEY_TILE + 8 * i) as *const __m128i);
                        let w = _mm256_mul_ps(_mm256_cvtph_ps(dk), dq);
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(w, _mm256_cvtepi32_ps(*p)));
                    }
                }
                let o = op.add(h * ld + t);
                _mm256_maskstore_ps(o, m0, _mm256_mul_ps(acc[0], sc));
                _mm256_maskstore_ps(o.add(8), m1, _mm256_mul_ps(acc[1], sc));
            }
        }
    }
}

/// The largest of 8 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn hmax8(v: __m256) -> f32 {
    let x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)))
}

/// [`super::accum_q8_0`] on AVX2: per run of [`Q8_RUN`] slots, head and group of 32
/// dimensions, the 16-bit weights (`round(p · d · (32767 / W))`, halves to even), the exact
/// sums `Σ u · q` of each slot pair by `vpmaddwd`, then `out + (W / 32767) · Σ` (a multiply
/// and an add).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum_q8(
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: &[i8],
    scales: &[f16],
    n: usize,
    out: &mut [f32],
) {
    const { assert!(Q8_RUN == KEY_TILE, "a run is one key tile") };
    let groups = hd / Q8_GROUP;
    let (pp, vp, dp, op) = (p.as_ptr(), vals.as_ptr(), scales.as_ptr(), out.as_mut_ptr());
    // SAFETY: sizes checked by the caller (hd a multiple of 32; the slot pairs and whole
    // tiles' scales of n slots; nq rows of probabilities, n each); loads past n are masked.
    unsafe {
        for r0 in (0..n).step_by(Q8_RUN) {
            let rn = (n - r0).min(Q8_RUN);
            let (m0, m1) = (mask8(rn), mask8(rn.saturating_sub(8)));
            for g in 0..groups {
                let d = dp.add(r0 * groups + g * KEY_TILE);
                let d0 = _mm256_cvtph_ps(_mm_loadu_si128(d as *const __m128i));
                let d1 = _mm256_cvtph_ps(_mm_loadu_si128(d.add(8) as *const __m128i));
                for h0 in (0..nq).step_by(2) {
                    let hn = (nq - h0).min(2);
                    // Each head's 16 weights as 16-bit integers, and its `W / 32767`.
                    let mut u = [[0i16; 16]; 2];
                    let mut back = [0.0f32; 2];
                    for (j, (uj, bj)) in u.iter_mut().zip(back.iter_mut()).take(hn).enumerate() {
                        let ph = pp.add((h0 + j) * ld + r0);
                        let w0 = _mm256_mul_ps(_mm256_maskload_ps(ph, m0), d0);
                        let w1 = _mm256_mul_ps(_mm256_maskload_ps(ph.add(8), m1), d1);
                        // Lanes past n weigh 0, below every weight.
                        let wmax = hmax8(_mm256_max_ps(w0, w1));
                        let inv = _mm256_set1_ps(if wmax > 0.0 { W16 / wmax } else { 0.0 });
                        *bj = wmax / W16;
                        let i0 = _mm256_cvtps_epi32(_mm256_mul_ps(w0, inv));
                        let i1 = _mm256_cvtps_epi32(_mm256_mul_ps(w1, inv));
                        // Lanes in order: the pack interleaves 128-bit halves.
                        let q = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(i0, i1));
                        _mm256_storeu_si256(uj.as_mut_ptr() as *mut __m256i, q);
                    }
                    let mut acc = [[_mm256_setzero_si256(); 4]; 2];
                    for sp in 0..rn.div_ceil(2) {
                        let row = vp.add((r0 + 2 * sp) * hd + g * Q8_GROUP * 2);
                        let mut v = [_mm256_setzero_si256(); 4];
                        for (c, vc) in v.iter_mut().enumerate() {
                            let b = _mm_loadu_si128(row.add(16 * c) as *const __m128i);
                            *vc = _mm256_cvtepi8_epi16(b);
                        }
                        for (accs, uj) in acc.iter_mut().zip(&u).take(hn) {
                            // The pair's two weights as one 32-bit lane.
                            let b = (uj.as_ptr().add(2 * sp) as *const i32).read_unaligned();
                            let b = _mm256_set1_epi32(b);
                            for (a, vc) in accs.iter_mut().zip(&v) {
                                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(*vc, b));
                            }
                        }
                    }
                    for (j, (accs, &bk)) in acc.iter().zip(&back).take(hn).enumerate() {
                        let bk = _mm256_set1_ps(bk);
                        let o = op.add((h0 + j) * hd + g * Q8_GROUP);
                        for (c, a) in accs.iter().enumerate() {
                            let oc = o.add(8 * c);
                            let sum = _mm256_mul_ps(bk, _mm256_cvtepi32_ps(*a));
                            _mm256_storeu_ps(oc, _mm256_add_ps(_mm256_loadu_ps(oc), sum));
                        }
                    }
                }
            }
        }
    }
}

/// Scores of `H` queries (`qp`, rows of `hd`) for the 16 slots of one f16 key tile: per
/// dimension in order `acc + q · k` (a multiply and an add), stored times `scale` in the
/// lanes of `m0` and `m1` at `op + j·ld`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_tile<const H: usize>(
    qp: *const f32,
    hd: usize,
    tile: *const f16,
    sc: __m256,
    op: *mut f32,
    ld: usize,
    m0: __m256i,
    m1: __m256i,
) {
    // SAFETY: the caller guarantees H·hd floats at qp, a whole key tile at `tile` and the
    // stored lanes inside `op`'s rows.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; H];
        for d in 0..hd {
            let k0 = _mm256_cvtph_ps(_mm_loadu_si128(tile.add(d * 16) as *const __m128i));
            let k1 = _mm256_cvtph_ps(_mm_loadu_si128(tile.add(d * 16 + 8) as *const __m128i));
            for (j, a) in acc.iter_mut().enumerate() {
                let qv = _mm256_set1_ps(*qp.add(j * hd + d));
                a[0] = _mm256_add_ps(a[0], _mm256_mul_ps(qv, k0));
                a[1] = _mm256_add_ps(a[1], _mm256_mul_ps(qv, k1));
            }
        }
        for (j, a) in acc.iter().enumerate() {
            let o = op.add(j * ld);
            _mm256_maskstore_ps(o, m0, _mm256_mul_ps(a[0], sc));
            _mm256_maskstore_ps(o.add(8), m1, _mm256_mul_ps(a[1], sc));
        }
    }
}

/// Most query heads of one pass of the f16 scores: `2·H` sums, two key registers and a
/// broadcast fill the sixteen registers.
const SCORE_HEADS: usize = 6;

/// Heads of the next pass when `left` remain and a pass takes at most `most`: the passes
/// `left` needs, evened out (seven heads in passes of four and three, not six and one).
fn pass_heads(left: usize, most: usize) -> usize {
    left.div_ceil(left.div_ceil(most))
}

/// [`super::scores_f16`] on AVX2: a key tile at a time, up to [`SCORE_HEADS`] queries per
/// pass.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_f16(
    q: &[f32],
    nq: usize,
    hd: usize,
    keys: *const f16,
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    let (qp, op) = (q.as_ptr(), out.as_mut_ptr());
    let sc = _mm256_set1_ps(scale);
    // SAFETY: q holds nq·hd floats, keys the whole tiles of n slots, out (nq-1)·ld + n
    // floats (caller); stores past n are masked off.
    unsafe {
        for t in (0..n).step_by(KEY_TILE) {
            let tile = keys.add(t * hd);
            let (m0, m1) = (mask8(n - t), mask8((n - t).saturating_sub(8)));
            let mut h0 = 0;
            while h0 < nq {
                let (qh, oh) = (qp.add(h0 * hd), op.add(h0 * ld + t));
                let hn = pass_heads(nq - h0, SCORE_HEADS);
                match hn {
                    1 => scores_tile::<1>(qh, hd, tile, sc, oh, ld, m0, m1),
                    2 => scores_tile::<2>(qh, hd, tile, sc, oh, ld, m0, m1),
                    3 => scores_tile::<3>(qh, hd, tile, sc, oh, ld, m0, m1),
                    4 => scores_tile::<4>(qh, hd, tile, sc, oh, ld, m0, m1),
                    5 => scores_tile::<5>(qh, hd, tile, sc, oh, ld, m0, m1),
                    _ => scores_tile::<6>(qh, hd, tile, sc, oh, ld, m0, m1),
                }
                h0 += hn;
            }
        }
    }
}

/// `out_h += p_h[s] · v_s` over the slots in order for `H` heads and `C` chunks of 8
/// columns from `col`, skipping a slot whose weight is 0 (as the scalar code does; with
/// `DENSE` the caller found no such weight, and no weight is tested), the outputs in
/// registers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_pass<const H: usize, const C: usize, const DENSE: bool>(
    pp: *const f32,
    ld: usize,
    hd: usize,
    vals: *const f16,
    n: usize,
    col: usize,
    op: *mut f32,
) {
    // SAFETY: the caller guarantees H rows of probabilities (stride ld, n each), n value
    // rows of hd halves and H output rows of hd floats, columns col..col + 8·C inside.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; H];
        for (h, row) in acc.iter_mut().enumerate() {
            for (c, a) in row.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(op.add(h * hd + col + 8 * c));
            }
        }
        for s in 0..n {
            let mut v = [_mm256_setzero_ps(); C];
            for (c, vc) in v.iter_mut().enumerate() {
                let x = _mm_loadu_si128(vals.add(s * hd + col + 8 * c) as *const __m128i);
                *vc = _mm256_cvtph_ps(x);
            }
            for (h, row) in acc.iter_mut().enumerate() {
                let w = *pp.add(h * ld + s);
                if DENSE || w != 0.0 {
                    let w = _mm256_set1_ps(w);
                    for (a, vc) in row.iter_mut().zip(&v) {
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(w, *vc));
                    }
                }
            }
        }
        for (h, row) in acc.iter().enumerate() {
            for (c, a) in row.iter().enumerate() {
                _mm256_storeu_ps(op.add(h * hd + col + 8 * c), *a);
            }
        }
    }
}

/// Most heads and column registers (8 columns each) of one pass of the f16 value sums: the
/// eight sums, two value registers, a broadcast weight and a product stay in registers (three
/// heads by four registers needed eighteen and passed one value through the stack).
const ACCUM_HEADS: usize = 4;
const ACCUM_COLS: usize = 2;

/// [`super::accum_f16`] on AVX2 (`hd` a multiple of 8): passes of up to [`ACCUM_HEADS`]
/// heads (evened out as the scores' passes are) and 16 columns; a pass whose heads have no
/// zero weight among the `n` slots (the bulk of a long context) runs without the test per
/// (slot, head).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum_f16(
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: *const f16,
    n: usize,
    out: &mut [f32],
) {
    let (pp, op) = (p.as_ptr(), out.as_mut_ptr());
    // SAFETY: sizes checked by the caller (hd a multiple of 8).
    unsafe {
        let mut h0 = 0;
        while h0 < nq {
            let (ph, oh) = (pp.add(h0 * ld), op.add(h0 * hd));
            let hn = pass_heads(nq - h0, ACCUM_HEADS);
            // No zero weight among the pass's heads: nothing to skip, no test per slot.
            // SAFETY (slices): the caller's rows of n probabilities, ld apart.
            let dense = (0..hn).all(|h| no_zero(std::slice::from_raw_parts(ph.add(h * ld), n)));
            for c0 in (0..hd / 8).step_by(ACCUM_COLS) {
                let col = 8 * c0;
                macro_rules! go {
                    ($h:literal, $d:literal) => {
                        match (hd / 8 - c0).min(ACCUM_COLS) {
                            1 => accum_pass::<$h, 1, $d>(ph, ld, hd, vals, n, col, oh),
                            _ => accum_pass::<$h, 2, $d>(ph, ld, hd, vals, n, col, oh),
                        }
                    };
                }
                match (hn, dense) {
                    (1, false) => go!(1, false),
                    (1, true) => go!(1, true),
                    (2, false) => go!(2, false),
                    (2, true) => go!(2, true),
                    (3, false) => go!(3, false),
                    (3, true) => go!(3, true),
                    (_, false) => go!(4, false),
                    (_, true) => go!(4, true),
                }
            }
            h0 += hn;
        }
    }
}

/// Whether no value of `x` is ±0.
#[target_feature(enable = "avx2")]
fn no_zero(x: &[f32]) -> bool {
    let mut z = _mm256_setzero_ps();
    let mut it = x.chunks_exact(8);
    for c in &mut it {
        // SAFETY: eight floats in c.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        z = _mm256_or_ps(z, _mm256_cmp_ps::<_CMP_EQ_OQ>(v, _mm256_setzero_ps()));
    }
    _mm256_movemask_ps(z) == 0 && it.remainder().iter().all(|&v| v != 0.0)
}

/// [`super::max_f32`] on AVX2: eight running maxima, then theirs (the maximum is exact; NaN
/// is passed over).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn max_f32(x: &[f32]) -> f32 {
    let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut it = x.chunks_exact(8);
    for c in &mut it {
        // SAFETY: eight floats in c.
        // `max(v, acc)` returns `acc` where `v` is NaN: NaN is passed over, as the scalar
        // code's `v > a` passes it over.
        acc = _mm256_max_ps(unsafe { _mm256_loadu_ps(c.as_ptr()) }, acc);
    }
    it.remainder()
        .iter()
        .fold(hmax8(acc), |m, &v| if v > m { v } else { m })
}

/// [`super::exp_shifted`] on AVX2: each `exp(x − shift)` by [`crate::quant::act`]'s
/// eight-lane form of [`super::exp`] (its operations in its order; NaN kept as the scalar
/// form keeps it), the sum taken in order as the scalar code takes it.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn exp_shifted(x: &mut [f32], shift: f32) -> f32 {
    let sh = _mm256_set1_ps(shift);
    let mut sum = 0.0f32;
    let mut it = x.chunks_exact_mut(8);
    for c in &mut it {
        // SAFETY: eight floats in c.
        let v = _mm256_sub_ps(unsafe { _mm256_loadu_ps(c.as_ptr()) }, sh);
        let e = crate::quant::act::x86::exp256(v);
        let e = _mm256_blendv_ps(e, v, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(c.as_mut_ptr(), e) };
        for &y in c.iter() {
            sum += y;
        }
    }
    for y in it.into_remainder() {
        *y = super::exp(*y - shift);
        sum += *y;
    }
    sum
}

/// [`super::silu_mul`] on AVX2: `g / (1 + exp(−g)) · u` with [`crate::quant::act`]'s
/// eight-lane form of [`super::exp`] and the scalar code's division and products in its
/// order, so each lane is the scalar tier's value (a NaN stays NaN through the division).
///
/// # Safety
/// AVX2 present; `g` and `u` have equal lengths.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn silu_mul(g: &mut [f32], u: &[f32]) {
    let (one, sign) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-0.0));
    let mut it = g.chunks_exact_mut(8);
    let mut ui = u.chunks_exact(8);
    for (c, b) in (&mut it).zip(&mut ui) {
        // SAFETY: eight floats in c and in b.
        unsafe {
            let x = _mm256_loadu_ps(c.as_ptr());
            let e = crate::quant::act::x86::exp256(_mm256_xor_ps(x, sign));
            let s = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(
                c.as_mut_ptr(),
                _mm256_mul_ps(s, _mm256_loadu_ps(b.as_ptr())),
            );
        }
    }
    for (a, &b) in it.into_remainder().iter_mut().zip(ui.remainder()) {
        *a = *a / (1.0 + super::exp(-*a)) * b;
    }
}

/// [`super::scale_f32`] on AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn scale_f32(x: &mut [f32], f: f32) {
    let s = _mm256_set1_ps(f);
    let mut it = x.chunks_exact_mut(8);
    for c in &mut it {
        // SAFETY: eight floats in c.
        unsafe {
            _mm256_storeu_ps(
                c.as_mut_ptr(),
                _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), s),
            )
        };
    }
    it.into_remainder().iter_mut().for_each(|v| *v *= f);
}
