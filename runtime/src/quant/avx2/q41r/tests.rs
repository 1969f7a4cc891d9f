//! The banded Q4_1 layout against the ggml rows: the bytes where the layout says, the scalar
//! reference's bits from the decode, the same unpacked blocks for the prefill tiles.

use super::*;
use crate::quant::avx2::tests::{assert_avx2, assert_same_unpacked};
use crate::quant::blocks::QK;
use crate::quant::{Isa, quantize_row_q8_1, scalar};
use half::f16;

/// `n` ggml Q4_1 rows of `nb` blocks: random quants, finite scales between about 0.004 and
/// 0.06 and mins between about −0.1 and 0.1; with `fill`, every quant byte is `fill` instead.
fn ggml_rows(nb: usize, n: usize, seed: u64, fill: Option<u8>) -> Vec<u8> {
    let mut w = crate::quant::avx2::tests::ggml_rows(crate::GgmlType::Q4_1, nb, n, seed, fill);
    for b in 0..n * nb {
        let m = f16::from_f32(-0.1 + 0.2 * ((b * 11) % 31) as f32 / 30.0);
        w[b * GGML_BLOCK + 2..b * GGML_BLOCK + 4].copy_from_slice(&m.to_le_bytes());
    }
    w
}

/// A Q8_1 activation row of `nb` random blocks.
fn acts(nb: usize, seed: u64) -> Vec<BlockQ8_1> {
    let mut rng = pocketperf_testkit::gguf::Rng::new(seed);
    let x: Vec<f32> = (0..nb * QK)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    let mut a = vec![BlockQ8_1::default(); nb];
    quantize_row_q8_1(Isa::Scalar, &x, &mut a);
    a
}

/// The `n` ggml rows `w` of `nb` blocks repacked in one run.
fn repacked(w: &[u8], nb: usize, n: usize) -> Vec<u8> {
    let mut out = vec![0xAAu8; w.len()];
    repack_rows(w, nb, 0, n, &mut out);
    out
}

/// Rows `r0..r1` of the ggml rows `w` through the decode of their repacked copy, against the
/// scalar reference bit for bit; the rows outside the range stay untouched.
fn check(w: &[u8], nb: usize, n: usize, a: &[BlockQ8_1], (r0, r1): (usize, usize), what: &str) {
    let rp = repacked(w, nb, n);
    let rb = nb * GGML_BLOCK;
    let mut got = vec![f32::NAN; n];
    // SAFETY: AVX2/FMA/F16C asserted by the callers; rp holds the bands of n rows.
    unsafe { rows(&rp, rb, band_rows(n), r0, r1, a, |r, v| got[r] = v) };
    for (r, g) in got.iter().enumerate() {
        if !(r0..r1).contains(&r) {
            assert!(g.is_nan(), "{what}: row {r} outside {r0}..{r1} was written");
            continue;
        }
        let want = scalar::vec_dot_q4_1_q8_1(&w[r * rb..(r + 1) * rb], a);
        assert_eq!(
            g.to_bits(),
            want.to_bits(),
            "{what}, row {r}: {g} vs {want}"
        );
    }
}

/// Every element, scale and min of a band read back where the module's layout puts it (a
/// reader written from the layout's description), and the rows past the last band copied.
#[test]
fn repack_places_quants_scales_and_mins_as_documented() {
    let (nb, n) = (3, 19);
    let w = ggml_rows(nb, n, 5, None);
    let rb = nb * GGML_BLOCK;
    let rp = repacked(&w, nb, n);
    for r in 0..16 {
        let band = &rp[(r / 8) * 8 * rb..];
        let k = r % 8;
        for i in 0..nb {
            let g = &w[r * rb + i * GGML_BLOCK..];
            let b = &band[i * BLOCK..(i + 1) * BLOCK];
            assert_eq!(
                b[128 + 2 * k..130 + 2 * k],
                g[..2],
                "row {r} block {i} scale"
            );
            assert_eq!(
                b[144 + 2 * k..146 + 2 * k],
                g[2..4],
                "row {r} block {i} min"
            );
            let chunk = &b[32 * (k % 4)..32 * (k % 4) + 32];
            let half = &chunk[16 * (k / 4)..16 * (k / 4) + 16];
            for j in 0..QK {
                let want = if j < 16 {
                    g[4 + j] & 15
                } else {
                    g[4 + j - 16] >> 4
                };
                let got = if j < 16 {
                    half[j] & 15
                } else {
                    half[j - 16] >> 4
                };
                assert_eq!(got, want, "row {r} block {i} element {j}");
            }
        }
    }
    assert_eq!(rp[16 * rb..], w[16 * rb..], "the three rows past the bands");
}

