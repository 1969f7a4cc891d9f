//! The AVX2 tier's layout for Q5_0 matrices, rewritten at load ([`super::super::repack`]),
//! and the kernels that read it: the decode product of one Q8_0 activation row against a
//! range of weight rows, and the unpacking of eight rows for the prefill tiles
//! ([`super::Unpacked8`]).
//!
//! A group of four ggml blocks (88 bytes, as many as the blocks) becomes:
//! - bytes 0..64: two 32-byte chunks; chunk `c` holds the 16 nibble bytes of block `2c`, then
//!   those of block `2c + 1` (element `j` in the low nibble of byte `j`, element `j + 16` in
//!   its high nibble, as in the file), so one load and a mask give both blocks' low halves in
//!   the two lanes of a register, and a shift and a mask their high halves;
//! - bytes 64..80: the fifth bits, byte `j` holding bit [`h_bit`]`(k, h)` = the fifth bit of
//!   element `j + 16h` of block `k`: after the high nibbles are moved down for the second
//!   lane, one shift and one mask bring a chunk half's bits to the 16 they add;
//! - bytes 80..88: the four f16 scales in the order [`SLOT`] (blocks 0, 2, 1, 3), the order in
//!   which the two lanes of the block sums come out of the horizontal adds.
//!
//! Blocks past the row's end in its last group are zero. The decode takes the activation row
//! rearranged once per call to match the chunks (low halves of two blocks, then their high
//! halves), so a chunk costs two unsigned-by-signed products and an add instead of two blocks'
//! bit expansion, nibble split and lane moves. Every block's integer sum is exact, every
//! product is `sumi · (d_w · d_a)`, and a row's products are added one by one in block order,
//! so the results are the scalar tier's bits (`tests`, and the repacked-matrix tests of
//! `quant_props` through [`super::super::matmul`]).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::{ROWS8, UNPACKED_BLOCKS, Unpacked8, bits_to_bytes, nibbles, transpose8x8_epi32};
use crate::quant::Q8Aux;
use crate::quant::blocks::BlockQ8_0;

/// Bytes of one group of four blocks.
pub(in crate::quant) const GROUP: usize = 88;

/// Most blocks of a row the decode takes (its per-row tables live on the stack); wider Q5_0
/// matrices are not repacked for this tier.
pub(in crate::quant) const MAX_BLOCKS: usize = 512;

/// Where block `k` of a group keeps its scale among the group's four (and where its sum lands
/// in the lanes of [`group_sums`]).
const SLOT: [usize; 4] = [0, 2, 1, 3];

/// Lane of block `b` (0..8) of a pair of groups in the sums of [`rows`]: the first group's
/// blocks 0, 2 in lanes 0, 1 and 1, 3 in lanes 4, 5; the second group's in 2, 3 and 6, 7.
const LANE: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// Weight rows whose products [`rows`] adds up side by side.
const ROWS_IN_FLIGHT: usize = 4;

/// Bit of a fifth-bit byte `j` that holds block `k`'s element `j + 16h`.
const fn h_bit(k: usize, h: usize) -> usize {
    4 * (k % 2) + 2 * (k / 2) + h
}

/// Bytes of a repacked row of `nb` blocks.
pub(in crate::quant) const fn row_bytes(nb: usize) -> usize {
    nb.div_ceil(4) * GROUP
}

/// Rewrites one ggml Q5_0 row of `nb` blocks (`src`, 22 bytes each) into the layout of this
/// module (`dst`, [`row_bytes`]). The reference of [`repack_row_simd`].
///
/// # Panics
/// If `src` is not `nb` blocks or `dst` not [`row_bytes`]`(nb)`.
#[cfg(test)]
pub(in crate::quant) fn repack_row(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert_eq!(dst.len(), row_bytes(nb), "repacked row");
    dst.fill(0);
    for (g, out) in dst.chunks_exact_mut(GROUP).enumerate() {
        for k in 0..4 {
            let b = 4 * g + k;
            if b >= nb {
                break;
            }
            let s = &src[22 * b..22 * b + 22];
            let o = 32 * (k / 2) + 16 * (k % 2);
            out[o..o + 16].copy_from_slice(&s[6..22]);
            out[80 + 2 * SLOT[k]..82 + 2 * SLOT[k]].copy_from_slice(&s[..2]);
            let qh = u32::from_le_bytes([s[2], s[3], s[4], s[5]]);
            for j in 0..16 {
                for h in 0..2 {
                    let bit = (qh >> (j + 16 * h)) & 1;
                    out[64 + j] |= (bit as u8) << h_bit(k, h);
                }
            }
        }
    }
}

