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
            let m: __mmask16 = if n - i >= 16 {
                0xFFFF
            } else {
                (1u16 << (n - i)) - 1
            };
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
            let m: __mmask16 = if n - i >= 16 {
                0xFFFF
            } else {
                (1u16 << (n - i)) - 1
            };
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

/// 16 signed bytes widened to f32 (exactly).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn ld16b(p: *const i8) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))) }
}

/// Where a head's cached keys or values start: f16 values (`h`), or Q8_0 quants (`q`) and
/// their f16 scales (`d`). Only the pointers of the kernel's format are read; the others
/// are null.
#[derive(Clone, Copy)]
pub(super) struct Src {
    pub h: *const f16,
    pub q: *const i8,
    pub d: *const f16,
}

impl Src {
    pub(super) fn f16(h: &[f16]) -> Self {
        Src {
            h: h.as_ptr(),
            q: std::ptr::null(),
            d: std::ptr::null(),
        }
    }

    pub(super) fn q8_0(q: &[i8], d: &[f16]) -> Self {
        Src {
            h: std::ptr::null(),
            q: q.as_ptr(),
            d: d.as_ptr(),
        }
    }
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
            let nv = (n - s0).min(16);
            let m: __mmask16 = if nv == 16 { 0xFFFF } else { (1u16 << nv) - 1 };
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
            let nv = (n - s0).min(16);
            let m: __mmask16 = if nv == 16 { 0xFFFF } else { (1u16 << nv) - 1 };
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
    vp: Src,
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
                *vc = ld16h(vp.h.add(s * hd + col + 16 * c));
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

/// The same over Q8_0 value rows (`col` a multiple of 64, so the `C` chunks lie in at most
/// two groups of 32): for each tile of 16 slots, each head's probabilities times the slots'
/// scales of a group (`w = p · d`, one product per slot, head and group), then per slot
/// and value `acc += w · q`: one FMA chain over the slots in order per value.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_tile_q8<const H: usize, const C: usize>(
    pp: *const f32,
    ld: usize,
    hd: usize,
    vp: Src,
    n: usize,
    col: usize,
    op: *mut f32,
) {
    // SAFETY: the caller guarantees H rows of probabilities (stride ld, n each), n value
    // rows of hd bytes with the scales of their tiles, and H output rows of hd floats,
    // columns col..col + 16·C inside; the loads past n are masked off.
    unsafe {
        let mut acc = load_out::<H, C>(op, hd, col);
        let groups = hd / super::Q8_GROUP;
        let g0 = col / super::Q8_GROUP;
        let mut w = [[[0.0f32; 16]; 2]; H];
        let mut s0 = 0;
        while s0 < n {
            let nv = (n - s0).min(16);
            let m: __mmask16 = if nv == 16 { 0xFFFF } else { (1u16 << nv) - 1 };
            for gi in 0..C.div_ceil(2) {
                let dp = vp.d.add(s0 * groups + (g0 + gi) * 16) as *const i16;
                let d16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dp));
                for (h, wh) in w.iter_mut().enumerate() {
                    let p16 = _mm512_maskz_loadu_ps(m, pp.add(h * ld + s0));
                    _mm512_storeu_ps(wh[gi].as_mut_ptr(), _mm512_mul_ps(p16, d16));
                }
            }
            for s in 0..nv {
                let mut v = [_mm512_setzero_ps(); C];
                for (c, vc) in v.iter_mut().enumerate() {
                    *vc = ld16b(vp.q.add((s0 + s) * hd + col + 16 * c));
                }
                for (h, row) in acc.iter_mut().enumerate() {
                    for (c, (a, vc)) in row.iter_mut().zip(&v).enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(w[h][c / 2][s]), *vc, *a);
                    }
                }
            }
            s0 += 16;
        }
        store_out(&acc, op, hd, col);
    }
}

/// `out_h += Σ_s p_h[s] · v_s`, one FMA chain over the slots in order per output value,
/// up to six heads and 64 columns per pass (24 accumulators, 4 value registers and a
/// broadcast: each widened value row serves six heads).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn accum<const Q8: bool>(
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: Src,
    n: usize,
    out: &mut [f32],
) {
    let vp = vals;
    let pp = p.as_ptr();
    let op = out.as_mut_ptr();
    // SAFETY: sizes checked by the caller (hd a multiple of 16, of 32 for Q8_0).
    unsafe {
        let mut c0 = 0;
        while c0 < hd / 16 {
            let chunks = (hd / 16 - c0).min(4);
            let col = 16 * c0;
            let mut h0 = 0;
            while h0 < nq {
                let hn = (nq - h0).min(6);
                let (ph, oh) = (pp.add(h0 * ld), op.add(h0 * hd));
                macro_rules! go {
                    ($h:literal) => {
                        match (Q8, chunks) {
                            (false, 1) => accum_tile::<$h, 1>(ph, ld, hd, vp, n, col, oh),
                            (false, 2) => accum_tile::<$h, 2>(ph, ld, hd, vp, n, col, oh),
                            (false, 3) => accum_tile::<$h, 3>(ph, ld, hd, vp, n, col, oh),
                            (false, _) => accum_tile::<$h, 4>(ph, ld, hd, vp, n, col, oh),
                            (true, 1) => accum_tile_q8::<$h, 1>(ph, ld, hd, vp, n, col, oh),
                            (true, 2) => accum_tile_q8::<$h, 2>(ph, ld, hd, vp, n, col, oh),
                            (true, 3) => accum_tile_q8::<$h, 3>(ph, ld, hd, vp, n, col, oh),
                            (true, _) => accum_tile_q8::<$h, 4>(ph, ld, hd, vp, n, col, oh),
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
                h0 += hn;
            }
            c0 += chunks;
        }
    }
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
            let m: __mmask16 = if n - i >= 16 {
                0xFFFF
            } else {
                (1u16 << (n - i)) - 1
            };
            acc = _mm512_mask_max_ps(acc, m, acc, _mm512_maskz_loadu_ps(m, p.add(i)));
            i += 16;
        }
    }
    _mm512_reduce_max_ps(acc)
}
