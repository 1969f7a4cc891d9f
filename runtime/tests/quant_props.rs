//! Property tests of the quantized kernels: every SIMD tier this CPU runs (AVX2, AVX-512 with
//! and without VNNI) against the scalar reference on odd lengths, group tails, several
//! activation rows and extreme scales; plus ggml's own error limits for quantization,
//! dequantization and dot products (ggml `tests/test-quantize-fns.cpp`: synthetic data
//! `0.1 + 2 cos(i + offset)`, 4096 values, RMSE reported as `sqrt(Σ d²) / n`).
//!
//! The integer part of every block dot is exact on every tier, so tiers differ only in the
//! order of the f32 sums: the bound used is `1e-5 · Σ|w_i · a_i|` over the dequantized
//! operands (a few hundred ulps of the sum of magnitudes for rows of up to 20 blocks).
//!
//! Size: over 800 lines: every property here draws on the same generators (random weights of
//! each format, activations, the scalar reference dot and its magnitude bound) and the same
//! list of tiers and flavours; the K-quant properties, which need their own, are in
//! `quant_props_k.rs`.

mod common;

use common::{Rng, with_flavor};
use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, as_bytes};
use pocketperf_runtime::quant::{
    self, ActLayout, ActRow, Isa, QuantizedActs, WeightMatrix, attn, packed,
};
use proptest::prelude::*;

/// Two rows of `cols` columns of `x` quantized for `ty` weights on `isa`, each written as two
/// column ranges (`..c` and `c..`, either empty; `c` rounded down to the layout's column
/// unit), as the pooled quantizer of the forward pass writes them.
fn quantize_split(isa: Isa, ty: GgmlType, x: &[f32], cols: usize, c: usize) -> QuantizedActs {
    let mut acts = QuantizedActs::new(2, cols);
    let w = acts.prepare(isa, ty, 2, cols);
    let c = c / w.layout().align() * w.layout().align();
    for r in 0..2 {
        let xr = &x[r * cols..(r + 1) * cols];
        // SAFETY: one thread; the two ranges of a row are disjoint.
        unsafe {
            if c > 0 {
                w.write_cols(r, 0, &xr[..c], None);
            }
            if c < cols {
                w.write_cols(r, c, &xr[c..], None);
            }
        }
    }
    acts
}

/// The rows (of the two [`quantize_split`] writes) whose per-block entries `acts` stores:
/// none in the packed layout, which keeps no blocks.
fn block_rows(acts: &QuantizedActs) -> std::ops::Range<usize> {
    if acts.layout() == ActLayout::Packed {
        0..0
    } else {
        0..2
    }
}

fn tiers() -> Vec<(Isa, bool)> {
    common::simd_tiers()
}

/// On aarch64 the NEON tier is found (every aarch64 core has NEON), so the properties below
/// compare it with the scalar reference there rather than comparing nothing
/// (`scripts/test-aarch64.sh` runs them under QEMU).
#[cfg(target_arch = "aarch64")]
#[test]
fn the_neon_tier_is_detected_and_tested() {
    assert!(tiers().contains(&(Isa::Neon, false)), "{:?}", tiers());
}

/// Raw ggml bytes for `rows × cols` weights of `ty`: random quants (every bit pattern,
/// Q8_0's -128 included) with finite random scales.
fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let nb = cols / 32;
    let mut out = Vec::new();
    let scale = |rng: &mut Rng| f16::from_f32(rng.unit() * 0.05).to_le_bytes();
    for _ in 0..rows {
        match ty {
            GgmlType::Q4_0 => {
                for _ in 0..nb {
                    out.extend_from_slice(&scale(rng));
                    out.extend((0..16).map(|_| rng.next() as u8));
                }
            }
            GgmlType::Q4_1 => {
                for _ in 0..nb {
                    out.extend_from_slice(&scale(rng));
                    out.extend_from_slice(&scale(rng));
                    out.extend((0..16).map(|_| rng.next() as u8));
                }
            }
            GgmlType::Q8_0 => {
                for _ in 0..nb {
                    out.extend_from_slice(&scale(rng));
                    out.extend((0..32).map(|_| rng.next() as u8));
                }
            }
            GgmlType::Q5_0 => {
                for _ in 0..nb {
                    out.extend_from_slice(&scale(rng));
                    out.extend((0..20).map(|_| rng.next() as u8));
                }
            }
            GgmlType::F16 => {
                for _ in 0..cols {
                    out.extend_from_slice(&f16::from_f32(rng.unit()).to_le_bytes());
                }
            }
            _ => {
                for _ in 0..cols {
                    out.extend_from_slice(&rng.unit().to_le_bytes());
                }
            }
        }
    }
    out
}

