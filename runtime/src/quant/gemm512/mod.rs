//! AVX-512 matrix kernels over the packed activation layout ([`super::packed`]): AVX-512 F,
//! BW, VL and VBMI, with AVX512-VNNI `vpdpbusd` when present (otherwise `vpmaddubsw` and
//! `vpmaddwd`, which yield the same integers).
//!
//! The weights are read from the model mapping in ggml's block layout, or, for Q5_0 and Q4_1
//! on an engine that repacked them, from a copy in the kernel's own layout
//! ([`groups::repack_q5_0_row_simd`], [`groups::repack_q4_1_row_simd`]: as many bytes per group
//! as the file's, already in lane order, which [`groups::unpack_q5_0r`] and
//! [`groups::unpack_q4_1r`] read without permutes, giving the same integers and scales), four
//! blocks (one group) at a time: one or two byte permutes (`vpermt2b`) gather the group's quants in
//! the packed lane order, a word permute gathers its four scales. Each 32-bit lane then holds
//! a partial integer dot of one block; it is converted to f32 and scaled by `d_w · d_a` of its
//! block. The Q4_1 min term `Σ m_w · s_a` is kept in compact lanes, one per block, and added
//! to the dot lanes just before the reduction: tiles of more than [`MIN_INLOOP_A`] activation
//! rows collect their mins as they unpack them and add sixteen blocks per FMA after the loop
//! (the packed layout stores the activation sums contiguously); narrower tiles add each
//! group's four products with a masked FMA into the same lanes, in the same order. Signed
//! weights (Q4_0, Q8_0) move their sign onto the activations (`|w| · sign(w)·a`), as ggml
//! does. Q5_0's fifth bits are gathered from each block's `qh` by a third byte permute and a bit test and
//! added to the nibbles as 16 (a masked byte add), giving the unsigned quant `u = q + 16`;
//! each lane's dot then starts from `-16 · Σ a` of its four activation bytes, computed once
//! per activation group for all the weight rows of a call (a stack table): the same integers
//! as the sign trick, with fewer operations per weight group.
//!
//! A tile multiplies `W` weight rows with `A` activation rows: each weight group is unpacked
//! once per tile and each activation group loaded once per tile. Q5_0 passes of 16 activation
//! rows or more unpack a block of weight rows once into a stack buffer and run every 16-row
//! activation tile over it ([`groups`] holds the weight side). The arithmetic of one
//! (weight row, activation row) pair does not depend on the tile shape, so a batch of rows
//! gives bit-identical results to one row at a time.
//!
//! Q5_0 and Q8_0 rows that carry units ([`packed::has_units`]: their groups fill whole units
//! of four with at most a quarter of zero groups, as Qwen2.5's 896-wide rows do) run in *block lanes*
//! instead ([`units`]): sixteen blocks per unit, one 32-bit lane per block, eight `vpdpbusd`
//! per unit and pair (from the activation unit's `-16 · Σ a`) before one conversion, one
//! product of the scales and one FMA, where the layout above spends those three float
//! operations on every four blocks. The weight units come from the copy's units or are
//! transposed from the file's groups, the activation units are the packed rows'; every shape
//! (decode, 16-row tiles in row blocks, the remainders) runs the same per-unit step, so these
//! matrices too give one row's bits in any batch. Q8_0 runs the step on `q + 128` from
//! `-128 · Σ a` ([`unit_start`]). Other Q5_0 and Q8_0 rows (Gemma 3's 640-wide: 5 groups, 3 of
//! padding) keep the quarter lanes.
//!
//! The activation side (quantizing into the packed layout) lives in [`super::pack512`].
//!
//! Every function is `unsafe`: the caller guarantees the CPU features named in its
//! `target_feature`, weight rows of `nb` blocks, and packed activation rows of `nb` blocks.
//!
//! Size: over 800 lines: the `kernels!` macro body holds every tile and driver of both
//! flavours (VNNI and BW), which it expands once per flavour with its `dpb` and target
//! features; the quarter-lane and the block-lane paths are its two halves, and what needs no
//! flavour already lives in `groups`, `units` and `reduce`.

#![allow(clippy::needless_range_loop)] // register tiles indexed by weight and activation row

use std::arch::x86_64::*;

use super::OutRows;
use super::packed::{self, GROUP_QS};
use crate::GgmlType;

mod groups;
mod reduce;
mod units;
#[cfg(test)]
use groups::repack_q5_0_row_simd;
use groups::{
    Consts, PGroup, Q5_0R_GROUP, WGroup, consts, ld, unpack_q4_0, unpack_q4_1, unpack_q4_1r,
    unpack_q5_0, unpack_q5_0r, unpack_q8_0,
};
pub(in crate::quant) use groups::{Q4_1R_GROUP, repack_q4_1_row_simd};
#[cfg(test)]
use groups::{repack_q4_1_row, repack_q5_0_row};
use reduce::reduce_tile;
use units::Unit;
pub(in crate::quant) use units::{
    q5_0r_row_bytes, q8_0u_row_bytes, repack_q5_0r_row_simd, repack_q8_0u_row_simd,
};
#[cfg(test)]
use units::{repack_q5_0_units_row, repack_q8_0_units_row};

const F_Q4_1: u8 = 0;
const F_Q4_0: u8 = 1;
const F_Q8_0: u8 = 2;
const F_Q5_0: u8 = 3;
/// Q5_0 rows repacked ([`groups::repack_q5_0_row_simd`]): the arithmetic of [`F_Q5_0`],
/// read from groups of 88 bytes laid out for the kernel.
const F_Q5_0R: u8 = 4;
/// Q4_1 rows repacked ([`groups::repack_q4_1_row_simd`]): the arithmetic of [`F_Q4_1`], read
/// from groups of 80 bytes laid out for the kernel.
const F_Q4_1R: u8 = 5;
/// Q8_0 rows with units copied into block lanes ([`units::repack_q8_0u_row_simd`]).
const F_Q8_0R: u8 = 6;

/// Formats whose tiles run Q5_0's arithmetic.
const fn is_q5(f: u8) -> bool {
    f == F_Q5_0 || f == F_Q5_0R
}

