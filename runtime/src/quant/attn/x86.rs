//! AVX-512 (and AVX2 conversion) kernels of [`super`]; each is checked against the scalar
//! reference there.

use std::arch::x86_64::*;

use half::f16;

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    let n = src.len();
    let (s, d) = (src.as_ptr() as *const u16, dst.as_mut_ptr());
    let mut i = 0;
    // SAFETY: equal lengths (caller); loads and stores stay below n.
    unsafe {
        while i + 8 <= n {
            let h = _mm_loadu_si128(s.add(i) as *const __m128i);
            _mm256_storeu_ps(d.add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
    }
    for j in i..n {
        dst[j] = src[j].to_f32();
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len();
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr() as *mut u16);
    let mut i = 0;
    // SAFETY: equal lengths (caller); loads and stores stay below n.
    unsafe {
        while i + 8 <= n {
            let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(s.add(i)));
            _mm_storeu_si128(d.add(i) as *mut __m128i, h);
            i += 8;
        }
    }
    for j in i..n {
        dst[j] = f16::from_f32(src[j]);
    }
}

/// exp(x): 0 below -104 (and for -inf), +inf above the f32 range.
#[target_feature(enable = "avx512f")]
#[inline]
fn exp512(x: __m512) -> __m512 {
    let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(-104.0));
    let x = _mm512_max_ps(x, _mm512_set1_ps(-104.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    // r = x - n·ln2 in two steps (Cody–Waite).
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
    // exp(r) on |r| ≤ ln2/2: Taylor coefficients to degree 6.
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 120.0));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 24.0));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 6.0));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
    _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n))
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len();
    let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    // SAFETY: equal lengths (caller); the tail uses a mask.
    unsafe {
        while i < n {
            let m = tail_mask(n - i);
            let x = _mm512_maskz_loadu_ps(m, gp.add(i));
            let e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
            let s = _mm512_div_ps(x, _mm512_add_ps(one, e));
            let r = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up.add(i)));
            _mm512_mask_storeu_ps(gp.add(i), m, r);
            i += 16;
        }
    }
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn exp_shifted(x: &mut [f32], shift: f32) -> f32 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let sh = _mm512_set1_ps(shift);
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    // SAFETY: accesses stay below n (the tail uses a mask).
    unsafe {
        while i < n {
            let m = tail_mask(n - i);
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            let e = exp512(_mm512_sub_ps(v, sh));
            _mm512_mask_storeu_ps(p.add(i), m, e);
            acc = _mm512_mask_add_ps(acc, m, acc, e);
            i += 16;
        }
    }
    _mm512_reduce_add_ps(acc)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn ld16h(p: *const f16) -> __m512 {
    // SAFETY: the caller guarantees 16 readable halves at p.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// Scores of `H` queries (`qp`, rows of `hd`) for the 16 slots of one key tile, lanes in
/// `m` stored at `op + j·ld`. `H` is a constant so that the accumulators stay in
/// registers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_tile<const H: usize>(
    qp: *const f32,
    hd: usize,
    tile: *const f16,
    sc: __m512,
    op: *mut f32,
    ld: usize,
    m: __mmask16,
) {
    // SAFETY: the caller guarantees H·hd floats at qp, a whole key tile at `tile` and the
    // stored lanes inside `op`'s rows.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); H];
        for d in 0..hd {
            let kd = ld16h(tile.add(d * 16));
            for (j, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_set1_ps(*qp.add(j * hd + d)), kd, *a);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(op.add(j * ld), m, _mm512_mul_ps(*a, sc));
        }
    }
}

