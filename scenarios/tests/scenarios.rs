//! Virtual-time runs of every scenario, one per VALID/INVALID cause, with the expected
//! figures worked out in closed form from the simulated SUT's latencies.

mod common;

use common::{SimQuery, SimSut, TestQsl};
use pocketperf_scenarios::{
    Error, InvalidCause, Scenario, TestSettings, VirtualClock, early_stopping, run_test,
};

const MS: u64 = 1_000_000;

fn ss(min_q: u64, min_ms: u64) -> TestSettings {
    let mut s = TestSettings::new(Scenario::SingleStream);
    s.min_query_count = min_q;
    s.min_duration_ms = min_ms;
    s.qsl_rng_seed = 7;
    s.sample_index_rng_seed = 11;
    s.schedule_rng_seed = 13;
    s
}

fn run(
    sut: &mut dyn pocketperf_scenarios::SystemUnderTest,
    s: &TestSettings,
    qsl: &mut TestQsl,
) -> pocketperf_scenarios::TestResult {
    let clock = VirtualClock::new();
    run_test(sut, qsl, s, &clock).expect("run succeeds")
}

#[test]
fn single_stream_valid_run_closed_form() {
    // Query i takes (i + 1) * 10 us; the next is issued when the previous completes, so
    // query i is issued at 10us * i(i+1)/2. Stop: >= 50 queries and last issue >= 100 ms.
    let mut sut = SimSut::new(Box::new(|id| SimQuery::plain((id + 1) * 10_000)));
    let s = ss(50, 100);
    let mut qsl = TestQsl::new(1000, 100);
    let r = run(&mut sut, &s, &mut qsl);
    // Smallest n with issue time of query n-1 >= 100 ms: 10us*(n-1)n/2 >= 100ms.
    let mut n = 1u64;
    while 10_000 * (n - 1) * n / 2 < 100 * MS {
        n += 1;
    }
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.queries_issued, n);
    assert!(r.is_valid(), "{:?}", r.invalid_causes);
    let lat = p.latency.as_ref().unwrap();
    assert_eq!(lat.min, 10_000);
    assert_eq!(lat.max, n * 10_000);
    assert_eq!(lat.mean, (n + 1) * 10_000 / 2);
    // p90 = sorted[floor(0.9 n)] = (floor(0.9 n) + 1) * 10 us.
    let k = (n as f64 * 0.9) as u64;
    assert_eq!(p.target_latency_ns, Some((k + 1) * 10_000));
    let final_issue = 10_000 * (n - 1) * n / 2;
    assert_eq!(p.final_query_issued_ns, final_issue);
    assert!((p.qps_with_overhead - (n - 1) as f64 / (final_issue as f64 / 1e9)).abs() < 1e-9);
    // Early stopping estimate is sorted[n - t] with LoadGen's rank t.
    let es = p.early_stopping.as_ref().unwrap();
    let pocketperf_scenarios::EsRank::Estimate { t, .. } =
        early_stopping::single_stream_rank(0.9, n).unwrap()
    else {
        panic!("enough queries")
    };
    assert_eq!(es.estimate_ns, Some((n - t + 1) * 10_000));
    // Samples come from the loaded set only and the QSL saw load + unload of that set.
    let recs: Vec<_> = r.query_records().collect();
    assert_eq!(recs.len() as u64, n);
    assert_eq!(qsl.loaded.len(), 100);
    assert_eq!(qsl.loaded, qsl.unloaded);
    for (q, sent) in recs.iter().zip(&sut.issued) {
        assert_eq!(
            q.sample_index, sent.sample_index,
            "records regenerate the issued samples"
        );
        assert!(qsl.loaded.contains(&q.sample_index));
    }
    let mut uniq = qsl.loaded.clone();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(uniq.len(), 100, "loaded set has distinct samples");
}