/// Formats whose tiles run Q8_0's arithmetic.
const fn is_q8(f: u8) -> bool {
    f == F_Q8_0 || f == F_Q8_0R
}

/// Formats that run in block lanes where their rows carry units ([`packed::has_units`]).
const fn has_unit_path(f: u8) -> bool {
    is_q5(f) || is_q8(f)
}

/// Formats read from a copy in units (`unit_tile_copy`).
const fn is_unit_copy(f: u8) -> bool {
    f == F_Q5_0R || f == F_Q8_0R
}

/// Formats whose tiles run Q4_1's arithmetic (unsigned nibbles and a min term).
const fn is_q4_1(f: u8) -> bool {
    f == F_Q4_1 || f == F_Q4_1R
}
/// Entries of Q5_0's stack table of activation sums (`groups × activation rows`, 32 KiB):
/// rows of up to 4,096 values with 16 activation rows at once; wider rows compute the sums in
/// the tile.
const NEG_MAX: usize = 512;
/// Q4_1 tiles of more than [`MIN_INLOOP_A`] activation rows keep the mins of rows of up to
/// this many groups (32,768 values; 4 KiB of stack per weight row) for their compact min term;
/// wider Q4_1 rows run in tiles of at most [`MIN_INLOOP_A`] activation rows, which add it
/// group by group.
const MIN_GROUPS: usize = 256;

/// Q4_1 tiles of at most this many activation rows accumulate the min term group by group
/// (see [`kernels`]' `tile_from`); wider ones from the collected mins after the loop.
const MIN_INLOOP_A: usize = 2;
// The wide-row fallback of `gemm_f` runs 2-row tiles.
const _: () = assert!(MIN_INLOOP_A >= 2);
/// Unpacked Q5_0 weight groups of one row block (192 bytes each, 30 KiB): with one 16-row
/// activation tile (about 11 KiB for 640-wide rows) it stays in a 48 KiB L1 data cache.
const UNP_GROUPS: usize = 160;

/// Weight units of one row block of the 16-row Q5_0 path (60 KiB of stack).
const W_UNITS: usize = 96;

/// Asks for the `len` bytes from `p` a cache line at a time (a prefetch never faults, and the
/// address is formed with wrapping arithmetic, so `p` may lie past the matrix).
#[inline]
fn prefetch_bytes(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
        off += 64;
    }
}

/// The start of a block-lane unit's integer dots from the activation unit's `-16 · Σ a`
/// (`neg`): itself for Q5_0's `q + 16`, eight times it for Q8_0's `q + 128`.
#[target_feature(enable = "avx512f")]
#[inline]
fn unit_start<const F: u8>(neg: __m512i) -> __m512i {
    if is_q8(F) {
        _mm512_slli_epi32::<3>(neg)
    } else {
        neg
    }
}

/// Register `r` of a copy's unit at `p`: 64 bytes at `64 r` when `FULL`, else the `qm` bytes
/// at `step · r` (a last unit's registers, `step` bytes each).
///
/// # Safety
/// Those bytes are readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn unit_reg<const FULL: bool>(p: *const u8, r: usize, qm: u64, step: usize) -> __m512i {
    // SAFETY: caller contract; the masked load reads only the `qm` bytes.
    unsafe {
        if FULL {
            _mm512_loadu_si512(p.add(64 * r) as *const __m512i)
        } else {
            _mm512_maskz_loadu_epi8(qm, p.add(step * r) as *const i8)
        }
    }
}

/// The float step of a block-lane unit: its sixteen exact integer dots `t` to f32, times
/// `d_w · d_a`, added to `acc`. Every block-lane tile ends a unit with this one step, which keeps
/// their bits the same.
#[target_feature(enable = "avx512f")]
#[inline]
fn unit_scale(acc: __m512, t: __m512i, dw: __m512, da: __m512) -> __m512 {
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, da), acc)
}

