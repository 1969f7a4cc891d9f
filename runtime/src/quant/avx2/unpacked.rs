//! The AVX2 tier's prefill operand: eight weight rows of Q4_0, Q4_1 or Q5_0 unpacked once
//! per run of blocks ([`Unpacked8`]) for every quad of activation rows that meets them, and
//! the exact block sums the quads take from it.

use std::arch::x86_64::*;

use super::{ROWS8, halves8, nibbles, q5_unsigned, scale_min8};
use crate::GgmlType;
use crate::quant::blocks::{BlockQ8_0, BlockQ8_1, QK};
use crate::quant::{Q8_1Aux, Q8Aux};

/// Most blocks [`Unpacked8`] holds (2048 columns: 16 KiB of quants, in L1).
pub(in crate::quant) const UNPACKED_BLOCKS: usize = 64;

/// The 8×8 transpose of 32-bit lanes: lane `r` of output `j` is lane `j` of input `r`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(in crate::quant) fn transpose8x8_epi32(r: [__m256i; 8]) -> [__m256i; 8] {
    // Pairs of rows interleaved, then quads, then the 128-bit halves exchanged.
    let t: [__m256i; 8] = std::array::from_fn(|k| {
        let (x, y) = (r[(k / 2) * 2], r[(k / 2) * 2 + 1]);
        if k % 2 == 0 {
            _mm256_unpacklo_epi32(x, y)
        } else {
            _mm256_unpackhi_epi32(x, y)
        }
    });
    // t[0] = lo(r0, r1), t[1] = hi(r0, r1), t[2] = lo(r2, r3), t[3] = hi(r2, r3), …
    let q = |a: __m256i, b: __m256i, hi: bool| {
        if hi {
            _mm256_unpackhi_epi64(a, b)
        } else {
            _mm256_unpacklo_epi64(a, b)
        }
    };
    // Lanes 0..4 of rows 0..4 (per 128-bit half: columns j and j + 4).
    let s = [
        q(t[0], t[2], false),
        q(t[0], t[2], true),
        q(t[1], t[3], false),
        q(t[1], t[3], true),
        q(t[4], t[6], false),
        q(t[4], t[6], true),
        q(t[5], t[7], false),
        q(t[5], t[7], true),
    ];
    [
        _mm256_permute2x128_si256::<0x20>(s[0], s[4]),
        _mm256_permute2x128_si256::<0x20>(s[1], s[5]),
        _mm256_permute2x128_si256::<0x20>(s[2], s[6]),
        _mm256_permute2x128_si256::<0x20>(s[3], s[7]),
        _mm256_permute2x128_si256::<0x31>(s[0], s[4]),
        _mm256_permute2x128_si256::<0x31>(s[1], s[5]),
        _mm256_permute2x128_si256::<0x31>(s[2], s[6]),
        _mm256_permute2x128_si256::<0x31>(s[3], s[7]),
    ]
}

/// Blocks of eight Q4_0, Q4_1 or Q5_0 weight rows unpacked once for every activation quad of
/// a prefill: block `i0 + i`'s unsigned quants (0..16 or 0..32) in `u[i]`, transposed by
/// groups of four (lane `r` of `u[i][j]` holds quants 4j..4j + 4 of row `r`), its eight
/// scales widened in `dw[i]` and, for Q4_1, its eight mins in `mw[i]`.
pub(in crate::quant) struct Unpacked8 {
    pub(super) u: [[__m256i; ROWS8]; UNPACKED_BLOCKS],
    pub(super) dw: [__m256; UNPACKED_BLOCKS],
    pub(super) mw: [__m256; UNPACKED_BLOCKS],
    pub(super) i0: usize,
    pub(super) nb: usize,
    pub(super) five: bool,
}

impl Unpacked8 {
    pub(in crate::quant) fn new() -> Self {
        // SAFETY: all-zero bits are a valid value of every field (vectors, integers, false).
        unsafe { std::mem::zeroed() }
    }