#[test]
fn too_few_queries_is_invalid_with_all_causes() {
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    let mut s = ss(50, 100);
    s.max_query_count = 30;
    let r = run(&mut sut, &s, &mut TestQsl::new(100, 100));
    assert_eq!(r.performance.as_ref().unwrap().queries_issued, 30);
    assert_eq!(
        r.invalid_causes,
        vec![
            InvalidCause::MinDurationNotMet {
                required_ns: 100 * MS,
                actual_ns: 29 * MS
            },
            InvalidCause::MinQueriesNotMet {
                required: 50,
                completed: 30
            },
            InvalidCause::EarlyStoppingNotMet {
                series: "latency".into()
            },
        ]
    );
    let text = r.summary_text(&Default::default());
    assert!(text.contains("Result is : INVALID\n"));
    assert!(text.contains("  Min queries satisfied : NO\n"));
    assert!(text.contains(" * Only processed 30 queries.\n * Need to process at least 64 queries"));
}

#[test]
fn too_short_is_invalid_min_duration_only() {
    // 1 ms per query, max_duration 150 ms, min_duration 200 ms: issuing stops after the
    // first issue strictly past 150 ms, the one at 151 ms, so 152 queries; early stopping
    // at p90 needs 64; min queries 10.
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    let mut s = ss(10, 200);
    s.max_duration_ms = 150;
    let r = run(&mut sut, &s, &mut TestQsl::new(100, 100));
    assert_eq!(r.performance.as_ref().unwrap().queries_issued, 152);
    assert_eq!(
        r.invalid_causes,
        vec![InvalidCause::MinDurationNotMet {
            required_ns: 200 * MS,
            actual_ns: 151 * MS
        }]
    );
}

#[test]
fn early_stopping_alone_fails_with_few_queries() {
    // 20 queries of 1 ms satisfy min count 20 and min duration 10 ms, but p90 early
    // stopping needs h(1) + 1 = 64 queries.
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    let r = run(&mut sut, &ss(20, 10), &mut TestQsl::new(100, 100));
    assert_eq!(r.performance.as_ref().unwrap().queries_issued, 20);
    assert_eq!(
        r.invalid_causes,
        vec![InvalidCause::EarlyStoppingNotMet {
            series: "latency".into()
        }]
    );
}

fn server(qps: f64, bound_ms: u64, min_q: u64, min_ms: u64) -> TestSettings {
    let mut s = ss(min_q, min_ms);
    s.scenario = Scenario::Server;
    s.server_target_qps = qps;
    s.server_target_latency_ns = bound_ms * MS;
    s
}

#[test]
fn server_valid_poisson_rate_and_latency() {
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    sut.parallel = true;
    let s = server(100.0, 10, 500, 1000);
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    assert!(r.is_valid(), "{:?}", r.invalid_causes);
    let p = r.performance.as_ref().unwrap();
    // Every latency is exactly the service time (no queueing with parallel servers).
    assert_eq!(p.latency.as_ref().unwrap().max, MS);
    assert_eq!(p.overlatency_query_count, 0);
    // Poisson at 100/s: 500+ arrivals estimate the rate within 10%.
    assert!(
        (p.scheduled_qps - 100.0).abs() < 10.0,
        "{}",
        p.scheduled_qps
    );
    // Mean gap: scheduled time of the last query / (n - 1).
    let recs: Vec<_> = r.query_records().collect();
    let gaps: Vec<u64> = recs
        .windows(2)
        .map(|w| w[1].issue_ns - w[0].issue_ns)
        .collect();
    let mean_gap = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    assert!((mean_gap - 1e7).abs() < 1e6, "mean gap {mean_gap}");
    // Exponential gaps: the coefficient of variation is about 1.
    let var = gaps
        .iter()
        .map(|&g| (g as f64 - mean_gap).powi(2))
        .sum::<f64>()
        / gaps.len() as f64;
    let cv = var.sqrt() / mean_gap;
    assert!((cv - 1.0).abs() < 0.15, "cv {cv}");
}

#[test]
fn server_over_latency_bound_is_invalid() {
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(5 * MS)));
    sut.parallel = true;
    let s = server(100.0, 4, 500, 1000);
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    let n = r.performance.as_ref().unwrap().queries_issued;
    assert_eq!(
        r.invalid_causes,
        vec![
            InvalidCause::EarlyStoppingNotMet {
                series: "latency".into()
            },
            InvalidCause::LatencyOverBound {
                percentile: 0.99,
                value_ns: 5 * MS,
                bound_ns: 4 * MS
            },
        ]
    );
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.overlatency_query_count, n);
    // Every query over the bound: h(t = n) + n more than processed.
    let h = early_stopping::min_passing_queries(0.99, n).unwrap();
    let es = p.early_stopping.as_ref().unwrap();
    assert!(
        es.text
            .contains(&format!("Would need to run at least {} more queries", h))
    );
    let text = r.summary_text(&Default::default());
    assert!(text.contains("  Performance constraints satisfied : NO\n"));
    assert!(text.contains(" * Reduce target QPS to improve latency.\n"));
}

