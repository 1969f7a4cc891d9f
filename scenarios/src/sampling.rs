//! Seeded sample selection shared by the engine and the results: the platform-independent
//! RNG, the loaded set (LoadGen's `qsl_rng_seed` shuffle), the sequence of sample indices
//! queries use (`sample_index_rng_seed`, equal issue), and LoadGen's Offline sample count.
//! `results` regenerates per-query sample indices from here without reaching into the
//! engine (LoadGen: `loadgen.cc` GenerateQueries, `test_settings_internal.cc`).

use std::collections::HashMap;

use crate::settings::TestSettings;

/// Deterministic 64-bit generator (SplitMix64 seeding a xoshiro256** state), identical on
/// every platform so seeds reproduce runs across devices.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }
    /// Uniform in [0, n) (multiply-shift; bias below 2^-64·n, irrelevant here). n > 0.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// Uniform in (0, 1].
    pub(crate) fn unit_open0(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// The first `k` entries of a seeded shuffle of `0..total`, without materializing
/// `total` entries (sparse Fisher–Yates).
pub(crate) fn choose_loaded_set(total: u64, k: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let mut swapped: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::with_capacity(k as usize);
    for i in 0..k {
        let j = i + rng.below(total - i);
        let vi = *swapped.get(&i).unwrap_or(&i);
        let vj = *swapped.get(&j).unwrap_or(&j);
        swapped.insert(j, vi);
        out.push(vj);
    }
    out
}

/// The sequence of sample indices queries use: uniform draws from the loaded set, or with
/// equal issue, concatenated seeded permutations of it. Regenerable from its seed, so
/// per-query sample indices need not be stored.
#[derive(Debug, Clone)]
pub(crate) struct SampleSeq<'a> {
    rng: Rng,
    loaded: &'a [u64],
    equal_issue: bool,
    perm: Vec<u32>,
    pos: usize,
}

impl<'a> SampleSeq<'a> {
    pub(crate) fn new(loaded: &'a [u64], seed: u64, equal_issue: bool) -> Self {
        SampleSeq {
            rng: Rng::new(seed),
            loaded,
            equal_issue,
            perm: if equal_issue {
                (0..loaded.len() as u32).collect()
            } else {
                Vec::new()
            },
            pos: usize::MAX,
        }
    }
    pub(crate) fn next_sample(&mut self) -> u64 {
        if self.equal_issue {
            if self.pos >= self.perm.len() {
                for i in (1..self.perm.len()).rev() {
                    let j = self.rng.below(i as u64 + 1) as usize;
                    self.perm.swap(i, j);
                }
                self.pos = 0;
            }
            let s = self.loaded[self.perm[self.pos] as usize];
            self.pos += 1;
            s
        } else {
            self.loaded[self.rng.below(self.loaded.len() as u64) as usize]
        }
    }
}

/// Offline sample count LoadGen would generate for these settings and loaded-set size.
pub fn offline_sample_count(settings: &TestSettings, loaded: u64) -> u64 {
    let mut n = settings
        .min_query_count
        .max(settings.offline_expected_count())
        .max(1);
    if settings.sample_concatenate_permutation && loaded > 0 {
        n = n.div_ceil(loaded) * loaded;
    }
    if settings.max_query_count > 0 {
        n = n.min(settings.max_query_count);
    }
    n
}
