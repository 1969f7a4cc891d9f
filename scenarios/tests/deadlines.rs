//! Every wait of the scenario engine is bounded by the run's own deadline (issue 19): a
//! Server rate so low that the next arrival lies far past `max_duration` ends the run instead
//! of waiting for it. Virtual time, so a regression shows as a query issued past the bound
//! rather than as a hang.

mod common;

use common::{SimQuery, SimSut, TestQsl};
use pocketperf_scenarios::{EndReason, Scenario, TestSettings, VirtualClock, run_test};

const MS: u64 = 1_000_000;

#[test]
fn a_server_arrival_past_twice_max_duration_is_not_waited_for() {
    let mut s = TestSettings::new(Scenario::Server);
    // 0.01 queries/s (the lowest rate accepted): arrivals 100 s apart on average, in a run
    // of at most 1 s.
    s.server_target_qps = 0.01;
    s.server_target_latency_ns = 10 * MS;
    s.min_query_count = 1;
    s.min_duration_ms = 500;
    s.max_duration_ms = 1000;
    s.qsl_rng_seed = 7;
    s.sample_index_rng_seed = 11;
    s.schedule_rng_seed = 13;
    let mut sut = SimSut::new(Box::new(|_| SimQuery::plain(MS)));
    sut.parallel = true;
    let clock = VirtualClock::new();
    let r = run_test(&mut sut, &mut TestQsl::new(100, 16), &s, &clock).expect("run");
    // The run ended by its deadline, issued nothing past it, and its clock never ran past
    // twice max_duration (the old engine waited for the first arrival, tens of seconds on).
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.end_reason, EndReason::MaxDuration);
    assert!(r.query_records().all(|q| q.issue_ns <= 2000 * MS));
    assert!(
        pocketperf_scenarios::Clock::now_ns(&clock) <= 2000 * MS,
        "{}",
        pocketperf_scenarios::Clock::now_ns(&clock)
    );
    assert!(!r.is_valid());
}
