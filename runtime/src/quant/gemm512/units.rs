//! Q5_0 in block lanes: the weight side of the AVX-512 tiles for rows with units
//! ([`crate::quant::packed::has_units`]). A unit is sixteen blocks (four groups) of one row in
//! eight registers, 32-bit lane `4k + b` of every register belonging to block `b` of the
//! unit's group `k`, so that eight `vpdpbusd` give each lane a whole block's dot and the float
//! step (convert, scales multiplied, FMA) runs once per sixteen blocks instead of once per
//! four. The activation side is the packed rows' units, written by the quantizer
//! ([`crate::quant::pack512`]).
//!
//! The copy made at load ([`repack_q5_0r_row_simd`]) stores a row with units as units of
//! [`Q5_0U_UNIT`] bytes, as many as its sixteen ggml blocks:
//!
//! ```text
//! [ nibbles: 4 × 64 bytes ][ fifth bits: 8 × u64 ][ scales: 16 × f16 ]
//! ```
//!
//! Byte `64c + 16k + 4b + m` of the nibbles holds, for block `b` of group `k`, element
//! `4c + m` in its low nibble (register `c`) and element `16 + 4c + m` in its high nibble
//! (register `4 + c`); bit `16k + 4b + m` of mask `r` is the fifth bit of register `r`'s byte
//! there; scale `4k + b` is block `b` of group `k`'s. A row's last unit of `K < 4` groups
//! keeps only what its groups fill, `72K + 64` bytes: each nibble register's first `16K`
//! bytes, the eight masks, `4K` scales (the kernel's masked loads read the rest as zeros), so
//! that Qwen2.5's 896-wide rows take 632 bytes against the file's 616, not two whole units'
//! 704. Rows without units keep the 88-byte groups of [`super::groups::unpack_q5_0r`].
//!
//! Q8_0 rows with units run the same step on the quants `q + 128` (a byte's sign bit
//! flipped), starting from `-128 · Σ a` (the activation unit's `-16 · Σ a` times eight). Their
//! copy ([`repack_q8_0u_row_simd`]) stores a unit of `K` groups in `136K` bytes, as many as
//! the file's blocks when `K` groups are whole: eight registers' first `16K` bytes each (byte
//! `16k + 4b + m` of register `4v + c` is element `16v + 4c + m` of block `b` of group `k`,
//! plus 128), then the `4K` f16 scales. A partial last group's missing blocks read as quants
//! `128` (zero) with a zero scale in both the copy and the file path.

use std::arch::x86_64::*;

use super::groups::{Consts, Q5_0R_GROUP, consts, cvt_lo, gather_q8_0, load_q8_0, unpack_q5_0};
use crate::GgmlType;
use crate::quant::packed::has_units;

/// Bytes of one unit of the Q5_0 copy.
pub(in crate::quant) const Q5_0U_UNIT: usize = 352;

/// Bytes of a row of `nb` Q5_0 blocks in the copy made at load: units where the row has them,
/// otherwise groups of four blocks.
pub(in crate::quant) const fn q5_0r_row_bytes(nb: usize) -> usize {
    let ng = nb.div_ceil(4);
    if has_units(ng) {
        let nu = ng.div_ceil(4);
        (nu - 1) * Q5_0U_UNIT + unit_bytes(ng - 4 * (nu - 1))
    } else {
        ng * Q5_0R_GROUP
    }
}

/// Bytes of a unit of `k` groups in the copy (module docs).
const fn unit_bytes(k: usize) -> usize {
    72 * k + 64
}

/// Writes a whole unit's bytes (`full`, [`Q5_0U_UNIT`]) as a unit of `k` groups into `out`
/// ([`unit_bytes`]`(k)` bytes): each nibble register's first `16k` bytes, the masks, `4k`
/// scales.
fn place_unit(full: &[u8], k: usize, out: &mut [u8]) {
    for c in 0..4 {
        out[16 * k * c..16 * k * (c + 1)].copy_from_slice(&full[64 * c..64 * c + 16 * k]);
    }
    out[64 * k..64 * k + 64].copy_from_slice(&full[256..320]);
    out[64 * k + 64..72 * k + 64].copy_from_slice(&full[320..320 + 8 * k]);
}

