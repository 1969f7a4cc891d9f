//! K-quant super-blocks (ggml `block_q2_K`, `block_q3_K`, `block_q4_K`, `block_q5_K`,
//! `block_q6_K`; activations `block_q8_K`): the scalar reference dequantization, the Q8_K
//! activation quantizer and the dot products every SIMD tier must reproduce.
//!
//! Spec: ggml-quants.c (`dequantize_row_q{2,3,4,5,6}_K`, `quantize_row_q8_K_ref`) and
//! ggml-cpu/quants.c (`ggml_vec_dot_q{2,3,4,5,6}_K_q8_K_generic`).
//!
//! # One decoded shape for five formats
//! Each weight block decodes to [`KBlock`]: 256 unsigned quants `u`, a scale and a min per
//! 16-element group (the 32-element groups of Q4_K/Q5_K give two equal entries) and an offset,
//! so that element `e` of group `g = e / 16` is
//! `x = (d · sc[g]) · (u[e] - off) - dmin · mn[g]` — the same f32 operations, in the same
//! order, as ggml's `dequantize_row_*` and the `gguf` Python reader, hence bit-identical.
//!
//! The dot of one block with a Q8_K block is exact in integers:
//! `isum = Σ_g sc[g] · (Σ_{e∈g} u[e]·q[e] - off · bsum[g])`, `msum = Σ_g mn[g] · bsum[g]`,
//! then `(d · d_a) · isum - (dmin · d_a) · msum` in f32, summed block by block. ggml's generic
//! kernels compute the same integers; only the f32 summation order differs (ggml keeps eight
//! partial sums). The SIMD tiers compute `isum` and `msum` per block and finish with exactly
//! these f32 operations, so every tier returns the same bits.

use half::f16;

use super::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K, read_block};
use crate::GgmlType;

/// One K-quant block decoded (see the module docs for the meaning of each field).
#[derive(Clone, Copy, Debug)]
pub struct KBlock {
    pub u: [u8; QK_K],
    pub sc: [i16; 16],
    pub mn: [i16; 16],
    pub d: f32,
    pub dmin: f32,
    pub off: i32,
    pub has_min: bool,
}

impl Default for KBlock {
    fn default() -> Self {
        KBlock {
            u: [0; QK_K],
            sc: [0; 16],
            mn: [0; 16],
            d: 0.0,
            dmin: 0.0,
            off: 0,
            has_min: false,
        }
    }
}

/// Scale and min of 32-element group `j` of a Q4_K/Q5_K block (6 bits each, packed in 12
/// bytes: groups 0..4 in the low 6 bits of bytes 0..4 / 4..8, groups 4..8 split between the
/// nibbles of bytes 8..12 and the top two bits of bytes 0..8).
#[inline(always)]
pub fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The 16 signed group scales of a Q3_K block (6-bit values minus 32): low nibbles of bytes
/// 0..8 give groups 0..8, their high nibbles groups 8..16; bytes 8..12 hold the top two bits.
#[inline(always)]
pub fn scales_q3k(s: &[u8; 12]) -> [i16; 16] {
    let mut out = [0i16; 16];
    for (g, o) in out.iter_mut().enumerate() {
        let low = if g < 8 { s[g] & 0x0F } else { s[g - 8] >> 4 };
        let high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        *o = i16::from(low | (high << 4)) - 32;
    }
    out
}

/// Decodes one weight block of type `ty` from `w` at block index `i`.
///
/// # Panics
/// If `ty` is not a K-quant weight type or `w` is too short (callers check both).
pub fn unpack(ty: GgmlType, w: &[u8], i: usize, k: &mut KBlock) {
    match ty {
        GgmlType::Q2K => unpack_q2k(&read_block(w, i), k),
        GgmlType::Q3K => unpack_q3k(&read_block(w, i), k),
        GgmlType::Q4K => unpack_q4k(&read_block(w, i), k),
        GgmlType::Q5K => unpack_q5k(&read_block(w, i), k),
        GgmlType::Q6K => unpack_q6k(&read_block(w, i), k),
        _ => panic!("kquants::unpack: {ty} is not a K-quant weight type"),
    }
}

