//! The scenario engine: loads the performance sample set, issues queries under
//! SingleStream, Offline or Server rules (LoadGen loadgen.cc semantics), waits for the SUT,
//! enforces stop rules and the query timeout, and hands the raw records to
//! [`crate::results`].
//!
//! Stop rules (LoadGen's issue_query_controller.cc), checked after each issue: issuing
//! continues until the query count reaches `min_query_count` and the last issued
//! (SingleStream) or scheduled (Server) query lies at or after `min_duration`; it stops early
//! at `max_query_count`, or once the last one lies past `max_duration`. With equal issue the count is
//! also rounded up to a whole number of passes over the loaded set. Offline issues
//! `max(min_query_count, floor(1.1 × expected_qps × min_duration))` samples at once, as
//! LoadGen sizes its single query. One bound LoadGen lacks: a Server arrival scheduled past
//! twice `max_duration` is not waited for (the run ends there, `MaxDuration`), so no rate
//! makes a run wait longer than its own deadline allows.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::progress::{NoProgress, Phase, Progress};
use crate::results::{AccuracyEntry, AccuracyPass, EndReason, PassRecords, TestResult};
use crate::sampling::{
    ArrivalSchedule, SamplePlan, SampleSeq, accuracy_order, accuracy_sets, offline_sample_count,
    performance_set,
};
use crate::settings::{Scenario, TestSettings};
use crate::sut::{Query, QuerySampleLibrary, Records, Responder, SystemUnderTest};
use crate::warmup::WarmupQuery;

/// Largest slice of queries handed to one `issue_queries` call in Offline.
pub const OFFLINE_ISSUE_CHUNK: usize = 16_384;

struct Waiter<'c> {
    clock: &'c dyn Clock,
    timeout_ns: Option<u64>,
    /// The observer of the pass this waiter serves.
    progress: &'c dyn Progress,
}

enum WaitOutcome {
    Done,
    TimedOut(u64),
}

