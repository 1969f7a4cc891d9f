use super::*;

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Units in the last place between `y` and the exact `t` (at `t`'s binade).
fn ulps(y: f32, t: f64) -> f64 {
    let tf = t as f32;
    let ulp = f64::from(f32::from_bits(tf.to_bits() + 1) - tf);
    (f64::from(y) - t).abs() / ulp
}

#[test]
fn exp_is_within_two_ulp_and_handles_the_ends() {
    let mut worst = 0.0f64;
    // Every 97th float of [-87, 88.7] on both sides of zero.
    for (a, b) in [(-0.0f32, -87.0f32), (0.0, 88.7)] {
        for bits in (a.to_bits()..=b.to_bits()).step_by(97) {
            let x = f32::from_bits(bits);
            let e = ulps(exp(x), f64::from(x).exp());
            assert!(e <= 2.0, "exp({x:e}) = {:e}: {e} ulp", exp(x));
            worst = worst.max(e);
        }
    }
    assert!(worst > 0.5, "not a rounding-free formula: worst {worst}");
    assert_eq!(exp(0.0), 1.0);
    assert_eq!(exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp(-87.5), 0.0);
    assert_eq!(exp(89.0), f32::INFINITY);
    assert_eq!(exp(f32::INFINITY), f32::INFINITY);
    assert!(exp(f32::NAN).is_nan());
    // The top of the range (2^128 built in two steps) stays finite below ln(f32::MAX).
    assert!(exp(88.7).is_finite() && exp(88.7) > 3.0e38);
    assert!((exp(-86.9) / f64::from(-86.9f32).exp() as f32 - 1.0).abs() < 1e-6);
}

/// Whether `isa`'s score chains use fused multiply-adds (the AVX-512 tier's do).
fn fused(isa: Isa) -> bool {
    fused_where(isa, false)
}

/// Whether `isa`'s Q8_0 kernels fuse the multiply-add by the scales (the AVX-512 VNNI
/// tier's do).
fn fused_q8(isa: Isa) -> bool {
    fused_where(isa, true)
}

/// Whether `isa` resolves to the AVX-512 tier (with VNNI when `vnni`).
fn fused_where(isa: Isa, vnni: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    return matches!(
        crate::quant::resolve(isa),
        crate::quant::Tier::Avx512 { vnni: v, .. } if v || !vnni
    );
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, vnni);
        false
    }
}