    /// Whether [`Self::accumulate`] takes `ty` weights (those with an offset, against Q8_0
    /// rows and their stored entries).
    pub(in crate::quant) fn covers(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0)
    }

    /// Whether [`Self::unpack`] takes `ty` weights: those of [`Self::covers`] and Q4_1
    /// (against Q8_1 rows, [`Self::accumulate_q4_1`]).
    pub(in crate::quant) fn takes(ty: GgmlType) -> bool {
        Self::covers(ty) || ty == GgmlType::Q4_1
    }

    /// Unpacks blocks `i0..i0 + nb` (`nb` at most [`UNPACKED_BLOCKS`]) of the eight `ty` rows
    /// `w` (Q4_0, Q4_1 or Q5_0, see [`Self::takes`]).
    ///
    /// # Safety
    /// AVX2, FMA and F16C present; every row holds blocks `i0..i0 + nb` of `ty`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack(
        &mut self,
        ty: GgmlType,
        w: &[&[u8]; ROWS8],
        i0: usize,
        nb: usize,
    ) {
        let (five, mins) = (ty == GgmlType::Q5_0, ty == GgmlType::Q4_1);
        // Each block ends with its 16 nibble bytes (after the scale, and Q4_1's min or Q5_0's
        // fifth bits).
        let bytes = ty.block_bytes();
        let qs = bytes - 16;
        let nb = nb.min(UNPACKED_BLOCKS);
        for i in 0..nb {
            let rows: [__m256i; ROWS8] = std::array::from_fn(|r| {
                // SAFETY: block i0 + i of every row (caller contract).
                unsafe {
                    let p = w[r].as_ptr().add((i0 + i) * bytes);
                    if five {
                        q5_unsigned(p.add(2), p.add(qs))
                    } else {
                        nibbles(p.add(qs))
                    }
                }
            });
            self.u[i] = transpose8x8_epi32(rows);
            if mins {
                // SAFETY: as above.
                (self.dw[i], self.mw[i]) = unsafe { scale_min8(w, i0 + i, bytes) };
            } else {
                // SAFETY: as above.
                self.dw[i] = unsafe { halves8(w, i0 + i, bytes, 0) };
            }
        }
        (self.i0, self.nb, self.five) = (i0, nb, five);
    }

    /// Adds the unpacked blocks' products with four Q8_0 activation rows `b` (which hold
    /// those blocks; `aux[k][j]` the [`Q8Aux`] entry of row `k`'s block `i0 + j`, the first
    /// unpacked block being `i0`) to `sumf`, lane `r` of `sumf[k]` for
    /// weight row `r` and activation row `k`: each block's integer sum is `Σ u·q − off·Σ q`
    /// (`off` 8 or 16), the correction taken from the activation's stored quant sum, so the
    /// weights need no sign registers; the lane then takes `sumi · (d_w · d_a)` as the
    /// scalar reference does, in block order.
    ///
    /// # Panics
    /// If an activation row (or its entries) is shorter than the unpacked blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) fn accumulate(
        &self,
        b: [&[BlockQ8_0]; 4],
        aux: [&[Q8Aux]; 4],
        sumf: &mut [__m256; 4],
    ) {
        if self.five {
            self.accumulate_off::<0>(b, aux, sumf)
        } else {
            self.accumulate_off::<1>(b, aux, sumf)
        }
    }

    /// [`Self::accumulate`] with the offset `16 >> HALVE`, whose term `off · Σq` is the
    /// entry's [`Q8Aux::off16`] shifted right by `HALVE` (exact: it is even). The rows are
    /// cut to the unpacked blocks first and the sums kept in locals, so the loop has no
    /// bounds checks and writes `sumf` once.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn accumulate_off<const HALVE: i32>(
        &self,
        b: [&[BlockQ8_0]; 4],
        aux: [&[Q8Aux]; 4],
        sumf: &mut [__m256; 4],
    ) {
        let nb = self.nb;
        let (b, aux) = cut_rows(b, aux, self.i0, nb);
        let mut acc = *sumf;
        for (e, (u, &dw)) in self.u[..nb].iter().zip(&self.dw[..nb]).enumerate() {
            for (acc, (y, ya)) in acc.iter_mut().zip(block_of(&b, &aux, e)) {
                let sum = block_sums(u, &y.qs);
                // off · Σq (at most 16 · 32 · 127: no overflow).
                let c = _mm256_set1_epi32(ya.off16 >> HALVE);
                let sumi = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, c));
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(ya.d));
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(dd, sumi));
            }
        }
        *sumf = acc;
    }

    /// [`Self::accumulate`] for unpacked Q4_1 blocks and four Q8_1 activation rows `b`
    /// (`aux[k][j]` the [`Q8_1Aux`] entry of row `k`'s block `i0 + j`): lane `r` of `sumf[k]`
    /// takes `(d_w · d_a) · sumi + m_w · s_a` per block in block order (the quants are the
    /// unsigned nibbles themselves: no offset), as the scalar reference does. The entries give
    /// `d_a` and `s_a` already widened, one broadcast each.
    ///
    /// # Panics
    /// If an activation row (or its entries) is shorter than the unpacked blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) fn accumulate_q4_1(
        &self,
        b: [&[BlockQ8_1]; 4],
        aux: [&[Q8_1Aux]; 4],
        sumf: &mut [__m256; 4],
    ) {
        let nb = self.nb;
        // Cut to the unpacked blocks, the sums in locals: no bounds checks, one write.
        let (b, aux) = cut_rows(b, aux, self.i0, nb);
        let mut acc = *sumf;
        let unpacked = self.u[..nb].iter().zip(&self.dw[..nb]).zip(&self.mw[..nb]);
        for (e, ((u, &dw), &mw)) in unpacked.enumerate() {
            for (acc, (y, ya)) in acc.iter_mut().zip(block_of(&b, &aux, e)) {
                let sumi = _mm256_cvtepi32_ps(block_sums(u, &y.qs));
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(ya.d));
                let m = _mm256_mul_ps(mw, _mm256_set1_ps(ya.s));
                *acc = _mm256_add_ps(*acc, _mm256_add_ps(_mm256_mul_ps(dd, sumi), m));
            }
        }
        *sumf = acc;
    }
}