/// One unit of a row (see the module docs): the unsigned quants `q + 16` of its sixteen
/// blocks in block lanes, their scales, and (activations) `-16 · Σ a` per block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Unit {
    pub(super) q: [__m512i; 8],
    pub(super) d: __m512,
    pub(super) neg: __m512i,
}

/// 4×4 transpose of 128-bit chunks: chunk `k` of result `r` is chunk `r` of `x[k]`. On four
/// groups in the packed order (chunk `c` of a group register = quarter `c` of its four blocks,
/// lane `4c + b` = block `b`) this gives the unit order.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn transpose4(x: [__m512i; 4]) -> [__m512i; 4] {
    let t0 = _mm512_shuffle_i32x4::<0x44>(x[0], x[1]);
    let t1 = _mm512_shuffle_i32x4::<0xEE>(x[0], x[1]);
    let t2 = _mm512_shuffle_i32x4::<0x44>(x[2], x[3]);
    let t3 = _mm512_shuffle_i32x4::<0xEE>(x[2], x[3]);
    [
        _mm512_shuffle_i32x4::<0x88>(t0, t2),
        _mm512_shuffle_i32x4::<0xDD>(t0, t2),
        _mm512_shuffle_i32x4::<0x88>(t1, t3),
        _mm512_shuffle_i32x4::<0xDD>(t1, t3),
    ]
}

/// Unit `u` of a Q5_0 (`Q8` false) or Q8_0 (`Q8` true) row of `nb` blocks in the file's
/// layout at `row`: groups `4u..4u + 4` unpacked by [`unpack_q5_0`] (Q5_0's `q + 16`) or
/// gathered into the packed lane order and flipped to `q + 128` (Q8_0), then transposed;
/// zeros past the row's last group.
///
/// # Safety
/// The CPU features below; `row` holds `nb` ggml blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unit_from_file<const Q8: bool>(
    c: &Consts,
    row: *const u8,
    nb: usize,
    u: usize,
) -> Unit {
    let ng = nb.div_ceil(4);
    let (bb, gb) = if Q8 { (34, 136) } else { (22, 88) };
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(-128);
    let (mut lo, mut hi) = ([zero; 4], [zero; 4]);
    let mut d = _mm512_setzero_ps();
    for k in 0..4 {
        let g = 4 * u + k;
        if g >= ng {
            break;
        }
        let len = (nb - 4 * g).min(4) * bb;
        // SAFETY: group g < ng spans [gb·g, gb·g + len) of the row (caller contract).
        let p = unsafe { row.add(gb * g) };
        let dw = if Q8 {
            // SAFETY: as above.
            let [z0, z1, z2, z3] = unsafe { load_q8_0(p, len) };
            let (l, h, sc) = gather_q8_0(c, z0, z1, z2, z3);
            lo[k] = _mm512_xor_si512(l, flip);
            hi[k] = _mm512_xor_si512(h, flip);
            cvt_lo(sc)
        } else {
            // SAFETY: as above.
            let x = unsafe { unpack_q5_0(c, p, len) };
            lo[k] = x.lo;
            hi[k] = x.hi;
            x.dw
        };
        d = _mm512_mask_mov_ps(d, 0xF << (4 * k), dw);
    }
    unit_of(lo, hi, d)
}

/// The unit of four groups' low and high registers in the packed order (`lo[k]`, `hi[k]`:
/// group `k`) and their scales in block lanes `d`: the registers transposed.
#[target_feature(enable = "avx512f")]
#[inline]
fn unit_of(lo: [__m512i; 4], hi: [__m512i; 4], d: __m512) -> Unit {
    let (l, h) = (transpose4(lo), transpose4(hi));
    Unit {
        q: [l[0], l[1], l[2], l[3], h[0], h[1], h[2], h[3]],
        d,
        neg: _mm512_setzero_si512(),
    }
}