/// Scores of up to 12 queries for the 16 slots of a key tile at a time: one load per
/// dimension gives that dimension of all 16 slots, so each score is one FMA chain over
/// the head dimensions in order (the same chain whatever the number of queries or
/// slots, which keeps prefill, decode and batched decode bit-identical).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores(
    q: &[f32],
    nq: usize,
    hd: usize,
    keys: *const f16,
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    let qp = q.as_ptr();
    let op = out.as_mut_ptr();
    let sc = _mm512_set1_ps(scale);
    // SAFETY: q holds nq·hd floats, keys the whole tiles of n slots, out (nq-1)·ld + n
    // floats (caller); lanes past n are never stored.
    unsafe {
        let mut s0 = 0;
        while s0 < n {
            let m = tail_mask(n - s0);
            let tile = keys.add(s0 * hd);
            let mut h0 = 0;
            while h0 < nq {
                let hn = (nq - h0).min(12);
                let (qh, oh) = (qp.add(h0 * hd), op.add(h0 * ld + s0));
                match hn {
                    1 => scores_tile::<1>(qh, hd, tile, sc, oh, ld, m),
                    2 => scores_tile::<2>(qh, hd, tile, sc, oh, ld, m),
                    3 => scores_tile::<3>(qh, hd, tile, sc, oh, ld, m),
                    4 => scores_tile::<4>(qh, hd, tile, sc, oh, ld, m),
                    5 => scores_tile::<5>(qh, hd, tile, sc, oh, ld, m),
                    6 => scores_tile::<6>(qh, hd, tile, sc, oh, ld, m),
                    7 => scores_tile::<7>(qh, hd, tile, sc, oh, ld, m),
                    8 => scores_tile::<8>(qh, hd, tile, sc, oh, ld, m),
                    9 => scores_tile::<9>(qh, hd, tile, sc, oh, ld, m),
                    10 => scores_tile::<10>(qh, hd, tile, sc, oh, ld, m),
                    11 => scores_tile::<11>(qh, hd, tile, sc, oh, ld, m),
                    _ => scores_tile::<12>(qh, hd, tile, sc, oh, ld, m),
                }
                h0 += hn;
            }
            s0 += 16;
        }
    }
}

/// One group of 32 query values rounded to bytes (`x · inv`, halves to even, as the
/// scalar reference); returns the sum of the bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn quantize_group(x: &[f32], inv: f32, q: &mut [i8]) -> i32 {
    // SAFETY: 32 values in x and q (caller).
    unsafe {
        let s = _mm512_set1_ps(inv);
        let a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x.as_ptr()), s));
        let b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(16)), s));
        // |x · inv| ≤ 127 (x's group maximum is 127 / inv): the narrowing keeps the values.
        _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(a));
        _mm_storeu_si128(
            q.as_mut_ptr().add(16) as *mut __m128i,
            _mm512_cvtepi32_epi8(b),
        );
        _mm512_reduce_add_epi32(_mm512_add_epi32(a, b))
    }
}

/// Integer scores of `H` quantized queries for the 16 slots of one Q8_0 key tile (layout
/// [`super::key_index_q8`]), lanes in `m` stored at `op + j·ld`: per group of 32
/// dimensions, 8 `vpdpbusd` of the tile's bytes flipped to unsigned (`k + 128`) against
/// each query's 4 bytes, from the query's offset `−128 · Σ q` (so the sum is the exact
/// signed dot product), then one FMA by `d_key · d_query`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_tile_q8<const H: usize>(
    q: &super::QueryQ8<'_>,
    h0: usize,
    hd: usize,
    keys: *const i8,
    scales: *const f16,
    sc: __m512,
    op: *mut f32,
    ld: usize,
    m: __mmask16,
) {
    let groups = hd / super::Q8_GROUP;
    let flip = _mm512_set1_epi8(i8::MIN);
    let (qq, qd, qo) = (q.quants.as_ptr(), q.scales.as_ptr(), q.offsets.as_ptr());
    // SAFETY: the caller guarantees heads h0..h0 + H of `q`, a whole key tile and its
    // scales at `keys` and `scales`, and the stored lanes inside `op`'s rows.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); H];
        for g in 0..groups {
            let mut part = [_mm512_setzero_si512(); H];
            for (j, p) in part.iter_mut().enumerate() {
                *p = _mm512_set1_epi32(*qo.add((h0 + j) * groups + g));
            }
            for quad in 0..super::Q8_GROUP / 4 {
                let k = _mm512_loadu_si512(keys.add((g * 8 + quad) * 64) as *const __m512i);
                let ku = _mm512_xor_si512(k, flip);
                for (j, p) in part.iter_mut().enumerate() {
                    let w = (qq.add((h0 + j) * hd + g * super::Q8_GROUP + quad * 4) as *const i32)
                        .read_unaligned();
                    *p = _mm512_dpbusd_epi32(*p, ku, _mm512_set1_epi32(w));
                }
            }
            let dk = ld16h(scales.add(g * 16));
            for (j, (a, p)) in acc.iter_mut().zip(&part).enumerate() {
                let w = _mm512_mul_ps(dk, _mm512_set1_ps(*qd.add((h0 + j) * groups + g)));
                *a = _mm512_fmadd_ps(w, _mm512_cvtepi32_ps(*p), *a);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(op.add(j * ld), m, _mm512_mul_ps(*a, sc));
        }
    }
}

