//! Warm-up queries: `n` queries issued one at a time after the performance sample set is
//! loaded and before the timed pass starts, so caches, page tables and clocks settle first.
//! They are never part of the pass: they have records of their own, their sample choice
//! draws nothing from LoadGen's generators (the loaded set in load order, cycled), and the
//! timed pass's ids, samples, counts, percentiles and early stopping are exactly those of a
//! run without warm-up. LoadGen has no warm-up phase; this is PocketPerf's addition
//! (docs/SCENARIOS.md, "Warm-up"), logged in the detail log under `pocketperf_warmup_*`.

use crate::engine::{WaitOutcome, Waiter};
use crate::error::{Error, Result};
use crate::sut::{Query, Records, Responder, SystemUnderTest};

/// One warm-up query as the SUT answered it (times on the run's clock, ns).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WarmupQuery {
    /// Warm-up id (0-based; the timed pass numbers its queries from 0 again).
    pub id: u64,
    pub sample_index: u64,
    pub issue_ns: u64,
    pub first_token_ns: Option<u64>,
    /// `None` when the SUT reported the query as failed.
    pub complete_ns: Option<u64>,
    pub tokens: u64,
}

impl WarmupQuery {
    pub fn latency_ns(&self) -> Option<u64> {
        self.complete_ns.map(|c| c.saturating_sub(self.issue_ns))
    }

    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token_ns.map(|f| f.saturating_sub(self.issue_ns))
    }
}

/// Issues `n` warm-up queries, one at a time, each waited for (with the run's query timeout).
pub(crate) fn run_warmup(
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

/// The detail log's warm-up lines: the count, then one line per query with its latencies.
pub(crate) fn log_warmup(d: &mut crate::logs::Detail, warmup: &[WarmupQuery]) {
    d.log(
        "pocketperf_warmup_query_count",
        &warmup.len().to_string(),
        0.0,
    );
    for w in warmup {
        let v = serde_json::json!({
            "id": w.id,
            "sample_index": w.sample_index,
            "latency_ns": w.latency_ns(),
            "ttft_ns": w.ttft_ns(),
            "tokens": w.tokens,
        });
        d.log("pocketperf_warmup_query", &v.to_string(), 0.0);
    }
}