/// Unit `u` of a row of `ng` groups of the copy ([`repack_q5_0r_row_simd`]) at `row`: the
/// same integers and scales as [`unit_from_file`] gives of the file's row.
///
/// # Safety
/// The CPU features below; `row` is a row of the copy with units, `4u < ng`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unit_from_copy(c: &Consts, row: *const u8, ng: usize, u: usize) -> Unit {
    let zero = _mm512_setzero_si512();
    let mut q = [zero; 8];
    let k = (ng - 4 * u).min(4);
    // SAFETY: unit u spans unit_bytes(k) readable bytes (caller contract); the masked loads
    // of a last unit of k < 4 groups read only its bytes.
    unsafe {
        let p = row.add(u * Q5_0U_UNIT);
        let (qm, at_m) = if k == 4 {
            (u64::MAX, 256)
        } else {
            ((1u64 << (16 * k)) - 1, 64 * k)
        };
        for r in 0..4 {
            let x = _mm512_maskz_loadu_epi8(qm, p.add(16 * k * r) as *const i8);
            let nl = _mm512_and_si512(x, c.nib);
            let nh = _mm512_and_si512(_mm512_srli_epi16::<4>(x), c.nib);
            let ml = std::ptr::read_unaligned(p.add(at_m + 8 * r) as *const u64);
            let mh = std::ptr::read_unaligned(p.add(at_m + 32 + 8 * r) as *const u64);
            q[r] = _mm512_mask_add_epi8(nl, ml, nl, c.sixteen);
            q[4 + r] = _mm512_mask_add_epi8(nh, mh, nh, c.sixteen);
        }
        let sm: __mmask16 = if k == 4 { !0 } else { (1 << (4 * k)) - 1 };
        let h = _mm256_maskz_loadu_epi16(sm, p.add(at_m + 64) as *const i16);
        Unit {
            q,
            d: _mm512_cvtph_ps(h),
            neg: zero,
        }
    }
}

/// The copy's row of `nb` ggml Q5_0 blocks (`src`) into `dst`: units where the row has them
/// (module docs), otherwise [`super::groups::repack_q5_0_row_simd`]'s groups. The units are
/// [`unit_from_file`]'s registers written back as nibbles and fifth-bit masks, the scales
/// copied as they are.
///
/// # Safety
/// The CPU has the features in `target_feature`.
///
/// # Panics
/// If `src` is not `nb` blocks or `dst` not [`q5_0r_row_bytes`]`(nb)` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
pub(in crate::quant) unsafe fn repack_q5_0r_row_simd(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert_eq!(dst.len(), q5_0r_row_bytes(nb), "repacked row");
    let ng = nb.div_ceil(4);
    if !has_units(ng) {
        // SAFETY: the same features.
        unsafe { super::groups::repack_q5_0_row_simd(src, nb, dst) };
        return;
    }
    // SAFETY: the caller guarantees the features; the tables are 64 bytes each.
    let c = unsafe { consts(GgmlType::Q5_0) };
    let low = _mm512_set1_epi8(0x0F);
    let mut full = [0u8; Q5_0U_UNIT];
    for u in 0..ng.div_ceil(4) {
        let out = &mut full;
        // SAFETY: `src` holds the row's nb blocks; `out` is Q5_0U_UNIT bytes.
        unsafe {
            let x = unit_from_file::<false>(&c, src.as_ptr(), nb, u);
            let o = out.as_mut_ptr();
            for r in 0..4 {
                let nib = _mm512_or_si512(
                    _mm512_and_si512(x.q[r], low),
                    _mm512_slli_epi16::<4>(_mm512_and_si512(x.q[4 + r], low)),
                );
                _mm512_storeu_si512(o.add(64 * r) as *mut __m512i, nib);
                let ml = _mm512_test_epi8_mask(x.q[r], c.sixteen);
                let mh = _mm512_test_epi8_mask(x.q[4 + r], c.sixteen);
                std::ptr::write_unaligned(o.add(256 + 8 * r) as *mut u64, ml);
                std::ptr::write_unaligned(o.add(288 + 8 * r) as *mut u64, mh);
            }
        }
        for lane in 0..16 {
            let b = 16 * u + lane;
            let d = if b < nb {
                [src[22 * b], src[22 * b + 1]]
            } else {
                [0; 2]
            };
            out[320 + 2 * lane..322 + 2 * lane].copy_from_slice(&d);
        }
        let k = (ng - 4 * u).min(4);
        place_unit(
            &full,
            k,
            &mut dst[u * Q5_0U_UNIT..u * Q5_0U_UNIT + unit_bytes(k)],
        );
    }
}

