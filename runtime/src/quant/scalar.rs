//! Scalar reference kernels: dequantization, ggml's reference quantizers, the activation
//! quantizers, and the dot products every SIMD tier must reproduce.
//!
//! Semantics follow ggml-quants.c (`dequantize_row_*`, `quantize_row_*_ref`) and the generic
//! dot products of ggml-cpu (`ggml_vec_dot_q4_0_q8_0_generic` and friends): an exact integer
//! dot per block, scaled in f32 and summed block by block.
//!
//! Weight rows are raw ggml bytes of any alignment; activation rows are typed blocks that
//! this runtime owns. Callers (the dispatchers in [`super`]) have checked the lengths.

use half::f16;

use super::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK, f16_at, read_block,
};

// ---------------------------------------------------------------------------------------------
// Dequantization (ggml `dequantize_row_*`)
// ---------------------------------------------------------------------------------------------

pub fn dequantize_f32(src: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(src: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

pub fn dequantize_q4_0(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ4_0 = read_block(src, i);
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            o[j] = (i32::from(b.qs[j] & 0x0F) - 8) as f32 * d;
            o[j + QK / 2] = (i32::from(b.qs[j] >> 4) - 8) as f32 * d;
        }
    }
}

pub fn dequantize_q4_1(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ4_1 = read_block(src, i);
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for j in 0..QK / 2 {
            o[j] = f32::from(b.qs[j] & 0x0F) * d + m;
            o[j + QK / 2] = f32::from(b.qs[j] >> 4) * d + m;
        }
    }
}

/// The 32 five-bit quants of a Q5_0/Q5_1 block (0..=31): nibbles as Q4, bit `i` of the
/// little-endian `qh` is bit 4 of element `i`.
#[inline(always)]
pub fn q5_quants(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let h = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0F) | ((((h >> j) & 1) as u8) << 4);
        q[j + QK / 2] = (qs[j] >> 4) | ((((h >> (j + QK / 2)) & 1) as u8) << 4);
    }
    q
}

pub fn dequantize_q5_0(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ5_0 = read_block(src, i);
        let d = b.d.to_f32();
        for (oj, &q) in o.iter_mut().zip(q5_quants(b.qh, &b.qs).iter()) {
            *oj = d * (i32::from(q) - 16) as f32;
        }
    }
}

pub fn dequantize_q5_1(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ5_1 = read_block(src, i);
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (oj, &q) in o.iter_mut().zip(q5_quants(b.qh, &b.qs).iter()) {
            *oj = d * f32::from(q) + m;
        }
    }
}

pub fn dequantize_q8_0(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ8_0 = read_block(src, i);
        let d = b.d.to_f32();
        for (oj, &q) in o.iter_mut().zip(b.qs.iter()) {
            *oj = f32::from(q) * d;
        }
    }
}

