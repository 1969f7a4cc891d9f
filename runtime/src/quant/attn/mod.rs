//! Attention kernels: scores of query heads against f16 or Q8_0 keys, the maximum and shifted
//! exponentials of a score row (softmax), value accumulation, f16 ⇄ f32 conversion of cache
//! rows, and the SwiGLU gate. The blocked online-softmax attention built on them is
//! [`crate::model::attention`]. Scalar reference everywhere; AVX-512 kernels when
//! the tier has them (other tiers run the scalar code, which is the reference).
//!
//! Numerics: queries, scores, probabilities and outputs are f32; keys and values are the
//! f16 values of the KV cache widened exactly. Scores and value sums are accumulated in f32
//! (the SIMD tiers in a different order than the reference). Against a Q8_0 cache the
//! queries are quantized too ([`QueryQ8Buf`]) and each group's part of a score is an exact
//! integer dot product (`vpdpbusd` on AVX-512 VNNI), scaled in f32. Softmax subtracts the row
//! maximum before exponentiating. The scalar tier's exponential is [`exp`], the project's
//! own (plain f32 operations, the same bits on every platform and in the OpenCL kernels);
//! the AVX-512 `exp` is a degree-6 polynomial after range reduction with `vscalefps`,
//! within 2 ulp of the exact value over the softmax range.

use half::f16;

#[cfg(target_arch = "x86_64")]
use super::Tier;
use super::{Isa, resolve};

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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected.
        Tier::Avx2 => unsafe { avx2::exp_shifted(x, shift) },
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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected.
        Tier::Avx2 => unsafe { avx2::max_f32(x) },
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