/// Activation rows: values in [-1, 1) × 10^exp, with zeros and outliers 1000× larger
/// sprinkled in, the largest below 2000 (beyond that ggml's f16 block sum `s` overflows, in
/// ggml as here).
fn random_acts(n: usize, cols: usize, exp: i32, rng: &mut Rng) -> Vec<f32> {
    let s = 10f32.powi(exp);
    let outlier = if exp <= 0 { 1000.0 } else { 1.0 };
    (0..n * cols)
        .map(|i| match rng.next() % 16 {
            0 => 0.0,
            1 if i % 7 == 0 => rng.unit() * s * outlier,
            _ => rng.unit() * s,
        })
        .collect()
}

/// The scalar reference: ggml's activation blocks for `ty` and its scalar `vec_dot`.
fn reference_dot(ty: GgmlType, w: &[u8], x: &[f32]) -> f32 {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => {
            let mut a = vec![BlockQ8_0::default(); x.len() / 32];
            quant::quantize_row_q8_0(Isa::Scalar, x, &mut a);
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::Q8_0(&a))
        }
        GgmlType::Q4_1 => {
            let mut a = vec![BlockQ8_1::default(); x.len() / 32];
            quant::quantize_row_q8_1(Isa::Scalar, x, &mut a);
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::Q8_1(&a))
        }
        GgmlType::F16 => {
            let a: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::F16(&a))
        }
        _ => quant::vec_dot(Isa::Scalar, ty, w, ActRow::F32(x)),
    }
}

/// Σ |w_i · a_i| over the dequantized row pair: the scale of the rounding bound.
fn magnitude(ty: GgmlType, w: &[u8], x: &[f32]) -> f64 {
    let mut wd = vec![0.0f32; x.len()];
    quant::dequantize_row(ty, w, &mut wd).unwrap();
    wd.iter()
        .zip(x)
        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
        .sum::<f64>()
        // the Q4_1 min term and the activation rounding add at most this much again
        * 2.0
}

fn matmul(isa: Isa, threads: usize, w: &WeightMatrix<'_>, x: &[f32], n: usize) -> Vec<f32> {
    let pool = ThreadPool::new(threads);
    let mut acts = QuantizedActs::new(n, w.cols);
    acts.quantize_for(isa, w.ty, x, n, w.cols);
    let mut y = vec![f32::NAN; n * w.rows];
    quant::matmul(&pool, isa, w, &acts, n, &mut y);
    y
}

const TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::F16,
    GgmlType::F32,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Matrix products of every tier against the scalar reference, element by element:
    /// 1..=20 blocks per row (every tail of a four-block group), 1..=19 weight rows (the
    /// AVX2 tier's groups of eight rows and their remainders), 1..=11 activation rows (every
    /// tile remainder), magnitudes from 1e-6 (scales that underflow f16) to 1e3.
    #[test]
    fn matmul_tiers_match_scalar(
        ti in 0usize..TYPES.len(),
        nb in 1usize..=20,
        rows in 1usize..=19,
        n in 1usize..=11,
        exp in -6i32..=3,
        seed in 1u32..u32::MAX,
    ) {
        let ty = TYPES[ti];
        let cols = nb * 32;
        let mut rng = Rng(seed);
        let wb = random_weights(ty, rows, cols, &mut rng);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let x = random_acts(n, cols, exp, &mut rng);
        let reference: Vec<f32> = (0..n * rows)
            .map(|i| reference_dot(ty, w.row(i % rows), &x[(i / rows) * cols..(i / rows + 1) * cols]))
            .collect();
        let scalar = matmul(Isa::Scalar, 1, &w, &x, n);
        prop_assert_eq!(&scalar, &reference, "scalar matmul differs from the scalar dot");
        for (isa, vnni_off) in tiers() {
            let y = with_flavor(vnni_off, || matmul(isa, 2, &w, &x, n));
            for a in 0..n {
                let xa = &x[a * cols..(a + 1) * cols];
                for r in 0..rows {
                    let (got, want) = (y[a * rows + r], reference[a * rows + r]);
                    // The AVX2 quantized kernels add each block's exact integer sum with the
                    // scalar reference's f32 operations in its order: the same bits.
                    if isa == Isa::Avx2 && !matches!(ty, GgmlType::F16 | GgmlType::F32) {
                        prop_assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{isa} {ty} nb {nb} act {a} row {r}: {got} vs {want} (bits differ)"
                        );
                        continue;
                    }
                    let tol = 1e-5 * magnitude(ty, w.row(r), xa) + 1e-30;
                    // Equal includes equal infinities: a Q8_1 sum `s` beyond the f16 range is
                    // infinite in ggml too.
                    prop_assert!(
                        got == want || (f64::from(got) - f64::from(want)).abs() <= tol,
                        "{isa} (vnni off: {vnni_off}) {ty} nb {nb} act {a} row {r}: {got} vs {want} (tol {tol:e})"
                    );
                }
            }
            // One span of every weight row (the eight-row groups) gives the same bits.
            let whole = with_flavor(vnni_off, || common::matmul_one_span(isa, &w, &x, n));
            prop_assert_eq!(bits(&whole), bits(&y), "{} ({} rows) in one span", isa, rows);
            // One row at a time gives the same bits as the batch (tile shape invariance).
            for a in 0..n {
                let one = with_flavor(vnni_off, || matmul(isa, 1, &w, &x[a * cols..(a + 1) * cols], 1));
                prop_assert_eq!(&one[..], &y[a * rows..(a + 1) * rows], "{} row {} alone", isa, a);
            }
        }
    }

    /// Activation quantization is bit-identical on every tier (ggml-cpu's x86 convention),
    /// whichever layout the tier stores it in. 1..=20 and 28, 29 and 152 blocks: rows with
    /// units and without.
    #[test]
    fn activation_blocks_identical_on_every_tier(
        nb in prop_oneof![1usize..=20, Just(28usize), Just(29usize), Just(152usize)],
        exp in -6i32..=3,
        seed in 1u32..u32::MAX,
    ) {
        let cols = nb * 32;
        let mut rng = Rng(seed);
        let x = random_acts(1, cols, exp, &mut rng);
        let mut want = vec![BlockQ8_1::default(); nb];
        quant::quantize_row_q8_1(Isa::Scalar, &x, &mut want);
        for (isa, _) in tiers() {
            let mut acts = QuantizedActs::new(1, cols);
            acts.quantize_for(isa, GgmlType::Q4_1, &x, 1, cols);
            let got = match acts.layout() {
                ActLayout::Packed => {
                    // The whole row, units included, is what the scalar packer writes of
                    // its blocks (the units of rows that carry them, `packed::has_units`).
                    let row = acts.packed_row(0);
                    let blocks = row.to_blocks();
                    let mut bytes = vec![0xA5u8; packed::row_bytes(cols)];
                    packed::pack_blocks(&blocks, &mut bytes);
                    prop_assert!(row.as_bytes() == &bytes[..], "{} packed row of {} blocks", isa, nb);
                    blocks
                }
                _ => match acts.row(0) {
                    ActRow::Q8_1(b) => b.to_vec(),
                    other => panic!("unexpected activation row {other:?}"),
                },
            };
            prop_assert_eq!(&got, &want, "{}", isa);
        }
    }

    /// The per-block entries an activation row stores after its blocks are its blocks'
    /// values, also when the row is written a column range at a time, as the pooled quantizer
    /// of the forward pass does: a Q8_0 row's (read by the AVX2 prefill of Q4_0 and Q5_0
    /// weights) each block's widened scale and 16 × its quant sum, a Q8_1 row's (read by the
    /// AVX2 prefill of Q4_1 weights) its `d` and `s` widened. Tiers that quantize Q5_0's or
    /// Q4_1's activations into another layout (the AVX-512 tier's packed rows) store none
    /// there and are not asked for them; the AVX2 tier, on every x86 machine, always is.
    #[test]
    fn stored_entries_are_the_blocks_values(
        nb in prop_oneof![1usize..=20, Just(28usize), Just(31usize)],
        split in 0usize..=20,
        exp in -6i32..=3,
        seed in 1u32..u32::MAX,
    ) {
        let cols = nb * 32;
        let mut rng = Rng(seed);
        let x = random_acts(2, cols, exp, &mut rng);
        let c = split.min(nb) * 32;
        for (isa, _) in tiers() {
            let acts = quantize_split(isa, GgmlType::Q5_0, &x, cols, c);
            if acts.layout() == ActLayout::Packed {
                // Written in two column ranges, a packed row (units included) is the one the
                // scalar packer writes of its blocks.
                for r in 0..2 {
                    let row = acts.packed_row(r);
                    let mut bytes = vec![0x5Au8; packed::row_bytes(cols)];
                    packed::pack_blocks(&row.to_blocks(), &mut bytes);
                    prop_assert!(row.as_bytes() == &bytes[..], "{} row {} split at {}", isa, r, c);
                }
            }
            for r in block_rows(&acts) {
                let ActRow::Q8_0(blocks) = acts.row(r) else {
                    panic!("{isa}: Q5_0 weights take Q8_0 activation rows");
                };
                let aux = acts.q8_0_aux(r);
                prop_assert_eq!(aux.len(), nb);
                for (i, (e, b)) in aux.iter().zip(blocks).enumerate() {
                    let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
                    prop_assert_eq!(e.off16, 16 * sum, "{} row {} block {}", isa, r, i);
                    prop_assert_eq!(e.d.to_bits(), b.d.to_f32().to_bits(), "{} row {} block {}", isa, r, i);
                }
            }
            let acts = quantize_split(isa, GgmlType::Q4_1, &x, cols, c);
            for r in block_rows(&acts) {
                let ActRow::Q8_1(blocks) = acts.row(r) else {
                    panic!("{isa}: Q4_1 weights take Q8_1 activation rows");
                };
                let aux = acts.q8_1_aux(r);
                prop_assert_eq!(aux.len(), nb);
                for (i, (e, b)) in aux.iter().zip(blocks).enumerate() {
                    prop_assert_eq!(e.d.to_bits(), b.d.to_f32().to_bits(), "{} row {} block {}", isa, r, i);
                    prop_assert_eq!(e.s.to_bits(), b.s.to_f32().to_bits(), "{} row {} block {}", isa, r, i);
                }
            }
        }
    }

    /// Attention kernels of every tier against the scalar code.
    #[test]
    fn attention_kernels_match_scalar(
        n in 1usize..=70,
        nq in 1usize..=13,
        hd_i in 0usize..3,
        seed in 1u32..u32::MAX,
    ) {
        let hd = [16usize, 64, 128][hd_i];
        let mut rng = Rng(seed);
        let ld = n.next_multiple_of(16);
        let q: Vec<f32> = (0..nq * hd).map(|_| rng.unit()).collect();
        // Keys in whole tiles of 16 slots, as the KV cache stores them.
        let k: Vec<f16> = (0..n.next_multiple_of(16) * hd)
            .map(|_| f16::from_f32(rng.unit() * 4.0))
            .collect();
        let v: Vec<f16> = (0..n * hd).map(|_| f16::from_f32(rng.unit())).collect();
        let mut s_ref = vec![0.0f32; nq * ld];
        attn::scores_f16(Isa::Scalar, &q, nq, hd, &k, n, 0.125, &mut s_ref, ld);
        let mut o_ref = vec![0.25f32; nq * hd];
        attn::accum_f16(Isa::Scalar, &s_ref, ld, nq, hd, &v, n, &mut o_ref);
        let mut e_ref = s_ref[..n].to_vec();
        let sum_ref = attn::exp_shifted(Isa::Scalar, &mut e_ref, 1.0);
        let mut g_ref: Vec<f32> = s_ref[..n].iter().map(|x| x * 8.0).collect();
        let u: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
        attn::silu_mul(Isa::Scalar, &mut g_ref, &u);
        for (isa, _) in tiers() {
            let mut s = vec![0.0f32; nq * ld];
            attn::scores_f16(isa, &q, nq, hd, &k, n, 0.125, &mut s, ld);
            for h in 0..nq {
                for j in 0..n {
                    let (a, b) = (s[h * ld + j], s_ref[h * ld + j]);
                    prop_assert!((a - b).abs() <= 1e-5 * (hd as f32), "{isa} score {h} {j}: {a} vs {b}");
                }
            }
            let mut o = vec![0.25f32; nq * hd];
            attn::accum_f16(isa, &s_ref, ld, nq, hd, &v, n, &mut o);
            for (a, b) in o.iter().zip(&o_ref) {
                prop_assert!((a - b).abs() <= 1e-5 * (n as f32 + 1.0), "{isa} accum: {a} vs {b}");
            }
            let mut e = s_ref[..n].to_vec();
            let sum = attn::exp_shifted(isa, &mut e, 1.0);
            prop_assert!((sum - sum_ref).abs() <= 1e-5 * sum_ref, "{isa} exp sum");
            for (a, b) in e.iter().zip(&e_ref) {
                prop_assert!((a - b).abs() <= 4e-7 * b.abs(), "{isa} exp: {a} vs {b}");
            }
            let mut g: Vec<f32> = s_ref[..n].iter().map(|x| x * 8.0).collect();
            attn::silu_mul(isa, &mut g, &u);
            for (a, b) in g.iter().zip(&g_ref) {
                prop_assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "{isa} silu: {a} vs {b}");
            }
            let wide: Vec<f32> = (0..n).map(|_| rng.unit() * 60000.0).collect();
            let mut h = vec![f16::ZERO; n];
            let mut back = vec![0.0f32; n];
            attn::f32_to_f16(isa, &wide, &mut h);
            attn::f16_to_f32(isa, &h, &mut back);
            for ((x, hh), b) in wide.iter().zip(&h).zip(&back) {
                prop_assert_eq!(*hh, f16::from_f32(*x));
                prop_assert_eq!(*b, hh.to_f32());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ggml's limits (test-quantize-fns.cpp)
// ---------------------------------------------------------------------------------------------

const TEST_SIZE: usize = 32 * 128;
const MAX_QUANTIZATION_TOTAL_ERROR: f64 = 0.002;
const MAX_QUANTIZATION_REFERENCE_ERROR: f64 = 0.0001;
const MAX_DOT_PRODUCT_ERROR: f64 = 0.02;

fn synthetic(offset: f32) -> Vec<f32> {
    (0..TEST_SIZE)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

/// ggml's `array_rmse`: `sqrt(Σ d²) / n`.
fn ggml_rmse(a: &[f32], b: &[f32]) -> f64 {
    let s: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    s.sqrt() / a.len() as f64
}

fn quantize_weights(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let nb = x.len() / 32;
    match ty {
        GgmlType::Q4_0 => {
            let mut b = vec![
                BlockQ4_0 {
                    d: f16::ZERO,
                    qs: [0; 16]
                };
                nb
            ];
            quant::quantize_row_q4_0(x, &mut b);
            as_bytes(&b).to_vec()
        }
        GgmlType::Q4_1 => {
            let mut b = vec![
                BlockQ4_1 {
                    d: f16::ZERO,
                    m: f16::ZERO,
                    qs: [0; 16]
                };
                nb
            ];
            quant::quantize_row_q4_1(x, &mut b);
            as_bytes(&b).to_vec()
        }
        _ => {
            let mut b = vec![BlockQ8_0::default(); nb];
            quant::quantize_row_q8_0_ref(x, &mut b);
            as_bytes(&b).to_vec()
        }
    }
}

#[test]
fn ggml_quantization_error_limits() {
    let x = synthetic(0.0);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let q = quantize_weights(ty, &x);
        let mut back = vec![0.0f32; TEST_SIZE];
        quant::dequantize_row(ty, &q, &mut back).unwrap();
        let err = ggml_rmse(&x, &back);
        assert!(err < MAX_QUANTIZATION_TOTAL_ERROR, "{ty} total error {err}");
        // and it is not trivially zero: 4-bit formats lose information
        if ty != GgmlType::Q8_0 {
            assert!(err > 1e-5, "{ty} total error {err} suspiciously small");
        }
    }
    // Activation quantizers of every tier against ggml's reference quantizers.
    let mut r0 = vec![BlockQ8_0::default(); TEST_SIZE / 32];
    let mut r1 = vec![BlockQ8_1::default(); TEST_SIZE / 32];
    quant::quantize_row_q8_0_ref(&x, &mut r0);
    quant::quantize_row_q8_1_ref(&x, &mut r1);
    let mut ref0 = vec![0.0f32; TEST_SIZE];
    let mut ref1 = vec![0.0f32; TEST_SIZE];
    quant::dequantize_row(GgmlType::Q8_0, as_bytes(&r0), &mut ref0).unwrap();
    quant::dequantize_row(GgmlType::Q8_1, as_bytes(&r1), &mut ref1).unwrap();
    assert!(ggml_rmse(&x, &ref0) < MAX_QUANTIZATION_TOTAL_ERROR);
    for isa in std::iter::once(Isa::Scalar).chain(tiers().into_iter().map(|t| t.0)) {
        let mut a0 = vec![BlockQ8_0::default(); TEST_SIZE / 32];
        let mut a1 = vec![BlockQ8_1::default(); TEST_SIZE / 32];
        quant::quantize_row_q8_0(isa, &x, &mut a0);
        quant::quantize_row_q8_1(isa, &x, &mut a1);
        let mut d0 = vec![0.0f32; TEST_SIZE];
        let mut d1 = vec![0.0f32; TEST_SIZE];
        quant::dequantize_row(GgmlType::Q8_0, as_bytes(&a0), &mut d0).unwrap();
        quant::dequantize_row(GgmlType::Q8_1, as_bytes(&a1), &mut d1).unwrap();
        let (e0, e1) = (ggml_rmse(&d0, &ref0), ggml_rmse(&d1, &ref1));
        assert!(
            e0 < MAX_QUANTIZATION_REFERENCE_ERROR,
            "{isa} Q8_0 reference error {e0}"
        );
        assert!(
            e1 < MAX_QUANTIZATION_REFERENCE_ERROR,
            "{isa} Q8_1 reference error {e1}"
        );
        // packed layout (AVX-512): same values once unpacked
        let mut acts = QuantizedActs::new(1, TEST_SIZE);
        acts.quantize_for(isa, GgmlType::Q4_1, &x, 1, TEST_SIZE);
        if acts.layout() == ActLayout::Packed {
            assert_eq!(acts.packed_row(0).to_blocks(), a1, "{isa} packed");
            let p = acts.packed_row(0);
            assert_eq!(p.groups(), packed::groups(TEST_SIZE));
        }
    }
}

#[test]
fn ggml_dot_product_error_limits() {
    let x1 = synthetic(0.0);
    let x2 = synthetic(1.0);
    let exact: f64 = x1
        .iter()
        .zip(&x2)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let wb = quantize_weights(ty, &x1);
        let w = WeightMatrix::new(ty, 1, TEST_SIZE, &wb).unwrap();
        let reference = reference_dot(ty, &wb, &x2);
        let err = (f64::from(reference) - exact).abs() / TEST_SIZE as f64;
        assert!(err < MAX_DOT_PRODUCT_ERROR, "{ty} scalar dot error {err}");
        for (isa, vnni_off) in std::iter::once((Isa::Scalar, false)).chain(tiers()) {
            let y = with_flavor(vnni_off, || matmul(isa, 1, &w, &x2, 1))[0];
            let err = (f64::from(y) - exact).abs() / TEST_SIZE as f64;
            assert!(err < MAX_DOT_PRODUCT_ERROR, "{isa} {ty} dot error {err}");
            let rel = (f64::from(y) - f64::from(reference)).abs() / exact.abs();
            assert!(rel < 1e-5, "{isa} {ty}: {y} vs scalar {reference}");
        }
    }
}

#[test]
fn zero_rows_give_exact_zeros() {
    let cols = 96;
    let mut rng = Rng(7);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let mut wb = random_weights(ty, 3, cols, &mut rng);
        if ty == GgmlType::Q4_1 {
            // zero mins so that a zero activation row gives exactly zero
            for b in 0..wb.len() / 20 {
                wb[b * 20 + 2] = 0;
                wb[b * 20 + 3] = 0;
            }
        }
        let w = WeightMatrix::new(ty, 3, cols, &wb).unwrap();
        for (isa, vnni_off) in std::iter::once((Isa::Scalar, false)).chain(tiers()) {
            let y = with_flavor(vnni_off, || matmul(isa, 1, &w, &vec![0.0; cols], 1));
            assert!(y.iter().all(|&v| v == 0.0), "{isa} {ty}: {y:?}");
        }
    }
}

