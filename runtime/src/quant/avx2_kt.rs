//! AVX2 + FMA + F16C prefill of K-quant weights (Q4_K, Q5_K, Q6_K with Q8_K activations)
//! eight weight rows at a time: a run of super-blocks of the eight rows is decoded once
//! ([`UnpackedK8`]) for every quad of activation rows of a window, and kept transposed by
//! groups of four quants (lane `r` of a column vector holds four quants of row `r`), so one
//! broadcast activation group and one `vpmaddubsw` serve the eight rows and a block's eight
//! integer sums come out as the eight lanes of one vector, with no horizontal adds.
//!
//! The integers are those of the scalar reference ([`super::kquants::block_ints`]):
//! `isum = Σ_g sc[g] · Σ_{e∈g} u[e]·q[e] − off · Σ_g sc[g] · bsum[g]` and
//! `msum = Σ_g mn[g] · bsum[g]`, each exact in i32 (the i16 lanes before the scale multiply
//! hold at most 8 · 2 · 15 · 127 for Q4_K, 4 · 2 · 31 · 127 for Q5_K and 2 · 2 · 63 · 127 for
//! Q6_K, all below 2¹⁵); each lane then takes `(d · d_a) · isum − (dmin · d_a) · msum` and
//! adds it to its sum in block order with the scalar reference's f32 operations, so every
//! (weight row, activation row) result is the scalar tier's bits.

use std::arch::x86_64::*;

use super::avx2::{ROWS8, transpose8x8_epi32};
use super::avx2_k::{K4, K5, K6, k_bytes, k_scales, unpack_k_with};
use super::blocks::BlockQ8K;

/// Super-blocks decoded per run: eight rows' run takes 23 KiB, inside a 32 KiB L1.
pub(super) const KRUN: usize = 8;

/// Columns of four quants in a super-block.
const COLS: usize = 64;

/// A run of super-blocks of eight K-quant weight rows of type `T`, decoded: for block
/// `i0 + e`, `u[e][j]` holds quants `4j..4j + 4` of every row (lane `r` for row `r`),
/// `sc[e][g]` group `g`'s scale of every row twice (both i16 halves of lane `r`),
/// `pairs[e][k]` the i16 pair of groups `2k, 2k + 1` of every row — the mins for Q4_K and
/// Q5_K, the scales for Q6_K (its offset term) — and `d`, `dmin` the rows' super-block
/// scales.
pub(super) struct UnpackedK8<const T: u8> {
    u: [[__m256i; COLS]; KRUN],
    sc: [[__m256i; 16]; KRUN],
    pairs: [[__m256i; 8]; KRUN],
    d: [__m256; KRUN],
    dmin: [__m256; KRUN],
    i0: usize,
    nb: usize,
}

impl<const T: u8> UnpackedK8<T> {
    /// Whether `T` is a type this decoder takes.
    const OK: () = assert!(matches!(T, K4 | K5 | K6), "UnpackedK8: Q4_K, Q5_K or Q6_K");

