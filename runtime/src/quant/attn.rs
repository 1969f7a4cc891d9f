//! Attention kernels: scores of query heads against f16 keys, softmax, value accumulation,
//! and f16 ⇄ f32 conversion of cache rows. Scalar reference everywhere; AVX-512 kernels when
//! the tier has them (other tiers run the scalar code, which is the reference).
//!
//! Numerics: queries, scores, probabilities and outputs are f32; keys and values are the
//! f16 values of the KV cache widened exactly. Scores and value sums are accumulated in f32
//! (the SIMD tiers in a different order than the reference), softmax subtracts the row
//! maximum before exponentiating. The AVX-512 `exp` is a degree-6 polynomial after range
//! reduction with `vscalefps`, within 2 ulp of `f32::exp` over the softmax range.

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

/// `x[i] = exp(x[i] - shift)`; returns the sum of the results.
pub fn exp_shifted(isa: Isa, x: &mut [f32], shift: f32) -> f32 {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { x86::exp_shifted(x, shift) },
        _ => {
            let mut sum = 0.0f32;
            for v in x.iter_mut() {
                *v = (*v - shift).exp();
                sum += *v;
            }
            sum
        }
    }
}

/// Scores of `nq` query heads (`q`: `nq × hd`, contiguous) against the first `n` key rows
/// (`keys`: `n × hd` f16), times `scale`: `out[h * ld + s] = scale · q_h · k_s`.
///
/// # Panics
/// If a slice is too short.
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
        q.len() >= nq * hd && keys.len() >= n * hd,
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
        Tier::Avx512 { .. } if hd.is_multiple_of(16) && nq <= 8 => unsafe {
            x86::scores_f16(q, nq, hd, keys, n, scale, out, ld)
        },
        _ => {
            for s in 0..n {
                let k = &keys[s * hd..(s + 1) * hd];
                for h in 0..nq {
                    let qh = &q[h * hd..(h + 1) * hd];
                    let mut acc = 0.0f32;
                    for (a, b) in qh.iter().zip(k) {
                        acc += a * b.to_f32();
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
        Tier::Avx512 { .. } if hd.is_multiple_of(16) && hd <= 128 && nq <= 4 => unsafe {
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

/// Scores of `nq` queries against keys stored transposed in f32 (`kt[d * ldk + s]`), for slots
/// `0..n`, times `scale`: `out[h * ld + s]`.
///
/// # Panics
/// If a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn scores_kt(
    isa: Isa,
    q: &[f32],
    nq: usize,
    hd: usize,
    kt: &[f32],
    ldk: usize,
    n: usize,
    scale: f32,
    out: &mut [f32],
    ld: usize,
) {
    assert!(q.len() >= nq * hd, "scores_kt: queries too short");
    assert!(
        hd == 0 || kt.len() >= (hd - 1) * ldk + n,
        "scores_kt: keys too short"
    );
    assert!(
        nq == 0 || out.len() >= (nq - 1) * ld + n,
        "scores_kt: output too short"
    );
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 detected; sizes checked above.
        Tier::Avx512 { .. } => unsafe { x86::scores_kt(q, nq, hd, kt, ldk, n, scale, out, ld) },
        _ => {
            for h in 0..nq {
                for s in 0..n {
                    let mut acc = 0.0f32;
                    for d in 0..hd {
                        acc += q[h * hd + d] * kt[d * ldk + s];
                    }
                    out[h * ld + s] = acc * scale;
                }
            }
        }
    }
}

/// `out_h = Σ_s p[h * ld + s] · v_s` over f32 value rows `v[s * hd..]`, `s < n_h` where `n_h`
/// is `lens[h]` (`out`: `nq × hd`, overwritten).
///
/// # Panics
/// If a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn accum_f32(
    isa: Isa,
    p: &[f32],
    ld: usize,
    lens: &[usize],
    hd: usize,
    v: &[f32],
    out: &mut [f32],
) {
    let nq = lens.len();
    let n = lens.iter().copied().max().unwrap_or(0);
    assert!(
        v.len() >= n * hd && out.len() >= nq * hd,
        "accum_f32: too short"
    );
    assert!(
        lens.iter()
            .enumerate()
            .all(|(h, &l)| l <= ld && p.len() >= h * ld + l),
        "accum_f32: probabilities too short"
    );
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 detected; sizes checked above.
        Tier::Avx512 { .. } if hd.is_multiple_of(16) && hd <= 128 => unsafe {
            x86::accum_f32(p, ld, lens, hd, v, out)
        },
        _ => {
            out[..nq * hd].fill(0.0);
            for (h, &len) in lens.iter().enumerate() {
                for s in 0..len {
                    let w = p[h * ld + s];
                    for (o, x) in out[h * hd..(h + 1) * hd].iter_mut().zip(&v[s * hd..]) {
                        *o += w * x;
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

    /// exp(x) for x ≤ 0 down to the f32 underflow range (below about -87 the result is 0).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn exp512(x: __m512) -> __m512 {
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
        _mm512_scalef_ps(p, n)
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
        let chunks = hd / 16;
        // SAFETY: q holds nq·hd floats, keys n·hd halves, out (nq-1)·ld + n floats (caller).
        unsafe {
            for s in 0..n {
                let mut acc = [_mm512_setzero_ps(); 8];
                for c in 0..chunks {
                    let k = ld16h(kp.add(s * hd + 16 * c));
                    for (h, a) in acc.iter_mut().enumerate().take(nq) {
                        *a = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(h * hd + 16 * c)), k, *a);
                    }
                }
                for (h, a) in acc.iter().enumerate().take(nq) {
                    *op.add(h * ld + s) = _mm512_reduce_add_ps(*a) * scale;
                }
            }
        }
    }

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
        let chunks = hd / 16;
        let vp = vals.as_ptr();
        let pp = p.as_ptr();
        let op = out.as_mut_ptr();
        // SAFETY: sizes checked by the caller; hd ≤ 128 so 8 chunks per head, nq ≤ 4.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 8]; 4];
            for h in 0..nq {
                for c in 0..chunks {
                    acc[h][c] = _mm512_loadu_ps(op.add(h * hd + 16 * c));
                }
            }
            for s in 0..n {
                let mut v = [_mm512_setzero_ps(); 8];
                for (c, vc) in v.iter_mut().enumerate().take(chunks) {
                    *vc = ld16h(vp.add(s * hd + 16 * c));
                }
                for h in 0..nq {
                    let w = _mm512_set1_ps(*pp.add(h * ld + s));
                    for c in 0..chunks {
                        acc[h][c] = _mm512_fmadd_ps(w, v[c], acc[h][c]);
                    }
                }
            }
            for h in 0..nq {
                for c in 0..chunks {
                    _mm512_storeu_ps(op.add(h * hd + 16 * c), acc[h][c]);
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn scores_kt(
        q: &[f32],
        nq: usize,
        hd: usize,
        kt: &[f32],
        ldk: usize,
        n: usize,
        scale: f32,
        out: &mut [f32],
        ld: usize,
    ) {
        let qp = q.as_ptr();
        let kp = kt.as_ptr();
        let op = out.as_mut_ptr();
        let sc = _mm512_set1_ps(scale);
        // SAFETY: sizes checked by the caller; the tail of each 16-slot block is masked.
        unsafe {
            let mut h0 = 0;
            while h0 < nq {
                let hn = (nq - h0).min(12);
                let mut s = 0;
                while s < n {
                    let m: __mmask16 = if n - s >= 16 {
                        0xFFFF
                    } else {
                        (1u16 << (n - s)) - 1
                    };
                    let mut acc = [_mm512_setzero_ps(); 12];
                    for d in 0..hd {
                        let k = _mm512_maskz_loadu_ps(m, kp.add(d * ldk + s));
                        for (j, a) in acc.iter_mut().enumerate().take(hn) {
                            let qv = _mm512_set1_ps(*qp.add((h0 + j) * hd + d));
                            *a = _mm512_fmadd_ps(qv, k, *a);
                        }
                    }
                    for (j, a) in acc.iter().enumerate().take(hn) {
                        _mm512_mask_storeu_ps(op.add((h0 + j) * ld + s), m, _mm512_mul_ps(*a, sc));
                    }
                    s += 16;
                }
                h0 += hn;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn accum_f32(
        p: &[f32],
        ld: usize,
        lens: &[usize],
        hd: usize,
        v: &[f32],
        out: &mut [f32],
    ) {
        let chunks = hd / 16;
        let vp = v.as_ptr();
        let pp = p.as_ptr();
        let op = out.as_mut_ptr();
        let nq = lens.len();
        // SAFETY: sizes checked by the caller; hd ≤ 128; at most 3 heads per pass.
        unsafe {
            let mut h0 = 0;
            while h0 < nq {
                let hn = (nq - h0).min(3);
                let mut acc = [[_mm512_setzero_ps(); 8]; 3];
                let n = lens[h0..h0 + hn].iter().copied().max().unwrap_or(0);
                for s in 0..n {
                    let mut vv = [_mm512_setzero_ps(); 8];
                    for (c, x) in vv.iter_mut().enumerate().take(chunks) {
                        *x = _mm512_loadu_ps(vp.add(s * hd + 16 * c));
                    }
                    for j in 0..hn {
                        if s < lens[h0 + j] {
                            let w = _mm512_set1_ps(*pp.add((h0 + j) * ld + s));
                            for c in 0..chunks {
                                acc[j][c] = _mm512_fmadd_ps(w, vv[c], acc[j][c]);
                            }
                        }
                    }
                }
                for j in 0..hn {
                    for c in 0..chunks {
                        _mm512_storeu_ps(op.add((h0 + j) * hd + 16 * c), acc[j][c]);
                    }
                }
                h0 += hn;
            }
        }
    }
}