#[test]
fn server_sut_that_cannot_keep_up_is_below_scheduled_qps() {
    // One server, 20 ms per query, 100 queries/s offered: it completes 50/s.
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(20 * MS)));
    let s = server(100.0, 10_000, 200, 1000);
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    let p = r.performance.as_ref().unwrap();
    assert!((p.completed_qps - 50.0).abs() < 5.0, "{}", p.completed_qps);
    assert!(
        r.invalid_causes
            .iter()
            .any(|c| matches!(c, InvalidCause::QpsBelowScheduled { .. }))
    );
}

fn token_settings(scenario: Scenario) -> TestSettings {
    let mut s = ss(100, 1000);
    s.scenario = scenario;
    s.use_token_latencies = true;
    s
}

#[test]
fn single_stream_token_metrics_closed_form() {
    // 30 ms to first token, 16 tokens 5 ms apart: latency 105 ms, TPOT 75/15 = 5 ms.
    let mut sut = SimSut::new(Box::new(|_| SimQuery::tokens(30 * MS, 16, 5 * MS)));
    let r = run(
        &mut sut,
        &token_settings(Scenario::SingleStream),
        &mut TestQsl::new(100, 10),
    );
    assert!(r.is_valid(), "{:?}", r.invalid_causes);
    let p = r.performance.as_ref().unwrap();
    let n = p.queries_issued;
    assert_eq!(n, 100, "1 s / 105 ms < 100 queries, so the count rules");
    assert_eq!(p.latency.as_ref().unwrap().max, 105 * MS);
    assert_eq!(p.ttft.as_ref().unwrap().at(0.99), Some(30 * MS));
    assert_eq!(p.tpot.as_ref().unwrap().mean, 5 * MS);
    let itl = p.inter_token.as_ref().unwrap();
    assert_eq!((itl.count, itl.min, itl.max), (15 * n, 5 * MS, 5 * MS));
    assert_eq!(p.total_tokens, 16 * n);
    // Tokens/s over first issue to last completion: 16n / (105 ms * n).
    assert!((p.tokens_per_second - 16.0 / 0.105).abs() < 1e-6);
    assert_eq!(p.tpot_undefined_count, 0);
    // Same figures whether the SUT streams tokens or reports first token + count.
    let mut sut2 = SimSut::new(Box::new(|_| SimQuery::tokens(30 * MS, 16, 5 * MS)));
    sut2.stream_tokens = false;
    let r2 = run(
        &mut sut2,
        &token_settings(Scenario::SingleStream),
        &mut TestQsl::new(100, 10),
    );
    let p2 = r2.performance.as_ref().unwrap();
    assert_eq!(p2.tpot, p.tpot);
    assert_eq!(p2.ttft, p.ttft);
    assert!(p2.inter_token.is_none());
}

#[test]
fn server_ttft_and_tpot_bounds() {
    let mk = |ttft_bound: u64, tpot_bound: u64| {
        let mut s = token_settings(Scenario::Server);
        s.server_target_qps = 50.0;
        s.min_query_count = 500;
        s.server_ttft_latency_ns = ttft_bound * MS;
        s.server_tpot_latency_ns = tpot_bound * MS;
        let mut sut = SimSut::new(Box::new(|_| SimQuery::tokens(30 * MS, 11, 5 * MS)));
        sut.parallel = true;
        run(&mut sut, &s, &mut TestQsl::new(1000, 100))
    };
    assert!(mk(40, 6).is_valid(), "{:?}", mk(40, 6).invalid_causes);
    let ttft_bad = mk(20, 6);
    assert!(
        ttft_bad
            .invalid_causes
            .contains(&InvalidCause::TtftOverBound {
                percentile: 0.99,
                value_ns: 30 * MS,
                bound_ns: 20 * MS
            })
    );
    assert!(
        ttft_bad
            .invalid_causes
            .contains(&InvalidCause::EarlyStoppingNotMet {
                series: "ttft".into()
            })
    );
    let tpot_bad = mk(40, 4);
    assert!(
        tpot_bad
            .invalid_causes
            .contains(&InvalidCause::TpotOverBound {
                percentile: 0.99,
                value_ns: 5 * MS,
                bound_ns: 4 * MS
            })
    );
    assert!(
        !tpot_bad
            .invalid_causes
            .iter()
            .any(|c| matches!(c, InvalidCause::TtftOverBound { .. }))
    );
    let text = tpot_bad.summary_text(&Default::default());
    assert!(text.contains("TPOT constrain not met"));
}

