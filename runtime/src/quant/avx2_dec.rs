//! The AVX2 tier's decode product for Q5_0 and Q8_0 weights: one Q8_0 activation row against
//! a range of weight rows (the one-row kernels of `avx2`/`avx2_k` take one weight row per
//! call). Q5_0 matrices the engine repacked for this tier take [`super::avx2::q5r`] instead;
//! this kernel reads the file's Q5_0 rows where no copy is made (`POCKETPERF_REPACK=0`,
//! `--mlock`, a cold-start run) and Q8_0 rows always.
//!
//! What depends on the activation row alone is computed once per call instead of once per
//! weight row: its block scales widened to f32 and, for Q5_0, sixteen times each block's
//! quant sum. With that sum Q5_0's quants stay unsigned (`q + 16`, 0..=31) and a block's
//! integer dot is `Σ (q + 16) · y − 16 · Σ y`, one `vpmaddubsw` with no sign instructions.
//! The block sums are exact and each row's scaled block sums are added one by
//! one in block order with the scalar reference's operations, so every result is the scalar
//! tier's bits (`decode_rows_are_the_scalar_bits`, and `tier_identity` on the models).

use std::arch::x86_64::*;

use super::avx2::{dot_ss, dot_us, f16_to_f32, hsum_epi32, hsum4_epi32, q5_unsigned};
use super::blocks::BlockQ8_0;
use crate::GgmlType;

/// Most blocks of an activation row this path takes (longer rows keep the one-row kernels):
/// its per-row tables live on the stack.
pub(super) const MAX_BLOCKS: usize = 512;

/// Whether [`rows`] has a kernel for `ty` weights.
fn covers(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q5_0 | GgmlType::Q8_0)
}

/// Bytes of one block of `ty` (Q5_0 or Q8_0).
const fn block_bytes(five: bool) -> usize {
    if five { 22 } else { 34 }
}

/// The activation row's per-block values both kernels read: scales as f32 and sixteen times
/// each block's quant sum.
struct ActTables {
    d: [f32; MAX_BLOCKS],
    off: [i32; MAX_BLOCKS],
}

/// Weight rows `r0..r1` of `w` (`rb` bytes per row, each `a.len()` blocks of `ty`: Q5_0 or
/// Q8_0) times the activation row `a`, each result handed to `put(row, value)`; returns false
/// (nothing computed) for another type or a row of more than [`MAX_BLOCKS`] blocks.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` holds rows `r0..r1` of `rb ≥ a.len() · block bytes`
/// bytes each.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows(
    ty: GgmlType,
    w: &[u8],
    rb: usize,
    r0: usize,
    r1: usize,
    a: &[BlockQ8_0],
    mut put: impl FnMut(usize, f32),
) -> bool {
    let nb = a.len();
    if !covers(ty) || nb > MAX_BLOCKS {
        return false;
    }
    let five = ty == GgmlType::Q5_0;
    let mut t = ActTables {
        d: [0.0; MAX_BLOCKS],
        off: [0; MAX_BLOCKS],
    };
    for (i, y) in a.iter().enumerate() {
        t.d[i] = y.d.to_f32();
        if five {
            // SAFETY: a block holds 32 quant bytes.
            let q = unsafe { _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i) };
            t.off[i] = 16 * hsum_epi32(dot_us(_mm256_set1_epi8(1), q));
        }
    }
    // One row's worth of lines `dist` bytes past the next row, asked for before each row:
    // the kernel's instructions per byte keep too few loads in flight for a one-core stream
    // from memory to reach the read rate of a plain loop (criterion `matvec_head/Q8_0`).
    let dist = crate::quant::prefetch_distance();
    for r in r0..r1 {
        if dist > 0 {
            let s0 = ((r + 1) * rb + dist).min(w.len());
            super::prefetch(&w[s0..(s0 + rb).min(w.len())]);
        }
        // SAFETY: row r lies inside w (caller contract).
        let v = unsafe {
            let p = w.as_ptr().add(r * rb);
            if five {
                row::<true>(p, a, &t)
            } else {
                row::<false>(p, a, &t)
            }
        };
        put(r, v);
    }
    true
}

/// Block `k`'s integer dot against `y`, in eight i32 lanes; for Q5_0 before the offset term.
///
/// # Safety
/// A block of the type at `wp`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn block<const FIVE: bool>(wp: *const u8, y: __m256i) -> __m256i {
    // SAFETY: caller contract (Q5_0: scale, four high-bit bytes, 16 nibble bytes; Q8_0:
    // scale, 32 quants).
    unsafe {
        if FIVE {
            dot_us(q5_unsigned(wp.add(2), wp.add(6)), y)
        } else {
            dot_ss(_mm256_loadu_si256(wp.add(2) as *const __m256i), y)
        }
    }
}

