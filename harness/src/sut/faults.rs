//! Page faults per query: [`FaultMeter`] wraps a system under test and reads the fault
//! counters of the process that does the work ([`FaultSource`]: this process for the
//! in-process SUT, the child for `--sut process`) around every call the scenario engine
//! makes. A call's faults belong to the queries it issued; a `flush_queries` call's to the
//! queries of the issue call before it (an SUT that decodes at flush, such as Offline's
//! batch or any SUT during warm-up). A query has faults of its own when it was the only
//! query of its call; queries issued together share one figure, kept per call.

use pocketperf_scenarios::{Query, Responder, SystemUnderTest};
use serde::Serialize;

use crate::telemetry::faults::{FaultCounts, SutPid};

/// The process whose faults a SUT's work raises, and its counters now.
pub trait FaultSource {
    /// `(pid, counters)` of the process doing the work, `None` when there is none (a child
    /// being restarted) or it cannot be read.
    fn faults_now(&mut self) -> Option<(u32, FaultCounts)>;
}

/// The faults a wrapped run raised.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultLog {
    /// Per query in issue order (warm-up queries first): `Some` when it was issued alone.
    pub per_query: Vec<Option<FaultCounts>>,
    /// Pid the first reading came from.
    pub pid: Option<u32>,
    /// From wrapping to [`FaultMeter::finish`], when the process stayed the same.
    pub total: Option<FaultCounts>,
}

struct Call {
    queries: usize,
    first: usize,
    faults: Option<FaultCounts>,
}

/// A SUT wrapper that records page faults per engine call (see the module docs).
pub struct FaultMeter<'s, S: SystemUnderTest + FaultSource + ?Sized> {
    sut: &'s mut S,
    calls: Vec<Call>,
    issued: usize,
    start: Option<(u32, FaultCounts)>,
    /// Called once, after the first call that completed work (the first query).
    after_first: Option<Box<dyn FnMut() + 's>>,
    /// Told the pid of every reading (the telemetry's `faults.*` columns follow it).
    pid: Option<SutPid>,
}

impl<'s, S: SystemUnderTest + FaultSource + ?Sized> FaultMeter<'s, S> {
    pub fn new(sut: &'s mut S) -> Self {
        let start = sut.faults_now();
        FaultMeter {
            sut,
            calls: Vec::new(),
            issued: 0,
            start,
            after_first: None,
            pid: None,
        }
    }

    /// Keeps `pid` set to the process of the latest reading (0 when a reading found none),
    /// starting with the first.
    pub fn publish_pid(mut self, pid: SutPid) -> Self {
        pid.set(self.start.map_or(0, |(p, _)| p));
        self.pid = Some(pid);
        self
    }

    fn read(&mut self) -> Option<(u32, FaultCounts)> {
        let r = self.sut.faults_now();
        if let Some(p) = &self.pid {
            p.set(r.map_or(0, |(pid, _)| pid));
        }
        r
    }

    /// Runs `f` once, after the first query's work: after the first `flush_queries`, before
    /// the second query is issued, or at [`FaultMeter::finish`], whichever comes first (e.g.
    /// a residency probe; it runs outside every measured call).
    pub fn after_first_query(mut self, f: impl FnMut() + 's) -> Self {
        self.after_first = Some(Box::new(f));
        self
    }

    fn measured<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> (R, Option<FaultCounts>) {
        let before = self.read();
        let r = f(self.sut);
        let after = self.read();
        let delta = match (before, after) {
            // The same process before and after (a restarted child's counters start over).
            (Some((p0, a)), Some((p1, b))) if p0 == p1 => Some(b.since(&a)),
            _ => None,
        };
        (r, delta)
    }

    fn first_done(&mut self) {
        if let Some(mut f) = self.after_first.take() {
            f();
        }
    }

    /// The per-query record.
    pub fn finish(mut self) -> FaultLog {
        self.first_done();
        let total = match (self.start, self.sut.faults_now()) {
            (Some((p0, a)), Some((p1, b))) if p0 == p1 => Some(b.since(&a)),
            _ => None,
        };
        let mut per_query = vec![None; self.issued];
        for c in &self.calls {
            if c.queries == 1 {
                per_query[c.first] = c.faults;
            }
        }
        FaultLog {
            per_query,
            pid: self.start.map(|(p, _)| p),
            total,
        }
    }
}