/// Q4_1 rows wider than the AVX-512 tiles collect mins for (over 256 four-block groups, so
/// they run in narrow tiles only) and rows just under that bound: every tier within the
/// tolerance of the scalar reference, and one activation row at a time gives the batch's bits.
#[test]
fn wide_q4_1_rows_match_scalar_and_keep_tile_shape_invariance() {
    let ty = GgmlType::Q4_1;
    let mut rng = Rng(0x51ED);
    for nb in [4 * 256, 4 * 256 + 6] {
        let (rows, n, cols) = (3, 9, nb * 32);
        let wb = random_weights(ty, rows, cols, &mut rng);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let x = random_acts(n, cols, 0, &mut rng);
        for (isa, vnni_off) in tiers() {
            let y = with_flavor(vnni_off, || matmul(isa, 2, &w, &x, n));
            for a in 0..n {
                let xa = &x[a * cols..(a + 1) * cols];
                for r in 0..rows {
                    let (got, want) = (y[a * rows + r], reference_dot(ty, w.row(r), xa));
                    let tol = 1e-5 * magnitude(ty, w.row(r), xa);
                    assert!(
                        (f64::from(got) - f64::from(want)).abs() <= tol,
                        "{isa} nb {nb} act {a} row {r}: {got} vs {want} (tol {tol:e})"
                    );
                }
                let one = with_flavor(vnni_off, || matmul(isa, 1, &w, xa, 1));
                assert_eq!(
                    &one[..],
                    &y[a * rows..(a + 1) * rows],
                    "{isa} nb {nb} row {a} alone"
                );
            }
        }
    }
}

