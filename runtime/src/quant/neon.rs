//! NEON kernels (aarch64 only): activation quantization and the int8 block dots, kept simple.
//! Each block's integer dot is formed with widening multiplies (`smull`/`smull2`) and pairwise
//! adds, then scaled exactly as the scalar reference does (ggml-cpu/arch/arm/quants.c uses the
//! same integer-per-block structure). Activation quantization uses the same convention as the
//! x86 tiers (`id = 127 / amax`, round half to even: `fcvtns`), so every tier quantizes
//! activations to identical bits.
//!
//! Every function is `unsafe`: the caller guarantees that the weight bytes hold as many blocks
//! as the activation row.

use std::arch::aarch64::*;

use half::f16;

use super::ActRow;
use super::blocks::{BlockQ8_0, BlockQ8_1, QK};
use super::scalar;
use crate::GgmlType;

/// Quantizes 32 floats at `x` into `qs`; returns (d, sum of q).
#[target_feature(enable = "neon")]
unsafe fn q8_block(x: &[f32], qs: &mut [i8; QK]) -> (f32, i32) {
    // SAFETY: x holds 32 floats and qs 32 bytes; all loads and stores stay inside them.
    unsafe {
        let mut v = [vdupq_n_f32(0.0); 8];
        let mut m = vdupq_n_f32(0.0);
        for (k, vk) in v.iter_mut().enumerate() {
            *vk = vld1q_f32(x.as_ptr().add(4 * k));
            m = vmaxq_f32(m, vabsq_f32(*vk));
        }
        let amax = vmaxvq_f32(m);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = vdupq_n_s32(0);
        for k in 0..4 {
            let a = vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id));
            let b = vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id));
            sum = vaddq_s32(sum, vaddq_s32(a, b));
            let h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
            vst1_s8(qs.as_mut_ptr().add(8 * k), vqmovn_s16(h));
        }
        (d, vaddvq_s32(sum))
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // SAFETY: xb has 32 floats.
        let (d, _) = unsafe { q8_block(xb, &mut y.qs) };
        y.d = f16::from_f32(d);
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // SAFETY: xb has 32 floats.
        let (d, sum) = unsafe { q8_block(xb, &mut y.qs) };
        y.d = f16::from_f32(d);
        y.s = f16::from_f32(d * sum as f32);
    }
}

/// Integer dot of 32 signed weights (two 16-lane halves) with 32 activations.
#[target_feature(enable = "neon")]
unsafe fn idot(x0: int8x16_t, x1: int8x16_t, y: *const i8) -> i32 {
    // SAFETY: the caller guarantees 32 readable bytes at y.
    unsafe {
        let y0 = vld1q_s8(y);
        let y1 = vld1q_s8(y.add(16));
        let p0 = vaddq_s16(
            vmull_s8(vget_low_s8(x0), vget_low_s8(y0)),
            vmull_high_s8(x0, y0),
        );
        let p1 = vaddq_s16(
            vmull_s8(vget_low_s8(x1), vget_low_s8(y1)),
            vmull_high_s8(x1, y1),
        );
        vaddvq_s32(vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)))
    }
}

#[target_feature(enable = "neon")]
unsafe fn q4_1_q8_1(w: &[u8], a: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let b = &w[i * 20..i * 20 + 20];
        // SAFETY: b holds one 20-byte block; y.qs 32 bytes.
        let sumi = unsafe {
            let q = vld1q_u8(b.as_ptr().add(4));
            let lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
            let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
            idot(lo, hi, y.qs.as_ptr())
        };
        let (d, m) = (super::blocks::f16_at(b, 0), super::blocks::f16_at(b, 2));
        sumf += (d * y.d.to_f32()) * sumi as f32 + m * y.s.to_f32();
    }
    sumf
}

#[target_feature(enable = "neon")]
unsafe fn q4_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let b = &w[i * 18..i * 18 + 18];
        // SAFETY: b holds one 18-byte block; y.qs 32 bytes.
        let sumi = unsafe {
            let q = vld1q_u8(b.as_ptr().add(2));
            let eight = vdupq_n_s8(8);
            let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
            let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight);
            idot(lo, hi, y.qs.as_ptr())
        };
        sumf += sumi as f32 * (super::blocks::f16_at(b, 0) * y.d.to_f32());
    }
    sumf
}

#[target_feature(enable = "neon")]
unsafe fn q8_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let b = &w[i * 34..i * 34 + 34];
        // SAFETY: b holds one 34-byte block; y.qs 32 bytes.
        let sumi = unsafe {
            let p = b.as_ptr().add(2) as *const i8;
            idot(vld1q_s8(p), vld1q_s8(p.add(16)), y.qs.as_ptr())
        };
        sumf += sumi as f32 * (super::blocks::f16_at(b, 0) * y.d.to_f32());
    }
    sumf
}

/// The NEON kernel for a (weight type, activation) pair; F16 and F32 use the scalar code.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    // SAFETY: forwarded caller contract (lengths checked).
    unsafe {
        match (ty, a) {
            (GgmlType::Q4_1, ActRow::Q8_1(b)) => q4_1_q8_1(w, b),
            (GgmlType::Q4_0, ActRow::Q8_0(b)) => q4_0_q8_0(w, b),
            (GgmlType::Q8_0, ActRow::Q8_0(b)) => q8_0_q8_0(w, b),
            (GgmlType::F16, ActRow::F16(v)) => scalar::vec_dot_f16_f16(w, v),
            (GgmlType::F32, ActRow::F32(v)) => scalar::vec_dot_f32_bytes(w, v),
            _ => super::scalar_dot(ty, w, a),
        }
    }
}