/// [`super::scores_q8_0`] on AVX-512 VNNI: up to 12 queries per pass over a key tile.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_q8(
    q: &super::QueryQ8<'_>,
    nq: usize,
    hd: usize,
    keys: &[i8],
    scales: &[f16],
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    let groups = hd / super::Q8_GROUP;
    let op = out.as_mut_ptr();
    let sc = _mm512_set1_ps(scale);
    // SAFETY: q holds nq heads, keys and scales the whole tiles of n slots, out
    // (nq-1)·ld + n floats (caller); lanes past n are never stored.
    unsafe {
        let mut s0 = 0;
        while s0 < n {
            let m = tail_mask(n - s0);
            let (kt, dt) = (keys.as_ptr().add(s0 * hd), scales.as_ptr().add(s0 * groups));
            let mut h0 = 0;
            while h0 < nq {
                let hn = (nq - h0).min(12);
                let oh = op.add(h0 * ld + s0);
                match hn {
                    1 => scores_tile_q8::<1>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    2 => scores_tile_q8::<2>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    3 => scores_tile_q8::<3>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    4 => scores_tile_q8::<4>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    5 => scores_tile_q8::<5>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    6 => scores_tile_q8::<6>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    7 => scores_tile_q8::<7>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    8 => scores_tile_q8::<8>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    9 => scores_tile_q8::<9>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    10 => scores_tile_q8::<10>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    11 => scores_tile_q8::<11>(q, h0, hd, kt, dt, sc, oh, ld, m),
                    _ => scores_tile_q8::<12>(q, h0, hd, kt, dt, sc, oh, ld, m),
                }
                h0 += hn;
            }
            s0 += 16;
        }
    }
}

/// The `H × C` output registers of a value-sum pass: `C` chunks of 16 columns from `col` of
/// each of `H` output rows of `hd` floats.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_out<const H: usize, const C: usize>(
    op: *const f32,
    hd: usize,
    col: usize,
) -> [[__m512; C]; H] {
    let mut acc = [[_mm512_setzero_ps(); C]; H];
    for (h, row) in acc.iter_mut().enumerate() {
        for (c, a) in row.iter_mut().enumerate() {
            // SAFETY: the caller guarantees the H rows' columns col..col + 16·C.
            *a = unsafe { _mm512_loadu_ps(op.add(h * hd + col + 16 * c)) };
        }
    }
    acc
}

/// Stores what [`load_out`] loaded.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_out<const H: usize, const C: usize>(
    acc: &[[__m512; C]; H],
    op: *mut f32,
    hd: usize,
    col: usize,
) {
    for (h, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            // SAFETY: as in `load_out`.
            unsafe { _mm512_storeu_ps(op.add(h * hd + col + 16 * c), *a) };
        }
    }
}

/// `out_h += Σ_s p_h[s] · v_s` for `H` heads and `C` chunks of 16 columns from column
/// `col` of f16 value rows: accumulators in registers, one FMA chain over the slots in
/// order per value.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_tile<const H: usize, const C: usize>(
    pp: *const f32,
    ld: usize,
    hd: usize,
    vp: *const f16,
    n: usize,
    col: usize,
    op: *mut f32,
) {
    // SAFETY: the caller guarantees H rows of probabilities (stride ld, n each), n value
    // rows of hd halves and H output rows of hd floats, columns col..col + 16·C inside.
    unsafe {
        let mut acc = load_out::<H, C>(op, hd, col);
        for s in 0..n {
            let mut v = [_mm512_setzero_ps(); C];
            for (c, vc) in v.iter_mut().enumerate() {
                *vc = ld16h(vp.add(s * hd + col + 16 * c));
            }
            for (h, row) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(*pp.add(h * ld + s));
                for (a, vc) in row.iter_mut().zip(&v) {
                    *a = _mm512_fmadd_ps(w, *vc, *a);
                }
            }
        }
        store_out(&acc, op, hd, col);
    }
}

