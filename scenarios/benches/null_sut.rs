//! Scenario-engine overhead with a null SUT (completes each query as it is issued):
//! SingleStream cost per query (issue, record, complete, stop rules), and Offline cost per
//! sample (generate, issue, complete, analyze). `pocketperf scenario-bench` reports the same
//! figures as LoadGen does, beside LoadGen's own null SUT (bench/loadgen-compare.sh).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pocketperf_scenarios::{NullQsl, NullSut, RealClock, Scenario, TestSettings, run_test};

fn settings(scenario: Scenario, queries: u64) -> TestSettings {
    let mut s = TestSettings::new(scenario);
    s.min_query_count = queries;
    s.max_query_count = queries;
    s.min_duration_ms = 0;
    s.offline_expected_qps = 1.0;
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("null_sut");
    g.sample_size(10);
    for (scenario, queries) in [
        (Scenario::SingleStream, 100_000u64),
        (Scenario::Offline, 1_000_000),
    ] {
        let s = settings(scenario, queries);
        g.throughput(Throughput::Elements(queries));
        g.bench_with_input(BenchmarkId::new(scenario.as_str(), queries), &s, |b, s| {
            b.iter(|| {
                let mut sut = NullSut::new();
                let mut qsl = NullQsl {
                    total: 1024,
                    performance: 1024,
                };
                let r =
                    run_test(&mut sut, &mut qsl, s, &RealClock::new()).expect("null run succeeds");
                assert_eq!(
                    r.performance.as_ref().map(|p| p.queries_completed),
                    Some(queries)
                );
                r
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