/// The bit patterns of `v`, to compare results for bit-identity.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A Q8_0 matrix without units is copied byte for byte on the AVX-512 VBMI and AVX2 tiers, and nowhere else: the copy
/// serves as the matrix's data (row lookups included), reports each run of source rows once and
/// in order to the caller, and the products read from it are the file's bits.
#[test]
fn copied_q8_0_is_the_file_bytes_and_reports_every_run() {
    let ty = GgmlType::Q8_0;
    let mut rng = Rng(0x08C0);
    // Rows of 20 blocks (680 bytes): enough rows for several runs of `COPY_CHUNK` bytes.
    let (rows, cols) = (quant::COPY_CHUNK / 680 * 2 + 7, 640);
    let wb = random_weights(ty, rows, cols, &mut rng);
    let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
    let mut copied = 0;
    for (isa, vnni_off) in tiers() {
        let mut runs = Vec::new();
        let made = quant::repack_all(isa, std::slice::from_ref(&w), |i, bytes| {
            runs.push((i, bytes))
        })
        .unwrap();
        let Some(Some(r)) = made.into_iter().next() else {
            assert!(runs.is_empty(), "{isa}: runs reported without a copy");
            continue;
        };
        assert!(
            isa == Isa::Avx2 || quant::has_vbmi(),
            "{isa}: a Q8_0 copy on a tier that makes none"
        );
        assert!(r.ggml_layout(), "{isa}: Q8_0 copy layout");
        assert_eq!(r.len(), wb.len(), "{isa}: copy size");
        let mut next = 0;
        for (i, bytes) in &runs {
            assert_eq!(
                (*i, bytes.start),
                (0, next),
                "{isa}: runs in order, each once"
            );
            assert_eq!(bytes.len() % w.row_bytes(), 0, "{isa}: whole rows per run");
            next = bytes.end;
        }
        assert_eq!(next, wb.len(), "{isa}: the runs cover the matrix");
        assert!(runs.len() >= 3, "{isa}: {} runs", runs.len());
        let wr = w.with_repacked(&r);
        assert_eq!(wr.data, &wb[..], "{isa}: the copy holds the file's bytes");
        assert_ne!(wr.data.as_ptr(), wb.as_ptr(), "{isa}: read from the copy");
        assert_eq!(wr.bytes_read(), wb.len());
        let mut a = vec![0.0f32; cols];
        let mut b = vec![0.0f32; cols];
        for row in [0, rows / 2, rows - 1] {
            w.row_dequant(row, &mut a);
            wr.row_dequant(row, &mut b);
            assert_eq!(a, b, "{isa}: row {row} looked up from the copy");
        }
        for n in [1, 8, 17] {
            let x = random_acts(n, cols, 0, &mut rng);
            let want = with_flavor(vnni_off, || matmul(isa, 2, &w, &x, n));
            let got = with_flavor(vnni_off, || matmul(isa, 2, &wr, &x, n));
            assert_eq!(
                bits(&got),
                bits(&want),
                "{isa} (VNNI off: {vnni_off}) {n} rows"
            );
        }
        copied += 1;
    }
    // Every x86_64 machine has the AVX2 tier (and the VBMI one where the CPU has it).
    let want = if cfg!(target_arch = "x86_64") {
        1 + usize::from(quant::has_vbmi())
    } else {
        0
    };
    assert!(copied >= want, "{copied} tiers copied, {want} expected");
}