impl Waiter<'_> {
    /// Polls the SUT until `done` holds, or until the oldest pending query (found from
    /// `oldest`) exceeds the timeout. Returns the timed-out query id.
    fn wait(
        &self,
        sut: &mut dyn SystemUnderTest,
        rec: &mut Records,
        oldest: &mut usize,
        done: &dyn Fn(&Records) -> bool,
    ) -> WaitOutcome {
        let mut spins = 0u32;
        loop {
            if done(rec) {
                return WaitOutcome::Done;
            }
            sut.poll(&mut Responder {
                clock: self.clock,
                rec,
                progress: self.progress,
            });
            if done(rec) {
                return WaitOutcome::Done;
            }
            while *oldest < rec.complete.len() && rec.is_complete(*oldest) {
                *oldest += 1;
            }
            if *oldest >= rec.complete.len() {
                // Nothing pending; the condition must be about something else.
                return WaitOutcome::Done;
            }
            let deadline = self
                .timeout_ns
                .map(|t| rec.issue_of(*oldest).saturating_add(t));
            let now = self.clock.now_ns();
            if let Some(d) = deadline
                && now >= d
            {
                return WaitOutcome::TimedOut(*oldest as u64);
            }
            if self.clock.is_virtual() {
                match deadline {
                    Some(d) => self.clock.wait_until(d),
                    // Virtual time cannot move by itself: the SUT is stuck.
                    None => return WaitOutcome::TimedOut(*oldest as u64),
                }
            } else {
                spins += 1;
                if spins < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

fn stop_reason(
    s: &TestSettings,
    count: u64,
    last_rel: Option<u64>,
    loaded: u64,
) -> Option<EndReason> {
    if s.max_query_count > 0 && count >= s.max_query_count {
        return Some(EndReason::MaxQueries);
    }
    let min_dur_ns = s.min_duration_ms.saturating_mul(1_000_000);
    if let Some(rel) = last_rel {
        // LoadGen ends once the last issue lies strictly past max_duration.
        if s.max_duration_ms > 0 && rel > s.max_duration_ms.saturating_mul(1_000_000) {
            return Some(EndReason::MaxDuration);
        }
        let whole =
            !s.sample_concatenate_permutation || loaded == 0 || count.is_multiple_of(loaded);
        if count >= s.min_query_count && rel >= min_dur_ns && whole {
            return Some(EndReason::Natural);
        }
    }
    None
}

/// Runs the test `settings` describes: an accuracy pass, a performance pass, or both.
pub fn run_test(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    clock: &dyn Clock,
) -> Result<TestResult> {
    run_test_with_warmup(sut, qsl, settings, clock, 0)
}

/// [`run_test`] with `warmup` untimed queries before the performance pass
/// ([`crate::warmup`]): recorded in [`TestResult::warmup`], never in the pass.
pub fn run_test_with_warmup(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    clock: &dyn Clock,
    warmup: u64,
) -> Result<TestResult> {
    run_test_observed(sut, qsl, settings, clock, warmup, &NoProgress)
}

/// [`run_test_with_warmup`] with an observer ([`crate::progress`]) told when the warm-up and
/// the timed pass start, and of every token and ended query of the timed pass.
pub fn run_test_observed(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    clock: &dyn Clock,
    warmup: u64,
    progress: &dyn Progress,
) -> Result<TestResult> {
    settings.validate()?;
    let total = qsl.total_sample_count();
    let perf_count = if settings.performance_sample_count_override > 0 {
        settings.performance_sample_count_override
    } else {
        qsl.performance_sample_count()
    };
    if total == 0 || perf_count == 0 {
        return Err(Error::Settings {
            field: "performance_sample_count",
            value: format!("{perf_count} (QSL total {total})"),
            reason: "the query sample library must hold at least one sample".into(),
        });
    }
    if perf_count > total {
        return Err(Error::QslTooSmall {
            qsl: qsl.name().to_string(),
            total,
            needed: perf_count,
        });
    }
    let qsl_err = |what: &str, e: crate::sut::QslError| Error::Settings {
        field: "query_sample_library",
        value: what.to_string(),
        reason: e.to_string(),
    };
    let timeout_ns = (settings.query_timeout_ms > 0)
        .then(|| settings.query_timeout_ms.saturating_mul(1_000_000));
    let waiter = Waiter {
        clock,
        timeout_ns,
        progress,
    };
    let quiet = Waiter {
        clock,
        timeout_ns,
        progress: &NoProgress,
    };

    let plan = SamplePlan::new(settings, qsl.performance_sample_count());
    let accuracy_count = match settings.accuracy_sample_count_override {
        0 => total,
        n => n.min(total),
    };
    let mut accuracy = None;
    if settings.mode.runs_accuracy() {
        accuracy = Some(run_accuracy(
            sut,
            qsl,
            settings,
            perf_count,
            accuracy_count,
            &quiet,
            &qsl_err,
        )?);
    }
    let mut perf = None;
    let mut loaded = Vec::new();
    let mut warm = Vec::new();
    if settings.mode.runs_performance() {
        loaded = performance_set(total, perf_count, settings.qsl_rng_seed);
        qsl.load_samples(&loaded)
            .map_err(|e| qsl_err("load_samples", e))?;
        if warmup > 0 {
            progress.pass_started(Phase::Warmup, Some(warmup), clock.now_ns());
        }
        warm = run_warmup(sut, &loaded, warmup, &quiet)?;
        let p = match settings.scenario {
            Scenario::SingleStream => run_single_stream(sut, settings, &loaded, &plan, &waiter),
            Scenario::Server => run_server(sut, settings, &loaded, &plan, &waiter),
            Scenario::Offline => run_offline(sut, settings, &loaded, &plan, &waiter),
        };
        qsl.unload_samples(&loaded)
            .map_err(|e| qsl_err("unload_samples", e))?;
        perf = Some(p);
    }
    let mut result = TestResult::build(
        settings.clone(),
        sut.name().to_string(),
        qsl.name().to_string(),
        total,
        accuracy_count,
        perf_count,
        loaded,
        plan,
        perf,
        accuracy,
    );
    result.warmup = warm;
    Ok(result)
}

fn run_accuracy(
    sut: &mut dyn SystemUnderTest,
    qsl: &mut dyn QuerySampleLibrary,
    settings: &TestSettings,
    perf_count: u64,
    count: u64,
    waiter: &Waiter<'_>,
    qsl_err: &dyn Fn(&str, crate::sut::QslError) -> Error,
) -> Result<AccuracyPass> {
    let mut entries = Vec::with_capacity(count as usize);
    let sets = accuracy_sets(count, count, perf_count, settings.qsl_rng_seed);
    for set in sets {
        // LoadGen loads each set in its shuffled order and issues it in the order its
        // accuracy-mode query generation draws.
        let group: Vec<u64> = accuracy_order(set.len(), settings)
            .into_iter()
            .map(|i| set[i])
            .collect();
        qsl.load_samples(&set)
            .map_err(|e| qsl_err("load_samples", e))?;
        let mut rec = Records {
            keep_outputs: true,
            ..Records::default()
        };
        let now = waiter.clock.now_ns();
        let queries: Vec<Query> = group
            .iter()
            .enumerate()
            .map(|(i, &s)| Query {
                id: i as u64,
                sample_index: s,
            })
            .collect();
        for _ in &queries {
            rec.push(now);
        }
        let mut r = Responder {
            clock: waiter.clock,
            rec: &mut rec,
            progress: waiter.progress,
        };
        for chunk in queries.chunks(OFFLINE_ISSUE_CHUNK) {
            sut.issue_queries(chunk, &mut r);
        }
        sut.flush_queries(&mut r);
        let n = queries.len() as u64;
        let mut oldest = 0usize;
        let outcome = waiter.wait(sut, &mut rec, &mut oldest, &|r: &Records| r.completed >= n);
        let mut outputs = std::mem::take(&mut rec.outputs);
        outputs.sort_by_key(|(id, _)| *id);
        for (id, data) in outputs {
            let qsl_idx = group[id as usize];
            entries.push(AccuracyEntry {
                seq_id: entries.len() as u64,
                qsl_idx,
                data,
                token_count: (rec.tokens_of(id as usize) > 0).then(|| rec.tokens_of(id as usize)),
            });
        }
        qsl.unload_samples(&set)
            .map_err(|e| qsl_err("unload_samples", e))?;
        if let WaitOutcome::TimedOut(id) = outcome {
            return Ok((entries, Some((group[id as usize], id))));
        }
    }
    Ok((entries, None))
}

/// Issues `n` warm-up queries, one at a time, each waited for (with the run's query timeout).
fn run_warmup(
    sut: &mut dyn SystemUnderTest,
    loaded: &[u64],
    n: u64,
    waiter: &Waiter<'_>,
) -> Result<Vec<WarmupQuery>> {
    let clock = waiter.clock;
    let mut rec = Records::default();
    let mut oldest = 0usize;
    let mut out = Vec::with_capacity(n as usize);
    if loaded.is_empty() {
        return Ok(out);
    }
    for id in 0..n {
        let q = Query {
            id,
            sample_index: loaded[(id % loaded.len() as u64) as usize],
        };
        let now = clock.now_ns();
        rec.push(now);
        let mut r = Responder {
            clock,
            rec: &mut rec,
            progress: waiter.progress,
        };
        sut.issue_queries(std::slice::from_ref(&q), &mut r);
        sut.flush_queries(&mut r);
        let i = id as usize;
        if let WaitOutcome::TimedOut(_) =
            waiter.wait(sut, &mut rec, &mut oldest, &|r: &Records| r.is_complete(i))
        {
            return Err(Error::WarmupTimeout {
                query_id: id,
                sample_index: q.sample_index,
                timeout_ms: waiter.timeout_ns.map_or(0, |t| t / 1_000_000),
            });
        }
        if clock.is_virtual()
            && let Some(done) = rec.completion(i)
        {
            clock.wait_until(done);
        }
        out.push(WarmupQuery {
            id,
            sample_index: q.sample_index,
            issue_ns: now,
            first_token_ns: rec.first_token_of(i),
            complete_ns: rec.completion(i),
            tokens: rec.tokens_of(i),
        });
    }
    Ok(out)
}

fn finish(rec: Records, start: u64, end: EndReason, timed_out: Option<u64>) -> PassRecords {
    PassRecords {
        rec,
        start_ns: start,
        end,
        timed_out,
    }
}

fn run_single_stream(
    sut: &mut dyn SystemUnderTest,
    s: &TestSettings,
    loaded: &[u64],
    plan: &SamplePlan,
    waiter: &Waiter<'_>,
) -> PassRecords {
    let clock = waiter.clock;
    let mut seq = SampleSeq::new(loaded, plan);
    let mut rec = Records::default();
    let start = clock.now_ns();
    waiter.progress.pass_started(Phase::Timed, None, start);
    let mut last_rel = None;
    let mut oldest = 0usize;
    let k = loaded.len() as u64;
    loop {
        if let Some(reason) = stop_reason(s, rec.issued(), last_rel, k) {
            return finish(rec, start, reason, None);
        }
        let now = clock.now_ns();
        let id = rec.issued();
        let q = Query {
            id,
            sample_index: seq.next_sample(),
        };
        rec.push(now);
        last_rel = Some(now - start);
        sut.issue_queries(
            std::slice::from_ref(&q),
            &mut Responder {
                clock,
                rec: &mut rec,
                progress: waiter.progress,
            },
        );
        let i = id as usize;
        if !rec.is_complete(i)
            && let WaitOutcome::TimedOut(t) =
                waiter.wait(sut, &mut rec, &mut oldest, &|r: &Records| r.is_complete(i))
        {
            return finish(rec, start, EndReason::Timeout, Some(t));
        }
        // Virtual time jumps to the completion the SUT reported; real time is already there.
        if clock.is_virtual()
            && let Some(done) = rec.completion(i)
        {
            clock.wait_until(done);
        }
    }
}

fn run_server(
    sut: &mut dyn SystemUnderTest,
    s: &TestSettings,
    loaded: &[u64],
    plan: &SamplePlan,
    waiter: &Waiter<'_>,
) -> PassRecords {
    let clock = waiter.clock;
    let mut seq = SampleSeq::new(loaded, plan);
    let mut arrivals = ArrivalSchedule::new(s.server_target_qps, s.schedule_rng_seed);
    let mut rec = Records::default();
    let start = clock.now_ns();
    waiter.progress.pass_started(Phase::Timed, None, start);
    let mut last_rel = None;
    let mut oldest = 0usize;
    let k = loaded.len() as u64;
    // The wait for an arrival is bounded by the run's own deadline: LoadGen issues the first
    // arrival past max_duration and ends, but one scheduled later than twice max_duration
    // (a rate far below the run's length) is not waited for: the run ends at once.
    let max_ns = s.max_duration_ms.saturating_mul(1_000_000);
    let hard_end = (max_ns > 0).then(|| start.saturating_add(max_ns.saturating_mul(2)));
    let end = loop {
        if let Some(reason) = stop_reason(s, rec.issued(), last_rel, k) {
            break reason;
        }
        let t = start.saturating_add(arrivals.next_offset_ns());
        if hard_end.is_some_and(|h| t > h) {
            break EndReason::MaxDuration;
        }
        // Wait for the arrival, letting an asynchronous SUT report meanwhile.
        loop {
            let now = clock.now_ns();
            if now >= t {
                break;
            }
            sut.poll(&mut Responder {
                clock,
                rec: &mut rec,
                progress: waiter.progress,
            });
            if clock.is_virtual() || t - now < 100_000 {
                clock.wait_until(t);
            } else {
                std::thread::sleep(Duration::from_nanos((t - now) / 2));
            }
        }
        if let Some(to) = waiter.timeout_ns {
            while oldest < rec.complete.len() && rec.is_complete(oldest) {
                oldest += 1;
            }
            if oldest < rec.complete.len() && clock.now_ns() >= rec.issue_of(oldest) + to {
                return finish(rec, start, EndReason::Timeout, Some(oldest as u64));
            }
        }
        let id = rec.issued();
        let q = Query {
            id,
            sample_index: seq.next_sample(),
        };
        rec.push(t);
        last_rel = Some(t - start);
        sut.issue_queries(
            std::slice::from_ref(&q),
            &mut Responder {
                clock,
                rec: &mut rec,
                progress: waiter.progress,
            },
        );
    };
    sut.flush_queries(&mut Responder {
        clock,
        rec: &mut rec,
        progress: waiter.progress,
    });
    let n = rec.issued();
    if let WaitOutcome::TimedOut(t) =
        waiter.wait(sut, &mut rec, &mut oldest, &|r: &Records| r.completed >= n)
    {
        return finish(rec, start, EndReason::Timeout, Some(t));
    }
    finish(rec, start, end, None)
}

fn run_offline(
    sut: &mut dyn SystemUnderTest,
    s: &TestSettings,
    loaded: &[u64],
    plan: &SamplePlan,
    waiter: &Waiter<'_>,
) -> PassRecords {
    let clock = waiter.clock;
    let n = offline_sample_count(s, loaded.len() as u64);
    let mut seq = SampleSeq::new(loaded, plan);
    let start = clock.now_ns();
    waiter.progress.pass_started(Phase::Timed, Some(n), start);
    let mut rec = Records {
        single_issue: Some(start),
        ..Records::default()
    };
    rec.complete.reserve_exact(n as usize);
    let mut chunk = Vec::with_capacity(OFFLINE_ISSUE_CHUNK);
    let mut id = 0u64;
    while id < n {
        chunk.clear();
        let end = (id + OFFLINE_ISSUE_CHUNK as u64).min(n);
        for q in id..end {
            chunk.push(Query {
                id: q,
                sample_index: seq.next_sample(),
            });
            rec.push(start);
        }
        sut.issue_queries(
            &chunk,
            &mut Responder {
                clock,
                rec: &mut rec,
                progress: waiter.progress,
            },
        );
        id = end;
    }
    sut.flush_queries(&mut Responder {
        clock,
        rec: &mut rec,
        progress: waiter.progress,
    });
    let mut oldest = 0usize;
    if let WaitOutcome::TimedOut(t) =
        waiter.wait(sut, &mut rec, &mut oldest, &|r: &Records| r.completed >= n)
    {
        return finish(rec, start, EndReason::Timeout, Some(t));
    }
    let reason = if s.max_query_count > 0 && n >= s.max_query_count {
        EndReason::MaxQueries
    } else {
        EndReason::Natural
    };
    finish(rec, start, reason, None)
}
