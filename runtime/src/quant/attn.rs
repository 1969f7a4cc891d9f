//! Attention kernels: scores of query heads against f16 keys, the maximum and shifted
//! exponentials of a score row (softmax), value accumulation, f16 ⇄ f32 conversion of cache
//! rows, and the SwiGLU gate. The blocked online-softmax attention built on them is
//! [`crate::model::attention`]. Scalar reference everywhere; AVX-512 kernels when
//! the tier has them (other tiers run the scalar code, which is the reference).
//!
//! Numerics: queries, scores, probabilities and outputs are f32; keys and values are the
//! f16 values of the KV cache widened exactly. Scores and value sums are accumulated in f32
//! (the SIMD tiers in a different order than the reference), softmax subtracts the row
//! maximum before exponentiating. The scalar tier's exponential is [`exp`], the project's
//! own (plain f32 operations, the same bits on every platform and in the OpenCL kernels);
//! the AVX-512 `exp` is a degree-6 polynomial after range reduction with `vscalefps`,
//! within 2 ulp of the exact value over the softmax range.

use half::f16;

use super::{Isa, Tier, resolve};

/// Widens f16 values (`src.len() == dst.len()`).
///
/// # Panics
/// If the lengths differ.
pub fn f16_to_f32(isa: Isa, src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2-capable tiers have F16C; equal lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { x86::f16_to_f32(src, dst) },
        _ => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = s.to_f32();
            }
        }
    }
}

/// Rounds f32 values to f16 (nearest even; identical bits on every tier).
///
/// # Panics
/// If the lengths differ.
pub fn f32_to_f16(isa: Isa, src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2-capable tiers have F16C; equal lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { x86::f32_to_f16(src, dst) },
        _ => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = f16::from_f32(*s);
            }
        }
    }
}

/// The constants of [`exp`], shared with the SIMD forms that must return its bits
/// ([`super::act`]).
pub(super) mod exp_consts {
    pub const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b);
    pub const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    pub const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    pub const C2: f32 = f32::from_bits(0x3f00_0000);
    pub const C3: f32 = f32::from_bits(0x3e2a_aaab);
    pub const C4: f32 = f32::from_bits(0x3d2a_aaab);
    pub const C5: f32 = f32::from_bits(0x3c08_8889);
    pub const C6: f32 = f32::from_bits(0x3ab6_0b61);
    pub const C7: f32 = f32::from_bits(0x3950_0d01);
}

/// `e^x` in single precision by one fixed sequence of IEEE-754 additions, subtractions and
/// multiplications (no fused multiply-add, no platform `libm`), so that the CPU's scalar tier
/// and the OpenCL kernels (`pp_exp` in `kernels/common.cl`, the same steps and constants) get
/// the same bits on every platform; a device's own `exp()` or the host's `expf` need not
/// round alike (PoCL's `exp` and glibc's `expf` differ by an ulp on about one argument in ten).
///
/// Steps: `k = rint(x · log₂e)`, `r = (x − k·ln2_hi) − k·ln2_lo` (Cody–Waite: `k·ln2_hi` is
/// exact), `p = 1 + (r + r² · q(r))` with `q` the Taylor polynomial of `(eʳ − 1 − r)/r²` to
/// degree 5 (Horner), then `p · 2ᵏ` (2ᵏ built from its exponent bits). Within 2 ulp of the
/// exact value (tested). `x < −87` gives 0 (results below e⁻⁸⁷ ≈ 1.6·10⁻³⁸ would be
/// subnormal, which GPUs may flush), `x > 88.8` gives +∞, NaN gives NaN.
pub fn exp(x: f32) -> f32 {
    use exp_consts::*;
    if x.is_nan() {
        return x;
    }
    if x < -87.0 {
        return 0.0;
    }
    if x > 88.8 {
        return f32::INFINITY;
    }
    let kf = (x * LOG2E).round_ties_even();
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    let q = C2 + r * (C3 + r * (C4 + r * (C5 + r * (C6 + r * C7))));
    let p = 1.0 + (r + (r * r) * q);
    // |x| ≤ 88.8: k in −126..=128.
    let k = kf as i32;
    if k > 127 {
        p * f32::from_bits(254 << 23) * 2.0
    } else {
        p * f32::from_bits(((k + 127) as u32) << 23)
    }
}

/// `x[i] = exp(x[i] - shift)`; returns the sum of the results.
pub fn exp_shifted(isa: Isa, x: &mut [f32], shift: f32) -> f32 {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { x86::exp_shifted(x, shift) },
        _ => {
            let mut sum = 0.0f32;
            for v in x.iter_mut() {
                *v = exp(*v - shift);
                sum += *v;
            }
            sum
        }
    }
}

