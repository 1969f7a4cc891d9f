//! Shared test helpers: locating the shared reference material and simulated SUT/QSL.
#![allow(dead_code)]

use pocketperf_scenarios::{QslError, Query, QuerySampleLibrary, Responder, SystemUnderTest};

pub use pocketperf_testkit::shared_dir;

/// Reads a shared file or fails with a clear message.
pub fn read_shared(rel: &str) -> String {
    let p = shared_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "missing shared reference file {} ({e}); set POCKETPERF_SHARED to the shared folder",
            p.display()
        )
    })
}

/// A QSL of `total` samples with `perf` performance samples that records loads.
pub struct TestQsl {
    pub total: u64,
    pub perf: u64,
    pub loaded: Vec<u64>,
    pub unloaded: Vec<u64>,
}

impl TestQsl {
    pub fn new(total: u64, perf: u64) -> Self {
        TestQsl {
            total,
            perf,
            loaded: Vec::new(),
            unloaded: Vec::new(),
        }
    }
}

impl QuerySampleLibrary for TestQsl {
    fn name(&self) -> &str {
        "TestQSL"
    }
    fn total_sample_count(&self) -> u64 {
        self.total
    }
    fn performance_sample_count(&self) -> u64 {
        self.perf
    }
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        self.loaded.extend_from_slice(indices);
        Ok(())
    }
    fn unload_samples(&mut self, indices: &[u64]) -> Result<(), QslError> {
        self.unloaded.extend_from_slice(indices);
        Ok(())
    }
}

/// Latency model of the simulated SUT: per query id → (ttft_ns, tokens, per-token ns) or a
/// plain latency.
pub type LatencyFn = Box<dyn Fn(u64) -> SimQuery>;

#[derive(Debug, Clone, Copy)]
pub struct SimQuery {
    /// Total latency when not in token mode (ignored when `tokens > 0`).
    pub latency_ns: u64,
    /// First-token delay (token mode).
    pub ttft_ns: u64,
    /// Tokens to emit (0 = plain latency).
    pub tokens: u64,
    /// Gap between tokens after the first.
    pub gap_ns: u64,
    /// Never complete this query.
    pub hang: bool,
}

impl SimQuery {
    pub fn plain(latency_ns: u64) -> Self {
        SimQuery {
            latency_ns,
            ttft_ns: 0,
            tokens: 0,
            gap_ns: 0,
            hang: false,
        }
    }
    pub fn tokens(ttft_ns: u64, tokens: u64, gap_ns: u64) -> Self {
        SimQuery {
            latency_ns: 0,
            ttft_ns,
            tokens,
            gap_ns,
            hang: false,
        }
    }
}

/// A single-server simulated SUT on virtual time: each query starts when the previous one
/// finished (or at issue), and reports times in the future through `*_at`.
pub struct SimSut {
    pub model: LatencyFn,
    pub busy_until: u64,
    pub stream_tokens: bool,
    pub issued: Vec<Query>,
    pub output: bool,
    /// Infinite servers: every query starts at its issue time (no queueing).
    pub parallel: bool,
}

impl SimSut {
    pub fn new(model: LatencyFn) -> Self {
        SimSut {
            model,
            busy_until: 0,
            stream_tokens: true,
            issued: Vec::new(),
            output: false,
            parallel: false,
        }
    }
}

impl SystemUnderTest for SimSut {
    fn name(&self) -> &str {
        "SimSUT"
    }
    fn issue_queries(&mut self, queries: &[Query], r: &mut Responder<'_>) {
        for q in queries {
            self.issued.push(*q);
            let m = (self.model)(q.id);
            if m.hang {
                continue;
            }
            let start = if self.parallel {
                r.now_ns()
            } else {
                r.now_ns().max(self.busy_until)
            };
            let out = self.output.then(|| q.sample_index.to_le_bytes());
            let out = out.as_ref().map(|b| &b[..]);
            let done = if m.tokens == 0 {
                let done = start + m.latency_ns;
                r.complete_at(q.id, done, 0, out);
                done
            } else {
                let first = start + m.ttft_ns;
                let mut t = first;
                if self.stream_tokens {
                    for k in 0..m.tokens {
                        if k > 0 {
                            t += m.gap_ns;
                        }
                        r.token_at(q.id, t);
                    }
                } else {
                    r.first_token_at(q.id, first);
                    t = first + m.gap_ns * (m.tokens - 1);
                }
                r.complete_at(q.id, t, m.tokens, out);
                t
            };
            self.busy_until = done;
        }
    }
}