/// Q5_0 and Q4_1 matrices repacked at load for the AVX-512 VBMI kernels and for the AVX2
/// kernels (`quant::repack`, what the engine does to a model's matrices) give the bits the
/// ggml rows give on the same tier, and both agree with the scalar reference: every tail of a
/// four-block group (1..=7 blocks), the reference models' widths (18, 20, 28, 48 blocks) and
/// wide rows (152: AVX2 prefill in runs of 64 blocks; for Q4_1 also 1,040 blocks, past the
/// rows whose mins the wide tiles collect, and which the AVX2 tier does not repack; for Q5_0
/// 13 blocks, one unit of block lanes with a partial group, and 1,540, past the units one row
/// block of the AVX-512 tier's 16-row path holds), 1..=39
/// activation rows (the decode tile, the 16-row tiles of Q5_0 with their row blocks, the 2 × 8
/// tiles, every remainder) and 133 (AVX2: a window of 128, a quad and a row), 11 weight rows (a
/// group, or band, of eight and three; at 2 threads the chunks of four rows start and end inside
/// the band), 1 and 2 threads, quants, fifth bits, scales and mins of every pattern; with 16
/// activation rows or more, each row alone gives the batch's bits. Q8_0 rows with units, which
/// the AVX-512 VBMI tier copies into block lanes (13, 14 and 29 blocks: partial groups; 28:
/// Qwen2.5's 896 columns; 152 and 1,540), the same.
#[test]
fn repacked_q5_0_and_q4_1_give_the_bits_of_the_ggml_rows() {
    let mut rng = Rng(0x05A0);
    let (mut compared, mut compared_avx2, mut compared_q8) = (0, 0, 0);
    let widths: [&[usize]; 3] = [
        &[1, 2, 3, 4, 5, 6, 7, 13, 20, 28, 152, 1540],
        &[1, 2, 3, 4, 5, 6, 7, 18, 48, 152, 1040],
        &[13, 14, 28, 29, 152, 1540],
    ];
    for (ty, widths) in [GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q8_0]
        .into_iter()
        .zip(widths)
    {
        for (isa, vnni_off) in tiers() {
            for &nb in widths {
                let (rows, cols) = (11, nb * 32);
                let wb = random_weights(ty, rows, cols, &mut rng);
                let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
                let Some(r) = quant::repack(isa, &w).unwrap() else {
                    continue;
                };
                if ty == GgmlType::Q8_0 {
                    // Only the AVX-512 VBMI tier stores Q8_0 in its own layout.
                    if r.ggml_layout() {
                        assert!(
                            isa == Isa::Avx2 || !quant::has_vbmi(),
                            "{isa}: Q8_0 rows of {nb} blocks copied as they are"
                        );
                        continue;
                    }
                    assert_eq!(
                        r.len(),
                        rows * nb.div_ceil(4) * 136,
                        "{isa}: Q8_0 copy size"
                    );
                }
                let wr = w.with_repacked(&r);
                for n in [1, 2, 3, 5, 8, 9, 16, 17, 39, 133] {
                    let x = random_acts(n, cols, 0, &mut rng);
                    for threads in [1, 2] {
                        let want = with_flavor(vnni_off, || matmul(isa, threads, &w, &x, n));
                        let got = with_flavor(vnni_off, || matmul(isa, threads, &wr, &x, n));
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{ty} {isa} (VNNI off: {vnni_off}) {nb} blocks, {n} rows, {threads} threads"
                        );
                        for a in 0..n {
                            let xa = &x[a * cols..(a + 1) * cols];
                            if threads == 1 && n >= 16 {
                                // The tiles of 16 rows and the remainders give one row's bits
                                // (the decode of the same row).
                                let one = with_flavor(vnni_off, || matmul(isa, 1, &wr, xa, 1));
                                assert_eq!(
                                    bits(&one),
                                    bits(&got[a * rows..(a + 1) * rows]),
                                    "{ty} {isa} (VNNI off: {vnni_off}) {nb} blocks, row {a} of {n} alone"
                                );
                            }
                            for row in 0..rows {
                                let (g, want) =
                                    (got[a * rows + row], reference_dot(ty, w.row(row), xa));
                                let tol = 1e-5 * magnitude(ty, w.row(row), xa);
                                assert!(
                                    (f64::from(g) - f64::from(want)).abs() <= tol,
                                    "{ty} {isa} {nb} blocks act {a} row {row}: {g} vs {want} (tol {tol:e})"
                                );
                            }
                        }
                    }
                    if ty == GgmlType::Q8_0 {
                        compared_q8 += 1;
                    } else if isa == Isa::Avx2 {
                        compared_avx2 += 1;
                    } else {
                        compared += 1;
                    }
                }
            }
        }
    }
    // Every Q5_0 and Q4_1 width the AVX2 tier repacks, 10 row counts each, on every
    // x86_64 machine (all have AVX2).
    let want_avx2 = if cfg!(target_arch = "x86_64") {
        // The widest row of each type is past what the AVX2 tier repacks.
        (widths[0].len() - 1 + widths[1].len() - 1) * 10
    } else {
        0
    };
    assert_eq!(
        compared_avx2, want_avx2,
        "Q5_0 and Q4_1 cases repacked for the AVX2 tier"
    );
    if quant::has_vbmi() {
        // At least one VBMI tier: both types, every width, 10 row counts each.
        assert!(
            compared >= 2 * 10 * 10,
            "the AVX-512 VBMI tier repacked {compared} cases"
        );
        // Every Q8_0 width in block lanes, 10 row counts each, on the VBMI tiers.
        assert!(
            compared_q8 >= widths[2].len() * 10,
            "the AVX-512 VBMI tier copied {compared_q8} Q8_0 cases into block lanes"
        );
    } else {
        eprintln!("repacked Q4_1: no AVX-512 VBMI tier on this CPU; nothing is repacked");
    }
}

