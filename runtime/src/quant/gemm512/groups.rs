//! The weight side of the AVX-512 tiles: the permutation tables that gather a group of four
//! ggml blocks into the packed lane order, the unpacked group ([`WGroup`], and [`PGroup`] for
//! Q5_0's row blocks), and one unpacker per format. See the parent module for the layout.
//!
//! Every function is `unsafe` or needs the CPU features in its `target_feature`; the callers
//! guarantee them and the group's bytes.

use std::arch::x86_64::*;

use crate::GgmlType;

/// Byte permutation gathering one group's quants in packed lane order. `bb` is the block size,
/// `qs` the offset of the quants in a block, `base` the offset of the first source register.
pub(super) const fn idx_q(bb: usize, qs: usize, base: usize) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut o = 0;
    while o < 64 {
        let lane = o / 4;
        t[o] = (bb * (lane % 4) + qs + 4 * (lane / 4) + o % 4 - base) as u8;
        o += 1;
    }
    t
}

/// Word permutation: words 0..16 = the four block scales repeated, 16..32 = the words after
/// them (Q4_1 mins).
pub(super) const fn idx_w(bb: usize) -> [u16; 32] {
    let mut t = [0u16; 32];
    let mut w = 0;
    while w < 32 {
        t[w] = ((bb / 2) * (w % 4) + if w >= 16 { 1 } else { 0 }) as u16;
        w += 1;
    }
    t
}

pub(super) static IDX_Q4_1: [u8; 64] = idx_q(20, 4, 0);
pub(super) static IDX_Q4_0: [u8; 64] = idx_q(18, 2, 0);
pub(super) static IDX_Q8_0_LO: [u8; 64] = idx_q(34, 2, 0);
pub(super) static IDX_Q8_0_HI: [u8; 64] = idx_q(34, 18, 8);
pub(super) static IDX_W4_1: [u16; 32] = idx_w(20);
pub(super) static IDX_W4_0: [u16; 32] = idx_w(18);
pub(super) static IDX_W8_0: [u16; 32] = idx_w(34);
pub(super) static IDX_Q5_0: [u8; 64] = idx_q(22, 6, 0);
pub(super) static IDX_W5_0: [u16; 32] = idx_w(22);

/// Q5_0 fifth bits: for byte `o` of the low (`hi = false`) or high quant register, the index
/// of the `qh` byte of its block that holds its bit (`bit = false`), or that bit's mask.
pub(super) const fn qh_table(hi: bool, bit: bool) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut o = 0;
    while o < 64 {
        let lane = o / 4;
        let e = 4 * (lane / 4) + o % 4 + if hi { 16 } else { 0 };
        t[o] = if bit {
            1 << (e % 8)
        } else {
            (22 * (lane % 4) + 2 + e / 8) as u8
        };
        o += 1;
    }
    t
}

pub(super) static IDX_QH_LO: [u8; 64] = qh_table(false, false);
pub(super) static IDX_QH_HI: [u8; 64] = qh_table(true, false);
pub(super) static BIT_QH_LO: [u8; 64] = qh_table(false, true);
pub(super) static BIT_QH_HI: [u8; 64] = qh_table(true, true);
#[inline(always)]
pub(super) fn mask64(n: usize) -> u64 {
    if n >= 64 { !0 } else { (1u64 << n) - 1 }
}

/// Bytes `[off, off + 64)` of a group of `len` valid bytes at `p`; bytes past `len` read as
/// zero and are never touched.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) unsafe fn load_part(p: *const u8, off: usize, len: usize) -> __m512i {
    let n = len.saturating_sub(off);
    // SAFETY: the masked load touches only bytes [off, off + n), inside the group.
    unsafe { _mm512_maskz_loadu_epi8(mask64(n), p.add(off.min(len)) as *const i8) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) unsafe fn ld(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes at p.
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

/// Scales of four blocks (the f16 words picked by `idx`) as f32 lanes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn cvt_lo(words: __m512i) -> __m512 {
    _mm512_cvtph_ps(_mm512_castsi512_si256(words))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn cvt_hi(words: __m512i) -> __m512 {
    _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(words))
}

