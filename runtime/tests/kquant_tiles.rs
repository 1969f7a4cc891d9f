//! The K-quant prefill tiles of the SIMD tiers (on AVX-512: four Q4_K or Q6_K weight rows ×
//! four Q8_K activation rows per tile, with and without VNNI) against the scalar tier, bit
//! for bit, through `quant::matmul_rows`: weight-row ranges that do not start at 0 and leave
//! one to three rows outside the four-row tiles, activation row counts that leave one to
//! three rows outside the four-row quads, give from one to sixteen quads per decoded weight
//! block and pass the 64-row passes of the tile loop, one to five blocks per row, writing and
//! accumulating outputs. Activation blocks are
//! all zero, at the largest quant magnitude (every Q8_K quant ±127), tiny or ordinary;
//! one weight row has every quant, scale and min at its largest magnitude.

mod common;

use common::{Rng, with_flavor};
use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::quant::{self, Isa, OutRows, QuantizedActs, WeightMatrix};

/// `rows` rows of `nb` random blocks of `ty` (Q4_K or Q6_K) with finite f16 scales from
/// 10^-3 to 10^1; row 2 (when present) at the largest quants, scales and mins.
fn weights(ty: GgmlType, rows: usize, nb: usize, rng: &mut Rng) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut w: Vec<u8> = (0..rows * nb * bb).map(|_| rng.next() as u8).collect();
    let halves: &[usize] = if ty == GgmlType::Q4K { &[0, 2] } else { &[208] };
    for (b, blk) in w.chunks_exact_mut(bb).enumerate() {
        if b / nb == 2 {
            blk.fill(0xFF);
            if ty == GgmlType::Q6K {
                // The i8 group scales at their largest magnitude, -128.
                blk[192..208].fill(0x80);
            }
        }
        for &o in halves {
            let h = f16::from_f32(rng.unit() * 10f32.powi((b % 5) as i32 - 3));
            blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    w
}

/// `n` rows of `nb` blocks: per (row, block) all zero, ±3·10^4 (every quant ±127, group sums
/// ±2032 or mixed), tiny (10^-6) or ordinary values with an outlier.
fn acts(n: usize, nb: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::with_capacity(n * nb * 256);
    for a in 0..n {
        for b in 0..nb {
            let kind = (3 * a + b) % 5;
            for e in 0..256 {
                x.push(match kind {
                    0 => 0.0,
                    1 => 3.0e4,
                    2 => {
                        if (e * 7 + a) % 3 == 0 {
                            -3.0e4
                        } else {
                            3.0e4
                        }
                    }
                    3 => rng.unit() * 1e-6,
                    _ if e == (a * 31) % 256 => 50.0,
                    _ => rng.unit(),
                });
            }
        }
    }
    x
}

/// Rows `r0..r1` of `w · xᵀ` for `n` activation rows through `matmul_rows` on `isa`, into
/// an output that starts at `init` (kept and added to with `accumulate`).
#[allow(clippy::too_many_arguments)]
fn product(
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &[f32],
    n: usize,
    r0: usize,
    r1: usize,
    init: &[f32],
    accumulate: bool,
) -> Vec<f32> {
    let mut qa = QuantizedActs::new(n, w.cols);
    qa.quantize_for(isa, w.ty, x, n, w.cols);
    let mut y = init.to_vec();
    let out = OutRows::new(&mut y, n, w.rows, w.rows, accumulate);
    // SAFETY: one thread writes the whole output, which outlives the call.
    unsafe { quant::matmul_rows(isa, w, &qa, n, r0, r1, out) };
    y
}

#[test]
fn k_tiles_match_scalar_bits() {
    let tiers = common::simd_tiers();
    assert!(!tiers.is_empty(), "no SIMD tier on this machine");
    let mut rng = Rng(0x9E37_79B9);
    // (weight rows, first row, end row): whole tiles, one to three rows left over, ranges
    // that start inside the matrix.
    let ranges = [(4, 0, 4), (7, 0, 7), (13, 1, 13), (9, 3, 9), (6, 2, 5)];
    let mut compared = 0usize;
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        for &(rows, r0, r1) in &ranges {
            for n in [4, 5, 11, 13, 30, 70, 134] {
                for nb in [1, 3, 5] {
                    if nb == 5 && n >= 70 {
                        continue; // enough columns elsewhere; keeps the test short
                    }
                    let cols = nb * 256;
                    let wb = weights(ty, rows, nb, &mut rng);
                    let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
                    let x = acts(n, nb, &mut rng);
                    let init: Vec<f32> = (0..n * rows).map(|i| (i % 7) as f32 - 3.5).collect();
                    for accumulate in [false, true] {
                        let want = product(Isa::Scalar, &w, &x, n, r0, r1, &init, accumulate);
                        for &(isa, vnni_off) in &tiers {
                            let got = with_flavor(vnni_off, || {
                                product(isa, &w, &x, n, r0, r1, &init, accumulate)
                            });
                            for a in 0..n {
                                for r in 0..rows {
                                    let (g, e) = (got[a * rows + r], want[a * rows + r]);
                                    assert_eq!(
                                        g.to_bits(),
                                        e.to_bits(),
                                        "{isa} (vnni off: {vnni_off}) {ty} rows {r0}..{r1} \
                                         of {rows}, n {n}, nb {nb}, accumulate {accumulate}: \
                                         act {a} row {r}: {g} vs {e}"
                                    );
                                }
                            }
                            compared += 1;
                        }
                        // Rows outside r0..r1 keep the initial values on the scalar tier too.
                        for a in 0..n {
                            for r in (0..r0).chain(r1..rows) {
                                assert_eq!(want[a * rows + r], init[a * rows + r]);
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(compared, 2 * ranges.len() * 19 * 2 * tiers.len());
}