/// The AVX2 eight-row prefill beyond one run and one window, every product the scalar
/// reference's bits, pooled and in one span (17 weight rows: two groups of eight and one left
/// over): rows of 69 blocks (Q4_0/Q5_0: a run of 64 unpacked blocks, then one of 5, each
/// block's offset from the activations' stored entries) against 9 activation rows (two quads
/// and one left over); rows of 20 blocks against 133 activation rows (a window of 128 through
/// every group, then a quad and one row left over). Q4_1 on the same shapes: its 20-block
/// rows unpacked and windowed as the others (no offset, the mins per block), its 69-block
/// rows (past one run) eight-by-four without unpacking.
///
/// x86_64 only (the AVX2 tier's paths); every x86_64 CI machine has AVX2.
#[cfg(target_arch = "x86_64")]
#[test]
fn offset_rows_over_runs_and_windows_give_the_scalar_bits() {
    assert!(
        quant::supported(Isa::Avx2),
        "every x86_64 CI machine has AVX2"
    );
    let rows = 17;
    for (nb, n) in [(69, 9), (20, 133)] {
        let cols = nb * 32;
        let types = [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_1];
        for (i, ty) in types.into_iter().enumerate() {
            let mut rng = Rng(0x5eed + (nb + i) as u32);
            let wb = random_weights(ty, rows, cols, &mut rng);
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
            let x = random_acts(n, cols, 0, &mut rng);
            let want: Vec<f32> = (0..n * rows)
                .map(|i| {
                    reference_dot(
                        ty,
                        w.row(i % rows),
                        &x[(i / rows) * cols..(i / rows + 1) * cols],
                    )
                })
                .collect();
            assert!(
                want.iter().all(|v| v.is_finite() && *v != 0.0),
                "{ty} {nb}×{n}: degenerate"
            );
            let pooled = matmul(Isa::Avx2, 2, &w, &x, n);
            assert_eq!(
                bits(&pooled),
                bits(&want),
                "{ty} {nb} blocks × {n} rows: pooled"
            );
            let whole = common::matmul_one_span(Isa::Avx2, &w, &x, n);
            assert_eq!(
                bits(&whole),
                bits(&want),
                "{ty} {nb} blocks × {n} rows: one span"
            );
        }
    }
}