/// `x[i] *= f` (the same bits on every tier).
pub fn scale_f32(isa: Isa, x: &mut [f32], f: f32) {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { x86::scale_f32(x, f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected.
        Tier::Avx2 => unsafe { avx2::scale_f32(x, f) },
        _ => x.iter_mut().for_each(|v| *v *= f),
    }
}

/// The smallest and the largest of `x` (`(u32::MAX, 0)` when empty).
pub fn min_max_u32(isa: Isa, x: &[u32]) -> (u32, u32) {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { x86::min_max_u32(x) },
        _ => x
            .iter()
            .fold((u32::MAX, 0), |(a, b), &p| (a.min(p), b.max(p))),
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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected; equal lengths checked above.
        Tier::Avx2 => unsafe { avx2::silu_mul(g, u) },
        _ => {
            for (a, &b) in g.iter_mut().zip(u) {
                *a = *a / (1.0 + exp(-*a)) * b;
            }
        }
    }
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
        Tier::Avx512 { .. } => unsafe { x86::scores(q, nq, hd, keys.as_ptr(), n, scale, out, ld) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C detected; sizes checked above.
        Tier::Avx2 => unsafe { avx2::scores_f16(q, nq, hd, keys.as_ptr(), n, scale, out, ld) },
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
            x86::accum(p, ld, nq, hd, vals.as_ptr(), n, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C detected; sizes checked above.
        Tier::Avx2 if hd.is_multiple_of(8) => unsafe {
            avx2::accum_f16(p, ld, nq, hd, vals.as_ptr(), n, out)
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

/// Values per scale of the Q8_0 KV cache format (ggml's Q8_0 block: 32 signed bytes and
/// one f16 scale).
pub const Q8_GROUP: usize = 32;

/// Index of the Q8_0 scale of dimension `d` of slot `s` (head size `hd`), keys and values
/// alike: per tile of [`KEY_TILE`] slots, group-major (`[s / 16][d / 32][s % 16]`), so the
/// 16 slots' scales of one group are adjacent.
pub const fn scale_index(hd: usize, s: usize, d: usize) -> usize {
    (s / KEY_TILE) * KEY_TILE * (hd / Q8_GROUP) + (d / Q8_GROUP) * KEY_TILE + s % KEY_TILE
}

/// Quantizes `x` (a multiple of [`Q8_GROUP`] values) to Q8_0 as ggml does: per group of 32,
/// `d = max|x| / 127`, `q = round(x / d)` (computed as `x · (1/d)`, halves away from
/// zero), the scale stored as f16. The value read back is `f32(d_f16) · q`.
///
/// # Panics
/// If the lengths do not match.
pub fn quantize_q8_0(x: &[f32], q: &mut [i8], d: &mut [f16]) {
    assert!(
        x.len() == q.len() && x.len() == d.len() * Q8_GROUP,
        "quantize_q8_0: {} values, {} quants, {} scales",
        x.len(),
        q.len(),
        d.len()
    );
    for ((xg, qg), dg) in x
        .chunks_exact(Q8_GROUP)
        .zip(q.chunks_exact_mut(Q8_GROUP))
        .zip(d.iter_mut())
    {
        let amax = xg.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (o, &v) in qg.iter_mut().zip(xg) {
            // |v · inv| ≤ 127 up to rounding; the cast saturates anything past it.
            *o = (v * inv).round() as i8;
        }
        *dg = f16::from_f32(scale);
    }
}

/// Index of dimension `d` of slot `s` in Q8_0 keys (head size `hd`): tiles of
/// [`KEY_TILE`] slots, and inside a tile, per quad of 4 dimensions, the 16 slots' 4 bytes
/// (`[s / 16][d / 4][s % 16][d % 4]`), so that one 64-byte load gives 4 dimensions of 16
/// slots: one integer dot product of 4 bytes per slot lane.
pub const fn key_index_q8(hd: usize, s: usize, d: usize) -> usize {
    (s / KEY_TILE) * KEY_TILE * hd + (d / 4) * 4 * KEY_TILE + (s % KEY_TILE) * 4 + d % 4
}

/// Query heads quantized for integer scores against Q8_0 keys ([`QueryQ8Buf::quantize`]):
/// per head and group of 32 dimensions, 32 signed bytes, an f32 scale and the offset
/// `−128 · Σ quants` (the correction of a dot product taken with the keys' bytes flipped to
/// unsigned, `k + 128`).
#[derive(Clone, Copy, Debug)]
pub struct QueryQ8<'a> {
    /// `heads × hd` quants.
    pub quants: &'a [i8],
    /// `heads × hd / 32` scales.
    pub scales: &'a [f32],
    /// `heads × hd / 32` offsets.
    pub offsets: &'a [i32],
}

/// Storage for [`QueryQ8`]: sized once, reused without allocating.
#[derive(Debug, Default)]
pub struct QueryQ8Buf {
    quants: Vec<i8>,
    scales: Vec<f32>,
    offsets: Vec<i32>,
}

impl QueryQ8Buf {
    /// Room for `values` query values (quantizing no more never allocates).
    pub fn with_capacity(values: usize) -> Self {
        QueryQ8Buf {
            quants: Vec::with_capacity(values),
            scales: Vec::with_capacity(values / Q8_GROUP),
            offsets: Vec::with_capacity(values / Q8_GROUP),
        }
    }

    /// Quantizes query heads `q` (a multiple of [`Q8_GROUP`] values) by ggml's Q8_0 rule
    /// ([`quantize_q8_0`]) with the scale kept in f32 and halves rounded to even: per group
    /// of 32, `d = max|x| / 127`, `q = round(x · (1/d))`. The same bits on every tier.
    ///
    /// # Panics
    /// If `q.len()` is not a multiple of [`Q8_GROUP`].
    pub fn quantize(&mut self, isa: Isa, q: &[f32]) -> QueryQ8<'_> {
        assert!(
            q.len().is_multiple_of(Q8_GROUP),
            "QueryQ8Buf: {} values",
            q.len()
        );
        let groups = q.len() / Q8_GROUP;
        let tier = resolve(isa);
        self.quants.resize(q.len(), 0);
        self.scales.resize(groups, 0.0);
        self.offsets.resize(groups, 0);
        for (((xg, qg), d), off) in q
            .chunks_exact(Q8_GROUP)
            .zip(self.quants.chunks_exact_mut(Q8_GROUP))
            .zip(self.scales.iter_mut())
            .zip(self.offsets.iter_mut())
        {
            let amax = xg.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let sum = match tier {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX-512 detected; 32 values in and out.
                Tier::Avx512 { .. } => unsafe { x86::quantize_group(xg, inv, qg) },
                _ => {
                    let mut sum = 0i32;
                    for (o, &v) in qg.iter_mut().zip(xg) {
                        // |v · inv| ≤ 127 up to rounding; the cast saturates anything past it.
                        *o = (v * inv).round_ties_even() as i8;
                        sum += i32::from(*o);
                    }
                    sum
                }
            };
            *d = scale;
            *off = -128 * sum;
        }
        QueryQ8 {
            quants: &self.quants,
            scales: &self.scales,
            offsets: &self.offsets,
        }
    }
}

/// [`scores_f16`] over Q8_0 keys, with the queries quantized too ([`QueryQ8`], as
/// llama.cpp's CPU attention quantizes them for a Q8_0 cache): `keys` holds the key tiles'
/// signed bytes (laid out as [`key_index_q8`]) and `scales` their f16 scales,
/// `[tile][dimension / 32][slot % 16]`. Each score is, per group of 32 dimensions in order,
/// the exact integer dot product `part` of the query's and the key's quants, then
/// `acc += (d_key · d_query) · part` (the product rounded to f32; fused multiply-add on the
/// AVX-512 VNNI tier, a multiply and an add on the others), times `scale` at the end.
///
/// # Panics
/// If a slice is too short, or `hd` is not a multiple of [`Q8_GROUP`].
#[allow(clippy::too_many_arguments)]
pub fn scores_q8_0(
    isa: Isa,
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
    let tiles = n.next_multiple_of(KEY_TILE);
    let groups = hd / Q8_GROUP;
    assert!(hd.is_multiple_of(Q8_GROUP), "scores_q8_0: head size {hd}");
    assert!(
        q.quants.len() >= nq * hd
            && q.scales.len() >= nq * groups
            && q.offsets.len() >= nq * groups
            && keys.len() >= tiles * hd
            && scales.len() >= tiles * groups,
        "scores_q8_0: inputs too short"
    );
    assert!(
        nq == 0 || out.len() >= (nq - 1) * ld + n,
        "scores_q8_0: output too short"
    );
    assert!(ld >= n, "scores_q8_0: leading dimension {ld} < {n}");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 VNNI detected; sizes checked above.
        Tier::Avx512 { vnni: true, .. } => unsafe {
            x86::scores_q8(q, nq, hd, keys, scales, n, scale, out, ld)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C detected (every AVX-512 CPU has them); sizes checked
        // above.
        Tier::Avx2 | Tier::Avx512 { vnni: false, .. } => unsafe {
            avx2::scores_q8(q, nq, hd, keys, scales, n, scale, out, ld)
        },
        _ => {
            for t in (0..n).step_by(KEY_TILE) {
                let (tk, td) = (&keys[t * hd..], &scales[t * groups..]);
                let lanes = (n - t).min(KEY_TILE);
                for h in 0..nq {
                    let mut acc = [0.0f32; KEY_TILE];
                    for g in 0..groups {
                        let qg = &q.quants[h * hd + g * Q8_GROUP..][..Q8_GROUP];
                        let mut part = [0i32; KEY_TILE];
                        for (quad, qd) in qg.chunks_exact(4).enumerate() {
                            let kq = &tk[(g * Q8_GROUP / 4 + quad) * 4 * KEY_TILE..];
                            for (s, p) in part.iter_mut().enumerate() {
                                for (j, &a) in qd.iter().enumerate() {
                                    *p += i32::from(a) * i32::from(kq[s * 4 + j]);
                                }
                            }
                        }
                        let dq = q.scales[h * groups + g];
                        for (s, (a, &p)) in acc.iter_mut().zip(&part).enumerate() {
                            *a += td[g * KEY_TILE + s].to_f32() * dq * p as f32;
                        }
                    }
                    for (s, a) in acc[..lanes].iter().enumerate() {
                        out[h * ld + t + s] = a * scale;
                    }
                }
            }
        }
    }
}

/// Dimension `d` of slot `s` of Q8_0 keys laid out as [`scores_q8_0`] reads them.
pub fn key_q8_0(keys: &[i8], scales: &[f16], hd: usize, s: usize, d: usize) -> f32 {
    scales[scale_index(hd, s, d)].to_f32() * f32::from(keys[key_index_q8(hd, s, d)])
}

/// Index of dimension `d` of slot `s` in Q8_0 values (head size `hd`): slots in pairs, each
/// pair's two bytes of a dimension adjacent (`[s / 2][d][s % 2]`), so that one 32-byte load
/// widened to 16-bit lanes gives 16 dimensions of two slots: one 16-bit dot product of two
/// slots per dimension lane.
pub const fn value_index_q8(hd: usize, s: usize, d: usize) -> usize {
    (s / 2) * 2 * hd + d * 2 + s % 2
}

/// Dimension `d` of slot `s` of Q8_0 values laid out as [`accum_q8_0`] reads them.
pub fn value_q8_0(vals: &[i8], scales: &[f16], hd: usize, s: usize, d: usize) -> f32 {
    scales[scale_index(hd, s, d)].to_f32() * f32::from(vals[value_index_q8(hd, s, d)])
}

/// Slots per run of [`accum_q8_0`]: the slots whose weights share one 16-bit scale (a key
/// tile's; runs of 128 cost about a fifth less in the criterion bench but moved SmolLM2's
/// Q8_0 perplexity at context 128 from 30.67 to 30.96, against 30.80 with runs of 16).
pub const Q8_RUN: usize = 16;

/// Largest 16-bit weight of [`accum_q8_0`].
const W16: f32 = 32767.0;

/// [`accum_f16`] over Q8_0 values: `vals` holds the bytes of the slot pairs covering the `n`
/// slots ([`value_index_q8`]) and `scales` the f16 scales of their whole tiles of 16 slots,
/// `[slot / 16][dimension / 32][slot % 16]` (as the keys' scales). The slots are taken in
/// runs of up to [`Q8_RUN`] from the first. Per run, head and group of 32 dimensions, each
/// slot's weight `w = p · d` (the probability times the slot's group scale, rounded to f32)
/// becomes a 16-bit integer `u = round(w · (32767 / W))` (halves to even; `W` the run's
/// largest `w`), the exact integer sums `Σ u · q` follow, and `out += (W / 32767) · Σ`
/// (the sum converted to f32; fused multiply-add on the AVX-512 VNNI tier, a multiply and
/// an add on the others). Each weight is then off by at most `W / 65534`: with `W` at most
/// the run's largest probability times the largest scale, an output moves by at most
/// `16 / 65534` of the largest value's magnitude over all runs (the probabilities of the
/// runs' largest weights sum to at most 1), a sixteenth of the values' own rounding to
/// Q8_0 (half a step, `1 / 254` of a group's largest magnitude).
///
/// # Panics
/// If a slice is too short, or `hd` is not a multiple of [`Q8_GROUP`].
#[allow(clippy::too_many_arguments)]
pub fn accum_q8_0(
    isa: Isa,
    p: &[f32],
    ld: usize,
    nq: usize,
    hd: usize,
    vals: &[i8],
    scales: &[f16],
    n: usize,
    out: &mut [f32],
) {
    let groups = hd / Q8_GROUP;
    assert!(hd.is_multiple_of(Q8_GROUP), "accum_q8_0: head size {hd}");
    assert!(
        vals.len() >= n.next_multiple_of(2) * hd
            && scales.len() >= n.next_multiple_of(KEY_TILE) * groups
            && out.len() >= nq * hd,
        "accum_q8_0: too short"
    );
    assert!(
        nq == 0 || p.len() >= (nq - 1) * ld + n,
        "accum_q8_0: probabilities too short"
    );
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 VNNI detected; sizes checked above (hd a multiple of 32).
        Tier::Avx512 { vnni: true, .. } => unsafe {
            x86::accum_q8(p, ld, nq, hd, vals, scales, n, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C detected; sizes checked above.
        Tier::Avx2 | Tier::Avx512 { vnni: false, .. } => unsafe {
            avx2::accum_q8(p, ld, nq, hd, vals, scales, n, out)
        },
        _ => {
            for r0 in (0..n).step_by(Q8_RUN) {
                let run = r0..(r0 + Q8_RUN).min(n);
                for h in 0..nq {
                    for g in 0..groups {
                        let d0 = g * Q8_GROUP;
                        let w = |s: usize| p[h * ld + s] * scales[scale_index(hd, s, d0)].to_f32();
                        let wmax = run.clone().map(w).fold(0.0f32, f32::max);
                        let inv = if wmax > 0.0 { W16 / wmax } else { 0.0 };
                        let mut sums = [0i32; Q8_GROUP];
                        for s in run.clone() {
                            let u = (w(s) * inv).round_ties_even() as i32;
                            for (i, a) in sums.iter_mut().enumerate() {
                                *a += u * i32::from(vals[value_index_q8(hd, s, d0 + i)]);
                            }
                        }
                        let back = wmax / W16;
                        for (o, &a) in out[h * hd + d0..][..Q8_GROUP].iter_mut().zip(&sums) {
                            *o += back * a as f32;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // register tiles indexed by head and chunk
mod x86;

#[cfg(test)]
mod tests;