/// `out_h += Σ_s p_h[s] · v_s`, one FMA chain over the slots in order per output value,
/// up to six heads and 64 columns per pass (24 accumulators, 4 value registers and a
/// broadcast: each widened value row serves six heads).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum(
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: *const f16,
    n: usize,
    out: &mut [f32],
) {
    let pp = p.as_ptr();
    let op = out.as_mut_ptr();
    // SAFETY: sizes checked by the caller (hd a multiple of 16).
    unsafe {
        for Pass {
            col,
            chunks,
            h0,
            hn,
        } in passes(hd, nq)
        {
            let (ph, oh) = (pp.add(h0 * ld), op.add(h0 * hd));
            macro_rules! go {
                ($h:literal) => {
                    match chunks {
                        1 => accum_tile::<$h, 1>(ph, ld, hd, vals, n, col, oh),
                        2 => accum_tile::<$h, 2>(ph, ld, hd, vals, n, col, oh),
                        3 => accum_tile::<$h, 3>(ph, ld, hd, vals, n, col, oh),
                        _ => accum_tile::<$h, 4>(ph, ld, hd, vals, n, col, oh),
                    }
                };
            }
            match hn {
                1 => go!(1),
                2 => go!(2),
                3 => go!(3),
                4 => go!(4),
                5 => go!(5),
                _ => go!(6),
            }
        }
    }
}

/// One pass of the value sums: columns `col..col + 16·chunks` of heads `h0..h0 + hn`.
struct Pass {
    col: usize,
    chunks: usize,
    h0: usize,
    hn: usize,
}

/// The passes of the value sums over `nq` heads of `hd` columns: up to 64 columns (4
/// chunks of 16) and six heads each, columns outermost.
fn passes(hd: usize, nq: usize) -> impl Iterator<Item = Pass> {
    (0..hd / 16).step_by(4).flat_map(move |c0| {
        (0..nq).step_by(6).map(move |h0| Pass {
            col: 16 * c0,
            chunks: (hd / 16 - c0).min(4),
            h0,
            hn: (nq - h0).min(6),
        })
    })
}

/// 16 slots' weights `p · d` of one group (lanes outside `m` zero).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn weights16(p: *const f32, d: *const f16, m: __mmask16) -> __m512 {
    // SAFETY: the caller guarantees the lanes in `m` readable at p and d.
    unsafe {
        let d16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, d as *const i16));
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), d16)
    }
}

/// Key tiles per block of [`accum_q8`]: the weights of a block's tiles are all computed
/// before its sums, so that no sum waits on the weights it has just asked for.
const BLOCK_TILES: usize = 8;

/// The horizontal maxima of eight vectors, as lanes: vector `j`'s maximum in lane
/// [`max8_lane`]`(j)` (the other eight lanes repeat them).
#[target_feature(enable = "avx512f")]
#[inline]
fn max8(v: &[__m512]) -> __m512 {
    // Halves of 128-bit lanes: [max(a0, a2), max(a1, a3), max(b0, b2), max(b1, b3)] per pair.
    let mut x = [_mm512_setzero_ps(); 4];
    for (i, xi) in x.iter_mut().enumerate() {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        *xi = _mm512_max_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        );
    }
    // One 128-bit lane of four partial maxima per vector: vectors 0–3, then 4–7.
    let y0 = _mm512_max_ps(
        _mm512_shuffle_f32x4::<0x88>(x[0], x[1]),
        _mm512_shuffle_f32x4::<0xDD>(x[0], x[1]),
    );
    let y1 = _mm512_max_ps(
        _mm512_shuffle_f32x4::<0x88>(x[2], x[3]),
        _mm512_shuffle_f32x4::<0xDD>(x[2], x[3]),
    );
    // Inside each 128-bit lane k: [y0's, y1's, y0's, y1's] pairs, then the last swap.
    let t = _mm512_max_ps(_mm512_unpacklo_ps(y0, y1), _mm512_unpackhi_ps(y0, y1));
    _mm512_max_ps(t, _mm512_shuffle_ps::<0x4E>(t, t))
}

/// The lane of [`max8`] that holds vector `j`'s maximum.
const fn max8_lane(j: usize) -> usize {
    (j % 4) * 4 + j / 4
}

