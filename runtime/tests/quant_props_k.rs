//! Property tests of the five-bit and K-quant kernels (Q5_0, Q5_1, Q2_K … Q6_K): every SIMD
//! tier this CPU runs (AVX2, AVX-512 with and without VNNI) against the scalar reference on
//! odd row counts, block tails, every prefill-tile remainder and extreme scales; the Q8_K
//! activation quantizer against its definition; and each dot product against the exact dot
//! of the dequantized weights with the unquantized activations, within the bound that the
//! activation rounding allows (`Σ |w_i| · d_block / 2`).
//!
//! The K-quant kernels of every tier, and the AVX2 Q5_0/Q5_1 kernels, compute each block's
//! integer sums exactly and finish with the scalar reference's f32 operations in its order,
//! so they must equal it bit for bit. The AVX-512 Q5_0/Q5_1 kernels accumulate f32 in lanes
//! (as ggml does): bound `2e-5 · Σ|w_i · a_i|`.

mod common;

use common::{Rng, with_flavor};
use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K};
use pocketperf_runtime::quant::{self, ActRow, Isa, QuantizedActs, WeightMatrix, kquants};
use proptest::prelude::*;

fn tiers() -> Vec<(Isa, bool)> {
    common::simd_tiers()
}

const TYPES: [GgmlType; 7] = [
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// Byte offsets of the f16 scale fields in one block of `ty`.
fn half_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        _ => &[208],
    }
}

/// Raw bytes of `rows` rows of `nb` blocks: every quant and sub-scale bit pattern random,
/// f16 scales finite with magnitude about `10^wexp`.
fn random_weights(ty: GgmlType, rows: usize, nb: usize, wexp: i32, rng: &mut Rng) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut out: Vec<u8> = (0..rows * nb * bb).map(|_| rng.next() as u8).collect();
    let s = 10f32.powi(wexp);
    for b in 0..rows * nb {
        for &off in half_fields(ty) {
            let h = f16::from_f32(rng.unit() * s);
            out[b * bb + off..b * bb + off + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    out
}

/// Values in [-1, 1) × 10^exp with zeros and 1000× outliers (up to 2000: beyond, the f16 sum
/// of a Q8_1 block overflows, in ggml as here).
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
        GgmlType::Q5_0 => {
            let mut a = vec![BlockQ8_0::default(); x.len() / 32];
            quant::quantize_row_q8_0(Isa::Scalar, x, &mut a);
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::Q8_0(&a))
        }
        GgmlType::Q5_1 => {
            let mut a = vec![BlockQ8_1::default(); x.len() / 32];
            quant::quantize_row_q8_1(Isa::Scalar, x, &mut a);
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::Q8_1(&a))
        }
        _ => {
            let mut a = vec![BlockQ8K::default(); x.len() / 256];
            quant::quantize_row_q8_k(x, &mut a);
            quant::vec_dot(Isa::Scalar, ty, w, ActRow::Q8K(&a))
        }
    }
}

/// Whether the `isa` kernel of `ty` sums f32 in lanes rather than in the scalar order.
fn lane_sums(isa: Isa, ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q5_0 | GgmlType::Q5_1) && isa != Isa::Avx2
}

/// The magnitude over which a lane-summing kernel's f32 rounding is bounded: `Σ|w_i · x_i|`,
/// and for the K-quants the scale and min/offset parts of each weight before they cancel.
fn rounding_mag(ty: GgmlType, w: &[u8], x: &[f32]) -> f64 {
    if ty.block_len() != 256 {
        let wd = dequant(ty, w, x.len());
        return wd
            .iter()
            .zip(x)
            .map(|(&p, &q)| (f64::from(p) * f64::from(q)).abs())
            .sum();
    }
    let mut k = kquants::KBlock::default();
    let mut mag = 0.0f64;
    for (i, xb) in x.chunks_exact(256).enumerate() {
        kquants::unpack(ty, w, i, &mut k);
        for (e, &v) in xb.iter().enumerate() {
            let g = e / 16;
            let scale =
                f64::from(k.d * f32::from(k.sc[g])).abs() * (f64::from(k.u[e]) + f64::from(k.off));
            let min = f64::from(k.dmin * f32::from(k.mn[g])).abs();
            mag += f64::from(v).abs() * (scale + min);
        }
    }
    mag
}

