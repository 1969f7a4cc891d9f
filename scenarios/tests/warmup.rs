//! Warm-up queries never reach LoadGen's results: a run whose first queries are slow (a cold
//! SUT) with those queries as warm-up has the same sample counts, samples, percentiles and
//! early-stopping estimate as a run of an SUT that was never slow, on virtual time.

mod common;

use common::TestQsl;
use pocketperf_scenarios::{
    Query, Responder, Scenario, SystemUnderTest, TestResult, TestSettings, VirtualClock, run_test,
    run_test_with_warmup,
};

const MS: u64 = 1_000_000;

/// Answers queries in order on one server; the first `cold` queries it ever sees take 2 s to
/// the first token, the rest 10 ms plus 1 µs per sample index; 4 tokens 5 ms apart.
struct ColdSut {
    cold: u64,
    seen: u64,
    busy_until: u64,
}

impl SystemUnderTest for ColdSut {
    fn name(&self) -> &str {
        "ColdSUT"
    }
    fn issue_queries(&mut self, queries: &[Query], r: &mut Responder<'_>) {
        for q in queries {
            let ttft = if self.seen < self.cold {
                2_000 * MS
            } else {
                10 * MS + q.sample_index * 1_000
            };
            self.seen += 1;
            let mut t = r.now_ns().max(self.busy_until) + ttft;
            for k in 0..4 {
                if k > 0 {
                    t += 5 * MS;
                }
                r.token_at(q.id, t);
            }
            r.complete_at(q.id, t, 4, None);
            self.busy_until = t;
        }
    }
}

fn settings(scenario: Scenario) -> TestSettings {
    let mut s = TestSettings::new(scenario);
    s.min_query_count = 40;
    s.min_duration_ms = 200;
    s.use_token_latencies = true;
    s.qsl_rng_seed = 7;
    s.sample_index_rng_seed = 11;
    s.schedule_rng_seed = 13;
    s.server_target_qps = 5.0;
    s.server_target_latency_ns = 1_000 * MS;
    s.server_ttft_latency_ns = 500 * MS;
    s.server_tpot_latency_ns = 100 * MS;
    s.offline_expected_qps = 10.0;
    s
}

fn run(s: &TestSettings, cold: u64, warmup: u64) -> TestResult {
    let mut sut = ColdSut {
        cold,
        seen: 0,
        busy_until: 0,
    };
    let mut qsl = TestQsl::new(500, 50);
    let clock = VirtualClock::new();
    if warmup == 0 {
        run_test(&mut sut, &mut qsl, s, &clock).expect("run")
    } else {
        run_test_with_warmup(&mut sut, &mut qsl, s, &clock, warmup).expect("run")
    }
}

#[test]
fn warm_up_queries_are_not_counted_in_any_scenario() {
    for scenario in [Scenario::SingleStream, Scenario::Server, Scenario::Offline] {
        let s = settings(scenario);
        let steady = run(&s, 0, 0);
        let warmed = run(&s, 3, 3);
        // Without warm-up, the cold queries land in the pass and show in its maximum.
        let cold = run(&s, 3, 0);

        let (p, w) = (
            steady.performance.as_ref().unwrap(),
            warmed.performance.as_ref().unwrap(),
        );
        assert_eq!(w.queries_issued, p.queries_issued, "{scenario:?}");
        assert_eq!(w.queries_completed, p.queries_completed, "{scenario:?}");
        assert_eq!(w.latency, p.latency, "{scenario:?}");
        assert_eq!(w.ttft, p.ttft, "{scenario:?}");
        assert_eq!(w.tpot, p.tpot, "{scenario:?}");
        assert_eq!(w.early_stopping, p.early_stopping, "{scenario:?}");
        assert_eq!(warmed.invalid_causes, steady.invalid_causes, "{scenario:?}");
        let samples = |r: &TestResult| {
            r.query_records()
                .map(|q| q.sample_index)
                .collect::<Vec<_>>()
        };
        assert_eq!(samples(&warmed), samples(&steady), "{scenario:?}");
        assert!(steady.warmup.is_empty());

        // The warm-up has its own records: three queries, each with its 2 s first token.
        assert_eq!(warmed.warmup.len(), 3, "{scenario:?}");
        for (i, q) in warmed.warmup.iter().enumerate() {
            assert_eq!(q.id, i as u64);
            assert_eq!(q.sample_index, warmed.loaded_set[i]);
            assert_eq!(q.ttft_ns(), Some(2_000 * MS), "{scenario:?}");
            assert_eq!(q.latency_ns(), Some(2_015 * MS));
            assert_eq!(q.tokens, 4);
        }
        // The same slow queries without warm-up are in the pass.
        let c = cold.performance.as_ref().unwrap();
        assert!(
            c.ttft.as_ref().unwrap().max >= 2_000 * MS,
            "{scenario:?}: {:?}",
            c.ttft
        );

        // The detail log lists them under their own keys.
        let meta = pocketperf_scenarios::LogMeta::default();
        let detail = warmed.detail_text(&meta);
        assert!(detail.contains("\"pocketperf_warmup_query_count\", \"value\": 3"));
        assert_eq!(detail.matches("\"pocketperf_warmup_query\"").count(), 3);
        assert!(!steady.detail_text(&meta).contains("pocketperf_warmup"));
    }
}
