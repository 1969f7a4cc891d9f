//! The GeGLU gate (Gemma 3): GELU in its tanh form (Hendrycks & Gimpel 2016),
//! `0.5·x·(1 + tanh(z))` with `z = √(2/π)·(x + 0.044715·x³)`, times the up projection.
//!
//! Numerics: `0.5·(1 + tanh(z)) = 1 / (1 + e^(−2z))`, so the reference [`gelu_tanh`] computes
//! `x / (1 + exp(t))` with `t = −2√(2/π)·x·(1 + 0.044715·x²)` and the project's own
//! [`super::attn::exp`] (plain f32 operations, no fused multiply-add, no `libm`). That form
//! has no cancellation where `tanh(z)` nears −1 (the old `1 + tanhf(z)` lost every digit of
//! the small negative outputs there) and, being a fixed sequence of IEEE-754 operations, can
//! be evaluated lane by lane: the AVX2 and AVX-512 forms below perform the same operations in
//! the same order on each lane (the exponential's range checks become blends), so **every
//! tier returns the scalar tier's bits** — which the tier-identity test of the real models
//! (`tests/tier_identity.rs`, AVX2 against scalar on Gemma 3) requires.

#[cfg(target_arch = "x86_64")]
use super::Tier;
use super::attn::exp;
use super::{Isa, resolve};

/// `−2·√(2/π)` (the f32 of √(2/π), doubled exactly).
const NEG_TWO_C: f32 = -2.0 * 0.797_884_6;
/// The cubic coefficient of the tanh form.
const CUBIC: f32 = 0.044_715;

/// GELU in its tanh approximation, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, evaluated
/// as `x / (1 + exp(−2√(2/π)·x·(1 + 0.044715·x²)))` (module docs). Finite inputs give finite
/// results (very negative ones −0 or a tiny negative value, very large ones `x`).
pub fn gelu_tanh(x: f32) -> f32 {
    let t = NEG_TWO_C * x * (1.0 + CUBIC * x * x);
    x / (1.0 + exp(t))
}

/// `g[i] = gelu_tanh(g[i]) · u[i]` (the GeGLU gate); the same bits on every tier.
///
/// # Panics
/// If the lengths differ.
pub fn gelu_mul(isa: Isa, g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "gelu_mul: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected; equal lengths checked above.
        Tier::Avx2 => unsafe { x86::gelu_mul_avx2(g, u) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected; equal lengths checked above.
        Tier::Avx512 { .. } => unsafe { x86::gelu_mul_avx512(g, u) },
        _ => gelu_mul_scalar(g, u),
    }
}