/// Every score is one chain over the dimensions in order whatever the query count (1 to
/// 13: one or two passes of up to 12) and slot count (whole tiles, a partial last tile):
/// fused multiply-adds on the AVX-512 tier, separate multiply and add on the others,
/// times the scale; compared bit for bit with that chain written out here.
#[test]
fn each_score_is_one_chain_whatever_the_grouping() {
    let best = crate::quant::detect_best();
    let (hd, ld) = (64, 144);
    let q = data(13 * hd, 11);
    let keys: Vec<f16> = data(144 * hd, 12)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    for (isa, nq) in [best, Isa::Avx2]
        .into_iter()
        .flat_map(|isa| (1..=13).map(move |nq| (isa, nq)))
    {
        let fused = fused(isa);
        for n in [1, 15, 16, 17, 31, 32, 48, 64, 65, 100, 128, 144] {
            let mut out = vec![f32::NAN; nq * ld];
            scores_f16(isa, &q, nq, hd, &keys, n, 0.125, &mut out, ld);
            for h in 0..nq {
                for s in 0..n {
                    let mut acc = 0.0f32;
                    for d in 0..hd {
                        let (a, k) = (q[h * hd + d], keys[key_index(hd, s, d)].to_f32());
                        acc = if fused {
                            a.mul_add(k, acc)
                        } else {
                            acc + a * k
                        };
                    }
                    let want = acc * 0.125;
                    let got = out[h * ld + s];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{isa:?}: {nq} queries, {n} slots: head {h} slot {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn simd_kernels_match_scalar() {
    let best = crate::quant::detect_best();
    let (hd, n, ldk) = (64, 37, 48);
    let q = data(13 * hd, 1);
    // Keys in whole tiles (48 slots' room for 37).
    let kh: Vec<f16> = data(48 * hd, 4).iter().map(|&x| f16::from_f32(x)).collect();
    let vh: Vec<f16> = data(n * hd, 5).iter().map(|&x| f16::from_f32(x)).collect();
    for nq in [1, 3, 12, 13] {
        let mut sa = vec![0.0f32; nq * ldk];
        let mut sb = vec![0.0f32; nq * ldk];
        scores_f16(Isa::Scalar, &q, nq, hd, &kh, n, 0.125, &mut sa, ldk);
        scores_f16(best, &q, nq, hd, &kh, n, 0.125, &mut sb, ldk);
        for h in 0..nq {
            for s in 0..n {
                let (x, y) = (sa[h * ldk + s], sb[h * ldk + s]);
                assert!((x - y).abs() < 1e-4, "f16 score {nq} {h} {s}: {x} vs {y}");
            }
        }
        let mut oa = vec![0.5f32; nq * hd];
        let mut ob = vec![0.5f32; nq * hd];
        accum_f16(Isa::Scalar, &sa, ldk, nq, hd, &vh, n, &mut oa);
        accum_f16(best, &sa, ldk, nq, hd, &vh, n, &mut ob);
        for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
            assert!((x - y).abs() < 1e-4, "f16 out {nq} {i}: {x} vs {y}");
        }
    }
    // Each score is the same FMA chain whatever the slot count and query count.
    let mut full = vec![0.0f32; 12 * ldk];
    let mut part = vec![0.0f32; 3 * ldk];
    scores_f16(best, &q, 12, hd, &kh, n, 0.125, &mut full, ldk);
    scores_f16(best, &q, 3, hd, &kh, 20, 0.125, &mut part, ldk);
    for h in 0..3 {
        assert_eq!(full[h * ldk..h * ldk + 20], part[h * ldk..h * ldk + 20]);
    }
    // Head size 256 (Gemma): the value sums run in two column passes.
    let hd2 = 256;
    let q2 = data(4 * hd2, 6);
    let kh2: Vec<f16> = data(48 * hd2, 7)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let vh2: Vec<f16> = data(n * hd2, 8).iter().map(|&x| f16::from_f32(x)).collect();
    let mut s2 = vec![0.0f32; 5 * ldk];
    scores_f16(Isa::Scalar, &q2, 4, hd2, &kh2, n, 0.0625, &mut s2, ldk);
    let mut oa = vec![0.25f32; 5 * hd2];
    let mut ob = oa.clone();
    accum_f16(Isa::Scalar, &s2, ldk, 4, hd2, &vh2, n, &mut oa);
    accum_f16(best, &s2, ldk, 4, hd2, &vh2, n, &mut ob);
    for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
        assert!((x - y).abs() < 1e-4, "f16 out hd 256 {i}: {x} vs {y}");
    }
    // Scaling and the extremes of positions: the scalar tier's results, whatever the tail.
    let pos: Vec<u32> = (0..37u32)
        .map(|i| i.wrapping_mul(2654435761) >> 7)
        .collect();
    for len in [0, 1, 15, 16, 17, 37] {
        let want = pos[..len]
            .iter()
            .fold((u32::MAX, 0), |(a, b), &p| (a.min(p), b.max(p)));
        assert_eq!(min_max_u32(Isa::Scalar, &pos[..len]), want, "len {len}");
        assert_eq!(min_max_u32(best, &pos[..len]), want, "len {len}");
        let mut xs = data(len, 10);
        let mut ys = xs.clone();
        scale_f32(Isa::Scalar, &mut xs, 0.3);
        scale_f32(best, &mut ys, 0.3);
        assert_eq!(xs, ys, "len {len}");
        assert!(xs.iter().zip(data(len, 10)).all(|(a, b)| *a == b * 0.3));
    }
    assert_eq!(min_max_u32(best, &[7, u32::MAX, 0, 9]), (0, u32::MAX));
    // The maximum is exact on every tier, whatever the length and tail.
    let a: Vec<f32> = data(n, 9).iter().map(|x| x * 30.0).collect();
    for len in [0, 1, 15, 16, 17, 37] {
        let want = a[..len].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max_f32(Isa::Scalar, &a[..len]), want, "len {len}");
        assert_eq!(max_f32(best, &a[..len]), want, "len {len}");
    }
    let mut ea = a.clone();
    let mut eb = a.clone();
    let sa = exp_shifted(Isa::Scalar, &mut ea, 0.5);
    let sb = exp_shifted(best, &mut eb, 0.5);
    assert!((sa - sb).abs() < 1e-5 * sa);
    for (x, y) in ea.iter().zip(&eb) {
        assert!((x - y).abs() <= 2e-7 * x.abs().max(1e-30), "{x} vs {y}");
    }
}

/// The AVX2 tier's f16 scores and value sums are the scalar tier's bits: the same chains (a
/// multiply and an add per dimension or slot, in order; a slot of weight 0 skipped, so a
/// −0 output stays −0), at head sizes 64, 40 (a partial pass of columns), 256 and 36 (not a
/// multiple of 8: the scalar code), 1–13 heads (key passes of four, value passes of three) and partial tiles;
/// so are its softmax steps.
#[test]
fn avx2_f16_kernels_are_the_scalar_bits() {
    for hd in [64, 40, 256, 36] {
        let q = data(13 * hd, 31);
        let kh: Vec<f16> = data(48 * hd, 32)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let vh: Vec<f16> = data(48 * hd, 33)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let ld = 48;
        for nq in [1, 2, 3, 4, 5, 7, 13] {
            for n in [1, 7, 15, 16, 17, 37, 48] {
                let mut sa = vec![f32::NAN; nq * ld];
                let mut sb = sa.clone();
                scores_f16(Isa::Scalar, &q, nq, hd, &kh, n, 0.125, &mut sa, ld);
                scores_f16(Isa::Avx2, &q, nq, hd, &kh, n, 0.125, &mut sb, ld);
                for h in 0..nq {
                    for s in 0..n {
                        let (x, y) = (sa[h * ld + s], sb[h * ld + s]);
                        assert_eq!(x.to_bits(), y.to_bits(), "hd {hd} {nq}×{n}: {h} {s}");
                    }
                }
                // Weights with exact zeros; outputs starting at ±0 and other values.
                let p: Vec<f32> = (0..nq * ld)
                    .map(|i| {
                        if i % 5 == 2 {
                            0.0
                        } else {
                            (i % 11) as f32 / 16.0
                        }
                    })
                    .collect();
                let init: Vec<f32> = (0..nq * hd)
                    .map(|i| [-0.0, 0.0, 0.75, -1.5][i % 4])
                    .collect();
                let (mut oa, mut ob) = (init.clone(), init.clone());
                accum_f16(Isa::Scalar, &p, ld, nq, hd, &vh, n, &mut oa);
                accum_f16(Isa::Avx2, &p, ld, nq, hd, &vh, n, &mut ob);
                for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "hd {hd} {nq}×{n}: out {i}");
                }
                // No zero weight (the AVX2 passes without a test per slot), one head with a
                // zero in its last slot (a pass with the test beside passes without).
                let mut p: Vec<f32> = (0..nq * ld).map(|i| (i % 11 + 1) as f32 / 16.0).collect();
                if nq > 2 && n > 0 {
                    p[2 * ld + n - 1] = 0.0;
                }
                let (mut oa, mut ob) = (init.clone(), init);
                accum_f16(Isa::Scalar, &p, ld, nq, hd, &vh, n, &mut oa);
                accum_f16(Isa::Avx2, &p, ld, nq, hd, &vh, n, &mut ob);
                for (i, (x, y)) in oa.iter().zip(&ob).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "hd {hd} {nq}×{n}, dense: out {i}");
                }
            }
        }
    }
    // The softmax's steps: the same maxima, exponentials, sums and scaled values, whatever
    // the tail, with −∞ (masked slots), the exponential's range ends and NaN among them.
    let mut x = data(77, 34);
    x.iter_mut().for_each(|v| *v *= 40.0);
    x[3] = f32::NEG_INFINITY;
    x[9] = -300.0;
    x[12] = 95.0;
    x[20] = f32::NAN;
    for len in [0, 1, 7, 8, 9, 16, 20, 21, 77] {
        let row = &x[..len];
        let want = max_f32(Isa::Scalar, row);
        let got = max_f32(Isa::Avx2, row);
        assert!(
            got == want || (got.is_nan() && want.is_nan()),
            "max, len {len}"
        );
        for shift in [0.5, 60.0] {
            let (mut ea, mut eb) = (row.to_vec(), row.to_vec());
            let sa = exp_shifted(Isa::Scalar, &mut ea, shift);
            let sb = exp_shifted(Isa::Avx2, &mut eb, shift);
            assert_eq!(
                sa.to_bits(),
                sb.to_bits(),
                "exp sum, len {len}, shift {shift}"
            );
            for (i, (a, b)) in ea.iter().zip(&eb).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "exp, len {len}, shift {shift}: {i}"
                );
            }
            scale_f32(Isa::Scalar, &mut ea, 0.3);
            scale_f32(Isa::Avx2, &mut eb, 0.3);
            assert!(ea.iter().zip(&eb).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        // SiLU-gated products over the same values (zeros, ±0 gates among them).
        let u: Vec<f32> = data(len, 35)
            .iter()
            .enumerate()
            .map(|(i, &v)| if i % 6 == 4 { -0.0 } else { v })
            .collect();
        let (mut ga, mut gb) = (row.to_vec(), row.to_vec());
        silu_mul(Isa::Scalar, &mut ga, &u);
        silu_mul(Isa::Avx2, &mut gb, &u);
        for (i, (a, b)) in ga.iter().zip(&gb).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "silu, len {len}: {i}: {a} vs {b}"
            );
        }
    }
}