/// One unpacked weight group.
#[derive(Clone, Copy)]
pub(super) struct WGroup {
    pub(super) lo: __m512i,
    pub(super) hi: __m512i,
    pub(super) dw: __m512,
    /// Q4_1: mins; unused otherwise.
    pub(super) mw: __m512,
    /// Q4_0/Q8_0: sign masks of `lo`/`hi` (which then hold magnitudes).
    pub(super) sl: __mmask64,
    pub(super) sh: __mmask64,
}

/// A Q5_0 weight group unpacked once for all the activation tiles of a row block: the
/// [`WGroup`] fields that Q5_0 uses, stored so that each tile reloads them in three loads.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct PGroup {
    pub(super) lo: __m512i,
    pub(super) hi: __m512i,
    pub(super) dw: __m512,
}

/// Index registers and constants, loaded once per kernel call.
#[derive(Clone, Copy)]
pub(super) struct Consts {
    pub(super) q: __m512i,
    pub(super) q2: __m512i,
    pub(super) w: __m512i,
    pub(super) nib: __m512i,
    pub(super) eight: __m512i,
    pub(super) sixteen: __m512i,
    /// Q5_0: `qh` byte gathers and bit masks for the low and high registers.
    pub(super) h_lo: __m512i,
    pub(super) h_hi: __m512i,
    pub(super) b_lo: __m512i,
    pub(super) b_hi: __m512i,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) unsafe fn consts(ty: GgmlType) -> Consts {
    // SAFETY: the index tables are 64 bytes each.
    unsafe {
        let (q, q2, w) = match ty {
            GgmlType::Q4_1 => (
                ld(IDX_Q4_1.as_ptr()),
                _mm512_setzero_si512(),
                ld(IDX_W4_1.as_ptr() as *const u8),
            ),
            GgmlType::Q4_0 => (
                ld(IDX_Q4_0.as_ptr()),
                _mm512_setzero_si512(),
                ld(IDX_W4_0.as_ptr() as *const u8),
            ),
            GgmlType::Q5_0 => (
                ld(IDX_Q5_0.as_ptr()),
                _mm512_setzero_si512(),
                ld(IDX_W5_0.as_ptr() as *const u8),
            ),
            _ => (
                ld(IDX_Q8_0_LO.as_ptr()),
                ld(IDX_Q8_0_HI.as_ptr()),
                ld(IDX_W8_0.as_ptr() as *const u8),
            ),
        };
        Consts {
            q,
            q2,
            w,
            nib: _mm512_set1_epi8(0x0F),
            eight: _mm512_set1_epi8(8),
            sixteen: _mm512_set1_epi8(16),
            h_lo: ld(IDX_QH_LO.as_ptr()),
            h_hi: ld(IDX_QH_HI.as_ptr()),
            b_lo: ld(BIT_QH_LO.as_ptr()),
            b_hi: ld(BIT_QH_HI.as_ptr()),
        }
    }
}

/// Unpacks the Q4_1 group at `p` (`len` valid bytes, 80 when full).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q4_1(c: &Consts, p: *const u8, len: usize) -> WGroup {
    // SAFETY: a full group holds 80 readable bytes; a partial one is read with masks.
    let (z0, z1) = unsafe {
        if len == 80 {
            (
                ld(p),
                _mm512_castsi128_si512(_mm_loadu_si128(p.add(64) as *const __m128i)),
            )
        } else {
            (load_part(p, 0, len), load_part(p, 64, len))
        }
    };
    let x = _mm512_permutex2var_epi8(z0, c.q, z1);
    let sc = _mm512_permutexvar_epi16(c.w, z0);
    WGroup {
        lo: _mm512_and_si512(x, c.nib),
        hi: _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib),
        dw: cvt_lo(sc),
        mw: cvt_hi(sc),
        sl: 0,
        sh: 0,
    }
}