/// [`repack_row`] with the fifth bits spread by vector compares: the same bytes (unit test
/// `simd_repack_writes_the_reference_bytes`), fast enough for a model's Q5_0 matrices at load.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
///
/// # Panics
/// As [`repack_row`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) unsafe fn repack_row_simd(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert_eq!(dst.len(), row_bytes(nb), "repacked row");
    dst.fill(0);
    for (g, out) in dst.chunks_exact_mut(GROUP).enumerate() {
        let mut hb = _mm_setzero_si128();
        for k in 0..(nb - 4 * g).min(4) {
            let s = &src[22 * (4 * g + k)..22 * (4 * g + k) + 22];
            let o = 32 * (k / 2) + 16 * (k % 2);
            out[o..o + 16].copy_from_slice(&s[6..22]);
            out[80 + 2 * SLOT[k]..82 + 2 * SLOT[k]].copy_from_slice(&s[..2]);
            // SAFETY: the block's four fifth-bit bytes are at s[2..6].
            let m = unsafe { bits_to_bytes(s[2..].as_ptr()) };
            let pick = _mm256_setr_m128i(
                _mm_set1_epi8((1u8 << h_bit(k, 0)) as i8),
                _mm_set1_epi8((1u8 << h_bit(k, 1)) as i8),
            );
            let m = _mm256_and_si256(m, pick);
            let lanes = _mm_or_si128(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
            hb = _mm_or_si128(hb, lanes);
        }
        // SAFETY: `out` holds GROUP bytes; the fifth bits are at 64..80.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().add(64) as *mut __m128i, hb) };
    }
}

/// Block `K`'s 32 unsigned quants (0..=31, element order) of the repacked group at `gp`.
///
/// # Safety
/// AVX2 present; a whole group at `gp`; `K < 4`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn unsigned<const K: usize>(gp: *const u8) -> __m256i {
    // SAFETY: caller contract (the block's nibbles at 32 (K / 2) + 16 (K % 2), bits at 64).
    unsafe {
        let h = _mm_loadu_si128(gp.add(64) as *const __m128i);
        // Blocks 1 and 3 keep their bits in the high half of each byte (h_bit).
        let h = if K % 2 == 1 { _mm_srli_epi16(h, 4) } else { h };
        // Bits 0 and 1 (blocks 0, 1) or 2 and 3 (blocks 2, 3) moved to bit 4.
        let (lo, hi) = if K < 2 {
            (_mm_slli_epi16(h, 4), _mm_slli_epi16(h, 3))
        } else {
            (_mm_slli_epi16(h, 2), _mm_slli_epi16(h, 1))
        };
        let sixteen = _mm_set1_epi8(0x10);
        let q = nibbles(gp.add(32 * (K / 2) + 16 * (K % 2)));
        let bits = _mm256_setr_m128i(_mm_and_si128(lo, sixteen), _mm_and_si128(hi, sixteen));
        _mm256_or_si256(q, bits)
    }
}

impl Unpacked8 {
    /// [`Unpacked8::unpack`] of blocks `i0..i0 + nb` of eight repacked Q5_0 rows `w`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C present; every row holds the groups of blocks `i0..i0 + nb`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack_q5r(&mut self, w: &[&[u8]; ROWS8], i0: usize, nb: usize) {
        let nb = nb.min(UNPACKED_BLOCKS);
        for i in 0..nb {
            let (g, k) = ((i0 + i) / 4, (i0 + i) % 4);
            let gp = |r: usize| w[r][g * GROUP..].as_ptr();
            // SAFETY: group g of every row (caller contract).
            let rows: [__m256i; ROWS8] = unsafe {
                match k {
                    0 => std::array::from_fn(|r| unsigned::<0>(gp(r))),
                    1 => std::array::from_fn(|r| unsigned::<1>(gp(r))),
                    2 => std::array::from_fn(|r| unsigned::<2>(gp(r))),
                    _ => std::array::from_fn(|r| unsigned::<3>(gp(r))),
                }
            };
            self.u[i] = transpose8x8_epi32(rows);
            let h = |r: usize| {
                // SAFETY: as above (the group's scales at 80..88).
                let at = unsafe { w[r].as_ptr().add(g * GROUP + 80 + 2 * SLOT[k]) };
                // SAFETY: two readable bytes at `at`.
                u16::from_le(unsafe { std::ptr::read_unaligned(at as *const u16) }) as i16
            };
            let v = _mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7));
            self.dw[i] = _mm256_cvtph_ps(v);
        }
        (self.i0, self.nb, self.five) = (i0, nb, true);
    }
}