/// Q8_0 keys and values (quantized from `data`): the quants and tiled scales of `slots`
/// key slots and value rows.
fn q8_data(slots: usize, hd: usize, seed: u32) -> (Vec<i8>, Vec<f16>) {
    let x = data(slots * hd, seed);
    let mut q = vec![0i8; slots * hd];
    let mut d = vec![f16::ZERO; slots * hd / Q8_GROUP];
    quantize_q8_0(&x, &mut q, &mut d);
    (q, d)
}

/// ggml's Q8_0 rule, checked in closed form: a group of (k − 16) / 4 has max |x| = 4, so
/// d = 4 / 127 (stored as f16) and q_k = round((k − 16) · 127 / 16); an all-zero group
/// gets d = 0 and zero quants; the values read back are within half a step.
#[test]
fn q8_0_quantization_follows_the_closed_form() {
    let mut x: Vec<f32> = (0..32).map(|k| (k as f32 - 16.0) / 4.0).collect();
    x.extend([0.0f32; 32]);
    let (mut q, mut d) = (vec![0i8; 64], vec![f16::ZERO; 2]);
    quantize_q8_0(&x, &mut q, &mut d);
    assert_eq!(d[0], f16::from_f32(4.0 / 127.0));
    assert_eq!(d[1], f16::ZERO);
    for k in 0..32 {
        let want = ((k as f64 - 16.0) * 127.0 / 16.0).round() as i8;
        assert_eq!(q[k], want, "quant {k}");
        let back = d[0].to_f32() * f32::from(q[k]);
        assert!(
            (back - x[k]).abs() <= 0.51 * 4.0 / 127.0 + 4.0 * 2f32.powi(-11),
            "{k}"
        );
        assert_eq!(q[32 + k], 0);
    }
    assert_eq!(q[0], -127);
}