/// Unpacks the Q4_0 group at `p` (`len` valid bytes, 72 when full).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q4_0(c: &Consts, p: *const u8, len: usize) -> WGroup {
    // SAFETY: a full group holds 72 readable bytes; a partial one is read with masks.
    let (z0, z1) = unsafe {
        if len == 72 {
            (
                ld(p),
                _mm512_castsi128_si512(_mm_loadl_epi64(p.add(64) as *const __m128i)),
            )
        } else {
            (load_part(p, 0, len), load_part(p, 64, len))
        }
    };
    let x = _mm512_permutex2var_epi8(z0, c.q, z1);
    let lo = _mm512_sub_epi8(_mm512_and_si512(x, c.nib), c.eight);
    let hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib), c.eight);
    let sc = _mm512_permutexvar_epi16(c.w, z0);
    signed_group(lo, hi, sc)
}

/// A group of signed quants (`lo`, `hi`, in the packed order) and scale words `sc`: their
/// magnitudes with the signs as masks, which the tile moves onto the activations.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn signed_group(lo: __m512i, hi: __m512i, sc: __m512i) -> WGroup {
    WGroup {
        sl: _mm512_movepi8_mask(lo),
        sh: _mm512_movepi8_mask(hi),
        lo: _mm512_abs_epi8(lo),
        hi: _mm512_abs_epi8(hi),
        dw: cvt_lo(sc),
        mw: _mm512_setzero_ps(),
    }
}

/// Unpacks the Q5_0 group at `p` (`len` valid bytes, 88 when full): nibbles as Q4_0, the
/// fifth bit of each quant tested in its block's `qh`, `q - 16` as a signed byte.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q5_0(c: &Consts, p: *const u8, len: usize) -> WGroup {
    // SAFETY: a full group holds 88 readable bytes; the bytes past 64 and a partial group are
    // read with masks.
    let (z0, z1) = unsafe {
        if len == 88 {
            (ld(p), load_part(p, 64, len))
        } else {
            (load_part(p, 0, len), load_part(p, 64, len))
        }
    };
    let x = _mm512_permutex2var_epi8(z0, c.q, z1);
    let nl = _mm512_and_si512(x, c.nib);
    let nh = _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib);
    let ml = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(z0, c.h_lo, z1), c.b_lo);
    let mh = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(z0, c.h_hi, z1), c.b_hi);
    // The unsigned quant `u = nibble + 16 · bit` (0..=31); the tile subtracts `16 · Σ a`.
    let lo = _mm512_mask_add_epi8(nl, ml, nl, c.sixteen);
    let hi = _mm512_mask_add_epi8(nh, mh, nh, c.sixteen);
    let sc = _mm512_permutex2var_epi16(z0, c.w, z1);
    WGroup {
        sl: 0,
        sh: 0,
        lo,
        hi,
        dw: cvt_lo(sc),
        mw: _mm512_setzero_ps(),
    }
}

/// Unpacks the Q8_0 group at `p` (`len` valid bytes, 136 when full).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q8_0(c: &Consts, p: *const u8, len: usize) -> WGroup {
    // SAFETY: forwarded caller contract.
    let [z0, z1, z2, z3] = unsafe { load_q8_0(p, len) };
    let (lo, hi, sc) = gather_q8_0(c, z0, z1, z2, z3);
    signed_group(lo, hi, sc)
}

/// The bytes of the Q8_0 group at `p` (`len` valid bytes, 136 when full) at offsets 0, 64, 8
/// and 72, for [`gather_q8_0`]; zeros past `len`.
///
/// # Safety
/// `len` bytes at `p` are readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) unsafe fn load_q8_0(p: *const u8, len: usize) -> [__m512i; 4] {
    // SAFETY: a full group holds 136 readable bytes; a partial one is read with masks.
    unsafe {
        if len == 136 {
            [ld(p), ld(p.add(64)), ld(p.add(8)), ld(p.add(72))]
        } else {
            [
                load_part(p, 0, len),
                load_part(p, 64, len),
                load_part(p, 8, len),
                load_part(p, 72, len),
            ]
        }
    }
}

