//! Unit tests of the AVX-512 tiles' helpers: the reduction tree and the repacks (groups and
//! units).

use super::reduce::{HSUM16_LANE, hsum16};
use super::*;

/// Marsaglia's xorshift64 (13, 7, 17): advances `state` and returns it.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The AVX-512 repacks of Q5_0, Q4_1 and (rows with units) Q8_0 write the scalar repacks'
/// bytes: every tail of a four-block group, random quants, fifth bits, scales and mins.
#[test]
fn simd_repack_writes_the_scalar_repack() {
    if !crate::quant::has_vbmi() {
        eprintln!("repack: no AVX-512 VBMI on this CPU; nothing to compare");
        return;
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for nb in 1usize..=13 {
        let src: Vec<u8> = (0..nb * 22).map(|_| xorshift(&mut state) as u8).collect();
        let n = nb.div_ceil(4) * Q5_0R_GROUP;
        let (mut a, mut b) = (vec![0xAA; n], vec![0x55; n]);
        repack_q5_0_row(&src, nb, &mut a);
        // SAFETY: AVX-512 VBMI checked above (`has_vbmi` implies the tier's features).
        unsafe { repack_q5_0_row_simd(&src, nb, &mut b) };
        assert_eq!(a, b, "{nb} blocks");
        let src: Vec<u8> = (0..nb * 20).map(|_| xorshift(&mut state) as u8).collect();
        let n = nb * 20;
        let (mut a, mut b) = (vec![0xAA; n], vec![0x55; n]);
        repack_q4_1_row(&src, nb, &mut a);
        // SAFETY: as above.
        unsafe { repack_q4_1_row_simd(&src, nb, &mut b) };
        assert_eq!(a, b, "Q4_1, {nb} blocks");
    }
    // Rows with units (13..=16 blocks: one unit, partial groups; 28, 29: two, a padding
    // group; 152: ten): the copy's units are the reference's bytes.
    for nb in [13usize, 14, 15, 16, 28, 29, 152] {
        let src: Vec<u8> = (0..nb * 22).map(|_| xorshift(&mut state) as u8).collect();
        let n = q5_0r_row_bytes(nb);
        // Whole units of 352 bytes, a last one of k groups in 72 k + 64.
        let k = nb.div_ceil(4) - 4 * (nb.div_ceil(16) - 1);
        assert_eq!(n, (nb.div_ceil(16) - 1) * 352 + 72 * k + 64, "{nb} blocks");
        let (mut a, mut b) = (vec![0xAA; n], vec![0x55; n]);
        repack_q5_0_units_row(&src, nb, &mut a);
        // SAFETY: as above.
        unsafe { repack_q5_0r_row_simd(&src, nb, &mut b) };
        assert_eq!(a, b, "Q5_0 units, {nb} blocks");
        // Q8_0: 136 bytes per group, a partial group's missing quants 128 and scales zero.
        let src: Vec<u8> = (0..nb * 34).map(|_| xorshift(&mut state) as u8).collect();
        let n = q8_0u_row_bytes(nb);
        assert_eq!(n, nb.div_ceil(4) * 136, "Q8_0, {nb} blocks");
        let (mut a, mut b) = (vec![0xAA; n], vec![0x55; n]);
        repack_q8_0_units_row(&src, nb, &mut a);
        // SAFETY: as above.
        unsafe { repack_q8_0u_row_simd(&src, nb, &mut b) };
        assert_eq!(a, b, "Q8_0 units, {nb} blocks");
    }
}

/// `hsum16` against sixteen `_mm512_reduce_add_ps`, bit for bit, on values whose sums
/// depend on the order of the additions (magnitudes 2^-20 .. 2^20, both signs).
#[test]
fn hsum16_adds_in_the_order_of_reduce_add_ps() {
    if !is_x86_feature_detected!("avx512f") {
        eprintln!("hsum16: no AVX-512 F on this CPU; nothing to compare");
        return;
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        let x = xorshift(&mut state);
        let m = (x >> 40) as f32 / (1u64 << 24) as f32;
        let e = ((x >> 8) % 41) as i32 - 20;
        let sign = if x & 1 == 0 { 1.0 } else { -1.0 };
        sign * (1.0 + m) * 2f32.powi(e)
    };
    let mut order_mattered = 0;
    for _ in 0..200 {
        let x: [[f32; 16]; 16] = std::array::from_fn(|_| std::array::from_fn(|_| next()));
        // SAFETY: AVX-512 F checked above; every array holds 16 f32.
        let (got, want) = unsafe {
            let v: [__m512; 16] = std::array::from_fn(|k| _mm512_loadu_ps(x[k].as_ptr()));
            let mut got = [0.0f32; 16];
            _mm512_storeu_ps(got.as_mut_ptr(), hsum16(&v));
            let want: [f32; 16] = std::array::from_fn(|k| _mm512_reduce_add_ps(v[k]));
            (got, want)
        };
        for k in 0..16 {
            assert_eq!(
                got[HSUM16_LANE[k]].to_bits(),
                want[k].to_bits(),
                "register {k}"
            );
            let serial: f32 = x[k].iter().sum();
            order_mattered += usize::from(serial.to_bits() != want[k].to_bits());
        }
    }
    // The values are such that a different order gives different bits.
    assert!(order_mattered > 100, "{order_mattered}");
}