/// The activation row rearranged for [`rows`]: each pair of blocks' low halves, then their
/// high halves (`y`), and per pair of groups the blocks' scales and sixteen times their quant
/// sums in the lanes of [`LANE`]. Only the entries a row of `nb` blocks reads are written
/// ([`Acts::fill`]): `4 · ceil(nb / 4)` of `y`, `8 · ceil(nb / 8)` of `d` and `off`, padding
/// included, so a call's cost follows its row, not [`MAX_BLOCKS`].
struct Acts {
    y: [MaybeUninit<[i8; 32]>; MAX_BLOCKS + 4],
    d: [MaybeUninit<f32>; MAX_BLOCKS + 8],
    off: [MaybeUninit<i32>; MAX_BLOCKS + 8],
}

impl Acts {
    /// Tables with nothing written yet.
    const fn new() -> Self {
        Acts {
            y: [const { MaybeUninit::uninit() }; MAX_BLOCKS + 4],
            d: [const { MaybeUninit::uninit() }; MAX_BLOCKS + 8],
            off: [const { MaybeUninit::uninit() }; MAX_BLOCKS + 8],
        }
    }

    /// Writes the tables of the activation row `a` (≤ [`MAX_BLOCKS`] blocks, `aux` one entry
    /// each): blocks past the row's end, up to the end of its last pair of groups, are zero.
    /// In place: the tables are larger than what a row writes of them.
    fn fill(&mut self, a: &[BlockQ8_0], aux: &[Q8Aux]) {
        let nb = a.len();
        // Pair p = entries 2p (the low halves of blocks 2p, 2p + 1) and 2p + 1 (their high
        // halves), for every block of the row's groups.
        for p in 0..2 * nb.div_ceil(4) {
            for h in 0..2 {
                let mut e = [0i8; 32];
                for l in 0..2 {
                    if let Some(blk) = a.get(2 * p + l) {
                        e[16 * l..16 * l + 16].copy_from_slice(&blk.qs[16 * h..16 * h + 16]);
                    }
                }
                self.y[2 * p + h].write(e);
            }
        }
        for b in 0..8 * nb.div_ceil(8) {
            let (d, off) = aux.get(b).map_or((0.0, 0), |e| (e.d, e.off16));
            let at = 8 * (b / 8) + LANE[b % 8];
            self.d[at].write(d);
            self.off[at].write(off);
        }
    }
}

/// The integer sums of the repacked group at `gp` against its rearranged activation blocks at
/// `yp`: lanes `[s0, s0, s2, s2 | s1, s1, s3, s3]`, each pair adding to block `k`'s
/// `Σ (q + 16) · y`.
///
/// # Safety
/// AVX2 present; a whole group at `gp`, four rearranged blocks at `yp`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group_sums(gp: *const u8, yp: *const [i8; 32]) -> __m256i {
    let (nib, sixteen) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
    // SAFETY: caller contract: 88 bytes at gp, four 32-byte blocks at yp.
    unsafe {
        let h = _mm_loadu_si128(gp.add(64) as *const __m128i);
        // Lane 0: the bits of blocks 0 and 2 (bits 0..4); lane 1: those of blocks 1 and 3.
        let hx = _mm256_setr_m128i(h, _mm_srli_epi16(h, 4));
        let y = |i: usize| _mm256_loadu_si256(yp.add(i) as *const __m256i);
        let q0 = _mm256_loadu_si256(gp as *const __m256i);
        let q1 = _mm256_loadu_si256(gp.add(32) as *const __m256i);
        let lo0 = _mm256_and_si256(q0, nib);
        let hi0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), nib);
        let lo1 = _mm256_and_si256(q1, nib);
        let hi1 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), nib);
        let lo0 = _mm256_or_si256(lo0, _mm256_and_si256(_mm256_slli_epi16(hx, 4), sixteen));
        let hi0 = _mm256_or_si256(hi0, _mm256_and_si256(_mm256_slli_epi16(hx, 3), sixteen));
        let lo1 = _mm256_or_si256(lo1, _mm256_and_si256(_mm256_slli_epi16(hx, 2), sixteen));
        let hi1 = _mm256_or_si256(hi1, _mm256_and_si256(_mm256_slli_epi16(hx, 1), sixteen));
        // Each i16 lane at most 2 · 2 · 31 · 127 = 15 748 in magnitude: exact.
        let r0 = _mm256_add_epi16(
            _mm256_maddubs_epi16(lo0, y(0)),
            _mm256_maddubs_epi16(hi0, y(1)),
        );
        let r1 = _mm256_add_epi16(
            _mm256_maddubs_epi16(lo1, y(2)),
            _mm256_maddubs_epi16(hi1, y(3)),
        );
        // Pairs added: at most 31 496, still exact; then widened.
        _mm256_madd_epi16(_mm256_hadd_epi16(r0, r1), _mm256_set1_epi16(1))
    }
}