/// Four activation rows cut to blocks `i0..i0 + nb` and their entries to the first `nb`
/// (inlined, so the loops that index the result know the lengths and need no bounds checks).
///
/// # Panics
/// If a row or its entries are shorter.
#[inline(always)]
fn cut_rows<'a, A, B>(
    b: [&'a [A]; 4],
    aux: [&'a [B]; 4],
    i0: usize,
    nb: usize,
) -> ([&'a [A]; 4], [&'a [B]; 4]) {
    for (bk, ak) in b.iter().zip(&aux) {
        assert!(
            bk.len() >= i0 + nb && ak.len() >= nb,
            "activation row of {} blocks, {} entries",
            bk.len(),
            ak.len()
        );
    }
    let r = i0..i0 + nb;
    (
        [
            &b[0][r.clone()],
            &b[1][r.clone()],
            &b[2][r.clone()],
            &b[3][r],
        ],
        [&aux[0][..nb], &aux[1][..nb], &aux[2][..nb], &aux[3][..nb]],
    )
}

/// Block `e` of each of the four rows, with its entry.
#[inline(always)]
fn block_of<'a, A, B>(b: &[&'a [A]; 4], aux: &[&'a [B]; 4], e: usize) -> [(&'a A, &'a B); 4] {
    [
        (&b[0][e], &aux[0][e]),
        (&b[1][e], &aux[1][e]),
        (&b[2][e], &aux[2][e]),
        (&b[3][e], &aux[3][e]),
    ]
}

/// Lane `r`: the exact integer sum `Σ u · q` of an unpacked block's row `r` (`u`, transposed
/// as [`Unpacked8`] keeps it; unsigned quants below 32) against the 32 activation quants `q`.
/// Column `j` gives the eight rows' quants 4j..4j + 4 times the activation's, four i8
/// products per row in two i16 lanes; four columns' lanes are added exactly (each lane at
/// most 2 · 31 · 127, so four at most 31 496), then widened.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_sums(u: &[__m256i; ROWS8], q: &[i8; QK]) -> __m256i {
    let yp = q.as_ptr() as *const i32;
    let m: [__m256i; 8] = std::array::from_fn(|j| {
        // SAFETY: 32 quants: eight 4-byte groups.
        let q = unsafe { std::ptr::read_unaligned(yp.add(j)) };
        _mm256_maddubs_epi16(u[j], _mm256_set1_epi32(q))
    });
    let lo = _mm256_add_epi16(_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3]));
    let hi = _mm256_add_epi16(_mm256_add_epi16(m[4], m[5]), _mm256_add_epi16(m[6], m[7]));
    let ones = _mm256_set1_epi16(1);
    _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones))
}