/// Q8_0 keys (quantized from `data`) in the key layout ([`key_index_q8`]): the quants and
/// tiled scales of `slots` slots.
fn q8_keys(slots: usize, hd: usize, seed: u32) -> (Vec<i8>, Vec<f16>) {
    let (q, d) = q8_data(slots, hd, seed);
    let mut k = vec![0i8; q.len()];
    for s in 0..slots {
        for c in 0..hd {
            k[key_index_q8(hd, s, c)] = q[s * hd + c];
        }
    }
    (k, d)
}

/// The query quantization follows ggml's Q8_0 rule with an f32 scale and halves rounded to
/// even, gives the scalar tier's bits on the best tier, and its offsets are −128 times each
/// group's sum of quants.
#[test]
fn query_quantization_follows_the_rule() {
    let best = crate::quant::detect_best();
    let mut q = data(3 * 64, 31);
    // A group whose scale is exactly 1 (maximum 127), with halves at 63.5 and -0.5.
    q[0] = 127.0;
    q[1] = 63.5;
    q[2] = -0.5;
    let mut reference = QueryQ8Buf::with_capacity(q.len());
    let want = reference.quantize(Isa::Scalar, &q);
    assert_eq!((want.quants[1], want.quants[2]), (64, 0), "halves to even");
    let mut buf = QueryQ8Buf::with_capacity(q.len());
    let qq = buf.quantize(best, &q);
    // Every tier: the scalar tier's bits.
    assert_eq!(qq.quants, want.quants);
    assert_eq!(qq.offsets, want.offsets);
    for (g, xg) in q.chunks_exact(Q8_GROUP).enumerate() {
        let amax = xg.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(qq.scales[g], amax / 127.0);
        let mut sum = 0;
        for (i, &x) in xg.iter().enumerate() {
            let want = (x * (127.0 / amax)).round_ties_even();
            let got = qq.quants[g * Q8_GROUP + i];
            // x · (1/d) and x · (127/amax) may differ in the last bit: at most one step
            // apart, and only at a half.
            assert!((f32::from(got) - want).abs() <= 1.0, "group {g} value {i}");
            assert!((f32::from(got) * qq.scales[g] - x).abs() <= 0.5001 * qq.scales[g]);
            sum += i32::from(got);
        }
        assert_eq!(qq.offsets[g], -128 * sum);
        assert!(
            qq.quants[g * Q8_GROUP..(g + 1) * Q8_GROUP]
                .iter()
                .any(|&v| v.abs() == 127)
        );
    }
    // An all-zero group: zero scale, quants and offset.
    let z = buf.quantize(best, &[0.0; 32]);
    assert_eq!((z.scales, z.offsets), (&[0.0f32][..], &[0i32][..]));
    assert!(z.quants.iter().all(|&v| v == 0));
}