#[test]
fn zero_and_one_token_queries_leave_tpot_undefined() {
    for tokens in [0u64, 1] {
        let mut sut = SimSut::new(Box::new(move |_| {
            if tokens == 0 {
                SimQuery::plain(7 * MS)
            } else {
                SimQuery::tokens(7 * MS, 1, 0)
            }
        }));
        let r = run(
            &mut sut,
            &token_settings(Scenario::SingleStream),
            &mut TestQsl::new(100, 10),
        );
        let p = r.performance.as_ref().unwrap();
        assert_eq!(
            p.tpot_undefined_count, p.queries_completed,
            "tokens={tokens}"
        );
        assert!(p.tpot.is_none());
        assert_eq!(p.total_tokens, tokens * p.queries_completed);
        if tokens == 0 {
            assert!(r.invalid_causes.contains(&InvalidCause::FirstTokenMissing {
                queries: p.queries_completed
            }));
        } else {
            assert_eq!(p.ttft.as_ref().unwrap().max, 7 * MS);
        }
        // Logs render without dividing by zero.
        let text = r.summary_text(&Default::default());
        assert!(text.contains(&format!(
            "Queries with TPOT undefined     : {}",
            p.queries_completed
        )));
    }
}

#[test]
fn hung_query_times_out_in_every_scenario() {
    for scenario in [Scenario::SingleStream, Scenario::Server, Scenario::Offline] {
        let mut s = ss(50, 100);
        s.scenario = scenario;
        s.server_target_qps = 100.0;
        s.offline_expected_qps = 10.0;
        s.query_timeout_ms = 2_000;
        let mut sut = SimSut::new(Box::new(|id| {
            if id == 5 {
                SimQuery {
                    hang: true,
                    ..SimQuery::plain(0)
                }
            } else {
                SimQuery::plain(MS)
            }
        }));
        sut.parallel = true;
        let r = run(&mut sut, &s, &mut TestQsl::new(100, 20));
        let p = r.performance.as_ref().unwrap();
        assert_eq!(
            p.end_reason,
            pocketperf_scenarios::EndReason::Timeout,
            "{scenario}"
        );
        assert_eq!(p.timed_out_query, Some(5));
        let sample5 = sut.issued[5].sample_index;
        assert!(
            r.invalid_causes.contains(&InvalidCause::SutTimeout {
                query_id: 5,
                sample_index: sample5,
                timeout_ms: 2000
            }),
            "{scenario}: {:?}",
            r.invalid_causes
        );
        assert_eq!(
            p.queries_completed,
            p.queries_issued - 1,
            "{scenario}: only query 5 hung"
        );
        if scenario == Scenario::SingleStream {
            assert_eq!(p.queries_issued, 6, "SingleStream stops at the hung query");
        }
        let text = r.summary_text(&Default::default());
        assert!(text.contains("1 ERROR encountered. See detailed log."));
    }
}

