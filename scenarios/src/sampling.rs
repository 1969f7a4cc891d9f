//! Seeded sample choice and the Server arrival schedule, reproducing MLPerf LoadGen 6.0.17
//! draw for draw: the same seeds and counts give the same loaded set, the same sample index
//! per query and the same scheduled arrival times as LoadGen's Linux builds.
//!
//! LoadGen (`loadgen.cc`) makes every choice with [`Mt19937`] and libstdc++'s algorithms
//! ([`libstdcxx`]):
//! - loadable sets (`GenerateLoadableSets`): `0..count` shuffled with `qsl_rng_seed`, cut into
//!   sets of the performance sample count; performance mode shuffles `0..performance count`
//!   and loads that one set, accuracy mode shuffles `0..accuracy count` and runs each set;
//! - sample indices (`GenerateQueries`): an engine seeded with `sample_index_rng_seed` first
//!   builds a unique-order shuffle of the loaded set and the equal-issue permutations
//!   (`⌈min_query_count / loaded⌉` successive shuffles of one vector), whether or not they
//!   are used; then SingleStream and Server draw `uniform_int_distribution<int>(0, loaded−1)`
//!   per query, or with equal issue cycle through the concatenated permutations; Offline
//!   repeats the loaded set in load order (each whole pass shuffled with equal issue);
//! - arrivals (`ScheduleDistribution<Server>`): the first query at 0, then gaps of
//!   `exponential_distribution(target_qps)` seconds from an engine seeded with
//!   `schedule_rng_seed`, each truncated to whole nanoseconds before it is added.
//!
//! The minimum query count the equal-issue permutations are built for is LoadGen's
//! effective one (`test_settings_internal.cc`): Offline 1; SingleStream with equal issue
//! `max(min_query_count, ⌊2 · min_duration · 1e9 / target_latency_ns⌋)` raised to the next
//! multiple of the QSL's performance sample count, always by at least one step.

pub mod libstdcxx;
pub mod mt19937;

pub use mt19937::Mt19937;

use crate::settings::{Scenario, TestSettings};

/// `0..count` in the order LoadGen's `qsl_rng_seed` shuffle leaves it.
pub fn shuffled_indices(count: u64, qsl_rng_seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..count).collect();
    libstdcxx::shuffle(&mut v, &mut Mt19937::new(qsl_rng_seed));
    v
}

/// The performance pass's loaded set, in load order: LoadGen shuffles the first
/// `min(performance_count, total)` sample indices and loads them all.
pub fn performance_set(total: u64, performance_count: u64, qsl_rng_seed: u64) -> Vec<u64> {
    shuffled_indices(performance_count.min(total), qsl_rng_seed)
}

/// The accuracy pass's loadable sets: `0..min(count, total)` shuffled, cut into sets of
/// `set_size` (the last one shorter).
pub fn accuracy_sets(total: u64, count: u64, set_size: u64, qsl_rng_seed: u64) -> Vec<Vec<u64>> {
    let all = shuffled_indices(count.min(total), qsl_rng_seed);
    all.chunks(set_size.max(1) as usize)
        .map(<[u64]>::to_vec)
        .collect()
}

/// Issue order within one accuracy set, as positions into it (LoadGen's
/// `GenerateQueries<_, AccuracyOnly>` with a fresh engine per set).
pub fn accuracy_order(set_len: usize, settings: &TestSettings) -> Vec<usize> {
    let mut g = Mt19937::new(settings.sample_index_rng_seed);
    let mut first: Vec<usize> = (0..set_len).collect();
    libstdcxx::shuffle(&mut first, &mut g);
    if !settings.sample_concatenate_permutation {
        // SingleStream and Server take the accuracy shuffle; Offline issues the set as loaded.
        return match settings.scenario {
            Scenario::Offline => (0..set_len).collect(),
            _ => first,
        };
    }
    // The unique-order shuffle, then one equal-issue permutation (the query count is the
    // set size in SingleStream and Server, one query in Offline).
    let mut unique: Vec<usize> = (0..set_len).collect();
    libstdcxx::shuffle(&mut unique, &mut g);
    let mut equal: Vec<usize> = (0..set_len).collect();
    if set_len > 0 {
        libstdcxx::shuffle(&mut equal, &mut g);
    }
    match settings.scenario {
        Scenario::Offline => {
            let mut pass: Vec<usize> = (0..set_len).collect();
            libstdcxx::shuffle(&mut pass, &mut g);
            pass
        }
        _ => equal,
    }
}

/// What the performance pass's sample sequence depends on besides the loaded set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplePlan {
    scenario: Option<Scenario>,
    seed: u64,
    equal_issue: bool,
    /// LoadGen's effective minimum query count, which sizes the equal-issue permutations.
    min_queries: u64,
}

