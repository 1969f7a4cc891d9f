//! AVX-512 prefill tiles for the K-quant weights of the Q4_K_M files (Q4_K and Q6_K) with
//! Q8_K activations: four weight rows × four activation rows (a quad), 16 outputs at a time.
//!
//! Each weight block of the four rows is decoded once, 64 quants at a time, as the one-row
//! kernels of [`super::avx512_k`] decode it, with its group scales spread to words, and then
//! serves up to [`QUADS`] quads of activation rows. Each 64-byte chunk of activation quants
//! is multiplied with the four rows: `vpmaddubsw`, then the group scales by `vpdpwssd` with
//! VNNI or `vpmaddwd` + add without, into one i32 vector per (weight row, activation row).
//! At the end of a block the 16 vectors are reduced together (adds of 256-bit halves, of
//! 128-bit quarters, then of 32- and 64-bit unpacks: 16 vectors to one vector of 16 sums)
//! instead of by 16 horizontal reductions. The terms over the activation group sums (Q4_K's
//! `msum = Σ mn·bsum`, Q6_K's offset `32 · Σ sc·bsum`) are computed for the 16 pairs at once
//! by word-pair products of permuted row and activation vectors (the row side once per
//! block). All of these are exact integers, so the order of the adds does not matter.
//! (Packing the `vpdpbusd` sums of two chunks to words and scaling them with one `vpmaddwd`
//! was tried: no faster for Q6_K, slower for Q4_K.)
//!
//! The f32 epilogue is lane-wise with the operations of [`super::kquants::block_value`]:
//! `(d · d_a) · isum`, minus `(dmin · d_a) · msum` for Q4_K, separate multiplies and
//! subtractions (no fused multiply-add), added to the output block by block in order; so each
//! output is the scalar reference's bits.
//!
//! Output lane `4t + r` holds (activation row `t`, weight row `r`).
//!
//! Every function is `unsafe`: the caller guarantees the CPU features of its
//! `target_feature`, and that each weight row holds as many blocks as the activation rows.

#![allow(clippy::needless_range_loop)] // rows and activation rows index the accumulators

use std::arch::x86_64::*;

use super::avx512::rd32;
use super::avx512_k::{IDX_K4, IDX_MN_K4, IDX_SC, dpw_bw, dpw_vnni, join, q4k_scales_mins};
use super::blocks::BlockQ8K;
use crate::GgmlType;

/// Weight rows per tile.
pub(super) const ROWS: usize = 4;
/// Activation rows per tile.
pub(super) const ACTS: usize = 4;
/// Quads of activation rows that share one decoding of the weight blocks.
pub(super) const QUADS: usize = 16;

/// Index tables over output lanes `L = 4t + r` (`t = L / 4`, `r = L % 4`): lane `L` takes
/// `mul · t + row_mul · r + add`.
const fn lanes(mul: u32, row_mul: u32, add: u32) -> [u32; 16] {
    let mut t = [0u32; 16];
    let mut l = 0;
    while l < 16 {
        t[l] = mul * (l as u32 / 4) + row_mul * (l as u32 % 4) + add;
        l += 1;
    }
    t
}

/// Lane `4t + r` takes weight row `r` (from four values in lanes 0..4).
static IDX_ROW: [u32; 16] = lanes(0, 1, 0);
/// Lane `4t + r` takes activation row `t` (from four values in lanes 0..4).
static IDX_ACT: [u32; 16] = lanes(1, 0, 0);
/// Lane `4t + r` takes `d` (even lanes) and `dmin` (odd lanes) of weight row `r` from
/// `[d0, dmin0, d1, dmin1, …]`.
static IDX_D: [u32; 16] = lanes(0, 2, 0);
static IDX_DMIN: [u32; 16] = lanes(0, 2, 1);

/// Word pair `j` of weight row `r` (two rows per source register, 8 pairs each) for lane
/// `4t + r`, and of activation row `t` likewise: `vpermt2d` indices.
static IDX_PAIR_ROW: [[u32; 16]; 8] = {
    let mut t = [[0u32; 16]; 8];
    let mut j = 0;
    while j < 8 {
        let mut l = 0;
        while l < 16 {
            t[j][l] = (8 * (l % 4) + j) as u32;
            l += 1;
        }
        j += 1;
    }
    t
};
static IDX_PAIR_ACT: [[u32; 16]; 8] = {
    let mut t = [[0u32; 16]; 8];
    let mut j = 0;
    while j < 8 {
        let mut l = 0;
        while l < 16 {
            t[j][l] = (8 * (l / 4) + j) as u32;
            l += 1;
        }
        j += 1;
    }
    t
};

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn ld(t: &[u32; 16]) -> __m512i {
    // SAFETY: the table is 64 readable bytes.
    unsafe { _mm512_loadu_si512(t.as_ptr() as *const _) }
}

