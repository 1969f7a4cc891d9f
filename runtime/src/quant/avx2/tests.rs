//! Tests of the AVX2 kernels against the scalar reference.

use super::*;
use crate::quant::{Isa, quantize_row_q8_0, quantize_row_q8_1};

/// A deterministic byte stream (the test kit's generator).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = pocketperf_testkit::gguf::Rng::new(seed);
    (0..n).map(|_| (rng.next_u64() >> 56) as u8).collect()
}

/// Eight rows of `nb` random blocks of `ty` whose f16 fields (the scale, and Q4_1's min)
/// are finite values between about 0.004 and 0.06.
fn rows(ty: GgmlType, nb: usize, seed: u64) -> Vec<Vec<u8>> {
    let bb = ty.block_bytes();
    let halves = if ty == GgmlType::Q4_1 { 2 } else { 1 };
    (0..ROWS8)
        .map(|r| {
            let mut w = bytes(nb * bb, seed + 1 + r as u64);
            for b in 0..nb {
                for h in 0..halves {
                    let v = f16::from_f32(0.004 + 0.002 * ((b * 7 + r * 3 + h) % 29) as f32);
                    w[b * bb + 2 * h..b * bb + 2 * h + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            w
        })
        .collect()
}

/// `n` ggml rows of `nb` blocks of `ty` one after the other: random bytes, then each block's
/// f16 scale (its first two bytes) set to a finite value between about 0.004 and 0.06; with
/// `fill`, every other byte is `fill` instead (Q4_1's min bytes among them: callers set those).
pub(in crate::quant) fn ggml_rows(
    ty: GgmlType,
    nb: usize,
    n: usize,
    seed: u64,
    fill: Option<u8>,
) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut rng = pocketperf_testkit::gguf::Rng::new(seed);
    let mut w: Vec<u8> = (0..n * nb * bb)
        .map(|_| fill.unwrap_or((rng.next_u64() >> 56) as u8))
        .collect();
    for b in 0..n * nb {
        let d = f16::from_f32(0.004 + 0.002 * ((b * 7) % 29) as f32);
        w[b * bb..b * bb + 2].copy_from_slice(&d.to_le_bytes());
    }
    w
}

/// Panics unless `got` holds what `want` holds for its first `n` unpacked blocks, bit for bit:
/// the first block, count and type flag, the quants, the scales and, with `mins`, the mins.
pub(in crate::quant) fn assert_same_unpacked(
    got: &Unpacked8,
    want: &Unpacked8,
    n: usize,
    mins: bool,
) {
    assert_eq!((got.i0, got.nb, got.five), (want.i0, want.nb, want.five));
    type Q = [[u8; 32]; ROWS8];
    let f = |v: &__m256| -> [u32; 8] {
        // SAFETY: eight floats, read as their bits.
        unsafe { std::mem::transmute::<__m256, [u32; 8]>(*v) }
    };
    for i in 0..n {
        // SAFETY: eight vectors of 32 bytes, read as such.
        let (gu, wu) = unsafe {
            (
                std::mem::transmute::<[__m256i; ROWS8], Q>(got.u[i]),
                std::mem::transmute::<[__m256i; ROWS8], Q>(want.u[i]),
            )
        };
        let b = want.i0 + i;
        assert_eq!(gu, wu, "block {b} quants");
        assert_eq!(f(&got.dw[i]), f(&want.dw[i]), "block {b} scales");
        if mins {
            assert_eq!(f(&got.mw[i]), f(&want.mw[i]), "block {b} mins");
        }
    }
}

/// Fails unless the CPU has what the AVX2 tier needs (every x86-64 machine the tests run on).
pub(in crate::quant) fn assert_avx2() {
    assert!(
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"),
        "the x86-64 machines this runs on have AVX2, FMA and F16C"
    );
}

/// The largest integer sums the eight-by-four kernels meet: Q5_0, Q4_0 and Q4_1 weights
/// whose quants are all at the top (31, 15) or the bottom (0) of their range, against
/// activation blocks of all +127 or all −127, each pair the scalar reference's bits.
#[test]
fn dot_rows8x4_holds_the_extreme_sums() {
    assert_avx2();
    let nb = 3;
    let half = |v: f32| f16::from_f32(v).to_bits().to_le_bytes();
    let block = |ty: GgmlType, top: bool, d: f32| -> Vec<u8> {
        let mut b = half(d).to_vec();
        let fill = if top { 0xFF } else { 0x00 };
        if ty == GgmlType::Q5_0 {
            b.extend([fill; 4]);
        }
        if ty == GgmlType::Q4_1 {
            b.extend(half(-0.3));
        }
        b.extend([fill; QK / 2]);
        b
    };
    let acts: Vec<Vec<BlockQ8_0>> = [127i8, -127, 127, -127]
        .iter()
        .enumerate()
        .map(|(k, &q)| {
            let d = f16::from_f32(0.01 + 0.005 * k as f32);
            vec![BlockQ8_0 { d, qs: [q; QK] }; nb]
        })
        .collect();
    let acts1: Vec<Vec<BlockQ8_1>> = acts
        .iter()
        .map(|a| {
            let sum: f32 = a[0].qs.iter().map(|&q| f32::from(q)).sum();
            let s = f16::from_f32(a[0].d.to_f32() * sum);
            let b = BlockQ8_1 {
                d: a[0].d,
                s,
                qs: a[0].qs,
            };
            vec![b; nb]
        })
        .collect();
    for ty in [GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let w: Vec<Vec<u8>> = (0..ROWS8)
            .map(|r| {
                (0..nb)
                    .flat_map(|i| block(ty, (r + i) % 2 == 0, 0.02 + 0.001 * r as f32))
                    .collect()
            })
            .collect();
        let wr: [&[u8]; ROWS8] = std::array::from_fn(|r| w[r].as_slice());
        let act: [ActRow<'_>; 4] = std::array::from_fn(|k| match ty {
            GgmlType::Q4_1 => ActRow::Q8_1(&acts1[k]),
            _ => ActRow::Q8_0(&acts[k]),
        });
        let aux = aux_of(&act);
        // SAFETY: the features were asserted above; every row holds `nb` blocks.
        let got = unsafe { dot_rows8x4(ty, wr, act, aux.each_ref().map(Vec::as_slice)) }
            .expect("an eight-by-four kernel");
        for (k, gk) in got.iter().enumerate() {
            for (r, g) in gk.iter().enumerate() {
                let want = crate::quant::scalar_dot(ty, wr[r], act[k]);
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "{ty} ({r}, {k}): {g} vs {want}"
                );
            }
        }
    }
}