#[test]
fn qsl_smaller_than_performance_count_is_an_error() {
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    let clock = VirtualClock::new();
    let e = run_test(&mut sut, &mut TestQsl::new(10, 20), &ss(10, 10), &clock).unwrap_err();
    assert!(
        matches!(
            e,
            Error::QslTooSmall {
                total: 10,
                needed: 20,
                ..
            }
        ),
        "{e}"
    );
    let mut s = ss(10, 10);
    s.performance_sample_count_override = 11;
    let e = run_test(&mut sut, &mut TestQsl::new(10, 5), &s, &clock).unwrap_err();
    assert!(
        matches!(
            e,
            Error::QslTooSmall {
                total: 10,
                needed: 11,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn offline_batch_size_and_throughput() {
    // LoadGen's reference Offline run: expected 176.499 qps, 2 s => floor(1.1*352.998) = 388.
    let mut s = ss(1, 2000);
    s.scenario = Scenario::Offline;
    s.offline_expected_qps = 176.499;
    assert_eq!(pocketperf_scenarios::offline_sample_count(&s, 256), 388);
    // One server at 10 ms per sample, 100 expected qps: 220 samples, the last done at 2.2 s.
    s.offline_expected_qps = 100.0;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(10 * MS)));
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    assert!(r.is_valid(), "{:?}", r.invalid_causes);
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.queries_issued, 220);
    assert_eq!(p.latency.as_ref().unwrap().max, 2200 * MS);
    assert!((p.samples_per_second - 100.0).abs() < 1e-9);
    // Too little expected work: 1.1 * 50 * 2 = 110 samples end at 1.1 s < 2 s.
    s.offline_expected_qps = 50.0;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(10 * MS)));
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    assert_eq!(
        r.invalid_causes,
        vec![InvalidCause::MinDurationNotMet {
            required_ns: 2000 * MS,
            actual_ns: 1100 * MS
        }]
    );
}

#[test]
fn equal_issue_uses_every_sample_equally() {
    let mut s = ss(25, 1);
    s.sample_concatenate_permutation = true;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    let r = run(&mut sut, &s, &mut TestQsl::new(50, 10));
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.queries_issued, 30, "rounded up to whole passes of 10");
    let mut counts = std::collections::HashMap::new();
    for q in r.query_records() {
        *counts.entry(q.sample_index).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), 10);
    assert!(counts.values().all(|&c| c == 3));
    // Offline rounds its batch up the same way.
    s.scenario = Scenario::Offline;
    s.offline_expected_qps = 1.0;
    s.min_query_count = 25;
    assert_eq!(pocketperf_scenarios::offline_sample_count(&s, 10), 30);
}

#[test]
fn same_seeds_same_run_different_seed_different_samples() {
    let go = |seed: u64| {
        let mut s = ss(64, 1);
        s.sample_index_rng_seed = seed;
        let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
        let r = run(&mut sut, &s, &mut TestQsl::new(1000, 100));
        r.query_records()
            .map(|q| q.sample_index)
            .collect::<Vec<_>>()
    };
    assert_eq!(go(1), go(1));
    assert_ne!(go(1), go(2));
}

#[test]
fn accuracy_mode_runs_every_sample_once_and_logs_outputs() {
    let mut s = ss(10, 10);
    s.mode = pocketperf_scenarios::TestMode::AccuracyOnly;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::tokens(MS, 3, MS)));
    sut.output = true;
    let mut qsl = TestQsl::new(7, 3);
    let r = run(&mut sut, &s, &mut qsl);
    let acc = r.accuracy.as_ref().unwrap();
    assert_eq!(acc.len(), 7);
    for (i, e) in acc.iter().enumerate() {
        assert_eq!(e.seq_id, i as u64);
        assert_eq!(e.data, e.qsl_idx.to_le_bytes().to_vec());
        assert_eq!(e.token_count, Some(3));
    }
    // Every sample once, issued set by set (sets of the performance count, in load order,
    // each in its own seeded order).
    let mut idx: Vec<u64> = acc.iter().map(|e| e.qsl_idx).collect();
    assert_eq!(qsl.loaded.len(), 7);
    for (set, issued) in qsl.loaded.chunks(3).zip(idx.chunks(3)) {
        let (mut a, mut b) = (set.to_vec(), issued.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
    idx.sort_unstable();
    assert_eq!(idx, (0..7).collect::<Vec<u64>>());
    assert!(r.performance.is_none());
    let json = r.accuracy_json();
    let first = acc[0].qsl_idx;
    assert!(json.starts_with(&format!(
        "[\n{{ \"seq_id\" : 0, \"qsl_idx\" : {first}, \"data\" : \"{first:02x}00000000000000\", \"token_count\" : 3 }},\n"
    )));
    assert!(json.ends_with(" }\n]\n"));
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        parsed[1]["data"],
        format!("{:02x}00000000000000", acc[1].qsl_idx)
    );
}