/// The sums of the 16 lanes of each `v[4r + t]`, in lane `4t + r` of one vector.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn sum16(v: &[__m512i; 16]) -> __m512i {
    // 256-bit halves: p[i] holds 8 partial sums of v[2i] in lanes 0..8 and of v[2i + 1] in
    // lanes 8..16.
    let mut p = [_mm512_setzero_si512(); 8];
    for i in 0..8 {
        let (x, y) = (v[2 * i], v[2 * i + 1]);
        p[i] = _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b01_00_01_00>(x, y),
            _mm512_shuffle_i64x2::<0b11_10_11_10>(x, y),
        );
    }
    // 128-bit quarters: q[j] holds 4 partial sums of v[4j + k] in quarter k.
    let mut q = [_mm512_setzero_si512(); 4];
    for j in 0..4 {
        let (x, y) = (p[2 * j], p[2 * j + 1]);
        q[j] = _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b10_00_10_00>(x, y),
            _mm512_shuffle_i64x2::<0b11_01_11_01>(x, y),
        );
    }
    // Within quarters: quarter k of c0 holds two partial sums of v[k], v[4 + k]
    // interleaved, of c1 those of v[8 + k], v[12 + k]; the last step leaves v[4j + k]'s sum
    // in lane 4k + j.
    let c0 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(q[0], q[1]),
        _mm512_unpackhi_epi32(q[0], q[1]),
    );
    let c1 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(q[2], q[3]),
        _mm512_unpackhi_epi32(q[2], q[3]),
    );
    _mm512_add_epi32(_mm512_unpacklo_epi64(c0, c1), _mm512_unpackhi_epi64(c0, c1))
}

/// `d_a` of activation row `t` in lanes `4t..4t + 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn act_scales(y: &[&BlockQ8K; ACTS]) -> __m512 {
    let da = _mm_setr_ps(y[0].d, y[1].d, y[2].d, y[3].d);
    _mm512_permutexvar_ps(ld(&IDX_ACT), _mm512_castps128_ps512(da))
}

