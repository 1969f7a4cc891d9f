use super::*;
use crate::quant::kquants;

/// Blocks the scalar quantizer must round exactly at halves: with the largest magnitude
/// at -127 the scale is 1, so `k + 0.5` is a tie the reference rounds to even; a second
/// block holds +M first and -M later (the first occurrence gives the sign), a third is
/// all zeros.
#[test]
fn quantize_q8k_is_the_scalar_quantizer_bit_for_bit() {
    crate::quant::avx2::tests::assert_avx2();
    let mut x = vec![0.0f32; 4 * 256];
    for (i, v) in x[..256].iter_mut().enumerate() {
        *v = ((i % 250) as f32 - 125.0) + 0.5;
    }
    x[200] = -127.0;
    for (i, v) in x[256..512].iter_mut().enumerate() {
        *v = ((i * 37 % 101) as f32 - 50.0) * 0.031;
    }
    x[256 + 9] = 4.0;
    x[256 + 250] = -4.0;
    for (i, v) in x[768..].iter_mut().enumerate() {
        *v = ((i * 7919 % 1000) as f32 - 500.0) * 1.7e-3;
    }
    let mut want = vec![BlockQ8K::default(); 4];
    kquants::quantize_q8k(&x, &mut want);
    let mut got = vec![BlockQ8K::default(); 4];
    // SAFETY: AVX2, FMA and F16C asserted above; x holds 256 values per output block.
    unsafe { quantize_q8k(&x, &mut got) };
    assert_eq!(want[0].qs[127], 2, "2.5 rounds to even");
    assert_eq!(want[0].qs[126], 2, "1.5 rounds to even");
    assert_eq!(want[0].qs[125], 0, "0.5 rounds to even");
    assert_eq!(want[1].qs[9], -127, "the first of +4 and -4 maps to -127");
    assert_eq!(want[2].d, 0.0);
    for (b, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.d.to_bits(), w.d.to_bits(), "block {b} d");
        assert_eq!(g.qs, w.qs, "block {b} qs");
        assert_eq!(g.bsums, w.bsums, "block {b} bsums");
    }
}