fn gelu_mul_scalar(g: &mut [f32], u: &[f32]) {
    for (a, &b) in g.iter_mut().zip(u) {
        *a = gelu_tanh(*a) * b;
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::super::attn::exp_consts::*;
    use super::{CUBIC, NEG_TWO_C};

    /// [`super::exp`] on eight lanes: the same operations in the same order; its branches
    /// (below −87: 0, above 88.8: +∞, `k > 127`: a second doubling) are blends. The argument
    /// is clamped into the range first so out-of-range lanes convert to valid exponents.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in crate::quant) fn exp256(x: __m256) -> __m256 {
        let (lo_lim, hi_lim) = (_mm256_set1_ps(-87.0), _mm256_set1_ps(88.8));
        let lo = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo_lim);
        let hi = _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi_lim);
        let x = _mm256_min_ps(_mm256_max_ps(x, lo_lim), hi_lim);
        let kf = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(kf, _mm256_set1_ps(LN2_HI))),
            _mm256_mul_ps(kf, _mm256_set1_ps(LN2_LO)),
        );
        let mut q = _mm256_set1_ps(C7);
        for c in [C6, C5, C4, C3, C2] {
            q = _mm256_add_ps(_mm256_set1_ps(c), _mm256_mul_ps(r, q));
        }
        let one = _mm256_set1_ps(1.0);
        let p = _mm256_add_ps(one, _mm256_add_ps(r, _mm256_mul_ps(_mm256_mul_ps(r, r), q)));
        let k = _mm256_cvtps_epi32(kf);
        let top = _mm256_set1_epi32(127);
        let over = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, top));
        let k = _mm256_min_epi32(k, top);
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, top)));
        let s = _mm256_mul_ps(p, scale);
        let s = _mm256_blendv_ps(s, _mm256_mul_ps(s, _mm256_set1_ps(2.0)), over);
        let s = _mm256_andnot_ps(lo, s);
        _mm256_blendv_ps(s, _mm256_set1_ps(f32::INFINITY), hi)
    }

    /// [`super::gelu_tanh`] on eight lanes, operation for operation.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn gelu256(x: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        let x2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(CUBIC), x), x);
        let t = _mm256_mul_ps(
            _mm256_mul_ps(_mm256_set1_ps(NEG_TWO_C), x),
            _mm256_add_ps(one, x2),
        );
        _mm256_div_ps(x, _mm256_add_ps(one, exp256(t)))
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn gelu_mul_avx2(g: &mut [f32], u: &[f32]) {
        let n = g.len();
        let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
        let mut i = 0;
        // SAFETY: equal lengths (caller); loads and stores stay below n.
        unsafe {
            while i + 8 <= n {
                let r = _mm256_mul_ps(
                    gelu256(_mm256_loadu_ps(gp.add(i))),
                    _mm256_loadu_ps(up.add(i)),
                );
                _mm256_storeu_ps(gp.add(i), r);
                i += 8;
            }
        }
        super::gelu_mul_scalar(&mut g[i..], &u[i..]);
    }

    /// [`super::exp`] on sixteen lanes (see [`exp256`]).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn exp512(x: __m512) -> __m512 {
        let (lo_lim, hi_lim) = (_mm512_set1_ps(-87.0), _mm512_set1_ps(88.8));
        let lo = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo_lim);
        let hi = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi_lim);
        let x = _mm512_min_ps(_mm512_max_ps(x, lo_lim), hi_lim);
        let kf = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_sub_ps(
            _mm512_sub_ps(x, _mm512_mul_ps(kf, _mm512_set1_ps(LN2_HI))),
            _mm512_mul_ps(kf, _mm512_set1_ps(LN2_LO)),
        );
        let mut q = _mm512_set1_ps(C7);
        for c in [C6, C5, C4, C3, C2] {
            q = _mm512_add_ps(_mm512_set1_ps(c), _mm512_mul_ps(r, q));
        }
        let one = _mm512_set1_ps(1.0);
        let p = _mm512_add_ps(one, _mm512_add_ps(r, _mm512_mul_ps(_mm512_mul_ps(r, r), q)));
        let k = _mm512_cvtps_epi32(kf);
        let top = _mm512_set1_epi32(127);
        let over = _mm512_cmpgt_epi32_mask(k, top);
        let k = _mm512_min_epi32(k, top);
        let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(k, top)));
        let s = _mm512_mul_ps(p, scale);
        let s = _mm512_mask_mul_ps(s, over, s, _mm512_set1_ps(2.0));
        let s = _mm512_mask_mov_ps(s, lo, _mm512_setzero_ps());
        _mm512_mask_mov_ps(s, hi, _mm512_set1_ps(f32::INFINITY))
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gelu_mul_avx512(g: &mut [f32], u: &[f32]) {
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
                let x2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(CUBIC), x), x);
                let t = _mm512_mul_ps(
                    _mm512_mul_ps(_mm512_set1_ps(NEG_TWO_C), x),
                    _mm512_add_ps(one, x2),
                );
                let y = _mm512_div_ps(x, _mm512_add_ps(one, exp512(t)));
                let r = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, up.add(i)));
                _mm512_mask_storeu_ps(gp.add(i), m, r);
                i += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GELU's tanh form in f64 (the independent expectation). Where `tanh(z)` nears −1,
    /// `1 + tanh(z)` cancels even in f64 (at z = −14 only 4 digits survive), so there the
    /// identity `0.5·(1 + tanh(z)) = 1 / (1 + e^(−2z))` is evaluated instead.
    fn exact(x: f32) -> f64 {
        let x = f64::from(x);
        let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        if z > -1.0 {
            0.5 * x * (1.0 + z.tanh())
        } else {
            x / (1.0 + (-2.0 * z).exp())
        }
    }

    /// Inputs: every 4099th f32 of ±[1e-30, 1e30] (both signs, extremes included), a dense
    /// sweep of [−12, 12] where the activations of a model live, and the special values.
    fn inputs() -> Vec<f32> {
        let mut v = Vec::new();
        for sign in [1.0f32, -1.0] {
            for bits in (1e-30f32.to_bits()..=1e30f32.to_bits()).step_by(4099) {
                v.push(sign * f32::from_bits(bits));
            }
        }
        v.extend((-120_000..=120_000).map(|i| i as f32 * 1e-4));
        v.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::EPSILON,
            -5.5,
            -7.3,
            -7.4,
            -9.0,
            -10.0,
        ]);
        v
    }

    #[test]
    fn gelu_tanh_is_close_to_the_exact_tanh_form() {
        for x in inputs() {
            let (y, want) = (gelu_tanh(x), exact(x));
            if x.is_infinite() {
                assert_eq!(y, x.max(0.0), "gelu({x})");
                continue;
            }
            assert!(y.is_finite(), "gelu({x:e}) = {y}");
            // Error budget, relative: `t` carries seven relative errors of at most 2⁻²⁴
            // (the two constants rounded to f32 and five roundings), i.e. ≤ 7·2⁻²⁴·|t|
            // absolute, and an error δ in `t` moves `x / (1 + eᵗ)` by at most δ relative (the
            // derivative of ln(1 + eᵗ) is below 1); `exp` is within 2 ulp and the add and
            // divide round once each. Counting each as one ulp (≤ 2⁻²³ relative):
            // (7|t| + 5)·2⁻²³. Where eᵗ overflows (x below about −7.4, `t` above 88.8) the
            // result is −0 for a true value under 1.6·10⁻³⁸·|x|; results that small are held
            // to that absolute bound.
            let t = f64::from(NEG_TWO_C) * f64::from(x) * (1.0 + 0.044715 * f64::from(x).powi(2));
            let tol = (7.0 * t.abs() + 5.0) * (2.0f64).powi(-23) * want.abs();
            let floor = 1.6e-38 * f64::from(x.abs()).max(1.0);
            let err = (f64::from(y) - want).abs();
            assert!(
                err <= tol.max(floor),
                "gelu({x:e}) = {y:e}, exact {want:e}, error {err:e} > {tol:e}"
            );
        }
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert_eq!(gelu_tanh(1e30), 1e30);
        assert!(gelu_tanh(-1e30) == 0.0 && gelu_tanh(-20.0) == 0.0);
        assert!(gelu_tanh(f32::NAN).is_nan());
        // The values of a model's gate stay within a few ulp (|t| < 10 for |x| < 3).
        for i in -3000..=3000 {
            let x = i as f32 * 1e-3;
            let err = (f64::from(gelu_tanh(x)) - exact(x)).abs();
            assert!(err <= 1e-6 * exact(x).abs().max(1e-3), "gelu({x})");
        }
    }

    /// Every tier this CPU runs returns the scalar tier's bits, for every input above and
    /// every tail length of the vector loops.
    #[test]
    fn gelu_mul_gives_the_scalar_bits_on_every_tier() {
        let x = inputs();
        let u: Vec<f32> = (0..x.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let mut want = x.clone();
        gelu_mul(Isa::Scalar, &mut want, &u);
        for (w, (&a, &b)) in want.iter().zip(x.iter().zip(&u)) {
            assert_eq!(w.to_bits(), (gelu_tanh(a) * b).to_bits());
        }
        let tiers: Vec<Isa> = [Isa::Avx2, Isa::Avx512, Isa::Neon]
            .into_iter()
            .filter(|&i| crate::quant::supported(i))
            .collect();
        for &isa in &tiers {
            let mut got = x.clone();
            gelu_mul(isa, &mut got, &u);
            let differing: Vec<(f32, f32, f32)> = x
                .iter()
                .zip(got.iter().zip(&want))
                .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
                .map(|(&x, (&a, &b))| (x, a, b))
                .take(5)
                .collect();
            assert!(
                differing.is_empty(),
                "{isa}: (x, tier, scalar) {differing:?}"
            );
            // NaN in, NaN out; every tail length of the 8- and 16-lane loops.
            let mut nan = [f32::NAN; 3];
            gelu_mul(isa, &mut nan, &[1.0; 3]);
            assert!(nan.iter().all(|v| v.is_nan()), "{isa}: NaN");
            for len in 0..40 {
                let (xs, us) = (&x[1000..1000 + len], &u[..len]);
                let mut a = xs.to_vec();
                let mut b = xs.to_vec();
                gelu_mul(Isa::Scalar, &mut a, us);
                gelu_mul(isa, &mut b, us);
                assert!(
                    a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "{isa}: length {len}"
                );
            }
        }
    }
}