/// The reference of [`repack_q5_0r_row_simd`] for rows with units, element by element from
/// the module docs.
///
/// # Panics
/// If `src` is not `nb` blocks, `dst` not [`q5_0r_row_bytes`]`(nb)` bytes, or the row has no
/// units.
#[cfg(test)]
pub(in crate::quant) fn repack_q5_0_units_row(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 22, "Q5_0 row of {nb} blocks");
    assert!(has_units(nb.div_ceil(4)), "{nb} blocks: no units");
    assert_eq!(dst.len(), q5_0r_row_bytes(nb), "repacked row");
    let ng = nb.div_ceil(4);
    let nu = ng.div_ceil(4);
    let mut units = vec![0u8; nu * Q5_0U_UNIT];
    for b in 0..nb {
        let s = &src[22 * b..22 * b + 22];
        let (g, bi) = (b / 4, b % 4);
        let (u, k) = (g / 4, g % 4);
        let out = &mut units[u * Q5_0U_UNIT..(u + 1) * Q5_0U_UNIT];
        let lane = 4 * k + bi;
        out[320 + 2 * lane..322 + 2 * lane].copy_from_slice(&s[..2]);
        let qh = u32::from_le_bytes([s[2], s[3], s[4], s[5]]);
        for e in 0..32 {
            let nibble = if e < 16 {
                s[6 + e] & 0x0F
            } else {
                s[6 + e - 16] >> 4
            };
            let (v, cq, m) = (e / 16, (e % 16) / 4, e % 4);
            let at = 16 * k + 4 * bi + m;
            out[64 * cq + at] |= nibble << (4 * v);
            if (qh >> e) & 1 == 1 {
                let r = 4 * v + cq;
                let word = 256 + 8 * r + at / 8;
                out[word] |= 1 << (at % 8);
            }
        }
    }
    for (u, full) in units.chunks_exact(Q5_0U_UNIT).enumerate() {
        let k = (ng - 4 * u).min(4);
        place_unit(
            full,
            k,
            &mut dst[u * Q5_0U_UNIT..u * Q5_0U_UNIT + unit_bytes(k)],
        );
    }
}

/// Bytes of one whole unit of the Q8_0 copy (sixteen blocks, as in the file).
pub(in crate::quant) const Q8_0U_UNIT: usize = 544;

/// Bytes of a row of `nb` Q8_0 blocks in the copy with units: `136` per group of four blocks
/// (a partial last group padded to four).
pub(in crate::quant) const fn q8_0u_row_bytes(nb: usize) -> usize {
    nb.div_ceil(4) * 136
}

/// Unit `u` of a row of `ng` groups of the Q8_0 copy ([`repack_q8_0u_row_simd`]) at `row`:
/// the same integers and scales as [`unit_from_file`] gives of the file's row.
///
/// # Safety
/// The CPU features below; `row` is a row of the Q8_0 copy, `4u < ng`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unit_from_copy_q8(row: *const u8, ng: usize, u: usize) -> Unit {
    let k = (ng - 4 * u).min(4);
    let qm = if k == 4 {
        u64::MAX
    } else {
        (1u64 << (16 * k)) - 1
    };
    let sm: __mmask16 = if k == 4 { !0 } else { (1 << (4 * k)) - 1 };
    let mut q = [_mm512_setzero_si512(); 8];
    // SAFETY: unit u spans 136 k readable bytes (caller contract); the masked loads read only
    // them.
    unsafe {
        let p = row.add(u * Q8_0U_UNIT);
        for (r, qr) in q.iter_mut().enumerate() {
            *qr = _mm512_maskz_loadu_epi8(qm, p.add(16 * k * r) as *const i8);
        }
        let h = _mm256_maskz_loadu_epi16(sm, p.add(128 * k) as *const i16);
        Unit {
            q,
            d: _mm512_cvtph_ps(h),
            neg: _mm512_setzero_si512(),
        }
    }
}

