//! The 32-bit Mersenne Twister `std::mt19937` (ISO C++ [rand.eng.mers] with the
//! parameters of [rand.predef]: w=32, n=624, m=397, r=31, a=0x9908b0df, u=11, d=0xffffffff,
//! s=7, b=0x9d2c5680, t=15, c=0xefc60000, l=18, f=1812433253), the engine LoadGen seeds
//! for every random choice it makes. Seeding follows [rand.eng.mers]/9: the seed is reduced
//! modulo 2^32 (LoadGen passes 64-bit seeds; only their low 32 bits matter).

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// `std::mt19937`: outputs uniform 32-bit words, `min() == 0`, `max() == 2^32 - 1`.
#[derive(Clone)]
pub struct Mt19937 {
    state: Box<[u32; N]>,
    next: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// The engine's default seed (`std::mt19937::default_seed`).
    pub const DEFAULT_SEED: u64 = 5489;

    /// An engine constructed as `std::mt19937 e(seed)`.
    pub fn new(seed: u64) -> Self {
        let mut state = Box::new([0u32; N]);
        state[0] = seed as u32;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, next: N }
    }

    fn twist(&mut self) {
        let s = &mut self.state;
        for i in 0..N {
            let y = (s[i] & UPPER) | (s[(i + 1) % N] & LOWER);
            let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
            s[i] = s[(i + M) % N] ^ (y >> 1) ^ mag;
        }
        self.next = 0;
    }

    /// The next output word (`e()`).
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// Advances by `z` outputs (`e.discard(z)`).
    pub fn discard(&mut self, z: u64) {
        for _ in 0..z {
            self.next_u32();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousandth_output_of_default_seed_is_the_standards_value() {
        // ISO C++ [rand.predef]/1 requires the 10000th consecutive invocation of a
        // default-constructed mt19937 to produce 4123659995.
        let mut e = Mt19937::new(Mt19937::DEFAULT_SEED);
        e.discard(9_999);
        assert_eq!(e.next_u32(), 4_123_659_995);
    }

    #[test]
    fn only_the_low_32_bits_of_the_seed_matter() {
        let mut a = Mt19937::new(0x1234_5678_9abc_def0);
        let mut b = Mt19937::new(0x9abc_def0);
        for _ in 0..1_000 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
    }
}