impl SamplePlan {
    /// The plan for `settings` with a QSL whose own performance sample count is
    /// `qsl_performance_count` (LoadGen pads SingleStream's equal-issue count with it, not
    /// with the override).
    pub fn new(settings: &TestSettings, qsl_performance_count: u64) -> Self {
        let s = settings;
        let min_queries = match s.scenario {
            Scenario::Offline => 1,
            Scenario::Server => s.min_query_count,
            Scenario::SingleStream if s.sample_concatenate_permutation => {
                let secs = s.min_duration_ms as f64 / 1000.0;
                let qps = 1e9 / s.single_stream_expected_latency_ns as f64;
                let expected = (2.0 * secs * qps) as u64;
                let mut n = s.min_query_count.max(expected);
                if qsl_performance_count > 0 {
                    n = n.saturating_add(qsl_performance_count - n % qsl_performance_count);
                }
                n
            }
            Scenario::SingleStream => s.min_query_count,
        };
        SamplePlan {
            scenario: Some(s.scenario),
            seed: s.sample_index_rng_seed,
            equal_issue: s.sample_concatenate_permutation,
            min_queries,
        }
    }
}

#[derive(Debug, Clone)]
enum Draw {
    /// `uniform_int_distribution<int>(0, loaded − 1)` per query.
    Uniform,
    /// The equal-issue permutations, concatenated and cycled.
    Cycle(Vec<u32>),
    /// Offline: the loaded set repeated; `Some` holds the current pass's shuffle.
    Repeat(Option<Vec<u32>>),
}

/// The performance pass's sample indices, query by query. Regenerable from its plan, so
/// per-query sample indices need not be stored.
#[derive(Debug, Clone)]
pub struct SampleSeq<'a> {
    rng: Mt19937,
    loaded: &'a [u64],
    draw: Draw,
    pos: u64,
}

impl<'a> SampleSeq<'a> {
    /// The sequence over `loaded` (non-empty) that LoadGen generates under `plan`.
    pub fn new(loaded: &'a [u64], plan: &SamplePlan) -> Self {
        let n = loaded.len();
        let mut rng = Mt19937::new(plan.seed);
        // The unique-order distribution is built (and consumes draws) in every mode.
        let mut unique: Vec<u32> = (0..n as u32).collect();
        libstdcxx::shuffle(&mut unique, &mut rng);
        let mut perm: Vec<u32> = (0..n as u32).collect();
        let mut cycle = Vec::new();
        let mut j = 0u64;
        while n > 0 && j < plan.min_queries {
            libstdcxx::shuffle(&mut perm, &mut rng);
            cycle.extend_from_slice(&perm);
            j += n as u64;
        }
        let draw = match (plan.scenario, plan.equal_issue) {
            (Some(Scenario::Offline), eq) => Draw::Repeat(eq.then(Vec::new)),
            (_, true) if !cycle.is_empty() => Draw::Cycle(cycle),
            // LoadGen cycles an empty vector here (a division by zero); one fresh
            // permutation per pass is the nearest defined behaviour.
            (_, true) => Draw::Repeat(Some(Vec::new())),
            (_, false) => Draw::Uniform,
        };
        SampleSeq {
            rng,
            loaded,
            draw,
            pos: 0,
        }
    }

    /// The next query's sample index.
    pub fn next_sample(&mut self) -> u64 {
        let n = self.loaded.len();
        let i = (self.pos % n as u64) as usize;
        self.pos += 1;
        let at = match &mut self.draw {
            Draw::Uniform => libstdcxx::uniform_int(&mut self.rng, 0, n as u64 - 1) as usize,
            Draw::Cycle(c) => c[(self.pos - 1) as usize % c.len()] as usize,
            Draw::Repeat(None) => i,
            Draw::Repeat(Some(pass)) => {
                if i == 0 {
                    pass.clear();
                    pass.extend(0..n as u32);
                    libstdcxx::shuffle(pass, &mut self.rng);
                }
                pass[i] as usize
            }
        };
        self.loaded[at]
    }
}

/// Server arrivals as offsets from the start of the pass, ns: 0, then exponential gaps.
#[derive(Debug, Clone)]
pub struct ArrivalSchedule {
    rng: Mt19937,
    qps: f64,
    next_ns: u64,
}

impl ArrivalSchedule {
    /// LoadGen's schedule for `target_qps` seeded with `schedule_rng_seed`.
    pub fn new(target_qps: f64, schedule_rng_seed: u64) -> Self {
        ArrivalSchedule {
            rng: Mt19937::new(schedule_rng_seed),
            qps: target_qps,
            next_ns: 0,
        }
    }

    /// The next query's scheduled offset, ns.
    pub fn next_offset_ns(&mut self) -> u64 {
        let t = self.next_ns;
        // duration_cast<nanoseconds>(duration<double>(x)) truncates x · 1e9 toward zero.
        let gap = (libstdcxx::exponential(&mut self.rng, self.qps) * 1e9) as u64;
        self.next_ns = t.saturating_add(gap);
        t
    }
}

/// Offline sample count LoadGen would generate for these settings and loaded-set size
/// (capped by `max_query_count`, a PocketPerf extension).
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