/// Repacked Q5_0 weight rows `r0..r1` of `w` (`rb` = [`row_bytes`] bytes each) times the Q8_0
/// activation row `a` (with its [`Q8Aux`] entries `aux`), each result handed to
/// `put(row, value)`: the scalar reference's bits.
///
/// # Safety
/// AVX2, FMA and F16C present; `w` holds rows `r0..r1` of `rb` bytes.
///
/// # Panics
/// If `a` has more than [`MAX_BLOCKS`] blocks, `aux` fewer entries than `a` blocks, or `rb`
/// is not the repacked size of `a`'s blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) unsafe fn rows(
    w: &[u8],
    rb: usize,
    r0: usize,
    r1: usize,
    a: &[BlockQ8_0],
    aux: &[Q8Aux],
    mut put: impl FnMut(usize, f32),
) {
    let nb = a.len();
    assert!(
        nb <= MAX_BLOCKS && aux.len() >= nb,
        "activation row of {nb} blocks"
    );
    assert_eq!(rb, row_bytes(nb), "repacked Q5_0 row of {nb} blocks");
    let ng = nb.div_ceil(4);
    let mut t = Acts::new();
    t.fill(a, &aux[..nb]);
    // Each row's products wait in a buffer, and four rows' are added up together: a row's
    // adds are a chain of `nb` dependent f32 additions (block order, as the scalar reference
    // adds them), which four rows' chains side by side keep from bounding the loop.
    let entries = 8 * nb.div_ceil(8);
    let mut prods = [[const { MaybeUninit::<f32>::uninit() }; MAX_BLOCKS + 8]; ROWS_IN_FLIGHT];
    for buf in &mut prods {
        // Rows past the range's end read these (and drop their sums).
        buf[..entries].fill(MaybeUninit::new(0.0));
    }
    for r in (r0..r1).step_by(ROWS_IN_FLIGHT) {
        let n = (r1 - r).min(ROWS_IN_FLIGHT);
        for (k, buf) in prods.iter_mut().enumerate().take(n) {
            // SAFETY: row r + k lies inside w (caller contract); the tables hold every
            // group's entries (ng ≤ MAX_BLOCKS / 4 groups, padded to pairs), `buf` 8 per pair.
            unsafe { products(w.as_ptr().add((r + k) * rb), ng, &t, buf) };
        }
        // Rows past n add stale products; their sums are dropped.
        let bufs: [*const f32; ROWS_IN_FLIGHT] = prods.each_ref().map(|b| b.as_ptr().cast());
        let mut sums = [0.0f32; ROWS_IN_FLIGHT];
        for b in 0..nb {
            let i = 8 * (b / 8) + LANE[b % 8];
            for (s, buf) in sums.iter_mut().zip(bufs) {
                // SAFETY: i < entries, written above and again by `products`.
                *s += unsafe { *buf.add(i) };
            }
        }
        for (k, &v) in sums.iter().enumerate().take(n) {
            put(r + k, v);
        }
    }
}

/// The products `sumi · (d_w · d_a)` of one repacked row at `wp` (`ng` groups) against the
/// tables `t`, eight per pair of groups in the lanes of [`LANE`], into `out`.
///
/// # Safety
/// As [`rows`], for the row at `wp`; `out` holds `8 · ceil(ng / 2)` entries.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn products(
    wp: *const u8,
    ng: usize,
    t: &Acts,
    out: &mut [MaybeUninit<f32>; MAX_BLOCKS + 8],
) {
    for g in (0..ng).step_by(2) {
        // The second group of the pair, or the first again when the row ends: its sums are
        // then not computed and its lanes go unused (a row of 28 or 20 blocks, Qwen2.5's and
        // Gemma 3's, ends on an odd group).
        let g1 = if g + 1 < ng { g + 1 } else { g };
        // SAFETY: groups g and g1 of the row exist; the tables and `out` hold 8 entries from
        // 4g, and rearranged blocks from 4g (MAX_BLOCKS + 4 of them), every entry read
        // written by `Acts::fill`.
        unsafe {
            let s0 = group_sums(wp.add(g * GROUP), t.y.as_ptr().add(4 * g).cast());
            let s1 = if g1 > g {
                group_sums(wp.add(g1 * GROUP), t.y.as_ptr().add(4 * g1).cast())
            } else {
                _mm256_setzero_si256()
            };
            let off = _mm256_loadu_si256(t.off.as_ptr().add(4 * g).cast());
            let sumi = _mm256_sub_epi32(_mm256_hadd_epi32(s0, s1), off);
            let sc = |g: usize| _mm_loadl_epi64(wp.add(g * GROUP + 80) as *const __m128i);
            let dw = _mm256_cvtph_ps(_mm_unpacklo_epi32(sc(g), sc(g1)));
            let da = _mm256_loadu_ps(t.d.as_ptr().add(4 * g).cast());
            _mm256_storeu_ps(
                out.as_mut_ptr().add(4 * g).cast(),
                _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(dw, da)),
            );
        }
    }
}

#[cfg(test)]
mod tests;