/// The weight row at `wp` against the activation row `a` (with its tables `t`).
///
/// # Safety
/// As [`rows`], for the row at `wp`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row<const FIVE: bool>(wp: *const u8, a: &[BlockQ8_0], t: &ActTables) -> f32 {
    let bytes = block_bytes(FIVE);
    let nb = a.len();
    let quads = nb / 4;
    let mut sumf = 0.0f32;
    for j in 0..quads {
        let b0 = 4 * j;
        // SAFETY: blocks b0..b0 + 4 of the row and of `a` exist (caller contract); the
        // tables hold nb ≤ MAX_BLOCKS entries.
        unsafe {
            let wq = wp.add(b0 * bytes);
            let p: [__m256i; 4] = std::array::from_fn(|k| {
                let y = _mm256_loadu_si256(a[b0 + k].qs.as_ptr() as *const __m256i);
                block::<FIVE>(wq.add(k * bytes), y)
            });
            let mut sumi = hsum4_epi32(&p);
            if FIVE {
                let off = _mm_loadu_si128(t.off.as_ptr().add(b0) as *const __m128i);
                sumi = _mm_sub_epi32(sumi, off);
            }
            let wd = |k: usize| std::ptr::read_unaligned(wq.add(k * bytes) as *const u16) as i16;
            let dw = _mm_cvtph_ps(_mm_setr_epi16(wd(0), wd(1), wd(2), wd(3), 0, 0, 0, 0));
            let da = _mm_loadu_ps(t.d.as_ptr().add(b0));
            let mut v = [0.0f32; 4];
            _mm_storeu_ps(
                v.as_mut_ptr(),
                _mm_mul_ps(_mm_cvtepi32_ps(sumi), _mm_mul_ps(dw, da)),
            );
            // One by one in block order, as the scalar reference adds them.
            for x in v {
                sumf += x;
            }
        }
    }
    for (i, yb) in a.iter().enumerate().skip(quads * 4) {
        // SAFETY: block i of the row exists (caller contract).
        unsafe {
            let wb = wp.add(i * bytes);
            let y = _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i);
            let mut sumi = hsum_epi32(block::<FIVE>(wb, y));
            if FIVE {
                sumi -= t.off[i];
            }
            sumf += sumi as f32 * (f16_to_f32(wb) * t.d[i]);
        }
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::avx2::tests::assert_avx2;
    use crate::quant::blocks::QK;
    use crate::quant::{Isa, quantize_row_q8_0, scalar};
    use half::f16;

    /// `n` rows of `nb` blocks of `ty` (Q5_0 or Q8_0): random quants and high bits, scales
    /// finite between about 0.004 and 0.06; with `fill`, every quant byte and high-bit byte
    /// is `fill` instead.
    fn weights(ty: GgmlType, nb: usize, n: usize, seed: u64, fill: Option<u8>) -> Vec<u8> {
        crate::quant::avx2::tests::ggml_rows(ty, nb, n, seed, fill)
    }

    /// Each row of `w` against `a` through [`rows`] (rows `1..n`), against the scalar
    /// reference bit for bit; row 0 is outside the range asked for and stays untouched.
    fn check(ty: GgmlType, w: &[u8], n: usize, a: &[BlockQ8_0], what: &str) {
        let rb = w.len() / n;
        let mut got = vec![f32::NAN; n];
        // SAFETY: AVX2/FMA/F16C asserted by the callers; w holds n rows of rb bytes.
        let done = unsafe { rows(ty, w, rb, 1, n, a, |r, v| got[r] = v) };
        assert!(done, "{ty}: {what}");
        for (r, g) in got.iter().enumerate().skip(1) {
            let row = &w[r * rb..(r + 1) * rb];
            let want = match ty {
                GgmlType::Q5_0 => scalar::vec_dot_q5_0_q8_0(row, a),
                _ => scalar::vec_dot_q8_0_q8_0(row, a),
            };
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "{ty}, {what}, row {r}: {g} vs {want}"
            );
        }
        assert!(got[0].is_nan(), "{ty}, {what}: row 0 was written");
    }

    #[test]
    fn decode_rows_are_the_scalar_bits() {
        assert_avx2();
        // Block counts with and without a partial quad; an odd count of rows asked for
        // leaves one row alone.
        for (nb, n) in [(28usize, 8usize), (30, 5), (3, 6), (152, 4)] {
            let mut rng = pocketperf_testkit::gguf::Rng::new(nb as u64);
            let x: Vec<f32> = (0..nb * QK)
                .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
                .collect();
            let mut a = vec![BlockQ8_0::default(); nb];
            quantize_row_q8_0(Isa::Scalar, &x, &mut a);
            for ty in [GgmlType::Q5_0, GgmlType::Q8_0] {
                let w = weights(ty, nb, n, 7 + nb as u64, None);
                check(ty, &w, n, &a, &format!("{nb} blocks"));
            }
        }
    }

    /// The extreme block sums: Q5_0 quants all 31 or all 0 (the offset term at its largest
    /// either way), Q8_0 quants all −1 or all +127 (bytes 0xFF, 0x7F), against activation
    /// blocks of all +127 and all −127.
    #[test]
    fn decode_rows_hold_the_extreme_sums() {
        assert_avx2();
        let nb = 6;
        let a: Vec<BlockQ8_0> = (0..nb)
            .map(|b| {
                let q = if b % 2 == 0 { 127i8 } else { -127 };
                BlockQ8_0 {
                    d: f16::from_f32(0.01),
                    qs: [q; QK],
                }
            })
            .collect();
        for (ty, fills) in [
            (GgmlType::Q5_0, [0xFFu8, 0x00]),
            (GgmlType::Q8_0, [0xFF, 0x7F]),
        ] {
            for fill in fills {
                let w = weights(ty, nb, 3, 1, Some(fill));
                check(ty, &w, 3, &a, &format!("bytes {fill:#04x}"));
            }
        }
    }

    #[test]
    fn other_types_and_long_rows_are_declined() {
        assert_avx2();
        let a = vec![BlockQ8_0::default(); MAX_BLOCKS + 1];
        let w = vec![0u8; 34 * (MAX_BLOCKS + 1)];
        // SAFETY: AVX2 asserted; nothing is read when the call declines.
        unsafe {
            assert!(!rows(GgmlType::Q4_0, &w, w.len(), 0, 1, &a[..4], |_, _| {}));
            assert!(!rows(GgmlType::Q8_0, &w, w.len(), 0, 1, &a, |_, _| {}));
        }
    }
}
