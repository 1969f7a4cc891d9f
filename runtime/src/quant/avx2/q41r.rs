//! The AVX2 tier's layout for Q4_1 matrices, rewritten at load ([`super::super::repack`]),
//! and the kernels that read it: the decode product of one Q8_1 activation row against a
//! range of weight rows, and the unpacking of a band for the prefill tiles
//! ([`super::Unpacked8`]).
//!
//! The rows are taken in bands of eight; a band's blocks follow one another, each the eight
//! rows' block of the same columns in as many bytes as in ggml (160):
//! - bytes 0..128: four 32-byte chunks; chunk `c` holds the 16 nibble bytes of row `c`, then
//!   those of row `c + 4` (element `j` in the low nibble of byte `j`, element `j + 16` in its
//!   high nibble, as in the file), so one load, a mask and a shift give two rows' low and high
//!   halves, which meet the activation block's halves broadcast to both lanes;
//! - bytes 128..144: the eight rows' f16 scales, in row order; 144..160: their f16 mins.
//!
//! The rows past the last whole band (`rows % 8`) follow the bands as in the file: a band
//! takes eight rows' bytes, so row `r` of that tail starts at `r` times the ggml row size in
//! the copy as in the file. A band is one sequential stream for the decode (the ggml rows are
//! eight), and a block's eight scales and mins are one load each. Every block's integer sum is
//! exact, each lane forms `(d_w · d_a) · sumi + m_w · s_a` and adds it in block order, as the
//! scalar reference does, so the results are the scalar tier's bits (`tests`, and the
//! repacked-matrix tests of `quant_props` through [`super::super::matmul`]).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::{ROWS8, UNPACKED_BLOCKS, Unpacked8, transpose8x8_epi32};
use crate::quant::blocks::{BlockQ4_1, BlockQ8_1};

/// Bytes of a band's block (eight ggml Q4_1 blocks of 20 bytes).
pub(in crate::quant) const BLOCK: usize = 160;

/// Most blocks of a row the decode takes (its per-call table of activation scales lives on
/// the stack); wider Q4_1 matrices are not repacked for this tier.
pub(in crate::quant) const MAX_BLOCKS: usize = 512;

/// Bytes of one ggml Q4_1 block (the file's layout, [`BlockQ4_1`]).
const GGML_BLOCK: usize = std::mem::size_of::<BlockQ4_1>();

/// The rows of a `rows`-row matrix that lie in whole bands (the rest keep the ggml layout).
pub(in crate::quant) const fn band_rows(rows: usize) -> usize {
    rows / ROWS8 * ROWS8
}

/// Rewrites eight ggml Q4_1 rows of `nb` blocks (`src`, one after the other) into one band of
/// this module's layout (`dst`, as many bytes).
///
/// # Panics
/// If `src` or `dst` is not eight rows of `nb` blocks.
pub(in crate::quant) fn repack_band(src: &[u8], nb: usize, dst: &mut [u8]) {
    let rb = nb * GGML_BLOCK;
    assert_eq!(src.len(), ROWS8 * rb, "eight Q4_1 rows of {nb} blocks");
    assert_eq!(dst.len(), src.len(), "a band of {nb} blocks");
    for (i, out) in dst.chunks_exact_mut(BLOCK).enumerate() {
        for r in 0..ROWS8 {
            let b = &src[r * rb + i * GGML_BLOCK..r * rb + (i + 1) * GGML_BLOCK];
            let q = 32 * (r % 4) + 16 * (r / 4);
            out[q..q + 16].copy_from_slice(&b[4..]);
            out[128 + 2 * r..130 + 2 * r].copy_from_slice(&b[..2]);
            out[144 + 2 * r..146 + 2 * r].copy_from_slice(&b[2..4]);
        }
    }
}