/// Q2_K: element `128·h + 32·j + l` is bits `2j..2j+2` of `qs[32·h + l]`.
pub fn unpack_q2k(b: &BlockQ2K, k: &mut KBlock) {
    for (e, u) in k.u.iter_mut().enumerate() {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        *u = (b.qs[32 * h + l] >> (2 * j)) & 3;
    }
    for g in 0..16 {
        k.sc[g] = i16::from(b.scales[g] & 0x0F);
        k.mn[g] = i16::from(b.scales[g] >> 4);
    }
    k.d = b.d.to_f32();
    k.dmin = b.dmin.to_f32();
    k.off = 0;
    k.has_min = true;
}

/// Q3_K: low bits as Q2_K, bit `e / 32` of `hmask[e % 32]` adds 4; value `u - 4`.
pub fn unpack_q3k(b: &BlockQ3K, k: &mut KBlock) {
    for (e, u) in k.u.iter_mut().enumerate() {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (b.qs[32 * h + l] >> (2 * j)) & 3;
        let high = (b.hmask[l] >> (e / 32)) & 1;
        *u = low | (high << 2);
    }
    k.sc = scales_q3k(&b.scales);
    k.mn = [0; 16];
    k.d = b.d.to_f32();
    k.dmin = 0.0;
    k.off = 4;
    k.has_min = false;
}

fn scales_mins_k4(s: &[u8; 12], k: &mut KBlock) {
    for j in 0..8 {
        let (sc, mn) = scale_min_k4(j, s);
        k.sc[2 * j] = i16::from(sc);
        k.sc[2 * j + 1] = i16::from(sc);
        k.mn[2 * j] = i16::from(mn);
        k.mn[2 * j + 1] = i16::from(mn);
    }
}

/// Q4_K: element `64·c + l` is the low nibble of `qs[32·c + l]`, `64·c + 32 + l` the high one.
pub fn unpack_q4k(b: &BlockQ4K, k: &mut KBlock) {
    for (e, u) in k.u.iter_mut().enumerate() {
        let (c, hi, l) = (e / 64, (e / 32) % 2, e % 32);
        *u = (b.qs[32 * c + l] >> (4 * hi)) & 0x0F;
    }
    scales_mins_k4(&b.scales, k);
    k.d = b.d.to_f32();
    k.dmin = b.dmin.to_f32();
    k.off = 0;
    k.has_min = true;
}

/// Q5_K: as Q4_K, and bit `e / 32` of `qh[e % 32]` adds 16.
pub fn unpack_q5k(b: &BlockQ5K, k: &mut KBlock) {
    for (e, u) in k.u.iter_mut().enumerate() {
        let (c, hi, l) = (e / 64, (e / 32) % 2, e % 32);
        let low = (b.qs[32 * c + l] >> (4 * hi)) & 0x0F;
        let high = (b.qh[l] >> (e / 32)) & 1;
        *u = low | (high << 4);
    }
    scales_mins_k4(&b.scales, k);
    k.d = b.d.to_f32();
    k.dmin = b.dmin.to_f32();
    k.off = 0;
    k.has_min = true;
}