/// Q8_0 scores are, per group of 32 dimensions in order, the exact integer dot product of
/// the quantized query and the key's quants, then one multiply-add by the product of the
/// two scales (fused on the AVX-512 VNNI tier), whatever the query and slot counts; the
/// value sums are the stated chain of 16-bit weights and exact integer sums per run of
/// [`Q8_RUN`] slots, bit for bit on the scalar tier, the AVX2 tier (the scalar chains in
/// vectors) and the best tier, and within the weights' rounding of an f64 sum; at head sizes
/// 64 and 256.
#[test]
fn q8_0_kernels_follow_the_chain_and_match_scalar() {
    let best = crate::quant::detect_best();
    let fused = fused_q8(best);
    for hd in [64, 256] {
        let ld = 48;
        let groups = hd / Q8_GROUP;
        let q = data(13 * hd, 21);
        let mut buf = QueryQ8Buf::with_capacity(q.len());
        let qq = buf.quantize(best, &q);
        let (kq, kd) = q8_keys(48, hd, 22);
        for nq in [1, 3, 4, 12, 13] {
            for n in [1, 16, 17, 37, 48] {
                for isa in [Isa::Scalar, Isa::Avx2, best] {
                    let fused = fused && isa == best;
                    let mut out = vec![f32::NAN; nq * ld];
                    scores_q8_0(isa, &qq, nq, hd, &kq, &kd, n, 0.125, &mut out, ld);
                    for h in 0..nq {
                        for s in 0..n {
                            let mut acc = 0.0f32;
                            for g in 0..groups {
                                let mut part = 0i64;
                                for d in g * Q8_GROUP..(g + 1) * Q8_GROUP {
                                    let k = kq[key_index_q8(hd, s, d)];
                                    part += i64::from(qq.quants[h * hd + d]) * i64::from(k);
                                }
                                // The group's scale, where the tiles keep it; a dequantized
                                // key is that scale times its quant.
                                let dg = kd[(s / 16) * 16 * groups + g * 16 + s % 16].to_f32();
                                let d0 = g * Q8_GROUP;
                                let q0 = f32::from(kq[key_index_q8(hd, s, d0)]);
                                assert_eq!(key_q8_0(&kq, &kd, hd, s, d0), dg * q0);
                                let w = dg * qq.scales[h * groups + g];
                                acc = if fused {
                                    w.mul_add(part as f32, acc)
                                } else {
                                    acc + w * part as f32
                                };
                            }
                            let want = acc * 0.125;
                            // Against the f64 score of the unquantized query with the
                            // dequantized key: off by at most the query's rounding, half a
                            // step per dimension times |k| (plus f32 slack).
                            let (mut exact, mut bound) = (0.0f64, 1e-5f64);
                            for d in 0..hd {
                                let k = f64::from(key_q8_0(&kq, &kd, hd, s, d));
                                exact += f64::from(q[h * hd + d]) * k;
                                let dq = f64::from(qq.scales[h * groups + d / Q8_GROUP]);
                                bound += 0.5 * dq * k.abs();
                            }
                            let err = (f64::from(want) - 0.125 * exact).abs();
                            assert!(err <= 0.125 * bound, "hd {hd} head {h} slot {s}: {err}");
                            assert_eq!(
                                out[h * ld + s].to_bits(),
                                want.to_bits(),
                                "{isa:?} hd {hd}, {nq} queries, {n} slots: head {h} slot {s}"
                            );
                        }
                    }
                }
            }
        }
        // Values in slot pairs with the scales of whole tiles (304 slots' room for up to
        // 290: several runs of the 16-bit weights), and probabilities with masked (zero)
        // slots, the first 20 slots of each row zero (a run's first tile without weight).
        let (slots, ld) = (304, 304);
        let (rq, vd) = q8_data(slots, hd, 23);
        let mut vq = vec![0i8; rq.len()];
        for s in 0..slots {
            for c in 0..hd {
                vq[value_index_q8(hd, s, c)] = rq[s * hd + c];
            }
        }
        let scale = |s: usize, c: usize| vd[scale_index(hd, s, c)].to_f32();
        for nq in [1, 3, 7, 13] {
            let mut p: Vec<f32> = data(nq * ld, 24).iter().map(|x| x.abs() / 64.0).collect();
            for (i, x) in p.iter_mut().enumerate() {
                if i % ld < 20 || i % 7 == 3 {
                    *x = 0.0;
                }
            }
            for n in [1, 17, 37, 130, 290] {
                for isa in [Isa::Scalar, Isa::Avx2, best] {
                    let fused = fused && isa == best;
                    let mut out = vec![0.5f32; nq * hd];
                    accum_q8_0(isa, &p, ld, nq, hd, &vq, &vd, n, &mut out);
                    for h in 0..nq {
                        for c in 0..hd {
                            // The stated chain: runs of Q8_RUN slots, 16-bit weights, exact
                            // integer sums, one (fused) multiply-add per run.
                            let (mut chain, mut bound, mut mag) = (0.5f32, 0.0f64, 0.0f64);
                            let mut want = 0.5f64;
                            for r0 in (0..n).step_by(Q8_RUN) {
                                let run = r0..(r0 + Q8_RUN).min(n);
                                let w = |s: usize| p[h * ld + s] * scale(s, c);
                                let wmax = run.clone().map(w).fold(0.0f32, f32::max);
                                let inv = if wmax > 0.0 { 32767.0 / wmax } else { 0.0 };
                                let mut sum = 0i64;
                                for s in run.clone() {
                                    let q = vq[value_index_q8(hd, s, c)];
                                    sum += (w(s) * inv).round_ties_even() as i64 * i64::from(q);
                                    let v = f64::from(scale(s, c)) * f64::from(q);
                                    want += f64::from(p[h * ld + s]) * v;
                                    mag += (f64::from(p[h * ld + s]) * v).abs();
                                    bound += f64::from(wmax) / 65534.0 * f64::from(q).abs();
                                }
                                let back = wmax / 32767.0;
                                chain = if fused {
                                    back.mul_add(sum as f32, chain)
                                } else {
                                    chain + back * sum as f32
                                };
                            }
                            let got = out[h * hd + c];
                            assert_eq!(
                                got.to_bits(),
                                chain.to_bits(),
                                "{isa:?} hd {hd}, {nq} heads, {n} slots: head {h} column {c}"
                            );
                            // Against the f64 sum of the dequantized values: within the
                            // 16-bit weights' rounding (plus f32 slack).
                            let err = (f64::from(got) - want).abs();
                            let tol = bound * 1.0001 + 1e-6 * mag + 1e-6;
                            assert!(err <= tol, "{isa:?} hd {hd} {n} slots {h} {c}: {err:e}");
                        }
                    }
                }
            }
        }
    }
}