/// Rewrites a run of ggml rows `src` (rows `first..`, `first` a multiple of eight) of a
/// `rows`-row matrix of `nb`-block rows into `dst` (as many bytes): the whole bands of
/// [`band_rows`]`(rows)` by [`repack_band`], the rest copied.
///
/// # Panics
/// If `first` is not a multiple of eight, the run not whole rows, or `dst` not its size.
pub(in crate::quant) fn repack_rows(
    src: &[u8],
    nb: usize,
    first: usize,
    rows: usize,
    dst: &mut [u8],
) {
    let rb = nb * GGML_BLOCK;
    assert!(
        first.is_multiple_of(ROWS8) && src.len().is_multiple_of(rb) && dst.len() == src.len(),
        "Q4_1 run of {} bytes from row {first}",
        src.len()
    );
    let n = src.len() / rb.max(1);
    let banded = band_rows(rows).saturating_sub(first).min(n) / ROWS8 * ROWS8;
    let (sb, st) = src.split_at(banded * rb);
    let (db, dt) = dst.split_at_mut(banded * rb);
    for (s, d) in sb
        .chunks_exact(ROWS8 * rb)
        .zip(db.chunks_exact_mut(ROWS8 * rb))
    {
        repack_band(s, nb, d);
    }
    dt.copy_from_slice(st);
}

/// Chunk `c` of the band block at `p`, split: rows `c` and `c + 4`'s low nibbles (elements
/// 0..16, one row per lane), then their high nibbles (elements 16..32).
///
/// # Safety
/// AVX2 present; a whole band block at `p`; `c < 4`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn chunk(p: *const u8, c: usize) -> (__m256i, __m256i) {
    let nib = _mm256_set1_epi8(0x0F);
    // SAFETY: caller contract (32 bytes at p + 32c).
    let q = unsafe { _mm256_loadu_si256(p.add(32 * c) as *const __m256i) };
    (
        _mm256_and_si256(q, nib),
        _mm256_and_si256(_mm256_srli_epi16(q, 4), nib),
    )
}

/// The eight rows' products with one activation block: lanes `r` = weight row `r` of the band
/// block at `p`, `(d_w · d_a) · sumi + m_w · s_a`, the terms in the scalar reference's order.
///
/// # Safety
/// AVX2, FMA and F16C present; a whole band block at `p`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn block(p: *const u8, y: &BlockQ8_1, da: f32, sa: f32) -> __m256 {
    // SAFETY: caller contract (160 bytes at p); the activation block holds 32 quants.
    unsafe {
        let yq = y.qs.as_ptr() as *const __m128i;
        let ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq));
        let yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq.add(1)));
        // Chunk c: rows c and c + 4, eight i16 lanes each, every lane four products
        // (at most 4 · 15 · 128 = 7 680 in magnitude).
        let part = |c: usize| {
            let (lo, hi) = chunk(p, c);
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi))
        };
        // Two levels of pair adds (at most 30 720: exact) leave per 128-bit half two lanes
        // for each of rows 0..4 (then 4..8), which the widening pair add makes one.
        let h = _mm256_hadd_epi16(
            _mm256_hadd_epi16(part(0), part(1)),
            _mm256_hadd_epi16(part(2), part(3)),
        );
        let sumi = _mm256_cvtepi32_ps(_mm256_madd_epi16(h, _mm256_set1_epi16(1)));
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(p.add(128) as *const __m128i));
        let mw = _mm256_cvtph_ps(_mm_loadu_si128(p.add(144) as *const __m128i));
        let dd = _mm256_mul_ps(dw, _mm256_set1_ps(da));
        let m = _mm256_mul_ps(mw, _mm256_set1_ps(sa));
        _mm256_add_ps(_mm256_mul_ps(dd, sumi), m)
    }
}