/// One block (up to [`BLOCK_TILES`] key tiles: `n` ≤ 128 slots) of [`super::accum_q8_0`]
/// for `H` heads and `C` chunks of 16 columns from `col` (a multiple of 64, so the chunks
/// lie in at most two groups). First the weights of every tile, head and group: `p · d`,
/// their tile maxima `W` eight at a time ([`max8`]), one division for all the `32767 / W`
/// and one for all the `W / 32767`, the 16-bit weights into a stack buffer. Then per tile
/// and pair of slots one widened 32-byte load per chunk and one `vpdpwssd` per head and
/// chunk, and `out += (W / 32767) · Σ`. Each output takes the tiles in order, as the scalar
/// chain does.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_block_q8<const H: usize, const C: usize>(
    pp: *const f32,
    ld: usize,
    hd: usize,
    vals: *const i8,
    scales: *const f16,
    n: usize,
    col: usize,
    op: *mut f32,
) {
    const { assert!(super::Q8_RUN == 16, "a run is one key tile") };
    const { assert!(2 * H <= 16, "two blocks of eight weight rows") };
    let (g0, groups) = (col / super::Q8_GROUP, hd / super::Q8_GROUP);
    let tiles = n.div_ceil(16);
    let mut u = [[[[0i16; 16]; 2]; H]; BLOCK_TILES];
    let mut back = [[[0.0f32; 2]; H]; BLOCK_TILES];
    // SAFETY: the caller guarantees H rows of probabilities (stride ld, n each), the slot
    // pairs covering n slots at `vals` with their tiles' scales at `scales`, and H output
    // rows of hd floats, columns col..col + 16·C inside; loads past n are masked off.
    unsafe {
        let (big, zero) = (_mm512_set1_ps(super::W16), _mm512_setzero_ps());
        for t in 0..tiles {
            let m = tail_mask(n - 16 * t);
            // Row j = 2·head + group of the pass (a pass with one group leaves the odd rows
            // zero). Lanes past n weigh 0 (masked loads), below every weight.
            let mut w = [zero; 16];
            for h in 0..H {
                for gi in 0..C.div_ceil(2) {
                    let d = scales.add(16 * t * groups + (g0 + gi) * 16);
                    w[2 * h + gi] = weights16(pp.add(h * ld + 16 * t), d, m);
                }
            }
            let (mut inv, mut bk) = ([[0.0f32; 16]; 2], [[0.0f32; 16]; 2]);
            for (half, (iv, b)) in inv.iter_mut().zip(bk.iter_mut()).enumerate() {
                if 8 * half >= 2 * H {
                    break;
                }
                let mx = max8(&w[8 * half..8 * half + 8]);
                // Exact divisions lane by lane, as the scalar chain's; 0 where W is 0.
                let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(mx, zero);
                _mm512_storeu_ps(iv.as_mut_ptr(), _mm512_maskz_div_ps(pos, big, mx));
                _mm512_storeu_ps(b.as_mut_ptr(), _mm512_div_ps(mx, big));
            }
            for h in 0..H {
                for gi in 0..C.div_ceil(2) {
                    let j = 2 * h + gi;
                    let l = max8_lane(j % 8);
                    let s = _mm512_set1_ps(inv[j / 8][l]);
                    let q = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(w[j], s)));
                    _mm256_storeu_si256(u[t][h][gi].as_mut_ptr() as *mut __m256i, q);
                    back[t][h][gi] = bk[j / 8][l];
                }
            }
        }
        for t in 0..tiles {
            let mut acc = [[_mm512_setzero_si512(); C]; H];
            for sp in 0..(n - 16 * t).min(16).div_ceil(2) {
                let row = vals.add((16 * t + 2 * sp) * hd + col * 2);
                let mut v = [_mm512_setzero_si512(); C];
                for (c, vc) in v.iter_mut().enumerate() {
                    *vc =
                        _mm512_cvtepi8_epi16(_mm256_loadu_si256(row.add(32 * c) as *const __m256i));
                }
                for (accs, uh) in acc.iter_mut().zip(&u[t]) {
                    // The pair's two weights of each group as one 32-bit lane.
                    let b0 = _mm512_set1_epi32(
                        (uh[0].as_ptr().add(2 * sp) as *const i32).read_unaligned(),
                    );
                    let b1 = if C > 2 {
                        _mm512_set1_epi32(
                            (uh[1].as_ptr().add(2 * sp) as *const i32).read_unaligned(),
                        )
                    } else {
                        b0
                    };
                    for (c, (a, vc)) in accs.iter_mut().zip(&v).enumerate() {
                        *a = _mm512_dpwssd_epi32(*a, *vc, if c < 2 { b0 } else { b1 });
                    }
                }
            }
            for (h, accs) in acc.iter().enumerate() {
                for (c, a) in accs.iter().enumerate() {
                    let o = op.add(h * hd + col + 16 * c);
                    let sum = _mm512_cvtepi32_ps(*a);
                    _mm512_storeu_ps(
                        o,
                        _mm512_fmadd_ps(_mm512_set1_ps(back[t][h][c / 2]), sum, _mm512_loadu_ps(o)),
                    );
                }
            }
        }
    }
}