/// `nb` blocks of deterministic values (byte stream `seed`, spread by `1 / scale`),
/// quantized to Q8_0 and to Q8_1 as the tier does.
fn activations(nb: usize, seed: u64, scale: f32) -> (Vec<BlockQ8_0>, Vec<BlockQ8_1>) {
    let x: Vec<f32> = bytes(nb * QK, seed)
        .into_iter()
        .map(|b| (b as f32 - 127.5) / scale)
        .collect();
    let mut a0 = vec![
        BlockQ8_0 {
            d: f16::ZERO,
            qs: [0; QK]
        };
        nb
    ];
    let mut a1 = vec![
        BlockQ8_1 {
            d: f16::ZERO,
            s: f16::ZERO,
            qs: [0; QK]
        };
        nb
    ];
    quantize_row_q8_0(Isa::Avx2, &x, &mut a0);
    quantize_row_q8_1(Isa::Avx2, &x, &mut a1);
    (a0, a1)
}

/// Every row of the eight-row product is `dot`'s bits: the eight-row kernels (Q4_0,
/// Q4_1) and the row-by-row fallback (Q8_0, Q5_0) alike.
#[test]
fn dot_rows8_is_dot_row_by_row() {
    assert_avx2();
    let nb = 5;
    let (a0, a1) = activations(nb, 99, 40.0);
    for (i, (ty, act)) in [
        (GgmlType::Q4_0, ActRow::Q8_0(&a0)),
        (GgmlType::Q4_1, ActRow::Q8_1(&a1)),
        (GgmlType::Q8_0, ActRow::Q8_0(&a0)),
        (GgmlType::Q5_0, ActRow::Q8_0(&a0)),
    ]
    .into_iter()
    .enumerate()
    {
        let w = rows(ty, nb, 31 * i as u64);
        let wr: [&[u8]; ROWS8] = std::array::from_fn(|r| w[r].as_slice());
        // SAFETY: the features were asserted above; every row holds `nb` blocks.
        let got = unsafe { dot_rows8(ty, wr, act) };
        for (r, g) in got.iter().enumerate() {
            // SAFETY: as above.
            let want = unsafe { dot(ty, wr[r], act) };
            assert!(want.is_finite() && want != 0.0, "{ty} row {r}: {want}");
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "{ty} row {r}: {g} against {want}"
            );
        }
    }
}