/// The largest value of `x` (−∞ when empty). Exact, so every tier returns the same value.
pub fn max_f32(isa: Isa, x: &[f32]) -> f32 {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { x86::max_f32(x) },
        _ => {
            // Eight running maxima (independent chains), then their maximum.
            let mut m = [f32::NEG_INFINITY; 8];
            let mut it = x.chunks_exact(8);
            for c in &mut it {
                for (a, &v) in m.iter_mut().zip(c) {
                    if v > *a {
                        *a = v;
                    }
                }
            }
            let mut r = it
                .remainder()
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max);
            for a in m {
                r = r.max(a);
            }
            r
        }
    }
}

/// `g[i] = silu(g[i]) · u[i]` with `silu(x) = x / (1 + exp(-x))` (the SwiGLU gate).
///
/// # Panics
/// If the lengths differ.
pub fn silu_mul(isa: Isa, g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "silu_mul: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected; equal lengths checked above.
        Tier::Avx512 { .. } => unsafe { x86::silu_mul(g, u) },
        _ => {
            for (a, &b) in g.iter_mut().zip(u) {
                *a = *a / (1.0 + exp(-*a)) * b;
            }
        }
    }
}

/// Asks the caches for the lines of `x` ahead of use (into L2 and outward): a hint with no
/// effect on results. Attention calls it on a key tile's value rows (heads wider than 64)
/// before the tile's scores, so that the rows, read later a few columns at a time, arrive
/// while the scores are computed.
pub fn prefetch(x: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        let p = x.as_ptr() as *const i8;
        let bytes = std::mem::size_of_val(x);
        let mut off = 0;
        while off < bytes {
            // SAFETY: `p + off` lies inside `x`; a prefetch never faults nor writes.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Slots per key tile of the KV cache's key layout.
pub const KEY_TILE: usize = 16;

/// Index of dimension `d` of slot `s` in keys stored in tiles of [`KEY_TILE`] slots,
/// dimension-major inside a tile (`[s / 16][d][s % 16]`, head size `hd`): the 16 slots' values
/// of one dimension are adjacent, so a SIMD lane per slot needs no transposition.
pub const fn key_index(hd: usize, s: usize, d: usize) -> usize {
    (s / KEY_TILE) * KEY_TILE * hd + d * KEY_TILE + s % KEY_TILE
}

/// Scores of `nq` query heads (`q`: `nq × hd`, contiguous) against the first `n` keys
/// (`keys`: whole key tiles, see [`key_index`]), times `scale`:
/// `out[h * ld + s] = scale · q_h · k_s`. Each score is one chain over the dimensions in
/// order, the same whatever `nq` and `n`.
///
/// # Panics
/// If a slice is too short (`keys` must hold the whole tiles of the `n` slots).
#[allow(clippy::too_many_arguments)]
pub fn scores_f16(
    isa: Isa,
    q: &[f32],
    nq: usize,
    hd: usize,
    keys: &[f16],
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    assert!(
        q.len() >= nq * hd && keys.len() >= n.next_multiple_of(KEY_TILE) * hd,
        "scores_f16: inputs too short"
    );
    assert!(
        nq == 0 || out.len() >= (nq - 1) * ld + n,
        "scores_f16: output too short"
    );
    assert!(ld >= n, "scores_f16: leading dimension {ld} < {n}");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 detected; sizes checked above.
        Tier::Avx512 { .. } => unsafe { x86::scores_f16(q, nq, hd, keys, n, scale, out, ld) },
        _ => {
            for s in 0..n {
                for h in 0..nq {
                    let qh = &q[h * hd..(h + 1) * hd];
                    let mut acc = 0.0f32;
                    for (d, a) in qh.iter().enumerate() {
                        acc += a * keys[key_index(hd, s, d)].to_f32();
                    }
                    out[h * ld + s] = acc * scale;
                }
            }
        }
    }
}

/// `out_h += Σ_s p[h * ld + s] · v_s` over the first `n` value rows (`vals`: `n × hd` f16) for
/// `nq` heads (`out`: `nq × hd`).
///
/// # Panics
/// If a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn accum_f16(
    isa: Isa,
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: &[f16],
    n: usize,
    out: &mut [f32],
) {
    assert!(
        vals.len() >= n * hd && out.len() >= nq * hd,
        "accum_f16: too short"
    );
    assert!(
        nq == 0 || p.len() >= (nq - 1) * ld + n,
        "accum_f16: probabilities too short"
    );
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 detected; sizes checked above.
        Tier::Avx512 { .. } if hd.is_multiple_of(16) => unsafe {
            x86::accum_f16(p, ld, nq, hd, vals, n, out)
        },
        _ => {
            for s in 0..n {
                let v = &vals[s * hd..(s + 1) * hd];
                for h in 0..nq {
                    let w = p[h * ld + s];
                    if w != 0.0 {
                        for (o, x) in out[h * hd..(h + 1) * hd].iter_mut().zip(v) {
                            *o += w * x.to_f32();
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // register tiles indexed by head and chunk
mod x86 {
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
    pub(super) unsafe fn scores_f16(
        q: &[f32],
        nq: usize,
        hd: usize,
        keys: &[f16],
        n: usize,
        scale: f32,
        out: &mut [f32],
        ld: usize,
    ) {
        let qp = q.as_ptr();
        let kp = keys.as_ptr();
        let op = out.as_mut_ptr();
        let sc = _mm512_set1_ps(scale);
        // SAFETY: q holds nq·hd floats, keys the whole tiles of n slots, out (nq-1)·ld + n
        // floats (caller); lanes past n are never stored.
        unsafe {
            let mut s0 = 0;
            while s0 < n {
                let nv = (n - s0).min(16);
                let m: __mmask16 = if nv == 16 { 0xFFFF } else { (1u16 << nv) - 1 };
                let tile = kp.add(s0 * hd);
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

    /// `out_h += Σ_s p_h[s] · v_s` for `H` heads and `C` chunks of 16 columns from column
    /// `col`: accumulators in registers, one FMA chain over the slots in order per value.
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
            let mut acc = [[_mm512_setzero_ps(); C]; H];
            for (h, row) in acc.iter_mut().enumerate() {
                for (c, a) in row.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(op.add(h * hd + col + 16 * c));
                }
            }
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
            for (h, row) in acc.iter().enumerate() {
                for (c, a) in row.iter().enumerate() {
                    _mm512_storeu_ps(op.add(h * hd + col + 16 * c), *a);
                }
            }
        }
    }

    /// `out_h += Σ_s p_h[s] · v_s`, one FMA chain over the slots in order per output value,
    /// up to six heads and 64 columns per pass (24 accumulators, 4 value registers and a
    /// broadcast: each widened value row serves six heads).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn accum_f16(
        p: &[f32],
        ld: usize,
        nq: usize,
        hd: usize,
        vals: &[f16],
        n: usize,
        out: &mut [f32],
    ) {
        let vp = vals.as_ptr();
        let pp = p.as_ptr();
        let op = out.as_mut_ptr();
        // SAFETY: sizes checked by the caller (hd a multiple of 16).
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
                            match chunks {
                                1 => accum_tile::<$h, 1>(ph, ld, hd, vp, n, col, oh),
                                2 => accum_tile::<$h, 2>(ph, ld, hd, vp, n, col, oh),
                                3 => accum_tile::<$h, 3>(ph, ld, hd, vp, n, col, oh),
                                _ => accum_tile::<$h, 4>(ph, ld, hd, vp, n, col, oh),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// Units in the last place between `y` and the exact `t` (at `t`'s binade).
    fn ulps(y: f32, t: f64) -> f64 {
        let tf = t as f32;
        let ulp = f64::from(f32::from_bits(tf.to_bits() + 1) - tf);
        (f64::from(y) - t).abs() / ulp
    }

    #[test]
    fn exp_is_within_two_ulp_and_handles_the_ends() {
        let mut worst = 0.0f64;
        // Every 97th float of [-87, 88.7] on both sides of zero.
        for (a, b) in [(-0.0f32, -87.0f32), (0.0, 88.7)] {
            for bits in (a.to_bits()..=b.to_bits()).step_by(97) {
                let x = f32::from_bits(bits);
                let e = ulps(exp(x), f64::from(x).exp());
                assert!(e <= 2.0, "exp({x:e}) = {:e}: {e} ulp", exp(x));
                worst = worst.max(e);
            }
        }
        assert!(worst > 0.5, "not a rounding-free formula: worst {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-87.5), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        // The top of the range (2^128 built in two steps) stays finite below ln(f32::MAX).
        assert!(exp(88.7).is_finite() && exp(88.7) > 3.0e38);
        assert!((exp(-86.9) / f64::from(-86.9f32).exp() as f32 - 1.0).abs() < 1e-6);
    }

    /// Every score is one chain over the dimensions in order whatever the query count (1 to
    /// 13: one or two passes of up to 12) and slot count (whole tiles, a partial last tile):
    /// fused multiply-adds on the AVX-512 tier, separate multiply and add on the others,
    /// times the scale; compared bit for bit with that chain written out here.
    #[test]
    fn each_score_is_one_chain_whatever_the_grouping() {
        let best = crate::quant::detect_best();
        #[cfg(target_arch = "x86_64")]
        let fused = matches!(
            crate::quant::resolve(best),
            crate::quant::Tier::Avx512 { .. }
        );
        #[cfg(not(target_arch = "x86_64"))]
        let fused = false;
        let (hd, ld) = (64, 144);
        let q = data(13 * hd, 11);
        let keys: Vec<f16> = data(144 * hd, 12)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        for nq in 1..=13 {
            for n in [1, 15, 16, 17, 31, 32, 48, 64, 65, 100, 128, 144] {
                let mut out = vec![f32::NAN; nq * ld];
                scores_f16(best, &q, nq, hd, &keys, n, 0.125, &mut out, ld);
                for h in 0..nq {
                    for s in 0..n {
                        let mut acc = 0.0f32;
                        for d in 0..hd {
                            let (a, k) = (q[h * hd + d], keys[key_index(hd, s, d)].to_f32());
                            acc = if fused {
                                a.mul_add(k, acc)
                            } else {
                                acc + a * k
                            };
                        }
                        let want = acc * 0.125;
                        let got = out[h * ld + s];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{nq} queries, {n} slots: head {h} slot {s}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn simd_kernels_match_scalar() {
        let best = crate::quant::detect_best();
        let (hd, n, ldk) = (64, 37, 48);
        let q = data(13 * hd, 1);
        // Keys in whole tiles (48 slots' room for 37).
        let kh: Vec<f16> = data(48 * hd, 4).iter().map(|&x| f16::from_f32(x)).collect();
        let vh: Vec<f16> = data(n * hd, 5).iter().map(|&x| f16::from_f32(x)).collect();
        for nq in [1, 3, 12, 13] {
            let mut sa = vec![0.0f32; nq * ldk];
            let mut sb = vec![0.0f32; nq * ldk];
            scores_f16(Isa::Scalar, &q, nq, hd, &kh, n, 0.125, &mut sa, ldk);
            scores_f16(best, &q, nq, hd, &kh, n, 0.125, &mut sb, ldk);
            for h in 0..nq {
                for s in 0..n {
                    let (x, y) = (sa[h * ldk + s], sb[h * ldk + s]);
                    assert!((x - y).abs() < 1e-4, "f16 score {nq} {h} {s}: {x} vs {y}");
                }
            }
            let mut oa = vec![0.5f32; nq * hd];
            let mut ob = vec![0.5f32; nq * hd];
            accum_f16(Isa::Scalar, &sa, ldk, nq, hd, &vh, n, &mut oa);
            accum_f16(best, &sa, ldk, nq, hd, &vh, n, &mut ob);
            for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
                assert!((x - y).abs() < 1e-4, "f16 out {nq} {i}: {x} vs {y}");
            }
        }
        // Each score is the same FMA chain whatever the slot count and query count.
        let mut full = vec![0.0f32; 12 * ldk];
        let mut part = vec![0.0f32; 3 * ldk];
        scores_f16(best, &q, 12, hd, &kh, n, 0.125, &mut full, ldk);
        scores_f16(best, &q, 3, hd, &kh, 20, 0.125, &mut part, ldk);
        for h in 0..3 {
            assert_eq!(full[h * ldk..h * ldk + 20], part[h * ldk..h * ldk + 20]);
        }
        // Head size 256 (Gemma): the value sums run in two column passes.
        let hd2 = 256;
        let q2 = data(4 * hd2, 6);
        let kh2: Vec<f16> = data(48 * hd2, 7)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let vh2: Vec<f16> = data(n * hd2, 8).iter().map(|&x| f16::from_f32(x)).collect();
        let mut s2 = vec![0.0f32; 5 * ldk];
        scores_f16(Isa::Scalar, &q2, 4, hd2, &kh2, n, 0.0625, &mut s2, ldk);
        let mut oa = vec![0.25f32; 5 * hd2];
        let mut ob = oa.clone();
        accum_f16(Isa::Scalar, &s2, ldk, 4, hd2, &vh2, n, &mut oa);
        accum_f16(best, &s2, ldk, 4, hd2, &vh2, n, &mut ob);
        for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
            assert!((x - y).abs() < 1e-4, "f16 out hd 256 {i}: {x} vs {y}");
        }
        // The maximum is exact on every tier, whatever the length and tail.
        let a: Vec<f32> = data(n, 9).iter().map(|x| x * 30.0).collect();
        for len in [0, 1, 15, 16, 17, 37] {
            let want = a[..len].iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_f32(Isa::Scalar, &a[..len]), want, "len {len}");
            assert_eq!(max_f32(best, &a[..len]), want, "len {len}");
        }
        let mut ea = a.clone();
        let mut eb = a.clone();
        let sa = exp_shifted(Isa::Scalar, &mut ea, 0.5);
        let sb = exp_shifted(best, &mut eb, 0.5);
        assert!((sa - sb).abs() < 1e-5 * sa);
        for (x, y) in ea.iter().zip(&eb) {
            assert!((x - y).abs() <= 2e-7 * x.abs().max(1e-30), "{x} vs {y}");
        }
    }
}