/// The signed quants of a Q8_0 group in the packed lane order (elements `0..16` of each
/// block in `lo`, `16..32` in `hi`) and its scale words, from the group's bytes `z0`, `z1`
/// (offsets 0 and 64) and `z2`, `z3` (offsets 8 and 72).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
#[inline]
pub(super) fn gather_q8_0(
    c: &Consts,
    z0: __m512i,
    z1: __m512i,
    z2: __m512i,
    z3: __m512i,
) -> (__m512i, __m512i, __m512i) {
    (
        _mm512_permutex2var_epi8(z0, c.q, z1),
        _mm512_permutex2var_epi8(z2, c.q2, z3),
        _mm512_permutex2var_epi16(z0, c.w, z1),
    )
}

/// Bytes of one Q4_1 group in the repacked layout ([`repack_q4_1_row`]).
pub(in crate::quant) const Q4_1R_GROUP: usize = 80;

/// Rewrites one Q4_1 row of `nb` ggml blocks (`src`, 20 bytes each) into the layout
/// [`unpack_q4_1r`] reads: per whole group of four blocks, 80 bytes (as many as the ggml
/// blocks) holding the 64 quant bytes in the packed lane order (byte `o`: block `(o / 4) % 4`,
/// quant byte `4 (o / 16) + o % 4` of that block, as the permute of [`unpack_q4_1`] gathers
/// them), then the four f16 block scales and the four f16 block mins. The last `nb % 4` blocks
/// stay as in the file (the tile reads them with [`unpack_q4_1`]), so a row keeps its `20 · nb`
/// bytes: the decode streams no padding. Both layouts give the same integers, scales and mins,
/// hence the same bits.
///
/// # Panics
/// If `src` or `dst` is not `nb` blocks. The reference of [`repack_q4_1_row_simd`], which the
/// model loader runs.
#[cfg(test)]
pub(in crate::quant) fn repack_q4_1_row(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 20, "Q4_1 row of {nb} blocks");
    assert_eq!(dst.len(), nb * 20, "repacked row");
    let full = nb / 4;
    dst[full * Q4_1R_GROUP..].copy_from_slice(&src[full * 80..]);
    for (g, out) in dst[..full * Q4_1R_GROUP]
        .chunks_exact_mut(Q4_1R_GROUP)
        .enumerate()
    {
        for b in 0..4 {
            let s = &src[20 * (4 * g + b)..][..20];
            out[64 + 2 * b..66 + 2 * b].copy_from_slice(&s[..2]);
            out[72 + 2 * b..74 + 2 * b].copy_from_slice(&s[2..4]);
            for k in 0..4 {
                for m in 0..4 {
                    out[16 * k + 4 * b + m] = s[4 + 4 * k + m];
                }
            }
        }
    }
}

/// Unpacks the repacked Q4_1 group at `p` ([`repack_q4_1_row`]): the same nibbles, scales and
/// mins as [`unpack_q4_1`], without its byte and word permutes and its two 512-bit f16
/// conversions (the four scales and the four mins are widened in 128-bit registers and
/// broadcast).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q4_1r(c: &Consts, p: *const u8) -> WGroup {
    // SAFETY: a repacked group holds 80 readable bytes.
    let (x, dw, mw) = unsafe {
        (
            ld(p),
            _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_loadl_epi64(p.add(64) as *const __m128i))),
            _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_loadl_epi64(p.add(72) as *const __m128i))),
        )
    };
    WGroup {
        lo: _mm512_and_si512(x, c.nib),
        hi: _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib),
        dw,
        mw,
        sl: 0,
        sh: 0,
    }
}