/// Each (weight row, activation row) result of the eight-by-four prefill product is the
/// scalar reference's bits, for four different activation rows and the three formats it
/// covers, with rows shorter and longer than one run of unpacked blocks; other formats are
/// left to the caller.
#[test]
fn dot_rows8x4_is_the_scalar_reference_per_pair() {
    assert_avx2();
    for nb in [7, UNPACKED_BLOCKS + 5] {
        rows8x4_against_scalar(nb);
    }
}

/// The pairs of [`dot_rows8x4`] against the scalar reference for rows of `nb` blocks.
fn rows8x4_against_scalar(nb: usize) {
    let acts: Vec<(Vec<BlockQ8_0>, Vec<BlockQ8_1>)> = (0..4)
        .map(|k| activations(nb, 200 + k, 20.0 + 10.0 * k as f32))
        .collect();
    for (i, ty) in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .enumerate()
    {
        let w = rows(ty, nb, 57 + 13 * i as u64);
        let wr: [&[u8]; ROWS8] = std::array::from_fn(|r| w[r].as_slice());
        let act: [ActRow<'_>; 4] = std::array::from_fn(|k| match ty {
            GgmlType::Q4_1 => ActRow::Q8_1(&acts[k].1),
            _ => ActRow::Q8_0(&acts[k].0),
        });
        let aux = aux_of(&act);
        // SAFETY: the features were asserted above; every row holds `nb` blocks.
        let got = unsafe { dot_rows8x4(ty, wr, act, aux.each_ref().map(Vec::as_slice)) };
        let Some(got) = got else {
            assert_eq!(ty, GgmlType::Q8_0, "{ty} has an eight-by-four kernel");
            continue;
        };
        assert_ne!(ty, GgmlType::Q8_0, "Q8_0 is left to the caller");
        for (k, gk) in got.iter().enumerate() {
            for (r, g) in gk.iter().enumerate() {
                let want = crate::quant::scalar_dot(ty, wr[r], act[k]);
                assert!(want.is_finite() && want != 0.0, "{ty} ({r}, {k}): {want}");
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "{ty} ({nb} blocks) weight row {r}, activation row {k}: {g} against {want}"
                );
            }
        }
    }
}

/// The [`Q8Aux`] entries of Q8_0 activation rows (none for others), as
/// [`crate::quant::QuantizedActs`] stores them.
fn aux_of(act: &[ActRow<'_>; 4]) -> [Vec<Q8Aux>; 4] {
    std::array::from_fn(|k| match act[k] {
        ActRow::Q8_0(b) => b.iter().map(Q8Aux::of).collect(),
        _ => Vec::new(),
    })
}