/// The first `k` of 16 lanes (all for `k` ≥ 16).
#[inline]
fn tail_mask(k: usize) -> __mmask16 {
    if k >= 16 { 0xFFFF } else { (1u16 << k) - 1 }
}

/// [`super::accum_q8_0`] on AVX-512 VNNI: blocks of up to [`BLOCK_TILES`] runs of
/// [`super::Q8_RUN`] slots, each block in passes of up to six heads and 64 columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
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
    let groups = hd / super::Q8_GROUP;
    let op = out.as_mut_ptr();
    // SAFETY: sizes checked by the caller (hd a multiple of 32; the slot pairs and whole
    // tiles' scales of n slots).
    unsafe {
        let mut r0 = 0;
        while r0 < n {
            let rn = (n - r0).min(BLOCK_TILES * super::Q8_RUN);
            let (pr, vr) = (p.as_ptr().add(r0), vals.as_ptr().add(r0 * hd));
            let dr = scales.as_ptr().add(r0 * groups);
            for Pass {
                col,
                chunks,
                h0,
                hn,
            } in passes(hd, nq)
            {
                let (ph, oh) = (pr.add(h0 * ld), op.add(h0 * hd));
                macro_rules! go {
                    ($h:literal) => {
                        match chunks {
                            1 => accum_block_q8::<$h, 1>(ph, ld, hd, vr, dr, rn, col, oh),
                            2 => accum_block_q8::<$h, 2>(ph, ld, hd, vr, dr, rn, col, oh),
                            3 => accum_block_q8::<$h, 3>(ph, ld, hd, vr, dr, rn, col, oh),
                            _ => accum_block_q8::<$h, 4>(ph, ld, hd, vr, dr, rn, col, oh),
                        }
                    };
                }
                match hn {
                    1 => go!(1),
                    2 => go!(2),
                    3 => go!(3),
                    4 => go!(4),
                    5 => go!(5),
                    _ => go!(6),
                }
            }
            r0 += rn;
        }
    }
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scale_f32(x: &mut [f32], f: f32) {
    let (n, p) = (x.len(), x.as_mut_ptr());
    let s = _mm512_set1_ps(f);
    let mut i = 0;
    // SAFETY: accesses stay below n (the tail uses a mask).
    unsafe {
        while i < n {
            let m = tail_mask(n - i);
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            _mm512_mask_storeu_ps(p.add(i), m, _mm512_mul_ps(v, s));
            i += 16;
        }
    }
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn min_max_u32(x: &[u32]) -> (u32, u32) {
    let (n, p) = (x.len(), x.as_ptr());
    let (mut lo, mut hi) = (_mm512_set1_epi32(-1), _mm512_setzero_si512());
    let mut i = 0;
    // SAFETY: loads stay below n (the tail uses a mask; masked lanes keep the accumulators).
    unsafe {
        while i < n {
            let m = tail_mask(n - i);
            let v = _mm512_maskz_loadu_epi32(m, p.add(i) as *const i32);
            lo = _mm512_mask_min_epu32(lo, m, lo, v);
            hi = _mm512_mask_max_epu32(hi, m, hi, v);
            i += 16;
        }
    }
    (_mm512_reduce_min_epu32(lo), _mm512_reduce_max_epu32(hi))
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn max_f32(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let mut acc = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY: loads stay below n (the tail uses a mask).
    unsafe {
        while i < n {
            let m = tail_mask(n - i);
            acc = _mm512_mask_max_ps(acc, m, acc, _mm512_maskz_loadu_ps(m, p.add(i)));
            i += 16;
        }
    }
    _mm512_reduce_max_ps(acc)
}