/// The Q4_1 group at `p` (`len` valid bytes, 80 when whole) in the layout of
/// [`repack_q4_1_row`]'s whole groups, gathered by the permutes of [`unpack_q4_1`]; blocks
/// past `len` are zero.
///
/// # Safety
/// The CPU has the features in `target_feature`; `len` bytes are readable at `p`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
unsafe fn repack_q4_1_group(c: &Consts, p: *const u8, len: usize) -> [u8; Q4_1R_GROUP] {
    // SAFETY: the masked loads touch only the `len` readable bytes.
    let (z0, z1) = unsafe { (load_part(p, 0, len), load_part(p, 64, len)) };
    let x = _mm512_permutex2var_epi8(z0, c.q, z1);
    // Words 0..4: the four scales; words 16..20: the four mins.
    let sc = _mm512_permutexvar_epi16(c.w, z0);
    let mut out = [0u8; Q4_1R_GROUP];
    // SAFETY: `out` holds 80 bytes: 64 quant bytes at 0, the scales at 64 and the mins at 72;
    // the stores are unaligned.
    unsafe {
        _mm512_storeu_si512(out.as_mut_ptr() as *mut __m512i, x);
        _mm_storel_epi64(
            out.as_mut_ptr().add(64) as *mut __m128i,
            _mm512_castsi512_si128(sc),
        );
        _mm_storel_epi64(
            out.as_mut_ptr().add(72) as *mut __m128i,
            _mm256_castsi256_si128(_mm512_extracti64x4_epi64::<1>(sc)),
        );
    }
    out
}

/// [`repack_q4_1_row`] with the permutes of [`unpack_q4_1`] ([`repack_q4_1_group`]): the same
/// bytes (unit test `simd_repack_writes_the_scalar_repack`).
///
/// # Safety
/// The CPU has the features in `target_feature`.
///
/// # Panics
/// As [`repack_q4_1_row`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
pub(in crate::quant) unsafe fn repack_q4_1_row_simd(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 20, "Q4_1 row of {nb} blocks");
    assert_eq!(dst.len(), nb * 20, "repacked row");
    // SAFETY: the caller guarantees the features; the tables are 64 bytes each.
    let c = unsafe { consts(GgmlType::Q4_1) };
    let full = nb / 4;
    dst[full * Q4_1R_GROUP..].copy_from_slice(&src[full * 80..]);
    for (g, out) in dst[..full * Q4_1R_GROUP]
        .chunks_exact_mut(Q4_1R_GROUP)
        .enumerate()
    {
        // SAFETY: a whole group: 80 readable bytes.
        out.copy_from_slice(&unsafe { repack_q4_1_group(&c, src[80 * g..].as_ptr(), 80) });
    }
}

/// Bytes of one Q5_0 group in the repacked layout ([`repack_q5_0_row`]).
pub(in crate::quant) const Q5_0R_GROUP: usize = 88;

/// Rewrites one Q5_0 row of `nb` ggml blocks (`src`, 22 bytes each) into the layout
/// [`unpack_q5_0r`] reads: per group of four blocks, 88 bytes (as many as the ggml blocks)
/// holding the 64 quant bytes in the packed lane order (byte `o`: block `(o / 4) % 4`,
/// element `4 (o / 16) + o % 4` in its low nibble and that element + 16 in its high nibble,
/// as the permute of [`unpack_q5_0`] gathers them), the fifth bits of the low and of the high
/// nibbles as two 64-bit lane masks, and the four f16 block scales. Blocks past `nb` in the last group
/// are zero, as the masked loads of [`unpack_q5_0`] read them, so both layouts give the same
/// integers and scales, hence the same bits.
///
/// # Panics
/// If `src` is not `nb` blocks or `dst` not `ceil(nb / 4)` groups. The reference of
/// [`repack_q5_0_row_simd`], which the model loader runs.
#[cfg(test)]
pub(in crate::quant) fn repack_q5_0_row(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert_eq!(dst.len(), nb.div_ceil(4) * Q5_0R_GROUP, "repacked row");
    dst.fill(0);
    for (g, out) in dst.chunks_exact_mut(Q5_0R_GROUP).enumerate() {
        let mut lo_bits = 0u64;
        let mut hi_bits = 0u64;
        for b in 0..4 {
            let blk = 4 * g + b;
            if blk >= nb {
                continue;
            }
            let s = &src[22 * blk..22 * blk + 22];
            out[80 + 2 * b..82 + 2 * b].copy_from_slice(&s[..2]);
            let qh = u32::from_le_bytes([s[2], s[3], s[4], s[5]]);
            for k in 0..4 {
                for m in 0..4 {
                    let o = 16 * k + 4 * b + m;
                    let e = 4 * k + m;
                    out[o] = s[6 + e];
                    lo_bits |= u64::from((qh >> e) & 1) << o;
                    hi_bits |= u64::from((qh >> (e + 16)) & 1) << o;
                }
            }
        }
        out[64..72].copy_from_slice(&lo_bits.to_le_bytes());
        out[72..80].copy_from_slice(&hi_bits.to_le_bytes());
    }
}