pub fn dequantize_q8_1(src: &[u8], out: &mut [f32]) {
    for (i, o) in out.chunks_exact_mut(QK).enumerate() {
        let b: BlockQ8_1 = read_block(src, i);
        let d = b.d.to_f32();
        for (oj, &q) in o.iter_mut().zip(b.qs.iter()) {
            *oj = f32::from(q) * d;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ggml reference quantizers (`quantize_row_*_ref`)
// ---------------------------------------------------------------------------------------------

/// ggml `quantize_row_q4_0_ref`: the signed value of largest magnitude maps to -8.
pub fn quantize_q4_0_ref(x: &[f32], out: &mut [BlockQ4_0]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = f16::from_f32(d);
        for j in 0..QK / 2 {
            // C's `(int8_t)(f)` truncates toward zero; the values lie in [0.5, 16.5].
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// ggml `quantize_row_q4_1_ref`: 16 levels between the block's min and max.
pub fn quantize_q4_1_ref(x: &[f32], out: &mut [BlockQ4_1]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, f32::MIN);
        for &v in xb {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = f16::from_f32(d);
        y.m = f16::from_f32(min);
        for j in 0..QK / 2 {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// Shared body of the Q8 quantizers: returns (d, q) for one block.
///
/// `simd_convention = false` is ggml's reference (`id = 1/d`, `roundf`: ties away from zero);
/// `true` is what ggml-cpu's x86 and our SIMD tiers do (`id = 127/amax`, ties to even).
#[inline(always)]
fn q8_block(xb: &[f32], qs: &mut [i8; QK], simd_convention: bool) -> f32 {
    let mut amax = 0.0f32;
    for &v in xb {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    if simd_convention {
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (q, &v) in qs.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
        }
    } else {
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, &v) in qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
    d
}

/// ggml `quantize_row_q8_0_ref`.
pub fn quantize_q8_0_ref(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let d = q8_block(xb, &mut y.qs, false);
        y.d = f16::from_f32(d);
    }
}

/// ggml `quantize_row_q8_1_ref`: `s = f16(d * sum(q))` with `d` the unrounded f32 scale.
pub fn quantize_q8_1_ref(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let d = q8_block(xb, &mut y.qs, false);
        let sum: i32 = y.qs.iter().map(|&q| i32::from(q)).sum();
        y.d = f16::from_f32(d);
        y.s = f16::from_f32(sum as f32 * d);
    }
}

/// Activation quantizer, Q8_0, with ggml-cpu's x86 SIMD convention (see [`super`] docs).
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let d = q8_block(xb, &mut y.qs, true);
        y.d = f16::from_f32(d);
    }
}

/// Activation quantizer, Q8_1, with ggml-cpu's x86 SIMD convention.
pub fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let d = q8_block(xb, &mut y.qs, true);
        let sum: i32 = y.qs.iter().map(|&q| i32::from(q)).sum();
        y.d = f16::from_f32(d);
        y.s = f16::from_f32(d * sum as f32);
    }
}

/// Rounds activations to f16 (ggml converts src1 to F16 for F16 weights).
pub fn quantize_f16(x: &[f32], out: &mut [f16]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(v);
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products (weight row as raw bytes · quantized activation row)
// ---------------------------------------------------------------------------------------------

pub fn vec_dot_q4_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let x: BlockQ4_0 = read_block(w, i);
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            let v0 = i32::from(x.qs[j] & 0x0F) - 8;
            let v1 = i32::from(x.qs[j] >> 4) - 8;
            sumi += v0 * i32::from(y.qs[j]) + v1 * i32::from(y.qs[j + QK / 2]);
        }
        sumf += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sumf
}

pub fn vec_dot_q4_1_q8_1(w: &[u8], a: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let x: BlockQ4_1 = read_block(w, i);
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            let v0 = i32::from(x.qs[j] & 0x0F);
            let v1 = i32::from(x.qs[j] >> 4);
            sumi += v0 * i32::from(y.qs[j]) + v1 * i32::from(y.qs[j + QK / 2]);
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

pub fn vec_dot_q5_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let x: BlockQ5_0 = read_block(w, i);
        let sumi: i32 = q5_quants(x.qh, &x.qs)
            .iter()
            .zip(y.qs.iter())
            .map(|(&p, &q)| (i32::from(p) - 16) * i32::from(q))
            .sum();
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32;
    }
    sumf
}

pub fn vec_dot_q5_1_q8_1(w: &[u8], a: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let x: BlockQ5_1 = read_block(w, i);
        let sumi: i32 = q5_quants(x.qh, &x.qs)
            .iter()
            .zip(y.qs.iter())
            .map(|(&p, &q)| i32::from(p) * i32::from(q))
            .sum();
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

pub fn vec_dot_q8_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        let x: BlockQ8_0 = read_block(w, i);
        let sumi: i32 =
            x.qs.iter()
                .zip(y.qs.iter())
                .map(|(&p, &q)| i32::from(p) * i32::from(q))
                .sum();
        sumf += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sumf
}

/// F16 weights · f16-rounded activations, accumulated in f64 like ggml's scalar path.
pub fn vec_dot_f16_f16(w: &[u8], a: &[f16]) -> f32 {
    let mut sum = 0.0f64;
    for (i, y) in a.iter().enumerate() {
        sum += f64::from(f16_at(w, 2 * i) * y.to_f32());
    }
    sum as f32
}

/// F32 weights (raw little-endian bytes) · f32 activations.
pub fn vec_dot_f32_bytes(w: &[u8], a: &[f32]) -> f32 {
    let mut sum = 0.0f64;
    for (b, &y) in w.chunks_exact(4).zip(a) {
        sum += f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * y);
    }
    sum as f32
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut sum = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        sum += f64::from(x * y);
    }
    sum as f32
}

pub fn axpy_f32(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}
