//! The distribution algorithms of GNU libstdc++ (GCC 11 and later, the library LoadGen's
//! Linux builds use) over [`Mt19937`], reproduced draw for draw so that seeded choices
//! match LoadGen's:
//!
//! - `std::uniform_int_distribution` (`<bits/uniform_int_dist.h>`): a range narrower than
//!   the engine's 2^32 values is reduced with Lemire's nearly-divisionless multiply-and-
//!   reject method on a 64-bit product; a wider one is built from an engine word plus a
//!   recursive draw of the high part, rejecting overflow.
//! - `std::shuffle` (`<bits/stl_algo.h>`): Fisher–Yates from the front (element `i` swaps
//!   with a uniform position in `[0, i]`); while `len² ≤ 2^32 − 1` two positions come from
//!   one draw over `[0, (i+1)(i+2))`, after one single draw over `[0, 1]` when `len` is even.
//! - `std::generate_canonical<double, 53>` (`<bits/random.tcc>`): two engine words,
//!   `(w0 + w1·2^32) / 2^64` rounded once to double, clamped below 1.
//! - `std::uniform_real_distribution<double>` and `std::exponential_distribution<double>`
//!   (`<bits/random.h>`): `a + u·(b − a)` and `−ln(1 − u) / λ` over that canonical `u`.
//!
//! `ln` is the platform's `log` (glibc on Linux, as for LoadGen), so exponential draws are
//! reproducible bit for bit where both use the same C library.

use super::mt19937::Mt19937;

/// The engine's range, `max() − min()`.
const ENGINE_RANGE: u64 = u32::MAX as u64;

/// `std::uniform_int_distribution<T>{a, b}(g)` for `a ≤ b` (any integer type up to 64 bits
/// behaves alike, as libstdc++ computes in the common unsigned type of 64 bits).
pub fn uniform_int(g: &mut Mt19937, a: u64, b: u64) -> u64 {
    let range = b.wrapping_sub(a);
    let ret = if range < ENGINE_RANGE {
        lemire(g, (range + 1) as u32)
    } else if range > ENGINE_RANGE {
        let word_span = ENGINE_RANGE + 1;
        loop {
            let high = word_span.wrapping_mul(uniform_int(g, 0, range / word_span));
            let v = high.wrapping_add(u64::from(g.next_u32()));
            if v <= range && v >= high {
                break v;
            }
        }
    } else {
        u64::from(g.next_u32())
    };
    ret.wrapping_add(a)
}

/// Uniform in `[0, span)` from 32-bit words: the high half of `word · span`, redrawn while
/// the low half falls below `2^32 mod span`.
fn lemire(g: &mut Mt19937, span: u32) -> u64 {
    let mut product = u64::from(g.next_u32()) * u64::from(span);
    let mut low = product as u32;
    if low < span {
        let threshold = span.wrapping_neg() % span;
        while low < threshold {
            product = u64::from(g.next_u32()) * u64::from(span);
            low = product as u32;
        }
    }
    product >> 32
}

/// `std::shuffle(v.begin(), v.end(), g)`.
pub fn shuffle<T>(v: &mut [T], g: &mut Mt19937) {
    let len = v.len() as u64;
    if len == 0 {
        return;
    }
    if ENGINE_RANGE / len >= len {
        let mut i = 1usize;
        if len.is_multiple_of(2) {
            let j = uniform_int(g, 0, 1) as usize;
            v.swap(i, j);
            i += 1;
        }
        while i < v.len() {
            let b0 = i as u64 + 1;
            let b1 = b0 + 1;
            let x = uniform_int(g, 0, b0 * b1 - 1);
            v.swap(i, (x / b1) as usize);
            i += 1;
            v.swap(i, (x % b1) as usize);
            i += 1;
        }
        return;
    }
    for i in 1..v.len() {
        let j = uniform_int(g, 0, i as u64) as usize;
        v.swap(i, j);
    }
}

/// `std::generate_canonical<double, 53>(g)`: uniform in `[0, 1)`.
pub fn generate_canonical(g: &mut Mt19937) -> f64 {
    const TWO_32: f64 = 4_294_967_296.0;
    let w0 = f64::from(g.next_u32());
    let w1 = f64::from(g.next_u32());
    let u = (w0 + w1 * TWO_32) / (TWO_32 * TWO_32);
    if u >= 1.0 {
        1.0 - f64::EPSILON / 2.0
    } else {
        u
    }
}

/// `std::uniform_real_distribution<double>(a, b)(g)`.
pub fn uniform_real(g: &mut Mt19937, a: f64, b: f64) -> f64 {
    generate_canonical(g) * (b - a) + a
}

/// `std::exponential_distribution<double>(lambda)(g)`.
pub fn exponential(g: &mut Mt19937, lambda: f64) -> f64 {
    -(1.0 - generate_canonical(g)).ln() / lambda
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_int_stays_in_range_and_hits_both_ends() {
        let mut g = Mt19937::new(7);
        for &(a, b) in &[
            (0u64, 0u64),
            (0, 1),
            (3, 9),
            (0, 1 << 33),
            (5, u32::MAX as u64 + 5),
        ] {
            let (mut lo, mut hi) = (u64::MAX, 0);
            for _ in 0..4_000 {
                let x = uniform_int(&mut g, a, b);
                assert!((a..=b).contains(&x), "{x} outside [{a}, {b}]");
                lo = lo.min(x);
                hi = hi.max(x);
            }
            if b - a < 16 {
                assert_eq!((lo, hi), (a, b));
            }
        }
    }

    #[test]
    fn shuffle_is_a_permutation_on_both_paths() {
        let mut g = Mt19937::new(1);
        // 65_535² < 2^32 − 1 takes the paired path; 70_000 takes the single-draw path.
        for n in [1usize, 2, 3, 10, 65_535, 70_000] {
            let mut v: Vec<usize> = (0..n).collect();
            shuffle(&mut v, &mut g);
            let mut s = v.clone();
            s.sort_unstable();
            assert!(s.iter().enumerate().all(|(i, &x)| i == x), "n={n}");
            if n > 3 {
                assert_ne!(v, s, "n={n} left in order");
            }
        }
    }

    #[test]
    fn canonical_is_two_words_over_two_to_the_64() {
        let mut a = Mt19937::new(42);
        let mut b = Mt19937::new(42);
        let w0 = u64::from(b.next_u32());
        let w1 = u64::from(b.next_u32());
        assert_eq!(
            generate_canonical(&mut a),
            ((w1 << 32) | w0) as f64 / 2f64.powi(64)
        );
    }
}
