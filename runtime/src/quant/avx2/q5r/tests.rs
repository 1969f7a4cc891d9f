//! The repacked Q5_0 layout against the ggml rows: the same bytes from both repackers, the
//! scalar reference's bits from the decode, the same unpacked blocks for the prefill tiles.

use super::*;
use crate::quant::avx2::tests::{assert_avx2, assert_same_unpacked};
use crate::quant::blocks::QK;
use crate::quant::{Isa, quantize_row_q8_0, scalar};
use half::f16;

/// `n` ggml Q5_0 rows of `nb` blocks: random quants and fifth bits, scales finite between
/// about 0.004 and 0.06; with `fill`, every quant and fifth-bit byte is `fill` instead.
fn ggml_rows(nb: usize, n: usize, seed: u64, fill: Option<u8>) -> Vec<u8> {
    crate::quant::avx2::tests::ggml_rows(crate::GgmlType::Q5_0, nb, n, seed, fill)
}

/// Each of the `n` rows of `w` (ggml, `nb` blocks) through the reference repacker.
fn repacked(w: &[u8], nb: usize, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n * row_bytes(nb)];
    for (src, dst) in w
        .chunks_exact(nb * 22)
        .zip(out.chunks_exact_mut(row_bytes(nb)))
    {
        repack_row(src, nb, dst);
    }
    out
}

/// A Q8_0 activation row of `nb` random blocks and its entries.
fn acts(nb: usize, seed: u64) -> (Vec<BlockQ8_0>, Vec<Q8Aux>) {
    let mut rng = pocketperf_testkit::gguf::Rng::new(seed);
    let x: Vec<f32> = (0..nb * QK)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    let mut a = vec![BlockQ8_0::default(); nb];
    quantize_row_q8_0(Isa::Scalar, &x, &mut a);
    let aux = a.iter().map(Q8Aux::of).collect();
    (a, aux)
}

/// Rows `1..n` of the ggml rows `w` through the decode of their repacked copy, against the
/// scalar reference bit for bit; row 0 is outside the range and stays untouched.
fn check(w: &[u8], nb: usize, n: usize, a: &[BlockQ8_0], aux: &[Q8Aux], what: &str) {
    let rp = repacked(w, nb, n);
    let mut got = vec![f32::NAN; n];
    // SAFETY: AVX2/FMA/F16C asserted by the callers; rp holds n repacked rows.
    unsafe { rows(&rp, row_bytes(nb), 1, n, a, aux, |r, v| got[r] = v) };
    for (r, g) in got.iter().enumerate().skip(1) {
        let want = scalar::vec_dot_q5_0_q8_0(&w[r * nb * 22..(r + 1) * nb * 22], a);
        assert_eq!(
            g.to_bits(),
            want.to_bits(),
            "{what}, row {r}: {g} vs {want}"
        );
    }
    assert!(got[0].is_nan(), "{what}: row 0 was written");
}

#[test]
fn simd_repack_writes_the_reference_bytes() {
    assert_avx2();
    for nb in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 28, 152] {
        let w = ggml_rows(nb, 3, 40 + nb as u64, None);
        let want = repacked(&w, nb, 3);
        let mut got = vec![0xAAu8; want.len()];
        for (src, dst) in w
            .chunks_exact(nb * 22)
            .zip(got.chunks_exact_mut(row_bytes(nb)))
        {
            // SAFETY: AVX2 asserted.
            unsafe { repack_row_simd(src, nb, dst) };
        }
        assert_eq!(got, want, "{nb} blocks");
    }
}

/// The layout's bits where they can be checked by hand: block 3's element 17 set alone lands
/// in bit h_bit(3, 1) = 7 of fifth-bit byte 1, block 1's scale in the third slot.
#[test]
fn repack_places_bits_and_scales_as_documented() {
    let mut w = vec![0u8; 4 * 22];
    w[3 * 22 + 2..3 * 22 + 6].copy_from_slice(&(1u32 << 17).to_le_bytes());
    w[22..24].copy_from_slice(&[0x34, 0x12]);
    w[2 * 22 + 6] = 0xA5;
    let mut r = vec![0u8; GROUP];
    repack_row(&w, 4, &mut r);
    let mut want = vec![0u8; GROUP];
    want[64 + 1] = 0x80;
    want[80 + 4..80 + 6].copy_from_slice(&[0x34, 0x12]);
    want[32] = 0xA5;
    assert_eq!(r, want);
}

#[test]
fn decode_rows_are_the_scalar_bits() {
    assert_avx2();
    // Whole pairs of groups, a lone last group, partial groups, the widest row taken.
    for (nb, n) in [
        (1usize, 3usize),
        (3, 4),
        (4, 6),
        (5, 5),
        (8, 3),
        (9, 4),
        (20, 5),
        (28, 9),
        (152, 4),
        (MAX_BLOCKS, 3),
    ] {
        let (a, aux) = acts(nb, nb as u64);
        let w = ggml_rows(nb, n, 7 + nb as u64, None);
        check(&w, nb, n, &a, &aux, &format!("{nb} blocks"));
    }
}

/// The extreme block sums: quants all 31 or all 0 against activation blocks of all +127 and
/// all −127 (each i16 lane of the chunk sums at its largest magnitude).
#[test]
fn decode_rows_hold_the_extreme_sums() {
    assert_avx2();
    let nb = 12;
    let a: Vec<BlockQ8_0> = (0..nb)
        .map(|b| BlockQ8_0 {
            d: f16::from_f32(0.01),
            qs: [if b % 3 == 0 { -127 } else { 127 }; QK],
        })
        .collect();
    let aux: Vec<Q8Aux> = a.iter().map(Q8Aux::of).collect();
    for fill in [0xFFu8, 0x00] {
        let w = ggml_rows(nb, 3, 1, Some(fill));
        check(&w, nb, 3, &a, &aux, &format!("bytes {fill:#04x}"));
    }
}

/// Eight repacked rows unpacked for the prefill tiles hold what the ggml rows unpack to, from
/// any first block (runs start inside a group).
#[test]
fn unpacked_repacked_rows_match_the_ggml_rows() {
    assert_avx2();
    let nb = 71;
    let w = ggml_rows(nb, ROWS8, 3, None);
    let rp = repacked(&w, nb, ROWS8);
    let g: [&[u8]; ROWS8] = std::array::from_fn(|r| &w[r * nb * 22..(r + 1) * nb * 22]);
    let p: [&[u8]; ROWS8] =
        std::array::from_fn(|r| &rp[r * row_bytes(nb)..(r + 1) * row_bytes(nb)]);
    for (i0, n) in [(0usize, 64usize), (64, 7), (5, 30)] {
        let (mut want, mut got) = (Unpacked8::new(), Unpacked8::new());
        // SAFETY: AVX2 asserted; every row holds nb blocks.
        unsafe {
            want.unpack(crate::GgmlType::Q5_0, &g, i0, n);
            got.unpack_q5r(&p, i0, n);
        }
        assert_same_unpacked(&got, &want, n, false);
    }
}