fn dequant(ty: GgmlType, w: &[u8], n: usize) -> Vec<f32> {
    let mut wd = vec![0.0f32; n];
    quant::dequantize_row(ty, w, &mut wd).unwrap();
    wd
}

fn matmul(isa: Isa, threads: usize, w: &WeightMatrix<'_>, x: &[f32], n: usize) -> Vec<f32> {
    let pool = ThreadPool::new(threads);
    let mut acts = QuantizedActs::new(n, w.cols);
    acts.quantize_for(isa, w.ty, x, n, w.cols);
    let mut y = vec![f32::NAN; n * w.rows];
    quant::matmul(&pool, isa, w, &acts, n, &mut y);
    y
}

/// Q5_0 rows too wide for the AVX-512 tile's table of activation sums (more than 32 groups of
/// 128 values with 16 activation rows) take the in-tile sums: the same values as the scalar
/// reference within the lane-sum bound, and each activation row alone gives the same bits.
#[test]
fn q5_0_rows_wider_than_the_sum_table_match() {
    let ty = GgmlType::Q5_0;
    let (rows, nb, n) = (3, 33 * 4 + 2, 19);
    let cols = nb * 32;
    let mut rng = Rng(0x5EED_0500);
    let wb = random_weights(ty, rows, nb, -2, &mut rng);
    let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
    let x = random_acts(n, cols, 0, &mut rng);
    for (isa, vnni_off) in tiers() {
        assert_lane_sums_and_single_rows(isa, vnni_off, 2, &w, &x, n);
    }
}

/// `n` activation rows `x` through `w` (Q5_0) on `threads` threads: each output within the
/// lane-sum bound of the scalar reference, and each activation row alone gives the same bits.
fn assert_lane_sums_and_single_rows(
    isa: Isa,
    vnni_off: bool,
    threads: usize,
    w: &WeightMatrix<'_>,
    x: &[f32],
    n: usize,
) {
    let (rows, cols) = (w.rows, w.cols);
    let y = with_flavor(vnni_off, || matmul(isa, threads, w, x, n));
    for a in 0..n {
        let xa = &x[a * cols..(a + 1) * cols];
        for r in 0..rows {
            let want = reference_dot(w.ty, w.row(r), xa);
            let got = y[a * rows + r];
            let tol = 2e-5 * rounding_mag(w.ty, w.row(r), xa) + 1e-30;
            assert!(
                (f64::from(got) - f64::from(want)).abs() <= tol,
                "{isa} {rows}x{cols}, {threads} threads: act {a} row {r}: {got} vs {want} (tol {tol:e})"
            );
        }
        let one = with_flavor(vnni_off, || matmul(isa, 1, w, xa, 1));
        assert_eq!(
            &one[..],
            &y[a * rows..(a + 1) * rows],
            "{isa} {rows}x{cols}, {threads} threads: activation row {a} alone"
        );
    }
}

/// Q5_0 prefill on AVX-512 unpacks each weight group once per block of rows (as many rows as
/// 160 unpacked groups hold: 32 rows of 640 values, 26 of 704) and runs every 16-row
/// activation tile over the block. Rows spanning several blocks and a partial one, a block
/// tail (`nb % 4 != 0`), and activation rows beyond the last full tile: within the lane-sum
/// bound of the scalar reference, and each activation row alone gives the same bits.
#[test]
fn q5_0_row_blocks_match_the_reference_and_single_rows() {
    let ty = GgmlType::Q5_0;
    let mut rng = Rng(0x5EED_0B10);
    for (rows, nb, n) in [(75, 20, 37), (61, 22, 16)] {
        let cols = nb * 32;
        let wb = random_weights(ty, rows, nb, -2, &mut rng);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let x = random_acts(n, cols, 0, &mut rng);
        for (isa, vnni_off) in tiers() {
            for threads in [1, 2] {
                assert_lane_sums_and_single_rows(isa, vnni_off, threads, &w, &x, n);
            }
        }
    }
}