/// Q6_K: element `128·h + 32·j + l` takes nibble `j / 2` of `ql[64·h + 32·(j % 2) + l]` and
/// bits `2j..2j+2` of `qh[32·h + l]`; value `u - 32`.
pub fn unpack_q6k(b: &BlockQ6K, k: &mut KBlock) {
    for (e, u) in k.u.iter_mut().enumerate() {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (b.ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0x0F;
        let high = (b.qh[32 * h + l] >> (2 * j)) & 3;
        *u = low | (high << 4);
    }
    for g in 0..16 {
        k.sc[g] = i16::from(b.scales[g]);
    }
    k.mn = [0; 16];
    k.d = b.d.to_f32();
    k.dmin = 0.0;
    k.off = 32;
    k.has_min = false;
}

/// ggml `dequantize_row_q*_K` for `out.len() / 256` blocks of `ty`.
pub fn dequantize(ty: GgmlType, w: &[u8], out: &mut [f32]) {
    let mut k = KBlock::default();
    for (i, o) in out.chunks_exact_mut(QK_K).enumerate() {
        unpack(ty, w, i, &mut k);
        dequantize_block(&k, o);
    }
}

/// Dequantizes one decoded block (the f32 operations of ggml and the `gguf` reader).
pub fn dequantize_block(k: &KBlock, out: &mut [f32]) {
    for (g, og) in out.chunks_exact_mut(16).enumerate() {
        let dl = k.d * f32::from(k.sc[g]);
        let us = &k.u[16 * g..16 * g + 16];
        if k.has_min {
            let ml = k.dmin * f32::from(k.mn[g]);
            for (o, &u) in og.iter_mut().zip(us) {
                *o = dl * f32::from(u) - ml;
            }
        } else {
            for (o, &u) in og.iter_mut().zip(us) {
                *o = dl * (i32::from(u) - k.off) as f32;
            }
        }
    }
}

/// ggml `dequantize_row_q8_K`.
pub fn dequantize_q8k(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK_K).enumerate() {
        let b: BlockQ8K = read_block(src, i);
        for (oj, &q) in o.iter_mut().zip(b.qs.iter()) {
            *oj = b.d * f32::from(q);
        }
    }
}

/// ggml `quantize_row_q8_K_ref` (what ggml-cpu runs for K-quant activations on every x86
/// build): the signed value of largest magnitude maps to -127, `iscale = -127 / max`,
/// `q = min(127, round_half_even(iscale · x))`, `d = 1 / iscale`, plus 16 group sums.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.d = 0.0;
            y.qs = [0; QK_K];
            y.bsums = [0; 16];
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(xb) {
            // ggml's `nearest_int` rounds halves to even; |iscale · x| <= 127 here.
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (s, g) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| i16::from(q)).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// The exact integer parts of one block's dot: `(isum, msum)` (module docs).
#[inline(always)]
pub fn block_ints(k: &KBlock, y: &BlockQ8K) -> (i32, i32) {
    let mut isum = 0i32;
    let mut msum = 0i32;
    for g in 0..16 {
        let mut s = 0i32;
        for e in 16 * g..16 * g + 16 {
            s += i32::from(k.u[e]) * i32::from(y.qs[e]);
        }
        let bs = i32::from(y.bsums[g]);
        isum += i32::from(k.sc[g]) * (s - k.off * bs);
        msum += i32::from(k.mn[g]) * bs;
    }
    (isum, msum)
}

/// The f32 value of one block's dot from its integer parts (shared by every tier).
#[inline(always)]
pub fn block_value(d: f32, dmin: f32, has_min: bool, da: f32, isum: i32, msum: i32) -> f32 {
    let v = (d * da) * isum as f32;
    if has_min {
        v - (dmin * da) * msum as f32
    } else {
        v
    }
}

/// Reads the f16 at byte `off` of a block as f32.
#[inline(always)]
pub fn half_at(w: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([w[off], w[off + 1]])).to_f32()
}

/// ggml `vec_dot_q*_K_q8_K`: one weight row of K blocks of `ty` with a Q8_K row.
pub fn vec_dot(ty: GgmlType, w: &[u8], a: &[BlockQ8K]) -> f32 {
    let mut k = KBlock::default();
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        unpack(ty, w, i, &mut k);
        let (isum, msum) = block_ints(&k, y);
        sumf += block_value(k.d, k.dmin, k.has_min, y.d, isum, msum);
    }
    sumf
}