/// A run that starts at a later band writes the bytes a whole-matrix run writes there.
#[test]
fn runs_write_the_bytes_of_one_run() {
    let (nb, n) = (5, 27);
    let w = ggml_rows(nb, n, 9, None);
    let rb = nb * GGML_BLOCK;
    let whole = repacked(&w, nb, n);
    let mut runs = vec![0u8; w.len()];
    for (first, last) in [(0, 8), (8, 24), (24, 27)] {
        repack_rows(
            &w[first * rb..last * rb],
            nb,
            first,
            n,
            &mut runs[first * rb..last * rb],
        );
    }
    assert_eq!(runs, whole);
}

#[test]
fn decode_rows_are_the_scalar_bits() {
    assert_avx2();
    // One block, short and model widths, the widest row taken; ranges of whole bands and
    // ranges that start and end inside a band.
    for (nb, n, range) in [
        (1usize, 8usize, (0usize, 8usize)),
        (3, 16, (3, 13)),
        (18, 24, (0, 24)),
        (48, 24, (4, 20)),
        (48, 27, (8, 16)),
        (152, 16, (1, 15)),
        (MAX_BLOCKS, 8, (2, 7)),
    ] {
        let a = acts(nb, nb as u64);
        let w = ggml_rows(nb, n, 7 + nb as u64, None);
        check(&w, nb, n, &a, range, &format!("{nb} blocks"));
    }
}

/// The extreme block sums: quants all 15 or all 0 against activation blocks of all +127 and
/// all −128 (each i16 lane of the pair adds at its largest magnitude, 30 720).
#[test]
fn decode_rows_hold_the_extreme_sums() {
    assert_avx2();
    let nb = 12;
    let a: Vec<BlockQ8_1> = (0..nb)
        .map(|b| {
            let q: i8 = if b % 3 == 0 { -128 } else { 127 };
            BlockQ8_1 {
                d: f16::from_f32(0.01),
                s: f16::from_f32(0.01 * 32.0 * f32::from(q)),
                qs: [q; QK],
            }
        })
        .collect();
    for fill in [0xFFu8, 0x00] {
        let w = ggml_rows(nb, 8, 1, Some(fill));
        check(&w, nb, 8, &a, (0, 8), &format!("bytes {fill:#04x}"));
    }
}

/// A band unpacked for the prefill tiles holds what its eight ggml rows unpack to, from any
/// first block (runs of 64 blocks, and a run that starts inside the row).
#[test]
fn unpacked_band_matches_the_ggml_rows() {
    assert_avx2();
    let nb = 71;
    let rb = nb * GGML_BLOCK;
    let w = ggml_rows(nb, ROWS8, 3, None);
    let rp = repacked(&w, nb, ROWS8);
    let g: [&[u8]; ROWS8] = std::array::from_fn(|r| &w[r * rb..(r + 1) * rb]);
    for (i0, n) in [(0usize, 64usize), (64, 7), (5, 30)] {
        let (mut want, mut got) = (Unpacked8::new(), Unpacked8::new());
        // SAFETY: AVX2 asserted; every row holds nb blocks, the band all of them.
        unsafe {
            want.unpack(crate::GgmlType::Q4_1, &g, i0, n);
            got.unpack_q41r(&rp, i0, n);
        }
        assert_same_unpacked(&got, &want, n, true);
    }
}