impl<S: SystemUnderTest + FaultSource + ?Sized> SystemUnderTest for FaultMeter<'_, S> {
    fn name(&self) -> &str {
        self.sut.name()
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        // Queries are issued after the previous one completed (SingleStream, warm-up) or
        // were answered inside their own call (the synchronous SUTs of Server): the first
        // query's work is over when a second is issued.
        if self.issued > 0 {
            self.first_done();
        }
        let ((), faults) = self.measured(|s| s.issue_queries(queries, responder));
        self.calls.push(Call {
            queries: queries.len(),
            first: self.issued,
            faults,
        });
        self.issued += queries.len();
    }

    fn flush_queries(&mut self, responder: &mut Responder<'_>) {
        let ((), faults) = self.measured(|s| s.flush_queries(responder));
        if let Some(last) = self.calls.last_mut() {
            last.faults = match (last.faults, faults) {
                (Some(a), Some(b)) => Some(FaultCounts {
                    minor: a.minor + b.minor,
                    major: a.major + b.major,
                }),
                _ => None,
            };
        }
        self.first_done();
    }

    fn poll(&mut self, responder: &mut Responder<'_>) {
        self.sut.poll(responder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocketperf_scenarios::{NullQsl, TestSettings, VirtualClock, run_test_with_warmup};
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    /// Completes queries at once and raises 10 minor faults and 1 major per query in its
    /// own counters; decodes at flush when `at_flush`.
    struct Counting {
        counts: FaultCounts,
        at_flush: bool,
        pending: Vec<Query>,
        /// Queries completed.
        done: Rc<Cell<u64>>,
    }

    fn settings(scenario: pocketperf_scenarios::Scenario, n: u64) -> TestSettings {
        let mut s = TestSettings::new(scenario);
        s.min_query_count = n;
        s.min_duration_ms = 0;
        s.offline_expected_qps = 1.0;
        s
    }

    fn qsl() -> NullQsl {
        NullQsl {
            total: 30,
            performance: 30,
        }
    }

    fn clock() -> VirtualClock {
        VirtualClock::new()
    }

    impl Counting {
        fn work(&mut self, qs: &[Query], r: &mut Responder<'_>) {
            for q in qs {
                self.counts.minor += 10;
                self.counts.major += 1;
                r.complete(q.id, 1, None);
                self.done.set(self.done.get() + 1);
            }
        }
    }

    impl SystemUnderTest for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn issue_queries(&mut self, qs: &[Query], r: &mut Responder<'_>) {
            if self.at_flush {
                self.pending.extend_from_slice(qs);
            } else {
                self.work(qs, r);
            }
        }
        fn flush_queries(&mut self, r: &mut Responder<'_>) {
            let p = std::mem::take(&mut self.pending);
            self.work(&p, r);
        }
    }

    impl FaultSource for Counting {
        fn faults_now(&mut self) -> Option<(u32, FaultCounts)> {
            Some((42, self.counts))
        }
    }

    fn run(scenario: pocketperf_scenarios::Scenario, at_flush: bool) -> (FaultLog, u64) {
        let mut sut = Counting {
            counts: FaultCounts::default(),
            at_flush,
            pending: Vec::new(),
            done: Rc::new(Cell::new(0)),
        };
        let mut meter = FaultMeter::new(&mut sut);
        let r = run_test_with_warmup(&mut meter, &mut qsl(), &settings(scenario, 20), &clock(), 2)
            .unwrap();
        let log = meter.finish();
        (log, r.performance.unwrap().queries_issued)
    }

    #[test]
    fn the_after_first_hook_runs_once_when_the_first_query_is_done() {
        use pocketperf_scenarios::Scenario;
        // (scenario, decodes at flush, warm-up, completed queries the hook must see)
        for (scenario, at_flush, warmup, want) in [
            (Scenario::SingleStream, false, 0, 1),
            (Scenario::SingleStream, false, 2, 1),
            (Scenario::Offline, true, 2, 1),
            // Offline's one batch of 5 is the first work.
            (Scenario::Offline, true, 0, 5),
        ] {
            let done = Rc::new(Cell::new(0u64));
            let mut sut = Counting {
                counts: FaultCounts::default(),
                at_flush,
                pending: Vec::new(),
                done: done.clone(),
            };
            let seen = RefCell::new(Vec::new());
            let mut meter = FaultMeter::new(&mut sut).after_first_query(|| {
                seen.borrow_mut().push(done.get());
            });
            run_test_with_warmup(
                &mut meter,
                &mut qsl(),
                &settings(scenario, 5),
                &clock(),
                warmup,
            )
            .unwrap();
            meter.finish();
            assert_eq!(*seen.borrow(), [want], "{scenario:?} warm-up {warmup}");
        }
    }

    #[test]
    fn one_query_calls_get_their_own_faults_and_batches_share() {
        use pocketperf_scenarios::Scenario;
        let (log, n) = run(Scenario::SingleStream, false);
        assert_eq!(log.pid, Some(42));
        assert_eq!(log.total.unwrap().major, 2 + n);
        assert_eq!(log.per_query.len() as u64, 2 + n);
        let one = Some(FaultCounts {
            minor: 10,
            major: 1,
        });
        assert!(log.per_query.iter().all(|f| *f == one), "{log:?}");
        // Offline decodes at flush: the warm-up queries (issued alone, then flushed) have
        // their own; the timed batch shares one figure, so none of its queries has one.
        let (log, n) = run(Scenario::Offline, true);
        assert_eq!(log.per_query.len() as u64, 2 + n);
        assert_eq!(&log.per_query[..2], &[one, one]);
        assert!(log.per_query[2..].iter().all(Option::is_none));
    }
}