    pub(super) fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::OK;
        // SAFETY: all-zero bits are a valid value of every field (vectors and integers).
        unsafe { std::mem::zeroed() }
    }

    /// Decodes super-blocks `i0..i0 + nb` (`nb` at most [`KRUN`]) of the eight rows `w`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C present; every row holds blocks `i0..i0 + nb` of type `T`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn unpack(&mut self, w: &[&[u8]; ROWS8], i0: usize, nb: usize) {
        let nb = nb.min(KRUN);
        let bb = k_bytes(T);
        for e in 0..nb {
            let mut d = [0.0f32; ROWS8];
            let mut dmin = [0.0f32; ROWS8];
            let mut u = [[_mm256_setzero_si256(); ROWS8]; 8];
            let mut sc = [_mm256_setzero_si256(); ROWS8];
            let mut mn = [_mm256_setzero_si256(); ROWS8];
            for r in 0..ROWS8 {
                // SAFETY: block i0 + e of row r (caller contract).
                let (k, (s, m)) = unsafe {
                    let p = w[r].as_ptr().add((i0 + e) * bb);
                    (unpack_k_with::<T, false>(p), k_scales::<T>(p))
                };
                for (c, uc) in k.u.into_iter().enumerate() {
                    u[c][r] = uc;
                }
                (sc[r], mn[r], d[r], dmin[r]) = (s, m, k.d, k.dmin);
            }
            // Chunk c (quants 32c..32c + 32) gives columns 8c..8c + 8.
            for (c, uc) in u.into_iter().enumerate() {
                let t = transpose8x8_epi32(uc);
                self.u[e][8 * c..8 * c + 8].copy_from_slice(&t);
            }
            // Each scale twice as an i32 lane: the low unpack holds groups 0..4 and 8..12,
            // the high one 4..8 and 12..16 (by 128-bit halves).
            let lo = transpose8x8_epi32(sc.map(|s| _mm256_unpacklo_epi16(s, s)));
            let hi = transpose8x8_epi32(sc.map(|s| _mm256_unpackhi_epi16(s, s)));
            let sc_e = &mut self.sc[e];
            sc_e[..4].copy_from_slice(&lo[..4]);
            sc_e[4..8].copy_from_slice(&hi[..4]);
            sc_e[8..12].copy_from_slice(&lo[4..]);
            sc_e[12..].copy_from_slice(&hi[4..]);
            self.pairs[e] = transpose8x8_epi32(if T == K6 { sc } else { mn });
            // SAFETY: eight floats each.
            unsafe {
                self.d[e] = _mm256_loadu_ps(d.as_ptr());
                self.dmin[e] = _mm256_loadu_ps(dmin.as_ptr());
            }
        }
        (self.i0, self.nb) = (i0, nb);
    }

    /// Adds the decoded blocks' products with four Q8_K activation rows `b` (which hold those
    /// blocks) to `sumf`, lane `r` of `sumf[k]` for weight row `r` and activation row `k`,
    /// block by block in order (module docs).
    ///
    /// # Panics
    /// If an activation row is shorter than the decoded blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn accumulate(&self, b: [&[BlockQ8K]; 4], sumf: &mut [__m256; 4]) {
        let blocks = self.i0..self.i0 + self.nb;
        super::avx2::assert_rows_hold(&b, blocks.end);
        for (e, i) in blocks.enumerate() {
            let ys: [&BlockQ8K; 4] = std::array::from_fn(|k| &b[k][i]);
            let (u, sc) = (&self.u[e], &self.sc[e]);
            let mut acc = [_mm256_setzero_si256(); 4];
            // Columns per scale multiply: as many as the i16 lanes hold exactly (module
            // docs); Q4_K's scale serves two groups of 16.
            let span = match T {
                K4 => 8,
                K5 => 4,
                _ => 2,
            };
            for c0 in (0..COLS).step_by(span) {
                let s = sc[c0 / 4];
                let cols = &u[c0..c0 + span];
                for (a, y) in acc.iter_mut().zip(&ys) {
                    let q = y.qs.as_ptr() as *const i32;
                    let mut p = _mm256_setzero_si256();
                    for (j, &uc) in cols.iter().enumerate() {
                        // SAFETY: column c0 + j < 64 of a block of 256 quants.
                        let qv = unsafe { std::ptr::read_unaligned(q.add(c0 + j)) };
                        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(uc, _mm256_set1_epi32(qv)));
                    }
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(p, s));
                }
            }
            for ((a, y), acc_f) in acc.into_iter().zip(&ys).zip(sumf.iter_mut()) {
                let bs = y.bsums.as_ptr() as *const i32;
                // Σ_g pair[g] · bsum[g], two groups per i32 lane.
                let mut t = _mm256_setzero_si256();
                for (k, &pk) in self.pairs[e].iter().enumerate() {
                    // SAFETY: 16 bsums are 8 i32 pairs.
                    let bk = unsafe { std::ptr::read_unaligned(bs.add(k)) };
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(pk, _mm256_set1_epi32(bk)));
                }
                let da = _mm256_set1_ps(y.d);
                let v = if T == K6 {
                    let isum = _mm256_sub_epi32(a, _mm256_slli_epi32::<5>(t));
                    _mm256_mul_ps(_mm256_mul_ps(self.d[e], da), _mm256_cvtepi32_ps(isum))
                } else {
                    let v = _mm256_mul_ps(_mm256_mul_ps(self.d[e], da), _mm256_cvtepi32_ps(a));
                    let m = _mm256_mul_ps(_mm256_mul_ps(self.dmin[e], da), _mm256_cvtepi32_ps(t));
                    _mm256_sub_ps(v, m)
                };
                *acc_f = _mm256_add_ps(*acc_f, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::avx2::rows8x4;
    use crate::quant::kquants;

    /// Eight random rows of `nb` blocks of type `T` whose scales and quants include the
    /// extremes (all quant bits set, largest six-bit scales and mins, Q6_K's −128 scale).
    fn rows(ty: crate::GgmlType, nb: usize, seed: u32) -> Vec<Vec<u8>> {
        let bb = ty.block_bytes();
        let mut s = seed;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        (0..ROWS8)
            .map(|r| {
                let mut row: Vec<u8> = (0..nb * bb).map(|_| next() as u8).collect();
                for blk in row.chunks_exact_mut(bb) {
                    // Finite super-block scales (f16 exponent below the maximum).
                    let (dpos, has_dmin) = if ty == crate::GgmlType::Q6K {
                        (208, false)
                    } else {
                        (0, true)
                    };
                    blk[dpos + 1] &= 0x3b;
                    if has_dmin {
                        blk[3] &= 0x3b;
                    }
                    if r == 0 {
                        // Every quant and scale bit set (Q6_K: scales −1).
                        let end = if ty == crate::GgmlType::Q6K { 208 } else { bb };
                        let start = if ty == crate::GgmlType::Q6K { 0 } else { 4 };
                        blk[start..end].fill(0xff);
                    }
                    if r == 1 && ty == crate::GgmlType::Q6K {
                        blk[192..208].fill(0x80);
                    }
                }
                row
            })
            .collect()
    }

    fn acts(nb: usize, seed: u32) -> Vec<Vec<BlockQ8K>> {
        (0..4)
            .map(|k| {
                let x: Vec<f32> = (0..nb * 256)
                    .map(|i| {
                        let v = ((i as u32).wrapping_mul(2_654_435_761) ^ (seed + k)) % 2001;
                        (v as f32 - 1000.0) * 0.013
                    })
                    .collect();
                let mut out = vec![BlockQ8K::default(); nb];
                kquants::quantize_q8k(&x, &mut out);
                if k == 3 {
                    // The extreme activation: quants at 127, then at −127 (the largest i16
                    // lanes of either sign with the all-ones weight row).
                    for blk in &mut out {
                        for (j, q) in blk.qs.iter_mut().enumerate() {
                            *q = if j < 128 { 127 } else { -127 };
                        }
                        for (g, s) in blk.bsums.iter_mut().enumerate() {
                            *s = blk.qs[16 * g..16 * g + 16]
                                .iter()
                                .map(|&q| i16::from(q))
                                .sum();
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// Decoded runs give, lane for lane, the scalar reference's dot of every (weight row,
    /// activation row) pair, bit for bit, for rows of one run and of several (with a short
    /// last run).
    fn check<const T: u8>(ty: crate::GgmlType) {
        crate::quant::avx2::tests::assert_avx2();
        for nb in [1, 3, KRUN, 2 * KRUN + 3] {
            let w = rows(ty, nb, 0x9e37_79b9 ^ nb as u32);
            let a = acts(nb, nb as u32);
            let wr: [&[u8]; ROWS8] = std::array::from_fn(|r| &w[r][..]);
            let ar: [&[BlockQ8K]; 4] = std::array::from_fn(|k| &a[k][..]);
            let mut un = UnpackedK8::<T>::new();
            // SAFETY: AVX2 asserted above.
            let mut sumf = [unsafe { _mm256_setzero_ps() }; 4];
            for i0 in (0..nb).step_by(KRUN) {
                // SAFETY: AVX2 asserted; every row holds nb blocks.
                unsafe { un.unpack(&wr, i0, nb - i0) };
                // SAFETY: as above.
                unsafe { un.accumulate(ar, &mut sumf) };
            }
            // SAFETY: as above.
            let got = unsafe { rows8x4(sumf) };
            for (k, gk) in got.iter().enumerate() {
                for (r, &g) in gk.iter().enumerate() {
                    let want = kquants::vec_dot(ty, wr[r], ar[k]);
                    assert!(
                        g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                        "{ty} nb {nb} act {k} row {r}: {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn q4_k_runs_are_the_scalar_bits() {
        check::<K4>(crate::GgmlType::Q4K);
    }

    #[test]
    fn q5_k_runs_are_the_scalar_bits() {
        check::<K5>(crate::GgmlType::Q5K);
    }

    #[test]
    fn q6_k_runs_are_the_scalar_bits() {
        check::<K6>(crate::GgmlType::Q6K);
    }
}