/// Unpacks the repacked Q5_0 group at `p` ([`repack_q5_0_row`]): the same `u = nibble + 16 ·
/// bit` and scales as [`unpack_q5_0`], without its byte and word permutes (the four scales
/// are widened in a 128-bit register and broadcast).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q5_0r(c: &Consts, p: *const u8) -> WGroup {
    // SAFETY: a repacked group holds 88 readable bytes.
    let (x, ml, mh, dw) = unsafe {
        (
            ld(p),
            std::ptr::read_unaligned(p.add(64) as *const u64),
            std::ptr::read_unaligned(p.add(72) as *const u64),
            _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_loadl_epi64(p.add(80) as *const __m128i))),
        )
    };
    let nl = _mm512_and_si512(x, c.nib);
    let nh = _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib);
    WGroup {
        sl: 0,
        sh: 0,
        lo: _mm512_mask_add_epi8(nl, ml, nl, c.sixteen),
        hi: _mm512_mask_add_epi8(nh, mh, nh, c.sixteen),
        dw,
        mw: _mm512_setzero_ps(),
    }
}

/// [`repack_q5_0_row`] with the permutes and bit tests of [`unpack_q5_0`]: the same bytes (unit
/// test `simd_repack_writes_the_scalar_repack`), about a hundred times faster, so that a model's
/// Q5_0 matrices are repacked in milliseconds at load.
///
/// # Safety
/// The CPU has the features in `target_feature`.
///
/// # Panics
/// As [`repack_q5_0_row`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
pub(in crate::quant) unsafe fn repack_q5_0_row_simd(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert_eq!(dst.len(), nb.div_ceil(4) * Q5_0R_GROUP, "repacked row");
    // SAFETY: the caller guarantees the features; the tables are 64 bytes each.
    let c = unsafe { consts(GgmlType::Q5_0) };
    for (g, out) in dst.chunks_exact_mut(Q5_0R_GROUP).enumerate() {
        let len = (src.len() - 88 * g).min(88);
        let p = src[88 * g..].as_ptr();
        // SAFETY: `len` bytes are readable at `p` (the group's blocks); the masked loads touch
        // no others.
        let (z0, z1) = unsafe { (load_part(p, 0, len), load_part(p, 64, len)) };
        let x = _mm512_permutex2var_epi8(z0, c.q, z1);
        let ml = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(z0, c.h_lo, z1), c.b_lo);
        let mh = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(z0, c.h_hi, z1), c.b_hi);
        let sc = _mm512_permutex2var_epi16(z0, c.w, z1);
        out[64..72].copy_from_slice(&ml.to_le_bytes());
        out[72..80].copy_from_slice(&mh.to_le_bytes());
        // SAFETY: `out` holds 88 bytes: 64 quant bytes at 0 and the four f16 scales (the low
        // 8 bytes of `sc`) at 80; the stores are unaligned.
        unsafe {
            _mm512_storeu_si512(out.as_mut_ptr() as *mut __m512i, x);
            _mm_storel_epi64(
                out.as_mut_ptr().add(80) as *mut __m128i,
                _mm512_castsi512_si128(sc),
            );
        }
    }
}