/// K-quant prefill on AVX2 decodes runs of eight super-blocks of eight weight rows once for
/// windows of 64 activation rows. Rows of three runs (the last short), two groups of eight
/// weight rows and one left over, two windows (the second short, with two activation rows
/// beyond its last quad), as one span: every tier gives the scalar reference's bits.
#[test]
fn k_quant_runs_and_windows_give_the_scalar_bits() {
    let mut rng = Rng(0x5EED_0C8B);
    let (rows, nb, n) = (17, 19, 70);
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let cols = nb * 256;
        let wb = random_weights(ty, rows, nb, -2, &mut rng);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let x = random_acts(n, cols, 0, &mut rng);
        for (isa, vnni_off) in tiers() {
            let y = with_flavor(vnni_off, || common::matmul_one_span(isa, &w, &x, n));
            for a in 0..n {
                for r in 0..rows {
                    let want = reference_dot(ty, w.row(r), &x[a * cols..(a + 1) * cols]);
                    let got = y[a * rows + r];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{isa} {ty} act {a} row {r}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// `matmul_span` over blocks of activation rows (with a remainder, and a block shorter than a
/// prefill tile) writes exactly the bits of one `matmul_rows` call over all the rows, only in
/// its own rows, for the packed formats and the K-quants with their prefill tiles, on every
/// tier this CPU runs and the scalar one.
#[test]
fn activation_row_spans_give_the_whole_calls_bits() {
    let mut rng = Rng(0x5EED_5BA7);
    let n = 150;
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ] {
        let (rows, cols) = (9, 512);
        let wb = random_weights(ty, rows, cols / ty.block_len(), -2, &mut rng);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let x = random_acts(n, cols, 0, &mut rng);
        let mut isas: Vec<(Isa, bool)> = vec![(Isa::Scalar, false)];
        isas.extend(tiers());
        for (isa, vnni_off) in isas {
            with_flavor(vnni_off, || {
                let mut acts = QuantizedActs::new(n, cols);
                acts.quantize_for(isa, ty, &x, n, cols);
                let mut whole = vec![f32::NAN; n * rows];
                let out = quant::OutRows::new(&mut whole, n, rows, rows, false);
                // SAFETY: one thread writes the view.
                unsafe { quant::matmul_rows(isa, &w, &acts, n, 0, rows, out) };
                let mut a0 = 0;
                for len in [64, 3, 64, 19] {
                    let a1 = (a0 + len).min(n);
                    // A fresh output per span: the span writes its own rows and nothing else.
                    let mut span = vec![f32::NAN; n * rows];
                    let out = quant::OutRows::new(&mut span, n, rows, rows, false);
                    // SAFETY: as above.
                    unsafe { quant::matmul_span(isa, &w, &acts, a0, a1, 2, rows, out) };
                    // SAFETY: as above.
                    unsafe { quant::matmul_span(isa, &w, &acts, a0, a1, 0, 2, out) };
                    for (i, (s, w)) in span.iter().zip(&whole).enumerate() {
                        let a = i / rows;
                        let ok = if (a0..a1).contains(&a) {
                            s.to_bits() == w.to_bits()
                        } else {
                            s.is_nan()
                        };
                        assert!(
                            ok,
                            "{ty} {isa} (vnni off: {vnni_off}) span {a0}..{a1}: act {a} row {}: \
                             {s} vs {w}",
                            i % rows
                        );
                    }
                    a0 = a1;
                }
                assert_eq!(a0, n);
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Matrix products of every tier against the scalar reference, element by element.
    #[test]
    fn matmul_tiers_match_scalar(
        ti in 0usize..TYPES.len(),
        nb_i in 1usize..=20,
        // Up to 19 weight rows: the AVX2 tier's groups of eight (in one span, below).
        rows in 1usize..=19,
        // Up to 37 activation rows: the AVX-512 Q5_0 one-by-16 tiles, then every smaller one.
        n in 1usize..=37,
        exp in -6i32..=3,
        wexp in -8i32..=4,
        seed in 1u32..u32::MAX,
    ) {
        let ty = TYPES[ti];
        let bl = ty.block_len();
        // K rows: 1..=5 super-blocks; Q5 rows: 1..=20 blocks.
        let nb = if bl == 256 { 1 + nb_i % 5 } else { nb_i };
        let cols = nb * bl;
        let mut rng = Rng(seed);
        let wb = random_weights(ty, rows, nb, wexp, &mut rng);
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
                    if !lane_sums(isa, ty) {
                        prop_assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{isa} (vnni off: {vnni_off}) {ty} nb {nb} act {a} row {r}: {got} vs {want}"
                        );
                    } else {
                        let tol = 2e-5 * rounding_mag(ty, w.row(r), xa) + 1e-30;
                        prop_assert!(
                            got == want || (f64::from(got) - f64::from(want)).abs() <= tol,
                            "{isa} (vnni off: {vnni_off}) {ty} nb {nb} act {a} row {r}: {got} vs {want} (tol {tol:e})"
                        );
                    }
                }
            }
            // One span of every weight row (the eight-row groups) gives the same bits.
            let whole = with_flavor(vnni_off, || common::matmul_one_span(isa, &w, &x, n));
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&whole), bits(&y), "{} {} ({} rows) in one span", isa, ty, rows);
            for a in 0..n {
                let one = with_flavor(vnni_off, || matmul(isa, 1, &w, &x[a * cols..(a + 1) * cols], 1));
                prop_assert_eq!(&one[..], &y[a * rows..(a + 1) * rows], "{} row {} alone", isa, a);
            }
        }
    }

    /// The Q8_K activation blocks of every tier (through the activation buffer the matrix
    /// product reads) equal the scalar quantizer's bit for bit, including a block whose
    /// largest magnitude occurs with both signs (the first occurrence gives the sign).
    #[test]
    fn q8k_blocks_identical_on_every_tier(
        nb in 1usize..=4,
        exp in -6i32..=3,
        tie in any::<bool>(),
        seed in 1u32..u32::MAX,
    ) {
        let cols = nb * 256;
        let mut rng = Rng(seed);
        let mut x = random_acts(1, cols, exp, &mut rng);
        if tie {
            let (i, j) = ((seed as usize) % cols, (seed as usize / 7) % cols);
            let big = 3.0e3 * 10f32.powi(exp);
            x[i] = big;
            x[j] = -big;
        }
        let mut want = vec![BlockQ8K::default(); nb];
        quant::quantize_row_q8_k(&x, &mut want);
        for (isa, _) in tiers() {
            let mut acts = QuantizedActs::new(1, cols);
            acts.quantize_for(isa, GgmlType::Q4K, &x, 1, cols);
            let ActRow::Q8K(got) = acts.row(0) else {
                panic!("{isa}: Q4_K weights take Q8_K activations");
            };
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.d.to_bits(), w.d.to_bits(), "{} d", isa);
                prop_assert_eq!(&g.qs[..], &w.qs[..], "{} qs", isa);
                prop_assert_eq!(g.bsums, w.bsums, "{} bsums", isa);
            }
        }
    }

    /// The Q8_K quantizer by its definition: the value of largest magnitude maps to -127
    /// (`d = -max / 127`), every value is within `|d| / 2` of `d · q`, and `bsums` are the
    /// group sums.
    #[test]
    fn q8k_quantizer_definition(
        nb in 1usize..=4,
        exp in -6i32..=3,
        seed in 1u32..u32::MAX,
    ) {
        let mut rng = Rng(seed);
        let x = random_acts(1, nb * 256, exp, &mut rng);
        let mut b = vec![BlockQ8K::default(); nb];
        quant::quantize_row_q8_k(&x, &mut b);
        for (blk, xb) in b.iter().zip(x.chunks_exact(256)) {
            let (i_max, _) = xb.iter().enumerate()
                .fold((0, 0.0f32), |(bi, bm), (i, &v)| if v.abs() > bm { (i, v.abs()) } else { (bi, bm) });
            if xb[i_max] == 0.0 {
                prop_assert!(blk.d == 0.0 && blk.qs.iter().all(|&q| q == 0));
                continue;
            }
            prop_assert_eq!(blk.qs[i_max], -127);
            let d = f64::from(blk.d);
            prop_assert!((d - f64::from(-xb[i_max]) / 127.0).abs() <= 1e-6 * d.abs());
            for (&q, &v) in blk.qs.iter().zip(xb) {
                let err = (f64::from(v) - d * f64::from(q)).abs();
                prop_assert!(err <= d.abs() * 0.5 * (1.0 + 1e-5), "{v} -> {q} (d {d})");
            }
            for (g, &s) in blk.bsums.iter().enumerate() {
                let want: i32 = blk.qs[16 * g..16 * g + 16].iter().map(|&q| i32::from(q)).sum();
                prop_assert_eq!(i32::from(s), want);
            }
        }
    }

    /// Each dot product against the exact dot of the dequantized weights with the original
    /// activations: the only error is the activation rounding, at most half an activation
    /// step per element (`Σ_i |w_i| · |d_block(i)| / 2`), plus f32 summation.
    #[test]
    fn dot_within_activation_rounding(
        ti in 0usize..TYPES.len(),
        nb_i in 1usize..=8,
        exp in -3i32..=2,
        seed in 1u32..u32::MAX,
    ) {
        let ty = TYPES[ti];
        let bl = ty.block_len();
        let nb = if bl == 256 { 1 + nb_i % 3 } else { nb_i };
        let cols = nb * bl;
        let mut rng = Rng(seed);
        let wb = random_weights(ty, 1, nb, -2, &mut rng);
        let x = random_acts(1, cols, exp, &mut rng);
        let wd = dequant(ty, &wb, cols);
        let exact: f64 = wd.iter().zip(&x).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum();
        // Activation step of each element's block (Q8_0/Q8_1: amax/127 per 32, rounded to
        // f16; Q8_K: amax/127 per 256).
        let abl = if bl == 256 { 256 } else { 32 };
        let mut bound = 0.0f64;
        for (wb_, xb) in wd.chunks(abl).zip(x.chunks(abl)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            // Q8_0/Q8_1 store `d` as f16: each of up to 127 steps is off by that rounding.
            let d_err = if abl == 32 { (f16::from_f32(d).to_f32() - d).abs() } else { 0.0 };
            let per = f64::from(d) * 0.5 * (1.0 + 1e-5) + f64::from(d_err) * 127.0;
            bound += wb_.iter().map(|v| f64::from(v.abs())).sum::<f64>() * per;
        }
        // Scale of the f32 rounding: the scale and min (or offset) parts of each weight
        // separately, since they can cancel.
        let mag = rounding_mag(ty, &wb, &x);
        // Q8_1's stored `s = f16(d · Σq)` rounds once more, times the Q5_1 min.
        let s_term = if ty == GgmlType::Q5_1 {
            (0..nb)
                .map(|b| {
                    let m = f16::from_le_bytes([wb[b * 24 + 2], wb[b * 24 + 3]]).to_f32();
                    let xs: f64 = x[32 * b..32 * b + 32].iter().map(|v| f64::from(v.abs())).sum();
                    f64::from(m.abs()) * 2.0 * xs * (2.0f64).powi(-10)
                })
                .sum()
        } else {
            0.0
        };
        let tol = bound * 1.0001 + 1e-5 * mag + s_term + 1e-30;
        let check = |isa: Isa, vnni_off: bool| -> Result<(), TestCaseError> {
            let got = with_flavor(vnni_off, || match ty {
                GgmlType::Q5_0 => {
                    let mut a = vec![BlockQ8_0::default(); cols / 32];
                    quant::quantize_row_q8_0(isa, &x, &mut a);
                    quant::vec_dot(isa, ty, &wb, ActRow::Q8_0(&a))
                }
                GgmlType::Q5_1 => {
                    let mut a = vec![BlockQ8_1::default(); cols / 32];
                    quant::quantize_row_q8_1(isa, &x, &mut a);
                    quant::vec_dot(isa, ty, &wb, ActRow::Q8_1(&a))
                }
                _ => {
                    let mut a = vec![BlockQ8K::default(); cols / 256];
                    quant::quantize_row_q8_k(&x, &mut a);
                    quant::vec_dot(isa, ty, &wb, ActRow::Q8K(&a))
                }
            });
            prop_assert!(
                (f64::from(got) - exact).abs() <= tol,
                "{isa} {ty} nb {nb}: {got} vs exact {exact} (bound {tol:e})"
            );
            Ok(())
        };
        check(Isa::Scalar, false)?;
        for (isa, vnni_off) in tiers() {
            check(isa, vnni_off)?;
        }
    }
}