macro_rules! kernels {
    ($m:ident, $feat:literal, $dpb:path, $dpb8:path) => {
        pub(super) mod $m {
            use super::*;

            /// `acc + Σ u8 × i8` over each group of four bytes, in 32-bit lanes (`u ≤ 128`).
            #[target_feature(enable = $feat)]
            #[inline]
            fn dpb(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
                $dpb(acc, u, s)
            }

            /// [`dpb`] for the block-lane weights of format `F`: Q8_0's `q + 128` reach 255,
            /// past what the BW flavour's 16-bit pair sums hold, so they take [`dpb_bw8`]'s
            /// way there (the same exact integers).
            #[target_feature(enable = $feat)]
            #[inline]
            fn dpb_u<const F: u8>(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
                if is_q8(F) {
                    $dpb8(acc, u, s)
                } else {
                    $dpb(acc, u, s)
                }
            }

            /// One tile: `W` weight rows at `w` (stride `rb` bytes) × `A` packed activation
            /// rows at `a` (stride `astride` bytes), `nb` blocks each, weight format `F`.
            /// `PRE` (Q5_0 only): `neg` points at the `ceil(nb / 4) × A` values `-16 · Σ a`,
            /// `[group][activation row]`; otherwise the tile computes them and `neg` is unused.
            /// `UNP` (Q5_0 only): the weight groups are read already unpacked from `pw`
            /// (`ceil(nb / 4)` groups per row, rows one after another) instead of from `w`.
            /// Never inlined: inside its callers' loops it spills the sixteen accumulators.
            #[target_feature(enable = $feat)]
            #[inline(never)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn tile_from<
                const F: u8,
                const W: usize,
                const A: usize,
                const PRE: bool,
                const UNP: bool,
            >(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                a: *const u8,
                astride: usize,
                neg: *const __m512i,
                pw: *const PGroup,
            ) -> [[f32; A]; W] {
                let (gb, unsigned) = match F {
                    F_Q4_1 => (80, true),
                    F_Q4_1R => (Q4_1R_GROUP, true),
                    F_Q4_0 => (72, false),
                    F_Q5_0 => (88, false),
                    F_Q5_0R => (Q5_0R_GROUP, false),
                    _ => (136, false),
                };
                let full = nb / 4;
                let ng = nb.div_ceil(4);
                let tail = (nb % 4) * gb / 4;
                let dbase = ng * GROUP_QS;
                let sbase = ng * (GROUP_QS + 16);
                let zero = _mm512_setzero_si512();
                let mut acc = [[_mm512_setzero_ps(); A]; W];
                // Q4_1's min term `Σ m_w · s_a` in compact lanes, one per block: lane `L` of
                // `macc` sums `m · s_a / 4` of blocks `16c + L` (c = 0, 1, …) in that order, and
                // the tile adds `4 · macc` to the dots' lanes before reducing. Narrow tiles
                // (A ≤ MIN_INLOOP_A) add each group's four products into lanes `4 (g % 4)..`
                // with a masked FMA; wider ones collect each row's mins (`mins`, only the
                // slots written are read) and add sixteen blocks per FMA after the loop. Both
                // orders are the same, so every tile shape gives the same bits.
                let inloop = unsigned && A <= MIN_INLOOP_A;
                let compact = unsigned && !inloop;
                debug_assert!(!compact || ng <= MIN_GROUPS);
                let mut mins = [[std::mem::MaybeUninit::<f32>::uninit(); 4 * MIN_GROUPS]; W];
                let mut macc = [[_mm512_setzero_ps(); A]; W];
                // SAFETY: every pointer below stays inside the rows the caller vouched for:
                // weight group g of row i spans [g·gb, g·gb + len) of that row, and packed
                // activation group g spans its quants, scale and sum slots.
                unsafe {
                    // The group `step!` works on, and whether it is whole (not the last
                    // partial group of a repacked Q4_1 row): set before each expansion.
                    let mut g: usize;
                    let mut whole: bool;
                    // One group, written once and expanded in each loop below, so that the
                    // loop over a repacked row's whole groups holds one unpacker.
                    macro_rules! step {
                        () => {{
                            let len = if g < full { gb } else { tail };
                            let mut wg = [std::mem::MaybeUninit::<WGroup>::uninit(); W];
                            for (i, slot) in wg.iter_mut().enumerate() {
                                if UNP {
                                    let u = &*pw.add(i * ng + g);
                                    slot.write(WGroup {
                                        lo: u.lo,
                                        hi: u.hi,
                                        dw: u.dw,
                                        mw: _mm512_setzero_ps(),
                                        sl: 0,
                                        sh: 0,
                                    });
                                    continue;
                                }
                                let p = w.add(i * rb + g * gb);
                                slot.write(match F {
                                    F_Q4_1 => unpack_q4_1(c, p, len),
                                    F_Q4_0 => unpack_q4_0(c, p, len),
                                    F_Q5_0 => unpack_q5_0(c, p, len),
                                    // Repacked groups are whole (zero-padded): `len` is unused.
                                    F_Q5_0R => unpack_q5_0r(c, p),
                                    F_Q4_1R if whole => unpack_q4_1r(c, p),
                                    // A row's last partial group, kept in the file's layout.
                                    F_Q4_1R => unpack_q4_1(c, p, len),
                                    _ => unpack_q8_0(c, p, len),
                                });
                            }
                            let wg = wg.map(|x| x.assume_init());
                            if compact {
                                // Lanes 0..4 of `mw` hold the group's four mins (block = lane % 4).
                                for i in 0..W {
                                    let m = _mm512_castps512_ps128(wg[i].mw);
                                    _mm_storeu_ps(mins[i].as_mut_ptr().add(4 * g) as *mut f32, m);
                                }
                            }
                            for j in 0..A {
                                let ap = a.add(j * astride);
                                let alo = ld(ap.add(g * GROUP_QS));
                                let ahi = ld(ap.add(g * GROUP_QS + 64));
                                let da = _mm512_broadcast_f32x4(_mm_loadu_ps(
                                    ap.add(dbase + 16 * g) as *const f32,
                                ));
                                if is_q5(F) {
                                    // Σ (u - 16)·a = Σ u·a - 16·Σ a: the second sum is the
                                    // same for every weight row, so each row starts from it.
                                    let neg = if PRE {
                                        *neg.add(g * A + j)
                                    } else {
                                        _mm512_sub_epi32(
                                            zero,
                                            dpb(dpb(zero, c.sixteen, alo), c.sixteen, ahi),
                                        )
                                    };
                                    for i in 0..W {
                                        let t = dpb(dpb(neg, wg[i].lo, alo), wg[i].hi, ahi);
                                        let s = _mm512_mul_ps(wg[i].dw, da);
                                        acc[i][j] =
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[i][j]);
                                    }
                                } else if inloop {
                                    // Lane 4 (g % 4) + b of the broadcast sums and of `mw` holds
                                    // block b of the group: the compact lanes of its four blocks.
                                    let sa = _mm512_broadcast_f32x4(_mm_loadu_ps(
                                        ap.add(sbase + 16 * g) as *const f32,
                                    ));
                                    let lanes: __mmask16 = 0xF << (4 * (g % 4));
                                    for i in 0..W {
                                        let t = dpb(dpb(zero, wg[i].lo, alo), wg[i].hi, ahi);
                                        let s = _mm512_mul_ps(wg[i].dw, da);
                                        acc[i][j] =
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[i][j]);
                                        macc[i][j] =
                                            _mm512_mask3_fmadd_ps(wg[i].mw, sa, macc[i][j], lanes);
                                    }
                                } else if unsigned {
                                    for i in 0..W {
                                        let t = dpb(dpb(zero, wg[i].lo, alo), wg[i].hi, ahi);
                                        let s = _mm512_mul_ps(wg[i].dw, da);
                                        acc[i][j] =
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[i][j]);
                                    }
                                } else {
                                    for i in 0..W {
                                        let xl = _mm512_mask_sub_epi8(alo, wg[i].sl, zero, alo);
                                        let xh = _mm512_mask_sub_epi8(ahi, wg[i].sh, zero, ahi);
                                        let t = dpb(dpb(zero, wg[i].lo, xl), wg[i].hi, xh);
                                        let s = _mm512_mul_ps(wg[i].dw, da);
                                        acc[i][j] =
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[i][j]);
                                    }
                                }
                            }
                        }};
                    }
                    // Repacked Q4_1 keeps a row's last partial group in the file's layout: the
                    // whole groups run in a loop of their own, the partial one after it.
                    if F == F_Q4_1R {
                        for gg in 0..full {
                            (g, whole) = (gg, true);
                            step!();
                        }
                        if full < ng {
                            (g, whole) = (full, false);
                            step!();
                        }
                    } else {
                        for gg in 0..ng {
                            (g, whole) = (gg, true);
                            step!();
                        }
                    }
                }
                if compact {
                    let n = 4 * ng;
                    let mut o = 0;
                    while o < n {
                        let k = n - o;
                        let mask: __mmask16 = if k >= 16 { !0 } else { (1 << k) - 1 };
                        // SAFETY: slots o..o + k of each row of `mins` were written in the
                        // loop (4 per group, ng groups); masked-off lanes are not read. The
                        // sums lie within the packed rows the caller vouched for.
                        let m: [__m512; W] = std::array::from_fn(|i| unsafe {
                            _mm512_maskz_loadu_ps(mask, (mins[i].as_ptr() as *const f32).add(o))
                        });
                        for j in 0..A {
                            // SAFETY: as above.
                            let sa = unsafe {
                                let sp = a.add(j * astride + sbase) as *const f32;
                                _mm512_maskz_loadu_ps(mask, sp.add(o))
                            };
                            for i in 0..W {
                                macc[i][j] = _mm512_fmadd_ps(m[i], sa, macc[i][j]);
                            }
                        }
                        o += 16;
                    }
                }
                if unsigned {
                    // The sums are stored as `s_a / 4`; times four is exact.
                    let four = _mm512_set1_ps(4.0);
                    for i in 0..W {
                        for j in 0..A {
                            acc[i][j] = _mm512_fmadd_ps(macc[i][j], four, acc[i][j]);
                        }
                    }
                }
                reduce_tile(&acc)
            }

            /// [`tile_from`] with the weight groups unpacked from `w` in the tile.
            #[target_feature(enable = $feat)]
            #[inline]
            #[allow(clippy::too_many_arguments)]
            unsafe fn tile<const F: u8, const W: usize, const A: usize, const PRE: bool>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                a: *const u8,
                astride: usize,
                neg: *const __m512i,
            ) -> [[f32; A]; W] {
                // SAFETY: forwarded caller contract; `pw` is not read when `UNP` is false.
                unsafe {
                    tile_from::<F, W, A, PRE, false>(
                        c,
                        w,
                        rb,
                        nb,
                        a,
                        astride,
                        neg,
                        std::ptr::null(),
                    )
                }
            }

            /// Q5_0 weight rows `r0..r1` × activation rows `0..n16` (`n16` a multiple of 16)
            /// in row blocks: each block's weight groups are unpacked once into a stack buffer
            /// (at most [`UNP_GROUPS`] groups) and serve every 16-row activation tile, instead
            /// of being unpacked again for each; `-16 · Σ a` is computed per block and tile.
            /// The arithmetic of each (weight row, activation row) pair is that of [`tile`].
            /// Requires `ceil(nb / 4) <= UNP_GROUPS` and `ceil(nb / 4) · 16 <= NEG_MAX`.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows_q5_0_blocked<const F: u8>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                n16: usize,
                out: OutRows,
            ) {
                let ng = nb.div_ceil(4);
                let full = nb / 4;
                let gb = if F == F_Q5_0R { Q5_0R_GROUP } else { 88 };
                let tail = (nb % 4) * gb / 4;
                let per = UNP_GROUPS / ng;
                let mut unp = [const { std::mem::MaybeUninit::<PGroup>::uninit() }; UNP_GROUPS];
                let mut negs = [const { std::mem::MaybeUninit::<__m512i>::uninit() }; NEG_MAX];
                let pf = crate::quant::prefetch_distance();
                // SAFETY: forwarded caller contract: weight group g of row r spans
                // [r·rb + g·88, + len) of the matrix, packed activation group g of row j its
                // 128 quant bytes, and outputs (j, r) < (n16, r1) are this call's alone. Every
                // slot of `unp` read below ((r - b0)·ng + g < per·ng <= UNP_GROUPS) and of
                // `negs` (g·16 + j < ng·16 <= NEG_MAX) was written first.
                unsafe {
                    let mut b0 = r0;
                    while b0 < r1 {
                        let b1 = (b0 + per).min(r1);
                        for r in b0..b1 {
                            let row = w.add(r * rb);
                            if pf > 0 {
                                // Ask for the bytes `pf` ahead of this row now.
                                prefetch_bytes(row.wrapping_add(pf), rb);
                            }
                            for g in 0..ng {
                                let len = if g < full { gb } else { tail };
                                let u = if F == F_Q5_0R {
                                    unpack_q5_0r(c, row.add(g * gb))
                                } else {
                                    unpack_q5_0(c, row.add(g * gb), len)
                                };
                                unp[(r - b0) * ng + g].write(PGroup {
                                    lo: u.lo,
                                    hi: u.hi,
                                    dw: u.dw,
                                });
                            }
                        }
                        let pw = unp.as_ptr() as *const PGroup;
                        let mut a0 = 0;
                        while a0 < n16 {
                            let ap = a.add(a0 * astride);
                            let neg = fill_negs::<16>(c, ap, astride, ng, &mut negs);
                            for r in b0..b1 {
                                let v = tile_from::<F_Q5_0, 1, 16, true, true>(
                                    c,
                                    w,
                                    rb,
                                    nb,
                                    ap,
                                    astride,
                                    neg,
                                    pw.add((r - b0) * ng),
                                );
                                for (j, &x) in v[0].iter().enumerate() {
                                    out.put(a0 + j, r, x);
                                }
                            }
                            a0 += 16;
                        }
                        b0 = b1;
                    }
                }
            }

            /// Unit `u` of the Q5_0 or Q8_0 weight row at `row` (`nb` blocks): from the copy's
            /// units ([`F_Q5_0R`], [`F_Q8_0R`]) or transposed from the file's groups.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn w_unit<const F: u8>(c: &Consts, row: *const u8, nb: usize, u: usize) -> Unit {
                // SAFETY: forwarded caller contract.
                unsafe {
                    match F {
                        F_Q5_0R => units::unit_from_copy(c, row, nb.div_ceil(4), u),
                        F_Q8_0R => units::unit_from_copy_q8(row, nb.div_ceil(4), u),
                        F_Q8_0 => units::unit_from_file::<true>(c, row, nb, u),
                        _ => units::unit_from_file::<false>(c, row, nb, u),
                    }
                }
            }

            /// One unit of one (weight row, activation row) pair: the sixteen blocks' exact
            /// integer dots (from [`unit_start`], eight `vpdpbusd`), to f32, times `d_w · d_a`,
            /// added to the pair's lanes. Every shape of the block-lane path runs this, unit
            /// after unit, then [`reduce_tile`]: the same bits whatever the tile.
            #[target_feature(enable = $feat)]
            #[inline]
            fn unit_step<const F: u8>(acc: __m512, w: &Unit, a: &Unit) -> __m512 {
                let mut t = unit_start::<F>(a.neg);
                for k in 0..8 {
                    t = dpb_u::<F>(t, w.q[k], a.q[k]);
                }
                unit_scale(acc, t, w.d, a.d)
            }

            /// `W` Q5_0 or Q8_0 weight rows at `wrow` (stride `rb`) × the units of the `A`
            /// packed activation rows at `au` (`astride` apart, units from `au`).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            unsafe fn unit_tile<const F: u8, const W: usize, const A: usize>(
                c: &Consts,
                wrow: *const u8,
                rb: usize,
                nb: usize,
                au: *const u8,
                astride: usize,
            ) -> [[f32; A]; W] {
                if is_unit_copy(F) && W * A <= 8 {
                    // SAFETY: forwarded caller contract.
                    return unsafe { unit_tile_copy::<F, W, A>(c, wrow, rb, nb, au, astride) };
                }
                let nu = nb.div_ceil(4).div_ceil(4);
                let mut acc = [[_mm512_setzero_ps(); A]; W];
                // SAFETY: forwarded caller contract: each activation row holds nu units.
                unsafe {
                    for u in 0..nu {
                        for i in 0..W {
                            let wu = w_unit::<F>(c, wrow.add(i * rb), nb, u);
                            for j in 0..A {
                                let a = &*(au.add(j * astride) as *const Unit).add(u);
                                acc[i][j] = unit_step::<F>(acc[i][j], &wu, a);
                            }
                        }
                    }
                }
                reduce_tile(&acc)
            }

            /// [`unit_tile`] for small tiles on the copy's units: each weight register is
            /// unpacked and used at once, register by register (`vpdpbusd` in the order 0, 4,
            /// 1, 5, …: the same exact integers), instead of a whole unit held per row, so that
            /// the decode's four rows keep their sums in registers.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn unit_tile_copy<const F: u8, const W: usize, const A: usize>(
                c: &Consts,
                wrow: *const u8,
                rb: usize,
                nb: usize,
                au: *const u8,
                astride: usize,
            ) -> [[f32; A]; W] {
                let ng = nb.div_ceil(4);
                let mut acc = [[_mm512_setzero_ps(); A]; W];
                let mut pw = [wrow; W];
                for (i, p) in pw.iter_mut().enumerate() {
                    *p = wrow.wrapping_add(i * rb);
                }
                let mut pa = [au as *const Unit; A];
                for (j, p) in pa.iter_mut().enumerate() {
                    *p = au.wrapping_add(j * astride) as *const Unit;
                }
                // SAFETY: forwarded caller contract: each weight row is a row of the copy with
                // units (`units` module docs), each activation row holds nu units; the masked
                // loads of a last unit of k < 4 groups read only its bytes.
                unsafe {
                    // Whole units: every offset a constant.
                    let unit = if is_q8(F) {
                        units::Q8_0U_UNIT
                    } else {
                        units::Q5_0U_UNIT
                    };
                    for _ in 0..ng / 4 {
                        unit_dots_copy::<F, W, A, true>(c, &pw, &pa, &mut acc, 4);
                        for p in pw.iter_mut() {
                            *p = p.add(unit);
                        }
                        for p in pa.iter_mut() {
                            *p = p.add(1);
                        }
                    }
                    if ng % 4 != 0 {
                        unit_dots_copy::<F, W, A, false>(c, &pw, &pa, &mut acc, ng % 4);
                    }
                }
                reduce_tile(&acc)
            }

            /// One unit of [`unit_tile_copy`]: the weight units at `pw` (`k` groups; all four
            /// when `FULL`, read with plain loads at constant offsets) against the activation
            /// units at `pa`, added to `acc`. Q5_0's registers are unpacked from nibbles and
            /// fifth-bit masks, Q8_0's loaded as they are (`units` module docs).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn unit_dots_copy<
                const F: u8,
                const W: usize,
                const A: usize,
                const FULL: bool,
            >(
                c: &Consts,
                pw: &[*const u8; W],
                pa: &[*const Unit; A],
                acc: &mut [[__m512; A]; W],
                k: usize,
            ) {
                let kk = if FULL { 4 } else { k };
                let qm = if FULL {
                    u64::MAX
                } else {
                    (1u64 << (16 * k)) - 1
                };
                let step = 16 * kk;
                // Q5_0: the masks after the nibbles, the scales after the masks; Q8_0: the
                // scales after the eight registers.
                let (at_m, at_d) = if is_q8(F) {
                    (0, 128 * kk)
                } else {
                    (64 * kk, 64 * kk + 64)
                };
                let sm: __mmask16 = if FULL { !0 } else { (1 << (4 * k)) - 1 };
                // SAFETY: the caller's units, `k` groups each (see `unit_tile_copy`).
                unsafe {
                    let mut t = [[_mm512_setzero_si512(); A]; W];
                    for ti in t.iter_mut() {
                        for (j, tij) in ti.iter_mut().enumerate() {
                            *tij = unit_start::<F>((*pa[j]).neg);
                        }
                    }
                    for r in 0..4 {
                        for i in 0..W {
                            let p = pw[i];
                            let (lo, hi) = if is_q8(F) {
                                (
                                    unit_reg::<FULL>(p, r, qm, step),
                                    unit_reg::<FULL>(p, 4 + r, qm, step),
                                )
                            } else {
                                let x = unit_reg::<FULL>(p, r, qm, step);
                                let nl = _mm512_and_si512(x, c.nib);
                                let nh = _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib);
                                let ml =
                                    std::ptr::read_unaligned(p.add(at_m + 8 * r) as *const u64);
                                let mh = std::ptr::read_unaligned(
                                    p.add(at_m + 32 + 8 * r) as *const u64
                                );
                                (
                                    _mm512_mask_add_epi8(nl, ml, nl, c.sixteen),
                                    _mm512_mask_add_epi8(nh, mh, nh, c.sixteen),
                                )
                            };
                            for j in 0..A {
                                let a = &*pa[j];
                                t[i][j] =
                                    dpb_u::<F>(dpb_u::<F>(t[i][j], lo, a.q[r]), hi, a.q[4 + r]);
                            }
                        }
                    }
                    for i in 0..W {
                        let h = if FULL {
                            _mm256_loadu_si256(pw[i].add(at_d) as *const __m256i)
                        } else {
                            _mm256_maskz_loadu_epi16(sm, pw[i].add(at_d) as *const i16)
                        };
                        let dw = _mm512_cvtph_ps(h);
                        for j in 0..A {
                            acc[i][j] = unit_scale(acc[i][j], t[i][j], dw, (*pa[j]).d);
                        }
                    }
                }
            }

            /// Q5_0 or Q8_0 rows `r0..r1` × activation rows `a0..a0 + A` in block lanes, `W`
            /// weight rows at a time (then single rows).
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows_units<const F: u8, const W: usize, const A: usize>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                au: *const u8,
                astride: usize,
                a0: usize,
                out: OutRows,
            ) {
                let pf = crate::quant::prefetch_distance();
                // SAFETY: forwarded caller contract; outputs are (a0 + j, r + i) < (n, r1).
                unsafe {
                    let ap = au.add(a0 * astride);
                    let mut r = r0;
                    while r < r1 {
                        let wn = if r + W <= r1 { W } else { 1 };
                        if a0 == 0 && pf > 0 {
                            // As in `rows_with`: ask for the bytes `pf` ahead of this tile.
                            prefetch_bytes(w.wrapping_add(r * rb + pf), wn * rb);
                        }
                        let wr = w.add(r * rb);
                        if wn == W {
                            let v = unit_tile::<F, W, A>(c, wr, rb, nb, ap, astride);
                            for (i, vi) in v.iter().enumerate() {
                                for (j, &x) in vi.iter().enumerate() {
                                    out.put(a0 + j, r + i, x);
                                }
                            }
                        } else {
                            let v = unit_tile::<F, 1, A>(c, wr, rb, nb, ap, astride);
                            for (j, &x) in v[0].iter().enumerate() {
                                out.put(a0 + j, r, x);
                            }
                        }
                        r += wn;
                    }
                }
            }

            /// Q5_0 or Q8_0 rows `r0..r1` × activation rows `0..n16` (`n16` a multiple of 16)
            /// in block lanes and row blocks: each block's weight units transposed once into a
            /// stack buffer ([`W_UNITS`]) for every 16-row activation tile.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows_units_blocked<const F: u8>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                au: *const u8,
                astride: usize,
                n16: usize,
                out: OutRows,
            ) {
                let nu = nb.div_ceil(4).div_ceil(4);
                let per = (W_UNITS / nu).max(1);
                let mut wbuf = [const { std::mem::MaybeUninit::<Unit>::uninit() }; W_UNITS];
                let wp = wbuf.as_mut_ptr() as *mut Unit;
                let pf = crate::quant::prefetch_distance();
                // SAFETY: forwarded caller contract; (r - b0)·nu + u < per·nu <= W_UNITS (the
                // caller routes rows of more than W_UNITS units elsewhere), every slot written
                // before it is read; outputs (j, r) < (n16, r1) are this call's alone.
                unsafe {
                    let mut b0 = r0;
                    while b0 < r1 {
                        let b1 = (b0 + per).min(r1);
                        for r in b0..b1 {
                            let row = w.add(r * rb);
                            if pf > 0 {
                                prefetch_bytes(row.wrapping_add(pf), rb);
                            }
                            for u in 0..nu {
                                wp.add((r - b0) * nu + u).write(w_unit::<F>(c, row, nb, u));
                            }
                        }
                        let mut a0 = 0;
                        while a0 < n16 {
                            let ap = au.add(a0 * astride);
                            for r in b0..b1 {
                                let mut acc = [[_mm512_setzero_ps(); 16]; 1];
                                for u in 0..nu {
                                    let wu = &*wp.add((r - b0) * nu + u);
                                    // Eight activation rows at a time, register by register:
                                    // eight independent `vpdpbusd` chains in flight instead of
                                    // one chain of eight per row (the same exact integers).
                                    for h in 0..2 {
                                        let a: [&Unit; 8] = {
                                            let mut a = [wu; 8];
                                            for (jj, aj) in a.iter_mut().enumerate() {
                                                let row = ap.add((8 * h + jj) * astride);
                                                *aj = &*(row as *const Unit).add(u);
                                            }
                                            a
                                        };
                                        let mut t = [_mm512_setzero_si512(); 8];
                                        for jj in 0..8 {
                                            t[jj] = unit_start::<F>(a[jj].neg);
                                        }
                                        for k in 0..8 {
                                            let wk = wu.q[k];
                                            for jj in 0..8 {
                                                t[jj] = dpb_u::<F>(t[jj], wk, a[jj].q[k]);
                                            }
                                        }
                                        for jj in 0..8 {
                                            let j = 8 * h + jj;
                                            acc[0][j] = unit_scale(acc[0][j], t[jj], wu.d, a[jj].d);
                                        }
                                    }
                                }
                                let v = reduce_tile(&acc);
                                for (j, &x) in v[0].iter().enumerate() {
                                    out.put(a0 + j, r, x);
                                }
                            }
                            a0 += 16;
                        }
                        b0 = b1;
                    }
                }
            }

            /// `gemm` for Q5_0 and Q8_0 rows with units ([`packed::has_units`]): the activation rows'
            /// units (`units_offset` into each row) against the weight rows transposed into
            /// block lanes. Every shape (one activation row, 16-row tiles in row blocks, the
            /// remainders) runs [`unit_step`] unit after unit, so each product has the same
            /// bits in all.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn gemm_units<const F: u8>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                n: usize,
                out: OutRows,
            ) {
                let nu = nb.div_ceil(4).div_ceil(4);
                // SAFETY: forwarded caller contract; rows with units hold them there.
                unsafe {
                    let au = a.add(packed::units_offset(nb * 32));
                    if n == 1 {
                        rows_units::<F, 4, 1>(c, w, rb, nb, r0, r1, au, astride, 0, out);
                        return;
                    }
                    let mut a0 = 0;
                    if n >= 16 && nu <= W_UNITS {
                        a0 = n / 16 * 16;
                        rows_units_blocked::<F>(c, w, rb, nb, r0, r1, au, astride, a0, out);
                    }
                    while a0 + 16 <= n {
                        rows_units::<F, 1, 16>(c, w, rb, nb, r0, r1, au, astride, a0, out);
                        a0 += 16;
                    }
                    // Tiles of at most eight pairs: on the copy they unpack each weight register
                    // where it is used (`unit_tile_copy`).
                    while a0 + 8 <= n {
                        rows_units::<F, 1, 8>(c, w, rb, nb, r0, r1, au, astride, a0, out);
                        a0 += 8;
                    }
                    match n - a0 {
                        0 => {}
                        1 => rows_units::<F, 4, 1>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        2 => rows_units::<F, 2, 2>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        3 => rows_units::<F, 2, 3>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        4 => rows_units::<F, 2, 4>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        5 => rows_units::<F, 1, 5>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        6 => rows_units::<F, 1, 6>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                        _ => rows_units::<F, 1, 7>(c, w, rb, nb, r0, r1, au, astride, a0, out),
                    }
                }
            }

            /// Rows `r0..r1` of `w` (row stride `rb`) × activation rows `a0..a0 + A`.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows<const F: u8, const W: usize, const A: usize>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                a0: usize,
                out: OutRows,
            ) {
                // SAFETY: forwarded caller contract.
                unsafe {
                    if is_q5(F) && nb.div_ceil(4) * A <= NEG_MAX {
                        rows_q5_0::<F, W, A>(c, w, rb, nb, r0, r1, a, astride, a0, out);
                    } else {
                        let none = std::ptr::null();
                        rows_with::<F, W, A, false>(
                            c, w, rb, nb, r0, r1, a, astride, a0, out, none,
                        );
                    }
                }
            }

            /// [`rows`] for Q5_0 with `-16 · Σ a` of every (group, activation row) computed
            /// once into a stack table (`[g][j]`, no allocation) that every tile reads.
            /// Requires `ceil(nb / 4) · A <= NEG_MAX`.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows_q5_0<const F: u8, const W: usize, const A: usize>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                a0: usize,
                out: OutRows,
            ) {
                let mut negs = [const { std::mem::MaybeUninit::<__m512i>::uninit() }; NEG_MAX];
                // SAFETY: forwarded caller contract; ceil(nb / 4)·A <= NEG_MAX.
                unsafe {
                    let ap = a.add(a0 * astride);
                    let neg = fill_negs::<A>(c, ap, astride, nb.div_ceil(4), &mut negs);
                    rows_with::<F, W, A, true>(c, w, rb, nb, r0, r1, a, astride, a0, out, neg);
                }
            }

            /// Writes `-16 · Σ a` of groups `0..ng` of the `A` packed activation rows at `ap`
            /// (`astride` apart) into `negs[g·A + j]` and returns the table's start.
            ///
            /// # Safety
            /// CPU features as above; `ng · A <= NEG_MAX`; each row holds `ng` packed groups.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_negs<const A: usize>(
                c: &Consts,
                ap: *const u8,
                astride: usize,
                ng: usize,
                negs: &mut [std::mem::MaybeUninit<__m512i>; NEG_MAX],
            ) -> *const __m512i {
                let zero = _mm512_setzero_si512();
                // SAFETY: packed activation group g of row j spans 128 quant bytes (caller
                // contract), and g·A + j < ng·A <= NEG_MAX.
                unsafe {
                    for g in 0..ng {
                        for j in 0..A {
                            let aq = ap.add(j * astride + g * GROUP_QS);
                            let s = dpb(dpb(zero, c.sixteen, ld(aq)), c.sixteen, ld(aq.add(64)));
                            negs[g * A + j].write(_mm512_sub_epi32(zero, s));
                        }
                    }
                }
                negs.as_ptr() as *const __m512i
            }

            /// The loop of [`rows`]: tiles of `W` rows, then single rows; `PRE`: `neg` holds
            /// Q5_0's table of activation sums (see [`tile`]).
            #[target_feature(enable = $feat)]
            #[inline]
            #[allow(clippy::too_many_arguments)]
            unsafe fn rows_with<const F: u8, const W: usize, const A: usize, const PRE: bool>(
                c: &Consts,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                a0: usize,
                out: OutRows,
                neg: *const __m512i,
            ) {
                let mut r = r0;
                let pf = crate::quant::prefetch_distance();
                // SAFETY: forwarded caller contract; outputs are (a0 + j, r + i) < (n, r1).
                unsafe {
                    let ap = a.add(a0 * astride);
                    while r + W <= r1 {
                        if a0 == 0 && pf > 0 {
                            // The first pass over these rows streams them from memory: ask for
                            // the bytes `pf` ahead of this tile now.
                            prefetch_bytes(w.wrapping_add(r * rb + pf), W * rb);
                        }
                        let v = tile::<F, W, A, PRE>(c, w.add(r * rb), rb, nb, ap, astride, neg);
                        for (i, vi) in v.iter().enumerate() {
                            for (j, &x) in vi.iter().enumerate() {
                                out.put(a0 + j, r + i, x);
                            }
                        }
                        r += W;
                    }
                    while r < r1 {
                        let v = tile::<F, 1, A, PRE>(c, w.add(r * rb), rb, nb, ap, astride, neg);
                        for (j, &x) in v[0].iter().enumerate() {
                            out.put(a0 + j, r, x);
                        }
                        r += 1;
                    }
                }
            }

            /// `out[a][r] (+)= dot(w row r, activation row a)` for `r0 <= r < r1`, `a < n`.
            /// `repacked` (Q5_0, Q4_1, Q8_0 with units only): the rows are the copy
            /// [`repack_q5_0r_row_simd`] ([`q5_0r_row_bytes`] each: units of 352 bytes or groups
            /// of 88), [`repack_q4_1_row_simd`] (`20 · nb`, as in the file) or
            /// [`repack_q8_0u_row_simd`] ([`q8_0u_row_bytes`]) made of them, with the same bits
            /// as the ggml rows give.
            ///
            /// # Safety
            /// CPU features as above; `w` points at row 0 of a matrix with at least `r1`
            /// rows of `nb` blocks of type `ty` (Q4_0, Q4_1, Q5_0 or Q8_0; repacked as said),
            /// `rb` bytes each; `a` at
            /// `n` packed rows of `nb` blocks, `astride` bytes apart; `out` valid for
            /// `(n, r1)` and not written by anyone else at these indices.
            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(in crate::quant) unsafe fn gemm(
                ty: GgmlType,
                repacked: bool,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                n: usize,
                out: OutRows,
            ) {
                // SAFETY: forwarded caller contract.
                unsafe {
                    match ty {
                        GgmlType::Q4_1 if repacked => {
                            gemm_f::<F_Q4_1R>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        GgmlType::Q4_1 => {
                            gemm_f::<F_Q4_1>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        GgmlType::Q4_0 => {
                            gemm_f::<F_Q4_0>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        GgmlType::Q5_0 if repacked => {
                            gemm_f::<F_Q5_0R>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        GgmlType::Q5_0 => {
                            gemm_f::<F_Q5_0>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        GgmlType::Q8_0 if repacked => {
                            gemm_f::<F_Q8_0R>(ty, w, rb, nb, r0, r1, a, astride, n, out)
                        }
                        _ => gemm_f::<F_Q8_0>(ty, w, rb, nb, r0, r1, a, astride, n, out),
                    }
                }
            }

            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn gemm_f<const F: u8>(
                ty: GgmlType,
                w: *const u8,
                rb: usize,
                nb: usize,
                r0: usize,
                r1: usize,
                a: *const u8,
                astride: usize,
                n: usize,
                out: OutRows,
            ) {
                // SAFETY: forwarded caller contract.
                unsafe {
                    let c = consts(ty);
                    if has_unit_path(F) && packed::has_units(nb.div_ceil(4)) {
                        gemm_units::<F>(&c, w, rb, nb, r0, r1, a, astride, n, out);
                        return;
                    }
                    if n == 1 {
                        rows::<F, 4, 1>(&c, w, rb, nb, r0, r1, a, astride, 0, out);
                        return;
                    }
                    let mut a0 = 0;
                    if is_q4_1(F) && nb.div_ceil(4) > MIN_GROUPS {
                        // Rows too wide to collect their mins: tiles of at most MIN_INLOOP_A
                        // activation rows, which add the min term group by group.
                        while a0 + 2 <= n {
                            rows::<F, 2, 2>(&c, w, rb, nb, r0, r1, a, astride, a0, out);
                            a0 += 2;
                        }
                        if a0 < n {
                            rows::<F, 4, 1>(&c, w, rb, nb, r0, r1, a, astride, a0, out);
                        }
                        return;
                    }
                    // Q5_0 (whose weight groups cost the most to unpack): one weight row against
                    // 16 activation rows, each unpacked group serving twice as many rows as in
                    // the 2 × 8 tile (gemm_k/Q5_0 on a Zen 5 core, six alternated criterion pairs:
                    // 1.82-1.96 ms against 1.91-2.22 ms; gemm/q4_1 slower, so Q4_1 keeps 2 × 8).
                    if is_q5(F) {
                        let ng = nb.div_ceil(4);
                        if n >= 16 && ng <= UNP_GROUPS && ng * 16 <= NEG_MAX {
                            // Each weight group unpacked once per row block rather than once
                            // per 16 activation rows (see `rows_q5_0_blocked`).
                            a0 = n / 16 * 16;
                            rows_q5_0_blocked::<F>(&c, w, rb, nb, r0, r1, a, astride, a0, out);
                        }
                        while a0 + 16 <= n {
                            rows::<F, 1, 16>(&c, w, rb, nb, r0, r1, a, astride, a0, out);
                            a0 += 16;
                        }
                    }
                    while a0 + 8 <= n {
                        rows::<F, 2, 8>(&c, w, rb, nb, r0, r1, a, astride, a0, out);
                        a0 += 8;
                    }
                    // The last 1-7 activation rows in one pass over the weights (an Offline
                    // pass of seven decode rows and a 32-token prompt chunk has 39).
                    match n - a0 {
                        0 => {}
                        1 => rows::<F, 4, 1>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        2 => rows::<F, 2, 2>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        3 => rows::<F, 2, 3>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        4 => rows::<F, 2, 4>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        5 => rows::<F, 2, 5>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        6 => rows::<F, 2, 6>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                        _ => rows::<F, 2, 7>(&c, w, rb, nb, r0, r1, a, astride, a0, out),
                    }
                }
            }
        }
    };
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dpb_vnni(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(acc, u, s)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn dpb_bw(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    // u ≤ 128 and |s| ≤ 127: the pairwise i16 sums cannot saturate.
    _mm512_add_epi32(
        acc,
        _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)),
    )
}

/// `acc + Σ u8 × i8` for any `u` (up to 255) without VNNI: `vpmaddubsw` of the low and the
/// high nibbles apart (each pair sum at most 2 · 15 · 128), the high one's words weighted by 16
/// in `vpmaddwd`. The same exact integers as `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn dpb_bw8(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    let nib = _mm512_set1_epi8(0x0F);
    let lo = _mm512_and_si512(u, nib);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(u), nib);
    let l = _mm512_madd_epi16(_mm512_maddubs_epi16(lo, s), _mm512_set1_epi16(1));
    let h = _mm512_madd_epi16(_mm512_maddubs_epi16(hi, s), _mm512_set1_epi16(16));
    _mm512_add_epi32(acc, _mm512_add_epi32(l, h))
}

kernels!(
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,avx2,fma,f16c",
    super::dpb_vnni,
    super::dpb_vnni
);
kernels!(
    bw,
    "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c",
    super::dpb_bw,
    super::dpb_bw8
);

#[cfg(test)]
mod tests;