macro_rules! tiles {
    ($m:ident, $feat:literal, $dpw:ident) => {
        pub(super) mod $m {
            use super::*;

            /// The weight-row side of [`act_side_dots`]: word pair `j` of row `r` in lane
            /// `4t + r` of vector `j`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn row_side(rw: &[__m256i; ROWS]) -> [__m512i; 8] {
                let r01 = join(rw[0], rw[1]);
                let r23 = join(rw[2], rw[3]);
                std::array::from_fn(|j| _mm512_permutex2var_epi32(r01, ld(&IDX_PAIR_ROW[j]), r23))
            }

            /// `Σ_k rw[r][k] · ac[t][k]` over 16 words in lane `4t + r` (exact in i32), the
            /// rows given by [`row_side`].
            #[target_feature(enable = $feat)]
            #[inline]
            fn act_side_dots(x: &[__m512i; 8], ac: &[__m256i; ACTS]) -> __m512i {
                let a01 = join(ac[0], ac[1]);
                let a23 = join(ac[2], ac[3]);
                let mut acc = _mm512_setzero_si512();
                for j in 0..8 {
                    let y = _mm512_permutex2var_epi32(a01, ld(&IDX_PAIR_ACT[j]), a23);
                    acc = $dpw(acc, x[j], y);
                }
                acc
            }

            /// Block `i` of the four activation rows of a quad and their 16 group sums.
            #[target_feature(enable = $feat)]
            #[inline]
            fn quad_block<'a>(
                a: &[&'a [BlockQ8K]; ACTS],
                i: usize,
            ) -> ([&'a BlockQ8K; ACTS], [__m256i; ACTS]) {
                let y = [&a[0][i], &a[1][i], &a[2][i], &a[3][i]];
                // SAFETY: each bsums array is 32 readable bytes.
                let bs =
                    y.map(|b| unsafe { _mm256_loadu_si256(b.bsums.as_ptr() as *const __m256i) });
                (y, bs)
            }

            /// The integer block sums of the 16 pairs of a quad, before any offset: the
            /// decoded chunks `u[r][c]` with their spread scales `s[r][c]`.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn block_dots(
                u: &[[__m512i; 4]; ROWS],
                s: &[[__m512i; 4]; ROWS],
                y: &[&BlockQ8K; ACTS],
            ) -> __m512i {
                let mut acc = [_mm512_setzero_si512(); ROWS * ACTS];
                for c in 0..4 {
                    for r in 0..ROWS {
                        let (uc, sc) = (u[r][c], s[r][c]);
                        for t in 0..ACTS {
                            // SAFETY: qs holds 256 bytes.
                            let qy = unsafe {
                                _mm512_loadu_si512(y[t].qs.as_ptr().add(64 * c) as *const _)
                            };
                            acc[4 * r + t] = $dpw(acc[4 * r + t], _mm512_maddubs_epi16(uc, qy), sc);
                        }
                    }
                }
                sum16(&acc)
            }

            /// Q4_K weights (four rows) · Q8_K activations, up to [`QUADS`] quads of four
            /// rows: `out[q]` lane `4t + r` for activation row `t` of quad `q`.
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q4k(
                w: [&[u8]; ROWS],
                a: &[[&[BlockQ8K]; ACTS]],
                out: &mut [[f32; 16]],
            ) {
                let nq = a.len().min(out.len()).min(QUADS);
                if nq == 0 {
                    return;
                }
                let nb = a[0][0].len();
                let mut sums = [_mm512_setzero_ps(); QUADS];
                // SAFETY: each w[r] holds nb blocks of 144 bytes, each activation row nb
                // blocks (caller contract); the index tables are 32 or 64 bytes each.
                unsafe {
                    let m4 = _mm256_set1_epi8(0x0F);
                    let idx = IDX_K4.map(|t| _mm512_loadu_si512(t.as_ptr() as *const _));
                    let idx_mn = _mm256_loadu_si256(IDX_MN_K4.as_ptr() as *const _);
                    for i in 0..nb {
                        let p = w.map(|wr| wr.as_ptr().add(i * 144));
                        // Scales (words 0..8) and mins (words 8..16) of each row.
                        let sm = p.map(|pr| {
                            _mm512_castsi256_si512(_mm256_cvtepu8_epi16(q4k_scales_mins(pr.add(4))))
                        });
                        let mut u = [[_mm512_setzero_si512(); 4]; ROWS];
                        let mut s = [[_mm512_setzero_si512(); 4]; ROWS];
                        for r in 0..ROWS {
                            for c in 0..4 {
                                let v = _mm256_loadu_si256(p[r].add(16 + 32 * c) as *const _);
                                u[r][c] = join(
                                    _mm256_and_si256(v, m4),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                );
                                s[r][c] = _mm512_permutexvar_epi16(idx[c], sm[r]);
                            }
                        }
                        let mn =
                            row_side(&sm.map(|v| {
                                _mm256_permutexvar_epi16(idx_mn, _mm512_castsi512_si256(v))
                            }));
                        // [d0, dmin0, d1, dmin1, …] from the four rows' leading f16 pairs.
                        let dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_setr_epi32(
                            rd32(p[0]),
                            rd32(p[1]),
                            rd32(p[2]),
                            rd32(p[3]),
                        )));
                        let d = _mm512_permutexvar_ps(ld(&IDX_D), dd);
                        let dmin = _mm512_permutexvar_ps(ld(&IDX_DMIN), dd);
                        for q in 0..nq {
                            let (y, bs) = quad_block(&a[q], i);
                            let isum = block_dots(&u, &s, &y);
                            let msum = act_side_dots(&mn, &bs);
                            let da = act_scales(&y);
                            let v = _mm512_mul_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum));
                            let m =
                                _mm512_mul_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum));
                            sums[q] = _mm512_add_ps(sums[q], _mm512_sub_ps(v, m));
                        }
                    }
                    for q in 0..nq {
                        _mm512_storeu_ps(out[q].as_mut_ptr(), sums[q]);
                    }
                }
            }

            /// Q6_K weights (four rows) · Q8_K activations, as [`q4k`].
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q6k(
                w: [&[u8]; ROWS],
                a: &[[&[BlockQ8K]; ACTS]],
                out: &mut [[f32; 16]],
            ) {
                let nq = a.len().min(out.len()).min(QUADS);
                if nq == 0 {
                    return;
                }
                let nb = a[0][0].len();
                let mut sums = [_mm512_setzero_ps(); QUADS];
                // SAFETY: each w[r] holds nb blocks of 210 bytes, each activation row nb
                // blocks (caller contract); the index tables are 64 bytes each.
                unsafe {
                    let m4 = _mm512_set1_epi8(0x0F);
                    let m3 = _mm512_set1_epi8(3);
                    // Word shifts of the high bits: the low 256 bits by 0 (4), the high 256
                    // bits by 2 (6), as the one-row kernel.
                    let sh_lo =
                        _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2));
                    let sh_hi = _mm512_add_epi16(sh_lo, _mm512_set1_epi16(4));
                    let idx = IDX_SC.map(|t| _mm512_loadu_si512(t.as_ptr() as *const _));
                    for i in 0..nb {
                        let p = w.map(|wr| wr.as_ptr().add(i * 210));
                        let sc16 = p.map(|pr| {
                            _mm256_cvtepi8_epi16(_mm_loadu_si128(pr.add(192) as *const _))
                        });
                        let mut u = [[_mm512_setzero_si512(); 4]; ROWS];
                        let mut s = [[_mm512_setzero_si512(); 4]; ROWS];
                        for r in 0..ROWS {
                            for h in 0..2 {
                                let l = _mm512_loadu_si512(p[r].add(64 * h) as *const _);
                                let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                                    p[r].add(128 + 32 * h) as *const _,
                                ));
                                let h0 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_lo), m3);
                                let h1 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m3);
                                u[r][2 * h] = _mm512_or_si512(
                                    _mm512_and_si512(l, m4),
                                    _mm512_slli_epi16::<4>(h0),
                                );
                                u[r][2 * h + 1] = _mm512_or_si512(
                                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                                    _mm512_slli_epi16::<4>(h1),
                                );
                            }
                            let sc = _mm512_castsi256_si512(sc16[r]);
                            s[r] = idx.map(|ix| _mm512_permutexvar_epi16(ix, sc));
                        }
                        let scx = row_side(&sc16);
                        let dh = p.map(|pr| std::ptr::read_unaligned(pr.add(208) as *const i16));
                        let d4 =
                            _mm_cvtph_ps(_mm_setr_epi16(dh[0], dh[1], dh[2], dh[3], 0, 0, 0, 0));
                        let d = _mm512_permutexvar_ps(ld(&IDX_ROW), _mm512_castps128_ps512(d4));
                        for q in 0..nq {
                            let (y, bs) = quad_block(&a[q], i);
                            // The offset: 32 · Σ sc[g] · bsum[g], exact in i32.
                            let off = _mm512_slli_epi32::<5>(act_side_dots(&scx, &bs));
                            let isum = _mm512_sub_epi32(block_dots(&u, &s, &y), off);
                            let da = act_scales(&y);
                            let v = _mm512_mul_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum));
                            sums[q] = _mm512_add_ps(sums[q], v);
                        }
                    }
                    for q in 0..nq {
                        _mm512_storeu_ps(out[q].as_mut_ptr(), sums[q]);
                    }
                }
            }
        }
    };
}

tiles!(bw, "avx512f,avx512bw,avx512vl,avx2,fma,f16c", dpw_bw);
tiles!(
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    dpw_vnni
);

/// The tile of `ty` (Q4_K or Q6_K) for four weight rows and up to [`QUADS`] quads of four
/// activation rows: `out[q]` lane `4t + r` is (activation row `t` of quad `q`, weight row
/// `r`). `false` (nothing written) for other types.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C present, and AVX512-VNNI if `vnni`; each `w[r]` holds
/// as many blocks of `ty` as each activation row.
pub(super) unsafe fn tile(
    vnni: bool,
    ty: GgmlType,
    w: [&[u8]; ROWS],
    a: &[[&[BlockQ8K]; ACTS]],
    out: &mut [[f32; 16]],
) -> bool {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, vnni) {
            (GgmlType::Q4K, true) => vnni::q4k(w, a, out),
            (GgmlType::Q4K, false) => bw::q4k(w, a, out),
            (GgmlType::Q6K, true) => vnni::q6k(w, a, out),
            (GgmlType::Q6K, false) => bw::q6k(w, a, out),
            _ => return false,
        }
    }
    true
}