/// A SUT on a shared virtual clock that, after finishing each query, keeps the engine's
/// thread busy for `gap_ns` more (harness overhead between queries, as a slow callback
/// or logging would cause).
struct GappySut {
    clock: std::rc::Rc<VirtualClock>,
    ttft_ns: u64,
    tokens: u64,
    gap_ns: u64,
    per_token_ns: u64,
}

impl pocketperf_scenarios::SystemUnderTest for GappySut {
    fn name(&self) -> &str {
        "GappySUT"
    }
    fn issue_queries(
        &mut self,
        queries: &[pocketperf_scenarios::Query],
        r: &mut pocketperf_scenarios::Responder<'_>,
    ) {
        for q in queries {
            let t0 = r.now_ns();
            for k in 0..self.tokens {
                r.token_at(q.id, t0 + self.ttft_ns + k * self.per_token_ns);
            }
            let done = t0 + self.ttft_ns + (self.tokens - 1) * self.per_token_ns;
            r.complete_at(q.id, done, self.tokens, None);
            self.clock.set(done + self.gap_ns);
        }
    }
}

#[test]
fn tokens_per_second_is_free_of_harness_overhead() {
    // 20 ms to the first token, 11 tokens 4 ms apart: 60 ms per query, then 40 ms of
    // harness time before the next issue. 100 queries (min duration 1 s is met by the
    // 100th issue at 99 × 100 ms).
    let clock = std::rc::Rc::new(VirtualClock::new());
    let mut sut = GappySut {
        clock: clock.clone(),
        ttft_ns: 20 * MS,
        tokens: 11,
        gap_ns: 40 * MS,
        per_token_ns: 4 * MS,
    };
    let s = token_settings(Scenario::SingleStream);
    let r = run_test(&mut sut, &mut TestQsl::new(100, 10), &s, &*clock).unwrap();
    assert!(r.is_valid(), "{:?}", r.invalid_causes);
    let p = r.performance.as_ref().unwrap();
    let n = p.queries_issued;
    assert_eq!(n, 100);
    assert_eq!(p.total_tokens, 1100);
    // Without overhead: 11 tokens per 60 ms of SUT time.
    assert!((p.tokens_per_second - 11.0 / 0.060).abs() < 1e-9);
    // LoadGen's "w/ loadgen overhead": 1100 tokens over the last issue at 99 × 100 ms.
    assert!((p.tokens_per_second_with_overhead - 1100.0 / 9.9).abs() < 1e-9);
    // Completed: 1100 tokens over the last completion at 99 × 100 ms + 60 ms.
    assert!((p.completed_tokens_per_second - 1100.0 / 9.96).abs() < 1e-9);
    // TPOT = (60 − 20) / 10 = 4 ms; every inter-token gap is 4 ms; the harness gap is no
    // token's latency.
    assert_eq!(p.tpot.as_ref().unwrap().max, 4 * MS);
    let itl = p.inter_token.as_ref().unwrap();
    assert_eq!(
        (itl.count, itl.max, itl.at(0.99)),
        (1000, 4 * MS, Some(4 * MS))
    );
    let text = r.summary_text(&Default::default());
    assert!(
        text.contains("TPS w/ loadgen overhead         : 111.11\n"),
        "{text}"
    );
    assert!(
        text.contains("TPS w/o loadgen overhead        : 183.33\n"),
        "{text}"
    );
}

#[test]
fn sut_failures_are_reported_and_excluded() {
    struct Failing;
    impl pocketperf_scenarios::SystemUnderTest for Failing {
        fn name(&self) -> &str {
            "Failing"
        }
        fn issue_queries(
            &mut self,
            queries: &[pocketperf_scenarios::Query],
            r: &mut pocketperf_scenarios::Responder<'_>,
        ) {
            for q in queries {
                if q.id % 10 == 9 {
                    r.fail(q.id, "context overflow");
                } else {
                    let t = r.now_ns() + MS;
                    r.complete_at(q.id, t, 0, None);
                }
            }
        }
    }
    // Offline batch of 100: 10 fail, 90 complete at 1 ms.
    let mut s = ss(100, 0);
    s.scenario = Scenario::Offline;
    let r = run(&mut Failing, &s, &mut TestQsl::new(100, 100));
    let p = r.performance.as_ref().unwrap();
    assert_eq!((p.queries_issued, p.queries_completed), (100, 90));
    assert_eq!(p.num_failed, 10);
    assert_eq!(p.latency.as_ref().unwrap().count, 90);
    assert_eq!(
        r.invalid_causes,
        vec![
            InvalidCause::MinQueriesNotMet {
                required: 100,
                completed: 90
            },
            InvalidCause::SutFailed {
                count: 10,
                first: "query 9: context overflow".into()
            },
        ]
    );
    let text = r.summary_text(&Default::default());
    assert!(
        text.contains("10 ERRORS encountered. See detailed log."),
        "{text}"
    );
    assert!(
        r.detail_text(&Default::default())
            .contains("\"value\": \"query 19: context overflow\"")
    );
}

