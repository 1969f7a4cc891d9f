//! A null system under test and an empty sample library: the engine's own cost, measured.
//!
//! [`NullSut`] completes every query inside `issue_queries`, on the engine's thread, with no
//! output, so a run's latencies and query rate are the harness's overhead alone. It is what
//! `pocketperf scenario-bench`, the criterion bench and the side-by-side comparison with
//! LoadGen's own null SUT (bench/loadgen-null-sut.py) drive. [`NullQsl`] holds no data.

use crate::sut::{QslError, Query, QuerySampleLibrary, Responder, SystemUnderTest};

/// Completes each query the moment it is issued; optionally reports `tokens` output tokens
/// (first token and completion at the same instant) to exercise the token bookkeeping.
#[derive(Debug, Default, Clone)]
pub struct NullSut {
    /// Output tokens reported per query (0 = none).
    pub tokens: u64,
    /// Queries seen.
    pub issued: u64,
}

impl NullSut {
    /// A null SUT that reports no tokens.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SystemUnderTest for NullSut {
    fn name(&self) -> &str {
        "NullSUT"
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        self.issued += queries.len() as u64;
        for q in queries {
            if self.tokens > 0 {
                let t = responder.now_ns();
                responder.first_token_at(q.id, t);
                responder.complete_at(q.id, t, self.tokens, None);
            } else {
                responder.complete(q.id, 0, None);
            }
        }
    }
}

/// A sample library of `total` samples (`performance` of them loadable) that holds nothing.
#[derive(Debug, Clone, Copy)]
pub struct NullQsl {
    /// Samples in the library.
    pub total: u64,
    /// Samples that fit in memory.
    pub performance: u64,
}

impl QuerySampleLibrary for NullQsl {
    fn name(&self) -> &str {
        "NullQSL"
    }
    fn total_sample_count(&self) -> u64 {
        self.total
    }
    fn performance_sample_count(&self) -> u64 {
        self.performance
    }
    fn load_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}