/// The Q8_0 copy's row of `nb` ggml blocks (`src`) into `dst` ([`q8_0u_row_bytes`] bytes, the
/// module docs' layout): [`unit_from_file`]'s registers stored as they are, each unit's
/// scales copied from the blocks.
///
/// # Safety
/// The CPU has the features in `target_feature`.
///
/// # Panics
/// If `src` is not `nb` blocks, `dst` not [`q8_0u_row_bytes`]`(nb)` bytes, or the row has no
/// units.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
pub(in crate::quant) unsafe fn repack_q8_0u_row_simd(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 34, "Q8_0 row of {nb} blocks");
    assert_eq!(dst.len(), q8_0u_row_bytes(nb), "repacked row");
    let ng = nb.div_ceil(4);
    assert!(has_units(ng), "{nb} blocks: no units");
    // SAFETY: the caller guarantees the features; the tables are 64 bytes each.
    let c = unsafe { consts(GgmlType::Q8_0) };
    let mut full = [0u8; Q8_0U_UNIT];
    for u in 0..ng.div_ceil(4) {
        // SAFETY: `src` holds the row's nb blocks; `full` is Q8_0U_UNIT bytes.
        unsafe {
            let x = unit_from_file::<true>(&c, src.as_ptr(), nb, u);
            for (r, qr) in x.q.iter().enumerate() {
                _mm512_storeu_si512(full.as_mut_ptr().add(64 * r) as *mut __m512i, *qr);
            }
        }
        let k = (ng - 4 * u).min(4);
        let out = &mut dst[u * Q8_0U_UNIT..u * Q8_0U_UNIT + 136 * k];
        for r in 0..8 {
            out[16 * k * r..16 * k * (r + 1)].copy_from_slice(&full[64 * r..64 * r + 16 * k]);
        }
        for lane in 0..4 * k {
            let b = 16 * u + lane;
            let d = if b < nb {
                [src[34 * b], src[34 * b + 1]]
            } else {
                [0; 2]
            };
            out[128 * k + 2 * lane..128 * k + 2 * lane + 2].copy_from_slice(&d);
        }
    }
}

/// The reference of [`repack_q8_0u_row_simd`], element by element from the module docs.
///
/// # Panics
/// As [`repack_q8_0u_row_simd`].
#[cfg(test)]
pub(in crate::quant) fn repack_q8_0_units_row(src: &[u8], nb: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), nb * 34, "Q8_0 row of {nb} blocks");
    let ng = nb.div_ceil(4);
    assert!(has_units(ng), "{nb} blocks: no units");
    assert_eq!(dst.len(), q8_0u_row_bytes(nb), "repacked row");
    // Every quant byte of the row's groups is `q + 128`: 128 where a block is missing.
    dst.fill(0x80);
    for u in 0..ng.div_ceil(4) {
        let k_u = (ng - 4 * u).min(4);
        let out = &mut dst[u * Q8_0U_UNIT..u * Q8_0U_UNIT + 136 * k_u];
        out[128 * k_u..].fill(0);
        for lane in 0..4 * k_u {
            let b = 16 * u + lane;
            if b >= nb {
                continue;
            }
            let s = &src[34 * b..34 * b + 34];
            out[128 * k_u + 2 * lane..128 * k_u + 2 * lane + 2].copy_from_slice(&s[..2]);
            let (k, bi) = (lane / 4, lane % 4);
            for e in 0..32 {
                let (v, cq, m) = (e / 16, (e % 16) / 4, e % 4);
                let r = 4 * v + cq;
                out[16 * k_u * r + 16 * k + 4 * bi + m] = s[2 + e] ^ 0x80;
            }
        }
    }
}