#[test]
fn offline_and_server_invalid_causes_closed_form() {
    // Offline capped by max_query_count: 1.1 × 100/s × 2 s = 220 samples wanted, 150
    // issued; one server at 10 ms each ends at 1.5 s.
    let mut s = ss(1, 2000);
    s.scenario = Scenario::Offline;
    s.offline_expected_qps = 100.0;
    s.max_query_count = 150;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(10 * MS)));
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.queries_issued, 150);
    assert_eq!(p.end_reason, pocketperf_scenarios::EndReason::MaxQueries);
    assert_eq!(
        r.invalid_causes,
        vec![
            InvalidCause::MinDurationNotMet {
                required_ns: 2000 * MS,
                actual_ns: 1500 * MS
            },
            InvalidCause::MinQueriesNotMet {
                required: 220,
                completed: 150
            },
        ]
    );
    // Latency i = 10 ms × (i + 1); p90 = sorted[floor(150 × 0.9) = 135] = 1360 ms.
    let lat = p.latency.as_ref().unwrap();
    assert_eq!(lat.at(0.9), Some(1360 * MS));
    assert_eq!(lat.at(0.5), Some(760 * MS));
    assert_eq!(lat.mean, 755 * MS);
    assert!((p.samples_per_second - 100.0).abs() < 1e-9);

    // Server, too few queries: max_query_count 100 < min 500; every latency 1 ms under a
    // 10 ms bound; p99 early stopping needs h(0) = 459 > 100 queries.
    let mut s = server(100.0, 10, 500, 100);
    s.max_query_count = 100;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    sut.parallel = true;
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    let h0 = early_stopping::min_passing_queries(0.99, 0).unwrap();
    assert_eq!(h0, 459, "0.99^459 < 0.01 <= 0.99^458");
    assert_eq!(r.performance.as_ref().unwrap().queries_issued, 100);
    assert!(r.invalid_causes.contains(&InvalidCause::MinQueriesNotMet {
        required: 500,
        completed: 100
    }));
    assert!(
        r.invalid_causes
            .contains(&InvalidCause::EarlyStoppingNotMet {
                series: "latency".into()
            })
    );
    let es = r
        .performance
        .as_ref()
        .unwrap()
        .early_stopping
        .clone()
        .unwrap();
    assert!(
        es.text
            .contains("Would need to run at least 359 more queries"),
        "{}",
        es.text
    );

    // Server, too short: max_duration 2 s < min_duration 5 s. The last scheduled arrival
    // is the first past 2 s, and the run is measured to it. At p90 the ~200
    // queries, all under the bound, satisfy early stopping (h(0) = 44).
    let mut s = server(100.0, 10, 10, 5000);
    s.max_duration_ms = 2000;
    s.server_target_latency_percentile = 0.9;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    sut.parallel = true;
    let r = run(&mut sut, &s, &mut TestQsl::new(1000, 256));
    let recs: Vec<_> = r.query_records().collect();
    let last = recs.last().unwrap().issue_ns;
    let before = recs[recs.len() - 2].issue_ns;
    assert!(before <= 2000 * MS && last > 2000 * MS, "{before} {last}");
    assert_eq!(
        r.invalid_causes,
        vec![InvalidCause::MinDurationNotMet {
            required_ns: 5000 * MS,
            actual_ns: last
        }]
    );
    assert_eq!(
        r.performance.as_ref().unwrap().end_reason,
        pocketperf_scenarios::EndReason::MaxDuration
    );
}
