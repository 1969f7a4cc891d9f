//! Watching a run while it happens: the engine tells a [`Progress`] observer when a pass
//! starts, each token an SUT stamps and each query that ends, so a caller can show how far
//! the run is (the harness's terminal bar and heartbeat lines). The observer sees events on
//! the engine's thread, inside the SUT's calls, so it must be cheap (a few atomic adds).
//! It never changes what the engine does or records.

/// Which pass an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The untimed warm-up queries ([`crate::warmup`]).
    Warmup,
    /// The timed performance pass.
    Timed,
}

/// An observer of a run (every method has an empty default).
pub trait Progress {
    /// A pass begins at `t_ns` on the run clock. `queries`: the pass's query count when it is
    /// fixed in advance (warm-up, Offline's batch), `None` when stop rules end it
    /// (SingleStream, Server).
    fn pass_started(&self, _phase: Phase, _queries: Option<u64>, _t_ns: u64) {}
    /// One output token of a timed query was stamped ([`crate::Responder::token`]).
    fn token(&self) {}
    /// A timed query ended (completed or failed) with `tokens` output tokens, `stamped` of
    /// which were reported one by one through [`Progress::token`] before.
    fn query_done(&self, _tokens: u64, _stamped: u64) {}
}

/// The observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NullQsl, Scenario, SystemUnderTest, TestSettings, VirtualClock};
    use crate::{Query, Responder, run_test_observed};
    use std::cell::{Cell, RefCell};

    /// Streams `per` tokens for each query except every third, which reports its count only
    /// at completion.
    struct Streaming {
        per: u64,
    }

    impl SystemUnderTest for Streaming {
        fn name(&self) -> &str {
            "streaming"
        }
        fn issue_queries(&mut self, qs: &[Query], r: &mut Responder<'_>) {
            for q in qs {
                if q.id % 3 == 2 {
                    r.complete(q.id, self.per, None);
                } else {
                    for _ in 0..self.per {
                        r.token(q.id);
                    }
                    r.complete(q.id, 0, None);
                }
            }
        }
    }

    #[derive(Default)]
    struct Seen {
        passes: RefCell<Vec<(Phase, Option<u64>)>>,
        tokens: Cell<u64>,
        done: Cell<u64>,
        unstamped: Cell<u64>,
    }

    impl Progress for Seen {
        fn pass_started(&self, phase: Phase, queries: Option<u64>, _t: u64) {
            self.passes.borrow_mut().push((phase, queries));
        }
        fn token(&self) {
            self.tokens.set(self.tokens.get() + 1);
        }
        fn query_done(&self, tokens: u64, stamped: u64) {
            self.done.set(self.done.get() + 1);
            self.unstamped.set(self.unstamped.get() + tokens - stamped);
        }
    }

    fn run(scenario: Scenario, warmup: u64) -> (Seen, crate::TestResult) {
        let mut s = TestSettings::new(scenario);
        s.min_query_count = 9;
        s.max_query_count = 9;
        s.min_duration_ms = 0;
        s.offline_expected_qps = 1.0;
        let mut qsl = NullQsl {
            total: 9,
            performance: 9,
        };
        let seen = Seen::default();
        let r = run_test_observed(
            &mut Streaming { per: 4 },
            &mut qsl,
            &s,
            &VirtualClock::new(),
            warmup,
            &seen,
        )
        .unwrap();
        (seen, r)
    }

    #[test]
    fn the_observer_sees_every_timed_query_and_token_and_no_warmup_work() {
        for scenario in [Scenario::SingleStream, Scenario::Offline] {
            let (seen, r) = run(scenario, 2);
            let p = r.performance.as_ref().unwrap();
            assert_eq!(seen.done.get(), p.queries_completed, "{scenario:?}");
            let tokens: u64 = r.query_records().map(|q| q.tokens).sum();
            assert_eq!(
                seen.tokens.get() + seen.unstamped.get(),
                tokens,
                "{scenario:?}"
            );
            // Three of the nine queries report their four tokens at completion only.
            assert_eq!(seen.unstamped.get(), 12, "{scenario:?}");
            let planned = (scenario == Scenario::Offline).then_some(p.queries_issued);
            assert_eq!(
                *seen.passes.borrow(),
                vec![(Phase::Warmup, Some(2)), (Phase::Timed, planned)],
                "{scenario:?}"
            );
        }
    }
}