/// Weight rows `r0..r1` (below `bands`, a multiple of eight: the rows in whole bands) of the
/// repacked Q4_1 matrix `w` (`rb` = the ggml row size, `a.len()` blocks) times the Q8_1
/// activation row `a`, each result handed to `put(row, value)`: the scalar reference's bits.
/// A band only partly in the range is computed whole and its other rows dropped.
///
/// # Safety
/// AVX2, FMA and F16C present; `w` holds the bands of rows `0..bands`.
///
/// # Panics
/// If `a` has more than [`MAX_BLOCKS`] blocks, `rb` is not its ggml row size, `bands` is not a
/// multiple of eight or `r0..r1` not below it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) unsafe fn rows(
    w: &[u8],
    rb: usize,
    bands: usize,
    r0: usize,
    r1: usize,
    a: &[BlockQ8_1],
    mut put: impl FnMut(usize, f32),
) {
    let nb = a.len();
    assert!(nb <= MAX_BLOCKS, "activation row of {nb} blocks");
    assert_eq!(rb, nb * GGML_BLOCK, "repacked Q4_1 row of {nb} blocks");
    assert!(
        bands.is_multiple_of(ROWS8) && r0 <= r1 && r1 <= bands && w.len() >= bands * rb,
        "rows {r0}..{r1} of {bands} banded rows"
    );
    // The activation scales and sums widened once per call, not once per band.
    let mut t = [const { MaybeUninit::<(f32, f32)>::uninit() }; MAX_BLOCKS];
    for (e, y) in t.iter_mut().zip(a) {
        e.write((y.d.to_f32(), y.s.to_f32()));
    }
    let mut band = r0 / ROWS8 * ROWS8;
    while band < r1 {
        let mut sumf = _mm256_setzero_ps();
        // SAFETY: band < bands: its nb blocks lie in w (checked above); t[i] written for
        // i < nb.
        unsafe {
            let bp = w.as_ptr().add(band * rb);
            for (i, y) in a.iter().enumerate() {
                let (da, sa) = t.get_unchecked(i).assume_init();
                sumf = _mm256_add_ps(sumf, block(bp.add(i * BLOCK), y, da, sa));
            }
        }
        let mut v = [0.0f32; ROWS8];
        // SAFETY: eight floats.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), sumf) };
        for (k, &x) in v.iter().enumerate() {
            if (r0..r1).contains(&(band + k)) {
                put(band + k, x);
            }
        }
        band += ROWS8;
    }
}

impl Unpacked8 {
    /// [`Unpacked8::unpack`] of blocks `i0..i0 + nb` of the band `w` of a repacked Q4_1
    /// matrix (its eight rows' bytes).
    ///
    /// # Safety
    /// AVX2, FMA and F16C present.
    ///
    /// # Panics
    /// If the band does not hold blocks `i0..i0 + nb`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack_q41r(&mut self, w: &[u8], i0: usize, nb: usize) {
        let nb = nb.min(UNPACKED_BLOCKS);
        assert!(w.len() >= (i0 + nb) * BLOCK, "band of {} bytes", w.len());
        for i in 0..nb {
            // SAFETY: block i0 + i of the band lies in w (checked above).
            let p = unsafe { w.as_ptr().add((i0 + i) * BLOCK) };
            let mut rows = [_mm256_setzero_si256(); ROWS8];
            for c in 0..4 {
                // SAFETY: as above (chunk c of the block).
                let (lo, hi) = unsafe { chunk(p, c) };
                // A row's low halves in the low lane, its high halves in the high one, as
                // `nibbles` leaves a ggml block.
                rows[c] = _mm256_permute2x128_si256::<0x20>(lo, hi);
                rows[c + 4] = _mm256_permute2x128_si256::<0x31>(lo, hi);
            }
            self.u[i] = transpose8x8_epi32(rows);
            // SAFETY: as above (the scales at 128..144, the mins at 144..160).
            unsafe {
                self.dw[i] = _mm256_cvtph_ps(_mm_loadu_si128(p.add(128) as *const __m128i));
                self.mw[i] = _mm256_cvtph_ps(_mm_loadu_si128(p.add(144) as *const __m128i));
            }
        }
        (self.i0, self.nb, self.five) = (i0, nb, false);
    }
}

#[cfg(test)]
mod tests;
